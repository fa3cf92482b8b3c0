// w4a16_gemm_n128 with an explicit weight row stride `ldb` (a multiple of 16,
// ≥ N, columns N..ldb zero padding) for N not a multiple of 16, such as a
// vocabulary of 248077. The tile core is w4a16_gemm.wgsl's
// (w4a16_tile_core.wgsli), so the sums are the reference's; the WGSL plan
// launches a (⌈N/128⌉, ⌈M/128⌉) grid.
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

//! include "gemm/w4a16_tile_core.wgsli"

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
