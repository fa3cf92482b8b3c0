//! Text in, text out, through the built `switchyard` binary on the
//! `tiny-dense` fixture (HF-made, random weights) with the hand-made
//! Gemma-shaped text files of `tests/data/gemma-shape` beside it. The
//! weights are random, so the text is gibberish; what is checked is the
//! plumbing: prompt ids from text and from the chat template, text that
//! matches the ids, streamed stdout equal to `--json`'s text, stop strings
//! and stop ids, seeded sampling that repeats, and repo ids found in a
//! fake Hugging Face cache.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use switchyard_cli::text::tokenizer::Tokenizer;
use switchyard_model::serde_json::{self, Value};

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_switchyard")
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gemma-shape").join(name)
}

/// A scratch directory, removed when dropped.
struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The tiny-dense checkpoint plus the test text files, in `dir`.
fn fill_model_dir(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-dense");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture.join(f), dir.join(f)).unwrap();
    }
    // No generation_config.json: greedy unless a test adds one.
    for f in ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"] {
        std::fs::copy(data(f), dir.join(f)).unwrap();
    }
}

fn model_dir(tag: &str) -> Tmp {
    let d = std::env::temp_dir().join(format!("switchyard-text-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    fill_model_dir(&d);
    Tmp(d)
}

fn run(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(binary());
    c.args(args).env_remove("SWITCHYARD_BACKEND").env("RUST_BACKTRACE", "0");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("spawn switchyard")
}

fn ok(args: &[&str]) -> Output {
    ok_env(args, &[])
}

fn ok_env(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let out = run(args, env);
    assert!(
        out.status.success(),
        "switchyard {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    serde_json::from_slice(&ok(&a).stdout).expect("one JSON object")
}

fn ids(v: &Value, key: &str) -> Vec<u32> {
    v[key].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn tokenizer() -> Tokenizer {
    Tokenizer::from_bytes(&std::fs::read(data("tokenizer.json")).unwrap(), "test").unwrap()
}

#[test]
fn a_text_prompt_runs_and_the_text_matches_the_ids() {
    let m = model_dir("prompt");
    let dir = m.0.to_str().unwrap();
    let v = json(&["--model", dir, "--prompt", "hello world", "--max-new-tokens", "12", "--ignore-eos"]);
    // <bos> hello ▁wor l d: worked out in src/text/tokenizer.rs's tests.
    assert_eq!(ids(&v, "prompt"), [2, 279, 282, 266, 270]);
    let tokens = ids(&v, "tokens");
    assert_eq!(tokens.len(), 12);
    assert_eq!(v["text"].as_str().unwrap(), tokenizer().decode(&tokens, true).unwrap());
    assert_eq!(v["stop_reason"], "max_new_tokens");
    assert_eq!(v["sampling"]["greedy"], true);
    // Today's keys are all still there.
    for k in ["backend", "device", "model", "quant", "logits", "stopped_at_eos", "timings"] {
        assert!(v.get(k).is_some(), "--json lost `{k}`");
    }
    // Streamed to stdout: the same text, then a line break.
    let out = ok(&["--model", dir, "--prompt", "hello world", "--max-new-tokens", "12", "--ignore-eos"]);
    let mut want = v["text"].as_str().unwrap().to_string();
    if !want.ends_with('\n') {
        want.push('\n');
    }
    assert_eq!(String::from_utf8(out.stdout).unwrap(), want);
    assert!(String::from_utf8_lossy(&out.stderr).contains("greedy"));
}

#[test]
fn chat_renders_the_template_into_the_prompt() {
    let m = model_dir("chat");
    let v = json(&["--model", m.0.to_str().unwrap(), "--chat", "--prompt", "hi", "--max-new-tokens", "2"]);
    // "<bos><|turn>user\nhi<turn|>\n<|turn>model\n" in the test vocabulary.
    assert_eq!(ids(&v, "prompt"), [2, 4, 285, 262, 286, 5, 262, 4, 290, 262]);
    let v = json(&["--model", m.0.to_str().unwrap(), "--chat", "--system", "be brief", "--prompt", "hi", "--max-new-tokens", "1"]);
    let prompt = ids(&v, "prompt");
    assert_eq!(tokenizer().decode(&prompt, false).unwrap(), "<bos><|turn>system\nbe brief<turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n");
}

#[test]
fn stop_strings_cut_the_text_and_stop_the_run() {
    let m = model_dir("stop");
    let dir = m.0.to_str().unwrap();
    let base = json(&["--model", dir, "--prompt", "hello", "--max-new-tokens", "24", "--ignore-eos"]);
    let text = base["text"].as_str().unwrap().to_string();
    // A stop string across the first two tokens' boundary: the last character
    // of the first token's text and the first of the second's.
    let tokens = ids(&base, "tokens");
    let t = tokenizer();
    let (a, b) = (t.decode(&tokens[..1], true).unwrap(), t.decode(&tokens[1..2], true).unwrap());
    assert!(!a.is_empty() && !b.is_empty(), "the first two tokens have no text: {tokens:?}");
    let stop = format!("{}{}", a.chars().last().unwrap(), b.chars().next().unwrap());
    let before = &text[..text.find(&stop).unwrap()];
    assert!(before.len() < a.len(), "the stop string must start inside the first token");
    let v = json(&["--model", dir, "--prompt", "hello", "--max-new-tokens", "24", "--ignore-eos", "--stop", &stop]);
    assert_eq!(v["text"].as_str().unwrap(), before);
    assert_eq!(v["stop_reason"], "stop_string");
    // The run ended on the token that completed the stop string.
    assert_eq!(ids(&v, "tokens"), tokens[..2]);
    let out = ok(&["--model", dir, "--prompt", "hello", "--max-new-tokens", "24", "--ignore-eos", "--stop", &stop]);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), format!("{before}\n"));
}

#[test]
fn generation_config_stop_ids_end_the_run() {
    let m = model_dir("eos");
    let dir = m.0.to_str().unwrap();
    let base = json(&["--model", dir, "--prompt-ids", "2,17", "--max-new-tokens", "6", "--ignore-eos"]);
    let tokens = ids(&base, "tokens");
    // Make the third greedy token a stop id, as a list the way Gemma 4 writes it.
    let cfg = format!("{{\"eos_token_id\": [1, {}], \"do_sample\": false}}", tokens[2]);
    std::fs::write(m.0.join("generation_config.json"), cfg).unwrap();
    let v = json(&["--model", dir, "--prompt-ids", "2,17", "--max-new-tokens", "6"]);
    let first_stop = tokens.iter().position(|&t| t == 1 || t == tokens[2]).unwrap();
    assert_eq!(ids(&v, "tokens"), tokens[..=first_stop]);
    assert_eq!((v["stop_reason"].as_str(), v["stopped_at_eos"].as_bool()), (Some("eos"), Some(true)));
    // --ignore-eos ignores it.
    assert_eq!(ids(&json(&["--model", dir, "--prompt-ids", "2,17", "--max-new-tokens", "6", "--ignore-eos"]), "tokens"), tokens);
}

#[test]
fn a_seeded_sampled_run_repeats() {
    let m = model_dir("seed");
    let dir = m.0.to_str().unwrap();
    // The tied-embedding fixture echoes its last token with a logit ~16 above
    // the rest, so only a high temperature leaves the argmax path.
    let args = ["--model", dir, "--prompt", "hello", "--max-new-tokens", "10", "--ignore-eos", "--temperature", "20", "--top-k", "0"];
    let a = json(&[&args[..], &["--seed", "7"]].concat());
    let b = json(&[&args[..], &["--seed", "7"]].concat());
    assert_eq!(ids(&a, "tokens"), ids(&b, "tokens"));
    assert_eq!(a["text"], b["text"]);
    assert_eq!((a["sampling"]["greedy"].as_bool(), a["sampling"]["seed"].as_u64()), (Some(false), Some(7)));
    assert_eq!(a["sampling"]["host_logit_bytes_per_step"], 384 * 4);
    // Sampled, the tokens leave the greedy path.
    let greedy = json(&["--model", dir, "--prompt", "hello", "--max-new-tokens", "10", "--ignore-eos"]);
    assert_ne!(ids(&a, "tokens"), ids(&greedy, "tokens"));
    // generation_config.json's do_sample with its top-k and top-p.
    std::fs::copy(data("generation_config.json"), m.0.join("generation_config.json")).unwrap();
    let v = json(&["--model", dir, "--prompt", "hello", "--max-new-tokens", "3", "--ignore-eos", "--seed", "1"]);
    let s = &v["sampling"];
    assert_eq!(
        (s["greedy"].as_bool(), s["top_k"].as_u64(), s["top_p"].as_f64().map(|p| (p * 100.0).round())),
        (Some(false), Some(64), Some(95.0))
    );
}

#[test]
fn repo_ids_resolve_in_a_fake_hf_cache() {
    let root = std::env::temp_dir().join(format!("switchyard-text-hub-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let _guard = Tmp(root.clone());
    let hash = "89abcdef0123456789abcdef0123456789abcdef";
    let repo = root.join("models--test-org--tiny-gemma");
    fill_model_dir(&repo.join("snapshots").join(hash));
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), hash).unwrap();
    let env = [("HF_HUB_CACHE", root.as_path())];
    let out = ok_env(&["--model", "test-org/tiny-gemma", "--prompt", "hello world", "--max-new-tokens", "2", "--json"], &env);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&v, "prompt"), [2, 279, 282, 266, 270]);
    assert!(v["model"].as_str().unwrap().contains(hash));
    let out = run(&["--model", "test-org/absent", "--max-new-tokens", "1"], &env);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("models--test-org--absent") && err.contains("HF_HUB_CACHE"), "{err}");
    let out = run(&["--model", "test-org/tiny-gemma", "--revision", "v9", "--max-new-tokens", "1"], &env);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no ref `v9`") && err.contains("refs/v9"), "{err}");
}

#[test]
fn text_flags_are_refused_cleanly_when_they_cannot_work() {
    let refused = |args: &[&str], needle: &str| {
        let out = run(args, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && out.status.code() != Some(101), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: stderr does not say `{needle}`: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed a result");
    };
    refused(&["--chat"], "--prompt");
    refused(&["--prompt", "a", "--prompt-ids", "1"], "cannot be used with");
    refused(&["--top-p", "2"], "top_p = 2");
    refused(&["--temperature", "nan"], "temperature = NaN");
    let m = model_dir("refuse");
    let dir = m.0.to_str().unwrap();
    // Weights without a tokenizer.json: ids only (the built-in model has one).
    let bare = model_dir("bare");
    std::fs::remove_file(bare.0.join("tokenizer.json")).unwrap();
    let bare_dir = bare.0.to_str().unwrap();
    refused(&["--model", bare_dir, "--prompt", "hi"], "--prompt needs the model's tokenizer");
    refused(&["--model", bare_dir, "--stop", "x"], "--stop needs the model's tokenizer");
    std::fs::remove_file(m.0.join("chat_template.jinja")).unwrap();
    refused(&["--model", dir, "--chat", "--prompt", "hi"], "--chat needs the model's chat template");
    std::fs::write(m.0.join("chat_template.jinja"), "{{ raise_exception('no chats today') }}").unwrap();
    refused(&["--model", dir, "--chat", "--prompt", "hi"], "no chats today");
    std::fs::write(m.0.join("tokenizer.json"), "{").unwrap();
    refused(&["--model", dir, "--prompt", "hi"], "tokenizer.json: not a tokenizer.json");
}
