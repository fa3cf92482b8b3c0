//! # switchyard-cpu-ref
//!
//! The scalar CPU reference backend: every kernel in the catalogue as plain
//! Rust that follows the kernel's doc-comment contract to the letter (f32
//! math, sums in index order, round-to-nearest-even to bf16 exactly where the
//! contract stores). It is the oracle the GPU backends are compared against.
//!
//! Memory is host `Vec<u8>`s behind virtual addresses
//! ([`switchyard_core::vaddr`]); every element a kernel touches goes through
//! a checked accessor, so a bad address or an index past an allocation is an
//! [`Error::OutOfBounds`] naming the kernel and argument, never undefined
//! behaviour. Kernels ignore the launch geometry except where the launcher
//! passes the row count in `grid.x`.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;
use switchyard_core::vaddr::MAX_ALLOC;
use switchyard_core::{Arg, Backend, BackendInfo, BackendKind, Error, KernelSig, Recording, Result};

mod ctx;
mod memory;

/// Registers `$run` as the CPU implementation of the catalogue kernel `$sig`
/// (a `switchyard_kernels` static): one registry entry for coverage and one
/// entry mapping the symbol to the Rust function.
macro_rules! register {
    ($sig:path => $run:path) => {
        inventory::submit! {
            switchyard_core::registry::Implemented { backend: switchyard_core::BackendKind::Cpu, kernel: &$sig }
        }
        inventory::submit! { crate::CpuKernel { sig: &$sig, run: $run } }
    };
}

mod attn;
mod embed;
mod gemm;
mod gemv;
mod head;
mod moe;
mod moe_expert;
mod moe_rows;
mod norm;
mod rope_kv;
mod util;
mod w4a16;

use ctx::Ctx;
use memory::Memory;

const NAME: &str = BackendKind::Cpu.name();

inventory::submit! { switchyard_core::registry::BackendFactory { kind: BackendKind::Cpu, open: || Ok(cpu_backend()) } }

/// A kernel body: reads its arguments through the context and records writes.
type KernelFn = fn(&mut Ctx<'_>) -> Result<()>;

/// One implemented kernel.
struct CpuKernel {
    sig: &'static KernelSig,
    run: KernelFn,
}
inventory::collect!(CpuKernel);

fn kernel_fn(sig: &KernelSig) -> Option<KernelFn> {
    static MAP: OnceLock<HashMap<(&'static str, &'static str), KernelFn>> = OnceLock::new();
    MAP.get_or_init(|| inventory::iter::<CpuKernel>.into_iter().map(|k| ((k.sig.module, k.sig.symbol), k.run)).collect())
        .get(&(sig.module, sig.symbol))
        .copied()
}

/// The scalar CPU reference backend. Work runs synchronously inside
/// [`Backend::launch`]; [`Backend::synchronize`] has nothing to wait for.
/// A recording is the stored list of launches and copies, run again in
/// order by [`Backend::replay`].
#[derive(Default)]
pub struct CpuBackend {
    mem: Memory,
    recording: Mutex<Option<Vec<Step>>>,
}

/// One recorded launch or copy.
#[derive(Clone, Debug)]
enum Step {
    Launch(&'static KernelSig, Vec<Arg>),
    Copy { dst: u64, src: u64, bytes: usize },
    Zero { dst: u64, bytes: usize },
}

impl Step {
    /// The addresses the step uses, for the liveness check at replay.
    fn addresses(&self) -> Vec<u64> {
        match self {
            Step::Launch(_, args) => args.iter().filter_map(|a| if let Arg::P(p) = *a { (p != 0).then_some(p) } else { None }).collect(),
            Step::Copy { dst, src, .. } => vec![*dst, *src],
            Step::Zero { dst, .. } => vec![*dst],
        }
    }
}

impl CpuBackend {
    /// A backend with no allocations.
    pub fn new() -> CpuBackend {
        CpuBackend::default()
    }

    fn recording(&self) -> MutexGuard<'_, Option<Vec<Step>>> {
        self.recording.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores `step` when recording (returns true), else leaves it to run now.
    fn recorded(&self, step: impl FnOnce() -> Step) -> bool {
        match self.recording().as_mut() {
            Some(steps) => {
                steps.push(step());
                true
            }
            None => false,
        }
    }

    /// Refuses host-side operations while a recording is open.
    fn not_recording(&self, op: &str) -> Result<()> {
        if self.recording().is_some() {
            return Err(Error::invalid(
                op,
                "<recording>",
                "host transfers and synchronisation cannot be recorded; do them outside record()",
            ));
        }
        Ok(())
    }

    fn run(&self, kernel: &'static KernelSig, args: &[Arg]) -> Result<()> {
        let run = kernel_fn(kernel).ok_or_else(|| Error::UnknownKernel {
            module: kernel.module.into(),
            symbol: kernel.symbol.into(),
            backend: Some(NAME.into()),
        })?;
        // The lock is held for the whole kernel so that the snapshot it reads
        // and the table its writes are committed to are the same.
        let mut mem = self.mem.lock();
        let pending = {
            let mut ctx = Ctx::new(kernel, args, &mem)?;
            run(&mut ctx)?;
            ctx.finish()
        };
        pending.commit(&mut mem, kernel.symbol)
    }

    fn run_step(&self, step: &Step) -> Result<()> {
        match step {
            Step::Launch(k, args) => self.run(k, args),
            Step::Copy { dst, src, bytes } => self.mem.copy(*dst, *src, *bytes),
            Step::Zero { dst, bytes } => self.mem.memset0(*dst, *bytes),
        }
    }
}

/// The steps of a CPU recording.
struct CpuRecording(Vec<Step>);

/// A fresh CPU reference backend, shared.
pub fn cpu_backend() -> Arc<dyn Backend> {
    Arc::new(CpuBackend::new())
}

impl Backend for CpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }

    fn info(&self) -> BackendInfo {
        BackendInfo {
            backend: BackendKind::Cpu,
            device: format!("scalar CPU reference ({})", std::env::consts::ARCH),
            driver: format!("switchyard-cpu-ref {}", env!("CARGO_PKG_VERSION")),
            max_alloc_bytes: MAX_ALLOC,
            details: vec![
                ("threads".into(), "1 (kernels run synchronously in launch)".into()),
                ("memory".into(), "host Vec<u8> per allocation, virtual addresses".into()),
                ("bounds checks".into(), "every element read and write".into()),
            ],
        }
    }

    fn alloc(&self, bytes: usize) -> Result<u64> {
        self.mem.alloc(bytes)
    }

    fn free(&self, addr: u64) -> Result<()> {
        self.mem.free(addr)
    }

    fn upload(&self, dst: u64, data: &[u8]) -> Result<()> {
        self.not_recording("upload")?;
        self.mem.upload(dst, data)
    }

    fn download(&self, src: u64, out: &mut [u8]) -> Result<()> {
        self.not_recording("download")?;
        self.mem.download(src, out)
    }

    fn memset0(&self, dst: u64, bytes: usize) -> Result<()> {
        self.mem.check_range(dst, bytes).map_err(|d| Error::oob("memset0", "dst", d))?;
        if self.recorded(|| Step::Zero { dst, bytes }) {
            return Ok(());
        }
        self.mem.memset0(dst, bytes)
    }

    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        self.mem.check_range(dst, bytes).map_err(|d| Error::oob("copy", "dst", d))?;
        self.mem.check_range(src, bytes).map_err(|d| Error::oob("copy", "src", d))?;
        if self.recorded(|| Step::Copy { dst, src, bytes }) {
            return Ok(());
        }
        self.mem.copy(dst, src, bytes)
    }

    fn check_range(&self, addr: u64, bytes: usize) -> std::result::Result<(), String> {
        self.mem.check_range(addr, bytes)
    }

    fn enqueue(&self, kernel: &'static KernelSig, args: &[Arg]) -> Result<()> {
        if self.recorded(|| Step::Launch(kernel, args.to_vec())) {
            return Ok(());
        }
        self.run(kernel, args)
    }

    fn record(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<Recording> {
        {
            let mut r = self.recording();
            if r.is_some() {
                return Err(Error::invalid("record", "<recording>", "a recording is already open on this backend"));
            }
            *r = Some(Vec::new());
        }
        let result = work();
        let steps = self.recording().take().unwrap_or_default();
        result?;
        Ok(Recording::new(BackendKind::Cpu, self as *const Self as usize, steps.len(), Box::new(CpuRecording(steps))))
    }

    fn replay(&self, recording: &Recording) -> Result<()> {
        self.not_recording("replay")?;
        let CpuRecording(steps) = recording.state::<CpuRecording>(self as *const Self as usize)?;
        for addr in steps.iter().flat_map(Step::addresses) {
            self.mem.check_range(addr, 1).map_err(|d| Error::invalid("replay", "recording", format!("a buffer it uses was freed: {d}")))?;
        }
        steps.iter().try_for_each(|s| self.run_step(s))
    }

    fn synchronize(&self) -> Result<()> {
        self.not_recording("synchronize")
    }

    fn time_ms(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        let t = Instant::now();
        work()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    }

    fn live_bytes(&self) -> usize {
        self.mem.live_bytes()
    }
}
