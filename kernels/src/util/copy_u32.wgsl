// A plain word copy: the bandwidth yardstick for wgpu kernels. Four words per
// invocation, 256 invocations per workgroup (1024 words per workgroup).
struct Params {
    out: u32, inp: u32, n: u32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_inp: array<u32>;

@compute @workgroup_size(256)
fn copy_u32(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let b = group_x(wid, nwg, p.fold);
    if (b >= p.gx) {
        return;
    }
    // Consecutive invocations take consecutive words within each of the four
    // strides, so every access of the workgroup is coalesced.
    let base = b * 1024u + lid;
    for (var j = 0u; j < 4u; j++) {
        let i = base + j * 256u;
        if (i < p.n) {
            d_out[p.out + i] = d_inp[p.inp + i];
        }
    }
}
