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
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use switchyard_core::vaddr::MAX_ALLOC;
use switchyard_core::{Arg, Backend, BackendInfo, Error, Grid, KernelSig, Result};

mod ctx;
mod memory;

/// Registers `$run` as the CPU implementation of the catalogue kernel `$sig`
/// (a `switchyard_kernels` static): one registry entry for coverage and one
/// entry mapping the symbol to the Rust function.
macro_rules! register {
    ($sig:path => $run:path) => {
        inventory::submit! {
            switchyard_core::registry::Implemented { backend: crate::NAME, module: $sig.module, symbol: $sig.symbol }
        }
        inventory::submit! { crate::CpuKernel { sig: &$sig, run: $run } }
    };
}

mod attn;
mod embed;
mod gemm;
mod head;
mod moe;
mod moe_expert;
mod norm;
mod rope_kv;
mod util;
mod w4a16;

use ctx::Ctx;
use memory::Memory;

/// The backend name in the registry and on the command line.
pub const NAME: &str = "cpu";

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
#[derive(Default)]
pub struct CpuBackend {
    mem: Memory,
}

impl CpuBackend {
    /// A backend with no allocations.
    pub fn new() -> CpuBackend {
        CpuBackend::default()
    }
}

/// A fresh CPU reference backend, shared.
pub fn cpu_backend() -> Arc<dyn Backend> {
    Arc::new(CpuBackend::new())
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn info(&self) -> BackendInfo {
        BackendInfo {
            backend: NAME,
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
        self.mem.upload(dst, data)
    }

    fn download(&self, src: u64, out: &mut [u8]) -> Result<()> {
        self.mem.download(src, out)
    }

    fn memset0(&self, dst: u64, bytes: usize) -> Result<()> {
        self.mem.memset0(dst, bytes)
    }

    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        self.mem.copy(dst, src, bytes)
    }

    fn check_range(&self, addr: u64, bytes: usize) -> std::result::Result<(), String> {
        self.mem.check_range(addr, bytes)
    }

    fn enqueue(&self, kernel: &'static KernelSig, grid: Grid, _block: Grid, args: &[Arg]) -> Result<()> {
        let run = kernel_fn(kernel).ok_or_else(|| Error::UnknownKernel {
            module: kernel.module.into(),
            symbol: kernel.symbol.into(),
            backend: Some(NAME.into()),
        })?;
        // The lock is held for the whole kernel so that the snapshot it reads
        // and the table its writes are committed to are the same.
        let mut mem = self.mem.lock();
        let pending = {
            let mut ctx = Ctx::new(kernel, grid, args, &mem)?;
            run(&mut ctx)?;
            ctx.finish()
        };
        pending.commit(&mut mem, kernel.symbol)
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
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
