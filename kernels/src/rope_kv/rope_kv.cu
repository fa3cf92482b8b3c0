// q/k/v RMSNorm + rotate-half RoPE + paged KV write.
//
// Launcher: grid [rows, nh + nkv], block clamp(ceil32(hd/2), 32, 256): one
// block per (row, head); a KV block does that head's K and V together.
// Blocks are tiny (one head vector), so the kernel is latency-bound, not
// bandwidth-bound: it keeps the chain of dependent memory round trips short.
// The per-row indices (pos, pmap, slot) are loaded together; then every
// input the thread needs (both halves of its chunk of each vector, the
// weights, the (cos, sin) pairs) is loaded in one batch before the single
// block reduction, and kept in registers for the store.
//
// A thread owns matching chunks of the two halves (elements [cV, cV+V) and
// [hd/2 + cV, ...)), so rotate-half pairs meet in registers. V is 2
// (4-byte accesses: a warp still moves 128 contiguous bytes, and the small
// per-thread state keeps registers low for residency) when hd % 4 == 0 and
// the pointers allow it, else 1. Any block size works: chunks beyond the
// first per thread are re-read in the store pass.

// Sums two values over the block at once; every thread gets both.
__device__ __forceinline__ float2 block_sum2(float a, float b, float2* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    a = warp_sum(a);
    b = warp_sum(b);
    __syncthreads();
    if (lane == 0) scratch[warp] = make_float2(a, b);
    __syncthreads();
    float2 v = lane < nwarps ? scratch[lane] : make_float2(0.0f, 0.0f);
    return make_float2(warp_sum(v.x), warp_sum(v.y));
}

// One thread's chunk of one head vector: both halves.
template <int V>
struct Halves {
    BfVec<V> lo, hi;
};

template <int V>
__device__ __forceinline__ void load_halves(Halves<V>& h, const bf16* src, int half, int c) {
    vload<V>(h.lo, src + c * V);
    vload<V>(h.hi, src + half + c * V);
}

template <int V>
__device__ __forceinline__ float halves_sumsq(const Halves<V>& h) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
        float a = vget<V>(h.lo, i), b = vget<V>(h.hi, i);
        s += a * a + b * b;
    }
    return s;
}

template <int V>
__device__ __forceinline__ void load_cs(float2* p, const float* cs, int c) {
    const float2* q = reinterpret_cast<const float2*>(cs) + c * V;
#pragma unroll
    for (int i = 0; i < V; ++i) p[i] = q[i];
}

// Normalise (weight w may be null), round to bf16, optionally rotate, store.
template <int V>
__device__ __forceinline__ void emit(bf16* dst, const Halves<V>& x, const Halves<V>* w, const float2* cs, float inv, int half, int c) {
    float ol[V], oh[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
        const float wl = w ? vget<V>(w->lo, i) : 1.0f;
        const float wh = w ? vget<V>(w->hi, i) : 1.0f;
        // The normalised values are rounded to bf16 before RoPE (contract).
        const float a = round_bf16(vget<V>(x.lo, i) * inv * wl);
        const float b = round_bf16(vget<V>(x.hi, i) * inv * wh);
        if (cs) {
            ol[i] = a * cs[i].x - b * cs[i].y;
            oh[i] = b * cs[i].x + a * cs[i].y;
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

// Vector 0: `src0` -> `dst0`, weighted by `w0` (may be null) and rotated.
// Vector 1 (when `dst1` is non-null): `src1` -> `dst1`, unweighted, not rotated.
template <int V>
__device__ void prep(bf16* dst0, const bf16* src0, const bf16* w0, bf16* dst1, const bf16* src1, const float* cs, int hd, float eps,
                     float2* scratch) {
    const int half = hd / 2, n = half / V, t = threadIdx.x;
    const bool two = dst1 != nullptr;
    Halves<V> x0, x1, w;
    float2 c0[V];
    float s0 = 0.0f, s1 = 0.0f;
    if (t < n) {
        load_halves<V>(x0, src0, half, t);
        if (two) load_halves<V>(x1, src1, half, t);
        if (w0) load_halves<V>(w, w0, half, t);
        load_cs<V>(c0, cs, t);
        s0 = halves_sumsq<V>(x0);
        if (two) s1 = halves_sumsq<V>(x1);
    }
    for (int c = t + blockDim.x; c < n; c += blockDim.x) {
        Halves<V> y;
        load_halves<V>(y, src0, half, c);
        s0 += halves_sumsq<V>(y);
        if (two) {
            load_halves<V>(y, src1, half, c);
            s1 += halves_sumsq<V>(y);
        }
    }
    const float2 tot = block_sum2(s0, s1, scratch);
    const float inv0 = 1.0f / sqrtf(tot.x / (float)hd + eps);
    const float inv1 = 1.0f / sqrtf(tot.y / (float)hd + eps);
    if (t < n) {
        emit<V>(dst0, x0, w0 ? &w : nullptr, c0, inv0, half, t);
        if (two) emit<V>(dst1, x1, nullptr, nullptr, inv1, half, t);
    }
    for (int c = t + blockDim.x; c < n; c += blockDim.x) {
        Halves<V> y, wy;
        float2 cy[V];
        load_halves<V>(y, src0, half, c);
        if (w0) load_halves<V>(wy, w0, half, c);
        load_cs<V>(cy, cs, c);
        emit<V>(dst0, y, w0 ? &wy : nullptr, cy, inv0, half, c);
        if (two) {
            load_halves<V>(y, src1, half, c);
            emit<V>(dst1, y, nullptr, nullptr, inv1, half, c);
        }
    }
}

__device__ __forceinline__ void nan_head(bf16* dst, int hd) {
    for (int k = threadIdx.x; k < hd; k += blockDim.x) dst[k] = SY_NAN_BF16;
}

__device__ __forceinline__ bool ok_align(const void* p, int bytes) { return !p || (((unsigned long long)p) & (unsigned long long)(bytes - 1)) == 0ull; }

__device__ void run(bf16* dst0, const bf16* src0, const bf16* w0, bf16* dst1, const bf16* src1, const float* cs, int hd, float eps, float2* scratch) {
    const int half = hd / 2;
    // (cos, sin) pairs are read as float2: 8-byte alignment, else a shared copy.
    const bool cs8 = ok_align(cs, 8);
    if ((half % 2) == 0 && cs8 && ok_align(dst0, 4) && ok_align(src0, 4) && ok_align(w0, 4) && ok_align(dst1, 4) && ok_align(src1, 4)) {
        prep<2>(dst0, src0, w0, dst1, src1, cs, hd, eps, scratch);
    } else if (cs8) {
        prep<1>(dst0, src0, w0, dst1, src1, cs, hd, eps, scratch);
    } else {
        __shared__ float2 cs_copy[256]; // hd <= 512 (launcher)
        for (int k = threadIdx.x; k < half; k += blockDim.x) cs_copy[k] = make_float2(cs[2 * k], cs[2 * k + 1]);
        __syncthreads();
        prep<1>(dst0, src0, w0, dst1, src1, reinterpret_cast<const float*>(cs_copy), hd, eps, scratch);
    }
}

// At most 32 registers: tiny blocks are latency-bound, so residency (up to
// 32 blocks per SM) is what sets throughput.
extern "C" __global__ void __launch_bounds__(256, 8) qkv_prep_bf16(bf16* q_out, bf16* k_pool, bf16* v_pool, const bf16* q_raw, const bf16* k_raw,
                                                                const bf16* v_raw, const bf16* q_norm, const bf16* k_norm, const float* cos_sin,
                                                                const int* pos, const int* slot, int nh, int nkv, int hd, float eps, const int* pmap,
                                                                int src_rows, int max_pos, int num_slots) {
    __shared__ float2 scratch[32];
    const int r = blockIdx.x, head = blockIdx.y;
    if (head >= nh + nkv) return;
    const bool is_q = head < nh;
    // Independent loads, issued together.
    const int s = pmap ? pmap[r] : r;
    const int p = pos[r];
    const int sl = is_q ? 0 : slot[r];
    const bool bad = s < 0 || s >= src_rows || p < 0 || p >= max_pos;
    const float* cs = cos_sin + (size_t)(bad ? 0 : p) * hd;
    if (is_q) {
        bf16* dst = q_out + ((size_t)r * nh + head) * hd;
        if (bad) nan_head(dst, hd);
        else run(dst, q_raw + ((size_t)s * nh + head) * hd, q_norm, nullptr, nullptr, cs, hd, eps, scratch);
        return;
    }
    if (sl < 0 || sl >= num_slots) return; // padding row: no KV write
    const int j = head - nh;
    const size_t d = ((size_t)sl * nkv + j) * hd;
    if (bad) {
        nan_head(k_pool + d, hd);
        nan_head(v_pool + d, hd);
        return;
    }
    const size_t o = ((size_t)s * nkv + j) * hd;
    run(k_pool + d, k_raw + o, k_norm, v_pool + d, v_raw + o, cs, hd, eps, scratch);
}
