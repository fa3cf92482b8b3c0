//! Every wgpu kernel against the CPU reference under the parity tolerances (ARCHITECTURE.md).
//! No adapter: ignored with the reason (switchyard-test-harness), failed under SWITCHYARD_REQUIRE_WGPU=1.
use switchyard_kernels::{parity, Ops};

mod common;
use common::wgpu;

fn every_kernel_matches_cpu_ref() {
    let wgpu = wgpu("every_kernel_matches_cpu_ref");
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

switchyard_test_harness::tests!(needs "wgpu": every_kernel_matches_cpu_ref);
switchyard_test_harness::main!(common::probe);
