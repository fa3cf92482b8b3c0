// Router input: one workgroup per row. Sum of squares, workgroup reduction, then
// x · inv · scale · root left to right in f32 with one rounding, as the
// reference writes it. Rows up to 8192 elements stay in registers between the
// two passes; longer rows are read twice.
struct Params {
    out: u32, x: u32, scale: u32, rows: i32, dim: i32, eps: f32, root: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_x: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_scale: array<u32>;

fn store(o: u32, j: u32, v: u32, inv: f32) {
    let s = d_scale[p.scale + j];
    let a = bf16_lo(v) * inv * bf16_lo(s) * p.root;
    let b = bf16_hi(v) * inv * bf16_hi(s) * p.root;
    d_out[o + j] = pack_bf16(a, b);
}

@compute @workgroup_size(256)
fn router_norm_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let r = group_x(wid, nwg, p.fold);
    if (r >= p.gx || r >= u32(p.rows)) {
        return;
    }
    let dim = u32(p.dim);
    let hw = dim / 2u;
    let xo = p.x + r * hw;
    let o = p.out + r * hw;
    var ss = 0.0;
    if (hw <= 256u * CACHE) {
        var xv: array<u32, CACHE>;
        for (var t = 0u; t < CACHE; t++) {
            let j = lid + t * 256u;
            if (j < hw) {
                xv[t] = d_x[xo + j];
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
                store(o, j, xv[t], inv);
            }
        }
        return;
    }
    for (var j = lid; j < hw; j += 256u) {
        let v = d_x[xo + j];
        let a = bf16_lo(v);
        let b = bf16_hi(v);
        ss += a * a + b * b;
    }
    let inv = inv_rms(wg_sum256(ss, lid), dim, p.eps);
    for (var j = lid; j < hw; j += 256u) {
        store(o, j, d_x[xo + j], inv);
    }
}
