// out[i] = bf16(out[i] + scale · x[i]): a thread per word (element pair), the
// plan's grid of ⌈n/512⌉ 256-thread workgroups. The epilogue of
// dense_gemm_tc_scaled_acc.wgsl, written the same way so the two agree bit
// for bit.
struct Params {
    out: u32, x: u32, n: u32, scale: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_x: array<u32>;

// `scale · x` is not exact in f32, so a driver fusing it into the following
// add (allowed without SPIR-V NoContraction, which naga does not emit) would
// round once instead of twice. OR-ing in x3, a runtime word the host always
// sets to 0, hides the product's value from the optimizer and forces it to
// be rounded to f32 first.
fn rounded(x: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) | p.x3);
}

fn scaled_add(c: f32, t: f32) -> f32 {
    let u = rounded(p.scale * t);
    return c + u;
}

@compute @workgroup_size(256)
fn scaled_add_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    let w = g * 256u + lid;
    if (g >= p.gx || w >= p.n / 2u) {
        return;
    }
    let o = d_out[p.out + w];
    let x = d_x[p.x + w];
    d_out[p.out + w] = pack_bf16(scaled_add(bf16_lo(o), bf16_lo(x)), scaled_add(bf16_hi(o), bf16_hi(x)));
}
