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
