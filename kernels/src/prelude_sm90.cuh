// Hopper (sm_90a) helpers, prepended after prelude.cuh to every module whose
// source has a `// nvrtc-arch: sm_90a` line: mbarriers, TMA tiled copies, and
// wgmma from shared memory. Everything sits behind __CUDA_ARCH_FEAT_SM90_ALL,
// so it compiles to nothing for any other target.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The driver's CUtensorMap: 128 opaque bytes, 64-byte aligned.
struct __align__(64) TmaMap {
    unsigned long long opaque[16];
};

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

// The accumulator operands of wgmma.m64nNk16 (N/2 f32 registers a thread):
// the asm template's register list (%0 .. %(N/2 - 1), in blocks of eight)
// and the matching "+f" constraints on d[0 .. N/2 - 1], per tile width.
#define WG_R0 "%0,%1,%2,%3,%4,%5,%6,%7"
#define WG_R1 ",%8,%9,%10,%11,%12,%13,%14,%15"
#define WG_R2 ",%16,%17,%18,%19,%20,%21,%22,%23"
#define WG_R3 ",%24,%25,%26,%27,%28,%29,%30,%31"
#define WG_R4 ",%32,%33,%34,%35,%36,%37,%38,%39"
#define WG_R5 ",%40,%41,%42,%43,%44,%45,%46,%47"
#define WG_R6 ",%48,%49,%50,%51,%52,%53,%54,%55"
#define WG_R7 ",%56,%57,%58,%59,%60,%61,%62,%63"
#define WG_R8 ",%64,%65,%66,%67,%68,%69,%70,%71"
#define WG_R9 ",%72,%73,%74,%75,%76,%77,%78,%79"
#define WG_R10 ",%80,%81,%82,%83,%84,%85,%86,%87"
#define WG_R11 ",%88,%89,%90,%91,%92,%93,%94,%95"
#define WG_R12 ",%96,%97,%98,%99,%100,%101,%102,%103"
#define WG_R13 ",%104,%105,%106,%107,%108,%109,%110,%111"
#define WG_R14 ",%112,%113,%114,%115,%116,%117,%118,%119"
#define WG_R15 ",%120,%121,%122,%123,%124,%125,%126,%127"
#define WG_C8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_REGS_N176 WG_R0 WG_R1 WG_R2 WG_R3 WG_R4 WG_R5 WG_R6 WG_R7 WG_R8 WG_R9 WG_R10
#define WG_REGS_N192 WG_REGS_N176 WG_R11
#define WG_REGS_N224 WG_REGS_N192 WG_R12 WG_R13
#define WG_REGS_N256 WG_REGS_N224 WG_R14 WG_R15
#define WG_ACC_N176 WG_C8(0), WG_C8(8), WG_C8(16), WG_C8(24), WG_C8(32), WG_C8(40), WG_C8(48), WG_C8(56), WG_C8(64), WG_C8(72), WG_C8(80)
#define WG_ACC_N192 WG_ACC_N176, WG_C8(88)
#define WG_ACC_N224 WG_ACC_N192, WG_C8(96), WG_C8(104)
#define WG_ACC_N256 WG_ACC_N224, WG_C8(112), WG_C8(120)

// wgmma_m64n<N>k16(d, da, db): d (m64 x N, f32, the wgmma accumulator
// fragment) += A(64 x 16) · B(N x 16)^T, both K-major in shared memory
// (descriptors da, db), scale-d = 1. DA, DB, P: the operand numbers of da,
// db and the scale-d predicate's source, right after the accumulators.
#define WG_MMA_SS(N, DA, DB, P)                                                                                       \
    __device__ __forceinline__ void wgmma_m64n##N##k16(float* d, unsigned long long da, unsigned long long db) {      \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" P ", 0;\n"                                                   \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" WG_REGS_N##N "}, %" DA ", %" DB        \
                     ", p, 1, 1, 0, 0;\n}\n"                                                                           \
                     : WG_ACC_N##N                                                                                    \
                     : "l"(da), "l"(db), "r"(1));                                                                     \
    }
WG_MMA_SS(256, "128", "129", "130")
WG_MMA_SS(224, "112", "113", "114")
WG_MMA_SS(192, "96", "97", "98")
WG_MMA_SS(176, "88", "89", "90")

template <int BN> __device__ __forceinline__ void wgmma_tile(float* d, unsigned long long da, unsigned long long db);
template <> __device__ __forceinline__ void wgmma_tile<256>(float* d, unsigned long long da, unsigned long long db) { wgmma_m64n256k16(d, da, db); }
template <> __device__ __forceinline__ void wgmma_tile<192>(float* d, unsigned long long da, unsigned long long db) { wgmma_m64n192k16(d, da, db); }
template <> __device__ __forceinline__ void wgmma_tile<176>(float* d, unsigned long long da, unsigned long long db) { wgmma_m64n176k16(d, da, db); }
template <> __device__ __forceinline__ void wgmma_tile<224>(float* d, unsigned long long da, unsigned long long db) { wgmma_m64n224k16(d, da, db); }

// Tile t of a tiles_m x tiles_n grid in a persistent kernel's order: groups
// of 16 tile rows, the row index running fastest within a group, so the
// ~one wave of tiles in flight covers a few panels of the wide operand and
// at most 16 of the other (they stay in L2).
__device__ __forceinline__ void grouped_tile(int t, int tiles_m, int tiles_n, int& mt, int& nt) {
    constexpr int group_m = 16;
    const int per_group = group_m * tiles_n;
    const int g = t / per_group, first = g * group_m;
    const int rows = min(tiles_m - first, group_m);
    const int r = t - g * per_group;
    mt = first + r % rows;
    nt = r / rows;
}

// Brings a tensor map (a __grid_constant__ parameter) into the TMA unit's cache.
__device__ __forceinline__ void tma_prefetch(const TmaMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

// Thread 0's setup of a STAGES-deep ring whose mbarriers sit at `bars`:
// full s (bars + 8 s) takes one arrival (the producer's expect_tx), empty s
// (bars + 8 (STAGES + s)) one per consumer warp (8); the inits are fenced for
// the async proxy and both operands' tensor maps prefetched.
template <int STAGES> __device__ __forceinline__ void ring_init(unsigned bars, const TmaMap* t0, const TmaMap* t1) {
    for (int s = 0; s < STAGES; ++s) {
        mbar_init(bars + 8u * s, 1);
        mbar_init(bars + 8u * (STAGES + s), 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    tma_prefetch(t0);
    tma_prefetch(t1);
}

// Advances a ring position: stage s of STAGES and the phase parity it waits for.
template <int STAGES> __device__ __forceinline__ void ring_next(int& s, unsigned& phase) {
    if (++s == STAGES) {
        s = 0;
        phase ^= 1u;
    }
}

// A consumer warpgroup's K loop over one output tile: acc (its 64 x BN f32
// fragment, zeroed here) = Σ over KT slices of A (64 rows at a_off in the
// stage) · B (BN rows at b_off)ᵀ, BK wide and 128-byte swizzled, from a
// STAGES-deep ring of stage_bytes stages at `ring` whose full and empty
// mbarriers sit at bars + 8 s and bars + 8 (STAGES + s). One slice's wgmma
// group stays in flight; a stage is released (one arrival per warp) once
// the group after it is issued, the last after the final wait. (s, phase)
// is the warpgroup's ring position, carried from tile to tile.
template <int BN, int BK, int STAGES>
__device__ __forceinline__ void wg_consume_tile(float* acc, unsigned ring, unsigned stage_bytes, unsigned a_off, unsigned b_off,
                                                unsigned bars, int KT, int lane, int& s, unsigned& phase) {
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    int prev = -1;
    for (int kt = 0; kt < KT; ++kt) {
        mbar_wait(bars + 8u * s, phase);
        const unsigned a_addr = ring + s * stage_bytes + a_off;
        const unsigned b_addr = ring + s * stage_bytes + b_off;
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) wg_fence_operand(acc[i]);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < BK / 16; ++j) wgmma_tile<BN>(acc, wg_desc(a_addr + 32 * j), wg_desc(b_addr + 32 * j));
        wgmma_commit();
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) wg_fence_operand(acc[i]);
        // The slice before this one is finished with: free its stage.
        wgmma_wait<1>();
        if (prev >= 0 && lane == 0) mbar_arrive(bars + 8u * (STAGES + prev));
        prev = s;
        ring_next<STAGES>(s, phase);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) wg_fence_operand(acc[i]);
    if (prev >= 0 && lane == 0) mbar_arrive(bars + 8u * (STAGES + prev));
}

// ---- Additions for the flash prefill kernel (attn/flash_prefill_sm90.cu),
// generic to any wgmma consumer.

// Orders this thread's earlier generic-proxy shared-memory writes (st.shared,
// cp.async) that it has observed (its own, or others' through an mbarrier
// or bar.sync) before its later async-proxy reads (wgmma operands).
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The mbarrier `bar` gets one arrival once every cp.async this thread issued
// before it has landed; .noinc: the arrival counts against the count the
// barrier was initialised with (one per copying thread).
__device__ __forceinline__ void mbar_cp_async_arrive(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// wgmma descriptor of an MN-major operand (wgmma's transposed B, e.g. V
// stored [key][dim] for P·V) written with the 128-byte swizzle: 64 bf16 of
// MN (128 bytes) a row, rows along K, 8-row (1024-byte) atoms along K (the
// stride byte offset) and the 64-wide MN blocks `mn_stride` bytes apart (the
// leading byte offset, a multiple of 16 below 256 KiB).
__device__ __forceinline__ unsigned long long wg_desc_mn(unsigned addr, unsigned mn_stride) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)((mn_stride >> 4) & 0x3FFFu) << 16) |
           ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}

#define WG_REGS_N64 WG_R0 WG_R1 WG_R2 WG_R3
#define WG_ACC_N64 WG_C8(0), WG_C8(8), WG_C8(16), WG_C8(24)

// d (m64 x 64 f32) = (scale_d ? d : 0) + A(64 x 16) · B(64 x 16)^T, both
// K-major in shared memory (descriptors da, db).
__device__ __forceinline__ void wgmma_m64n64k16_ss(float* d, unsigned long long da, unsigned long long db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_REGS_N64 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : WG_ACC_N64
                 : "l"(da), "l"(db), "r"(scale_d));
}

// d (m64 x 256 f32) += A · B: A (64 x 16 bf16) from registers, a[0..3] the
// m16n8k16-style fragment of the thread's warp's 16 rows (a[0]: row g,
// columns 2t, 2t+1; a[1]: row g + 8; a[2], a[3]: columns + 8), B (16 x 256)
// MN-major in shared memory (descriptor db, wg_desc_mn: imm-trans-b = 1).
// The registers of `a` must stay unchanged until the wgmma group is waited for.
__device__ __forceinline__ void wgmma_m64n256k16_rs_tb(float* d, const unsigned (&a)[4], unsigned long long db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" WG_REGS_N256 "}, {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n}\n"
                 : WG_ACC_N256
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

#endif // __CUDA_ARCH_FEAT_SM90_ALL
