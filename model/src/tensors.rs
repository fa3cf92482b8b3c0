//! The Gemma 4 text decoder's tensor list, written once: every tensor a
//! config calls for, with its HF name (without the `model.` /
//! `model.language_model.` prefix), shape and kind. The checkpoint loader,
//! the synthetic checkpoint writer, bench-model's random device weights and
//! the size checks all derive from it.
use crate::config::{LayerSpec, ModelConfig, MoeConfig};

/// What a tensor is: decides how it is stored on the device and how
/// synthetic values are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorKind {
    /// The tied token table `[vocab, hidden]`.
    Embedding,
    /// A norm weight or other bf16 vector.
    Vector,
    /// A linear layer `[n, k]` (HF layout: `y = x · Wᵀ`).
    Linear,
    /// Stacked expert weights `[experts, n, k]`.
    Experts,
    /// An f32 vector on the device (`per_expert_scale`).
    F32,
    /// The layer's output multiplier `layer_scalar` `[1]`, f32 on the device.
    LayerScalar,
    /// A token table read a few rows per step on the host and never placed
    /// whole on the device (`embed_tokens_per_layer`; ARCHITECTURE.md says why).
    HostRows,
}

impl TensorKind {
    /// Bytes per element in the graph's plain (unquantized) storage.
    pub fn device_bytes_per_element(self) -> usize {
        match self {
            TensorKind::F32 | TensorKind::LayerScalar => 4,
            _ => 2,
        }
    }
}

/// One tensor of the graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// Name without the model prefix, e.g. `layers.3.self_attn.q_proj.weight`.
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Kind.
    pub kind: TensorKind,
}

impl TensorSpec {
    fn new(name: String, shape: Vec<usize>, kind: TensorKind) -> Self {
        TensorSpec { name, shape, kind }
    }

    /// Elements, in u128 so that no shape overflows; `None` only past u128.
    pub fn elements(&self) -> Option<u128> {
        self.shape.iter().try_fold(1u128, |acc, &d| acc.checked_mul(d as u128))
    }
}

/// The MoE branch of one layer.
#[derive(Clone, Debug)]
pub struct MoeTensors {
    /// `router.proj.weight` `[experts, hidden]`.
    pub router_proj: TensorSpec,
    /// `router.scale` `[hidden]`.
    pub router_scale: TensorSpec,
    /// `router.per_expert_scale` `[experts]`.
    pub per_expert_scale: TensorSpec,
    /// `experts.gate_up_proj` `[experts, 2·I, hidden]`.
    pub gate_up: TensorSpec,
    /// `experts.down_proj` `[experts, hidden, I]`.
    pub down: TensorSpec,
    /// `pre_feedforward_layernorm_2`.
    pub pre_ff_norm_2: TensorSpec,
    /// `post_feedforward_layernorm_1`.
    pub post_ff_norm_1: TensorSpec,
    /// `post_feedforward_layernorm_2`.
    pub post_ff_norm_2: TensorSpec,
}

/// A layer's per-layer-input branch (E2B / E4B).
#[derive(Clone, Debug)]
pub struct PerLayerTensors {
    /// `per_layer_input_gate.weight` `[per_layer_hidden, hidden]`.
    pub gate: TensorSpec,
    /// `per_layer_projection.weight` `[hidden, per_layer_hidden]`.
    pub projection: TensorSpec,
    /// `post_per_layer_input_norm.weight` `[hidden]`.
    pub post_norm: TensorSpec,
}

/// The model-level per-layer-input tensors (E2B / E4B).
#[derive(Clone, Debug)]
pub struct PerLayerInputTensors {
    /// `embed_tokens_per_layer.weight` `[vocab_per_layer, layers · per_layer_hidden]`.
    pub table: TensorSpec,
    /// `per_layer_model_projection.weight` `[layers · per_layer_hidden, hidden]`.
    pub model_projection: TensorSpec,
    /// `per_layer_projection_norm.weight` `[per_layer_hidden]`.
    pub projection_norm: TensorSpec,
}

/// One decoder layer.
#[derive(Clone, Debug)]
pub struct LayerTensors {
    /// `self_attn.q_proj`.
    pub q: TensorSpec,
    /// `self_attn.k_proj`; absent on a KV-shared layer.
    pub k: Option<TensorSpec>,
    /// `self_attn.v_proj`; absent when V = K (`attention_k_eq_v` on a full
    /// layer) and on a KV-shared layer.
    pub v: Option<TensorSpec>,
    /// `self_attn.o_proj`.
    pub o: TensorSpec,
    /// `self_attn.q_norm`.
    pub q_norm: TensorSpec,
    /// `self_attn.k_norm`; absent on a KV-shared layer.
    pub k_norm: Option<TensorSpec>,
    /// `mlp.gate_proj`.
    pub gate: TensorSpec,
    /// `mlp.up_proj`.
    pub up: TensorSpec,
    /// `mlp.down_proj`.
    pub down: TensorSpec,
    /// `input_layernorm`.
    pub input_norm: TensorSpec,
    /// `post_attention_layernorm`.
    pub post_attn_norm: TensorSpec,
    /// `pre_feedforward_layernorm`.
    pub pre_ff_norm: TensorSpec,
    /// `post_feedforward_layernorm`.
    pub post_ff_norm: TensorSpec,
    /// `layer_scalar` `[1]`.
    pub layer_scalar: TensorSpec,
    /// The MoE branch, when `enable_moe_block`.
    pub moe: Option<MoeTensors>,
    /// The per-layer-input branch, when `hidden_size_per_layer_input > 0`.
    pub per_layer: Option<PerLayerTensors>,
}

impl LayerTensors {
    fn of(cfg: &ModelConfig, i: usize, spec: &LayerSpec) -> Self {
        use TensorKind::*;
        let (h, nh, inter) = (cfg.hidden_size, cfg.num_heads, spec.intermediate);
        // KV-shared layers have no k/v projections or k_norm (HF builds none
        // and ignores them in a checkpoint).
        let owns_kv = spec.kv_source.is_none();
        let (hd, nkv) = (spec.head_dim, spec.num_kv_heads);
        // Saturating: a config's sizes are checked against the checkpoint
        // only after this list is made, so an absurd product must not
        // overflow here; a saturated dimension then fails that check.
        let (q_rows, kv_rows) = (nh.saturating_mul(hd), nkv.saturating_mul(hd));
        let p = format!("layers.{i}.");
        let a = format!("{p}self_attn.");
        let t = |name: String, shape: Vec<usize>, kind| TensorSpec::new(name, shape, kind);
        LayerTensors {
            q: t(format!("{a}q_proj.weight"), vec![q_rows, h], Linear),
            k: owns_kv.then(|| t(format!("{a}k_proj.weight"), vec![kv_rows, h], Linear)),
            v: (owns_kv && !spec.k_eq_v).then(|| t(format!("{a}v_proj.weight"), vec![kv_rows, h], Linear)),
            o: t(format!("{a}o_proj.weight"), vec![h, q_rows], Linear),
            q_norm: t(format!("{a}q_norm.weight"), vec![hd], Vector),
            k_norm: owns_kv.then(|| t(format!("{a}k_norm.weight"), vec![hd], Vector)),
            gate: t(format!("{p}mlp.gate_proj.weight"), vec![inter, h], Linear),
            up: t(format!("{p}mlp.up_proj.weight"), vec![inter, h], Linear),
            down: t(format!("{p}mlp.down_proj.weight"), vec![h, inter], Linear),
            input_norm: t(format!("{p}input_layernorm.weight"), vec![h], Vector),
            post_attn_norm: t(format!("{p}post_attention_layernorm.weight"), vec![h], Vector),
            pre_ff_norm: t(format!("{p}pre_feedforward_layernorm.weight"), vec![h], Vector),
            post_ff_norm: t(format!("{p}post_feedforward_layernorm.weight"), vec![h], Vector),
            layer_scalar: t(format!("{p}layer_scalar"), vec![1], LayerScalar),
            moe: cfg.moe.map(|m| MoeTensors::of(&p, h, m)),
            per_layer: cfg.per_layer_input.map(|pl| PerLayerTensors {
                gate: t(format!("{p}per_layer_input_gate.weight"), vec![pl.hidden, h], Linear),
                projection: t(format!("{p}per_layer_projection.weight"), vec![h, pl.hidden], Linear),
                post_norm: t(format!("{p}post_per_layer_input_norm.weight"), vec![h], Vector),
            }),
        }
    }

    /// Every tensor of the layer, in checkpoint-writing order.
    pub fn all(&self) -> Vec<&TensorSpec> {
        let mut v = vec![&self.q];
        v.extend(&self.k);
        v.extend(&self.v);
        v.extend([&self.o, &self.q_norm]);
        v.extend(&self.k_norm);
        v.extend([&self.gate, &self.up, &self.down]);
        v.extend([&self.input_norm, &self.post_attn_norm, &self.pre_ff_norm, &self.post_ff_norm, &self.layer_scalar]);
        if let Some(m) = &self.moe {
            v.extend([&m.router_proj, &m.router_scale, &m.per_expert_scale, &m.gate_up, &m.down]);
            v.extend([&m.pre_ff_norm_2, &m.post_ff_norm_1, &m.post_ff_norm_2]);
        }
        if let Some(pl) = &self.per_layer {
            v.extend([&pl.gate, &pl.projection, &pl.post_norm]);
        }
        v
    }
}

impl MoeTensors {
    fn of(p: &str, h: usize, m: MoeConfig) -> Self {
        use TensorKind::*;
        let (e, im) = (m.num_experts, m.intermediate);
        let t = |name: String, shape: Vec<usize>, kind| TensorSpec::new(name, shape, kind);
        MoeTensors {
            router_proj: t(format!("{p}router.proj.weight"), vec![e, h], Linear),
            router_scale: t(format!("{p}router.scale"), vec![h], Vector),
            per_expert_scale: t(format!("{p}router.per_expert_scale"), vec![e], F32),
            gate_up: t(format!("{p}experts.gate_up_proj"), vec![e, im.saturating_mul(2), h], Experts),
            down: t(format!("{p}experts.down_proj"), vec![e, h, im], Experts),
            pre_ff_norm_2: t(format!("{p}pre_feedforward_layernorm_2.weight"), vec![h], Vector),
            post_ff_norm_1: t(format!("{p}post_feedforward_layernorm_1.weight"), vec![h], Vector),
            post_ff_norm_2: t(format!("{p}post_feedforward_layernorm_2.weight"), vec![h], Vector),
        }
    }
}

/// Every tensor a config calls for.
#[derive(Clone, Debug)]
pub struct ModelTensors {
    /// `embed_tokens.weight` `[vocab, hidden]`, tied with the LM head.
    pub embed: TensorSpec,
    /// The final `norm.weight`.
    pub final_norm: TensorSpec,
    /// Decoder layers.
    pub layers: Vec<LayerTensors>,
    /// The per-layer-input table, projection and norm, when the config has them.
    pub per_layer_input: Option<PerLayerInputTensors>,
}

impl ModelTensors {
    /// The tensor list of `cfg`.
    pub fn of(cfg: &ModelConfig) -> Self {
        let h = cfg.hidden_size;
        ModelTensors {
            embed: TensorSpec::new("embed_tokens.weight".into(), vec![cfg.vocab_size, h], TensorKind::Embedding),
            final_norm: TensorSpec::new("norm.weight".into(), vec![h], TensorKind::Vector),
            layers: cfg.layers.iter().enumerate().map(|(i, l)| LayerTensors::of(cfg, i, l)).collect(),
            per_layer_input: cfg.per_layer_input.map(|pl| {
                let width = cfg.num_layers().saturating_mul(pl.hidden);
                PerLayerInputTensors {
                    table: TensorSpec::new("embed_tokens_per_layer.weight".into(), vec![pl.vocab, width], TensorKind::HostRows),
                    model_projection: TensorSpec::new("per_layer_model_projection.weight".into(), vec![width, h], TensorKind::Linear),
                    projection_norm: TensorSpec::new("per_layer_projection_norm.weight".into(), vec![pl.hidden], TensorKind::Vector),
                }
            }),
        }
    }

    /// Every tensor, in checkpoint-writing order: the embedding, the
    /// per-layer-input tensors, each layer's, the final norm.
    pub fn all(&self) -> Vec<&TensorSpec> {
        let mut v = vec![&self.embed];
        if let Some(p) = &self.per_layer_input {
            v.extend([&p.table, &p.model_projection, &p.projection_norm]);
        }
        v.extend(self.layers.iter().flat_map(LayerTensors::all));
        v.push(&self.final_norm);
        v
    }

    /// Elements of every tensor, in u128; `None` only past u128.
    pub fn elements(&self) -> Option<u128> {
        self.all().iter().try_fold(0u128, |acc, t| acc.checked_add(t.elements()?))
    }
}
