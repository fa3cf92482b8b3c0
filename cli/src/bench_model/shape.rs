//! The shapes `bench-model` can build: `default` (dense, Gemma-4-shaped, the
//! original 7.08 GB benchmark model) and `26b-a4b` (the text decoder of
//! Gemma 4 26B-A4B: 128 experts, top-8, beside a dense MLP).
use crate::synthetic::Spec;
use anyhow::{bail, Context, Result};
use switchyard_model::config::ModelConfig;

/// The names `--shape` takes, in the order help lists them.
pub const SHAPE_NAMES: [&str; 2] = ["default", "26b-a4b"];

/// The MoE branch of a shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeShape {
    /// `num_experts`.
    pub experts: usize,
    /// `top_k_experts`.
    pub top_k: usize,
    /// `moe_intermediate_size`: each expert's intermediate size.
    pub intermediate: usize,
}

/// The benchmark model's shape. [`Shape::named`] gives the presets.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    /// The preset this shape came from (`--shape`); the reports name it.
    pub name: String,
    /// Decoder layers.
    pub layers: usize,
    /// Residual width.
    pub hidden: usize,
    /// Dense MLP intermediate size.
    pub intermediate: usize,
    /// Query heads.
    pub heads: usize,
    /// KV heads on sliding layers.
    pub kv_heads: usize,
    /// head_dim on sliding layers.
    pub head_dim: usize,
    /// head_dim on full layers.
    pub global_head_dim: usize,
    /// KV heads on full layers (V = K there: `attention_k_eq_v`).
    pub global_kv_heads: usize,
    /// `sliding_window`.
    pub window: usize,
    /// Vocabulary (the tied table the LM head reads whole every step).
    pub vocab: usize,
    /// The MoE branch beside the dense MLP (`enable_moe_block`), if any.
    pub moe: Option<MoeShape>,
}

impl Shape {
    /// The preset called `name` (one of [`SHAPE_NAMES`]).
    pub fn named(name: &str) -> Result<Self> {
        match name {
            "default" => Ok(Shape::gemma4(30, 2560)),
            "26b-a4b" => Ok(Shape::gemma4_26b_a4b()),
            other => bail!("--shape {}: expected one of {}", switchyard_model::text::clip(other), SHAPE_NAMES.join(", ")),
        }
    }

    /// A Gemma-4-like dense text decoder with `layers` layers of width
    /// `hidden`, the Gemma 3/4 proportions: intermediate 4·hidden, one query
    /// head per 320 of width (8 at 2560), half as many KV heads, head_dim 256
    /// on sliding layers; five sliding layers (window 512) to one full layer,
    /// last layer full; full layers head_dim 512 with a quarter of the query
    /// heads as KV heads and V = K (k_eq_v), partial rotary 0.25; the 262144-token
    /// Gemma vocabulary. At 30 × 2560 (`--shape default`) that is 2.87 B
    /// layer parameters plus a 0.67 B embedding, 7.08 GB of bf16.
    pub fn gemma4(layers: usize, hidden: usize) -> Self {
        let heads = (hidden / 320).max(1);
        Shape {
            name: "default".into(),
            layers,
            hidden,
            intermediate: 4 * hidden,
            heads,
            kv_heads: (heads / 2).max(1),
            head_dim: 256,
            global_head_dim: 512,
            global_kv_heads: (heads / 4).max(1),
            window: 512,
            vocab: 262_144,
            moe: None,
        }
    }

    /// The text decoder of Gemma 4 26B-A4B (`--shape 26b-a4b`).
    ///
    /// Source: the `text_config` of the release's `config.json`
    /// (google/gemma-4-26B-A4B and -it, transformers' `Gemma4TextConfig`
    /// keys), as copied verbatim into the test configs of several public
    /// Gemma 4 ports: hidden_size 2816, num_hidden_layers 30,
    /// intermediate_size 2112 (the dense MLP beside the experts),
    /// num_attention_heads 16, num_key_value_heads 8, head_dim 256,
    /// global_head_dim 512, num_global_key_value_heads 2, attention_k_eq_v
    /// true, sliding_window 1024, layer_types five sliding to one full
    /// (layers 5, 11, .., 29 full), enable_moe_block true, num_experts 128,
    /// top_k_experts 8, moe_intermediate_size 704, vocab_size 262144,
    /// final_logit_softcapping 30.0, rms_norm_eps 1e-6, hidden_activation
    /// gelu_pytorch_tanh, rope_parameters sliding {default, theta 10000} and
    /// full {proportional, partial_rotary_factor 0.25, theta 1e6},
    /// hidden_size_per_layer_input 0, num_kv_shared_layers 0, tied
    /// embeddings. The softcap, eps, activation and RoPE are what
    /// [`Shape::spec`] writes for every shape. Not taken from the release:
    /// max_position_embeddings (262144 there; the benchmark's 8192 context,
    /// [`crate::limits::BENCH_MODEL_CONTEXT`], sizes caches and tables the
    /// same way for every shape) and eos_token_id ([1, 106] there; 1 here:
    /// the benchmark never stops at EOS).
    pub fn gemma4_26b_a4b() -> Self {
        Shape {
            name: "26b-a4b".into(),
            layers: 30,
            hidden: 2816,
            intermediate: 2112,
            heads: 16,
            kv_heads: 8,
            head_dim: 256,
            global_head_dim: 512,
            global_kv_heads: 2,
            window: 1024,
            vocab: 262_144,
            moe: Some(MoeShape { experts: 128, top_k: 8, intermediate: 704 }),
        }
    }

    /// Which layers are full attention: every sixth and the last (HF forces
    /// the last layer to full attention).
    pub fn full_layers(&self) -> Vec<bool> {
        (0..self.layers).map(|i| (i + 1) % 6 == 0 || i + 1 == self.layers).collect()
    }

    /// As a synthetic checkpoint spec (its `config()` is the HF `config.json`).
    pub fn spec(&self) -> Spec {
        Spec {
            vocab: self.vocab,
            hidden: self.hidden,
            intermediate: self.intermediate,
            full: self.full_layers(),
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            global_head_dim: self.global_head_dim,
            global_kv_heads: self.global_kv_heads,
            k_eq_v: true,
            window: self.window,
            softcap: Some(30.0),
            moe: self.moe.map(|m| (m.experts, m.top_k, m.intermediate)),
            partial_rotary_factor: 0.25,
            explicit_per_layer: false,
            seed: 0,
        }
    }

    /// The HF `config.json` of this shape: what `bench-model
    /// --print-hf-config` prints and `scripts/hf_decode_bench.py` builds its
    /// model from.
    pub fn hf_config(&self) -> serde_json::Value {
        let mut c = self.spec().config();
        // The synthetic spec's 256 is a tiny-model value; HF's static cache
        // and RoPE should see a realistic context limit.
        c["max_position_embeddings"] = serde_json::json!(crate::limits::BENCH_MODEL_CONTEXT);
        c
    }

    /// The validated config (through the same parser a checkpoint goes through).
    pub fn config(&self) -> Result<ModelConfig> {
        if self.layers == 0 || self.hidden == 0 || self.vocab == 0 {
            bail!("--layers, --hidden and --vocab must be at least 1");
        }
        let v = self.hf_config();
        let obj = v.as_object().context("the synthetic config is not an object")?;
        Ok(ModelConfig::from_value(obj)?)
    }

    /// One line describing the shape, for the markdown report.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} layers (sliding:full 5:1, last full), hidden {}, dense MLP intermediate {}, {} query heads; sliding head_dim {} with {} \
             KV heads, window {}; full head_dim {} with {} KV heads, V = K; vocab {}",
            self.layers,
            self.hidden,
            self.intermediate,
            self.heads,
            self.head_dim,
            self.kv_heads,
            self.window,
            self.global_head_dim,
            self.global_kv_heads,
            self.vocab
        );
        if let Some(m) = self.moe {
            s.push_str(&format!(
                "; MoE beside the dense MLP in every layer: {} experts, top-{}, expert intermediate {}",
                m.experts, m.top_k, m.intermediate
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse_to_the_configs_they_describe() {
        let d = Shape::named("default").unwrap().config().unwrap();
        assert_eq!((d.num_layers(), d.hidden_size, d.intermediate_size, d.num_heads), (30, 2560, 10240, 8));
        assert!(d.moe.is_none());
        let m = Shape::named("26b-a4b").unwrap().config().unwrap();
        assert_eq!((m.num_layers(), m.hidden_size, m.intermediate_size, m.num_heads, m.vocab_size), (30, 2816, 2112, 16, 262_144));
        let moe = m.moe.expect("26b-a4b has an MoE block");
        assert_eq!((moe.num_experts, moe.top_k, moe.intermediate), (128, 8, 704));
        let full: Vec<usize> = m.layers.iter().enumerate().filter(|(_, l)| l.window == 0).map(|(i, _)| i).collect();
        assert_eq!(full, [5, 11, 17, 23, 29]);
        for l in &m.layers {
            match l.window {
                0 => assert_eq!((l.head_dim, l.num_kv_heads, l.k_eq_v), (512, 2, true)),
                w => assert_eq!((w, l.head_dim, l.num_kv_heads, l.k_eq_v), (1024, 256, 8, false)),
            }
        }
        assert_eq!(m.final_logit_softcapping, 30.0);
        let err = Shape::named("27b").unwrap_err().to_string();
        assert!(err.contains("default, 26b-a4b"), "{err}");
    }

    #[test]
    fn hf_config_carries_the_moe_keys_hf_reads() {
        let c = Shape::gemma4_26b_a4b().hf_config();
        assert_eq!(c["enable_moe_block"], true);
        assert_eq!(
            (c["num_experts"].as_u64(), c["top_k_experts"].as_u64(), c["moe_intermediate_size"].as_u64()),
            (Some(128), Some(8), Some(704))
        );
        assert_eq!((c["num_global_key_value_heads"].as_u64(), c["global_head_dim"].as_u64()), (Some(2), Some(512)));
        assert_eq!(c["attention_k_eq_v"], true);
        let d = Shape::gemma4(30, 2560).hf_config();
        assert_eq!(d["enable_moe_block"], false);
    }
}
