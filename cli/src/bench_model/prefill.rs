//! `bench-model --prefill-len P`: the time of one prefill pass of a
//! P-token prompt (one sequence, all P rows in one pass, as a prompt of up
//! to the session's rows is run), against the FLOPs that pass must do.
//!
//! Prefill is compute-bound, so its yardstick is arithmetic, not bytes:
//! [`prefill_flops`] counts the multiply-adds of the linear layers over
//! every row (the experts each row is routed to, `top_k` of `E`, not all
//! of them), the attention scores and weighted sums over the keys each row
//! sees (causal, or its sliding window), and the LM head over the one row a
//! prefill scores. The achieved rate is those FLOPs over the measured time.
//!
//! The first warm-up pass runs under a [`Traced`] backend, which names the
//! kernel entry each launch takes (on CUDA, the entries its plan picks from
//! the launch's arguments and the device's facts: the wgmma GEMM, the flash
//! prefill attention, the grouped expert GEMM), so the report shows which
//! kernels a prefill at this size really runs.
use super::Settings;
use anyhow::{bail, Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use switchyard_core::{Arg, Backend, BackendInfo, BackendKind, KernelSig, Recording};
use switchyard_model::config::ModelConfig;
use switchyard_model::generate::Engine;
use switchyard_model::tensors::{ModelTensors, TensorKind};

/// Untimed passes before the timed ones: the first compiles and loads the
/// kernels the pass needs (and is the traced one), the second sees them warm.
pub const WARMUP_PASSES: usize = 2;

/// The FLOP count's rule in words, for the reports.
pub const FLOPS_RULE: &str = "FLOPs per pass = 2 · P · (every linear weight's elements, the routed experts' as top_k/E of the \
     stacked tensors) + attention 4 · heads · head_dim · (keys each row sees: causal, or the sliding window) summed over rows \
     and layers + the LM head 2 · vocab · hidden for the one row a prefill scores; the embedding gather, norms, RoPE and \
     routing are not counted";

/// FLOPs of one prefill pass of `prompt_len` rows, in parts ([`FLOPS_RULE`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PrefillFlops {
    /// Rows in the pass.
    pub prompt_len: usize,
    /// Linear layers over every row (attention projections, dense MLP,
    /// router, the routed experts).
    pub linear: f64,
    /// Q·Kᵀ and P·V over the keys each row sees.
    pub attention: f64,
    /// The LM head over the last row.
    pub head: f64,
}

impl PrefillFlops {
    /// All of the pass.
    pub fn total(&self) -> f64 {
        self.linear + self.attention + self.head
    }

    /// Per prompt token (the pass's FLOPs over its rows).
    pub fn per_token(&self) -> f64 {
        self.total() / self.prompt_len.max(1) as f64
    }
}

/// `x` with at least three significant digits and no exponent (23512,
/// 151, 1.37, 0.00113): the FLOP figures of a real shape and of a test's
/// tiny one in the same columns.
pub fn sig3(x: f64) -> String {
    let digits = if x.is_finite() && x != 0.0 { x.abs().log10().floor() as i32 } else { 0 };
    format!("{x:.*}", (2 - digits).clamp(0, 12) as usize)
}

/// Key-query pairs of a prefill of `rows` rows at positions `0..rows`: row
/// `i` sees keys `0..=i`, or only the last `window` of them when sliding.
pub fn visible_pairs(rows: usize, window: usize) -> u64 {
    let (n, w) = (rows as u64, window as u64);
    // The rows before the window fills see 1, 2, .., w keys; the rest w each.
    if window == 0 || w >= n {
        n * (n + 1) / 2
    } else {
        w * (w + 1) / 2 + (n - w) * w
    }
}

/// The FLOPs one prefill pass of `prompt_len` rows of `cfg` does ([`FLOPS_RULE`]).
pub fn prefill_flops(cfg: &ModelConfig, prompt_len: usize) -> PrefillFlops {
    let tensors = ModelTensors::of(cfg);
    let routed = cfg.moe.map_or(0.0, |m| m.top_k as f64 / m.num_experts.max(1) as f64);
    let per_row: f64 = tensors
        .all()
        .iter()
        .map(|t| {
            let n = t.shape.iter().product::<usize>() as f64;
            match t.kind {
                TensorKind::Linear => n,
                TensorKind::Experts => n * routed,
                _ => 0.0,
            }
        })
        .sum();
    let p = prompt_len as f64;
    let attention = cfg
        .layers
        .iter()
        .map(|l| {
            // Both matmuls (scores, weighted sum) are head_dim multiply-adds per pair.
            4.0 * cfg.num_heads as f64 * l.head_dim as f64 * visible_pairs(prompt_len, l.window) as f64
        })
        .sum();
    PrefillFlops {
        prompt_len,
        linear: 2.0 * p * per_row,
        attention,
        head: if prompt_len > 0 { 2.0 * cfg.vocab_size as f64 * cfg.hidden_size as f64 } else { 0.0 },
    }
}

/// A backend that forwards everything to `inner` and, while tracing is on,
/// notes the kernel entry (or entries) each launch runs.
pub struct Traced {
    inner: Arc<dyn Backend>,
    on: AtomicBool,
    log: Mutex<Vec<String>>,
}

impl Traced {
    /// Wraps `inner`; tracing starts off.
    pub fn new(inner: Arc<dyn Backend>) -> Arc<Self> {
        Arc::new(Traced { inner, on: AtomicBool::new(false), log: Mutex::new(Vec::new()) })
    }

    /// Starts noting launches (forgetting any noted before).
    pub fn start(&self) {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.on.store(true, Ordering::SeqCst);
    }

    /// Stops noting launches; returns each entry with its launch count,
    /// most launched first (first launched first among equals).
    pub fn stop(&self) -> Vec<(String, usize)> {
        self.on.store(false, Ordering::SeqCst);
        let log = std::mem::take(&mut *self.log.lock().unwrap_or_else(|e| e.into_inner()));
        let mut counts: Vec<(String, usize)> = Vec::new();
        for name in log {
            match counts.iter_mut().find(|(n, _)| *n == name) {
                Some((_, c)) => *c += 1,
                None => counts.push((name, 1)),
            }
        }
        // A stable sort keeps the launch order among equal counts.
        counts.sort_by_key(|c| std::cmp::Reverse(c.1));
        counts
    }

    /// What `sig` with `args` runs: on CUDA, the `module::entry` of each
    /// pass its plan picks (the same plan function and device facts the
    /// backend launches with); elsewhere the catalogue's `module::symbol`.
    fn entries(&self, sig: &'static KernelSig, args: &[Arg]) -> Vec<String> {
        #[cfg(feature = "cuda")]
        if let Some(cuda) = self.inner.extension().and_then(|e| e.downcast_ref::<switchyard_cuda::CudaBackend>()) {
            use switchyard_kernels::plan::{cuda_entry, cuda_kernel, PlanArgs};
            if let Some(Ok(plan)) = cuda_kernel(sig).map(|k| (k.plan)(&PlanArgs::new(sig, args), &cuda.device_facts())) {
                return plan
                    .passes
                    .iter()
                    .map(|p| {
                        let (module, entry) = cuda_entry(sig.module, p.entry);
                        format!("{module}::{entry}")
                    })
                    .collect();
            }
        }
        let _ = args;
        vec![format!("{}::{}", sig.module, sig.symbol)]
    }

    fn note(&self, sig: &'static KernelSig, args: &[Arg]) {
        if self.on.load(Ordering::Relaxed) {
            let names = self.entries(sig, args);
            self.log.lock().unwrap_or_else(|e| e.into_inner()).extend(names);
        }
    }
}

impl Backend for Traced {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn info(&self) -> BackendInfo {
        self.inner.info()
    }
    fn alloc(&self, bytes: usize) -> switchyard_core::Result<u64> {
        self.inner.alloc(bytes)
    }
    fn free(&self, addr: u64) -> switchyard_core::Result<()> {
        self.inner.free(addr)
    }
    fn upload(&self, dst: u64, data: &[u8]) -> switchyard_core::Result<()> {
        self.inner.upload(dst, data)
    }
    fn download(&self, src: u64, out: &mut [u8]) -> switchyard_core::Result<()> {
        self.inner.download(src, out)
    }
    fn memset0(&self, dst: u64, bytes: usize) -> switchyard_core::Result<()> {
        self.inner.memset0(dst, bytes)
    }
    fn copy(&self, dst: u64, src: u64, bytes: usize) -> switchyard_core::Result<()> {
        self.inner.copy(dst, src, bytes)
    }
    fn check_range(&self, addr: u64, bytes: usize) -> std::result::Result<(), String> {
        self.inner.check_range(addr, bytes)
    }
    fn enqueue(&self, kernel: &'static KernelSig, args: &[Arg]) -> switchyard_core::Result<()> {
        self.note(kernel, args);
        self.inner.enqueue(kernel, args)
    }
    /// The inner backend's own checks, then its enqueue.
    fn launch(&self, kernel: &'static KernelSig, args: &[Arg]) -> switchyard_core::Result<()> {
        self.note(kernel, args);
        self.inner.launch(kernel, args)
    }
    fn record(&self, work: &mut dyn FnMut() -> switchyard_core::Result<()>) -> switchyard_core::Result<Recording> {
        self.inner.record(work)
    }
    fn replay(&self, recording: &Recording) -> switchyard_core::Result<()> {
        self.inner.replay(recording)
    }
    fn synchronize(&self) -> switchyard_core::Result<()> {
        self.inner.synchronize()
    }
    fn time_ms(&self, work: &mut dyn FnMut() -> switchyard_core::Result<()>) -> switchyard_core::Result<f64> {
        self.inner.time_ms(work)
    }
    fn profiler_range(&self, on: bool) -> switchyard_core::Result<()> {
        self.inner.profiler_range(on)
    }
    fn live_bytes(&self) -> usize {
        self.inner.live_bytes()
    }
    fn extension(&self) -> Option<&dyn std::any::Any> {
        self.inner.extension()
    }
}

/// The prefill measurement.
#[derive(Clone, Debug)]
pub struct PrefillRow {
    /// Prompt tokens, all in one pass.
    pub prompt_len: usize,
    /// Each timed pass, ms (wall clock, the pass's uploads to the head's
    /// token download).
    pub passes_ms: Vec<f64>,
    /// Median pass, ms.
    pub ms_median: f64,
    /// Fastest pass, ms.
    pub ms_min: f64,
    /// Slowest pass, ms.
    pub ms_max: f64,
    /// Prompt tokens per second at the median pass.
    pub tokens_per_s: f64,
    /// What the pass computes.
    pub flops: PrefillFlops,
    /// Kernel entries of the first warm-up pass with their launch counts
    /// (empty under `--tp`, where each rank runs its own backend).
    pub launches: Vec<(String, usize)>,
    /// Whether every pass (warm-up and timed) chose the same next token:
    /// the prompt and weights are the same, so a deterministic pass does.
    pub same_token: bool,
}

impl PrefillRow {
    /// FLOP/s at the median pass, in TFLOP/s.
    pub fn tflops(&self) -> f64 {
        self.flops.total() / (self.ms_median * 1e-3) / 1e12
    }

    /// Launches of the traced pass, all entries.
    pub fn launch_count(&self) -> usize {
        self.launches.iter().map(|(_, c)| c).sum()
    }
}

/// Prefills one random prompt of `s.prefill_len` tokens in one pass:
/// [`WARMUP_PASSES`] untimed (the first traced when `trace` is given), then
/// `s.prefill_passes` timed, each from position 0 over the same KV slots.
pub fn run_prefill(model: &dyn Engine, trace: Option<&Traced>, s: &Settings, seed: u64) -> Result<PrefillRow> {
    let (p, passes) = (s.prefill_len, s.prefill_passes);
    if p == 0 || passes == 0 {
        bail!("the prefill length and pass count must be at least 1");
    }
    let mut session = model.open(1, p, p).context("allocating the prefill session")?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let v = model.config().vocab_size as u32;
    let prompt: Vec<u32> = (0..p).map(|_| rng.random_range(0..v)).collect();
    let mut tokens = Vec::with_capacity(WARMUP_PASSES + passes);
    let mut launches = Vec::new();
    for pass in 0..WARMUP_PASSES {
        let traced = trace.filter(|_| pass == 0);
        if let Some(t) = traced {
            t.start();
        }
        let out = session.prefill(0, &prompt, 0, false);
        if let Some(t) = traced {
            launches = t.stop();
        }
        tokens.push(out.with_context(|| format!("warm-up prefill pass {pass} of {p} tokens"))?.token);
    }
    let mut passes_ms = Vec::with_capacity(passes);
    for pass in 0..passes {
        // The pass ends in a download of the chosen token, so the wall clock covers the device work.
        let t = Instant::now();
        let out = session.prefill(0, &prompt, 0, false).with_context(|| format!("timed prefill pass {pass} of {p} tokens"))?;
        passes_ms.push(t.elapsed().as_secs_f64() * 1e3);
        tokens.push(out.token);
    }
    let mut sorted = passes_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let ms_median = sorted[sorted.len() / 2];
    Ok(PrefillRow {
        prompt_len: p,
        ms_median,
        ms_min: sorted[0],
        ms_max: sorted[sorted.len() - 1],
        tokens_per_s: p as f64 / (ms_median * 1e-3),
        passes_ms,
        flops: prefill_flops(model.config(), p),
        launches,
        same_token: tokens.windows(2).all(|w| w[0] == w[1]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_model::Shape;
    use switchyard_kernels::attn::visible_keys;

    /// bench_model's tiny MoE test shape.
    fn small() -> ModelConfig {
        crate::bench_model::tests::tiny(true).config().unwrap()
    }

    #[test]
    fn visible_pairs_sum_the_keys_each_row_sees() {
        for window in [0, 1, 3, 4, 12, 13, 100] {
            for rows in [0, 1, 2, 5, 12, 13, 40] {
                let by_row: usize = (0..rows).map(|i| visible_keys(i + 1, window)).sum();
                assert_eq!(visible_pairs(rows, window), by_row as u64, "rows {rows} window {window}");
            }
        }
        // 4096 causal rows; a 1024 window.
        assert_eq!(visible_pairs(4096, 0), 4096 * 4097 / 2);
        assert_eq!(visible_pairs(4096, 1024), 1024 * 1025 / 2 + 3072 * 1024);
    }

    #[test]
    fn prefill_flops_match_a_hand_count() {
        let f = prefill_flops(&small(), 12);
        // Linear elements per row, by hand:
        //   sliding layer: q 64·64, k and v 32·64 each, o 64·64, MLP 3·96·64,
        //     router 4·64, experts (gate_up 4·64·64 + down 4·64·32) · 2/4
        //     = 4096 + 4096 + 4096 + 18432 + 256 + 12288 = 43264;
        //   full layer (head_dim 32, V = K): q 128·64, k 64·64, o 64·128,
        //     MLP, router, experts = 8192 + 4096 + 8192 + 18432 + 256 + 12288 = 51456.
        assert_eq!(f.linear, 2.0 * 12.0 * (3.0 * 43264.0 + 51456.0));
        // Attention: sliding rows see 1, 2, 3, 4, 4, .. keys (42 pairs in 12
        // rows), full rows 1..=12 (78 pairs); 4 · heads · head_dim per pair.
        assert_eq!(f.attention, 3.0 * 4.0 * 4.0 * 16.0 * 42.0 + 4.0 * 4.0 * 32.0 * 78.0);
        // The head scores one row.
        assert_eq!(f.head, 2.0 * 256.0 * 64.0);
        assert_eq!(f.total(), f.linear + f.attention + f.head);
        assert_eq!(f.per_token(), f.total() / 12.0);
        assert_eq!(prefill_flops(&small(), 0).total(), 0.0);
    }

    #[test]
    fn the_26b_a4b_prefill_counts_its_active_parameters() {
        // 3.8 B active parameters a token, of which the 0.74 B table is
        // gathered, not multiplied: about 2 · 3.06 B FLOPs a row in the
        // linear layers.
        let cfg = Shape::gemma4_26b_a4b().config().unwrap();
        let f = prefill_flops(&cfg, 4096);
        let per_row = f.linear / 4096.0 / 2.0;
        let table = 262_144.0 * 2816.0;
        assert!((3.78e9 - table..3.86e9 - table).contains(&per_row), "{per_row}");
        // Full layers (5 of 30): 16 heads · head_dim 512 · 4096·4097/2 pairs · 4;
        // sliding layers: head_dim 256 over a 1024 window.
        let full = 5.0 * 4.0 * 16.0 * 512.0 * (4096.0 * 4097.0 / 2.0);
        let sliding = 25.0 * 4.0 * 16.0 * 256.0 * (1024.0 * 1025.0 / 2.0 + 3072.0 * 1024.0);
        assert_eq!(f.attention, full + sliding);
    }

    #[test]
    fn sig3_keeps_three_significant_digits() {
        assert_eq!(sig3(23512.4), "23512");
        assert_eq!(sig3(151.04), "151");
        assert_eq!(sig3(1.3742), "1.37");
        assert_eq!(sig3(0.0011349), "0.00113");
        assert_eq!(sig3(0.0), "0.00");
    }

    #[test]
    fn the_trace_counts_entries_only_while_on() {
        use switchyard_kernels::Ops;
        let be = crate::backends::open("cpu").unwrap();
        let t = Traced::new(be.clone());
        let traced: Arc<dyn Backend> = t.clone();
        let ops = Ops::new(traced.clone());
        let x = switchyard_core::DeviceBuffer::zeroed(&traced, 2 * 4 * 8).unwrap();
        let y = switchyard_core::DeviceBuffer::zeroed(&traced, 2 * 4 * 8).unwrap();
        let add = |ops: &Ops| ops.scaled_add_bf16(y.region(), x.region(), 32, 1.0).unwrap();
        let norm = |ops: &Ops| ops.rmsnorm_bf16(y.region(), x.region(), None, 4, 8, 1e-6).unwrap();
        add(&ops);
        t.start();
        norm(&ops);
        add(&ops);
        add(&ops);
        let seen = t.stop();
        norm(&ops);
        // Most launched first; the launches before start and after stop are not counted.
        let want = [("gemm::scaled_add_bf16".to_string(), 2), ("norm::rmsnorm_bf16".to_string(), 1)];
        assert_eq!(seen, want);
        // Everything else reaches the wrapped backend.
        assert_eq!((traced.kind(), traced.name()), (be.kind(), be.name()));
        assert_eq!(traced.live_bytes(), be.live_bytes());
        t.start();
        assert!(t.stop().is_empty(), "start forgets, stop with nothing launched is empty");
    }
}
