// One workgroup of 256 per row (Σ x² through row_sum: subgroupAdd where the
// device has subgroups, a workgroup-memory tree otherwise): t = bf16(rmsnorm(x; w)), s = bf16(mid + t),
// out = bf16(s * layer_scalar).
//
// Fast path (dim % 8 == 0 and out, mid, x, w at word offsets that are
// multiples of 4): rows move as vec4<u32> (8 bf16 per load). Rows up to
// 8192 elements keep x in registers: four independent 16-byte loads per
// invocation in one burst, so x is read once. Longer rows loop over vectors
// and read x twice. Otherwise the same math runs a word at a time.
struct Params {
    out: u32, mid: u32, x: u32, w: u32, layer_scalar: u32, rows: i32, dim: i32, eps: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> d_mid: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_x: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> d_w: array<vec4<u32>>;
// Read one word; a scalar view (vec4 indexing could run past a 4-byte binding).
@group(0) @binding(5) var<storage, read_write> d_layer_scalar: array<u32>;

const WG: u32 = 256u;

fn ldx(row: u32, j: u32, n: u32) -> vec4<u32> {
    if (j < n) {
        return d_x[p.x / 4u + row + j];
    }
    return vec4<u32>(0u);
}

fn store4(row: u32, j: u32, n: u32, v: vec4<u32>, inv: f32, ls: f32) {
    if (j >= n) {
        return;
    }
    var a = bf16x4_lo(v) * inv;
    var b = bf16x4_hi(v) * inv;
    if (p.w != NONE) {
        let w = d_w[p.w / 4u + j];
        a *= bf16x4_lo(w);
        b *= bf16x4_hi(w);
    }
    let m = d_mid[p.mid / 4u + row + j];
    let sa = bf16_round4(bf16x4_lo(m) + bf16_round4(a));
    let sb = bf16_round4(bf16x4_hi(m) + bf16_round4(b));
    d_out[p.out / 4u + row + j] = pack_bf16x4(sa * ls, sb * ls);
}

fn word_x(i: u32) -> u32 {
    return d_x[i >> 2u][i & 3u];
}

fn store1(row: u32, j: u32, v: u32, inv: f32, ls: f32) {
    var a = bf16_lo(v) * inv;
    var b = bf16_hi(v) * inv;
    if (p.w != NONE) {
        let wi = p.w + j;
        let w = d_w[wi >> 2u][wi & 3u];
        a *= bf16_lo(w);
        b *= bf16_hi(w);
    }
    let mi = p.mid + row + j;
    let m = d_mid[mi >> 2u][mi & 3u];
    let sa = bf16_round(bf16_lo(m) + bf16_round(a));
    let sb = bf16_round(bf16_hi(m) + bf16_round(b));
    let oi = p.out + row + j;
    d_out[oi >> 2u][oi & 3u] = pack_bf16(sa * ls, sb * ls);
}

@compute @workgroup_size(256)
fn layer_out_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  ln: Lanes) {
    let lid = ln.lid;
    let r = group_x(wid, nwg, p.fold);
    if (r >= p.gx) {
        return;
    }
    let dim = u32(p.dim);
    let ls = bitcast<f32>(d_layer_scalar[p.layer_scalar]);
    if (dim % 8u == 0u && aligned4(p.out, p.mid, p.x, p.w)) {
        let n = dim / 8u;
        let row = r * n;
        if (n <= 4u * WG) {
            let v0 = ldx(row, lid, n);
            let v1 = ldx(row, lid + WG, n);
            let v2 = ldx(row, lid + 2u * WG, n);
            let v3 = ldx(row, lid + 3u * WG, n);
            let ss = (sq_bf16x4(v0) + sq_bf16x4(v1)) + (sq_bf16x4(v2) + sq_bf16x4(v3));
            let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
            store4(row, lid, n, v0, inv, ls);
            store4(row, lid + WG, n, v1, inv, ls);
            store4(row, lid + 2u * WG, n, v2, inv, ls);
            store4(row, lid + 3u * WG, n, v3, inv, ls);
            return;
        }
        var ss = 0.0;
        for (var j = lid; j < n; j += WG) {
            ss += sq_bf16x4(d_x[p.x / 4u + row + j]);
        }
        let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
        for (var j = lid; j < n; j += WG) {
            store4(row, j, n, d_x[p.x / 4u + row + j], inv, ls);
        }
        return;
    }
    let hw = dim / 2u;
    let row = r * hw;
    var ss = 0.0;
    for (var j = lid; j < hw; j += WG) {
        let v = word_x(p.x + row + j);
        let a = bf16_lo(v);
        let b = bf16_hi(v);
        ss += a * a + b * b;
    }
    let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
    for (var j = lid; j < hw; j += WG) {
        store1(row, j, word_x(p.x + row + j), inv, ls);
    }
}

// --- variants for the H200 A/B (SWITCHYARD_WGSL_NORM_PLAN) -----------------
// The entry above loads mid in store4, after the reduction, so those loads
// start only once Σ x² has met; layer_out moves a third more bytes than
// rmsnorm and ran at 65% of copy against rmsnorm's 69-73%. These entries
// issue the mid loads together with x, before the reduction.

fn ldm(row: u32, j: u32, n: u32) -> vec4<u32> {
    if (j < n) {
        return d_mid[p.mid / 4u + row + j];
    }
    return vec4<u32>(0u);
}

// store4 with mid vector m already loaded.
fn put4(row: u32, j: u32, n: u32, v: vec4<u32>, m: vec4<u32>, inv: f32, ls: f32) {
    if (j >= n) {
        return;
    }
    var a = bf16x4_lo(v) * inv;
    var b = bf16x4_hi(v) * inv;
    if (p.w != NONE) {
        let w = d_w[p.w / 4u + j];
        a *= bf16x4_lo(w);
        b *= bf16x4_hi(w);
    }
    let sa = bf16_round4(bf16x4_lo(m) + bf16_round4(a));
    let sb = bf16_round4(bf16x4_hi(m) + bf16_round4(b));
    d_out[p.out / 4u + row + j] = pack_bf16x4(sa * ls, sb * ls);
}

// plan=early: one row a workgroup of 256 as layer_out_bf16, mid loaded early
// on the register path; every other shape takes layer_out_bf16's paths.
@compute @workgroup_size(256)
fn layer_out_bf16_early(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                        ln: Lanes) {
    let lid = ln.lid;
    let r = group_x(wid, nwg, p.fold);
    if (r >= p.gx) {
        return;
    }
    let dim = u32(p.dim);
    let ls = bitcast<f32>(d_layer_scalar[p.layer_scalar]);
    let n = dim / 8u;
    if (dim % 8u == 0u && n <= 4u * WG && aligned4(p.out, p.mid, p.x, p.w)) {
        let row = r * n;
        let v0 = ldx(row, lid, n);
        let v1 = ldx(row, lid + WG, n);
        let v2 = ldx(row, lid + 2u * WG, n);
        let v3 = ldx(row, lid + 3u * WG, n);
        let m0 = ldm(row, lid, n);
        let m1 = ldm(row, lid + WG, n);
        let m2 = ldm(row, lid + 2u * WG, n);
        let m3 = ldm(row, lid + 3u * WG, n);
        let ss = (sq_bf16x4(v0) + sq_bf16x4(v1)) + (sq_bf16x4(v2) + sq_bf16x4(v3));
        let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
        put4(row, lid, n, v0, m0, inv, ls);
        put4(row, lid + WG, n, v1, m1, inv, ls);
        put4(row, lid + 2u * WG, n, v2, m2, inv, ls);
        put4(row, lid + 3u * WG, n, v3, m3, inv, ls);
        return;
    }
    if (dim % 8u == 0u && aligned4(p.out, p.mid, p.x, p.w)) {
        let row = r * n;
        var ss = 0.0;
        for (var j = lid; j < n; j += WG) {
            ss += sq_bf16x4(d_x[p.x / 4u + row + j]);
        }
        let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
        for (var j = lid; j < n; j += WG) {
            store4(row, j, n, d_x[p.x / 4u + row + j], inv, ls);
        }
        return;
    }
    let hw = dim / 2u;
    let row = r * hw;
    var ss = 0.0;
    for (var j = lid; j < hw; j += WG) {
        let v = word_x(p.x + row + j);
        let a = bf16_lo(v);
        let b = bf16_hi(v);
        ss += a * a + b * b;
    }
    let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
    for (var j = lid; j < hw; j += WG) {
        store1(row, j, word_x(p.x + row + j), inv, ls);
    }
}

// plan=r2: two rows a workgroup, RH = 128 invocations a row in lane order
// (whole subgroups, one run_sum), x and mid of rows up to 6 * RH vectors in
// twelve named vec4 loaded before the reduction (not register arrays: those
// were 1.1-2.8x slower on the H200). Other shapes a word at a time, RH
// invocations a row. A second row past `rows` loads and stores nothing but
// still reaches the barriers.
const RH: u32 = 128u;

@compute @workgroup_size(256)
fn layer_out_bf16_r2(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     ln: Lanes) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    let pos = lane_order(ln);
    let r = 2u * g + pos / RH;
    let t = pos % RH;
    let live = r < u32(p.rows);
    let dim = u32(p.dim);
    let ls = bitcast<f32>(d_layer_scalar[p.layer_scalar]);
    let n = dim / 8u;
    if (dim % 8u == 0u && n <= 6u * RH && aligned4(p.out, p.mid, p.x, p.w)) {
        let k = select(0u, n, live);
        let row = r * n;
        let v0 = ldx(row, t, k);
        let v1 = ldx(row, t + RH, k);
        let v2 = ldx(row, t + 2u * RH, k);
        let v3 = ldx(row, t + 3u * RH, k);
        let v4 = ldx(row, t + 4u * RH, k);
        let v5 = ldx(row, t + 5u * RH, k);
        let m0 = ldm(row, t, k);
        let m1 = ldm(row, t + RH, k);
        let m2 = ldm(row, t + 2u * RH, k);
        let m3 = ldm(row, t + 3u * RH, k);
        let m4 = ldm(row, t + 4u * RH, k);
        let m5 = ldm(row, t + 5u * RH, k);
        let ss = ((sq_bf16x4(v0) + sq_bf16x4(v1)) + (sq_bf16x4(v2) + sq_bf16x4(v3))) + (sq_bf16x4(v4) + sq_bf16x4(v5));
        let inv = inv_rms(run_sum(ss, RH, ln), dim, p.eps);
        put4(row, t, k, v0, m0, inv, ls);
        put4(row, t + RH, k, v1, m1, inv, ls);
        put4(row, t + 2u * RH, k, v2, m2, inv, ls);
        put4(row, t + 3u * RH, k, v3, m3, inv, ls);
        put4(row, t + 4u * RH, k, v4, m4, inv, ls);
        put4(row, t + 5u * RH, k, v5, m5, inv, ls);
        return;
    }
    let hw = select(0u, dim / 2u, live);
    let row = r * (dim / 2u);
    var ss = 0.0;
    for (var j = t; j < hw; j += RH) {
        let v = word_x(p.x + row + j);
        let a = bf16_lo(v);
        let b = bf16_hi(v);
        ss += a * a + b * b;
    }
    let inv = inv_rms(run_sum(ss, RH, ln), dim, p.eps);
    for (var j = t; j < hw; j += RH) {
        store1(row, j, word_x(p.x + row + j), inv, ls);
    }
}

// plan=pipe: the CUDA plan's structure on WGSL. A workgroup of 256 walks
// rows g, g + G, ... (G = the grid, rows / PIPE rows a workgroup so it fits
// about one wave); row r + G's x and mid loads go out before row r's
// reduction and stores, so a workgroup always has a row in flight. Rows up
// to 3 * WG vectors (6144 elements) in named registers (this row: a, m; the
// next: b, q); any other shape takes layer_out_bf16's paths row by row.
@compute @workgroup_size(256)
fn layer_out_bf16_pipe(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                       ln: Lanes) {
    let lid = ln.lid;
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    let rows = u32(p.rows);
    let dim = u32(p.dim);
    let ls = bitcast<f32>(d_layer_scalar[p.layer_scalar]);
    let n = dim / 8u;
    if (dim % 8u == 0u && n <= 3u * WG && aligned4(p.out, p.mid, p.x, p.w)) {
        var r = g;
        var a0 = ldx(r * n, lid, n);
        var a1 = ldx(r * n, lid + WG, n);
        var a2 = ldx(r * n, lid + 2u * WG, n);
        var m0 = ldm(r * n, lid, n);
        var m1 = ldm(r * n, lid + WG, n);
        var m2 = ldm(r * n, lid + 2u * WG, n);
        loop {
            let nr = r + p.gx;
            let k = select(0u, n, nr < rows);
            let b0 = ldx(nr * n, lid, k);
            let b1 = ldx(nr * n, lid + WG, k);
            let b2 = ldx(nr * n, lid + 2u * WG, k);
            let q0 = ldm(nr * n, lid, k);
            let q1 = ldm(nr * n, lid + WG, k);
            let q2 = ldm(nr * n, lid + 2u * WG, k);
            let ss = (sq_bf16x4(a0) + sq_bf16x4(a1)) + sq_bf16x4(a2);
            let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
            put4(r * n, lid, n, a0, m0, inv, ls);
            put4(r * n, lid + WG, n, a1, m1, inv, ls);
            put4(r * n, lid + 2u * WG, n, a2, m2, inv, ls);
            if (nr >= rows) {
                break;
            }
            a0 = b0;
            a1 = b1;
            a2 = b2;
            m0 = q0;
            m1 = q1;
            m2 = q2;
            r = nr;
        }
        return;
    }
    for (var r = g; r < rows; r += p.gx) {
        if (dim % 8u == 0u && aligned4(p.out, p.mid, p.x, p.w)) {
            let row = r * n;
            var ss = 0.0;
            for (var j = lid; j < n; j += WG) {
                ss += sq_bf16x4(d_x[p.x / 4u + row + j]);
            }
            let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
            for (var j = lid; j < n; j += WG) {
                store4(row, j, n, d_x[p.x / 4u + row + j], inv, ls);
            }
        } else {
            let hw = dim / 2u;
            let row = r * hw;
            var ss = 0.0;
            for (var j = lid; j < hw; j += WG) {
                let v = word_x(p.x + row + j);
                let a = bf16_lo(v);
                let b = bf16_hi(v);
                ss += a * a + b * b;
            }
            let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
            for (var j = lid; j < hw; j += WG) {
                store1(row, j, word_x(p.x + row + j), inv, ls);
            }
        }
    }
}
