// One workgroup of 256 per row: sum of squares, workgroup reduction
// (row_sum: subgroupAdd where the device has subgroups, a workgroup-memory
// tree otherwise; Σ x² in any order), then the scaled store.
//
// Fast path (dim % 8 == 0 and out, x, w at word offsets that are multiples
// of 4): the row moves as vec4<u32> (8 bf16 per load). Rows up to 8192
// elements (1024 vectors) are loaded in one straight-line burst of four
// independent 16-byte loads per invocation, kept in registers across the
// reduction and stored from there: the row is read once, and each
// invocation has up to 64 bytes in flight instead of one 4-byte word.
// Longer rows loop over vectors and read x twice. Otherwise (odd dim/2 or
// misaligned views) the same math runs a word at a time.
struct Params {
    out: u32, x: u32, w: u32, rows: i32, dim: i32, eps: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> d_x: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_w: array<vec4<u32>>;

const WG: u32 = 256u;

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
    let lid = ln.lid;
    let r = group_x(wid, nwg, p.fold);
    if (r >= p.gx) {
        return;
    }
    let dim = u32(p.dim);
    if (dim % 8u == 0u && aligned4(p.out, p.x, p.w, NONE)) {
        let n = dim / 8u;
        let xo = p.x / 4u + r * n;
        let o = p.out / 4u + r * n;
        if (n <= 4u * WG) {
            let v0 = ldx(xo, lid, n);
            let v1 = ldx(xo, lid + WG, n);
            let v2 = ldx(xo, lid + 2u * WG, n);
            let v3 = ldx(xo, lid + 3u * WG, n);
            let ss = (sq_bf16x4(v0) + sq_bf16x4(v1)) + (sq_bf16x4(v2) + sq_bf16x4(v3));
            let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
            store4(o, lid, n, v0, inv);
            store4(o, lid + WG, n, v1, inv);
            store4(o, lid + 2u * WG, n, v2, inv);
            store4(o, lid + 3u * WG, n, v3, inv);
            return;
        }
        var ss = 0.0;
        for (var j = lid; j < n; j += WG) {
            ss += sq_bf16x4(d_x[xo + j]);
        }
        let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
        for (var j = lid; j < n; j += WG) {
            store4(o, j, n, d_x[xo + j], inv);
        }
        return;
    }
    let hw = dim / 2u;
    let xo = p.x + r * hw;
    let o = p.out + r * hw;
    var ss = 0.0;
    for (var j = lid; j < hw; j += WG) {
        let v = word_x(xo + j);
        let a = bf16_lo(v);
        let b = bf16_hi(v);
        ss += a * a + b * b;
    }
    let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
    for (var j = lid; j < hw; j += WG) {
        store1(o, j, word_x(xo + j), inv);
    }
}
