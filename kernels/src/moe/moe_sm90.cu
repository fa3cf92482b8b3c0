// Grouped expert GEMM on Hopper (sm_90a): moe_grouped_gemm_bf16's CUDA plan
// picks these entries at prefill sizes on a compute-capability 9.0 device
// (kernels/src/moe/expert.rs). Same machinery as the dense GEMM in
// gemm/gemm_sm90.cu (TMA into an mbarrier ring, wgmma from shared memory,
// helpers from prelude_sm90.cuh); everything sits behind
// __CUDA_ARCH_FEAT_SM90_ALL, so the module is empty on other targets.
//
// nvrtc-arch: sm_90a
// cluster-launch: x moe_grouped_gemm_wgmma_pp_n176_mc
//
// Contract (moe_grouped_gemm_bf16's): rows s in [offsets[x], offsets[x+1])
// use expert x, out[s, :] = bf16(sum_k a[s, k] * w[x, :, k]), f32
// accumulation in any K order; rows outside every segment are zero. The plan
// guarantees K % 8 == 0 and N % 8 == 0 (TMA row strides and the 16-byte
// stores), 16-byte aligned a, w and out, e <= 1024, and that every tile
// index and weight row fits an int.
//
// Work items: a persistent grid (at most one block an SM) walks tiles
// (expert x, m-tile, n-tile) of 128 rows x BN columns. Each block derives
// the list from `offsets` itself before it starts (segment starts clamped
// to [0, n], a warp scan of the per-expert tile counts into shared memory),
// so every block sees the same list and the result does not depend on
// timing: no atomics, no queue. Tiles are numbered expert by expert, n-tile
// outer and m-tile inner, so the ~one wave in flight covers a few experts:
// each expert's weight panel streams from HBM about once and its rows are
// re-read from L2. A tile's output is one K loop in f32 from k = 0 upward
// in both kernels below (the same bits where both can run).
//
// Block 384 = three warpgroups, as the dense kernel:
// - warpgroup 0: one thread issues the TMA copies of each 64-wide K slice
//   (a: the 128 rows from the tile's first row, w: BN rows of the 2-D view
//   [e * N, K] starting at x * N + column) into a STAGES-deep ring, the
//   block's tiles in order. Rows of a past the segment belong to the next
//   expert (or, past n, arrive as zeros): they are multiplied but never
//   stored. Weight rows past N of an expert likewise give columns that are
//   never stored. The other three warps write the zero rows (before
//   offsets[0], at or past offsets[e]).
// - warpgroups 1 and 2, in one of two ways:
//   * cooperative (moe_grouped_gemm_wgmma_n256, _n192, taken where 176
//     columns would pad N more): both work on every tile,
//     each on 64 of its rows. A warpgroup whose 64 rows all lie past the
//     segment's end skips its wgmma and only keeps the ring moving, so a
//     ragged tail costs half a tile. Both drain their last wgmma group and
//     run the epilogue at the same time, so the tensor cores idle once a
//     tile: at K = 704 (11 slices) ncu saw the tensor pipe 64% active.
//   * ping-pong (moe_grouped_gemm_wgmma_pp_n176): the block's tiles
//     alternate between the warpgroups, each owning all 128 rows of its
//     tile as two m64 row blocks (176 f32 accumulators a thread, so
//     setmaxnreg moves registers from the producer). A pair of named
//     barriers hands the tensor cores over: a warpgroup issues its tile's
//     K loop only after the other has issued all of its own, so one's
//     drain and epilogue run under the other's MMAs. A row block past the
//     segment's end skips its wgmma. Against the cooperative kernel at
//     the same 176 columns (withdrawn after), one H200 call: gate_up
//     536-563 against 517 TFLOP/s, down 483-494 against 465 (ncu: tensor
//     pipe 74% of active cycles at down, from 64% with 256 columns; L2
//     87%: down's a rows are re-read by 16 column tiles, not 11).
//   The epilogue stages each warp's 16 x 64 bf16 pieces in shared memory
//   (rows padded to 72 elements: conflict-free on both sides) and stores
//   rows inside the segment as 16-byte vectors; a store straight from the
//   fragment would write 4 bytes of 8 rows an instruction.
//
// Measured and dropped: tiles of 256 rows x 176 shared by both warpgroups
// (two m64 row blocks each, setmaxnreg 40/232, 3 stages) cut ncu's L2
// throughput from 91% to 81% of peak at the gate_up shape but left the
// tensor pipe no busier (76% of active cycles), and ran slower in the same
// call (gate_up 503 against 528 TFLOP/s, down 409 against 473).

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

#define MG_BM 128
#define MG_BK 64
#define MG_A_BYTES (MG_BM * MG_BK * 2)
// Epilogue staging of one consumer warp: 16 rows of 64 bf16, padded to 72.
#define MG_ST_LD 72
#define MG_ST_BYTES (16 * MG_ST_LD * 2)
// Named barriers of the ping-pong hand-over (0 is __syncthreads').
#define MG_TURN_BAR 1

template <int V> struct MgConst {
    static constexpr int value = V;
};

// Tile t's expert, m-tile and n-tile: x is the last expert whose first tile
// is at or before t (so never an empty one), then n-tile outer, m-tile inner.
// pre[x] = tiles of rows before expert x (pre[0] = 0, pre[e] = all), ntc =
// n-tiles an expert.
__device__ __forceinline__ void mg_tile(int t, const int* pre, int e, int ntc, int& x, int& mt, int& nt) {
    int lo = 0, hi = e - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (pre[mid] * ntc <= t) lo = mid; else hi = mid - 1;
    }
    x = lo;
    const int tm = pre[x + 1] - pre[x];
    const int local = t - pre[x] * ntc;
    nt = local / tm;
    mt = local - nt * tm;
}

// The block's i-th tile (its i-th turn); past its last one, an index at or
// past `tiles` (the index grows with i, so the turns that exist are a
// prefix). ORDER 0, strided: block b takes b, b + grid, b + 2 grid, ...
// ORDER 1, pairs: block b takes the neighbours 2 (r grid + b) and
// 2 (r grid + b) + 1 in round r, so its two consumer warpgroups' tiles are
// usually two m-tiles of the same (expert, n-tile) and read the same weight
// slice within half a tile of each other, from the same SM. ORDER 2,
// cluster pairs (grid 2 x clusters, a cluster along x, blockIdx.x its rank):
// turn i of cluster c is the pair 2 (i clusters + c), + 1, one tile a
// block, so both blocks' turns are in step; the plan guarantees an even
// tile count (an even number of n-tiles), so every turn has both tiles.
template <int ORDER> __device__ __forceinline__ int mg_turn_tile(int i) {
    if (ORDER == 2) return 2 * (i * (int)gridDim.y + (int)blockIdx.y) + (int)blockIdx.x;
    if (ORDER == 1) return 2 * ((i >> 1) * (int)gridDim.x + (int)blockIdx.x) + (i & 1);
    return (int)blockIdx.x + i * (int)gridDim.x;
}

// The block's shared-memory layout (the plan asks for the same,
// grouped_wgmma_shared_bytes): up to 1023 bytes to align the ring to 1024
// (the 128-byte swizzle's atom), STAGES x (a slice + w slice), the eight
// consumer warps' staging, 2 * STAGES mbarriers, then pre[e + 1] and
// start[e + 1] (segment starts clamped to [0, n]).
struct MgSmem {
    unsigned ring, bars;
    unsigned char* staging;
    int* pre;
    int* start;
};

// Lays out shared memory, sets up the ring (an empty stage takes
// `releases` arrivals: one per warp that reads it) and the tile list;
// ends with __syncthreads.
template <int BN, int STAGES>
__device__ __forceinline__ MgSmem mg_setup(const TmaMap* ta, const TmaMap* tw, const int* __restrict__ offsets, int n, int e, unsigned releases) {
    constexpr int STAGE_BYTES = MG_A_BYTES + BN * MG_BK * 2;
    extern __shared__ __align__(1024) unsigned char mg_raw[];
    const unsigned raw = wg_smem(mg_raw);
    const unsigned pad = ((raw + 1023u) & ~1023u) - raw;
    MgSmem m;
    m.ring = raw + pad;
    m.staging = mg_raw + pad + STAGES * STAGE_BYTES;
    m.bars = m.ring + STAGES * STAGE_BYTES + 8 * MG_ST_BYTES;
    m.pre = reinterpret_cast<int*>(m.staging + 8 * MG_ST_BYTES + 16 * STAGES);
    m.start = m.pre + (e + 1);

    const int tid = threadIdx.x, lane = tid & 31;
    if (tid == 0) {
        if (releases == 8) {
            ring_init<STAGES>(m.bars, ta, tw);
        } else {
            for (int s = 0; s < STAGES; ++s) {
                mbar_init(m.bars + 8u * s, 1);
                mbar_init(m.bars + 8u * (STAGES + s), releases);
            }
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
            tma_prefetch(ta);
            tma_prefetch(tw);
        }
    }
    if ((tid >> 5) == 1) {
        // Segment x is [start[x], max(start[x + 1], start[x])): clamped, so
        // offsets from device memory can never address rows outside [0, n).
        int* start = m.start;
        int* pre = m.pre;
        for (int x = lane; x <= e; x += 32) start[x] = min(max(offsets[x], 0), n);
        __syncwarp();
        int carry = 0;
        for (int base = 0; base < e; base += 32) { // warp-uniform trip count
            const int x = base + lane;
            const int len = x < e ? max(start[x + 1], start[x]) - start[x] : 0;
            int v = len / MG_BM + (len % MG_BM != 0);
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int u = __shfl_up_sync(0xffffffffu, v, o);
                if (lane >= o) v += u;
            }
            if (x < e) pre[x + 1] = carry + v;
            carry += __shfl_sync(0xffffffffu, v, 31);
        }
        if (lane == 0) pre[0] = 0;
    }
    __syncthreads();
    return m;
}

// Warpgroup 0: thread 0 feeds the ring with every K slice of the block's
// tiles in turn order (mg_turn_tile<ORDER>); warps 1-3 write the rows
// outside every segment. HINT (L2 eviction priority of the copies): 0, none;
// 1, a tile that is the last reader of its weight slice (the expert's last
// m-tile) or of its rows (the last n-tile) reads them evict_first, so dead
// data leaves L2 before data still to be re-read; 2, as 1, and rows with
// n-tiles still to come are read evict_last (the weights stream past them).
// ORDER 2: where the cluster's two tiles share a weight slice (same expert
// and n-tile), each block copies half of its rows (BN / 2, the tensor map's
// box) into both blocks' stage; otherwise both halves into its own. Each
// block's full barrier expects the whole stage either way, and its empty
// barrier the releases of both blocks' readers, so neither block's copy
// lands in a stage the other still reads. No hints on the weights there.
template <int BN, int STAGES, int ORDER = 0, int HINT = 0>
__device__ __forceinline__ void mg_produce(const MgSmem& m, const TmaMap* ta, const TmaMap* tw, bf16* __restrict__ out, int n, int e, int big_n,
                                           int tiles, int ntc, int KT) {
    constexpr int STAGE_BYTES = MG_A_BYTES + BN * MG_BK * 2;
    const int tid = threadIdx.x;
    if (tid == 0) {
        int s = 0;
        unsigned phase = 0;
        unsigned long long first = 0, last = 0;
        if (HINT > 0) first = l2_evict_first_policy();
        if (HINT > 1) last = l2_evict_last_policy();
        for (int i = 0;; ++i) {
            const int t = mg_turn_tile<ORDER>(i);
            if (t >= tiles) break;
            int x, mt, nt;
            mg_tile(t, m.pre, e, ntc, x, mt, nt);
            const int r0 = m.start[x] + mt * MG_BM, w0 = x * big_n + nt * BN;
            const bool w_dead = mt == m.pre[x + 1] - m.pre[x] - 1, a_dead = nt == ntc - 1;
            bool shared_w = false;
            if (ORDER == 2) {
                int x2, mt2, nt2;
                mg_tile(t ^ 1, m.pre, e, ntc, x2, mt2, nt2);
                shared_w = x2 == x && nt2 == nt;
            }
            for (int kt = 0; kt < KT; ++kt) {
                const unsigned full = m.bars + 8u * s, empty = m.bars + 8u * (STAGES + s);
                // A fresh barrier is in phase 0: parity 1 passes the first round.
                mbar_wait(empty, phase ^ 1u);
                mbar_expect_tx(full, STAGE_BYTES);
                const unsigned dst = m.ring + s * STAGE_BYTES;
                if (ORDER == 2) {
                    constexpr int HB = BN / 2;
                    constexpr unsigned HALF = HB * MG_BK * 2;
                    const unsigned rank = blockIdx.x;
                    if (HINT == 0) tma_load_2d(dst, ta, full, kt * MG_BK, r0);
                    else if (a_dead) tma_load_2d_hint(dst, ta, full, kt * MG_BK, r0, first);
                    else if (HINT > 1) tma_load_2d_hint(dst, ta, full, kt * MG_BK, r0, last);
                    else tma_load_2d(dst, ta, full, kt * MG_BK, r0);
                    if (shared_w) {
                        tma_load_2d_multicast(dst + MG_A_BYTES + rank * HALF, tw, full, kt * MG_BK, w0 + (int)rank * HB, (unsigned short)3);
                    } else {
                        tma_load_2d(dst + MG_A_BYTES, tw, full, kt * MG_BK, w0);
                        tma_load_2d(dst + MG_A_BYTES + HALF, tw, full, kt * MG_BK, w0 + HB);
                    }
                } else if (HINT == 0) {
                    tma_load_2d(dst, ta, full, kt * MG_BK, r0);
                    tma_load_2d(dst + MG_A_BYTES, tw, full, kt * MG_BK, w0);
                } else {
                    if (a_dead) tma_load_2d_hint(dst, ta, full, kt * MG_BK, r0, first);
                    else if (HINT > 1) tma_load_2d_hint(dst, ta, full, kt * MG_BK, r0, last);
                    else tma_load_2d(dst, ta, full, kt * MG_BK, r0);
                    if (w_dead) tma_load_2d_hint(dst + MG_A_BYTES, tw, full, kt * MG_BK, w0, first);
                    else tma_load_2d(dst + MG_A_BYTES, tw, full, kt * MG_BK, w0);
                }
                ring_next<STAGES>(s, phase);
            }
        }
    } else if (tid >= 32) {
        // Rows outside every segment: [0, start[0]) and [start[e], n).
        unsigned* o = reinterpret_cast<unsigned*>(out);
        const int blk = ORDER == 2 ? (int)(blockIdx.y * 2 + blockIdx.x) : (int)blockIdx.x;
        const int blks = ORDER == 2 ? (int)(gridDim.y * 2) : (int)gridDim.x;
        const size_t wpr = (size_t)(big_n / 2), stride = (size_t)blks * 96;
        const size_t first = (size_t)blk * 96 + (tid - 32);
        const size_t head = (size_t)m.start[0] * wpr, tail = (size_t)m.start[e] * wpr, all = (size_t)n * wpr;
        for (size_t i = first; i < head; i += stride) o[i] = 0u;
        for (size_t i = tail + first; i < all; i += stride) o[i] = 0u;
    }
}

// One warp's 16 rows of an m64 x BN accumulator fragment to `out`, through
// the warp's staging `stg`. Fragment layout: n8 block j holds (row g, cols
// 8j + 2q, +1) in acc[4j], acc[4j+1] and row g + 8 in acc[4j+2], acc[4j+3];
// row0 is the warp's first row, column col0 the tile's first. Rows at or
// past seg_hi and columns at or past big_n are not stored.
template <int BN>
__device__ __forceinline__ void mg_store_rows(const float* acc, unsigned char* stg, bf16* __restrict__ out, int row0, int seg_hi, int col0,
                                              int big_n, int lane) {
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int c = 0; c < (BN + 63) / 64; ++c) {
        const int blocks = min(8, BN / 8 - 8 * c); // n8 blocks in this 64-column piece
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
            if (jj >= blocks) break;
            const int j = 8 * c + jj;
            *reinterpret_cast<unsigned*>(stg + (g * MG_ST_LD + 8 * jj + 2 * q) * 2) = pack_bf16(acc[4 * j], acc[4 * j + 1]);
            *reinterpret_cast<unsigned*>(stg + ((g + 8) * MG_ST_LD + 8 * jj + 2 * q) * 2) = pack_bf16(acc[4 * j + 2], acc[4 * j + 3]);
        }
        __syncwarp();
        // 16 rows x `blocks` 16-byte pieces; N % 8 == 0, so a piece is
        // all inside N or all outside.
#pragma unroll
        for (int p0 = 0; p0 < 16 * blocks; p0 += 32) {
            const int p = p0 + lane;
            const int r = p / blocks, pc = p - r * blocks;
            const int row = row0 + r, col = col0 + 64 * c + 8 * pc;
            if (p < 16 * blocks && row < seg_hi && col < big_n) {
                const uint4 v = *reinterpret_cast<const uint4*>(stg + (r * MG_ST_LD + 8 * pc) * 2);
                *reinterpret_cast<uint4*>(out + (size_t)row * big_n + col) = v;
            }
        }
        __syncwarp();
    }
}

// The cooperative kernel: both consumer warpgroups on every tile.
template <int BN, int STAGES>
__device__ __forceinline__ void moe_wgmma(const TmaMap* ta, const TmaMap* tw, bf16* __restrict__ out, const int* __restrict__ offsets, int n, int e,
                                          int big_n, int big_k) {
    constexpr int STAGE_BYTES = MG_A_BYTES + BN * MG_BK * 2;
    const MgSmem m = mg_setup<BN, STAGES>(ta, tw, offsets, n, e, 8);
    const int ntc = (big_n + BN - 1) / BN, tiles = m.pre[e] * ntc;
    const int KT = (big_k + MG_BK - 1) / MG_BK;
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
    if (wg == 0) {
        mg_produce<BN, STAGES>(m, ta, tw, out, n, e, big_n, tiles, ntc, KT);
        return;
    }

    // Consumers: warpgroup cw owns tile rows 64·cw .. 64·cw + 63.
    const int cw = wg - 1, warp = (tid & 127) >> 5;
    unsigned char* stg = m.staging + (cw * 4 + warp) * MG_ST_BYTES;
    float acc[BN / 2];
    int s = 0;
    unsigned phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int x, mt, nt;
        mg_tile(t, m.pre, e, ntc, x, mt, nt);
        const int seg_hi = max(m.start[x + 1], m.start[x]);
        const int r0 = m.start[x] + mt * MG_BM + cw * 64;
        if (r0 >= seg_hi) {
            // Nothing of ours in the segment: release each stage once it has
            // landed (waiting keeps our arrivals in step with the ring).
            for (int kt = 0; kt < KT; ++kt) {
                mbar_wait(m.bars + 8u * s, phase);
                if (lane == 0) mbar_arrive(m.bars + 8u * (STAGES + s));
                ring_next<STAGES>(s, phase);
            }
            continue;
        }
        wg_consume_tile<BN, MG_BK, STAGES>(acc, m.ring, STAGE_BYTES, cw * 64 * (MG_BK * 2), MG_A_BYTES, m.bars, KT, lane, s, phase);
        mg_store_rows<BN>(acc, stg, out, r0 + warp * 16, seg_hi, nt * BN, big_n, lane);
    }
}

// Moves a ring position past `slices` stages (another warpgroup's tile).
template <int STAGES> __device__ __forceinline__ void ring_skip(int& s, unsigned& phase, int slices) {
    const int rounds = slices / STAGES, rest = slices - rounds * STAGES;
    phase ^= (unsigned)(rounds & 1);
    s += rest;
    if (s >= STAGES) {
        s -= STAGES;
        phase ^= 1u;
    }
}

// The ping-pong kernel: the block's i-th tile belongs to consumer warpgroup
// i % 2, which computes all 128 of its rows.
template <int BN, int STAGES, int ORDER, int HINT>
__device__ __forceinline__ void moe_wgmma_pp(const TmaMap* ta, const TmaMap* tw, bf16* __restrict__ out, const int* __restrict__ offsets, int n,
                                             int e, int big_n, int big_k) {
    constexpr int STAGE_BYTES = MG_A_BYTES + BN * MG_BK * 2;
    // Each stage is read by one warpgroup: four warps release it (and, in
    // a cluster, the other block's four).
    const MgSmem m = mg_setup<BN, STAGES>(ta, tw, offsets, n, e, ORDER == 2 ? 8 : 4);
    // The other block's copies and releases reach this block's barriers:
    // both must be initialised first.
    if (ORDER == 2) cluster_sync();
    const int ntc = (big_n + BN - 1) / BN, tiles = m.pre[e] * ntc;
    const int KT = (big_k + MG_BK - 1) / MG_BK;
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
    if (wg == 0) {
        // The producer needs few registers; the consumers' 176 accumulators
        // need more than the 168 an even split of the SM leaves them.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        mg_produce<BN, STAGES, ORDER, HINT>(m, ta, tw, out, n, e, big_n, tiles, ntc, KT);
        if (ORDER == 2) {
            // The other block still arrives on this block's empty barriers
            // until its last slice: stay until both are done.
            __syncwarp();
            cluster_sync();
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");

    const int cw = wg - 1, warp = (tid & 127) >> 5;
    unsigned char* stg = m.staging + (cw * 4 + warp) * MG_ST_BYTES;
    float acc[2][BN / 2];
    // Ring position of this warpgroup's first tile (turn cw).
    int s = 0;
    unsigned phase = 0;
    if (cw == 1) ring_skip<STAGES>(s, phase, KT);
    // A warp is done reading stage st: one arrival on its empty barrier here
    // (and on the other cluster block's, whose copies fill both).
    auto release = [&](int st) {
        mbar_arrive(m.bars + 8u * (STAGES + st));
        if (ORDER == 2) mbar_arrive_cluster(m.bars + 8u * (STAGES + st), blockIdx.x ^ 1u);
    };
    // One tile's K loop with the first ACT row blocks multiplying (the
    // other lies past the segment's end). `more`: the other warpgroup has a
    // next tile, and takes its turn once this K loop is issued.
    auto k_loop = [&](auto act_c, bool more) {
        constexpr int ACT = decltype(act_c)::value;
#pragma unroll
        for (int b = 0; b < ACT; ++b)
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[b][i] = 0.0f;
        int prev = -1;
        for (int kt = 0; kt < KT; ++kt) {
            mbar_wait(m.bars + 8u * s, phase);
            const unsigned a_addr = m.ring + s * STAGE_BYTES;
            const unsigned b_addr = a_addr + MG_A_BYTES;
#pragma unroll
            for (int b = 0; b < ACT; ++b)
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) wg_fence_operand(acc[b][i]);
            wgmma_fence();
#pragma unroll
            for (int j = 0; j < MG_BK / 16; ++j)
#pragma unroll
                for (int b = 0; b < ACT; ++b) wgmma_tile<BN>(acc[b], wg_desc(a_addr + b * 64 * (MG_BK * 2) + 32 * j), wg_desc(b_addr + 32 * j));
            wgmma_commit();
#pragma unroll
            for (int b = 0; b < ACT; ++b)
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) wg_fence_operand(acc[b][i]);
            // The slice before this one is finished with: free its stage.
            wgmma_wait<1>();
            if (prev >= 0 && lane == 0) release(prev);
            prev = s;
            ring_next<STAGES>(s, phase);
        }
        // Everything of this tile is issued: the tensor cores are the other
        // warpgroup's while this one drains and stores.
        if (more) asm volatile("bar.arrive %0, 256;\n" ::"r"(MG_TURN_BAR + (1 - cw)) : "memory");
        wgmma_wait<0>();
#pragma unroll
        for (int b = 0; b < ACT; ++b)
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) wg_fence_operand(acc[b][i]);
        if (prev >= 0 && lane == 0) release(prev);
    };
    // Turn i (the block's i-th tile) waits for turn i - 1's hand-over; each
    // bar.sync meets exactly one bar.arrive (the previous turn hands over
    // only when this turn exists), so no arrival is left pending at exit.
    for (int i = cw;; i += 2) {
        const int t = mg_turn_tile<ORDER>(i);
        if (t >= tiles) break;
        int x, mt, nt;
        mg_tile(t, m.pre, e, ntc, x, mt, nt);
        const int seg_hi = max(m.start[x + 1], m.start[x]);
        const int r0 = m.start[x] + mt * MG_BM;
        const bool more = mg_turn_tile<ORDER>(i + 1) < tiles;
        if (i > 0) asm volatile("bar.sync %0, 256;\n" ::"r"(MG_TURN_BAR + cw) : "memory");
        // A tile's first row block always holds rows of its segment (tiles
        // are ⌈len / 128⌉ a segment).
        if (r0 + 64 < seg_hi) k_loop(MgConst<2>{}, more);
        else k_loop(MgConst<1>{}, more);
        ring_skip<STAGES>(s, phase, KT); // the other warpgroup's next tile
        mg_store_rows<BN>(acc[0], stg, out, r0 + warp * 16, seg_hi, nt * BN, big_n, lane);
        if (r0 + 64 < seg_hi) mg_store_rows<BN>(acc[1], stg, out, r0 + 64 + warp * 16, seg_hi, nt * BN, big_n, lane);
    }
    if (ORDER == 2) {
        __syncwarp();
        cluster_sync();
    }
}

extern "C" __global__ void __launch_bounds__(384, 1)
    moe_grouped_gemm_wgmma_n256(bf16* __restrict__ out, const bf16* __restrict__ a, const bf16* __restrict__ w, const int* __restrict__ offsets,
                                int n, int e, int big_n, int big_k, const __grid_constant__ TmaMap ta, const __grid_constant__ TmaMap tw) {
    moe_wgmma<256, 4>(&ta, &tw, out, offsets, n, e, big_n, big_k);
}

extern "C" __global__ void __launch_bounds__(384, 1)
    moe_grouped_gemm_wgmma_n192(bf16* __restrict__ out, const bf16* __restrict__ a, const bf16* __restrict__ w, const int* __restrict__ offsets,
                                int n, int e, int big_n, int big_k, const __grid_constant__ TmaMap ta, const __grid_constant__ TmaMap tw) {
    moe_wgmma<192, 5>(&ta, &tw, out, offsets, n, e, big_n, big_k);
}

extern "C" __global__ void __launch_bounds__(384, 1)
    moe_grouped_gemm_wgmma_pp_n176(bf16* __restrict__ out, const bf16* __restrict__ a, const bf16* __restrict__ w, const int* __restrict__ offsets,
                                   int n, int e, int big_n, int big_k, const __grid_constant__ TmaMap ta, const __grid_constant__ TmaMap tw) {
    moe_wgmma_pp<176, 5, 1, 2>(&ta, &tw, out, offsets, n, e, big_n, big_k);
}

// Measurement variants of the ping-pong kernel (tile order, L2 hints), taken
// through SWITCHYARD_MOE_PP (kernels/src/moe/expert.rs).
#define MG_PP_VARIANT(NAME, PAIRS, HINT)                                                                                                          \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                                                         \
        NAME(bf16* __restrict__ out, const bf16* __restrict__ a, const bf16* __restrict__ w, const int* __restrict__ offsets, int n, int e,      \
             int big_n, int big_k, const __grid_constant__ TmaMap ta, const __grid_constant__ TmaMap tw) {                                      \
        moe_wgmma_pp<176, 5, PAIRS, HINT>(&ta, &tw, out, offsets, n, e, big_n, big_k);                                                           \
    }
MG_PP_VARIANT(moe_grouped_gemm_wgmma_pp_n176_strided, 0, 0)
MG_PP_VARIANT(moe_grouped_gemm_wgmma_pp_n176_pairs, 1, 0)
MG_PP_VARIANT(moe_grouped_gemm_wgmma_pp_n176_pairs_h1, 1, 1)
MG_PP_VARIANT(moe_grouped_gemm_wgmma_pp_n176_strided_h2, 0, 2)
// 2-block clusters (grid 2 x clusters), the weight slice multicast to both
// blocks where their tiles share it; the tensor map's w box is 88 rows.
MG_PP_VARIANT(moe_grouped_gemm_wgmma_pp_n176_mc, 2, 2)

#endif // __CUDA_ARCH_FEAT_SM90_ALL
