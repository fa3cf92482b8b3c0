// The embedding gathers: not launched as programmatic dependents (no `dependent-launch:` line):
// with nothing to load before sy_wait_prior(), early-launched blocks would
// only hold SM slots; their sy_allow_next() at the start lets a GEMV after
// them launch early and stream its weights meanwhile.
// Embedding gathers. Plan (embed/mod.rs): min(SMs * EMBED_BLOCKS, enough
// blocks for EMBED_U chunks a thread) blocks of EMBED_THREADS threads.
//
// Pure streaming. Flat path (16-byte output vectors): the output is rows x n
// chunks (a chunk: 8 output elements, 16 for the fp8 table when h % 16 == 0,
// read as 16 codes), cut into one contiguous run of chunks a block, equal to
// within one chunk. A thread takes every blockDim-th chunk of its block's
// run, U at a time: the U row indices, then the U table loads, then the U
// stores, so each thread keeps U 16-byte loads in flight. The row-a-block
// loop this replaced gave blocks whole rows (6.2 on average at the bench
// shape, so 136 of 660 blocks copied 7) and ended on that imbalance at
// 71-79% of copy. Other shapes (h not a multiple of 8, unaligned pointers)
// take a simple path: one row at a time with every load of a chunk group
// issued before its stores. An index outside the table writes a NaN row.

#define EMBED_MAXC 8
// The plan's geometry (embed/mod.rs checks these against its constants):
// EMBED_BLOCKS blocks of EMBED_THREADS resident an SM (at most 64 registers).
#define EMBED_THREADS 256
#define EMBED_BLOCKS 4
// Chunks in flight a thread: 16-byte table loads (bf16 rows, copies), or
// 8-byte ones (fp8 rows of h % 16 == 8); 8 spilled at the 64-register cap.
#define EMBED_U 6
// 16-byte loads of 16 fp8 codes (two output vectors each).
#define EMBED_U_FP8 4
#define EMBED_BOUNDS __launch_bounds__(EMBED_THREADS, EMBED_BLOCKS)

// Index load issued ahead of its use (kept in place, see ld_stream16_v).
__device__ __forceinline__ int ld_index_v(const int* p) {
    int r;
    asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ void nan_row(bf16* out, int h) {
    for (int k = threadIdx.x; k < h; k += blockDim.x) out[k] = SY_NAN_BF16;
}

// ---------------------------------------------------------------- the flat chunk loop

// A gather kind K provides, for an output of rows x n chunks:
//   typedef In;                          what one chunk's load holds
//   int n                                chunks a row
//   int source(int r)                    the table row of output row r, or -1
//   float aux(int s)                     a per-source value (fp8 row scale), s >= 0
//   void load(In&, int s, int k)         chunk k of source row s
//   void store(uint4* o, In, int s, float aux)  chunk at o (OUTV 16-byte vectors; NaN for s < 0)
template <int U, class K>
__device__ __forceinline__ void gather_flat(const K& k, uint4* out, int rows) {
    const int T = blockDim.x, n = k.n;
    const long long total = (long long)rows * n;
    const long long per = (total + gridDim.x - 1) / gridDim.x;
    const long long c1 = min(total, ((long long)blockIdx.x + 1) * per);
    long long c = (long long)blockIdx.x * per + threadIdx.x;
    if (c >= c1) return;
    // (r, kk): row and chunk within the row of chunk c, advanced by T a slot
    // without a division unless a slot crosses into another row.
    int r = (int)(c / n), kk = (int)(c - (long long)r * n);
    for (; c < c1; c += (long long)U * T) {
        int s[U], kc[U];
        typename K::In v[U];
        float x[U];
#pragma unroll
        for (int j = 0; j < U; ++j) {
            s[j] = c + (long long)j * T < c1 ? k.source(r) : -1;
            kc[j] = kk;
            kk += T;
            if (kk >= n) {
                const int q = kk / n;
                r += q;
                kk -= q * n;
            }
        }
#pragma unroll
        for (int j = 0; j < U; ++j) {
            x[j] = 0.0f;
            if (s[j] >= 0) {
                x[j] = k.aux(s[j]);
                k.load(v[j], s[j], kc[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < U; ++j)
            if (c + (long long)j * T < c1) k.store(out + (size_t)(c + (long long)j * T) * K::OUTV, v[j], s[j], x[j]);
    }
}

#define EMBED_NAN4 make_uint4(0x7fc07fc0u, 0x7fc07fc0u, 0x7fc07fc0u, 0x7fc07fc0u)

// ---------------------------------------------------------------- fp8 table

// 8 fp8 codes -> 8 bf16: bf16(bf16(e4m3 * rs) * scale), two roundings, with
// the packed conversions (hardware e4m3x2 decode, two roundings per instruction).
__device__ __forceinline__ uint4 fp8x8_to_bf16(uint2 c, float rs, float scale) {
    float a[4], b[4];
    e4m3x4_to_f32(c.x, a);
    e4m3x4_to_f32(c.y, b);
    const unsigned p0 = pack_bf16_rn(a[0] * rs, a[1] * rs), p1 = pack_bf16_rn(a[2] * rs, a[3] * rs);
    const unsigned p2 = pack_bf16_rn(b[0] * rs, b[1] * rs), p3 = pack_bf16_rn(b[2] * rs, b[3] * rs);
    return make_uint4(pack_bf16_rn(bf16_lo(p0) * scale, bf16_hi(p0) * scale), pack_bf16_rn(bf16_lo(p1) * scale, bf16_hi(p1) * scale),
                      pack_bf16_rn(bf16_lo(p2) * scale, bf16_hi(p2) * scale), pack_bf16_rn(bf16_lo(p3) * scale, bf16_hi(p3) * scale));
}

struct Fp8Gather {
    typedef uint2 In;
    const uint2* table; // [vocab][n] 8-byte chunks
    const float* row_scale;
    const int* ids;
    int n, vocab;
    float scale;
    __device__ int source(int r) const {
        const int id = ld_index_v(ids + r);
        return id >= 0 && id < vocab ? id : -1;
    }
    __device__ float aux(int s) const { return row_scale[s]; }
    static constexpr int OUTV = 1;
    __device__ void load(uint2& c, int s, int k) const { c = ld_stream8_v(table + (size_t)s * n + k); }
    __device__ void store(uint4* o, const uint2& c, int s, float rs) const { *o = s >= 0 ? fp8x8_to_bf16(c, rs, scale) : EMBED_NAN4; }
};

// 16 codes a chunk (h % 16 == 0, 16-byte aligned table): 16-byte loads.
struct Fp8Gather16 {
    typedef uint4 In;
    const uint4* table; // [vocab][n] 16-byte chunks
    const float* row_scale;
    const int* ids;
    int n, vocab;
    float scale;
    __device__ int source(int r) const {
        const int id = ld_index_v(ids + r);
        return id >= 0 && id < vocab ? id : -1;
    }
    __device__ float aux(int s) const { return row_scale[s]; }
    static constexpr int OUTV = 2;
    __device__ void load(uint4& c, int s, int k) const { c = ld_stream16_v(table + (size_t)s * n + k); }
    __device__ void store(uint4* o, const uint4& c, int s, float rs) const {
        o[0] = s >= 0 ? fp8x8_to_bf16(make_uint2(c.x, c.y), rs, scale) : EMBED_NAN4;
        o[1] = s >= 0 ? fp8x8_to_bf16(make_uint2(c.z, c.w), rs, scale) : EMBED_NAN4;
    }
};

template <int C>
__device__ __forceinline__ void fp8_row(uint4* __restrict__ dst, const uint2* __restrict__ src, float rs, float scale, int n) {
    for (int base = threadIdx.x; base < n; base += C * blockDim.x) {
        uint2 c[C];
#pragma unroll
        for (int j = 0; j < C; ++j) {
            const int k = base + j * blockDim.x;
            if (k < n) c[j] = ld_stream8_u2(src + k);
        }
#pragma unroll
        for (int j = 0; j < C; ++j) {
            const int k = base + j * blockDim.x;
            if (k < n) dst[k] = fp8x8_to_bf16(c[j], rs, scale);
        }
    }
}

extern "C" __global__ void EMBED_BOUNDS embed_gather_fp8(bf16* __restrict__ out, const u8* __restrict__ table, const float* __restrict__ row_scale,
                                                        const int* __restrict__ ids, int rows, int h, int vocab, float scale) {
    sy_allow_next(); // a dependent GEMV after this may start now (file header)
    sy_wait_prior();
    if ((h % 16) == 0 && aligned16(table) && aligned16(out)) {
        const Fp8Gather16 k{reinterpret_cast<const uint4*>(table), row_scale, ids, h / 16, vocab, scale};
        gather_flat<EMBED_U_FP8>(k, reinterpret_cast<uint4*>(out), rows);
        return;
    }
    if ((h % 8) == 0 && aligned8(table) && aligned16(out)) {
        const Fp8Gather k{reinterpret_cast<const uint2*>(table), row_scale, ids, h / 8, vocab, scale};
        gather_flat<EMBED_U>(k, reinterpret_cast<uint4*>(out), rows);
        return;
    }
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const int id = ids[r];
        bf16* o = out + (size_t)r * h;
        if (id < 0 || id >= vocab) {
            nan_row(o, h);
            continue;
        }
        const u8* row = table + (size_t)id * h;
        const float rs = row_scale[id];
        if ((h % 8) == 0 && aligned8(row) && aligned16(o)) {
            fp8_row<EMBED_MAXC>(reinterpret_cast<uint4*>(o), reinterpret_cast<const uint2*>(row), rs, scale, h / 8);
        } else {
            for (int k = threadIdx.x; k < h; k += blockDim.x) o[k] = f32_to_bf16(round_bf16(e4m3_to_f32(row[k]) * rs) * scale);
        }
    }
}

// ---------------------------------------------------------------- bf16 table

__device__ __forceinline__ unsigned scale_pair(unsigned w, float scale) { return pack_bf16_rn(bf16_lo(w) * scale, bf16_hi(w) * scale); }

struct Bf16Gather {
    typedef uint4 In;
    const uint4* table; // [vocab][n] 16-byte chunks
    const int* ids;
    int n, vocab;
    float scale;
    __device__ int source(int r) const {
        const int id = ld_index_v(ids + r);
        return id >= 0 && id < vocab ? id : -1;
    }
    __device__ float aux(int) const { return 0.0f; }
    static constexpr int OUTV = 1;
    __device__ void load(uint4& c, int s, int k) const { c = ld_stream16_v(table + (size_t)s * n + k); }
    __device__ void store(uint4* o, const uint4& c, int s, float) const {
        *o = s >= 0 ? make_uint4(scale_pair(c.x, scale), scale_pair(c.y, scale), scale_pair(c.z, scale), scale_pair(c.w, scale)) : EMBED_NAN4;
    }
};

template <int V, int C>
__device__ __forceinline__ void scale_rows(bf16* __restrict__ out, const bf16* __restrict__ row, int n, float scale) {
    for (int base = threadIdx.x; base < n; base += C * blockDim.x) {
        BfVec<V> c[C];
#pragma unroll
        for (int j = 0; j < C; ++j) {
            const int k = base + j * blockDim.x;
            if (k < n) vload<V>(c[j], row + (size_t)k * V);
        }
#pragma unroll
        for (int j = 0; j < C; ++j) {
            const int k = base + j * blockDim.x;
            if (k < n) {
                BfVec<V> o;
                if (V == 1) {
                    o.w[0] = f32_to_bf16(vget<V>(c[j], 0) * scale);
                } else {
#pragma unroll
                    for (int i = 0; i < V / 2; ++i) o.w[i] = scale_pair(c[j].w[i], scale);
                }
                vstore<V>(out + (size_t)k * V, o);
            }
        }
    }
}

extern "C" __global__ void EMBED_BOUNDS embed_gather_bf16(bf16* __restrict__ out, const bf16* __restrict__ table, const int* __restrict__ ids, int rows,
                                                         int h, int vocab, float scale) {
    sy_allow_next(); // a dependent GEMV after this may start now (file header)
    sy_wait_prior();
    if ((h % 8) == 0 && aligned16(table) && aligned16(out)) {
        const Bf16Gather k{reinterpret_cast<const uint4*>(table), ids, h / 8, vocab, scale};
        gather_flat<EMBED_U>(k, reinterpret_cast<uint4*>(out), rows);
        return;
    }
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const int id = ids[r];
        bf16* o = out + (size_t)r * h;
        if (id < 0 || id >= vocab) {
            nan_row(o, h);
            continue;
        }
        const bf16* row = table + (size_t)id * h;
        if ((h % 8) == 0 && aligned16(row) && aligned16(o)) {
            scale_rows<8, 4>(o, row, h / 8, scale);
        } else if ((h % 2) == 0 && aligned4(row) && aligned4(o)) {
            scale_rows<2, 4>(o, row, h / 2, scale);
        } else {
            scale_rows<1, 4>(o, row, h, scale);
        }
    }
}

// ---------------------------------------------------------------- bit copy

struct CopyGather {
    typedef uint4 In;
    const uint4* src; // [n_src][n] 16-byte chunks
    const int* idx;
    int n, n_src;
    __device__ int source(int r) const {
        const int s = ld_index_v(idx + r);
        return s >= 0 && s < n_src ? s : -1;
    }
    __device__ float aux(int) const { return 0.0f; }
    static constexpr int OUTV = 1;
    __device__ void load(uint4& c, int s, int k) const { c = ld_stream16_v(src + (size_t)s * n + k); }
    __device__ void store(uint4* o, const uint4& c, int s, float) const { *o = s >= 0 ? c : EMBED_NAN4; }
};

template <typename T, int C>
__device__ __forceinline__ void copy_row(T* __restrict__ dst, const T* __restrict__ src, int n) {
    for (int base = threadIdx.x; base < n; base += C * blockDim.x) {
        T c[C];
#pragma unroll
        for (int j = 0; j < C; ++j) {
            int k = base + j * blockDim.x;
            if (k < n) c[j] = src[k];
        }
#pragma unroll
        for (int j = 0; j < C; ++j) {
            int k = base + j * blockDim.x;
            if (k < n) dst[k] = c[j];
        }
    }
}

extern "C" __global__ void EMBED_BOUNDS gather_rows_bf16(bf16* __restrict__ out, const bf16* __restrict__ src, const int* __restrict__ idx, int rows, int h,
                                                        int n_src) {
    if ((h % 8) == 0 && aligned16(src) && aligned16(out)) {
        const CopyGather k{reinterpret_cast<const uint4*>(src), idx, h / 8, n_src};
        gather_flat<EMBED_U>(k, reinterpret_cast<uint4*>(out), rows);
        return;
    }
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const int s = idx[r];
        bf16* o = out + (size_t)r * h;
        if (s < 0 || s >= n_src) {
            nan_row(o, h);
            continue;
        }
        const bf16* row = src + (size_t)s * h;
        if ((h % 8) == 0 && aligned16(row) && aligned16(o)) {
            copy_row<uint4, 4>(reinterpret_cast<uint4*>(o), reinterpret_cast<const uint4*>(row), h / 8);
        } else if ((h % 2) == 0 && aligned4(row) && aligned4(o)) {
            copy_row<unsigned, 4>(reinterpret_cast<unsigned*>(o), reinterpret_cast<const unsigned*>(row), h / 2);
        } else {
            copy_row<unsigned short, 4>(o, row, h);
        }
    }
}
