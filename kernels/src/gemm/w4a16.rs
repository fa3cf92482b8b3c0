//! W4A16: bf16 activations times NVFP4 weights.
//!
//! Weights are in the K-major device layout of
//! [`switchyard_core::codec::nvfp4::Nvfp4Matrix::k_major`]: `bq` u8
//! `[K/2, ldb]` (two e2m1 codes per byte along K, low nibble first), `bs` u8
//! `[K/16, ldb]` (e4m3 block scales), and the f32 global scale `scale2`.
//! Consecutive output columns are adjacent, so loads along N coalesce; the
//! row stride `ldb` is `n` except in the `_ldb` variant.
//!
//! Contract, every variant: `w(n, k) = e2m1(code) · e4m3(scale)` — exact in
//! bf16 (at most 2 × 4 significant bits) — then
//! `c[m, n] = bf16(scale2 · Σₖ a[m, k] · w(n, k))` with f32 accumulation in a
//! K order of the backend's choosing (parity: NMSE ≤ 1e-6 against the
//! reference). [`W4A16_GEMM_N128_M128_BF16`] additionally equals
//! [`W4A16_GEMM`] bit for bit on the same backend.
use super::{operands, REORDERED_NMSE};
use crate::ops::{bf16s, blocks, require, sat, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use switchyard_core::codec::nvfp4;
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, KernelSig, Result};

macro_rules! w4a16_args {
    ($($extra:expr),*) => {
        [A::input("a"), A::input("bq"), A::input("bs"), A::f32("scale2"), A::output("c"), A::u32("m"), A::u32("n"), A::u32("k") $(, $extra)*]
    };
}

declare_kernel! {
    /// Base W4A16 GEMM, 64-wide N tile. Grid `(⌈N/64⌉, ⌈M/64⌉)`, block 128. N % 16 == 0, K % 16 == 0.
    W4A16_GEMM = "w4a16"::"w4a16_gemm" => &w4a16_args!()
}
declare_kernel! {
    /// 128-wide N tile. Grid `(⌈N/128⌉, ⌈M/64⌉)`, block 128. N % 16 == 0, K % 16 == 0.
    W4A16_GEMM_N128 = "w4a16"::"w4a16_gemm_n128" => &w4a16_args!()
}
declare_kernel! {
    /// [`W4A16_GEMM_N128`] with an explicit weight row stride `ldb` (bytes per
    /// K-pair row, a multiple of 16, ≥ N; columns N..ldb are zero padding), for
    /// N not a multiple of 16 such as a vocabulary of 248077.
    W4A16_GEMM_N128_LDB = "w4a16"::"w4a16_gemm_n128_ldb" => &w4a16_args!(A::u32("ldb"))
}
declare_kernel! {
    /// Two 64-row M chunks per block, sharing each weight load. Grid
    /// `(⌈N/128⌉, ⌈M/128⌉)`, block 128. N % 16 == 0, K % 16 == 0.
    W4A16_GEMM_N128_M128 = "w4a16"::"w4a16_gemm_n128_m128" => &w4a16_args!()
}
declare_kernel! {
    /// Lossless bf16-MMA variant at the 128×128 tiling: bit-identical to
    /// [`W4A16_GEMM`] on the same backend. Grid `(⌈N/128⌉, ⌈M/128⌉)`, block 128.
    W4A16_GEMM_N128_M128_BF16 = "w4a16"::"w4a16_gemm_n128_m128_bf16" => &w4a16_args!()
}
declare_kernel! {
    /// Decode-only variant (M ≤ 16): one pass over the weights with every
    /// row's accumulator live. Grid `(⌈N/64⌉, 1)`, block 256. N % 16 == 0, K % 16 == 0.
    W4A16_GEMM_DECODE = "w4a16"::"w4a16_gemm_decode" => &w4a16_args!()
}

/// Largest M the decode variant takes.
pub const DECODE_MAX_M: usize = 16;

/// A W4A16 weight on the device: addresses of the K-major codes and scales,
/// the global scale, and the row stride.
#[derive(Clone, Copy, Debug)]
pub struct Fp4Weight {
    /// Codes `[K/2, ldb]`.
    pub bq: u64,
    /// Block scales `[K/16, ldb]`.
    pub bs: u64,
    /// Global scale.
    pub scale2: f32,
    /// Row stride in bytes (= n unless padded).
    pub ldb: usize,
}

fn check(kernel: &str, w: &Fp4Weight, m: usize, n: usize, k: usize, need_packed: bool) -> Result<[u32; 3]> {
    for (name, v) in [("m", m), ("n", n), ("k", k)] {
        require(v > 0 && u32::try_from(v).is_ok(), kernel, name, || format!("{name} = {v} must be in 1..2^32"))?;
    }
    require(k % nvfp4::BLOCK == 0, kernel, "k", || format!("k = {k} is not a multiple of the NVFP4 scale block ({})", nvfp4::BLOCK))?;
    if need_packed {
        require(n % 16 == 0 && w.ldb == n, kernel, "n", || {
            format!(
                "n = {n} (ldb {}) must be a multiple of 16 with ldb = n: 16-byte weight loads need aligned rows; use the _ldb variant",
                w.ldb
            )
        })?;
    } else {
        require(w.ldb >= n && w.ldb % 16 == 0 && u32::try_from(w.ldb).is_ok(), kernel, "ldb", || {
            format!("ldb = {} must be a multiple of 16 and >= n = {n} (misaligned or short weight rows)", w.ldb)
        })?;
    }
    require(w.scale2.is_finite(), kernel, "scale2", || format!("scale2 = {} must be finite", w.scale2))?;
    // GPU kernels stream the weights with 16-byte loads: a weight view that
    // starts mid-vector would fault there, so it is refused here on every backend.
    for (name, addr) in [("bq", w.bq), ("bs", w.bs)] {
        require(addr % 16 == 0, kernel, name, || format!("address {addr:#x} must be 16-byte aligned (vector weight loads)"))?;
    }
    Ok([m as u32, n as u32, k as u32])
}

impl Ops {
    #[allow(clippy::too_many_arguments)]
    fn w4a16(
        &self,
        sig: &'static KernelSig,
        tile: [usize; 2],
        block: u32,
        a: u64,
        w: &Fp4Weight,
        c: u64,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        let s = sig.symbol;
        let ldb_variant = std::ptr::eq(sig, &W4A16_GEMM_N128_LDB);
        let [mu, nu, ku] = check(s, w, m, n, k, !ldb_variant)?;
        let mut args = vec![
            (P(a), bf16s(sat(&[m, k]))),
            (P(w.bq), sat(&[k / 2, w.ldb])),
            (P(w.bs), sat(&[k / nvfp4::BLOCK, w.ldb])),
            (F(w.scale2), 0),
            (P(c), bf16s(sat(&[m, n]))),
            (U(mu), 0),
            (U(nu), 0),
            (U(ku), 0),
        ];
        if ldb_variant {
            args.push((U(w.ldb as u32), 0));
        }
        self.go(sig, [blocks(s, n, tile[0])?, blocks(s, m, tile[1])?, 1], [block, 1, 1], &args)
    }

    /// See [`W4A16_GEMM`].
    pub fn w4a16_gemm(&self, a: u64, w: &Fp4Weight, c: u64, m: usize, n: usize, k: usize) -> Result<()> {
        self.w4a16(&W4A16_GEMM, [64, 64], 128, a, w, c, m, n, k)
    }
    /// See [`W4A16_GEMM_N128`].
    pub fn w4a16_gemm_n128(&self, a: u64, w: &Fp4Weight, c: u64, m: usize, n: usize, k: usize) -> Result<()> {
        self.w4a16(&W4A16_GEMM_N128, [128, 64], 128, a, w, c, m, n, k)
    }
    /// See [`W4A16_GEMM_N128_LDB`].
    pub fn w4a16_gemm_n128_ldb(&self, a: u64, w: &Fp4Weight, c: u64, m: usize, n: usize, k: usize) -> Result<()> {
        self.w4a16(&W4A16_GEMM_N128_LDB, [128, 64], 128, a, w, c, m, n, k)
    }
    /// See [`W4A16_GEMM_N128_M128`].
    pub fn w4a16_gemm_n128_m128(&self, a: u64, w: &Fp4Weight, c: u64, m: usize, n: usize, k: usize) -> Result<()> {
        self.w4a16(&W4A16_GEMM_N128_M128, [128, 128], 128, a, w, c, m, n, k)
    }
    /// See [`W4A16_GEMM_N128_M128_BF16`].
    pub fn w4a16_gemm_n128_m128_bf16(&self, a: u64, w: &Fp4Weight, c: u64, m: usize, n: usize, k: usize) -> Result<()> {
        self.w4a16(&W4A16_GEMM_N128_M128_BF16, [128, 128], 128, a, w, c, m, n, k)
    }
    /// See [`W4A16_GEMM_DECODE`].
    pub fn w4a16_gemm_decode(&self, a: u64, w: &Fp4Weight, c: u64, m: usize, n: usize, k: usize) -> Result<()> {
        let s = W4A16_GEMM_DECODE.symbol;
        require(m <= DECODE_MAX_M, s, "m", || format!("m = {m} is too large for the decode-only variant (max {DECODE_MAX_M})"))?;
        self.w4a16(&W4A16_GEMM_DECODE, [64, DECODE_MAX_M], 256, a, w, c, m, n, k)
    }
}

/// A random NVFP4 weight `[n, k]` in the K-major layout with row stride `ldb`:
/// `(codes, scales, global scale)`.
pub fn random_weight(g: &mut Gen, n: usize, k: usize, ldb: usize) -> (Vec<u8>, Vec<u8>, f32) {
    let (v, _) = g.f32(n * k, -0.5, 0.5);
    let q = nvfp4::quantize(&v, n, k).expect("k is a multiple of the block and values are finite");
    let (p, s) = q.k_major(ldb);
    (p, s, q.global_scale)
}

type Launch = fn(&Ops, u64, &Fp4Weight, u64, usize, usize, usize) -> Result<()>;

fn cases_for(g: &mut Gen, sig: &'static KernelSig, shapes: &[(usize, usize, usize, usize)], launch: Launch) -> Vec<Case> {
    shapes
        .iter()
        .map(|&(m, n, k, ldb)| {
            let (a, _) = operands(g, m, 2, k);
            let (bq, bs, scale2) = random_weight(g, n, k, ldb);
            Case {
                kernel: sig,
                label: format!("m={m} n={n} k={k}{}", if ldb != n { format!(" ldb={ldb}") } else { String::new() }),
                buffers: vec![
                    Buffer::input("a", a),
                    Buffer::input("bq", bq),
                    Buffer::input("bs", bs),
                    Buffer::output("c", DType::BF16, m * n, Tolerance::Nmse(REORDERED_NMSE)),
                ],
                run: Box::new(move |o, x| {
                    launch(o, x[0].addr(), &Fp4Weight { bq: x[1].addr(), bs: x[2].addr(), scale2, ldb }, x[3].addr(), m, n, k)
                }),
            }
        })
        .collect()
}

/// (M, N, K, ldb): M = 1, M not a multiple of 16, K not a multiple of 64, two M chunks.
const SHAPES: [(usize, usize, usize, usize); 4] = [(1, 64, 64, 64), (17, 128, 96, 128), (33, 256, 208, 256), (130, 192, 160, 192)];

fn base_cases(g: &mut Gen) -> Vec<Case> {
    cases_for(g, &W4A16_GEMM, &SHAPES, Ops::w4a16_gemm)
}
fn n128_cases(g: &mut Gen) -> Vec<Case> {
    cases_for(g, &W4A16_GEMM_N128, &SHAPES, Ops::w4a16_gemm_n128)
}
fn ldb_cases(g: &mut Gen) -> Vec<Case> {
    cases_for(g, &W4A16_GEMM_N128_LDB, &[(3, 2477, 64, 2560), (1, 130, 32, 256), (20, 64, 48, 80)], Ops::w4a16_gemm_n128_ldb)
}
fn m128_cases(g: &mut Gen) -> Vec<Case> {
    cases_for(g, &W4A16_GEMM_N128_M128, &SHAPES, Ops::w4a16_gemm_n128_m128)
}
fn lossless_cases(g: &mut Gen) -> Vec<Case> {
    cases_for(g, &W4A16_GEMM_N128_M128_BF16, &SHAPES, Ops::w4a16_gemm_n128_m128_bf16)
}
fn decode_cases(g: &mut Gen) -> Vec<Case> {
    cases_for(g, &W4A16_GEMM_DECODE, &[(1, 64, 64, 64), (16, 256, 208, 256), (5, 192, 160, 192)], Ops::w4a16_gemm_decode)
}

inventory::submit! { CaseSet { kernel: &W4A16_GEMM, cases: base_cases } }
inventory::submit! { CaseSet { kernel: &W4A16_GEMM_N128, cases: n128_cases } }
inventory::submit! { CaseSet { kernel: &W4A16_GEMM_N128_LDB, cases: ldb_cases } }
inventory::submit! { CaseSet { kernel: &W4A16_GEMM_N128_M128, cases: m128_cases } }
inventory::submit! { CaseSet { kernel: &W4A16_GEMM_N128_M128_BF16, cases: lossless_cases } }
inventory::submit! { CaseSet { kernel: &W4A16_GEMM_DECODE, cases: decode_cases } }
