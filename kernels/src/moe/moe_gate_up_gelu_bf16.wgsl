// The decode gate_up projection with the gated GELU in its epilogue
// (plan: grid (ceil(inter / 16), n)): moe_grouped_gemm_bf16_seg's scheme,
// where a workgroup's SEG_COLS weight rows are the gate rows of its 16
// outputs and then their up rows, so each output's gate and up sums meet in
// workgroup memory and the activation, bf16(bf16(gelu(bf16(g))) · bf16(u)),
// is stored without the projection. The workgroup of slot s owns the
// segment that starts at s (the others of that segment return); SEG_LANES
// invocations share a weight row, their partials added in lane order.
struct Params {
    out: u32, a: u32, w: u32, offsets: u32, n: i32, e: i32, inter: i32, big_k: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_a: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_w: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_offsets: array<u32>;

const SEG_COLS: u32 = 32u; // weight rows a workgroup: 16 gate, 16 up
const SEG_OUTS: u32 = 16u;

// Four chunks of a weight row in flight a lane (segment_gemv.wgsli): 26b-a4b's
// expert gate/up (K = 2816) at batch 1 went from 42.5 to 37.4 us a dispatch
// on the H200 against one (fourteenth session).
override SEG_U: u32 = 4u;
//! include "moe/segment_gemv.wgsli"
//! include "util/gelu_tanh.wgsli"

fn act(g: f32, u: f32) -> f32 {
    return bf16_round(gelu_tanh(bf16_round(g))) * bf16_round(u);
}

@compute @workgroup_size(256)
fn moe_gate_up_gelu_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                         @builtin(local_invocation_index) lid: u32) {
    let cb = group_x(wid, nwg, p.fold);
    let s = group_y(wid, p.fold);
    if (cb >= p.gx || s >= p.gy) {
        return;
    }
    let info = segment_role(s, lid);
    let inter = u32(p.inter);
    let half = inter / 2u; // words per output row
    let lr = lid / SEG_LANES;
    let t = lid % SEG_LANES;
    // Output i of this weight row; rows 0..15 are gate rows, 16..31 up rows.
    let i = cb * SEG_OUTS + lr % SEG_OUTS;
    if (info[0] == 2) {
        return;
    }
    if (info[0] == 1) {
        if (t == 0u && lr < SEG_OUTS && lr % 2u == 0u && i < inter) {
            d_out[p.out + s * half + i / 2u] = 0u;
        }
        return;
    }
    let kw = u32(p.big_k) / 2u; // words per row of a and w
    let row = select(0u, inter, lr >= SEG_OUTS) + min(i, inter - 1u);
    let wrow = p.w + (window_expert(info[3]) * 2u * inter + row) * kw;
    for (var r0 = info[1]; r0 < info[2]; r0 += i32(SEG_R)) {
        let nr = u32(min(i32(SEG_R), info[2] - r0));
        segment_partials(wrow, kw, u32(r0), nr, t, lid);
        workgroupBarrier();
        // Invocation r · 8 + q: row r0 + r, outputs 2q and 2q + 1 of the block.
        if (lid < 8u * SEG_R) {
            let q = lid % 8u;
            let r = lid / 8u;
            let jj = cb * SEG_OUTS + 2u * q;
            if (r < nr && jj < inter) {
                var g0 = 0.0;
                var g1 = 0.0;
                var u0 = 0.0;
                var u1 = 0.0;
                for (var u = 0u; u < SEG_LANES; u++) {
                    g0 += seg_sums[r * 256u + 2u * q * SEG_LANES + u];
                    g1 += seg_sums[r * 256u + (2u * q + 1u) * SEG_LANES + u];
                    u0 += seg_sums[r * 256u + (SEG_OUTS + 2u * q) * SEG_LANES + u];
                    u1 += seg_sums[r * 256u + (SEG_OUTS + 2u * q + 1u) * SEG_LANES + u];
                }
                d_out[p.out + (u32(r0) + r) * half + jj / 2u] = pack_bf16(act(g0, u0), act(g1, u1));
            }
        }
        workgroupBarrier();
    }
}
