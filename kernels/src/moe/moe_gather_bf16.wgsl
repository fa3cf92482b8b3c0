// out[s] = x[pair_of_slot[s] / k]: a workgroup copies SLOTS consecutive slots
// (its WGSL plan sizes the grid), its threads walking the (slot, word) pairs so
// that consecutive threads copy consecutive words even when rows are short.
// pair −1 is an empty slot (zeros); any other pair whose token falls outside
// [0, rows) gives a NaN row, as the reference.
struct Params {
    out: u32, x: u32, pair_of_slot: u32, n: i32, k: i32, h: i32, rows: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_x: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_pair_of_slot: array<u32>;

const SLOTS: u32 = 8u;

@compute @workgroup_size(256)
fn moe_gather_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    let hw = u32(p.h) / 2u;
    let s0 = g * SLOTS;
    let count = min(SLOTS, u32(p.n) - min(s0, u32(p.n)));
    for (var i = lid; i < count * hw; i += 256u) {
        let s = s0 + i / hw;
        let c = i % hw;
        let pair = bitcast<i32>(d_pair_of_slot[p.pair_of_slot + s]);
        var v = 0u;
        // Negative pairs other than −1 floor to a negative token: NaN like an overlarge one.
        if (pair != -1) {
            if (pair < 0 || pair / p.k >= p.rows) {
                v = BF16_NAN2;
            } else {
                v = d_x[p.x + u32(pair / p.k) * hw + c];
            }
        }
        d_out[p.out + s * hw + c] = v;
    }
}
