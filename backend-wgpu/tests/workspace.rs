//! Plan workspace: a kernel declared only in this test binary, whose WGSL plan
//! asks for workspace (no catalogue kernel does yet). Its first pass writes
//! `3·x[i] + 7` into the workspace, its second reads it back reversed, so the
//! output is right only if the extra binding after the last pointer is bound,
//! large enough, and shared by both passes. Rising sizes replace the arena;
//! a recording made before the replacement must keep the buffer it bound.
//! A second test kernel takes the backend's arrival counters: each launch's
//! last workgroup to arrive writes how many arrived and puts the counter
//! back, so launches of different sizes back to back are right only if every
//! launch found it zero.
//! Skipped (visibly) without an adapter unless SWITCHYARD_REQUIRE_WGPU=1.
use switchyard_core::codec::bytes;
use switchyard_core::{registry, Arg, ArgSpec, BackendKind, DeviceBuffer, KernelSig, Result};
use switchyard_kernels::plan::{DeviceFacts, PlanArgs, WgslKernel, WgslPass, WgslPlan, WGSL_ARRIVAL_COUNTERS};
use switchyard_kernels::sources::Source;

mod common;
use common::wgpu;

static WORKSPACE_REVERSE: KernelSig =
    KernelSig { module: "test", symbol: "workspace_reverse", args: &[ArgSpec::output("out"), ArgSpec::input("x"), ArgSpec::i32("n")] };

const SOURCE: &str = "
struct Params { out: u32, x: u32, n: i32, gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32, }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_x: array<u32>;
@group(0) @binding(3) var<storage, read_write> d_workspace: array<u32>;

@compute @workgroup_size(64)
fn workspace_reverse(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let i = group_x(wid, nwg, p.fold) * 64u + lid;
    if (i < u32(p.n)) {
        d_workspace[i] = d_x[p.x + i] * 3u + p.x0;
    }
}

@compute @workgroup_size(64)
fn workspace_reverse_read(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                          @builtin(local_invocation_index) lid: u32) {
    let i = group_x(wid, nwg, p.fold) * 64u + lid;
    let n = u32(p.n);
    if (i < n) {
        d_out[p.out + i] = d_workspace[n - 1u - i];
    }
}
";

fn plan(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    let n = a.u32("n")?;
    let grid = [n.div_ceil(64), 1, 1];
    Ok(WgslPlan {
        passes: vec![
            WgslPass { entry: "workspace_reverse", grid, consts: vec![], extra: [7, 0, 0, 0] },
            WgslPass { entry: "workspace_reverse_read", grid, consts: vec![], extra: [0; 4] },
        ],
        workspace_bytes: 4 * n as u64,
        arrivals: 0,
    })
}

inventory::submit! { registry::Declared(&WORKSPACE_REVERSE) }
inventory::submit! { registry::Implemented { backend: BackendKind::Wgpu, kernel: &WORKSPACE_REVERSE } }
inventory::submit! {
    WgslKernel { kernel: &WORKSPACE_REVERSE, source: Source { path: "backend-wgpu/tests/workspace.rs", text: SOURCE }, plan, split: None }
}

static ARRIVALS_COUNT: KernelSig = KernelSig {
    module: "test",
    symbol: "arrivals_count",
    args: &[ArgSpec::output("out"), ArgSpec::i32("groups"), ArgSpec::i32("counters")],
};

const ARRIVALS_SOURCE: &str = "
struct Params { out: u32, groups: i32, counters: i32, gx: u32, gy: u32, gz: u32, fold: u32, x0: u32, x1: u32, x2: u32, x3: u32, }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> d_out: array<u32>;
@group(0) @binding(2) var<storage, read_write> d_arrivals: array<atomic<u32>>;

// Workgroup w arrives on counter w % 2; the last of each counter's arrivals
// writes their number to out[counter] and puts the counter back.
@compute @workgroup_size(64)
fn arrivals_count(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let w = group_x(wid, nwg, p.fold);
    let g = u32(p.groups);
    if (lid == 0u && w < g) {
        let k = w % 2u;
        let expected = g / 2u + select(0u, g % 2u, k == 0u);
        let seen = atomicAdd(&d_arrivals[k], 1u) + 1u;
        if (seen == expected) {
            d_out[p.out + k] = seen;
            atomicStore(&d_arrivals[k], 0u);
        }
    }
}
";

fn arrivals_plan(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    let groups = a.u32("groups")?;
    Ok(WgslPlan {
        passes: vec![WgslPass { entry: "arrivals_count", grid: [groups, 1, 1], consts: vec![], extra: [0; 4] }],
        workspace_bytes: 0,
        arrivals: a.u32("counters")?,
    })
}

inventory::submit! { registry::Declared(&ARRIVALS_COUNT) }
inventory::submit! { registry::Implemented { backend: BackendKind::Wgpu, kernel: &ARRIVALS_COUNT } }
inventory::submit! {
    WgslKernel {
        kernel: &ARRIVALS_COUNT,
        source: Source { path: "backend-wgpu/tests/workspace.rs#arrivals", text: ARRIVALS_SOURCE },
        plan: arrivals_plan,
        split: None,
    }
}

fn arrival_counters_start_every_launch_at_zero() {
    let be = wgpu("arrival_counters_start_every_launch_at_zero");
    let out = DeviceBuffer::zeroed(&be, 8).unwrap();
    let launch = |groups: i32, counters: i32| be.launch(&ARRIVALS_COUNT, &[Arg::P(out.addr()), Arg::I(groups), Arg::I(counters)]);
    // Back to back in one batch, then recorded and replayed.
    for groups in [7, 300, 2, 4097] {
        launch(groups, 2).unwrap();
    }
    let got = bytes::i32_from_bytes(&out.to_vec().unwrap());
    assert_eq!(got, [2049, 2048], "the last launch's arrivals per counter");
    let rec = be.record(&mut || launch(301, 2)).unwrap();
    for _ in 0..3 {
        be.replay(&rec).unwrap();
        assert_eq!(bytes::i32_from_bytes(&out.to_vec().unwrap()), [151, 150], "replay");
    }
    // A plan asking for more counters than the backend keeps is refused by name.
    let err = launch(2, WGSL_ARRIVAL_COUNTERS as i32 + 1).unwrap_err().to_string();
    assert!(err.contains("arrivals_count") && err.contains("arrival counters"), "{err}");
}

fn expected(x: &[i32]) -> Vec<i32> {
    x.iter().rev().map(|&v| v.wrapping_mul(3).wrapping_add(7)).collect()
}

fn plan_workspace_is_bound_after_the_pointers_and_outlives_arena_growth() {
    let be = wgpu("plan_workspace_is_bound_after_the_pointers_and_outlives_arena_growth");
    let launch = |out: &DeviceBuffer, x: &DeviceBuffer, n: usize| {
        be.launch(&WORKSPACE_REVERSE, &[Arg::P(out.addr()), Arg::P(x.addr()), Arg::I(n as i32)])
    };
    let small = 100usize;
    let xs: Vec<i32> = (0..small as i32).map(|i| i * 31 - 500).collect();
    let x = DeviceBuffer::from_bytes(&be, &bytes::i32_bytes(&xs)).unwrap();
    let out = DeviceBuffer::zeroed(&be, 4 * small).unwrap();
    launch(&out, &x, small).unwrap();
    assert_eq!(bytes::i32_from_bytes(&out.to_vec().unwrap()), expected(&xs), "direct launch");

    // Recorded against the small arena.
    let rec = be.record(&mut || launch(&out, &x, small)).unwrap();

    // Rising sizes replace the arena (each at least doubles it).
    for n in [1000usize, 5000, 70_000] {
        let xs: Vec<i32> = (0..n as i32).map(|i| i ^ 0x5a5a).collect();
        let x = DeviceBuffer::from_bytes(&be, &bytes::i32_bytes(&xs)).unwrap();
        let out = DeviceBuffer::zeroed(&be, 4 * n).unwrap();
        launch(&out, &x, n).unwrap();
        assert_eq!(bytes::i32_from_bytes(&out.to_vec().unwrap()), expected(&xs), "direct launch, n = {n}");
    }

    // The recording still runs on the buffer it bound, with the current input.
    let xs: Vec<i32> = (0..small as i32).map(|i| 9000 - i * i).collect();
    x.write(&bytes::i32_bytes(&xs)).unwrap();
    be.memset0(out.addr(), 4 * small).unwrap();
    be.replay(&rec).unwrap();
    assert_eq!(bytes::i32_from_bytes(&out.to_vec().unwrap()), expected(&xs), "replay after the arena grew");
}

switchyard_test_harness::tests!(needs "wgpu": plan_workspace_is_bound_after_the_pointers_and_outlives_arena_growth, arrival_counters_start_every_launch_at_zero);
switchyard_test_harness::main!(common::probe);
