//! Embedding gathers: rows of the token table into the residual stream.
use crate::norm::{norm_block, persistent_rows};
use crate::ops::{bf16s, i32_arg, region, require, saturating_product, scalar, words, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use crate::plan::{
    env_override, positive, row_slots, row_windows, CudaPlan, DeviceFacts, PlanArgs, WgslPass, WgslPlan, WgslSplitPass, WgslSplitPlan,
    WgslWindow,
};
use switchyard_core::codec::{bf16_round, bytes};
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, Region, Result};

declare_kernel! {
    /// `out[r, j] = bf16(bf16(e4m3(table[ids[r], j]) · row_scale[ids[r]]) · scale)`.
    ///
    /// Rounds twice: the dequantised row to bf16 (the table's own precision),
    /// then the product with the embedding scale (`sqrt(hidden)` for Gemma).
    /// An id outside `[0, vocab)` writes a row of bf16 NaN (0x7fc0) instead of reading
    /// outside the table. Shapes: out bf16 `[rows, h]`, table u8 `[vocab, h]`,
    /// row_scale f32 `[vocab]`, ids i32 `[rows]`; `h % 8 == 0`.
    EMBED_GATHER_FP8 = "embed"::"embed_gather_fp8"(
        A::output("out"), A::input("table"), A::input("row_scale"), A::input("ids"),
        A::i32("rows"), A::i32("h"), A::i32("vocab"), A::f32("scale"))
}

declare_kernel! {
    /// `out[r, j] = bf16(table[ids[r], j] · scale)` over a bf16 table; one
    /// rounding. An id outside `[0, vocab)` writes a NaN row. Shapes: out bf16
    /// `[rows, h]`, table bf16 `[vocab, h]`, ids i32 `[rows]`; `h` even.
    EMBED_GATHER_BF16 = "embed"::"embed_gather_bf16"(
        A::output("out"), A::input("table"), A::input("ids"),
        A::i32("rows"), A::i32("h"), A::i32("vocab"), A::f32("scale"))
}

declare_kernel! {
    /// `out[r, :] = src[idx[r], :]`, bit-exact copy of bf16 rows. An index
    /// outside `[0, n_src)` writes a NaN row. Shapes: out bf16 `[rows, h]`,
    /// src bf16 `[n_src, h]`, idx i32 `[rows]`; `h` even.
    GATHER_ROWS_BF16 = "embed"::"gather_rows_bf16"(
        A::output("out"), A::input("src"), A::input("idx"), A::i32("rows"), A::i32("h"), A::i32("n_src"))
}

/// CUDA: a persistent grid ([`persistent_rows`]) of [`norm_block`]`(h)`
/// threads, sized like a norm row: the gathers stream a row of `h` bf16 the
/// same way. Each block copies rows `b, b + grid, ...` with the next row's
/// loads in flight while it stores the current one (embed.cu).
///
/// H200 numbers for the bench rows (rows 4096, h 5376): 96 threads x 7
/// chunks of 8 elements, 5 blocks an SM at the 128-register cap, grid 660 =
/// one wave, 6.2 rows a block; bytes in flight an SM: 5 blocks x 1-2 rows x
/// 10.5 KiB (bf16; 5.25 KiB of fp8 codes) ~ 50-105 KiB.
fn cuda_row_blocks(a: &PlanArgs, f: &DeviceFacts) -> Result<CudaPlan> {
    let threads = norm_block(a.u32("h")? as usize);
    Ok(CudaPlan::single(a.kernel, [persistent_rows(positive(a, "rows")?, threads, f), 1, 1], [threads, 1, 1]))
}

/// A gather's table: its argument, rows and bytes per row.
fn gather_table(a: &PlanArgs) -> Result<(&'static str, u64, u64)> {
    let h = a.u32("h")? as u64;
    Ok(match a.kernel.symbol {
        "embed_gather_fp8" => ("table", a.u32("vocab")? as u64, h),
        "gather_rows_bf16" => ("src", a.u32("n_src")? as u64, 2 * h),
        _ => ("table", a.u32("vocab")? as u64, 2 * h),
    })
}

/// Output rows a workgroup of the WGSL gathers (the shaders' `RPG`, at most
/// their `MAX_RPG` of 16): two from 2048 rows, so a workgroup keeps the next
/// row's loads in flight while it stores one, else one. Measured on the H200
/// (GPU time, rows 4096, h 5376, one process each, no table fill before,
/// benchmarks/2026-12-02-wgpu-embed-h200): embed_gather_bf16 over the 2.8 GB
/// table 0.0350 / 0.0349 / 0.0339 / 0.0340 ms at RPG 1 / 2 / 4 / 8,
/// embed_gather_fp8 0.0437 / 0.0439 / 0.0443 / 0.0473. The seventh
/// session's "4 is 3x slower" came from cases measured after the 2.8 GB
/// table's host fill in the same process, where every case measures 3-4x
/// slow (gather_rows_bf16 0.0857 there, 0.0300 without the fill), not from
/// RPG. `SWITCHYARD_WGSL_GATHER_RPG=1..16`
/// overrides it (read once a process) to measure other values on a device.
fn gather_rows_per_group(rows: u32) -> u32 {
    static OVERRIDE: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let forced = env_override(&OVERRIDE, "SWITCHYARD_WGSL_GATHER_RPG", |v| (1..=16).contains(&v));
    forced.unwrap_or(if rows >= 2048 { 2 } else { 1 })
}

/// A gather's dispatch over table rows `[first, first + count + count_b)`:
/// workgroups of 256 running the kernel's entry ([`wgsl_entry`]) on
/// [`gather_rows_per_group`] output rows each (at most [`FP8_LUT_ROWS`] for
/// the fp8 LUT entry); x0 = first, x1 = count (rows of the first window),
/// x2 = 1 when this pass writes the NaN rows of out-of-range ids, x3 =
/// count_b (rows of the second window, the bf16 gathers only; 0 for the fp8
/// embed).
fn gather_pass(a: &PlanArgs, first: u64, count: u64, count_b: u64, writes_nan: bool) -> Result<WgslPass> {
    let rows = positive(a, "rows")?;
    let entry = wgsl_entry(a);
    let cap = if entry == FP8_LUT_ENTRY { FP8_LUT_ROWS } else { u32::MAX };
    let rpg = gather_rows_per_group(rows).min(cap);
    let mut consts = vec![("RPG", rpg)];
    if a.kernel.symbol != "embed_gather_fp8" {
        // The bf16 gathers' fast-path slots (gather_rows.wgsli's `SLOTS`), fitted to the row.
        consts.push(("SLOTS", row_slots(a.u32("h")?)));
    }
    Ok(WgslPass { entry, grid: [rows.div_ceil(rpg), 1, 1], consts, extra: [first as u32, count as u32, writes_nan as u32, count_b as u32] })
}

/// Table windows one pass of the bf16 gathers reads: two (gather_rows.wgsli),
/// so the 2.8 GB Gemma table (two windows under a 2 GiB binding) is one
/// pass over the output rows instead of two. `SWITCHYARD_WGSL_GATHER_WINDOWS=1`
/// (read once a process) runs one window a pass, the plan before, to measure.
fn gather_windows_per_pass() -> usize {
    static OVERRIDE: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    match env_override(&OVERRIDE, "SWITCHYARD_WGSL_GATHER_WINDOWS", |v| v == 1) {
        Some(_) => 1,
        None => 2,
    }
}

/// The fp8 embed's LUT entry: the workgroup's rows as one run of 16-code
/// units, each row's 256 possible outputs precomputed in workgroup memory.
const FP8_LUT_ENTRY: &str = "embed_gather_fp8_lut";
/// Row tables one `embed_gather_fp8_lut` workgroup holds (the shader's `LUT_ROWS`).
const FP8_LUT_ROWS: u32 = 8;

/// The WGSL entry of a gather: the kernel's own, except the fp8 embed's,
/// which is [`FP8_LUT_ENTRY`] or with `SWITCHYARD_WGSL_FP8_EMBED=row` (read
/// once a process, for an A/B) `embed_gather_fp8`, a row at a time with the
/// per-code decode. On the H200: 0.0345 / 0.0348 ms against 0.0442 / 0.0437
/// at 4096 rows of 5376 (BENCHMARKS.md, eighth session).
fn wgsl_entry(a: &PlanArgs) -> &'static str {
    static ROW: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let row = *ROW.get_or_init(|| std::env::var("SWITCHYARD_WGSL_FP8_EMBED").is_ok_and(|v| v.trim() == "row"));
    match a.kernel.symbol {
        "embed_gather_fp8" if !row => FP8_LUT_ENTRY,
        symbol => symbol,
    }
}

/// WGSL: one pass over the whole table. The bf16 gathers never run it:
/// their shader binds the table twice, which only the window plan
/// ([`wgsl_row_groups_split`]) sets up, for every table size.
fn wgsl_row_groups(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    let (_, rows, _) = gather_table(a)?;
    Ok(WgslPlan { passes: vec![gather_pass(a, 0, rows, 0, true)?], workspace_bytes: 0, arrivals: 0 })
}

/// WGSL through windows of the table. The fp8 embed, only past one binding:
/// one pass per window ([`row_windows`]), each over every output row; a row
/// whose id falls in the window is copied by that pass, and the first pass
/// writes the NaN rows. The bf16 gathers, always: a pass per pair of windows
/// (one window, the whole table, when it fits a binding), each binding the
/// table twice; a pass with one window binds it again as the empty second.
fn wgsl_row_groups_split(a: &PlanArgs, f: &DeviceFacts) -> Result<Option<WgslSplitPlan>> {
    let (arg, rows, row_bytes) = gather_table(a)?;
    let windows = row_windows(a.kernel, arg, rows, row_bytes, f.max_binding_bytes)?;
    let window = |(first, count): (u64, u64)| WgslWindow { arg, offset: first * row_bytes, bytes: count * row_bytes };
    if a.kernel.symbol == "embed_gather_fp8" {
        let Some(windows) = windows else { return Ok(None) };
        let passes = windows
            .iter()
            .enumerate()
            .map(|(k, &(first, count))| {
                Ok(WgslSplitPass { pass: gather_pass(a, first, count, 0, k == 0)?, windows: vec![window((first, count))] })
            })
            .collect::<Result<_>>()?;
        return Ok(Some(WgslSplitPlan { passes, workspace_bytes: 0 }));
    }
    let windows = windows.unwrap_or_else(|| vec![(0, rows)]);
    let passes = windows
        .chunks(gather_windows_per_pass())
        .enumerate()
        .map(|(k, pair)| {
            let (first, count) = pair[0];
            let (second, count_b) = pair.get(1).copied().map_or(((first, count), 0), |w| (w, w.1));
            Ok(WgslSplitPass {
                pass: gather_pass(a, first, count, count_b, k == 0)?,
                windows: vec![window((first, count)), window(second)],
            })
        })
        .collect::<Result<_>>()?;
    Ok(Some(WgslSplitPlan { passes, workspace_bytes: 0 }))
}

cuda_plan!(EMBED_GATHER_FP8 => cuda_row_blocks);
cuda_plan!(EMBED_GATHER_BF16 => cuda_row_blocks);
cuda_plan!(GATHER_ROWS_BF16 => cuda_row_blocks);
wgsl_plan!(EMBED_GATHER_FP8, "embed/embed_gather_fp8.wgsl" => wgsl_row_groups, split => wgsl_row_groups_split);
wgsl_plan!(EMBED_GATHER_BF16, "embed/embed_gather_bf16.wgsl" => wgsl_row_groups, split => wgsl_row_groups_split);
wgsl_plan!(GATHER_ROWS_BF16, "embed/gather_rows_bf16.wgsl" => wgsl_row_groups, split => wgsl_row_groups_split);

impl Ops {
    /// Embedding lookup from the fp8 per-row table. See [`EMBED_GATHER_FP8`].
    #[allow(clippy::too_many_arguments)]
    pub fn embed_gather_fp8(
        &self,
        out: Region,
        table: Region,
        row_scale: Region,
        ids: Region,
        rows: usize,
        vocab: usize,
        h: usize,
        scale: f32,
    ) -> Result<()> {
        let k = EMBED_GATHER_FP8.symbol;
        require(h > 0 && h % 8 == 0, k, "h", || format!("h = {h} must be a positive multiple of 8"))?;
        require(rows > 0, k, "rows", || "rows must be > 0".into())?;
        self.launch(
            &EMBED_GATHER_FP8,
            &[
                region(out, bf16s(saturating_product(&[rows, h]))),
                region(table, saturating_product(&[vocab, h])),
                region(row_scale, words(vocab)),
                region(ids, words(rows)),
                scalar(I(i32_arg(k, "rows", rows)?)),
                scalar(I(i32_arg(k, "h", h)?)),
                scalar(I(i32_arg(k, "vocab", vocab)?)),
                scalar(F(scale)),
            ],
        )
    }

    /// Scaled embedding lookup from a bf16 table. See [`EMBED_GATHER_BF16`].
    #[allow(clippy::too_many_arguments)]
    pub fn embed_gather_bf16(
        &self,
        out: Region,
        table: Region,
        ids: Region,
        rows: usize,
        vocab: usize,
        h: usize,
        scale: f32,
    ) -> Result<()> {
        let k = EMBED_GATHER_BF16.symbol;
        require(h > 0 && h % 2 == 0, k, "h", || format!("h = {h} must be positive and even"))?;
        require(rows > 0, k, "rows", || "rows must be > 0".into())?;
        self.launch(
            &EMBED_GATHER_BF16,
            &[
                region(out, bf16s(saturating_product(&[rows, h]))),
                region(table, bf16s(saturating_product(&[vocab, h]))),
                region(ids, words(rows)),
                scalar(I(i32_arg(k, "rows", rows)?)),
                scalar(I(i32_arg(k, "h", h)?)),
                scalar(I(i32_arg(k, "vocab", vocab)?)),
                scalar(F(scale)),
            ],
        )
    }

    /// Row gather. See [`GATHER_ROWS_BF16`].
    pub fn gather_rows_bf16(&self, out: Region, src: Region, idx: Region, rows: usize, n_src: usize, h: usize) -> Result<()> {
        let k = GATHER_ROWS_BF16.symbol;
        require(h > 0 && h % 2 == 0, k, "h", || format!("h = {h} must be positive and even"))?;
        require(rows > 0, k, "rows", || "rows must be > 0".into())?;
        self.launch(
            &GATHER_ROWS_BF16,
            &[
                region(out, bf16s(saturating_product(&[rows, h]))),
                region(src, bf16s(saturating_product(&[n_src, h]))),
                region(idx, words(rows)),
                scalar(I(i32_arg(k, "rows", rows)?)),
                scalar(I(i32_arg(k, "h", h)?)),
                scalar(I(i32_arg(k, "n_src", n_src)?)),
            ],
        )
    }
}

fn ids_with_bad(g: &mut Gen, rows: usize, vocab: usize) -> Vec<u8> {
    let (mut ids, _) = g.i32(rows, 0, vocab as i32);
    // One out-of-range id per case when there is room: the NaN-row contract is part of parity.
    if rows > 2 {
        ids[rows / 2] = vocab as i32 + 3;
    }
    bytes::i32_bytes(&ids)
}

// The last two shapes of each kernel have more rows than two waves of the
// CUDA persistent grid on an H200 (660 blocks at h 5376, 2112 at h 64), so
// blocks run the row loop's full two-row trip and then part of another.
fn fp8_cases(g: &mut Gen) -> Vec<Case> {
    let mut cases: Vec<Case> = [(1, 8, 16), (7, 40, 200), (33, 136, 97), (4500, 64, 300), (1400, 5376, 40)]
        .into_iter()
        .map(|(rows, h, vocab)| {
            let (codes, scales, _) = g.fp8_table(vocab, h);
            fp8_case(g, rows, h, vocab, codes, scales, "")
        })
        .collect();
    // Every code but the two NaNs, subnormals and ±448 included, on the
    // vector path (h % 16 == 0): quantised random tables rarely hold the
    // extremes, and the WGSL vector path decodes codes its own way.
    let (rows, h, vocab) = (24, 64, 8);
    let codes: Vec<u8> = (0..vocab * h).map(|i| (0u8..=255).filter(|c| c & 0x7f != 0x7f).nth((i * 37) % 254).unwrap()).collect();
    let (scales, _) = g.f32(vocab, 0.001, 0.01);
    cases.push(fp8_case(g, rows, h, vocab, codes, scales, " every code"));
    // Past 8192 codes a row: the row-at-a-time entry's word loop, and at RPG
    // 2 (from 2048 rows) a second chunk of units in the LUT entry (2 x 513
    // against a chunk of 1024), with a last workgroup of one row.
    let (rows, h, vocab) = (2049, 8208, 12);
    let (codes, scales, _) = g.fp8_table(vocab, h);
    cases.push(fp8_case(g, rows, h, vocab, codes, scales, ""));
    cases
}

fn fp8_case(g: &mut Gen, rows: usize, h: usize, vocab: usize, codes: Vec<u8>, scales: Vec<f32>, note: &str) -> Case {
    let scale = (h as f32).sqrt();
    Case {
        kernel: &EMBED_GATHER_FP8,
        label: format!("rows={rows} h={h} vocab={vocab}{note}"),
        buffers: vec![
            Buffer::output("out", DType::BF16, rows * h, Tolerance::Bf16Ulp(1)),
            Buffer::input("table", codes),
            Buffer::input("row_scale", bytes::f32_bytes(&scales)),
            Buffer::input("ids", ids_with_bad(g, rows, vocab)),
        ],
        run: Box::new(move |o, a| o.embed_gather_fp8(a[0], a[1], a[2], a[3], rows, vocab, h, scale)),
    }
}

fn bf16_cases(g: &mut Gen) -> Vec<Case> {
    [(1, 2, 5), (9, 42, 61), (20, 130, 300), (4500, 64, 300), (1400, 5376, 40)]
        .into_iter()
        .map(|(rows, h, vocab)| {
            let (_, table) = g.bf16(vocab * h, 0.01, 2.0);
            let scale = bf16_round((h as f32).sqrt());
            Case {
                kernel: &EMBED_GATHER_BF16,
                label: format!("rows={rows} h={h} vocab={vocab}"),
                buffers: vec![
                    Buffer::output("out", DType::BF16, rows * h, Tolerance::Bf16Ulp(1)),
                    Buffer::input("table", table),
                    Buffer::input("ids", ids_with_bad(g, rows, vocab)),
                ],
                run: Box::new(move |o, a| o.embed_gather_bf16(a[0], a[1], a[2], rows, vocab, h, scale)),
            }
        })
        .collect()
}

fn gather_cases(g: &mut Gen) -> Vec<Case> {
    // h 4096: two fast-path slots of the WGSL gathers (their `SLOTS`).
    [(1, 2, 3), (11, 38, 17), (64, 256, 64), (40, 4096, 50), (4500, 64, 300), (1400, 5376, 40)]
        .into_iter()
        .map(|(rows, h, n_src)| {
            let (_, src) = g.bf16(n_src * h, 0.01, 4.0);
            Case {
                kernel: &GATHER_ROWS_BF16,
                label: format!("rows={rows} h={h} n_src={n_src}"),
                buffers: vec![
                    Buffer::output("out", DType::BF16, rows * h, Tolerance::Exact),
                    Buffer::input("src", src),
                    Buffer::input("idx", ids_with_bad(g, rows, n_src)),
                ],
                run: Box::new(move |o, a| o.gather_rows_bf16(a[0], a[1], a[2], rows, n_src, h)),
            }
        })
        .collect()
}

inventory::submit! { CaseSet { kernel: &EMBED_GATHER_FP8, cases: fp8_cases } }
inventory::submit! { CaseSet { kernel: &EMBED_GATHER_BF16, cases: bf16_cases } }
inventory::submit! { CaseSet { kernel: &GATHER_ROWS_BF16, cases: gather_cases } }

#[cfg(test)]
mod tests {
    use crate::plan::row_slots;

    #[test]
    fn gather_slots_cover_the_row_and_no_more() {
        for (h, slots) in [(2, 1), (2048, 1), (2056, 2), (4096, 2), (5376, 3), (8192, 4), (8208, 4)] {
            assert_eq!(row_slots(h), slots, "h {h}");
        }
    }
}
