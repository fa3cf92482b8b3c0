//! Where a wgpu decode step's GPU time goes: one extra recorded step replayed
//! under `WgpuBackend::time_dispatches`, every dispatch in its own pass
//! between two timestamp queries, summed per kernel entry. Nsight Compute
//! does this for CUDA (`--profile-timed-steps`); the wgpu backend has no
//! external profiler, so bench-model measures it itself.
#[cfg(feature = "wgpu")]
use anyhow::{Context, Result};
#[cfg(feature = "wgpu")]
use std::sync::Arc;
#[cfg(feature = "wgpu")]
use switchyard_core::Backend;
#[cfg(feature = "wgpu")]
use switchyard_wgpu::WgpuBackend;

/// One kernel entry's share of a profiled step.
#[derive(Clone, Debug, PartialEq)]
pub struct EntryTime {
    /// The WGSL entry point.
    pub entry: &'static str,
    /// Dispatches of this entry in the step.
    pub dispatches: usize,
    /// Their summed GPU time, in microseconds.
    pub us: f64,
}

/// The per-entry GPU time of one decode step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepProfile {
    /// Entries, the most expensive first.
    pub entries: Vec<EntryTime>,
    /// Sum of every dispatch's GPU time, in microseconds.
    pub total_us: f64,
}

/// The wgpu backend behind `be`, when it is one with timestamp queries.
#[cfg(feature = "wgpu")]
pub fn timed_wgpu(be: &Arc<dyn Backend>) -> Option<&WgpuBackend> {
    let w = be.extension()?.downcast_ref::<WgpuBackend>()?;
    w.gpu_timing().is_ok().then_some(w)
}

/// Runs `step` with every dispatch timed and sums the times per entry.
#[cfg(feature = "wgpu")]
pub fn profile_step(w: &WgpuBackend, step: &mut dyn FnMut() -> Result<()>) -> Result<StepProfile> {
    let mut failed = None;
    let times = w.time_dispatches(&mut || {
        step().map_err(|e| {
            let k = switchyard_core::Error::invalid("bench-model", "<profiled step>", format!("{e:#}"));
            failed = Some(e);
            k
        })
    });
    if let Some(e) = failed {
        return Err(e);
    }
    let times = times.context("timing a decode step's dispatches")?;
    Ok(summarise(times.iter().map(|t| (t.entry, t.ms))))
}

/// Per-entry sums of (entry, GPU ms) pairs, the most expensive first (ties by name).
pub fn summarise(times: impl IntoIterator<Item = (&'static str, f64)>) -> StepProfile {
    let mut entries: Vec<EntryTime> = Vec::new();
    for (entry, ms) in times {
        match entries.iter_mut().find(|e| e.entry == entry) {
            Some(e) => {
                e.dispatches += 1;
                e.us += ms * 1e3;
            }
            None => entries.push(EntryTime { entry, dispatches: 1, us: ms * 1e3 }),
        }
    }
    entries.sort_by(|a, b| b.us.total_cmp(&a.us).then(a.entry.cmp(b.entry)));
    let total_us = entries.iter().map(|e| e.us).sum();
    StepProfile { entries, total_us }
}

impl StepProfile {
    /// A markdown table: entry, dispatches, GPU µs, share of the step, and
    /// µs a dispatch.
    pub fn markdown(&self, step_ms: f64) -> String {
        let mut s = format!(
            "GPU time of one decode step by kernel (timestamp queries, each dispatch in its own pass): {:.1} us in {} dispatches, against {:.1} us of wall time a step untimed\n\n",
            self.total_us,
            self.entries.iter().map(|e| e.dispatches).sum::<usize>(),
            step_ms * 1e3
        );
        s.push_str("| entry | dispatches | GPU us | share | us a dispatch |\n|---|---|---|---|---|\n");
        for e in &self.entries {
            let share = if self.total_us > 0.0 { 100.0 * e.us / self.total_us } else { 0.0 };
            s.push_str(&format!("| {} | {} | {:.1} | {:.1}% | {:.2} |\n", e.entry, e.dispatches, e.us, share, e.us / e.dispatches as f64));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_summed_and_ordered_by_time() {
        let p = summarise([("norm", 0.002), ("gemv", 0.010), ("norm", 0.003), ("argmax", 0.005)]);
        let got: Vec<(&str, usize)> = p.entries.iter().map(|e| (e.entry, e.dispatches)).collect();
        assert_eq!(got, [("gemv", 1), ("argmax", 1), ("norm", 2)]);
        assert!((p.entries[2].us - 5.0).abs() < 1e-9, "{:?}", p.entries[2]);
        assert!((p.total_us - 20.0).abs() < 1e-9, "{}", p.total_us);
        let md = p.markdown(0.05);
        assert!(md.contains("| norm | 2 | 5.0 | 25.0% | 2.50 |"), "{md}");
        assert!(md.contains("20.0 us in 4 dispatches, against 50.0 us"), "{md}");
    }
}
