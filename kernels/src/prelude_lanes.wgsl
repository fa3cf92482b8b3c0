// Switchyard WGSL lanes, fallback variant: composed after the prelude when the
// device has no subgroup operations (or they are turned off:
// WgpuOptions::subgroups, SWITCHYARD_WGPU_SUBGROUPS=0); the plan sees
// DeviceFacts::subgroup_size == 1. Same names as prelude_subgroups.wgsl,
// through workgroup-memory tree reductions over 256-invocation workgroups.

const SUBGROUPS: bool = false;

struct Lanes {
    @builtin(local_invocation_index) lid: u32,
}

// Workgroup-wide sum (256 invocations, tree order), in every invocation.
fn row_sum(v: f32, ln: Lanes) -> f32 {
    return wg_sum256(v, ln.lid);
}

var<workgroup> best_i: array<i32, 256>;
var<workgroup> best_v: array<f32, 256>;

// Workgroup-wide best of (bi, bv) over 256 invocations, in every invocation:
// largest bv among bi >= 0, then lowest bi; x = index bits (0xffffffff:
// none), y = value bits.
fn row_best(bi: i32, bv: f32, ln: Lanes) -> vec2<u32> {
    let lid = ln.lid;
    best_i[lid] = bi;
    best_v[lid] = bv;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s && beats_best(best_i[lid + s], best_v[lid + s], best_i[lid], best_v[lid])) {
            best_i[lid] = best_i[lid + s];
            best_v[lid] = best_v[lid + s];
        }
        workgroupBarrier();
    }
    let r = vec2<u32>(bitcast<u32>(best_i[0]), bitcast<u32>(best_v[0]));
    workgroupBarrier();
    return r;
}
