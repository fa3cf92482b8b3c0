// Gated activation, one workgroup per row, one packed word (two elements)
// per thread step: out = bf16(bf16(gelu_tanh(gate)) · up).
struct Params {
    out: u32, gu: u32, rows: i32, inter: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_gu: array<u32>;

//! include "util/gelu_tanh.wgsli"

fn act(g: f32, u: f32) -> f32 {
    return bf16_round(gelu_tanh(g)) * u;
}

@compute @workgroup_size(256)
fn gelu_mul_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let r = group_x(wid, nwg, p.fold);
    if (r >= p.gx || r >= u32(p.rows)) {
        return;
    }
    // inter is even, so the gate half, the up half and the output row are word aligned.
    let hw = u32(p.inter) / 2u;
    let g0 = p.gu + r * 2u * hw;
    let o = p.out + r * hw;
    for (var j = lid; j < hw; j += 256u) {
        let g = d_gu[g0 + j];
        let u = d_gu[g0 + hw + j];
        d_out[o + j] = pack_bf16(act(bf16_lo(g), bf16_lo(u)), act(bf16_hi(g), bf16_hi(u)));
    }
}
