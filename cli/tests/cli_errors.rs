//! Bad command lines against the built `switchyard` binary: each must exit
//! non-zero, say what is wrong on stderr, print nothing on stdout that looks
//! like a result (token ids, JSON), and never panic.
//!
//! It lives in the model package (not `tests/`) so that Cargo builds the
//! binary before this test and hands over its path in
//! `CARGO_BIN_EXE_switchyard`: a plain `cargo test --workspace` always runs
//! it against the current build.
use std::path::Path;
use std::process::{Command, Output};

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_switchyard")
}

/// The shared fixtures live in the tests crate.
fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn run(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        // The backend comes from the command line only, and stays on the CPU.
        .env_remove("SWITCHYARD_BACKEND")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("spawn switchyard")
}

/// Asserts a clean refusal: non-zero exit, `needle` on stderr (the specific
/// complaint), no panic, and no result-like output on stdout.
fn refused(args: &[&str], needle: &str) {
    let out = run(args);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let ctx = format!("switchyard {args:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
    assert!(!out.status.success(), "exit status 0 for bad input: {ctx}");
    // 101 is Rust's panic exit code; the others are clap's 2 and main's 1.
    assert_ne!(out.status.code(), Some(101), "exited like a panic: {ctx}");
    assert!(!stderr.contains("panicked") && !stdout.contains("panicked"), "panicked: {ctx}");
    assert!(stderr.to_lowercase().contains(&needle.to_lowercase()), "stderr does not say `{needle}`: {ctx}");
    // A result is a line of comma-separated ids or a JSON object; neither may appear.
    let looks_like_ids = stdout.lines().any(|l| !l.trim().is_empty() && l.trim().split(',').all(|t| t.trim().parse::<u32>().is_ok()));
    assert!(!looks_like_ids && !stdout.contains("\"tokens\""), "stdout looks like a result: {ctx}");
}

#[test]
fn unknown_subcommand() {
    refused(&["frobnicate"], "unrecognized subcommand");
}

#[test]
fn unknown_flag() {
    refused(&["generate", "--no-such-flag"], "unexpected argument");
}

#[test]
fn unknown_backend() {
    refused(&["generate", "--backend", "nosuch"], "unknown backend \"nosuch\"");
    refused(&["info", "--backend", "nosuch"], "unknown backend \"nosuch\"");
    refused(&["parity", "--backend", "nosuch"], "unknown backend \"nosuch\"");
}

#[test]
fn prompt_ids_not_numbers() {
    refused(&["generate", "--prompt-ids", "1,x"], "`x` is not a token id");
    refused(&["generate", "--prompt-ids", "1,-3"], "`-3` is not a token id");
    refused(&["generate", "--prompt-ids", ""], "--prompt-ids");
}

#[test]
fn prompt_id_past_vocab() {
    // The built-in model's vocabulary is far smaller than this id.
    refused(&["generate", "--prompt-ids", "1,4000000000"], "4000000000");
}

#[test]
fn max_new_tokens_invalid() {
    // clap reads `-1` as a flag and names it; the message could name the
    // option too, but that is main.rs's clap setup (allow_negative_numbers).
    refused(&["generate", "--max-new-tokens", "-1"], "unexpected argument '-1'");
    refused(&["generate", "--max-new-tokens", "0"], "--max-new-tokens must be at least 1");
    refused(&["generate", "--max-new-tokens", "ten"], "invalid value");
}

/// A length past the model's context: refused up front, naming the flag
/// and the limit, before any allocation is sized by it.
#[test]
fn max_new_tokens_absurd() {
    refused(&["generate", "--max-new-tokens", "99999999999999"], "past the model's context of");
    refused(&["generate", "--max-new-tokens", "99999999999999"], "(max_position_embeddings");
}

#[test]
fn quant_bogus() {
    refused(&["generate", "--quant", "bogus"], "--quant bogus");
}

#[test]
fn model_dir_missing() {
    refused(&["generate", "--model", "/nonexistent/switchyard-model"], "/nonexistent/switchyard-model");
}

/// A copy of the tiny-dense fixture whose safetensors is cut short.
#[test]
fn model_with_truncated_safetensors() {
    let fx = fixtures().join("tiny-dense");
    let dir = std::env::temp_dir().join(format!("switchyard-cli-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fx.join("config.json"), dir.join("config.json")).unwrap();
    let st = std::fs::read(fx.join("model.safetensors")).unwrap();
    std::fs::write(dir.join("model.safetensors"), &st[..st.len() / 2]).unwrap();
    let d = dir.to_str().unwrap().to_string();
    let result = std::panic::catch_unwind(|| refused(&["generate", "--model", &d], "unreadable safetensors"));
    std::fs::remove_dir_all(&dir).ok();
    result.unwrap();
}

/// A config that is not JSON at all.
#[test]
fn model_with_garbage_config() {
    let fx = fixtures().join("tiny-dense");
    let dir = std::env::temp_dir().join(format!("switchyard-cli-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), "{ not json").unwrap();
    std::fs::copy(fx.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let d = dir.to_str().unwrap().to_string();
    let result = std::panic::catch_unwind(|| refused(&["generate", "--model", &d], "config.json"));
    std::fs::remove_dir_all(&dir).ok();
    result.unwrap();
}

#[test]
fn synthetic_bad_preset() {
    let dir = std::env::temp_dir().join(format!("switchyard-cli-syn-{}", std::process::id()));
    refused(&["synthetic", "--out", dir.to_str().unwrap(), "--preset", "huge"], "--preset huge");
    assert!(!dir.exists(), "a refused preset still wrote {}", dir.display());
}

#[test]
fn bench_bad_arguments() {
    refused(&["bench", "--iters", "0"], "--iters must be at least 1");
    refused(&["bench", "--scale", "enormous"], "--scale enormous");
}

/// The control: the same binary does succeed on good input, so the checks
/// above test refusals, not a binary that always fails.
#[test]
fn good_input_succeeds() {
    let out = run(&["generate", "--max-new-tokens", "2", "--ignore-eos", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: switchyard_model::serde_json::Value = switchyard_model::serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(doc["tokens"].as_array().map(Vec::len), Some(2), "{doc}");
}
