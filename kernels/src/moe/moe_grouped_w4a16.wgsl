// Grouped expert GEMM, NVFP4 weights (K-major per expert: codes [e, K/2, N],
// e4m3 block scales [e, K/16, N], f32 global scale per expert); the tiling of
// moe_grouped_gemm_bf16.wgsl (grouped_gemm.wgsli), with the weight chunk
// ([k][n] as the K-major codes already are) decoded to f32 (e2m1 · e4m3,
// exact) on its way into workgroup memory and the expert's global scale
// applied at the store.
struct Params {
    out: u32, a: u32, wq: u32, ws: u32, scale2: u32, offsets: u32, n: i32, e: i32, big_n: i32, big_k: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_a: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_wq: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_ws: array<u32>;
@group(0) @binding(5) var<storage, read_write> d_scale2: array<u32>;
@group(0) @binding(6) var<storage, read_write> d_offsets: array<u32>;

//! include "moe/grouped_gemm.wgsli"

// e2m1 magnitude codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign.
fn e2m1(c: u32) -> f32 {
    let mag = c & 7u;
    let v = select(f32(mag) * 0.5, ldexp(1.0 + 0.5 * f32(mag & 1u), i32(mag >> 1u) - 1), mag >= 2u);
    return select(v, -v, (c & 8u) != 0u);
}

// w_s[k][n] for k words k0..k0 + KC/2 of expert x, columns n0..n0 + TN.
fn stage_w(x: i32, n0: u32, k0: u32, kw: u32, lid: u32) {
    let big_n = u32(p.big_n);
    // Byte rows of N codes / scales are word aligned (N % 16 == 0).
    let nw = big_n / 4u;
    let qbase = p.wq + window_expert(x) * kw * nw;
    let sbase = p.ws + window_expert(x) * (u32(p.big_k) / 16u) * nw;
    // KC/2 code rows (k pairs) x TN/4 words, each word four columns.
    for (var i = lid; i < (KC / 2u) * (TN / 4u); i += 128u) {
        let kr = i / (TN / 4u);
        let c = i % (TN / 4u);
        var q = 0u;
        var sc = 0u;
        if (n0 + 4u * c < big_n && k0 + kr < kw) {
            q = d_wq[qbase + (k0 + kr) * nw + n0 / 4u + c];
            sc = d_ws[sbase + ((k0 + kr) / 8u) * nw + n0 / 4u + c];
        }
        for (var b = 0u; b < 4u; b++) {
            let code = q >> (8u * b);
            let s = e4m3(sc >> (8u * b));
            w_s[(2u * kr) * TN + 4u * c + b] = e2m1(code) * s;
            w_s[(2u * kr + 1u) * TN + 4u * c + b] = e2m1(code >> 4u) * s;
        }
    }
}

// Rows outside every segment store zeros (no expert, no global scale).
fn store(o: u32, x: i32, a0: f32, a1: f32) {
    let s2 = select(0.0, bitcast<f32>(d_scale2[p.scale2 + u32(max(x, 0))]), x >= 0);
    d_out[o] = pack_bf16(s2 * a0, s2 * a1);
}

@compute @workgroup_size(128)
fn moe_grouped_w4a16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    grouped_gemm(wid, nwg, lid);
}
