//! Weight-streaming GEMV for decode (`M ≤ 16` activation rows):
//! `C[M, N] = A[M, K] · B[N, K]ᵀ` with B in the HF `[out, in]` layout, f32
//! accumulation, bf16 output rounded to nearest even.
//!
//! At decode sizes a linear layer is a stream of its weights: every weight
//! byte is read once and used for at most 16 multiply-adds, so the kernels
//! are judged by the fraction of the copy bandwidth they reach, not by
//! FLOP/s. The K order of the sums is free (a backend may split K into
//! chunks and add the partial sums in a fixed order), so outputs are
//! compared with the reference by NMSE; for given inputs and shapes a
//! backend's result is deterministic (no atomics, no order that depends on
//! timing).
//!
//! Three kernels: [`DENSE_GEMV_BF16`], whose output may be laid out as up to
//! three consecutive row-major segments (one weight stream for the q, k and
//! v projections, three outputs), [`DENSE_GEMV_RMSNORM_BF16`], the same with
//! the layer's input RMSNorm of its one activation row in the prologue (batch-1
//! decode: one launch instead of two), and [`DENSE_GEMV_GELU_MUL_BF16`], the
//! gate/up projection with the gated GELU applied in its epilogue.
//! [`DENSE_GEMV_LAYER_OUT_RMSNORM_BF16`] also forms its row from the previous
//! layer's output norm (`layer_out_bf16`), so a batch-1 layer boundary is
//! one launch.
use crate::gemm::{operands, REORDERED_NMSE};
use crate::ops::{bf16s, region, require, require_eps, saturating_product, scalar, LaunchArg, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use crate::plan::{env_override, groups, CudaPass, CudaPlan, DeviceFacts, PlanArgs};
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, Error, Region, Result};

mod layer_out;
mod layer_out_qkv;
mod sandwich;
pub use layer_out::{LayerOutRow, DENSE_GEMV_LAYER_OUT_RMSNORM_BF16};
pub use layer_out_qkv::{QkvEpilogue, DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16, QKV_EPILOGUE_MAX_HEADS};
pub use sandwich::{SandwichRow, DENSE_GEMV_SANDWICH_GELU_MUL_BF16};

/// Largest M the GEMV kernels take.
pub const GEMV_MAX_M: usize = 16;

declare_kernel! {
    /// `acc[i, j] = Σₖ a[i, k] · b[j, k]` (f32, any K order), `bf16(acc)`
    /// stored in three row-major segments of columns, one after the other:
    /// columns `[0, seg1)` as `[m, seg1]` at element 0, `[seg1, seg2)` as
    /// `[m, seg2 - seg1]` at element `m · seg1`, `[seg2, n)` as
    /// `[m, n - seg2]` at element `m · seg2` (`seg1 = seg2 = n` is the plain
    /// `[m, n]` layout). Shapes: a bf16 `[m, k]`, b bf16 `[n, k]`, c bf16
    /// `m · n` elements. `1 ≤ m ≤ 16`, `k % 8 == 0`, `seg1 ≤ seg2 ≤ n`; a
    /// and b 16-byte aligned.
    DENSE_GEMV_BF16 = "gemv"::"dense_gemv_bf16"(
        A::input("a"), A::input("b"), A::output("c"), A::u32("m"), A::u32("n"), A::u32("k"), A::u32("seg1"), A::u32("seg2"))
}

declare_kernel! {
    /// [`DENSE_GEMV_BF16`] of one RMS-normalised activation row:
    /// `c = dense_gemv_bf16(xn, b; seg1, seg2)`, with the same segmented
    /// output layout, where `xn = rmsnorm_bf16(a; norm_w, eps)` exactly as
    /// [`crate::norm::RMSNORM_BF16`] defines it for one row of `k` elements:
    /// `inv = (Σₖ a[k]² / k + eps)^-0.5` in f32 (any summation order),
    /// `xn[k] = bf16(a[k] · inv · norm_w[k])` (f32 products in that order, one
    /// rounding), then `acc[j] = Σₖ xn[k] · b[j, k]` (f32, any K order) stored
    /// as `bf16(acc)`.
    ///
    /// Arguments: the GEMV's, in its order (`a, b, c, m, n, k, seg1, seg2`),
    /// then the norm's (`norm_w`, bf16 `[k]`, and `eps`, finite and ≥ 0).
    /// Shapes: a bf16 `[1, k]` (the raw activation row, not yet normalised),
    /// b bf16 `[n, k]`, c bf16 `n` elements. `m = 1` only (the batch-1 decode
    /// form: every block normalises the whole row itself, which pays only
    /// while one row is read); `k % 8 == 0`, `seg1 ≤ seg2 ≤ n`; a, b and
    /// norm_w 16-byte aligned.
    ///
    /// Tolerance: NMSE ≤ [`NORMED_NMSE`] (1e-5), the GEMV's rule (K order
    /// free) at ten times its bound. A backend whose Σ a² runs in another
    /// order than the reference's gets an `inv` a few f32 ulps away, and
    /// then an occasional `xn` element one bf16 ulp away (the freedom
    /// `rmsnorm_bf16`'s 1-ulp rule allows). One such element moves every
    /// output by `ulp(xn[k]) · b[j, k]`, which tips several percent of the
    /// outputs over a bf16 rounding boundary: up to 2.6e-6 NMSE measured,
    /// more than the GEMV's 1e-6 covers (see [`NORMED_NMSE`]).
    DENSE_GEMV_RMSNORM_BF16 = "gemv"::"dense_gemv_rmsnorm_bf16"(
        A::input("a"), A::input("b"), A::output("c"), A::u32("m"), A::u32("n"), A::u32("k"), A::u32("seg1"), A::u32("seg2"),
        A::input("norm_w"), A::f32("eps"))
}

declare_kernel! {
    /// The gate/up projection with the gated GELU: with
    /// `g = bf16(Σₖ a[i, k] · b[j, k])` and `u = bf16(Σₖ a[i, k] · b[n + j, k])`
    /// (f32 sums, any K order), `c[i, j] = bf16(bf16(gelu_tanh(g)) · u)`: the
    /// same value as [`DENSE_GEMV_BF16`] into `[m, 2n]` followed by
    /// `gelu_mul_bf16`, without the round trip. Shapes: a bf16 `[m, k]`, b
    /// bf16 `[2n, k]` (gate rows, then up rows), c bf16 `[m, n]`.
    /// `1 ≤ m ≤ 16`, `k % 8 == 0`; a and b 16-byte aligned.
    DENSE_GEMV_GELU_MUL_BF16 = "gemv"::"dense_gemv_gelu_mul_bf16"(
        A::input("a"), A::input("b"), A::output("c"), A::u32("m"), A::u32("n"), A::u32("k"))
}

/// Threads per CUDA block (eight warps).
const CUDA_THREADS: u32 = 256;
/// Weight rows a CUDA block streams on the m ≥ 2 path (`GEMV_ROWS` in gemv.cu).
const CUDA_ROWS_PER_BLOCK: u64 = 128;
/// Bytes before the partial sums in the workspace of a K-split launch
/// (`GEMV_WS_HEADER` floats: the first pass records its chunk count there).
const CUDA_WORKSPACE_HEADER: u64 = 16;
/// K chunk bounds: a chunk shorter than this leaves too few loads per warp
/// to hide the latency; a longer one needs more than 48 KiB of staged
/// activations at m = 16.
const CUDA_MIN_CHUNK: u64 = 256;
const CUDA_MAX_CHUNK: u64 = 1024;
/// k per step of a warp's main loop (`GEMV_STEP` in gemv.cu): the staged
/// activation rows are padded to a multiple of it.
const CUDA_STEP: u64 = 128;
/// Blocks of the m ≥ 2 entries resident on one multiprocessor: their
/// `__launch_bounds__(256, 2)` (about 120 registers a thread; ncu on the
/// H200: "Block Limit Registers 2").
const CUDA_RESIDENT_PER_SM: u64 = 2;
/// 16-byte weight loads a lane keeps in flight on the m = 1 path (`GEMV_M1C`).
const CUDA_M1_LOADS_PER_LANE: u64 = 12;
/// The kernels always take a workspace pointer; a launch that needs no
/// partials still gets this much so the parameter list is the same.
const CUDA_MIN_WORKSPACE: u64 = 16;

/// The CUDA geometry.
///
/// m = 1 (the `_m1` entry): `Y` warps per output, each taking a
/// consecutive slice of K, and `8 / Y` outputs per block (block `(32, Y,
/// 8 / Y)`), no K split across blocks. `Y` grows with K so that every lane
/// has all of its slice's 16-byte loads in flight at once (12 per weight
/// row it streams): one warp per output up to K = 3072 (1536 for the gated
/// GELU, which streams two rows), eight at most.
///
/// m ≥ 2: blocks over the weight rows (`rows` of them) times K chunks. Small
/// layers split K (chunks of 256 to 1024 k) so that the grid fills the
/// resident block slots of as few waves as it can ([`wave_filling_splits`]),
/// except where the rows alone give every SM a block and two blocks an SM
/// can stage the whole K: one chunk then ([`cuda_splits`]). Each block
/// stages its chunk of the m
/// activation rows in shared memory, so the activations are read from L2
/// once per block, not once per warp. With more than one chunk the f32
/// partials go to workspace (a 16-byte header, then `[chunks, m, rows]`)
/// and a second pass adds them in chunk order and applies the epilogue; it
/// launches as a programmatic dependent of the first ([`reduce_entry_for`]).
/// (A one-launch form with the chunks of a block column as one thread-block
/// cluster adding the partials through distributed shared memory measured
/// slower on the H200 at batch 16: 3929 against 4158 tok/s.)
fn cuda_gemv(
    a: &PlanArgs,
    facts: &DeviceFacts,
    outputs: u64,
    rows: u64,
    m1_entry: &'static str,
    reduce_entry: &'static str,
) -> Result<CudaPlan> {
    let (m, k) = (u64::from(a.u32("m")?), u64::from(a.u32("k")?));
    let block = [CUDA_THREADS, 1, 1];
    if m == 1 {
        return cuda_m1(a, outputs, rows, m1_entry);
    }
    let blocks_n = groups(a.kernel, rows, CUDA_ROWS_PER_BLOCK)?;
    let splits = cuda_splits(m, k, u64::from(blocks_n), facts, unsplit_row_blocks());
    // Chunk boundaries on 32 k (one 16-byte load per lane per row group).
    let chunk = k.div_ceil(splits).div_ceil(32) * 32;
    let splits = k.div_ceil(chunk);
    let padded = chunk.div_ceil(CUDA_STEP) * CUDA_STEP;
    let shared_bytes = u32::try_from(m * (padded + 8) * 2).expect("within the device's shared memory");
    let main = CudaPass { entry: a.kernel.symbol, grid: [blocks_n, splits as u32, 1], block, shared_bytes };
    if splits == 1 {
        return Ok(CudaPlan { passes: vec![main], workspace_bytes: CUDA_MIN_WORKSPACE });
    }
    let outputs = groups(a.kernel, m * outputs, u64::from(CUDA_THREADS))?;
    let reduce = CudaPass { entry: reduce_entry_for(reduce_entry), grid: [outputs, 1, 1], block, shared_bytes: 0 };
    Ok(CudaPlan { passes: vec![main, reduce], workspace_bytes: CUDA_WORKSPACE_HEADER + splits * m * rows * 4 })
}

/// The K chunks an m ≥ 2 launch of `blocks_n` row blocks asks for: one
/// where there are at least `unsplit_from` row blocks (`None`: as many as
/// the device has SMs) and two blocks an SM can stage the m rows' whole K;
/// else [`wave_filling_splits`] of chunks of 256 to 1024 k.
///
/// Unsplit, Gemma's gate/up at hidden 2560 and m = 16 is 160 blocks over
/// K = 2560 in one launch instead of 480 blocks over three chunks (1.8
/// waves) and a reduce pass: on the H200 bench-model at batch 16 went from
/// 4423 / 4385 / 4375 / 4407 tok/s (before) to 4549 / 4569 (+3.7%), batch 1
/// unchanged (it has no m ≥ 2 launch). That measurement's staging was
/// cp.async (gemv.cu): the load-then-store loop before it would have waited
/// 20 L2 round trips for a 2560-k stage.
fn cuda_splits(m: u64, k: u64, blocks_n: u64, facts: &DeviceFacts, unsplit_from: Option<u64>) -> u64 {
    let sms = u64::from(facts.multiprocessors.max(1));
    let whole_k_shared = m * (k.div_ceil(CUDA_STEP) * CUDA_STEP + 8) * 2;
    if blocks_n >= unsplit_from.unwrap_or(sms) && whole_k_shared * CUDA_RESIDENT_PER_SM <= u64::from(facts.max_shared_bytes) {
        return 1;
    }
    let most = (k / CUDA_MIN_CHUNK).max(1);
    let least = k.div_ceil(CUDA_MAX_CHUNK);
    wave_filling_splits(blocks_n, CUDA_RESIDENT_PER_SM * sms, least, most.max(least))
}

/// Measurement override, read once a process:
/// `SWITCHYARD_CUDA_GEMV_UNSPLIT_BLOCKS=N` (N ≥ 1) runs an m ≥ 2 launch of at
/// least N row blocks (instead of one an SM) as one K chunk where two blocks
/// an SM can stage the whole K; a large N gives the split plan before.
fn unsplit_row_blocks() -> Option<u64> {
    static OVERRIDE: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    env_override(&OVERRIDE, "SWITCHYARD_CUDA_GEMV_UNSPLIT_BLOCKS", |v| v >= 1).map(u64::from)
}

/// The reduce pass's entry: the one launched as a programmatic dependent of
/// the main pass, or, under `SWITCHYARD_CUDA_GEMV_REDUCE_SERIAL=1` (a
/// measurement override read once a process), its `_serial` twin, a plain
/// launch that neither waits nor lets the next launch start early (the
/// plan before). H200, bench-model batch 16 with the cp.async staging and
/// the split gate/up: 4381 / 4449 / 4410 tok/s as a dependent, 4409 / 4400
/// serial, so no difference measured either way.
fn reduce_entry_for(entry: &'static str) -> &'static str {
    static OVERRIDE: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    match (env_override(&OVERRIDE, "SWITCHYARD_CUDA_GEMV_REDUCE_SERIAL", |v| v == 1), entry) {
        (Some(_), "dense_gemv_bf16_reduce") => "dense_gemv_bf16_reduce_serial",
        (Some(_), "dense_gemv_gelu_mul_bf16_reduce") => "dense_gemv_gelu_mul_bf16_reduce_serial",
        _ => entry,
    }
}

/// The K split in `least..=most` (`blocks_n` blocks per chunk, `resident`
/// block slots a wave): as few waves as the least split needs, and within
/// them as many chunks as fit, so the last wave is as full as it can be. A
/// grid that spills a few blocks into another wave runs about as long as a
/// full extra wave (ncu on the H200, q/k/v at m = 16: 320 blocks over 264
/// slots, 1.21 waves, 11.8 us).
fn wave_filling_splits(blocks_n: u64, resident: u64, least: u64, most: u64) -> u64 {
    let waves = (least * blocks_n).div_ceil(resident);
    (waves * resident / blocks_n).clamp(least, most)
}

/// The m = 1 plan (see [`cuda_gemv`]): one pass of `entry`, `Y` warps per
/// output and `8 / Y` outputs per block, the minimum workspace.
fn cuda_m1(a: &PlanArgs, outputs: u64, rows: u64, entry: &'static str) -> Result<CudaPlan> {
    let k = u64::from(a.u32("k")?);
    let weight_rows_per_output = rows / outputs;
    let per_warp = 32 * (CUDA_M1_LOADS_PER_LANE / weight_rows_per_output);
    let slices = (k / 8).div_ceil(per_warp).clamp(1, 8) as u32;
    let slots = 8 / slices;
    let grid = [groups(a.kernel, outputs, u64::from(slots))?, 1, 1];
    let pass = CudaPass { entry, grid, block: [32, slices, slots], shared_bytes: 0 };
    Ok(CudaPlan { passes: vec![pass], workspace_bytes: CUDA_MIN_WORKSPACE })
}

/// The fused norm's `m = 1` rule, for plans (a raw launch skips the launcher).
fn one_row(a: &PlanArgs) -> Result<()> {
    match a.u32("m")? {
        1 => Ok(()),
        m => Err(Error::invalid(a.kernel.symbol, "m", format!("m = {m}: the fused RMSNorm GEMV takes exactly one activation row"))),
    }
}

/// The dynamic shared memory of a fused-norm entry's row (`k` bf16), if the
/// device has that much a block.
fn shared_row_bytes(a: &PlanArgs, facts: &DeviceFacts, k: u64) -> Result<u32> {
    u32::try_from(2 * k).ok().filter(|b| *b <= facts.max_shared_bytes).ok_or_else(|| {
        Error::Unsupported(format!(
            "kernel {}: k = {k} needs {} bytes of shared memory for the normalised row; the device allows {}",
            a.kernel.symbol,
            2 * k,
            facts.max_shared_bytes
        ))
    })
}

/// A fused-row kernel's WGSL plan: `inner`'s plan (`plan`, made for this
/// kernel's arguments) behind a first pass, the kernel's own entry as one
/// workgroup that forms the row. The inner kernel's own-symbol entry keeps
/// its name, since the fused kernel's shader composes the inner entries.
fn behind_row_pass(mut plan: WgslPlan, a: &PlanArgs, inner: &'static str) -> WgslPlan {
    for pass in &mut plan.passes {
        if pass.entry == a.kernel.symbol {
            pass.entry = inner;
        }
    }
    plan.passes.insert(0, WgslPass { entry: a.kernel.symbol, grid: [1, 1, 1], consts: vec![], extra: [0; 4] });
    plan
}

/// The m = 1 GEMV's geometry, run by the kernel's own entry (the `_m1` path
/// with the norm in its prologue: every block first reduces the row's Σ a²).
///
/// Where one warp per output would stream the whole K (K ≤ 3072), slots
/// take two outputs each (`dense_gemv_rmsnorm_bf16_x2`: the same sums, half
/// the blocks, so Gemma's q/k/v fits one wave and each block's norm
/// prologue serves twice the outputs). Every block writes the normalised
/// row to dynamic shared memory (2k bytes), which the stream reads.
fn cuda_dense_gemv_rmsnorm(a: &PlanArgs, facts: &DeviceFacts) -> Result<CudaPlan> {
    one_row(a)?;
    let (n, k) = (u64::from(a.u32("n")?), u64::from(a.u32("k")?));
    let row_bytes = shared_row_bytes(a, facts, k)?;
    let mut plan = if n >= 2 && k / 8 <= 32 * CUDA_M1_LOADS_PER_LANE {
        let grid = [groups(a.kernel, n.div_ceil(2), 8)?, 1, 1];
        let pass = CudaPass { entry: "dense_gemv_rmsnorm_bf16_x2", grid, block: [32, 1, 8], shared_bytes: 0 };
        CudaPlan { passes: vec![pass], workspace_bytes: CUDA_MIN_WORKSPACE }
    } else {
        cuda_m1(a, n, n, a.kernel.symbol)?
    };
    plan.passes[0].shared_bytes = row_bytes;
    Ok(plan)
}

fn cuda_dense_gemv(a: &PlanArgs, facts: &DeviceFacts) -> Result<CudaPlan> {
    let n = u64::from(a.u32("n")?);
    cuda_gemv(a, facts, n, n, "dense_gemv_bf16_m1", "dense_gemv_bf16_reduce")
}

fn cuda_dense_gemv_gelu_mul(a: &PlanArgs, facts: &DeviceFacts) -> Result<CudaPlan> {
    let n = u64::from(a.u32("n")?);
    cuda_gemv(a, facts, n, 2 * n, "dense_gemv_gelu_mul_bf16_m1", "dense_gemv_gelu_mul_bf16_reduce")
}

cuda_plan!(DENSE_GEMV_BF16 => cuda_dense_gemv);
cuda_plan!(DENSE_GEMV_RMSNORM_BF16 => cuda_dense_gemv_rmsnorm);
cuda_plan!(DENSE_GEMV_GELU_MUL_BF16 => cuda_dense_gemv_gelu_mul);

use crate::plan::{positive, WgslPass, WgslPlan, WGSL_ARRIVAL_COUNTERS};

/// Weight rows a WGSL workgroup streams (`NR` in gemv_common.wgsli): 32 row
/// groups of 8 lanes, 4 rows each. The gated kernel's 128 are the gate and
/// up rows of 64 output columns.
const WGSL_ROWS_PER_GROUP: u64 = 128;
/// k a lane's step covers per row (8 lanes × 8 k × 2 loads); chunks are
/// whole steps, so only the last chunk of a row has idle loads.
const WGSL_STEP: u64 = 128;
/// Shortest chunk: two steps, 16 loads of 16 bytes per lane, enough to
/// amortise the cross-lane reduction and the partial-sum stores.
const WGSL_MIN_CHUNK: u64 = 256;
/// Workgroups the WGSL plan aims for. wgpu does not report the
/// multiprocessor count (`DeviceFacts::multiprocessors` is 0), so the target
/// is fixed: 256 workgroups of 256 are about two per SM of a 132-SM H200,
/// all resident at once, each with 8 × 16 bytes in flight per invocation;
/// more would only add partial sums.
const WGSL_TARGET_GROUPS: u64 = 256;
/// Workgroup memory of the GEMV shaders (`red` in gemv_common.wgsli), under
/// WebGPU's 16 KiB minimum.
const WGSL_SHARED_BYTES: u32 = 2080 * 4;
/// What the fused norm adds: the prelude's `wg_sum256` scratch (256 f32).
pub(super) const WGSL_NORM_SHARED_BYTES: u32 = 256 * 4;

/// Weight rows a workgroup of the WGSL m = 1 path streams (gemv_m1.wgsli):
/// eight slots of 32 lanes, one whole row each.
const WGSL_M1_ROWS: u64 = 8;
/// Workgroup memory of the m = 1 path's reduction (`red1` in gemv_m1.wgsli).
pub(super) const WGSL_M1_SHARED_BYTES: u32 = 288 * 4;
/// Shortest K the m = 1 path takes: every lane of a slot has at least one
/// full round of eight 16-byte loads (32 lanes × 8 × 8 k). A shorter row
/// leaves most lanes one or two loads, and the tiled design (128 rows a
/// workgroup, eight loads per lane in flight at any K) keeps more bytes in
/// flight per invocation (and on lavapipe it ran 3× faster at K = 160-336).
const WGSL_M1_MIN_K: u64 = 2048;
/// Fewest workgroups the m = 1 path runs with: below this the rows alone
/// cannot keep enough loads in flight (128 workgroups × 256 lanes × 128
/// bytes is 4 MiB, about a microsecond of H200 bandwidth), so the plan keeps
/// the tiled design, which splits K.
const WGSL_M1_MIN_GROUPS: u64 = 128;
/// Longest K the m = 1 path takes. On the H200 under Vulkan (GPU time,
/// BENCHMARKS.md) it streamed 8192² at 1627 GB/s and 21504 × 5376 at 1728
/// (the tiled plan: 783 and 1003), but 5376 × 21504 at 407 (773) and
/// 2560 × 10240 at 373 (486): one slot walking a row of more than about 8K
/// elements alone keeps too few rows in flight. With naga's loop bounding
/// off (the backend's default) the path still lost at K = 10240: the down
/// projection took about 34 us a launch against the tiled plan's 30
/// (partials and reduce) in a decode step.
const WGSL_M1_MAX_K: u64 = 8192;

/// The WGSL geometry.
///
/// m = 1, K in [`WGSL_M1_MIN_K`]..=[`WGSL_M1_MAX_K`], a kernel with an
/// `m1_entry` (the plain, the fused-norm and the gated GEMV) and at least
/// [`WGSL_M1_MIN_GROUPS`] workgroups of eight weight rows: one pass of
/// `m1_entry` (`⌈rows / 8⌉` workgroups, a slot of 32 lanes per weight row
/// over the whole of K, no workspace). With `m1_xn` (the fused norm) the
/// entry also stages the normalised row in workgroup memory (`XN_VECS` =
/// K / 8 vectors beside the norm's scratch), so the path needs that much
/// more of the adapter's workgroup storage (K ≤ 7104 under 16 KiB).
///
/// Otherwise `⌈rows / 128⌉` row blocks times K chunks, `M` (= m) a
/// pipeline override. Row blocks alone rarely fill the GPU at decode sizes,
/// so K is split until about [`WGSL_TARGET_GROUPS`] workgroups run, with
/// chunks of at least 256 k (whole 128-k steps), and no more chunks than
/// the partial sums' binding (and u32 word indices) allow. One chunk: the
/// kernel's own entry writes bf16. Several: `entries[0]` writes f32
/// partials to workspace `[chunks, m, rows]` (x0 = chunk length, x1 =
/// chunks) and `entries[1]` adds them in chunk order, an invocation per
/// output word (x0 = chunks), applying the epilogue.
fn wgsl_gemv(
    a: &PlanArgs,
    f: &DeviceFacts,
    rows: u64,
    shared: u32,
    entries: [&'static str; 2],
    m1_entry: Option<&'static str>,
    m1_xn: bool,
) -> Result<WgslPlan> {
    let kernel = a.kernel;
    let m = positive(a, "m")?;
    if m > GEMV_MAX_M as u32 {
        return Err(switchyard_core::Error::invalid(kernel.symbol, "m", format!("m = {m} must be in 1..={GEMV_MAX_M}")));
    }
    let (n, k) = (u64::from(positive(a, "n")?), u64::from(positive(a, "k")?));
    if k % 8 != 0 {
        return Err(switchyard_core::Error::invalid(kernel.symbol, "k", format!("k = {k} must be a multiple of 8 (16-byte row loads)")));
    }
    if f.max_shared_bytes < shared {
        return Err(switchyard_core::Error::Unsupported(format!(
            "kernel {}: needs {shared} bytes of workgroup memory, the adapter allows {}",
            kernel.symbol, f.max_shared_bytes
        )));
    }
    if let Some(m1) = m1_entry.filter(|_| m == 1 && (WGSL_M1_MIN_K..=WGSL_M1_MAX_K).contains(&k)) {
        // k ≤ WGSL_M1_MAX_K here, so the sizes below fit u32.
        let (m1_shared, consts) = if m1_xn {
            let vecs = (k / 8) as u32;
            (WGSL_M1_SHARED_BYTES + WGSL_NORM_SHARED_BYTES + 16 * vecs, vec![("XN_VECS", vecs)])
        } else {
            (WGSL_M1_SHARED_BYTES, vec![])
        };
        if rows.div_ceil(WGSL_M1_ROWS) >= WGSL_M1_MIN_GROUPS && m1_shared <= f.max_shared_bytes {
            let pass = WgslPass { entry: m1, grid: [groups(kernel, rows, WGSL_M1_ROWS)?, 1, 1], consts, extra: [0; 4] };
            return Ok(WgslPlan { passes: vec![pass], workspace_bytes: 0, arrivals: 0 });
        }
    }
    let m64 = u64::from(m);
    let blocks = groups(kernel, rows, WGSL_ROWS_PER_GROUP)?;
    let chunk_bytes = m64 * rows * 4;
    let fit = f.max_binding_bytes.min(4 * u64::from(u32::MAX)) / chunk_bytes;
    let most = (k / WGSL_MIN_CHUNK).min(fit).min(u64::from(f.max_groups_per_dim)).max(1);
    let splits = WGSL_TARGET_GROUPS.div_ceil(u64::from(blocks)).clamp(1, most);
    let chunk = k.div_ceil(splits).div_ceil(WGSL_STEP) * WGSL_STEP;
    let splits = k.div_ceil(chunk);
    let consts = vec![("M", m)];
    if splits == 1 {
        let pass = WgslPass { entry: kernel.symbol, grid: [blocks, 1, 1], consts, extra: [k as u32, 1, 0, 0] };
        return Ok(WgslPlan { passes: vec![pass], workspace_bytes: 0, arrivals: 0 });
    }
    // splits ≥ 2, so chunk < k < 2^32.
    let s = splits as u32;
    Ok(WgslPlan {
        passes: vec![
            WgslPass { entry: entries[0], grid: [blocks, s, 1], consts, extra: [chunk as u32, s, 0, 0] },
            WgslPass { entry: entries[1], grid: [groups(kernel, m64 * n, 512)?, 1, 1], consts: vec![], extra: [s, 0, 0, 0] },
        ],
        workspace_bytes: splits * chunk_bytes,
        arrivals: 0,
    })
}

/// [`wgsl_gemv`]'s plan, its K split run as one dispatch
/// ([`split_in_one_dispatch`]).
fn wgsl_dense_gemv(a: &PlanArgs, f: &DeviceFacts) -> Result<WgslPlan> {
    static PASSES: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let forced = env_override(&PASSES, "SWITCHYARD_WGSL_GEMV_PASSES", |v| [1, 2].contains(&v));
    let two = gemv_split_takes_two_passes(a.u32("m")?, forced);
    let plan = wgsl_gemv(
        a,
        f,
        u64::from(a.u32("n")?),
        WGSL_SHARED_BYTES,
        ["dense_gemv_bf16_partial", "dense_gemv_bf16_reduce"],
        Some("dense_gemv_bf16_m1"),
        false,
    )?;
    Ok(split_in_one_dispatch(plan, "dense_gemv_bf16_once", two))
}

/// Whether the plain GEMV's K split runs as two dispatches: at m > 1 unless
/// `SWITCHYARD_WGSL_GEMV_PASSES=1` forces one, at m = 1 only when `=2` forces
/// them. On the H200 (thirteenth session, bench-model's default shape, two
/// rounds) the one dispatch lost at batch 16 (977.0 / 975.7 tok/s against
/// 1078.3 / 1078.0 with two) and won at batch 1 (211.9 / 212.2 against
/// 207.0 / 206.4).
fn gemv_split_takes_two_passes(m: u32, forced: Option<u32>) -> bool {
    forced.map_or(m > 1, |passes| passes == 2)
}

/// A K-split plan (partials, then the reduce pass) as one dispatch of
/// `once`, the partials' grid whose last workgroup of each row block to
/// arrive (an arrival counter a row block) adds that block's sums as the
/// reduce pass would: the same outputs, one dispatch fewer (on the H200 the
/// decode step's down projection, K = 10240 at m = 1, ran 22.9 us of
/// partials and 7.7 of reduce, fourth session). Unchanged where the row
/// blocks outnumber the backend's counters, or with `two_passes`
/// ([`gemv_split_takes_two_passes`]).
fn split_in_one_dispatch(mut plan: WgslPlan, once: &'static str, two_passes: bool) -> WgslPlan {
    let blocks = plan.passes[0].grid[0];
    if two_passes || plan.passes.len() != 2 || blocks > WGSL_ARRIVAL_COUNTERS {
        return plan;
    }
    plan.passes.truncate(1);
    plan.passes[0].entry = once;
    plan.arrivals = blocks;
    plan
}

/// The GEMV's plan at m = 1; each workgroup (of every K chunk) first reduces
/// the whole row's Σ a² (dense_gemv_rmsnorm_bf16.wgsl).
fn wgsl_dense_gemv_rmsnorm(a: &PlanArgs, f: &DeviceFacts) -> Result<WgslPlan> {
    one_row(a)?;
    let shared = WGSL_SHARED_BYTES + WGSL_NORM_SHARED_BYTES;
    wgsl_gemv(
        a,
        f,
        u64::from(a.u32("n")?),
        shared,
        ["dense_gemv_rmsnorm_bf16_partial", "dense_gemv_rmsnorm_bf16_reduce"],
        Some("dense_gemv_rmsnorm_bf16_m1"),
        true,
    )
}

fn wgsl_dense_gemv_gelu_mul(a: &PlanArgs, f: &DeviceFacts) -> Result<WgslPlan> {
    let rows = 2 * u64::from(a.u32("n")?);
    wgsl_gemv(
        a,
        f,
        rows,
        WGSL_SHARED_BYTES,
        ["dense_gemv_gelu_mul_bf16_partial", "dense_gemv_gelu_mul_bf16_reduce"],
        Some("dense_gemv_gelu_mul_bf16_m1"),
        false,
    )
}

wgsl_plan!(DENSE_GEMV_BF16, "gemv/dense_gemv_bf16.wgsl" => wgsl_dense_gemv);
wgsl_plan!(DENSE_GEMV_RMSNORM_BF16, "gemv/dense_gemv_rmsnorm_bf16.wgsl" => wgsl_dense_gemv_rmsnorm);
wgsl_plan!(DENSE_GEMV_GELU_MUL_BF16, "gemv/dense_gemv_gelu_mul_bf16.wgsl" => wgsl_dense_gemv_gelu_mul);

/// The checks every GEMV launch shares; returns `m, n, k` as u32.
fn gemv_shape(kernel: &str, a: Region, b: Region, m: usize, n: usize, k: usize) -> Result<[u32; 3]> {
    require((1..=GEMV_MAX_M).contains(&m), kernel, "m", || format!("m = {m} must be in 1..={GEMV_MAX_M} (decode-shaped kernel)"))?;
    for (name, v) in [("n", n), ("k", k)] {
        require(v > 0 && u32::try_from(v).is_ok(), kernel, name, || format!("{name} = {v} must be in 1..2^32"))?;
    }
    require(k % 8 == 0, kernel, "k", || format!("k = {k} must be a multiple of 8 (16-byte row loads)"))?;
    for (name, r) in [("a", a), ("b", b)] {
        let addr = r.addr();
        require(addr % 16 == 0, kernel, name, || format!("address {addr:#x} must be 16-byte aligned (vector loads)"))?;
    }
    Ok([m as u32, n as u32, k as u32])
}

/// `a [m, k]`, `b [rows, k]`, `c [m, n]` and the u32 `m, n, k`.
fn gemv_operands(a: Region, b: Region, c: Region, [m, n, k]: [usize; 3], rows: usize, u: [u32; 3]) -> Vec<LaunchArg> {
    vec![
        region(a, bf16s(saturating_product(&[m, k]))),
        region(b, bf16s(saturating_product(&[rows, k]))),
        region(c, bf16s(saturating_product(&[m, n]))),
        scalar(U(u[0])),
        scalar(U(u[1])),
        scalar(U(u[2])),
    ]
}

/// The fused-norm GEMV's arguments for one row (`m = 1`), checked: the
/// GEMV's operands, the segments, `norm_w` and `eps`.
#[allow(clippy::too_many_arguments)]
fn gemv_rmsnorm_operands(
    s: &str,
    a: Region,
    b: Region,
    c: Region,
    n: usize,
    k: usize,
    [seg1, seg2]: [usize; 2],
    norm_w: Region,
    eps: f32,
) -> Result<Vec<LaunchArg>> {
    let u = gemv_shape(s, a, b, 1, n, k)?;
    require(seg1 <= seg2 && seg2 <= n, s, "seg1", || format!("segments [{seg1}, {seg2}] must satisfy seg1 <= seg2 <= n = {n}"))?;
    let addr = norm_w.addr();
    require(addr.is_multiple_of(16), s, "norm_w", || format!("address {addr:#x} must be 16-byte aligned (vector loads)"))?;
    require_eps(s, eps)?;
    let mut args = gemv_operands(a, b, c, [1, n, k], n, u);
    args.extend([scalar(U(seg1 as u32)), scalar(U(seg2 as u32)), region(norm_w, bf16s(k)), scalar(F(eps))]);
    Ok(args)
}

/// The row inputs of a kernel that forms its activation row from them
/// (`layer_out`, the sandwich): each 16-byte aligned (vector loads), and
/// none overlapping the `k`-element row `out`, which block 0 writes while
/// every block reads them.
fn fused_row_checks(s: &str, out: Region, k: usize, inputs: &[(&str, Option<Region>)]) -> Result<()> {
    let (olo, ohi) = (out.addr(), out.addr().saturating_add(2 * k as u64));
    for &(name, r) in inputs {
        let Some(r) = r else { continue };
        let addr = r.addr();
        require(addr.is_multiple_of(16), s, name, || format!("address {addr:#x} must be 16-byte aligned (vector loads)"))?;
        let hi = addr.saturating_add(2 * k as u64);
        require(hi <= olo || ohi <= addr, s, name, || "it overlaps `a` (every block reads it while block 0 writes `a`)".to_string())?;
    }
    Ok(())
}

impl Ops {
    /// See [`DENSE_GEMV_BF16`]. `segs = [seg1, seg2]`; `[n, n]` is the plain layout.
    #[allow(clippy::too_many_arguments)]
    pub fn dense_gemv_bf16(&self, a: Region, b: Region, c: Region, m: usize, n: usize, k: usize, segs: [usize; 2]) -> Result<()> {
        let s = DENSE_GEMV_BF16.symbol;
        let u = gemv_shape(s, a, b, m, n, k)?;
        let [seg1, seg2] = segs;
        require(seg1 <= seg2 && seg2 <= n, s, "seg1", || format!("segments [{seg1}, {seg2}] must satisfy seg1 <= seg2 <= n = {n}"))?;
        let mut args = gemv_operands(a, b, c, [m, n, k], n, u);
        args.extend([scalar(U(seg1 as u32)), scalar(U(seg2 as u32))]);
        self.launch(&DENSE_GEMV_BF16, &args)
    }

    /// See [`DENSE_GEMV_RMSNORM_BF16`]: `a` is the raw activation row (`m`
    /// must be 1), `norm_w` the norm's weight `[k]`. `segs` as for
    /// [`Ops::dense_gemv_bf16`].
    #[allow(clippy::too_many_arguments)]
    pub fn dense_gemv_rmsnorm_bf16(
        &self,
        a: Region,
        b: Region,
        c: Region,
        m: usize,
        n: usize,
        k: usize,
        segs: [usize; 2],
        norm_w: Region,
        eps: f32,
    ) -> Result<()> {
        let s = DENSE_GEMV_RMSNORM_BF16.symbol;
        require(m == 1, s, "m", || format!("m = {m}: the fused RMSNorm GEMV takes exactly one activation row (batch-1 decode)"))?;
        let args = gemv_rmsnorm_operands(s, a, b, c, n, k, segs, norm_w, eps)?;
        self.launch(&DENSE_GEMV_RMSNORM_BF16, &args)
    }

    /// See [`DENSE_GEMV_GELU_MUL_BF16`].
    pub fn dense_gemv_gelu_mul_bf16(&self, a: Region, b: Region, c: Region, m: usize, n: usize, k: usize) -> Result<()> {
        let s = DENSE_GEMV_GELU_MUL_BF16.symbol;
        let u = gemv_shape(s, a, b, m, n, k)?;
        let rows = n.checked_mul(2).filter(|r| u32::try_from(*r).is_ok());
        let rows = rows.ok_or_else(|| Error::invalid(s, "n", format!("2 · n = 2 · {n} weight rows must be < 2^32")))?;
        self.launch(&DENSE_GEMV_GELU_MUL_BF16, &gemv_operands(a, b, c, [m, n, k], rows, u))
    }
}

/// (M, N, K, seg1, seg2): M = 1, 16 and ragged; K long enough that a CUDA
/// plan splits it (K ≥ 512), K not a multiple of 32; N not a multiple of the
/// 128-row block; three-segment (q, k, v) layouts, one with odd widths. The
/// last three are the WGSL m = 1 path's (at least 1017 rows, K ≥ 2048),
/// all with N not a multiple of its eight rows: K of 257 vectors (a full
/// round of eight loads per lane, then one more for lane 0) with odd
/// segments; 390 vectors (8 + 4 + 1 for lanes 0-5, 8 + 4 for the rest); 319
/// (8 + single loads) with a one-column first segment.
///
/// The tenth: enough row blocks (132 of 128 rows, one an H200 SM) for the
/// CUDA plan's unsplit rule at a K it would otherwise split.
const GEMV_SHAPES: [(usize, usize, usize, usize, usize); 10] = [
    (1, 64, 1024, 64, 64),
    (5, 200, 776, 200, 200),
    (16, 130, 2048, 130, 130),
    (3, 96, 264, 64, 80),
    (16, 260, 1544, 128, 192),
    (3, 97, 264, 33, 70),
    (1, 1031, 2056, 501, 777),
    (1, 1100, 3120, 1100, 1100),
    (1, 1027, 2552, 1, 1026),
    (5, 16900, 520, 16900, 16900),
];

fn gemv_cases(g: &mut Gen) -> Vec<Case> {
    GEMV_SHAPES
        .iter()
        .map(|&(m, n, k, seg1, seg2)| {
            let (a, b) = operands(g, m, n, k);
            Case {
                kernel: &DENSE_GEMV_BF16,
                label: format!("m={m} n={n} k={k} segs={seg1},{seg2}"),
                buffers: vec![
                    Buffer::input("a", a),
                    Buffer::input("b", b),
                    Buffer::output("c", DType::BF16, m * n, Tolerance::Nmse(REORDERED_NMSE)),
                ],
                run: Box::new(move |o, x| o.dense_gemv_bf16(x[0], x[1], x[2], m, n, k, [seg1, seg2])),
            }
        })
        .collect()
}

fn gelu_mul_cases(g: &mut Gen) -> Vec<Case> {
    // Then two at m = 1, K ≥ 2048 with ragged N, on the tiled plan
    // everywhere but WGSL, whose m = 1 path takes them (2n ≥ 1024 rows);
    // the last with the 132 row blocks of the CUDA plan's unsplit rule on
    // an H200, at a K it would otherwise split.
    [(1usize, 72usize, 520usize), (16, 40, 1032), (7, 136, 264), (1, 514, 3120), (1, 509, 2056), (16, 8448, 520)]
        .into_iter()
        .map(|(m, n, k)| {
            let (a, b) = operands(g, m, 2 * n, k);
            Case {
                kernel: &DENSE_GEMV_GELU_MUL_BF16,
                label: format!("m={m} n={n} k={k}"),
                buffers: vec![
                    Buffer::input("a", a),
                    Buffer::input("b", b),
                    Buffer::output("c", DType::BF16, m * n, Tolerance::Nmse(REORDERED_NMSE)),
                ],
                run: Box::new(move |o, x| o.dense_gemv_gelu_mul_bf16(x[0], x[1], x[2], m, n, k)),
            }
        })
        .collect()
}

/// (N, K, seg1, seg2) of the fused norm (m = 1): Gemma's stacked q/k/v at
/// hidden 2560 and its q alone (a KV-shared layer); a K that is not a
/// multiple of 256 (nor of 32), with an odd N and odd segment widths; a K
/// long enough that the CUDA plan gives each output two warps (5376); the
/// shortest K (one 16-byte vector). The first two and the last two take the
/// WGSL m = 1 path (at least 1017 rows, K ≥ 2048), the last two with N not
/// a multiple of its eight rows, odd segments and K of 390 and 257 vectors.
const NORM_GEMV_SHAPES: [(usize, usize, usize, usize); 8] = [
    (4096, 2560, 2048, 3072),
    (2048, 2560, 2048, 2048),
    (97, 264, 33, 70),
    (131, 776, 131, 131),
    (390, 5376, 256, 320),
    (9, 8, 4, 9),
    (1027, 3120, 301, 611),
    (1019, 2056, 1019, 1019),
];

/// The fused norm's tolerance, ten times the GEMV's [`REORDERED_NMSE`]: a
/// finding of its parity cases. An `xn` element one bf16 ulp from the
/// reference's (the Σ a² order is free, as for `rmsnorm_bf16`) moves each
/// output by `ulp(xn[k]) · b[j, k]`, about 5% of an output's bf16 ulp at
/// these sizes, so a few percent of the outputs round one ulp the other way
/// (557 of 4096 in the q/k/v case at the default seed on lavapipe, NMSE
/// 9.95e-7). Over 46 seeds × these 6 cases on lavapipe, 11 of the 276 runs
/// were above 1e-6, the largest 2.6e-6. Every output one ulp off would be
/// 1.5e-5 to 6e-5; a wrong weight, chunk or scale is far above either.
pub const NORMED_NMSE: f64 = 1e-5;

fn gemv_rmsnorm_cases(g: &mut Gen) -> Vec<Case> {
    NORM_GEMV_SHAPES
        .iter()
        .map(|&(n, k, seg1, seg2)| {
            // The raw residual stream: magnitudes far from 1, so the norm matters.
            let (_, a) = g.bf16(k, 0.05, 40.0);
            let (_, b) = g.bf16(n * k, 0.01, 0.5);
            let (_, w) = g.bf16(k, 0.1, 2.0);
            Case {
                kernel: &DENSE_GEMV_RMSNORM_BF16,
                label: format!("m=1 n={n} k={k} segs={seg1},{seg2}"),
                buffers: vec![
                    Buffer::input("a", a),
                    Buffer::input("b", b),
                    Buffer::output("c", DType::BF16, n, Tolerance::Nmse(NORMED_NMSE)),
                    Buffer::input("norm_w", w),
                ],
                run: Box::new(move |o, x| o.dense_gemv_rmsnorm_bf16(x[0], x[1], x[2], 1, n, k, [seg1, seg2], x[3], 1e-6)),
            }
        })
        .collect()
}

inventory::submit! { CaseSet { kernel: &DENSE_GEMV_BF16, cases: gemv_cases } }
inventory::submit! { CaseSet { kernel: &DENSE_GEMV_RMSNORM_BF16, cases: gemv_rmsnorm_cases } }
inventory::submit! { CaseSet { kernel: &DENSE_GEMV_GELU_MUL_BF16, cases: gelu_mul_cases } }

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_core::Arg;

    fn facts(sms: u32) -> DeviceFacts {
        DeviceFacts {
            multiprocessors: sms,
            max_shared_bytes: 227 * 1024,
            subgroup_size: 32,
            max_groups_per_dim: 65535,
            max_binding_bytes: u64::MAX,
            cuda_sm90a: false,
            cuda_clusters: false,
            wgsl_coopmat: false,
        }
    }

    fn plan(m: u32, n: u32, k: u32) -> CudaPlan {
        let args = [Arg::P(0), Arg::P(0), Arg::P(0), Arg::U(m), Arg::U(n), Arg::U(k), Arg::U(n), Arg::U(n)];
        cuda_dense_gemv(&PlanArgs::new(&DENSE_GEMV_BF16, &args), &facts(132)).unwrap()
    }

    #[test]
    fn one_row_takes_a_warp_per_output_and_more_rows_split_k() {
        // m = 1: a warp per output, eight per block, no split, up to K = 3072.
        let p = plan(1, 2048, 2560);
        assert_eq!((p.passes[0].entry, p.passes[0].grid, p.passes[0].block), ("dense_gemv_bf16_m1", [256, 1, 1], [32, 1, 8]));
        // Gemma's down projection: four warps per output over K = 10240.
        let p = plan(1, 2560, 10240);
        assert_eq!((p.passes[0].grid, p.passes[0].block), ([1280, 1, 1], [32, 4, 2]));
        // Gemma's stacked q/k/v projection at hidden 2560, m = 16: 32 row blocks, K split 8
        // ways, 256 blocks in the 264 slots of one wave (10 ways would spill 56 into a second).
        let p = plan(16, 4096, 2560);
        assert_eq!(p.passes[0].grid, [32, 8, 1]);
        assert_eq!((p.passes.len(), p.workspace_bytes), (2, 16 + 8 * 16 * 4096 * 4));
        // The down projection (K = 10240): 13 chunks, 260 blocks. The gated gate/up rows
        // (2 · 10240 at K = 2560): 160 row blocks, at least one an SM, so one launch over
        // the whole K (16 rows of 2568 staged), no reduce pass.
        assert_eq!(plan(16, 2560, 10240).passes[0].grid, [20, 13, 1]);
        let args = [Arg::P(0), Arg::P(0), Arg::P(0), Arg::U(16), Arg::U(10240), Arg::U(2560)];
        let gated = cuda_dense_gemv_gelu_mul(&PlanArgs::new(&DENSE_GEMV_GELU_MUL_BF16, &args), &facts(132)).unwrap();
        assert_eq!((gated.passes.len(), gated.passes[0].grid, gated.passes[0].shared_bytes), (1, [160, 1, 1], 16 * 2568 * 2));
        assert_eq!(gated.workspace_bytes, CUDA_MIN_WORKSPACE);
        // A split's chunks never exceed 1024 k, so the staged rows fit in 48 KiB at m = 16
        // (512 row blocks, but the whole K of 4096 does not fit two blocks an SM).
        let p = plan(16, 65536, 4096);
        assert_eq!(p.passes[0].grid[1], 4);
        assert!(p.passes[0].shared_bytes <= 48 * 1024, "{}", p.passes[0].shared_bytes);
        // A short K is one chunk; the workspace pointer is still there.
        let p = plan(2, 4096, 200);
        assert_eq!((p.passes[0].grid[1], p.workspace_bytes), (1, CUDA_MIN_WORKSPACE));
    }

    #[test]
    fn the_reduce_pass_is_the_dependent_entry_and_the_unsplit_rule_needs_rows_and_shared_memory() {
        // Without the measurement overrides the reduce pass is the entry the
        // source lists as a programmatic dependent.
        if std::env::var_os("SWITCHYARD_CUDA_GEMV_REDUCE_SERIAL").is_none() {
            assert_eq!(plan(16, 4096, 2560).passes[1].entry, "dense_gemv_bf16_reduce");
        }
        let f = facts(132);
        // Gemma's gate/up at hidden 2560 (160 row blocks): one chunk from one
        // row block an SM up (2 · 82176 bytes staged an SM); 161 asked for, three.
        assert_eq!(cuda_splits(16, 2560, 160, &f, None), 1);
        assert_eq!(cuda_splits(16, 2560, 160, &f, Some(161)), 3);
        // On 200 SMs it has fewer row blocks than SMs: split (5 chunks, two waves of 400 slots).
        assert_eq!(cuda_splits(16, 2560, 160, &facts(200), None), 5);
        // q/k/v has too few row blocks; a K of 4096 does not fit two blocks an SM at m = 16 (m = 8 does).
        assert_eq!(cuda_splits(16, 2560, 32, &f, None), 8);
        assert_eq!(cuda_splits(16, 4096, 160, &f, Some(1)), 4);
        assert_eq!(cuda_splits(8, 4096, 160, &f, Some(1)), 1);
    }

    fn norm_args(m: u32, n: u32, k: u32) -> Vec<Arg> {
        vec![Arg::P(0), Arg::P(0), Arg::P(0), Arg::U(m), Arg::U(n), Arg::U(k), Arg::U(n), Arg::U(n), Arg::P(0), Arg::F(1e-6)]
    }

    #[test]
    fn the_layer_output_gemv_takes_the_fused_norm_geometry_with_the_row_in_shared_memory() {
        use layer_out::{cuda_layer_out_gemv, wgsl_layer_out_gemv};
        let p = P(0x1000);
        let args = |n: u32, k: u32| vec![p, p, p, U(1), U(n), U(k), U(n), U(n), p, F(1e-6), p, p, P(0), p];
        let a = args(4096, 2560);
        let pa = PlanArgs::new(&DENSE_GEMV_LAYER_OUT_RMSNORM_BF16, &a);
        let c = cuda_layer_out_gemv(&pa, &facts(132)).unwrap();
        assert_eq!((c.passes.len(), c.passes[0].entry, c.passes[0].grid), (1, "dense_gemv_layer_out_rmsnorm_bf16_x2", [256, 1, 1]));
        assert_eq!(c.passes[0].shared_bytes, 2 * 2560);
        // Hidden 5376: the slices geometry under the kernel's own entry.
        let a = args(4096, 5376);
        let c = cuda_layer_out_gemv(&PlanArgs::new(&DENSE_GEMV_LAYER_OUT_RMSNORM_BF16, &a), &facts(132)).unwrap();
        assert_eq!((c.passes[0].entry, c.passes[0].shared_bytes), ("dense_gemv_layer_out_rmsnorm_bf16", 2 * 5376));
        // WGSL at m = 1: the fused-norm GEMV's m = 1 pass, every workgroup forming the row.
        let inner = wgsl_dense_gemv_rmsnorm(&pa, &wgpu_facts(1 << 31)).unwrap();
        let w = wgsl_layer_out_gemv(&pa, &wgpu_facts(1 << 31)).unwrap();
        assert_eq!(inner.passes.len(), 1);
        assert_eq!(w.passes, [WgslPass { entry: "dense_gemv_layer_out_rmsnorm_bf16_m1", ..inner.passes[0].clone() }]);
        // With the row pass asked for, or where the GEMV is not one m = 1 pass (K past
        // 8192): the row pass (one workgroup), then the fused-norm GEMV's own entries.
        let long = args(4096, 10240);
        let pl = PlanArgs::new(&DENSE_GEMV_LAYER_OUT_RMSNORM_BF16, &long);
        for w in [layer_out::layer_out_plan(inner, &pa, true), wgsl_layer_out_gemv(&pl, &wgpu_facts(1 << 31)).unwrap()] {
            assert_eq!((w.passes[0].entry, w.passes[0].grid), ("dense_gemv_layer_out_rmsnorm_bf16", [1, 1, 1]));
            assert!(w.passes.len() >= 2 && w.passes[1..].iter().all(|p| p.entry.starts_with("dense_gemv_rmsnorm_bf16")), "{w:?}");
        }
    }

    #[test]
    fn the_sandwich_gemv_takes_one_pass_within_a_wave_two_past_it_and_keeps_its_wgsl_row_ahead_of_the_partials() {
        use sandwich::{cuda_sandwich_gemv, wgsl_sandwich_gemv};
        let p = P(0x1000);
        let args = |m: u32, n: u32, k: u32| vec![p, p, p, U(m), U(n), U(k), p, F(1e-6), p, p, P(0)];
        // 26b-a4b's dense MLP (2112 columns, K = 2816): one wave of blocks of
        // sixteen warps, a warp an output over all of K, one pass.
        let a = args(1, 2112, 2816);
        let c = cuda_sandwich_gemv(&PlanArgs::new(&DENSE_GEMV_SANDWICH_GELU_MUL_BF16, &a), &facts(132)).unwrap();
        assert_eq!((c.passes.len(), c.passes[0].entry, c.passes[0].grid), (1, "dense_gemv_sandwich_gelu_mul_bf16_whole", [132, 1, 1]));
        assert_eq!((c.passes[0].block, c.passes[0].shared_bytes), ([32, 1, 16], 2 * 2816));
        // Gemma's gate/up at hidden 2560 (10240 columns) is past one wave:
        // the row pass, then the gated m = 1 GEMV over the workspace's row.
        let a = args(1, 10240, 2560);
        let pa = PlanArgs::new(&DENSE_GEMV_SANDWICH_GELU_MUL_BF16, &a);
        let c = cuda_sandwich_gemv(&pa, &facts(132)).unwrap();
        let gated = cuda_dense_gemv_gelu_mul(&PlanArgs::new(&DENSE_GEMV_GELU_MUL_BF16, &a[..6]), &facts(132)).unwrap();
        let entries: Vec<_> = c.passes.iter().map(|p| p.entry).collect();
        assert_eq!(entries, ["dense_gemv_sandwich_gelu_mul_bf16_row", "dense_gemv_sandwich_gelu_mul_bf16_ws"]);
        assert_eq!((c.passes[1].grid, c.passes[1].block), (gated.passes[0].grid, gated.passes[0].block));
        assert!(c.workspace_bytes >= 2 * 2560);
        // Hidden 5376: the gated slices geometry under the kernel's own entry.
        let a = args(1, 21504, 5376);
        let c = cuda_sandwich_gemv(&PlanArgs::new(&DENSE_GEMV_SANDWICH_GELU_MUL_BF16, &a), &facts(132)).unwrap();
        assert_eq!(
            (c.passes[0].entry, c.passes[0].block, c.passes[0].shared_bytes),
            ("dense_gemv_sandwich_gelu_mul_bf16", [32, 4, 2], 2 * 5376)
        );
        // WGSL at m = 1: the gated GEMV's m = 1 pass, every workgroup forming the row
        // into its workgroup memory.
        let gate_up = args(1, 10240, 2560);
        let inner = wgsl_dense_gemv_gelu_mul(&PlanArgs::new(&DENSE_GEMV_GELU_MUL_BF16, &gate_up[..6]), &wgpu_facts(1 << 31)).unwrap();
        let w = wgsl_sandwich_gemv(&pa, &wgpu_facts(1 << 31)).unwrap();
        let mut consts = inner.passes[0].consts.clone();
        consts.extend([("XN_STAGED", 1), ("XN_VECS", 320)]);
        assert_eq!(w.passes, [WgslPass { entry: "dense_gemv_sandwich_gelu_mul_bf16_m1", consts, ..inner.passes[0].clone() }]);
        assert_eq!(w.workspace_bytes, 16);
        // With the row pass asked for, or too little workgroup memory for the row: the row
        // pass, then the gated GEMV's own entries with the partial sums past the packed row
        // (k / 2 words).
        let w = sandwich::sandwich_plan(inner, &pa, &wgpu_facts(1 << 31), true).unwrap();
        assert_eq!((w.passes[0].entry, w.passes[0].grid), ("dense_gemv_sandwich_gelu_mul_bf16", [1, 1, 1]));
        assert_eq!(w.passes[1].entry, "dense_gemv_gelu_mul_bf16_m1");
        assert!(w.passes[1..].iter().all(|p| p.consts.contains(&("WS_BASE", 1280))), "{w:?}");
        // Hidden 5376 under 10000 bytes of workgroup memory: the m = 1 pass fits, its
        // row beside it (10752 bytes) does not.
        let wide = args(1, 21504, 5376);
        let small = DeviceFacts { max_shared_bytes: 10_000, ..wgpu_facts(1 << 31) };
        let w = wgsl_sandwich_gemv(&PlanArgs::new(&DENSE_GEMV_SANDWICH_GELU_MUL_BF16, &wide), &small).unwrap();
        let entries: Vec<_> = w.passes.iter().map(|p| p.entry).collect();
        assert_eq!(entries, ["dense_gemv_sandwich_gelu_mul_bf16", "dense_gemv_gelu_mul_bf16_m1"]);
        let a = args(1, 300, 5376);
        let w = wgsl_sandwich_gemv(&PlanArgs::new(&DENSE_GEMV_SANDWICH_GELU_MUL_BF16, &a), &wgpu_facts(1 << 31)).unwrap();
        let entries: Vec<_> = w.passes.iter().map(|p| p.entry).collect();
        assert_eq!(entries, ["dense_gemv_sandwich_gelu_mul_bf16", "dense_gemv_gelu_mul_bf16_partial", "dense_gemv_gelu_mul_bf16_reduce"]);
        let partials = wgsl_dense_gemv_gelu_mul(&PlanArgs::new(&DENSE_GEMV_GELU_MUL_BF16, &a[..6]), &wgpu_facts(1 << 31)).unwrap();
        assert_eq!(w.workspace_bytes, (partials.workspace_bytes + 2 * 5376).next_multiple_of(16));
        // Batch 1 only.
        let a = args(2, 10240, 2560);
        assert!(cuda_sandwich_gemv(&PlanArgs::new(&DENSE_GEMV_SANDWICH_GELU_MUL_BF16, &a), &facts(132)).is_err());
    }

    #[test]
    fn the_fused_norm_takes_the_one_row_geometry_and_refuses_other_m() {
        // Gemma's stacked q/k/v at hidden 2560: two outputs a warp, sixteen a block, 256 blocks.
        let args = norm_args(1, 4096, 2560);
        let p = cuda_dense_gemv_rmsnorm(&PlanArgs::new(&DENSE_GEMV_RMSNORM_BF16, &args), &facts(132)).unwrap();
        assert_eq!(p.passes.len(), 1);
        assert_eq!((p.passes[0].entry, p.passes[0].grid, p.passes[0].block), ("dense_gemv_rmsnorm_bf16_x2", [256, 1, 1], [32, 1, 8]));
        assert_eq!((p.workspace_bytes, p.passes[0].shared_bytes), (CUDA_MIN_WORKSPACE, 2 * 2560));
        // An odd N: the last slot's second output is past the end.
        let args = norm_args(1, 97, 264);
        let p = cuda_dense_gemv_rmsnorm(&PlanArgs::new(&DENSE_GEMV_RMSNORM_BF16, &args), &facts(132)).unwrap();
        assert_eq!(p.passes[0].grid, [7, 1, 1]);
        // Hidden 5376: two warps per output, as the GEMV, under the kernel's own entry.
        let args = norm_args(1, 4096, 5376);
        let p = cuda_dense_gemv_rmsnorm(&PlanArgs::new(&DENSE_GEMV_RMSNORM_BF16, &args), &facts(132)).unwrap();
        assert_eq!((p.passes[0].entry, p.passes[0].grid, p.passes[0].block), ("dense_gemv_rmsnorm_bf16", [1024, 1, 1], [32, 2, 4]));
        assert_eq!(p.passes[0].shared_bytes, 2 * 5376);
        // A row past the device's shared memory is refused, naming it.
        let args = norm_args(1, 64, 1 << 17);
        let err = cuda_dense_gemv_rmsnorm(&PlanArgs::new(&DENSE_GEMV_RMSNORM_BF16, &args), &facts(132)).unwrap_err();
        assert!(matches!(err, switchyard_core::Error::Unsupported(_)), "{err:?}");
        // WGSL: the GEMV's m = 1 path (eight rows a workgroup, one pass), its own entry.
        // It stages the normalised row (320 vectors) in workgroup memory.
        let args = norm_args(1, 4096, 2560);
        let p = wgsl_dense_gemv_rmsnorm(&PlanArgs::new(&DENSE_GEMV_RMSNORM_BF16, &args), &wgpu_facts(1 << 31)).unwrap();
        assert_eq!((shape(&p), p.workspace_bytes), (vec![("dense_gemv_rmsnorm_bf16_m1", [512, 1, 1], vec![("XN_VECS", 320)], [0; 4])], 0));
        // Hidden 8192 does not fit 16 KiB beside the scratch (2176 + 16 KiB): the tiled plan; 48 KiB holds it.
        let args = norm_args(1, 4096, 8192);
        let pa = PlanArgs::new(&DENSE_GEMV_RMSNORM_BF16, &args);
        assert_eq!(wgsl_dense_gemv_rmsnorm(&pa, &wgpu_facts(1 << 31)).unwrap().passes[0].entry, "dense_gemv_rmsnorm_bf16_partial");
        let big = DeviceFacts { max_shared_bytes: 49152, ..wgpu_facts(1 << 31) };
        assert_eq!(shape(&wgsl_dense_gemv_rmsnorm(&pa, &big).unwrap())[0].2, vec![("XN_VECS", 1024)]);
        // Too few rows for it: the tiled split (8 row blocks, 10 chunks of 256 k).
        let args = norm_args(1, 1000, 2560);
        let p = wgsl_dense_gemv_rmsnorm(&PlanArgs::new(&DENSE_GEMV_RMSNORM_BF16, &args), &wgpu_facts(1 << 31)).unwrap();
        assert_eq!(
            shape(&p),
            [
                ("dense_gemv_rmsnorm_bf16_partial", [8, 10, 1], vec![("M", 1)], [256, 10, 0, 0]),
                ("dense_gemv_rmsnorm_bf16_reduce", [2, 1, 1], vec![], [10, 0, 0, 0]),
            ]
        );
        for m in [0, 2, 16] {
            let args = norm_args(m, 4096, 2560);
            let pa = PlanArgs::new(&DENSE_GEMV_RMSNORM_BF16, &args);
            for err in [cuda_dense_gemv_rmsnorm(&pa, &facts(132)).err(), wgsl_dense_gemv_rmsnorm(&pa, &wgpu_facts(1 << 31)).err()] {
                match err {
                    Some(switchyard_core::Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "m"),
                    other => panic!("m = {m}: {other:?}"),
                }
            }
        }
    }

    /// What the wgpu backend reports: no multiprocessor count, WebGPU-sized limits.
    fn wgpu_facts(max_binding_bytes: u64) -> DeviceFacts {
        DeviceFacts {
            multiprocessors: 0,
            max_shared_bytes: 16384,
            subgroup_size: 1,
            max_groups_per_dim: 65535,
            max_binding_bytes,
            cuda_sm90a: false,
            cuda_clusters: false,
            wgsl_coopmat: false,
        }
    }

    fn wgsl(kernel: &'static switchyard_core::KernelSig, m: u32, n: u32, k: u32, facts: &DeviceFacts) -> WgslPlan {
        let mut args = vec![Arg::P(0), Arg::P(0), Arg::P(0), Arg::U(m), Arg::U(n), Arg::U(k)];
        if std::ptr::eq(kernel, &DENSE_GEMV_BF16) {
            args.extend([Arg::U(n), Arg::U(n)]);
        }
        (crate::plan::wgsl_kernel(kernel).unwrap().plan)(&PlanArgs::new(kernel, &args), facts).unwrap()
    }

    /// (entry, grid, M override, extras) of a pass.
    type PassShape = (&'static str, [u32; 3], Vec<(&'static str, u32)>, [u32; 4]);

    fn shape(p: &WgslPlan) -> Vec<PassShape> {
        p.passes.iter().map(|x| (x.entry, x.grid, x.consts.clone(), x.extra)).collect()
    }

    #[test]
    fn wgsl_plans_stream_one_row_a_slot_at_m1() {
        let f = wgpu_facts(1 << 31);
        // (n, k, workgroups): eight weight rows each. Gemma's q and o
        // projections at hidden 2560, a ragged row count, and a grid past 65535.
        for (n, k, groups) in [(2048, 2560, 256), (2560, 2048, 320), (1017, 2048, 128), (8192, 8192, 1024), (1 << 20, 2048, 1 << 17)] {
            let p = wgsl(&DENSE_GEMV_BF16, 1, n, k, &f);
            assert_eq!((shape(&p), p.workspace_bytes), (vec![("dense_gemv_bf16_m1", [groups, 1, 1], vec![], [0; 4])], 0), "n={n} k={k}");
        }
        // K past 8192 (the down projection's 10240) keeps the tiled plan (its
        // K split in one dispatch); the gated kernel's workgroup streams the
        // gate and up rows of four columns.
        assert_eq!(wgsl(&DENSE_GEMV_BF16, 1, 2560, 10240, &f).passes[0].entry, "dense_gemv_bf16_once");
        let p = wgsl(&DENSE_GEMV_GELU_MUL_BF16, 1, 10240, 2560, &f);
        assert_eq!((shape(&p), p.workspace_bytes), (vec![("dense_gemv_gelu_mul_bf16_m1", [2560, 1, 1], vec![], [0; 4])], 0));
        // Fewer than 128 workgroups' worth of rows: the tiled plan, which
        // splits K (q alone at 1016 rows: 8 row blocks, 10 chunks of 256 k),
        // in one dispatch on a counter a row block.
        let p = wgsl(&DENSE_GEMV_BF16, 1, 1016, 2560, &f);
        assert_eq!((shape(&p), p.arrivals), (vec![("dense_gemv_bf16_once", [8, 10, 1], vec![("M", 1)], [256, 10, 0, 0])], 8));
        // K < 2048 (less than a full round of loads per lane) never takes
        // it; m ≥ 2 never does and keeps its K split in two dispatches.
        assert_eq!(wgsl(&DENSE_GEMV_BF16, 1, 4096, 2040, &f).passes[0].entry, "dense_gemv_bf16_once");
        assert_eq!(wgsl(&DENSE_GEMV_BF16, 2, 2048, 2560, &f).passes[0].entry, "dense_gemv_bf16_partial");
    }

    #[test]
    fn wgsl_gemv_split_is_one_dispatch_only_at_one_row_unless_forced() {
        assert!(!gemv_split_takes_two_passes(1, None));
        assert!(gemv_split_takes_two_passes(2, None) && gemv_split_takes_two_passes(16, None));
        assert!(gemv_split_takes_two_passes(1, Some(2)));
        assert!(!gemv_split_takes_two_passes(16, Some(1)));
    }

    #[test]
    fn wgsl_plans_split_k_toward_256_workgroups_of_128_weight_rows() {
        let f = wgpu_facts(1 << 31);
        // Gemma's q projection at hidden 2560, m = 2: 16 row blocks; chunks
        // of 256 k (the shortest) give 10 chunks, 160 workgroups, as the CUDA plan.
        let p = split_in_one_dispatch(wgsl_two_pass_dense(2, 2048, 2560, &f), "dense_gemv_bf16_once", false);
        assert_eq!(shape(&p), [("dense_gemv_bf16_once", [16, 10, 1], vec![("M", 2)], [256, 10, 0, 0])]);
        assert_eq!(p.workspace_bytes, 10 * 2 * 2048 * 4);
        // Its two-pass form: the partials' grid, then an invocation per output word.
        let two = split_in_one_dispatch(wgsl_two_pass_dense(2, 2048, 2560, &f), "dense_gemv_bf16_once", true);
        assert_eq!(
            (shape(&two), two.arrivals, two.workspace_bytes),
            (
                vec![
                    ("dense_gemv_bf16_partial", [16, 10, 1], vec![("M", 2)], [256, 10, 0, 0]),
                    ("dense_gemv_bf16_reduce", [8, 1, 1], vec![], [10, 0, 0, 0]),
                ],
                0,
                p.workspace_bytes
            )
        );
        // The down projection at m = 16: 20 row blocks want 13 chunks; 788 k
        // rounds up to 7 steps (896 k), so 12 chunks, 240 workgroups.
        let p = split_in_one_dispatch(wgsl_two_pass_dense(16, 2560, 10240, &f), "dense_gemv_bf16_once", false);
        assert_eq!((shape(&p), p.arrivals), (vec![("dense_gemv_bf16_once", [20, 12, 1], vec![("M", 16)], [896, 12, 0, 0])], 20));
        assert_eq!(wgsl(&DENSE_GEMV_BF16, 16, 2560, 10240, &f).passes[0].entry, "dense_gemv_bf16_partial");
        // More row blocks than the backend's counters (a split plan never has
        // them, as 256 row blocks already leave K whole): the two passes.
        let mut wide = wgsl_two_pass_dense(16, 2560, 10240, &f);
        wide.passes[0].grid[0] = WGSL_ARRIVAL_COUNTERS + 1;
        assert_eq!(split_in_one_dispatch(wide.clone(), "dense_gemv_bf16_once", false), wide);
        assert_eq!(p.workspace_bytes, 12 * 16 * 2560 * 4);
        // Gate/up at hidden 2560, m = 2: 20480 weight rows in 160 blocks, two chunks.
        let p = wgsl(&DENSE_GEMV_GELU_MUL_BF16, 2, 10240, 2560, &f);
        assert_eq!(
            shape(&p),
            [
                ("dense_gemv_gelu_mul_bf16_partial", [160, 2, 1], vec![("M", 2)], [1280, 2, 0, 0]),
                ("dense_gemv_gelu_mul_bf16_reduce", [40, 1, 1], vec![], [2, 0, 0, 0]),
            ]
        );
        assert_eq!(p.workspace_bytes, 2 * 2 * 20480 * 4);
        // Enough row blocks, or a K of one minimum chunk: one pass, no workspace.
        for (m, n, k) in [(2, 65536, 4096), (3, 96, 264), (1, 96, 264)] {
            let p = wgsl(&DENSE_GEMV_BF16, m, n, k, &f);
            let blocks = n.div_ceil(128);
            assert_eq!((shape(&p), p.workspace_bytes), (vec![("dense_gemv_bf16", [blocks, 1, 1], vec![("M", m)], [k, 1, 0, 0])], 0));
        }
        // The partial sums must fit one binding: two chunks' worth allowed.
        let p = wgsl(&DENSE_GEMV_BF16, 16, 2048, 10240, &wgpu_facts(2 * 16 * 2048 * 4));
        assert_eq!((p.passes[0].grid, p.workspace_bytes), ([16, 2, 1], 2 * 16 * 2048 * 4));
    }

    /// dense_gemv_bf16's plan before [`split_in_one_dispatch`].
    fn wgsl_two_pass_dense(m: u32, n: u32, k: u32, f: &DeviceFacts) -> WgslPlan {
        let args = [Arg::P(0), Arg::P(0), Arg::P(0), Arg::U(m), Arg::U(n), Arg::U(k), Arg::U(n), Arg::U(n)];
        let a = PlanArgs::new(&DENSE_GEMV_BF16, &args);
        let entries = ["dense_gemv_bf16_partial", "dense_gemv_bf16_reduce"];
        wgsl_gemv(&a, f, n as u64, WGSL_SHARED_BYTES, entries, Some("dense_gemv_bf16_m1"), false).unwrap()
    }

    #[test]
    fn wgsl_plans_refuse_shapes_the_shaders_cannot_take() {
        let f = wgpu_facts(1 << 31);
        for (m, n, k, arg) in [(0, 64, 64, "m"), (17, 64, 64, "m"), (1, 0, 64, "n"), (1, 64, 0, "k"), (1, 64, 12, "k")] {
            let args = [Arg::P(0), Arg::P(0), Arg::P(0), Arg::U(m), Arg::U(n), Arg::U(k)];
            let plan = crate::plan::wgsl_kernel(&DENSE_GEMV_GELU_MUL_BF16).unwrap().plan;
            match plan(&PlanArgs::new(&DENSE_GEMV_GELU_MUL_BF16, &args), &f) {
                Err(switchyard_core::Error::InvalidArgument { arg: a, .. }) => assert_eq!(a, arg, "m={m} n={n} k={k}"),
                other => panic!("m={m} n={n} k={k}: {other:?}"),
            }
        }
    }
}
