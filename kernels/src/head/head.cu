// Not launched as programmatic dependents (no `dependent-launch:` line):
// with nothing to load before sy_wait_prior(), early-launched blocks would
// only hold SM slots; their sy_allow_next() at the start lets a GEMV after
// them launch early and stream its weights meanwhile.
// The output head: logits over the tied table, argmax, option letters.
//
// lm_head kernels (plan: block 128, grid ceil(vocab / 4) at m = 1 and
// ceil(vocab / 128) at m >= 2). Block b owns the `per = ceil(vocab /
// gridDim.x)` consecutive rows starting at b * per; the kernels are correct
// for any grid and any multiple-of-32 block size.
//
// m = 1: one warp per owned row, each lane issuing all of its 16-byte table
// loads (up to HEAD_M1C, the whole 5376-byte row at 32 lanes) before any
// math; fp8 is decoded with the hardware e4m3x2 conversion (a few
// instructions per byte, so decode stays under the memory time).
//
// m >= 2: tensor cores. mma.m16n8k16 with A = the m hidden rows (bf16,
// rows >= m zero) and B = 8 table rows (fp8 decoded exactly to bf16; e4m3
// values are exact in bf16), f32 accumulation; row_scale is applied after
// the dot. A warp owns 32 table rows (4 n-tiles) and walks k, so each
// hidden fragment it loads serves 32 rows: the hidden rows are re-read once
// per 32 table rows, from L1. A block owning fewer rows than its warps
// cover in one pass (a grid of 4-row blocks) cannot amortise that, so
// consecutive blocks are merged: only every Q-th block works, on the rows of
// Q blocks (Q = warps * 32 / per), and the others exit at once (the plan's
// grid of 128-row blocks gives Q = 1). Within a
// 16-k mma step the k order is permuted (lane c's 16 contiguous table
// bytes feed logical k {2c, 2c+1, 2c+8, 2c+9} of 4 successive steps); A is
// loaded with the same permutation, so the dot is unchanged up to f32
// summation order.

#define HEAD_MAX_M 16
// Chunks (16 bytes) per lane in flight for m = 1.
#define HEAD_M1C 12
// Table chunks per row per lane per step of the mma path (U groups of 4 * KC k).
#define HEAD_U 2
// Up to 256-thread blocks; at most 128 registers (16 warps per SM at 128 threads).
#define HEAD_BOUNDS __launch_bounds__(256, 2)

// Table element types: k values per 16-byte chunk.
struct Fp8Table {
    typedef u8 T;
    static constexpr int KC = 16;
};
struct Bf16Table {
    typedef bf16 T;
    static constexpr int KC = 8;
};

__device__ __forceinline__ uint4 zero4() { return make_uint4(0u, 0u, 0u, 0u); }

// KC elements of a table row at k, zero past hdim. `full`: the whole chunk
// is inside and 16-byte aligned; `fast`: rows are 16-byte aligned and hdim
// is a multiple of KC, so a chunk is either inside or past the end.
__device__ __forceinline__ uint4 load_table(const u8* row, int k, int hdim, bool fast, bool full) {
    if (full) return ld_stream16(row + k);
    if (fast) return k < hdim ? ld_stream16(row + k) : zero4();
    unsigned w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int e = 0; e < 16; ++e)
        if (k + e < hdim) w[e >> 2] |= (unsigned)row[k + e] << (8 * (e & 3));
    return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ uint4 load_table(const bf16* row, int k, int hdim, bool fast, bool full) {
    if (full) return ld_stream16(row + k);
    if (fast) return k < hdim ? ld_stream16(row + k) : zero4();
    unsigned w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int e = 0; e < 8; ++e)
        if (k + e < hdim) w[e >> 1] |= (unsigned)row[k + e] << (16 * (e & 1));
    return make_uint4(w[0], w[1], w[2], w[3]);
}
// 8 bf16 of a hidden row at k, zero past hdim (hdim % 8 == 0: whole chunks).
__device__ __forceinline__ uint4 load_hidden(const bf16* hr, int k, int hdim, bool vec) {
    if (k >= hdim) return zero4();
    if (vec) return ld_nc16(hr + k);
    unsigned w[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) w[e] = (unsigned)hr[k + 2 * e] | ((unsigned)hr[k + 2 * e + 1] << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// ---------------------------------------------------------------- m = 1

// Σ over one 16-byte table chunk at element k of the hidden row.
__device__ __forceinline__ void dot_chunk(float* acc, const uint4 t, const bf16* hk, const u8*) {
    const uint4 a = ld_nc16(hk), b = ld_nc16(hk + 8);
    const unsigned tw[4] = {t.x, t.y, t.z, t.w};
    const unsigned hw[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        float f[4];
        e4m3x4_to_f32(tw[q], f);
        acc[q] = fmaf(bf16_lo(hw[2 * q]), f[0], acc[q]);
        acc[q] = fmaf(bf16_hi(hw[2 * q]), f[1], acc[q]);
        acc[q] = fmaf(bf16_lo(hw[2 * q + 1]), f[2], acc[q]);
        acc[q] = fmaf(bf16_hi(hw[2 * q + 1]), f[3], acc[q]);
    }
}
__device__ __forceinline__ void dot_chunk(float* acc, const uint4 t, const bf16* hk, const bf16*) {
    const uint4 a = ld_nc16(hk);
    const unsigned tw[4] = {t.x, t.y, t.z, t.w};
    const unsigned hw[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        acc[q] = fmaf(bf16_lo(hw[q]), bf16_lo(tw[q]), acc[q]);
        acc[q] = fmaf(bf16_hi(hw[q]), bf16_hi(tw[q]), acc[q]);
    }
}
__device__ __forceinline__ float decode1(const u8* row, int k) { return e4m3_to_f32(row[k]); }
__device__ __forceinline__ float decode1(const bf16* row, int k) { return bf16_to_f32(row[k]); }

template <class TT>
__device__ void head_m1(float* out, const bf16* h, const typename TT::T* table, const float* row_scale, int vocab, int hdim, float softcap) {
    constexpr int KC = TT::KC;
    const int per = (vocab + gridDim.x - 1) / gridDim.x;
    const int r0 = min(vocab, (int)blockIdx.x * per), r1 = min(vocab, r0 + per);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const bool vec = (hdim % KC) == 0 && aligned16(table) && aligned16(h);
    for (int v = r0 + warp; v < r1; v += nwarps) {
        const typename TT::T* row = table + (size_t)v * hdim;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (vec) {
            const int n = hdim / KC;
            for (int c0 = 0; c0 < n; c0 += 32 * HEAD_M1C) {
                uint4 w[HEAD_M1C];
#pragma unroll
                for (int j = 0; j < HEAD_M1C; ++j) {
                    const int c = c0 + lane + 32 * j;
                    if (c < n) w[j] = ld_stream16(row + (size_t)c * KC);
                }
#pragma unroll
                for (int j = 0; j < HEAD_M1C; ++j) {
                    const int c = c0 + lane + 32 * j;
                    if (c < n) dot_chunk(acc, w[j], h + (size_t)c * KC, row);
                }
            }
        } else {
            for (int k = lane; k < hdim; k += 32) acc[0] = fmaf(bf16_to_f32(h[k]), decode1(row, k), acc[0]);
        }
        const float s = warp_sum((acc[0] + acc[1]) + (acc[2] + acc[3]));
        if (lane == 0) out[v] = softcap_f32(s * (row_scale ? row_scale[v] : 1.0f), softcap);
    }
}

// ---------------------------------------------------------------- m >= 2 (tensor cores)

// The 16 e4m3 codes of a lane's table chunk as 8 packed bf16 pairs (b[2s],
// b[2s + 1] = the B fragments of mma step s), exactly. The hardware
// e4m3x2 -> f16x2 conversion does the exponent and subnormal work (every
// e4m3 value is a normal f16 or zero); f16 -> bf16 is then bit arithmetic:
// the f16 bits shifted right by 3 (sign cleared) read as a bf16 of the same
// mantissa and 2^-112 times the value, so one bf16x2 multiply by 2^112
// (exact: a power of two, no overflow, no subnormal) and the sign put back
// finish it. Two conversions for four codes where the f16 -> f32 -> bf16 path
// took eight: the conversion pipe (16 a clock an SM) bounded that path at
// m = 16 (68% of copy). A chunk holding a NaN code (0x7f / 0xff, whose f16
// NaN the bit arithmetic would turn into a number) takes that exact
// conversion path instead, so NaN still reaches the mma.
__device__ __forceinline__ unsigned f16x2_to_bf16x2(unsigned x) {
    const unsigned t = ((x >> 3) & 0x0fff0fffu) | (x & 0x80008000u);
    unsigned r;
    // 2^112 = bf16 0x7780; adding -0 keeps the product exact and its sign.
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(t), "r"(0x77807780u), "r"(0x80008000u));
    return r;
}
__device__ __forceinline__ void e4m3x4_to_bf16x4_fast(unsigned w, unsigned* lo, unsigned* hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned d0, d1;
    asm("{\n\t.reg .b16 a, b;\n\tmov.b32 {a, b}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, a;\n\tcvt.rn.f16x2.e4m3x2 %1, b;\n\t}" : "=r"(d0), "=r"(d1) : "r"(w));
    *lo = f16x2_to_bf16x2(d0);
    *hi = f16x2_to_bf16x2(d1);
#else
    e4m3x4_to_bf16x4(w, lo, hi);
#endif
}
__device__ __forceinline__ void b_frags(const uint4 t, const u8*, unsigned (&b)[8]) {
    const unsigned w[4] = {t.x, t.y, t.z, t.w};
    const bool nan = e4m3x4_has_nan(t.x) | e4m3x4_has_nan(t.y) | e4m3x4_has_nan(t.z) | e4m3x4_has_nan(t.w);
    if (nan) {
#pragma unroll
        for (int s = 0; s < 4; ++s) e4m3x4_to_bf16x4(w[s], &b[2 * s], &b[2 * s + 1]);
    } else {
#pragma unroll
        for (int s = 0; s < 4; ++s) e4m3x4_to_bf16x4_fast(w[s], &b[2 * s], &b[2 * s + 1]);
    }
}
__device__ __forceinline__ void b_frags(const uint4 t, const bf16*, unsigned (&b)[8]) {
    b[0] = t.x;
    b[1] = t.y;
    b[2] = t.z;
    b[3] = t.w;
}

template <class TT>
__device__ void head_mma(float* out, const bf16* h, const typename TT::T* table, const float* row_scale, int m, int vocab, int hdim, float softcap) {
    typedef typename TT::T T;
    constexpr int KC = TT::KC, GROUP = 4 * KC, STEP = GROUP * HEAD_U, NQ = KC / 8; // NQ: 16-byte hidden loads per chunk
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int per = (vocab + gridDim.x - 1) / gridDim.x;
    const int round = nwarps * 32;
    const int q = max(1, round / max(per, 1));
    if (blockIdx.x % q) return; // merged into the block q-aligned below it
    const int r0 = min(vocab, (int)blockIdx.x * per);
    const int r1 = (int)min((long long)vocab, ((long long)blockIdx.x + q) * per);
    const int g = lane >> 2, c = lane & 3;
    const bool fast = (hdim % KC) == 0 && aligned16(table) && aligned16(h);
    const bool hvec = aligned16(h);
    const bool hv0 = g < m, hv1 = g + 8 < m;
    const bf16* h0 = h + (size_t)(hv0 ? g : 0) * hdim;
    const bf16* h1 = h + (size_t)(hv1 ? g + 8 : 0) * hdim;
    for (int v0 = r0 + warp * 32; v0 < r1; v0 += round) {
        float acc[4][4];
        bool ok[4];
        const T* rows[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const int v = v0 + 8 * t + g;
            ok[t] = v < r1;
            rows[t] = table + (size_t)(ok[t] ? v : r0) * hdim;
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[t][e] = 0.0f;
        }
        for (int k0 = 0; k0 < hdim; k0 += STEP) {
            const bool full = fast && k0 + STEP <= hdim;
            uint4 tw[4][HEAD_U];
#pragma unroll
            for (int t = 0; t < 4; ++t)
#pragma unroll
                for (int u = 0; u < HEAD_U; ++u) tw[t][u] = ok[t] ? load_table(rows[t], k0 + u * GROUP + c * KC, hdim, fast, full) : zero4();
#pragma unroll
            for (int u = 0; u < HEAD_U; ++u) {
                const int k = k0 + u * GROUP + c * KC;
                unsigned a0[4 * NQ], a1[4 * NQ];
#pragma unroll
                for (int j = 0; j < NQ; ++j) {
                    const uint4 x0 = hv0 ? load_hidden(h0, k + 8 * j, hdim, hvec) : zero4();
                    const uint4 x1 = hv1 ? load_hidden(h1, k + 8 * j, hdim, hvec) : zero4();
                    a0[4 * j] = x0.x, a0[4 * j + 1] = x0.y, a0[4 * j + 2] = x0.z, a0[4 * j + 3] = x0.w;
                    a1[4 * j] = x1.x, a1[4 * j + 1] = x1.y, a1[4 * j + 2] = x1.z, a1[4 * j + 3] = x1.w;
                }
#pragma unroll
                for (int t = 0; t < 4; ++t) {
                    unsigned b[8];
                    b_frags(tw[t][u], table, b);
#pragma unroll
                    for (int s = 0; s < KC / 4; ++s) mma16816_bf16_f32(acc[t], a0[2 * s], a1[2 * s], a0[2 * s + 1], a1[2 * s + 1], b[2 * s], b[2 * s + 1]);
                }
            }
        }
#pragma unroll
        for (int t = 0; t < 4; ++t) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = g + (e >= 2 ? 8 : 0);
                const int v = v0 + 8 * t + 2 * c + (e & 1);
                if (i < m && v < r1) out[(size_t)i * vocab + v] = softcap_f32(acc[t][e] * (row_scale ? row_scale[v] : 1.0f), softcap);
            }
        }
    }
}

extern "C" __global__ void HEAD_BOUNDS lm_head_logits_fp8(float* out, const bf16* h, const u8* e8, const float* row_scale, int m, int vocab, int hdim,
                                                          float softcap) {
    sy_allow_next(); // a dependent GEMV after this may start now (file header)
    sy_wait_prior();
    if (m <= 1) head_m1<Fp8Table>(out, h, e8, row_scale, vocab, hdim, softcap);
    else head_mma<Fp8Table>(out, h, e8, row_scale, min(m, HEAD_MAX_M), vocab, hdim, softcap);
}

extern "C" __global__ void HEAD_BOUNDS lm_head_logits_bf16(float* out, const bf16* h, const bf16* table, int m, int vocab, int hdim, float softcap) {
    sy_allow_next(); // a dependent GEMV after this may start now (file header)
    sy_wait_prior();
    if (m <= 1) head_m1<Bf16Table>(out, h, table, nullptr, vocab, hdim, softcap);
    else head_mma<Bf16Table>(out, h, table, nullptr, min(m, HEAD_MAX_M), vocab, hdim, softcap);
}

// ---------------------------------------------------------------- argmax

// Plan (head/mod.rs, `cuda_argmax_rows`): one launch, grid [m, S], block
// ARGMAX_THREADS. Block (i, s) reduces slice s of row i to its best (value,
// index) pair. S = argmax_slices(m, vocab) (below; the plan computes the
// same): about ARGMAX_TARGET_BLOCKS blocks in all (four an SM on an H200),
// each slice at least ARGMAX_MIN_SLICE logits, so every load of the launch
// is issued in the first wave, each thread holding ARGMAX_UNROLL 16-byte
// loads in registers. With S = 1 the block writes the row's result. With S >
// 1 it writes its pair to workspace pair [i * S + s], and the last of the
// row's S blocks to arrive (a per-row arrival counter, see below) reduces the
// row's S pairs and writes the result: one launch, where a second pass cost
// a launch of its own (H200, m = 16: 10.0 us a launch back to back against
// 10.4-10.7 for the two passes). The pairs compare by
// (value desc, index asc) and NaN never enters a pair, a total order, so
// the result depends neither on S nor on which block arrives last.
//
// Slices are cut in float4 units of the row's 16-byte-aligned body (a row
// starts at row * vocab floats, so its scalar head before the first aligned
// float4 goes to slice 0 and its scalar tail to slice S - 1).

#define ARGMAX_NONE 0x7fffffff
#define ARGMAX_UNROLL 8
#define ARGMAX_THREADS 256
// The slice rule of head/mod.rs (argmax_slices), whose constants a unit test there checks.
#define ARGMAX_TARGET_BLOCKS 512
#define ARGMAX_MIN_SLICE 2048
#define ARGMAX_MAX_SLICES 1024

// Arrival counters, one a row. A row is cut into S > 1 slices only when
// ceil(ARGMAX_TARGET_BLOCKS / m) > 1, i.e. m < ARGMAX_TARGET_BLOCKS, so rows
// below ARGMAX_TARGET_BLOCKS cover every row that uses one. Zero at module
// load; the last block of a row puts its counter back to zero, so every
// launch finds them zero (launches on the backend's one stream never overlap).
__device__ unsigned argmax_arrivals[ARGMAX_TARGET_BLOCKS];

__device__ __forceinline__ int argmax_slices(int m, int vocab) {
    const int want = (ARGMAX_TARGET_BLOCKS + m - 1) / max(m, 1);
    const int most = (vocab + ARGMAX_MIN_SLICE - 1) / ARGMAX_MIN_SLICE;
    return max(1, min(min(want, most), ARGMAX_MAX_SLICES));
}

// (v, i) beats (bv, bi): larger value, or equal value and lower index. NaN
// compares false both ways and never wins; "none" is (-inf, ARGMAX_NONE), so
// an eligible -inf still beats it.
__device__ __forceinline__ void argmax_take(float v, int i, float& bv, int& bi) {
    if (v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
    }
}
__device__ __forceinline__ void argmax_consider(float v, int i, int ex0, int ex1, float& bv, int& bi) {
    if (i != ex0 && i != ex1) argmax_take(v, i, bv, bi);
}

// The best pair over the block; valid in thread 0. sv / si hold 32 entries.
__device__ __forceinline__ void argmax_block(float& bv, int& bi, float* sv, int* si) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        argmax_take(ov, oi, bv, bi);
    }
    if (nwarps == 1) return;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (warp == 0) {
        bv = lane < nwarps ? sv[lane] : -SY_INF;
        bi = lane < nwarps ? si[lane] : ARGMAX_NONE;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            argmax_take(ov, oi, bv, bi);
        }
    }
}

__device__ __forceinline__ void argmax_write(int* idx, float* val, int row, float bv, int bi) {
    const bool none = bi == ARGMAX_NONE;
    idx[row] = none ? -1 : bi;
    val[row] = none ? -SY_INF : bv;
}

// The trailing workspace holds the (value, index) pairs, [m][S].
extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS) argmax_rows(int* idx, float* val, const float* logits, int m, int vocab, int ex0, int ex1,
                                                                       float2* workspace) {
    sy_allow_next(); // a dependent GEMV after this may start now (file header)
    sy_wait_prior();
    const int row = blockIdx.x, s = blockIdx.y, S = argmax_slices(m, vocab);
    if (row >= m || s >= S) return;
    __shared__ float sv[32];
    __shared__ int si[32];
    __shared__ bool last;
    const float* l = logits + (size_t)row * vocab;
    float bv = -SY_INF;
    int bi = ARGMAX_NONE;
    // Scalar head up to 16-byte alignment, float4 body, scalar tail.
    int head = (int)((16u - ((unsigned)(unsigned long long)l & 15u)) & 15u) / 4;
    if (!aligned4(l)) head = vocab; // not even f32-aligned: all scalar, all in slice 0
    head = min(head, vocab);
    const int nvec = (vocab - head) / 4;
    const int per = (nvec + S - 1) / S;
    const int c0 = min(nvec, s * per), c1 = min(nvec, c0 + per);
    if (s == 0)
        for (int k = threadIdx.x; k < head; k += blockDim.x) argmax_consider(l[k], k, ex0, ex1, bv, bi);
    const float4* body = reinterpret_cast<const float4*>(l + head);
    for (int base = c0 + threadIdx.x; base < c1; base += ARGMAX_UNROLL * blockDim.x) {
        uint4 q[ARGMAX_UNROLL];
#pragma unroll
        for (int j = 0; j < ARGMAX_UNROLL; ++j) {
            const int c = base + j * blockDim.x;
            if (c < c1) q[j] = ld_stream16(body + c);
        }
#pragma unroll
        for (int j = 0; j < ARGMAX_UNROLL; ++j) {
            const int c = base + j * blockDim.x;
            if (c < c1) {
                const int k = head + c * 4;
                argmax_consider(__uint_as_float(q[j].x), k, ex0, ex1, bv, bi);
                argmax_consider(__uint_as_float(q[j].y), k + 1, ex0, ex1, bv, bi);
                argmax_consider(__uint_as_float(q[j].z), k + 2, ex0, ex1, bv, bi);
                argmax_consider(__uint_as_float(q[j].w), k + 3, ex0, ex1, bv, bi);
            }
        }
    }
    if (s == S - 1)
        for (int k = head + nvec * 4 + threadIdx.x; k < vocab; k += blockDim.x) argmax_consider(l[k], k, ex0, ex1, bv, bi);
    argmax_block(bv, bi, sv, si);
    if (S == 1) {
        if (threadIdx.x == 0) argmax_write(idx, val, row, bv, bi);
        return;
    }
    float2* pairs = workspace + (size_t)row * S;
    if (threadIdx.x == 0) {
        pairs[s] = make_float2(bv, __int_as_float(bi));
        // Release: the pair is visible device-wide before the arrival that
        // may let another block read it.
        __threadfence();
        const unsigned arrived = atomicAdd(&argmax_arrivals[row], 1u);
        last = arrived == (unsigned)S - 1u;
        if (last) argmax_arrivals[row] = 0u; // every block of this launch has arrived
    }
    __syncthreads();
    if (!last) return;
    // Acquire: order the reads of the other blocks' pairs after the arrival
    // count that showed them written; __ldcg reads them from L2, not a stale L1.
    __threadfence();
    bv = -SY_INF;
    bi = ARGMAX_NONE;
    for (int t = threadIdx.x; t < S; t += blockDim.x) {
        const float2 p = __ldcg(pairs + t);
        argmax_take(p.x, __float_as_int(p.y), bv, bi);
    }
    __syncthreads(); // sv / si are reused by the second reduction
    argmax_block(bv, bi, sv, si);
    if (threadIdx.x == 0) argmax_write(idx, val, row, bv, bi);
}

// ---------------------------------------------------------------- letters

// Plan: grid [rows], block 256: one block per hidden row, one warp per
// label (labels are few; this is not a bandwidth kernel).
extern "C" __global__ void letter_logits_fp8(float* out, const bf16* hidden, const u8* e8, const float* row_scale, const int* label_ids, int rows,
                                             int n_labels, int hdim, int vocab, float softcap) {
    const int r = blockIdx.x;
    if (r >= rows) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const bf16* x = hidden + (size_t)r * hdim;
    for (int j = warp; j < n_labels; j += nwarps) {
        const int l = label_ids[j];
        if (l < 0 || l >= vocab) {
            if (lane == 0) out[(size_t)r * n_labels + j] = SY_NAN;
            continue;
        }
        const u8* row = e8 + (size_t)l * hdim;
        float acc = 0.0f;
        for (int k = lane; k < hdim; k += 32) acc = fmaf(bf16_to_f32(x[k]), e4m3_to_f32(row[k]), acc);
        acc = warp_sum(acc);
        if (lane == 0) out[(size_t)r * n_labels + j] = softcap_f32(acc * row_scale[l], softcap);
    }
}
