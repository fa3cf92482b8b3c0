//! Embedding gathers. An id outside the table writes a bf16 NaN row rather
//! than reading outside it.
use crate::ctx::Ctx;
use switchyard_core::codec::{bf16_bits, bf16_round};
use switchyard_core::Result;
use switchyard_kernels::embed::{EMBED_GATHER_BF16, EMBED_GATHER_FP8, GATHER_ROWS_BF16};

register!(EMBED_GATHER_FP8 => embed_gather_fp8);
register!(EMBED_GATHER_BF16 => embed_gather_bf16);
register!(GATHER_ROWS_BF16 => gather_rows_bf16);

/// The bf16 NaN every gather writes for an out-of-range id.
pub(crate) const BF16_NAN: u16 = 0x7fc0;

/// `Some(id)` when `0 <= id < n`.
pub(crate) fn in_range(id: i32, n: usize) -> Option<usize> {
    usize::try_from(id).ok().filter(|&i| i < n)
}

fn embed_gather_fp8(c: &mut Ctx<'_>) -> Result<()> {
    let (out, table, row_scale, ids) = (c.buf("out")?, c.buf("table")?, c.buf("row_scale")?, c.buf("ids")?);
    let (h, vocab, scale) = (c.size("h")?, c.size("vocab")?, c.f32("scale")?);
    for r in 0..c.size("rows")? {
        match in_range(c.i32_at(ids, r)?, vocab) {
            Some(id) => {
                let s = c.f32_at(row_scale, id)?;
                let row = c.e4m3(table, id * h, h)?;
                // First rounding: the dequantised table value; second: the scaled store.
                let o: Vec<u16> = row.iter().map(|&v| bf16_bits(bf16_round(v * s) * scale)).collect();
                c.put_bf16(out, r * h, &o)?;
            }
            None => c.fill_bf16(out, r * h, h, BF16_NAN)?,
        }
    }
    Ok(())
}

fn embed_gather_bf16(c: &mut Ctx<'_>) -> Result<()> {
    let (out, table, ids) = (c.buf("out")?, c.buf("table")?, c.buf("ids")?);
    let (h, vocab, scale) = (c.size("h")?, c.size("vocab")?, c.f32("scale")?);
    for r in 0..c.size("rows")? {
        match in_range(c.i32_at(ids, r)?, vocab) {
            Some(id) => {
                let o: Vec<u16> = c.bf16(table, id * h, h)?.iter().map(|&v| bf16_bits(v * scale)).collect();
                c.put_bf16(out, r * h, &o)?;
            }
            None => c.fill_bf16(out, r * h, h, BF16_NAN)?,
        }
    }
    Ok(())
}

fn gather_rows_bf16(c: &mut Ctx<'_>) -> Result<()> {
    let (out, src, idx) = (c.buf("out")?, c.buf("src")?, c.buf("idx")?);
    let (h, n_src) = (c.size("h")?, c.size("n_src")?);
    for r in 0..c.size("rows")? {
        match in_range(c.i32_at(idx, r)?, n_src) {
            Some(s) => {
                let bits = c.bf16_bits(src, s * h, h)?;
                c.put_bf16(out, r * h, &bits)?;
            }
            None => c.fill_bf16(out, r * h, h, BF16_NAN)?,
        }
    }
    Ok(())
}
