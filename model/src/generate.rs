//! Greedy generation: prefill the whole prompt in one pass, then decode one
//! token at a time through the paged KV cache, stopping at an EOS id or after
//! `max_new_tokens`.
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::graph::{Model, Session};
use std::time::Instant;

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
pub fn generate(model: &Model, req: &Request) -> Result<Generation> {
    check(&model.cfg, req)?;
    let mut t = Timings { prompt_tokens: req.prompt.len(), ..Default::default() };
    let mut out = Generation { tokens: Vec::new(), logits: Vec::new(), stopped_at_eos: false, timings: Timings::default() };
    if req.max_new_tokens == 0 {
        out.timings = t;
        return Ok(out);
    }
    // Cannot overflow: `check` bounded it by the context.
    let capacity = req.prompt.len() + req.max_new_tokens;
    let t0 = Instant::now();
    let mut session = Session::new(model, 1, capacity, req.prompt.len())?;
    t.setup_ms = ms(t0);

    let t0 = Instant::now();
    let mut row = session.prefill(0, &req.prompt, 0, req.want_logits)?;
    t.prefill_ms = ms(t0);

    let t0 = Instant::now();
    loop {
        out.tokens.push(row.token);
        if let Some(l) = row.logits.take() {
            out.logits.push(l);
        }
        if req.stop_at_eos && model.cfg.eos_token_ids.contains(&row.token) {
            out.stopped_at_eos = true;
            break;
        }
        if out.tokens.len() >= req.max_new_tokens {
            break;
        }
        // The token just chosen sits at the next position.
        let pos = req.prompt.len() + out.tokens.len() - 1;
        row = session.decode(&[row.token], &[pos], req.want_logits)?.remove(0);
        t.decode_steps += 1;
    }
    t.decode_ms = ms(t0);
    out.timings = t;
    Ok(out)
}

fn ms(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1e3
}
