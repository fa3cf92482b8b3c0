//! Backend selection: by name (`--backend`, `SWITCHYARD_BACKEND`), limited to
//! the drivers compiled in through Cargo features.
use std::sync::Arc;
use switchyard_core::{Backend, Error, Result};

/// Environment variable naming the backend when `--backend` is not given.
pub const BACKEND_ENV: &str = "SWITCHYARD_BACKEND";

/// Every backend name this project knows, compiled in or not.
pub const ALL: [&str; 3] = ["cpu", "wgpu", "cuda"];

/// Opens the named backend. A backend left out of the build, or one whose
/// driver or device is missing, is [`Error::Unavailable`] with the reason.
pub fn open(name: &str) -> Result<Arc<dyn Backend>> {
    match name {
        "cpu" => Ok(switchyard_cpu_ref::cpu_backend()),
        #[cfg(feature = "wgpu")]
        "wgpu" => switchyard_wgpu::wgpu_backend(),
        #[cfg(feature = "cuda")]
        "cuda" => switchyard_cuda::cuda_backend(),
        #[cfg(not(feature = "wgpu"))]
        "wgpu" => Err(compiled_out(name)),
        #[cfg(not(feature = "cuda"))]
        "cuda" => Err(compiled_out(name)),
        other => Err(Error::invalid("--backend", "backend", format!("unknown backend `{other}` (expected one of {})", ALL.join(", ")))),
    }
}

/// The backend named by `arg`, else by `SWITCHYARD_BACKEND`, else `default`.
pub fn choose(arg: Option<&str>, default: &str) -> String {
    arg.map(str::to_owned).or_else(|| std::env::var(BACKEND_ENV).ok().filter(|s| !s.is_empty())).unwrap_or_else(|| default.to_owned())
}

#[allow(dead_code)] // unused when every backend feature is on
fn compiled_out(name: &str) -> Error {
    Error::Unavailable { backend: name.into(), reason: format!("this binary was built without the `{name}` Cargo feature") }
}
