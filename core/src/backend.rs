use crate::{registry, Arg, Error, KernelSig, Result};

/// Launch geometry: `[x, y, z]` blocks in the grid or threads in the block.
pub type Grid = [u32; 3];

/// What a backend reports about the device it drives.
#[derive(Clone, Debug, Default)]
pub struct BackendInfo {
    /// Backend name (`cpu`, `wgpu`, `cuda`).
    pub backend: &'static str,
    /// Device name as the driver reports it.
    pub device: String,
    /// Driver name and version, where known.
    pub driver: String,
    /// The largest single allocation the backend accepts, in bytes.
    pub max_alloc_bytes: u64,
    /// Further `(key, value)` facts worth printing (limits, compute capability).
    pub details: Vec<(String, String)>,
}

/// A device driver: memory, copies, kernel launch by name, synchronisation and
/// timing. Object safe; shared as `Arc<dyn Backend>`.
///
/// Addresses are `u64`. Only a backend's own [`Backend::alloc`] makes them; on
/// backends without real device pointers they are virtual (see
/// [`crate::vaddr`]). Every method that takes an address checks that the range
/// lies inside a live allocation and returns [`Error::OutOfBounds`] otherwise.
///
/// Work may be asynchronous: launches, copies and `memset0` are ordered with
/// respect to each other, and [`Backend::download`] and
/// [`Backend::synchronize`] wait for everything enqueued before them.
pub trait Backend: Send + Sync {
    /// Short backend name, as used by `--backend` and the registry.
    fn name(&self) -> &'static str;

    /// Device facts for reports.
    fn info(&self) -> BackendInfo;

    /// Allocates `bytes` (> 0) of device memory. Contents are unspecified.
    fn alloc(&self, bytes: usize) -> Result<u64>;

    /// Frees an allocation made by [`Backend::alloc`]. `addr` must be the
    /// address `alloc` returned; afterwards every address into it is invalid
    /// and using one is an error, not undefined behaviour.
    fn free(&self, addr: u64) -> Result<()>;

    /// Copies host bytes to `dst`.
    fn upload(&self, dst: u64, data: &[u8]) -> Result<()>;

    /// Copies device bytes at `src` to the host, after all enqueued work.
    fn download(&self, src: u64, out: &mut [u8]) -> Result<()>;

    /// Zeroes `bytes` at `dst`.
    fn memset0(&self, dst: u64, bytes: usize) -> Result<()>;

    /// Copies `bytes` from `src` to `dst` on the device. The ranges must not overlap.
    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()>;

    /// `Ok` when `[addr, addr + bytes)` lies inside one live allocation;
    /// otherwise a description of what is wrong (for an error message that
    /// the caller completes with the kernel and argument names).
    fn check_range(&self, addr: u64, bytes: usize) -> std::result::Result<(), String>;

    /// Runs a kernel whose arguments were already validated against `kernel`
    /// by [`Backend::launch`]. Implementations may assume counts, kinds and
    /// non-null-ness match the signature, and must still resolve every
    /// pointer against live allocations.
    fn enqueue(&self, kernel: &'static KernelSig, grid: Grid, block: Grid, args: &[Arg]) -> Result<()>;

    /// Launches `module::symbol`. Validates before the backend sees anything:
    /// the kernel is declared and implemented by this backend, the argument
    /// count and kinds match the declaration, non-nullable pointers are not
    /// null, every non-null pointer lies in a live allocation, and the
    /// geometry is non-empty. Then calls [`Backend::enqueue`].
    fn launch(&self, module: &str, symbol: &str, grid: Grid, block: Grid, args: &[Arg]) -> Result<()> {
        let sig = registry::lookup(module, symbol)?;
        if !registry::implements(self.name(), sig) {
            return Err(Error::UnknownKernel { module: module.into(), symbol: symbol.into(), backend: Some(self.name().into()) });
        }
        sig.check(args)?;
        for (spec, arg) in sig.args.iter().zip(args) {
            if let Arg::P(addr) = *arg {
                if addr != 0 {
                    self.check_range(addr, 1).map_err(|d| Error::oob(sig.symbol, spec.name, d))?;
                }
            }
        }
        if grid.contains(&0) || block.contains(&0) {
            return Err(Error::invalid(sig.symbol, "<geometry>", format!("empty launch: grid {grid:?}, block {block:?}")));
        }
        self.enqueue(sig, grid, block, args)
    }

    /// Waits for all enqueued work and reports any deferred error.
    fn synchronize(&self) -> Result<()>;

    /// Runs `work` (which enqueues device work) and returns the device time
    /// it took in milliseconds: CUDA events on CUDA, submit-and-wait on wgpu,
    /// wall clock on the CPU reference.
    fn time_ms(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<f64>;

    /// Bytes currently allocated through this backend (leak accounting).
    fn live_bytes(&self) -> usize;
}
