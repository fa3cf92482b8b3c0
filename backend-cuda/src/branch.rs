//! [`switchyard_core::Backend::enqueue_concurrent`] on CUDA: the second piece
//! of work goes to a side stream forked from the backend's stream and joined
//! back to it, in a stream capture as well (the fork and the join become
//! graph edges).
use crate::raw::{self, CUstream, Event, Shared};

use std::ffi::c_int;
use switchyard_core::Result;

/// Environment variable that picks the priorities of `enqueue_concurrent`'s
/// pieces: `0` launches both at the default priority, `second` gives the
/// second piece's launches the context's greatest stream priority and the
/// first's its least, and anything else (or nothing) the other way round,
/// so the block scheduler serves the first piece when both have blocks
/// waiting.
pub const BRANCH_PRIORITY_ENV: &str = "SWITCHYARD_CUDA_BRANCH_PRIORITY";

/// Which piece of `enqueue_concurrent` launches at the greater priority.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Precedence {
    /// Both at the default priority.
    None,
    /// The first piece.
    #[default]
    First,
    /// The second piece.
    Second,
}

impl Precedence {
    /// From [`BRANCH_PRIORITY_ENV`].
    pub(crate) fn from_env() -> Precedence {
        match std::env::var(BRANCH_PRIORITY_ENV).as_deref().map(str::trim) {
            Ok("0") => Precedence::None,
            Ok("second") => Precedence::Second,
            _ => Precedence::First,
        }
    }
}

/// The side stream and the two events that fork it from and join it to the
/// backend's stream; made on the first `enqueue_concurrent`.
pub(crate) struct SideStream {
    pub(crate) stream: Shared<CUstream>,
    fork: Event,
    join: Event,
    /// `(least, greatest)` stream priority of the context.
    priorities: (c_int, c_int),
}

impl SideStream {
    fn new() -> Result<SideStream> {
        let priorities = raw::stream_priority_range()?;
        let stream = raw::stream_create_with_priority(priorities.0)?;
        let events = Event::new().and_then(|f| Ok((f, Event::new()?)));
        match events {
            Ok((fork, join)) => Ok(SideStream { stream: Shared(stream), fork, join, priorities }),
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
    /// Calls of `enqueue_concurrent` in progress (nested ones run in order).
    pub(crate) open: usize,
    /// Launches go to the side stream (the second piece is enqueuing).
    pub(crate) on_side: bool,
    /// Which piece's launches get the greater priority ([`BRANCH_PRIORITY_ENV`]).
    pub(crate) precedence: Precedence,
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

    /// The priority a launch asks for now: inside a branch, the greatest
    /// for the piece that takes precedence and the least for the other.
    pub(crate) fn priority(&self) -> Option<c_int> {
        let (least, greatest) = self.side.as_ref().filter(|_| self.open > 0)?.priorities;
        match (self.precedence, self.on_side) {
            (Precedence::None, _) => None,
            (Precedence::First, false) | (Precedence::Second, true) => Some(greatest),
            _ => Some(least),
        }
    }
}
