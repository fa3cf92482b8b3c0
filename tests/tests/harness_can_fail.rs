//! Proves the parity harness can fail: a deliberately wrong backend, built on
//! the CPU reference, gets one kernel's values wrong, writes past another's
//! output, and leaves a third's outputs unwritten. The harness must report
//! each as its own failure.
use std::sync::Arc;
use switchyard_core::{Arg, Backend, BackendInfo, BackendKind, KernelSig, Recording, Result};
use switchyard_kernels::parity::{check_kernel, Status};
use switchyard_kernels::{embed, head, norm, Ops};

struct WrongBackend {
    inner: Arc<dyn Backend>,
    /// Replays do nothing (the recorded work is dropped).
    replay_drops_work: bool,
}

fn ptr(args: &[Arg], i: usize) -> u64 {
    match args[i] {
        Arg::P(p) => p,
        other => panic!("argument {i} is {other:?}, not a pointer"),
    }
}

fn int(args: &[Arg], i: usize) -> usize {
    match args[i] {
        Arg::I(v) => v as usize,
        other => panic!("argument {i} is {other:?}, not an i32"),
    }
}

impl WrongBackend {
    /// Runs `kernel` on the reference, then breaks it; `rows` is the
    /// kernel's row count argument.
    fn wrong(&self, kernel: &'static KernelSig, args: &[Arg], rows: usize, run: &dyn Fn() -> Result<()>) -> Result<()> {
        match kernel.symbol {
            // Wrong values: the right result, then one element nudged by 8 ulp.
            "rmsnorm_bf16" => {
                run()?;
                let out = ptr(args, 0);
                let mut e = [0u8; 2];
                self.inner.download(out, &mut e)?;
                let bits = u16::from_le_bytes(e).wrapping_add(8);
                self.inner.upload(out, &bits.to_le_bytes())
            }
            // Out of bounds: the right rows, then two bytes past the end of `out`.
            "gather_rows_bf16" => {
                run()?;
                let h = int(args, kernel.arg_index("h").expect("gather_rows_bf16 declares h"));
                self.inner.upload(ptr(args, 0) + (rows * h * 2) as u64, &[0x11, 0x22])
            }
            // Unwritten: does nothing at all.
            "argmax_rows" => Ok(()),
            _ => run(),
        }
    }
}

impl Backend for WrongBackend {
    /// Poses as the CPU reference (which implements every kernel), so the
    /// registry lets every launch through to the sabotage below.
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }
    fn info(&self) -> BackendInfo {
        BackendInfo { device: "a deliberately wrong backend".into(), ..self.inner.info() }
    }
    fn alloc(&self, bytes: usize) -> Result<u64> {
        self.inner.alloc(bytes)
    }
    fn free(&self, addr: u64) -> Result<()> {
        self.inner.free(addr)
    }
    fn upload(&self, dst: u64, data: &[u8]) -> Result<()> {
        self.inner.upload(dst, data)
    }
    fn download(&self, src: u64, out: &mut [u8]) -> Result<()> {
        self.inner.download(src, out)
    }
    fn memset0(&self, dst: u64, bytes: usize) -> Result<()> {
        self.inner.memset0(dst, bytes)
    }
    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        self.inner.copy(dst, src, bytes)
    }
    fn check_range(&self, addr: u64, bytes: usize) -> std::result::Result<(), String> {
        self.inner.check_range(addr, bytes)
    }
    fn enqueue(&self, kernel: &'static KernelSig, args: &[Arg]) -> Result<()> {
        let rows = kernel.arg_index("rows").map_or(0, |i| int(args, i));
        self.wrong(kernel, args, rows, &|| self.inner.enqueue(kernel, args))
    }
    fn record(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<Recording> {
        self.inner.record(work)
    }
    fn replay(&self, recording: &Recording) -> Result<()> {
        if self.replay_drops_work {
            return Ok(());
        }
        self.inner.replay(recording)
    }
    fn synchronize(&self) -> Result<()> {
        self.inner.synchronize()
    }
    fn time_ms(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        self.inner.time_ms(work)
    }
    fn live_bytes(&self) -> usize {
        self.inner.live_bytes()
    }
}

fn failures(sig: &'static KernelSig) -> Vec<Status> {
    let reference = Ops::new(switchyard_cpu_ref::cpu_backend());
    let wrong = Ops::new(Arc::new(WrongBackend { inner: switchyard_cpu_ref::cpu_backend(), replay_drops_work: false }));
    let rows = check_kernel(&reference, &wrong, sig, 42);
    println!("{}", switchyard_kernels::parity::table(&rows));
    assert!(!rows.is_empty());
    rows.into_iter().map(|r| r.status).filter(|s| !s.passed()).collect()
}

#[test]
fn wrong_values_are_reported_as_mismatch() {
    let f = failures(&norm::RMSNORM_BF16);
    assert!(!f.is_empty() && f.iter().all(|s| matches!(s, Status::Mismatch(m) if m.contains("index 0"))), "{f:?}");
}

#[test]
fn writes_past_the_output_are_reported_as_guard_corruption() {
    let f = failures(&embed::GATHER_ROWS_BF16);
    assert!(!f.is_empty() && f.iter().all(|s| matches!(s, Status::GuardCorrupted(_))), "{f:?}");
}

#[test]
fn outputs_left_unwritten_are_reported_as_poison() {
    let f = failures(&head::ARGMAX_ROWS);
    assert!(!f.is_empty() && f.iter().all(|s| matches!(s, Status::Unwritten(_))), "{f:?}");
}

#[test]
fn the_honest_cpu_backend_passes_the_same_kernels() {
    let reference = Ops::new(switchyard_cpu_ref::cpu_backend());
    let honest = Ops::new(switchyard_cpu_ref::cpu_backend());
    for sig in [&norm::RMSNORM_BF16, &embed::GATHER_ROWS_BF16, &head::ARGMAX_ROWS] {
        let rows = check_kernel(&reference, &honest, sig, 42);
        assert!(rows.iter().all(|r| r.status.passed()), "{}", switchyard_kernels::parity::table(&rows));
    }
}

#[test]
fn replays_that_differ_from_direct_launches_are_reported() {
    let reference = Ops::new(switchyard_cpu_ref::cpu_backend());
    let lossy = Ops::new(Arc::new(WrongBackend { inner: switchyard_cpu_ref::cpu_backend(), replay_drops_work: true }));
    // layer_out is not sabotaged on direct launches: only its replay is wrong.
    let rows = check_kernel(&reference, &lossy, &norm::LAYER_OUT_BF16, 42);
    assert!(!rows.is_empty());
    assert!(
        rows.iter().all(|r| matches!(r.status, Status::ReplayDiffers(_)) && !r.replay_identical),
        "{}",
        switchyard_kernels::parity::table(&rows)
    );
    let summary = switchyard_kernels::parity::summary("lossy", &rows);
    assert!(summary.ends_with(&format!("0 passed, {} failed (replayed: 0 identical)", rows.len())), "{summary}");
}
