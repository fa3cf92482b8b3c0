//! The tiny model built into the binary, so `switchyard generate` (and a bare
//! `switchyard`) works with no arguments on a fresh clone. It is the
//! `tiny-dense` parity fixture (`tests/fixtures/tiny-dense`, a random Gemma 4
//! text checkpoint saved by HF transformers with `scripts/make_fixtures.py`),
//! so the default run is one whose output HF has checked: with the default
//! prompt its greedy tokens are the fixture's `expected.json` tokens. It goes
//! through the same loader and graph as any downloaded checkpoint.
use crate::checkpoint::Checkpoint;
use crate::error::Result;

/// `config.json` of the default model.
pub const CONFIG: &str = include_str!("../../tests/fixtures/tiny-dense/config.json");
/// `model.safetensors` of the default model.
pub static SAFETENSORS: &[u8] = include_bytes!("../../tests/fixtures/tiny-dense/model.safetensors");
/// The prompt used when `--prompt-ids` is not given: the fixture's prompt
/// (BOS, then a few ids).
pub const PROMPT: [u32; 6] = [2, 17, 99, 5, 250, 31];

/// Opens the embedded checkpoint.
pub fn checkpoint() -> Result<Checkpoint> {
    Checkpoint::from_static("<built-in tiny-dense>", CONFIG, SAFETENSORS)
}
