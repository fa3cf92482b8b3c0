//! GEMM-family tests on a CUDA device (each ignored, with the reason, without one):
//! parity of all 13 kernels against the CPU reference, the bit-identical
//! contracts with `==` at awkward and larger shapes, the pipelined kernel
//! against cuBLAS, the decode kernel against the tensor-core base, and the
//! `_ldb` variant at a real vocabulary width (N = 248077).
use std::sync::Arc;
use switchyard_core::codec::{bf16::bf16_bits, bf16_value, fp8, nvfp4};
use switchyard_core::compare::nmse;
use switchyard_core::{Backend, DeviceBuffer};
use switchyard_cuda::{Cublas, CudaBackend};
use switchyard_kernels::gemm::w4a16::{self, Fp4Weight};
use switchyard_kernels::gemm::{self as g, REORDERED_NMSE};
use switchyard_kernels::parity::{self, Gen};
use switchyard_kernels::Ops;

mod common;

/// Device 0, which the harness has found (a test that needs it runs only then).
fn cuda() -> Arc<CudaBackend> {
    Arc::new(CudaBackend::open(0).unwrap_or_else(|e| panic!("opening CUDA device 0: {e}")))
}

fn dyn_be(cb: &Arc<CudaBackend>) -> Arc<dyn Backend> {
    cb.clone()
}

/// A fresh buffer holding `data`.
fn up(be: &Arc<dyn Backend>, data: &[u8]) -> DeviceBuffer {
    DeviceBuffer::from_bytes(be, data).unwrap()
}

/// A buffer of `bytes` filled with 0xff bytes (bf16 NaN pairs) so unwritten outputs show.
fn poisoned(be: &Arc<dyn Backend>, bytes: usize) -> DeviceBuffer {
    up(be, &vec![0xffu8; bytes])
}

fn down(b: &DeviceBuffer) -> Vec<u8> {
    b.to_vec().unwrap()
}

fn bf16s_f64(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(2).map(|c| bf16_value(u16::from_le_bytes([c[0], c[1]])) as f64).collect()
}

const MINE: [&switchyard_core::KernelSig; 13] = [
    &g::DENSE_GEMM_BF16,
    &g::DENSE_GEMM_ROUTER,
    &g::DENSE_GEMM_TC,
    &g::DENSE_GEMM_TC_SCALED_ACC,
    &g::SCALED_ADD_BF16,
    &g::DENSE_GEMM_SPLITK_BF16,
    &g::DENSE_GEMM_BF16_PIPELINED,
    &w4a16::W4A16_GEMM,
    &w4a16::W4A16_GEMM_N128,
    &w4a16::W4A16_GEMM_N128_LDB,
    &w4a16::W4A16_GEMM_N128_M128,
    &w4a16::W4A16_GEMM_N128_M128_BF16,
    &w4a16::W4A16_GEMM_DECODE,
];

fn gemm_family_parity_with_the_cpu_reference() {
    let cb = cuda();
    let be = dyn_be(&cb);
    let reference = Ops::new(switchyard_cpu_ref::cpu_backend());
    let cand = Ops::new(be.clone());
    let mut rows = Vec::new();
    for seed in [0x5eed, 0xbeef] {
        for sig in MINE {
            rows.extend(parity::check_kernel(&reference, &cand, sig, seed));
        }
    }
    println!("{}", parity::table(&rows));
    let failed = rows.iter().filter(|r| !r.status.passed()).count();
    assert_eq!(failed, 0, "{failed} GEMM parity failures (table above)");
    be.synchronize().unwrap();
    assert_eq!(be.live_bytes(), 0);
}

/// Shapes for the `==` contracts: M = 1, M and N ragged, K not a multiple of
/// 32 or 64, and a few full tiles.
const EXACT_SHAPES: [(usize, usize, usize); 5] = [(1, 64, 64), (17, 40, 72), (33, 130, 200), (130, 256, 1048), (300, 520, 2056)];

fn scaled_acc_equals_tc_then_scaled_add_bit_for_bit() {
    let cb = cuda();
    let be = dyn_be(&cb);
    let ops = Ops::new(be.clone());
    let mut gen = Gen::new(11);
    for &(m, n, k) in &EXACT_SHAPES {
        let (_, a) = gen.bf16(m * k, 0.01, 1.0);
        let (_, b) = gen.bf16(n * k, 0.01, 0.5);
        let (_, c0) = gen.bf16(m * n, 0.5, 2.0);
        let (a, b) = (up(&be, &a), up(&be, &b));
        let (fused, unfused, scratch) = (up(&be, &c0), up(&be, &c0), poisoned(&be, m * n * 2));
        ops.dense_gemm_tc_scaled_acc(a.region(), b.region(), fused.region(), m, n, k, 0.37).unwrap();
        ops.dense_gemm_tc(a.region(), b.region(), scratch.region(), m, n, k).unwrap();
        ops.scaled_add_bf16(unfused.region(), scratch.region(), m * n, 0.37).unwrap();
        assert!(down(&fused) == down(&unfused), "scaled_acc != tc + scaled_add at m={m} n={n} k={k}");
    }
}

/// `bf16(router_dot(a[m, ..], b[n, ..]))` on the host: the contract itself.
fn router_on_host(a: &[u8], b: &[u8], m: usize, n: usize, k: usize) -> Vec<u8> {
    let f = |x: &[u8]| x.chunks_exact(2).map(|v| bf16_value(u16::from_le_bytes([v[0], v[1]]))).collect::<Vec<f32>>();
    let (a, b) = (f(a), f(b));
    let mut out = Vec::with_capacity(m * n * 2);
    for r in 0..m {
        for c in 0..n {
            out.extend(bf16_bits(g::router_dot(&a[r * k..(r + 1) * k], &b[c * k..(c + 1) * k])).to_le_bytes());
        }
    }
    out
}

/// Both router entries (the decode chain at M ≤ 64, the tiles above) equal
/// the router order computed on the host, bit for bit.
fn router_equals_the_router_order_bit_for_bit() {
    let cb = cuda();
    let be = dyn_be(&cb);
    let ops = Ops::new(be.clone());
    let mut gen = Gen::new(12);
    for &(m, n, k) in EXACT_SHAPES.iter().chain(&[(1, 128, 2816), (16, 128, 2816), (70, 128, 2816), (65, 130, 1030)]) {
        let (_, a) = gen.bf16(m * k, 0.01, 1.0);
        let (_, b) = gen.bf16(n * k, 0.01, 0.5);
        let want = router_on_host(&a, &b, m, n, k);
        let (a, b) = (up(&be, &a), up(&be, &b));
        let c = poisoned(&be, m * n * 2);
        ops.dense_gemm_router(a.region(), b.region(), c.region(), m, n, k).unwrap();
        assert!(down(&c) == want, "router != router_dot at m={m} n={n} k={k}");
    }
}

/// The router's decode entry on sub-allocated operands: A and B that start 2
/// bytes (element loads), 4 and 8 bytes (4-byte loads) past an aligned base
/// equal the router order on the host, at the model's size and a ragged one.
fn router_decode_entry_takes_unaligned_operands() {
    let cb = cuda();
    let be = dyn_be(&cb);
    let ops = Ops::new(be.clone());
    let mut gen = Gen::new(13);
    for (m, n, k) in [(1, 128, 2816), (5, 130, 1030)] {
        let (_, a) = gen.bf16(m * k, 0.01, 1.0);
        let (_, b) = gen.bf16(n * k, 0.01, 0.5);
        let want = router_on_host(&a, &b, m, n, k);
        for off in [2usize, 4, 8] {
            let shifted = |d: &[u8]| up(&be, &[vec![0u8; off], d.to_vec()].concat());
            let (sa, sb) = (shifted(&a), shifted(&b));
            let got = poisoned(&be, m * n * 2);
            let (ra, rb) = (sa.region().tail(off).unwrap(), sb.region().tail(off).unwrap());
            ops.dense_gemm_router(ra, rb, got.region(), m, n, k).unwrap();
            assert!(down(&got) == want, "router at m={m} n={n} k={k}, operands {off} bytes off alignment");
        }
    }
}

fn lossless_w4a16_equals_the_base_kernel_bit_for_bit() {
    let cb = cuda();
    let be = dyn_be(&cb);
    let ops = Ops::new(be.clone());
    let mut gen = Gen::new(13);
    // The last two take the wgmma plan on an sm_90a device (M >= 512).
    for &(m, n, k) in
        &[(1usize, 64usize, 64usize), (17, 128, 96), (130, 192, 160), (257, 384, 1040), (64, 256, 2048), (600, 528, 208), (512, 256, 1024)]
    {
        let (_, a) = gen.bf16(m * k, 0.01, 1.0);
        let (bq, bs, scale2) = w4a16::random_weight(&mut gen, n, k, n);
        let (a, bq, bs) = (up(&be, &a), up(&be, &bq), up(&be, &bs));
        let w = Fp4Weight { bq: bq.region(), bs: bs.region(), scale2, ldb: n };
        let outs: Vec<DeviceBuffer> = (0..4).map(|_| poisoned(&be, m * n * 2)).collect();
        ops.w4a16_gemm(a.region(), &w, outs[0].region(), m, n, k).unwrap();
        ops.w4a16_gemm_n128_m128_bf16(a.region(), &w, outs[1].region(), m, n, k).unwrap();
        ops.w4a16_gemm_n128(a.region(), &w, outs[2].region(), m, n, k).unwrap();
        ops.w4a16_gemm_n128_m128(a.region(), &w, outs[3].region(), m, n, k).unwrap();
        let base = down(&outs[0]);
        assert!(base == down(&outs[1]), "lossless != base at m={m} n={n} k={k}");
        // Not a contract, but true of this implementation (one body for all tilings).
        assert!(base == down(&outs[2]), "n128 != base at m={m} n={n} k={k}");
        assert!(base == down(&outs[3]), "n128_m128 != base at m={m} n={n} k={k}");
    }
}

fn pipelined_matches_cublas_at_full_tiles() {
    let cb = cuda();
    let be = dyn_be(&cb);
    let blas = Cublas::new(&cb).expect("cuBLAS (the harness found it)");
    let ops = Ops::new(be.clone());
    let mut gen = Gen::new(14);
    for &(m, n, k) in &[(512usize, 1024usize, 1024usize), (300, 776, 1544), (1, 256, 4096)] {
        let (_, a) = gen.bf16(m * k, -1.0, 1.0);
        let (_, b) = gen.bf16(n * k, -1.0, 1.0);
        let (a, b) = (up(&be, &a), up(&be, &b));
        let (c1, c2, c3) = (poisoned(&be, m * n * 2), poisoned(&be, m * n * 2), poisoned(&be, m * n * 2));
        ops.dense_gemm_bf16_pipelined(a.region(), b.region(), c1.region(), m, n, k).unwrap();
        ops.dense_gemm_tc(a.region(), b.region(), c3.region(), m, n, k).unwrap();
        blas.gemm_bf16(a.addr(), b.addr(), c2.addr(), m, n, k).unwrap();
        let (p, t, r) = (bf16s_f64(&down(&c1)), bf16s_f64(&down(&c3)), bf16s_f64(&down(&c2)));
        let (e1, e2) = (nmse(&p, &r), nmse(&t, &r));
        println!("m={m} n={n} k={k}: NMSE pipelined vs cuBLAS {e1:.2e}, tc vs cuBLAS {e2:.2e}");
        // Both sides round to bf16 once from f32 sums in different orders.
        assert!(e1 <= REORDERED_NMSE && e2 <= REORDERED_NMSE, "m={m} n={n} k={k}: {e1:.2e} {e2:.2e}");
    }
}

fn decode_matches_the_base_kernel_at_model_widths() {
    let cb = cuda();
    let be = dyn_be(&cb);
    let ops = Ops::new(be.clone());
    let mut gen = Gen::new(15);
    for &(m, n, k) in &[(1usize, 1024usize, 5376usize), (16, 512, 8192), (9, 336, 2064)] {
        let (_, a) = gen.bf16(m * k, -1.0, 1.0);
        let (bq, bs, scale2) = w4a16::random_weight(&mut gen, n, k, n);
        let (a, bq, bs) = (up(&be, &a), up(&be, &bq), up(&be, &bs));
        let w = Fp4Weight { bq: bq.region(), bs: bs.region(), scale2, ldb: n };
        let (c1, c2) = (poisoned(&be, m * n * 2), poisoned(&be, m * n * 2));
        ops.w4a16_gemm_decode(a.region(), &w, c1.region(), m, n, k).unwrap();
        ops.w4a16_gemm(a.region(), &w, c2.region(), m, n, k).unwrap();
        let (d, r) = (bf16s_f64(&down(&c1)), bf16s_f64(&down(&c2)));
        let e = nmse(&d, &r);
        println!("decode vs base m={m} n={n} k={k}: NMSE {e:.2e}");
        assert!(e <= REORDERED_NMSE, "m={m} n={n} k={k}: NMSE {e:.2e}");
    }
}

/// Prefill sizes (the Hopper wgmma plan on an sm_90a device, mma.sync
/// elsewhere) against the CPU reference: full tiles with a long K, an output
/// ragged in M, N and K (K one 16-wide step past whole 64-wide slices), and
/// a weight whose blocks span seven decades, so that many block scales are
/// e4m3 subnormals or zero.
fn w4a16_prefill_matches_the_reference() {
    let cb = cuda();
    let be = dyn_be(&cb);
    let ops = Ops::new(be.clone());
    let reference = Ops::new(switchyard_cpu_ref::cpu_backend());
    let mut gen = Gen::new(17);
    for &(m, n, k, graded) in &[(512usize, 1024usize, 2048usize, false), (777, 784, 1040, false), (512, 256, 512, true)] {
        let (_, a) = gen.bf16(m * k, -1.0, 1.0);
        let (bq, bs, scale2) = if graded {
            let (mut v, _) = gen.f32(n * k, -0.5, 0.5);
            for (i, x) in v.iter_mut().enumerate() {
                *x *= 10f32.powi(-((i / 16 % 8) as i32));
            }
            let q = nvfp4::quantize(&v, n, k).unwrap();
            assert!(q.scales.iter().any(|&s| s != 0 && s & 0x78 == 0), "no subnormal scale");
            let (p, s) = q.k_major(n);
            (p, s, q.global_scale)
        } else {
            w4a16::random_weight(&mut gen, n, k, n)
        };
        let run = |o: &Ops| {
            let (a, bq, bs) = (up(&o.be, &a), up(&o.be, &bq), up(&o.be, &bs));
            let w = Fp4Weight { bq: bq.region(), bs: bs.region(), scale2, ldb: n };
            let c = poisoned(&o.be, m * n * 2);
            o.w4a16_gemm_n128_m128(a.region(), &w, c.region(), m, n, k).unwrap();
            down(&c)
        };
        let (got, want) = (run(&ops), run(&reference));
        let e = nmse(&bf16s_f64(&got), &bf16s_f64(&want));
        println!("w4a16_gemm_n128_m128 m={m} n={n} k={k} graded={graded}: NMSE vs cpu-ref {e:.2e}");
        assert!(e <= REORDERED_NMSE, "m={m} n={n} k={k}: NMSE {e:.2e}");
        // Every output was written (the poison is NaN).
        assert!(got.chunks_exact(2).all(|c| !bf16_value(u16::from_le_bytes([c[0], c[1]])).is_nan()), "m={m} n={n} k={k}");
    }
}

/// The K-major NVFP4 weight as a row-major `[n, k]` bf16 matrix without
/// the global scale (exact: e2m1 · e4m3 fits in bf16), for cuBLAS.
fn dequantize_bf16(bq: &[u8], bs: &[u8], n: usize, k: usize) -> Vec<u8> {
    let mut out = vec![0u8; n * k * 2];
    for (col, row) in out.chunks_exact_mut(2 * k).enumerate() {
        for kk in 0..k {
            let byte = bq[kk / 2 * n + col];
            let code = if kk % 2 == 0 { byte & 0xf } else { byte >> 4 };
            let w = nvfp4::e2m1_to_f32(code) * fp8::e4m3_to_f32(bs[kk / nvfp4::BLOCK * n + col]);
            row[2 * kk..2 * kk + 2].copy_from_slice(&bf16_bits(w).to_le_bytes());
        }
    }
    out
}

/// The Hopper plan's K split (w4a16.rs wgmma_split, on a 132-SM H200):
/// 512 x 5376 x 21504 has 84 tiles, each in 3 K ranges; 600 x 1040 x 2000
/// 27 tiles (ragged in M, N and K: the last slice 16 wide), each in 4; 512 x
/// 8576 x 1024 134 tiles, all whole (more than one round). Against cuBLAS over the same weights dequantised
/// to bf16 (scale2 = 1), every output written, and a second run equal bit
/// for bit (the last split to arrive adds the partials in split order).
/// Elsewhere (no sm_90a) the same checks hold for the mma.sync plans.
fn w4a16_split_k_matches_cublas_and_repeats() {
    let cb = cuda();
    let be = dyn_be(&cb);
    let blas = Cublas::new(&cb).expect("cuBLAS (the harness found it)");
    let ops = Ops::new(be.clone());
    let mut gen = Gen::new(19);
    for &(m, n, k) in &[(512usize, 8576usize, 1024usize), (512, 5376, 21504), (600, 1040, 2000)] {
        let (_, a) = gen.bf16(m * k, -1.0, 1.0);
        let (bq, bs, _) = w4a16::random_weight(&mut gen, n, k, n);
        let dense = up(&be, &dequantize_bf16(&bq, &bs, n, k));
        let (a, bq, bs) = (up(&be, &a), up(&be, &bq), up(&be, &bs));
        let w = Fp4Weight { bq: bq.region(), bs: bs.region(), scale2: 1.0, ldb: n };
        let (c1, c2, cr) = (poisoned(&be, m * n * 2), poisoned(&be, m * n * 2), poisoned(&be, m * n * 2));
        ops.w4a16_gemm_n128_m128(a.region(), &w, c1.region(), m, n, k).unwrap();
        ops.w4a16_gemm(a.region(), &w, c2.region(), m, n, k).unwrap();
        blas.gemm_bf16(a.addr(), dense.addr(), cr.addr(), m, n, k).unwrap();
        let (got, again, want) = (down(&c1), down(&c2), down(&cr));
        let e = nmse(&bf16s_f64(&got), &bf16s_f64(&want));
        println!("w4a16 m={m} n={n} k={k}: NMSE vs cuBLAS on the dequantised weights {e:.2e}");
        assert!(e <= REORDERED_NMSE, "m={m} n={n} k={k}: NMSE {e:.2e}");
        assert!(got.chunks_exact(2).all(|c| !bf16_value(u16::from_le_bytes([c[0], c[1]])).is_nan()), "m={m} n={n} k={k}: unwritten");
        assert!(got == again, "m={m} n={n} k={k}: two runs differ");
    }
}

fn ldb_variant_at_a_real_vocabulary_width() {
    let cb = cuda();
    let be = dyn_be(&cb);
    let ops = Ops::new(be.clone());
    let reference = Ops::new(switchyard_cpu_ref::cpu_backend());
    let mut gen = Gen::new(16);
    let (m, n, k) = (2usize, 248077usize, 64usize);
    let ldb = n.div_ceil(16) * 16;
    let (_, a) = gen.bf16(m * k, -1.0, 1.0);
    let (bq, bs, scale2) = w4a16::random_weight(&mut gen, n, k, ldb);
    let run = |o: &Ops| {
        let (a, bq, bs) = (up(&o.be, &a), up(&o.be, &bq), up(&o.be, &bs));
        let w = Fp4Weight { bq: bq.region(), bs: bs.region(), scale2, ldb };
        let c = poisoned(&o.be, m * n * 2);
        o.w4a16_gemm_n128_ldb(a.region(), &w, c.region(), m, n, k).unwrap();
        down(&c)
    };
    let (got, want) = (run(&ops), run(&reference));
    let e = nmse(&bf16s_f64(&got), &bf16s_f64(&want));
    println!("w4a16_gemm_n128_ldb m={m} n={n} ldb={ldb} k={k}: NMSE {e:.2e}");
    assert!(e <= REORDERED_NMSE, "NMSE {e:.2e}");
    // Sanity of the comparison itself: no NaN (the poison) survived.
    assert!(got.chunks_exact(2).all(|c| !bf16_value(u16::from_le_bytes([c[0], c[1]])).is_nan()));
}

switchyard_test_harness::tests!(needs "cuda": gemm_family_parity_with_the_cpu_reference, scaled_acc_equals_tc_then_scaled_add_bit_for_bit, router_equals_the_router_order_bit_for_bit, router_decode_entry_takes_unaligned_operands, lossless_w4a16_equals_the_base_kernel_bit_for_bit, w4a16_prefill_matches_the_reference, w4a16_split_k_matches_cublas_and_repeats, decode_matches_the_base_kernel_at_model_widths, ldb_variant_at_a_real_vocabulary_width);
switchyard_test_harness::tests!(needs "cublas": pipelined_matches_cublas_at_full_tiles);
switchyard_test_harness::main!(common::probe);
