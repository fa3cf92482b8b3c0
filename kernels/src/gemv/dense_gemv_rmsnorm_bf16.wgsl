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

//! include "gemv/gemv_segmented.wgsli"

// The row's inverse RMS, set by row_norm before the weight stream reads it.
var<private> row_inv: f32;

// Σ a² over the row and its inverse RMS (rmsnorm_bf16's inv_rms). Holds
// barriers: the whole workgroup calls it.
fn row_norm(lid: u32) {
    let kv = p.k / 8u;
    let ab = p.a / 4u;
    var ss = 0.0;
    for (var j = lid; j < kv; j += 256u) {
        ss += sq_bf16x4(d_a[ab + j]);
    }
    row_inv = inv_rms(wg_sum256(ss, lid), p.k, p.eps);
}

// The m = 1 entry's normalised row, K / 8 vectors (the XN_VECS override;
// 1, unused, for the other entries).
override XN_VECS: u32 = 1u;
var<workgroup> xn: array<vec4<u32>, XN_VECS>;

fn m1_activation(c: u32) -> vec4<u32> {
    return xn[c];
}

// Vector c of the normalised row (m = 1: i is 0).
fn activation(i: u32, c: u32) -> vec4<u32> {
    let x = d_a[p.a / 4u + i * (p.k / 8u) + c];
    let w = d_norm_w[p.norm_w / 4u + c];
    var lo = bf16x4_lo(x) * row_inv;
    var hi = bf16x4_hi(x) * row_inv;
    lo *= bf16x4_lo(w);
    hi *= bf16x4_hi(w);
    return pack_bf16x4(lo, hi);
}

@compute @workgroup_size(256)
fn dense_gemv_rmsnorm_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                           @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    row_norm(lid);
    seg_store(g, lid);
}

@compute @workgroup_size(256)
fn dense_gemv_rmsnorm_bf16_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                                   @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    row_norm(lid);
    seg_partial(g, group_y(wid, p.fold), lid);
}

@compute @workgroup_size(256)
fn dense_gemv_rmsnorm_bf16_reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                                  @builtin(local_invocation_index) lid: u32) {
    seg_reduce(group_x(wid, nwg, p.fold) * 256u + lid);
}

@compute @workgroup_size(256)
fn dense_gemv_rmsnorm_bf16_m1(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, ln: Lanes) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    let lid = ln.lid;
    let kv = p.k / 8u;
    let ab = p.a / 4u;
    var ss = 0.0;
    for (var j = lid; j < kv; j += 256u) {
        ss += sq_bf16x4(d_a[ab + j]);
    }
    row_inv = inv_rms(row_sum(ss, ln), p.k, p.eps);
    for (var j = lid; j < kv; j += 256u) {
        xn[j] = activation(0u, j);
    }
    workgroupBarrier();
    seg_m1(g, lid);
}
