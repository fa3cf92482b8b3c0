//! W4A16: bf16 activations times NVFP4 weights.
//!
//! Weights are in the K-major device layout of
//! [`switchyard_core::codec::nvfp4::Nvfp4Matrix::k_major`]: `bq` u8
//! `[K/2, ldb]` (two e2m1 codes per byte along K, low nibble first), `bs` u8
//! `[K/16, ldb]` (e4m3 block scales), and the f32 global scale `scale2`.
//! Consecutive output columns are adjacent, so loads along N coalesce; the
//! row stride `ldb` is `n` except in the `_ldb` variant.
//!
//! Contract, every variant: `w(n, k) = e2m1(code) · e4m3(scale)` — exact in
//! bf16 (at most 2 × 4 significant bits) — then
//! `c[m, n] = bf16(scale2 · Σₖ a[m, k] · w(n, k))` with f32 accumulation in a
//! K order of the backend's choosing (parity: NMSE ≤ 1e-6 against the
//! reference). [`W4A16_GEMM_N128_M128_BF16`] additionally equals
//! [`W4A16_GEMM`] bit for bit on the same backend.
//!
//! On a Hopper device at prefill sizes ([`super::WGMMA_MIN_M`]) the CUDA
//! plans of [`W4A16_GEMM`], [`W4A16_GEMM_N128`], [`W4A16_GEMM_N128_M128`] and
//! [`W4A16_GEMM_N128_M128_BF16`] all take one wgmma entry
//! (`w4a16_sm90.cu`; aligned operands, `N % 16 == 0`), whose K order differs from the
//! mma.sync kernels'; since the base and lossless variants pick it under the
//! same conditions, they stay bit-identical to each other.
use super::{operands, REORDERED_NMSE};
use crate::ops::{bf16s, region, require, saturating_product, scalar, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use crate::plan::{groups, CudaPass, CudaPlan, CudaTensorMaps, DeviceFacts, PlanArgs, TensorMap2d, WgslPass, WgslPlan};
use switchyard_core::codec::nvfp4;
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, Error, KernelSig, Region, Result};

macro_rules! w4a16_args {
    ($($extra:expr),*) => {
        [A::input("a"), A::input("bq"), A::input("bs"), A::f32("scale2"), A::output("c"), A::u32("m"), A::u32("n"), A::u32("k") $(, $extra)*]
    };
}

declare_kernel! {
    /// Base W4A16 GEMM, 64-wide N tile. N % 16 == 0, K % 16 == 0.
    W4A16_GEMM = "w4a16"::"w4a16_gemm" => &w4a16_args!()
}
declare_kernel! {
    /// 128-wide N tile. N % 16 == 0, K % 16 == 0.
    W4A16_GEMM_N128 = "w4a16"::"w4a16_gemm_n128" => &w4a16_args!()
}
declare_kernel! {
    /// [`W4A16_GEMM_N128`] with an explicit weight row stride `ldb` (bytes per
    /// K-pair row, a multiple of 16, ≥ N; columns N..ldb are zero padding), for
    /// N not a multiple of 16 such as a vocabulary of 248077.
    W4A16_GEMM_N128_LDB = "w4a16"::"w4a16_gemm_n128_ldb" => &w4a16_args!(A::u32("ldb"))
}
declare_kernel! {
    /// Two 64-row M chunks per block, sharing each weight load. N % 16 == 0, K % 16 == 0.
    W4A16_GEMM_N128_M128 = "w4a16"::"w4a16_gemm_n128_m128" => &w4a16_args!()
}
declare_kernel! {
    /// Lossless bf16-MMA variant at the 128×128 tiling: bit-identical to
    /// [`W4A16_GEMM`] on the same backend.
    W4A16_GEMM_N128_M128_BF16 = "w4a16"::"w4a16_gemm_n128_m128_bf16" => &w4a16_args!()
}
declare_kernel! {
    /// Decode-only variant (M ≤ 16): one pass over the weights with every
    /// row's accumulator live. N % 16 == 0, K % 16 == 0.
    W4A16_GEMM_DECODE = "w4a16"::"w4a16_gemm_decode" => &w4a16_args!()
}

/// Largest M the decode variant takes.
pub const DECODE_MAX_M: usize = 16;

/// CUDA: one block of `threads` per `cols × rows` output tile.
fn cuda_tiles(a: &PlanArgs, cols: u64, rows: u64, threads: u32) -> Result<CudaPlan> {
    let (m, n) = (u64::from(a.u32("m")?), u64::from(a.u32("n")?));
    Ok(CudaPlan::single(a.kernel, [groups(a.kernel, n, cols)?, groups(a.kernel, m, rows)?, 1], [threads, 1, 1]))
}

/// The Hopper entry of `w4a16_sm90.cu`.
const WGMMA_ENTRY: &str = "w4a16_sm90::w4a16_gemm_wgmma";
/// Its output tile: tokens (rows of A and c) and weight columns.
const WGMMA_BM: u32 = 256;
const WGMMA_BN: u32 = 128;
/// Its ring depth.
const WGMMA_STAGES: u32 = 5;
/// Its dynamic shared memory: per ring stage the activations (256 × 64
/// bf16), the slice's codes (32 K-pair rows × 128 bytes) and its scales (a
/// 4 × 128-byte box on its own 1024-byte swizzle atom); 2·stages
/// mbarriers; 1024 bytes to align the ring to the swizzle atom.
const WGMMA_SHARED_BYTES: u32 = WGMMA_STAGES * (WGMMA_BM * 64 * 2 + 32 * WGMMA_BN + 1024) + 16 * WGMMA_STAGES + 1024;
// Within the opt-in limit of a compute-capability 9.0 device (227 KiB).
const _: () = assert!(WGMMA_SHARED_BYTES <= 227 * 1024);

/// Whether the Hopper plan takes this launch: the device runs sm_90a
/// entries, M is a prefill size, and the operands suit TMA (A rows
/// `2K` bytes and weight rows `N` bytes apart, multiples of 16 given
/// `K % 16 == 0` and `N % 16 == 0`; a, bq, bs 16-byte aligned) and the
/// epilogue's bf16 pair stores (c 4-byte aligned).
fn wgmma_fits(a: &PlanArgs, f: &DeviceFacts) -> Result<bool> {
    let (m, n, k) = (a.u32("m")?, a.u32("n")?, a.u32("k")?);
    Ok(f.cuda_sm90a
        && f.multiprocessors > 0
        && WGMMA_SHARED_BYTES <= f.max_shared_bytes
        && m >= super::WGMMA_MIN_M
        && n > 0
        && n % 16 == 0
        && k > 0
        && k % 16 == 0
        && a.addr("a")? % 16 == 0
        && a.addr("bq")? % 16 == 0
        && a.addr("bs")? % 16 == 0
        && a.addr("c")? % 4 == 0)
}

/// `SWITCHYARD_W4A16_SPLIT=0` keeps the Hopper plan to whole tiles (no K
/// split), for measuring; read once a process.
pub const W4A16_SPLIT_ENV: &str = "SWITCHYARD_W4A16_SPLIT";
fn split_allowed() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var(W4A16_SPLIT_ENV).map_or(true, |v| v.trim() != "0"))
}

/// Most K splits of one tile, and most split tiles (the kernel's
/// `W4_MAX_SPLIT_TILES` semaphores; a split tile index is below the grid).
const WGMMA_MAX_SPLITS: u64 = 8;
const WGMMA_MAX_SPLIT_TILES: u64 = 1024;
/// Estimated costs in 64-wide slices of one tile (~1000 cycles of tensor
/// work on an SM): a work item's pipeline fill and epilogue, and a split's
/// 128 KB f32 partial (written by each split, read back by the last).
const WGMMA_ITEM_COST: u64 = 2;
const WGMMA_PARTIAL_COST: u64 = 1;

/// The Hopper kernel's work split for `tiles` output tiles of `kt` slices
/// on `sms` SMs: (S, blocks). S = 1: every tile whole, min(tiles, sms)
/// blocks. S > 1, only where the tiles leave SMs idle (tiles < blocks):
/// blocks = ⌊sms/S⌋·S and every tile in S K ranges, so one round of whole
/// tiles on `tiles` SMs becomes ⌈tiles·S / blocks⌉ rounds of 1/S of a tile
/// on all of them (the kernel derives its work from its grid, w4a16_sm90.cu's
/// w4_work, which also allows whole tiles before split ones; splitting only
/// the last, partial wave of a larger grid measured no gain on the H200:
/// 512 × 21504 × 5376, 72 of 336 tiles in 3, 230 µs against 202 µs for the
/// unsplit kernel in the same call). Taken where the modelled time drops
/// by 3% or more: 512 × 5376 × 21504 (84 tiles on 132 SMs) splits 3 ways.
fn wgmma_split(tiles: u64, kt: u64, sms: u64) -> (u64, u64) {
    let whole = tiles.min(sms).max(1);
    let mut best = (tiles.div_ceil(whole) * (kt + WGMMA_ITEM_COST), 1, whole);
    if !split_allowed() {
        return (1, whole);
    }
    let base = best.0;
    for s in 2..=WGMMA_MAX_SPLITS.min(kt) {
        let blocks = sms / s * s;
        if tiles >= blocks || tiles > WGMMA_MAX_SPLIT_TILES {
            continue;
        }
        let cost = (tiles * s).div_ceil(blocks) * (kt.div_ceil(s) + WGMMA_ITEM_COST + WGMMA_PARTIAL_COST) + (s - 1) * WGMMA_PARTIAL_COST;
        if cost * 100 <= base * 97 && cost < best.0 {
            best = (cost, s, blocks);
        }
    }
    (best.1, best.2)
}

/// Hopper (see [`wgmma_fits`]): a persistent grid of at most one block per
/// SM, 384 threads (a TMA producer warpgroup and two consumer warpgroups
/// that dequantise the weights into wgmma's register operand, over tiles of
/// 256 tokens × 128 columns), split along K where [`wgmma_split`] says so:
/// grid (blocks / S, S), workspace S f32 partials of 256 × 128 per tile. Otherwise the mma.sync plan `other`.
fn hopper_or(a: &PlanArgs, f: &DeviceFacts, other: fn(&PlanArgs) -> Result<CudaPlan>) -> Result<CudaPlan> {
    if !wgmma_fits(a, f)? {
        return other(a);
    }
    let (m, n, k) = (a.u32("m")?, a.u32("n")?, a.u32("k")?);
    let tiles = u64::from(m.div_ceil(WGMMA_BM)) * u64::from(n.div_ceil(WGMMA_BN));
    let kt = u64::from(k.div_ceil(64));
    let (s, blocks) = wgmma_split(tiles, kt, u64::from(f.multiprocessors));
    // The kernel always takes the workspace pointer.
    let workspace_bytes = if s > 1 { tiles * s * u64::from(WGMMA_BM * WGMMA_BN) * 4 } else { 16 };
    let grid = [u32::try_from(blocks / s).expect("at most the SM count"), s as u32, 1];
    let pass = CudaPass { entry: WGMMA_ENTRY, grid, block: [384, 1, 1], shared_bytes: WGMMA_SHARED_BYTES };
    Ok(CudaPlan { passes: vec![pass], workspace_bytes })
}

/// The wgmma entry's tensor maps: the activations (`m × k` bf16) in
/// 256 × 64 boxes; the codes (`k/2 × n` bytes) in 32 × 128-byte boxes and
/// the scales (`k/16 × n` bytes) in 4 × 128-byte boxes, both read as `n/2`
/// bf16 pairs a row (the backend encodes bf16 maps, and TMA copies bits).
fn wgmma_maps(a: &PlanArgs) -> Result<Vec<TensorMap2d>> {
    let (m, n, k) = (u64::from(a.u32("m")?), u64::from(a.u32("n")?), u64::from(a.u32("k")?));
    Ok(vec![
        TensorMap2d { arg: "a", rows: m, cols: k, box_rows: WGMMA_BM, box_cols: 64 },
        TensorMap2d { arg: "bq", rows: k / 2, cols: n / 2, box_rows: 32, box_cols: 64 },
        TensorMap2d { arg: "bs", rows: k / nvfp4::BLOCK as u64, cols: n / 2, box_rows: 4, box_cols: 64 },
    ])
}
inventory::submit! { CudaTensorMaps { module: "w4a16_sm90", entry: "w4a16_gemm_wgmma", maps: wgmma_maps } }

/// 64 × 64 tiles, four warps; the Hopper plan at prefill sizes.
fn cuda_w4a16_gemm(a: &PlanArgs, f: &DeviceFacts) -> Result<CudaPlan> {
    hopper_or(a, f, |a| cuda_tiles(a, 64, 64, 128))
}

/// 128-column × 64-row tiles (w4a16_gemm_n128's mma.sync plan and the `_ldb` twin's only one).
fn cuda_n128_tiles(a: &PlanArgs) -> Result<CudaPlan> {
    cuda_tiles(a, 128, 64, 128)
}

/// w4a16_gemm_n128: 128-column × 64-row tiles, or the Hopper plan at prefill sizes.
fn cuda_n128(a: &PlanArgs, f: &DeviceFacts) -> Result<CudaPlan> {
    hopper_or(a, f, cuda_n128_tiles)
}

/// The `_ldb` variant keeps mma.sync (its odd N and padded rows are not the wgmma entry's).
fn cuda_n128_ldb(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    cuda_n128_tiles(a)
}

/// 128 × 128 tiles: two 64-row chunks per block (w4a16_gemm_n128_m128 and
/// its lossless twin); the Hopper plan at prefill sizes.
fn cuda_n128_m128(a: &PlanArgs, f: &DeviceFacts) -> Result<CudaPlan> {
    hopper_or(a, f, |a| cuda_tiles(a, 128, 128, 128))
}

/// Output columns per block of the CUDA decode entries (`DEC_COLS`, w4a16.cu).
const CUDA_DECODE_COLS: u64 = 128;
/// K per tile: a warp's unit of work, 32 mma per 128 columns.
const CUDA_DECODE_KTILE: u64 = 64;
/// Warps per block (`DEC_WARPS`), each with its own cp.async ring.
const CUDA_DECODE_WARPS: u64 = 4;
/// One CUDA decode entry: its symbol, token tiles of 8, ring depth in
/// tiles and resident blocks an SM (`DEC_STAGES_*`, `DEC_BLOCKS_*` and the
/// launch bounds in w4a16.cu, which say how they were chosen).
struct DecodeEntry {
    symbol: &'static str,
    token_tiles: u32,
    stages: u32,
    blocks_per_sm: u64,
}

impl DecodeEntry {
    /// Dynamic shared memory: a ring a warp of 16-byte pieces, 9 + 2·(token tiles) a lane per tile.
    const fn shared_bytes(&self) -> u32 {
        CUDA_DECODE_WARPS as u32 * self.stages * (9 + 2 * self.token_tiles) * 32 * 16
    }
}

/// M ≤ 8 (the kernel's own symbol): three 66 KiB rings an SM.
const CUDA_DECODE_M8: DecodeEntry = DecodeEntry { symbol: "w4a16_gemm_decode", token_tiles: 1, stages: 3, blocks_per_sm: 3 };
/// 8 < M ≤ 16: two 104 KiB rings an SM.
const CUDA_DECODE_M16: DecodeEntry = DecodeEntry { symbol: "w4a16_gemm_decode_m16", token_tiles: 2, stages: 4, blocks_per_sm: 2 };
// Both fit an SM's 228 KiB of shared memory with 1 KiB reserved a block.
const _: () = assert!(3 * (CUDA_DECODE_M8.shared_bytes() + 1024) <= 228 * 1024);
const _: () = assert!(2 * (CUDA_DECODE_M16.shared_bytes() + 1024) <= 228 * 1024);
/// A block's opening latency (its first tile, before the ring streams) in
/// tiles of work: the split choice's price for one more round of blocks.
const CUDA_DECODE_RAMP_TILES: u64 = 4;
/// Column blocks a K-split decode may have (`DEC_MAX_COL_BLOCKS`, w4a16.cu).
const CUDA_DECODE_MAX_COL_BLOCKS: u32 = 65536;

/// K splits S of a decode launch with `cols` column blocks and `tiles` 64-k
/// tiles, each split at least one tile a warp. A block's time is about its
/// tiles plus a ramp, and an SM runs `blocks_per_sm` blocks at once, so the
/// busiest SM (⌈cols·S / SMs⌉ blocks) takes ⌈that / blocks an SM⌉ rounds
/// of (⌈tiles/S⌉ + ramp): S minimises that (the fewest splits among equals,
/// so warps keep the most tiles). On an H200 the issue-5 shapes get S = 6,
/// 2 and 9 at M ≤ 8 (384, 336 and 378 blocks), 4, 3 and 6 at M ≤ 16.
fn cuda_decode_splits(cols: u64, tiles: u64, sms: u64, blocks_per_sm: u64) -> u64 {
    let mut best = (u64::MAX, 1);
    for s in 1..=(tiles / CUDA_DECODE_WARPS).max(1) {
        let per = tiles.div_ceil(s);
        // The kernel gives split y tiles [y·per, ...): an S with empty splits repeats a smaller one.
        if tiles.div_ceil(per) != s {
            continue;
        }
        let rounds = (cols * s).div_ceil(sms).div_ceil(blocks_per_sm);
        let cost = rounds * (per + CUDA_DECODE_RAMP_TILES);
        if cost < best.0 {
            best = (cost, s);
        }
    }
    best.1
}

/// ⌈N/128⌉ column blocks of 4 warps times S K splits ([`cuda_decode_splits`]).
/// With S > 1 the f32 partials go to workspace `[S, M, N]` and the last
/// block of each column block adds them in split order and scales.
fn cuda_w4a16_gemm_decode(a: &PlanArgs, facts: &DeviceFacts) -> Result<CudaPlan> {
    let (m, n, k) = (u64::from(a.u32("m")?), u64::from(a.u32("n")?), u64::from(a.u32("k")?));
    if !(1..=DECODE_MAX_M as u64).contains(&m) {
        return Err(Error::invalid(a.kernel.symbol, "m", format!("m = {m} must be in 1..={DECODE_MAX_M}")));
    }
    let cols = groups(a.kernel, n, CUDA_DECODE_COLS)?;
    let tiles = k.div_ceil(CUDA_DECODE_KTILE).max(1);
    let e = if m <= 8 { &CUDA_DECODE_M8 } else { &CUDA_DECODE_M16 };
    let splits = cuda_decode_splits(u64::from(cols), tiles, u64::from(facts.multiprocessors.max(1)), e.blocks_per_sm);
    if splits > 1 && cols > CUDA_DECODE_MAX_COL_BLOCKS {
        return Err(Error::invalid(
            a.kernel.symbol,
            "n",
            format!("n = {n} needs {cols} column blocks; a K-split decode reduces at most {CUDA_DECODE_MAX_COL_BLOCKS}"),
        ));
    }
    // The kernel always takes the workspace pointer.
    let workspace_bytes = if splits > 1 { splits * m * n * 4 } else { 16 };
    Ok(CudaPlan {
        passes: vec![CudaPass {
            entry: e.symbol,
            grid: [cols, splits as u32, 1],
            block: [32 * CUDA_DECODE_WARPS as u32, 1, 1],
            shared_bytes: e.shared_bytes(),
        }],
        workspace_bytes,
    })
}

cuda_plan!(W4A16_GEMM => cuda_w4a16_gemm);
cuda_plan!(W4A16_GEMM_N128 => cuda_n128);
cuda_plan!(W4A16_GEMM_N128_LDB => cuda_n128_ldb);
cuda_plan!(W4A16_GEMM_N128_M128 => cuda_n128_m128);
cuda_plan!(W4A16_GEMM_N128_M128_BF16 => cuda_n128_m128);
cuda_plan!(W4A16_GEMM_DECODE => cuda_w4a16_gemm_decode);

/// Output rows and columns per workgroup of the tiled WGSL shaders (every
/// variant but decode runs the one 128 × 128 tile core, w4a16_tile_core.wgsli).
const WGSL_TILE: u64 = 128;
/// Output columns per workgroup of the WGSL `w4a16_gemm_decode`.
const WGSL_DECODE_COLS: u64 = 32;

/// `(⌈N/128⌉, ⌈M/128⌉)` tiles.
fn wgsl_tiles(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    let (m, n) = (u64::from(a.u32("m")?), u64::from(a.u32("n")?));
    Ok(WgslPlan::single(a.kernel, [groups(a.kernel, n, WGSL_TILE)?, groups(a.kernel, m, WGSL_TILE)?, 1]))
}

/// ⌈N/32⌉ workgroups; M is an override, so the per-row accumulators unroll into registers.
fn wgsl_w4a16_gemm_decode(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    let (m, n) = (a.u32("m")?, u64::from(a.u32("n")?));
    if !(1..=DECODE_MAX_M as u32).contains(&m) {
        return Err(Error::invalid(a.kernel.symbol, "m", format!("m = {m} must be in 1..={DECODE_MAX_M}")));
    }
    let grid = [groups(a.kernel, n, WGSL_DECODE_COLS)?, 1, 1];
    Ok(WgslPlan {
        passes: vec![WgslPass { entry: a.kernel.symbol, grid, consts: vec![("M", m)], extra: [0; 4] }],
        workspace_bytes: 0,
        arrivals: 0,
    })
}

wgsl_plan!(W4A16_GEMM, "gemm/w4a16_gemm.wgsl" => wgsl_tiles);
wgsl_plan!(W4A16_GEMM_N128, "gemm/w4a16_gemm.wgsl" => wgsl_tiles);
wgsl_plan!(W4A16_GEMM_N128_LDB, "gemm/w4a16_gemm_n128_ldb.wgsl" => wgsl_tiles);
wgsl_plan!(W4A16_GEMM_N128_M128, "gemm/w4a16_gemm.wgsl" => wgsl_tiles);
wgsl_plan!(W4A16_GEMM_N128_M128_BF16, "gemm/w4a16_gemm.wgsl" => wgsl_tiles);
wgsl_plan!(W4A16_GEMM_DECODE, "gemm/w4a16_gemm.wgsl" => wgsl_w4a16_gemm_decode);

/// A W4A16 weight on the device: the K-major codes and scales, the global
/// scale, and the row stride.
#[derive(Clone, Copy, Debug)]
pub struct Fp4Weight {
    /// Codes `[K/2, ldb]`.
    pub bq: Region,
    /// Block scales `[K/16, ldb]`.
    pub bs: Region,
    /// Global scale.
    pub scale2: f32,
    /// Row stride in bytes (= n unless padded).
    pub ldb: usize,
}

fn check(kernel: &str, w: &Fp4Weight, m: usize, n: usize, k: usize, need_packed: bool) -> Result<[u32; 3]> {
    for (name, v) in [("m", m), ("n", n), ("k", k)] {
        require(v > 0 && u32::try_from(v).is_ok(), kernel, name, || format!("{name} = {v} must be in 1..2^32"))?;
    }
    require(k % nvfp4::BLOCK == 0, kernel, "k", || format!("k = {k} is not a multiple of the NVFP4 scale block ({})", nvfp4::BLOCK))?;
    if need_packed {
        require(n % 16 == 0 && w.ldb == n, kernel, "n", || {
            format!(
                "n = {n} (ldb {}) must be a multiple of 16 with ldb = n: 16-byte weight loads need aligned rows; use the _ldb variant",
                w.ldb
            )
        })?;
    } else {
        require(w.ldb >= n && w.ldb % 16 == 0 && u32::try_from(w.ldb).is_ok(), kernel, "ldb", || {
            format!("ldb = {} must be a multiple of 16 and >= n = {n} (misaligned or short weight rows)", w.ldb)
        })?;
    }
    require(w.scale2.is_finite(), kernel, "scale2", || format!("scale2 = {} must be finite", w.scale2))?;
    // GPU kernels stream the weights with 16-byte loads: a weight view that
    // starts mid-vector would fault there, so it is refused here on every backend.
    for (name, r) in [("bq", w.bq), ("bs", w.bs)] {
        let addr = r.addr();
        require(addr % 16 == 0, kernel, name, || format!("address {addr:#x} must be 16-byte aligned (vector weight loads)"))?;
    }
    Ok([m as u32, n as u32, k as u32])
}

impl Ops {
    /// The launch shared by every variant.
    #[allow(clippy::too_many_arguments)]
    fn w4a16(&self, sig: &'static KernelSig, a: Region, w: &Fp4Weight, c: Region, m: usize, n: usize, k: usize) -> Result<()> {
        let ldb_variant = std::ptr::eq(sig, &W4A16_GEMM_N128_LDB);
        let [mu, nu, ku] = check(sig.symbol, w, m, n, k, !ldb_variant)?;
        let mut args = vec![
            region(a, bf16s(saturating_product(&[m, k]))),
            region(w.bq, saturating_product(&[k / 2, w.ldb])),
            region(w.bs, saturating_product(&[k / nvfp4::BLOCK, w.ldb])),
            scalar(F(w.scale2)),
            region(c, bf16s(saturating_product(&[m, n]))),
            scalar(U(mu)),
            scalar(U(nu)),
            scalar(U(ku)),
        ];
        if ldb_variant {
            args.push(scalar(U(w.ldb as u32)));
        }
        self.launch(sig, &args)
    }

    /// See [`W4A16_GEMM`].
    pub fn w4a16_gemm(&self, a: Region, w: &Fp4Weight, c: Region, m: usize, n: usize, k: usize) -> Result<()> {
        self.w4a16(&W4A16_GEMM, a, w, c, m, n, k)
    }
    /// See [`W4A16_GEMM_N128`].
    pub fn w4a16_gemm_n128(&self, a: Region, w: &Fp4Weight, c: Region, m: usize, n: usize, k: usize) -> Result<()> {
        self.w4a16(&W4A16_GEMM_N128, a, w, c, m, n, k)
    }
    /// See [`W4A16_GEMM_N128_LDB`].
    pub fn w4a16_gemm_n128_ldb(&self, a: Region, w: &Fp4Weight, c: Region, m: usize, n: usize, k: usize) -> Result<()> {
        self.w4a16(&W4A16_GEMM_N128_LDB, a, w, c, m, n, k)
    }
    /// See [`W4A16_GEMM_N128_M128`].
    pub fn w4a16_gemm_n128_m128(&self, a: Region, w: &Fp4Weight, c: Region, m: usize, n: usize, k: usize) -> Result<()> {
        self.w4a16(&W4A16_GEMM_N128_M128, a, w, c, m, n, k)
    }
    /// See [`W4A16_GEMM_N128_M128_BF16`].
    pub fn w4a16_gemm_n128_m128_bf16(&self, a: Region, w: &Fp4Weight, c: Region, m: usize, n: usize, k: usize) -> Result<()> {
        self.w4a16(&W4A16_GEMM_N128_M128_BF16, a, w, c, m, n, k)
    }
    /// See [`W4A16_GEMM_DECODE`].
    pub fn w4a16_gemm_decode(&self, a: Region, w: &Fp4Weight, c: Region, m: usize, n: usize, k: usize) -> Result<()> {
        let s = W4A16_GEMM_DECODE.symbol;
        require(m <= DECODE_MAX_M, s, "m", || format!("m = {m} is too large for the decode-only variant (max {DECODE_MAX_M})"))?;
        self.w4a16(&W4A16_GEMM_DECODE, a, w, c, m, n, k)
    }
}

/// A random NVFP4 weight `[n, k]` in the K-major layout with row stride `ldb`:
/// `(codes, scales, global scale)`.
pub fn random_weight(g: &mut Gen, n: usize, k: usize, ldb: usize) -> (Vec<u8>, Vec<u8>, f32) {
    let (v, _) = g.f32(n * k, -0.5, 0.5);
    let q = nvfp4::quantize(&v, n, k).expect("k is a multiple of the block and values are finite");
    let (p, s) = q.k_major(ldb);
    (p, s, q.global_scale)
}

type Launch = fn(&Ops, Region, &Fp4Weight, Region, usize, usize, usize) -> Result<()>;

fn cases_for(g: &mut Gen, sig: &'static KernelSig, shapes: &[(usize, usize, usize, usize)], launch: Launch) -> Vec<Case> {
    shapes
        .iter()
        .map(|&(m, n, k, ldb)| {
            let (a, _) = operands(g, m, 2, k);
            let (bq, bs, scale2) = random_weight(g, n, k, ldb);
            Case {
                kernel: sig,
                label: format!("m={m} n={n} k={k}{}", if ldb != n { format!(" ldb={ldb}") } else { String::new() }),
                buffers: vec![
                    Buffer::input("a", a),
                    Buffer::input("bq", bq),
                    Buffer::input("bs", bs),
                    Buffer::output("c", DType::BF16, m * n, Tolerance::Nmse(REORDERED_NMSE)),
                ],
                run: Box::new(move |o, x| launch(o, x[0], &Fp4Weight { bq: x[1], bs: x[2], scale2, ldb }, x[3], m, n, k)),
            }
        })
        .collect()
}

/// (M, N, K, ldb): M = 1, M not a multiple of 16, K not a multiple of 64,
/// two M chunks, and two prefill sizes that take the Hopper plan on an
/// sm_90a device: 3 × 3 tiles of 256 tokens × 128 columns, the last of each
/// ragged, K two 64-wide slices and a 16-wide one; and 2 × 2 tiles of 32
/// slices, which a 132-SM device splits in 4 K ranges.
const SHAPES: [(usize, usize, usize, usize); 6] =
    [(1, 64, 64, 64), (17, 128, 96, 128), (33, 256, 208, 256), (130, 192, 160, 192), (520, 272, 144, 272), (512, 256, 2048, 256)];

fn base_cases(g: &mut Gen) -> Vec<Case> {
    cases_for(g, &W4A16_GEMM, &SHAPES, Ops::w4a16_gemm)
}
fn n128_cases(g: &mut Gen) -> Vec<Case> {
    cases_for(g, &W4A16_GEMM_N128, &SHAPES, Ops::w4a16_gemm_n128)
}
fn ldb_cases(g: &mut Gen) -> Vec<Case> {
    cases_for(g, &W4A16_GEMM_N128_LDB, &[(3, 2477, 64, 2560), (1, 130, 32, 256), (20, 64, 48, 80)], Ops::w4a16_gemm_n128_ldb)
}
fn m128_cases(g: &mut Gen) -> Vec<Case> {
    cases_for(g, &W4A16_GEMM_N128_M128, &SHAPES, Ops::w4a16_gemm_n128_m128)
}
fn lossless_cases(g: &mut Gen) -> Vec<Case> {
    cases_for(g, &W4A16_GEMM_N128_M128_BF16, &SHAPES, Ops::w4a16_gemm_n128_m128_bf16)
}
fn decode_cases(g: &mut Gen) -> Vec<Case> {
    let mut v = cases_for(
        g,
        &W4A16_GEMM_DECODE,
        // Wider than one column block with several K splits, M = 1 and 8;
        // M in 9..16 (the two-token-tile CUDA entry) with K ragged against
        // the 64-k tile (1232 = 19 tiles + 16); and on a 132-SM device,
        // warps that go round their ring (192 column blocks): M = 1 with 4
        // tiles a warp, 3 with the last tile ragged (1424 = 22 tiles + 16),
        // and the two-token-tile entry with 5 or 6 a warp, ragged.
        &[
            (1, 64, 64, 64),
            (16, 256, 208, 256),
            (5, 192, 160, 192),
            (1, 64, 4096, 64),
            (16, 128, 2304, 128),
            (1, 1296, 2048, 1296),
            (8, 2080, 1024, 2080),
            (12, 400, 1232, 400),
            (1, 24576, 2048, 24576),
            (1, 24576, 1424, 24576),
            (10, 24576, 1424, 24576),
        ],
        Ops::w4a16_gemm_decode,
    );
    v.push(graded_decode_case(g, 3, 1040, 1024));
    v
}

/// A decode case whose weight blocks span seven decades, so that many
/// block scales are e4m3 subnormals or zero (the CUDA plan converts scales
/// with its own path).
fn graded_decode_case(g: &mut Gen, m: usize, n: usize, k: usize) -> Case {
    let (a, _) = operands(g, m, 2, k);
    let (mut w, _) = g.f32(n * k, -0.5, 0.5);
    for (i, x) in w.iter_mut().enumerate() {
        *x *= 10f32.powi(-((i / nvfp4::BLOCK % 8) as i32));
    }
    let q = nvfp4::quantize(&w, n, k).expect("k is a multiple of the block and values are finite");
    let (bq, bs) = q.k_major(n);
    let scale2 = q.global_scale;
    Case {
        kernel: &W4A16_GEMM_DECODE,
        label: format!("m={m} n={n} k={k} graded scales"),
        buffers: vec![
            Buffer::input("a", a),
            Buffer::input("bq", bq),
            Buffer::input("bs", bs),
            Buffer::output("c", DType::BF16, m * n, Tolerance::Nmse(REORDERED_NMSE)),
        ],
        run: Box::new(move |o, x| o.w4a16_gemm_decode(x[0], &Fp4Weight { bq: x[1], bs: x[2], scale2, ldb: n }, x[3], m, n, k)),
    }
}

inventory::submit! { CaseSet { kernel: &W4A16_GEMM, cases: base_cases } }
inventory::submit! { CaseSet { kernel: &W4A16_GEMM_N128, cases: n128_cases } }
inventory::submit! { CaseSet { kernel: &W4A16_GEMM_N128_LDB, cases: ldb_cases } }
inventory::submit! { CaseSet { kernel: &W4A16_GEMM_N128_M128, cases: m128_cases } }
inventory::submit! { CaseSet { kernel: &W4A16_GEMM_N128_M128_BF16, cases: lossless_cases } }
inventory::submit! { CaseSet { kernel: &W4A16_GEMM_DECODE, cases: decode_cases } }

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{cuda_kernel, wgsl_kernel};

    const FACTS: DeviceFacts = DeviceFacts { max_binding_bytes: 1 << 31, cuda_sm90a: false, cuda_clusters: false, ..crate::plan::H200 };

    /// The grids and blocks the launchers computed before plans existed, and
    /// the WGSL geometry the wgpu backend computed, written out by hand.
    #[test]
    fn plans_keep_the_launcher_geometry() {
        let (n, ldb) = (1040u32, 1040u32);
        for (sig, m, grid, block, wgrid) in [
            (&W4A16_GEMM, 300u32, [17, 5, 1], 128, [9, 3, 1]),
            (&W4A16_GEMM_N128, 300, [9, 5, 1], 128, [9, 3, 1]),
            (&W4A16_GEMM_N128_LDB, 300, [9, 5, 1], 128, [9, 3, 1]),
            (&W4A16_GEMM_N128_M128, 300, [9, 3, 1], 128, [9, 3, 1]),
            (&W4A16_GEMM_N128_M128_BF16, 300, [9, 3, 1], 128, [9, 3, 1]),
            (&W4A16_GEMM_DECODE, 9, [9, 1, 1], 128, [33, 1, 1]),
        ] {
            let mut a = vec![P(256), P(256), P(256), F(1.0), P(256), U(m), U(n), U(64)];
            if std::ptr::eq(sig, &W4A16_GEMM_N128_LDB) {
                a.push(U(ldb));
            }
            let pa = PlanArgs::new(sig, &a);
            let c = (cuda_kernel(sig).unwrap().plan)(&pa, &FACTS).unwrap();
            assert_eq!((c.passes.len(), c.passes[0].grid, c.passes[0].block), (1, grid, [block, 1, 1]), "{}", sig.symbol);
            let w = (wgsl_kernel(sig).unwrap().plan)(&pa, &FACTS).unwrap();
            assert_eq!((w.passes.len(), w.passes[0].entry, w.passes[0].grid), (1, sig.symbol, wgrid), "{}", sig.symbol);
        }
    }

    /// On a device that runs sm_90a entries, prefill sizes of the four
    /// packed-row variants take the one wgmma entry (so the lossless variant
    /// still equals the base kernel); the `_ldb` and decode variants, M below
    /// 512 and a misaligned operand keep mma.sync.
    #[test]
    fn prefill_sizes_take_the_wgmma_plan_on_hopper() {
        let hopper = DeviceFacts { cuda_sm90a: true, ..FACTS };
        let plan = |sig: &'static KernelSig, m: u32, n: u32, k: u32, bq: u64, f: &DeviceFacts| {
            let mut a = vec![P(256), P(bq), P(512), F(1.0), P(768), U(m), U(n), U(k)];
            if std::ptr::eq(sig, &W4A16_GEMM_N128_LDB) {
                a.push(U(n));
            }
            let c = (cuda_kernel(sig).unwrap().plan)(&PlanArgs::new(sig, &a), f).unwrap();
            (c.passes.len(), c.passes[0].entry, c.passes[0].grid, c.passes[0].block, c.passes[0].shared_bytes, c.workspace_bytes)
        };
        let entry = WGMMA_ENTRY;
        let smem = 5 * (32768 + 4096 + 1024) + 80 + 1024;
        let wg = |grid: u32| (1, entry, [grid, 1, 1], [384, 1, 1], smem, 16);
        // Split K: grid (blocks / S, S), S f32 partials of 256 x 128 for every tile.
        let split = |s: u32, tiles: u64| (1, entry, [132 / s, s, 1], [384, 1, 1], smem, tiles * u64::from(s) * 131072);
        for sig in [&W4A16_GEMM, &W4A16_GEMM_N128, &W4A16_GEMM_N128_M128, &W4A16_GEMM_N128_M128_BF16] {
            // The issue-5 shapes at M = 512 and 4096, and the parity cases.
            assert_eq!(plan(sig, 512, 8192, 8192, 256, &hopper), wg(128), "{}", sig.symbol);
            assert_eq!(plan(sig, 4096, 8192, 8192, 256, &hopper), wg(132), "{}", sig.symbol);
            assert_eq!(plan(sig, 512, 21504, 5376, 256, &hopper), wg(132), "{}", sig.symbol);
            assert_eq!(plan(sig, 4096, 21504, 5376, 256, &hopper), wg(132), "{}", sig.symbol);
            // 84 tiles, all in 3 K ranges: 252 items on 132 SMs.
            assert_eq!(plan(sig, 512, 5376, 21504, 256, &hopper), split(3, 84), "{}", sig.symbol);
            assert_eq!(plan(sig, 4096, 5376, 21504, 256, &hopper), wg(132), "{}", sig.symbol);
            // The parity cases: 3 x 3 tiles of 256 tokens x 128 columns, and 2 x 2 tiles of 32 slices.
            assert_eq!(plan(sig, 520, 272, 144, 256, &hopper), wg(9), "{}", sig.symbol);
            assert_eq!(plan(sig, 512, 256, 2048, 256, &hopper), split(4, 4), "{}", sig.symbol);
            // More tiles than SMs stay whole (134 tiles).
            assert_eq!(plan(sig, 512, 8576, 1024, 256, &hopper), wg(132), "{}", sig.symbol);
            assert_ne!(plan(sig, 511, 8192, 8192, 256, &hopper).1, entry, "{}", sig.symbol);
            assert_ne!(plan(sig, 512, 8192, 8192, 264, &hopper).1, entry, "{}", sig.symbol);
            assert_ne!(plan(sig, 512, 8192, 8192, 256, &FACTS).1, entry, "{}", sig.symbol);
        }
        assert_eq!(plan(&W4A16_GEMM_N128_LDB, 512, 8192, 8192, 256, &hopper).1, "w4a16_gemm_n128_ldb");
        assert_eq!(plan(&W4A16_GEMM_DECODE, 16, 8192, 8192, 256, &hopper).1, CUDA_DECODE_M16.symbol);
        assert_eq!(plan(&W4A16_GEMM_DECODE, 8, 8192, 8192, 256, &hopper).1, "w4a16_gemm_decode");
        let maps = crate::plan::cuda_tensor_maps("w4a16_sm90", "w4a16_gemm_wgmma").expect("registered");
        let a = [P(256), P(256), P(512), F(1.0), P(768), U(520), U(272), U(144)];
        let m = (maps.maps)(&PlanArgs::new(&W4A16_GEMM, &a)).unwrap();
        assert_eq!(
            m,
            [
                TensorMap2d { arg: "a", rows: 520, cols: 144, box_rows: 256, box_cols: 64 },
                TensorMap2d { arg: "bq", rows: 72, cols: 136, box_rows: 32, box_cols: 64 },
                TensorMap2d { arg: "bs", rows: 9, cols: 136, box_rows: 4, box_cols: 64 },
            ]
        );
    }

    /// The CUDA decode plan on an H200 (132 SMs): at most one round of
    /// resident blocks at the issue-5 shapes (three 4-warp blocks an SM at
    /// M ≤ 8, two at M ≤ 16), at least one 64-k tile per warp, the
    /// two-token-tile entry above M = 8, and the parity cases whose warps go
    /// round the ring.
    #[test]
    fn decode_plan_fills_one_wave() {
        let plan = |m: u32, n: u32, k: u32| {
            let a = [P(256), P(256), P(512), F(1.0), P(768), U(m), U(n), U(k)];
            let c = (cuda_kernel(&W4A16_GEMM_DECODE).unwrap().plan)(&PlanArgs::new(&W4A16_GEMM_DECODE, &a), &FACTS).unwrap();
            let p = &c.passes[0];
            (p.entry, p.grid, p.block, p.shared_bytes, c.workspace_bytes)
        };
        let (m8, m16) = ("w4a16_gemm_decode", "w4a16_gemm_decode_m16");
        let ring = |stages: u32, tt: u32| 4 * stages * (9 + 2 * tt) * 512;
        assert_eq!(plan(1, 8192, 8192), (m8, [64, 6, 1], [128, 1, 1], ring(3, 1), 6 * 8192 * 4));
        assert_eq!(plan(1, 21504, 5376), (m8, [168, 2, 1], [128, 1, 1], ring(3, 1), 2 * 21504 * 4));
        assert_eq!(plan(1, 5376, 21504), (m8, [42, 9, 1], [128, 1, 1], ring(3, 1), 9 * 5376 * 4));
        assert_eq!(plan(16, 8192, 8192), (m16, [64, 4, 1], [128, 1, 1], ring(4, 2), 4 * 16 * 8192 * 4));
        assert_eq!(plan(16, 21504, 5376).1, [168, 3, 1]);
        assert_eq!(plan(16, 5376, 21504).1, [42, 6, 1]);
        assert_eq!(plan(9, 8192, 8192).0, m16);
        // 192 column blocks: 2 splits of 16 tiles at M = 1, 4 a warp (a
        // three-tile ring wraps); one split of 23 at M = 10, 6, 6, 6 and 5 a
        // warp (a four-tile ring wraps, the last tile ragged).
        assert_eq!(plan(1, 24576, 2048).1, [192, 2, 1]);
        assert_eq!(plan(10, 24576, 1424).1, [192, 1, 1]);
        // One 64-k tile: no split; 20 tiles: at most 5 splits (one tile a warp).
        assert_eq!(plan(1, 64, 64).1, [1, 1, 1]);
        assert_eq!(plan(12, 400, 1232).1, [4, 5, 1]);
        assert_eq!(plan(1, 64, 64).4, 16);
        let a = [P(256), P(256), P(512), F(1.0), P(768), U(17), U(64), U(64)];
        assert!((cuda_kernel(&W4A16_GEMM_DECODE).unwrap().plan)(&PlanArgs::new(&W4A16_GEMM_DECODE, &a), &FACTS).is_err());
    }
}
