//! Every wgpu kernel against the CPU reference under DESIGN.md's tolerances.
//! No adapter: skipped with a visible reason, unless SWITCHYARD_REQUIRE_WGPU=1.
use std::sync::Arc;
use switchyard_core::{Backend, Error};
use switchyard_kernels::{parity, Ops};

/// The backend, or `None` (after printing why) when this machine has no
/// adapter and the environment does not require one.
pub fn backend_or_skip(test: &str) -> Option<Arc<dyn Backend>> {
    match switchyard_wgpu::wgpu_backend() {
        Ok(be) => Some(be),
        Err(e @ Error::Unavailable { .. }) => {
            if std::env::var("SWITCHYARD_REQUIRE_WGPU").is_ok_and(|v| v == "1") {
                panic!("SWITCHYARD_REQUIRE_WGPU=1 but {e}");
            }
            eprintln!("SKIPPED {test}: {e} (set SWITCHYARD_REQUIRE_WGPU=1 to make this a failure)");
            None
        }
        Err(e) => panic!("wgpu backend failed to start: {e}"),
    }
}

#[test]
fn every_kernel_matches_cpu_ref() {
    let Some(wgpu) = backend_or_skip("every_kernel_matches_cpu_ref") else { return };
    let info = wgpu.info();
    eprintln!("wgpu adapter: {} ({})", info.device, info.driver);
    let cpu = switchyard_cpu_ref::cpu_backend();
    let seed = std::env::var("SWITCHYARD_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed);
    let filter = std::env::var("SWITCHYARD_FILTER").ok();
    let rows = parity::run_all(&Ops::new(cpu), &Ops::new(wgpu.clone()), seed, filter.as_deref());
    println!("{}", parity::table(&rows));
    let kernels: std::collections::BTreeSet<_> = rows.iter().map(|r| r.kernel).collect();
    let failed: Vec<_> = rows.iter().filter(|r| !r.status.passed()).collect();
    assert!(failed.is_empty(), "{} of {} parity rows failed (see table above)", failed.len(), rows.len());
    if filter.is_none() {
        assert!(kernels.len() >= 14, "only {} kernels ran: {kernels:?}", kernels.len());
    }
    assert_eq!(wgpu.live_bytes(), 0, "parity leaked device memory");
}
