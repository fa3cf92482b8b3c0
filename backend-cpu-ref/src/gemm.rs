//! The dense GEMM family: `C[M, N] = A[M, K] · B[N, K]ᵀ`, bf16 operands,
//! f32 accumulation, bf16 output rounded to nearest even.
//!
//! Every variant here but the router accumulates in the one scalar order the
//! contract of `dense_gemm_bf16` fixes: `acc = 0; for k in 0..K { acc = acc +
//! a·b }`, the product and the sum each rounded to f32 (Rust never contracts
//! `+=` of a product into an FMA). The tensor-core and pipelined contracts
//! leave the K order free; the reference picks this same order so that
//! `dense_gemm_tc_scaled_acc` equals `dense_gemm_tc` + `scaled_add_bf16` bit
//! for bit. The router sums in its own fixed order
//! (`switchyard_kernels::gemm::router_dot`).
//!
//! Speed matters because the model runs on this backend at a few thousand
//! per side: operands are range-checked once through the context, bf16 is
//! decoded to f32 once, and the product loops over plain slices in panels of
//! [`NT`] output columns × [`MR`] rows. Within a panel each output element
//! still sums strictly in k order; the panel only lets the compiler run
//! [`NT`] independent accumulators side by side (vectorised across n, never
//! across k), which changes no result.
use crate::ctx::{Buf, Ctx};
use std::ops::Range;
use switchyard_core::codec::{bf16_bits, bf16_round, bf16_value};
use switchyard_core::{Error, Result};
use switchyard_kernels::gemm::{
    router_dot, DENSE_GEMM_BF16, DENSE_GEMM_BF16_PIPELINED, DENSE_GEMM_ROUTER, DENSE_GEMM_SPLITK_BF16, DENSE_GEMM_TC,
    DENSE_GEMM_TC_SCALED_ACC, SCALED_ADD_BF16, SPLITK_MAX_SPLITS,
};

register!(DENSE_GEMM_BF16 => dense_gemm);
register!(DENSE_GEMM_ROUTER => dense_gemm_router);
register!(DENSE_GEMM_TC => dense_gemm);
register!(DENSE_GEMM_BF16_PIPELINED => dense_gemm);
register!(DENSE_GEMM_TC_SCALED_ACC => dense_gemm_tc_scaled_acc);
register!(SCALED_ADD_BF16 => scaled_add);
register!(DENSE_GEMM_SPLITK_BF16 => dense_gemm_splitk);

/// Output columns per panel: one f32 accumulator row of this width per
/// output row stays in registers / L1 while K streams past.
pub(crate) const NT: usize = 64;
/// Output rows that share each panel load.
const MR: usize = 4;

/// `a · b` as a size, or an error naming the kernel and argument when it
/// does not fit in usize (only reachable on 32-bit hosts with u32 shapes).
pub(crate) fn elems(kernel: &str, arg: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or_else(|| Error::invalid(kernel, arg, format!("{a} × {b} elements overflow the address space")))
}

/// The `[M, N]` f32 sums `Σ_{k ∈ range} a[m, k] · w(n, k)`, one `[M, N]`
/// block per entry of `ranges`, each element summed from +0 strictly in
/// increasing k.
///
/// `a` is row-major `[m, k]` (already f32). `fill(n0, nt, panel)` writes the
/// weight panel for columns `n0..n0+nt` as `panel[kk · NT + j] = w(n0 + j, kk)`
/// for every `kk < k`; columns `j >= nt` are left at zero (their sums are
/// computed and discarded, which keeps the inner loop a fixed width).
pub(crate) fn product(
    a: &[f32],
    m: usize,
    n: usize,
    k: usize,
    ranges: &[Range<usize>],
    mut fill: impl FnMut(usize, usize, &mut [f32]),
) -> Vec<f32> {
    let mut out = vec![0f32; ranges.len() * m * n];
    let mut panel = vec![0f32; k * NT];
    for n0 in (0..n).step_by(NT) {
        let nt = NT.min(n - n0);
        if nt < NT {
            // The last panel is narrower: clear the stale columns so they hold zeros, not a previous panel.
            panel.fill(0.0);
        }
        fill(n0, nt, &mut panel);
        for (s, ks) in ranges.iter().enumerate() {
            let block = &mut out[s * m * n..(s + 1) * m * n];
            for m0 in (0..m).step_by(MR) {
                let mr = MR.min(m - m0);
                let mut acc = [[0f32; NT]; MR];
                for kk in ks.clone() {
                    let w = &panel[kk * NT..(kk + 1) * NT];
                    for (r, acc_r) in acc.iter_mut().enumerate().take(mr) {
                        let av = a[(m0 + r) * k + kk];
                        for (x, &wj) in acc_r.iter_mut().zip(w) {
                            // Product rounded to f32, then the sum rounded to f32: no FMA.
                            *x += av * wj;
                        }
                    }
                }
                for (r, acc_r) in acc.iter().enumerate().take(mr) {
                    let row = (m0 + r) * n + n0;
                    block[row..row + nt].copy_from_slice(&acc_r[..nt]);
                }
            }
        }
    }
    out
}

/// M, N, K of a GEMM launch, read from the scalar arguments.
///
/// M and N must be > 0 (as the launchers require): with an empty output no
/// range check bounds the other dimension, and a raw launch with m = 0,
/// k = 0 and n = 2^32 walked 2^26 empty panels (a fuzzer timeout).
pub(crate) fn mnk(c: &Ctx<'_>) -> Result<(usize, usize, usize)> {
    let (m, n, k) = (c.u32_size("m")?, c.u32_size("n")?, c.u32_size("k")?);
    if m == 0 || n == 0 {
        return Err(Error::invalid(c.kernel(), if m == 0 { "m" } else { "n" }, format!("m = {m}, n = {n}: the output must be non-empty")));
    }
    Ok((m, n, k))
}

/// The dense GEMM's f32 sums over `ranges` of K, after checking every operand's
/// range (including the output's, so a short `c` fails before any work).
fn dense_sums(c: &Ctx<'_>, out: Buf, out_elems: usize, out_width: usize, ranges: &[Range<usize>]) -> Result<Vec<f32>> {
    let kernel = c.kernel();
    let (m, n, k) = mnk(c)?;
    let (a, b) = (c.buf("a")?, c.buf("b")?);
    let a = c.bf16(a, 0, elems(kernel, "a", m, k)?)?;
    let b = c.bytes(b, 0, elems(kernel, "b", n, k)?, 2)?;
    c.bytes(out, 0, out_elems, out_width)?;
    Ok(product(&a, m, n, k, ranges, |n0, nt, panel| {
        // Transpose B's rows n0..n0+nt into the K-major panel, decoding each bf16 once.
        for j in 0..nt {
            let row = &b[(n0 + j) * k * 2..(n0 + j + 1) * k * 2];
            for (kk, v) in row.chunks_exact(2).enumerate() {
                panel[kk * NT + j] = bf16_value(u16::from_le_bytes([v[0], v[1]]));
            }
        }
    }))
}

/// `c = bf16(router_dot(a[m, ..], b[n, ..]))`: the router order.
fn dense_gemm_router(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let (m, n, k) = mnk(c)?;
    let out = c.buf("c")?;
    let mn = elems(kernel, "c", m, n)?;
    let a = c.bf16(c.buf("a")?, 0, elems(kernel, "a", m, k)?)?;
    let b = c.bf16(c.buf("b")?, 0, elems(kernel, "b", n, k)?)?;
    c.bytes(out, 0, mn, 2)?;
    let mut bits = Vec::with_capacity(mn);
    if k == 0 {
        bits.resize(mn, bf16_bits(0.0));
    } else {
        for ar in a.chunks_exact(k) {
            bits.extend(b.chunks_exact(k).map(|br| bf16_bits(router_dot(ar, br))));
        }
    }
    c.put_bf16(out, 0, &bits)
}

/// dense_gemm_bf16, dense_gemm_tc, dense_gemm_bf16_pipelined: one contract
/// on the reference, `c = bf16(acc)` with acc in strict k order.
fn dense_gemm(c: &mut Ctx<'_>) -> Result<()> {
    let (m, n, k) = mnk(c)?;
    let out = c.buf("c")?;
    let mn = elems(c.kernel(), "c", m, n)?;
    let acc = dense_sums(c, out, mn, 2, std::slice::from_ref(&(0..k)))?;
    let bits: Vec<u16> = acc.iter().map(|&x| bf16_bits(x)).collect();
    c.put_bf16(out, 0, &bits)
}

/// `c = bf16(c + scale · bf16(acc))`: `t = bf16(acc)`, `u = scale · t`, then
/// the sum, each rounded to f32. Shared by the fused GEMM epilogue and the
/// unfused `scaled_add_bf16`, so the two agree by construction.
fn scaled_add_one(c: f32, t: f32, scale: f32) -> u16 {
    let u = scale * t;
    bf16_bits(c + u)
}

fn dense_gemm_tc_scaled_acc(c: &mut Ctx<'_>) -> Result<()> {
    let (m, n, k) = mnk(c)?;
    let scale = c.f32("scale")?;
    let out = c.buf("c")?;
    let mn = elems(c.kernel(), "c", m, n)?;
    let acc = dense_sums(c, out, mn, 2, std::slice::from_ref(&(0..k)))?;
    let prev = c.bf16(out, 0, mn)?;
    let bits: Vec<u16> = prev.iter().zip(&acc).map(|(&p, &s)| scaled_add_one(p, bf16_round(s), scale)).collect();
    c.put_bf16(out, 0, &bits)
}

fn scaled_add(c: &mut Ctx<'_>) -> Result<()> {
    let n = c.u32_size("n")?;
    let scale = c.f32("scale")?;
    let (out, x) = (c.buf("out")?, c.buf("x")?);
    let prev = c.bf16(out, 0, n)?;
    let x = c.bf16(x, 0, n)?;
    let bits: Vec<u16> = prev.iter().zip(&x).map(|(&p, &x)| scaled_add_one(p, x, scale)).collect();
    c.put_bf16(out, 0, &bits)
}

/// The K range of split `s`: `[s·⌈K/splits⌉, min(K, (s+1)·⌈K/splits⌉))`,
/// empty when the chunk starts past K (its partial sums are then 0).
fn chunk(k: usize, splits: usize, s: usize) -> Range<usize> {
    let len = k.div_ceil(splits);
    let lo = (s * len).min(k);
    lo..((s + 1) * len).min(k)
}

/// The GPU plans' two passes in one: the partial sums of every chunk (each
/// from +0 in strict k order), then their sum from +0 in s order, rounded
/// once. The partials take `splits · M · N` f32 here as in the GPU
/// workspace, so `splits` is bounded before they are allocated (an
/// unbounded u32 would ask for up to 2^32 planes).
fn dense_gemm_splitk(c: &mut Ctx<'_>) -> Result<()> {
    let kernel = c.kernel();
    let (m, n, k) = mnk(c)?;
    let splits = c.u32_size("splits")?;
    if !(1..=SPLITK_MAX_SPLITS).contains(&splits) {
        return Err(Error::invalid(kernel, "splits", format!("splits = {splits} must be in 1..={SPLITK_MAX_SPLITS}")));
    }
    let out = c.buf("c")?;
    let mn = elems(kernel, "c", m, n)?;
    let ranges: Vec<Range<usize>> = (0..splits).map(|s| chunk(k, splits, s)).collect();
    let parts = dense_sums(c, out, mn, 2, &ranges)?;
    let mut acc = vec![0f32; mn];
    for part in parts.chunks_exact(mn) {
        for (a, &p) in acc.iter_mut().zip(part) {
            *a += p;
        }
    }
    let bits: Vec<u16> = acc.iter().map(|&x| bf16_bits(x)).collect();
    c.put_bf16(out, 0, &bits)
}
