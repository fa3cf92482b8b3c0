//! The bandwidth bound of a decode step: the bytes one step must read from
//! memory, and the tokens per second a copy bandwidth allows at that traffic.
//! Written once; the report, `--json` and `scripts/decode_tables.py` all use
//! the figures computed here.
//!
//! One decode step of `batch` sequences reads:
//! - every weight except the routed experts once, whatever the batch: the
//!   attention and dense MLP matrices, the norms, the router, and the whole
//!   tied table (the LM head scores every vocabulary row; the embedding
//!   gather's `batch` rows are negligible and not counted);
//! - in each MoE layer, only the experts the step's tokens select, each once
//!   (the grouped expert GEMM reads an expert's weights only when a token is
//!   routed to it). At batch 1 that is exactly `top_k` distinct experts. At
//!   batch b it is counted as its expectation under uniform routing, each
//!   token choosing `top_k` distinct experts of `E` independently:
//!   `E · (1 − (1 − top_k/E)^b)`, 82.4 of 128 at top-8 and b = 16. The
//!   routing a step really takes is not read back (that needs a hook in the
//!   model graph), so the batch > 1 bound is an expectation, not a count;
//!   random router weights on random prompts route close to uniformly;
//! - the KV cache: K and V of every layer over each sequence's context
//!   (sliding layers: at most the window), averaged over the timed steps.
//!
//! The bound in tokens per second is `batch · bandwidth / bytes per step`,
//! with the copy bandwidth measured in the same run (read + write bytes per
//! second of a device copy).
use std::ops::Range;
use switchyard_model::config::{LayerKind, ModelConfig};
use switchyard_model::quant::Quant;
use switchyard_model::tensors::{ModelTensors, TensorKind};

/// Bytes one decode step reads, in parts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepBytes {
    /// Every weight but the routed experts, once.
    pub weights: usize,
    /// The bytes of one expert of one layer (its gate_up and down slices).
    pub expert: usize,
    /// Layers with an MoE block.
    pub moe_layers: usize,
    /// Distinct experts read per MoE layer (exact at batch 1, the
    /// expectation under uniform routing above).
    pub experts_per_layer: f64,
    /// KV-cache bytes, all sequences, averaged over the timed steps.
    pub kv: f64,
}

impl StepBytes {
    /// Bytes of the experts read, all layers.
    pub fn experts(&self) -> f64 {
        self.moe_layers as f64 * self.experts_per_layer * self.expert as f64
    }

    /// Everything the step reads.
    pub fn total(&self) -> f64 {
        self.weights as f64 + self.experts() + self.kv
    }

    /// Tokens per second `bandwidth` (bytes per second) allows when each
    /// step yields `batch` tokens.
    pub fn bound_tokens_per_s(&self, batch: usize, bandwidth: f64) -> f64 {
        batch as f64 * bandwidth / self.total()
    }
}

/// Distinct experts `batch` tokens select when each picks `top_k` distinct
/// experts of `experts` uniformly and independently: an expert is missed by
/// one token with probability `1 − top_k/experts`, by all of them with that
/// to the power `batch`. Exactly `top_k` at batch 1.
pub fn expected_distinct_experts(experts: usize, top_k: usize, batch: usize) -> f64 {
    match batch {
        0 => return 0.0,
        1 => return top_k.min(experts) as f64,
        _ if experts == 0 => return 0.0,
        _ => {}
    }
    let e = experts as f64;
    e * (1.0 - (1.0 - top_k as f64 / e).powi(batch.min(i32::MAX as usize) as i32))
}

/// KV-cache bytes the attention of one decode step reads for one sequence
/// whose new token sits at position `pos` (K and V, each layer's window).
pub fn kv_bytes(cfg: &ModelConfig, pos: usize) -> usize {
    cfg.layers
        .iter()
        .map(|l| {
            let ctx = if l.kind == LayerKind::Sliding { (pos + 1).min(l.window) } else { pos + 1 };
            2 * ctx * l.num_kv_heads * l.head_dim * 2
        })
        .sum()
}

/// What a decode step of `batch` sequences reads, the weights in `quant`'s
/// storage ([`Quant::device_bytes`]), each sequence's new token
/// at each position of `positions` in turn (the timed steps; the KV part is
/// their mean).
pub fn step_bytes(cfg: &ModelConfig, quant: Quant, batch: usize, positions: Range<usize>) -> StepBytes {
    let tensors = ModelTensors::of(cfg);
    let bytes = |t: &switchyard_model::tensors::TensorSpec| quant.device_bytes(t);
    // The per-layer input table stays on the host; a step uploads only its rows.
    let weights = tensors.all().into_iter().filter(|t| !matches!(t.kind, TensorKind::Experts | TensorKind::HostRows)).map(bytes).sum();
    // Every MoE layer has the same experts; one expert is 1/E of each stacked tensor.
    let moe_layers = tensors.layers.iter().filter(|l| l.moe.is_some()).count();
    let expert =
        tensors.layers.iter().find_map(|l| l.moe.as_ref()).map_or(0, |m| (bytes(&m.gate_up) + bytes(&m.down)) / m.gate_up.shape[0]);
    let experts_per_layer = cfg.moe.map_or(0.0, |m| expected_distinct_experts(m.num_experts, m.top_k, batch));
    let steps = positions.len().max(1);
    let kv = batch as f64 * positions.map(|p| kv_bytes(cfg, p) as f64).sum::<f64>() / steps as f64;
    StepBytes { weights, expert, moe_layers, experts_per_layer, kv }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_model::{MoeShape, Shape};

    /// Three layers (two sliding with window 4, then a full one), width 16,
    /// 2 query heads, sliding head_dim 8 with 1 KV head, full head_dim 16
    /// with 1 KV head and V = K, vocab 64, dense intermediate 32, and an MoE
    /// block of 4 experts, top-2, expert intermediate 8.
    fn small() -> ModelConfig {
        let shape = Shape {
            name: "small".into(),
            layers: 3,
            hidden: 16,
            intermediate: 32,
            heads: 2,
            kv_heads: 1,
            head_dim: 8,
            global_head_dim: 16,
            global_kv_heads: 1,
            window: 4,
            vocab: 64,
            moe: Some(MoeShape { experts: 4, top_k: 2, intermediate: 8 }),
        };
        shape.config().unwrap()
    }

    #[test]
    fn step_bytes_match_a_hand_count() {
        let cfg = small();
        // By hand, in bf16 elements unless said:
        //   table 64·16 = 1024, final norm 16.
        //   sliding layer: q 16·16 = 256, k 8·16 = 128, v 128, o 16·16 = 256,
        //     q_norm + k_norm 16, gate + up + down 3·32·16 = 1536, four norms 64,
        //     router proj 4·16 = 64, router scale 16, three MoE norms 48
        //     = 2512 elements = 5024 bytes, + layer_scalar (f32) 4 and
        //     per_expert_scale (4 f32) 16 bytes = 5044 bytes.
        //   full layer (V = K, head_dim 16): q 32·16 = 512, k 16·16 = 256,
        //     o 16·32 = 512, norms 32, MLP 1536, four norms 64, MoE non-expert 128
        //     = 3040 elements = 6080 bytes, + 20 = 6100 bytes.
        //   weights = 2·(1024 + 16) + 2·5044 + 6100 = 18268.
        //   one expert: gate_up 2·8·16 = 256 + down 16·8 = 128 elements = 768 bytes.
        let b1 = step_bytes(&cfg, Quant::None, 1, 5..6);
        assert_eq!((b1.weights, b1.expert, b1.moe_layers), (18268, 768, 3));
        // batch 1: exactly top-2 experts in each of 3 layers.
        assert_eq!(b1.experts_per_layer, 2.0);
        assert_eq!(b1.experts(), 3.0 * 2.0 * 768.0);
        // KV at position 5: sliding ctx min(6, 4) = 4: K+V 2·4·1·8·2 = 128 bytes
        // per sliding layer; full ctx 6: 2·6·1·16·2 = 384. 2·128 + 384 = 640.
        assert_eq!(b1.kv, 640.0);
        assert_eq!(b1.total(), 18268.0 + 4608.0 + 640.0);
        // batch 3: 4·(1 − (1 − 2/4)^3) = 3.5 experts per layer. KV of 3
        // sequences at positions 2 and 3 (ctx 3, then 4, inside the window):
        // per sequence 2·96 + 192 = 384, then 2·128 + 256 = 512; the mean.
        let b3 = step_bytes(&cfg, Quant::None, 3, 2..4);
        assert_eq!(b3.experts_per_layer, 3.5);
        assert_eq!(b3.experts(), 3.0 * 3.5 * 768.0);
        let (p2, p3) = (2.0 * 96.0 + 192.0, 2.0 * 128.0 + 256.0);
        assert_eq!(b3.kv, 3.0 * (p2 + p3) / 2.0);
        // tokens/s: batch · bandwidth / bytes.
        let bw = 1e9;
        assert!((b3.bound_tokens_per_s(3, bw) - 3.0 * bw / (18268.0 + 8064.0 + 3.0 * 448.0)).abs() < 1e-6);
    }

    #[test]
    fn expected_experts_at_the_26b_a4b_shape() {
        assert_eq!(expected_distinct_experts(128, 8, 1), 8.0);
        let e16 = expected_distinct_experts(128, 8, 16);
        // 128 · (1 − (15/16)^16) = 82.42...
        assert!((e16 - 128.0 * (1.0 - (15.0f64 / 16.0).powi(16))).abs() < 1e-9 && (82.4..82.5).contains(&e16), "{e16}");
        // Never more than all of them.
        assert!(expected_distinct_experts(128, 8, 1000) <= 128.0);
        assert_eq!(expected_distinct_experts(4, 4, 7), 4.0);
        // A dense model reads no experts.
        let dense = Shape::gemma4(2, 640).config().unwrap();
        let b = step_bytes(&dense, Quant::None, 16, 10..12);
        assert_eq!((b.expert, b.moe_layers, b.experts()), (0, 0, 0.0));
    }

    #[test]
    fn the_26b_a4b_shape_has_the_published_parameter_counts() {
        // Google gives Gemma 4 26B-A4B 25.2 B parameters, 3.8 B active per
        // token: the non-expert weights and 8 experts in each of 30 layers.
        let cfg = Shape::gemma4_26b_a4b().config().unwrap();
        let b = step_bytes(&cfg, Quant::None, 1, 0..1);
        let active = (b.weights as f64 + b.experts()) / 2.0;
        let total = (b.weights + b.moe_layers * 128 * b.expert) as f64 / 2.0;
        assert!((3.78e9..3.86e9).contains(&active), "{active}");
        assert!((25.1e9..25.3e9).contains(&total), "{total}");
        // One expert: gate_up 2·704·2816 and down 2816·704 bf16 values.
        assert_eq!(b.expert, 3 * 704 * 2816 * 2);
    }

    #[test]
    fn the_31b_shape_reads_its_hand_counted_bytes() {
        let cfg = Shape::gemma4_31b().config().unwrap();
        // By hand, in bf16 elements unless said (h = 5376, 32 query heads):
        //   table 262144·h, final norm h.
        //   sliding layer (head_dim 256, 16 KV heads): q 8192·h, k and v
        //     4096·h each, o h·8192; q_norm + k_norm 2·256; gate + up + down
        //     3·21504·h; four norms 4·h; + layer_scalar (f32) 4 bytes.
        //   full layer (head_dim 512, 4 KV heads, V = K): q 16384·h, k 2048·h,
        //     o h·16384; q_norm + k_norm 2·512; the same MLP and norms.
        let h = 5376usize;
        let mlp = 3 * 21504 * h + 4 * h;
        let sliding = 2 * ((8192 + 2 * 4096 + 8192) * h + 2 * 256 + mlp) + 4;
        let full = 2 * ((16384 + 2048 + 16384) * h + 2 * 512 + mlp) + 4;
        let weights = 2 * (262_144 * h + h) + 50 * sliding + 10 * full;
        assert_eq!(weights, 61_394_690_800);
        // 30.7 B parameters (Google: "31B"), near enough all of them bf16.
        assert!((30.6e9..30.8e9).contains(&(weights as f64 / 2.0)));
        let b1 = step_bytes(&cfg, Quant::None, 1, 127..128);
        assert_eq!((b1.weights, b1.expert, b1.moe_layers, b1.experts()), (weights, 0, 0, 0.0));
        // KV at position 127 (ctx 128, inside the 1024 window): K + V per
        // sliding layer 2·128·16·256·2 bytes, per full layer 2·128·4·512·2.
        let kv: usize = 50 * (2 * 128 * 16 * 256 * 2) + 10 * (2 * 128 * 4 * 512 * 2);
        assert_eq!(b1.kv, kv as f64);
        // Batch 16 past the window: sliding layers read 1024 positions.
        let b16 = step_bytes(&cfg, Quant::None, 16, 2000..2001);
        let kv16: usize = 16 * (50 * (2 * 1024 * 16 * 256 * 2) + 10 * (2 * 2001 * 4 * 512 * 2));
        assert_eq!((b16.weights, b16.kv), (weights, kv16 as f64));
        // --tp 2: the ranks' shards hold the split weights once and the
        // replicated norms (and scalars) on both; every weight is counted.
        let (mut split, replicated) = (0, 2 * (h + 60 * (4 * h)) + 60 * 4 + 2 * (50 * 2 * 256 + 10 * 2 * 512));
        for rank in 0..2 {
            let plan = switchyard_model::tp::TpPlan::new(&cfg, rank, 2).unwrap();
            let local = plan.local_config(&cfg);
            split += step_bytes(&local, Quant::None, 1, 127..128).weights;
        }
        assert_eq!(split, weights + replicated);
    }

    #[test]
    fn weights_plus_all_experts_is_every_tensor() {
        // At a batch large enough to select every expert the step reads the
        // whole model, which is what the tensor list sizes.
        let cfg = small();
        let all: usize =
            ModelTensors::of(&cfg).all().iter().map(|t| t.shape.iter().product::<usize>() * t.kind.device_bytes_per_element()).sum();
        let b = step_bytes(&cfg, Quant::None, 1, 0..1);
        assert_eq!(b.weights + b.moe_layers * 4 * b.expert, all);
    }
}
