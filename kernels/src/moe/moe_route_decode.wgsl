// The fused decode routing (moe_route_decode) on WGSL. Two phases:
// - the logits: a workgroup of 256 per (row r, expert x) loads expert x's
//   router row and the row's input, forms rn = bf16(x · inv · scale · root)
//   (left to right; Σx² order free) and the products rn · w in registers,
//   and stages the products in workgroup memory by router_dot's partial;
//   then 32 invocations each run one partial's chain from +0 (dim / 256
//   chunks of 8, 11 at dim 2816), and one adds the 32 in router_dot's tree.
//   rn and the router weights are bf16, so each product is exact in f32 and
//   a driver that contracts `acc + rn * w` into an FMA changes nothing. The
//   logit (f32 bits) goes to the plan's workspace. (Until the fifteenth
//   session the logit was the strict k chain, one invocation's dim adds,
//   which held this phase at ~30 us a dispatch on the H200.)
// - the selection, in one workgroup: the logits packed to bf16 (the output,
//   and what the selection reads), each row's softmax (max, then the sum of
//   exp(l - m) in index order, by one invocation a row), the k rounds over
//   rank keys as the CUDA kernel: the f32 bits of p with the sign cleared,
//   plus one, so a NaN p ranks above every number as in the reference's
//   total order, and the lowest index wins a tie. A row's experts are spread
//   over a group of 256 / rows' invocations, which reduce each round's best
//   through workgroup memory; the winner's p is recomputed from its logit by
//   the same expression, so it has the same bits. Then counts, offsets (one
//   invocation, in order) and slots (an invocation per pair, ranking it among
//   the earlier pairs of its expert).
// moe_route_decode_once (the default) is both in one dispatch: the last of
// the logits' workgroups to arrive (the backend's arrival counter) selects.
// SWITCHYARD_WGSL_ROUTE_PASSES=2 runs them as two dispatches
// (moe_route_decode_chains, then moe_route_decode).
// The earlier form, an invocation per (row, expert pair) running the norm
// and both chains from global memory, took 439 us a dispatch on the H200
// (BENCHMARKS.md, thirteenth session): every one of its loads waited alone.
struct Params {
    topk_ids: u32, topk_w: u32, offsets: u32, pair_of_slot: u32, slot_of_pair: u32, logits: u32,
    x: u32, scale: u32, router_w: u32, per_expert_scale: u32,
    rows: i32, dim: i32, e: i32, k: i32, eps: f32, root: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_topk_ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_topk_w: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_offsets: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_pair_of_slot: array<u32>;
@group(0) @binding(5) var<storage, read_write> d_slot_of_pair: array<u32>;
@group(0) @binding(6) var<storage, read_write> d_logits: array<u32>;
@group(0) @binding(7) var<storage, read_write> d_x: array<u32>;
@group(0) @binding(8) var<storage, read_write> d_scale: array<u32>;
@group(0) @binding(9) var<storage, read_write> d_router_w: array<u32>;
@group(0) @binding(10) var<storage, read_write> d_per_expert_scale: array<u32>;
// The plan's workspace: the chains' f32 bits, logit (r, x) at r · e + x.
// Atomic so that the selecting workgroup's loads come from where the other
// workgroups' stores went (device scope), not from a stale cache line.
@group(0) @binding(11) var<storage, read_write> d_chain: array<atomic<u32>>;
// The backend's arrival counters (moe_route_decode_once): one, zero between launches.
@group(0) @binding(12) var<storage, read_write> d_arrivals: array<atomic<u32>>;

const WG: u32 = 256u;
const MAX_ROWS: u32 = 16u;
const MAX_E: u32 = 256u;
const MAX_K: u32 = 32u;
// Words of a router row: dim <= 3072 (the contract's ROUTE_DECODE_MAX_DIM),
// six an invocation (route_chain's named words j, j + WG, ..., j + 5 · WG).
const ROW_WORDS: u32 = 1536u;
// Experts a selecting invocation holds: e <= 256 over groups of >= 16.
const PER_LANE: u32 = 16u;

// Workgroup memory, one array reused by the phases (a dispatch takes only
// what its entry uses, under the 16 KiB every adapter has):
// - logits: the products [0, 2 · ROW_WORDS), partial j's element e (0..8)
//   of its round t (chunk j + 32t) at (8t + e) · 32 + j (prod_at), so that
//   the 32 chains' loads of one element are 32 consecutive words;
// - selection: the packed bf16 logits [0, 2048) (rows · e / 2 words), round
//   keys [2048, 2304) and indices [2304, 2560), picks' ids [2560, 3072) (row
//   r's pick c at r · MAX_K + c), counts [3072, 3328), offsets [3328, 3585),
//   row max [3585, 3601) and sum [3601, 3617). The selection reads the
//   logits from here (on the H200 as fast as reading them back from global
//   memory: 59.8 against 58.9 us a dispatch, thirteenth session).
var<workgroup> wsm: array<u32, 3620>;
const LOGITS: u32 = 0u;
const SEL_KEY: u32 = 2048u;
const SEL_IDX: u32 = 2304u;
const PICK_ID: u32 = 2560u;
const CNT: u32 = 3072u;
const OFF: u32 = 3328u;
const ROW_M: u32 = 3585u;
const ROW_SUM: u32 = 3601u;

// Workgroup t of the (folded) grid takes logit (row t / e, expert t % e);
// the padding of a folded grid takes none but still arrives.
@compute @workgroup_size(256)
fn moe_route_decode_chains(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, ln: Lanes) {
    route_chain(group_x(wid, nwg, p.fold), ln.lid);
}

//! include "util/arrival.wgsli"

@compute @workgroup_size(256)
fn moe_route_decode_once(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, ln: Lanes) {
    let lid = ln.lid;
    route_chain(group_x(wid, nwg, p.fold), lid);
    if (last_to_arrive(0u, nwg.x * nwg.y * nwg.z, lid)) {
        route_select(ln);
    }
}

@compute @workgroup_size(256)
fn moe_route_decode(ln: Lanes) {
    route_select(ln);
}

// Logit t = (row r, expert xe) into the workspace, if t < gx; every
// invocation of the workgroup calls it (it holds barriers).
fn route_chain(t: u32, lid: u32) {
    let e = u32(p.e);
    let xe = t % max(e, 1u);
    let r = t / max(e, 1u);
    let hw = min(u32(p.dim) / 2u, ROW_WORDS);
    // gx = rows · e (the plan), so a real t has r < rows and xe < e.
    let real = t < p.gx;
    // The router row, this invocation's words of the input row and of the
    // scale, all loads issued before any is used, as named values (held in
    // arrays, they went through memory one at a time on the H200's Vulkan
    // driver): indices clamped into the row (hw >= 4), the words past it
    // neither stored nor added. A folded grid's padding reads the last row.
    let wo = p.router_w + xe * hw;
    let xo = p.x + min(r, max(u32(p.rows), 1u) - 1u) * hw;
    let so = p.scale;
    let last = hw - 1u;
    let j1 = lid + WG;
    let j2 = lid + 2u * WG;
    let j3 = lid + 3u * WG;
    let j4 = lid + 4u * WG;
    let j5 = lid + 5u * WG;
    let w0 = d_router_w[wo + min(lid, last)];
    let w1 = d_router_w[wo + min(j1, last)];
    let w2 = d_router_w[wo + min(j2, last)];
    let w3 = d_router_w[wo + min(j3, last)];
    let w4 = d_router_w[wo + min(j4, last)];
    let w5 = d_router_w[wo + min(j5, last)];
    let x0 = d_x[xo + min(lid, last)];
    let x1 = d_x[xo + min(j1, last)];
    let x2 = d_x[xo + min(j2, last)];
    let x3 = d_x[xo + min(j3, last)];
    let x4 = d_x[xo + min(j4, last)];
    let x5 = d_x[xo + min(j5, last)];
    let s0 = d_scale[so + min(lid, last)];
    let s1 = d_scale[so + min(j1, last)];
    let s2 = d_scale[so + min(j2, last)];
    let s3 = d_scale[so + min(j3, last)];
    let s4 = d_scale[so + min(j4, last)];
    let s5 = d_scale[so + min(j5, last)];
    // Σ x² over the words in order (order free in the contract, kept).
    var ss = 0.0;
    ss += sq_word(lid, hw, real, x0);
    ss += sq_word(j1, hw, real, x1);
    ss += sq_word(j2, hw, real, x2);
    ss += sq_word(j3, hw, real, x3);
    ss += sq_word(j4, hw, real, x4);
    ss += sq_word(j5, hw, real, x5);
    let inv = inv_rms(wg_sum256(ss, lid), u32(p.dim), p.eps);
    // The products rn · w of this invocation's words, formed in registers
    // and staged by partial, so that each chain is only its loads and adds.
    put_prod(lid, hw, real, x0, s0, w0, inv);
    put_prod(j1, hw, real, x1, s1, w1, inv);
    put_prod(j2, hw, real, x2, s2, w2, inv);
    put_prod(j3, hw, real, x3, s3, w3, inv);
    put_prod(j4, hw, real, x4, s4, w4, inv);
    put_prod(j5, hw, real, x5, s5, w5, inv);
    workgroupBarrier();
    // Partial lid: chunks lid, lid + 32, ... of the hw / 4 (dim % 8 == 0),
    // each chunk's eight products in k order; the next chunk's loads are
    // issued before this chunk's adds (the last round reloads its own).
    // wg_red is free again (wg_sum256 ends on a barrier).
    if (lid < 32u) {
        let nq = hw / 4u;
        var acc = 0.0;
        if (real && lid < nq) {
            let last = lid + (nq - 1u - lid) / 32u * 32u;
            var c = lid;
            var q0 = prod_words(c, 0u);
            var q1 = prod_words(c, 4u);
            loop {
                let nx = min(c + 32u, last);
                let n0 = prod_words(nx, 0u);
                let n1 = prod_words(nx, 4u);
                acc = acc + bitcast<f32>(q0.x);
                acc = acc + bitcast<f32>(q0.y);
                acc = acc + bitcast<f32>(q0.z);
                acc = acc + bitcast<f32>(q0.w);
                acc = acc + bitcast<f32>(q1.x);
                acc = acc + bitcast<f32>(q1.y);
                acc = acc + bitcast<f32>(q1.z);
                acc = acc + bitcast<f32>(q1.w);
                if (c == last) {
                    break;
                }
                c = nx;
                q0 = n0;
                q1 = n1;
            }
        }
        wg_red[lid] = acc;
    }
    workgroupBarrier();
    if (real && lid == 0u) {
        // router_dot's tree, written out (p[j] = p[j] + p[j + w] for w = 1,
        // 2, 4, 8, 16), so no compiler may reassociate it.
        let t0 = part_tree8(0u);
        let t1 = part_tree8(8u);
        let t2 = part_tree8(16u);
        let t3 = part_tree8(24u);
        atomicStore(&d_chain[r * e + xe], bitcast<u32>((t0 + t1) + (t2 + t3)));
    }
}

// Σ of the squares of input word x's two elements, if word j is one (else 0).
fn sq_word(j: u32, hw: u32, ok: bool, x: u32) -> f32 {
    if (ok && j < hw) {
        let a = bf16_lo(x);
        let b = bf16_hi(x);
        return a * a + b * b;
    }
    return 0.0;
}

// Where product k (element k % 8 of chunk k / 8) is staged.
fn prod_at(k: u32) -> u32 {
    let c = k / 8u;
    return ((c / 32u) * 8u + k % 8u) * 32u + c % 32u;
}

// Word j's two products rn · w, rn = bf16(x · inv · scale · root), staged
// if word j is one.
fn put_prod(j: u32, hw: u32, ok: bool, x: u32, s: u32, w: u32, inv: f32) {
    if (ok && j < hw) {
        let lo = bf16_round(bf16_lo(x) * inv * bf16_lo(s) * p.root);
        let hi = bf16_round(bf16_hi(x) * inv * bf16_hi(s) * p.root);
        let at = prod_at(2u * j);
        wsm[at] = bitcast<u32>(lo * bf16_lo(w));
        wsm[at + 32u] = bitcast<u32>(hi * bf16_hi(w));
    }
}

// Products e0..e0+3 of chunk c (its partial's elements, consecutive k).
fn prod_words(c: u32, e0: u32) -> vec4<u32> {
    let at = ((c / 32u) * 8u + e0) * 32u + c % 32u;
    return vec4<u32>(wsm[at], wsm[at + 32u], wsm[at + 64u], wsm[at + 96u]);
}

// The tree's first three levels over partials b..b+7 (wg_red).
fn part_tree8(b: u32) -> f32 {
    let p0 = wg_red[b];
    let p1 = wg_red[b + 1u];
    let p2 = wg_red[b + 2u];
    let p3 = wg_red[b + 3u];
    let p4 = wg_red[b + 4u];
    let p5 = wg_red[b + 5u];
    let p6 = wg_red[b + 6u];
    let p7 = wg_red[b + 7u];
    return ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7));
}

// Logit g (row-major over rows × e), bf16, from the staged words.
fn logit_at(g: u32) -> f32 {
    let w = wsm[LOGITS + g / 2u];
    return select(bf16_lo(w), bf16_hi(w), (g & 1u) == 1u);
}

// Row r's p of expert i, from the row's max m and sum.
fn prob(r: u32, i: u32, e: u32) -> f32 {
    return exp(logit_at(r * e + i) - bitcast<f32>(wsm[ROW_M + r])) / bitcast<f32>(wsm[ROW_SUM + r]);
}

// Whether candidate (ka, ia) beats (kb, ib): the larger key, then the lower index.
fn beats(ka: u32, ia: u32, kb: u32, ib: u32) -> bool {
    return ka > kb || (ka == kb && ia < ib);
}

// The selection, counts, offsets and slots from the workspace's chains: one
// workgroup of 256, every invocation calling it (it holds barriers).
fn route_select(ln: Lanes) {
    let lid = ln.lid;
    let rows = min(u32(p.rows), MAX_ROWS);
    let e = min(u32(p.e), MAX_E);
    let k = min(u32(p.k), min(e, MAX_K));
    let n = rows * k;
    // The logits, packed: the output, and what the rounds below read.
    for (var w = lid; w < rows * e / 2u; w += WG) {
        let lo = bitcast<f32>(atomicLoad(&d_chain[2u * w]));
        let hi = bitcast<f32>(atomicLoad(&d_chain[2u * w + 1u]));
        let word = pack_bf16(lo, hi);
        d_logits[p.logits + w] = word;
        wsm[LOGITS + w] = word;
    }
    workgroupBarrier();
    // Each row's max in two levels (max is order-free): an invocation a
    // segment of 16 experts, then one a row over its segments. Then the
    // row's sum of exp(l - m) in index order, four exps issued before their
    // four adds. (One invocation a row walking the row twice, an exp and an
    // add at a time, left the selection at 32.9 us a dispatch on the H200.)
    let segs = (e + 15u) / 16u;
    if (lid < rows * segs) {
        let r = lid / segs;
        let s0 = (lid % segs) * 16u;
        var m = bitcast<f32>(0xff800000u);
        for (var i = s0; i < min(s0 + 16u, e); i++) {
            m = max(m, logit_at(r * e + i));
        }
        wsm[SEL_KEY + lid] = bitcast<u32>(m);
    }
    workgroupBarrier();
    if (lid < rows) {
        let r = lid;
        var m = bitcast<f32>(0xff800000u);
        for (var s = 0u; s < segs; s++) {
            m = max(m, bitcast<f32>(wsm[SEL_KEY + r * segs + s]));
        }
        var sum = 0.0;
        var i = 0u;
        for (; i + 4u <= e; i += 4u) {
            let x0 = exp(logit_at(r * e + i) - m);
            let x1 = exp(logit_at(r * e + i + 1u) - m);
            let x2 = exp(logit_at(r * e + i + 2u) - m);
            let x3 = exp(logit_at(r * e + i + 3u) - m);
            sum += x0;
            sum += x1;
            sum += x2;
            sum += x3;
        }
        for (; i < e; i++) {
            sum += exp(logit_at(r * e + i) - m);
        }
        wsm[ROW_M + r] = bitcast<u32>(m);
        wsm[ROW_SUM + r] = bitcast<u32>(sum);
    }
    workgroupBarrier();
    // Row g of the groups of `size` invocations (a power of two >= 16);
    // member t holds experts t + size · j.
    var size = WG;
    while (size * rows > WG) {
        size = size / 2u;
    }
    let g = lid / size;
    let t = lid % size;
    let mine = g < rows;
    var keys: array<u32, PER_LANE>;
    for (var j = 0u; j < PER_LANE; j++) {
        let i = t + size * j;
        keys[j] = 0u;
        if (mine && i < e) {
            keys[j] = (bitcast<u32>(prob(g, i, e)) & 0x7fffffffu) + 1u;
        }
    }
    for (var c = 0u; c < k; c++) {
        // This invocation's best unchosen expert (key 0: none), lowest index first.
        var bk = 0u;
        var bi = 0xffffffffu;
        for (var j = 0u; j < PER_LANE; j++) {
            if (keys[j] > bk) {
                bk = keys[j];
                bi = t + size * j;
            }
        }
        var win = 0u;
        if (SUBGROUPS && rows == 1u) {
            // One row, the whole workgroup its group: each subgroup's best
            // by subgroup operations, then every invocation scans the
            // subgroups' (the same winner as the tree below: largest key,
            // then lowest index), two barriers a round instead of nine.
            let b = subgroup_key_best(bk, bi);
            if (lanes_leader(ln)) {
                wsm[SEL_KEY + lanes_group(ln)] = b.x;
                wsm[SEL_IDX + lanes_group(ln)] = b.y;
            }
            workgroupBarrier();
            var wk = 0u;
            win = 0xffffffffu;
            for (var q = 0u; q < lanes_groups(ln); q++) {
                if (beats(wsm[SEL_KEY + q], wsm[SEL_IDX + q], wk, win)) {
                    wk = wsm[SEL_KEY + q];
                    win = wsm[SEL_IDX + q];
                }
            }
        } else {
            wsm[SEL_KEY + lid] = bk;
            wsm[SEL_IDX + lid] = bi;
            workgroupBarrier();
            for (var s = size / 2u; s > 0u; s = s / 2u) {
                if (t < s) {
                    let ok = wsm[SEL_KEY + lid + s];
                    let oi = wsm[SEL_IDX + lid + s];
                    if (beats(ok, oi, wsm[SEL_KEY + lid], wsm[SEL_IDX + lid])) {
                        wsm[SEL_KEY + lid] = ok;
                        wsm[SEL_IDX + lid] = oi;
                    }
                }
                workgroupBarrier();
            }
            win = wsm[SEL_IDX + g * size];
        }
        if (mine) {
            // Constant indices (the driver unrolls the loop), so keys can stay
            // in registers.
            for (var j = 0u; j < PER_LANE; j++) {
                if (t + size * j == win) {
                    keys[j] = 0u;
                }
            }
            if (t == 0u) {
                wsm[PICK_ID + g * MAX_K + c] = win;
            }
        }
        workgroupBarrier();
    }
    if (lid < rows) {
        let r = lid;
        // The picks' p, recomputed by the rounds' expression (same bits).
        var norm = 0.0;
        for (var c = 0u; c < k; c++) {
            norm += prob(r, wsm[PICK_ID + r * MAX_K + c], e);
        }
        for (var c = 0u; c < k; c++) {
            let id = wsm[PICK_ID + r * MAX_K + c];
            let s = bitcast<f32>(d_per_expert_scale[p.per_expert_scale + id]);
            d_topk_ids[p.topk_ids + r * k + c] = id;
            d_topk_w[p.topk_w + r * k + c] = bitcast<u32>(prob(r, id, e) / norm * s);
        }
    }
    workgroupBarrier();
    if (lid < e) {
        var c = 0u;
        for (var q = 0u; q < n; q++) {
            c += select(0u, 1u, wsm[PICK_ID + (q / k) * MAX_K + q % k] == lid);
        }
        wsm[CNT + lid] = c;
    }
    workgroupBarrier();
    // Exclusive offsets in two levels (integer sums, order-free): a segment
    // of 16 experts' total an invocation, then each segment's offsets from
    // the totals before it.
    if (lid < segs) {
        var total = 0u;
        for (var x = lid * 16u; x < min(lid * 16u + 16u, e); x++) {
            total += wsm[CNT + x];
        }
        wsm[SEL_IDX + lid] = total;
    }
    workgroupBarrier();
    if (lid < segs) {
        var acc = 0u;
        for (var s = 0u; s < lid; s++) {
            acc += wsm[SEL_IDX + s];
        }
        for (var x = lid * 16u; x < min(lid * 16u + 16u, e); x++) {
            wsm[OFF + x] = acc;
            d_offsets[p.offsets + x] = acc;
            acc += wsm[CNT + x];
        }
        if (lid == segs - 1u) {
            wsm[OFF + e] = acc;
            d_offsets[p.offsets + e] = acc;
        }
    }
    workgroupBarrier();
    for (var q = lid; q < n; q += WG) {
        let id = wsm[PICK_ID + (q / k) * MAX_K + q % k];
        var rank = 0u;
        for (var t2 = 0u; t2 < q; t2++) {
            rank += select(0u, 1u, wsm[PICK_ID + (t2 / k) * MAX_K + t2 % k] == id);
        }
        let slot = wsm[OFF + id] + rank;
        d_pair_of_slot[p.pair_of_slot + slot] = q;
        d_slot_of_pair[p.slot_of_pair + q] = slot;
    }
}
