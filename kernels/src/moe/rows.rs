//! The row kernels on either side of a Gemma 4 MoE layer's expert GEMMs,
//! each one launch where the separate kernels were two or three, every one a
//! fixed few microseconds of a decode step, 30 layers deep:
//! - [`MOE_NORM_GATHER_BF16`]: the experts' input norm and the gather into
//!   expert order ([`RMSNORM_BF16`] then [`MOE_GATHER_BF16`]);
//! - [`MOE_COMBINE_POST_NORMS_BF16`]: the weighted combine and both post
//!   norms, `comb = post_ff_norm_1(mlp) + post_ff_norm_2(combine(y))`
//!   ([`MOE_COMBINE_BF16`], [`RMSNORM_BF16`] and
//!   [`POST_NORM_ADD_PRE_NORM_BF16`] without its second norm).
//!
//! [`MOE_GATHER_BF16`]: super::expert::MOE_GATHER_BF16
//! [`MOE_COMBINE_BF16`]: super::expert::MOE_COMBINE_BF16
//! [`RMSNORM_BF16`]: crate::norm::RMSNORM_BF16
//! [`POST_NORM_ADD_PRE_NORM_BF16`]: crate::norm::POST_NORM_ADD_PRE_NORM_BF16
use super::expert::{positive, routing};
use crate::norm::{aligned16, derived, residual_add_magnitudes};
use crate::ops::{bf16s, i32_arg, region, require, require_eps, saturating_product, scalar, words, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use crate::plan::{CudaPass, CudaPlan, DeviceFacts, PlanArgs, WgslPlan};
use switchyard_core::codec::bytes;
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, Error, Region, Result};

declare_kernel! {
    /// `out[s] = bf16(rmsnorm(x[pair_of_slot[s] / k]; w))` ([`RMSNORM_BF16`]'s
    /// arithmetic: Σx² in f32 in any order, `x · inv · w` in f32) for slots
    /// with a pair; a zero row for `pair_of_slot = −1`, and a NaN row where
    /// the token is outside `[0, rows)` ([`MOE_GATHER_BF16`]'s rules). Shapes:
    /// out bf16 `[n, h]`, x `[rows, h]`, w `[h]`, pair_of_slot i32 `[n]`. h even.
    ///
    /// [`MOE_GATHER_BF16`]: super::expert::MOE_GATHER_BF16
    /// [`RMSNORM_BF16`]: crate::norm::RMSNORM_BF16
    MOE_NORM_GATHER_BF16 = "moe_rows"::"moe_norm_gather_bf16"(
        A::output("out"), A::input("x"), A::input("w"), A::input("pair_of_slot"),
        A::i32("n"), A::i32("k"), A::i32("h"), A::i32("rows"), A::f32("eps"))
}

/// Largest `h` [`MOE_COMBINE_POST_NORMS_BF16`] takes: the CUDA entry stages
/// the row's combined and dense halves in shared memory (4·h bytes, 128 KiB
/// at this bound, within every sm_80+ opt-in limit).
pub const COMBINE_POST_NORMS_MAX_H: usize = 32768;

declare_kernel! {
    /// Per token row `t`: `e = bf16(Σ_j topk_w[t·k + j] · y[slot_of_pair[t·k + j]])`
    /// ([`MOE_COMBINE_BF16`]'s sum: j order, f32, unfused; slot −1 skipped),
    /// `m = bf16(rmsnorm(mlp[t]; w_mlp))` and
    /// `out[t] = bf16(m + bf16(rmsnorm(e; w_moe)))` ([`RMSNORM_BF16`]'s and
    /// [`POST_NORM_ADD_PRE_NORM_BF16`]'s arithmetic: Σx² in f32 in any order,
    /// `x · inv · w` in f32). A slot outside `[0, n)` other than −1 gives a
    /// NaN row. Shapes: out, mlp bf16 `[rows, h]`, y bf16 `[n, h]`,
    /// slot_of_pair i32 and topk_w f32 `[rows·k]`, w_mlp and w_moe bf16 `[h]`.
    /// h even and at most [`COMBINE_POST_NORMS_MAX_H`].
    ///
    /// [`MOE_COMBINE_BF16`]: super::expert::MOE_COMBINE_BF16
    /// [`RMSNORM_BF16`]: crate::norm::RMSNORM_BF16
    /// [`POST_NORM_ADD_PRE_NORM_BF16`]: crate::norm::POST_NORM_ADD_PRE_NORM_BF16
    MOE_COMBINE_POST_NORMS_BF16 = "moe_rows"::"moe_combine_post_norms_bf16"(
        A::output("out"), A::input("mlp"), A::input("y"), A::input("slot_of_pair"), A::input("topk_w"),
        A::input("w_mlp"), A::input("w_moe"), A::i32("rows"), A::i32("k"), A::i32("h"), A::i32("n"), A::f32("eps"))
}

/// CUDA: a block per row, a thread per 16-byte unit of the row (8 columns;
/// a word of 2 where the row or a pointer is not 16-byte aligned) up to 1024,
/// so a decode row's k expert loads are all in flight at once; the row's
/// combined and dense halves wait out the two reductions in shared memory.
fn cuda_combine_post_norms(a: &PlanArgs, facts: &DeviceFacts) -> Result<CudaPlan> {
    let shared_bytes = 4 * a.u32("h")?;
    // Beside the block reduction's static 32 floats.
    if shared_bytes + 128 > facts.max_shared_bytes {
        return Err(Error::Unsupported(format!(
            "kernel {}: h = {} stages {shared_bytes} bytes of shared memory a block; the device allows {}",
            a.kernel.symbol,
            shared_bytes / 4,
            facts.max_shared_bytes
        )));
    }
    Ok(CudaPlan {
        passes: vec![CudaPass {
            entry: MOE_COMBINE_POST_NORMS_BF16.symbol,
            grid: [a.u32("rows")?, 1, 1],
            block: [row_threads(a, &["out", "mlp", "y", "w_mlp", "w_moe"])?, 1, 1],
            shared_bytes,
        }],
        workspace_bytes: 0,
    })
}

/// Threads of a row block: a thread a unit of the row (16 bytes where `h`
/// and every named pointer allow, else a word), 32 to 1024.
fn row_threads(a: &PlanArgs, pointers: &[&str]) -> Result<u32> {
    let h = a.u32("h")?;
    let units = if h % 8 == 0 && aligned16(a, pointers)? { h / 8 } else { h / 2 };
    Ok(units.next_multiple_of(32).clamp(32, 1024))
}

/// CUDA: a block per slot, each normalising its token's row (at decode the k
/// slots of the one token do so side by side, which costs no more time than
/// one block and saves the gather's launch).
fn cuda_norm_gather(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    Ok(CudaPlan::single(a.kernel, [a.u32("n")?, 1, 1], [row_threads(a, &["out", "x", "w"])?, 1, 1]))
}

/// WGSL: one workgroup of 256 (the shader's fixed size) a slot.
fn wgsl_norm_gather(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    Ok(WgslPlan::single(a.kernel, [a.u32("n")?, 1, 1]))
}

/// WGSL: one workgroup of 256 (the shader's fixed size) a token row.
fn wgsl_combine_post_norms(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    Ok(WgslPlan::single(a.kernel, [a.u32("rows")?, 1, 1]))
}

cuda_plan!(MOE_NORM_GATHER_BF16 => cuda_norm_gather);
wgsl_plan!(MOE_NORM_GATHER_BF16, "moe/moe_norm_gather_bf16.wgsl" => wgsl_norm_gather);
cuda_plan!(MOE_COMBINE_POST_NORMS_BF16 => cuda_combine_post_norms);
wgsl_plan!(MOE_COMBINE_POST_NORMS_BF16, "moe/moe_combine_post_norms_bf16.wgsl" => wgsl_combine_post_norms);

/// The device buffers of [`Ops::moe_combine_post_norms_bf16`] besides its sizes.
#[derive(Clone, Copy, Debug)]
pub struct CombinePostNorms {
    /// bf16 `[rows, h]`: the layer's MoE-branch output.
    pub out: Region,
    /// bf16 `[rows, h]`: the dense MLP's output, before its norm.
    pub mlp: Region,
    /// bf16 `[n, h]`: the expert rows in slot order.
    pub y: Region,
    /// i32 `[rows·k]`.
    pub slot_of_pair: Region,
    /// f32 `[rows·k]`.
    pub topk_w: Region,
    /// bf16 `[h]`: the dense MLP's post norm weight.
    pub w_mlp: Region,
    /// bf16 `[h]`: the experts' post norm weight.
    pub w_moe: Region,
}

impl Ops {
    /// See [`MOE_NORM_GATHER_BF16`].
    #[allow(clippy::too_many_arguments)]
    pub fn moe_norm_gather_bf16(
        &self,
        out: Region,
        x: Region,
        w: Region,
        pair_of_slot: Region,
        n: usize,
        top_k: usize,
        h: usize,
        rows: usize,
        eps: f32,
    ) -> Result<()> {
        let s = MOE_NORM_GATHER_BF16.symbol;
        positive(s, &[("n", n), ("k", top_k), ("h", h), ("rows", rows)])?;
        require(h % 2 == 0, s, "h", || format!("h = {h} must be even"))?;
        require_eps(s, eps)?;
        self.launch(
            &MOE_NORM_GATHER_BF16,
            &[
                region(out, bf16s(saturating_product(&[n, h]))),
                region(x, bf16s(saturating_product(&[rows, h]))),
                region(w, bf16s(h)),
                region(pair_of_slot, words(n)),
                scalar(I(n as i32)),
                scalar(I(top_k as i32)),
                scalar(I(h as i32)),
                scalar(I(rows as i32)),
                scalar(F(eps)),
            ],
        )
    }

    /// See [`MOE_COMBINE_POST_NORMS_BF16`].
    pub fn moe_combine_post_norms_bf16(&self, b: CombinePostNorms, rows: usize, top_k: usize, h: usize, n: usize, eps: f32) -> Result<()> {
        let s = MOE_COMBINE_POST_NORMS_BF16.symbol;
        positive(s, &[("rows", rows), ("k", top_k), ("h", h), ("n", n)])?;
        require(h % 2 == 0 && h <= COMBINE_POST_NORMS_MAX_H, s, "h", || {
            format!("h = {h} must be even and at most {COMBINE_POST_NORMS_MAX_H}")
        })?;
        require_eps(s, eps)?;
        let row = bf16s(saturating_product(&[rows, h]));
        let pairs = words(saturating_product(&[rows, top_k]));
        self.launch(
            &MOE_COMBINE_POST_NORMS_BF16,
            &[
                region(b.out, row),
                region(b.mlp, row),
                region(b.y, bf16s(saturating_product(&[n, h]))),
                region(b.slot_of_pair, pairs),
                region(b.topk_w, pairs),
                region(b.w_mlp, bf16s(h)),
                region(b.w_moe, bf16s(h)),
                scalar(I(rows as i32)),
                scalar(I(top_k as i32)),
                scalar(I(h as i32)),
                scalar(I(i32_arg(s, "n", n)?)),
                scalar(F(eps)),
            ],
        )
    }
}

fn norm_gather_cases(g: &mut Gen) -> Vec<Case> {
    // (1, 8, 128, 2816): a 26b-a4b decode step's eight slots (16-byte units,
    // one a thread); h 42: the word path; a padded tail of empty slots.
    [(1usize, 8usize, 128usize, 2816usize), (1, 1, 4, 64), (13, 4, 8, 42), (17, 8, 16, 2824)]
        .into_iter()
        .map(|(rows, k, e, h)| {
            let (mut pos, _, _) = routing(g, rows, k, e);
            let n = rows * k + 3;
            pos.extend([-1, -1, -1]);
            let (_, x) = g.bf16(rows * h, 0.01, 3.0);
            let (_, w) = g.bf16(h, 0.05, 2.0);
            Case {
                kernel: &MOE_NORM_GATHER_BF16,
                label: format!("rows={rows} k={k} h={h}"),
                buffers: vec![
                    Buffer::output("out", DType::BF16, n * h, Tolerance::Bf16Ulp(1)),
                    Buffer::input("x", x),
                    Buffer::input("w", w),
                    Buffer::input("pair_of_slot", bytes::i32_bytes(&pos)),
                ],
                run: Box::new(move |o, a| o.moe_norm_gather_bf16(a[0], a[1], a[2], a[3], n, k, h, rows, 1e-6)),
            }
        })
        .collect()
}

/// `x · (mean(x²) + eps)^-0.5 · w` per row, in f64: the magnitudes the
/// tolerance is built from, not a value compared against.
fn normalized_f64(x: &[f32], w: &[f32], rows: usize, h: usize, eps: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows * h);
    for r in x.chunks_exact(h).take(rows) {
        let inv = 1.0 / (r.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / h as f64 + eps as f64).sqrt();
        out.extend(r.iter().zip(w).map(|(&v, &w)| (v as f64 * inv * w as f64) as f32));
    }
    out
}

fn combine_post_norms_cases(g: &mut Gen) -> Vec<Case> {
    // (1, 8, 128, 2816): a 26b-a4b decode row (16-byte units, one a thread);
    // h 42: the word-at-a-time path; (17, 8, 16, 2824): rows with a dropped
    // pair; h 8216: more 16-byte units than a CUDA block has threads.
    [(1usize, 8usize, 128usize, 2816usize), (1, 1, 4, 64), (5, 4, 8, 42), (17, 8, 16, 2824), (3, 4, 8, 8216)]
        .into_iter()
        .map(|(rows, k, e, h)| {
            let (_, mut sop, _) = routing(g, rows, k, e);
            if rows > 2 {
                sop[1] = -1;
            }
            let n = rows * k;
            let eps = 1e-6;
            let (yv, _) = g.f32(n * h, 0.01, 2.0);
            let y = bytes::bf16_bytes(&yv);
            let (wv, w) = g.f32(n, 0.05, 1.0);
            let (mlp_v, mlp) = g.bf16(rows * h, 0.01, 3.0);
            let (w_mlp_v, w_mlp) = g.bf16(h, 0.05, 2.0);
            let (w_moe_v, w_moe) = g.bf16(h, 0.05, 2.0);
            // The combined rows as f32 (magnitudes only), and the dense half's norm.
            let mut e_v = vec![0f32; rows * h];
            for (t, row) in e_v.chunks_exact_mut(h).enumerate() {
                for j in 0..k {
                    if let Ok(s) = usize::try_from(sop[t * k + j]) {
                        for (a, &v) in row.iter_mut().zip(&yv[s * h..(s + 1) * h]) {
                            *a += wv[t * k + j] * v;
                        }
                    }
                }
            }
            let m_v = normalized_f64(&mlp_v, &w_mlp_v, rows, h, eps);
            let magnitudes = residual_add_magnitudes(&m_v, &e_v, Some(&w_moe_v), None, rows, h, eps);
            Case {
                kernel: &MOE_COMBINE_POST_NORMS_BF16,
                label: format!("rows={rows} k={k} h={h}"),
                buffers: vec![
                    Buffer::output("out", DType::BF16, rows * h, derived(magnitudes)),
                    Buffer::input("mlp", mlp),
                    Buffer::input("y", y),
                    Buffer::input("slot_of_pair", bytes::i32_bytes(&sop)),
                    Buffer::input("topk_w", w),
                    Buffer::input("w_mlp", w_mlp),
                    Buffer::input("w_moe", w_moe),
                ],
                run: Box::new(move |o, a| {
                    let b = CombinePostNorms { out: a[0], mlp: a[1], y: a[2], slot_of_pair: a[3], topk_w: a[4], w_mlp: a[5], w_moe: a[6] };
                    o.moe_combine_post_norms_bf16(b, rows, k, h, n, eps)
                }),
            }
        })
        .collect()
}

inventory::submit! { CaseSet { kernel: &MOE_NORM_GATHER_BF16, cases: norm_gather_cases } }
inventory::submit! { CaseSet { kernel: &MOE_COMBINE_POST_NORMS_BF16, cases: combine_post_norms_cases } }

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_plan_gives_a_thread_a_unit_up_to_1024() {
        let plan = |h: u32, addr: u64| {
            let args = [P(addr), P(addr), P(addr), P(addr), P(addr), P(addr), P(addr), I(1), I(8), I(h as i32), I(8), F(1e-6)];
            let p = cuda_combine_post_norms(&PlanArgs::new(&MOE_COMBINE_POST_NORMS_BF16, &args), &crate::plan::H200).unwrap();
            (p.passes[0].block[0], p.passes[0].shared_bytes)
        };
        assert_eq!(plan(2816, 256), (352, 4 * 2816));
        // A misaligned pointer: a word (2 columns) a thread.
        assert_eq!(plan(2816, 258), (1024, 4 * 2816));
        assert_eq!(plan(42, 256), (32, 4 * 42));
        assert_eq!(plan(32768, 256).0, 1024);
        // A device with less shared memory than the staged row: refused by name.
        let args = [P(256), P(256), P(256), P(256), P(256), P(256), P(256), I(1), I(8), I(32768), I(8), F(1e-6)];
        let small = DeviceFacts { max_shared_bytes: 101_376, ..crate::plan::H200 };
        let e = cuda_combine_post_norms(&PlanArgs::new(&MOE_COMBINE_POST_NORMS_BF16, &args), &small).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)) && e.to_string().contains("moe_combine_post_norms_bf16"), "{e}");
    }

    #[test]
    fn cuda_norm_gather_takes_a_block_a_slot() {
        let args = [P(256), P(256), P(256), P(256), I(8), I(8), I(2816), I(1), F(1e-6)];
        let p = cuda_norm_gather(&PlanArgs::new(&MOE_NORM_GATHER_BF16, &args), &crate::plan::H200).unwrap();
        assert_eq!((p.passes[0].grid, p.passes[0].block[0]), ([8, 1, 1], 352));
    }
}
