//! RoPE cos/sin tables, one per (layer type, head_dim), in the
//! `[max_pos][hd/2][2]` f32 layout `qkv_prep` reads.
//!
//! Computed the way HF's f32 model does (inverse frequencies
//! `1 / base^(2i/hd)` in f32, divided by `factor`; angle = f32 product of
//! position and frequency; then cos/sin), rather than with
//! `switchyard_kernels::rope_kv::rope_table`, which works in f64 and has no
//! `factor`: at a few hundred positions the f32 angle rounding is the larger
//! term, and matching it keeps the oracle comparison about the kernels.
use crate::config::{LayerKind, ModelConfig, Rope};
use crate::error::{Error, Result};
use std::sync::Arc;
use switchyard_core::codec::bytes;
use switchyard_core::{Backend, DeviceBuffer, Region};

/// The table for one head size and RoPE setting, positions `0..max_pos`:
/// sized by the request and reserved fallibly, and checked finite (the
/// config parser refuses settings whose angles overflow; this is the check
/// for a [`Rope`] built by hand).
pub fn table(rope: &Rope, hd: usize, max_pos: usize) -> Result<Vec<f32>> {
    let half = hd / 2;
    let rotated = rope.rotated_pairs(hd).min(half);
    let inv: Vec<f32> = (0..half)
        .map(|i| {
            if i < rotated {
                let f = 1.0f32 / (rope.theta as f32).powf((2 * i) as f32 / hd as f32);
                f / rope.factor as f32
            } else {
                0.0 // "proportional": the rest do not rotate (cos 1, sin 0)
            }
        })
        .collect();
    let len = max_pos.checked_mul(half * 2).ok_or_else(|| Error::Request(format!("a RoPE table of {max_pos} positions overflows")))?;
    let mut t = Vec::new();
    t.try_reserve_exact(len)
        .map_err(|e| Error::Request(format!("cannot allocate a RoPE table of {max_pos} positions x head_dim {hd}: {e}")))?;
    for p in 0..max_pos {
        for &f in &inv {
            let a = (p as f32 * f) as f64;
            t.extend([a.cos() as f32, a.sin() as f32]);
        }
    }
    if let Some(i) = t.iter().position(|v| !v.is_finite()) {
        return Err(Error::Numeric(format!(
            "RoPE (theta {}, factor {}) is not finite at position {} of head_dim {hd}",
            rope.theta,
            rope.factor,
            i / (half * 2).max(1)
        )));
    }
    Ok(t)
}

/// The device tables a model needs for positions `0..max_pos`.
pub struct RopeTables {
    tables: Vec<(LayerKind, usize, DeviceBuffer)>,
    /// Positions covered.
    pub max_pos: usize,
}

impl RopeTables {
    /// Builds and uploads one table per distinct (layer type, head_dim).
    pub fn new(be: &Arc<dyn Backend>, cfg: &ModelConfig, max_pos: usize) -> Result<Self> {
        if max_pos > cfg.max_position_embeddings {
            return Err(Error::Request(format!(
                "RoPE tables for {max_pos} positions exceed the model's context of {} (max_position_embeddings)",
                cfg.max_position_embeddings
            )));
        }
        let mut tables: Vec<(LayerKind, usize, DeviceBuffer)> = Vec::new();
        for l in &cfg.layers {
            if !tables.iter().any(|(k, hd, _)| *k == l.kind && *hd == l.head_dim) {
                let t = table(&l.rope, l.head_dim, max_pos)?;
                tables.push((l.kind, l.head_dim, DeviceBuffer::from_bytes(be, &bytes::f32_bytes(&t))?));
            }
        }
        Ok(RopeTables { tables, max_pos })
    }

    /// The table for a layer of `kind` with head size `hd`.
    pub fn get(&self, kind: LayerKind, hd: usize) -> Option<Region> {
        self.tables.iter().find(|(k, h, _)| *k == kind && *h == hd).map(|t| t.2.region())
    }
}
