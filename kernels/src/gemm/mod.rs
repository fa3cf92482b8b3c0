//! The GEMM family: `C[M, N] = A[M, K] · B[N, K]ᵀ`, A row-major bf16
//! activations, B in the HF `[out, in]` layout, f32 accumulation, bf16 output
//! rounded to nearest even. [`w4a16`] holds the NVFP4-weight variants.
//!
//! Accumulation order is part of some contracts: [`DENSE_GEMM_BF16`] sums
//! strictly `k = 0..K-1` and [`DENSE_GEMM_ROUTER`] in the router order
//! ([`router_dot`]), both with separate f32 multiply and add (no fused
//! multiply-add), so they equal the scalar reference bit for bit on every
//! backend. The tensor-core kernels may reorder K; they are
//! compared by NMSE (≤ 1e-6: f32 reassociation over K ≤ 256 moves a sum by
//! ~1e-7 relative, which flips the bf16 rounding of a small fraction of
//! elements by one ulp).
pub mod w4a16;

use crate::ops::{bf16s, region, require, saturating_product, scalar, LaunchArg, Ops};
use crate::parity::{mirror_halves, Buffer, Case, CaseSet, Gen};
use crate::plan::{groups, CudaPass, CudaPlan, CudaTensorMaps, DeviceFacts, PlanArgs, TensorMap2d, WgslPass, WgslPlan};
use switchyard_core::compare::Tolerance;
use switchyard_core::{registry, Arg::*, ArgSpec as A, DType, Error, KernelSig, Region, Result};

/// The NMSE bound for bf16 GEMM outputs whose K order differs from the reference.
pub const REORDERED_NMSE: f64 = 1e-6;

/// Most K chunks [`DENSE_GEMM_SPLITK_BF16`] takes: the workspace is
/// `splits · M · N` f32, so this bounds it at 128 times the output.
pub const SPLITK_MAX_SPLITS: usize = 64;

macro_rules! gemm_args {
    ($($extra:expr),*) => {
        [A::input("a"), A::input("b"), A::output("c"), A::u32("m"), A::u32("n"), A::u32("k") $(, $extra)*]
    };
}

declare_kernel! {
    /// Simple tiled GEMM, the scalar order: `acc = 0; for k in 0..K { acc = acc + a·b }`
    /// with the product and the sum each rounded to f32 (no FMA);
    /// `c = bf16(acc)`. K and N even.
    DENSE_GEMM_BF16 = "gemm"::"dense_gemm_bf16"=> &gemm_args!()
}

declare_kernel! {
    /// The router GEMM: `c[m, n] = bf16(router_dot(a[m, ..], b[n, ..]))`,
    /// the router order of [`router_dot`] (32 interleaved partial sums of
    /// 8-wide k chunks, then a fixed pairwise tree; no FMA), bit-identical on
    /// every backend. Laid out for speed (at decode sizes a warp or a
    /// workgroup's 32 invocations per output over rows staged in shared
    /// memory; tiles for prefill). K and N even.
    DENSE_GEMM_ROUTER = "gemm"::"dense_gemm_router"=> &gemm_args!()
}

/// Partial sums of the router order ([`router_dot`]): a warp's lanes.
pub const ROUTER_PARTS: usize = 32;
/// Consecutive k a partial takes at a time in the router order: one 16-byte
/// vector of bf16.
pub const ROUTER_CHUNK: usize = 8;

/// The router order, which [`DENSE_GEMM_ROUTER`] and the logits of
/// `moe_route_decode` are defined by: chunk `c` = k in `[8c, min(8c + 8, K))`
/// goes to partial `j = c mod 32`; each partial sums its k from +0 in
/// increasing k, `p = p + a·b` with the product and the sum each rounded to
/// f32 (no FMA); then the partials meet in a fixed pairwise tree, `p[j] =
/// p[j] + p[j + w]` for w = 1, 2, 4, 8, 16 and j a multiple of 2w, and the
/// result is `p[0]`.
///
/// Why not the scalar order of [`DENSE_GEMM_BF16`] (which this contract
/// followed until the fifteenth session): routing needs every backend to
/// pick the same experts, so the router's sums must be bit-identical across
/// backends, but any fixed order gives that. The strict k order made each
/// decode logit one chain of K dependent adds (K = 2816 at 26b-a4b), the
/// floor of the routing launch on every GPU (CUDA: 70% of the fused routing
/// kernel's time by ncu's stall samples, 16.7 µs a layer in the decode
/// graph). This order is a chain of K / 256 chunks a lane (11 at K = 2816)
/// and five tree levels: a warp's 32 lanes, or 32 invocations of a
/// workgroup, each sum one partial, and a butterfly of `subgroupShuffleXor`
/// / `__shfl_xor_sync` (f32 addition commutes, so every lane gets `p[0]`'s
/// bits) or workgroup memory meets them. Products of bf16 inputs are exact
/// in f32, so only the adds' order matters.
pub fn router_dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut parts = [0f32; ROUTER_PARTS];
    for (c, (ac, bc)) in a.chunks(ROUTER_CHUNK).zip(b.chunks(ROUTER_CHUNK)).enumerate() {
        let p = &mut parts[c % ROUTER_PARTS];
        for (&x, &y) in ac.iter().zip(bc) {
            *p += x * y;
        }
    }
    let mut w = 1;
    while w < ROUTER_PARTS {
        for j in (0..ROUTER_PARTS).step_by(2 * w) {
            parts[j] += parts[j + w];
        }
        w *= 2;
    }
    parts[0]
}

declare_kernel! {
    /// Tensor-core GEMM (mma.sync m16n8k16 on CUDA): f32 accumulation in any
    /// K order, `c = bf16(acc)`. K % 8 == 0, N even.
    DENSE_GEMM_TC = "gemm"::"dense_gemm_tc"=> &gemm_args!()
}

declare_kernel! {
    /// `c = bf16(c + scale · bf16(acc))` in one pass, where `acc` is exactly
    /// what [`DENSE_GEMM_TC`] computes on the same backend, and the epilogue is
    /// `t = bf16(acc)`, `u = scale · t` (f32), `c = bf16(c + u)` (f32), no FMA:
    /// bit-identical to `dense_gemm_tc` into scratch then [`SCALED_ADD_BF16`].
    DENSE_GEMM_TC_SCALED_ACC = "gemm"::"dense_gemm_tc_scaled_acc"(
        A::input("a"), A::input("b"), A::inout("c"), A::u32("m"), A::u32("n"), A::u32("k"), A::f32("scale"))
}

declare_kernel! {
    /// `out[i] = bf16(out[i] + scale · x[i])` with `u = scale · x` and the sum
    /// each rounded to f32 (no FMA). `n` even. The unfused twin of
    /// [`DENSE_GEMM_TC_SCALED_ACC`]'s epilogue.
    SCALED_ADD_BF16 = "gemm"::"scaled_add_bf16"(A::inout("out"), A::input("x"), A::u32("n"), A::f32("scale"))
}

declare_kernel! {
    /// Split-K GEMM: `c[m, n] = bf16(Σ_s P[s, m, n])` with the partial sums
    /// `P[s, m, n] = Σ_{k ∈ chunk s} a[m,k]·b[n,k]` in f32, chunk `s` =
    /// `[s·⌈K/splits⌉, min(K, (s+1)·⌈K/splits⌉))` (empty past K, its sums 0),
    /// K order within a chunk free, and the partials added from +0 in s
    /// order. `1 ≤ splits ≤` [`SPLITK_MAX_SPLITS`]; K and N even. The
    /// partials live in backend workspace (`splits · M · N` f32), never in a
    /// caller's buffer.
    DENSE_GEMM_SPLITK_BF16 = "gemm"::"dense_gemm_splitk_bf16"=> &gemm_args!(A::u32("splits"))
}

declare_kernel! {
    /// Pipelined tensor-core GEMM: same contract as [`DENSE_GEMM_TC`] (f32
    /// accumulation in any K order, `c = bf16(acc)`), though not its bits:
    /// on CUDA, multi-stage cp.async and mma.sync over 128×128 tiles, or on
    /// a Hopper device at prefill sizes wgmma fed by TMA (`gemm_sm90.cu`,
    /// [`WGMMA_MIN_M`]), whose K order differs again. K % 8 == 0, N even.
    DENSE_GEMM_BF16_PIPELINED = "gemm"::"dense_gemm_bf16_pipelined"=> &gemm_args!()
}

/// CUDA: one block per `cols × rows` output tile.
fn cuda_tiles(a: &PlanArgs, cols: u64, rows: u64, block: [u32; 3]) -> Result<CudaPlan> {
    let (m, n) = (u64::from(a.u32("m")?), u64::from(a.u32("n")?));
    Ok(CudaPlan::single(a.kernel, [groups(a.kernel, n, cols)?, groups(a.kernel, m, rows)?, 1], block))
}

/// 16 × 16 tiles, a thread per output element.
fn cuda_dense_gemm_bf16(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    cuda_tiles(a, 16, 16, [16, 16, 1])
}

/// Largest M of the router's decode entry. Its blocks hold at most 32
/// outputs, and at that tile (12 staged rows, 135 KB at K = 2816) one block
/// per multiprocessor, so it takes about `M·N / (32·SMs)` waves of one
/// staging and four warp chains; the prefill entry covers up to 16·SMs·64
/// outputs in one wave of ~170 us at that K (measured at M = 1, when the
/// router's order was the strict k chain). 64 keeps the decode entry to
/// the sizes it was measured at.
const ROUTER_CHAIN_MAX_M: u32 = 64;
/// Most outputs per block of the decode entry: four for each of its 8 warps.
const ROUTER_CHAIN_MAX_OUTPUTS: u64 = 32;

/// `router_chain_ld` in gemm.cu: a staged row's stride in f32.
fn router_chain_ld(k: u64) -> u64 {
    k.div_ceil(32) * 32 + 4
}

/// The router decode entry's tile `(rows, columns)` over an `m × n` output,
/// on both GPU backends: from `start`, doubling the columns while the tile
/// is no taller than wide (within M and N), else the rows, while the launch
/// has more than `target` blocks and the next tile still `fits`.
fn grow_router_tile(m: u64, n: u64, start: (u64, u64), target: u64, fits: impl Fn(u64, u64) -> bool) -> (u64, u64) {
    let (mut tr, mut tc) = start;
    while m.div_ceil(tr) * n.div_ceil(tc) > target {
        let next = if tc < n && (tc <= tr || tr >= m) {
            (tr, tc * 2)
        } else if tr < m {
            (tr * 2, tc)
        } else {
            break;
        };
        if !fits(next.0, next.1) {
            break;
        }
        (tr, tc) = next;
    }
    (tr, tc)
}

/// M ≤ [`ROUTER_CHAIN_MAX_M`]: `dense_gemm_router_chain`, a warp per output
/// (its lanes the router order's partials) over A and B rows staged whole in
/// shared memory.
/// The tile starts at one output and doubles (columns first while the tile is
/// no taller than wide, within M and N) only while there are more blocks than
/// multiprocessors, so that every chain starts in the first wave and each
/// block loads as little as possible; the kernel reads the tile back from the
/// grid (`TC = ⌈N / grid.x⌉`, `TR = ⌈M / grid.y⌉`) and the shared memory is
/// sized for exactly that tile. Larger M, or a K whose single-output tile
/// would not fit in shared memory: the 64-column × 16-row tile kernel, four
/// columns per thread.
fn cuda_dense_gemm_router(a: &PlanArgs, f: &DeviceFacts) -> Result<CudaPlan> {
    let (m, n, k) = (u64::from(a.u32("m")?), u64::from(a.u32("n")?), u64::from(a.u32("k")?));
    let shared = |tr: u64, tc: u64| (tr + tc) * router_chain_ld(k) * 4;
    let fits = |tr: u64, tc: u64| tr * tc <= ROUTER_CHAIN_MAX_OUTPUTS && shared(tr, tc) <= u64::from(f.max_shared_bytes);
    if m == 0 || n == 0 || m > u64::from(ROUTER_CHAIN_MAX_M) || !fits(1, 1) {
        return cuda_tiles(a, 64, 16, [16, 16, 1]);
    }
    let (tr, tc) = grow_router_tile(m, n, (1, 1), u64::from(f.multiprocessors.max(1)), fits);
    let grid = [groups(a.kernel, n, tc)?, groups(a.kernel, m, tr)?, 1];
    // The tile the kernel derives from the grid: never larger than (tr, tc).
    let (tr, tc) = (m.div_ceil(u64::from(grid[1])), n.div_ceil(u64::from(grid[0])));
    let shared_bytes = u32::try_from(shared(tr, tc)).expect("checked against max_shared_bytes");
    Ok(CudaPlan { passes: vec![CudaPass { entry: "dense_gemm_router_chain", grid, block: [256, 1, 1], shared_bytes }], workspace_bytes: 0 })
}

/// 64 × 16 tiles, four warps of mma.sync (dense_gemm_tc and its scaled-add twin).
fn cuda_tensor_core(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    cuda_tiles(a, 64, 16, [128, 1, 1])
}

/// Smallest M that takes the Hopper (wgmma + TMA) plan of
/// [`DENSE_GEMM_BF16_PIPELINED`]: the prefill sizes it was built and
/// measured for (issue 13: M = 512 and 4096).
pub const WGMMA_MIN_M: u32 = 512;

/// The wgmma entries of `gemm_sm90.cu`: (entry, columns per tile BN, ring
/// stages), in the order ties are settled. 224 columns: 21504 = 96 · 224, so
/// at M = 512 the 384 tiles fill 2.9 waves of 132 SMs, where 256 columns
/// leave 336 tiles in 2.5 (the last wave half idle).
const WGMMA_ENTRIES: [(&str, u32, u32); 3] = [
    ("gemm_sm90::dense_gemm_wgmma_n256", 256, 4),
    ("gemm_sm90::dense_gemm_wgmma_n192", 192, 5),
    ("gemm_sm90::dense_gemm_wgmma_n224", 224, 5),
];
/// Rows per wgmma tile, and K per ring stage.
const WGMMA_BM: u32 = 128;
const WGMMA_BK: u32 = 64;

/// Dynamic shared memory of a wgmma entry: the ring (A and B slices per
/// stage), its 2·stages mbarriers, and 1024 bytes to align the ring to the
/// 128-byte swizzle's atom (`wgmma_gemm` in gemm_sm90.cu).
fn wgmma_shared_bytes(bn: u32, stages: u32) -> u32 {
    stages * (WGMMA_BM + bn) * WGMMA_BK * 2 + 16 * stages + 1024
}

/// The wgmma entry (index into [`WGMMA_ENTRIES`]) for an `m × n` output on
/// `sms` multiprocessors: the one whose persistent waves of tiles take the
/// fewest tile-columns in all (⌈tiles / SMs⌉ · BN, a tile's time being
/// about proportional to its width). A later entry must beat the best so
/// far by more than 1/16: a narrower tile moves more operand bytes per
/// FLOP (224 columns: 5% more than 256), which a wave filled a few percent
/// better does not pay for (4096 × 8192: 1184 tiles of 224 in 9 waves
/// against 1024 of 256 in 8, 1.6% fewer tile-columns, stays at 256).
fn wgmma_choice(m: u32, n: u32, sms: u32) -> usize {
    let cost = |bn: u32| {
        let tiles = u64::from(m.div_ceil(WGMMA_BM)) * u64::from(n.div_ceil(bn));
        tiles.div_ceil(u64::from(sms.max(1))) * u64::from(bn)
    };
    (1..WGMMA_ENTRIES.len()).fold(0, |best, i| if 16 * cost(WGMMA_ENTRIES[i].1) < 15 * cost(WGMMA_ENTRIES[best].1) { i } else { best })
}

/// Whether the Hopper plan takes this launch: the device runs sm_90a
/// entries, M is a prefill size, and the operands suit TMA (row strides a
/// multiple of 16 bytes, A and B 16-byte aligned) and the epilogue's bf16
/// pair stores (C 4-byte aligned, N even, as the contract says).
fn wgmma_fits(a: &PlanArgs, f: &DeviceFacts) -> Result<bool> {
    let (m, n, k) = (a.u32("m")?, a.u32("n")?, a.u32("k")?);
    let shared = WGMMA_ENTRIES.iter().map(|&(_, bn, st)| wgmma_shared_bytes(bn, st)).max().unwrap_or(0);
    Ok(f.cuda_sm90a
        && f.multiprocessors > 0
        && shared <= f.max_shared_bytes
        && m >= WGMMA_MIN_M
        && n >= 2
        && n % 2 == 0
        && k >= 8
        && k % 8 == 0
        && a.addr("a")? % 16 == 0
        && a.addr("b")? % 16 == 0
        && a.addr("c")? % 4 == 0)
}

/// Hopper (see [`wgmma_fits`]): a persistent grid of at most one block per
/// SM, 384 threads (a TMA producer warpgroup and two wgmma consumer
/// warpgroups over 128 × BN tiles). Otherwise 128 × 128 tiles, eight warps
/// of mma.sync.
fn cuda_dense_gemm_bf16_pipelined(a: &PlanArgs, f: &DeviceFacts) -> Result<CudaPlan> {
    if !wgmma_fits(a, f)? {
        return cuda_tiles(a, 128, 128, [256, 1, 1]);
    }
    let (m, n) = (a.u32("m")?, a.u32("n")?);
    let (entry, bn, stages) = WGMMA_ENTRIES[wgmma_choice(m, n, f.multiprocessors)];
    let tiles = u64::from(m.div_ceil(WGMMA_BM)) * u64::from(n.div_ceil(bn));
    let grid = u32::try_from(tiles.min(u64::from(f.multiprocessors))).expect("at most the SM count");
    let pass = CudaPass { entry, grid: [grid, 1, 1], block: [384, 1, 1], shared_bytes: wgmma_shared_bytes(bn, stages) };
    Ok(CudaPlan { passes: vec![pass], workspace_bytes: 0 })
}

/// The wgmma entries' tensor maps: A (`m × k`) in 128 × 64 boxes and B
/// (`n × k`) in BN × 64 boxes.
fn wgmma_maps<const BN: u32>(a: &PlanArgs) -> Result<Vec<TensorMap2d>> {
    let (m, n, k) = (u64::from(a.u32("m")?), u64::from(a.u32("n")?), u64::from(a.u32("k")?));
    Ok(vec![
        TensorMap2d { arg: "a", rows: m, cols: k, box_rows: WGMMA_BM, box_cols: WGMMA_BK },
        TensorMap2d { arg: "b", rows: n, cols: k, box_rows: BN, box_cols: WGMMA_BK },
    ])
}
inventory::submit! { CudaTensorMaps { module: "gemm_sm90", entry: "dense_gemm_wgmma_n256", maps: wgmma_maps::<256> } }
inventory::submit! { CudaTensorMaps { module: "gemm_sm90", entry: "dense_gemm_wgmma_n192", maps: wgmma_maps::<192> } }
inventory::submit! { CudaTensorMaps { module: "gemm_sm90", entry: "dense_gemm_wgmma_n224", maps: wgmma_maps::<224> } }

/// A thread per element pair.
fn cuda_scaled_add_bf16(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    Ok(CudaPlan::single(a.kernel, [groups(a.kernel, u64::from(a.u32("n")?), 512)?, 1, 1], [256, 1, 1]))
}

/// Bytes of the split-K partial sums: `splits · M · N` f32. Never 0: both
/// entries take the workspace parameter, which a backend binds only when the
/// plan asks for bytes, so an empty problem is refused rather than launched
/// with a parameter missing. Saturates: a size past u64 cannot come from any
/// arena, which refuses it.
fn splitk_workspace(a: &PlanArgs) -> Result<u64> {
    let mut bytes = 4u64;
    for name in ["m", "n", "splits"] {
        let v = a.u32(name)?;
        if v == 0 {
            return Err(Error::invalid(
                a.kernel.symbol,
                name,
                format!("{name} = 0: split-K needs a non-empty output and at least one chunk"),
            ));
        }
        bytes = bytes.saturating_mul(u64::from(v));
    }
    Ok(bytes)
}

/// Two passes over one workspace: the partials, a 16 × 16 tile per block and
/// the split on z; then the reduce, a thread per output element of row y.
fn cuda_dense_gemm_splitk_bf16(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    let k = a.kernel;
    let (m, n, splits) = (a.u32("m")?, u64::from(a.u32("n")?), a.u32("splits")?);
    Ok(CudaPlan {
        passes: vec![
            CudaPass {
                entry: "dense_gemm_splitk_bf16",
                grid: [groups(k, n, 16)?, groups(k, u64::from(m), 16)?, splits],
                block: [16, 16, 1],
                shared_bytes: 0,
            },
            CudaPass { entry: "dense_gemm_splitk_bf16_reduce", grid: [groups(k, n, 256)?, m, 1], block: [256, 1, 1], shared_bytes: 0 },
        ],
        workspace_bytes: splitk_workspace(a)?,
    })
}

cuda_plan!(DENSE_GEMM_BF16 => cuda_dense_gemm_bf16);
cuda_plan!(DENSE_GEMM_ROUTER => cuda_dense_gemm_router);
cuda_plan!(DENSE_GEMM_TC => cuda_tensor_core);
cuda_plan!(DENSE_GEMM_TC_SCALED_ACC => cuda_tensor_core);
cuda_plan!(DENSE_GEMM_BF16_PIPELINED => cuda_dense_gemm_bf16_pipelined);
cuda_plan!(SCALED_ADD_BF16 => cuda_scaled_add_bf16);
cuda_plan!(DENSE_GEMM_SPLITK_BF16 => cuda_dense_gemm_splitk_bf16);

/// Output rows and columns per workgroup of the tiled WGSL GEMMs (`TILE` in dense_tile_core.wgsli).
const WGSL_TILE: u64 = 128;
/// Largest M of the WGSL dense GEMMs' small path, and its columns per
/// workgroup (`SN` in dense_tile_core.wgsli).
const WGSL_SMALL_M: u32 = 16;
const WGSL_SMALL_COLS: u64 = 32;

/// WGSL geometry of the dense shaders: `(⌈N/128⌉, ⌈M/128⌉, gz)` tiles, or for
/// M ≤ 16 the small path `small` (⌈N/32⌉ workgroups, M as an override) with
/// the same strict k order, so the choice changes no result. Extras stay 0:
/// the scaled-add shaders OR x3 into a product to keep the driver from fusing
/// it into an FMA.
fn wgsl_dense_pass(a: &PlanArgs, tiled: &'static str, small: &'static str, gz: u32) -> Result<WgslPass> {
    let (m, n) = (a.u32("m")?, u64::from(a.u32("n")?));
    Ok(if m <= WGSL_SMALL_M {
        WgslPass { entry: small, grid: [groups(a.kernel, n, WGSL_SMALL_COLS)?, 1, gz], consts: vec![("M", m)], extra: [0; 4] }
    } else {
        let grid = [groups(a.kernel, n, WGSL_TILE)?, groups(a.kernel, u64::from(m), WGSL_TILE)?, gz];
        WgslPass { entry: tiled, grid, consts: vec![], extra: [0; 4] }
    })
}

/// Workgroups the WGSL router's decode entry aims for: wgpu reports no
/// compute-unit count, so this stands in for the multiprocessors CUDA plans
/// with (132 on the H200).
const WGSL_ROUTER_GROUPS: u64 = 128;
/// Staging words of `dense_gemm_router_chain` (the `RC_WORDS` override in
/// dense_gemm.wgsl): the adapter's workgroup storage, at least 16 KiB (what
/// every wgpu adapter grants; below it the tiled shader, which needs as
/// much, runs) and at most 64 KiB. One value per device, so one pipeline.
/// The partials of the tile's outputs go through the same words after the
/// last piece (a vec4 each, 32 outputs · 32 partials · 4 words = 4096).
const WGSL_ROUTER_MIN_WORDS: u32 = 4096;
const WGSL_ROUTER_MAX_WORDS: u32 = 16384;
/// Output rows and columns per workgroup of the WGSL router's tiled entry
/// (`RT` in dense_gemm.wgsl).
const WGSL_ROUTER_TILE: u64 = 64;

/// The router. M ≤ [`ROUTER_CHAIN_MAX_M`]: `dense_gemm_router_chain`, the WGSL
/// twin of CUDA's decode entry (see [`cuda_dense_gemm_router`]): 32
/// invocations per output run router_dot's partials over the tile's A and B
/// rows staged as packed bf16 in workgroup memory (a vec4 per 8-wide chunk),
/// then one adds them in its tree. The tile starts at 1 × 2 (TC even: an
/// invocation stores a column pair as one word) and doubles like CUDA's
/// (columns first while no taller than wide, at most 32 outputs: four for
/// each 32 invocations) only while there are more than
/// [`WGSL_ROUTER_GROUPS`] workgroups; K goes through the staging in pieces
/// of `x2` chunks a row (at row stride `x2`). Geometry at K = 2816, N = 128
/// with 48 KiB of workgroup storage (the H200 under Vulkan): M = 1 is 64
/// workgroups of 1 × 2 and M = 16 is 128 workgroups of 4 × 4, each staging K
/// whole (one barrier, then the chains); with 16 KiB the same tiles take 2
/// and 3 pieces. Larger M: `dense_gemm_router`, router_dot's order over
/// 64 × 64 tiles (never the strict-order shaders, whose sums differ).
fn wgsl_dense_gemm_router(a: &PlanArgs, f: &DeviceFacts) -> Result<WgslPlan> {
    let (m, n, k) = (u64::from(a.u32("m")?), u64::from(a.u32("n")?), u64::from(a.u32("k")?));
    let words = (f.max_shared_bytes / 4).min(WGSL_ROUTER_MAX_WORDS);
    if m == 0 || n < 2 || k < 2 || m > u64::from(ROUTER_CHAIN_MAX_M) || words < WGSL_ROUTER_MIN_WORDS {
        let grid = [groups(a.kernel, n, WGSL_ROUTER_TILE)?, groups(a.kernel, m, WGSL_ROUTER_TILE)?, 1];
        let pass = WgslPass { entry: "dense_gemm_router", grid, consts: vec![], extra: [0; 4] };
        return Ok(WgslPlan { passes: vec![pass], workspace_bytes: 0, arrivals: 0 });
    }
    let (tr, tc) = grow_router_tile(m, n, (1, 2), WGSL_ROUTER_GROUPS, |tr, tc| tr * tc <= ROUTER_CHAIN_MAX_OUTPUTS);
    let grid = [groups(a.kernel, n, tc)?, groups(a.kernel, m, tr)?, 1];
    // The chunks a staged row holds: the most that fit, at most K's.
    let cw = (u64::from(words) / 4 / (tr + tc)).min(k.div_ceil(ROUTER_CHUNK as u64));
    let extra = [tr as u32, tc as u32, cw as u32, 0];
    let pass = WgslPass { entry: "dense_gemm_router_chain", grid, consts: vec![("RC_WORDS", words)], extra };
    Ok(WgslPlan { passes: vec![pass], workspace_bytes: 0, arrivals: 0 })
}

/// The three strict-order kernels of dense_gemm.wgsl (one entry each, one small path).
fn wgsl_dense(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    Ok(WgslPlan { passes: vec![wgsl_dense_pass(a, a.kernel.symbol, "dense_gemm_small", 1)?], workspace_bytes: 0, arrivals: 0 })
}

/// Workgroup memory of `dense_gemm_coop`: two stages of A and B tiles
/// (2 · 2 · 128 rows · 80 bytes) and the 8 subgroups' 16 × 16 f32 blocks.
const COOPMAT_SHARED_BYTES: u32 = 2 * 2 * 128 * 80 + 8 * 16 * 16 * 4;

/// Workspace bytes of the cooperative-matrix path of
/// `dense_gemm_bf16_pipelined` (dense_coopmat.wgsli): the M + N row
/// exponents as f16 rounded up to a vec4, then the f16 copies of A and B.
fn coopmat_workspace(m: u64, n: u64, k: u64) -> u64 {
    (m + n).div_ceil(4) * 8 + (m + n) * k * 2
}

/// `dense_gemm_bf16_pipelined`: where the device has cooperative matrices
/// ([`DeviceFacts::wgsl_coopmat`]) and M > 16, the f16 matrix-unit path of
/// dense_coopmat.wgsli: `dense_coop_scales` (a workgroup per row of A and of
/// B, M + N of them, writing the rows' power-of-two exponents to the
/// workspace), `dense_coop_convert` (the scaled f16 copies of A and B, an
/// invocation per 8 halves) and `dense_gemm_coop` over (⌈N/128⌉, ⌈M/128⌉)
/// tiles. Its contract (both operands to f16 after exact per-row
/// power-of-two scaling, f32 accumulation) keeps the catalogue's NMSE ≤ 1e-6.
/// Otherwise, for the small path, on an adapter with less workgroup memory
/// than [`COOPMAT_SHARED_BYTES`], and where the copies do not fit one
/// storage binding (the shaders address the workspace in u32 indices of
/// vec4<f16> too): today's f32 tiles.
fn wgsl_dense_gemm_pipelined(a: &PlanArgs, f: &DeviceFacts) -> Result<WgslPlan> {
    let kernel = a.kernel;
    let (m, n, k) = (u64::from(a.u32("m")?), u64::from(a.u32("n")?), u64::from(a.u32("k")?));
    let workspace_bytes = coopmat_workspace(m, n, k);
    let fits = workspace_bytes <= f.max_binding_bytes && workspace_bytes / 8 <= u64::from(u32::MAX);
    if !f.wgsl_coopmat || m <= u64::from(WGSL_SMALL_M) || f.max_shared_bytes < COOPMAT_SHARED_BYTES || !fits {
        return wgsl_dense(a, f);
    }
    let rows = m + n;
    let scales = WgslPass { entry: "dense_coop_scales", grid: [groups(kernel, rows, 1)?, 1, 1], consts: vec![], extra: [0; 4] };
    let convert = WgslPass { entry: "dense_coop_convert", grid: [groups(kernel, rows * k / 8, 256)?, 1, 1], consts: vec![], extra: [0; 4] };
    let grid = [groups(kernel, n, WGSL_TILE)?, groups(kernel, m, WGSL_TILE)?, 1];
    let gemm = WgslPass { entry: "dense_gemm_coop", grid, consts: vec![], extra: [0; 4] };
    Ok(WgslPlan { passes: vec![scales, convert, gemm], workspace_bytes, arrivals: 0 })
}

fn wgsl_dense_gemm_tc_scaled_acc(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    Ok(WgslPlan {
        passes: vec![wgsl_dense_pass(a, a.kernel.symbol, "dense_gemm_tc_scaled_acc_small", 1)?],
        workspace_bytes: 0,
        arrivals: 0,
    })
}

/// A thread per element pair, 256-thread workgroups.
fn wgsl_scaled_add_bf16(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    Ok(WgslPlan::single(a.kernel, [groups(a.kernel, u64::from(a.u32("n")?), 512)?, 1, 1]))
}

/// The partials with the split on z (the shader reads `wid.z`, and a 3-D
/// grid never folds into z), then the reduce, a thread per output word.
/// The shaders index the workspace with u32 words, and it must fit one binding.
fn wgsl_dense_gemm_splitk_bf16(a: &PlanArgs, f: &DeviceFacts) -> Result<WgslPlan> {
    let k = a.kernel;
    let (m, n, splits) = (u64::from(a.u32("m")?), u64::from(a.u32("n")?), a.u32("splits")?);
    let workspace_bytes = splitk_workspace(a)?;
    if workspace_bytes / 4 > u64::from(u32::MAX) || workspace_bytes > f.max_binding_bytes {
        return Err(Error::invalid(
            k.symbol,
            "splits",
            format!(
                "splits · m · n = {} partial sums exceed the WGSL workspace (u32 word index, {}-byte bindings)",
                workspace_bytes / 4,
                f.max_binding_bytes
            ),
        ));
    }
    let partial = wgsl_dense_pass(a, k.symbol, "dense_gemm_splitk_bf16_small", splits)?;
    let reduce =
        WgslPass { entry: "dense_gemm_splitk_bf16_reduce", grid: [groups(k, m * n / 2, 256)?, 1, 1], consts: vec![], extra: [0; 4] };
    Ok(WgslPlan { passes: vec![partial, reduce], workspace_bytes, arrivals: 0 })
}

wgsl_plan!(DENSE_GEMM_BF16, "gemm/dense_gemm.wgsl" => wgsl_dense);
wgsl_plan!(DENSE_GEMM_ROUTER, "gemm/dense_gemm.wgsl" => wgsl_dense_gemm_router);
wgsl_plan!(DENSE_GEMM_TC, "gemm/dense_gemm.wgsl" => wgsl_dense);
wgsl_plan!(DENSE_GEMM_BF16_PIPELINED, "gemm/dense_gemm.wgsl" => wgsl_dense_gemm_pipelined);
wgsl_plan!(DENSE_GEMM_TC_SCALED_ACC, "gemm/dense_gemm_tc_scaled_acc.wgsl" => wgsl_dense_gemm_tc_scaled_acc);
wgsl_plan!(SCALED_ADD_BF16, "gemm/scaled_add_bf16.wgsl" => wgsl_scaled_add_bf16);
wgsl_plan!(DENSE_GEMM_SPLITK_BF16, "gemm/dense_gemm_splitk_bf16.wgsl" => wgsl_dense_gemm_splitk_bf16);

/// Checks the shape rules shared by the dense kernels; returns the u32 args.
fn dense_shape(kernel: &str, m: usize, n: usize, k: usize, k_multiple: usize) -> Result<[u32; 3]> {
    for (name, v) in [("m", m), ("n", n), ("k", k)] {
        require(v > 0 && u32::try_from(v).is_ok(), kernel, name, || format!("{name} = {v} must be in 1..2^32"))?;
    }
    require(n % 2 == 0, kernel, "n", || format!("n = {n} must be even (bf16 output rows are written in pairs)"))?;
    require(k % k_multiple == 0, kernel, "k", || format!("k = {k} must be a multiple of {k_multiple} (16-byte row loads)"))?;
    Ok([m as u32, n as u32, k as u32])
}

impl Ops {
    /// The launch shared by the kernels whose arguments are exactly `a, b, c, m, n, k`.
    #[allow(clippy::too_many_arguments)]
    fn dense(
        &self,
        sig: &'static KernelSig,
        a: Region,
        b: Region,
        c: Region,
        m: usize,
        n: usize,
        k: usize,
        k_multiple: usize,
    ) -> Result<()> {
        let [mu, nu, ku] = dense_shape(sig.symbol, m, n, k, k_multiple)?;
        self.launch(sig, &dense_operands(a, b, c, [m, n, k], [mu, nu, ku]))
    }

    /// See [`DENSE_GEMM_BF16`].
    pub fn dense_gemm_bf16(&self, a: Region, b: Region, c: Region, m: usize, n: usize, k: usize) -> Result<()> {
        self.dense(&DENSE_GEMM_BF16, a, b, c, m, n, k, 2)
    }

    /// See [`DENSE_GEMM_ROUTER`].
    pub fn dense_gemm_router(&self, a: Region, b: Region, c: Region, m: usize, n: usize, k: usize) -> Result<()> {
        self.dense(&DENSE_GEMM_ROUTER, a, b, c, m, n, k, 2)
    }

    /// See [`DENSE_GEMM_TC`].
    pub fn dense_gemm_tc(&self, a: Region, b: Region, c: Region, m: usize, n: usize, k: usize) -> Result<()> {
        self.dense(&DENSE_GEMM_TC, a, b, c, m, n, k, 8)
    }

    /// See [`DENSE_GEMM_BF16_PIPELINED`].
    pub fn dense_gemm_bf16_pipelined(&self, a: Region, b: Region, c: Region, m: usize, n: usize, k: usize) -> Result<()> {
        self.dense(&DENSE_GEMM_BF16_PIPELINED, a, b, c, m, n, k, 8)
    }

    /// The prefill GEMM: the pipelined tensor-core kernel where this backend
    /// implements it and the shape allows (K % 8 == 0), else the simple kernel.
    pub fn dense_gemm_prefill(&self, a: Region, b: Region, c: Region, m: usize, n: usize, k: usize) -> Result<()> {
        if registry::implements(self.be.kind(), &DENSE_GEMM_BF16_PIPELINED) && k % 8 == 0 {
            self.dense_gemm_bf16_pipelined(a, b, c, m, n, k)
        } else {
            self.dense_gemm_bf16(a, b, c, m, n, k)
        }
    }

    /// See [`DENSE_GEMM_TC_SCALED_ACC`].
    #[allow(clippy::too_many_arguments)]
    pub fn dense_gemm_tc_scaled_acc(&self, a: Region, b: Region, c: Region, m: usize, n: usize, k: usize, scale: f32) -> Result<()> {
        let s = DENSE_GEMM_TC_SCALED_ACC.symbol;
        let [mu, nu, ku] = dense_shape(s, m, n, k, 8)?;
        require(scale.is_finite(), s, "scale", || format!("scale = {scale} must be finite"))?;
        let [a, b, c, mu, nu, ku] = dense_operands(a, b, c, [m, n, k], [mu, nu, ku]);
        self.launch(&DENSE_GEMM_TC_SCALED_ACC, &[a, b, c, mu, nu, ku, scalar(F(scale))])
    }

    /// See [`SCALED_ADD_BF16`].
    pub fn scaled_add_bf16(&self, out: Region, x: Region, n: usize, scale: f32) -> Result<()> {
        let s = SCALED_ADD_BF16.symbol;
        require(n > 0 && n % 2 == 0 && u32::try_from(n).is_ok(), s, "n", || format!("n = {n} must be positive, even and < 2^32"))?;
        require(scale.is_finite(), s, "scale", || format!("scale = {scale} must be finite"))?;
        self.launch(&SCALED_ADD_BF16, &[region(out, bf16s(n)), region(x, bf16s(n)), scalar(U(n as u32)), scalar(F(scale))])
    }

    /// See [`DENSE_GEMM_SPLITK_BF16`].
    #[allow(clippy::too_many_arguments)]
    pub fn dense_gemm_splitk_bf16(&self, a: Region, b: Region, c: Region, m: usize, n: usize, k: usize, splits: usize) -> Result<()> {
        let s = DENSE_GEMM_SPLITK_BF16.symbol;
        let [mu, nu, ku] = dense_shape(s, m, n, k, 2)?;
        require((1..=k).contains(&splits) && splits <= SPLITK_MAX_SPLITS, s, "splits", || {
            format!("splits = {splits} must be in 1..=min(k, {SPLITK_MAX_SPLITS})")
        })?;
        let [a, b, c, mu, nu, ku] = dense_operands(a, b, c, [m, n, k], [mu, nu, ku]);
        self.launch(&DENSE_GEMM_SPLITK_BF16, &[a, b, c, mu, nu, ku, scalar(U(splits as u32))])
    }
}

/// The arguments every dense GEMM starts with: `a [m, k]`, `b [n, k]`,
/// `c [m, n]` (bf16) and the checked `m, n, k` as u32.
fn dense_operands(a: Region, b: Region, c: Region, [m, n, k]: [usize; 3], [mu, nu, ku]: [u32; 3]) -> [LaunchArg; 6] {
    [
        region(a, bf16s(saturating_product(&[m, k]))),
        region(b, bf16s(saturating_product(&[n, k]))),
        region(c, bf16s(saturating_product(&[m, n]))),
        scalar(U(mu)),
        scalar(U(nu)),
        scalar(U(ku)),
    ]
}

/// (M, N, K): M = 1, M not a multiple of 16, K not a multiple of 64, N not a multiple of 16.
pub(crate) const SHAPES: [(usize, usize, usize); 4] = [(1, 64, 64), (17, 40, 72), (33, 130, 200), (70, 96, 136)];

/// Random GEMM operands: `(a bytes, b bytes)` with non-zero values.
pub(crate) fn operands(g: &mut Gen, m: usize, n: usize, k: usize) -> (Vec<u8>, Vec<u8>) {
    (g.bf16(m * k, 0.01, 1.0).1, g.bf16(n * k, 0.01, 0.5).1)
}

type DenseLaunch = fn(&Ops, Region, Region, Region, usize, usize, usize) -> Result<()>;

fn dense_cases(g: &mut Gen, sig: &'static KernelSig, tol: Tolerance, launch: DenseLaunch) -> Vec<Case> {
    SHAPES
        .iter()
        .map(|&(m, n, k)| {
            let (a, b) = operands(g, m, n, k);
            Case {
                kernel: sig,
                label: format!("m={m} n={n} k={k}"),
                buffers: vec![Buffer::input("a", a), Buffer::input("b", b), Buffer::output("c", DType::BF16, m * n, tol.clone())],
                run: Box::new(move |o, x| launch(o, x[0], x[1], x[2], m, n, k)),
            }
        })
        .collect()
}

fn bf16_cases(g: &mut Gen) -> Vec<Case> {
    dense_cases(g, &DENSE_GEMM_BF16, Tolerance::Exact, Ops::dense_gemm_bf16)
}
/// The shared shapes, plus the decode entries at the MoE router's real
/// sizes (M = 1 and 16, K = 2816, N = 128), and a ragged one: K % 8 = 6
/// (4-byte loads, two k past the last float4) with M and N that leave the
/// last tile row and column partly out of range.
fn router_cases(g: &mut Gen) -> Vec<Case> {
    let mut v = dense_cases(g, &DENSE_GEMM_ROUTER, Tolerance::Exact, Ops::dense_gemm_router);
    let case = |label: String, (m, n, k), a, b| Case {
        kernel: &DENSE_GEMM_ROUTER,
        label,
        buffers: vec![Buffer::input("a", a), Buffer::input("b", b), Buffer::output("c", DType::BF16, m * n, Tolerance::Exact)],
        run: Box::new(move |o, x| o.dense_gemm_router(x[0], x[1], x[2], m, n, k)),
    };
    for (m, n, k) in [(1, 128, 2816), (16, 128, 2816), (5, 130, 1030)] {
        let (a, b) = operands(g, m, n, k);
        v.push(case(format!("m={m} n={n} k={k}"), (m, n, k), a, b));
    }
    // Operands whose every output is exactly 0 plus its order's rounding
    // error (parity::mirror_halves), so only the router order passes: the
    // decode entry at M = 1 and 16, a short last chunk, and the tiles.
    for (m, n, k) in [(1, 128, 2816), (16, 128, 2816), (5, 130, 2822), (130, 130, 2816)] {
        let (mut a, mut b) = (g.binades(m * k, -4, 4), g.binades(n * k, -8, 8));
        let perm = g.permutation(k / 2);
        mirror_halves(&perm, &mut a, k, false);
        mirror_halves(&perm, &mut b, k, true);
        v.push(case(
            format!("cancelling m={m} n={n} k={k}"),
            (m, n, k),
            switchyard_core::codec::bytes::bf16_bytes(&a),
            switchyard_core::codec::bytes::bf16_bytes(&b),
        ));
    }
    v
}
fn tc_cases(g: &mut Gen) -> Vec<Case> {
    dense_cases(g, &DENSE_GEMM_TC, Tolerance::Nmse(REORDERED_NMSE), Ops::dense_gemm_tc)
}
fn pipelined_cases(g: &mut Gen) -> Vec<Case> {
    let mut v = dense_cases(g, &DENSE_GEMM_BF16_PIPELINED, Tolerance::Nmse(REORDERED_NMSE), Ops::dense_gemm_bf16_pipelined);
    // A full 128×128 tile plus ragged edges in both directions; then, at
    // M ≥ WGMMA_MIN_M (the Hopper plan on CUDA), ragged edges past its
    // 128-row, 256- and 192-column tiles and a K of three whole 64-wide
    // slices and a part one (zeros from the tensor maps past K); a shape
    // whose plan on 132 SMs is the 224-column tile (15 × 7 tiles in one
    // wave; 256 columns take the same wave wider, 192 two waves).
    for (m, n, k) in [(200, 260, 256), (600, 520, 200), (1920, 1568, 72)] {
        let (a, b) = operands(g, m, n, k);
        v.push(Case {
            kernel: &DENSE_GEMM_BF16_PIPELINED,
            label: format!("m={m} n={n} k={k}"),
            buffers: vec![
                Buffer::input("a", a),
                Buffer::input("b", b),
                Buffer::output("c", DType::BF16, m * n, Tolerance::Nmse(REORDERED_NMSE)),
            ],
            run: Box::new(move |o, x| o.dense_gemm_bf16_pipelined(x[0], x[1], x[2], m, n, k)),
        });
    }
    // The range protection of the f16 path (wgpu with cooperative matrices,
    // M > 16; dense_coopmat.wgsli): operands far outside f16's range, each
    // case on its own so that NMSE sees the rows it is about. Whole A below
    // f16's smallest subnormal (2^-24) or past its largest value (65504), B
    // with rows 2^24 apart, and rows of A 2^±40 from one another with a
    // 2^-24 element spread inside each row (still exact after the row's
    // scaling). Ragged in M, N and K (K % 32 = 8).
    let (m, n, k) = (150, 136, 264);
    // (label, exponent of A's row r, of B's row r, of A's column c)
    type Exp = fn(usize) -> i32;
    let stress: [(&str, Exp, Exp, Exp); 4] = [
        ("a·2^-40", |_| -40, |_| 0, |_| 0),
        ("a·2^24", |_| 24, |_| 0, |_| 0),
        ("b rows 2^-12 / 2^12", |_| 0, |r| if r % 2 == 0 { -12 } else { 12 }, |_| 0),
        ("a rows 2^-40..2^40, 2^-24 spread in a row", |r| (r % 5) as i32 * 20 - 40, |_| 0, |c| -((c % 4) as i32) * 8),
    ];
    for (what, a_row, b_row, a_col) in stress {
        let (mut a, mut b) = operands(g, m, n, k);
        scale_bf16(&mut a, k, |r, c| a_row(r) + a_col(c));
        scale_bf16(&mut b, k, |r, _| b_row(r));
        v.push(Case {
            kernel: &DENSE_GEMM_BF16_PIPELINED,
            label: format!("m={m} n={n} k={k} {what}"),
            buffers: vec![
                Buffer::input("a", a),
                Buffer::input("b", b),
                Buffer::output("c", DType::BF16, m * n, Tolerance::Nmse(REORDERED_NMSE)),
            ],
            run: Box::new(move |o, x| o.dense_gemm_bf16_pipelined(x[0], x[1], x[2], m, n, k)),
        });
    }
    v
}

/// Multiplies element (r, c) of a row-major bf16 matrix with `cols` columns
/// by `2^e(r, c)`: exact for the normal results the cases ask for.
fn scale_bf16(bytes: &mut [u8], cols: usize, e: impl Fn(usize, usize) -> i32) {
    for (i, h) in bytes.chunks_exact_mut(2).enumerate() {
        let x = f32::from_bits(u32::from(u16::from_le_bytes([h[0], h[1]])) << 16) * 2f32.powi(e(i / cols, i % cols));
        h.copy_from_slice(&((x.to_bits() >> 16) as u16).to_le_bytes());
    }
}

fn scaled_acc_cases(g: &mut Gen) -> Vec<Case> {
    SHAPES
        .iter()
        .map(|&(m, n, k)| {
            let (a, b) = operands(g, m, n, k);
            let (_, c0) = g.bf16(m * n, 0.5, 2.0);
            Case {
                kernel: &DENSE_GEMM_TC_SCALED_ACC,
                label: format!("m={m} n={n} k={k} scale=0.37"),
                buffers: vec![
                    Buffer::input("a", a),
                    Buffer::input("b", b),
                    Buffer::inout("c", c0, DType::BF16, Tolerance::Nmse(REORDERED_NMSE)),
                ],
                run: Box::new(move |o, x| o.dense_gemm_tc_scaled_acc(x[0], x[1], x[2], m, n, k, 0.37)),
            }
        })
        .collect()
}

fn scaled_add_cases(g: &mut Gen) -> Vec<Case> {
    [2usize, 1030, 70000]
        .into_iter()
        .map(|n| {
            let (_, out) = g.bf16(n, 0.5, 2.0);
            let (_, x) = g.bf16(n, 0.01, 3.0);
            Case {
                kernel: &SCALED_ADD_BF16,
                label: format!("n={n} scale=-1.7"),
                buffers: vec![Buffer::inout("out", out, DType::BF16, Tolerance::Exact), Buffer::input("x", x)],
                run: Box::new(move |o, a| o.scaled_add_bf16(a[0], a[1], n, -1.7)),
            }
        })
        .collect()
}

/// The shared shapes with 1, 3, 4 and 7 splits, plus splits whose last
/// chunks start past K (k = 8 and 24 in 7 chunks of 2 and 4: the trailing
/// partials are empty and must add +0), on both WGSL paths (M ≤ 16 and tiled).
fn splitk_cases(g: &mut Gen) -> Vec<Case> {
    SHAPES
        .iter()
        .zip([1usize, 3, 4, 7])
        .map(|(&(m, n, k), splits)| (m, n, k, splits))
        .chain([(3, 4, 8, 7), (20, 40, 24, 7)])
        .map(|(m, n, k, splits)| {
            let (a, b) = operands(g, m, n, k);
            Case {
                kernel: &DENSE_GEMM_SPLITK_BF16,
                label: format!("m={m} n={n} k={k} splits={splits}"),
                buffers: vec![
                    Buffer::input("a", a),
                    Buffer::input("b", b),
                    Buffer::output("c", DType::BF16, m * n, Tolerance::Nmse(REORDERED_NMSE)),
                ],
                run: Box::new(move |o, x| o.dense_gemm_splitk_bf16(x[0], x[1], x[2], m, n, k, splits)),
            }
        })
        .collect()
}

inventory::submit! { CaseSet { kernel: &DENSE_GEMM_BF16, cases: bf16_cases } }
inventory::submit! { CaseSet { kernel: &DENSE_GEMM_ROUTER, cases: router_cases } }
inventory::submit! { CaseSet { kernel: &DENSE_GEMM_TC, cases: tc_cases } }
inventory::submit! { CaseSet { kernel: &DENSE_GEMM_BF16_PIPELINED, cases: pipelined_cases } }
inventory::submit! { CaseSet { kernel: &DENSE_GEMM_TC_SCALED_ACC, cases: scaled_acc_cases } }
inventory::submit! { CaseSet { kernel: &SCALED_ADD_BF16, cases: scaled_add_cases } }
inventory::submit! { CaseSet { kernel: &DENSE_GEMM_SPLITK_BF16, cases: splitk_cases } }

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{cuda_kernel, wgsl_kernel};

    const FACTS: DeviceFacts = DeviceFacts { max_binding_bytes: 1 << 31, cuda_sm90a: false, cuda_clusters: false, ..crate::plan::H200 };

    fn args(sig: &'static KernelSig, m: u32, n: u32, k: u32, splits: u32) -> Vec<switchyard_core::Arg> {
        sig.args
            .iter()
            .map(|a| match a.name {
                "m" => U(m),
                "n" => U(n),
                "k" => U(k),
                "splits" => U(splits),
                "scale" => F(1.0),
                _ => P(256),
            })
            .collect()
    }

    fn cuda(sig: &'static KernelSig, m: u32, n: u32, splits: u32) -> Result<CudaPlan> {
        let a = args(sig, m, n, 64, splits);
        (cuda_kernel(sig).expect("registered").plan)(&PlanArgs::new(sig, &a), &FACTS)
    }

    /// The grids and blocks the launchers computed before plans existed, written out by hand.
    #[test]
    fn cuda_plans_keep_the_launcher_geometry() {
        let (m, n) = (300u32, 1030u32);
        let one = |sig, grid, block| {
            let p = cuda(sig, m, n, 1).unwrap();
            assert_eq!((p.passes.len(), p.passes[0].grid, p.passes[0].block, p.workspace_bytes), (1, grid, block, 0), "{}", sig.symbol);
        };
        one(&DENSE_GEMM_BF16, [65, 19, 1], [16, 16, 1]);
        one(&DENSE_GEMM_ROUTER, [17, 19, 1], [16, 16, 1]);
        one(&DENSE_GEMM_TC, [17, 19, 1], [128, 1, 1]);
        one(&DENSE_GEMM_TC_SCALED_ACC, [17, 19, 1], [128, 1, 1]);
        one(&DENSE_GEMM_BF16_PIPELINED, [9, 3, 1], [256, 1, 1]);
        let p = cuda(&DENSE_GEMM_SPLITK_BF16, m, n, 7).unwrap();
        let geo: Vec<_> = p.passes.iter().map(|p| (p.entry, p.grid, p.block)).collect();
        assert_eq!(
            geo,
            [("dense_gemm_splitk_bf16", [65, 19, 7], [16, 16, 1]), ("dense_gemm_splitk_bf16_reduce", [5, 300, 1], [256, 1, 1])]
        );
        assert_eq!(p.workspace_bytes, 4 * 7 * 300 * 1030);
    }

    /// The router order is a dot product: within the f32 rounding bound of
    /// an f64 sum (K·2⁻²⁴·Σ|a·b|), for K below one chunk, inside the 32
    /// partials and past them.
    #[test]
    fn router_dot_is_within_rounding_of_the_f64_dot_product() {
        let mut g = Gen::new(3);
        for k in [1, 7, 8, 200, 256, 2816, 3000] {
            let a: Vec<f32> = g.bf16(k, 0.01, 1.0).0;
            let b: Vec<f32> = g.bf16(k, 0.01, 1.0).0;
            let exact: f64 = a.iter().zip(&b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
            let mag: f64 = a.iter().zip(&b).map(|(&x, &y)| (f64::from(x) * f64::from(y)).abs()).sum();
            let got = f64::from(router_dot(&a, &b));
            let tol = k as f64 * mag * 2f64.powi(-24);
            assert!((got - exact).abs() <= tol, "k={k}: router_dot {got}, f64 {exact}, tolerance {tol}");
        }
    }

    /// Decode sizes take the chain entry with a tile just large enough for one
    /// wave, the kernel's tile (read back from the grid) never exceeds 32
    /// outputs, and its shared memory is exactly that tile's rows.
    #[test]
    fn router_takes_the_chain_entry_at_decode_sizes() {
        let plan = |m, n, k| {
            let a = args(&DENSE_GEMM_ROUTER, m, n, k, 1);
            (cuda_kernel(&DENSE_GEMM_ROUTER).unwrap().plan)(&PlanArgs::new(&DENSE_GEMM_ROUTER, &a), &FACTS).unwrap()
        };
        let geo = |m, n, k| {
            let p = plan(m, n, k);
            (p.passes[0].entry, p.passes[0].grid, p.passes[0].block, p.passes[0].shared_bytes)
        };
        assert_eq!(geo(1, 128, 2816), ("dense_gemm_router_chain", [128, 1, 1], [256, 1, 1], 2 * 2820 * 4));
        assert_eq!(geo(16, 128, 2816), ("dense_gemm_router_chain", [32, 4, 1], [256, 1, 1], 8 * 2820 * 4));
        // Tile 2 x 4 over a ragged 5 x 130.
        assert_eq!(geo(5, 130, 1030), ("dense_gemm_router_chain", [33, 3, 1], [256, 1, 1], 6 * 1060 * 4));
        assert_eq!(geo(65, 128, 2816), ("dense_gemm_router", [2, 5, 1], [16, 16, 1], 0));
        // One output's rows would not fit in shared memory.
        assert_eq!(geo(1, 128, 32768), ("dense_gemm_router", [2, 1, 1], [16, 16, 1], 0));
        for m in 1..=ROUTER_CHAIN_MAX_M {
            for n in [2, 64, 128, 130, 256, 1030, 4096] {
                let p = plan(m, n, 2816);
                let [gx, gy, _] = p.passes[0].grid;
                let (tr, tc) = (m.div_ceil(gy), n.div_ceil(gx));
                assert!(u64::from(tr * tc) <= ROUTER_CHAIN_MAX_OUTPUTS, "m={m} n={n}: {tr} x {tc}");
                assert!(gx * tc >= n && gy * tr >= m, "m={m} n={n}");
                assert_eq!(u64::from(p.passes[0].shared_bytes), u64::from(tr + tc) * router_chain_ld(2816) * 4);
            }
        }
    }

    /// WGSL decode sizes take the chain entry: the tile (x0 × x1) covers the
    /// grid with TC even and at most 32 outputs, the staged rows of x2
    /// chunks fit the adapter's workgroup storage (RC_WORDS) and so do the
    /// tile's partials; larger M takes the router's own tiles, never a
    /// strict-order shader.
    #[test]
    fn wgsl_router_takes_the_chain_entry_at_decode_sizes() {
        let h200 = DeviceFacts { multiprocessors: 0, max_shared_bytes: 49152, subgroup_size: 1, ..FACTS };
        let plan = |m, n, k, f: &DeviceFacts| {
            let a = args(&DENSE_GEMM_ROUTER, m, n, k, 1);
            (wgsl_kernel(&DENSE_GEMM_ROUTER).unwrap().plan)(&PlanArgs::new(&DENSE_GEMM_ROUTER, &a), f).unwrap()
        };
        let geo = |m, n, k, f| {
            let p = plan(m, n, k, f);
            (p.passes[0].entry, p.passes[0].grid, p.passes[0].extra, p.passes[0].consts.clone())
        };
        let chain = |grid, extra, words| ("dense_gemm_router_chain", grid, extra, vec![("RC_WORDS", words)]);
        // K = 2816 (352 chunks) whole in 48 KiB; in 16 KiB two and three pieces.
        assert_eq!(geo(1, 128, 2816, &h200), chain([64, 1, 1], [1, 2, 352, 0], 12288));
        assert_eq!(geo(16, 128, 2816, &h200), chain([32, 4, 1], [4, 4, 352, 0], 12288));
        let min = DeviceFacts { max_shared_bytes: 16384, ..h200 };
        assert_eq!(geo(1, 128, 2816, &min), chain([64, 1, 1], [1, 2, 341, 0], 4096));
        assert_eq!(geo(16, 128, 2816, &min), chain([32, 4, 1], [4, 4, 128, 0], 4096));
        assert_eq!(geo(5, 130, 1030, &min), chain([33, 3, 1], [2, 4, 129, 0], 4096));
        let tiles = |grid| ("dense_gemm_router", grid, [0; 4], vec![]);
        assert_eq!(geo(65, 128, 2816, &h200), tiles([2, 2, 1]));
        assert_eq!(geo(300, 1030, 2816, &h200), tiles([17, 5, 1]));
        // Below 16 KiB: the tiles, which fit it.
        let small = DeviceFacts { max_shared_bytes: 16352, ..h200 };
        assert_eq!(geo(1, 128, 2816, &small), tiles([2, 1, 1]));
        for f in [&min, &h200] {
            let words = f.max_shared_bytes / 4;
            for m in 1..=ROUTER_CHAIN_MAX_M {
                for (n, k) in [(2, 2), (64, 2816), (128, 2816), (130, 1030), (256, 8), (1030, 2816), (4096, 65536)] {
                    let p = plan(m, n, k, f);
                    let [gx, gy, _] = p.passes[0].grid;
                    let [tr, tc, cw, _] = p.passes[0].extra;
                    assert!(tc % 2 == 0 && u64::from(tr * tc) <= ROUTER_CHAIN_MAX_OUTPUTS, "m={m} n={n}: {tr} x {tc}");
                    assert!(gx * tc >= n && gy * tr >= m && (gx - 1) * tc < n && (gy - 1) * tr < m, "m={m} n={n}");
                    assert!(4 * (tr + tc) * cw <= words && 4 * 32 * tr * tc <= words, "m={m} n={n}: {tr} x {tc} at {cw}");
                    assert!(cw >= 1 && cw <= k.div_ceil(8), "m={m} n={n} k={k}: {cw}");
                }
            }
        }
    }

    /// WGSL `dense_gemm_bf16_pipelined`: with cooperative matrices and M > 16,
    /// the row-exponent pass over M + N rows then the f16 tiles, with M + N
    /// words of workspace; without them, or at M ≤ 16, today's single pass.
    #[test]
    fn wgsl_pipelined_takes_the_coopmat_path_where_the_device_has_it() {
        let plain = DeviceFacts { multiprocessors: 0, max_shared_bytes: 49152, ..FACTS };
        let coop = DeviceFacts { wgsl_coopmat: true, ..plain };
        let plan = |m, n, k, f: &DeviceFacts| {
            let a = args(&DENSE_GEMM_BF16_PIPELINED, m, n, k, 1);
            (wgsl_kernel(&DENSE_GEMM_BF16_PIPELINED).unwrap().plan)(&PlanArgs::new(&DENSE_GEMM_BF16_PIPELINED, &a), f).unwrap()
        };
        let geo = |p: &WgslPlan| p.passes.iter().map(|q| (q.entry, q.grid)).collect::<Vec<_>>();
        let p = plan(4096, 8192, 8192, &coop);
        assert_eq!(
            geo(&p),
            [("dense_coop_scales", [12288, 1, 1]), ("dense_coop_convert", [49152, 1, 1]), ("dense_gemm_coop", [64, 32, 1])]
        );
        assert_eq!(p.workspace_bytes, 12288 * 2 + 12288 * 8192 * 2);
        let p = plan(150, 136, 264, &coop);
        assert_eq!(geo(&p), [("dense_coop_scales", [286, 1, 1]), ("dense_coop_convert", [37, 1, 1]), ("dense_gemm_coop", [2, 2, 1])]);
        assert_eq!(p.workspace_bytes, 72 * 8 + 286 * 264 * 2);
        assert_eq!(plan(17, 40, 72, &coop).passes[2].entry, "dense_gemm_coop");
        // Copies past one binding: today's tiles (M + N = 266240 rows of K = 5376 need 2.86 GB).
        let lm_head = plan(4096, 262144, 5376, &DeviceFacts { max_binding_bytes: (1 << 31) - 1, ..coop });
        assert_eq!(geo(&lm_head), [("dense_gemm_bf16_pipelined", [2048, 32, 1])]);
        // 48 KiB of workgroup memory is what the tiles take (the H200 under Vulkan has exactly that).
        assert_eq!(COOPMAT_SHARED_BYTES, 49152);
        let small = DeviceFacts { max_shared_bytes: 32768, ..coop };
        assert_eq!(geo(&plan(4096, 8192, 8192, &small)), [("dense_gemm_bf16_pipelined", [64, 32, 1])]);
        // The small path keeps its strict-order tiles; no cooperative matrices, today's tiles.
        assert_eq!(geo(&plan(16, 64, 64, &coop)), [("dense_gemm_small", [2, 1, 1])]);
        assert_eq!(plan(16, 64, 64, &coop).workspace_bytes, 0);
        assert_eq!(geo(&plan(4096, 8192, 8192, &plain)), [("dense_gemm_bf16_pipelined", [64, 32, 1])]);
        assert_eq!(plan(4096, 8192, 8192, &plain).workspace_bytes, 0);
        // Only the pipelined kernel changes: dense_gemm_tc keeps one K order with its scaled-add twin.
        let a = args(&DENSE_GEMM_TC, 4096, 8192, 8192, 1);
        let tc = (wgsl_kernel(&DENSE_GEMM_TC).unwrap().plan)(&PlanArgs::new(&DENSE_GEMM_TC, &a), &coop).unwrap();
        assert_eq!(geo(&tc), [("dense_gemm_tc", [64, 32, 1])]);
    }

    /// On a device that runs sm_90a entries, prefill sizes take the wgmma
    /// plan (persistent grid, the tile width with the fewest tile-columns in
    /// all); smaller M, a misaligned operand or K % 8 != 0 keep mma.sync.
    #[test]
    fn pipelined_takes_the_wgmma_plan_on_hopper_at_prefill_sizes() {
        let hopper = DeviceFacts { cuda_sm90a: true, ..FACTS };
        let plan = |m, n, k, b: u64, f: &DeviceFacts| {
            let mut a = args(&DENSE_GEMM_BF16_PIPELINED, m, n, k, 1);
            a[1] = P(b);
            (cuda_kernel(&DENSE_GEMM_BF16_PIPELINED).unwrap().plan)(&PlanArgs::new(&DENSE_GEMM_BF16_PIPELINED, &a), f).unwrap()
        };
        let geo = |m, n, k, b, f| {
            let p = plan(m, n, k, b, f);
            (p.passes[0].entry, p.passes[0].grid, p.passes[0].block, p.passes[0].shared_bytes, p.workspace_bytes)
        };
        let n256 = ("gemm_sm90::dense_gemm_wgmma_n256", [384, 1, 1], 4 * 384 * 128 + 64 + 1024);
        let n192 = ("gemm_sm90::dense_gemm_wgmma_n192", [384, 1, 1], 5 * 320 * 128 + 80 + 1024);
        let n224 = ("gemm_sm90::dense_gemm_wgmma_n224", [384, 1, 1], 5 * 352 * 128 + 80 + 1024);
        let wg = |(e, b, s): (&'static str, [u32; 3], u32), grid| (e, [grid, 1, 1], b, s, 0);
        // The issue-5 shapes: (N, K) = (8192, 8192), (21504, 5376), (5376, 21504).
        assert_eq!(geo(512, 8192, 8192, 256, &hopper), wg(n256, 128));
        assert_eq!(geo(4096, 8192, 8192, 256, &hopper), wg(n256, 132));
        assert_eq!(geo(512, 21504, 5376, 256, &hopper), wg(n224, 132));
        assert_eq!(geo(4096, 21504, 5376, 256, &hopper), wg(n256, 132));
        assert_eq!(geo(512, 5376, 21504, 256, &hopper), wg(n192, 112));
        assert_eq!(geo(4096, 5376, 21504, 256, &hopper), wg(n192, 132));
        // The parity case: 5 x 3 tiles either way, so the narrower.
        assert_eq!(geo(600, 520, 200, 256, &hopper), wg(n192, 15));
        assert_eq!(geo(1920, 1568, 72, 256, &hopper), wg(n224, 105));
        let old = |m: u32, n: u32| ("dense_gemm_bf16_pipelined", [n.div_ceil(128), m.div_ceil(128), 1], [256, 1, 1], 0, 0);
        assert_eq!(geo(511, 8192, 8192, 256, &hopper), old(511, 8192));
        assert_eq!(geo(512, 8192, 8192, 264, &hopper), old(512, 8192));
        assert_eq!(geo(512, 8192, 8196, 256, &hopper), old(512, 8192));
        assert_eq!(geo(512, 8192, 8192, 256, &FACTS), old(512, 8192));
        for (entry, bn, stages) in WGMMA_ENTRIES {
            assert!(wgmma_shared_bytes(bn, stages) <= FACTS.max_shared_bytes, "{entry}");
            let (module, e) = crate::plan::cuda_entry("gemm", entry);
            let maps = crate::plan::cuda_tensor_maps(module, e).expect("registered");
            let a = args(&DENSE_GEMM_BF16_PIPELINED, 600, 520, 200, 1);
            let m = (maps.maps)(&PlanArgs::new(&DENSE_GEMM_BF16_PIPELINED, &a)).unwrap();
            assert_eq!(m[0], TensorMap2d { arg: "a", rows: 600, cols: 200, box_rows: 128, box_cols: 64 });
            assert_eq!(m[1], TensorMap2d { arg: "b", rows: 520, cols: 200, box_rows: bn, box_cols: 64 });
        }
    }

    #[test]
    fn scaled_add_plans_cover_every_pair() {
        let a = [P(256), P(256), U(70000), F(1.0)];
        let pa = PlanArgs::new(&SCALED_ADD_BF16, &a);
        let c = (cuda_kernel(&SCALED_ADD_BF16).unwrap().plan)(&pa, &FACTS).unwrap();
        assert_eq!((c.passes[0].grid, c.passes[0].block), ([137, 1, 1], [256, 1, 1]));
        let w = (wgsl_kernel(&SCALED_ADD_BF16).unwrap().plan)(&pa, &FACTS).unwrap();
        assert_eq!(w.passes[0].grid, [137, 1, 1]);
    }

    #[test]
    fn wgsl_splitk_takes_the_small_path_up_to_m_16_and_reduces_per_word() {
        let plan = |m| {
            let a = args(&DENSE_GEMM_SPLITK_BF16, m, 1030, 64, 3);
            (wgsl_kernel(&DENSE_GEMM_SPLITK_BF16).unwrap().plan)(&PlanArgs::new(&DENSE_GEMM_SPLITK_BF16, &a), &FACTS).unwrap()
        };
        let small = plan(16);
        assert_eq!((small.passes[0].entry, small.passes[0].grid), ("dense_gemm_splitk_bf16_small", [33, 1, 3]));
        assert_eq!(small.passes[0].consts, [("M", 16)]);
        assert_eq!((small.passes[1].entry, small.passes[1].grid), ("dense_gemm_splitk_bf16_reduce", [33, 1, 1]));
        let tiled = plan(300);
        assert_eq!((tiled.passes[0].entry, tiled.passes[0].grid), ("dense_gemm_splitk_bf16", [9, 3, 3]));
        assert_eq!(tiled.passes[1].grid, [604, 1, 1]);
        assert_eq!(tiled.workspace_bytes, 4 * 3 * 300 * 1030);
    }

    /// Both split-K entries take the workspace parameter, so no plan may ask for none.
    #[test]
    fn splitk_plans_refuse_an_empty_problem() {
        for (m, n, splits, arg) in [(0, 8, 1, "m"), (4, 0, 1, "n"), (4, 8, 0, "splits")] {
            match cuda(&DENSE_GEMM_SPLITK_BF16, m, n, splits) {
                Err(Error::InvalidArgument { arg: a, .. }) => assert_eq!(a, arg),
                other => panic!("m={m} n={n} splits={splits}: {other:?}"),
            }
        }
    }
}
