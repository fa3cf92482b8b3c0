//! The Gemma 4 MoE expert path: router norm, softmax top-k, gather into
//! expert order, grouped bf16 / NVFP4 expert GEMMs, the gated GELU and the
//! weighted combine. All math in f32 with sums in the contract's order (index
//! order, k order, j order); bf16 rounding only at the documented stores.
//!
//! Operands are snapshotted once through the checked context and the loops
//! run over plain slices; data-dependent indices (pairs, slots, offsets) are
//! validated before they index anything.
use crate::attn::count;
use crate::ctx::Ctx;
use crate::embed::{in_range, BF16_NAN};
use crate::norm::inv_rms;
use switchyard_core::codec::fp8::e4m3_to_f32;
use switchyard_core::codec::nvfp4::{e2m1_to_f32, BLOCK};
use switchyard_core::codec::{bf16_bits, bf16_round};
use switchyard_core::{Error, Result};
use switchyard_kernels::gemm::router_dot;
use switchyard_kernels::moe::expert::{
    GELU_MUL_BF16, MOE_COMBINE_BF16, MOE_GATE_UP_GELU_BF16, MOE_GATHER_BF16, MOE_GROUPED_GEMM_BF16, MOE_GROUPED_W4A16, MOE_ROUTER_TOPK,
    MOE_ROUTE_DECODE, ROUTER_NORM_BF16,
};

register!(ROUTER_NORM_BF16 => router_norm);
register!(MOE_ROUTER_TOPK => router_topk);
register!(MOE_ROUTE_DECODE => route_decode);
register!(MOE_GATHER_BF16 => gather);
register!(MOE_GROUPED_GEMM_BF16 => grouped_bf16);
register!(MOE_GROUPED_W4A16 => grouped_w4a16);
register!(GELU_MUL_BF16 => gelu_mul);
register!(MOE_GATE_UP_GELU_BF16 => gate_up_gelu);
register!(MOE_COMBINE_BF16 => combine);

fn router_norm(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let (out, x, scale) = (c.buf("out")?, c.buf("x")?, c.buf("scale")?);
    let (rows, dim, eps, root) = (c.size("rows")?, c.size("dim")?, c.f32("eps")?, c.f32("root")?);
    let total = count(kernel, "x", &[rows, dim])?;
    let xv = c.bf16(x, 0, total)?;
    let sv = c.bf16(scale, 0, dim)?;
    let mut bits = Vec::with_capacity(total);
    if dim > 0 {
        for xr in xv.chunks_exact(dim) {
            let inv = inv_rms(xr, eps);
            // Left to right as the contract writes it: x · inv · scale · root, one rounding.
            bits.extend(xr.iter().zip(&sv).map(|(&v, &s)| bf16_bits(v * inv * s * root)));
        }
    }
    c.put_bf16(out, 0, &bits)
}

fn router_topk(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let (ids_out, w_out) = (c.buf("topk_ids")?, c.buf("topk_w")?);
    let (logits, pes) = (c.buf("logits")?, c.buf("per_expert_scale")?);
    let (rows, e, k) = (c.size("rows")?, c.size("e")?, c.size("k")?);
    if k > e {
        return Err(Error::invalid(kernel, "k", format!("k = {k} exceeds the {e} experts")));
    }
    let lv = c.bf16(logits, 0, count(kernel, "logits", &[rows, e])?)?;
    let scale = c.f32s(pes, 0, e)?;
    let n = count(kernel, "topk_ids", &[rows, k])?;
    let (mut ids, mut ws) = (Vec::with_capacity(n), Vec::with_capacity(n));
    if e > 0 {
        for lr in lv.chunks_exact(e) {
            topk_row(lr, &scale, k, &mut ids, &mut ws);
        }
    }
    c.put_i32(ids_out, 0, &ids)?;
    c.put_f32(w_out, 0, &ws)
}

/// One row of the top-k contract: softmax in f32 (max-subtracted, exp, sum
/// in index order, divide), the k largest p (lowest index on ties, NaN as
/// `total_cmp` ranks it), weights p / Σ_chosen p (summed in descending
/// order) times the expert's scale; appended to `ids` and `ws`.
fn topk_row(lr: &[f32], scale: &[f32], k: usize, ids: &mut Vec<i32>, ws: &mut Vec<f32>) {
    let e = lr.len();
    let m = lr.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut p = vec![0f32; e];
    let mut sum = 0f32;
    for (pi, &x) in p.iter_mut().zip(lr) {
        *pi = (x - m).exp();
        sum += *pi;
    }
    for pi in p.iter_mut() {
        *pi /= sum;
    }
    // Descending probability, lowest index first on ties. total_cmp keeps the
    // order total (and the sort panic-free) even if a NaN logit slips in.
    let mut order: Vec<usize> = (0..e).collect();
    order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
    let chosen = &order[..k];
    // Renormalise by the chosen probabilities summed in descending order.
    let norm = chosen.iter().fold(0f32, |s, &i| s + p[i]);
    for &i in chosen {
        ids.push(i as i32);
        ws.push(p[i] / norm * scale[i]);
    }
}

/// The fused decode routing, as its contract composes it: router norm
/// (bf16 rn), the router GEMM in the router order (bf16 logits), the top-k of
/// each row, then counts, exclusive offsets and slots in increasing pair
/// order (every id is a valid expert, so every slot is filled).
fn route_decode(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let (rows, dim, e, k) = (c.size("rows")?, c.size("dim")?, c.size("e")?, c.size("k")?);
    let (eps, root) = (c.f32("eps")?, c.f32("root")?);
    if k == 0 || k > e {
        return Err(Error::invalid(kernel, "k", format!("k = {k} must be in 1..={e}")));
    }
    let xv = c.bf16(c.buf("x")?, 0, count(kernel, "x", &[rows, dim])?)?;
    let sv = c.bf16(c.buf("scale")?, 0, dim)?;
    let wv = c.bf16(c.buf("router_w")?, 0, count(kernel, "router_w", &[e, dim])?)?;
    let pes = c.f32s(c.buf("per_expert_scale")?, 0, e)?;
    let n = count(kernel, "topk_ids", &[rows, k])?;
    // Range-check the outputs before building their images: rows and e from a
    // raw launch are each bounded by an input, their product by nothing.
    let n_logits = count(kernel, "logits", &[rows, e])?;
    c.bytes(c.buf("logits")?, 0, n_logits, 2)?;
    c.bytes(c.buf("topk_ids")?, 0, n, 4)?;
    let (mut logit_bits, mut ids, mut ws) = (Vec::with_capacity(n_logits), Vec::with_capacity(n), Vec::with_capacity(n));
    if dim > 0 {
        for xr in xv.chunks_exact(dim) {
            let inv = inv_rms(xr, eps);
            let rn: Vec<f32> = xr.iter().zip(&sv).map(|(&v, &s)| bf16_round(v * inv * s * root)).collect();
            let mut lr = Vec::with_capacity(e);
            for wr in wv.chunks_exact(dim) {
                let bits = bf16_bits(router_dot(&rn, wr));
                logit_bits.push(bits);
                lr.push(switchyard_core::codec::bf16_value(bits));
            }
            topk_row(&lr, &pes, k, &mut ids, &mut ws);
        }
    }
    let mut off = vec![0i32; e + 1];
    for &x in &ids {
        off[x as usize + 1] += 1;
    }
    for x in 0..e {
        off[x + 1] += off[x];
    }
    let mut cursor = off.clone();
    let (mut pos, mut sop) = (vec![-1i32; n], vec![-1i32; n]);
    for (p, &x) in ids.iter().enumerate() {
        let slot = cursor[x as usize];
        cursor[x as usize] += 1;
        pos[slot as usize] = p as i32;
        sop[p] = slot;
    }
    let (ids_out, w_out, off_out) = (c.buf("topk_ids")?, c.buf("topk_w")?, c.buf("offsets")?);
    let (pos_out, sop_out, logits_out) = (c.buf("pair_of_slot")?, c.buf("slot_of_pair")?, c.buf("logits")?);
    c.put_bf16(logits_out, 0, &logit_bits)?;
    c.put_i32(ids_out, 0, &ids)?;
    c.put_f32(w_out, 0, &ws)?;
    c.put_i32(off_out, 0, &off)?;
    c.put_i32(pos_out, 0, &pos)?;
    c.put_i32(sop_out, 0, &sop)
}

fn gather(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let (out, x, pos) = (c.buf("out")?, c.buf("x")?, c.buf("pair_of_slot")?);
    let (n, k, h, rows) = (c.size("n")?, c.size("k")?, c.size("h")?, c.size("rows")?);
    if k == 0 {
        return Err(Error::invalid(kernel, "k", "k must be > 0 (pairs are mapped to tokens by pair / k)"));
    }
    let pairs = c.i32s(pos, 0, n)?;
    let xb = c.bf16_bits(x, 0, count(kernel, "x", &[rows, h])?)?;
    // Range-check the output before reserving its image: n · h from a raw
    // launch can be gigabytes (an OOM found by the launch_validator fuzzer).
    let out_elems = count(kernel, "out", &[n, h])?;
    c.bytes(out, 0, out_elems, 2)?;
    let bits = gathered(&pairs, k, h, rows, |t| &xb[t * h..(t + 1) * h], out_elems);
    c.put_bf16(out, 0, &bits)
}

/// The gather's slot rows (bf16 bits, `h` a slot): token `pair / k`'s row
/// (`row(t)`), a zero row for pair −1; any other negative pair has a
/// negative token under floor division, so like a token >= rows it gives a
/// NaN row. `k` > 0.
pub(crate) fn gathered<'a>(pairs: &[i32], k: usize, h: usize, rows: usize, row: impl Fn(usize) -> &'a [u16], capacity: usize) -> Vec<u16> {
    let mut bits = Vec::with_capacity(capacity);
    for &pair in pairs {
        match pair {
            -1 => bits.extend(std::iter::repeat_n(0u16, h)),
            _ => match usize::try_from(pair).ok().map(|p| p / k).filter(|&t| t < rows) {
                Some(t) => bits.extend_from_slice(row(t)),
                None => bits.extend(std::iter::repeat_n(BF16_NAN, h)),
            },
        }
    }
    bits
}

/// Reads and validates `offsets[0..=e]`: non-negative and non-decreasing
/// (segments cannot overlap or run backwards). Rows outside every segment,
/// including those at or past `offsets[e]`, come out zero.
fn offsets(c: &Ctx<'_>, e: usize) -> Result<Vec<usize>> {
    let raw = c.i32s(c.buf("offsets")?, 0, e + 1)?;
    let mut v = Vec::with_capacity(e + 1);
    for (x, &o) in raw.iter().enumerate() {
        let o = usize::try_from(o).map_err(|_| Error::invalid(c.kernel(), "offsets", format!("offsets[{x}] = {o} is negative")))?;
        if v.last().is_some_and(|&prev| o < prev) {
            return Err(Error::invalid(c.kernel(), "offsets", format!("offsets[{x}] = {o} < offsets[{}]: not a prefix sum", x - 1)));
        }
        v.push(o);
    }
    Ok(v)
}

/// Shared grouped-GEMM driver: for each expert with a non-empty segment,
/// `weights(x, panel)` fills `panel` with expert x's weights as f32 `[N, K]`
/// (row n contiguous in k, so the dot product walks both operands in order),
/// and each segment row gets `bf16(post(x) · Σ_k a[s,k]·w[n,k])`, summed from
/// +0 strictly in k order.
fn grouped(
    c: &mut Ctx<'_>,
    weights: impl FnMut(usize, &mut [f32]),
    post: impl Fn(usize) -> f32,
    sizes: (usize, usize, usize, usize),
) -> Result<()> {
    let kernel = c.kernel();
    let (n, _, big_n, _) = sizes;
    let out = c.buf("out")?;
    // Range-check the output before allocating its image (found by the
    // launch_validator fuzzer: n · big_n from a raw launch is unbounded).
    let out_elems = count(kernel, "out", &[n, big_n])?;
    c.bytes(out, 0, out_elems, 2)?;
    let bits = grouped_bits(c, weights, post, sizes)?;
    c.put_bf16(out, 0, &bits)
}

/// The bf16 outputs `[n, big_n]` of [`grouped`], for a caller that has
/// checked that their image is bounded.
fn grouped_bits(
    c: &Ctx<'_>,
    mut weights: impl FnMut(usize, &mut [f32]),
    post: impl Fn(usize) -> f32,
    sizes: (usize, usize, usize, usize),
) -> Result<Vec<u16>> {
    let kernel = c.kernel();
    let (n, e, big_n, big_k) = sizes;
    let off = offsets(c, e)?;
    let av = c.bf16(c.buf("a")?, 0, count(kernel, "a", &[n, big_k])?)?;
    // Size the weight panel only when there is an expert: with e = 0 the
    // callers' weight checks bound nothing, and big_n · big_k from a raw
    // launch could ask for terabytes (found by the launch_validator fuzzer).
    let mut bits = vec![0u16; count(kernel, "out", &[n, big_n])?];
    let mut panel = vec![0f32; if e == 0 { 0 } else { count(kernel, "w", &[big_n, big_k])? }];
    for x in 0..e {
        // Segments are clamped to the n rows that exist.
        let seg = off[x].min(n)..off[x + 1].min(n);
        if seg.is_empty() {
            continue;
        }
        weights(x, &mut panel);
        let s2 = post(x);
        for s in seg {
            let ar = &av[s * big_k..(s + 1) * big_k];
            for (dst, wr) in bits[s * big_n..(s + 1) * big_n].iter_mut().zip(panel.chunks_exact(big_k.max(1))) {
                let mut acc = 0f32;
                for (&a, &w) in ar.iter().zip(wr) {
                    acc += a * w;
                }
                *dst = bf16_bits(s2 * acc);
            }
        }
    }
    Ok(bits)
}

fn grouped_sizes(c: &Ctx<'_>) -> Result<(usize, usize, usize, usize)> {
    Ok((c.size("n")?, c.size("e")?, c.size("big_n")?, c.size("big_k")?))
}

fn grouped_bf16(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let sizes @ (_, e, big_n, big_k) = grouped_sizes(c)?;
    // Raw bytes, decoded one expert at a time: only experts that own rows cost anything.
    let w = c.bytes(c.buf("w")?, 0, count(kernel, "w", &[e, big_n, big_k])?, 2)?;
    let per = big_n * big_k;
    let fill = |x: usize, panel: &mut [f32]| {
        for (dst, b) in panel.iter_mut().zip(w[x * per * 2..(x + 1) * per * 2].chunks_exact(2)) {
            *dst = switchyard_core::codec::bf16_value(u16::from_le_bytes([b[0], b[1]]));
        }
    };
    // A unit multiplier is exact, so the store is bf16(acc) as the contract says.
    grouped(c, fill, |_| 1.0, sizes)
}

fn grouped_w4a16(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let sizes @ (_, e, big_n, big_k) = grouped_sizes(c)?;
    if !big_k.is_multiple_of(BLOCK) {
        return Err(Error::invalid(kernel, "big_k", format!("K = {big_k} is not a multiple of the NVFP4 scale block ({BLOCK})")));
    }
    let wq = c.bytes(c.buf("wq")?, 0, count(kernel, "wq", &[e, big_k / 2, big_n])?, 1)?;
    let ws = c.bytes(c.buf("ws")?, 0, count(kernel, "ws", &[e, big_k / BLOCK, big_n])?, 1)?;
    let scale2 = c.f32s(c.buf("scale2")?, 0, e)?;
    let e2m1: [f32; 16] = std::array::from_fn(|i| e2m1_to_f32(i as u8));
    let e4m3: [f32; 256] = std::array::from_fn(|i| e4m3_to_f32(i as u8));
    let (q_per, s_per) = (big_k / 2 * big_n, big_k / BLOCK * big_n);
    // K-major expert x: code of (n, k) at wq[x][k/2][n] (low nibble = even k),
    // scale at ws[x][k/16][n]; w = e2m1 · e4m3 in f32 (exact), transposed to [N, K].
    let fill = |x: usize, panel: &mut [f32]| {
        let (q, s) = (&wq[x * q_per..(x + 1) * q_per], &ws[x * s_per..(x + 1) * s_per]);
        for kk in 0..big_k {
            let shift = 4 * (kk % 2);
            let (qr, sr) = (&q[(kk / 2) * big_n..(kk / 2 + 1) * big_n], &s[(kk / BLOCK) * big_n..(kk / BLOCK + 1) * big_n]);
            for (nn, (&code, &sc)) in qr.iter().zip(sr).enumerate() {
                panel[nn * big_k + kk] = e2m1[((code >> shift) & 0xf) as usize] * e4m3[sc as usize];
            }
        }
    };
    grouped(c, fill, |x| scale2[x], sizes)
}

/// `gelu_tanh(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` in f32, as HF's
/// `gelu_pytorch_tanh`.
pub(crate) fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh())
}

fn gelu_mul(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let (out, gu) = (c.buf("out")?, c.buf("gu")?);
    let (rows, inter) = (c.size("rows")?, c.size("inter")?);
    let gv = c.bf16(gu, 0, count(kernel, "gu", &[rows, 2, inter])?)?;
    let mut bits = Vec::with_capacity(rows * inter);
    if inter > 0 {
        for r in gv.chunks_exact(2 * inter) {
            let (gate, up) = r.split_at(inter);
            // Two roundings: the activation is stored as bf16 before the multiply.
            bits.extend(gate.iter().zip(up).map(|(&g, &u)| bf16_bits(bf16_round(gelu_tanh(g)) * u)));
        }
    }
    c.put_bf16(out, 0, &bits)
}

/// [`grouped_bf16`]'s sums over the 2·inter gate and up rows, stored as
/// bf16, then [`gelu_mul`]'s activation of each (gate, up) pair.
fn gate_up_gelu(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let (n, e, inter, big_k) = (c.size("n")?, c.size("e")?, c.size("inter")?, c.size("big_k")?);
    let big_n = count(kernel, "w", &[2, inter])?;
    let out = c.buf("out")?;
    let out_elems = count(kernel, "out", &[n, inter])?;
    c.bytes(out, 0, out_elems, 2)?;
    let w = c.bytes(c.buf("w")?, 0, count(kernel, "w", &[e, big_n, big_k])?, 2)?;
    let per = big_n * big_k;
    let fill = |x: usize, panel: &mut [f32]| {
        for (dst, b) in panel.iter_mut().zip(w[x * per * 2..(x + 1) * per * 2].chunks_exact(2)) {
            *dst = switchyard_core::codec::bf16_value(u16::from_le_bytes([b[0], b[1]]));
        }
    };
    let gu = grouped_bits(c, fill, |_| 1.0, (n, e, big_n, big_k))?;
    let mut bits = Vec::with_capacity(out_elems);
    if inter > 0 {
        for r in gu.chunks_exact(big_n) {
            let (gate, up) = r.split_at(inter);
            bits.extend(gate.iter().zip(up).map(|(&g, &u)| {
                let (g, u) = (switchyard_core::codec::bf16_value(g), switchyard_core::codec::bf16_value(u));
                bf16_bits(bf16_round(gelu_tanh(g)) * u)
            }));
        }
    }
    c.put_bf16(out, 0, &bits)
}

fn combine(c: &mut Ctx<'_>) -> Result<()> {
    let (out, rows, h) = (c.buf("out")?, c.size("rows")?, c.size("h")?);
    let operands = CombineOperands::read(c)?;
    // As in gather: the output's range first, then its image (fuzzer OOM).
    let out_elems = count(c.kernel(), "out", &[rows, h])?;
    c.bytes(out, 0, out_elems, 2)?;
    let mut bits = Vec::with_capacity(out_elems);
    let mut acc = vec![0f32; h];
    for t in 0..rows {
        if operands.row(t, &mut acc) {
            bits.extend(acc.iter().map(|&a| bf16_bits(a)));
        } else {
            bits.extend(std::iter::repeat_n(BF16_NAN, h));
        }
    }
    c.put_bf16(out, 0, &bits)
}

/// The operands of a weighted combine (`y`, `slot_of_pair`, `topk_w` and the
/// sizes `rows`, `k`, `h`, `n`), read once through the checked context.
pub(crate) struct CombineOperands {
    slots: Vec<i32>,
    w: Vec<f32>,
    y: Vec<f32>,
    k: usize,
    h: usize,
    n: usize,
}

impl CombineOperands {
    pub(crate) fn read(c: &mut Ctx<'_>) -> Result<Self> {
        let kernel = c.kernel();
        let (y, sop, tw) = (c.buf("y")?, c.buf("slot_of_pair")?, c.buf("topk_w")?);
        let (rows, k, h, n) = (c.size("rows")?, c.size("k")?, c.size("h")?, c.size("n")?);
        let pairs = count(kernel, "slot_of_pair", &[rows, k])?;
        let slots = c.i32s(sop, 0, pairs)?;
        let w = c.f32s(tw, 0, pairs)?;
        let y = c.bf16(y, 0, count(kernel, "y", &[n, h])?)?;
        Ok(CombineOperands { slots, w, y, k, h, n })
    }

    /// Row `t`'s `Σ_j topk_w · y[slot]` in j order, in f32 (not yet rounded),
    /// into `acc` (`h` long); false where a slot other than −1 is outside
    /// `[0, n)`, which poisons the row.
    pub(crate) fn row(&self, t: usize, acc: &mut [f32]) -> bool {
        let h = self.h;
        acc.fill(0.0);
        for p in t * self.k..(t + 1) * self.k {
            match self.slots[p] {
                -1 => continue,
                s => match in_range(s, self.n) {
                    Some(s) => {
                        for (a, &v) in acc.iter_mut().zip(&self.y[s * h..(s + 1) * h]) {
                            *a += self.w[p] * v;
                        }
                    }
                    None => return false,
                },
            }
        }
        true
    }
}
