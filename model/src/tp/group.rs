//! A tensor-parallel group whose ranks are threads of this process: one
//! thread per rank, each owning its backend, its communicator, its shard
//! ([`Model::shard`]) and its [`Session`]. The caller's thread drives them
//! in lockstep ([`TpGroup`] is a [`crate::generate::Engine`]): each pass is
//! sent to every rank, every rank runs it (meeting the others in the
//! collectives) and returns the same output, which the group checks.
//!
//! A rank whose pass fails stops: its communicator is dropped, which
//! releases the ranks waiting for it in a collective (a [`ThreadComm`]
//! returns an error naming it), and the group reports the first rank's own
//! error rather than the others' "rank r left".
use crate::checkpoint::Checkpoint;
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::generate::{Engine, Passes};
use crate::graph::{Model, RowOut, Session};
use crate::quant::Quant;
use crate::tp::TpPlan;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use switchyard_core::comm::{Communicator, ThreadComm};
use switchyard_core::Backend;

/// How one rank starts, run on the rank's own thread: opens its backend and
/// its communicator (NCCL's initialisation waits for every rank, so the
/// ranks' setups run concurrently).
pub type RankSetup = Box<dyn FnOnce() -> switchyard_core::Result<(Arc<dyn Backend>, Arc<dyn Communicator>)> + Send>;

/// What one rank of a started group reports.
#[derive(Clone, Debug)]
pub struct RankInfo {
    /// Backend name.
    pub backend: String,
    /// Device name.
    pub device: String,
    /// The communicator's name (`threads`, `nccl`).
    pub comm: String,
    /// Bytes of weights the rank placed on its device.
    pub device_bytes: usize,
}

/// A pass, sent to every rank.
#[derive(Clone)]
enum Cmd {
    Open { num_seqs: usize, max_tokens: usize, max_rows: usize },
    Prefill { seq: usize, tokens: Vec<u32>, start: usize, want_logits: bool },
    Decode { tokens: Vec<u32>, positions: Vec<usize>, want_logits: bool },
}

type Job = (Cmd, Sender<Result<Vec<RowOut>>>);

struct Worker {
    jobs: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

/// Ranks running as threads, driven together. See the [module docs](self).
pub struct TpGroup {
    cfg: ModelConfig,
    workers: Vec<Worker>,
    /// Per rank, in rank order.
    pub ranks: Vec<RankInfo>,
}

/// One [`RankSetup`] per backend, over a [`ThreadComm`] group: rank `r`
/// drives `backends[r]` (the CPU reference's tensor parallelism, one
/// backend instance per rank).
pub fn thread_ranks(backends: Vec<Arc<dyn Backend>>) -> Result<Vec<RankSetup>> {
    Ok(ThreadComm::group(backends)?
        .into_iter()
        .map(|c| {
            let setup: RankSetup = Box::new(move || {
                let be = c.backend().clone();
                Ok((be, Arc::new(c) as Arc<dyn Communicator>))
            });
            setup
        })
        .collect())
}

/// The error to report from the ranks' results: the first that is not a
/// communicator's "a peer left" (that rank's own failure comes first), else
/// the first.
fn first_cause(errors: Vec<(usize, Error)>) -> Error {
    let is_echo =
        |e: &Error| matches!(e, Error::Kernel(switchyard_core::Error::Communicator { reason, .. }) if reason.contains("left the group"));
    let pos = errors.iter().position(|(_, e)| !is_echo(e)).unwrap_or(0);
    errors.into_iter().nth(pos).map(|(_, e)| e).expect("at least one error")
}

impl TpGroup {
    /// Loads checkpoint `ck` over the ranks `ranks` (one each, in rank
    /// order): the split is checked first ([`TpPlan::new`], an error naming
    /// `--tp` and the config value that does not divide), then every rank
    /// loads its shard on its thread ([`Model::load_shard`]).
    pub fn load(ck: &Checkpoint, quant: Quant, ranks: Vec<RankSetup>) -> Result<Self> {
        let cfg = ModelConfig::from_json(&ck.config_json)?;
        TpPlan::new(&cfg, 0, ranks.len())?;
        Self::start(ranks, &|be, comm| Model::load_shard(ck, be, quant, comm))
    }

    /// Starts one thread per rank: each runs its setup, then `build` makes
    /// its shard; then the ranks wait for passes.
    pub fn start(ranks: Vec<RankSetup>, build: &(dyn Fn(Arc<dyn Backend>, Arc<dyn Communicator>) -> Result<Model> + Sync)) -> Result<Self> {
        if ranks.is_empty() {
            return Err(Error::Request("--tp 0: a tensor-parallel group needs at least one rank".into()));
        }
        let built: Vec<Result<Model>> = std::thread::scope(|s| {
            let handles: Vec<_> = ranks
                .into_iter()
                .map(|setup| {
                    s.spawn(move || {
                        let (be, comm) = setup()?;
                        build(be, comm)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(Error::Request("a rank panicked while loading".into())))).collect()
        });
        let mut models = Vec::with_capacity(built.len());
        let mut errors = Vec::new();
        for (r, m) in built.into_iter().enumerate() {
            match m {
                Ok(m) => models.push(m),
                Err(e) => errors.push((r, e)),
            }
        }
        if !errors.is_empty() {
            return Err(first_cause(errors));
        }
        let cfg = models[0].cfg.clone();
        let ranks = models
            .iter()
            .map(|m| RankInfo {
                backend: m.backend().name().to_string(),
                device: m.backend().info().device,
                comm: m.tp.as_ref().map_or("none", |t| t.comm.name()).to_string(),
                device_bytes: m.weights.device_bytes,
            })
            .collect();
        let workers = models
            .into_iter()
            .enumerate()
            .map(|(r, model)| {
                let (tx, rx) = channel::<Job>();
                let thread = std::thread::Builder::new()
                    .name(format!("tp-rank-{r}"))
                    .spawn(move || serve(model, rx))
                    .map_err(|e| Error::Request(format!("cannot start the thread of rank {r}: {e}")))?;
                Ok(Worker { jobs: Some(tx), thread: Some(thread) })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(TpGroup { cfg, workers, ranks })
    }

    /// Ranks in the group.
    pub fn world(&self) -> usize {
        self.workers.len()
    }

    /// Sends `cmd` to every rank and returns rank 0's output, after checking
    /// that every rank chose the same tokens.
    fn run(&self, cmd: Cmd) -> Result<Vec<RowOut>> {
        let stopped = |r: usize| Error::Request(format!("tensor-parallel rank {r} has stopped after an earlier error"));
        let mut replies = Vec::with_capacity(self.workers.len());
        for w in &self.workers {
            let (tx, rx) = channel();
            let sent = w.jobs.as_ref().is_some_and(|j| j.send((cmd.clone(), tx)).is_ok());
            // A stopped rank's communicator is gone: the others fail in
            // their first collective with an error naming it.
            replies.push(if sent { Some(rx) } else { None });
        }
        let mut outs = Vec::with_capacity(replies.len());
        let mut errors = Vec::new();
        for (r, rx) in replies.into_iter().enumerate() {
            match rx.and_then(|rx: Receiver<_>| rx.recv().ok()) {
                Some(Ok(o)) => outs.push(o),
                Some(Err(e)) => errors.push((r, e)),
                None => errors.push((r, stopped(r))),
            }
        }
        if !errors.is_empty() {
            return Err(first_cause(errors));
        }
        let first = outs.swap_remove(0);
        for (r, o) in outs.iter().enumerate() {
            let (a, b): (Vec<u32>, Vec<u32>) = (first.iter().map(|x| x.token).collect(), o.iter().map(|x| x.token).collect());
            if a != b {
                return Err(Error::Numeric(format!("tensor-parallel ranks disagree: rank 0 chose {a:?}, rank {} chose {b:?}", r + 1)));
            }
        }
        Ok(first)
    }
}

impl Drop for TpGroup {
    fn drop(&mut self) {
        for w in &mut self.workers {
            w.jobs.take();
        }
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// A rank's thread: runs passes on its shard until the group is dropped or
/// a pass fails (then it stops, dropping its communicator).
fn serve(model: Model, jobs: Receiver<Job>) {
    let mut session: Option<Session<'_>> = None;
    while let Ok((cmd, reply)) = jobs.recv() {
        let no_session = || Error::Request("a pass before the group opened a session".into());
        let out = match cmd {
            Cmd::Open { num_seqs, max_tokens, max_rows } => {
                session = None;
                Session::new(&model, num_seqs, max_tokens, max_rows).map(|s| {
                    session = Some(s);
                    Vec::new()
                })
            }
            Cmd::Prefill { seq, tokens, start, want_logits } => match session.as_mut() {
                Some(s) => s.prefill(seq, &tokens, start, want_logits).map(|r| vec![r]),
                None => Err(no_session()),
            },
            Cmd::Decode { tokens, positions, want_logits } => match session.as_mut() {
                Some(s) => s.decode(&tokens, &positions, want_logits),
                None => Err(no_session()),
            },
        };
        let failed = out.is_err();
        let _ = reply.send(out);
        if failed {
            break;
        }
    }
}

/// The group's passes, for generation ([`Engine::open`]).
struct TpSession<'g> {
    group: &'g TpGroup,
}

impl Passes for TpSession<'_> {
    fn prefill(&mut self, seq: usize, tokens: &[u32], start: usize, want_logits: bool) -> Result<RowOut> {
        let mut rows = self.group.run(Cmd::Prefill { seq, tokens: tokens.to_vec(), start, want_logits })?;
        rows.pop().ok_or_else(|| Error::Request("a prefill returned no row".into()))
    }

    fn decode(&mut self, tokens: &[u32], positions: &[usize], want_logits: bool) -> Result<Vec<RowOut>> {
        self.group.run(Cmd::Decode { tokens: tokens.to_vec(), positions: positions.to_vec(), want_logits })
    }
}

impl Engine for TpGroup {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn open(&self, num_seqs: usize, max_tokens: usize, max_rows: usize) -> Result<Box<dyn Passes + '_>> {
        self.run(Cmd::Open { num_seqs, max_tokens, max_rows })?;
        Ok(Box::new(TpSession { group: self }))
    }
}
