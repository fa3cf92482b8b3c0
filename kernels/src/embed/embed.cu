// Embedding gathers: one block per output row (plan: grid [rows], block
// `norm_block(h)`: 96 threads for h = 5376, so each thread owns 7 chunks of
// 8 elements). Pure streaming: a thread issues all of its loads (up to
// EMBED_MAXC chunks, in registers) before its first store, so the whole row
// is in flight at once; longer rows loop. Any block size works.

#define EMBED_MAXC 8
// Blocks of up to 256 threads (plan), registers uncapped for 8 cached chunks.
#define EMBED_BOUNDS __launch_bounds__(256)

__device__ __forceinline__ int embed_slots(int n) { return min(EMBED_MAXC, (n + (int)blockDim.x - 1) / (int)blockDim.x); }

// Calls F(C) with C in {1, 2, 3, 4, 6, 8}: the cached chunks per thread for n chunks.
#define EMBED_DISPATCH(N, CALL)                \
    do {                                       \
        const int need_ = embed_slots(N);      \
        if (need_ <= 1) CALL(1);               \
        else if (need_ <= 2) CALL(2);          \
        else if (need_ <= 3) CALL(3);          \
        else if (need_ <= 4) CALL(4);          \
        else if (need_ <= 6) CALL(6);          \
        else CALL(EMBED_MAXC);                 \
    } while (0)

__device__ __forceinline__ void nan_row(bf16* out, int h) {
    for (int k = threadIdx.x; k < h; k += blockDim.x) out[k] = SY_NAN_BF16;
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
    const int r = blockIdx.x;
    if (r >= rows) return;
    const int id = ids[r];
    out += (size_t)r * h;
    if (id < 0 || id >= vocab) {
        nan_row(out, h);
        return;
    }
    const u8* row = table + (size_t)id * h;
    const float rs = row_scale[id];
    if ((h % 8) == 0 && aligned8(row) && aligned16(out)) {
        const int n = h / 8;
        const uint2* src = reinterpret_cast<const uint2*>(row);
        uint4* dst = reinterpret_cast<uint4*>(out);
#define FP8_CALL(C_) fp8_row<C_>(dst, src, rs, scale, n)
        EMBED_DISPATCH(n, FP8_CALL);
#undef FP8_CALL
    } else {
        for (int k = threadIdx.x; k < h; k += blockDim.x) out[k] = f32_to_bf16(round_bf16(e4m3_to_f32(row[k]) * rs) * scale);
    }
}

// ---------------------------------------------------------------- bf16 table

// Streaming load of a vector (16-byte ones skip L1).
template <int V> __device__ __forceinline__ void vload_s(BfVec<V>& v, const bf16* p) { vload<V>(v, p); }
template <> __device__ __forceinline__ void vload_s<8>(BfVec<8>& v, const bf16* p) {
    const uint4 u = ld_stream16(p);
    v.w[0] = u.x;
    v.w[1] = u.y;
    v.w[2] = u.z;
    v.w[3] = u.w;
}

template <int V, int C>
__device__ __forceinline__ void scale_rows(bf16* __restrict__ out, const bf16* __restrict__ row, int n, float scale) {
    for (int base = threadIdx.x; base < n; base += C * blockDim.x) {
        BfVec<V> c[C];
#pragma unroll
        for (int j = 0; j < C; ++j) {
            const int k = base + j * blockDim.x;
            if (k < n) vload_s<V>(c[j], row + (size_t)k * V);
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
                    for (int i = 0; i < V / 2; ++i) o.w[i] = pack_bf16_rn(bf16_lo(c[j].w[i]) * scale, bf16_hi(c[j].w[i]) * scale);
                }
                vstore<V>(out + (size_t)k * V, o);
            }
        }
    }
}

extern "C" __global__ void EMBED_BOUNDS embed_gather_bf16(bf16* __restrict__ out, const bf16* __restrict__ table, const int* __restrict__ ids, int rows,
                                                         int h, int vocab, float scale) {
    const int r = blockIdx.x;
    if (r >= rows) return;
    const int id = ids[r];
    out += (size_t)r * h;
    if (id < 0 || id >= vocab) {
        nan_row(out, h);
        return;
    }
    const bf16* row = table + (size_t)id * h;
    if ((h % 8) == 0 && aligned16(row) && aligned16(out)) {
#define BF_CALL(C_) scale_rows<8, C_>(out, row, h / 8, scale)
        EMBED_DISPATCH(h / 8, BF_CALL);
#undef BF_CALL
    } else if ((h % 2) == 0 && aligned4(row) && aligned4(out)) {
        scale_rows<2, 4>(out, row, h / 2, scale);
    } else {
        scale_rows<1, 4>(out, row, h, scale);
    }
}

// ---------------------------------------------------------------- bit copy

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
    const int r = blockIdx.x;
    if (r >= rows) return;
    const int s = idx[r];
    out += (size_t)r * h;
    if (s < 0 || s >= n_src) {
        nan_row(out, h);
        return;
    }
    const bf16* row = src + (size_t)s * h;
    if ((h % 8) == 0 && aligned16(row) && aligned16(out)) {
#define COPY_CALL(C_) copy_row<uint4, C_>(reinterpret_cast<uint4*>(out), reinterpret_cast<const uint4*>(row), h / 8)
        EMBED_DISPATCH(h / 8, COPY_CALL);
#undef COPY_CALL
    } else if ((h % 2) == 0 && aligned4(row) && aligned4(out)) {
        copy_row<unsigned, 4>(reinterpret_cast<unsigned*>(out), reinterpret_cast<const unsigned*>(row), h / 2);
    } else {
        copy_row<unsigned short, 4>(out, row, h);
    }
}
