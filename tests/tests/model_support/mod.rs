//! Helpers shared by the model tests: scratch directories for synthetic
//! checkpoints, loading and greedy runs, and logit comparisons.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::sync::Arc;
use switchyard_cli::synthetic::{Spec, Synthetic};
use switchyard_core::Backend;
use switchyard_model::checkpoint::Checkpoint;
use switchyard_model::generate::{generate, Generation, Request};
use switchyard_model::graph::Model;
use switchyard_model::quant::Quant;

/// The prompt the tests use (as the fixtures do).
pub const PROMPT: [u32; 6] = [2, 17, 99, 5, 250, 31];

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("switchyard-model-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `s` to a fresh temp dir.
pub fn write(s: &Synthetic, tag: &str) -> TempDir {
    let d = TempDir::new(tag);
    s.write(d.path()).expect("write synthetic checkpoint");
    d
}

/// The two synthetic variants every end-to-end test runs.
pub fn specs() -> [(&'static str, Spec); 2] {
    [("dense", Spec::tiny_dense()), ("moe", Spec::tiny_moe())]
}

/// Loads `dir` on `be` and generates `n` tokens greedily (EOS ignored), with logits.
pub fn run_dir(dir: &Path, be: &Arc<dyn Backend>, quant: Quant, n: usize) -> Generation {
    let ck = Checkpoint::open(dir).expect("open checkpoint");
    let model = Model::load(&ck, be.clone(), quant).expect("load model");
    generate(&model, &Request { prompt: PROMPT.to_vec(), max_new_tokens: n, want_logits: true, stop_at_eos: false }).expect("generate")
}

/// Cosine similarity and max |a - b| / max |b|.
pub fn similarity(a: &[f32], b: &[f32]) -> (f64, f64) {
    assert_eq!(a.len(), b.len(), "logit vectors differ in length");
    let (mut dot, mut na, mut nb, mut maxd, mut maxb) = (0f64, 0f64, 0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (x as f64, y as f64);
        dot += x * y;
        na += x * x;
        nb += y * y;
        maxd = maxd.max((x - y).abs());
        maxb = maxb.max(y.abs());
    }
    (dot / (na.sqrt() * nb.sqrt()), maxd / maxb)
}

/// Asserts every step of `a` is within (cosine, relative max error) of `b`,
/// printing the worst step.
#[track_caller]
pub fn assert_close(a: &Generation, b: &Generation, min_cos: f64, max_rel: f64, what: &str) {
    assert_eq!(a.logits.len(), b.logits.len(), "{what}: step counts differ");
    let (mut worst_cos, mut worst_rel) = (1f64, 0f64);
    for (s, (x, y)) in a.logits.iter().zip(&b.logits).enumerate() {
        let (c, r) = similarity(x, y);
        assert!(x.iter().all(|v| v.is_finite()), "{what}: step {s} has non-finite logits");
        worst_cos = worst_cos.min(c);
        worst_rel = worst_rel.max(r);
        assert!(c >= min_cos && r <= max_rel, "{what}: step {s}: cosine {c:.6} (min {min_cos}), rel err {r:.5} (max {max_rel})");
    }
    println!("{what}: min cosine {worst_cos:.6}, max rel err {worst_rel:.5}");
}
