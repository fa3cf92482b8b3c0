//! `switchyard bench-model`: decode throughput of a Gemma-4-shaped model
//! with random weights made on the device, set against the memory-bandwidth
//! bound measured in the same run.
//!
//! Shapes ([`Shape`], `--shape`): `default`, a dense 7.08 GB model,
//! `26b-a4b`, the text decoder of Gemma 4 26B-A4B (128 experts, top-8,
//! beside a dense MLP in every layer), and `31b`, the text decoder of
//! Gemma 4 31B (dense, 60 layers of width 5376, 61.4 GB).
//!
//! Decode is memory-bound: the fastest a step can run on a backend is (bytes
//! the step must read) / (copy bandwidth). [`bound`] counts those bytes (every
//! non-expert weight once, only the experts the step selects, the KV cache)
//! and states the rule for the experts at batch > 1. The copy bandwidth is
//! [`bench::copy_ceilings`]: the faster of the driver's device-to-device copy
//! and the `copy_u32` kernel, counting read and write bytes. A step at batch
//! B yields B tokens, so the bound in tokens per second is B · copy bandwidth
//! / bytes per step.
//!
//! The weights are never built on the host. One random bf16 block (64 MiB at
//! most) is uploaded once and copied on the device into every weight buffer.
//! So a 7 GB (or 50 GB) model costs one 64 MiB upload and some device copies.
//! Values are uniform with standard deviation 1/sqrt(hidden). That keeps every
//! projection O(1), and with the norms between sublayers the logits stay
//! finite (the argmax needs them finite). Norm weights are 1 and so are
//! `layer_scalar` and the router's `per_expert_scale`. Random values do not
//! change how fast a kernel runs; the MoE routing follows the random router
//! weights, so which experts a token reads is as random as its prompt.
//!
//! Under `--tp N` each batch size's row also gives the all-reduce time
//! ([`time_all_reduces`]): after the decode steps, every rank runs the
//! sums one decode step makes ([`all_reduce_schedule`]: the embedding's,
//! then two per layer, each a `[batch, hidden]` bf16 buffer, twice that
//! where the MoE block's two outputs are summed together) on its own
//! backend and communicator, `steps` times over, and the slowest rank's
//! time per step is reported per token and as a share of the median step.
//! On NCCL the loop is recorded and replayed, as the decode step is; on
//! the thread communicator (cpu, wgpu) it is the host's exchange.
//!
//! `--prefill-len P` adds a prefill measurement ([`prefill`]): one random
//! prompt of P tokens prefilled in one pass, two warm-up passes (the first
//! traced, naming the kernel entries it launches), then `--prefill-passes`
//! timed ones; prompt tokens per second at the median pass, and the FLOPs
//! the pass does over that time.
pub mod bound;
pub mod gpu_profile;
pub mod prefill;
mod shape;

pub use shape::{MoeShape, Shape, SHAPE_NAMES};

use crate::{bench, limits};
use anyhow::{bail, Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Instant;
use switchyard_core::codec::{bf16_bits, bytes, nvfp4};
use switchyard_core::comm::Communicator;
use switchyard_core::{Backend, DType, DeviceBuffer};
use switchyard_kernels::Ops;
use switchyard_model::checkpoint::HostRows;
use switchyard_model::config::ModelConfig;
use switchyard_model::generate::Engine;
use switchyard_model::graph::Model;
use switchyard_model::quant::Quant;
use switchyard_model::tensors::{ModelTensors, TensorKind, TensorSpec};
use switchyard_model::tp::group::{RankSetup, TpGroup};
use switchyard_model::tp::TpPlan;
use switchyard_model::weights::{AttnProj, Embedding, Experts, Linear, StackedFp4, WeightSource, Weights};

/// Bytes of one random block that every weight is copied from.
const BLOCK_BYTES: usize = 64 << 20;

/// Fills device weights from one random block.
struct Filler {
    be: Arc<dyn Backend>,
    quant: Quant,
    /// Random bf16 values; also the NVFP4 codes (every nibble is an e2m1 value).
    block: DeviceBuffer,
    /// Random finite e4m3 codes: the NVFP4 block scales and the fp8 table.
    e4m3: DeviceBuffer,
    /// Bytes of weights made so far.
    placed: std::cell::Cell<usize>,
}

impl Filler {
    fn new(be: &Arc<dyn Backend>, quant: Quant, largest: usize, hidden: usize) -> Result<Self> {
        let bytes = largest.min(BLOCK_BYTES).next_multiple_of(4);
        // Uniform on ±a has standard deviation a/sqrt(3).
        let a = (3.0 / hidden as f32).sqrt();
        let mut rng = SmallRng::seed_from_u64(0x6e77a4);
        let data: Vec<u8> = (0..bytes / 2).flat_map(|_| bf16_bits(rng.random_range(-a..a)).to_le_bytes()).collect();
        // e4m3 magnitudes 0.5 ..= 1.875 (exponent field 6 or 7), either sign:
        // finite, and the same order as the scales quantization makes.
        let codes: Vec<u8> = if quant == Quant::None {
            vec![0x38; 4]
        } else {
            (0..bytes).map(|_| 0x30 | rng.random_range(0..16u8) | if rng.random() { 0x80 } else { 0 }).collect()
        };
        Ok(Filler {
            be: be.clone(),
            quant,
            block: DeviceBuffer::from_bytes(be, &data)?,
            e4m3: DeviceBuffer::from_bytes(be, &codes)?,
            placed: Default::default(),
        })
    }

    /// A `bytes`-long buffer of random bf16 values.
    fn random(&self, bytes: usize) -> switchyard_model::error::Result<DeviceBuffer> {
        self.tile(bytes, &self.block)
    }

    /// A `bytes`-long buffer of random e4m3 codes.
    fn random_e4m3(&self, bytes: usize) -> switchyard_model::error::Result<DeviceBuffer> {
        self.tile(bytes, &self.e4m3)
    }

    /// A `bytes`-long buffer tiled with copies of `block`.
    fn tile(&self, bytes: usize, block: &DeviceBuffer) -> switchyard_model::error::Result<DeviceBuffer> {
        self.placed.set(self.placed.get() + bytes);
        let buf = DeviceBuffer::new(&self.be, bytes)?;
        let mut off = 0;
        while off < bytes {
            let n = block.len().min(bytes - off);
            self.be.copy(buf.at(off)?, block.addr(), n)?;
            off += n;
        }
        Ok(buf)
    }

    /// A `[n, k]` linear in the storage the quantization gives it. The NVFP4
    /// global scale puts the weights at the bf16 ones' magnitude (e2m1 codes
    /// reach 6, the block scales 1.875).
    fn linear_nk(&self, n: usize, k: usize) -> switchyard_model::error::Result<Linear> {
        if self.quant.stores_nvfp4(n, k) {
            let scale2 = (3.0 / k as f32).sqrt() / 6.0;
            return Ok(Linear::Nvfp4 { bq: self.random(n * k / 2)?, bs: self.random_e4m3(n * k / nvfp4::BLOCK)?, scale2, n, k });
        }
        Ok(Linear::Bf16 { w: self.random(2 * n * k)?, n, k })
    }

    fn ones(&self, n: usize) -> switchyard_model::error::Result<DeviceBuffer> {
        self.placed.set(self.placed.get() + 2 * n);
        Ok(DeviceBuffer::from_bytes(&self.be, &bf16_bits(1.0).to_le_bytes().repeat(n))?)
    }
}

/// Norm weights and scalars are 1; everything else is the random block.
impl WeightSource for Filler {
    fn bf16(&mut self, t: &TensorSpec) -> switchyard_model::error::Result<DeviceBuffer> {
        let n = element_count(t);
        match t.kind {
            TensorKind::Vector => self.ones(n),
            _ => self.random(2 * n),
        }
    }

    fn f32(&mut self, t: &TensorSpec) -> switchyard_model::error::Result<DeviceBuffer> {
        self.placed.set(self.placed.get() + 4 * element_count(t));
        Ok(DeviceBuffer::from_bytes(&self.be, &bytes::f32_bytes(&vec![1.0; element_count(t)]))?)
    }

    fn linear(&mut self, t: &TensorSpec) -> switchyard_model::error::Result<Linear> {
        self.linear_nk(t.shape[0], t.shape[1])
    }

    fn gate_up(&mut self, gate: &TensorSpec, up: &TensorSpec) -> switchyard_model::error::Result<Linear> {
        self.linear_nk(gate.shape[0] + up.shape[0], gate.shape[1])
    }

    /// Stacked, as the checkpoint loader stores attention projections (an
    /// NVFP4 stack with its padding row and gather table, where the shapes
    /// allow, else one linear each, as the loader does).
    fn attention(&mut self, q: &TensorSpec, k: Option<&TensorSpec>, v: Option<&TensorSpec>) -> switchyard_model::error::Result<AttnProj> {
        let n = [q.shape[0], k.map_or(0, |k| k.shape[0]), v.map_or(0, |v| v.shape[0])];
        let cols = q.shape[1];
        if self.quant == Quant::Nvfp4 {
            let total = n.iter().sum::<usize>();
            if !(n.iter().all(|&w| w % 16 == 0) && self.quant.stores_nvfp4(total, cols)) {
                let mut one = |t: &TensorSpec| self.linear_nk(t.shape[0], t.shape[1]);
                return Ok(AttnProj::Separate { q: one(q)?, k: k.map(&mut one).transpose()?, v: v.map(&mut one).transpose()? });
            }
            let scale2 = (3.0 / cols as f32).sqrt() / 6.0;
            let (bq, bs) = (self.random(total * cols / 2 + total)?, self.random_e4m3(total * cols / nvfp4::BLOCK + total)?);
            // The padding rows and the gather table (a few KiB a layer that a
            // decode step does not stream) stay out of the count: the bound's
            // bytes are the weights' (`bound::step_bytes`).
            self.placed.set(self.placed.get() - 2 * total);
            let w = Linear::Nvfp4 { bq, bs, scale2, n: total, k: cols };
            let stack = StackedFp4::new(w, n, cols, |d| Ok(DeviceBuffer::from_bytes(&self.be, d)?))?;
            return Ok(AttnProj::StackedFp4(stack));
        }
        Ok(AttnProj::Stacked { w: self.random(2 * n.iter().sum::<usize>() * cols)?, n, k: cols })
    }

    fn experts(&mut self, t: &TensorSpec) -> switchyard_model::error::Result<Experts> {
        let (e, n, k) = (t.shape[0], t.shape[1], t.shape[2]);
        if self.quant.stores_nvfp4(n, k) {
            let scale2 = vec![(3.0 / k as f32).sqrt() / 6.0; e];
            self.placed.set(self.placed.get() + 4 * e);
            let s2 = DeviceBuffer::from_bytes(&self.be, &bytes::f32_bytes(&scale2))?;
            return Ok(Experts::nvfp4(self.random(e * n * k / 2)?, self.random_e4m3(e * n * k / nvfp4::BLOCK)?, s2));
        }
        Ok(Experts::bf16(self.random(2 * element_count(t))?))
    }

    fn embedding(&mut self, t: &TensorSpec) -> switchyard_model::error::Result<Embedding> {
        if self.quant == Quant::Fp8Embed {
            let (v, h) = (t.shape[0], t.shape[1]);
            // Codes up to 1.875 times a row scale that puts them at the bf16 values' size.
            let scales = vec![(3.0 / h as f32).sqrt() / 1.875; v];
            self.placed.set(self.placed.get() + 4 * v);
            let row_scale = DeviceBuffer::from_bytes(&self.be, &bytes::f32_bytes(&scales))?;
            return Ok(Embedding::Fp8 { codes: self.random_e4m3(v * h)?, row_scale });
        }
        Ok(Embedding::Bf16(self.random(2 * element_count(t))?))
    }

    /// A host table of one repeated non-zero row pattern: bench-model times
    /// the device work, and the per-pass gather reads only a few rows.
    fn host_rows(&mut self, t: &TensorSpec) -> switchyard_model::error::Result<HostRows> {
        let (rows, width) = (t.shape[0], t.shape[1]);
        let row: Vec<u16> = (0..width).map(|j| bf16_bits(0.25 + (j % 7) as f32 / 16.0)).collect();
        HostRows::from_bf16(&t.name, row.repeat(rows), rows, width)
    }

    fn device_bytes(&self) -> usize {
        self.placed.get()
    }
}

/// Elements of a tensor of a config that already fit in memory.
fn element_count(t: &TensorSpec) -> usize {
    t.shape.iter().product()
}

/// Makes a model of `cfg` on `be` with random weights in `quant`'s storage,
/// without a checkpoint.
pub fn random_model(be: &Arc<dyn Backend>, cfg: ModelConfig, quant: Quant) -> Result<Model> {
    let (h, inter, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let experts = cfg.moe.map_or(0, |m| m.num_experts * 2 * m.intermediate * h);
    let largest = (v * h).max(2 * inter * h).max(experts) * 2;
    let mut fill = Filler::new(be, quant, largest, h)?;
    let weights = Weights::assemble(&ModelTensors::of(&cfg), &mut fill)?;
    be.synchronize()?;
    Ok(Model::new(cfg, weights, be.clone(), quant))
}

/// How to run the benchmark.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Prompt tokens prefilled per sequence before decoding.
    pub prompt_len: usize,
    /// Untimed decode steps after the prefill.
    pub warmup: usize,
    /// Timed decode steps.
    pub steps: usize,
    /// Open the backend's profiler range ([`switchyard_core::Backend::profiler_range`])
    /// around the timed steps.
    pub profile_timed_steps: bool,
    /// Weight storage (`--quant`).
    pub quant: Quant,
    /// Prompt tokens of the prefill measurement, all in one pass (`--prefill-len`; 0: none).
    pub prefill_len: usize,
    /// Timed prefill passes (`--prefill-passes`); the median is reported.
    pub prefill_passes: usize,
    /// Positions each decode session reserves (`--session-tokens`; 0: just
    /// [`Settings::positions`]). The KV cache and the attention plans (their
    /// split of the context into chunks) are sized for the session, so a
    /// larger figure times a decode inside a longer conversation's session.
    pub session_tokens: usize,
}

/// Timed prefill passes when `--prefill-passes` is not given.
pub const DEFAULT_PREFILL_PASSES: usize = 5;

impl Settings {
    /// The decode settings of `prompt_len`, `steps` (after 3 warm-up steps)
    /// and `quant`, with no prefill measurement and no profiler range.
    pub fn decode(prompt_len: usize, steps: usize, quant: Quant) -> Self {
        Settings {
            prompt_len,
            warmup: 3,
            steps,
            profile_timed_steps: false,
            quant,
            prefill_len: 0,
            prefill_passes: DEFAULT_PREFILL_PASSES,
            session_tokens: 0,
        }
    }

    /// Refuses settings the benchmark cannot run, naming the flag: an empty
    /// prompt or no steps, a decode past the benchmark model's context, a
    /// prefill longer than that context, a prefill pass count outside
    /// `1..=`[`limits::MAX_BENCH_PREFILL_PASSES`], or a session smaller than
    /// the decode's positions or larger than the context.
    pub fn validate(&self) -> Result<()> {
        let (prompt_len, steps) = (self.prompt_len, self.steps);
        if prompt_len == 0 || steps == 0 {
            bail!("--prompt-len and --steps must be at least 1");
        }
        match self.positions() {
            Some(n) if n <= limits::BENCH_MODEL_CONTEXT => {}
            n => bail!(
                "--prompt-len {prompt_len} + --steps {steps} (+ {} warm-up and final positions) = {} positions, past the benchmark \
                 model's context of {} (max_position_embeddings)",
                self.warmup + 1,
                n.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string()),
                limits::BENCH_MODEL_CONTEXT
            ),
        }
        if self.prefill_len > limits::BENCH_MODEL_CONTEXT {
            bail!(
                "--prefill-len {}: at most the benchmark model's context of {} (max_position_embeddings)",
                self.prefill_len,
                limits::BENCH_MODEL_CONTEXT
            );
        }
        if self.prefill_len > 0 && !(1..=limits::MAX_BENCH_PREFILL_PASSES).contains(&self.prefill_passes) {
            bail!("--prefill-passes {}: expected 1..={}", self.prefill_passes, limits::MAX_BENCH_PREFILL_PASSES);
        }
        let needed = self.positions().unwrap_or(usize::MAX);
        if self.session_tokens != 0 && !(needed..=limits::BENCH_MODEL_CONTEXT).contains(&self.session_tokens) {
            bail!(
                "--session-tokens {}: expected {needed}..={} (the decode's positions up to the benchmark model's context)",
                self.session_tokens,
                limits::BENCH_MODEL_CONTEXT
            );
        }
        Ok(())
    }

    /// Positions a decode session reserves: `--session-tokens`, else [`Settings::positions`].
    pub fn session_positions(&self) -> Option<usize> {
        self.positions().map(|n| n.max(self.session_tokens))
    }

    /// Positions each sequence occupies: the prompt, every decode step, and
    /// the token the last step chooses (`None` past `usize`).
    pub fn positions(&self) -> Option<usize> {
        self.prompt_len.checked_add(self.warmup)?.checked_add(self.steps)?.checked_add(1)
    }

    /// Positions of the tokens the timed steps feed in (each step reads the
    /// KV cache up to and including its token's position).
    pub fn timed_positions(&self) -> std::ops::Range<usize> {
        let first = self.prompt_len + self.warmup;
        first..first + self.steps
    }
}

/// One batch size's result.
#[derive(Clone, Debug)]
pub struct Row {
    /// Sequences decoded together.
    pub batch: usize,
    /// Prefill of all sequences (one pass each), ms.
    pub prefill_ms: f64,
    /// Median decode step, ms.
    pub step_ms_median: f64,
    /// Fastest step, ms.
    pub step_ms_min: f64,
    /// Slowest step, ms.
    pub step_ms_max: f64,
    /// Tokens per second over all timed steps (batch · steps / total time).
    pub tokens_per_s: f64,
    /// What one timed step reads ([`bound`]).
    pub bytes: bound::StepBytes,
    /// Under `--tp N > 1`: the all-reduce time of one step ([`time_all_reduces`]).
    pub all_reduce: Option<AllReduceTime>,
    /// Under `--profile-timed-steps` on wgpu: the GPU time by kernel of one
    /// more step, timed dispatch by dispatch ([`gpu_profile`]).
    pub gpu_profile: Option<gpu_profile::StepProfile>,
}

/// The all-reduces of one decode step, timed apart from the step on every
/// rank ([`time_all_reduces`]).
#[derive(Clone, Debug, PartialEq)]
pub struct AllReduceTime {
    /// Calls per step (the embedding's and two per layer).
    pub calls: usize,
    /// bf16 elements summed per step, all calls.
    pub elements: usize,
    /// Per rank, in rank order: ms per step (the mean over the timed repetitions).
    pub ms_per_step_by_rank: Vec<f64>,
    /// How the loop ran: `recorded` (one step's sums recorded once and
    /// replayed, as the decode step is) or `eager` (enqueued call by call).
    pub mode: &'static str,
}

impl AllReduceTime {
    /// The slowest rank's ms per step: the step waits for it.
    pub fn ms_per_step(&self) -> f64 {
        self.ms_per_step_by_rank.iter().copied().fold(0.0, f64::max)
    }

    /// Microseconds per generated token (a step yields `batch` tokens).
    pub fn us_per_token(&self, batch: usize) -> f64 {
        1e3 * self.ms_per_step() / batch as f64
    }
}

/// A tensor-parallel rank's backend and communicator.
pub type RankHandle = (Arc<dyn Backend>, Arc<dyn Communicator>);

/// The bf16 element counts of the all-reduces one pass of `rows` rows
/// makes on a tensor-parallel rank, in the graph's order: the embedding's
/// `[rows, hidden]`, then per layer the attention output's `[rows, hidden]`
/// and the MLP's (`[2, rows, hidden]` in an MoE layer: the dense MLP's and
/// the experts' outputs side by side, summed by one call).
pub fn all_reduce_schedule(cfg: &ModelConfig, rows: usize) -> Vec<usize> {
    let x = rows * cfg.hidden_size;
    let mut calls = vec![x];
    for l in &ModelTensors::of(cfg).layers {
        calls.push(x);
        calls.push(if l.moe.is_some() { 2 * x } else { x });
    }
    calls
}

/// Times `schedule` (element counts, [`all_reduce_schedule`]) as bf16 sums
/// on every rank of `ranks` (each rank's backend and communicator, in rank
/// order), each rank on its own thread as the group's ranks are: one
/// untimed repetition and a barrier, then `reps` repetitions timed by the
/// rank's backend ([`Backend::time_ms`]: CUDA events on CUDA, the wall
/// clock on the CPU reference). A communicator that is
/// [`Communicator::capturable`] runs the repetitions as replays of one
/// recorded repetition (as the decode step runs them; the mode follows rank
/// 0's communicator, and a recording that fails fails the measurement);
/// any other communicator enqueues the calls one by one.
pub fn time_all_reduces(ranks: &[RankHandle], schedule: &[usize], reps: usize) -> Result<AllReduceTime> {
    let largest = schedule.iter().copied().max().unwrap_or(0);
    let record = ranks.first().is_some_and(|(_, c)| c.capturable());
    let mode = if record { "recorded" } else { "eager" };
    let one_rank = |be: &Arc<dyn Backend>, comm: &Arc<dyn Communicator>| -> Result<f64> {
        let buf = DeviceBuffer::zeroed(be, 2 * largest.max(1))?;
        let mut step = || -> switchyard_core::Result<()> {
            for &n in schedule {
                comm.all_reduce_sum(buf.region(), DType::BF16, n)?;
            }
            Ok(())
        };
        step()?;
        be.synchronize()?;
        let recording = if record { Some(be.record(&mut step).context("recording one step's all-reduces")?) } else { None };
        comm.barrier()?;
        let ms = be.time_ms(&mut || {
            for _ in 0..reps {
                match &recording {
                    Some(r) => be.replay(r)?,
                    None => step()?,
                }
            }
            Ok(())
        })?;
        Ok(ms / reps.max(1) as f64)
    };
    let times: Vec<Result<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = ranks.iter().map(|(be, comm)| s.spawn(move || one_rank(be, comm))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a rank panicked timing the all-reduces")))).collect()
    });
    let ms_per_step_by_rank =
        times.into_iter().enumerate().map(|(r, t)| t.with_context(|| format!("rank {r}"))).collect::<Result<Vec<_>>>()?;
    Ok(AllReduceTime { calls: schedule.len(), elements: schedule.iter().sum(), ms_per_step_by_rank, mode })
}

impl Row {
    /// Milliseconds per generated token (a step yields `batch` tokens).
    pub fn ms_per_token(&self) -> f64 {
        1e3 / self.tokens_per_s
    }
}

/// Decodes `batch` sequences on `model`: each gets a random prompt of
/// `s.prompt_len` tokens (prefilled one sequence per pass), then all decode
/// together, one token each per step, greedily.
pub fn run_batch(model: &dyn Engine, profiler: Option<&Arc<dyn Backend>>, batch: usize, s: &Settings, seed: u64) -> Result<Row> {
    if batch == 0 || s.prompt_len == 0 || s.steps == 0 {
        bail!("batch, prompt length and steps must be at least 1");
    }
    let total = s.session_positions().context("prompt length + steps overflow a position count")?;
    let mut times = Vec::new();
    times.try_reserve_exact(s.steps).map_err(|e| anyhow::anyhow!("cannot hold {} step timings: {e}", s.steps))?;
    let mut session = model.open(batch, total, s.prompt_len).context("allocating the session")?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let v = model.config().vocab_size as u32;
    let t0 = Instant::now();
    let mut next = Vec::with_capacity(batch);
    for b in 0..batch {
        let prompt: Vec<u32> = (0..s.prompt_len).map(|_| rng.random_range(0..v)).collect();
        next.push(session.prefill(b, &prompt, 0, false).with_context(|| format!("prefill of sequence {b}"))?.token);
    }
    let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
    for (step, pos) in (0..s.warmup + s.steps).zip(s.prompt_len..) {
        let positions = vec![pos; batch];
        // Each step ends in a download of the chosen tokens, so the wall
        // clock covers the device work.
        let profiled = s.profile_timed_steps && step >= s.warmup;
        let profiler = profiler.filter(|_| profiled);
        if let Some(be) = profiler {
            be.profiler_range(true)?;
        }
        let t = Instant::now();
        let out = session.decode(&next, &positions, false).with_context(|| format!("decode step {step}"))?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        if let Some(be) = profiler {
            be.profiler_range(false)?;
        }
        if step >= s.warmup {
            times.push(ms);
        }
        next = out.into_iter().map(|r| r.token).collect();
    }
    let sum: f64 = times.iter().sum();
    // One more step (the session holds a position past the timed ones),
    // outside the timed figures: its dispatches run in passes of their own.
    #[cfg(feature = "wgpu")]
    let gpu_profile = match profiler.filter(|_| s.profile_timed_steps).and_then(gpu_profile::timed_wgpu) {
        Some(w) => {
            let positions = vec![s.prompt_len + s.warmup + s.steps; batch];
            Some(gpu_profile::profile_step(w, &mut || session.decode(&next, &positions, false).map(drop).map_err(Into::into))?)
        }
        None => None,
    };
    #[cfg(not(feature = "wgpu"))]
    let gpu_profile = None;
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(Row {
        batch,
        prefill_ms,
        step_ms_median: sorted[sorted.len() / 2],
        step_ms_min: sorted[0],
        step_ms_max: sorted[sorted.len() - 1],
        tokens_per_s: (batch * times.len()) as f64 / (sum / 1e3),
        bytes: bound::step_bytes(model.config(), s.quant, batch, s.timed_positions()),
        all_reduce: None,
        gpu_profile,
    })
}

/// The whole report.
#[derive(Clone, Debug)]
pub struct Report {
    /// Backend name.
    pub backend: String,
    /// Device description.
    pub device: String,
    /// The shape benchmarked.
    pub shape: Shape,
    /// Bytes of all the weights on the device (every expert included).
    pub model_bytes: usize,
    /// Copy bandwidth (read + write bytes per second) and how it was measured.
    pub copy: bench::CopyCeilings,
    /// Model creation (random weights on the device), ms.
    pub build_ms: f64,
    /// Settings used.
    pub settings: Settings,
    /// One row per batch size.
    pub rows: Vec<Row>,
    /// Tensor-parallel ranks (`--tp`), each on its own device.
    pub tp: usize,
    /// Under `--tp N > 1`: the communicator's name (`nccl`, `threads`).
    pub comm: Option<String>,
    /// Under `--prefill-len`: the prefill measurement.
    pub prefill: Option<prefill::PrefillRow>,
}

/// The bound's rule in words, for the reports.
pub const BOUND_RULE: &str = "bytes per step = every non-expert weight once (the whole tied table included) + the experts \
     selected (batch 1: top_k distinct per MoE layer; batch b: the expectation under uniform routing, E·(1-(1-top_k/E)^b)) \
     + the KV cache read (mean over the timed steps); bound = batch · copy bandwidth / bytes per step";

impl Report {
    /// What the all-reduce figures measure, for the reports (`None` without `--tp`).
    pub fn all_reduce_note(&self) -> Option<String> {
        let comm = self.comm.as_deref()?;
        let calls = self.rows.first().and_then(|r| r.all_reduce.as_ref()).map_or(0, |a| a.calls);
        let mode = self.rows.first().and_then(|r| r.all_reduce.as_ref()).map_or("eager", |a| a.mode);
        let what = if comm == "nccl" {
            "a device figure (NCCL on each GPU's stream, timed by CUDA events)".to_string()
        } else {
            format!(
                "a HOST figure: the {comm} communicator downloads each rank's buffer, sums in rank order on the host and uploads \
                 the result, so this is not a device collective's cost"
            )
        };
        Some(format!(
            "{calls} bf16 all-reduces per step (the embedding's, then 2 per layer: [batch, hidden] each, [2, batch, hidden] for an \
             MoE layer's MLP) over {} ranks, timed after the decode steps in a separate loop ({mode}, {} repetitions) on each \
             rank's backend; the slowest rank per step, per token and as a share of the median step; {what}",
            self.tp, self.settings.steps
        ))
    }

    /// Tokens per second the bandwidth allows for `row`'s traffic.
    pub fn bound_tokens_per_s(&self, row: &Row) -> f64 {
        // Under --tp the step's bytes are spread over tp devices' bandwidth.
        row.bytes.bound_tokens_per_s(row.batch, self.copy.best() * self.tp as f64)
    }

    /// The markdown table.
    pub fn markdown(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(s, "bench-model: shape `{}`, backend `{}` on {}", self.shape.name, self.backend, self.device);
        let _ = writeln!(
            s,
            "- model: random weights made on the device (quant {}), {:.2} GB: {}",
            self.settings.quant,
            self.model_bytes as f64 / 1e9,
            self.shape.describe()
        );
        let _ = writeln!(s, "- copy ceiling: {:.1} GB/s ({})", self.copy.best() / 1e9, self.copy.describe());
        let _ = writeln!(s, "- bound: {BOUND_RULE}");
        let _ = writeln!(
            s,
            "- each sequence: {} random prompt tokens prefilled, {} warm-up steps, then {} timed decode steps, in a session of {} positions (weights made in {:.0} ms)\n",
            self.settings.prompt_len,
            self.settings.warmup,
            self.settings.steps,
            self.settings.session_positions().unwrap_or(usize::MAX),
            self.build_ms
        );
        let tp_cols = self.comm.is_some();
        if let Some(note) = self.all_reduce_note() {
            let _ = writeln!(
                s,
                "- tensor parallel: --tp {}, {} collectives; all-reduce: {note}\n",
                self.tp,
                self.comm.as_deref().unwrap_or("?")
            );
        }
        s.push_str(
            "| batch | tokens/s | ms/token | ms/step (median, min..max) | MB read/step: weights + experts + KV | experts/layer | bound tokens/s | % of bound | prefill ms |",
        );
        s.push_str(if tp_cols { " all-reduce us/token | all-reduce % of step |\n" } else { "\n" });
        s.push_str("|---|---|---|---|---|---|---|---|---|");
        s.push_str(if tp_cols { "---|---|\n" } else { "\n" });
        for r in &self.rows {
            let bound = self.bound_tokens_per_s(r);
            let b = &r.bytes;
            let _ = write!(
                s,
                "| {} | {:.1} | {:.3} | {:.3} ({:.3}..{:.3}) | {:.1} = {:.1} + {:.1} + {:.1} | {} | {:.1} | {:.0}% | {:.1} |",
                r.batch,
                r.tokens_per_s,
                r.ms_per_token(),
                r.step_ms_median,
                r.step_ms_min,
                r.step_ms_max,
                b.total() / 1e6,
                b.weights as f64 / 1e6,
                b.experts() / 1e6,
                b.kv / 1e6,
                if b.moe_layers == 0 { "-".to_string() } else { format!("{:.1}", b.experts_per_layer) },
                bound,
                100.0 * r.tokens_per_s / bound,
                r.prefill_ms
            );
            match (&r.all_reduce, tp_cols) {
                (Some(a), _) => {
                    let _ = writeln!(s, " {:.1} | {:.1}% |", a.us_per_token(r.batch), 100.0 * a.ms_per_step() / r.step_ms_median);
                }
                (None, true) => s.push_str(" - | - |\n"),
                (None, false) => s.push('\n'),
            }
        }
        for r in &self.rows {
            if let Some(p) = &r.gpu_profile {
                let _ = write!(s, "\nbatch {}: {}", r.batch, p.markdown(r.step_ms_median));
            }
        }
        if let Some(p) = &self.prefill {
            s.push_str(&self.prefill_markdown(p));
        }
        s
    }

    /// The prefill section of the markdown report.
    fn prefill_markdown(&self, p: &prefill::PrefillRow) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let f = &p.flops;
        let _ = writeln!(
            s,
            "\nprefill: one random prompt of {} tokens in one pass, {} warm-up passes (the first traced), then {} timed (wall \
             clock, each ending in the download of the chosen token); median pass\n",
            p.prompt_len,
            prefill::WARMUP_PASSES,
            p.passes_ms.len()
        );
        s.push_str("| prompt tokens | tokens/s | ms/pass (median, min..max) | GFLOP/pass = linear + attention + head | GFLOP/token | TFLOP/s | same token every pass |\n");
        s.push_str("|---|---|---|---|---|---|---|\n");
        let _ = writeln!(
            s,
            "| {} | {:.0} | {:.2} ({:.2}..{:.2}) | {} = {} + {} + {} | {} | {} | {} |",
            p.prompt_len,
            p.tokens_per_s,
            p.ms_median,
            p.ms_min,
            p.ms_max,
            prefill::sig3(f.total() / 1e9),
            prefill::sig3(f.linear / 1e9),
            prefill::sig3(f.attention / 1e9),
            prefill::sig3(f.head / 1e9),
            prefill::sig3(f.per_token() / 1e9),
            prefill::sig3(p.tflops()),
            if p.same_token { "yes" } else { "NO" }
        );
        let _ = writeln!(s, "\n- FLOPs: {}", prefill::FLOPS_RULE);
        if p.launches.is_empty() {
            s.push_str("- kernels: not traced (under --tp each rank launches on its own backend)\n");
        } else {
            let list: Vec<String> = p.launches.iter().map(|(e, c)| format!("`{e}` x{c}")).collect();
            let _ = writeln!(s, "- kernels of the first pass ({} launches): {}", p.launch_count(), list.join(", "));
        }
        s
    }

    /// The JSON document (`--json`), with the HF config of the shape.
    pub fn json(&self) -> serde_json::Value {
        let rows: Vec<_> = self
            .rows
            .iter()
            .map(|r| {
                let bound = self.bound_tokens_per_s(r);
                let b = &r.bytes;
                serde_json::json!({
                    "batch": r.batch, "tokens_per_s": r.tokens_per_s, "ms_per_token": r.ms_per_token(),
                    "step_ms_median": r.step_ms_median, "step_ms_min": r.step_ms_min, "step_ms_max": r.step_ms_max,
                    "bytes_per_step": {
                        "weights": b.weights, "experts": b.experts(), "kv": b.kv, "total": b.total(),
                        "expert_bytes": b.expert, "moe_layers": b.moe_layers, "experts_per_layer": b.experts_per_layer,
                    },
                    "bound_tokens_per_s": bound, "fraction_of_bound": r.tokens_per_s / bound,
                    "prefill_ms": r.prefill_ms,
                    "all_reduce": r.all_reduce.as_ref().map(|a| serde_json::json!({
                        "calls_per_step": a.calls, "elements_per_step": a.elements, "mode": a.mode,
                        "ms_per_step": a.ms_per_step(), "ms_per_step_by_rank": a.ms_per_step_by_rank,
                        "us_per_token": a.us_per_token(r.batch), "fraction_of_step": a.ms_per_step() / r.step_ms_median,
                    })),
                    "gpu_profile": r.gpu_profile.as_ref().map(|p| serde_json::json!({
                        "total_us": p.total_us,
                        "entries": p.entries.iter().map(|e| serde_json::json!({"entry": e.entry, "dispatches": e.dispatches, "us": e.us})).collect::<Vec<_>>(),
                    })),
                })
            })
            .collect();
        serde_json::json!({
            "shape": self.shape.name, "backend": self.backend, "device": self.device,
            "quant": self.settings.quant.to_string(), "model_bytes": self.model_bytes,
            "copy_gb_per_s": self.copy.best() / 1e9, "copy_note": self.copy.describe(), "bound_rule": BOUND_RULE,
            "prompt_len": self.settings.prompt_len, "warmup_steps": self.settings.warmup, "timed_steps": self.settings.steps,
            "session_positions": self.settings.session_positions(),
            "build_ms": self.build_ms, "rows": rows, "hf_config": self.shape.hf_config(), "tp": self.tp,
            "comm": self.comm, "all_reduce_note": self.all_reduce_note(),
            "prefill": self.prefill.as_ref().map(|p| serde_json::json!({
                "prompt_len": p.prompt_len, "warmup_passes": prefill::WARMUP_PASSES, "timed_passes": p.passes_ms.len(),
                "passes_ms": p.passes_ms, "ms_median": p.ms_median, "ms_min": p.ms_min, "ms_max": p.ms_max,
                "tokens_per_s": p.tokens_per_s, "tflops_per_s": p.tflops(), "same_token": p.same_token,
                "flops": {
                    "linear": p.flops.linear, "attention": p.flops.attention, "head": p.flops.head,
                    "total": p.flops.total(), "per_token": p.flops.per_token(),
                },
                "flops_rule": prefill::FLOPS_RULE,
                "launches": p.launches.iter().map(|(e, c)| serde_json::json!({"entry": e, "count": c})).collect::<Vec<_>>(),
            })),
        })
    }
}

/// Measures the copy ceiling, builds the model, and decodes at each batch size.
pub fn run(be: &Arc<dyn Backend>, shape: &Shape, batches: &[usize], s: &Settings) -> Result<Report> {
    run_on(be, shape, batches, s, None)
}

/// [`run`] over a tensor-parallel group (`--tp`): each rank makes its
/// shard's random weights on its own device; the copy ceiling is `be`'s.
pub fn run_tp(be: &Arc<dyn Backend>, shape: &Shape, batches: &[usize], s: &Settings, ranks: Vec<RankSetup>) -> Result<Report> {
    run_on(be, shape, batches, s, Some(ranks))
}

/// A tensor-parallel rank's shard of [`random_model`].
fn random_shard(
    be: &Arc<dyn Backend>,
    cfg: &ModelConfig,
    quant: Quant,
    comm: Arc<dyn Communicator>,
) -> switchyard_model::error::Result<Model> {
    let plan = TpPlan::new(cfg, comm.rank(), comm.world_size())?;
    let (tensors, _) = plan.local_tensors(cfg);
    let largest = tensors.all().iter().map(|t| element_count(t) * 2).max().unwrap_or(0);
    let mut fill =
        Filler::new(be, quant, largest, cfg.hidden_size).map_err(|e| switchyard_model::Error::Request(format!("random weights: {e:#}")))?;
    let weights = Weights::assemble(&tensors, &mut fill)?;
    be.synchronize()?;
    Model::shard(cfg.clone(), plan, weights, be.clone(), quant, comm)
}

fn run_on(be: &Arc<dyn Backend>, shape: &Shape, batches: &[usize], s: &Settings, ranks: Option<Vec<RankSetup>>) -> Result<Report> {
    let cfg = shape.config().context("the benchmark shape")?;
    if let Some(&b) = batches.iter().find(|&&b| b == 0) {
        bail!("--batch {b}: batch sizes must be at least 1");
    }
    let ops = Ops::new(be.clone());
    // The ceiling first, while its two buffers still fit beside nothing else.
    // 1 GiB where the backend binds that much; an adapter whose storage
    // bindings are smaller (lavapipe: 128 MiB) gets the largest size that
    // works. The CPU reference's copy speed bounds nothing of interest (its
    // copy kernel checks every element), so there a short measurement keeps
    // a cpu run, the tests', short.
    let cpu = be.kind() == switchyard_core::BackendKind::Cpu;
    let sizes: &[usize] = if cpu { &[1 << 20] } else { &[1 << 30, 512 << 20, 256 << 20, 128 << 20, 64 << 20] };
    let timing = if cpu { bench::Settings { warmup: 1, iters: 3, ..Default::default() } } else { bench::Settings::default() };
    let mut copy = Err(anyhow::anyhow!("no copy size tried"));
    for &bytes in sizes {
        copy = bench::copy_ceilings(&ops, &timing, bytes);
        if copy.is_ok() {
            break;
        }
    }
    let copy = copy.context("measuring the copy ceiling")?;
    let t0 = Instant::now();
    // Under --tp, each rank's backend and communicator, kept to time the
    // all-reduces on after the decode steps (the ranks' threads are idle then).
    let handles: std::sync::Mutex<Vec<RankHandle>> = Default::default();
    // The prefill measurement names the kernels of one pass: the model then
    // launches through a tracing wrapper of `be` (off outside that pass).
    let traced = (s.prefill_len > 0 && ranks.is_none()).then(|| prefill::Traced::new(be.clone()));
    let (model, model_bytes, tp, comm): (Box<dyn Engine>, usize, usize, Option<String>) = match ranks {
        None => {
            let model_be: Arc<dyn Backend> = match &traced {
                Some(t) => t.clone(),
                None => be.clone(),
            };
            let m = random_model(&model_be, cfg.clone(), s.quant).context("making the random-weight model")?;
            let bytes = m.weights.device_bytes;
            (Box::new(m), bytes, 1, None)
        }
        Some(ranks) => {
            let tp = ranks.len();
            TpPlan::new(&cfg, 0, tp)?;
            let g = TpGroup::start(ranks, &|be, comm| {
                handles.lock().unwrap_or_else(|e| e.into_inner()).push((be.clone(), comm.clone()));
                random_shard(&be, &cfg, s.quant, comm)
            })
            .with_context(|| format!("making the random-weight shards of --tp {tp}"))?;
            let bytes = g.ranks.iter().map(|r| r.device_bytes).sum();
            let comm = g.ranks[0].comm.clone();
            (Box::new(g), bytes, tp, Some(comm))
        }
    };
    let build_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut handles = handles.into_inner().unwrap_or_else(|e| e.into_inner());
    handles.sort_by_key(|(_, c)| c.rank());
    let prefill = match s.prefill_len {
        0 => None,
        p => Some(prefill::run_prefill(model.as_ref(), traced.as_deref(), s, 0x9e3779b9).with_context(|| format!("--prefill-len {p}"))?),
    };
    let mut rows = Vec::with_capacity(batches.len());
    for (i, &b) in batches.iter().enumerate() {
        let mut row = run_batch(model.as_ref(), (tp == 1).then_some(be), b, s, i as u64).with_context(|| format!("--batch {b}"))?;
        if tp > 1 {
            row.all_reduce = Some(
                time_all_reduces(&handles, &all_reduce_schedule(&cfg, b), s.steps)
                    .with_context(|| format!("--batch {b}: timing the all-reduces"))?,
            );
        }
        rows.push(row);
    }
    Ok(Report {
        backend: be.name().to_string(),
        device: be.info().device,
        shape: shape.clone(),
        model_bytes,
        copy,
        build_ms,
        settings: s.clone(),
        rows,
        tp,
        comm,
        prefill,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use switchyard_core::Region;
    use switchyard_model::tp::group::thread_ranks;

    /// A communicator that records the element count of every all-reduce
    /// rank 0 makes, then makes it on the thread communicator it wraps.
    struct Counting {
        inner: Arc<dyn Communicator>,
        seen: Arc<Mutex<Vec<usize>>>,
    }

    impl Communicator for Counting {
        fn rank(&self) -> usize {
            self.inner.rank()
        }
        fn world_size(&self) -> usize {
            self.inner.world_size()
        }
        fn name(&self) -> &'static str {
            self.inner.name()
        }
        fn all_reduce_sum(&self, buf: Region, dtype: DType, count: usize) -> switchyard_core::Result<()> {
            if self.rank() == 0 {
                assert_eq!(dtype, DType::BF16, "the graph sums bf16");
                self.seen.lock().unwrap().push(count);
            }
            self.inner.all_reduce_sum(buf, dtype, count)
        }
        fn all_gather(&self, send: Region, recv: Region) -> switchyard_core::Result<()> {
            self.inner.all_gather(send, recv)
        }
        fn barrier(&self) -> switchyard_core::Result<()> {
            self.inner.barrier()
        }
    }

    /// `world` CPU reference ranks over the thread communicator, each
    /// wrapped in a [`Counting`] reporting to `seen`.
    fn counting_ranks(world: usize, seen: &Arc<Mutex<Vec<usize>>>) -> Vec<RankSetup> {
        let backends = (0..world).map(|_| crate::backends::open("cpu").unwrap()).collect();
        thread_ranks(backends)
            .unwrap()
            .into_iter()
            .map(|setup| {
                let seen = seen.clone();
                let wrapped: RankSetup = Box::new(move || {
                    let (be, inner) = setup()?;
                    Ok((be, Arc::new(Counting { inner, seen }) as Arc<dyn Communicator>))
                });
                wrapped
            })
            .collect()
    }

    /// Four layers (the last full), width 64, 4 query heads; sliding
    /// head_dim 16 with 2 KV heads and window 4, full head_dim 32 with 2 KV
    /// heads and V = K; vocab 256; with or without an MoE block of 4
    /// experts, top-2, expert intermediate 32, beside a dense MLP of 96.
    pub(crate) fn tiny(moe: bool) -> Shape {
        Shape {
            name: if moe { "tiny-moe" } else { "tiny-dense" }.into(),
            layers: 4,
            hidden: 64,
            intermediate: 96,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            global_head_dim: 32,
            global_kv_heads: 2,
            window: 4,
            vocab: 256,
            moe: moe.then_some(MoeShape { experts: 4, top_k: 2, intermediate: 32 }),
        }
    }

    #[test]
    fn the_schedule_is_the_all_reduces_a_decode_step_makes() {
        for moe in [false, true] {
            let cfg = tiny(moe).config().unwrap();
            let want = all_reduce_schedule(&cfg, 3);
            // 1 + 2 per layer; an MoE layer's MLP sum is twice as wide.
            let x = 3 * 64;
            let layer = if moe { [x, 2 * x] } else { [x, x] };
            assert_eq!(want, [vec![x], layer.repeat(4)].concat());
            let seen = Arc::new(Mutex::new(Vec::new()));
            let g = TpGroup::start(counting_ranks(2, &seen), &|be, comm| random_shard(&be, &cfg, Quant::None, comm)).unwrap();
            let mut session = g.open(3, 8, 4).unwrap();
            for b in 0..3 {
                session.prefill(b, &[1, 2, 3], 0, false).unwrap();
            }
            // A prefill pass of 3 rows makes the same calls at 3 rows.
            assert_eq!(*seen.lock().unwrap(), want.repeat(3), "moe {moe}: prefill");
            seen.lock().unwrap().clear();
            session.decode(&[4, 5, 6], &[3, 3, 3], false).unwrap();
            assert_eq!(*seen.lock().unwrap(), want, "moe {moe}: a decode step of 3 sequences");
        }
    }

    #[test]
    fn the_timed_loop_makes_the_schedule_reps_times_on_every_rank() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handles: Vec<_> = counting_ranks(2, &seen).into_iter().map(|setup| setup().unwrap()).collect();
        let t = time_all_reduces(&handles, &[4, 8, 4], 5).unwrap();
        // One untimed repetition, then 5 timed ones.
        assert_eq!(*seen.lock().unwrap(), [4, 8, 4].repeat(6));
        assert_eq!((t.calls, t.elements, t.mode, t.ms_per_step_by_rank.len()), (3, 16, "eager", 2));
        assert!(t.ms_per_step_by_rank.iter().all(|&ms| ms.is_finite() && ms > 0.0), "{t:?}");
        assert_eq!(t.ms_per_step(), t.ms_per_step_by_rank.iter().copied().fold(0.0, f64::max));
        assert_eq!(t.us_per_token(4), t.ms_per_step() * 1e3 / 4.0);
    }

    #[test]
    fn a_tp_report_gives_the_all_reduce_time_per_token_as_a_host_figure() {
        let be = crate::backends::open("cpu").unwrap();
        let shape = tiny(true);
        let s = Settings { warmup: 1, ..Settings::decode(3, 2, Quant::None) };
        let ranks = crate::backends::tp_ranks("cpu", 2).unwrap();
        let report = run_tp(&be, &shape, &[1, 2], &s, ranks).unwrap();
        assert_eq!((report.tp, report.comm.as_deref()), (2, Some("threads")));
        for r in &report.rows {
            let a = r.all_reduce.as_ref().expect("a --tp 2 row times its all-reduces");
            assert_eq!((a.calls, a.elements, a.mode), (9, r.batch * 64 * (1 + 4 * 3), "eager"));
            assert!(a.ms_per_step() > 0.0 && a.ms_per_step().is_finite());
        }
        let md = report.markdown();
        assert!(md.contains("all-reduce us/token | all-reduce % of step |") && md.contains("a HOST figure"), "{md}");
        let r1 = &report.rows[0];
        let a1 = r1.all_reduce.as_ref().unwrap();
        let cells = format!(" {:.1} | {:.1}% |", a1.us_per_token(1), 100.0 * a1.ms_per_step() / r1.step_ms_median);
        assert!(md.lines().any(|l| l.starts_with("| 1 |") && l.ends_with(&cells)), "{md}");
        let doc = report.json();
        assert_eq!(doc["comm"], "threads");
        assert!(doc["all_reduce_note"].as_str().unwrap().contains("HOST figure"));
        let j = &doc["rows"][1]["all_reduce"];
        assert_eq!((j["calls_per_step"].as_u64(), j["mode"].as_str()), (Some(9), Some("eager")));
        assert_eq!(j["us_per_token"].as_f64(), Some(report.rows[1].all_reduce.as_ref().unwrap().us_per_token(2)));
        // The all-reduces are timed in their own loop, so on a loaded host the fraction can pass 1:
        // check the formula, not a timing bound.
        let r2 = &report.rows[1];
        let fraction = r2.all_reduce.as_ref().unwrap().ms_per_step() / r2.step_ms_median;
        assert_eq!(j["fraction_of_step"].as_f64(), Some(fraction), "{j}");
        // Without --tp: no all-reduce columns, null in the JSON.
        let single = run(&be, &shape, &[1], &s).unwrap();
        assert!(single.rows[0].all_reduce.is_none() && single.all_reduce_note().is_none());
        assert!(!single.markdown().contains("all-reduce"));
        assert!(single.json()["rows"][0]["all_reduce"].is_null());
    }

    #[test]
    fn settings_refuse_what_the_benchmark_cannot_run() {
        let ok = Settings::decode(128, 64, Quant::None);
        assert!(ok.validate().is_ok());
        let err = |s: Settings| s.validate().unwrap_err().to_string();
        assert!(err(Settings::decode(0, 64, Quant::None)).contains("--prompt-len and --steps must be at least 1"));
        assert!(err(Settings::decode(8000, 500, Quant::None)).contains("8504 positions, past the benchmark model's context of 8192"));
        // The prefill session holds the prompt alone: up to the whole context.
        assert!(Settings { prefill_len: 8192, ..ok.clone() }.validate().is_ok());
        assert!(
            err(Settings { prefill_len: 8193, ..ok.clone() }).contains("--prefill-len 8193: at most the benchmark model's context of 8192")
        );
        assert!(err(Settings { prefill_len: 4096, prefill_passes: 0, ..ok.clone() }).contains("--prefill-passes 0: expected 1..=1000"));
        assert!(err(Settings { prefill_len: 4096, prefill_passes: 1001, ..ok.clone() }).contains("--prefill-passes 1001"));
        // Without a prefill measurement the pass count is not read.
        assert!(Settings { prefill_len: 0, prefill_passes: 0, ..ok.clone() }.validate().is_ok());
        // A session holds at least the decode's 196 positions, at most the context.
        assert!(Settings { session_tokens: 8192, ..ok.clone() }.validate().is_ok());
        assert_eq!(Settings { session_tokens: 8192, ..ok.clone() }.session_positions(), Some(8192));
        assert_eq!(ok.session_positions(), Some(196));
        assert!(err(Settings { session_tokens: 195, ..ok.clone() }).contains("--session-tokens 195: expected 196..=8192"));
        assert!(err(Settings { session_tokens: 8193, ..ok }).contains("--session-tokens 8193: expected 196..=8192"));
    }

    #[test]
    fn a_prefill_report_times_one_pass_and_names_its_kernels() {
        let be = crate::backends::open("cpu").unwrap();
        for moe in [false, true] {
            let shape = tiny(moe);
            let s = Settings { warmup: 1, prefill_len: 12, prefill_passes: 3, ..Settings::decode(3, 2, Quant::None) };
            let report = run(&be, &shape, &[1], &s).unwrap();
            let p = report.prefill.as_ref().expect("--prefill-len makes a prefill row");
            assert_eq!((p.prompt_len, p.passes_ms.len()), (12, 3));
            let mut sorted = p.passes_ms.clone();
            sorted.sort_by(f64::total_cmp);
            assert_eq!((p.ms_min, p.ms_median, p.ms_max), (sorted[0], sorted[1], sorted[2]));
            assert_eq!(p.tokens_per_s, 12.0 / (p.ms_median * 1e-3));
            assert_eq!(p.flops, prefill::prefill_flops(&shape.config().unwrap(), 12));
            assert_eq!(p.tflops(), p.flops.total() / (p.ms_median * 1e-3) / 1e12);
            // The same prompt on the same weights: the same token every pass.
            assert!(p.same_token);
            // One pass of 4 layers: the prefill attention once a layer, the
            // head once, the experts' two grouped GEMMs a layer with an MoE block.
            let count = |e: &str| p.launches.iter().find(|(n, _)| n == e).map_or(0, |(_, c)| *c);
            assert_eq!(count("attn::attention_prefill"), 4, "{:?}", p.launches);
            assert_eq!(count("attn::attention_decode"), 0);
            assert_eq!(count("head::lm_head_logits_bf16"), 1);
            assert_eq!(count("moe_expert::moe_grouped_gemm_bf16"), if moe { 8 } else { 0 });
            assert!(p.launches.windows(2).all(|w| w[0].1 >= w[1].1), "most launched first: {:?}", p.launches);
            let md = report.markdown();
            let row = format!("| 12 | {:.0} | {:.2} ({:.2}..{:.2}) |", p.tokens_per_s, p.ms_median, p.ms_min, p.ms_max);
            assert!(md.lines().any(|l| l.starts_with(&row) && l.ends_with("| yes |")), "{md}");
            assert!(md.contains(&format!("kernels of the first pass ({} launches): ", p.launch_count())), "{md}");
            assert!(md.contains("`attn::attention_prefill` x4"), "{md}");
            let j = &report.json()["prefill"];
            assert_eq!((j["prompt_len"].as_u64(), j["timed_passes"].as_u64(), j["warmup_passes"].as_u64()), (Some(12), Some(3), Some(2)));
            assert_eq!(j["tokens_per_s"].as_f64(), Some(p.tokens_per_s));
            assert_eq!(j["flops"]["total"].as_f64(), Some(p.flops.total()));
            assert_eq!(j["launches"][0]["count"].as_u64(), Some(p.launches[0].1 as u64));
            assert_eq!(j["same_token"], true);
        }
        // Without --prefill-len: no section, null in the JSON.
        let report = run(&be, &tiny(false), &[1], &Settings { warmup: 1, ..Settings::decode(3, 2, Quant::None) }).unwrap();
        assert!(
            report.prefill.is_none() && report.json()["prefill"].is_null() && !report.markdown().contains("prefill: one random prompt")
        );
    }

    #[test]
    fn under_tp_the_prefill_is_timed_but_not_traced() {
        let be = crate::backends::open("cpu").unwrap();
        let s = Settings { warmup: 1, prefill_len: 5, prefill_passes: 1, ..Settings::decode(3, 1, Quant::None) };
        let report = run_tp(&be, &tiny(true), &[1], &s, crate::backends::tp_ranks("cpu", 2).unwrap()).unwrap();
        let p = report.prefill.as_ref().unwrap();
        assert!(p.launches.is_empty() && p.tokens_per_s > 0.0 && p.same_token);
        assert!(report.markdown().contains("kernels: not traced"));
    }
}
