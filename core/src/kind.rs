//! Backend names, written once.
use crate::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// The backends Switchyard knows how to target. A kernel's implementations
/// are registered per kind, and [`crate::registry`] opens a backend by kind
/// from whatever driver crates are linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BackendKind {
    /// The scalar CPU reference (the oracle).
    Cpu,
    /// WGSL through wgpu (Vulkan, Metal, DX12).
    Wgpu,
    /// CUDA through the driver API and NVRTC.
    Cuda,
}

impl BackendKind {
    /// Every kind, in the order reports list them.
    pub const ALL: [BackendKind; 3] = [BackendKind::Cpu, BackendKind::Wgpu, BackendKind::Cuda];

    /// The name used by `--backend`, the environment and every report.
    pub const fn name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Wgpu => "wgpu",
            BackendKind::Cuda => "cuda",
        }
    }

    /// Comma-separated names of every kind, for messages.
    pub fn names() -> String {
        Self::ALL.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| Error::invalid("backend", "name", format!("unknown backend {s:?}; known backends: {}", Self::names())))
    }
}
