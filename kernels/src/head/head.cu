// The output head: logits over the tied table, argmax, option letters.
//
// lm_head kernels: one warp per vocabulary row, all m (<= 16) hidden rows
// accumulated at once in f32 registers, so each table byte is read from
// memory exactly once; the hidden rows (m x hdim bf16, small) are re-read
// through L1. The block covers ceil(vocab / gridDim.x) consecutive rows
// (4 with the launcher's grid of ceil(vocab/4) x 128 threads), so the
// kernel is correct for any grid and any multiple-of-32 block size.

#define HEAD_MAX_M 16
// Table loads in flight per lane per step: more where few accumulators leave registers free.
#define HEAD_UNROLL(M) ((M) <= 2 ? 4 : ((M) <= 4 ? 2 : 1))
// 128-thread blocks (launcher); at most 64 registers so 8 blocks (32 warps) fit per SM.
#define HEAD_BOUNDS __launch_bounds__(128, 8)

// Rows of the vocabulary this block owns: [*r0, *r1).
__device__ __forceinline__ void block_rows(int vocab, int* r0, int* r1) {
    const int per = (vocab + gridDim.x - 1) / gridDim.x;
    *r0 = min(vocab, (int)blockIdx.x * per);
    *r1 = min(vocab, *r0 + per);
}

// Warp-sums the m accumulators and lets lane i write row i's logit.
template <int M>
__device__ __forceinline__ void finish_row(float* out, const float* acc, int m, int vocab, int v, float scale, float softcap, bool nan_row) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < M; ++i) {
        if (i < m) {
            float s = warp_sum(acc[i]);
            if (lane == i) out[(size_t)i * vocab + v] = nan_row ? SY_NAN : softcap_f32(s * scale, softcap);
        }
    }
}

// 16 consecutive bf16 of hidden row i at element k, times 16 decoded table
// values, accumulated in order.
__device__ __forceinline__ float dot16(const bf16* hrow, const float* t) {
    const uint4 a = ld_nc16(hrow), b = ld_nc16(hrow + 8);
    float s = 0.0f;
    s = fmaf(bf16_lo(a.x), t[0], s);
    s = fmaf(bf16_hi(a.x), t[1], s);
    s = fmaf(bf16_lo(a.y), t[2], s);
    s = fmaf(bf16_hi(a.y), t[3], s);
    s = fmaf(bf16_lo(a.z), t[4], s);
    s = fmaf(bf16_hi(a.z), t[5], s);
    s = fmaf(bf16_lo(a.w), t[6], s);
    s = fmaf(bf16_hi(a.w), t[7], s);
    s = fmaf(bf16_lo(b.x), t[8], s);
    s = fmaf(bf16_hi(b.x), t[9], s);
    s = fmaf(bf16_lo(b.y), t[10], s);
    s = fmaf(bf16_hi(b.y), t[11], s);
    s = fmaf(bf16_lo(b.z), t[12], s);
    s = fmaf(bf16_hi(b.z), t[13], s);
    s = fmaf(bf16_lo(b.w), t[14], s);
    s = fmaf(bf16_hi(b.w), t[15], s);
    return s;
}

__device__ __forceinline__ float dot8(const bf16* hrow, const float* t) {
    const uint4 a = ld_nc16(hrow);
    float s = 0.0f;
    s = fmaf(bf16_lo(a.x), t[0], s);
    s = fmaf(bf16_hi(a.x), t[1], s);
    s = fmaf(bf16_lo(a.y), t[2], s);
    s = fmaf(bf16_hi(a.y), t[3], s);
    s = fmaf(bf16_lo(a.z), t[4], s);
    s = fmaf(bf16_hi(a.z), t[5], s);
    s = fmaf(bf16_lo(a.w), t[6], s);
    s = fmaf(bf16_hi(a.w), t[7], s);
    return s;
}

// ---------------------------------------------------------------- lm_head fp8

template <int M>
__device__ void lm_head_fp8_rows(float* out, const bf16* h, const u8* e8, const float* row_scale, int m, int vocab, int hdim, float softcap) {
    int r0, r1;
    block_rows(vocab, &r0, &r1);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    // 16-byte table chunks and 32-byte hidden chunks need these alignments.
    const bool vec = (hdim % 16) == 0 && aligned16(e8) && aligned16(h);
    for (int v = r0 + warp; v < r1; v += nwarps) {
        const u8* row = e8 + (size_t)v * hdim;
        float acc[M];
#pragma unroll
        for (int i = 0; i < M; ++i) acc[i] = 0.0f;
        bool nan_code = false;
        if (vec) {
            const int n = hdim / 16;
            for (int c0 = lane; c0 < n; c0 += 32 * HEAD_UNROLL(M)) {
                // All of this lane's loads for the step first, then the math.
                uint4 w[HEAD_UNROLL(M)];
#pragma unroll
                for (int u = 0; u < HEAD_UNROLL(M); ++u) {
                    const int c = c0 + 32 * u;
                    if (c < n) w[u] = ld_stream16(row + (size_t)c * 16);
                }
#pragma unroll
                for (int u = 0; u < HEAD_UNROLL(M); ++u) {
                    const int c = c0 + 32 * u;
                    if (c >= n) break;
                    nan_code |= e4m3x4_has_nan(w[u].x) | e4m3x4_has_nan(w[u].y) | e4m3x4_has_nan(w[u].z) | e4m3x4_has_nan(w[u].w);
                    float t[16];
#pragma unroll
                    for (int b = 0; b < 4; ++b) {
                        t[b] = e4m3_byte_nonan(w[u].x, b);
                        t[4 + b] = e4m3_byte_nonan(w[u].y, b);
                        t[8 + b] = e4m3_byte_nonan(w[u].z, b);
                        t[12 + b] = e4m3_byte_nonan(w[u].w, b);
                    }
#pragma unroll
                    for (int i = 0; i < M; ++i)
                        if (i < m) acc[i] += dot16(h + (size_t)i * hdim + (size_t)c * 16, t);
                }
            }
        } else {
            for (int k = lane; k < hdim; k += 32) {
                const float t = e4m3_to_f32(row[k]);
#pragma unroll
                for (int i = 0; i < M; ++i)
                    if (i < m) acc[i] = fmaf(bf16_to_f32(h[(size_t)i * hdim + k]), t, acc[i]);
            }
        }
        // A NaN code makes the whole dot NaN, as in the reference's decode-then-sum.
        const bool nan_row = __any_sync(0xffffffffu, nan_code);
        finish_row<M>(out, acc, m, vocab, v, row_scale[v], softcap, nan_row);
    }
}

extern "C" __global__ void HEAD_BOUNDS lm_head_logits_fp8(float* out, const bf16* h, const u8* e8, const float* row_scale, int m, int vocab, int hdim,
                                              float softcap) {
    if (m <= 1) lm_head_fp8_rows<1>(out, h, e8, row_scale, m, vocab, hdim, softcap);
    else if (m <= 2) lm_head_fp8_rows<2>(out, h, e8, row_scale, m, vocab, hdim, softcap);
    else if (m <= 4) lm_head_fp8_rows<4>(out, h, e8, row_scale, m, vocab, hdim, softcap);
    else if (m <= 8) lm_head_fp8_rows<8>(out, h, e8, row_scale, m, vocab, hdim, softcap);
    else lm_head_fp8_rows<HEAD_MAX_M>(out, h, e8, row_scale, min(m, HEAD_MAX_M), vocab, hdim, softcap);
}

// ---------------------------------------------------------------- lm_head bf16

template <int M>
__device__ void lm_head_bf16_rows(float* out, const bf16* h, const bf16* table, int m, int vocab, int hdim, float softcap) {
    int r0, r1;
    block_rows(vocab, &r0, &r1);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const bool vec = (hdim % 8) == 0 && aligned16(table) && aligned16(h);
    for (int v = r0 + warp; v < r1; v += nwarps) {
        const bf16* row = table + (size_t)v * hdim;
        float acc[M];
#pragma unroll
        for (int i = 0; i < M; ++i) acc[i] = 0.0f;
        if (vec) {
            const int n = hdim / 8;
            for (int c0 = lane; c0 < n; c0 += 32 * HEAD_UNROLL(M)) {
                uint4 w[HEAD_UNROLL(M)];
#pragma unroll
                for (int u = 0; u < HEAD_UNROLL(M); ++u) {
                    const int c = c0 + 32 * u;
                    if (c < n) w[u] = ld_stream16(row + (size_t)c * 8);
                }
#pragma unroll
                for (int u = 0; u < HEAD_UNROLL(M); ++u) {
                    const int c = c0 + 32 * u;
                    if (c >= n) break;
                    const float t[8] = {bf16_lo(w[u].x), bf16_hi(w[u].x), bf16_lo(w[u].y), bf16_hi(w[u].y),
                                        bf16_lo(w[u].z), bf16_hi(w[u].z), bf16_lo(w[u].w), bf16_hi(w[u].w)};
#pragma unroll
                    for (int i = 0; i < M; ++i)
                        if (i < m) acc[i] += dot8(h + (size_t)i * hdim + (size_t)c * 8, t);
                }
            }
        } else {
            for (int k = lane; k < hdim; k += 32) {
                const float t = bf16_to_f32(row[k]);
#pragma unroll
                for (int i = 0; i < M; ++i)
                    if (i < m) acc[i] = fmaf(bf16_to_f32(h[(size_t)i * hdim + k]), t, acc[i]);
            }
        }
        finish_row<M>(out, acc, m, vocab, v, 1.0f, softcap, false);
    }
}

extern "C" __global__ void HEAD_BOUNDS lm_head_logits_bf16(float* out, const bf16* h, const bf16* table, int m, int vocab, int hdim, float softcap) {
    if (m <= 1) lm_head_bf16_rows<1>(out, h, table, m, vocab, hdim, softcap);
    else if (m <= 2) lm_head_bf16_rows<2>(out, h, table, m, vocab, hdim, softcap);
    else if (m <= 4) lm_head_bf16_rows<4>(out, h, table, m, vocab, hdim, softcap);
    else if (m <= 8) lm_head_bf16_rows<8>(out, h, table, m, vocab, hdim, softcap);
    else lm_head_bf16_rows<HEAD_MAX_M>(out, h, table, min(m, HEAD_MAX_M), vocab, hdim, softcap);
}

// ---------------------------------------------------------------- argmax

#define ARGMAX_NONE 0x7fffffff
#define ARGMAX_UNROLL 8

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

// Launcher: grid [m], block 1024: one block per row.
extern "C" __global__ void __launch_bounds__(1024) argmax_rows(int* idx, float* val, const float* logits, int vocab, int ex0, int ex1) {
    __shared__ float sv[32];
    __shared__ int si[32];
    const int row = blockIdx.x;
    const float* l = logits + (size_t)row * vocab;
    float bv = -SY_INF;
    int bi = ARGMAX_NONE;
    // Scalar head up to 16-byte alignment, float4 body, scalar tail.
    int head = (int)((16u - ((unsigned)(unsigned long long)l & 15u)) & 15u) / 4;
    if (!aligned4(l)) head = vocab; // not even f32-aligned: all scalar
    head = min(head, vocab);
    for (int k = threadIdx.x; k < head; k += blockDim.x) argmax_consider(l[k], k, ex0, ex1, bv, bi);
    const int nvec = (vocab - head) / 4;
    const float4* body = reinterpret_cast<const float4*>(l + head);
    for (int base = threadIdx.x; base < nvec; base += ARGMAX_UNROLL * blockDim.x) {
        uint4 q[ARGMAX_UNROLL];
#pragma unroll
        for (int j = 0; j < ARGMAX_UNROLL; ++j) {
            const int c = base + j * blockDim.x;
            if (c < nvec) q[j] = ld_stream16(body + c);
        }
#pragma unroll
        for (int j = 0; j < ARGMAX_UNROLL; ++j) {
            const int c = base + j * blockDim.x;
            if (c < nvec) {
                const int k = head + c * 4;
                argmax_consider(__uint_as_float(q[j].x), k, ex0, ex1, bv, bi);
                argmax_consider(__uint_as_float(q[j].y), k + 1, ex0, ex1, bv, bi);
                argmax_consider(__uint_as_float(q[j].z), k + 2, ex0, ex1, bv, bi);
                argmax_consider(__uint_as_float(q[j].w), k + 3, ex0, ex1, bv, bi);
            }
        }
    }
    for (int k = head + nvec * 4 + threadIdx.x; k < vocab; k += blockDim.x) argmax_consider(l[k], k, ex0, ex1, bv, bi);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        argmax_take(ov, oi, bv, bi);
    }
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
        if (lane == 0) {
            const bool none = bi == ARGMAX_NONE;
            idx[row] = none ? -1 : bi;
            val[row] = none ? -SY_INF : bv;
        }
    }
}

// ---------------------------------------------------------------- letters

// Launcher: grid [rows], block 256: one block per hidden row, one warp per
// label (labels are few; this is not a bandwidth kernel).
extern "C" __global__ void letter_logits_fp8(float* out, const bf16* hidden, const u8* e8, const float* row_scale, const int* label_ids, int n_labels,
                                             int hdim, int vocab, float softcap) {
    const int r = blockIdx.x;
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
