// w4a16_gemm_n128 with an explicit weight row stride `ldb` (a multiple of 16,
// ≥ N, columns N..ldb zero padding) for N not a multiple of 16, such as a
// vocabulary of 248077. The tile core is w4a16_gemm.wgsl's, so the sums are
// the reference's; the host plan launches a (⌈N/128⌉, ⌈M/128⌉) grid.
//
// With N odd, the output element (m, n) is bf16 number m·N + n, so a row's
// first or last element can share a word with the neighbouring row's, which
// another workgroup writes. Odd N therefore stores every element as its own
// half word with two atomics (clear our half, then set it): the operations of
// the two owners touch disjoint bits, so the word ends right in any order.
// Even N stores whole words.
struct Params {
    a: u32, bq: u32, bs: u32, scale2: f32, c: u32, m: u32, n: u32, k: u32, ldb: u32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_a: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_bq: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_bs: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_c: array<atomic<u32>>;

// ---- begin w4a16 tile core ----
// Shared verbatim by w4a16_gemm.wgsl and w4a16_gemm_n128_ldb.wgsl (WGSL has
// no include; a test in backend-wgpu/tests/gemm.rs checks the copies are
// identical).
//
// The dense tile core's scheme (dense_gemm.wgsl) with NVFP4 weights: a
// 256-thread workgroup computes a TILE × TILE output tile, thread (tx, ty)
// owning 8 × 8 outputs. Each stage is one scale block (BK = 16 k): the 8
// K-major code rows of the tile are 8 × 32 coalesced words, one per thread,
// each holding 4 columns × 2 k; the thread decodes them with the block's
// scale word into w = e2m1 · e4m3 (exact in f32) and stores two vec4s of the
// k-major weight tile. Every output sums from +0 in strictly increasing k, so
// every variant equals the reference's order (and w4a16_gemm_n128_m128_bf16
// equals w4a16_gemm bit for bit); bf16 × (e2m1 · e4m3) is exact in f32, so an
// FMA changes nothing. K % 16 == 0: stages never straddle the end of K.
const TILE: u32 = 128u;
const BK: u32 = 16u;
// vec4 slots per staged k: TILE / 4.
const Q: u32 = 32u;

var<workgroup> sa: array<vec4<f32>, 512>;
var<workgroup> sb: array<vec4<f32>, 512>;
var<private> acc: array<vec4<f32>, 16>;

// Tile row of the thread's i-th output row (i in 0..8).
fn tile_row(i: u32, ty: u32) -> u32 {
    return select(64u + 4u * ty + i - 4u, 4u * ty + i, i < 4u);
}

// e2m1 code (low 4 bits): sign, 2-bit exponent, 1-bit mantissa. Exponent e > 0
// is 2^(e-1) · (1 + m/2), written straight into f32 bits; e = 0 is m · 0.5.
fn e2m1(c: u32) -> f32 {
    let mag = c & 7u;
    let normal = (((mag >> 1u) + 126u) << 23u) | ((mag & 1u) << 22u);
    let bits = select(normal, select(0u, 0x3f000000u, mag == 1u), mag < 2u);
    return bitcast<f32>(bits | ((c & 8u) << 28u));
}

// acc = Σ_k a[m0 + row, k] · w(n0 + col, k) for the thread's 8 × 8 outputs
// (acc[2i + j]: row tile_row(i), columns 4tx + 64j + 0..3). `ldb` is the
// weight row stride in bytes (a multiple of 16); columns at or past it are
// staged as 0.
fn tile_sums(m0: u32, n0: u32, ldb: u32, lid: u32) {
    let kw = p.k / 2u;
    let lw4 = ldb / 4u;
    let tx = lid % 16u;
    let ty = lid / 16u;
    // A loader: row quad q (0..32), word lw (0..8) of the stage.
    let q = lid / 8u;
    let lw = lid % 8u;
    // Weight loader: code row kp (0..8) of the stage, column word nw (0..32).
    let kp = lid / 32u;
    let nw = lid % 32u;
    let wcol = n0 + 4u * nw;
    for (var i = 0u; i < 16u; i++) {
        acc[i] = vec4<f32>(0.0);
    }
    for (var kt = 0u; kt < p.k; kt += BK) {
        var alo = vec4<f32>(0.0);
        var ahi = vec4<f32>(0.0);
        for (var r = 0u; r < 4u; r++) {
            let row = m0 + 4u * q + r;
            var v = 0u;
            if (row < p.m) {
                v = d_a[p.a + row * kw + kt / 2u + lw];
            }
            alo[r] = bf16_lo(v);
            ahi[r] = bf16_hi(v);
        }
        var codes = 0u;
        var scales = 0u;
        if (wcol < ldb) {
            codes = d_bq[p.bq + (kt / 2u + kp) * lw4 + wcol / 4u];
            scales = d_bs[p.bs + (kt / BK) * lw4 + wcol / 4u];
        }
        var wlo = vec4<f32>(0.0);
        var whi = vec4<f32>(0.0);
        for (var j = 0u; j < 4u; j++) {
            let byte = codes >> (8u * j);
            let s = e4m3((scales >> (8u * j)) & 0xffu);
            wlo[j] = e2m1(byte) * s;
            whi[j] = e2m1(byte >> 4u) * s;
        }
        workgroupBarrier();
        sa[2u * lw * Q + q] = alo;
        sa[(2u * lw + 1u) * Q + q] = ahi;
        sb[2u * kp * Q + nw] = wlo;
        sb[(2u * kp + 1u) * Q + nw] = whi;
        workgroupBarrier();
        for (var t = 0u; t < BK; t++) {
            let a0 = sa[t * Q + ty];
            let a1 = sa[t * Q + 16u + ty];
            let b0 = sb[t * Q + tx];
            let b1 = sb[t * Q + 16u + tx];
            acc[0] = acc[0] + a0.x * b0;
            acc[1] = acc[1] + a0.x * b1;
            acc[2] = acc[2] + a0.y * b0;
            acc[3] = acc[3] + a0.y * b1;
            acc[4] = acc[4] + a0.z * b0;
            acc[5] = acc[5] + a0.z * b1;
            acc[6] = acc[6] + a0.w * b0;
            acc[7] = acc[7] + a0.w * b1;
            acc[8] = acc[8] + a1.x * b0;
            acc[9] = acc[9] + a1.x * b1;
            acc[10] = acc[10] + a1.y * b0;
            acc[11] = acc[11] + a1.y * b1;
            acc[12] = acc[12] + a1.z * b0;
            acc[13] = acc[13] + a1.z * b1;
            acc[14] = acc[14] + a1.w * b0;
            acc[15] = acc[15] + a1.w * b1;
        }
    }
}
// ---- end w4a16 tile core ----

// Stores bf16 element e (flattened index) of c alone.
fn store_half(e: u32, x: f32) {
    let o = p.c + e / 2u;
    let shift = 16u * (e % 2u);
    atomicAnd(&d_c[o], ~(0xffffu << shift));
    atomicOr(&d_c[o], (bf16_bits(x) & 0xffffu) << shift);
}

@compute @workgroup_size(256)
fn w4a16_gemm_n128_ldb(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                       @builtin(local_invocation_index) lid: u32) {
    let gx = group_x(wid, nwg, p.fold);
    if (gx >= p.gx) {
        return;
    }
    let m0 = group_y(wid, p.fold) * TILE;
    let n0 = gx * TILE;
    tile_sums(m0, n0, p.ldb, lid);
    let tx = lid % 16u;
    let ty = lid / 16u;
    let odd = (p.n & 1u) == 1u;
    for (var i = 0u; i < 8u; i++) {
        let row = m0 + tile_row(i, ty);
        if (row >= p.m) {
            continue;
        }
        for (var j = 0u; j < 2u; j++) {
            let col = n0 + 4u * tx + 64u * j;
            let v = p.scale2 * acc[2u * i + j];
            let e = row * p.n + col;
            if (odd) {
                for (var q = 0u; q < 4u; q++) {
                    if (col + q < p.n) {
                        store_half(e + q, v[q]);
                    }
                }
            } else {
                if (col < p.n) {
                    atomicStore(&d_c[p.c + e / 2u], pack_bf16(v.x, v.y));
                }
                if (col + 2u < p.n) {
                    atomicStore(&d_c[p.c + e / 2u + 1u], pack_bf16(v.z, v.w));
                }
            }
        }
    }
}
