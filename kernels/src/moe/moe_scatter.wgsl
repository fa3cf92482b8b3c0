// One workgroup per expert x. Each thread takes a contiguous run of pairs,
// counts its matches, the counts are scanned, and a second pass assigns slots
// in increasing pair order (the deterministic order of the contract).
// Workgroup 0 also writes the -1 entries: pairs with an invalid id and the
// slots past the last valid one.
struct Params {
    pair_of_slot: u32, slot_of_pair: u32, cursor: u32, offsets: u32, topk_ids: u32, n: i32, e: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_pair_of_slot: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_slot_of_pair: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_cursor: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_offsets: array<u32>;
@group(0) @binding(5) var<storage, read_write> d_topk_ids: array<u32>;

var<workgroup> scan: array<u32, 256>;

@compute @workgroup_size(256)
fn moe_scatter(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let xe = group_x(wid, nwg, p.fold);
    if (xe >= p.gx || xe >= u32(p.e)) {
        return;
    }
    let x = i32(xe);
    let n = u32(p.n);
    let per = (n + 255u) / 256u;
    let lo = min(lid * per, n);
    let hi = min(lo + per, n);
    var c = 0u;
    for (var q = lo; q < hi; q++) {
        c += select(0u, 1u, bitcast<i32>(d_topk_ids[p.topk_ids + q]) == x);
    }
    scan[lid] = c;
    workgroupBarrier();
    for (var s = 1u; s < 256u; s = s << 1u) {
        var v = scan[lid];
        if (lid >= s) {
            v += scan[lid - s];
        }
        workgroupBarrier();
        scan[lid] = v;
        workgroupBarrier();
    }
    let base = bitcast<i32>(d_offsets[p.offsets + xe]);
    var slot = base + i32(scan[lid] - c);
    for (var q = lo; q < hi; q++) {
        let id = bitcast<i32>(d_topk_ids[p.topk_ids + q]);
        if (id == x) {
            // Offsets that disagree with the ids must not write outside the outputs.
            if (slot >= 0 && slot < p.n) {
                d_pair_of_slot[p.pair_of_slot + u32(slot)] = q;
            }
            d_slot_of_pair[p.slot_of_pair + q] = bitcast<u32>(slot);
            slot += 1;
        } else if (xe == 0u && (id < 0 || id >= p.e)) {
            d_slot_of_pair[p.slot_of_pair + q] = NONE;
        }
    }
    if (lid == 0u) {
        d_cursor[p.cursor + xe] = d_offsets[p.offsets + xe + 1u];
    }
    if (xe == 0u) {
        let total = max(bitcast<i32>(d_offsets[p.offsets + u32(p.e)]), 0);
        for (var s = u32(total) + lid; s < n; s += 256u) {
            d_pair_of_slot[p.pair_of_slot + s] = NONE;
        }
    }
}
