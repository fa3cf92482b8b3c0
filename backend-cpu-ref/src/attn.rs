//! Paged attention: prefill, split decode and its reduce.
//!
//! The reference computes the exact two-pass softmax in f32 rather than the
//! online form the GPU kernels use: scores `s_j = scale · Σ_d q[d]·k_j[d]`
//! (d in index order), `m = max_j s_j`, `p_j = e^{s_j − m}`, `l = Σ_j p_j`
//! and `o = Σ_j p_j · v_j` (keys in order), then `o / l`. Prefill and the
//! decode partial share that one routine, so a single-split decode equals the
//! prefill row for the same query bit for bit, and any split agrees within
//! rounding.
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
use switchyard_kernels::attn::{ATTENTION_DECODE_PARTIAL, ATTENTION_DECODE_REDUCE, ATTENTION_PREFILL};

register!(ATTENTION_PREFILL => attention_prefill);
register!(ATTENTION_DECODE_PARTIAL => attention_decode_partial);
register!(ATTENTION_DECODE_REDUCE => attention_decode_reduce);

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

fn attention_decode_partial(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let g = Geometry::read(c)?;
    let (batch, splits, split_len) = (c.size("batch")?, c.size("splits")?, c.size("split_len")?);
    if split_len == 0 {
        return Err(Error::invalid(kernel, "split_len", "split_len must be > 0"));
    }
    let (o_ws, ml_ws, q) = (c.buf("o_ws")?, c.buf("ml_ws")?, c.buf("q")?);
    let width = count(kernel, "q", &[g.nh, g.hd])?;
    let qv = c.bf16(q, 0, count(kernel, "q", &[batch, width])?)?;
    let kp = Pool::snapshot(c, c.buf("k_pool")?, &g, "k_pool")?;
    let vp = Pool::snapshot(c, c.buf("v_pool")?, &g, "v_pool")?;
    // Sequence b uses block-table row b; the decode kernel has no num_seqs.
    let table = c.i32s(c.buf("block_table")?, 0, count(kernel, "block_table", &[batch, g.max_pages])?)?;
    let ctx_len = c.i32s(c.buf("ctx_len")?, 0, batch)?;
    let n_o = count(kernel, "o_ws", &[batch, g.nh, splits, g.hd])?;
    let n_ml = count(kernel, "ml_ws", &[batch, g.nh, splits, 2])?;
    c.bytes(o_ws, 0, n_o, 4)?;
    c.bytes(ml_ws, 0, n_ml, 4)?;

    let group = g.nh / g.nkv;
    // Defaults are the empty-split values; an invalid sequence overwrites its
    // entries with NaN so the reduce turns them into a NaN row.
    let mut o_all = vec![0f32; n_o];
    let mut ml_all: Vec<f32> = [f32::NEG_INFINITY, 0.0].repeat(n_ml / 2);
    let (mut kbuf, mut vbuf, mut scores) = (Vec::new(), Vec::new(), Vec::new());
    for b in 0..batch {
        let head_base = b * g.nh * splits;
        let slots = match usize::try_from(ctx_len[b]).ok().filter(|&n| n >= 1 && n <= g.capacity()) {
            Some(n) => {
                let lo = g.first_key(n - 1);
                g.slots(&table[b * g.max_pages..(b + 1) * g.max_pages], lo..n).map(|s| (lo, n, s))
            }
            None => None,
        };
        let Some((lo, end, slots)) = slots else {
            o_all[head_base * g.hd..(head_base + g.nh * splits) * g.hd].fill(f32::NAN);
            ml_all[head_base * 2..(head_base + g.nh * splits) * 2].fill(f32::NAN);
            continue;
        };
        for kvh in 0..g.nkv {
            kp.gather(&slots, kvh, &mut kbuf);
            vp.gather(&slots, kvh, &mut vbuf);
            for h in kvh * group..(kvh + 1) * group {
                let qh = &qv[b * width + h * g.hd..b * width + (h + 1) * g.hd];
                for s in 0..splits {
                    // Split s covers keys [lo + s·len, min(end, lo + (s+1)·len)); saturating so
                    // huge raw split counts cannot overflow, they just come out empty.
                    let start = lo.saturating_add(s.saturating_mul(split_len)).min(end);
                    let stop = lo.saturating_add((s + 1).saturating_mul(split_len)).min(end);
                    if start >= stop {
                        continue;
                    }
                    let (a, z) = ((start - lo) * g.hd, (stop - lo) * g.hd);
                    let e = (b * g.nh + h) * splits + s;
                    let o = &mut o_all[e * g.hd..(e + 1) * g.hd];
                    let (m, l) = attend(qh, &kbuf[a..z], &vbuf[a..z], g.scale, &mut scores, o);
                    ml_all[2 * e] = m;
                    ml_all[2 * e + 1] = l;
                }
            }
        }
    }
    c.put_f32(o_ws, 0, &o_all)?;
    c.put_f32(ml_ws, 0, &ml_all)
}

fn attention_decode_reduce(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let (batch, nh, hd, splits) = (c.size("batch")?, c.size("nh")?, c.size("hd")?, c.size("splits")?);
    let (out, o_ws, ml_ws) = (c.buf("out")?, c.buf("o_ws")?, c.buf("ml_ws")?);
    let heads = count(kernel, "out", &[batch, nh])?;
    // An empty output bounds nothing below: hd = 0 let `heads` (up to 2^62)
    // spin, and heads = 0 let `hd` size a scratch row of gigabytes (fuzzer
    // findings). The launcher requires both positive; so does the reference.
    if heads == 0 || hd == 0 {
        return Err(Error::invalid(kernel, "hd", format!("batch·nh = {heads}, hd = {hd}: the output must be non-empty")));
    }
    let o = c.f32s(o_ws, 0, count(kernel, "o_ws", &[heads, splits, hd])?)?;
    let ml = c.f32s(ml_ws, 0, count(kernel, "ml_ws", &[heads, splits, 2])?)?;
    // The output's range first: with splits = 0 the workspace reads above
    // bound nothing, and heads · hd could ask for terabytes (fuzzer finding).
    let out_elems = count(kernel, "out", &[heads, hd])?;
    c.bytes(out, 0, out_elems, 2)?;
    let mut bits = vec![BF16_NAN; out_elems];
    let mut num = vec![0f32; hd];
    for bh in 0..heads {
        let split = |s: usize| (ml[(bh * splits + s) * 2], ml[(bh * splits + s) * 2 + 1]);
        // An empty split (m = −inf or l = 0) contributes nothing; skipping it keeps
        // e^{−inf − M} from becoming NaN when M itself is −inf.
        let used = |(m, l): (f32, f32)| !(m == f32::NEG_INFINITY || l == 0.0);
        if !(0..splits).any(|s| used(split(s))) {
            // Every split empty: there is no softmax to take; NaN, never a silent 0/0 or 0.
            continue;
        }
        // NaN-propagating, so a poisoned split (invalid sequence) poisons the row.
        let big_m = nan_max((0..splits).map(split).filter(|&x| used(x)).map(|(m, _)| m));
        num.fill(0.0);
        let mut den = 0f32;
        for s in 0..splits {
            let (m, l) = split(s);
            if !used((m, l)) {
                continue;
            }
            let w = (m - big_m).exp();
            den += w * l;
            let os = &o[(bh * splits + s) * hd..(bh * splits + s + 1) * hd];
            for (n, &x) in num.iter_mut().zip(os) {
                *n += w * x;
            }
        }
        for (dst, &n) in bits[bh * hd..(bh + 1) * hd].iter_mut().zip(&num) {
            *dst = bf16_bits(n / den);
        }
    }
    c.put_bf16(out, 0, &bits)
}
