// out[t] = bf16(Σ_j topk_w[t·k + j] · y[slot_of_pair[t·k + j]]) in j order,
// one workgroup per token, each thread one packed word (two columns) at a
// time. Slot −1 (a dropped pair) is skipped; any other slot outside [0, n)
// makes the row NaN. The slot scan is uniform across the workgroup, so the
// NaN decision is made once, before any store.
struct Params {
    out: u32, y: u32, slot_of_pair: u32, topk_w: u32, rows: i32, k: i32, h: i32, n: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_y: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_slot_of_pair: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_topk_w: array<u32>;

//! include "moe/combine_word.wgsli"

@compute @workgroup_size(256)
fn moe_combine_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let t = group_x(wid, nwg, p.fold);
    if (t >= p.gx || t >= u32(p.rows)) {
        return;
    }
    let hw = u32(p.h) / 2u;
    let o = p.out + t * hw;
    combine_stage(t, lid);
    if (combine_row_is_bad(t)) {
        for (var c = lid; c < hw; c += 256u) {
            d_out[o + c] = BF16_NAN2;
        }
        return;
    }
    for (var c = lid; c < hw; c += 256u) {
        d_out[o + c] = combine_word(t, c, hw);
    }
}
