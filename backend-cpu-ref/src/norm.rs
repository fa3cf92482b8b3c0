//! RMSNorm family: `y = x · (Σ x² / dim + eps)^-0.5 · w`, statistics in f32,
//! the sum in index order; a null weight means unscaled.
use crate::ctx::Ctx;
use switchyard_core::codec::{bf16_bits, bf16_round};
use switchyard_core::{Error, Result};
use switchyard_kernels::norm::{LAYER_OUT_BF16, POST_NORM_ADD_PRE_NORM_BF16, RMSNORM_BF16};

register!(RMSNORM_BF16 => rmsnorm);
register!(POST_NORM_ADD_PRE_NORM_BF16 => post_norm_add_pre_norm);
register!(LAYER_OUT_BF16 => layer_out);

/// `dim` of a row kernel, which must be > 0: with dim = 0 every row is
/// empty and touches no memory, so a raw launch with a huge row count spun
/// through billions of no-op rows instead of failing (a timeout found by the
/// launch_validator fuzzer).
fn row_dim(c: &Ctx<'_>) -> Result<usize> {
    match c.size("dim")? {
        0 => Err(Error::invalid(c.kernel(), "dim", "dim must be > 0")),
        d => Ok(d),
    }
}

/// `(Σ x² / len + eps)^-0.5` in f32, summing in index order.
pub(crate) fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let ss = x.iter().fold(0f32, |s, &v| s + v * v);
    1.0 / (ss / x.len() as f32 + eps).sqrt()
}

/// `x · inv · w` (`w` absent: `x · inv`) in f32, not yet rounded.
pub(crate) fn normalize(x: &[f32], eps: f32, w: Option<&[f32]>) -> Vec<f32> {
    let inv = inv_rms(x, eps);
    match w {
        Some(w) => x.iter().zip(w).map(|(&v, &w)| v * inv * w).collect(),
        None => x.iter().map(|&v| v * inv).collect(),
    }
}

/// One row of `rmsnorm_bf16`: the bf16 bits it stores.
pub(crate) fn rmsnorm_row(x: &[f32], eps: f32, w: Option<&[f32]>) -> Vec<u16> {
    to_bits(&normalize(x, eps, w))
}

fn to_bits(v: &[f32]) -> Vec<u16> {
    v.iter().map(|&x| bf16_bits(x)).collect()
}

fn round_all(v: Vec<f32>) -> Vec<f32> {
    v.into_iter().map(bf16_round).collect()
}

fn rmsnorm(c: &mut Ctx<'_>) -> Result<()> {
    let (out, x, w) = (c.buf("out")?, c.buf("x")?, c.opt_buf("w")?);
    let (dim, eps) = (row_dim(c)?, c.f32("eps")?);
    let w = w.map(|w| c.bf16(w, 0, dim)).transpose()?;
    for r in 0..c.size("rows")? {
        let xr = c.bf16(x, r * dim, dim)?;
        c.put_bf16(out, r * dim, &rmsnorm_row(&xr, eps, w.as_deref()))?;
    }
    Ok(())
}

fn post_norm_add_pre_norm(c: &mut Ctx<'_>) -> Result<()> {
    let (resid_out, resid, x) = (c.buf("resid_out")?, c.buf("resid")?, c.buf("x")?);
    let (w_post, w_pre) = (c.opt_buf("w_post")?, c.opt_buf("w_pre")?);
    let (dim, eps) = (row_dim(c)?, c.f32("eps")?);
    // The second output exists only with a pre-norm weight; then it is required.
    let normed = if w_pre.is_some() { Some(c.buf("normed")?) } else { None };
    let w_post = w_post.map(|w| c.bf16(w, 0, dim)).transpose()?;
    let w_pre = w_pre.map(|w| c.bf16(w, 0, dim)).transpose()?;
    for r in 0..c.size("rows")? {
        let xr = c.bf16(x, r * dim, dim)?;
        let rr = c.bf16(resid, r * dim, dim)?;
        let sum = sandwich_sum(&rr, &xr, w_post.as_deref(), eps);
        c.put_bf16(resid_out, r * dim, &to_bits(&sum))?;
        if let Some(normed) = normed {
            c.put_bf16(normed, r * dim, &to_bits(&normalize(&sum, eps, w_pre.as_deref())))?;
        }
    }
    Ok(())
}

/// One row of the sandwich's `resid_out`, `bf16(resid + bf16(rmsnorm(x; w_post)))`, as f32.
pub(crate) fn sandwich_sum(resid: &[f32], x: &[f32], w_post: Option<&[f32]>, eps: f32) -> Vec<f32> {
    let t = round_all(normalize(x, eps, w_post));
    round_all(resid.iter().zip(&t).map(|(&a, &b)| a + b).collect())
}

fn layer_out(c: &mut Ctx<'_>) -> Result<()> {
    let (out, mid, x, w) = (c.buf("out")?, c.buf("mid")?, c.buf("x")?, c.opt_buf("w")?);
    let scalar = c.buf("layer_scalar")?;
    let (dim, eps) = (row_dim(c)?, c.f32("eps")?);
    let w = w.map(|w| c.bf16(w, 0, dim)).transpose()?;
    let ls = c.f32_at(scalar, 0)?;
    for r in 0..c.size("rows")? {
        let xr = c.bf16(x, r * dim, dim)?;
        let mr = c.bf16(mid, r * dim, dim)?;
        c.put_bf16(out, r * dim, &layer_out_row(&mr, &xr, w.as_deref(), ls, eps))?;
    }
    Ok(())
}

/// One row of `layer_out_bf16`: `bf16(bf16(mid + bf16(rmsnorm(x; w))) · ls)`, the bits it stores.
pub(crate) fn layer_out_row(mid: &[f32], x: &[f32], w: Option<&[f32]>, ls: f32, eps: f32) -> Vec<u16> {
    let t = round_all(normalize(x, eps, w));
    mid.iter().zip(&t).map(|(&m, &t)| bf16_bits(bf16_round(m + t) * ls)).collect()
}
