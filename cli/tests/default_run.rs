//! The first run: `switchyard` with no arguments generates with the
//! built-in model (`model/default`, trained by
//! `scripts/train_default_model.py`) from its text prompt, and what it
//! prints is the text of HF's greedy continuation recorded at training time
//! (`model/default/expected.json`). The tokens themselves are held to HF's
//! under the whole-model rule in `tests/tests/model_fixtures.rs`; here the
//! binary's stdout is checked against their text.
use std::path::Path;
use std::process::{Command, Output};
use switchyard_cli::text::TextAssets;
use switchyard_model::default_model;
use switchyard_model::serde_json::{self, Value};

fn run(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .env_remove("SWITCHYARD_BACKEND")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("spawn switchyard");
    assert!(
        out.status.success(),
        "switchyard {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn expected() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/default/expected.json");
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).expect("expected.json")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("a list of ids").iter().map(|x| x.as_u64().expect("an id") as u32).collect()
}

#[test]
fn the_bare_run_prints_the_text_of_hfs_greedy_tokens() {
    let exp = expected();
    let assets = TextAssets::built_in().unwrap();
    let tok = assets.require_tokenizer("--prompt").unwrap();
    // The default prompt and length are expected.json's.
    assert_eq!(exp["prompt_text"].as_str(), Some(default_model::PROMPT_TEXT));
    assert_eq!(tok.encode(default_model::PROMPT_TEXT, true).unwrap(), ids(&exp["prompt"]));
    let tokens = ids(&exp["tokens"]);
    assert_eq!(tokens.len(), default_model::NEW_TOKENS);
    // A run stops at the first stop id (generation_config.json: <eos>,
    // <turn|>), so its text is that of the tokens before it.
    let stop = tokens.iter().position(|t| assets.generation.eos_token_ids.contains(t)).unwrap_or(tokens.len());
    let text = tok.decode(&tokens[..stop], true).unwrap();
    assert_eq!(exp["text"].as_str(), Some(text.as_str()), "expected.json's text is its tokens' text");
    assert!(text.split_whitespace().count() >= 3, "too little text to read: {text:?}");

    let out = run(&["--backend", "cpu"]);
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 text");
    let want = if text.ends_with('\n') { text.clone() } else { format!("{text}\n") };
    assert_eq!(stdout, want, "the bare run's text");
    // It says which model, the prompt, and the speed.
    let stderr = String::from_utf8_lossy(&out.stderr);
    for needle in [format!("model: {}", default_model::NAME), format!("prompt: {:?}", default_model::PROMPT_TEXT), "tok/s".to_string()] {
        assert!(stderr.contains(&needle), "stderr does not say `{needle}`: {stderr}");
    }
}

#[test]
fn any_prompt_runs_on_the_built_in_model() {
    let assets = TextAssets::built_in().unwrap();
    let tok = assets.require_tokenizer("--prompt").unwrap();
    let prompt = "Open the file and read";
    let out = run(&["--prompt", prompt, "--max-new-tokens", "6", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(ids(&doc["prompt"]), tok.encode(prompt, true).unwrap());
    let tokens = ids(&doc["tokens"]);
    assert!(!tokens.is_empty() && tokens.len() <= 6, "{doc}");
    assert_eq!(doc["model"].as_str(), Some(default_model::NAME));
    // --chat renders Gemma 4's turns: <bos> <|turn> user ...
    let out = run(&["--chat", "--prompt", "What does os.path.join do?", "--max-new-tokens", "4", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(ids(&doc["prompt"])[..2], [2, 4], "{doc}");
}
