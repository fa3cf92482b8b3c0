// Grid (rows, nh + nkv): one workgroup of 128 per (row, head). Query heads
// norm + rope into q_out; KV heads do K (norm + rope) and V (norm, no weight)
// into the pool slot. A thread owns output words; the rotate-half partner of
// an element may sit in another word (hd/2 can be odd) and is re-read.
struct Params {
    q_out: u32, k_pool: u32, v_pool: u32, q_raw: u32, k_raw: u32, v_raw: u32, q_norm: u32, k_norm: u32,
    cos_sin: u32, pos: u32, slot: u32, nh: i32, nkv: i32, hd: i32, eps: f32, pmap: u32,
    rows: i32, src_rows: i32, max_pos: i32, num_slots: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_q_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_k_pool: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_v_pool: array<u32>;
@group(0) @binding(4) var<storage, read_write> d_q_raw: array<u32>;
@group(0) @binding(5) var<storage, read_write> d_k_raw: array<u32>;
@group(0) @binding(6) var<storage, read_write> d_v_raw: array<u32>;
@group(0) @binding(7) var<storage, read_write> d_q_norm: array<u32>;
@group(0) @binding(8) var<storage, read_write> d_k_norm: array<u32>;
@group(0) @binding(9) var<storage, read_write> d_cos_sin: array<u32>;
@group(0) @binding(10) var<storage, read_write> d_pos: array<u32>;
@group(0) @binding(11) var<storage, read_write> d_slot: array<u32>;
@group(0) @binding(12) var<storage, read_write> d_pmap: array<u32>;

const WG: u32 = 128u;
const Q: u32 = 0u;
const K: u32 = 1u;
const V: u32 = 2u;

var<workgroup> red: array<f32, 128>;
// (source row, position, slot) of this workgroup's row, made workgroup-uniform.
var<workgroup> row_info: vec4<i32>;

fn sum128(v: f32, lid: u32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = 64u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            red[lid] = red[lid] + red[lid + s];
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn src_word(kind: u32, i: u32) -> u32 {
    switch kind {
        case 0u: { return d_q_raw[i]; }
        case 1u: { return d_k_raw[i]; }
        default: { return d_v_raw[i]; }
    }
}

fn store(kind: u32, i: u32, v: u32) {
    switch kind {
        case 0u: { d_q_out[i] = v; }
        case 1u: { d_k_pool[i] = v; }
        default: { d_v_pool[i] = v; }
    }
}

fn src_elem(kind: u32, base: u32, e: u32) -> f32 {
    let w = src_word(kind, base + e / 2u);
    return select(bf16_lo(w), bf16_hi(w), (e & 1u) == 1u);
}

// bf16(x[e] * inv * weight[e]) for Q and K (weight absent: unscaled).
fn normed(kind: u32, base: u32, e: u32, inv: f32) -> f32 {
    var v = src_elem(kind, base, e) * inv;
    let wo = select(p.k_norm, p.q_norm, kind == Q);
    if (wo != NONE) {
        var w: u32;
        if (kind == Q) {
            w = d_q_norm[wo + e / 2u];
        } else {
            w = d_k_norm[wo + e / 2u];
        }
        v *= select(bf16_lo(w), bf16_hi(w), (e & 1u) == 1u);
    }
    return bf16_round(v);
}

fn roped(kind: u32, base: u32, e: u32, inv: f32, pos: u32) -> f32 {
    let half = u32(p.hd) / 2u;
    let lo = e < half;
    let i = select(e - half, e, lo);
    let cs = p.cos_sin + (pos * half + i) * 2u;
    let c = bitcast<f32>(d_cos_sin[cs]);
    let s = bitcast<f32>(d_cos_sin[cs + 1u]);
    let n = normed(kind, base, e, inv);
    if (lo) {
        return n * c - normed(kind, base, e + half, inv) * s;
    }
    return n * c + normed(kind, base, e - half, inv) * s;
}

// Norm (+ rope) of one head row at word offset `base` into word offset `dst`.
fn head(kind: u32, base: u32, dst: u32, ok: bool, pos: u32, lid: u32) {
    let hd = u32(p.hd);
    let hw = hd / 2u;
    var ss = 0.0;
    if (ok) {
        for (var w = lid; w < hw; w += WG) {
            let v = src_word(kind, base + w);
            let a = bf16_lo(v);
            let b = bf16_hi(v);
            ss += a * a + b * b;
        }
    }
    let inv = inv_rms(sum128(ss, lid), hd, p.eps);
    for (var w = lid; w < hw; w += WG) {
        var o = BF16_NAN2;
        if (ok) {
            if (kind == V) {
                let v = src_word(kind, base + w);
                o = pack_bf16(bf16_lo(v) * inv, bf16_hi(v) * inv);
            } else {
                o = pack_bf16(roped(kind, base, 2u * w, inv, pos), roped(kind, base, 2u * w + 1u, inv, pos));
            }
        }
        store(kind, dst + w, o);
    }
}

@compute @workgroup_size(128)
fn qkv_prep_bf16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let r = group_x(wid, nwg, p.fold);
    let hh = group_y(wid, p.fold);
    if (r >= p.gx || hh >= p.gy || r >= u32(p.rows)) {
        return;
    }
    let nh = u32(p.nh);
    let nkv = u32(p.nkv);
    let hw = u32(p.hd) / 2u;
    if (lid == 0u) {
        var s = i32(r);
        if (p.pmap != NONE) {
            s = bitcast<i32>(d_pmap[p.pmap + r]);
        }
        var slot = -1;
        if (p.nkv > 0) {
            slot = bitcast<i32>(d_slot[p.slot + r]);
        }
        row_info = vec4<i32>(s, bitcast<i32>(d_pos[p.pos + r]), slot, 0);
    }
    let info = workgroupUniformLoad(&row_info);
    let ok = info.x >= 0 && info.x < p.src_rows && info.y >= 0 && info.y < p.max_pos;
    let s = select(0u, u32(info.x), ok);
    let pos = select(0u, u32(info.y), ok);
    if (hh < nh) {
        head(Q, p.q_raw + (s * nh + hh) * hw, p.q_out + (r * nh + hh) * hw, ok, pos, lid);
        return;
    }
    // Negative (padding) or out-of-pool slots skip the KV write.
    if (info.z < 0 || info.z >= p.num_slots) {
        return;
    }
    let j = hh - nh;
    let src = (s * nkv + j) * hw;
    let dst = (u32(info.z) * nkv + j) * hw;
    head(K, p.k_raw + src, p.k_pool + dst, ok, pos, lid);
    head(V, p.v_raw + src, p.v_pool + dst, ok, pos, lid);
}
