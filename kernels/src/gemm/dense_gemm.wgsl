// The strict-order dense GEMMs: dense_gemm_bf16, dense_gemm_router,
// dense_gemm_tc and dense_gemm_bf16_pipelined share one tiled shader (one
// entry point each). The tensor-core contracts leave the K order free, but
// WGSL has no bf16 matrix units to gain from reordering, so all four sum in
// the scalar order: each equals the CPU reference exactly, the router equals
// dense_gemm_bf16 by construction, and dense_gemm_tc_scaled_acc (the same
// core) equals dense_gemm_tc then scaled_add_bf16. The WGSL plan
// (gemm/mod.rs) launches a (⌈N/128⌉, ⌈M/128⌉) grid of tiles, or
// for M ≤ 16 ⌈N/32⌉ workgroups of the small path (dense_gemm_small).
struct Params {
    a: u32, b: u32, c: u32, m: u32, n: u32, k: u32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_a: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_b: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_c: array<u32>;

//! include "gemm/dense_tile_core.wgsli"

// c = bf16(acc); N is even, so every column pair is one output word.
fn dense(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) {
    let gx = group_x(wid, nwg, p.fold);
    if (gx >= p.gx) {
        return;
    }
    let m0 = group_y(wid, p.fold) * TILE;
    let n0 = gx * TILE;
    tile_sums(m0, n0, 0u, p.k, lid);
    let tx = lid % 16u;
    let ty = lid / 16u;
    for (var i = 0u; i < 8u; i++) {
        let row = m0 + tile_row(i, ty);
        if (row >= p.m) {
            continue;
        }
        for (var j = 0u; j < 2u; j++) {
            let col = n0 + 4u * tx + 64u * j;
            let v = acc[2u * i + j];
            let o = p.c + (row * p.n + col) / 2u;
            if (col < p.n) {
                d_c[o] = pack_bf16(v.x, v.y);
            }
            if (col + 2u < p.n) {
                d_c[o + 1u] = pack_bf16(v.z, v.w);
            }
        }
    }
}

@compute @workgroup_size(256)
fn dense_gemm_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    dense(wid, nwg, lid);
}

@compute @workgroup_size(256)
fn dense_gemm_router(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    dense(wid, nwg, lid);
}

@compute @workgroup_size(256)
fn dense_gemm_tc(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    dense(wid, nwg, lid);
}

@compute @workgroup_size(256)
fn dense_gemm_bf16_pipelined(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                             @builtin(local_invocation_index) lid: u32) {
    dense(wid, nwg, lid);
}

// Small M: c = bf16(acc) from the small path, a thread per output word.
@compute @workgroup_size(128)
fn dense_gemm_small(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let gx = group_x(wid, nwg, p.fold);
    if (gx >= p.gx) {
        return;
    }
    let n0 = gx * SN;
    small_sums(n0, 0u, p.k, lid);
    small_publish(lid);
    for (var q = lid; q < M * SN / 2u; q += 128u) {
        let row = q / (SN / 2u);
        let pair = q % (SN / 2u);
        let col = n0 + 2u * pair;
        if (col < p.n) {
            d_c[p.c + (row * p.n + col) / 2u] = pack_bf16(sas[row * SK + 2u * pair], sas[row * SK + 2u * pair + 1u]);
        }
    }
}
