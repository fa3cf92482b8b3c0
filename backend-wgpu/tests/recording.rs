//! Recordings: a recorded sequence replays bit-identically to the same
//! launches made directly, reads device memory as it is at replay, is
//! refused once a buffer it uses is freed, and refuses host transfers and
//! synchronisation while it is open. Each check runs on wgpu (ignored, with the
//! reason, without an adapter; failed under SWITCHYARD_REQUIRE_WGPU=1) and on
//! the CPU reference, whose semantics the wgpu backend mirrors.
use std::sync::Arc;
use switchyard_core::{Backend, BackendKind, DeviceBuffer, Error, Result};
use switchyard_kernels::parity::Gen;
use switchyard_kernels::Ops;

mod common;
use common::wgpu;

const ROWS: usize = 3;
const DIM: usize = 1030;
const N: usize = ROWS * DIM * 2;

/// Inputs of [`norm_chain`], one set per seed.
struct Inputs {
    x: Vec<u8>,
    resid: Vec<u8>,
    w: Vec<u8>,
    w_post: Vec<u8>,
    scalar: Vec<u8>,
}

fn inputs(seed: u64) -> Inputs {
    let mut g = Gen::new(seed);
    Inputs {
        x: g.bf16(ROWS * DIM, 0.01, 3.0).1,
        resid: g.bf16(ROWS * DIM, 0.5, 4.0).1,
        w: g.bf16(DIM, 0.1, 2.0).1,
        w_post: g.bf16(DIM, 0.05, 0.5).1,
        scalar: g.f32(1, 0.2, 1.5).1,
    }
}

/// Input and output buffers of [`norm_chain`].
struct Bufs {
    x: DeviceBuffer,
    resid: DeviceBuffer,
    w: DeviceBuffer,
    w_post: DeviceBuffer,
    scalar: DeviceBuffer,
    /// Outputs, poisoned before each run.
    outs: Vec<DeviceBuffer>,
}

/// Output sizes: normed x, resid_out, normed, layer out, its aligned copy,
/// its copy 2 bytes in (unaligned: a shader copy), the norm of the copy,
/// and a buffer zeroed at an odd offset.
const OUTS: [usize; 8] = [N, N, N, N, N, N + 2, N, 64];

fn bufs(be: &Arc<dyn Backend>) -> Bufs {
    let b = |n| DeviceBuffer::new(be, n).unwrap();
    Bufs { x: b(N), resid: b(N), w: b(2 * DIM), w_post: b(2 * DIM), scalar: b(4), outs: OUTS.iter().map(|&n| b(n)).collect() }
}

fn load(b: &Bufs, i: &Inputs) {
    b.x.write(&i.x).unwrap();
    b.resid.write(&i.resid).unwrap();
    b.w.write(&i.w).unwrap();
    b.w_post.write(&i.w_post).unwrap();
    b.scalar.write(&i.scalar).unwrap();
    for o in &b.outs {
        o.write(&vec![0xff; o.len()]).unwrap();
    }
}

fn outputs(be: &Arc<dyn Backend>, b: &Bufs) -> Vec<Vec<u8>> {
    be.synchronize().unwrap();
    b.outs.iter().map(|o| o.to_vec().unwrap()).collect()
}

/// Each launch reads what the one before wrote, and a norm reads what a
/// copy wrote, so a replay that reorders steps or drops a barrier shows.
fn norm_chain(ops: &Ops, b: &Bufs) -> Result<()> {
    let o: Vec<_> = b.outs.iter().map(|o| o.region()).collect();
    let eps = 1e-6;
    ops.rmsnorm_bf16(o[0], b.x.region(), Some(b.w.region()), ROWS, DIM, eps)?;
    ops.post_norm_add_pre_norm_bf16(o[1], Some(o[2]), b.resid.region(), o[0], Some(b.w_post.region()), Some(b.w.region()), ROWS, DIM, eps)?;
    ops.layer_out_bf16(o[3], o[1], o[2], Some(b.w_post.region()), b.scalar.region(), ROWS, DIM, eps)?;
    ops.be.copy(o[4].addr(), o[3].addr(), N)?;
    ops.be.copy(o[5].addr() + 2, o[4].addr(), N)?;
    ops.rmsnorm_bf16(o[6], o[4], None, ROWS, DIM, eps)?;
    ops.be.memset0(o[7].addr() + 3, 41)
}

fn replays_like_direct_launches(be: &Arc<dyn Backend>) {
    let ops = Ops::new(be.clone());
    let (a, b) = (inputs(1), inputs(2));
    let bf = bufs(be);
    let mut want = Vec::new();
    for i in [&a, &b] {
        load(&bf, i);
        norm_chain(&ops, &bf).unwrap();
        want.push(outputs(be, &bf));
    }
    assert_ne!(want[0], want[1], "the two input sets give the same outputs: the replay test would prove nothing");

    load(&bf, &a);
    let rec = be.record(&mut || norm_chain(&ops, &bf)).unwrap();
    assert!(rec.steps() >= 7, "{} steps recorded", rec.steps());
    assert!(outputs(be, &bf).iter().all(|o| o.iter().all(|&x| x == 0xff)), "{}: record ran work", be.name());
    for (k, i) in [&a, &b].into_iter().enumerate() {
        // New inputs in the same device memory between replays: the replay reads them.
        load(&bf, i);
        be.replay(&rec).unwrap();
        let got = outputs(be, &bf);
        for (j, (g, w)) in got.iter().zip(&want[k]).enumerate() {
            assert!(g == w, "{}: replay {k}, output {j} differs from the direct launches", be.name());
        }
    }
    // Replays queue like launches: two in a row, then one download.
    load(&bf, &a);
    be.replay(&rec).unwrap();
    be.replay(&rec).unwrap();
    assert_eq!(outputs(be, &bf), want[0], "{}: back-to-back replays", be.name());
}

fn freed_buffers_refuse_replay(be: &Arc<dyn Backend>) {
    let ops = Ops::new(be.clone());
    let bf = bufs(be);
    load(&bf, &inputs(3));
    let x = DeviceBuffer::from_bytes(be, &inputs(4).x).unwrap();
    let out = DeviceBuffer::new(be, N).unwrap();
    let launch = be.record(&mut || ops.rmsnorm_bf16(out.region(), x.region(), None, ROWS, DIM, 1e-6)).unwrap();
    let copy = be.record(&mut || be.copy(bf.outs[0].addr(), x.addr(), N)).unwrap();
    let other = be.record(&mut || norm_chain(&ops, &bf)).unwrap();
    be.replay(&launch).unwrap();
    be.replay(&copy).unwrap();
    drop(x);
    for rec in [&launch, &copy] {
        let e = be.replay(rec).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { kernel, arg, reason } if kernel == "replay" && arg == "recording" && reason.contains("freed")),
            "{}: {e}",
            be.name()
        );
    }
    // A recording whose buffers all live still replays.
    be.replay(&other).unwrap();
    be.synchronize().unwrap();
}

fn host_work_is_refused_while_recording(be: &Arc<dyn Backend>) {
    let ops = Ops::new(be.clone());
    let buf = DeviceBuffer::zeroed(be, 64).unwrap();
    let refused = |e: Error, op: &str| {
        assert!(
            matches!(&e, Error::InvalidArgument { kernel, arg, .. } if kernel == op && arg == "<recording>"),
            "{}: {op} inside record: {e}",
            be.name()
        );
    };
    refused(be.record(&mut || be.upload(buf.addr(), &[1; 8])).unwrap_err(), "upload");
    refused(be.record(&mut || be.download(buf.addr(), &mut [0; 8])).unwrap_err(), "download");
    refused(be.record(&mut || be.synchronize()).unwrap_err(), "synchronize");
    if be.kind() == BackendKind::Wgpu {
        // The CPU reference times on the wall clock and has nothing to refuse.
        refused(be.record(&mut || be.time_ms(&mut || Ok(())).map(|_| ())).unwrap_err(), "time_ms");
    }
    refused(be.record(&mut || be.record(&mut || Ok(())).map(|_| ())).unwrap_err(), "record");
    let empty = be.record(&mut || Ok(())).unwrap();
    refused(be.record(&mut || be.replay(&empty)).unwrap_err(), "replay");
    // The refused upload never landed, and the backend works normally after each refusal.
    assert_eq!(buf.to_vec().unwrap(), vec![0; 64]);
    be.upload(buf.addr(), &[7; 8]).unwrap();
    assert_eq!(buf.to_vec().unwrap()[..9], [7, 7, 7, 7, 7, 7, 7, 7, 0]);
    be.replay(&empty).unwrap();
    let x = DeviceBuffer::from_bytes(be, &inputs(5).x).unwrap();
    let out = DeviceBuffer::new(be, N).unwrap();
    let rec = be.record(&mut || ops.rmsnorm_bf16(out.region(), x.region(), None, ROWS, DIM, 1e-6)).unwrap();
    be.replay(&rec).unwrap();
    be.synchronize().unwrap();
}

fn other_instances_refuse_a_recording(be: &Arc<dyn Backend>, other: &Arc<dyn Backend>) {
    let rec = be.record(&mut || Ok(())).unwrap();
    let e = other.replay(&rec).unwrap_err();
    assert!(matches!(&e, Error::InvalidArgument { kernel, .. } if kernel == "replay"), "{}: {e}", other.name());
}

fn recorded_norms_and_copies_replay_bit_identically() {
    replays_like_direct_launches(&switchyard_cpu_ref::cpu_backend());
    let be = wgpu("recorded_norms_and_copies_replay_bit_identically");
    replays_like_direct_launches(&be);
    assert_eq!(be.live_bytes(), 0);
}

fn replay_refuses_recordings_whose_buffers_were_freed() {
    freed_buffers_refuse_replay(&switchyard_cpu_ref::cpu_backend());
    let be = wgpu("replay_refuses_recordings_whose_buffers_were_freed");
    freed_buffers_refuse_replay(&be);
}

fn uploads_downloads_and_synchronize_are_refused_inside_record() {
    host_work_is_refused_while_recording(&switchyard_cpu_ref::cpu_backend());
    let be = wgpu("uploads_downloads_and_synchronize_are_refused_inside_record");
    host_work_is_refused_while_recording(&be);
    other_instances_refuse_a_recording(&be, &switchyard_cpu_ref::cpu_backend());
    other_instances_refuse_a_recording(&switchyard_cpu_ref::cpu_backend(), &be);
}

switchyard_test_harness::tests!(needs "wgpu": recorded_norms_and_copies_replay_bit_identically, replay_refuses_recordings_whose_buffers_were_freed, uploads_downloads_and_synchronize_are_refused_inside_record);
switchyard_test_harness::main!(common::probe);
