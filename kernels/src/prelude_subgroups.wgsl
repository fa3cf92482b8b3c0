// Switchyard WGSL lanes, subgroup variant: composed after the prelude when the
// device was opened with wgpu::Features::SUBGROUP (the plan sees
// DeviceFacts::subgroup_size > 1). prelude_lanes.wgsl is the fallback with
// the same names; a kernel that uses them takes `ln: Lanes` as an entry point
// parameter and calls the row reductions at workgroup-uniform points (every
// invocation, no early return before them: they hold barriers).
//
// naga 30 parses the subgroup built-ins without an `enable subgroups;`
// directive (it rejects that directive as unimplemented); the shader module
// is validated with Capabilities::SUBGROUP instead.

const SUBGROUPS: bool = true;

struct Lanes {
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) size: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) count: u32,
}

// Workgroup-wide sum: subgroupAdd within each subgroup, one partial a
// subgroup in wg_red[sg], then every subgroup sums the partials (in runs of
// its size, so any subgroup size works). The same value in every invocation;
// the order is the device's, fixed for a given device and subgroup size.
fn row_sum(v: f32, ln: Lanes) -> f32 {
    let s = subgroupAdd(v);
    if (ln.lane == 0u) {
        wg_red[ln.sg] = s;
    }
    workgroupBarrier();
    var t = 0.0;
    for (var i = 0u; i < ln.count; i += ln.size) {
        let j = i + ln.lane;
        t += subgroupAdd(select(0.0, wg_red[min(j, 255u)], j < ln.count));
    }
    workgroupBarrier();
    return t;
}

// Position of the invocation in subgroup order (subgroup, then lane): an
// aligned run of `width` positions, width a power of two no wider than a
// subgroup, lies in one subgroup. Relies on full subgroups, which a
// 256-invocation workgroup (a multiple of every subgroup size) gets.
fn lane_order(ln: Lanes) -> u32 {
    return ln.sg * ln.size + ln.lane;
}

// Sum of v over each aligned run of `width` positions (lane_order / width;
// width a power of two, at most 256), the same bits in every invocation of
// the run (each butterfly step adds the same two values in either lane).
// Within a subgroup: subgroupShuffleXor, no barrier. Runs wider than the
// subgroup add the subgroups' sums through wg_red behind a barrier, which
// every invocation then reaches (the subgroup size is the same everywhere).
fn run_sum(v: f32, width: u32, ln: Lanes) -> f32 {
    var s = v;
    for (var o = min(width, ln.size) >> 1u; o > 0u; o = o >> 1u) {
        s += subgroupShuffleXor(s, o);
    }
    if (width <= ln.size) {
        return s;
    }
    if (ln.lane == 0u) {
        wg_red[ln.sg] = s;
    }
    workgroupBarrier();
    let per = width / ln.size;
    let first = ln.sg - ln.sg % per;
    var t = 0.0;
    for (var i = 0u; i < per; i++) {
        t += wg_red[first + i];
    }
    workgroupBarrier();
    return t;
}

var<workgroup> best_i: array<i32, 256>;
var<workgroup> best_v: array<f32, 256>;

// The subgroup's best of candidates (bi, bv): largest bv among bi >= 0, then
// lowest bi; bi = -1 (nothing eligible) loses to everything; bv is never NaN.
fn subgroup_best(bi: i32, bv: f32) -> vec2<u32> {
    let ok = bi >= 0;
    let m = subgroupMax(select(bitcast<f32>(0xff800000u), bv, ok));
    let win = subgroupMin(select(0xffffffffu, u32(bi), ok && bv == m));
    return vec2<u32>(win, bitcast<u32>(m));
}

// Workgroup-wide best of (bi, bv) (as subgroup_best), in every invocation:
// x = index as u32 bits (0xffffffff: none), y = value bits.
fn row_best(bi: i32, bv: f32, ln: Lanes) -> vec2<u32> {
    let s = subgroup_best(bi, bv);
    if (ln.lane == 0u) {
        best_i[ln.sg] = bitcast<i32>(s.x);
        best_v[ln.sg] = bitcast<f32>(s.y);
    }
    workgroupBarrier();
    var r = vec2<u32>(0xffffffffu, 0xff800000u);
    for (var i = 0u; i < ln.count; i += ln.size) {
        let j = min(i + ln.lane, 255u);
        let t = subgroup_best(select(-1, best_i[j], i + ln.lane < ln.count), best_v[j]);
        if (beats_best(bitcast<i32>(t.x), bitcast<f32>(t.y), bitcast<i32>(r.x), bitcast<f32>(r.y))) {
            r = t;
        }
    }
    workgroupBarrier();
    return r;
}

// The subgroup's best (key, index) of u32 candidates: the largest key, then
// the lowest index holding it (any key order, NaN bit patterns included:
// the keys are integers here). In every invocation of the subgroup.
fn subgroup_key_best(key: u32, idx: u32) -> vec2<u32> {
    let m = subgroupMax(key);
    return vec2<u32>(m, subgroupMin(select(0xffffffffu, idx, key == m)));
}

// Whether this invocation speaks for its subgroup, which one that is, and
// how many the workgroup has (the fallback: each invocation its own).
fn lanes_leader(ln: Lanes) -> bool {
    return ln.lane == 0u;
}

fn lanes_group(ln: Lanes) -> u32 {
    return ln.sg;
}

fn lanes_groups(ln: Lanes) -> u32 {
    return ln.count;
}
