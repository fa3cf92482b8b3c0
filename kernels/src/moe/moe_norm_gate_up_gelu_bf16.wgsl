// moe_norm_gate_up_gelu_bf16: moe_gate_up_gelu_bf16.wgsl's scheme on
// activation rows made from the token rows: slot s reads
// x[pair_of_slot[s] / k] and uses bf16(x · inv · norm_w) (rmsnorm_bf16, then
// moe_gather_bf16's zero row for pair −1 and NaN row for a token outside the
// rows). The workgroup sums each row's Σx² once (wg_sum256) before its
// weights stream.
struct Params {
    out: u32, x: u32, norm_w: u32, w: u32, offsets: u32, pair_of_slot: u32, n: i32, e: i32, inter: i32, big_k: i32,
    k: i32, rows: i32, eps: f32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_x: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_norm_w: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_w: array<u32>;
@group(0) @binding(5) var<storage, read_write> d_offsets: array<u32>;
@group(0) @binding(6) var<storage, read_write> d_pair_of_slot: array<u32>;

const SEG_COLS: u32 = 32u; // weight rows a workgroup: 16 gate, 16 up
const SEG_OUTS: u32 = 16u;
const SEG_LANES: u32 = 8u;
const SEG_R: u32 = 4u;

fn offset(x: u32) -> i32 {
    return bitcast<i32>(d_offsets[p.offsets + x]);
}

// Expert whose segment [offsets[x], offsets[x+1]) holds row s, or −1.
fn expert_of(s: i32) -> i32 {
    let e = u32(p.e);
    if (offset(0u) > s) {
        return -1;
    }
    var lo = 0u;
    var hi = e;
    while (hi - lo > 1u) {
        let mid = (lo + hi) / 2u;
        if (offset(mid) <= s) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return select(-1, i32(lo), offset(lo + 1u) > s);
}

// tanh through e^{-2|y|}, as gelu_mul_bf16.wgsl (WGSL's builtin tanh is too
// loose near ±1 for the bf16 activation).
fn tanh_acc(y: f32) -> f32 {
    let t = exp(-2.0 * abs(y));
    let r = (1.0 - t) / (1.0 + t);
    return select(r, -r, y < 0.0);
}

fn gelu_tanh(x: f32) -> f32 {
    let k = 0.7978846;
    return 0.5 * x * (1.0 + tanh_acc(k * (x + 0.044715 * x * x * x)));
}

fn act(g: f32, u: f32) -> f32 {
    return bf16_round(gelu_tanh(bf16_round(g))) * bf16_round(u);
}

var<workgroup> seg_info: array<i32, 4>; // state (0 compute, 1 zero row, 2 not mine), s_lo, s_hi, expert
var<workgroup> seg_sums: array<f32, 1024>; // [SEG_R][256]
var<workgroup> row_inv: array<f32, SEG_R>;

// Row r0 + r's token row (word offset) and mode: 1 the row, 0 zeros (pair
// −1), 2 NaN (a token outside the rows).
fn token_row(slot: u32, kw: u32) -> vec2<u32> {
    let pair = bitcast<i32>(d_pair_of_slot[p.pair_of_slot + slot]);
    if (pair == -1) {
        return vec2<u32>(p.x, 0u);
    }
    if (pair < 0 || pair / p.k >= p.rows) {
        return vec2<u32>(p.x, 2u);
    }
    return vec2<u32>(p.x + u32(pair / p.k) * kw, 1u);
}

// One word of the normalised row: bf16(x · inv · norm_w), or the mode's fill.
fn act_word(tr: vec2<u32>, j: u32, inv: f32) -> u32 {
    if (tr.y == 0u) {
        return 0u;
    }
    if (tr.y == 2u) {
        return BF16_NAN2;
    }
    let v = d_x[tr.x + j];
    let nw = d_norm_w[p.norm_w + j];
    return pack_bf16(bf16_lo(v) * inv * bf16_lo(nw), bf16_hi(v) * inv * bf16_hi(nw));
}

@compute @workgroup_size(256)
fn moe_norm_gate_up_gelu_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                         @builtin(local_invocation_index) lid: u32) {
    let cb = group_x(wid, nwg, p.fold);
    let s = group_y(wid, p.fold);
    if (cb >= p.gx || s >= p.gy) {
        return;
    }
    if (lid == 0u) {
        let si = i32(s);
        let cov_lo = max(offset(0u), 0);
        let cov_hi = min(offset(u32(p.e)), p.n);
        let x = expert_of(si);
        var info = array<i32, 4>(1, 0, 0, 0);
        if (si >= cov_lo && si < cov_hi && x >= 0) {
            let s_lo = max(offset(u32(x)), cov_lo);
            let s_hi = min(offset(u32(x) + 1u), cov_hi);
            info = array<i32, 4>(select(2, 0, si == s_lo), s_lo, s_hi, x);
        }
        seg_info = info;
    }
    let info = workgroupUniformLoad(&seg_info);
    let inter = u32(p.inter);
    let half = inter / 2u; // words per output row
    let lr = lid / SEG_LANES;
    let t = lid % SEG_LANES;
    // Output i of this weight row; rows 0..15 are gate rows, 16..31 up rows.
    let i = cb * SEG_OUTS + lr % SEG_OUTS;
    if (info[0] == 2) {
        return;
    }
    if (info[0] == 1) {
        if (t == 0u && lr < SEG_OUTS && lr % 2u == 0u && i < inter) {
            d_out[p.out + s * half + i / 2u] = 0u;
        }
        return;
    }
    let kw = u32(p.big_k) / 2u; // words per row of a and w
    let chunks = kw / 4u; // K % 8 == 0
    let row = select(0u, inter, lr >= SEG_OUTS) + min(i, inter - 1u);
    let wrow = p.w + (u32(info[3]) * 2u * inter + row) * kw;
    for (var r0 = info[1]; r0 < info[2]; r0 += i32(SEG_R)) {
        let nr = u32(min(i32(SEG_R), info[2] - r0));
        // Σx² of each row (order free), the workgroup's sum.
        for (var r = 0u; r < SEG_R; r++) {
            var ss = 0.0;
            if (r < nr) {
                let tr = token_row(u32(r0) + r, kw);
                for (var j = lid; j < kw; j += 256u) {
                    let v = d_x[tr.x + j];
                    ss += bf16_lo(v) * bf16_lo(v) + bf16_hi(v) * bf16_hi(v);
                }
            }
            let tot = wg_sum256(ss, lid);
            if (lid == 0u) {
                row_inv[r] = inv_rms(tot, u32(p.big_k), p.eps);
            }
        }
        workgroupBarrier();
        var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
        for (var ch = t; ch < chunks; ch += SEG_LANES) {
            let wo = wrow + ch * 4u;
            let w = vec4<u32>(d_w[wo], d_w[wo + 1u], d_w[wo + 2u], d_w[wo + 3u]);
            for (var r = 0u; r < nr; r++) {
                let tr = token_row(u32(r0) + r, kw);
                let inv = row_inv[r];
                let j = ch * 4u;
                let a = vec4<u32>(act_word(tr, j, inv), act_word(tr, j + 1u, inv), act_word(tr, j + 2u, inv), act_word(tr, j + 3u, inv));
                var v = acc[r];
                for (var q = 0u; q < 4u; q++) {
                    v = fma(bf16_lo(a[q]), bf16_lo(w[q]), v);
                    v = fma(bf16_hi(a[q]), bf16_hi(w[q]), v);
                }
                acc[r] = v;
            }
        }
        for (var r = 0u; r < SEG_R; r++) {
            seg_sums[r * 256u + lid] = acc[r];
        }
        workgroupBarrier();
        // Invocation r · 8 + q: row r0 + r, outputs 2q and 2q + 1 of the block.
        if (lid < 8u * SEG_R) {
            let q = lid % 8u;
            let r = lid / 8u;
            let jj = cb * SEG_OUTS + 2u * q;
            if (r < nr && jj < inter) {
                var g0 = 0.0;
                var g1 = 0.0;
                var u0 = 0.0;
                var u1 = 0.0;
                for (var u = 0u; u < SEG_LANES; u++) {
                    g0 += seg_sums[r * 256u + 2u * q * SEG_LANES + u];
                    g1 += seg_sums[r * 256u + (2u * q + 1u) * SEG_LANES + u];
                    u0 += seg_sums[r * 256u + (SEG_OUTS + 2u * q) * SEG_LANES + u];
                    u1 += seg_sums[r * 256u + (SEG_OUTS + 2u * q + 1u) * SEG_LANES + u];
                }
                d_out[p.out + (u32(r0) + r) * half + jj / 2u] = pack_bf16(act(g0, u0), act(g1, u1));
            }
        }
        workgroupBarrier();
    }
}
