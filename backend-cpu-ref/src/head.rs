//! The output head: f32 logits (dot products summed in index order, no
//! rounding), argmax, and the option-letter readout.
use crate::ctx::Ctx;
use crate::embed::in_range;
use switchyard_core::{Error, Result};
use switchyard_kernels::head::{ARGMAX_ROWS, LETTER_LOGITS_FP8, LM_HEAD_LOGITS_BF16, LM_HEAD_LOGITS_FP8, MAX_HEAD_ROWS};

register!(LM_HEAD_LOGITS_FP8 => lm_head_logits_fp8);
register!(LM_HEAD_LOGITS_BF16 => lm_head_logits_bf16);
register!(ARGMAX_ROWS => argmax_rows);
register!(LETTER_LOGITS_FP8 => letter_logits_fp8);

/// `c · tanh(x / c)`; `c = 0` means no cap.
fn softcap(x: f32, c: f32) -> f32 {
    if c == 0.0 {
        x
    } else {
        c * (x / c).tanh()
    }
}

/// `Σₖ a[k] · b[k]` in f32, in index order, unfused.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |s, (&x, &y)| s + x * y)
}

/// Shared by both lm_head variants: `out[i, v] = softcap(scale(v) · h[i] · row(v))`,
/// where `row(v)` decodes table row `v` and `scale(v)` is 1 for bf16.
/// Decodes table row `v` of `hdim` elements: `(values, row scale)`.
type RowFn<'f> = &'f dyn Fn(&Ctx<'_>, usize, usize) -> Result<(Vec<f32>, f32)>;

fn lm_head(c: &mut Ctx<'_>, row: RowFn<'_>) -> Result<()> {
    let (out, h) = (c.buf("out")?, c.buf("h")?);
    let (m, vocab, hdim, cap) = (c.size("m")?, c.size("vocab")?, c.size("hdim")?, c.f32("softcap")?);
    // hdim = 0 makes every table row empty, so nothing would bound the
    // vocab loop (up to 2^31 no-op rows from a raw launch).
    if hdim == 0 {
        return Err(Error::invalid(c.kernel(), "hdim", "hdim must be > 0"));
    }
    if m > MAX_HEAD_ROWS {
        return Err(Error::invalid(c.kernel(), "m", format!("m = {m} must be <= {MAX_HEAD_ROWS} (decode-shaped kernel)")));
    }
    let hs: Vec<Vec<f32>> = (0..m).map(|i| c.bf16(h, i * hdim, hdim)).collect::<Result<_>>()?;
    // Rows of the output are built whole, so the table row is decoded once per v.
    let mut logits = vec![Vec::new(); m];
    for v in 0..vocab {
        let (t, s) = row(c, v, hdim)?;
        for (i, hi) in hs.iter().enumerate() {
            logits[i].push(softcap(s * dot(hi, &t), cap));
        }
    }
    for (i, l) in logits.iter().enumerate() {
        c.put_f32(out, i * vocab, l)?;
    }
    Ok(())
}

fn lm_head_logits_fp8(c: &mut Ctx<'_>) -> Result<()> {
    let (e8, row_scale) = (c.buf("e8")?, c.buf("row_scale")?);
    lm_head(c, &|c, v, hdim| Ok((c.e4m3(e8, v * hdim, hdim)?, c.f32_at(row_scale, v)?)))
}

fn lm_head_logits_bf16(c: &mut Ctx<'_>) -> Result<()> {
    let table = c.buf("table")?;
    lm_head(c, &|c, v, hdim| Ok((c.bf16(table, v * hdim, hdim)?, 1.0)))
}

fn argmax_rows(c: &mut Ctx<'_>) -> Result<()> {
    let (idx, val, logits) = (c.buf("idx")?, c.buf("val")?, c.buf("logits")?);
    let (m, vocab, ex0, ex1) = (c.size("m")?, c.size("vocab")?, c.i32("ex0")?, c.i32("ex1")?);
    for i in 0..m {
        let row = c.f32s(logits, i * vocab, vocab)?;
        let (mut best, mut best_val) = (-1i32, f32::NEG_INFINITY);
        for (v, &x) in row.iter().enumerate() {
            let v = v as i32;
            // Strictly greater keeps the lowest index on ties; NaN compares false and never wins.
            if v == ex0 || v == ex1 || x.is_nan() {
                continue;
            }
            if best < 0 || x > best_val {
                best = v;
                best_val = x;
            }
        }
        c.put_i32(idx, i, &[best])?;
        c.put_f32(val, i, &[best_val])?;
    }
    Ok(())
}

fn letter_logits_fp8(c: &mut Ctx<'_>) -> Result<()> {
    let (out, hidden, e8, row_scale, label_ids) = (c.buf("out")?, c.buf("hidden")?, c.buf("e8")?, c.buf("row_scale")?, c.buf("label_ids")?);
    let (rows, n_labels, hdim, vocab, cap) = (c.size("rows")?, c.size("n_labels")?, c.size("hdim")?, c.size("vocab")?, c.f32("softcap")?);
    // As in lm_head: with hdim = 0 no read bounds the row loop.
    if hdim == 0 {
        return Err(Error::invalid(c.kernel(), "hdim", "hdim must be > 0"));
    }
    let labels = c.i32s(label_ids, 0, n_labels)?;
    // Decode each label's table row once; out-of-range labels give NaN.
    let table: Vec<Option<(Vec<f32>, f32)>> = labels
        .iter()
        .map(|&l| in_range(l, vocab).map(|l| Ok((c.e4m3(e8, l * hdim, hdim)?, c.f32_at(row_scale, l)?))).transpose())
        .collect::<Result<_>>()?;
    for r in 0..rows {
        let x = c.bf16(hidden, r * hdim, hdim)?;
        let o: Vec<f32> = table.iter().map(|t| t.as_ref().map_or(f32::NAN, |(t, s)| softcap(s * dot(&x, t), cap))).collect();
        c.put_f32(out, r * n_labels, &o)?;
    }
    Ok(())
}
