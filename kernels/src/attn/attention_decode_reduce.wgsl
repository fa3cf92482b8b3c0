// Split decode attention, phase 2: one workgroup per (sequence, head), each
// thread a packed output word (two dims). Splits are combined in split order:
// M = max of the used m, out = bf16(Σ e^{m_s−M} o_s / Σ e^{m_s−M} l_s). An
// empty split (m = −inf or l = 0) is skipped, so e^{−inf − M} never meets
// M = −inf; all splits empty gives a NaN row, and a NaN m (an invalid
// sequence) propagates to the row, as the reference.
struct Params {
    out: u32, o_ws: u32, ml_ws: u32, batch: i32, nh: i32, hd: i32, splits: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_o_ws: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_ml_ws: array<u32>;

const NEG_INF: u32 = 0xff800000u;

fn split_m(e: u32) -> f32 {
    return bitcast<f32>(d_ml_ws[p.ml_ws + 2u * e]);
}

fn split_l(e: u32) -> f32 {
    return bitcast<f32>(d_ml_ws[p.ml_ws + 2u * e + 1u]);
}

fn used(m: f32, l: f32) -> bool {
    return !(bitcast<u32>(m) == NEG_INF || l == 0.0);
}

@compute @workgroup_size(128)
fn attention_decode_reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                           @builtin(local_invocation_index) lid: u32) {
    let b = group_x(wid, nwg, p.fold);
    let h = group_y(wid, p.fold);
    if (b >= p.gx || h >= p.gy || b >= u32(p.batch) || h >= u32(p.nh)) {
        return;
    }
    let splits = u32(p.splits);
    let hd = u32(p.hd);
    let w = hd / 2u;
    let bh = b * u32(p.nh) + h;
    let o = p.out + bh * w;
    var any = false;
    var nan = false;
    var big_m = bitcast<f32>(NEG_INF);
    for (var s = 0u; s < splits; s++) {
        let m = split_m(bh * splits + s);
        if (used(m, split_l(bh * splits + s))) {
            any = true;
            nan = nan || is_nan_f32(m);
            big_m = max(big_m, m);
        }
    }
    if (!any || nan) {
        for (var c = lid; c < w; c += 128u) {
            d_out[o + c] = BF16_NAN2;
        }
        return;
    }
    var den = 0.0;
    for (var s = 0u; s < splits; s++) {
        let m = split_m(bh * splits + s);
        let l = split_l(bh * splits + s);
        if (used(m, l)) {
            den += exp(m - big_m) * l;
        }
    }
    for (var c = lid; c < w; c += 128u) {
        var a = 0.0;
        var z = 0.0;
        for (var s = 0u; s < splits; s++) {
            let e = bh * splits + s;
            let m = split_m(e);
            if (used(m, split_l(e))) {
                let f = exp(m - big_m);
                a += f * bitcast<f32>(d_o_ws[p.o_ws + e * hd + 2u * c]);
                z += f * bitcast<f32>(d_o_ws[p.o_ws + e * hd + 2u * c + 1u]);
            }
        }
        d_out[o + c] = pack_bf16(a / den, z / den);
    }
}
