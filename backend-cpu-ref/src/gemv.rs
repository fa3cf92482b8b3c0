//! The decode GEMVs: the dense GEMM's sums (strict k order, which the GEMV
//! contracts allow among others) with the segmented and gated-GELU epilogues;
//! the fused-norm GEMV is the rmsnorm reference's row, then the segmented GEMV.
use crate::ctx::Ctx;
use crate::embed::{in_range, BF16_NAN};
use crate::gemm::{elems, mnk, product};
use crate::moe_expert::gelu_tanh;
use crate::norm::{layer_out_row, normalize, rmsnorm_row, sandwich_sum};
use crate::rope_kv::norm_rope;
use switchyard_core::codec::{bf16_bits, bf16_round, bf16_value};
use switchyard_core::{Error, Result};
use switchyard_kernels::gemv::{
    DENSE_GEMV_BF16, DENSE_GEMV_GELU_MUL_BF16, DENSE_GEMV_LAYER_OUT_RMSNORM_BF16, DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16,
    DENSE_GEMV_RMSNORM_BF16, DENSE_GEMV_SANDWICH_GELU_MUL_BF16, GEMV_MAX_M,
};

register!(DENSE_GEMV_BF16 => dense_gemv);
register!(DENSE_GEMV_RMSNORM_BF16 => dense_gemv_rmsnorm);
register!(DENSE_GEMV_GELU_MUL_BF16 => dense_gemv_gelu_mul);
register!(DENSE_GEMV_LAYER_OUT_RMSNORM_BF16 => dense_gemv_layer_out_rmsnorm);
register!(DENSE_GEMV_SANDWICH_GELU_MUL_BF16 => dense_gemv_sandwich_gelu_mul);
register!(DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16 => dense_gemv_layer_out_rmsnorm_qkv_prep);

/// The activation rows `a [m, k]` as f32, after checking `m`.
fn activations(c: &Ctx<'_>) -> Result<Vec<f32>> {
    let kernel = c.kernel();
    let (m, _, k) = mnk(c)?;
    if m > GEMV_MAX_M {
        return Err(Error::invalid(kernel, "m", format!("m = {m} must be in 1..={GEMV_MAX_M}")));
    }
    c.bf16(c.buf("a")?, 0, elems(kernel, "a", m, k)?)
}

/// `[m, rows]` f32 sums of the activation rows `a` (`[m, k]`, as
/// [`activations`] read them, or transformed) against `rows` weight rows,
/// after checking every operand's range (the output's `c_elems` bf16 included).
fn sums(c: &Ctx<'_>, a: &[f32], rows: usize, c_elems: usize) -> Result<(usize, usize, Vec<f32>)> {
    let kernel = c.kernel();
    let (m, _, k) = mnk(c)?;
    let (b, out) = (c.buf("b")?, c.buf("c")?);
    let b = c.bytes(b, 0, elems(kernel, "b", rows, k)?, 2)?;
    c.bytes(out, 0, c_elems, 2)?;
    let acc = product(a, m, rows, k, std::slice::from_ref(&(0..k)), |n0, nt, panel| {
        for j in 0..nt {
            let row = &b[(n0 + j) * k * 2..(n0 + j + 1) * k * 2];
            for (kk, v) in row.chunks_exact(2).enumerate() {
                panel[kk * crate::gemm::NT + j] = bf16_value(u16::from_le_bytes([v[0], v[1]]));
            }
        }
    });
    Ok((m, k, acc))
}

fn dense_gemv(c: &mut Ctx<'_>) -> Result<()> {
    let a = activations(c)?;
    segmented(c, &a).map(drop)
}

/// `rmsnorm_bf16`'s reference on the one row (its bf16 output, read back as
/// f32), then the segmented GEMV of that row.
fn dense_gemv_rmsnorm(c: &mut Ctx<'_>) -> Result<()> {
    one_row(c)?;
    let a = activations(c)?;
    normed_segmented(c, &a).map(drop)
}

/// The fused norm's `m = 1` rule.
fn one_row(c: &Ctx<'_>) -> Result<()> {
    match mnk(c)?.0 {
        1 => Ok(()),
        m => Err(Error::invalid(c.kernel(), "m", format!("m = {m}: the fused RMSNorm GEMV takes exactly one activation row"))),
    }
}

/// `rmsnorm_bf16`'s row of `a` (with `norm_w`, `eps`), then the segmented GEMV of it.
fn normed_segmented(c: &mut Ctx<'_>, a: &[f32]) -> Result<Vec<u16>> {
    let (_, _, k) = mnk(c)?;
    let w = c.bf16(c.buf("norm_w")?, 0, k)?;
    let xn: Vec<f32> = rmsnorm_row(a, c.f32("eps")?, Some(&w)).into_iter().map(bf16_value).collect();
    segmented(c, &xn)
}

/// The one row's inputs of a kernel that forms its activation row.
struct RowInputs {
    k: usize,
    eps: f32,
    /// The residual stream `[k]`.
    mid: Vec<f32>,
    /// The sub-block output the post-norm takes `[k]`.
    x: Vec<f32>,
    /// The post-norm's weight `[k]`, if given.
    w_post: Option<Vec<f32>>,
}

/// [`RowInputs`] of the launch (`m` must be 1).
fn row_inputs(c: &Ctx<'_>) -> Result<RowInputs> {
    one_row(c)?;
    let (_, _, k) = mnk(c)?;
    let mid = c.bf16(c.buf("mid")?, 0, k)?;
    let x = c.bf16(c.buf("x")?, 0, k)?;
    let w_post = c.opt_buf("w_post")?.map(|w| c.bf16(w, 0, k)).transpose()?;
    Ok(RowInputs { k, eps: c.f32("eps")?, mid, x, w_post })
}

/// `layer_out_bf16`'s reference on the one row into `a` (its bf16 bits),
/// then [`dense_gemv_rmsnorm`]'s of that row.
fn dense_gemv_layer_out_rmsnorm(c: &mut Ctx<'_>) -> Result<()> {
    layer_out_gemv(c).map(drop)
}

/// [`dense_gemv_layer_out_rmsnorm`]; returns what it stored in `c`.
fn layer_out_gemv(c: &mut Ctx<'_>) -> Result<Vec<u16>> {
    let RowInputs { eps, mid, x, w_post, .. } = row_inputs(c)?;
    let ls = c.f32_at(c.buf("layer_scalar")?, 0)?;
    let row = layer_out_row(&mid, &x, w_post.as_deref(), ls, eps);
    c.put_bf16(c.buf("a")?, 0, &row)?;
    let a: Vec<f32> = row.iter().map(|&b| bf16_value(b)).collect();
    normed_segmented(c, &a)
}

/// The segmented GEMV of the activation rows `a` into `c`; returns what it stored.
fn segmented(c: &mut Ctx<'_>, a: &[f32]) -> Result<Vec<u16>> {
    let kernel = c.kernel();
    let (m, n, _) = mnk(c)?;
    let (seg1, seg2) = (c.u32_size("seg1")?, c.u32_size("seg2")?);
    if seg1 > seg2 || seg2 > n {
        return Err(Error::invalid(kernel, "seg1", format!("segments [{seg1}, {seg2}] must satisfy seg1 <= seg2 <= n = {n}")));
    }
    let mn = elems(kernel, "c", m, n)?;
    let (m, _, acc) = sums(c, a, n, mn)?;
    let mut bits = vec![0u16; mn];
    for (start, end) in [(0, seg1), (seg1, seg2), (seg2, n)] {
        let (base, width) = (m * start, end - start);
        for i in 0..m {
            for j in start..end {
                bits[base + i * width + (j - start)] = bf16_bits(acc[i * n + j]);
            }
        }
    }
    c.put_bf16(c.buf("c")?, 0, &bits)?;
    Ok(bits)
}

/// [`layer_out_gemv`], then `qkv_prep_bf16`'s reference (rope_kv.rs) over
/// the one row it stored in `c`: the query heads `c[0, seg1)`, the K heads
/// `c[seg1, seg2)`, the V heads `c[seg2, n)` or, with `n == seg2`, the K
/// heads again; position `pos[0]`, slot `slot[0]`.
fn dense_gemv_layer_out_rmsnorm_qkv_prep(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let (_, n, _) = mnk(c)?;
    let (seg1, seg2) = (c.u32_size("seg1")?, c.u32_size("seg2")?);
    let (nh, nkv, hd) = (c.size("nh")?, c.size("nkv")?, c.size("hd")?);
    let (max_pos, num_slots, eps) = (c.size("max_pos")?, c.size("num_slots")?, c.f32("eps")?);
    if hd == 0 || hd % 8 != 0 || hd > 512 {
        return Err(Error::invalid(kernel, "hd", format!("hd = {hd} must be a multiple of 8 in 8..=512")));
    }
    let (q, kv) = (nh.saturating_mul(hd), nkv.saturating_mul(hd));
    if nh == 0 || nkv == 0 || seg1 != q || seg2 != q.saturating_add(kv) || (n != seg2 && n != seg2.saturating_add(kv)) {
        return Err(Error::invalid(kernel, "n", format!("n = {n}, segments {seg1}, {seg2} are not nh = {nh}, nkv = {nkv} heads of {hd}")));
    }
    let raw: Vec<f32> = layer_out_gemv(c)?.into_iter().map(bf16_value).collect();
    let (q_out, k_pool, v_pool) = (c.buf("q_out")?, c.buf("k_pool")?, c.buf("v_pool")?);
    let q_norm = c.bf16(c.buf("q_norm")?, 0, hd)?;
    let k_norm = c.bf16(c.buf("k_norm")?, 0, hd)?;
    let pos = in_range(c.i32_at(c.buf("pos")?, 0)?, max_pos);
    let cs = pos.map(|p| c.f32s(c.buf("cos_sin")?, p * hd, hd)).transpose()?;
    let head = |h: usize| &raw[h * hd..(h + 1) * hd];
    for h in 0..nh {
        match &cs {
            Some(cs) => c.put_bf16(q_out, h * hd, &norm_rope(head(h), eps, Some(&q_norm), cs))?,
            None => c.fill_bf16(q_out, h * hd, hd, BF16_NAN)?,
        }
    }
    // Negative (padding) or out-of-pool slots skip the KV write.
    let Some(slot) = in_range(c.i32_at(c.buf("slot")?, 0)?, num_slots) else { return Ok(()) };
    let v_first = if n == seg2 { nh } else { nh + nkv };
    for j in 0..nkv {
        let at = (slot * nkv + j) * hd;
        match &cs {
            Some(cs) => {
                c.put_bf16(k_pool, at, &norm_rope(head(nh + j), eps, Some(&k_norm), cs))?;
                let vn: Vec<u16> = normalize(head(v_first + j), eps, None).into_iter().map(bf16_bits).collect();
                c.put_bf16(v_pool, at, &vn)?;
            }
            None => {
                c.fill_bf16(k_pool, at, hd, BF16_NAN)?;
                c.fill_bf16(v_pool, at, hd, BF16_NAN)?;
            }
        }
    }
    Ok(())
}

fn dense_gemv_gelu_mul(c: &mut Ctx<'_>) -> Result<()> {
    let a = activations(c)?;
    gated(c, &a)
}

/// The sandwich's reference on the one row: `resid_out` into `a` (its bf16
/// bits), then the gated GEMV of its normed row.
fn dense_gemv_sandwich_gelu_mul(c: &mut Ctx<'_>) -> Result<()> {
    let RowInputs { k, eps, mid, x, w_post } = row_inputs(c)?;
    let w_pre = c.bf16(c.buf("norm_w")?, 0, k)?;
    let sum = sandwich_sum(&mid, &x, w_post.as_deref(), eps);
    c.put_bf16(c.buf("a")?, 0, &sum.iter().map(|&v| bf16_bits(v)).collect::<Vec<_>>())?;
    let hn: Vec<f32> = rmsnorm_row(&sum, eps, Some(&w_pre)).into_iter().map(bf16_value).collect();
    gated(c, &hn)
}

/// The gated GEMV of the activation rows `a` into `c`.
fn gated(c: &mut Ctx<'_>, a: &[f32]) -> Result<()> {
    let kernel = c.kernel();
    let (m, n, _) = mnk(c)?;
    let rows = n.checked_mul(2).ok_or_else(|| Error::invalid(kernel, "n", "2 · n overflows"))?;
    let (m, _, acc) = sums(c, a, rows, elems(kernel, "c", m, n)?)?;
    let mut bits = Vec::with_capacity(m * n);
    for r in acc.chunks_exact(rows) {
        let (gate, up) = r.split_at(n);
        // The unfused path's roundings: the GEMM output (gate and up) to bf16,
        // then the activation to bf16 before the multiply.
        bits.extend(gate.iter().zip(up).map(|(&g, &u)| bf16_bits(bf16_round(gelu_tanh(bf16_round(g))) * bf16_round(u))));
    }
    c.put_bf16(c.buf("c")?, 0, &bits)
}
