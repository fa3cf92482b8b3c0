// dense_gemm_splitk_bf16: two passes over the backend's workspace
// d_workspace, the splits · M · N f32 partial sums ws (plane s row-major
// [M, N], from word 0).
//
// Pass 1 (dense_gemm_splitk_bf16, or dense_gemm_splitk_bf16_small for
// M ≤ 16): ws[s, m, n] = Σ_{k ∈ chunk s} a[m, k] · b[n, k] in f32, with the
// dense tile core (dense_tile_core.wgsli) run over chunk s only; chunk bounds
// need not be even, the core masks k per element. Grid (⌈N/128⌉, ⌈M/128⌉,
// splits), or (⌈N/32⌉, 1, splits) on the small path (the plan in
// gemm/mod.rs).
// Pass 2 (dense_gemm_splitk_bf16_reduce): c[m, n] = bf16(Σ_s ws[s, m, n]),
// summed from +0 in s order, a thread per output word (element pair) of the
// flattened [M, N] output (N is even), ⌈M·N/512⌉ workgroups: the planes are
// read with unit stride.
struct Params {
    a: u32, b: u32, c: u32, m: u32, n: u32, k: u32, splits: u32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_a: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_b: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_c: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_workspace: array<u32>;

//! include "gemm/dense_tile_core.wgsli"

@compute @workgroup_size(256)
fn dense_gemm_splitk_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                          @builtin(local_invocation_index) lid: u32) {
    let gx = group_x(wid, nwg, p.fold);
    if (gx >= p.gx) {
        return;
    }
    let m0 = group_y(wid, p.fold) * TILE;
    let n0 = gx * TILE;
    // The plan never folds a 3-D grid, so z is the split.
    let s = wid.z;
    let len = (p.k + p.splits - 1u) / p.splits;
    let klo = min(s * len, p.k);
    let khi = min(klo + len, p.k);
    tile_sums(m0, n0, klo, khi, lid);
    let tx = lid % 16u;
    let ty = lid / 16u;
    let plane = s * p.m * p.n;
    for (var i = 0u; i < 8u; i++) {
        let row = m0 + tile_row(i, ty);
        if (row >= p.m) {
            continue;
        }
        for (var j = 0u; j < 2u; j++) {
            let col = n0 + 4u * tx + 64u * j;
            let v = acc[2u * i + j];
            let o = plane + row * p.n + col;
            for (var e = 0u; e < 4u; e++) {
                if (col + e < p.n) {
                    d_workspace[o + e] = bitcast<u32>(v[e]);
                }
            }
        }
    }
}

// Small M: the small path over chunk s (z), f32 stores straight from registers.
@compute @workgroup_size(128)
fn dense_gemm_splitk_bf16_small(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                                @builtin(local_invocation_index) lid: u32) {
    let gx = group_x(wid, nwg, p.fold);
    if (gx >= p.gx) {
        return;
    }
    let s = wid.z;
    let len = (p.k + p.splits - 1u) / p.splits;
    let klo = min(s * len, p.k);
    let khi = min(klo + len, p.k);
    let n0 = gx * SN;
    small_sums(n0, klo, khi, lid);
    let col = n0 + lid % 32u;
    let rg = lid / 32u;
    for (var i = 0u; i < 4u; i++) {
        let row = rg + 4u * i;
        if (row < M && col < p.n) {
            d_workspace[s * p.m * p.n + row * p.n + col] = bitcast<u32>(sacc[i]);
        }
    }
}

@compute @workgroup_size(256)
fn dense_gemm_splitk_bf16_reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                                 @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    let w = g * 256u + lid;
    let plane = p.m * p.n;
    if (g >= p.gx || w >= plane / 2u) {
        return;
    }
    var lo = 0.0;
    var hi = 0.0;
    for (var s = 0u; s < p.splits; s++) {
        let e = s * plane + 2u * w;
        lo = lo + bitcast<f32>(d_workspace[e]);
        hi = hi + bitcast<f32>(d_workspace[e + 1u]);
    }
    d_c[p.c + w] = pack_bf16(lo, hi);
}
