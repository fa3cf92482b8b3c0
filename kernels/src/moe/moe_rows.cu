// The row kernels on either side of an MoE layer's expert GEMMs: the
// weighted combine (moe_combine_bf16), and two that are each one launch
// where the separate kernels were two or three (every launch a fixed few
// microseconds of a decode step), with their arithmetic term for term.
// - moe_norm_gather_bf16: out[s] = bf16(rmsnorm(x[pair_of_slot[s] / k]; w)),
//   zero / NaN rows as moe_gather_bf16. Plan: grid (n), block T.
// - moe_combine_post_norms_bf16: out = bf16(m + bf16(rmsnorm(e; w_moe))),
//   e the weighted combine of the row's expert outputs and
//   m = bf16(rmsnorm(mlp; w_mlp)). Plan: grid (rows), block T, dynamic
//   shared memory 4·h bytes (the row's e and mlp words, staged between the
//   reductions).
// For both, T is a multiple of 32, at most 1024: a thread a unit of the row
// at decode.
// A unit is 16 bytes (8 columns) where h % 8 == 0 and every row pointer is
// 16-byte aligned, else one word (2 columns); the test is uniform, so the
// block takes one path.
//
// Like the other decode kernels the two let the launch after them start at
// once (sy_allow_next). Both are programmatic dependents: before
// sy_wait_prior() they only prefetch their norm weights into L2 (the
// gather's w, the combine's w_mlp and w_moe: constants, a few KiB, which a
// decode step otherwise fetches from DRAM after its reductions); every read
// of anything an earlier launch wrote, and every write, comes after the
// wait, on every path. On the H200 (bench-model --shape 26b-a4b, batch 1, 8
// alternating runs, moe_expert.cu's routing a dependent in both) 262.0
// against 259.9 tok/s as plain launches; batch 16 1252.3 against 1249.9.
// dependent-launch: moe_norm_gather_bf16 moe_combine_post_norms_bf16

template <int W>
__device__ __forceinline__ void ld_unit(unsigned (&w)[W], const bf16* row, int u) {
    if constexpr (W == 4) {
        const uint4 v = ld_nc16(row + (size_t)u * 8);
        w[0] = v.x;
        w[1] = v.y;
        w[2] = v.z;
        w[3] = v.w;
    } else {
        w[0] = __ldg(reinterpret_cast<const unsigned*>(row) + u);
    }
}

// Whether h allows 16-byte units and every pointer is 16-byte aligned.
__device__ __forceinline__ bool wide_rows(int h, size_t pointers_or) { return (h & 7) == 0 && (pointers_or & 15) == 0; }

// ---------------------------------------------------------------- norm + gather

template <int W>
__device__ __forceinline__ void norm_gather_row(bf16* __restrict__ out, const bf16* __restrict__ x, const bf16* __restrict__ w, int h,
                                                float eps, float* red) {
    const int units = h / (2 * W);
    // At decode (units <= T) a thread holds its one unit across the reduction;
    // a longer row is read again from L2 after it.
    unsigned xw[W];
    float ss = 0.0f;
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
        ld_unit<W>(xw, x, u);
#pragma unroll
        for (int i = 0; i < W; ++i) {
            ss = fmaf(bf16_lo(xw[i]), bf16_lo(xw[i]), ss);
            ss = fmaf(bf16_hi(xw[i]), bf16_hi(xw[i]), ss);
        }
    }
    const float inv = 1.0f / sqrtf(block_sum(ss, red) / (float)h + eps);
    unsigned* o = reinterpret_cast<unsigned*>(out);
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
        if (units > (int)blockDim.x) ld_unit<W>(xw, x, u);
        unsigned ww[W];
        ld_unit<W>(ww, w, u);
#pragma unroll
        for (int i = 0; i < W; ++i)
            o[u * W + i] = pack_bf16(bf16_lo(xw[i]) * inv * bf16_lo(ww[i]), bf16_hi(xw[i]) * inv * bf16_hi(ww[i]));
    }
}

extern "C" __global__ void __launch_bounds__(1024) moe_norm_gather_bf16(bf16* __restrict__ out, const bf16* __restrict__ x,
                                                                         const bf16* __restrict__ w, const int* __restrict__ pair_of_slot,
                                                                         int n, int k, int h, int rows, float eps) {
    sy_allow_next(); // the launch after this may start now (file header)
    sy_prefetch_l2(w, h);
    sy_wait_prior(); // pair_of_slot and x are earlier launches' outputs
    __shared__ float red[32];
    const int s = blockIdx.x;
    if (s >= n || h < 2 || (h & 1)) return;
    const int pair = pair_of_slot[s];
    // -1: an empty slot (zeros). Any other negative pair is tested explicitly:
    // C division truncates toward zero, so pair / k could land on token 0.
    const int tok = pair >= 0 && k > 0 ? pair / k : -1;
    bf16* o = out + (size_t)s * h;
    if (tok < 0 || tok >= rows) { // uniform over the block
        const unsigned fill = pair == -1 ? 0u : 0x7fc07fc0u;
        for (int c = threadIdx.x; c < h / 2; c += blockDim.x) reinterpret_cast<unsigned*>(o)[c] = fill;
        return;
    }
    const bf16* src = x + (size_t)tok * h;
    if (wide_rows(h, reinterpret_cast<size_t>(o) | reinterpret_cast<size_t>(src) | reinterpret_cast<size_t>(w))) {
        norm_gather_row<4>(o, src, w, h, eps, red);
    } else {
        norm_gather_row<1>(o, src, w, h, eps, red);
    }
}

// ---------------------------------------------------------------- combine

// Whether a token row's slots hold one other than −1 outside [0, n), which
// makes the row NaN; every thread reads the same slots, so it is uniform.
__device__ __forceinline__ bool combine_row_is_bad(const int* sop, int k, int n) {
    bool bad = false;
    for (int j = 0; j < k; ++j) {
        const int s = sop[j];
        if (s != -1 && (s < 0 || s >= n)) bad = true;
    }
    return bad;
}

// moe_combine_bf16: out[t] = bf16(Σ_j topk_w · y[slot]) alone (a
// tensor-parallel rank sums the ranks' rows before the norms).
// Plan: grid (rows, Y), block 256: the Y blocks of a row take its bf16
// pairs i = 256·y + thread, + 256·Y, ... (one pass each at decode sizes, so
// the k expert rows' loads of a row are spread over Y SMs instead of walked
// by one block). Sums in j order, f32, unfused.
extern "C" __global__ void __launch_bounds__(256) moe_combine_bf16(bf16* __restrict__ out, const bf16* __restrict__ y,
                                                                    const int* __restrict__ slot_of_pair, const float* __restrict__ topk_w,
                                                                    int rows, int k, int h, int n) {
    const int t = blockIdx.x;
    if (t >= rows) return;
    const int* sop = slot_of_pair + (size_t)t * k;
    const float* tw = topk_w + (size_t)t * k;
    const bool bad = combine_row_is_bad(sop, k, n);
    unsigned* o = reinterpret_cast<unsigned*>(out + (size_t)t * h);
    for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < h / 2; i += blockDim.x * gridDim.y) {
        if (bad) {
            o[i] = 0x7fc07fc0u;
            continue;
        }
        float a0 = 0.0f, a1 = 0.0f;
        for (int j = 0; j < k; ++j) {
            const int s = sop[j];
            if (s == -1) continue;
            const unsigned v = reinterpret_cast<const unsigned*>(y + (size_t)s * h)[i];
            const float wj = tw[j];
            a0 = __fadd_rn(a0, __fmul_rn(wj, bf16_lo(v)));
            a1 = __fadd_rn(a1, __fmul_rn(wj, bf16_hi(v)));
        }
        o[i] = pack_bf16(a0, a1);
    }
}

// ---------------------------------------------------------------- combine + post norms

// Up to this many expert rows' units are loaded before any is added, so a
// decode row's k = 8 loads are all in flight; the adds stay in j order.
#define COMBINE_LOADS 8

template <int W>
__device__ __forceinline__ void combine_post_norms_row(bf16* __restrict__ out, const bf16* __restrict__ mlp, const bf16* __restrict__ y,
                                                       const int* __restrict__ sop, const float* __restrict__ tw,
                                                       const bf16* __restrict__ w_mlp, const bf16* __restrict__ w_moe, int k, int h,
                                                       float eps, unsigned* e_s, unsigned* m_s, float* red) {
    const int units = h / (2 * W);
    float ss_e = 0.0f, ss_m = 0.0f;
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
        unsigned mw[W];
        ld_unit<W>(mw, mlp, u);
        float acc[2 * W];
#pragma unroll
        for (int i = 0; i < 2 * W; ++i) acc[i] = 0.0f;
        for (int j0 = 0; j0 < k; j0 += COMBINE_LOADS) {
            unsigned yw[COMBINE_LOADS][W];
#pragma unroll
            for (int jj = 0; jj < COMBINE_LOADS; ++jj) {
                const int j = j0 + jj;
                const int s = j < k ? sop[j] : -1;
                if (s >= 0) {
                    ld_unit<W>(yw[jj], y + (size_t)s * h, u);
                } else {
#pragma unroll
                    for (int i = 0; i < W; ++i) yw[jj][i] = 0u;
                }
            }
#pragma unroll
            for (int jj = 0; jj < COMBINE_LOADS; ++jj) {
                const int j = j0 + jj;
                if (j >= k || sop[j] == -1) continue;
                const float wj = tw[j];
#pragma unroll
                for (int i = 0; i < W; ++i) {
                    acc[2 * i] = __fadd_rn(acc[2 * i], __fmul_rn(wj, bf16_lo(yw[jj][i])));
                    acc[2 * i + 1] = __fadd_rn(acc[2 * i + 1], __fmul_rn(wj, bf16_hi(yw[jj][i])));
                }
            }
        }
#pragma unroll
        for (int i = 0; i < W; ++i) {
            const unsigned ew = pack_bf16(acc[2 * i], acc[2 * i + 1]);
            e_s[u * W + i] = ew;
            m_s[u * W + i] = mw[i];
            ss_e = fmaf(bf16_lo(ew), bf16_lo(ew), ss_e);
            ss_e = fmaf(bf16_hi(ew), bf16_hi(ew), ss_e);
            ss_m = fmaf(bf16_lo(mw[i]), bf16_lo(mw[i]), ss_m);
            ss_m = fmaf(bf16_hi(mw[i]), bf16_hi(mw[i]), ss_m);
        }
    }
    // block_sum syncs before it writes its scratch, so the staged words are
    // visible to every thread after the second call.
    const float inv_e = 1.0f / sqrtf(block_sum(ss_e, red) / (float)h + eps);
    const float inv_m = 1.0f / sqrtf(block_sum(ss_m, red) / (float)h + eps);
    unsigned* o = reinterpret_cast<unsigned*>(out);
    const unsigned* wm = reinterpret_cast<const unsigned*>(w_mlp);
    const unsigned* we = reinterpret_cast<const unsigned*>(w_moe);
    for (int c = threadIdx.x; c < h / 2; c += blockDim.x) {
        const unsigned ew = e_s[c], mw = m_s[c], a = __ldg(wm + c), b = __ldg(we + c);
        const float m0 = round_bf16(bf16_lo(mw) * inv_m * bf16_lo(a)), m1 = round_bf16(bf16_hi(mw) * inv_m * bf16_hi(a));
        const float t0 = round_bf16(bf16_lo(ew) * inv_e * bf16_lo(b)), t1 = round_bf16(bf16_hi(ew) * inv_e * bf16_hi(b));
        o[c] = pack_bf16(m0 + t0, m1 + t1);
    }
}

extern "C" __global__ void __launch_bounds__(1024) moe_combine_post_norms_bf16(bf16* __restrict__ out, const bf16* __restrict__ mlp,
                                                                                const bf16* __restrict__ y, const int* __restrict__ slot_of_pair,
                                                                                const float* __restrict__ topk_w, const bf16* __restrict__ w_mlp,
                                                                                const bf16* __restrict__ w_moe, int rows, int k, int h, int n,
                                                                                float eps) {
    sy_allow_next(); // the launch after this may start now (file header)
    sy_prefetch_l2(w_mlp, h);
    sy_prefetch_l2(w_moe, h);
    sy_wait_prior(); // y, mlp and the routing are earlier launches' outputs
    extern __shared__ __align__(16) unsigned combine_stage[];
    __shared__ float red[32];
    const int t = blockIdx.x;
    if (t >= rows || h < 2 || (h & 1)) return;
    const int* sop = slot_of_pair + (size_t)t * k;
    const float* tw = topk_w + (size_t)t * k;
    const bool bad = combine_row_is_bad(sop, k, n);
    const size_t off = (size_t)t * h;
    if (bad) { // uniform over the block: every thread read the same slots
        unsigned* o = reinterpret_cast<unsigned*>(out + off);
        for (int c = threadIdx.x; c < h / 2; c += blockDim.x) o[c] = 0x7fc07fc0u;
        return;
    }
    unsigned* e_s = combine_stage;
    unsigned* m_s = combine_stage + h / 2;
    if (wide_rows(h, reinterpret_cast<size_t>(out) | reinterpret_cast<size_t>(mlp) | reinterpret_cast<size_t>(y) |
                         reinterpret_cast<size_t>(w_mlp) | reinterpret_cast<size_t>(w_moe))) {
        combine_post_norms_row<4>(out + off, mlp + off, y, sop, tw, w_mlp, w_moe, k, h, eps, e_s, m_s, red);
    } else {
        combine_post_norms_row<1>(out + off, mlp + off, y, sop, tw, w_mlp, w_moe, k, h, eps, e_s, m_s, red);
    }
}
