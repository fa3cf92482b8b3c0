//! Synthetic Gemma 4 text checkpoints: an HF-style `config.json` and a
//! `model.safetensors` of seeded random bf16 weights, for tests, the default
//! model and benchmarks. Weights are scaled as `scripts/make_fixtures.py`
//! scales them (embedding ~ N(0, 0.5²), matrices ~ N(0, 1/fan_in), norm
//! weights and scales in [0.6, 1.4], `layer_scalar` in [0.7, 1.3]) so that
//! logits have real margins and every weight matters.
//!
//! The checkpoint is plain data ([`Synthetic::config`], [`Synthetic::tensors`])
//! so a test can damage it (drop a tensor, change a shape or dtype) before
//! writing it out.
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use safetensors::{Dtype, View};
use serde_json::{json, Value};
use std::borrow::Cow;
use std::path::Path;
use switchyard_model::config::ModelConfig;
use switchyard_model::error::{Error, Result};
use switchyard_model::files::describe;
use switchyard_model::tensors::{ModelTensors, TensorKind};

/// The shape of a synthetic model.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Vocabulary.
    pub vocab: usize,
    /// Residual width.
    pub hidden: usize,
    /// Dense MLP intermediate size.
    pub intermediate: usize,
    /// `true` = full attention, per layer.
    pub full: Vec<bool>,
    /// Query heads.
    pub heads: usize,
    /// KV heads on sliding layers.
    pub kv_heads: usize,
    /// head_dim on sliding layers.
    pub head_dim: usize,
    /// head_dim on full layers.
    pub global_head_dim: usize,
    /// KV heads on full layers.
    pub global_kv_heads: usize,
    /// `attention_k_eq_v`.
    pub k_eq_v: bool,
    /// `sliding_window`.
    pub window: usize,
    /// `final_logit_softcapping` (None = null).
    pub softcap: Option<f64>,
    /// `(num_experts, top_k, moe_intermediate_size)` when the MoE block is on.
    pub moe: Option<(usize, usize, usize)>,
    /// Full layers' `partial_rotary_factor`.
    pub partial_rotary_factor: f64,
    /// Write `per_layer_config` explicitly (as a saved HF config does) rather
    /// than `global_head_dim` / `num_global_key_value_heads`.
    pub explicit_per_layer: bool,
    /// RNG seed.
    pub seed: u64,
}

impl Spec {
    /// Like the `tiny-dense` fixture: 3 layers, separate V, no softcap.
    pub fn tiny_dense() -> Self {
        Spec {
            vocab: 384,
            hidden: 96,
            intermediate: 192,
            full: vec![false, false, true],
            heads: 2,
            kv_heads: 1,
            head_dim: 48,
            global_head_dim: 48,
            global_kv_heads: 1,
            k_eq_v: false,
            window: 8,
            softcap: None,
            moe: None,
            partial_rotary_factor: 0.5,
            explicit_per_layer: false,
            seed: 1235,
        }
    }

    /// Like the `tiny-moe` fixture: MoE, k_eq_v on full layers, softcap, a
    /// sliding window of 4, full layers with their own head_dim and KV heads.
    pub fn tiny_moe() -> Self {
        Spec {
            vocab: 512,
            hidden: 128,
            intermediate: 256,
            full: vec![false, false, true, true],
            heads: 4,
            kv_heads: 2,
            head_dim: 32,
            global_head_dim: 64,
            global_kv_heads: 1,
            k_eq_v: true,
            window: 4,
            softcap: Some(30.0),
            moe: Some((8, 2, 64)),
            partial_rotary_factor: 0.25,
            explicit_per_layer: true,
            seed: 1234,
        }
    }

    fn layer_dims(&self, i: usize) -> (usize, usize) {
        if self.full[i] {
            // HF gates the global KV-head override on attention_k_eq_v.
            (self.global_head_dim, if self.k_eq_v { self.global_kv_heads } else { self.kv_heads })
        } else {
            (self.head_dim, self.kv_heads)
        }
    }

    /// The HF `config.json` this spec describes.
    pub fn config(&self) -> Value {
        let layer_types: Vec<&str> = self.full.iter().map(|&f| if f { "full_attention" } else { "sliding_attention" }).collect();
        let mut c = json!({
            "architectures": ["Gemma4ForCausalLM"],
            "model_type": "gemma4_text",
            "vocab_size": self.vocab,
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.full.len(),
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "hidden_activation": "gelu_pytorch_tanh",
            "max_position_embeddings": 256,
            "rms_norm_eps": 1e-6,
            "layer_types": layer_types,
            "sliding_window": self.window,
            "final_logit_softcapping": self.softcap,
            "attention_k_eq_v": self.k_eq_v,
            "attention_bias": false,
            "hidden_size_per_layer_input": 0,
            "vocab_size_per_layer_input": 0,
            "num_kv_shared_layers": 0,
            "use_double_wide_mlp": false,
            "tie_word_embeddings": true,
            "pad_token_id": 0,
            "eos_token_id": 1,
            "bos_token_id": 2,
            "enable_moe_block": self.moe.is_some(),
            "num_experts": self.moe.map(|m| m.0),
            "top_k_experts": self.moe.map(|m| m.1),
            "moe_intermediate_size": self.moe.map(|m| m.2),
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": self.partial_rotary_factor, "rope_theta": 1000000.0},
            },
            "dtype": "bfloat16",
        });
        let obj = c.as_object_mut().expect("a json! object literal");
        if self.explicit_per_layer {
            let digits = (self.full.len() - 1).to_string().len();
            let plc: serde_json::Map<String, Value> = (0..self.full.len())
                .filter(|&i| self.full[i])
                .map(|i| {
                    let (hd, kv) = self.layer_dims(i);
                    (format!("{i:0digits$}"), json!({"head_dim": hd, "num_key_value_heads": kv}))
                })
                .collect();
            obj.insert("per_layer_config".into(), Value::Object(plc));
        } else {
            obj.insert("global_head_dim".into(), json!(self.global_head_dim));
            obj.insert("num_global_key_value_heads".into(), json!(self.global_kv_heads));
        }
        c
    }

    /// Random weights for every tensor the graph reads (the list in
    /// [`switchyard_model::tensors`]), HF names with the `model.` prefix.
    pub fn tensors(&self) -> Result<Vec<Tensor>> {
        random_tensors(&self.config(), self.seed)
    }

    /// The complete checkpoint.
    pub fn build(&self) -> Result<Synthetic> {
        Ok(Synthetic { config: self.config(), tensors: self.tensors()? })
    }
}

/// Seeded random weights for every tensor `config` (an HF `config.json`
/// value) calls for, scaled as the module header says, HF names with the
/// `model.` prefix.
pub fn random_tensors(config: &Value, seed: u64) -> Result<Vec<Tensor>> {
    let obj = config.as_object().ok_or_else(|| Error::config("<file>", "the top level must be a JSON object"))?;
    let cfg = ModelConfig::from_value(obj)?;
    let mut g = Gen(SmallRng::seed_from_u64(seed));
    let tensors = ModelTensors::of(&cfg);
    Ok(tensors
        .all()
        .into_iter()
        .map(|t| {
            let name = format!("model.{}", t.name);
            match t.kind {
                TensorKind::Embedding => Tensor::bf16(&name, t.shape.clone(), g.normal(t.shape.iter().product(), 0.5)),
                // HF's per-layer table is an embedding too, scaled by
                // sqrt(P) on the way in: N(0, 1/P) keeps its rows O(1).
                TensorKind::HostRows => {
                    let scale = (1.0 / (t.shape[1] as f32 / cfg.num_layers().max(1) as f32)).sqrt();
                    Tensor::bf16(&name, t.shape.clone(), g.normal(t.shape.iter().product(), scale))
                }
                TensorKind::Linear => g.matrix(&name, t.shape[0], t.shape[1]),
                TensorKind::Vector | TensorKind::F32 => g.vector(&name, t.shape[0]),
                // Stacked experts, each scaled by its fan-in.
                TensorKind::Experts => {
                    let (e, n, k) = (t.shape[0], t.shape[1], t.shape[2]);
                    Tensor::bf16(&name, t.shape.clone(), g.normal(e * n * k, (1.0 / k as f32).sqrt()))
                }
                // HF stores layer_scalar as an f32-typed buffer (bf16 in a bf16 save).
                TensorKind::LayerScalar => Tensor::bf16(&name, vec![1], vec![0.7 + 0.6 * g.0.random::<f32>()]),
            }
        })
        .collect())
}

/// One tensor to serialise: raw little-endian bytes in `dtype`.
#[derive(Clone, Debug)]
pub struct Tensor {
    /// Full name.
    pub name: String,
    /// Stored dtype.
    pub dtype: Dtype,
    /// Shape.
    pub shape: Vec<usize>,
    /// Bytes.
    pub data: Vec<u8>,
}

impl Tensor {
    /// A bf16 tensor from f32 values (rounded to nearest even).
    pub fn bf16(name: &str, shape: Vec<usize>, v: Vec<f32>) -> Self {
        let data = v.iter().flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes()).collect();
        Tensor { name: name.into(), dtype: Dtype::BF16, shape, data }
    }

    /// The values widened to f32 (for BF16 / F16 / F32 tensors).
    pub fn to_f32(&self) -> Vec<f32> {
        match self.dtype {
            Dtype::BF16 => self.data.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            Dtype::F16 => self.data.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            Dtype::F32 => self.data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            _ => Vec::new(),
        }
    }

    /// Re-encodes the values as F32 or F16 (to test the loader's conversions).
    pub fn convert(&mut self, dtype: Dtype) {
        let v = self.to_f32();
        self.data = match dtype {
            Dtype::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Dtype::F16 => v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect(),
            _ => v.iter().flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes()).collect(),
        };
        self.dtype = dtype;
    }
}

impl View for &Tensor {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// A synthetic checkpoint in memory.
#[derive(Clone, Debug)]
pub struct Synthetic {
    /// `config.json`.
    pub config: Value,
    /// Tensors, in write order.
    pub tensors: Vec<Tensor>,
}

impl Synthetic {
    /// The safetensors file bytes.
    pub fn safetensors(&self) -> Result<Vec<u8>> {
        safetensors::serialize(self.tensors.iter().map(|t| (t.name.clone(), t)), None)
            .map_err(|e| Error::checkpoint("<synthetic>", format!("serialising: {e}")))
    }

    /// The `config.json` text.
    pub fn config_json(&self) -> String {
        serde_json::to_string_pretty(&self.config).unwrap_or_default()
    }

    /// Writes `dir/config.json` and `dir/model.safetensors` (creating `dir`).
    ///
    /// Each file is written to a fresh temporary name in `dir` (created
    /// exclusively, so a link planted there is never followed) and renamed
    /// into place, so a reader never sees half a file. A `dir` that is a
    /// symbolic link, or a destination that is one, is refused: writing
    /// through a link someone else planted overwrites whatever it points at.
    pub fn write(&self, dir: &Path) -> Result<()> {
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(Error::file(dir, "is a symbolic link; refusing to write through it (name the real directory)"))
            }
            Ok(m) if !m.is_dir() => return Err(Error::file(dir, format!("is {}, not a directory", describe(&m.file_type())))),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir).map_err(|source| Error::Io { path: dir.to_path_buf(), source })?
            }
            Err(source) => return Err(Error::Io { path: dir.to_path_buf(), source }),
        }
        write_replacing(dir, "config.json", self.config_json().as_bytes())?;
        write_replacing(dir, "model.safetensors", &self.safetensors()?)
    }

    /// The tensor called `name`.
    pub fn tensor_mut(&mut self, name: &str) -> Option<&mut Tensor> {
        self.tensors.iter_mut().find(|t| t.name == name)
    }
}

/// Writes `dir/name` through a temporary file and a rename.
fn write_replacing(dir: &Path, name: &str, data: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let dest = dir.join(name);
    match std::fs::symlink_metadata(&dest) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(Error::file(&dest, "is a symbolic link; refusing to replace it (remove it first if that is intended)"))
        }
        Ok(m) if !m.is_file() => return Err(Error::file(&dest, format!("is {}, not a regular file", describe(&m.file_type())))),
        _ => {}
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.tmp-{}-{serial}", std::process::id()));
    let written = (|| {
        // create_new is O_CREAT|O_EXCL: it fails on any existing entry, a link included.
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(io(&tmp))?;
        f.write_all(data).and_then(|()| f.sync_all()).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &dest).map_err(io(&dest))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

struct Gen(SmallRng);

impl Gen {
    /// `n` samples of N(0, std²) (Box–Muller).
    fn normal(&mut self, n: usize, std: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let u1: f32 = self.0.random::<f32>().max(1e-12);
                let u2: f32 = self.0.random();
                std * (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
            })
            .collect()
    }

    fn matrix(&mut self, name: &str, n: usize, k: usize) -> Tensor {
        Tensor::bf16(name, vec![n, k], self.normal(n * k, (1.0 / k as f32).sqrt()))
    }

    fn vector(&mut self, name: &str, n: usize) -> Tensor {
        Tensor::bf16(name, vec![n], (0..n).map(|_| 0.6 + 0.8 * self.0.random::<f32>()).collect())
    }
}

/// The safetensors dtype enum, re-exported for tests that change a tensor's type.
pub use safetensors::Dtype as SafeDtype;
