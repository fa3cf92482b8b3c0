// Split-K phase 2: c[m, n] = bf16(Σ_s ws[s, m, n]), summed from +0 in s order.
// A thread per output word (element pair) of the flattened [M, N] output (N
// is even), ⌈M·N/512⌉ workgroups from the host plan: the planes are read
// with unit stride.
struct Params {
    ws: u32, c: u32, m: u32, n: u32, splits: u32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_ws: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_c: array<u32>;

@compute @workgroup_size(256)
fn dense_gemm_splitk_reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
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
        let e = p.ws + s * plane + 2u * w;
        lo = lo + bitcast<f32>(d_ws[e]);
        hi = hi + bitcast<f32>(d_ws[e + 1u]);
    }
    d_c[p.c + w] = pack_bf16(lo, hi);
}
