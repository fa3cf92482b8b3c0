// RMSNorm family: one block per row (launcher: grid [rows], block 256).
//
// Memory-bound: each row is read once and kept in registers (up to
// NORM_CACHE vectors per thread; 256 threads x 3 x 8 = 6144 elements with
// 16-byte vectors) between the statistics pass and the store pass; longer
// rows re-read the tail, which L2 serves. Register use is capped so that 8
// blocks of 256 fit on an SM: one row per block leaves nothing to overlap
// within a block, so latency is hidden across blocks. Vector width is chosen per launch
// from pointer alignment and dim: 8 (16-byte), 2 (4-byte) or 1.

#define NORM_CACHE 3
#define NORM_BOUNDS __launch_bounds__(256, 8)

// Weight factor for element k: w null means unscaled.
template <int V>
__device__ __forceinline__ void load_w(float* f, const bf16* w, int k) {
    if (w) {
        BfVec<V> wv;
        vload<V>(wv, w + k);
#pragma unroll
        for (int i = 0; i < V; ++i) f[i] = vget<V>(wv, i);
    } else {
#pragma unroll
        for (int i = 0; i < V; ++i) f[i] = 1.0f;
    }
}

template <int V>
__device__ __forceinline__ float sumsq(const BfVec<V>& v) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
        float f = vget<V>(v, i);
        s += f * f;
    }
    return s;
}

// Loads the row into the register cache (chunks tid + j*blockDim) and
// returns the thread's partial sum of squares over the whole row.
template <int V>
__device__ __forceinline__ float load_row(BfVec<V>* c, const bf16* x, int n) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < NORM_CACHE; ++j) {
        int k = threadIdx.x + j * blockDim.x;
        if (k < n) vload<V>(c[j], x + (size_t)k * V);
    }
#pragma unroll
    for (int j = 0; j < NORM_CACHE; ++j) {
        int k = threadIdx.x + j * blockDim.x;
        if (k < n) ss += sumsq<V>(c[j]);
    }
    for (int k = threadIdx.x + NORM_CACHE * blockDim.x; k < n; k += blockDim.x) {
        BfVec<V> t;
        vload<V>(t, x + (size_t)k * V);
        ss += sumsq<V>(t);
    }
    return ss;
}

__device__ __forceinline__ float inv_rms(float ss, int dim, float eps, float* red) {
    float total = block_sum(ss, red);
    return 1.0f / sqrtf(total / (float)dim + eps);
}

// out = bf16(x * inv * w) for one chunk.
template <int V>
__device__ __forceinline__ void norm_chunk(bf16* out, const BfVec<V>& xv, const bf16* w, int e, float inv) {
    float wf[V], f[V];
    load_w<V>(wf, w, e);
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = vget<V>(xv, i) * inv * wf[i];
    BfVec<V> o;
    vpack<V>(o, f);
    vstore<V>(out + e, o);
}

template <int V>
__device__ void rmsnorm_row(bf16* out, const bf16* x, const bf16* w, int dim, float eps, float* red) {
    const int n = dim / V;
    BfVec<V> c[NORM_CACHE];
    float inv = inv_rms(load_row<V>(c, x, n), dim, eps, red);
#pragma unroll
    for (int j = 0; j < NORM_CACHE; ++j) {
        int k = threadIdx.x + j * blockDim.x;
        if (k < n) norm_chunk<V>(out, c[j], w, k * V, inv);
    }
    for (int k = threadIdx.x + NORM_CACHE * blockDim.x; k < n; k += blockDim.x) {
        BfVec<V> t;
        vload<V>(t, x + (size_t)k * V);
        norm_chunk<V>(out, t, w, k * V, inv);
    }
}

// The vector width every pointer (null ones excepted) and dim allow.
__device__ __forceinline__ int pick_width(int dim, const void* a, const void* b, const void* c, const void* d, const void* e) {
    const void* ps[5] = {a, b, c, d, e};
    bool v8 = (dim % 8) == 0, v2 = (dim % 2) == 0;
#pragma unroll
    for (int i = 0; i < 5; ++i) {
        if (ps[i]) {
            v8 = v8 && aligned16(ps[i]);
            v2 = v2 && aligned4(ps[i]);
        }
    }
    return v8 ? 8 : (v2 ? 2 : 1);
}

extern "C" __global__ void NORM_BOUNDS rmsnorm_bf16(bf16* out, const bf16* x, const bf16* w, int dim, float eps) {
    __shared__ float red[32];
    const size_t off = (size_t)blockIdx.x * dim;
    out += off;
    x += off;
    switch (pick_width(dim, out, x, w, nullptr, nullptr)) {
        case 8: rmsnorm_row<8>(out, x, w, dim, eps, red); break;
        case 2: rmsnorm_row<2>(out, x, w, dim, eps, red); break;
        default: rmsnorm_row<1>(out, x, w, dim, eps, red); break;
    }
}

// ---------------------------------------------------------------- sandwich

// t = bf16(x*inv*w_post); r = bf16(resid + t); stores r and returns its
// rounded bits in `rv` (for the second norm).
template <int V>
__device__ __forceinline__ float sandwich_chunk(bf16* resid_out, const bf16* resid, const BfVec<V>& xv, const bf16* w_post, int e, float inv,
                                                BfVec<V>& rv) {
    float wf[V], f[V];
    load_w<V>(wf, w_post, e);
    BfVec<V> res;
    vload<V>(res, resid + e);
#pragma unroll
    for (int i = 0; i < V; ++i) {
        float t = round_bf16(vget<V>(xv, i) * inv * wf[i]);
        f[i] = vget<V>(res, i) + t;
    }
    vpack<V>(rv, f);
    vstore<V>(resid_out + e, rv);
    return sumsq<V>(rv);
}

template <int V>
__device__ void sandwich_row(bf16* resid_out, bf16* normed, const bf16* resid, const bf16* x, const bf16* w_post, const bf16* w_pre, int dim,
                             float eps, float* red) {
    const int n = dim / V;
    BfVec<V> c[NORM_CACHE];
    float inv1 = inv_rms(load_row<V>(c, x, n), dim, eps, red);
    float ss2 = 0.0f;
    // resid_out may alias resid: every element is read before it is written,
    // by the same thread, so no other thread observes a half-updated row.
#pragma unroll
    for (int j = 0; j < NORM_CACHE; ++j) {
        int k = threadIdx.x + j * blockDim.x;
        if (k < n) ss2 += sandwich_chunk<V>(resid_out, resid, c[j], w_post, k * V, inv1, c[j]);
    }
    for (int k = threadIdx.x + NORM_CACHE * blockDim.x; k < n; k += blockDim.x) {
        BfVec<V> t, r;
        vload<V>(t, x + (size_t)k * V);
        ss2 += sandwich_chunk<V>(resid_out, resid, t, w_post, k * V, inv1, r);
    }
    if (!w_pre) return; // uniform across the block: the second output is skipped
    float inv2 = inv_rms(ss2, dim, eps, red);
#pragma unroll
    for (int j = 0; j < NORM_CACHE; ++j) {
        int k = threadIdx.x + j * blockDim.x;
        if (k < n) norm_chunk<V>(normed, c[j], w_pre, k * V, inv2);
    }
    for (int k = threadIdx.x + NORM_CACHE * blockDim.x; k < n; k += blockDim.x) {
        BfVec<V> r;
        vload<V>(r, resid_out + (size_t)k * V); // written above by this same thread
        norm_chunk<V>(normed, r, w_pre, k * V, inv2);
    }
}

// Two live rows' worth of state: 6 blocks per SM (40 registers) to avoid spills.
extern "C" __global__ void __launch_bounds__(256, 6) post_norm_add_pre_norm_bf16(bf16* resid_out, bf16* normed, const bf16* resid, const bf16* x,
                                                                              const bf16* w_post, const bf16* w_pre, int dim, float eps) {
    __shared__ float red[32];
    const size_t off = (size_t)blockIdx.x * dim;
    resid_out += off;
    resid += off;
    x += off;
    if (normed) normed += off;
    if (!w_pre) normed = nullptr;
    int v = pick_width(dim, resid_out, resid, x, w_post, w_pre);
    if (v == 8 && normed && !aligned16(normed)) v = 2;
    if (v == 2 && normed && !aligned4(normed)) v = 1;
    switch (v) {
        case 8: sandwich_row<8>(resid_out, normed, resid, x, w_post, w_pre, dim, eps, red); break;
        case 2: sandwich_row<2>(resid_out, normed, resid, x, w_post, w_pre, dim, eps, red); break;
        default: sandwich_row<1>(resid_out, normed, resid, x, w_post, w_pre, dim, eps, red); break;
    }
}

// ---------------------------------------------------------------- layer_out

// t = bf16(x*inv*w); s = bf16(mid + t); out = bf16(s * scalar).
template <int V>
__device__ __forceinline__ void layer_out_chunk(bf16* out, const bf16* mid, const BfVec<V>& xv, const bf16* w, int e, float inv, float scalar) {
    float wf[V], f[V];
    load_w<V>(wf, w, e);
    BfVec<V> mv;
    vload<V>(mv, mid + e);
#pragma unroll
    for (int i = 0; i < V; ++i) {
        float t = round_bf16(vget<V>(xv, i) * inv * wf[i]);
        float s = round_bf16(vget<V>(mv, i) + t);
        f[i] = s * scalar;
    }
    BfVec<V> o;
    vpack<V>(o, f);
    vstore<V>(out + e, o);
}

template <int V>
__device__ void layer_out_row(bf16* out, const bf16* mid, const bf16* x, const bf16* w, float scalar, int dim, float eps, float* red) {
    const int n = dim / V;
    BfVec<V> c[NORM_CACHE];
    float inv = inv_rms(load_row<V>(c, x, n), dim, eps, red);
#pragma unroll
    for (int j = 0; j < NORM_CACHE; ++j) {
        int k = threadIdx.x + j * blockDim.x;
        if (k < n) layer_out_chunk<V>(out, mid, c[j], w, k * V, inv, scalar);
    }
    for (int k = threadIdx.x + NORM_CACHE * blockDim.x; k < n; k += blockDim.x) {
        BfVec<V> t;
        vload<V>(t, x + (size_t)k * V);
        layer_out_chunk<V>(out, mid, t, w, k * V, inv, scalar);
    }
}

extern "C" __global__ void NORM_BOUNDS layer_out_bf16(bf16* out, const bf16* mid, const bf16* x, const bf16* w, const float* layer_scalar,
                                                                 int dim, float eps) {
    __shared__ float red[32];
    const size_t off = (size_t)blockIdx.x * dim;
    out += off;
    mid += off;
    x += off;
    const float scalar = *layer_scalar;
    switch (pick_width(dim, out, mid, x, w, nullptr)) {
        case 8: layer_out_row<8>(out, mid, x, w, scalar, dim, eps, red); break;
        case 2: layer_out_row<2>(out, mid, x, w, scalar, dim, eps, red); break;
        default: layer_out_row<1>(out, mid, x, w, scalar, dim, eps, red); break;
    }
}
