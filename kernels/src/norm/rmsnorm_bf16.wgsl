// RPW rows a workgroup of 256, 256 / RPW invocations a row (RPW and NV are
// pipeline overrides the plan picks, norm/mod.rs): sum of squares, the row's
// reduction (run_sum: a subgroupShuffleXor butterfly where the row fits in a
// subgroup, no barrier; subgroup sums through workgroup memory past that; a
// workgroup-memory reduction without subgroups; Σ x² in any order), then the
// scaled store.
//
// Fast path (dim % 8 == 0 and out, x, w at word offsets that are multiples
// of 4): the row moves as vec4<u32> (8 bf16 per load). Rows of up to NV
// vectors an invocation are loaded in one straight-line burst of NV
// independent 16-byte loads, kept in registers across the reduction and
// stored from there: the row is read once. Longer rows loop over vectors
// and read x twice. Otherwise (odd dim/2 or misaligned views) the same math
// runs a word at a time.
struct Params {
    out: u32, x: u32, w: u32, rows: i32, dim: i32, eps: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> d_x: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_w: array<vec4<u32>>;

// Rows a workgroup (1, 2, 4 or 8) and vectors an invocation keeps in
// registers (at most 24).
override RPW: u32 = 1u;
override NV: u32 = 4u;

// Vector j of the row at vector offset xo, zero past n (zeros add nothing to Σ x²).
fn ldx(xo: u32, j: u32, n: u32) -> vec4<u32> {
    if (j < n) {
        return d_x[xo + j];
    }
    return vec4<u32>(0u);
}

fn store4(o: u32, j: u32, n: u32, v: vec4<u32>, inv: f32) {
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
    d_out[o + j] = pack_bf16x4(a, b);
}

fn word_x(i: u32) -> u32 {
    return d_x[i >> 2u][i & 3u];
}

fn store1(o: u32, j: u32, v: u32, inv: f32) {
    var a = bf16_lo(v) * inv;
    var b = bf16_hi(v) * inv;
    if (p.w != NONE) {
        let wi = p.w + j;
        let w = d_w[wi >> 2u][wi & 3u];
        a *= bf16_lo(w);
        b *= bf16_hi(w);
    }
    let oi = o + j;
    d_out[oi >> 2u][oi & 3u] = pack_bf16(a, b);
}

@compute @workgroup_size(256)
fn rmsnorm_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                ln: Lanes) {
    let tn = 256u / RPW;
    let me = lane_order(ln);
    let t = me % tn;
    let r = group_x(wid, nwg, p.fold) * RPW + me / tn;
    // Rows past the end load and store nothing but join every reduction.
    let live = r < u32(p.rows);
    let dim = u32(p.dim);
    if (dim % 8u == 0u && aligned4(p.out, p.x, p.w, NONE)) {
        let n = dim / 8u;
        let xo = p.x / 4u + r * n;
        let o = p.out / 4u + r * n;
        if (n <= NV * tn) {
            var v: array<vec4<u32>, 24>;
            var ss = 0.0;
            for (var i = 0u; i < NV; i++) {
                if (live) {
                    v[i] = ldx(xo, t + i * tn, n);
                }
            }
            for (var i = 0u; i < NV; i++) {
                ss += sq_bf16x4(v[i]);
            }
            let inv = inv_rms(run_sum(ss, tn, ln), dim, p.eps);
            if (!live) {
                return;
            }
            for (var i = 0u; i < NV; i++) {
                store4(o, t + i * tn, n, v[i], inv);
            }
            return;
        }
        var ss = 0.0;
        if (live) {
            for (var j = t; j < n; j += tn) {
                ss += sq_bf16x4(d_x[xo + j]);
            }
        }
        let inv = inv_rms(run_sum(ss, tn, ln), dim, p.eps);
        if (!live) {
            return;
        }
        for (var j = t; j < n; j += tn) {
            store4(o, j, n, d_x[xo + j], inv);
        }
        return;
    }
    let hw = dim / 2u;
    let xo = p.x + r * hw;
    let o = p.out + r * hw;
    var ss = 0.0;
    if (live) {
        for (var j = t; j < hw; j += tn) {
            let v = word_x(xo + j);
            let a = bf16_lo(v);
            let b = bf16_hi(v);
            ss += a * a + b * b;
        }
    }
    let inv = inv_rms(run_sum(ss, tn, ln), dim, p.eps);
    if (!live) {
        return;
    }
    for (var j = t; j < hw; j += tn) {
        store1(o, j, word_x(xo + j), inv);
    }
}
