// Grouped expert GEMM on Hopper (sm_90a): moe_grouped_gemm_bf16's CUDA plan
// picks these entries at prefill sizes on a compute-capability 9.0 device
// (kernels/src/moe/expert.rs). Same machinery as the dense GEMM in
// gemm/gemm_sm90.cu (TMA into an mbarrier ring, wgmma from shared memory,
// helpers from prelude_sm90.cuh); everything sits behind
// __CUDA_ARCH_FEAT_SM90_ALL, so the module is empty on other targets.
//
// nvrtc-arch: sm_90a
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
// Also measured and dropped (one H200 call, against this kernel's 539-561 /
// 486-491 TFLOP/s gate_up / down; BENCHMARKS.md, 2026-12-02 sixth session;
// the code is commit be6604a): a block's two warpgroups on neighbouring
// tiles (two m-tiles of one weight slice) cut down's DRAM reads from
// 726-754 MB to 646-675 MB but ran slower (gate_up 414, down 479-480); L2
// eviction hints on the TMA copies (dead operands evict_first, rows still to
// be re-read evict_last) raised the reads and ran slower in either order;
// 2-block clusters multicasting the shared weight slice read the minimum
// 555 MB but ran at 265-269 / 310 (tensor pipe 31% of active cycles: the
// two blocks' rings refill in lock step). DRAM bytes are not down's limit.
// Measured and dropped in the seventh session (one H200 call against this
// kernel's 511-515 TFLOP/s down in the same call; the code is
// benchmarks/2026-12-02-moe-down-h200/variants.patch): a walk that hands
// every block an equal share of m64 row blocks (busiest SM 1.6% above the
// mean, from 3.6%; DRAM reads 554 MB, from 719) ran 502-506, its SMs
// needing 7% more active cycles for the same tensor-pipe cycles; on top of
// it, zeroing the accumulators before the turn and handing the turn over
// at the last slice's commit, 501-508; and adding an L2 prefetch of the
// block's next weight slice beside each copy, 369-375 (L2 at 96% of peak).

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
    int ntc;   // n-tiles an expert
    int tiles; // work items in all (pre[e] · ntc)
    int kt;    // K slices a tile
};

// Lays out shared memory, sets up the ring (an empty stage takes
// `releases` arrivals: one per warp that reads it) and the tile list, and
// counts the work; ends with __syncthreads.
template <int BN, int STAGES>
__device__ __forceinline__ MgSmem mg_setup(const TmaMap* ta, const TmaMap* tw, const int* __restrict__ offsets, int n, int e, int big_n, int big_k,
                                           unsigned releases) {
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
    m.ntc = (big_n + BN - 1) / BN;
    m.tiles = m.pre[e] * m.ntc;
    m.kt = (big_k + MG_BK - 1) / MG_BK;
    return m;
}

// Warpgroup 0: thread 0 feeds the ring with every K slice of the block's
// tiles in order; warps 1-3 write the rows outside every segment.
template <int BN, int STAGES>
__device__ __forceinline__ void mg_produce(const MgSmem& m, const TmaMap* ta, const TmaMap* tw, bf16* __restrict__ out, int n, int e, int big_n) {
    constexpr int STAGE_BYTES = MG_A_BYTES + BN * MG_BK * 2;
    const int ntc = m.ntc, tiles = m.tiles, KT = m.kt;
    const int tid = threadIdx.x;
    if (tid == 0) {
        int s = 0;
        unsigned phase = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            int x, mt, nt;
            mg_tile(t, m.pre, e, ntc, x, mt, nt);
            const int r0 = m.start[x] + mt * MG_BM, w0 = x * big_n + nt * BN;
            for (int kt = 0; kt < KT; ++kt) {
                const unsigned full = m.bars + 8u * s, empty = m.bars + 8u * (STAGES + s);
                // A fresh barrier is in phase 0: parity 1 passes the first round.
                mbar_wait(empty, phase ^ 1u);
                mbar_expect_tx(full, STAGE_BYTES);
                const unsigned dst = m.ring + s * STAGE_BYTES;
                tma_load_2d(dst, ta, full, kt * MG_BK, r0);
                tma_load_2d(dst + MG_A_BYTES, tw, full, kt * MG_BK, w0);
                ring_next<STAGES>(s, phase);
            }
        }
    } else if (tid >= 32) {
        // Rows outside every segment: [0, start[0]) and [start[e], n).
        unsigned* o = reinterpret_cast<unsigned*>(out);
        const size_t wpr = (size_t)(big_n / 2), stride = (size_t)gridDim.x * 96;
        const size_t first = (size_t)blockIdx.x * 96 + (tid - 32);
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
    const MgSmem m = mg_setup<BN, STAGES>(ta, tw, offsets, n, e, big_n, big_k, 8);
    const int ntc = m.ntc, tiles = m.tiles, KT = m.kt;
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
    if (wg == 0) {
        mg_produce<BN, STAGES>(m, ta, tw, out, n, e, big_n);
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
template <int BN, int STAGES>
__device__ __forceinline__ void moe_wgmma_pp(const TmaMap* ta, const TmaMap* tw, bf16* __restrict__ out, const int* __restrict__ offsets, int n,
                                             int e, int big_n, int big_k) {
    constexpr int STAGE_BYTES = MG_A_BYTES + BN * MG_BK * 2;
    // Each stage is read by one warpgroup: four warps release it.
    const MgSmem m = mg_setup<BN, STAGES>(ta, tw, offsets, n, e, big_n, big_k, 4);
    const int ntc = m.ntc, tiles = m.tiles, KT = m.kt;
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
    if (wg == 0) {
        // The producer needs few registers; the consumers' 176 accumulators
        // need more than the 168 an even split of the SM leaves them.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        mg_produce<BN, STAGES>(m, ta, tw, out, n, e, big_n);
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
            if (prev >= 0 && lane == 0) mbar_arrive(m.bars + 8u * (STAGES + prev));
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
        if (prev >= 0 && lane == 0) mbar_arrive(m.bars + 8u * (STAGES + prev));
    };
    // Turn i (the block's i-th tile) waits for turn i - 1's hand-over; each
    // bar.sync meets exactly one bar.arrive (the previous turn hands over
    // only when this turn exists), so no arrival is left pending at exit.
    int i = cw;
    for (int t = blockIdx.x + cw * gridDim.x; t < tiles; t += 2 * gridDim.x, i += 2) {
        int x, mt, nt;
        mg_tile(t, m.pre, e, ntc, x, mt, nt);
        const int seg_hi = max(m.start[x + 1], m.start[x]);
        const int r0 = m.start[x] + mt * MG_BM;
        const bool more = t + gridDim.x < tiles;
        if (i > 0) asm volatile("bar.sync %0, 256;\n" ::"r"(MG_TURN_BAR + cw) : "memory");
        // A tile's first row block always holds rows of its segment (tiles
        // are ⌈len / 128⌉ a segment).
        if (r0 + 64 < seg_hi) k_loop(MgConst<2>{}, more);
        else k_loop(MgConst<1>{}, more);
        ring_skip<STAGES>(s, phase, KT); // the other warpgroup's next tile
        mg_store_rows<BN>(acc[0], stg, out, r0 + warp * 16, seg_hi, nt * BN, big_n, lane);
        if (r0 + 64 < seg_hi) mg_store_rows<BN>(acc[1], stg, out, r0 + 64 + warp * 16, seg_hi, nt * BN, big_n, lane);
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
    moe_wgmma_pp<176, 5>(&ta, &tw, out, offsets, n, e, big_n, big_k);
}

#endif // __CUDA_ARCH_FEAT_SM90_ALL
