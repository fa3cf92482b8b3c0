//! The tiny model built into the binary, so `switchyard generate` works with
//! no arguments on a fresh clone. It is a small Gemma 4 text checkpoint kept
//! in the repository (`model/assets/tiny-default`, written by
//! `switchyard synthetic --preset dense`); it exercises the same loader and
//! graph as any downloaded checkpoint.
use crate::checkpoint::Checkpoint;
use crate::error::Result;

/// `config.json` of the default model.
pub const CONFIG: &str = include_str!("../assets/tiny-default/config.json");
/// `model.safetensors` of the default model.
pub static SAFETENSORS: &[u8] = include_bytes!("../assets/tiny-default/model.safetensors");
/// The prompt used when `--prompt-ids` is not given (BOS, then a few ids).
pub const PROMPT: [u32; 6] = [2, 17, 99, 5, 250, 31];

/// Opens the embedded checkpoint.
pub fn checkpoint() -> Result<Checkpoint> {
    Checkpoint::from_static("<built-in tiny-default>", CONFIG, SAFETENSORS)
}
