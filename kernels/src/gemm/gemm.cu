// Dense bf16 GEMM family: C[M, N] = A[M, K] · B[N, K]^T, A and B row-major
// bf16 (B in the HF [out, in] layout), f32 accumulation, bf16 output (RNE).
//
// Two groups with different contracts:
// - Fixed order: strict k order (dense_gemm_bf16, the split-K partial pass:
//   each output sums acc = acc + a*b for k = 0..K-1) or the router order
//   (dense_gemm_router and its decode entry dense_gemm_router_chain: 32
//   partials of 8-wide k chunks, then a pairwise tree; gemm/mod.rs,
//   router_dot), the product and the sum rounded separately. They use
//   __fmul_rn / __fadd_rn, which the compiler never contracts into an FMA, so
//   they equal the CPU reference bit for bit whatever --fmad says.
// - Tensor cores (dense_gemm_tc, dense_gemm_tc_scaled_acc,
//   dense_gemm_bf16_pipelined): mma.sync.m16n8k16 bf16 -> f32, K order free.
//   dense_gemm_tc and dense_gemm_tc_scaled_acc run one templated body (same
//   tiles, same mma sequence per output) and differ only in the epilogue, so
//   scaled_acc equals tc followed by scaled_add_bf16 bit for bit.
//
// Shapes: N even (outputs are stored as bf16 pairs), K % 8 == 0 for the
// tensor-core kernels (16-byte row chunks), K even otherwise. Pointers from
// the allocator are 256-byte aligned; the cp.async paths additionally check
// 16-byte alignment of A and B at run time and fall back to element loads
// for sub-allocated operands, so an offset address is slow, never a fault.

// ---------------------------------------------------------------- helpers

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// 16-byte global -> shared copy that bypasses L1; src_bytes = 0 zero-fills
// the destination without reading (ragged edges of M, N and K).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x2(unsigned* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(smem_u32(p)));
}

// d += A(16x16, row) * B(16x8, col), bf16 inputs, f32 accumulators.
__device__ __forceinline__ void mma_bf16_16816(float* d, const unsigned* a, const unsigned* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Loads the 8 bf16 of a 16-byte chunk element by element (unaligned
// operands), zero where k >= K or the row is out of range.
__device__ __forceinline__ uint4 load8_slow(const bf16* row, int k, int K, bool row_ok) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        unsigned lo = (row_ok && k + 2 * i < K) ? row[k + 2 * i] : 0u;
        unsigned hi = (row_ok && k + 2 * i + 1 < K) ? row[k + 2 * i + 1] : 0u;
        w[i] = lo | (hi << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// The shared epilogue arithmetic of dense_gemm_tc_scaled_acc and
// scaled_add_bf16: t = bf16 value, u = scale*t, c = bf16(c + u), no FMA.
__device__ __forceinline__ unsigned short scaled_add_one(float c, float t, float scale) {
    return f32_to_bf16(__fadd_rn(c, __fmul_rn(scale, t)));
}

// ---------------------------------------------------------------- strict-order GEMMs

#define SIMPLE_TK 32

// One output per thread of a 16x16 block, K staged through shared memory in
// SIMPLE_TK slices; each thread walks its slice in increasing k, so the sum
// is strictly k = lo..hi-1. Shared by dense_gemm_bf16 (whole K) and the
// split-K partial (one chunk of K).
__device__ __forceinline__ float simple_dot(const bf16* __restrict__ a, const bf16* __restrict__ b, int M, int N, int K, int lo, int hi) {
    __shared__ bf16 As[16][SIMPLE_TK + 2];
    __shared__ bf16 Bs[16][SIMPLE_TK + 2];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * 16, col0 = blockIdx.x * 16;
    const int tid = ty * 16 + tx;
    float acc = 0.0f;
    for (int k0 = lo; k0 < hi; k0 += SIMPLE_TK) {
        // 16 rows x 32 k of each operand = 512 elements: two per thread.
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            int idx = tid + e * 256, r = idx / SIMPLE_TK, kk = idx % SIMPLE_TK, k = k0 + kk;
            bool kin = k < hi;
            As[r][kk] = (kin && row0 + r < M) ? a[(size_t)(row0 + r) * K + k] : (bf16)0;
            Bs[r][kk] = (kin && col0 + r < N) ? b[(size_t)(col0 + r) * K + k] : (bf16)0;
        }
        __syncthreads();
        const int kn = min(SIMPLE_TK, hi - k0);
        for (int kk = 0; kk < kn; ++kk)
            acc = __fadd_rn(acc, __fmul_rn(bf16_to_f32(As[ty][kk]), bf16_to_f32(Bs[tx][kk])));
        __syncthreads();
    }
    return acc;
}

extern "C" __global__ void __launch_bounds__(256) dense_gemm_bf16(const bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c,
                                                                   unsigned m, unsigned n, unsigned k) {
    const int M = m, N = n, K = k;
    float acc = simple_dot(a, b, M, N, K, 0, K);
    int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
    if (row < M && col < N) c[(size_t)row * N + col] = f32_to_bf16(acc);
}

// dense_gemm_splitk_bf16: two passes over the backend's workspace (appended
// after the declared parameters), the splits·M·N f32 partial sums ws[s, m, n].
// Pass 1, grid (ceil(N/16), ceil(M/16), splits), block (16, 16): ws[s, m, n]
// = the strict-order sum over chunk s of K (empty past K, so +0).
extern "C" __global__ void __launch_bounds__(256) dense_gemm_splitk_bf16(const bf16* __restrict__ a, const bf16* __restrict__ b,
                                                                          bf16* __restrict__ c, unsigned m, unsigned n, unsigned k,
                                                                          unsigned splits, float* __restrict__ workspace) {
    const int M = m, N = n, K = k, S = splits, s = blockIdx.z;
    const int len = (K + S - 1) / S;
    const int lo = min(K, s * len), hi = min(K, (s + 1) * len);
    float acc = simple_dot(a, b, M, N, K, lo, hi);
    int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
    if (row < M && col < N) workspace[((size_t)s * M + row) * N + col] = acc;
}

// Pass 2, grid (ceil(N/256), M), block 256: c[m, n] = bf16(sum_s ws[s, m, n])
// from +0 in s order.
extern "C" __global__ void __launch_bounds__(256) dense_gemm_splitk_bf16_reduce(const bf16* __restrict__ a, const bf16* __restrict__ b,
                                                                                 bf16* __restrict__ c, unsigned m, unsigned n, unsigned k,
                                                                                 unsigned splits, const float* __restrict__ workspace) {
    const size_t M = m, N = n;
    const unsigned col = blockIdx.x * 256 + threadIdx.x, row = blockIdx.y;
    if (col >= N || row >= M) return;
    float acc = 0.0f;
    for (unsigned s = 0; s < splits; ++s) acc = __fadd_rn(acc, workspace[(s * M + row) * N + col]);
    c[row * N + col] = f32_to_bf16(acc);
}

// Router GEMM, prefill entry (M above the plan's chain limit): block (16,16)
// computes a 16-row x 64-column tile; thread (tx, ty) owns row ty and columns
// tx + 16j (j < 4), so each A element it reads from shared memory feeds four
// independent sums. The router order (gemm/mod.rs, router_dot) is walked
// partial-major: for partial q = 0..31, slices of ROUTER_TK k holding its
// chunks q, q + 32, q + 64, q + 96, ... (four 8-wide chunks a slice; zeros
// past K add +0, which changes no partial), then the partial goes onto a
// binary-counter stack that performs the pairwise tree as the partials
// arrive: partial q merges with the stack levels its trailing one bits name,
// the earlier (lower-index) sum always on the left, as the tree adds them.
// At decode sizes it is latency-bound (a few blocks), hence
// dense_gemm_router_chain.
#define ROUTER_TK 32
extern "C" __global__ void __launch_bounds__(256) dense_gemm_router(const bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c,
                                                                     unsigned m, unsigned n, unsigned k) {
    __shared__ float As[16][ROUTER_TK + 1];
    __shared__ float Bs[64][ROUTER_TK + 1];
    const int M = m, N = n, K = k, K8 = (K + 7) / 8;
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
    const int row0 = blockIdx.y * 16, col0 = blockIdx.x * 64;
    // Stack levels 0..4 (a subtree of 1, 2, 4, 8, 16 partials) for the four outputs.
    float s0[4] = {}, s1[4] = {}, s2[4] = {}, s3[4] = {}, s4[4] = {}, total[4] = {};
    for (int q = 0; q < 32; ++q) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        // Chunk t of a slice is chunk q + 32 · (i0 + t) of the row.
        for (int i0 = 0; q + 32 * i0 < K8; i0 += ROUTER_TK / 8) {
            // K is even and chunks are 8 wide: a bf16 pair never straddles a chunk or K.
            // The pair at slice position kk of row `row` of `m` (rows < lim), zeros past either.
            auto pair = [&](const bf16* m, int row, int lim, int kk) {
                const int kg = 8 * (q + 32 * (i0 + kk / 8)) + kk % 8;
                if (row >= lim || kg >= K) return make_float2(0.0f, 0.0f);
                const bf16* p = m + (size_t)row * K + kg;
                return make_float2(bf16_to_f32(p[0]), bf16_to_f32(p[1]));
            };
            {
                const int r = tid / 16, kk = 2 * (tid % 16);
                const float2 v = pair(a, row0 + r, M, kk);
                As[r][kk] = v.x;
                As[r][kk + 1] = v.y;
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int idx = tid + e * 256, r = idx / 16, kk = 2 * (idx % 16);
                const float2 v = pair(b, col0 + r, N, kk);
                Bs[r][kk] = v.x;
                Bs[r][kk + 1] = v.y;
            }
            __syncthreads();
#pragma unroll 8
            for (int kk = 0; kk < ROUTER_TK; ++kk) {
                const float av = As[ty][kk];
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[j] = __fadd_rn(acc[j], __fmul_rn(av, Bs[tx + 16 * j][kk]));
            }
            __syncthreads();
        }
        // Push partial q (uniform over the block: q is the loop's).
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            float v = acc[j];
            if (!(q & 1)) { s0[j] = v; continue; }
            v = __fadd_rn(s0[j], v);
            if (!(q & 2)) { s1[j] = v; continue; }
            v = __fadd_rn(s1[j], v);
            if (!(q & 4)) { s2[j] = v; continue; }
            v = __fadd_rn(s2[j], v);
            if (!(q & 8)) { s3[j] = v; continue; }
            v = __fadd_rn(s3[j], v);
            if (!(q & 16)) { s4[j] = v; continue; }
            total[j] = __fadd_rn(s4[j], v); // q = 31: the root
        }
    }
    const int row = row0 + ty;
    if (row >= M) return;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        int col = col0 + tx + 16 * j;
        if (col < N) c[(size_t)row * N + col] = f32_to_bf16(total[j]);
    }
}

// Router GEMM, decode entry (M up to the plan's chain limit). Each output is
// a warp's 32 partial chains of K / 32 adds (the router order) and five
// butterfly steps, so the kernel's time is about one trip to memory, and
// everything else serves to start every block at once and keep it fed:
// - Grid (ceil(N/TC), ceil(M/TR)), block 256, with the tile TR x TC
//   (TR·TC <= 32) implied by the grid: TC = ceil(N / gridDim.x), TR =
//   ceil(M / gridDim.y). The plan keeps tiles small so that the blocks
//   spread over all multiprocessors (M = 1, N = 128: 128 blocks of 1x1).
// - All 256 threads stage the tile's TR rows of A and TC rows of B over the
//   whole of K in shared memory, converted to f32, with 16-byte loads
//   ROUTER_CHAIN_BATCH deep per thread so the block waits for memory about
//   once. Dynamic shared memory: (TR + TC) * router_chain_ld(K) * 4 bytes.
// - Warp w owns outputs t = w, w + 8, ... < TR·TC (t = (t / TC, t % TC)):
//   lane j sums partial j (router_partial), router_tree meets them, lane 0
//   stores.
// Operands that are not 16-byte aligned, or K % 8 != 0 (rows then start off
// 16 bytes), take 4-byte loads (element loads below 4-byte alignment); rows
// and columns past M and N stage as zeros and store nothing.
#define ROUTER_CHAIN_BATCH 8

// Row stride in floats: K rounded up to 32 plus 4, so that consecutive rows
// start 16 bytes apart modulo 128 and eight lanes reading eight rows at the
// same k hit distinct bank groups. The plan computes the same.
__device__ __forceinline__ int router_chain_ld(int K) { return ((K + 31) & ~31) + 4; }

extern "C" __global__ void __launch_bounds__(256) dense_gemm_router_chain(const bf16* __restrict__ a, const bf16* __restrict__ b,
                                                                           bf16* __restrict__ c, unsigned m, unsigned n, unsigned k) {
    extern __shared__ __align__(16) float router_smem[];
    const int M = m, N = n, K = k;
    const int TC = (int)((n - 1u) / gridDim.x + 1u), TR = (int)((m - 1u) / gridDim.y + 1u);
    const int col0 = blockIdx.x * TC, row0 = blockIdx.y * TR;
    const int LD = router_chain_ld(K), K8 = (K + 7) / 8;
    const int total = (TR + TC) * K8, tid = threadIdx.x;
    // Rows start 16-byte aligned only when both bases are and K % 8 == 0; K
    // is even, so 4-byte aligned bases keep every bf16 pair in one word.
    const bool fast = aligned16(a) && aligned16(b) && (K & 7) == 0;
    const bool words = aligned4(a) && aligned4(b);

    // Staging: chunk idx = 8 consecutive k of staged row idx / K8 (rows 0..TR-1
    // are A's, TR.. are B's).
    for (int base = tid; base < total; base += ROUTER_CHAIN_BATCH * 256) {
        uint4 v[ROUTER_CHAIN_BATCH];
#pragma unroll
        for (int u = 0; u < ROUTER_CHAIN_BATCH; ++u) {
            const int idx = base + u * 256;
            const int r = idx / K8, kk = 8 * (idx - r * K8);
            const bool isA = r < TR;
            const int g = isA ? row0 + r : col0 + (r - TR);
            v[u] = make_uint4(0u, 0u, 0u, 0u);
            if (idx < total && g < (isA ? M : N)) {
                const bf16* src = (isA ? a : b) + (size_t)g * K;
                if (fast) {
                    v[u] = ld_stream16(src + kk);
                } else if (words) {
                    const unsigned* w = reinterpret_cast<const unsigned*>(src + kk);
                    v[u] = make_uint4(w[0], kk + 2 < K ? w[1] : 0u, kk + 4 < K ? w[2] : 0u, kk + 6 < K ? w[3] : 0u);
                } else {
                    v[u] = load8_slow(src, kk, K, true);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < ROUTER_CHAIN_BATCH; ++u) {
            const int idx = base + u * 256;
            if (idx < total) {
                const int r = idx / K8, kk = 8 * (idx - r * K8);
                float4* dst = reinterpret_cast<float4*>(router_smem + (size_t)r * LD + kk);
                dst[0] = make_float4(bf16_lo(v[u].x), bf16_hi(v[u].x), bf16_lo(v[u].y), bf16_hi(v[u].y));
                dst[1] = make_float4(bf16_lo(v[u].z), bf16_hi(v[u].z), bf16_lo(v[u].w), bf16_hi(v[u].w));
            }
        }
    }
    __syncthreads();

    // A warp an output (outputs t = warp, warp + 8, ...: at most four), its
    // lanes the router order's 32 partials, met by the butterfly.
    const int warp = tid >> 5, lane = tid & 31;
    for (int t = warp; t < TR * TC; t += 8) {
        const int r = t / TC, cc = t - r * TC;
        const int row = row0 + r, col = col0 + cc;
        if (row >= M || col >= N) continue; // uniform over the warp
        const float p = router_partial(router_smem + (size_t)r * LD, router_smem + (size_t)(TR + cc) * LD, lane, K8);
        const float sum = router_tree(p);
        if (lane == 0) c[(size_t)row * N + col] = f32_to_bf16(sum);
    }
}

// out[i] = bf16(out[i] + scale*x[i]); grid ceil(n/512), block 256, two elements per thread (n even).
extern "C" __global__ void __launch_bounds__(256) scaled_add_bf16(bf16* __restrict__ out, const bf16* __restrict__ x, unsigned n, float scale) {
    const unsigned i = 2 * (blockIdx.x * 256 + threadIdx.x);
    if (i >= n) return;
    if (aligned4(out + i) && aligned4(x + i)) {
        unsigned o = *reinterpret_cast<const unsigned*>(out + i), v = *reinterpret_cast<const unsigned*>(x + i);
        unsigned short lo = scaled_add_one(bf16_lo(o), bf16_lo(v), scale);
        unsigned short hi = scaled_add_one(bf16_hi(o), bf16_hi(v), scale);
        *reinterpret_cast<unsigned*>(out + i) = (unsigned)lo | ((unsigned)hi << 16);
    } else {
        out[i] = scaled_add_one(bf16_to_f32(out[i]), bf16_to_f32(x[i]), scale);
        out[i + 1] = scaled_add_one(bf16_to_f32(out[i + 1]), bf16_to_f32(x[i + 1]), scale);
    }
}

// ---------------------------------------------------------------- tensor-core GEMM, 16x64 tile

// dense_gemm_tc / dense_gemm_tc_scaled_acc: grid (ceil(N/64), ceil(M/16)),
// block 128. Each of the 4 warps owns a 16x16 output (two n8 mma tiles);
// K moves through shared memory in 32-wide slices, double-buffered with
// cp.async. Rows are padded to 40 bf16 (80 bytes) so that the eight 16-byte
// rows one ldmatrix phase reads fall in distinct banks.
#define TC_BK 32
#define TC_LD 40

template <bool SCALED>
__device__ __forceinline__ void tc_body(const bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c, int M, int N, int K,
                                        float scale) {
    __shared__ __align__(16) bf16 As[2][16][TC_LD];
    __shared__ __align__(16) bf16 Bs[2][64][TC_LD];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int row0 = blockIdx.y * 16, col0 = blockIdx.x * 64;
    const bool fast = aligned16(a) && aligned16(b);
    const int KT = (K + TC_BK - 1) / TC_BK;

    // 16x32 A (64 chunks) + 64x32 B (256 chunks) = 320 16-byte chunks per slice.
    auto load = [&](int stage, int kt) {
        const int k0 = kt * TC_BK;
        for (int idx = tid; idx < 320; idx += 128) {
            const bool isA = idx < 64;
            const int j = isA ? idx : idx - 64;
            const int r = j >> 2, ch = j & 3, k = k0 + ch * 8;
            const int grow = isA ? row0 + r : col0 + r;
            const bool ok = (isA ? grow < M : grow < N) && k < K;
            const bf16* src = (isA ? a : b) + (size_t)(ok ? grow : 0) * K + (ok ? k : 0);
            bf16* dst = isA ? &As[stage][r][ch * 8] : &Bs[stage][r][ch * 8];
            if (fast) {
                cp_async16(dst, src, ok ? 16 : 0);
            } else {
                *reinterpret_cast<uint4*>(dst) = load8_slow((isA ? a : b) + (size_t)grow * K, k, K, ok);
            }
        }
    };

    float acc[2][4] = {};
    load(0, 0);
    cp_async_commit();
    for (int kt = 0; kt < KT; ++kt) {
        if (kt + 1 < KT) load((kt + 1) & 1, kt + 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const int st = kt & 1;
#pragma unroll
        for (int ks = 0; ks < TC_BK; ks += 16) {
            unsigned af[4], bfr[4];
            ldmatrix_x4(af, &As[st][lane & 15][ks + (lane >> 4) * 8]);
            // Two n8 tiles of this warp's 16 columns: matrices (n0-7,k0-7),(n0-7,k8-15),(n8-15,k0-7),(n8-15,k8-15).
            ldmatrix_x4(bfr, &Bs[st][warp * 16 + (lane & 7) + ((lane >> 4) << 3)][ks + ((lane >> 3) & 1) * 8]);
            mma_bf16_16816(acc[0], af, bfr);
            mma_bf16_16816(acc[1], af, bfr + 2);
        }
        __syncthreads();
    }

    // Fragment layout: c0,c1 at (row g, cols 2q, 2q+1), c2,c3 at row g+8.
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int t = 0; t < 2; ++t) {
        const int col = col0 + warp * 16 + t * 8 + 2 * q;
        if (col >= N) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + g + 8 * h;
            if (row >= M) continue;
            bf16* p = c + (size_t)row * N + col;
            unsigned v;
            if (SCALED) {
                unsigned old = *reinterpret_cast<const unsigned*>(p);
                float t0 = round_bf16(acc[t][2 * h]), t1 = round_bf16(acc[t][2 * h + 1]);
                v = (unsigned)scaled_add_one(bf16_lo(old), t0, scale) | ((unsigned)scaled_add_one(bf16_hi(old), t1, scale) << 16);
            } else {
                v = pack_bf16(acc[t][2 * h], acc[t][2 * h + 1]);
            }
            *reinterpret_cast<unsigned*>(p) = v;
        }
    }
}

extern "C" __global__ void __launch_bounds__(128) dense_gemm_tc(const bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c,
                                                                 unsigned m, unsigned n, unsigned k) {
    tc_body<false>(a, b, c, m, n, k, 0.0f);
}

extern "C" __global__ void __launch_bounds__(128) dense_gemm_tc_scaled_acc(const bf16* __restrict__ a, const bf16* __restrict__ b,
                                                                            bf16* __restrict__ c, unsigned m, unsigned n, unsigned k,
                                                                            float scale) {
    tc_body<true>(a, b, c, m, n, k, scale);
}

// ---------------------------------------------------------------- pipelined 128x128 GEMM

// dense_gemm_bf16_pipelined: grid (ceil(N/128), ceil(M/128)), block 256.
// 8 warps as 2 (M) x 4 (N), each owning a 64x32 output (4 m16 x 4 n8 mma
// tiles, 64 f32 accumulators). K moves in 32-wide slices through a 3-stage
// cp.async ring: 3 x (128 + 128) rows x 64 bytes = 48 KiB, exactly the
// static shared-memory limit (the launcher cannot raise the dynamic limit),
// so rows are not padded; instead the four 16-byte chunks of each 64-byte
// row are XOR-swizzled with (row >> 1) & 3, which puts the eight rows one
// ldmatrix phase reads (two per 128-byte line) into eight distinct 4-bank
// groups. Two blocks fit per SM (registers capped at 128 by the launch
// bounds), so one block's epilogue and prologue overlap the other's mma.
#define PL_BM 128
#define PL_BN 128
#define PL_BK 32
#define PL_STAGES 3

__device__ __forceinline__ int pl_swz(int row, int chunk) { return row * PL_BK + ((chunk ^ ((row >> 1) & 3)) << 3); }

extern "C" __global__ void __launch_bounds__(256, 2) dense_gemm_bf16_pipelined(const bf16* __restrict__ a, const bf16* __restrict__ b,
                                                                                bf16* __restrict__ c, unsigned m, unsigned n, unsigned k) {
    __shared__ __align__(128) bf16 As[PL_STAGES][PL_BM * PL_BK];
    __shared__ __align__(128) bf16 Bs[PL_STAGES][PL_BN * PL_BK];
    const int M = m, N = n, K = k;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wm = warp >> 2, wn = warp & 3; // warp tile origin: rows 64*wm, cols 32*wn
    const int row0 = blockIdx.y * PL_BM, col0 = blockIdx.x * PL_BN;
    const bool fast = aligned16(a) && aligned16(b);
    const int KT = (K + PL_BK - 1) / PL_BK;

    // Each thread copies 2 chunks of A and 2 of B per slice: chunk index
    // tid + 256i -> row (idx >> 2), 16-byte chunk (idx & 3). The rows, their
    // bounds and the swizzled destinations are the same for every slice, so
    // they are computed once; a slice only adds k0.
    const bf16* ga[2];
    const bf16* gb[2];
    bool va[2], vb[2];
    int soff[2], kch[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int idx = tid + 256 * i, r = idx >> 2, ch = idx & 3;
        va[i] = row0 + r < M;
        vb[i] = col0 + r < N;
        ga[i] = a + (size_t)(va[i] ? row0 + r : 0) * K + ch * 8;
        gb[i] = b + (size_t)(vb[i] ? col0 + r : 0) * K + ch * 8;
        soff[i] = pl_swz(r, ch);
        kch[i] = ch * 8;
    }
    auto load = [&](int stage, int kt) {
        const int k0 = kt * PL_BK;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int kk = k0 + kch[i];
            const bool kin = kk < K, oka = kin && va[i], okb = kin && vb[i];
            if (fast) {
                // A zero-size copy reads nothing; its source is kept in bounds anyway.
                cp_async16(&As[stage][soff[i]], oka ? ga[i] + k0 : ga[i], oka ? 16 : 0);
                cp_async16(&Bs[stage][soff[i]], okb ? gb[i] + k0 : gb[i], okb ? 16 : 0);
            } else {
                *reinterpret_cast<uint4*>(&As[stage][soff[i]]) = load8_slow(ga[i] - kch[i], kk, K, va[i]);
                *reinterpret_cast<uint4*>(&Bs[stage][soff[i]]) = load8_slow(gb[i] - kch[i], kk, K, vb[i]);
            }
        }
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < PL_STAGES - 1; ++s) {
        if (s < KT) load(s, s);
        cp_async_commit();
    }

    // ldmatrix source rows for this lane: A x4 = (rows 0-15, chunk lane>>4);
    // B x4 = (n (lane&7) + 8*(lane>>4), chunk (lane>>3)&1).
    const int a_row = wm * 64 + (lane & 15), a_ch = lane >> 4;
    const int b_row = wn * 32 + (lane & 7) + ((lane >> 4) << 3), b_ch = (lane >> 3) & 1;

    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<PL_STAGES - 2>();
        __syncthreads(); // slice kt landed for all threads; slice kt-1's stage is free
        {
            const int nk = kt + PL_STAGES - 1;
            if (nk < KT) load(nk % PL_STAGES, nk);
            cp_async_commit();
        }
        const bf16* as = As[kt % PL_STAGES];
        const bf16* bs = Bs[kt % PL_STAGES];
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
            unsigned af[4][4], bfr[2][4];
#pragma unroll
            for (int i = 0; i < 4; ++i) ldmatrix_x4(af[i], as + pl_swz(a_row + 16 * i, 2 * ks + a_ch));
#pragma unroll
            for (int j = 0; j < 2; ++j) ldmatrix_x4(bfr[j], bs + pl_swz(b_row + 16 * j, 2 * ks + b_ch));
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) mma_bf16_16816(acc[i][j], af[i], &bfr[j >> 1][(j & 1) * 2]);
        }
    }
    cp_async_wait<0>();

    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + wm * 64 + 16 * i + g + 8 * h;
            if (row >= M) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int col = col0 + wn * 32 + 8 * j + 2 * q;
                if (col < N) *reinterpret_cast<unsigned*>(c + (size_t)row * N + col) = pack_bf16(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            }
        }
    }
}
