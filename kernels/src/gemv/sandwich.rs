//! The sandwich between the attention block and the MLP fused into the
//! gate/up projection (batch-1 decode): one launch where the graph ran
//! `post_norm_add_pre_norm_bf16` and then `dense_gemv_gelu_mul_bf16`.
use super::{
    behind_row_pass, cuda_m1, fused_row_checks, gemv_operands, gemv_shape, one_row, shared_row_bytes, wgsl_dense_gemv_gelu_mul,
    CUDA_M1_LOADS_PER_LANE, CUDA_MIN_WORKSPACE, DENSE_GEMV_GELU_MUL_BF16, NORMED_NMSE, WGSL_M1_SHARED_BYTES, WGSL_NORM_SHARED_BYTES,
};
use crate::norm::{derived, residual_add_magnitudes};
use crate::ops::{bf16s, optional, region, require_eps, scalar, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use crate::plan::{env_override, groups, CudaPass, CudaPlan, DeviceFacts, PlanArgs, WgslPlan};
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, Error, Region, Result};

declare_kernel! {
    /// [`crate::norm::POST_NORM_ADD_PRE_NORM_BF16`] of one row, then
    /// [`super::DENSE_GEMV_GELU_MUL_BF16`] of its normed row: `a` is an
    /// output, `a = resid_out` and `hn = normed` of
    /// `post_norm_add_pre_norm_bf16(resid = mid, x; w_post, w_pre = norm_w,
    /// eps)` exactly as that kernel defines them for one row of `k` elements
    /// (`t = bf16(rmsnorm(x; w_post))`, `a = bf16(mid + t)`, `hn =
    /// bf16(rmsnorm(a; norm_w))` from the rounded `a`), and then `c =
    /// dense_gemv_gelu_mul_bf16(hn, b)` as that kernel defines it. `hn` is
    /// not stored.
    ///
    /// Arguments: the gated GEMV's (`a, b, c, m, n, k`; b bf16 `[2n, k]`,
    /// gate rows then up rows; c bf16 `[n]`), the pre-norm's weight and
    /// epsilon (`norm_w` bf16 `[k]`, `eps` finite and ≥ 0), then the
    /// sandwich's inputs (`mid` the residual stream, `x` the attention
    /// block's output, both bf16 `[k]`, `w_post` bf16 `[k]` or null for
    /// unscaled). `m = 1` only; `k % 8 == 0`; a, b, norm_w, mid, x and
    /// w_post 16-byte aligned; `a` must not overlap `mid`, `x` or `w_post`
    /// (every block reads them while one writes `a`).
    ///
    /// Tolerance: `a` as the sandwich's `resid_out` (2 bf16 ulps), `c` NMSE ≤
    /// [`NORMED_NMSE`] (the fused-norm GEMV's rule: `hn` may sit one ulp
    /// from the reference's where the Σ a² order differs).
    DENSE_GEMV_SANDWICH_GELU_MUL_BF16 = "gemv"::"dense_gemv_sandwich_gelu_mul_bf16"(
        A::output("a"), A::input("b"), A::output("c"), A::u32("m"), A::u32("n"), A::u32("k"),
        A::input("norm_w"), A::f32("eps"), A::input("mid"), A::input("x"), A::input("w_post").or_null())
}

/// Outputs (warps) a block of the CUDA whole-row entry takes.
const CUDA_WHOLE_ROW_SLOTS: u32 = 16;

/// CUDA: where K ≤ 3072 (the x2 fused-norm entry's rule: a lane's loads of
/// the gate/up row pair, 20 a batch (`GEMV_M1C_PAIR`), in at most two
/// batches) and one warp an output over all of K, [`CUDA_WHOLE_ROW_SLOTS`]
/// warps a block, fits one wave (a block an SM), one pass of `_whole`:
/// every block forms the row in dynamic shared memory (2k bytes) with its
/// weight loads in flight. Past one wave, two passes, `_row` (one block
/// forms `a` and puts the normed row in the workspace) and `_ws` (the gated
/// `_m1` GEMV over it): what the two launches cost. On the H200 (bench-model
/// batch 1, three alternating rounds each) the one pass won at 26b-a4b's
/// 2112 columns (132 blocks: 245.7-247.4 tok/s against 237.4-239.4) and lost
/// at the default shape's 10240 (640 blocks: 379.7-381.3 against
/// 391.6-395.5), every block paying the prologue; a persistent grid whose
/// warps walked the outputs (the prologue once a block) lost too (371.5-381.0).
/// Past K = 3072, the gated `_m1` geometry under this kernel's own entry.
/// `SWITCHYARD_CUDA_SANDWICH_PASSES` (1 or 2) overrides the choice.
pub(super) fn cuda_sandwich_gemv(a: &PlanArgs, f: &DeviceFacts) -> Result<CudaPlan> {
    static PASSES: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    one_row(a)?;
    let (n, k) = (u64::from(a.u32("n")?), u64::from(a.u32("k")?));
    let row_bytes = shared_row_bytes(a, f, k)?;
    if k / 8 > 32 * CUDA_M1_LOADS_PER_LANE {
        let mut plan = cuda_m1(a, n, 2 * n, a.kernel.symbol)?;
        plan.passes[0].shared_bytes = row_bytes;
        return Ok(plan);
    }
    let blocks = groups(a.kernel, n, u64::from(CUDA_WHOLE_ROW_SLOTS))?;
    let one_wave = f.multiprocessors == 0 || blocks <= f.multiprocessors;
    let passes = env_override(&PASSES, "SWITCHYARD_CUDA_SANDWICH_PASSES", |p| p == 1 || p == 2).unwrap_or(if one_wave { 1 } else { 2 });
    if passes == 1 {
        let pass = CudaPass {
            entry: "dense_gemv_sandwich_gelu_mul_bf16_whole",
            grid: [blocks, 1, 1],
            block: [32, 1, CUDA_WHOLE_ROW_SLOTS],
            shared_bytes: row_bytes,
        };
        return Ok(CudaPlan { passes: vec![pass], workspace_bytes: CUDA_MIN_WORKSPACE });
    }
    let row = CudaPass { entry: "dense_gemv_sandwich_gelu_mul_bf16_row", grid: [1, 1, 1], block: [256, 1, 1], shared_bytes: row_bytes };
    let mut plan = cuda_m1(a, n, 2 * n, "dense_gemv_sandwich_gelu_mul_bf16_ws")?;
    plan.passes.insert(0, row);
    plan.workspace_bytes = plan.workspace_bytes.max(2 * k);
    Ok(plan)
}

/// WGSL: where the gated GEMV's plan is its one m = 1 pass (Gemma's gate/up
/// at batch 1) and workgroup memory holds hn beside the m = 1 scratch, one
/// dispatch of `dense_gemv_sandwich_gelu_mul_bf16_m1` over that pass's
/// grid: every workgroup forms the row into workgroup memory itself and
/// workgroup 0 stores `a`, one dispatch fewer a layer than the row pass (not
/// yet measured on a device; `SWITCHYARD_WGSL_SANDWICH_ROW_PASS=1`, read
/// once a process, keeps the row pass). Otherwise one workgroup forms `a`
/// and packs `hn` into the first k / 2 workspace words (the kernel's own
/// entry), then the gated GEMV's own plan runs over it (gelu_gemv.wgsli's
/// entries, composed into this kernel's shader, with `WS_BASE` moving their
/// partial sums past the row).
pub(super) fn wgsl_sandwich_gemv(a: &PlanArgs, f: &DeviceFacts) -> Result<WgslPlan> {
    static ROW_PASS: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let row_pass = env_override(&ROW_PASS, "SWITCHYARD_WGSL_SANDWICH_ROW_PASS", |v| v == 1).is_some();
    one_row(a)?;
    sandwich_plan(wgsl_dense_gemv_gelu_mul(a, f)?, a, f, row_pass)
}

/// [`wgsl_sandwich_gemv`] over the gated GEMV's plan `inner`.
pub(super) fn sandwich_plan(mut inner: WgslPlan, a: &PlanArgs, f: &DeviceFacts, row_pass: bool) -> Result<WgslPlan> {
    let k = u64::from(a.u32("k")?);
    let xn_bytes = 2 * k;
    let fits = xn_bytes + u64::from(WGSL_M1_SHARED_BYTES + WGSL_NORM_SHARED_BYTES) <= u64::from(f.max_shared_bytes);
    if !row_pass && fits && inner.passes.len() == 1 && inner.passes[0].entry == "dense_gemv_gelu_mul_bf16_m1" {
        let pass = &mut inner.passes[0];
        pass.entry = "dense_gemv_sandwich_gelu_mul_bf16_m1";
        // k ≤ the adapter's workgroup storage / 2 here.
        pass.consts.extend([("XN_STAGED", 1), ("XN_VECS", (k / 8) as u32)]);
        // The shader's workspace binding is declared for every entry: a vector.
        inner.workspace_bytes = 16;
        return Ok(inner);
    }
    let mut plan = behind_row_pass(inner, a, DENSE_GEMV_GELU_MUL_BF16.symbol);
    let row_words = u32::try_from(k / 2).map_err(|_| Error::invalid(a.kernel.symbol, "k", format!("k = {k} must be < 2^33")))?;
    for pass in &mut plan.passes[1..] {
        pass.consts.push(("WS_BASE", row_words));
    }
    // Whole vectors: the shader views the workspace as array<vec4<u32>>.
    plan.workspace_bytes = (plan.workspace_bytes + 2 * k).next_multiple_of(16);
    Ok(plan)
}

cuda_plan!(DENSE_GEMV_SANDWICH_GELU_MUL_BF16 => cuda_sandwich_gemv);
wgsl_plan!(DENSE_GEMV_SANDWICH_GELU_MUL_BF16, "gemv/dense_gemv_sandwich_gelu_mul_bf16.wgsl" => wgsl_sandwich_gemv);

/// The sandwich's row: `post_norm_add_pre_norm_bf16`'s inputs for one row.
#[derive(Clone, Copy, Debug)]
pub struct SandwichRow {
    /// Where `resid_out` goes (the residual stream after the attention
    /// block), bf16 `[k]`.
    pub out: Region,
    /// The residual stream before the attention block's output is added, bf16 `[k]`.
    pub resid: Region,
    /// The attention block's output, bf16 `[k]`.
    pub x: Region,
    /// The post-attention norm's weight, bf16 `[k]`; `None`: unscaled.
    pub w_post: Option<Region>,
    /// The pre-feedforward norm's weight, bf16 `[k]`.
    pub w_pre: Region,
}

impl Ops {
    /// See [`DENSE_GEMV_SANDWICH_GELU_MUL_BF16`]: `b` the stacked gate/up
    /// weight `[2n, k]`, `c` the gated activation `[n]`.
    pub fn dense_gemv_sandwich_gelu_mul_bf16(&self, row: &SandwichRow, b: Region, c: Region, n: usize, k: usize, eps: f32) -> Result<()> {
        let s = DENSE_GEMV_SANDWICH_GELU_MUL_BF16.symbol;
        let u = gemv_shape(s, row.out, b, 1, n, k)?;
        let rows = n.checked_mul(2).filter(|r| u32::try_from(*r).is_ok());
        let rows = rows.ok_or_else(|| Error::invalid(s, "n", format!("2 · n = 2 · {n} weight rows must be < 2^32")))?;
        require_eps(s, eps)?;
        fused_row_checks(
            s,
            row.out,
            k,
            &[("norm_w", Some(row.w_pre)), ("mid", Some(row.resid)), ("x", Some(row.x)), ("w_post", row.w_post)],
        )?;
        let mut args = gemv_operands(row.out, b, c, [1, n, k], rows, u);
        args.extend([
            region(row.w_pre, bf16s(k)),
            scalar(F(eps)),
            region(row.resid, bf16s(k)),
            region(row.x, bf16s(k)),
            optional(row.w_post, bf16s(k)),
        ]);
        self.launch(&DENSE_GEMV_SANDWICH_GELU_MUL_BF16, &args)
    }
}

/// (N, K): Gemma's gate/up at hidden 2560 in part, past one wave of the
/// CUDA whole-row grid on an H200 (2200 columns: 138 blocks, so the two
/// passes) and on WGSL's m = 1 path; 26b-a4b's K within one wave (the one
/// pass); K of 390 vectors (CUDA slices, WGSL m = 1 with N not a multiple
/// of its four columns); K = 5376 over few rows (CUDA slices of 4, WGSL's K
/// split, whose partial sums sit past the row in the workspace); a short K;
/// the shortest (one vector). The fourth runs without a `w_post`.
const SANDWICH_GEMV_SHAPES: [(usize, usize); 6] = [(2200, 2560), (1000, 2816), (514, 3120), (300, 5376), (72, 520), (9, 8)];

fn sandwich_gemv_cases(g: &mut Gen) -> Vec<Case> {
    SANDWICH_GEMV_SHAPES
        .iter()
        .enumerate()
        .map(|(i, &(n, k))| {
            // The sandwich's own case ranges (norm/mod.rs), and its rule for
            // resid_out: 2 ulp of the residual add's addends.
            let (mid_v, mid) = g.bf16(k, 0.5, 4.0);
            let (x_v, x) = g.bf16(k, 0.01, 3.0);
            let (w_post_v, w_post) = g.bf16(k, 0.05, 0.5);
            let (_, norm_w) = g.bf16(k, 0.1, 2.0);
            let (_, b) = g.bf16(2 * n * k, 0.01, 0.5);
            let scaled = i != 3;
            let a_tolerance = derived(residual_add_magnitudes(&mid_v, &x_v, scaled.then_some(&w_post_v[..]), None, 1, k, 1e-6));
            Case {
                kernel: &DENSE_GEMV_SANDWICH_GELU_MUL_BF16,
                label: format!("n={n} k={k} w_post={scaled}"),
                buffers: vec![
                    Buffer::output("a", DType::BF16, k, a_tolerance),
                    Buffer::input("b", b),
                    Buffer::output("c", DType::BF16, n, Tolerance::Nmse(NORMED_NMSE)),
                    Buffer::input("norm_w", norm_w),
                    Buffer::input("mid", mid),
                    Buffer::input("x", x),
                    Buffer::input("w_post", w_post),
                ],
                run: Box::new(move |o, r| {
                    let row = SandwichRow { out: r[0], resid: r[4], x: r[5], w_post: scaled.then_some(r[6]), w_pre: r[3] };
                    o.dense_gemv_sandwich_gelu_mul_bf16(&row, r[1], r[2], n, k, 1e-6)
                }),
            }
        })
        .collect()
}

inventory::submit! { CaseSet { kernel: &DENSE_GEMV_SANDWICH_GELU_MUL_BF16, cases: sandwich_gemv_cases } }
