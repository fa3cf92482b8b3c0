//! The output head: logits over the tied embedding table, argmax, and the
//! option-letter readout. Logits are f32; `softcap(x) = c · tanh(x / c)`,
//! `c = 0` meaning none.
use crate::ops::{bf16s, i32_arg, region, require, saturating_product, scalar, words, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use crate::plan::{
    env_override, groups, positive, row_windows, CudaPass, CudaPlan, DeviceFacts, PlanArgs, WgslPass, WgslPlan, WgslSplitPass,
    WgslSplitPlan, WgslWindow, WGSL_ARRIVAL_COUNTERS,
};
use switchyard_core::codec::{bytes, fp8};
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, Error, KernelSig, Region, Result};

/// Largest `m` the decode-shaped head kernels take.
pub const MAX_HEAD_ROWS: usize = 16;

declare_kernel! {
    /// `out[i, v] = softcap(row_scale[v] · Σₖ h[i, k] · e4m3(e8[v, k]))`, f32
    /// accumulation, no rounding (f32 output). Shapes: out f32 `[m, vocab]`,
    /// h bf16 `[m, hdim]`, e8 u8 `[vocab, hdim]`, row_scale f32 `[vocab]`;
    /// `m <= 16`, `hdim % 8 == 0`.
    LM_HEAD_LOGITS_FP8 = "head"::"lm_head_logits_fp8"(
        A::output("out"), A::input("h"), A::input("e8"), A::input("row_scale"),
        A::i32("m"), A::i32("vocab"), A::i32("hdim"), A::f32("softcap"))
}

declare_kernel! {
    /// `out[i, v] = softcap(Σₖ h[i, k] · table[v, k])` over a bf16 table, f32
    /// accumulation. Shapes as [`LM_HEAD_LOGITS_FP8`] with table bf16
    /// `[vocab, hdim]`; `m <= 16`, `hdim % 8 == 0`.
    LM_HEAD_LOGITS_BF16 = "head"::"lm_head_logits_bf16"(
        A::output("out"), A::input("h"), A::input("table"),
        A::i32("m"), A::i32("vocab"), A::i32("hdim"), A::f32("softcap"))
}

declare_kernel! {
    /// Per row `i` of f32 logits `[m, vocab]`: the index of the largest value,
    /// lowest index on ties, never `ex0` or `ex1` (-1 = no exclusion); NaN
    /// never wins. `idx[i]` i32, `val[i]` f32 its logit; a row with no
    /// eligible value gives `idx = -1`, `val = -inf`. The result does not
    /// depend on how a backend splits the rows (a comparison, not a sum).
    ARGMAX_ROWS = "head"::"argmax_rows"(
        A::output("idx"), A::output("val"), A::input("logits"), A::i32("m"), A::i32("vocab"), A::i32("ex0"), A::i32("ex1"))
}

declare_kernel! {
    /// `out[r, j] = softcap(row_scale[l] · Σₖ hidden[r, k] · e4m3(e8[l, k]))`
    /// with `l = label_ids[j]`; an id outside `[0, vocab)` gives NaN. Shapes:
    /// out f32 `[rows, n_labels]`, hidden bf16 `[rows, hdim]`; `hdim % 8 == 0`.
    LETTER_LOGITS_FP8 = "head"::"letter_logits_fp8"(
        A::output("out"), A::input("hidden"), A::input("e8"), A::input("row_scale"), A::input("label_ids"),
        A::i32("rows"), A::i32("n_labels"), A::i32("hdim"), A::i32("vocab"), A::f32("softcap"))
}

/// Vocab rows per CUDA lm_head block at m = 1 (a warp per row).
const CUDA_HEAD_ROWS_PER_BLOCK: u64 = 4;
/// Vocab rows per CUDA lm_head block at m >= 2: 4 warps of 32 rows (head.cu's mma path).
const CUDA_HEAD_MMA_ROWS_PER_BLOCK: u64 = 128;

/// Blocks of 128 threads; head.cu derives each block's rows from the grid,
/// so any grid is correct. m = 1: `ceil(vocab / 4)`, the measured one (91%
/// of copy). m >= 2: `ceil(vocab / 128)`, one block per 128 rows, the rows
/// a block's 4 warps cover in one pass (the grid of 4-row blocks had 31 of
/// every 32 blocks exit at once: 63,488 empty blocks at vocab 262144). H200
/// numbers at m = 16, vocab 262144, hdim 5376: 2048 blocks at 108 registers,
/// 4 an SM (3.9 waves); 16 warps an SM with 4 KiB of table each in flight.
fn cuda_lm_head(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    let rows = if a.u32("m")? >= 2 { CUDA_HEAD_MMA_ROWS_PER_BLOCK } else { CUDA_HEAD_ROWS_PER_BLOCK };
    Ok(CudaPlan::single(a.kernel, [groups(a.kernel, a.u32("vocab")? as u64, rows)?, 1, 1], [128, 1, 1]))
}

/// Vocab rows per WGSL lm_head workgroup (`NR` in lm_head_common.wgsli).
const WGSL_HEAD_ROWS_PER_GROUP: u64 = 32;

/// A head kernel's table: its argument and bytes per vocab row.
fn head_table(a: &PlanArgs) -> Result<(&'static str, u64)> {
    let hdim = a.u32("hdim")? as u64;
    Ok(if a.kernel.symbol == LM_HEAD_LOGITS_BF16.symbol { ("table", 2 * hdim) } else { ("e8", hdim) })
}

/// The lm_head dispatch over vocab rows `[first, first + count + count_b)`:
/// x0 = first, x1 = count (rows of the first window), x3 = count_b (rows of
/// the second window, the bf16 head only; 0 for the fp8 head).
fn lm_head_pass(a: &PlanArgs, first: u64, count: u64, count_b: u64) -> Result<WgslPass> {
    let m = a.u32("m")?;
    if !(1..=MAX_HEAD_ROWS as u32).contains(&m) {
        return Err(Error::invalid(a.kernel.symbol, "m", format!("m = {m} must be in 1..={MAX_HEAD_ROWS}")));
    }
    let grid = [groups(a.kernel, count + count_b, WGSL_HEAD_ROWS_PER_GROUP)?, 1, 1];
    Ok(WgslPass { entry: a.kernel.symbol, grid, consts: vec![("M", m)], extra: [first as u32, count as u32, 0, count_b as u32] })
}

/// One shader for every m: 32 vocab rows per workgroup, lanes striding over
/// k with 16-byte loads; `M` is an override so the per-h-row loops unroll.
/// The bf16 head never runs it: its shader binds the table twice, which
/// only the window plan ([`wgsl_lm_head_split`]) sets up, for every table size.
fn wgsl_lm_head(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    Ok(WgslPlan { passes: vec![lm_head_pass(a, 0, a.u32("vocab")? as u64, 0)?], workspace_bytes: 0, arrivals: 0 })
}

/// Table windows one pass of the bf16 head reads: two, as the bf16 gathers
/// (embed/mod.rs), so the 2.8 GB Gemma table (two windows under a 2 GiB
/// binding) is one pass over the vocabulary instead of two.
/// `SWITCHYARD_WGSL_HEAD_WINDOWS=1` (read once a process) runs one window a
/// pass, the plan before, to measure. H200, m = 1 at that shape, a process
/// each (GPU ms): 0.6150 / 0.6127 / 0.6142 two windows a pass, 1.4366 /
/// 1.4465 / 1.4390 one (lm_head_logits_bf16.wgsl has the caveat).
fn head_windows_per_pass() -> usize {
    static OVERRIDE: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    match env_override(&OVERRIDE, "SWITCHYARD_WGSL_HEAD_WINDOWS", |v| v == 1) {
        Some(_) => 1,
        None => 2,
    }
}

/// Measurement override, read once a process: `SWITCHYARD_WGSL_HEAD_HALVES=1`
/// binds a bf16 table that fits one binding as two windows of one pass. On
/// the H200 the 2.8 GB table read as two windows a pass timed 0.61 ms, while
/// a one-window pass over half of it took 0.72-0.75 ms (BENCHMARKS.md, ninth
/// session); this separates two bindings a pass from the table itself at
/// the default shape's 1.34 GB, which fits one binding.
fn head_halves() -> bool {
    static OVERRIDE: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    env_override(&OVERRIDE, "SWITCHYARD_WGSL_HEAD_HALVES", |v| v == 1).is_some()
}

/// The bf16 head's windows and how many a pass binds: `windows` (from
/// [`row_windows`]) recut at a multiple of [`WGSL_HEAD_ROWS_PER_GROUP`] rows,
/// `per_pass` of them a pass, so no workgroup's rows straddle the two
/// windows of a pass (the shader picks one binding per slice of rows). A
/// binding that holds fewer than that many rows, or `per_pass` 1, keeps the
/// windows as cut and runs one a pass.
///
/// `halves` (`SWITCHYARD_WGSL_HEAD_HALVES=1`, [`head_halves`]) cuts a table
/// that fits one binding into two windows of one pass as well, at a multiple
/// of [`WGSL_HEAD_ROWS_PER_GROUP`] rows.
fn head_bf16_windows(vocab: u64, windows: Option<Vec<(u64, u64)>>, per_pass: usize, halves: bool) -> (Vec<(u64, u64)>, usize) {
    let Some(windows) = windows else {
        let half = vocab.div_ceil(2).div_ceil(WGSL_HEAD_ROWS_PER_GROUP) * WGSL_HEAD_ROWS_PER_GROUP;
        if halves && per_pass >= 2 && half < vocab {
            return (vec![(0, half), (half, vocab - half)], 2);
        }
        return (vec![(0, vocab)], per_pass);
    };
    let per = windows[0].1 / WGSL_HEAD_ROWS_PER_GROUP * WGSL_HEAD_ROWS_PER_GROUP;
    if per_pass < 2 || per == 0 {
        return (windows, 1);
    }
    ((0..vocab.div_ceil(per)).map(|k| (k * per, per.min(vocab - k * per))).collect(), per_pass)
}

/// Windows of the table. The fp8 head, only past one binding: one pass per
/// window ([`row_windows`]), each writing its rows' logits. The bf16 head,
/// always: a pass per pair of windows ([`head_bf16_windows`]; one window,
/// the whole table, when it fits a binding), each binding the table twice; a
/// pass with one window binds it again as the empty second.
fn wgsl_lm_head_split(a: &PlanArgs, f: &DeviceFacts) -> Result<Option<WgslSplitPlan>> {
    let (arg, row_bytes) = head_table(a)?;
    let vocab = a.u32("vocab")? as u64;
    let windows = row_windows(a.kernel, arg, vocab, row_bytes, f.max_binding_bytes)?;
    let window = |(first, count): (u64, u64)| WgslWindow { arg, offset: first * row_bytes, bytes: count * row_bytes };
    if a.kernel.symbol != LM_HEAD_LOGITS_BF16.symbol {
        let Some(windows) = windows else { return Ok(None) };
        let passes = windows
            .iter()
            .map(|&(first, count)| Ok(WgslSplitPass { pass: lm_head_pass(a, first, count, 0)?, windows: vec![window((first, count))] }))
            .collect::<Result<_>>()?;
        return Ok(Some(WgslSplitPlan { passes, workspace_bytes: 0 }));
    }
    let (windows, per_pass) = head_bf16_windows(vocab, windows, head_windows_per_pass(), head_halves());
    let passes = windows
        .chunks(per_pass)
        .map(|pair| {
            let (first, count) = pair[0];
            let (second, count_b) = pair.get(1).copied().map_or(((first, count), 0), |w| (w, w.1));
            Ok(WgslSplitPass { pass: lm_head_pass(a, first, count, count_b)?, windows: vec![window((first, count)), window(second)] })
        })
        .collect::<Result<_>>()?;
    Ok(Some(WgslSplitPlan { passes, workspace_bytes: 0 }))
}

/// Blocks the CUDA argmax's first pass aims for, all rows together
/// (`ARGMAX_TARGET_BLOCKS` in head.cu).
pub const ARGMAX_TARGET_BLOCKS: usize = 512;
/// Fewest logits a CUDA argmax slice covers (`ARGMAX_MIN_SLICE` in head.cu).
pub const ARGMAX_MIN_SLICE: usize = 2048;
/// Most slices a row is cut into (`ARGMAX_MAX_SLICES` in head.cu: one
/// thread of the second pass's block each).
pub const ARGMAX_MAX_SLICES: usize = 1024;
/// Threads of a first-pass block (`ARGMAX_THREADS` in head.cu).
const ARGMAX_THREADS: u32 = 256;

/// Slices the CUDA argmax cuts each of `m` rows of `vocab` logits into:
/// enough for [`ARGMAX_TARGET_BLOCKS`] blocks in all, none under
/// [`ARGMAX_MIN_SLICE`] logits, at most [`ARGMAX_MAX_SLICES`]. Any split gives
/// the same result (a comparison, not a sum); this one is a launch geometry.
pub fn argmax_slices(m: usize, vocab: usize) -> usize {
    ARGMAX_TARGET_BLOCKS.div_ceil(m.max(1)).min(vocab.div_ceil(ARGMAX_MIN_SLICE)).clamp(1, ARGMAX_MAX_SLICES)
}

/// One pass: `argmax_rows`, grid [m, S] with S = [`argmax_slices`], each
/// block reducing a slice of a row to an (value, index) pair in workspace
/// `[m][S]` (8 bytes a pair); the last of a row's S blocks to arrive reduces
/// the row's pairs (head.cu), where a second pass (grid [m], a thread per
/// pair) cost a launch of its own.
///
/// H200 numbers for the bench row (m 16, vocab 262144): S = 32, 512 blocks
/// of 256 threads (3.9 an SM, all resident: 60 registers), 8192 logits = 32
/// KiB a block, all of it requested at once (8 16-byte loads a thread, issued
/// back to back in the SASS), so the 16 MiB are in flight from the first
/// wave (~124 KiB an SM). 10.0 us a launch (39% of copy; the two passes
/// 10.4-10.7 us); ncu: the kernel alone 10.05 us at 35% of DRAM throughput,
/// a fixed ~4 us of launch, first-load latency and the two reductions on top
/// of the stream (the first pass alone took 4.1 us at m = 1, 1 MiB).
fn cuda_argmax_rows(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    let m = positive(a, "m")?;
    let slices = argmax_slices(m as usize, positive(a, "vocab")? as usize) as u32;
    Ok(CudaPlan {
        passes: vec![CudaPass { entry: "argmax_rows", grid: [m, slices, 1], block: [ARGMAX_THREADS, 1, 1], shared_bytes: 0 }],
        // Also at S = 1 (unused there): the entry always takes the pointer.
        workspace_bytes: m as u64 * slices as u64 * 8,
    })
}

/// Logits per vector of the WGSL argmax's first pass, times its 256 invocations.
const WGSL_ARGMAX_VEC_LOGITS: u64 = 256 * 4;
/// First-pass workgroups, all rows together, below which the WGSL argmax
/// cuts rows into shorter chunks (about two resident waves of
/// 256-invocation workgroups on a large GPU). H200, m = 16 × 262144 (GPU
/// ms of both passes, two rounds, a process each): VECS 2 (2048 workgroups)
/// 0.0179 / 0.0187, VECS 4 (1024, the target of 1024 before) 0.0197 /
/// 0.0204, VECS 1 (4096) 0.0200 / 0.0200.
pub const WGSL_ARGMAX_TARGET_GROUPS: u64 = 2048;

/// Vectors of 4 logits per invocation of the WGSL argmax's first pass (the
/// shader's `VECS`): 4 (4096-logit chunks) when those chunks already give
/// [`WGSL_ARGMAX_TARGET_GROUPS`] workgroups, else 2, else 1 (1024-logit
/// chunks), so a decode row (m = 1, vocab 262144) runs as 256 workgroups
/// instead of 64 and the bench row (m = 16) as 2048.
pub fn wgsl_argmax_vecs(m: u64, vocab: u64) -> u32 {
    for vecs in [4u32, 2] {
        if m.saturating_mul(vocab.div_ceil(WGSL_ARGMAX_VEC_LOGITS * vecs as u64)) >= WGSL_ARGMAX_TARGET_GROUPS {
            return vecs;
        }
    }
    1
}

/// `argmax_rows_once`, grid chunks × m: each workgroup reduces a chunk of
/// `1024 · VECS` logits of a row ([`wgsl_argmax_vecs`]) to an (index,
/// value) pair in the workspace, and the last of a row's workgroups to arrive
/// (one of the backend's arrival counters a row) reduces the row's pairs.
/// `x0` = chunks per row. Rows of one chunk need no counter.
///
/// The two-pass form (`argmax_rows`, then `argmax_rows_final` over the pairs,
/// grid m) runs where the rows outnumber the backend's counters
/// ([`WGSL_ARRIVAL_COUNTERS`]), or everywhere under
/// `SWITCHYARD_WGSL_ARGMAX_PASSES=2`, so the two can be measured side by side.
/// `SWITCHYARD_WGSL_ARGMAX_VECS=1|2|4` forces `VECS`. Both are read once a
/// process.
///
/// Why one pass: on the H200 16 rows of 1024 logits (64 KiB) took 0.0112 ms
/// in two passes and one row of 262144 0.0114, against 0.0197 for the 16.8 MB
/// bench row (GPU time, both passes), so 70% of copy (about 0.007 ms for
/// 16.8 MB) is under what two dispatches cost empty.
fn wgsl_argmax_rows(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    static VECS: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    static PASSES: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let forced = env_override(&VECS, "SWITCHYARD_WGSL_ARGMAX_VECS", |v| [1, 2, 4].contains(&v));
    let two_passes = env_override(&PASSES, "SWITCHYARD_WGSL_ARGMAX_PASSES", |v| [1, 2].contains(&v)) == Some(2);
    wgsl_argmax_plan(a.u32("m")?, a.u32("vocab")? as u64, forced, two_passes, a.kernel)
}

/// [`wgsl_argmax_rows`] with its overrides given.
fn wgsl_argmax_plan(rows: u32, vocab: u64, vecs: Option<u32>, two_passes: bool, kernel: &'static KernelSig) -> Result<WgslPlan> {
    let vecs = vecs.unwrap_or_else(|| wgsl_argmax_vecs(rows as u64, vocab));
    let chunks = groups(kernel, vocab, WGSL_ARGMAX_VEC_LOGITS * vecs as u64)?;
    let first = |entry| WgslPass { entry, grid: [chunks, rows, 1], consts: vec![("VECS", vecs)], extra: [chunks, 0, 0, 0] };
    // Two words per pair.
    let workspace_bytes = rows as u64 * chunks as u64 * 8;
    if two_passes || (chunks > 1 && rows > WGSL_ARRIVAL_COUNTERS) {
        return Ok(WgslPlan {
            passes: vec![
                first("argmax_rows"),
                WgslPass { entry: "argmax_rows_final", grid: [rows, 1, 1], consts: vec![], extra: [chunks, 0, 0, 0] },
            ],
            workspace_bytes,
            arrivals: 0,
        });
    }
    // The entry declares both bindings, so rows of one chunk (which touch
    // neither) still take the workspace and one counter.
    let arrivals = if chunks > 1 { rows } else { 1 };
    Ok(WgslPlan { passes: vec![first("argmax_rows_once")], workspace_bytes, arrivals })
}

/// One block of 256 per hidden row, one warp per label.
fn cuda_letter_logits(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    Ok(CudaPlan::single(a.kernel, [a.u32("rows")?, 1, 1], [256, 1, 1]))
}

/// The letter readout's dispatch over table rows `[first, first + count)`:
/// one workgroup per hidden row; x0 = first, x1 = count, x2 = 1 when this
/// pass writes the NaN of out-of-range labels.
fn letter_pass(a: &PlanArgs, first: u64, count: u64, writes_nan: bool) -> Result<WgslPass> {
    Ok(WgslPass {
        entry: a.kernel.symbol,
        grid: [a.u32("rows")?, 1, 1],
        consts: vec![],
        extra: [first as u32, count as u32, writes_nan as u32, 0],
    })
}

/// One workgroup per hidden row.
fn wgsl_letter_logits(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    Ok(WgslPlan { passes: vec![letter_pass(a, 0, a.u32("vocab")? as u64, true)?], workspace_bytes: 0, arrivals: 0 })
}

/// A table past one binding: one pass per window of table rows, each
/// writing the labels that fall in it; the first writes the NaNs.
fn wgsl_letter_logits_split(a: &PlanArgs, f: &DeviceFacts) -> Result<Option<WgslSplitPlan>> {
    let (arg, row_bytes) = head_table(a)?;
    let Some(windows) = row_windows(a.kernel, arg, a.u32("vocab")? as u64, row_bytes, f.max_binding_bytes)? else {
        return Ok(None);
    };
    let passes = windows
        .iter()
        .enumerate()
        .map(|(k, &(first, count))| {
            Ok(WgslSplitPass {
                pass: letter_pass(a, first, count, k == 0)?,
                windows: vec![WgslWindow { arg, offset: first * row_bytes, bytes: count * row_bytes }],
            })
        })
        .collect::<Result<_>>()?;
    Ok(Some(WgslSplitPlan { passes, workspace_bytes: 0 }))
}

cuda_plan!(LM_HEAD_LOGITS_FP8 => cuda_lm_head);
cuda_plan!(LM_HEAD_LOGITS_BF16 => cuda_lm_head);
cuda_plan!(ARGMAX_ROWS => cuda_argmax_rows);
cuda_plan!(LETTER_LOGITS_FP8 => cuda_letter_logits);
wgsl_plan!(LM_HEAD_LOGITS_FP8, "head/lm_head_logits_fp8.wgsl" => wgsl_lm_head, split => wgsl_lm_head_split);
wgsl_plan!(LM_HEAD_LOGITS_BF16, "head/lm_head_logits_bf16.wgsl" => wgsl_lm_head, split => wgsl_lm_head_split);
wgsl_plan!(ARGMAX_ROWS, "head/argmax_rows.wgsl" => wgsl_argmax_rows);
wgsl_plan!(LETTER_LOGITS_FP8, "head/letter_logits_fp8.wgsl" => wgsl_letter_logits, split => wgsl_letter_logits_split);

fn check_head(kernel: &str, m: usize, vocab: usize, hdim: usize, softcap: f32) -> Result<()> {
    require((1..=MAX_HEAD_ROWS).contains(&m), kernel, "m", || format!("m = {m} must be in 1..={MAX_HEAD_ROWS} (decode-shaped kernel)"))?;
    require(vocab > 0, kernel, "vocab", || "vocab must be > 0".into())?;
    require(hdim > 0 && hdim % 8 == 0, kernel, "hdim", || format!("hdim = {hdim} must be a positive multiple of 8"))?;
    require(softcap.is_finite() && softcap >= 0.0, kernel, "softcap", || format!("softcap = {softcap} must be finite and >= 0"))
}

impl Ops {
    /// See [`LM_HEAD_LOGITS_FP8`].
    #[allow(clippy::too_many_arguments)]
    pub fn lm_head_logits_fp8(
        &self,
        out: Region,
        h: Region,
        e8: Region,
        row_scale: Region,
        m: usize,
        vocab: usize,
        hdim: usize,
        softcap: f32,
    ) -> Result<()> {
        let k = LM_HEAD_LOGITS_FP8.symbol;
        check_head(k, m, vocab, hdim, softcap)?;
        self.launch(
            &LM_HEAD_LOGITS_FP8,
            &[
                region(out, words(saturating_product(&[m, vocab]))),
                region(h, bf16s(saturating_product(&[m, hdim]))),
                region(e8, saturating_product(&[vocab, hdim])),
                region(row_scale, words(vocab)),
                scalar(I(i32_arg(k, "m", m)?)),
                scalar(I(i32_arg(k, "vocab", vocab)?)),
                scalar(I(i32_arg(k, "hdim", hdim)?)),
                scalar(F(softcap)),
            ],
        )
    }

    /// See [`LM_HEAD_LOGITS_BF16`].
    #[allow(clippy::too_many_arguments)]
    pub fn lm_head_logits_bf16(
        &self,
        out: Region,
        h: Region,
        table: Region,
        m: usize,
        vocab: usize,
        hdim: usize,
        softcap: f32,
    ) -> Result<()> {
        let k = LM_HEAD_LOGITS_BF16.symbol;
        check_head(k, m, vocab, hdim, softcap)?;
        self.launch(
            &LM_HEAD_LOGITS_BF16,
            &[
                region(out, words(saturating_product(&[m, vocab]))),
                region(h, bf16s(saturating_product(&[m, hdim]))),
                region(table, bf16s(saturating_product(&[vocab, hdim]))),
                scalar(I(i32_arg(k, "m", m)?)),
                scalar(I(i32_arg(k, "vocab", vocab)?)),
                scalar(I(i32_arg(k, "hdim", hdim)?)),
                scalar(F(softcap)),
            ],
        )
    }

    /// See [`ARGMAX_ROWS`].
    #[allow(clippy::too_many_arguments)]
    pub fn argmax_rows(&self, idx: Region, val: Region, logits: Region, m: usize, vocab: usize, ex0: i32, ex1: i32) -> Result<()> {
        let k = ARGMAX_ROWS.symbol;
        require(m > 0, k, "m", || "m must be > 0".into())?;
        require(vocab > 0, k, "vocab", || "vocab must be > 0".into())?;
        for (name, ex) in [("ex0", ex0), ("ex1", ex1)] {
            require(ex >= -1, k, name, || format!("{ex}: an exclusion is a token id or -1"))?;
        }
        self.launch(
            &ARGMAX_ROWS,
            &[
                region(idx, words(m)),
                region(val, words(m)),
                region(logits, words(saturating_product(&[m, vocab]))),
                scalar(I(i32_arg(k, "m", m)?)),
                scalar(I(i32_arg(k, "vocab", vocab)?)),
                scalar(I(ex0)),
                scalar(I(ex1)),
            ],
        )
    }

    /// See [`LETTER_LOGITS_FP8`].
    #[allow(clippy::too_many_arguments)]
    pub fn letter_logits_fp8(
        &self,
        out: Region,
        hidden: Region,
        e8: Region,
        row_scale: Region,
        label_ids: Region,
        rows: usize,
        n_labels: usize,
        hdim: usize,
        vocab: usize,
        softcap: f32,
    ) -> Result<()> {
        let k = LETTER_LOGITS_FP8.symbol;
        require(rows > 0, k, "rows", || "rows must be > 0".into())?;
        require(n_labels > 0, k, "n_labels", || "n_labels must be > 0".into())?;
        check_head(k, 1, vocab, hdim, softcap)?;
        self.launch(
            &LETTER_LOGITS_FP8,
            &[
                region(out, words(saturating_product(&[rows, n_labels]))),
                region(hidden, bf16s(saturating_product(&[rows, hdim]))),
                region(e8, saturating_product(&[vocab, hdim])),
                region(row_scale, words(vocab)),
                region(label_ids, words(n_labels)),
                scalar(I(i32_arg(k, "rows", rows)?)),
                scalar(I(i32_arg(k, "n_labels", n_labels)?)),
                scalar(I(i32_arg(k, "hdim", hdim)?)),
                scalar(I(i32_arg(k, "vocab", vocab)?)),
                scalar(F(softcap)),
            ],
        )
    }
}

/// Σₖ |h[i,k] · t[v,k]| · |scale[v]| per output: the magnitude the f32 dot
/// tolerance (1e-5 · Σ|ab|) is relative to.
fn dot_bounds(h: &[f32], t: &[f32], scale: Option<&[f32]>, rows: &[usize], m: usize, hdim: usize) -> Vec<f64> {
    let mut b = Vec::with_capacity(m * rows.len());
    for i in 0..m {
        for &v in rows {
            let s: f64 = (0..hdim).map(|k| (h[i * hdim + k] as f64 * t[v * hdim + k] as f64).abs()).sum();
            b.push(s * scale.map_or(1.0, |sc| sc[v].abs() as f64));
        }
    }
    b
}

const HEAD_SHAPES: [(usize, usize, usize, f32); 4] = [(1, 97, 64, 0.0), (3, 1001, 136, 30.0), (16, 250, 256, 15.0), (5, 33, 8, 0.0)];

fn fp8_codes_as_f32(codes: &[u8]) -> Vec<f32> {
    codes.iter().map(|&c| fp8::e4m3_to_f32(c)).collect()
}

fn lm_head_fp8_cases(g: &mut Gen) -> Vec<Case> {
    let mut cases: Vec<Case> = HEAD_SHAPES
        .iter()
        .map(|&(m, vocab, hdim, cap)| {
            let (codes, scales, _) = g.fp8_table(vocab, hdim);
            fp8_head_case(g, m, vocab, hdim, cap, codes, scales, "")
        })
        .collect();
    // Every code but the two NaNs, subnormals and ±448 included, in rows on
    // the vector path (hdim % 16 == 0): quantised random tables rarely hold
    // the extremes, and the WGSL fast path decodes codes through an f16 view.
    let (m, vocab, hdim) = (2, 12, 48);
    let codes: Vec<u8> = (0..vocab * hdim).map(|i| (0u8..=255).filter(|c| c & 0x7f != 0x7f).nth((i * 37) % 254).unwrap()).collect();
    let (scales, _) = g.f32(vocab, 0.001, 0.01);
    cases.push(fp8_head_case(g, m, vocab, hdim, 0.0, codes, scales, " every code"));
    cases
}

#[allow(clippy::too_many_arguments)]
fn fp8_head_case(g: &mut Gen, m: usize, vocab: usize, hdim: usize, cap: f32, codes: Vec<u8>, scales: Vec<f32>, note: &str) -> Case {
    let (hv, hb) = g.bf16(m * hdim, 0.01, 2.0);
    let all: Vec<usize> = (0..vocab).collect();
    let bound = dot_bounds(&hv, &fp8_codes_as_f32(&codes), Some(&scales), &all, m, hdim);
    Case {
        kernel: &LM_HEAD_LOGITS_FP8,
        label: format!("m={m} vocab={vocab} hdim={hdim} softcap={cap}{note}"),
        buffers: vec![
            Buffer::output("out", DType::F32, m * vocab, Tolerance::dot(bound)),
            Buffer::input("h", hb),
            Buffer::input("e8", codes),
            Buffer::input("row_scale", bytes::f32_bytes(&scales)),
        ],
        run: Box::new(move |o, a| o.lm_head_logits_fp8(a[0], a[1], a[2], a[3], m, vocab, hdim, cap)),
    }
}

fn lm_head_bf16_cases(g: &mut Gen) -> Vec<Case> {
    HEAD_SHAPES
        .iter()
        .map(|&(m, vocab, hdim, cap)| {
            let (tv, tb) = g.bf16(vocab * hdim, 0.001, 0.2);
            let (hv, hb) = g.bf16(m * hdim, 0.01, 2.0);
            let all: Vec<usize> = (0..vocab).collect();
            let bound = dot_bounds(&hv, &tv, None, &all, m, hdim);
            Case {
                kernel: &LM_HEAD_LOGITS_BF16,
                label: format!("m={m} vocab={vocab} hdim={hdim} softcap={cap}"),
                buffers: vec![
                    Buffer::output("out", DType::F32, m * vocab, Tolerance::dot(bound)),
                    Buffer::input("h", hb),
                    Buffer::input("table", tb),
                ],
                run: Box::new(move |o, a| o.lm_head_logits_bf16(a[0], a[1], a[2], m, vocab, hdim, cap)),
            }
        })
        .collect()
}

fn argmax_cases(g: &mut Gen) -> Vec<Case> {
    // The decode bench shape (16 × 262144) is the only one here on the WGSL
    // first pass's vector loads at VECS 2 (wgsl_argmax_vecs); the others run
    // VECS 1. The last has more rows of two chunks than the wgpu backend has
    // arrival counters: the WGSL plan's two-pass form.
    [(1, 7, -1, -1), (16, 4099, 3, -1), (3, 262, 5, 9), (2, 2, 0, 1), (3, 50001, 7, 40000), (16, 262_144, 11, 200_000), (1025, 1100, 2, -1)]
        .into_iter()
        .map(|(m, vocab, ex0, ex1)| {
            let (mut l, _) = g.f32(m * vocab, -20.0, 20.0);
            for i in 0..m {
                let row = &mut l[i * vocab..(i + 1) * vocab];
                if vocab > 10 {
                    // Ties at the top (lowest index must win), the maximum on an excluded id, and a NaN.
                    row[ex0.max(0) as usize] = 50.0;
                    row[vocab - 1] = 40.0;
                    row[vocab / 2] = 40.0;
                    row[vocab / 3] = f32::NAN;
                }
            }
            Case {
                kernel: &ARGMAX_ROWS,
                label: format!("m={m} vocab={vocab} ex=({ex0},{ex1})"),
                buffers: vec![
                    Buffer::output("idx", DType::I32, m, Tolerance::Exact),
                    Buffer::output("val", DType::F32, m, Tolerance::Exact),
                    Buffer::input("logits", bytes::f32_bytes(&l)),
                ],
                run: Box::new(move |o, a| o.argmax_rows(a[0], a[1], a[2], m, vocab, ex0, ex1)),
            }
        })
        .collect()
}

fn letter_cases(g: &mut Gen) -> Vec<Case> {
    [(1, 4, 64, 50, 0.0), (7, 5, 136, 301, 30.0), (20, 1, 8, 9, 0.0)]
        .into_iter()
        .map(|(rows, n_labels, hdim, vocab, cap)| {
            let (codes, scales, _) = g.fp8_table(vocab, hdim);
            let (hv, hb) = g.bf16(rows * hdim, 0.01, 2.0);
            let (mut labels, _) = g.i32(n_labels, 0, vocab as i32);
            if n_labels > 4 {
                labels[4] = vocab as i32; // out of range: NaN by contract
            }
            let safe: Vec<usize> = labels.iter().map(|&l| if (0..vocab as i32).contains(&l) { l as usize } else { 0 }).collect();
            let bound = dot_bounds(&hv, &fp8_codes_as_f32(&codes), Some(&scales), &safe, rows, hdim);
            Case {
                kernel: &LETTER_LOGITS_FP8,
                label: format!("rows={rows} labels={n_labels} hdim={hdim} vocab={vocab}"),
                buffers: vec![
                    Buffer::output("out", DType::F32, rows * n_labels, Tolerance::dot(bound)),
                    Buffer::input("hidden", hb),
                    Buffer::input("e8", codes),
                    Buffer::input("row_scale", bytes::f32_bytes(&scales)),
                    Buffer::input("label_ids", bytes::i32_bytes(&labels)),
                ],
                run: Box::new(move |o, a| o.letter_logits_fp8(a[0], a[1], a[2], a[3], a[4], rows, n_labels, hdim, vocab, cap)),
            }
        })
        .collect()
}

inventory::submit! { CaseSet { kernel: &LM_HEAD_LOGITS_FP8, cases: lm_head_fp8_cases } }
inventory::submit! { CaseSet { kernel: &LM_HEAD_LOGITS_BF16, cases: lm_head_bf16_cases } }
inventory::submit! { CaseSet { kernel: &ARGMAX_ROWS, cases: argmax_cases } }
inventory::submit! { CaseSet { kernel: &LETTER_LOGITS_FP8, cases: letter_cases } }

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources;
    use switchyard_core::KernelSig;

    #[test]
    fn the_cuda_argmax_uses_the_same_slice_constants() {
        let cu = sources::cuda("head").expect("head.cu").text;
        for (name, v) in [
            ("ARGMAX_TARGET_BLOCKS", ARGMAX_TARGET_BLOCKS),
            ("ARGMAX_MIN_SLICE", ARGMAX_MIN_SLICE),
            ("ARGMAX_MAX_SLICES", ARGMAX_MAX_SLICES),
        ] {
            assert!(cu.contains(&format!("#define {name} {v}\n")), "head.cu must define {name} {v}");
        }
        assert!(cu.contains(&format!("#define ARGMAX_THREADS {ARGMAX_THREADS}\n")));
    }

    #[test]
    fn argmax_slices_fill_the_gpu_and_keep_slices_long() {
        assert_eq!(argmax_slices(16, 262_144), 32);
        assert_eq!(argmax_slices(1, 262_144), 128);
        assert_eq!(argmax_slices(1, 1), 1);
        assert_eq!(argmax_slices(4096, 262_144), 1);
        assert_eq!(argmax_slices(16, 4099), 3);
        assert_eq!(argmax_slices(1, usize::MAX / 2), ARGMAX_TARGET_BLOCKS);
        let facts = DeviceFacts {
            multiprocessors: 132,
            max_shared_bytes: 232_448,
            subgroup_size: 32,
            max_groups_per_dim: 65535,
            max_binding_bytes: u64::MAX,
            cuda_sm90a: false,
            cuda_clusters: false,
            wgsl_coopmat: false,
        };
        let args = [P(0x1000), P(0x2000), P(0x3000), I(16), I(262_144), I(0), I(1)];
        let plan = cuda_argmax_rows(&PlanArgs::new(&ARGMAX_ROWS, &args), &facts).unwrap();
        assert_eq!((plan.passes.len(), plan.passes[0].grid), (1, [16, 32, 1]));
        assert_eq!(plan.workspace_bytes, 16 * 32 * 8);
        // head.cu keeps an arrival counter for each of the first
        // ARGMAX_TARGET_BLOCKS rows: every row cut into slices must be one of them.
        assert_eq!(argmax_slices(ARGMAX_TARGET_BLOCKS, usize::MAX / 2), 1);
        assert!(argmax_slices(ARGMAX_TARGET_BLOCKS - 1, usize::MAX / 2) > 1);
    }

    #[test]
    fn the_halves_override_cuts_a_fitting_bf16_table_at_whole_workgroups() {
        assert_eq!(head_bf16_windows(262_144, None, 2, true), (vec![(0, 131_072), (131_072, 131_072)], 2));
        assert_eq!(head_bf16_windows(97, None, 2, true), (vec![(0, 64), (64, 33)], 2));
        // Too small to cut, one window a pass asked for, or the override off: the whole table.
        assert_eq!(head_bf16_windows(32, None, 2, true), (vec![(0, 32)], 2));
        assert_eq!(head_bf16_windows(97, None, 1, true), (vec![(0, 97)], 1));
        assert_eq!(head_bf16_windows(97, None, 2, false), (vec![(0, 97)], 2));
        // A table past one binding keeps its own windows.
        assert_eq!(head_bf16_windows(100, Some(vec![(0, 70), (70, 30)]), 2, true), (vec![(0, 64), (64, 36)], 2));
    }

    #[test]
    fn the_bf16_head_reads_two_windows_a_pass_cut_at_whole_workgroups() {
        let facts = |limit: u64| DeviceFacts {
            multiprocessors: 0,
            max_shared_bytes: 49_152,
            subgroup_size: 32,
            max_groups_per_dim: 65535,
            max_binding_bytes: limit,
            cuda_sm90a: false,
            cuda_clusters: false,
            wgsl_coopmat: false,
        };
        let plan = |kernel: &'static KernelSig, vocab: i32, hdim: i32, limit: u64| {
            let args = [P(0x1000), P(0x2000), P(0x3000), P(0x4000), I(1), I(vocab), I(hdim), F(0.0)];
            let args = if kernel.symbol == LM_HEAD_LOGITS_BF16.symbol { [&args[..3], &args[4..]].concat() } else { args.to_vec() };
            wgsl_lm_head_split(&PlanArgs::new(kernel, &args), &facts(limit)).unwrap()
        };
        // Gemma's 2.8 GB table under a 2 GiB binding: one pass over two
        // windows, the first cut at a multiple of 32 rows (row_windows gives 199728).
        let p = plan(&LM_HEAD_LOGITS_BF16, 262_144, 5376, 1 << 31).unwrap();
        assert_eq!(p.passes.len(), 1);
        let (first, second) = (199_712u64, 262_144 - 199_712u64);
        assert_eq!(first % WGSL_HEAD_ROWS_PER_GROUP, 0);
        assert_eq!(p.passes[0].pass.extra, [0, first as u32, 0, second as u32]);
        assert_eq!(p.passes[0].pass.grid, [8192, 1, 1]);
        let row = 2 * 5376;
        assert_eq!(
            p.passes[0].windows,
            vec![
                WgslWindow { arg: "table", offset: 0, bytes: first * row },
                WgslWindow { arg: "table", offset: first * row, bytes: second * row }
            ]
        );
        // A table that fits: one pass, the whole table bound twice, no second window's rows.
        let p = plan(&LM_HEAD_LOGITS_BF16, 1001, 136, 1 << 31).unwrap();
        assert_eq!((p.passes.len(), p.passes[0].pass.extra), (1, [0, 1001, 0, 0]));
        assert_eq!(p.passes[0].windows[0], p.passes[0].windows[1]);
        // Many windows: pairs, each pass's first window a multiple of 32 rows.
        let p = plan(&LM_HEAD_LOGITS_BF16, 1001, 136, 16 << 10).unwrap();
        assert_eq!(p.passes.len(), 16);
        assert!(p.passes.iter().all(|s| s.pass.extra[1] % 32 == 0 && s.pass.extra[1] + s.pass.extra[3] <= 64));
        assert_eq!(p.passes.iter().map(|s| (s.pass.extra[1] + s.pass.extra[3]) as u64).sum::<u64>(), 1001);
        // Fewer than 32 rows a binding: one window a pass, as row_windows cuts them.
        let p = plan(&LM_HEAD_LOGITS_BF16, 40, 5376, 16 << 10).unwrap();
        assert_eq!(p.passes.len(), 40);
        assert!(p.passes.iter().all(|s| s.pass.extra[1] == 1 && s.pass.extra[3] == 0));
        // The fp8 head keeps its plain plan when it fits, one window a pass past it.
        assert!(plan(&LM_HEAD_LOGITS_FP8, 262_144, 5376, 1 << 31).is_none());
        let p = plan(&LM_HEAD_LOGITS_FP8, 1001, 136, 16 << 10).unwrap();
        assert!(p.passes.iter().all(|s| s.windows.len() == 1 && s.pass.extra[3] == 0));
    }

    #[test]
    fn wgsl_argmax_spreads_short_batches_over_more_chunks() {
        assert_eq!(wgsl_argmax_vecs(32, 262_144), 4);
        assert_eq!(wgsl_argmax_vecs(16, 262_144), 2);
        assert_eq!(wgsl_argmax_vecs(8, 262_144), 1);
        assert_eq!(wgsl_argmax_vecs(1, 262_144), 1);
        assert_eq!(wgsl_argmax_vecs(1, 1), 1);
        let args = [P(0x1000), P(0x2000), P(0x3000), I(1), I(262_144), I(0), I(1)];
        let plan = wgsl_argmax_rows(
            &PlanArgs::new(&ARGMAX_ROWS, &args),
            &DeviceFacts {
                multiprocessors: 0,
                max_shared_bytes: 49_152,
                subgroup_size: 32,
                max_groups_per_dim: 65535,
                max_binding_bytes: 2 << 30,
                cuda_sm90a: false,
                cuda_clusters: false,
                wgsl_coopmat: false,
            },
        )
        .unwrap();
        assert_eq!((plan.passes[0].grid, plan.passes[0].consts.clone()), ([256, 1, 1], vec![("VECS", 1)]));
        assert_eq!(plan.workspace_bytes, 256 * 8);
    }

    #[test]
    fn wgsl_argmax_is_one_pass_while_the_rows_have_counters() {
        let plan = |rows, vocab, two| wgsl_argmax_plan(rows, vocab, None, two, &ARGMAX_ROWS).unwrap();
        let entries = |p: &WgslPlan| p.passes.iter().map(|s| s.entry).collect::<Vec<_>>();
        // The bench row: 16 rows of 128 chunks, a counter each.
        let p = plan(16, 262_144, false);
        assert_eq!((entries(&p), p.passes[0].grid, p.arrivals), (vec!["argmax_rows_once"], [128, 16, 1], 16));
        assert_eq!(p.workspace_bytes, 16 * 128 * 8);
        // One chunk a row: no counter is used, but the entry's binding is there.
        let p = plan(5000, 1000, false);
        assert_eq!((entries(&p), p.arrivals), (vec!["argmax_rows_once"], 1));
        // More rows of several chunks than counters, or forced: two passes, no counters.
        for p in [plan(WGSL_ARRIVAL_COUNTERS + 1, 1100, false), plan(16, 262_144, true)] {
            assert_eq!((entries(&p), p.arrivals), (vec!["argmax_rows", "argmax_rows_final"], 0));
        }
        assert_eq!(plan(WGSL_ARRIVAL_COUNTERS, 1100, false).arrivals, WGSL_ARRIVAL_COUNTERS);
    }
}
