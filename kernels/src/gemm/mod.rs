//! The GEMM family: `C[M, N] = A[M, K] · B[N, K]ᵀ`, A row-major bf16
//! activations, B in the HF `[out, in]` layout, f32 accumulation, bf16 output
//! rounded to nearest even. [`w4a16`] holds the NVFP4-weight variants.
//!
//! Accumulation order is part of some contracts: [`DENSE_GEMM_BF16`] and
//! [`DENSE_GEMM_ROUTER`] sum strictly `k = 0..K-1` with separate f32 multiply
//! and add (no fused multiply-add), so they equal the scalar reference bit for
//! bit on every backend. The tensor-core kernels may reorder K; they are
//! compared by NMSE (≤ 1e-6: f32 reassociation over K ≤ 256 moves a sum by
//! ~1e-7 relative, which flips the bf16 rounding of a small fraction of
//! elements by one ulp).
pub mod w4a16;

use crate::ops::{bf16s, blocks, require, sat, words, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use switchyard_core::compare::Tolerance;
use switchyard_core::{registry, Arg::*, ArgSpec as A, DType, Result};

/// The NMSE bound for bf16 GEMM outputs whose K order differs from the reference.
pub const REORDERED_NMSE: f64 = 1e-6;

macro_rules! gemm_args {
    ($($extra:expr),*) => {
        [A::input("a"), A::input("b"), A::output("c"), A::u32("m"), A::u32("n"), A::u32("k") $(, $extra)*]
    };
}

declare_kernel! {
    /// Simple tiled GEMM, the scalar order: `acc = 0; for k in 0..K { acc = acc + a·b }`
    /// with the product and the sum each rounded to f32 (no FMA);
    /// `c = bf16(acc)`. Grid `(⌈N/16⌉, ⌈M/16⌉)`, block `(16, 16)`. K and N even.
    DENSE_GEMM_BF16 = "gemm"::"dense_gemm_bf16"=> &gemm_args!()
}

declare_kernel! {
    /// The router GEMM: bit-identical to [`DENSE_GEMM_BF16`] (same strict
    /// k order, no FMA), register-blocked for speed. Grid `(⌈N/64⌉, ⌈M/16⌉)`,
    /// block `(16, 16)`. K and N even.
    DENSE_GEMM_ROUTER = "gemm"::"dense_gemm_router"=> &gemm_args!()
}

declare_kernel! {
    /// Tensor-core GEMM (mma.sync m16n8k16 on CUDA): f32 accumulation in any
    /// K order, `c = bf16(acc)`. Grid `(⌈N/64⌉, ⌈M/16⌉)`, block 128. K % 8 == 0, N even.
    DENSE_GEMM_TC = "gemm"::"dense_gemm_tc"=> &gemm_args!()
}

declare_kernel! {
    /// `c = bf16(c + scale · bf16(acc))` in one pass, where `acc` is exactly
    /// what [`DENSE_GEMM_TC`] computes on the same backend, and the epilogue is
    /// `t = bf16(acc)`, `u = scale · t` (f32), `c = bf16(c + u)` (f32), no FMA:
    /// bit-identical to `dense_gemm_tc` into scratch then [`SCALED_ADD_BF16`].
    DENSE_GEMM_TC_SCALED_ACC = "gemm"::"dense_gemm_tc_scaled_acc"(
        A::input("a"), A::input("b"), A::inout("c"), A::u32("m"), A::u32("n"), A::u32("k"), A::f32("scale"))
}

declare_kernel! {
    /// `out[i] = bf16(out[i] + scale · x[i])` with `u = scale · x` and the sum
    /// each rounded to f32 (no FMA). `n` even. The unfused twin of
    /// [`DENSE_GEMM_TC_SCALED_ACC`]'s epilogue.
    SCALED_ADD_BF16 = "gemm"::"scaled_add_bf16"(A::inout("out"), A::input("x"), A::u32("n"), A::f32("scale"))
}

declare_kernel! {
    /// Split-K phase 1: `ws[s, m, n] = Σ_{k ∈ chunk s} a[m,k]·b[n,k]` in f32,
    /// chunk `s` = `[s·⌈K/splits⌉, min(K, (s+1)·⌈K/splits⌉))` (K order within a
    /// chunk free). Grid `(⌈N/16⌉, ⌈M/16⌉, splits)`, block `(16, 16)`.
    DENSE_GEMM_SPLITK_PARTIAL = "gemm"::"dense_gemm_splitk_partial"(
        A::input("a"), A::input("b"), A::output("ws"), A::u32("m"), A::u32("n"), A::u32("k"), A::u32("splits"))
}

declare_kernel! {
    /// Split-K phase 2: `c[m, n] = bf16(Σ_s ws[s, m, n])`, summed in s order.
    /// Grid `(⌈N/256⌉, M)`, block 256.
    DENSE_GEMM_SPLITK_REDUCE = "gemm"::"dense_gemm_splitk_reduce"(
        A::input("ws"), A::output("c"), A::u32("m"), A::u32("n"), A::u32("splits"))
}

declare_kernel! {
    /// Pipelined tensor-core GEMM (multi-stage cp.async, 128×128 tiles on
    /// CUDA): same contract as [`DENSE_GEMM_TC`]. Grid `(⌈N/128⌉, ⌈M/128⌉)`,
    /// block 256. K % 8 == 0, N even.
    DENSE_GEMM_BF16_PIPELINED = "gemm"::"dense_gemm_bf16_pipelined"=> &gemm_args!()
}

/// Checks the shape rules shared by the dense kernels; returns the u32 args.
fn dense_shape(kernel: &str, m: usize, n: usize, k: usize, k_multiple: usize) -> Result<[u32; 3]> {
    for (name, v) in [("m", m), ("n", n), ("k", k)] {
        require(v > 0 && u32::try_from(v).is_ok(), kernel, name, || format!("{name} = {v} must be in 1..2^32"))?;
    }
    require(n % 2 == 0, kernel, "n", || format!("n = {n} must be even (bf16 output rows are written in pairs)"))?;
    require(k % k_multiple == 0, kernel, "k", || format!("k = {k} must be a multiple of {k_multiple} (16-byte row loads)"))?;
    Ok([m as u32, n as u32, k as u32])
}

impl Ops {
    fn dense(
        &self,
        sig: &'static switchyard_core::KernelSig,
        geo: ([usize; 2], [u32; 3]),
        a: u64,
        b: u64,
        c: u64,
        m: usize,
        n: usize,
        k: usize,
        k_multiple: usize,
    ) -> Result<()> {
        let s = sig.symbol;
        let [mu, nu, ku] = dense_shape(s, m, n, k, k_multiple)?;
        let ([tn, tm], block) = geo;
        self.go(
            sig,
            [blocks(s, n, tn)?, blocks(s, m, tm)?, 1],
            block,
            &[(P(a), bf16s(sat(&[m, k]))), (P(b), bf16s(sat(&[n, k]))), (P(c), bf16s(sat(&[m, n]))), (U(mu), 0), (U(nu), 0), (U(ku), 0)],
        )
    }

    /// See [`DENSE_GEMM_BF16`].
    pub fn dense_gemm_bf16(&self, a: u64, b: u64, c: u64, m: usize, n: usize, k: usize) -> Result<()> {
        self.dense(&DENSE_GEMM_BF16, ([16, 16], [16, 16, 1]), a, b, c, m, n, k, 2)
    }

    /// See [`DENSE_GEMM_ROUTER`].
    pub fn dense_gemm_router(&self, a: u64, b: u64, c: u64, m: usize, n: usize, k: usize) -> Result<()> {
        self.dense(&DENSE_GEMM_ROUTER, ([64, 16], [16, 16, 1]), a, b, c, m, n, k, 2)
    }

    /// See [`DENSE_GEMM_TC`].
    pub fn dense_gemm_tc(&self, a: u64, b: u64, c: u64, m: usize, n: usize, k: usize) -> Result<()> {
        self.dense(&DENSE_GEMM_TC, ([64, 16], [128, 1, 1]), a, b, c, m, n, k, 8)
    }

    /// See [`DENSE_GEMM_BF16_PIPELINED`].
    pub fn dense_gemm_bf16_pipelined(&self, a: u64, b: u64, c: u64, m: usize, n: usize, k: usize) -> Result<()> {
        self.dense(&DENSE_GEMM_BF16_PIPELINED, ([128, 128], [256, 1, 1]), a, b, c, m, n, k, 8)
    }

    /// The prefill GEMM: the pipelined tensor-core kernel where this backend
    /// implements it and the shape allows (K % 8 == 0), else the simple kernel.
    pub fn dense_gemm_prefill(&self, a: u64, b: u64, c: u64, m: usize, n: usize, k: usize) -> Result<()> {
        if registry::implements(self.be.kind(), &DENSE_GEMM_BF16_PIPELINED) && k % 8 == 0 {
            self.dense_gemm_bf16_pipelined(a, b, c, m, n, k)
        } else {
            self.dense_gemm_bf16(a, b, c, m, n, k)
        }
    }

    /// See [`DENSE_GEMM_TC_SCALED_ACC`].
    #[allow(clippy::too_many_arguments)]
    pub fn dense_gemm_tc_scaled_acc(&self, a: u64, b: u64, c: u64, m: usize, n: usize, k: usize, scale: f32) -> Result<()> {
        let s = DENSE_GEMM_TC_SCALED_ACC.symbol;
        let [mu, nu, ku] = dense_shape(s, m, n, k, 8)?;
        require(scale.is_finite(), s, "scale", || format!("scale = {scale} must be finite"))?;
        self.go(
            &DENSE_GEMM_TC_SCALED_ACC,
            [blocks(s, n, 64)?, blocks(s, m, 16)?, 1],
            [128, 1, 1],
            &[
                (P(a), bf16s(sat(&[m, k]))),
                (P(b), bf16s(sat(&[n, k]))),
                (P(c), bf16s(sat(&[m, n]))),
                (U(mu), 0),
                (U(nu), 0),
                (U(ku), 0),
                (F(scale), 0),
            ],
        )
    }

    /// See [`SCALED_ADD_BF16`].
    pub fn scaled_add_bf16(&self, out: u64, x: u64, n: usize, scale: f32) -> Result<()> {
        let s = SCALED_ADD_BF16.symbol;
        require(n > 0 && n % 2 == 0 && u32::try_from(n).is_ok(), s, "n", || format!("n = {n} must be positive, even and < 2^32"))?;
        require(scale.is_finite(), s, "scale", || format!("scale = {scale} must be finite"))?;
        self.go(
            &SCALED_ADD_BF16,
            [blocks(s, n, 512)?, 1, 1],
            [256, 1, 1],
            &[(P(out), bf16s(n)), (P(x), bf16s(n)), (U(n as u32), 0), (F(scale), 0)],
        )
    }

    /// Split-K GEMM: partial products into the f32 workspace `ws`
    /// (`[splits, M, N]`), then the reduce into `c`.
    #[allow(clippy::too_many_arguments)]
    pub fn dense_gemm_splitk(&self, a: u64, b: u64, c: u64, ws: u64, m: usize, n: usize, k: usize, splits: usize) -> Result<()> {
        let s = DENSE_GEMM_SPLITK_PARTIAL.symbol;
        let [mu, nu, ku] = dense_shape(s, m, n, k, 2)?;
        require((1..=k).contains(&splits) && splits <= 64, s, "splits", || format!("splits = {splits} must be in 1..=min(k, 64)"))?;
        let sp = splits as u32;
        self.go(
            &DENSE_GEMM_SPLITK_PARTIAL,
            [blocks(s, n, 16)?, blocks(s, m, 16)?, sp],
            [16, 16, 1],
            &[
                (P(a), bf16s(sat(&[m, k]))),
                (P(b), bf16s(sat(&[n, k]))),
                (P(ws), words(sat(&[splits, m, n]))),
                (U(mu), 0),
                (U(nu), 0),
                (U(ku), 0),
                (U(sp), 0),
            ],
        )?;
        self.dense_gemm_splitk_reduce(ws, c, m, n, splits)
    }

    /// Split-K phase 2 alone. See [`DENSE_GEMM_SPLITK_REDUCE`].
    pub fn dense_gemm_splitk_reduce(&self, ws: u64, c: u64, m: usize, n: usize, splits: usize) -> Result<()> {
        let r = DENSE_GEMM_SPLITK_REDUCE.symbol;
        let [mu, nu, _] = dense_shape(r, m, n, 2, 2)?;
        require((1..=64).contains(&splits), r, "splits", || format!("splits = {splits} must be in 1..=64"))?;
        self.go(
            &DENSE_GEMM_SPLITK_REDUCE,
            [blocks(r, n, 256)?, mu, 1],
            [256, 1, 1],
            &[(P(ws), words(sat(&[splits, m, n]))), (P(c), bf16s(sat(&[m, n]))), (U(mu), 0), (U(nu), 0), (U(splits as u32), 0)],
        )
    }
}

/// (M, N, K): M = 1, M not a multiple of 16, K not a multiple of 64, N not a multiple of 16.
pub(crate) const SHAPES: [(usize, usize, usize); 4] = [(1, 64, 64), (17, 40, 72), (33, 130, 200), (70, 96, 136)];

/// Random GEMM operands: `(a bytes, b bytes)` with non-zero values.
pub(crate) fn operands(g: &mut Gen, m: usize, n: usize, k: usize) -> (Vec<u8>, Vec<u8>) {
    (g.bf16(m * k, 0.01, 1.0).1, g.bf16(n * k, 0.01, 0.5).1)
}

type DenseLaunch = fn(&Ops, u64, u64, u64, usize, usize, usize) -> Result<()>;

fn dense_cases(g: &mut Gen, sig: &'static switchyard_core::KernelSig, tol: Tolerance, launch: DenseLaunch) -> Vec<Case> {
    SHAPES
        .iter()
        .map(|&(m, n, k)| {
            let (a, b) = operands(g, m, n, k);
            Case {
                kernel: sig,
                label: format!("m={m} n={n} k={k}"),
                buffers: vec![Buffer::input("a", a), Buffer::input("b", b), Buffer::output("c", DType::BF16, m * n, tol.clone())],
                run: Box::new(move |o, x| launch(o, x[0].addr(), x[1].addr(), x[2].addr(), m, n, k)),
            }
        })
        .collect()
}

fn bf16_cases(g: &mut Gen) -> Vec<Case> {
    dense_cases(g, &DENSE_GEMM_BF16, Tolerance::Exact, Ops::dense_gemm_bf16)
}
fn router_cases(g: &mut Gen) -> Vec<Case> {
    dense_cases(g, &DENSE_GEMM_ROUTER, Tolerance::Exact, Ops::dense_gemm_router)
}
fn tc_cases(g: &mut Gen) -> Vec<Case> {
    dense_cases(g, &DENSE_GEMM_TC, Tolerance::Nmse(REORDERED_NMSE), Ops::dense_gemm_tc)
}
fn pipelined_cases(g: &mut Gen) -> Vec<Case> {
    let mut v = dense_cases(g, &DENSE_GEMM_BF16_PIPELINED, Tolerance::Nmse(REORDERED_NMSE), Ops::dense_gemm_bf16_pipelined);
    // A full 128×128 tile plus ragged edges in both directions.
    let (m, n, k) = (200, 260, 256);
    let (a, b) = operands(g, m, n, k);
    v.push(Case {
        kernel: &DENSE_GEMM_BF16_PIPELINED,
        label: format!("m={m} n={n} k={k}"),
        buffers: vec![
            Buffer::input("a", a),
            Buffer::input("b", b),
            Buffer::output("c", DType::BF16, m * n, Tolerance::Nmse(REORDERED_NMSE)),
        ],
        run: Box::new(move |o, x| o.dense_gemm_bf16_pipelined(x[0].addr(), x[1].addr(), x[2].addr(), m, n, k)),
    });
    v
}

fn scaled_acc_cases(g: &mut Gen) -> Vec<Case> {
    SHAPES
        .iter()
        .map(|&(m, n, k)| {
            let (a, b) = operands(g, m, n, k);
            let (_, c0) = g.bf16(m * n, 0.5, 2.0);
            Case {
                kernel: &DENSE_GEMM_TC_SCALED_ACC,
                label: format!("m={m} n={n} k={k} scale=0.37"),
                buffers: vec![
                    Buffer::input("a", a),
                    Buffer::input("b", b),
                    Buffer::inout("c", c0, DType::BF16, Tolerance::Nmse(REORDERED_NMSE)),
                ],
                run: Box::new(move |o, x| o.dense_gemm_tc_scaled_acc(x[0].addr(), x[1].addr(), x[2].addr(), m, n, k, 0.37)),
            }
        })
        .collect()
}

fn scaled_add_cases(g: &mut Gen) -> Vec<Case> {
    [2usize, 1030, 70000]
        .into_iter()
        .map(|n| {
            let (_, out) = g.bf16(n, 0.5, 2.0);
            let (_, x) = g.bf16(n, 0.01, 3.0);
            Case {
                kernel: &SCALED_ADD_BF16,
                label: format!("n={n} scale=-1.7"),
                buffers: vec![Buffer::inout("out", out, DType::BF16, Tolerance::Exact), Buffer::input("x", x)],
                run: Box::new(move |o, a| o.scaled_add_bf16(a[0].addr(), a[1].addr(), n, -1.7)),
            }
        })
        .collect()
}

fn splitk_cases(g: &mut Gen) -> Vec<Case> {
    SHAPES
        .iter()
        .zip([1usize, 3, 4, 7])
        .map(|(&(m, n, k), splits)| {
            let (a, b) = operands(g, m, n, k);
            Case {
                kernel: &DENSE_GEMM_SPLITK_PARTIAL,
                label: format!("m={m} n={n} k={k} splits={splits}"),
                buffers: vec![
                    Buffer::input("a", a),
                    Buffer::input("b", b),
                    Buffer::output("c", DType::BF16, m * n, Tolerance::Nmse(REORDERED_NMSE)),
                    Buffer::input("ws", vec![0u8; 4 * splits * m * n]),
                ],
                run: Box::new(move |o, x| o.dense_gemm_splitk(x[0].addr(), x[1].addr(), x[2].addr(), x[3].addr(), m, n, k, splits)),
            }
        })
        .collect()
}

fn splitk_reduce_cases(g: &mut Gen) -> Vec<Case> {
    [(1usize, 64usize, 1usize), (17, 40, 3), (33, 130, 7)]
        .into_iter()
        .map(|(m, n, splits)| {
            let (_, ws) = g.f32(splits * m * n, -4.0, 4.0);
            Case {
                kernel: &DENSE_GEMM_SPLITK_REDUCE,
                label: format!("m={m} n={n} splits={splits}"),
                buffers: vec![Buffer::input("ws", ws), Buffer::output("c", DType::BF16, m * n, Tolerance::Exact)],
                run: Box::new(move |o, x| o.dense_gemm_splitk_reduce(x[0].addr(), x[1].addr(), m, n, splits)),
            }
        })
        .collect()
}

inventory::submit! { CaseSet { kernel: &DENSE_GEMM_SPLITK_REDUCE, cases: splitk_reduce_cases } }
inventory::submit! { CaseSet { kernel: &DENSE_GEMM_BF16, cases: bf16_cases } }
inventory::submit! { CaseSet { kernel: &DENSE_GEMM_ROUTER, cases: router_cases } }
inventory::submit! { CaseSet { kernel: &DENSE_GEMM_TC, cases: tc_cases } }
inventory::submit! { CaseSet { kernel: &DENSE_GEMM_BF16_PIPELINED, cases: pipelined_cases } }
inventory::submit! { CaseSet { kernel: &DENSE_GEMM_TC_SCALED_ACC, cases: scaled_acc_cases } }
inventory::submit! { CaseSet { kernel: &SCALED_ADD_BF16, cases: scaled_add_cases } }
inventory::submit! { CaseSet { kernel: &DENSE_GEMM_SPLITK_PARTIAL, cases: splitk_cases } }
