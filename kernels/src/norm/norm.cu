// Not launched as programmatic dependents (no `dependent-launch:` line):
// with nothing to load before sy_wait_prior(), early-launched blocks would
// only hold SM slots; their sy_allow_next() at the start lets a GEMV after
// them launch early and stream its weights meanwhile.
// RMSNorm family. Plan (norm/mod.rs, `cuda_norm_plan`): a persistent grid of
// min(rows, SMs * B) blocks of T = norm_block(dim) <= 128 threads (96 for dim
// 5376: 7 chunks of 8 bf16 per thread), B = the blocks one SM holds at the
// 128-register cap of NORM_BOUNDS (5 for T = 96). Block b takes rows b,
// b + grid, b + 2 grid, ...: every block stays resident for the whole launch,
// so there are no block launches after the first wave and no partial last
// wave, and each block always has a row on its way from memory.
//
// Memory-bound. A thread owns chunks t, t + T, ... of a row (C of them, C =
// ceil(chunks / T)) and keeps them in registers between the sum of squares
// and the scaling, so each input row is read from DRAM once. The pipelined
// entry points (16-byte vectors, C <= 8, which the plan picks when the
// pointers allow): the next row's x is loaded before this row's block
// reduction, and its resid / mid as soon as this row's copy is consumed
// (after the stores), so while a row is reduced and written the next one is
// already in flight (two x rows and one resid / mid row per thread: 3 * 28
// data registers at C = 7). The kernels' own entry points take any width,
// alignment and row length: one row at a time, up to 4 chunks a thread
// cached and the rest re-read from L2 for the stores.
//
// Reduction order (fixed for a given dim, so launches are deterministic):
// each thread sums its chunks in slot order, then block_sum (warp tree, then
// the warps' partials in warp order); the pipelined and simple paths visit
// the same slots in the same order, so they agree bit for bit.

// Blocks of up to 128 threads at up to 128 registers: the plan counts on
// floor(16 / warps) resident blocks per SM (norm/mod.rs, ROW_REG_CAP).
#define NORM_BOUNDS __launch_bounds__(128, 4)
// The pipelined entry points `<kernel>_c1` .. `<kernel>_c8`, one per cached
// chunk count, each compiled on its own so its registers are its own
// (norm/mod.rs picks one; they assume 16-byte vectors, which the plan checks).
#define NORM_PIPE_ENTRIES(E) E(1) E(2) E(3) E(4) E(5) E(6) E(7) E(8)

// x is read-only for the kernel; resid / mid may alias an output (each
// element is read before the same thread writes it), so they use coherent
// loads that skip L1 allocation.
template <int V> __device__ __forceinline__ void vload_x(BfVec<V>& v, const bf16* p) { vload<V>(v, p); }
template <> __device__ __forceinline__ void vload_x<8>(BfVec<8>& v, const bf16* p) {
    uint4 u = ld_stream16_v(p);
    v.w[0] = u.x; v.w[1] = u.y; v.w[2] = u.z; v.w[3] = u.w;
}
template <int V> __device__ __forceinline__ void vload_rw(BfVec<V>& v, const bf16* p) { vload<V>(v, p); }
template <> __device__ __forceinline__ void vload_rw<8>(BfVec<8>& v, const bf16* p) {
    uint4 u = ld_na16_v(p);
    v.w[0] = u.x; v.w[1] = u.y; v.w[2] = u.z; v.w[3] = u.w;
}

// Weight factors for element k: w null means unscaled. The weight row is
// the same for every row a block handles, so these loads hit L1; they are
// volatile so the compiler re-loads them per row instead of hoisting every
// chunk's weights out of the row loop into registers (which spills).
template <int V>
__device__ __forceinline__ void load_w(float* f, const bf16* w, int k) {
    if (w) {
        BfVec<V> wv;
        if constexpr (V == 8) {
            const uint4 u = ld_nc16_v(w + k);
            wv.w[0] = u.x; wv.w[1] = u.y; wv.w[2] = u.z; wv.w[3] = u.w;
        } else {
            vload<V>(wv, w + k);
        }
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

// V floats rounded to bf16 (RNE) into a vector; pairs with one instruction.
template <int V> __device__ __forceinline__ void vpack_rn(BfVec<V>& v, const float* f) {
    if (V == 1) {
        v.w[0] = f32_to_bf16(f[0]);
    } else {
#pragma unroll
        for (int i = 0; i < V / 2; ++i) v.w[i] = pack_bf16_rn(f[2 * i], f[2 * i + 1]);
    }
}

// out = bf16(x * inv * w) for one chunk.
template <int V>
__device__ __forceinline__ void norm_chunk(bf16* out, const BfVec<V>& xv, const bf16* w, int e, float inv) {
    float wf[V], f[V];
    load_w<V>(wf, w, e);
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = vget<V>(xv, i) * inv * wf[i];
    BfVec<V> o;
    vpack_rn<V>(o, f);
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


// Whether the pipelined path with C chunks a thread covers the row: 16-byte
// vectors and ceil(dim / 8 / blockDim) == C, as the plan picks it. Any other
// geometry (a block-size sweep through launch_with_geometry) takes the simple path.
__device__ __forceinline__ bool pipe_fits(int dim, int c, int width) {
    return width == 8 && (dim / 8 + (int)blockDim.x - 1) / (int)blockDim.x == c;
}

// Simple path: CALL(V, C) for V in {8, 2, 1}, C chunks cached, the rest re-read.
#define NORM_SIMPLE_DISPATCH(V, CALL) \
    do {                              \
        if ((V) == 8) {               \
            CALL(8, 4);               \
        } else if ((V) == 2) {        \
            CALL(2, 4);               \
        } else {                      \
            CALL(1, 4);               \
        }                             \
    } while (0)

// Loads the chunks of a row this thread caches (16-byte vectors).
template <int C>
__device__ __forceinline__ void ld_row_x(BfVec<8> (&c)[C], const bf16* p, int n) {
#pragma unroll
    for (int j = 0; j < C; ++j)
        if (slot(j) < n) vload_x<8>(c[j], p + slot(j) * 8);
}
template <int C>
__device__ __forceinline__ void ld_row_rw(BfVec<8> (&c)[C], const bf16* p, int n) {
#pragma unroll
    for (int j = 0; j < C; ++j)
        if (slot(j) < n) vload_rw<8>(c[j], p + slot(j) * 8);
}

// Σ x² over the chunks a thread caches, in slot order.
template <int V, int C>
__device__ __forceinline__ float cached_sumsq(const BfVec<V> (&c)[C], int n) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < C; ++j)
        if (slot(j) < n) ss += sumsq<V>(c[j]);
    return ss;
}

// ---------------------------------------------------------------- rmsnorm

// Σ x² over a row: the chunks already held in registers, then the rest
// streamed from `x` (simple path). One order for every norm kernel.
template <int V, int C>
__device__ __forceinline__ float row_sumsq(const BfVec<V> (&c)[C], const bf16* x, int n) {
    float ss = cached_sumsq<V, C>(c, n);
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

// One row from registers: reduce, scale, store.
template <int C>
__device__ __forceinline__ void rms_finish(const BfVec<8> (&c)[C], bf16* out, const bf16* w, int n, int dim, float eps, float* red) {
    const float inv = inv_rms(cached_sumsq<8, C>(c, n), dim, eps, red);
#pragma unroll
    for (int j = 0; j < C; ++j)
        if (slot(j) < n) norm_chunk<8>(out, c[j], w, slot(j) * 8, inv);
}

template <int C>
__device__ __forceinline__ void rmsnorm_rows(bf16* out, const bf16* x, const bf16* w, int rows, int dim, float eps, float* red) {
    const int n = dim / 8, G = gridDim.x;
    BfVec<8> a[C], b[C];
    int r = blockIdx.x;
    ld_row_x<C>(a, x + (size_t)r * dim, n);
    for (;;) {
        // Two rows per trip so the register buffers swap roles without copies.
        const int r1 = r + G;
        if (r1 < rows) ld_row_x<C>(b, x + (size_t)r1 * dim, n);
        rms_finish<C>(a, out + (size_t)r * dim, w, n, dim, eps, red);
        if (r1 >= rows) return;
        const int r2 = r1 + G;
        if (r2 < rows) ld_row_x<C>(a, x + (size_t)r2 * dim, n);
        rms_finish<C>(b, out + (size_t)r1 * dim, w, n, dim, eps, red);
        if (r2 >= rows) return;
        r = r2;
    }
}

// One row at a time, any width and alignment.
__device__ __forceinline__ void rmsnorm_simple(bf16* out, const bf16* x, const bf16* w, int rows, int dim, float eps, float* red) {
    const int v = pick_width(dim, out, x, w, nullptr, nullptr);
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const size_t off = (size_t)r * dim;
#define RMS_CALL(V_, C_) rmsnorm_row<V_, C_>(out + off, x + off, w, dim, eps, red)
        NORM_SIMPLE_DISPATCH(v, RMS_CALL);
#undef RMS_CALL
    }
}

extern "C" __global__ void NORM_BOUNDS rmsnorm_bf16(bf16* out, const bf16* x, const bf16* w, int rows, int dim, float eps) {
    sy_allow_next(); // a dependent GEMV after this may start now (file header)
    sy_wait_prior();
    __shared__ float red[32];
    rmsnorm_simple(out, x, w, rows, dim, eps, red);
}

// Element-wise fallback for a pipelined entry launched with a geometry its
// plan would not pick (a block-size sweep): one row at a time, scalar
// loads, few registers so that it costs the entry none.
__device__ __noinline__ void rmsnorm_scalar(bf16* out, const bf16* x, const bf16* w, int rows, int dim, float eps, float* red) {
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const size_t off = (size_t)r * dim;
        float ss = 0.0f;
        for (int k = threadIdx.x; k < dim; k += blockDim.x) ss = fmaf(bf16_to_f32(x[off + k]), bf16_to_f32(x[off + k]), ss);
        const float inv = inv_rms(ss, dim, eps, red);
        for (int k = threadIdx.x; k < dim; k += blockDim.x) out[off + k] = f32_to_bf16(bf16_to_f32(x[off + k]) * inv * (w ? bf16_to_f32(w[k]) : 1.0f));
    }
}

#define RMS_PIPE_ENTRY(C_)                                                                                                          \
    extern "C" __global__ void NORM_BOUNDS rmsnorm_bf16_c##C_(bf16* out, const bf16* x, const bf16* w, int rows, int dim, float eps) { \
        sy_allow_next();                                                                                        \
        sy_wait_prior();                                                                                        \
        __shared__ float red[32];                                                                                                   \
        if (!pipe_fits(dim, C_, pick_width(dim, out, x, w, nullptr, nullptr))) rmsnorm_scalar(out, x, w, rows, dim, eps, red);     \
        else if ((int)blockIdx.x < rows) rmsnorm_rows<C_>(out, x, w, rows, dim, eps, red);                                          \
    }
NORM_PIPE_ENTRIES(RMS_PIPE_ENTRY)

// ---------------------------------------------------------------- sandwich

// t = bf16(x*inv*w_post); r = bf16(resid + t); stores r, returns it in `rv`.
template <int V>
__device__ __forceinline__ void sandwich_chunk(bf16* resid_out, const BfVec<V>& res, const BfVec<V>& xv, const bf16* w_post, int e, float inv,
                                               BfVec<V>& rv) {
    float wf[V], f[V];
    load_w<V>(wf, w_post, e);
#pragma unroll
    for (int i = 0; i < V; ++i) {
        float t = round_bf16_rn(vget<V>(xv, i) * inv * wf[i]);
        f[i] = vget<V>(res, i) + t;
    }
    vpack_rn<V>(rv, f);
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

// One row from registers: x in `cx`, resid in `cr` (overwritten with the
// rounded resid_out); the next row's x is already on its way into the other
// x buffer, and its resid is loaded into `cr` once this row's is stored.
template <int C>
__device__ __forceinline__ void sandwich_finish(const BfVec<8> (&cx)[C], BfVec<8> (&cr)[C], bf16* resid_out, bf16* normed, const bf16* w_post,
                                                const bf16* w_pre, int n, int dim, float eps, float* red) {
    const float inv1 = inv_rms(cached_sumsq<8, C>(cx, n), dim, eps, red);
    float ss2 = 0.0f;
#pragma unroll
    for (int j = 0; j < C; ++j) {
        if (slot(j) < n) {
            sandwich_chunk<8>(resid_out, cr[j], cx[j], w_post, slot(j) * 8, inv1, cr[j]);
            ss2 += sumsq<8>(cr[j]);
        }
    }
    if (!w_pre) return; // uniform across the block
    const float inv2 = inv_rms(ss2, dim, eps, red);
#pragma unroll
    for (int j = 0; j < C; ++j)
        if (slot(j) < n) norm_chunk<8>(normed, cr[j], w_pre, slot(j) * 8, inv2);
}

template <int C>
__device__ __forceinline__ void sandwich_rows(bf16* resid_out, bf16* normed, const bf16* resid, const bf16* x, const bf16* w_post,
                                              const bf16* w_pre, int rows, int dim, float eps, float* red) {
    const int n = dim / 8, G = gridDim.x;
    BfVec<8> xa[C], xb[C], cr[C];
    int r = blockIdx.x;
    ld_row_x<C>(xa, x + (size_t)r * dim, n);
    ld_row_rw<C>(cr, resid + (size_t)r * dim, n);
    for (;;) {
        const int r1 = r + G;
        size_t o = (size_t)r * dim;
        if (r1 < rows) ld_row_x<C>(xb, x + (size_t)r1 * dim, n);
        sandwich_finish<C>(xa, cr, resid_out + o, normed + o, w_post, w_pre, n, dim, eps, red);
        if (r1 >= rows) return;
        // resid_out may alias resid: row r1 is not row r, and only this block touches either.
        ld_row_rw<C>(cr, resid + (size_t)r1 * dim, n);
        const int r2 = r1 + G;
        o = (size_t)r1 * dim;
        if (r2 < rows) ld_row_x<C>(xa, x + (size_t)r2 * dim, n);
        sandwich_finish<C>(xb, cr, resid_out + o, normed + o, w_post, w_pre, n, dim, eps, red);
        if (r2 >= rows) return;
        ld_row_rw<C>(cr, resid + (size_t)r2 * dim, n);
        r = r2;
    }
}

__device__ __forceinline__ int sandwich_width(int dim, const bf16* resid_out, const bf16* normed, const bf16* resid, const bf16* x, const bf16* w_post,
                                              const bf16* w_pre) {
    int v = pick_width(dim, resid_out, resid, x, w_post, w_pre);
    if (v == 8 && normed && !aligned16(normed)) v = 2;
    if (v == 2 && normed && !aligned4(normed)) v = 1;
    return v;
}

__device__ __forceinline__ void sandwich_simple(bf16* resid_out, bf16* normed, const bf16* resid, const bf16* x, const bf16* w_post, const bf16* w_pre,
                                             int rows, int dim, float eps, float* red) {
    const int v = sandwich_width(dim, resid_out, normed, resid, x, w_post, w_pre);
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const size_t off = (size_t)r * dim;
        bf16* nr = normed ? normed + off : normed;
#define SANDWICH_CALL(V_, C_) sandwich_row<V_, C_>(resid_out + off, nr, resid + off, x + off, w_post, w_pre, dim, eps, red)
        NORM_SIMPLE_DISPATCH(v, SANDWICH_CALL);
#undef SANDWICH_CALL
    }
}

extern "C" __global__ void NORM_BOUNDS post_norm_add_pre_norm_bf16(bf16* resid_out, bf16* normed, const bf16* resid, const bf16* x,
                                                                    const bf16* w_post, const bf16* w_pre, int rows, int dim, float eps) {
    sy_allow_next(); // a dependent GEMV after this may start now (file header)
    sy_wait_prior();
    __shared__ float red[32];
    sandwich_simple(resid_out, w_pre ? normed : nullptr, resid, x, w_post, w_pre, rows, dim, eps, red);
}

__device__ __noinline__ void sandwich_scalar(bf16* resid_out, bf16* normed, const bf16* resid, const bf16* x, const bf16* w_post, const bf16* w_pre,
                                             int rows, int dim, float eps, float* red) {
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const size_t off = (size_t)r * dim;
        float ss = 0.0f;
        for (int k = threadIdx.x; k < dim; k += blockDim.x) ss = fmaf(bf16_to_f32(x[off + k]), bf16_to_f32(x[off + k]), ss);
        const float inv1 = inv_rms(ss, dim, eps, red);
        float ss2 = 0.0f;
        for (int k = threadIdx.x; k < dim; k += blockDim.x) {
            const float t = round_bf16(bf16_to_f32(x[off + k]) * inv1 * (w_post ? bf16_to_f32(w_post[k]) : 1.0f));
            const float v = round_bf16(bf16_to_f32(resid[off + k]) + t);
            resid_out[off + k] = f32_to_bf16(v);
            ss2 = fmaf(v, v, ss2);
        }
        if (!w_pre) continue; // uniform across the block
        const float inv2 = inv_rms(ss2, dim, eps, red);
        // Each thread reads back only the elements it wrote.
        for (int k = threadIdx.x; k < dim; k += blockDim.x) normed[off + k] = f32_to_bf16(bf16_to_f32(resid_out[off + k]) * inv2 * bf16_to_f32(w_pre[k]));
    }
}

#define SANDWICH_PIPE_ENTRY(C_)                                                                                                      \
    extern "C" __global__ void NORM_BOUNDS post_norm_add_pre_norm_bf16_c##C_(bf16* resid_out, bf16* normed, const bf16* resid,       \
                                                                           const bf16* x, const bf16* w_post, const bf16* w_pre,     \
                                                                           int rows, int dim, float eps) {                           \
        sy_allow_next();                                                                                        \
        sy_wait_prior();                                                                                        \
        __shared__ float red[32];                                                                                                    \
        /* No second output: normed is then only addressed, never written (a null one cannot be offset). */                        \
        if (!w_pre) normed = resid_out;                                                                                              \
        if (!pipe_fits(dim, C_, sandwich_width(dim, resid_out, normed, resid, x, w_post, w_pre))) {                                  \
            sandwich_scalar(resid_out, normed, resid, x, w_post, w_pre, rows, dim, eps, red);                                        \
            return;                                                                                                                  \
        }                                                                                                                            \
        if ((int)blockIdx.x < rows) sandwich_rows<C_>(resid_out, normed, resid, x, w_post, w_pre, rows, dim, eps, red);             \
    }
NORM_PIPE_ENTRIES(SANDWICH_PIPE_ENTRY)

// ---------------------------------------------------------------- layer_out

// t = bf16(x*inv*w); s = bf16(mid + t); out = bf16(s * scalar).
template <int V>
__device__ __forceinline__ void layer_out_chunk(bf16* out, const BfVec<V>& mv, const BfVec<V>& xv, const bf16* w, int e, float inv, float scalar) {
    float wf[V], f[V];
    load_w<V>(wf, w, e);
#pragma unroll
    for (int i = 0; i < V; ++i) {
        float t = round_bf16_rn(vget<V>(xv, i) * inv * wf[i]);
        float s = round_bf16_rn(vget<V>(mv, i) + t);
        f[i] = s * scalar;
    }
    BfVec<V> o;
    vpack_rn<V>(o, f);
    vstore<V>(out + e, o);
}

template <int V, int C>
__device__ __forceinline__ void layer_out_row(bf16* out, const bf16* mid, const bf16* x, const bf16* w, float scalar, int dim, float eps,
                                              float* red) {
    const int n = dim / V;
    BfVec<V> cx[C], cm[C];
#pragma unroll
    for (int j = 0; j < C; ++j) {
        if (slot(j) < n) {
            vload_x<V>(cx[j], x + (size_t)slot(j) * V);
            vload_rw<V>(cm[j], mid + (size_t)slot(j) * V);
        }
    }
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

template <int C>
__device__ __forceinline__ void layer_out_finish(const BfVec<8> (&cx)[C], const BfVec<8> (&cm)[C], bf16* out, const bf16* w, float scalar, int n,
                                                 int dim, float eps, float* red) {
    const float inv = inv_rms(cached_sumsq<8, C>(cx, n), dim, eps, red);
#pragma unroll
    for (int j = 0; j < C; ++j)
        if (slot(j) < n) layer_out_chunk<8>(out, cm[j], cx[j], w, slot(j) * 8, inv, scalar);
}

template <int C>
__device__ __forceinline__ void layer_out_rows(bf16* out, const bf16* mid, const bf16* x, const bf16* w, float scalar, int rows, int dim, float eps,
                                               float* red) {
    const int n = dim / 8, G = gridDim.x;
    BfVec<8> xa[C], xb[C], cm[C];
    int r = blockIdx.x;
    ld_row_x<C>(xa, x + (size_t)r * dim, n);
    ld_row_rw<C>(cm, mid + (size_t)r * dim, n);
    for (;;) {
        const int r1 = r + G;
        if (r1 < rows) ld_row_x<C>(xb, x + (size_t)r1 * dim, n);
        layer_out_finish<C>(xa, cm, out + (size_t)r * dim, w, scalar, n, dim, eps, red);
        if (r1 >= rows) return;
        ld_row_rw<C>(cm, mid + (size_t)r1 * dim, n);
        const int r2 = r1 + G;
        if (r2 < rows) ld_row_x<C>(xa, x + (size_t)r2 * dim, n);
        layer_out_finish<C>(xb, cm, out + (size_t)r1 * dim, w, scalar, n, dim, eps, red);
        if (r2 >= rows) return;
        ld_row_rw<C>(cm, mid + (size_t)r2 * dim, n);
        r = r2;
    }
}

__device__ __forceinline__ void layer_out_simple(bf16* out, const bf16* mid, const bf16* x, const bf16* w, float scalar, int rows, int dim, float eps,
                                              float* red) {
    const int v = pick_width(dim, out, mid, x, w, nullptr);
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const size_t off = (size_t)r * dim;
#define LAYER_OUT_CALL(V_, C_) layer_out_row<V_, C_>(out + off, mid + off, x + off, w, scalar, dim, eps, red)
        NORM_SIMPLE_DISPATCH(v, LAYER_OUT_CALL);
#undef LAYER_OUT_CALL
    }
}

extern "C" __global__ void NORM_BOUNDS layer_out_bf16(bf16* out, const bf16* mid, const bf16* x, const bf16* w, const float* layer_scalar, int rows,
                                                       int dim, float eps) {
    sy_allow_next(); // a dependent GEMV after this may start now (file header)
    sy_wait_prior();
    __shared__ float red[32];
    layer_out_simple(out, mid, x, w, *layer_scalar, rows, dim, eps, red);
}

__device__ __noinline__ void layer_out_scalar(bf16* out, const bf16* mid, const bf16* x, const bf16* w, const float* layer_scalar, int rows, int dim,
                                              float eps, float* red) {
    const float scalar = *layer_scalar;
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const size_t off = (size_t)r * dim;
        float ss = 0.0f;
        for (int k = threadIdx.x; k < dim; k += blockDim.x) ss = fmaf(bf16_to_f32(x[off + k]), bf16_to_f32(x[off + k]), ss);
        const float inv = inv_rms(ss, dim, eps, red);
        for (int k = threadIdx.x; k < dim; k += blockDim.x) {
            const float t = round_bf16(bf16_to_f32(x[off + k]) * inv * (w ? bf16_to_f32(w[k]) : 1.0f));
            out[off + k] = f32_to_bf16(round_bf16(bf16_to_f32(mid[off + k]) + t) * scalar);
        }
    }
}

#define LAYER_OUT_PIPE_ENTRY(C_)                                                                                                    \
    extern "C" __global__ void NORM_BOUNDS layer_out_bf16_c##C_(bf16* out, const bf16* mid, const bf16* x, const bf16* w,          \
                                                              const float* layer_scalar, int rows, int dim, float eps) {          \
        sy_allow_next();                                                                                        \
        sy_wait_prior();                                                                                        \
        __shared__ float red[32];                                                                                                   \
        if (!pipe_fits(dim, C_, pick_width(dim, out, mid, x, w, nullptr))) {                                                       \
            layer_out_scalar(out, mid, x, w, layer_scalar, rows, dim, eps, red);                                                    \
            return;                                                                                                                 \
        }                                                                                                                           \
        if ((int)blockIdx.x < rows) layer_out_rows<C_>(out, mid, x, w, *layer_scalar, rows, dim, eps, red);                         \
    }
NORM_PIPE_ENTRIES(LAYER_OUT_PIPE_ENTRY)
