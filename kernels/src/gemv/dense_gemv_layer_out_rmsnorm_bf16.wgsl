// dense_gemv_layer_out_rmsnorm_bf16: a = layer_out_bf16(mid, x; w_post,
// layer_scalar, eps) for one row, then c = dense_gemv_rmsnorm_bf16(a, b;
// norm_w, eps). Two dispatches: this file's own entry (one workgroup of 256: Σ x²
// through wg_sum256, then per 16-byte vector layer_out_bf16.wgsl's store4
// products and roundings into `a`), then the fused-norm GEMV's own plan
// (rmsnorm_gemv.wgsli's entries, reading the row back from `a`).
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

//! include "gemv/gemv_segmented.wgsli"
//! include "gemv/rmsnorm_gemv.wgsli"

@compute @workgroup_size(256)
fn dense_gemv_layer_out_rmsnorm_bf16(@builtin(local_invocation_index) lid: u32) {
    let kv = p.k / 8u;
    var ss = 0.0;
    for (var j = lid; j < kv; j += 256u) {
        ss += sq_bf16x4(d_x[p.x / 4u + j]);
    }
    let inv = inv_rms(wg_sum256(ss, lid), p.k, p.eps);
    let ls = bitcast<f32>(d_layer_scalar[p.layer_scalar]);
    for (var j = lid; j < kv; j += 256u) {
        let v = d_x[p.x / 4u + j];
        var lo = bf16x4_lo(v) * inv;
        var hi = bf16x4_hi(v) * inv;
        if (p.w_post != NONE) {
            let w = d_w_post[p.w_post / 4u + j];
            lo *= bf16x4_lo(w);
            hi *= bf16x4_hi(w);
        }
        let m = d_mid[p.mid / 4u + j];
        let sa = bf16_round4(bf16x4_lo(m) + bf16_round4(lo));
        let sb = bf16_round4(bf16x4_hi(m) + bf16_round4(hi));
        d_a[p.a / 4u + j] = pack_bf16x4(sa * ls, sb * ls);
    }
}
