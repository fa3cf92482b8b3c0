//! The `switchyard` command line: generation with a Gemma 4 text
//! checkpoint (token ids or text in, ids or streamed text out), the coverage matrix, parity against the CPU reference, and the
//! benchmark harness.
use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use switchyard_cli::generation::{self, PromptFlags, RunObserver, StopReason};
use switchyard_cli::out::{self, print};
use switchyard_cli::text::gen_config::{self, GenerationConfig, SamplingFlags};
use switchyard_cli::text::TextAssets;
use switchyard_cli::{backends, bench, bench_model, coverage, hf_cache, limits, request, synthetic};
use switchyard_core::BackendKind;
use switchyard_kernels::{parity, Ops};
use switchyard_model::checkpoint::Checkpoint;
use switchyard_model::config::ModelConfig;
use switchyard_model::default_model;
use switchyard_model::generate::{generate_with, Engine};
use switchyard_model::graph::Model;
use switchyard_model::quant::Quant;
use switchyard_model::sampling::{self, Sampler};
use switchyard_model::text;
use switchyard_model::tp::group::TpGroup;
use switchyard_model::tp::TpPlan;
use switchyard_model::weights::Weights;

#[derive(Parser)]
#[command(
    name = "switchyard",
    version,
    about = "LLM inference kernels on CUDA, wgpu and a CPU reference",
    long_about = "LLM inference kernels on CUDA, wgpu and a CPU reference.\n\nWith no subcommand, runs `generate` (the main job: \
                  generation with the built-in tiny model, trained on the Python standard library's docstrings: \
                  `switchyard` alone prints its continuation of a text prompt); the generate options may be given without \
                  the subcommand name.",
    // `switchyard --max-new-tokens 4` is `switchyard generate --max-new-tokens 4`;
    // the top-level generate options and a subcommand are exclusive.
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The default command's options (no subcommand given = `generate`).
    #[command(flatten)]
    generate: GenerateArgs,
}

/// Options of `generate` (also the default command's).
#[derive(Args)]
struct GenerateArgs {
    /// Checkpoint directory (config.json + model.safetensors or a sharded
    /// index, and for text: tokenizer.json, chat_template.jinja,
    /// generation_config.json), or a Hugging Face repo id (org/name) found
    /// in the local HF cache. Default: the built-in tiny model (a Gemma 4
    /// trained on the Python standard library's docstrings, with its own
    /// tokenizer).
    #[arg(long)]
    model: Option<PathBuf>,
    /// With a repo id: the branch, tag or commit in the HF cache (default main).
    #[arg(long)]
    revision: Option<String>,
    /// Backend: cpu, wgpu or cuda (default: SWITCHYARD_BACKEND or cpu).
    #[arg(long)]
    backend: Option<String>,
    /// Prompt text, tokenized with the model's tokenizer.json (with --chat:
    /// the user's message).
    #[arg(long, conflicts_with = "prompt_ids")]
    prompt: Option<String>,
    /// Render --prompt as a user turn through the model's chat template.
    #[arg(long, requires = "prompt")]
    chat: bool,
    /// A system message before the user turn (with --chat).
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// Prompt token ids, comma-separated (with no prompt flag: the built-in
    /// model starts from the text "Return a", a checkpoint directory from
    /// the ids 2,17,99,5,250,31).
    #[arg(long)]
    prompt_ids: Option<String>,
    /// Most tokens to generate (prompt + new tokens must fit the model's
    /// context, max_position_embeddings). Default: 16, and 32 with the
    /// built-in model (what its recorded HF reference run generated).
    #[arg(long, value_parser = request::parse_max_new_tokens)]
    max_new_tokens: Option<usize>,
    /// Stop when the output text contains this string (not printed; may be
    /// given several times).
    #[arg(long = "stop", value_name = "TEXT")]
    stop: Vec<String>,
    /// Sampling temperature; 0 is greedy. Any of --temperature, --top-k,
    /// --top-p, --min-p turns sampling on (default: generation_config.json's
    /// do_sample, else greedy).
    #[arg(long)]
    temperature: Option<f32>,
    /// Keep the k most likely tokens (0 = off; HF's 50 when sampling and unset).
    #[arg(long)]
    top_k: Option<usize>,
    /// Keep the most likely tokens up to this probability mass (1 = off).
    #[arg(long)]
    top_p: Option<f32>,
    /// Drop tokens less likely than this times the most likely (0 = off).
    #[arg(long)]
    min_p: Option<f32>,
    /// HF's repetition penalty on prompt and output tokens (1 = off).
    #[arg(long)]
    repetition_penalty: Option<f32>,
    /// Seed of the sampler (default: a random one, reported with the run).
    #[arg(long)]
    seed: Option<u64>,
    /// Print one JSON object: backend, tokens, text, per-step logits, timings.
    #[arg(long)]
    json: bool,
    /// Weight storage: none, fp8-embed or nvfp4.
    #[arg(long, default_value = "none")]
    quant: String,
    /// Do not stop at EOS ids (config.json's and generation_config.json's).
    #[arg(long)]
    ignore_eos: bool,
    /// Tensor parallelism: split the model over N ranks, one thread each
    /// with its own backend instance (cuda: GPUs 0..N joined by NCCL; cpu
    /// and wgpu: host-staged collectives). Query and KV heads, the MLP, the
    /// experts and the vocabulary are split; N must divide them.
    #[arg(long, default_value_t = 1)]
    tp: usize,
}

#[derive(Subcommand)]
enum Command {
    /// Print the coverage matrix: every declared kernel × every backend.
    Kernels,
    /// Run every registered kernel on a backend against the CPU reference
    /// (poisoned outputs, guard bytes, parity tolerances (ARCHITECTURE.md)).
    Parity {
        /// Backend to test (cpu, wgpu, cuda); default: every backend that is
        /// available here (or SWITCHYARD_BACKEND if set).
        #[arg(long)]
        backend: Option<String>,
        /// Seed for the random inputs.
        #[arg(long, default_value_t = 0x5eed)]
        seed: u64,
        /// Only kernels whose symbol contains this text.
        #[arg(long)]
        filter: Option<String>,
    },
    /// Time kernels at production shapes against ceilings measured in the same run.
    Bench {
        /// Backend to bench (default: SWITCHYARD_BACKEND or cpu).
        #[arg(long)]
        backend: Option<String>,
        /// Print JSON instead of markdown.
        #[arg(long)]
        json: bool,
        /// Timed runs per case (at most 100000).
        #[arg(long, default_value_t = 20)]
        iters: usize,
        /// Only kernels whose symbol contains this text.
        #[arg(long)]
        filter: Option<String>,
        /// Shapes: `production` (default on GPUs) or `small` (default on cpu).
        #[arg(long)]
        scale: Option<String>,
    },
    /// Generation with a Gemma 4 text checkpoint (default: the tiny model
    /// built into the binary): token ids or text in (--prompt, --chat),
    /// greedy or sampled, ids or streamed text out. The default command.
    Generate(GenerateArgs),
    /// Decode tokens/s at batch 1 and 16 of a Gemma-4-shaped model with
    /// random weights made on the device, against the bandwidth bound
    /// (bytes each step reads / copy bandwidth measured in the same run).
    BenchModel {
        /// Backend (default: SWITCHYARD_BACKEND or cpu).
        #[arg(long)]
        backend: Option<String>,
        /// Model shape: `default` (dense, 30 layers of width 2560, 7.08 GB),
        /// `26b-a4b` (Gemma 4 26B-A4B's text decoder: 128 experts, top-8,
        /// beside a dense MLP) or `31b` (Gemma 4 31B's text decoder: dense,
        /// 60 layers of width 5376, 61.4 GB).
        #[arg(long, default_value = "default")]
        shape: String,
        /// Decoder layers (default: the shape's, 30; 60 for 31b).
        #[arg(long)]
        layers: Option<usize>,
        /// Residual width, `default` shape only: intermediate 4x, one query
        /// head per 320 (bench_model::Shape::gemma4). Default 2560.
        #[arg(long)]
        hidden: Option<usize>,
        /// Vocabulary (the LM head reads the whole tied table every step; default the shape's, 262144).
        #[arg(long)]
        vocab: Option<usize>,
        /// Batch sizes, comma-separated: sequences decoded together.
        #[arg(long, default_value = "1,16")]
        batch: String,
        /// Prompt tokens prefilled per sequence before decoding.
        #[arg(long, default_value_t = 128)]
        prompt_len: usize,
        /// Timed decode steps (after 3 warm-up steps).
        #[arg(long, default_value_t = 64)]
        steps: usize,
        /// Also time the prefill of one random prompt of this many tokens in
        /// one pass (2 warm-up passes, the first naming the kernel entries it
        /// launches, then --prefill-passes timed): tokens/s and TFLOP/s at
        /// the median pass. At most the benchmark model's context, 8192.
        #[arg(long)]
        prefill_len: Option<usize>,
        /// Timed prefill passes (with --prefill-len; default 5).
        #[arg(long)]
        prefill_passes: Option<usize>,
        /// Positions each decode session reserves (default: prompt + steps
        /// + 4). The KV cache and the attention's split of the context
        /// follow the session, so this times decode inside a session sized
        /// for a longer conversation. At most 8192.
        #[arg(long)]
        session_tokens: Option<usize>,
        /// Print JSON (with the HF config.json of the shape) instead of markdown.
        #[arg(long)]
        json: bool,
        /// Open the profiler's collection around the timed decode steps only
        /// (for `ncu --profile-from-start off`; CUDA). On wgpu: one more
        /// step after the timed ones, timed dispatch by dispatch (timestamp
        /// queries), reported as GPU time per kernel.
        #[arg(long)]
        profile_timed_steps: bool,
        /// Weight storage, as `generate --quant` loads it: none, fp8-embed, nvfp4.
        #[arg(long, default_value = "none")]
        quant: String,
        /// Print the shape's HF config.json (what scripts/hf_decode_bench.py
        /// builds its model from) and exit, opening no backend.
        #[arg(long)]
        print_hf_config: bool,
        /// Tensor parallelism over N ranks, as `generate --tp` (cuda: GPUs
        /// 0..N over NCCL); the bound counts N devices' copy bandwidth, and
        /// each row adds the all-reduce time per token and its share of the step.
        #[arg(long, default_value_t = 1)]
        tp: usize,
    },
    /// Write a synthetic Gemma 4 text checkpoint (random weights) to a directory.
    Synthetic {
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// `dense` (like the tiny-dense fixture) or `moe` (like tiny-moe).
        #[arg(long, default_value = "dense")]
        preset: String,
        /// RNG seed (default: the preset's).
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Print what a backend reports about its device.
    Info {
        /// Backend (default: SWITCHYARD_BACKEND or cpu).
        #[arg(long)]
        backend: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_exit(e),
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => ExitCode::from(out::report(&e)),
    }
}

/// clap's help, version and usage errors, printed here rather than by
/// `Cli::parse`: help and version go to stdout, whose reader may be gone
/// (141, as for every subcommand), and a usage error quotes the bad
/// argument, so it goes out escaped.
fn usage_exit(e: clap::Error) -> ExitCode {
    if e.use_stderr() {
        out::diag_lines(&e.render().to_string());
    } else if let Err(io) = e.print() {
        return ExitCode::from(out::report(&out::stdout_error(io)));
    }
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
}

fn run(cli: Cli) -> Result<ExitCode> {
    // No subcommand: the main job, generate (with any options given at the top level).
    let Some(command) = cli.command else { return generate_cmd(cli.generate) };
    match command {
        Command::Kernels => {
            print(&coverage::matrix(&BackendKind::ALL))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Parity { backend, seed, filter } => parity_cmd(backend, seed, filter),
        Command::Bench { backend, json, iters, filter, scale } => bench_cmd(backend, json, iters, filter, scale),
        Command::Generate(args) => generate_cmd(args),
        Command::BenchModel {
            backend,
            shape,
            layers,
            hidden,
            vocab,
            batch,
            prompt_len,
            steps,
            prefill_len,
            prefill_passes,
            session_tokens,
            json,
            profile_timed_steps,
            quant,
            print_hf_config,
            tp,
        } => {
            let shape = bench_shape(&shape, layers, hidden, vocab)?;
            if print_hf_config {
                print(&format!("{}\n", serde_json::to_string_pretty(&shape.hf_config())?))?;
                return Ok(ExitCode::SUCCESS);
            }
            let prefill_passes = match (prefill_len, prefill_passes) {
                (None, Some(_)) => bail!("--prefill-passes applies to a prefill measurement: give --prefill-len too"),
                (Some(0), _) => bail!("--prefill-len must be at least 1"),
                (_, passes) => passes.unwrap_or(bench_model::DEFAULT_PREFILL_PASSES),
            };
            let settings = bench_model::Settings {
                profile_timed_steps,
                prefill_len: prefill_len.unwrap_or(0),
                prefill_passes,
                session_tokens: session_tokens.unwrap_or(0),
                ..bench_model::Settings::decode(prompt_len, steps, quant.parse()?)
            };
            bench_model_cmd(backend, &shape, &batch, settings, json, tp)
        }
        Command::Synthetic { out, preset, seed } => {
            let mut spec = match preset.as_str() {
                "dense" => synthetic::Spec::tiny_dense(),
                "moe" => synthetic::Spec::tiny_moe(),
                other => bail!("--preset {}: expected `dense` or `moe`", text::clip(other)),
            };
            if let Some(s) = seed {
                spec.seed = s;
            }
            spec.build()?.write(&out).with_context(|| format!("synthetic --out {}", text::path(&out)))?;
            print(&format!("wrote {}\n", text::path(&out)))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Info { backend } => {
            let name = backends::choose(backend.as_deref(), BackendKind::Cpu.name())?;
            let be = backends::open(&name)?;
            let info = be.info();
            let mut s = format!(
                "backend: {}\ndevice: {}\ndriver: {}\nmax allocation: {} bytes\n",
                info.backend, info.device, info.driver, info.max_alloc_bytes
            );
            for (k, v) in info.details {
                s.push_str(&format!("{k}: {v}\n"));
            }
            // Device and driver strings come from the driver: escaped like any quoted text.
            print(&text::escape_lines(&s))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn parity_cmd(backend: Option<String>, seed: u64, filter: Option<String>) -> Result<ExitCode> {
    let explicit = backend.is_some() || backends::from_env()?.is_some();
    let names: Vec<String> = if explicit {
        vec![backends::choose(backend.as_deref(), BackendKind::Cpu.name())?]
    } else {
        BackendKind::ALL.iter().map(|k| k.name().to_string()).collect()
    };
    let reference = Ops::new(backends::open(BackendKind::Cpu.name())?);
    let mut failed = false;
    let mut tested = 0;
    for name in names {
        let be = match backends::open(&name) {
            Ok(be) => be,
            Err(e) if !explicit => {
                print(&text::escape_lines(&format!("skipping {name}: {e}\n\n")))?;
                continue;
            }
            Err(e) => bail!("{e}"),
        };
        print(&text::escape_lines(&format!("parity: {} ({}) against cpu\n\n", name, be.info().device)))?;
        let rows = parity::run_all(&reference, &Ops::new(be), seed, filter.as_deref());
        if rows.is_empty() {
            bail!(
                "no kernels matched on backend {name}{}",
                filter.as_deref().map(|f| format!(" (--filter {})", text::clip(f))).unwrap_or_default()
            );
        }
        print(&parity::table(&rows))?;
        let fails = rows.iter().filter(|r| !r.status.passed()).count();
        print(&format!("\n{}\n\n", parity::summary(&name, &rows)))?;
        failed |= fails > 0;
        tested += 1;
    }
    if tested == 0 {
        bail!("no backend available to test");
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

fn bench_cmd(backend: Option<String>, json: bool, iters: usize, filter: Option<String>, scale: Option<String>) -> Result<ExitCode> {
    // The flags first: a bad one is refused before a device is opened.
    if iters == 0 {
        bail!("--iters must be at least 1");
    }
    if iters > limits::MAX_BENCH_ITERS {
        bail!("--iters {iters}: at most {} timed runs per case", limits::MAX_BENCH_ITERS);
    }
    let name = backends::choose(backend.as_deref(), BackendKind::Cpu.name())?;
    let be = backends::open(&name)?;
    // cuBLAS, the GEMM yardstick, is a CUDA extension reached through the
    // backend: it runs on the backend's stream and checks addresses against
    // its allocations.
    #[cfg(feature = "cuda")]
    let cublas = match be.extension().and_then(|e| e.downcast_ref::<switchyard_cuda::CudaBackend>()) {
        Some(cuda) => Some(cuda.cublas()?),
        None => None,
    };
    #[cfg(feature = "cuda")]
    let vendor_fn = |a, b, c, m, n, k| cublas.as_ref().expect("vendor used only with cuBLAS").gemm_bf16(a, b, c, m, n, k);
    #[cfg(feature = "cuda")]
    let vendor: Option<&bench::VendorGemm<'_>> = if cublas.is_some() { Some(&vendor_fn) } else { None };
    #[cfg(not(feature = "cuda"))]
    let vendor: Option<&bench::VendorGemm<'_>> = None;
    let scale = match scale.as_deref() {
        None if name == BackendKind::Cpu.name() => bench::Scale::Small,
        None | Some("production") => bench::Scale::Production,
        Some("small") => bench::Scale::Small,
        Some(other) => bail!("--scale {}: expected `production` or `small`", text::clip(other)),
    };
    let settings = bench::Settings { iters, ..Default::default() };
    let ops = Ops::new(be.clone());
    let max_copy = if scale == bench::Scale::Production { 1 << 30 } else { 64 << 20 };
    let copies = bench::copy_ceilings(&ops, &settings, max_copy)?;
    let ceilings = bench::Ceilings {
        copy_bytes_per_s: copies.best(),
        copy_note: copies.describe(),
        gemm_flops_per_s: None,
        launch_overhead_us: bench::launch_overhead_us(&ops, 1000)?,
    };
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for (i, case) in bench::cases(scale).iter().enumerate() {
        if filter.as_deref().is_some_and(|f| !case.kernel.contains(f)) {
            continue;
        }
        let implemented = switchyard_core::registry::kernels()
            .into_iter()
            .any(|k| k.symbol == case.kernel && switchyard_core::registry::implements(be.kind(), k));
        if !implemented {
            out::diag(&format!("bench case skipped: {} {} ({name} does not implement it)", case.kernel, case.shape));
            continue;
        }
        // One case failing (a binding past an adapter limit, say) is reported and the rest still run.
        match bench::measure(&ops, case, &settings, i as u64) {
            Ok(mut m) => {
                if let (Some(v), Some(shape)) = (vendor, case.gemm) {
                    match bench::measure_vendor(&be, &settings, shape, v) {
                        Ok(ms) => m.vendor_ms = Some(ms),
                        Err(e) => failures.push(format!("cuBLAS at {shape:?}: {e:#}")),
                    }
                }
                rows.push(m)
            }
            Err(e) => failures.push(format!("{} {}: {e:#}", case.kernel, case.shape)),
        }
    }
    let device = be.info().device;
    if json {
        let cases: Vec<_> = rows
            .iter()
            .map(|m| {
                serde_json::json!({
                    "kernel": m.kernel, "shape": m.shape, "median_ms": m.median_ms, "min_ms": m.min_ms, "max_ms": m.max_ms,
                    "bytes": m.bytes, "flops": m.flops, "gb_per_s": m.bytes_per_s() / 1e9,
                    "pct_of_copy": 100.0 * m.bytes_per_s() / ceilings.copy_bytes_per_s,
                    "vendor_gemm_ms": m.vendor_ms,
                    "gpu_ms": m.gpu.measured().map(|(ms, _)| ms),
                    "gpu_dispatches": m.gpu.measured().map(|(_, n)| n),
                })
            })
            .collect();
        let doc = serde_json::json!({
            "backend": name, "device": device, "copy_gb_per_s": ceilings.copy_bytes_per_s / 1e9,
            "launch_overhead_us": ceilings.launch_overhead_us, "cases": cases,
        });
        print(&format!("{}\n", serde_json::to_string_pretty(&doc)?))?;
    } else {
        print(&bench::markdown(&device, &name, &ceilings, &rows))?;
    }
    for f in &failures {
        out::diag(&format!("bench case failed: {f}"));
    }
    Ok(if failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The `--shape` preset with the `--layers` / `--hidden` / `--vocab` overrides, checked.
fn bench_shape(name: &str, layers: Option<usize>, hidden: Option<usize>, vocab: Option<usize>) -> Result<bench_model::Shape> {
    let mut shape = bench_model::Shape::named(name)?;
    if let Some(h) = hidden {
        if shape.name != "default" {
            bail!("--hidden applies to --shape default only (the other shapes are fixed releases; --layers and --vocab apply to all)");
        }
        if h == 0 || !h.is_multiple_of(8) {
            bail!("--hidden must be a positive multiple of 8 (got {h})");
        }
        if h > limits::MAX_BENCH_HIDDEN {
            bail!("--hidden {h}: at most {}", limits::MAX_BENCH_HIDDEN);
        }
        let vocab = shape.vocab;
        shape = bench_model::Shape::gemma4(shape.layers, h);
        shape.vocab = vocab;
    }
    if let Some(n) = layers {
        if n == 0 {
            bail!("--layers must be at least 1");
        }
        if n > switchyard_model::config::MAX_LAYERS {
            bail!("--layers {n}: at most {}", switchyard_model::config::MAX_LAYERS);
        }
        shape.layers = n;
    }
    if let Some(v) = vocab {
        if v == 0 {
            bail!("--vocab must be at least 1");
        }
        if v > limits::MAX_BENCH_VOCAB {
            bail!("--vocab {v}: at most {}", limits::MAX_BENCH_VOCAB);
        }
        shape.vocab = v;
    }
    Ok(shape)
}

fn bench_model_cmd(
    backend: Option<String>,
    shape: &bench_model::Shape,
    batch: &str,
    settings: bench_model::Settings,
    json: bool,
    tp: usize,
) -> Result<ExitCode> {
    let batches = batch
        .split(',')
        .map(|t| match t.trim().parse::<usize>() {
            Ok(b) if b > 0 && b <= limits::MAX_BENCH_BATCH => Ok(b),
            _ => bail!("--batch: `{}` is not a batch size (an integer in 1..={})", text::clip(t.trim()), limits::MAX_BENCH_BATCH),
        })
        .collect::<Result<Vec<_>>>()?;
    settings.validate()?;
    let name = backends::choose(backend.as_deref(), BackendKind::Cpu.name())?;
    let be = backends::open(&name)?;
    let report = match tp {
        0 => bail!("--tp must be at least 1"),
        1 => bench_model::run(&be, shape, &batches, &settings)?,
        _ => bench_model::run_tp(&be, shape, &batches, &settings, backends::tp_ranks(&name, tp)?)?,
    };
    if json {
        print(&format!("{}\n", serde_json::to_string_pretty(&report.json())?))?;
    } else {
        print(&report.markdown())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// An f32 parameter as JSON, written as its shortest decimal (0.95, not
/// the f64 widening 0.949999988079071).
fn short(x: f32) -> serde_json::Value {
    x.to_string().parse::<f64>().map_or(serde_json::Value::Null, serde_json::Value::from)
}

fn generate_cmd(args: GenerateArgs) -> Result<ExitCode> {
    let GenerateArgs {
        model: model_arg,
        revision,
        backend,
        prompt,
        chat,
        system,
        prompt_ids,
        max_new_tokens,
        stop,
        temperature,
        top_k,
        top_p,
        min_p,
        repetition_penalty,
        seed,
        json,
        quant,
        ignore_eos,
        tp,
    } = args;
    let quant: Quant = quant.parse()?;
    if tp == 0 {
        bail!("--tp must be at least 1");
    }
    // Syntax first, before anything is opened; the checks that need the
    // model's config come once it is read.
    if let Some(t) = &prompt_ids {
        request::parse_prompt_ids(t)?;
    }
    if max_new_tokens == Some(0) {
        bail!("--max-new-tokens must be at least 1");
    }
    let built_in = model_arg.is_none();
    let max_new_tokens = max_new_tokens.unwrap_or(if built_in { default_model::NEW_TOKENS } else { request::DEFAULT_NEW_TOKENS });
    let flags = SamplingFlags { temperature, top_k, top_p, min_p, repetition_penalty };
    // The values alone (the file's defaults are merged in once it is read).
    gen_config::resolve(&flags, &GenerationConfig::default())?;
    if revision.is_some() && model_arg.is_none() {
        bail!("--revision needs --model (a repo id in the Hugging Face cache)");
    }
    let model_dir =
        model_arg.as_deref().map(|m| hf_cache::model_dir(m, revision.as_deref(), &hf_cache::CacheEnv::from_env())).transpose()?;
    let name = backends::choose(backend.as_deref(), BackendKind::Cpu.name())?;
    // With --tp the ranks open their own backends.
    let be = if tp == 1 { Some(backends::open(&name)?) } else { None };
    let t0 = std::time::Instant::now();
    let ck = match &model_dir {
        Some(dir) => Checkpoint::open(dir).with_context(|| format!("opening checkpoint {}", text::path(dir)))?,
        None => default_model::checkpoint()?,
    };
    let cfg = ModelConfig::from_json(&ck.config_json).with_context(|| format!("loading {}", ck.origin))?;
    // A model that does not split over --tp ranks is refused before anything is loaded.
    TpPlan::new(&cfg, 0, tp)?;
    let assets = match &model_dir {
        Some(dir) => TextAssets::from_dir(dir)?,
        None => TextAssets::built_in()?,
    };
    // With no prompt flag the built-in model continues its text prompt (a
    // checkpoint directory gets request::DEFAULT_PROMPT_IDS).
    let prompt = match (&prompt, &prompt_ids) {
        (None, None) if built_in => Some(default_model::PROMPT_TEXT.to_string()),
        _ => prompt,
    };
    // What the run says about its input before the output streams.
    let prompt_note = match (&prompt, &prompt_ids) {
        (Some(t), _) if chat => format!("prompt (a user turn through the chat template): {t:?}"),
        (Some(t), _) => format!("prompt: {t:?}"),
        (None, Some(ids)) => format!("prompt ids: {ids}"),
        (None, None) => format!("prompt ids (the default): {}", request::DEFAULT_PROMPT_IDS.map(|i| i.to_string()).join(",")),
    };
    // Up front, before the weights: a request past the context or the
    // vocabulary is refused without uploading anything.
    let prompt_flags = PromptFlags { text: prompt, chat, system, ids: prompt_ids };
    let req = match generation::prompt_ids(&prompt_flags, &assets)? {
        Some((ids, source)) => request::build_from(ids, source, max_new_tokens, json, ignore_eos, &cfg)?,
        None => request::build(None, max_new_tokens, json, ignore_eos, &cfg)?,
    };
    let params = gen_config::resolve(&flags, &assets.generation)?;
    let seed = seed.unwrap_or_else(rand::random);
    let mut sampler = Sampler::new(params, seed)?;
    // config.json's EOS ids stop the run inside generate (stop_at_eos);
    // generation_config.json's are checked here.
    let stop_ids = if ignore_eos { Vec::new() } else { assets.generation.eos_token_ids.clone() };
    let mut observer = RunObserver::new(&assets, stop_ids, &stop, json, req.prompt.len())?;
    // Which model and which prompt: on a terminal before the text streams,
    // so it reads as a heading; otherwise after a finished run, with the
    // timings, so that a run whose stdout is gone writes nothing to stderr.
    let what = if built_in { format!("{}, ", default_model::DESCRIPTION) } else { String::new() };
    let heading = format!(
        "model: {} ({what}{} layers, width {}, vocabulary {})\n{prompt_note} ({} tokens)",
        ck.origin,
        cfg.num_layers(),
        cfg.hidden_size,
        cfg.vocab_size,
        req.prompt.len()
    );
    let heading_first = !json && std::io::stderr().is_terminal();
    if heading_first {
        out::diag_lines(&format!("{heading}\n"));
    }
    let (model, device): (Box<dyn Engine>, String) = match &be {
        Some(be) => {
            let weights = Weights::load(&ck, &cfg, be, quant).with_context(|| format!("loading {}", ck.origin))?;
            (Box::new(Model::new(cfg.clone(), weights, be.clone(), quant)), be.info().device)
        }
        None => {
            let group = TpGroup::load(&ck, quant, backends::tp_ranks(&name, tp)?)
                .with_context(|| format!("loading {} over --tp {tp} ranks", ck.origin))?;
            let r0 = &group.ranks[0];
            let device = format!("--tp {tp}: {tp} x {}, {} collectives", r0.device, r0.comm);
            (Box::new(group), device)
        }
    };
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    let g = generate_with(model.as_ref(), &req, &mut sampler, &mut observer)
        .with_context(|| format!("generating (--max-new-tokens {max_new_tokens} after a {}-token prompt)", req.prompt.len()));
    // A closed stdout ends the run early; it is what to report.
    if let Some(e) = observer.error.take() {
        return Err(e);
    }
    let g = g?;
    let text_out = observer.finish()?;
    if let Some(e) = observer.error.take() {
        return Err(e);
    }
    let stop_reason = match observer.stopped {
        Some(r) => r,
        None if g.stopped_at_eos => StopReason::Eos,
        None => StopReason::Length,
    };
    let t = &g.timings;
    let vocab = cfg.vocab_size;
    let logit_bytes = if params.needs_logits() { sampling::logits_bytes_per_step(vocab) } else { 0 };
    if json {
        let doc = serde_json::json!({
            "backend": name,
            "device": device,
            "tp": tp,
            "model": ck.origin,
            "quant": quant.to_string(),
            "prompt": req.prompt,
            "tokens": g.tokens,
            "text": text_out,
            "logits": g.logits,
            "stopped_at_eos": stop_reason == StopReason::Eos,
            "stop_reason": stop_reason.name(),
            "sampling": {
                "greedy": params.is_greedy(), "temperature": short(params.temperature), "top_k": params.top_k,
                "top_p": short(params.top_p), "min_p": short(params.min_p), "repetition_penalty": short(params.repetition_penalty),
                "seed": seed,
                "host_logit_bytes_per_step": logit_bytes,
            },
            "timings": {
                "load_ms": load_ms, "setup_ms": t.setup_ms, "prefill_ms": t.prefill_ms, "decode_ms": t.decode_ms,
                "prompt_tokens": t.prompt_tokens, "decode_steps": t.decode_steps,
                "prefill_tokens_per_s": t.prefill_tokens_per_s(), "decode_tokens_per_s": t.decode_tokens_per_s(),
            },
        });
        print(&format!("{}\n", serde_json::to_string(&doc)?))?;
    } else {
        if !observer.is_text() {
            let ids: Vec<String> = g.tokens.iter().map(u32::to_string).collect();
            print(&format!("{}\n", ids.join(",")))?;
        }
        if !heading_first {
            out::diag_lines(&format!("{heading}\n"));
        }
        let how = if params.is_greedy() && !params.needs_logits() {
            "greedy".to_string()
        } else if params.is_greedy() {
            format!("greedy, repetition penalty {}", params.repetition_penalty)
        } else {
            format!(
                "sampled (temperature {}, top-k {}, top-p {}, min-p {}, repetition penalty {}, seed {seed}; {} KiB of logits to the host per step)",
                params.temperature,
                params.top_k,
                params.top_p,
                params.min_p,
                params.repetition_penalty,
                logit_bytes / 1024
            )
        };
        out::diag(&format!(
            "{} on {} ({}), quant {}: {} prompt + {} new tokens ({}), {how}; load {:.1} ms, prefill {:.1} ms, decode {:.1} tok/s",
            ck.origin,
            name,
            device,
            quant,
            t.prompt_tokens,
            g.tokens.len(),
            match stop_reason {
                StopReason::Eos => "stopped at EOS",
                StopReason::StopString => "stopped at a --stop string",
                StopReason::Length => "--max-new-tokens reached",
            },
            load_ms,
            t.prefill_ms,
            t.decode_tokens_per_s()
        ));
    }
    Ok(ExitCode::SUCCESS)
}
