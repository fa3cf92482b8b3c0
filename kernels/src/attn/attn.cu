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

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ void ldsm_x4(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
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

// Plan: grid (ceil(rows/64), nh), block 128; hd % 8 == 0, hd <= 512.
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

// Plan: attention_decode, grid (S, nh, batch), block 128, then
// attention_decode_reduce, grid (batch, nh), block 128; both take the
// declared arguments and the plan's workspace: f32 o [batch][nh][S][hd],
// then (m, l) [batch][nh][S][2]. S = decode_splits(visible_keys(max_ctx))
// bounds every sequence's chunk count, which comes from its own ctx_len
// (kernels/src/attn/mod.rs defines the rule); chunks past it are idle, so
// max_ctx can stay fixed across decode steps without changing a bit.
//
// Block (s, h, b) computes chunk s of head h for sequence b. Each of the 4
// warps takes groups of 4 consecutive keys in turn; a key row is spread
// over the warp as 16-byte vectors (lane i holds dims 8i.. of each 256-dim
// chunk), so every K/V row is read with fully coalesced 16-byte loads, and
// the 4 keys' K and V rows are all in flight before the first use. Online
// softmax per warp in registers; the 4 warps' (m, l, o) merge through
// shared memory at the end. Query heads that share a KV head run in
// neighbouring blocks at the same time, so their repeated K/V reads are
// served by L2 rather than HBM.
#define DC_KEYS 4

template <int NC>
__device__ __forceinline__ void decode_split(float* __restrict__ o_out, float* __restrict__ ml_out, const bf16* __restrict__ qh,
                                             const bf16* __restrict__ kbase, const bf16* __restrict__ vbase, const int* trow,
                                             int start, int stop, int hd, int page, int row_stride, float scale, float* red) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float qf[NC][8], o[NC][8];
    bool dv[NC];
#pragma unroll
    for (int c = 0; c < NC; ++c) {
        const int d = c * 256 + lane * 8;
        dv[c] = d < hd;
        uint4 u = dv[c] ? *reinterpret_cast<const uint4*>(qh + d) : make_uint4(0u, 0u, 0u, 0u);
        const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            qf[c][2 * i] = bf16_lo(w[i]);
            qf[c][2 * i + 1] = bf16_hi(w[i]);
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) o[c][i] = 0.0f;
    }
    float m = -SY_INF, l = 0.0f;
    for (int j0 = start + warp * DC_KEYS; j0 < stop; j0 += 4 * DC_KEYS) {
        uint4 kv[DC_KEYS][NC], vv[DC_KEYS][NC];
        bool live[DC_KEYS];
#pragma unroll
        for (int u = 0; u < DC_KEYS; ++u) {
            const int j = j0 + u;
            live[u] = j < stop;
            // Slots were validated for the whole range before the loop.
            const size_t slot = live[u] ? (size_t)trow[j / page] * page + j % page : 0;
            const size_t at = slot * row_stride;
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                const int d = c * 256 + lane * 8;
                const bool ld = live[u] && dv[c];
                kv[u][c] = ld ? ld_nc16(kbase + at + d) : make_uint4(0u, 0u, 0u, 0u);
                vv[u][c] = ld ? ld_nc16(vbase + at + d) : make_uint4(0u, 0u, 0u, 0u);
            }
        }
        float sc[DC_KEYS];
#pragma unroll
        for (int u = 0; u < DC_KEYS; ++u) {
            float acc = 0.0f;
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                const unsigned w[4] = {kv[u][c].x, kv[u][c].y, kv[u][c].z, kv[u][c].w};
#pragma unroll
                for (int i = 0; i < 4; ++i) acc += qf[c][2 * i] * bf16_lo(w[i]) + qf[c][2 * i + 1] * bf16_hi(w[i]);
            }
            sc[u] = acc;
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
#pragma unroll
            for (int u = 0; u < DC_KEYS; ++u) sc[u] += __shfl_xor_sync(SY_FULL, sc[u], off);
        }
        float mx = m;
#pragma unroll
        for (int u = 0; u < DC_KEYS; ++u) {
            sc[u] = live[u] ? scale * sc[u] : -SY_INF;
            mx = fmaxf(mx, sc[u]);
        }
        const float alpha = __expf(m - mx); // m = -inf on the first group: 0 (mx is finite: key j0 is live)
        l *= alpha;
#pragma unroll
        for (int c = 0; c < NC; ++c) {
#pragma unroll
            for (int i = 0; i < 8; ++i) o[c][i] *= alpha;
        }
#pragma unroll
        for (int u = 0; u < DC_KEYS; ++u) {
            const float p = live[u] ? __expf(sc[u] - mx) : 0.0f;
            l += p;
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                const unsigned w[4] = {vv[u][c].x, vv[u][c].y, vv[u][c].z, vv[u][c].w};
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    o[c][2 * i] += p * bf16_lo(w[i]);
                    o[c][2 * i + 1] += p * bf16_hi(w[i]);
                }
            }
        }
        m = mx;
    }
    // Merge the 4 warps: red holds [4][2] (m, l) then [4][hd] o.
    float* wml = red;
    float* wo = red + 8;
    if (lane == 0) {
        wml[warp * 2] = m;
        wml[warp * 2 + 1] = l;
    }
#pragma unroll
    for (int c = 0; c < NC; ++c) {
        if (dv[c]) {
#pragma unroll
            for (int i = 0; i < 8; ++i) wo[warp * hd + c * 256 + lane * 8 + i] = o[c][i];
        }
    }
    __syncthreads();
    float big = -SY_INF;
#pragma unroll
    for (int w = 0; w < 4; ++w) big = fmaxf(big, wml[w * 2]);
    float sc4[4], lt = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        // A warp that saw no key has m = -inf, l = 0, o = 0: weight 0.
        sc4[w] = wml[w * 2] == -SY_INF ? 0.0f : __expf(wml[w * 2] - big);
        lt += sc4[w] * wml[w * 2 + 1];
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; ++w) acc += sc4[w] * wo[w * hd + d];
        o_out[d] = acc;
    }
    if (threadIdx.x == 0) {
        ml_out[0] = big;
        ml_out[1] = lt;
    }
}

// The split rule of kernels/src/attn/mod.rs (decode_splits, visible_keys),
// whose constants a unit test there checks against these.
#define DECODE_TARGET_BLOCKS 512
#define MIN_SPLIT_KEYS 256

__device__ __forceinline__ int visible_keys(int ctx, int window) { return window > 0 ? min(ctx, window) : ctx; }

__device__ __forceinline__ int decode_splits(int keys, int batch, int nh) {
    const long long bh = max(1LL, (long long)batch * nh);
    const long long want = (DECODE_TARGET_BLOCKS + bh - 1) / bh;
    const long long need = keys / MIN_SPLIT_KEYS + (keys % MIN_SPLIT_KEYS != 0);
    return (int)max(1LL, min(want, need));
}

extern "C" __global__ void __launch_bounds__(128) attention_decode(
    bf16* __restrict__ out, const bf16* __restrict__ q, const bf16* __restrict__ k_pool, const bf16* __restrict__ v_pool,
    const int* __restrict__ block_table, const int* __restrict__ ctx_len, int batch, int max_ctx, int nh, int nkv, int hd, int page,
    int max_pages, int num_slots, int window, float scale, float* __restrict__ workspace) {
    __shared__ float red[8 + 4 * 512];
    const int s = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int splits = decode_splits(visible_keys(max_ctx, window), batch, nh);
    if (b >= batch || h >= nh || s >= splits || nkv <= 0 || nh % nkv != 0 || hd > 512) return; // block-uniform
    const size_t e = ((size_t)b * nh + h) * splits + s;
    float* o_out = workspace + e * hd;
    float* ml_out = workspace + (size_t)batch * nh * splits * hd + e * 2;
    const int n = ctx_len[b];
    const long long cap = (long long)max_pages * page;
    const bool ok = n >= 1 && n <= max_ctx && n <= cap;
    const int lo = (ok && window > 0) ? max(0, n - window) : 0;
    // This sequence's own chunks; the rest of the planned S are idle.
    const int my_splits = ok ? decode_splits(n - lo, batch, nh) : 1;
    if (s >= my_splits) {
        if (threadIdx.x == 0) {
            ml_out[0] = -SY_INF;
            ml_out[1] = 0.0f;
        }
        return;
    }
    const int* trow = block_table + (size_t)b * max_pages;
    // The reference poisons the whole sequence when any key it attends to
    // has a bad page or slot, so every working block checks the full range
    // [lo, n), not just its chunk.
    int bad = 0;
    if (ok) {
        const int p_first = lo / page, p_last = (n - 1) / page;
        for (int pi = p_first + threadIdx.x; pi <= p_last; pi += blockDim.x) {
            const int pg = trow[pi];
            if (pg < 0) {
                bad = 1;
                continue;
            }
            const long long first = (long long)pi * page;
            const long long last = min((long long)n - 1, first + page - 1);
            if ((long long)pg * page + (last - first) >= num_slots) bad = 1;
        }
    }
    bad = __syncthreads_or(bad);
    if (!ok || bad) {
        for (int d = threadIdx.x; d < hd; d += blockDim.x) o_out[d] = SY_NAN;
        if (threadIdx.x == 0) ml_out[0] = ml_out[1] = SY_NAN;
        return;
    }
    const long long split_len = ((long long)(n - lo) + my_splits - 1) / my_splits;
    const long long start = lo + (long long)s * split_len;
    const long long stop = min((long long)n, start + split_len);
    if (start >= stop) {
        for (int d = threadIdx.x; d < hd; d += blockDim.x) o_out[d] = 0.0f;
        if (threadIdx.x == 0) {
            ml_out[0] = -SY_INF;
            ml_out[1] = 0.0f;
        }
        return;
    }
    const int kvh = h / (nh / nkv);
    const bf16* qh = q + ((size_t)b * nh + h) * hd;
    const int row_stride = nkv * hd;
    if (hd <= 256)
        decode_split<1>(o_out, ml_out, qh, k_pool + (size_t)kvh * hd, v_pool + (size_t)kvh * hd, trow, (int)start, (int)stop, hd, page,
                        row_stride, scale, red);
    else
        decode_split<2>(o_out, ml_out, qh, k_pool + (size_t)kvh * hd, v_pool + (size_t)kvh * hd, trow, (int)start, (int)stop, hd, page,
                        row_stride, scale, red);
}

// Grid (batch, nh), block 128. Chunks combined in chunk order; empty and
// idle chunks (m = -inf or l = 0) skipped; NaN m (an invalid sequence)
// poisons the row; all chunks empty gives NaN.
extern "C" __global__ void __launch_bounds__(128) attention_decode_reduce(
    bf16* __restrict__ out, const bf16* __restrict__ q, const bf16* __restrict__ k_pool, const bf16* __restrict__ v_pool,
    const int* __restrict__ block_table, const int* __restrict__ ctx_len, int batch, int max_ctx, int nh, int nkv, int hd, int page,
    int max_pages, int num_slots, int window, float scale, float* __restrict__ workspace) {
    const int b = blockIdx.x, h = blockIdx.y;
    if (b >= batch || h >= nh) return;
    const int splits = decode_splits(visible_keys(max_ctx, window), batch, nh);
    const size_t bh = (size_t)b * nh + h;
    const float* ml = workspace + (size_t)batch * nh * splits * hd + bh * splits * 2;
    const float* o = workspace + bh * splits * hd;
    bf16* orow = out + bh * hd;
    bool any = false, nan = false;
    float big = -SY_INF;
    for (int s = 0; s < splits; ++s) {
        const float m = ml[2 * s], l = ml[2 * s + 1];
        if (m == -SY_INF || l == 0.0f) continue;
        any = true;
        if (m != m) nan = true; else big = fmaxf(big, m);
    }
    if (!any || nan) {
        for (int d = threadIdx.x; d < hd; d += blockDim.x) orow[d] = SY_NAN_BF16;
        return;
    }
    float den = 0.0f;
    for (int s = 0; s < splits; ++s) {
        const float m = ml[2 * s], l = ml[2 * s + 1];
        if (m == -SY_INF || l == 0.0f) continue;
        den += expf(m - big) * l;
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float num = 0.0f;
        for (int s = 0; s < splits; ++s) {
            const float m = ml[2 * s], l = ml[2 * s + 1];
            if (m == -SY_INF || l == 0.0f) continue;
            num += expf(m - big) * o[(size_t)s * hd + d];
        }
        orow[d] = f32_to_bf16(num / den);
    }
}
