// out[i, v] = softcap(Σₖ h[i, k] · table[v, k]) over a bf16 table, M (= m,
// 1..=16) a pipeline override. Same geometry as lm_head_logits_fp8: a
// workgroup of 256 takes NR = 32 vocab rows, each 32-lane slice RPW = 4 of
// them, lanes striding over k so every table load is coalesced. On the fast
// path (e8-style alignment: table and h at word offsets that are multiples
// of 4; hdim % 8 == 0 holds by contract) a lane loads one vec4<u32> (8 bf16)
// from each of its 4 rows per step, four independent 16-byte loads in
// flight, and reuses the matching h vector (from cache) across them. Other
// offsets run the same loop a word (2 bf16) at a time.
//
// Loads in flight are not what holds m = 1 at ~55% of wgpu's copy ceiling
// on the H200: issuing 2 vectors of each row before use measured the same
// (1.5104 against 1.5073 ms), and walking the 4 rows one after the other
// (a warp streaming one row, as the CUDA kernel does, with an h load per
// table load) 1.5x slower (BENCHMARKS.md, eighth session).
struct Params {
    out: u32, h: u32, table: u32, m: i32, vocab: i32, hdim: i32, softcap: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_h: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_table: array<vec4<u32>>;

//! include "head/lm_head_common.wgsli"

fn logit(v: u32, s: f32) -> f32 {
    return s;
}

fn t_word(i: u32) -> u32 {
    return d_table[i >> 2u][i & 3u];
}

// Σ of 8 products of two bf16 vectors.
fn dot8(w: vec4<u32>, lo: vec4<f32>, hi: vec4<f32>) -> f32 {
    return dot(bf16x4_lo(w), lo) + dot(bf16x4_hi(w), hi);
}

fn dot2(w: u32, a: f32, b: f32) -> f32 {
    return bf16_lo(w) * a + bf16_hi(w) * b;
}

@compute @workgroup_size(256)
fn lm_head_logits_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                       @builtin(local_invocation_index) lid: u32) {
    let g = group_x(wid, nwg, p.fold);
    if (g >= p.gx) {
        return;
    }
    let vocab = u32(p.vocab);
    let hdim = u32(p.hdim);
    let slice = lid / 32u;
    let lane = lid % 32u;
    // Rows of this pass's window (lm_head_common.wgsli); rows past its end
    // read its last row (in bounds); their sums are dropped.
    let r0 = g * NR + slice * RPW;
    let last = p.x1 - 1u;
    let v0 = min(r0, last);
    let v1 = min(r0 + 1u, last);
    let v2 = min(r0 + 2u, last);
    let v3 = min(r0 + 3u, last);
    var acc: array<vec4<f32>, 16>;
    if (hdim % 8u == 0u && aligned4(p.h, p.table, NONE, NONE)) {
        let n = hdim / 8u;
        let t = p.table / 4u;
        let hb = p.h / 4u;
        for (var c = lane; c < n; c += 32u) {
            let w0 = d_table[t + v0 * n + c];
            let w1 = d_table[t + v1 * n + c];
            let w2 = d_table[t + v2 * n + c];
            let w3 = d_table[t + v3 * n + c];
            for (var i = 0u; i < M; i++) {
                let hv = d_h[hb + i * n + c];
                let lo = bf16x4_lo(hv);
                let hi = bf16x4_hi(hv);
                acc[i] += vec4<f32>(dot8(w0, lo, hi), dot8(w1, lo, hi), dot8(w2, lo, hi), dot8(w3, lo, hi));
            }
        }
    } else {
        let n = hdim / 2u;
        for (var c = lane; c < n; c += 32u) {
            let w0 = t_word(p.table + v0 * n + c);
            let w1 = t_word(p.table + v1 * n + c);
            let w2 = t_word(p.table + v2 * n + c);
            let w3 = t_word(p.table + v3 * n + c);
            for (var i = 0u; i < M; i++) {
                let hv = h_word(p.h + i * n + c);
                let a = bf16_lo(hv);
                let b = bf16_hi(hv);
                acc[i] += vec4<f32>(dot2(w0, a, b), dot2(w1, a, b), dot2(w2, a, b), dot2(w3, a, b));
            }
        }
    }
    store_logits(&acc, g, lid, vocab);
}
