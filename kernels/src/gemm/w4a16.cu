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
// - w4a16_gemm_decode (M <= 16) streams the weights once with every token's
//   accumulator live, splitting K across the block's 8 warps.

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

// Grid (ceil(N/64), S), block 256: S > 1 splits K across blocks (f32
// partials in workspace [S, M, N], added by each column block's last block). The weights are the mma's A operand
// (rows = output columns), the tokens its B operand (one n8 tile for
// M <= 8, two for M <= 16), so a token count of 1 wastes only idle tensor
// slots, never memory traffic. Lane (g, q) owns columns col0 + 8g .. +7 and
// streams, per 16-wide K chunk, the 8-byte code words of kp rows q and q+4
// plus the 8 scale bytes: exactly the A fragments of 4 mma (mma i: row g =
// column 8g + 2i, row g + 8 = column 8g + 2i + 1). The block's 8 warps take
// K chunks round-robin (warp w: chunks w, w + 8, ...), each loading DEC_U
// chunks before using any, so 8 x DEC_U x 24 bytes per lane are in flight;
// the 8 partial sums are added in warp order through shared memory.
#define DEC_U 8
// The decode kernel reads only weights before sy_wait_prior().
// dependent-launch: w4a16_gemm_decode
// Column blocks a K-split decode may have: the module-scope semaphores that
// pick each column block's reducing block. Launches on one backend run in
// stream order, so no two launches share them at once.
#define DEC_MAX_COL_BLOCKS 65536
__device__ unsigned w4a16_decode_semaphore[DEC_MAX_COL_BLOCKS];

extern "C" __global__ void __launch_bounds__(256, 2) w4a16_gemm_decode(const bf16* __restrict__ a, const u8* __restrict__ bq,
                                                                        const u8* __restrict__ bs, float scale2, bf16* __restrict__ c,
                                                                        unsigned m, unsigned n, unsigned k, float* __restrict__ workspace) {
    __shared__ float red[8][16][64];
    const int M = m, N = n, K = k;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
    const int col0 = blockIdx.x * 64, mycol = col0 + 8 * g;
    const bool col_ok = mycol < N; // N % 16 == 0: all 8 columns in or all out
    // Grid row y takes K chunks [y * per, (y + 1) * per) of 16 k.
    const int KC_ALL = K / 16, per = (KC_ALL + gridDim.y - 1) / gridDim.y;
    const int kc0 = blockIdx.y * per, KC = min(KC_ALL, kc0 + per);
    const bool two = M > 8;
    const bool a4 = aligned4(a);

    float acc[2][4][4];
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[t][i][e] = 0.0f;

    // Activation pair (k, k+1) of token `tok` as a bf16x2, 0 past M.
    auto act = [&](int tok, int kk) -> unsigned {
        if (tok >= M) return 0u;
        const bf16* p = a + (size_t)tok * K + kk;
        return a4 ? __ldg(reinterpret_cast<const unsigned*>(p)) : ((unsigned)p[0] | ((unsigned)p[1] << 16));
    };

    sy_allow_next();
    bool waited = false;
    for (int base = kc0 + warp; base < KC; base += 8 * DEC_U) {
        uint2 lo[DEC_U], hi[DEC_U], sc[DEC_U];
#pragma unroll
        for (int u = 0; u < DEC_U; ++u) {
            const int kc = base + 8 * u;
            const bool ok = col_ok && kc < KC;
            lo[u] = ok ? ld_stream8(bq + (size_t)(kc * 8 + q) * N + mycol) : make_uint2(0u, 0u);
            hi[u] = ok ? ld_stream8(bq + (size_t)(kc * 8 + q + 4) * N + mycol) : make_uint2(0u, 0u);
            sc[u] = ok ? ld_stream8(bs + (size_t)kc * N + mycol) : make_uint2(0u, 0u);
        }
        if (!waited) {
            sy_wait_prior(); // the activations are the previous launch's output
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < DEC_U; ++u) {
            const int kc = base + 8 * u;
            if (kc >= KC) break; // warp-uniform
            const int k0 = kc * 16;
            unsigned b0[2], b1[2];
            b0[0] = act(g, k0 + 2 * q);
            b0[1] = act(g, k0 + 8 + 2 * q);
            if (two) {
                b1[0] = act(g + 8, k0 + 2 * q);
                b1[1] = act(g + 8, k0 + 8 + 2 * q);
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const unsigned wl = ((i < 2 ? lo[u].x : lo[u].y) >> (16 * (i & 1))) & 0xffffu;
                const unsigned wh = ((i < 2 ? hi[u].x : hi[u].y) >> (16 * (i & 1))) & 0xffffu;
                const unsigned sw = (i < 2 ? sc[u].x : sc[u].y) >> (16 * (i & 1));
                const unsigned sx = e4m3_bf16x2(sw & 0xffu), sy = e4m3_bf16x2((sw >> 8) & 0xffu);
                unsigned af[4], x, y;
                e2m1x4_bf16(wl, x, y); // kp row q: column X codes, column Y codes
                af[0] = bf16x2_mul(x, sx);
                af[1] = bf16x2_mul(y, sy);
                e2m1x4_bf16(wh, x, y); // kp row q + 4
                af[2] = bf16x2_mul(x, sx);
                af[3] = bf16x2_mul(y, sy);
                w_mma(acc[0][i], af, b0);
                if (two) w_mma(acc[1][i], af, b1);
            }
        }
    }

    if (!waited) sy_wait_prior(); // no chunks for this warp: still ordered before the writes
    // acc[t][i]: (row g -> column 8g+2i, row g+8 -> column 8g+2i+1) x tokens 8t + 2q, +1.
#pragma unroll
    for (int t = 0; t < 2; ++t) {
        if (t == 1 && !two) break;
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                red[warp][8 * t + 2 * q + e][8 * g + 2 * i] = acc[t][i][e];
                red[warp][8 * t + 2 * q + e][8 * g + 2 * i + 1] = acc[t][i][2 + e];
            }
    }
    __syncthreads();
    for (int idx = tid; idx < M * 64; idx += 256) {
        const int tok = idx >> 6, cc = idx & 63, col = col0 + cc;
        if (col >= N) continue;
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < 8; ++w) s += red[w][tok][cc];
        if (gridDim.y == 1) c[(size_t)tok * N + col] = f32_to_bf16(__fmul_rn(scale2, s));
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
    for (int idx = tid; idx < M * 64; idx += 256) {
        const int tok = idx >> 6, col = col0 + (idx & 63);
        if (col >= N) continue;
        float s = 0.0f;
        for (int y = 0; y < (int)gridDim.y; ++y) s = __fadd_rn(s, __ldcg(workspace + ((size_t)y * M + tok) * N + col));
        c[(size_t)tok * N + col] = f32_to_bf16(__fmul_rn(scale2, s));
    }
}
