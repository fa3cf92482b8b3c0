// c = bf16(c + scale · bf16(acc)) in one pass. acc comes from the same tile
// core as dense_gemm_tc (dense_tile_core.wgsli), and the epilogue is
// scaled_add_bf16's, so the result equals dense_gemm_tc into scratch then
// scaled_add_bf16 bit for bit. Grid (⌈N/128⌉, ⌈M/128⌉) from the WGSL plan,
// or ⌈N/32⌉ workgroups of the small path for M ≤ 16 (as dense_gemm_tc).
struct Params {
    a: u32, b: u32, c: u32, m: u32, n: u32, k: u32, scale: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_a: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_b: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_c: array<u32>;

// `scale · t` is not exact in f32, so a driver fusing it into the following
// add (allowed without SPIR-V NoContraction, which naga does not emit) would
// round once instead of twice. OR-ing in x3, a runtime word the host always
// sets to 0, hides the product's value from the optimizer and forces it to
// be rounded to f32 first.
fn rounded(x: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) | p.x3);
}

fn scaled_add(c: f32, t: f32) -> f32 {
    let u = rounded(p.scale * t);
    return c + u;
}

//! include "gemm/dense_tile_core.wgsli"

@compute @workgroup_size(256)
fn dense_gemm_tc_scaled_acc(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                            @builtin(local_invocation_index) lid: u32) {
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
                let w = d_c[o];
                d_c[o] = pack_bf16(scaled_add(bf16_lo(w), bf16_round(v.x)), scaled_add(bf16_hi(w), bf16_round(v.y)));
            }
            if (col + 2u < p.n) {
                let w = d_c[o + 1u];
                d_c[o + 1u] = pack_bf16(scaled_add(bf16_lo(w), bf16_round(v.z)), scaled_add(bf16_hi(w), bf16_round(v.w)));
            }
        }
    }
}

// Small M: the small path's sums with the same epilogue, a thread per output word.
@compute @workgroup_size(128)
fn dense_gemm_tc_scaled_acc_small(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
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
            let o = p.c + (row * p.n + col) / 2u;
            let w = d_c[o];
            let t0 = bf16_round(sas[row * SK + 2u * pair]);
            let t1 = bf16_round(sas[row * SK + 2u * pair + 1u]);
            d_c[o] = pack_bf16(scaled_add(bf16_lo(w), t0), scaled_add(bf16_hi(w), t1));
        }
    }
}
