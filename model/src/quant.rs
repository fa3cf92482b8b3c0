//! Quantization on load (`--quant`).
use crate::error::Error;
use std::fmt;
use std::str::FromStr;

/// How weights are stored on the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Quant {
    /// Everything bf16, as in the checkpoint.
    #[default]
    None,
    /// The tied embedding / LM-head table as fp8 e4m3 with one f32 scale per
    /// row (`embed_gather_fp8`, `lm_head_logits_fp8`); the rest bf16.
    Fp8Embed,
    /// The linear layers (q/k/v/o, MLP, experts) as NVFP4 for the W4A16
    /// kernels. A weight whose shape the kernels cannot take (N or K not a
    /// multiple of 16) stays bf16. Embedding, norms and router stay bf16.
    Nvfp4,
}

impl Quant {
    /// The `--quant` spellings.
    pub const NAMES: [&'static str; 3] = ["none", "fp8-embed", "nvfp4"];
}

impl FromStr for Quant {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "none" => Ok(Quant::None),
            "fp8-embed" => Ok(Quant::Fp8Embed),
            "nvfp4" => Ok(Quant::Nvfp4),
            other => Err(Error::Request(format!("--quant {}: expected one of {}", crate::text::clip(other), Quant::NAMES.join(", ")))),
        }
    }
}

impl fmt::Display for Quant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Quant::None => "none",
            Quant::Fp8Embed => "fp8-embed",
            Quant::Nvfp4 => "nvfp4",
        })
    }
}
