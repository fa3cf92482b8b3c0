//! Backend selection: by name (`--backend`, `SWITCHYARD_BACKEND`), through
//! the driver registry of `switchyard_core`, among the drivers this build
//! links (Cargo features decide which).
use std::sync::Arc;
use switchyard_core::{registry, Backend, Result};
use switchyard_model::tp::group::{thread_ranks, RankSetup};

// Link the drivers the features select, so their factories register.
#[cfg(feature = "cpu")]
use switchyard_cpu_ref as _;
#[cfg(feature = "cuda")]
use switchyard_cuda as _;
#[cfg(feature = "wgpu")]
use switchyard_wgpu as _;

/// Environment variable naming the backend when `--backend` is not given.
pub const BACKEND_ENV: &str = "SWITCHYARD_BACKEND";

/// Opens the named backend. A backend left out of the build, or one whose
/// driver or device is missing, is [`switchyard_core::Error::Unavailable`]
/// with the reason; an unknown name is an invalid argument listing the known ones.
pub fn open(name: &str) -> Result<Arc<dyn Backend>> {
    registry::open_by_name(name)
}

/// `SWITCHYARD_BACKEND`, when set and not empty. A value that is not UTF-8
/// is an error: ignoring it would silently run on a backend the user did
/// not ask for.
pub fn from_env() -> anyhow::Result<Option<String>> {
    match std::env::var(BACKEND_ENV) {
        Ok(s) if s.is_empty() => Ok(None),
        Ok(s) => Ok(Some(s)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => {
            anyhow::bail!("{BACKEND_ENV}={}: not UTF-8, so not a backend name", switchyard_model::text::escape(&v.to_string_lossy()))
        }
    }
}

/// The backend named by `arg`, else by `SWITCHYARD_BACKEND`, else `default`.
pub fn choose(arg: Option<&str>, default: &str) -> anyhow::Result<String> {
    match arg {
        Some(a) => Ok(a.to_owned()),
        None => Ok(from_env()?.unwrap_or_else(|| default.to_owned())),
    }
}

/// The ranks of a `--tp N` group on backend `name`, in rank order: on
/// cuda, GPUs `0..N` (each opened here, so a missing device is reported
/// before any rank waits in NCCL's initialisation) joined by NCCL, one
/// thread per GPU; on cpu and wgpu, `N` instances of the backend joined by
/// the thread communicator (host-staged).
pub fn tp_ranks(name: &str, tp: usize) -> anyhow::Result<Vec<RankSetup>> {
    #[cfg(feature = "cuda")]
    if name == switchyard_core::BackendKind::Cuda.name() {
        use switchyard_core::comm::Communicator;
        use switchyard_cuda::nccl::{unique_id, NcclComm};
        let devices = (0..tp)
            .map(|r| Ok(Arc::new(switchyard_cuda::CudaBackend::open(r as i32)?) as Arc<dyn Backend>))
            .collect::<Result<Vec<_>>>()
            .map_err(|e| anyhow::anyhow!("--tp {tp} on cuda needs {tp} GPUs: {e}"))?;
        let id = unique_id()?;
        return Ok(devices
            .into_iter()
            .enumerate()
            .map(|(r, be)| {
                let setup: RankSetup = Box::new(move || {
                    let comm = NcclComm::init(be.clone(), &id, r, tp)?;
                    Ok((be, Arc::new(comm) as Arc<dyn Communicator>))
                });
                setup
            })
            .collect());
    }
    let backends = (0..tp).map(|_| open(name)).collect::<Result<Vec<_>>>()?;
    Ok(thread_ranks(backends)?)
}
