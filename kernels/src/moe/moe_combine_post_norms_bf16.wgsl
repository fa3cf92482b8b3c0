// The MoE branch's tail in one dispatch, one workgroup of 256 per token row:
// e = bf16(Σ_j topk_w[j] · y[slot_of_pair[j]]) in j order (slot −1
// skipped, any other slot outside [0, n) makes the row NaN),
// m = bf16(rmsnorm(mlp; w_mlp)), out = bf16(m + bf16(rmsnorm(e; w_moe))).
// A word (two columns) an invocation at a time. The first pass takes both
// rows' Σx² (order free); the second recomputes e by the same expression,
// so it has the same bits, rather than holding a row of any length in
// workgroup memory. It takes 30 us a dispatch at hidden 2816 on the H200;
// a form holding a row of up to 8192 columns in registers between the
// passes, each expert's loads of every word issued together, took 32.6
// (thirteenth session), and one with the row's slots staged in workgroup
// memory and a word's eight expert loads issued together took 39.1-40.0
// (fourteenth session); both were withdrawn.
struct Params {
    out: u32, mlp: u32, y: u32, slot_of_pair: u32, topk_w: u32, w_mlp: u32, w_moe: u32,
    rows: i32, k: i32, h: i32, n: i32, eps: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_mlp: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_y: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_slot_of_pair: array<u32>;
@group(0) @binding(5) var<storage, read_write> d_topk_w: array<u32>;
@group(0) @binding(6) var<storage, read_write> d_w_mlp: array<u32>;
@group(0) @binding(7) var<storage, read_write> d_w_moe: array<u32>;

//! include "moe/combine_word.wgsli"

@compute @workgroup_size(256)
fn moe_combine_post_norms_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, ln: Lanes) {
    let lid = ln.lid;
    let t = group_x(wid, nwg, p.fold);
    if (t >= p.gx || t >= u32(p.rows)) {
        return;
    }
    let hw = u32(p.h) / 2u;
    let o = p.out + t * hw;
    let mo = p.mlp + t * hw;
    combine_stage(t, lid);
    if (combine_row_is_bad(t)) {
        for (var c = lid; c < hw; c += 256u) {
            d_out[o + c] = BF16_NAN2;
        }
        return;
    }
    var ss_e = 0.0;
    var ss_m = 0.0;
    for (var c = lid; c < hw; c += 256u) {
        let e = combine_word(t, c, hw);
        let m = d_mlp[mo + c];
        ss_e += bf16_lo(e) * bf16_lo(e) + bf16_hi(e) * bf16_hi(e);
        ss_m += bf16_lo(m) * bf16_lo(m) + bf16_hi(m) * bf16_hi(m);
    }
    let n = u32(p.h);
    let inv_e = inv_rms(row_sum(ss_e, ln), n, p.eps);
    let inv_m = inv_rms(row_sum(ss_m, ln), n, p.eps);
    for (var c = lid; c < hw; c += 256u) {
        let e = combine_word(t, c, hw);
        let m = d_mlp[mo + c];
        let a = d_w_mlp[p.w_mlp + c];
        let b = d_w_moe[p.w_moe + c];
        let m0 = bf16_round(bf16_lo(m) * inv_m * bf16_lo(a));
        let m1 = bf16_round(bf16_hi(m) * inv_m * bf16_hi(a));
        let t0 = bf16_round(bf16_lo(e) * inv_e * bf16_lo(b));
        let t1 = bf16_round(bf16_hi(e) * inv_e * bf16_hi(b));
        d_out[o + c] = pack_bf16(m0 + t0, m1 + t1);
    }
}
