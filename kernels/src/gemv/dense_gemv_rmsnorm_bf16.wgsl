// dense_gemv_rmsnorm_bf16: c = dense_gemv_bf16(xn, b) for one activation
// row (m = 1, the M override), xn = rmsnorm_bf16(a; norm_w, eps). Every
// workgroup first reduces the whole row's Σ a² (row_norm: vectors lid,
// lid + 256, ... then wg_sum256; a few KiB from the cache, beside the
// workgroup's 128 weight rows), then runs gemv_segmented.wgsli's bodies with
// `activation` forming xn per 16-byte vector as it is read:
// bf16(a · inv · norm_w), rmsnorm_bf16.wgsl's store4 products and rounding.
// One chunk (x1 = 1) runs dense_gemv_rmsnorm_bf16; several run
// dense_gemv_rmsnorm_bf16_partial, then dense_gemv_rmsnorm_bf16_reduce
// (x0 = chunks), which reads only the partial sums. With enough rows,
// dense_gemv_rmsnorm_bf16_m1: the row's Σ a² (row_sum, the lanes prelude's
// reduction), then xn formed once into workgroup memory (XN_VECS vectors,
// the plan's K / 8), then gemv_m1.wgsli's eight rows a workgroup in one
// pass reading xn from there: every slot of the workgroup reads the same
// vectors, and forming them (two loads, sixteen products and a rounding a
// vector) in each slot's stream cost more than the stream's own dot
// products.
struct Params {
    a: u32, b: u32, c: u32, m: u32, n: u32, k: u32, seg1: u32, seg2: u32, norm_w: u32, eps: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_a: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> d_b: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_c: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> d_norm_w: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read_write> d_workspace: array<u32>;

//! include "gemv/workspace_words.wgsli"

//! include "gemv/gemv_segmented.wgsli"
//! include "gemv/rmsnorm_gemv.wgsli"
