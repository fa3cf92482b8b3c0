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
// re-read from L2.
//
// Block 384 = three warpgroups, as the dense kernel:
// - warpgroup 0: one thread issues the TMA copies of each 64-wide K slice
//   (a: the 128 rows from the tile's first row, w: BN rows of the 2-D view
//   [e * N, K] starting at x * N + column) into a STAGES-deep ring. Rows of
//   a past the segment belong to the next expert (or, past n, arrive as
//   zeros): they are multiplied but never stored. Weight rows past N of an
//   expert likewise give columns that are never stored. The other three
//   warps write the zero rows (before offsets[0], at or past offsets[e]).
// - warpgroups 1 and 2: each owns 64 rows of the tile. A warpgroup whose
//   64 rows all lie past the segment's end (the last tile of a segment of
//   at most 64 leftover rows) skips its wgmma and only keeps the ring
//   moving (waits `full`, arrives on `empty`), so a ragged tail costs half
//   a tile. The epilogue stages each warp's 16 x 64 bf16 pieces in shared
//   memory (rows padded to 72 elements: conflict-free on both sides) and
//   stores rows inside the segment as 16-byte vectors; a store straight
//   from the fragment would write 4 bytes of 8 rows an instruction.
//
// Measured and dropped: tiles of 256 rows x 176 (two m64 row blocks a
// consumer warpgroup, setmaxnreg 40/232, 3 stages) cut ncu's L2 throughput
// from 91% to 81% of peak at the gate_up shape but left the tensor pipe no
// busier (76% of active cycles), and ran slower in the same call (gate_up
// 503 against 528 TFLOP/s, down 409 against 473).

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

#define MG_BM 128
#define MG_BK 64
#define MG_A_BYTES (MG_BM * MG_BK * 2)
// Epilogue staging of one consumer warp: 16 rows of 64 bf16, padded to 72.
#define MG_ST_LD 72
#define MG_ST_BYTES (16 * MG_ST_LD * 2)

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

// Dynamic shared memory (the plan asks for the same,
// grouped_wgmma_shared_bytes): up to 1023 bytes to align the ring to 1024
// (the 128-byte swizzle's atom), STAGES x (a slice + w slice), the eight
// consumer warps' staging, 2 * STAGES mbarriers, then pre[e + 1] and
// start[e + 1] (segment starts clamped to [0, n]).
template <int BN, int STAGES>
__device__ __forceinline__ void moe_wgmma(const TmaMap* ta, const TmaMap* tw, bf16* __restrict__ out, const int* __restrict__ offsets, int n, int e,
                                          int big_n, int big_k) {
    constexpr int B_BYTES = BN * MG_BK * 2;
    constexpr int STAGE_BYTES = MG_A_BYTES + B_BYTES;
    extern __shared__ __align__(1024) unsigned char mg_raw[];
    const unsigned raw = wg_smem(mg_raw);
    const unsigned pad = ((raw + 1023u) & ~1023u) - raw;
    const unsigned ring = raw + pad;
    unsigned char* staging = mg_raw + pad + STAGES * STAGE_BYTES;
    const unsigned bars = ring + STAGES * STAGE_BYTES + 8 * MG_ST_BYTES;
    int* pre = reinterpret_cast<int*>(staging + 8 * MG_ST_BYTES + 16 * STAGES);
    int* start = pre + (e + 1);
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (STAGES + s); };

    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
    if (tid == 0) ring_init<STAGES>(bars, ta, tw);
    if ((tid >> 5) == 1) {
        // Segment x is [start[x], max(start[x + 1], start[x])): clamped, so
        // offsets from device memory can never address rows outside [0, n).
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

    const int ntc = (big_n + BN - 1) / BN, tiles = pre[e] * ntc;
    const int KT = (big_k + MG_BK - 1) / MG_BK;

    if (wg == 0) {
        if (tid == 0) {
            int s = 0;
            unsigned phase = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                int x, mt, nt;
                mg_tile(t, pre, e, ntc, x, mt, nt);
                const int r0 = start[x] + mt * MG_BM, w0 = x * big_n + nt * BN;
                for (int kt = 0; kt < KT; ++kt) {
                    // A fresh barrier is in phase 0: parity 1 passes the first round.
                    mbar_wait(empty(s), phase ^ 1u);
                    mbar_expect_tx(full(s), STAGE_BYTES);
                    const unsigned dst = ring + s * STAGE_BYTES;
                    tma_load_2d(dst, ta, full(s), kt * MG_BK, r0);
                    tma_load_2d(dst + MG_A_BYTES, tw, full(s), kt * MG_BK, w0);
                    ring_next<STAGES>(s, phase);
                }
            }
        } else if (tid >= 32) {
            // Rows outside every segment: [0, start[0]) and [start[e], n).
            unsigned* o = reinterpret_cast<unsigned*>(out);
            const size_t wpr = (size_t)(big_n / 2), stride = (size_t)gridDim.x * 96;
            const size_t first = (size_t)blockIdx.x * 96 + (tid - 32);
            const size_t head = (size_t)start[0] * wpr, tail = (size_t)start[e] * wpr, all = (size_t)n * wpr;
            for (size_t i = first; i < head; i += stride) o[i] = 0u;
            for (size_t i = tail + first; i < all; i += stride) o[i] = 0u;
        }
        return;
    }

    // Consumers: warpgroup cw owns tile rows 64·cw .. 64·cw + 63.
    const int cw = wg - 1, warp = (tid & 127) >> 5, g = lane >> 2, q = lane & 3;
    unsigned char* stg = staging + (cw * 4 + warp) * MG_ST_BYTES;
    float acc[BN / 2];
    int s = 0;
    unsigned phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int x, mt, nt;
        mg_tile(t, pre, e, ntc, x, mt, nt);
        const int seg_hi = max(start[x + 1], start[x]);
        const int r0 = start[x] + mt * MG_BM + cw * 64;
        if (r0 >= seg_hi) {
            // Nothing of ours in the segment: release each stage once it has
            // landed (waiting keeps our arrivals in step with the ring).
            for (int kt = 0; kt < KT; ++kt) {
                mbar_wait(full(s), phase);
                if (lane == 0) mbar_arrive(empty(s));
                ring_next<STAGES>(s, phase);
            }
            continue;
        }
        wg_consume_tile<BN, MG_BK, STAGES>(acc, ring, STAGE_BYTES, cw * 64 * (MG_BK * 2), MG_A_BYTES, bars, KT, lane, s, phase);

        // Fragment layout: n8 block j holds (row g, cols 8j + 2q, +1) in
        // acc[4j], acc[4j+1] and row g + 8 in acc[4j+2], acc[4j+3]; this
        // warp's rows are r0 + 16·warp .. + 15.
        const int row0 = r0 + warp * 16;
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
                const int row = row0 + r, col = nt * BN + 64 * c + 8 * pc;
                if (p < 16 * blocks && row < seg_hi && col < big_n) {
                    const uint4 v = *reinterpret_cast<const uint4*>(stg + (r * MG_ST_LD + 8 * pc) * 2);
                    *reinterpret_cast<uint4*>(out + (size_t)row * big_n + col) = v;
                }
            }
            __syncwarp();
        }
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
    moe_grouped_gemm_wgmma_n176(bf16* __restrict__ out, const bf16* __restrict__ a, const bf16* __restrict__ w, const int* __restrict__ offsets,
                                int n, int e, int big_n, int big_k, const __grid_constant__ TmaMap ta, const __grid_constant__ TmaMap tw) {
    moe_wgmma<176, 5>(&ta, &tw, out, offsets, n, e, big_n, big_k);
}

#endif // __CUDA_ARCH_FEAT_SM90_ALL
