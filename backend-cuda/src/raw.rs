//! The only module that calls into the CUDA driver and NVRTC. Every function
//! here is a thin, checked wrapper over one `cudarc::{driver,nvrtc}::sys` call
//! that turns a status code into an [`Error`] carrying the CUDA error name.
//!
//! cudarc loads `libcuda` / `libnvrtc` lazily and panics when the library or
//! one of its symbols is missing. [`load_driver`] and [`load_nvrtc`] therefore
//! look for the library and for every symbol this crate calls before any
//! `sys` function runs; after they succeed, no cudarc call here can panic.
use cudarc::driver::sys as cu;
use cudarc::nvrtc::sys as nv;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use switchyard_core::{Error, Result};

pub(crate) use cu::{CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUgraph, CUgraphExec, CUmodule, CUstream, CUtensorMap};

const BACKEND: &str = switchyard_core::BackendKind::Cuda.name();

/// Driver entry points this crate calls; all must resolve before the first call.
const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceTotalMem_v2",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuStreamCreate",
    "cuStreamWaitEvent",
    "cuStreamSynchronize",
    "cuStreamDestroy_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemGetInfo_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemsetD8Async",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuEventElapsedTime_v2",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cuFuncSetAttribute",
    "cuTensorMapEncodeTiled",
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuGraphInstantiateWithFlags",
    "cuGraphDestroy",
    "cuGraphExecDestroy",
    "cuGraphLaunch",
    "cuProfilerStart",
    "cuProfilerStop",
];

/// NVRTC entry points this crate calls.
const NVRTC_SYMBOLS: &[&str] = &[
    "nvrtcVersion",
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
    "nvrtcDestroyProgram",
];

fn unavailable(reason: impl Into<String>) -> Error {
    Error::Unavailable { backend: BACKEND.into(), reason: reason.into() }
}

/// Runs `f`, turning a panic inside cudarc (a library or symbol that vanished
/// after the presence checks) into `Unavailable` instead of unwinding into
/// the caller.
fn no_panic<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(unavailable(format!("{what}: cudarc panicked: {msg}")))
        }
    }
}

/// Makes sure libcuda loads and exports every symbol used here. Must succeed
/// before any other driver function in this module is called.
pub(crate) fn load_driver() -> Result<()> {
    no_panic("loading libcuda", || {
        // SAFETY: is_culib_present only tries to dlopen candidate names; it
        // never calls into the library.
        if !unsafe { cu::is_culib_present() } {
            return Err(unavailable(
                "libcuda (the NVIDIA driver library) was not found: no NVIDIA driver is installed, or it is not on the loader path",
            ));
        }
        // SAFETY: the library is present (checked above), so culib() opens it
        // without panicking; `get` only resolves symbol addresses.
        let lib = unsafe { cu::culib() };
        let missing: Vec<&str> =
            DRIVER_SYMBOLS.iter().copied().filter(|s| unsafe { lib.get::<unsafe extern "C" fn()>(s.as_bytes()) }.is_err()).collect();
        if !missing.is_empty() {
            return Err(unavailable(format!("libcuda is too old: missing {}", missing.join(", "))));
        }
        Ok(())
    })
}

/// Makes sure libnvrtc loads and exports every symbol used here.
pub(crate) fn load_nvrtc() -> Result<()> {
    no_panic("loading libnvrtc", || {
        // SAFETY: only dlopens candidate names.
        if !unsafe { nv::is_culib_present() } {
            return Err(unavailable(
                "libnvrtc (the CUDA runtime compiler) was not found: install the CUDA toolkit or the nvidia-cuda-nvrtc package and put its lib directory on LD_LIBRARY_PATH",
            ));
        }
        // SAFETY: present (checked above); `get` only resolves addresses.
        let lib = unsafe { nv::culib() };
        let missing: Vec<&str> =
            NVRTC_SYMBOLS.iter().copied().filter(|s| unsafe { lib.get::<unsafe extern "C" fn()>(s.as_bytes()) }.is_err()).collect();
        if !missing.is_empty() {
            return Err(unavailable(format!("libnvrtc is too old: missing {}", missing.join(", "))));
        }
        Ok(())
    })
}

/// Maps a driver status to `Ok` or a `Driver` error naming the call and the
/// CUDA error (`CUDA_ERROR_ILLEGAL_ADDRESS`, ...).
fn check(what: &dyn std::fmt::Display, r: cu::CUresult) -> Result<()> {
    if r == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::driver(BACKEND, format!("{what}: {r:?}")))
    }
}

fn check_nv(what: &str, r: nv::nvrtcResult) -> Result<()> {
    if r == nv::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(Error::driver(BACKEND, format!("{what}: {r:?}")))
    }
}

// ---------------------------------------------------------------- device

/// `cuInit`, then the device count.
pub(crate) fn init_and_count() -> Result<i32> {
    let mut n: c_int = 0;
    // SAFETY: load_driver succeeded (callers guarantee it); cuInit has no
    // preconditions and `n` is a valid out-pointer.
    unsafe {
        check(&"cuInit", cu::cuInit(0))?;
        check(&"cuDeviceGetCount", cu::cuDeviceGetCount(&mut n))?;
    }
    Ok(n)
}

/// The driver's CUDA version as `major * 1000 + minor * 10`.
pub(crate) fn driver_version() -> Result<i32> {
    let mut v: c_int = 0;
    // SAFETY: valid out-pointer; the driver is loaded.
    unsafe { check(&"cuDriverGetVersion", cu::cuDriverGetVersion(&mut v))? };
    Ok(v)
}

pub(crate) fn device(ordinal: i32) -> Result<CUdevice> {
    let mut d: CUdevice = 0;
    // SAFETY: valid out-pointer; cuInit ran.
    unsafe { check(&"cuDeviceGet", cu::cuDeviceGet(&mut d, ordinal))? };
    Ok(d)
}

pub(crate) fn device_name(d: CUdevice) -> Result<String> {
    let mut buf = [0 as c_char; 256];
    // SAFETY: the driver writes at most `len` bytes, NUL-terminated.
    unsafe { check(&"cuDeviceGetName", cu::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, d))? };
    buf[255] = 0;
    // SAFETY: the buffer is NUL-terminated (last byte forced above).
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

pub(crate) fn device_total_mem(d: CUdevice) -> Result<usize> {
    let mut b: usize = 0;
    // SAFETY: valid out-pointer and device handle.
    unsafe { check(&"cuDeviceTotalMem", cu::cuDeviceTotalMem_v2(&mut b, d))? };
    Ok(b)
}

pub(crate) fn device_attr(d: CUdevice, a: cu::CUdevice_attribute) -> Result<i32> {
    let mut v: c_int = 0;
    // SAFETY: valid out-pointer and device handle.
    unsafe { check(&format_args!("cuDeviceGetAttribute({a:?})"), cu::cuDeviceGetAttribute(&mut v, a, d))? };
    Ok(v)
}

pub(crate) use cu::CUdevice_attribute as Attr;

// ---------------------------------------------------------------- context and stream

pub(crate) fn primary_ctx_retain(d: CUdevice) -> Result<CUcontext> {
    let mut c: CUcontext = std::ptr::null_mut();
    // SAFETY: valid out-pointer and device handle.
    unsafe { check(&"cuDevicePrimaryCtxRetain", cu::cuDevicePrimaryCtxRetain(&mut c, d))? };
    Ok(c)
}

pub(crate) fn primary_ctx_release(d: CUdevice) -> Result<()> {
    // SAFETY: balanced with a successful primary_ctx_retain by the caller.
    unsafe { check(&"cuDevicePrimaryCtxRelease", cu::cuDevicePrimaryCtxRelease_v2(d)) }
}

/// Makes `c` current on the calling thread (the driver keeps one per thread).
pub(crate) fn set_current(c: CUcontext) -> Result<()> {
    // SAFETY: `c` is a retained primary context, alive while the backend is.
    unsafe { check(&"cuCtxSetCurrent", cu::cuCtxSetCurrent(c)) }
}

/// Starts (`on`) or stops a profiler's collection (a no-op without one).
pub(crate) fn profiler(on: bool) -> Result<()> {
    // SAFETY: no arguments; a context is current.
    unsafe {
        if on {
            check(&"cuProfilerStart", cu::cuProfilerStart())
        } else {
            check(&"cuProfilerStop", cu::cuProfilerStop())
        }
    }
}

pub(crate) fn stream_create() -> Result<CUstream> {
    let mut s: CUstream = std::ptr::null_mut();
    // SAFETY: valid out-pointer; a context is current.
    unsafe {
        check(&"cuStreamCreate", cu::cuStreamCreate(&mut s, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint))?;
    }
    Ok(s)
}

pub(crate) fn stream_sync(s: CUstream, what: &dyn std::fmt::Display) -> Result<()> {
    // SAFETY: `s` is this backend's live stream.
    unsafe { check(what, cu::cuStreamSynchronize(s)) }
}

pub(crate) fn stream_destroy(s: CUstream) -> Result<()> {
    // SAFETY: `s` is live and no longer used after this call.
    unsafe { check(&"cuStreamDestroy", cu::cuStreamDestroy_v2(s)) }
}

// ---------------------------------------------------------------- memory

pub(crate) fn mem_alloc(bytes: usize) -> Result<CUdeviceptr> {
    let mut p: CUdeviceptr = 0;
    // SAFETY: valid out-pointer; a context is current.
    unsafe { check(&format_args!("cuMemAlloc({bytes} bytes)"), cu::cuMemAlloc_v2(&mut p, bytes))? };
    Ok(p)
}

/// # Safety contract (checked by the caller)
/// `p` is a live allocation from [`mem_alloc`] that no queued work still uses.
pub(crate) fn mem_free(p: CUdeviceptr) -> Result<()> {
    // SAFETY: the caller removed `p` from its range table (so it was live)
    // and synchronised the stream first, so no queued kernel reads it.
    unsafe { check(&format_args!("cuMemFree({p:#x})"), cu::cuMemFree_v2(p)) }
}

/// `(free, total)` device memory in bytes, for the current context's device.
pub(crate) fn mem_get_info() -> Result<(usize, usize)> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-pointers; a context is current.
    unsafe { check(&"cuMemGetInfo", cu::cuMemGetInfo_v2(&mut free, &mut total))? };
    Ok((free, total))
}

/// Host-to-device copy on `s`; returns once the host bytes are no longer needed.
pub(crate) fn upload(dst: CUdeviceptr, data: &[u8], s: CUstream) -> Result<()> {
    // SAFETY: the caller checked that [dst, dst + len) lies in a live
    // allocation. The stream is synchronised before returning, so `data` is
    // not read after this function returns even if the driver defers the copy.
    unsafe {
        check(&"cuMemcpyHtoDAsync", cu::cuMemcpyHtoDAsync_v2(dst, data.as_ptr() as *const c_void, data.len(), s))?;
    }
    stream_sync(s, &"upload (cuMemcpyHtoDAsync, then cuStreamSynchronize)")
}

/// Device-to-host copy after everything queued on `s`.
pub(crate) fn download(out: &mut [u8], src: CUdeviceptr, s: CUstream) -> Result<()> {
    // SAFETY: the caller checked the device range; `out` stays borrowed
    // mutably until the stream synchronisation below completes the copy.
    unsafe {
        check(&"cuMemcpyDtoHAsync", cu::cuMemcpyDtoHAsync_v2(out.as_mut_ptr() as *mut c_void, src, out.len(), s))?;
    }
    stream_sync(s, &"download (cuStreamSynchronize after cuMemcpyDtoHAsync)")
}

pub(crate) fn copy_dtod(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, s: CUstream) -> Result<()> {
    // SAFETY: the caller checked both ranges against live allocations.
    unsafe { check(&"cuMemcpyDtoDAsync", cu::cuMemcpyDtoDAsync_v2(dst, src, bytes, s)) }
}

pub(crate) fn memset0(dst: CUdeviceptr, bytes: usize, s: CUstream) -> Result<()> {
    // SAFETY: the caller checked the range against a live allocation.
    unsafe { check(&"cuMemsetD8Async", cu::cuMemsetD8Async(dst, 0, bytes, s)) }
}

// ---------------------------------------------------------------- events

pub(crate) struct Event(CUevent);

impl Event {
    pub(crate) fn new() -> Result<Self> {
        let mut e: CUevent = std::ptr::null_mut();
        // SAFETY: valid out-pointer; a context is current.
        unsafe { check(&"cuEventCreate", cu::cuEventCreate(&mut e, cu::CUevent_flags::CU_EVENT_DEFAULT as c_uint))? };
        Ok(Event(e))
    }

    pub(crate) fn record(&self, s: CUstream) -> Result<()> {
        // SAFETY: both handles are live.
        unsafe { check(&"cuEventRecord", cu::cuEventRecord(self.0, s)) }
    }

    /// Makes work enqueued on `s` after this call wait for what this event
    /// recorded (inside a stream capture: a graph edge).
    pub(crate) fn wait_on(&self, s: CUstream) -> Result<()> {
        // SAFETY: both handles are live.
        unsafe { check(&"cuStreamWaitEvent", cu::cuStreamWaitEvent(s, self.0, 0)) }
    }

    pub(crate) fn synchronize(&self) -> Result<()> {
        // SAFETY: live event.
        unsafe { check(&"cuEventSynchronize", cu::cuEventSynchronize(self.0)) }
    }

    /// Milliseconds between `start` and `self`, both recorded and complete.
    pub(crate) fn elapsed_since(&self, start: &Event) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: both events are live and were recorded; valid out-pointer.
        unsafe { check(&"cuEventElapsedTime_v2", cu::cuEventElapsedTime_v2(&mut ms, start.0, self.0))? };
        Ok(ms)
    }
}

// SAFETY: a CUevent is an opaque driver handle usable from any thread; the
// backend records and waits on its events under its lock.
unsafe impl Send for Event {}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: the event is live and owned by this value.
        let _ = unsafe { cu::cuEventDestroy_v2(self.0) };
    }
}

// ---------------------------------------------------------------- modules and launch

/// Loads a cubin image. A driver rejection is returned, not fatal (the caller
/// may rebuild a cached image from source).
pub(crate) fn module_load(image: &[u8], what: &str) -> Result<CUmodule> {
    let mut m: CUmodule = std::ptr::null_mut();
    // SAFETY: `image` outlives the call and the driver copies what it needs;
    // a cubin is self-delimiting (an ELF header gives its size). A context is current.
    unsafe { check(&format_args!("cuModuleLoadData({what})"), cu::cuModuleLoadData(&mut m, image.as_ptr() as *const c_void))? };
    Ok(m)
}

pub(crate) fn module_unload(m: CUmodule) -> Result<()> {
    // SAFETY: `m` is live and none of its functions is used afterwards.
    unsafe { check(&"cuModuleUnload", cu::cuModuleUnload(m)) }
}

pub(crate) fn module_function(m: CUmodule, symbol: &str, what: &str) -> Result<CUfunction> {
    let name = CString::new(symbol).map_err(|_| Error::invalid(symbol, "<symbol>", "contains a NUL byte"))?;
    let mut f: CUfunction = std::ptr::null_mut();
    // SAFETY: live module, NUL-terminated name, valid out-pointer.
    unsafe { check(&format_args!("cuModuleGetFunction({what})"), cu::cuModuleGetFunction(&mut f, m, name.as_ptr()))? };
    Ok(f)
}

/// One kernel parameter's bytes, 8-byte aligned; the driver reads as many as
/// the kernel's parameter type needs from the start.
pub(crate) type ParamSlot = u64;

/// A 2-D tiled TMA tensor map over the row-major bf16 matrix at `addr`
/// (`rows × cols`, rows `cols · 2` bytes apart), read in `box_rows ×
/// box_cols` boxes with the 128-byte swizzle, zeros past the extents.
pub(crate) fn tensor_map_bf16_2d(addr: CUdeviceptr, rows: u64, cols: u64, box_rows: u32, box_cols: u32, what: &str) -> Result<CUtensorMap> {
    let dims = [cols, rows];
    let strides = [cols * 2];
    let boxes = [box_cols, box_rows];
    let element_strides = [1u32, 1];
    // SAFETY: CUtensorMap is plain data (128 opaque bytes), fully written by
    // the driver on success.
    let mut map: CUtensorMap = unsafe { std::mem::zeroed() };
    // SAFETY: every array holds `rank` (2) entries (strides rank - 1), read
    // only during the call; `map` is a valid out-pointer. The driver only
    // encodes the address and checks alignment and extents; it does not
    // touch device memory (the caller checked `addr` is a live allocation).
    unsafe {
        check(
            &format_args!("cuTensorMapEncodeTiled({what}: {rows} x {cols} bf16 at {addr:#x}, box {box_rows} x {box_cols})"),
            cu::cuTensorMapEncodeTiled(
                &mut map,
                cu::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                2,
                addr as *mut c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                element_strides.as_ptr(),
                cu::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                cu::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                cu::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                cu::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            ),
        )?;
    }
    Ok(map)
}

/// Enqueues `f` on `s` with `shared_bytes` of dynamic shared memory.
/// `params` holds one slot per kernel parameter, in order, and `maps` the
/// tensor maps the kernel takes by value after them. `dependent`
/// launches it as a programmatic dependent of the launch before it on `s`
/// (it may start before that one finishes; the kernel itself waits with
/// `griddepcontrol.wait` before reading what earlier launches wrote).
/// `cluster` launches the grid as thread-block clusters of that shape
/// (each dimension divides the grid's; the driver refuses a cluster it
/// cannot co-schedule, which comes back as an error).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    f: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    dependent: bool,
    cluster: Option<[u32; 3]>,
    s: CUstream,
    params: &mut [ParamSlot],
    maps: &mut [CUtensorMap],
    what: &str,
) -> Result<()> {
    let mut ptrs: Vec<*mut c_void> = params.iter_mut().map(|p| p as *mut ParamSlot as *mut c_void).collect();
    ptrs.extend(maps.iter_mut().map(|m| m as *mut CUtensorMap as *mut c_void));
    let call = format_args!(
        "cuLaunchKernel({what}, grid {grid:?}, block {block:?}, shared {shared_bytes} bytes, dependent {dependent}, cluster {cluster:?})"
    );
    if dependent || cluster.is_some() {
        let mut attrs: Vec<cu::CUlaunchAttribute> = Vec::with_capacity(2);
        if dependent {
            // SAFETY: a plain-data attribute; the union is zeroed before the one field is set.
            let mut attr: cu::CUlaunchAttribute = unsafe { std::mem::zeroed() };
            attr.id = cu::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attr.value.programmaticStreamSerializationAllowed = 1;
            attrs.push(attr);
        }
        if let Some([x, y, z]) = cluster {
            // SAFETY: as above.
            let mut attr: cu::CUlaunchAttribute = unsafe { std::mem::zeroed() };
            attr.id = cu::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attr.value.clusterDim.x = x;
            attr.value.clusterDim.y = y;
            attr.value.clusterDim.z = z;
            attrs.push(attr);
        }
        let config = cu::CUlaunchConfig {
            gridDimX: grid[0],
            gridDimY: grid[1],
            gridDimZ: grid[2],
            blockDimX: block[0],
            blockDimY: block[1],
            blockDimZ: block[2],
            sharedMemBytes: shared_bytes,
            hStream: s,
            attrs: attrs.as_mut_ptr(),
            numAttrs: attrs.len() as u32,
        };
        // SAFETY: as for cuLaunchKernel below; `config` and `attrs` outlive the
        // call, which copies them.
        return unsafe { check(&call, cu::cuLaunchKernelEx(&config, f, ptrs.as_mut_ptr(), std::ptr::null_mut())) };
    }
    // SAFETY: `f` comes from a loaded module; the caller built `params` from
    // arguments validated against the kernel's declared signature (same count
    // and kinds as the .cu entry point, plus the workspace pointer where the
    // plan asks for one, then the tensor maps the entry registers), and
    // checked every pointer argument against live allocations. cuLaunchKernel copies the parameter values before
    // returning, so `params` may be dropped afterwards. Dynamic shared memory
    // past the function's limit is refused by the driver, not undefined.
    unsafe {
        check(
            &call,
            cu::cuLaunchKernel(
                f,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared_bytes,
                s,
                ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            ),
        )
    }
}

/// Lets `f` launch as clusters of up to 16 blocks (past the portable 8).
pub(crate) fn func_allow_large_clusters(f: CUfunction, what: &str) -> Result<()> {
    // SAFETY: `f` comes from a loaded module of the current context; the
    // attribute takes a plain integer.
    unsafe {
        check(
            &format_args!("cuFuncSetAttribute({what}, NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 1)"),
            cu::cuFuncSetAttribute(f, cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
        )
    }
}

/// Lets `f` launch with up to `bytes` of dynamic shared memory (the driver
/// caps it at 48 KiB until a function opts in).
pub(crate) fn func_set_max_dynamic_shared(f: CUfunction, bytes: u32, what: &str) -> Result<()> {
    let value = c_int::try_from(bytes).map_err(|_| Error::invalid(what, "<plan>", format!("{bytes} bytes of shared memory")))?;
    // SAFETY: `f` comes from a loaded module of the current context; the
    // attribute takes a plain integer.
    unsafe {
        check(
            &format_args!("cuFuncSetAttribute({what}, MAX_DYNAMIC_SHARED_SIZE_BYTES = {bytes})"),
            cu::cuFuncSetAttribute(f, cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, value),
        )
    }
}

// ---------------------------------------------------------------- graphs (recordings)

/// Starts capturing `s` into a graph. Relaxed mode: the capture does not
/// forbid other driver calls in the process (the backend's arena may
/// `cuMemAlloc` while capturing); the backend itself refuses the calls that
/// would break the capture (synchronisation, host copies, frees).
pub(crate) fn begin_capture(s: CUstream) -> Result<()> {
    // SAFETY: `s` is this backend's live, non-default stream, not capturing
    // (the backend's `capturing` flag, held under its lock, says so).
    unsafe { check(&"cuStreamBeginCapture_v2", cu::cuStreamBeginCapture_v2(s, cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)) }
}

/// Ends the capture of `s`. The graph comes back even when the driver
/// reports an error, where it made one (null otherwise), so that the caller
/// can destroy it.
pub(crate) fn end_capture(s: CUstream) -> (CUgraph, Result<()>) {
    let mut g: CUgraph = std::ptr::null_mut();
    // SAFETY: `s` is capturing (begun by begin_capture); valid out-pointer.
    let r = unsafe { cu::cuStreamEndCapture(s, &mut g) };
    (g, check(&"cuStreamEndCapture", r))
}

/// Destroys a captured graph template (not its instantiations).
pub(crate) fn graph_destroy(g: CUgraph) {
    if !g.is_null() {
        // SAFETY: `g` came from end_capture, is owned by the caller and not used afterwards.
        let _ = unsafe { cu::cuGraphDestroy(g) };
    }
}

/// An instantiated graph, owned: destroyed on drop. It retains the device's
/// primary context, so it stays valid even if it outlives the backend that
/// made it (the recording is then refused at replay; only the handle lives on).
pub(crate) struct GraphExec {
    exec: CUgraphExec,
    device: CUdevice,
    ctx: CUcontext,
}

// SAFETY: a CUgraphExec is an opaque driver handle usable from any thread;
// it is launched only through the backend, under its lock, and destroyed once
// in Drop.
unsafe impl Send for GraphExec {}
// SAFETY: as for Send: shared references only read the handle.
unsafe impl Sync for GraphExec {}

impl GraphExec {
    /// Instantiates `g` in the current context (that of `device`'s primary context).
    pub(crate) fn instantiate(g: CUgraph, device: CUdevice) -> Result<GraphExec> {
        let ctx = primary_ctx_retain(device)?;
        let mut exec: CUgraphExec = std::ptr::null_mut();
        // SAFETY: `g` is a complete captured graph; valid out-pointer; the
        // context that captured it is current.
        let r = unsafe { cu::cuGraphInstantiateWithFlags(&mut exec, g, 0) };
        if let Err(e) = check(&"cuGraphInstantiateWithFlags", r) {
            let _ = primary_ctx_release(device);
            return Err(e);
        }
        Ok(GraphExec { exec, device, ctx })
    }

    /// Enqueues the graph on `s`.
    pub(crate) fn launch(&self, s: CUstream) -> Result<()> {
        // SAFETY: `exec` is live (owned by self); `s` is the live stream of
        // the backend that made it, whose context is current; the caller
        // checked that every allocation the graph uses is still live.
        unsafe { check(&"cuGraphLaunch", cu::cuGraphLaunch(self.exec, s)) }
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        if set_current(self.ctx).is_ok() {
            // SAFETY: `exec` is live and owned by self; its context is alive
            // (retained by self) and current.
            let _ = unsafe { cu::cuGraphExecDestroy(self.exec) };
        }
        let _ = primary_ctx_release(self.device);
    }
}

// ---------------------------------------------------------------- NVRTC

/// NVRTC's (major, minor) version.
pub(crate) fn nvrtc_version() -> Result<(i32, i32)> {
    let (mut a, mut b) = (0 as c_int, 0 as c_int);
    // SAFETY: load_nvrtc succeeded (callers guarantee it); valid out-pointers.
    unsafe { check_nv("nvrtcVersion", nv::nvrtcVersion(&mut a, &mut b))? };
    Ok((a, b))
}

/// Outcome of one NVRTC compilation.
pub(crate) enum Compiled {
    /// The cubin image, and the log (warnings) if any.
    Cubin(Vec<u8>, String),
    /// The compilation failed; NVRTC's log.
    Failed(nv::nvrtcResult, String),
}

/// Compiles `src` (named `name` in diagnostics) with `options` to a cubin.
pub(crate) fn nvrtc_compile(src: &str, name: &str, options: &[String]) -> Result<Compiled> {
    let csrc = CString::new(src).map_err(|_| Error::invalid(name, "<source>", "contains a NUL byte"))?;
    let cname = CString::new(name).map_err(|_| Error::invalid(name, "<source name>", "contains a NUL byte"))?;
    let copts: Vec<CString> = options
        .iter()
        .map(|o| CString::new(o.as_str()).map_err(|_| Error::invalid(name, "<nvrtc option>", format!("{o:?} contains a NUL byte"))))
        .collect::<Result<_>>()?;
    let opt_ptrs: Vec<*const c_char> = copts.iter().map(|c| c.as_ptr()).collect();
    let mut prog: nv::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: NUL-terminated strings that outlive the program; no headers.
    unsafe {
        check_nv(
            "nvrtcCreateProgram",
            nv::nvrtcCreateProgram(&mut prog, csrc.as_ptr(), cname.as_ptr(), 0, std::ptr::null(), std::ptr::null()),
        )?;
    }
    let out = compile_created(prog, &opt_ptrs);
    // SAFETY: `prog` was created above and is not used after this.
    unsafe { nv::nvrtcDestroyProgram(&mut prog) };
    out
}

fn compile_created(prog: nv::nvrtcProgram, opts: &[*const c_char]) -> Result<Compiled> {
    // SAFETY: `prog` is a live program; `opts` points at live C strings.
    let status = unsafe { nv::nvrtcCompileProgram(prog, opts.len() as c_int, opts.as_ptr()) };
    let log = program_log(prog)?;
    if status != nv::nvrtcResult::NVRTC_SUCCESS {
        return Ok(Compiled::Failed(status, log));
    }
    let mut size = 0usize;
    // SAFETY: compiled program; valid out-pointer.
    unsafe { check_nv("nvrtcGetCUBINSize", nv::nvrtcGetCUBINSize(prog, &mut size))? };
    let mut cubin = vec![0u8; size];
    // SAFETY: the buffer holds exactly `size` bytes, as NVRTC reported.
    unsafe { check_nv("nvrtcGetCUBIN", nv::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut c_char))? };
    Ok(Compiled::Cubin(cubin, log))
}

fn program_log(prog: nv::nvrtcProgram) -> Result<String> {
    let mut size = 0usize;
    // SAFETY: live program; valid out-pointer.
    unsafe { check_nv("nvrtcGetProgramLogSize", nv::nvrtcGetProgramLogSize(prog, &mut size))? };
    if size <= 1 {
        return Ok(String::new());
    }
    let mut buf = vec![0u8; size];
    // SAFETY: the buffer holds `size` bytes, as NVRTC reported.
    unsafe { check_nv("nvrtcGetProgramLog", nv::nvrtcGetProgramLog(prog, buf.as_mut_ptr() as *mut c_char))? };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Runs a driver-touching closure with cudarc panics turned into errors.
pub(crate) fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    no_panic(what, f)
}

/// A driver handle (context, stream, module, function) shared across threads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shared<T>(pub T);

// SAFETY: CUDA driver handles are opaque identifiers that the driver API
// accepts from any host thread (it is thread-safe); the backend makes its
// context current on the calling thread before every use, and mutable
// bookkeeping around them sits behind a Mutex.
unsafe impl<T> Send for Shared<T> {}
// SAFETY: as for Send: the handles are never dereferenced on the host.
unsafe impl<T> Sync for Shared<T> {}
