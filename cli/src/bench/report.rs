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
    let _ = writeln!(s, "- per-launch overhead: {:.2} us\n", ceilings.launch_overhead_us);
    s.push_str("| kernel | shape | median ms | spread ms | MB moved | GB/s | % of copy | TFLOP/s | % of GEMM | vs cuBLAS |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for m in rows {
        let gbs = m.bytes_per_s() / 1e9;
        let pct = 100.0 * m.bytes_per_s() / ceilings.copy_bytes_per_s;
        let (tf, tfp) = match (m.flops > 0.0, ceilings.gemm_flops_per_s) {
            (true, Some(g)) => (format!("{:.1}", m.flops_per_s() / 1e12), format!("{:.0}%", 100.0 * m.flops_per_s() / g)),
            (true, None) => (format!("{:.1}", m.flops_per_s() / 1e12), "-".into()),
            _ => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {:.4} | {:.4}..{:.4} | {:.1} | {:.1} | {:.0}% | {} | {} | {} |",
            m.kernel,
            m.shape,
            m.median_ms,
            m.min_ms,
            m.max_ms,
            m.bytes / 1e6,
            gbs,
            pct,
            tf,
            tfp,
            m.vendor_ms.map_or("-".into(), |v| format!("{:.2}x", v / m.median_ms))
        );
    }
    s
}
