use std::fmt::Write as _;

/// One measured case.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// Kernel symbol.
    pub kernel: String,
    /// Shape description.
    pub shape: String,
    /// Bytes the kernel must move.
    pub bytes: f64,
    /// FLOPs the kernel must do.
    pub flops: f64,
    /// Median time of one run.
    pub median_ms: f64,
    /// Fastest run.
    pub min_ms: f64,
    /// Slowest run.
    pub max_ms: f64,
    /// Buffer sets rotated through.
    pub sets: usize,
    /// Median time of the vendor GEMM (cuBLAS) at this case's GEMM shape.
    pub vendor_ms: Option<f64>,
    /// GPU time from timestamp queries (wgpu), beside the timed runs' wall time.
    pub gpu: GpuTime,
}

/// A case's GPU time, measured apart from the timed runs.
#[derive(Clone, Debug)]
pub enum GpuTime {
    /// wgpu with timestamp queries: the median over launches of the sum of
    /// one launch's dispatch times, and the dispatches a launch ran.
    Measured {
        /// Median GPU milliseconds of one launch.
        median_ms: f64,
        /// Dispatches (passes) of one launch.
        dispatches: usize,
    },
    /// wgpu on an adapter without timestamp queries: why.
    Unavailable(String),
    /// Not wgpu: the timed runs already are device time (CUDA events) or host time (CPU).
    NotApplicable,
}

impl GpuTime {
    /// `(median ms of a launch, dispatches a launch)` when measured.
    pub fn measured(&self) -> Option<(f64, usize)> {
        match *self {
            GpuTime::Measured { median_ms, dispatches } => Some((median_ms, dispatches)),
            _ => None,
        }
    }

    /// The report's cell.
    fn cell(&self) -> String {
        match self {
            GpuTime::Measured { median_ms, dispatches: 1 } => format!("{median_ms:.4}"),
            GpuTime::Measured { median_ms, dispatches } => format!("{median_ms:.4} ({dispatches} passes)"),
            GpuTime::Unavailable(_) => "n/a (no timestamps)".into(),
            GpuTime::NotApplicable => "-".into(),
        }
    }
}

impl Measurement {
    /// Achieved bytes per second at the median.
    pub fn bytes_per_s(&self) -> f64 {
        self.bytes / (self.median_ms * 1e-3)
    }
    /// Achieved FLOP/s at the median.
    pub fn flops_per_s(&self) -> f64 {
        self.flops / (self.median_ms * 1e-3)
    }
}

/// Ceilings measured in the same run.
#[derive(Clone, Debug, Default)]
pub struct Ceilings {
    /// Copy bandwidth, bytes/s (read + write).
    pub copy_bytes_per_s: f64,
    /// How the copy ceiling was measured.
    pub copy_note: String,
    /// Dense bf16 GEMM FLOP/s of the vendor library, where measured.
    pub gemm_flops_per_s: Option<f64>,
    /// Per-launch overhead in microseconds.
    pub launch_overhead_us: f64,
}

/// The markdown report: a header with the ceilings and one row per case.
pub fn markdown(device: &str, backend: &str, ceilings: &Ceilings, rows: &[Measurement]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "backend `{backend}` on {device}");
    let _ = writeln!(s, "- copy ceiling: {:.1} GB/s ({})", ceilings.copy_bytes_per_s / 1e9, ceilings.copy_note);
    if let Some(g) = ceilings.gemm_flops_per_s {
        let _ = writeln!(s, "- GEMM ceiling: {:.1} TFLOP/s", g / 1e12);
    }
    let _ = writeln!(s, "- per-launch overhead: {:.2} us", ceilings.launch_overhead_us);
    if rows.iter().any(|m| matches!(m.gpu, GpuTime::Measured { .. })) {
        let _ = writeln!(
            s,
            "- GPU ms: timestamp queries at the beginning and end of each dispatch's compute pass, median over launches of a \
             launch's dispatches summed; median ms is wall time (submit and wait, batched launches); GPU GB/s is MB moved / GPU ms"
        );
    }
    if let Some(GpuTime::Unavailable(why)) = rows.iter().map(|m| &m.gpu).find(|g| matches!(g, GpuTime::Unavailable(_))) {
        let _ = writeln!(s, "- GPU ms: not measured: {why}");
    }
    s.push('\n');
    s.push_str(
        "| kernel | shape | median ms | spread ms | GPU ms | MB moved | GB/s | GPU GB/s | % of copy | GPU % of copy | TFLOP/s | % of GEMM | vs cuBLAS |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for m in rows {
        let gbs = m.bytes_per_s() / 1e9;
        let pct = 100.0 * m.bytes_per_s() / ceilings.copy_bytes_per_s;
        let (tf, tfp) = match (m.flops > 0.0, ceilings.gemm_flops_per_s) {
            (true, Some(g)) => (format!("{:.1}", m.flops_per_s() / 1e12), format!("{:.0}%", 100.0 * m.flops_per_s() / g)),
            (true, None) => (format!("{:.1}", m.flops_per_s() / 1e12), "-".into()),
            _ => ("-".into(), "-".into()),
        };
        // The GPU-time bandwidth and its share of the copy ceiling, where
        // timestamp queries measured it (what issue-style targets on wgpu
        // are stated in; wall time adds the submit-and-wait).
        let (gpu_gbs, gpu_pct) = match m.gpu {
            GpuTime::Measured { median_ms, .. } if median_ms > 0.0 => {
                let bps = m.bytes / (median_ms * 1e-3);
                (format!("{:.1}", bps / 1e9), format!("{:.0}%", 100.0 * bps / ceilings.copy_bytes_per_s))
            }
            _ => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {:.4} | {:.4}..{:.4} | {} | {:.1} | {:.1} | {} | {:.0}% | {} | {} | {} | {} |",
            m.kernel,
            m.shape,
            m.median_ms,
            m.min_ms,
            m.max_ms,
            m.gpu.cell(),
            m.bytes / 1e6,
            gbs,
            gpu_gbs,
            pct,
            gpu_pct,
            tf,
            tfp,
            m.vendor_ms.map_or("-".into(), |v| format!("{:.2}x", v / m.median_ms))
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kernel: &str, gpu: GpuTime) -> Measurement {
        Measurement {
            kernel: kernel.into(),
            shape: "s".into(),
            bytes: 2e6,
            flops: 0.0,
            median_ms: 2.0,
            min_ms: 1.5,
            max_ms: 3.0,
            sets: 1,
            vendor_ms: None,
            gpu,
        }
    }

    fn ceilings() -> Ceilings {
        Ceilings { copy_bytes_per_s: 1e10, copy_note: "c".into(), gemm_flops_per_s: None, launch_overhead_us: 10.0 }
    }

    #[test]
    fn the_gpu_column_sits_beside_wall_time() {
        let rows = [
            row("one", GpuTime::Measured { median_ms: 1.0, dispatches: 1 }),
            row("two", GpuTime::Measured { median_ms: 0.5, dispatches: 2 }),
        ];
        let md = markdown("dev", "wgpu", &ceilings(), &rows);
        assert!(
            md.contains("| kernel | shape | median ms | spread ms | GPU ms | MB moved | GB/s | GPU GB/s | % of copy | GPU % of copy |"),
            "{md}"
        );
        // 2 MB a launch against a 10 GB/s ceiling: 1 GB/s wall (10%), 2 and 4 GB/s by GPU time (20%, 40%).
        assert!(md.contains("| one | s | 2.0000 | 1.5000..3.0000 | 1.0000 | 2.0 | 1.0 | 2.0 | 10% | 20% |"), "{md}");
        assert!(md.contains("| two | s | 2.0000 | 1.5000..3.0000 | 0.5000 (2 passes) | 2.0 | 1.0 | 4.0 | 10% | 40% |"), "{md}");
        assert!(md.contains("- GPU ms: timestamp queries"), "{md}");
    }

    #[test]
    fn an_adapter_without_timestamps_says_so() {
        let md = markdown("dev", "wgpu", &ceilings(), &[row("k", GpuTime::Unavailable("no TIMESTAMP_QUERY here".into()))]);
        assert!(md.contains("- GPU ms: not measured: no TIMESTAMP_QUERY here"), "{md}");
        assert!(md.contains("| k | s | 2.0000 | 1.5000..3.0000 | n/a (no timestamps) |"), "{md}");
        let md = markdown("dev", "cuda", &ceilings(), &[row("k", GpuTime::NotApplicable)]);
        assert!(!md.contains("GPU ms:") && md.contains("| k | s | 2.0000 | 1.5000..3.0000 | - | 2.0 | 1.0 | - | 10% | - |"), "{md}");
    }
}
