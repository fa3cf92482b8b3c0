//! The parity suite: every registered kernel on every available backend
//! against the CPU reference, with the parity tolerances (ARCHITECTURE.md), poisoned outputs
//! and guard bytes. Walks the registry: a new kernel needs no new test code.
use switchyard_kernels::{parity, Ops};
use switchyard_tests::per_backend;

per_backend! {
    fn every_kernel_matches_the_reference(be) {
        let name = be.name();
        let reference = Ops::new(switchyard_cpu_ref::cpu_backend());
        let rows = parity::run_all(&reference, &Ops::new(be), 0x5eed, None);
        println!("{}", parity::table(&rows));
        assert!(!rows.is_empty(), "{name}: no kernels registered");
        let failed: Vec<_> = rows.iter().filter(|r| !r.status.passed()).collect();
        assert!(failed.is_empty(), "{name}: {} of {} parity rows failed:\n{}", failed.len(), rows.len(), parity::table(&rows));
    }
}

fn every_declared_kernel_has_parity_cases_and_a_cpu_implementation() {
    for k in switchyard_core::registry::kernels() {
        assert!(
            switchyard_core::registry::implements(switchyard_core::BackendKind::Cpu, k),
            "{} is declared but the CPU reference does not implement it",
            k.symbol
        );
        let has_cases = inventory::iter::<parity::CaseSet>.into_iter().any(|s| std::ptr::eq(s.kernel, k));
        assert!(has_cases, "{} has no parity cases", k.symbol);
    }
    assert!(switchyard_core::registry::orphan_implementations().is_empty(), "{:?}", switchyard_core::registry::orphan_implementations());
}

switchyard_tests::harness::tests!(every_declared_kernel_has_parity_cases_and_a_cpu_implementation);
switchyard_tests::main!();
