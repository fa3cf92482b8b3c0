//! Generation: prefill the prompt (in passes of at most [`PREFILL_CHUNK`]
//! rows), then decode one token at a time through the paged KV cache,
//! stopping at an EOS id, when the caller says so, or after
//! `max_new_tokens`.
//!
//! [`generate`] is greedy; [`generate_with`] takes a [`Picker`] that chooses
//! each token (a [`crate::sampling::Sampler`], say) and an [`Observer`] that
//! sees prefill progress and each token as it is chosen (to stream text, or
//! to stop on a stop string).
//!
//! Both run on an [`Engine`]: a [`Model`] on one backend, or a
//! tensor-parallel [`crate::tp::group::TpGroup`].
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::graph::{Model, RowOut, Session};
use std::time::Instant;

/// Most prompt tokens in one prefill pass. A longer prompt is prefilled in
/// passes of this many rows (each attends to the KV the earlier ones wrote),
/// which bounds the activation buffers and lets a caller show progress; a
/// prompt up to this long is one pass, as before.
pub const PREFILL_CHUNK: usize = 512;

/// Runs passes over a KV cache: a [`Session`], or a tensor-parallel
/// group's ranks' sessions driven together.
pub trait Passes {
    /// See [`Session::prefill`].
    fn prefill(&mut self, seq: usize, tokens: &[u32], start: usize, want_logits: bool) -> Result<RowOut>;
    /// See [`Session::decode`].
    fn decode(&mut self, tokens: &[u32], positions: &[usize], want_logits: bool) -> Result<Vec<RowOut>>;
}

impl Passes for Session<'_> {
    fn prefill(&mut self, seq: usize, tokens: &[u32], start: usize, want_logits: bool) -> Result<RowOut> {
        Session::prefill(self, seq, tokens, start, want_logits)
    }

    fn decode(&mut self, tokens: &[u32], positions: &[usize], want_logits: bool) -> Result<Vec<RowOut>> {
        Session::decode(self, tokens, positions, want_logits)
    }
}

/// What generation runs on: a [`Model`] on one backend, or a
/// tensor-parallel group of them.
pub trait Engine {
    /// The whole model's config.
    fn config(&self) -> &ModelConfig;
    /// Passes over a fresh KV cache for `num_seqs` sequences of up to
    /// `max_tokens` tokens, in passes of up to `max_rows` rows (see [`Session::new`]).
    fn open(&self, num_seqs: usize, max_tokens: usize, max_rows: usize) -> Result<Box<dyn Passes + '_>>;
}

impl Engine for Model {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn open(&self, num_seqs: usize, max_tokens: usize, max_rows: usize) -> Result<Box<dyn Passes + '_>> {
        Ok(Box::new(Session::new(self, num_seqs, max_tokens, max_rows)?))
    }
}

/// Chooses each next token from a pass's output.
pub trait Picker {
    /// Whether [`Picker::pick`] reads the logits: they are then downloaded
    /// every step (`vocab × 4` bytes) and the decode step is not replayed
    /// from a recording.
    fn needs_logits(&self) -> bool;
    /// The next token, given the pass's output row and `history`: the prompt
    /// followed by every token generated so far.
    fn pick(&mut self, row: &RowOut, history: &[u32]) -> Result<u32>;
}

/// The device argmax, as it comes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Greedy;

impl Picker for Greedy {
    fn needs_logits(&self) -> bool {
        false
    }

    fn pick(&mut self, row: &RowOut, _history: &[u32]) -> Result<u32> {
        Ok(row.token)
    }
}

/// What to do after a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Go on.
    Continue,
    /// End the run after this token.
    Stop,
}

/// Sees a run as it goes.
pub trait Observer {
    /// `done` of `total` prompt tokens have been prefilled (called after each pass).
    fn prefill(&mut self, _done: usize, _total: usize) {}
    /// A token was chosen (before the EOS check: an EOS id is reported too).
    fn token(&mut self, _id: u32) -> Flow {
        Flow::Continue
    }
}

/// Sees nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quiet;

impl Observer for Quiet {}

/// What to generate.
#[derive(Clone, Debug)]
pub struct Request {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Most tokens to generate.
    pub max_new_tokens: usize,
    /// Keep each step's full logits (for `--json` and parity tests).
    pub want_logits: bool,
    /// Stop at the config's EOS ids (HF's default; off for fixed-length parity runs).
    pub stop_at_eos: bool,
}

/// Wall-clock timings of one generation (device work included: every step
/// ends in a download).
#[derive(Clone, Debug, Default)]
pub struct Timings {
    /// Session setup (KV cache, RoPE tables, scratch).
    pub setup_ms: f64,
    /// The prompt pass.
    pub prefill_ms: f64,
    /// All decode steps.
    pub decode_ms: f64,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Decode steps run.
    pub decode_steps: usize,
}

impl Timings {
    /// Decode tokens per second (0 when there were no decode steps).
    pub fn decode_tokens_per_s(&self) -> f64 {
        if self.decode_ms > 0.0 {
            self.decode_steps as f64 / (self.decode_ms / 1e3)
        } else {
            0.0
        }
    }

    /// Prompt tokens per second.
    pub fn prefill_tokens_per_s(&self) -> f64 {
        if self.prefill_ms > 0.0 {
            self.prompt_tokens as f64 / (self.prefill_ms / 1e3)
        } else {
            0.0
        }
    }
}

/// The result.
#[derive(Clone, Debug)]
pub struct Generation {
    /// Generated ids (the EOS id included when it stopped the run).
    pub tokens: Vec<u32>,
    /// Per generated token, the logits that chose it (when asked for).
    pub logits: Vec<Vec<f32>>,
    /// Whether an EOS id ended the run.
    pub stopped_at_eos: bool,
    /// Whether the [`Observer`] ended the run ([`Flow::Stop`]).
    pub stopped_by_caller: bool,
    /// Timings.
    pub timings: Timings,
}

/// Positions a run of `prompt` tokens plus up to `max_new_tokens` new ones
/// may occupy (`None` past `usize`). As in HF, the new tokens count against
/// the context even though the last one is never fed back.
pub fn positions_needed(prompt: usize, max_new_tokens: usize) -> Option<usize> {
    prompt.checked_add(max_new_tokens)
}

/// Whether `req` fits `cfg`: a non-empty prompt of in-vocabulary ids, and
/// prompt plus new tokens within the context. Checked before anything is
/// allocated, so that a request past the context is refused at once rather
/// than run for minutes (or sized into an impossible allocation).
pub fn check(cfg: &ModelConfig, req: &Request) -> Result<()> {
    let ctx = cfg.max_position_embeddings;
    if req.prompt.is_empty() {
        return Err(Error::Request("the prompt is empty".into()));
    }
    if let Some(t) = req.prompt.iter().find(|&&t| t as usize >= cfg.vocab_size) {
        return Err(Error::Request(format!("prompt token id {t} is outside the vocabulary (size {})", cfg.vocab_size)));
    }
    if req.prompt.len() > ctx {
        return Err(Error::Request(format!(
            "the prompt's {} tokens exceed the model's context of {ctx} positions (max_position_embeddings)",
            req.prompt.len()
        )));
    }
    match positions_needed(req.prompt.len(), req.max_new_tokens) {
        Some(n) if n <= ctx => Ok(()),
        n => Err(Error::Request(format!(
            "max_new_tokens = {} after a {}-token prompt needs {} positions, past the model's context of {ctx} (max_position_embeddings)",
            req.max_new_tokens,
            req.prompt.len(),
            n.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string())
        ))),
    }
}

/// Runs `req` greedily on `model`.
pub fn generate(model: &dyn Engine, req: &Request) -> Result<Generation> {
    generate_with(model, req, &mut Greedy, &mut Quiet)
}

/// Runs `req` on `model`, each token chosen by `picker`, the run reported
/// to `observer`.
pub fn generate_with(model: &dyn Engine, req: &Request, picker: &mut dyn Picker, observer: &mut dyn Observer) -> Result<Generation> {
    let cfg = model.config();
    check(cfg, req)?;
    let mut t = Timings { prompt_tokens: req.prompt.len(), ..Default::default() };
    let mut out =
        Generation { tokens: Vec::new(), logits: Vec::new(), stopped_at_eos: false, stopped_by_caller: false, timings: Timings::default() };
    if req.max_new_tokens == 0 {
        out.timings = t;
        return Ok(out);
    }
    let want_logits = req.want_logits || picker.needs_logits();
    // Cannot overflow: `check` bounded it by the context.
    let capacity = req.prompt.len() + req.max_new_tokens;
    let t0 = Instant::now();
    let mut session = model.open(1, capacity, req.prompt.len().min(PREFILL_CHUNK))?;
    t.setup_ms = ms(t0);

    let t0 = Instant::now();
    let n = req.prompt.len();
    let mut start = 0;
    let mut row = loop {
        let end = n.min(start + PREFILL_CHUNK);
        // Only the last pass's head output is used.
        let r = session.prefill(0, &req.prompt[start..end], start, end == n && want_logits)?;
        observer.prefill(end, n);
        if end == n {
            break r;
        }
        start = end;
    };
    t.prefill_ms = ms(t0);

    let mut history = Vec::with_capacity(capacity);
    history.extend_from_slice(&req.prompt);
    let t0 = Instant::now();
    loop {
        let token = picker.pick(&row, &history)?;
        history.push(token);
        out.tokens.push(token);
        if let Some(l) = row.logits.take().filter(|_| req.want_logits) {
            out.logits.push(l);
        }
        if observer.token(token) == Flow::Stop {
            out.stopped_by_caller = true;
            break;
        }
        if req.stop_at_eos && cfg.eos_token_ids.contains(&token) {
            out.stopped_at_eos = true;
            break;
        }
        if out.tokens.len() >= req.max_new_tokens {
            break;
        }
        // The token just chosen sits at the next position.
        let pos = req.prompt.len() + out.tokens.len() - 1;
        row = session.decode(&[token], &[pos], want_logits)?.remove(0);
        t.decode_steps += 1;
    }
    t.decode_ms = ms(t0);
    out.timings = t;
    Ok(out)
}

fn ms(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1e3
}
