// lm_head_logits_fp8 (M > 2): a thread per vocab row, 256 rows per workgroup. h is staged through shared
// memory in k-tiles as f32, so every thread of the workgroup reads the same
// h values (a broadcast) while streaming its own table row; M (= m) is a
// pipeline override so the accumulator loops unroll into registers.
struct Params {
    out: u32, h: u32, e8: u32, row_scale: u32, m: i32, vocab: i32, hdim: i32, softcap: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_h: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_e8: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_row_scale: array<u32>;

override M: u32 = 1u;
const WG: u32 = 256u;
const KT: u32 = 128u;
const KT4: u32 = 32u;

// h[i, k0 + 4c .. k0 + 4c + 3] at [i * KT4 + c].
var<workgroup> hs: array<vec4<f32>, 512>;

@compute @workgroup_size(256)
fn lm_head_logits_fp8(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    let vocab = u32(p.vocab);
    let hdim = u32(p.hdim);
    let v = g * WG + lid;
    let live = v < vocab;
    let row = p.e8 + select(0u, v, live) * (hdim / 4u);
    var acc: array<f32, 16>;
    for (var k0 = 0u; k0 < hdim; k0 += KT) {
        for (var q = lid; q < M * KT4; q += WG) {
            let i = q / KT4;
            let k = k0 + 4u * (q % KT4);
            var hv = vec4<f32>(0.0);
            if (k < hdim) {
                let hw = p.h + i * (hdim / 2u) + k / 2u;
                let a = d_h[hw];
                let b = d_h[hw + 1u];
                hv = vec4<f32>(bf16_lo(a), bf16_hi(a), bf16_lo(b), bf16_hi(b));
            }
            hs[q] = hv;
        }
        workgroupBarrier();
        if (live) {
            let words = min(KT, hdim - k0) / 4u;
            let tw = row + k0 / 4u;
            for (var c = 0u; c < words; c++) {
                let w = d_e8[tw + c];
                let t = vec4<f32>(e4m3(w & 0xffu), e4m3((w >> 8u) & 0xffu), e4m3((w >> 16u) & 0xffu), e4m3(w >> 24u));
                for (var i = 0u; i < M; i++) {
                    acc[i] += dot(t, hs[i * KT4 + c]);
                }
            }
        }
        workgroupBarrier();
    }
    if (live) {
        let sc = bitcast<f32>(d_row_scale[p.row_scale + v]);
        for (var i = 0u; i < M; i++) {
            d_out[p.out + i * vocab + v] = bitcast<u32>(softcap(sc * acc[i], p.softcap));
        }
    }
}

// Small m (M <= 2, decode): each 32-lane slice streams RPW rows with lanes
// striding over k, so every table load is coalesced; h comes from cache.
// Per-lane partial sums meet in shared memory (rows padded to 33 floats
// against bank conflicts).
const RPW: u32 = 4u;
const NR: u32 = 32u;
var<workgroup> part: array<f32, 2112>;

@compute @workgroup_size(256)
fn lm_head_logits_fp8_small(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                            @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    let vocab = u32(p.vocab);
    let hdim = u32(p.hdim);
    let words = hdim / 4u;
    let slice = lid / 32u;
    let lane = lid % 32u;
    let r0 = g * NR + slice * RPW;
    var acc: array<f32, 8>;
    for (var c = lane; c < words; c += 32u) {
        var hv: array<vec4<f32>, 2>;
        for (var i = 0u; i < M; i++) {
            let hw = p.h + i * (hdim / 2u) + 2u * c;
            let a = d_h[hw];
            let b = d_h[hw + 1u];
            hv[i] = vec4<f32>(bf16_lo(a), bf16_hi(a), bf16_lo(b), bf16_hi(b));
        }
        for (var r = 0u; r < RPW; r++) {
            let v = r0 + r;
            if (v < vocab) {
                let w = d_e8[p.e8 + v * words + c];
                let t = vec4<f32>(e4m3(w & 0xffu), e4m3((w >> 8u) & 0xffu), e4m3((w >> 16u) & 0xffu), e4m3(w >> 24u));
                for (var i = 0u; i < M; i++) {
                    acc[r * 2u + i] += dot(t, hv[i]);
                }
            }
        }
    }
    for (var r = 0u; r < RPW; r++) {
        for (var i = 0u; i < M; i++) {
            part[((slice * RPW + r) * 2u + i) * 33u + lane] = acc[r * 2u + i];
        }
    }
    workgroupBarrier();
    for (var q = lid; q < NR * M; q += 256u) {
        let rr = q / M;
        let i = q % M;
        let v = g * NR + rr;
        if (v < vocab) {
            var s = 0.0;
            for (var l = 0u; l < 32u; l++) {
                s += part[(rr * 2u + i) * 33u + l];
            }
            d_out[p.out + i * vocab + v] = bitcast<u32>(softcap(bitcast<f32>(d_row_scale[p.row_scale + v]) * s, p.softcap));
        }
    }
}
