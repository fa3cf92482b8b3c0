//! [`switchyard_core::Backend::enqueue_concurrent`] on CUDA: the second piece
//! of work goes to a side stream forked from the backend's stream and joined
//! back to it, in a stream capture as well (the fork and the join become
//! graph edges).
use crate::raw::{self, CUstream, Event, Shared};
use switchyard_core::Result;

/// The side stream and the two events that fork it from and join it to the
/// backend's stream; made on the first `enqueue_concurrent`.
pub(crate) struct SideStream {
    stream: Shared<CUstream>,
    fork: Event,
    join: Event,
}

impl SideStream {
    fn new() -> Result<SideStream> {
        let stream = raw::stream_create()?;
        let events = Event::new().and_then(|f| Ok((f, Event::new()?)));
        match events {
            Ok((fork, join)) => Ok(SideStream { stream: Shared(stream), fork, join }),
            Err(e) => {
                let _ = raw::stream_destroy(stream);
                Err(e)
            }
        }
    }

    /// Makes the side stream wait for everything enqueued on `main` so far.
    pub(crate) fn fork_from(&self, main: CUstream) -> Result<()> {
        self.fork.record(main)?;
        self.fork.wait_on(self.stream.0)
    }

    /// Makes `main` wait for everything enqueued on the side stream so far.
    pub(crate) fn join_into(&self, main: CUstream) -> Result<()> {
        self.join.record(self.stream.0)?;
        self.join.wait_on(main)
    }

    /// Waits for the side stream's work and destroys it and its events
    /// (backend drop, while the context is still alive).
    pub(crate) fn destroy(self) {
        let _ = raw::stream_sync(self.stream.0, &"drop (side stream)");
        let _ = raw::stream_destroy(self.stream.0);
        drop((self.fork, self.join));
    }
}

/// Where `enqueue_concurrent` stands.
#[derive(Default)]
pub(crate) struct Branches {
    pub(crate) side: Option<SideStream>,
    /// A call of `enqueue_concurrent` is in progress (a nested one runs its
    /// pieces in order).
    pub(crate) open: bool,
    /// Launches go to the side stream (the second piece is enqueuing).
    pub(crate) on_side: bool,
}

impl Branches {
    /// The side stream, made on first use.
    pub(crate) fn side(&mut self) -> Result<&SideStream> {
        if self.side.is_none() {
            self.side = Some(SideStream::new()?);
        }
        Ok(self.side.as_ref().expect("made above"))
    }

    /// The stream launches go to now.
    pub(crate) fn stream(&self, main: CUstream) -> CUstream {
        match (&self.side, self.on_side) {
            (Some(side), true) => side.stream.0,
            _ => main,
        }
    }
}
