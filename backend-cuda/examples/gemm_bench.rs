//! GEMM-family timing against cuBLAS in the same process (issue 5):
//! prefill M in {512, 4096} and decode M in {1, 16}, (N, K) in
//! {(8192, 8192), (21504, 5376), (5376, 21504)}.
//!
//! `cargo run --release -p switchyard-cuda --example gemm_bench [-- --w4a16-prefill]`
//! (libcublas and libnvrtc on LD_LIBRARY_PATH); `--w4a16-prefill` times
//! only cuBLAS and the W4A16 kernels at the prefill sizes.
//!
//! Dense rows: TFLOP/s (2·M·N·K over the median time) and the ratio to
//! cuBLAS bf16 (f32 compute) at the same shape. W4A16 rows: GB/s over the
//! weight bytes (codes K/2·N + scales K/16·N), the ratio to a 1 GiB
//! device-to-device copy (read + write) measured in the same run, and the
//! speed-up over cuBLAS bf16 at the same (M, N, K); at M = 512 the W4A16
//! output is also compared (NMSE) with cuBLAS over the same weights
//! dequantised to bf16. Every timing is the
//! median over batches of launches that rotate among several operand sets
//! whose total exceeds L2, so weights stream from HBM; inputs are random,
//! never zeros.
use std::sync::Arc;
use switchyard_core::codec::{bf16::bf16_bits, fp8, nvfp4};
use switchyard_core::{Backend, DeviceBuffer, Region, Result};
use switchyard_cuda::{Cublas, CudaBackend};
use switchyard_kernels::gemm::w4a16::{random_weight, Fp4Weight};
use switchyard_kernels::parity::Gen;
use switchyard_kernels::Ops;

/// The device and the buffers made so far (dropping them frees them).
struct Bench {
    be: Arc<dyn Backend>,
    bufs: Vec<DeviceBuffer>,
}

impl Bench {
    /// A new buffer holding `data`, kept until `bufs` is cleared.
    fn buf(&mut self, data: &[u8]) -> Result<Region> {
        let b = DeviceBuffer::from_bytes(&self.be, data)?;
        let r = b.region();
        self.bufs.push(b);
        Ok(r)
    }
    /// Random bf16 bytes generated on the host once and uploaded `sets` times
    /// with a different bit pattern each (a byte rotation), cheap for large
    /// operands.
    fn bf16_sets(&mut self, g: &mut Gen, n: usize, sets: usize) -> Result<Vec<Region>> {
        let (_, base) = g.bf16(n.min(1 << 22), -1.0, 1.0);
        let mut out = Vec::new();
        for s in 0..sets {
            let mut v = Vec::with_capacity(2 * n);
            while v.len() < 2 * n {
                let take = (2 * n - v.len()).min(base.len());
                v.extend_from_slice(&base[..take]);
            }
            // Shift by whole bf16 elements so each set differs.
            v.rotate_left((2 * 7919 * s) % (2 * n));
            out.push(self.buf(&v)?);
        }
        Ok(out)
    }
    /// Median ms per call of `f(i)` over 7 batches of `batch` calls.
    fn time(&self, batch: usize, f: &mut dyn FnMut(usize) -> Result<()>) -> Result<f64> {
        for i in 0..batch.min(4) {
            f(i)?;
        }
        self.be.synchronize()?;
        let mut times = Vec::new();
        for _ in 0..7 {
            let ms = self.be.time_ms(&mut || {
                for i in 0..batch {
                    f(i)?;
                }
                Ok(())
            })?;
            times.push(ms / batch as f64);
        }
        times.sort_by(|a, b| a.total_cmp(b));
        Ok(times[times.len() / 2])
    }
}

const SHAPES: [(usize, usize); 3] = [(8192, 8192), (21504, 5376), (5376, 21504)];

fn main() -> Result<()> {
    let cb = Arc::new(CudaBackend::open(0)?);
    // No preload(): it would compile every module, including ones other work
    // is changing; each timing's warm-up calls load the GEMM modules instead.
    let blas = Cublas::new(&cb)?;
    let be: Arc<dyn Backend> = cb.clone();
    let ops = Ops::new(be.clone());
    let info = be.info();
    println!("device: {} ({})", info.device, info.driver);
    let mut b = Bench { be: be.clone(), bufs: Vec::new() };
    let mut g = Gen::new(0x6e33);

    let n = 1usize << 30;
    let src = b.bf16_sets(&mut g, n / 2, 1)?[0];
    let dst = b.bf16_sets(&mut g, n / 2, 1)?[0];
    let copy_ms = b.time(4, &mut |_| be.copy(dst.addr(), src.addr(), n))?;
    let copy_gbs = 2.0 * n as f64 / copy_ms / 1e6;
    println!("copy ceiling: {copy_gbs:.0} GB/s (1 GiB device-to-device, read + write)\n");
    b.bufs.clear();

    println!("cuda arch: {}\n", info.details.iter().find(|(k, _)| k == "cuda arch").map_or("?", |(_, v)| v.as_str()));
    println!(
        "## Dense bf16\n\n| M | N | K | cuBLAS TFLOP/s | pipelined TFLOP/s | % cuBLAS | pipelined vs cuBLAS NMSE | tc TFLOP/s | % cuBLAS |\n|---|---|---|---|---|---|---|---|---|"
    );
    let mut worst_nmse = 0f64;
    let mut w4_prefill = Vec::new();
    // `--w4a16-prefill`: only cuBLAS and the W4A16 kernels at M = 512 and
    // 4096, cuBLAS timed beside each W4A16 kernel over the same weights
    // dequantised to bf16. SWITCHYARD_BENCH_W4_SHAPE=MxNxK keeps one of
    // those shapes (for a profiler).
    let prefill_only = std::env::args().any(|a| a == "--w4a16-prefill");
    let only: Option<(usize, usize, usize)> = std::env::var("SWITCHYARD_BENCH_W4_SHAPE").ok().and_then(|v| {
        let d: Vec<usize> = v.split('x').filter_map(|x| x.trim().parse().ok()).collect();
        (d.len() == 3).then(|| (d[0], d[1], d[2]))
    });
    let wanted = |m: usize, n: usize, k: usize| only.map_or(true, |o| o == (m, n, k));
    for &(n, k) in if prefill_only { &[][..] } else { &SHAPES[..] } {
        let bs = b.bf16_sets(&mut g, n * k, 1)?;
        for m in [512usize, 4096] {
            let asets = b.bf16_sets(&mut g, m * k, 1)?;
            let c = b.bf16_sets(&mut g, m * n, 1)?[0];
            let flop = 2.0 * (m * n * k) as f64;
            let tf = |ms: f64| flop / ms / 1e9;
            let t_blas = b.time(10, &mut |_| blas.gemm_bf16(asets[0].addr(), bs[0].addr(), c.addr(), m, n, k))?;
            w4_prefill.push((m, n, k, t_blas));
            if prefill_only {
                println!("| {m} | {n} | {k} | {:.0} | - | - | - | - | - |", tf(t_blas));
                continue;
            }
            let t_pl = b.time(10, &mut |_| ops.dense_gemm_bf16_pipelined(asets[0], bs[0], c, m, n, k))?;
            // The pipelined output against cuBLAS's at this shape (both f32
            // accumulation, different K orders): NMSE over the whole output.
            // Fresh random buffers, so an output the kernel never wrote shows.
            let c_ref = b.bf16_sets(&mut g, m * n, 1)?[0];
            let c_chk = b.bf16_sets(&mut g, m * n, 1)?[0];
            blas.gemm_bf16(asets[0].addr(), bs[0].addr(), c_ref.addr(), m, n, k)?;
            ops.dense_gemm_bf16_pipelined(asets[0], bs[0], c_chk, m, n, k)?;
            let nmse = nmse_bf16(&be, c_chk, c_ref)?;
            worst_nmse = if nmse.is_nan() { f64::INFINITY } else { worst_nmse.max(nmse) };
            let t_tc = b.time(4, &mut |_| ops.dense_gemm_tc(asets[0], bs[0], c, m, n, k))?;
            println!(
                "| {m} | {n} | {k} | {:.0} | {:.0} | {:.0}% | {nmse:.2e} | {:.0} | {:.0}% |",
                tf(t_blas),
                tf(t_pl),
                100.0 * t_blas / t_pl,
                tf(t_tc),
                100.0 * t_blas / t_tc
            );
        }
        b.bufs.clear();
    }

    println!("\npipelined vs cuBLAS: worst NMSE {worst_nmse:.2e} ({})", if worst_nmse <= 1e-5 { "ok" } else { "MISMATCH: above 1e-5" });
    println!(
        "\n## W4A16 (NVFP4 weights)\n\n| M | N | K | kernel | us | weight GB/s | % of copy | cuBLAS bf16 us | speed-up vs cuBLAS |\n|---|---|---|---|---|---|---|---|---|"
    );
    let mut w4_nmse = 0f64;
    let mut w4_nmses = Vec::new();
    for &(n, k) in &SHAPES {
        if prefill_only && ![512, 4096].iter().any(|&m| wanted(m, n, k)) {
            continue;
        }
        // Rotate weight sets so their total (>= 150 MB) exceeds L2 (50 MB).
        let wbytes = k / 2 * n + k / 16 * n;
        let sets = (150_000_000 / wbytes).max(2) + 1;
        let mut ws = Vec::new();
        let (bq0, bs0, scale2) = random_weight(&mut g, n, k, n);
        for s in 0..sets {
            let mut q = bq0.clone();
            let len = q.len();
            q.rotate_left((977 * s) % len);
            ws.push(Fp4Weight { bq: b.buf(&q)?, bs: b.buf(&bs0)?, scale2, ldb: n });
        }
        let bsets = b.bf16_sets(&mut g, n * k, 2)?;
        for m in if prefill_only { &[][..] } else { &[1usize, 16][..] } {
            let m = *m;
            let a = b.bf16_sets(&mut g, m * k, 1)?[0];
            let c = b.bf16_sets(&mut g, m * n, 1)?[0];
            let t_blas = b.time(20, &mut |i| blas.gemm_bf16(a.addr(), bsets[i % 2].addr(), c.addr(), m, n, k))?;
            type W4 = fn(&Ops, Region, &Fp4Weight, Region, usize, usize, usize) -> Result<()>;
            let kernels: [(&str, W4); 3] =
                [("w4a16_gemm_decode", Ops::w4a16_gemm_decode), ("w4a16_gemm", Ops::w4a16_gemm), ("w4a16_gemm_n128", Ops::w4a16_gemm_n128)];
            for (name, f) in kernels {
                let t = b.time(20, &mut |i| f(&ops, a, &ws[i % sets], c, m, n, k))?;
                let gbs = wbytes as f64 / t / 1e6;
                println!(
                    "| {m} | {n} | {k} | {name} | {:.1} | {gbs:.0} | {:.0}% | {:.1} | {:.2}x |",
                    t * 1e3,
                    100.0 * gbs / copy_gbs,
                    t_blas * 1e3,
                    t_blas / t
                );
            }
        }
        // The same weights dequantised to bf16 (exact), for cuBLAS.
        let dense = if prefill_only { Some(b.buf(&dequantize_bf16(&bq0, &bs0, n, k))?) } else { None };
        for m in [512usize, 4096] {
            if !wanted(m, n, k) {
                continue;
            }
            let a = b.bf16_sets(&mut g, m * k, 1)?[0];
            let c = b.bf16_sets(&mut g, m * n, 1)?[0];
            let mut t_blas = w4_prefill.iter().find(|x| x.0 == m && x.1 == n && x.2 == k).map(|x| x.3).unwrap_or(f64::NAN);
            type W4 = fn(&Ops, Region, &Fp4Weight, Region, usize, usize, usize) -> Result<()>;
            // The prefill entry of the kernel table and the one the model calls
            // (on an sm_90a device both take the wgmma plan at these sizes);
            // with --w4a16-prefill the first only, beside cuBLAS.
            let kernels: &[(&str, W4)] = if prefill_only {
                &[("w4a16_gemm_n128_m128", Ops::w4a16_gemm_n128_m128)]
            } else {
                &[("w4a16_gemm_n128_m128", Ops::w4a16_gemm_n128_m128), ("w4a16_gemm", Ops::w4a16_gemm)]
            };
            for &(name, f) in kernels {
                if let Some(d) = dense {
                    t_blas = b.time(10, &mut |_| blas.gemm_bf16(a.addr(), d.addr(), c.addr(), m, n, k))?;
                    println!(
                        "| {m} | {n} | {k} | cuBLAS bf16 ({:.0} TFLOP/s) | {:.1} | - | - | {:.1} | 1.00x |",
                        2.0 * (m * n * k) as f64 / t_blas / 1e9,
                        t_blas * 1e3,
                        t_blas * 1e3
                    );
                }
                let t = b.time(10, &mut |i| f(&ops, a, &ws[i % sets], c, m, n, k))?;
                let flop = 2.0 * (m * n * k) as f64;
                println!(
                    "| {m} | {n} | {k} | {name} ({:.0} TFLOP/s) | {:.1} | {:.0} | {:.0}% | {:.1} | {:.2}x |",
                    flop / t / 1e9,
                    t * 1e3,
                    wbytes as f64 / t / 1e6,
                    100.0 * wbytes as f64 / t / 1e6 / copy_gbs,
                    t_blas * 1e3,
                    t_blas / t
                );
            }
            if m == 512 {
                // The output against cuBLAS over the same weights dequantised
                // to bf16 (exact) with scale2 = 1, so both sides round once
                // from f32 sums in different K orders.
                let (bq, bs) = (&bq0, &bs0);
                let one = Fp4Weight { bq: b.buf(bq)?, bs: b.buf(bs)?, scale2: 1.0, ldb: n };
                let dense = match dense {
                    Some(d) => d,
                    None => b.buf(&dequantize_bf16(bq, bs, n, k))?,
                };
                let (c_ref, c_chk) = (b.bf16_sets(&mut g, m * n, 1)?[0], b.bf16_sets(&mut g, m * n, 1)?[0]);
                blas.gemm_bf16(a.addr(), dense.addr(), c_ref.addr(), m, n, k)?;
                ops.w4a16_gemm_n128_m128(a, &one, c_chk, m, n, k)?;
                let e = nmse_bf16(&be, c_chk, c_ref)?;
                w4_nmse = if e.is_nan() { f64::INFINITY } else { w4_nmse.max(e) };
                w4_nmses.push(format!("{m}x{n}x{k} {e:.2e}"));
            }
        }
        b.bufs.clear();
    }
    println!(
        "\nw4a16 prefill vs cuBLAS on the dequantised weights: {}; worst NMSE {w4_nmse:.2e} ({})",
        w4_nmses.join(", "),
        if w4_nmse <= 1e-5 { "ok" } else { "MISMATCH: above 1e-5" }
    );
    drop(blas);
    Ok(())
}

/// The K-major NVFP4 weight (`[k/2, n]` codes, `[k/16, n]` e4m3 scales)
/// as a row-major `[n, k]` bf16 matrix without the global scale: every
/// `e2m1 · e4m3` product is exact in bf16.
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

/// Σ(x − y)² / Σ y² over two bf16 outputs on the device (y the reference).
fn nmse_bf16(be: &Arc<dyn Backend>, x: Region, y: Region) -> Result<f64> {
    let read = |r: Region| -> Result<Vec<f64>> {
        let mut bytes = vec![0u8; r.len()];
        be.download(r.addr(), &mut bytes)?;
        Ok(bytes.chunks_exact(2).map(|c| f64::from(f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16))).collect())
    };
    let (xs, ys) = (read(x)?, read(y)?);
    let (err, norm) = xs.iter().zip(&ys).fold((0f64, 0f64), |(e, n), (a, b)| (e + (a - b) * (a - b), n + b * b));
    Ok(if norm > 0.0 {
        err / norm
    } else if err == 0.0 {
        0.0
    } else {
        f64::INFINITY
    })
}
