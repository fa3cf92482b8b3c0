// Two passes. argmax_rows: grid (chunks, m), each workgroup reduces 4096
// logits of one row to (index, value) in the plan's workspace. When
// vocab % 4 == 0 and logits sits at a word offset that is a multiple of 4,
// an invocation loads its 16 logits as four independent vec4 loads issued in
// one burst (64 bytes in flight, every access of the workgroup coalesced);
// otherwise one word at a time. argmax_rows_final: one workgroup per row
// reduces the chunks. Candidates compare by value, then lowest index; -1
// (nothing eligible) loses to everything.
struct Params {
    idx: u32, val: u32, logits: u32, m: i32, vocab: i32, ex0: i32, ex1: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_idx: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_val: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_logits: array<vec4<u32>>;
// The plan's workspace: [row][chunk] pairs of (index, value bits); x0 = chunks per row.
@group(0) @binding(4) var<storage, read_write> d_scratch: array<u32>;

const WG: u32 = 256u;
const PER: u32 = 16u;
const NEG_INF: u32 = 0xff800000u;

var<workgroup> ri: array<i32, 256>;
var<workgroup> rv: array<f32, 256>;

fn beats(bi: i32, bv: f32, ai: i32, av: f32) -> bool {
    if (bi < 0) {
        return false;
    }
    if (ai < 0) {
        return true;
    }
    return bv > av || (bv == av && bi < ai);
}

// Tree reduction of (ri, rv); the winner ends in slot 0.
fn reduce(lid: u32) {
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s && beats(ri[lid + s], rv[lid + s], ri[lid], rv[lid])) {
            ri[lid] = ri[lid + s];
            rv[lid] = rv[lid + s];
        }
        workgroupBarrier();
    }
}

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

@compute @workgroup_size(256)
fn argmax_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let c = group_x(wid, nwg, p.fold);
    let i = group_y(wid, p.fold);
    if (c >= p.gx || i >= p.gy || i >= u32(p.m)) {
        return;
    }
    let vocab = u32(p.vocab);
    let row = p.logits + i * vocab;
    var bi = -1;
    var bv = bitcast<f32>(NEG_INF);
    if (vocab % 4u == 0u && aligned4(p.logits, NONE, NONE, NONE)) {
        // Vectors q = c * 1024 + t * 256 + lid hold logits 4q..4q+3.
        let nq = vocab / 4u;
        let q0 = c * WG * 4u + lid;
        let rq = p.logits / 4u + i * nq;
        let a = ld4(rq, q0, nq);
        let b = ld4(rq, q0 + WG, nq);
        let d = ld4(rq, q0 + 2u * WG, nq);
        let e = ld4(rq, q0 + 3u * WG, nq);
        // Indices rise along the loads, so strict > keeps the lowest on ties.
        for (var k = 0u; k < 4u; k++) {
            take(&bi, &bv, 4u * q0 + k, a[k], vocab);
        }
        for (var k = 0u; k < 4u; k++) {
            take(&bi, &bv, 4u * (q0 + WG) + k, b[k], vocab);
        }
        for (var k = 0u; k < 4u; k++) {
            take(&bi, &bv, 4u * (q0 + 2u * WG) + k, d[k], vocab);
        }
        for (var k = 0u; k < 4u; k++) {
            take(&bi, &bv, 4u * (q0 + 3u * WG) + k, e[k], vocab);
        }
    } else {
        let row = p.logits + i * vocab;
        for (var t = 0u; t < PER; t++) {
            let v = c * WG * PER + t * WG + lid;
            if (v < vocab) {
                let w = row + v;
                take(&bi, &bv, v, bitcast<f32>(d_logits[w >> 2u][w & 3u]), vocab);
            }
        }
    }
    ri[lid] = bi;
    rv[lid] = bv;
    reduce(lid);
    if (lid == 0u) {
        let s = 2u * (i * p.x0 + c);
        d_scratch[s] = bitcast<u32>(ri[0]);
        d_scratch[s + 1u] = bitcast<u32>(rv[0]);
    }
}

@compute @workgroup_size(256)
fn argmax_rows_final(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let i = group_x(wid, nwg, p.fold);
    if (i >= p.gx || i >= u32(p.m)) {
        return;
    }
    var bi = -1;
    var bv = bitcast<f32>(NEG_INF);
    for (var c = lid; c < p.x0; c += WG) {
        let s = 2u * (i * p.x0 + c);
        let ci = bitcast<i32>(d_scratch[s]);
        let cv = bitcast<f32>(d_scratch[s + 1u]);
        if (beats(ci, cv, bi, bv)) {
            bi = ci;
            bv = cv;
        }
    }
    ri[lid] = bi;
    rv[lid] = bv;
    reduce(lid);
    if (lid == 0u) {
        d_idx[p.idx + i] = bitcast<u32>(ri[0]);
        d_val[p.val + i] = bitcast<u32>(rv[0]);
    }
}
