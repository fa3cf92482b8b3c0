//! The GEMM family on wgpu beyond the parity table: the bit-identical
//! contracts tested with `==` (router vs router_dot, scaled_acc vs GEMM then
//! scaled_add, lossless W4A16 vs base), shapes with several tiles in every
//! direction and an odd N over several rows, and grid folding.
//!
//! The WGSL GEMMs other than the router sum every output in strict k order
//! (see the tile cores), so on this backend even the order-free kernels (tc,
//! pipelined, split-K, the tiled W4A16 variants) equal the CPU reference
//! exactly; the tests hold them to that, which is stronger than the parity
//! suite's NMSE bound. Only `w4a16_gemm_decode` splits K across threads and
//! is compared by NMSE. The router and the fused routing's logits follow
//! router_dot's order instead, held to it on operands that tell orders apart.
use switchyard_core::codec::bytes::bf16_bits_from_bytes;
use switchyard_core::codec::{bf16_bits, bf16_value};
use switchyard_core::{DeviceBuffer, Region};
use switchyard_kernels::gemm::w4a16::{random_weight, Fp4Weight};
use switchyard_kernels::gemm::{router_dot, REORDERED_NMSE};
use switchyard_kernels::moe::expert::RouteDecodeOut;
use switchyard_kernels::parity::{mirror_halves, Gen};
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
        assert!(run(&w, Ops::dense_gemm_router) == run(&c, Ops::dense_gemm_router), "router != cpu-ref at m={m} n={n} k={k}");
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
    for f in [Ops::dense_gemm_bf16 as Dense, Ops::dense_gemm_tc, Ops::dense_gemm_bf16_pipelined] {
        let out = dense(&o, &a, &b, 1, 2, k, |o, pa, pb, pc| f(o, pa, pb, pc, 1, 2, k));
        assert_eq!(out.iter().map(|&x| bf16_value(x)).collect::<Vec<_>>(), [0.0, 40.0]);
    }
}

fn router_order_survives_cancellation() {
    let be = backend("router_order_survives_cancellation", WgpuOptions::default());
    let o = Ops::new(be);
    // Partials (chunks of 8 k, k = 0, 8, 9, 16, 24 of K = 40): p0 = 2^24,
    // p1 = 1 + 1 = 2, p2 = -2^24, p3 = -1. The tree: (2^24 + 2) + (-2^24 - 1
    // = -2^24, tie to even) = 2. Strict k order gives -1 (each 1 lost to
    // 2^24), the partials added in order ((p0 + p1) + p2) + p3 = 1.
    let t = 16_777_216.0f32;
    let k = 40;
    let mut bv = vec![0.0f32; 2 * k];
    for (i, v) in [(0, t), (8, 1.0), (9, 1.0), (16, -t), (24, -1.0)] {
        bv[i] = v;
    }
    bv[k..].fill(1.0);
    let b = switchyard_core::codec::bytes::bf16_bytes(&bv);
    // The decode entry (M = 1) and the tiles (M = 65).
    for m in [1, 65] {
        let a = switchyard_core::codec::bytes::bf16_bytes(&vec![1.0; m * k]);
        let out = dense(&o, &a, &b, m, 2, k, |o, pa, pb, pc| o.dense_gemm_router(pa, pb, pc, m, 2, k));
        assert_eq!(out.iter().map(|&x| bf16_value(x)).collect::<Vec<_>>(), [2.0, 40.0].repeat(m), "m={m}");
    }
}

/// Each output's bf16 bits in router_dot's order and in strict k order.
fn router_and_strict(a: &[f32], b: &[f32], k: usize) -> (Vec<u16>, Vec<u16>) {
    let mut router = Vec::new();
    let mut strict = Vec::new();
    for ar in a.chunks_exact(k) {
        for br in b.chunks_exact(k) {
            router.push(bf16_bits(router_dot(ar, br)));
            strict.push(bf16_bits(ar.iter().zip(br).fold(0.0f32, |s, (&x, &y)| s + x * y)));
        }
    }
    (router, strict)
}

/// Whether most outputs tell the two orders apart (else the operands test nothing).
fn orders_differ(router: &[u16], strict: &[u16]) -> bool {
    2 * router.iter().zip(strict).filter(|(r, s)| r != s).count() > router.len()
}

/// Operands whose every output is exactly 0 but is summed through
/// intermediates many binades above it: the second half of k repeats the
/// first (one permutation for all rows of A and B) with B negated, so an output is its
/// order's rounding error alone, and another order of the chunks, of the k
/// within a partial or of the tree gives other bits. Decode shapes (two
/// staged pieces at M = 16 and K = 2816 with lavapipe's 32 KiB, a piece
/// boundary off the 32-chunk rounds and a short last chunk at 5 × 130 ×
/// 2822, partials past K at K = 64) and tiled ones (M > 64).
fn router_sums_in_the_router_order() {
    let be = backend("router_sums_in_the_router_order", WgpuOptions::default());
    let o = Ops::new(be.clone());
    let mut g = Gen::new(34);
    for (m, n, k) in [(1, 128, 2816), (16, 128, 2816), (5, 130, 2822), (64, 64, 1030), (1, 64, 64), (65, 64, 1030), (130, 130, 2816)] {
        let mut a = g.binades(m * k, -4, 4);
        let mut b = g.binades(n * k, -8, 8);
        let perm = g.permutation(k / 2);
        mirror_halves(&perm, &mut a, k, false);
        mirror_halves(&perm, &mut b, k, true);
        let (router, strict) = router_and_strict(&a, &b, k);
        assert!(orders_differ(&router, &strict), "m={m} n={n} k={k}: the operands do not tell the orders apart");
        let (ab, bb) = (switchyard_core::codec::bytes::bf16_bytes(&a), switchyard_core::codec::bytes::bf16_bytes(&b));
        let got = dense(&o, &ab, &bb, m, n, k, |o, pa, pb, pc| o.dense_gemm_router(pa, pb, pc, m, n, k));
        let bad = got.iter().zip(&router).filter(|(x, y)| x != y).count();
        assert!(bad == 0, "router != router_dot at m={m} n={n} k={k}: {bad} of {} outputs", m * n);
    }
    assert_eq!(be.live_bytes(), 0);
}

/// moe_route_decode's logits on the same kind of operands: x = ±c (c a
/// power of two, so inv = 1/c exactly), scale and router_w spread over
/// binades, rn = ±scale · root exact; the second half of each row repeats
/// the first (router_w negated), so every logit is its order's rounding
/// error. dim 2816 (11 rounds), 3072 (the most, 12), 264 (lanes 0 and 1
/// take a second chunk) and 64 (8 of the 32 partials).
fn route_decode_logits_follow_the_router_order() {
    let be = backend("route_decode_logits_follow_the_router_order", WgpuOptions::default());
    let o = Ops::new(be.clone());
    let mut g = Gen::new(55);
    let (eps, root) = (1e-6f32, 1.0f32 / 64.0);
    for (rows, dim, e) in [(1, 2816, 128), (4, 2816, 64), (3, 3072, 32), (2, 264, 32), (3, 64, 16)] {
        let top_k = 2;
        let (signs, _) = g.i32(rows * dim, 0, 2);
        let mut x: Vec<f32> =
            signs.iter().enumerate().map(|(i, &s)| [8.0f32, 16.0, 32.0][i / dim % 3] * if s == 0 { 1.0 } else { -1.0 }).collect();
        let perm = g.permutation(dim / 2);
        mirror_halves(&perm, &mut x, dim, false);
        let mut scale = g.binades(dim, -4, 4);
        mirror_halves(&perm, &mut scale, dim, false);
        let mut w = g.binades(e * dim, -6, 6);
        mirror_halves(&perm, &mut w, dim, true);
        let rn: Vec<f32> = x
            .chunks_exact(dim)
            .flat_map(|xr| {
                let inv = 1.0 / (xr.iter().map(|v| v * v).sum::<f32>() / dim as f32 + eps).sqrt();
                xr.iter().zip(&scale).map(move |(&v, &s)| bf16_value(bf16_bits(v * inv * s * root))).collect::<Vec<_>>()
            })
            .collect();
        let (router, strict) = router_and_strict(&rn, &w, dim);
        assert!(orders_differ(&router, &strict), "rows={rows} dim={dim} e={e}: the operands do not tell the orders apart");
        let bf = switchyard_core::codec::bytes::bf16_bytes;
        let (px, ps, pw) = (up(&o, &bf(&x)), up(&o, &bf(&scale)), up(&o, &bf(&w)));
        let pes = up(&o, &switchyard_core::codec::bytes::f32_bytes(&vec![1.0; e]));
        let pairs = rows * top_k;
        let outs = [4 * pairs, 4 * pairs, 4 * (e + 1), 4 * pairs, 4 * pairs, 2 * rows * e].map(|n| poisoned(&o, n));
        let out = RouteDecodeOut {
            topk_ids: outs[0].region(),
            topk_w: outs[1].region(),
            offsets: outs[2].region(),
            pair_of_slot: outs[3].region(),
            slot_of_pair: outs[4].region(),
            logits: outs[5].region(),
        };
        o.moe_route_decode(out, px.region(), ps.region(), pw.region(), pes.region(), rows, dim, e, top_k, eps, root).unwrap();
        let got = bits(&outs[5]);
        let bad = got.iter().zip(&router).filter(|(x, y)| x != y).count();
        assert!(bad == 0, "logits != router_dot at rows={rows} dim={dim} e={e}: {bad} of {}", rows * e);
    }
    assert_eq!(be.live_bytes(), 0);
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
        assert!(run(&w, Ops::dense_gemm_router) == run(&c, Ops::dense_gemm_router), "folded dense_gemm_router at m={m}");
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

switchyard_test_harness::tests!(needs "wgpu": dense_variants_equal_the_reference_and_each_other_bit_for_bit, strict_k_order_survives_cancellation, router_order_survives_cancellation, router_sums_in_the_router_order, route_decode_logits_follow_the_router_order, scaled_acc_equals_tc_then_scaled_add_bit_for_bit, w4a16_variants_equal_the_reference_and_lossless_equals_base, folded_grids_cover_every_tile);
switchyard_test_harness::main!(common::probe);
