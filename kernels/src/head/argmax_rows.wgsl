// argmax_rows_once (the default plan): grid (chunks, m), each workgroup
// reduces a chunk of 1024 · VECS logits of one row (VECS = 1, 2 or 4, an
// override constant the plan picks so that small m still spreads a row over
// many workgroups) to an (index, value) pair in the plan's workspace; the
// last of a row's workgroups to arrive (the row's arrival counter, which it
// puts back to zero) reduces the row's pairs and writes the result. One
// dispatch: on the H200 two dispatches with no data cost 0.0112 ms, more
// than 70% of copy speed allows for the whole 16.8 MB bench row. With one
// chunk a row the workgroup writes the result itself.
// The two-pass plan (more rows than the backend has counters, or forced):
// argmax_rows writes the pairs, argmax_rows_final (one workgroup per row)
// reduces them.
// When vocab % 4 == 0 and logits sits at a word offset that is a multiple of
// 4, an invocation loads its VECS vectors of 4 logits as independent vec4
// loads issued in one burst (every access of the workgroup coalesced);
// otherwise one word at a time. Candidates compare by value, then lowest
// index; -1 (nothing eligible) loses to everything. The workgroup reductions
// are row_best (the lanes: subgroupMax / subgroupMin where the device has
// subgroups, a workgroup-memory tree otherwise); a comparison, so the result
// depends neither on the order nor on which workgroup arrives last.
// Measured slower on the H200 at m = 16 (BENCHMARKS.md, eighth session):
// VECS 8 and 16 (fewer, fatter workgroups), and each vector reduced on its
// own before a pairwise merge instead of the one chain of compares.
struct Params {
    idx: u32, val: u32, logits: u32, m: i32, vocab: i32, ex0: i32, ex1: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_idx: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_val: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_logits: array<vec4<u32>>;
// The plan's workspace: [row][chunk] pairs of (index, value bits); x0 = chunks per row.
// Atomic so that the last workgroup's loads come from where the others'
// stores went (device scope), not from a stale cache line.
@group(0) @binding(4) var<storage, read_write> d_scratch: array<atomic<u32>>;
// The backend's arrival counters (argmax_rows_once): one a row, zero between launches.
@group(0) @binding(5) var<storage, read_write> d_arrivals: array<atomic<u32>>;

const WG: u32 = 256u;
const NEG_INF: u32 = 0xff800000u;
// Vectors of 4 logits per invocation in the first pass (1, 2 or 4).
override VECS: u32 = 4u;

// Logit vector q of a row (zeros past nq; take() drops those indices).
fn ld4(rq: u32, q: u32, nq: u32) -> vec4<f32> {
    if (q < nq) {
        return bitcast<vec4<f32>>(d_logits[rq + q]);
    }
    return vec4<f32>(0.0);
}

// Candidate v with logit x replaces (bi, bv) when eligible and strictly
// larger; callers offer indices in increasing order, so ties keep the lowest.
fn take(bi: ptr<function, i32>, bv: ptr<function, f32>, v: u32, x: f32, vocab: u32) {
    let vi = i32(v);
    if (v < vocab && vi != p.ex0 && vi != p.ex1 && !is_nan_f32(x) && (*bi < 0 || x > *bv)) {
        *bi = vi;
        *bv = x;
    }
}

// The best (index, value bits) of chunk c of row i; every invocation of the
// workgroup calls it (row_best's barriers).
fn chunk_best(c: u32, i: u32, ln: Lanes) -> vec2<u32> {
    let lid = ln.lid;
    let vocab = u32(p.vocab);
    var bi = -1;
    var bv = bitcast<f32>(NEG_INF);
    if (vocab % 4u == 0u && aligned4(p.logits, NONE, NONE, NONE)) {
        // Vectors q = c * WG * VECS + t * WG + lid hold logits 4q..4q+3.
        let nq = vocab / 4u;
        let q0 = c * WG * VECS + lid;
        let rq = p.logits / 4u + i * nq;
        var a: array<vec4<f32>, 4>;
        for (var t = 0u; t < VECS; t++) {
            a[t] = ld4(rq, q0 + t * WG, nq);
        }
        // Indices rise along the loads, so strict > keeps the lowest on ties.
        for (var t = 0u; t < VECS; t++) {
            let v = a[t];
            let q = q0 + t * WG;
            take(&bi, &bv, 4u * q, v.x, vocab);
            take(&bi, &bv, 4u * q + 1u, v.y, vocab);
            take(&bi, &bv, 4u * q + 2u, v.z, vocab);
            take(&bi, &bv, 4u * q + 3u, v.w, vocab);
        }
    } else {
        let row = p.logits + i * vocab;
        for (var t = 0u; t < 4u * VECS; t++) {
            let v = c * WG * 4u * VECS + t * WG + lid;
            if (v < vocab) {
                let w = row + v;
                take(&bi, &bv, v, bitcast<f32>(d_logits[w >> 2u][w & 3u]), vocab);
            }
        }
    }
    return row_best(bi, bv, ln);
}

// Stores a chunk's pair (invocation 0).
fn store_pair(i: u32, c: u32, b: vec2<u32>) {
    let s = 2u * (i * p.x0 + c);
    atomicStore(&d_scratch[s], b.x);
    atomicStore(&d_scratch[s + 1u], b.y);
}

// Row i's best over its x0 chunk pairs, written to the outputs; every
// invocation of the workgroup calls it.
fn finish_row(i: u32, ln: Lanes) {
    let lid = ln.lid;
    var bi = -1;
    var bv = bitcast<f32>(NEG_INF);
    for (var c = lid; c < p.x0; c += WG) {
        let s = 2u * (i * p.x0 + c);
        let ci = bitcast<i32>(atomicLoad(&d_scratch[s]));
        let cv = bitcast<f32>(atomicLoad(&d_scratch[s + 1u]));
        if (beats_best(ci, cv, bi, bv)) {
            bi = ci;
            bv = cv;
        }
    }
    write_row(i, row_best(bi, bv, ln), lid);
}

fn write_row(i: u32, b: vec2<u32>, lid: u32) {
    if (lid == 0u) {
        d_idx[p.idx + i] = b.x;
        d_val[p.val + i] = b.y;
    }
}

//! include "util/arrival.wgsli"

@compute @workgroup_size(256)
fn argmax_rows_once(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, ln: Lanes) {
    let lid = ln.lid;
    let c = group_x(wid, nwg, p.fold);
    let i = group_y(wid, p.fold);
    if (c >= p.gx || i >= p.gy || i >= u32(p.m)) {
        return;
    }
    let b = chunk_best(c, i, ln);
    if (p.x0 == 1u) {
        write_row(i, b, lid);
        return;
    }
    if (lid == 0u) {
        store_pair(i, c, b);
    }
    if (last_to_arrive(i, p.x0, lid)) {
        finish_row(i, ln);
    }
}

@compute @workgroup_size(256)
fn argmax_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, ln: Lanes) {
    let c = group_x(wid, nwg, p.fold);
    let i = group_y(wid, p.fold);
    if (c >= p.gx || i >= p.gy || i >= u32(p.m)) {
        return;
    }
    let b = chunk_best(c, i, ln);
    if (ln.lid == 0u) {
        store_pair(i, c, b);
    }
}

@compute @workgroup_size(256)
fn argmax_rows_final(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, ln: Lanes) {
    let i = group_x(wid, nwg, p.fold);
    if (i >= p.gx || i >= u32(p.m)) {
        return;
    }
    finish_row(i, ln);
}
