//! Launch plans: how each backend runs a kernel, computed from the problem
//! (the launch's arguments) and the device's facts.
//!
//! A family module registers, beside each declaration, the plans of the
//! backends that implement it: `cuda_plan!` for a `.cu` entry point and
//! `wgsl_plan!` for a `.wgsl` file. Registering a plan is what makes a
//! backend implement a kernel (it also submits the
//! [`switchyard_core::registry::Implemented`] entry), so coverage is never
//! restated. A plan may pick any geometry, several passes, and workspace
//! bytes that the backend takes from its own arena and binds after the
//! declared arguments (a trailing pointer parameter on CUDA, the binding after
//! the last pointer on WGSL).
use crate::sources::Source;
use switchyard_core::{Arg, Error, KernelSig, Result};

/// What a plan may know about the device, filled in by the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceFacts {
    /// Streaming multiprocessors (CUDA) or 0 where unknown (wgpu).
    pub multiprocessors: u32,
    /// Largest shared (workgroup) memory per block in bytes, opt-in limit on CUDA.
    pub max_shared_bytes: u32,
    /// Threads per warp or subgroup (32 on CUDA). On wgpu: the adapter's
    /// minimum subgroup size when the device was opened with subgroup
    /// operations and the shaders are composed with the subgroup lanes
    /// (`prelude_subgroups.wgsl`), 1 otherwise (the fallback lanes).
    pub subgroup_size: u32,
    /// Largest grid dimension the plan may use for y and z (x on CUDA is 2^31 - 1).
    pub max_groups_per_dim: u32,
    /// Largest storage binding in bytes (`u64::MAX` on CUDA).
    pub max_binding_bytes: u64,
    /// CUDA: plans may pick entries of modules compiled for `sm_90a` (the
    /// wgmma / TMA GEMM in `gemm/gemm_sm90.cu`): the device has compute
    /// capability 9.0 and the backend has not turned them off (the CUDA
    /// backend's `WGMMA_ENV`). False on every other GPU and on wgpu.
    pub cuda_sm90a: bool,
    /// CUDA: plans may pick entries that launch as thread-block clusters
    /// (their source names them on a `// cluster-launch:` line): compute
    /// capability 9.0 or later, and the backend has not turned them off
    /// (the CUDA backend's `CLUSTER_ENV`). False on older GPUs and on wgpu.
    pub cuda_clusters: bool,
    /// wgpu: the shaders are composed with their cooperative-matrix code
    /// (`//! coopmat` lines, `sources::wgsl_expand_coopmat`) and plans may
    /// pick those entries: the device was opened with
    /// `EXPERIMENTAL_COOPERATIVE_MATRIX` and `SHADER_F16`, the adapter lists
    /// the 16×16×16 f16 × f16 → f32 subgroup configuration, its subgroups are
    /// exactly 32 wide, and the backend has not turned it off (`COOPMAT_ENV`).
    /// False on CUDA.
    pub wgsl_coopmat: bool,
}

/// An H200's facts as the CUDA backend reports them, for plan tests (which
/// turn off what they do not test with struct update syntax).
#[cfg(test)]
pub(crate) const H200: DeviceFacts = DeviceFacts {
    multiprocessors: 132,
    max_shared_bytes: 232_448,
    subgroup_size: 32,
    max_groups_per_dim: 65535,
    max_binding_bytes: u64::MAX,
    cuda_sm90a: true,
    cuda_clusters: true,
    wgsl_coopmat: false,
};

/// A launch's arguments as its plan reads them: by declared name.
#[derive(Clone, Copy)]
pub struct PlanArgs<'a> {
    /// The kernel being planned.
    pub kernel: &'static KernelSig,
    args: &'a [Arg],
}

impl<'a> PlanArgs<'a> {
    /// Wraps arguments already checked against `kernel`'s signature.
    pub fn new(kernel: &'static KernelSig, args: &'a [Arg]) -> Self {
        PlanArgs { kernel, args }
    }

    fn get(&self, name: &str) -> Result<Arg> {
        let i = self
            .kernel
            .arg_index(name)
            .ok_or_else(|| Error::invalid(self.kernel.symbol, name, "the plan reads an argument the signature does not declare"))?;
        self.args.get(i).copied().ok_or_else(|| Error::invalid(self.kernel.symbol, name, "argument missing"))
    }

    /// A non-negative integer scalar (i32 or u32) as u32.
    pub fn u32(&self, name: &str) -> Result<u32> {
        match self.get(name)? {
            Arg::I(v) if v >= 0 => Ok(v as u32),
            Arg::U(v) => Ok(v),
            other => Err(Error::invalid(self.kernel.symbol, name, format!("expected a non-negative integer, got {other:?}"))),
        }
    }

    /// A signed integer scalar.
    pub fn i32(&self, name: &str) -> Result<i32> {
        match self.get(name)? {
            Arg::I(v) => Ok(v),
            other => Err(Error::invalid(self.kernel.symbol, name, format!("expected an i32, got {other:?}"))),
        }
    }

    /// Whether the pointer argument `name` is null.
    pub fn is_null(&self, name: &str) -> Result<bool> {
        match self.get(name)? {
            Arg::P(p) => Ok(p == 0),
            other => Err(Error::invalid(self.kernel.symbol, name, format!("expected a pointer, got {other:?}"))),
        }
    }

    /// The device address of pointer argument `name` (0 = null).
    pub fn addr(&self, name: &str) -> Result<u64> {
        match self.get(name)? {
            Arg::P(p) => Ok(p),
            other => Err(Error::invalid(self.kernel.symbol, name, format!("expected a pointer, got {other:?}"))),
        }
    }
}

/// `ceil(a / b)` as a grid dimension, refusing grids past u32.
pub fn groups(kernel: &KernelSig, a: u64, b: u64) -> Result<u32> {
    u32::try_from(a.div_ceil(b.max(1)))
        .map_err(|_| Error::invalid(kernel.symbol, "<geometry>", format!("{a} items need more than 2^32 blocks")))
}

/// The integer argument `name` as a grid dimension, refusing 0: an empty
/// launch is a driver error on CUDA and nothing at all on WGSL, so a raw
/// launch with a zero size gets the same typed error from every plan.
pub fn positive(a: &PlanArgs, name: &str) -> Result<u32> {
    match a.u32(name)? {
        0 => Err(Error::invalid(a.kernel.symbol, name, format!("{name} must be > 0"))),
        v => Ok(v),
    }
}

/// Register slots of a WGSL row kernel whose 256 invocations each hold
/// `SLOTS` vectors of 8 bf16 (`layer_out_bf16.wgsl`, `gather_rows.wgsli`):
/// `ceil(len / 8 / 256)` in 1..=4, so a row of 5376 holds three, not four.
/// H200 (benchmarks/2026-12-02-wgpu-mem3-h200): layer_out 4096 x 5376
/// 0.0570 / 0.0568 / 0.0560 ms against 0.0590 / 0.0589 / 0.0594 with four;
/// embed_gather_bf16 over a 44 MB random table 0.0317 / 0.0312 against
/// 0.0333 / 0.0333; gather_rows_bf16's bench row 0.0307 against 0.0324.
pub(crate) fn row_slots(len: u32) -> u32 {
    (len / 8).div_ceil(256).clamp(1, 4)
}

/// A plan's measurement override (`SWITCHYARD_WGSL_*`, `SWITCHYARD_CUDA_*`):
/// `name`'s value when it parses as a `u32` that `allowed` accepts, else
/// `None`; read once a process into `cell`, the caller's own static.
pub(crate) fn env_override(cell: &'static std::sync::OnceLock<Option<u32>>, name: &str, allowed: impl Fn(u32) -> bool) -> Option<u32> {
    *cell.get_or_init(|| std::env::var(name).ok()?.trim().parse::<u32>().ok().filter(|&v| allowed(v)))
}

/// One CUDA kernel launch of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaPass {
    /// The `extern "C"` entry point in the kernel's module, or
    /// `"<module>::<entry>"` for an entry of another module of the same
    /// family (`"gemm_sm90::dense_gemm_wgmma_n256"`: a module compiled for
    /// an arch-specific target, see [`DeviceFacts::cuda_sm90a`]).
    pub entry: &'static str,
    /// Blocks.
    pub grid: [u32; 3],
    /// Threads per block.
    pub block: [u32; 3],
    /// Dynamic shared memory bytes (the backend raises the function's limit when needed).
    pub shared_bytes: u32,
}

/// How the CUDA backend runs one launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaPlan {
    /// Launches in order, on one stream.
    pub passes: Vec<CudaPass>,
    /// Workspace bytes from the backend's arena, passed to every pass as a
    /// trailing pointer parameter (0: none, no parameter).
    pub workspace_bytes: u64,
}

impl CudaPlan {
    /// One launch of the kernel's own entry point, no shared memory or workspace.
    pub fn single(kernel: &'static KernelSig, grid: [u32; 3], block: [u32; 3]) -> Self {
        CudaPlan { passes: vec![CudaPass { entry: kernel.symbol, grid, block, shared_bytes: 0 }], workspace_bytes: 0 }
    }
}

/// One WGSL dispatch of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgslPass {
    /// The `@compute` entry point in the kernel's `.wgsl`.
    pub entry: &'static str,
    /// Logical workgroup grid; the backend folds x past the per-dimension
    /// limit and the shader undoes it with `group_x`.
    pub grid: [u32; 3],
    /// Pipeline-overridable constants (part of the pipeline cache key).
    pub consts: Vec<(&'static str, u32)>,
    /// `x0..x3` of the kernel's Params block.
    pub extra: [u32; 4],
}

/// How the wgpu backend runs one launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgslPlan {
    /// Dispatches in order.
    pub passes: Vec<WgslPass>,
    /// Workspace bytes from the backend's arena, bound after the last
    /// pointer argument (0: no binding).
    pub workspace_bytes: u64,
    /// Arrival counters the launch uses (at most [`WGSL_ARRIVAL_COUNTERS`];
    /// 0: no binding): the backend's one buffer of u32 counters, bound after
    /// the workspace. They are zero when a launch starts, and every launch
    /// that takes them must leave them zero (the last workgroup to arrive
    /// puts its counter back), so a single-pass reduction needs no clearing
    /// dispatch before it.
    pub arrivals: u32,
}

impl WgslPlan {
    /// One dispatch of the kernel's own entry point.
    pub fn single(kernel: &'static KernelSig, grid: [u32; 3]) -> Self {
        WgslPlan { passes: vec![WgslPass { entry: kernel.symbol, grid, consts: vec![], extra: [0; 4] }], workspace_bytes: 0, arrivals: 0 }
    }
}

/// Arrival counters the wgpu backend keeps for [`WgslPlan::arrivals`].
pub const WGSL_ARRIVAL_COUNTERS: u32 = 1024;

/// Bytes a window may grow by when the backend aligns it: its start moves
/// down to the adapter's storage offset alignment (at most 256 bytes under
/// WebGPU's limits) and its end up to a 16-byte vector.
pub const WINDOW_SLACK: u64 = 512;

/// A byte range of one pointer argument, `[offset, offset + bytes)` from the
/// argument's address, that a pass of a [`WgslSplitPlan`] binds in place of
/// everything from the argument to the end of its allocation. The argument's
/// Params word then holds the word offset of `offset` within that binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgslWindow {
    /// The pointer argument, by declared name.
    pub arg: &'static str,
    /// First byte, relative to the argument's address (a multiple of 4).
    pub offset: u64,
    /// Bytes the pass touches from there.
    pub bytes: u64,
}

/// One dispatch of a [`WgslSplitPlan`] and the windows it binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgslSplitPass {
    /// The dispatch.
    pub pass: WgslPass,
    /// Arguments bound through a window in this pass; the others are bound
    /// as in a [`WgslPlan`]. An argument named again (a pass reading two
    /// windows of one table) binds that window after the declared
    /// arguments, in order, and its word offset follows the Params tail.
    pub windows: Vec<WgslWindow>,
}

/// How the wgpu backend runs a launch whose table is larger than one storage
/// binding: passes that each bind a window of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgslSplitPlan {
    /// Dispatches in order.
    pub passes: Vec<WgslSplitPass>,
    /// As [`WgslPlan::workspace_bytes`].
    pub workspace_bytes: u64,
}

/// Row ranges `(first, count)` that cut a table of `rows` rows of
/// `row_bytes` each into windows of at most `limit` bytes once aligned
/// ([`WINDOW_SLACK`]), or `None` when the whole table fits one such binding
/// (the kernel's plain plan runs). Refuses a row that alone does not fit.
pub fn row_windows(kernel: &KernelSig, arg: &str, rows: u64, row_bytes: u64, limit: u64) -> Result<Option<Vec<(u64, u64)>>> {
    let room = limit.saturating_sub(WINDOW_SLACK);
    if rows.saturating_mul(row_bytes) <= room {
        return Ok(None);
    }
    let per = room / row_bytes.max(1);
    if per == 0 {
        return Err(Error::invalid(
            kernel.symbol,
            arg,
            format!("one row of {row_bytes} bytes does not fit a storage binding of {limit} bytes"),
        ));
    }
    Ok(Some((0..rows.div_ceil(per)).map(|k| (k * per, per.min(rows - k * per))).collect()))
}

/// The module and entry point a [`CudaPass`] names: `entry` in `module`,
/// or the module its `"<module>::<entry>"` form names.
pub fn cuda_entry(module: &'static str, entry: &'static str) -> (&'static str, &'static str) {
    entry.split_once("::").unwrap_or((module, entry))
}

/// A 2-D TMA tensor map over a row-major bf16 matrix (`rows × cols`, rows
/// `cols · 2` bytes apart) at a pointer argument of the launch, read in
/// boxes of `box_rows × box_cols` with the 128-byte swizzle; reads past the
/// extents return zeros. The CUDA backend encodes it per launch
/// (`cuTensorMapEncodeTiled`) and passes it by value (`const
/// __grid_constant__` 128-byte parameter) after the declared arguments and
/// the workspace pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMap2d {
    /// The pointer argument holding the matrix, by declared name.
    pub arg: &'static str,
    /// Rows.
    pub rows: u64,
    /// Columns (elements per row, the contiguous dimension).
    pub cols: u64,
    /// Rows per box (at most 256).
    pub box_rows: u32,
    /// Columns per box (64: one 128-byte swizzle span of bf16).
    pub box_cols: u32,
}

/// The tensor maps a CUDA entry point takes after its declared arguments,
/// from the launch's arguments: an entry registered here gets them on every
/// pass that names it.
pub struct CudaTensorMaps {
    /// The module holding the entry (its `.cu` file stem).
    pub module: &'static str,
    /// The `extern "C"` entry point.
    pub entry: &'static str,
    /// The maps, in parameter order.
    pub maps: fn(&PlanArgs) -> Result<Vec<TensorMap2d>>,
}
inventory::collect!(CudaTensorMaps);

/// The tensor maps entry `entry` of `module` takes, if it takes any.
pub fn cuda_tensor_maps(module: &str, entry: &str) -> Option<&'static CudaTensorMaps> {
    inventory::iter::<CudaTensorMaps>.into_iter().find(|t| t.module == module && t.entry == entry)
}

/// A CUDA plan function.
pub type CudaPlanFn = fn(&PlanArgs, &DeviceFacts) -> Result<CudaPlan>;
/// A WGSL plan function.
pub type WgslPlanFn = fn(&PlanArgs, &DeviceFacts) -> Result<WgslPlan>;
/// A WGSL split-plan function: `Some` when a table the launch reads is larger
/// than one storage binding ([`DeviceFacts::max_binding_bytes`]), `None`
/// when the kernel's plain plan applies.
pub type WgslSplitFn = fn(&PlanArgs, &DeviceFacts) -> Result<Option<WgslSplitPlan>>;

/// A kernel's CUDA implementation: an entry point in `src/<family>/<module>.cu`
/// (module = the declaration's module) and its plan.
pub struct CudaKernel {
    /// The declaration.
    pub kernel: &'static KernelSig,
    /// The plan.
    pub plan: CudaPlanFn,
}
inventory::collect!(CudaKernel);

/// A kernel's WGSL implementation: its source file and its plan.
pub struct WgslKernel {
    /// The declaration.
    pub kernel: &'static KernelSig,
    /// The `.wgsl` file (one program; several kernels may share one).
    pub source: Source,
    /// The plan.
    pub plan: WgslPlanFn,
    /// The plan for tables past one binding, for kernels that read one
    /// (embedding gathers, the output head); consulted before `plan`.
    pub split: Option<WgslSplitFn>,
}
inventory::collect!(WgslKernel);

fn key(sig: &KernelSig) -> usize {
    sig as *const KernelSig as usize
}

/// The CUDA implementation of `kernel`, if any.
pub fn cuda_kernel(kernel: &KernelSig) -> Option<&'static CudaKernel> {
    use std::collections::HashMap;
    use std::sync::OnceLock;
    static MAP: OnceLock<HashMap<usize, &'static CudaKernel>> = OnceLock::new();
    MAP.get_or_init(|| inventory::iter::<CudaKernel>.into_iter().map(|k| (key(k.kernel), k)).collect()).get(&key(kernel)).copied()
}

/// The WGSL implementation of `kernel`, if any.
pub fn wgsl_kernel(kernel: &KernelSig) -> Option<&'static WgslKernel> {
    use std::collections::HashMap;
    use std::sync::OnceLock;
    static MAP: OnceLock<HashMap<usize, &'static WgslKernel>> = OnceLock::new();
    MAP.get_or_init(|| inventory::iter::<WgslKernel>.into_iter().map(|k| (key(k.kernel), k)).collect()).get(&key(kernel)).copied()
}

/// Registers the CUDA implementation of a declared kernel: its entry points
/// live in the module's `.cu`, and `$plan` lays out the launch.
macro_rules! cuda_plan {
    ($sig:path => $plan:path) => {
        inventory::submit! { $crate::plan::CudaKernel { kernel: &$sig, plan: $plan } }
        inventory::submit! {
            switchyard_core::registry::Implemented { backend: switchyard_core::BackendKind::Cuda, kernel: &$sig }
        }
    };
}

/// Registers the WGSL implementation of a declared kernel: the `.wgsl` file
/// (path relative to `kernels/src`) and `$plan`, and for a kernel whose
/// table may exceed one storage binding its split plan (`split => $split`).
macro_rules! wgsl_plan {
    ($sig:path, $file:literal => $plan:path) => {
        wgsl_plan!(@register $sig, $file, $plan, None);
    };
    ($sig:path, $file:literal => $plan:path, split => $split:path) => {
        wgsl_plan!(@register $sig, $file, $plan, Some($split));
    };
    (@register $sig:path, $file:literal, $plan:path, $split:expr) => {
        inventory::submit! {
            $crate::plan::WgslKernel {
                kernel: &$sig,
                source: $crate::sources::Source {
                    path: concat!("src/", $file),
                    text: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/", $file)),
                },
                plan: $plan,
                split: $split,
            }
        }
        inventory::submit! {
            switchyard_core::registry::Implemented { backend: switchyard_core::BackendKind::Wgpu, kernel: &$sig }
        }
    };
}
