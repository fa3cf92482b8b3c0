// Dense bf16 GEMM on Hopper (sm_90a): C[M, N] = A[M, K] · B[N, K]^T with
// wgmma, TMA and mbarrier pipelines. The CUDA plan of
// dense_gemm_bf16_pipelined picks these entries (see kernels/src/gemm/mod.rs)
// on a compute-capability 9.0 device; the module is compiled for the
// arch-specific target (the line below), whose wgmma and setmaxnreg
// instructions no other GPU runs, so everything here sits behind
// __CUDA_ARCH_FEAT_SM90_ALL and the module is empty elsewhere.
//
// nvrtc-arch: sm_90a
//
// Contract (dense_gemm_bf16_pipelined's): f32 accumulation in any K order,
// c = bf16(acc) rounded to nearest even. K % 8 == 0 (a TMA row stride is a
// multiple of 16 bytes), N even, A and B 16-byte aligned, C 4-byte aligned;
// the plan checks all of these and otherwise keeps the mma.sync kernel.
//
// dense_gemm_wgmma_n{256,192}: a persistent grid (at most one block per SM,
// each walking output tiles t = blockIdx.x, + gridDim.x, ... in a grouped
// order so that concurrent tiles share A and B panels in L2), block 384 =
// three warpgroups:
// - warpgroup 0, the producer: one thread issues, per 64-wide K slice, two
//   TMA tiled copies (A: 128 rows x 64, B: BN rows x 64, bf16, 128-byte
//   swizzle) into the next free stage of a STAGES-deep ring, completing on
//   that stage's `full` mbarrier (expect_tx of the stage's bytes). Rows and
//   columns past M, N or K arrive as zeros (the tensor maps carry the true
//   extents), so ragged shapes need no special path.
// - warpgroups 1 and 2, the consumers: each owns 64 rows of the 128-row tile
//   and all BN columns (BN/2 f32 accumulators a thread), waits on `full`,
//   runs four wgmma.m64nBNk16 from shared memory (descriptors with the
//   128-byte swizzle), keeps one slice's wgmma group in flight and releases
//   the previous slice's stage on its `empty` mbarrier (one arrival per
//   consumer warp, 8 in all). After the tile's last slice the accumulators
//   are rounded to bf16 and stored straight from registers (bf16 pairs,
//   rows and columns past M and N skipped) while the producer already
//   fills the ring with the next tile.
// The tensor maps arrive as two __grid_constant__ parameters after the
// declared ones; the backend encodes them per launch (cuTensorMapEncodeTiled)
// from the TensorMap2d list this entry registers beside its plan.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The driver's CUtensorMap: 128 opaque bytes, 64-byte aligned.
struct __align__(64) TmaMap {
    unsigned long long opaque[16];
};

#define WG_BM 128
#define WG_BK 64
// Bytes of one A slice in shared memory: 128 rows of 64 bf16.
#define WG_A_BYTES (WG_BM * WG_BK * 2)
// Output tiles per group along M in the tile order (see wg_tile).
#define WG_GROUP_M 16

__device__ __forceinline__ unsigned wg_smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of `bar` with parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

// TMA: the box at (c0 = column, c1 = row) of `map` into shared memory at
// `dst`, completing `bar`'s transaction count.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaMap* map, unsigned bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1)
        : "memory");
}

// wgmma shared-memory descriptor of a K-major tile written by TMA with the
// 128-byte swizzle: rows of 128 bytes in 8-row (1024-byte) atoms, so the
// stride between 8-row groups is 1024 bytes; the leading offset is unused
// for this layout (1 by convention). Bits 62-63 = 1: 128-byte swizzle.
__device__ __forceinline__ unsigned long long wg_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// Keeps the compiler from moving reads or writes of an accumulator across
// the asynchronous wgmma that owns it.
__device__ __forceinline__ void wg_fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// d (m64 x n, f32, the wgmma accumulator fragment) += A(64 x 16) · B(n x 16)^T,
// both K-major in shared memory (descriptors da, db), scale-d = 1.
__device__ __forceinline__ void wgmma_m64n256k16(float* d, unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
        "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
        "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
        "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
        "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
        "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(1));
}

__device__ __forceinline__ void wgmma_m64n192k16(float* d, unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
        "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
        "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95"
        "}, %96, %97, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "l"(da), "l"(db), "r"(1));
}

template <int BN> __device__ __forceinline__ void wgmma_tile(float* d, unsigned long long da, unsigned long long db);
template <> __device__ __forceinline__ void wgmma_tile<256>(float* d, unsigned long long da, unsigned long long db) { wgmma_m64n256k16(d, da, db); }
template <> __device__ __forceinline__ void wgmma_tile<192>(float* d, unsigned long long da, unsigned long long db) { wgmma_m64n192k16(d, da, db); }

// Tile t of a tiles_m x tiles_n grid, in groups of WG_GROUP_M tile rows:
// within a group the row index runs fastest, so the ~one wave of tiles in
// flight covers a few B panels and at most 16 A panels.
__device__ __forceinline__ void wg_tile(int t, int tiles_m, int tiles_n, int& mt, int& nt) {
    const int per_group = WG_GROUP_M * tiles_n;
    const int g = t / per_group, first = g * WG_GROUP_M;
    const int rows = min(tiles_m - first, WG_GROUP_M);
    const int r = t - g * per_group;
    mt = first + r % rows;
    nt = r / rows;
}

// Dynamic shared memory: STAGES x (A slice + B slice), then the 2·STAGES
// mbarriers, plus up to 1023 bytes to align the ring to 1024 (the 128-byte
// swizzle's atom). The plan asks for the same (wgmma_shared_bytes).
template <int BN, int STAGES>
__device__ __forceinline__ void wgmma_gemm(const TmaMap* ta, const TmaMap* tb, bf16* __restrict__ c, int M, int N, int K) {
    constexpr int B_BYTES = BN * WG_BK * 2;
    constexpr int STAGE_BYTES = WG_A_BYTES + B_BYTES;
    extern __shared__ __align__(1024) unsigned char wg_raw[];
    const unsigned raw = wg_smem(wg_raw);
    const unsigned ring = (raw + 1023u) & ~1023u;
    const unsigned bars = ring + STAGES * STAGE_BYTES;
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (STAGES + s); };

    const int tid = threadIdx.x, wg = tid >> 7;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(ta)) : "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(tb)) : "memory");
    }
    __syncthreads();

    const int tiles_m = (M + WG_BM - 1) / WG_BM, tiles_n = (N + BN - 1) / BN, tiles = tiles_m * tiles_n;
    const int KT = (K + WG_BK - 1) / WG_BK;

    if (wg == 0) {
        // Producer: one thread; the other 127 have nothing to do.
        if (tid == 0) {
            int s = 0;
            unsigned phase = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                int mt, nt;
                wg_tile(t, tiles_m, tiles_n, mt, nt);
                for (int kt = 0; kt < KT; ++kt) {
                    // A fresh barrier is in phase 0, so waiting on parity 1
                    // (the phase "before" it) passes the first round.
                    mbar_wait(empty(s), phase ^ 1u);
                    mbar_expect_tx(full(s), STAGE_BYTES);
                    const unsigned dst = ring + s * STAGE_BYTES;
                    tma_load_2d(dst, ta, full(s), kt * WG_BK, mt * WG_BM);
                    tma_load_2d(dst + WG_A_BYTES, tb, full(s), kt * WG_BK, nt * BN);
                    if (++s == STAGES) {
                        s = 0;
                        phase ^= 1u;
                    }
                }
            }
        }
        return;
    }

    // Consumers: warpgroup cw owns tile rows 64·cw .. 64·cw + 63.
    const int cw = wg - 1, lt = tid & 127, warp = lt >> 5, lane = tid & 31;
    float acc[BN / 2];
    int s = 0;
    unsigned phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int mt, nt;
        wg_tile(t, tiles_m, tiles_n, mt, nt);
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
        int prev = -1;
        for (int kt = 0; kt < KT; ++kt) {
            mbar_wait(full(s), phase);
            const unsigned a_addr = ring + s * STAGE_BYTES + cw * 64 * (WG_BK * 2);
            const unsigned b_addr = ring + s * STAGE_BYTES + WG_A_BYTES;
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) wg_fence_operand(acc[i]);
            wgmma_fence();
#pragma unroll
            for (int j = 0; j < WG_BK / 16; ++j) wgmma_tile<BN>(acc, wg_desc(a_addr + 32 * j), wg_desc(b_addr + 32 * j));
            wgmma_commit();
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) wg_fence_operand(acc[i]);
            // The slice before this one is finished with: free its stage.
            wgmma_wait<1>();
            if (prev >= 0 && lane == 0) mbar_arrive(empty(prev));
            prev = s;
            if (++s == STAGES) {
                s = 0;
                phase ^= 1u;
            }
        }
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) wg_fence_operand(acc[i]);
        if (prev >= 0 && lane == 0) mbar_arrive(empty(prev));

        // Fragment layout: n8 block j holds (row g, cols 8j + 2q, +1) in
        // acc[4j], acc[4j+1] and row g + 8 in acc[4j+2], acc[4j+3].
        const int row = mt * WG_BM + cw * 64 + warp * 16 + (lane >> 2);
        const int col0 = nt * BN + 2 * (lane & 3);
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int col = col0 + 8 * j;
            if (col >= N) continue;
            if (row < M) *reinterpret_cast<unsigned*>(c + (size_t)row * N + col) = pack_bf16(acc[4 * j], acc[4 * j + 1]);
            if (row + 8 < M) *reinterpret_cast<unsigned*>(c + (size_t)(row + 8) * N + col) = pack_bf16(acc[4 * j + 2], acc[4 * j + 3]);
        }
    }
}

extern "C" __global__ void __launch_bounds__(384, 1)
    dense_gemm_wgmma_n256(const bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c, unsigned m, unsigned n, unsigned k,
                          const __grid_constant__ TmaMap ta, const __grid_constant__ TmaMap tb) {
    wgmma_gemm<256, 4>(&ta, &tb, c, m, n, k);
}

extern "C" __global__ void __launch_bounds__(384, 1)
    dense_gemm_wgmma_n192(const bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c, unsigned m, unsigned n, unsigned k,
                          const __grid_constant__ TmaMap ta, const __grid_constant__ TmaMap tb) {
    wgmma_gemm<192, 5>(&ta, &tb, c, m, n, k);
}

#endif // __CUDA_ARCH_FEAT_SM90_ALL
