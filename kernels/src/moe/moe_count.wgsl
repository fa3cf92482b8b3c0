// One thread per pair; counts are global atomics (the launcher zeroes them).
struct Params {
    counts: u32, topk_ids: u32, n: i32, e: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_counts: array<atomic<i32>>;
@group(0) @binding(2) var<storage, read_write> d_topk_ids: array<u32>;

@compute @workgroup_size(256)
fn moe_count(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = group_x(wid, nwg, p.fold) * 256u + lid;
    if (i >= u32(p.n)) {
        return;
    }
    let x = bitcast<i32>(d_topk_ids[p.topk_ids + i]);
    if (x >= 0 && x < p.e) {
        atomicAdd(&d_counts[p.counts + u32(x)], 1);
    }
}
