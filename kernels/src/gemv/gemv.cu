// Weight-streaming GEMV for decode (m <= 16 activation rows).
//
// Plan (gemv/mod.rs), m >= 2: grid (ceil(rows / GEMV_ROWS), chunks), block 256,
// dynamic shared memory m * (padded chunk + 8) bf16. Block (bx, by) streams
// weight rows [bx * GEMV_ROWS, +GEMV_ROWS) over its K chunk `by`: it first
// stages the chunk of the m activation rows in shared memory (rows padded
// by 8 elements so the 8 row groups of a warp hit different banks), then
// each warp streams 16 weight rows (two mma n-tiles of 8) with every lane
// keeping 2 * GEMV_U 16-byte loads in flight.
//
// The dot products run on tensor cores, mma.m16n8k16 with A = the m
// activation rows (rows >= m zero) and B = 8 weight rows: at m = 16 a
// CUDA-core loop would need more FMAs per weight byte than an SM issues.
// Within a 16-k mma step the k order is permuted: lane (g, c) loads 8
// contiguous k of its row (16 bytes), which feed logical k {2c, 2c+1,
// 2c+8, 2c+9} of two successive steps, and A is read with the same
// permutation, so each dot is unchanged up to f32 summation order.
//
// One chunk: the block writes bf16 outputs. Several: f32 partials go to
// workspace [chunks, m, rows] (after a 4-float header), and the _reduce pass adds them from +0 in
// chunk order (deterministic) and applies the epilogue.

// Each entry reads only weights before sy_wait_prior(): the first weight
// loads overlap the end of the launch before it.
// dependent-launch: dense_gemv_bf16 dense_gemv_gelu_mul_bf16 dense_gemv_bf16_m1 dense_gemv_gelu_mul_bf16_m1 dense_gemv_rmsnorm_bf16 dense_gemv_rmsnorm_bf16_x2
// dependent-launch: dense_gemv_layer_out_rmsnorm_bf16 dense_gemv_layer_out_rmsnorm_bf16_x2
// dependent-launch: dense_gemv_sandwich_gelu_mul_bf16 dense_gemv_sandwich_gelu_mul_bf16_whole dense_gemv_sandwich_gelu_mul_bf16_row
// dependent-launch: dense_gemv_sandwich_gelu_mul_bf16_ws

#define GEMV_WARPS 8
#define GEMV_ROWS (GEMV_WARPS * 16)
// 16-byte loads per lane per weight row per step; a step covers GEMV_STEP k.
#define GEMV_U 4
#define GEMV_STEP (32 * GEMV_U)
#define GEMV_MAX_M 16
// Floats before the partials in the workspace: [0] holds the chunk count.
#define GEMV_WS_HEADER 4
// 16-byte weight loads per lane in flight on the m = 1 path.
#define GEMV_M1C 12
// The x2 fused-norm entries' batch (both rows): a lane's whole slice of
// Gemma's q/k/v (K = 2560: 10 chunks a row) in one batch, so every weight
// load of the launch is issued before the wait and the norm prologue.
#define GEMV_M1C_PAIR 20
// Warps of the largest m = 1 block (the sandwich's whole-row entry at 16 slots).
#define GEMV_M1_MAX_WARPS 16


// Where output column j of row i goes in dense_gemv_bf16's segmented layout.
__device__ __forceinline__ size_t gemv_out_index(int i, int j, int m, int n, int seg1, int seg2) {
    if (j < seg1) return (size_t)i * seg1 + j;
    if (j < seg2) return (size_t)m * seg1 + (size_t)i * (seg2 - seg1) + (j - seg1);
    return (size_t)m * seg2 + (size_t)i * (n - seg2) + (j - seg2);
}

__device__ __forceinline__ unsigned short gelu_mul_out(float g, float u) {
    return f32_to_bf16(__fmul_rn(round_bf16(gelu_tanh_f32(round_bf16(g))), round_bf16(u)));
}

// The block's inverse RMS from each thread's partial Σ a² (block (32, Y, Z)):
// warp_sum, then the warps' partials added in warp order; rmsnorm_bf16's
// expression (norm.cu, inv_rms) for the root. Its barrier also publishes
// whatever the block wrote to shared memory before the call.
__device__ __forceinline__ float gemv_m1_block_inv(float ss, int k, float eps, float* __restrict__ red) {
    const int nthreads = blockDim.x * blockDim.y * blockDim.z;
    const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    ss = warp_sum(ss);
    if ((t & 31) == 0) red[t >> 5] = ss;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < (nthreads >> 5); ++w) total += red[w];
    return 1.0f / sqrtf(total / (float)k + eps);
}

// The activation row's inverse RMS for dense_gemv_rmsnorm_bf16, computed by
// every block of an m = 1 launch (block (32, Y, Z), warp = (y, z)): each
// thread sums a² over the 16-byte vectors t, t + 256, ... of the row (f32,
// fmaf in element order), then gemv_m1_block_inv. The order differs from
// the norm kernel's; the contract leaves it free.
__device__ __forceinline__ float gemv_m1_inv_rms(const bf16* __restrict__ x, int k, float eps, float* __restrict__ red) {
    const int nthreads = blockDim.x * blockDim.y * blockDim.z;
    const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    float ss = 0.0f;
    for (int ch = t; ch < k / 8; ch += nthreads) {
        const uint4 v = ld_nc16(x + (size_t)ch * 8);
        const unsigned vw[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float lo = bf16_lo(vw[e]), hi = bf16_hi(vw[e]);
            ss = fmaf(lo, lo, ss);
            ss = fmaf(hi, hi, ss);
        }
    }
    return gemv_m1_block_inv(ss, k, eps, red);
}

// The previous layer's output for dense_gemv_layer_out_rmsnorm_bf16.
struct LayerOut {
    bf16* out;          // the row, written by block 0 (the next residual stream)
    const bf16* mid;    // the residual stream before the layer's output norm
    const bf16* x;      // the sub-block output that norm takes
    const bf16* w_post; // its weight (null: unscaled)
    const float* scalar; // null: 1 (the sandwich's residual add, which has no layer scalar)
};

// Every block of an m = 1 launch forms the layer's output row into `row`
// (shared memory) as layer_out_bf16 rounds it: inv1 from Σ x² (the same
// order as gemv_m1_inv_rms), t = bf16(x · inv1 · w_post), s = bf16(mid + t),
// out = bf16(s · scalar); block 0 also stores it. Returns the input norm's
// inv over the rounded row (its Σ out² in element order within a thread).
// With no scalar, out = s: the sandwich's resid_out
// (post_norm_add_pre_norm_bf16 rounds t and s the same way).
__device__ __forceinline__ float gemv_m1_layer_out(const LayerOut& lo, int k, float eps, float* __restrict__ red, bf16* __restrict__ row) {
    const int nthreads = blockDim.x * blockDim.y * blockDim.z;
    const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const float inv1 = gemv_m1_inv_rms(lo.x, k, eps, red);
    __syncthreads(); // red is reused below
    const float scalar = lo.scalar ? *lo.scalar : 1.0f;
    float ss = 0.0f;
    for (int ch = t; ch < k / 8; ch += nthreads) {
        const uint4 xv = ld_nc16(lo.x + (size_t)ch * 8), mv = ld_nc16(lo.mid + (size_t)ch * 8);
        const uint4 gv = lo.w_post ? ld_nc16(lo.w_post + (size_t)ch * 8) : make_uint4(0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u);
        const unsigned xw[4] = {xv.x, xv.y, xv.z, xv.w}, mw[4] = {mv.x, mv.y, mv.z, mv.w}, gw[4] = {gv.x, gv.y, gv.z, gv.w};
        unsigned ow[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float t0 = round_bf16(bf16_lo(xw[e]) * inv1 * bf16_lo(gw[e])), t1 = round_bf16(bf16_hi(xw[e]) * inv1 * bf16_hi(gw[e]));
            const float s0 = round_bf16(bf16_lo(mw[e]) + t0), s1 = round_bf16(bf16_hi(mw[e]) + t1);
            ow[e] = pack_bf16_rn(s0 * scalar, s1 * scalar);
            const float o0 = bf16_lo(ow[e]), o1 = bf16_hi(ow[e]);
            ss = fmaf(o0, o0, ss);
            ss = fmaf(o1, o1, ss);
        }
        const uint4 o = make_uint4(ow[0], ow[1], ow[2], ow[3]);
        *reinterpret_cast<uint4*>(row + (size_t)ch * 8) = o;
        if (blockIdx.x == 0) *reinterpret_cast<uint4*>(lo.out + (size_t)ch * 8) = o;
    }
    return gemv_m1_block_inv(ss, k, eps, red); // its barrier also publishes `row` to the block
}

// The normalised row xn = bf16(src · inv · norm_w) (rmsnorm_bf16's norm_chunk
// / vpack_rn products and rounding) into `xn` (shared memory, k elements),
// once per block instead of once per warp and chunk in the stream. `src` is
// the raw row (global) or, for LAYER_OUT, `xn` itself: thread t rewrites the
// chunks t, t + nthreads, ... that gemv_m1_layer_out's same thread formed.
// Ends with a barrier that publishes xn.
template <bool SRC_SHARED>
__device__ __forceinline__ void gemv_m1_normalise(const bf16* src, const bf16* __restrict__ norm_w, float inv, int k, bf16* xn) {
    const int nthreads = blockDim.x * blockDim.y * blockDim.z;
    const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    for (int ch = t; ch < k / 8; ch += nthreads) {
        const uint4 x = SRC_SHARED ? *reinterpret_cast<const uint4*>(xn + (size_t)ch * 8) : ld_nc16(src + (size_t)ch * 8);
        const uint4 g = ld_nc16(norm_w + (size_t)ch * 8);
        const unsigned xw[4] = {x.x, x.y, x.z, x.w}, gw[4] = {g.x, g.y, g.z, g.w};
        unsigned ow[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) ow[e] = pack_bf16_rn(bf16_lo(xw[e]) * inv * bf16_lo(gw[e]), bf16_hi(xw[e]) * inv * bf16_hi(gw[e]));
        *reinterpret_cast<uint4*>(xn + (size_t)ch * 8) = make_uint4(ow[0], ow[1], ow[2], ow[3]);
    }
    __syncthreads();
}

// An m = 1 slot's outputs from its summed slices: output j (GELU: the gate
// and up sums of column j; PAIR: outputs j and j + 1).
template <bool GELU, bool PAIR>
__device__ __forceinline__ void gemv_m1_store(bf16* __restrict__ c, int j, int n, int seg1, int seg2, float s0, float s1) {
    if (GELU) c[j] = gelu_mul_out(s0, s1);
    else c[gemv_out_index(0, j, 1, n, seg1, seg2)] = f32_to_bf16(s0);
    if (PAIR && j + 1 < n) c[gemv_out_index(0, j + 1, 1, n, seg1, seg2)] = f32_to_bf16(s1);
}

// m = 1 (the _m1 entries and dense_gemv_rmsnorm_bf16; plan: grid
// ceil(outputs / Z), block (32, Y, Z)): the Y warps of slot z own output
// j = blockIdx.x * Z + z and split its K into Y consecutive slices; GELU
// streams the gate row j and the up row n + j side by side. Each lane issues
// up to CB 16-byte weight loads (all rows) before any math, and its sums run
// over its chunks lane, lane + 32, ... of the slice in that order whatever
// CB is (a batch is the next C of them). The activation row comes through
// L1. The Y slice sums meet in shared memory and are added in slice order
// (one slice: no shared memory and no barrier, the same +0 + sum).
//
// NORM (dense_gemv_rmsnorm_bf16): the activation row is the raw input of an
// RMSNorm with weight norm_w. With the first weight loads in flight, the
// whole block reduces the row's Σ a² (gemv_m1_inv_rms: every thread takes
// part, whether or not its own slice is empty), then writes the normalised
// row bf16(a · inv · norm_w) to dynamic shared memory (gemv_m1_normalise: the
// same f32 products and RNE rounding as rmsnorm_bf16's norm_chunk /
// vpack_rn, so the values equal that kernel's output wherever inv does),
// which the stream reads.
//
// PAIR (dense_gemv_rmsnorm_bf16_x2): slot z owns the two outputs j = 2p and
// j + 1 (p = blockIdx.x * Z + z) and streams their rows side by side like
// GELU's gate and up rows, each output's sums in the same order as a slot of
// its own would add them (the same bits), so a block covers twice the
// outputs: at Gemma's q/k/v (4096 outputs, K = 2560) the grid fits one wave
// and each block's norm prologue serves 16 outputs instead of 8.
//
// LAYER_OUT (dense_gemv_layer_out_rmsnorm_bf16): the NORM form whose
// activation row is first formed from the previous layer's output norm
// (gemv_m1_layer_out) into shared memory, which the stream then reads.
// With GELU (dense_gemv_sandwich_gelu_mul_bf16) the row is the sandwich's
// resid_out (no layer scalar) and the norm its pre-norm.
template <bool GELU, bool NORM = false, bool PAIR = false, bool LAYER_OUT = false, int CB = GEMV_M1C>
__device__ void gemv_m1(const bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c, int n, int k, int seg1, int seg2,
                        const bf16* __restrict__ norm_w = nullptr, float eps = 0.0f, const LayerOut* lo = nullptr) {
    static_assert(NORM || !LAYER_OUT, "the layer output feeds the fused norm");
    extern __shared__ __align__(16) unsigned char gemv_m1_row[];
    static_assert(!(GELU && PAIR), "the pairs have the plain epilogue");
    // One entry per warp of the largest block an m = 1 plan launches.
    __shared__ float slice_sum[GEMV_M1_MAX_WARPS][2];
    __shared__ float norm_red[GEMV_M1_MAX_WARPS];
    const int lane = threadIdx.x, y = threadIdx.y, z = threadIdx.z, slices = blockDim.y;
    const int j = (PAIR ? 2 : 1) * (blockIdx.x * blockDim.z + z);
    constexpr int R = GELU || PAIR ? 2 : 1;
    const bf16* wr[R];
    wr[0] = b + (size_t)min(j, n - 1) * k;
    if (GELU) wr[R - 1] = b + (size_t)(n + min(j, n - 1)) * k;
    if (PAIR) wr[R - 1] = b + (size_t)min(j + 1, n - 1) * k;
    const int chunks = k / 8, per = (chunks + slices - 1) / slices;
    const int ch0 = y * per, ch1 = j < n ? min(chunks, ch0 + per) : 0;
    float acc[R][4];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[r][e] = 0.0f;
    constexpr int C = CB / R;
    // The lane's loads of the C-chunk batch at c0 (zeros past its slice).
    // `early`: volatile loads, kept in front of the wait and the norm
    // prologue that they are meant to overlap (not sunk to their use).
    auto load = [&](uint4 (&w)[R][C], int c0, bool early) {
#pragma unroll
        for (int u = 0; u < C; ++u) {
            const int ch = c0 + lane + 32 * u;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const bf16* p = wr[r] + (size_t)ch * 8;
                w[r][u] = ch >= ch1 ? make_uint4(0u, 0u, 0u, 0u) : early ? ld_stream16_v(p) : ld_stream16(p);
            }
        }
    };
    // The batch's multiply-adds against the activation chunks (NORM: the
    // normalised row in shared memory).
    auto consume = [&](const uint4 (&w)[R][C], int c0) {
#pragma unroll
        for (int u = 0; u < C; ++u) {
            const int ch = c0 + lane + 32 * u;
            if (ch >= ch1) break;
            const uint4 x = NORM ? *reinterpret_cast<const uint4*>(gemv_m1_row + (size_t)ch * 16) : ld_nc16(a + (size_t)ch * 8);
            const unsigned xw[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const unsigned ww[4] = {w[r][u].x, w[r][u].y, w[r][u].z, w[r][u].w};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    acc[r][e] = fmaf(bf16_lo(xw[e]), bf16_lo(ww[e]), acc[r][e]);
                    acc[r][e] = fmaf(bf16_hi(xw[e]), bf16_hi(ww[e]), acc[r][e]);
                }
            }
        }
    };
    sy_allow_next();
    if constexpr (NORM) {
        // Every thread reaches the norm's barrier, empty slice or not.
        uint4 w[R][C];
        load(w, ch0, true); // weights only: in flight before the wait and the norm
        sy_wait_prior(); // the activation row is the previous launch's output
        bf16* xn = reinterpret_cast<bf16*>(gemv_m1_row);
        if constexpr (LAYER_OUT) gemv_m1_normalise<true>(xn, norm_w, gemv_m1_layer_out(*lo, k, eps, norm_red, xn), k, xn);
        else gemv_m1_normalise<false>(a, norm_w, gemv_m1_inv_rms(a, k, eps, norm_red), k, xn);
        for (int c0 = ch0; c0 < ch1; c0 += 32 * C) {
            if (c0 != ch0) load(w, c0, false);
            consume(w, c0);
        }
    } else {
        bool waited = false;
        for (int c0 = ch0; c0 < ch1; c0 += 32 * C) {
            uint4 w[R][C];
            load(w, c0, false);
            if (!waited) {
                sy_wait_prior(); // the activation row is the previous launch's output
                waited = true;
            }
            consume(w, c0);
        }
        if (!waited) sy_wait_prior(); // an empty slice still orders its output write
    }
    const float p0 = warp_sum((acc[0][0] + acc[0][1]) + (acc[0][2] + acc[0][3]));
    const float p1 = R == 2 ? warp_sum((acc[R - 1][0] + acc[R - 1][1]) + (acc[R - 1][2] + acc[R - 1][3])) : 0.0f;
    if (slices == 1) { // the warp holds its outputs' whole sums (uniform across the block)
        if (lane != 0 || j >= n) return;
        gemv_m1_store<GELU, PAIR>(c, j, n, seg1, seg2, __fadd_rn(0.0f, p0), __fadd_rn(0.0f, p1));
        return;
    }
    const int wid = z * slices + y;
    if (lane == 0) {
        slice_sum[wid][0] = p0;
        slice_sum[wid][1] = p1;
    }
    __syncthreads();
    if (lane != 0 || y != 0 || j >= n) return;
    float s0 = 0.0f, s1 = 0.0f;
    for (int t = 0; t < slices; ++t) {
        s0 = __fadd_rn(s0, slice_sum[z * slices + t][0]);
        s1 = __fadd_rn(s1, slice_sum[z * slices + t][1]);
    }
    gemv_m1_store<GELU, PAIR>(c, j, n, seg1, seg2, s0, s1);
}

// GELU = false: weight rows are output columns; the warp's two n-tiles are
// rows r0..r0+7 and r0+8..r0+15. GELU = true: the warp owns output columns
// j0..j0+7 of n; its n-tiles are the gate rows j0.. and the up rows n + j0..,
// so each lane holds the gate and up sums of the same outputs.
template <bool GELU>
__device__ void gemv(const bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c, int m, int n, int k, int seg1, int seg2,
                     float* __restrict__ ws) {
    extern __shared__ __align__(16) unsigned char gemv_smem[];
    bf16* xs = reinterpret_cast<bf16*>(gemv_smem);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int rows = GELU ? 2 * n : n;
    const int chunks = gridDim.y;
    const int chunk = (((k + chunks - 1) / chunks) + 31) / 32 * 32;
    const int k0 = blockIdx.y * chunk, k1 = min(k, k0 + chunk);
    const int padded = (chunk + GEMV_STEP - 1) / GEMV_STEP * GEMV_STEP;
    const int lds = padded + 8;

    // This warp's two n-tiles (weight row of lane group g in each).
    int row[2];
    bool ok[2];
    int out0; // first output column (GELU) or weight row (plain) of the warp
    if (GELU) {
        out0 = (blockIdx.x * GEMV_ROWS) / 2 + warp * 8;
        row[0] = out0 + g;
        row[1] = n + out0 + g;
        ok[0] = ok[1] = out0 + g < n;
    } else {
        out0 = blockIdx.x * GEMV_ROWS + warp * 16;
        row[0] = out0 + g;
        row[1] = out0 + 8 + g;
        ok[0] = row[0] < rows;
        ok[1] = row[1] < rows;
    }
    const bf16* wr[2] = {b + (size_t)(ok[0] ? row[0] : 0) * k, b + (size_t)(ok[1] ? row[1] : 0) * k};
    float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    const bool hv0 = g < m, hv1 = g + 8 < m;
    const bf16* x0 = xs + (hv0 ? g : 0) * lds;
    const bf16* x1 = xs + (hv1 ? g + 8 : 0) * lds;

    // Weight loads for the first step go out before the activations are
    // staged (and, launched as a dependent, before the previous launch
    // has finished), so the latencies overlap.
    uint4 w[2][GEMV_U];
    auto load_step = [&](int ks) {
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
            for (int u = 0; u < GEMV_U; ++u) {
                const int kk = ks + u * 32 + q * 8;
                w[t][u] = ok[t] && kk < k1 ? ld_stream16(wr[t] + kk) : make_uint4(0u, 0u, 0u, 0u);
            }
    };
    sy_allow_next();
    load_step(k0);
    sy_wait_prior(); // the activation rows are the previous launch's output
    // Stage a[0..m, k0..k0+padded) (zero past k1) in shared memory with
    // cp.async (L2 only; 0 source bytes write zeros): every copy of the
    // thread is in flight at once, where a load-then-store loop waited one
    // L2 round trip per 16 bytes (7 in a row at chunks of 896 k, 20 for an
    // unsplit K of 2560).
    for (int e = threadIdx.x; e < m * (padded / 8); e += blockDim.x) {
        const int r = e / (padded / 8), kk = (e % (padded / 8)) * 8;
        const bool in = k0 + kk < k1;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(xs + r * lds + kk)),
                     "l"(in ? a + (size_t)r * k + k0 + kk : a), "r"(in ? 16u : 0u)
                     : "memory");
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();
    for (int ks = k0; ks < k1; ks += GEMV_STEP) {
        uint4 cur[2][GEMV_U];
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
            for (int u = 0; u < GEMV_U; ++u) cur[t][u] = w[t][u];
        if (ks + GEMV_STEP < k1) load_step(ks + GEMV_STEP);
#pragma unroll
        for (int u = 0; u < GEMV_U; ++u) {
            const int kk = ks - k0 + u * 32 + q * 8;
            const uint4 z = make_uint4(0u, 0u, 0u, 0u);
            const uint4 ra = hv0 ? *reinterpret_cast<const uint4*>(x0 + kk) : z;
            const uint4 rb = hv1 ? *reinterpret_cast<const uint4*>(x1 + kk) : z;
#pragma unroll
            for (int t = 0; t < 2; ++t) {
                mma16816_bf16_f32(acc[t], ra.x, rb.x, ra.y, rb.y, cur[t][u].x, cur[t][u].y);
                mma16816_bf16_f32(acc[t], ra.z, rb.z, ra.w, rb.w, cur[t][u].z, cur[t][u].w);
            }
        }
    }

    // acc[t][e]: activation row g (e < 2) or g + 8, weight row 2q + (e & 1) of n-tile t.
    if (chunks == 1) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int i = g + (e >= 2 ? 8 : 0);
            if (i >= m) continue;
            if (GELU) {
                const int j = out0 + 2 * q + (e & 1);
                if (j < n) c[(size_t)i * n + j] = gelu_mul_out(acc[0][e], acc[1][e]);
            } else {
#pragma unroll
                for (int t = 0; t < 2; ++t) {
                    const int j = out0 + 8 * t + 2 * q + (e & 1);
                    if (j < n) c[gemv_out_index(i, j, m, n, seg1, seg2)] = f32_to_bf16(acc[t][e]);
                }
            }
        }
        return;
    }
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *reinterpret_cast<int*>(ws) = chunks;
    float* part = ws + GEMV_WS_HEADER + (size_t)blockIdx.y * m * rows;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const int i = g + (e >= 2 ? 8 : 0);
        if (i >= m) continue;
#pragma unroll
        for (int t = 0; t < 2; ++t) {
            // The weight row (output column, or gate / up row) this sum belongs to.
            const int col = out0 + 2 * q + (e & 1);
            const int wrow = GELU ? (t ? n + col : col) : col + 8 * t;
            if ((GELU ? col < n : wrow < rows)) part[(size_t)i * rows + wrow] = acc[t][e];
        }
    }
}

extern "C" __global__ void __launch_bounds__(256, 2) dense_gemv_bf16(const bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c,
                                                                  unsigned m, unsigned n, unsigned k, unsigned seg1, unsigned seg2,
                                                                  float* __restrict__ workspace) {
    gemv<false>(a, b, c, min((int)m, GEMV_MAX_M), (int)n, (int)k, (int)seg1, (int)seg2, workspace);
}

extern "C" __global__ void __launch_bounds__(256, 2) dense_gemv_gelu_mul_bf16(const bf16* __restrict__ a, const bf16* __restrict__ b,
                                                                           bf16* __restrict__ c, unsigned m, unsigned n, unsigned k,
                                                                           float* __restrict__ workspace) {
    gemv<true>(a, b, c, min((int)m, GEMV_MAX_M), (int)n, (int)k, 0, 0, workspace);
}

extern "C" __global__ void __launch_bounds__(256) dense_gemv_bf16_m1(const bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c,
                                                                     unsigned m, unsigned n, unsigned k, unsigned seg1, unsigned seg2,
                                                                     float* __restrict__ workspace) {
    gemv_m1<false>(a, b, c, (int)n, (int)k, (int)seg1, (int)seg2);
}

// The fused norm with two outputs a slot (PAIR above), two blocks an SM
// (so no spills), the plan's choice where it halves the blocks.
extern "C" __global__ void __launch_bounds__(256, 2) dense_gemv_rmsnorm_bf16_x2(const bf16* __restrict__ a, const bf16* __restrict__ b,
                                                                             bf16* __restrict__ c, unsigned m, unsigned n, unsigned k,
                                                                             unsigned seg1, unsigned seg2, const bf16* __restrict__ norm_w,
                                                                             float eps, float* __restrict__ workspace) {
    gemv_m1<false, true, true, false, GEMV_M1C_PAIR>(a, b, c, (int)n, (int)k, (int)seg1, (int)seg2, norm_w, eps);
}

// The previous layer's output norm, then the fused input norm and the GEMV
// (m = 1; dynamic shared memory holds the k-element row): the slices form
// and the x2 form, as for dense_gemv_rmsnorm_bf16.
extern "C" __global__ void __launch_bounds__(256, 3) dense_gemv_layer_out_rmsnorm_bf16(
    bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c, unsigned m, unsigned n, unsigned k, unsigned seg1, unsigned seg2,
    const bf16* __restrict__ norm_w, float eps, const bf16* __restrict__ mid, const bf16* __restrict__ x, const bf16* __restrict__ w_post,
    const float* __restrict__ layer_scalar, float* __restrict__ workspace) {
    const LayerOut lo{a, mid, x, w_post, layer_scalar};
    gemv_m1<false, true, false, true>(a, b, c, (int)n, (int)k, (int)seg1, (int)seg2, norm_w, eps, &lo);
}

extern "C" __global__ void __launch_bounds__(256, 2) dense_gemv_layer_out_rmsnorm_bf16_x2(
    bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c, unsigned m, unsigned n, unsigned k, unsigned seg1, unsigned seg2,
    const bf16* __restrict__ norm_w, float eps, const bf16* __restrict__ mid, const bf16* __restrict__ x, const bf16* __restrict__ w_post,
    const float* __restrict__ layer_scalar, float* __restrict__ workspace) {
    const LayerOut lo{a, mid, x, w_post, layer_scalar};
    gemv_m1<false, true, true, true, GEMV_M1C_PAIR>(a, b, c, (int)n, (int)k, (int)seg1, (int)seg2, norm_w, eps, &lo);
}

// The sandwich between attention and MLP (post_norm_add_pre_norm_bf16 of
// one row: `a` = resid_out, block 0 stores it), then the gated GEMV over its
// normed row, which stays in shared memory. m = 1 only. The slices form
// (the gated _m1 geometry) and the whole-row form: one warp a gate/up row
// pair over all of K, every weight load of the lane issued before the wait
// and the prologue (K <= 3072), up to 16 warps a block so that the prologue
// (every block reads and reduces the row twice) serves more outputs.
extern "C" __global__ void __launch_bounds__(256, 3) dense_gemv_sandwich_gelu_mul_bf16(
    bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c, unsigned m, unsigned n, unsigned k, const bf16* __restrict__ norm_w,
    float eps, const bf16* __restrict__ mid, const bf16* __restrict__ x, const bf16* __restrict__ w_post, float* __restrict__ workspace) {
    const LayerOut lo{a, mid, x, w_post, nullptr};
    gemv_m1<true, true, false, true>(a, b, c, (int)n, (int)k, 0, 0, norm_w, eps, &lo);
}

extern "C" __global__ void __launch_bounds__(512, 1) dense_gemv_sandwich_gelu_mul_bf16_whole(
    bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c, unsigned m, unsigned n, unsigned k, const bf16* __restrict__ norm_w,
    float eps, const bf16* __restrict__ mid, const bf16* __restrict__ x, const bf16* __restrict__ w_post, float* __restrict__ workspace) {
    const LayerOut lo{a, mid, x, w_post, nullptr};
    gemv_m1<true, true, false, true, GEMV_M1C_PAIR>(a, b, c, (int)n, (int)k, 0, 0, norm_w, eps, &lo);
}

// Where the whole-row grid is past one wave, two passes (the cost of the
// two launches the kernel replaces, which measured faster there): _row
// (one block: forms `a` as the slices form's prologue does and copies the
// normed row into the workspace), then _ws, the gated _m1 GEMV over that row.
extern "C" __global__ void __launch_bounds__(256) dense_gemv_sandwich_gelu_mul_bf16_row(
    bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c, unsigned m, unsigned n, unsigned k, const bf16* __restrict__ norm_w,
    float eps, const bf16* __restrict__ mid, const bf16* __restrict__ x, const bf16* __restrict__ w_post, float* __restrict__ workspace) {
    extern __shared__ __align__(16) unsigned char gemv_m1_row[];
    __shared__ float norm_red[GEMV_M1_MAX_WARPS];
    sy_allow_next();
    sy_wait_prior(); // x is the previous launch's output
    const LayerOut lo{a, mid, x, w_post, nullptr};
    bf16* xn = reinterpret_cast<bf16*>(gemv_m1_row);
    gemv_m1_normalise<true>(xn, norm_w, gemv_m1_layer_out(lo, (int)k, eps, norm_red, xn), (int)k, xn);
    for (unsigned ch = threadIdx.x; ch < k / 8; ch += blockDim.x)
        reinterpret_cast<uint4*>(workspace)[ch] = *reinterpret_cast<const uint4*>(xn + (size_t)ch * 8);
}

extern "C" __global__ void __launch_bounds__(256) dense_gemv_sandwich_gelu_mul_bf16_ws(
    bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c, unsigned m, unsigned n, unsigned k, const bf16* __restrict__ norm_w,
    float eps, const bf16* __restrict__ mid, const bf16* __restrict__ x, const bf16* __restrict__ w_post, float* __restrict__ workspace) {
    gemv_m1<true>(reinterpret_cast<const bf16*>(workspace), b, c, (int)n, (int)k, 0, 0);
}

// The fused input norm (m = 1 only; the plan refuses other m): the
// _m1 geometry with the row's RMSNorm in the prologue. Bounded to three
// blocks an SM, the residency of dense_gemv_bf16_m1 (78 registers): left
// free, ptxas takes 94 registers (two blocks); at the cap of 80 it spills
// one word (4 bytes stored, 8 loaded, per thread). Not yet timed either way.
extern "C" __global__ void __launch_bounds__(256, 3) dense_gemv_rmsnorm_bf16(const bf16* __restrict__ a, const bf16* __restrict__ b,
                                                                          bf16* __restrict__ c, unsigned m, unsigned n, unsigned k,
                                                                          unsigned seg1, unsigned seg2, const bf16* __restrict__ norm_w,
                                                                          float eps, float* __restrict__ workspace) {
    gemv_m1<false, true>(a, b, c, (int)n, (int)k, (int)seg1, (int)seg2, norm_w, eps);
}

extern "C" __global__ void __launch_bounds__(256) dense_gemv_gelu_mul_bf16_m1(const bf16* __restrict__ a, const bf16* __restrict__ b,
                                                                              bf16* __restrict__ c, unsigned m, unsigned n, unsigned k,
                                                                              float* __restrict__ workspace) {
    gemv_m1<true>(a, b, c, (int)n, (int)k, 0, 0);
}

// The split-K reduce passes wait before reading the partials; launched as
// dependents, their launch and block dispatch overlap the main pass's tail.
// dependent-launch: dense_gemv_bf16_reduce dense_gemv_gelu_mul_bf16_reduce

// Second pass of a K-split launch: one thread per output, the partials added
// from +0 in chunk order. DEP: launched as a programmatic dependent of the
// main pass (the plain entries, _serial, are the plan's measurement
// override): it lets the launch after it start at once and waits for the
// main pass before reading the partials.
template <bool GELU, bool DEP>
__device__ void gemv_reduce(bf16* __restrict__ c, int m, int n, int seg1, int seg2, const float* __restrict__ workspace) {
    if (DEP) {
        sy_allow_next();
        sy_wait_prior(); // the partials and the header are the main pass's output
    }
    const int chunks = *reinterpret_cast<const int*>(workspace);
    const float* parts = workspace + GEMV_WS_HEADER;
    const int rows = GELU ? 2 * n : n;
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (size_t)m * n) return;
    const int i = (int)(e / n), j = (int)(e % n);
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll 8
    for (int y = 0; y < chunks; ++y) {
        const float* p = parts + ((size_t)y * m + i) * rows;
        s0 = __fadd_rn(s0, p[j]);
        if (GELU) s1 = __fadd_rn(s1, p[n + j]);
    }
    if (GELU) c[e] = gelu_mul_out(s0, s1);
    else c[gemv_out_index(i, j, m, n, seg1, seg2)] = f32_to_bf16(s0);
}

extern "C" __global__ void __launch_bounds__(256) dense_gemv_bf16_reduce(const bf16* __restrict__ a, const bf16* __restrict__ b,
                                                                         bf16* __restrict__ c, unsigned m, unsigned n, unsigned k,
                                                                         unsigned seg1, unsigned seg2, const float* __restrict__ workspace) {
    gemv_reduce<false, true>(c, min((int)m, GEMV_MAX_M), (int)n, (int)seg1, (int)seg2, workspace);
}

extern "C" __global__ void __launch_bounds__(256) dense_gemv_gelu_mul_bf16_reduce(const bf16* __restrict__ a, const bf16* __restrict__ b,
                                                                                  bf16* __restrict__ c, unsigned m, unsigned n, unsigned k,
                                                                                  const float* __restrict__ workspace) {
    gemv_reduce<true, true>(c, min((int)m, GEMV_MAX_M), (int)n, 0, 0, workspace);
}

extern "C" __global__ void __launch_bounds__(256) dense_gemv_bf16_reduce_serial(const bf16* __restrict__ a, const bf16* __restrict__ b,
                                                                                bf16* __restrict__ c, unsigned m, unsigned n, unsigned k,
                                                                                unsigned seg1, unsigned seg2,
                                                                                const float* __restrict__ workspace) {
    gemv_reduce<false, false>(c, min((int)m, GEMV_MAX_M), (int)n, (int)seg1, (int)seg2, workspace);
}

extern "C" __global__ void __launch_bounds__(256) dense_gemv_gelu_mul_bf16_reduce_serial(const bf16* __restrict__ a,
                                                                                         const bf16* __restrict__ b, bf16* __restrict__ c,
                                                                                         unsigned m, unsigned n, unsigned k,
                                                                                         const float* __restrict__ workspace) {
    gemv_reduce<true, false>(c, min((int)m, GEMV_MAX_M), (int)n, 0, 0, workspace);
}

// ---------------------------------------------------------------- qkv_prep in the epilogue

// dense_gemv_layer_out_rmsnorm_qkv_prep_bf16 (m = 1; gemv/layer_out_qkv.rs):
// dense_gemv_layer_out_rmsnorm_bf16's entries, unchanged up to the raw q|k|v
// in `c`, then qkv_prep_bf16 of that one row in the same launch. The heads
// of `c` (m = 1: element j of c is output j, so head h is c[h·hd, +hd):
// the nh query heads, the nkv K heads, then the nkv V heads unless V = K,
// n == seg2) are prepared by whichever block finishes each head last: a
// per-head arrival counter that every block adds its outputs in that head
// to (one atomicAdd per head it touched), the block that brings it to hd
// reading the head back through L2 after the others' fences. That was to
// save the qkv_prep launch (about 2.3 us a layer between the GEMV and the
// attention at batch 1) for a read of 0.5-1 KiB from L2 by one warp a head;
// on the H200 it cost about 1.7 us a layer more instead (the fences,
// arrivals and read-back at the end of the stream; layer_out_qkv.rs has the
// figures), so the graph runs it only on request.
//
// dependent-launch: dense_gemv_layer_out_rmsnorm_qkv_prep_bf16 dense_gemv_layer_out_rmsnorm_qkv_prep_bf16_x2

// Head vectors a launch may have (nh + nkv, plus nkv unless V = K); the plan
// refuses more. Zero at module load; the block that completes a head puts
// its counter back to zero, so every launch finds them zero (launches on the
// backend's one stream never overlap, and a dependent launch touches them
// only after sy_wait_prior()).
#define QKV_EPI_MAX_HEADS 1024
__device__ unsigned qkv_epi_arrivals[QKV_EPI_MAX_HEADS];

// Elements of a half head a lane holds: hd <= 512, so a half is at most 256
// elements, 8 for each of 32 lanes.
#define QKV_EPI_PER_LANE 8

// qkv_prep's side of the launch.
struct QkvEpi {
    bf16 *q_out, *k_pool, *v_pool;
    const bf16 *q_norm, *k_norm;
    const float* cos_sin;
    const int *pos, *slot;
    int nh, nkv, hd, max_pos, num_slots;
};

// A bf16 of c written by another block of this launch: ld.global.cg (L2,
// not a stale L1 line), volatile so it stays after the acquire fence.
__device__ __forceinline__ float qkv_epi_ld_cg(const bf16* p) {
    unsigned short v;
    asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(v) : "l"(p) : "memory");
    return bf16_to_f32(v);
}

// qkv_prep_bf16 of head h of the row in `c` by one warp: element i of the
// first half and its rotate-half partner i + hd/2 in the same lane (i =
// lane, lane + 32, ...), Σ x² by warp_sum, then rope_kv.cu's emit
// arithmetic: bf16(x · inv · w), then the unfused rotation, each output
// rounded once. V = K (kv_too): a K head also stores its V (no weight, no
// rotation) from the same loads.
__device__ void qkv_epi_head(const bf16* c, int h, bool kv_too, float eps, const QkvEpi& e) {
    const int lane = threadIdx.x & 31, hd = e.hd, half = hd >> 1;
    const int p = e.pos[0];
    const bool bad = p < 0 || p >= e.max_pos;
    const int sl = e.slot[0];
    const bool slot_ok = sl >= 0 && sl < e.num_slots;
    bf16* dst;
    bf16* dst_v = nullptr;
    const bf16* w;
    bool rot = true; // q and K rotate, V does not
    if (h < e.nh) {
        dst = e.q_out + (size_t)h * hd;
        w = e.q_norm;
    } else {
        if (!slot_ok) return; // padding: no KV write
        const bool is_v = h >= e.nh + e.nkv;
        const int j = h - e.nh - (is_v ? e.nkv : 0);
        const size_t at = ((size_t)sl * e.nkv + j) * hd;
        dst = (is_v ? e.v_pool : e.k_pool) + at;
        w = is_v ? nullptr : e.k_norm;
        rot = !is_v;
        if (kv_too) dst_v = e.v_pool + at;
    }
    const bf16* src = c + (size_t)h * hd;
    float xl[QKV_EPI_PER_LANE], xh[QKV_EPI_PER_LANE];
    float ss = 0.0f;
#pragma unroll
    for (int u = 0; u < QKV_EPI_PER_LANE; ++u) {
        const int i = lane + 32 * u;
        xl[u] = i < half ? qkv_epi_ld_cg(src + i) : 0.0f;
        xh[u] = i < half ? qkv_epi_ld_cg(src + half + i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < QKV_EPI_PER_LANE; ++u) {
        ss = fmaf(xl[u], xl[u], ss);
        ss = fmaf(xh[u], xh[u], ss);
    }
    ss = warp_sum(ss);
    const float inv = 1.0f / sqrtf(ss / (float)hd + eps);
    const float* cs = e.cos_sin + (size_t)(bad ? 0 : p) * hd;
#pragma unroll
    for (int u = 0; u < QKV_EPI_PER_LANE; ++u) {
        const int i = lane + 32 * u;
        if (i >= half) break;
        const float wl = w ? bf16_to_f32(w[i]) : 1.0f, wh = w ? bf16_to_f32(w[half + i]) : 1.0f;
        const float a = round_bf16_rn(xl[u] * inv * wl), b = round_bf16_rn(xh[u] * inv * wh);
        float ol = a, oh = b;
        if (rot) {
            const float co = cs[2 * i], si = cs[2 * i + 1];
            ol = __fsub_rn(__fmul_rn(a, co), __fmul_rn(b, si));
            oh = __fadd_rn(__fmul_rn(b, co), __fmul_rn(a, si));
        }
        dst[i] = bad ? SY_NAN_BF16 : f32_to_bf16(ol);
        dst[half + i] = bad ? SY_NAN_BF16 : f32_to_bf16(oh);
        if (dst_v) {
            const float va = round_bf16_rn(xl[u] * inv), vb = round_bf16_rn(xh[u] * inv);
            dst_v[i] = bad ? SY_NAN_BF16 : f32_to_bf16(va);
            dst_v[half + i] = bad ? SY_NAN_BF16 : f32_to_bf16(vb);
        }
    }
}

// After gemv_m1 (every thread of the block, once it has returned from it):
// the block's outputs [j0, j1) arrive at their heads' counters, and the
// block prepares each head it completed, a warp a head.
template <bool PAIR>
__device__ __forceinline__ void qkv_epilogue(const bf16* c, int n, int seg2, float eps, const QkvEpi& e) {
    __shared__ int epi_done[GEMV_WARPS];
    __shared__ int epi_count;
    const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const int per = (PAIR ? 2 : 1) * (int)blockDim.z;
    const int j0 = (int)blockIdx.x * per, j1 = min(j0 + per, n);
    // Release: lane 0 of a warp is the only thread gemv_m1 lets store an
    // output; its fence orders those stores before the barrier, which
    // orders them before thread 0's arrivals below.
    if ((threadIdx.x & 31) == 0) __threadfence();
    __syncthreads();
    if (t == 0) {
        int done = 0;
        for (int h = j0 / e.hd; h * e.hd < j1 && h < QKV_EPI_MAX_HEADS; ++h) {
            const int mine = min(j1, (h + 1) * e.hd) - max(j0, h * e.hd);
            const unsigned before = atomicAdd(&qkv_epi_arrivals[h], (unsigned)mine);
            if (before + (unsigned)mine == (unsigned)e.hd) {
                qkv_epi_arrivals[h] = 0u; // every block of this launch has arrived at h
                if (done < GEMV_WARPS) epi_done[done++] = h;
            }
        }
        epi_count = done;
    }
    __syncthreads();
    const int warp = t >> 5;
    if (warp >= epi_count) return;
    // Acquire: the reads of the other blocks' outputs come after the count
    // that showed them written.
    __threadfence();
    qkv_epi_head(c, epi_done[warp], n == seg2, eps, e);
}

// The slices geometry (K past the x2 form's reach), as dense_gemv_layer_out_rmsnorm_bf16.
extern "C" __global__ void __launch_bounds__(256, 3) dense_gemv_layer_out_rmsnorm_qkv_prep_bf16(
    bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c, unsigned m, unsigned n, unsigned k, unsigned seg1, unsigned seg2,
    const bf16* __restrict__ norm_w, float eps, const bf16* __restrict__ mid, const bf16* __restrict__ x, const bf16* __restrict__ w_post,
    const float* __restrict__ layer_scalar, bf16* q_out, bf16* k_pool, bf16* v_pool, const bf16* q_norm, const bf16* k_norm, const float* cos_sin,
    const int* pos, const int* slot, int nh, int nkv, int hd, int max_pos, int num_slots, float* __restrict__ workspace) {
    const LayerOut lo{a, mid, x, w_post, layer_scalar};
    gemv_m1<false, true, false, true>(a, b, c, (int)n, (int)k, (int)seg1, (int)seg2, norm_w, eps, &lo);
    const QkvEpi e{q_out, k_pool, v_pool, q_norm, k_norm, cos_sin, pos, slot, nh, nkv, hd, max_pos, num_slots};
    qkv_epilogue<false>(c, (int)n, (int)seg2, eps, e);
}

// The x2 geometry (Gemma's q/k/v at hidden 2560), as dense_gemv_layer_out_rmsnorm_bf16_x2.
extern "C" __global__ void __launch_bounds__(256, 2) dense_gemv_layer_out_rmsnorm_qkv_prep_bf16_x2(
    bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c, unsigned m, unsigned n, unsigned k, unsigned seg1, unsigned seg2,
    const bf16* __restrict__ norm_w, float eps, const bf16* __restrict__ mid, const bf16* __restrict__ x, const bf16* __restrict__ w_post,
    const float* __restrict__ layer_scalar, bf16* q_out, bf16* k_pool, bf16* v_pool, const bf16* q_norm, const bf16* k_norm, const float* cos_sin,
    const int* pos, const int* slot, int nh, int nkv, int hd, int max_pos, int num_slots, float* __restrict__ workspace) {
    const LayerOut lo{a, mid, x, w_post, layer_scalar};
    gemv_m1<false, true, true, true, GEMV_M1C_PAIR>(a, b, c, (int)n, (int)k, (int)seg1, (int)seg2, norm_w, eps, &lo);
    const QkvEpi e{q_out, k_pool, v_pool, q_norm, k_norm, cos_sin, pos, slot, nh, nkv, hd, max_pos, num_slots};
    qkv_epilogue<true>(c, (int)n, (int)seg2, eps, e);
}
