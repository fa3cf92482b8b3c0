// dense_gemv_bf16: c = bf16(a · bᵀ) for m ≤ 16 activation rows, stored in
// the segmented layout. The weight stream, the reduction and the entries'
// bodies are gemv_segmented.wgsli's (over gemv_common.wgsli): one chunk
// (x1 = 1) runs dense_gemv_bf16; several run dense_gemv_bf16_once (one
// dispatch on the backend's arrival counters), or dense_gemv_bf16_partial
// then dense_gemv_bf16_reduce (x0 = chunks). m = 1 with enough rows runs
// dense_gemv_bf16_m1 (gemv_m1.wgsli, eight rows a workgroup, one pass).
struct Params {
    a: u32, b: u32, c: u32, m: u32, n: u32, k: u32, seg1: u32, seg2: u32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_a: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> d_b: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_c: array<atomic<u32>>;
// Atomic so that dense_gemv_bf16_once's last workgroup loads the partials
// from where the others stored them (device scope), not from a stale cache line.
@group(0) @binding(4) var<storage, read_write> d_workspace: array<atomic<u32>>;
// The backend's arrival counters (dense_gemv_bf16_once): one a row block, zero between launches.
@group(0) @binding(5) var<storage, read_write> d_arrivals: array<atomic<u32>>;

fn ws_load(i: u32) -> u32 {
    return atomicLoad(&d_workspace[i]);
}

fn ws_store(i: u32, v: u32) {
    atomicStore(&d_workspace[i], v);
}

//! include "gemv/gemv_segmented.wgsli"
//! include "util/arrival.wgsli"

// Vector c of activation row i, as stored.
fn activation(i: u32, c: u32) -> vec4<u32> {
    return d_a[p.a / 4u + i * (p.k / 8u) + c];
}

fn m1_activation(c: u32) -> vec4<u32> {
    return activation(0u, c);
}

@compute @workgroup_size(256)
fn dense_gemv_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    seg_store(g, lid);
}

@compute @workgroup_size(256)
fn dense_gemv_bf16_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                           @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    seg_partial(g, group_y(wid, p.fold), lid);
}

// Split K in one dispatch (x0 = chunk length, x1 = chunks): each workgroup
// stores its chunk's partials, and the last of a row block's x1 to arrive
// (its arrival counter, which it puts back to zero) adds the block's sums
// as dense_gemv_bf16_reduce would, one dispatch fewer.
@compute @workgroup_size(256)
fn dense_gemv_bf16_once(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                        @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    seg_partial(g, group_y(wid, p.fold), lid);
    if (last_to_arrive(g, p.x1, lid)) {
        seg_block_store(g, lid);
    }
}

@compute @workgroup_size(256)
fn dense_gemv_bf16_reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                          @builtin(local_invocation_index) lid: u32) {
    seg_reduce(group_x(wid, nwg, p.fold) * 256u + lid);
}

@compute @workgroup_size(256)
fn dense_gemv_bf16_m1(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    seg_m1(g, lid);
}
