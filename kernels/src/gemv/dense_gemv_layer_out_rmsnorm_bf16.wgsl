// dense_gemv_layer_out_rmsnorm_bf16: a = layer_out_bf16(mid, x; w_post,
// layer_scalar, eps) for one row, then c = dense_gemv_rmsnorm_bf16(a, b;
// norm_w, eps). Where the fused-norm GEMV's plan is its m = 1 pass, one
// dispatch: dense_gemv_layer_out_rmsnorm_bf16_m1, each workgroup forming
// the row itself (workgroup 0 also stores it to `a`), then its normalised
// row in workgroup memory, then the m = 1 stream; the same arithmetic in
// the same order as the two dispatches, so the same bits. Otherwise two
// dispatches: this file's own entry (one workgroup of 256,
// layer_out_row.wgsli, forms the row into `a`), then the fused-norm GEMV's
// own plan (rmsnorm_gemv.wgsli's entries, reading the row back from `a`).
struct Params {
    a: u32, b: u32, c: u32, m: u32, n: u32, k: u32, seg1: u32, seg2: u32, norm_w: u32, eps: f32,
    mid: u32, x: u32, w_post: u32, layer_scalar: u32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_a: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> d_b: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_c: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> d_norm_w: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read_write> d_mid: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read_write> d_x: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read_write> d_w_post: array<vec4<u32>>;
// Read one word; a scalar view (vec4 indexing could run past a 4-byte binding).
@group(0) @binding(8) var<storage, read_write> d_layer_scalar: array<u32>;
@group(0) @binding(9) var<storage, read_write> d_workspace: array<u32>;

//! include "gemv/workspace_words.wgsli"

//! include "gemv/gemv_segmented.wgsli"
//! include "gemv/rmsnorm_gemv.wgsli"
//! include "gemv/layer_out_row.wgsli"

@compute @workgroup_size(256)
fn dense_gemv_layer_out_rmsnorm_bf16(@builtin(local_invocation_index) lid: u32) {
    layer_out_row(lid);
}
