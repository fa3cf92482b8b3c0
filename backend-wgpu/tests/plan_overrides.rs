//! The WGSL plans' measurement overrides, each set to the plan that is not
//! the default, against the CPU reference on the kernels they change: a
//! process of its own, since the plans read them once a process. The
//! default plans run in `parity.rs`.
//! Skipped (visibly) without an adapter unless SWITCHYARD_REQUIRE_WGPU=1.
use switchyard_kernels::{parity, Ops};

mod common;
use common::wgpu;

/// (override, its non-default value, the kernels whose plans read it).
const OVERRIDES: [(&str, &str, &str); 7] = [
    ("SWITCHYARD_WGSL_ARGMAX_PASSES", "2", "argmax_rows"),
    ("SWITCHYARD_WGSL_DECODE_PASSES", "2", "attention_decode"),
    ("SWITCHYARD_WGSL_GEMV_PASSES", "1", "dense_gemv_bf16"),
    ("SWITCHYARD_WGSL_LAYER_OUT_ROW_PASS", "1", "dense_gemv_layer_out_rmsnorm_bf16"),
    ("SWITCHYARD_WGSL_SANDWICH_ROW_PASS", "1", "dense_gemv_sandwich_gelu_mul_bf16"),
    ("SWITCHYARD_WGSL_QKV_VPL", "2", "qkv_prep_bf16"),
    ("SWITCHYARD_WGSL_ROUTE_PASSES", "2", "moe_route_decode"),
];

fn the_other_plans_match_cpu_ref() {
    for (var, value, _) in OVERRIDES {
        assert_eq!(std::env::var(var).as_deref(), Ok(value), "main sets {var} before any plan runs");
    }
    let wgpu = wgpu("the_other_plans_match_cpu_ref");
    let cpu = switchyard_cpu_ref::cpu_backend();
    // parity.rs's seed, so the two runs see the same inputs.
    let seed = std::env::var("SWITCHYARD_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed);
    for (var, _, kernel) in OVERRIDES {
        let rows = parity::run_all(&Ops::new(cpu.clone()), &Ops::new(wgpu.clone()), seed, Some(kernel));
        println!("{var}:\n{}", parity::table(&rows));
        assert!(!rows.is_empty(), "{var}: no parity case of {kernel} ran");
        let failed = rows.iter().filter(|r| !r.status.passed()).count();
        assert_eq!(failed, 0, "{var}: {failed} of {} rows of {kernel} failed (table above)", rows.len());
    }
}

switchyard_test_harness::tests!(needs "wgpu": the_other_plans_match_cpu_ref);

/// Before the harness starts any thread or backend.
fn set_overrides() {
    for (var, value, _) in OVERRIDES {
        std::env::set_var(var, value);
    }
}

switchyard_test_harness::main!(common::probe, before: set_overrides);
