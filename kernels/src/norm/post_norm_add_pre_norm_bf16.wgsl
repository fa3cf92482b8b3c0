// One workgroup of 256 per row (Σ x² through row_sum: subgroupAdd where the
// device has subgroups, a workgroup-memory tree otherwise): resid_out = bf16(resid + bf16(rmsnorm(x;
// w_post))), then normed = bf16(rmsnorm(resid_out; w_pre)).
//
// Fast path (dim % 8 == 0 and every view at a word offset that is a multiple
// of 4): rows move as vec4<u32> (8 bf16 per load). Rows up to 8192 elements
// keep x, then resid_out, in registers: four independent 16-byte loads per
// invocation issued in one burst, so each row is read once. Longer rows
// loop over vectors and re-read. Otherwise the same math runs a word at a
// time. An invocation owns the same words in every pass, so re-reading its
// own resid_out stores is safe, and resid_out may alias resid.
struct Params {
    resid_out: u32, normed: u32, resid: u32, x: u32, w_post: u32, w_pre: u32, rows: i32, dim: i32, eps: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_resid_out: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> d_normed: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_resid: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> d_x: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read_write> d_w_post: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read_write> d_w_pre: array<vec4<u32>>;

const WG: u32 = 256u;

fn ldx(row: u32, j: u32, n: u32) -> vec4<u32> {
    if (j < n) {
        return d_x[p.x / 4u + row + j];
    }
    return vec4<u32>(0u);
}

// resid_out vector j: bf16(resid + bf16(x * inv * w_post)); zero past n.
fn add_post4(row: u32, j: u32, n: u32, v: vec4<u32>, inv: f32) -> vec4<u32> {
    if (j >= n) {
        return vec4<u32>(0u);
    }
    var a = bf16x4_lo(v) * inv;
    var b = bf16x4_hi(v) * inv;
    if (p.w_post != NONE) {
        let w = d_w_post[p.w_post / 4u + j];
        a *= bf16x4_lo(w);
        b *= bf16x4_hi(w);
    }
    let res = d_resid[p.resid / 4u + row + j];
    let s = pack_bf16x4(bf16x4_lo(res) + bf16_round4(a), bf16x4_hi(res) + bf16_round4(b));
    d_resid_out[p.resid_out / 4u + row + j] = s;
    return s;
}

fn store_pre4(row: u32, j: u32, n: u32, s: vec4<u32>, inv: f32) {
    if (j >= n) {
        return;
    }
    let w = d_w_pre[p.w_pre / 4u + j];
    d_normed[p.normed / 4u + row + j] = pack_bf16x4(bf16x4_lo(s) * inv * bf16x4_lo(w), bf16x4_hi(s) * inv * bf16x4_hi(w));
}

// --- word path -------------------------------------------------------------

fn sq(v: u32) -> f32 {
    let a = bf16_lo(v);
    let b = bf16_hi(v);
    return a * a + b * b;
}

fn word_x(i: u32) -> u32 {
    return d_x[i >> 2u][i & 3u];
}

fn add_post(row: u32, j: u32, v: u32, inv: f32) -> u32 {
    var a = bf16_lo(v) * inv;
    var b = bf16_hi(v) * inv;
    if (p.w_post != NONE) {
        let wi = p.w_post + j;
        let w = d_w_post[wi >> 2u][wi & 3u];
        a *= bf16_lo(w);
        b *= bf16_hi(w);
    }
    let ri = p.resid + row + j;
    let res = d_resid[ri >> 2u][ri & 3u];
    let s = pack_bf16(bf16_lo(res) + bf16_round(a), bf16_hi(res) + bf16_round(b));
    let oi = p.resid_out + row + j;
    d_resid_out[oi >> 2u][oi & 3u] = s;
    return s;
}

fn store_pre(row: u32, j: u32, s: u32, inv: f32) {
    let wi = p.w_pre + j;
    let w = d_w_pre[wi >> 2u][wi & 3u];
    let oi = p.normed + row + j;
    d_normed[oi >> 2u][oi & 3u] = pack_bf16(bf16_lo(s) * inv * bf16_lo(w), bf16_hi(s) * inv * bf16_hi(w));
}

@compute @workgroup_size(256)
fn post_norm_add_pre_norm_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                               ln: Lanes) {
    let lid = ln.lid;
    let r = group_x(wid, nwg, p.fold);
    if (r >= p.gx) {
        return;
    }
    let dim = u32(p.dim);
    if (dim % 8u == 0u && aligned4(p.resid_out, p.normed, p.resid, p.x) && aligned4(p.w_post, p.w_pre, NONE, NONE)) {
        let n = dim / 8u;
        let row = r * n;
        if (n <= 4u * WG) {
            let v0 = ldx(row, lid, n);
            let v1 = ldx(row, lid + WG, n);
            let v2 = ldx(row, lid + 2u * WG, n);
            let v3 = ldx(row, lid + 3u * WG, n);
            let ss = (sq_bf16x4(v0) + sq_bf16x4(v1)) + (sq_bf16x4(v2) + sq_bf16x4(v3));
            let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
            let s0 = add_post4(row, lid, n, v0, inv);
            let s1 = add_post4(row, lid + WG, n, v1, inv);
            let s2 = add_post4(row, lid + 2u * WG, n, v2, inv);
            let s3 = add_post4(row, lid + 3u * WG, n, v3, inv);
            if (p.w_pre == NONE) {
                return;
            }
            let ss2 = (sq_bf16x4(s0) + sq_bf16x4(s1)) + (sq_bf16x4(s2) + sq_bf16x4(s3));
            let inv2 = inv_rms(row_sum(ss2, ln), dim, p.eps);
            store_pre4(row, lid, n, s0, inv2);
            store_pre4(row, lid + WG, n, s1, inv2);
            store_pre4(row, lid + 2u * WG, n, s2, inv2);
            store_pre4(row, lid + 3u * WG, n, s3, inv2);
            return;
        }
        var ss = 0.0;
        for (var j = lid; j < n; j += WG) {
            ss += sq_bf16x4(d_x[p.x / 4u + row + j]);
        }
        let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
        var ss2 = 0.0;
        for (var j = lid; j < n; j += WG) {
            ss2 += sq_bf16x4(add_post4(row, j, n, d_x[p.x / 4u + row + j], inv));
        }
        if (p.w_pre == NONE) {
            return;
        }
        let inv2 = inv_rms(row_sum(ss2, ln), dim, p.eps);
        for (var j = lid; j < n; j += WG) {
            store_pre4(row, j, n, d_resid_out[p.resid_out / 4u + row + j], inv2);
        }
        return;
    }
    let hw = dim / 2u;
    let row = r * hw;
    var ss = 0.0;
    for (var j = lid; j < hw; j += WG) {
        ss += sq(word_x(p.x + row + j));
    }
    let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
    var ss2 = 0.0;
    for (var j = lid; j < hw; j += WG) {
        ss2 += sq(add_post(row, j, word_x(p.x + row + j), inv));
    }
    if (p.w_pre == NONE) {
        return;
    }
    let inv2 = inv_rms(row_sum(ss2, ln), dim, p.eps);
    for (var j = lid; j < hw; j += WG) {
        let oi = p.resid_out + row + j;
        store_pre(row, j, d_resid_out[oi >> 2u][oi & 3u], inv2);
    }
}

// --- variants for the H200 A/B (SWITCHYARD_WGSL_NORM_PLAN) -----------------
// The entry above loads resid in add_post4, after the first reduction, so
// those loads start only once Σ x² has met. These entries issue them with
// x, before it.

fn ldr(row: u32, j: u32, n: u32) -> vec4<u32> {
    if (j < n) {
        return d_resid[p.resid / 4u + row + j];
    }
    return vec4<u32>(0u);
}

// add_post4 with resid vector res already loaded.
fn add_post4r(row: u32, j: u32, n: u32, v: vec4<u32>, res: vec4<u32>, inv: f32) -> vec4<u32> {
    if (j >= n) {
        return vec4<u32>(0u);
    }
    var a = bf16x4_lo(v) * inv;
    var b = bf16x4_hi(v) * inv;
    if (p.w_post != NONE) {
        let w = d_w_post[p.w_post / 4u + j];
        a *= bf16x4_lo(w);
        b *= bf16x4_hi(w);
    }
    let s = pack_bf16x4(bf16x4_lo(res) + bf16_round4(a), bf16x4_hi(res) + bf16_round4(b));
    d_resid_out[p.resid_out / 4u + row + j] = s;
    return s;
}

// The word path, `rh` invocations a row (t: this invocation's place in it;
// hw = 0 for a row past `rows`), reductions by run_sum over runs of rh.
fn sandwich_words(row: u32, t: u32, rh: u32, hw: u32, dim: u32, ln: Lanes) {
    var ss = 0.0;
    for (var j = t; j < hw; j += rh) {
        ss += sq(word_x(p.x + row + j));
    }
    let inv = inv_rms(run_sum(ss, rh, ln), dim, p.eps);
    var ss2 = 0.0;
    for (var j = t; j < hw; j += rh) {
        ss2 += sq(add_post(row, j, word_x(p.x + row + j), inv));
    }
    if (p.w_pre == NONE) {
        return;
    }
    let inv2 = inv_rms(run_sum(ss2, rh, ln), dim, p.eps);
    for (var j = t; j < hw; j += rh) {
        let oi = p.resid_out + row + j;
        store_pre(row, j, d_resid_out[oi >> 2u][oi & 3u], inv2);
    }
}

// plan=early: one row a workgroup of 256, resid loaded with x on the
// register path (rows up to 1024 vectors); other shapes a word at a time.
@compute @workgroup_size(256)
fn post_norm_add_pre_norm_bf16_early(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                                     ln: Lanes) {
    let lid = ln.lid;
    let r = group_x(wid, nwg, p.fold);
    if (r >= p.gx) {
        return;
    }
    let dim = u32(p.dim);
    let n = dim / 8u;
    if (dim % 8u == 0u && n <= 4u * WG && aligned4(p.resid_out, p.normed, p.resid, p.x) && aligned4(p.w_post, p.w_pre, NONE, NONE)) {
        let row = r * n;
        let v0 = ldx(row, lid, n);
        let v1 = ldx(row, lid + WG, n);
        let v2 = ldx(row, lid + 2u * WG, n);
        let v3 = ldx(row, lid + 3u * WG, n);
        let q0 = ldr(row, lid, n);
        let q1 = ldr(row, lid + WG, n);
        let q2 = ldr(row, lid + 2u * WG, n);
        let q3 = ldr(row, lid + 3u * WG, n);
        let ss = (sq_bf16x4(v0) + sq_bf16x4(v1)) + (sq_bf16x4(v2) + sq_bf16x4(v3));
        let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
        let s0 = add_post4r(row, lid, n, v0, q0, inv);
        let s1 = add_post4r(row, lid + WG, n, v1, q1, inv);
        let s2 = add_post4r(row, lid + 2u * WG, n, v2, q2, inv);
        let s3 = add_post4r(row, lid + 3u * WG, n, v3, q3, inv);
        if (p.w_pre == NONE) {
            return;
        }
        let ss2 = (sq_bf16x4(s0) + sq_bf16x4(s1)) + (sq_bf16x4(s2) + sq_bf16x4(s3));
        let inv2 = inv_rms(row_sum(ss2, ln), dim, p.eps);
        store_pre4(row, lid, n, s0, inv2);
        store_pre4(row, lid + WG, n, s1, inv2);
        store_pre4(row, lid + 2u * WG, n, s2, inv2);
        store_pre4(row, lid + 3u * WG, n, s3, inv2);
        return;
    }
    sandwich_words(r * (dim / 2u), lid, WG, dim / 2u, dim, ln);
}

// plan=r2: two rows a workgroup, RH = 128 invocations a row in lane order
// (whole subgroups, one run_sum a reduction), x and resid of rows up to
// 6 * RH vectors in twelve named vec4 loaded before the first reduction (not
// register arrays: those were 1.1-2.8x slower on the H200); resid_out then
// lives in the x registers. Other shapes a word at a time, RH a row. A
// second row past `rows` loads and stores nothing but reaches the barriers.
const RH: u32 = 128u;

@compute @workgroup_size(256)
fn post_norm_add_pre_norm_bf16_r2(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
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
    let n = dim / 8u;
    if (dim % 8u == 0u && n <= 6u * RH && aligned4(p.resid_out, p.normed, p.resid, p.x) && aligned4(p.w_post, p.w_pre, NONE, NONE)) {
        let k = select(0u, n, live);
        let row = r * n;
        let v0 = ldx(row, t, k);
        let v1 = ldx(row, t + RH, k);
        let v2 = ldx(row, t + 2u * RH, k);
        let v3 = ldx(row, t + 3u * RH, k);
        let v4 = ldx(row, t + 4u * RH, k);
        let v5 = ldx(row, t + 5u * RH, k);
        let q0 = ldr(row, t, k);
        let q1 = ldr(row, t + RH, k);
        let q2 = ldr(row, t + 2u * RH, k);
        let q3 = ldr(row, t + 3u * RH, k);
        let q4 = ldr(row, t + 4u * RH, k);
        let q5 = ldr(row, t + 5u * RH, k);
        let ss = ((sq_bf16x4(v0) + sq_bf16x4(v1)) + (sq_bf16x4(v2) + sq_bf16x4(v3))) + (sq_bf16x4(v4) + sq_bf16x4(v5));
        let inv = inv_rms(run_sum(ss, RH, ln), dim, p.eps);
        let s0 = add_post4r(row, t, k, v0, q0, inv);
        let s1 = add_post4r(row, t + RH, k, v1, q1, inv);
        let s2 = add_post4r(row, t + 2u * RH, k, v2, q2, inv);
        let s3 = add_post4r(row, t + 3u * RH, k, v3, q3, inv);
        let s4 = add_post4r(row, t + 4u * RH, k, v4, q4, inv);
        let s5 = add_post4r(row, t + 5u * RH, k, v5, q5, inv);
        if (p.w_pre == NONE) {
            return;
        }
        let ss2 = ((sq_bf16x4(s0) + sq_bf16x4(s1)) + (sq_bf16x4(s2) + sq_bf16x4(s3))) + (sq_bf16x4(s4) + sq_bf16x4(s5));
        let inv2 = inv_rms(run_sum(ss2, RH, ln), dim, p.eps);
        store_pre4(row, t, k, s0, inv2);
        store_pre4(row, t + RH, k, s1, inv2);
        store_pre4(row, t + 2u * RH, k, s2, inv2);
        store_pre4(row, t + 3u * RH, k, s3, inv2);
        store_pre4(row, t + 4u * RH, k, s4, inv2);
        store_pre4(row, t + 5u * RH, k, s5, inv2);
        return;
    }
    sandwich_words(r * (dim / 2u), t, RH, select(0u, dim / 2u, live), dim, ln);
}

// plan=pipe: the CUDA plan's structure on WGSL. A workgroup of 256 walks
// rows g, g + G, ... (G = the grid, rows / PIPE rows a workgroup so it fits
// about one wave); row r + G's x and resid loads go out before row r's
// reductions and stores, so a workgroup always has a row in flight. Rows up
// to 3 * WG vectors (6144 elements) in named registers (this row: a, q; the
// next: b, c); any other shape runs a word at a time, row by row.
@compute @workgroup_size(256)
fn post_norm_add_pre_norm_bf16_pipe(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                                    ln: Lanes) {
    let lid = ln.lid;
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    let rows = u32(p.rows);
    let dim = u32(p.dim);
    let n = dim / 8u;
    if (dim % 8u == 0u && n <= 3u * WG && aligned4(p.resid_out, p.normed, p.resid, p.x) && aligned4(p.w_post, p.w_pre, NONE, NONE)) {
        var r = g;
        var a0 = ldx(r * n, lid, n);
        var a1 = ldx(r * n, lid + WG, n);
        var a2 = ldx(r * n, lid + 2u * WG, n);
        var q0 = ldr(r * n, lid, n);
        var q1 = ldr(r * n, lid + WG, n);
        var q2 = ldr(r * n, lid + 2u * WG, n);
        loop {
            let nr = r + p.gx;
            let k = select(0u, n, nr < rows);
            let b0 = ldx(nr * n, lid, k);
            let b1 = ldx(nr * n, lid + WG, k);
            let b2 = ldx(nr * n, lid + 2u * WG, k);
            let c0 = ldr(nr * n, lid, k);
            let c1 = ldr(nr * n, lid + WG, k);
            let c2 = ldr(nr * n, lid + 2u * WG, k);
            let row = r * n;
            let ss = (sq_bf16x4(a0) + sq_bf16x4(a1)) + sq_bf16x4(a2);
            let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
            let s0 = add_post4r(row, lid, n, a0, q0, inv);
            let s1 = add_post4r(row, lid + WG, n, a1, q1, inv);
            let s2 = add_post4r(row, lid + 2u * WG, n, a2, q2, inv);
            if (p.w_pre != NONE) {
                let ss2 = (sq_bf16x4(s0) + sq_bf16x4(s1)) + sq_bf16x4(s2);
                let inv2 = inv_rms(row_sum(ss2, ln), dim, p.eps);
                store_pre4(row, lid, n, s0, inv2);
                store_pre4(row, lid + WG, n, s1, inv2);
                store_pre4(row, lid + 2u * WG, n, s2, inv2);
            }
            if (nr >= rows) {
                break;
            }
            a0 = b0;
            a1 = b1;
            a2 = b2;
            q0 = c0;
            q1 = c1;
            q2 = c2;
            r = nr;
        }
        return;
    }
    for (var r = g; r < rows; r += p.gx) {
        sandwich_words(r * (dim / 2u), lid, WG, dim / 2u, dim, ln);
    }
}
