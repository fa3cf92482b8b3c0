//! Recordings (CUDA graphs captured from the stream) and the CUDA-only
//! tuning launch, on a device. Each test shows as ignored with the reason
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

switchyard_test_harness::tests!(needs "cuda": a_recorded_norm_sequence_replays_bit_identically_to_direct_launches, replay_is_refused_once_a_buffer_it_uses_is_freed, host_operations_inside_record_are_refused_and_leave_the_backend_usable, launch_with_geometry_matches_the_plan_and_refuses_a_freed_pointer);
switchyard_test_harness::main!(common::probe);
