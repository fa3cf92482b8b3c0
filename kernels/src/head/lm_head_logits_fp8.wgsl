// out[i, v] = softcap(row_scale[v] · Σₖ h[i, k] · e4m3(e8[v, k])), M (= m,
// 1..=16) a pipeline override so the per-h-row loops unroll.
//
// The table (vocab x hdim bytes, 1.4 GB at 262144 x 5376) is streamed once
// and must move at full bandwidth. A workgroup of 256 takes NR = 32 vocab
// rows: each 32-lane slice owns RPW = 4 rows, and its lanes stride over k so
// that every table load of the slice is coalesced. On the fast path (hdim %
// 16 == 0, e8 and h at word offsets that are multiples of 4) a lane loads
// one vec4<u32> (16 codes) from each of its 4 rows per step: four
// independent 16-byte loads in flight per lane, 2 KB per slice. The 16
// matching h values of each h row come from cache (h is small and shared by
// every workgroup) and are reused by the 4 rows. Other shapes or offsets run
// the same loop a word (4 codes) at a time.
//
// Decoding was the limit, not the loads: e4m3() spends some ten integer and
// float operations a code, one of them an int-to-float conversion (a
// quarter-rate instruction on NVIDIA GPUs). The fast path decodes a word's
// four codes without it (e4m3x4_fast): exponent and mantissa shifted into an
// f32 with the exponent rebiased, a subnormal code fixed by one fma, the
// sign ORed in; exact for every code but the NaNs (0x7f, 0xff). Those are
// caught a word at a time: each lane ORs a NaN test of every table word it
// reads into a per-row flag, and a flagged row's partial sums become NaN, as
// e4m3() would have made them.
//
// Per-lane partials meet in shared memory, two h rows per round (rows padded
// to 33 floats against bank conflicts), and the slice sums land in out.
struct Params {
    out: u32, h: u32, e8: u32, row_scale: u32, m: i32, vocab: i32, hdim: i32, softcap: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_h: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_e8: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> d_row_scale: array<u32>;

//! include "head/lm_head_common.wgsli"

// The row's scale applied to its sum.
fn logit(v: u32, s: f32) -> f32 {
    return bitcast<f32>(d_row_scale[p.row_scale + v]) * s;
}

// The 4 codes of w as f32, exact but for NaN codes (callers flag those with
// nan_bytes). Exponent and mantissa go to bits 20..26 with 120 added to the
// exponent: 2^(e-7)·(1 + m/8) for e > 0. For e = 0 that reads 2^-7·(1 + m/8)
// where the code means 2^-6·m/8 = 2v - 2^-6 (exact; 0 for m = 0).
fn e4m3x4_fast(w: u32) -> vec4<f32> {
    let em = vec4<u32>(w << 20u, w << 12u, w << 4u, w >> 4u) & vec4<u32>(0x07f00000u);
    let sign = vec4<u32>(w << 24u, w << 16u, w << 8u, w) & vec4<u32>(0x80000000u);
    let v = bitcast<vec4<f32>>(em + vec4<u32>(120u << 23u));
    let r = select(v, fma(v, vec4<f32>(2.0), vec4<f32>(-0.015625)), v < vec4<f32>(0.015625));
    return bitcast<vec4<f32>>(bitcast<vec4<u32>>(r) | sign);
}

// Bit 7 of a byte is set in (result & 0x80808080) iff that byte of some word
// of w is a NaN code: magnitude 0x7f plus one carries into bit 7, no smaller
// magnitude does, and no byte carries into the next.
fn nan_bytes(w: vec4<u32>) -> u32 {
    let m = vec4<u32>(0x7f7f7f7fu);
    let c = (w & m) + vec4<u32>(0x01010101u);
    return (c.x | c.y) | (c.z | c.w);
}

fn e8_word(i: u32) -> u32 {
    return d_e8[i >> 2u][i & 3u];
}

// h elements 4j..4j+3 as f32 from words (a, b) = h words 2j, 2j + 1.
fn hq(a: u32, b: u32) -> vec4<f32> {
    return vec4<f32>(bf16_lo(a), bf16_hi(a), bf16_lo(b), bf16_hi(b));
}

// Σ of 16 products: codes of a table vector against 16 h values (NaN codes flagged apart).
fn dot16(w: vec4<u32>, f0: vec4<f32>, f1: vec4<f32>, f2: vec4<f32>, f3: vec4<f32>) -> f32 {
    return (dot(e4m3x4_fast(w.x), f0) + dot(e4m3x4_fast(w.y), f1)) + (dot(e4m3x4_fast(w.z), f2) + dot(e4m3x4_fast(w.w), f3));
}

@compute @workgroup_size(256)
fn lm_head_logits_fp8(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
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
    // acc[i] holds h row i against the slice's 4 rows (one per component).
    var acc: array<vec4<f32>, 16>;
    if (hdim % 16u == 0u && aligned4(p.h, p.e8, NONE, NONE)) {
        let n = hdim / 16u;
        let e = p.e8 / 4u;
        let hb = p.h / 4u;
        var bad = vec4<u32>(0u);
        for (var c = lane; c < n; c += 32u) {
            let w0 = d_e8[e + v0 * n + c];
            let w1 = d_e8[e + v1 * n + c];
            let w2 = d_e8[e + v2 * n + c];
            let w3 = d_e8[e + v3 * n + c];
            bad |= vec4<u32>(nan_bytes(w0), nan_bytes(w1), nan_bytes(w2), nan_bytes(w3));
            for (var i = 0u; i < M; i++) {
                // h elements 16c..16c+15 of row i: vectors 2c, 2c + 1 (h rows are 2n vectors).
                let a = d_h[hb + i * 2u * n + 2u * c];
                let b = d_h[hb + i * 2u * n + 2u * c + 1u];
                let f0 = hq(a.x, a.y);
                let f1 = hq(a.z, a.w);
                let f2 = hq(b.x, b.y);
                let f3 = hq(b.z, b.w);
                acc[i] += vec4<f32>(dot16(w0, f0, f1, f2, f3), dot16(w1, f0, f1, f2, f3), dot16(w2, f0, f1, f2, f3),
                                    dot16(w3, f0, f1, f2, f3));
            }
        }
        let nan_row = (bad & vec4<u32>(0x80808080u)) != vec4<u32>(0u);
        for (var i = 0u; i < M; i++) {
            acc[i] = select(acc[i], vec4<f32>(bitcast<f32>(F32_NAN)), nan_row);
        }
    } else {
        let n = hdim / 4u;
        let hw = hdim / 2u;
        for (var c = lane; c < n; c += 32u) {
            let t0 = e4m3x4(e8_word(p.e8 + v0 * n + c));
            let t1 = e4m3x4(e8_word(p.e8 + v1 * n + c));
            let t2 = e4m3x4(e8_word(p.e8 + v2 * n + c));
            let t3 = e4m3x4(e8_word(p.e8 + v3 * n + c));
            for (var i = 0u; i < M; i++) {
                let f = hq(h_word(p.h + i * hw + 2u * c), h_word(p.h + i * hw + 2u * c + 1u));
                acc[i] += vec4<f32>(dot(t0, f), dot(t1, f), dot(t2, f), dot(t3, f));
            }
        }
    }
    store_logits(&acc, g, lid, vocab);
}
