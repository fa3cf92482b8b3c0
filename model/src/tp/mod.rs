//! Tensor parallelism: how a Gemma 4 config splits over `world` ranks
//! ([`TpPlan`]), the shapes one rank's shard has ([`TpPlan::local_config`])
//! and which slice of each checkpoint tensor it reads
//! ([`TpPlan::local_tensors`]); [`group`] runs the ranks as threads.
//!
//! The split (Megatron-style; ARCHITECTURE.md, "Tensor parallelism"):
//!
//! - attention: query heads split evenly; KV heads split evenly when there
//!   are at least as many as ranks, else each rank holds the one KV head its
//!   query heads read (replicated on `world / nkv` ranks); `o_proj` split by
//!   its input columns, so each rank's output is a partial sum;
//! - dense MLP: the intermediate dimension split (rows of gate and up,
//!   columns of down);
//! - MoE: the experts partitioned (expert parallel); the router replicated;
//! - the tied embedding and LM head: split by vocabulary;
//! - everything else (norms, router, the per-layer-input branch of E2B /
//!   E4B) replicated.
use crate::checkpoint::Slice;
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::tensors::{ModelTensors, TensorSpec};
use std::collections::HashMap;
use std::ops::Range;

pub mod group;

/// One decoder layer's share on a rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerShard {
    /// Query heads this rank computes.
    pub q_heads: Range<usize>,
    /// KV heads it holds (one replicated head when the layer has fewer KV
    /// heads than there are ranks).
    pub kv_heads: Range<usize>,
    /// Its columns of the dense MLP's intermediate dimension.
    pub intermediate: Range<usize>,
}

/// How the model splits over the ranks, seen from rank `rank`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TpPlan {
    /// This rank.
    pub rank: usize,
    /// Ranks in the group (`--tp`).
    pub world: usize,
    /// The token ids whose embedding and LM-head rows this rank holds.
    pub vocab: Range<usize>,
    /// The experts this rank holds (MoE models).
    pub experts: Option<Range<usize>>,
    /// Per decoder layer.
    pub layers: Vec<LayerShard>,
}

/// Where a rank's tensor comes from in the checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceSpec {
    /// The tensor's shape in the checkpoint.
    pub full: Vec<usize>,
    /// The part this rank reads.
    pub slice: Slice,
    /// Zero rows appended after the slice (the embedding's row for tokens
    /// another rank holds).
    pub zero_rows: usize,
}

/// The `rank`-th of `world` equal parts of `0..n` (`n` divisible by `world`).
fn part(n: usize, world: usize, rank: usize) -> Range<usize> {
    let per = n / world;
    rank * per..(rank + 1) * per
}

impl TpPlan {
    /// The plan of rank `rank` of `world`, or an error naming `--tp` and the
    /// config value that does not split.
    pub fn new(cfg: &ModelConfig, rank: usize, world: usize) -> Result<Self> {
        let bad = |what: String| Error::Request(format!("--tp {world}: {what}"));
        if world == 0 {
            return Err(bad("a tensor-parallel group needs at least one rank".into()));
        }
        if rank >= world {
            return Err(bad(format!("rank {rank} is not one of the {world} ranks")));
        }
        let nh = cfg.num_heads;
        if !nh.is_multiple_of(world) {
            return Err(bad(format!(
                "num_attention_heads = {nh} is not a multiple of {world} (the query heads are split evenly across the ranks)"
            )));
        }
        if !cfg.vocab_size.is_multiple_of(world) {
            return Err(bad(format!(
                "vocab_size = {} is not a multiple of {world} (the tied embedding and LM head are split by vocabulary)",
                cfg.vocab_size
            )));
        }
        let experts = match cfg.moe {
            Some(m) if !m.num_experts.is_multiple_of(world) => {
                return Err(bad(format!(
                    "num_experts = {} is not a multiple of {world} (the experts are partitioned across the ranks)",
                    m.num_experts
                )))
            }
            Some(m) => Some(part(m.num_experts, world, rank)),
            None => None,
        };
        let mut layers = Vec::with_capacity(cfg.layers.len());
        for (i, l) in cfg.layers.iter().enumerate() {
            let nkv = l.num_kv_heads;
            let kv_heads = if nkv.is_multiple_of(world) {
                part(nkv, world, rank)
            } else if nkv > 0 && world.is_multiple_of(nkv) {
                // Fewer KV heads than ranks: this rank's query heads all read
                // KV head rank·nkv/world (the group of nh/nkv query heads is a
                // whole number of ranks' nh/world).
                let h = rank * nkv / world;
                h..h + 1
            } else {
                return Err(bad(format!(
                    "layer {i} has {nkv} KV heads, neither a multiple nor a divisor of {world} (KV heads are split evenly, or each \
                     replicated on {world}/{nkv} ranks)"
                )));
            };
            if !l.intermediate.is_multiple_of(world) {
                return Err(bad(format!(
                    "layer {i}'s MLP intermediate size {} is not a multiple of {world} (intermediate_size is split across the ranks)",
                    l.intermediate
                )));
            }
            layers.push(LayerShard { q_heads: part(nh, world, rank), kv_heads, intermediate: part(l.intermediate, world, rank) });
        }
        Ok(TpPlan { rank, world, vocab: part(cfg.vocab_size, world, rank), experts, layers })
    }

    /// The config of this rank's shard: its query heads, KV heads, MLP
    /// width and vocabulary rows (the router still sees every expert).
    pub fn local_config(&self, cfg: &ModelConfig) -> ModelConfig {
        let mut local = cfg.clone();
        local.num_heads = cfg.num_heads / self.world;
        local.intermediate_size = cfg.intermediate_size / self.world;
        local.vocab_size = self.vocab.len();
        for (l, s) in local.layers.iter_mut().zip(&self.layers) {
            l.num_kv_heads = s.kv_heads.len();
            l.intermediate = s.intermediate.len();
        }
        local
    }

    /// The tensor list of this rank's shard (the checkpoint's names, the
    /// shard's shapes; the embedding has one zero row after this rank's
    /// vocabulary rows, which tokens of other ranks gather), and for each
    /// tensor that is split, the slice of the checkpoint tensor it reads.
    pub fn local_tensors(&self, cfg: &ModelConfig) -> (ModelTensors, HashMap<String, SliceSpec>) {
        let full = ModelTensors::of(cfg);
        let mut local = ModelTensors::of(&self.local_config(cfg));
        let mut slices = HashMap::new();
        let mut add = |t: &TensorSpec, slice: Slice, zero_rows: usize| {
            slices.insert(t.name.clone(), SliceSpec { full: t.shape.clone(), slice, zero_rows });
        };
        add(&full.embed, Slice::Lead(self.vocab.clone()), 1);
        local.embed.shape[0] += 1;
        for (i, (f, l)) in full.layers.iter().zip(local.layers.iter_mut()).enumerate() {
            let (s, hd) = (&self.layers[i], cfg.layers[i].head_dim);
            let heads = |r: &Range<usize>| r.start * hd..r.end * hd;
            add(&f.q, Slice::Lead(heads(&s.q_heads)), 0);
            for kv in [&f.k, &f.v].into_iter().flatten() {
                add(kv, Slice::Lead(heads(&s.kv_heads)), 0);
            }
            add(&f.o, Slice::Cols(heads(&s.q_heads)), 0);
            add(&f.gate, Slice::Lead(s.intermediate.clone()), 0);
            add(&f.up, Slice::Lead(s.intermediate.clone()), 0);
            add(&f.down, Slice::Cols(s.intermediate.clone()), 0);
            if let (Some(fm), Some(lm), Some(e)) = (&f.moe, &mut l.moe, &self.experts) {
                add(&fm.gate_up, Slice::Lead(e.clone()), 0);
                add(&fm.down, Slice::Lead(e.clone()), 0);
                lm.gate_up.shape[0] = e.len();
                lm.down.shape[0] = e.len();
            }
        }
        (local, slices)
    }

    /// The row of this rank's embedding table that token `t` gathers: its
    /// own row when this rank holds `t`, else the zero row after them.
    pub fn local_token(&self, t: u32) -> i32 {
        let t = t as usize;
        let row = if self.vocab.contains(&t) { t - self.vocab.start } else { self.vocab.len() };
        row as i32
    }

    /// Global expert id → this rank's expert id: `x - first` for an expert
    /// this rank holds, else the count of local experts (outside
    /// `[0, e_local)`, so the routing kernels skip the pair). `None` on a
    /// model without experts.
    pub fn expert_map(&self, num_experts: usize) -> Option<Vec<i32>> {
        let e = self.experts.as_ref()?;
        Some((0..num_experts).map(|x| if e.contains(&x) { (x - e.start) as i32 } else { e.len() as i32 }).collect())
    }
}
