//! [`Recording`]: a sequence of launches and copies captured once and
//! replayed many times (a CUDA graph, a pre-resolved wgpu command list, the
//! CPU reference's stored list).
use crate::{BackendKind, Error, Result};
use std::any::Any;

/// A recorded launch sequence, made by [`crate::Backend::record`] and run by
/// [`crate::Backend::replay`] on the backend that made it.
///
/// The contract: addresses and scalar arguments are fixed at record time;
/// whatever changes between replays (positions, context lengths, token ids)
/// lives in device memory that the caller updates before each replay. A
/// recording whose buffers were freed is refused at replay with
/// [`Error::InvalidArgument`] naming the freed address.
pub struct Recording {
    backend: BackendKind,
    owner: usize,
    steps: usize,
    inner: Box<dyn Any + Send + Sync>,
}

impl Recording {
    /// Wraps a backend's recorded state. `owner` identifies the backend
    /// instance (its address), so a recording is not replayed on another one.
    pub fn new(backend: BackendKind, owner: usize, steps: usize, inner: Box<dyn Any + Send + Sync>) -> Self {
        Recording { backend, owner, steps, inner }
    }

    /// Launches and copies recorded.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// The backend kind that made this recording.
    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    /// The backend's own state, checked to belong to the instance `owner`.
    pub fn state<T: Any>(&self, owner: usize) -> Result<&T> {
        if self.owner != owner {
            return Err(Error::invalid("replay", "recording", format!("recorded on another {} backend instance", self.backend)));
        }
        self.inner.downcast_ref::<T>().ok_or_else(|| Error::invalid("replay", "recording", "not a recording of this backend"))
    }
}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording").field("backend", &self.backend).field("steps", &self.steps).finish()
    }
}
