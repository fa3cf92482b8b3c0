// W4A16 decode (M <= 16) on Hopper: the CUDA plan of w4a16_gemm_decode on a
// compute-capability 9.0 device (kernels/src/gemm/w4a16.rs) when a, bq and bs
// are 16-byte aligned. Same contract and layout as w4a16.cu's decode entries
// (bq u8 [K/2, N], two codes per byte along K, low nibble = even k; bs u8
// [K/16, N]; N % 16 == 0, K % 16 == 0), and the same per-mma arithmetic.
//
// nvrtc-arch: sm_90a
// dependent-launch: w4a16_gemm_decode_ring w4a16_gemm_decode_ring_m16
//
// Why a second kernel: w4a16.cu's decode gives every warp its own cp.async
// ring, so bytes in flight cost shared memory a warp and the SM holds few
// warps (ncu: 1.9 a scheduler, 0.35 instructions issued a cycle) to hide
// the decode's dependency chains. Here one producer warp streams a block's
// 64-k tiles with TMA bulk copies into one block-wide ring (completion on
// mbarriers), and eight consumer warps take the tiles in turn, so the ring
// depth no longer costs consumer warps: two blocks an SM keep 16 consumers
// (4 a scheduler) and 32 tiles in flight.
//
// Grid (ceil(N/128), S), block 288: warps 0-7 consume, warp 8 produces. A
// block owns 128 output columns and K tiles [y * per, (y + 1) * per) of 64
// k; tile i of the block sits in stage i % STAGES and is consumed by warp
// i % 8. Stage layout (bytes): the codes of kp row 8q + r (q = 16-k block,
// r = 0..7) of the 128 columns at (4r + q) * 128, so that the four q-lanes
// of a column group read one 512-byte span (no bank conflicts); the four
// scale rows at 4096 + 128 q; token t's 64 activations at 4608 + 144 t.
// One bulk copy a row: 32 code rows, 4 scale rows and M activation rows a
// tile, each cut to the columns below N and the k below K; what a copy
// leaves (columns past N, tokens past M) is never stored, and k blocks past
// K are zeroed in registers (scale and activations), so stale bytes never
// reach a kept output.
//
// Consumer lane (g, q) runs w4a16.cu's per-tile arithmetic unchanged:
// columns 16g .. 16g + 15 (rows g, g + 8 of mma i are columns 16g + 2i, +1),
// 16-k block q, k permuted within an mma as described there, weights as
// the mma's A operand reading w * 2^-7 exactly, sums * 2^7 before scale2.
// The eight warps' partials are added in warp order through shared memory
// (the ring, once drained); with S > 1 the f32 partials go to workspace
// [S, M, N] and the last block of a column block adds them in split order.
#define RD_CONSUMERS 8
#define RD_THREADS (32 * (RD_CONSUMERS + 1))
#define RD_COLS 128
#define RD_STAGES_M8 16
#define RD_STAGES_M16 16
#define RD_BLOCKS 2
#define RD_CODES 0
#define RD_SCALES 4096
#define RD_ACTS 4608
#define RD_ACT_ROW 144
#define RD_MAX_COL_BLOCKS 65536

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Picks each column block's reducing block in a K split (one launch at a
// time uses them: launches on one backend run in stream order).
__device__ unsigned w4a16_ring_semaphore[RD_MAX_COL_BLOCKS];

template <int MT> struct RdStage {
    static constexpr int BYTES = RD_ACTS + MT * 8 * RD_ACT_ROW;
};

// The mbarriers (full s, empty s) in front of the ring, padded to 128 bytes.
template <int STAGES> struct RdBars {
    static constexpr int BYTES = (16 * STAGES + 127) / 128 * 128;
};

template <int MT, int STAGES>
__device__ __forceinline__ void w4a16_decode_ring(const bf16* __restrict__ a, const u8* __restrict__ bq, const u8* __restrict__ bs, float scale2,
                                                  bf16* __restrict__ c, int M, int N, int K, float* __restrict__ workspace) {
    constexpr int STAGE = RdStage<MT>::BYTES;
    extern __shared__ __align__(128) unsigned char rd_smem[];
    const unsigned bars = wg_smem(rd_smem);
    unsigned char* ring = rd_smem + RdBars<STAGES>::BYTES;
    const unsigned ring_s = wg_smem(ring);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int col0 = blockIdx.x * RD_COLS;
    const int KP = K / 2, KB = K / 16;
    const int KT_ALL = (K + 63) / 64, per = (KT_ALL + gridDim.y - 1) / gridDim.y;
    const int kt0 = blockIdx.y * per, ntiles = max(0, min(KT_ALL, kt0 + per) - kt0);
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (STAGES + s); };

    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), 1);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    sy_allow_next();

    float acc[MT][8][4];
#pragma unroll
    for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[t][i][e] = 0.0f;

    if (warp == RD_CONSUMERS) {
        // Producer. Bytes a tile brings: its code rows and scale rows below
        // K, each cut to the columns below N, and M activation rows cut to K.
        const unsigned cb = (unsigned)min(RD_COLS, N - col0);
        const unsigned long long policy = l2_evict_first();
        auto tile_bytes = [&](int kt) {
            const unsigned rows = (unsigned)min(32, KP - kt * 32), srows = (unsigned)min(4, KB - kt * 4);
            const unsigned ab = (unsigned)min(128, 2 * (K - kt * 64));
            return (rows + srows) * cb + (unsigned)M * ab;
        };
        auto issue_weights = [&](int i) {
            const int kt = kt0 + i, s = i % STAGES, kp = kt * 32 + lane;
            const unsigned dst = ring_s + s * STAGE;
            if (kp < KP) bulk_load_hint(dst + RD_CODES + ((lane & 7) * 4 + (lane >> 3)) * 128, bq + (size_t)kp * N + col0, cb, full(s), policy);
            if (lane < 4 && kt * 4 + lane < KB)
                bulk_load_hint(dst + RD_SCALES + lane * 128, bs + (size_t)(kt * 4 + lane) * N + col0, cb, full(s), policy);
        };
        auto issue_acts = [&](int i) {
            const int kt = kt0 + i, s = i % STAGES;
            if (lane < M)
                bulk_load(ring_s + s * STAGE + RD_ACTS + lane * RD_ACT_ROW, a + (size_t)lane * K + kt * 64, (unsigned)min(128, 2 * (K - kt * 64)),
                          full(s));
        };
        // The weights of the first stages go out before the previous launch
        // has finished; the activations (its output) after.
        const int pre = min(ntiles, STAGES);
        for (int i = 0; i < pre; ++i) {
            if (lane == 0) mbar_expect_tx(full(i), tile_bytes(kt0 + i));
            __syncwarp();
            issue_weights(i);
        }
        sy_wait_prior();
        for (int i = 0; i < pre; ++i) issue_acts(i);
        for (int i = STAGES; i < ntiles; ++i) {
            const int s = i % STAGES;
            mbar_wait(empty(s), (unsigned)((i / STAGES - 1) & 1));
            if (lane == 0) mbar_expect_tx(full(s), tile_bytes(kt0 + i));
            __syncwarp();
            issue_weights(i);
            issue_acts(i);
        }
    } else {
        sy_wait_prior(); // the stores below follow the previous launch
        const int g = lane >> 2, q = lane & 3;
        for (int i = warp; i < ntiles; i += RD_CONSUMERS) {
            const int s = i % STAGES;
            mbar_wait(full(s), (unsigned)((i / STAGES) & 1));
            const unsigned char* st = ring + s * STAGE;
            // This lane's 16-k block past K: its weights and activations count as zero.
            const bool live = (kt0 + i) * 4 + q < KB;
            unsigned sc[8][2];
            {
                const uint4 sv = *reinterpret_cast<const uint4*>(st + RD_SCALES + q * 128 + 16 * g);
#pragma unroll
                for (int i2 = 0; i2 < 4; ++i2) {
                    const unsigned w = dec_word(sv, i2);
                    dec_scales(w, sc[2 * i2][0], sc[2 * i2][1]);
                    dec_scales(w >> 16, sc[2 * i2 + 1][0], sc[2 * i2 + 1][1]);
                }
#pragma unroll
                for (int i2 = 0; i2 < 8; ++i2) {
                    sc[i2][0] = live ? sc[i2][0] : 0u;
                    sc[i2][1] = live ? sc[i2][1] : 0u;
                }
            }
#pragma unroll 1
            for (int j = 0; j < 4; ++j) {
                const uint4 xv = *reinterpret_cast<const uint4*>(st + RD_CODES + ((2 * j) * 4 + q) * 128 + 16 * g);
                const uint4 yv = *reinterpret_cast<const uint4*>(st + RD_CODES + ((2 * j + 1) * 4 + q) * 128 + 16 * g);
                unsigned bfr[MT][2];
#pragma unroll
                for (int t = 0; t < MT; ++t) {
                    const uint2 u = *reinterpret_cast<const uint2*>(st + RD_ACTS + (g + 8 * t) * RD_ACT_ROW + 32 * q + 8 * j);
                    bfr[t][0] = live ? __byte_perm(u.x, u.y, 0x5410) : 0u;
                    bfr[t][1] = live ? __byte_perm(u.x, u.y, 0x7632) : 0u;
                }
#pragma unroll
                for (int i2 = 0; i2 < 8; ++i2) {
                    const unsigned z = __byte_perm(dec_word(xv, i2 >> 1), dec_word(yv, i2 >> 1), (i2 & 1) ? 0x7632 : 0x5410), z8 = z >> 8;
                    const unsigned a0 = bf16x2_mul(dec_pair_lo(z), sc[i2][0]);
                    const unsigned a1 = bf16x2_mul(dec_pair_lo(z8), sc[i2][1]);
                    const unsigned a2 = bf16x2_mul(dec_pair_hi(z), sc[i2][0]);
                    const unsigned a3 = bf16x2_mul(dec_pair_hi(z8), sc[i2][1]);
#pragma unroll
                    for (int t = 0; t < MT; ++t) mma16816_bf16_f32(acc[t][i2], a0, a1, a2, a3, bfr[t][0], bfr[t][1]);
                }
            }
            // The stage's values are in registers: hand it back to the producer.
            __syncwarp();
            if (lane == 0) mbar_arrive(empty(s));
        }
    }
    // Every issued tile was waited for by its consumer, so no copy is in
    // flight: the ring becomes the reduction buffer.
    __syncthreads();

    // acc[t][i] of consumer warp w: rows g, g + 8 (columns 16g + 2i, +1) x
    // tokens 8t + 2q, +1, stored per lane (stride 33 floats: conflict-free).
    constexpr int ELEMS = MT * 32;
    float* red = reinterpret_cast<float*>(ring);
    if (warp < RD_CONSUMERS) {
#pragma unroll
        for (int t = 0; t < MT; ++t)
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) red[(warp * ELEMS + (t * 8 + i) * 4 + e) * 33 + lane] = acc[t][i][e];
    }
    __syncthreads();
    for (int idx = tid; idx < M * RD_COLS; idx += RD_THREADS) {
        const int tok = idx / RD_COLS, cc = idx % RD_COLS, col = col0 + cc;
        if (col >= N) continue;
        const int t = tok >> 3, qq = (tok & 7) >> 1, e = (tok & 1) + 2 * (cc & 1), gg = cc >> 4, i = (cc & 15) >> 1;
        const int el = (t * 8 + i) * 4 + e, ln = 4 * gg + qq;
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < RD_CONSUMERS; ++w) s += red[(w * ELEMS + el) * 33 + ln];
        if (gridDim.y == 1) c[(size_t)tok * N + col] = f32_to_bf16(__fmul_rn(scale2, s * 128.0f));
        else workspace[((size_t)blockIdx.y * M + tok) * N + col] = s;
    }
    if (gridDim.y == 1) return;
    // K split: the last block of this column block to arrive adds every
    // split's partials from +0 in split order (so which block is last does
    // not matter), scales once, and resets the semaphore for the next launch.
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        const unsigned arrived = atomicAdd(&w4a16_ring_semaphore[blockIdx.x], 1u);
        last = arrived == gridDim.y - 1;
        if (last) w4a16_ring_semaphore[blockIdx.x] = 0u;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int idx = tid; idx < M * RD_COLS; idx += RD_THREADS) {
        const int tok = idx / RD_COLS, col = col0 + idx % RD_COLS;
        if (col >= N) continue;
        float s = 0.0f;
        for (int y = 0; y < (int)gridDim.y; ++y) s = __fadd_rn(s, __ldcg(workspace + ((size_t)y * M + tok) * N + col));
        c[(size_t)tok * N + col] = f32_to_bf16(__fmul_rn(scale2, s * 128.0f));
    }
}

// M <= 8: one token tile, a 90 KiB ring a block.
extern "C" __global__ void __launch_bounds__(RD_THREADS, RD_BLOCKS) w4a16_gemm_decode_ring(const bf16* __restrict__ a, const u8* __restrict__ bq,
                                                                                const u8* __restrict__ bs, float scale2, bf16* __restrict__ c,
                                                                                unsigned m, unsigned n, unsigned k, float* __restrict__ workspace) {
    w4a16_decode_ring<1, RD_STAGES_M8>(a, bq, bs, scale2, c, m, n, k, workspace);
}

// 8 < M <= 16: two token tiles, a 108 KiB ring a block.
extern "C" __global__ void __launch_bounds__(RD_THREADS, RD_BLOCKS) w4a16_gemm_decode_ring_m16(const bf16* __restrict__ a, const u8* __restrict__ bq,
                                                                                    const u8* __restrict__ bs, float scale2, bf16* __restrict__ c,
                                                                                    unsigned m, unsigned n, unsigned k, float* __restrict__ workspace) {
    w4a16_decode_ring<2, RD_STAGES_M16>(a, bq, bs, scale2, c, m, n, k, workspace);
}

#endif // __CUDA_ARCH_FEAT_SM90_ALL
