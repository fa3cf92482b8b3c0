//! `switchyard bench`: times kernels at production shapes and reports each as
//! a ratio to ceilings measured in the same run.
//!
//! Method: inputs are random (not zeros); each case allocates several copies
//! of its buffers and rotates among them so that L2 does not serve repeated
//! runs; a few warm-up runs, then repeated timed runs (`Backend::time_ms`:
//! CUDA events, submit-and-wait on wgpu, wall clock on the CPU); the report
//! gives the median and the spread (min..max).
mod cases;
mod report;

pub use cases::{cases, Scale};
pub use report::{markdown, Ceilings, Measurement};

use anyhow::{Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use switchyard_core::codec::bf16_bits;
use switchyard_core::{Backend, DeviceBuffer};
use switchyard_kernels::Ops;

/// How a bench buffer is filled.
#[derive(Clone, Debug)]
pub enum Fill {
    /// Random bf16 with magnitudes up to the given bound.
    Bf16(f32),
    /// Random f32 in `[-bound, bound)`.
    F32(f32),
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
    pub run: Box<dyn Fn(&Ops, &[u64]) -> switchyard_core::Result<()>>,
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

/// Times `run` on rotating buffer sets: `(median, min, max)` in ms.
fn time_runs(be: &Arc<dyn Backend>, s: &Settings, sets: usize, run: &mut dyn FnMut(usize) -> switchyard_core::Result<()>) -> Result<(f64, f64, f64)> {
    for i in 0..s.warmup {
        run(i % sets)?;
    }
    be.synchronize()?;
    let mut t = Vec::with_capacity(s.iters);
    for i in 0..s.iters {
        t.push(be.time_ms(&mut || run(i % sets))?);
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
            let buf = DeviceBuffer::new(be, spec.bytes.max(4)).with_context(|| format!("{}: allocating {} bytes", case.kernel, spec.bytes))?;
            let data = fill_bytes(&mut rng, spec);
            if !data.is_empty() {
                buf.write(&data)?;
            }
            set.push(buf);
        }
        owned.push(set);
    }
    let addrs: Vec<Vec<u64>> = owned.iter().map(|set| set.iter().map(DeviceBuffer::addr).collect()).collect();
    let (med, lo, hi) = time_runs(be, s, sets, &mut |i| (case.run)(ops, &addrs[i])).with_context(|| format!("{} {}", case.kernel, case.shape))?;
    Ok(Measurement { kernel: case.kernel.to_string(), shape: case.shape.clone(), bytes: case.bytes, flops: case.flops, median_ms: med, min_ms: lo, max_ms: hi, sets })
}

/// Device-to-device copy bandwidth (read + write bytes per second) of the
/// largest buffer up to `max_bytes` the backend accepts.
pub fn copy_ceiling(be: &Arc<dyn Backend>, s: &Settings, max_bytes: usize) -> Result<(usize, f64)> {
    let mut bytes = max_bytes;
    loop {
        match (DeviceBuffer::new(be, bytes), DeviceBuffer::new(be, bytes)) {
            (Ok(a), Ok(b)) => {
                let (med, _, _) = time_runs(be, s, 1, &mut |_| be.copy(b.addr(), a.addr(), bytes))?;
                return Ok((bytes, 2.0 * bytes as f64 / (med * 1e-3)));
            }
            _ if bytes > (16 << 20) => bytes /= 2,
            (Err(e), _) | (_, Err(e)) => return Err(e).context("allocating copy-ceiling buffers"),
        }
    }
}

/// Per-launch overhead: the time of `n` back-to-back tiny launches, divided by `n`.
pub fn launch_overhead_us(ops: &Ops, n: usize) -> Result<f64> {
    let counts = DeviceBuffer::new(&ops.be, 8)?;
    let offsets = DeviceBuffer::new(&ops.be, 12)?;
    let cursor = DeviceBuffer::new(&ops.be, 8)?;
    counts.write(&[1, 0, 0, 0, 2, 0, 0, 0])?;
    ops.moe_offsets(offsets.addr(), cursor.addr(), counts.addr(), 2)?;
    ops.be.synchronize()?;
    let ms = ops.be.time_ms(&mut || {
        for _ in 0..n {
            ops.moe_offsets(offsets.addr(), cursor.addr(), counts.addr(), 2)?;
        }
        Ok(())
    })?;
    Ok(ms * 1e3 / n as f64)
}
