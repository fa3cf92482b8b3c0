//! `switchyard bench`: times kernels at production shapes and reports each as
//! a ratio to ceilings measured in the same run.
//!
//! Method: inputs are random (not zeros); each case allocates several copies
//! of its buffers and rotates among them so that L2 does not serve repeated
//! runs; a few warm-up runs and then launches until 200 ms have passed (so
//! a GPU left idle by a long host fill is back at its clocks), then repeated
//! timed runs (`Backend::time_ms`:
//! CUDA events, submit-and-wait on wgpu, wall clock on the CPU); the report
//! gives the median and the spread (min..max).
//!
//! On wgpu the timed runs are wall time (submit and wait); beside them the
//! report gives each kernel's GPU time from timestamp queries written at the
//! beginning and end of every dispatch's compute pass
//! (`WgpuBackend::time_dispatches`): the median over `--iters` launches of
//! the sum of a launch's dispatches. Where the adapter has no timestamp
//! queries the column says so; on CUDA (events) and the CPU the timed runs
//! are already device or host time and the column is empty.
mod cases;
mod report;

pub use cases::{cases, Scale};
pub use report::{markdown, Ceilings, GpuTime, Measurement};

use anyhow::{Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use switchyard_core::codec::bf16_bits;
use switchyard_core::{Backend, DeviceBuffer, Region};
use switchyard_kernels::Ops;

/// How a bench buffer is filled.
#[derive(Clone, Debug)]
pub enum Fill {
    /// Random bf16 with magnitudes up to the given bound.
    Bf16(f32),
    /// Random f32 in `[-bound, bound)`.
    F32(f32),
    /// Random bf16 bit patterns with the exponent's top bit clear (finite,
    /// |x| < 2), made from random bytes: a multi-GB table of data that does
    /// not compress, in a fraction of [`Fill::Bf16`]'s host time.
    Bits16,
    /// Zero bytes, written (unlike [`Fill::Output`], which leaves the
    /// allocation as the driver hands it over).
    Zeros,
    /// Random finite fp8 e4m3 codes.
    Fp8,
    /// Random i32 in `[lo, hi)`.
    I32(i32, i32),
    /// Distinct i32 values `0..n` shuffled (slots, permutations).
    Permutation,
    /// These exact bytes.
    Bytes(Vec<u8>),
    /// Left as allocated (outputs).
    Output,
}

/// One buffer of a bench case.
#[derive(Clone, Debug)]
pub struct BufSpec {
    /// Size in bytes.
    pub bytes: usize,
    /// Contents.
    pub fill: Fill,
}

/// A kernel at one shape.
pub struct BenchCase {
    /// Kernel symbol.
    pub kernel: &'static str,
    /// Shape description.
    pub shape: String,
    /// Buffers, in the order `run` receives their addresses.
    pub buffers: Vec<BufSpec>,
    /// Bytes the kernel must move (reads + writes of distinct data).
    pub bytes: f64,
    /// Floating-point operations the kernel must do (0 for data movement).
    pub flops: f64,
    /// Launches the kernel on one set of buffers.
    pub run: Box<dyn Fn(&Ops, &[Region]) -> switchyard_core::Result<()>>,
    /// `(m, n, k)` of the dense bf16 GEMM this case is compared with, when a
    /// vendor GEMM (cuBLAS) is the yardstick.
    pub gemm: Option<(usize, usize, usize)>,
}

/// Bench parameters.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Untimed runs before measuring.
    pub warmup: usize,
    /// Timed runs.
    pub iters: usize,
    /// Working-set size above which a case is not replicated to defeat L2.
    pub rotate_bytes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { warmup: 3, iters: 20, rotate_bytes: 256 << 20 }
    }
}

fn fill_bytes(rng: &mut SmallRng, spec: &BufSpec) -> Vec<u8> {
    let n = spec.bytes;
    match &spec.fill {
        Fill::Bf16(b) => (0..n / 2).flat_map(|_| bf16_bits(rng.random_range(-*b..*b)).to_le_bytes()).collect(),
        Fill::F32(b) => (0..n / 4).flat_map(|_| rng.random_range(-*b..*b).to_le_bytes()).collect(),
        Fill::Bits16 => {
            let mut v = vec![0u8; n];
            rng.fill(&mut v[..]);
            // Bit 14 of each little-endian bf16: the exponent's top bit.
            for hi in v.iter_mut().skip(1).step_by(2) {
                *hi &= !0x40;
            }
            v
        }
        Fill::Zeros => vec![0u8; n],
        Fill::Fp8 => {
            let mut v = vec![0u8; n];
            rng.fill(&mut v[..]);
            for x in &mut v {
                if *x & 0x7f == 0x7f {
                    *x ^= 1; // NaN code -> the largest finite code
                }
            }
            v
        }
        Fill::I32(lo, hi) => (0..n / 4).flat_map(|_| rng.random_range(*lo..*hi).to_le_bytes()).collect(),
        Fill::Permutation => {
            let mut p: Vec<i32> = (0..(n / 4) as i32).collect();
            for i in (1..p.len()).rev() {
                p.swap(i, rng.random_range(0..=i));
            }
            p.iter().flat_map(|x| x.to_le_bytes()).collect()
        }
        Fill::Bytes(b) => b.clone(),
        Fill::Output => Vec::new(),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Per-sample target: samples shorter than this batch several launches, so a
/// backend's fixed submit-and-wait cost (wgpu) is amortised, not measured.
const MIN_SAMPLE_MS: f64 = 1.0;
/// Most launches one sample may batch.
const MAX_BATCH: usize = 64;
/// Launches keep running before a case is timed until this much wall time
/// has passed: a GPU left idle through a long host fill (seconds for a
/// multi-GB table) drops to its idle clock, and a few warm-up launches do
/// not bring it back (the H200 reported 345 MHz there, and a gather timed
/// right after a 2.8 GB fill ran 2.7-2.9x slower than the same launches
/// later in the process).
const WARM_MS: f64 = 200.0;

/// Times `run` on rotating buffer sets: `(median, min, max)` in ms per launch.
/// Each sample runs `batch` launches back to back (cycling through the sets)
/// inside one timed region; `batch` is picked from a calibration sample.
fn time_runs(
    be: &Arc<dyn Backend>,
    s: &Settings,
    sets: usize,
    run: &mut dyn FnMut(usize) -> switchyard_core::Result<()>,
) -> Result<(f64, f64, f64)> {
    for i in 0..s.warmup {
        run(i % sets)?;
    }
    be.synchronize()?;
    // Launches go in batches that double until one takes a millisecond, so
    // the GPU is kept busy rather than waiting on each round trip.
    let warm = std::time::Instant::now();
    let (mut i, mut batch) = (0usize, 1usize);
    while warm.elapsed().as_secs_f64() * 1e3 < WARM_MS {
        let round = std::time::Instant::now();
        for _ in 0..batch {
            run(i % sets)?;
            i += 1;
        }
        be.synchronize()?;
        if round.elapsed().as_secs_f64() * 1e3 < MIN_SAMPLE_MS {
            batch = (batch * 2).min(MAX_BATCH);
        }
    }
    let single = be.time_ms(&mut || run(0))?;
    let batch = ((MIN_SAMPLE_MS / single.max(1e-6)).ceil() as usize).clamp(1, MAX_BATCH);
    let mut t = Vec::new();
    // --iters sizes this: an impossible count is an error, not an abort.
    t.try_reserve_exact(s.iters).map_err(|e| anyhow::anyhow!("--iters {}: cannot hold that many timings ({e})", s.iters))?;
    let mut next = 0usize;
    for _ in 0..s.iters {
        let ms = be.time_ms(&mut || {
            for _ in 0..batch {
                run(next % sets)?;
                next += 1;
            }
            Ok(())
        })?;
        t.push(ms / batch as f64);
    }
    let lo = t.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = t.iter().copied().fold(0.0, f64::max);
    Ok((median(&mut t), lo, hi))
}

/// Runs one case and measures it.
pub fn measure(ops: &Ops, case: &BenchCase, s: &Settings, seed: u64) -> Result<Measurement> {
    let be = &ops.be;
    let working: usize = case.buffers.iter().map(|b| b.bytes).sum();
    let sets = if working >= s.rotate_bytes { 1 } else { s.rotate_bytes.div_ceil(working.max(1)).min(8) };
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut owned: Vec<Vec<DeviceBuffer>> = Vec::with_capacity(sets);
    for _ in 0..sets {
        let mut set = Vec::with_capacity(case.buffers.len());
        for spec in &case.buffers {
            let buf =
                DeviceBuffer::new(be, spec.bytes.max(4)).with_context(|| format!("{}: allocating {} bytes", case.kernel, spec.bytes))?;
            let data = fill_bytes(&mut rng, spec);
            if !data.is_empty() {
                buf.write(&data)?;
            }
            set.push(buf);
        }
        owned.push(set);
    }
    let regions: Vec<Vec<Region>> = owned.iter().map(|set| set.iter().map(DeviceBuffer::region).collect()).collect();
    let (med, lo, hi) =
        time_runs(be, s, sets, &mut |i| (case.run)(ops, &regions[i])).with_context(|| format!("{} {}", case.kernel, case.shape))?;
    let gpu = gpu_time(be, s, sets, &mut |i| (case.run)(ops, &regions[i]))
        .with_context(|| format!("{} {}: GPU time", case.kernel, case.shape))?;
    Ok(Measurement {
        kernel: case.kernel.to_string(),
        shape: case.shape.clone(),
        bytes: case.bytes,
        flops: case.flops,
        median_ms: med,
        min_ms: lo,
        max_ms: hi,
        sets,
        vendor_ms: None,
        gpu,
    })
}

/// GPU time of `run` per launch on a wgpu backend: `s.iters` launches, each
/// timed alone (its dispatches' timestamp intervals summed), the median.
fn gpu_time(
    be: &Arc<dyn Backend>,
    s: &Settings,
    sets: usize,
    run: &mut dyn FnMut(usize) -> switchyard_core::Result<()>,
) -> Result<GpuTime> {
    #[cfg(feature = "wgpu")]
    if let Some(w) = be.extension().and_then(|e| e.downcast_ref::<switchyard_wgpu::WgpuBackend>()) {
        if let Err(why) = w.gpu_timing() {
            return Ok(GpuTime::Unavailable(why));
        }
        let mut per_launch = Vec::with_capacity(s.iters);
        let mut dispatches = 0;
        for i in 0..s.iters {
            let t = w.time_dispatches(&mut || run(i % sets))?;
            dispatches = t.len();
            per_launch.push(t.iter().map(|d| d.ms).sum::<f64>());
        }
        return Ok(GpuTime::Measured { median_ms: median(&mut per_launch), dispatches });
    }
    let _ = (be, s, sets, run);
    Ok(GpuTime::NotApplicable)
}

/// The copy ceilings: `Backend::copy` (the driver's device-to-device copy)
/// and the `copy_u32` kernel (what the backend's own kernels can move), of
/// the largest buffer up to `max_bytes` the backend accepts. Bandwidth counts
/// read + write bytes.
pub fn copy_ceilings(ops: &Ops, s: &Settings, max_bytes: usize) -> Result<CopyCeilings> {
    let be = &ops.be;
    let mut bytes = max_bytes;
    loop {
        match (DeviceBuffer::new(be, bytes), DeviceBuffer::new(be, bytes)) {
            (Ok(a), Ok(b)) => {
                a.write(&fill_bytes(&mut SmallRng::seed_from_u64(1), &BufSpec { bytes: bytes.min(64 << 20), fill: Fill::F32(1.0) }))?;
                let (driver, _, _) = time_runs(be, s, 1, &mut |_| be.copy(b.addr(), a.addr(), bytes))?;
                let kernel = if switchyard_core::registry::implements(be.kind(), &switchyard_kernels::util::COPY_U32) {
                    let (ms, _, _) = time_runs(be, s, 1, &mut |_| ops.copy_u32(b.region(), a.region(), bytes / 4))?;
                    Some(2.0 * bytes as f64 / (ms * 1e-3))
                } else {
                    None
                };
                return Ok(CopyCeilings { bytes, driver: 2.0 * bytes as f64 / (driver * 1e-3), kernel });
            }
            // Halve until both buffers fit (and, on wgpu, one binding holds a buffer).
            _ if bytes > (16 << 20) => bytes /= 2,
            (Err(e), _) | (_, Err(e)) => return Err(e).context("allocating copy-ceiling buffers"),
        }
    }
}

/// Copy bandwidths measured by [`copy_ceilings`], bytes per second.
#[derive(Clone, Copy, Debug)]
pub struct CopyCeilings {
    /// Bytes copied.
    pub bytes: usize,
    /// `Backend::copy`.
    pub driver: f64,
    /// The `copy_u32` kernel, where the backend implements it.
    pub kernel: Option<f64>,
}

impl CopyCeilings {
    /// The ceiling kernels are compared with: the faster of the two copies.
    pub fn best(&self) -> f64 {
        self.kernel.map_or(self.driver, |k| k.max(self.driver))
    }

    /// Words for the report header.
    pub fn describe(&self) -> String {
        let mib = self.bytes >> 20;
        match self.kernel {
            Some(k) => format!(
                "best of Backend::copy {:.1} GB/s and the copy_u32 kernel {:.1} GB/s, {mib} MiB, read + write",
                self.driver / 1e9,
                k / 1e9
            ),
            None => format!("Backend::copy of {mib} MiB, read + write"),
        }
    }
}

/// A vendor bf16 GEMM `C[m, n] = A[m, k] · B[n, k]ᵀ` on device addresses.
pub type VendorGemm<'a> = dyn Fn(u64, u64, u64, usize, usize, usize) -> switchyard_core::Result<()> + 'a;

/// Median time of the vendor GEMM at `(m, n, k)` on random bf16 operands.
pub fn measure_vendor(be: &Arc<dyn Backend>, s: &Settings, (m, n, k): (usize, usize, usize), gemm: &VendorGemm<'_>) -> Result<f64> {
    let mut rng = SmallRng::seed_from_u64(7);
    let mk = |rng: &mut SmallRng, elems: usize| -> Result<DeviceBuffer> {
        let b = DeviceBuffer::new(be, 2 * elems)?;
        b.write(&fill_bytes(rng, &BufSpec { bytes: 2 * elems, fill: Fill::Bf16(1.0) }))?;
        Ok(b)
    };
    let (a, b, c) = (mk(&mut rng, m * k)?, mk(&mut rng, n * k)?, DeviceBuffer::new(be, 2 * m * n)?);
    let (med, _, _) = time_runs(be, s, 1, &mut |_| gemm(a.addr(), b.addr(), c.addr(), m, n, k))?;
    Ok(med)
}

/// Per-launch overhead: the time of `n` back-to-back tiny launches, divided by `n`.
pub fn launch_overhead_us(ops: &Ops, n: usize) -> Result<f64> {
    let counts = DeviceBuffer::new(&ops.be, 8)?;
    let offsets = DeviceBuffer::new(&ops.be, 12)?;
    let cursor = DeviceBuffer::new(&ops.be, 8)?;
    counts.write(&[1, 0, 0, 0, 2, 0, 0, 0])?;
    ops.moe_offsets(offsets.region(), cursor.region(), counts.region(), 2)?;
    ops.be.synchronize()?;
    let ms = ops.be.time_ms(&mut || {
        for _ in 0..n {
            ops.moe_offsets(offsets.region(), cursor.region(), counts.region(), 2)?;
        }
        Ok(())
    })?;
    Ok(ms * 1e3 / n as f64)
}
