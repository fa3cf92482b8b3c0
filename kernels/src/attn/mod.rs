//! Paged attention over the KV pool that [`crate::rope_kv`] writes.
//!
//! KV cache layout: K and V pools `[num_slots, nkv, hd]` bf16, in pages of
//! `page` tokens; sequence `b`'s token `j` lives in slot
//! `block_table[b · max_pages + j / page] · page + j % page`. Query head `h`
//! reads KV head `h / (nh / nkv)` (grouped-query attention).
//!
//! Contract, both kernels: scores `s_j = scale · Σ_d q[d] · k_j[d]` in f32
//! (Gemma 4 uses scale = 1.0), causal (keys `j <= p` for a query at position
//! `p`) and, when `window > 0`, sliding (keys `j > p − window`, as HF's
//! sliding-window mask); softmax in f32 with the running-max (online) form;
//! `out = bf16(Σ_j softmax(s)_j · v_j)` with f32 accumulation. The order of
//! the sums is the backend's: parity is NMSE ≤ 1e-6 against the reference.
//! A row whose sequence, pages or slots fall outside the tables gets bf16 NaN.
use crate::ops::{bf16s, i32_arg, region, require, saturating_product, scalar, words, LaunchArg, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use crate::plan::{env_override, groups, positive, CudaPass, CudaPlan, DeviceFacts, PlanArgs, WgslPass, WgslPlan, WGSL_ARRIVAL_COUNTERS};
use std::sync::atomic::{AtomicU8, Ordering};
use switchyard_core::codec::bytes;
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, Error, Region, Result};

/// NMSE bound for attention outputs (summation order differs by backend).
pub const ATTN_NMSE: f64 = 1e-6;
/// (sequence, KV head, chunk) work items a decode launch aims for, so that
/// long single sequences fill the GPU (about two blocks an SM on an H200).
/// `DECODE_TARGET_BLOCKS` in attn.cu and attention_decode.wgsl.
pub const DECODE_TARGET_BLOCKS: usize = 256;
/// Fewest keys a decode split should cover (one CUDA tile): at short
/// contexts a decode launch is latency-bound, and a block walking one tile
/// instead of four ends sooner (ncu on the H200, 130 keys, 4 KV heads: 12
/// blocks of 64 keys took 11.2 us). `MIN_SPLIT_KEYS` in attn.cu and
/// attention_decode.wgsl.
pub const MIN_SPLIT_KEYS: usize = 16;

declare_kernel! {
    /// Causal (optionally sliding) attention for `rows` query rows of any mix
    /// of sequences: row `r` belongs to sequence `seq_of_row[r]` at position
    /// `pos[r]` and attends to that sequence's keys `0..=pos[r]` (window
    /// permitting) through the block table. Its own KV must already be in the
    /// pool. Shapes: out, q bf16 `[rows, nh·hd]`; block_table i32
    /// `[num_seqs, max_pages]`; seq_of_row, pos i32 `[rows]`.
    /// hd % 8 == 0, hd ≤ 512, nh % nkv == 0.
    ATTENTION_PREFILL = "attn"::"attention_prefill"(
        A::output("out"), A::input("q"), A::input("k_pool"), A::input("v_pool"), A::input("block_table"),
        A::input("seq_of_row"), A::input("pos"), A::i32("rows"), A::i32("nh"), A::i32("nkv"), A::i32("hd"),
        A::i32("page"), A::i32("max_pages"), A::i32("num_seqs"), A::i32("num_slots"), A::i32("window"), A::f32("scale"))
}

declare_kernel! {
    /// Decode: one query per sequence `b < batch` (`q` `[batch, nh·hd]`), at
    /// position `n − 1` for `n = ctx_len[b]`, its KV already written;
    /// sequence `b` reads block-table row `b`. `out` `[batch, nh·hd]` bf16.
    ///
    /// `max_ctx` is an upper bound on every `ctx_len`, fixed on the host (a
    /// session's capacity), so a decode step's arguments stay the same from
    /// token to token while `ctx_len` lives in device memory. It sizes the
    /// launch, never the result: a sequence with `ctx_len` outside
    /// `1..=min(max_ctx, max_pages·page)` is a NaN row.
    ///
    /// Split order, which defines the sums: the visible keys `[lo, n)`
    /// (`lo = max(0, n − window)` when sliding, else 0; `K = n − lo` keys) are
    /// cut into `S = decode_splits(K, batch, nkv)` ([`decode_splits`]) chunks of
    /// `L = ⌈K / S⌉` consecutive keys, chunk `s` = `[lo + s·L, min(n, lo + (s+1)·L))`
    /// (empty when it starts at or past `n`). Per chunk: `m_s` = max score,
    /// `l_s = Σ e^{s_j−m_s}`, `o_s = Σ e^{s_j−m_s} v_j` (f32; the reference sums
    /// keys in order). Then, over the non-empty chunks in chunk order:
    /// `M = max_s m_s`, `out = bf16(Σ_s e^{m_s−M} o_s / Σ_s e^{m_s−M} l_s)`.
    /// A NaN `m_s` makes the row NaN. With `S = 1` this is exactly the prefill
    /// row of the same query. The split depends on `ctx_len`, `window`, `batch`
    /// and `nkv` only, so growing `max_ctx` changes no bit of the output.
    /// Backends may run the chunks in parallel and combine them through
    /// workspace. hd % 8 == 0, hd ≤ 512, nh % nkv == 0.
    ATTENTION_DECODE = "attn"::"attention_decode"(
        A::output("out"), A::input("q"), A::input("k_pool"), A::input("v_pool"), A::input("block_table"),
        A::input("ctx_len"), A::i32("batch"), A::i32("max_ctx"), A::i32("nh"), A::i32("nkv"), A::i32("hd"),
        A::i32("page"), A::i32("max_pages"), A::i32("num_slots"), A::i32("window"), A::f32("scale"))
}

/// Keys a query at context length `ctx` sees: all of them, or the last
/// `window` when sliding.
pub fn visible_keys(ctx: usize, window: usize) -> usize {
    if window > 0 {
        ctx.min(window)
    } else {
        ctx
    }
}

/// Chunks [`ATTENTION_DECODE`] cuts `keys` visible keys into, for `batch`
/// sequences of `nkv` KV heads: enough that `batch · nkv · splits` reaches
/// [`DECODE_TARGET_BLOCKS`] (so a lone long sequence still fills the GPU), no
/// more than one per [`MIN_SPLIT_KEYS`] keys, and at least one. Counted per
/// KV head because a GPU block reads each K/V row once for all the query
/// heads of its group.
pub fn decode_splits(keys: usize, batch: usize, nkv: usize) -> usize {
    let want = DECODE_TARGET_BLOCKS.div_ceil(batch.saturating_mul(nkv).max(1));
    want.min(keys.div_ceil(MIN_SPLIT_KEYS)).max(1)
}

/// The paged KV cache a launch reads.
#[derive(Clone, Copy, Debug)]
pub struct KvView {
    /// K pool `[num_slots, nkv, hd]`.
    pub k_pool: Region,
    /// V pool `[num_slots, nkv, hd]`.
    pub v_pool: Region,
    /// Block table i32 `[num_seqs, max_pages]`.
    pub block_table: Region,
    /// KV heads.
    pub nkv: usize,
    /// Head dimension.
    pub hd: usize,
    /// Tokens per page.
    pub page: usize,
    /// Pages per sequence in the block table.
    pub max_pages: usize,
    /// Rows (sequences) of the block table.
    pub num_seqs: usize,
    /// Slots in the pools.
    pub num_slots: usize,
}

/// Attention settings shared by prefill and decode.
#[derive(Clone, Copy, Debug)]
pub struct AttnParams {
    /// Query heads.
    pub nh: usize,
    /// Sliding window (0 = full causal).
    pub window: usize,
    /// Score scale.
    pub scale: f32,
}

/// Buffers and sizes of one decode step.
#[derive(Clone, Copy, Debug)]
pub struct AttnDecode {
    /// Output `[batch, nh·hd]` bf16.
    pub out: Region,
    /// Queries `[batch, nh·hd]` bf16.
    pub q: Region,
    /// Context lengths i32 `[batch]` (query position + 1).
    pub ctx_len: Region,
    /// Sequences.
    pub batch: usize,
    /// Upper bound on every `ctx_len` (a session's capacity): sizes the launch.
    pub max_ctx: usize,
}

fn check_view(kernel: &str, kv: &KvView, p: &AttnParams) -> Result<()> {
    require(kv.hd > 0 && kv.hd % 8 == 0 && kv.hd <= 512, kernel, "hd", || format!("hd = {} must be a multiple of 8 in 8..=512", kv.hd))?;
    require(kv.nkv > 0 && p.nh > 0 && p.nh % kv.nkv == 0, kernel, "nh", || {
        format!("nh = {} must be a positive multiple of nkv = {}", p.nh, kv.nkv)
    })?;
    require(kv.page > 0, kernel, "page", || "page must be > 0".into())?;
    require(kv.max_pages > 0 && kv.num_seqs > 0 && kv.num_slots > 0, kernel, "block_table", || {
        "max_pages, num_seqs and num_slots must be > 0".into()
    })?;
    require(p.scale.is_finite(), kernel, "scale", || format!("scale = {} must be finite", p.scale))?;
    i32_arg(kernel, "window", p.window).map(|_| ())
}

/// The pools' and block table's launch arguments, each checked to cover the view's sizes.
fn kv_args(kernel: &str, kv: &KvView) -> Result<[LaunchArg; 3]> {
    i32_arg(kernel, "num_slots", kv.num_slots)?;
    let pool = bf16s(saturating_product(&[kv.num_slots, kv.nkv, kv.hd]));
    Ok([region(kv.k_pool, pool), region(kv.v_pool, pool), region(kv.block_table, words(saturating_product(&[kv.num_seqs, kv.max_pages])))])
}

// ---------------------------------------------------------------- plans

/// Threads per block of every CUDA attention entry point (attn.cu's launch bound).
const CUDA_THREADS: u32 = 128;
/// Query rows per CUDA prefill block (4 warps of 16 rows).
const CUDA_PREFILL_ROWS: u64 = 64;

/// `nh` and `nkv`, refusing a head mapping that is not a whole group per KV head.
fn heads(a: &PlanArgs) -> Result<(u32, u32)> {
    let (nh, nkv) = (a.u32("nh")?, a.u32("nkv")?);
    if nkv == 0 || nh == 0 || !nh.is_multiple_of(nkv) {
        return Err(Error::invalid(a.kernel.symbol, "nh", format!("nh = {nh} must be a positive multiple of nkv = {nkv}")));
    }
    Ok((nh, nkv))
}

/// `hd`, refusing what the kernels cannot hold (a multiple of 8 in 8..=512).
fn head_dim(a: &PlanArgs) -> Result<u32> {
    let hd = a.u32("hd")?;
    if hd == 0 || !hd.is_multiple_of(8) || hd > 512 {
        return Err(Error::invalid(a.kernel.symbol, "hd", format!("hd = {hd} must be a multiple of 8 in 8..=512")));
    }
    Ok(hd)
}

/// Query rows per WGSL attention workgroup: a power of two with rows · hd/2 <= 1024,
/// so that each of the 128 threads keeps at most 16 f32 accumulators and
/// the q block fits the shaders' 16 KiB of workgroup memory.
fn wgsl_rows_per_group(hd: u32) -> u32 {
    // Largest power of two not above min(32, 1024 / (hd/2)); hd <= 512 makes it >= 4.
    let most = (1024 / (hd / 2)).min(32);
    1 << (31 - most.leading_zeros())
}

/// The decode launch's chunk count `S` for the longest context `max_ctx`
/// allows (every sequence uses at most this many), and the workspace for
/// per-chunk partials: f32 `o` `[batch, nh, S, hd]` then `(m, l)` `[batch, nh, S, 2]`.
fn decode_layout(a: &PlanArgs) -> Result<(u32, u64)> {
    let (batch, hd) = (positive(a, "batch")?, head_dim(a)?);
    let (nh, nkv) = heads(a)?;
    let keys = visible_keys(a.u32("max_ctx")? as usize, a.u32("window")? as usize);
    let splits = decode_splits(keys, batch as usize, nkv as usize) as u32;
    let bytes = [batch as u64, nh as u64, splits as u64, hd as u64 + 2, 4].iter().try_fold(1u64, |acc, &x| acc.checked_mul(x));
    let bytes = bytes.ok_or_else(|| Error::invalid(a.kernel.symbol, "batch", "the decode workspace size overflows u64"))?;
    Ok((splits, bytes))
}

/// The flash prefill entries of `attn/flash_prefill.cu`: (hd, entry, warps
/// of 16 query rows, keys per tile, pipeline stages), as its `FLASH_ENTRY`
/// lines instantiate them.
const FLASH_PREFILL: [(u32, &str, u32, u32, u32); 3] = [
    (128, "flash_prefill::attention_prefill_flash_hd128", 8, 64, 3),
    (256, "flash_prefill::attention_prefill_flash_hd256", 8, 64, 2),
    (512, "flash_prefill::attention_prefill_flash_hd512", 8, 16, 3),
];
/// Static shared memory of a flash prefill block (row metadata, control
/// words), an upper bound that the plan keeps free beside the dynamic part.
const FLASH_STATIC_SHARED: u32 = 3072;

/// Environment switch of the flash prefill plan: `0` keeps attn.cu's
/// kernel for every shape; anything else (or unset) picks `flash_prefill.cu`
/// where it applies.
pub const FLASH_PREFILL_ENV: &str = "SWITCHYARD_FLASH_PREFILL";
/// Whether the flash prefill plan is on when [`FLASH_PREFILL_ENV`] is unset:
/// on since its parity run on the H200 (every attention case, replay
/// identical, compute-sanitizer memcheck and racecheck clean; the NaN rows
/// of invalid tables identical to attn.cu's at 4096 tokens). H200, one
/// 4096-token sequence, nh 32, TFLOP/s of unmasked products, attn.cu's
/// kernel → flash: hd 256 causal 27.2 → 151.0 (torch SDPA's flash backend
/// 263.7, its default dispatch 525.0), hd 256 window 1024 31.1 → 141.9,
/// hd 512 causal (nkv 4) 19.4 → 93.0 (SDPA 18.3), V = K 20.0 → 96.6, V = K
/// window 1024 21.7 → 90.5. With P·V in f16 and 64-key tiles at hd 256
/// (another call): hd 256 causal 170.7 (SDPA's flash backend 272.7), window
/// 1024 158.3, hd 512 90.9, V = K 94.5, V = K window 1024 87.5.
const FLASH_PREFILL_DEFAULT: bool = true;
/// 0: not read yet; 1: off; 2: on.
static FLASH_PREFILL_ON: AtomicU8 = AtomicU8::new(0);

/// Whether the CUDA prefill plan uses the flash kernels where they apply:
/// [`set_flash_prefill`]'s last word, else [`FLASH_PREFILL_ENV`], else the default.
pub fn flash_prefill() -> bool {
    match FLASH_PREFILL_ON.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let on = std::env::var(FLASH_PREFILL_ENV).map_or(FLASH_PREFILL_DEFAULT, |v| v.trim() != "0");
            FLASH_PREFILL_ON.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
    }
}

/// Turns the flash prefill plan on or off for the process's later launches
/// (benchmarks time both forms in one run).
pub fn set_flash_prefill(on: bool) {
    FLASH_PREFILL_ON.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

/// Dynamic shared memory of a flash prefill entry: the Q tile (16 · warps
/// rows of hd + 8) and `stages` K tiles (keys × (hd + 8)) and V tiles (keys
/// × (min(hd, 256) + 8)), bf16.
fn flash_shared_bytes(hd: u32, warps: u32, keys: u32, stages: u32) -> u32 {
    let dv = hd.min(256);
    (16 * warps * (hd + 8) + stages * keys * (hd + 8 + dv + 8)) * 2
}

/// The Hopper flash prefill entry (`attn/flash_prefill_sm90.cu`, wgmma with
/// a cp.async producer warpgroup): hd 256 only, 128 query rows a block of 384
/// threads. H200, 4096 tokens, nh 32 / nkv 16, TFLOP/s of the unmasked
/// products (one call, torch SDPA's flash backend 275.0): causal 341.7
/// (flash_prefill.cu's mma.sync kernel 175.0), window 1024 293.9 (161.1).
const FLASH3_HD256: &str = "flash_prefill_sm90::attention_prefill_flash3_hd256";
const FLASH3_ROWS: u32 = 128;
/// `F3_SMEM`: Q 64 KiB, two stages of 64-key K and V tiles 128 KiB, the
/// mbarriers, and slack to align the ring to 1024 bytes.
const FLASH3_SHARED: u32 = 4 * 128 * 128 + 2 * 2 * 4 * 64 * 128 + 64 + 1024;
/// Environment switch of the Hopper flash prefill entry: `0` keeps
/// `flash_prefill.cu`'s mma.sync kernel at hd 256 on sm_90a devices too (for
/// A/B timing); anything else (or unset) picks it where it applies.
pub const FLASH3_PREFILL_ENV: &str = "SWITCHYARD_FLASH3_PREFILL";
/// 0: not read yet; 1: off; 2: on.
static FLASH3_PREFILL_ON: AtomicU8 = AtomicU8::new(0);

/// Whether [`FLASH3_PREFILL_ENV`] leaves the Hopper flash prefill entry on (read once a process).
fn flash3_prefill() -> bool {
    match FLASH3_PREFILL_ON.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let on = std::env::var(FLASH3_PREFILL_ENV).map_or(true, |v| v.trim() != "0");
            FLASH3_PREFILL_ON.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
    }
}

/// CUDA prefill: [`flash_prefill`] permitting, on a device that runs sm_90a
/// entries at hd 256, `flash_prefill_sm90.cu`'s wgmma kernel (grid
/// (⌈rows / 128⌉, nh, 1), 384 threads); else the flash kernels of
/// `flash_prefill.cu` for hd 128, 256 and 512 (16-byte aligned q and pools,
/// the block's shared memory within the device's limit), grid (⌈rows / BM⌉,
/// nh, hd / min(hd, 256)) with BM = 16 · warps; otherwise attn.cu's
/// `attention_prefill`, 64 query rows (4 warps of 16) per block and head.
fn cuda_attention_prefill(a: &PlanArgs, f: &DeviceFacts) -> Result<CudaPlan> {
    prefill_plan(a, f, flash_prefill())
}

fn prefill_plan(a: &PlanArgs, f: &DeviceFacts, flash: bool) -> Result<CudaPlan> {
    let hd = head_dim(a)?;
    let (nh, _) = heads(a)?;
    let rows = positive(a, "rows")?;
    let aligned = ["q", "k_pool", "v_pool"].iter().try_fold(true, |ok, n| Ok::<_, Error>(ok && a.addr(n)? % 16 == 0))?;
    let hopper = flash && aligned && f.cuda_sm90a && hd == 256 && FLASH3_SHARED + FLASH_STATIC_SHARED <= f.max_shared_bytes;
    if hopper && nh <= 65535 && flash3_prefill() {
        return Ok(CudaPlan {
            passes: vec![CudaPass {
                entry: FLASH3_HD256,
                grid: [rows.div_ceil(FLASH3_ROWS), nh, 1],
                block: [384, 1, 1],
                shared_bytes: FLASH3_SHARED,
            }],
            workspace_bytes: 0,
        });
    }
    if let Some(&(_, entry, warps, keys, stages)) = FLASH_PREFILL.iter().find(|e| e.0 == hd) {
        let shared = flash_shared_bytes(hd, warps, keys, stages);
        if flash && aligned && shared + FLASH_STATIC_SHARED <= f.max_shared_bytes && nh <= 65535 {
            let grid = [rows.div_ceil(16 * warps), nh, hd / hd.min(256)];
            return Ok(CudaPlan {
                passes: vec![CudaPass { entry, grid, block: [32 * warps, 1, 1], shared_bytes: shared }],
                workspace_bytes: 0,
            });
        }
    }
    let rows = groups(a.kernel, rows.into(), CUDA_PREFILL_ROWS)?;
    Ok(CudaPlan::single(a.kernel, [rows, nh, 1], [CUDA_THREADS, 1, 1]))
}

/// WGSL prefill: `x0` query rows per workgroup, grid (row blocks, nh).
fn wgsl_attention_prefill(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    let rb = wgsl_rows_per_group(head_dim(a)?);
    let (nh, _) = heads(a)?;
    let grid = [positive(a, "rows")?.div_ceil(rb), nh, 1];
    Ok(WgslPlan {
        passes: vec![WgslPass { entry: a.kernel.symbol, grid, consts: vec![], extra: [rb, 0, 0, 0] }],
        workspace_bytes: 0,
        arrivals: 0,
    })
}

/// Pipeline depth of the CUDA decode: tiles of [`CUDA_DECODE_TILE`] keys in
/// shared memory at once, per team (`DECODE_STAGES` in attn.cu).
pub const CUDA_DECODE_STAGES: u32 = 6;
/// Keys per tile of the CUDA decode (`DC_TILE` in attn.cu).
pub const CUDA_DECODE_TILE: u32 = 16;
/// Static shared memory of the one-team CUDA decode block (the 4 warps'
/// score partials).
const CUDA_DECODE_STATIC_SHARED: u32 = 2048;
/// Dynamic shared memory a team of `attention_decode_tm` holds beside its
/// stages: its 4 warps' score partials (2048 bytes) and its ring of 8 tiles'
/// page entries (512) (`DC_TEAM_EXTRA` in attn.cu).
const CUDA_DECODE_TEAM_EXTRA: u32 = 2560;
/// Most teams of 4 warps a CUDA decode block holds (`DC_MAX_TEAMS`).
const CUDA_DECODE_MAX_TEAMS: u32 = 4;
/// Tiles of the longest chunk from which a CUDA decode block runs two teams
/// (each then takes at least 4 of the chunk's tiles); shorter chunks keep
/// one team and its deeper pipeline (the bench model's chunks, 16-50 keys,
/// stay on one team of 6 stages, as before teams). The kernel applies the same threshold
/// to each chunk (`DC_TEAM_TILES`: a shorter chunk runs on team 0 alone), so
/// the order of a chunk's sums depends on its own length only, and growing
/// `max_ctx` still changes no bit (as long as the teams come from this rule,
/// not from [`DECODE_TEAMS_ENV`]).
const CUDA_DECODE_TEAM_TILES: u32 = 8;
/// Query heads a CUDA decode block serves (the mma's 8 columns).
const CUDA_DECODE_HEADS: u32 = 8;
/// Most chunks the cluster plan of the CUDA decode takes (the largest
/// cluster Hopper schedules, which the backend opts cluster entries into);
/// a longer split keeps the two-pass plan.
const CUDA_DECODE_MAX_CLUSTER: u32 = 16;
/// Environment overrides of the CUDA decode's teams a block (1, 2 or 4) and
/// stages a team (2..=6), for measuring the rule; unset, the rule decides.
pub const DECODE_TEAMS_ENV: &str = "SWITCHYARD_ATTN_DECODE_TEAMS";
/// See [`DECODE_TEAMS_ENV`].
pub const DECODE_STAGES_ENV: &str = "SWITCHYARD_ATTN_DECODE_STAGES";
/// Environment override for measuring: `1` takes the cluster plan for every
/// split of 2..=16 chunks, however many blocks the grid has.
pub const DECODE_CLUSTER_ENV: &str = "SWITCHYARD_ATTN_DECODE_CLUSTER";

/// The CUDA decode plan's measurement overrides: teams, stages, cluster for any grid.
type DecodeOverrides = (Option<u32>, Option<u32>, bool);

fn env_choice(name: &str, allowed: &[u32]) -> Option<u32> {
    let v = std::env::var(name).ok()?.trim().parse::<u32>().ok()?;
    allowed.contains(&v).then_some(v)
}

/// The CUDA decode's teams a block and stages a team: the overrides, else
/// two teams once the longest chunk has [`CUDA_DECODE_TEAM_TILES`] tiles.
/// One team: `attention_decode`'s sizing, up to [`CUDA_DECODE_STAGES`]
/// stages in the room beside its static partials. Teams: as many stages (up
/// to the same) as leave room for two blocks an SM; a team needs two
/// stages, so where two blocks' share is too small one block takes the
/// whole room, and where even that is too small, fewer teams.
fn cuda_decode_teams(longest_keys: u32, stage_bytes: u32, room: u32, over: (Option<u32>, Option<u32>)) -> (u32, u32) {
    let tiles = longest_keys.div_ceil(CUDA_DECODE_TILE);
    let mut teams = over.0.unwrap_or(if tiles >= CUDA_DECODE_TEAM_TILES { 2 } else { 1 });
    let fit = |teams: u32, budget: u32| (budget / teams).saturating_sub(CUDA_DECODE_TEAM_EXTRA) / stage_bytes;
    while teams > 1 && fit(teams, room) < 2 {
        teams /= 2;
    }
    let stages = match teams {
        1 => room.saturating_sub(CUDA_DECODE_STATIC_SHARED) / stage_bytes,
        _ if fit(teams, room / 2) >= 2 => fit(teams, room / 2),
        _ => fit(teams, room),
    };
    let stages = stages.min(CUDA_DECODE_STAGES);
    (teams, over.1.map_or(stages, |s| s.min(stages.max(2))))
}

/// CUDA decode: phase 1 `attention_decode`, grid (S, nkv · ⌈G / 8⌉, batch)
/// with G = nh / nkv, one block per (chunk, KV head, group of up to 8 of its
/// query heads), so K and V are read once per KV head (once in all when
/// `v_pool` is `k_pool`); when S > 1, phase 2 `attention_decode_reduce`,
/// grid (batch, nh, ⌈hd / 128⌉), the combine. With S = 1 phase 1 writes the
/// output and there is no phase 2 (the 8-byte workspace is then untouched:
/// the entry's trailing parameter exists either way). Where the device has
/// thread-block clusters and 2 ≤ S ≤ [`CUDA_DECODE_MAX_CLUSTER`], one launch
/// of `attention_decode_cl` instead: the S chunks of a (KV head, query
/// group, sequence) are one cluster, which combines them through
/// distributed shared memory in chunk order, the reduce pass's arithmetic,
/// where the whole grid is at most one block per multiprocessor (a launch
/// that short is latency-bound, and the second launch was a third of its
/// time: bench-model batch 1 on the H200, 130-160 keys, 9-10 chunks, went
/// from 365 to 370 tok/s; at batch 16, 256 blocks of 99 KiB shared memory
/// as clusters of 4, it lost 126 us a step).
/// That covers batch-1 contexts up to 256 keys (chunks of 16 keys).
///
/// Where the longest chunk has [`CUDA_DECODE_TEAM_TILES`] tiles or more,
/// phase 1 is `attention_decode_tm` instead, a block of T teams of 128
/// threads ([`cuda_decode_teams`]) that take alternate tiles of a chunk,
/// each team with its own pipeline, and merge at the end (never as a
/// cluster: such grids are past one block an SM). Shared memory: stages of
/// 16 keys × (hd padded to 64, + 8) bf16, for K and V (K only when V aliases
/// K), per team, plus [`CUDA_DECODE_TEAM_EXTRA`] per team for `_tm` (the
/// one-team entries keep [`CUDA_DECODE_STATIC_SHARED`] static). H200
/// numbers for the bench rows: hd 256 with V, or hd 512 with V = K, 16.5
/// KiB a stage; chunks of 128 keys and more take 2 teams of 3 stages (105
/// KiB a block, 2 blocks an SM: 4 pipelines of 2 tiles in flight; one team
/// of 6 stages, 2 blocks an SM, read the global layer at batch 16 at 52% of
/// the copy ceiling, two teams at 74%), shorter ones one team of 6 stages
/// (bench-model's short contexts: `attention_decode` as before). Blocks: with
/// [`DECODE_TARGET_BLOCKS`] = 256, batch 1 at 4 KV heads and 16k keys is 64
/// chunks of 256 keys (256 blocks, 1.9 an SM); batch 16 at 16 KV heads with
/// a 1024 window is 256 one-chunk blocks and no second pass.
fn cuda_attention_decode(a: &PlanArgs, f: &DeviceFacts) -> Result<CudaPlan> {
    // Read once a process: a plan is made at every launch.
    static OVER: std::sync::OnceLock<DecodeOverrides> = std::sync::OnceLock::new();
    let over = *OVER.get_or_init(|| {
        (
            env_choice(DECODE_TEAMS_ENV, &[1, 2, 4]),
            env_choice(DECODE_STAGES_ENV, &[2, 3, 4, 5, 6]),
            env_choice(DECODE_CLUSTER_ENV, &[1]).is_some(),
        )
    });
    cuda_decode_plan(a, f, over)
}

fn cuda_decode_plan(a: &PlanArgs, f: &DeviceFacts, over: DecodeOverrides) -> Result<CudaPlan> {
    let (splits, two_pass_bytes) = decode_layout(a)?;
    let (nh, nkv) = heads(a)?;
    let (batch, hd) = (positive(a, "batch")?, head_dim(a)?);
    let y = nkv as u64 * (nh / nkv).div_ceil(CUDA_DECODE_HEADS) as u64;
    if y > 65535 || batch > 65535 {
        return Err(Error::invalid(a.kernel.symbol, "nkv", format!("{y} KV-head groups or {batch} sequences exceed the grid's 65535")));
    }
    let padded = hd.next_multiple_of(64) + 8;
    let matrices = if a.addr("k_pool")? == a.addr("v_pool")? { 1 } else { 2 };
    let stage_bytes = CUDA_DECODE_TILE * padded * 2 * matrices;
    let room = if f.max_shared_bytes == 0 { 48 * 1024 } else { f.max_shared_bytes };
    let keys = visible_keys(a.u32("max_ctx")? as usize, a.u32("window")? as usize) as u32;
    let (teams, stages) = cuda_decode_teams(keys.div_ceil(splits), stage_bytes, room, (over.0, over.1));
    debug_assert!(teams <= CUDA_DECODE_MAX_TEAMS);
    let (shared_bytes, fixed) = match teams {
        1 => (stages * stage_bytes, CUDA_DECODE_STATIC_SHARED),
        _ => (teams * (stages * stage_bytes + CUDA_DECODE_TEAM_EXTRA), 0),
    };
    if stages < 2 || shared_bytes + fixed > room {
        return Err(Error::invalid(
            a.kernel.symbol,
            "hd",
            format!("{teams} x two {stage_bytes}-byte tiles do not fit the device's {room} bytes of shared memory"),
        ));
    }
    let block = [CUDA_THREADS * teams, 1, 1];
    let blocks = u64::from(splits) * y * u64::from(batch);
    let cluster = blocks <= u64::from(f.multiprocessors) || over.2;
    if f.cuda_clusters && teams == 1 && (2..=CUDA_DECODE_MAX_CLUSTER).contains(&splits) && cluster {
        // The chunk's partials for up to 8 heads, then their (m, l), reuse the tiles' memory.
        let shared_bytes = shared_bytes.max(CUDA_DECODE_HEADS * (hd + 2) * 4);
        let pass = CudaPass { entry: "attention_decode_cl", grid: [splits, y as u32, batch], block, shared_bytes };
        return Ok(CudaPlan { passes: vec![pass], workspace_bytes: 8 });
    }
    let entry = if teams == 1 { "attention_decode" } else { "attention_decode_tm" };
    let mut passes = vec![CudaPass { entry, grid: [splits, y as u32, batch], block, shared_bytes }];
    if splits > 1 {
        passes.push(CudaPass {
            entry: "attention_decode_reduce",
            grid: [batch, nh, hd.div_ceil(128)],
            block: [CUDA_THREADS, 1, 1],
            shared_bytes: 0,
        });
    }
    Ok(CudaPlan { passes, workspace_bytes: if splits > 1 { two_pass_bytes } else { 8 } })
}

/// Words of tile_common.wgsli's pool at its default (`POOL`): with the
/// shaders' other workgroup arrays (under [`WGSL_TILE_OTHER_BYTES`]) the
/// portable 16 KiB.
const WGSL_POOL_WORDS: u32 = 3584;
/// Workgroup memory the decode shader holds beside the pool (slot table,
/// score partials, row statistics, control words: 1040 bytes), rounded up.
const WGSL_TILE_OTHER_BYTES: u32 = 2048;
/// Keys a WGSL tile holds at most (`MAX_KT` in tile_common.wgsli).
const WGSL_MAX_KT: u32 = 64;

/// The decode shader's pool (the `POOL` override) for query rows of `hd`
/// dims, `rows` of them a workgroup, when no chunk is longer than
/// `chunk_keys`: for chunks of at most [`MIN_SPLIT_KEYS`] keys (short
/// contexts, where a launch is a chain of a few round trips and occupancy
/// does not limit it), room for the q rows and one tile of the whole chunk
/// (K, V and a score per row and key) within the adapter's workgroup storage;
/// otherwise, and never less than, the default. H200 (48 KiB): a 16-key
/// chunk at hd 512 with 4 rows is one tile instead of 4, at hd 256 with 2
/// rows one instead of 2 (with the copies below, the decode step's
/// attention_decode 27.3 -> 20.5 us). Longer chunks keep the default: a
/// 47 KiB pool leaves an SM four 128-invocation workgroups, and the long
/// context bench rows moved both ways with it (global b=16 ctx=16384
/// 13.0 -> 16.2 ms, b=1 4.1 -> 3.9 ms).
fn wgsl_decode_pool(hd: u32, rows: u32, chunk_keys: u32, max_shared_bytes: u32) -> u32 {
    if chunk_keys as usize > MIN_SPLIT_KEYS {
        return WGSL_POOL_WORDS;
    }
    let (w, mp) = (hd / 2, rows.next_power_of_two());
    let want = mp * w + chunk_keys.max(1) * (2 * w + mp);
    let room = max_shared_bytes.saturating_sub(WGSL_TILE_OTHER_BYTES) / 4;
    want.min(room).max(WGSL_POOL_WORDS)
}

/// Most chunks for which the WGSL decode combines in its last workgroup
/// (`attention_decode_once`): that workgroup then adds S chunks for each of
/// its query heads alone, where phase 2 spreads the heads over workgroups.
pub const WGSL_DECODE_ONCE_MAX_SPLITS: u32 = 16;

/// WGSL decode: phase 1 `attention_decode`, where a workgroup takes up to
/// `x0` query heads of one KV head (they share each K/V row), `x1`
/// workgroups per KV head, grid (S, nkv · x1, batch), its pool sized by
/// [`wgsl_decode_pool`] for the longest chunk `max_ctx` allows; phase 2
/// `attention_decode_reduce`, grid (batch, nh), its pool the 2·S words of
/// the chunks' (m, l). Up to [`WGSL_DECODE_ONCE_MAX_SPLITS`] chunks (every
/// short-context decode step), one launch instead: `attention_decode_once`,
/// phase 1 whose last workgroup of each (sequence, grid row) combines that
/// row's heads, on one of the backend's arrival counters each.
///
/// `SWITCHYARD_WGSL_DECODE_PASSES=2` (read once a process) keeps the two
/// passes everywhere, to measure one against the other.
fn wgsl_attention_decode(a: &PlanArgs, f: &DeviceFacts) -> Result<WgslPlan> {
    static PASSES: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let two = env_override(&PASSES, "SWITCHYARD_WGSL_DECODE_PASSES", |v| [1, 2].contains(&v)) == Some(2);
    wgsl_decode_plan(a, f, two)
}

/// [`wgsl_attention_decode`] with the override given.
fn wgsl_decode_plan(a: &PlanArgs, f: &DeviceFacts, two_passes: bool) -> Result<WgslPlan> {
    let (splits, workspace_bytes) = decode_layout(a)?;
    let hd = head_dim(a)?;
    let rb = wgsl_rows_per_group(hd);
    let (nh, nkv) = heads(a)?;
    let batch = positive(a, "batch")?;
    let group = nh / nkv;
    let per = group.min(rb);
    let chunks = group.div_ceil(per);
    // The longest chunk: up to MIN_SPLIT_KEYS keys while the key count
    // decides the split, else ⌈K / S⌉ of the most keys max_ctx allows.
    let keys = visible_keys(a.u32("max_ctx")? as usize, a.u32("window")? as usize);
    let want = DECODE_TARGET_BLOCKS.div_ceil((batch as usize).saturating_mul(nkv as usize).max(1));
    let longest = keys.min(MIN_SPLIT_KEYS.max(keys.div_ceil(want))).min(WGSL_MAX_KT as usize) as u32;
    let pool = wgsl_decode_pool(hd, per, longest, f.max_shared_bytes);
    let phase1 = |entry| WgslPass { entry, grid: [splits, nkv * chunks, batch], consts: vec![("POOL", pool)], extra: [per, chunks, 0, 0] };
    let counters = u64::from(batch) * u64::from(nkv * chunks);
    if !two_passes && splits <= WGSL_DECODE_ONCE_MAX_SPLITS && counters <= u64::from(WGSL_ARRIVAL_COUNTERS) {
        let arrivals = counters as u32;
        return Ok(WgslPlan { passes: vec![phase1("attention_decode_once")], workspace_bytes, arrivals });
    }
    // Phase 2 stages the chunks' (m, l) at the start of its pool.
    let reduce_pool = 2 * splits;
    Ok(WgslPlan {
        passes: vec![
            phase1("attention_decode"),
            WgslPass { entry: "attention_decode_reduce", grid: [batch, nh, 1], consts: vec![("POOL", reduce_pool)], extra: [0; 4] },
        ],
        workspace_bytes,
        arrivals: 0,
    })
}

cuda_plan!(ATTENTION_PREFILL => cuda_attention_prefill);
cuda_plan!(ATTENTION_DECODE => cuda_attention_decode);
wgsl_plan!(ATTENTION_PREFILL, "attn/attention_prefill.wgsl" => wgsl_attention_prefill);
wgsl_plan!(ATTENTION_DECODE, "attn/attention_decode.wgsl" => wgsl_attention_decode);

// ---------------------------------------------------------------- launchers

impl Ops {
    /// See [`ATTENTION_PREFILL`].
    #[allow(clippy::too_many_arguments)]
    pub fn attention_prefill(
        &self,
        out: Region,
        q: Region,
        seq_of_row: Region,
        pos: Region,
        rows: usize,
        kv: &KvView,
        p: &AttnParams,
    ) -> Result<()> {
        let k = ATTENTION_PREFILL.symbol;
        check_view(k, kv, p)?;
        require(rows > 0, k, "rows", || "rows must be > 0".into())?;
        let n = bf16s(saturating_product(&[rows, p.nh, kv.hd]));
        let [kp, vp, bt] = kv_args(k, kv)?;
        self.launch(
            &ATTENTION_PREFILL,
            &[
                region(out, n),
                region(q, n),
                kp,
                vp,
                bt,
                region(seq_of_row, words(rows)),
                region(pos, words(rows)),
                scalar(I(i32_arg(k, "rows", rows)?)),
                scalar(I(i32_arg(k, "nh", p.nh)?)),
                scalar(I(i32_arg(k, "nkv", kv.nkv)?)),
                scalar(I(i32_arg(k, "hd", kv.hd)?)),
                scalar(I(i32_arg(k, "page", kv.page)?)),
                scalar(I(i32_arg(k, "max_pages", kv.max_pages)?)),
                scalar(I(i32_arg(k, "num_seqs", kv.num_seqs)?)),
                scalar(I(i32_arg(k, "num_slots", kv.num_slots)?)),
                scalar(I(i32_arg(k, "window", p.window)?)),
                scalar(F(p.scale)),
            ],
        )
    }

    /// See [`ATTENTION_DECODE`]. `d.max_ctx` may stay fixed across decode
    /// steps (the session's capacity); only `ctx_len` changes.
    pub fn attention_decode(&self, d: &AttnDecode, kv: &KvView, p: &AttnParams) -> Result<()> {
        let k = ATTENTION_DECODE.symbol;
        check_view(k, kv, p)?;
        require(d.batch > 0 && d.batch <= kv.num_seqs, k, "batch", || {
            format!("batch = {} must be in 1..=num_seqs ({})", d.batch, kv.num_seqs)
        })?;
        let capacity = saturating_product(&[kv.max_pages, kv.page]);
        require(d.max_ctx > 0 && d.max_ctx <= capacity, k, "max_ctx", || {
            format!("max_ctx = {} must be in 1..=max_pages·page ({capacity})", d.max_ctx)
        })?;
        let n = bf16s(saturating_product(&[d.batch, p.nh, kv.hd]));
        let [kp, vp, bt] = kv_args(k, kv)?;
        self.launch(
            &ATTENTION_DECODE,
            &[
                region(d.out, n),
                region(d.q, n),
                kp,
                vp,
                bt,
                region(d.ctx_len, words(d.batch)),
                scalar(I(i32_arg(k, "batch", d.batch)?)),
                scalar(I(i32_arg(k, "max_ctx", d.max_ctx)?)),
                scalar(I(i32_arg(k, "nh", p.nh)?)),
                scalar(I(i32_arg(k, "nkv", kv.nkv)?)),
                scalar(I(i32_arg(k, "hd", kv.hd)?)),
                scalar(I(i32_arg(k, "page", kv.page)?)),
                scalar(I(i32_arg(k, "max_pages", kv.max_pages)?)),
                scalar(I(i32_arg(k, "num_slots", kv.num_slots)?)),
                scalar(I(i32_arg(k, "window", p.window)?)),
                scalar(F(p.scale)),
            ],
        )
    }
}

// ---------------------------------------------------------------- parity cases

/// A random paged KV cache for `lens` sequences: pools, a block table whose
/// pages are shuffled across the pool (so paging bugs show), and the sizes.
/// The table has `max_pages` columns (at least what the longest sequence
/// needs); columns past a sequence's last page are −1, as in a session whose
/// capacity exceeds what has been generated so far.
struct PagedCache {
    k_pool: Vec<u8>,
    v_pool: Vec<u8>,
    table: Vec<i32>,
    num_slots: usize,
    max_pages: usize,
}

fn paged_cache(g: &mut Gen, lens: &[usize], nkv: usize, hd: usize, page: usize, max_pages: usize) -> PagedCache {
    paged_cache_v(g, lens, nkv, hd, page, max_pages, &V_UNIT)
}

/// Magnitudes of a cache's V values: uniform in `[lo, hi)`, then each
/// (slot, KV head) row of `hd` values times 2^k, k uniform in
/// `[-spread, spread]` (exact in bf16 at these magnitudes).
struct VMag {
    lo: f32,
    hi: f32,
    spread: i32,
}

/// V as every attention case draws it (K always is).
const V_UNIT: VMag = VMag { lo: 0.01, hi: 1.0, spread: 0 };

fn paged_cache_v(g: &mut Gen, lens: &[usize], nkv: usize, hd: usize, page: usize, max_pages: usize, v: &VMag) -> PagedCache {
    let used: Vec<usize> = lens.iter().map(|l| l.div_ceil(page)).collect();
    let max_pages = max_pages.max(used.iter().copied().max().unwrap_or(1)).max(1);
    let total_pages = used.iter().sum::<usize>() + 2;
    let mut pages: Vec<i32> = (0..total_pages as i32).collect();
    for i in (1..pages.len()).rev() {
        let j = rand::Rng::random_range(&mut g.rng, 0..=i);
        pages.swap(i, j);
    }
    let mut next = pages.into_iter();
    let mut table = vec![-1i32; lens.len() * max_pages];
    for (b, &n) in used.iter().enumerate() {
        for e in &mut table[b * max_pages..b * max_pages + n] {
            *e = next.next().expect("the pool has a page for every used table entry");
        }
    }
    let num_slots = total_pages * page;
    let (_, k_pool) = g.bf16(num_slots * nkv * hd, 0.01, 1.0);
    let (mut vals, mut v_pool) = g.bf16(num_slots * nkv * hd, v.lo, v.hi);
    if v.spread > 0 {
        for row in vals.chunks_exact_mut(hd) {
            let f = 2f32.powi(rand::Rng::random_range(&mut g.rng, -v.spread..=v.spread));
            row.iter_mut().for_each(|x| *x *= f);
        }
        v_pool = bytes::bf16_bytes(&vals);
    }
    PagedCache { k_pool, v_pool, table, num_slots, max_pages }
}

struct AttnShape {
    lens: &'static [usize],
    nh: usize,
    nkv: usize,
    hd: usize,
    page: usize,
    window: usize,
    scale: f32,
    /// V is the K pool (Gemma's `attention_k_eq_v`): the decode launch passes one buffer as both.
    k_eq_v: bool,
}

/// Short sequences (up to three decode chunks); prefill and decode both run these.
static ATTN_SHAPES: [AttnShape; 5] = [
    AttnShape { lens: &[1], nh: 2, nkv: 1, hd: 64, page: 16, window: 0, scale: 1.0, k_eq_v: false },
    AttnShape { lens: &[37, 5], nh: 4, nkv: 2, hd: 128, page: 16, window: 0, scale: 0.125, k_eq_v: false },
    AttnShape { lens: &[40, 23, 9], nh: 4, nkv: 1, hd: 72, page: 8, window: 7, scale: 0.3, k_eq_v: false },
    AttnShape { lens: &[70], nh: 2, nkv: 2, hd: 256, page: 16, window: 16, scale: 0.0625, k_eq_v: false },
    AttnShape { lens: &[19, 33], nh: 2, nkv: 1, hd: 512, page: 4, window: 0, scale: 0.05, k_eq_v: false },
];

/// Long sequences, decode only: several chunks per sequence (see
/// [`decode_splits`]: from 3 up to 94), different chunk counts within one
/// batch, a window that caps the chunks, a GQA group wider than a WGSL
/// workgroup's rows and than a CUDA block's 8 heads, V aliasing K at hd 512
/// (the global layers' shape), hd 192 (a head width that is not a power of
/// two), chunks longer than the CUDA pipeline's 6 tiles of 16 keys, and a
/// batch wide enough (8 sequences x 32 KV heads) for one chunk per sequence,
/// which CUDA runs in one pass; last, the bench model's two layer kinds a few
/// steps into decode (131 and 147 keys: chunks of 15 and 16 keys, each one
/// tile of the WGSL plan where the adapter's workgroup storage holds it);
/// then chunks of 8 tiles and more, which the CUDA plan deals to two teams
/// of a block (11 tiles, a last tile part-full, shorter chunks in the same
/// launch that stay on team 0): the global layers' V = K at hd 512, hd 256
/// with a window that starts mid-page over pages of 4 keys, and pages of 3
/// keys (a tile spans 6-7 pages). The earlier 8 x 32 KV-head batch (chunks
/// of 9-19 tiles) and the 1000-key sequence (8 tiles) take teams too.
static LONG_SHAPES: [AttnShape; 14] = [
    AttnShape { lens: &[700, 300], nh: 4, nkv: 2, hd: 64, page: 16, window: 0, scale: 0.125, k_eq_v: false },
    AttnShape { lens: &[1000, 37], nh: 2, nkv: 1, hd: 128, page: 16, window: 600, scale: 0.1, k_eq_v: false },
    AttnShape { lens: &[1500], nh: 8, nkv: 2, hd: 256, page: 16, window: 0, scale: 0.0625, k_eq_v: false },
    AttnShape { lens: &[520, 9, 260], nh: 2, nkv: 1, hd: 512, page: 4, window: 0, scale: 0.05, k_eq_v: false },
    AttnShape { lens: &[300], nh: 16, nkv: 1, hd: 256, page: 16, window: 0, scale: 0.0625, k_eq_v: false },
    AttnShape { lens: &[2100, 700], nh: 8, nkv: 2, hd: 512, page: 16, window: 0, scale: 0.04, k_eq_v: true },
    AttnShape { lens: &[900], nh: 6, nkv: 3, hd: 192, page: 8, window: 0, scale: 0.07, k_eq_v: false },
    AttnShape { lens: &[1000], nh: 32, nkv: 32, hd: 128, page: 16, window: 0, scale: 0.09, k_eq_v: false },
    AttnShape { lens: &[300, 257, 130, 1, 64, 97, 200, 33], nh: 64, nkv: 32, hd: 64, page: 16, window: 0, scale: 0.125, k_eq_v: false },
    AttnShape { lens: &[131], nh: 8, nkv: 4, hd: 256, page: 16, window: 512, scale: 0.0625, k_eq_v: false },
    AttnShape { lens: &[147], nh: 8, nkv: 2, hd: 512, page: 16, window: 0, scale: 0.044, k_eq_v: true },
    AttnShape { lens: &[700, 333, 90, 17], nh: 32, nkv: 16, hd: 512, page: 16, window: 0, scale: 0.044, k_eq_v: true },
    AttnShape { lens: &[600, 250, 77, 300, 40, 520], nh: 32, nkv: 16, hd: 256, page: 4, window: 497, scale: 0.0625, k_eq_v: false },
    AttnShape { lens: &[500, 130, 260], nh: 32, nkv: 32, hd: 128, page: 3, window: 0, scale: 0.09, k_eq_v: false },
];

fn label(s: &AttnShape) -> String {
    format!(
        "lens={:?} nh={} nkv={} hd={} page={} window={}{}",
        s.lens,
        s.nh,
        s.nkv,
        s.hd,
        s.page,
        s.window,
        if s.k_eq_v { " k_eq_v" } else { "" }
    )
}

/// Buffers `[k_pool, v_pool, block_table]` at `a[at..]` as the view of a
/// [`PagedCache`] with `max_pages` and `num_slots`.
fn view_of(a: &[Region], at: usize, s: &AttnShape, (max_pages, num_slots): (usize, usize)) -> KvView {
    KvView {
        k_pool: a[at],
        v_pool: if s.k_eq_v { a[at] } else { a[at + 1] },
        block_table: a[at + 2],
        nkv: s.nkv,
        hd: s.hd,
        page: s.page,
        max_pages,
        num_seqs: s.lens.len(),
        num_slots,
    }
}

/// Prefill only, for the CUDA flash kernels (`flash_prefill.cu`, hd 128 /
/// 256 / 512): sequences longer than a 128-row block and a 64-key tile,
/// ragged, so that a block holds rows of two sequences; GQA groups of 2 and
/// 4; windows that leave whole tiles out; V aliasing K at hd 512; and (the
/// `true` ones) rows of the sequences interleaved one by one, so that every
/// warp takes each sequence in turn.
static FLASH_SHAPES: [(AttnShape, bool); 6] = [
    (AttnShape { lens: &[150, 70], nh: 4, nkv: 2, hd: 256, page: 16, window: 0, scale: 0.0625, k_eq_v: false }, false),
    // A page that is not a power of two (the kernel's division path; pages of 24 keys straddle its 64-key tiles).
    (AttnShape { lens: &[170, 60], nh: 4, nkv: 2, hd: 256, page: 24, window: 0, scale: 0.0625, k_eq_v: false }, false),
    (AttnShape { lens: &[200], nh: 2, nkv: 1, hd: 256, page: 8, window: 48, scale: 0.07, k_eq_v: false }, false),
    (AttnShape { lens: &[100, 37], nh: 4, nkv: 1, hd: 512, page: 4, window: 0, scale: 0.04, k_eq_v: true }, false),
    (AttnShape { lens: &[90, 3], nh: 2, nkv: 2, hd: 512, page: 16, window: 40, scale: 0.05, k_eq_v: false }, true),
    (AttnShape { lens: &[60, 45, 1], nh: 4, nkv: 4, hd: 128, page: 16, window: 0, scale: 0.09, k_eq_v: false }, true),
];

/// Prefill only, V's range (the CUDA flash kernels run P·V in f16 with V
/// rows scaled by powers of two; the other backends see ordinary f32 math):
/// V around 1e4..6e4 (f16's top binade and below), past f16's 65504 (up to
/// 2e6), tiny (1e-6..1e-5, below f16's normal range), and rows of one tile
/// 2^±20 apart (each row its own scale, P rescaled per key), at each flash
/// head width, with GQA and windows (V = K converts the same way from the K
/// tile: FLASH_SHAPES' k_eq_v case).
static V_RANGE_SHAPES: [(AttnShape, VMag); 5] = [
    (
        AttnShape { lens: &[150, 70], nh: 4, nkv: 2, hd: 256, page: 16, window: 0, scale: 0.0625, k_eq_v: false },
        VMag { lo: 1e4, hi: 6e4, spread: 0 },
    ),
    (
        AttnShape { lens: &[100, 37], nh: 4, nkv: 1, hd: 512, page: 4, window: 0, scale: 0.04, k_eq_v: false },
        VMag { lo: 1e5, hi: 2e6, spread: 0 },
    ),
    (
        AttnShape { lens: &[60, 45, 1], nh: 4, nkv: 4, hd: 128, page: 16, window: 0, scale: 0.09, k_eq_v: false },
        VMag { lo: 1e-6, hi: 1e-5, spread: 0 },
    ),
    (
        AttnShape { lens: &[200], nh: 2, nkv: 1, hd: 256, page: 8, window: 48, scale: 0.07, k_eq_v: false },
        VMag { lo: 1e-6, hi: 1e-5, spread: 0 },
    ),
    (
        AttnShape { lens: &[130, 20], nh: 4, nkv: 2, hd: 256, page: 16, window: 0, scale: 0.0625, k_eq_v: false },
        VMag { lo: 0.01, hi: 1.0, spread: 20 },
    ),
];

fn prefill_cases(g: &mut Gen) -> Vec<Case> {
    ATTN_SHAPES
        .iter()
        .map(|s| (s, false, &V_UNIT))
        .chain(FLASH_SHAPES.iter().map(|(s, i)| (s, *i, &V_UNIT)))
        .chain(V_RANGE_SHAPES.iter().map(|(s, v)| (s, false, v)))
        .map(|(s, interleave, v)| {
            let c = paged_cache_v(g, s.lens, s.nkv, s.hd, s.page, 0, v);
            // Every position of every sequence, sequence after sequence, like
            // a batched prefill, or interleaved row by row.
            let (mut seq_of_row, mut pos) = (Vec::new(), Vec::new());
            if interleave {
                for p in 0..*s.lens.iter().max().expect("non-empty") {
                    for (b, _) in s.lens.iter().enumerate().filter(|&(_, &l)| p < l) {
                        seq_of_row.push(b as i32);
                        pos.push(p as i32);
                    }
                }
            } else {
                for (b, &l) in s.lens.iter().enumerate() {
                    for p in 0..l {
                        seq_of_row.push(b as i32);
                        pos.push(p as i32);
                    }
                }
            }
            let rows = pos.len();
            let (_, q) = g.bf16(rows * s.nh * s.hd, 0.01, 1.0);
            let params = AttnParams { nh: s.nh, window: s.window, scale: s.scale };
            let sizes = (c.max_pages, c.num_slots);
            let buffers = vec![
                Buffer::output("out", DType::BF16, rows * s.nh * s.hd, Tolerance::Nmse(ATTN_NMSE)),
                Buffer::input("q", q),
                Buffer::input("k_pool", c.k_pool),
                Buffer::input("v_pool", c.v_pool),
                Buffer::input("block_table", bytes::i32_bytes(&c.table)),
                Buffer::input("seq_of_row", bytes::i32_bytes(&seq_of_row)),
                Buffer::input("pos", bytes::i32_bytes(&pos)),
            ];
            Case {
                kernel: &ATTENTION_PREFILL,
                label: format!(
                    "{}{}{}",
                    label(s),
                    if interleave { " rows interleaved" } else { "" },
                    match (v.spread, v.lo == V_UNIT.lo && v.hi == V_UNIT.hi) {
                        (0, true) => String::new(),
                        (0, false) => format!(" v=±[{:e}, {:e})", v.lo, v.hi),
                        (k, _) => format!(" v rows ×2^±{k}"),
                    }
                ),
                buffers,
                run: Box::new(move |o, a| o.attention_prefill(a[0], a[1], a[5], a[6], rows, &view_of(a, 2, s, sizes), &params)),
            }
        })
        .collect()
}

/// One decode case at the shape's lengths, with `max_ctx` the longest
/// (what a per-step maximum would be) or, with `capacity`, the block table's
/// whole capacity of four times that or more, as a session passes it. (NaN
/// rows for invalid contexts are not parity material, NMSE has no NaN; the
/// backends' edge tests compare them position for position.)
fn decode_case(g: &mut Gen, s: &'static AttnShape, capacity: bool) -> Case {
    let longest = *s.lens.iter().max().expect("non-empty");
    let spare = if capacity { 4 * longest.div_ceil(s.page) } else { 0 };
    let c = paged_cache(g, s.lens, s.nkv, s.hd, s.page, spare);
    let max_ctx = if capacity { c.max_pages * s.page } else { longest };
    let batch = s.lens.len();
    let (_, q) = g.bf16(batch * s.nh * s.hd, 0.01, 1.0);
    let ctx: Vec<i32> = s.lens.iter().map(|&l| l as i32).collect();
    let params = AttnParams { nh: s.nh, window: s.window, scale: s.scale };
    let chunks: Vec<usize> = s.lens.iter().map(|&n| decode_splits(visible_keys(n, s.window), batch, s.nkv)).collect();
    let sizes = (c.max_pages, c.num_slots);
    let buffers = vec![
        Buffer::output("out", DType::BF16, batch * s.nh * s.hd, Tolerance::Nmse(ATTN_NMSE)),
        Buffer::input("q", q),
        Buffer::input("k_pool", c.k_pool),
        Buffer::input("v_pool", c.v_pool),
        Buffer::input("block_table", bytes::i32_bytes(&c.table)),
        Buffer::input("ctx_len", bytes::i32_bytes(&ctx)),
    ];
    Case {
        kernel: &ATTENTION_DECODE,
        label: format!("{} max_ctx={max_ctx} chunks={chunks:?}", label(s)),
        buffers,
        run: Box::new(move |o, a| {
            let d = AttnDecode { out: a[0], q: a[1], ctx_len: a[5], batch, max_ctx };
            o.attention_decode(&d, &view_of(a, 2, s, sizes), &params)
        }),
    }
}

fn decode_cases(g: &mut Gen) -> Vec<Case> {
    let mut cases = Vec::new();
    for s in ATTN_SHAPES.iter().chain(&LONG_SHAPES) {
        // max_ctx tight (one launch per step) and a fixed capacity (many idle chunks).
        cases.push(decode_case(g, s, false));
        cases.push(decode_case(g, s, true));
    }
    cases
}

inventory::submit! { CaseSet { kernel: &ATTENTION_PREFILL, cases: prefill_cases } }
inventory::submit! { CaseSet { kernel: &ATTENTION_DECODE, cases: decode_cases } }

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources;
    use switchyard_core::KernelSig;

    #[test]
    fn the_split_rule_counts_kv_heads() {
        // One sequence of 16 KV heads: 16 chunks wanted, one per 16 keys.
        assert_eq!(decode_splits(1, 1, 16), 1);
        assert_eq!(decode_splits(16, 1, 16), 1);
        assert_eq!(decode_splits(17, 1, 16), 2);
        assert_eq!(decode_splits(200, 1, 16), 13);
        assert_eq!(decode_splits(100_000, 1, 16), 16);
        // The global layers' 4 KV heads at batch 1: 64 chunks; batch 16: 4.
        assert_eq!(decode_splits(16_384, 1, 4), 64);
        assert_eq!(decode_splits(16_384, 16, 4), 4);
        // Many heads: one chunk however long.
        assert_eq!(decode_splits(100_000, 16, 16), 1);
        assert_eq!(decode_splits(0, 1, 1), 1);
        assert_eq!(visible_keys(1000, 600), 600);
        assert_eq!(visible_keys(1000, 0), 1000);
    }

    #[test]
    fn the_gpu_sources_use_the_same_split_constants() {
        let cu = sources::cuda("attn").expect("attn.cu").text;
        let wgsl = sources::wgsl(&ATTENTION_DECODE).expect("attention_decode.wgsl").text;
        for (name, v) in [("DECODE_TARGET_BLOCKS", DECODE_TARGET_BLOCKS), ("MIN_SPLIT_KEYS", MIN_SPLIT_KEYS)] {
            assert!(cu.contains(&format!("#define {name} {v}\n")), "attn.cu must define {name} {v}");
            assert!(wgsl.contains(&format!("const {name}: u32 = {v}u;")), "attention_decode.wgsl must define {name} = {v}u");
        }
        // The WGSL pool the decode plan sizes.
        let tile = sources::wgsl_fragment("attn/tile_common.wgsli").expect("tile_common.wgsli").text;
        assert!(tile.contains(&format!("override POOL: u32 = {WGSL_POOL_WORDS}u;")));
        assert!(tile.contains(&format!("const MAX_KT: u32 = {WGSL_MAX_KT}u;")));
        // The CUDA decode's pipeline, whose shared memory the plan sizes.
        assert!(cu.contains(&format!("#define DECODE_STAGES {CUDA_DECODE_STAGES}\n")));
        assert!(cu.contains(&format!("#define DC_TILE {CUDA_DECODE_TILE}\n")));
        assert!(cu.contains(&format!("#define DC_THREADS {CUDA_THREADS}\n")));
        assert!(cu.contains(&format!("#define DC_TEAM_EXTRA {CUDA_DECODE_TEAM_EXTRA}\n")));
        assert!(cu.contains(&format!("#define DC_MAX_TEAMS {CUDA_DECODE_MAX_TEAMS}\n")));
        assert!(cu.contains(&format!("#define DC_TEAM_TILES {CUDA_DECODE_TEAM_TILES}\n")));
    }

    fn args(kernel: &'static KernelSig, named: &[(&str, i32)]) -> Vec<switchyard_core::Arg> {
        kernel
            .args
            .iter()
            .map(|spec| match spec.kind {
                switchyard_core::ArgKind::Ptr => P(0x1000),
                switchyard_core::ArgKind::F32 => F(1.0),
                _ => I(named.iter().find(|(n, _)| *n == spec.name).map_or(1, |&(_, v)| v)),
            })
            .collect()
    }

    const FACTS: DeviceFacts = DeviceFacts { cuda_sm90a: false, cuda_clusters: false, ..crate::plan::H200 };

    #[test]
    fn decode_plans_size_the_workspace_from_max_ctx_and_run_two_passes() {
        // 1 sequence, 16 heads of 256 over 8 KV heads, max_ctx 8192: 32 chunks.
        let a = args(&ATTENTION_DECODE, &[("batch", 1), ("max_ctx", 8192), ("nh", 16), ("nkv", 8), ("hd", 256), ("window", 0)]);
        let pa = PlanArgs::new(&ATTENTION_DECODE, &a);
        let c = cuda_attention_decode(&pa, &FACTS).unwrap();
        assert_eq!(c.workspace_bytes, 16 * 32 * 258 * 4);
        // A block per (chunk, KV head): both query heads of a group share it.
        assert_eq!(c.passes[0].grid, [32, 8, 1]);
        // args() passes one address for every pointer, so V aliases K: one 16 x 264 tile a stage.
        // 256-key chunks: two teams, each with 6 stages in half of two blocks' share of the room.
        assert_eq!((c.passes[0].entry, c.passes[0].block), ("attention_decode_tm", [256, 1, 1]));
        assert_eq!(c.passes[0].shared_bytes, 2 * (CUDA_DECODE_STAGES * 16 * 264 * 2 + CUDA_DECODE_TEAM_EXTRA));
        assert_eq!(c.passes[1].block, [128, 1, 1]);
        assert_eq!(c.passes[1].grid, [1, 16, 2]);
        assert_eq!((c.passes[0].entry, c.passes[1].entry), ("attention_decode_tm", "attention_decode_reduce"));
        let w = wgsl_attention_decode(&pa, &FACTS).unwrap();
        assert_eq!(w.workspace_bytes, c.workspace_bytes);
        // Groups of 2 query heads per KV head, 8 rows per workgroup at hd 256: one workgroup per KV head.
        assert_eq!((w.passes[0].grid, w.passes[0].extra), ([32, 8, 1], [2, 1, 0, 0]));
        assert_eq!(w.passes[1].grid, [1, 16, 1]);
        // 8192 keys over 32 chunks: 256 a chunk, longer than 16 keys: the default pool.
        assert_eq!(w.passes[0].consts, vec![("POOL", WGSL_POOL_WORDS)]);
        // max_ctx 256 (the bench model's): chunks of at most 16 keys, one tile each.
        let a = args(&ATTENTION_DECODE, &[("batch", 1), ("max_ctx", 256), ("nh", 8), ("nkv", 2), ("hd", 512), ("window", 0)]);
        let pa = PlanArgs::new(&ATTENTION_DECODE, &a);
        assert_eq!(wgsl_attention_decode(&pa, &FACTS).unwrap().passes[0].consts, vec![("POOL", 4 * 256 + 16 * (512 + 4))]);
        let small = DeviceFacts { max_shared_bytes: 16384, ..FACTS };
        assert_eq!(wgsl_attention_decode(&pa, &small).unwrap().passes[0].consts, vec![("POOL", WGSL_POOL_WORDS)]);
        assert_eq!(wgsl_decode_pool(256, 2, 16, 49152), 2 * 128 + 16 * (256 + 2));
        // Where the adapter has less room than a whole chunk needs, what it has (lavapipe: 32 KiB).
        assert_eq!(wgsl_decode_pool(512, 4, 16, 32768), (32768 - WGSL_TILE_OTHER_BYTES) / 4);
        assert_eq!(wgsl_decode_pool(512, 4, 17, 49152), WGSL_POOL_WORDS);
        // A window caps the chunks: 200 keys -> 13.
        let a = args(&ATTENTION_DECODE, &[("batch", 1), ("max_ctx", 8192), ("nh", 16), ("nkv", 8), ("hd", 256), ("window", 200)]);
        assert_eq!(cuda_attention_decode(&PlanArgs::new(&ATTENTION_DECODE, &a), &FACTS).unwrap().passes[0].grid, [13, 8, 1]);
        // One chunk in all (64 sequences x 4 KV heads): one pass, groups of 16 heads take two blocks.
        let a = args(&ATTENTION_DECODE, &[("batch", 64), ("max_ctx", 4096), ("nh", 64), ("nkv", 4), ("hd", 512), ("window", 0)]);
        let c = cuda_attention_decode(&PlanArgs::new(&ATTENTION_DECODE, &a), &FACTS).unwrap();
        assert_eq!((c.passes.len(), c.passes[0].grid, c.workspace_bytes), (1, [1, 8, 64], 8));
        // Empty or impossible shapes are refused with the argument named.
        for (name, v) in [("batch", 0), ("nh", 0), ("hd", 12), ("hd", 520)] {
            let mut named = vec![("batch", 1), ("max_ctx", 64), ("nh", 2), ("nkv", 1), ("hd", 64)];
            named.retain(|(n, _)| *n != name);
            named.push((name, v));
            let a = args(&ATTENTION_DECODE, &named);
            let e = cuda_attention_decode(&PlanArgs::new(&ATTENTION_DECODE, &a), &FACTS).unwrap_err();
            assert!(matches!(&e, Error::InvalidArgument { arg, .. } if arg == name), "{name} = {v}: {e:?}");
        }
    }

    #[test]
    fn wgsl_decode_combines_in_its_last_workgroup_up_to_16_chunks() {
        let plan = |named: &[(&str, i32)], two| {
            let a = args(&ATTENTION_DECODE, named);
            wgsl_decode_plan(&PlanArgs::new(&ATTENTION_DECODE, &a), &FACTS, two).unwrap()
        };
        let entries = |p: &WgslPlan| p.passes.iter().map(|s| s.entry).collect::<Vec<_>>();
        // The bench model's batch-1 global layer: max_ctx 256 over 2 KV heads, 16 chunks,
        // 2 grid rows: one launch on 2 counters, the two-pass plan's grid and workspace.
        let bench = [("batch", 1), ("max_ctx", 256), ("nh", 8), ("nkv", 2), ("hd", 512), ("window", 0)];
        let (one, two) = (plan(&bench, false), plan(&bench, true));
        assert_eq!((entries(&one), one.arrivals), (vec!["attention_decode_once"], 2));
        assert_eq!((one.passes[0].grid, one.workspace_bytes), (two.passes[0].grid, two.workspace_bytes));
        assert_eq!(one.passes[0].consts, two.passes[0].consts);
        // Forced, or past 16 chunks (32 here): two passes, phase 2's pool its 2·S words.
        let long = [("batch", 1), ("max_ctx", 8192), ("nh", 16), ("nkv", 8), ("hd", 256), ("window", 0)];
        for (p, splits) in [(two, 16), (plan(&long, false), 32)] {
            assert_eq!((entries(&p), p.arrivals), (vec!["attention_decode", "attention_decode_reduce"], 0));
            assert_eq!(p.passes[1].consts, vec![("POOL", 2 * splits)]);
        }
        // More (sequence, grid row) pairs than counters: two passes.
        let wide = [("batch", 64), ("max_ctx", 64), ("nh", 64), ("nkv", 32), ("hd", 64), ("window", 0)];
        let p = plan(&wide, false);
        assert!(u64::from(p.passes[0].grid[1] * p.passes[0].grid[2]) > u64::from(WGSL_ARRIVAL_COUNTERS));
        assert_eq!(entries(&p), ["attention_decode", "attention_decode_reduce"]);
    }

    #[test]
    fn cuda_decode_teams_follow_the_chunk_length_and_fit_two_blocks_an_sm() {
        let plan = |batch: i32, max_ctx: i32, nkv: i32, hd: i32, window: i32, over| {
            let a = args(
                &ATTENTION_DECODE,
                &[("batch", batch), ("max_ctx", max_ctx), ("nh", 32), ("nkv", nkv), ("hd", hd), ("window", window)],
            );
            cuda_decode_plan(&PlanArgs::new(&ATTENTION_DECODE, &a), &FACTS, over).unwrap()
        };
        // The bench's global layer (hd 512, V = K) at batch 16, 16k keys: 4 chunks of 4096 keys,
        // 2 teams of 3 stages of 16 x 520 bf16, 2 blocks an SM.
        let c = plan(16, 16384, 4, 512, 0, (None, None, false));
        assert_eq!((c.passes[0].grid, c.passes[0].block), ([4, 4, 16], [256, 1, 1]));
        assert_eq!(c.passes[0].shared_bytes, 2 * (3 * 16 * 520 * 2 + CUDA_DECODE_TEAM_EXTRA));
        assert!(2 * (c.passes[0].shared_bytes + 1024) <= 233_472);
        // The bench model's batch 16, up to 200 keys over 4 chunks (4 tiles): one team, 6 stages, the one-team entry.
        let c = plan(16, 200, 4, 512, 0, (None, None, false));
        assert_eq!((c.passes[0].entry, c.passes[0].block, c.passes[0].shared_bytes), ("attention_decode", [128, 1, 1], 6 * 16 * 520 * 2));
        // Four teams do not fit two blocks an SM at hd 512: one block takes the room, 3 stages a team.
        let c = plan(16, 16384, 4, 512, 0, (Some(4), None, false));
        assert_eq!((c.passes[0].block, c.passes[0].shared_bytes), ([512, 1, 1], 4 * (3 * 16 * 520 * 2 + CUDA_DECODE_TEAM_EXTRA)));
        // A stage override is capped by what fits; four teams of hd 512 with V beside K fit nowhere: two.
        assert_eq!(cuda_decode_teams(4096, 16_640, 232_448, (Some(2), Some(6))), (2, 3));
        assert_eq!(cuda_decode_teams(4096, 16_640, 232_448, (Some(1), Some(2))), (1, 2));
        assert_eq!(cuda_decode_teams(4096, 33_280, 232_448, (Some(4), None)), (2, 3));
        // Teams never run as a cluster, even where the override asks for clusters everywhere.
        let hopper = DeviceFacts { cuda_clusters: true, ..FACTS };
        let a = args(&ATTENTION_DECODE, &[("batch", 4), ("max_ctx", 4096), ("nh", 32), ("nkv", 4), ("hd", 512), ("window", 0)]);
        let c = cuda_decode_plan(&PlanArgs::new(&ATTENTION_DECODE, &a), &hopper, (None, None, true)).unwrap();
        assert_eq!((c.passes[0].entry, c.passes[0].grid), ("attention_decode_tm", [16, 4, 4]));
        // Whatever the choice, a team's parked (o, m, l) fits in its own stages (two at least).
        for (stages, hd) in [(2u32, 64u32), (2, 128), (2, 256), (2, 512), (3, 512)] {
            let stage = 16 * (hd.next_multiple_of(64) + 8) * 2;
            let ks = hd.next_multiple_of(64) / 64;
            assert!((ks * 4 + 4) * 128 * 4 <= stages * stage, "{stages} stages at hd {hd}");
        }
    }

    #[test]
    fn cuda_decode_combines_in_a_cluster_when_the_grid_is_one_block_an_sm() {
        let hopper = DeviceFacts { cuda_clusters: true, ..FACTS };
        let plan = |batch: i32, max_ctx: i32, nkv: i32| {
            let a = args(&ATTENTION_DECODE, &[("batch", batch), ("max_ctx", max_ctx), ("nh", 8), ("nkv", nkv), ("hd", 256), ("window", 0)]);
            cuda_attention_decode(&PlanArgs::new(&ATTENTION_DECODE, &a), &hopper).unwrap()
        };
        // The bench model's sliding layer at batch 1, 131 keys: 9 chunks x 4 KV heads, one launch.
        let c = plan(1, 131, 4);
        assert_eq!((c.passes.len(), c.passes[0].entry, c.passes[0].grid, c.workspace_bytes), (1, "attention_decode_cl", [9, 4, 1], 8));
        // Its shared memory holds the tiles, and the 8 heads' partials where those are larger.
        assert!(c.passes[0].shared_bytes >= 8 * 258 * 4);
        // 17 chunks is past the largest cluster; 16 sequences are past one block an SM.
        assert_eq!(plan(1, 272, 4).passes[1].entry, "attention_decode_reduce");
        assert_eq!(plan(16, 1024, 4).passes[1].entry, "attention_decode_reduce");
        // One chunk needs no combine; without clusters, two passes.
        assert_eq!(plan(1, 16, 4).passes[0].entry, "attention_decode");
        let a = args(&ATTENTION_DECODE, &[("batch", 1), ("max_ctx", 131), ("nh", 8), ("nkv", 4), ("hd", 256), ("window", 0)]);
        assert_eq!(cuda_attention_decode(&PlanArgs::new(&ATTENTION_DECODE, &a), &FACTS).unwrap().passes.len(), 2);
    }

    #[test]
    fn flash_prefill_plans_pick_the_entry_for_the_head_width() {
        let cu = sources::cuda("flash_prefill").expect("flash_prefill.cu").text;
        for &(hd, entry, warps, keys, stages) in &FLASH_PREFILL {
            let (_, symbol) = entry.split_once("::").unwrap();
            assert!(
                cu.contains(&format!("FLASH_ENTRY({symbol}, {hd}, {warps}, {keys}, {stages})")),
                "flash_prefill.cu must instantiate {entry}"
            );
            let a = args(&ATTENTION_PREFILL, &[("rows", 300), ("nh", 32), ("nkv", 16), ("hd", hd as i32)]);
            let c = prefill_plan(&PlanArgs::new(&ATTENTION_PREFILL, &a), &FACTS, true).unwrap();
            let p = &c.passes[0];
            assert_eq!((p.entry, p.grid, p.block), (entry, [300u32.div_ceil(16 * warps), 32, hd / hd.min(256)], [32 * warps, 1, 1]));
            assert!(p.shared_bytes + FLASH_STATIC_SHARED <= FACTS.max_shared_bytes, "{entry}: {} bytes", p.shared_bytes);
            // Off, or on a device with less shared memory: attn.cu's kernel.
            let old = prefill_plan(&PlanArgs::new(&ATTENTION_PREFILL, &a), &FACTS, false).unwrap();
            assert_eq!(old.passes[0].entry, "attention_prefill");
            let small = DeviceFacts { max_shared_bytes: 101_376, ..FACTS };
            let c = prefill_plan(&PlanArgs::new(&ATTENTION_PREFILL, &a), &small, true).unwrap();
            assert_eq!(c.passes[0].entry, "attention_prefill");
        }
        // sm_90a at hd 256: the wgmma entry; other widths keep the mma.sync ones.
        let hopper = DeviceFacts { cuda_sm90a: true, ..FACTS };
        let a = args(&ATTENTION_PREFILL, &[("rows", 300), ("nh", 32), ("nkv", 16), ("hd", 256)]);
        let p = prefill_plan(&PlanArgs::new(&ATTENTION_PREFILL, &a), &hopper, true).unwrap().passes.remove(0);
        assert_eq!((p.entry, p.grid, p.block, p.shared_bytes), (FLASH3_HD256, [3, 32, 1], [384, 1, 1], 197_696));
        let cu = sources::cuda("flash_prefill_sm90").expect("flash_prefill_sm90.cu").text;
        assert!(cu.contains(&format!("{}(", FLASH3_HD256.split_once("::").unwrap().1)), "flash_prefill_sm90.cu must define {FLASH3_HD256}");
        let a = args(&ATTENTION_PREFILL, &[("rows", 300), ("nh", 32), ("nkv", 4), ("hd", 512)]);
        let p = prefill_plan(&PlanArgs::new(&ATTENTION_PREFILL, &a), &hopper, true).unwrap().passes.remove(0);
        assert_eq!(p.entry, "flash_prefill::attention_prefill_flash_hd512");
        assert_eq!(flash_shared_bytes(256, 8, 64, 2), 202_752);
        assert_eq!(flash_shared_bytes(512, 8, 16, 3), 208_384);
        // Other head widths keep attn.cu's kernel.
        let a = args(&ATTENTION_PREFILL, &[("rows", 300), ("nh", 8), ("nkv", 2), ("hd", 192)]);
        assert_eq!(prefill_plan(&PlanArgs::new(&ATTENTION_PREFILL, &a), &FACTS, true).unwrap().passes[0].entry, "attention_prefill");
    }

    #[test]
    fn prefill_plans_keep_the_launcher_geometry() {
        let a = args(&ATTENTION_PREFILL, &[("rows", 130), ("nh", 8), ("nkv", 2), ("hd", 128)]);
        let pa = PlanArgs::new(&ATTENTION_PREFILL, &a);
        let c = prefill_plan(&pa, &FACTS, false).unwrap();
        assert_eq!((c.passes[0].grid, c.passes[0].block, c.workspace_bytes), ([3, 8, 1], [128, 1, 1], 0));
        // hd 128: 16 rows per workgroup.
        let w = wgsl_attention_prefill(&pa, &FACTS).unwrap();
        assert_eq!((w.passes[0].grid, w.passes[0].extra), ([9, 8, 1], [16, 0, 0, 0]));
        assert_eq!(wgsl_rows_per_group(512), 4);
        assert_eq!(wgsl_rows_per_group(8), 32);
        assert_eq!(wgsl_rows_per_group(72), 16);
    }
}
