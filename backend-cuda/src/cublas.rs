//! cuBLAS as the GEMM yardstick: `C[M, N] = A[M, K] · B[N, K]ᵀ`, row-major
//! bf16 operands, f32 compute, on the backend's own stream, so it can be
//! timed with [`switchyard_core::Backend::time_ms`] next to the catalogue's
//! kernels in the same process.
//!
//! cuBLAS is column-major; the row-major product is computed as its
//! transpose, `Cᵀ[N, M] = B · Aᵀ`: B's row-major `[N, K]` buffer read
//! column-major is `Bᵀ` (so `transa = T`, `lda = K`), A's is `Aᵀ`
//! (`transb = N`, `ldb = K`), and `Cᵀ` column-major with `ldc = N` is C
//! row-major.
//!
//! libcublas is loaded at run time (cudarc `dynamic-loading`); like the
//! driver, it and every symbol called here are looked up first, so a missing
//! library is [`Error::Unavailable`], never a panic. The `unsafe` FFI calls
//! live here rather than in `raw` because only this yardstick uses cuBLAS.
use crate::backend::CudaBackend;
use cudarc::cublas::sys as cb;
use std::ffi::c_void;
use switchyard_core::{Backend, Error, Result};

const SYMBOLS: &[&str] = &["cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasGemmEx"];

fn unavailable(reason: impl Into<String>) -> Error {
    Error::Unavailable { backend: "cuda (cuBLAS)".into(), reason: reason.into() }
}

fn check(what: &str, r: cb::cublasStatus_t) -> Result<()> {
    if r == cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error::driver(switchyard_core::BackendKind::Cuda.name(), format!("{what}: {r:?}")))
    }
}

/// A cuBLAS handle bound to one [`CudaBackend`]'s context and stream; made
/// by [`CudaBackend::cublas`] (or `Cublas::new`). Its calls are refused
/// inside [`switchyard_core::Backend::record`]: a recording tracks only the
/// buffers of the backend's own launches and copies.
pub struct Cublas<'a> {
    be: &'a CudaBackend,
    handle: cb::cublasHandle_t,
}

impl<'a> Cublas<'a> {
    /// Loads libcublas, creates a handle in `be`'s context and binds it to
    /// `be`'s stream. `Unavailable` when the library or a symbol is missing.
    pub fn new(be: &'a CudaBackend) -> Result<Cublas<'a>> {
        // SAFETY: `is_culib_present` only tries to open the library by name.
        if !unsafe { cb::is_culib_present() } {
            return Err(unavailable("libcublas could not be loaded (put its directory on LD_LIBRARY_PATH)"));
        }
        // SAFETY: the library is present (checked above); `culib` opens it once and keeps it loaded.
        let lib = unsafe { cb::culib() };
        // SAFETY: only looks the symbols up; none is called through this type.
        let missing: Vec<&str> =
            SYMBOLS.iter().copied().filter(|s| unsafe { lib.get::<unsafe extern "C" fn()>(s.as_bytes()) }.is_err()).collect();
        if !missing.is_empty() {
            return Err(unavailable(format!("libcublas lacks {}", missing.join(", "))));
        }
        let stream = be.stream_outside_recording("cublas")?;
        let mut handle: cb::cublasHandle_t = std::ptr::null_mut();
        // SAFETY: the backend's context is current on this thread (stream_outside_recording made it so);
        // `handle` is a valid out-pointer and every symbol resolved above.
        check("cublasCreate_v2", unsafe { cb::cublasCreate_v2(&mut handle) })?;
        // SAFETY: `handle` was just created; `stream` is the backend's live stream, which outlives
        // `self` because `self` borrows the backend.
        if let Err(e) = check("cublasSetStream_v2", unsafe { cb::cublasSetStream_v2(handle, stream as cb::cudaStream_t) }) {
            // SAFETY: `handle` is valid and not used again.
            unsafe { cb::cublasDestroy_v2(handle) };
            return Err(e);
        }
        Ok(Cublas { be, handle })
    }

    /// `C[M, N] = A[M, K] · B[N, K]ᵀ`, row-major bf16, f32 compute
    /// (`CUBLAS_COMPUTE_32F`), default algorithm; enqueued on the backend's
    /// stream. Every operand range is checked against the backend's live
    /// allocations first.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_bf16(&self, a: u64, b: u64, c: u64, m: usize, n: usize, k: usize) -> Result<()> {
        let op = "cublas_gemm_bf16";
        for (name, v) in [("m", m), ("n", n), ("k", k)] {
            if v == 0 || i32::try_from(v).is_err() {
                return Err(Error::invalid(op, name, format!("{name} = {v} must be in 1..2^31")));
            }
        }
        for (name, addr, elems) in [("a", a, m * k), ("b", b, n * k), ("c", c, m * n)] {
            self.be.check_range(addr, elems * 2).map_err(|d| Error::oob(op, name, d))?;
        }
        self.be.stream_outside_recording(op)?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: a, b, c are live device allocations of the backend's context (checked above)
        // holding at least the bytes each operand needs; the context is current; alpha and beta
        // are host f32 values, the handle's default pointer mode; the strides match the sizes.
        let r = unsafe {
            cb::cublasGemmEx(
                self.handle,
                cb::cublasOperation_t::CUBLAS_OP_T,
                cb::cublasOperation_t::CUBLAS_OP_N,
                n as i32,
                m as i32,
                k as i32,
                &alpha as *const f32 as *const c_void,
                b as *const c_void,
                cb::cudaDataType::CUDA_R_16BF,
                k as i32,
                a as *const c_void,
                cb::cudaDataType::CUDA_R_16BF,
                k as i32,
                &beta as *const f32 as *const c_void,
                c as *mut c_void,
                cb::cudaDataType::CUDA_R_16BF,
                n as i32,
                cb::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        check("cublasGemmEx", r)
    }
}

impl Drop for Cublas<'_> {
    fn drop(&mut self) {
        if self.be.current_stream().is_ok() {
            // SAFETY: the handle is valid and dropped once; its context is current.
            unsafe { cb::cublasDestroy_v2(self.handle) };
        }
    }
}
