// Grouped expert GEMM, bf16 weights [e, N, K] (the tiling is
// grouped_gemm.wgsli's: 16-row x 64-column output tiles, one pass per expert
// present, K in chunks of 32 through workgroup memory). The weight chunk is
// transposed on its way in so a k step reads two neighbouring columns; rows
// outside every segment are stored as zeros.
struct Params {
    out: u32, a: u32, w: u32, offsets: u32, n: i32, e: i32, big_n: i32, big_k: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_a: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_w: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_offsets: array<u32>;

//! include "moe/grouped_gemm.wgsli"

// w_s[k][n] for k words k0..k0 + KC/2 of expert x's rows n0..n0 + TN.
fn stage_w(x: i32, n0: u32, k0: u32, kw: u32, lid: u32) {
    let big_n = u32(p.big_n);
    let wbase = p.w + u32(x) * big_n * kw;
    for (var i = lid; i < TN * KC / 2u; i += 128u) {
        let col = i / (KC / 2u);
        let c = i % (KC / 2u);
        var v = 0u;
        if (n0 + col < big_n && k0 + c < kw) {
            v = d_w[wbase + (n0 + col) * kw + k0 + c];
        }
        w_s[(2u * c) * TN + col] = bf16_lo(v);
        w_s[(2u * c + 1u) * TN + col] = bf16_hi(v);
    }
}

fn store(o: u32, x: i32, a0: f32, a1: f32) {
    d_out[o] = pack_bf16(a0, a1);
}

@compute @workgroup_size(128)
fn moe_grouped_gemm_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                         @builtin(local_invocation_index) lid: u32) {
    grouped_gemm(wid, nwg, lid);
}
