//! The GEMM family on the CPU reference: hand-checked values (including the
//! strict k order and round-to-nearest-even on the store), the bit-identical
//! contracts (tc, pipelined and split-K with one split against the scalar
//! GEMM; the router against its own order written out; scaled_acc against GEMM then scaled_add; every W4A16 variant
//! against the base), W4A16 against an independent loop over the row-major
//! NVFP4 codes, and typed errors for shapes a kernel cannot take.
use switchyard_core::codec::bytes::{bf16_bits_from_bytes, bf16_bytes};
use switchyard_core::codec::fp8::e4m3_to_f32;
use switchyard_core::codec::nvfp4::{self, e2m1_to_f32};
use switchyard_core::codec::{bf16_bits, bf16_value};
use switchyard_core::{Arg, DeviceBuffer, Error, Region};
use switchyard_cpu_ref::cpu_backend;
use switchyard_kernels::gemm::w4a16::{Fp4Weight, W4A16_GEMM, W4A16_GEMM_DECODE, W4A16_GEMM_N128_LDB};
use switchyard_kernels::gemm::{DENSE_GEMM_BF16, DENSE_GEMM_SPLITK_BF16, SPLITK_MAX_SPLITS};
use switchyard_kernels::parity::Gen;
use switchyard_kernels::Ops;

/// A fresh buffer holding `data`.
fn up(o: &Ops, data: &[u8]) -> DeviceBuffer {
    DeviceBuffer::from_bytes(&o.be, data).unwrap()
}

/// An output of `bytes` bytes filled with 0xff (NaN as bf16), so an unwritten element shows.
fn poisoned(o: &Ops, bytes: usize) -> DeviceBuffer {
    up(o, &vec![0xff; bytes])
}

/// The bf16 elements of a buffer.
fn bits(b: &DeviceBuffer) -> Vec<u16> {
    bf16_bits_from_bytes(&b.to_vec().unwrap())
}

/// Random non-zero GEMM operands `(a [m, k], b [n, k])` as bf16 bytes, drawn
/// as the parity cases draw them.
fn operands(g: &mut Gen, m: usize, n: usize, k: usize) -> (Vec<u8>, Vec<u8>) {
    (g.bf16(m * k, 0.01, 1.0).1, g.bf16(n * k, 0.01, 0.5).1)
}

/// Runs one dense launcher on fresh buffers and returns the output bits.
fn dense(
    o: &Ops,
    a: &[u8],
    b: &[u8],
    m: usize,
    n: usize,
    k: usize,
    f: impl Fn(&Ops, Region, Region, Region, usize, usize, usize) -> switchyard_core::Result<()>,
) -> Vec<u16> {
    let (pa, pb, pc) = (up(o, a), up(o, b), poisoned(o, 2 * m * n));
    f(o, pa.region(), pb.region(), pc.region(), m, n, k).unwrap();
    bits(&pc)
}

fn vals(bits: &[u16]) -> Vec<f32> {
    bits.iter().map(|&b| bf16_value(b)).collect()
}

#[test]
fn hand_checked_2x2x2() {
    let o = Ops::new(cpu_backend());
    // A = [[1, 2], [3, 4]], B = [[5, 6], [7, 8]] (rows are output columns):
    // C = A·Bᵀ = [[1·5+2·6, 1·7+2·8], [3·5+4·6, 3·7+4·8]] = [[17, 23], [39, 53]], all exact in bf16.
    let a = bf16_bytes(&[1.0, 2.0, 3.0, 4.0]);
    let b = bf16_bytes(&[5.0, 6.0, 7.0, 8.0]);
    for f in [Ops::dense_gemm_bf16, Ops::dense_gemm_router] {
        assert_eq!(vals(&dense(&o, &a, &b, 2, 2, 2, f)), [17.0, 23.0, 39.0, 53.0]);
    }
}

#[test]
fn store_rounds_to_nearest_even_and_k_order_is_strict() {
    let o = Ops::new(cpu_backend());
    // Row a = [1, 1]: c = b0 + b1. 256 + 1 = 257 lies halfway between the bf16
    // neighbours 256 and 258 and rounds to the even mantissa (256); 256 + 3 = 259
    // lies halfway between 258 and 260 and rounds to 260.
    let a = bf16_bytes(&[1.0, 1.0]);
    let b = bf16_bytes(&[256.0, 1.0, 256.0, 3.0]);
    assert_eq!(vals(&dense(&o, &a, &b, 1, 2, 2, Ops::dense_gemm_bf16)), [256.0, 260.0]);

    // Strict k order: 0 + 1 = 1, + 2^24 = 2^24 + 1 → 2^24 in f32 (tie to even),
    // − 2^24 = 0, then + 0 five times = 0. Any other association (e.g. 2^24 − 2^24
    // first) gives 1. The second output column is the plain sum of eight ones = 8.
    // K = 8 because the tensor-core launchers take K % 8 == 0.
    let t = 16_777_216.0f32;
    let a = bf16_bytes(&[1.0; 8]);
    let mut b = vec![1.0, t, -t, 0.0, 0.0, 0.0, 0.0, 0.0];
    b.extend([1.0; 8]);
    let b = bf16_bytes(&b);
    for f in [Ops::dense_gemm_bf16, Ops::dense_gemm_router, Ops::dense_gemm_tc, Ops::dense_gemm_bf16_pipelined] {
        assert_eq!(vals(&dense(&o, &a, &b, 1, 2, 8, f)), [0.0, 8.0]);
    }
}

/// Shapes: M = 1, M not a multiple of 16 or of the 4-row panel, N not a
/// multiple of the 64-column panel, K not a multiple of 64, and one larger.
const SHAPES: [(usize, usize, usize); 5] = [(1, 64, 64), (17, 40, 72), (33, 130, 200), (70, 96, 136), (5, 322, 520)];

#[test]
fn the_router_sums_in_the_router_order() {
    let o = Ops::new(cpu_backend());
    let t = 16_777_216.0f32;
    // One row a case, a = ones, so c = Σ b (the b listed by k, zeros elsewhere):
    // - chunks 0 and 1 (partials 0 and 1): 2^24 | 1, −2^24. Strict: 2^24 + 1 → 2^24, − 2^24 = 0.
    //   Router: p0 = 2^24, p1 = 1 − 2^24 (exact), p0 + p1 = 1.
    // - four chunks: 2^24 | 1 | 1 | −2^24. The tree (p0 + p1) + (p2 + p3) = 2^24 + (1 − 2^24) = 1;
    //   the partials added in sequence would give 0.
    // - 33 chunks: chunk 32 goes to partial 0 again: p0 = 2^24 − 2^24 = 0, p1 = 1, c = 1; strict 0.
    for (k, at) in
        [(16, vec![(0, t), (8, 1.0), (9, -t)]), (32, vec![(0, t), (8, 1.0), (16, 1.0), (24, -t)]), (264, vec![(0, t), (8, 1.0), (256, -t)])]
    {
        // N is even: a second, zero column.
        let mut b = vec![0.0f32; 2 * k];
        for &(i, v) in &at {
            b[i] = v;
        }
        let (a, b) = (bf16_bytes(&vec![1.0; k]), bf16_bytes(&b));
        assert_eq!(vals(&dense(&o, &a, &b, 1, 2, k, Ops::dense_gemm_router)), [1.0, 0.0], "router at k = {k}");
        assert_eq!(vals(&dense(&o, &a, &b, 1, 2, k, Ops::dense_gemm_bf16)), [0.0, 0.0], "strict order at k = {k}");
    }
}

/// The router order written out independently of `router_dot`: the partial
/// of every k by its index, then the tree by recursion over halves.
fn router_by_halves(a: &[f32], b: &[f32]) -> f32 {
    let mut parts = [0f32; 32];
    for (kk, (&x, &y)) in a.iter().zip(b).enumerate() {
        parts[(kk / 8) % 32] += x * y;
    }
    fn tree(p: &[f32]) -> f32 {
        if p.len() == 1 {
            p[0]
        } else {
            tree(&p[..p.len() / 2]) + tree(&p[p.len() / 2..])
        }
    }
    tree(&parts)
}

#[test]
fn router_equals_the_router_order_written_out_bit_for_bit() {
    let o = Ops::new(cpu_backend());
    let mut g = Gen::new(5);
    for (m, n, k) in SHAPES.into_iter().chain([(2, 8, 2816), (1, 4, 6), (3, 2, 262)]) {
        let (a, b) = operands(&mut g, m, n, k);
        let got = dense(&o, &a, &b, m, n, k, Ops::dense_gemm_router);
        let f = |x: &[u8]| x.chunks_exact(2).map(|v| bf16_value(u16::from_le_bytes([v[0], v[1]]))).collect::<Vec<f32>>();
        let (af, bf) = (f(&a), f(&b));
        for r in 0..m {
            for c in 0..n {
                let want = bf16_bits(router_by_halves(&af[r * k..(r + 1) * k], &bf[c * k..(c + 1) * k]));
                assert_eq!(got[r * n + c], want, "router at m={m} n={n} k={k}, output ({r}, {c})");
            }
        }
    }
}

#[test]
fn tc_pipelined_and_one_split_equal_the_scalar_gemm_bit_for_bit() {
    let o = Ops::new(cpu_backend());
    let mut g = Gen::new(7);
    for (m, n, k) in SHAPES {
        let (a, b) = operands(&mut g, m, n, k);
        let base = dense(&o, &a, &b, m, n, k, Ops::dense_gemm_bf16);
        assert!(base.iter().all(|&x| !bf16_value(x).is_nan()), "m={m} n={n} k={k}: unwritten output");
        // The reference picks the scalar order for the order-free kernels too.
        assert!(dense(&o, &a, &b, m, n, k, Ops::dense_gemm_tc) == base, "tc at m={m} n={n} k={k}");
        assert!(dense(&o, &a, &b, m, n, k, Ops::dense_gemm_bf16_pipelined) == base, "pipelined at m={m} n={n} k={k}");
        assert!(dense(&o, &a, &b, m, n, k, Ops::dense_gemm_prefill) == base, "prefill at m={m} n={n} k={k}");
        // One split covers all of K in strict order; the reduce adds it to +0.
        let split1 = dense(&o, &a, &b, m, n, k, |o, a, b, c, m, n, k| o.dense_gemm_splitk_bf16(a, b, c, m, n, k, 1));
        assert!(split1 == base, "split-K with 1 split at m={m} n={n} k={k}");
    }
}

#[test]
fn scaled_acc_equals_gemm_then_scaled_add_bit_for_bit() {
    let o = Ops::new(cpu_backend());
    let mut g = Gen::new(11);
    for (m, n, k) in SHAPES {
        let (a, b) = operands(&mut g, m, n, k);
        let (_, c0) = g.bf16(m * n, 0.5, 2.0);
        for scale in [0.37f32, -1.7, 1.0] {
            let (pa, pb) = (up(&o, &a), up(&o, &b));
            let fused = up(&o, &c0);
            o.dense_gemm_tc_scaled_acc(pa.region(), pb.region(), fused.region(), m, n, k, scale).unwrap();
            let (unfused, scratch) = (up(&o, &c0), poisoned(&o, 2 * m * n));
            o.dense_gemm_tc(pa.region(), pb.region(), scratch.region(), m, n, k).unwrap();
            o.scaled_add_bf16(unfused.region(), scratch.region(), m * n, scale).unwrap();
            let (f, u) = (bits(&fused), bits(&unfused));
            assert!(f == u, "scaled_acc != tc + scaled_add at m={m} n={n} k={k} scale={scale}");
            // And the epilogue is the contract's, recomputed here from the scratch.
            let (t, c) = (vals(&bits(&scratch)), vals(&bf16_bits_from_bytes(&c0)));
            let expect: Vec<u16> = c.iter().zip(&t).map(|(&c, &t)| bf16_bits(c + scale * t)).collect();
            assert_eq!(f, expect, "epilogue at m={m} n={n} k={k} scale={scale}");
        }
    }
}

#[test]
fn splitk_chunks_past_k_are_zero_and_partials_sum_in_s_order() {
    let o = Ops::new(cpu_backend());
    let mut g = Gen::new(3);
    // k = 8, splits = 7: chunk = ⌈8/7⌉ = 2, so splits 0..4 cover K and 4..7 are empty.
    // k = 24, splits = 5: chunk = 5, the last chunk is short (20..24).
    for (m, n, k, splits) in [(3, 4, 8, 7), (5, 6, 24, 5)] {
        let (a, b) = operands(&mut g, m, n, k);
        let (av, bv) = (vals(&bf16_bits_from_bytes(&a)), vals(&bf16_bits_from_bytes(&b)));
        let c = dense(&o, &a, &b, m, n, k, |o, a, b, c, m, n, k| o.dense_gemm_splitk_bf16(a, b, c, m, n, k, splits));
        let len = k.div_ceil(splits);
        for i in 0..m {
            for j in 0..n {
                // Each chunk from +0 in k order, then the chunks from +0 in s order.
                let mut sum = 0f32;
                for s in 0..splits {
                    let mut part = 0f32;
                    for kk in (s * len).min(k)..((s + 1) * len).min(k) {
                        part += av[i * k + kk] * bv[j * k + kk];
                    }
                    sum += part;
                }
                assert_eq!(c[i * n + j], bf16_bits(sum), "c[{i}, {j}] at k={k} splits={splits}");
            }
        }
    }
}

/// A W4A16 problem: activations, the row-major NVFP4 matrix, and its K-major device bytes at `ldb`.
struct Fp4Case {
    m: usize,
    n: usize,
    k: usize,
    a: Vec<u8>,
    q: nvfp4::Nvfp4Matrix,
}

impl Fp4Case {
    fn new(g: &mut Gen, m: usize, n: usize, k: usize) -> Self {
        let (a, _) = operands(g, m, 2, k);
        let (v, _) = g.f32(n * k, -0.5, 0.5);
        Fp4Case { m, n, k, a, q: nvfp4::quantize(&v, n, k).unwrap() }
    }

    /// Independent of the K-major layout: reads the row-major codes and scales.
    fn expected(&self) -> Vec<u16> {
        let (m, n, k) = (self.m, self.n, self.k);
        let av = vals(&bf16_bits_from_bytes(&self.a));
        let mut out = Vec::with_capacity(m * n);
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0f32;
                for kk in 0..k {
                    let idx = j * k + kk;
                    let code = (self.q.packed[idx / 2] >> (4 * (idx % 2))) & 0xf;
                    let w = e2m1_to_f32(code) * e4m3_to_f32(self.q.scales[idx / nvfp4::BLOCK]);
                    acc += av[i * k + kk] * w;
                }
                out.push(bf16_bits(self.q.global_scale * acc));
            }
        }
        out
    }

    fn run(
        &self,
        o: &Ops,
        ldb: usize,
        f: fn(&Ops, Region, &Fp4Weight, Region, usize, usize, usize) -> switchyard_core::Result<()>,
    ) -> Vec<u16> {
        let (bq, bs) = self.q.k_major(ldb);
        let (pa, pq, ps, pc) = (up(o, &self.a), up(o, &bq), up(o, &bs), poisoned(o, 2 * self.m * self.n));
        let w = Fp4Weight { bq: pq.region(), bs: ps.region(), scale2: self.q.global_scale, ldb };
        f(o, pa.region(), &w, pc.region(), self.m, self.n, self.k).unwrap();
        bits(&pc)
    }
}

#[test]
fn every_w4a16_variant_equals_the_base_and_an_independent_loop() {
    let o = Ops::new(cpu_backend());
    let mut g = Gen::new(19);
    for (m, n, k) in [(1, 64, 64), (17, 128, 96), (33, 256, 208), (130, 192, 160), (16, 80, 48)] {
        let case = Fp4Case::new(&mut g, m, n, k);
        let expect = case.expected();
        let base = case.run(&o, n, Ops::w4a16_gemm);
        assert!(base == expect, "w4a16_gemm vs independent loop at m={m} n={n} k={k}");
        let lossless = case.run(&o, n, Ops::w4a16_gemm_n128_m128_bf16);
        assert!(lossless == base, "lossless != base at m={m} n={n} k={k}");
        assert!(case.run(&o, n, Ops::w4a16_gemm_n128) == base, "n128 at m={m} n={n} k={k}");
        assert!(case.run(&o, n, Ops::w4a16_gemm_n128_m128) == base, "n128_m128 at m={m} n={n} k={k}");
        // The same weights with padded rows through the explicit-stride variant.
        assert!(case.run(&o, n + 48, Ops::w4a16_gemm_n128_ldb) == base, "n128_ldb at m={m} n={n} k={k}");
        if m <= 16 {
            assert!(case.run(&o, n, Ops::w4a16_gemm_decode) == base, "decode at m={m} n={n} k={k}");
        }
    }
    // N not a multiple of 16, only through the ldb variant.
    let case = Fp4Case::new(&mut g, 3, 2477, 64);
    assert!(case.run(&o, 2560, Ops::w4a16_gemm_n128_ldb) == case.expected(), "n128_ldb at n=2477");
}

fn invalid(e: Error) -> (String, String, String) {
    match e {
        Error::InvalidArgument { kernel, arg, reason } => (kernel, arg, reason),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn shapes_a_kernel_cannot_take_are_typed_errors_from_the_kernel_itself() {
    // Raw launches, past the launcher's checks: the kernel itself must refuse.
    let be = cpu_backend();
    let (a, bq, bs, c) = (be.alloc(4096).unwrap(), be.alloc(4096).unwrap(), be.alloc(4096).unwrap(), be.alloc(4096).unwrap());
    let w4 = |m: u32, n: u32, k: u32| [Arg::P(a), Arg::P(bq), Arg::P(bs), Arg::F(1.0), Arg::P(c), Arg::U(m), Arg::U(n), Arg::U(k)];
    let (kernel, arg, reason) = invalid(be.launch(&W4A16_GEMM, &w4(1, 16, 24)).unwrap_err());
    assert_eq!((kernel.as_str(), arg.as_str()), ("w4a16_gemm", "k"), "{reason}");
    let (kernel, arg, reason) = invalid(be.launch(&W4A16_GEMM_DECODE, &w4(17, 16, 16)).unwrap_err());
    assert_eq!((kernel.as_str(), arg.as_str()), ("w4a16_gemm_decode", "m"), "{reason}");
    let mut ldb = w4(1, 64, 16).to_vec();
    ldb.push(Arg::U(48));
    let (kernel, arg, reason) = invalid(be.launch(&W4A16_GEMM_N128_LDB, &ldb).unwrap_err());
    assert_eq!((kernel.as_str(), arg.as_str()), ("w4a16_gemm_n128_ldb", "ldb"), "{reason}");
    // No chunk at all, or more partial planes than the workspace bound allows.
    for splits in [0, SPLITK_MAX_SPLITS as u32 + 1, u32::MAX] {
        let args = [Arg::P(a), Arg::P(bq), Arg::P(c), Arg::U(1), Arg::U(2), Arg::U(2), Arg::U(splits)];
        let (kernel, arg, reason) = invalid(be.launch(&DENSE_GEMM_SPLITK_BF16, &args).unwrap_err());
        assert_eq!((kernel.as_str(), arg.as_str()), ("dense_gemm_splitk_bf16", "splits"), "{reason}");
    }
    // A weight shorter than N·K: out of bounds naming b, and c left untouched.
    be.upload(c, &[0xab; 4096]).unwrap();
    let big = [Arg::P(a), Arg::P(bq), Arg::P(c), Arg::U(2), Arg::U(64), Arg::U(64)];
    match be.launch(&DENSE_GEMM_BF16, &big).unwrap_err() {
        Error::OutOfBounds { kernel, arg, .. } => assert_eq!((kernel.as_str(), arg.as_str()), ("dense_gemm_bf16", "b")),
        other => panic!("expected OutOfBounds, got {other:?}"),
    }
    let mut back = vec![0u8; 4096];
    be.download(c, &mut back).unwrap();
    assert!(back.iter().all(|&x| x == 0xab), "a failed launch wrote its output");
    for p in [a, bq, bs, c] {
        be.free(p).unwrap();
    }
}

/// Throughput of the reference at a model-sized shape. Run with
/// `cargo test --release -p switchyard-cpu-ref --test gemm -- --ignored --nocapture`.
#[test]
#[ignore = "timing only; meaningful in release builds"]
fn reference_gemm_speed() {
    let o = Ops::new(cpu_backend());
    let mut g = Gen::new(1);
    let (m, n, k) = (256, 1024, 1024);
    let (a, b) = operands(&mut g, m, n, k);
    let t = std::time::Instant::now();
    let out = dense(&o, &a, &b, m, n, k, Ops::dense_gemm_bf16);
    let dt = t.elapsed().as_secs_f64();
    println!("dense_gemm_bf16 {m}x{n}x{k}: {:.1} ms, {:.2} GFLOP/s", dt * 1e3, 2.0 * (m * n * k) as f64 / dt / 1e9);
    let case = Fp4Case::new(&mut g, m, n, k);
    let t = std::time::Instant::now();
    case.run(&o, n, Ops::w4a16_gemm);
    let dt = t.elapsed().as_secs_f64();
    println!("w4a16_gemm {m}x{n}x{k}: {:.1} ms, {:.2} GFLOP/s", dt * 1e3, 2.0 * (m * n * k) as f64 / dt / 1e9);
    assert_eq!(out.len(), m * n);
}
