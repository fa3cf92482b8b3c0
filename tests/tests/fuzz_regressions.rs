//! Regression tests for what the fuzz targets (`fuzz/`) found, replayed
//! through the very harness the fuzzer runs: `fuzz/src/lib.rs` is included
//! here by path, so a saved input takes the same code path as under
//! libFuzzer, only in a plain `cargo test` (debug build: overflow checks on,
//! as in the fuzz build).
//!
//! Findings (each fixed, each kept here):
//! - launch_validator: every typed launcher computed the byte extents it
//!   range-checks with plain `*` (`bf16s(rows * dim)`, `e * big_k / 2 * big_n`,
//!   `rows * k` in `moe_route`, ...). Shapes whose product overflows panicked
//!   with debug assertions, and in release wrapped to a small size that
//!   passed the range check, so on a GPU the kernel could run past its
//!   buffer. Fixed with saturating sizes (`kernels/src/ops.rs::sat`).
//! - launch_validator: `norm_block(dim)` overflowed for huge `dim`.
//! - launch_validator, raw launches on the CPU reference: kernels allocated
//!   their output image (or one range per split, or a weight panel) from the
//!   scalar arguments before range-checking the output, so tiny buffers with
//!   huge sizes asked for 8-64 GiB (OOM: gather, combine, grouped GEMM with
//!   e = 0, split-K partial, decode reduce with splits = 0); and row loops
//!   whose rows touch no memory (dim = 0, hdim = 0, GEMM with m = 0) spun
//!   through up to 2^32 empty rows (timeouts). Fixed by checking the output
//!   range first and refusing those empty dimensions.
//! - checkpoint_loader (seeded by hand, then fuzzed): a config claiming
//!   10^9 layers made the parser allocate per-layer tables of that length;
//!   head counts whose products overflow panicked in the weight loader.
//!   Fixed by `config::MAX_LAYERS` and a check, before any upload, that the
//!   sizes the config declares fit in the checkpoint's tensor data.
//! - issue 16 (hostile input): the loader target gained generate's path
//!   (the `--max-new-tokens` parser, `request::build`'s vocabulary and
//!   context checks, greedy generation) and a third target parses
//!   config.json alone; both seed corpora replay here with the outcome each
//!   seed's name calls for, and every message must be clean (short, no raw
//!   control character).
#[allow(dead_code)]
#[path = "../../fuzz/src/lib.rs"]
mod harness;

use harness::{join_loader_input, load_once, loader_case, split_loader_input, GenOutcome, LoadOutcome};
use std::path::{Path, PathBuf};
use switchyard_core::{DeviceBuffer, Error};
use switchyard_kernels::Ops;

fn fuzz_dir(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz").join(sub)
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .collect();
    v.sort();
    v
}

fn load(data: &[u8]) -> LoadOutcome {
    let input = split_loader_input(data).expect("text parts are UTF-8");
    load_once(input.quant, input.config, input.safetensors)
}

/// Every saved launch_validator crash input replays without a panic (each
/// panicked in the fuzz build before the saturating-size fix).
#[test]
fn launch_validator_crashes_replay_clean() {
    let inputs = files(&fuzz_dir("regressions/launch_validator"));
    assert!(!inputs.is_empty(), "the regression inputs are missing");
    for (name, data) in inputs {
        eprintln!("replaying {name}");
        harness::launch_once(&data);
    }
}

/// The launch seed corpus also replays (the fuzzer starts from it).
#[test]
fn launch_validator_seeds_replay_clean() {
    for (_, data) in files(&fuzz_dir("corpus/launch_validator")) {
        harness::launch_once(&data);
    }
}

/// Every loader seed replays, and the seeds do what their names say: the
/// micro models load (so the fuzzer starts from the whole success path),
/// the damaged ones fail with the error their damage calls for.
#[test]
fn checkpoint_loader_seeds_behave_as_named() {
    let seeds = files(&fuzz_dir("corpus/checkpoint_loader"));
    assert!(seeds.len() >= 10, "seed corpus missing");
    for (name, data) in seeds.into_iter().filter(|(n, _)| !n.starts_with("gen-")) {
        let out = load(&data);
        let ok = match (&out, name.as_str()) {
            (LoadOutcome::Loaded(bytes), n) if n.contains("-bf16-") || n.ends_with("-f32") || n.ends_with("-f16") => *bytes > 0,
            (LoadOutcome::CheckpointErr(m), n) if n.contains("truncated") || n.contains("header-") || n.contains("len-only") => {
                m.contains("unreadable safetensors")
            }
            (LoadOutcome::CheckpointErr(m), "tiny-dense-huge-len") => m.contains("unreadable safetensors"),
            (LoadOutcome::ModelErr(m), n) if n.contains("missing-tensor") => m.contains("missing tensor"),
            (LoadOutcome::ModelErr(m), n) if n.contains("wrong-shape") => m.contains("has shape"),
            (LoadOutcome::ModelErr(m), "micro-no-config") => m.contains("not valid JSON"),
            (LoadOutcome::ModelErr(m), "tiny-dense-layers-1e9") => m.contains("num_hidden_layers"),
            (LoadOutcome::ModelErr(m), "tiny-dense-hidden-1e9") => m.contains("declares at least"),
            // I64 is 8 bytes an element, so the BF16-sized offsets no longer tile the data.
            (LoadOutcome::CheckpointErr(m), "tiny-dense-bad-dtype") => m.contains("invalid shape, data type, or offset"),
            _ => false,
        };
        assert!(ok, "seed {name}: unexpected outcome {out:?}");
    }
}

fn tiny_dense_config() -> serde_json::Value {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tiny-dense/config.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn tiny_dense_bytes() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tiny-dense/model.safetensors")).unwrap()
}

use switchyard_model::serde_json;

/// A config whose head counts overflow `num_heads · head_dim` (it panicked
/// computing tensor shapes) is refused by the parser, naming the field;
/// one whose products fit but outgrow the file, by the size check.
#[test]
fn loader_refuses_overflowing_head_count() {
    let mut cfg = tiny_dense_config();
    cfg["num_attention_heads"] = serde_json::json!(1u64 << 62);
    match load(&join_loader_input(0, &cfg.to_string(), &tiny_dense_bytes())) {
        LoadOutcome::ModelErr(m) => assert!(m.contains("field `num_attention_heads`") && m.contains("overflows"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    cfg["num_attention_heads"] = serde_json::json!(1u64 << 40);
    match load(&join_loader_input(0, &cfg.to_string(), &tiny_dense_bytes())) {
        LoadOutcome::ModelErr(m) => assert!(m.contains("declares at least") && m.contains("bytes of weights"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Every loader seed also runs generate's path: the models that load
/// generate with the default flags, and each `gen-*` seed (flags at their
/// edges on a micro model with a 32-position context) gets the outcome its
/// name calls for.
#[test]
fn checkpoint_loader_seeds_run_the_generation_path() {
    for (name, data) in files(&fuzz_dir("corpus/checkpoint_loader")) {
        let input = split_loader_input(&data).expect("text parts are UTF-8");
        let (load, gen) = loader_case(input);
        let loads = matches!(load, LoadOutcome::Loaded(_));
        let gen_msg = |g: &Option<GenOutcome>| match g {
            Some(GenOutcome::FlagErr(m) | GenOutcome::RequestErr(m) | GenOutcome::GenerateErr(m)) => m.clone(),
            _ => String::new(),
        };
        let m = gen_msg(&gen);
        let ok = match (name.as_str(), &gen) {
            (n, Some(GenOutcome::Generated(t))) if n.starts_with("micro-") => !t.is_empty() && t.len() <= 3,
            (n, None) if !n.starts_with("gen-") => !loads,
            ("gen-ok-ignore-eos" | "gen-context-2^64", Some(GenOutcome::Generated(t))) => t.len() == harness::FUZZ_MAX_NEW,
            ("gen-default-prompt", Some(GenOutcome::RequestErr(_))) => m.contains("the default prompt") && m.contains("vocabulary of 16"),
            ("gen-past-context", Some(GenOutcome::RequestErr(_))) => m.contains("at most 2 new tokens fit"),
            ("gen-prompt-past-context", Some(GenOutcome::RequestErr(_))) => m.contains("33 tokens exceed the model's context of 32"),
            ("gen-max-new-2^59" | "gen-max-new-u64-max", Some(GenOutcome::RequestErr(_))) => m.contains("max_position_embeddings"),
            ("gen-max-new-2^64", Some(GenOutcome::FlagErr(_))) => m.contains("more tokens than"),
            ("gen-max-new-zero", Some(GenOutcome::FlagErr(_))) => m.contains("at least 1"),
            ("gen-id-past-vocab", Some(GenOutcome::RequestErr(_))) => m.contains("token id 16 is outside"),
            ("gen-id-u32-max", Some(GenOutcome::RequestErr(_))) => m.contains("token id 4294967295 is outside"),
            ("gen-prompt-escapes", Some(GenOutcome::RequestErr(_))) => m.contains("\\u{1b}]0;pwned\\u{7}"),
            ("gen-max-new-escapes", Some(GenOutcome::FlagErr(_))) => m.contains("\\u{1b}[2J"),
            _ => false,
        };
        assert!(ok, "seed {name}: load {load:?}, generation {gen:?}");
    }
}

/// The config_json seeds: the fixtures' and micro models' configs parse;
/// each hostile one is refused for the reason its name gives, blaming the
/// field the file actually has.
#[test]
fn config_json_seeds_behave_as_named() {
    let seeds = files(&fuzz_dir("corpus/config_json"));
    assert!(seeds.len() >= 15, "config_json corpus missing");
    for (name, data) in seeds {
        let out = harness::config_once(&data);
        let ok = match (name.as_str(), &out) {
            ("tiny-dense" | "tiny-moe" | "micro-dense" | "micro-moe" | "wrapped" | "context-2^64", Ok(_)) => true,
            ("global-head-dim-44", Err(m)) => m.contains("field `global_head_dim`: = 44"),
            ("global-kv-heads-3", Err(m)) => m.contains("field `num_global_key_value_heads`: = 3"),
            ("per-layer-1-and-01", Err(m)) => m.contains("keys `01` and `1` both name layer 1"),
            ("per-layer-plus-key", Err(m)) => m.contains("per_layer_config.+1") && m.contains("key must be a layer index"),
            ("rope-theta-1e-50", Err(m)) => m.contains("rope_theta") && m.contains("underflows to 0 in f32"),
            ("rope-theta-1e-37", Err(m)) => m.contains("rope_theta") && m.contains("RoPE angle") && m.contains("overflows f32"),
            ("softcap-1e300", Err(m)) => m.contains("final_logit_softcapping") && m.contains("overflows f32"),
            ("context-zero", Err(m)) => m.contains("max_position_embeddings`: must be > 0"),
            ("heads-2^62", Err(m)) => m.contains("field `num_attention_heads`"),
            ("escapes", Err(m)) => m.contains("`\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{9b}31m\\u{202e}` is not supported"),
            ("duplicate-key", Err(m)) => m.contains("duplicate key `hidden_size`"),
            ("not-utf8", Err(m)) => m.contains("not UTF-8"),
            ("deep", Err(m)) => m.contains("recursion limit"),
            _ => false,
        };
        assert!(ok, "seed {name}: unexpected outcome {out:?}");
    }
}

/// hidden_size = 10^9 is refused before any tensor is read, even though the
/// checkpoint is otherwise complete: the declared embedding alone is far
/// larger than the file.
#[test]
fn loader_refuses_config_larger_than_file() {
    let mut cfg = tiny_dense_config();
    cfg["hidden_size"] = serde_json::json!(1_000_000_000u64);
    match load(&join_loader_input(0, &cfg.to_string(), &tiny_dense_bytes())) {
        LoadOutcome::ModelErr(m) => assert!(m.contains("declares at least"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// 10^9 layers is refused by the parser (it would otherwise allocate
/// per-layer tables of that length before reading any tensor).
#[test]
fn loader_refuses_absurd_layer_count() {
    let mut cfg = tiny_dense_config();
    cfg["num_hidden_layers"] = serde_json::json!(1_000_000_000u64);
    cfg.as_object_mut().unwrap().remove("layer_types");
    match load(&join_loader_input(0, &cfg.to_string(), &tiny_dense_bytes())) {
        LoadOutcome::ModelErr(m) => assert!(m.contains("num_hidden_layers") && m.contains("exceeds"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The unmodified fixture still loads through the same path (the size check
/// does not refuse a correct checkpoint).
#[test]
fn loader_accepts_the_tiny_dense_fixture() {
    let cfg = tiny_dense_config();
    for q in 0..3 {
        match load(&join_loader_input(q, &cfg.to_string(), &tiny_dense_bytes())) {
            LoadOutcome::Loaded(bytes) => assert!(bytes > 0),
            other => panic!("quant {q}: {other:?}"),
        }
    }
}

/// Each launcher site that overflowed, called directly with the shapes that
/// overflow: a typed error (out of bounds or invalid argument), no panic,
/// and nothing launched.
#[test]
fn launchers_with_overflowing_shapes_are_refused() {
    let be = switchyard_cpu_ref::cpu_backend();
    let ops = Ops::new(be.clone());
    let b = DeviceBuffer::new(&be, 256).unwrap();
    let r = b.region();
    let big = 1usize << 62;
    let huge = usize::MAX;
    let checks: Vec<(&str, switchyard_core::Result<()>)> = vec![
        ("moe_route rows·k", ops.moe_route(r, r, r, r, r, r, big, 8, 4)),
        ("moe_offsets e+1", ops.moe_offsets(r, r, r, huge)),
        ("rmsnorm rows·dim", ops.rmsnorm_bf16(b.region(), b.region(), None, 3, big, 1e-6)),
        ("rmsnorm norm_block", ops.rmsnorm_bf16(b.region(), b.region(), None, 1, huge - 1, 1e-6)),
        ("embed_gather_bf16 vocab·h", ops.embed_gather_bf16(r, r, r, 1, big, 16, 1.0)),
        ("gather_rows_bf16 n_src·h", ops.gather_rows_bf16(r, r, r, 1, big, 16)),
        ("gelu_mul rows·2·inter", ops.gelu_mul_bf16(r, r, 1 << 30, 1 << 30)),
        ("lm_head vocab·hdim", ops.lm_head_logits_bf16(r, r, r, 1, big, 16, 0.0)),
        ("dense_gemm_splitk_bf16 m·n", ops.dense_gemm_splitk_bf16(r, r, r, 1 << 31, 1 << 31, 8, 8)),
        ("moe_gather n·h", ops.moe_gather_bf16(r, r, r, 1 << 30, 1, 1 << 30, 1)),
    ];
    for (what, r) in checks {
        match r {
            Err(Error::OutOfBounds { .. } | Error::InvalidArgument { .. }) => {}
            other => panic!("{what}: expected a typed refusal, got {other:?}"),
        }
    }
    drop(b);
    assert_eq!(be.live_bytes(), 0);
}

/// The raw launches behind the CPU reference's OOMs and timeouts, one per
/// fixed site: each must fail fast with a typed error (a regression would
/// allocate gigabytes or spin for minutes, and show up as an abort or a
/// hung test).
#[test]
fn raw_launches_that_exhausted_memory_or_spun_fail_fast() {
    use switchyard_core::Arg::{F, I, P, U};
    use switchyard_kernels::{attn, gemm, head, moe, norm};
    let be = switchyard_cpu_ref::cpu_backend();
    let b = DeviceBuffer::zeroed(&be, 256).unwrap();
    let a = b.addr();
    let big = i32::MAX;
    let t0 = std::time::Instant::now();
    let cases: Vec<(&switchyard_core::KernelSig, Vec<switchyard_core::Arg>)> = vec![
        (&norm::RMSNORM_BF16, vec![P(a), P(a), P(0), I(i32::MAX), I(0), F(1e-6)]),
        (&norm::LAYER_OUT_BF16, vec![P(a), P(a), P(a), P(0), P(a), I(i32::MAX), I(0), F(1e-6)]),
        (&gemm::DENSE_GEMM_BF16, vec![P(a), P(a), P(a), U(0), U(u32::MAX), U(0)]),
        (&gemm::DENSE_GEMM_SPLITK_BF16, vec![P(a), P(a), P(a), U(0), U(1), U(1), U(u32::MAX)]),
        (&gemm::DENSE_GEMM_SPLITK_BF16, vec![P(a), P(a), P(a), U(1), U(2), U(2), U(u32::MAX)]),
        (&moe::expert::MOE_GATHER_BF16, vec![P(a), P(a), P(a), I(1), I(1), I(big), I(0)]),
        (&moe::expert::MOE_COMBINE_BF16, vec![P(a), P(a), P(a), P(a), I(big), I(0), I(big), I(0)]),
        // The decode reduce's findings (batch·nh huge with no splits; batch 0 with a huge hd
        // sizing a scratch row), now one kernel with no caller workspace.
        (&attn::ATTENTION_DECODE, decode_args(a, [big, 1, big, 1, 8, 1, 1, 1, 0])),
        (&attn::ATTENTION_DECODE, decode_args(a, [0, 1, 1, 1, big, 1, 1, 1, 0])),
        (&head::LM_HEAD_LOGITS_BF16, vec![P(a), P(a), P(a), I(0), I(big), I(0), F(0.0)]),
    ];
    for (sig, args) in cases {
        match be.launch(sig, &args) {
            Err(Error::OutOfBounds { .. } | Error::InvalidArgument { .. }) => {}
            other => panic!("{}: expected a typed refusal, got {other:?}", sig.symbol),
        }
    }
    // n = 0 rows and e = 0 experts: an empty output, so Ok — but before the
    // fix the 2^16 x 2^16 weight panel (16 GiB of f32) was allocated anyway.
    let sig = &moe::expert::MOE_GROUPED_GEMM_BF16;
    let args = [P(a), P(a), P(a), P(a), I(0), I(0), I(1 << 16), I(1 << 16)];
    be.launch(sig, &args).expect("an empty grouped GEMM is a no-op");
    // Each is refused before any real work: all of them together in well
    // under a second even unoptimised (the spinning versions took minutes).
    assert!(t0.elapsed().as_secs() < 5, "refusals took {:?}", t0.elapsed());
    drop(b);
    assert_eq!(be.live_bytes(), 0);
}

/// `attention_decode`'s arguments: six pointers to `a`, then batch, max_ctx,
/// nh, nkv, hd, page, max_pages, num_slots, window, and scale 1.
fn decode_args(a: u64, ints: [i32; 9]) -> Vec<switchyard_core::Arg> {
    use switchyard_core::Arg::{F, I, P};
    let mut v = vec![P(a); 6];
    v.extend(ints.map(I));
    v.push(F(1.0));
    v
}
