// One workgroup per row. A thread owns the same words in every loop, so it
// reads back its own resid_out stores (and resid_out may alias resid).
struct Params {
    resid_out: u32, normed: u32, resid: u32, x: u32, w_post: u32, w_pre: u32, dim: i32, eps: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_resid_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_normed: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_resid: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_x: array<u32>;
@group(0) @binding(5) var<storage, read_write> d_w_post: array<u32>;
@group(0) @binding(6) var<storage, read_write> d_w_pre: array<u32>;

@compute @workgroup_size(256)
fn post_norm_add_pre_norm_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                               @builtin(local_invocation_index) lid: u32) {
    let r = group_x(wid, nwg, p.fold);
    if (r >= p.gx) {
        return;
    }
    let dim = u32(p.dim);
    let hw = dim / 2u;
    let row = r * hw;
    var ss = 0.0;
    for (var j = lid; j < hw; j += 256u) {
        let v = d_x[p.x + row + j];
        let a = bf16_lo(v);
        let b = bf16_hi(v);
        ss += a * a + b * b;
    }
    let inv = inv_rms(wg_sum256(ss, lid), dim, p.eps);
    var ss2 = 0.0;
    for (var j = lid; j < hw; j += 256u) {
        let v = d_x[p.x + row + j];
        var a = bf16_lo(v) * inv;
        var b = bf16_hi(v) * inv;
        if (p.w_post != NONE) {
            let w = d_w_post[p.w_post + j];
            a *= bf16_lo(w);
            b *= bf16_hi(w);
        }
        let res = d_resid[p.resid + row + j];
        let s = pack_bf16(bf16_lo(res) + bf16_round(a), bf16_hi(res) + bf16_round(b));
        d_resid_out[p.resid_out + row + j] = s;
        let sa = bf16_lo(s);
        let sb = bf16_hi(s);
        ss2 += sa * sa + sb * sb;
    }
    if (p.w_pre == NONE) {
        return;
    }
    let inv2 = inv_rms(wg_sum256(ss2, lid), dim, p.eps);
    for (var j = lid; j < hw; j += 256u) {
        let s = d_resid_out[p.resid_out + row + j];
        let w = d_w_pre[p.w_pre + j];
        d_normed[p.normed + row + j] = pack_bf16(bf16_lo(s) * inv2 * bf16_lo(w), bf16_hi(s) * inv2 * bf16_hi(w));
    }
}
