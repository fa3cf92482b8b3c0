// A single workgroup: each thread sums a contiguous run of counts, the runs'
// totals are scanned in shared memory, then each thread writes its run's
// prefix sums. i32 arithmetic wraps, as on the reference.
struct Params {
    offsets: u32, cursor: u32, counts: u32, e: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_offsets: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_cursor: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_counts: array<u32>;

var<workgroup> scan: array<i32, 256>;

@compute @workgroup_size(256)
fn moe_offsets(@builtin(local_invocation_index) lid: u32) {
    let e = u32(p.e);
    let per = (e + 255u) / 256u;
    let lo = min(lid * per, e);
    let hi = min(lo + per, e);
    var t = 0;
    for (var x = lo; x < hi; x++) {
        t += bitcast<i32>(d_counts[p.counts + x]);
    }
    scan[lid] = t;
    workgroupBarrier();
    // Hillis-Steele inclusive scan of the run totals.
    for (var s = 1u; s < 256u; s = s << 1u) {
        var v = scan[lid];
        if (lid >= s) {
            v += scan[lid - s];
        }
        workgroupBarrier();
        scan[lid] = v;
        workgroupBarrier();
    }
    var acc = scan[lid] - t;
    if (lid == 0u) {
        d_offsets[p.offsets] = 0u;
    }
    for (var x = lo; x < hi; x++) {
        d_cursor[p.cursor + x] = bitcast<u32>(acc);
        acc += bitcast<i32>(d_counts[p.counts + x]);
        d_offsets[p.offsets + x + 1u] = bitcast<u32>(acc);
    }
}
