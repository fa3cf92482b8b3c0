// dense_gemv_bf16: c = bf16(a · bᵀ) for m ≤ 16 activation rows, stored in
// the segmented layout (column j of row i at out_index(i, j)). The weight
// stream and the reduction are gemv_common.wgsli's; workgroup (g, s) takes
// weight rows [128 g, +128) over K chunk s, [s · x0, (s + 1) · x0) ∩ [0, k).
//
// One chunk (x1 = 1): dense_gemv_bf16 writes bf16 outputs, an invocation
// per pair of adjacent columns. Several: dense_gemv_bf16_partial writes the
// f32 sums to workspace [chunks, m, n], and dense_gemv_bf16_reduce (an
// invocation per output word, x0 = chunks) adds them from the first chunk in
// order and stores the bf16 pair.
struct Params {
    a: u32, b: u32, c: u32, m: u32, n: u32, k: u32, seg1: u32, seg2: u32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_a: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> d_b: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_c: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> d_workspace: array<u32>;

//! include "gemv/gemv_common.wgsli"

// Past n the last row is read again (in bounds); its sums are dropped.
fn weight_row(g: u32, lr: u32) -> u32 {
    return min(g * NR + lr, p.n - 1u);
}

// Element of output column j of row i in the segmented layout.
fn out_index(i: u32, j: u32) -> u32 {
    if (j < p.seg1) {
        return i * p.seg1 + j;
    }
    if (j < p.seg2) {
        return p.m * p.seg1 + i * (p.seg2 - p.seg1) + (j - p.seg1);
    }
    return p.m * p.seg2 + i * (p.n - p.seg2) + (j - p.seg2);
}

// (i, j) of element e (< m · n): the inverse of out_index. A segment is
// divided by only when e lies in it, so its width is not 0 there.
fn out_coords(e: u32) -> vec2<u32> {
    let e1 = p.m * p.seg1;
    let e2 = p.m * p.seg2;
    if (e < e1) {
        return vec2<u32>(e / p.seg1, e % p.seg1);
    }
    if (e < e2) {
        let w = p.seg2 - p.seg1;
        return vec2<u32>((e - e1) / w, p.seg1 + (e - e1) % w);
    }
    let w = p.n - p.seg2;
    return vec2<u32>((e - e2) / w, p.seg2 + (e - e2) % w);
}

fn chunk_bounds(s: u32) -> vec2<u32> {
    let k0 = min(s * p.x0, p.k);
    return vec2<u32>(k0, min(k0 + p.x0, p.k));
}

@compute @workgroup_size(256)
fn dense_gemv_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    var acc: array<vec4<f32>, 16>;
    gemv_stream(g, 0u, p.k, lid, &acc);
    // Invocation t < 128: activation row i0 + t / 64, columns 2 (t % 64) and the next.
    let ii = lid / 64u;
    let lr = 2u * (lid % 64u);
    let j = g * NR + lr;
    for (var i0 = 0u; i0 < M; i0 += 2u) {
        stage_rows(&acc, i0, lid);
        workgroupBarrier();
        let i = i0 + ii;
        if (lid < 128u && i < M && j < p.n) {
            let has1 = j + 1u < p.n;
            store_two(out_index(i, j), slot_sum(ii, lr), out_index(i, j + 1u), slot_sum(ii, lr + 1u), has1);
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(256)
fn dense_gemv_bf16_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                           @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    let s = group_y(wid, p.fold);
    let kb = chunk_bounds(s);
    var acc: array<vec4<f32>, 16>;
    gemv_stream(g, kb.x, kb.y, lid, &acc);
    // Invocation t: activation row i0 + t / 128, local row t % 128 (unit
    // stride along the workspace row).
    let ii = lid / NR;
    let row = g * NR + lid % NR;
    for (var i0 = 0u; i0 < M; i0 += 2u) {
        stage_rows(&acc, i0, lid);
        workgroupBarrier();
        let i = i0 + ii;
        if (i < M && row < p.n) {
            d_workspace[(s * M + i) * p.n + row] = bitcast<u32>(slot_sum(ii, lid % NR));
        }
        workgroupBarrier();
    }
}

fn chunk_sum(e: u32) -> f32 {
    let ij = out_coords(e);
    let plane = p.m * p.n;
    let o = ij.x * p.n + ij.y;
    var s = bitcast<f32>(d_workspace[o]);
    for (var t = 1u; t < p.x0; t++) {
        s += bitcast<f32>(d_workspace[t * plane + o]);
    }
    return s;
}

@compute @workgroup_size(256)
fn dense_gemv_bf16_reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                          @builtin(local_invocation_index) lid: u32) {
    let w = group_x(wid, nwg, p.fold) * 256u + lid;
    let total = p.m * p.n;
    if (w >= (total + 1u) / 2u) {
        return;
    }
    let e = 2u * w;
    let has1 = e + 1u < total;
    store_two(e, chunk_sum(e), e + 1u, select(0.0, chunk_sum(min(e + 1u, total - 1u)), has1), has1);
}
