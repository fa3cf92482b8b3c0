// Router softmax and top-k, one 32-thread workgroup per row. The
// probabilities live in workgroup memory (e ≤ 1024). The softmax sum is taken
// by one thread in index order, as the contract says, so the denominators
// match the reference's order. Each of the k rounds has every thread propose
// its best remaining expert (scanning in index order with a strict compare, so
// the lowest index wins a tie), and thread 0 picks the best proposal under the
// same rule; the winner is then retired with a −1 sentinel (probabilities are
// ≥ 0). The renormaliser sums the chosen probabilities in selection
// (descending) order, as the reference.
struct Params {
    topk_ids: u32, topk_w: u32, logits: u32, per_expert_scale: u32, rows: i32, e: i32, k: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_topk_ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_topk_w: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_logits: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_per_expert_scale: array<u32>;

const WG: u32 = 32u;
const MAX_E: u32 = 1024u;
const MAX_K: u32 = 32u;

var<workgroup> pv: array<f32, MAX_E>;
var<workgroup> cand_i: array<i32, WG>;
var<workgroup> cand_v: array<f32, WG>;
var<workgroup> pick_i: array<i32, MAX_K>;
var<workgroup> pick_v: array<f32, MAX_K>;
var<workgroup> shared_f: f32;

// bf16 element g of the logits (rows of odd length start mid-word).
fn logit(g: u32) -> f32 {
    let w = d_logits[p.logits + g / 2u];
    return select(bf16_lo(w), bf16_hi(w), (g & 1u) == 1u);
}

fn beats(bi: i32, bv: f32, ai: i32, av: f32) -> bool {
    if (bi < 0) {
        return false;
    }
    if (ai < 0) {
        return true;
    }
    return bv > av || (bv == av && bi < ai);
}

@compute @workgroup_size(32)
fn moe_router_topk(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let r = group_x(wid, nwg, p.fold);
    if (r >= p.gx || r >= u32(p.rows)) {
        return;
    }
    let e = min(u32(p.e), MAX_E);
    let k = min(u32(p.k), min(e, MAX_K));
    var m = bitcast<f32>(0xff800000u);
    for (var i = lid; i < e; i += WG) {
        let x = logit(r * e + i);
        pv[i] = x;
        m = max(m, x);
    }
    cand_v[lid] = m;
    workgroupBarrier();
    if (lid == 0u) {
        var mm = cand_v[0];
        for (var t = 1u; t < WG; t++) {
            mm = max(mm, cand_v[t]);
        }
        shared_f = mm;
    }
    workgroupBarrier();
    m = shared_f;
    for (var i = lid; i < e; i += WG) {
        pv[i] = exp(pv[i] - m);
    }
    workgroupBarrier();
    if (lid == 0u) {
        var sum = 0.0;
        for (var i = 0u; i < e; i++) {
            sum += pv[i];
        }
        shared_f = sum;
    }
    workgroupBarrier();
    let sum = shared_f;
    for (var i = lid; i < e; i += WG) {
        pv[i] = pv[i] / sum;
    }
    workgroupBarrier();
    for (var round = 0u; round < k; round++) {
        var bi = -1;
        var bv = 0.0;
        for (var i = lid; i < e; i += WG) {
            let v = pv[i];
            if (v >= 0.0 && beats(i32(i), v, bi, bv)) {
                bi = i32(i);
                bv = v;
            }
        }
        cand_i[lid] = bi;
        cand_v[lid] = bv;
        workgroupBarrier();
        if (lid == 0u) {
            var wi = cand_i[0];
            var wv = cand_v[0];
            for (var t = 1u; t < WG; t++) {
                if (beats(cand_i[t], cand_v[t], wi, wv)) {
                    wi = cand_i[t];
                    wv = cand_v[t];
                }
            }
            pick_i[round] = wi;
            pick_v[round] = wv;
            if (wi >= 0) {
                pv[u32(wi)] = -1.0;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        var norm = 0.0;
        for (var j = 0u; j < k; j++) {
            norm += pick_v[j];
        }
        for (var j = 0u; j < k; j++) {
            let id = pick_i[j];
            d_topk_ids[p.topk_ids + r * u32(p.k) + j] = bitcast<u32>(id);
            let s = bitcast<f32>(d_per_expert_scale[p.per_expert_scale + u32(max(id, 0))]);
            d_topk_w[p.topk_w + r * u32(p.k) + j] = bitcast<u32>(pick_v[j] / norm * s);
        }
    }
}
