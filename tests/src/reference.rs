//! Independent f64 reference implementations of the kernel catalogue, written
//! from the contract text in each `declare_kernel!` doc comment.
//!
//! Nothing here calls the CPU reference backend or the kernels crate's parity
//! code: every value is recomputed in f64, and every rounding point the
//! contract names is modelled with a direct f64 → bf16 round-to-nearest-even
//! ([`bf16_of_f64`](crate::reference::bf16_of_f64), a single rounding, so no f64 → f32 → bf16 double
//! rounding sneaks in). The codecs are also re-derived here from their
//! definitions (e4m3fn, bf16) so that a codec bug cannot cancel out.
//!
//! NaN results are represented as `f64::NAN`.
//!
//! ## Expected values are intervals
//!
//! bf16 expectations are [`Iv`](crate::reference::Iv) = `(lo, hi)`: the final (unrounded) value for
//! every contract-conforming rounding of the intermediates. Where a contract
//! rounds an intermediate to bf16 (`t = bf16(rmsnorm(..))`, then uses `t`),
//! the backend computes that intermediate in f32 (in any summation order), so
//! when its exact value lies within f32 noise of a bf16 rounding midpoint it
//! may legitimately round either way, and a 1-ulp flip of an intermediate can
//! become 2+ ulps of the final result after cancellation (seen on cpu-ref:
//! qkv_prep, hd = 512, an `n` element 7e-7 relative from a midpoint, then
//! `n[i]·cos − n[i+hd/2]·sin` cancelling). So [`rb2`](crate::reference::rb2) returns both roundings
//! when the value is within [`TIE_BAND`](crate::reference::TIE_BAND) (relative) of a midpoint, and the
//! interval is carried to the output. This is not a loosened tolerance: the
//! output must still be within 1 ulp of the interval's ends, and outside the
//! band (all but ~1.5% of an ulp around each midpoint) the interval is a point.

/// bf16 bit pattern → value.
pub fn bf16_f64(bits: u16) -> f64 {
    f32::from_bits((bits as u32) << 16) as f64
}

/// f64 → bf16 bits, rounded once to nearest, ties to even; NaN → 0x7fc0,
/// overflow → ±inf, subnormals kept.
pub fn bf16_of_f64(x: f64) -> u16 {
    if x.is_nan() {
        return 0x7fc0;
    }
    let sign: u16 = if x.is_sign_negative() { 0x8000 } else { 0 };
    let a = x.abs();
    if a == 0.0 {
        return sign;
    }
    if a.is_infinite() {
        return sign | 0x7f80;
    }
    // Quantum of the bf16 binade holding `a`: 8 significant bits; subnormals
    // share the 2^-126 binade's step 2^-133.
    let e = (((a.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(-126);
    let q = 2f64.powi(e - 7);
    let r = round_half_even(a / q) * q;
    if r >= 2f64.powi(128) {
        return sign | 0x7f80;
    }
    // r has at most 8 significant bits and is inside f32's range: exact in f32.
    sign | ((r as f32).to_bits() >> 16) as u16
}

/// `x` rounded once to bf16, as an f64.
pub fn rb(x: f64) -> f64 {
    bf16_f64(bf16_of_f64(x))
}

/// Relative half-width of the band around a bf16 rounding midpoint inside
/// which an intermediate computed in f32 may round either way: 2^-14, far
/// above f32 summation noise at these sizes (~√dim · 2^-24 ≈ 4e-6 for dim =
/// 4096), far below a bf16 ulp (2^-8).
pub const TIE_BAND: f64 = 1.0 / 16384.0;

/// An expected value: every value in `[lo, hi]` conforms (NaN: `(NaN, NaN)`).
pub type Iv = (f64, f64);

/// A point interval.
pub fn pt(x: f64) -> Iv {
    (x, x)
}

/// Points, element-wise.
pub fn pts(v: Vec<f64>) -> Vec<Iv> {
    v.into_iter().map(pt).collect()
}

/// The smallest interval holding every value of `vals`.
pub fn hull(vals: &[f64]) -> Iv {
    if vals.iter().any(|v| v.is_nan()) {
        return (f64::NAN, f64::NAN);
    }
    (vals.iter().copied().fold(f64::INFINITY, f64::min), vals.iter().copied().fold(f64::NEG_INFINITY, f64::max))
}

/// The bf16 roundings an intermediate `x` may take: `(rb(x), rb(x))` unless
/// `x` is within [`TIE_BAND`] of a rounding midpoint, then both neighbours.
pub fn rb2(x: f64) -> Iv {
    let r = rb(x);
    if x == r || !x.is_finite() || !r.is_finite() {
        return pt(r);
    }
    let bits = bf16_of_f64(r);
    // The bf16 neighbour of r on x's side.
    let next = if r == 0.0 {
        if x > 0.0 {
            0x0001
        } else {
            0x8001
        }
    } else if (x > r) == (r > 0.0) {
        bits + 1
    } else {
        bits - 1
    };
    let other = bf16_f64(next);
    let mid = (r + other) / 2.0;
    if (x - mid).abs() <= TIE_BAND * x.abs() {
        hull(&[r, other])
    } else {
        pt(r)
    }
}

/// `f` over every combination of the two intervals' ends, hulled (exact for
/// `f` monotone in each argument, as the linear RoPE combinations are).
fn map2(a: Iv, b: Iv, f: impl Fn(f64, f64) -> f64) -> Iv {
    hull(&[f(a.0, b.0), f(a.0, b.1), f(a.1, b.0), f(a.1, b.1)])
}

/// Round half to even on f64.
pub fn round_half_even(v: f64) -> f64 {
    let f = v.floor();
    let d = v - f;
    if d > 0.5 || (d == 0.5 && f % 2.0 != 0.0) {
        f + 1.0
    } else {
        f
    }
}

/// fp8 e4m3fn decode from the format's definition: bias 7, 3 mantissa bits,
/// subnormals at 2^-9 steps, 0x7f / 0xff NaN, no infinities.
pub fn e4m3_f64(code: u8) -> f64 {
    let exp = ((code >> 3) & 0xf) as i32;
    let man = (code & 7) as f64;
    let mag = if exp == 0xf && code & 7 == 7 {
        f64::NAN
    } else if exp == 0 {
        man * 2f64.powi(-9)
    } else {
        (1.0 + man / 8.0) * 2f64.powi(exp - 7)
    };
    if code & 0x80 != 0 {
        -mag
    } else {
        mag
    }
}

/// `c · tanh(x / c)`; `c = 0` means none.
pub fn softcap(x: f64, c: f64) -> f64 {
    if c == 0.0 {
        x
    } else {
        c * (x / c).tanh()
    }
}

/// `(Σ x² / n + eps)^-0.5`.
pub fn rms_inv(x: &[f64], eps: f64) -> f64 {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    1.0 / (ms + eps).sqrt()
}

/// Unrounded `x · inv · w` (w `None`: unscaled).
pub fn rmsnorm_row(x: &[f64], w: Option<&[f64]>, eps: f64) -> Vec<f64> {
    let inv = rms_inv(x, eps);
    x.iter().enumerate().map(|(j, v)| v * inv * w.map_or(1.0, |w| w[j])).collect()
}

/// Decodes a bf16 slice.
pub fn bf16s(bits: &[u16]) -> Vec<f64> {
    bits.iter().map(|&b| bf16_f64(b)).collect()
}

fn in_range(id: i32, n: usize) -> Option<usize> {
    (id >= 0 && (id as usize) < n).then_some(id as usize)
}

/// `embed_gather_fp8`: `bf16(bf16(e4m3 · row_scale) · scale)`, NaN rows for bad ids.
pub fn embed_gather_fp8(table: &[u8], row_scale: &[f32], ids: &[i32], h: usize, vocab: usize, scale: f32) -> Vec<Iv> {
    let mut out = Vec::with_capacity(ids.len() * h);
    for &id in ids {
        match in_range(id, vocab) {
            Some(v) => {
                for j in 0..h {
                    let deq = rb2(e4m3_f64(table[v * h + j]) * row_scale[v] as f64);
                    out.push(hull(&[deq.0 * scale as f64, deq.1 * scale as f64]));
                }
            }
            None => out.extend(std::iter::repeat_n(pt(f64::NAN), h)),
        }
    }
    out
}

/// `embed_gather_bf16`: `bf16(table · scale)`, NaN rows for bad ids.
pub fn embed_gather_bf16(table: &[u16], ids: &[i32], h: usize, vocab: usize, scale: f32) -> Vec<f64> {
    let mut out = Vec::with_capacity(ids.len() * h);
    for &id in ids {
        match in_range(id, vocab) {
            Some(v) => out.extend((0..h).map(|j| rb(bf16_f64(table[v * h + j]) * scale as f64))),
            None => out.extend(std::iter::repeat_n(f64::NAN, h)),
        }
    }
    out
}

/// `gather_rows_bf16`: exact row copy, NaN rows for bad indices.
pub fn gather_rows(src: &[u16], idx: &[i32], h: usize, n_src: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(idx.len() * h);
    for &i in idx {
        match in_range(i, n_src) {
            Some(r) => out.extend(src[r * h..(r + 1) * h].iter().map(|&b| bf16_f64(b))),
            None => out.extend(std::iter::repeat_n(f64::NAN, h)),
        }
    }
    out
}

/// `rmsnorm_bf16` (one rounding, left to the comparison).
pub fn rmsnorm(x: &[u16], w: Option<&[u16]>, dim: usize, eps: f32) -> Vec<f64> {
    let w = w.map(bf16s);
    x.chunks_exact(dim).flat_map(|row| rmsnorm_row(&bf16s(row), w.as_deref(), eps as f64)).collect()
}

/// `post_norm_add_pre_norm_bf16`: returns `(resid_out, normed)` with the
/// contract's three roundings (`normed` empty when `w_pre` is `None`).
pub fn sandwich(resid: &[u16], x: &[u16], w_post: Option<&[u16]>, w_pre: Option<&[u16]>, dim: usize, eps: f32) -> (Vec<Iv>, Vec<Iv>) {
    let (wpo, wpr) = (w_post.map(bf16s), w_pre.map(bf16s));
    let mut ro = Vec::new();
    let mut nm = Vec::new();
    for (rr, xr) in resid.chunks_exact(dim).zip(x.chunks_exact(dim)) {
        let t: Vec<Iv> = rmsnorm_row(&bf16s(xr), wpo.as_deref(), eps as f64).into_iter().map(rb2).collect();
        // resid_out is itself an intermediate of `normed`: its interval's ends are both stored values.
        let r: Vec<Iv> = bf16s(rr)
            .iter()
            .zip(&t)
            .map(|(a, t)| {
                let (p, q) = (rb2(a + t.0), rb2(a + t.1));
                hull(&[p.0, p.1, q.0, q.1])
            })
            .collect();
        if let Some(w) = &wpr {
            let lo: Vec<f64> = r.iter().map(|v| v.0).collect();
            let hi: Vec<f64> = r.iter().map(|v| v.1).collect();
            let (a, b) = (rmsnorm_row(&lo, Some(w), eps as f64), rmsnorm_row(&hi, Some(w), eps as f64));
            nm.extend(a.iter().zip(&b).map(|(x, y)| hull(&[*x, *y])));
        }
        ro.extend(r);
    }
    (ro, nm)
}

/// `layer_out_bf16`: `t = bf16(rmsnorm(x; w))`, `s = bf16(mid + t)`, `out = s · scalar`
/// (the last rounding left to the comparison).
pub fn layer_out(mid: &[u16], x: &[u16], w: Option<&[u16]>, scalar: f32, dim: usize, eps: f32) -> Vec<Iv> {
    let w = w.map(bf16s);
    let sc = scalar as f64;
    let mut out = Vec::new();
    for (mr, xr) in mid.chunks_exact(dim).zip(x.chunks_exact(dim)) {
        let t = rmsnorm_row(&bf16s(xr), w.as_deref(), eps as f64);
        for (m, t) in bf16s(mr).iter().zip(t) {
            let t = rb2(t);
            let (p, q) = (rb2(m + t.0), rb2(m + t.1));
            out.push(hull(&[p.0 * sc, p.1 * sc, q.0 * sc, q.1 * sc]));
        }
    }
    out
}

/// Inputs of `qkv_prep_bf16`, host side.
pub struct QkvIn<'a> {
    /// `[src_rows, nh·hd]`.
    pub q_raw: &'a [u16],
    /// `[src_rows, nkv·hd]`.
    pub k_raw: &'a [u16],
    /// `[src_rows, nkv·hd]` (the same data as `k_raw` for k_eq_v).
    pub v_raw: &'a [u16],
    /// `[hd]` or `None`.
    pub q_norm: Option<&'a [u16]>,
    /// `[hd]` or `None`.
    pub k_norm: Option<&'a [u16]>,
    /// `[max_pos][hd/2][2]`.
    pub cos_sin: &'a [f32],
    /// `[rows]`.
    pub pos: &'a [i32],
    /// `[rows]` (ignored when nkv = 0).
    pub slot: &'a [i32],
    /// `[rows]` or `None` (identity).
    pub pmap: Option<&'a [i32]>,
    /// Query heads.
    pub nh: usize,
    /// KV heads.
    pub nkv: usize,
    /// Head dim.
    pub hd: usize,
    /// Rows of the raw projections.
    pub src_rows: usize,
    /// Rows of the RoPE table.
    pub max_pos: usize,
    /// Slots in the pools.
    pub num_slots: usize,
    /// RMSNorm epsilon.
    pub eps: f32,
}

/// `qkv_prep_bf16`: returns `(q_out, k_pool, v_pool)` as expected values;
/// the pools start as `k_pool0` / `v_pool0` (slots nobody writes keep them).
pub fn qkv_prep(p: &QkvIn, k_pool0: &[u16], v_pool0: &[u16]) -> (Vec<Iv>, Vec<Iv>, Vec<Iv>) {
    let (nh, nkv, hd, half) = (p.nh, p.nkv, p.hd, p.hd / 2);
    let rows = p.pos.len();
    let mut q = vec![pt(0.0); rows * nh * hd];
    let mut kp = pts(bf16s(k_pool0));
    let mut vp = pts(bf16s(v_pool0));
    let qn = p.q_norm.map(bf16s);
    let kn = p.k_norm.map(bf16s);
    // Normalise (rounded to bf16), then rotate half with the table's f32 cos/sin.
    let rope = |raw: &[u16], w: Option<&[f64]>, pos: usize| -> Vec<Iv> {
        let n: Vec<Iv> = rmsnorm_row(&bf16s(raw), w, p.eps as f64).into_iter().map(rb2).collect();
        let mut o = vec![pt(0.0); hd];
        for i in 0..half {
            let c = p.cos_sin[(pos * half + i) * 2] as f64;
            let s = p.cos_sin[(pos * half + i) * 2 + 1] as f64;
            o[i] = map2(n[i], n[i + half], |a, b| a * c - b * s);
            o[i + half] = map2(n[i], n[i + half], |a, b| b * c + a * s);
        }
        o
    };
    for r in 0..rows {
        let s = p.pmap.map_or(r as i32, |m| m[r]);
        let src = in_range(s, p.src_rows);
        let pos = in_range(p.pos[r], p.max_pos);
        let ok = src.zip(pos);
        for h in 0..nh {
            let dst = &mut q[(r * nh + h) * hd..(r * nh + h + 1) * hd];
            match ok {
                Some((s, pos)) => dst.copy_from_slice(&rope(&p.q_raw[(s * nh + h) * hd..(s * nh + h + 1) * hd], qn.as_deref(), pos)),
                None => dst.fill(pt(f64::NAN)),
            }
        }
        if nkv == 0 {
            continue;
        }
        let Some(slot) = in_range(p.slot[r], p.num_slots) else { continue };
        for j in 0..nkv {
            let at = (slot * nkv + j) * hd;
            match ok {
                Some((s, pos)) => {
                    let raw = |t: &[u16]| t[(s * nkv + j) * hd..(s * nkv + j + 1) * hd].to_vec();
                    kp[at..at + hd].copy_from_slice(&rope(&raw(p.k_raw), kn.as_deref(), pos));
                    vp[at..at + hd].copy_from_slice(&pts(rmsnorm_row(&bf16s(&raw(p.v_raw)), None, p.eps as f64)));
                }
                None => {
                    kp[at..at + hd].fill(pt(f64::NAN));
                    vp[at..at + hd].fill(pt(f64::NAN));
                }
            }
        }
    }
    (q, kp, vp)
}

/// `moe_count`: per-expert counts of valid ids.
pub fn moe_counts(ids: &[i32], e: usize) -> Vec<i32> {
    let mut c = vec![0; e];
    for &x in ids {
        if let Some(x) = in_range(x, e) {
            c[x] += 1;
        }
    }
    c
}

/// `moe_offsets`: exclusive prefix sum `[e+1]`.
pub fn moe_offsets(counts: &[i32]) -> Vec<i32> {
    let mut o = vec![0; counts.len() + 1];
    for (i, c) in counts.iter().enumerate() {
        o[i + 1] = o[i] + c;
    }
    o
}

/// `moe_scatter`: `(pair_of_slot, slot_of_pair, cursor_after)`, built by the
/// definition `slot = offsets[x] + |{q < p : ids[q] == x}|` (a quadratic
/// count, deliberately not the cursor algorithm).
pub fn moe_scatter(ids: &[i32], offsets: &[i32], e: usize) -> (Vec<i32>, Vec<i32>, Vec<i32>) {
    let n = ids.len();
    let mut pos = vec![-1; n];
    let mut sop = vec![-1; n];
    for p in 0..n {
        if let Some(x) = in_range(ids[p], e) {
            let before = ids[..p].iter().filter(|&&q| q == ids[p]).count() as i32;
            let slot = offsets[x] + before;
            sop[p] = slot;
            pos[slot as usize] = p as i32;
        }
    }
    (pos, sop, offsets[1..].to_vec())
}

/// Dot-product logits and their tolerance magnitudes: for each output,
/// `(softcap(scale · Σ a·b), |scale| · Σ|a·b|)`.
pub fn dot_logit(a: &[f64], b: &[f64], scale: f64, cap: f64) -> (f64, f64) {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let mag: f64 = a.iter().zip(b).map(|(x, y)| (x * y).abs()).sum();
    (softcap(scale * dot, cap), scale.abs() * mag)
}

/// `lm_head_logits_fp8`: `(expected, bound)` per `[m, vocab]` output.
pub fn lm_head_fp8(h: &[u16], e8: &[u8], row_scale: &[f32], m: usize, vocab: usize, hdim: usize, cap: f32) -> (Vec<f64>, Vec<f64>) {
    let table: Vec<f64> = e8.iter().map(|&c| e4m3_f64(c)).collect();
    let mut out = (Vec::new(), Vec::new());
    for i in 0..m {
        let hr = bf16s(&h[i * hdim..(i + 1) * hdim]);
        for v in 0..vocab {
            let (x, b) = dot_logit(&hr, &table[v * hdim..(v + 1) * hdim], row_scale[v] as f64, cap as f64);
            out.0.push(x);
            out.1.push(b);
        }
    }
    out
}

/// `lm_head_logits_bf16`: `(expected, bound)` per `[m, vocab]` output.
pub fn lm_head_bf16(h: &[u16], table: &[u16], m: usize, vocab: usize, hdim: usize, cap: f32) -> (Vec<f64>, Vec<f64>) {
    let t = bf16s(table);
    let mut out = (Vec::new(), Vec::new());
    for i in 0..m {
        let hr = bf16s(&h[i * hdim..(i + 1) * hdim]);
        for v in 0..vocab {
            let (x, b) = dot_logit(&hr, &t[v * hdim..(v + 1) * hdim], 1.0, cap as f64);
            out.0.push(x);
            out.1.push(b);
        }
    }
    out
}

/// `letter_logits_fp8`: `(expected, bound)` per `[rows, n_labels]` output;
/// out-of-range labels give NaN (bound 0).
pub fn letter_logits(
    hidden: &[u16],
    e8: &[u8],
    row_scale: &[f32],
    labels: &[i32],
    hdim: usize,
    vocab: usize,
    cap: f32,
) -> (Vec<f64>, Vec<f64>) {
    let mut out = (Vec::new(), Vec::new());
    for hr in hidden.chunks_exact(hdim) {
        let hr = bf16s(hr);
        for &l in labels {
            match in_range(l, vocab) {
                Some(l) => {
                    let row: Vec<f64> = e8[l * hdim..(l + 1) * hdim].iter().map(|&c| e4m3_f64(c)).collect();
                    let (x, b) = dot_logit(&hr, &row, row_scale[l] as f64, cap as f64);
                    out.0.push(x);
                    out.1.push(b);
                }
                None => {
                    out.0.push(f64::NAN);
                    out.1.push(0.0);
                }
            }
        }
    }
    out
}

/// `argmax_rows` for one row: lowest index among the largest non-NaN,
/// non-excluded values; `(-1, -inf)` when none is eligible.
pub fn argmax_row(row: &[f32], ex0: i32, ex1: i32) -> (i32, f32) {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in row.iter().enumerate() {
        if v.is_nan() || i as i32 == ex0 || i as i32 == ex1 {
            continue;
        }
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map_or((-1, f32::NEG_INFINITY), |(i, v)| (i as i32, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_of_f64_agrees_with_the_core_codec_on_f32_inputs() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
        for _ in 0..200_000 {
            let x = f32::from_bits(rng.random::<u32>());
            if x.is_nan() {
                continue;
            }
            assert_eq!(bf16_of_f64(x as f64), switchyard_core::codec::bf16_bits(x), "x = {x:e} ({:#x})", x.to_bits());
        }
        // Ties: 1 + 2^-8 goes to 1.0, 1 + 3·2^-8 goes up; just above a tie goes up.
        assert_eq!(bf16_of_f64(1.0 + 2f64.powi(-8)), 0x3f80);
        assert_eq!(bf16_of_f64(1.0 + 3.0 * 2f64.powi(-8)), 0x3f82);
        assert_eq!(bf16_of_f64(1.0 + 2f64.powi(-8) + 2f64.powi(-40)), 0x3f81);
    }

    #[test]
    fn rb2_is_a_point_away_from_midpoints_and_both_neighbours_near_them() {
        let one_up = 1.0 + 2f64.powi(-7);
        assert_eq!(rb2(1.0 + 2f64.powi(-9)), pt(1.0));
        assert_eq!(rb2(1.0 + 2f64.powi(-8) * (1.0 + 1e-7)), (1.0, one_up));
        assert_eq!(rb2(1.0 + 2f64.powi(-8) * (1.0 - 1e-7)), (1.0, one_up));
        assert_eq!(rb2(-(1.0 + 2f64.powi(-8) * (1.0 - 1e-7))), (-one_up, -1.0));
        assert_eq!(rb2(1.0), pt(1.0));
        assert!(rb2(f64::NAN).0.is_nan());
    }

    #[test]
    fn e4m3_decode_agrees_with_the_core_codec() {
        for c in 0..=255u8 {
            let (a, b) = (e4m3_f64(c), switchyard_core::codec::fp8::e4m3_to_f32(c) as f64);
            assert!(a == b || (a.is_nan() && b.is_nan()), "code {c:#x}: {a} vs {b}");
        }
        assert_eq!(e4m3_f64(0x7e), 448.0);
        assert_eq!(e4m3_f64(0x01), 2f64.powi(-9));
    }
}
