//! The MoE branch that runs beside the dense MLP when `enable_moe_block`:
//! router on the residual, experts on `pre_feedforward_layernorm_2(residual)`,
//! and the sum `post_feedforward_layernorm_1(mlp) + post_feedforward_layernorm_2(moe)`.
use super::Session;
use crate::error::{Error, Result};
use crate::weights::MoeWeights;
use switchyard_core::Region;

impl Session<'_> {
    /// Runs the branch for `rows` rows of residual `x` (the dense MLP output
    /// is already in `mlp`); returns the combined FFN output.
    pub(super) fn moe(&self, w: &MoeWeights, xr: Region, rows: usize) -> Result<Region> {
        let (ops, cfg, s) = (&self.model.ops, &self.model.cfg, &self.s);
        let (Some(mc), Some(ms)) = (cfg.moe, s.moe.as_ref()) else {
            return Err(Error::Request("MoE weights on a model without an MoE config".into()));
        };
        let (h, eps, e, k, im) = (cfg.hidden_size, cfg.eps, mc.num_experts, mc.top_k, mc.intermediate);
        let n = rows * k;

        ops.rmsnorm_bf16(ms.m1.region(), s.mlp.region(), Some(w.post_ff_norm_1.region()), rows, h, eps)?;

        // Router: unweighted RMSNorm · scale · hidden^-0.5, proj, softmax,
        // top-k, renormalise, · per_expert_scale; then expert-sorted slots.
        let root = (h as f64).powf(-0.5) as f32;
        ops.router_norm_bf16(ms.rn.region(), xr, w.router_scale.region(), rows, h, eps, root)?;
        ops.dense_gemm_router(ms.rn.region(), w.router_proj.region(), ms.rl.region(), rows, e, h)?;
        ops.moe_router_topk(ms.topk_ids.region(), ms.topk_w.region(), ms.rl.region(), w.per_expert_scale.region(), rows, e, k)?;
        ops.moe_route(
            ms.counts.region(),
            ms.offsets.region(),
            ms.cursor.region(),
            ms.pair_of_slot.region(),
            ms.slot_of_pair.region(),
            ms.topk_ids.region(),
            rows,
            k,
            e,
        )?;

        // Experts on pre_feedforward_layernorm_2(residual), in expert order.
        ops.rmsnorm_bf16(ms.h2.region(), xr, Some(w.pre_ff_norm_2.region()), rows, h, eps)?;
        ops.moe_gather_bf16(ms.g.region(), ms.h2.region(), ms.pair_of_slot.region(), n, k, h, rows)?;
        ops.moe_grouped_gemm(ms.egu.region(), ms.g.region(), &w.gate_up.weights(), ms.offsets.region(), n, e, 2 * im, h)?;
        ops.gelu_mul_bf16(ms.eact.region(), ms.egu.region(), n, im)?;
        ops.moe_grouped_gemm(ms.ey.region(), ms.eact.region(), &w.down.weights(), ms.offsets.region(), n, e, h, im)?;
        ops.moe_combine_bf16(ms.out.region(), ms.ey.region(), ms.slot_of_pair.region(), ms.topk_w.region(), rows, k, h, n)?;

        // comb = m1 + post_feedforward_layernorm_2(moe): the sandwich kernel
        // with no second norm computes exactly `resid + rmsnorm(x; w_post)`.
        ops.post_norm_add_pre_norm_bf16(
            ms.comb.region(),
            None,
            ms.m1.region(),
            ms.out.region(),
            Some(w.post_ff_norm_2.region()),
            None,
            rows,
            h,
            eps,
        )?;
        Ok(ms.comb.region())
    }
}
