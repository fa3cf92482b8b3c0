// Switchyard CUDA prelude: prepended to every module before NVRTC compiles it.
//
// Self-contained on purpose (no CUDA headers): bf16 is carried as raw
// `unsigned short` bits and converted with bit operations, fp8 e4m3fn is
// decoded exactly with integer ops and one multiply. Vector types (uint4,
// float4), shuffles, atomics and the math library are NVRTC built-ins.

typedef unsigned short bf16;
typedef unsigned char u8;

#define SY_NAN_BF16 ((unsigned short)0x7fc0)
#define SY_INF __int_as_float(0x7f800000)
#define SY_NAN __int_as_float(0x7fc00000)

// ---------------------------------------------------------------- bf16

__device__ __forceinline__ float bf16_to_f32(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }
// The low / high bf16 of a packed pair, as f32.
__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

// Round-to-nearest-even f32 -> bf16, the same as `half::bf16::from_f32`:
// NaN keeps its sign and top payload bits with the quiet bit set.
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    return (unsigned)f32_to_bf16(lo) | ((unsigned)f32_to_bf16(hi) << 16);
}

// ---------------------------------------------------------------- fp8 e4m3fn

// Exact decode: the 7 magnitude bits placed at f32 bits 20..26 read as
// value * 2^-120 (normal codes map to normal floats, subnormal codes to f32
// subnormals, which NVRTC keeps since --ftz is off); one multiply by 2^120
// restores the value exactly. 0x7f / 0xff are NaN (e4m3fn has no infinity).
__device__ __forceinline__ float e4m3_to_f32(unsigned b) {
    unsigned mag = b & 0x7fu;
    float v = __uint_as_float(mag << 20) * 1.329227995784916e36f; // 2^120
    v = __uint_as_float(__float_as_uint(v) | ((b & 0x80u) << 24));
    return mag == 0x7fu ? SY_NAN : v;
}
// Byte `i` (0..3) of a word, decoded.
__device__ __forceinline__ float e4m3_byte(unsigned w, int i) { return e4m3_to_f32((w >> (8 * i)) & 0xffu); }
// Whether any of the four codes in `w` is a NaN (magnitude 0x7f): adding 1
// to each 7-bit magnitude carries into bit 7 only for 0x7f.
__device__ __forceinline__ bool e4m3x4_has_nan(unsigned w) { return (((w & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u) != 0u; }
// Decode without the NaN test, for callers that test a whole word with e4m3x4_has_nan.
__device__ __forceinline__ float e4m3_byte_nonan(unsigned w, int i) {
    unsigned b = (w >> (8 * i)) & 0xffu;
    float v = __uint_as_float((b & 0x7fu) << 20) * 1.329227995784916e36f;
    return __uint_as_float(__float_as_uint(v) | ((b & 0x80u) << 24));
}

// ---------------------------------------------------------------- NVFP4 (e2m1 codes, e4m3 scales) to bf16

// Four e2m1 codes (the low 16 bits of w: nibbles n0..n3) to bf16 pairs
// p01 = (n0, n1), p23 = (n2, n3), by table lookup with byte permutes: the
// low and high bytes of the bf16 magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6} are
// two 8-byte tables indexed by the 3 magnitude bits; the sign (nibble bit 3)
// goes to bf16 bit 15. The four sign bits (w bits 3, 7, 11, 15) reach bits
// 15 and 31 of their pair by one multiply each: s · (2^12 + 2^24) puts bit
// 3 at 15 and bit 7 at 31, s · (2^4 + 2^16) bit 11 at 15 and bit 15 at 31;
// the other shifted copies of s land on bits 7 to 27, where the only two
// that meet (at bit 27, or at bit 19) carry into bit 28 or 20, never into
// 15 or 31. About four integer ops per pair instead of a float decode.
__device__ __forceinline__ void e2m1x4_bf16(unsigned w, unsigned& p01, unsigned& p23) {
    const unsigned sel = w & 0x7777u, s = w & 0x8888u;
    const unsigned lo = __byte_perm(0xc0800000u, 0xc0804000u, sel);
    const unsigned hi = __byte_perm(0x3f3f3f00u, 0x40404040u, sel);
    p01 = __byte_perm(lo, hi, 0x5140) | ((s * 0x01001000u) & 0x80008000u);
    p23 = __byte_perm(lo, hi, 0x7362) | ((s * 0x00010010u) & 0x80008000u);
}

// An e4m3 scale as a bf16 pair (s, s); exact (e4m3 fits in bf16), NaN stays NaN.
__device__ __forceinline__ unsigned e4m3_bf16x2(unsigned byte) { return __byte_perm(__float_as_uint(e4m3_to_f32(byte)), 0u, 0x3232); }

// x * s for bf16 pairs. Exact here (the product fits in bf16), so rounding
// plays no part; adding -0 keeps the sign of a zero product.
__device__ __forceinline__ unsigned bf16x2_mul(unsigned x, unsigned s) {
    unsigned d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(x), "r"(s), "r"(0x80008000u));
    return d;
}

// ---------------------------------------------------------------- misc

__device__ __forceinline__ float softcap_f32(float x, float c) { return c > 0.0f ? c * tanhf(x / c) : x; }

__device__ __forceinline__ bool aligned16(const void* p) { return (((unsigned long long)p) & 15ull) == 0ull; }
__device__ __forceinline__ bool aligned8(const void* p) { return (((unsigned long long)p) & 7ull) == 0ull; }
__device__ __forceinline__ bool aligned4(const void* p) { return (((unsigned long long)p) & 3ull) == 0ull; }

// Streaming loads for data read exactly once (weights, activations on their
// way through): do not keep them in L1.
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

// ---------------------------------------------------------------- paged KV rows (flash prefill)

// Slot of key j of the block-table row `trow`, or -1 when its page entry is
// negative or the slot is outside the pool. j < max_pages * page is the caller's.
// pshift >= 0: page is 2^pshift (the usual case), a shift and a mask instead
// of the integer division's ~20 instructions a key row and tile.
__device__ __forceinline__ long long paged_slot(const int* trow, int j, int page, int pshift, int num_slots) {
    int pi, po;
    if (pshift >= 0) {
        pi = j >> pshift;
        po = j & (page - 1);
    } else {
        pi = j / page;
        po = j % page;
    }
    const int pg = trow[pi];
    if (pg < 0) return -1;
    const long long s = (long long)pg * page + po;
    return s < num_slots ? s : -1;
}

// The flash prefill kernels' row metadata for the block's BM query rows from
// r0, rows tid, tid + THREADS, ..: the row's sequence (-1 for none), its
// position and its first visible key (the sliding window's). A row with an
// invalid sequence or position gets sequence -1, and nan_row(r) writes NaN
// to its output columns.
template <int BM, int THREADS, typename NanRow>
__device__ __forceinline__ void prefill_row_meta(int tid, int r0, int rows, const int* __restrict__ seq_of_row, const int* __restrict__ pos,
                                                 int num_seqs, long long cap, int window, int* s_seq, int* s_pos, int* s_lo, NanRow&& nan_row) {
    for (int i = tid; i < BM; i += THREADS) {
        const int r = r0 + i;
        int sq = -1, p = 0, lo = 0;
        if (r < rows) {
            const int s_ = seq_of_row[r], pp = pos[r];
            if (s_ >= 0 && s_ < num_seqs && pp >= 0 && pp < cap) {
                sq = s_;
                p = pp;
                lo = window > 0 ? max(0, pp + 1 - window) : 0;
            } else {
                nan_row(r);
            }
        }
        s_seq[i] = sq;
        s_pos[i] = p;
        s_lo[i] = lo;
    }
}

// ---------------------------------------------------------------- reductions

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The router order's tree (gemm/mod.rs, router_dot): lane j holds partial
// j; p[j] + p[j + w] for w = 1, 2, 4, 8, 16. An xor butterfly computes it in
// every lane at once: lane j adds lane j ^ w's value, and where j has bit w
// set that is p[j] + p[j - w], the same bits as p[j - w] + p[j] because f32
// addition commutes. Unfused adds (the contract's), so no lane differs.
__device__ __forceinline__ float router_tree(float v) {
#pragma unroll
    for (int w = 1; w < 32; w <<= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, w));
    return v;
}

// One lane's partial of the router order over two f32 rows staged in shared
// memory: chunks c = lane, lane + 32, ... of 8 k each, each k as p = p + a·b
// unfused. Staged zeros past K add +0, which changes no partial: one starts
// at +0, and a sum is -0 only when both addends are, so it is never -0.
__device__ __forceinline__ float router_partial(const float* a, const float* b, int lane, int chunks) {
    float p = 0.0f;
    for (int c = lane; c < chunks; c += 32) {
        const float4* a4 = reinterpret_cast<const float4*>(a + (size_t)c * 8);
        const float4* b4 = reinterpret_cast<const float4*>(b + (size_t)c * 8);
        const float4 x0 = a4[0], x1 = a4[1], y0 = b4[0], y1 = b4[1];
        p = __fadd_rn(p, __fmul_rn(x0.x, y0.x));
        p = __fadd_rn(p, __fmul_rn(x0.y, y0.y));
        p = __fadd_rn(p, __fmul_rn(x0.z, y0.z));
        p = __fadd_rn(p, __fmul_rn(x0.w, y0.w));
        p = __fadd_rn(p, __fmul_rn(x1.x, y1.x));
        p = __fadd_rn(p, __fmul_rn(x1.y, y1.y));
        p = __fadd_rn(p, __fmul_rn(x1.z, y1.z));
        p = __fadd_rn(p, __fmul_rn(x1.w, y1.w));
    }
    return p;
}

// Sum over the whole block; every thread gets the result. `scratch` holds
// 32 floats. Safe to call repeatedly with the same scratch (it syncs before reuse).
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads(); // a previous call may still be reading scratch
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

// Inclusive prefix sum over the block of an int per thread; `scratch` holds
// 32 ints; returns the inclusive value and writes the block total.
__device__ __forceinline__ int block_inclusive_scan(int v, int* scratch, int* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int t = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += t;
    }
    __syncthreads();
    if (lane == 31 || threadIdx.x == blockDim.x - 1) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        int s = lane < nwarps ? scratch[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int t = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += t;
        }
        if (lane < nwarps) scratch[lane] = s; // inclusive per-warp totals
    }
    __syncthreads();
    int before = warp > 0 ? scratch[warp - 1] : 0;
    *total = scratch[nwarps - 1];
    return v + before;
}

// Read-only load through the non-coherent path, cached in L1 (for data
// reused across warps, like the hidden rows in the head kernels).
__device__ __forceinline__ uint4 ld_nc16(const void* p) {
    uint4 r;
    asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

__device__ __forceinline__ float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// Programmatic dependent launch (compute capability 9.0+). An entry listed on
// its module's `// dependent-launch:` line may start while the launch before
// it is still running: it must call sy_wait_prior() before reading anything
// an earlier launch wrote (or writing anything one reads); reading constant
// data (weights) before that is what it gains. sy_allow_next() lets the
// launch after this one start early. Both are no-ops on a plain launch.
__device__ __forceinline__ void sy_wait_prior() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void sy_allow_next() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
// An L2 prefetch of the n bf16 at p, a 128-byte line a thread of the block:
// a hint (no register holds anything, nothing waits for it) that a
// dependent issues before sy_wait_prior() for weights it reads after it.
__device__ __forceinline__ void sy_prefetch_l2(const bf16* p, int n) {
    for (int i = (int)threadIdx.x * 64; i < n; i += (int)blockDim.x * 64) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + i));
    if (threadIdx.x == 0 && n > 0) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + (n - 1))); // p need not be line-aligned
}

// Thread-block clusters (compute capability 9.0+). An entry listed on its
// module's `// cluster-launch: <axis>` line launches with the whole grid
// extent on that axis as one cluster; its blocks combine partial results by
// reading each other's shared memory. cluster_sync() is a full barrier of
// the cluster with release/acquire ordering of shared memory; every thread
// of every block must reach it. On older GPUs the plans never pick such an
// entry, and these trap.
__device__ __forceinline__ unsigned cluster_rank() {
#if __CUDA_ARCH__ >= 900
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
#else
    __trap();
    return 0;
#endif
}
__device__ __forceinline__ void cluster_sync() {
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
    __trap();
#endif
}
// The float at `p` (this block's shared memory) in cluster block `rank`'s copy.
__device__ __forceinline__ float ld_cluster_f32(const float* p, unsigned rank) {
#if __CUDA_ARCH__ >= 900
    unsigned remote;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    return v;
#else
    __trap();
    return 0.0f;
#endif
}

// HF's gelu_pytorch_tanh, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), in the
// CPU reference's operation order with no contraction (the gated-GELU
// contracts fix it; only tanhf may differ from the host's).
__device__ __forceinline__ float gelu_tanh_f32(float x) {
    const float x3 = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, x), x), x);
    const float inner = __fmul_rn(0.7978846f, __fadd_rn(x, x3));
    return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(inner)));
}

// ---------------------------------------------------------------- bf16 vectors

// V consecutive bf16 values (V = 1, 2 or 8), as packed words. The kernels
// pick V at run time from the alignment of their pointers and shapes.
template <int V> struct BfVec { unsigned w[(V + 1) / 2]; };

template <int V> __device__ __forceinline__ void vload(BfVec<V>& v, const bf16* p);
template <> __device__ __forceinline__ void vload<8>(BfVec<8>& v, const bf16* p) {
    uint4 u = *reinterpret_cast<const uint4*>(p);
    v.w[0] = u.x; v.w[1] = u.y; v.w[2] = u.z; v.w[3] = u.w;
}
template <> __device__ __forceinline__ void vload<2>(BfVec<2>& v, const bf16* p) { v.w[0] = *reinterpret_cast<const unsigned*>(p); }
template <> __device__ __forceinline__ void vload<1>(BfVec<1>& v, const bf16* p) { v.w[0] = *p; }

template <int V> __device__ __forceinline__ void vstore(bf16* p, const BfVec<V>& v);
template <> __device__ __forceinline__ void vstore<8>(bf16* p, const BfVec<8>& v) {
    *reinterpret_cast<uint4*>(p) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
}
template <> __device__ __forceinline__ void vstore<2>(bf16* p, const BfVec<2>& v) { *reinterpret_cast<unsigned*>(p) = v.w[0]; }
template <> __device__ __forceinline__ void vstore<1>(bf16* p, const BfVec<1>& v) { *p = (unsigned short)v.w[0]; }

// Element i (a compile-time constant after unrolling) as f32.
template <int V> __device__ __forceinline__ float vget(const BfVec<V>& v, int i) {
    return (i & 1) ? bf16_hi(v.w[i >> 1]) : bf16_lo(v.w[i >> 1]);
}
// Rounds V floats to bf16 (RNE) into a vector.
template <int V> __device__ __forceinline__ void vpack(BfVec<V>& v, const float* f) {
    if (V == 1) {
        v.w[0] = f32_to_bf16(f[0]);
    } else {
#pragma unroll
        for (int i = 0; i < V / 2; ++i) v.w[i] = pack_bf16(f[2 * i], f[2 * i + 1]);
    }
}
// A vector of bf16 NaN (0x7fc0).
template <int V> __device__ __forceinline__ void vnan(BfVec<V>& v) {
#pragma unroll
    for (int i = 0; i < (V + 1) / 2; ++i) v.w[i] = V == 1 ? 0x7fc0u : 0x7fc07fc0u;
}

// ---------------------------------------------------------------- packed conversions (added)

// Streaming 8-byte load (read once, not kept in L1).
__device__ __forceinline__ uint2 ld_stream8_u2(const void* p) {
    uint2 r;
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
}

// The four e4m3fn codes of `w` (byte i -> f[i]) as exact f32. On sm_89+ this
// is the hardware e4m3x2 -> f16x2 conversion (exact: every e4m3 value is a
// normal f16 or zero) then f16 -> f32; NaN codes give NaN (not the payload
// SY_NAN has). Older targets use the bit decode above.
__device__ __forceinline__ void e4m3x4_to_f32(unsigned w, float* f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm("{\n\t.reg .b16 a, b, l0, h0, l1, h1;\n\t.reg .b32 d0, d1;\n\t"
        "mov.b32 {a, b}, %4;\n\t"
        "cvt.rn.f16x2.e4m3x2 d0, a;\n\tcvt.rn.f16x2.e4m3x2 d1, b;\n\t"
        "mov.b32 {l0, h0}, d0;\n\tmov.b32 {l1, h1}, d1;\n\t"
        "cvt.f32.f16 %0, l0;\n\tcvt.f32.f16 %1, h0;\n\tcvt.f32.f16 %2, l1;\n\tcvt.f32.f16 %3, h1;\n\t}"
        : "=f"(f[0]), "=f"(f[1]), "=f"(f[2]), "=f"(f[3])
        : "r"(w));
#else
#pragma unroll
    for (int i = 0; i < 4; ++i) f[i] = e4m3_byte(w, i);
#endif
}

// Two f32 -> packed bf16 pair (lo in the low half), round-to-nearest-even in
// one instruction on sm_80+. Equals pack_bf16 for every non-NaN input; a NaN
// becomes the canonical bf16 NaN 0x7fff.
__device__ __forceinline__ unsigned pack_bf16_rn(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
#else
    return pack_bf16(lo, hi);
#endif
}

// The four e4m3 codes of `w` as two packed bf16 pairs (exact): *lo = bytes
// 0,1 and *hi = bytes 2,3.
__device__ __forceinline__ void e4m3x4_to_bf16x4(unsigned w, unsigned* lo, unsigned* hi) {
    float f[4];
    e4m3x4_to_f32(w, f);
    *lo = pack_bf16_rn(f[0], f[1]);
    *hi = pack_bf16_rn(f[2], f[3]);
}

// D += A·B on the tensor cores, m16n8k16, bf16 inputs, f32 accumulators
// (sm_80+). Fragments as PTX defines them, g = lane / 4, c = lane % 4:
// a0 (row g, k 2c..2c+1), a1 (row g+8, same k), a2 (row g, k 2c+8..2c+9),
// a3 (row g+8, k 2c+8..); b0 (k 2c..2c+1, col g), b1 (k 2c+8..2c+9, col g);
// d0, d1 (row g, cols 2c, 2c+1), d2, d3 (row g+8, cols 2c, 2c+1).
__device__ __forceinline__ void mma16816_bf16_f32(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// A shared-memory pointer as the 32-bit address ldmatrix / cp.async take.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

// Four 8x8 b16 tiles from shared memory (lane l gives row l % 8 of tile l / 8).
__device__ __forceinline__ void ldsm_x4(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
// The same, each tile transposed.
__device__ __forceinline__ void ldsm_x4_t(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

// ---------------------------------------------------------------- streaming row kernels

// Loads issued ahead of their use (the next row's data fetched while this
// row is reduced and stored) are `volatile` so the compiler keeps them where
// they are written, in front of the barriers and stores they overlap with,
// instead of sinking them to their first use.
__device__ __forceinline__ uint4 ld_stream16_v(const void* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
__device__ __forceinline__ uint2 ld_stream8_v(const void* p) {
    uint2 r;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
}
// Coherent (not .nc) 16-byte load that skips L1, for rows that may alias an
// output of the same kernel (each element is read before it is written).
__device__ __forceinline__ uint4 ld_na16_v(const void* p) {
    uint4 r;
    asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

// f32 -> bf16 -> f32, round to nearest even, one instruction on sm_80+.
// Equals round_bf16 for every non-NaN input (a NaN becomes the canonical
// NaN, as the GPU's own arithmetic already makes every NaN it produces).
__device__ __forceinline__ float round_bf16_rn(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned short b;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return bf16_to_f32(b);
#else
    return round_bf16(f);
#endif
}
// L1-cached read-only load (ld_nc16) that the compiler keeps in place.
__device__ __forceinline__ uint4 ld_nc16_v(const void* p) {
    uint4 r;
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
