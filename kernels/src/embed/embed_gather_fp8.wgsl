// One workgroup per output row; a thread owns whole output words (two bf16),
// each fed by half of one table word (two fp8 codes).
struct Params {
    out: u32, table: u32, row_scale: u32, ids: u32, h: i32, vocab: i32, scale: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_table: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_row_scale: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_ids: array<u32>;

@compute @workgroup_size(256)
fn embed_gather_fp8(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let r = group_x(wid, nwg, p.fold);
    if (r >= p.gx) {
        return;
    }
    let hw = u32(p.h) / 2u;
    let o = p.out + r * hw;
    let id = bitcast<i32>(d_ids[p.ids + r]);
    if (id < 0 || id >= p.vocab) {
        for (var j = lid; j < hw; j += 256u) {
            d_out[o + j] = BF16_NAN2;
        }
        return;
    }
    let s = bitcast<f32>(d_row_scale[p.row_scale + u32(id)]);
    let t = p.table + u32(id) * (u32(p.h) / 4u);
    for (var j = lid; j < hw; j += 256u) {
        let codes = d_table[t + j / 2u] >> ((j & 1u) * 16u);
        let a = bf16_round(e4m3(codes & 0xffu) * s) * p.scale;
        let b = bf16_round(e4m3((codes >> 8u) & 0xffu) * s) * p.scale;
        d_out[o + j] = pack_bf16(a, b);
    }
}
