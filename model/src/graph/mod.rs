//! The Gemma 4 text decoder, written only against [`Ops`]: a [`Model`] holds
//! the config and the device weights; a [`Session`] adds the paged KV cache,
//! the RoPE tables and the activation buffers, and runs passes: a prefill
//! over a prompt, or one decode step for each of a batch of sequences. Each
//! pass ends in the LM head and a device argmax.
//!
//! On a tensor-parallel rank ([`Model::shard`]) the same graph runs over
//! the rank's shard, with the collectives of `shard` between its steps.
mod layer;
pub mod linear;
mod moe;
pub mod scratch;
mod shard;

use crate::checkpoint::Checkpoint;
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::kv_cache::KvCache;
use crate::quant::Quant;
use crate::rope::RopeTables;
use crate::tp::TpPlan;
use crate::weights::{Embedding, Weights};
use scratch::Scratch;
use std::sync::Arc;
use switchyard_core::codec::bytes;
use switchyard_core::comm::Communicator;
use switchyard_core::{Backend, DeviceBuffer, Recording};
use switchyard_kernels::gemv::LayerOutRow;
use switchyard_kernels::head::MAX_HEAD_ROWS;
use switchyard_kernels::Ops;

/// Whether the environment variable `name` is `1`, read once a process
/// into `cell`: the graph's A/B switches between a fused kernel and the
/// launches it replaces, in one binary.
fn env_is_one(cell: &'static std::sync::OnceLock<bool>, name: &str) -> bool {
    env_is(cell, name, "1")
}

/// Whether the environment variable `name` is `value` (spaces trimmed),
/// read once a process into `cell`.
fn env_is(cell: &'static std::sync::OnceLock<bool>, name: &str, value: &str) -> bool {
    *cell.get_or_init(|| std::env::var(name).is_ok_and(|v| v.trim() == value))
}

/// [`switchyard_core::Backend::enqueue_concurrent`] over two of the graph's
/// own steps: the pieces may overlap on the device, and a piece's error
/// comes back as the graph reported it (not flattened into the backend's
/// type).
fn enqueue_concurrent(ops: &Ops, mut first: impl FnMut() -> Result<()>, mut second: impl FnMut() -> Result<()>) -> Result<()> {
    let (mut failed_first, mut failed_second) = (None, None);
    let stop = || switchyard_core::Error::invalid("enqueue_concurrent", "<piece>", "a piece of the graph failed (its error follows)");
    let ran = ops.be.enqueue_concurrent(&mut || first().map_err(|e| failed_first = Some(e)).map_err(|()| stop()), &mut || {
        second().map_err(|e| failed_second = Some(e)).map_err(|()| stop())
    });
    match (failed_second, failed_first) {
        (Some(e), _) | (None, Some(e)) => Err(e),
        (None, None) => Ok(ran?),
    }
}

/// A loaded model on one backend: the whole model, or one tensor-parallel
/// rank's shard of it.
pub struct Model {
    /// The validated config (of the whole model, on a tensor-parallel rank too).
    pub cfg: ModelConfig,
    /// Device weights (a rank's shard on a tensor-parallel rank).
    pub weights: Weights,
    /// Launchers on the model's backend.
    pub ops: Ops,
    /// How the weights are stored.
    pub quant: Quant,
    /// This rank's place in a tensor-parallel group; `None` on one backend.
    pub tp: Option<TpRank>,
    /// Whether a MoE layer's single-row decode steps run the dense MLP
    /// beside the routing and the experts (`Backend::enqueue_concurrent`)
    /// or in line before them. `None` (what the constructors set): beside
    /// on one device whose backend overlaps concurrent work, unless
    /// `SWITCHYARD_MOE_CONCURRENT=0`. `Some` forces either order on any
    /// backend (tests of both; beside runs in order where the backend does
    /// not overlap).
    pub dense_mlp_beside: Option<bool>,
}

/// A tensor-parallel rank: its share of the model and its communicator.
pub struct TpRank {
    /// How the model splits, seen from this rank.
    pub plan: TpPlan,
    /// The shapes of this rank's shard ([`TpPlan::local_config`]).
    pub local: ModelConfig,
    /// Collectives with the other ranks, on this rank's backend.
    pub comm: Arc<dyn Communicator>,
    /// Global expert id → this rank's (i32 `[experts]`, MoE models), for
    /// the routing of the pairs this rank computes.
    expert_map: Option<DeviceBuffer>,
}

impl Model {
    /// Parses the checkpoint's config and uploads its weights to `be`.
    pub fn load(ck: &Checkpoint, be: Arc<dyn Backend>, quant: Quant) -> Result<Self> {
        let cfg = ModelConfig::from_json(&ck.config_json)?;
        let weights = Weights::load(ck, &cfg, &be, quant)?;
        Ok(Model::new(cfg, weights, be, quant))
    }

    /// A model on one backend from weights made elsewhere (bench-model's random ones).
    pub fn new(cfg: ModelConfig, weights: Weights, be: Arc<dyn Backend>, quant: Quant) -> Self {
        Model { cfg, weights, ops: Ops::new(be), quant, tp: None, dense_mlp_beside: None }
    }

    /// Rank `comm.rank()` of a tensor-parallel group of `comm.world_size()`:
    /// parses the checkpoint's config, checks that it splits
    /// ([`TpPlan::new`]: an error naming `--tp` and the value otherwise),
    /// and uploads only this rank's shard to `be`, reading only its slices
    /// of the checkpoint ([`Weights::load_shard`]).
    pub fn load_shard(ck: &Checkpoint, be: Arc<dyn Backend>, quant: Quant, comm: Arc<dyn Communicator>) -> Result<Self> {
        let cfg = ModelConfig::from_json(&ck.config_json)?;
        let plan = TpPlan::new(&cfg, comm.rank(), comm.world_size())?;
        let weights = Weights::load_shard(ck, &cfg, &plan, &be, quant)?;
        Model::shard(cfg, plan, weights, be, quant, comm)
    }

    /// A tensor-parallel rank from its shard's weights (made from
    /// `plan.local_tensors(&cfg)`), on `be`, talking through `comm`.
    pub fn shard(
        cfg: ModelConfig,
        plan: TpPlan,
        weights: Weights,
        be: Arc<dyn Backend>,
        quant: Quant,
        comm: Arc<dyn Communicator>,
    ) -> Result<Self> {
        if (plan.rank, plan.world) != (comm.rank(), comm.world_size()) {
            return Err(Error::Request(format!(
                "the plan is for rank {} of {}, the communicator is rank {} of {}",
                plan.rank,
                plan.world,
                comm.rank(),
                comm.world_size()
            )));
        }
        let expert_map = match cfg.moe.and_then(|m| plan.expert_map(m.num_experts)) {
            Some(map) => Some(DeviceBuffer::from_bytes(&be, &bytes::i32_bytes(&map))?),
            None => None,
        };
        let local = plan.local_config(&cfg);
        Ok(Model { cfg, weights, ops: Ops::new(be), quant, tp: Some(TpRank { plan, local, comm, expert_map }), dense_mlp_beside: None })
    }

    /// The shapes the graph runs with: the config, or a rank's shard's.
    pub fn shape(&self) -> &ModelConfig {
        self.tp.as_ref().map_or(&self.cfg, |t| &t.local)
    }

    /// The backend the model lives on.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.ops.be
    }
}

/// One output row of a pass: the greedy token and, when asked for, the f32
/// logits (after softcapping) that chose it.
#[derive(Clone, Debug)]
pub struct RowOut {
    /// argmax of the logits (lowest id on ties).
    pub token: u32,
    /// The logits `[vocab]`, when the pass was asked to return them.
    pub logits: Option<Vec<f32>>,
}

/// Which attention kernel a pass uses.
#[derive(Clone, Copy)]
enum Pass {
    /// Any rows of one sequence: `attention_prefill`.
    Prefill,
    /// One row per sequence `0..rows`: `attention_decode`, bounded by the
    /// session's capacity rather than this step's longest context, so that a
    /// decode step's launches are the same from one token to the next.
    Decode,
}

/// A generation context: KV cache, RoPE tables, scratch.
pub struct Session<'m> {
    model: &'m Model,
    /// The paged KV cache.
    pub cache: KvCache,
    rope: RopeTables,
    s: Scratch,
    /// Which of the two residual buffers holds the stream.
    cur: usize,
    /// Decode steps are recorded once per batch size and replayed for every
    /// token (on by default; off runs every launch directly).
    pub record_decode: bool,
    /// The recorded decode step and the batch size it was recorded for.
    decode_step: Option<(usize, Recording)>,
    /// The last layer's output norm, not yet run: the next layer's input
    /// norm forms it (fused into its q/k/v projection at batch 1), or
    /// [`Session::launch_step`] after the last layer.
    pending_out: Option<LayerOutRow>,
}

impl<'m> Session<'m> {
    /// Room for `num_seqs` sequences of up to `max_tokens` tokens, and passes
    /// of up to `max_rows` rows.
    pub fn new(model: &'m Model, num_seqs: usize, max_tokens: usize, max_rows: usize) -> Result<Self> {
        let be = model.backend();
        let rows = max_rows.max(num_seqs).max(1);
        let world = model.tp.as_ref().map_or(1, |t| t.plan.world);
        Ok(Session {
            model,
            cache: KvCache::new(be, model.shape(), num_seqs, max_tokens)?,
            rope: RopeTables::new(be, &model.cfg, max_tokens)?,
            s: Scratch::new(be, model.shape(), rows, world)?,
            cur: 0,
            record_decode: true,
            decode_step: None,
            pending_out: None,
        })
    }

    fn check_tokens(&self, tokens: &[u32]) -> Result<()> {
        let v = self.model.cfg.vocab_size;
        match tokens.iter().find(|&&t| t as usize >= v) {
            Some(t) => Err(Error::Request(format!("token id {t} is outside the vocabulary (size {v})"))),
            None => Ok(()),
        }
    }

    /// Runs `tokens` of sequence `seq` at positions `start..` through the
    /// model, writing their KV, and returns the head's output for the last one.
    pub fn prefill(&mut self, seq: usize, tokens: &[u32], start: usize, want_logits: bool) -> Result<RowOut> {
        let rows = tokens.len();
        if rows == 0 {
            return Err(Error::Request("the prompt is empty".into()));
        }
        if rows > self.s.rows {
            return Err(Error::Request(format!("{rows} tokens in one pass exceed the session's {} rows", self.s.rows)));
        }
        self.check_tokens(tokens)?;
        self.cache.reserve(seq, start + rows)?;
        let pos: Vec<i32> = (start..start + rows).map(|p| p as i32).collect();
        let slots = (start..start + rows).map(|p| self.cache.slot(seq, p)).collect::<Result<Vec<_>>>()?;
        self.s.seq_of_row.write(&bytes::i32_bytes(&vec![seq as i32; rows]))?;
        self.write_step(tokens, &pos, &slots)?;
        self.launch_step(rows, Pass::Prefill)?;
        self.launch_head(rows - 1, 1)?;
        let mut out = self.read_head(1, want_logits)?;
        Ok(out.remove(0))
    }

    /// One decode step: `tokens[b]` is sequence `b`'s next token, at
    /// `positions[b]`. Returns one output per sequence.
    pub fn decode(&mut self, tokens: &[u32], positions: &[usize], want_logits: bool) -> Result<Vec<RowOut>> {
        let rows = tokens.len();
        if rows == 0 || rows != positions.len() || rows > self.cache.num_seqs || rows > self.s.rows {
            return Err(Error::Request(format!(
                "decode takes one token and one position per sequence (got {rows} tokens, {} positions, {} sequences)",
                positions.len(),
                self.cache.num_seqs
            )));
        }
        self.check_tokens(tokens)?;
        let mut slots = Vec::with_capacity(rows);
        for (b, &p) in positions.iter().enumerate() {
            self.cache.reserve(b, p + 1)?;
            slots.push(self.cache.slot(b, p)?);
        }
        let pos: Vec<i32> = positions.iter().map(|&p| p as i32).collect();
        let ctx: Vec<i32> = positions.iter().map(|&p| p as i32 + 1).collect();
        self.s.ctx_len.write(&bytes::i32_bytes(&ctx))?;
        self.write_step(tokens, &pos, &slots)?;
        // Everything that changes between tokens (ids, positions, slots,
        // context lengths, the block table) is in device memory now, and a
        // decode step's launch arguments depend only on the batch size: so
        // the step is recorded once and replayed. Logits are read back per
        // head chunk, which the single recorded head cannot do. A
        // tensor-parallel step is recorded only when its collectives can be.
        let capturable = self.model.tp.as_ref().is_none_or(|t| t.comm.capturable());
        if self.record_decode && capturable && !want_logits && rows <= MAX_HEAD_ROWS {
            if self.decode_step.as_ref().is_none_or(|(r, _)| *r != rows) {
                let be = self.model.backend().clone();
                // A model-level error inside the recording is kept whole.
                let mut model_error = None;
                let recorded = be.record(&mut || {
                    self.launch_step(rows, Pass::Decode).and_then(|_| self.launch_head(0, rows)).map_err(|e| match e {
                        Error::Kernel(k) => k,
                        other => {
                            let k = switchyard_core::Error::invalid("decode", "<step>", other.to_string());
                            model_error = Some(other);
                            k
                        }
                    })
                });
                if let Some(e) = model_error {
                    return Err(e);
                }
                self.decode_step = Some((rows, recorded?));
            }
            let (_, recording) = self.decode_step.as_ref().expect("recorded above");
            self.model.backend().replay(recording)?;
            return self.read_head(rows, false);
        }
        self.launch_step(rows, Pass::Decode)?;
        let mut out = Vec::with_capacity(rows);
        for first in (0..rows).step_by(MAX_HEAD_ROWS) {
            let count = MAX_HEAD_ROWS.min(rows - first);
            self.launch_head(first, count)?;
            out.extend(self.read_head(count, want_logits)?);
        }
        Ok(out)
    }

    /// Uploads a pass's token ids, positions and KV slots.
    fn write_step(&mut self, tokens: &[u32], pos: &[i32], slots: &[i32]) -> Result<()> {
        if pos.iter().any(|&p| p as usize >= self.rope.max_pos) {
            return Err(Error::Request(format!("a position is past the session's {} tokens", self.rope.max_pos)));
        }
        // A tensor-parallel rank gathers from its own rows of the table.
        let ids: Vec<i32> = match &self.model.tp {
            None => tokens.iter().map(|&t| t as i32).collect(),
            Some(tp) => tokens.iter().map(|&t| tp.plan.local_token(t)).collect(),
        };
        self.s.ids.write(&bytes::i32_bytes(&ids))?;
        if let (Some(pw), Some(ps)) = (&self.model.weights.per_layer_input, &self.s.per_layer) {
            // The per-layer table stays on the host: only this pass's rows
            // travel (rows · layers · P bf16), and the gather indices that
            // pair each layer's gate rows with its inputs.
            let mut rows_bytes = Vec::new();
            pw.table.gather_bf16(tokens, &mut rows_bytes)?;
            ps.tok.write(&rows_bytes)?;
            let (l, cap, n) = (self.model.cfg.num_layers(), self.s.rows, tokens.len());
            let mut idx = Vec::with_capacity(l * 2 * n);
            for i in 0..l {
                for r in 0..n {
                    idx.push((cap * l + r) as i32);
                    idx.push((r * l + i) as i32);
                }
            }
            ps.idx.write(&bytes::i32_bytes(&idx))?;
        }
        self.s.pos.write(&bytes::i32_bytes(pos))?;
        Ok(self.s.slot.write(&bytes::i32_bytes(slots))?)
    }

    /// Embedding and every decoder layer over `rows` rows, leaving the
    /// stream in `x[cur]`. Launches only (no host transfers), so it can be
    /// recorded.
    fn launch_step(&mut self, rows: usize, pass: Pass) -> Result<()> {
        let (ops, cfg) = (&self.model.ops, self.model.shape());
        // A tensor-parallel rank's table has a zero row after its own.
        let (v, h) = (cfg.vocab_size + usize::from(self.model.tp.is_some()), cfg.hidden_size);
        // HF multiplies by hidden_size**0.5 in the embedding's dtype (f32 for the oracle).
        let scale = (h as f64).sqrt() as f32;
        self.cur = 0;
        let (x, ids) = (self.s.x[0].region(), self.s.ids.region());
        match &self.model.weights.embed {
            Embedding::Bf16(t) => ops.embed_gather_bf16(x, t.region(), ids, rows, v, h, scale)?,
            Embedding::Fp8 { codes, row_scale } => ops.embed_gather_fp8(x, codes.region(), row_scale.region(), ids, rows, v, h, scale)?,
        }
        // Exactly one rank holds each token's row; the others add zeros.
        self.all_reduce(x, rows * h)?;
        self.per_layer_inputs(rows)?;
        self.pending_out = None;
        for i in 0..cfg.num_layers() {
            self.layer(i, rows, pass)?;
        }
        Ok(self.pending_out.take().map_or(Ok(()), |p| p.run(ops, rows, h, cfg.eps))?)
    }

    /// The per-layer inputs of every layer (E2B / E4B), as HF's
    /// `project_per_layer_inputs` computes them from the scaled embedding
    /// `e` (in `x[0]`) and the gathered table rows `t` (uploaded by
    /// `write_step`):
    /// `(rmsnorm(W·e · hidden^-0.5; w) + t · sqrt(P)) · 2^-0.5`, per layer
    /// slice of `P` values. The `hidden^-0.5` scale is folded into the
    /// norm's eps (`rmsnorm(s·y; eps) = rmsnorm(y; eps / s²)`, exactly) and
    /// `2^-0.5` into the norm's output scale, so existing kernels compute it:
    /// the projection GEMM, `router_norm_bf16` (RMSNorm · weight · scalar)
    /// and `scaled_add_bf16`. Launches only.
    fn per_layer_inputs(&mut self, rows: usize) -> Result<()> {
        let (ops, cfg) = (&self.model.ops, &self.model.cfg);
        let (Some(pw), Some(ps), Some(pl)) = (&self.model.weights.per_layer_input, &self.s.per_layer, cfg.per_layer_input) else {
            return Ok(());
        };
        let (h, l, p) = (cfg.hidden_size, cfg.num_layers(), pl.hidden);
        let n = rows * l * p;
        let inputs = ps.src.region().slice(0, n * 2)?;
        linear::apply(ops, &pw.model_projection, self.s.x[0].region(), ps.proj.region(), rows)?;
        let eps = (cfg.eps as f64 * h as f64) as f32;
        let half_root = std::f64::consts::FRAC_1_SQRT_2 as f32;
        ops.router_norm_bf16(inputs, ps.proj.region(), pw.projection_norm.region(), rows * l, p, eps, half_root)?;
        let table_scale = ((p as f64).sqrt() * std::f64::consts::FRAC_1_SQRT_2) as f32;
        Ok(ops.scaled_add_bf16(inputs, ps.tok.region(), n, table_scale)?)
    }

    /// Final norm, LM head (softcapped) and argmax for rows
    /// `first..first+count` (≤ 16), into `idx` (and `logits`). Launches only.
    fn launch_head(&mut self, first: usize, count: usize) -> Result<()> {
        let (ops, cfg) = (&self.model.ops, self.model.shape());
        let (v, h) = (cfg.vocab_size, cfg.hidden_size);
        let x = self.s.x[self.cur].region().tail(first * h * 2)?;
        let (f, logits) = (self.s.fnorm.region(), self.s.logits.region());
        ops.rmsnorm_bf16(self.s.fnorm.region(), x, Some(self.model.weights.final_norm.region()), count, h, cfg.eps)?;
        let cap = cfg.final_logit_softcapping;
        match &self.model.weights.embed {
            Embedding::Bf16(t) => ops.lm_head_logits_bf16(logits, f, t.region(), count, v, h, cap)?,
            Embedding::Fp8 { codes, row_scale } => {
                ops.lm_head_logits_fp8(logits, f, codes.region(), row_scale.region(), count, v, h, cap)?
            }
        }
        ops.argmax_rows(self.s.idx(), self.s.val(), logits, count, v, -1, -1)?;
        // Each rank's (index, value) for its vocabulary rows, to every rank.
        self.gather_head()
    }

    /// The tokens (and, when asked, the logits) of the last head launch of `count` rows.
    fn read_head(&mut self, count: usize, want_logits: bool) -> Result<Vec<RowOut>> {
        if self.model.tp.is_some() {
            return self.read_head_sharded(count, want_logits);
        }
        let (ops, v) = (&self.model.ops, self.model.cfg.vocab_size);
        let logits = self.s.logits.region();
        let mut idx = vec![0u8; count * 4];
        ops.be.download(self.s.idx().addr(), &mut idx)?;
        let all = if want_logits {
            let mut l = vec![0u8; count * v * 4];
            ops.be.download(logits.addr(), &mut l)?;
            Some(bytes::f32_from_bytes(&l))
        } else {
            None
        };
        bytes::i32_from_bytes(&idx)
            .into_iter()
            .enumerate()
            .map(|(r, t)| {
                let token = u32::try_from(t).map_err(|_| Error::Numeric(format!("row {r}: every logit is NaN (no argmax)")))?;
                Ok(RowOut { token, logits: all.as_ref().map(|a| a[r * v..(r + 1) * v].to_vec()) })
            })
            .collect()
    }
}
