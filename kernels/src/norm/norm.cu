// RMSNorm family: one block per row (launcher: grid [rows], block from
// `norm_block(dim)`: 96 threads x 7 chunks of 8 for dim 5376).
//
// Memory-bound. Every input row this block needs (x, and resid / mid for
// the fused kernels) is loaded in one batch at the start: thread t owns
// chunks t, t + blockDim, ... (C of them, C = ceil(chunks / blockDim) <=
// NORM_MAXC) and keeps them in registers between the statistics pass and the
// store pass, so each row is read from memory exactly once and a block has
// all of its bytes in flight at once. Rows longer than NORM_MAXC chunks per
// thread re-read the tail (L2 serves it). The block size is chosen by the
// launcher so that C * blockDim matches the row with little waste; the kernels
// are correct for any block size up to 256 (the launch bound: registers are
// not capped, so 8 cached chunks of two rows do not spill). Measured on the
// H200: more chunks per thread and fewer threads per block is faster
// (672 x 1: 50%, 336 x 2: 60%, 224 x 3: 71%, 96 x 7: 72%, 128 x 6: 74% of
// copy for rmsnorm, back-to-back launches). Vector width V is chosen per
// launch from pointer alignment and dim: 8 (16-byte), 2 (4-byte) or 1.

#define NORM_MAXC 8

// x is read-only for the kernel; resid / mid may alias an output (each
// element is read before the same thread writes it), so they use coherent
// loads that skip L1 allocation.
__device__ __forceinline__ uint4 ld_na16(const void* p) {
    uint4 r;
    asm("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

template <int V> __device__ __forceinline__ void vload_x(BfVec<V>& v, const bf16* p) { vload<V>(v, p); }
template <> __device__ __forceinline__ void vload_x<8>(BfVec<8>& v, const bf16* p) {
    uint4 u = ld_stream16(p);
    v.w[0] = u.x; v.w[1] = u.y; v.w[2] = u.z; v.w[3] = u.w;
}
template <int V> __device__ __forceinline__ void vload_rw(BfVec<V>& v, const bf16* p) { vload<V>(v, p); }
template <> __device__ __forceinline__ void vload_rw<8>(BfVec<8>& v, const bf16* p) {
    uint4 u = ld_na16(p);
    v.w[0] = u.x; v.w[1] = u.y; v.w[2] = u.z; v.w[3] = u.w;
}

// Weight factors for element k: w null means unscaled.
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
        s = fmaf(f, f, s);
    }
    return s;
}

__device__ __forceinline__ float inv_rms(float ss, int dim, float eps, float* red) {
    float total = block_sum(ss, red);
    return 1.0f / sqrtf(total / (float)dim + eps);
}

// Chunk index of cache slot j for this thread.
__device__ __forceinline__ int slot(int j) { return threadIdx.x + j * blockDim.x; }

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

// Cached chunks per thread for n chunks.
__device__ __forceinline__ int cache_slots(int n) { return min(NORM_MAXC, (n + (int)blockDim.x - 1) / (int)blockDim.x); }

// Dispatches F<V, C> for V in {8, 2, 1} and (for V = 8) C in {1, 2, 3, 4, 6, 8}, the smallest that covers the row.
#define NORM_DISPATCH(V, N, CALL)                  \
    do {                                           \
        if ((V) == 8) {                            \
            const int need_ = cache_slots(N);      \
            if (need_ <= 1) CALL(8, 1);            \
            else if (need_ <= 2) CALL(8, 2);       \
            else if (need_ <= 3) CALL(8, 3);       \
            else if (need_ <= 4) CALL(8, 4);       \
            else if (need_ <= 6) CALL(8, 6);       \
            else CALL(8, NORM_MAXC);               \
        } else if ((V) == 2) {                     \
            CALL(2, 4);                            \
        } else {                                   \
            CALL(1, 4);                            \
        }                                          \
    } while (0)

// ---------------------------------------------------------------- rmsnorm

// Σ x² over a row: the chunks already held in registers, then the rest
// streamed from `x`. One order for every norm kernel, so they agree bit for bit.
template <int V, int C>
__device__ __forceinline__ float row_sumsq(const BfVec<V> (&c)[C], const bf16* x, int n) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < C; ++j)
        if (slot(j) < n) ss += sumsq<V>(c[j]);
    for (int k = slot(C); k < n; k += blockDim.x) {
        BfVec<V> t;
        vload_x<V>(t, x + (size_t)k * V);
        ss += sumsq<V>(t);
    }
    return ss;
}

template <int V, int C>
__device__ __forceinline__ void rmsnorm_row(bf16* out, const bf16* x, const bf16* w, int dim, float eps, float* red) {
    const int n = dim / V;
    BfVec<V> c[C];
#pragma unroll
    for (int j = 0; j < C; ++j)
        if (slot(j) < n) vload_x<V>(c[j], x + (size_t)slot(j) * V);
    const float ss = row_sumsq<V, C>(c, x, n);
    const float inv = inv_rms(ss, dim, eps, red);
#pragma unroll
    for (int j = 0; j < C; ++j)
        if (slot(j) < n) norm_chunk<V>(out, c[j], w, slot(j) * V, inv);
    for (int k = slot(C); k < n; k += blockDim.x) {
        BfVec<V> t;
        vload_x<V>(t, x + (size_t)k * V);
        norm_chunk<V>(out, t, w, k * V, inv);
    }
}

extern "C" __global__ void __launch_bounds__(256) rmsnorm_bf16(bf16* out, const bf16* x, const bf16* w, int rows, int dim, float eps) {
    if ((int)blockIdx.x >= rows) return;
    __shared__ float red[32];
    const size_t off = (size_t)blockIdx.x * dim;
    out += off;
    x += off;
    const int v = pick_width(dim, out, x, w, nullptr, nullptr);
#define RMS_CALL(V_, C_) rmsnorm_row<V_, C_>(out, x, w, dim, eps, red)
    NORM_DISPATCH(v, dim / v, RMS_CALL);
#undef RMS_CALL
}

// ---------------------------------------------------------------- sandwich

// t = bf16(x*inv*w_post); r = bf16(resid + t); stores r, returns it in `rv`.
template <int V>
__device__ __forceinline__ void sandwich_chunk(bf16* resid_out, const BfVec<V>& res, const BfVec<V>& xv, const bf16* w_post, int e, float inv,
                                               BfVec<V>& rv) {
    float wf[V], f[V];
    load_w<V>(wf, w_post, e);
#pragma unroll
    for (int i = 0; i < V; ++i) {
        float t = round_bf16(vget<V>(xv, i) * inv * wf[i]);
        f[i] = vget<V>(res, i) + t;
    }
    vpack<V>(rv, f);
    vstore<V>(resid_out + e, rv);
}

template <int V, int C>
__device__ __forceinline__ void sandwich_row(bf16* resid_out, bf16* normed, const bf16* resid, const bf16* x, const bf16* w_post,
                                             const bf16* w_pre, int dim, float eps, float* red) {
    const int n = dim / V;
    BfVec<V> cx[C], cr[C];
    // x and resid together: both rows in flight at once.
#pragma unroll
    for (int j = 0; j < C; ++j) {
        if (slot(j) < n) {
            vload_x<V>(cx[j], x + (size_t)slot(j) * V);
            vload_rw<V>(cr[j], resid + (size_t)slot(j) * V);
        }
    }
    const float ss = row_sumsq<V, C>(cx, x, n);
    const float inv1 = inv_rms(ss, dim, eps, red);
    // resid_out may alias resid: every element is read before it is written,
    // by the same thread, so no other thread observes a half-updated row.
    float ss2 = 0.0f;
#pragma unroll
    for (int j = 0; j < C; ++j) {
        if (slot(j) < n) {
            sandwich_chunk<V>(resid_out, cr[j], cx[j], w_post, slot(j) * V, inv1, cr[j]);
            ss2 += sumsq<V>(cr[j]);
        }
    }
    for (int k = slot(C); k < n; k += blockDim.x) {
        BfVec<V> t, r, o;
        vload_x<V>(t, x + (size_t)k * V);
        vload<V>(r, resid + (size_t)k * V);
        sandwich_chunk<V>(resid_out, r, t, w_post, k * V, inv1, o);
        ss2 += sumsq<V>(o);
    }
    if (!w_pre) return; // uniform across the block: the second output is skipped
    const float inv2 = inv_rms(ss2, dim, eps, red);
#pragma unroll
    for (int j = 0; j < C; ++j)
        if (slot(j) < n) norm_chunk<V>(normed, cr[j], w_pre, slot(j) * V, inv2);
    for (int k = slot(C); k < n; k += blockDim.x) {
        BfVec<V> r;
        vload<V>(r, resid_out + (size_t)k * V); // written above by this same thread
        norm_chunk<V>(normed, r, w_pre, k * V, inv2);
    }
}

extern "C" __global__ void __launch_bounds__(256) post_norm_add_pre_norm_bf16(bf16* resid_out, bf16* normed, const bf16* resid, const bf16* x,
                                                                               const bf16* w_post, const bf16* w_pre, int rows, int dim,
                                                                               float eps) {
    if ((int)blockIdx.x >= rows) return;
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
#define SANDWICH_CALL(V_, C_) sandwich_row<V_, C_>(resid_out, normed, resid, x, w_post, w_pre, dim, eps, red)
    NORM_DISPATCH(v, dim / v, SANDWICH_CALL);
#undef SANDWICH_CALL
}

// ---------------------------------------------------------------- layer_out

// t = bf16(x*inv*w); s = bf16(mid + t); out = bf16(s * scalar).
template <int V>
__device__ __forceinline__ void layer_out_chunk(bf16* out, const BfVec<V>& mv, const BfVec<V>& xv, const bf16* w, int e, float inv, float scalar) {
    float wf[V], f[V];
    load_w<V>(wf, w, e);
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

template <int V, int C>
__device__ __forceinline__ void layer_out_row(bf16* out, const bf16* mid, const bf16* x, const bf16* w, const float* layer_scalar, int dim,
                                              float eps, float* red) {
    const int n = dim / V;
    BfVec<V> cx[C], cm[C];
#pragma unroll
    for (int j = 0; j < C; ++j) {
        if (slot(j) < n) {
            vload_x<V>(cx[j], x + (size_t)slot(j) * V);
            vload_rw<V>(cm[j], mid + (size_t)slot(j) * V);
        }
    }
    const float scalar = *layer_scalar;
    const float ss = row_sumsq<V, C>(cx, x, n);
    const float inv = inv_rms(ss, dim, eps, red);
#pragma unroll
    for (int j = 0; j < C; ++j)
        if (slot(j) < n) layer_out_chunk<V>(out, cm[j], cx[j], w, slot(j) * V, inv, scalar);
    for (int k = slot(C); k < n; k += blockDim.x) {
        BfVec<V> t, m;
        vload_x<V>(t, x + (size_t)k * V);
        vload<V>(m, mid + (size_t)k * V);
        layer_out_chunk<V>(out, m, t, w, k * V, inv, scalar);
    }
}

extern "C" __global__ void __launch_bounds__(256) layer_out_bf16(bf16* out, const bf16* mid, const bf16* x, const bf16* w, const float* layer_scalar,
                                                                  int rows, int dim, float eps) {
    if ((int)blockIdx.x >= rows) return;
    __shared__ float red[32];
    const size_t off = (size_t)blockIdx.x * dim;
    out += off;
    mid += off;
    x += off;
    const int v = pick_width(dim, out, mid, x, w, nullptr);
#define LAYER_OUT_CALL(V_, C_) layer_out_row<V_, C_>(out, mid, x, w, layer_scalar, dim, eps, red)
    NORM_DISPATCH(v, dim / v, LAYER_OUT_CALL);
#undef LAYER_OUT_CALL
}
