// W4A16 GEMM on Hopper (sm_90a): c[m, n] = bf16(scale2 * sum_k a[m, k] *
// w(n, k)), w = e2m1(code) * e4m3(scale), with the weights in w4a16.cu's
// K-major layout (bq u8 [K/2, ldb], two codes per byte along K, low nibble
// = even k; bs u8 [K/16, ldb]). The CUDA plans of w4a16_gemm, _n128,
// _n128_m128 and _n128_m128_bf16 pick this entry at prefill sizes on a
// compute-capability 9.0 device (kernels/src/gemm/w4a16.rs); every one of
// them takes it at the same shapes, so the lossless variant still equals the
// base kernel bit for bit. The module is compiled for the arch-specific
// target (below) and is empty elsewhere.
//
// nvrtc-arch: sm_90a
//
// Contract (w4a16.rs): w is exact in bf16, the products on the tensor cores
// are exact, f32 accumulation in this kernel's K order, then scale2 and one
// rounding to bf16. The plan requires ldb = n, n % 16 == 0, k % 16 == 0,
// a, bq, bs 16-byte aligned and c 4-byte aligned.
//
// w4a16_gemm_wgmma: the persistent layout of gemm_sm90.cu (at most one
// block per SM walking output tiles in its grouped order), block 384 =
// three warpgroups, with the output tile computed transposed: the
// dequantised weights are wgmma's A operand, straight from registers, and
// the activations its B operand from shared memory. A tile is 256 tokens x
// 128 weight columns.
// - Work: whole tiles, then tiles % blocks tiles in S K ranges each (grid
//   (blocks / S, S); w4a16.rs's wgmma_split splits only where the tiles
//   leave SMs idle, so every tile is split or none). A split's f32 partial
//   goes to the workspace, and the last split of a tile to arrive (a
//   semaphore per split tile) adds the S partials in split order and stores
//   the tile, so the result does not depend on which split is last. No
//   float atomics.
// - warpgroup 0, one thread: per 64-wide K slice, three TMA copies into the
//   next stage of a 5-deep ring: the activations (256 token rows x 64 bf16,
//   128-byte swizzle, as gemm_sm90.cu's B), the slice's codes (32 K-pair
//   rows x 128 bytes) and its scales (4 rows x 128 bytes). The weight maps
//   view the u8 matrices as bf16 pairs (the backend encodes bf16 maps
//   only); TMA copies bits, so only the byte addressing matters. Past M, N
//   or K the boxes arrive as zeros: zero codes with zero scales are +0
//   weights.
// - warpgroups 1 and 2, the consumers: warpgroup cw owns weight columns
//   64·cw .. +63 (the m64 of its wgmma m64n256k16, all 256 tokens as N),
//   warp w of it rows 16w .. 16w+15, and lane (g, q) the A fragment rows g
//   and g+8, which it maps to columns 16w + 2g and 16w + 2g + 1: then one
//   16-bit load from the code tile (K-pair row kp, those two columns) is a
//   whole pair of fragment registers: byte 0 = column 16w + 2g at k = 2kp,
//   2kp+1 (a0a1 for kp = 8j + q, a4a5 for kp = 8j + q + 4, in k16 step j),
//   byte 1 the next column (a2a3, a6a7). Nothing dequantised goes through
//   shared memory: a slice costs the ring's TMA writes, the two
//   warpgroups' reads of the activation tile and 2 bytes of codes per 4
//   weights. The fragments are double-buffered in registers: slice i+1 is
//   decoded while slice i's wgmma runs, once wgmma.wait_group 1 has proved
//   that slice i-1's, the last reader of that buffer, finished. The
//   warpgroups share nothing but the ring, so no barrier joins them.
// - Epilogue: accumulator row g / g+8 is the column pair (16w + 2g, +1),
//   accumulator columns 8j + 2q, +1 are tokens, so each thread stores bf16
//   pairs along N, scale2 applied before the rounding.
// Measured and withdrawn (BENCHMARKS.md): dequantising into a bf16 tile in
// shared memory that wgmma reads with the B-transpose bit ran 0.40-0.65x
// cuBLAS bf16 with 128 x 256 tiles and 0.46-0.77x with 256 x 128; by count,
// writing and re-reading that tile brings a slice's shared-memory traffic
// to about 150 KB against the ~131 KB its tensor time leaves. A commit group
// per k16 step (wait_group 4, the next slice decoded a step at a time) was
// no faster than one group a slice (862 / 976 us against 778 / 934 us at
// 4096 x 8192^2, eighth session). The same kernel with the decode replaced
// by one logic op (wrong values, same loads and wgmma) ran 708 / 808 us
// against cuBLAS's 672 / 674: the structure alone is 0.83-0.95x cuBLAS.
// The two consumer warpgroups issuing their slices in turn (named barriers,
// so their decodes fall out of phase) cut the integer-pipe throttle from
// 0.97 to 0.56 stall cycles an instruction but not the time: 798.5 against
// 797.6 us in ncu, 909.7 against 913.9 us wall (eighth session's final call).

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

#define W4_BM 256 // tokens per tile
#define W4_BN 128 // weight columns per tile
#define W4_BK 64
#define W4_STAGES 5
#define W4_A_BYTES (W4_BM * W4_BK * 2) // activations: 32768
#define W4_Q_BYTES (32 * W4_BN)        // codes: 32 K-pair rows x 128 bytes
// Codes, then the scale box (4 x 128 bytes) on its own 1024-byte swizzle atom.
#define W4_STAGE_BYTES (W4_A_BYTES + W4_Q_BYTES + 1024)
#define W4_STAGE_TX (W4_A_BYTES + W4_Q_BYTES + 4 * 128)

// d += A(64 x 16 bf16, in registers: the mma.m16n8k16 A fragment of each
// warp's 16 rows) . B(16 x 256, K-major in shared memory, descriptor db).
__device__ __forceinline__ void w4_wgmma_n256_rs(float* d, const unsigned* a, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" WG_REGS_N256 "}, {%128,%129,%130,%131}, %132, p, 1, 1, 0;\n}\n"
        : WG_ACC_N256
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

__device__ __forceinline__ unsigned w4_lds16(unsigned addr) {
    unsigned short v;
    asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(addr));
    return v;
}
// Two e4m3 scale bytes (bits 0-7 and 8-15 of b) as a bf16 pair, exactly,
// for codes that are not NaN: each code's 7 magnitude bits placed at bf16
// bits 4..10 (sign at 15) read as its value times 2^-120, subnormal codes as
// bf16 subnormals, and one bf16 multiply by 2^120 restores the value (as
// e4m3_to_f32 does in f32).
__device__ __forceinline__ unsigned w4_scale_pair(unsigned b) {
    const unsigned y = __byte_perm(b, 0u, 0x4140); // [b0, 0, b1, 0]
    const unsigned bits = ((y << 4) & 0x07f007f0u) | ((y << 8) & 0x80008000u);
    return bf16x2_mul(bits, 0x7b807b80u); // 2^120 in both halves
}
// The same with a NaN code (0x7f / 0xff) kept NaN, by the f32 decode.
__device__ __forceinline__ unsigned w4_scale_pair_nan(unsigned b) {
    return __byte_perm(__float_as_uint(e4m3_to_f32(b & 0xffu)), __float_as_uint(e4m3_to_f32((b >> 8) & 0xffu)), 0x7632);
}

// This thread's A fragments of one slice (4 k16 steps x 4 registers) from
// the stage's code box q and scale box s (128-byte swizzled: 16-byte chunk
// c of row r at r·128 + ((c ^ r % 8) · 16)), for columns cc and cc + 1 of
// the tile (chunk = cc / 16, off = cc % 16, cc even). All twelve shared
// loads are issued first and the codes decoded without a branch, so the
// four k16 steps' dependency chains interleave; the only branch, taken
// when one of the slice's 8 scale bytes is a NaN code (rare), comes last
// and redoes the scales and the products. (A branch per step, as the NaN test
// once was, split the decode into four serial blocks, each waiting out its
// own loads.)
__device__ __forceinline__ void w4_decode(unsigned q, unsigned s, int chunk, int off, int lq, unsigned* f) {
    unsigned sr[4], c[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int kp0 = 8 * j + lq, kp1 = kp0 + 4;
        c[2 * j] = w4_lds16(q + kp0 * 128 + ((chunk ^ (kp0 & 7)) << 4) + off);
        c[2 * j + 1] = w4_lds16(q + kp1 * 128 + ((chunk ^ (kp1 & 7)) << 4) + off);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) sr[j] = w4_lds16(s + j * 128 + ((chunk ^ j) << 4) + off);
    // x[2i], y[2i]: code word i's pairs for columns cc and cc + 1.
    unsigned x[8], y[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) e2m1x4_bf16(c[i], x[i], y[i]);
    auto apply = [&](const unsigned* sp) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const unsigned sa = __byte_perm(sp[j], 0u, 0x1010), sb = __byte_perm(sp[j], 0u, 0x3232);
            f[4 * j + 0] = bf16x2_mul(x[2 * j], sa);     // column cc at k = 2·kp0, +1
            f[4 * j + 1] = bf16x2_mul(y[2 * j], sb);     // column cc + 1
            f[4 * j + 2] = bf16x2_mul(x[2 * j + 1], sa); // the same at kp1
            f[4 * j + 3] = bf16x2_mul(y[2 * j + 1], sb);
        }
    };
    unsigned sp[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) sp[j] = w4_scale_pair(sr[j]);
    apply(sp);
    if (e4m3x4_has_nan(sr[0] | (sr[1] << 16)) || e4m3x4_has_nan(sr[2] | (sr[3] << 16))) {
#pragma unroll
        for (int j = 0; j < 4; ++j) sp[j] = w4_scale_pair_nan(sr[j]);
        apply(sp);
    }
}

__device__ __forceinline__ void w4_fence16(unsigned* f) {
#pragma unroll
    for (int i = 0; i < 16; ++i) asm volatile("" : "+r"(f[i])::"memory");
}

// The two consumer warpgroups' own barrier (id 1; id 0 is __syncthreads).
__device__ __forceinline__ void w4_consumers_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

// Split-K semaphores, one per split tile (a split tile index is below the
// grid size, which the plan keeps within W4_MAX_SPLIT_TILES). Zero at module
// load; the last split of a tile to arrive sets its entry back to zero.
#define W4_MAX_SPLIT_TILES 1024
__device__ unsigned w4_split_sem[W4_MAX_SPLIT_TILES];

// The work of one launch: `full` whole tiles (K slices 0 .. KT), then the
// remaining tiles - full tiles in `splits` K ranges each. With grid (gx, S)
// and G = gx·S blocks, S = gridDim.y and full = tiles - tiles % G for S > 1
// (every tile whole for S = 1): w4a16.rs's wgmma_split picks gx and S and
// sizes the workspace by the same rule. Block b takes items b, b + G, ...
struct W4Work {
    int tiles_m, tiles_n, KT, splits, full, items;
};
__device__ __forceinline__ W4Work w4_work(int M, int N, int K) {
    W4Work w;
    w.tiles_m = (M + W4_BM - 1) / W4_BM;
    w.tiles_n = (N + W4_BN - 1) / W4_BN;
    w.KT = (K + W4_BK - 1) / W4_BK;
    const int tiles = w.tiles_m * w.tiles_n, blocks = gridDim.x * gridDim.y;
    w.splits = gridDim.y;
    w.full = w.splits == 1 ? tiles : tiles - tiles % blocks;
    w.items = w.full + (tiles - w.full) * w.splits;
    return w;
}
// Item u: its output tile (mt, nt), its K slices [kt0, kt1), and for a split
// item its index v = split tile · S + split (-1 for a whole tile).
__device__ __forceinline__ void w4_item(const W4Work& w, int u, int& mt, int& nt, int& kt0, int& kt1, int& v) {
    int t;
    if (u < w.full) {
        t = u;
        kt0 = 0;
        kt1 = w.KT;
        v = -1;
    } else {
        v = u - w.full;
        t = w.full + v / w.splits;
        const int sp = v % w.splits;
        kt0 = sp * w.KT / w.splits;
        kt1 = (sp + 1) * w.KT / w.splits;
    }
    grouped_tile(t, w.tiles_m, w.tiles_n, mt, nt);
}

// Dynamic shared memory: the ring (W4_STAGES x (activations, codes,
// scales)), 2·W4_STAGES mbarriers, and up to 1023 bytes to align the ring
// to 1024 (w4a16.rs's WGMMA_SHARED_BYTES says the same).
extern "C" __global__ void __launch_bounds__(384, 1)
    w4a16_gemm_wgmma(const bf16* __restrict__ a, const u8* __restrict__ bq, const u8* __restrict__ bs, float scale2, bf16* __restrict__ c,
                     unsigned m, unsigned n, unsigned k, float* __restrict__ workspace, const __grid_constant__ TmaMap ta,
                     const __grid_constant__ TmaMap tq, const __grid_constant__ TmaMap ts) {
    extern __shared__ __align__(1024) unsigned char w4_raw[];
    __shared__ unsigned w4_last;
    const int M = m, N = n, K = k;
    const unsigned raw = wg_smem(w4_raw);
    const unsigned ring = (raw + 1023u) & ~1023u;
    const unsigned bars = ring + W4_STAGES * W4_STAGE_BYTES;
    auto full = [&](int st) { return bars + 8u * st; };
    auto empty = [&](int st) { return bars + 8u * (W4_STAGES + st); };

    const int tid = threadIdx.x, wg = tid >> 7;
    if (tid == 0) {
        ring_init<W4_STAGES>(bars, &ta, &tq);
        tma_prefetch(&ts);
    }
    __syncthreads();

    const W4Work w = w4_work(M, N, K);
    const int blocks = gridDim.x * gridDim.y, block = blockIdx.y * gridDim.x + blockIdx.x;

    if (wg == 0) {
        // The producer needs few registers; the consumers get them
        // (40 + 2 x 232 per thread of 128 fits the 64K register file).
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            int st = 0;
            unsigned phase = 0;
            for (int u = block; u < w.items; u += blocks) {
                int mt, nt, kt0, kt1, v;
                w4_item(w, u, mt, nt, kt0, kt1, v);
                for (int kt = kt0; kt < kt1; ++kt) {
                    mbar_wait(empty(st), phase ^ 1u);
                    mbar_expect_tx(full(st), W4_STAGE_TX);
                    const unsigned dst = ring + st * W4_STAGE_BYTES;
                    tma_load_2d(dst, &ta, full(st), kt * W4_BK, mt * W4_BM);
                    // Weight maps count columns in byte pairs: 128 columns = 64 of them.
                    tma_load_2d(dst + W4_A_BYTES, &tq, full(st), nt * 64, kt * 32);
                    tma_load_2d(dst + W4_A_BYTES + W4_Q_BYTES, &ts, full(st), nt * 64, kt * 4);
                    if (++st == W4_STAGES) {
                        st = 0;
                        phase ^= 1u;
                    }
                }
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int ctid = tid - 128; // 0 .. 255 over both consumer warpgroups
    const int cw = wg - 1, warp = (tid >> 5) & 3, lane = tid & 31, lg = lane >> 2, lq = lane & 3;
    const int cc = cw * 64 + warp * 16 + 2 * lg; // this thread's first column in the tile
    const int chunk = cc >> 4, off = cc & 15;
    float acc[128];
    unsigned f0[16], f1[16];
    int st = 0;
    unsigned phase = 0;
    for (int u = block; u < w.items; u += blocks) {
        int mt, nt, kt0, kt1, v;
        w4_item(w, u, mt, nt, kt0, kt1, v);
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
        mbar_wait(full(st), phase);
        w4_decode(ring + st * W4_STAGE_BYTES + W4_A_BYTES, ring + st * W4_STAGE_BYTES + W4_A_BYTES + W4_Q_BYTES, chunk, off, lq, f0);
        int prev = -1;
        // One slice: wgmma on fragments `cur` (decoded), then, while it
        // runs, the next slice's fragments into `nxt`.
        auto slice = [&](int kt, unsigned* cur, unsigned* nxt) {
            const unsigned b_addr = ring + st * W4_STAGE_BYTES;
#pragma unroll
            for (int i = 0; i < 128; ++i) wg_fence_operand(acc[i]);
            w4_fence16(cur);
            wgmma_fence();
#pragma unroll
            for (int j = 0; j < W4_BK / 16; ++j) w4_wgmma_n256_rs(acc, cur + 4 * j, wg_desc(b_addr + 32 * j));
            wgmma_commit();
#pragma unroll
            for (int i = 0; i < 128; ++i) wg_fence_operand(acc[i]);
            w4_fence16(cur);
            const int used = st;
            if (++st == W4_STAGES) {
                st = 0;
                phase ^= 1u;
            }
            // Slice kt - 1's wgmma, the last reader of `nxt` and of stage prev, is done.
            wgmma_wait<1>();
            w4_fence16(nxt);
            if (prev >= 0 && lane == 0) mbar_arrive(empty(prev));
            prev = used;
            if (kt + 1 < kt1) {
                mbar_wait(full(st), phase);
                w4_decode(ring + st * W4_STAGE_BYTES + W4_A_BYTES, ring + st * W4_STAGE_BYTES + W4_A_BYTES + W4_Q_BYTES, chunk, off, lq, nxt);
            }
        };
        for (int kt = kt0; kt < kt1; kt += 2) {
            slice(kt, f0, f1);
            if (kt + 1 < kt1) slice(kt + 1, f1, f0);
        }
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 128; ++i) wg_fence_operand(acc[i]);
        if (prev >= 0 && lane == 0) mbar_arrive(empty(prev));

        // acc[4j], acc[4j+1]: column cc at tokens 8j + 2q, +1; acc[4j+2],
        // acc[4j+3]: column cc + 1 at the same tokens.
        const int col = nt * W4_BN + cc, row0 = mt * W4_BM + 2 * lq;
        auto store = [&](int j, float x0, float x1, float x2, float x3) {
            const int row = row0 + 8 * j;
            if (col < N && row < M) *reinterpret_cast<unsigned*>(c + (size_t)row * N + col) = pack_bf16(__fmul_rn(scale2, x0), __fmul_rn(scale2, x2));
            if (col < N && row + 1 < M)
                *reinterpret_cast<unsigned*>(c + (size_t)(row + 1) * N + col) = pack_bf16(__fmul_rn(scale2, x1), __fmul_rn(scale2, x3));
        };
        if (v < 0) {
#pragma unroll
            for (int j = 0; j < 32; ++j) store(j, acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
            continue;
        }
        // A split item: its f32 partial to workspace item v (thread-major
        // float4s, so each j is one coalesced 4 KB row); then the last of the
        // tile's S splits to arrive adds the S partials in split order, each
        // thread reading back only the positions it and its peers at the same
        // ctid wrote, so which split is last does not change a bit.
        float4* wsp = reinterpret_cast<float4*>(workspace);
#pragma unroll
        for (int j = 0; j < 32; ++j)
            __stcg(wsp + (size_t)v * 32 * 256 + j * 256 + ctid, make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
        __threadfence();
        w4_consumers_sync();
        const int tile_s = v / w.splits;
        if (ctid == 0) {
            const unsigned arrived = atomicAdd(&w4_split_sem[tile_s], 1u);
            const bool last = arrived == (unsigned)w.splits - 1u;
            if (last) w4_split_sem[tile_s] = 0u;
            w4_last = last;
        }
        w4_consumers_sync();
        if (!w4_last) continue;
        __threadfence();
        const float4* part = wsp + (size_t)tile_s * w.splits * 32 * 256 + ctid;
#pragma unroll 4
        for (int j = 0; j < 32; ++j) {
            float4 t = __ldcg(part + j * 256);
            for (int sp = 1; sp < w.splits; ++sp) {
                const float4 p = __ldcg(part + (size_t)sp * 32 * 256 + j * 256);
                t.x = __fadd_rn(t.x, p.x);
                t.y = __fadd_rn(t.y, p.y);
                t.z = __fadd_rn(t.z, p.z);
                t.w = __fadd_rn(t.w, p.w);
            }
            store(j, t.x, t.y, t.z, t.w);
        }
    }
}

#endif // __CUDA_ARCH_FEAT_SM90_ALL
