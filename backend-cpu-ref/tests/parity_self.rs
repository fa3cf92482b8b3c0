//! The CPU reference against itself over every parity case: catches outputs
//! it never writes (poison), writes past an output (guard bytes), and any
//! case on which the reference itself errors.
use switchyard_core::registry;
use switchyard_cpu_ref::cpu_backend;
use switchyard_kernels::parity::{run_all, table};
use switchyard_kernels::Ops;

/// Kernel families the CPU reference implements in full.
const COVERED: [&str; 9] = ["embed", "norm", "rope_kv", "moe", "head", "gemm", "w4a16", "attn", "moe_expert"];

#[test]
fn every_parity_case_passes_cpu_vs_cpu() {
    let reference = Ops::new(cpu_backend());
    let candidate = Ops::new(cpu_backend());
    let rows = run_all(&reference, &candidate, 1, None);
    let report = table(&rows);
    assert!(rows.iter().all(|r| r.status.passed()), "{report}");
    // The families the reference covers are complete, and each kernel ran at least one case.
    for k in registry::kernels().into_iter().filter(|k| COVERED.contains(&k.module)) {
        assert!(
            registry::implements(switchyard_core::BackendKind::Cpu, k),
            "{}::{} is declared but not implemented on cpu",
            k.module,
            k.symbol
        );
        assert!(rows.iter().any(|r| r.kernel == k.symbol), "{} ran no parity case\n{report}", k.symbol);
    }
    assert_eq!(reference.be.live_bytes(), 0, "parity runs leaked allocations on the reference");
    assert_eq!(candidate.be.live_bytes(), 0, "parity runs leaked allocations on the candidate");
}
