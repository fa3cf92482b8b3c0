//! `switchyard bench-model`: decode throughput of a Gemma-4-shaped model
//! with random weights made on the device, set against the memory-bandwidth
//! bound measured in the same run.
//!
//! Decode reads every weight once per step, whatever the batch, so the
//! fastest a step can run on a backend is (weight bytes) / (copy bandwidth).
//! The copy bandwidth is [`bench::copy_ceilings`]: the faster of the
//! driver's device-to-device copy and the `copy_u32` kernel, counting read
//! and write bytes. A step at batch B yields B tokens, so the bound in
//! tokens per second is B · copy bandwidth / weight bytes. The KV cache
//! reads are not in the bound. At a ~128-token context they are well under
//! 1% of the weight bytes and are reported apart.
//!
//! The weights are never built on the host. One random bf16 block (64 MiB at
//! most) is uploaded once and copied on the device into every weight buffer.
//! So a 7 GB model costs one 64 MiB upload and some device copies. Values
//! are uniform with standard deviation 1/sqrt(hidden). That keeps every
//! projection O(1), and with the norms between sublayers the logits stay
//! finite (the argmax needs them finite). Norm weights are 1 and so is
//! `layer_scalar`. Random values do not change how fast a kernel runs.
use crate::bench;
use crate::synthetic::Spec;
use anyhow::{bail, Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Instant;
use switchyard_core::codec::{bf16_bits, bytes};
use switchyard_core::{Backend, DeviceBuffer};
use switchyard_kernels::Ops;
use switchyard_model::config::{LayerKind, ModelConfig};
use switchyard_model::graph::{Model, Session};
use switchyard_model::quant::Quant;
use switchyard_model::tensors::{ModelTensors, TensorKind, TensorSpec};
use switchyard_model::weights::{AttnProj, Embedding, Experts, Linear, WeightSource, Weights};

/// The benchmark model's shape. [`Shape::gemma4`] gives the defaults.
#[derive(Clone, Debug)]
pub struct Shape {
    /// Decoder layers.
    pub layers: usize,
    /// Residual width.
    pub hidden: usize,
    /// Dense MLP intermediate size.
    pub intermediate: usize,
    /// Query heads.
    pub heads: usize,
    /// KV heads on sliding layers.
    pub kv_heads: usize,
    /// head_dim on sliding layers.
    pub head_dim: usize,
    /// head_dim on full layers.
    pub global_head_dim: usize,
    /// KV heads on full layers (V = K there: `attention_k_eq_v`).
    pub global_kv_heads: usize,
    /// `sliding_window`.
    pub window: usize,
    /// Vocabulary (the tied table the LM head reads whole every step).
    pub vocab: usize,
}

impl Shape {
    /// A Gemma-4-like dense text decoder with `layers` layers of width
    /// `hidden`, the Gemma 3/4 proportions: intermediate 4·hidden, one query
    /// head per 320 of width (8 at 2560), half as many KV heads, head_dim 256
    /// on sliding layers; five sliding layers (window 512) to one full layer,
    /// last layer full; full layers head_dim 512 with a quarter of the query
    /// heads as KV heads and V = K (k_eq_v), partial rotary 0.25; the 262144-token
    /// Gemma vocabulary. At 30 × 2560 that is 2.87 B layer parameters plus
    /// a 0.67 B embedding, 7.08 GB of bf16.
    pub fn gemma4(layers: usize, hidden: usize) -> Self {
        let heads = (hidden / 320).max(1);
        Shape {
            layers,
            hidden,
            intermediate: 4 * hidden,
            heads,
            kv_heads: (heads / 2).max(1),
            head_dim: 256,
            global_head_dim: 512,
            global_kv_heads: (heads / 4).max(1),
            window: 512,
            vocab: 262_144,
        }
    }

    /// As a synthetic checkpoint spec (its `config()` is the HF `config.json`
    /// that `scripts/hf_decode_bench.py` can load).
    pub fn spec(&self) -> Spec {
        Spec {
            vocab: self.vocab,
            hidden: self.hidden,
            intermediate: self.intermediate,
            full: (0..self.layers).map(|i| (i + 1) % 6 == 0 || i + 1 == self.layers).collect(),
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            global_head_dim: self.global_head_dim,
            global_kv_heads: self.global_kv_heads,
            k_eq_v: true,
            window: self.window,
            softcap: Some(30.0),
            moe: None,
            partial_rotary_factor: 0.25,
            explicit_per_layer: false,
            seed: 0,
        }
    }

    /// The HF `config.json` of this shape.
    pub fn hf_config(&self) -> serde_json::Value {
        let mut c = self.spec().config();
        // The synthetic spec's 256 is a tiny-model value; HF's static cache
        // and RoPE should see a realistic context limit.
        c["max_position_embeddings"] = serde_json::json!(crate::limits::BENCH_MODEL_CONTEXT);
        c
    }

    /// The validated config (through the same parser a checkpoint goes through).
    pub fn config(&self) -> Result<ModelConfig> {
        if self.layers == 0 || self.hidden == 0 || self.vocab == 0 {
            bail!("--layers, --hidden and --vocab must be at least 1");
        }
        let v = self.hf_config();
        let obj = v.as_object().context("the synthetic config is not an object")?;
        Ok(ModelConfig::from_value(obj)?)
    }
}

/// Bytes of one random block that every weight is copied from.
const BLOCK_BYTES: usize = 64 << 20;

/// Fills device weights from one random block.
struct Filler {
    be: Arc<dyn Backend>,
    block: DeviceBuffer,
    bytes: usize,
    /// Bytes of weights made so far.
    placed: std::cell::Cell<usize>,
}

impl Filler {
    fn new(be: &Arc<dyn Backend>, largest: usize, hidden: usize) -> Result<Self> {
        let bytes = largest.min(BLOCK_BYTES).next_multiple_of(4);
        // Uniform on ±a has standard deviation a/sqrt(3).
        let a = (3.0 / hidden as f32).sqrt();
        let mut rng = SmallRng::seed_from_u64(0x6e77a4);
        let data: Vec<u8> = (0..bytes / 2).flat_map(|_| bf16_bits(rng.random_range(-a..a)).to_le_bytes()).collect();
        Ok(Filler { be: be.clone(), block: DeviceBuffer::from_bytes(be, &data)?, bytes, placed: Default::default() })
    }

    /// A `bytes`-long buffer of random bf16 values.
    fn random(&self, bytes: usize) -> switchyard_model::error::Result<DeviceBuffer> {
        self.placed.set(self.placed.get() + bytes);
        let buf = DeviceBuffer::new(&self.be, bytes)?;
        let mut off = 0;
        while off < bytes {
            let n = self.bytes.min(bytes - off);
            self.be.copy(buf.at(off)?, self.block.addr(), n)?;
            off += n;
        }
        Ok(buf)
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
        let (n, k) = (t.shape[0], t.shape[1]);
        Ok(Linear::Bf16 { w: self.random(2 * n * k)?, n, k })
    }

    fn gate_up(&mut self, gate: &TensorSpec, up: &TensorSpec) -> switchyard_model::error::Result<Linear> {
        let (n, k) = (gate.shape[0] + up.shape[0], gate.shape[1]);
        Ok(Linear::Bf16 { w: self.random(2 * n * k)?, n, k })
    }

    /// Stacked, as the checkpoint loader stores bf16 attention projections.
    fn attention(&mut self, q: &TensorSpec, k: &TensorSpec, v: Option<&TensorSpec>) -> switchyard_model::error::Result<AttnProj> {
        let n = [q.shape[0], k.shape[0], v.map_or(0, |v| v.shape[0])];
        let cols = q.shape[1];
        Ok(AttnProj::Stacked { w: self.random(2 * n.iter().sum::<usize>() * cols)?, n, k: cols })
    }

    fn experts(&mut self, t: &TensorSpec) -> switchyard_model::error::Result<Experts> {
        Ok(Experts::bf16(self.random(2 * element_count(t))?))
    }

    fn embedding(&mut self, t: &TensorSpec) -> switchyard_model::error::Result<Embedding> {
        Ok(Embedding::Bf16(self.random(2 * element_count(t))?))
    }

    fn device_bytes(&self) -> usize {
        self.placed.get()
    }
}

/// Elements of a tensor of a config that already fit in memory.
fn element_count(t: &TensorSpec) -> usize {
    t.shape.iter().product()
}

/// Makes a model of `cfg` on `be` with random weights, without a checkpoint.
pub fn random_model(be: &Arc<dyn Backend>, cfg: ModelConfig) -> Result<Model> {
    let (h, inter, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let largest = (v * h).max(2 * inter * h) * 2;
    if cfg.moe.is_some() {
        bail!("the decode benchmark model is dense (no MoE block)");
    }
    let mut fill = Filler::new(be, largest, h)?;
    let weights = Weights::assemble(&ModelTensors::of(&cfg), &mut fill)?;
    be.synchronize()?;
    Ok(Model { cfg, weights, ops: Ops::new(be.clone()), quant: Quant::None })
}

/// Bytes of weights one decode step reads: every matrix and norm once, and
/// the whole tied table (the LM head scores every vocabulary row; the
/// embedding gather's B rows are negligible and not counted).
pub fn weight_bytes(cfg: &ModelConfig) -> usize {
    ModelTensors::of(cfg).all().into_iter().map(|t| element_count(t) * t.kind.device_bytes_per_element()).sum()
}

/// KV-cache bytes the attention of one decode step reads for one sequence
/// whose new token sits at position `pos` (K and V, each layer's window).
pub fn kv_bytes(cfg: &ModelConfig, pos: usize) -> usize {
    cfg.layers
        .iter()
        .map(|l| {
            let ctx = if l.kind == LayerKind::Sliding { (pos + 1).min(l.window) } else { pos + 1 };
            2 * ctx * l.num_kv_heads * l.head_dim * 2
        })
        .sum()
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
}

impl Settings {
    /// Positions each sequence occupies: the prompt, every decode step, and
    /// the token the last step chooses (`None` past `usize`).
    pub fn positions(&self) -> Option<usize> {
        self.prompt_len.checked_add(self.warmup)?.checked_add(self.steps)?.checked_add(1)
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
    /// Fastest and slowest step, ms.
    pub step_ms_min: f64,
    /// Slowest step, ms.
    pub step_ms_max: f64,
    /// Tokens per second over all timed steps (batch · steps / total time).
    pub tokens_per_s: f64,
    /// KV-cache bytes read by the last timed step (all sequences).
    pub kv_bytes_per_step: usize,
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
pub fn run_batch(model: &Model, batch: usize, s: &Settings, seed: u64) -> Result<Row> {
    if batch == 0 || s.prompt_len == 0 || s.steps == 0 {
        bail!("batch, prompt length and steps must be at least 1");
    }
    let total = s.positions().context("prompt length + steps overflow a position count")?;
    let mut times = Vec::new();
    times.try_reserve_exact(s.steps).map_err(|e| anyhow::anyhow!("cannot hold {} step timings: {e}", s.steps))?;
    let mut session = Session::new(model, batch, total, s.prompt_len).context("allocating the session")?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let v = model.cfg.vocab_size as u32;
    let t0 = Instant::now();
    let mut next = Vec::with_capacity(batch);
    for b in 0..batch {
        let prompt: Vec<u32> = (0..s.prompt_len).map(|_| rng.random_range(0..v)).collect();
        next.push(session.prefill(b, &prompt, 0, false).with_context(|| format!("prefill of sequence {b}"))?.token);
    }
    let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut pos = s.prompt_len;
    for step in 0..s.warmup + s.steps {
        let positions = vec![pos; batch];
        // Each step ends in a download of the chosen tokens, so the wall
        // clock covers the device work.
        let t = Instant::now();
        let out = session.decode(&next, &positions, false).with_context(|| format!("decode step {step}"))?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        if step >= s.warmup {
            times.push(ms);
        }
        next = out.into_iter().map(|r| r.token).collect();
        pos += 1;
    }
    let sum: f64 = times.iter().sum();
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(Row {
        batch,
        prefill_ms,
        step_ms_median: sorted[sorted.len() / 2],
        step_ms_min: sorted[0],
        step_ms_max: sorted[sorted.len() - 1],
        tokens_per_s: (batch * times.len()) as f64 / (sum / 1e3),
        kv_bytes_per_step: batch * kv_bytes(&model.cfg, pos - 1),
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
    /// Weight bytes read per decode step.
    pub weight_bytes: usize,
    /// Copy bandwidth (read + write bytes per second) and how it was measured.
    pub copy: bench::CopyCeilings,
    /// Model creation (random weights on the device), ms.
    pub build_ms: f64,
    /// Settings used.
    pub settings: Settings,
    /// One row per batch size.
    pub rows: Vec<Row>,
}

impl Report {
    /// Tokens per second the bandwidth allows at `batch`: one step moves the
    /// weights once and yields `batch` tokens.
    pub fn bound_tokens_per_s(&self, batch: usize) -> f64 {
        batch as f64 * self.copy.best() / self.weight_bytes as f64
    }

    /// The markdown table.
    pub fn markdown(&self) -> String {
        use std::fmt::Write as _;
        let sh = &self.shape;
        let mut s = String::new();
        let _ = writeln!(s, "bench-model: backend `{}` on {}", self.backend, self.device);
        let _ = writeln!(
            s,
            "- model: Gemma-4-shaped, random bf16 weights made on the device: {} layers (sliding:full 5:1, last full), hidden {}, \
             intermediate {}, {} query heads; sliding head_dim {} with {} KV heads, window {}; full head_dim {} with {} KV heads, V = K; \
             vocab {}; {:.2} GB of weights read per decode step",
            sh.layers,
            sh.hidden,
            sh.intermediate,
            sh.heads,
            sh.head_dim,
            sh.kv_heads,
            sh.window,
            sh.global_head_dim,
            sh.global_kv_heads,
            sh.vocab,
            self.weight_bytes as f64 / 1e9
        );
        let _ = writeln!(s, "- copy ceiling: {:.1} GB/s ({})", self.copy.best() / 1e9, self.copy.describe());
        let _ = writeln!(
            s,
            "- each sequence: {} random prompt tokens prefilled, {} warm-up steps, then {} timed decode steps (weights made in {:.0} ms)\n",
            self.settings.prompt_len, self.settings.warmup, self.settings.steps, self.build_ms
        );
        s.push_str(
            "| batch | tokens/s | ms/token | ms/step (median, min..max) | weight MB/token | bound tokens/s | % of bound | KV MB/step | prefill ms |\n\
             |---|---|---|---|---|---|---|---|---|\n",
        );
        for r in &self.rows {
            let bound = self.bound_tokens_per_s(r.batch);
            let _ = writeln!(
                s,
                "| {} | {:.1} | {:.3} | {:.3} ({:.3}..{:.3}) | {:.1} | {:.1} | {:.0}% | {:.1} | {:.1} |",
                r.batch,
                r.tokens_per_s,
                r.ms_per_token(),
                r.step_ms_median,
                r.step_ms_min,
                r.step_ms_max,
                self.weight_bytes as f64 / r.batch as f64 / 1e6,
                bound,
                100.0 * r.tokens_per_s / bound,
                r.kv_bytes_per_step as f64 / 1e6,
                r.prefill_ms
            );
        }
        s
    }

    /// The JSON document (`--json`), with the HF config of the shape.
    pub fn json(&self) -> serde_json::Value {
        let rows: Vec<_> = self
            .rows
            .iter()
            .map(|r| {
                let bound = self.bound_tokens_per_s(r.batch);
                serde_json::json!({
                    "batch": r.batch, "tokens_per_s": r.tokens_per_s, "ms_per_token": r.ms_per_token(),
                    "step_ms_median": r.step_ms_median, "step_ms_min": r.step_ms_min, "step_ms_max": r.step_ms_max,
                    "weight_bytes_per_token": self.weight_bytes as f64 / r.batch as f64,
                    "bound_tokens_per_s": bound, "fraction_of_bound": r.tokens_per_s / bound,
                    "kv_bytes_per_step": r.kv_bytes_per_step, "prefill_ms": r.prefill_ms,
                })
            })
            .collect();
        serde_json::json!({
            "backend": self.backend, "device": self.device,
            "weight_bytes_per_step": self.weight_bytes,
            "copy_gb_per_s": self.copy.best() / 1e9, "copy_note": self.copy.describe(),
            "prompt_len": self.settings.prompt_len, "warmup_steps": self.settings.warmup, "timed_steps": self.settings.steps,
            "build_ms": self.build_ms, "rows": rows, "hf_config": self.shape.hf_config(),
        })
    }
}

/// Measures the copy ceiling, builds the model, and decodes at each batch size.
pub fn run(be: &Arc<dyn Backend>, shape: &Shape, batches: &[usize], s: &Settings) -> Result<Report> {
    let cfg = shape.config().context("the benchmark shape")?;
    if let Some(&b) = batches.iter().find(|&&b| b == 0) {
        bail!("--batch {b}: batch sizes must be at least 1");
    }
    let ops = Ops::new(be.clone());
    // The ceiling first, while its two buffers still fit beside nothing else.
    // 1 GiB where the backend binds that much; an adapter whose storage
    // bindings are smaller (lavapipe: 128 MiB) gets the largest size that works.
    let sizes: &[usize] =
        if be.kind() == switchyard_core::BackendKind::Cpu { &[64 << 20] } else { &[1 << 30, 512 << 20, 256 << 20, 128 << 20, 64 << 20] };
    let mut copy = Err(anyhow::anyhow!("no copy size tried"));
    for &bytes in sizes {
        copy = bench::copy_ceilings(&ops, &bench::Settings::default(), bytes);
        if copy.is_ok() {
            break;
        }
    }
    let copy = copy.context("measuring the copy ceiling")?;
    let t0 = Instant::now();
    let model = random_model(be, cfg).context("making the random-weight model")?;
    let build_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut rows = Vec::with_capacity(batches.len());
    for (i, &b) in batches.iter().enumerate() {
        rows.push(run_batch(&model, b, s, i as u64).with_context(|| format!("--batch {b}"))?);
    }
    Ok(Report {
        backend: be.name().to_string(),
        device: be.info().device,
        shape: shape.clone(),
        weight_bytes: model.weights.device_bytes,
        copy,
        build_ms,
        settings: s.clone(),
        rows,
    })
}
