//! `bench-model` end to end on the CPU reference: a tiny MoE shape through
//! `bench_model::run` (copy ceiling, random device weights, prefill, recorded
//! decode steps at two batch sizes), its reports, `scripts/decode_tables.py`
//! over its JSON, the `--shape` / `--print-hf-config` flags of the binary,
//! and `--shape 31b --tp 2` (one layer of it) with its all-reduce timing.
use serde_json::Value;
mod support;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::Tmp;
use switchyard_cli::backends;
use switchyard_cli::bench_model::{self, bound, MoeShape, Settings, Shape};
use switchyard_model::quant::Quant;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// scripts/decode_tables.py's stdout for `args` and (flag, file) pairs; the
/// script must succeed.
fn decode_tables(args: &[&str], files: &[(&str, &std::path::Path)]) -> String {
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("scripts/decode_tables.py")).args(args);
    for (flag, file) in files {
        cmd.arg(flag).arg(file);
    }
    let out = cmd.output().expect("python3 runs scripts/decode_tables.py");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// The 26b-a4b layout at toy size: MoE beside the dense MLP in every layer,
/// V = K on the full layers, a sliding window shorter than the prompt.
fn tiny_moe() -> Shape {
    Shape {
        name: "tiny-moe".into(),
        layers: 6,
        hidden: 64,
        intermediate: 96,
        heads: 4,
        kv_heads: 2,
        head_dim: 16,
        global_head_dim: 32,
        global_kv_heads: 1,
        window: 4,
        vocab: 256,
        moe: Some(MoeShape { experts: 8, top_k: 2, intermediate: 32 }),
    }
}

#[test]
fn tiny_moe_shape_runs_on_cpu_and_its_json_makes_a_decode_table() {
    let be = backends::open("cpu").unwrap();
    let shape = tiny_moe();
    let settings = Settings { warmup: 1, ..Settings::decode(6, 2, Quant::None) };
    let report = bench_model::run(&be, &shape, &[1, 3], &settings).unwrap();
    let cfg = shape.config().unwrap();
    assert_eq!(report.rows.len(), 2);

    // The bound's traffic: the whole model is the non-expert weights plus
    // every expert of every layer, as made on the device.
    let b1 = &report.rows[0].bytes;
    assert_eq!((b1.moe_layers, b1.experts_per_layer), (6, 2.0));
    assert_eq!(b1.weights + b1.moe_layers * 8 * b1.expert, report.model_bytes);
    // One expert: gate_up 2·32·64 + down 64·32 bf16 elements.
    assert_eq!(b1.expert, (2 * 32 * 64 + 64 * 32) * 2);
    let b3 = &report.rows[1].bytes;
    assert!((b3.experts_per_layer - 8.0 * (1.0 - 0.75f64.powi(3))).abs() < 1e-12);
    // Timed steps feed positions 7 and 8: KV over 8 and 9 tokens (4 on sliding layers), 3 sequences.
    let kv = 3.0 * (bound::kv_bytes(&cfg, 7) + bound::kv_bytes(&cfg, 8)) as f64 / 2.0;
    assert_eq!(b3.kv, kv);
    for r in &report.rows {
        assert!(r.tokens_per_s.is_finite() && r.tokens_per_s > 0.0, "{r:?}");
        let bound = report.bound_tokens_per_s(r);
        assert!(bound.is_finite() && bound > 0.0);
        assert_eq!(bound, r.batch as f64 * report.copy.best() / r.bytes.total());
    }

    let md = report.markdown();
    assert!(md.contains("shape `tiny-moe`") && md.contains("8 experts, top-2, expert intermediate 32"), "{md}");
    let doc = report.json();
    assert_eq!(doc["shape"], "tiny-moe");
    assert_eq!(doc["hf_config"]["num_experts"], 8);
    assert_eq!(doc["rows"][1]["bytes_per_step"]["experts_per_layer"].as_f64(), Some(b3.experts_per_layer));

    // decode_tables.py reads this JSON (as cuda and wgpu) and HF lines.
    let tmp = Tmp::new("bench-model", "tables");
    let json = tmp.0.join("bm.json");
    std::fs::write(&json, serde_json::to_string(&doc).unwrap()).unwrap();
    let hf = tmp.0.join("hf.jsonl");
    let hf_line = |mode: &str, batch: usize, tps: f64| {
        serde_json::json!({"shape": "tiny-moe", "mode": mode, "batch": batch, "tokens_per_s": tps, "error": null, "note": "x"}).to_string()
    };
    std::fs::write(&hf, [hf_line("eager", 1, 1.5), hf_line("compile", 3, 2.5)].join("\n")).unwrap();
    let text = decode_tables(&["--shape", "tiny-moe", "--batches", "1,3"], &[("--cuda", &json), ("--wgpu", &json), ("--hf", &hf)]);
    let lines: Vec<&str> = text.lines().collect();
    let (r1, r3) = (&report.rows[0], &report.rows[1]);
    let (bd1, bd3) = (report.bound_tokens_per_s(r1), report.bound_tokens_per_s(r3));
    let pct = |x: f64| if x >= 10.0 { format!("{x:.0}%") } else { format!("{x:.1}%") };
    let cuda = format!(
        "| Switchyard cuda | {:.1} | {} | {:.1} | {} |",
        r1.tokens_per_s,
        pct(100.0 * r1.tokens_per_s / bd1),
        r3.tokens_per_s,
        pct(100.0 * r3.tokens_per_s / bd3)
    );
    assert_eq!(lines[2], cuda, "{text}");
    assert_eq!(lines[4], format!("| HF eager | 1.5 | {} | not run | - |", pct(100.0 * 1.5 / bd1)), "{text}");
    assert_eq!(lines[5], format!("| HF compile | not run | - | 2.5 | {} |", pct(100.0 * 2.5 / bd3)), "{text}");
    assert!(lines[6].starts_with("| bound (cuda copy ") && lines[6].contains(&format!("| {bd1:.1} | 100% | {bd3:.1} | 100% |")), "{text}");
}

#[test]
fn a_prefill_measurement_makes_the_prefill_table() {
    // --prefill-len on the MoE shape: one pass of 10 rows through the
    // prefill attention and the grouped expert GEMMs; decode_tables.py
    // --prefill sets it beside HF's prefill lines.
    let be = backends::open("cpu").unwrap();
    let shape = tiny_moe();
    let settings = Settings { warmup: 1, prefill_len: 10, prefill_passes: 3, ..Settings::decode(4, 1, Quant::None) };
    let report = bench_model::run(&be, &shape, &[1], &settings).unwrap();
    let p = report.prefill.as_ref().unwrap();
    assert_eq!(p.flops, bench_model::prefill::prefill_flops(&shape.config().unwrap(), 10));
    let count = |e: &str| p.launches.iter().find(|(n, _)| n == e).map_or(0, |(_, c)| *c);
    assert_eq!((count("attn::attention_prefill"), count("moe_expert::moe_grouped_gemm_bf16")), (6, 12), "{:?}", p.launches);
    let tmp = Tmp::new("bench-model", "prefill");
    let json = tmp.0.join("bm.json");
    std::fs::write(&json, serde_json::to_string(&report.json()).unwrap()).unwrap();
    let hf = tmp.0.join("hf.jsonl");
    let line = |mode: &str, ms: f64| {
        serde_json::json!({"shape": "tiny-moe", "mode": mode, "batch": 1, "prefill_len": 10, "ms": ms, "tokens_per_s": 10.0 / (ms * 1e-3),
            "error": null, "note": "x", "transformers": "t", "torch": "t"})
        .to_string()
    };
    std::fs::write(&hf, [line("prefill-eager", 50.0), line("prefill-compile", 20.0)].join("\n")).unwrap();
    let text = decode_tables(&["--prefill", "--shape", "tiny-moe"], &[("--cuda", &json), ("--hf", &hf)]);
    let lines: Vec<&str> = text.lines().collect();
    let tf = |ms: f64| p.flops.total() / (ms * 1e-3) / 1e12;
    assert_eq!(lines[2], format!("| Switchyard cuda | 10 | {:.1} | {:.0} | {:.1} | 1.00x |", p.ms_median, p.tokens_per_s, tf(p.ms_median)));
    assert_eq!(lines[3], format!("| HF eager | 10 | 50.0 | 200 | {:.1} | {:.2}x |", tf(50.0), p.tokens_per_s / 200.0), "{text}");
    assert_eq!(lines[4], format!("| HF compile | 10 | 20.0 | 500 | {:.1} | {:.2}x |", tf(20.0), p.tokens_per_s / 500.0), "{text}");
    assert!(text.contains(&format!("Switchyard kernels of one pass ({} launches", p.launch_count())), "{text}");
}

#[test]
fn prefill_flags_are_checked_before_a_backend_opens() {
    // --backend nosuch would be refused if a backend were opened first.
    for (args, needle) in [
        (&["--prefill-passes", "3"][..], "--prefill-passes applies to a prefill measurement: give --prefill-len too"),
        (&["--prefill-len", "0"][..], "--prefill-len must be at least 1"),
        (&["--prefill-len", "8193"][..], "--prefill-len 8193: at most the benchmark model's context of 8192"),
        (&["--prefill-len", "4096", "--prefill-passes", "0"][..], "--prefill-passes 0: expected 1..=1000"),
    ] {
        let out = switchyard(&[&["bench-model", "--backend", "nosuch"][..], args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn quantized_storage_runs_and_the_bound_counts_its_bytes() {
    // --quant nvfp4 / fp8-embed: the weights are made in the loader's
    // storage, and the bound's bytes are what was placed on the device.
    let be = backends::open("cpu").unwrap();
    let shape = tiny_moe();
    for quant in [Quant::Nvfp4, Quant::Fp8Embed] {
        let settings = Settings { warmup: 1, ..Settings::decode(4, 1, quant) };
        let report = bench_model::run(&be, &shape, &[1], &settings).unwrap();
        let b = &report.rows[0].bytes;
        assert_eq!(b.weights + b.moe_layers * 8 * b.expert, report.model_bytes, "{quant}");
        let fp4 = |n: usize, k: usize| n * k / 2 + n * k / 16;
        let expert = if quant == Quant::Nvfp4 {
            // gate_up [64, 64] and down [64, 32] per expert, each with its f32 global scale.
            fp4(64, 64) + 4 + fp4(64, 32) + 4
        } else {
            (2 * 32 * 64 + 64 * 32) * 2
        };
        assert_eq!(b.expert, expert, "{quant}");
        assert!(report.rows[0].tokens_per_s.is_finite() && report.rows[0].tokens_per_s > 0.0);
        assert!(report.markdown().contains(&format!("(quant {quant})")));
        assert_eq!(report.json()["quant"], quant.to_string());
    }
    let bf16 = bench_model::random_model(&be, shape.config().unwrap(), Quant::None).unwrap().weights.device_bytes;
    let fp4 = bench_model::random_model(&be, shape.config().unwrap(), Quant::Nvfp4).unwrap().weights.device_bytes;
    assert!(fp4 * 2 < bf16, "nvfp4 {fp4} bytes against bf16 {bf16}");
}

#[test]
fn decode_tables_self_test_passes() {
    let out = Command::new("python3").arg(repo().join("scripts/decode_tables.py")).arg("--self-test").output().expect("python3 runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("4 passed, 0 failed"), "{text}");
}

fn switchyard(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_switchyard")).args(args).env_remove("SWITCHYARD_BACKEND").output().expect("spawn switchyard")
}

#[test]
fn print_hf_config_names_the_shape_and_opens_no_backend() {
    // --backend nosuch would be refused if a backend were opened.
    let out = switchyard(&["bench-model", "--shape", "26b-a4b", "--backend", "nosuch", "--print-hf-config"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c, Shape::gemma4_26b_a4b().hf_config());
    assert_eq!((c["hidden_size"].as_u64(), c["num_experts"].as_u64(), c["top_k_experts"].as_u64()), (Some(2816), Some(128), Some(8)));
    // Overrides reach the printed config.
    let out = switchyard(&["bench-model", "--layers", "7", "--vocab", "1000", "--print-hf-config"]);
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (c["num_hidden_layers"].as_u64(), c["vocab_size"].as_u64(), c["enable_moe_block"].as_bool()),
        (Some(7), Some(1000), Some(false))
    );
    let out = switchyard(&["bench-model", "--shape", "26b-a4b", "--hidden", "1024", "--print-hf-config"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--hidden applies to --shape default only"));
    let out = switchyard(&["bench-model", "--shape", "7b", "--print-hf-config"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("expected one of default, 26b-a4b"));
}

#[test]
fn the_31b_shape_runs_under_tp_2_on_cpu_with_its_all_reduce_time() {
    // The whole 31b shape is 61 GB; one of its layers at full width (the
    // last layer is full attention: head_dim 512, 4 KV heads, V = K) and a
    // 512-row table is 1.07 GB, split over two CPU reference ranks.
    let out = switchyard(&[
        "bench-model",
        "--backend",
        "cpu",
        "--shape",
        "31b",
        "--tp",
        "2",
        "--layers",
        "1",
        "--vocab",
        "512",
        "--batch",
        "2",
        "--prompt-len",
        "1",
        "--steps",
        "1",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((d["shape"].as_str(), d["tp"].as_u64(), d["comm"].as_str()), (Some("31b"), Some(2), Some("threads")));
    let c = &d["hf_config"];
    assert_eq!(
        (
            c["hidden_size"].as_u64(),
            c["intermediate_size"].as_u64(),
            c["num_attention_heads"].as_u64(),
            c["num_global_key_value_heads"].as_u64()
        ),
        (Some(5376), Some(21504), Some(32), Some(4))
    );
    // Both shards' weights: q 16384·h, k 2048·h, o h·16384, the MLP 3·21504·h,
    // the table 512·h, each once; the norms and the layer scalar on each rank.
    let h = 5376u64;
    let split = 2 * ((16384 + 2048 + 16384 + 3 * 21504 + 512) * h);
    let replicated = 2 * (2 * (2 * 512 + 5 * h) + 4);
    // Each rank's table has one zero row after its own (ARCHITECTURE.md).
    assert_eq!(d["model_bytes"].as_u64(), Some(split + replicated + 2 * 2 * h));
    let row = &d["rows"][0];
    assert_eq!(row["batch"], 2);
    assert!(row["tokens_per_s"].as_f64().unwrap() > 0.0);
    let a = &row["all_reduce"];
    // The embedding's and the layer's two, of [2, 5376] each.
    assert_eq!(
        (a["calls_per_step"].as_u64(), a["elements_per_step"].as_u64(), a["mode"].as_str()),
        (Some(3), Some(3 * 2 * h), Some("eager"))
    );
    let (ms, us) = (a["ms_per_step"].as_f64().unwrap(), a["us_per_token"].as_f64().unwrap());
    assert!(ms > 0.0 && (us - ms * 1e3 / 2.0).abs() < 1e-9, "{a}");
    assert_eq!(a["ms_per_step_by_rank"].as_array().map(Vec::len), Some(2));
    assert!(d["all_reduce_note"].as_str().unwrap().contains("HOST figure"), "{d}");
}
