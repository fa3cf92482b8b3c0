// One workgroup of 256 per row (Σ x² through row_sum: subgroupAdd where the
// device has subgroups, a workgroup-memory tree otherwise): t = bf16(rmsnorm(x; w)), s = bf16(mid + t),
// out = bf16(s * layer_scalar).
//
// Fast path (dim % 8 == 0 and out, mid, x, w at word offsets that are
// multiples of 4): rows move as vec4<u32> (8 bf16 per load). Rows up to
// SLOTS · 2048 elements keep x in registers: up to SLOTS (at most four)
// independent 16-byte loads per invocation in one burst, so x is read once.
// Longer rows loop over vectors and read x twice. Otherwise the same math
// runs a word at a time.
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
// Vectors of a row an invocation holds on the register path, 1..=4: the plan
// passes ceil(dim / 8 / WG) (norm/mod.rs), so a slot that would only ever
// hold zeros (dim 5376: 672 vectors, three slots) is not compiled and its
// registers do not count against the workgroups an SM holds (H200, 4096 x
// 5376: 0.0560-0.0570 ms against 0.0589-0.0594 with four slots). Any value
// is correct: a row longer than SLOTS · WG vectors takes the loop. Loading
// mid beside x (before the reduction) or all of it before the first store
// measured slower (0.0603-0.0621 ms).
override SLOTS: u32 = 4u;

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
        if (n <= SLOTS * WG) {
            // Unused slots stay zero: they add +0 to Σ x², so every SLOTS
            // gives the same sum in the same order.
            let v0 = ldx(row, lid, n);
            var v1 = vec4<u32>(0u);
            var v2 = vec4<u32>(0u);
            var v3 = vec4<u32>(0u);
            if (SLOTS > 1u) {
                v1 = ldx(row, lid + WG, n);
            }
            if (SLOTS > 2u) {
                v2 = ldx(row, lid + 2u * WG, n);
            }
            if (SLOTS > 3u) {
                v3 = ldx(row, lid + 3u * WG, n);
            }
            let ss = (sq_bf16x4(v0) + sq_bf16x4(v1)) + (sq_bf16x4(v2) + sq_bf16x4(v3));
            let inv = inv_rms(row_sum(ss, ln), dim, p.eps);
            store4(row, lid, n, v0, inv, ls);
            if (SLOTS > 1u) {
                store4(row, lid + WG, n, v1, inv, ls);
            }
            if (SLOTS > 2u) {
                store4(row, lid + 2u * WG, n, v2, inv, ls);
            }
            if (SLOTS > 3u) {
                store4(row, lid + 3u * WG, n, v3, inv, ls);
            }
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
