// dense_gemv_gelu_mul_bf16: c[i, j] = bf16(bf16(gelu_tanh(bf16(g))) · bf16(u))
// with g, u the f32 sums of activation row i against gate row j and up row
// n + j, for m ≤ 16. The weight stream and the reduction are
// gemv_common.wgsli's; workgroup (g, s) owns output columns [64 g, +64):
// its local rows 0..63 are those gate rows and 64..127 the matching up rows
// (so each weight row is still read once), over K chunk s,
// [s · x0, (s + 1) · x0) ∩ [0, k).
//
// One chunk (x1 = 1): dense_gemv_gelu_mul_bf16 writes bf16 outputs, an
// invocation per pair of adjacent columns. Several:
// dense_gemv_gelu_mul_bf16_partial writes the f32 sums to workspace
// [chunks, m, 2n] (gate sums at column j, up sums at n + j), and
// dense_gemv_gelu_mul_bf16_reduce (an invocation per output word, x0 =
// chunks) adds them from the first chunk in order and applies the epilogue.
// m = 1 with enough rows: dense_gemv_gelu_mul_bf16_m1 (gemv_m1.wgsli), one
// pass; workgroup g owns columns [4 g, +4), slots 0..3 their gate rows and
// 4..7 their up rows.
struct Params {
    a: u32, b: u32, c: u32, m: u32, n: u32, k: u32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_a: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> d_b: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_c: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> d_workspace: array<u32>;

//! include "gemv/gemv_m1.wgsli"

// Vector c of activation row i, as stored.
fn activation(i: u32, c: u32) -> vec4<u32> {
    return d_a[p.a / 4u + i * (p.k / 8u) + c];
}

fn m1_activation(c: u32) -> vec4<u32> {
    return activation(0u, c);
}

fn ws_load(i: u32) -> u32 {
    return d_workspace[i];
}

fn ws_store(i: u32, v: u32) {
    d_workspace[i] = v;
}

//! include "gemv/gelu_gemv.wgsli"
