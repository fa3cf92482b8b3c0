//! [`NcclComm`]: the [`Communicator`] of CUDA ranks, over NCCL.
//!
//! libnccl is loaded at run time (cudarc's `nccl` feature with
//! `dynamic-loading`), so building needs no NCCL; every symbol called here
//! is looked up first ([`available`]), so a machine without NCCL gets
//! [`Error::Unavailable`] naming the library, never cudarc's panic.
//!
//! One thread per GPU: rank `r` is a thread of this process driving
//! device `r` through its own [`CudaBackend`] (ARCHITECTURE.md, "Tensor
//! parallelism", says why). The NCCL id travels in memory: [`unique_id`]
//! on the launching thread, then every rank's thread calls
//! [`NcclComm::init`] concurrently (NCCL's initialisation waits for all).
//!
//! NVLink SHARP (multicast) stays off: [`unique_id`] sets
//! `NCCL_NVLS_ENABLE=0` in the environment when it is unset, refuses any
//! other value, and nothing here asks for multicast objects.
//!
//! Collectives are enqueued on the rank's backend stream (so they are
//! ordered with its launches and can be captured into a recording, CUDA
//! graphs accepting NCCL calls since NCCL 2.9); `SWITCHYARD_NCCL_CAPTURE=0`
//! keeps them out of recordings (the decode step then runs launch by launch).
use crate::backend::CudaBackend;
use cudarc::nccl::sys;
use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex};
use switchyard_core::comm::Communicator;
use switchyard_core::{Backend, DType, DeviceBuffer, Error, Region, Result};

/// The symbols this module calls, checked before the first call.
const SYMBOLS: &[&str] = &[
    "ncclGetVersion",
    "ncclGetUniqueId",
    "ncclCommInitRank",
    "ncclAllReduce",
    "ncclAllGather",
    "ncclCommDestroy",
    "ncclCommAbort",
    "ncclGetErrorString",
];

/// Environment variable that must be `0` (or unset: then it is set to `0`).
pub const NVLS_ENV: &str = "NCCL_NVLS_ENABLE";

/// Environment variable that, set to `0`, keeps NCCL calls out of recordings.
pub const CAPTURE_ENV: &str = "SWITCHYARD_NCCL_CAPTURE";

fn unavailable(reason: impl Into<String>) -> Error {
    Error::Unavailable { backend: "cuda (NCCL)".into(), reason: reason.into() }
}

/// `Ok` when libnccl loads and has every symbol this module calls, with
/// its version `(major, minor, patch)`; otherwise [`Error::Unavailable`]
/// saying what is missing.
pub fn available() -> Result<(i32, i32, i32)> {
    // SAFETY: only tries to open the library by its candidate names.
    if !unsafe { sys::is_culib_present() } {
        return Err(unavailable(
            "libnccl could not be loaded: the loader looks for libnccl.so (and numbered names such as libnccl.so.12), not NCCL's own \
             soname libnccl.so.2, so link libnccl.so to libnccl.so.2 in a directory on LD_LIBRARY_PATH (a pip wheel \
             ships it in site-packages/nvidia/nccl/lib); tensor parallelism on cuda needs it",
        ));
    }
    // SAFETY: the library is present (checked above); `culib` opens it once and keeps it loaded.
    let lib = unsafe { sys::culib() };
    // SAFETY: only looks the symbols up; none is called through this type.
    let missing: Vec<&str> =
        SYMBOLS.iter().copied().filter(|s| unsafe { lib.get::<unsafe extern "C" fn()>(s.as_bytes()) }.is_err()).collect();
    if !missing.is_empty() {
        return Err(unavailable(format!("libnccl lacks {} (NCCL 2.24 or newer is needed for bf16)", missing.join(", "))));
    }
    let mut v = 0;
    // SAFETY: the symbol resolved above; `v` is a valid out-pointer.
    check(0, "init", unsafe { sys::ncclGetVersion(&mut v) })?;
    let (major, minor, patch) = if v >= 10000 { (v / 10000, (v % 10000) / 100, v % 100) } else { (v / 1000, (v % 1000) / 100, v % 100) };
    if (major, minor) < (2, 24) {
        return Err(unavailable(format!("libnccl {major}.{minor}.{patch} predates bf16 reductions (NCCL 2.24 or newer is needed)")));
    }
    Ok((major, minor, patch))
}

fn check(rank: usize, op: &str, r: sys::ncclResult_t) -> Result<()> {
    if r == sys::ncclResult_t::ncclSuccess {
        return Ok(());
    }
    // SAFETY: ncclGetErrorString resolved in `available` (every caller
    // checked it first) and returns a static NUL-terminated string.
    let text = unsafe { CStr::from_ptr(sys::ncclGetErrorString(r)) }.to_string_lossy().into_owned();
    Err(Error::Communicator { rank, op: op.into(), reason: format!("NCCL {r:?}: {text}") })
}

/// A group's NCCL id, made once by [`unique_id`] and handed to every rank.
#[derive(Clone, Copy)]
pub struct NcclId(sys::ncclUniqueId);

/// Checks NCCL ([`available`]) and the multicast setting (sets
/// `NCCL_NVLS_ENABLE=0` when unset, refuses another value), then makes the
/// id of a new group. Call it on the launching thread, before the ranks'
/// threads start (it may set an environment variable).
pub fn unique_id() -> Result<NcclId> {
    let nvls = std::env::var(NVLS_ENV);
    if let Ok(v) = nvls.as_ref().map(|v| v.trim()).map_err(|_| ()) {
        if v != "0" {
            return Err(Error::invalid(
                "nccl",
                NVLS_ENV,
                format!("is {v:?}; NVLink multicast stays off in Switchyard: set {NVLS_ENV}=0 or leave it unset"),
            ));
        }
    }
    available()?;
    if nvls.is_err() {
        // Before any NCCL initialisation, on the launching thread, while no
        // rank thread (which NCCL would read it from) exists yet.
        std::env::set_var(NVLS_ENV, "0");
    }
    let mut id = sys::ncclUniqueId { internal: [0; 128] };
    // SAFETY: NCCL is loaded with this symbol (`available`); `id` is a valid out-pointer.
    check(0, "init", unsafe { sys::ncclGetUniqueId(&mut id) })?;
    Ok(NcclId(id))
}

/// One rank's NCCL communicator, bound to one [`CudaBackend`].
pub struct NcclComm {
    rank: usize,
    world: usize,
    be: Arc<dyn Backend>,
    /// The communicator handle; NCCL calls on one handle are serialised.
    comm: Mutex<sys::ncclComm_t>,
    /// 4 bytes the barrier reduces.
    token: DeviceBuffer,
    capturable: bool,
}

// SAFETY: the handle is only used under the mutex, and NCCL communicators
// may be used from any thread as long as calls on one are not concurrent.
unsafe impl Send for NcclComm {}
// SAFETY: as above: every use of the handle takes the mutex.
unsafe impl Sync for NcclComm {}

fn nccl_dtype(rank: usize, dtype: DType) -> Result<(sys::ncclDataType_t, usize)> {
    match dtype {
        DType::F32 => Ok((sys::ncclDataType_t::ncclFloat32, 4)),
        DType::BF16 => Ok((sys::ncclDataType_t::ncclBfloat16, 2)),
        other => Err(Error::Communicator {
            rank,
            op: "all_reduce_sum".into(),
            reason: format!("dtype {other:?}: only F32 and BF16 buffers are summed"),
        }),
    }
}

impl NcclComm {
    /// Joins group `id` as `rank` of `world`, on `be` (a [`CudaBackend`]
    /// for the rank's device). Blocks until every rank has called it, so
    /// the ranks call it from their own threads.
    pub fn init(be: Arc<dyn Backend>, id: &NcclId, rank: usize, world: usize) -> Result<Self> {
        available()?;
        if rank >= world {
            return Err(Error::invalid("nccl", "rank", format!("rank {rank} is not one of the {world} ranks")));
        }
        let cuda = be
            .extension()
            .and_then(|x| x.downcast_ref::<CudaBackend>())
            .ok_or_else(|| Error::invalid("nccl", "backend", format!("NCCL runs on the cuda backend, not {}", be.name())))?;
        // Makes the backend's context current on this thread: NCCL binds the
        // communicator to the current device.
        cuda.current_stream()?;
        let token = DeviceBuffer::zeroed(&be, 4)?;
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: the symbol resolved (`available`); `comm` is a valid
        // out-pointer; the id came from ncclGetUniqueId; rank < world.
        check(rank, "init", unsafe { sys::ncclCommInitRank(&mut comm, world as i32, id.0, rank as i32) })?;
        let capturable = std::env::var(CAPTURE_ENV).map_or(true, |v| v.trim() != "0");
        Ok(NcclComm { rank, world, be, comm: Mutex::new(comm), token, capturable })
    }

    /// The stream of the backend (its context current on this thread) and
    /// the handle, locked.
    fn enter(&self, op: &str) -> Result<(sys::cudaStream_t, std::sync::MutexGuard<'_, sys::ncclComm_t>)> {
        let cuda = self.be.extension().and_then(|x| x.downcast_ref::<CudaBackend>()).expect("checked at init");
        let stream = cuda.current_stream()? as sys::cudaStream_t;
        let comm = self.comm.lock().map_err(|_| Error::Communicator {
            rank: self.rank,
            op: op.into(),
            reason: "the communicator was poisoned by a panic".into(),
        })?;
        Ok((stream, comm))
    }

    fn range(&self, op: &str, what: &str, r: Region, bytes: usize) -> Result<()> {
        if bytes > r.len() {
            return Err(Error::Communicator {
                rank: self.rank,
                op: op.into(),
                reason: format!("{what}: {bytes} bytes do not fit the {}-byte region", r.len()),
            });
        }
        self.be.check_range(r.addr(), bytes).map_err(|d| Error::oob(op, what, d))
    }
}

impl Communicator for NcclComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn name(&self) -> &'static str {
        "nccl"
    }

    fn all_reduce_sum(&self, buf: Region, dtype: DType, count: usize) -> Result<()> {
        let op = "all_reduce_sum";
        let (dt, width) = nccl_dtype(self.rank, dtype)?;
        self.range(op, "buf", buf, count.saturating_mul(width))?;
        let (stream, comm) = self.enter(op)?;
        let p = buf.addr() as *mut c_void;
        // SAFETY: `buf` holds `count` elements of a live allocation of this
        // backend's device (checked above); in place (send = recv) is allowed;
        // the handle is locked and `stream` is the backend's live stream.
        check(self.rank, op, unsafe { sys::ncclAllReduce(p, p, count, dt, sys::ncclRedOp_t::ncclSum, *comm, stream) })
    }

    fn all_gather(&self, send: Region, recv: Region) -> Result<()> {
        let op = "all_gather";
        self.range(op, "recv", recv, send.len().saturating_mul(self.world))?;
        self.range(op, "send", send, send.len())?;
        if send.is_empty() {
            return Ok(());
        }
        let (stream, comm) = self.enter(op)?;
        // SAFETY: both regions are live allocations of this device with the
        // sizes NCCL touches (checked above); bytes are gathered as uint8.
        check(self.rank, op, unsafe {
            sys::ncclAllGather(
                send.addr() as *const c_void,
                recv.addr() as *mut c_void,
                send.len(),
                sys::ncclDataType_t::ncclUint8,
                *comm,
                stream,
            )
        })
    }

    fn barrier(&self) -> Result<()> {
        self.all_reduce_sum(self.token.region(), DType::F32, 1)?;
        self.be.synchronize()
    }

    fn capturable(&self) -> bool {
        self.capturable
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        let comm = *self.comm.get_mut().unwrap_or_else(|p| p.into_inner());
        if !comm.is_null() {
            // Abort rather than destroy: a rank dropped after a failure must
            // not wait for peers inside a collective that will never finish.
            // SAFETY: the handle is valid, dropped once, and no call is in flight (we hold `&mut self`).
            unsafe { sys::ncclCommAbort(comm) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where libnccl is missing (CI), the error names it and says what to
    /// do; where it is present, its version is one that sums bf16.
    #[test]
    fn nccl_is_found_or_named_as_missing() {
        match available() {
            Ok(v) => assert!(v >= (2, 24, 0), "{v:?}"),
            Err(e) => {
                let text = e.to_string();
                assert!(matches!(e, Error::Unavailable { .. }), "{text}");
                assert!(text.contains("cuda (NCCL) unavailable: libnccl"), "{text}");
            }
        }
    }

    /// Multicast on is refused before NCCL is touched.
    #[test]
    fn nvls_must_stay_off() {
        std::env::set_var(NVLS_ENV, "1");
        let e = unique_id().err().map(|e| e.to_string());
        std::env::remove_var(NVLS_ENV);
        let e = e.expect("refused");
        assert!(e.contains("NCCL_NVLS_ENABLE") && e.contains("NVLink multicast stays off"), "{e}");
    }
}
