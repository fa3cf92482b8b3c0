// Dense bf16 GEMM on Hopper (sm_90a): C[M, N] = A[M, K] · B[N, K]^T with
// wgmma, TMA and mbarrier pipelines. The CUDA plan of
// dense_gemm_bf16_pipelined picks these entries (see kernels/src/gemm/mod.rs)
// on a compute-capability 9.0 device; the module is compiled for the
// arch-specific target (the line below), whose wgmma and setmaxnreg
// instructions no other GPU runs, so everything here sits behind
// __CUDA_ARCH_FEAT_SM90_ALL and the module is empty elsewhere.
//
// nvrtc-arch: sm_90a
//
// Contract (dense_gemm_bf16_pipelined's): f32 accumulation in any K order,
// c = bf16(acc) rounded to nearest even. K % 8 == 0 (a TMA row stride is a
// multiple of 16 bytes), N even, A and B 16-byte aligned, C 4-byte aligned;
// the plan checks all of these and otherwise keeps the mma.sync kernel.
//
// dense_gemm_wgmma_n{256,224,192}: a persistent grid (at most one block per SM,
// each walking output tiles t = blockIdx.x, + gridDim.x, ... in a grouped
// order so that concurrent tiles share A and B panels in L2), block 384 =
// three warpgroups:
// - warpgroup 0, the producer: one thread issues, per 64-wide K slice, two
//   TMA tiled copies (A: 128 rows x 64, B: BN rows x 64, bf16, 128-byte
//   swizzle) into the next free stage of a STAGES-deep ring, completing on
//   that stage's `full` mbarrier (expect_tx of the stage's bytes). Rows and
//   columns past M, N or K arrive as zeros (the tensor maps carry the true
//   extents), so ragged shapes need no special path.
// - warpgroups 1 and 2, the consumers: each owns 64 rows of the 128-row tile
//   and all BN columns (BN/2 f32 accumulators a thread), waits on `full`,
//   runs four wgmma.m64nBNk16 from shared memory (descriptors with the
//   128-byte swizzle), keeps one slice's wgmma group in flight and releases
//   the previous slice's stage on its `empty` mbarrier (one arrival per
//   consumer warp, 8 in all). After the tile's last slice the accumulators
//   are rounded to bf16 and stored straight from registers (bf16 pairs,
//   rows and columns past M and N skipped) while the producer already
//   fills the ring with the next tile.
// The tensor maps arrive as two __grid_constant__ parameters after the
// declared ones; the backend encodes them per launch (cuTensorMapEncodeTiled)
// from the TensorMap2d list this entry registers beside its plan.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The mbarrier, TMA and wgmma helpers (and TmaMap) come from prelude_sm90.cuh.

#define WG_BM 128
#define WG_BK 64
// Bytes of one A slice in shared memory: 128 rows of 64 bf16.
#define WG_A_BYTES (WG_BM * WG_BK * 2)

// Dynamic shared memory: STAGES x (A slice + B slice), then the 2·STAGES
// mbarriers, plus up to 1023 bytes to align the ring to 1024 (the 128-byte
// swizzle's atom). The plan asks for the same (wgmma_shared_bytes).
template <int BN, int STAGES>
__device__ __forceinline__ void wgmma_gemm(const TmaMap* ta, const TmaMap* tb, bf16* __restrict__ c, int M, int N, int K) {
    constexpr int B_BYTES = BN * WG_BK * 2;
    constexpr int STAGE_BYTES = WG_A_BYTES + B_BYTES;
    extern __shared__ __align__(1024) unsigned char wg_raw[];
    const unsigned raw = wg_smem(wg_raw);
    const unsigned ring = (raw + 1023u) & ~1023u;
    const unsigned bars = ring + STAGES * STAGE_BYTES;
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (STAGES + s); };

    const int tid = threadIdx.x, wg = tid >> 7;
    if (tid == 0) ring_init<STAGES>(bars, ta, tb);
    __syncthreads();

    const int tiles_m = (M + WG_BM - 1) / WG_BM, tiles_n = (N + BN - 1) / BN, tiles = tiles_m * tiles_n;
    const int KT = (K + WG_BK - 1) / WG_BK;

    if (wg == 0) {
        // Producer: one thread; the other 127 have nothing to do.
        if (tid == 0) {
            int s = 0;
            unsigned phase = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                int mt, nt;
                grouped_tile(t, tiles_m, tiles_n, mt, nt);
                for (int kt = 0; kt < KT; ++kt) {
                    // A fresh barrier is in phase 0, so waiting on parity 1
                    // (the phase "before" it) passes the first round.
                    mbar_wait(empty(s), phase ^ 1u);
                    mbar_expect_tx(full(s), STAGE_BYTES);
                    const unsigned dst = ring + s * STAGE_BYTES;
                    tma_load_2d(dst, ta, full(s), kt * WG_BK, mt * WG_BM);
                    tma_load_2d(dst + WG_A_BYTES, tb, full(s), kt * WG_BK, nt * BN);
                    ring_next<STAGES>(s, phase);
                }
            }
        }
        return;
    }

    // Consumers: warpgroup cw owns tile rows 64·cw .. 64·cw + 63.
    const int cw = wg - 1, lt = tid & 127, warp = lt >> 5, lane = tid & 31;
    float acc[BN / 2];
    int s = 0;
    unsigned phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int mt, nt;
        grouped_tile(t, tiles_m, tiles_n, mt, nt);
        wg_consume_tile<BN, WG_BK, STAGES>(acc, ring, STAGE_BYTES, cw * 64 * (WG_BK * 2), WG_A_BYTES, bars, KT, lane, s, phase);

        // Fragment layout: n8 block j holds (row g, cols 8j + 2q, +1) in
        // acc[4j], acc[4j+1] and row g + 8 in acc[4j+2], acc[4j+3].
        const int row = mt * WG_BM + cw * 64 + warp * 16 + (lane >> 2);
        const int col0 = nt * BN + 2 * (lane & 3);
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int col = col0 + 8 * j;
            if (col >= N) continue;
            if (row < M) *reinterpret_cast<unsigned*>(c + (size_t)row * N + col) = pack_bf16(acc[4 * j], acc[4 * j + 1]);
            if (row + 8 < M) *reinterpret_cast<unsigned*>(c + (size_t)(row + 8) * N + col) = pack_bf16(acc[4 * j + 2], acc[4 * j + 3]);
        }
    }
}

extern "C" __global__ void __launch_bounds__(384, 1)
    dense_gemm_wgmma_n256(const bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c, unsigned m, unsigned n, unsigned k,
                          const __grid_constant__ TmaMap ta, const __grid_constant__ TmaMap tb) {
    wgmma_gemm<256, 4>(&ta, &tb, c, m, n, k);
}

extern "C" __global__ void __launch_bounds__(384, 1)
    dense_gemm_wgmma_n192(const bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c, unsigned m, unsigned n, unsigned k,
                          const __grid_constant__ TmaMap ta, const __grid_constant__ TmaMap tb) {
    wgmma_gemm<192, 5>(&ta, &tb, c, m, n, k);
}

extern "C" __global__ void __launch_bounds__(384, 1)
    dense_gemm_wgmma_n224(const bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c, unsigned m, unsigned n, unsigned k,
                          const __grid_constant__ TmaMap ta, const __grid_constant__ TmaMap tb) {
    wgmma_gemm<224, 5>(&ta, &tb, c, m, n, k);
}

#endif // __CUDA_ARCH_FEAT_SM90_ALL
