// qkv_prep: not launched as programmatic dependents (no `dependent-launch:` line):
// with nothing to load before sy_wait_prior(), early-launched blocks would
// only hold SM slots; their sy_allow_next() at the start lets a GEMV after
// them launch early and stream its weights meanwhile.
// q/k/v RMSNorm + rotate-half RoPE + paged KV write.
//
// Plan (rope_kv/mod.rs, `cuda_qkv_prep`): a persistent grid of blocks of
// QKV_THREADS (4 warps), at most one wave: QKV_MIN_BLOCKS blocks an SM,
// which QKV_BOUNDS guarantees (the compiler keeps to 65536 / (5 * 128) =
// 102 registers). The work is a list of head vectors: row r has E = nh +
// 2 nkv of them, the nh query heads, then K and V of each KV head in turn
// (k0, v0, k1, v1, ...). A warp takes U consecutive vectors of one row (a
// group; groups = rows * ceil(E / U)) and walks the groups with a grid-wide
// stride. One warp per vector, so each norm is a warp reduction (no shared
// memory, no block barrier), and U vectors per warp keep U head loads in
// flight: before the U reductions every one of the group's loads is issued
// (U vectors, their (cos, sin) row), and the next group's row indices (pmap,
// pos, slot) are fetched while this group is computed, so a warp waits for
// one memory round trip per group.
//
// The 196,608 one-head blocks of the old grid [rows, nh + nkv] were bound
// by the block scheduler (~1.6 blocks/ns measured on the H200: 0.12 ms of
// the 0.146 ms); this grid launches 660 blocks on an H200.
//
// A launch whose vectors fit in the grid's warps (decode) takes U = 1: one
// vector a warp, its norm weight loaded with its data.
//
// Fast path: hd = 64 V with V in {1, 2, 4, 8} (hd 64, 128, 256, 512) and
// every vector pointer aligned to V bf16 (the (cos, sin) table to 16 bytes,
// 8 at V = 1): lane l owns elements [lV, lV + V) of each half, so
// rotate-half pairs meet in its registers. U = 8 vectors a group (3 at hd
// 512, to stay under the register cap without spilling): at hd 256 a warp
// has 8 x 512 bytes in flight, an SM 20 warps x 4 KiB = 80 KiB. Other shapes
// take a simple path (one vector at a time, lanes striding over the half, a
// second read for the stores).
//
// Invalid indices are clamped for the loads and decide only what is stored
// (no branch on a loaded value in front of the loads): a bad source row or
// position stores NaN; a KV slot outside the pool skips the KV stores.

#define QKV_THREADS 128
#define QKV_MIN_BLOCKS 5
#define QKV_BOUNDS __launch_bounds__(QKV_THREADS, QKV_MIN_BLOCKS)

// 8-byte vectors (4 bf16).
template <> __device__ __forceinline__ void vload<4>(BfVec<4>& v, const bf16* p) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    v.w[0] = u.x;
    v.w[1] = u.y;
}
template <> __device__ __forceinline__ void vstore<4>(bf16* p, const BfVec<4>& v) { *reinterpret_cast<uint2*>(p) = make_uint2(v.w[0], v.w[1]); }

// Row indices of a group, loaded ahead of their use (kept in place).
__device__ __forceinline__ int ld_i32_v(const int* p) {
    int r;
    asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
}

struct RowMeta {
    int r, s, p, sl;
};

__device__ __forceinline__ RowMeta load_meta(long long g, int gpr, const int* pmap, const int* pos, const int* slot) {
    RowMeta m;
    m.r = (int)(g / gpr);
    m.s = pmap ? ld_i32_v(pmap + m.r) : m.r;
    m.p = ld_i32_v(pos + m.r);
    m.sl = slot ? ld_i32_v(slot + m.r) : 0;
    return m;
}

// Everything about one launch that the vector loops read.
struct Qkv {
    bf16 *q_out, *k_pool, *v_pool;
    const bf16 *q_raw, *k_raw, *v_raw, *q_norm, *k_norm;
    const float* cos_sin;
    int nh, nkv, hd, rows, src_rows, max_pos, num_slots;
    float eps;
};

// Head vector e of a row: source, destination, weight, rotation, store.
struct Vec {
    const bf16* src;
    bf16* dst;
    const bf16* w;
    bool rot, store;
};

__device__ __forceinline__ Vec head_vector(const Qkv& a, int e, int r, int s, int sl, bool slot_ok) {
    Vec v;
    if (e < a.nh) {
        v.src = a.q_raw + ((size_t)s * a.nh + e) * a.hd;
        v.dst = a.q_out + ((size_t)r * a.nh + e) * a.hd;
        v.w = a.q_norm;
        v.rot = true;
        v.store = true;
    } else {
        const int j = (e - a.nh) >> 1;
        const bool is_v = (e - a.nh) & 1;
        v.src = (is_v ? a.v_raw : a.k_raw) + ((size_t)s * a.nkv + j) * a.hd;
        v.dst = (is_v ? a.v_pool : a.k_pool) + ((size_t)(slot_ok ? sl : 0) * a.nkv + j) * a.hd;
        v.w = is_v ? nullptr : a.k_norm;
        v.rot = !is_v;
        v.store = slot_ok;
    }
    return v;
}

// The source row of head vector e (the loads' half of head_vector).
__device__ __forceinline__ const bf16* head_source(const Qkv& a, int e, int s) {
    if (e < a.nh) return a.q_raw + ((size_t)s * a.nh + e) * a.hd;
    const int j = (e - a.nh) >> 1;
    return (((e - a.nh) & 1) ? a.v_raw : a.k_raw) + ((size_t)s * a.nkv + j) * a.hd;
}

// One lane's share of a head vector: V elements of each half.
template <int V>
struct Halves {
    BfVec<V> lo, hi;
};

// V (cos, sin) pairs starting at pair c.
template <int V>
__device__ __forceinline__ void load_cs(float* c, float* s, const float* cs, int pair) {
    if constexpr (V == 1) {
        const float2 f = *reinterpret_cast<const float2*>(cs + 2 * pair);
        c[0] = f.x;
        s[0] = f.y;
    } else {
        const float4* q = reinterpret_cast<const float4*>(cs + 2 * pair);
#pragma unroll
        for (int i = 0; i < V / 2; ++i) {
            const float4 f = q[i];
            c[2 * i] = f.x;
            s[2 * i] = f.y;
            c[2 * i + 1] = f.z;
            s[2 * i + 1] = f.w;
        }
    }
}

// Normalises (weight w may be absent: has_w), rounds to bf16, optionally
// rotates, and stores lane's V elements of each half; `bad` stores NaN.
// The rotation is unfused (a·cos − b·sin with each product rounded), as the
// reference computes it.
template <int V>
__device__ __forceinline__ void emit(bf16* dst, const Halves<V>& x, const Halves<V>& w, bool has_w, const float* c, const float* s, bool rot,
                                     float inv, int half, int at, bool bad) {
    float ol[V], oh[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
        const float wl = has_w ? vget<V>(w.lo, i) : 1.0f;
        const float wh = has_w ? vget<V>(w.hi, i) : 1.0f;
        // The normalised values are rounded to bf16 before RoPE (contract).
        const float a = round_bf16_rn(vget<V>(x.lo, i) * inv * wl);
        const float b = round_bf16_rn(vget<V>(x.hi, i) * inv * wh);
        if (rot) {
            ol[i] = __fsub_rn(__fmul_rn(a, c[i]), __fmul_rn(b, s[i]));
            oh[i] = __fadd_rn(__fmul_rn(b, c[i]), __fmul_rn(a, s[i]));
        } else {
            ol[i] = a;
            oh[i] = b;
        }
    }
    BfVec<V> sl, sh;
    if (bad) {
        vnan<V>(sl);
        vnan<V>(sh);
    } else if (V == 1) {
        sl.w[0] = f32_to_bf16(ol[0]);
        sh.w[0] = f32_to_bf16(oh[0]);
    } else {
#pragma unroll
        for (int i = 0; i < V / 2; ++i) {
            sl.w[i] = pack_bf16_rn(ol[2 * i], ol[2 * i + 1]);
            sh.w[i] = pack_bf16_rn(oh[2 * i], oh[2 * i + 1]);
        }
    }
    vstore<V>(dst + at, sl);
    vstore<V>(dst + half + at, sh);
}

// Fast path: a warp's walk over its groups of U vectors.
template <int V, int U>
__device__ __forceinline__ void qkv_fast(const Qkv& a, const int* pos, const int* slot, const int* pmap) {
    const int lane = threadIdx.x & 31, half = a.hd / 2, at = lane * V;
    const int E = a.nkv > 0 ? a.nh + 2 * a.nkv : a.nh;
    const int gpr = (E + U - 1) / U;
    const long long groups = (long long)a.rows * gpr;
    const long long W = (long long)gridDim.x * (blockDim.x >> 5);
    long long g = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (g >= groups) return;
    RowMeta m = load_meta(g, gpr, pmap, pos, slot);
    for (;;) {
        const long long g1 = g + W;
        RowMeta m1 = m;
        if (g1 < groups) m1 = load_meta(g1, gpr, pmap, pos, slot);

        const int e0 = (int)(g - (long long)m.r * gpr) * U;
        const bool bad_s = m.s < 0 || m.s >= a.src_rows, bad_p = m.p < 0 || m.p >= a.max_pos;
        const bool bad = bad_s || bad_p;
        const int s = bad_s ? 0 : m.s;
        const bool slot_ok = m.sl >= 0 && m.sl < a.num_slots;
        // Issue every load of the group: U vectors and the (cos, sin) row.
        // Only the data is kept across the reductions; each vector's
        // destination is recomputed for its stores.
        Halves<V> x[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int e = e0 + u;
            if (e < E) {
                const bf16* src = head_source(a, e, s);
                vload<V>(x[u].lo, src + at);
                vload<V>(x[u].hi, src + half + at);
            }
        }
        // One vector a warp: its norm weight goes out with the data, so the
        // warp waits for one memory round trip, not two.
        Halves<V> w1;
        const bf16* w1p = U == 1 && e0 < E ? (e0 < a.nh ? a.q_norm : (((e0 - a.nh) & 1) ? nullptr : a.k_norm)) : nullptr;
        if (w1p) {
            vload<V>(w1.lo, w1p + at);
            vload<V>(w1.hi, w1p + half + at);
        }
        float cs_c[V], cs_s[V];
        load_cs<V>(cs_c, cs_s, a.cos_sin + (size_t)(bad_p ? 0 : m.p) * a.hd, at);
        float ss[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float t = 0.0f;
#pragma unroll
            for (int i = 0; i < V; ++i) {
                const float lo = vget<V>(x[u].lo, i), hi = vget<V>(x[u].hi, i);
                t = fmaf(lo, lo, t);
                t = fmaf(hi, hi, t);
            }
            ss[u] = t;
        }
        // The U warp reductions interleaved.
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
            for (int u = 0; u < U; ++u) ss[u] += __shfl_xor_sync(0xffffffffu, ss[u], o);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int e = e0 + u;
            if (e < E) {
                const Vec v = head_vector(a, e, m.r, s, m.sl, slot_ok);
                if (v.store) {
                    const float inv = 1.0f / sqrtf(ss[u] / (float)a.hd + a.eps);
                    // The weight rows are tiny and shared by every warp: L1 serves them.
                    Halves<V> w = w1;
                    if (U > 1 && v.w) {
                        vload<V>(w.lo, v.w + at);
                        vload<V>(w.hi, v.w + half + at);
                    }
                    emit<V>(v.dst, x[u], w, v.w != nullptr, cs_c, cs_s, v.rot, inv, half, at, bad);
                }
            }
        }
        if (g1 >= groups) return;
        g = g1;
        m = m1;
    }
}

// Simple path: any even hd and alignment; a warp per vector, lanes striding
// over the half, the data re-read for the stores.
__device__ __forceinline__ void qkv_simple(const Qkv& a, const int* pos, const int* slot, const int* pmap) {
    const int lane = threadIdx.x & 31, half = a.hd / 2;
    const int E = a.nkv > 0 ? a.nh + 2 * a.nkv : a.nh;
    const long long items = (long long)a.rows * E;
    const long long W = (long long)gridDim.x * (blockDim.x >> 5);
    for (long long t = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); t < items; t += W) {
        const int r = (int)(t / E), e = (int)(t % E);
        const int s0 = pmap ? pmap[r] : r, p = pos[r], sl = slot ? slot[r] : 0;
        const bool bad_s = s0 < 0 || s0 >= a.src_rows, bad_p = p < 0 || p >= a.max_pos;
        const bool bad = bad_s || bad_p;
        const bool slot_ok = sl >= 0 && sl < a.num_slots;
        const Vec v = head_vector(a, e, r, bad_s ? 0 : s0, sl, slot_ok);
        if (!v.store) continue;
        const float* cs = a.cos_sin + (size_t)(bad_p ? 0 : p) * a.hd;
        float ss = 0.0f;
        for (int i = lane; i < half; i += 32) {
            const float lo = bf16_to_f32(v.src[i]), hi = bf16_to_f32(v.src[half + i]);
            ss = fmaf(lo, lo, ss);
            ss = fmaf(hi, hi, ss);
        }
        ss = warp_sum(ss);
        const float inv = 1.0f / sqrtf(ss / (float)a.hd + a.eps);
        for (int i = lane; i < half; i += 32) {
            const float wl = v.w ? bf16_to_f32(v.w[i]) : 1.0f, wh = v.w ? bf16_to_f32(v.w[half + i]) : 1.0f;
            const float x0 = round_bf16_rn(bf16_to_f32(v.src[i]) * inv * wl);
            const float x1 = round_bf16_rn(bf16_to_f32(v.src[half + i]) * inv * wh);
            float o0 = x0, o1 = x1;
            if (v.rot) {
                const float c = cs[2 * i], sn = cs[2 * i + 1];
                o0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
                o1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, sn));
            }
            v.dst[i] = bad ? SY_NAN_BF16 : f32_to_bf16(o0);
            v.dst[half + i] = bad ? SY_NAN_BF16 : f32_to_bf16(o1);
        }
    }
}

__device__ __forceinline__ bool ok_align(const void* p, int bytes) { return !p || (((unsigned long long)p) & (unsigned long long)(bytes - 1)) == 0ull; }

extern "C" __global__ void QKV_BOUNDS qkv_prep_bf16(bf16* q_out, bf16* k_pool, bf16* v_pool, const bf16* q_raw, const bf16* k_raw, const bf16* v_raw,
                                                  const bf16* q_norm, const bf16* k_norm, const float* cos_sin, const int* pos, const int* slot, int nh,
                                                  int nkv, int hd, float eps, const int* pmap, int rows, int src_rows, int max_pos, int num_slots) {
    sy_allow_next(); // a dependent GEMV after this may start now (file header)
    sy_wait_prior();
    // nkv <= 0: queries only (E = nh), the KV pointers are never touched.
    if (nkv <= 0) slot = nullptr;
    const Qkv a{q_out, k_pool, v_pool, q_raw, k_raw, v_raw, q_norm, k_norm, cos_sin, nh, nkv, hd, rows, src_rows, max_pos, num_slots, eps};
    // The widest lane vector the shape and every pointer allow: hd = 64 V.
    int vw = (hd % 64 == 0) ? hd / 64 : 0;
    if (vw != 1 && vw != 2 && vw != 4 && vw != 8) vw = 0;
    const void* vecs[8] = {q_out, k_pool, v_pool, q_raw, k_raw, v_raw, q_norm, k_norm};
#pragma unroll
    for (int i = 0; i < 8; ++i)
        if (vw && !ok_align(vecs[i], 2 * vw)) vw = 0;
    if (vw && !ok_align(cos_sin, vw == 1 ? 8 : 16)) vw = 0;
    // A launch with no more vectors than warps (decode: the plan sizes the
    // grid so) takes one vector a warp: the vectors' latencies then overlap
    // across warps instead of adding up in one warp's loop.
    const long long vectors = (long long)rows * (nkv > 0 ? nh + 2 * nkv : nh);
    const bool one = vectors <= (long long)gridDim.x * (blockDim.x >> 5);
    switch (one ? vw : vw + 16) {
        case 1: qkv_fast<1, 1>(a, pos, slot, pmap); break;
        case 2: qkv_fast<2, 1>(a, pos, slot, pmap); break;
        case 4: qkv_fast<4, 1>(a, pos, slot, pmap); break;
        case 8: qkv_fast<8, 1>(a, pos, slot, pmap); break;
        case 17: qkv_fast<1, 8>(a, pos, slot, pmap); break;
        case 18: qkv_fast<2, 8>(a, pos, slot, pmap); break;
        case 20: qkv_fast<4, 8>(a, pos, slot, pmap); break;
        case 24: qkv_fast<8, 3>(a, pos, slot, pmap); break;
        default: qkv_simple(a, pos, slot, pmap);
    }
}
