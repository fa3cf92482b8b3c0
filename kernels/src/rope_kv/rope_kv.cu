// q/k/v RMSNorm + rotate-half RoPE + paged KV write.
//
// Launcher: grid [rows, nh + nkv], block clamp(ceil32(hd/2), 32, 256): one
// block per (row, head). A thread owns matching chunks of the two halves
// (elements [cV, cV+V) and [hd/2 + cV, ...)), so rotate-half pairs meet in
// registers; the chunk is kept in registers between the statistics and the
// store pass. V is 8 (16-byte accesses) when hd % 16 == 0 and the pointers
// allow it, else 2, else 1. Any block size works (extra chunks are re-read).

// Normalises one head vector `src` [hd] into `dst`, optionally weighted and
// rotated with the (cos, sin) pairs `cs` [hd/2][2]. `bad`: write NaN only.
template <int V>
__device__ void prep_head(bf16* dst, const bf16* src, const bf16* w, const float* cs, int hd, float eps, bool rope, float* red) {
    const int half = hd / 2, n = half / V;
    const int t = threadIdx.x;
    BfVec<V> lo0, hi0;
    float ss = 0.0f;
    if (t < n) {
        vload<V>(lo0, src + t * V);
        vload<V>(hi0, src + half + t * V);
#pragma unroll
        for (int i = 0; i < V; ++i) {
            float a = vget<V>(lo0, i), b = vget<V>(hi0, i);
            ss += a * a + b * b;
        }
    }
    for (int c = t + blockDim.x; c < n; c += blockDim.x) {
        BfVec<V> lo, hi;
        vload<V>(lo, src + c * V);
        vload<V>(hi, src + half + c * V);
#pragma unroll
        for (int i = 0; i < V; ++i) {
            float a = vget<V>(lo, i), b = vget<V>(hi, i);
            ss += a * a + b * b;
        }
    }
    const float inv = 1.0f / sqrtf(block_sum(ss, red) / (float)hd + eps);

    for (int c = t; c < n; c += blockDim.x) {
        BfVec<V> lo, hi;
        if (c == t) {
            lo = lo0;
            hi = hi0;
        } else {
            vload<V>(lo, src + c * V);
            vload<V>(hi, src + half + c * V);
        }
        float wl[V], wh[V];
        if (w) {
            BfVec<V> a, b;
            vload<V>(a, w + c * V);
            vload<V>(b, w + half + c * V);
#pragma unroll
            for (int i = 0; i < V; ++i) {
                wl[i] = vget<V>(a, i);
                wh[i] = vget<V>(b, i);
            }
        } else {
#pragma unroll
            for (int i = 0; i < V; ++i) wl[i] = wh[i] = 1.0f;
        }
        float ol[V], oh[V];
#pragma unroll
        for (int i = 0; i < V; ++i) {
            // The normalised values are rounded to bf16 before RoPE (contract).
            const float a = round_bf16(vget<V>(lo, i) * inv * wl[i]);
            const float b = round_bf16(vget<V>(hi, i) * inv * wh[i]);
            if (rope) {
                const float2 p = reinterpret_cast<const float2*>(cs)[c * V + i];
                ol[i] = a * p.x - b * p.y;
                oh[i] = b * p.x + a * p.y;
            } else {
                ol[i] = a;
                oh[i] = b;
            }
        }
        BfVec<V> sl, sh;
        vpack<V>(sl, ol);
        vpack<V>(sh, oh);
        vstore<V>(dst + c * V, sl);
        vstore<V>(dst + half + c * V, sh);
    }
}

__device__ __forceinline__ void nan_head(bf16* dst, int hd) {
    for (int k = threadIdx.x; k < hd; k += blockDim.x) dst[k] = SY_NAN_BF16;
}

__device__ __forceinline__ void run_head(bf16* dst, const bf16* src, const bf16* w, const float* cs, int hd, float eps, bool rope, float* red) {
    const int half = hd / 2;
    // cos_sin pairs are read as float2: 8-byte alignment (else scalar path).
    const bool ok8 = (half % 8) == 0 && aligned16(dst) && aligned16(src) && (!w || aligned16(w)) && aligned8(cs);
    const bool ok2 = (half % 2) == 0 && aligned4(dst) && aligned4(src) && (!w || aligned4(w)) && aligned8(cs);
    if (ok8) prep_head<8>(dst, src, w, cs, hd, eps, rope, red);
    else if (ok2) prep_head<2>(dst, src, w, cs, hd, eps, rope, red);
    else if (aligned8(cs)) prep_head<1>(dst, src, w, cs, hd, eps, rope, red);
    else {
        // cos_sin not even 8-byte aligned: copy the row's table to shared memory first.
        __shared__ float2 cs_copy[256];
        for (int k = threadIdx.x; k < half; k += blockDim.x) cs_copy[k] = make_float2(cs[2 * k], cs[2 * k + 1]);
        __syncthreads();
        prep_head<1>(dst, src, w, reinterpret_cast<const float*>(cs_copy), hd, eps, rope, red);
    }
}

extern "C" __global__ void __launch_bounds__(256) qkv_prep_bf16(bf16* q_out, bf16* k_pool, bf16* v_pool, const bf16* q_raw, const bf16* k_raw,
                                                                const bf16* v_raw, const bf16* q_norm, const bf16* k_norm, const float* cos_sin,
                                                                const int* pos, const int* slot, int nh, int nkv, int hd, float eps, const int* pmap,
                                                                int src_rows, int max_pos, int num_slots) {
    __shared__ float red[32];
    const int r = blockIdx.x, head = blockIdx.y;
    if (head >= nh + nkv) return;
    const int s = pmap ? pmap[r] : r;
    const int p = pos[r];
    const bool bad = s < 0 || s >= src_rows || p < 0 || p >= max_pos;
    const float* cs = cos_sin + (size_t)(bad ? 0 : p) * hd;
    if (head < nh) {
        bf16* dst = q_out + ((size_t)r * nh + head) * hd;
        if (bad) nan_head(dst, hd);
        else run_head(dst, q_raw + ((size_t)s * nh + head) * hd, q_norm, cs, hd, eps, true, red);
        return;
    }
    const int j = head - nh;
    const int sl = slot[r];
    if (sl < 0 || sl >= num_slots) return; // padding row: no KV write
    const size_t d = ((size_t)sl * nkv + j) * hd;
    if (bad) {
        nan_head(k_pool + d, hd);
        nan_head(v_pool + d, hd);
        return;
    }
    const size_t o = ((size_t)s * nkv + j) * hd;
    run_head(k_pool + d, k_raw + o, k_norm, cs, hd, eps, true, red);
    run_head(v_pool + d, v_raw + o, nullptr, cs, hd, eps, false, red);
}
