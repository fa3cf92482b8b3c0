//! HF `config.json` for `model_type: gemma4_text` (or a `gemma4` config whose
//! `text_config` is one), parsed into a validated [`ModelConfig`].
//!
//! The rules follow `Gemma4TextConfig.__post_init__` in transformers 5.x:
//! per-layer head_dim / num_key_value_heads come from `per_layer_config`
//! (keys are layer indices, serialised as zero-padded strings) or, when that
//! is absent, from `global_head_dim` / `num_global_key_value_heads` on
//! `full_attention` layers; the last layer is forced to full attention.
//! E2B / E4B features follow `modeling_gemma4.py`: per-layer input
//! embeddings (`hidden_size_per_layer_input`, HF's default 256 when absent),
//! KV sharing (`num_kv_shared_layers`) and `use_double_wide_mlp`. Every
//! feature the graph does not implement is refused with an error naming the
//! field, rather than silently computing something else.
use crate::error::{Error, Result};
use crate::text::clip;
use serde_json::{Map, Value};

/// Attention flavour of one decoder layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// `sliding_attention`: causal within `sliding_window`, RoPE "default".
    Sliding,
    /// `full_attention`: causal over the whole context, RoPE "proportional".
    Full,
}

impl LayerKind {
    /// The HF name (`sliding_attention` / `full_attention`).
    pub fn hf_name(self) -> &'static str {
        match self {
            LayerKind::Sliding => "sliding_attention",
            LayerKind::Full => "full_attention",
        }
    }
}

/// RoPE parameters of one layer type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rope {
    /// `rope_theta`.
    pub theta: f64,
    /// Frequency pairs that rotate, out of `head_dim / 2`: all of them for
    /// "default", `floor(partial_rotary_factor · head_dim / 2)` for "proportional".
    pub partial_rotary_factor: f64,
    /// "proportional" divides every inverse frequency by this (`factor`, default 1).
    pub factor: f64,
    /// Whether this is "proportional" (else "default").
    pub proportional: bool,
}

impl Rope {
    /// Rotated frequency pairs for a head of `hd` (as HF's
    /// `int(partial_rotary_factor * head_dim // 2)`).
    pub fn rotated_pairs(&self, hd: usize) -> usize {
        if self.proportional {
            ((self.partial_rotary_factor * hd as f64) / 2.0).floor() as usize
        } else {
            hd / 2
        }
    }
}

/// One decoder layer's attention shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerSpec {
    /// Sliding or full.
    pub kind: LayerKind,
    /// Head dimension.
    pub head_dim: usize,
    /// KV heads.
    pub num_kv_heads: usize,
    /// V is the K projection (`attention_k_eq_v` on a full layer).
    pub k_eq_v: bool,
    /// Sliding window in tokens, 0 for full attention.
    pub window: usize,
    /// RoPE of this layer's type.
    pub rope: Rope,
    /// KV sharing (`num_kv_shared_layers`): the layer whose K and V this one
    /// attends over. `None` for a layer that projects and caches its own KV;
    /// for one of the last N layers, the last earlier layer of the same
    /// attention type that owns KV (HF's `store_full_length_kv` layer).
    pub kv_source: Option<usize>,
    /// This layer's dense MLP intermediate size: `intermediate_size`, or
    /// twice it on a KV-shared layer when `use_double_wide_mlp`.
    pub intermediate: usize,
}

/// Per-layer input embeddings (`hidden_size_per_layer_input > 0`, Gemma 4
/// E2B / E4B): a second token table whose row for a token holds one
/// `hidden`-wide vector per decoder layer, mixed with a projection of the
/// main embedding and fed to each layer through a gate after its MLP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerLayerInput {
    /// `hidden_size_per_layer_input`: each layer's slice of a table row.
    pub hidden: usize,
    /// `vocab_size_per_layer_input`: rows of `embed_tokens_per_layer`.
    pub vocab: usize,
}

/// The MoE branch's sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeConfig {
    /// Experts per layer.
    pub num_experts: usize,
    /// Experts per token.
    pub top_k: usize,
    /// Each expert's intermediate size.
    pub intermediate: usize,
}

/// A validated Gemma 4 text configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// Vocabulary (rows of the tied embedding).
    pub vocab_size: usize,
    /// Residual width.
    pub hidden_size: usize,
    /// Dense MLP intermediate size (`intermediate_size`); a double-wide
    /// layer's is in [`LayerSpec::intermediate`].
    pub intermediate_size: usize,
    /// Query heads (all layers).
    pub num_heads: usize,
    /// Per-layer attention shapes, `num_hidden_layers` of them.
    pub layers: Vec<LayerSpec>,
    /// `final_logit_softcapping`; 0 = none.
    pub final_logit_softcapping: f32,
    /// The MoE branch, when `enable_moe_block`.
    pub moe: Option<MoeConfig>,
    /// `rms_norm_eps`.
    pub eps: f32,
    /// Generation stops at any of these.
    pub eos_token_ids: Vec<u32>,
    /// `max_position_embeddings`.
    pub max_position_embeddings: usize,
    /// Per-layer input embeddings, when `hidden_size_per_layer_input > 0`.
    pub per_layer_input: Option<PerLayerInput>,
}

/// Largest head_dim the attention and qkv_prep kernels take.
const MAX_HEAD_DIM: usize = 512;

/// Most decoder layers a config may declare. The parser builds per-layer
/// tables before any tensor is read, so an absurd count (10^9) must be
/// refused here rather than allocated; real Gemma checkpoints have < 100.
pub const MAX_LAYERS: usize = 4096;

impl ModelConfig {
    /// Parses `config.json` text. A key given twice in one object is an
    /// error (plain serde_json would keep the last one silently).
    pub fn from_json(text: &str) -> Result<Self> {
        let v = crate::json::parse(text.as_bytes()).map_err(|e| Error::config("<file>", format!("not valid JSON: {e}")))?;
        let root = v.as_object().ok_or_else(|| Error::config("<file>", "the top level must be a JSON object"))?;
        Self::from_value(root)
    }

    /// Parses the bytes of a `config.json` file (which must be UTF-8).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| Error::config("<file>", format!("not UTF-8 (invalid byte at offset {})", e.valid_up_to())))?;
        Self::from_json(text)
    }

    /// Parses an already-decoded JSON object (the top-level config).
    pub fn from_value(root: &Map<String, Value>) -> Result<Self> {
        let top_type = opt_str(root, "", "model_type")?;
        let (obj, prefix) = match top_type {
            Some("gemma4_text") => (root, String::new()),
            Some("gemma4") | None if root.contains_key("text_config") => {
                let tc = root
                    .get("text_config")
                    .and_then(Value::as_object)
                    .ok_or_else(|| Error::config("text_config", "must be a JSON object"))?;
                match opt_str(tc, "text_config.", "model_type")? {
                    Some("gemma4_text") | None => (tc, "text_config.".to_string()),
                    Some(other) => {
                        return Err(Error::config(
                            "text_config.model_type",
                            format!("`{}` is not supported (expected gemma4_text)", clip(other)),
                        ))
                    }
                }
            }
            Some(other) => return Err(Error::config("model_type", format!("`{}` is not supported (expected gemma4_text)", clip(other)))),
            None => return Err(Error::config("model_type", "missing (expected gemma4_text)")),
        };
        Parser { obj, prefix }.parse()
    }

    /// Layers in the model.
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Whether layer `i` projects and caches its own K and V (is not KV-shared).
    pub fn owns_kv(&self, i: usize) -> bool {
        self.layers[i].kv_source.is_none()
    }

    /// The largest dense MLP intermediate size of any layer (double-wide
    /// layers included): what activation buffers must hold.
    pub fn max_intermediate(&self) -> usize {
        self.layers.iter().map(|l| l.intermediate).max().unwrap_or(self.intermediate_size)
    }
}

/// A per-layer value and the full name of the field it came from.
type Sourced = Option<(usize, String)>;
/// A layer's `(head_dim, num_key_value_heads)` overrides.
type Override = (Sourced, Sourced);

/// Reads fields of one JSON object, naming them with `prefix` in errors.
struct Parser<'a> {
    obj: &'a Map<String, Value>,
    prefix: String,
}

fn opt_str<'a>(obj: &'a Map<String, Value>, prefix: &str, key: &str) -> Result<Option<&'a str>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(Error::config(format!("{prefix}{key}"), format!("expected a string, found {}", brief(other)))),
    }
}

/// A number as JSON writes it (`1e-50`, not fifty zeros).
fn num(x: f64) -> String {
    Value::from(x).to_string()
}

/// A JSON value for a message, clipped (a value may be megabytes long).
fn brief(v: &Value) -> String {
    clip(&v.to_string())
}

fn as_count(v: &Value) -> Option<usize> {
    v.as_u64().and_then(|n| usize::try_from(n).ok())
}

impl Parser<'_> {
    fn name(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn err(&self, key: &str, reason: impl Into<String>) -> Error {
        Error::config(self.name(key), reason)
    }

    fn present(&self, key: &str) -> Option<&Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }

    fn count_opt(&self, key: &str) -> Result<Option<usize>> {
        match self.present(key) {
            None => Ok(None),
            Some(v) => as_count(v).map(Some).ok_or_else(|| self.err(key, format!("expected a non-negative integer, found {}", brief(v)))),
        }
    }

    /// A required positive integer.
    fn dim(&self, key: &str) -> Result<usize> {
        match self.count_opt(key)? {
            None => Err(self.err(key, "missing (required)")),
            Some(0) => Err(self.err(key, "must be > 0")),
            Some(n) => Ok(n),
        }
    }

    fn count_or(&self, key: &str, default: usize) -> Result<usize> {
        Ok(self.count_opt(key)?.unwrap_or(default))
    }

    fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.present(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(self.err(key, format!("expected true or false, found {}", brief(v)))),
        }
    }

    fn float_opt(&self, key: &str) -> Result<Option<f64>> {
        match self.present(key) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() => Ok(Some(x)),
                _ => Err(self.err(key, format!("expected a number, found {}", brief(v)))),
            },
        }
    }

    /// `x` (the value of `key`) as the f32 the kernels compute with. A
    /// value that f32 cannot hold is refused here, in the user's terms,
    /// rather than turning into 0 or infinity and showing up later as NaN
    /// logits.
    fn to_f32(&self, key: &str, x: f64) -> Result<f32> {
        let y = x as f32;
        if y.is_infinite() {
            return Err(self.err(key, format!("{} overflows f32, the precision the kernels use (largest: {:e})", num(x), f32::MAX)));
        }
        if x != 0.0 && !y.is_normal() {
            return Err(self.err(
                key,
                format!("{} underflows to {y} in f32, the precision the kernels use (smallest accepted: {:e})", num(x), f32::MIN_POSITIVE),
            ));
        }
        Ok(y)
    }

    fn str_opt(&self, key: &str) -> Result<Option<&str>> {
        opt_str(self.obj, &self.prefix, key)
    }

    fn parse(&self) -> Result<ModelConfig> {
        self.refuse_unsupported()?;
        let vocab_size = self.dim("vocab_size")?;
        let hidden_size = self.dim("hidden_size")?;
        let intermediate_size = self.dim("intermediate_size")?;
        let num_layers = self.dim("num_hidden_layers")?;
        if num_layers > MAX_LAYERS {
            return Err(self.err("num_hidden_layers", format!("{num_layers} exceeds the {MAX_LAYERS} layers this loader accepts")));
        }
        let num_heads = self.dim("num_attention_heads")?;
        let num_kv_heads = self.dim("num_key_value_heads")?;
        let head_dim = self.dim("head_dim")?;
        let eps = self.float_opt("rms_norm_eps")?.unwrap_or(1e-6);
        if eps < 0.0 {
            return Err(self.err("rms_norm_eps", format!("{} must be >= 0", num(eps))));
        }
        let eps = self.to_f32("rms_norm_eps", eps)?;
        let sliding_window = self.count_or("sliding_window", 512)?;
        let max_position_embeddings = self.count_or("max_position_embeddings", 131_072)?;
        if max_position_embeddings == 0 {
            return Err(self.err("max_position_embeddings", "must be > 0 (the context length in tokens)"));
        }
        let softcap = self.float_opt("final_logit_softcapping")?.unwrap_or(0.0);
        if softcap < 0.0 {
            return Err(self.err("final_logit_softcapping", format!("{} must be >= 0 (or null)", num(softcap))));
        }
        let softcap = self.to_f32("final_logit_softcapping", softcap)?;
        let k_eq_v = self.bool_or("attention_k_eq_v", false)?;
        let kinds = self.layer_types(num_layers)?;
        let ropes = [self.rope(LayerKind::Sliding, max_position_embeddings)?, self.rope(LayerKind::Full, max_position_embeddings)?];
        let overrides = self.per_layer(&kinds, k_eq_v)?;
        let kv_sources = self.kv_sources(&kinds)?;
        let double_wide = self.bool_or("use_double_wide_mlp", false)?;
        let wide = intermediate_size.checked_mul(2).ok_or_else(|| {
            self.err("intermediate_size", format!("= {intermediate_size}: twice it (gate and up) overflows a tensor dimension"))
        })?;

        let mut layers = Vec::with_capacity(num_layers);
        for (i, &kind) in kinds.iter().enumerate() {
            // Each value is blamed on the key it was read from: the base
            // field, a per_layer_config entry as the user wrote its key, or
            // the global_* field that HF applies to full-attention layers.
            let (hd, hd_field) = overrides[i].0.clone().unwrap_or_else(|| (head_dim, self.name("head_dim")));
            let (nkv, nkv_field) = overrides[i].1.clone().unwrap_or_else(|| (num_kv_heads, self.name("num_key_value_heads")));
            let kind_name = kind.hf_name();
            if hd == 0 || hd % 8 != 0 || hd > MAX_HEAD_DIM {
                return Err(Error::config(
                    hd_field,
                    format!(
                        "= {hd} (layer {i}, {kind_name}): a head_dim must be a multiple of 8 in 8..={MAX_HEAD_DIM} (attention kernels)"
                    ),
                ));
            }
            if nkv == 0 || num_heads % nkv != 0 {
                return Err(Error::config(
                    nkv_field,
                    format!("= {nkv} (layer {i}, {kind_name}): the KV heads must divide num_attention_heads = {num_heads}"),
                ));
            }
            // Tensor shapes multiply these (q_proj is [num_heads · head_dim,
            // hidden]); a product past usize is refused here, by field, before
            // any shape is computed from it.
            if num_heads.checked_mul(hd).is_none() {
                return Err(self.err(
                    "num_attention_heads",
                    format!("= {num_heads}: times head_dim {hd} (layer {i}) it overflows a tensor dimension"),
                ));
            }
            let sliding = kind == LayerKind::Sliding;
            if sliding && sliding_window == 0 {
                return Err(self.err("sliding_window", "must be > 0 when there are sliding_attention layers"));
            }
            layers.push(LayerSpec {
                kind,
                head_dim: hd,
                num_kv_heads: nkv,
                // HF: use_alternative_attention = attention_k_eq_v and not is_sliding.
                k_eq_v: k_eq_v && !sliding,
                window: if sliding { sliding_window } else { 0 },
                rope: ropes[if sliding { 0 } else { 1 }],
                kv_source: kv_sources[i],
                // HF's Gemma4TextMLP: double width on KV-shared layers only.
                intermediate: if double_wide && kv_sources[i].is_some() { wide } else { intermediate_size },
            });
        }
        // A shared layer reads its source's pool with its own queries: the
        // shapes must agree (they can differ only through per_layer_config).
        for (i, l) in layers.iter().enumerate() {
            if let Some(src) = l.kv_source {
                let s = &layers[src];
                if (s.head_dim, s.num_kv_heads) != (l.head_dim, l.num_kv_heads) {
                    return Err(self.err(
                        "num_kv_shared_layers",
                        format!(
                            "layer {i} shares the KV of layer {src}, but their (head_dim, num_key_value_heads) differ: ({}, {}) vs ({}, {})",
                            l.head_dim, l.num_kv_heads, s.head_dim, s.num_kv_heads
                        ),
                    ));
                }
            }
        }
        if hidden_size % 8 != 0 {
            return Err(self.err("hidden_size", format!("{hidden_size} must be a multiple of 8 (norm, embedding and lm_head kernels)")));
        }
        if intermediate_size % 2 != 0 {
            return Err(self.err("intermediate_size", format!("{intermediate_size} must be even (gelu_mul works on pairs)")));
        }
        Ok(ModelConfig {
            vocab_size,
            hidden_size,
            intermediate_size,
            num_heads,
            layers,
            final_logit_softcapping: softcap,
            moe: self.moe()?,
            eps,
            eos_token_ids: self.eos()?,
            max_position_embeddings,
            per_layer_input: self.per_layer_input(hidden_size, num_layers)?,
        })
    }

    /// `hidden_size_per_layer_input` (HF's default 256 when absent, so an
    /// absent key turns per-layer inputs on, as HF would) and
    /// `vocab_size_per_layer_input` (default 262144).
    fn per_layer_input(&self, hidden_size: usize, num_layers: usize) -> Result<Option<PerLayerInput>> {
        let hidden = self.count_or("hidden_size_per_layer_input", 256)?;
        if hidden == 0 {
            return Ok(None);
        }
        if hidden % 2 != 0 {
            return Err(self.err("hidden_size_per_layer_input", format!("{hidden} must be even (norm and gelu_mul kernels work on pairs)")));
        }
        let vocab = self.count_or("vocab_size_per_layer_input", 262_144)?;
        if vocab == 0 {
            return Err(self.err("vocab_size_per_layer_input", "must be > 0 when hidden_size_per_layer_input > 0"));
        }
        if vocab > i32::MAX as usize {
            return Err(self.err("vocab_size_per_layer_input", format!("{vocab} exceeds the i32 row indices the kernels take")));
        }
        // The table row and the model projection are num_layers · hidden wide.
        let width = num_layers.checked_mul(hidden).filter(|w| w.checked_mul(hidden_size.max(vocab)).is_some());
        if width.is_none() {
            return Err(self.err(
                "hidden_size_per_layer_input",
                format!("= {hidden}: times num_hidden_layers = {num_layers} it overflows a tensor dimension"),
            ));
        }
        Ok(Some(PerLayerInput { hidden, vocab }))
    }

    /// Each layer's KV source, as `Gemma4TextAttention.__init__` decides:
    /// the last `num_kv_shared_layers` layers reuse the KV of the last
    /// earlier layer of the same type outside that band.
    fn kv_sources(&self, kinds: &[LayerKind]) -> Result<Vec<Option<usize>>> {
        let n = kinds.len();
        let shared = self.count_or("num_kv_shared_layers", 0)?;
        if shared > n {
            return Err(self.err("num_kv_shared_layers", format!("{shared} exceeds num_hidden_layers = {n}")));
        }
        let first_shared = n - shared;
        (0..n)
            .map(|i| {
                if i < first_shared {
                    return Ok(None);
                }
                match (0..first_shared).rev().find(|&j| kinds[j] == kinds[i]) {
                    Some(j) => Ok(Some(j)),
                    None => Err(self.err(
                        "num_kv_shared_layers",
                        format!(
                            "= {shared}: layer {i} ({}) shares KV, but no earlier layer of that type (among layers 0..{first_shared}) computes its own",
                            kinds[i].hf_name()
                        ),
                    )),
                }
            })
            .collect()
    }

    /// Features of Gemma 4 this graph does not implement: refused by name.
    fn refuse_unsupported(&self) -> Result<()> {
        if let Some(act) = self.str_opt("hidden_activation")? {
            if act != "gelu_pytorch_tanh" {
                return Err(self.err("hidden_activation", format!("`{}` is not supported (only gelu_pytorch_tanh)", clip(act))));
            }
        }
        if let Some(b) = self.str_opt("use_bidirectional_attention")? {
            match b {
                "vision" => {} // affects vision tokens only; a text-only graph is unchanged
                "all" => return Err(self.err("use_bidirectional_attention", "`all` (bidirectional text attention) is not supported")),
                other => return Err(self.err("use_bidirectional_attention", format!("unknown value `{}`", clip(other)))),
            }
        }
        if self.bool_or("attention_bias", false)? {
            return Err(self.err("attention_bias", "true is not supported (Gemma 4 projections have no bias)"));
        }
        if !self.bool_or("tie_word_embeddings", true)? {
            return Err(self.err("tie_word_embeddings", "false is not supported: the LM head reads the embedding table"));
        }
        Ok(())
    }

    fn layer_types(&self, n: usize) -> Result<Vec<LayerKind>> {
        let mut kinds = match self.present("layer_types") {
            // HF's default: five sliding layers, then one full.
            None => (0..n).map(|i| if (i + 1) % 6 != 0 { LayerKind::Sliding } else { LayerKind::Full }).collect(),
            Some(Value::Array(a)) => {
                if a.len() != n {
                    return Err(self.err("layer_types", format!("has {} entries, num_hidden_layers = {n}", a.len())));
                }
                a.iter()
                    .enumerate()
                    .map(|(i, t)| match t.as_str() {
                        Some("sliding_attention") => Ok(LayerKind::Sliding),
                        Some("full_attention") => Ok(LayerKind::Full),
                        _ => Err(self.err(
                            &format!("layer_types[{i}]"),
                            format!("{}: expected \"sliding_attention\" or \"full_attention\"", brief(t)),
                        )),
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            Some(v) => return Err(self.err("layer_types", format!("expected a list, found {}", brief(v)))),
        };
        // HF forces the last layer to full attention (with a warning); the
        // oracle computes that, so this graph does too.
        if let Some(last) = kinds.last_mut() {
            *last = LayerKind::Full;
        }
        Ok(kinds)
    }

    fn rope(&self, kind: LayerKind, max_pos: usize) -> Result<Rope> {
        let default = match kind {
            LayerKind::Sliding => Rope { theta: 10_000.0, partial_rotary_factor: 1.0, factor: 1.0, proportional: false },
            LayerKind::Full => Rope { theta: 1_000_000.0, partial_rotary_factor: 0.25, factor: 1.0, proportional: true },
        };
        let Some(rp) = self.present("rope_parameters") else { return Ok(default) };
        let rp = rp.as_object().ok_or_else(|| self.err("rope_parameters", "expected an object keyed by layer type"))?;
        let type_name = kind.hf_name();
        // Per layer type (Gemma 4's form), or one flat set for every type.
        let (params, at) = if rp.contains_key("rope_type") || rp.contains_key("rope_theta") {
            (rp, "rope_parameters".to_string())
        } else {
            match rp.get(type_name) {
                None | Some(Value::Null) => return Ok(default),
                Some(Value::Object(o)) => (o, format!("rope_parameters.{type_name}")),
                Some(v) => return Err(self.err(&format!("rope_parameters.{type_name}"), format!("expected an object, found {}", brief(v)))),
            }
        };
        let sub = Parser { obj: params, prefix: format!("{}{at}.", self.prefix) };
        let rope_type = sub.str_opt("rope_type")?.unwrap_or("default");
        let theta = sub.float_opt("rope_theta")?.ok_or_else(|| sub.err("rope_theta", "missing (required)"))?;
        if theta <= 0.0 {
            return Err(sub.err("rope_theta", format!("{} must be > 0", num(theta))));
        }
        let theta32 = sub.to_f32("rope_theta", theta)?;
        // The tables hold cos/sin of position · inverse frequency, computed
        // in f32 as HF does; the largest inverse frequency is
        // max(1, 1/theta) / factor, so that product must stay finite at the
        // last position, or every rotated value is NaN.
        let angles_fit = |factor: f32| {
            let largest = (1.0f32 / theta32).max(1.0) / factor;
            largest.is_finite() && (largest * max_pos as f32).is_finite()
        };
        let overflow = |what: &str| {
            sub.err(
                "rope_theta",
                format!("{}{what}: the RoPE angle at position max_position_embeddings = {max_pos} overflows f32 (a larger rope_theta, or a smaller context)", num(theta)),
            )
        };
        match rope_type {
            "default" => {
                if !angles_fit(1.0) {
                    return Err(overflow(""));
                }
                Ok(Rope { theta, partial_rotary_factor: 1.0, factor: 1.0, proportional: false })
            }
            "proportional" => {
                let p = sub.float_opt("partial_rotary_factor")?.unwrap_or(1.0);
                if !(0.0..=1.0).contains(&p) {
                    return Err(sub.err("partial_rotary_factor", format!("{} must be in [0, 1]", num(p))));
                }
                let factor = sub.float_opt("factor")?.unwrap_or(1.0);
                if factor <= 0.0 {
                    return Err(sub.err("factor", format!("{} must be > 0", num(factor))));
                }
                if !angles_fit(sub.to_f32("factor", factor)?) {
                    return Err(overflow(&format!(" with factor {}", num(factor))));
                }
                Ok(Rope { theta, partial_rotary_factor: p, factor, proportional: true })
            }
            other => Err(sub.err("rope_type", format!("`{}` is not supported (only \"default\" and \"proportional\")", clip(other)))),
        }
    }

    /// Per-layer `(head_dim, num_key_value_heads)` overrides, each with the
    /// full name of the field it was read from.
    fn per_layer(&self, kinds: &[LayerKind], k_eq_v: bool) -> Result<Vec<Override>> {
        let n = kinds.len();
        let mut out: Vec<Override> = vec![(None, None); n];
        match self.present("per_layer_config") {
            Some(Value::Object(map)) => {
                // The key each layer was given under: "1" and "01" both parse
                // to layer 1, and one silently overriding the other would
                // make the result depend on key order.
                let mut key_of: Vec<Option<&str>> = vec![None; n];
                for (key, ov) in map {
                    let at = format!("per_layer_config.{}", clip(key));
                    let index = if !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit()) { Some(key.parse::<usize>()) } else { None };
                    let i = match index {
                        None => return Err(self.err(&at, "key must be a layer index (decimal digits, optionally zero-padded)")),
                        Some(Ok(i)) if i < n => i,
                        Some(_) => {
                            return Err(self
                                .err(&at, format!("layer {} does not exist (num_hidden_layers = {n})", clip(key.trim_start_matches('0')))))
                        }
                    };
                    if let Some(prev) = key_of[i].replace(key) {
                        return Err(self
                            .err("per_layer_config", format!("keys `{}` and `{}` both name layer {i}; keep one", clip(prev), clip(key))));
                    }
                    let ov = ov.as_object().ok_or_else(|| self.err(&at, format!("expected an object, found {}", brief(ov))))?;
                    let sub = Parser { obj: ov, prefix: format!("{}{at}.", self.prefix) };
                    for k in ov.keys() {
                        if k != "head_dim" && k != "num_key_value_heads" {
                            return Err(
                                sub.err(&clip(k), "per-layer override of this field is not supported (only head_dim, num_key_value_heads)")
                            );
                        }
                    }
                    let hd = sub.count_opt("head_dim")?.map(|v| (v, sub.name("head_dim")));
                    let nkv = sub.count_opt("num_key_value_heads")?.map(|v| (v, sub.name("num_key_value_heads")));
                    out[i] = (hd, nkv);
                }
            }
            Some(v) => return Err(self.err("per_layer_config", format!("expected an object keyed by layer index, found {}", brief(v)))),
            None => {
                // HF __post_init__ without per_layer_config: full layers take
                // global_head_dim (default 512), and num_global_key_value_heads
                // when attention_k_eq_v gates it in.
                let ghd = match self.count_opt("global_head_dim")? {
                    Some(v) => (v, self.name("global_head_dim")),
                    None => (512, self.name("global_head_dim (absent: HF's default 512)")),
                };
                let gkv = self.count_opt("num_global_key_value_heads")?.filter(|_| k_eq_v);
                let gkv = gkv.map(|v| (v, self.name("num_global_key_value_heads")));
                for (i, k) in kinds.iter().enumerate() {
                    if *k == LayerKind::Full {
                        out[i] = (Some(ghd.clone()), gkv.clone());
                    }
                }
            }
        }
        Ok(out)
    }

    fn moe(&self) -> Result<Option<MoeConfig>> {
        if !self.bool_or("enable_moe_block", false)? {
            return Ok(None);
        }
        let m = MoeConfig {
            num_experts: self.dim("num_experts")?,
            top_k: self.dim("top_k_experts")?,
            intermediate: self.dim("moe_intermediate_size")?,
        };
        if m.top_k > m.num_experts.min(switchyard_kernels::moe::expert::MAX_TOP_K) {
            return Err(self.err(
                "top_k_experts",
                format!("{} must be <= min(num_experts = {}, {})", m.top_k, m.num_experts, switchyard_kernels::moe::expert::MAX_TOP_K),
            ));
        }
        if m.num_experts > switchyard_kernels::moe::expert::MAX_EXPERTS {
            return Err(self.err(
                "num_experts",
                format!("{} exceeds the router kernel's {}", m.num_experts, switchyard_kernels::moe::expert::MAX_EXPERTS),
            ));
        }
        if m.intermediate.checked_mul(2).is_none() {
            return Err(
                self.err("moe_intermediate_size", format!("= {}: twice it (gate and up) overflows a tensor dimension", m.intermediate))
            );
        }
        if m.intermediate % 8 != 0 {
            return Err(self.err("moe_intermediate_size", format!("{} must be a multiple of 8 (grouped expert GEMM rows)", m.intermediate)));
        }
        if m.num_experts % 2 != 0 {
            return Err(self.err("num_experts", format!("{} must be even (the router GEMM writes logits in pairs)", m.num_experts)));
        }
        Ok(Some(m))
    }

    fn eos(&self) -> Result<Vec<u32>> {
        let id = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
        match self.present("eos_token_id") {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    id(v).ok_or_else(|| self.err(&format!("eos_token_id[{i}]"), format!("expected a token id, found {}", brief(v))))
                })
                .collect(),
            Some(v) => {
                id(v).map(|x| vec![x]).ok_or_else(|| self.err("eos_token_id", format!("expected a token id or a list, found {}", brief(v))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A minimal valid config: two sliding layers, then a full one.
    fn base() -> Value {
        json!({
            "model_type": "gemma4_text", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
            "hidden_size_per_layer_input": 0, "max_position_embeddings": 256, "sliding_window": 8,
            "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
        })
    }

    fn parse(v: &Value) -> Result<ModelConfig> {
        ModelConfig::from_json(&v.to_string())
    }

    #[track_caller]
    fn refused(v: &Value, field: &str, needle: &str) {
        match parse(v) {
            Err(Error::Config { field: f, reason }) => {
                assert_eq!(f, field, "blamed the wrong field ({reason})");
                assert!(reason.contains(needle), "`{reason}` does not say `{needle}`");
            }
            other => panic!("expected a config error on `{field}`, got {other:?}"),
        }
    }

    #[test]
    fn global_fields_are_blamed_by_their_own_names() {
        let mut v = base();
        v["global_head_dim"] = json!(44);
        refused(&v, "global_head_dim", "= 44 (layer 2, full_attention)");
        let mut v = base();
        v["attention_k_eq_v"] = json!(true);
        v["num_global_key_value_heads"] = json!(3);
        refused(&v, "num_global_key_value_heads", "= 3 (layer 2, full_attention)");
        // Only head_dim overridden on layer 2: its KV heads are still the base field's.
        let mut v = base();
        v["num_key_value_heads"] = json!(3);
        v["per_layer_config"] = json!({"2": {"head_dim": 32}});
        refused(&v, "num_key_value_heads", "= 3 (layer 0");
        let mut v = base();
        v["per_layer_config"] = json!({"002": {"head_dim": 12}});
        refused(&v, "per_layer_config.002.head_dim", "= 12 (layer 2");
        let mut v = base();
        v["text_config"] = v.clone();
        v["model_type"] = json!("gemma4");
        v["text_config"]["global_head_dim"] = json!(44);
        refused(&v, "text_config.global_head_dim", "= 44");
    }

    #[test]
    fn per_layer_keys_naming_one_layer_twice_are_refused() {
        let mut v = base();
        v["per_layer_config"] = json!({"1": {"head_dim": 16}, "01": {"head_dim": 32}});
        refused(&v, "per_layer_config", "keys `01` and `1` both name layer 1");
        for key in ["+1", " 1", "-1", "1.0", "", "x"] {
            let mut v = base();
            v["per_layer_config"] = json!({key: {"head_dim": 16}});
            refused(&v, &format!("per_layer_config.{key}"), "key must be a layer index");
        }
        let mut v = base();
        v["per_layer_config"] = json!({"99999999999999999999999": {"head_dim": 16}});
        refused(&v, "per_layer_config.99999999999999999999999", "does not exist");
    }

    #[test]
    fn duplicate_json_keys_are_refused() {
        let text = base().to_string().replacen("\"vocab_size\":64", "\"vocab_size\":64,\"vocab_size\":128", 1);
        refused(&json!(null), "<file>", "the top level must be a JSON object");
        match ModelConfig::from_json(&text) {
            Err(e @ Error::Config { .. }) => assert!(e.to_string().contains("duplicate key `vocab_size`"), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn floats_that_f32_cannot_hold_are_refused_in_the_users_terms() {
        let mut v = base();
        v["rope_parameters"] = json!({"rope_type": "default", "rope_theta": 1e-50});
        refused(&v, "rope_parameters.rope_theta", "underflows to 0 in f32");
        v["rope_parameters"]["rope_theta"] = json!(1e39);
        refused(&v, "rope_parameters.rope_theta", "overflows f32");
        // Representable, but the angle at the last position is not.
        v["rope_parameters"]["rope_theta"] = json!(1e-37);
        refused(&v, "rope_parameters.rope_theta", "overflows f32");
        let mut v = base();
        v["rope_parameters"] = json!({"full_attention": {"rope_type": "proportional", "rope_theta": 10000.0, "factor": 1e-300}});
        refused(&v, "rope_parameters.full_attention.factor", "underflows");
        let mut v = base();
        v["final_logit_softcapping"] = json!(1e-50);
        refused(&v, "final_logit_softcapping", "underflows");
        v["final_logit_softcapping"] = json!(1e300);
        refused(&v, "final_logit_softcapping", "overflows");
        let mut v = base();
        v["rms_norm_eps"] = json!(1e300);
        refused(&v, "rms_norm_eps", "overflows");
        parse(&base()).expect("the base config is valid");
    }

    #[test]
    fn e2b_features_follow_hf() {
        // HF's default: an absent hidden_size_per_layer_input is 256.
        let mut v = base();
        v.as_object_mut().unwrap().remove("hidden_size_per_layer_input");
        assert_eq!(parse(&v).unwrap().per_layer_input, Some(PerLayerInput { hidden: 256, vocab: 262_144 }));
        // The last 2 of [s, f, s, f] share: layer 2 reads layer 0, layer 3 reads layer 1.
        let mut v = base();
        v["num_hidden_layers"] = json!(4);
        v["layer_types"] = json!(["sliding_attention", "full_attention", "sliding_attention", "full_attention"]);
        v["num_kv_shared_layers"] = json!(2);
        v["use_double_wide_mlp"] = json!(true);
        let c = parse(&v).unwrap();
        let sources: Vec<_> = c.layers.iter().map(|l| l.kv_source).collect();
        assert_eq!(sources, [None, None, Some(0), Some(1)]);
        let widths: Vec<_> = c.layers.iter().map(|l| l.intermediate).collect();
        assert_eq!(widths, [64, 64, 128, 128]);
        assert_eq!(c.max_intermediate(), 128);
        // [s, s, f] with the last layer shared: no earlier full layer owns KV.
        let mut v = base();
        v["num_kv_shared_layers"] = json!(1);
        refused(&v, "num_kv_shared_layers", "no earlier layer of that type");
        v["num_kv_shared_layers"] = json!(4);
        refused(&v, "num_kv_shared_layers", "exceeds num_hidden_layers = 3");
    }

    #[test]
    fn context_and_long_values() {
        let mut v = base();
        v["max_position_embeddings"] = json!(0);
        refused(&v, "max_position_embeddings", "must be > 0");
        v["max_position_embeddings"] = json!(u64::MAX);
        assert_eq!(parse(&v).unwrap().max_position_embeddings as u64, u64::MAX);
        let mut v = base();
        v["model_type"] = json!("x".repeat(1 << 20));
        let e = parse(&v).unwrap_err().to_string();
        assert!(e.len() < 400 && e.contains("(1048576 bytes in all)"), "{}", &e[..e.len().min(400)]);
        let mut v = base();
        v["hidden_activation"] = json!("\u{1b}]0;pwned\u{7}");
        let e = parse(&v).unwrap_err().to_string();
        assert!(e.contains("\\u{1b}]0;pwned\\u{7}") && !e.chars().any(crate::text::is_unsafe), "{e}");
    }
}
