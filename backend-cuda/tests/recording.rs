//! Recordings (CUDA graphs captured from the stream), concurrent pieces
//! (a side stream forked and joined) and the CUDA-only tuning launch, on a
//! device. Each test shows as ignored with the reason
//! where `cuda_backend()` is unavailable (fails instead under SWITCHYARD_REQUIRE_CUDA=1).
use std::sync::Arc;
use switchyard_core::{Arg::*, Backend, DeviceBuffer, Error, Result};
use switchyard_cuda::CudaBackend;
use switchyard_kernels::norm::{norm_block, RMSNORM_BF16};
use switchyard_kernels::Ops;

mod common;
use common::{bf16_data, cuda, poison};

const EPS: f32 = 1e-6;

/// The buffers of a short decoder-like sequence: a copy, a memset and the
/// three norm kernels chained through each other's outputs.
struct Norms {
    rows: usize,
    dim: usize,
    x_in: DeviceBuffer,
    resid: DeviceBuffer,
    w_post: DeviceBuffer,
    w_pre: DeviceBuffer,
    w: DeviceBuffer,
    layer_scalar: DeviceBuffer,
    x_work: DeviceBuffer,
    zeroed: DeviceBuffer,
    resid_out: DeviceBuffer,
    normed: DeviceBuffer,
    out1: DeviceBuffer,
    out2: DeviceBuffer,
}

impl Norms {
    fn new(be: &Arc<dyn Backend>, rows: usize, dim: usize) -> Norms {
        let act = || DeviceBuffer::new(be, rows * dim * 2).unwrap();
        let row = || DeviceBuffer::new(be, dim * 2).unwrap();
        Norms {
            rows,
            dim,
            x_in: act(),
            resid: act(),
            w_post: row(),
            w_pre: row(),
            w: row(),
            layer_scalar: DeviceBuffer::new(be, 4).unwrap(),
            x_work: act(),
            zeroed: act(),
            resid_out: act(),
            normed: act(),
            out1: act(),
            out2: act(),
        }
    }

    /// New input values in device memory (what a caller changes between replays).
    fn set_inputs(&self, seed: u64) {
        let n = self.rows * self.dim;
        self.x_in.write(&bf16_data(n, seed, 0.01, 3.0)).unwrap();
        self.resid.write(&bf16_data(n, seed + 100, 0.5, 4.0)).unwrap();
        self.w_post.write(&bf16_data(self.dim, seed + 200, 0.05, 0.5)).unwrap();
        self.w_pre.write(&bf16_data(self.dim, seed + 300, 0.1, 2.0)).unwrap();
        self.w.write(&bf16_data(self.dim, seed + 400, 0.1, 2.0)).unwrap();
        self.layer_scalar.write(&(0.5f32 + seed as f32 * 0.25).to_le_bytes()).unwrap();
    }

    fn outputs(&self) -> [&DeviceBuffer; 6] {
        [&self.x_work, &self.zeroed, &self.resid_out, &self.normed, &self.out1, &self.out2]
    }

    fn poison_outputs(&self) {
        self.outputs().into_iter().for_each(poison);
    }

    fn read_outputs(&self) -> Vec<Vec<u8>> {
        self.outputs().iter().map(|b| b.to_vec().unwrap()).collect()
    }

    /// Five steps: copy, memset0, the sandwich, rmsnorm of its second
    /// output, layer_out of both.
    fn run(&self, ops: &Ops) -> Result<()> {
        let (rows, dim) = (self.rows, self.dim);
        ops.be.copy(self.x_work.addr(), self.x_in.addr(), self.x_in.len())?;
        ops.be.memset0(self.zeroed.addr(), self.zeroed.len())?;
        ops.post_norm_add_pre_norm_bf16(
            self.resid_out.region(),
            Some(self.normed.region()),
            self.resid.region(),
            self.x_work.region(),
            Some(self.w_post.region()),
            Some(self.w_pre.region()),
            rows,
            dim,
            EPS,
        )?;
        ops.rmsnorm_bf16(self.out1.region(), self.normed.region(), Some(self.w.region()), rows, dim, EPS)?;
        ops.layer_out_bf16(
            self.out2.region(),
            self.resid_out.region(),
            self.out1.region(),
            Some(self.w.region()),
            self.layer_scalar.region(),
            rows,
            dim,
            EPS,
        )
    }
}

/// Whether any bf16 element of `bytes` is the poison pattern.
fn has_poison(bytes: &[u8]) -> bool {
    bytes.chunks(2).any(|c| c == [0xff, 0xff])
}

fn a_recorded_norm_sequence_replays_bit_identically_to_direct_launches() {
    let be = cuda();
    let ops = Ops::new(be.clone());
    // dim 1030 is not a multiple of 8 (the kernels' 4-byte path), 2048 is (16-byte path).
    for (rows, dim) in [(17usize, 2048usize), (5, 1030)] {
        let n = Norms::new(&be, rows, dim);
        let direct = |seed| {
            n.set_inputs(seed);
            n.poison_outputs();
            n.run(&ops).unwrap();
            n.read_outputs()
        };
        let (direct_a, direct_b) = (direct(1), direct(2));
        for (i, out) in direct_a.iter().enumerate() {
            assert!(!has_poison(out), "rows={rows} dim={dim}: output {i} not fully written by the direct run");
        }
        assert!(direct_a[1].iter().all(|&b| b == 0), "memset0 left non-zero bytes");
        assert_ne!(direct_a[5], direct_b[5], "new inputs must change the result, or the replay comparison proves nothing");

        n.poison_outputs();
        let rec = be.record(&mut || n.run(&ops)).unwrap();
        assert_eq!(rec.steps(), 5);
        be.synchronize().unwrap();
        assert!(
            n.read_outputs().iter().all(|o| o.iter().all(|&b| b == 0xff)),
            "rows={rows} dim={dim}: record() ran the work instead of capturing it"
        );
        for (round, (seed, expect)) in [(1, &direct_a), (2, &direct_b), (1, &direct_a)].into_iter().enumerate() {
            n.set_inputs(seed);
            n.poison_outputs();
            be.replay(&rec).unwrap();
            let got = n.read_outputs();
            for (i, (g, e)) in got.iter().zip(expect.iter()).enumerate() {
                assert!(g == e, "rows={rows} dim={dim}: replay {round} (inputs {seed}): output {i} differs from the direct launches");
            }
        }
        drop(rec);
    }
    be.synchronize().unwrap();
    assert_eq!(be.live_bytes(), 0, "buffers leaked");
}

fn replay_is_refused_once_a_buffer_it_uses_is_freed() {
    let be = cuda();
    let ops = Ops::new(be.clone());
    let (rows, dim) = (4usize, 256usize);
    let bytes = rows * dim * 2;
    let x = DeviceBuffer::from_bytes(&be, &bf16_data(rows * dim, 3, 0.1, 2.0)).unwrap();
    let out = DeviceBuffer::new(&be, bytes).unwrap();
    let copy = DeviceBuffer::new(&be, bytes).unwrap();
    let rec = be
        .record(&mut || {
            ops.rmsnorm_bf16(out.region(), x.region(), None, rows, dim, EPS)?;
            be.copy(copy.addr(), out.addr(), bytes)
        })
        .unwrap();
    be.replay(&rec).unwrap();
    be.synchronize().unwrap();
    assert_eq!(copy.to_vec().unwrap(), out.to_vec().unwrap());

    let x_addr = x.addr();
    drop(x);
    // The driver may hand the freed address out again: the recording names
    // the allocation, not the address, so it stays refused.
    let again = DeviceBuffer::new(&be, bytes).unwrap();
    println!("a new allocation reuses the freed address: {}", again.addr() == x_addr);
    let e = be.replay(&rec).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { kernel, arg, reason } if kernel == "replay" && arg == "recording" && reason.contains("freed")),
        "{e}"
    );
    // The backend is unaffected: a direct launch on live buffers still runs.
    ops.rmsnorm_bf16(out.region(), again.region(), None, rows, dim, EPS).unwrap();
    be.synchronize().unwrap();
    drop((rec, again, out, copy));
    assert_eq!(be.live_bytes(), 0);
}

fn host_operations_inside_record_are_refused_and_leave_the_backend_usable() {
    let be = cuda();
    let buf = DeviceBuffer::new(&be, 256).unwrap();
    let refused = |op: &str, r: Result<switchyard_core::Recording>| {
        let e = r.expect_err(op);
        assert!(matches!(&e, Error::InvalidArgument { kernel, arg, .. } if kernel == op && arg == "<recording>"), "{op}: {e}");
    };
    refused("upload", be.record(&mut || be.upload(buf.addr(), &[1u8; 16])));
    let mut host = vec![0u8; 16];
    refused("download", be.record(&mut || be.download(buf.addr(), &mut host)));
    refused("synchronize", be.record(&mut || be.synchronize()));
    refused("time_ms", be.record(&mut || be.time_ms(&mut || Ok(())).map(drop)));
    refused("record", be.record(&mut || be.record(&mut || Ok(())).map(drop)));
    let tmp = be.alloc(64).unwrap();
    refused("free", be.record(&mut || be.free(tmp)));
    be.free(tmp).unwrap();

    // Work that fails after capturing something: its own error comes back
    // and the stream leaves capture mode.
    let e = be
        .record(&mut || {
            be.memset0(buf.addr(), 256)?;
            Err(Error::Unsupported("stop here".into()))
        })
        .unwrap_err();
    assert_eq!(e, Error::Unsupported("stop here".into()));

    // Everything works afterwards: host copies, synchronisation, new recordings.
    buf.write(&[7u8; 256]).unwrap();
    be.synchronize().unwrap();
    let empty = be.record(&mut || Ok(())).unwrap();
    assert_eq!(empty.steps(), 0);
    be.replay(&empty).unwrap();
    let rec = be.record(&mut || be.memset0(buf.addr(), 128)).unwrap();
    assert_eq!(rec.steps(), 1);
    assert_eq!(buf.to_vec().unwrap(), vec![7u8; 256], "record ran the memset");
    be.replay(&rec).unwrap();
    let back = buf.to_vec().unwrap();
    assert!(back[..128].iter().all(|&b| b == 0) && back[128..].iter().all(|&b| b == 7));

    // A recording made by another backend is refused.
    let cpu = switchyard_cpu_ref::cpu_backend();
    let foreign = cpu.record(&mut || Ok(())).unwrap();
    assert!(matches!(be.replay(&foreign), Err(Error::InvalidArgument { .. })));
    drop((rec, empty, buf));
    assert_eq!(be.live_bytes(), 0);
}

fn launch_with_geometry_matches_the_plan_and_refuses_a_freed_pointer() {
    let be = cuda();
    let cb = be.extension().and_then(|x| x.downcast_ref::<CudaBackend>()).expect("the cuda backend's extension is the CudaBackend");
    match cb.cublas() {
        Ok(_) => {}
        Err(Error::Unavailable { reason, .. }) => println!("cuBLAS unavailable here: {reason}"),
        Err(e) => panic!("cublas(): {e}"),
    }
    let ops = Ops::new(be.clone());
    let (rows, dim) = (5usize, 1030usize);
    let bytes = rows * dim * 2;
    let x = DeviceBuffer::from_bytes(&be, &bf16_data(rows * dim, 9, 0.01, 3.0)).unwrap();
    let w = DeviceBuffer::from_bytes(&be, &bf16_data(dim, 10, 0.1, 2.0)).unwrap();
    let (planned, tuned) = (DeviceBuffer::new(&be, bytes).unwrap(), DeviceBuffer::new(&be, bytes).unwrap());
    poison(&planned);
    poison(&tuned);
    ops.rmsnorm_bf16(planned.region(), x.region(), Some(w.region()), rows, dim, EPS).unwrap();
    let args = |out: u64, x: u64| vec![P(out), P(x), P(w.addr()), I(rows as i32), I(dim as i32), F(EPS)];
    let (grid, block) = ([rows as u32, 1, 1], [norm_block(dim), 1, 1]);
    cb.launch_with_geometry(&RMSNORM_BF16, grid, block, &args(tuned.addr(), x.addr())).unwrap();
    let (p, t) = (planned.to_vec().unwrap(), tuned.to_vec().unwrap());
    assert!(!has_poison(&p));
    assert!(p == t, "the plan's own geometry through launch_with_geometry must give the planned launch's bits");

    let e = cb.launch_with_geometry(&RMSNORM_BF16, grid, [0, 1, 1], &args(tuned.addr(), x.addr())).unwrap_err();
    assert!(matches!(&e, Error::InvalidArgument { arg, .. } if arg == "<geometry>"), "{e}");
    let e = cb.launch_with_geometry(&RMSNORM_BF16, grid, block, &args(tuned.addr(), x.addr())[..5]).unwrap_err();
    assert!(matches!(&e, Error::InvalidArgument { arg, .. } if arg == "<argument list>"), "{e}");

    let x_addr = x.addr();
    drop(x);
    let e = cb.launch_with_geometry(&RMSNORM_BF16, grid, block, &args(tuned.addr(), x_addr)).unwrap_err();
    assert!(matches!(&e, Error::OutOfBounds { kernel, arg, .. } if kernel == "rmsnorm_bf16" && arg == "x"), "{e}");
    be.synchronize().unwrap();
    drop((w, planned, tuned));
    assert_eq!(be.live_bytes(), 0);
}

/// One piece of `enqueue_concurrent` work: the norm sequence, then an
/// m = 16 GEMV of its last output (a weight stream, with plan workspace
/// where the plan splits K).
struct Piece {
    norms: Norms,
    w: DeviceBuffer,
    y: DeviceBuffer,
    n: usize,
}

impl Piece {
    fn new(be: &Arc<dyn Backend>, rows: usize, dim: usize, n: usize) -> Piece {
        Piece {
            norms: Norms::new(be, rows, dim),
            w: DeviceBuffer::new(be, n * dim * 2).unwrap(),
            y: DeviceBuffer::new(be, rows * n * 2).unwrap(),
            n,
        }
    }

    fn set_inputs(&self, seed: u64) {
        self.norms.set_inputs(seed);
        self.w.write(&bf16_data(self.n * self.norms.dim, seed + 500, 0.01, 0.1)).unwrap();
    }

    fn poison_outputs(&self) {
        self.norms.poison_outputs();
        poison(&self.y);
    }

    fn read_outputs(&self) -> Vec<Vec<u8>> {
        let mut out = self.norms.read_outputs();
        out.push(self.y.to_vec().unwrap());
        out
    }

    fn run(&self, ops: &Ops) -> Result<()> {
        self.norms.run(ops)?;
        let (m, k) = (self.norms.rows, self.norms.dim);
        ops.dense_gemv_bf16(self.norms.out2.region(), self.w.region(), self.y.region(), m, self.n, k, [self.n, self.n])
    }
}

fn concurrent_pieces_give_the_bits_of_the_same_launches_in_order_direct_and_replayed() {
    let be = cuda();
    let ops = Ops::new(be.clone());
    // K = 16384 at 16 rows: the GEMV's plan splits K, so both pieces use
    // workspace at the same time (the side stream has its own).
    let pieces = [Piece::new(&be, 16, 16384, 512), Piece::new(&be, 16, 16384, 768)];
    let set = |seed: u64| pieces.iter().enumerate().for_each(|(i, p)| p.set_inputs(seed * 10 + i as u64));
    let in_order = |seed| {
        set(seed);
        pieces.iter().for_each(Piece::poison_outputs);
        pieces.iter().try_for_each(|p| p.run(&ops)).unwrap();
        pieces.iter().map(Piece::read_outputs).collect::<Vec<_>>()
    };
    let (expected_a, expected_b) = (in_order(1), in_order(2));
    for (i, outs) in expected_a.iter().enumerate() {
        assert!(outs.iter().all(|o| !has_poison(o)), "piece {i}: an output was not fully written in order");
    }
    assert_ne!(expected_a[1][6], expected_b[1][6], "new inputs must change the GEMV, or the comparison proves nothing");
    let concurrent = || be.enqueue_concurrent(&mut || pieces[0].run(&ops), &mut || pieces[1].run(&ops));
    let read = || pieces.iter().map(Piece::read_outputs).collect::<Vec<_>>();

    set(1);
    pieces.iter().for_each(Piece::poison_outputs);
    concurrent().unwrap();
    assert!(read() == expected_a, "enqueue_concurrent, direct: the outputs differ from the same launches in order");

    pieces.iter().for_each(Piece::poison_outputs);
    let rec = be.record(&mut || concurrent()).unwrap();
    assert!(read().iter().flatten().all(|o| has_poison(o)), "record() ran the pieces instead of capturing them");
    for (round, (seed, expected)) in [(2, &expected_b), (1, &expected_a), (2, &expected_b)].into_iter().enumerate() {
        set(seed);
        pieces.iter().for_each(Piece::poison_outputs);
        be.replay(&rec).unwrap();
        assert!(read() == *expected, "replay {round} (inputs {seed}): the outputs differ from the same launches in order");
    }
}

fn inside_concurrent_pieces_host_work_is_refused_and_errors_come_back_joined() {
    let be = cuda();
    let ops = Ops::new(be.clone());
    let buf = DeviceBuffer::new(&be, 256).unwrap();
    let refused = |op: &str, r: Result<()>| {
        let e = r.unwrap_err();
        assert!(matches!(&e, Error::InvalidArgument { kernel, arg, .. } if kernel == op && arg == "<enqueue_concurrent>"), "{op}: {e}");
    };
    let mut host = [0u8; 16];
    refused("upload", be.enqueue_concurrent(&mut || Ok(()), &mut || be.upload(buf.addr(), &[1u8; 16])));
    refused("download", be.enqueue_concurrent(&mut || be.download(buf.addr(), &mut host), &mut || Ok(())));
    refused("synchronize", be.enqueue_concurrent(&mut || be.synchronize(), &mut || Ok(())));
    refused("record", be.enqueue_concurrent(&mut || be.record(&mut || Ok(())).map(drop), &mut || Ok(())));

    // A launch error in either piece comes back, and the stream is joined:
    // what was enqueued is done after a synchronize (the second piece runs
    // first on the host here, so a failing second stops the first; a
    // failing first leaves the second's work), and the backend works as
    // before.
    let n = Norms::new(&be, 3, 1030);
    n.set_inputs(5);
    let dead = DeviceBuffer::new(&be, 64).unwrap();
    let dead_addr = dead.addr();
    drop(dead);
    let bad = || be.launch(&RMSNORM_BF16, &[P(n.out1.addr()), P(dead_addr), P(n.w.addr()), I(3), I(1030), F(EPS)]);
    for bad_first in [true, false] {
        n.poison_outputs();
        let good = || be.memset0(n.zeroed.addr(), n.zeroed.len());
        let e = if bad_first {
            be.enqueue_concurrent(&mut bad.clone(), &mut || good())
        } else {
            be.enqueue_concurrent(&mut || good(), &mut bad.clone())
        }
        .unwrap_err();
        assert!(matches!(&e, Error::OutOfBounds { kernel, .. } if kernel == "rmsnorm_bf16"), "{e}");
        be.synchronize().unwrap();
        if bad_first {
            assert!(n.zeroed.to_vec().unwrap().iter().all(|&b| b == 0), "the second piece's memset did not run before the failing first");
        }
    }

    // Nested: the inner pieces run in order on the outer piece's stream.
    n.poison_outputs();
    be.enqueue_concurrent(&mut || be.enqueue_concurrent(&mut || n.run(&ops), &mut || Ok(())), &mut || Ok(())).unwrap();
    be.synchronize().unwrap();
    assert!(n.read_outputs().iter().all(|o| !has_poison(o)), "the nested pieces did not run");
    buf.write(&[3u8; 256]).unwrap();
    assert_eq!(buf.to_vec().unwrap(), vec![3u8; 256]);
}

switchyard_test_harness::tests!(needs "cuda": a_recorded_norm_sequence_replays_bit_identically_to_direct_launches, replay_is_refused_once_a_buffer_it_uses_is_freed, host_operations_inside_record_are_refused_and_leave_the_backend_usable, launch_with_geometry_matches_the_plan_and_refuses_a_freed_pointer, concurrent_pieces_give_the_bits_of_the_same_launches_in_order_direct_and_replayed, inside_concurrent_pieces_host_work_is_refused_and_errors_come_back_joined);
switchyard_test_harness::main!(common::probe);
