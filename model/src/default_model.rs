//! The tiny model built into the binary, so that `switchyard` with no
//! arguments (`cargo run --release`) generates readable text on a fresh
//! clone. It is a small Gemma 4 text decoder trained with HF transformers on
//! the docstrings and comments of the Python standard library, with its own
//! Gemma-shaped tokenizer (BPE with byte fallback, `<bos>`/`<eos>`, the
//! `<|turn>`/`<turn|>` chat markers), made by `scripts/train_default_model.py`
//! and committed in `model/default/`. `model/default/training.json` records
//! the command, the sizes and the held-out loss; `model/default/expected.json`
//! holds HF's f32 greedy continuation of [`PROMPT_TEXT`], which the tests
//! check the built-in run against. It goes through the same loader, graph and
//! tokenizer as any downloaded checkpoint: only the bytes come from the binary
//! instead of a directory.
use crate::checkpoint::Checkpoint;
use crate::error::Result;

/// How the built-in model names itself (the origin in messages and `--json`).
pub const NAME: &str = "<built-in model/default>";
/// What it is, for the line a run prints about the model it used.
pub const DESCRIPTION: &str =
    "a tiny Gemma 4 trained on the Python standard library's docstrings and comments (scripts/train_default_model.py)";

/// `config.json` of the default model.
pub const CONFIG: &str = include_str!("../default/config.json");
/// `model.safetensors` of the default model (bf16).
pub static SAFETENSORS: &[u8] = include_bytes!("../default/model.safetensors");
/// `tokenizer.json`: trained with the weights, on the same text.
pub static TOKENIZER_JSON: &[u8] = include_bytes!("../default/tokenizer.json");
/// `tokenizer_config.json`: the special tokens as text (`bos_token`, …).
pub static TOKENIZER_CONFIG: &[u8] = include_bytes!("../default/tokenizer_config.json");
/// `chat_template.jinja`: Gemma 4's turn format, which the training data
/// used for a share of its examples (a question about a stdlib name, the
/// docstring as the answer).
pub static CHAT_TEMPLATE: &[u8] = include_bytes!("../default/chat_template.jinja");
/// `generation_config.json`: greedy; `<eos>` and `<turn|>` stop a run.
pub static GENERATION_CONFIG: &[u8] = include_bytes!("../default/generation_config.json");

/// The prompt of a run with no prompt flag: a docstring's usual opening,
/// tokenized with [`TOKENIZER_JSON`] (`<bos>` in front). It is the prompt of
/// `expected.json`.
pub const PROMPT_TEXT: &str = "Return a";
/// New tokens of a run with no `--max-new-tokens`: as many as
/// `expected.json` records, so the default run prints what HF generated.
pub const NEW_TOKENS: usize = 32;

/// Opens the embedded checkpoint.
pub fn checkpoint() -> Result<Checkpoint> {
    Checkpoint::from_static(NAME, CONFIG, SAFETENSORS)
}
