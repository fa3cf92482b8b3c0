// dense_gemv_layer_out_rmsnorm_qkv_prep_bf16: dense_gemv_layer_out_rmsnorm_bf16
// of one row, then qkv_prep_bf16 of its output row `c` (gemv/layer_out_qkv.rs).
// The plan's passes: this file's own entry (the layer output row into `a`,
// layer_out_row.wgsli), the fused-norm GEMV's own passes into `c`
// (rmsnorm_gemv.wgsli), then qkv_prep_epilogue, a workgroup a head of `c`.
struct Params {
    a: u32, b: u32, c: u32, m: u32, n: u32, k: u32, seg1: u32, seg2: u32, norm_w: u32, eps: f32,
    mid: u32, x: u32, w_post: u32, layer_scalar: u32,
    q_out: u32, k_pool: u32, v_pool: u32, q_norm: u32, k_norm: u32, cos_sin: u32, pos: u32, slot: u32,
    nh: i32, nkv: i32, hd: i32, max_pos: i32, num_slots: i32,
    gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_a: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> d_b: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> d_c: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> d_norm_w: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read_write> d_mid: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read_write> d_x: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read_write> d_w_post: array<vec4<u32>>;
// Read one word; a scalar view (vec4 indexing could run past a 4-byte binding).
@group(0) @binding(8) var<storage, read_write> d_layer_scalar: array<u32>;
// The epilogue's bindings are word views: a head vector is a multiple of 4
// words (hd % 8 == 0), but the pools' and tables' offsets need not be 4-word.
@group(0) @binding(9) var<storage, read_write> d_q_out: array<u32>;
@group(0) @binding(10) var<storage, read_write> d_k_pool: array<u32>;
@group(0) @binding(11) var<storage, read_write> d_v_pool: array<u32>;
@group(0) @binding(12) var<storage, read_write> d_q_norm: array<u32>;
@group(0) @binding(13) var<storage, read_write> d_k_norm: array<u32>;
@group(0) @binding(14) var<storage, read_write> d_cos_sin: array<u32>;
@group(0) @binding(15) var<storage, read_write> d_pos: array<u32>;
@group(0) @binding(16) var<storage, read_write> d_slot: array<u32>;
@group(0) @binding(17) var<storage, read_write> d_workspace: array<u32>;

//! include "gemv/workspace_words.wgsli"

//! include "gemv/gemv_segmented.wgsli"
//! include "gemv/rmsnorm_gemv.wgsli"
//! include "gemv/layer_out_row.wgsli"

@compute @workgroup_size(256)
fn dense_gemv_layer_out_rmsnorm_qkv_prep_bf16(@builtin(local_invocation_index) lid: u32) {
    layer_out_row(lid);
}

// bf16(x · inv · w) of a word's two elements (qkv_prep_bf16's normed4 per
// element); w absent (V): bf16(x · inv).
fn epi_normed(x: u32, inv: f32, w: u32, has_w: bool) -> vec2<f32> {
    var v = vec2<f32>(bf16_lo(x), bf16_hi(x)) * inv;
    if (has_w) {
        v *= vec2<f32>(bf16_lo(w), bf16_hi(w));
    }
    return vec2<f32>(bf16_round(v.x), bf16_round(v.y));
}

fn epi_store(kind: u32, i: u32, v: u32) {
    switch kind {
        case 0u: { d_q_out[i] = v; }
        case 1u: { d_k_pool[i] = v; }
        default: { d_v_pool[i] = v; }
    }
}

// Head h of `c` (the row the GEMV passes stored; m = 1, so element j of c
// is output j): the nh query heads, the nkv K heads, then the nkv V heads
// unless V = K (n == seg2: a K head's workgroup also stores its V).
// Invocation t < hd / 4 owns word t of the first half (elements 2t, 2t + 1)
// and word t of the second (their rotate-half partners), Σ x² by row_sum.
@compute @workgroup_size(256)
fn qkv_prep_epilogue(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, ln: Lanes) {
    let h = group_x(wid, nwg, p.fold);
    if (h >= p.gx) {
        return;
    }
    let t = ln.lid;
    let hd = u32(p.hd);
    let nh = u32(p.nh);
    let nkv = u32(p.nkv);
    let qw = hd / 4u;
    let src = p.c + h * (hd / 2u);
    var xa = 0u;
    var xb = 0u;
    if (t < qw) {
        xa = atomicLoad(&d_c[src + t]);
        xb = atomicLoad(&d_c[src + qw + t]);
    }
    let a = vec2<f32>(bf16_lo(xa), bf16_hi(xa));
    let b = vec2<f32>(bf16_lo(xb), bf16_hi(xb));
    let inv = inv_rms(row_sum(dot(a, a) + dot(b, b), ln), hd, p.eps);
    if (t >= qw) {
        return;
    }
    let ps = bitcast<i32>(d_pos[p.pos]);
    let ok = ps >= 0 && ps < p.max_pos;
    let slot = bitcast<i32>(d_slot[p.slot]);
    var kind = 0u;
    var dst = p.q_out + h * (hd / 2u);
    var wo = p.q_norm;
    if (h >= nh) {
        // Negative (padding) or out-of-pool slots skip the KV write.
        if (slot < 0 || slot >= p.num_slots) {
            return;
        }
        let is_v = h >= nh + nkv;
        let j = select(h - nh, h - nh - nkv, is_v);
        kind = select(1u, 2u, is_v);
        dst = select(p.k_pool, p.v_pool, is_v) + (u32(slot) * nkv + j) * (hd / 2u);
        wo = select(p.k_norm, NONE, is_v);
    }
    if (!ok) {
        epi_store(kind, dst + t, BF16_NAN2);
        epi_store(kind, dst + qw + t, BF16_NAN2);
        if (kind == 1u && p.n == p.seg2) {
            let vd = p.v_pool + (dst - p.k_pool);
            epi_store(2u, vd + t, BF16_NAN2);
            epi_store(2u, vd + qw + t, BF16_NAN2);
        }
        return;
    }
    if (kind == 2u) {
        epi_store(2u, dst + t, pack_bf16(a.x * inv, a.y * inv));
        epi_store(2u, dst + qw + t, pack_bf16(b.x * inv, b.y * inv));
        return;
    }
    var wa = 0u;
    var wb = 0u;
    if (kind == 0u) {
        wa = d_q_norm[wo + t];
        wb = d_q_norm[wo + qw + t];
    } else {
        wa = d_k_norm[wo + t];
        wb = d_k_norm[wo + qw + t];
    }
    // (cos, sin) of pairs 2t and 2t + 1 (hd / 2 pairs a position).
    let cs = p.cos_sin + (u32(ps) * (hd / 2u) + 2u * t) * 2u;
    let c0 = vec2<f32>(bitcast<f32>(d_cos_sin[cs]), bitcast<f32>(d_cos_sin[cs + 2u]));
    let s0 = vec2<f32>(bitcast<f32>(d_cos_sin[cs + 1u]), bitcast<f32>(d_cos_sin[cs + 3u]));
    let na = epi_normed(xa, inv, wa, true);
    let nb = epi_normed(xb, inv, wb, true);
    let oa = na * c0 - nb * s0;
    let ob = nb * c0 + na * s0;
    epi_store(kind, dst + t, pack_bf16(oa.x, oa.y));
    epi_store(kind, dst + qw + t, pack_bf16(ob.x, ob.y));
    if (kind == 1u && p.n == p.seg2) {
        let vd = p.v_pool + (dst - p.k_pool);
        epi_store(2u, vd + t, pack_bf16(a.x * inv, a.y * inv));
        epi_store(2u, vd + qw + t, pack_bf16(b.x * inv, b.y * inv));
    }
}
