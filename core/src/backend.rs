use crate::{registry, Arg, BackendKind, Error, KernelSig, Recording, Result};

/// What a backend reports about the device it drives.
#[derive(Clone, Debug)]
pub struct BackendInfo {
    /// Which backend.
    pub backend: BackendKind,
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
    /// Which backend this is; [`BackendKind::name`] is its name.
    fn kind(&self) -> BackendKind;

    /// Short backend name, as used by `--backend` and the registry.
    fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// Device facts for reports.
    fn info(&self) -> BackendInfo;

    /// Allocates `bytes` (> 0) of device memory. Contents are unspecified.
    fn alloc(&self, bytes: usize) -> Result<u64>;

    /// Frees an allocation made by [`Backend::alloc`]. `addr` must be the
    /// address `alloc` returned; afterwards every address into it is invalid
    /// and using one is an error, not undefined behaviour. Recordings that
    /// use the allocation are refused at their next replay.
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

    /// Runs a kernel whose arguments [`Backend::launch`] has checked against
    /// its signature. The backend plans the launch itself (geometry, shared
    /// memory, workspace from its own arena) from the arguments and its
    /// device's facts, and trusts shapes and extents (the launcher checked
    /// them). It still checks, under the lock `free` takes, that every
    /// non-null pointer is live: that check is what keeps a buffer freed on
    /// another thread from reaching the device.
    fn enqueue(&self, kernel: &'static KernelSig, args: &[Arg]) -> Result<()>;

    /// Launches `kernel`: it must be implemented by this backend, and the
    /// argument count, kinds and non-nullability must match its declaration.
    /// Then calls [`Backend::enqueue`]. Shapes and extents are the typed
    /// launchers' job (`switchyard_kernels::Ops`).
    fn launch(&self, kernel: &'static KernelSig, args: &[Arg]) -> Result<()> {
        if !registry::implements(self.kind(), kernel) {
            return Err(Error::UnknownKernel {
                module: kernel.module.into(),
                symbol: kernel.symbol.into(),
                backend: Some(self.name().into()),
            });
        }
        kernel.check(args)?;
        self.enqueue(kernel, args)
    }

    /// Enqueues two pieces of work that may overlap on the device: neither
    /// may write memory the other reads or writes (the caller's contract; a
    /// backend cannot see the extents a kernel touches). Work enqueued after
    /// this call starts after both. Inside either piece, host transfers,
    /// frees and synchronisation may be refused, and a nested call may run
    /// its two pieces in order. Also allowed inside [`Backend::record`].
    ///
    /// The default runs `first`, then `second`, in order: on a backend with
    /// one queue (the CPU reference, wgpu) that is already the whole
    /// contract. The CUDA backend runs `second` on a second stream forked
    /// from and joined back to its own, so a latency-bound chain in `first`
    /// and a weight stream in `second` share the device.
    fn enqueue_concurrent(&self, first: &mut dyn FnMut() -> Result<()>, second: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        first()?;
        second()
    }

    /// Whether [`Backend::enqueue_concurrent`] can overlap its pieces here
    /// (`false`: it runs them in order), for a caller that would otherwise
    /// prefer another arrangement of the same work.
    fn overlaps_concurrent_work(&self) -> bool {
        false
    }

    /// Records the launches and copies that `work` enqueues, without running
    /// them, into a [`Recording`] that [`Backend::replay`] runs. Uploads,
    /// downloads and synchronisation inside `work` are refused (their host
    /// side cannot be replayed). See [`Recording`] for the contract.
    fn record(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<Recording>;

    /// Enqueues a recording made by this backend. Refused, naming the
    /// address, if a buffer it uses was freed since it was recorded.
    fn replay(&self, recording: &Recording) -> Result<()>;

    /// Waits for all enqueued work and reports any deferred error.
    fn synchronize(&self) -> Result<()>;

    /// Runs `work` (which enqueues device work) and returns the device time
    /// it took in milliseconds: CUDA events on CUDA, submit-and-wait on wgpu,
    /// wall clock on the CPU reference.
    fn time_ms(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<f64>;

    /// Opens (`true`) or closes (`false`) the region an external profiler
    /// captures when it starts with collection off (Nsight Compute's
    /// `--profile-from-start off`), so a profile holds, say, only the timed
    /// decode steps. Does nothing where the backend has no such hook.
    fn profiler_range(&self, on: bool) -> Result<()> {
        let _ = on;
        Ok(())
    }

    /// Bytes currently allocated through this backend (leak accounting).
    fn live_bytes(&self) -> usize;

    /// Backend-specific capabilities beyond the trait (for example the CUDA
    /// backend's cuBLAS yardstick), for callers that downcast to a type the
    /// backend crate documents. `None` where there are none.
    fn extension(&self) -> Option<&dyn std::any::Any> {
        None
    }
}
