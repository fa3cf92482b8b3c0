//! The GEMM family on wgpu beyond the parity table: the bit-identical
//! contracts tested with `==` (router vs scalar, scaled_acc vs GEMM then
//! scaled_add, lossless W4A16 vs base), shapes with several tiles in every
//! direction and an odd N over several rows, and grid folding.
//!
//! The WGSL GEMMs sum every output in strict k order (see the tile cores), so
//! on this backend even the order-free kernels (tc, pipelined, split-K, the
//! tiled W4A16 variants) equal the CPU reference exactly; the tests hold them
//! to that, which is stronger than the parity suite's NMSE bound. Only
//! `w4a16_gemm_decode` splits K across threads and is compared by NMSE.
use switchyard_core::codec::bytes::bf16_bits_from_bytes;
use switchyard_core::codec::{bf16_bits, bf16_value};
use switchyard_core::{DeviceBuffer, Region};
use switchyard_kernels::gemm::w4a16::{random_weight, Fp4Weight};
use switchyard_kernels::gemm::REORDERED_NMSE;
use switchyard_kernels::parity::Gen;
use switchyard_kernels::Ops;
use switchyard_wgpu::WgpuOptions;

mod common;
use common::backend;

/// A fresh buffer of `o`'s backend holding `data`.
fn up(o: &Ops, data: &[u8]) -> DeviceBuffer {
    DeviceBuffer::from_bytes(&o.be, data).unwrap()
}

/// An output of `bytes` NaN bytes (0xff), so an element nobody wrote shows.
fn poisoned(o: &Ops, bytes: usize) -> DeviceBuffer {
    up(o, &vec![0xff; bytes])
}

/// The bf16 elements of a buffer.
fn bits(b: &DeviceBuffer) -> Vec<u16> {
    bf16_bits_from_bytes(&b.to_vec().unwrap())
}

fn operands(g: &mut Gen, m: usize, n: usize, k: usize) -> (Vec<u8>, Vec<u8>) {
    (g.bf16(m * k, 0.01, 1.0).1, g.bf16(n * k, 0.01, 0.5).1)
}

type Dense = fn(&Ops, Region, Region, Region, usize, usize, usize) -> switchyard_core::Result<()>;

/// Runs `f` on fresh buffers of `o` and returns the output bits; unwritten (NaN) outputs fail.
fn dense(
    o: &Ops,
    a: &[u8],
    b: &[u8],
    m: usize,
    n: usize,
    k: usize,
    f: impl Fn(&Ops, Region, Region, Region) -> switchyard_core::Result<()>,
) -> Vec<u16> {
    let (pa, pb, pc) = (up(o, a), up(o, b), poisoned(o, 2 * m * n));
    f(o, pa.region(), pb.region(), pc.region()).unwrap();
    let out = bits(&pc);
    assert!(out.iter().all(|&x| !bf16_value(x).is_nan()), "m={m} n={n} k={k}: unwritten output");
    out
}

/// M = 1 and M = 16 (the small path's edges), M and N ragged against the
/// 128 tile, several tiles in each direction, K not a multiple of the stage,
/// and K odd in words.
const SHAPES: [(usize, usize, usize); 7] =
    [(1, 64, 64), (16, 96, 200), (17, 40, 72), (5, 322, 520), (130, 262, 136), (257, 130, 200), (3, 2, 2)];

fn dense_variants_equal_the_reference_and_each_other_bit_for_bit() {
    let be = backend("dense_variants_equal_the_reference_and_each_other_bit_for_bit", WgpuOptions::default());
    let (w, c) = (Ops::new(be.clone()), Ops::new(switchyard_cpu_ref::cpu_backend()));
    let mut g = Gen::new(21);
    for (m, n, k) in SHAPES {
        let (a, b) = operands(&mut g, m, n, k);
        let run = |o: &Ops, f: Dense| dense(o, &a, &b, m, n, k, |o, pa, pb, pc| f(o, pa, pb, pc, m, n, k));
        let reference = run(&c, Ops::dense_gemm_bf16);
        let scalar = run(&w, Ops::dense_gemm_bf16);
        assert!(scalar == reference, "dense_gemm_bf16 != cpu-ref at m={m} n={n} k={k}");
        assert!(run(&w, Ops::dense_gemm_router) == scalar, "router != dense_gemm_bf16 at m={m} n={n} k={k}");
        if k % 8 == 0 {
            for (name, f) in
                [("tc", Ops::dense_gemm_tc as Dense), ("pipelined", Ops::dense_gemm_bf16_pipelined), ("prefill", Ops::dense_gemm_prefill)]
            {
                assert!(run(&w, f) == scalar, "{name} != dense_gemm_bf16 at m={m} n={n} k={k}");
            }
        }
        for splits in [1usize, 3, 7] {
            if splits > k {
                continue;
            }
            let split = |o: &Ops| dense(o, &a, &b, m, n, k, |o, pa, pb, pc| o.dense_gemm_splitk_bf16(pa, pb, pc, m, n, k, splits));
            assert!(split(&w) == split(&c), "split-K ({splits} splits) != cpu-ref at m={m} n={n} k={k}");
        }
    }
    assert_eq!(be.live_bytes(), 0);
}

fn strict_k_order_survives_cancellation() {
    let be = backend("strict_k_order_survives_cancellation", WgpuOptions::default());
    let o = Ops::new(be);
    // 0 + 1 + 2^24 = 2^24 (tie to even), − 2^24 = 0: any other association gives 1.
    // Ones across K = 40 put the cancellation in the first stage and more after it.
    let t = 16_777_216.0f32;
    let k = 40;
    let a = switchyard_core::codec::bytes::bf16_bytes(&vec![1.0; k]);
    let mut bv = vec![0.0f32; 2 * k];
    bv[..3].copy_from_slice(&[1.0, t, -t]);
    bv[k..].fill(1.0);
    let b = switchyard_core::codec::bytes::bf16_bytes(&bv);
    for f in [Ops::dense_gemm_bf16 as Dense, Ops::dense_gemm_router, Ops::dense_gemm_tc, Ops::dense_gemm_bf16_pipelined] {
        let out = dense(&o, &a, &b, 1, 2, k, |o, pa, pb, pc| f(o, pa, pb, pc, 1, 2, k));
        assert_eq!(out.iter().map(|&x| bf16_value(x)).collect::<Vec<_>>(), [0.0, 40.0]);
    }
}

fn scaled_acc_equals_tc_then_scaled_add_bit_for_bit() {
    let be = backend("scaled_acc_equals_tc_then_scaled_add_bit_for_bit", WgpuOptions::default());
    let o = Ops::new(be.clone());
    let mut g = Gen::new(5);
    for (m, n, k) in SHAPES.into_iter().filter(|s| s.2 % 8 == 0) {
        let (a, b) = operands(&mut g, m, n, k);
        let (_, c0) = g.bf16(m * n, 0.5, 2.0);
        for scale in [0.37f32, -1.7, 1.0, 3.1e-3] {
            let (pa, pb) = (up(&o, &a), up(&o, &b));
            let fused = up(&o, &c0);
            o.dense_gemm_tc_scaled_acc(pa.region(), pb.region(), fused.region(), m, n, k, scale).unwrap();
            let (unfused, scratch) = (up(&o, &c0), poisoned(&o, 2 * m * n));
            o.dense_gemm_tc(pa.region(), pb.region(), scratch.region(), m, n, k).unwrap();
            o.scaled_add_bf16(unfused.region(), scratch.region(), m * n, scale).unwrap();
            let (f, u) = (bits(&fused), bits(&unfused));
            assert!(f == u, "scaled_acc != tc + scaled_add at m={m} n={n} k={k} scale={scale}");
            // The epilogue is the contract's two roundings, recomputed on the host.
            let t = bits(&scratch);
            let c = bf16_bits_from_bytes(&c0);
            let expect: Vec<u16> = c.iter().zip(&t).map(|(&c, &t)| bf16_bits(bf16_value(c) + scale * bf16_value(t))).collect();
            assert_eq!(f, expect, "epilogue at m={m} n={n} k={k} scale={scale}");
        }
    }
    assert_eq!(be.live_bytes(), 0);
}

type W4 = fn(&Ops, Region, &Fp4Weight, Region, usize, usize, usize) -> switchyard_core::Result<()>;

/// Runs a W4A16 launcher on fresh buffers and returns the output bits.
#[allow(clippy::too_many_arguments)]
fn w4(o: &Ops, a: &[u8], bq: &[u8], bs: &[u8], scale2: f32, ldb: usize, m: usize, n: usize, k: usize, f: W4) -> Vec<u16> {
    let (pa, pq, ps, pc) = (up(o, a), up(o, bq), up(o, bs), poisoned(o, 2 * m * n));
    f(o, pa.region(), &Fp4Weight { bq: pq.region(), bs: ps.region(), scale2, ldb }, pc.region(), m, n, k).unwrap();
    let out = bits(&pc);
    assert!(out.iter().all(|&x| !bf16_value(x).is_nan()), "m={m} n={n} k={k}: unwritten output");
    out
}

fn nmse(x: &[u16], r: &[u16]) -> f64 {
    let (mut e, mut s) = (0f64, 0f64);
    for (&x, &r) in x.iter().zip(r) {
        let (x, r) = (bf16_value(x) as f64, bf16_value(r) as f64);
        e += (x - r) * (x - r);
        s += r * r;
    }
    e / s.max(f64::MIN_POSITIVE)
}

fn w4a16_variants_equal_the_reference_and_lossless_equals_base() {
    let be = backend("w4a16_variants_equal_the_reference_and_lossless_equals_base", WgpuOptions::default());
    let (w, c) = (Ops::new(be.clone()), Ops::new(switchyard_cpu_ref::cpu_backend()));
    let mut g = Gen::new(9);
    // Packed (ldb = n): several tiles in both directions, M = 1 and ragged M.
    for (m, n, k) in [(1, 64, 64), (130, 272, 96), (257, 144, 208), (16, 400, 528)] {
        let (a, _) = operands(&mut g, m, 2, k);
        let (bq, bs, s2) = random_weight(&mut g, n, k, n);
        let run = |o: &Ops, f: W4| w4(o, &a, &bq, &bs, s2, n, m, n, k, f);
        let reference = run(&c, Ops::w4a16_gemm);
        let base = run(&w, Ops::w4a16_gemm);
        assert!(base == reference, "w4a16_gemm != cpu-ref at m={m} n={n} k={k}");
        assert!(run(&w, Ops::w4a16_gemm_n128_m128_bf16) == base, "lossless != base at m={m} n={n} k={k}");
        for (name, f) in [("n128", Ops::w4a16_gemm_n128 as W4), ("n128_m128", Ops::w4a16_gemm_n128_m128)] {
            assert!(run(&w, f) == base, "{name} != base at m={m} n={n} k={k}");
        }
        if m <= 16 {
            let d = run(&w, Ops::w4a16_gemm_decode);
            let e = nmse(&d, &reference);
            assert!(e <= REORDERED_NMSE, "decode NMSE {e:e} at m={m} n={n} k={k}");
        }
    }
    // Strided weights: odd N over several rows and M tiles (output words straddle rows), and even N < ldb.
    for (m, n, k, ldb) in [(130, 2477, 48, 2560), (7, 301, 32, 320), (3, 130, 64, 144)] {
        let (a, _) = operands(&mut g, m, 2, k);
        let (bq, bs, s2) = random_weight(&mut g, n, k, ldb);
        let run = |o: &Ops| w4(o, &a, &bq, &bs, s2, ldb, m, n, k, Ops::w4a16_gemm_n128_ldb);
        assert!(run(&w) == run(&c), "n128_ldb != cpu-ref at m={m} n={n} k={k} ldb={ldb}");
    }
    assert_eq!(be.live_bytes(), 0);
}

fn folded_grids_cover_every_tile() {
    // Three workgroups per dimension at most: the 2-D GEMM grids fold x into z,
    // the 1-D decode and split-K reduce grids fold x into y.
    let be = backend("folded_grids_cover_every_tile", WgpuOptions { fold_limit: Some(3), ..Default::default() });
    let (w, c) = (Ops::new(be), Ops::new(switchyard_cpu_ref::cpu_backend()));
    let mut g = Gen::new(13);
    let (m, n, k) = (200, 1030, 24);
    let (a, b) = operands(&mut g, m, n, k);
    let run = |o: &Ops, f: Dense| dense(o, &a, &b, m, n, k, |o, pa, pb, pc| f(o, pa, pb, pc, m, n, k));
    assert!(run(&w, Ops::dense_gemm_bf16) == run(&c, Ops::dense_gemm_bf16), "folded dense_gemm_bf16");
    // The router's decode entry: 8 workgroups of 1 × 2 (1-D, into y) and 8 × 3 (2-D, into z).
    for (m, n, k) in [(1, 16, 24), (3, 16, 24)] {
        let (a, b) = operands(&mut g, m, n, k);
        let run = |o: &Ops, f: Dense| dense(o, &a, &b, m, n, k, |o, pa, pb, pc| f(o, pa, pb, pc, m, n, k));
        assert!(run(&w, Ops::dense_gemm_router) == run(&c, Ops::dense_gemm_bf16), "folded dense_gemm_router at m={m}");
    }
    // 8 tiles of 128 columns (tiled) and 8 groups of 32 columns (decode).
    for (n, f) in [(1024, Ops::w4a16_gemm as W4), (256, Ops::w4a16_gemm_decode)] {
        let (m, k) = (3, 32);
        let (a, _) = operands(&mut g, m, 2, k);
        let (bq, bs, s2) = random_weight(&mut g, n, k, n);
        let reference = w4(&c, &a, &bq, &bs, s2, n, m, n, k, Ops::w4a16_gemm);
        let got = w4(&w, &a, &bq, &bs, s2, n, m, n, k, f);
        assert!(nmse(&got, &reference) <= REORDERED_NMSE, "folded W4A16 at n={n}");
    }
    // Split-K: the partials' 3-D grid (one tile, 3 splits on z) never folds;
    // the reduce's 960 output words are 4 workgroups, folded into 2 × 2.
    let (m, n, k, splits) = (20, 96, 24, 3);
    let (a, b) = operands(&mut g, m, n, k);
    let split = |o: &Ops| dense(o, &a, &b, m, n, k, |o, pa, pb, pc| o.dense_gemm_splitk_bf16(pa, pb, pc, m, n, k, splits));
    assert!(split(&w) == split(&c), "folded dense_gemm_splitk_bf16");
}

switchyard_test_harness::tests!(needs "wgpu": dense_variants_equal_the_reference_and_each_other_bit_for_bit, strict_k_order_survives_cancellation, scaled_acc_equals_tc_then_scaled_add_bit_for_bit, w4a16_variants_equal_the_reference_and_lossless_equals_base, folded_grids_cover_every_tile);
switchyard_test_harness::main!(common::probe);
