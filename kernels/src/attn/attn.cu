// The decode entries: not launched as programmatic dependents (no `dependent-launch:` line):
// with nothing to load before sy_wait_prior(), early-launched blocks would
// only hold SM slots; their sy_allow_next() at the start lets a GEMV after
// them launch early and stream its weights meanwhile.
// cluster-launch: x attention_decode_cl
// Paged attention: flash-style prefill on the tensor cores, split-K decode
// (two passes through plan workspace) on the CUDA cores.
//
// KV pools are [num_slots, nkv, hd] bf16; key j of sequence b lives in slot
// block_table[b * max_pages + j / page] * page + j % page. Every slot a row
// needs is validated (page entry >= 0, slot < num_slots); a row whose
// sequence, position, pages or slots fall outside the tables is bf16 NaN,
// as the CPU reference defines.

#define SY_FULL 0xffffffffu

__device__ __forceinline__ void mma_bf16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}


__device__ __forceinline__ unsigned ld32(const bf16* p) { return *reinterpret_cast<const unsigned*>(p); }

// Slot of key j of the block-table row `trow`, or -1 when its page entry is
// negative or the slot is outside the pool. j < max_pages * page is the caller's.
__device__ __forceinline__ long long key_slot(const int* trow, int j, int page, int num_slots) {
    const int pg = trow[j / page];
    if (pg < 0) return -1;
    const long long s = (long long)pg * page + j % page;
    return s < num_slots ? s : -1;
}

// ================================================================ prefill

// Plan: grid (ceil(rows/64), nh), block 128; hd % 8 == 0, hd <= 512. The
// plan runs this kernel for the head widths flash_prefill.cu does not take
// (it takes 128, 256 and 512), for q or pools not 16-byte aligned, and when
// SWITCHYARD_FLASH_PREFILL=0.
//
// Warp w of block (bx, h) owns query rows bx*64 + 16w .. +16 of head h and
// runs flash attention on them with mma.sync m16n8k16 (bf16 in, f32 out):
// S = Q·Kᵀ over 16-key tiles, online softmax in f32 registers, O += P·V.
// Rows of one warp may belong to different sequences (rows are any mix):
// the warp takes one sequence at a time, masking the other rows. The key
// range is the union of its rows' causal/window ranges, so tiles wholly
// outside every row's range are never touched (causal + sliding skipping);
// per-element masks handle the rest.
//
// Output dims go in passes of 256 (128 f32 accumulators per thread); hd 512
// takes two passes, each recomputing S. P is split into bf16 hi + lo parts
// for the P·V product: a single bf16 rounding of P (2^-9 relative) would put
// the output's NMSE near the 1e-6 the contract allows; hi + lo keeps P to
// about 2^-17. K and V tiles are staged per warp in shared memory (rows
// padded by 16 bytes so ldmatrix is conflict-free); V is read transposed
// with ldmatrix.trans.
#define PF_DC 256
#define PF_LD (PF_DC + 8)

extern "C" __global__ void __launch_bounds__(128) attention_prefill(
    bf16* __restrict__ out, const bf16* __restrict__ q, const bf16* __restrict__ k_pool, const bf16* __restrict__ v_pool,
    const int* __restrict__ block_table, const int* __restrict__ seq_of_row, const int* __restrict__ pos, int rows, int nh, int nkv,
    int hd, int page, int max_pages, int num_seqs, int num_slots, int window, float scale) {
    __shared__ __align__(16) bf16 tiles[4][16 * PF_LD];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int h = blockIdx.y;
    const int r0 = blockIdx.x * 64 + warp * 16;
    if (r0 >= rows || h >= nh || nkv <= 0 || nh % nkv != 0) return; // warp-uniform; only __syncwarp below
    const int kvh = h / (nh / nkv);
    bf16* sm = tiles[warp];
    const size_t width = (size_t)nh * hd;
    const long long cap = (long long)max_pages * page;

    // Lane i < 16 holds row r0 + i's metadata.
    int my_seq = -1, my_pos = 0, my_lo = 0;
    bool my_ok = false;
    const bool my_row = lane < 16 && r0 + lane < rows;
    if (my_row) {
        const int sq = seq_of_row[r0 + lane], p = pos[r0 + lane];
        if (sq >= 0 && sq < num_seqs && p >= 0 && p < cap) {
            my_ok = true;
            my_seq = sq;
            my_pos = p;
            my_lo = window > 0 ? max(0, p + 1 - window) : 0;
        }
    }
    // Rows with an invalid sequence or position: NaN.
    for (unsigned bad = __ballot_sync(SY_FULL, my_row && !my_ok); bad; bad &= bad - 1) {
        const int i = __ffs(bad) - 1;
        unsigned* o = reinterpret_cast<unsigned*>(out + (size_t)(r0 + i) * width + (size_t)h * hd);
        for (int d = lane; d < hd / 2; d += 32) o[d] = 0x7fc07fc0u;
    }

    unsigned pending = __ballot_sync(SY_FULL, my_ok);
    while (pending) {
        const int cur = __shfl_sync(SY_FULL, my_seq, __ffs(pending) - 1);
        const bool act = my_ok && my_seq == cur;
        const unsigned actmask = __ballot_sync(SY_FULL, act);
        pending &= ~actmask;
        int kmin = act ? my_lo : 0x7fffffff, kmax = act ? my_pos : -1;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            kmin = min(kmin, __shfl_xor_sync(SY_FULL, kmin, o));
            kmax = max(kmax, __shfl_xor_sync(SY_FULL, kmax, o));
        }
        // This thread's fragment rows: g (a) and g + 8 (b).
        const int pa = __shfl_sync(SY_FULL, my_pos, g), la = __shfl_sync(SY_FULL, my_lo, g);
        const int pb = __shfl_sync(SY_FULL, my_pos, g + 8), lb = __shfl_sync(SY_FULL, my_lo, g + 8);
        const bool aa = (actmask >> g) & 1u, ab = (actmask >> (g + 8)) & 1u;
        const int* trow = block_table + (size_t)cur * max_pages;
        const bf16* qa = q + (size_t)(r0 + g) * width + (size_t)h * hd;
        const bf16* qb = q + (size_t)(r0 + g + 8) * width + (size_t)h * hd;
        bool bad_a = false, bad_b = false;

        for (int d0p = 0; d0p < hd; d0p += PF_DC) {
            float o[32][4];
#pragma unroll
            for (int i = 0; i < 32; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
            float m_a = -SY_INF, m_b = -SY_INF, l_a = 0.0f, l_b = 0.0f;
            const int pw = min(PF_DC, hd - d0p); // dims of this pass

            for (int kt = kmin & ~15; kt <= kmax; kt += 16) {
                const int kj = kt + (lane & 15);
                long long slot = -1;
                if (kj >= kmin && kj <= kmax) slot = key_slot(trow, kj, page, num_slots);
                const unsigned okmask = __ballot_sync(SY_FULL, slot >= 0) & 0xffffu;

                // ---- S = Q · Kᵀ for 16 keys, K staged 256 dims at a time.
                float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
                for (int c0 = 0; c0 < hd; c0 += PF_DC) {
                    const int cw = min(PF_DC, hd - c0);
                    __syncwarp();
#pragma unroll 4
                    for (int r = 0; r < 16; ++r) {
                        const long long sl = __shfl_sync(SY_FULL, slot, r);
                        const int col = lane * 8;
                        uint4 v = make_uint4(0u, 0u, 0u, 0u);
                        if (sl >= 0 && col < cw) v = ld_nc16(k_pool + ((size_t)sl * nkv + kvh) * hd + c0 + col);
                        *reinterpret_cast<uint4*>(sm + r * PF_LD + col) = v;
                    }
                    __syncwarp();
                    for (int ks = 0; ks < cw; ks += 16) {
                        const int d = c0 + ks;
                        const bool hi8 = d + 8 < hd; // hd % 8 == 0: the upper 8 dims are all in or all out
                        const unsigned a0 = aa ? ld32(qa + d + 2 * t) : 0u;
                        const unsigned a1 = ab ? ld32(qb + d + 2 * t) : 0u;
                        const unsigned a2 = (aa && hi8) ? ld32(qa + d + 8 + 2 * t) : 0u;
                        const unsigned a3 = (ab && hi8) ? ld32(qb + d + 8 + 2 * t) : 0u;
                        const int mi = lane >> 3, rr = lane & 7;
                        unsigned b0, b1, b2, b3;
                        ldsm_x4(b0, b1, b2, b3, smem_addr(sm + ((mi >> 1) * 8 + rr) * PF_LD + ks + (mi & 1) * 8));
                        mma_bf16(s[0], a0, a1, a2, a3, b0, b1);
                        mma_bf16(s[1], a0, a1, a2, a3, b2, b3);
                    }
                }

                // ---- mask, online softmax.
                float mx_a = -SY_INF, mx_b = -SY_INF;
#pragma unroll
                for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int j = kt + nt * 8 + 2 * t + (e & 1);
                        const bool rowa = e < 2;
                        const bool inr = rowa ? (aa && j >= la && j <= pa) : (ab && j >= lb && j <= pb);
                        const bool ok = (okmask >> (j - kt)) & 1u;
                        if (inr && !ok) {
                            if (rowa) bad_a = true; else bad_b = true;
                        }
                        const float v = (inr && ok) ? scale * s[nt][e] : -SY_INF;
                        s[nt][e] = v;
                        if (rowa) mx_a = fmaxf(mx_a, v); else mx_b = fmaxf(mx_b, v);
                    }
                }
#pragma unroll
                for (int o2 = 1; o2 < 4; o2 <<= 1) {
                    mx_a = fmaxf(mx_a, __shfl_xor_sync(SY_FULL, mx_a, o2));
                    mx_b = fmaxf(mx_b, __shfl_xor_sync(SY_FULL, mx_b, o2));
                }
                const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
                // While a row has seen no key its max is -inf: keep alpha 1, p 0.
                const float al_a = mn_a == -SY_INF ? 1.0f : __expf(m_a - mn_a);
                const float al_b = mn_b == -SY_INF ? 1.0f : __expf(m_b - mn_b);
                m_a = mn_a;
                m_b = mn_b;
                float p[2][4];
#pragma unroll
                for (int nt = 0; nt < 2; ++nt) {
                    p[nt][0] = s[nt][0] == -SY_INF ? 0.0f : __expf(s[nt][0] - mn_a);
                    p[nt][1] = s[nt][1] == -SY_INF ? 0.0f : __expf(s[nt][1] - mn_a);
                    p[nt][2] = s[nt][2] == -SY_INF ? 0.0f : __expf(s[nt][2] - mn_b);
                    p[nt][3] = s[nt][3] == -SY_INF ? 0.0f : __expf(s[nt][3] - mn_b);
                }
                l_a = l_a * al_a + (p[0][0] + p[0][1] + p[1][0] + p[1][1]);
                l_b = l_b * al_b + (p[0][2] + p[0][3] + p[1][2] + p[1][3]);
#pragma unroll
                for (int i = 0; i < 32; ++i) {
                    o[i][0] *= al_a;
                    o[i][1] *= al_a;
                    o[i][2] *= al_b;
                    o[i][3] *= al_b;
                }
                // P as the A operand (keys are k): hi = bf16(p), lo = bf16(p - hi).
                unsigned ph[4], pl[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int nt = i >> 1, e0 = (i & 1) * 2;
                    const float x0 = p[nt][e0], x1 = p[nt][e0 + 1];
                    ph[i] = pack_bf16(x0, x1);
                    pl[i] = pack_bf16(x0 - bf16_lo(ph[i]), x1 - bf16_hi(ph[i]));
                }
                // a0 = (row g, keys 2t..), a1 = (row g+8, keys 2t..), a2/a3 = keys 2t+8..
                const unsigned h0 = ph[0], h1 = ph[1], h2 = ph[2], h3 = ph[3];
                const unsigned q0 = pl[0], q1 = pl[1], q2 = pl[2], q3 = pl[3];

                // ---- O += P · V for this pass's dims.
                __syncwarp();
#pragma unroll 4
                for (int r = 0; r < 16; ++r) {
                    const long long sl = __shfl_sync(SY_FULL, slot, r);
                    const int col = lane * 8;
                    uint4 v = make_uint4(0u, 0u, 0u, 0u);
                    if (sl >= 0 && col < pw) v = ld_nc16(v_pool + ((size_t)sl * nkv + kvh) * hd + d0p + col);
                    *reinterpret_cast<uint4*>(sm + r * PF_LD + col) = v;
                }
                __syncwarp();
                const int mi = lane >> 3, rr = lane & 7;
#pragma unroll
                for (int nb = 0; nb < 16; ++nb) {
                    if (nb * 16 < pw) {
                        unsigned v0, v1, v2, v3;
                        ldsm_x4_t(v0, v1, v2, v3, smem_addr(sm + ((mi & 1) * 8 + rr) * PF_LD + nb * 16 + (mi >> 1) * 8));
                        mma_bf16(o[2 * nb], h0, h1, h2, h3, v0, v1);
                        mma_bf16(o[2 * nb], q0, q1, q2, q3, v0, v1);
                        mma_bf16(o[2 * nb + 1], h0, h1, h2, h3, v2, v3);
                        mma_bf16(o[2 * nb + 1], q0, q1, q2, q3, v2, v3);
                    }
                }
            }

            // ---- finish the pass: row sums and flags across the quad, store.
#pragma unroll
            for (int o2 = 1; o2 < 4; o2 <<= 1) {
                l_a += __shfl_xor_sync(SY_FULL, l_a, o2);
                l_b += __shfl_xor_sync(SY_FULL, l_b, o2);
            }
            // Each lane saw only its own key columns: OR the bad-slot flags over the quad.
            const bool nan_a = (__ballot_sync(SY_FULL, bad_a) >> (g * 4)) & 0xfu;
            const bool nan_b = (__ballot_sync(SY_FULL, bad_b) >> (g * 4)) & 0xfu;
            const float ia = 1.0f / l_a, ib = 1.0f / l_b;
            bf16* oa = out + (size_t)(r0 + g) * width + (size_t)h * hd + d0p;
            bf16* ob = out + (size_t)(r0 + g + 8) * width + (size_t)h * hd + d0p;
#pragma unroll
            for (int nt = 0; nt < 32; ++nt) {
                const int col = nt * 8 + 2 * t;
                if (col < pw) {
                    if (aa) *reinterpret_cast<unsigned*>(oa + col) = nan_a ? 0x7fc07fc0u : pack_bf16(o[nt][0] * ia, o[nt][1] * ia);
                    if (ab) *reinterpret_cast<unsigned*>(ob + col) = nan_b ? 0x7fc07fc0u : pack_bf16(o[nt][2] * ib, o[nt][3] * ib);
                }
            }
        }
    }
}

// ================================================================ decode

// Plan (attn/mod.rs, `cuda_attention_decode`): attention_decode, grid
// (S, nkv * QG, batch), block 128, DECODE_STAGES-deep pipeline in dynamic
// shared memory; then, when S > 1, attention_decode_reduce, grid (batch, nh,
// ceil(hd / 128)), block 128. Both take the declared arguments and the plan's
// workspace: f32 o [batch][nh][S][hd], then (m, l) [batch][nh][S][2]. S =
// decode_splits(visible_keys(max_ctx), batch, nkv) bounds every sequence's
// chunk count, which comes from its own ctx_len (kernels/src/attn/mod.rs
// defines the rule); chunks past it are idle, so max_ctx can stay fixed
// across decode steps without changing a bit. With S = 1 the first pass
// writes the output itself (out = bf16(o / l), what the reduce computes
// from one chunk) and there is no second pass.
//
// Block (s, y, b) computes chunk s of sequence b for KV head kvh = y / QG and
// up to 8 of the G = nh / nkv query heads that read it (query group y % QG,
// QG = ceil(G / 8)): each K and V row is read from memory once per KV head
// (once in all when v_pool aliases k_pool, Gemma's attention_k_eq_v), not
// once per query head. Keys go in tiles of 16: the 128 threads copy a tile's
// K (and V) rows into shared memory with cp.async (8 threads a key row,
// 16-byte pieces; the block table is read once per key), DECODE_STAGES tiles
// in flight. On the tensor cores (mma.m16n8k16, bf16 in, f32 out), with the
// head dims padded to a multiple of 64 and split over the 4 warps:
//   S^T[16 keys x 8 heads] = K · Q^T: warp w sums its quarter of the dims,
//     the 4 partials meet in shared memory and every warp adds them in warp
//     order (so all warps hold the same scores);
//   online softmax per head (column), in f32 registers;
//   O^T[dims x 8 heads] += V^T · P^T for the warp's quarter of the dims, V
//     read transposed with ldmatrix.trans, P^T moved into the B-fragment
//     layout with shuffles and split into bf16 hi + lo (a single bf16
//     rounding of P, 2^-9, would put the NMSE near the 1e-6 the contract
//     allows; hi + lo keeps P to ~2^-17).
// Every block checks the pages of its own chunk; a bad page or slot makes
// that chunk's partial NaN, which the reduce turns into a NaN row (the union
// of the chunks is the whole visible range the reference checks).
//
// Long chunks (the plan's rule: DC_TEAM_TILES tiles or more) take
// attention_decode_tm instead, the same work with T teams of 128 threads a
// block: in a chunk of DC_TEAM_TILES tiles or more, team tau takes tiles tau,
// tau + T, tau + 2T, ... with its own pipeline (dynamic shared memory: each
// team's stages, then all teams' score partials and page rings) and its own
// named barrier, and the teams' (m, l, o) merge in team order at the end.
// One team's iteration is a chain of barriers, shuffles and dependent MMAs
// (ncu on the H200, hd 512: 11 cycles a warp between instructions) during
// which its copies wait; two teams a block keep twice the tiles moving
// (global layer, batch 16, 16k keys: 52% -> 74% of the copy ceiling). The
// slots come from the block table through a ring of page entries that
// cp.async fetches DECODE_STAGES - 1 tiles ahead of their copy, so no
// block-table load stands between one tile and the next copy.
#define DECODE_STAGES 6
#define DC_THREADS 128
#define DC_TILE 16
// attention_decode_tm (below): teams a block at most, page-entry ring depth,
// shared memory a team holds beside its stages, tiles from which a chunk is
// shared between teams.
#define DC_MAX_TEAMS 4
#define DC_PG_RING 8
#define DC_TEAM_EXTRA 2560
#define DC_TEAM_TILES 8

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool in) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(in ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most n of this thread's cp.async groups are pending (n < DECODE_STAGES).
__device__ __forceinline__ void cp_async_wait(int n) {
    switch (n) {
        case 0: asm volatile("cp.async.wait_group 0;\n" ::); break;
        case 1: asm volatile("cp.async.wait_group 1;\n" ::); break;
        case 2: asm volatile("cp.async.wait_group 2;\n" ::); break;
        case 3: asm volatile("cp.async.wait_group 3;\n" ::); break;
        default: asm volatile("cp.async.wait_group 4;\n" ::); break;
    }
}
__device__ __forceinline__ unsigned dynamic_smem_bytes() {
    unsigned r;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
    return r;
}

// The split rule of kernels/src/attn/mod.rs (decode_splits, visible_keys),
// whose constants a unit test there checks against these.
#define DECODE_TARGET_BLOCKS 256
#define MIN_SPLIT_KEYS 16

__device__ __forceinline__ int visible_keys(int ctx, int window) { return window > 0 ? min(ctx, window) : ctx; }

__device__ __forceinline__ int decode_splits(int keys, int batch, int nkv) {
    const long long bh = max(1LL, (long long)batch * nkv);
    const long long want = (DECODE_TARGET_BLOCKS + bh - 1) / bh;
    const long long need = keys / MIN_SPLIT_KEYS + (keys % MIN_SPLIT_KEYS != 0);
    return (int)max(1LL, min(want, need));
}

// Whether a sequence's ctx_len is one the tables hold.
__device__ __forceinline__ bool decode_ctx_ok(int n, int max_ctx, int max_pages, int page) {
    return n >= 1 && n <= max_ctx && (long long)n <= (long long)max_pages * page;
}

// The chunks a sequence of n keys fills: decode_splits of its visible keys
// (1 for an invalid ctx_len, whose chunk 0 carries the NaN). Chunks from
// here to the grid's split count are idle: the two-pass plan neither writes
// nor reads them, the cluster plan parks m = -inf, l = 0 for them.
__device__ __forceinline__ int active_chunks(int n, int max_ctx, int max_pages, int page, int window, int batch, int nkv) {
    if (!decode_ctx_ok(n, max_ctx, max_pages, page)) return 1;
    const int lo = window > 0 ? max(0, n - window) : 0;
    return decode_splits(n - lo, batch, nkv);
}

// What one decode block works on.
struct DecodeJob {
    const bf16* k_pool;
    const bf16* v_pool; // == k_pool when V aliases K
    const int* trow;
    int start, stop, hd, nkv, kvh, page, num_slots;
    int ld;     // shared row stride in bf16 (padded dims + 8)
    bool alias; // V tiles are the K tiles
    bool async; // pools 16-byte aligned: cp.async, else plain copies
};

// Copies tile t's K (and V) rows into stage smem (row stride job.ld); keys
// past the chunk and dims past hd are zero.
template <int KS>
__device__ __forceinline__ void load_tile(const DecodeJob& job, int t, bf16* ks, bf16* vs) {
    const int kk = threadIdx.x >> 3, sub = threadIdx.x & 7;
    const int j = job.start + t * DC_TILE + kk;
    const long long slot = j < job.stop ? key_slot(job.trow, j, job.page, job.num_slots) : -1;
    const size_t row = slot >= 0 ? ((size_t)slot * job.nkv + job.kvh) * job.hd : 0;
#pragma unroll
    for (int c = 0; c < KS; ++c) {
        const int col = (sub + 8 * c) * 8;
        const bool in = slot >= 0 && col < job.hd;
        const size_t at = in ? row + col : 0;
        bf16* kd = ks + kk * job.ld + col;
        bf16* vd = vs + kk * job.ld + col;
        if (job.async) {
            cp_async16(smem_addr(kd), job.k_pool + at, in);
            if (!job.alias) cp_async16(smem_addr(vd), job.v_pool + at, in);
        } else {
            const uint4 z = make_uint4(0u, 0u, 0u, 0u);
            *reinterpret_cast<uint4*>(kd) = in ? *reinterpret_cast<const uint4*>(job.k_pool + at) : z;
            if (!job.alias) *reinterpret_cast<uint4*>(vd) = in ? *reinterpret_cast<const uint4*>(job.v_pool + at) : z;
        }
    }
}

// One 16-key tile of a chunk, for the 4 warps that share it (a block of
// attention_decode or a team of attention_decode_tm; `warp` is 0..3 among
// them): each warp's S^T partial over its dims, summed through `spart`
// behind `sync` (the 4 warps' barrier), then the online softmax of the
// lane's two head columns (keys key0 + g and key0 + g + 8) into (m, l) and
// o += P^T V, P split into bf16 hi + lo.
template <int KS, typename Sync>
__device__ __forceinline__ void decode_tile(const DecodeJob& job, const unsigned (&qb)[KS][2], float scale, const bf16* ks, const bf16* vs, int key0,
                                            int warp, float4 (*spart)[32], Sync sync, float (&o)[KS][4], float& m0, float& m1, float& l0,
                                            float& l1) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int mi = lane >> 3, rr = lane & 7;
    const int dw = 16 * KS * warp; // this warp's first dim

    // S^T partial over this warp's dims.
    float sp[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < KS; ++k) {
        unsigned a0, a1, a2, a3;
        ldsm_x4(a0, a1, a2, a3, smem_addr(ks + ((mi & 1) * 8 + rr) * job.ld + dw + 16 * k + (mi >> 1) * 8));
        mma_bf16(sp, a0, a1, a2, a3, qb[k][0], qb[k][1]);
    }
    spart[warp][lane] = make_float4(sp[0], sp[1], sp[2], sp[3]);
    sync();
    float4 st = spart[0][lane];
#pragma unroll
    for (int w = 1; w < 4; ++w) {
        const float4 p = spart[w][lane];
        st.x += p.x;
        st.y += p.y;
        st.z += p.z;
        st.w += p.w;
    }

    // Online softmax per head column: lane holds keys g, g + 8 of heads 2c, 2c + 1.
    const int j0 = key0 + g;
    const bool ka = j0 < job.stop, kb = j0 + 8 < job.stop;
    const float v0 = ka ? scale * st.x : -SY_INF, v1 = ka ? scale * st.y : -SY_INF;
    const float v2 = kb ? scale * st.z : -SY_INF, v3 = kb ? scale * st.w : -SY_INF;
    float x0 = fmaxf(v0, v2), x1 = fmaxf(v1, v3);
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
        x0 = fmaxf(x0, __shfl_xor_sync(SY_FULL, x0, off));
        x1 = fmaxf(x1, __shfl_xor_sync(SY_FULL, x1, off));
    }
    // The tile's first key is always in the chunk, so x0, x1 are finite and m = -inf gives alpha 0.
    const float n0 = fmaxf(m0, x0), n1 = fmaxf(m1, x1);
    const float al0 = __expf(m0 - n0), al1 = __expf(m1 - n1);
    m0 = n0;
    m1 = n1;
    const float p0 = ka ? __expf(v0 - n0) : 0.0f, p1 = ka ? __expf(v1 - n1) : 0.0f;
    const float p2 = kb ? __expf(v2 - n0) : 0.0f, p3 = kb ? __expf(v3 - n1) : 0.0f;
    l0 = l0 * al0 + (p0 + p2);
    l1 = l1 * al1 + (p1 + p3);
#pragma unroll
    for (int i = 0; i < KS; ++i) {
        o[i][0] *= al0;
        o[i][1] *= al1;
        o[i][2] *= al0;
        o[i][3] *= al1;
    }
    // P^T as the B operand (k = keys, n = heads): lane (g, c) needs keys
    // 2c, 2c + 1 (b0) and 2c + 8, 2c + 9 (b1) of head g, held by lanes
    // (2c, g / 2) and (2c + 1, g / 2) as packed head pairs.
    const unsigned ha = pack_bf16_rn(p0, p1), hb = pack_bf16_rn(p2, p3);
    const unsigned la = pack_bf16_rn(p0 - bf16_lo(ha), p1 - bf16_hi(ha)), lb = pack_bf16_rn(p2 - bf16_lo(hb), p3 - bf16_hi(hb));
    const int src0 = 8 * c + (g >> 1), src1 = src0 + 4;
    const unsigned sel = (g & 1) ? 0x7632u : 0x5410u;
    const unsigned bh0 = __byte_perm(__shfl_sync(SY_FULL, ha, src0), __shfl_sync(SY_FULL, ha, src1), sel);
    const unsigned bh1 = __byte_perm(__shfl_sync(SY_FULL, hb, src0), __shfl_sync(SY_FULL, hb, src1), sel);
    const unsigned bl0 = __byte_perm(__shfl_sync(SY_FULL, la, src0), __shfl_sync(SY_FULL, la, src1), sel);
    const unsigned bl1 = __byte_perm(__shfl_sync(SY_FULL, lb, src0), __shfl_sync(SY_FULL, lb, src1), sel);
#pragma unroll
    for (int i = 0; i < KS; ++i) {
        unsigned a0, a1, a2, a3;
        ldsm_x4_t(a0, a1, a2, a3, smem_addr(vs + ((mi >> 1) * 8 + rr) * job.ld + dw + 16 * i + (mi & 1) * 8));
        mma_bf16(o[i], a0, a1, a2, a3, bh0, bh1);
        mma_bf16(o[i], a0, a1, a2, a3, bl0, bl1);
    }
}

// The chunk's attention for up to 8 heads: (m, l) of the lane's two head
// columns in mo / lo, O^T fragments in `o` (dims padded to 64 * KS). Returns
// true, computing nothing, when a page or slot of the chunk is invalid; that
// check runs while the first tiles are on their way.
template <int KS>
__device__ __forceinline__ bool decode_chunk(const DecodeJob& job, const unsigned (&qb)[KS][2], float scale, float (&o)[KS][4], float* mo, float* lo,
                                             unsigned char* dsm, float4 (*spart)[32]) {
    const int warp = threadIdx.x >> 5;
    const int stage_elems = DC_TILE * job.ld * (job.alias ? 1 : 2);
    const int stages = min(DECODE_STAGES, (int)(dynamic_smem_bytes() / (2u * (unsigned)stage_elems)));
    bf16* base = reinterpret_cast<bf16*>(dsm);
    const int ntiles = (job.stop - job.start + DC_TILE - 1) / DC_TILE;
#pragma unroll
    for (int i = 0; i < KS; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -SY_INF, m1 = -SY_INF, l0 = 0.0f, l1 = 0.0f;

    for (int t = 0; t < stages - 1; ++t) {
        if (t < ntiles) {
            bf16* ks = base + (t % stages) * stage_elems;
            load_tile<KS>(job, t, ks, job.alias ? ks : ks + DC_TILE * job.ld);
        }
        cp_async_commit();
    }
    // This chunk's pages: a negative entry or a slot past the pool poisons it.
    int bad = 0;
    {
        const int p_first = job.start / job.page, p_last = (job.stop - 1) / job.page;
        for (int pi = p_first + threadIdx.x; pi <= p_last; pi += blockDim.x) {
            const int pg = job.trow[pi];
            const long long first = (long long)pi * job.page;
            const long long last = min((long long)job.stop - 1, first + job.page - 1);
            if (pg < 0 || (long long)pg * job.page + (last - first) >= job.num_slots) bad = 1;
        }
    }
    if (__syncthreads_or(bad)) {
        cp_async_wait(0); // no copy may land in shared memory after the block is gone
        return true;
    }
    for (int t = 0; t < ntiles; ++t) {
        cp_async_wait(stages - 2);
        __syncthreads(); // tile t is visible; every warp is done with tile t - 1's stage
        const int tn = t + stages - 1;
        if (tn < ntiles) {
            bf16* ks = base + (tn % stages) * stage_elems;
            load_tile<KS>(job, tn, ks, job.alias ? ks : ks + DC_TILE * job.ld);
        }
        cp_async_commit();
        const bf16* ks = base + (t % stages) * stage_elems;
        decode_tile<KS>(job, qb, scale, ks, job.alias ? ks : ks + DC_TILE * job.ld, job.start + t * DC_TILE, warp, spart,
                        [] { __syncthreads(); }, o, m0, m1, l0, l1);
    }
    cp_async_wait(0);
    // Row sums: each lane summed its own keys.
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
        l0 += __shfl_xor_sync(SY_FULL, l0, off);
        l1 += __shfl_xor_sync(SY_FULL, l1, off);
    }
    mo[0] = m0;
    mo[1] = m1;
    lo[0] = l0;
    lo[1] = l1;
    return false;
}

// 4-byte cp.async (through L1: .cg takes only 16) with zero fill when !in.
__device__ __forceinline__ void cp_async4(unsigned dst, const void* src, bool in) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(in ? 4 : 0));
}

// The team's barrier: named barrier 1 + team over its 128 threads (0 is
// __syncthreads').
__device__ __forceinline__ void team_sync(int team) { asm volatile("bar.sync %0, %1;\n" ::"r"(team + 1), "r"(DC_THREADS) : "memory"); }

// Copies the 16 key rows of the tile whose first key is j0 into stage smem
// (row stride job.ld); keys past the chunk and dims past hd are zero. `pg`:
// the page entry of this thread's key (key_slot's checks apply to it).
template <int KS>
__device__ __forceinline__ void load_tile_tm(const DecodeJob& job, int j0, int pg, bf16* ks, bf16* vs) {
    const int tt = threadIdx.x % DC_THREADS, kk = tt >> 3, sub = tt & 7;
    const int j = j0 + kk;
    long long slot = -1;
    if (j < job.stop && pg >= 0) {
        slot = (long long)pg * job.page + j % job.page;
        if (slot >= job.num_slots) slot = -1;
    }
    const size_t row = slot >= 0 ? ((size_t)slot * job.nkv + job.kvh) * job.hd : 0;
#pragma unroll
    for (int c = 0; c < KS; ++c) {
        const int col = (sub + 8 * c) * 8;
        const bool in = slot >= 0 && col < job.hd;
        const size_t at = in ? row + col : 0;
        bf16* kd = ks + kk * job.ld + col;
        bf16* vd = vs + kk * job.ld + col;
        if (job.async) {
            cp_async16(smem_addr(kd), job.k_pool + at, in);
            if (!job.alias) cp_async16(smem_addr(vd), job.v_pool + at, in);
        } else {
            const uint4 z = make_uint4(0u, 0u, 0u, 0u);
            *reinterpret_cast<uint4*>(kd) = in ? *reinterpret_cast<const uint4*>(job.k_pool + at) : z;
            if (!job.alias) *reinterpret_cast<uint4*>(vd) = in ? *reinterpret_cast<const uint4*>(job.v_pool + at) : z;
        }
    }
}

// Starts the copy of the page entries of the tile whose first key is j0 into
// `ring` (one int per key, threads 0..15 of the team), in the caller's
// cp.async group. Keys past the chunk read nothing (their entry is never used).
__device__ __forceinline__ void fetch_pages(const DecodeJob& job, int j0, int* ring) {
    const int tt = threadIdx.x % DC_THREADS;
    if (tt < DC_TILE) {
        const int j = j0 + tt;
        const bool in = j < job.stop;
        cp_async4(smem_addr(ring + tt), job.trow + (in ? j / job.page : 0), in);
    }
}

// The chunk's attention for up to 8 heads: (m, l) of the lane's two head
// columns in mo / lo, O^T fragments in `o` (dims padded to 64 * KS), merged
// over the block's teams into team 0's registers (the other teams' results
// are meaningless on return). Returns true, computing nothing, when a page
// or slot of the chunk is invalid; that check runs while the first tiles are
// on their way. Every thread of the block calls this.
template <int KS>
__device__ __forceinline__ bool decode_chunk_tm(const DecodeJob& job, const unsigned (&qb)[KS][2], float scale, float (&o)[KS][4], float* mo, float* lo,
                                                unsigned char* dsm) {
    const int teams = blockDim.x / DC_THREADS, team = threadIdx.x / DC_THREADS, tt = threadIdx.x % DC_THREADS;
    const int warp = tt >> 5;
    const int stage_elems = DC_TILE * job.ld * (job.alias ? 1 : 2);
    const int stages = min(DECODE_STAGES, (int)((dynamic_smem_bytes() / (unsigned)teams - DC_TEAM_EXTRA) / (2u * (unsigned)stage_elems)));
    bf16* base = reinterpret_cast<bf16*>(dsm) + (size_t)team * stages * stage_elems;
    unsigned char* extra = dsm + (size_t)teams * stages * stage_elems * 2;
    float4(*spart)[32] = reinterpret_cast<float4(*)[32]>(extra) + 4 * team;
    int(*pgr)[DC_TILE] = reinterpret_cast<int(*)[DC_TILE]>(extra + (size_t)teams * 2048) + DC_PG_RING * team;
    const int ntiles = (job.stop - job.start + DC_TILE - 1) / DC_TILE;
    // Teams sharing this chunk: all of them from DC_TEAM_TILES tiles, else
    // team 0 alone. The plan launches more than one team only where a chunk
    // can be that long (mod.rs, cuda_decode_teams), so the sums' order
    // depends on the chunk alone, never on max_ctx.
    const int share = ntiles >= DC_TEAM_TILES ? teams : 1;
    const int nt = ntiles > team && team < share ? (ntiles - team + share - 1) / share : 0; // this team's tiles
    auto first_key = [&](int k) { return job.start + (team + k * share) * DC_TILE; };
#pragma unroll
    for (int i = 0; i < KS; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -SY_INF, m1 = -SY_INF, l0 = 0.0f, l1 = 0.0f;

    // The first stages - 1 tiles read their page entries directly; each of
    // their groups also fetches the entries of the tile stages - 1 later.
    for (int k = 0; k < stages - 1; ++k) {
        if (k < nt) {
            bf16* ks = base + (k % stages) * stage_elems;
            const int j0 = first_key(k), j = j0 + (tt >> 3);
            load_tile_tm<KS>(job, j0, j < job.stop ? job.trow[j / job.page] : -1, ks, job.alias ? ks : ks + DC_TILE * job.ld);
        }
        if (k + stages - 1 < nt) fetch_pages(job, first_key(k + stages - 1), pgr[(k + stages - 1) % DC_PG_RING]);
        cp_async_commit();
    }
    // This chunk's pages: a negative entry or a slot past the pool poisons it.
    int bad = 0;
    {
        const int p_first = job.start / job.page, p_last = (job.stop - 1) / job.page;
        for (int pi = p_first + threadIdx.x; pi <= p_last; pi += blockDim.x) {
            const int pg = job.trow[pi];
            const long long first = (long long)pi * job.page;
            const long long last = min((long long)job.stop - 1, first + job.page - 1);
            if (pg < 0 || (long long)pg * job.page + (last - first) >= job.num_slots) bad = 1;
        }
    }
    if (__syncthreads_or(bad)) {
        cp_async_wait(0); // no copy may land in shared memory after the block is gone
        return true;
    }
    for (int k = 0; k < nt; ++k) {
        cp_async_wait(stages - 2);
        team_sync(team); // tile k (and tile k + stages - 1's page entries) visible; the team is done with tile k - 1's stage
        const int kn = k + stages - 1;
        if (kn < nt) {
            bf16* ks = base + (kn % stages) * stage_elems;
            load_tile_tm<KS>(job, first_key(kn), pgr[kn % DC_PG_RING][tt >> 3], ks, job.alias ? ks : ks + DC_TILE * job.ld);
        }
        if (kn + stages - 1 < nt) fetch_pages(job, first_key(kn + stages - 1), pgr[(kn + stages - 1) % DC_PG_RING]);
        cp_async_commit();
        const bf16* ks = base + (k % stages) * stage_elems;
        decode_tile<KS>(job, qb, scale, ks, job.alias ? ks : ks + DC_TILE * job.ld, first_key(k), warp, spart, [team] { team_sync(team); },
                        o, m0, m1, l0, l1);
    }
    cp_async_wait(0);
    // Row sums: each lane summed its own keys.
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
        l0 += __shfl_xor_sync(SY_FULL, l0, off);
        l1 += __shfl_xor_sync(SY_FULL, l1, off);
    }
    if (share > 1) {
        // Teams 1.. park (o, m, l) in their own stages, thread by thread
        // (thread tt of every team holds the same dims and heads); team 0
        // merges them in team order. A team without tiles has m = -inf,
        // l = 0, o = 0: weight 0 (team 0 always has tile 0, so M is finite
        // unless scores are NaN, which then reach the output as they would
        // in one team). Parking in a team's own stages (at least two
        // stages, 4096 · KS + 512 bytes, where the park takes 2048 · KS +
        // 2048) keeps every write before the merge on memory that only its
        // own team read. Parked over team 0's stages, compute-sanitizer's
        // racecheck reported the park writes against team 0's last
        // ldmatrix, though the SASS has the block barrier between them.
        auto park = [&](int u) { return reinterpret_cast<float*>(dsm + (size_t)u * stages * stage_elems * sizeof(bf16)) + tt; };
        __syncthreads(); // every team is done with its stages
        if (team > 0 && team < share) {
            float* p = park(team);
#pragma unroll
            for (int i = 0; i < KS; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) p[(i * 4 + e) * DC_THREADS] = o[i][e];
            p[(KS * 4 + 0) * DC_THREADS] = m0;
            p[(KS * 4 + 1) * DC_THREADS] = m1;
            p[(KS * 4 + 2) * DC_THREADS] = l0;
            p[(KS * 4 + 3) * DC_THREADS] = l1;
        }
        __syncthreads();
        if (team == 0) {
            float b0 = m0, b1 = m1;
            for (int u = 1; u < share; ++u) {
                const float* p = park(u);
                b0 = fmaxf(b0, p[(KS * 4 + 0) * DC_THREADS]);
                b1 = fmaxf(b1, p[(KS * 4 + 1) * DC_THREADS]);
            }
            float w0 = __expf(m0 - b0), w1 = __expf(m1 - b1);
            l0 *= w0;
            l1 *= w1;
#pragma unroll
            for (int i = 0; i < KS; ++i) {
                o[i][0] *= w0;
                o[i][1] *= w1;
                o[i][2] *= w0;
                o[i][3] *= w1;
            }
            for (int u = 1; u < share; ++u) {
                const float* p = park(u);
                const float um0 = p[(KS * 4 + 0) * DC_THREADS], um1 = p[(KS * 4 + 1) * DC_THREADS];
                w0 = um0 == -SY_INF ? 0.0f : __expf(um0 - b0);
                w1 = um1 == -SY_INF ? 0.0f : __expf(um1 - b1);
                l0 += w0 * p[(KS * 4 + 2) * DC_THREADS];
                l1 += w1 * p[(KS * 4 + 3) * DC_THREADS];
#pragma unroll
                for (int i = 0; i < KS; ++i) {
                    o[i][0] += w0 * p[(i * 4 + 0) * DC_THREADS];
                    o[i][1] += w1 * p[(i * 4 + 1) * DC_THREADS];
                    o[i][2] += w0 * p[(i * 4 + 2) * DC_THREADS];
                    o[i][3] += w1 * p[(i * 4 + 3) * DC_THREADS];
                }
            }
            m0 = b0;
            m1 = b1;
        }
    }
    mo[0] = m0;
    mo[1] = m1;
    lo[0] = l0;
    lo[1] = l1;
    return false;
}

// Writes the block's result for head column q (< nq) of this lane: the
// chunk's partial (o, m, l) or, with one chunk in all (single), the output.
template <int KS>
__device__ __forceinline__ void decode_store(bf16* out, float* workspace, const float (&o)[KS][4], int q, int e_half, float m, float l, int hd,
                                             size_t head_row, size_t e, size_t ml_base, bool single) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
#pragma unroll
    for (int i = 0; i < KS; ++i) {
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
            const int d = 16 * KS * warp + 16 * i + g + 8 * hi;
            if (d < hd) {
                const float v = o[i][2 * hi + e_half];
                if (single) out[head_row * hd + d] = f32_to_bf16(v / l);
                else workspace[e * hd + d] = v;
            }
        }
    }
    if (!single && warp == 0 && g == 0) {
        workspace[ml_base + e * 2] = m;
        workspace[ml_base + e * 2 + 1] = l;
    }
}

// The split decode as one cluster along x (attention_decode_cl, S <= 8
// chunks): each block parks its chunk's (o, m, l) in its own shared memory
// (o as [8 heads][hd] f32, then (m, l) per head) where the two-pass plan
// writes workspace, and the cluster's blocks then each combine a 1/S share
// of the group's outputs with attention_decode_reduce's arithmetic, reading
// the chunks in chunk order (cluster rank = chunk), so both give the same bits.
__device__ __forceinline__ void decode_cluster_combine(bf16* __restrict__ out, const float* red, int nq, int hd, size_t row0) {
    cluster_sync();
    const int S = gridDim.x, rank = (int)cluster_rank();
    const float* ml = red + 8 * hd;
    const int outs = nq * hd, per = (outs + S - 1) / S;
    for (int o = rank * per + threadIdx.x; o < min(outs, (rank + 1) * per); o += blockDim.x) {
        const int hq = o / hd, d = o % hd;
        bool any = false, nan = false;
        float big = -SY_INF;
        for (int s = 0; s < S; ++s) {
            const float m = ld_cluster_f32(ml + 2 * hq, (unsigned)s), l = ld_cluster_f32(ml + 2 * hq + 1, (unsigned)s);
            if (m == -SY_INF || l == 0.0f) continue;
            any = true;
            if (m != m) nan = true; else big = fmaxf(big, m);
        }
        bf16 v = SY_NAN_BF16;
        if (any && !nan) {
            float den = 0.0f, num = 0.0f;
            for (int s = 0; s < S; ++s) {
                const float m = ld_cluster_f32(ml + 2 * hq, (unsigned)s), l = ld_cluster_f32(ml + 2 * hq + 1, (unsigned)s);
                if (m == -SY_INF || l == 0.0f) continue;
                const float w = expf(m - big);
                den += w * l;
                num += w * ld_cluster_f32(red + (size_t)hq * hd + d, (unsigned)s);
            }
            v = f32_to_bf16(num / den);
        }
        out[(row0 + hq) * hd + d] = v;
    }
    cluster_sync(); // no block leaves while another still reads its shared memory
}

// The one-team chunk loop's warp partials: one static array a kernel,
// whichever KS instances use it (attention_decode_tm never does).
__device__ __forceinline__ float4 (*decode_warp_partials())[32] {
    __shared__ float4 spart[4][32];
    return spart;
}

// The chunk loop of either form: one team (decode_chunk, with its warps'
// partials in static shared memory) or several (decode_chunk_tm, which
// keeps them in the dynamic area the plan sizes).
template <int KS, bool TEAMS>
__device__ __forceinline__ bool decode_chunk_for(const DecodeJob& job, const unsigned (&qf)[KS][2], float scale, float (&o)[KS][4],
                                                 float* mo, float* lsum, unsigned char* dsm) {
    if constexpr (TEAMS) {
        return decode_chunk_tm<KS>(job, qf, scale, o, mo, lsum, dsm);
    } else {
        return decode_chunk<KS>(job, qf, scale, o, mo, lsum, dsm, decode_warp_partials());
    }
}

// TEAMS: attention_decode_tm's form (block 128 * T, the chunk's tiles dealt
// to the teams by decode_chunk_tm, team 0 storing the merge); never with
// CLUSTER.
template <bool CLUSTER, bool TEAMS = false>
__device__ __forceinline__ void attention_decode_body(bf16* __restrict__ out, const bf16* __restrict__ q, const bf16* __restrict__ k_pool,
                                                      const bf16* __restrict__ v_pool, const int* __restrict__ block_table,
                                                      const int* __restrict__ ctx_len, int batch, int max_ctx, int nh, int nkv, int hd, int page,
                                                      int max_pages, int num_slots, int window, float scale, float* __restrict__ workspace) {
    sy_allow_next(); // a dependent GEMV after this may start now (file header)
    sy_wait_prior();
    static_assert(!(CLUSTER && TEAMS), "teams never run as a cluster");
    extern __shared__ __align__(16) unsigned char dsm[];
    // The plan refuses these (and, with TEAMS, blocks that are not whole teams).
    if (nkv <= 0 || nh % nkv != 0 || hd <= 0 || hd > 512 || hd % 8 != 0 || (TEAMS && blockDim.x % DC_THREADS != 0)) return;
    const int G = nh / nkv, QG = (G + 7) / 8;
    const int s = blockIdx.x, kvh = blockIdx.y / QG, b = blockIdx.z;
    const int h0 = kvh * G + (blockIdx.y % QG) * 8, nq = min(8, kvh * G + G - h0);
    const int splits = decode_splits(visible_keys(max_ctx, window), batch, nkv);
    // Block-uniform; for a cluster, uniform over the grid (its x extent is the split count).
    if (b >= batch || kvh >= nkv || s >= splits || (CLUSTER && (int)gridDim.x != splits)) return;
    const int n = ctx_len[b];
    const bool ok = decode_ctx_ok(n, max_ctx, max_pages, page);
    const int lo = (ok && window > 0) ? max(0, n - window) : 0;
    const int my_splits = active_chunks(n, max_ctx, max_pages, page, window, batch, nkv);
    const bool single = !CLUSTER && splits == 1;
    float* red = reinterpret_cast<float*>(dsm); // CLUSTER: this chunk's o, then (m, l), per head of the group
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const size_t ml_base = (size_t)batch * nh * splits * hd;
    // This lane's two head columns.
    const int qa = 2 * c, qb2 = 2 * c + 1;
    const size_t row0 = (size_t)b * nh + h0;
    long long start = 0, stop = 0;
    if (ok && s < my_splits) {
        const long long split_len = ((long long)(n - lo) + my_splits - 1) / my_splits;
        start = lo + (long long)s * split_len;
        stop = min((long long)n, start + split_len);
    }
    const int* trow = block_table + (size_t)b * max_pages;
    // Writes an invalid chunk (NaN o, m, l, or a NaN row with one chunk in
    // all) or an idle / empty one (m = -inf, l = 0: the reduce skips it).
    auto nothing = [&](bool bad) {
        if (CLUSTER) {
            __syncthreads(); // the pipeline's last copies have landed in every thread
            for (int i = threadIdx.x; i < nq * hd; i += blockDim.x) red[i] = SY_NAN;
            if (threadIdx.x < nq) {
                red[8 * hd + 2 * threadIdx.x] = bad ? SY_NAN : -SY_INF;
                red[8 * hd + 2 * threadIdx.x + 1] = bad ? SY_NAN : 0.0f;
            }
            return;
        }
        for (int i = threadIdx.x; i < nq * hd; i += blockDim.x) {
            const int hq = i / hd, d = i % hd;
            const size_t hr = (size_t)b * nh + h0 + hq;
            if (single) out[hr * hd + d] = SY_NAN_BF16;
            else if (bad) workspace[(hr * splits + s) * hd + d] = SY_NAN;
        }
        if (!single && threadIdx.x < nq) {
            const size_t e = ((size_t)b * nh + h0 + threadIdx.x) * splits + s;
            workspace[ml_base + e * 2] = bad ? SY_NAN : -SY_INF;
            workspace[ml_base + e * 2 + 1] = bad ? SY_NAN : 0.0f;
        }
    };
    // The reduce reads only the sequence's active chunks, so an idle block
    // has nothing to write.
    if (!CLUSTER && s >= my_splits) return;
    if (!ok || start >= stop) {
        nothing(!ok);
        if (CLUSTER) decode_cluster_combine(out, red, nq, hd, row0);
        return;
    }

    const int hdp = (hd + 63) & ~63;
    DecodeJob job;
    job.k_pool = k_pool;
    job.v_pool = v_pool;
    job.trow = trow;
    job.start = (int)start;
    job.stop = (int)stop;
    job.hd = hd;
    job.nkv = nkv;
    job.kvh = kvh;
    job.page = page;
    job.num_slots = num_slots;
    job.ld = hdp + 8;
    job.alias = k_pool == v_pool;
    job.async = aligned16(k_pool) && aligned16(v_pool);

    // Q^T fragments for this warp's dims: head g of the group, dims 2c.. and
    // 2c + 8.. (every team's warp w takes the same dims).
    const bf16* qrow = q + ((size_t)b * nh + h0 + (g < nq ? g : 0)) * hd;
    const int dw = (hdp / 4) * ((TEAMS ? threadIdx.x % DC_THREADS : threadIdx.x) >> 5);
    float mo[2], lsum[2];
#define DECODE_CASE(KS_)                                                                    \
    case KS_: {                                                                             \
        unsigned qf[KS_][2];                                                                \
        _Pragma("unroll") for (int k = 0; k < KS_; ++k) {                                   \
            const int d = dw + 16 * k + 2 * c;                                              \
            qf[k][0] = (g < nq && d < hd) ? ld32(qrow + d) : 0u;                            \
            qf[k][1] = (g < nq && d + 8 < hd) ? ld32(qrow + d + 8) : 0u;                    \
        }                                                                                   \
        float o[KS_][4];                                                                    \
        if (decode_chunk_for<KS_, TEAMS>(job, qf, scale, o, mo, lsum, dsm)) {              \
            nothing(true);                                                                  \
            break;                                                                          \
        }                                                                                   \
        if (CLUSTER) __syncthreads(); /* every warp is done with the tiles red reuses */    \
        for (int k2 = 0; k2 < 2; ++k2) {                                                    \
            const int hq = k2 ? qb2 : qa;                                                   \
            /* with TEAMS, team 0 holds the merge */                                       \
            if (hq < nq && (!TEAMS || threadIdx.x < DC_THREADS)) {                         \
                const size_t hr = (size_t)b * nh + h0 + hq;                                 \
                if (CLUSTER)                                                                \
                    decode_store<KS_>(out, red, o, hq, k2, mo[k2], lsum[k2], hd, hr, hq,    \
                                      (size_t)8 * hd, false);                               \
                else                                                                        \
                    decode_store<KS_>(out, workspace, o, hq, k2, mo[k2], lsum[k2], hd, hr,  \
                                      hr * splits + s, ml_base, single);                    \
            }                                                                               \
        }                                                                                   \
        break;                                                                              \
    }
    switch (hdp / 64) {
        DECODE_CASE(1)
        DECODE_CASE(2)
        DECODE_CASE(3)
        DECODE_CASE(4)
        DECODE_CASE(5)
        DECODE_CASE(6)
        DECODE_CASE(7)
        DECODE_CASE(8)
    }
#undef DECODE_CASE
    if (CLUSTER) decode_cluster_combine(out, red, nq, hd, row0);
}

// The two-pass plan's phase 1 and the cluster plan's one launch (entry
// points written out: the signature test reads the catalogue entry's list).
extern "C" __global__ void __launch_bounds__(DC_THREADS) attention_decode(
    bf16* __restrict__ out, const bf16* __restrict__ q, const bf16* __restrict__ k_pool, const bf16* __restrict__ v_pool,
    const int* __restrict__ block_table, const int* __restrict__ ctx_len, int batch, int max_ctx, int nh, int nkv, int hd, int page,
    int max_pages, int num_slots, int window, float scale, float* __restrict__ workspace) {
    attention_decode_body<false>(out, q, k_pool, v_pool, block_table, ctx_len, batch, max_ctx, nh, nkv, hd, page, max_pages, num_slots,
                                 window, scale, workspace);
}

extern "C" __global__ void __launch_bounds__(DC_THREADS) attention_decode_cl(
    bf16* __restrict__ out, const bf16* __restrict__ q, const bf16* __restrict__ k_pool, const bf16* __restrict__ v_pool,
    const int* __restrict__ block_table, const int* __restrict__ ctx_len, int batch, int max_ctx, int nh, int nkv, int hd, int page,
    int max_pages, int num_slots, int window, float scale, float* __restrict__ workspace) {
    attention_decode_body<true>(out, q, k_pool, v_pool, block_table, ctx_len, batch, max_ctx, nh, nkv, hd, page, max_pages, num_slots,
                                window, scale, workspace);
}

// attention_decode_tm: the two-pass plan's phase 1 for chunks long enough
// to share between teams (mod.rs, cuda_decode_teams): block 128 * T, the
// same grid, workspace and results as attention_decode, the chunk's tiles
// dealt to the teams by decode_chunk_tm. A chunk shorter than DC_TEAM_TILES
// tiles runs on team 0 alone, with attention_decode's arithmetic tile for
// tile, so which entry a launch takes (a function of max_ctx) changes no
// bit. Never a cluster: where the grid is one block an SM the chunks are
// short.
extern "C" __global__ void __launch_bounds__(DC_THREADS * DC_MAX_TEAMS) attention_decode_tm(
    bf16* __restrict__ out, const bf16* __restrict__ q, const bf16* __restrict__ k_pool, const bf16* __restrict__ v_pool,
    const int* __restrict__ block_table, const int* __restrict__ ctx_len, int batch, int max_ctx, int nh, int nkv, int hd, int page,
    int max_pages, int num_slots, int window, float scale, float* __restrict__ workspace) {
    attention_decode_body<false, true>(out, q, k_pool, v_pool, block_table, ctx_len, batch, max_ctx, nh, nkv, hd, page, max_pages,
                                       num_slots, window, scale, workspace);
}

// Grid (batch, nh, ceil(hd / 128)), block 128: a thread per output dim.
// Chunks combined in chunk order, only the sequence's active ones
// (active_chunks: phase 1 leaves the rest unwritten); empty chunks (m =
// -inf or l = 0) skipped; NaN m (an invalid sequence or page) poisons the row; all chunks
// empty gives NaN. The partials are read DR_UNROLL chunks at a time, all
// loads of a batch issued before its sums, so a thread does not wait one
// memory round trip per chunk.
#define DR_UNROLL 8

extern "C" __global__ void __launch_bounds__(128) attention_decode_reduce(
    bf16* __restrict__ out, const bf16* __restrict__ q, const bf16* __restrict__ k_pool, const bf16* __restrict__ v_pool,
    const int* __restrict__ block_table, const int* __restrict__ ctx_len, int batch, int max_ctx, int nh, int nkv, int hd, int page,
    int max_pages, int num_slots, int window, float scale, float* __restrict__ workspace) {
    sy_allow_next(); // a dependent GEMV after this may start now (file header)
    sy_wait_prior();
    const int b = blockIdx.x, h = blockIdx.y, d = blockIdx.z * blockDim.x + threadIdx.x;
    if (b >= batch || h >= nh || nkv <= 0 || d >= hd) return;
    const int splits = decode_splits(visible_keys(max_ctx, window), batch, nkv);
    // The chunks past the sequence's own are idle: skipped without a load.
    const int active = active_chunks(ctx_len[b], max_ctx, max_pages, page, window, batch, nkv);
    const size_t bh = (size_t)b * nh + h;
    const float2* ml = reinterpret_cast<const float2*>(workspace + (size_t)batch * nh * splits * hd) + bh * splits;
    const float* o = workspace + bh * splits * hd + d;
    bool any = false, nan = false;
    float big = -SY_INF;
    // The first batch's loads do not wait for ctx_len (they stay inside the
    // grid's chunks; what past `active` holds is never used).
    for (int s0 = 0; s0 < splits && (s0 == 0 || s0 < active); s0 += DR_UNROLL) {
        float2 p[DR_UNROLL];
#pragma unroll
        for (int u = 0; u < DR_UNROLL; ++u) p[u] = s0 + u < splits ? ml[s0 + u] : make_float2(-SY_INF, 0.0f);
#pragma unroll
        for (int u = 0; u < DR_UNROLL; ++u) {
            const float m = p[u].x, l = p[u].y;
            if (s0 + u >= active || m == -SY_INF || l == 0.0f) continue;
            any = true;
            if (m != m) nan = true; else big = fmaxf(big, m);
        }
    }
    if (!any || nan) {
        out[bh * hd + d] = SY_NAN_BF16;
        return;
    }
    float den = 0.0f, num = 0.0f;
    for (int s0 = 0; s0 < active; s0 += DR_UNROLL) {
        float2 p[DR_UNROLL];
        float ov[DR_UNROLL];
#pragma unroll
        for (int u = 0; u < DR_UNROLL; ++u) {
            const bool in = s0 + u < active;
            p[u] = in ? ml[s0 + u] : make_float2(-SY_INF, 0.0f);
            // Empty chunks did not write o: what is read there is never used.
            ov[u] = in ? o[(size_t)(s0 + u) * hd] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < DR_UNROLL; ++u) {
            const float m = p[u].x, l = p[u].y;
            if (m == -SY_INF || l == 0.0f) continue;
            const float w = expf(m - big);
            den += w * l;
            num += w * ov[u];
        }
    }
    out[bh * hd + d] = f32_to_bf16(num / den);
}
