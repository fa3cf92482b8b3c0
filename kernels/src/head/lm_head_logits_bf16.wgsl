// out[i, v] = softcap(Σₖ h[i, k] · table[v, k]) over a bf16 table, M (= m,
// 1..=16) a pipeline override. Same geometry as lm_head_logits_fp8: a
// workgroup of 256 takes NR = 32 vocab rows, each 32-lane slice RPW = 4 of
// them, lanes striding over k so every table load is coalesced. On the fast
// path (table, both windows and h at word offsets that are multiples of 4;
// hdim % 8 == 0 holds by contract) a lane loads one vec4<u32> (8 bf16) from
// each of its 4 rows per step, four independent 16-byte loads in flight,
// and reuses the matching h vector (from cache) across them. Other offsets
// run the same loop a word (2 bf16) at a time.
//
// The table is bound through two windows (head/mod.rs), as the bf16 gathers
// bind theirs: local rows [0, x1) at word `table` of d_table and
// [x1, x1 + x3) at word w1 of d_table1, so the 2.8 GB Gemma table (two
// windows under a 2 GiB binding) is one pass instead of one pass a window.
// The plan cuts windows at multiples of NR whenever x3 > 0, so a slice's
// rows never straddle the two and each slice reads one binding throughout
// (a table that fits one binding is one window with x3 = 0).
//
// H200, m = 1, vocab 262144, hdim 5376 (benchmarks/2026-12-02-wgpu-head2-h200, one
// call, GPU time, a process each): this one-pass plan 0.6150 ms (4.58
// TB/s, the CUDA kernel's rate at this shape), one window a pass 1.4366 ms,
// the build before 1.4379. A repeat (benchmarks/2026-12-02-final9-h200,
// alternating processes) gave 0.6127 / 0.6142 against 1.4465 / 1.4390 by
// the timestamps, but one of its two one-pass processes had the two-pass
// wall time, and half the vocabulary in one window ran at 0.72-0.75 ms
// there (0.3151 in the first call): not established.
// SWITCHYARD_WGSL_HEAD_HALVES=1 (head/mod.rs) is the next measurement.
// Workgroups of 16 or 8 rows (two or four slices sharing a row set) 1.4160
// / 1.5037 ms, one pass each; earlier, 2 vectors of each row in flight
// measured the same as 1, and walking the 4 rows one after the other 1.5x
// slower (eighth session).
struct Params {
    out: u32, h: u32, table: u32, m: i32, vocab: i32, hdim: i32, softcap: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
    // The second window's word offset in d_table1 (after the tail: head/mod.rs).
    w1: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_h: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_table: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> d_table1: array<vec4<u32>>;

//! include "head/lm_head_common.wgsli"

fn logit(v: u32, s: f32) -> f32 {
    return s;
}

// Table word i of the first window's binding, or of the second's when b.
fn t_word(b: bool, i: u32) -> u32 {
    if (b) {
        return d_table1[i >> 2u][i & 3u];
    }
    return d_table[i >> 2u][i & 3u];
}

// Σ of 8 products of two bf16 vectors.
fn dot8(w: vec4<u32>, lo: vec4<f32>, hi: vec4<f32>) -> f32 {
    return dot(bf16x4_lo(w), lo) + dot(bf16x4_hi(w), hi);
}

fn dot2(w: u32, a: f32, b: f32) -> f32 {
    return bf16_lo(w) * a + bf16_hi(w) * b;
}

// One step of the fast path: table vectors w0..w3 of the slice's 4 rows
// (vector c of each) against vector c of every h row.
fn step8(acc: ptr<function, array<vec4<f32>, 16>>, w0: vec4<u32>, w1: vec4<u32>, w2: vec4<u32>, w3: vec4<u32>, hb: u32,
         n: u32, c: u32) {
    for (var i = 0u; i < M; i++) {
        let hv = d_h[hb + i * n + c];
        let lo = bf16x4_lo(hv);
        let hi = bf16x4_hi(hv);
        (*acc)[i] += vec4<f32>(dot8(w0, lo, hi), dot8(w1, lo, hi), dot8(w2, lo, hi), dot8(w3, lo, hi));
    }
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
    // Rows of this pass's windows (lm_head_common.wgsli); rows past their
    // end read the last row (in bounds); their sums are dropped.
    let r0 = g * NR + slice * RPW;
    let last = p.x1 + p.x3 - 1u;
    let v0 = min(r0, last);
    let v1 = min(r0 + 1u, last);
    let v2 = min(r0 + 2u, last);
    let v3 = min(r0 + 3u, last);
    // The slice's window: all 4 rows lie in the same one (see the header);
    // with x3 = 0, last < x1 keeps every row in the first.
    let second = v0 >= p.x1;
    var acc: array<vec4<f32>, 16>;
    if (hdim % 8u == 0u && aligned4(p.h, p.table, p.w1, NONE)) {
        let n = hdim / 8u;
        let hb = p.h / 4u;
        // Each loop reads one binding, so the branch is taken once a slice,
        // not once a load.
        if (second) {
            let t = p.w1 / 4u;
            let b = vec4<u32>(v0 - p.x1, v1 - p.x1, v2 - p.x1, v3 - p.x1) * n + vec4<u32>(t);
            for (var c = lane; c < n; c += 32u) {
                step8(&acc, d_table1[b.x + c], d_table1[b.y + c], d_table1[b.z + c], d_table1[b.w + c], hb, n, c);
            }
        } else {
            let t = p.table / 4u;
            let b = vec4<u32>(v0, v1, v2, v3) * n + vec4<u32>(t);
            for (var c = lane; c < n; c += 32u) {
                step8(&acc, d_table[b.x + c], d_table[b.y + c], d_table[b.z + c], d_table[b.w + c], hb, n, c);
            }
        }
    } else {
        let n = hdim / 2u;
        // Word offsets of the 4 rows in the slice's binding.
        let b = select(vec4<u32>(v0, v1, v2, v3) * n + vec4<u32>(p.table),
                       vec4<u32>(v0 - p.x1, v1 - p.x1, v2 - p.x1, v3 - p.x1) * n + vec4<u32>(p.w1), vec4<bool>(second));
        for (var c = lane; c < n; c += 32u) {
            let w0 = t_word(second, b.x + c);
            let w1 = t_word(second, b.y + c);
            let w2 = t_word(second, b.z + c);
            let w3 = t_word(second, b.w + c);
            for (var i = 0u; i < M; i++) {
                let hv = h_word(p.h + i * n + c);
                let a = bf16_lo(hv);
                let bb = bf16_hi(hv);
                acc[i] += vec4<f32>(dot2(w0, a, bb), dot2(w1, a, bb), dot2(w2, a, bb), dot2(w3, a, bb));
            }
        }
    }
    store_logits(&acc, g, lid, vocab);
}
