//! The shapes `bench-model` can build: `default` (dense, Gemma-4-shaped, the
//! original 7.08 GB benchmark model), `26b-a4b` (the text decoder of Gemma 4
//! 26B-A4B: 128 experts, top-8, beside a dense MLP) and `31b` (the text
//! decoder of Gemma 4 31B: dense, 60 layers of width 5376, 61.4 GB of bf16).
use crate::synthetic::Spec;
use anyhow::{bail, Context, Result};
use switchyard_model::config::ModelConfig;

/// The names `--shape` takes, in the order help lists them.
pub const SHAPE_NAMES: [&str; 3] = ["default", "26b-a4b", "31b"];

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
            "31b" => Ok(Shape::gemma4_31b()),
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

    /// The text decoder of Gemma 4 31B (`--shape 31b`).
    ///
    /// Source: the `text_config` of the release's `config.json`
    /// (google/gemma-4-31B-it), as the repository ships it in
    /// `tests/data/release-configs/gemma-4-31B-it/config.json` (SOURCES.md
    /// there says where it was transcribed from; `tests/release_configs.rs`
    /// parses it): hidden_size 5376, num_hidden_layers 60,
    /// intermediate_size 21504, num_attention_heads 32,
    /// num_key_value_heads 16, head_dim 256, global_head_dim 512,
    /// num_global_key_value_heads 4, attention_k_eq_v true, sliding_window
    /// 1024, layer_types five sliding to one full (layers 5, 11, .., 59
    /// full), enable_moe_block false, vocab_size 262144,
    /// final_logit_softcapping 30.0, rms_norm_eps 1e-6, hidden_activation
    /// gelu_pytorch_tanh, rope_parameters sliding {default, theta 10000} and
    /// full {proportional, partial_rotary_factor 0.25, theta 1e6},
    /// hidden_size_per_layer_input 0, num_kv_shared_layers 0,
    /// use_double_wide_mlp false, tied embeddings. As for 26B-A4B, the
    /// benchmark's context (8192) and EOS (1) are its own. 30.7 B
    /// parameters, 61.4 GB of bf16: it fits one H200, and `--tp 2` splits
    /// every layer's heads (16 and 2 KV heads a rank), MLP and the table.
    pub fn gemma4_31b() -> Self {
        Shape {
            name: "31b".into(),
            layers: 60,
            hidden: 5376,
            intermediate: 21504,
            heads: 32,
            kv_heads: 16,
            head_dim: 256,
            global_head_dim: 512,
            global_kv_heads: 4,
            window: 1024,
            vocab: 262_144,
            moe: None,
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
        assert!(err.contains("default, 26b-a4b, 31b"), "{err}");
    }

    /// The release's `config.json` that the repository ships (parsed by
    /// `tests/release_configs.rs`), through the same parser.
    fn release(name: &str) -> ModelConfig {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/release-configs").join(name).join("config.json");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        ModelConfig::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn release_presets_are_the_release_configs() {
        // Everything the graph reads, layer by layer, but the two fields the
        // benchmark sets for every shape: its context and its EOS.
        for (preset, file) in [("31b", "gemma-4-31B-it"), ("26b-a4b", "gemma-4-26B-A4B-it")] {
            let ours = Shape::named(preset).unwrap().config().unwrap();
            let mut theirs = release(file);
            assert_eq!(theirs.max_position_embeddings, 262_144, "{file}");
            theirs.max_position_embeddings = ours.max_position_embeddings;
            theirs.eos_token_ids = ours.eos_token_ids.clone();
            assert_eq!(ours, theirs, "--shape {preset} against the {file} release config");
        }
        let c = Shape::named("31b").unwrap().config().unwrap();
        assert_eq!((c.num_layers(), c.hidden_size, c.intermediate_size, c.num_heads, c.vocab_size), (60, 5376, 21504, 32, 262_144));
        let full: Vec<usize> = c.layers.iter().enumerate().filter(|(_, l)| l.window == 0).map(|(i, _)| i).collect();
        assert_eq!(full, [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]);
    }

    #[test]
    fn the_31b_preset_splits_over_2_and_4_ranks() {
        use switchyard_model::tp::TpPlan;
        let cfg = Shape::gemma4_31b().config().unwrap();
        for world in [2, 4] {
            for rank in 0..world {
                let plan = TpPlan::new(&cfg, rank, world).unwrap_or_else(|e| panic!("--tp {world}: {e}"));
                let local = plan.local_config(&cfg);
                // 32 query heads; sliding layers 16 KV heads, full layers 4
                // (V = K): all divide by 2 and 4, so no KV head is replicated.
                assert_eq!((local.num_heads, local.vocab_size), (32 / world, 262_144 / world));
                assert_eq!(plan.vocab, rank * 262_144 / world..(rank + 1) * 262_144 / world);
                for (i, (l, s)) in local.layers.iter().zip(&plan.layers).enumerate() {
                    let kv = if (i + 1) % 6 == 0 { 4 } else { 16 };
                    assert_eq!(l.num_kv_heads, kv / world, "--tp {world} layer {i}");
                    assert_eq!(s.kv_heads, rank * kv / world..(rank + 1) * kv / world, "--tp {world} layer {i}");
                    assert_eq!(s.q_heads, rank * 32 / world..(rank + 1) * 32 / world);
                    assert_eq!(l.intermediate, 21504 / world);
                }
            }
        }
        // 8 ranks would leave a full layer's 4 KV heads replicated on 2 ranks each.
        let p8 = TpPlan::new(&cfg, 7, 8).unwrap();
        assert_eq!((p8.layers[5].kv_heads.clone(), p8.layers[0].kv_heads.clone()), (3..4, 14..16));
        assert!(TpPlan::new(&cfg, 0, 3).unwrap_err().to_string().contains("--tp 3"));
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
