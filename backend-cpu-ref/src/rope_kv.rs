//! q/k/v preparation: per-head RMSNorm, rotate-half RoPE from an f32
//! `[max_pos][hd/2][2]` (cos, sin) table, and the K/V write into the pool
//! slot each row names.
use crate::ctx::{Buf, Ctx};
use crate::embed::{in_range, BF16_NAN};
use crate::norm::normalize;
use switchyard_core::codec::{bf16_bits, bf16_round};
use switchyard_core::{Error, Result};
use switchyard_kernels::rope_kv::QKV_PREP_BF16;

register!(QKV_PREP_BF16 => qkv_prep);

/// `bf16(rmsnorm(x; w))` then rotate-half RoPE with `cs = [cos0, sin0, cos1, sin1, ..]`,
/// each output rounded once.
pub(crate) fn norm_rope(x: &[f32], eps: f32, w: Option<&[f32]>, cs: &[f32]) -> Vec<u16> {
    let n: Vec<f32> = normalize(x, eps, w).into_iter().map(bf16_round).collect();
    let half = n.len() / 2;
    let mut o = vec![0u16; n.len()];
    for i in 0..half {
        let (cos, sin) = (cs[2 * i], cs[2 * i + 1]);
        o[i] = bf16_bits(n[i] * cos - n[i + half] * sin);
        o[i + half] = bf16_bits(n[i + half] * cos + n[i] * sin);
    }
    o
}

/// The KV side of a launch (`nkv > 0`).
struct Kv {
    k_pool: Buf,
    v_pool: Buf,
    k_raw: Buf,
    v_raw: Buf,
    slot: Buf,
    k_norm: Option<Vec<f32>>,
}

fn qkv_prep(c: &mut Ctx<'_>) -> Result<()> {
    let (q_out, q_raw, cos_sin, pos) = (c.buf("q_out")?, c.buf("q_raw")?, c.buf("cos_sin")?, c.buf("pos")?);
    let (nh, nkv, hd, eps) = (c.size("nh")?, c.size("nkv")?, c.size("hd")?, c.f32("eps")?);
    let (src_rows, max_pos, num_slots) = (c.size("src_rows")?, c.size("max_pos")?, c.size("num_slots")?);
    // hd = 0 as well: every head row would be empty, so nothing would bound
    // the loop over nh (up to 2^31) heads per row (a fuzzer timeout).
    if hd == 0 || hd % 2 != 0 {
        return Err(Error::invalid(c.kernel(), "hd", format!("hd = {hd} must be positive and even: rotate-half pairs i with i + hd/2")));
    }
    let pmap = c.opt_buf("pmap")?;
    let q_norm = c.opt_buf("q_norm")?.map(|w| c.bf16(w, 0, hd)).transpose()?;
    let kv = if nkv > 0 {
        Some(Kv {
            k_pool: c.buf("k_pool")?,
            v_pool: c.buf("v_pool")?,
            k_raw: c.buf("k_raw")?,
            v_raw: c.buf("v_raw")?,
            slot: c.buf("slot")?,
            k_norm: c.opt_buf("k_norm")?.map(|w| c.bf16(w, 0, hd)).transpose()?,
        })
    } else {
        None
    };
    for r in 0..c.size("rows")? {
        let s = match pmap {
            Some(p) => c.i32_at(p, r)?,
            None => i32::try_from(r).unwrap_or(i32::MAX),
        };
        // A bad source row or position poisons the row's outputs instead of reading outside.
        let valid = in_range(s, src_rows).zip(in_range(c.i32_at(pos, r)?, max_pos));
        let cs = match valid {
            Some((_, p)) => Some(c.f32s(cos_sin, p * hd, hd)?),
            None => None,
        };
        for h in 0..nh {
            let at = (r * nh + h) * hd;
            match (valid, &cs) {
                (Some((s, _)), Some(cs)) => {
                    let x = c.bf16(q_raw, (s * nh + h) * hd, hd)?;
                    c.put_bf16(q_out, at, &norm_rope(&x, eps, q_norm.as_deref(), cs))?;
                }
                _ => c.fill_bf16(q_out, at, hd, BF16_NAN)?,
            }
        }
        let Some(kv) = &kv else { continue };
        // Negative (padding) or out-of-pool slots skip the KV write.
        let Some(slot) = in_range(c.i32_at(kv.slot, r)?, num_slots) else { continue };
        for j in 0..nkv {
            let at = (slot * nkv + j) * hd;
            match (valid, &cs) {
                (Some((s, _)), Some(cs)) => {
                    let src = (s * nkv + j) * hd;
                    let k = c.bf16(kv.k_raw, src, hd)?;
                    c.put_bf16(kv.k_pool, at, &norm_rope(&k, eps, kv.k_norm.as_deref(), cs))?;
                    let v = c.bf16(kv.v_raw, src, hd)?;
                    let vn: Vec<u16> = normalize(&v, eps, None).into_iter().map(bf16_bits).collect();
                    c.put_bf16(kv.v_pool, at, &vn)?;
                }
                _ => {
                    c.fill_bf16(kv.k_pool, at, hd, BF16_NAN)?;
                    c.fill_bf16(kv.v_pool, at, hd, BF16_NAN)?;
                }
            }
        }
    }
    Ok(())
}
