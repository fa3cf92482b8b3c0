// One workgroup per row: t = bf16(rmsnorm(x; w)), s = bf16(mid + t),
// out = bf16(s * layer_scalar). Rows up to 8192 elements keep x in
// registers between the passes; longer rows read it twice.
struct Params {
    out: u32, mid: u32, x: u32, w: u32, layer_scalar: u32, dim: i32, eps: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_mid: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_x: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_w: array<u32>;
@group(0) @binding(5) var<storage, read_write> d_layer_scalar: array<u32>;

fn store(row: u32, j: u32, v: u32, inv: f32, ls: f32) {
    var a = bf16_lo(v) * inv;
    var b = bf16_hi(v) * inv;
    if (p.w != NONE) {
        let w = d_w[p.w + j];
        a *= bf16_lo(w);
        b *= bf16_hi(w);
    }
    let m = d_mid[p.mid + row + j];
    let sa = bf16_round(bf16_lo(m) + bf16_round(a));
    let sb = bf16_round(bf16_hi(m) + bf16_round(b));
    d_out[p.out + row + j] = pack_bf16(sa * ls, sb * ls);
}

@compute @workgroup_size(256)
fn layer_out_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let r = group_x(wid, nwg, p.fold);
    if (r >= p.gx) {
        return;
    }
    let dim = u32(p.dim);
    let hw = dim / 2u;
    let row = r * hw;
    let ls = bitcast<f32>(d_layer_scalar[p.layer_scalar]);
    var ss = 0.0;
    if (hw <= 256u * CACHE) {
        var xv: array<u32, CACHE>;
        for (var t = 0u; t < CACHE; t++) {
            let j = lid + t * 256u;
            if (j < hw) {
                xv[t] = d_x[p.x + row + j];
            }
        }
        for (var t = 0u; t < CACHE; t++) {
            let a = bf16_lo(xv[t]);
            let b = bf16_hi(xv[t]);
            ss += select(0.0, a * a + b * b, lid + t * 256u < hw);
        }
        let inv = inv_rms(wg_sum256(ss, lid), dim, p.eps);
        for (var t = 0u; t < CACHE; t++) {
            let j = lid + t * 256u;
            if (j < hw) {
                store(row, j, xv[t], inv, ls);
            }
        }
        return;
    }
    for (var j = lid; j < hw; j += 256u) {
        let v = d_x[p.x + row + j];
        let a = bf16_lo(v);
        let b = bf16_hi(v);
        ss += a * a + b * b;
    }
    let inv = inv_rms(wg_sum256(ss, lid), dim, p.eps);
    for (var j = lid; j < hw; j += 256u) {
        store(row, j, d_x[p.x + row + j], inv, ls);
    }
}
