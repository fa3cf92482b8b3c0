//! The previous layer's output norm fused into the next layer's q/k/v GEMV
//! (batch-1 decode): one launch where the graph ran `layer_out_bf16` and
//! then `dense_gemv_rmsnorm_bf16`.
use super::{
    behind_row_pass, cuda_dense_gemv_rmsnorm, fused_row_checks, gemv_rmsnorm_operands, wgsl_dense_gemv_rmsnorm, DENSE_GEMV_RMSNORM_BF16,
    NORMED_NMSE, NORM_GEMV_SHAPES,
};
use crate::norm::{derived, residual_add_magnitudes};
use crate::ops::{bf16s, optional, region, words, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use crate::plan::{env_override, CudaPlan, DeviceFacts, PlanArgs, WgslPlan};
use switchyard_core::compare::Tolerance;
use switchyard_core::{ArgSpec as A, DType, Region, Result};

declare_kernel! {
    /// [`crate::norm::LAYER_OUT_BF16`] of one row, then
    /// [`super::DENSE_GEMV_RMSNORM_BF16`] of that row: `a` is an output,
    /// `a = layer_out_bf16(mid, x; w_post, layer_scalar, eps)` exactly as that
    /// kernel defines it for one row of `k` elements (its three roundings),
    /// and then `c = dense_gemv_rmsnorm_bf16(a, b; norm_w, eps, seg1, seg2)`
    /// as that kernel defines it, reading the rounded `a`.
    ///
    /// Arguments: the fused-norm GEMV's, in its order (`a, b, c, m, n, k,
    /// seg1, seg2, norm_w, eps`), then the layer output's inputs (`mid`, `x`
    /// bf16 `[k]`, `w_post` bf16 `[k]` or null for unscaled, `layer_scalar`
    /// one f32 in device memory); both norms take `eps`. `m = 1` only; `k %
    /// 8 == 0`; a, b, norm_w, mid, x and w_post 16-byte aligned; `a` must not
    /// overlap `mid` or `x` (every block reads them while one writes `a`).
    ///
    /// Tolerance: `a` as `layer_out_bf16`'s (2 bf16 ulps), `c` as the fused
    /// norm GEMV's (NMSE ≤ [`NORMED_NMSE`]).
    DENSE_GEMV_LAYER_OUT_RMSNORM_BF16 = "gemv"::"dense_gemv_layer_out_rmsnorm_bf16"(
        A::output("a"), A::input("b"), A::output("c"), A::u32("m"), A::u32("n"), A::u32("k"), A::u32("seg1"), A::u32("seg2"),
        A::input("norm_w"), A::f32("eps"), A::input("mid"), A::input("x"), A::input("w_post").or_null(), A::input("layer_scalar"))
}

/// The fused-norm GEMV's CUDA geometry under this kernel's entries, with
/// the row in dynamic shared memory (2k bytes): every block forms it.
pub(super) fn cuda_layer_out_gemv(a: &PlanArgs, f: &DeviceFacts) -> Result<CudaPlan> {
    let mut plan = cuda_dense_gemv_rmsnorm(a, f)?;
    let k = a.u32("k")?;
    for pass in &mut plan.passes {
        pass.entry = if pass.entry == "dense_gemv_rmsnorm_bf16_x2" { "dense_gemv_layer_out_rmsnorm_bf16_x2" } else { a.kernel.symbol };
        pass.shared_bytes = k.saturating_mul(2);
    }
    Ok(plan)
}

/// WGSL: where the fused-norm GEMV's plan is its one m = 1 pass (Gemma's
/// q/k/v at batch 1), one dispatch of `dense_gemv_layer_out_rmsnorm_bf16_m1`
/// over that pass's grid: every workgroup forms the row itself and
/// workgroup 0 stores it, one dispatch fewer a layer than a row pass would
/// take (on the H200 as fast as the row pass, thirteenth session;
/// `SWITCHYARD_WGSL_LAYER_OUT_ROW_PASS=1`, read once a process, keeps the
/// row pass). Otherwise one workgroup forms
/// the row into `a` (the kernel's own entry), then the fused-norm GEMV's
/// own plan runs over it (the same entries, composed into this kernel's
/// shader from `gemv/rmsnorm_gemv.wgsli`).
pub(super) fn wgsl_layer_out_gemv(a: &PlanArgs, f: &DeviceFacts) -> Result<WgslPlan> {
    static ROW_PASS: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let row_pass = env_override(&ROW_PASS, "SWITCHYARD_WGSL_LAYER_OUT_ROW_PASS", |v| v == 1).is_some();
    Ok(layer_out_plan(wgsl_dense_gemv_rmsnorm(a, f)?, a, row_pass))
}

/// [`wgsl_layer_out_gemv`] over the fused-norm GEMV's plan `inner`.
pub(super) fn layer_out_plan(mut inner: WgslPlan, a: &PlanArgs, row_pass: bool) -> WgslPlan {
    if !row_pass && inner.passes.len() == 1 && inner.passes[0].entry == "dense_gemv_rmsnorm_bf16_m1" {
        inner.passes[0].entry = "dense_gemv_layer_out_rmsnorm_bf16_m1";
        return inner;
    }
    behind_row_pass(inner, a, DENSE_GEMV_RMSNORM_BF16.symbol)
}

cuda_plan!(DENSE_GEMV_LAYER_OUT_RMSNORM_BF16 => cuda_layer_out_gemv);
wgsl_plan!(DENSE_GEMV_LAYER_OUT_RMSNORM_BF16, "gemv/dense_gemv_layer_out_rmsnorm_bf16.wgsl" => wgsl_layer_out_gemv);

/// The previous layer's output row: `layer_out_bf16`'s inputs.
#[derive(Clone, Copy, Debug)]
pub struct LayerOutRow {
    /// Where the row goes (the next residual stream), bf16 `[k]`.
    pub out: Region,
    /// The residual stream before the output norm, bf16 `[k]`.
    pub mid: Region,
    /// The sub-block output the norm takes, bf16 `[k]`.
    pub x: Region,
    /// The norm's weight, bf16 `[k]`; `None`: unscaled.
    pub w_post: Option<Region>,
    /// One f32 in device memory.
    pub layer_scalar: Region,
}

impl LayerOutRow {
    /// The row on its own: `layer_out_bf16` over `rows` rows of `dim`.
    pub fn run(&self, ops: &Ops, rows: usize, dim: usize, eps: f32) -> Result<()> {
        ops.layer_out_bf16(self.out, self.mid, self.x, self.w_post, self.layer_scalar, rows, dim, eps)
    }
}

impl Ops {
    /// See [`DENSE_GEMV_LAYER_OUT_RMSNORM_BF16`].
    #[allow(clippy::too_many_arguments)]
    pub fn dense_gemv_layer_out_rmsnorm_bf16(
        &self,
        row: &LayerOutRow,
        b: Region,
        c: Region,
        n: usize,
        k: usize,
        segs: [usize; 2],
        norm_w: Region,
        eps: f32,
    ) -> Result<()> {
        let s = DENSE_GEMV_LAYER_OUT_RMSNORM_BF16.symbol;
        let mut args = gemv_rmsnorm_operands(s, row.out, b, c, n, k, segs, norm_w, eps)?;
        fused_row_checks(s, row.out, k, &[("mid", Some(row.mid)), ("x", Some(row.x)), ("w_post", row.w_post)])?;
        args.extend([
            region(row.mid, bf16s(k)),
            region(row.x, bf16s(k)),
            optional(row.w_post, bf16s(k)),
            region(row.layer_scalar, words(1)),
        ]);
        self.launch(&DENSE_GEMV_LAYER_OUT_RMSNORM_BF16, &args)
    }
}

/// The layer output row's rule (one row of `layer_out_bf16`, its `out`): 2
/// ulp of its residual add's addends, scaled by the layer scalar.
pub(super) fn layer_out_row_tolerance(mid: &[f32], x: &[f32], w_post: Option<&[f32]>, scalar: f32, k: usize) -> Tolerance {
    let magnitude = residual_add_magnitudes(mid, x, w_post, None, 1, k, 1e-6);
    derived(magnitude.into_iter().map(|m| m * (scalar as f64).abs()).collect())
}

/// The fused norm GEMV's shapes (its CUDA x2 and slices geometries, the
/// WGSL m = 1 and tiled plans), the first without a `w_post`.
fn layer_out_gemv_cases(g: &mut Gen) -> Vec<Case> {
    NORM_GEMV_SHAPES
        .iter()
        .enumerate()
        .map(|(i, &(n, k, seg1, seg2))| {
            let (mid_v, mid) = g.bf16(k, 0.5, 40.0);
            let (x_v, x) = g.bf16(k, 0.01, 3.0);
            let (w_post_v, w_post) = g.bf16(k, 0.05, 2.0);
            let (scalar_v, scalar) = g.f32(1, 0.2, 1.5);
            let (_, b) = g.bf16(n * k, 0.01, 0.5);
            let (_, norm_w) = g.bf16(k, 0.05, 2.0);
            let scaled = i != 0;
            let a_tolerance = layer_out_row_tolerance(&mid_v, &x_v, scaled.then_some(&w_post_v[..]), scalar_v[0], k);
            Case {
                kernel: &DENSE_GEMV_LAYER_OUT_RMSNORM_BF16,
                label: format!("n={n} k={k} segs={seg1},{seg2} w_post={scaled}"),
                buffers: vec![
                    Buffer::output("a", DType::BF16, k, a_tolerance),
                    Buffer::input("b", b),
                    Buffer::output("c", DType::BF16, n, Tolerance::Nmse(NORMED_NMSE)),
                    Buffer::input("norm_w", norm_w),
                    Buffer::input("mid", mid),
                    Buffer::input("x", x),
                    Buffer::input("w_post", w_post),
                    Buffer::input("layer_scalar", scalar),
                ],
                run: Box::new(move |o, r| {
                    let row = LayerOutRow { out: r[0], mid: r[4], x: r[5], w_post: scaled.then_some(r[6]), layer_scalar: r[7] };
                    o.dense_gemv_layer_out_rmsnorm_bf16(&row, r[1], r[2], n, k, [seg1, seg2], r[3], 1e-6)
                }),
            }
        })
        .collect()
}

inventory::submit! { CaseSet { kernel: &DENSE_GEMV_LAYER_OUT_RMSNORM_BF16, cases: layer_out_gemv_cases } }
