//! [`Communicator`]: collectives between the ranks of a tensor-parallel
//! group, each rank driving its own [`Backend`], and [`ThreadComm`], the
//! communicator of ranks that are threads of one process.
//!
//! # Ordering
//!
//! A collective is *ordered with its rank's backend*: it sees every result
//! of the work enqueued on that backend before the call, and work enqueued
//! after the call sees the collective's result. How a communicator keeps
//! that promise is its own business:
//!
//! - NCCL (`switchyard-cuda`, feature `nccl`) enqueues the collective on the
//!   backend's stream and returns at once; the stream orders it.
//! - [`ThreadComm`] is synchronous: it downloads the operand (a download
//!   waits for everything enqueued before it), exchanges the bytes with the
//!   other ranks on the host, uploads the result and returns only when the
//!   result is in place. On the CPU reference, whose launches run when they
//!   are enqueued, that is the whole story; it is equally correct (if slow)
//!   on any backend.
//!
//! # Determinism
//!
//! Every rank of a group gets the same bytes from a collective. A
//! [`ThreadComm`] all-reduce adds the ranks' contributions in rank order
//! (rank 0 first), whatever order the ranks arrive in, so a run's results
//! are bit-identical from one run to the next.
//!
//! # Calling convention
//!
//! Collectives are matched by call order: every rank must make the same
//! sequence of calls with the same sizes. A [`ThreadComm`] checks this and
//! reports a mismatch as [`Error::Communicator`] on every rank; NCCL cannot
//! check it. A rank whose [`ThreadComm`] is dropped leaves the group: the
//! other ranks' pending and later calls fail with an error naming it,
//! rather than waiting forever.
use crate::codec::{bf16_bits, bf16_value};
use crate::{Backend, DType, Error, Region, Result};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Collectives between the ranks of a group, each rank bound to one
/// backend (see the [module docs](self) for ordering and determinism).
/// Object safe; shared as `Arc<dyn Communicator>`.
pub trait Communicator: Send + Sync {
    /// This rank, in `0..world_size()`.
    fn rank(&self) -> usize;

    /// Ranks in the group.
    fn world_size(&self) -> usize;

    /// The implementation's name, for reports (`threads`, `nccl`).
    fn name(&self) -> &'static str;

    /// In place: `count` elements of `dtype` ([`DType::F32`] or
    /// [`DType::BF16`]) at the start of `buf` become the element-wise sum
    /// over all ranks. Every rank passes the same `dtype` and `count`.
    fn all_reduce_sum(&self, buf: Region, dtype: DType, count: usize) -> Result<()>;

    /// Rank `r`'s `send` bytes land at `recv[r · send.len() ..]` on every
    /// rank. Every rank passes the same `send.len()`; `recv` holds at least
    /// `world_size() · send.len()` bytes and does not overlap `send`.
    fn all_gather(&self, send: Region, recv: Region) -> Result<()>;

    /// Returns once every rank has called it (and, on a stream-ordered
    /// communicator, orders the streams accordingly).
    fn barrier(&self) -> Result<()>;

    /// Whether the collectives may be enqueued inside
    /// [`Backend::record`] and replayed with the recording (NCCL on a
    /// captured CUDA stream); `false` for a host-staged communicator, whose
    /// downloads a recording refuses.
    fn capturable(&self) -> bool {
        false
    }
}

/// Bytes per element of a reducible dtype, or an error naming the argument.
fn reduce_width(op: &str, rank: usize, dtype: DType) -> Result<usize> {
    match dtype {
        DType::F32 => Ok(4),
        DType::BF16 => Ok(2),
        other => Err(Error::Communicator { rank, op: op.into(), reason: format!("dtype {other:?}: only F32 and BF16 buffers are summed") }),
    }
}

/// The element-wise sum of `parts` (each `count` elements of `dtype`,
/// little-endian), added in slice order: f32 in f32; bf16 widened to f32,
/// summed in f32 and rounded to bf16 once (round to nearest even).
pub fn sum_in_order(parts: &[&[u8]], dtype: DType) -> Vec<u8> {
    let Some(first) = parts.first() else { return Vec::new() };
    match dtype {
        DType::BF16 => {
            let mut acc: Vec<f32> = first.chunks_exact(2).map(|c| bf16_value(u16::from_le_bytes([c[0], c[1]]))).collect();
            for p in &parts[1..] {
                for (a, c) in acc.iter_mut().zip(p.chunks_exact(2)) {
                    *a += bf16_value(u16::from_le_bytes([c[0], c[1]]));
                }
            }
            acc.iter().flat_map(|&a| bf16_bits(a).to_le_bytes()).collect()
        }
        _ => {
            let mut acc: Vec<f32> = first.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            for p in &parts[1..] {
                for (a, c) in acc.iter_mut().zip(p.chunks_exact(4)) {
                    *a += f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
            acc.iter().flat_map(|a| a.to_le_bytes()).collect()
        }
    }
}

/// What a rank asked for in one round; all ranks of a round must agree.
#[derive(Clone, Debug, PartialEq)]
enum Op {
    AllReduce { dtype: DType, count: usize },
    AllGather { bytes: usize },
    Barrier,
}

/// One rank's contribution to a round.
struct Post {
    op: Op,
    data: Vec<u8>,
}

/// The rendezvous state of a [`ThreadComm`] group.
struct Round {
    /// Rounds completed so far.
    generation: u64,
    /// This round's contributions, by rank.
    posted: Vec<Option<Post>>,
    arrived: usize,
    /// The last completed round's contributions, in rank order. Not
    /// overwritten before every rank has read it: the next round cannot
    /// complete without each of them.
    result: Option<Arc<Vec<Post>>>,
    /// The first rank that left the group.
    left: Option<usize>,
}

struct Shared {
    round: Mutex<Round>,
    wake: Condvar,
}

/// A communicator for ranks that are threads of one process, each with
/// its own backend. Collectives are host-staged and synchronous (see the
/// [module docs](self)): the operand is downloaded, exchanged through
/// shared memory, combined in rank order, and uploaded.
pub struct ThreadComm {
    rank: usize,
    world: usize,
    be: Arc<dyn Backend>,
    shared: Arc<Shared>,
}

impl ThreadComm {
    /// One communicator per backend: rank `r` drives `backends[r]`. Each is
    /// meant to move to its own thread. An empty list is an error.
    pub fn group(backends: Vec<Arc<dyn Backend>>) -> Result<Vec<ThreadComm>> {
        let world = backends.len();
        if world == 0 {
            return Err(Error::invalid("ThreadComm::group", "backends", "a group needs at least one rank"));
        }
        let shared = Arc::new(Shared {
            round: Mutex::new(Round { generation: 0, posted: (0..world).map(|_| None).collect(), arrived: 0, result: None, left: None }),
            wake: Condvar::new(),
        });
        Ok(backends.into_iter().enumerate().map(|(rank, be)| ThreadComm { rank, world, be, shared: shared.clone() }).collect())
    }

    /// The backend this rank's collectives read and write.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.be
    }

    fn error(&self, op: &str, reason: impl Into<String>) -> Error {
        Error::Communicator { rank: self.rank, op: op.into(), reason: reason.into() }
    }

    fn lock(&self, op: &str) -> Result<MutexGuard<'_, Round>> {
        self.shared.round.lock().map_err(|_| self.error(op, "the group's state was poisoned by a panic on another rank"))
    }

    /// Posts this rank's contribution and waits until every rank has
    /// posted; returns all contributions in rank order, after checking that
    /// every rank asked for the same operation.
    fn exchange(&self, name: &str, op: Op, data: Vec<u8>) -> Result<Arc<Vec<Post>>> {
        let mut st = self.lock(name)?;
        if let Some(r) = st.left {
            return Err(self.error(name, format!("rank {r} has left the group (it failed or was dropped)")));
        }
        let generation = st.generation;
        st.posted[self.rank] = Some(Post { op, data });
        st.arrived += 1;
        if st.arrived == self.world {
            let posts: Vec<Post> = st.posted.iter_mut().map(|p| p.take().expect("every rank posted")).collect();
            st.result = Some(Arc::new(posts));
            st.arrived = 0;
            st.generation += 1;
            self.shared.wake.notify_all();
        } else {
            while st.generation == generation {
                if let Some(r) = st.left {
                    return Err(self.error(name, format!("rank {r} left the group while this rank waited for it")));
                }
                st =
                    self.shared.wake.wait(st).map_err(|_| self.error(name, "the group's state was poisoned by a panic on another rank"))?;
            }
        }
        let posts = st.result.clone().expect("a completed round has a result");
        drop(st);
        if let Some((r, p)) = posts.iter().enumerate().find(|(_, p)| p.op != posts[0].op) {
            return Err(self.error(name, format!("ranks disagree: rank 0 called {:?}, rank {r} called {:?}", posts[0].op, p.op)));
        }
        Ok(posts)
    }

    fn download(&self, op: &str, r: Region) -> Result<Vec<u8>> {
        let mut v = vec![0u8; r.len()];
        self.be.download(r.addr(), &mut v).map_err(|e| self.error(op, format!("reading the operand: {e}")))?;
        Ok(v)
    }
}

impl Communicator for ThreadComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn name(&self) -> &'static str {
        "threads"
    }

    fn all_reduce_sum(&self, buf: Region, dtype: DType, count: usize) -> Result<()> {
        let op = "all_reduce_sum";
        let bytes = count
            .checked_mul(reduce_width(op, self.rank, dtype)?)
            .filter(|&b| b <= buf.len())
            .ok_or_else(|| self.error(op, format!("count {count} of {dtype:?} does not fit the {}-byte buffer", buf.len())))?;
        let region = buf.slice(0, bytes)?;
        let mine = self.download(op, region)?;
        let posts = self.exchange(op, Op::AllReduce { dtype, count }, mine)?;
        let parts: Vec<&[u8]> = posts.iter().map(|p| p.data.as_slice()).collect();
        let sum = sum_in_order(&parts, dtype);
        self.be.upload(region.addr(), &sum).map_err(|e| self.error(op, format!("writing the sum: {e}")))
    }

    fn all_gather(&self, send: Region, recv: Region) -> Result<()> {
        let op = "all_gather";
        let need = send.len().checked_mul(self.world).filter(|&n| n <= recv.len()).ok_or_else(|| {
            self.error(op, format!("recv holds {} bytes, fewer than {} ranks x {} bytes", recv.len(), self.world, send.len()))
        })?;
        let overlap = send.addr() < recv.addr() + need as u64 && recv.addr() < send.addr() + send.len() as u64;
        if overlap && !send.is_empty() {
            return Err(self.error(op, "send and recv overlap"));
        }
        let mine = self.download(op, send)?;
        let posts = self.exchange(op, Op::AllGather { bytes: send.len() }, mine)?;
        let all: Vec<u8> = posts.iter().flat_map(|p| p.data.iter().copied()).collect();
        if all.is_empty() {
            return Ok(());
        }
        self.be.upload(recv.addr(), &all).map_err(|e| self.error(op, format!("writing the gathered bytes: {e}")))
    }

    fn barrier(&self) -> Result<()> {
        // The download-free barrier still waits for this rank's enqueued
        // work, so that "every rank reached it" includes the device.
        self.be.synchronize()?;
        self.exchange("barrier", Op::Barrier, Vec::new()).map(|_| ())
    }
}

impl Drop for ThreadComm {
    fn drop(&mut self) {
        // Wake the ranks waiting for this one: they fail with its rank
        // rather than wait forever. A poisoned lock still holds the state.
        let mut st = self.shared.round.lock().unwrap_or_else(|p| p.into_inner());
        st.left.get_or_insert(self.rank);
        self.shared.wake.notify_all();
    }
}

impl std::fmt::Debug for ThreadComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ThreadComm(rank {} of {}, {})", self.rank, self.world, self.be.name())
    }
}
