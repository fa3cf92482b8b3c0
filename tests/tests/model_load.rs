//! Checkpoint loading: the accepted forms (prefixes, shards, F32 / F16
//! tensors) give the same model, and every damaged checkpoint is an error
//! that names the problem (tensor and expected shape, file), never a panic.
mod model_support;

use model_support::*;
use std::sync::Arc;
use switchyard_cli::synthetic::{Spec, Synthetic};
use switchyard_core::Backend;
use switchyard_model::checkpoint::Checkpoint;
use switchyard_model::graph::Model;
use switchyard_model::quant::Quant;
use switchyard_model::serde_json::json;
use switchyard_model::Error;

fn cpu() -> Arc<dyn Backend> {
    switchyard_cpu_ref::cpu_backend()
}

/// Opens and loads `dir` on the CPU reference.
fn load(dir: &std::path::Path) -> Result<Model, Error> {
    let ck = Checkpoint::open(dir)?;
    Model::load(&ck, cpu(), Quant::None)
}

fn load_err(s: &Synthetic, tag: &str) -> Error {
    let d = write(s, tag);
    match load(d.path()) {
        Ok(_) => panic!("{tag}: a damaged checkpoint loaded"),
        Err(e) => e,
    }
}

#[test]
fn missing_tensor_names_tensor_and_shape() {
    let mut s = Spec::tiny_dense().build().unwrap();
    s.tensors.retain(|t| t.name != "model.layers.1.self_attn.k_proj.weight");
    let e = load_err(&s, "missing");
    match &e {
        Error::MissingTensor { name, expected } => {
            assert_eq!(name, "layers.1.self_attn.k_proj.weight");
            assert_eq!(expected, &[48, 96]);
        }
        other => panic!("expected MissingTensor, got {other:?}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("layers.1.self_attn.k_proj.weight") && msg.contains("[48, 96]"), "{msg}");
}

#[test]
fn missing_moe_tensor() {
    let mut s = Spec::tiny_moe().build().unwrap();
    s.tensors.retain(|t| t.name != "model.layers.3.experts.down_proj");
    let msg = load_err(&s, "missing-moe").to_string();
    assert!(msg.contains("layers.3.experts.down_proj") && msg.contains("[8, 128, 64]"), "{msg}");
}

#[test]
fn wrong_shape_names_both_shapes() {
    let mut s = Spec::tiny_dense().build().unwrap();
    let t = s.tensor_mut("model.layers.0.mlp.up_proj.weight").unwrap();
    t.shape = vec![96, 192]; // transposed: same bytes, wrong layout
    match load_err(&s, "shape") {
        e @ Error::WrongShape { .. } => {
            let msg = e.to_string();
            assert!(msg.contains("model.layers.0.mlp.up_proj.weight") && msg.contains("[96, 192]") && msg.contains("[192, 96]"), "{msg}");
        }
        other => panic!("expected WrongShape, got {other:?}"),
    }
}

#[test]
fn wrong_dtype_is_refused() {
    let mut s = Spec::tiny_dense().build().unwrap();
    let t = s.tensor_mut("model.norm.weight").unwrap();
    t.dtype = switchyard_cli::synthetic::SafeDtype::I16;
    match load_err(&s, "dtype") {
        e @ Error::WrongDtype { .. } => assert!(e.to_string().contains("model.norm.weight") && e.to_string().contains("I16"), "{e}"),
        other => panic!("expected WrongDtype, got {other:?}"),
    }
    let mut s = Spec::tiny_dense().build().unwrap();
    let t = s.tensor_mut("model.layers.0.layer_scalar").unwrap();
    t.dtype = switchyard_cli::synthetic::SafeDtype::I32;
    t.data = 1i32.to_le_bytes().to_vec();
    assert!(matches!(load_err(&s, "dtype-i32"), Error::WrongDtype { .. }));
}

#[test]
fn truncated_file_is_an_error() {
    let d = write(&Spec::tiny_dense().build().unwrap(), "truncated");
    let f = d.path().join("model.safetensors");
    let bytes = std::fs::read(&f).unwrap();
    for cut in [bytes.len() - 1, bytes.len() / 2, 100, 9, 3, 0] {
        std::fs::write(&f, &bytes[..cut]).unwrap();
        match load(d.path()) {
            Err(e @ Error::Checkpoint { .. }) => assert!(e.to_string().contains("model.safetensors"), "{e}"),
            Err(other) => panic!("cut at {cut}: expected a Checkpoint error, got {other:?}"),
            Ok(_) => panic!("cut at {cut}: a truncated file loaded"),
        }
    }
}

#[test]
fn corrupt_header_is_an_error() {
    let d = write(&Spec::tiny_dense().build().unwrap(), "corrupt");
    let f = d.path().join("model.safetensors");
    let good = std::fs::read(&f).unwrap();
    let n = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let mut cases: Vec<Vec<u8>> = Vec::new();
    // Garbage in the JSON header.
    let mut b = good.clone();
    b[8..24].copy_from_slice(b"#!not json at al");
    cases.push(b);
    // A header length far past the file.
    let mut b = good.clone();
    b[..8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    cases.push(b);
    // Offsets that no longer tile the data: the first data_offsets digit changed.
    let header = String::from_utf8(good[8..8 + n].to_vec()).unwrap();
    let bumped = header.replacen("\"data_offsets\":[0,", "\"data_offsets\":[1,", 1);
    assert_ne!(bumped, header, "test setup: header has a tensor at offset 0");
    let mut b = good[..8].to_vec();
    b.extend(bumped.as_bytes());
    b.extend(&good[8 + n..]);
    cases.push(b);
    for (i, bytes) in cases.into_iter().enumerate() {
        std::fs::write(&f, &bytes).unwrap();
        match load(d.path()) {
            Err(Error::Checkpoint { .. }) => {}
            other => panic!("case {i}: expected a Checkpoint error, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn unsupported_config_is_refused_before_weights() {
    let mut s = Spec::tiny_dense().build().unwrap();
    // KV sharing whose shared full layer has no earlier full layer to read.
    s.config["num_kv_shared_layers"] = json!(1);
    assert!(matches!(load_err(&s, "kvshare"), Error::Config { ref field, .. } if field == "num_kv_shared_layers"));
    let d = write(&Spec::tiny_dense().build().unwrap(), "badjson");
    std::fs::write(d.path().join("config.json"), "{ not json").unwrap();
    assert!(matches!(load(d.path()), Err(Error::Config { .. })));
}

#[test]
fn missing_files_are_io_errors() {
    let d = TempDir::new("empty");
    assert!(matches!(load(d.path()), Err(Error::Io { .. })));
    std::fs::write(d.path().join("config.json"), Spec::tiny_dense().build().unwrap().config_json()).unwrap();
    match load(d.path()) {
        Err(e @ Error::Io { .. }) => assert!(e.to_string().contains("model.safetensors"), "{e}"),
        other => panic!("expected an Io error, got {:?}", other.map(|_| ())),
    }
}

/// Greedy tokens and logits from `dir` on the CPU reference.
fn run(dir: &std::path::Path) -> switchyard_model::generate::Generation {
    run_dir(dir, &cpu(), Quant::None, 4)
}

#[test]
fn prefixes_shards_and_float_types_load_the_same_model() {
    let base = Spec::tiny_moe().build().unwrap();
    let d0 = write(&base, "base");
    let reference = run(d0.path());

    // Gemma4ForConditionalGeneration names: model.language_model.*
    let mut s = base.clone();
    for t in &mut s.tensors {
        t.name = t.name.replacen("model.", "model.language_model.", 1);
    }
    let d = write(&s, "prefix");
    let g = run(d.path());
    assert_eq!((&g.tokens, &g.logits), (&reference.tokens, &reference.logits), "language_model prefix");

    // F32 tensors (exact for bf16 values) convert back to the same bf16.
    let mut s = base.clone();
    for t in s.tensors.iter_mut().step_by(2) {
        t.convert(switchyard_cli::synthetic::SafeDtype::F32);
    }
    let d = write(&s, "f32");
    let g = run(d.path());
    assert_eq!((&g.tokens, &g.logits), (&reference.tokens, &reference.logits), "F32 tensors");

    // F16 tensors: converted with rounding; tiny values may lose bits in f16 itself.
    let mut s = base.clone();
    for t in s.tensors.iter_mut().filter(|t| t.name.ends_with("norm.weight")) {
        t.convert(switchyard_cli::synthetic::SafeDtype::F16);
    }
    let d = write(&s, "f16");
    let g = run(d.path());
    assert_eq!(g.tokens, reference.tokens, "F16 norm weights (exact in f16 at these magnitudes)");

    // Two shards and an index.
    let d = TempDir::new("sharded");
    let half = base.tensors.len() / 2;
    let mut map = switchyard_model::serde_json::Map::new();
    for (i, part) in [&base.tensors[..half], &base.tensors[half..]].into_iter().enumerate() {
        let file = format!("model-0000{}-of-00002.safetensors", i + 1);
        let shard = Synthetic { config: base.config.clone(), tensors: part.to_vec() };
        std::fs::write(d.path().join(&file), shard.safetensors().unwrap()).unwrap();
        for t in part {
            map.insert(t.name.clone(), json!(file));
        }
    }
    std::fs::write(d.path().join("config.json"), base.config_json()).unwrap();
    std::fs::write(d.path().join("model.safetensors.index.json"), json!({"metadata": {}, "weight_map": map}).to_string()).unwrap();
    let g = run(d.path());
    assert_eq!((&g.tokens, &g.logits), (&reference.tokens, &reference.logits), "sharded");

    // A broken index is a Checkpoint error naming the index.
    for bad in ["{", "{\"weight_map\": 3}", "{\"weight_map\": {\"x\": \"../escape.safetensors\"}}"] {
        std::fs::write(d.path().join("model.safetensors.index.json"), bad).unwrap();
        match load(d.path()) {
            Err(e @ Error::Checkpoint { .. }) => assert!(e.to_string().contains("index"), "{e}"),
            other => panic!("index {bad:?}: expected a Checkpoint error, got {:?}", other.map(|_| ())),
        }
    }
    // A shard the index names but that is missing.
    std::fs::write(d.path().join("model.safetensors.index.json"), json!({"weight_map": {"a": "gone.safetensors"}}).to_string()).unwrap();
    assert!(matches!(load(d.path()), Err(Error::Io { .. })));
}

#[test]
fn built_in_default_model_loads() {
    let ck = switchyard_model::default_model::checkpoint().unwrap();
    let model = Model::load(&ck, cpu(), Quant::None).unwrap();
    assert!(model.cfg.num_layers() > 0);
    let g = switchyard_model::generate::generate(
        &model,
        &switchyard_model::generate::Request {
            // <bos> and two ids inside any vocabulary.
            prompt: vec![2, 17, 99],
            max_new_tokens: 3,
            want_logits: false,
            stop_at_eos: true,
        },
    )
    .unwrap();
    assert!(!g.tokens.is_empty() && g.tokens.len() <= 3);
}
