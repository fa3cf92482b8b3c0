//! [`CudaBackend`]: the [`Backend`] trait over the CUDA driver API.
use crate::branch::Branches;
use crate::compile::{DiskCache, Job};
use crate::cublas::Cublas;
use crate::raw::{self, Attr, CUcontext, CUdevice, CUfunction, CUgraph, CUmodule, CUstream, GraphExec, Shared};
use std::any::Any;
use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use switchyard_core::vaddr::RangeTable;
use switchyard_core::{registry, Arg, Backend, BackendInfo, BackendKind, Error, KernelSig, Recording, Result};
use switchyard_kernels::plan::{self, CudaPlan, DeviceFacts, PlanArgs};

const NAME: &str = BackendKind::Cuda.name();

/// Environment variable picking the device ordinal (default 0).
pub const DEVICE_ENV: &str = "SWITCHYARD_CUDA_DEVICE";

/// Dynamic shared memory a function may use without opting in.
const DEFAULT_DYNAMIC_SHARED: u32 = 48 << 10;

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
///
/// Each launch runs its kernel's CUDA plan (`switchyard_kernels::plan`),
/// computed from the arguments and this device's [`DeviceFacts`]. Workspace
/// a plan asks for comes from an arena this backend owns, passed as one
/// trailing pointer parameter; arena bytes are not counted in
/// [`Backend::live_bytes`] (see [`CudaBackend::arena_bytes`]).
///
/// A [`Recording`] is a CUDA graph captured from the stream; see
/// [`Backend::record`].
pub struct CudaBackend {
    device: CUdevice,
    ctx: Shared<CUcontext>,
    stream: Shared<CUstream>,
    arch: String,
    facts: DeviceFacts,
    info: BackendInfo,
    cache: DiskCache,
    /// Distinguishes this instance from a later one at the same address.
    instance: u64,
    /// Whether entries that declare it launch as programmatic dependents
    /// (compute capability ≥ 9.0 and [`PDL_ENV`] not `0`).
    dependent_launch: bool,
    state: Mutex<State>,
}

/// Environment variable that, set to `0`, launches every entry as a plain
/// launch. Otherwise, on compute capability 9.0 and later, the entries their
/// source declares (`// dependent-launch:` lines: the decode GEMVs, which
/// issue their weight loads before `griddepcontrol.wait`, and the MoE decode
/// routing, gather and combine, which load or L2-prefetch theirs) launch as
/// programmatic dependents, so their weight stream overlaps the end of the
/// launch before them. Kernels with nothing to load before the wait are not
/// declared: their early blocks would only hold SM slots (on the H200, all
/// decode kernels declared measured no gain, the GEMVs alone +1-2% at batch
/// 1 and +2.3% at batch 16; the MoE kernels +2.1% on 26b-a4b at batch 1 in
/// one call, flat in another).
pub const PDL_ENV: &str = "SWITCHYARD_CUDA_PDL";

/// Environment variable that, set to `0`, keeps plans from picking the
/// entries that launch as thread-block clusters (the split-K GEMV and the
/// split decode attention then combine their partials in a second pass, for
/// comparison). Any other value, or none, leaves them on where the device
/// has clusters (compute capability 9.0 or later).
pub const CLUSTER_ENV: &str = "SWITCHYARD_CUDA_CLUSTERS";

/// Environment variable that, set to `0`, keeps plans from picking the
/// entries compiled for `sm_90a` (the wgmma / TMA GEMM plan of
/// `dense_gemm_bf16_pipelined`) on a compute-capability 9.0 device, where
/// they are on by default ([`DeviceFacts::cuda_sm90a`]): the mma.sync plans
/// then run, for comparison. Any other value, or none, leaves them on.
pub const WGMMA_ENV: &str = "SWITCHYARD_WGMMA";

#[derive(Default)]
struct State {
    ranges: RangeTable,
    modules: HashMap<String, Shared<CUmodule>>,
    /// Loaded entry points by (module, entry).
    functions: HashMap<(&'static str, &'static str), Function>,
    arena: Arena,
    /// `Some` while `record` captures the stream: what the capture uses.
    capturing: Option<Capture>,
    /// The side stream of `enqueue_concurrent` and whether launches go to it.
    branches: Branches,
}

/// A loaded entry point.
struct Function {
    f: Shared<CUfunction>,
    /// Its dynamic shared memory limit: the driver's default until a plan
    /// asks for more, then what the largest plan so far asked for (the
    /// driver checks that plus the function's static shared memory against
    /// the device's opt-in maximum).
    allowed: u32,
    /// Launched as a programmatic dependent of the launch before it: its
    /// source lists it on a `// dependent-launch:` line (it waits on
    /// `griddepcontrol.wait` before reading anything earlier launches wrote).
    dependent: bool,
    /// Launched as one thread-block cluster along this grid axis (its
    /// source lists it on a `// cluster-launch:` line).
    cluster_axis: Option<usize>,
}

/// Workspace for plans that ask for it. Grows by allocating a bigger buffer;
/// retired buffers stay allocated until the backend drops, because launches
/// still queued and recordings may use them.
#[derive(Default)]
struct Arena {
    buffers: RangeTable,
    /// The buffer new launches get: (base, bytes, serial).
    current: Option<(u64, u64, u64)>,
    /// The same for launches on the side stream of `enqueue_concurrent`,
    /// which may run at the same time as the main stream's.
    side_current: Option<(u64, u64, u64)>,
}

/// `(base, serial)` of an allocation, from [`RangeTable::identity`].
type Identity = (u64, u64);

/// What an open capture has recorded.
#[derive(Default)]
struct Capture {
    buffers: BTreeSet<Identity>,
    arena: BTreeSet<Identity>,
    steps: usize,
}

/// The state a CUDA [`Recording`] carries.
struct CudaRecording {
    instance: u64,
    /// `None` when nothing was captured (there is no graph to launch).
    exec: Option<GraphExec>,
    buffers: Vec<Identity>,
    arena: Vec<Identity>,
}

static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

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
            let max_shared = raw::device_attr(device, Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
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
            let hopper = major == 9 && minor == 0;
            let sm90a = hopper && std::env::var(WGMMA_ENV).map_or(true, |v| v != "0");
            let clusters = major >= 9 && std::env::var(CLUSTER_ENV).map_or(true, |v| v != "0");
            let dependent_launch = major >= 9 && std::env::var(PDL_ENV).map_or(true, |v| v != "0");
            let pdl_note = match (major >= 9, dependent_launch) {
                (_, true) => "on".to_string(),
                (true, false) => format!("off ({PDL_ENV}=0)"),
                (false, _) => "no (compute capability < 9.0)".to_string(),
            };
            let cluster_note = match (major >= 9, clusters) {
                (_, true) => "on".to_string(),
                (true, false) => format!("off ({CLUSTER_ENV}=0)"),
                (false, _) => "no (compute capability < 9.0)".to_string(),
            };
            let plans = if sm90a {
                "sm_90a (wgmma/TMA GEMM plans)".to_string()
            } else if hopper {
                format!("{arch} (mma.sync plans; the sm_90a wgmma/TMA GEMM plans are off: {WGMMA_ENV}=0)")
            } else {
                format!("{arch} (mma.sync plans)")
            };
            let mut details = vec![
                ("compute capability".to_string(), format!("{major}.{minor}")),
                ("arch".to_string(), arch.clone()),
                ("cuda arch".to_string(), plans),
                ("multiprocessors".to_string(), sms.to_string()),
                ("cluster launches".to_string(), cluster_note),
                ("programmatic dependent launches".to_string(), pdl_note),
                ("shared memory per block (opt-in)".to_string(), max_shared.to_string()),
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
            let facts = DeviceFacts {
                multiprocessors: u32::try_from(sms).unwrap_or(0),
                max_shared_bytes: u32::try_from(max_shared).unwrap_or(0),
                subgroup_size: 32,
                max_groups_per_dim: 65535,
                max_binding_bytes: u64::MAX,
                cuda_sm90a: sm90a,
                cuda_clusters: clusters,
                wgsl_coopmat: false,
            };
            Ok(CudaBackend {
                device,
                ctx: Shared(ctx),
                stream: Shared(stream),
                arch,
                facts,
                info,
                cache,
                instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
                dependent_launch,
                state: Mutex::new(State::default()),
            })
        })
    }

    /// The NVRTC target, e.g. `sm_90`.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// What launch plans are told about this device.
    pub fn device_facts(&self) -> DeviceFacts {
        self.facts
    }

    /// Bytes held by the workspace arena (current and retired buffers),
    /// which [`Backend::live_bytes`] does not count.
    pub fn arena_bytes(&self) -> usize {
        self.state.lock().map(|s| s.arena.buffers.live_bytes() as usize).unwrap_or(0)
    }

    /// A cuBLAS handle on this backend's stream (the GEMM yardstick). Reach
    /// it from an `Arc<dyn Backend>` through [`Backend::extension`]:
    /// `be.extension().and_then(|x| x.downcast_ref::<CudaBackend>())`.
    pub fn cublas(&self) -> Result<Cublas<'_>> {
        Cublas::new(self)
    }

    /// Runs `sig` with the geometry `grid` x `block` instead of its plan's,
    /// for block-size sweeps. Checked like [`Backend::launch`] (the kernel is
    /// implemented here, the arguments match its signature, every pointer is
    /// live). The plan still supplies dynamic shared memory and workspace, so
    /// it must have one pass. Whether the kernel is correct at
    /// that geometry is the caller's business (its `.cu` says which block
    /// sizes it supports): this is a tuning tool, not a launch path.
    pub fn launch_with_geometry(&self, sig: &'static KernelSig, grid: [u32; 3], block: [u32; 3], args: &[Arg]) -> Result<()> {
        if !registry::implements(BackendKind::Cuda, sig) {
            return Err(unknown_kernel(sig));
        }
        sig.check(args)?;
        if grid.contains(&0) || block.contains(&0) {
            return Err(Error::invalid(sig.symbol, "<geometry>", format!("empty launch: grid {grid:?}, block {block:?}")));
        }
        let mut plan = self.plan(sig, args)?;
        let [pass] = plan.passes.as_mut_slice() else {
            return Err(Error::Unsupported(format!(
                "{}: its CUDA plan has {} passes; launch_with_geometry sets the geometry of one-pass plans only",
                sig.symbol,
                plan.passes.len()
            )));
        };
        pass.grid = grid;
        pass.block = block;
        self.run_plan(sig, args, &plan)
    }

    /// Makes this backend's context current on the calling thread and returns
    /// its stream, for a library (cuBLAS) that enqueues work on it directly:
    /// that work is then ordered with this backend's launches and copies.
    pub(crate) fn current_stream(&self) -> Result<CUstream> {
        let st = self.enter()?;
        Ok(st.branches.stream(self.stream.0))
    }

    /// [`CudaBackend::current_stream`] for work this backend cannot record
    /// (cuBLAS calls: their buffers are not tracked), refused inside `record`.
    pub(crate) fn stream_outside_recording(&self, op: &str) -> Result<CUstream> {
        let st = self.enter()?;
        Self::not_capturing(&st, op)?;
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

    /// Refuses `op` while `record` captures the stream: its host side (or the
    /// stream synchronisation it needs) cannot be part of a graph.
    fn not_capturing(st: &State, op: &str) -> Result<()> {
        if st.branches.open {
            return Err(Error::invalid(
                op,
                "<enqueue_concurrent>",
                "host transfers, frees, timing, recording and synchronisation cannot run inside enqueue_concurrent's pieces",
            ));
        }
        if st.capturing.is_some() {
            return Err(Error::invalid(
                op,
                "<recording>",
                "host transfers, frees, timing and synchronisation cannot be recorded; do them outside record()",
            ));
        }
        Ok(())
    }

    /// Notes that an open capture used the allocations containing `addrs`
    /// (already checked live), and counts one step.
    fn captured(st: &mut State, addrs: &[u64]) {
        let State { ranges, capturing, .. } = st;
        if let Some(cap) = capturing.as_mut() {
            cap.buffers.extend(addrs.iter().filter(|&&a| a != 0).filter_map(|&a| ranges.identity(a)));
            cap.steps += 1;
        }
    }

    /// The plan of a kernel with a CUDA implementation.
    fn plan(&self, sig: &'static KernelSig, args: &[Arg]) -> Result<CudaPlan> {
        let kernel = plan::cuda_kernel(sig).ok_or_else(|| unknown_kernel(sig))?;
        let plan = (kernel.plan)(&PlanArgs::new(sig, args), &self.facts)?;
        debug_assert!(!plan.passes.is_empty(), "{}: a CUDA plan without passes", sig.symbol);
        debug_assert!(
            plan.passes.iter().all(|p| !p.grid.contains(&0) && !p.block.contains(&0)),
            "{}: a CUDA plan with an empty launch: {plan:?}",
            sig.symbol
        );
        Ok(plan)
    }

    /// Launches `plan`'s passes for `args` (checked against `sig` by the
    /// caller), after checking under the lock that every pointer is live.
    fn run_plan(&self, sig: &'static KernelSig, args: &[Arg], plan: &CudaPlan) -> Result<()> {
        let mut st = self.enter()?;
        // Checked under the lock that `free` takes, so no allocation can
        // disappear between this check and the launch.
        let mut addrs = Vec::with_capacity(args.len());
        for (spec, a) in sig.args.iter().zip(args) {
            if let Arg::P(p) = *a {
                if p != 0 {
                    Self::check(&st, sig.symbol, spec.name, p, 1)?;
                    addrs.push(p);
                }
            }
        }
        let mut params: Vec<raw::ParamSlot> = args.iter().map(param_slot).collect();
        if plan.workspace_bytes > 0 {
            let (base, serial) = self.workspace(&mut st, sig, plan.workspace_bytes)?;
            params.push(base);
            if let Some(cap) = st.capturing.as_mut() {
                cap.arena.insert((base, serial));
            }
        }
        // Noted before launching: a pass that fails after an earlier one was
        // captured still leaves the capture naming every buffer it used.
        Self::captured(&mut st, &addrs);
        for pass in &plan.passes {
            let (module, entry) = plan::cuda_entry(sig.module, pass.entry);
            let what = format!("{module}::{entry}");
            let mut maps = match plan::cuda_tensor_maps(module, entry) {
                Some(t) => Self::tensor_maps(sig, args, t, &what)?,
                None => Vec::new(),
            };
            let (f, dependent, cluster_axis) = self.function(&mut st, sig, module, entry, pass.shared_bytes, &what)?;
            let cluster = cluster_axis.map(|axis| {
                let mut dims = [1u32; 3];
                dims[axis] = pass.grid[axis];
                dims
            });
            let stream = st.branches.stream(self.stream.0);
            raw::launch(f, pass.grid, pass.block, pass.shared_bytes, dependent, cluster, stream, &mut params, &mut maps, &what)?;
        }
        Ok(())
    }

    /// The tensor maps `t` asks for, encoded over this launch's pointers
    /// (already checked live under the lock).
    fn tensor_maps(sig: &'static KernelSig, args: &[Arg], t: &plan::CudaTensorMaps, what: &str) -> Result<Vec<raw::CUtensorMap>> {
        let pa = PlanArgs::new(sig, args);
        (t.maps)(&pa)?
            .iter()
            .map(|m| {
                let addr = pa.addr(m.arg)?;
                if addr == 0 {
                    return Err(Error::invalid(sig.symbol, m.arg, format!("{what} reads it through a tensor map, so it cannot be null")));
                }
                raw::tensor_map_bf16_2d(addr, m.rows, m.cols, m.box_rows, m.box_cols, what)
            })
            .collect()
    }

    /// At least `bytes` of workspace: the current arena buffer, or a new one
    /// (twice the old size, or `bytes` if larger) that replaces it.
    /// On the side stream of `enqueue_concurrent`, the side's own buffer.
    fn workspace(&self, st: &mut State, sig: &KernelSig, bytes: u64) -> Result<Identity> {
        let State { arena, branches, .. } = st;
        let current = if branches.on_side { arena.side_current } else { arena.current };
        if let Some((base, len, serial)) = current {
            if len >= bytes {
                return Ok((base, serial));
            }
        }
        let len = bytes.max(current.map_or(0, |c| c.1.saturating_mul(2)));
        let size = usize::try_from(len)
            .map_err(|_| Error::invalid(sig.symbol, "<workspace>", format!("{len} bytes of workspace do not fit in usize")))?;
        let base = raw::mem_alloc(size)?;
        let serial = arena.buffers.insert(base, len);
        *(if branches.on_side { &mut arena.side_current } else { &mut arena.current }) = Some((base, len, serial));
        Ok((base, serial))
    }

    /// The function `entry` of `module` (`sig`'s own, or the one its plan's
    /// pass names), compiling and loading the module on first use, and
    /// allowed `shared_bytes` of dynamic shared memory; with whether it
    /// launches as a programmatic dependent.
    fn function(
        &self,
        st: &mut State,
        sig: &'static KernelSig,
        module: &'static str,
        entry: &'static str,
        shared_bytes: u32,
        what: &str,
    ) -> Result<(CUfunction, bool, Option<usize>)> {
        let State { modules, functions, .. } = st;
        let func = match functions.entry((module, entry)) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let loaded = match modules.get(module) {
                    Some(m) => m.0,
                    None => {
                        let m = self.load_module(module)?;
                        modules.insert(module.to_string(), Shared(m));
                        m
                    }
                };
                let f = raw::module_function(loaded, entry, what)?;
                let dependent = self.dependent_launch && crate::compile::is_dependent(&crate::compile::dependent_entries(module), entry);
                let cluster_axis = crate::compile::cluster_axis(module, entry);
                if cluster_axis.is_some() {
                    raw::func_allow_large_clusters(f, what)?;
                }
                e.insert(Function { f: Shared(f), allowed: DEFAULT_DYNAMIC_SHARED, dependent, cluster_axis })
            }
        };
        if shared_bytes > func.allowed {
            if shared_bytes > self.facts.max_shared_bytes {
                return Err(Error::invalid(
                    sig.symbol,
                    "<plan>",
                    format!("{entry} asks for {shared_bytes} bytes of shared memory; the device allows {}", self.facts.max_shared_bytes),
                ));
            }
            raw::func_set_max_dynamic_shared(func.f.0, shared_bytes, what)?;
            func.allowed = shared_bytes;
        }
        Ok((func.f.0, func.dependent, func.cluster_axis))
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

    /// Compiles and loads every CUDA module this device runs now rather
    /// than on first launch (so a benchmark's first timed run does not
    /// include NVRTC); modules compiled for another architecture's
    /// arch-specific target are skipped.
    pub fn preload(&self) -> Result<()> {
        let mut st = self.enter()?;
        for (module, _) in switchyard_kernels::sources::CUDA {
            if crate::compile::module_arch(module, &self.arch).is_err() {
                continue;
            }
            if !st.modules.contains_key(*module) {
                let m = self.load_module(module)?;
                st.modules.insert(module.to_string(), Shared(m));
            }
        }
        Ok(())
    }

    /// Ends the stream capture `record` began, whatever state the backend is
    /// in (a poisoned lock included: the stream must leave capture mode).
    /// Returns the graph (null if the driver made none), the driver's
    /// verdict, and what the capture used.
    fn end_capture(&self) -> (CUgraph, Result<()>, Capture) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let cap = st.capturing.take().unwrap_or_default();
        if let Err(e) = raw::set_current(self.ctx.0) {
            return (std::ptr::null_mut(), Err(e), cap);
        }
        let (graph, ended) = raw::end_capture(self.stream.0);
        (graph, ended, cap)
    }
}

fn unknown_kernel(sig: &KernelSig) -> Error {
    Error::UnknownKernel { module: sig.module.into(), symbol: sig.symbol.into(), backend: Some(NAME.into()) }
}

/// An open stream capture; dropping it unfinished (a panic in the recorded
/// work) ends the capture and discards the graph, so the stream is usable again.
struct OpenCapture<'a> {
    be: &'a CudaBackend,
    open: bool,
}

impl OpenCapture<'_> {
    fn end(mut self) -> (CUgraph, Result<()>, Capture) {
        self.open = false;
        self.be.end_capture()
    }
}

impl Drop for OpenCapture<'_> {
    fn drop(&mut self) {
        if self.open {
            raw::graph_destroy(self.be.end_capture().0);
        }
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
        info.details.push(("workspace arena bytes".into(), self.arena_bytes().to_string()));
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
        Self::not_capturing(&st, "free")?;
        // Validated before touching the driver: freeing an unknown address
        // is a caller bug, reported as such.
        st.ranges.remove(addr).map_err(|d| Error::invalid("free", "addr", d))?;
        // Queued kernels may still use the memory: wait for them first.
        let synced = raw::stream_sync(self.stream.0, &"free (cuStreamSynchronize before cuMemFree)");
        let freed = raw::mem_free(addr);
        synced.and(freed)
    }

    fn upload(&self, dst: u64, data: &[u8]) -> Result<()> {
        let st = self.enter()?;
        Self::not_capturing(&st, "upload")?;
        if data.is_empty() {
            return Ok(());
        }
        Self::check(&st, "upload", "dst", dst, data.len())?;
        raw::upload(dst, data, self.stream.0)
    }

    fn download(&self, src: u64, out: &mut [u8]) -> Result<()> {
        if out.is_empty() {
            return self.synchronize();
        }
        let st = self.enter()?;
        Self::not_capturing(&st, "download")?;
        Self::check(&st, "download", "src", src, out.len())?;
        raw::download(out, src, self.stream.0)
    }

    fn memset0(&self, dst: u64, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let mut st = self.enter()?;
        Self::check(&st, "memset0", "dst", dst, bytes)?;
        Self::captured(&mut st, &[dst]);
        raw::memset0(dst, bytes, st.branches.stream(self.stream.0))
    }

    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let mut st = self.enter()?;
        Self::check(&st, "copy", "dst", dst, bytes)?;
        Self::check(&st, "copy", "src", src, bytes)?;
        if dst < src + bytes as u64 && src < dst + bytes as u64 {
            return Err(Error::invalid("copy", "dst", format!("[{dst:#x}, +{bytes}) overlaps the source [{src:#x}, +{bytes})")));
        }
        Self::captured(&mut st, &[dst, src]);
        raw::copy_dtod(dst, src, bytes, st.branches.stream(self.stream.0))
    }

    fn check_range(&self, addr: u64, bytes: usize) -> std::result::Result<(), String> {
        let st = self.state.lock().map_err(|_| "backend state poisoned".to_string())?;
        st.ranges.check(addr, bytes as u64)
    }

    fn enqueue(&self, sig: &'static KernelSig, args: &[Arg]) -> Result<()> {
        debug_assert!(sig.check(args).is_ok(), "{}: enqueue without Backend::launch's signature check", sig.symbol);
        let plan = self.plan(sig, args)?;
        self.run_plan(sig, args, &plan)
    }

    /// Captures the stream into a CUDA graph (relaxed capture mode) while
    /// `work` runs: launches, `copy` and `memset0` become graph nodes and do
    /// not run. `upload`, `download`, `free`, `synchronize`, `time_ms`,
    /// and `replay` are refused inside. The recording keeps
    /// the identity (base address and allocation serial) of every buffer and
    /// arena block it uses, so a replay after any of them was freed is
    /// refused even if the address was allocated again.
    fn record(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<Recording> {
        {
            let mut st = self.enter()?;
            if st.capturing.is_some() {
                return Err(Error::invalid("record", "<recording>", "a recording is already open on this backend"));
            }
            Self::not_capturing(&st, "record")?;
            raw::begin_capture(self.stream.0)?;
            st.capturing = Some(Capture::default());
        }
        let open = OpenCapture { be: self, open: true };
        let worked = work();
        let (graph, ended, cap) = open.end();
        let exec = worked.and(ended).and_then(|()| {
            if cap.steps == 0 {
                return Ok(None);
            }
            let _st = self.enter()?;
            GraphExec::instantiate(graph, self.device).map(Some)
        });
        raw::graph_destroy(graph);
        let state = CudaRecording {
            instance: self.instance,
            exec: exec?,
            buffers: cap.buffers.into_iter().collect(),
            arena: cap.arena.into_iter().collect(),
        };
        Ok(Recording::new(BackendKind::Cuda, self as *const Self as usize, cap.steps, Box::new(state)))
    }

    fn replay(&self, recording: &Recording) -> Result<()> {
        let rec = recording.state::<CudaRecording>(self as *const Self as usize)?;
        if rec.instance != self.instance {
            return Err(Error::invalid("replay", "recording", "recorded on another cuda backend instance (since dropped)"));
        }
        let st = self.enter()?;
        Self::not_capturing(&st, "replay")?;
        // Once per replay, under the lock `free` takes.
        let freed = |(base, serial): &Identity| {
            Error::invalid(
                "replay",
                "recording",
                format!("a buffer it uses was freed: the allocation at {base:#x} (serial {serial}) no longer exists"),
            )
        };
        if let Some(id) = rec.buffers.iter().find(|(b, s)| !st.ranges.is_live(*b, *s)) {
            return Err(freed(id));
        }
        if let Some(id) = rec.arena.iter().find(|(b, s)| !st.arena.buffers.is_live(*b, *s)) {
            return Err(freed(id));
        }
        match &rec.exec {
            Some(exec) => exec.launch(self.stream.0),
            None => Ok(()),
        }
    }

    fn synchronize(&self) -> Result<()> {
        let st = self.enter()?;
        Self::not_capturing(&st, "synchronize")?;
        raw::stream_sync(self.stream.0, &"cuStreamSynchronize (reports faults of earlier asynchronous work)")
    }

    /// `second` on the side stream, forked from this backend's stream after
    /// what was enqueued so far, then `first` on this backend's stream, which
    /// then waits for the side (the join is enqueued whatever happened, so
    /// the stream, or an open capture, is never left forked). Inside a piece
    /// a nested call runs its pieces in order on that piece's stream.
    fn enqueue_concurrent(&self, first: &mut dyn FnMut() -> Result<()>, second: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        {
            let mut st = self.enter()?;
            if st.branches.open {
                drop(st);
                first()?;
                return second();
            }
            st.branches.side()?.fork_from(self.stream.0)?;
            st.branches.open = true;
            st.branches.on_side = true;
        }
        let ran = second().and_then(|()| {
            self.state.lock().unwrap_or_else(|p| p.into_inner()).branches.on_side = false;
            first()
        });
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.branches.on_side = false;
        st.branches.open = false;
        let joined = raw::set_current(self.ctx.0).and_then(|()| match &st.branches.side {
            Some(side) => side.join_into(self.stream.0),
            None => Ok(()),
        });
        ran.and(joined)
    }

    fn overlaps_concurrent_work(&self) -> bool {
        true
    }

    fn time_ms(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        let (start, end) = {
            let st = self.enter()?;
            Self::not_capturing(&st, "time_ms")?;
            let (s, e) = (raw::Event::new()?, raw::Event::new()?);
            s.record(self.stream.0)?;
            (s, e)
        };
        // The lock is not held while `work` runs: it launches through `self`.
        work()?;
        let st = self.enter()?;
        Self::not_capturing(&st, "time_ms")?;
        end.record(self.stream.0)?;
        end.synchronize()?;
        Ok(end.elapsed_since(&start)? as f64)
    }

    fn profiler_range(&self, on: bool) -> Result<()> {
        let _st = self.enter()?;
        raw::profiler(on)
    }

    fn live_bytes(&self) -> usize {
        self.state.lock().map(|s| s.ranges.live_bytes() as usize).unwrap_or(0)
    }

    /// `Some(self)`: downcast to [`CudaBackend`] for cuBLAS
    /// ([`CudaBackend::cublas`]) and tuning ([`CudaBackend::launch_with_geometry`]).
    fn extension(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        let Ok(st) = self.state.get_mut() else { return };
        if raw::set_current(self.ctx.0).is_err() {
            return;
        }
        if let Some(side) = st.branches.side.take() {
            side.destroy();
        }
        let _ = raw::stream_sync(self.stream.0, &"drop");
        for m in st.modules.values() {
            let _ = raw::module_unload(m.0);
        }
        for base in st.ranges.bases().into_iter().chain(st.arena.buffers.bases()) {
            let _ = raw::mem_free(base);
        }
        let _ = raw::stream_destroy(self.stream.0);
        let _ = raw::primary_ctx_release(self.device);
    }
}
