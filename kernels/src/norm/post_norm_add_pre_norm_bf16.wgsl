// RPW rows a workgroup of 256, 256 / RPW invocations a row (RPW and NV are
// pipeline overrides the plan picks, norm/mod.rs; Σ x² through run_sum: a
// subgroupShuffleXor butterfly where the row fits in a subgroup, subgroup
// sums through workgroup memory past that, a workgroup-memory reduction
// without subgroups): resid_out = bf16(resid + bf16(rmsnorm(x; w_post))),
// then normed = bf16(rmsnorm(resid_out; w_pre)).
//
// Fast path (dim % 8 == 0 and every view at a word offset that is a multiple
// of 4): rows move as vec4<u32> (8 bf16 per load). Rows of up to NV vectors
// an invocation keep x, then resid_out, in registers: NV independent 16-byte
// loads an invocation issued in one burst, so each row is read once. Longer
// rows loop over vectors and re-read. Otherwise the same math runs a word at
// a time. An invocation owns the same words in every pass, so re-reading its
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

// Rows a workgroup (1, 2, 4 or 8) and vectors an invocation keeps in
// registers (at most 24).
override RPW: u32 = 1u;
override NV: u32 = 4u;

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
    let tn = 256u / RPW;
    let me = lane_order(ln);
    let t = me % tn;
    let r = group_x(wid, nwg, p.fold) * RPW + me / tn;
    // Rows past the end load and store nothing but join every reduction.
    let live = r < u32(p.rows);
    let dim = u32(p.dim);
    if (dim % 8u == 0u && aligned4(p.resid_out, p.normed, p.resid, p.x) && aligned4(p.w_post, p.w_pre, NONE, NONE)) {
        let n = dim / 8u;
        let row = r * n;
        if (n <= NV * tn) {
            var v: array<vec4<u32>, 24>;
            for (var i = 0u; i < NV; i++) {
                if (live) {
                    v[i] = ldx(row, t + i * tn, n);
                }
            }
            var ss = 0.0;
            for (var i = 0u; i < NV; i++) {
                ss += sq_bf16x4(v[i]);
            }
            let inv = inv_rms(run_sum(ss, tn, ln), dim, p.eps);
            var ss2 = 0.0;
            for (var i = 0u; i < NV; i++) {
                if (live) {
                    v[i] = add_post4(row, t + i * tn, n, v[i], inv);
                }
                ss2 += sq_bf16x4(v[i]);
            }
            if (p.w_pre == NONE) {
                return;
            }
            let inv2 = inv_rms(run_sum(ss2, tn, ln), dim, p.eps);
            if (!live) {
                return;
            }
            for (var i = 0u; i < NV; i++) {
                store_pre4(row, t + i * tn, n, v[i], inv2);
            }
            return;
        }
        var ss = 0.0;
        if (live) {
            for (var j = t; j < n; j += tn) {
                ss += sq_bf16x4(d_x[p.x / 4u + row + j]);
            }
        }
        let inv = inv_rms(run_sum(ss, tn, ln), dim, p.eps);
        var ss2 = 0.0;
        if (live) {
            for (var j = t; j < n; j += tn) {
                ss2 += sq_bf16x4(add_post4(row, j, n, d_x[p.x / 4u + row + j], inv));
            }
        }
        if (p.w_pre == NONE) {
            return;
        }
        let inv2 = inv_rms(run_sum(ss2, tn, ln), dim, p.eps);
        if (!live) {
            return;
        }
        for (var j = t; j < n; j += tn) {
            store_pre4(row, j, n, d_resid_out[p.resid_out / 4u + row + j], inv2);
        }
        return;
    }
    let hw = dim / 2u;
    let row = r * hw;
    var ss = 0.0;
    if (live) {
        for (var j = t; j < hw; j += tn) {
            ss += sq(word_x(p.x + row + j));
        }
    }
    let inv = inv_rms(run_sum(ss, tn, ln), dim, p.eps);
    var ss2 = 0.0;
    if (live) {
        for (var j = t; j < hw; j += tn) {
            ss2 += sq(add_post(row, j, word_x(p.x + row + j), inv));
        }
    }
    if (p.w_pre == NONE) {
        return;
    }
    let inv2 = inv_rms(run_sum(ss2, tn, ln), dim, p.eps);
    if (!live) {
        return;
    }
    for (var j = t; j < hw; j += tn) {
        let oi = p.resid_out + row + j;
        store_pre(row, j, d_resid_out[oi >> 2u][oi & 3u], inv2);
    }
}
