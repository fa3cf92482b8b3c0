//! The two lanes variants of the WGSL kernels (ARCHITECTURE.md, "WGSL
//! sources"): with `WgpuOptions::subgroups` the device opens with
//! `wgpu::Features::SUBGROUP` where the adapter has it (lavapipe does) and
//! the row reductions run through subgroup operations; without, through
//! workgroup memory. Both run the registered parity cases of every kernel
//! that uses the lanes, and argmax inputs built around its tie rule (equal
//! maxima in different subgroups, workgroups and chunks; excluded maxima;
//! NaN and -inf rows), bytes equal to the CPU reference's.
use std::sync::Arc;
use switchyard_core::codec::bytes;
use switchyard_core::{Backend, DeviceBuffer};
use switchyard_kernels::parity::{self, Row};
use switchyard_kernels::{head, norm, Ops};
use switchyard_wgpu::{WgpuBackend, WgpuOptions};

mod common;

fn open(test: &str, subgroups: bool) -> Arc<WgpuBackend> {
    let be = WgpuBackend::new(WgpuOptions { subgroups, ..WgpuOptions::default() })
        .unwrap_or_else(|e| panic!("{test}: the wgpu backend failed to start: {e}"));
    let detail = be.info().details.iter().find(|(k, _)| k == "subgroups").map(|(_, v)| v.clone()).unwrap_or_default();
    eprintln!("{test}: subgroups = {subgroups}: {detail}");
    if subgroups {
        // On: the variant is on unless the adapter says it lacks the feature.
        assert!(be.subgroups() || detail.contains("lacks wgpu::Features::SUBGROUP"), "{test}: {detail}");
    } else {
        assert!(!be.subgroups(), "{test}: subgroups turned off but the backend reports them on: {detail}");
        assert!(detail.starts_with("off (WgpuOptions::subgroups false"), "{test}: {detail}");
    }
    be
}

fn assert_passed(what: &str, rows: &[Row]) {
    println!("{}", parity::table(rows));
    let failed = rows.iter().filter(|r| !r.status.passed()).count();
    assert!(!rows.is_empty(), "{what}: no rows ran");
    assert_eq!(failed, 0, "{what}: {failed} of {} parity rows failed (see table above)", rows.len());
}

fn parity_of_lane_kernels(test: &str, subgroups: bool) {
    let be = open(test, subgroups);
    let dynbe: Arc<dyn Backend> = be.clone();
    let cpu = Ops::new(switchyard_cpu_ref::cpu_backend());
    let wg = Ops::new(dynbe.clone());
    let mut rows = Vec::new();
    for sig in [&norm::RMSNORM_BF16, &norm::POST_NORM_ADD_PRE_NORM_BF16, &norm::LAYER_OUT_BF16, &head::ARGMAX_ROWS] {
        rows.extend(parity::check_kernel(&cpu, &wg, sig, 0x5eed));
    }
    assert_passed(test, &rows);
    argmax_ties(test, &dynbe);
    assert_eq!(dynbe.live_bytes(), 0, "{test} leaked device memory");
}

/// Rows of `vocab` logits whose maxima sit where the reductions must break
/// ties by the lowest index, run on `be` and on the CPU reference.
fn argmax_ties(test: &str, be: &Arc<dyn Backend>) {
    let cpu = switchyard_cpu_ref::cpu_backend();
    for (vocab, ex0, ex1) in [(5000usize, -1, -1), (4096, 17, 3000), (262_147, 4100, -1), (1030, -1, 5)] {
        let m = 7;
        let mut l = vec![0.0f32; m * vocab];
        for (k, x) in l.iter_mut().enumerate() {
            *x = ((k * 7919) % 1000) as f32 * 0.001 - 0.5;
        }
        let at = |l: &mut Vec<f32>, i: usize, v: usize, x: f32| l[i * vocab + v.min(vocab - 1)] = x;
        // 0: equal maxima in different invocations, subgroups and workgroups.
        for v in [4099, 9, 8, 1023, 1024, 2500] {
            at(&mut l, 0, v, 3.0);
        }
        // 1: every logit equal: the lowest eligible index.
        l[vocab..2 * vocab].fill(1.25);
        // 2: the maximum is excluded (ex0 / ex1 where set), the runner-up ties twice.
        for (v, x) in [(17, 9.0), (3000, 9.0), (5, 9.0), (4100, 9.0), (600, 2.0), (40, 2.0), (vocab - 1, 2.0)] {
            at(&mut l, 2, v, x);
        }
        // 3: all NaN: idx -1, val -inf.
        l[3 * vocab..4 * vocab].fill(f32::NAN);
        // 4: all -inf with NaN between: the lowest eligible -inf.
        for (k, x) in l[4 * vocab..5 * vocab].iter_mut().enumerate() {
            *x = if k % 3 == 0 { f32::NAN } else { f32::NEG_INFINITY };
        }
        // 5: +0 and -0 as the maximum: equal, the lowest index wins.
        l[5 * vocab..6 * vocab].fill(-1.0);
        for (v, x) in [(700, 0.0f32), (300, -0.0), (vocab - 1, 0.0)] {
            at(&mut l, 5, v, x);
        }
        // 6: the maximum in the last logit (a partial vector and chunk).
        at(&mut l, 6, vocab - 1, 5.0);
        let run = |be: &Arc<dyn Backend>| -> (Vec<u8>, Vec<u8>) {
            let ops = Ops::new(be.clone());
            let lg = DeviceBuffer::from_bytes(be, &bytes::f32_bytes(&l)).unwrap();
            let (idx, val) = (DeviceBuffer::zeroed(be, 4 * m).unwrap(), DeviceBuffer::zeroed(be, 4 * m).unwrap());
            ops.argmax_rows(idx.region(), val.region(), lg.region(), m, vocab, ex0, ex1).unwrap();
            (idx.to_vec().unwrap(), val.to_vec().unwrap())
        };
        let (wi, wv) = run(be);
        let (ci, cv) = run(&cpu);
        let (wi, ci) = (bytes::i32_from_bytes(&wi), bytes::i32_from_bytes(&ci));
        assert_eq!(wi, ci, "{test}: argmax indices at vocab {vocab} ex ({ex0}, {ex1})");
        assert_eq!(wv, cv, "{test}: argmax values at vocab {vocab} ex ({ex0}, {ex1})");
        assert_eq!(ci[3], -1, "an all-NaN row has no argmax");
    }
}

fn subgroup_lanes_match_cpu_ref() {
    parity_of_lane_kernels("subgroup_lanes_match_cpu_ref", true);
}

fn workgroup_lanes_match_cpu_ref() {
    parity_of_lane_kernels("workgroup_lanes_match_cpu_ref", false);
}

/// Both variants of every WGSL source validate with naga; the subgroup one
/// only with the subgroup capability where it uses the lanes.
fn both_variants_validate() {
    let mut failures = Vec::new();
    for (sig, src) in switchyard_kernels::sources::wgsl_all() {
        for sg in [false, true] {
            if let Err(e) = switchyard_wgpu::shader::validate_variant(&src, sg) {
                failures.push(format!("{} (subgroups {sg}): {e}", sig.symbol));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let src = switchyard_kernels::sources::wgsl(&norm::RMSNORM_BF16).unwrap();
    let composed = switchyard_wgpu::shader::compose_variant(&src, true).unwrap();
    let e = switchyard_wgpu::shader::validate_composed(&src, &composed, false).unwrap_err();
    assert!(e.to_lowercase().contains("subgroup"), "the subgroup variant without the capability: {e}");
}

switchyard_test_harness::tests!(both_variants_validate);
switchyard_test_harness::tests!(needs "wgpu":
    subgroup_lanes_match_cpu_ref,
    workgroup_lanes_match_cpu_ref,
);
switchyard_test_harness::main!(common::probe);
