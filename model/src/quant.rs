//! Quantization on load (`--quant`).
use crate::error::Error;
use crate::tensors::{TensorKind, TensorSpec};
use std::fmt;
use std::str::FromStr;
use switchyard_core::codec::nvfp4;

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

    /// Whether a `[n, k]` weight (a linear layer, or one expert's slice) is
    /// stored as NVFP4: asked for, and a shape the W4A16 kernels take.
    pub fn stores_nvfp4(self, n: usize, k: usize) -> bool {
        self == Quant::Nvfp4 && n % 16 == 0 && k % nvfp4::BLOCK == 0
    }

    /// Device bytes of `t` as the loader stores it under this quantization:
    /// NVFP4 is half a byte a weight plus an e4m3 scale per 16 (and an f32
    /// global scale per expert); the fp8 table is a byte an element plus an
    /// f32 scale per row. (The loader stacks gate and up before deciding;
    /// this decides per tensor, which differs only when the intermediate
    /// size is an odd multiple of 8.)
    pub fn device_bytes(self, t: &TensorSpec) -> usize {
        let elements: usize = t.shape.iter().product();
        let fp4 = |n: usize, k: usize| n * k / 2 + n * k / nvfp4::BLOCK;
        match (t.kind, t.shape.as_slice()) {
            (TensorKind::Linear, &[n, k]) if self.stores_nvfp4(n, k) => fp4(n, k),
            (TensorKind::Experts, &[e, n, k]) if self.stores_nvfp4(n, k) => e * (fp4(n, k) + 4),
            (TensorKind::Embedding, &[v, h]) if self == Quant::Fp8Embed => v * h + 4 * v,
            _ => elements * t.kind.device_bytes_per_element(),
        }
    }
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
