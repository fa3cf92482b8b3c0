//! Paged attention: prefill and split decode.
//!
//! The reference computes the exact two-pass softmax in f32 rather than the
//! online form the GPU kernels use: scores `s_j = scale · Σ_d q[d]·k_j[d]`
//! (d in index order), `m = max_j s_j`, `p_j = e^{s_j − m}`, `l = Σ_j p_j`
//! and `o = Σ_j p_j · v_j` (keys in order), then `o / l`. Prefill and each
//! decode chunk share that one routine, so a single-chunk decode equals the
//! prefill row for the same query bit for bit, and any split agrees within
//! rounding. Decode combines its chunks in chunk order, as the contract of
//! `attention_decode` defines them, with no workspace.
//!
//! Operands are snapshotted once through the checked context (the whole K/V
//! pools as byte slices, the tables as i32s); the loops then index plain
//! slices with every slot validated against `num_slots` first, so nothing in
//! the inner loops can fail or panic.
use crate::ctx::{Buf, Ctx};
use crate::embed::{in_range, BF16_NAN};
use std::ops::Range;
use switchyard_core::codec::{bf16_bits, bf16_value};
use switchyard_core::{Error, Result};
use switchyard_kernels::attn::{decode_splits, ATTENTION_DECODE, ATTENTION_PREFILL};

register!(ATTENTION_PREFILL => attention_prefill);
register!(ATTENTION_DECODE => attention_decode);

/// Product of sizes, or an error naming the buffer whose element count overflowed.
pub(crate) fn count(kernel: &str, name: &str, dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::invalid(kernel, name, format!("element count {dims:?} overflows usize")))
}

/// The shape arguments both attention kernels share, validated.
struct Geometry {
    nh: usize,
    nkv: usize,
    hd: usize,
    page: usize,
    max_pages: usize,
    num_slots: usize,
    window: usize,
    scale: f32,
}

impl Geometry {
    fn read(c: &Ctx<'_>) -> Result<Geometry> {
        let k = c.kernel();
        let g = Geometry {
            nh: c.size("nh")?,
            nkv: c.size("nkv")?,
            hd: c.size("hd")?,
            page: c.size("page")?,
            max_pages: c.size("max_pages")?,
            num_slots: c.size("num_slots")?,
            window: c.size("window")?,
            scale: c.f32("scale")?,
        };
        // These would divide by zero or make the head mapping meaningless; the
        // launcher refuses them too, but a raw launch must not reach the loops.
        if g.nkv == 0 || g.nh == 0 || !g.nh.is_multiple_of(g.nkv) {
            return Err(Error::invalid(k, "nh", format!("nh = {} must be a positive multiple of nkv = {}", g.nh, g.nkv)));
        }
        if g.hd == 0 {
            return Err(Error::invalid(k, "hd", "hd must be > 0"));
        }
        if g.page == 0 {
            return Err(Error::invalid(k, "page", "page must be > 0"));
        }
        Ok(g)
    }

    /// Tokens a block-table row can address.
    fn capacity(&self) -> usize {
        self.max_pages.saturating_mul(self.page)
    }

    /// First key a query at position `p` sees: `p − window + 1` when sliding.
    fn first_key(&self, p: usize) -> usize {
        if self.window > 0 {
            (p + 1).saturating_sub(self.window)
        } else {
            0
        }
    }

    /// Pool slots of keys `keys` of the sequence whose block-table row is
    /// `row` (`max_pages` entries), or `None` when a page entry is negative or
    /// a slot falls outside the pool. The caller has checked
    /// `keys.end <= capacity()`, so the page index stays inside the row.
    fn slots(&self, row: &[i32], keys: Range<usize>) -> Option<Vec<usize>> {
        keys.map(|j| {
            let page = usize::try_from(row[j / self.page]).ok()?;
            page.checked_mul(self.page)?.checked_add(j % self.page).filter(|&s| s < self.num_slots)
        })
        .collect()
    }
}

/// A K or V pool snapshot: `[num_slots, nkv, hd]` bf16 as little-endian bytes.
struct Pool<'a> {
    bytes: &'a [u8],
    nkv: usize,
    hd: usize,
}

impl<'a> Pool<'a> {
    fn snapshot(c: &Ctx<'a>, b: Buf, g: &Geometry, name: &str) -> Result<Pool<'a>> {
        let n = count(c.kernel(), name, &[g.num_slots, g.nkv, g.hd])?;
        Ok(Pool { bytes: c.bytes(b, 0, n, 2)?, nkv: g.nkv, hd: g.hd })
    }

    /// Decodes KV head `kvh` of each slot (all `< num_slots`) into `dst` as
    /// `[slots.len(), hd]` f32.
    fn gather(&self, slots: &[usize], kvh: usize, dst: &mut Vec<f32>) {
        dst.clear();
        for &s in slots {
            let at = ((s * self.nkv + kvh) * self.hd) * 2;
            dst.extend(self.bytes[at..at + 2 * self.hd].chunks_exact(2).map(|b| bf16_value(u16::from_le_bytes([b[0], b[1]]))));
        }
    }
}

/// Maximum that propagates NaN (unlike `f32::max`), so a NaN score or a
/// poisoned split yields a NaN row rather than being skipped; −inf when empty.
fn nan_max(xs: impl Iterator<Item = f32>) -> f32 {
    let mut m = f32::NEG_INFINITY;
    for x in xs {
        if x.is_nan() {
            return x;
        }
        if x > m {
            m = x;
        }
    }
    m
}

/// Unnormalised attention of one query over keys `k` / values `v` (both
/// `[n, hd]`, `n >= 1`): returns `(m, l)` and leaves `Σ_j e^{s_j−m} v_j` in
/// `o`. `scores` is scratch.
fn attend(q: &[f32], k: &[f32], v: &[f32], scale: f32, scores: &mut Vec<f32>, o: &mut [f32]) -> (f32, f32) {
    let hd = q.len();
    scores.clear();
    for kj in k.chunks_exact(hd) {
        let mut dot = 0f32;
        for (a, b) in q.iter().zip(kj) {
            dot += a * b;
        }
        scores.push(scale * dot);
    }
    let m = nan_max(scores.iter().copied());
    o.fill(0.0);
    let mut l = 0f32;
    for (p, vj) in scores.iter_mut().zip(v.chunks_exact(hd)) {
        let e = (*p - m).exp();
        *p = e;
        l += e;
        for (od, &vd) in o.iter_mut().zip(vj) {
            *od += e * vd;
        }
    }
    (m, l)
}

fn attention_prefill(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let g = Geometry::read(c)?;
    let (rows, num_seqs) = (c.size("rows")?, c.size("num_seqs")?);
    let (out, q) = (c.buf("out")?, c.buf("q")?);
    let width = count(kernel, "q", &[g.nh, g.hd])?;
    let qv = c.bf16(q, 0, count(kernel, "q", &[rows, width])?)?;
    let kp = Pool::snapshot(c, c.buf("k_pool")?, &g, "k_pool")?;
    let vp = Pool::snapshot(c, c.buf("v_pool")?, &g, "v_pool")?;
    let table = c.i32s(c.buf("block_table")?, 0, count(kernel, "block_table", &[num_seqs, g.max_pages])?)?;
    let seq_of_row = c.i32s(c.buf("seq_of_row")?, 0, rows)?;
    let pos = c.i32s(c.buf("pos")?, 0, rows)?;
    // Checked before any work so that a short output is an error, not a late surprise.
    c.bytes(out, 0, count(kernel, "out", &[rows, width])?, 2)?;

    let group = g.nh / g.nkv;
    let mut bits = vec![BF16_NAN; rows * width];
    let (mut kbuf, mut vbuf, mut scores) = (Vec::new(), Vec::new(), Vec::new());
    let mut o = vec![0f32; g.hd];
    for r in 0..rows {
        // An invalid sequence, position, page or slot leaves the row NaN.
        let Some(seq) = in_range(seq_of_row[r], num_seqs) else { continue };
        let Some(p) = in_range(pos[r], g.capacity()) else { continue };
        let lo = g.first_key(p);
        let Some(slots) = g.slots(&table[seq * g.max_pages..(seq + 1) * g.max_pages], lo..p + 1) else { continue };
        for kvh in 0..g.nkv {
            kp.gather(&slots, kvh, &mut kbuf);
            vp.gather(&slots, kvh, &mut vbuf);
            for h in kvh * group..(kvh + 1) * group {
                let at = r * width + h * g.hd;
                let (_, l) = attend(&qv[at..at + g.hd], &kbuf, &vbuf, g.scale, &mut scores, &mut o);
                for (dst, &od) in bits[at..at + g.hd].iter_mut().zip(&o) {
                    *dst = bf16_bits(od / l);
                }
            }
        }
    }
    c.put_bf16(out, 0, &bits)
}

fn attention_decode(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let g = Geometry::read(c)?;
    let (batch, max_ctx) = (c.size("batch")?, c.size("max_ctx")?);
    if batch == 0 {
        return Err(Error::invalid(kernel, "batch", "batch must be > 0"));
    }
    let (out, q) = (c.buf("out")?, c.buf("q")?);
    let width = count(kernel, "q", &[g.nh, g.hd])?;
    let qv = c.bf16(q, 0, count(kernel, "q", &[batch, width])?)?;
    let kp = Pool::snapshot(c, c.buf("k_pool")?, &g, "k_pool")?;
    let vp = Pool::snapshot(c, c.buf("v_pool")?, &g, "v_pool")?;
    // Sequence b uses block-table row b; the decode kernel has no num_seqs.
    let table = c.i32s(c.buf("block_table")?, 0, count(kernel, "block_table", &[batch, g.max_pages])?)?;
    let ctx_len = c.i32s(c.buf("ctx_len")?, 0, batch)?;
    c.bytes(out, 0, count(kernel, "out", &[batch, width])?, 2)?;

    let group = g.nh / g.nkv;
    let mut bits = vec![BF16_NAN; batch * width];
    let (mut kbuf, mut vbuf, mut scores) = (Vec::new(), Vec::new(), Vec::new());
    let mut parts: Vec<(f32, f32, Vec<f32>)> = Vec::new();
    let mut num = vec![0f32; g.hd];
    for b in 0..batch {
        // A context past max_ctx or the table, or a bad page or slot among the
        // visible keys, leaves the sequence's rows NaN.
        let Some(n) = usize::try_from(ctx_len[b]).ok().filter(|&n| n >= 1 && n <= max_ctx && n <= g.capacity()) else { continue };
        let lo = g.first_key(n - 1);
        let Some(slots) = g.slots(&table[b * g.max_pages..(b + 1) * g.max_pages], lo..n) else { continue };
        let keys = n - lo;
        let splits = decode_splits(keys, batch, g.nkv);
        let len = keys.div_ceil(splits);
        for kvh in 0..g.nkv {
            kp.gather(&slots, kvh, &mut kbuf);
            vp.gather(&slots, kvh, &mut vbuf);
            for h in kvh * group..(kvh + 1) * group {
                let at = b * width + h * g.hd;
                let qh = &qv[at..at + g.hd];
                // Chunk s covers keys [s·len, min(keys, (s+1)·len)) past lo; one that starts at the end is empty.
                parts.clear();
                for s in 0..splits {
                    let (start, stop) = (s * len, ((s + 1) * len).min(keys));
                    if start >= stop {
                        continue;
                    }
                    let mut o = vec![0f32; g.hd];
                    let (m, l) =
                        attend(qh, &kbuf[start * g.hd..stop * g.hd], &vbuf[start * g.hd..stop * g.hd], g.scale, &mut scores, &mut o);
                    parts.push((m, l, o));
                }
                // A chunk with m = −inf or l = 0 contributes nothing; skipping it keeps
                // e^{−inf − M} from becoming NaN when M itself is −inf.
                let used = |&&(m, l, _): &&(f32, f32, Vec<f32>)| !(m == f32::NEG_INFINITY || l == 0.0);
                // NaN-propagating: a NaN score poisons the row. No used chunk: no softmax, NaN.
                let big_m = nan_max(parts.iter().filter(used).map(|p| p.0));
                if !parts.iter().any(|p| used(&p)) || big_m.is_nan() {
                    continue;
                }
                num.fill(0.0);
                let mut den = 0f32;
                for (m, l, o) in parts.iter().filter(used) {
                    let w = (m - big_m).exp();
                    den += w * l;
                    for (n, &x) in num.iter_mut().zip(o) {
                        *n += w * x;
                    }
                }
                for (dst, &n) in bits[at..at + g.hd].iter_mut().zip(&num) {
                    *dst = bf16_bits(n / den);
                }
            }
        }
    }
    c.put_bf16(out, 0, &bits)
}
