// The embedding gathers: not launched as programmatic dependents (no `dependent-launch:` line):
// with nothing to load before sy_wait_prior(), early-launched blocks would
// only hold SM slots; their sy_allow_next() at the start lets a GEMV after
// them launch early and stream its weights meanwhile.
// Embedding gathers. Plan (embed/mod.rs): a persistent grid of min(rows,
// SMs * B) blocks of T = norm_block(h) <= 128 threads (96 for h = 5376, so a
// thread owns 7 chunks of 8 elements of a row), B = the blocks an SM holds at
// the 128-register cap (5 for T = 96). Block b copies rows b, b + grid, ...
//
// Pure streaming. Pipelined path (16-byte output vectors, a row that fits
// C <= 8 chunks per thread): while row r is converted and stored, the loads
// of row r + grid are already in flight and the index of row r + 2 grid is
// being fetched, so the chain ids[r] -> table row -> store never stalls a
// block and every block always has a row of loads outstanding. Other shapes
// (h not a multiple of 8, unaligned pointers, rows over 8 chunks a thread)
// take a simple path: one row at a time with every load of a chunk group
// issued before its stores. An index outside the table writes a NaN row.

#define EMBED_MAXC 8
// Blocks of up to 128 threads at up to 128 registers: the plan counts on
// floor(16 / warps) resident blocks per SM (norm/mod.rs, ROW_REG_CAP).
#define EMBED_BOUNDS __launch_bounds__(128, 4)

// Index load issued ahead of its use (kept in place, see ld_stream16_v).
__device__ __forceinline__ int ld_index_v(const int* p) {
    int r;
    asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ void nan_row(bf16* out, int h) {
    for (int k = threadIdx.x; k < h; k += blockDim.x) out[k] = SY_NAN_BF16;
}

// Chunk index of slot j for this thread.
__device__ __forceinline__ int eslot(int j) { return threadIdx.x + j * blockDim.x; }

// ---------------------------------------------------------------- the pipelined row loop

// A gather kind K provides, for rows of n chunks:
//   typedef In;                          what one chunk's load holds
//   int source(int r)                    the table row of output row r, or -1
//   float aux(int s)                     a per-source value (fp8 row scale), s >= 0
//   void load(In&, int s, int k)         chunk k of source row s
//   uint4 convert(const In&, float aux)  the 8 output bf16 of a chunk
// Out-of-range sources store NaN chunks.
template <int C, class K>
__device__ __forceinline__ void load_row(const K& k, typename K::In (&c)[C], int s) {
#pragma unroll
    for (int j = 0; j < C; ++j)
        if (eslot(j) < k.n) k.load(c[j], s, eslot(j));
}

template <int C, class K>
__device__ __forceinline__ void store_row(const K& k, const typename K::In (&c)[C], uint4* out, int s, float aux) {
#pragma unroll
    for (int j = 0; j < C; ++j)
        if (eslot(j) < k.n) out[eslot(j)] = s >= 0 ? k.convert(c[j], aux) : make_uint4(0x7fc07fc0u, 0x7fc07fc0u, 0x7fc07fc0u, 0x7fc07fc0u);
}

template <int C, class K>
__device__ __forceinline__ void gather_rows(const K& k, uint4* out, int rows) {
    const int G = gridDim.x;
    typename K::In a[C], b[C];
    int r = blockIdx.x;
    int s = k.source(r);
    float x = s >= 0 ? k.aux(s) : 0.0f;
    if (s >= 0) load_row<C>(k, a, s);
    int r1 = r + G;
    int s1 = r1 < rows ? k.source(r1) : -1;
    for (;;) {
        // Two rows per trip so the register buffers swap roles without copies.
        float x1 = 0.0f;
        if (s1 >= 0) {
            x1 = k.aux(s1);
            load_row<C>(k, b, s1);
        }
        const int r2 = r1 + G;
        const int s2 = r2 < rows ? k.source(r2) : -1;
        store_row<C>(k, a, out + (size_t)r * k.n, s, x);
        if (r1 >= rows) return;
        float x2 = 0.0f;
        if (s2 >= 0) {
            x2 = k.aux(s2);
            load_row<C>(k, a, s2);
        }
        const int r3 = r2 + G;
        const int s3 = r3 < rows ? k.source(r3) : -1;
        store_row<C>(k, b, out + (size_t)r1 * k.n, s1, x1);
        if (r2 >= rows) return;
        r = r2, s = s2, x = x2, r1 = r3, s1 = s3;
    }
}

// Calls CALL(C) with C = chunks per thread (1..8); sets piped = false when a row needs more.
#define EMBED_PIPE_DISPATCH(N, CALL)                                      \
    switch (((N) + (int)blockDim.x - 1) / (int)blockDim.x) {              \
        case 0:                                                           \
        case 1: CALL(1); break;                                           \
        case 2: CALL(2); break;                                           \
        case 3: CALL(3); break;                                           \
        case 4: CALL(4); break;                                           \
        case 5: CALL(5); break;                                           \
        case 6: CALL(6); break;                                           \
        case 7: CALL(7); break;                                           \
        case 8: CALL(8); break;                                           \
        default: piped = false;                                           \
    }

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
    __device__ void load(uint2& c, int s, int k) const { c = ld_stream8_v(table + (size_t)s * n + k); }
    __device__ uint4 convert(const uint2& c, float rs) const { return fp8x8_to_bf16(c, rs, scale); }
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
    if ((int)blockIdx.x >= rows) return;
    bool piped = (h % 8) == 0 && aligned8(table) && aligned16(out);
    if (piped) {
        const Fp8Gather k{reinterpret_cast<const uint2*>(table), row_scale, ids, h / 8, vocab, scale};
#define FP8_PIPE(C_) gather_rows<C_>(k, reinterpret_cast<uint4*>(out), rows)
        EMBED_PIPE_DISPATCH(h / 8, FP8_PIPE);
#undef FP8_PIPE
    }
    if (piped) return;
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
    __device__ void load(uint4& c, int s, int k) const { c = ld_stream16_v(table + (size_t)s * n + k); }
    __device__ uint4 convert(const uint4& c, float) const {
        return make_uint4(scale_pair(c.x, scale), scale_pair(c.y, scale), scale_pair(c.z, scale), scale_pair(c.w, scale));
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
    if ((int)blockIdx.x >= rows) return;
    bool piped = (h % 8) == 0 && aligned16(table) && aligned16(out);
    if (piped) {
        const Bf16Gather k{reinterpret_cast<const uint4*>(table), ids, h / 8, vocab, scale};
#define BF_PIPE(C_) gather_rows<C_>(k, reinterpret_cast<uint4*>(out), rows)
        EMBED_PIPE_DISPATCH(h / 8, BF_PIPE);
#undef BF_PIPE
    }
    if (piped) return;
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
    __device__ void load(uint4& c, int s, int k) const { c = ld_stream16_v(src + (size_t)s * n + k); }
    __device__ uint4 convert(const uint4& c, float) const { return c; }
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
    if ((int)blockIdx.x >= rows) return;
    bool piped = (h % 8) == 0 && aligned16(src) && aligned16(out);
    if (piped) {
        const CopyGather k{reinterpret_cast<const uint4*>(src), idx, h / 8, n_src};
#define COPY_PIPE(C_) gather_rows<C_>(k, reinterpret_cast<uint4*>(out), rows)
        EMBED_PIPE_DISPATCH(h / 8, COPY_PIPE);
#undef COPY_PIPE
    }
    if (piped) return;
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
