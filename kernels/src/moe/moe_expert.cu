// The Gemma 4 MoE expert path: router norm, softmax top-k, gather into expert
// order, grouped bf16 / NVFP4 expert GEMMs on tensor cores and the gated
// GELU (the weighted combine is in moe_rows.cu). Deterministic: no atomics
// on values.
//
// Where the contract fixes an f32 evaluation order (router norm, gelu),
// products and sums use the explicitly rounded intrinsics (__fmul_rn /
// __fadd_rn) so that NVRTC cannot contract them into FMAs: the
// results then equal the CPU reference's left-to-right f32 evaluation bit for
// bit, apart from the math-library functions (tanhf, expf, sqrtf sums).
//
// Programmatic dependent launch (prelude.cuh):
// - The fused decode routing (moe_route_decode, moe_route_decode_regs) is a
//   dependent: each block issues its loads of expert x's router row and an
//   L2 prefetch of the router norm's scale, weights no launch writes, then
//   sy_wait_prior(); the hidden rows and every output come after it
//   (route_dec_stage*), and every path of a block waits, the early returns
//   included. At the start it calls sy_allow_next(), as the norms do
//   (norm.cu). On the H200 (bench-model --shape 26b-a4b, batch 1, 8
//   alternating runs) this and the GEMMs' sy_allow_next below took 256.7 to
//   259.9 tok/s (moe_rows.cu's dependents then 262.0).
// - The expert GEMMs (moe_grouped_gemm_bf16 and its _seg decode form,
//   moe_gate_up_gelu_bf16, moe_grouped_w4a16) read the weight rows the
//   routing picked: nothing to load before a wait, so they are plain
//   launches that call sy_allow_next() at their start (a dependent after
//   them may start while they run), as the norms do.
// dependent-launch: moe_route_decode moe_route_decode_regs

#define SY_FULL 0xffffffffu

// ---------------------------------------------------------------- router norm

// x · inv · scale · root for one bf16 pair, left to right, one rounding.
__device__ __forceinline__ unsigned router_norm_pair(unsigned w, unsigned s, float inv, float root) {
    const float a = __fmul_rn(__fmul_rn(__fmul_rn(bf16_lo(w), inv), bf16_lo(s)), root);
    const float b = __fmul_rn(__fmul_rn(__fmul_rn(bf16_hi(w), inv), bf16_hi(s)), root);
    return pack_bf16(a, b);
}

// Σ x² over a thread's 16-byte chunks of bf16 held in registers, chunk by
// chunk, low then high half of each word (zero chunks add nothing).
template <int N>
__device__ __forceinline__ float sumsq_chunks(const uint4 (&xv)[N]) {
    float ss = 0.0f;
#pragma unroll
    for (int u = 0; u < N; ++u) {
        const unsigned w[4] = {xv[u].x, xv[u].y, xv[u].z, xv[u].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float a = bf16_lo(w[e]), b = bf16_hi(w[e]);
            ss = fmaf(a, a, ss);
            ss = fmaf(b, b, ss);
        }
    }
    return ss;
}

// Up to this many 16-byte chunks a thread keeps in registers (dim <= 8192
// at block 256); longer or unaligned rows take the word loop.
#define ROUTER_NORM_CHUNKS 4

// Plan: grid (rows), block 256. At decode a launch is one row: what it costs
// is latency, so the row's 16-byte chunks and the scale's are all loaded
// before the block reduction and the row is not read twice.
extern "C" __global__ void __launch_bounds__(256) router_norm_bf16(bf16* __restrict__ out, const bf16* __restrict__ x,
                                                                    const bf16* __restrict__ scale, int rows, int dim, float eps, float root) {
    if ((int)blockIdx.x >= rows) return;
    __shared__ float red[32];
    const size_t row = blockIdx.x;
    const bf16* xrow = x + row * (size_t)dim;
    bf16* orow = out + row * (size_t)dim;
    const int chunks = dim / 8;
    if (dim % 8 == 0 && chunks <= ROUTER_NORM_CHUNKS * (int)blockDim.x && aligned16(xrow) && aligned16(orow) && aligned16(scale)) {
        uint4 xv[ROUTER_NORM_CHUNKS], sv[ROUTER_NORM_CHUNKS];
#pragma unroll
        for (int u = 0; u < ROUTER_NORM_CHUNKS; ++u) {
            const int c = threadIdx.x + u * blockDim.x;
            xv[u] = c < chunks ? ld_nc16(xrow + (size_t)c * 8) : make_uint4(0u, 0u, 0u, 0u);
            sv[u] = c < chunks ? ld_nc16(scale + (size_t)c * 8) : make_uint4(0u, 0u, 0u, 0u);
        }
        const float ss = sumsq_chunks(xv);
        const float inv = 1.0f / sqrtf(block_sum(ss, red) / (float)dim + eps);
#pragma unroll
        for (int u = 0; u < ROUTER_NORM_CHUNKS; ++u) {
            const int c = threadIdx.x + u * blockDim.x;
            if (c >= chunks) break;
            const uint4 o = make_uint4(router_norm_pair(xv[u].x, sv[u].x, inv, root), router_norm_pair(xv[u].y, sv[u].y, inv, root),
                                       router_norm_pair(xv[u].z, sv[u].z, inv, root), router_norm_pair(xv[u].w, sv[u].w, inv, root));
            *reinterpret_cast<uint4*>(orow + (size_t)c * 8) = o;
        }
        return;
    }
    const unsigned* xr = reinterpret_cast<const unsigned*>(xrow); // dim even: word pairs
    const unsigned* sr = reinterpret_cast<const unsigned*>(scale);
    unsigned* ow = reinterpret_cast<unsigned*>(orow);
    const int words = dim / 2;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < words; i += blockDim.x) {
        const unsigned w = xr[i];
        const float a = bf16_lo(w), b = bf16_hi(w);
        ss = fmaf(a, a, ss);
        ss = fmaf(b, b, ss);
    }
    const float inv = 1.0f / sqrtf(block_sum(ss, red) / (float)dim + eps);
    for (int i = threadIdx.x; i < words; i += blockDim.x) ow[i] = router_norm_pair(xr[i], sr[i], inv, root);
}

// ---------------------------------------------------------------- softmax top-k

// At decode a launch is one row, a single warp's chain of dependent steps,
// so each step is kept short. Every p gets a rank key, its f32 bits (p >= 0,
// so the bit order is the value order) with the sign cleared, plus one, and
// a chosen entry's key drops to 0. Then a round of the k is: each lane's
// largest key among its entries (the lowest index of equal keys, as it scans
// upward), the warp's largest key by one `redux`, and the lowest index
// holding it by another. A NaN p (a NaN logit) ranks above every number, as
// the reference's total order ranks a positive NaN, so every round picks an
// index inside the row.

// One row's top-k by the rounds above, on one warp; p, key and scale_of hold
// e entries of this warp's own shared memory. Returns, in lane c < k, the
// c-th pick (id and weight). FROM_L2: the logits were written by other
// blocks of this launch (moe_route_decode), so they are read from L2.
template <bool FROM_L2>
__device__ __forceinline__ void router_topk_row(const bf16* __restrict__ lr, const float* __restrict__ per_expert_scale, int e, int k,
                                                   float* p, unsigned* key, float* scale_of, int& out_id, float& out_w) {
    const int lane = threadIdx.x & 31;
    float m = -SY_INF;
    // The expert scales are read with the logits, so the weights at the end
    // do not wait on a second round trip to memory.
    for (int i = lane; i < e; i += 32) {
        const float v = bf16_to_f32(FROM_L2 ? __ldcg(lr + i) : lr[i]);
        scale_of[i] = per_expert_scale[i];
        p[i] = v;
        m = fmaxf(m, v);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(SY_FULL, m, o));
    for (int i = lane; i < e; i += 32) p[i] = expf(p[i] - m);
    __syncwarp();
    // The contract sums in index order: one lane walks the row (e <= 1024),
    // unrolled so that the shared-memory loads run ahead of the add chain.
    float s = 0.0f;
    if (lane == 0) {
#pragma unroll 16
        for (int i = 0; i < e; ++i) s = __fadd_rn(s, p[i]);
    }
    const float total = __shfl_sync(SY_FULL, s, 0);
    for (int i = lane; i < e; i += 32) {
        const float v = p[i] / total;
        p[i] = v;
        key[i] = (__float_as_uint(v) & 0x7fffffffu) + 1u;
    }
    __syncwarp();
    // The chosen p summed in the order chosen (descending, as the reference).
    float chosen_sum = 0.0f, my_p = 0.0f;
    int my_id = 0;
    for (int c = 0; c < k; ++c) {
        unsigned best = 0u, best_i = 0xffffffffu;
        for (int i = lane; i < e; i += 32) {
            const unsigned kv = key[i];
            if (kv > best) {
                best = kv;
                best_i = (unsigned)i;
            }
        }
        const unsigned top = __reduce_max_sync(SY_FULL, best);
        const int win = (int)__reduce_min_sync(SY_FULL, best == top ? best_i : 0xffffffffu);
        if ((win & 31) == lane) key[win] = 0u; // only its owner lane reads it again
        const float pv = p[win];
        chosen_sum = __fadd_rn(chosen_sum, pv);
        if (lane == c) {
            my_id = win;
            my_p = pv;
        }
    }
    out_id = my_id;
    out_w = lane < k ? __fmul_rn(__fdiv_rn(my_p, chosen_sum), scale_of[my_id]) : 0.0f;
    __syncwarp(); // p / key / scale_of are reused by this warp's next row
}

// Plan: grid (rows), block 32 (one warp per row). e <= 1024, k <= 32.
extern "C" __global__ void __launch_bounds__(32) moe_router_topk(int* __restrict__ topk_ids, float* __restrict__ topk_w,
                                                                   const bf16* __restrict__ logits,
                                                                   const float* __restrict__ per_expert_scale, int rows, int e, int k) {
    __shared__ float p[1024];
    __shared__ unsigned key[1024];
    __shared__ float scale_of[1024];
    const int r = blockIdx.x, lane = threadIdx.x;
    if (r >= rows || e > 1024 || k > 32 || k > e) return;
    int id;
    float w;
    router_topk_row<false>(logits + (size_t)r * e, per_expert_scale, e, k, p, key, scale_of, id, w);
    if (lane < k) {
        topk_ids[(size_t)r * k + lane] = id;
        topk_w[(size_t)r * k + lane] = w;
    }
}

// ---------------------------------------------------------------- decode routing, fused

// moe_route_decode: router_norm_bf16, dense_gemm_router, moe_router_topk and
// the count / offsets / scatter bookkeeping of a decode step in one launch.
//
// Plan: grid (e), block 256, dynamic shared memory
// max((rows + 1) * router_chain_ld(dim) * 4, route_decode_select_bytes(e, k)).
// Block x owns expert x: it stages expert x's router row and the rows'
// normalised inputs (bf16-rounded, as f32) in shared memory, and warp w
// computes the logits (r, x) of rows r = w, w + 8 in the router order, as
// dense_gemm_router_chain does with a 1-column tile (a lane's chain is
// dim / 256 chunks; the strict k chain this replaced, ~4 cycles a k, was 70%
// of the launch by ncu's stall samples). Every block recomputes the norm of the rows (a few
// KiB from L2 each) instead of waiting on a separate launch. The last block
// to finish (arrival counter below) reads the logits back from L2 and does
// the top-k (a warp a row, the moe_router_topk rounds) and the slot
// bookkeeping (pairs are at most 16 · 32, so one block does it in shared
// memory). Deterministic: the counter only elects the block, every value is
// computed the same way whichever block it is. Two entries, one body
// (route_decode below): they differ only in how the rows' norm is staged.
#define ROUTE_DEC_MAX_ROWS 16
#define ROUTE_DEC_MAX_E 256
#define ROUTE_DEC_MAX_K 32

// 16-byte chunks of a router input row a lane holds in
// moe_route_decode_regs: dim <= 8 · 32 · ROUTE_DEC_LANE_CHUNKS = 3072 (the
// plan's limit, ROUTE_DECODE_MAX_DIM: at most 384 chunks over 32 lanes).
#define ROUTE_DEC_LANE_CHUNKS 12

// Zero at module load; the electing block puts it back to zero, so every
// launch finds it zero: every block of a launch arrives (the argument checks
// that return early are uniform over the grid, the regs entry's extra check
// of dim as well), and no block adds to it before the route launch before
// it, of either entry (both count on this one counter), has finished.
//
// Why, with early launch: both entries are programmatic dependents, so a
// launch may start while the launch just before it still runs. But a block
// reaches the atomicAdd only after sy_wait_prior() (in the staging), which
// returns once that launch has finished and its writes are visible. And
// that launch finished only after every launch before it on the stream: a
// plain launch starts only once the one before it has finished, and a
// dependent one cannot finish before the one before it, as long as one of
// its blocks waited before exiting (every path of these entries waits, the
// argument-check returns too; in the other dependents, every block with
// work does, and a decode launch has work). By
// induction over the launches in between (at decode, a layer's expert
// GEMMs, combine, attention and GEMVs; or none, two route launches in a
// row), the previous route launch has finished, its reset with it, before
// any block of this one arrives. The election does not rely on residency
// either: no block waits for another (the blocks that do not elect exit),
// so blocks of a later launch started early cannot hold it up.
__device__ unsigned moe_route_decode_arrivals;

// Row stride in floats of the staged rows (gemm.cu's router_chain_ld).
__device__ __forceinline__ int route_dec_ld(int dim) { return ((dim + 31) & ~31) + 4; }

// The 8 bf16 of chunk c of a router row as f32 in shared memory.
__device__ __forceinline__ void route_dec_put_f32(float* wrow, int c, const uint4& v) {
    float4* dst = reinterpret_cast<float4*>(wrow + (size_t)c * 8);
    dst[0] = make_float4(bf16_lo(v.x), bf16_hi(v.x), bf16_lo(v.y), bf16_hi(v.y));
    dst[1] = make_float4(bf16_lo(v.z), bf16_hi(v.z), bf16_lo(v.w), bf16_hi(v.w));
}

// The staging of moe_route_decode (the staged form, any dim): expert xe's
// router row as f32 into wrow, and the rows' normalised inputs (bf16-rounded,
// as f32) into route_smem, row r at r · LD. Waits for the launch before
// (sy_wait_prior) after issuing the router row's first round of loads and
// the scale's prefetch.
__device__ __forceinline__ void route_dec_stage(float* route_smem, float* wrow, const bf16* __restrict__ x,
                                                const bf16* __restrict__ scale, const bf16* __restrict__ router_w, int rows,
                                                int dim, int LD, int chunks, float eps, float root) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, xe = blockIdx.x;
    // Expert xe's router row, f32, issued first: it is the one DRAM read.
    // Its first round (the whole row for dim <= 8192) is a weight no launch
    // writes: issued before the wait, volatile so that it stays there.
    uint4 v[4];
    auto load_round = [&](int c0) {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int c = c0 + u * 256;
            v[u] = c < chunks ? ld_stream16_v(router_w + (size_t)xe * dim + (size_t)c * 8) : make_uint4(0u, 0u, 0u, 0u);
        }
    };
    load_round(tid);
    sy_prefetch_l2(scale, dim); // read after the wait, from L2 as x is
    sy_wait_prior(); // x is the previous launch's output, the outputs its inputs
    for (int c0 = tid; c0 < chunks; c0 += 4 * 256) {
        if (c0 != tid) load_round(c0);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int c = c0 + u * 256;
            if (c < chunks) route_dec_put_f32(wrow, c, v[u]);
        }
    }
    // The router norm, a warp a row: Σx² (order free), then
    // bf16(x · inv · scale · root) left to right, staged as f32.
    for (int r = warp; r < rows; r += 8) {
        const bf16* xr = x + (size_t)r * dim;
        float ss = 0.0f;
        for (int c = lane; c < chunks; c += 32) {
            const uint4 v = ld_nc16(xr + (size_t)c * 8);
            const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float a = bf16_lo(w[i]), b = bf16_hi(w[i]);
                ss = fmaf(a, a, ss);
                ss = fmaf(b, b, ss);
            }
        }
        const float inv = 1.0f / sqrtf(warp_sum(ss) / (float)dim + eps);
        float* dst = route_smem + (size_t)r * LD;
        for (int c = lane; c < chunks; c += 32) {
            const uint4 v = ld_nc16(xr + (size_t)c * 8), s = ld_nc16(scale + (size_t)c * 8);
            const unsigned o[4] = {router_norm_pair(v.x, s.x, inv, root), router_norm_pair(v.y, s.y, inv, root),
                                   router_norm_pair(v.z, s.z, inv, root), router_norm_pair(v.w, s.w, inv, root)};
            float4* d4 = reinterpret_cast<float4*>(dst + (size_t)c * 8);
            d4[0] = make_float4(bf16_lo(o[0]), bf16_hi(o[0]), bf16_lo(o[1]), bf16_hi(o[1]));
            d4[1] = make_float4(bf16_lo(o[2]), bf16_hi(o[2]), bf16_lo(o[3]), bf16_hi(o[3]));
        }
    }
}

// The same staging for moe_route_decode_regs (dim <= 8 · 32 ·
// ROUTE_DEC_LANE_CHUNKS): the router norm, a warp a row, with every load of
// a row in flight at once: a lane keeps its (at most ROUTE_DEC_LANE_CHUNKS)
// 16-byte chunks of x and of scale in registers, so Σx² and
// bf16(x · inv · scale · root) cost one trip to L2 and no second read. The
// router row's loads and the scale's L2 prefetch (weights: no launch writes
// them) are issued before sy_wait_prior(), the first row's loads right after
// it, and none is waited on before all are in flight. (Holding the scale's
// chunks across the wait instead cost 181 registers against 128.)
//
// Same bits as route_dec_stage: a lane's chunks are c = lane + 32·u in
// increasing u, the staged loop's c = lane, lane + 32, ... in the same order,
// each adding the same fmaf(a, a, ss) pairs (word 0..3, lo then hi); the
// chunks past the row (c >= chunks) are zero here and add fmaf(0, 0, ss) =
// ss + 0, which leaves every ss the chain can hold (+0, positive, inf, the
// GPU's one NaN) bit for bit as it is. warp_sum, inv and router_norm_pair
// are the same expressions on the same words (x and scale are inputs no
// block writes, so holding them equals reading them again), stored at the
// same places; the router row's chunks are the staged loop's (for dim <=
// 3072 its u = 2, 3 rounds hold no chunk). So the staged rows, and with them
// the chains, logits, top-k and slots, are identical.
__device__ __forceinline__ void route_dec_stage_regs(float* route_smem, float* wrow, const bf16* __restrict__ x,
                                                     const bf16* __restrict__ scale, const bf16* __restrict__ router_w,
                                                     int rows, int dim, int LD, int chunks, float eps, float root) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, xe = blockIdx.x;
    uint4 xv[ROUTE_DEC_LANE_CHUNKS], sv[ROUTE_DEC_LANE_CHUNKS];
    // Row r of x (volatile: kept behind the wait) and the scale's chunks.
    auto load_row = [&](int r) {
#pragma unroll
        for (int u = 0; u < ROUTE_DEC_LANE_CHUNKS; ++u) {
            const int c = lane + 32 * u;
            xv[u] = c < chunks ? ld_nc16_v(x + (size_t)r * dim + (size_t)c * 8) : make_uint4(0u, 0u, 0u, 0u);
            sv[u] = c < chunks ? ld_nc16(scale + (size_t)c * 8) : make_uint4(0u, 0u, 0u, 0u);
        }
    };
    auto norm_row = [&](int r) {
        const float ss = sumsq_chunks(xv);
        const float inv = 1.0f / sqrtf(warp_sum(ss) / (float)dim + eps);
        float* dst = route_smem + (size_t)r * LD;
#pragma unroll
        for (int u = 0; u < ROUTE_DEC_LANE_CHUNKS; ++u) {
            const int c = lane + 32 * u;
            if (c >= chunks) break;
            const unsigned o[4] = {router_norm_pair(xv[u].x, sv[u].x, inv, root), router_norm_pair(xv[u].y, sv[u].y, inv, root),
                                   router_norm_pair(xv[u].z, sv[u].z, inv, root), router_norm_pair(xv[u].w, sv[u].w, inv, root)};
            float4* d4 = reinterpret_cast<float4*>(dst + (size_t)c * 8);
            d4[0] = make_float4(bf16_lo(o[0]), bf16_hi(o[0]), bf16_lo(o[1]), bf16_hi(o[1]));
            d4[1] = make_float4(bf16_lo(o[2]), bf16_hi(o[2]), bf16_lo(o[3]), bf16_hi(o[3]));
        }
    };
    // Before the wait: expert xe's router row (at most 384 chunks: one each
    // for 256 threads and a second for some), volatile so that the loads
    // stay there, and the scale's prefetch.
    uint4 v[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
        const int c = tid + u * 256;
        v[u] = c < chunks ? ld_stream16_v(router_w + (size_t)xe * dim + (size_t)c * 8) : make_uint4(0u, 0u, 0u, 0u);
    }
    sy_prefetch_l2(scale, dim); // read after the wait, from L2 as x is
    sy_wait_prior(); // x is the previous launch's output, the outputs its inputs
    if (warp < rows) load_row(warp);
#pragma unroll
    for (int u = 0; u < 2; ++u) {
        const int c = tid + u * 256;
        if (c < chunks) route_dec_put_f32(wrow, c, v[u]);
    }
    for (int r = warp; r < rows; r += 8) {
        if (r != warp) load_row(r);
        norm_row(r);
    }
}

// The body of both entries; REGS picks the staging (route_dec_stage_regs,
// dim <= 3072, or route_dec_stage). Everything after it is shared.
template <bool REGS>
__device__ __forceinline__ void route_decode(int* __restrict__ topk_ids, float* __restrict__ topk_w, int* __restrict__ offsets,
                                             int* __restrict__ pair_of_slot, int* __restrict__ slot_of_pair, bf16* __restrict__ logits,
                                             const bf16* __restrict__ x, const bf16* __restrict__ scale, const bf16* __restrict__ router_w,
                                             const float* __restrict__ per_expert_scale, int rows, int dim, int e, int k, float eps,
                                             float root) {
    extern __shared__ __align__(16) float route_smem[];
    __shared__ int last_s;
    sy_allow_next(); // the launch after this may start now (file header)
    // The argument checks return after sy_wait_prior(): a dependent launch
    // finishes only after the one before it (the counter's argument above).
    if (rows < 1 || rows > ROUTE_DEC_MAX_ROWS || e < 1 || e > ROUTE_DEC_MAX_E || (e & 1) || k < 1 || k > ROUTE_DEC_MAX_K || k > e ||
        dim < 8 || (dim & 7) || (int)gridDim.x != e) {
        sy_wait_prior();
        return; // uniform over the grid: no block arrives, the counter stays zero
    }
    if constexpr (REGS) {
        if (dim > 8 * 32 * ROUTE_DEC_LANE_CHUNKS) { // as uniform: a lane holds at most ROUTE_DEC_LANE_CHUNKS chunks
            sy_wait_prior();
            return;
        }
    }
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, xe = blockIdx.x;
    const int LD = route_dec_ld(dim), chunks = dim / 8;
    float* wrow = route_smem + (size_t)rows * LD;

    // Both stagings issue their weight loads, then sy_wait_prior(), then
    // read x: all that follows them comes after the wait.
    if constexpr (REGS) {
        route_dec_stage_regs(route_smem, wrow, x, scale, router_w, rows, dim, LD, chunks, eps, root);
    } else {
        route_dec_stage(route_smem, wrow, x, scale, router_w, rows, dim, LD, chunks, eps, root);
    }
    __syncthreads();

    // The logits in the router order: a warp a row, lane j partial j, the
    // butterfly meets them (dense_gemm_router_chain's arithmetic).
    for (int r = warp; r < rows; r += 8) {
        const float sum = router_tree(router_partial(route_smem + (size_t)r * LD, wrow, lane, chunks));
        if (lane == 0) {
            logits[(size_t)r * e + xe] = f32_to_bf16(sum);
            // Release: the logit is visible device-wide before the arrival.
            __threadfence();
        }
    }
    __syncthreads();
    if (tid == 0) {
        const unsigned arrived = atomicAdd(&moe_route_decode_arrivals, 1u);
        last_s = arrived == (unsigned)e - 1u;
        if (last_s) moe_route_decode_arrivals = 0u; // every block of this launch has arrived
    }
    __syncthreads();
    if (!last_s) return;
    // Acquire: the logits' reads come after the arrival count that showed them written.
    __threadfence();

    // Shared memory, reused: per warp p, key, scale_of (e each); then the
    // pairs' ids, the counts and the offsets.
    float* pw = route_smem + (size_t)warp * 3 * e;
    unsigned* kw = reinterpret_cast<unsigned*>(pw + e);
    float* sw = pw + 2 * e;
    int* ids = reinterpret_cast<int*>(route_smem + (size_t)8 * 3 * e);
    int* cnt = ids + ROUTE_DEC_MAX_ROWS * ROUTE_DEC_MAX_K;
    int* off = cnt + ROUTE_DEC_MAX_E;
    const int n = rows * k;
    for (int i = tid; i < e; i += 256) cnt[i] = 0;
    for (int r = warp; r < rows; r += 8) {
        int id;
        float wv;
        router_topk_row<true>(logits + (size_t)r * e, per_expert_scale, e, k, pw, kw, sw, id, wv);
        if (lane < k) {
            topk_ids[(size_t)r * k + lane] = id;
            topk_w[(size_t)r * k + lane] = wv;
            ids[r * k + lane] = id;
        }
    }
    __syncthreads();
    // Counts (integer atomics: the totals do not depend on their order).
    for (int q = tid; q < n; q += 256) atomicAdd(&cnt[ids[q]], 1);
    __syncthreads();
    // Exclusive prefix sum over e <= 256 experts: thread x holds count x.
    {
        const int c = tid < e ? cnt[tid] : 0;
        int v = c;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int u = __shfl_up_sync(SY_FULL, v, o);
            if (lane >= o) v += u;
        }
        __shared__ int warp_tot[8];
        if (lane == 31) warp_tot[warp] = v;
        __syncthreads();
        int before = 0;
        for (int w = 0; w < warp; ++w) before += warp_tot[w];
        if (tid < e) {
            off[tid] = before + v - c;
            offsets[tid] = before + v - c;
        }
        if (tid == 0) offsets[e] = n; // every pair has a valid expert
    }
    __syncthreads();
    // Slots in increasing pair order within each expert's segment.
    for (int q = tid; q < n; q += 256) {
        const int id = ids[q];
        int rank = 0;
        for (int t = 0; t < q; ++t) rank += ids[t] == id;
        const int slot = off[id] + rank;
        pair_of_slot[slot] = q;
        slot_of_pair[q] = slot;
    }
}

// The staged form: a lane reads its chunks of a row twice (Σx², then the
// normalised values), any dim the shared memory holds.
extern "C" __global__ void __launch_bounds__(256) moe_route_decode(int* __restrict__ topk_ids, float* __restrict__ topk_w,
                                                                    int* __restrict__ offsets, int* __restrict__ pair_of_slot,
                                                                    int* __restrict__ slot_of_pair, bf16* __restrict__ logits,
                                                                    const bf16* __restrict__ x, const bf16* __restrict__ scale,
                                                                    const bf16* __restrict__ router_w, const float* __restrict__ per_expert_scale,
                                                                    int rows, int dim, int e, int k, float eps, float root) {
    route_decode<false>(topk_ids, topk_w, offsets, pair_of_slot, slot_of_pair, logits, x, scale, router_w, per_expert_scale, rows, dim, e,
                        k, eps, root);
}

// The norm in registers (route_dec_stage_regs), dim <= 3072; the plan's
// default there (SWITCHYARD_CUDA_ROUTE_DECODE=staged takes the entry above):
// 20.0 us a launch against 24.6 under ncu, 26b-a4b batch 1 266.4 against
// 258.0 tok/s on the H200 (thirteenth session).
extern "C" __global__ void __launch_bounds__(256) moe_route_decode_regs(int* __restrict__ topk_ids, float* __restrict__ topk_w,
                                                                         int* __restrict__ offsets, int* __restrict__ pair_of_slot,
                                                                         int* __restrict__ slot_of_pair, bf16* __restrict__ logits,
                                                                         const bf16* __restrict__ x, const bf16* __restrict__ scale,
                                                                         const bf16* __restrict__ router_w,
                                                                         const float* __restrict__ per_expert_scale, int rows, int dim, int e,
                                                                         int k, float eps, float root) {
    route_decode<true>(topk_ids, topk_w, offsets, pair_of_slot, slot_of_pair, logits, x, scale, router_w, per_expert_scale, rows, dim, e,
                       k, eps, root);
}

// ---------------------------------------------------------------- gather

// Plan: grid (n), block 256. h even.
extern "C" __global__ void __launch_bounds__(256) moe_gather_bf16(bf16* __restrict__ out, const bf16* __restrict__ x,
                                                                   const int* __restrict__ pair_of_slot, int n, int k, int h, int rows) {
    const int s = blockIdx.x;
    if (s >= n) return;
    const int pair = pair_of_slot[s];
    // -1: empty slot (zeros). Any other negative pair is tested explicitly:
    // C division truncates toward zero, so pair / k could land on token 0.
    int mode; // 0 zeros, 1 copy, 2 NaN
    int tok = 0;
    if (pair == -1) {
        mode = 0;
    } else if (pair < 0 || k <= 0) {
        mode = 2;
    } else {
        tok = pair / k;
        mode = tok < rows ? 1 : 2;
    }
    bf16* o = out + (size_t)s * h;
    const bf16* src = x + (size_t)tok * h;
    if ((h & 7) == 0 && aligned16(o) && aligned16(src)) {
        const uint4 fill = mode == 0 ? make_uint4(0u, 0u, 0u, 0u) : make_uint4(0x7fc07fc0u, 0x7fc07fc0u, 0x7fc07fc0u, 0x7fc07fc0u);
        for (int i = threadIdx.x; i < h / 8; i += blockDim.x)
            reinterpret_cast<uint4*>(o)[i] = mode == 1 ? ld_stream16(src + 8 * i) : fill;
    } else {
        const unsigned fill = mode == 0 ? 0u : 0x7fc07fc0u;
        for (int i = threadIdx.x; i < h / 2; i += blockDim.x)
            reinterpret_cast<unsigned*>(o)[i] = mode == 1 ? reinterpret_cast<const unsigned*>(src)[i] : fill;
    }
}

// ---------------------------------------------------------------- grouped GEMMs

// D += A·B on the tensor cores: m16n8k16, bf16 inputs, f32 accumulators.
__device__ __forceinline__ void mma_bf16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned u4_word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// First expert whose segment ends after row r0 (offsets non-decreasing).
__device__ __forceinline__ int first_expert(const int* offsets, int e, int r0) {
    int lo = 0, hi = e; // answer in [0, e]
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (offsets[mid + 1] > r0) hi = mid; else lo = mid + 1;
    }
    return lo;
}

// The K-order permutation both grouped GEMMs use: in a 32-wide K chunk,
// thread t (= lane % 4) loads the 8 consecutive k at k0 + 8t as one 16-byte
// vector, for A and for B alike; mma step j (0, 1) then reads words 2j and
// 2j+1 as its "k = 2t, 2t+1" and "k = 2t+8, 2t+9" pairs. A and B see the same
// physical k at each logical position, so the product is the full dot
// product, summed in another order (the contract leaves K order free).
//
// One block: 16 rows (one M tile) x 64 columns; warp w owns columns
// n0 + 16w .. +16 (two n8 tiles). An M tile that spans several experts is
// split at the segment boundaries: each expert's pass masks the other rows
// to zero and stores only its own.

// Plan: grid (ceil(N/64), ceil(n/16)), block 128. K % 8 == 0, N even.
extern "C" __global__ void __launch_bounds__(128) moe_grouped_gemm_bf16(bf16* __restrict__ out, const bf16* __restrict__ a,
                                                                         const bf16* __restrict__ w, const int* __restrict__ offsets,
                                                                         int n, int e, int big_n, int big_k) {
    sy_allow_next(); // the launch after this may start now (file header)
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int r0 = blockIdx.y * 16, n0 = blockIdx.x * 64 + warp * 16;
    if (n0 >= big_n || r0 >= n) return; // warp-uniform; no block barriers below
    const int ra = r0 + g, rb = r0 + g + 8, rend = min(r0 + 16, n);
    const int cov_lo = max(offsets[0], 0), cov_hi = min(offsets[e], n);
    for (int x = first_expert(offsets, e, r0); x < e && offsets[x] < rend; ++x) {
        const int s_lo = max(r0, offsets[x]), s_hi = min(rend, offsets[x + 1]);
        if (s_lo >= s_hi) continue;
        const bool ina = ra >= s_lo && ra < s_hi, inb = rb >= s_lo && rb < s_hi;
        const bf16* wx = w + (size_t)x * big_n * big_k;
        float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        for (int k0 = 0; k0 < big_k; k0 += 32) {
            const int kk = k0 + 8 * t;
            const bool kv = kk < big_k; // K % 8 == 0: a vector is all in or all out
            const uint4 z = make_uint4(0u, 0u, 0u, 0u);
            const uint4 va = (ina && kv) ? ld_nc16(a + (size_t)ra * big_k + kk) : z;
            const uint4 vb = (inb && kv) ? ld_nc16(a + (size_t)rb * big_k + kk) : z;
            uint4 wb[2];
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                const int col = n0 + nt * 8 + g;
                wb[nt] = (kv && col < big_n) ? ld_nc16(wx + (size_t)col * big_k + kk) : z;
            }
#pragma unroll
            for (int j = 0; j < 2; ++j) {
#pragma unroll
                for (int nt = 0; nt < 2; ++nt)
                    mma_bf16(acc[nt], u4_word(va, 2 * j), u4_word(vb, 2 * j), u4_word(va, 2 * j + 1), u4_word(vb, 2 * j + 1),
                             u4_word(wb[nt], 2 * j), u4_word(wb[nt], 2 * j + 1));
            }
        }
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            const int col = n0 + nt * 8 + 2 * t;
            if (col >= big_n) continue; // N even: col + 1 < N too
            if (ina) *reinterpret_cast<unsigned*>(out + (size_t)ra * big_n + col) = pack_bf16(acc[nt][0], acc[nt][1]);
            if (inb) *reinterpret_cast<unsigned*>(out + (size_t)rb * big_n + col) = pack_bf16(acc[nt][2], acc[nt][3]);
        }
    }
    // Rows outside every segment (before offsets[0] or at/after offsets[e]) are zero.
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
        const int col = n0 + nt * 8 + 2 * t;
        if (col >= big_n) continue;
        if (ra < n && (ra < cov_lo || ra >= cov_hi)) *reinterpret_cast<unsigned*>(out + (size_t)ra * big_n + col) = 0u;
        if (rb < n && (rb < cov_lo || rb >= cov_hi)) *reinterpret_cast<unsigned*>(out + (size_t)rb * big_n + col) = 0u;
    }
}

// Decode sizes (few slots; plan: grid (ceil(N / MOE_SEG_COLS), n), block 256):
// the tile kernel above gives a 16-row tile to a handful of blocks, each
// streaming several experts' weights one after the other. Here the block of
// slot s owns the segment that starts at s (blocks of other slots in the
// segment exit), so every selected expert's weight rows stream once, spread
// over N / MOE_SEG_COLS blocks. Each warp takes MOE_SEG_RW weight rows with
// all of a lane's 16-byte loads of one step (MOE_SEG_RW x MOE_SEG_U = 8)
// issued before any math (16 measured slower on the H200: 49% of the copy
// rate against 52% for the 26b-a4b expert projections), and the
// segment's activation rows in groups of MOE_SEG_R (the weights are read
// again, from L2, only for segments longer than that). Two rows a group, not
// four: 80 registers instead of 103, so three blocks an SM stream at once
// instead of two (a decode segment holds one row at batch 1 and rarely more
// than two at 16). f32 sums, the lanes' partials added by a warp reduction:
// the K order is free by contract.
#define MOE_SEG_RW 4
#define MOE_SEG_R 2
#define MOE_SEG_U 2
#define MOE_SEG_COLS (8 * MOE_SEG_RW)
//
// GELU: the gate_up projection with the gated GELU in its epilogue
// (moe_gate_up_gelu_bf16): out is [n, inter] with inter = big_n / 2, and a
// warp's MOE_SEG_RW weight rows are gate rows i0, i0 + 1 and the up rows
// inter + i0, inter + i0 + 1 of the same two outputs, so the activation is
// computed from the warp's own sums, bf16(bf16(gelu(bf16(g))) · bf16(u)),
// as gelu_mul_bf16 computes it from the stored projection.
template <bool GELU>
__device__ __forceinline__ void moe_seg_gemv(bf16* __restrict__ out, const bf16* __restrict__ a, const bf16* __restrict__ w,
                                             const int* __restrict__ offsets, int n, int e, int big_n, int big_k) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int inter = big_n / 2;
    // GELU: the warp's first output; otherwise its first weight row.
    const int s = blockIdx.y, j0 = GELU ? blockIdx.x * (MOE_SEG_COLS / 2) + warp * (MOE_SEG_RW / 2) : blockIdx.x * MOE_SEG_COLS + warp * MOE_SEG_RW;
    const int out_n = GELU ? inter : big_n;
    if (s >= n || j0 >= out_n) return; // warp-uniform; no block barriers below
    const int cov_lo = max(offsets[0], 0), cov_hi = min(offsets[e], n);
    if (s < cov_lo || s >= cov_hi) { // outside every segment: zero
        const int outs = GELU ? MOE_SEG_RW / 2 : MOE_SEG_RW;
        if (lane < outs && j0 + lane < out_n) out[(size_t)s * out_n + j0 + lane] = 0;
        return;
    }
    const int x = first_expert(offsets, e, s);
    const int s_lo = max(offsets[x], cov_lo), s_hi = min(offsets[x + 1], cov_hi);
    if (s != s_lo) return; // the block of the segment's first slot computes it
    const bf16* wx = w + (size_t)x * big_n * big_k;
    const int chunks = big_k / 8;
    for (int r0 = s_lo; r0 < s_hi; r0 += MOE_SEG_R) {
        const int nr = min(MOE_SEG_R, s_hi - r0);
        float acc[MOE_SEG_RW][MOE_SEG_R];
#pragma unroll
        for (int q = 0; q < MOE_SEG_RW; ++q)
#pragma unroll
            for (int r = 0; r < MOE_SEG_R; ++r) acc[q][r] = 0.0f;
        for (int c0 = 0; c0 < chunks; c0 += 32 * MOE_SEG_U) {
            uint4 wv[MOE_SEG_RW][MOE_SEG_U];
#pragma unroll
            for (int u = 0; u < MOE_SEG_U; ++u) {
                const int ch = c0 + lane + 32 * u;
#pragma unroll
                for (int q = 0; q < MOE_SEG_RW; ++q) {
                    const int row = GELU ? (q < MOE_SEG_RW / 2 ? j0 + q : inter + j0 + q - MOE_SEG_RW / 2) : j0 + q;
                    const bool live = GELU ? j0 + q % (MOE_SEG_RW / 2) < inter : row < big_n;
                    wv[q][u] = (ch < chunks && live) ? ld_stream16(wx + (size_t)row * big_k + (size_t)ch * 8) : make_uint4(0u, 0u, 0u, 0u);
                }
            }
#pragma unroll
            for (int u = 0; u < MOE_SEG_U; ++u) {
                const int ch = c0 + lane + 32 * u;
                if (ch >= chunks) break;
#pragma unroll
                for (int r = 0; r < MOE_SEG_R; ++r) {
                    if (r >= nr) break;
                    const uint4 xv = ld_nc16(a + (size_t)(r0 + r) * big_k + (size_t)ch * 8);
                    const unsigned xw[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
                    for (int q = 0; q < MOE_SEG_RW; ++q) {
                        const unsigned ww[4] = {wv[q][u].x, wv[q][u].y, wv[q][u].z, wv[q][u].w};
#pragma unroll
                        for (int i = 0; i < 4; ++i) {
                            acc[q][r] = fmaf(bf16_lo(xw[i]), bf16_lo(ww[i]), acc[q][r]);
                            acc[q][r] = fmaf(bf16_hi(xw[i]), bf16_hi(ww[i]), acc[q][r]);
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < MOE_SEG_R; ++r) {
            if (r >= nr) break;
            if (GELU) {
                // inter even and j0 even: outputs j0, j0 + 1 are one aligned word.
                float v[MOE_SEG_RW];
#pragma unroll
                for (int q = 0; q < MOE_SEG_RW; ++q) v[q] = warp_sum(acc[q][r]);
                if (lane == 0) {
                    const float g0 = round_bf16(v[0]), g1 = round_bf16(v[1]), u0 = round_bf16(v[2]), u1 = round_bf16(v[3]);
                    const float a0 = __fmul_rn(round_bf16(gelu_tanh_f32(g0)), u0), a1 = __fmul_rn(round_bf16(gelu_tanh_f32(g1)), u1);
                    *reinterpret_cast<unsigned*>(out + (size_t)(r0 + r) * inter + j0) = pack_bf16(a0, a1);
                }
            } else {
#pragma unroll
                for (int q = 0; q < MOE_SEG_RW; ++q) {
                    const float v = warp_sum(acc[q][r]);
                    if (lane == q && j0 + q < big_n) out[(size_t)(r0 + r) * big_n + j0 + q] = f32_to_bf16(v);
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(256, 3) moe_grouped_gemm_bf16_seg(bf16* __restrict__ out, const bf16* __restrict__ a,
                                                                             const bf16* __restrict__ w, const int* __restrict__ offsets,
                                                                             int n, int e, int big_n, int big_k) {
    sy_allow_next(); // the launch after this may start now (file header)
    moe_seg_gemv<false>(out, a, w, offsets, n, e, big_n, big_k);
}

// Plan: grid (ceil(inter / (MOE_SEG_COLS / 2)), n), block 256; inter even.
extern "C" __global__ void __launch_bounds__(256, 3) moe_gate_up_gelu_bf16(bf16* __restrict__ out, const bf16* __restrict__ a,
                                                                         const bf16* __restrict__ w, const int* __restrict__ offsets,
                                                                         int n, int e, int inter, int big_k) {
    sy_allow_next(); // the launch after this may start now (file header)
    moe_seg_gemv<true>(out, a, w, offsets, n, e, 2 * inter, big_k);
}

// e2m1 code (sign in bit 3) as f32: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
__device__ __forceinline__ float e2m1_f32(unsigned c) {
    const unsigned m = c & 7u;
    const unsigned bits = m >= 2u ? (((126u + (m >> 1)) << 23) | ((m & 1u) << 22)) : (m == 1u ? 0x3f000000u : 0u);
    return __uint_as_float(bits | ((c & 8u) << 28));
}

// Two codes of one byte (low nibble = even k) times the block scale, as a
// packed bf16 pair. e2m1 · e4m3 has at most 5 significant bits and an
// exponent inside bf16's range, so the f32 product is exact in bf16 and the
// truncating conversion loses nothing.
__device__ __forceinline__ unsigned deq_pair(unsigned byte, float sc) {
    const float lo = e2m1_f32(byte & 15u) * sc, hi = e2m1_f32(byte >> 4) * sc;
    return (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);
}

// Plan: grid (ceil(N/64), ceil(n/16)), block 128. N % 16 == 0, K % 16 == 0.
// Same tiling and K permutation as the bf16 kernel; weights are decoded in
// registers from the K-major NVFP4 layout: byte (k/2, n) holds k and k+1, so
// thread t's 8 k values are the 4 bytes of rows kk/2 .. kk/2+3 of column n,
// all under the one scale of block kk/16.
extern "C" __global__ void __launch_bounds__(128) moe_grouped_w4a16(bf16* __restrict__ out, const bf16* __restrict__ a,
                                                                     const u8* __restrict__ wq, const u8* __restrict__ ws,
                                                                     const float* __restrict__ scale2, const int* __restrict__ offsets,
                                                                     int n, int e, int big_n, int big_k) {
    sy_allow_next(); // the launch after this may start now (file header)
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int r0 = blockIdx.y * 16, n0 = blockIdx.x * 64 + warp * 16;
    if (n0 >= big_n || r0 >= n) return;
    const int ra = r0 + g, rb = r0 + g + 8, rend = min(r0 + 16, n);
    const int cov_lo = max(offsets[0], 0), cov_hi = min(offsets[e], n);
    for (int x = first_expert(offsets, e, r0); x < e && offsets[x] < rend; ++x) {
        const int s_lo = max(r0, offsets[x]), s_hi = min(rend, offsets[x + 1]);
        if (s_lo >= s_hi) continue;
        const bool ina = ra >= s_lo && ra < s_hi, inb = rb >= s_lo && rb < s_hi;
        const u8* qx = wq + (size_t)x * (big_k / 2) * big_n;
        const u8* sx = ws + (size_t)x * (big_k / 16) * big_n;
        float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        for (int k0 = 0; k0 < big_k; k0 += 32) {
            const int kk = k0 + 8 * t;
            const bool kv = kk < big_k;
            const uint4 z = make_uint4(0u, 0u, 0u, 0u);
            const uint4 va = (ina && kv) ? ld_nc16(a + (size_t)ra * big_k + kk) : z;
            const uint4 vb = (inb && kv) ? ld_nc16(a + (size_t)rb * big_k + kk) : z;
            unsigned wb[2][4];
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                const int col = n0 + nt * 8 + g;
                if (kv && col < big_n) {
                    const float sc = e4m3_to_f32(sx[(size_t)(kk / 16) * big_n + col]);
                    const u8* qc = qx + (size_t)(kk / 2) * big_n + col;
#pragma unroll
                    for (int i = 0; i < 4; ++i) wb[nt][i] = deq_pair(qc[(size_t)i * big_n], sc);
                } else {
#pragma unroll
                    for (int i = 0; i < 4; ++i) wb[nt][i] = 0u;
                }
            }
#pragma unroll
            for (int j = 0; j < 2; ++j) {
#pragma unroll
                for (int nt = 0; nt < 2; ++nt)
                    mma_bf16(acc[nt], u4_word(va, 2 * j), u4_word(vb, 2 * j), u4_word(va, 2 * j + 1), u4_word(vb, 2 * j + 1),
                             wb[nt][2 * j], wb[nt][2 * j + 1]);
            }
        }
        const float s2 = scale2[x];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            const int col = n0 + nt * 8 + 2 * t;
            if (col >= big_n) continue;
            if (ina) *reinterpret_cast<unsigned*>(out + (size_t)ra * big_n + col) = pack_bf16(s2 * acc[nt][0], s2 * acc[nt][1]);
            if (inb) *reinterpret_cast<unsigned*>(out + (size_t)rb * big_n + col) = pack_bf16(s2 * acc[nt][2], s2 * acc[nt][3]);
        }
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
        const int col = n0 + nt * 8 + 2 * t;
        if (col >= big_n) continue;
        if (ra < n && (ra < cov_lo || ra >= cov_hi)) *reinterpret_cast<unsigned*>(out + (size_t)ra * big_n + col) = 0u;
        if (rb < n && (rb < cov_lo || rb >= cov_hi)) *reinterpret_cast<unsigned*>(out + (size_t)rb * big_n + col) = 0u;
    }
}

// ---------------------------------------------------------------- gated GELU

// Plan: grid (rows, Y), block 256: the Y blocks of a row take its output
// pairs i = 256·y + thread, + 256·Y, ... inter even.
extern "C" __global__ void __launch_bounds__(256) gelu_mul_bf16(bf16* __restrict__ out, const bf16* __restrict__ gu, int rows, int inter) {
    const size_t r = blockIdx.x;
    if ((int)r >= rows) return;
    const unsigned* gate = reinterpret_cast<const unsigned*>(gu + r * 2 * (size_t)inter);
    const unsigned* up = reinterpret_cast<const unsigned*>(gu + r * 2 * (size_t)inter + inter);
    unsigned* o = reinterpret_cast<unsigned*>(out + r * (size_t)inter);
    for (int i = threadIdx.x + blockIdx.y * blockDim.x; i < inter / 2; i += blockDim.x * gridDim.y) {
        const unsigned gw = gate[i], uw = up[i];
        const float a = __fmul_rn(round_bf16(gelu_tanh_f32(bf16_lo(gw))), bf16_lo(uw));
        const float b = __fmul_rn(round_bf16(gelu_tanh_f32(bf16_hi(gw))), bf16_hi(uw));
        o[i] = pack_bf16(a, b);
    }
}
