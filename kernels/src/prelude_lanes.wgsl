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

// Position of the invocation (the lanes variant's order: lid).
fn lane_order(ln: Lanes) -> u32 {
    return ln.lid;
}

// Sum of v over each aligned run of `width` invocations (lid / width; width
// a power of two, at most 256), in every invocation of the run; holds
// barriers, so every invocation calls it with the same width. Runs up to 32
// add their entries in order after one barrier, wider ones by a tree.
fn run_sum(v: f32, width: u32, ln: Lanes) -> f32 {
    let lid = ln.lid;
    let first = lid - lid % width;
    wg_red[lid] = v;
    workgroupBarrier();
    var t = 0.0;
    if (width <= 32u) {
        for (var i = 0u; i < width; i++) {
            t += wg_red[first + i];
        }
    } else {
        for (var s = width >> 1u; s > 0u; s = s >> 1u) {
            if (lid - first < s) {
                wg_red[lid] = wg_red[lid] + wg_red[lid + s];
            }
            workgroupBarrier();
        }
        t = wg_red[first];
    }
    workgroupBarrier();
    return t;
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

// The subgroup variant's names, for code that branches on SUBGROUPS: each
// invocation is its own group of one.
fn subgroup_key_best(key: u32, idx: u32) -> vec2<u32> {
    return vec2<u32>(key, idx);
}

fn lanes_leader(ln: Lanes) -> bool {
    return true;
}

fn lanes_group(ln: Lanes) -> u32 {
    return ln.lid;
}

fn lanes_groups(ln: Lanes) -> u32 {
    return 256u;
}
