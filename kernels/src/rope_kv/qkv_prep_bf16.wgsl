// Two entry points; the plan (rope_kv/mod.rs) picks one by hd.
//
// qkv_prep_bf16_vec (hd % 16 == 0): the launch is rows · (nh + 2·nkv) head
// vectors (per row: nh query heads, nkv K heads, nkv V heads), L = hd / 16
// lanes a vector (rounded up to a power of two, the extra lanes idle),
// 256 / L vectors a workgroup of 256. Lane l owns elements 8l..8l+7 of the
// first half and their rotate-half partners 8l+hd/2.. of the second: two
// 16-byte loads of the head, two of the norm weight, four of the (cos, sin)
// row, no re-reads and no partner exchange. Σ x² meets through run_sum: a
// subgroupShuffleXor butterfly with no barrier where the device has
// subgroups (over a run up to the subgroup size; wider runs add the
// subgroups' sums behind one barrier), one barrier and workgroup memory
// otherwise. The old grid (a workgroup of 128 per row and head, a word a
// thread, every partner and weight re-read, a 7-barrier tree) ran the bench
// row at 19% of wgpu's copy ceiling on the H200.
// Offsets that are not multiples of 4 words take the same lanes with word
// loads.
//
// qkv_prep_bf16 (other hd): grid (rows, nh + nkv), one workgroup of 128 per
// (row, head); query heads norm + rope into q_out; KV heads do K (norm +
// rope) and V (norm, no weight) into the pool slot. A thread owns output
// words; the rotate-half partner of an element may sit in another word
// (hd/2 can be odd) and is re-read.
struct Params {
    q_out: u32, k_pool: u32, v_pool: u32, q_raw: u32, k_raw: u32, v_raw: u32, q_norm: u32, k_norm: u32,
    cos_sin: u32, pos: u32, slot: u32, nh: i32, nkv: i32, hd: i32, eps: f32, pmap: u32,
    rows: i32, src_rows: i32, max_pos: i32, num_slots: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_q_out: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> d_k_pool: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_v_pool: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> d_q_raw: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read_write> d_k_raw: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read_write> d_v_raw: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read_write> d_q_norm: array<vec4<u32>>;
@group(0) @binding(8) var<storage, read_write> d_k_norm: array<vec4<u32>>;
@group(0) @binding(9) var<storage, read_write> d_cos_sin: array<vec4<u32>>;
@group(0) @binding(10) var<storage, read_write> d_pos: array<u32>;
@group(0) @binding(11) var<storage, read_write> d_slot: array<u32>;
@group(0) @binding(12) var<storage, read_write> d_pmap: array<u32>;

const WG: u32 = 128u;
const Q: u32 = 0u;
const K: u32 = 1u;
const V: u32 = 2u;

var<workgroup> red: array<f32, 256>;
// (source row, position, slot) of this workgroup's row, made workgroup-uniform.
var<workgroup> row_info: vec4<i32>;

// --- word access (both entries) ---------------------------------------------

fn src_word(kind: u32, i: u32) -> u32 {
    switch kind {
        case 0u: { return d_q_raw[i >> 2u][i & 3u]; }
        case 1u: { return d_k_raw[i >> 2u][i & 3u]; }
        default: { return d_v_raw[i >> 2u][i & 3u]; }
    }
}

fn norm_word(kind: u32, i: u32) -> u32 {
    if (kind == Q) {
        return d_q_norm[i >> 2u][i & 3u];
    }
    return d_k_norm[i >> 2u][i & 3u];
}

fn cs_word(i: u32) -> u32 {
    return d_cos_sin[i >> 2u][i & 3u];
}

fn store(kind: u32, i: u32, v: u32) {
    switch kind {
        case 0u: { d_q_out[i >> 2u][i & 3u] = v; }
        case 1u: { d_k_pool[i >> 2u][i & 3u] = v; }
        default: { d_v_pool[i >> 2u][i & 3u] = v; }
    }
}

// --- qkv_prep_bf16_vec ------------------------------------------------------

// Four words from word offset i: one 16-byte load when the views are
// aligned (al: every offset a multiple of 4 words, so i is one too).
fn src4(kind: u32, i: u32, al: bool) -> vec4<u32> {
    if (al) {
        switch kind {
            case 0u: { return d_q_raw[i >> 2u]; }
            case 1u: { return d_k_raw[i >> 2u]; }
            default: { return d_v_raw[i >> 2u]; }
        }
    }
    return vec4<u32>(src_word(kind, i), src_word(kind, i + 1u), src_word(kind, i + 2u), src_word(kind, i + 3u));
}

fn norm4(kind: u32, i: u32, al: bool) -> vec4<u32> {
    if (al) {
        if (kind == Q) {
            return d_q_norm[i >> 2u];
        }
        return d_k_norm[i >> 2u];
    }
    return vec4<u32>(norm_word(kind, i), norm_word(kind, i + 1u), norm_word(kind, i + 2u), norm_word(kind, i + 3u));
}

fn cs4(i: u32, al: bool) -> vec4<f32> {
    if (al) {
        return bitcast<vec4<f32>>(d_cos_sin[i >> 2u]);
    }
    return bitcast<vec4<f32>>(vec4<u32>(cs_word(i), cs_word(i + 1u), cs_word(i + 2u), cs_word(i + 3u)));
}

fn store4(kind: u32, i: u32, v: vec4<u32>, al: bool) {
    if (al) {
        switch kind {
            case 0u: { d_q_out[i >> 2u] = v; }
            case 1u: { d_k_pool[i >> 2u] = v; }
            default: { d_v_pool[i >> 2u] = v; }
        }
        return;
    }
    store(kind, i, v.x);
    store(kind, i + 1u, v.y);
    store(kind, i + 2u, v.z);
    store(kind, i + 3u, v.w);
}

// bf16(x · inv · w) of the 8 elements of a vector (lo: even, hi: odd ones);
// w absent: bf16(x · inv).
fn normed4(x: vec4<u32>, inv: f32, w: vec4<u32>, has_w: bool) -> array<vec4<f32>, 2> {
    var lo = bf16x4_lo(x) * inv;
    var hi = bf16x4_hi(x) * inv;
    if (has_w) {
        lo *= bf16x4_lo(w);
        hi *= bf16x4_hi(w);
    }
    return array<vec4<f32>, 2>(bf16_round4(lo), bf16_round4(hi));
}

// One head vector as one lane of its run sees it. kind 3: nothing to do (past
// the last vector, or a padding lane), but the lane still joins the reduction.
struct HeadJob {
    kind: u32,
    // Word offsets of the vector's source and destination.
    src: u32,
    dst: u32,
    pos: u32,
    // A valid source row (the data loads need nothing else), a valid
    // position too, and whether the vector is written at all.
    s_ok: bool,
    ok: bool,
    write: bool,
}

// The lane's words of a head vector: 4l.. of the first half, qw + 4l.. of
// the second.
struct HeadWords {
    a: vec4<u32>,
    b: vec4<u32>,
}

// Vector u of the launch (u = row · (nh + 2·nkv) + head, heads in the order
// Q, K, V) for lane l of its run.
fn head_job(u: u32, l: u32, used: u32) -> HeadJob {
    let nh = u32(p.nh);
    let nkv = u32(p.nkv);
    let per_row = nh + 2u * nkv;
    var j = HeadJob(3u, 0u, 0u, 0u, false, false, false);
    var r = 0u;
    var head = 0u;
    if (l < used && u < u32(p.rows) * per_row) {
        r = u / per_row;
        let k = u % per_row;
        if (k < nh) {
            j.kind = Q;
            head = k;
        } else if (k < nh + nkv) {
            j.kind = K;
            head = k - nh;
        } else {
            j.kind = V;
            head = k - nh - nkv;
        }
    }
    var s = i32(r);
    if (p.pmap != NONE && j.kind != 3u) {
        s = bitcast<i32>(d_pmap[p.pmap + r]);
    }
    var ps = 0;
    if (j.kind != 3u) {
        ps = bitcast<i32>(d_pos[p.pos + r]);
    }
    j.s_ok = s >= 0 && s < p.src_rows;
    j.ok = j.s_ok && ps >= 0 && ps < p.max_pos;
    let src_row = select(0u, u32(s), j.s_ok);
    j.pos = select(0u, u32(ps), j.ok);
    let hw = u32(p.hd) / 2u;
    j.write = j.kind != 3u;
    if (j.kind == Q) {
        j.src = p.q_raw + (src_row * nh + head) * hw;
        j.dst = p.q_out + (r * nh + head) * hw;
    } else if (j.kind != 3u) {
        let slot = bitcast<i32>(d_slot[p.slot + r]);
        // Negative (padding) or out-of-pool slots skip the KV write.
        j.write = slot >= 0 && slot < p.num_slots;
        j.src = select(p.k_raw, p.v_raw, j.kind == V) + (src_row * nkv + head) * hw;
        j.dst = select(p.k_pool, p.v_pool, j.kind == V) + (u32(max(slot, 0)) * nkv + head) * hw;
    }
    return j;
}

// The data loads wait on no other load (a valid source row is all they
// need; a row with a bad position or slot reads and drops it).
fn head_words(j: HeadJob, l: u32, qw: u32, al: bool) -> HeadWords {
    var x = HeadWords(vec4<u32>(0u), vec4<u32>(0u));
    if (j.kind != 3u && j.s_ok) {
        x.a = src4(j.kind % 3u, j.src + 4u * l, al);
        x.b = src4(j.kind % 3u, j.src + qw + 4u * l, al);
    }
    return x;
}

// Norm (+ rope) of the lane's words, given the vector's Σ x², and the stores.
fn head_finish(j: HeadJob, x: HeadWords, tot: f32, l: u32, qw: u32, al: bool) {
    let kind = j.kind;
    let dst = j.dst;
    if (!j.write) {
        return;
    }
    if (!j.ok) {
        store4(kind, dst + 4u * l, vec4<u32>(BF16_NAN2), al);
        store4(kind, dst + qw + 4u * l, vec4<u32>(BF16_NAN2), al);
        return;
    }
    let hd = u32(p.hd);
    let inv = inv_rms(tot, hd, p.eps);
    let xa = x.a;
    let xb = x.b;
    if (kind == V) {
        store4(V, dst + 4u * l, pack_bf16x4(bf16x4_lo(xa) * inv, bf16x4_hi(xa) * inv), al);
        store4(V, dst + qw + 4u * l, pack_bf16x4(bf16x4_lo(xb) * inv, bf16x4_hi(xb) * inv), al);
        return;
    }
    // The norm weight and (cos, sin) loads go out after the reduction: they
    // hit in cache (every head of a row shares its (cos, sin) row, every head
    // the weight), and holding them across it cost registers: 0.1436 ms
    // against 0.1367 on the H200's bench row.
    let wo = select(p.k_norm, p.q_norm, kind == Q);
    let has_w = wo != NONE;
    var wa = vec4<u32>(0u);
    var wb = vec4<u32>(0u);
    if (has_w) {
        wa = norm4(kind, wo + 4u * l, al);
        wb = norm4(kind, wo + qw + 4u * l, al);
    }
    // (cos, sin) of pairs i = 8l..8l+7 (hd / 2 pairs a position): 16 words;
    // c0 = (cos, sin) of i, i+1, ...
    let cs = p.cos_sin + (j.pos * (hd / 2u) + 8u * l) * 2u;
    let c0 = cs4(cs, al);
    let c1 = cs4(cs + 4u, al);
    let c2 = cs4(cs + 8u, al);
    let c3 = cs4(cs + 12u, al);
    // Element 8l+2k is lo of word k, 8l+2k+1 its hi: pair index 2k and 2k+1.
    let cos_lo = vec4<f32>(c0.x, c1.x, c2.x, c3.x);
    let sin_lo = vec4<f32>(c0.y, c1.y, c2.y, c3.y);
    let cos_hi = vec4<f32>(c0.z, c1.z, c2.z, c3.z);
    let sin_hi = vec4<f32>(c0.w, c1.w, c2.w, c3.w);
    let na = normed4(xa, inv, wa, has_w);
    let nb = normed4(xb, inv, wb, has_w);
    let oa = pack_bf16x4(na[0] * cos_lo - nb[0] * sin_lo, na[1] * cos_hi - nb[1] * sin_hi);
    let ob = pack_bf16x4(nb[0] * cos_lo + na[0] * sin_lo, nb[1] * cos_hi + na[1] * sin_hi);
    store4(kind, dst + 4u * l, oa, al);
    store4(kind, dst + qw + 4u * l, ob, al);
}

// Head vectors a lane works on (1 or 2, the plan's choice): with 2, the
// workgroup covers 2 · (256 / L) vectors, the second set (+256 / L) loaded
// before either set's reduction, so each lane has twice the bytes in flight.
override VPL: u32 = 1u;

@compute @workgroup_size(256)
fn qkv_prep_bf16_vec(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, ln: Lanes) {
    let hd = u32(p.hd);
    // Lanes holding data, and the run they reduce over: `used` rounded up to
    // a power of two (run_sum's butterfly); the extra lanes add zeros.
    let used = hd / 16u;
    let lanes = 1u << (32u - countLeadingZeros(used - 1u));
    let per_wg = 256u / lanes;
    let me = lane_order(ln);
    let l = me % lanes;
    let u = group_x(wid, nwg, p.fold) * per_wg * VPL + me / lanes;
    // Words of a head vector's half.
    let qw = hd / 4u;
    let al = aligned4(p.q_out, p.k_pool, p.v_pool, p.q_raw) && aligned4(p.k_raw, p.v_raw, p.q_norm, p.k_norm)
        && aligned4(p.cos_sin, NONE, NONE, NONE);
    let j0 = head_job(u, l, used);
    let x0 = head_words(j0, l, qw, al);
    if (VPL == 1u) {
        head_finish(j0, x0, run_sum(sq_bf16x4(x0.a) + sq_bf16x4(x0.b), lanes, ln), l, qw, al);
        return;
    }
    let j1 = head_job(u + per_wg, l, used);
    let x1 = head_words(j1, l, qw, al);
    let t0 = run_sum(sq_bf16x4(x0.a) + sq_bf16x4(x0.b), lanes, ln);
    let t1 = run_sum(sq_bf16x4(x1.a) + sq_bf16x4(x1.b), lanes, ln);
    head_finish(j0, x0, t0, l, qw, al);
    head_finish(j1, x1, t1, l, qw, al);
}

// --- qkv_prep_bf16 (hd % 16 != 0) -------------------------------------------

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

fn src_elem(kind: u32, base: u32, e: u32) -> f32 {
    let w = src_word(kind, base + e / 2u);
    return select(bf16_lo(w), bf16_hi(w), (e & 1u) == 1u);
}

// bf16(x[e] * inv * weight[e]) for Q and K (weight absent: unscaled).
fn normed(kind: u32, base: u32, e: u32, inv: f32) -> f32 {
    var v = src_elem(kind, base, e) * inv;
    let wo = select(p.k_norm, p.q_norm, kind == Q);
    if (wo != NONE) {
        let w = norm_word(kind, wo + e / 2u);
        v *= select(bf16_lo(w), bf16_hi(w), (e & 1u) == 1u);
    }
    return bf16_round(v);
}

fn roped(kind: u32, base: u32, e: u32, inv: f32, pos: u32) -> f32 {
    let half = u32(p.hd) / 2u;
    let lo = e < half;
    let i = select(e - half, e, lo);
    let cs = p.cos_sin + (pos * half + i) * 2u;
    let c = bitcast<f32>(cs_word(cs));
    let s = bitcast<f32>(cs_word(cs + 1u));
    let n = normed(kind, base, e, inv);
    if (lo) {
        return n * c - normed(kind, base, e + half, inv) * s;
    }
    return n * c + normed(kind, base, e - half, inv) * s;
}

// Norm (+ rope) of one head row at word offset `base` into word offset `dst`.
fn head_row(kind: u32, base: u32, dst: u32, ok: bool, pos: u32, lid: u32) {
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
        head_row(Q, p.q_raw + (s * nh + hh) * hw, p.q_out + (r * nh + hh) * hw, ok, pos, lid);
        return;
    }
    // Negative (padding) or out-of-pool slots skip the KV write.
    if (info.z < 0 || info.z >= p.num_slots) {
        return;
    }
    let j = hh - nh;
    let src = (s * nkv + j) * hw;
    let dst = (u32(info.z) * nkv + j) * hw;
    head_row(K, p.k_raw + src, p.k_pool + dst, ok, pos, lid);
    head_row(V, p.v_raw + src, p.v_pool + dst, ok, pos, lid);
}
