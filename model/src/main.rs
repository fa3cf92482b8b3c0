//! The `switchyard` command line: the coverage matrix, parity against the CPU
//! reference, and the benchmark harness.
use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use std::process::ExitCode;
use switchyard_kernels::{parity, Ops};
use switchyard_model::{backends, bench, coverage};

#[derive(Parser)]
#[command(name = "switchyard", version, about = "LLM inference kernels on CUDA, wgpu and a CPU reference")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the coverage matrix: every declared kernel × every backend.
    Kernels,
    /// Run every registered kernel on a backend against the CPU reference
    /// (poisoned outputs, guard bytes, DESIGN.md tolerances).
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
        /// Timed runs per case.
        #[arg(long, default_value_t = 20)]
        iters: usize,
        /// Only kernels whose symbol contains this text.
        #[arg(long)]
        filter: Option<String>,
        /// Shapes: `production` (default on GPUs) or `small` (default on cpu).
        #[arg(long)]
        scale: Option<String>,
    },
    /// Print what a backend reports about its device.
    Info {
        /// Backend (default: SWITCHYARD_BACKEND or cpu).
        #[arg(long)]
        backend: Option<String>,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Kernels => {
            print!("{}", coverage::matrix(&backends::ALL));
            Ok(ExitCode::SUCCESS)
        }
        Command::Parity { backend, seed, filter } => parity_cmd(backend, seed, filter),
        Command::Bench { backend, json, iters, filter, scale } => bench_cmd(backend, json, iters, filter, scale),
        Command::Info { backend } => {
            let name = backends::choose(backend.as_deref(), "cpu");
            let be = backends::open(&name)?;
            let info = be.info();
            println!("backend: {}\ndevice: {}\ndriver: {}\nmax allocation: {} bytes", info.backend, info.device, info.driver, info.max_alloc_bytes);
            for (k, v) in info.details {
                println!("{k}: {v}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn parity_cmd(backend: Option<String>, seed: u64, filter: Option<String>) -> Result<ExitCode> {
    let explicit = backend.is_some() || std::env::var(backends::BACKEND_ENV).is_ok_and(|s| !s.is_empty());
    let names: Vec<String> = if explicit { vec![backends::choose(backend.as_deref(), "cpu")] } else { backends::ALL.iter().map(|s| s.to_string()).collect() };
    let reference = Ops::new(backends::open("cpu")?);
    let mut failed = false;
    let mut tested = 0;
    for name in names {
        let be = match backends::open(&name) {
            Ok(be) => be,
            Err(e) if !explicit => {
                println!("skipping {name}: {e}\n");
                continue;
            }
            Err(e) => bail!("{e}"),
        };
        println!("parity: {} ({}) against cpu\n", name, be.info().device);
        let rows = parity::run_all(&reference, &Ops::new(be), seed, filter.as_deref());
        if rows.is_empty() {
            bail!("no kernels matched on backend {name}");
        }
        print!("{}", parity::table(&rows));
        let fails = rows.iter().filter(|r| !r.status.passed()).count();
        println!("\n{name}: {} passed, {} failed\n", rows.len() - fails, fails);
        failed |= fails > 0;
        tested += 1;
    }
    if tested == 0 {
        bail!("no backend available to test");
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

fn bench_cmd(backend: Option<String>, json: bool, iters: usize, filter: Option<String>, scale: Option<String>) -> Result<ExitCode> {
    let name = backends::choose(backend.as_deref(), "cpu");
    let be = backends::open(&name)?;
    let scale = match scale.as_deref() {
        None if name == "cpu" => bench::Scale::Small,
        None | Some("production") => bench::Scale::Production,
        Some("small") => bench::Scale::Small,
        Some(other) => bail!("--scale {other}: expected `production` or `small`"),
    };
    if iters == 0 {
        bail!("--iters must be at least 1");
    }
    let settings = bench::Settings { iters, ..Default::default() };
    let ops = Ops::new(be.clone());
    let max_copy = if scale == bench::Scale::Production { 1 << 30 } else { 64 << 20 };
    let (copy_bytes, copy_bw) = bench::copy_ceiling(&be, &settings, max_copy)?;
    let ceilings = bench::Ceilings {
        copy_bytes_per_s: copy_bw,
        copy_note: format!("Backend::copy of {} MiB, read + write", copy_bytes >> 20),
        gemm_flops_per_s: None,
        launch_overhead_us: bench::launch_overhead_us(&ops, 1000)?,
    };
    let mut rows = Vec::new();
    for (i, case) in bench::cases(scale).iter().enumerate() {
        if filter.as_deref().is_some_and(|f| !case.kernel.contains(f)) {
            continue;
        }
        rows.push(bench::measure(&ops, case, &settings, i as u64).with_context(|| format!("bench {}", case.kernel))?);
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
                })
            })
            .collect();
        let doc = serde_json::json!({
            "backend": name, "device": device, "copy_gb_per_s": ceilings.copy_bytes_per_s / 1e9,
            "launch_overhead_us": ceilings.launch_overhead_us, "cases": cases,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", bench::markdown(&device, &name, &ceilings, &rows));
    }
    Ok(ExitCode::SUCCESS)
}
