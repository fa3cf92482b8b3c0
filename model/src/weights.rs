//! The model's weights on the device: every tensor the graph reads, checked
//! against the shape the config implies, converted to the storage the chosen
//! quantization wants, and uploaded once.
use crate::checkpoint::{reserve, Checkpoint, HostRows, HostTensor};
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::quant::Quant;
use crate::tensors::{ModelTensors, TensorSpec};
use crate::tp::{SliceSpec, TpPlan};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::Arc;
use switchyard_core::codec::{bytes, fp8, nvfp4};
use switchyard_core::{Backend, DeviceBuffer};
use switchyard_kernels::gemm::w4a16::{Fp4Weight, DECODE_MAX_M};
use switchyard_kernels::moe::expert::ExpertWeights;

/// A linear layer `y = x · Wᵀ`, `W` `[n, k]` in the HF layout.
pub enum Linear {
    /// bf16 weights `[n, k]`.
    Bf16 {
        /// The weights.
        w: DeviceBuffer,
        /// Output features.
        n: usize,
        /// Input features.
        k: usize,
    },
    /// NVFP4 weights in the K-major W4A16 layout (row stride n).
    Nvfp4 {
        /// Codes `[k/2, n]`.
        bq: DeviceBuffer,
        /// Block scales `[k/16, n]`.
        bs: DeviceBuffer,
        /// Global scale.
        scale2: f32,
        /// Output features.
        n: usize,
        /// Input features.
        k: usize,
    },
}

impl Linear {
    /// Output features.
    pub fn n(&self) -> usize {
        match self {
            Linear::Bf16 { n, .. } | Linear::Nvfp4 { n, .. } => *n,
        }
    }

    /// The W4A16 view of an NVFP4 weight.
    pub fn fp4(&self) -> Option<Fp4Weight> {
        match self {
            Linear::Nvfp4 { bq, bs, scale2, n, .. } => Some(Fp4Weight { bq: bq.region(), bs: bs.region(), scale2: *scale2, ldb: *n }),
            Linear::Bf16 { .. } => None,
        }
    }
}

/// The attention block's q, k and v projections.
pub enum AttnProj {
    /// bf16 q, k and v weights stacked in one `[nq + nk + nv, hidden]`
    /// buffer (rows of q, then k, then v; `nv = 0` when V = K): at decode
    /// one weight stream computes all three (`dense_gemv_bf16` with a
    /// segmented output), and each row range is still a plain `[n, hidden]`
    /// weight for the prefill GEMMs.
    Stacked {
        /// The stacked weights.
        w: DeviceBuffer,
        /// Output features of q, k and v (0 when V = K).
        n: [usize; 3],
        /// Input features.
        k: usize,
    },
    /// NVFP4 q, k and v quantised as one `[nq + nk + nv, hidden]` matrix
    /// (one global scale, as for the stacked gate/up), so that at batch 1 a
    /// single W4A16 decode launch writes q, then k, then v; see
    /// [`StackedFp4`].
    StackedFp4(StackedFp4),
    /// One weight per projection (a source that does not stack).
    Separate {
        /// `self_attn.q_proj`.
        q: Linear,
        /// `self_attn.k_proj`; `None` on a KV-shared layer.
        k: Option<Linear>,
        /// `self_attn.v_proj`; `None` when V = K.
        v: Option<Linear>,
    },
}

/// NVFP4 q, k and v weights in one K-major matrix: columns of q, then k,
/// then v. The code and scale buffers carry one zero row past the matrix,
/// so that a segment's columns are a W4A16 `_ldb` view (start at the
/// segment's first column, row stride the total width) whose `[K/2, ldb]`
/// extent lies inside the buffer.
pub struct StackedFp4 {
    /// The stacked weight (`n` = the total width).
    pub w: Linear,
    /// Output features of q, k and v (0 when absent).
    pub n: [usize; 3],
    /// Input features.
    pub k: usize,
    /// For a pass of 2..=[`DECODE_MAX_M`] rows, whose stacked output is
    /// `[m, total]` rather than the `[m, nq]`, `[m, nk]`, `[m, nv]` the
    /// attention reads: i32 row-gather tables over `chunk`-wide pieces
    /// (`chunk` divides every segment), segment after segment, each for
    /// [`DECODE_MAX_M`] rows; piece `i` of segment `s` comes from piece
    /// `(i / (n_s/chunk))·(total/chunk) + (start_s + i % (n_s/chunk))`, the
    /// same for any row count. `None` with one segment (no reordering).
    pub gather: Option<(DeviceBuffer, usize)>,
}

impl StackedFp4 {
    /// The stack of `n = [nq, nk, nv]` (each a multiple of 16) over `w`,
    /// an NVFP4 weight of `Σ n` columns whose buffers hold
    /// [`StackedFp4::padded`] bytes; `upload` places the gather table.
    pub fn new(w: Linear, n: [usize; 3], k: usize, upload: impl FnOnce(&[u8]) -> Result<DeviceBuffer>) -> Result<Self> {
        let gather = match Self::gather_table(n) {
            Some((t, chunk)) => Some((upload(&bytes::i32_bytes(&t))?, chunk)),
            None => None,
        };
        Ok(StackedFp4 { w, n, k, gather })
    }

    /// The K-major codes and scales of the quantised `[Σ n, k]` matrix `q`,
    /// each with its zero padding row.
    pub fn padded(q: &nvfp4::Nvfp4Matrix, total: usize) -> (Vec<u8>, Vec<u8>) {
        let (mut packed, mut scales) = q.k_major(total);
        packed.resize(packed.len() + total, 0);
        scales.resize(scales.len() + total, 0);
        (packed, scales)
    }

    /// The gather tables and their piece width, or `None` with one segment.
    pub fn gather_table(n: [usize; 3]) -> Option<(Vec<i32>, usize)> {
        if n.iter().filter(|&&x| x > 0).count() < 2 {
            return None;
        }
        let gcd = |mut a: usize, mut b: usize| {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        };
        let chunk = n.iter().fold(0, |g, &x| gcd(g, x));
        let per_row = n.iter().sum::<usize>() / chunk;
        let mut t = Vec::with_capacity(DECODE_MAX_M * per_row);
        let mut start = 0;
        for &w in &n {
            let a = w / chunk;
            t.extend((0..DECODE_MAX_M * a).map(|i| ((i / a) * per_row + start + i % a) as i32));
            start += a;
        }
        Some((t, chunk))
    }

    /// Segment `s`'s pieces in the gather table: (first entry, pieces a row).
    pub fn gather_segment(&self, s: usize) -> Option<(usize, usize)> {
        let (_, chunk) = self.gather.as_ref()?;
        let first = self.n[..s].iter().map(|w| DECODE_MAX_M * w / chunk).sum();
        Some((first, self.n[s] / chunk))
    }
}

/// The tied token table, used by the embedding gather and the LM head.
pub enum Embedding {
    /// bf16 `[vocab, hidden]`.
    Bf16(DeviceBuffer),
    /// fp8 e4m3 codes `[vocab, hidden]` with one f32 scale per row.
    Fp8 {
        /// Codes.
        codes: DeviceBuffer,
        /// Row scales f32 `[vocab]`.
        row_scale: DeviceBuffer,
    },
}

/// One set of expert weights `[e, N, K]`.
pub struct Experts {
    bufs: Vec<DeviceBuffer>,
    fp4: bool,
}

impl Experts {
    /// The kernel's view.
    pub fn weights(&self) -> ExpertWeights {
        if self.fp4 {
            ExpertWeights::Nvfp4 { wq: self.bufs[0].region(), ws: self.bufs[1].region(), scale2: self.bufs[2].region() }
        } else {
            ExpertWeights::Bf16 { w: self.bufs[0].region() }
        }
    }
}

/// The MoE branch of one layer.
pub struct MoeWeights {
    /// `router.scale` bf16 `[hidden]`.
    pub router_scale: DeviceBuffer,
    /// `router.proj.weight` bf16 `[experts, hidden]` (kept bf16: the router
    /// GEMM's contract is bit-exactness).
    pub router_proj: DeviceBuffer,
    /// `router.per_expert_scale` f32 `[experts]`.
    pub per_expert_scale: DeviceBuffer,
    /// `pre_feedforward_layernorm_2`.
    pub pre_ff_norm_2: DeviceBuffer,
    /// `post_feedforward_layernorm_1`.
    pub post_ff_norm_1: DeviceBuffer,
    /// `post_feedforward_layernorm_2`.
    pub post_ff_norm_2: DeviceBuffer,
    /// `experts.gate_up_proj` `[e, 2·I, hidden]`.
    pub gate_up: Experts,
    /// `experts.down_proj` `[e, hidden, I]`.
    pub down: Experts,
}

/// One decoder layer.
pub struct LayerWeights {
    /// `input_layernorm`.
    pub input_norm: DeviceBuffer,
    /// `post_attention_layernorm`.
    pub post_attn_norm: DeviceBuffer,
    /// `pre_feedforward_layernorm`.
    pub pre_ff_norm: DeviceBuffer,
    /// `post_feedforward_layernorm`.
    pub post_ff_norm: DeviceBuffer,
    /// `self_attn.q_proj`, `k_proj` and `v_proj` (no v when V = K,
    /// `attention_k_eq_v` on a full layer).
    pub qkv: AttnProj,
    /// `self_attn.o_proj`.
    pub o: Linear,
    /// `self_attn.q_norm` `[head_dim]`.
    pub q_norm: DeviceBuffer,
    /// `self_attn.k_norm` `[head_dim]`; `None` on a KV-shared layer.
    pub k_norm: Option<DeviceBuffer>,
    /// `mlp.gate_proj` and `mlp.up_proj` stacked: `[2·I, hidden]`, gate rows first
    /// (the layout `gelu_mul` reads), so one GEMM computes both.
    pub gate_up: Linear,
    /// `mlp.down_proj` `[hidden, I]`.
    pub down: Linear,
    /// `layer_scalar` f32 `[1]`.
    pub layer_scalar: DeviceBuffer,
    /// The MoE branch.
    pub moe: Option<MoeWeights>,
    /// The per-layer-input branch (E2B / E4B).
    pub per_layer: Option<PerLayerWeights>,
}

/// A layer's per-layer-input branch: `gate` `[P, hidden]`, `projection`
/// `[hidden, P]`, and `post_norm` (`post_per_layer_input_norm`).
pub struct PerLayerWeights {
    /// `per_layer_input_gate`.
    pub gate: Linear,
    /// `per_layer_projection`.
    pub projection: Linear,
    /// `post_per_layer_input_norm` `[hidden]`.
    pub post_norm: DeviceBuffer,
}

/// The model-level per-layer-input weights.
pub struct PerLayerInputWeights {
    /// `embed_tokens_per_layer` `[vocab_per_layer, layers · P]`, on the host:
    /// each pass gathers its tokens' rows and uploads only those.
    pub table: HostRows,
    /// `per_layer_model_projection` `[layers · P, hidden]`.
    pub model_projection: Linear,
    /// `per_layer_projection_norm` `[P]`.
    pub projection_norm: DeviceBuffer,
}

/// Every weight of the model, on one backend.
pub struct Weights {
    /// The tied table.
    pub embed: Embedding,
    /// The final `norm`.
    pub final_norm: DeviceBuffer,
    /// Decoder layers.
    pub layers: Vec<LayerWeights>,
    /// The per-layer-input table and projection (E2B / E4B).
    pub per_layer_input: Option<PerLayerInputWeights>,
    /// Bytes uploaded.
    pub device_bytes: usize,
}

/// Loads above this many bytes show a progress bar (when stderr is a terminal).
const PROGRESS_BYTES: usize = 256 << 20;

struct Loader<'a> {
    ck: &'a Checkpoint,
    be: &'a Arc<dyn Backend>,
    quant: Quant,
    /// A tensor-parallel rank's slices: tensors named here are read in part.
    slices: Option<&'a HashMap<String, SliceSpec>>,
    uploaded: usize,
    bar: Option<indicatif::ProgressBar>,
}

impl Loader<'_> {
    fn upload(&mut self, data: &[u8]) -> Result<DeviceBuffer> {
        self.uploaded += data.len();
        Ok(DeviceBuffer::from_bytes(self.be, data)?)
    }

    fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<HostTensor> {
        let t = match self.slices.and_then(|s| s.get(name)) {
            None => self.ck.tensor(name, shape)?,
            Some(spec) => {
                let mut t = self.ck.tensor_slice(name, &spec.full, &spec.slice)?;
                if spec.zero_rows > 0 {
                    let row: usize = t.shape[1..].iter().product();
                    t.data.resize(t.data.len() + spec.zero_rows * row, 0);
                    t.shape[0] += spec.zero_rows;
                }
                if t.shape != shape {
                    return Err(Error::WrongShape { name: t.name, expected: shape.to_vec(), found: t.shape });
                }
                t
            }
        };
        if let Some(b) = &self.bar {
            b.inc(t.data.len() as u64 * 2);
        }
        Ok(t)
    }

    fn host(&mut self, t: &TensorSpec) -> Result<HostTensor> {
        self.tensor(&t.name, &t.shape)
    }

    /// A `[n, k]` weight from host bf16 bits: NVFP4 when asked for and the
    /// shape fits the W4A16 kernels (n, k multiples of 16), else bf16.
    fn linear_from(&mut self, name: &str, bits: &[u16], n: usize, k: usize) -> Result<Linear> {
        if self.quant.stores_nvfp4(n, k) {
            let mut vals = reserve(bits.len(), name)?;
            vals.extend(bits.iter().map(|&b| switchyard_core::codec::bf16_value(b)));
            let q = nvfp4::quantize(&vals, n, k).map_err(|e| Error::checkpoint(name, format!("nvfp4 quantization: {e}")))?;
            let (packed, scales) = q.k_major(n);
            return Ok(Linear::Nvfp4 { bq: self.upload(&packed)?, bs: self.upload(&scales)?, scale2: q.global_scale, n, k });
        }
        let mut bytes = reserve(bits.len().saturating_mul(2), name)?;
        bytes.extend(bits.iter().flat_map(|b| b.to_le_bytes()));
        Ok(Linear::Bf16 { w: self.upload(&bytes)?, n, k })
    }
}

/// A config asks for per-layer inputs (perhaps through HF's default width
/// of 256 when `hidden_size_per_layer_input` is absent) that the checkpoint
/// lacks. HF would start the table from random values, with a warning; a
/// run on random per-layer inputs is not useful, so this is an error that
/// names the tensor and the key to change.
fn missing_per_layer_table(origin: &str, table: &TensorSpec) -> Error {
    Error::checkpoint(
        origin,
        format!(
            "tensor `{}` {:?} is missing, but config.json's hidden_size_per_layer_input (HF's default 256 when the key is \
             absent) asks for per-layer inputs; set it to 0 for a checkpoint without them",
            table.name, table.shape
        ),
    )
}

/// Where weight values come from: a checkpoint ([`Weights::load`]) or
/// random device data (bench-model). [`Weights::assemble`] walks the
/// tensor list and asks the source for each tensor in the form the graph
/// stores it.
pub trait WeightSource {
    /// A tensor stored as raw bf16 (norm weights, the router projection).
    fn bf16(&mut self, t: &TensorSpec) -> Result<DeviceBuffer>;
    /// A tensor stored as f32 (`layer_scalar`, `per_expert_scale`).
    fn f32(&mut self, t: &TensorSpec) -> Result<DeviceBuffer>;
    /// A linear layer `[n, k]`, in the storage the quantization wants.
    fn linear(&mut self, t: &TensorSpec) -> Result<Linear>;
    /// The dense MLP's gate and up projections stacked into one `[2·I, k]`
    /// linear, gate rows first (the layout `gelu_mul` reads).
    fn gate_up(&mut self, gate: &TensorSpec, up: &TensorSpec) -> Result<Linear>;
    /// The attention projections (`k` and `v` absent on a KV-shared layer,
    /// `v` absent when V = K). By default one linear each; a source that
    /// can stack bf16 weights should.
    fn attention(&mut self, q: &TensorSpec, k: Option<&TensorSpec>, v: Option<&TensorSpec>) -> Result<AttnProj> {
        Ok(AttnProj::Separate { q: self.linear(q)?, k: k.map(|k| self.linear(k)).transpose()?, v: v.map(|v| self.linear(v)).transpose()? })
    }
    /// A token table kept on the host and read a few rows per pass.
    fn host_rows(&mut self, t: &TensorSpec) -> Result<HostRows>;
    /// Stacked expert weights `[e, n, k]`.
    fn experts(&mut self, t: &TensorSpec) -> Result<Experts>;
    /// The tied token table.
    fn embedding(&mut self, t: &TensorSpec) -> Result<Embedding>;
    /// Bytes placed on the device so far.
    fn device_bytes(&self) -> usize;
}

impl WeightSource for Loader<'_> {
    fn bf16(&mut self, t: &TensorSpec) -> Result<DeviceBuffer> {
        let h = self.host(t)?;
        self.upload(&h.bytes()?)
    }

    fn f32(&mut self, t: &TensorSpec) -> Result<DeviceBuffer> {
        let v = self.ck.tensor_f32(&t.name, &t.shape)?;
        self.upload(&bytes::f32_bytes(&v))
    }

    fn linear(&mut self, t: &TensorSpec) -> Result<Linear> {
        let h = self.host(t)?;
        self.linear_from(&h.name, &h.data, t.shape[0], t.shape[1])
    }

    fn gate_up(&mut self, gate: &TensorSpec, up: &TensorSpec) -> Result<Linear> {
        let (g, u) = (self.host(gate)?, self.host(up)?);
        let mut stacked = reserve(g.data.len().saturating_add(u.data.len()), &g.name)?;
        stacked.extend(g.data.iter().chain(&u.data).copied());
        self.linear_from(&g.name, &stacked, gate.shape[0] + up.shape[0], gate.shape[1])
    }

    fn attention(&mut self, q: &TensorSpec, k: Option<&TensorSpec>, v: Option<&TensorSpec>) -> Result<AttnProj> {
        let n = [q.shape[0], k.map_or(0, |k| k.shape[0]), v.map_or(0, |v| v.shape[0])];
        let cols = q.shape[1];
        if self.quant == Quant::Nvfp4 {
            // The segments' column views need each to start on a 16-byte boundary.
            if !(n.iter().all(|&w| w % 16 == 0) && self.quant.stores_nvfp4(n.iter().sum(), cols)) {
                return Ok(AttnProj::Separate {
                    q: self.linear(q)?,
                    k: k.map(|k| self.linear(k)).transpose()?,
                    v: v.map(|v| self.linear(v)).transpose()?,
                });
            }
            let parts: Vec<HostTensor> = [Some(q), k, v].into_iter().flatten().map(|t| self.host(t)).collect::<Result<_>>()?;
            let total = parts.iter().fold(0usize, |acc, p| acc.saturating_add(p.data.len()));
            let mut vals = reserve(total, &parts[0].name)?;
            vals.extend(parts.iter().flat_map(|p| p.data.iter().map(|&b| switchyard_core::codec::bf16_value(b))));
            let name = &parts[0].name;
            let mat =
                nvfp4::quantize(&vals, n.iter().sum(), cols).map_err(|e| Error::checkpoint(name, format!("nvfp4 quantization: {e}")))?;
            let total = n.iter().sum();
            let (packed, scales) = StackedFp4::padded(&mat, total);
            let w = Linear::Nvfp4 { bq: self.upload(&packed)?, bs: self.upload(&scales)?, scale2: mat.global_scale, n: total, k: cols };
            return Ok(AttnProj::StackedFp4(StackedFp4::new(w, n, cols, |d| self.upload(d))?));
        }
        let parts: Vec<HostTensor> = [Some(q), k, v].into_iter().flatten().map(|t| self.host(t)).collect::<Result<_>>()?;
        let total = parts.iter().fold(0usize, |acc, p| acc.saturating_add(p.data.len()));
        let mut stacked = reserve(total.saturating_mul(2), &parts[0].name)?;
        stacked.extend(parts.iter().flat_map(|p| p.data.iter().flat_map(|b| b.to_le_bytes())));
        Ok(AttnProj::Stacked { w: self.upload(&stacked)?, n, k: cols })
    }

    fn experts(&mut self, t: &TensorSpec) -> Result<Experts> {
        let (e, n, k) = (t.shape[0], t.shape[1], t.shape[2]);
        let h = self.host(t)?;
        if self.quant.stores_nvfp4(n, k) {
            let vals = h.to_f32()?;
            let (mut wq, mut ws, mut s2) = (Vec::new(), Vec::new(), Vec::with_capacity(e));
            for x in 0..e {
                let q = nvfp4::quantize(&vals[x * n * k..(x + 1) * n * k], n, k)
                    .map_err(|err| Error::checkpoint(&h.name, format!("nvfp4 quantization of expert {x}: {err}")))?;
                let (p, s) = q.k_major(n);
                wq.extend(p);
                ws.extend(s);
                s2.push(q.global_scale);
            }
            return Ok(Experts::nvfp4(self.upload(&wq)?, self.upload(&ws)?, self.upload(&bytes::f32_bytes(&s2))?));
        }
        Ok(Experts { bufs: vec![self.upload(&h.bytes()?)?], fp4: false })
    }

    fn embedding(&mut self, t: &TensorSpec) -> Result<Embedding> {
        let (v, h) = (t.shape[0], t.shape[1]);
        let host = self.host(t)?;
        if self.quant == Quant::Fp8Embed {
            let (codes, scales) = fp8::quantize_rows(&host.to_f32()?, v, h);
            return Ok(Embedding::Fp8 { codes: self.upload(&codes)?, row_scale: self.upload(&bytes::f32_bytes(&scales))? });
        }
        Ok(Embedding::Bf16(self.upload(&host.bytes()?)?))
    }

    fn host_rows(&mut self, t: &TensorSpec) -> Result<HostRows> {
        self.ck.rows(&t.name, &t.shape).map_err(|e| match e {
            Error::MissingTensor { .. } => missing_per_layer_table(&self.ck.origin, t),
            other => other,
        })
    }

    fn device_bytes(&self) -> usize {
        self.uploaded
    }
}

impl Experts {
    /// bf16 experts in one buffer `[e, n, k]`.
    pub fn bf16(w: DeviceBuffer) -> Self {
        Experts { bufs: vec![w], fp4: false }
    }

    /// NVFP4 experts in the K-major W4A16 layout: codes `[e, k/2, n]`,
    /// block scales `[e, k/16, n]`, f32 global scales `[e]`.
    pub fn nvfp4(codes: DeviceBuffer, scales: DeviceBuffer, global_scales: DeviceBuffer) -> Self {
        Experts { bufs: vec![codes, scales, global_scales], fp4: true }
    }
}

impl Weights {
    /// Reads, checks, converts and uploads every weight `cfg` calls for.
    ///
    /// Before anything is read or uploaded, the sizes the config declares
    /// are checked against the bytes the checkpoint actually holds (at least
    /// 2 bytes per element: BF16 / F16 are the narrowest dtypes accepted), so
    /// a config claiming, say, hidden_size = 10^9 against a small file is
    /// refused up front rather than overflowing a size computation.
    pub fn load(ck: &Checkpoint, cfg: &ModelConfig, be: &Arc<dyn Backend>, quant: Quant) -> Result<Self> {
        Self::load_from(ck, ModelTensors::of(cfg), None, be, quant)
    }

    /// The shard of tensor-parallel rank `plan.rank`: [`Weights::load`] over
    /// the rank's tensor list ([`TpPlan::local_tensors`]), each split tensor
    /// read as its slice only ([`Checkpoint::tensor_slice`]).
    pub fn load_shard(ck: &Checkpoint, cfg: &ModelConfig, plan: &TpPlan, be: &Arc<dyn Backend>, quant: Quant) -> Result<Self> {
        let (tensors, slices) = plan.local_tensors(cfg);
        Self::load_from(ck, tensors, Some(&slices), be, quant)
    }

    fn load_from(
        ck: &Checkpoint,
        tensors: ModelTensors,
        slices: Option<&HashMap<String, SliceSpec>>,
        be: &Arc<dyn Backend>,
        quant: Quant,
    ) -> Result<Self> {
        let total = ck.data_bytes();
        // Named before the size check below, which an absent table (262144
        // rows under HF's default width) would otherwise trip with a
        // message that does not say why.
        if let Some(p) = &tensors.per_layer_input {
            if !ck.contains(&p.table.name) {
                return Err(missing_per_layer_table(&ck.origin, &p.table));
            }
        }
        let need = tensors.elements().map(|e| e.saturating_mul(2));
        // Loose on purpose (4x plus 1 MiB): a checkpoint that merely lacks a
        // tensor or two still gets the specific MissingTensor / WrongShape
        // error from the per-tensor checks below; this only refuses claims
        // that no file of this size can back, before any product of them is
        // computed in usize or anything is allocated.
        if need.is_none_or(|n| n > (total as u128) * 4 + (1 << 20)) {
            let need = need.map_or_else(|| "more than 2^128".to_string(), |n| n.to_string());
            return Err(Error::checkpoint(
                &ck.origin,
                format!(
                    "config.json declares at least {need} bytes of weights, but the checkpoint holds only {total} bytes of tensor data"
                ),
            ));
        }
        let bar = (total > PROGRESS_BYTES && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(total as u64);
            b.set_style(
                indicatif::ProgressStyle::with_template("loading {msg} [{bar:40}] {bytes}/{total_bytes} ({eta})")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b.set_message(ck.origin.clone());
            b
        });
        let mut l = Loader { ck, be, quant, slices, uploaded: 0, bar };
        let weights = Self::assemble(&tensors, &mut l)?;
        if let Some(b) = &l.bar {
            b.finish_and_clear();
        }
        Ok(weights)
    }

    /// Every weight of `tensors`, each from `src` in the form the graph
    /// stores it.
    pub fn assemble(tensors: &ModelTensors, src: &mut dyn WeightSource) -> Result<Self> {
        let embed = src.embedding(&tensors.embed)?;
        let final_norm = src.bf16(&tensors.final_norm)?;
        // Before the layers: a checkpoint without per-layer inputs under a
        // config that (perhaps by HF's default) asks for them fails on the
        // table, whose error says what to change.
        let per_layer_input = match &tensors.per_layer_input {
            Some(p) => Some(PerLayerInputWeights {
                table: src.host_rows(&p.table)?,
                model_projection: src.linear(&p.model_projection)?,
                projection_norm: src.bf16(&p.projection_norm)?,
            }),
            None => None,
        };
        let mut layers = Vec::with_capacity(tensors.layers.len());
        for t in &tensors.layers {
            layers.push(LayerWeights {
                input_norm: src.bf16(&t.input_norm)?,
                post_attn_norm: src.bf16(&t.post_attn_norm)?,
                pre_ff_norm: src.bf16(&t.pre_ff_norm)?,
                post_ff_norm: src.bf16(&t.post_ff_norm)?,
                qkv: src.attention(&t.q, t.k.as_ref(), t.v.as_ref())?,
                o: src.linear(&t.o)?,
                q_norm: src.bf16(&t.q_norm)?,
                k_norm: t.k_norm.as_ref().map(|n| src.bf16(n)).transpose()?,
                gate_up: src.gate_up(&t.gate, &t.up)?,
                down: src.linear(&t.down)?,
                layer_scalar: src.f32(&t.layer_scalar)?,
                moe: match &t.moe {
                    Some(m) => Some(MoeWeights {
                        router_scale: src.bf16(&m.router_scale)?,
                        // Kept bf16 whatever the quantization: the router GEMM's contract is bit-exactness.
                        router_proj: src.bf16(&m.router_proj)?,
                        per_expert_scale: src.f32(&m.per_expert_scale)?,
                        pre_ff_norm_2: src.bf16(&m.pre_ff_norm_2)?,
                        post_ff_norm_1: src.bf16(&m.post_ff_norm_1)?,
                        post_ff_norm_2: src.bf16(&m.post_ff_norm_2)?,
                        gate_up: src.experts(&m.gate_up)?,
                        down: src.experts(&m.down)?,
                    }),
                    None => None,
                },
                per_layer: match &t.per_layer {
                    Some(p) => Some(PerLayerWeights {
                        gate: src.linear(&p.gate)?,
                        projection: src.linear(&p.projection)?,
                        post_norm: src.bf16(&p.post_norm)?,
                    }),
                    None => None,
                },
            });
        }
        Ok(Weights { embed, final_norm, layers, per_layer_input, device_bytes: src.device_bytes() })
    }
}
