use thiserror::Error;

/// Result alias used throughout Switchyard's library crates.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a backend or launcher can report. Variants are distinct so that a
/// caller can tell "this backend cannot run here" from "you passed bad input".
#[derive(Debug, Error, Clone, PartialEq)]
pub enum Error {
    /// The backend cannot run on this machine (no driver, no adapter, no GPU).
    #[error("backend {backend} unavailable: {reason}")]
    Unavailable {
        /// Backend name (`cpu`, `wgpu`, `cuda`).
        backend: String,
        /// Why it is unavailable, in words a user can act on.
        reason: String,
    },
    /// No kernel with this module and symbol is declared, or the backend does
    /// not implement it.
    #[error("unknown kernel {module}::{symbol}{}", on_backend(.backend))]
    UnknownKernel {
        /// Kernel module (family), e.g. `norm`.
        module: String,
        /// Kernel symbol, e.g. `rmsnorm_bf16`.
        symbol: String,
        /// The backend that lacks it, if the kernel is declared but not implemented.
        backend: Option<String>,
    },
    /// An argument breaks the kernel's declared signature or shape contract.
    #[error("kernel {kernel}: invalid argument `{arg}`: {reason}")]
    InvalidArgument {
        /// Kernel symbol (or operation, e.g. `upload`).
        kernel: String,
        /// Argument name as declared in the signature.
        arg: String,
        /// Which constraint failed.
        reason: String,
    },
    /// A device address or range is not inside a live allocation.
    #[error("kernel {kernel}: argument `{arg}` out of bounds: {detail}")]
    OutOfBounds {
        /// Kernel symbol (or operation, e.g. `download`).
        kernel: String,
        /// Argument name as declared in the signature.
        arg: String,
        /// Address, range and allocation involved.
        detail: String,
    },
    /// The request is well-formed but this backend or build cannot do it.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The driver (CUDA, wgpu, ...) reported an error.
    #[error("{backend} driver error: {message}")]
    Driver {
        /// Backend name.
        backend: String,
        /// The driver's own error name and message.
        message: String,
    },
    /// A collective between the ranks of a tensor-parallel group failed: a
    /// rank left the group, the ranks disagreed on the call, an operand did
    /// not fit, or the communication library (NCCL) reported an error or
    /// could not be loaded.
    #[error("communicator rank {rank}: {op}: {reason}")]
    Communicator {
        /// The rank that reports it.
        rank: usize,
        /// The collective (`all_reduce_sum`, `all_gather`, `barrier`, `init`).
        op: String,
        /// What went wrong, in words a user can act on.
        reason: String,
    },
}

fn on_backend(b: &Option<String>) -> String {
    match b {
        Some(b) => format!(" on backend {b}"),
        None => String::new(),
    }
}

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(kernel: &str, arg: &str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument { kernel: kernel.into(), arg: arg.into(), reason: reason.into() }
    }

    /// Shorthand for [`Error::OutOfBounds`].
    pub fn oob(kernel: &str, arg: &str, detail: impl Into<String>) -> Self {
        Error::OutOfBounds { kernel: kernel.into(), arg: arg.into(), detail: detail.into() }
    }

    /// Shorthand for [`Error::Driver`].
    pub fn driver(backend: &str, message: impl Into<String>) -> Self {
        Error::Driver { backend: backend.into(), message: message.into() }
    }
}
