// dense_gemv_sandwich_gelu_mul_bf16: a = resid_out and hn = normed of
// post_norm_add_pre_norm_bf16(mid, x; w_post, norm_w, eps) for one row, then
// c = dense_gemv_gelu_mul_bf16(hn, b). Where the gated GEMV's plan is its
// m = 1 pass, one dispatch: dense_gemv_sandwich_gelu_mul_bf16_m1, every
// workgroup forming the row itself into workgroup memory (XN_STAGED = 1,
// XN_VECS = k / 8; workgroup 0 also stores `a`), then the m = 1 stream over
// it; the row entry's arithmetic in its order, so the same bits. Otherwise
// two or more dispatches: this file's own entry (one workgroup of 256: Σ x²
// and then Σ a² through wg_sum256, post_norm_add_pre_norm_bf16.wgsl's
// products and roundings per 16-byte vector) writes `a` and hn into
// workspace vectors [0, k / 8); then the gated GEMV's own plan
// (gelu_gemv.wgsli's entries, WS_BASE = k / 2 so their partial sums sit past
// the row) reads hn from there.
struct Params {
    a: u32, b: u32, c: u32, m: u32, n: u32, k: u32, norm_w: u32, eps: f32, mid: u32, x: u32, w_post: u32,
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
// The normed row in vectors [0, k / 8), the gated GEMV's partial sums (as
// words) from word WS_BASE = k / 2 on.
@group(0) @binding(8) var<storage, read_write> d_workspace: array<vec4<u32>>;

//! include "gemv/gemv_m1.wgsli"

// Vector c of the normalised row (m = 1: i is 0), as the first pass stored it.
fn activation(i: u32, c: u32) -> vec4<u32> {
    return d_workspace[c];
}

// 1: the m = 1 stream reads hn from xn (the one-dispatch entry), 0: from
// the workspace.
override XN_STAGED: u32 = 0u;
// Vectors of xn: k / 8 in the one-dispatch entry, else 1 (unused).
override XN_VECS: u32 = 1u;
var<workgroup> xn: array<vec4<u32>, XN_VECS>;

fn m1_activation(c: u32) -> vec4<u32> {
    if (XN_STAGED == 1u) {
        return xn[c];
    }
    return d_workspace[c];
}

fn ws_load(i: u32) -> u32 {
    return d_workspace[i / 4u][i % 4u];
}

fn ws_store(i: u32, v: u32) {
    d_workspace[i / 4u][i % 4u] = v;
}

//! include "gemv/gelu_gemv.wgsli"

// The post-attention norm's inverse RMS of x (Σ x² over vectors lid,
// lid + 256, ..., then wg_sum256). Holds barriers.
fn post_inv(lid: u32) -> f32 {
    var ss = 0.0;
    for (var j = lid; j < p.k / 8u; j += 256u) {
        ss += sq_bf16x4(d_x[p.x / 4u + j]);
    }
    return inv_rms(wg_sum256(ss, lid), p.k, p.eps);
}

// Vector j of resid_out: mid + bf16(x · inv · w_post).
fn resid_vec(j: u32, inv: f32) -> vec4<u32> {
    let v = d_x[p.x / 4u + j];
    var lo = bf16x4_lo(v) * inv;
    var hi = bf16x4_hi(v) * inv;
    if (p.w_post != NONE) {
        let w = d_w_post[p.w_post / 4u + j];
        lo *= bf16x4_lo(w);
        hi *= bf16x4_hi(w);
    }
    let m = d_mid[p.mid / 4u + j];
    return pack_bf16x4(bf16x4_lo(m) + bf16_round4(lo), bf16x4_hi(m) + bf16_round4(hi));
}

// Vector j of hn from resid_out's vector s.
fn hn_vec(s: vec4<u32>, j: u32, inv2: f32) -> vec4<u32> {
    let w = d_norm_w[p.norm_w / 4u + j];
    return pack_bf16x4(bf16x4_lo(s) * inv2 * bf16x4_lo(w), bf16x4_hi(s) * inv2 * bf16x4_hi(w));
}

@compute @workgroup_size(256)
fn dense_gemv_sandwich_gelu_mul_bf16(@builtin(local_invocation_index) lid: u32) {
    let inv = post_inv(lid);
    var sa = 0.0;
    for (var j = lid; j < p.k / 8u; j += 256u) {
        let s = resid_vec(j, inv);
        d_a[p.a / 4u + j] = s;
        sa += sq_bf16x4(s);
    }
    let inv2 = inv_rms(wg_sum256(sa, lid), p.k, p.eps);
    // Each invocation reads back only the vectors it stored above.
    for (var j = lid; j < p.k / 8u; j += 256u) {
        d_workspace[j] = hn_vec(d_a[p.a / 4u + j], j, inv2);
    }
}

@compute @workgroup_size(256)
fn dense_gemv_sandwich_gelu_mul_bf16_m1(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                                        @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    let inv = post_inv(lid);
    var sa = 0.0;
    for (var j = lid; j < p.k / 8u; j += 256u) {
        let s = resid_vec(j, inv);
        xn[j] = s;
        sa += sq_bf16x4(s);
        if (g == 0u) {
            d_a[p.a / 4u + j] = s;
        }
    }
    let inv2 = inv_rms(wg_sum256(sa, lid), p.k, p.eps);
    // Each invocation normalises the vectors it formed.
    for (var j = lid; j < p.k / 8u; j += 256u) {
        xn[j] = hn_vec(xn[j], j, inv2);
    }
    workgroupBarrier();
    gelu_m1(g, lid);
}
