//! The model's weights on the device: every tensor the graph reads, checked
//! against the shape the config implies, converted to the storage the chosen
//! quantization wants, and uploaded once.
use crate::checkpoint::{Checkpoint, HostTensor};
use crate::config::{ModelConfig, MoeConfig};
use crate::error::{Error, Result};
use crate::quant::Quant;
use std::io::IsTerminal;
use std::sync::Arc;
use switchyard_core::codec::{bytes, fp8, nvfp4};
use switchyard_core::{Backend, DeviceBuffer};
use switchyard_kernels::gemm::w4a16::Fp4Weight;
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
            ExpertWeights::Nvfp4 { wq: self.bufs[0].addr(), ws: self.bufs[1].addr(), scale2: self.bufs[2].addr() }
        } else {
            ExpertWeights::Bf16 { w: self.bufs[0].addr() }
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
    /// `self_attn.q_proj`.
    pub q: Linear,
    /// `self_attn.k_proj`.
    pub k: Linear,
    /// `self_attn.v_proj`; `None` when V = K (`attention_k_eq_v` on a full layer).
    pub v: Option<Linear>,
    /// `self_attn.o_proj`.
    pub o: Linear,
    /// `self_attn.q_norm` `[head_dim]`.
    pub q_norm: DeviceBuffer,
    /// `self_attn.k_norm` `[head_dim]`.
    pub k_norm: DeviceBuffer,
    /// `mlp.gate_proj` and `mlp.up_proj` stacked: `[2·I, hidden]`, gate rows first
    /// (the layout `gelu_mul` reads), so one GEMM computes both.
    pub gate_up: Linear,
    /// `mlp.down_proj` `[hidden, I]`.
    pub down: Linear,
    /// `layer_scalar` f32 `[1]`.
    pub layer_scalar: DeviceBuffer,
    /// The MoE branch.
    pub moe: Option<MoeWeights>,
}

/// Every weight of the model, on one backend.
pub struct Weights {
    /// The tied table.
    pub embed: Embedding,
    /// The final `norm`.
    pub final_norm: DeviceBuffer,
    /// Decoder layers.
    pub layers: Vec<LayerWeights>,
    /// Bytes uploaded.
    pub device_bytes: usize,
}

/// Loads above this many bytes show a progress bar (when stderr is a terminal).
const PROGRESS_BYTES: usize = 256 << 20;

struct Loader<'a> {
    ck: &'a Checkpoint,
    be: &'a Arc<dyn Backend>,
    quant: Quant,
    uploaded: usize,
    bar: Option<indicatif::ProgressBar>,
}

impl Loader<'_> {
    fn upload(&mut self, data: &[u8]) -> Result<DeviceBuffer> {
        self.uploaded += data.len();
        Ok(DeviceBuffer::from_bytes(self.be, data)?)
    }

    fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<HostTensor> {
        let t = self.ck.tensor(name, shape)?;
        if let Some(b) = &self.bar {
            b.inc(t.data.len() as u64 * 2);
        }
        Ok(t)
    }

    fn bf16(&mut self, name: &str, shape: &[usize]) -> Result<DeviceBuffer> {
        let t = self.tensor(name, shape)?;
        self.upload(&t.bytes())
    }

    fn f32(&mut self, name: &str, shape: &[usize]) -> Result<DeviceBuffer> {
        let v = self.ck.tensor_f32(name, shape)?;
        self.upload(&bytes::f32_bytes(&v))
    }

    /// A `[n, k]` weight from host bf16 bits: NVFP4 when asked for and the
    /// shape fits the W4A16 kernels (n, k multiples of 16), else bf16.
    fn linear_from(&mut self, name: &str, bits: &[u16], n: usize, k: usize) -> Result<Linear> {
        if self.quant == Quant::Nvfp4 && n % 16 == 0 && k % nvfp4::BLOCK == 0 {
            let vals: Vec<f32> = bits.iter().map(|&b| switchyard_core::codec::bf16_value(b)).collect();
            let q = nvfp4::quantize(&vals, n, k).map_err(|e| Error::checkpoint(name, format!("nvfp4 quantization: {e}")))?;
            let (packed, scales) = q.k_major(n);
            return Ok(Linear::Nvfp4 { bq: self.upload(&packed)?, bs: self.upload(&scales)?, scale2: q.global_scale, n, k });
        }
        let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
        Ok(Linear::Bf16 { w: self.upload(&bytes)?, n, k })
    }

    fn linear(&mut self, name: &str, n: usize, k: usize) -> Result<Linear> {
        let t = self.tensor(name, &[n, k])?;
        self.linear_from(&t.name, &t.data, n, k)
    }

    fn experts(&mut self, name: &str, e: usize, n: usize, k: usize) -> Result<Experts> {
        let t = self.tensor(name, &[e, n, k])?;
        if self.quant == Quant::Nvfp4 && n % 16 == 0 && k % nvfp4::BLOCK == 0 {
            let vals = t.to_f32();
            let (mut wq, mut ws, mut s2) = (Vec::new(), Vec::new(), Vec::with_capacity(e));
            for x in 0..e {
                let q = nvfp4::quantize(&vals[x * n * k..(x + 1) * n * k], n, k)
                    .map_err(|err| Error::checkpoint(&t.name, format!("nvfp4 quantization of expert {x}: {err}")))?;
                let (p, s) = q.k_major(n);
                wq.extend(p);
                ws.extend(s);
                s2.push(q.global_scale);
            }
            let bufs = vec![self.upload(&wq)?, self.upload(&ws)?, self.upload(&bytes::f32_bytes(&s2))?];
            return Ok(Experts { bufs, fp4: true });
        }
        Ok(Experts { bufs: vec![self.upload(&t.bytes())?], fp4: false })
    }

    fn layer(&mut self, cfg: &ModelConfig, i: usize) -> Result<LayerWeights> {
        let spec = cfg.layers[i];
        let (h, nh, hd, nkv, inter) = (cfg.hidden_size, cfg.num_heads, spec.head_dim, spec.num_kv_heads, cfg.intermediate_size);
        let p = format!("layers.{i}.");
        let a = format!("{p}self_attn.");
        let gate = self.tensor(&format!("{p}mlp.gate_proj.weight"), &[inter, h])?;
        let up = self.tensor(&format!("{p}mlp.up_proj.weight"), &[inter, h])?;
        let stacked: Vec<u16> = gate.data.iter().chain(&up.data).copied().collect();
        Ok(LayerWeights {
            input_norm: self.bf16(&format!("{p}input_layernorm.weight"), &[h])?,
            post_attn_norm: self.bf16(&format!("{p}post_attention_layernorm.weight"), &[h])?,
            pre_ff_norm: self.bf16(&format!("{p}pre_feedforward_layernorm.weight"), &[h])?,
            post_ff_norm: self.bf16(&format!("{p}post_feedforward_layernorm.weight"), &[h])?,
            q: self.linear(&format!("{a}q_proj.weight"), nh * hd, h)?,
            k: self.linear(&format!("{a}k_proj.weight"), nkv * hd, h)?,
            v: if spec.k_eq_v { None } else { Some(self.linear(&format!("{a}v_proj.weight"), nkv * hd, h)?) },
            o: self.linear(&format!("{a}o_proj.weight"), h, nh * hd)?,
            q_norm: self.bf16(&format!("{a}q_norm.weight"), &[hd])?,
            k_norm: self.bf16(&format!("{a}k_norm.weight"), &[hd])?,
            gate_up: self.linear_from(&gate.name, &stacked, 2 * inter, h)?,
            down: self.linear(&format!("{p}mlp.down_proj.weight"), h, inter)?,
            layer_scalar: self.f32(&format!("{p}layer_scalar"), &[1])?,
            moe: match cfg.moe {
                Some(m) => Some(self.moe(&p, h, m)?),
                None => None,
            },
        })
    }

    fn moe(&mut self, p: &str, h: usize, m: MoeConfig) -> Result<MoeWeights> {
        let (e, im) = (m.num_experts, m.intermediate);
        Ok(MoeWeights {
            router_scale: self.bf16(&format!("{p}router.scale"), &[h])?,
            router_proj: self.bf16(&format!("{p}router.proj.weight"), &[e, h])?,
            per_expert_scale: self.f32(&format!("{p}router.per_expert_scale"), &[e])?,
            pre_ff_norm_2: self.bf16(&format!("{p}pre_feedforward_layernorm_2.weight"), &[h])?,
            post_ff_norm_1: self.bf16(&format!("{p}post_feedforward_layernorm_1.weight"), &[h])?,
            post_ff_norm_2: self.bf16(&format!("{p}post_feedforward_layernorm_2.weight"), &[h])?,
            gate_up: self.experts(&format!("{p}experts.gate_up_proj"), e, 2 * im, h)?,
            down: self.experts(&format!("{p}experts.down_proj"), e, h, im)?,
        })
    }

    fn embedding(&mut self, cfg: &ModelConfig) -> Result<Embedding> {
        let (v, h) = (cfg.vocab_size, cfg.hidden_size);
        let t = self.tensor("embed_tokens.weight", &[v, h])?;
        if self.quant == Quant::Fp8Embed {
            let (codes, scales) = fp8::quantize_rows(&t.to_f32(), v, h);
            return Ok(Embedding::Fp8 { codes: self.upload(&codes)?, row_scale: self.upload(&bytes::f32_bytes(&scales))? });
        }
        Ok(Embedding::Bf16(self.upload(&t.bytes())?))
    }
}

/// Elements of every tensor `cfg` makes the loader read, in u128 so that no
/// config, however absurd, overflows; `None` only past u128.
fn required_elements(cfg: &ModelConfig) -> Option<u128> {
    let u = |x: usize| x as u128;
    let (v, h, i) = (u(cfg.vocab_size), u(cfg.hidden_size), u(cfg.intermediate_size));
    // embed_tokens + final norm.
    let mut total = v.checked_mul(h)?.checked_add(h)?;
    for l in &cfg.layers {
        let (nh, hd, nkv) = (u(cfg.num_heads), u(l.head_dim), u(l.num_kv_heads));
        let q = nh.checked_mul(hd)?;
        let kv = nkv.checked_mul(hd)?;
        let attn = q.checked_mul(h)?.checked_mul(2)?.checked_add(kv.checked_mul(h)?.checked_mul(if l.k_eq_v { 1 } else { 2 })?)?;
        let mlp = i.checked_mul(h)?.checked_mul(3)?;
        // 4 layer norms, q_norm, k_norm, layer_scalar.
        let small = h.checked_mul(4)?.checked_add(hd.checked_mul(2)?)?.checked_add(1)?;
        total = total.checked_add(attn)?.checked_add(mlp)?.checked_add(small)?;
        if let Some(m) = cfg.moe {
            let (e, im) = (u(m.num_experts), u(m.intermediate));
            let experts = e.checked_mul(im)?.checked_mul(h)?.checked_mul(3)?;
            // router scale + proj + per_expert_scale, and 3 more norms.
            let router = h.checked_add(e.checked_mul(h)?)?.checked_add(e)?.checked_add(h.checked_mul(3)?)?;
            total = total.checked_add(experts)?.checked_add(router)?;
        }
    }
    Some(total)
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
        let total = ck.data_bytes();
        let need = required_elements(cfg).map(|e| e.saturating_mul(2));
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
        let mut l = Loader { ck, be, quant, uploaded: 0, bar };
        let embed = l.embedding(cfg)?;
        let final_norm = l.bf16("norm.weight", &[cfg.hidden_size])?;
        let layers = (0..cfg.num_layers()).map(|i| l.layer(cfg, i)).collect::<Result<Vec<_>>>()?;
        if let Some(b) = &l.bar {
            b.finish_and_clear();
        }
        Ok(Weights { embed, final_norm, layers, device_bytes: l.uploaded })
    }
}
