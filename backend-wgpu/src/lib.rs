//! # switchyard-wgpu
//!
//! The portable backend: every catalogue kernel as WGSL, run through wgpu
//! (Vulkan, Metal, DX12).
//!
//! - Addresses are virtual ([`switchyard_core::vaddr`]): each resolves to a
//!   `wgpu::Buffer` and a byte offset. Offsets reach the shader as u32 word
//!   offsets in a uniform `Params` block (see `kernels/src/prelude.wgsl`);
//!   buffers are bound whole, or from an aligned window.
//! - A launch runs the kernel's WGSL plan (`switchyard_kernels::plan`,
//!   registered beside the declaration): its passes, and workspace bound
//!   after the pointer arguments from an arena this backend owns.
//! - Programs are compiled on first use and cached per (source file, storage
//!   bindings); pipelines per (source file, storage bindings, entry point,
//!   override constants); bind groups per buffer set.
//! - Launches, copies and clears are recorded into one command encoder and
//!   submitted at a synchronize, download, upload or timing call, or after
//!   [`WgpuOptions::max_batch`] dispatches; `switchyard bench` measures what
//!   a launch costs.
//! - A [`Recording`] holds every dispatch already resolved (pipeline, bind
//!   group over its own Params buffer, workgroup counts) and every copy and
//!   clear; a replay checks liveness once and submits one command buffer,
//!   then encodes the next replay's while the GPU runs this one.
#![warn(missing_docs)]

use std::collections::HashMap;
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Instant;
use switchyard_core::vaddr::{self, VirtualAllocs};
use switchyard_core::{Arg, ArgKind, Backend, BackendInfo, BackendKind, Error, KernelSig, Recording, Result};
use switchyard_kernels::plan::{wgsl_kernel, DeviceFacts, PlanArgs, WgslSplitPass, WgslSplitPlan, WgslWindow, WGSL_ARRIVAL_COUNTERS};
use switchyard_kernels::sources::Source;

mod fold;
pub mod shader;

const NAME: &str = BackendKind::Wgpu.name();

/// Environment variable: a substring of the adapter name to use.
pub const ADAPTER_ENV: &str = "SWITCHYARD_WGPU_ADAPTER";

/// Environment variable: `0` turns the subgroup shader variant off (the
/// default of [`WgpuOptions::subgroups`]).
pub const SUBGROUPS_ENV: &str = "SWITCHYARD_WGPU_SUBGROUPS";

/// Environment variable: `0` turns the cooperative-matrix kernels off (the
/// default of [`WgpuOptions::coopmat`]).
pub const COOPMAT_ENV: &str = "SWITCHYARD_WGPU_COOPMAT";

/// Environment variable: `1` compiles kernels with naga's loop bounding
/// (the default of [`WgpuOptions::loop_bounding`] is off).
pub const LOOP_BOUNDING_ENV: &str = "SWITCHYARD_WGPU_LOOP_BOUNDING";

/// Bytes of one launch's Params slot (>= every adapter's uniform offset alignment).
const SLOT: u64 = 256;
/// Words in the Params tail: gx, gy, gz, fold, x0..x3.
const TAIL: usize = 8;
/// Allocations are padded to this, so word views never run past the buffer.
const PAD: u64 = 16;

/// Construction options.
#[derive(Clone, Debug)]
pub struct WgpuOptions {
    /// Case-insensitive substring of the adapter name; `None` picks the
    /// best adapter (discrete GPU first). Defaults to `$SWITCHYARD_WGPU_ADAPTER`.
    pub adapter: Option<String>,
    /// Dispatches recorded before the encoder is submitted.
    pub max_batch: usize,
    /// Caps workgroups per grid dimension below the adapter's limit, so that
    /// grid folding can be exercised with small shapes (tests).
    pub fold_limit: Option<u32>,
    /// Caps the storage binding size that launch plans see
    /// (`DeviceFacts::max_binding_bytes`) below the adapter's, so that the
    /// split plans of tables past one binding run on small tables (tests).
    /// Bindings themselves keep the adapter's limit.
    pub plan_binding_limit: Option<u64>,
    /// Opens the device with `wgpu::Features::SUBGROUP` where the adapter
    /// has it and compiles every kernel with the subgroup lanes
    /// (`kernels/src/prelude_subgroups.wgsl`: row reductions through
    /// subgroupAdd / subgroupMax); plans see the adapter's minimum subgroup
    /// size in `DeviceFacts::subgroup_size`. `false`, or an adapter without
    /// the feature: the fallback lanes (workgroup-memory reductions) and
    /// `subgroup_size` 1. Defaults to true unless `$SWITCHYARD_WGPU_SUBGROUPS`
    /// is `0`.
    pub subgroups: bool,
    /// Opens the device with `wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX`
    /// and `SHADER_F16` where the adapter lists the 16×16×16 f16 × f16 → f32
    /// subgroup configuration and its subgroups are exactly 32 wide (the
    /// cooperative-matrix kernels assume a subgroup is 32 consecutive
    /// invocations), and composes the kernels' cooperative-matrix code
    /// (`DeviceFacts::wgsl_coopmat`; the f16 contract is in
    /// kernels/src/gemm/dense_coopmat.wgsli). `false`, or any of those
    /// missing: today's f32 kernels. Defaults to true unless
    /// `$SWITCHYARD_WGPU_COOPMAT` is `0`.
    pub coopmat: bool,
    /// Lets naga wrap every shader loop in a 64-bit iteration counter
    /// (`wgpu::ShaderRuntimeChecks::force_loop_bounding`, wgpu's default,
    /// which guards against drivers exploiting infinite loops). The
    /// catalogue's loops all run to counts the host validated, so it is off
    /// by default: the counter keeps drivers from unrolling the kernels'
    /// fixed-count loops, whose per-lane arrays (loads in flight,
    /// accumulators) then live in local memory. Bounds checks stay on either
    /// way. Defaults to false unless `$SWITCHYARD_WGPU_LOOP_BOUNDING` is `1`.
    pub loop_bounding: bool,
}

impl Default for WgpuOptions {
    fn default() -> Self {
        WgpuOptions {
            adapter: std::env::var(ADAPTER_ENV).ok().filter(|s| !s.is_empty()),
            max_batch: 64,
            fold_limit: None,
            plan_binding_limit: None,
            subgroups: std::env::var(SUBGROUPS_ENV).map_or(true, |v| v.trim() != "0"),
            coopmat: std::env::var(COOPMAT_ENV).map_or(true, |v| v.trim() != "0"),
            loop_bounding: std::env::var(LOOP_BOUNDING_ENV).is_ok_and(|v| v.trim() == "1"),
        }
    }
}

inventory::submit! { switchyard_core::registry::BackendFactory { kind: BackendKind::Wgpu, open: wgpu_backend } }

/// The wgpu backend with default options.
pub fn wgpu_backend() -> Result<Arc<dyn Backend>> {
    Ok(WgpuBackend::new(WgpuOptions::default())?)
}

/// The wgpu backend with `opts`.
pub fn wgpu_backend_with(opts: WgpuOptions) -> Result<Arc<dyn Backend>> {
    Ok(WgpuBackend::new(opts)?)
}

fn unavailable(reason: impl Into<String>) -> Error {
    Error::Unavailable { backend: NAME.into(), reason: reason.into() }
}

fn driver(msg: impl Into<String>) -> Error {
    Error::driver(NAME, msg)
}

/// A compiled WGSL program: shader module and its bind group layout.
struct Program {
    module: wgpu::ShaderModule,
    bgl: wgpu::BindGroupLayout,
    layout: wgpu::PipelineLayout,
}

/// Bind id of a temporary buffer: bind groups holding one are not cached.
const TEMP_ID: u64 = u64::MAX;

/// Bind id of the arrival counters (past every allocation id, below every
/// workspace generation).
const ARRIVALS_ID: u64 = 1 << vaddr::ID_BITS;

/// Whether a bind id names a user allocation (not the dummy, a temporary or
/// a workspace generation): the ids a recording must find live at replay.
fn is_alloc(id: u64) -> bool {
    id != 0 && id < 1 << vaddr::ID_BITS
}

/// One storage binding: allocation id (0 = dummy, [`TEMP_ID`] = temporary,
/// [`ARRIVALS_ID`] = the arrival counters, `u64::MAX - n` = workspace generation n),
/// buffer, and the window `[base, base + size)` that is bound.
#[derive(Clone)]
struct Bind {
    id: u64,
    buf: wgpu::Buffer,
    base: u64,
    size: u64,
}

/// (source path, storage bindings).
type ProgKey = (&'static str, usize);
/// (source path, storage bindings, entry point, override constants).
type PipeKey = (&'static str, usize, &'static str, Vec<(&'static str, u32)>);
/// (source path, (id, base, size) of each storage binding).
type BindKey = (&'static str, Vec<(u64, u64, u64)>);

/// [`WgpuBackend::bind_args`]: storage bindings, the declared arguments'
/// Params words, and the words of extra windows (after the tail).
type BoundArgs = (Vec<Bind>, Vec<u32>, Vec<u32>);

/// A buffer range: (allocation id, buffer, byte offset).
type At<'a> = (u64, &'a wgpu::Buffer, u64);

/// Size the workspace arena must be replaced by so that it holds `bytes`, or
/// `None` when one of `current` bytes already does. Doubling keeps launches
/// of slowly rising size from replacing the buffer each time; the result
/// never passes `limit` (the largest storage binding).
fn arena_size(current: u64, bytes: u64, limit: u64) -> std::result::Result<Option<u64>, String> {
    let need = bytes.max(PAD).next_multiple_of(PAD);
    if need <= current {
        return Ok(None);
    }
    if need > limit {
        return Err(format!("{bytes} bytes of workspace exceed this adapter's max_storage_buffer_binding_size of {limit}"));
    }
    Ok(Some(need.max(current.saturating_mul(2)).min(limit)))
}

/// A dispatch, copy or clear captured while a recording is open.
enum Captured {
    Dispatch {
        entry: &'static str,
        prog: ProgKey,
        program: Arc<Program>,
        pipe: wgpu::ComputePipeline,
        binds: Vec<Bind>,
        offset: u32,
        size: [u32; 3],
    },
    Transfer(Transfer),
}

/// A buffer copy or clear inside a recording (captured and replayed as is).
enum Transfer {
    Copy { src: wgpu::Buffer, src_off: u64, dst: wgpu::Buffer, dst_off: u64, bytes: u64 },
    Clear { buf: wgpu::Buffer, off: u64, bytes: u64 },
}

impl Transfer {
    fn encode(&self, enc: &mut wgpu::CommandEncoder) {
        match self {
            Transfer::Copy { src, src_off, dst, dst_off, bytes } => enc.copy_buffer_to_buffer(src, *src_off, dst, *dst_off, *bytes),
            Transfer::Clear { buf, off, bytes } => enc.clear_buffer(buf, *off, Some(*bytes)),
        }
    }
}

/// GPU time of one dispatch, from timestamp queries written at the
/// beginning and end of its compute pass (see [`WgpuBackend::time_dispatches`]).
#[derive(Clone, Debug, PartialEq)]
pub struct DispatchTime {
    /// The WGSL entry point (`bytecopy` for the backend's own byte copies).
    pub entry: &'static str,
    /// Milliseconds between the pass's two timestamps.
    pub ms: f64,
}

/// Timestamp queries: two per Params slot of a batch (a dispatch's pass
/// beginning and end), resolved at each submit into `resolve`.
struct Timer {
    queries: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    /// Nanoseconds per timestamp tick.
    period_ns: f64,
}

/// Dispatch timing while [`WgpuBackend::time_dispatches`] runs: the entry
/// of each dispatch in the batch being recorded, and per submitted batch its
/// entries and the buffer its timestamps are copied into.
#[derive(Default)]
struct Timing {
    batch: Vec<&'static str>,
    done: Vec<(Vec<&'static str>, wgpu::Buffer)>,
}

/// The open recording: captured work, its Params image (one slot per
/// dispatch) and the allocations it uses.
#[derive(Default)]
struct Capture {
    steps: Vec<Captured>,
    params: Vec<u8>,
    allocs: Vec<u64>,
}

/// One step of a finished recording, resolved so that replay only encodes.
enum Step {
    /// `_binds` keeps every buffer alive (the workspace arena may be replaced
    /// after recording) for as long as the recording exists.
    Dispatch {
        entry: &'static str,
        pipe: wgpu::ComputePipeline,
        group: wgpu::BindGroup,
        offset: u32,
        size: [u32; 3],
        _binds: Vec<Bind>,
    },
    Transfer(Transfer),
}

/// A wgpu recording: resolved steps, the Params buffer their bind groups
/// read, and one base address per allocation used (ids are never reused, so
/// a freed allocation stays recognisable).
struct WgpuRecording {
    steps: Vec<Step>,
    _params: Option<wgpu::Buffer>,
    allocs: Vec<u64>,
    /// The command buffer of the next replay, encoded right after the
    /// previous replay's submit while the GPU runs it (a wgpu command buffer
    /// is single-use, and encoding a decode step's ~400 dispatches takes
    /// about a millisecond of CPU that would otherwise sit between tokens).
    next: Mutex<Option<wgpu::CommandBuffer>>,
}

struct State {
    allocs: VirtualAllocs<wgpu::Buffer>,
    programs: HashMap<ProgKey, Arc<Program>>,
    pipelines: HashMap<PipeKey, wgpu::ComputePipeline>,
    bind_groups: HashMap<BindKey, wgpu::BindGroup>,
    encoder: Option<wgpu::CommandEncoder>,
    /// Host image of this batch's Params slots.
    params: Vec<u8>,
    slots: usize,
    params_buf: wgpu::Buffer,
    workspace: Option<Bind>,
    workspace_gen: u64,
    /// The arrival counters of [`switchyard_kernels::plan::WgslPlan::arrivals`],
    /// made on first use (wgpu zeroes a new buffer) and never replaced.
    arrivals: Option<Bind>,
    /// Open while `record` runs its closure.
    capture: Option<Capture>,
    /// Open while `time_dispatches` runs its closure.
    timing: Option<Timing>,
}

/// Refuses an operation whose host side cannot be replayed while a recording is open.
fn not_recording(st: &State, op: &str) -> Result<()> {
    if st.capture.is_some() {
        return Err(Error::invalid(op, "<recording>", "host transfers and synchronisation cannot be recorded; do them outside record()"));
    }
    Ok(())
}

/// The wgpu device, queue and caches. Construct with [`wgpu_backend`] or
/// [`WgpuBackend::new`].
pub struct WgpuBackend {
    device: wgpu::Device,
    queue: wgpu::Queue,
    limits: wgpu::Limits,
    info: BackendInfo,
    max_batch: usize,
    /// [`WgpuOptions::loop_bounding`].
    loop_bounding: bool,
    /// Workgroups per dimension before folding.
    max_groups: u32,
    /// What launch plans may know about this device.
    facts: DeviceFacts,
    dummy: wgpu::Buffer,
    /// Timestamp queries, or why this adapter has none.
    timer: std::result::Result<Timer, String>,
    /// Errors the device reported outside an error scope, drained after each operation.
    errors: Arc<Mutex<Vec<String>>>,
    st: Mutex<State>,
}

fn rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    }
}

fn pick_adapter(instance: &wgpu::Instance, wanted: Option<&str>) -> Result<wgpu::Adapter> {
    let all = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    let usable: Vec<wgpu::Adapter> =
        all.into_iter().filter(|a| a.get_downlevel_capabilities().flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS)).collect();
    let describe = |a: &wgpu::Adapter| {
        let i = a.get_info();
        format!("{} ({:?}, {:?})", i.name, i.backend, i.device_type)
    };
    if usable.is_empty() {
        return Err(unavailable(
            "no adapter with compute shaders (Vulkan, Metal or DX12) was found; on Linux install a Vulkan driver \
             (mesa-vulkan-drivers gives the lavapipe CPU adapter) or the GPU vendor's Vulkan ICD",
        ));
    }
    if let Some(w) = wanted {
        let w = w.to_lowercase();
        return usable.into_iter().find(|a| a.get_info().name.to_lowercase().contains(&w)).ok_or_else(|| {
            let names: Vec<String> = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all())).iter().map(describe).collect();
            unavailable(format!("no adapter name contains {w:?} (from {ADAPTER_ENV} or options); adapters: {}", names.join(", ")))
        });
    }
    let mut v: Vec<(usize, wgpu::Adapter)> = usable.into_iter().enumerate().collect();
    v.sort_by_key(|(i, a)| {
        let info = a.get_info();
        (rank(info.device_type), info.backend != wgpu::Backend::Vulkan, *i)
    });
    Ok(v.remove(0).1)
}

/// What the cooperative-matrix kernels need from the device.
const COOPMAT_FEATURES: wgpu::Features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX.union(wgpu::Features::SHADER_F16);

/// Whether `props` lists the one configuration the kernels use: 16×16×16,
/// f16 A and B, f32 accumulator and result.
pub fn has_coopmat_f16_16(props: &[wgpu::CooperativeMatrixProperties]) -> bool {
    props.iter().any(|c| {
        (c.m_size, c.n_size, c.k_size) == (16, 16, 16)
            && c.ab_type == wgpu::CooperativeScalarType::F16
            && c.cr_type == wgpu::CooperativeScalarType::F32
    })
}

/// Whether the device opens with the cooperative-matrix kernels
/// ([`WgpuOptions::coopmat`]), or why not.
fn coopmat_choice(adapter: &wgpu::Adapter, wanted: bool) -> std::result::Result<(), String> {
    let ai = adapter.get_info();
    if !wanted {
        return Err(format!("WgpuOptions::coopmat false or {COOPMAT_ENV}=0"));
    }
    let missing: Vec<&str> =
        [(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX, "EXPERIMENTAL_COOPERATIVE_MATRIX"), (wgpu::Features::SHADER_F16, "SHADER_F16")]
            .into_iter()
            .filter(|(f, _)| !adapter.features().contains(*f))
            .map(|(_, name)| name)
            .collect();
    if !missing.is_empty() {
        return Err(format!("adapter {} lacks wgpu::Features::{}", ai.name, missing.join(" and ")));
    }
    if !has_coopmat_f16_16(&adapter.cooperative_matrix_properties()) {
        return Err(format!("adapter {} does not list the 16x16x16 f16 x f16 -> f32 configuration", ai.name));
    }
    if (ai.subgroup_min_size, ai.subgroup_max_size) != (32, 32) {
        return Err(format!(
            "adapter {} has subgroups of {}..{} invocations; the kernels assume exactly 32",
            ai.name, ai.subgroup_min_size, ai.subgroup_max_size
        ));
    }
    Ok(())
}

/// The adapter's cooperative-matrix configurations as wgpu reports them
/// (subgroup scope, sizes 8 and 16 only), `MxNxK A/B -> C/result`.
fn coopmat_configs(adapter: &wgpu::Adapter) -> String {
    let v: Vec<String> = adapter
        .cooperative_matrix_properties()
        .iter()
        .map(|c| {
            format!(
                "{}x{}x{} {:?}->{:?}{}",
                c.m_size,
                c.n_size,
                c.k_size,
                c.ab_type,
                c.cr_type,
                if c.saturating_accumulation { " sat" } else { "" }
            )
        })
        .collect();
    if v.is_empty() {
        "none".to_string()
    } else {
        v.join(", ")
    }
}

fn limit_details(l: &wgpu::Limits) -> Vec<(String, String)> {
    [
        ("max_buffer_size", l.max_buffer_size),
        ("max_storage_buffer_binding_size", l.max_storage_buffer_binding_size),
        ("max_storage_buffers_per_shader_stage", l.max_storage_buffers_per_shader_stage as u64),
        ("max_compute_workgroups_per_dimension", l.max_compute_workgroups_per_dimension as u64),
        ("max_compute_invocations_per_workgroup", l.max_compute_invocations_per_workgroup as u64),
        ("max_compute_workgroup_storage_size", l.max_compute_workgroup_storage_size as u64),
        ("min_storage_buffer_offset_alignment", l.min_storage_buffer_offset_alignment as u64),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

impl WgpuBackend {
    /// Picks an adapter, opens a device with the adapter's own limits, and
    /// makes the backend. No adapter: [`Error::Unavailable`].
    pub fn new(opts: WgpuOptions) -> Result<Arc<WgpuBackend>> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY);
        let instance = wgpu::Instance::new(desc);
        let adapter = pick_adapter(&instance, opts.adapter.as_deref())?;
        let ai = adapter.get_info();
        let limits = adapter.limits();
        if limits.max_storage_buffers_per_shader_stage < 4 {
            return Err(unavailable(format!(
                "adapter {} allows only {} storage buffers per shader stage",
                ai.name, limits.max_storage_buffers_per_shader_stage
            )));
        }
        // Timestamp queries where the adapter has them (per-dispatch GPU time in
        // `switchyard bench`): written at compute-pass boundaries, and each
        // direct dispatch is its own pass, so TIMESTAMP_QUERY suffices.
        let timestamps = adapter.features() & wgpu::Features::TIMESTAMP_QUERY;
        // Subgroup operations where the adapter has them and they are not
        // turned off: every kernel then compiles with the subgroup lanes.
        let subgroups = opts.subgroups && adapter.features().contains(wgpu::Features::SUBGROUP);
        let mut required_features = if subgroups { timestamps | wgpu::Features::SUBGROUP } else { timestamps };
        let coop = coopmat_choice(&adapter, opts.coopmat);
        if coop.is_ok() {
            required_features |= COOPMAT_FEATURES;
        }
        let experimental_features = if coop.is_ok() {
            // SAFETY: the token only acknowledges that wgpu's experimental
            // cooperative-matrix support may have bugs. The shaders that use it
            // are naga-validated like every other kernel, touch only workgroup
            // arrays through coopLoad/coopStore at indices inside them, and
            // run only where the adapter lists the configuration they use.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("switchyard"),
            required_features,
            required_limits: limits.clone(),
            experimental_features,
            memory_hints: wgpu::MemoryHints::Performance,
            ..Default::default()
        }))
        .map_err(|e| unavailable(format!("adapter {} refused a device: {e}", ai.name)))?;
        let errors = Arc::new(Mutex::new(Vec::new()));
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut v) = sink.lock() {
                v.push(e.to_string());
            }
        }));
        let sink = errors.clone();
        device.set_device_lost_callback(move |reason, msg| {
            if let Ok(mut v) = sink.lock() {
                v.push(format!("device lost ({reason:?}): {msg}"));
            }
        });
        let max_batch = opts.max_batch.max(1);
        let max_groups = limits.max_compute_workgroups_per_dimension;
        let max_groups = opts.fold_limit.map_or(max_groups, |f| f.clamp(1, max_groups));
        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        let dummy =
            device.create_buffer(&wgpu::BufferDescriptor { label: Some("null"), size: PAD, usage: storage, mapped_at_creation: false });
        let params_buf = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("params"),
            size: SLOT * max_batch as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let timer = if timestamps.contains(wgpu::Features::TIMESTAMP_QUERY) {
            Ok(Timer {
                queries: device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("dispatch timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count: 2 * max_batch as u32,
                }),
                resolve: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("timestamps"),
                    size: 16 * max_batch as u64,
                    usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                }),
                period_ns: queue.get_timestamp_period() as f64,
            })
        } else {
            Err(format!("adapter {} ({:?}) lacks wgpu::Features::TIMESTAMP_QUERY", ai.name, ai.backend))
        };
        let mut details = vec![
            ("adapter_backend".to_string(), format!("{:?}", ai.backend)),
            ("device_type".to_string(), format!("{:?}", ai.device_type)),
            ("max_batch".to_string(), max_batch.to_string()),
        ];
        details.extend(limit_details(&limits));
        details.push((
            "gpu_timing".to_string(),
            match &timer {
                Ok(t) => format!("timestamp queries at each dispatch's compute pass, {} ns a tick", t.period_ns),
                Err(e) => format!("unavailable: {e}"),
            },
        ));
        let facts = DeviceFacts {
            multiprocessors: 0,
            max_shared_bytes: limits.max_compute_workgroup_storage_size,
            // > 1 exactly when the shaders are composed with the subgroup lanes.
            subgroup_size: if subgroups { ai.subgroup_min_size.max(2) } else { 1 },
            max_groups_per_dim: max_groups,
            max_binding_bytes: opts
                .plan_binding_limit
                .map_or(limits.max_storage_buffer_binding_size, |l| l.min(limits.max_storage_buffer_binding_size)),
            cuda_sm90a: false,
            cuda_clusters: false,
            wgsl_coopmat: coop.is_ok(),
        };
        details.push((
            "subgroups".to_string(),
            if subgroups {
                format!("on (subgroup size {}..{})", ai.subgroup_min_size, ai.subgroup_max_size)
            } else if !opts.subgroups {
                format!("off (WgpuOptions::subgroups false or {SUBGROUPS_ENV}=0)")
            } else {
                format!("off (adapter {} lacks wgpu::Features::SUBGROUP)", ai.name)
            },
        ));
        details.push((
            "cooperative_matrix".to_string(),
            match &coop {
                Ok(()) => "on (16x16x16 f16 x f16 -> f32: dense_gemm_bf16_pipelined at M > 16)".to_string(),
                Err(why) => format!("off ({why})"),
            },
        ));
        details.push(("cooperative_matrix_configs".to_string(), coopmat_configs(&adapter)));
        details.push((
            "loop_bounding".to_string(),
            if opts.loop_bounding {
                format!("on ({LOOP_BOUNDING_ENV}=1)")
            } else {
                "off (the catalogue's loops are bounded by validated launch parameters)".to_string()
            },
        ));
        let info = BackendInfo {
            backend: BackendKind::Wgpu,
            device: ai.name.clone(),
            driver: format!("{} {}", ai.driver, ai.driver_info).trim().to_string(),
            max_alloc_bytes: limits.max_buffer_size,
            details,
        };
        Ok(Arc::new(WgpuBackend {
            device,
            queue,
            limits,
            info,
            max_batch,
            loop_bounding: opts.loop_bounding,
            max_groups,
            facts,
            dummy,
            timer,
            errors,
            st: Mutex::new(State {
                allocs: VirtualAllocs::default(),
                programs: HashMap::new(),
                pipelines: HashMap::new(),
                bind_groups: HashMap::new(),
                encoder: None,
                params: vec![0u8; SLOT as usize * max_batch],
                slots: 0,
                params_buf,
                workspace: None,
                workspace_gen: 0,
                arrivals: None,
                capture: None,
                timing: None,
            }),
        }))
    }

    /// Whether kernels are composed with their cooperative-matrix code and
    /// plans may pick it ([`WgpuOptions::coopmat`]).
    pub fn coopmat(&self) -> bool {
        self.facts.wgsl_coopmat
    }

    /// Whether kernels run with the subgroup lanes (the device has
    /// `wgpu::Features::SUBGROUP` and [`WgpuOptions::subgroups`] is set).
    pub fn subgroups(&self) -> bool {
        self.facts.subgroup_size > 1
    }

    /// Whether [`time_dispatches`](Self::time_dispatches) can time
    /// dispatches on this adapter; `Err` says why not.
    pub fn gpu_timing(&self) -> std::result::Result<(), String> {
        self.timer.as_ref().map(|_| ()).map_err(Clone::clone)
    }

    /// Runs `work` (launches, copies, synchronisation) and returns the GPU
    /// time of every dispatch it enqueued, in order: timestamp queries
    /// written at the beginning and end of each dispatch's compute pass
    /// (`wgpu::Features::TIMESTAMP_QUERY`). Work enqueued before is
    /// submitted first and not timed. A replay of a recording is timed the
    /// same way, each of its dispatches in a pass of its own (an untimed
    /// replay shares one pass between consecutive dispatches, so its wall
    /// time can be lower than the sum). Refused while recording, and
    /// where the adapter has no timestamp queries ([`Error::Unsupported`]).
    pub fn time_dispatches(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<Vec<DispatchTime>> {
        let timer = self.timer.as_ref().map_err(|e| Error::Unsupported(format!("per-dispatch GPU time: {e}")))?;
        {
            let mut st = self.state();
            not_recording(&st, "time_dispatches")?;
            if st.timing.is_some() {
                return Err(Error::invalid("time_dispatches", "<timing>", "dispatches are already being timed on this backend"));
            }
            self.flush(&mut st);
            st.timing = Some(Timing::default());
        }
        let result = work();
        let timing = {
            let mut st = self.state();
            self.flush(&mut st);
            st.timing.take().unwrap_or_default()
        };
        result?;
        let (tx, rx) = mpsc::channel();
        for (_, buf) in &timing.done {
            let tx = tx.clone();
            buf.slice(..).map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
        }
        drop(tx);
        self.wait()?;
        self.check("time_dispatches")?;
        for r in rx.iter() {
            r.map_err(|e| driver(format!("time_dispatches: mapping timestamps: {e}")))?;
        }
        let mut times = Vec::new();
        for (entries, buf) in &timing.done {
            let view = buf.slice(..).get_mapped_range().map_err(|e| driver(format!("time_dispatches: timestamps view: {e}")))?;
            let ticks: Vec<u64> = view.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).collect();
            times.extend(
                entries
                    .iter()
                    .zip(ticks.chunks(2))
                    .map(|(&entry, t)| DispatchTime { entry, ms: t[1].saturating_sub(t[0]) as f64 * timer.period_ns * 1e-6 }),
            );
        }
        Ok(times)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves caches that are still consistent.
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Turns errors the device reported since the last check into one
    /// `Error::Driver`. The batch being recorded is dropped with it: wgpu
    /// invalidates an encoder that saw an error, and every later submit
    /// would fail again.
    fn check(&self, what: &str) -> Result<()> {
        let msg = {
            let mut v = self.errors.lock().unwrap_or_else(|p| p.into_inner());
            if v.is_empty() {
                return Ok(());
            }
            let msg = v.join("; ");
            v.clear();
            msg
        };
        let mut st = self.state();
        let dropped = st.slots;
        st.encoder = None;
        st.slots = 0;
        if let Some(t) = st.timing.as_mut() {
            t.batch.clear();
        }
        Err(driver(format!("{what}: {msg} (unsubmitted work discarded: {dropped} dispatches)")))
    }

    fn flush(&self, st: &mut State) {
        if let Some(mut enc) = st.encoder.take() {
            if st.slots > 0 {
                self.queue.write_buffer(&st.params_buf, 0, &st.params[..st.slots * SLOT as usize]);
            }
            if let (Some(t), Ok(timer)) = (st.timing.as_mut(), &self.timer) {
                // Dispatch k wrote queries 2k and 2k + 1 (its Params slot k).
                self.read_back_timestamps(&mut enc, timer, t);
            }
            self.queue.submit([enc.finish()]);
            st.slots = 0;
        }
    }

    fn wait(&self) -> Result<()> {
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| driver(format!("waiting for the device: {e}")))?;
        Ok(())
    }

    fn encoder<'a>(&self, st: &'a mut State) -> &'a mut wgpu::CommandEncoder {
        st.encoder.get_or_insert_with(|| self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("batch") }))
    }

    /// Resolves `[addr, addr + bytes)` to (allocation id, buffer, offset).
    fn resolve(&self, st: &State, op: &str, arg: &str, addr: u64, bytes: u64) -> Result<(u64, wgpu::Buffer, u64)> {
        let (buf, off) = st.allocs.resolve(addr, bytes).map_err(|d| Error::oob(op, arg, d))?;
        Ok((vaddr::unpack(addr).0, buf.clone(), off))
    }

    /// A storage window of `buf` holding bytes `[off, off + len)`, or with
    /// `len` None byte `off` and everything after it up to the end of the
    /// allocation, within the binding-size limit. The start moves down to the
    /// storage offset alignment, at least 16 (vec4 views then start on a
    /// vector boundary), and the end up to 16 bytes (allocations are padded
    /// to 16, so every window spans whole vectors); plans leave room for that
    /// (`plan::WINDOW_SLACK`).
    fn window(&self, kernel: &str, arg: &str, id: u64, buf: &wgpu::Buffer, off: u64, len: Option<u64>) -> Result<Bind> {
        let align = self.limits.min_storage_buffer_offset_alignment.max(16) as u64;
        let base = off - off % align;
        let end = len.map_or(buf.size(), |n| (off + n.max(1)).next_multiple_of(PAD).min(buf.size()));
        let size = end - base;
        let limit = self.limits.max_storage_buffer_binding_size;
        if size > limit {
            let what = match len {
                None => format!(
                    "binding {size} bytes (from offset {base} to the end of the allocation) exceeds this adapter's \
                     max_storage_buffer_binding_size of {limit}; only kernels with a split plan (embedding gathers, \
                     the output head, the grouped expert GEMMs) read tables past one binding"
                ),
                Some(n) => format!("a window of {n} bytes at offset {off} binds {size} bytes, over this adapter's limit of {limit}"),
            };
            return Err(Error::invalid(kernel, arg, what));
        }
        Ok(Bind { id, buf: buf.clone(), base, size })
    }

    /// The program of `src` with `storage` storage bindings, compiled on first
    /// use. `kernel` names the launch in errors.
    fn program(&self, st: &mut State, kernel: &str, src: &Source, storage: usize) -> Result<Arc<Program>> {
        let key = (src.path, storage);
        if let Some(p) = st.programs.get(&key) {
            return Ok(p.clone());
        }
        if storage as u32 > self.limits.max_storage_buffers_per_shader_stage {
            return Err(Error::Unsupported(format!(
                "kernel {kernel} binds {storage} storage buffers; adapter {} allows {} per shader stage",
                self.info.device, self.limits.max_storage_buffers_per_shader_stage
            )));
        }
        // naga first, for an error that names the file and line.
        let (subgroups, coopmat) = (self.subgroups(), self.coopmat());
        let composed = shader::compose_coopmat(src, subgroups, coopmat).map_err(|e| driver(format!("kernel {kernel}: {e}")))?;
        shader::validate_composed_coopmat(src, &composed, subgroups, coopmat).map_err(|e| driver(format!("kernel {kernel}: {e}")))?;
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let descriptor = wgpu::ShaderModuleDescriptor { label: Some(src.path), source: wgpu::ShaderSource::Wgsl(composed.text.into()) };
        let mut checks = wgpu::ShaderRuntimeChecks::checked();
        checks.force_loop_bounding = self.loop_bounding;
        // SAFETY: only the loop bounding may be off (bounds and division
        // checks stay on), and it may be off only for shaders without
        // infinite loops: every loop of the catalogue's WGSL counts up to a
        // bound from its launch parameters, which the host validated against
        // the bound buffers (sizes below 2^32 words, so no counter wraps).
        let module = unsafe { self.device.create_shader_module_trusted(descriptor, checks) };
        let mut entries = vec![wgpu::BindGroupLayoutEntry {
            binding: 0,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer { ty: wgpu::BufferBindingType::Uniform, has_dynamic_offset: true, min_binding_size: None },
            count: None,
        }];
        entries.extend((0..storage).map(|k| wgpu::BindGroupLayoutEntry {
            binding: k as u32 + 1,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: false },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        }));
        let bgl = self.device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(src.path), entries: &entries });
        let layout = self.device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(src.path),
            bind_group_layouts: &[Some(&bgl)],
            immediate_size: 0,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(driver(format!("kernel {kernel}: shader module {}: {e}", src.path)));
        }
        let p = Arc::new(Program { module, bgl, layout });
        st.programs.insert(key, p.clone());
        Ok(p)
    }

    /// The pipeline of `entry` in a program, built on first use. The storage
    /// binding count is part of the key: a plan that asks for workspace on
    /// some shapes only compiles the same file under two layouts.
    fn pipeline(
        &self,
        st: &mut State,
        kernel: &str,
        prog: (ProgKey, &Program),
        entry: &'static str,
        consts: &[(&'static str, u32)],
    ) -> Result<wgpu::ComputePipeline> {
        let ((path, storage), prog) = prog;
        let key = (path, storage, entry, consts.to_vec());
        if let Some(p) = st.pipelines.get(&key) {
            return Ok(p.clone());
        }
        let c: Vec<(&str, f64)> = consts.iter().map(|&(k, v)| (k, v as f64)).collect();
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let pipe = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: Some(&prog.layout),
            module: &prog.module,
            entry_point: Some(entry),
            compilation_options: wgpu::PipelineCompilationOptions { constants: &c, zero_initialize_workgroup_memory: false },
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(driver(format!("kernel {kernel}: pipeline {entry} {consts:?} of {path}: {e}")));
        }
        st.pipelines.insert(key, pipe.clone());
        Ok(pipe)
    }

    /// A bind group of `prog`'s layout: `params` at binding 0 (one slot,
    /// selected by dynamic offset), `binds` at 1...
    fn bind_group(&self, label: &str, prog: &Program, params: &wgpu::Buffer, binds: &[Bind]) -> wgpu::BindGroup {
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer: params, offset: 0, size: wgpu::BufferSize::new(SLOT) }),
        }];
        entries.extend(binds.iter().enumerate().map(|(k, b)| wgpu::BindGroupEntry {
            binding: k as u32 + 1,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &b.buf,
                offset: b.base,
                size: wgpu::BufferSize::new(b.size),
            }),
        }));
        self.device.create_bind_group(&wgpu::BindGroupDescriptor { label: Some(label), layout: &prog.bgl, entries: &entries })
    }

    /// One dispatch of `entry` in `src` with `params` (signature words; the
    /// tail is filled here, then `after`, the words of extra windows) and
    /// `binds` (storage bindings 1..): encoded into the batch, or captured
    /// when a recording is open. `kernel` names the launch in errors.
    #[allow(clippy::too_many_arguments)]
    fn dispatch(
        &self,
        st: &mut State,
        kernel: &str,
        src: &Source,
        entry: &'static str,
        consts: &[(&'static str, u32)],
        binds: &[Bind],
        mut params: Vec<u32>,
        grid: [u32; 3],
        extra: [u32; 4],
        after: &[u32],
    ) -> Result<()> {
        let (size, fold) = fold::fold(kernel, grid, self.max_groups)?;
        params.extend(grid);
        params.push(fold);
        params.extend(extra);
        params.extend(after);
        if params.len() * 4 > SLOT as usize {
            return Err(Error::Unsupported(format!(
                "kernel {kernel}: {} parameter words do not fit a {SLOT}-byte Params slot",
                params.len()
            )));
        }
        let key = (src.path, binds.len());
        let prog = self.program(st, kernel, src, binds.len())?;
        let pipe = self.pipeline(st, kernel, (key, &prog), entry, consts)?;
        let bytes: &[u8] = bytemuck::cast_slice(&params);
        if let Some(cap) = st.capture.as_mut() {
            let at = cap.params.len();
            let offset = u32::try_from(at).map_err(|_| {
                Error::Unsupported(format!("kernel {kernel}: a recording's Params passed 4 GiB ({} dispatches)", at as u64 / SLOT))
            })?;
            cap.params.extend_from_slice(bytes);
            cap.params.resize(at + SLOT as usize, 0);
            cap.allocs.extend(binds.iter().map(|b| b.id).filter(|&id| is_alloc(id)));
            cap.steps.push(Captured::Dispatch { entry, prog: key, program: prog, pipe, binds: binds.to_vec(), offset, size });
            return Ok(());
        }
        if st.slots == self.max_batch {
            self.flush(st);
        }
        let bkey: BindKey = (src.path, binds.iter().map(|b| (b.id, b.base, b.size)).collect());
        let cacheable = binds.iter().all(|b| b.id != TEMP_ID);
        let bg = match st.bind_groups.get(&bkey).filter(|_| cacheable) {
            Some(bg) => bg.clone(),
            None => {
                let bg = self.bind_group(entry, &prog, &st.params_buf, binds);
                // Distinct (buffer, window) sets are bounded by the model's tensors; this only guards against unbounded churn.
                if st.bind_groups.len() > 8192 {
                    st.bind_groups.clear();
                }
                if cacheable {
                    st.bind_groups.insert(bkey, bg.clone());
                }
                bg
            }
        };
        let slot = st.slots;
        st.params[slot * SLOT as usize..][..bytes.len()].copy_from_slice(bytes);
        st.slots += 1;
        let timed = match (st.timing.as_mut(), &self.timer) {
            (Some(t), Ok(timer)) => {
                t.batch.push(entry);
                Some(wgpu::ComputePassTimestampWrites {
                    query_set: &timer.queries,
                    beginning_of_pass_write_index: Some(2 * slot as u32),
                    end_of_pass_write_index: Some(2 * slot as u32 + 1),
                })
            }
            _ => None,
        };
        let enc = self.encoder(st);
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(entry), timestamp_writes: timed });
        pass.set_pipeline(&pipe);
        pass.set_bind_group(0, &bg, &[(slot as u64 * SLOT) as u32]);
        pass.dispatch_workgroups(size[0], size[1], size[2]);
        Ok(())
    }

    /// `bytes` of the workspace arena, bound from its start. Growing replaces
    /// the buffer; work already encoded or recorded holds its own clone of
    /// the old one, which lives until that work is done or dropped.
    fn workspace(&self, st: &mut State, kernel: &str, bytes: u64) -> Result<Bind> {
        let current = st.workspace.as_ref().map_or(0, |b| b.size);
        let size = match arena_size(current, bytes, self.limits.max_storage_buffer_binding_size) {
            Ok(None) => return Ok(st.workspace.clone().expect("a non-empty arena exists")),
            Ok(Some(size)) => size,
            Err(e) => return Err(Error::invalid(kernel, "<workspace>", e)),
        };
        st.workspace_gen += 1;
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("workspace"),
            size,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        if let Some(old) = st.workspace.take() {
            st.bind_groups.retain(|k, _| !k.1.iter().any(|b| b.0 == old.id));
        }
        let b = Bind { id: u64::MAX - st.workspace_gen, buf, base: 0, size };
        st.workspace = Some(b.clone());
        Ok(b)
    }

    /// The arrival counters, for a plan that uses `n` of them.
    fn arrivals(&self, st: &mut State, kernel: &str, n: u32) -> Result<Bind> {
        if n > WGSL_ARRIVAL_COUNTERS {
            return Err(Error::invalid(
                kernel,
                "<arrivals>",
                format!("the plan asks for {n} arrival counters; the backend keeps {WGSL_ARRIVAL_COUNTERS}"),
            ));
        }
        let b = st.arrivals.get_or_insert_with(|| {
            let size = WGSL_ARRIVAL_COUNTERS as u64 * 4;
            let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("arrival counters"),
                size,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            });
            Bind { id: ARRIVALS_ID, buf, base: 0, size }
        });
        Ok(b.clone())
    }

    /// The storage bindings and Params words of a launch's declared
    /// arguments, those named in `windows` bound through their window (the
    /// word then locates the window's first byte). Every non-null pointer is
    /// resolved against the live allocations here, under the state lock
    /// `free` takes. An argument's further windows in `windows` (a split
    /// pass reading two windows of one table) bind after the declared
    /// arguments, in order; their words are the third result, which
    /// [`Self::dispatch`] places after the Params tail.
    fn bind_args(&self, st: &State, sig: &'static KernelSig, args: &[Arg], windows: &[WgslWindow]) -> Result<BoundArgs> {
        let mut binds = Vec::new();
        let mut words = Vec::with_capacity(args.len() + TAIL);
        let mut more = (Vec::new(), Vec::new());
        for (spec, arg) in sig.args.iter().zip(args) {
            debug_assert_eq!(arg.kind(), spec.kind, "{}: Backend::launch checks the signature", sig.symbol);
            words.push(match *arg {
                Arg::P(0) => {
                    binds.push(Bind { id: 0, buf: self.dummy.clone(), base: 0, size: PAD });
                    u32::MAX
                }
                Arg::P(addr) => {
                    let mut mine = windows.iter().filter(|w| w.arg == spec.name);
                    let (b, w) = self.bind_window(st, sig, spec.name, addr, mine.next())?;
                    for extra in mine {
                        let (b, w) = self.bind_window(st, sig, spec.name, addr, Some(extra))?;
                        more.0.push(b);
                        more.1.push(w);
                    }
                    binds.push(b);
                    w
                }
                Arg::I(v) => v as u32,
                Arg::U(v) => v,
                Arg::F(v) => v.to_bits(),
            });
            debug_assert_eq!(arg.kind() == ArgKind::Ptr, matches!(arg, Arg::P(_)));
        }
        binds.extend(more.0);
        Ok((binds, words, more.1))
    }

    /// Pointer argument `arg` at `addr`, bound whole from there or through
    /// `window`: the binding and its Params word (the word offset of the
    /// argument's or window's first byte within the binding).
    fn bind_window(
        &self,
        st: &State,
        sig: &'static KernelSig,
        arg: &'static str,
        addr: u64,
        window: Option<&WgslWindow>,
    ) -> Result<(Bind, u32)> {
        let (at, len) = match window {
            Some(w) => (addr.checked_add(w.offset).filter(|a| vaddr::unpack(*a).0 == vaddr::unpack(addr).0), Some(w.bytes)),
            None => (Some(addr), None),
        };
        let at = at.ok_or_else(|| Error::oob(sig.symbol, arg, "the plan's window starts outside the allocation"))?;
        let (id, buf, off) = self.resolve(st, sig.symbol, arg, at, len.unwrap_or(1).max(1))?;
        // Not a shape rule the launcher knows: WGSL storage is addressed in u32 words.
        if off % 4 != 0 {
            return Err(Error::invalid(
                sig.symbol,
                arg,
                format!("byte offset {off} is not a multiple of 4 (WGSL storage moves u32 words)"),
            ));
        }
        let b = self.window(sig.symbol, arg, id, &buf, off, len)?;
        let w = ((off - b.base) / 4) as u32;
        Ok((b, w))
    }

    /// `copy_buffer_to_buffer` into the batch, or captured.
    fn copy_words(&self, st: &mut State, dst: At, src: At, bytes: u64) {
        if let Some(cap) = st.capture.as_mut() {
            cap.allocs.extend([dst.0, src.0]);
            cap.steps.push(Captured::Transfer(Transfer::Copy {
                src: src.1.clone(),
                src_off: src.2,
                dst: dst.1.clone(),
                dst_off: dst.2,
                bytes,
            }));
            return;
        }
        self.encoder(st).copy_buffer_to_buffer(src.1, src.2, dst.1, dst.2, bytes);
    }

    /// `clear_buffer` into the batch, or captured.
    fn clear_words(&self, st: &mut State, dst: At, bytes: u64) {
        if let Some(cap) = st.capture.as_mut() {
            cap.allocs.push(dst.0);
            cap.steps.push(Captured::Transfer(Transfer::Clear { buf: dst.1.clone(), off: dst.2, bytes }));
            return;
        }
        self.encoder(st).clear_buffer(dst.1, dst.2, Some(bytes));
    }

    /// Byte-granular copy (or zero, when `src` is None) of `n` bytes through
    /// the bytecopy shader, for ranges storage words cannot express.
    fn bytecopy(&self, st: &mut State, op: &str, dst: At, src: Option<At>, n: u64) -> Result<()> {
        const CHUNK: u64 = 1 << 28;
        let mut done = 0;
        while done < n {
            let len = (n - done).min(CHUNK);
            let d = self.window(op, "dst", dst.0, dst.1, dst.2 + done, Some(len))?;
            let (s, sr) = match src {
                Some(s) => {
                    let w = self.window(op, "src", s.0, s.1, s.2 + done, Some(len))?;
                    let rel = (s.2 + done - w.base) as u32;
                    (w, rel)
                }
                None => (Bind { id: 0, buf: self.dummy.clone(), base: 0, size: PAD }, 0),
            };
            let dr = (dst.2 + done - d.base) as u32;
            let words = ((dr as u64 + len).div_ceil(4) - dr as u64 / 4) as u32;
            let zero = src.is_none() as u32;
            self.dispatch(
                st,
                op,
                &shader::BYTECOPY,
                "bytecopy",
                &[],
                &[d, s],
                vec![dr, sr, len as u32],
                [words.div_ceil(256), 1, 1],
                [zero, 0, 0, 0],
                &[],
            )?;
            done += len;
        }
        Ok(())
    }

    /// Resolves captured work: one Params buffer written once, one bind
    /// group per distinct (program, buffer set).
    fn finish(&self, cap: Capture) -> WgpuRecording {
        let params = (!cap.params.is_empty()).then(|| {
            let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("recording params"),
                size: cap.params.len() as u64,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            self.queue.write_buffer(&buf, 0, &cap.params);
            buf
        });
        let mut groups: HashMap<BindKey, wgpu::BindGroup> = HashMap::new();
        let steps = cap
            .steps
            .into_iter()
            .map(|s| match s {
                Captured::Dispatch { entry, prog, program, pipe, binds, offset, size } => {
                    let key = (prog.0, binds.iter().map(|b| (b.id, b.base, b.size)).collect());
                    let group = groups
                        .entry(key)
                        .or_insert_with(|| {
                            self.bind_group("recording", &program, params.as_ref().expect("a dispatch wrote params"), &binds)
                        })
                        .clone();
                    Step::Dispatch { entry, pipe, group, offset, size, _binds: binds }
                }
                Captured::Transfer(t) => Step::Transfer(t),
            })
            .collect();
        let mut allocs: Vec<u64> = cap.allocs.into_iter().map(|id| vaddr::pack(id, 0)).collect();
        allocs.sort_unstable();
        allocs.dedup();
        WgpuRecording { steps, _params: params, allocs, next: Mutex::new(None) }
    }

    /// Encodes a recording's steps into one encoder: consecutive dispatches
    /// share a compute pass (wgpu orders their storage accesses), copies and
    /// clears sit between passes.
    fn encode(&self, steps: &[Step]) -> wgpu::CommandBuffer {
        let mut enc = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("replay") });
        let mut i = 0;
        while i < steps.len() {
            match &steps[i] {
                Step::Dispatch { .. } => {
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("replay"), timestamp_writes: None });
                    while let Some(Step::Dispatch { pipe, group, offset, size, .. }) = steps.get(i) {
                        pass.set_pipeline(pipe);
                        pass.set_bind_group(0, group, &[*offset]);
                        pass.dispatch_workgroups(size[0], size[1], size[2]);
                        i += 1;
                    }
                    continue;
                }
                Step::Transfer(t) => t.encode(&mut enc),
            }
            i += 1;
        }
        enc.finish()
    }

    /// Resolves the timestamps of `timing`'s batch (dispatch k of the batch
    /// wrote queries 2k and 2k + 1) into a new readback buffer, kept with the
    /// batch's entries in `timing.done`.
    fn read_back_timestamps(&self, enc: &mut wgpu::CommandEncoder, timer: &Timer, timing: &mut Timing) {
        let n = timing.batch.len() as u32;
        if n == 0 {
            return;
        }
        let bytes = 16 * n as u64;
        enc.resolve_query_set(&timer.queries, 0..2 * n, &timer.resolve, 0);
        let readback = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timestamps readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        enc.copy_buffer_to_buffer(&timer.resolve, 0, &readback, 0, bytes);
        timing.done.push((std::mem::take(&mut timing.batch), readback));
    }

    /// Submits a recording's steps with every dispatch in its own compute
    /// pass between two timestamp queries (inside `time_dispatches`), in
    /// command buffers of at most `max_batch` dispatches (the query set's
    /// size), each resolving its queries into a readback buffer of `timing`.
    fn submit_timed(&self, steps: &[Step], timer: &Timer, timing: &mut Timing) {
        let mut enc = None;
        let close = |enc: Option<wgpu::CommandEncoder>, timing: &mut Timing| {
            let Some(mut enc) = enc else { return };
            self.read_back_timestamps(&mut enc, timer, timing);
            self.queue.submit([enc.finish()]);
        };
        for step in steps {
            if timing.batch.len() == self.max_batch {
                close(enc.take(), timing);
            }
            let e = enc
                .get_or_insert_with(|| self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("timed replay") }));
            match step {
                Step::Dispatch { entry, pipe, group, offset, size, .. } => {
                    let k = timing.batch.len() as u32;
                    timing.batch.push(entry);
                    let mut pass = e.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some(entry),
                        timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                            query_set: &timer.queries,
                            beginning_of_pass_write_index: Some(2 * k),
                            end_of_pass_write_index: Some(2 * k + 1),
                        }),
                    });
                    pass.set_pipeline(pipe);
                    pass.set_bind_group(0, group, &[*offset]);
                    pass.dispatch_workgroups(size[0], size[1], size[2]);
                }
                Step::Transfer(t) => t.encode(e),
            }
        }
        close(enc, timing);
    }
}

impl Backend for WgpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Wgpu
    }

    fn info(&self) -> BackendInfo {
        self.info.clone()
    }

    fn alloc(&self, bytes: usize) -> Result<u64> {
        let size = (bytes as u64).max(1).next_multiple_of(PAD);
        if bytes == 0 || size > self.limits.max_buffer_size {
            return Err(Error::invalid(
                "alloc",
                "bytes",
                format!("{bytes} bytes: must be in 1..={} (this adapter's max_buffer_size)", self.limits.max_buffer_size),
            ));
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(driver(format!("alloc of {bytes} bytes: {e}")));
        }
        let addr = self.state().allocs.insert(bytes as u64, buf).map_err(|d| Error::invalid("alloc", "bytes", d))?;
        Ok(addr)
    }

    fn free(&self, addr: u64) -> Result<()> {
        let mut st = self.state();
        // Pending work and recordings keep their own references to the buffer; dropping ours is safe.
        st.allocs.remove(addr).map_err(|d| Error::oob("free", "addr", d))?;
        let id = vaddr::unpack(addr).0;
        st.bind_groups.retain(|k, _| !k.1.iter().any(|b| b.0 == id));
        Ok(())
    }

    fn upload(&self, dst: u64, data: &[u8]) -> Result<()> {
        let mut st = self.state();
        not_recording(&st, "upload")?;
        if data.is_empty() {
            return Ok(());
        }
        let (id, buf, off) = self.resolve(&st, "upload", "dst", dst, data.len() as u64)?;
        let n = data.len() as u64;
        if off.is_multiple_of(4) && n.is_multiple_of(4) {
            // The queue write lands before the next submission: submit what is recorded first.
            self.flush(&mut st);
            self.queue.write_buffer(&buf, off, data);
        } else {
            // Stage with the destination's misalignment, then merge bytes on the device.
            let lead = off % 4;
            let size = (lead + n).next_multiple_of(PAD);
            let tmp = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("upload"),
                size,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: true,
            });
            let mut staged = vec![0u8; size as usize];
            staged[lead as usize..(lead + n) as usize].copy_from_slice(data);
            tmp.slice(..).get_mapped_range_mut().map_err(|e| driver(format!("upload: staging map: {e}")))?.copy_from_slice(&staged);
            tmp.unmap();
            self.bytecopy(&mut st, "upload", (id, &buf, off), Some((TEMP_ID, &tmp, lead)), n)?;
        }
        drop(st);
        self.check("upload")
    }

    fn download(&self, src: u64, out: &mut [u8]) -> Result<()> {
        // Staging buffers of at most this many bytes, so a tensor past one
        // binding (or max_buffer_size) comes back in pieces.
        const CHUNK: u64 = 1 << 28;
        let st = self.state();
        not_recording(&st, "download")?;
        if out.is_empty() {
            return Ok(());
        }
        let (_, buf, off) = self.resolve(&st, "download", "src", src, out.len() as u64)?;
        drop(st);
        let mut done = 0usize;
        while done < out.len() {
            let n = (out.len() - done).min(CHUNK as usize);
            let at = off + done as u64;
            let a0 = at - at % 4;
            let a1 = (at + n as u64).next_multiple_of(4);
            let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("download"),
                size: a1 - a0,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut st = self.state();
            self.encoder(&mut st).copy_buffer_to_buffer(&buf, a0, &staging, 0, a1 - a0);
            self.flush(&mut st);
            drop(st);
            let (tx, rx) = mpsc::channel();
            staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
            self.wait()?;
            self.check("download")?;
            rx.recv()
                .map_err(|_| driver("download: the map callback never ran"))?
                .map_err(|e| driver(format!("download: mapping the staging buffer: {e}")))?;
            let view = staging.slice(..).get_mapped_range().map_err(|e| driver(format!("download: staging view: {e}")))?;
            let lead = (at - a0) as usize;
            out[done..done + n].copy_from_slice(&view[lead..lead + n]);
            drop(view);
            staging.unmap();
            done += n;
        }
        Ok(())
    }

    fn memset0(&self, dst: u64, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let mut st = self.state();
        let (id, buf, off) = self.resolve(&st, "memset0", "dst", dst, bytes as u64)?;
        let end = off + bytes as u64;
        let (a0, a1) = (off.next_multiple_of(4), end - end % 4);
        if a0 < a1 {
            self.clear_words(&mut st, (id, &buf, a0), a1 - a0);
            if off < a0 {
                self.bytecopy(&mut st, "memset0", (id, &buf, off), None, a0 - off)?;
            }
            if a1 < end {
                self.bytecopy(&mut st, "memset0", (id, &buf, a1), None, end - a1)?;
            }
        } else {
            self.bytecopy(&mut st, "memset0", (id, &buf, off), None, bytes as u64)?;
        }
        drop(st);
        self.check("memset0")
    }

    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let n = bytes as u64;
        let mut st = self.state();
        let d = self.resolve(&st, "copy", "dst", dst, n)?;
        let s = self.resolve(&st, "copy", "src", src, n)?;
        if d.0 == s.0 && d.2 < s.2 + n && s.2 < d.2 + n {
            return Err(Error::invalid("copy", "dst", format!("range [{dst:#x}, +{n}) overlaps the source range")));
        }
        if d.0 != s.0 && d.2.is_multiple_of(4) && s.2.is_multiple_of(4) && n.is_multiple_of(4) {
            self.copy_words(&mut st, (d.0, &d.1, d.2), (s.0, &s.1, s.2), n);
        } else {
            // Same buffer (wgpu forbids buffer-to-buffer copies within one) or unaligned.
            self.bytecopy(&mut st, "copy", (d.0, &d.1, d.2), Some((s.0, &s.1, s.2)), n)?;
        }
        drop(st);
        self.check("copy")
    }

    fn check_range(&self, addr: u64, bytes: usize) -> std::result::Result<(), String> {
        self.state().allocs.resolve(addr, bytes as u64).map(|_| ())
    }

    fn enqueue(&self, sig: &'static KernelSig, args: &[Arg]) -> Result<()> {
        let k = wgsl_kernel(sig).ok_or_else(|| Error::UnknownKernel {
            module: sig.module.into(),
            symbol: sig.symbol.into(),
            backend: Some(NAME.into()),
        })?;
        let pa = PlanArgs::new(sig, args);
        // A table past one binding: passes over windows of it.
        let split = match k.split {
            Some(split) => split(&pa, &self.facts)?,
            None => None,
        };
        let (plan, arrivals) = match split {
            Some(plan) => (plan, 0),
            None => {
                let plan = (k.plan)(&pa, &self.facts)?;
                let passes = plan.passes.into_iter().map(|pass| WgslSplitPass { pass, windows: vec![] }).collect();
                (WgslSplitPlan { passes, workspace_bytes: plan.workspace_bytes }, plan.arrivals)
            }
        };
        let mut st = self.state();
        let workspace = match plan.workspace_bytes {
            0 => None,
            n => Some(self.workspace(&mut st, sig.symbol, n)?),
        };
        let arrivals = match arrivals {
            0 => None,
            n => Some(self.arrivals(&mut st, sig.symbol, n)?),
        };
        let mut whole = None;
        for WgslSplitPass { pass, windows } in &plan.passes {
            let (mut binds, words, after) = match (windows.is_empty(), &whole) {
                (true, Some(b)) => Clone::clone(b),
                (true, None) => whole.insert(self.bind_args(&st, sig, args, &[])?).clone(),
                (false, _) => self.bind_args(&st, sig, args, windows)?,
            };
            binds.extend(workspace.clone());
            binds.extend(arrivals.clone());
            self.dispatch(&mut st, sig.symbol, &k.source, pass.entry, &pass.consts, &binds, words, pass.grid, pass.extra, &after)?;
        }
        drop(st);
        self.check(sig.symbol)
    }

    fn record(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<Recording> {
        {
            let mut st = self.state();
            if st.capture.is_some() {
                return Err(Error::invalid("record", "<recording>", "a recording is already open on this backend"));
            }
            // Work enqueued before the recording is not part of it.
            self.flush(&mut st);
            st.capture = Some(Capture::default());
        }
        let result = work();
        let cap = self.state().capture.take().unwrap_or_default();
        result?;
        self.check("record")?;
        let rec = self.finish(cap);
        self.check("record")?;
        Ok(Recording::new(BackendKind::Wgpu, self as *const Self as usize, rec.steps.len(), Box::new(rec)))
    }

    fn replay(&self, recording: &Recording) -> Result<()> {
        let rec = recording.state::<WgpuRecording>(self as *const Self as usize)?;
        let mut st = self.state();
        not_recording(&st, "replay")?;
        for &addr in &rec.allocs {
            st.allocs.resolve(addr, 1).map_err(|d| Error::invalid("replay", "recording", format!("a buffer it uses was freed: {d}")))?;
        }
        if rec.steps.is_empty() {
            return Ok(());
        }
        // Work enqueued before the replay runs before it.
        self.flush(&mut st);
        if let (Some(timing), Ok(timer)) = (st.timing.as_mut(), &self.timer) {
            self.submit_timed(&rec.steps, timer, timing);
            drop(st);
            return self.check("replay");
        }
        let ready = rec.next.lock().unwrap_or_else(|p| p.into_inner()).take();
        let commands = ready.unwrap_or_else(|| self.encode(&rec.steps));
        self.queue.submit([commands]);
        drop(st);
        // The steps' buffers stay alive with the recording, and the next
        // replay checks their allocations again before submitting this.
        *rec.next.lock().unwrap_or_else(|p| p.into_inner()) = Some(self.encode(&rec.steps));
        self.check("replay")
    }

    fn synchronize(&self) -> Result<()> {
        let mut st = self.state();
        not_recording(&st, "synchronize")?;
        self.flush(&mut st);
        drop(st);
        self.wait()?;
        self.check("synchronize")
    }

    fn time_ms(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        not_recording(&self.state(), "time_ms")?;
        self.synchronize()?;
        let t = Instant::now();
        work()?;
        self.synchronize()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    }

    fn live_bytes(&self) -> usize {
        self.state().allocs.live_bytes() as usize
    }

    /// This [`WgpuBackend`]: per-dispatch GPU time
    /// ([`WgpuBackend::time_dispatches`]) for the kernel bench.
    fn extension(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
