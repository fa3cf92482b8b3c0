// out[s] = bf16(rmsnorm(x[pair_of_slot[s] / k]; w)), one workgroup of 256 per
// slot, a word (two columns) an invocation at a time: Σx² (order free), then
// x · inv · w. pair_of_slot = −1 gives a zero row; a token outside
// [0, rows) (a negative pair included) a NaN row, as moe_gather_bf16.
struct Params {
    out: u32, x: u32, w: u32, pair_of_slot: u32, n: i32, k: i32, h: i32, rows: i32, eps: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_x: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_w: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_pair_of_slot: array<u32>;

@compute @workgroup_size(256)
fn moe_norm_gather_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, ln: Lanes) {
    let lid = ln.lid;
    let s = group_x(wid, nwg, p.fold);
    if (s >= p.gx || s >= u32(p.n)) {
        return;
    }
    let hw = u32(p.h) / 2u;
    let o = p.out + s * hw;
    let pair = bitcast<i32>(d_pair_of_slot[p.pair_of_slot + s]);
    // Signed division truncates toward zero, so a negative pair is tested
    // before it could land on token 0.
    var tok = -1;
    if (pair >= 0 && p.k > 0) {
        tok = pair / p.k;
    }
    if (tok < 0 || tok >= p.rows) {
        let fill = select(BF16_NAN2, 0u, pair == -1);
        for (var c = lid; c < hw; c += 256u) {
            d_out[o + c] = fill;
        }
        return;
    }
    let xo = p.x + u32(tok) * hw;
    var ss = 0.0;
    for (var c = lid; c < hw; c += 256u) {
        let v = d_x[xo + c];
        ss += bf16_lo(v) * bf16_lo(v) + bf16_hi(v) * bf16_hi(v);
    }
    let inv = inv_rms(row_sum(ss, ln), u32(p.h), p.eps);
    for (var c = lid; c < hw; c += 256u) {
        let v = d_x[xo + c];
        let w = d_w[p.w + c];
        d_out[o + c] = pack_bf16(bf16_lo(v) * inv * bf16_lo(w), bf16_hi(v) * inv * bf16_hi(w));
    }
}
