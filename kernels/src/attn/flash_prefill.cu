// Flash prefill attention (FlashAttention-2 form) for attention_prefill at
// hd 128, 256 and 512: the CUDA plan of attention_prefill (kernels/src/attn/
// mod.rs, `cuda_attention_prefill`) picks these entries; other head widths,
// and pointers that are not 16-byte aligned, keep attn.cu's kernel. Same
// arguments and contract as attention_prefill (attn.cu's header).
//
// Grid (ceil(rows / BM), nh, hd / DV), block 32 * WARPS, dynamic shared
// memory FlashCfg::SMEM_BYTES (the plan asks for it). DV = min(hd, 256)
// output dims per block: hd 512 runs two blocks per (rows, head), each
// computing all 512 dims of S = Q·Kᵀ and one 256-dim half of O (128 f32
// accumulators a thread, which is what a thread can hold). Row blocks run
// in reverse order so that the longest causal rows start first.
//
// Block: BM = 16 * WARPS query rows of head h (KV head h / (nh / nkv)); warp
// w owns rows 16w .. 16w + 15. Rows are any mix of sequences: the block
// takes one sequence at a time (the first pending row's), masking the rest,
// over the key range that is the union of that sequence's rows' causal /
// window ranges, in tiles of BN keys; tiles wholly outside a warp's rows'
// ranges cost that warp nothing, and tiles outside every row's range are
// never loaded. Per tile, everything on the tensor cores (mma.sync
// m16n8k16, f32 accumulate):
//   - the block's 2..4 warps' threads copy K (and V's DV-dim slice) rows
//     into a STAGES-deep ring in shared memory with cp.async, one block-table
//     lookup per key row and thread; rows padded by 16 bytes so ldmatrix is
//     conflict-free. V aliasing K (the same pool, Gemma's attention_k_eq_v)
//     copies only the K tile (V's f16 tile is converted from it);
//   - S = Q·Kᵀ in bf16: Q (loaded once per block into shared memory) and K
//     fragments by ldmatrix, the 16 k-steps unrolled so that the next steps'
//     fragments load while this step's MMAs run;
//   - masks (only on tiles that are not wholly inside every row's range of
//     the warp), online softmax in f32 with exp2 (scale·log2 e folded in: on
//     unmasked tiles the max is taken on raw scores and each exp2's argument
//     is one FFMA); the accumulator's rescale is skipped when no row of the
//     warp changed its max (or e_run, below);
//   - O += P·V in f16 (mma.sync m16n8k16 f16 in, f32 accumulate), one MMA
//     per product, with V by ldmatrix.trans from a converted copy of the tile.
// Numeric contract of P·V (the rest is as attn.cu's): V is converted to f16
// once per tile in shared memory, by the threads that copied it, each key
// row j scaled by 2^(15 - e_j) where e_j is the exponent of the row's
// largest |v| (e_j >= -110): bf16's 8 significant bits fit f16's 11, so
// every value down to 2^-39 of its row's largest converts exactly and none
// can overflow (f16 tops at 65504, V may reach 3e38). P is rounded to f16
// as p·2^(e_j - e_run) ∈ [0, 1], e_run the largest e_j of the tiles seen so
// far, so that P'·V' = p·v·2^(15 - e_run) for every key; the accumulator
// moves to a new e_run by a power of two folded into the online-softmax
// rescale, and 2^(e_run - 15) / l comes off at the end. Scales are powers of
// two, exact in f32, bf16 and f16. What is lost: P's rounding to f16 (2^-12
// relative; each product p·v also carries at most 2^-25 · 2^(e_run + 1)
// absolute, where p·2^(e_j - e_run) falls below f16's normal range). Before
// the output's bf16 rounding that is an NMSE of about 2e-8 against an exact
// reference; after it, the few outputs whose rounding flips dominate: NMSE
// 3.7e-7 .. 6.5e-7 against the CPU reference's bf16 output on the H200 over
// the parity cases these entries take, V's range cases included (bound
// 1e-6; hi + lo bf16 P, the previous form at 1.5x the tensor work, gave
// 1.3e-9 .. 8.6e-9; one bf16 rounding of P, 2^-9, about 5e-6 in a host
// model of the same cases).
// The converted tile costs one pass over V per block (8 16-byte chunks a
// thread at hd 256) and no barrier of its own (it runs before the loop's
// barrier); converting after ldmatrix.trans instead would have each of the
// 8 warps convert the whole tile (8x the conversions).
// Invalid slots: a key in the range whose page entry is negative or whose
// slot is outside the pool gets zero K and V rows in shared memory, and the
// thread that found it flags every row of the sequence with that key in its
// range (s_rowbad): those rows are NaN, as the reference defines. Rows with
// an invalid sequence or position are NaN.
// nvrtc: one module, three entries (flash_prefill::attention_prefill_flash_hd*).

#define FP_FULL 0xffffffffu

__device__ __forceinline__ void fp_mma(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}


// The same with f16 inputs (P·V: P and the scaled V tile in f16).
__device__ __forceinline__ void fp_mma_f16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// (lo, hi) f32 -> packed f16 pair, round to nearest even (lo in bits 0..15).
__device__ __forceinline__ unsigned fp_pack_f16(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// 2^e as f32 for e >= -126, else 0 (every caller's e is at most 127).
__device__ __forceinline__ float fp_pow2(int e) { return e >= -126 ? __int_as_float((e + 127) << 23) : 0.0f; }

// Shared-memory 16-byte load / store as asm volatile, so that they stay
// ordered against the cp.async waits (which carry no memory clobber).
__device__ __forceinline__ void fp_lds16(unsigned (&w)[4], unsigned addr) {
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "r"(addr));
}
__device__ __forceinline__ void fp_sts16(unsigned addr, const unsigned (&w)[4]) {
    asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]));
}

// Exponents of V rows: a row whose largest |v| is below 2^FP_EMIN (zeros,
// tiny or subnormal values) counts as 2^FP_EMIN, so that its scale
// 2^(15 - e) stays a normal f32 (and its tiny values stay normal f16).
#define FP_EMIN (-110)

// 16 bytes global -> shared; zero-filled (nothing read) when !in.
__device__ __forceinline__ void fp_cp16(unsigned dst, const void* src, bool in) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(in ? 16 : 0));
}
// The same at constant byte offsets OFF from both addresses: the chunks of a
// key row share one 64-bit source and one shared address (offsets fold into
// the instruction instead of a 64-bit add each).
template <int OFF>
__device__ __forceinline__ void fp_cp16_at(unsigned dst, const void* src, bool in) {
    asm volatile("cp.async.cg.shared.global [%0+%3], [%1+%3], 16, %2;\n" ::"r"(dst), "l"(src), "r"(in ? 16 : 0), "n"(OFF));
}
__device__ __forceinline__ void fp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void fp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ftz: one MUFU.EX2, where the plain form adds a range test and two
// multiplies for subnormal results. What it flushes is below 2^-126 of the
// row's largest term (p, or the rescale of an accumulator that the new max
// dwarfs by as much): P rounds to f16 (nothing below 2^-25 survives) and l
// holds at least 1.
__device__ __forceinline__ float fp_ex2(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// Two bf16 times two bf16 (bf16x2, sm_90). Only used with a power-of-two
// factor, where it is exact unless the product leaves bf16's (= f32's) range.
__device__ __forceinline__ unsigned fp_mul_bf16x2(unsigned a, unsigned b) {
    unsigned r;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

// Scales the O fragments' two rows (a lane's row a in elements 0, 1 and row
// b in 2, 3 of each m16n8 accumulator) by fa and fb.
template <int N> __device__ __forceinline__ void fp_scale_rows(float (&o)[N][4], float fa, float fb) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
        o[i][0] *= fa;
        o[i][1] *= fa;
        o[i][2] *= fb;
        o[i][3] *= fb;
    }
}

// 2^d as f32 for d >= -126, else 0, from an exponent difference d = a - b
// (one VIADDMNMX and one LEA: the clamp to -127 makes the biased exponent 0).
__device__ __forceinline__ float fp_pow2_diff(int a, int b) {
    return __int_as_float((__viaddmax_s32(a, -b, -127) + 127) << 23);
}

// f(fp_ic<0>{}) .. f(fp_ic<N - 1>{}): compile-time indices for template
// arguments (the cp.async offsets).
template <int V>
struct fp_ic {
    static constexpr int value = V;
};
template <int I, int N, typename F>
__device__ __forceinline__ void static_for_from(F&& f) {
    if constexpr (I < N) {
        f(fp_ic<I>{});
        static_for_from<I + 1, N>(f);
    }
}
template <int N, typename F>
__device__ __forceinline__ void static_for(F&& f) {
    static_for_from<0, N>(f);
}

template <int HD, int WARPS, int BN, int STAGES>
struct FlashCfg {
    static constexpr int BM = 16 * WARPS;
    static constexpr int THREADS = 32 * WARPS;
    static constexpr int DV = HD < 256 ? HD : 256;
    static constexpr int LDK = HD + 8; // Q and K row stride in shared memory (bf16)
    static constexpr int LDV = DV + 8;
    static constexpr int Q_ELEMS = BM * LDK;
    static constexpr int K_ELEMS = BN * LDK;
    static constexpr int STAGE_ELEMS = K_ELEMS + BN * LDV;
    static constexpr int SMEM_BYTES = (Q_ELEMS + STAGES * STAGE_ELEMS) * 2;
    static constexpr int TPK = THREADS / BN; // loader threads per key row
    static_assert(THREADS % BN == 0 && (HD / 8) % TPK == 0 && (DV / 8) % TPK == 0, "loader split");
    static_assert(BN % 16 == 0 && HD % DV == 0 && STAGES >= 2, "tile shape");
};

extern __shared__ __align__(128) bf16 fp_dyn[];

template <int HD, int WARPS, int BN, int STAGES>
__device__ __forceinline__ void flash_prefill_body(bf16* __restrict__ out, const bf16* __restrict__ q, const bf16* __restrict__ k_pool,
                                                   const bf16* __restrict__ v_pool, const int* __restrict__ block_table,
                                                   const int* __restrict__ seq_of_row, const int* __restrict__ pos, int rows, int nh, int nkv,
                                                   int hd, int page, int max_pages, int num_seqs, int num_slots, int window, float scale) {
    typedef FlashCfg<HD, WARPS, BN, STAGES> C;
    constexpr int BM = C::BM, THREADS = C::THREADS, DV = C::DV, LDK = C::LDK, TPK = C::TPK;
    __shared__ int s_seq[BM], s_pos[BM], s_lo[BM];
    __shared__ int s_ctl[3];
    __shared__ int s_rowbad[BM]; // the row has a key with an invalid slot in its range
    __shared__ __align__(8) int s_vexp[STAGES * BN]; // per stage and key: e, the V row's scale being 2^(15 - e)

    if (hd != HD || nkv <= 0 || nh % nkv != 0 || (int)blockIdx.y >= nh) return; // block-uniform: the plan never launches these
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int mi = lane >> 3, rr = lane & 7;
    const int h = blockIdx.y, z = blockIdx.z;
    const int r0 = (gridDim.x - 1 - blockIdx.x) * BM;
    const int kvh = h / (nh / nkv);
    const size_t width = (size_t)nh * HD;
    const long long cap = (long long)max_pages * page;
    const bool alias = k_pool == v_pool;
    const int pshift = page > 0 && (page & (page - 1)) == 0 ? __ffs(page) - 1 : -1;
    bf16* const qs = fp_dyn;
    bf16* const ring = fp_dyn + C::Q_ELEMS;
    const unsigned ring_addr = smem_addr(ring);

    // ---- row metadata; rows with an invalid sequence or position are NaN (this block's DV dims).
    prefill_row_meta<BM, THREADS>(tid, r0, rows, seq_of_row, pos, num_seqs, cap, window, s_seq, s_pos, s_lo, [&](int r) {
        unsigned* o = reinterpret_cast<unsigned*>(out + (size_t)r * width + (size_t)h * HD + z * DV);
        for (int d = 0; d < DV / 2; ++d) o[d] = 0x7fc07fc0u;
    });
    // ---- Q tile, its own cp.async group (rows past `rows` are zeros).
    for (int c = tid; c < BM * (HD / 8); c += THREADS) {
        const int i = c / (HD / 8), col = (c % (HD / 8)) * 8;
        const bool in = r0 + i < rows;
        const bf16* src = in ? q + (size_t)(r0 + i) * width + (size_t)h * HD + col : q;
        fp_cp16(smem_addr(qs + i * LDK + col), src, in);
    }
    fp_commit();

    const float sc = scale * 1.4426950408889634f; // scores in the log2 domain
    const int ra = warp * 16 + g, rb = ra + 8;    // this thread's fragment rows
    int prev = -1;
    for (;;) {
        __syncthreads(); // the previous sequence's reads of s_seq / s_ctl and the ring are done
        if (warp == 0) {
            int first = BM;
            for (int i = lane; i < BM; i += 32) {
                if (prev >= 0 && s_seq[i] == prev) s_seq[i] = -1;
                if (s_seq[i] >= 0) first = min(first, i);
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) first = min(first, __shfl_xor_sync(FP_FULL, first, o));
            const int cur = first < BM ? s_seq[first] : -1;
            int kmin = 0x7fffffff, kmax = -1;
            for (int i = lane; i < BM; i += 32) {
                if (cur >= 0 && s_seq[i] == cur) {
                    kmin = min(kmin, s_lo[i]);
                    kmax = max(kmax, s_pos[i]);
                }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                kmin = min(kmin, __shfl_xor_sync(FP_FULL, kmin, o));
                kmax = max(kmax, __shfl_xor_sync(FP_FULL, kmax, o));
            }
            if (lane == 0) {
                s_ctl[0] = cur;
                s_ctl[1] = kmin;
                s_ctl[2] = kmax;
            }
            for (int i = lane; i < BM; i += 32) s_rowbad[i] = 0;
        }
        __syncthreads();
        const int cur = s_ctl[0];
        if (cur < 0) break;
        const int kmin = s_ctl[1], kmax = s_ctl[2];
        prev = cur;
        const int* trow = block_table + (size_t)cur * max_pages;

        // This warp's rows: activity, ranges, and the span of keys where every row of the warp sees every key.
        const bool aa = s_seq[ra] == cur, ab = s_seq[rb] == cur;
        const int pa = s_pos[ra], la = s_lo[ra], pb = s_pos[rb], lb = s_lo[rb];
        int wmin = 0x7fffffff, wmax = -1, full_lo = -1, full_hi = 0x7fffffff;
        if (aa) {
            wmin = min(wmin, la);
            wmax = max(wmax, pa);
            full_lo = max(full_lo, la);
            full_hi = min(full_hi, pa);
        }
        if (ab) {
            wmin = min(wmin, lb);
            wmax = max(wmax, pb);
            full_lo = max(full_lo, lb);
            full_hi = min(full_hi, pb);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            wmin = min(wmin, __shfl_xor_sync(FP_FULL, wmin, o));
            wmax = max(wmax, __shfl_xor_sync(FP_FULL, wmax, o));
            full_lo = max(full_lo, __shfl_xor_sync(FP_FULL, full_lo, o));
            full_hi = min(full_hi, __shfl_xor_sync(FP_FULL, full_hi, o));
        }
        if (__ballot_sync(FP_FULL, aa && ab) != FP_FULL) full_hi = -1; // some row inactive: no tile is full

        const int kt0 = (kmin / BN) * BN;
        const int ntiles = (kmax - kt0) / BN + 1;

        // Copies tile `t` into ring stage `t % STAGES`.
        auto load_tile = [&](int t) {
            const int kr = tid / TPK, sub = tid % TPK;
            const int key = kt0 + t * BN + kr;
            long long slot = -1;
            bool bad = false;
            if (key >= kmin && key <= kmax) {
                slot = paged_slot(trow, key, page, pshift, num_slots);
                bad = slot < 0;
            }
            const size_t at = slot >= 0 ? ((size_t)slot * nkv + kvh) * HD : 0;
            if (bad && sub == 0) {
                for (int i = 0; i < BM; ++i) {
                    if (s_seq[i] == cur && key >= s_lo[i] && key <= s_pos[i]) s_rowbad[i] = 1;
                }
            }
            const unsigned kd = ring_addr + (unsigned)((t % STAGES) * C::STAGE_ELEMS + kr * LDK + sub * 8) * 2;
            const bf16* ksrc = k_pool + at + sub * 8;
            const bool in = slot >= 0;
            static_for<HD / 8 / TPK>([&](auto c) { fp_cp16_at<c.value * TPK * 16>(kd, ksrc, in); });
            if (!alias) {
                const unsigned vd = ring_addr + (unsigned)((t % STAGES) * C::STAGE_ELEMS + C::K_ELEMS + kr * C::LDV + sub * 8) * 2;
                const bf16* vsrc = v_pool + at + z * DV + sub * 8;
                static_for<DV / 8 / TPK>([&](auto c) { fp_cp16_at<c.value * TPK * 16>(vd, vsrc, in); });
            }
        };

        // V of the tile in stage `st` to f16, by the threads that copied it
        // (their cp.async data is visible to them after the wait, to others
        // only after the next barrier, which every reader passes first): each
        // key row is scaled by 2^(15 - e), e the exponent of its largest |v|,
        // so the row's values are exact in f16 (bf16's 8 significant bits
        // fit f16's 11 wherever the scaled value is a normal f16: down to
        // 2^-39 of the row's largest) and none overflows. Written to the
        // stage's V area, which under V = K is otherwise unused (the K tile
        // must stay bf16 for Q·Kᵀ).
        auto convert_v = [&](int st) {
            bf16* ks = ring + st * C::STAGE_ELEMS;
            bf16* vs = ks + C::K_ELEMS;
            const int kr = tid / TPK, sub = tid % TPK;
            const unsigned src = smem_addr(alias ? ks + kr * LDK + z * DV : vs + kr * C::LDV);
            const unsigned dst = smem_addr(vs + kr * C::LDV);
            constexpr int NC = DV / 8 / TPK;
            unsigned w[NC][4];
            // |v| as bf16 bit patterns order as unsigned integers (NaN above inf): the
            // largest by halfword pairs, three operands an instruction (VIMNMX3.U16x2).
            unsigned mx2 = 0;
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                fp_lds16(w[c], src + (sub + c * TPK) * 16);
                mx2 = __vimax3_u16x2(mx2, w[c][0] & 0x7fff7fffu, w[c][1] & 0x7fff7fffu);
                mx2 = __vimax3_u16x2(mx2, w[c][2] & 0x7fff7fffu, w[c][3] & 0x7fff7fffu);
            }
            unsigned mx = max(mx2 & 0xffffu, mx2 >> 16);
#pragma unroll
            for (int sh = 1; sh < TPK; sh <<= 1) mx = max(mx, __shfl_xor_sync(FP_FULL, mx, sh));
            // Biased exponent 255 (inf / NaN) gives e = 128 and a scale of 2^-113: inf and NaN stay what they are.
            const int e = max((int)(mx >> 7) - 127, FP_EMIN);
            // 2^(15 - e) as a bf16 pair (e in [-110, 128]: a normal bf16): the scaling in
            // bf16x2 is exact (the product's exponent stays in bf16's range, and a product
            // that would be subnormal there is below f16's smallest subnormal anyway), one
            // instruction for two values where f32 needed two.
            const unsigned fb = (unsigned)(142 - e) << 7;
            const unsigned f2 = fb | (fb << 16);
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                unsigned y[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const unsigned ws = fp_mul_bf16x2(w[c][i], f2);
                    y[i] = fp_pack_f16(bf16_lo(ws), bf16_hi(ws));
                }
                fp_sts16(dst + (sub + c * TPK) * 16, y);
            }
            if (sub == 0) s_vexp[st * BN + kr] = e;
        };

#pragma unroll
        for (int t = 0; t < STAGES - 1; ++t) {
            if (t < ntiles) load_tile(t);
            fp_commit();
        }
        fp_wait<STAGES - 2>(); // tile 0 landed (this thread's copies)
        convert_v(0);

        float o[DV / 8][4];
#pragma unroll
        for (int i = 0; i < DV / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
        float m_a = -SY_INF, m_b = -SY_INF, l_a = 0.0f, l_b = 0.0f;
        // o holds P·V in units of 2^(15 - e_run): e_run is the largest V row exponent of the tiles seen so far.
        int e_run = FP_EMIN;

        for (int t = 0; t < ntiles; ++t) {
            __syncthreads(); // tile t landed and converted for every thread; stage (t - 1) % STAGES is free
            if (t + STAGES - 1 < ntiles) load_tile(t + STAGES - 1);
            fp_commit();

            const int kt = kt0 + t * BN;
            // warp-uniform: skip when no key of this tile is seen by the warp's rows
            if (kt <= wmax && kt + BN - 1 >= wmin) {
                const int st = t % STAGES;
                const bf16* ks = ring + st * C::STAGE_ELEMS;
                const bf16* vs = ks + C::K_ELEMS;
                constexpr int ldv = C::LDV;

                // ---- S = Q · Kᵀ (16 rows x BN keys per warp).
                float s[BN / 8][4];
#pragma unroll
                for (int i = 0; i < BN / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
                const unsigned qa_addr = smem_addr(qs + (warp * 16 + (mi & 1) * 8 + rr) * LDK + (mi >> 1) * 8);
                const unsigned kb_addr = smem_addr(ks + ((mi >> 1) * 8 + rr) * LDK + (mi & 1) * 8);
#pragma unroll
                for (int kk = 0; kk < HD; kk += 16) {
                    unsigned a0, a1, a2, a3;
                    ldsm_x4(a0, a1, a2, a3, qa_addr + kk * 2);
#pragma unroll
                    for (int nb = 0; nb < BN / 16; ++nb) {
                        unsigned b0, b1, b2, b3;
                        ldsm_x4(b0, b1, b2, b3, kb_addr + (nb * 16 * LDK + kk) * 2);
                        fp_mma(s[2 * nb], a0, a1, a2, a3, b0, b1);
                        fp_mma(s[2 * nb + 1], a0, a1, a2, a3, b2, b3);
                    }
                }

                // ---- masks, online softmax (log2 domain). Tiles wholly inside every row's
                // range (all but the diagonal ones) keep raw scores: the max is taken
                // unscaled (sc >= 0: scaling keeps the order) and each exp2 gets its
                // scale and shift in one FFMA. Edge tiles (and sc < 0) scale first and
                // mask with -inf, whose exp2 is 0 whatever the scale.
                float mx_a = -SY_INF, mx_b = -SY_INF;
                const bool full = kt >= full_lo && kt + BN - 1 <= full_hi && sc >= 0.0f;
                if (full) {
#pragma unroll
                    for (int nt = 0; nt < BN / 8; ++nt) {
                        mx_a = fmaxf(mx_a, fmaxf(s[nt][0], s[nt][1]));
                        mx_b = fmaxf(mx_b, fmaxf(s[nt][2], s[nt][3]));
                    }
                } else {
#pragma unroll
                    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int j = kt + nt * 8 + 2 * t4 + (e & 1);
                            const bool rowa = e < 2;
                            const bool inr = rowa ? (aa && j >= la && j <= pa) : (ab && j >= lb && j <= pb);
                            const float v = inr ? s[nt][e] * sc : -SY_INF;
                            s[nt][e] = v;
                            if (rowa) mx_a = fmaxf(mx_a, v);
                            else mx_b = fmaxf(mx_b, v);
                        }
                    }
                }
                mx_a = fmaxf(mx_a, __shfl_xor_sync(FP_FULL, mx_a, 1));
                mx_b = fmaxf(mx_b, __shfl_xor_sync(FP_FULL, mx_b, 1));
                mx_a = fmaxf(mx_a, __shfl_xor_sync(FP_FULL, mx_a, 2));
                mx_b = fmaxf(mx_b, __shfl_xor_sync(FP_FULL, mx_b, 2));
                if (full) {
                    mx_a *= sc;
                    mx_b *= sc;
                }
                const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
                // A row that has seen no key yet keeps max -inf: subtract 0 so exp2 gives 0, not NaN.
                const float ua = mn_a == -SY_INF ? 0.0f : mn_a, ub = mn_b == -SY_INF ? 0.0f : mn_b;
                const float al_a = fp_ex2(m_a - ua), al_b = fp_ex2(m_b - ub);
                m_a = mn_a;
                m_b = mn_b;
                float sum_a = 0.0f, sum_b = 0.0f;
                if (full) {
#pragma unroll
                    for (int nt = 0; nt < BN / 8; ++nt) {
                        s[nt][0] = fp_ex2(fmaf(s[nt][0], sc, -ua));
                        s[nt][1] = fp_ex2(fmaf(s[nt][1], sc, -ua));
                        s[nt][2] = fp_ex2(fmaf(s[nt][2], sc, -ub));
                        s[nt][3] = fp_ex2(fmaf(s[nt][3], sc, -ub));
                        sum_a += s[nt][0] + s[nt][1];
                        sum_b += s[nt][2] + s[nt][3];
                    }
                } else {
#pragma unroll
                    for (int nt = 0; nt < BN / 8; ++nt) {
                        s[nt][0] = fp_ex2(s[nt][0] - ua);
                        s[nt][1] = fp_ex2(s[nt][1] - ua);
                        s[nt][2] = fp_ex2(s[nt][2] - ub);
                        s[nt][3] = fp_ex2(s[nt][3] - ub);
                        sum_a += s[nt][0] + s[nt][1];
                        sum_b += s[nt][2] + s[nt][3];
                    }
                }
                l_a = l_a * al_a + sum_a;
                l_b = l_b * al_b + sum_b;

                // ---- V scales: the tile's largest row exponent joins e_run; o moves to the new
                // units with the softmax rescale (a power of two more, exact).
                const int* ve = s_vexp + st * BN;
                int et = FP_EMIN;
                for (int j = lane; j < BN; j += 32) et = max(et, ve[j]);
                et = __reduce_max_sync(FP_FULL, et);
                const int e_new = max(e_run, et);
                const float rs = fp_pow2(e_run - e_new);
                e_run = e_new;
                const float oa = al_a * rs, ob = al_b * rs;
                // Past the first tiles the running max and e_run rarely move: skip the
                // 128 multiplies when no row of the warp needs them (warp-uniform).
                if (__any_sync(FP_FULL, oa != 1.0f || ob != 1.0f)) fp_scale_rows(o, oa, ob);

                // ---- O += P · V, 16 keys at a time, in f16: V' = v · 2^(15 - e_j) (the converted
                // tile), P' = p · 2^(e_j - e_run) in [0, 1], so P'·V' = p · v · 2^(15 - e_run).
                const unsigned vb_addr = smem_addr(vs + ((mi & 1) * 8 + rr) * ldv + (mi >> 1) * 8);
#pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk) {
                    unsigned ph[4];
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const int nt = 2 * kk + (i >> 1), e0 = (i & 1) * 2;
                        const int2 ej = *reinterpret_cast<const int2*>(ve + nt * 8 + 2 * t4);
                        ph[i] = fp_pack_f16(s[nt][e0] * fp_pow2_diff(ej.x, e_run), s[nt][e0 + 1] * fp_pow2_diff(ej.y, e_run));
                    }
#pragma unroll
                    for (int nb = 0; nb < DV / 16; ++nb) {
                        unsigned v0, v1, v2, v3;
                        ldsm_x4_t(v0, v1, v2, v3, vb_addr + (kk * 16 * ldv + nb * 16) * 2);
                        fp_mma_f16(o[2 * nb], ph[0], ph[1], ph[2], ph[3], v0, v1);
                        fp_mma_f16(o[2 * nb + 1], ph[0], ph[1], ph[2], ph[3], v2, v3);
                    }
                }
            }
            if (t + 1 < ntiles) {
                fp_wait<STAGES - 2>(); // tile t + 1 landed (this thread's copies)
                convert_v((t + 1) % STAGES);
            }
        }
        fp_wait<0>(); // nothing in flight into the ring before the next sequence reuses it

        // ---- finish: row sums and NaN flags across the quad, store this block's DV dims.
        l_a += __shfl_xor_sync(FP_FULL, l_a, 1);
        l_b += __shfl_xor_sync(FP_FULL, l_b, 1);
        l_a += __shfl_xor_sync(FP_FULL, l_a, 2);
        l_b += __shfl_xor_sync(FP_FULL, l_b, 2);
        const bool nan_a = s_rowbad[ra] != 0, nan_b = s_rowbad[rb] != 0;
        const float ia = 1.0f / l_a, ib = 1.0f / l_b;
        const float un = __int_as_float((e_run + 112) << 23); // 2^(e_run - 15), e_run in [-110, 128]
        // 1/l first: o/l is within V's scaled range, so the power of two after it is exact unless the output is itself subnormal.
        fp_scale_rows(o, ia, ib);
        bf16* oa = out + (size_t)(r0 + ra) * width + (size_t)h * HD + z * DV;
        bf16* ob = out + (size_t)(r0 + rb) * width + (size_t)h * HD + z * DV;
#pragma unroll
        for (int nt = 0; nt < DV / 8; ++nt) {
            const int col = nt * 8 + 2 * t4;
            if (aa) *reinterpret_cast<unsigned*>(oa + col) = nan_a ? 0x7fc07fc0u : pack_bf16(o[nt][0] * un, o[nt][1] * un);
            if (ab) *reinterpret_cast<unsigned*>(ob + col) = nan_b ? 0x7fc07fc0u : pack_bf16(o[nt][2] * un, o[nt][3] * un);
        }
    }
}

// Entries: <hd, warps, keys per tile, stages>, which the plan's table in
// kernels/src/attn/mod.rs (FLASH_PREFILL) restates with the shared-memory size.
// hd 256 takes 64-key tiles in 2 stages (the same 198 KiB as 32 keys in 4):
// on the H200, 4096 tokens causal, 170.7 TFLOP/s against 153.2 for 32 keys
// in 3 stages and 153.7 in 4, in one call. Cutting each tile's non-MMA
// instructions (ex2.ftz, the FFMA-folded exp2, the skipped rescale, the
// packed V-row max and bf16x2 scaling, cp.async at immediate offsets, the
// unrolled Q·Kᵀ: about 1780 -> 1110 SASS instructions a warp and unmasked tile)
// moved it only to 177.5 against 171.6 (one call, sixth session): with 2
// warps a scheduler (one 198 KiB block an SM) it is latency-bound, not
// issue-bound (ncu, the same code with the V conversion interleaved into
// P·V: 7.99 cycles a warp between issues, 20% of instructions HMMA, tensor
// pipe 30.8% active, L1/shared 61%). Interleaving that conversion with the
// P·V MMAs measured 171.9 in the same call and was left out.
#define FLASH_ENTRY(NAME, HD, WARPS, BN, STAGES)                                                                                    \
    extern "C" __global__ void __launch_bounds__(32 * WARPS, 1)                                                                      \
        NAME(bf16* __restrict__ out, const bf16* __restrict__ q, const bf16* __restrict__ k_pool, const bf16* __restrict__ v_pool, \
             const int* __restrict__ block_table, const int* __restrict__ seq_of_row, const int* __restrict__ pos, int rows, int nh, \
             int nkv, int hd, int page, int max_pages, int num_seqs, int num_slots, int window, float scale) {                     \
        flash_prefill_body<HD, WARPS, BN, STAGES>(out, q, k_pool, v_pool, block_table, seq_of_row, pos, rows, nh, nkv, hd, page,   \
                                                  max_pages, num_seqs, num_slots, window, scale);                                  \
    }

FLASH_ENTRY(attention_prefill_flash_hd128, 128, 8, 64, 3)
FLASH_ENTRY(attention_prefill_flash_hd256, 256, 8, 64, 2)
FLASH_ENTRY(attention_prefill_flash_hd512, 512, 8, 16, 3)
