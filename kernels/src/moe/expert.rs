//! The Gemma 4 MoE branch beyond routing bookkeeping: the router (norm,
//! softmax, top-k), the gather into expert order, grouped expert GEMMs (bf16
//! and NVFP4 weights), the gated activation, and the weighted combine back
//! into token order. Everything is deterministic: no atomics on values.
use crate::gemm::w4a16::random_weight;
use crate::gemm::REORDERED_NMSE;
use crate::ops::{bf16s, i32_arg, region, require, require_eps, saturating_product, scalar, words, Ops};
use crate::parity::{mirror_halves, Buffer, Case, CaseSet, Gen};
use crate::plan::{
    env_override, groups, row_windows, CudaPass, CudaPlan, CudaTensorMaps, DeviceFacts, PlanArgs, TensorMap2d, WgslPass, WgslPlan,
    WgslSplitPass, WgslSplitPlan, WgslWindow,
};
use switchyard_core::codec::{bytes, nvfp4};
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, Region, Result};

/// Largest top-k the router kernel takes.
pub const MAX_TOP_K: usize = 32;
/// Largest expert count the router kernel takes.
pub const MAX_EXPERTS: usize = 1024;

declare_kernel! {
    /// Router input: `out[r, j] = bf16(x[r, j] · inv_r · scale[j] · root)`,
    /// `inv_r = (mean(x²) + eps)^-0.5` (the RMSNorm without weight), `scale`
    /// bf16 `[dim]` (the router's `scale`), `root = hidden^-0.5`; f32 math, one
    /// rounding. Shapes: out, x bf16 `[rows, dim]`. dim even.
    ROUTER_NORM_BF16 = "moe_expert"::"router_norm_bf16"(
        A::output("out"), A::input("x"), A::input("scale"), A::i32("rows"), A::i32("dim"), A::f32("eps"), A::f32("root"))
}

declare_kernel! {
    /// Per row of bf16 router logits `[rows, e]`: `p = softmax(logits)` in f32
    /// (max-subtracted, sums in index order); the `k` largest `p` (lowest
    /// index on ties), in descending order, into `topk_ids` i32 `[rows, k]`;
    /// weights `w = p / Σ_topk p` times `per_expert_scale[id]` (f32 `[e]`) into
    /// `topk_w` f32 `[rows, k]`. e ≤ 1024, k ≤ min(e, 32).
    MOE_ROUTER_TOPK = "moe_expert"::"moe_router_topk"(
        A::output("topk_ids"), A::output("topk_w"), A::input("logits"), A::input("per_expert_scale"),
        A::i32("rows"), A::i32("e"), A::i32("k"))
}

/// Most rows [`MOE_ROUTE_DECODE`] takes (decode batches).
pub const ROUTE_DECODE_MAX_ROWS: usize = 16;
/// Most experts [`MOE_ROUTE_DECODE`] takes.
pub const ROUTE_DECODE_MAX_EXPERTS: usize = 256;
/// Longest router input [`MOE_ROUTE_DECODE`] takes: on CUDA the rows and the
/// expert's router row are staged whole in shared memory as f32
/// (17 · 3108 · 4 bytes at 16 rows, inside the H100/H200's 227 KiB).
pub const ROUTE_DECODE_MAX_DIM: usize = 3072;

declare_kernel! {
    /// The whole decode routing in one kernel, equal to
    /// [`ROUTER_NORM_BF16`] → `dense_gemm_router` (the router order) →
    /// [`MOE_ROUTER_TOPK`] → `moe_count` / `moe_offsets` / `moe_scatter` on
    /// the same inputs: `logits` bf16 `[rows, e]` are the router GEMM's
    /// output `bf16(router_dot(rn[r, ..], router_w[x, ..]))`
    /// ([`crate::gemm::router_dot`]: 32 partials of 8-wide k chunks, a
    /// pairwise tree, separate f32 multiply and add), where `rn` is the
    /// router norm's bf16 output (eps, root as there; its Σx² order free);
    /// `topk_ids` i32 / `topk_w` f32 `[rows, k]` the top-k contract;
    /// `offsets` i32 `[e+1]` the exclusive prefix sum of the pairs per
    /// expert (`offsets[e] = rows·k`); `pair_of_slot` / `slot_of_pair` i32
    /// `[rows·k]` the scatter contract (slots in increasing pair order within
    /// an expert). Shapes: x bf16 `[rows, dim]`, scale bf16 `[dim]`,
    /// router_w bf16 `[e, dim]`, per_expert_scale f32 `[e]`. Limits:
    /// rows ≤ [`ROUTE_DECODE_MAX_ROWS`], e even and ≤
    /// [`ROUTE_DECODE_MAX_EXPERTS`], k ≤ min(e, 32), dim % 8 == 0 and ≤
    /// [`ROUTE_DECODE_MAX_DIM`], x, scale and router_w 16-byte aligned.
    MOE_ROUTE_DECODE = "moe_expert"::"moe_route_decode"(
        A::output("topk_ids"), A::output("topk_w"), A::output("offsets"), A::output("pair_of_slot"), A::output("slot_of_pair"),
        A::output("logits"), A::input("x"), A::input("scale"), A::input("router_w"), A::input("per_expert_scale"),
        A::i32("rows"), A::i32("dim"), A::i32("e"), A::i32("k"), A::f32("eps"), A::f32("root"))
}

declare_kernel! {
    /// Gathers token rows into expert order: `out[s] = x[pair_of_slot[s] / k]`
    /// for slots with a pair, a zero row for slots with `pair_of_slot = −1`
    /// (past the last valid pair). A token index outside `[0, rows)` gives a
    /// NaN row. Shapes: out bf16 `[n, h]`, x `[rows, h]`. h even.
    MOE_GATHER_BF16 = "moe_expert"::"moe_gather_bf16"(
        A::output("out"), A::input("x"), A::input("pair_of_slot"), A::i32("n"), A::i32("k"), A::i32("h"), A::i32("rows"))
}

declare_kernel! {
    /// Grouped GEMM over expert segments: rows `s` in `[offsets[x], offsets[x+1])`
    /// use expert `x`: `out[s, :] = bf16(Σₖ a[s, k] · w[x, :, k])` (f32
    /// accumulation, K order free: NMSE ≤ 1e-6); rows at or past
    /// `offsets[e]` are zero. Shapes: out bf16 `[n, N]`, a `[n, K]`, w bf16
    /// `[e, N, K]` (HF's `gate_up_proj` / `down_proj` layout), offsets i32
    /// `[e+1]`. K % 8 == 0, N even.
    MOE_GROUPED_GEMM_BF16 = "moe_expert"::"moe_grouped_gemm_bf16"(
        A::output("out"), A::input("a"), A::input("w"), A::input("offsets"),
        A::i32("n"), A::i32("e"), A::i32("big_n"), A::i32("big_k"))
}

declare_kernel! {
    /// [`MOE_GROUPED_GEMM_BF16`] with NVFP4 expert weights, each expert in the
    /// K-major layout of the W4A16 kernels (row stride N): `wq` u8
    /// `[e, K/2, N]`, `ws` u8 `[e, K/16, N]`, `scale2` f32 `[e]`;
    /// `out[s, n] = bf16(scale2[x] · Σₖ a[s, k] · e2m1 · e4m3)`. N % 16 == 0,
    /// K % 16 == 0; `wq` and `ws` 16-byte aligned.
    MOE_GROUPED_W4A16 = "moe_expert"::"moe_grouped_w4a16"(
        A::output("out"), A::input("a"), A::input("wq"), A::input("ws"), A::input("scale2"), A::input("offsets"),
        A::i32("n"), A::i32("e"), A::i32("big_n"), A::i32("big_k"))
}

declare_kernel! {
    /// The decode gate_up projection with the gated GELU in its epilogue:
    /// for rows `s` in expert x's segment `[offsets[x], offsets[x+1])`,
    /// `g = bf16(Σₖ a[s, k] · w[x, i, k])`, `u = bf16(Σₖ a[s, k] · w[x, inter + i, k])`
    /// ([`MOE_GROUPED_GEMM_BF16`]'s sums, K order free) and
    /// `out[s, i] = bf16(bf16(gelu_tanh(g)) · u)` ([`GELU_MUL_BF16`]'s
    /// activation); rows outside every segment are zero. Shapes: out bf16
    /// `[n, inter]`, a `[n, K]`, w bf16 `[e, 2·inter, K]`, offsets i32
    /// `[e+1]`. n ≤ 256 (decode slot counts), K % 8 == 0, inter even.
    MOE_GATE_UP_GELU_BF16 = "moe_expert"::"moe_gate_up_gelu_bf16"(
        A::output("out"), A::input("a"), A::input("w"), A::input("offsets"),
        A::i32("n"), A::i32("e"), A::i32("inter"), A::i32("big_k"))
}

declare_kernel! {
    /// Gated activation: with `gate = gu[r, i]`, `up = gu[r, inter + i]`,
    /// `out[r, i] = bf16(bf16(gelu_tanh(gate)) · up)`, where
    /// `gelu_tanh(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` in f32
    /// (HF's `gelu_pytorch_tanh`). Shapes: gu bf16 `[rows, 2·inter]`, out
    /// `[rows, inter]`. inter even.
    GELU_MUL_BF16 = "moe_expert"::"gelu_mul_bf16"(A::output("out"), A::input("gu"), A::i32("rows"), A::i32("inter"))
}

declare_kernel! {
    /// Weighted combine into token order: `out[t] = bf16(Σ_j topk_w[t·k + j] ·
    /// y[slot_of_pair[t·k + j]])`, summed in j order in f32; pairs with slot
    /// −1 are skipped, a slot outside `[0, n)` gives a NaN row. Shapes: out
    /// bf16 `[rows, h]`, y `[n, h]`, topk_w f32 `[rows·k]`.
    MOE_COMBINE_BF16 = "moe_rows"::"moe_combine_bf16"(
        A::output("out"), A::input("y"), A::input("slot_of_pair"), A::input("topk_w"),
        A::i32("rows"), A::i32("k"), A::i32("h"), A::i32("n"))
}

/// CUDA: one 256-thread block per row (router norm).
fn cuda_row_blocks(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    Ok(CudaPlan::single(a.kernel, [a.u32("rows")?, 1, 1], [256, 1, 1]))
}

/// Grid (rows, Y), block 256: the Y blocks of a row take its `pairs` bf16
/// pairs in runs of 256 (pair 256·y + thread, + 256·Y, ...), Y at most
/// `max_split`, so a decode row is spread over Y SMs instead of walked by one
/// block.
fn cuda_row_runs(a: &PlanArgs, pairs: u64, max_split: u64) -> Result<CudaPlan> {
    let split = pairs.div_ceil(256).clamp(1, max_split) as u32;
    Ok(CudaPlan::single(a.kernel, [a.u32("rows")?, split, 1], [256, 1, 1]))
}

/// Most CUDA blocks one combined row is spread over.
const CUDA_COMBINE_MAX_SPLIT: u64 = 16;

/// CUDA combine: [`cuda_row_runs`] over the h / 2 pairs. One block walking a
/// whole decode row (1408 pairs at hidden 2816, each the sum of k = 8 expert
/// rows) took 9.3 us on the H200 (ncu); spread over 6 SMs each thread loads
/// its k rows once.
fn cuda_moe_combine(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    cuda_row_runs(a, u64::from(a.u32("h")?) / 2, CUDA_COMBINE_MAX_SPLIT)
}

/// Most CUDA blocks one gated-activation row is spread over.
const CUDA_GELU_MAX_SPLIT: u64 = 64;

/// CUDA gated GELU: [`cuda_row_runs`] over the inter / 2 output pairs. One
/// block a row took 11.9 us a launch on the H200 at the NVFP4 decode's
/// inter 10240 (ncu): 20 runs of 256 pairs, one pass each.
fn cuda_gelu_mul(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    cuda_row_runs(a, u64::from(a.u32("inter")?) / 2, CUDA_GELU_MAX_SPLIT)
}

/// WGSL: one workgroup per row (each shader's fixed size).
fn wgsl_row_groups(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    Ok(WgslPlan::single(a.kernel, [a.u32("rows")?, 1, 1]))
}

/// One warp per row: the top-k selection is warp shuffles over the row's
/// probabilities in shared memory.
fn cuda_moe_router_topk(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    Ok(CudaPlan::single(a.kernel, [a.u32("rows")?, 1, 1], [32, 1, 1]))
}

/// One block per slot.
fn cuda_moe_gather(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    Ok(CudaPlan::single(a.kernel, [a.u32("n")?, 1, 1], [256, 1, 1]))
}

/// Slots per `moe_gather_bf16` workgroup (`SLOTS` in moe_gather_bf16.wgsl).
const WGSL_GATHER_SLOTS: u64 = 8;

/// Several slots per workgroup: short rows still fill it, and long slot
/// lists need fewer workgroups (a 1-D grid folds only once).
fn wgsl_moe_gather(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    Ok(WgslPlan::single(a.kernel, [groups(a.kernel, a.u32("n")? as u64, WGSL_GATHER_SLOTS)?, 1, 1]))
}

/// Output tile of the grouped GEMMs: 16 rows by 64 columns (four warps of
/// 16 columns on CUDA; `TM`, `TN` in grouped_gemm.wgsli).
const GROUPED_TILE_ROWS: u64 = 16;
const GROUPED_TILE_COLS: u64 = 64;

/// (column tiles, row tiles) of a grouped GEMM launch.
fn grouped_tiles(a: &PlanArgs) -> Result<(u32, u32)> {
    Ok((groups(a.kernel, a.u32("big_n")? as u64, GROUPED_TILE_COLS)?, groups(a.kernel, a.u32("n")? as u64, GROUPED_TILE_ROWS)?))
}

/// Column tiles on x, row tiles on y; four warps of 128 threads per tile.
fn cuda_moe_grouped(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    let (cols, rows) = grouped_tiles(a)?;
    Ok(CudaPlan::single(a.kernel, [cols, rows, 1], [128, 1, 1]))
}

/// Row tiles on x, the dimension that folds (n = tokens · top-k can be large).
fn wgsl_moe_grouped(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    let (cols, rows) = grouped_tiles(a)?;
    whole_expert_window(a, WgslPlan::single(a.kernel, [rows, cols, 1]))
}

/// The grouped expert kernels' window of experts, `[x0, x1)` in every
/// pass's extras (segments.wgsli): the whole `[0, e)` where the weights fit
/// one storage binding.
fn whole_expert_window(a: &PlanArgs, mut plan: WgslPlan) -> Result<WgslPlan> {
    let e = a.u32("e")?;
    for pass in &mut plan.passes {
        pass.extra[..2].copy_from_slice(&[0, e]);
    }
    Ok(plan)
}

/// A grouped expert kernel past one storage binding: its plan once per
/// window of whole experts ([`row_windows`] over the `e` experts of the
/// first of `weights`, `(argument, bytes an expert)`), each pass binding
/// only that window of every weight argument and computing only its
/// experts' rows; `None` where the weights fit one binding.
fn expert_windows(a: &PlanArgs, f: &DeviceFacts, plan: WgslPlan, weights: &[(&'static str, u64)]) -> Result<Option<WgslSplitPlan>> {
    let e = u64::from(a.u32("e")?);
    let (arg, bytes) = weights[0];
    let Some(windows) = row_windows(a.kernel, arg, e, bytes, f.max_binding_bytes)? else { return Ok(None) };
    let mut passes = Vec::with_capacity(windows.len() * plan.passes.len());
    for (first, count) in windows {
        for pass in &plan.passes {
            let mut pass = pass.clone();
            pass.extra[..2].copy_from_slice(&[first as u32, (first + count) as u32]);
            let windows = weights.iter().map(|&(arg, b)| WgslWindow { arg, offset: first * b, bytes: count * b }).collect();
            passes.push(WgslSplitPass { pass, windows });
        }
    }
    Ok(Some(WgslSplitPlan { passes, workspace_bytes: plan.workspace_bytes }))
}

fn wgsl_moe_grouped_bf16_split(a: &PlanArgs, f: &DeviceFacts) -> Result<Option<WgslSplitPlan>> {
    let expert = u64::from(a.u32("big_n")?) * u64::from(a.u32("big_k")?) * 2;
    expert_windows(a, f, wgsl_moe_grouped_bf16(a, f)?, &[("w", expert)])
}

fn wgsl_moe_gate_up_gelu_split(a: &PlanArgs, f: &DeviceFacts) -> Result<Option<WgslSplitPlan>> {
    let expert = 2 * u64::from(a.u32("inter")?) * u64::from(a.u32("big_k")?) * 2;
    expert_windows(a, f, wgsl_moe_gate_up_gelu(a, f)?, &[("w", expert)])
}

/// NVFP4 experts: the codes (K/2 · N bytes an expert) and the block scales
/// (K/16 · N) in the same windows of experts.
fn wgsl_moe_grouped_w4a16_split(a: &PlanArgs, f: &DeviceFacts) -> Result<Option<WgslSplitPlan>> {
    let (n, k) = (u64::from(a.u32("big_n")?), u64::from(a.u32("big_k")?));
    expert_windows(a, f, wgsl_moe_grouped(a, f)?, &[("wq", k / 2 * n), ("ws", k / 16 * n)])
}

/// Most slots the bf16 grouped GEMM runs as segment GEMVs: decode
/// (16 tokens · top-8 = 128 slots) and a little past it.
const SEGMENT_GEMV_MAX_SLOTS: u32 = 256;
/// Weight rows per block of the segment GEMV (`MOE_SEG_COLS` in moe_expert.cu,
/// `SEG_COLS` in moe_grouped_gemm_bf16.wgsl).
const SEGMENT_GEMV_COLS: u64 = 32;

/// Fewest slots that take the Hopper plan of [`MOE_GROUPED_GEMM_BF16`]
/// (prefill: 512 slots are 64 tokens at top-8), as the dense GEMM's M ≥ 512.
pub const GROUPED_WGMMA_MIN_SLOTS: u32 = 512;
/// Most experts the Hopper plan takes (its tile list lives in shared memory).
const GROUPED_WGMMA_MAX_EXPERTS: u32 = 1024;
/// The wgmma entries of `moe_sm90.cu`: (entry, columns per tile BN, ring
/// stages, ping-pong). 176 fits the gate_up width 1408 = 8 · 176 and the
/// down width 2816 = 16 · 176 exactly: the ping-pong kernel, each tile on
/// one consumer warpgroup (176 accumulators a thread cap BN). 192 and 256 are
/// the cooperative kernel (both warpgroups on every tile), for widths that
/// 176 pads more. In one H200 call the ping-pong kernel beat the
/// cooperative one at both shapes (gate_up 536–563 TFLOP/s against 517 at
/// 176 columns, down 483–494 against 465 at 256); the cooperative
/// 176-column entry was withdrawn.
const GROUPED_WGMMA_ENTRIES: [(&str, u32, u32, bool); 3] = [
    ("moe_sm90::moe_grouped_gemm_wgmma_n256", 256, 4, false),
    ("moe_sm90::moe_grouped_gemm_wgmma_n192", 192, 5, false),
    ("moe_sm90::moe_grouped_gemm_wgmma_pp_n176", 176, 5, true),
];
/// Rows per tile (two m64 row blocks), and K per ring stage.
const GROUPED_WGMMA_BM: u32 = 128;
const GROUPED_WGMMA_BK: u32 = 64;
/// Epilogue staging: 8 consumer warps × 16 rows × 72 bf16.
const GROUPED_WGMMA_STAGING: u64 = 8 * 16 * 72 * 2;

/// Dynamic shared memory of a grouped wgmma entry (`moe_wgmma` in
/// moe_sm90.cu): the ring, the epilogue staging, 2·stages mbarriers, the
/// tile prefix and segment starts (e + 1 i32 each), and 1024 bytes to align
/// the ring to the 128-byte swizzle's atom.
fn grouped_wgmma_shared_bytes(bn: u32, stages: u32, e: u32) -> u64 {
    u64::from(stages) * u64::from(GROUPED_WGMMA_BM + bn) * u64::from(GROUPED_WGMMA_BK) * 2
        + GROUPED_WGMMA_STAGING
        + 16 * u64::from(stages)
        + 8 * (u64::from(e) + 1)
        + 1024
}

/// The Hopper pass of [`MOE_GROUPED_GEMM_BF16`], or `None` where it does not
/// apply: the device runs sm_90a entries, n ≥ [`GROUPED_WGMMA_MIN_SLOTS`],
/// e ≤ 1024, N % 8 == 0 (16-byte stores), a, w and out 16-byte aligned (TMA
/// and the stores; K % 8 == 0 is the contract's), rows, weight rows `e · N`
/// and every tile index inside i32 with room to spare. Among the entries
/// whose shared memory fits, the one whose tiles pad N least, then the
/// ping-pong one (down's 2816 is 16 · 176 and 11 · 256), then the wider; a
/// persistent grid of at most one block an SM (and no more than the tiles
/// there can be).
fn grouped_wgmma_pass(a: &PlanArgs, f: &DeviceFacts) -> Result<Option<CudaPass>> {
    let (n, e, big_n, big_k) = (a.u32("n")?, a.u32("e")?, a.u32("big_n")?, a.u32("big_k")?);
    let aligned = a.addr("a")? % 16 == 0 && a.addr("w")? % 16 == 0 && a.addr("out")? % 16 == 0;
    if !f.cuda_sm90a
        || f.multiprocessors == 0
        || n < GROUPED_WGMMA_MIN_SLOTS
        || e == 0
        || e > GROUPED_WGMMA_MAX_EXPERTS
        || big_n == 0
        || big_n % 8 != 0
        || big_k == 0
        || big_k % 8 != 0
        || !aligned
        || u64::from(e) * u64::from(big_n) + 256 > i32::MAX as u64
        || u64::from(n) + 256 > i32::MAX as u64
    {
        return Ok(None);
    }
    let fits = |&&(_, bn, stages, _): &&(&str, u32, u32, bool)| grouped_wgmma_shared_bytes(bn, stages, e) <= u64::from(f.max_shared_bytes);
    let Some(&(entry, bn, stages, _)) =
        GROUPED_WGMMA_ENTRIES.iter().filter(fits).min_by_key(|&&(_, bn, _, pp)| (big_n.div_ceil(bn) * bn, !pp, u32::MAX - bn))
    else {
        return Ok(None);
    };
    // Tiles of rows: Σ_x ⌈len_x / 128⌉, at most ⌈n / 128⌉ + e for sorted
    // offsets; the kernel clamps unsorted ones segment by segment, each
    // at most n rows. Times ⌈N / BN⌉ n-tiles; the bound leaves room for a
    // block's `t += gridDim.x` past the last tile.
    let n_tiles = u64::from(big_n.div_ceil(bn));
    let row_tiles = u64::from(n.div_ceil(GROUPED_WGMMA_BM));
    if u64::from(e) * (row_tiles + 1) * n_tiles > (i32::MAX as u64) / 2 {
        return Ok(None);
    }
    let sorted_tiles = (row_tiles + u64::from(e)) * n_tiles;
    let grid = u32::try_from(sorted_tiles.min(u64::from(f.multiprocessors))).expect("at most the SM count");
    let shared_bytes = u32::try_from(grouped_wgmma_shared_bytes(bn, stages, e)).expect("checked against max_shared_bytes");
    Ok(Some(CudaPass { entry, grid: [grid, 1, 1], block: [384, 1, 1], shared_bytes }))
}

/// The grouped wgmma entries' tensor maps: a (`n × K`) in 128 × 64 boxes,
/// w as one `e·N × K` matrix in BN × 64 boxes (expert x's rows start at
/// x·N).
fn grouped_wgmma_maps<const BN: u32>(a: &PlanArgs) -> Result<Vec<TensorMap2d>> {
    let (n, e, big_n, big_k) = (a.u32("n")?, a.u32("e")?, a.u32("big_n")?, a.u32("big_k")?);
    Ok(vec![
        TensorMap2d { arg: "a", rows: u64::from(n), cols: u64::from(big_k), box_rows: GROUPED_WGMMA_BM, box_cols: GROUPED_WGMMA_BK },
        TensorMap2d { arg: "w", rows: u64::from(e) * u64::from(big_n), cols: u64::from(big_k), box_rows: BN, box_cols: GROUPED_WGMMA_BK },
    ])
}
inventory::submit! { CudaTensorMaps { module: "moe_sm90", entry: "moe_grouped_gemm_wgmma_n256", maps: grouped_wgmma_maps::<256> } }
inventory::submit! { CudaTensorMaps { module: "moe_sm90", entry: "moe_grouped_gemm_wgmma_n192", maps: grouped_wgmma_maps::<192> } }
inventory::submit! { CudaTensorMaps { module: "moe_sm90", entry: "moe_grouped_gemm_wgmma_pp_n176", maps: grouped_wgmma_maps::<176> } }

/// At decode sizes, `moe_grouped_gemm_bf16_seg`: a block per (32 weight
/// rows, slot), where only the block of a segment's first slot computes it,
/// so each selected expert streams once over N / 32 blocks. At prefill sizes
/// on Hopper, the wgmma/TMA kernel of `moe_sm90.cu` ([`grouped_wgmma_pass`]);
/// otherwise the mma.sync tiles.
fn cuda_moe_grouped_bf16(a: &PlanArgs, facts: &DeviceFacts) -> Result<CudaPlan> {
    let n = a.u32("n")?;
    if n > SEGMENT_GEMV_MAX_SLOTS {
        if let Some(pass) = grouped_wgmma_pass(a, facts)? {
            return Ok(CudaPlan { passes: vec![pass], workspace_bytes: 0 });
        }
        return cuda_moe_grouped(a, facts);
    }
    let cols = groups(a.kernel, u64::from(a.u32("big_n")?), SEGMENT_GEMV_COLS)?;
    let pass = CudaPass { entry: "moe_grouped_gemm_bf16_seg", grid: [cols, n, 1], block: [256, 1, 1], shared_bytes: 0 };
    Ok(CudaPlan { passes: vec![pass], workspace_bytes: 0 })
}

/// At decode sizes, `moe_grouped_gemm_bf16_seg` (as on CUDA: a workgroup per
/// (32 weight rows, slot), the segment's first slot computing it).
fn wgsl_moe_grouped_bf16(a: &PlanArgs, facts: &DeviceFacts) -> Result<WgslPlan> {
    let n = a.u32("n")?;
    if n > SEGMENT_GEMV_MAX_SLOTS {
        return wgsl_moe_grouped(a, facts);
    }
    let cols = groups(a.kernel, u64::from(a.u32("big_n")?), SEGMENT_GEMV_COLS)?;
    let pass = WgslPass { entry: "moe_grouped_gemm_bf16_seg", grid: [cols, n, 1], consts: seg_chunks_override(), extra: [0; 4] };
    whole_expert_window(a, WgslPlan { passes: vec![pass], workspace_bytes: 0, arrivals: 0 })
}

/// `SWITCHYARD_WGSL_SEG_CHUNKS` = `1` or `4`: the chunks of a weight row a
/// lane of the WGSL segment GEMVs loads a round (`SEG_U`,
/// moe/segment_gemv.wgsli), for both of them, instead of each shader's own
/// (four in `moe_gate_up_gelu_bf16`, one in `moe_grouped_gemm_bf16_seg`);
/// a measurement override, read once a process.
fn seg_chunks_override() -> Vec<(&'static str, u32)> {
    static CHUNKS: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    env_override(&CHUNKS, "SWITCHYARD_WGSL_SEG_CHUNKS", |c| c == 1 || c == 4).map(|c| vec![("SEG_U", c)]).unwrap_or_default()
}

/// Row stride in f32 of `moe_route_decode`'s staged rows (`route_dec_ld`
/// in moe_expert.cu): dim rounded up to 32, plus 4.
fn route_decode_ld(dim: u64) -> u64 {
    dim.div_ceil(32) * 32 + 4
}

/// Dynamic shared memory of `moe_route_decode`: the staged rows and router
/// row, or the electing block's per-warp top-k arrays (8 warps · 3 · e f32)
/// with the pairs' ids, counts and offsets, whichever is larger.
fn route_decode_shared(rows: u64, dim: u64, e: u64) -> u64 {
    let staging = (rows + 1) * route_decode_ld(dim) * 4;
    let select = (8 * 3 * e) * 4 + (ROUTE_DECODE_MAX_ROWS as u64 * MAX_TOP_K as u64 + ROUTE_DECODE_MAX_EXPERTS as u64 * 2 + 1) * 4;
    staging.max(select)
}

/// 16-byte chunks of a row a lane of `moe_route_decode_regs` holds
/// (`ROUTE_DEC_LANE_CHUNKS` in moe_expert.cu).
const ROUTE_DECODE_LANE_CHUNKS: u64 = 12;
/// Longest dim `moe_route_decode_regs` takes: 8 bf16 a chunk, 32 lanes.
const ROUTE_DECODE_REGS_MAX_DIM: u64 = 8 * 32 * ROUTE_DECODE_LANE_CHUNKS;
/// `SWITCHYARD_CUDA_ROUTE_DECODE=staged` keeps [`MOE_ROUTE_DECODE`] on its
/// staged entry at every dim, for an A/B on one binary; read once a process.
pub const ROUTE_DECODE_ENV: &str = "SWITCHYARD_CUDA_ROUTE_DECODE";

fn route_decode_staged() -> bool {
    static STAGED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *STAGED.get_or_init(|| std::env::var(ROUTE_DECODE_ENV).is_ok_and(|v| v.trim() == "staged"))
}

/// The CUDA entry of [`MOE_ROUTE_DECODE`]: `moe_route_decode_regs` (a
/// lane's chunks of x and scale held in registers, the router row's and
/// the first row's loads in flight together; same bits) at dim ≤
/// [`ROUTE_DECODE_REGS_MAX_DIM`] unless `staged`, else `moe_route_decode`
/// (reads a lane's chunks of a row twice). The regs entry is not yet
/// measured on a GPU.
fn route_decode_entry(dim: u64, staged: bool) -> &'static str {
    if !staged && dim <= ROUTE_DECODE_REGS_MAX_DIM {
        "moe_route_decode_regs"
    } else {
        "moe_route_decode"
    }
}

/// One block per expert (its router chain, as `dense_gemm_router_chain` at
/// a 1-column tile: the chains all start in the first wave on 132 SMs at
/// e = 128); the last block to arrive selects and scatters. The entry:
/// [`route_decode_entry`] under [`ROUTE_DECODE_ENV`].
fn cuda_moe_route_decode(a: &PlanArgs, f: &DeviceFacts) -> Result<CudaPlan> {
    route_decode_plan(a, f, route_decode_staged())
}

/// [`cuda_moe_route_decode`] with the override's value as a parameter.
fn route_decode_plan(a: &PlanArgs, f: &DeviceFacts, staged: bool) -> Result<CudaPlan> {
    let (rows, dim, e) = (u64::from(a.u32("rows")?), u64::from(a.u32("dim")?), a.u32("e")?);
    let shared = route_decode_shared(rows, dim, u64::from(e));
    if f.max_shared_bytes != 0 && shared > u64::from(f.max_shared_bytes) {
        return Err(switchyard_core::Error::invalid(
            a.kernel.symbol,
            "dim",
            format!("{shared} bytes of staged rows do not fit the device's {} bytes of shared memory", f.max_shared_bytes),
        ));
    }
    let shared_bytes = u32::try_from(shared).expect("bounded by the limits on rows, dim and e");
    Ok(CudaPlan {
        passes: vec![CudaPass { entry: route_decode_entry(dim, staged), grid: [e, 1, 1], block: [256, 1, 1], shared_bytes }],
        workspace_bytes: 0,
    })
}

/// A workgroup per (expert, row) forms the products of the router row and
/// the row's norm, and 32 of its invocations run the logit's router-order
/// partials (then one their tree); one workgroup then selects: the last
/// of those workgroups to arrive, so one dispatch
/// (`moe_route_decode_once`), or, with `SWITCHYARD_WGSL_ROUTE_PASSES=2`
/// (read once a process), a second dispatch.
fn wgsl_moe_route_decode(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    static PASSES: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let two_passes = env_override(&PASSES, "SWITCHYARD_WGSL_ROUTE_PASSES", |v| [1, 2].contains(&v)) == Some(2);
    wgsl_route_decode_plan(a, two_passes)
}

/// [`wgsl_moe_route_decode`] with its override given. The workspace holds
/// the f32 logits.
fn wgsl_route_decode_plan(a: &PlanArgs, two_passes: bool) -> Result<WgslPlan> {
    let (rows, e) = (a.u32("rows")?, a.u32("e")?);
    let logits = rows.checked_mul(e).ok_or_else(|| {
        switchyard_core::Error::invalid(a.kernel.symbol, "e", format!("rows = {rows} times e = {e} logits exceed a grid"))
    })?;
    let workspace_bytes = u64::from(logits) * 4;
    // A workgroup a logit, row-major; the backend folds a long grid.
    let chains = |entry| WgslPass { entry, grid: [logits, 1, 1], consts: vec![], extra: [0; 4] };
    if !two_passes {
        return Ok(WgslPlan { passes: vec![chains("moe_route_decode_once")], workspace_bytes, arrivals: 1 });
    }
    let select = WgslPass { entry: "moe_route_decode", grid: [1, 1, 1], consts: vec![], extra: [0; 4] };
    Ok(WgslPlan { passes: vec![chains("moe_route_decode_chains"), select], workspace_bytes, arrivals: 0 })
}

cuda_plan!(MOE_ROUTE_DECODE => cuda_moe_route_decode);
/// Most slots [`MOE_GATE_UP_GELU_BF16`] takes: the segment GEMV's range.
pub const GATE_UP_GELU_MAX_SLOTS: usize = SEGMENT_GEMV_MAX_SLOTS as usize;

/// The segment GEMV with 16 outputs (32 weight rows: 16 gate, 16 up) a
/// block, so each block still streams 32 weight rows.
fn cuda_moe_gate_up_gelu(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    let cols = groups(a.kernel, u64::from(a.u32("inter")?), SEGMENT_GEMV_COLS / 2)?;
    Ok(CudaPlan::single(a.kernel, [cols, a.u32("n")?, 1], [256, 1, 1]))
}

fn wgsl_moe_gate_up_gelu(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    let cols = groups(a.kernel, u64::from(a.u32("inter")?), SEGMENT_GEMV_COLS / 2)?;
    let mut plan = WgslPlan::single(a.kernel, [cols, a.u32("n")?, 1]);
    plan.passes[0].consts = seg_chunks_override();
    whole_expert_window(a, plan)
}

cuda_plan!(MOE_GATE_UP_GELU_BF16 => cuda_moe_gate_up_gelu);
wgsl_plan!(MOE_GATE_UP_GELU_BF16, "moe/moe_gate_up_gelu_bf16.wgsl" => wgsl_moe_gate_up_gelu, split => wgsl_moe_gate_up_gelu_split);

wgsl_plan!(MOE_ROUTE_DECODE, "moe/moe_route_decode.wgsl" => wgsl_moe_route_decode);
cuda_plan!(ROUTER_NORM_BF16 => cuda_row_blocks);
cuda_plan!(MOE_ROUTER_TOPK => cuda_moe_router_topk);
cuda_plan!(MOE_GATHER_BF16 => cuda_moe_gather);
cuda_plan!(MOE_GROUPED_GEMM_BF16 => cuda_moe_grouped_bf16);
cuda_plan!(MOE_GROUPED_W4A16 => cuda_moe_grouped);
cuda_plan!(GELU_MUL_BF16 => cuda_gelu_mul);
cuda_plan!(MOE_COMBINE_BF16 => cuda_moe_combine);
wgsl_plan!(ROUTER_NORM_BF16, "moe/router_norm_bf16.wgsl" => wgsl_row_groups);
wgsl_plan!(MOE_ROUTER_TOPK, "moe/moe_router_topk.wgsl" => wgsl_row_groups);
wgsl_plan!(MOE_GATHER_BF16, "moe/moe_gather_bf16.wgsl" => wgsl_moe_gather);
wgsl_plan!(MOE_GROUPED_GEMM_BF16, "moe/moe_grouped_gemm_bf16.wgsl" => wgsl_moe_grouped_bf16, split => wgsl_moe_grouped_bf16_split);
wgsl_plan!(MOE_GROUPED_W4A16, "moe/moe_grouped_w4a16.wgsl" => wgsl_moe_grouped, split => wgsl_moe_grouped_w4a16_split);
wgsl_plan!(GELU_MUL_BF16, "moe/gelu_mul_bf16.wgsl" => wgsl_row_groups);
wgsl_plan!(MOE_COMBINE_BF16, "moe/moe_combine_bf16.wgsl" => wgsl_row_groups);

/// Each named size is in `1..2^31`, else an invalid-argument error naming it.
pub(crate) fn positive(kernel: &str, pairs: &[(&str, usize)]) -> Result<()> {
    for &(name, v) in pairs {
        require(v > 0 && i32::try_from(v).is_ok(), kernel, name, || format!("{name} = {v} must be in 1..2^31"))?;
    }
    Ok(())
}

/// An expert weight set on the device, bf16 or NVFP4.
#[derive(Clone, Copy, Debug)]
pub enum ExpertWeights {
    /// bf16 `[e, N, K]`.
    Bf16 {
        /// Weights.
        w: Region,
    },
    /// NVFP4, K-major per expert.
    Nvfp4 {
        /// Codes `[e, K/2, N]`.
        wq: Region,
        /// Block scales `[e, K/16, N]`.
        ws: Region,
        /// Global scales f32 `[e]`.
        scale2: Region,
    },
}

/// Checks the sizes both grouped GEMMs take and returns them as the
/// launch's trailing scalars.
fn grouped_sizes(kernel: &str, n: usize, e: usize, big_n: usize, big_k: usize) -> Result<[crate::ops::LaunchArg; 4]> {
    positive(kernel, &[("n", n), ("e", e), ("big_n", big_n), ("big_k", big_k)])?;
    Ok([scalar(I(n as i32)), scalar(I(e as i32)), scalar(I(big_n as i32)), scalar(I(big_k as i32))])
}

/// The outputs of [`MOE_ROUTE_DECODE`].
#[derive(Clone, Copy, Debug)]
pub struct RouteDecodeOut {
    /// i32 `[rows, k]`.
    pub topk_ids: Region,
    /// f32 `[rows, k]`.
    pub topk_w: Region,
    /// i32 `[e + 1]`.
    pub offsets: Region,
    /// i32 `[rows · k]`.
    pub pair_of_slot: Region,
    /// i32 `[rows · k]`.
    pub slot_of_pair: Region,
    /// bf16 `[rows, e]`.
    pub logits: Region,
}

impl Ops {
    /// See [`ROUTER_NORM_BF16`].
    #[allow(clippy::too_many_arguments)]
    pub fn router_norm_bf16(&self, out: Region, x: Region, scale: Region, rows: usize, dim: usize, eps: f32, root: f32) -> Result<()> {
        let k = ROUTER_NORM_BF16.symbol;
        positive(k, &[("rows", rows), ("dim", dim)])?;
        require(dim % 2 == 0, k, "dim", || format!("dim = {dim} must be even"))?;
        require_eps(k, eps)?;
        require(root.is_finite(), k, "root", || format!("root = {root} must be finite"))?;
        let n = bf16s(saturating_product(&[rows, dim]));
        self.launch(
            &ROUTER_NORM_BF16,
            &[
                region(out, n),
                region(x, n),
                region(scale, bf16s(dim)),
                scalar(I(rows as i32)),
                scalar(I(dim as i32)),
                scalar(F(eps)),
                scalar(F(root)),
            ],
        )
    }

    /// See [`MOE_ROUTER_TOPK`].
    #[allow(clippy::too_many_arguments)]
    pub fn moe_router_topk(
        &self,
        topk_ids: Region,
        topk_w: Region,
        logits: Region,
        per_expert_scale: Region,
        rows: usize,
        e: usize,
        top_k: usize,
    ) -> Result<()> {
        let s = MOE_ROUTER_TOPK.symbol;
        positive(s, &[("rows", rows), ("e", e), ("k", top_k)])?;
        require(e <= MAX_EXPERTS, s, "e", || format!("e = {e} exceeds {MAX_EXPERTS}"))?;
        require(top_k <= e.min(MAX_TOP_K), s, "k", || format!("k = {top_k} must be <= min(e = {e}, {MAX_TOP_K})"))?;
        let pairs = words(saturating_product(&[rows, top_k]));
        self.launch(
            &MOE_ROUTER_TOPK,
            &[
                region(topk_ids, pairs),
                region(topk_w, pairs),
                region(logits, bf16s(saturating_product(&[rows, e]))),
                region(per_expert_scale, words(e)),
                scalar(I(rows as i32)),
                scalar(I(e as i32)),
                scalar(I(top_k as i32)),
            ],
        )
    }

    /// See [`MOE_ROUTE_DECODE`].
    #[allow(clippy::too_many_arguments)]
    pub fn moe_route_decode(
        &self,
        out: RouteDecodeOut,
        x: Region,
        scale: Region,
        router_w: Region,
        per_expert_scale: Region,
        rows: usize,
        dim: usize,
        e: usize,
        top_k: usize,
        eps: f32,
        root: f32,
    ) -> Result<()> {
        let s = MOE_ROUTE_DECODE.symbol;
        positive(s, &[("rows", rows), ("dim", dim), ("e", e), ("k", top_k)])?;
        require(rows <= ROUTE_DECODE_MAX_ROWS, s, "rows", || format!("rows = {rows} exceeds {ROUTE_DECODE_MAX_ROWS}"))?;
        require(e <= ROUTE_DECODE_MAX_EXPERTS && e % 2 == 0, s, "e", || format!("e = {e} must be even and <= {ROUTE_DECODE_MAX_EXPERTS}"))?;
        require(top_k <= e.min(MAX_TOP_K), s, "k", || format!("k = {top_k} must be <= min(e = {e}, {MAX_TOP_K})"))?;
        require(dim % 8 == 0 && dim <= ROUTE_DECODE_MAX_DIM, s, "dim", || {
            format!("dim = {dim} must be a multiple of 8 and <= {ROUTE_DECODE_MAX_DIM}")
        })?;
        require_eps(s, eps)?;
        require(root.is_finite(), s, "root", || format!("root = {root} must be finite"))?;
        for (name, r) in [("x", x), ("scale", scale), ("router_w", router_w)] {
            let addr = r.addr();
            require(addr % 16 == 0, s, name, || format!("address {addr:#x} must be 16-byte aligned (vector loads)"))?;
        }
        let pairs = words(rows * top_k);
        self.launch(
            &MOE_ROUTE_DECODE,
            &[
                region(out.topk_ids, pairs),
                region(out.topk_w, pairs),
                region(out.offsets, words(e + 1)),
                region(out.pair_of_slot, pairs),
                region(out.slot_of_pair, pairs),
                region(out.logits, bf16s(rows * e)),
                region(x, bf16s(rows * dim)),
                region(scale, bf16s(dim)),
                region(router_w, bf16s(e * dim)),
                region(per_expert_scale, words(e)),
                scalar(I(rows as i32)),
                scalar(I(dim as i32)),
                scalar(I(e as i32)),
                scalar(I(top_k as i32)),
                scalar(F(eps)),
                scalar(F(root)),
            ],
        )
    }

    /// See [`MOE_GATHER_BF16`].
    #[allow(clippy::too_many_arguments)]
    pub fn moe_gather_bf16(
        &self,
        out: Region,
        x: Region,
        pair_of_slot: Region,
        n: usize,
        top_k: usize,
        h: usize,
        rows: usize,
    ) -> Result<()> {
        let s = MOE_GATHER_BF16.symbol;
        positive(s, &[("n", n), ("k", top_k), ("h", h), ("rows", rows)])?;
        require(h % 2 == 0, s, "h", || format!("h = {h} must be even"))?;
        self.launch(
            &MOE_GATHER_BF16,
            &[
                region(out, bf16s(saturating_product(&[n, h]))),
                region(x, bf16s(saturating_product(&[rows, h]))),
                region(pair_of_slot, words(n)),
                scalar(I(n as i32)),
                scalar(I(top_k as i32)),
                scalar(I(h as i32)),
                scalar(I(rows as i32)),
            ],
        )
    }

    /// See [`MOE_GROUPED_GEMM_BF16`].
    #[allow(clippy::too_many_arguments)]
    pub fn moe_grouped_gemm_bf16(
        &self,
        out: Region,
        a: Region,
        w: Region,
        offsets: Region,
        n: usize,
        e: usize,
        big_n: usize,
        big_k: usize,
    ) -> Result<()> {
        let s = MOE_GROUPED_GEMM_BF16.symbol;
        let [n_arg, e_arg, big_n_arg, big_k_arg] = grouped_sizes(s, n, e, big_n, big_k)?;
        require(big_k % 8 == 0, s, "big_k", || format!("K = {big_k} must be a multiple of 8"))?;
        require(big_n % 2 == 0, s, "big_n", || format!("N = {big_n} must be even"))?;
        self.launch(
            &MOE_GROUPED_GEMM_BF16,
            &[
                region(out, bf16s(saturating_product(&[n, big_n]))),
                region(a, bf16s(saturating_product(&[n, big_k]))),
                region(w, bf16s(saturating_product(&[e, big_n, big_k]))),
                region(offsets, words(e.saturating_add(1))),
                n_arg,
                e_arg,
                big_n_arg,
                big_k_arg,
            ],
        )
    }

    /// See [`MOE_GROUPED_W4A16`].
    #[allow(clippy::too_many_arguments)]
    pub fn moe_grouped_w4a16(
        &self,
        out: Region,
        a: Region,
        wq: Region,
        ws: Region,
        scale2: Region,
        offsets: Region,
        n: usize,
        e: usize,
        big_n: usize,
        big_k: usize,
    ) -> Result<()> {
        let s = MOE_GROUPED_W4A16.symbol;
        let [n_arg, e_arg, big_n_arg, big_k_arg] = grouped_sizes(s, n, e, big_n, big_k)?;
        for (name, r) in [("wq", wq), ("ws", ws)] {
            let addr = r.addr();
            require(addr % 16 == 0, s, name, || format!("address {addr:#x} must be 16-byte aligned (vector weight loads)"))?;
        }
        require(big_k % nvfp4::BLOCK == 0, s, "big_k", || {
            format!("K = {big_k} is not a multiple of the NVFP4 scale block ({})", nvfp4::BLOCK)
        })?;
        require(big_n % 16 == 0, s, "big_n", || format!("N = {big_n} must be a multiple of 16 (aligned weight rows)"))?;
        self.launch(
            &MOE_GROUPED_W4A16,
            &[
                region(out, bf16s(saturating_product(&[n, big_n]))),
                region(a, bf16s(saturating_product(&[n, big_k]))),
                region(wq, saturating_product(&[e, big_k / 2, big_n])),
                region(ws, saturating_product(&[e, big_k / nvfp4::BLOCK, big_n])),
                region(scale2, words(e)),
                region(offsets, words(e.saturating_add(1))),
                n_arg,
                e_arg,
                big_n_arg,
                big_k_arg,
            ],
        )
    }

    /// Grouped expert GEMM with bf16 or NVFP4 weights: picks
    /// [`MOE_GROUPED_GEMM_BF16`] or [`MOE_GROUPED_W4A16`] by the weights' format.
    #[allow(clippy::too_many_arguments)]
    pub fn moe_grouped_gemm(
        &self,
        out: Region,
        a: Region,
        w: &ExpertWeights,
        offsets: Region,
        n: usize,
        e: usize,
        big_n: usize,
        big_k: usize,
    ) -> Result<()> {
        match *w {
            ExpertWeights::Bf16 { w } => self.moe_grouped_gemm_bf16(out, a, w, offsets, n, e, big_n, big_k),
            ExpertWeights::Nvfp4 { wq, ws, scale2 } => self.moe_grouped_w4a16(out, a, wq, ws, scale2, offsets, n, e, big_n, big_k),
        }
    }

    /// See [`MOE_GATE_UP_GELU_BF16`].
    #[allow(clippy::too_many_arguments)]
    pub fn moe_gate_up_gelu_bf16(
        &self,
        out: Region,
        a: Region,
        w: Region,
        offsets: Region,
        n: usize,
        e: usize,
        inter: usize,
        big_k: usize,
    ) -> Result<()> {
        let s = MOE_GATE_UP_GELU_BF16.symbol;
        positive(s, &[("n", n), ("e", e), ("inter", inter), ("big_k", big_k)])?;
        require(n <= GATE_UP_GELU_MAX_SLOTS, s, "n", || format!("n = {n} exceeds {GATE_UP_GELU_MAX_SLOTS} (decode slot counts)"))?;
        require(big_k % 8 == 0, s, "big_k", || format!("K = {big_k} must be a multiple of 8"))?;
        require(inter % 2 == 0, s, "inter", || format!("inter = {inter} must be even"))?;
        // The kernels index the weights' 2·inter rows in i32.
        require(inter <= (i32::MAX / 2) as usize, s, "inter", || format!("2 · inter = 2 · {inter} must fit in i32"))?;
        self.launch(
            &MOE_GATE_UP_GELU_BF16,
            &[
                region(out, bf16s(saturating_product(&[n, inter]))),
                region(a, bf16s(saturating_product(&[n, big_k]))),
                region(w, bf16s(saturating_product(&[e, 2, inter, big_k]))),
                region(offsets, words(e.saturating_add(1))),
                scalar(I(n as i32)),
                scalar(I(e as i32)),
                scalar(I(inter as i32)),
                scalar(I(big_k as i32)),
            ],
        )
    }

    /// See [`GELU_MUL_BF16`].
    pub fn gelu_mul_bf16(&self, out: Region, gu: Region, rows: usize, inter: usize) -> Result<()> {
        let s = GELU_MUL_BF16.symbol;
        positive(s, &[("rows", rows), ("inter", inter)])?;
        require(inter % 2 == 0, s, "inter", || format!("inter = {inter} must be even"))?;
        self.launch(
            &GELU_MUL_BF16,
            &[
                region(out, bf16s(saturating_product(&[rows, inter]))),
                region(gu, bf16s(saturating_product(&[rows, 2, inter]))),
                scalar(I(rows as i32)),
                scalar(I(inter as i32)),
            ],
        )
    }

    /// See [`MOE_COMBINE_BF16`].
    #[allow(clippy::too_many_arguments)]
    pub fn moe_combine_bf16(
        &self,
        out: Region,
        y: Region,
        slot_of_pair: Region,
        topk_w: Region,
        rows: usize,
        top_k: usize,
        h: usize,
        n: usize,
    ) -> Result<()> {
        let s = MOE_COMBINE_BF16.symbol;
        positive(s, &[("rows", rows), ("k", top_k), ("h", h), ("n", n)])?;
        require(h % 2 == 0, s, "h", || format!("h = {h} must be even"))?;
        let pairs = words(saturating_product(&[rows, top_k]));
        self.launch(
            &MOE_COMBINE_BF16,
            &[
                region(out, bf16s(saturating_product(&[rows, h]))),
                region(y, bf16s(saturating_product(&[n, h]))),
                region(slot_of_pair, pairs),
                region(topk_w, pairs),
                scalar(I(rows as i32)),
                scalar(I(top_k as i32)),
                scalar(I(h as i32)),
                scalar(I(i32_arg(s, "n", n)?)),
            ],
        )
    }
}

fn router_norm_cases(g: &mut Gen) -> Vec<Case> {
    [(1usize, 64usize), (7, 42), (20, 1030)]
        .into_iter()
        .map(|(rows, dim)| {
            let (_, x) = g.bf16(rows * dim, 0.01, 3.0);
            let (_, scale) = g.bf16(dim, 0.1, 2.0);
            let root = (dim as f32).powf(-0.5);
            Case {
                kernel: &ROUTER_NORM_BF16,
                label: format!("rows={rows} dim={dim}"),
                buffers: vec![
                    Buffer::output("out", DType::BF16, rows * dim, Tolerance::Bf16Ulp(1)),
                    Buffer::input("x", x),
                    Buffer::input("scale", scale),
                ],
                run: Box::new(move |o, a| o.router_norm_bf16(a[0], a[1], a[2], rows, dim, 1e-6, root)),
            }
        })
        .collect()
}

fn topk_cases(g: &mut Gen) -> Vec<Case> {
    [(1usize, 4usize, 1usize), (9, 128, 8), (33, 64, 4), (5, 1024, 32)]
        .into_iter()
        .map(|(rows, e, k)| {
            let (mut logits, _) = g.f32(rows * e, -4.0, 4.0);
            // Exact ties in the top group: the lower index must come first.
            if e > 8 {
                for r in 0..rows {
                    logits[r * e + 3] = 9.0;
                    logits[r * e + 7] = 9.0;
                }
            }
            let lb = bytes::bf16_bytes(&logits);
            let (_, scale) = g.f32(e, 0.5, 1.5);
            Case {
                kernel: &MOE_ROUTER_TOPK,
                label: format!("rows={rows} e={e} k={k}"),
                buffers: vec![
                    Buffer::output("topk_ids", DType::I32, rows * k, Tolerance::Exact),
                    // f32 outputs of a softmax ratio: a few f32 ulp apart across backends.
                    Buffer::output("topk_w", DType::F32, rows * k, Tolerance::ScaledAbs { rel: 1e-6, bound: vec![2.0; rows * k] }),
                    Buffer::input("logits", lb),
                    Buffer::input("per_expert_scale", scale),
                ],
                run: Box::new(move |o, a| o.moe_router_topk(a[0], a[1], a[2], a[3], rows, e, k)),
            }
        })
        .collect()
}

/// (rows, dim, e, k) of the fused routing cases: the 26b-a4b decode at batch
/// 1 and 16 (dim 2816, 128 experts, top-8), the most experts and the largest
/// k, and a small odd-row case.
const ROUTE_DECODE_SHAPES: [(usize, usize, usize, usize); 4] = [(1, 2816, 128, 8), (16, 2816, 128, 8), (5, 264, 256, 32), (3, 64, 4, 2)];

/// Inputs whose routing every backend computes exactly, so that the top-k
/// ids must match: each row of x is ±c (random signs; c = 8, 16 or 32), so
/// Σx² is exact in any order and inv = 1/c; scale is m/4 (m in 1..=7) and
/// root 2⁻⁶, so rn = ±m·2⁻⁸ is exact; router weights are j/32 (j in ±1..=31),
/// so every product and every partial sum of a logit (|Σ| < 2²⁴ units of
/// 2⁻¹³) is exact in f32. The logits then round to the same bf16 on every
/// backend, with many exact ties among 128-256 experts (and experts 1 and 3
/// share a router row), which the lowest index must win.
fn route_decode_cases(g: &mut Gen) -> Vec<Case> {
    let mut v: Vec<Case> = ROUTE_DECODE_SHAPES
        .into_iter()
        .map(|(rows, dim, e, k)| {
            let mut x = Vec::with_capacity(rows * dim);
            for r in 0..rows {
                let c = [8.0f32, 16.0, 32.0][r % 3];
                let (signs, _) = g.i32(dim, 0, 2);
                x.extend(signs.iter().map(|&b| if b == 0 { c } else { -c }));
            }
            let (m, _) = g.i32(dim, 1, 8);
            let scale: Vec<f32> = m.iter().map(|&m| m as f32 / 4.0).collect();
            let (j, _) = g.i32(e * dim, 1, 32);
            let (sg, _) = g.i32(e * dim, 0, 2);
            let mut w: Vec<f32> = j.iter().zip(&sg).map(|(&j, &s)| if s == 0 { j as f32 / 32.0 } else { -j as f32 / 32.0 }).collect();
            if e > 3 {
                let (lo, hi) = w.split_at_mut(3 * dim);
                hi[..dim].copy_from_slice(&lo[dim..2 * dim]);
            }
            route_decode_case(g, format!("rows={rows} dim={dim} e={e} k={k}"), (rows, dim, e, k), &x, &scale, &w)
        })
        .collect();
    v.extend(ROUTE_DECODE_CANCELLING.into_iter().map(|(rows, dim, e, k)| {
        let perm = g.permutation(dim / 2);
        let (signs, _) = g.i32(rows * dim, 0, 2);
        let mut x: Vec<f32> =
            signs.iter().enumerate().map(|(i, &s)| [8.0f32, 16.0, 32.0][i / dim % 3] * if s == 0 { 1.0 } else { -1.0 }).collect();
        mirror_halves(&perm, &mut x, dim, false);
        let mut scale = g.binades(dim, -4, 4);
        mirror_halves(&perm, &mut scale, dim, false);
        let mut w = g.binades(e * dim, -6, 6);
        mirror_halves(&perm, &mut w, dim, true);
        route_decode_case(g, format!("cancelling rows={rows} dim={dim} e={e} k={k}"), (rows, dim, e, k), &x, &scale, &w)
    }));
    v
}

/// (rows, dim, e, k) of the fused routing cases whose logits tell the
/// router order from any other: x = ±c as above (inv = 1/c exact), scale
/// and router weights spread over binades, and the second half of each row
/// the first in a random order with the router weights negated, so every
/// logit is exactly 0 plus its order's rounding error (the chains' partial
/// sums are not exact there); the top-k then picks among those errors.
/// dim 2816 (11 chunks a partial), 264 (two partials take a second chunk).
const ROUTE_DECODE_CANCELLING: [(usize, usize, usize, usize); 3] = [(1, 2816, 128, 8), (4, 2816, 64, 8), (2, 264, 32, 4)];

/// A fused routing case on the given inputs (per-expert scales drawn here).
fn route_decode_case(
    g: &mut Gen,
    label: String,
    (rows, dim, e, k): (usize, usize, usize, usize),
    x: &[f32],
    scale: &[f32],
    w: &[f32],
) -> Case {
    let (_, pes) = g.f32(e, 0.5, 1.5);
    let n = rows * k;
    Case {
        kernel: &MOE_ROUTE_DECODE,
        label,
        buffers: vec![
            Buffer::output("topk_ids", DType::I32, n, Tolerance::Exact),
            // As the top-k kernel's weights: a softmax ratio a few f32 ulp apart.
            Buffer::output("topk_w", DType::F32, n, Tolerance::ScaledAbs { rel: 1e-6, bound: vec![2.0; n] }),
            Buffer::output("offsets", DType::I32, e + 1, Tolerance::Exact),
            Buffer::output("pair_of_slot", DType::I32, n, Tolerance::Exact),
            Buffer::output("slot_of_pair", DType::I32, n, Tolerance::Exact),
            Buffer::output("logits", DType::BF16, rows * e, Tolerance::Exact),
            Buffer::input("x", bytes::bf16_bytes(x)),
            Buffer::input("scale", bytes::bf16_bytes(scale)),
            Buffer::input("router_w", bytes::bf16_bytes(w)),
            Buffer::input("per_expert_scale", pes),
        ],
        run: Box::new(move |o, a| {
            let out = RouteDecodeOut { topk_ids: a[0], topk_w: a[1], offsets: a[2], pair_of_slot: a[3], slot_of_pair: a[4], logits: a[5] };
            o.moe_route_decode(out, a[6], a[7], a[8], a[9], rows, dim, e, k, 1e-6, 1.0 / 64.0)
        }),
    }
}

/// Random routing: `(pair_of_slot, slot_of_pair, offsets)` for `rows` tokens,
/// top-`k` distinct experts of `e`, in the deterministic order of the contract.
pub(crate) fn routing(g: &mut Gen, rows: usize, k: usize, e: usize) -> (Vec<i32>, Vec<i32>, Vec<i32>) {
    let mut ids = Vec::with_capacity(rows * k);
    for _ in 0..rows {
        let mut experts: Vec<i32> = (0..e as i32).collect();
        for i in 0..k {
            let j = rand::Rng::random_range(&mut g.rng, i..e);
            experts.swap(i, j);
        }
        ids.extend_from_slice(&experts[..k]);
    }
    let n = rows * k;
    let mut offsets = vec![0i32; e + 1];
    for &x in &ids {
        offsets[x as usize + 1] += 1;
    }
    for x in 0..e {
        offsets[x + 1] += offsets[x];
    }
    let mut cursor = offsets.clone();
    let (mut pos, mut sop) = (vec![-1i32; n], vec![-1i32; n]);
    for (p, &x) in ids.iter().enumerate() {
        let slot = cursor[x as usize];
        cursor[x as usize] += 1;
        pos[slot as usize] = p as i32;
        sop[p] = slot;
    }
    (pos, sop, offsets)
}

fn gather_cases(g: &mut Gen) -> Vec<Case> {
    [(1usize, 1usize, 4usize, 64usize), (13, 4, 8, 42), (40, 8, 16, 256)]
        .into_iter()
        .map(|(rows, k, e, h)| {
            let (mut pos, _, _) = routing(g, rows, k, e);
            let n = rows * k + 3; // a padded tail of empty slots
            pos.extend([-1, -1, -1]);
            let (_, x) = g.bf16(rows * h, 0.01, 2.0);
            Case {
                kernel: &MOE_GATHER_BF16,
                label: format!("rows={rows} k={k} h={h}"),
                buffers: vec![
                    Buffer::output("out", DType::BF16, n * h, Tolerance::Exact),
                    Buffer::input("x", x),
                    Buffer::input("pair_of_slot", bytes::i32_bytes(&pos)),
                ],
                run: Box::new(move |o, a| o.moe_gather_bf16(a[0], a[1], a[2], n, k, h, rows)),
            }
        })
        .collect()
}

/// (rows, k, e, N, K). Slot counts 3, 54, 98 and 322: the first three take
/// CUDA's segment GEMV (the 98-slot case with segments longer than its 4-row
/// groups, N not a multiple of its 32 columns and K shorter than a warp's
/// loads), the last the tensor-core tiles.
const GROUPED_SHAPES: [(usize, usize, usize, usize, usize); 4] =
    [(1, 1, 4, 64, 64), (13, 4, 8, 96, 48), (24, 4, 6, 80, 96), (40, 8, 16, 128, 208)];

fn grouped_case(g: &mut Gen, (rows, k, e, big_n, big_k): (usize, usize, usize, usize, usize), fp4: bool) -> Case {
    let (_, _, offsets) = routing(g, rows, k, e);
    let n = rows * k + 2; // rows past offsets[e] must come out zero
    let (_, a) = g.bf16(n * big_k, 0.01, 1.0);
    let out = Buffer::output("out", DType::BF16, n * big_n, Tolerance::Nmse(REORDERED_NMSE));
    let offs = Buffer::input("offsets", bytes::i32_bytes(&offsets));
    let label = format!("rows={rows} k={k} e={e} N={big_n} K={big_k}");
    if fp4 {
        let (mut wq, mut ws, mut s2) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..e {
            let (q, s, g2) = random_weight(g, big_n, big_k, big_n);
            wq.extend(q);
            ws.extend(s);
            s2.push(g2);
        }
        Case {
            kernel: &MOE_GROUPED_W4A16,
            label,
            buffers: vec![
                out,
                Buffer::input("a", a),
                Buffer::input("wq", wq),
                Buffer::input("ws", ws),
                Buffer::input("scale2", bytes::f32_bytes(&s2)),
                offs,
            ],
            run: Box::new(move |o, x| {
                let w = ExpertWeights::Nvfp4 { wq: x[2], ws: x[3], scale2: x[4] };
                o.moe_grouped_gemm(x[0], x[1], &w, x[5], n, e, big_n, big_k)
            }),
        }
    } else {
        let (_, w) = g.bf16(e * big_n * big_k, 0.01, 0.5);
        Case {
            kernel: &MOE_GROUPED_GEMM_BF16,
            label,
            buffers: vec![out, Buffer::input("a", a), Buffer::input("w", w), offs],
            run: Box::new(move |o, x| o.moe_grouped_gemm(x[0], x[1], &ExpertWeights::Bf16 { w: x[2] }, x[3], n, e, big_n, big_k)),
        }
    }
}

/// Prefill-sized bf16 cases with explicit segments: (offsets, n, N, K). At
/// n ≥ 512 they take the Hopper plan on an sm_90a device, one case per tile
/// width (N = 424 → 256 columns, ragged last n-tile; 352 → 176; 384 → 192).
/// Segments start off tile boundaries; one is empty, one is 40 rows (the
/// second consumer warpgroup idle), tails of 44, 64 and 5 rows; rows before
/// offsets[0] and past offsets[e] are zero; the last segment of the third
/// runs to n (TMA zero-fills past it); K = 200 and 136 end mid-slice. The
/// last has 204 tiles (N = 1056 = 6 · 176), more than one a block on the
/// H200's 132 SMs, so blocks walk several tiles and the ring wraps across
/// tiles (K = 64: one slice a tile).
const GROUPED_WGMMA_CASES: [(&[i32], usize, usize, usize); 4] = [
    (&[0, 300, 300, 340, 600], 606, 424, 200),
    (&[0, 0, 200, 264, 391, 512], 515, 352, 136),
    (&[5, 70, 454, 523], 523, 384, 72),
    (&[0, 610, 610, 1500, 2222, 2300, 3100, 3901, 4000], 4004, 1056, 64),
];

/// Ping-pong turns over a ring that wraps: 192 experts of 0 to 88 rows
/// (`(53 x + 7) mod 89`; rows 65 and up use both row blocks of a tile),
/// N = 352 = 2 · 176, K = 200 (4 slices, the last partial): 380 tiles, so
/// each of the H200's 132 blocks runs two or three, both consumer
/// warpgroups take turns, and a block's 8 to 12 slices wrap the 5-stage
/// ring. Rows start at 3 and end 2 before n (zero rows on both sides).
fn grouped_many_segments() -> (Vec<i32>, usize, usize, usize) {
    let mut offsets = vec![3i32];
    for x in 0..192 {
        offsets.push(offsets[x] + (53 * x as i32 + 7) % 89);
    }
    let n = offsets[192] as usize + 2;
    (offsets, n, 352, 200)
}

fn grouped_offsets_case(g: &mut Gen, offsets: &[i32], n: usize, big_n: usize, big_k: usize) -> Case {
    let e = offsets.len() - 1;
    let (_, a) = g.bf16(n * big_k, 0.01, 1.0);
    let (_, w) = g.bf16(e * big_n * big_k, 0.01, 0.5);
    let segments = if e <= 16 { format!("offsets={offsets:?}") } else { format!("e={e} offsets={}..{}", offsets[0], offsets[e]) };
    Case {
        kernel: &MOE_GROUPED_GEMM_BF16,
        label: format!("{segments} n={n} N={big_n} K={big_k}"),
        buffers: vec![
            Buffer::output("out", DType::BF16, n * big_n, Tolerance::Nmse(REORDERED_NMSE)),
            Buffer::input("a", a),
            Buffer::input("w", w),
            Buffer::input("offsets", bytes::i32_bytes(offsets)),
        ],
        run: Box::new(move |o, x| o.moe_grouped_gemm(x[0], x[1], &ExpertWeights::Bf16 { w: x[2] }, x[3], n, e, big_n, big_k)),
    }
}

fn grouped_bf16_cases(g: &mut Gen) -> Vec<Case> {
    let mut cases: Vec<Case> = GROUPED_SHAPES.iter().map(|&s| grouped_case(g, s, false)).collect();
    cases.extend(GROUPED_WGMMA_CASES.iter().map(|&(offsets, n, big_n, big_k)| grouped_offsets_case(g, offsets, n, big_n, big_k)));
    let (offsets, n, big_n, big_k) = grouped_many_segments();
    cases.push(grouped_offsets_case(g, &offsets, n, big_n, big_k));
    cases
}

fn grouped_fp4_cases(g: &mut Gen) -> Vec<Case> {
    GROUPED_SHAPES.iter().map(|&s| grouped_case(g, s, true)).collect()
}

/// (rows, k, e, inter, K): the 26b-a4b projection (inter 704, K 2816) at
/// batch 1 over 8 experts, batch 16 over 16 experts (segments of about 8
/// slots, longer than the CUDA kernel's 2-row groups; K 1408 keeps the
/// weights at 63 MB like the first), and a small case whose inter (40) is
/// not a multiple of a block's 16 outputs and whose K (48) is shorter than a
/// warp's loads. Two slots past offsets[e] must come out zero. (All 128
/// experts would be 1 GB of weights, past a storage binding.)
const GATE_UP_GELU_SHAPES: [(usize, usize, usize, usize, usize); 3] = [(1, 8, 8, 704, 2816), (16, 8, 16, 704, 1408), (13, 4, 8, 40, 48)];

fn gate_up_gelu_cases(g: &mut Gen) -> Vec<Case> {
    GATE_UP_GELU_SHAPES
        .into_iter()
        .map(|(rows, k, e, inter, big_k)| {
            let (_, _, offsets) = routing(g, rows, k, e);
            let n = rows * k + 2;
            let (_, a) = g.bf16(n * big_k, 0.01, 1.0);
            // Weights around 1/sqrt(K), so the gate sums reach GELU's curved part.
            let (_, w) = g.bf16(e * 2 * inter * big_k, 0.001, 4.0 / (big_k as f32).sqrt());
            Case {
                kernel: &MOE_GATE_UP_GELU_BF16,
                label: format!("rows={rows} k={k} e={e} inter={inter} K={big_k}"),
                buffers: vec![
                    Buffer::output("out", DType::BF16, n * inter, Tolerance::Nmse(REORDERED_NMSE)),
                    Buffer::input("a", a),
                    Buffer::input("w", w),
                    Buffer::input("offsets", bytes::i32_bytes(&offsets)),
                ],
                run: Box::new(move |o, x| o.moe_gate_up_gelu_bf16(x[0], x[1], x[2], x[3], n, e, inter, big_k)),
            }
        })
        .collect()
}

fn gelu_cases(g: &mut Gen) -> Vec<Case> {
    // (1, 10240): a decode row over 20 blocks (the CUDA plan's runs of 256 pairs).
    [(1usize, 2usize), (9, 42), (17, 1030), (1, 10240)]
        .into_iter()
        .map(|(rows, inter)| {
            let (_, gu) = g.bf16(rows * 2 * inter, 0.01, 4.0);
            Case {
                kernel: &GELU_MUL_BF16,
                label: format!("rows={rows} inter={inter}"),
                // 2 ulp, a recorded finding: the output is built from a rounded
                // intermediate, bf16(gelu_tanh(gate)), whose tanh/exp are not
                // correctly rounded on GPUs; a 1-ulp flip there becomes up to
                // 2 ulp after the multiply (seen on the H200 through Vulkan:
                // 0x3a80 vs 0x3a7e, rows 17, inter 1030).
                buffers: vec![Buffer::output("out", DType::BF16, rows * inter, Tolerance::Bf16Ulp(2)), Buffer::input("gu", gu)],
                run: Box::new(move |o, a| o.gelu_mul_bf16(a[0], a[1], rows, inter)),
            }
        })
        .collect()
}

fn combine_cases(g: &mut Gen) -> Vec<Case> {
    // k = 11 and 36: a second, partial batch of the WGSL word's expert loads
    // (CW_BATCH = 8), and pairs past the 32 staged in workgroup memory.
    [(1usize, 1usize, 4usize, 64usize), (13, 4, 8, 42), (40, 8, 16, 256), (3, 11, 32, 72), (2, 36, 64, 40)]
        .into_iter()
        .map(|(rows, k, e, h)| {
            let (_, mut sop, _) = routing(g, rows, k, e);
            if rows > 2 {
                sop[1] = -1; // a dropped pair
            }
            let n = rows * k;
            // Positive terms: a sum that cancels to near zero would turn one f32
            // ulp of summation-order difference into several bf16 ulp.
            let (yv, _) = g.f32(n * h, 0.01, 2.0);
            let y = bytes::bf16_bytes(&yv);
            let (_, w) = g.f32(n, 0.05, 1.0);
            Case {
                kernel: &MOE_COMBINE_BF16,
                label: format!("rows={rows} k={k} h={h}"),
                buffers: vec![
                    Buffer::output("out", DType::BF16, rows * h, Tolerance::Bf16Ulp(1)),
                    Buffer::input("y", y),
                    Buffer::input("slot_of_pair", bytes::i32_bytes(&sop)),
                    Buffer::input("topk_w", w),
                ],
                run: Box::new(move |o, a| o.moe_combine_bf16(a[0], a[1], a[2], a[3], rows, k, h, n)),
            }
        })
        .collect()
}

inventory::submit! { CaseSet { kernel: &ROUTER_NORM_BF16, cases: router_norm_cases } }
inventory::submit! { CaseSet { kernel: &MOE_ROUTER_TOPK, cases: topk_cases } }
inventory::submit! { CaseSet { kernel: &MOE_ROUTE_DECODE, cases: route_decode_cases } }
inventory::submit! { CaseSet { kernel: &MOE_GATHER_BF16, cases: gather_cases } }
inventory::submit! { CaseSet { kernel: &MOE_GROUPED_GEMM_BF16, cases: grouped_bf16_cases } }
inventory::submit! { CaseSet { kernel: &MOE_GROUPED_W4A16, cases: grouped_fp4_cases } }
inventory::submit! { CaseSet { kernel: &GELU_MUL_BF16, cases: gelu_cases } }
inventory::submit! { CaseSet { kernel: &MOE_GATE_UP_GELU_BF16, cases: gate_up_gelu_cases } }
inventory::submit! { CaseSet { kernel: &MOE_COMBINE_BF16, cases: combine_cases } }

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::cuda_kernel;

    const HOPPER: DeviceFacts = DeviceFacts { cuda_clusters: false, ..crate::plan::H200 };

    fn plan(f: &DeviceFacts, n: i32, e: i32, big_n: i32, big_k: i32, addr: u64) -> CudaPass {
        let args: Vec<switchyard_core::Arg> = MOE_GROUPED_GEMM_BF16
            .args
            .iter()
            .map(|a| match a.name {
                "n" => I(n),
                "e" => I(e),
                "big_n" => I(big_n),
                "big_k" => I(big_k),
                _ => P(addr),
            })
            .collect();
        let p = (cuda_kernel(&MOE_GROUPED_GEMM_BF16).unwrap().plan)(&PlanArgs::new(&MOE_GROUPED_GEMM_BF16, &args), f).unwrap();
        assert_eq!((p.passes.len(), p.workspace_bytes), (1, 0));
        p.passes[0].clone()
    }

    #[test]
    fn row_kernels_spread_a_decode_row_over_runs_of_256_pairs() {
        let gelu =
            |rows: i32, inter: i32| cuda_gelu_mul(&PlanArgs::new(&GELU_MUL_BF16, &[P(256), P(256), I(rows), I(inter)]), &HOPPER).unwrap();
        // The NVFP4 decode's gated row, inter 10240: 5120 pairs over 20 blocks.
        assert_eq!((gelu(1, 10240).passes[0].grid, gelu(1, 10240).passes[0].block), ([1, 20, 1], [256, 1, 1]));
        // A short row stays one block; a very long one stops at 64 blocks a row.
        assert_eq!(gelu(9, 42).passes[0].grid, [9, 1, 1]);
        assert_eq!(gelu(2, 1 << 16).passes[0].grid, [2, 64, 1]);
    }

    /// The issue-13 shapes take the ping-pong entry (gate_up 1408 = 8 · 176,
    /// down 2816 = 16 · 176), one block an SM, shared memory as the kernel
    /// lays it out; every prefill parity case takes a wgmma entry, the
    /// ping-pong one exactly where N is a multiple of 176; decode sizes,
    /// n < 512, misaligned operands, N % 8 != 0, too many experts and a
    /// device without sm_90a keep the other plans.
    #[test]
    fn grouped_bf16_takes_the_wgmma_plan_at_prefill_sizes_on_hopper() {
        let ring = |bn: u64, stages: u64| stages * (128 + bn) * 128 + 8 * 16 * 72 * 2 + 16 * stages + 8 * 129 + 1024;
        for (big_n, big_k) in [(1408, 2816), (2816, 704)] {
            let p = plan(&HOPPER, 32768, 128, big_n, big_k, 256);
            assert_eq!(p.entry, "moe_sm90::moe_grouped_gemm_wgmma_pp_n176");
            assert_eq!((p.grid, p.block, u64::from(p.shared_bytes)), ([132, 1, 1], [384, 1, 1], ring(176, 5)));
        }
        for (offsets, n, big_n, big_k) in GROUPED_WGMMA_CASES {
            let e = offsets.len() as i32 - 1;
            let entry = plan(&HOPPER, n as i32, e, big_n as i32, big_k as i32, 256).entry;
            assert!(entry.starts_with("moe_sm90::"), "{offsets:?}");
            assert_eq!(entry.contains("_pp_"), big_n % 176 == 0, "{offsets:?} N={big_n}");
        }
        let (offsets, n, big_n, big_k) = grouped_many_segments();
        let p = plan(&HOPPER, n as i32, offsets.len() as i32 - 1, big_n as i32, big_k as i32, 256);
        assert_eq!((p.entry, p.grid), ("moe_sm90::moe_grouped_gemm_wgmma_pp_n176", [132, 1, 1]));
        assert_eq!(plan(&HOPPER, 606, 4, 424, 200, 256).entry, "moe_sm90::moe_grouped_gemm_wgmma_n256");
        assert_eq!(plan(&HOPPER, 606, 4, 384, 72, 256).entry, "moe_sm90::moe_grouped_gemm_wgmma_n192");
        let tiles = "moe_grouped_gemm_bf16";
        assert_eq!(plan(&HOPPER, 128, 128, 1408, 2816, 256).entry, "moe_grouped_gemm_bf16_seg");
        assert_eq!(plan(&HOPPER, 511, 4, 1408, 2816, 256).entry, tiles);
        assert_eq!(plan(&HOPPER, 32768, 128, 1408, 2816, 264).entry, tiles);
        assert_eq!(plan(&HOPPER, 32768, 128, 1410, 2816, 256).entry, tiles);
        assert_eq!(plan(&HOPPER, 32768, 1025, 1408, 2816, 256).entry, tiles);
        assert_eq!(plan(&DeviceFacts { cuda_sm90a: false, ..HOPPER }, 32768, 128, 1408, 2816, 256).entry, tiles);
        // Few tiles: no more blocks than tiles there can be.
        assert_eq!(plan(&HOPPER, 512, 1, 176, 64, 256).grid, [5, 1, 1]);
    }

    /// `moe_route_decode`'s arguments at these sizes (k 8, aligned pointers).
    fn route_args(rows: i32, dim: i32, e: i32) -> Vec<switchyard_core::Arg> {
        MOE_ROUTE_DECODE
            .args
            .iter()
            .map(|a| match a.name {
                "rows" => I(rows),
                "dim" => I(dim),
                "e" => I(e),
                "k" => I(8),
                "eps" => F(1e-6),
                "root" => F(1.0 / 64.0),
                _ => P(256),
            })
            .collect()
    }

    #[test]
    fn wgsl_route_decode_is_one_dispatch_unless_forced() {
        let plan = |rows: i32, e: i32, two: bool| {
            let args = route_args(rows, 2816, e);
            let p = wgsl_route_decode_plan(&PlanArgs::new(&MOE_ROUTE_DECODE, &args), two).unwrap();
            (p.passes.iter().map(|s| (s.entry, s.grid)).collect::<Vec<_>>(), p.workspace_bytes, p.arrivals)
        };
        assert_eq!(plan(1, 128, false), (vec![("moe_route_decode_once", [128, 1, 1])], 512, 1));
        assert_eq!(plan(16, 256, false), (vec![("moe_route_decode_once", [16 * 256, 1, 1])], 16 * 256 * 4, 1));
        assert_eq!(
            plan(5, 128, true),
            (vec![("moe_route_decode_chains", [5 * 128, 1, 1]), ("moe_route_decode", [1, 1, 1])], 5 * 128 * 4, 0)
        );
    }

    /// The decode routing takes the norm-in-registers entry up to its dim
    /// limit unless the override asks for the staged one; both entries are
    /// in moe_expert.cu with the same parameters, and the lane-chunk limit
    /// is the source's.
    #[test]
    fn route_decode_takes_the_registers_entry_up_to_its_limit() {
        let pass = |rows: i32, dim: i32, e: i32, staged: bool| {
            let args = route_args(rows, dim, e);
            let p = route_decode_plan(&PlanArgs::new(&MOE_ROUTE_DECODE, &args), &HOPPER, staged).unwrap();
            assert_eq!(p.passes.len(), 1);
            p.passes[0].clone()
        };
        // 26b-a4b's router (dim 2816, 128 experts) at batch 1 and 16.
        let p = pass(1, 2816, 128, false);
        assert_eq!((p.entry, p.grid, p.block), ("moe_route_decode_regs", [128, 1, 1], [256, 1, 1]));
        assert_eq!(u64::from(p.shared_bytes), route_decode_shared(1, 2816, 128));
        assert_eq!(pass(16, 2816, 128, false).entry, "moe_route_decode_regs");
        assert_eq!(pass(16, 3072, 128, false).entry, "moe_route_decode_regs");
        // The override, and past the limit: the staged entry, same launch.
        let s = pass(1, 2816, 128, true);
        assert_eq!((s.entry, s.grid, s.block, s.shared_bytes), ("moe_route_decode", p.grid, p.block, p.shared_bytes));
        assert_eq!(pass(16, 3072, 128, true).entry, "moe_route_decode");
        assert_eq!(pass(1, 3080, 128, false).entry, "moe_route_decode");
        assert_eq!(pass(1, 4096, 128, false).entry, "moe_route_decode");
        assert_eq!((route_decode_entry(2816, false), route_decode_entry(2816, true)), ("moe_route_decode_regs", "moe_route_decode"));
        assert_eq!(route_decode_entry(4096, false), "moe_route_decode");
        assert!(ROUTE_DECODE_MAX_DIM as u64 <= ROUTE_DECODE_REGS_MAX_DIM, "every dim the kernel takes fits the registers entry");

        let cu = crate::sources::cuda("moe_expert").expect("moe_expert.cu").text;
        assert!(cu.contains(&format!("#define ROUTE_DEC_LANE_CHUNKS {ROUTE_DECODE_LANE_CHUNKS}\n")));
        let params = |entry: &str| {
            let head = format!("extern \"C\" __global__ void __launch_bounds__(256) {entry}(");
            let at = cu.find(&head).unwrap_or_else(|| panic!("no entry `{entry}` in moe_expert.cu")) + head.len();
            cu[at..at + cu[at..].find(')').unwrap()].split_whitespace().collect::<Vec<_>>().join(" ")
        };
        assert_eq!(params("moe_route_decode_regs"), params("moe_route_decode"));
    }

    /// The tensor maps: a in 128-row boxes, w as one e·N-row matrix in
    /// BN-row boxes.
    #[test]
    fn grouped_wgmma_maps_view_the_weights_as_one_matrix() {
        for (entry, bn) in
            [("moe_grouped_gemm_wgmma_n256", 256), ("moe_grouped_gemm_wgmma_n192", 192), ("moe_grouped_gemm_wgmma_pp_n176", 176)]
        {
            let args: Vec<switchyard_core::Arg> = MOE_GROUPED_GEMM_BF16
                .args
                .iter()
                .map(|a| match a.name {
                    "n" => I(600),
                    "e" => I(4),
                    "big_n" => I(424),
                    "big_k" => I(200),
                    _ => P(256),
                })
                .collect();
            let maps =
                (crate::plan::cuda_tensor_maps("moe_sm90", entry).expect("registered").maps)(&PlanArgs::new(&MOE_GROUPED_GEMM_BF16, &args))
                    .unwrap();
            assert_eq!(maps[0], TensorMap2d { arg: "a", rows: 600, cols: 200, box_rows: 128, box_cols: 64 });
            assert_eq!(maps[1], TensorMap2d { arg: "w", rows: 4 * 424, cols: 200, box_rows: bn, box_cols: 64 });
        }
    }
}
