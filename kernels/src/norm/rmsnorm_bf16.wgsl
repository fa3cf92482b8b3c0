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

// Two rows a workgroup (SWITCHYARD_WGSL_NORM_PLAN=r2, measured against the
// entry above): RH = 128 invocations a row, taken in lane order so that a
// row's invocations are whole subgroups and Σ x² meets in one run_sum
// (shuffles, then one wg_red exchange across the row's subgroups). Rows up
// to 6 * RH vectors (6144 elements) sit in six named vec4 registers, all
// loads issued before the reduction: the earlier register arrays indexed in
// override-bounded loops were 1.1-2.8x slower on the H200. Any other shape
// runs a word at a time with RH invocations a row. A second row past `rows`
// (odd row counts) loads and stores nothing but still reaches the barriers.
const RH: u32 = 128u;

@compute @workgroup_size(256)
fn rmsnorm_bf16_r2(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
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
    if (dim % 8u == 0u && n <= 6u * RH && aligned4(p.out, p.x, p.w, NONE)) {
        let m = select(0u, n, live);
        let xo = p.x / 4u + r * n;
        let o = p.out / 4u + r * n;
        let v0 = ldx(xo, t, m);
        let v1 = ldx(xo, t + RH, m);
        let v2 = ldx(xo, t + 2u * RH, m);
        let v3 = ldx(xo, t + 3u * RH, m);
        let v4 = ldx(xo, t + 4u * RH, m);
        let v5 = ldx(xo, t + 5u * RH, m);
        let ss = ((sq_bf16x4(v0) + sq_bf16x4(v1)) + (sq_bf16x4(v2) + sq_bf16x4(v3))) + (sq_bf16x4(v4) + sq_bf16x4(v5));
        let inv = inv_rms(run_sum(ss, RH, ln), dim, p.eps);
        store4(o, t, m, v0, inv);
        store4(o, t + RH, m, v1, inv);
        store4(o, t + 2u * RH, m, v2, inv);
        store4(o, t + 3u * RH, m, v3, inv);
        store4(o, t + 4u * RH, m, v4, inv);
        store4(o, t + 5u * RH, m, v5, inv);
        return;
    }
    let hw = select(0u, dim / 2u, live);
    let xo = p.x + r * (dim / 2u);
    let o = p.out + r * (dim / 2u);
    var ss = 0.0;
    for (var j = t; j < hw; j += RH) {
        let v = word_x(xo + j);
        let a = bf16_lo(v);
        let b = bf16_hi(v);
        ss += a * a + b * b;
    }
    let inv = inv_rms(run_sum(ss, RH, ln), dim, p.eps);
    for (var j = t; j < hw; j += RH) {
        store1(o, j, word_x(xo + j), inv);
    }
}

// plan=pipe (SWITCHYARD_WGSL_NORM_PLAN=pipe, measured against the entries
// above): the CUDA plan's structure on WGSL. A workgroup of 256 walks rows
// g, g + G, ... (G = the grid, rows / PIPE rows a workgroup so it fits about
// one wave), and row r + G's x loads go out before row r's reduction and
// stores, so a workgroup always has a row in flight. Rows up to 3 * WG
// vectors (6144 elements), in named registers (a0..a2 this row, b0..b2 the
// next); any other shape takes rmsnorm_bf16's paths row by row.
@compute @workgroup_size(256)
fn rmsnorm_bf16_pipe(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     ln: Lanes) {
    let lid = ln.lid;
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    let rows = u32(p.rows);
    let dim = u32(p.dim);
    let n = dim / 8u;
    if (dim % 8u == 0u && n <= 3u * WG && aligned4(p.out, p.x, p.w, NONE)) {
        var r = g;
        var a0 = ldx(p.x / 4u + r * n, lid, n);
        var a1 = ldx(p.x / 4u + r * n, lid + WG, n);
        var a2 = ldx(p.x / 4u + r * n, lid + 2u * WG, n);
        loop {
            let nr = r + p.gx;
            let m = select(0u, n, nr < rows);
            let b0 = ldx(p.x / 4u + nr * n, lid, m);
            let b1 = ldx(p.x / 4u + nr * n, lid + WG, m);
            let b2 = ldx(p.x / 4u + nr * n, lid + 2u * WG, m);
            let ss = (sq_bf16x4(a0) + sq_bf16x4(a1)) + sq_bf16x4(a2);
            let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
            let o = p.out / 4u + r * n;
            store4(o, lid, n, a0, inv);
            store4(o, lid + WG, n, a1, inv);
            store4(o, lid + 2u * WG, n, a2, inv);
            if (nr >= rows) {
                break;
            }
            a0 = b0;
            a1 = b1;
            a2 = b2;
            r = nr;
        }
        return;
    }
    for (var r = g; r < rows; r += p.gx) {
        if (dim % 8u == 0u && aligned4(p.out, p.x, p.w, NONE)) {
            let xo = p.x / 4u + r * n;
            var ss = 0.0;
            for (var j = lid; j < n; j += WG) {
                ss += sq_bf16x4(d_x[xo + j]);
            }
            let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
            for (var j = lid; j < n; j += WG) {
                store4(p.out / 4u + r * n, j, n, d_x[xo + j], inv);
            }
        } else {
            let hw = dim / 2u;
            let xo = p.x + r * hw;
            var ss = 0.0;
            for (var j = lid; j < hw; j += WG) {
                let v = word_x(xo + j);
                let a = bf16_lo(v);
                let b = bf16_hi(v);
                ss += a * a + b * b;
            }
            let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
            for (var j = lid; j < hw; j += WG) {
                store1(p.out + r * hw, j, word_x(xo + j), inv);
            }
        }
    }
}
