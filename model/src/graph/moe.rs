//! The MoE branch that runs beside the dense MLP when `enable_moe_block`:
//! router on the residual, experts on `pre_feedforward_layernorm_2(residual)`,
//! and the sum `post_feedforward_layernorm_1(mlp) + post_feedforward_layernorm_2(moe)`.
//!
//! On a tensor-parallel rank the router runs whole (every rank routes every
//! pair identically), each pair's expert id is mapped to the rank's
//! numbering (experts of other ranks fall outside it, so the routing kernels
//! skip their pairs), the rank computes its experts' pairs only, and one
//! all-reduce sums the dense MLP's and the experts' partial outputs.
use super::scratch::MoeScratch;
use super::Session;
use crate::config::MoeConfig;
use crate::error::{Error, Result};
use crate::weights::MoeWeights;
use switchyard_core::Region;
use switchyard_kernels::moe::expert::{
    ExpertWeights, RouteDecodeOut, GATE_UP_GELU_MAX_SLOTS, MAX_TOP_K, ROUTE_DECODE_MAX_DIM, ROUTE_DECODE_MAX_EXPERTS, ROUTE_DECODE_MAX_ROWS,
};
use switchyard_kernels::moe::rows::{CombinePostNorms, COMBINE_POST_NORMS_MAX_H};

/// `SWITCHYARD_MOE_UNFUSED=1` keeps the decode on the separate routing and
/// gate_up / gated GELU launches (an A/B of the fused kernels in one
/// binary); read once a process.
fn unfused_override() -> bool {
    static UNFUSED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    super::env_is_one(&UNFUSED, "SWITCHYARD_MOE_UNFUSED")
}

/// `SWITCHYARD_MOE_COMBINE_UNFUSED=1` keeps the branch's tail on three
/// launches (combine, the dense half's norm, the sandwich) instead of
/// moe_combine_post_norms_bf16, for an A/B of that fusion alone; read once a
/// process.
fn combine_unfused_override() -> bool {
    static UNFUSED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    super::env_is_one(&UNFUSED, "SWITCHYARD_MOE_COMBINE_UNFUSED")
}

/// `SWITCHYARD_MOE_GATHER_UNFUSED=1` keeps the experts' input on two
/// launches (rmsnorm, gather) instead of moe_norm_gather_bf16, for an A/B of
/// that fusion alone; read once a process.
fn gather_unfused_override() -> bool {
    static UNFUSED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    super::env_is_one(&UNFUSED, "SWITCHYARD_MOE_GATHER_UNFUSED")
}

/// `SWITCHYARD_MOE_CONCURRENT=0` keeps a MoE layer's dense MLP in line
/// before the experts (the sandwich then fuses into the gate/up GEMV's
/// prologue at batch 1) instead of beside the routing and the experts, for
/// an A/B in one binary; read once a process.
fn concurrent_off() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    super::env_is(&OFF, "SWITCHYARD_MOE_CONCURRENT", "0")
}

/// Most rows a step runs a MoE layer's dense MLP (gate/up, down) beside the
/// routing through `Backend::enqueue_concurrent`. On the H200 (26b-a4b,
/// cuda) batch 16 with the dense MLP beside the routing and the experts
/// measured 1259.7-1280.5 tok/s against 1286.7-1296.0 in line, so larger
/// batches stay in line: at one row the routing is one latency-bound launch
/// whose time the dense weight stream can fill, at 16 the experts' streams
/// already fill it. (The zero pair map of `one_row_pairs` also needs one row.)
const CONCURRENT_MAX_ROWS: usize = 1;

/// Whether a MoE layer's dense MLP runs beside the routing and the experts
/// this step: at most [`CONCURRENT_MAX_ROWS`] rows, then the model's
/// [`super::Model::dense_mlp_beside`] or, by default, on a backend that
/// overlaps concurrent work (elsewhere the pieces would run in order and
/// only lose the fused sandwich), unless `SWITCHYARD_MOE_CONCURRENT=0`.
pub(super) fn dense_mlp_beside(model: &super::Model, rows: usize) -> bool {
    rows <= CONCURRENT_MAX_ROWS && model.dense_mlp_beside.unwrap_or_else(|| model.ops.be.overlaps_concurrent_work() && !concurrent_off())
}

/// Most rows a step normalises and gathers the experts' input in one launch
/// (moe_norm_gather_bf16: each slot's block normalises its token's row, so
/// a row is normalised k times; at decode sizes that is free beside a
/// launch, at prefill sizes the separate norm is kept).
const NORM_GATHER_MAX_ROWS: usize = 64;

/// Most rows a step takes the fused decode kernels at (moe_route_decode,
/// moe_gate_up_gelu_bf16). On the H200 (26b-a4b, one call, two runs each)
/// they ran batch 1 at 236.9 / 236.9 tok/s against 228.9 / 231.2 for the
/// separate launches, but batch 16 at 1242.7 / 1238.2 against 1256.7 /
/// 1252.2, so batches of 2 and more keep the separate launches until a
/// batch-16 win is measured.
const FUSED_DECODE_MAX_ROWS: usize = 1;

impl Session<'_> {
    /// The MoE config and this session's MoE buffers, or an error on a
    /// model without them.
    fn moe_parts(&self) -> Result<(MoeConfig, &MoeScratch)> {
        match (self.model.shape().moe, self.s.moe.as_ref()) {
            (Some(mc), Some(ms)) => Ok((mc, ms)),
            _ => Err(Error::Request("MoE weights on a model without an MoE config".into())),
        }
    }

    /// Routes `rows` rows of residual `x` (top-k, weights, expert-sorted
    /// slots into the session's MoE buffers); returns the number of experts
    /// this backend holds, for [`Self::moe_experts`]. The layer enqueues it
    /// before the dense MLP's down projection, which does not depend on it:
    /// on CUDA that projection is a programmatic dependent whose weight loads
    /// are issued while the routing kernel (latency-bound, almost no bytes,
    /// most of the GPU idle) runs.
    pub(super) fn moe_route(&self, w: &MoeWeights, xr: Region, rows: usize) -> Result<usize> {
        let (ops, cfg) = (&self.model.ops, self.model.shape());
        let (mc, ms) = self.moe_parts()?;
        let (h, eps, e, k) = (cfg.hidden_size, cfg.eps, mc.num_experts, mc.top_k);
        // Router: unweighted RMSNorm · scale · hidden^-0.5, proj, softmax,
        // top-k, renormalise, · per_expert_scale; then expert-sorted slots.
        let root = (h as f64).powf(-0.5) as f32;
        // Single-row decode steps on a backend that holds every expert: the
        // whole routing in one launch (moe_route_decode, the same outputs as
        // the separate launches of `route`).
        let fused = !unfused_override()
            && self.model.tp.is_none()
            && rows <= FUSED_DECODE_MAX_ROWS.min(ROUTE_DECODE_MAX_ROWS)
            && e <= ROUTE_DECODE_MAX_EXPERTS
            && e % 2 == 0
            && k <= MAX_TOP_K.min(e)
            && h % 8 == 0
            && h <= ROUTE_DECODE_MAX_DIM
            && [xr.addr(), w.router_scale.region().addr(), w.router_proj.region().addr()].iter().all(|a| a % 16 == 0);
        if !fused {
            return self.route(w, xr, rows, root);
        }
        let out = RouteDecodeOut {
            topk_ids: ms.topk_ids.region(),
            topk_w: ms.topk_w.region(),
            offsets: ms.offsets.region(),
            pair_of_slot: ms.pair_of_slot.region(),
            slot_of_pair: ms.slot_of_pair.region(),
            logits: ms.rl.region(),
        };
        ops.moe_route_decode(
            out,
            xr,
            w.router_scale.region(),
            w.router_proj.region(),
            w.per_expert_scale.region(),
            rows,
            h,
            e,
            k,
            eps,
            root,
        )?;
        Ok(e)
    }

    /// Runs the experts on the routing [`Self::moe_route`] left (`e_here`
    /// experts held here) for `rows` rows of residual `x`, the dense MLP
    /// output already in the first `rows` rows of `mlp`; returns the combined
    /// FFN output.
    pub(super) fn moe_experts(&self, w: &MoeWeights, xr: Region, rows: usize, e_here: usize) -> Result<Region> {
        self.moe_expert_input(w, xr, rows, self.moe_parts()?.1.pair_of_slot.region())?;
        self.moe_expert_ffn(w, rows, e_here)?;
        self.moe_combine(w, rows)
    }

    /// The pair map of a one-row step before its routing runs: zeros, which
    /// give [`Self::moe_expert_input`] the bits the routing's map would
    /// (every slot holds row 0, whichever experts the routing picks).
    /// Refused at more rows.
    pub(super) fn one_row_pairs(&self, rows: usize) -> Result<Region> {
        if rows != 1 {
            return Err(Error::Request(format!("the zero pair map is a one-row step's, not {rows} rows'")));
        }
        Ok(self.moe_parts()?.1.one_row_pairs.region())
    }

    /// The experts' input: pre_feedforward_layernorm_2 of each slot's token
    /// row of the residual `xr`, slot by slot as the pair map `pairs` says.
    pub(super) fn moe_expert_input(&self, w: &MoeWeights, xr: Region, rows: usize, pairs: Region) -> Result<()> {
        let (ops, cfg) = (&self.model.ops, self.model.shape());
        let (mc, ms) = self.moe_parts()?;
        let (h, eps, k) = (cfg.hidden_size, cfg.eps, mc.top_k);
        let n = rows * k;
        if !unfused_override() && !gather_unfused_override() && rows <= NORM_GATHER_MAX_ROWS {
            ops.moe_norm_gather_bf16(ms.g.region(), xr, w.pre_ff_norm_2.region(), pairs, n, k, h, rows, eps)?;
        } else {
            ops.rmsnorm_bf16(ms.h2.region(), xr, Some(w.pre_ff_norm_2.region()), rows, h, eps)?;
            ops.moe_gather_bf16(ms.g.region(), ms.h2.region(), pairs, n, k, h, rows)?;
        }
        Ok(())
    }

    /// The experts' GEMVs over their input (gate/up with the gated GELU,
    /// then down) in expert order, into the MoE scratch (`ey`).
    pub(super) fn moe_expert_ffn(&self, w: &MoeWeights, rows: usize, e_here: usize) -> Result<()> {
        let (ops, cfg) = (&self.model.ops, self.model.shape());
        let (mc, ms) = self.moe_parts()?;
        let (h, k, im) = (cfg.hidden_size, mc.top_k, mc.intermediate);
        let n = rows * k;
        // Single-row decode steps with bf16 experts: the gated GELU in the
        // gate_up projection's epilogue (moe_gate_up_gelu_bf16, the same outputs).
        match w.gate_up.weights() {
            ExpertWeights::Bf16 { w: gu }
                if !unfused_override() && rows <= FUSED_DECODE_MAX_ROWS && n <= GATE_UP_GELU_MAX_SLOTS && h % 8 == 0 && im % 2 == 0 =>
            {
                ops.moe_gate_up_gelu_bf16(ms.eact.region(), ms.g.region(), gu, ms.offsets.region(), n, e_here, im, h)?;
            }
            gate_up => {
                ops.moe_grouped_gemm(ms.egu.region(), ms.g.region(), &gate_up, ms.offsets.region(), n, e_here, 2 * im, h)?;
                ops.gelu_mul_bf16(ms.eact.region(), ms.egu.region(), n, im)?;
            }
        }
        ops.moe_grouped_gemm(ms.ey.region(), ms.eact.region(), &w.down.weights(), ms.offsets.region(), n, e_here, h, im)?;
        Ok(())
    }

    /// The FFN output from the experts' outputs and the dense MLP's (in the
    /// first `rows` rows of `mlp`): the weighted combine and both post norms.
    pub(super) fn moe_combine(&self, w: &MoeWeights, rows: usize) -> Result<Region> {
        let (ops, cfg, s) = (&self.model.ops, self.model.shape(), &self.s);
        let (mc, ms) = self.moe_parts()?;
        let (h, eps, k) = (cfg.hidden_size, cfg.eps, mc.top_k);
        let n = rows * k;
        // The dense MLP's output, then the experts' (adjacent: one all-reduce).
        let (mlp, experts) = (s.mlp.region().slice(0, rows * h * 2)?, s.mlp.region().slice(rows * h * 2, rows * h * 2)?);
        // Without ranks to sum over, the combine and both post norms are one
        // launch (the same arithmetic as the three below).
        if self.model.tp.is_none() && !unfused_override() && !combine_unfused_override() && h <= COMBINE_POST_NORMS_MAX_H {
            let b = CombinePostNorms {
                out: ms.comb.region(),
                mlp,
                y: ms.ey.region(),
                slot_of_pair: ms.slot_of_pair.region(),
                topk_w: ms.topk_w.region(),
                w_mlp: w.post_ff_norm_1.region(),
                w_moe: w.post_ff_norm_2.region(),
            };
            ops.moe_combine_post_norms_bf16(b, rows, k, h, n, eps)?;
            return Ok(ms.comb.region());
        }
        ops.moe_combine_bf16(experts, ms.ey.region(), ms.slot_of_pair.region(), ms.topk_w.region(), rows, k, h, n)?;

        // On a rank: both partial outputs summed over the ranks at once.
        self.all_reduce(s.mlp.region(), 2 * rows * h)?;
        ops.rmsnorm_bf16(ms.m1.region(), mlp, Some(w.post_ff_norm_1.region()), rows, h, eps)?;
        // comb = m1 + post_feedforward_layernorm_2(moe): the sandwich kernel
        // with no second norm computes exactly `resid + rmsnorm(x; w_post)`.
        ops.post_norm_add_pre_norm_bf16(
            ms.comb.region(),
            None,
            ms.m1.region(),
            experts,
            Some(w.post_ff_norm_2.region()),
            None,
            rows,
            h,
            eps,
        )?;
        Ok(ms.comb.region())
    }

    /// The routing as separate launches: router norm, router GEMM, top-k,
    /// then count / offsets / scatter over the experts this backend holds;
    /// returns their number.
    fn route(&self, w: &MoeWeights, xr: Region, rows: usize, root: f32) -> Result<usize> {
        let (ops, cfg) = (&self.model.ops, self.model.shape());
        let (mc, ms) = self.moe_parts()?;
        let (h, eps, e, k) = (cfg.hidden_size, cfg.eps, mc.num_experts, mc.top_k);
        let n = rows * k;
        ops.router_norm_bf16(ms.rn.region(), xr, w.router_scale.region(), rows, h, eps, root)?;
        ops.dense_gemm_router(ms.rn.region(), w.router_proj.region(), ms.rl.region(), rows, e, h)?;
        ops.moe_router_topk(ms.topk_ids.region(), ms.topk_w.region(), ms.rl.region(), w.per_expert_scale.region(), rows, e, k)?;
        // The experts this backend holds: all, or a rank's (ids mapped
        // through the rank's table by an exact 4-byte row gather).
        let (ids, e_here) = match self.model.tp.as_ref().and_then(|t| Some((t.expert_map.as_ref()?, t.plan.experts.as_ref()?))) {
            Some((map, mine)) => {
                ops.gather_rows_bf16(ms.local_ids.region(), map.region(), ms.topk_ids.region(), n, e, 2)?;
                (ms.local_ids.region(), mine.len())
            }
            None => (ms.topk_ids.region(), e),
        };
        ops.moe_route(
            ms.counts.region(),
            ms.offsets.region(),
            ms.cursor.region(),
            ms.pair_of_slot.region(),
            ms.slot_of_pair.region(),
            ids,
            rows,
            k,
            e_here,
        )?;
        Ok(e_here)
    }
}
