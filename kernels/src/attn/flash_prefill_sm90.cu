// Flash prefill attention on Hopper (sm_90a, FlashAttention-3 form) for
// attention_prefill at hd 256: the CUDA plan of attention_prefill
// (kernels/src/attn/mod.rs, `prefill_plan`) picks it on a device that runs
// sm_90a entries; elsewhere flash_prefill.cu's mma.sync kernel (sm_90) runs.
// Same arguments and contract as attention_prefill (attn.cu's header).
//
// nvrtc-arch: sm_90a
//
// Grid (ceil(rows / 128), nh, 1), block 384 = three warpgroups, dynamic
// shared memory F3_SMEM (the plan asks for it). Row blocks run in reverse
// order so that the longest causal rows start first.
// - Warpgroup 0, the producer (setmaxnreg 24): copies the block's Q tile
//   once, then per tile of 64 keys the K and V rows into a 2-stage ring,
//   with cp.async (the pool is paged: one block-table lookup per key row, so
//   no tensor map describes a tile), 8 threads a key row, each 16-byte chunk
//   placed where the 128-byte swizzle puts it; each thread's copies complete
//   the stage's `full` mbarrier (cp.async.mbarrier.arrive.noinc, 128
//   arrivals). Invalid slots are zero-filled and flag the rows that see them
//   (s_rowbad).
// - Warpgroups 1 and 2, the consumers (setmaxnreg 240): each owns 64 query
//   rows. Per tile: S = Q·Kᵀ by 16 wgmma.m64n64k16 (Q and K from shared
//   memory, K-major, 128-byte swizzle), the masks and online softmax in f32
//   registers (exp2 with scale·log2 e folded in, as flash_prefill.cu), then
//   O += P·V by wgmma.m64n256k16 with P from registers as the A operand and
//   V from shared memory as the transposed (MN-major) B operand; O is 64 x
//   256 f32 = 128 registers a thread. The stage goes back to the producer by
//   the `empty` mbarrier (one arrival per consumer warp). A warpgroup whose
//   rows see no key of a tile waits for it and releases it without work.
//   The two consumer warpgroups run unsynchronised, so one's softmax runs
//   beside the other's wgmma (H200, hd 256 causal, 4096 tokens: 341.7
//   TFLOP/s of unmasked products, flash_prefill.cu's mma.sync kernel 175.0,
//   torch SDPA's flash backend 275.0, one call).
// Rows are any mix of sequences, as in flash_prefill.cu: the block takes one
// sequence at a time (all 384 threads meet at a barrier between sequences),
// over the union of that sequence's rows' key ranges.
//
// Numeric contract of P·V: V stays bf16 (the wgmma B operand reads the
// pool's values), and P goes in as two bf16 terms, hi = bf16(p) and lo =
// bf16(p - hi), two wgmma per 16 keys: p is carried to about 2^-17 relative
// (one bf16 rounding alone, 2^-9, is an NMSE of about 5e-6 in a host model of
// the parity cases, over the bound of 1e-6; hi + lo measured 1.3e-9 ..
// 8.6e-9 in the mma.sync kernel's earlier form; this kernel: 3.8e-9 .. 9.7e-9
// over the hd 256 parity cases on the H200). Accumulation in f32 in
// wgmma's order; the row sum l adds the f32 p. The tensor work is 1.5x
// that of one bf16 P·V; V needs no conversion pass and no per-row scales.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

#define F3_HD 256
#define F3_BM 128
#define F3_BN 64
#define F3_STAGES 2
#define F3_THREADS 384
#define F3_FULL 0xffffffffu
// Shared memory: Q as 4 column blocks of 64 (128 rows x 128 bytes each),
// then per stage K and V as 4 blocks of 64 columns (64 keys x 128 bytes).
// Every block is a whole number of 1024-byte swizzle atoms.
#define F3_QBLK (F3_BM * 128)
#define F3_KBLK (F3_BN * 128)
#define F3_Q_BYTES (4 * F3_QBLK)
#define F3_KV_BYTES (4 * F3_KBLK)
#define F3_STAGE_BYTES (2 * F3_KV_BYTES)
#define F3_BAR_OFF (F3_Q_BYTES + F3_STAGES * F3_STAGE_BYTES)
// + the 2·STAGES + 1 mbarriers (64 bytes reserved) + slack to align to 1024.
#define F3_SMEM (F3_BAR_OFF + 64 + 1024)

// Byte offset of 16-byte chunk `u` (0..7) of row `r` in a 128-byte-swizzled
// block: the chunk index XOR the row within its 8-row atom (what the wgmma
// descriptors' swizzle mode reads back).
__device__ __forceinline__ unsigned f3_swz(int r, int u) { return (unsigned)(r * 128 + ((u ^ (r & 7)) << 4)); }

// 16 bytes global -> shared; zero-filled (nothing read) when !in.
__device__ __forceinline__ void f3_cp16(unsigned dst, const void* src, bool in) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(in ? 16 : 0) : "memory");
}

// As flash_prefill.cu: one MUFU.EX2; what ftz flushes is below 2^-126 of the
// row's largest term.
__device__ __forceinline__ float f3_ex2(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

template <int N> __device__ __forceinline__ void f3_fence(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) wg_fence_operand(r[i]);
}

extern __shared__ __align__(1024) unsigned char f3_raw[];

__device__ __forceinline__ void f3_prefill(bf16* __restrict__ out, const bf16* __restrict__ q, const bf16* __restrict__ k_pool,
                                   const bf16* __restrict__ v_pool, const int* __restrict__ block_table,
                                   const int* __restrict__ seq_of_row, const int* __restrict__ pos, int rows, int nh, int nkv, int hd,
                                   int page, int max_pages, int num_seqs, int num_slots, int window, float scale) {
    constexpr int BM = F3_BM, BN = F3_BN, HD = F3_HD;
    __shared__ int s_seq[BM], s_pos[BM], s_lo[BM];
    __shared__ int s_rowbad[BM];
    // [0] sequence, [1] kmin, [2] kmax; per consumer warpgroup c at 4 + 4c:
    // lowest and highest key its rows see, and the span every row sees.
    __shared__ int s_ctl[12];

    if (hd != HD || nkv <= 0 || nh % nkv != 0 || (int)blockIdx.y >= nh) return; // block-uniform: the plan never launches these
    const int tid = threadIdx.x, wg = tid >> 7, warp = tid >> 5, lane = tid & 31;
    const int h = blockIdx.y;
    const int r0 = (gridDim.x - 1 - blockIdx.x) * BM;
    const int kvh = h / (nh / nkv);
    const size_t width = (size_t)nh * HD;
    const long long cap = (long long)max_pages * page;
    const int pshift = page > 0 && (page & (page - 1)) == 0 ? __ffs(page) - 1 : -1;

    const unsigned raw = wg_smem(f3_raw);
    const unsigned qs = (raw + 1023u) & ~1023u;
    const unsigned ring = qs + F3_Q_BYTES;
    const unsigned bars = qs + F3_BAR_OFF;
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (F3_STAGES + s); };
    const unsigned qbar = bars + 8u * (2 * F3_STAGES);

    if (tid == 0) {
        for (int s = 0; s < F3_STAGES; ++s) {
            mbar_init(full(s), 128);
            mbar_init(empty(s), 8);
        }
        mbar_init(qbar, 128);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    // ---- row metadata; rows with an invalid sequence or position are NaN.
    prefill_row_meta<BM, F3_THREADS>(tid, r0, rows, seq_of_row, pos, num_seqs, cap, window, s_seq, s_pos, s_lo, [&](int r) {
        unsigned* o = reinterpret_cast<unsigned*>(out + (size_t)r * width + (size_t)h * HD);
        for (int d = 0; d < HD / 2; ++d) o[d] = 0x7fc07fc0u;
    });
    __syncthreads(); // barriers initialised, metadata written

    // The block takes one sequence at a time: the producer's warp 0 picks it
    // (control, below) between two block-wide barriers that both paths meet
    // (bar.sync 0), and the end of a sequence is a third (bar.sync 1: the
    // producer's invalid-slot flags are complete for the consumers' stores).
    // The two paths are separate loops so that each keeps its own register
    // budget (setmaxnreg).
    const int cw = wg - 1, wi = warp & 3, g = lane >> 2, t4 = lane & 3;
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
        // Q tile: thread tid copies chunk tid % 8 of each 64-column block of rows tid / 8 + 16 i.
        for (int i = 0; i < BM / 16; ++i) {
            const int r = (tid >> 3) + 16 * i, u = tid & 7;
            const bool in = r0 + r < rows;
            const bf16* src = in ? q + (size_t)(r0 + r) * width + (size_t)h * HD + u * 8 : q;
#pragma unroll
            for (int b = 0; b < 4; ++b) f3_cp16(qs + b * F3_QBLK + f3_swz(r, u), src + b * 64, in);
        }
        mbar_cp_async_arrive(qbar);
        int rs = 0; // ring position, the same sequence of tiles as the consumers'
        unsigned rph = 0;
        int prev = -1;
        for (;;) {
            asm volatile("bar.sync 0, 384;\n" ::: "memory"); // the previous sequence's reads of s_seq / s_ctl / s_rowbad are done
            if (warp == 0) {
                int first = BM;
                for (int i = lane; i < BM; i += 32) {
                    if (prev >= 0 && s_seq[i] == prev) s_seq[i] = -1;
                    if (s_seq[i] >= 0) first = min(first, i);
                }
                __syncwarp();
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) first = min(first, __shfl_xor_sync(F3_FULL, first, o));
                const int cur = first < BM ? s_seq[first] : -1;
                int kmin = 0x7fffffff, kmax = -1;
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    int wmin = 0x7fffffff, wmax = -1, flo = -1, fhi = 0x7fffffff;
                    bool all = true;
                    for (int i = c * 64 + lane; i < c * 64 + 64; i += 32) {
                        if (cur >= 0 && s_seq[i] == cur) {
                            wmin = min(wmin, s_lo[i]);
                            wmax = max(wmax, s_pos[i]);
                            flo = max(flo, s_lo[i]);
                            fhi = min(fhi, s_pos[i]);
                        } else {
                            all = false;
                        }
                    }
#pragma unroll
                    for (int o = 16; o > 0; o >>= 1) {
                        wmin = min(wmin, __shfl_xor_sync(F3_FULL, wmin, o));
                        wmax = max(wmax, __shfl_xor_sync(F3_FULL, wmax, o));
                        flo = max(flo, __shfl_xor_sync(F3_FULL, flo, o));
                        fhi = min(fhi, __shfl_xor_sync(F3_FULL, fhi, o));
                    }
                    if (__any_sync(F3_FULL, !all)) fhi = -1; // some row inactive: no tile is full
                    kmin = min(kmin, wmin);
                    kmax = max(kmax, wmax);
                    if (lane == 0) {
                        s_ctl[4 + 4 * c] = wmin;
                        s_ctl[5 + 4 * c] = wmax;
                        s_ctl[6 + 4 * c] = flo;
                        s_ctl[7 + 4 * c] = fhi;
                    }
                }
                if (lane == 0) {
                    s_ctl[0] = cur;
                    s_ctl[1] = kmin;
                    s_ctl[2] = kmax;
                }
                for (int i = lane; i < BM; i += 32) s_rowbad[i] = 0;
            }
            asm volatile("bar.sync 0, 384;\n" ::: "memory");
            const int cur = s_ctl[0];
            if (cur < 0) break;
            const int kmin = s_ctl[1], kmax = s_ctl[2];
            prev = cur;
            const int* trow = block_table + (size_t)cur * max_pages;
            const int kt0 = (kmin / BN) * BN;
            const int ntiles = (kmax - kt0) / BN + 1;
            // ---- producer: 8 threads a key row, rows tid / 8 + 16 i; thread tid
            // copies chunk tid % 8 of each 64-column block of K and V.
            const int u = tid & 7;
            for (int t = 0; t < ntiles; ++t) {
                // A fresh barrier is in phase 0: waiting on parity 1 passes the first round.
                mbar_wait(empty(rs), rph ^ 1u);
                const unsigned kd = ring + rs * F3_STAGE_BYTES, vd = kd + F3_KV_BYTES;
                for (int i = 0; i < BN / 16; ++i) {
                    const int r = (tid >> 3) + 16 * i;
                    const int key = kt0 + t * BN + r;
                    long long slot = -1;
                    if (key >= kmin && key <= kmax) {
                        slot = paged_slot(trow, key, page, pshift, num_slots);
                        if (slot < 0 && u == 0) {
                            for (int j = 0; j < BM; ++j)
                                if (s_seq[j] == cur && key >= s_lo[j] && key <= s_pos[j]) s_rowbad[j] = 1;
                        }
                    }
                    const bool in = slot >= 0;
                    const size_t at = in ? ((size_t)slot * nkv + kvh) * HD + u * 8 : 0;
                    const bf16* ksrc = k_pool + at;
                    const bf16* vsrc = v_pool + at;
                    const unsigned off = f3_swz(r, u);
#pragma unroll
                    for (int b = 0; b < 4; ++b) f3_cp16(kd + b * F3_KBLK + off, ksrc + b * 64, in);
#pragma unroll
                    for (int b = 0; b < 4; ++b) f3_cp16(vd + b * F3_KBLK + off, vsrc + b * 64, in);
                }
                mbar_cp_async_arrive(full(rs));
                ring_next<F3_STAGES>(rs, rph);
            }
            asm volatile("bar.sync 1, 384;\n" ::: "memory");
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
        int rs = 0;
        unsigned rph = 0;
        const float sc = scale * 1.4426950408889634f; // scores in the log2 domain
        const int ra = cw * 64 + wi * 16 + g, rb = ra + 8; // this thread's fragment rows
        mbar_wait(qbar, 0);
        fence_proxy_async_smem();
        for (;;) {
            asm volatile("bar.sync 0, 384;\n" ::: "memory");
            asm volatile("bar.sync 0, 384;\n" ::: "memory");
            const int cur = s_ctl[0];
            if (cur < 0) break;
            const int kmin = s_ctl[1], kmax = s_ctl[2];
            const int kt0 = (kmin / BN) * BN;
            const int ntiles = (kmax - kt0) / BN + 1;
            // ---- consumers: warpgroup cw, rows cw·64 .. cw·64 + 63.
            const int wmin = s_ctl[4 + 4 * cw], wmax = s_ctl[5 + 4 * cw];
            const int full_lo = s_ctl[6 + 4 * cw], full_hi = s_ctl[7 + 4 * cw];
            const bool aa = s_seq[ra] == cur, ab = s_seq[rb] == cur;
            const int pa = s_pos[ra], la = s_lo[ra], pb = s_pos[rb], lb = s_lo[rb];
            const unsigned qa = qs + cw * 64 * 128;

            float o[128];
#pragma unroll
            for (int i = 0; i < 128; ++i) o[i] = 0.0f;
            float m_a = -SY_INF, m_b = -SY_INF, l_a = 0.0f, l_b = 0.0f;

            unsigned ph[BN / 16][4], pl[BN / 16][4]; // P of the tile carried to its P·V
            // S = Q · Kᵀ of the stage at kb: 64 rows x 64 keys, 16 k-steps of 16 over hd (issued, not waited for).
            auto issue_s = [&](float (&s)[32], unsigned kb) {
#pragma unroll
                for (int j = 0; j < HD / 16; ++j)
                    wgmma_m64n64k16_ss(s, wg_desc(qa + (j >> 2) * F3_QBLK + (j & 3) * 32), wg_desc(kb + (j >> 2) * F3_KBLK + (j & 3) * 32), 0 + (j > 0));
                wgmma_commit();
            };
            // O += P · V of the stage at kb: per 16 keys, hi and lo against the same V rows (issued, not waited for).
            auto issue_pv = [&](unsigned kb) {
                const unsigned vb = kb + F3_KV_BYTES;
#pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk) {
                    const unsigned long long dv = wg_desc_mn(vb + kk * 16 * 128, F3_KBLK);
                    wgmma_m64n256k16_rs_tb(o, ph[kk], dv);
                    wgmma_m64n256k16_rs_tb(o, pl[kk], dv);
                }
                wgmma_commit();
            };
            // The masks and online softmax of tile kt in s (scores in, p out); returns the rows' rescale factors.
            auto softmax = [&](float (&s)[32], int kt, float& al_a, float& al_b) {
                // ---- masks and online softmax (log2 domain), as flash_prefill.cu: full
                // tiles keep raw scores (max unscaled, scale and shift in one FFMA).
                // Fragment: n8 block nt holds row ra at s[4nt], s[4nt+1] (keys 8nt + 2t4, +1), row rb at s[4nt+2], s[4nt+3].
                float mx_a = -SY_INF, mx_b = -SY_INF;
                const bool fullt = kt >= full_lo && kt + BN - 1 <= full_hi && sc >= 0.0f;
                if (fullt) {
#pragma unroll
                    for (int nt = 0; nt < BN / 8; ++nt) {
                        mx_a = fmaxf(mx_a, fmaxf(s[4 * nt], s[4 * nt + 1]));
                        mx_b = fmaxf(mx_b, fmaxf(s[4 * nt + 2], s[4 * nt + 3]));
                    }
                } else {
#pragma unroll
                    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int j = kt + nt * 8 + 2 * t4 + (e & 1);
                            const bool rowa = e < 2;
                            const bool inr = rowa ? (aa && j >= la && j <= pa) : (ab && j >= lb && j <= pb);
                            const float v = inr ? s[4 * nt + e] * sc : -SY_INF;
                            s[4 * nt + e] = v;
                            if (rowa) mx_a = fmaxf(mx_a, v);
                            else mx_b = fmaxf(mx_b, v);
                        }
                    }
                }
                mx_a = fmaxf(mx_a, __shfl_xor_sync(F3_FULL, mx_a, 1));
                mx_b = fmaxf(mx_b, __shfl_xor_sync(F3_FULL, mx_b, 1));
                mx_a = fmaxf(mx_a, __shfl_xor_sync(F3_FULL, mx_a, 2));
                mx_b = fmaxf(mx_b, __shfl_xor_sync(F3_FULL, mx_b, 2));
                if (fullt) {
                    mx_a *= sc;
                    mx_b *= sc;
                }
                const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
                // A row that has seen no key yet keeps max -inf: subtract 0 so exp2 gives 0, not NaN.
                const float ua = mn_a == -SY_INF ? 0.0f : mn_a, ub = mn_b == -SY_INF ? 0.0f : mn_b;
                al_a = f3_ex2(m_a - ua);
                al_b = f3_ex2(m_b - ub);
                m_a = mn_a;
                m_b = mn_b;
                float sum_a = 0.0f, sum_b = 0.0f;
                if (fullt) {
#pragma unroll
                    for (int nt = 0; nt < BN / 8; ++nt) {
                        s[4 * nt] = f3_ex2(fmaf(s[4 * nt], sc, -ua));
                        s[4 * nt + 1] = f3_ex2(fmaf(s[4 * nt + 1], sc, -ua));
                        s[4 * nt + 2] = f3_ex2(fmaf(s[4 * nt + 2], sc, -ub));
                        s[4 * nt + 3] = f3_ex2(fmaf(s[4 * nt + 3], sc, -ub));
                        sum_a += s[4 * nt] + s[4 * nt + 1];
                        sum_b += s[4 * nt + 2] + s[4 * nt + 3];
                    }
                } else {
#pragma unroll
                    for (int nt = 0; nt < BN / 8; ++nt) {
                        s[4 * nt] = f3_ex2(s[4 * nt] - ua);
                        s[4 * nt + 1] = f3_ex2(s[4 * nt + 1] - ua);
                        s[4 * nt + 2] = f3_ex2(s[4 * nt + 2] - ub);
                        s[4 * nt + 3] = f3_ex2(s[4 * nt + 3] - ub);
                        sum_a += s[4 * nt] + s[4 * nt + 1];
                        sum_b += s[4 * nt + 2] + s[4 * nt + 3];
                    }
                }
                l_a = l_a * al_a + sum_a;
                l_b = l_b * al_b + sum_b;

            };
            // P as bf16 hi + lo in the A fragment's order: for keys 16kk .. 16kk + 15,
            // (row a, 2t4), (row b, 2t4), (row a, 8 + 2t4), (row b, 8 + 2t4) = s[8kk + 0 .. 7] in pairs.
            auto pack_p = [&](const float (&s)[32]) {
#pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk) {
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const float x0 = s[8 * kk + 2 * i], x1 = s[8 * kk + 2 * i + 1];
                        const unsigned hi = pack_bf16_rn(x0, x1);
                        ph[kk][i] = hi;
                        pl[kk][i] = pack_bf16_rn(x0 - bf16_lo(hi), x1 - bf16_hi(hi));
                    }
                }
                // Every P register is final before a P·V wgmma reads it (else ptxas
                // interleaves the packing with the wgmma and serialises them).
#pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
                    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(ph[kk][i]), "+r"(pl[kk][i])::"memory");
            };
            // Past the first tiles the running max rarely moves: skip the 128
            // multiplies when no row of the warp needs them (warp-uniform).
            auto rescale_o = [&](float al_a, float al_b) {
                if (__any_sync(F3_FULL, al_a != 1.0f || al_b != 1.0f)) {
#pragma unroll
                    for (int i = 0; i < 32; ++i) {
                        o[4 * i] *= al_a;
                        o[4 * i + 1] *= al_a;
                        o[4 * i + 2] *= al_b;
                        o[4 * i + 3] *= al_b;
                    }
                }
            };
            // This warp is done with stage st (its wgmma groups reading it have completed).
            auto release = [&](int st) {
                __syncwarp();
                if (lane == 0) mbar_arrive(empty(st));
            };

            // Tiles this warpgroup's rows see are contiguous, [ta, tb]; the others are
            // waited for and released. P of a tile (ph, pl, stage cst) goes to its P·V
            // (flush: issued, waited for, stage released) before the next tile's S.
            // Issuing tile t's S before tile t - 1's P·V, so that t's softmax runs while
            // that P·V is on the tensor cores (FlashAttention-3's intra-warpgroup
            // overlap), measured 250 TFLOP/s against 342 for this order (H200, hd 256
            // causal, 4096 tokens, one call): the P registers of both tiles live at once
            // (about 40 bytes a thread spilled at 240 registers) and a stage stays held
            // until the next tile's P·V, which leaves the producer half a tile to refill
            // it.
            int cst = 0;
            auto flush = [&]() {
                f3_fence(o);
                wgmma_fence();
                issue_pv(ring + cst * F3_STAGE_BYTES);
                f3_fence(o);
                wgmma_wait<0>();
                f3_fence(o);
                release(cst);
            };
            auto skip = [&]() {
                mbar_wait(full(rs), rph);
                release(rs);
                ring_next<F3_STAGES>(rs, rph);
            };
            const int ta = min(ntiles, (wmin - kt0) / BN);
            const int tb = wmax < kt0 ? -1 : min(ntiles - 1, (wmax - kt0) / BN);
            for (int t = 0; t < ta; ++t) skip();
            if (ta <= tb) {
                float s[32];
                float al_a, al_b;
                mbar_wait(full(rs), rph);
                // cp.async wrote the stage through the generic proxy; wgmma reads it through the async one.
                fence_proxy_async_smem();
                wgmma_fence();
                issue_s(s, ring + rs * F3_STAGE_BYTES);
                f3_fence(s);
                wgmma_wait<0>();
                f3_fence(s);
                softmax(s, kt0 + ta * BN, al_a, al_b);
                pack_p(s);
                cst = rs;
                ring_next<F3_STAGES>(rs, rph);
                for (int t = ta + 1; t <= tb; ++t) {
                    flush();
                    mbar_wait(full(rs), rph);
                    fence_proxy_async_smem();
                    f3_fence(o);
                    wgmma_fence();
                    issue_s(s, ring + rs * F3_STAGE_BYTES);
                    f3_fence(s);
                    wgmma_wait<0>();
                    f3_fence(s);
                    softmax(s, kt0 + t * BN, al_a, al_b);
                    rescale_o(al_a, al_b);
                    pack_p(s);
                    cst = rs;
                    ring_next<F3_STAGES>(rs, rph);
                }
                flush();
            }
            for (int t = max(ta, tb + 1); t < ntiles; ++t) skip();

            // ---- finish: row sums across the quad; NaN flags once every copy of the sequence was issued (below).
            l_a += __shfl_xor_sync(F3_FULL, l_a, 1);
            l_b += __shfl_xor_sync(F3_FULL, l_b, 1);
            l_a += __shfl_xor_sync(F3_FULL, l_a, 2);
            l_b += __shfl_xor_sync(F3_FULL, l_b, 2);
            const float ia = 1.0f / l_a, ib = 1.0f / l_b;
#pragma unroll
            for (int i = 0; i < 32; ++i) {
                o[4 * i] *= ia;
                o[4 * i + 1] *= ia;
                o[4 * i + 2] *= ib;
                o[4 * i + 3] *= ib;
            }
            // s_rowbad is complete once the producer has issued every tile (it
            // writes a row's flag before the arrival that the tile's consumers
            // wait for, and this thread waited on every tile's full barrier;
            // the named barrier below also orders it, producer included).
            asm volatile("bar.sync 1, 384;\n" ::: "memory");
            const bool nan_a = s_rowbad[ra] != 0, nan_b = s_rowbad[rb] != 0;
            bf16* oa = out + (size_t)(r0 + ra) * width + (size_t)h * HD;
            bf16* ob = out + (size_t)(r0 + rb) * width + (size_t)h * HD;
#pragma unroll
            for (int nt = 0; nt < HD / 8; ++nt) {
                const int col = nt * 8 + 2 * t4;
                if (aa) *reinterpret_cast<unsigned*>(oa + col) = nan_a ? 0x7fc07fc0u : pack_bf16(o[4 * nt], o[4 * nt + 1]);
                if (ab) *reinterpret_cast<unsigned*>(ob + col) = nan_b ? 0x7fc07fc0u : pack_bf16(o[4 * nt + 2], o[4 * nt + 3]);
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(F3_THREADS, 1)
    attention_prefill_flash3_hd256(bf16* __restrict__ out, const bf16* __restrict__ q, const bf16* __restrict__ k_pool,
                                   const bf16* __restrict__ v_pool, const int* __restrict__ block_table,
                                   const int* __restrict__ seq_of_row, const int* __restrict__ pos, int rows, int nh, int nkv, int hd,
                                   int page, int max_pages, int num_seqs, int num_slots, int window, float scale) {
    f3_prefill(out, q, k_pool, v_pool, block_table, seq_of_row, pos, rows, nh, nkv, hd, page, max_pages, num_seqs, num_slots, window, scale);
}

#endif // __CUDA_ARCH_FEAT_SM90_ALL
