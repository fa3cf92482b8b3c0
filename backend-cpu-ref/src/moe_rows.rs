//! The MoE row kernels that fuse two or three others, composed from the
//! reference's own rows: the normalised gather (RMSNorm, then the gather's
//! slot rules) and the combine with both post norms (combine, RMSNorm, the
//! sandwich's sum).
use crate::attn::count;
use crate::ctx::Ctx;
use crate::embed::BF16_NAN;
use crate::moe_expert::{gathered, CombineOperands};
use crate::norm::{rmsnorm_row, sandwich_sum};
use switchyard_core::codec::{bf16_bits, bf16_round, bf16_value};
use switchyard_core::{Error, Result};
use switchyard_kernels::moe::rows::{COMBINE_POST_NORMS_MAX_H, MOE_COMBINE_POST_NORMS_BF16, MOE_NORM_GATHER_BF16};

register!(MOE_NORM_GATHER_BF16 => norm_gather);
register!(MOE_COMBINE_POST_NORMS_BF16 => combine_post_norms);

fn norm_gather(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let (out, x, w, pos) = (c.buf("out")?, c.buf("x")?, c.buf("w")?, c.buf("pair_of_slot")?);
    let (n, k, h, rows, eps) = (c.size("n")?, c.size("k")?, c.size("h")?, c.size("rows")?, c.f32("eps")?);
    if k == 0 {
        return Err(Error::invalid(kernel, "k", "k must be > 0 (pairs are mapped to tokens by pair / k)"));
    }
    if h == 0 || h % 2 != 0 {
        return Err(Error::invalid(kernel, "h", format!("h = {h} must be even and > 0")));
    }
    let pairs = c.i32s(pos, 0, n)?;
    let w = c.bf16(w, 0, h)?;
    let normed: Vec<Vec<u16>> =
        (0..rows).map(|t| Ok(rmsnorm_row(&c.bf16(x, count(kernel, "x", &[t, h])?, h)?, eps, Some(&w)))).collect::<Result<_>>()?;
    let out_elems = count(kernel, "out", &[n, h])?;
    c.bytes(out, 0, out_elems, 2)?;
    let bits = gathered(&pairs, k, h, rows, |t| &normed[t], out_elems);
    c.put_bf16(out, 0, &bits)
}

fn combine_post_norms(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let (out, mlp, w_mlp, w_moe) = (c.buf("out")?, c.buf("mlp")?, c.buf("w_mlp")?, c.buf("w_moe")?);
    let (rows, h, eps) = (c.size("rows")?, c.size("h")?, c.f32("eps")?);
    if h == 0 || h % 2 != 0 || h > COMBINE_POST_NORMS_MAX_H {
        return Err(Error::invalid(kernel, "h", format!("h = {h} must be even and in 2..={COMBINE_POST_NORMS_MAX_H}")));
    }
    let operands = CombineOperands::read(c)?;
    let (w_mlp, w_moe) = (c.bf16(w_mlp, 0, h)?, c.bf16(w_moe, 0, h)?);
    let out_elems = count(kernel, "out", &[rows, h])?;
    c.bytes(out, 0, out_elems, 2)?;
    let mut bits = Vec::with_capacity(out_elems);
    let mut e = vec![0f32; h];
    for t in 0..rows {
        if !operands.row(t, &mut e) {
            bits.extend(std::iter::repeat_n(BF16_NAN, h));
            continue;
        }
        let e: Vec<f32> = e.iter().map(|&v| bf16_round(v)).collect();
        let m: Vec<f32> = rmsnorm_row(&c.bf16(mlp, t * h, h)?, eps, Some(&w_mlp)).into_iter().map(bf16_value).collect();
        bits.extend(sandwich_sum(&m, &e, Some(&w_moe), eps).into_iter().map(bf16_bits));
    }
    c.put_bf16(out, 0, &bits)
}
