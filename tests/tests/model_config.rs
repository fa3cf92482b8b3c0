//! `config.json` parsing: what HF's Gemma4TextConfig derives (per-layer
//! head_dim / KV heads, RoPE per layer type, k_eq_v on full layers only) and
//! a clear error naming the field for everything the graph refuses.
use switchyard_cli::synthetic::Spec;
use switchyard_model::config::{LayerKind, ModelConfig, PerLayerInput};
use switchyard_model::serde_json::{json, Value};
use switchyard_model::Error;

fn parse(v: &Value) -> Result<ModelConfig, Error> {
    ModelConfig::from_json(&v.to_string())
}

/// Asserts a config error on `field`, whose message names the field and contains `needle`.
#[track_caller]
fn expect_field(v: &Value, field: &str, needle: &str) {
    match parse(v) {
        Err(e @ Error::Config { .. }) => {
            let Error::Config { field: f, .. } = &e else { unreachable!() };
            assert_eq!(f, field, "wrong field in {e}");
            let msg = e.to_string();
            assert!(msg.contains(field) && msg.contains(needle), "message `{msg}` should name `{field}` and say `{needle}`");
        }
        other => panic!("expected a config error on `{field}`, got {other:?}"),
    }
}

fn with(mut v: Value, key: &str, val: Value) -> Value {
    v.as_object_mut().unwrap().insert(key.into(), val);
    v
}

fn without(mut v: Value, key: &str) -> Value {
    v.as_object_mut().unwrap().remove(key);
    v
}

#[test]
fn dense_config_from_global_head_dim() {
    let c = parse(&Spec::tiny_dense().config()).unwrap();
    assert_eq!((c.vocab_size, c.hidden_size, c.intermediate_size, c.num_heads), (384, 96, 192, 2));
    assert_eq!(c.num_layers(), 3);
    let kinds: Vec<_> = c.layers.iter().map(|l| l.kind).collect();
    assert_eq!(kinds, [LayerKind::Sliding, LayerKind::Sliding, LayerKind::Full]);
    // No k_eq_v: num_global_key_value_heads is not applied (HF gates it on attention_k_eq_v).
    assert_eq!((c.layers[2].head_dim, c.layers[2].num_kv_heads, c.layers[2].k_eq_v), (48, 1, false));
    assert_eq!((c.layers[0].window, c.layers[2].window), (8, 0));
    assert_eq!(c.final_logit_softcapping, 0.0);
    assert!(c.moe.is_none());
    assert_eq!(c.eos_token_ids, [1]);
    let full = c.layers[2].rope;
    assert!(full.proportional && full.theta == 1e6 && full.partial_rotary_factor == 0.5);
    assert_eq!(full.rotated_pairs(48), 12);
    assert_eq!(c.layers[0].rope.rotated_pairs(48), 24);
}

#[test]
fn moe_config_from_explicit_per_layer_config() {
    let v = Spec::tiny_moe().config();
    assert!(v["per_layer_config"].get("2").is_some(), "the synthetic writer emits HF's explicit per_layer_config");
    let c = parse(&v).unwrap();
    assert_eq!((c.layers[0].head_dim, c.layers[0].num_kv_heads, c.layers[0].k_eq_v), (32, 2, false));
    assert_eq!((c.layers[3].head_dim, c.layers[3].num_kv_heads, c.layers[3].k_eq_v), (64, 1, true));
    assert_eq!(c.final_logit_softcapping, 30.0);
    let m = c.moe.unwrap();
    assert_eq!((m.num_experts, m.top_k, m.intermediate), (8, 2, 64));
    assert_eq!(c.layers[3].rope.rotated_pairs(64), 8);
}

#[test]
fn zero_padded_per_layer_keys_and_global_fallback_agree() {
    let mut spec = Spec::tiny_moe();
    let explicit = parse(&spec.config()).unwrap();
    spec.explicit_per_layer = false;
    let derived = parse(&spec.config()).unwrap();
    assert_eq!(explicit, derived);
    // Twelve layers: keys "02", "05", "11" as HF zero-pads them.
    let mut v = Spec::tiny_dense().config();
    let types: Vec<&str> = (0..12).map(|i| if i % 3 == 2 { "full_attention" } else { "sliding_attention" }).collect();
    v = with(v, "num_hidden_layers", json!(12));
    v = with(v, "layer_types", json!(types));
    v = with(v, "per_layer_config", json!({"02": {"head_dim": 64}, "05": {"num_key_value_heads": 2}, "11": {"head_dim": 16}}));
    let c = parse(&v).unwrap();
    assert_eq!((c.layers[2].head_dim, c.layers[2].num_kv_heads), (64, 1));
    assert_eq!((c.layers[5].head_dim, c.layers[5].num_kv_heads), (48, 2));
    assert_eq!(c.layers[11].head_dim, 16);
}

#[test]
fn text_config_wrapper_eos_list_and_forced_last_full_layer() {
    let inner = with(Spec::tiny_dense().config(), "eos_token_id", json!([1, 106]));
    let inner = with(inner, "layer_types", json!(["sliding_attention", "sliding_attention", "sliding_attention"]));
    let c = parse(&json!({"model_type": "gemma4", "text_config": inner})).unwrap();
    assert_eq!(c.eos_token_ids, [1, 106]);
    // HF forces the last layer to full attention.
    assert_eq!(c.layers[2].kind, LayerKind::Full);
    assert_eq!(c.layers[2].head_dim, 48);
}

#[test]
fn per_layer_inputs_follow_hf_defaults() {
    let base = Spec::tiny_dense().config();
    // Absent means HF's defaults (width 256, a 262144-row table), as HF would.
    let v = without(without(base.clone(), "hidden_size_per_layer_input"), "vocab_size_per_layer_input");
    assert_eq!(parse(&v).unwrap().per_layer_input, Some(PerLayerInput { hidden: 256, vocab: 262_144 }));
    // A width over an empty table is refused by name.
    expect_field(&with(base, "hidden_size_per_layer_input", json!(16)), "vocab_size_per_layer_input", "must be > 0");
}

#[test]
fn kv_sharing_needs_an_earlier_layer_of_each_type() {
    // [sliding, sliding, full] with the last two shared: layer 1 reads
    // layer 0's KV, but no earlier full layer computes KV for layer 2.
    expect_field(&with(Spec::tiny_dense().config(), "num_kv_shared_layers", json!(2)), "num_kv_shared_layers", "no earlier layer");
    // [s, s, full, full] with the last one shared: it reads layer 2's KV.
    let c = parse(&with(Spec::tiny_moe().config(), "num_kv_shared_layers", json!(1))).unwrap();
    let sources: Vec<_> = c.layers.iter().map(|l| l.kv_source).collect();
    assert_eq!(sources, [None, None, None, Some(2)]);
}

#[test]
fn refuses_unknown_rope_type() {
    let mut v = Spec::tiny_dense().config();
    v["rope_parameters"]["full_attention"]["rope_type"] = json!("yarn");
    expect_field(&v, "rope_parameters.full_attention.rope_type", "yarn");
}

#[test]
fn refuses_unknown_activation() {
    expect_field(&with(Spec::tiny_dense().config(), "hidden_activation", json!("silu")), "hidden_activation", "silu");
}

#[test]
fn refuses_bidirectional_attention_and_bias() {
    let base = Spec::tiny_dense().config();
    expect_field(&with(base.clone(), "use_bidirectional_attention", json!("all")), "use_bidirectional_attention", "not supported");
    parse(&with(base.clone(), "use_bidirectional_attention", json!("vision"))).expect("vision-only bidirectionality leaves text alone");
    expect_field(&with(base, "attention_bias", json!(true)), "attention_bias", "not supported");
}

#[test]
fn missing_and_mistyped_fields() {
    let base = Spec::tiny_dense().config();
    expect_field(&without(base.clone(), "hidden_size"), "hidden_size", "missing");
    expect_field(&with(base.clone(), "hidden_size", json!("96")), "hidden_size", "integer");
    expect_field(&with(base.clone(), "num_attention_heads", json!(-2)), "num_attention_heads", "integer");
    expect_field(&with(base.clone(), "attention_k_eq_v", json!(1)), "attention_k_eq_v", "true or false");
    expect_field(&with(base.clone(), "layer_types", json!(["sliding_attention"])), "layer_types", "entries");
    expect_field(&with(base.clone(), "eos_token_id", json!("eos")), "eos_token_id", "token id");
    expect_field(&with(base.clone(), "enable_moe_block", json!(true)), "num_experts", "missing");
    expect_field(&with(base.clone(), "model_type", json!("llama")), "model_type", "llama");
    expect_field(&with(base.clone(), "per_layer_config", json!({"7": {"head_dim": 64}})), "per_layer_config.7", "does not exist");
    expect_field(&with(base, "head_dim", json!(44)), "head_dim", "multiple of 8");
}

#[test]
fn malformed_json() {
    for text in ["{\"model_type\": \"gemma4_text\",", "[1, 2]", ""] {
        match ModelConfig::from_json(text) {
            Err(e @ Error::Config { .. }) => assert!(e.to_string().contains("config.json"), "{e}"),
            other => panic!("expected a config error for {text:?}, got {other:?}"),
        }
    }
}
