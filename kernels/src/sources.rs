//! GPU sources, embedded at build time. Kernel names are written once, in the
//! declarations; these tables map them to source text.
//!
//! - CUDA: one `.cu` per module (`src/<module>/<module>.cu`), with
//!   [`CUDA_PRELUDE`] prepended; each declared symbol is an `extern "C"` entry.
//! - WGSL: one `.wgsl` per kernel (`src/<module>/<symbol>.wgsl`), with
//!   [`WGSL_PRELUDE`] prepended.

/// A source file: path relative to the kernels crate (for error messages) and text.
#[derive(Clone, Copy, Debug)]
pub struct Source {
    /// Path, e.g. `src/norm/norm.cu`.
    pub path: &'static str,
    /// The file's text.
    pub text: &'static str,
}

macro_rules! sources {
    ($($key:literal => $path:literal),* $(,)?) => {
        &[$(($key, Source { path: concat!("src/", $path), text: include_str!(concat!($path)) })),*]
    };
}

/// Shared CUDA helpers (bf16/fp8 conversions, reductions), prepended to every module.
pub const CUDA_PRELUDE: Source = Source { path: "src/prelude.cuh", text: include_str!("prelude.cuh") };
/// Shared WGSL helpers (bf16 packing with round-to-nearest-even, fp8 decode), prepended to every kernel.
pub const WGSL_PRELUDE: Source = Source { path: "src/prelude.wgsl", text: include_str!("prelude.wgsl") };

/// CUDA sources by module.
pub static CUDA: &[(&str, Source)] = include!("cuda_sources.in");
/// WGSL sources by kernel symbol.
pub static WGSL: &[(&str, Source)] = include!("wgsl_sources.in");

/// The CUDA source of `module`.
pub fn cuda(module: &str) -> Option<Source> {
    CUDA.iter().find(|(m, _)| *m == module).map(|(_, s)| *s)
}

/// The WGSL source of `symbol`.
pub fn wgsl(symbol: &str) -> Option<Source> {
    WGSL.iter().find(|(m, _)| *m == symbol).map(|(_, s)| *s)
}
