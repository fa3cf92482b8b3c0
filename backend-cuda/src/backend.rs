//! [`CudaBackend`]: the [`Backend`] trait over the CUDA driver API.
use crate::compile::{DiskCache, Job};
use crate::raw::{self, Attr, CUcontext, CUdevice, CUfunction, CUmodule, CUstream, Shared};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use switchyard_core::vaddr::RangeTable;
use switchyard_core::{Arg, Backend, BackendInfo, BackendKind, Error, Grid, KernelSig, Recording, Result};

const NAME: &str = BackendKind::Cuda.name();

/// Environment variable picking the device ordinal (default 0).
pub const DEVICE_ENV: &str = "SWITCHYARD_CUDA_DEVICE";

/// The CUDA backend: one device, its primary context, one non-blocking
/// stream. Addresses are real `CUdeviceptr` values, tracked in a
/// [`RangeTable`] so every pointer argument is checked against a live
/// allocation before it reaches the GPU.
///
/// Launches, copies and `memset0` are asynchronous and ordered on the
/// stream; `upload`, `download`, `free` and `synchronize` wait, and report a
/// deferred kernel fault with its CUDA error name. Kernel modules are compiled
/// with NVRTC on first use for the device's exact architecture and cached in
/// memory and on disk (see [`crate::compile::cache_dir`]).
pub struct CudaBackend {
    device: CUdevice,
    ctx: Shared<CUcontext>,
    stream: Shared<CUstream>,
    arch: String,
    info: BackendInfo,
    cache: DiskCache,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    ranges: RangeTable,
    modules: HashMap<String, Shared<CUmodule>>,
    functions: HashMap<(&'static str, &'static str), Shared<CUfunction>>,
}

inventory::submit! { switchyard_core::registry::BackendFactory { kind: BackendKind::Cuda, open: cuda_backend } }

/// Opens the CUDA backend on device `$SWITCHYARD_CUDA_DEVICE` (default 0).
///
/// Returns [`Error::Unavailable`] — never panics — when libcuda or libnvrtc
/// cannot be loaded, the driver fails to initialise, or there is no device.
pub fn cuda_backend() -> Result<Arc<dyn Backend>> {
    let ordinal = match std::env::var(DEVICE_ENV) {
        Ok(v) => {
            v.trim().parse::<i32>().map_err(|_| Error::invalid("cuda_backend", DEVICE_ENV, format!("{v:?} is not a device ordinal")))?
        }
        Err(_) => 0,
    };
    Ok(Arc::new(CudaBackend::open(ordinal)?))
}

fn unavailable(reason: impl Into<String>) -> Error {
    Error::Unavailable { backend: NAME.into(), reason: reason.into() }
}

impl CudaBackend {
    /// Opens device `ordinal`. See [`cuda_backend`].
    pub fn open(ordinal: i32) -> Result<CudaBackend> {
        raw::load_driver()?;
        raw::guarded("opening the CUDA device", || {
            let count = raw::init_and_count().map_err(|e| unavailable(format!("the CUDA driver failed to initialise ({e})")))?;
            if count == 0 {
                return Err(unavailable("the CUDA driver found no device"));
            }
            if ordinal < 0 || ordinal >= count {
                return Err(unavailable(format!("device {ordinal} requested, but the driver sees {count}")));
            }
            raw::load_nvrtc()?;
            let nvrtc = raw::nvrtc_version()?;
            let device = raw::device(ordinal)?;
            let major = raw::device_attr(device, Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
            let minor = raw::device_attr(device, Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
            let sms = raw::device_attr(device, Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
            let l2 = raw::device_attr(device, Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?;
            let clock_khz = raw::device_attr(device, Attr::CU_DEVICE_ATTRIBUTE_CLOCK_RATE).unwrap_or(0);
            let total = raw::device_total_mem(device)?;
            let name = raw::device_name(device)?;
            let driver = raw::driver_version()?;
            let ctx = raw::primary_ctx_retain(device)?;
            let stream = match raw::set_current(ctx).and_then(|_| raw::stream_create()) {
                Ok(s) => s,
                Err(e) => {
                    let _ = raw::primary_ctx_release(device);
                    return Err(e);
                }
            };
            let arch = format!("sm_{major}{minor}");
            let cache = DiskCache::new(nvrtc);
            let mut details = vec![
                ("compute capability".to_string(), format!("{major}.{minor}")),
                ("arch".to_string(), arch.clone()),
                ("multiprocessors".to_string(), sms.to_string()),
                ("L2 bytes".to_string(), l2.to_string()),
                ("memory bytes".to_string(), total.to_string()),
                ("nvrtc".to_string(), format!("{}.{}", nvrtc.0, nvrtc.1)),
                ("module cache".to_string(), cache.dir().map_or("disabled".into(), |d| d.display().to_string())),
            ];
            if clock_khz > 0 {
                details.push(("SM clock MHz".to_string(), (clock_khz / 1000).to_string()));
            }
            let info = BackendInfo {
                backend: BackendKind::Cuda,
                device: name,
                driver: format!("CUDA driver {}.{}", driver / 1000, (driver % 1000) / 10),
                max_alloc_bytes: total as u64,
                details,
            };
            Ok(CudaBackend { device, ctx: Shared(ctx), stream: Shared(stream), arch, info, cache, state: Mutex::new(State::default()) })
        })
    }

    /// The NVRTC target, e.g. `sm_90`.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// Makes this backend's context current on the calling thread and returns
    /// its stream, for a library (cuBLAS) that enqueues work on it directly:
    /// that work is then ordered with this backend's launches and copies.
    pub(crate) fn current_stream(&self) -> Result<CUstream> {
        let _st = self.enter()?;
        Ok(self.stream.0)
    }

    /// Locks the bookkeeping and makes the context current on this thread.
    fn enter(&self) -> Result<MutexGuard<'_, State>> {
        let st = self.state.lock().map_err(|_| Error::driver(NAME, "backend state poisoned by a panic on another thread"))?;
        raw::set_current(self.ctx.0)?;
        Ok(st)
    }

    fn check(st: &State, op: &str, arg: &str, addr: u64, bytes: usize) -> Result<()> {
        st.ranges.check(addr, bytes as u64).map_err(|d| Error::oob(op, arg, d))
    }

    /// The function for `sig`, compiling and loading its module on first use.
    fn function(&self, st: &mut State, sig: &'static KernelSig) -> Result<CUfunction> {
        if let Some(f) = st.functions.get(&(sig.module, sig.symbol)) {
            return Ok(f.0);
        }
        let module = match st.modules.get(sig.module) {
            Some(m) => m.0,
            None => {
                let m = self.load_module(sig.module)?;
                st.modules.insert(sig.module.to_string(), Shared(m));
                m
            }
        };
        let f = raw::module_function(module, sig.symbol, &format!("{}::{}", sig.module, sig.symbol))?;
        st.functions.insert((sig.module, sig.symbol), Shared(f));
        Ok(f)
    }

    /// Disk cache first; a missing, corrupt or driver-rejected entry is
    /// rebuilt from source.
    fn load_module(&self, module: &str) -> Result<CUmodule> {
        let job = Job::new(module, &self.arch)?;
        if let Some(cubin) = self.cache.get(&job) {
            match raw::module_load(&cubin, job.source.path) {
                Ok(m) => return Ok(m),
                Err(_) => self.cache.evict(&job),
            }
        }
        let cubin = job.compile()?;
        let m = raw::module_load(&cubin, job.source.path)?;
        self.cache.put(&job, &cubin);
        Ok(m)
    }

    /// Compiles and loads every CUDA module now rather than on first launch
    /// (so a benchmark's first timed run does not include NVRTC).
    pub fn preload(&self) -> Result<()> {
        let mut st = self.enter()?;
        for (module, _) in switchyard_kernels::sources::CUDA {
            if !st.modules.contains_key(*module) {
                let m = self.load_module(module)?;
                st.modules.insert(module.to_string(), Shared(m));
            }
        }
        Ok(())
    }
}

/// Packs an argument into one 8-byte parameter slot, in the byte order the
/// kernel reads it.
fn param_slot(a: &Arg) -> raw::ParamSlot {
    let mut b = [0u8; 8];
    match *a {
        Arg::P(p) => b = p.to_ne_bytes(),
        Arg::I(v) => b[..4].copy_from_slice(&v.to_ne_bytes()),
        Arg::U(v) => b[..4].copy_from_slice(&v.to_ne_bytes()),
        Arg::F(v) => b[..4].copy_from_slice(&v.to_ne_bytes()),
    }
    u64::from_ne_bytes(b)
}

impl Backend for CudaBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }

    fn info(&self) -> BackendInfo {
        let mut info = self.info.clone();
        // Free memory is read now, not at open: leak checks compare it.
        if let Ok((free, _)) = self.enter().and_then(|_st| raw::mem_get_info()) {
            info.details.push(("free memory bytes".into(), free.to_string()));
        }
        info
    }

    fn alloc(&self, bytes: usize) -> Result<u64> {
        if bytes == 0 {
            return Err(Error::invalid("alloc", "bytes", "allocation size must be > 0"));
        }
        let mut st = self.enter()?;
        let p = raw::mem_alloc(bytes)?;
        st.ranges.insert(p, bytes as u64);
        Ok(p)
    }

    fn free(&self, addr: u64) -> Result<()> {
        let mut st = self.enter()?;
        // Validated before touching the driver: freeing an unknown address
        // is a caller bug, reported as such.
        st.ranges.remove(addr).map_err(|d| Error::invalid("free", "addr", d))?;
        // Queued kernels may still use the memory: wait for them first.
        let synced = raw::stream_sync(self.stream.0, &"free (cuStreamSynchronize before cuMemFree)");
        let freed = raw::mem_free(addr);
        synced.and(freed)
    }

    fn upload(&self, dst: u64, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let st = self.enter()?;
        Self::check(&st, "upload", "dst", dst, data.len())?;
        raw::upload(dst, data, self.stream.0)
    }

    fn download(&self, src: u64, out: &mut [u8]) -> Result<()> {
        if out.is_empty() {
            return self.synchronize();
        }
        let st = self.enter()?;
        Self::check(&st, "download", "src", src, out.len())?;
        raw::download(out, src, self.stream.0)
    }

    fn memset0(&self, dst: u64, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let st = self.enter()?;
        Self::check(&st, "memset0", "dst", dst, bytes)?;
        raw::memset0(dst, bytes, self.stream.0)
    }

    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let st = self.enter()?;
        Self::check(&st, "copy", "dst", dst, bytes)?;
        Self::check(&st, "copy", "src", src, bytes)?;
        if dst < src + bytes as u64 && src < dst + bytes as u64 {
            return Err(Error::invalid("copy", "dst", format!("[{dst:#x}, +{bytes}) overlaps the source [{src:#x}, +{bytes})")));
        }
        raw::copy_dtod(dst, src, bytes, self.stream.0)
    }

    fn check_range(&self, addr: u64, bytes: usize) -> std::result::Result<(), String> {
        let st = self.state.lock().map_err(|_| "backend state poisoned".to_string())?;
        st.ranges.check(addr, bytes as u64)
    }

    fn enqueue(&self, sig: &'static KernelSig, _args: &[Arg]) -> Result<()> {
        Err(Error::Unsupported(format!("{}: planned launches are not wired into the cuda backend yet", sig.symbol)))
    }

    fn record(&self, _work: &mut dyn FnMut() -> Result<()>) -> Result<Recording> {
        Err(Error::Unsupported("cuda: recording is not wired yet".into()))
    }

    fn replay(&self, _recording: &Recording) -> Result<()> {
        Err(Error::Unsupported("cuda: recording is not wired yet".into()))
    }

    fn enqueue_legacy(&self, sig: &'static KernelSig, grid: Grid, block: Grid, args: &[Arg]) -> Result<()> {
        if args.len() != sig.args.len() {
            return Err(Error::invalid(sig.symbol, "<argument list>", format!("expected {}, got {}", sig.args.len(), args.len())));
        }
        let mut st = self.enter()?;
        // Checked again under the lock that `free` takes, so no allocation
        // can disappear between this check and the launch.
        for (spec, a) in sig.args.iter().zip(args) {
            if let Arg::P(p) = *a {
                if p != 0 {
                    Self::check(&st, sig.symbol, spec.name, p, 1)?;
                }
            }
        }
        let f = self.function(&mut st, sig)?;
        let mut params: Vec<raw::ParamSlot> = args.iter().map(param_slot).collect();
        raw::launch(f, grid, block, self.stream.0, &mut params, &format!("{}::{}", sig.module, sig.symbol))
    }

    fn synchronize(&self) -> Result<()> {
        let _st = self.enter()?;
        raw::stream_sync(self.stream.0, &"cuStreamSynchronize (reports faults of earlier asynchronous work)")
    }

    fn time_ms(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        let (start, end) = {
            let _st = self.enter()?;
            let (s, e) = (raw::Event::new()?, raw::Event::new()?);
            s.record(self.stream.0)?;
            (s, e)
        };
        // The lock is not held while `work` runs: it launches through `self`.
        work()?;
        let _st = self.enter()?;
        end.record(self.stream.0)?;
        end.synchronize()?;
        Ok(end.elapsed_since(&start)? as f64)
    }

    fn live_bytes(&self) -> usize {
        self.state.lock().map(|s| s.ranges.live_bytes() as usize).unwrap_or(0)
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        let Ok(st) = self.state.get_mut() else { return };
        if raw::set_current(self.ctx.0).is_err() {
            return;
        }
        let _ = raw::stream_sync(self.stream.0, &"drop");
        for m in st.modules.values() {
            let _ = raw::module_unload(m.0);
        }
        for base in st.ranges.bases() {
            let _ = raw::mem_free(base);
        }
        let _ = raw::stream_destroy(self.stream.0);
        let _ = raw::primary_ctx_release(self.device);
    }
}
