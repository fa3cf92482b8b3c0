// The fused decode routing (moe_route_decode). Where the (row, expert pair)
// work fits one workgroup of 256 (a decode step of one row: 64 pairs of
// 128 experts), moe_route_decode_one runs both halves below in that
// workgroup, the logits reaching the selection through a storageBarrier;
// otherwise two dispatches (SWITCHYARD_WGSL_ROUTE_PASSES=2 forces them):
// - moe_route_decode_logits: an invocation per (row, expert pair) takes the
//   row's Σx² (order free), then rn = bf16(x · inv · scale · root) left to
//   right and the two experts' strict k chains from +0. rn and the router
//   weights are bf16, so each product is exact in f32 and a driver that
//   contracts `acc + rn * w` into an FMA changes nothing. e is even: the
//   pair is one logits word.
// - moe_route_decode, the second dispatch: one workgroup. Invocation
//   r < rows runs row r's softmax (sum in index order) and its k rounds over
//   rank keys, as the CUDA kernel: the f32 bits of p with the sign cleared,
//   plus one, so a NaN p ranks above every number as in the reference's
//   total order, and the lowest index wins a tie (strict compare scanning
//   upward). p is recomputed from the logit in each round by the same
//   expression, so it has the same bits every time. Then counts (an
//   invocation per expert), the offsets (one invocation, in order) and the
//   slots (an invocation per pair, ranking it among the earlier pairs of its
//   expert).
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

const MAX_ROWS: u32 = 16u;
const MAX_E: u32 = 256u;
const MAX_K: u32 = 32u;

@compute @workgroup_size(64)
fn moe_route_decode_logits(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                           @builtin(local_invocation_index) lid: u32) {
    let gx = group_x(wid, nwg, p.fold);
    if (gx >= p.gx) {
        return;
    }
    route_logits(gx * 64u + lid);
}

// The logits word of (row, expert pair) t, if t is one.
fn route_logits(t: u32) {
    let e = u32(p.e);
    let half_e = e / 2u;
    if (half_e == 0u || t >= u32(p.rows) * half_e) {
        return;
    }
    let r = t / half_e;
    let x0 = 2u * (t - r * half_e);
    let hw = u32(p.dim) / 2u;
    let xo = p.x + r * hw;
    var ss = 0.0;
    for (var j = 0u; j < hw; j++) {
        let v = d_x[xo + j];
        let a = bf16_lo(v);
        let b = bf16_hi(v);
        ss += a * a + b * b;
    }
    let inv = inv_rms(ss, u32(p.dim), p.eps);
    let w0 = p.router_w + x0 * hw;
    let w1 = w0 + hw;
    var acc0 = 0.0;
    var acc1 = 0.0;
    for (var j = 0u; j < hw; j++) {
        let v = d_x[xo + j];
        let s = d_scale[p.scale + j];
        let ra = bf16_round(bf16_lo(v) * inv * bf16_lo(s) * p.root);
        let rb = bf16_round(bf16_hi(v) * inv * bf16_hi(s) * p.root);
        let a = d_router_w[w0 + j];
        let b = d_router_w[w1 + j];
        acc0 = acc0 + ra * bf16_lo(a);
        acc0 = acc0 + rb * bf16_hi(a);
        acc1 = acc1 + ra * bf16_lo(b);
        acc1 = acc1 + rb * bf16_hi(b);
    }
    d_logits[p.logits + (r * e + x0) / 2u] = pack_bf16(acc0, acc1);
}

var<workgroup> pick_i: array<i32, 512>;
var<workgroup> pick_v: array<f32, 512>;
var<workgroup> cnt_s: array<u32, MAX_E>;
var<workgroup> off_s: array<u32, 257>;

fn logit_at(g: u32) -> f32 {
    let w = d_logits[p.logits + g / 2u];
    return select(bf16_lo(w), bf16_hi(w), (g & 1u) == 1u);
}

@compute @workgroup_size(256)
fn moe_route_decode(@builtin(local_invocation_index) lid: u32) {
    route_select(lid);
}

@compute @workgroup_size(256)
fn moe_route_decode_one(@builtin(local_invocation_index) lid: u32) {
    route_logits(lid);
    // The workgroup's logits stores, visible to its own loads below.
    storageBarrier();
    route_select(lid);
}

// The selection, counts, offsets and slots from the logits: one workgroup
// of 256, every invocation calling it (it holds barriers).
fn route_select(lid: u32) {
    let rows = min(u32(p.rows), MAX_ROWS);
    let e = min(u32(p.e), MAX_E);
    let k = min(u32(p.k), min(e, MAX_K));
    let n = rows * k;
    if (lid < rows) {
        let r = lid;
        var m = bitcast<f32>(0xff800000u);
        for (var i = 0u; i < e; i++) {
            m = max(m, logit_at(r * e + i));
        }
        var sum = 0.0;
        for (var i = 0u; i < e; i++) {
            sum += exp(logit_at(r * e + i) - m);
        }
        var chosen: array<u32, 8>;
        for (var w = 0u; w < 8u; w++) {
            chosen[w] = 0u;
        }
        var norm = 0.0;
        for (var c = 0u; c < k; c++) {
            var best = 0u;
            var bi = 0u;
            var bv = 0.0;
            for (var i = 0u; i < e; i++) {
                if ((chosen[i / 32u] & (1u << (i % 32u))) != 0u) {
                    continue;
                }
                let v = exp(logit_at(r * e + i) - m) / sum;
                let key = (bitcast<u32>(v) & 0x7fffffffu) + 1u;
                if (key > best) {
                    best = key;
                    bi = i;
                    bv = v;
                }
            }
            chosen[bi / 32u] |= 1u << (bi % 32u);
            pick_i[r * MAX_K + c] = i32(bi);
            pick_v[r * MAX_K + c] = bv;
            norm += bv;
        }
        for (var c = 0u; c < k; c++) {
            let id = u32(pick_i[r * MAX_K + c]);
            let s = bitcast<f32>(d_per_expert_scale[p.per_expert_scale + id]);
            d_topk_ids[p.topk_ids + r * k + c] = id;
            d_topk_w[p.topk_w + r * k + c] = bitcast<u32>(pick_v[r * MAX_K + c] / norm * s);
        }
    }
    workgroupBarrier();
    if (lid < e) {
        var c = 0u;
        for (var q = 0u; q < n; q++) {
            c += select(0u, 1u, u32(pick_i[(q / k) * MAX_K + q % k]) == lid);
        }
        cnt_s[lid] = c;
    }
    workgroupBarrier();
    if (lid == 0u) {
        var acc = 0u;
        for (var x = 0u; x < e; x++) {
            off_s[x] = acc;
            d_offsets[p.offsets + x] = acc;
            acc += cnt_s[x];
        }
        off_s[e] = acc;
        d_offsets[p.offsets + e] = acc;
    }
    workgroupBarrier();
    for (var q = lid; q < n; q += 256u) {
        let id = pick_i[(q / k) * MAX_K + q % k];
        var rank = 0u;
        for (var t = 0u; t < q; t++) {
            rank += select(0u, 1u, pick_i[(t / k) * MAX_K + t % k] == id);
        }
        let slot = off_s[u32(id)] + rank;
        d_pair_of_slot[p.pair_of_slot + slot] = q;
        d_slot_of_pair[p.slot_of_pair + q] = slot;
    }
}
