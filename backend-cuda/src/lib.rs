//! # switchyard-cuda
//!
//! Switchyard's production backend: the CUDA driver API through cudarc
//! (`dynamic-loading`, so this crate builds with no CUDA toolkit and loads
//! `libcuda` / `libnvrtc` at run time), kernels compiled from the `.cu`
//! sources in `switchyard-kernels` by NVRTC on first use.
//!
//! - [`cuda_backend`] opens the device, or returns
//!   [`switchyard_core::Error::Unavailable`] with the reason (no driver, no
//!   device, no NVRTC) — it never panics, even though cudarc panics when a
//!   library is missing: every library and symbol is looked up first.
//! - Device addresses are real `CUdeviceptr`s; every pointer argument is
//!   checked against the live allocations before a launch.
//! - One stream; launches are asynchronous; [`switchyard_core::Backend::synchronize`]
//!   reports deferred faults with the CUDA error name.
//!   [`switchyard_core::Backend::enqueue_concurrent`] forks a second stream
//!   from it and joins it back (in a recording too).
//! - A launch runs the kernel's CUDA plan (`switchyard_kernels::plan`,
//!   registered beside the kernel's declaration) with this device's
//!   [`switchyard_kernels::plan::DeviceFacts`]; workspace comes from an arena
//!   the backend owns ([`CudaBackend::arena_bytes`]).
//! - [`switchyard_core::Backend::record`] captures the stream into a CUDA
//!   graph; [`switchyard_core::Backend::replay`] checks that every buffer it
//!   uses is still the same live allocation, then launches the graph.
//! - CUDA-only capabilities are reached from an `Arc<dyn Backend>` through
//!   [`switchyard_core::Backend::extension`], which returns the
//!   [`CudaBackend`] itself:
//!
//!   ```no_run
//!   # fn f(be: &dyn switchyard_core::Backend) -> switchyard_core::Result<()> {
//!   use switchyard_cuda::CudaBackend;
//!   if let Some(cuda) = be.extension().and_then(|x| x.downcast_ref::<CudaBackend>()) {
//!       let blas = cuda.cublas()?; // the GEMM yardstick, on the backend's stream
//!       # let _ = blas;
//!       // cuda.launch_with_geometry(sig, grid, block, args) for block-size sweeps
//!   }
//!   # Ok(())
//!   # }
//!   ```
//! - Modules are cached in memory and on disk ([`compile::cache_dir`],
//!   overridable with `SWITCHYARD_CUDA_CACHE`).
//!
//! `unsafe` code lives in two places: the private `raw` module (driver and
//! NVRTC calls) and `cublas` (the GEMM yardstick), each block with a SAFETY note.
#![warn(missing_docs)]

mod backend;
mod branch;
pub mod compile;
pub mod cublas;
pub mod nccl;
mod raw;

pub use backend::{cuda_backend, CudaBackend, CLUSTER_ENV, DEVICE_ENV, WGMMA_ENV};
pub use compile::{compile_module, nvrtc_version};
pub use cublas::Cublas;
