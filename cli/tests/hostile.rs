//! Hostile input against the built `switchyard` binary (issue 16): flags at
//! their type's extremes, requests past the context, paths that are not
//! regular files, attacker-sized indexes, stdout closed or full, escape
//! sequences in anything quoted, ambiguous checkpoints, planted symlinks.
//!
//! Every refusal must be a clean one: a non-zero exit that is not a panic or
//! a signal, stderr naming the real problem with no raw control character,
//! nothing on stdout, and all of it before a deadline (a FIFO or a quadratic
//! loop shows up here as a hang, which the deadline turns into a failure).
//! The controls at the end check that acceptable input still works.
mod support;
use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use support::Tmp;
use switchyard_model::serde_json::{self, json, Value};

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_switchyard")
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-dense")
}

impl Tmp {
    /// A copy of the tiny-dense fixture.
    fn fixture(tag: &str) -> Tmp {
        let t = Tmp::new("hostile", tag);
        for f in ["config.json", "model.safetensors"] {
            std::fs::copy(fixture().join(f), t.0.join(f)).unwrap();
        }
        t
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn s(&self) -> &str {
        self.0.to_str().unwrap()
    }

    fn config(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.path("config.json")).unwrap()).unwrap()
    }

    fn set_config(&self, v: &Value) {
        std::fs::write(self.path("config.json"), v.to_string()).unwrap();
    }
}

struct Run {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: String,
    ctx: String,
}

fn command<S: AsRef<OsStr>>(args: &[S]) -> Command {
    let mut c = Command::new(binary());
    c.args(args).env_remove("SWITCHYARD_BACKEND").env_remove("SWITCHYARD_MAX_JSON_BYTES").env("RUST_BACKTRACE", "0");
    c
}

/// Waits for `child`, killing it and failing the test past `secs`.
fn wait(mut child: Child, secs: u64, what: &str) -> Run {
    let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_end(&mut v);
        }
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_end(&mut v);
        }
        v
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {secs} s (a hang)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = t_out.join().unwrap();
    let stderr = String::from_utf8_lossy(&t_err.join().unwrap()).into_owned();
    let ctx = format!("{what}\n--- status {status:?}\n--- stdout\n{}\n--- stderr\n{stderr}", String::from_utf8_lossy(&stdout));
    Run { status, stdout, stderr, ctx }
}

fn spawn(mut c: Command, secs: u64) -> Run {
    let what = format!("{c:?}");
    let child = c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn switchyard");
    wait(child, secs, &what)
}

/// Asserts a clean refusal whose stderr contains `needle`.
#[track_caller]
fn clean_refusal(r: &Run, needle: &str) {
    let ctx = &r.ctx;
    // A signal leaves no code; 101 is a Rust panic; clap exits 2, main 1.
    assert!(matches!(r.status.code(), Some(1 | 2)), "not a clean non-zero exit: {ctx}");
    assert!(!r.stderr.contains("panicked"), "panicked: {ctx}");
    assert!(r.stdout.is_empty(), "stdout not empty: {ctx}");
    assert!(r.stderr.contains(needle), "stderr does not say `{needle}`: {ctx}");
    let raw = r.stderr.chars().find(|&c| c != '\n' && switchyard_model::text::is_unsafe(c));
    assert!(raw.is_none(), "stderr carries a raw control character {raw:?}: {ctx}");
}

#[track_caller]
fn refused<S: AsRef<OsStr>>(args: &[S], needle: &str) -> Run {
    let r = spawn(command(args), 60);
    clean_refusal(&r, needle);
    r
}

#[track_caller]
fn refused_env<S: AsRef<OsStr>>(args: &[S], env: (&str, &OsStr), needle: &str) -> Run {
    let mut c = command(args);
    c.env(env.0, env.1);
    let r = spawn(c, 60);
    clean_refusal(&r, needle);
    r
}

fn ok<S: AsRef<OsStr>>(args: &[S]) -> Run {
    let r = spawn(command(args), 300);
    assert!(r.status.success(), "failed: {}", r.ctx);
    r
}

// ---------------------------------------------------------------------------
// 1. Integer flags and config sizes at their type's extremes.

/// The built-in model's context (max_position_embeddings), which the
/// generate refusals below name.
fn built_in_context() -> usize {
    let v: Value = serde_json::from_str(switchyard_model::default_model::CONFIG).expect("the built-in config.json");
    v["max_position_embeddings"].as_u64().expect("max_position_embeddings") as usize
}

#[test]
fn integer_flags_at_their_extremes() {
    let ctx = built_in_context();
    for n in ["576460752303423488", "18446744073709551615"] {
        refused(&["generate", "--max-new-tokens", n], &format!("past the model's context of {ctx} (max_position_embeddings"));
    }
    refused(&["generate", "--max-new-tokens", "18446744073709551616"], "more tokens than this machine can count");
    refused(&["bench", "--iters", "18446744073709551615"], "--iters 18446744073709551615: at most 100000");
    refused(&["bench-model", "--steps", "18446744073709551615"], "past the benchmark model's context of 8192");
    refused(&["bench-model", "--prompt-len", "18446744073709551615"], "more than 2^64 positions");
    refused(&["bench-model", "--hidden", "18446744073709551608"], "--hidden 18446744073709551608: at most");
    refused(&["bench-model", "--vocab", "18446744073709551615"], "--vocab 18446744073709551615: at most");
    refused(&["bench-model", "--layers", "18446744073709551615"], "--layers 18446744073709551615: at most 4096");
    refused(&["bench-model", "--batch", "1,18446744073709551615"], "--batch: `18446744073709551615` is not a batch size");
    refused(
        &["bench-model", "--prefill-len", "18446744073709551615"],
        "--prefill-len 18446744073709551615: at most the benchmark model's context of 8192",
    );
    refused(
        &["bench-model", "--prefill-len", "8", "--prefill-passes", "18446744073709551615"],
        "--prefill-passes 18446744073709551615: expected 1..=1000",
    );
    refused(&["parity", "--seed", "18446744073709551616"], "invalid value");
}

#[test]
fn config_sizes_at_their_extremes() {
    let d = Tmp::fixture("cfg-sizes");
    let base = d.config();
    let with = |k: &str, v: Value| {
        let mut c = base.clone();
        c[k] = v;
        d.set_config(&c);
    };
    // A context the config allows but no KV cache can index: sized with
    // checked arithmetic and refused before anything is allocated.
    with("max_position_embeddings", json!(u64::MAX));
    refused(&["generate", "--model", d.s(), "--max-new-tokens", "576460752303423488"], "i32 slot indices");
    with("max_position_embeddings", json!(0));
    refused(&["generate", "--model", d.s()], "field `max_position_embeddings`: must be > 0");
    with("vocab_size", json!(u64::MAX));
    refused(&["generate", "--model", d.s(), "--prompt-ids", "1"], "declares at least");
    with("num_attention_heads", json!(1u64 << 62));
    refused(
        &["generate", "--model", d.s()],
        "field `num_attention_heads`: = 4611686018427387904: times head_dim 48 (layer 0) it overflows",
    );
    with("num_attention_heads", json!(1u64 << 40));
    refused(&["generate", "--model", d.s()], "declares at least");
}

// ---------------------------------------------------------------------------
// 2. Context limits.

#[test]
fn requests_past_the_context_are_refused_up_front() {
    let ids = |n: usize| vec!["1"; n].join(",");
    let ctx = built_in_context();
    refused(&["generate", "--prompt-ids", &ids(ctx + 1)], &format!("{} tokens exceed the model's context of {ctx} positions", ctx + 1));
    // 60,000 ids on a 256-position model ran for minutes; now refused
    // before the weights load.
    let t0 = Instant::now();
    refused(&["generate", "--prompt-ids", &ids(60_000)], &format!("60000 tokens exceed the model's context of {ctx}"));
    assert!(t0.elapsed() < Duration::from_secs(20), "took {:?}", t0.elapsed());
    let prompt = ctx - 56;
    refused(&["generate", "--prompt-ids", &ids(prompt), "--max-new-tokens", "100"], "at most 56 new tokens fit");
}

// ---------------------------------------------------------------------------
// 3. Paths that are not regular files.

#[cfg(unix)]
fn mkfifo(p: &Path) {
    let ok = Command::new("mkfifo").arg(p).status().expect("mkfifo").success();
    assert!(ok, "mkfifo {}", p.display());
}

#[cfg(unix)]
#[test]
fn paths_that_are_not_regular_files() {
    use std::os::unix::fs::symlink;
    let d = Tmp::fixture("fifo-config");
    std::fs::remove_file(d.path("config.json")).unwrap();
    mkfifo(&d.path("config.json"));
    refused(&["generate", "--model", d.s()], "config.json: is a FIFO (named pipe), not a regular file");

    let d = Tmp::fixture("fifo-st");
    std::fs::remove_file(d.path("model.safetensors")).unwrap();
    mkfifo(&d.path("model.safetensors"));
    refused(&["generate", "--model", d.s()], "model.safetensors: is a FIFO (named pipe), not a regular file");

    let d = Tmp::fixture("dev-zero");
    std::fs::remove_file(d.path("config.json")).unwrap();
    symlink("/dev/zero", d.path("config.json")).unwrap();
    refused(&["generate", "--model", d.s()], "config.json: is a character device, not a regular file");

    let d = Tmp::fixture("dir-config");
    std::fs::remove_file(d.path("config.json")).unwrap();
    std::fs::create_dir(d.path("config.json")).unwrap();
    refused(&["generate", "--model", d.s()], "config.json: is a directory, not a regular file");

    let d = Tmp::fixture("loop");
    std::fs::remove_file(d.path("model.safetensors")).unwrap();
    symlink(d.path("model.safetensors"), d.path("model.safetensors")).unwrap();
    refused(&["generate", "--model", d.s()], "model.safetensors: is a symbolic link loop");

    let d = Tmp::fixture("dangling");
    std::fs::remove_file(d.path("model.safetensors")).unwrap();
    symlink(d.path("elsewhere.safetensors"), d.path("model.safetensors")).unwrap();
    refused(&["generate", "--model", d.s()], "which does not exist");

    let d = Tmp::fixture("dot-shard");
    std::fs::remove_file(d.path("model.safetensors")).unwrap();
    std::fs::write(d.path("model.safetensors.index.json"), r#"{"weight_map": {"model.norm.weight": "."}}"#).unwrap();
    refused(&["generate", "--model", d.s()], "= `.` is not a plain file name");

    let d = Tmp::fixture("not-a-dir");
    let file = d.path("config.json");
    refused(&["generate", "--model", file.to_str().unwrap()], "is a regular file, not a checkpoint directory");
    refused(&["generate", "--model", "/dev/zero"], "/dev/zero: is a character device, not a checkpoint directory");
}

#[test]
fn small_files_are_capped() {
    let d = Tmp::fixture("cap");
    let cap = |v: &str| ("SWITCHYARD_MAX_JSON_BYTES", OsStr::new(v).to_owned());
    let (k, v) = cap("100");
    refused_env(&["generate", "--model", d.s()], (k, &v), "over the 100-byte cap on config.json (set SWITCHYARD_MAX_JSON_BYTES");
    let (k, v) = cap("lots");
    refused_env(&["generate", "--model", d.s()], (k, &v), "SWITCHYARD_MAX_JSON_BYTES: `lots` is not a byte count");
}

// ---------------------------------------------------------------------------
// 4. Attacker-sized input: the shard index.

/// 100,000 distinct shard names (the unit test in the model crate takes
/// 300,000 through the de-duplication alone; the hostile-inputs script runs
/// 300,000 through the release binary). Quadratic de-duplication spent
/// minutes here before saying the first shard is missing.
#[test]
fn a_huge_index_reports_the_missing_shard_promptly() {
    let d = Tmp::fixture("huge-index");
    std::fs::remove_file(d.path("model.safetensors")).unwrap();
    let entries: Vec<String> = (0..100_000).map(|i| format!(r#""t{i:06}": "shard-{i:06}.safetensors""#)).collect();
    std::fs::write(d.path("model.safetensors.index.json"), format!(r#"{{"weight_map": {{{}}}}}"#, entries.join(","))).unwrap();
    let t0 = Instant::now();
    refused(&["generate", "--model", d.s()], "shard-000000.safetensors: No such file");
    assert!(t0.elapsed() < Duration::from_secs(60), "took {:?}", t0.elapsed());
}

// ---------------------------------------------------------------------------
// 5. stdout closed or full.

/// One short run of every subcommand but `bench` and `bench-model`, whose
/// 64 MiB copy ceilings take minutes in a debug build;
/// scripts/hostile_inputs.sh runs those two against the release binary
/// (their writes go through the same `out::print`).
fn small_runs(out_dir: &str) -> Vec<Vec<String>> {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        v(&["kernels"]),
        v(&["info"]),
        v(&["generate", "--max-new-tokens", "2"]),
        v(&["generate", "--json", "--max-new-tokens", "1"]),
        v(&["parity", "--backend", "cpu", "--filter", "rmsnorm"]),
        v(&["synthetic", "--out", out_dir]),
        v(&["--help"]),
        v(&["--version"]),
    ]
}

/// stdout a pipe whose reader is gone before anything is written (the
/// read end is closed before the child starts, so even a write that would
/// fit the pipe's buffer fails). Every subcommand stops quietly with 141
/// (as if killed by SIGPIPE), no panic.
#[cfg(unix)]
#[test]
fn every_subcommand_exits_quietly_on_a_closed_stdout() {
    let d = Tmp::new("hostile", "epipe");
    for args in small_runs(d.s()) {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut c = command(&args);
        let child = c.stdin(Stdio::null()).stdout(writer).stderr(Stdio::piped()).spawn().unwrap();
        // The Command still holds a copy of the write end; it goes with `c`.
        drop(c);
        let r = wait(child, 300, &format!("{args:?} | (closed)"));
        assert_eq!(r.status.code(), Some(141), "{}", r.ctx);
        assert!(r.stderr.is_empty(), "a closed stdout is not worth a message: {}", r.ctx);
    }
}

/// `> /dev/full`: an error naming stdout and the reason, exit 1.
#[cfg(target_os = "linux")]
#[test]
fn every_subcommand_reports_a_full_stdout() {
    let d = Tmp::new("hostile", "enospc");
    for args in small_runs(d.s()) {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let mut c = command(&args);
        let child = c.stdin(Stdio::null()).stdout(full).stderr(Stdio::piped()).spawn().unwrap();
        let r = wait(child, 300, &format!("{args:?} > /dev/full"));
        clean_refusal(&r, "writing to stdout: No space left on device");
    }
}

/// A failing stderr cannot be reported anywhere, but must not turn an
/// error into a panic either.
#[cfg(target_os = "linux")]
#[test]
fn a_full_stderr_is_not_a_panic() {
    for (args, code) in [(vec!["generate", "--no-such-flag"], 2), (vec!["generate", "--model", "/nonexistent"], 1)] {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let mut c = command(&args);
        let child = c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(full).spawn().unwrap();
        let r = wait(child, 60, &format!("{args:?} 2> /dev/full"));
        assert_eq!(r.status.code(), Some(code), "{}", r.ctx);
    }
}

// ---------------------------------------------------------------------------
// 6. Untrusted text echoed raw.

const ESCAPES: &str = "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}31m\u{202e}";

#[test]
fn quoted_input_is_escaped() {
    let d = Tmp::fixture("escape");
    let mut c = d.config();
    c["model_type"] = json!(ESCAPES);
    d.set_config(&c);
    refused(&["generate", "--model", d.s()], "field `model_type`: `\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{9b}31m\\u{202e}` is not supported");
    let mut c = d.config();
    c["model_type"] = json!("gemma4_text");
    c["hidden_activation"] = json!(format!("silu{ESCAPES}"));
    d.set_config(&c);
    refused(&["generate", "--model", d.s()], "`silu\\u{1b}]0;pwned");

    let dir = format!("/nonexistent/{ESCAPES}");
    refused(&["generate", "--model", &dir], "/nonexistent/\\u{1b}]0;pwned");
    refused(&["generate", "--max-new-tokens", ESCAPES], "invalid value");
    refused(&["generate", "--quant", ESCAPES], "--quant \\u{1b}]0;pwned");
    refused(&["generate", "--prompt-ids", ESCAPES], "--prompt-ids: `\\u{1b}]0;pwned");
    refused(&["bench", "--scale", ESCAPES], "--scale \\u{1b}]0;pwned");
    refused_env(&["generate"], ("SWITCHYARD_BACKEND", OsStr::new(ESCAPES)), "unknown backend");

    let d = Tmp::fixture("escape-index");
    std::fs::remove_file(d.path("model.safetensors")).unwrap();
    let index = json!({"weight_map": {format!("t{ESCAPES}"): format!("../{ESCAPES}")}});
    std::fs::write(d.path("model.safetensors.index.json"), index.to_string()).unwrap();
    refused(&["generate", "--model", d.s()], "weight_map[`t\\u{1b}]0;pwned");
}

#[cfg(unix)]
#[test]
fn non_utf8_environment_is_refused_not_ignored() {
    use std::os::unix::ffi::OsStrExt;
    refused_env(&["generate"], ("SWITCHYARD_BACKEND", OsStr::from_bytes(b"cp\xffu")), "SWITCHYARD_BACKEND=cp\u{fffd}u: not UTF-8");
}

// ---------------------------------------------------------------------------
// 7. Errors name the field the user wrote.

#[test]
fn errors_blame_the_field_the_user_wrote() {
    let d = Tmp::fixture("blame");
    let mut c = d.config();
    c.as_object_mut().unwrap().remove("per_layer_config");
    c["global_head_dim"] = json!(44);
    d.set_config(&c);
    let r = refused(&["generate", "--model", d.s()], "field `global_head_dim`: = 44 (layer 2, full_attention)");
    assert!(!r.stderr.contains("per_layer_config"), "{}", r.ctx);

    let mut c = d.config();
    c["global_head_dim"] = json!(48);
    c["attention_k_eq_v"] = json!(true);
    c["num_global_key_value_heads"] = json!(3);
    d.set_config(&c);
    refused(&["generate", "--model", d.s()], "field `num_global_key_value_heads`: = 3");

    let mut c = d.config();
    c["attention_k_eq_v"] = json!(false);
    c["rope_parameters"]["sliding_attention"]["rope_theta"] = json!(1e-50);
    d.set_config(&c);
    refused(
        &["generate", "--model", d.s()],
        "field `rope_parameters.sliding_attention.rope_theta`: 9.999999999999999e-51 underflows to 0 in f32",
    );
}

// ---------------------------------------------------------------------------
// 8. Ambiguous input.

/// The fixture's safetensors with `model.norm.weight` listed a second time.
fn with_duplicate_header_entry(st: &[u8]) -> Vec<u8> {
    let n = u64::from_le_bytes(st[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&st[8..8 + n]).unwrap().trim_end();
    let v: Value = serde_json::from_str(header).unwrap();
    let entry = v["model.norm.weight"].to_string();
    let mut h = format!("{},\"model.norm.weight\":{entry}}}", header.strip_suffix('}').unwrap()).into_bytes();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(&st[8 + n..]);
    out
}

#[test]
fn ambiguous_input_is_refused_naming_what() {
    let d = Tmp::fixture("ambiguous");
    let mut c = d.config();
    c["per_layer_config"] = json!({"2": {"head_dim": 48}, "02": {"head_dim": 48}});
    d.set_config(&c);
    refused(&["generate", "--model", d.s()], "field `per_layer_config`: keys `02` and `2` both name layer 2");

    let text = std::fs::read_to_string(fixture().join("config.json")).unwrap();
    std::fs::write(d.path("config.json"), text.replacen("\"hidden_size\": 96,", "\"hidden_size\": 96, \"hidden_size\": 128,", 1)).unwrap();
    refused(&["generate", "--model", d.s()], "duplicate key `hidden_size`");

    let d = Tmp::fixture("dup-tensor");
    let st = std::fs::read(d.path("model.safetensors")).unwrap();
    std::fs::write(d.path("model.safetensors"), with_duplicate_header_entry(&st)).unwrap();
    refused(&["generate", "--model", d.s()], "tensor `model.norm.weight` is listed twice in the safetensors header");

    // Two shards: a.safetensors is the fixture, b.safetensors holds only
    // `extra`; the index claims b holds the final norm.
    let d = Tmp::fixture("wrong-shard");
    std::fs::rename(d.path("model.safetensors"), d.path("a.safetensors")).unwrap();
    let mut h = br#"{"extra":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}}"#.to_vec();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut b = (h.len() as u64).to_le_bytes().to_vec();
    b.extend(h);
    b.extend([0u8; 8]);
    std::fs::write(d.path("b.safetensors"), b).unwrap();
    let index = json!({"weight_map": {"extra": "b.safetensors", "model.embed_tokens.weight": "a.safetensors", "model.norm.weight": "b.safetensors"}});
    std::fs::write(d.path("model.safetensors.index.json"), index.to_string()).unwrap();
    let r = refused(&["generate", "--model", d.s()], "maps `model.norm.weight` to");
    assert!(
        r.stderr.contains("b.safetensors, whose header does not list it (it is in") && r.stderr.contains("a.safetensors)"),
        "{}",
        r.ctx
    );
}

// ---------------------------------------------------------------------------
// 9. Writes that follow symlinks.

#[cfg(unix)]
#[test]
fn synthetic_out_refuses_links_and_writes_atomically() {
    use std::os::unix::fs::symlink;
    let d = Tmp::new("hostile", "synthetic");
    let victim = d.path("victim");
    std::fs::create_dir(&victim).unwrap();
    let link = d.path("out-link");
    symlink(&victim, &link).unwrap();
    refused(&["synthetic", "--out", link.to_str().unwrap()], "out-link: is a symbolic link; refusing to write through it");
    assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0, "wrote through the link");

    let out = d.path("out");
    std::fs::create_dir(&out).unwrap();
    let precious = d.path("precious");
    std::fs::write(&precious, "keep me").unwrap();
    symlink(&precious, out.join("config.json")).unwrap();
    refused(&["synthetic", "--out", out.to_str().unwrap()], "config.json: is a symbolic link; refusing to replace it");
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me");

    // The control: a plain directory is written, with no temporary left
    // behind, and what was written loads.
    std::fs::remove_file(out.join("config.json")).unwrap();
    ok(&["synthetic", "--out", out.to_str().unwrap()]);
    let mut names: Vec<String> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["config.json", "model.safetensors"]);
    ok(&["generate", "--model", out.to_str().unwrap(), "--max-new-tokens", "1"]);
}

// ---------------------------------------------------------------------------
// Acceptable input still works.

/// A config.json with a 100 MB field the loader does not know: under the
/// JSON cap, parsed, ignored; the tokens are the fixture's.
#[test]
fn a_100_mb_unknown_field_still_loads() {
    let reference = ok(&["generate", "--model", fixture().to_str().unwrap(), "--max-new-tokens", "3"]).stdout;
    let d = Tmp::fixture("big-field");
    let mut c = d.config();
    c["notes"] = json!("n".repeat(100 << 20));
    d.set_config(&c);
    let r = ok(&["generate", "--model", d.s(), "--max-new-tokens", "3"]);
    assert_eq!(r.stdout, reference);
}

#[test]
fn concurrent_generations_on_one_directory() {
    let d = Tmp::fixture("concurrent");
    let children: Vec<Child> = (0..4)
        .map(|_| {
            command(&["generate", "--model", d.s(), "--max-new-tokens", "4"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let runs: Vec<Run> = children.into_iter().map(|c| wait(c, 300, "concurrent generate")).collect();
    for r in &runs {
        assert!(r.status.success(), "{}", r.ctx);
        assert_eq!(r.stdout, runs[0].stdout);
    }
    assert_eq!(String::from_utf8_lossy(&runs[0].stdout).trim().split(',').count(), 4);
}
