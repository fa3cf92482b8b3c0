// W4A16: bf16 activations times NVFP4 weights in the K-major layout:
// bq u8 [K/2, ldb] (two e2m1 codes per byte along K, low nibble = even k),
// bs u8 [K/16, ldb] (e4m3 block scales), f32 scale2.
// c[m, n] = bf16(scale2 * sum_k a[m, k] * w(n, k)), w = e2m1 * e4m3.
//
// w = e2m1 * e4m3 has at most 2 + 4 significant bits and lies in
// [2^-10, 2688], so it is exact in bf16: every kernel dequantises to bf16
// and multiplies on the tensor cores (mma.sync m16n8k16, f32 accumulation),
// where each product is exact and only the f32 summation order differs
// from the reference.
//
// - w4a16_gemm, _n128, _n128_ldb, _n128_m128, _n128_m128_bf16 share one
//   templated body (w4a16_tc) that differs only in the block tile. Every
//   output is accumulated by the same sequence of mma instructions, one per
//   16-wide K chunk in increasing k, with the same fragment contents, so all
//   five are bit-identical to each other; in particular _n128_m128_bf16
//   equals w4a16_gemm, as its contract requires.
// - w4a16_gemm_decode (M <= 8) and _m16 (M <= 16) stream the weights once
//   with every token's accumulator live: 4 warps a 128-column block, each
//   warp its own 64-k tiles through a per-lane cp.async ring, with a
//   cheaper code decode than the tile kernels' (see the decode section).

// ---------------------------------------------------------------- helpers

__device__ __forceinline__ unsigned w_smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void w_cp_async16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(w_smem_u32(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void w_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void w_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void w_ldmatrix_x4(unsigned* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(w_smem_u32(p)));
}

__device__ __forceinline__ void w_mma(float* d, const unsigned* a, const unsigned* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// 8 bytes of streamed weights, not kept in L1 (each is read once).
__device__ __forceinline__ uint2 ld_stream8(const void* p) {
    uint2 r;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
}

__device__ __forceinline__ void store_out(bf16* c, int N, int row, int col, float v0, float v1, float scale2) {
    // N may be odd (the _ldb variant): pairs only where they are 4-byte aligned.
    unsigned short b0 = f32_to_bf16(__fmul_rn(scale2, v0)), b1 = f32_to_bf16(__fmul_rn(scale2, v1));
    bf16* p = c + (size_t)row * N + col;
    if (col + 1 < N && aligned4(p)) {
        *reinterpret_cast<unsigned*>(p) = (unsigned)b0 | ((unsigned)b1 << 16);
    } else {
        if (col < N) p[0] = b0;
        if (col + 1 < N) p[1] = b1;
    }
}

// ---------------------------------------------------------------- tensor-core body

// Block tile BM x BN, 128 threads = 4 warps as 2 x 2, warp tile
// (BM/2) x (BN/2). K moves in 32-wide slices: A by cp.async (zero-filled
// past M and K) and the weights by plain loads of 4-byte code words, which
// are prefetched into registers one slice ahead and dequantised into shared
// memory as Ws[n][k] bf16 after the current slice's mma, so the loads
// overlap the tensor work. Rows are padded to 40 bf16 (80 bytes) so that
// ldmatrix phases are conflict-free.
#define W_BK 32
#define W_LD 40

template <int BM, int BN>
__device__ __forceinline__ void w4a16_tc(const bf16* __restrict__ a, const u8* __restrict__ bq, const u8* __restrict__ bs, float scale2,
                                         bf16* __restrict__ c, int M, int N, int K, int ldb) {
    constexpr int MI = BM / 32, NI = BN / 16; // m16 and n8 tiles per warp
    constexpr int R = BN / 32;                // kp rows (K pairs) each thread dequantises per slice
    constexpr int CG = BN / 4;                // 4-column groups per slice row
    __shared__ __align__(16) bf16 As[2][BM][W_LD];
    __shared__ __align__(16) bf16 Ws[2][BN][W_LD];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wm = warp >> 1, wn = warp & 1;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const bool fast = aligned16(a);
    const int KT = (K + W_BK - 1) / W_BK;

    auto load_a = [&](int stage, int kt) {
        const int k0 = kt * W_BK;
#pragma unroll
        for (int i = 0; i < BM * 4 / 128; ++i) {
            const int idx = tid + 128 * i, r = idx >> 2, ch = idx & 3, k = k0 + ch * 8, gr = row0 + r;
            const bool ok = gr < M && k < K;
            bf16* dst = &As[stage][r][ch * 8];
            if (fast) {
                w_cp_async16(dst, a + (size_t)(ok ? gr : 0) * K + (ok ? k : 0), ok ? 16 : 0);
            } else {
                unsigned v[4];
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    v[e] = ok ? ((unsigned)a[(size_t)gr * K + k + 2 * e] | ((unsigned)a[(size_t)gr * K + k + 2 * e + 1] << 16)) : 0u;
                *reinterpret_cast<uint4*>(dst) = make_uint4(v[0], v[1], v[2], v[3]);
            }
        }
    };

    // This thread's weight unit: columns 4cg..4cg+3 of the tile, kp rows
    // R*kq..R*kq+R-1 of the slice (k = 2R*kq .. 2R*kq+2R-1, inside one scale block).
    const int cg = tid % CG, kq = tid / CG;
    const int wcol = col0 + 4 * cg;
    const bool col_ok = wcol < ldb; // ldb % 16 == 0: a 4-column group is all in or all out
    unsigned codes[R], scales;
    auto load_w = [&](int kt) {
        const int kp0 = kt * (W_BK / 2) + R * kq;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const bool ok = col_ok && 2 * (kp0 + r) < K;
            codes[r] = ok ? __ldg(reinterpret_cast<const unsigned*>(bq + (size_t)(kp0 + r) * ldb + wcol)) : 0u;
        }
        const bool ok = col_ok && 2 * kp0 < K;
        scales = ok ? __ldg(reinterpret_cast<const unsigned*>(bs + (size_t)(2 * kp0 / 16) * ldb + wcol)) : 0u;
    };
    auto store_w = [&](int stage) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const unsigned s2 = e4m3_bf16x2((scales >> (8 * j)) & 0xffu);
            unsigned v[R];
#pragma unroll
            for (int r = 0; r < R; r += 2) {
                // Column j's bytes of kp rows r and r+1 -> 4 codes (k ascending).
                const unsigned w = ((codes[r] >> (8 * j)) & 0xffu) | (((codes[r + 1] >> (8 * j)) & 0xffu) << 8);
                unsigned p01, p23;
                e2m1x4_bf16(w, p01, p23);
                v[r] = bf16x2_mul(p01, s2);
                v[r + 1] = bf16x2_mul(p23, s2);
            }
            bf16* dst = &Ws[stage][4 * cg + j][2 * R * kq];
            if (R == 4) *reinterpret_cast<uint4*>(dst) = make_uint4(v[0], v[1], v[R > 2 ? 2 : 0], v[R > 3 ? 3 : 0]);
            else *reinterpret_cast<uint2*>(dst) = make_uint2(v[0], v[1]);
        }
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    load_a(0, 0);
    w_cp_async_commit();
    load_w(0);
    store_w(0);

    const int a_row = wm * (BM / 2) + (lane & 15), a_ch = lane >> 4;
    const int b_row = wn * (BN / 2) + (lane & 7) + ((lane >> 4) << 3), b_ch = (lane >> 3) & 1;
    for (int kt = 0; kt < KT; ++kt) {
        const bool next = kt + 1 < KT;
        if (next) {
            load_a((kt + 1) & 1, kt + 1);
            load_w(kt + 1);
        }
        w_cp_async_commit();
        w_cp_async_wait<1>();
        __syncthreads();
        const int st = kt & 1;
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
            // A K-chunk past K (K % 32 == 16) is skipped, not multiplied by
            // zeros: every variant then issues exactly K/16 mma per output.
            if (kt * W_BK + ks * 16 >= K) break;
            unsigned bfr[NI / 2][4];
#pragma unroll
            for (int j = 0; j < NI / 2; ++j) w_ldmatrix_x4(bfr[j], &Ws[st][b_row + 16 * j][ks * 16 + b_ch * 8]);
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                unsigned af[4];
                w_ldmatrix_x4(af, &As[st][a_row + 16 * i][ks * 16 + a_ch * 8]);
#pragma unroll
                for (int j = 0; j < NI; ++j) w_mma(acc[i][j], af, &bfr[j >> 1][(j & 1) * 2]);
            }
        }
        if (next) store_w((kt + 1) & 1);
        __syncthreads();
    }

    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + wm * (BM / 2) + 16 * i + g + 8 * h;
            if (row >= M) continue;
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int col = col0 + wn * (BN / 2) + 8 * j + 2 * q;
                if (col < N) store_out(c, N, row, col, acc[i][j][2 * h], acc[i][j][2 * h + 1], scale2);
            }
        }
}

extern "C" __global__ void __launch_bounds__(128) w4a16_gemm(const bf16* __restrict__ a, const u8* __restrict__ bq, const u8* __restrict__ bs,
                                                              float scale2, bf16* __restrict__ c, unsigned m, unsigned n, unsigned k) {
    w4a16_tc<64, 64>(a, bq, bs, scale2, c, m, n, k, n);
}

extern "C" __global__ void __launch_bounds__(128) w4a16_gemm_n128(const bf16* __restrict__ a, const u8* __restrict__ bq,
                                                                   const u8* __restrict__ bs, float scale2, bf16* __restrict__ c, unsigned m,
                                                                   unsigned n, unsigned k) {
    w4a16_tc<64, 128>(a, bq, bs, scale2, c, m, n, k, n);
}

extern "C" __global__ void __launch_bounds__(128) w4a16_gemm_n128_ldb(const bf16* __restrict__ a, const u8* __restrict__ bq,
                                                                       const u8* __restrict__ bs, float scale2, bf16* __restrict__ c,
                                                                       unsigned m, unsigned n, unsigned k, unsigned ldb) {
    w4a16_tc<64, 128>(a, bq, bs, scale2, c, m, n, k, ldb);
}

extern "C" __global__ void __launch_bounds__(128) w4a16_gemm_n128_m128(const bf16* __restrict__ a, const u8* __restrict__ bq,
                                                                        const u8* __restrict__ bs, float scale2, bf16* __restrict__ c,
                                                                        unsigned m, unsigned n, unsigned k) {
    w4a16_tc<128, 128>(a, bq, bs, scale2, c, m, n, k, n);
}

extern "C" __global__ void __launch_bounds__(128) w4a16_gemm_n128_m128_bf16(const bf16* __restrict__ a, const u8* __restrict__ bq,
                                                                             const u8* __restrict__ bs, float scale2, bf16* __restrict__ c,
                                                                             unsigned m, unsigned n, unsigned k) {
    w4a16_tc<128, 128>(a, bq, bs, scale2, c, m, n, k, n);
}

// ---------------------------------------------------------------- decode (M <= 16)

// Grid (ceil(N/128), S), block 128 = 4 warps. A block owns 128 output
// columns and K tiles [y * per, (y + 1) * per) of 64 k (S > 1 splits K:
// f32 partials go to workspace [S, M, N] and the last block of a column
// block adds them). Warp w takes the block's tiles w, w + 4, ...; its four
// q-lanes of a column group each own one 16-k scale block of the tile.
//
// Lane (g, q) of a tile streams 16-byte pieces into its own slots of a
// per-warp cp.async ring (STAGES tiles deep; no barrier, each lane reads
// only what it copied): the codes of kp rows 8q .. 8q+7 of the tile (k = 16q .. 16q+15)
// for columns 16g .. 16g+15, the 16 scales of that block, and 16 k of the
// activations of token g (and g + 8). 128 columns x 64 k are 32 mma.m16n8k16
// per warp with the weights as A (rows = columns, so one token wastes only
// tensor slots, never bytes) and the tokens as B.
//
// K order within an mma is permuted (each dot is unchanged up to the f32
// summation order): lane (g, q) of mma (i, j) gives A rows g and g + 8 =
// columns 16g + 2i and 16g + 2i + 1, and its k slots {2q, 2q+1} hold k
// 16q + 4j + {0, 2}, slots {2q+8, 2q+9} k 16q + 4j + {1, 3}. That pairs each
// code with the code two k further on, 16 bits up in a byte-permuted word of
// kp rows 2j and 2j+1, so one mask, one multiply and one mask turn a code
// pair into a bf16 pair (dec_pair_lo/hi); B takes the activations in the
// same order.
//
// Exactness. A placed code pair reads as e2m1 * 2^-126 (e2m1 code 1, 0.5, is
// a bf16 subnormal, which bf16 arithmetic keeps), and one bf16 multiply by
// the block scale times 2^119 (dec_scales) gives w * 2^-7 exactly: w has at
// most 2 + 4 significant bits and w * 2^-7 lies in [2^-17, 21]. The mma
// multiplies and adds in f32; the sum is multiplied by 2^7 (exact) before
// scale2, so the result is the contract's up to the f32 summation order, for
// every activation above 2^-110 or so in magnitude (below that a product
// scaled by 2^-7 would be an f32 subnormal where the reference's is not).
#define DEC_WARPS 4
#define DEC_COLS 128
// Ring depth and resident blocks an SM of each entry (the plan's
// DecodeEntry). A deeper ring costs resident warps: the shared memory is
// the occupancy limit. Measured on the H200 in one call (BENCHMARKS.md,
// 2026-12-02): for M <= 8, 3 stages x 3 blocks beat 4 x 2 in bench-model
// (332.8 against 320.3 tok/s) and tied the previous 2 x 4 there; for
// M <= 16, 4 x 2 is what batch 16 ran (2980 tok/s). The kernel is
// issue-latency bound either way (ncu: 1.9 warps a scheduler, 5.3 cycles
// between a warp's instructions, DRAM at 30%): a warp's own ring buys
// bytes in flight with the warps that hide the decode's latency.
#define DEC_STAGES_M8 3
#define DEC_BLOCKS_M8 3
#define DEC_STAGES_M16 4
#define DEC_BLOCKS_M16 2
// The decode kernels read only weights before sy_wait_prior().
// dependent-launch: w4a16_gemm_decode w4a16_gemm_decode_m16
// Column blocks a K-split decode may have: the module-scope semaphores that
// pick each column block's reducing block. Launches on one backend run in
// stream order, so no two launches share them at once.
#define DEC_MAX_COL_BLOCKS 65536
__device__ unsigned w4a16_decode_semaphore[DEC_MAX_COL_BLOCKS];

// cp.async of 16 bytes (zero-filled past src_bytes); the memory clobber keeps
// the compiler from moving this lane's earlier reads of the slot after it.
__device__ __forceinline__ void dec_cp16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(w_smem_u32(dst)), "l"(src), "r"(src_bytes) : "memory");
}

// The e2m1 codes in bits 3:0 and 19:16 of z (dec_pair_lo) or 7:4 and 23:20
// (dec_pair_hi) as a bf16 pair (low, high) reading e2m1 * 2^-126: the sign
// goes to bit 15 / 31 and the exponent and mantissa bits to 8:6 / 24:22; the
// multiply makes both shifted copies of each isolated nibble at once (the
// copies do not overlap, so nothing carries) and the last mask keeps the
// wanted bits.
__device__ __forceinline__ unsigned dec_pair_lo(unsigned z) { return ((z & 0x000f000fu) * 0x1040u) & 0x81c081c0u; }
__device__ __forceinline__ unsigned dec_pair_hi(unsigned z) { return ((z & 0x00f000f0u) * 0x0104u) & 0x81c081c0u; }

// The two e4m3 scales in the low 16 bits of h, each times 2^119 as a
// broadcast bf16 pair: s0 from bits 7:0, s1 from bits 15:8. The fp8 to f16
// conversion is exact (NaN stays NaN), so are the f32 widening and the
// power-of-two multiply (448 * 2^119 < 2^128), and the result has 4
// significant bits, so its top half is the bf16 value.
__device__ __forceinline__ void dec_scales(unsigned h, unsigned& s0, unsigned& s1) {
    unsigned f16x2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(f16x2) : "h"((unsigned short)(h & 0xffffu)));
    float lo, hi;
    asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"((unsigned short)(f16x2 & 0xffffu)));
    asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"((unsigned short)(f16x2 >> 16)));
    const float p119 = __uint_as_float(0x7b000000u); // 2^119
    s0 = __byte_perm(__float_as_uint(lo * p119), 0u, 0x3232);
    s1 = __byte_perm(__float_as_uint(hi * p119), 0u, 0x3232);
}

__device__ __forceinline__ unsigned dec_word(const uint4& v, int w) { return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w; }

// MT token tiles of 8: MT = 1 for M <= 8, 2 for M <= 16; STAGES ring slots a warp.
template <int MT, int STAGES>
__device__ __forceinline__ void w4a16_decode(const bf16* __restrict__ a, const u8* __restrict__ bq, const u8* __restrict__ bs, float scale2,
                                             bf16* __restrict__ c, int M, int N, int K, float* __restrict__ workspace) {
    // Per lane and stage: 8 code pieces, 1 scale piece, 2 activation pieces per token tile.
    constexpr int PIECES = 9 + 2 * MT;
    extern __shared__ __align__(16) unsigned char dec_smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
    const int col0 = blockIdx.x * DEC_COLS, mycol = col0 + 16 * g;
    const bool col_ok = mycol < N; // N % 16 == 0: all 16 columns in or all out
    const int KT_ALL = (K + 63) / 64, per = (KT_ALL + gridDim.y - 1) / gridDim.y;
    const int kt0 = blockIdx.y * per + warp, kt1 = min(KT_ALL, (int)(blockIdx.y + 1) * per);
    const int ntiles = kt0 < kt1 ? (kt1 - kt0 + DEC_WARPS - 1) / DEC_WARPS : 0;
    // Slot (stage s, piece p) of this lane: ring[(s * PIECES + p) * 32].
    uint4* ring = reinterpret_cast<uint4*>(dec_smem) + warp * (STAGES * PIECES * 32) + lane;
    const bool a16 = aligned16(a);

    auto issue_weights = [&](int i) {
        const int kb = (kt0 + DEC_WARPS * i) * 4 + q; // this lane's 16-k block
        const bool ok = col_ok && kb * 16 < K;
        uint4* dst = ring + (i % STAGES) * (PIECES * 32);
        const u8* src = bq + (size_t)kb * 8 * N + mycol;
#pragma unroll
        for (int r = 0; r < 8; ++r) dec_cp16(dst + r * 32, ok ? src + (size_t)r * N : bq, ok ? 16 : 0);
        dec_cp16(dst + 8 * 32, ok ? bs + (size_t)kb * N + mycol : bs, ok ? 16 : 0);
    };
    auto issue_acts = [&](int i) {
        const int k = (kt0 + DEC_WARPS * i) * 64 + 16 * q;
        uint4* dst = ring + (i % STAGES) * (PIECES * 32) + 9 * 32;
#pragma unroll
        for (int t = 0; t < MT; ++t) {
            const int tok = g + 8 * t;
            const bool ok = tok < M && k < K;
            const bf16* src = a + (size_t)tok * K + k;
            if (a16) {
                dec_cp16(dst + 2 * t * 32, ok ? src : a, ok ? 16 : 0);
                dec_cp16(dst + (2 * t + 1) * 32, ok ? src + 8 : a, ok ? 16 : 0);
            } else {
                unsigned v[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) v[e] = ok ? ((unsigned)src[2 * e] | ((unsigned)src[2 * e + 1] << 16)) : 0u;
                dst[2 * t * 32] = make_uint4(v[0], v[1], v[2], v[3]);
                dst[(2 * t + 1) * 32] = make_uint4(v[4], v[5], v[6], v[7]);
            }
        }
    };

    float acc[MT][8][4];
#pragma unroll
    for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[t][i][e] = 0.0f;

    sy_allow_next();
#pragma unroll
    for (int i = 0; i < STAGES; ++i)
        if (i < ntiles) issue_weights(i);
    sy_wait_prior(); // the activations are the previous launch's output
#pragma unroll
    for (int i = 0; i < STAGES; ++i) {
        if (i < ntiles) issue_acts(i);
        w_cp_async_commit();
    }

    for (int i = 0; i < ntiles; ++i) {
        w_cp_async_wait<STAGES - 1>(); // tile i's group has landed
        const uint4* slot = ring + (i % STAGES) * (PIECES * 32);
        // Scales of columns 2i (sc[i][0]) and 2i + 1 (sc[i][1]).
        unsigned sc[8][2];
        {
            const uint4 sv = slot[8 * 32];
#pragma unroll
            for (int i2 = 0; i2 < 4; ++i2) {
                const unsigned w = dec_word(sv, i2);
                dec_scales(w, sc[2 * i2][0], sc[2 * i2][1]);
                dec_scales(w >> 16, sc[2 * i2 + 1][0], sc[2 * i2 + 1][1]);
            }
        }
        // Not unrolled: the step body (8 mma groups, about 160 instructions)
        // stays small in the instruction cache; the other warps cover its loads.
#pragma unroll 1
        for (int j = 0; j < 4; ++j) {
            const uint4 xv = slot[(2 * j) * 32], yv = slot[(2 * j + 1) * 32]; // kp rows 2j, 2j + 1
            // B fragments of token tile t: (k 4j, 4j+2) and (4j+1, 4j+3) of the lane's 16,
            // from activation words 2j and 2j + 1 (half j & 1 of piece 9 + 2t + j / 2).
            unsigned bfr[MT][2];
#pragma unroll
            for (int t = 0; t < MT; ++t) {
                const uint2 u = reinterpret_cast<const uint2*>(slot + (9 + 2 * t + (j >> 1)) * 32)[j & 1];
                bfr[t][0] = __byte_perm(u.x, u.y, 0x5410);
                bfr[t][1] = __byte_perm(u.x, u.y, 0x7632);
            }
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                // Columns 2i, 2i+1 of rows 2j (bytes 0, 1) and 2j + 1 (bytes 2, 3); z >> 8
                // brings column 2i + 1's bytes to 0 and 2.
                const unsigned z = __byte_perm(dec_word(xv, i >> 1), dec_word(yv, i >> 1), (i & 1) ? 0x7632 : 0x5410), z8 = z >> 8;
                unsigned af[4];
                af[0] = bf16x2_mul(dec_pair_lo(z), sc[i][0]);  // row g, k 4j, 4j+2
                af[1] = bf16x2_mul(dec_pair_lo(z8), sc[i][1]); // row g + 8
                af[2] = bf16x2_mul(dec_pair_hi(z), sc[i][0]);  // row g, k 4j+1, 4j+3
                af[3] = bf16x2_mul(dec_pair_hi(z8), sc[i][1]); // row g + 8
#pragma unroll
                for (int t = 0; t < MT; ++t) w_mma(acc[t][i], af, bfr[t]);
            }
        }
        // The slot is read (its values are in registers): refill it.
        if (i + STAGES < ntiles) {
            issue_weights(i + STAGES);
            issue_acts(i + STAGES);
        }
        w_cp_async_commit();
    }
    w_cp_async_wait<0>();
    __syncthreads(); // every warp is done with the ring: it becomes the reduction buffer

    // acc[t][i]: rows g, g + 8 (columns 16g + 2i, +1) x tokens 8t + 2q, +1, stored
    // per lane (stride 33 floats per element: conflict-free both ways).
    constexpr int ELEMS = MT * 32;
    float* red = reinterpret_cast<float*>(dec_smem);
#pragma unroll
    for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) red[(warp * ELEMS + (t * 8 + i) * 4 + e) * 33 + lane] = acc[t][i][e];
    __syncthreads();
    for (int idx = tid; idx < M * DEC_COLS; idx += DEC_WARPS * 32) {
        const int tok = idx / DEC_COLS, cc = idx % DEC_COLS, col = col0 + cc;
        if (col >= N) continue;
        const int t = tok >> 3, qq = (tok & 7) >> 1, e = (tok & 1) + 2 * (cc & 1), gg = cc >> 4, i = (cc & 15) >> 1;
        const int el = (t * 8 + i) * 4 + e, ln = 4 * gg + qq;
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; ++w) s += red[(w * ELEMS + el) * 33 + ln];
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
        const unsigned arrived = atomicAdd(&w4a16_decode_semaphore[blockIdx.x], 1u);
        last = arrived == gridDim.y - 1;
        if (last) w4a16_decode_semaphore[blockIdx.x] = 0u;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int idx = tid; idx < M * DEC_COLS; idx += DEC_WARPS * 32) {
        const int tok = idx / DEC_COLS, col = col0 + idx % DEC_COLS;
        if (col >= N) continue;
        float s = 0.0f;
        for (int y = 0; y < (int)gridDim.y; ++y) s = __fadd_rn(s, __ldcg(workspace + ((size_t)y * M + tok) * N + col));
        c[(size_t)tok * N + col] = f32_to_bf16(__fmul_rn(scale2, s * 128.0f));
    }
}

// M <= 8: one token tile (a 66 KiB ring a block).
extern "C" __global__ void __launch_bounds__(128, DEC_BLOCKS_M8) w4a16_gemm_decode(const bf16* __restrict__ a, const u8* __restrict__ bq,
                                                                       const u8* __restrict__ bs, float scale2, bf16* __restrict__ c,
                                                                       unsigned m, unsigned n, unsigned k, float* __restrict__ workspace) {
    w4a16_decode<1, DEC_STAGES_M8>(a, bq, bs, scale2, c, m, n, k, workspace);
}

// 8 < M <= 16: two token tiles (a 104 KiB ring a block).
extern "C" __global__ void __launch_bounds__(128, DEC_BLOCKS_M16) w4a16_gemm_decode_m16(const bf16* __restrict__ a, const u8* __restrict__ bq,
                                                                           const u8* __restrict__ bs, float scale2, bf16* __restrict__ c,
                                                                           unsigned m, unsigned n, unsigned k, float* __restrict__ workspace) {
    w4a16_decode<2, DEC_STAGES_M16>(a, bq, bs, scale2, c, m, n, k, workspace);
}
