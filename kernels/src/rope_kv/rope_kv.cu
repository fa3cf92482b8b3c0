// q/k/v RMSNorm + rotate-half RoPE + paged KV write.
//
// Plan: grid [rows, nh + nkv], block clamp(ceil32(hd/8), 32, 256): one
// block per (row, head); a KV block does that head's K and V together.
// Blocks are tiny (one head vector), so the kernel is latency-bound, not
// bandwidth-bound: it keeps the chain of dependent memory round trips short.
// Measured on the H200 (4096 rows, 32 + 16 heads, hd 256, 196608 blocks):
// 0.146 ms = 44% of copy with 32-thread blocks; the same grid at hd 8 (almost
// no data) takes 0.121 ms, and 65536 near-empty blocks take 0.042 ms: the
// GPU dispatches ~1.6 blocks per ns, so this grid cannot go below ~0.12 ms
// (53% of copy). Reaching 70% needs fewer blocks: grid [rows] with one
// block per token looping over its heads.
// The per-row indices (pos, pmap, slot) are loaded together; then every
// input the thread needs (both halves of its chunk of each vector, the
// weights, the (cos, sin) pairs) is loaded in one batch before the single
// block reduction, and kept in registers for the store.
//
// A thread owns matching chunks of the two halves (elements [cV, cV+V) and
// [hd/2 + cV, ...)), so rotate-half pairs meet in registers. V is 2
// (4-byte accesses: a warp still moves 128 contiguous bytes, and the small
// per-thread state keeps registers low for residency) when hd % 4 == 0 and
// the pointers allow it, 4 (8-byte) when the block is too small for one
// 2-wide chunk per thread, else 1. Any block size works: chunks beyond the
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

// 8-byte vectors (4 bf16), for one-warp blocks at hd 256.
template <> __device__ __forceinline__ void vload<4>(BfVec<4>& v, const bf16* p) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    v.w[0] = u.x;
    v.w[1] = u.y;
}
template <> __device__ __forceinline__ void vstore<4>(bf16* p, const BfVec<4>& v) { *reinterpret_cast<uint2*>(p) = make_uint2(v.w[0], v.w[1]); }

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
        s = fmaf(a, a, s);
        s = fmaf(b, b, s);
    }
    return s;
}

// V (cos, sin) pairs of chunk c; 16-byte loads where V >= 2 (the caller
// checked the table's 16-byte alignment and hd % 4 == 0).
template <int V>
struct Cs {
    float c[V], s[V];
};
template <int V>
__device__ __forceinline__ void load_cs(Cs<V>& p, const float* cs, int c) {
    if (V >= 2) {
        const float4* q = reinterpret_cast<const float4*>(cs) + c * (V / 2);
#pragma unroll
        for (int i = 0; i < V / 2; ++i) {
            const float4 f = q[i];
            p.c[2 * i] = f.x;
            p.s[2 * i] = f.y;
            p.c[(2 * i + 1) % V] = f.z;
            p.s[(2 * i + 1) % V] = f.w;
        }
    } else {
        const float2 f = reinterpret_cast<const float2*>(cs)[c];
        p.c[0] = f.x;
        p.s[0] = f.y;
    }
}

// Normalise (weight w may be null), round to bf16, optionally rotate, store;
// `bad` stores bf16 NaN instead (the row's position or source is invalid).
template <int V>
__device__ __forceinline__ void emit(bf16* dst, const Halves<V>& x, const Halves<V>& w, bool has_w, const Cs<V>& cs, bool rot, float inv, int half,
                                     int c, bool bad) {
    float ol[V], oh[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
        const float wl = has_w ? vget<V>(w.lo, i) : 1.0f;
        const float wh = has_w ? vget<V>(w.hi, i) : 1.0f;
        // The normalised values are rounded to bf16 before RoPE (contract).
        const float a = round_bf16(vget<V>(x.lo, i) * inv * wl);
        const float b = round_bf16(vget<V>(x.hi, i) * inv * wh);
        if (rot) {
            ol[i] = a * cs.c[i] - b * cs.s[i];
            oh[i] = b * cs.c[i] + a * cs.s[i];
        } else {
            ol[i] = a;
            oh[i] = b;
        }
    }
    BfVec<V> sl, sh;
    if (bad) {
        vnan<V>(sl);
        vnan<V>(sh);
    } else {
        vpack<V>(sl, ol);
        vpack<V>(sh, oh);
    }
    vstore<V>(dst + c * V, sl);
    vstore<V>(dst + half + c * V, sh);
}

// Sums two values over the block; one-warp blocks skip shared memory.
__device__ __forceinline__ float2 sum2(float a, float b, float2* scratch) {
    if (blockDim.x <= 32) return make_float2(warp_sum(a), warp_sum(b));
    return block_sum2(a, b, scratch);
}

// Vector 0: `src0` -> `dst0`, weighted by `w0` (may be null) and rotated.
// Vector 1 (when `dst1` is non-null): `src1` -> `dst1`, unweighted, not rotated.
// Every load is issued before the reduction; `store` false skips the stores
// (a padding row), `bad` stores NaN.
template <int V, bool LOOP>
__device__ __forceinline__ void prep(bf16* dst0, const bf16* src0, const bf16* w0, bf16* dst1, const bf16* src1, const float* cs, int hd, float eps,
                     float2* scratch, bool store, bool bad) {
    const int half = hd / 2, n = half / V, t = threadIdx.x;
    const bool two = dst1 != nullptr;
    Halves<V> x0, x1, w;
    Cs<V> c0;
    float s0 = 0.0f, s1 = 0.0f;
    if (t < n) {
        load_halves<V>(x0, src0, half, t);
        if (two) load_halves<V>(x1, src1, half, t);
        if (w0) load_halves<V>(w, w0, half, t);
        load_cs<V>(c0, cs, t);
        s0 = halves_sumsq<V>(x0);
        if (two) s1 = halves_sumsq<V>(x1);
    }
    for (int c = t + blockDim.x; LOOP && c < n; c += blockDim.x) {
        Halves<V> y;
        load_halves<V>(y, src0, half, c);
        s0 += halves_sumsq<V>(y);
        if (two) {
            load_halves<V>(y, src1, half, c);
            s1 += halves_sumsq<V>(y);
        }
    }
    const float2 tot = sum2(s0, s1, scratch);
    if (!store) return;
    const float inv0 = 1.0f / sqrtf(tot.x / (float)hd + eps);
    const float inv1 = 1.0f / sqrtf(tot.y / (float)hd + eps);
    if (t < n) {
        emit<V>(dst0, x0, w, w0 != nullptr, c0, true, inv0, half, t, bad);
        if (two) emit<V>(dst1, x1, w, false, c0, false, inv1, half, t, bad);
    }
    for (int c = t + blockDim.x; LOOP && c < n; c += blockDim.x) {
        Halves<V> y, wy;
        Cs<V> cy;
        load_halves<V>(y, src0, half, c);
        if (w0) load_halves<V>(wy, w0, half, c);
        load_cs<V>(cy, cs, c);
        emit<V>(dst0, y, wy, w0 != nullptr, cy, true, inv0, half, c, bad);
        if (two) {
            load_halves<V>(y, src1, half, c);
            emit<V>(dst1, y, wy, false, cy, false, inv1, half, c, bad);
        }
    }
}

__device__ __forceinline__ bool ok_align(const void* p, int bytes) { return !p || (((unsigned long long)p) & (unsigned long long)(bytes - 1)) == 0ull; }

__device__ __forceinline__ void run(bf16* dst0, const bf16* src0, const bf16* w0, bf16* dst1, const bf16* src1, const float* cs, int hd, float eps, float2* scratch,
                    bool store, bool bad) {
    const int half = hd / 2;
    // (cos, sin) pairs are read as float4 (V >= 2) or float2: else a shared copy.
    const bool cs16 = ok_align(cs, 16), cs8 = ok_align(cs, 8);
    const bool a8 = ok_align(dst0, 8) && ok_align(src0, 8) && ok_align(w0, 8) && ok_align(dst1, 8) && ok_align(src1, 8);
    const bool a4 = ok_align(dst0, 4) && ok_align(src0, 4) && ok_align(w0, 4) && ok_align(dst1, 4) && ok_align(src1, 4);
    // Widest vector first only where the block is too small for one 2-wide
    // chunk per thread; the loop-free variants where one chunk per thread covers the head.
    const int nb = blockDim.x;
    if ((half % 4) == 0 && cs16 && a8 && half / 2 > nb && half / 4 <= nb) {
        prep<4, false>(dst0, src0, w0, dst1, src1, cs, hd, eps, scratch, store, bad);
    } else if ((half % 2) == 0 && cs16 && a4) {
        if (half / 2 <= nb) prep<2, false>(dst0, src0, w0, dst1, src1, cs, hd, eps, scratch, store, bad);
        else prep<2, true>(dst0, src0, w0, dst1, src1, cs, hd, eps, scratch, store, bad);
    } else if (cs8) {
        prep<1, true>(dst0, src0, w0, dst1, src1, cs, hd, eps, scratch, store, bad);
    } else {
        __shared__ float2 cs_copy[256]; // hd <= 512 (launcher)
        for (int k = threadIdx.x; k < half; k += blockDim.x) cs_copy[k] = make_float2(cs[2 * k], cs[2 * k + 1]);
        __syncthreads();
        prep<1, true>(dst0, src0, w0, dst1, src1, reinterpret_cast<const float*>(cs_copy), hd, eps, scratch, store, bad);
    }
}

// Small blocks (one or two warps at hd 256) are latency-bound: the chain per
// block is (pos, slot, pmap) -> data and (cos, sin) loads -> one reduction ->
// stores, with every data load issued before the reduction and no branch on
// a loaded value in front of them (invalid indices are clamped for the loads
// and decide only what is stored). At most 32 registers: 32 blocks per SM.
extern "C" __global__ void __launch_bounds__(256, 8) qkv_prep_bf16(bf16* q_out, bf16* k_pool, bf16* v_pool, const bf16* q_raw, const bf16* k_raw,
                                                                const bf16* v_raw, const bf16* q_norm, const bf16* k_norm, const float* cos_sin,
                                                                const int* pos, const int* slot, int nh, int nkv, int hd, float eps, const int* pmap,
                                                                int rows, int src_rows, int max_pos, int num_slots) {
    __shared__ float2 scratch[32];
    const int r = blockIdx.x, head = blockIdx.y;
    if (r >= rows || head >= nh + nkv) return;
    const bool is_q = head < nh;
    // Independent loads, issued together.
    const int s = pmap ? pmap[r] : r;
    const int p = pos[r];
    const int sl = is_q ? 0 : slot[r];
    const bool bad_s = s < 0 || s >= src_rows, bad_p = p < 0 || p >= max_pos;
    const bool bad = bad_s || bad_p;
    const float* cs = cos_sin + (size_t)(bad_p ? 0 : p) * hd;
    const size_t sc = bad_s ? 0 : (size_t)s;
    if (is_q) {
        bf16* dst = q_out + ((size_t)r * nh + head) * hd;
        run(dst, q_raw + (sc * nh + head) * hd, q_norm, nullptr, nullptr, cs, hd, eps, scratch, true, bad);
        return;
    }
    const bool store = sl >= 0 && sl < num_slots; // padding row: no KV write
    const int j = head - nh;
    const size_t d = ((size_t)(store ? sl : 0) * nkv + j) * hd;
    const size_t o = (sc * nkv + j) * hd;
    run(k_pool + d, k_raw + o, k_norm, v_pool + d, v_raw + o, cs, hd, eps, scratch, store, bad);
}
