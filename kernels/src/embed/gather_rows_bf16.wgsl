// One workgroup per output row; a bit-exact word copy.
struct Params {
    out: u32, src: u32, idx: u32, h: i32, n_src: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_src: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_idx: array<u32>;

@compute @workgroup_size(256)
fn gather_rows_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let r = group_x(wid, nwg, p.fold);
    if (r >= p.gx) {
        return;
    }
    let hw = u32(p.h) / 2u;
    let o = p.out + r * hw;
    let id = bitcast<i32>(d_idx[p.idx + r]);
    if (id < 0 || id >= p.n_src) {
        for (var j = lid; j < hw; j += 256u) {
            d_out[o + j] = BF16_NAN2;
        }
        return;
    }
    let s = p.src + u32(id) * hw;
    for (var j = lid; j < hw; j += 256u) {
        d_out[o + j] = d_src[s + j];
    }
}
