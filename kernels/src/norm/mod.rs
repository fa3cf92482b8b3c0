//! RMSNorm family (Gemma 4: `y = x · (mean(x²) + eps)^-0.5 · w`, no `1 + w`
//! offset; a null `w` means unscaled). All statistics in f32.
use crate::ops::{bf16s, i32_arg, optional, region, require, require_eps, saturating_product, scalar, words, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use crate::plan::{positive, row_slots, CudaPass, CudaPlan, DeviceFacts, PlanArgs, WgslPass, WgslPlan};
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, Region, Result};

declare_kernel! {
    /// `out[r, j] = bf16(x[r, j] · inv_r · w[j])`, `inv_r = (Σⱼ x² / dim + eps)^-0.5`
    /// in f32; one rounding at the store. `w` null: `out = bf16(x · inv)`.
    /// Shapes: bf16 `[rows, dim]`, `w` bf16 `[dim]`, `dim` even.
    RMSNORM_BF16 = "norm"::"rmsnorm_bf16"(
        A::output("out"), A::input("x"), A::input("w").or_null(), A::i32("rows"), A::i32("dim"), A::f32("eps"))
}

declare_kernel! {
    /// The sandwich between sub-blocks:
    /// `t = bf16(rmsnorm(x; w_post))`, `resid_out = bf16(resid + t)`, then
    /// `normed = bf16(rmsnorm(resid_out; w_pre))` computed from the rounded
    /// `resid_out`. Three roundings, at those three stores. `w_post` null:
    /// unscaled. `w_pre` null: the second output is skipped and `normed` may
    /// be null. `resid_out` may alias `resid`.
    POST_NORM_ADD_PRE_NORM_BF16 = "norm"::"post_norm_add_pre_norm_bf16"(
        A::output("resid_out"), A::output("normed").or_null(), A::input("resid"), A::input("x"),
        A::input("w_post").or_null(), A::input("w_pre").or_null(), A::i32("rows"), A::i32("dim"), A::f32("eps"))
}

declare_kernel! {
    /// A layer's output: `t = bf16(rmsnorm(x; w))`, `s = bf16(mid + t)`,
    /// `out = bf16(s · layer_scalar[0])`; `layer_scalar` is one f32 in device
    /// memory. Three roundings, as HF's bf16 graph does them.
    LAYER_OUT_BF16 = "norm"::"layer_out_bf16"(
        A::output("out"), A::input("mid"), A::input("x"), A::input("w").or_null(),
        A::input("layer_scalar"), A::i32("rows"), A::i32("dim"), A::f32("eps"))
}

/// Most threads per CUDA row block (norm.cu's `NORM_BOUNDS` and embed.cu's
/// `EMBED_BOUNDS`: `__launch_bounds__(128, 4)`).
pub const ROW_MAX_THREADS: usize = 128;
/// Registers per thread those launch bounds allow (65536 / (128 · 4)): the
/// plans count resident blocks with it, so a persistent grid is never more
/// than one wave whatever the compiler allocates below the cap.
pub const ROW_REG_CAP: u32 = 128;

/// A row's chunks: 16-byte vectors when `dim % 8 == 0`, else 4-byte pairs.
fn row_chunks(dim: usize) -> usize {
    if dim.is_multiple_of(8) { dim / 8 } else { dim.div_ceil(2) }.max(1)
}

/// Threads per row block: the row's 16-byte chunks (4-byte pairs when
/// `dim % 8 != 0`) split over `per` = 1..=8 chunks per thread (the CUDA
/// kernels keep up to 8 per thread in registers), picking the split that
/// leaves the fewest idle chunk slots once the block is rounded up to whole
/// warps, ties going to more chunks per thread (fewer, fuller threads measured
/// faster on the H200); at most [`ROW_MAX_THREADS`].
/// dim 5376 -> 96 threads x 7 chunks.
pub fn norm_block(dim: usize) -> u32 {
    let chunks = row_chunks(dim);
    let mut best = (usize::MAX, 32usize);
    for per in (1..=8usize).rev() {
        let threads = chunks.div_ceil(per).next_multiple_of(32).clamp(32, ROW_MAX_THREADS);
        // Chunks past threads * per are re-read in a tail loop: count them as waste too.
        let waste = (threads * per).saturating_sub(chunks) + chunks.saturating_sub(threads * per).saturating_mul(4);
        if waste < best.0 {
            best = (waste, threads);
        }
    }
    best.1 as u32
}

/// Threads per row block when the rows do not fill the GPU (decode: one row
/// a sequence): the most threads the launch bounds allow, at the fewest
/// chunks each. Each row's block is then alone on its SM, and its time is
/// the dependency chain one thread walks (ncu on the H200, decode at dim
/// 2560: `post_norm_add_pre_norm_bf16` as 64 threads x 5 chunks took 8.1 us,
/// 10 cycles per instruction on one warp per scheduler), not bandwidth.
/// dim 2560 -> 128 threads x 3 chunks.
pub fn latency_row_block(dim: usize) -> u32 {
    let chunks = row_chunks(dim);
    let per = chunks.div_ceil(ROW_MAX_THREADS).clamp(1, 8);
    chunks.div_ceil(per).next_multiple_of(32).clamp(32, ROW_MAX_THREADS) as u32
}

/// Blocks of `threads` one SM keeps resident at [`ROW_REG_CAP`] registers a
/// thread (64K registers, 2048 threads and 32 blocks an SM on sm_80/sm_90):
/// 96 threads -> 5.
pub fn resident_row_blocks(threads: u32) -> u32 {
    let t = threads.max(1).next_multiple_of(32);
    (65536 / (ROW_REG_CAP * t)).min(2048 / t).clamp(1, 32)
}

/// A persistent grid over `rows` rows: one block per row up to one full wave
/// ([`resident_row_blocks`] on every SM); the kernels loop over rows
/// `b, b + grid, ...`. Without an SM count (0), one block per row.
pub fn persistent_rows(rows: u32, threads: u32, f: &DeviceFacts) -> u32 {
    match f.multiprocessors {
        0 => rows,
        sms => rows.min(sms.saturating_mul(resident_row_blocks(threads))),
    }
}

/// Whether every named pointer argument that is not null is 16-byte aligned.
pub fn aligned16(a: &PlanArgs, names: &[&str]) -> Result<bool> {
    for n in names {
        if a.addr(n)? % 16 != 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The pipelined entry points of each norm kernel, by cached chunks per thread (norm.cu).
const RMSNORM_PIPES: [&str; 8] = [
    "rmsnorm_bf16_c1",
    "rmsnorm_bf16_c2",
    "rmsnorm_bf16_c3",
    "rmsnorm_bf16_c4",
    "rmsnorm_bf16_c5",
    "rmsnorm_bf16_c6",
    "rmsnorm_bf16_c7",
    "rmsnorm_bf16_c8",
];
const SANDWICH_PIPES: [&str; 8] = [
    "post_norm_add_pre_norm_bf16_c1",
    "post_norm_add_pre_norm_bf16_c2",
    "post_norm_add_pre_norm_bf16_c3",
    "post_norm_add_pre_norm_bf16_c4",
    "post_norm_add_pre_norm_bf16_c5",
    "post_norm_add_pre_norm_bf16_c6",
    "post_norm_add_pre_norm_bf16_c7",
    "post_norm_add_pre_norm_bf16_c8",
];
const LAYER_OUT_PIPES: [&str; 8] = [
    "layer_out_bf16_c1",
    "layer_out_bf16_c2",
    "layer_out_bf16_c3",
    "layer_out_bf16_c4",
    "layer_out_bf16_c5",
    "layer_out_bf16_c6",
    "layer_out_bf16_c7",
    "layer_out_bf16_c8",
];

/// CUDA plan of the three norm kernels: a persistent grid
/// ([`persistent_rows`]) of [`norm_block`] threads ([`latency_row_block`]
/// when there are fewer rows than SMs). Where the row moves in
/// 16-byte vectors (`dim % 8 == 0`, the `vectors` pointers 16-byte aligned)
/// and `C = ⌈dim / 8 / threads⌉ <= 8`, the entry is the pipelined `<kernel>_c<C>`:
/// each thread keeps its C chunks of a row in registers and the next row's x
/// is loaded before this row's reduction. Otherwise the kernel's own entry
/// (one row at a time, any alignment and width).
///
/// H200 numbers for the bench row (rows 4096, dim 5376): 96 threads x 7
/// chunks; 5 blocks an SM at the 128-register cap (15 warps), grid 660 = one
/// wave, 6.2 rows a block; bytes in flight an SM: 5 blocks x (the next x row,
/// 10.5 KiB, plus this row's resid / mid while it is consumed) ~ 55-105 KiB,
/// above the ~40 KiB an SM needs at the H200's bandwidth-latency product.
fn cuda_norm_plan(a: &PlanArgs, f: &DeviceFacts, pipes: &[&'static str; 8], vectors: &[&str]) -> Result<CudaPlan> {
    let rows = positive(a, "rows")?;
    let dim = positive(a, "dim")? as usize;
    let threads = if rows < f.multiprocessors { latency_row_block(dim) } else { norm_block(dim) };
    let per_thread = (dim / 8).div_ceil(threads as usize);
    let entry = if dim.is_multiple_of(8) && (1..=8).contains(&per_thread) && aligned16(a, vectors)? {
        pipes[per_thread - 1]
    } else {
        a.kernel.symbol
    };
    let grid = [persistent_rows(rows, threads, f), 1, 1];
    Ok(CudaPlan { passes: vec![CudaPass { entry, grid, block: [threads, 1, 1], shared_bytes: 0 }], workspace_bytes: 0 })
}

fn cuda_rmsnorm(a: &PlanArgs, f: &DeviceFacts) -> Result<CudaPlan> {
    cuda_norm_plan(a, f, &RMSNORM_PIPES, &["out", "x", "w"])
}

fn cuda_sandwich(a: &PlanArgs, f: &DeviceFacts) -> Result<CudaPlan> {
    // normed is written only when w_pre is set (the kernel ignores it otherwise).
    if a.is_null("w_pre")? {
        cuda_norm_plan(a, f, &SANDWICH_PIPES, &["resid_out", "resid", "x", "w_post"])
    } else {
        cuda_norm_plan(a, f, &SANDWICH_PIPES, &["resid_out", "normed", "resid", "x", "w_post", "w_pre"])
    }
}

fn cuda_layer_out(a: &PlanArgs, f: &DeviceFacts) -> Result<CudaPlan> {
    cuda_norm_plan(a, f, &LAYER_OUT_PIPES, &["out", "mid", "x", "w"])
}

/// WGSL: one workgroup of 256 per row (the shaders' fixed size).
fn wgsl_row_groups(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    Ok(WgslPlan::single(a.kernel, [a.u32("rows")?, 1, 1]))
}

/// WGSL layer_out: [`wgsl_row_groups`]' grid, with the register path's
/// slots (`SLOTS`) fitted to the row ([`row_slots`], which has the figures).
fn wgsl_layer_out(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    let consts = vec![("SLOTS", row_slots(a.u32("dim")?))];
    Ok(WgslPlan {
        passes: vec![WgslPass { entry: a.kernel.symbol, grid: [a.u32("rows")?, 1, 1], consts, extra: [0; 4] }],
        workspace_bytes: 0,
        arrivals: 0,
    })
}

cuda_plan!(RMSNORM_BF16 => cuda_rmsnorm);
cuda_plan!(POST_NORM_ADD_PRE_NORM_BF16 => cuda_sandwich);
cuda_plan!(LAYER_OUT_BF16 => cuda_layer_out);
wgsl_plan!(RMSNORM_BF16, "norm/rmsnorm_bf16.wgsl" => wgsl_row_groups);
wgsl_plan!(POST_NORM_ADD_PRE_NORM_BF16, "norm/post_norm_add_pre_norm_bf16.wgsl" => wgsl_row_groups);
wgsl_plan!(LAYER_OUT_BF16, "norm/layer_out_bf16.wgsl" => wgsl_layer_out);

fn check_rows(kernel: &str, rows: usize, dim: usize, eps: f32) -> Result<()> {
    require(rows > 0, kernel, "rows", || "rows must be > 0".into())?;
    require(dim > 0 && dim % 2 == 0, kernel, "dim", || format!("dim = {dim} must be positive and even (bf16 moves in pairs)"))?;
    require_eps(kernel, eps)
}

impl Ops {
    /// See [`RMSNORM_BF16`].
    pub fn rmsnorm_bf16(&self, out: Region, x: Region, w: Option<Region>, rows: usize, dim: usize, eps: f32) -> Result<()> {
        let k = RMSNORM_BF16.symbol;
        check_rows(k, rows, dim, eps)?;
        let n = bf16s(saturating_product(&[rows, dim]));
        self.launch(
            &RMSNORM_BF16,
            &[
                region(out, n),
                region(x, n),
                optional(w, bf16s(dim)),
                scalar(I(i32_arg(k, "rows", rows)?)),
                scalar(I(i32_arg(k, "dim", dim)?)),
                scalar(F(eps)),
            ],
        )
    }

    /// See [`POST_NORM_ADD_PRE_NORM_BF16`].
    #[allow(clippy::too_many_arguments)]
    pub fn post_norm_add_pre_norm_bf16(
        &self,
        resid_out: Region,
        normed: Option<Region>,
        resid: Region,
        x: Region,
        w_post: Option<Region>,
        w_pre: Option<Region>,
        rows: usize,
        dim: usize,
        eps: f32,
    ) -> Result<()> {
        let k = POST_NORM_ADD_PRE_NORM_BF16.symbol;
        check_rows(k, rows, dim, eps)?;
        require(w_pre.is_none() || normed.is_some(), k, "normed", || {
            "null while w_pre is set: the second output has nowhere to go".into()
        })?;
        let n = bf16s(saturating_product(&[rows, dim]));
        self.launch(
            &POST_NORM_ADD_PRE_NORM_BF16,
            &[
                region(resid_out, n),
                optional(normed, n),
                region(resid, n),
                region(x, n),
                optional(w_post, bf16s(dim)),
                optional(w_pre, bf16s(dim)),
                scalar(I(i32_arg(k, "rows", rows)?)),
                scalar(I(i32_arg(k, "dim", dim)?)),
                scalar(F(eps)),
            ],
        )
    }

    /// See [`LAYER_OUT_BF16`].
    #[allow(clippy::too_many_arguments)]
    pub fn layer_out_bf16(
        &self,
        out: Region,
        mid: Region,
        x: Region,
        w: Option<Region>,
        layer_scalar: Region,
        rows: usize,
        dim: usize,
        eps: f32,
    ) -> Result<()> {
        let k = LAYER_OUT_BF16.symbol;
        check_rows(k, rows, dim, eps)?;
        let n = bf16s(saturating_product(&[rows, dim]));
        self.launch(
            &LAYER_OUT_BF16,
            &[
                region(out, n),
                region(mid, n),
                region(x, n),
                optional(w, bf16s(dim)),
                region(layer_scalar, words(1)),
                scalar(I(i32_arg(k, "rows", rows)?)),
                scalar(I(i32_arg(k, "dim", dim)?)),
                scalar(F(eps)),
            ],
        )
    }
}

/// Outputs computed from a rounded intermediate (the sandwich's `resid_out`
/// and `normed`, `layer_out`'s `out`, and the fused GEMVs' rows) get 2 ulp,
/// a finding written down here as the parity rules ask: the intermediate is
/// a norm whose sum of squares a GPU reduces in a tree and the reference in
/// index order, so it may land 1 ulp apart (the ≤ 1 ulp rule for norms), and
/// the value built from it then differs by up to 2. Seen on lavapipe at
/// seed 77 (`normed`, rows 17, dim 2048).
///
/// And those 2 ulp are of the residual add's addends, not of its sum
/// ([`Tolerance::Bf16UlpOf`], magnitudes from [`residual_add_magnitudes`]):
/// where `resid + t` cancels, a 1-ulp freedom of `t` is many ulps of the
/// small sum. Seen on lavapipe at seeds 1, 3 and 3601: 4-5 ulp of the sum in
/// one element of 2560 or 34816, 0.6 ulp of the addends.
pub(crate) fn derived(magnitude: Vec<f64>) -> Tolerance {
    Tolerance::Bf16UlpOf { ulps: 2, magnitude }
}

/// Per-element magnitudes of a residual add `s = resid + bf16(x · inv · w)`
/// over `rows` rows of `dim` (inv the row's RMSNorm of x with `eps`, f64 here;
/// `w` absent: 1): max(|resid|, |t|). With `then_norm`, those of
/// `bf16(s · inv2 · then_norm)` instead (inv2 the RMSNorm of s, the
/// sandwich's `normed`); the caller scales by anything after that (`layer_out`'s scalar).
pub(crate) fn residual_add_magnitudes(
    resid: &[f32],
    x: &[f32],
    w: Option<&[f32]>,
    then_norm: Option<&[f32]>,
    rows: usize,
    dim: usize,
    eps: f32,
) -> Vec<f64> {
    let inv = |v: &mut dyn Iterator<Item = f64>| 1.0 / (v.map(|a| a * a).sum::<f64>() / dim as f64 + eps as f64).sqrt();
    let mut out = Vec::with_capacity(rows * dim);
    for r in 0..rows {
        let (xr, rr) = (&x[r * dim..(r + 1) * dim], &resid[r * dim..(r + 1) * dim]);
        let inv1 = inv(&mut xr.iter().map(|&a| a as f64));
        let t: Vec<f64> = (0..dim).map(|j| xr[j] as f64 * inv1 * w.map_or(1.0, |w| w[j] as f64)).collect();
        let mag = (0..dim).map(|j| (rr[j] as f64).abs().max(t[j].abs()));
        match then_norm {
            None => out.extend(mag),
            Some(w2) => {
                let inv2 = inv(&mut (0..dim).map(|j| rr[j] as f64 + t[j]));
                out.extend(mag.zip(w2).map(|(m, &w2)| m * inv2 * (w2 as f64).abs()));
            }
        }
    }
    out
}

/// Shapes every norm case runs: rows = 1, dims not a multiple of 8 or 32, a
/// wide row, and two with more rows than two waves of the CUDA persistent
/// grid on an H200 (660 blocks at dim 5376, 2112 at dim 256), so blocks run
/// the pipelined row loop's full two-row trip and part of another.
const SHAPES: [(usize, usize); 6] = [(1, 64), (5, 42), (3, 1030), (17, 2048), (1400, 5376), (4500, 256)];

fn rmsnorm_cases(g: &mut Gen) -> Vec<Case> {
    SHAPES
        .iter()
        .enumerate()
        .map(|(i, &(rows, dim))| {
            let (_, x) = g.bf16(rows * dim, 0.01, 3.0);
            let (_, w) = g.bf16(dim, 0.1, 2.0);
            let weighted = i % 2 == 0;
            let mut buffers = vec![Buffer::output("out", DType::BF16, rows * dim, Tolerance::Bf16Ulp(1)), Buffer::input("x", x)];
            if weighted {
                buffers.push(Buffer::input("w", w));
            }
            Case {
                kernel: &RMSNORM_BF16,
                label: format!("rows={rows} dim={dim}{}", if weighted { "" } else { " w=null" }),
                buffers,
                run: Box::new(move |o, a| o.rmsnorm_bf16(a[0], a[1], weighted.then(|| a[2]), rows, dim, 1e-6)),
            }
        })
        .collect()
}

/// Largest weight of the norm whose rounded output is added to a residual
/// (sandwich `w_post`, layer_out `w`). `resid + t` cancels when `t ≈ −resid`,
/// and there the 1-ulp freedom of `t` (sum order) is many ulps of the small
/// sum: over the millions of elements of the wide shapes some element always
/// lands there (seen on lavapipe: 64-82 ulp at rows 1400, dim 5376). With
/// |x / rms| <= 1.8 for these inputs, weights up to 0.1 keep |t| <= 0.18
/// against |resid| >= 0.5, so no sum cancels; the small shapes keep 0.5.
/// (The rule is now measured in ulps of the addends, [`derived`], which
/// takes cancellation; the ranges stay as they were measured with.)
fn post_weight_max(rows: usize) -> f32 {
    if rows >= 1000 {
        0.1
    } else {
        0.5
    }
}

fn sandwich_cases(g: &mut Gen) -> Vec<Case> {
    SHAPES
        .iter()
        .enumerate()
        .map(|(i, &(rows, dim))| {
            let (resid_v, resid) = g.bf16(rows * dim, 0.5, 4.0);
            let (x_v, x) = g.bf16(rows * dim, 0.01, 3.0);
            let (wpost_v, wpost) = g.bf16(dim, 0.05, post_weight_max(rows));
            let (wpre_v, wpre) = g.bf16(dim, 0.1, 2.0);
            let second = i != 1;
            let magnitudes = |then_norm| residual_add_magnitudes(&resid_v, &x_v, Some(&wpost_v), then_norm, rows, dim, 1e-6);
            let mut buffers = vec![Buffer::output("resid_out", DType::BF16, rows * dim, derived(magnitudes(None)))];
            buffers.push(if second {
                Buffer::output("normed", DType::BF16, rows * dim, derived(magnitudes(Some(&wpre_v))))
            } else {
                Buffer::input("normed", vec![0u8; 2])
            });
            buffers.extend([
                Buffer::input("resid", resid),
                Buffer::input("x", x),
                Buffer::input("w_post", wpost),
                Buffer::input("w_pre", wpre),
            ]);
            Case {
                kernel: &POST_NORM_ADD_PRE_NORM_BF16,
                label: format!("rows={rows} dim={dim}{}", if second { "" } else { " w_pre=null" }),
                buffers,
                run: Box::new(move |o, a| {
                    let (normed, wpre) = if second { (Some(a[1]), Some(a[5])) } else { (None, None) };
                    o.post_norm_add_pre_norm_bf16(a[0], normed, a[2], a[3], Some(a[4]), wpre, rows, dim, 1e-6)
                }),
            }
        })
        .collect()
}

fn layer_out_cases(g: &mut Gen) -> Vec<Case> {
    // Beside the family's shapes, rows whose vectors fill two and exactly
    // three of the WGSL register path's slots (`row_slots`), with the
    // wide shapes' weight bound (0.5 let a sum cancel at dim 4096).
    SHAPES
        .iter()
        .map(|&(rows, dim)| (rows, dim, post_weight_max(rows)))
        .chain([(3, 4096, 0.1), (2, 6144, 0.1)])
        .map(|(rows, dim, w_max)| {
            let (mid_v, mid) = g.bf16(rows * dim, 0.5, 4.0);
            let (x_v, x) = g.bf16(rows * dim, 0.01, 3.0);
            let (w_v, w) = g.bf16(dim, 0.05, w_max);
            let (scalar_v, scalar) = g.f32(1, 0.2, 1.5);
            let ls = (scalar_v[0] as f64).abs();
            let magnitude = residual_add_magnitudes(&mid_v, &x_v, Some(&w_v), None, rows, dim, 1e-6).into_iter().map(|m| m * ls).collect();
            Case {
                kernel: &LAYER_OUT_BF16,
                label: format!("rows={rows} dim={dim}"),
                buffers: vec![
                    Buffer::output("out", DType::BF16, rows * dim, derived(magnitude)),
                    Buffer::input("mid", mid),
                    Buffer::input("x", x),
                    Buffer::input("w", w),
                    Buffer::input("layer_scalar", scalar),
                ],
                run: Box::new(move |o, a| o.layer_out_bf16(a[0], a[1], a[2], Some(a[3]), a[4], rows, dim, 1e-6)),
            }
        })
        .collect()
}

inventory::submit! { CaseSet { kernel: &RMSNORM_BF16, cases: rmsnorm_cases } }
inventory::submit! { CaseSet { kernel: &POST_NORM_ADD_PRE_NORM_BF16, cases: sandwich_cases } }
inventory::submit! { CaseSet { kernel: &LAYER_OUT_BF16, cases: layer_out_cases } }

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources;
    use switchyard_core::ArgKind;

    const FACTS: DeviceFacts = DeviceFacts { cuda_sm90a: false, cuda_clusters: false, ..crate::plan::H200 };

    /// Arguments for `kernel`: every pointer at `ptr` (16-byte aligned unless told), rows and dim as given.
    fn args(kernel: &'static switchyard_core::KernelSig, rows: i32, dim: i32, ptr: u64) -> Vec<switchyard_core::Arg> {
        kernel
            .args
            .iter()
            .map(|spec| match (spec.kind, spec.name) {
                (ArgKind::Ptr, _) => P(ptr),
                (ArgKind::F32, _) => F(1e-6),
                (_, "rows") => I(rows),
                _ => I(dim),
            })
            .collect()
    }

    #[test]
    fn layer_out_slots_cover_the_row_and_no_more() {
        let cases = [(64, 1), (2048, 1), (2056, 2), (4096, 2), (5376, 3), (6144, 3), (8192, 4), (12288, 4)];
        for (dim, slots) in cases {
            assert_eq!(row_slots(dim), slots, "dim {dim}");
        }
    }

    #[test]
    fn the_pipelined_entry_points_exist_for_every_chunk_count() {
        let cu = sources::cuda("norm").expect("norm.cu").text;
        assert!(cu.contains("#define NORM_PIPE_ENTRIES(E) E(1) E(2) E(3) E(4) E(5) E(6) E(7) E(8)\n"));
        for pipes in [&RMSNORM_PIPES, &SANDWICH_PIPES, &LAYER_OUT_PIPES] {
            for (c, name) in pipes.iter().enumerate() {
                let stem = name.strip_suffix(&format!("_c{}", c + 1)).expect("<kernel>_c<C>");
                assert!(cu.contains(&format!(" {stem}_c##C_(")), "norm.cu defines no {stem}_c##C_ entry");
            }
        }
        assert!(cu.contains("#define NORM_BOUNDS __launch_bounds__(128, 4)\n"), "ROW_MAX_THREADS / ROW_REG_CAP follow these bounds");
    }

    #[test]
    fn norm_plans_pick_a_pipelined_entry_and_a_one_wave_grid() {
        assert_eq!((norm_block(5376), resident_row_blocks(96)), (96, 5));
        assert_eq!((resident_row_blocks(32), resident_row_blocks(128)), (16, 4));
        let a = args(&RMSNORM_BF16, 4096, 5376, 0x1000);
        let p = cuda_rmsnorm(&PlanArgs::new(&RMSNORM_BF16, &a), &FACTS).unwrap();
        assert_eq!((p.passes[0].entry, p.passes[0].grid, p.passes[0].block), ("rmsnorm_bf16_c7", [660, 1, 1], [96, 1, 1]));
        // Fewer rows than SMs: a block per row, as many threads as the bounds allow.
        let a = args(&LAYER_OUT_BF16, 17, 2048, 0x1000);
        let p = cuda_layer_out(&PlanArgs::new(&LAYER_OUT_BF16, &a), &FACTS).unwrap();
        assert_eq!((p.passes[0].entry, p.passes[0].grid, p.passes[0].block), ("layer_out_bf16_c2", [17, 1, 1], [128, 1, 1]));
        let a = args(&POST_NORM_ADD_PRE_NORM_BF16, 1, 2560, 0x1000);
        let p = cuda_sandwich(&PlanArgs::new(&POST_NORM_ADD_PRE_NORM_BF16, &a), &FACTS).unwrap();
        assert_eq!((p.passes[0].entry, p.passes[0].block), ("post_norm_add_pre_norm_bf16_c3", [128, 1, 1]));
        assert_eq!((latency_row_block(5376), latency_row_block(64), latency_row_block(8192 * 8 + 8)), (128, 32, 128));
        // Pointers off 16 bytes, or a dim that is not a multiple of 8: the kernel's own entry.
        let a = args(&POST_NORM_ADD_PRE_NORM_BF16, 4096, 5376, 0x1004);
        assert_eq!(
            cuda_sandwich(&PlanArgs::new(&POST_NORM_ADD_PRE_NORM_BF16, &a), &FACTS).unwrap().passes[0].entry,
            "post_norm_add_pre_norm_bf16"
        );
        let a = args(&RMSNORM_BF16, 5, 1030, 0x1000);
        assert_eq!(cuda_rmsnorm(&PlanArgs::new(&RMSNORM_BF16, &a), &FACTS).unwrap().passes[0].entry, "rmsnorm_bf16");
        // Rows past 8 chunks a thread at 128 threads: the kernel's own entry too.
        let a = args(&RMSNORM_BF16, 4, 16384, 0x1000);
        let p = cuda_rmsnorm(&PlanArgs::new(&RMSNORM_BF16, &a), &FACTS).unwrap();
        assert_eq!((p.passes[0].entry, p.passes[0].block), ("rmsnorm_bf16", [128, 1, 1]));
        // An unknown SM count: one block per row.
        let facts = DeviceFacts { multiprocessors: 0, ..FACTS };
        let a = args(&RMSNORM_BF16, 4096, 5376, 0x1000);
        assert_eq!(cuda_rmsnorm(&PlanArgs::new(&RMSNORM_BF16, &a), &facts).unwrap().passes[0].grid, [4096, 1, 1]);
    }
}
