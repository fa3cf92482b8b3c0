//! Whole-model parity against HF transformers: the committed fixtures
//! (`tests/fixtures/{tiny-dense,tiny-moe,tiny-e2b,tiny-e4b,tiny-26b-a4b,tiny-31b}`: the
//! last four carry the flag sets of the released E2B, E4B, 26B-A4B and 31B; made by `scripts/make_fixtures.py`
//! with transformers 5.17, f32 eager, greedy) run through `generate` on every
//! backend, and each step's logits are compared with HF's.
//!
//! the whole-model rule (ARCHITECTURE.md, parity tolerances) is cosine >= 0.999 and max |ours - HF| <=
//! 2e-2 * max |HF| per step, and the greedy token equal to HF's at every step
//! whose HF top-2 margin exceeds 0.1. Both rules are asserted as written.
//!
//! How the fixtures are scaled matters, and was measured: an earlier set with
//! loud post-sublayer norms (weights 1.5 to 3.0) made every layer amplify
//! bf16 activation rounding to several percent of the logits (an independent
//! f64 pass with bf16 rounding at each kernel output failed the 2e-2 rule in
//! 24 of 24 jittered trials), while it reproduced HF exactly in f64. The
//! committed set (embedding std 0.4, post norms 0.6 to 1.4, a decisive router)
//! keeps the comparison meaningful: the cpu backend measures min cosine
//! 0.999956 (tiny-dense) and 0.999964 (tiny-moe) against HF. Its greedy tokens
//! repeat the last prompt token, so the per-step full-vocabulary logits, which
//! do change with the context, carry the comparison.
//!
//! The GPU backends are compared with the CPU reference on the same fixtures:
//! cosine >= 0.9999 and max relative error <= 1e-2. The per-kernel contracts
//! allow another summation order, so bit equality is measured and printed but
//! not required.
//!
//! Each test prints one summary line per fixture (run with `--nocapture` to
//! see them): the min cosine and max relative error against HF, and against
//! cpu for the other backends.
use std::path::PathBuf;
use std::sync::Arc;
use switchyard_core::{Backend, BackendKind};
use switchyard_model::checkpoint::Checkpoint;
use switchyard_model::generate::{generate, Generation, Request};
use switchyard_model::graph::{Model, Session};
use switchyard_model::quant::Quant;
use switchyard_model::serde_json::{self, Value};
use switchyard_tests::per_backend;

/// The fixtures, by directory name under `tests/fixtures`.
const FIXTURES: [&str; 6] = ["tiny-dense", "tiny-moe", "tiny-e2b", "tiny-e4b", "tiny-26b-a4b", "tiny-31b"];

/// ARCHITECTURE.md, "Parity tolerances", whole-model logits vs HF transformers:
/// measured and reported per step.
const DESIGN_MIN_COSINE: f64 = 0.999;
const DESIGN_MAX_REL: f64 = 2e-2;
/// The greedy-token rule's margin (asserted as ARCHITECTURE.md writes it).
const MARGIN: f64 = 0.1;
/// The asserted logit bound: the rule's.
const MIN_COSINE: f64 = DESIGN_MIN_COSINE;
const MAX_REL: f64 = DESIGN_MAX_REL;

/// GPU backends against the CPU reference on the same weights: the kernels
/// are each within 1 bf16 ulp (or NMSE ≤ 1e-6 where the K order differs), so
/// a whole-model gap past these is a kernel bug, not rounding.
const XB_MIN_COSINE: f64 = 0.9999;
const XB_MAX_REL: f64 = 1e-2;

/// What HF produced, from `expected.json`.
struct Expected {
    prompt: Vec<u32>,
    tokens: Vec<u32>,
    margins: Vec<f64>,
    logits: Vec<Vec<f32>>,
}

/// The repository root: `SWITCHYARD_SOURCE_ROOT` (a test binary carried
/// to another machine), else the one this crate was built in.
fn source_root() -> PathBuf {
    std::env::var_os("SWITCHYARD_SOURCE_ROOT").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."), PathBuf::from)
}

fn dir(name: &str) -> PathBuf {
    source_root().join("tests").join("fixtures").join(name)
}

fn ids(v: &Value, what: &str) -> Vec<u32> {
    v.as_array()
        .unwrap_or_else(|| panic!("expected.json: `{what}` is not a list"))
        .iter()
        .map(|x| {
            x.as_u64().and_then(|n| u32::try_from(n).ok()).unwrap_or_else(|| panic!("expected.json: `{what}` holds {x}, not a token id"))
        })
        .collect()
}

fn floats(v: &Value, what: &str) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("expected.json: `{what}` is not a list"))
        .iter()
        .map(|x| x.as_f64().unwrap_or_else(|| panic!("expected.json: `{what}` holds {x}, not a number")))
        .collect()
}

fn expected(name: &str) -> Expected {
    expected_at(&dir(name).join("expected.json"))
}

fn expected_at(path: &std::path::Path) -> Expected {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let logits: Vec<Vec<f32>> = v["logits"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: `logits` is not a list", path.display()))
        .iter()
        .enumerate()
        .map(|(s, row)| floats(row, &format!("logits[{s}]")).into_iter().map(|x| x as f32).collect())
        .collect();
    let e = Expected {
        prompt: ids(&v["prompt"], "prompt"),
        tokens: ids(&v["tokens"], "tokens"),
        margins: floats(&v["top2_margin"], "top2_margin"),
        logits,
    };
    assert!(
        !e.tokens.is_empty() && e.tokens.len() == e.margins.len() && e.tokens.len() == e.logits.len(),
        "{}: tokens, top2_margin and logits must have one entry per step",
        path.display()
    );
    e
}

/// Loads fixture `name` on `be` and generates as many tokens as HF did, EOS
/// ignored (HF ran with `eos_token_id=None`), keeping every step's logits.
fn run(name: &str, be: &Arc<dyn Backend>, exp: &Expected) -> Generation {
    run_ordered(name, be, exp, None)
}

/// [`run`] with the MoE layers' order forced ([`Model::dense_mlp_beside`]).
fn run_ordered(name: &str, be: &Arc<dyn Backend>, exp: &Expected, dense_mlp_beside: Option<bool>) -> Generation {
    let ck = Checkpoint::open(&dir(name)).unwrap_or_else(|e| panic!("{name}: opening the checkpoint: {e}"));
    let mut model = Model::load(&ck, be.clone(), Quant::None).unwrap_or_else(|e| panic!("{name}: loading on {}: {e}", be.name()));
    model.dense_mlp_beside = dense_mlp_beside;
    let req = Request { prompt: exp.prompt.clone(), max_new_tokens: exp.tokens.len(), want_logits: true, stop_at_eos: false };
    let g = generate(&model, &req).unwrap_or_else(|e| panic!("{name}: generating on {}: {e}", be.name()));
    assert_eq!(g.tokens.len(), exp.tokens.len(), "{name} on {}: EOS is ignored, so every step runs", be.name());
    assert_eq!(g.logits.len(), exp.tokens.len(), "{name} on {}: one logit row per step", be.name());
    g
}

/// One step's comparison of `a` (ours) with `b` (the reference).
struct StepDiff {
    cosine: f64,
    /// max |a − b|, where, and the two values there.
    max_abs: f64,
    at: usize,
    actual: f32,
    expected: f32,
    /// max |b|.
    ref_max: f64,
    bit_exact: bool,
}

impl StepDiff {
    fn rel(&self) -> f64 {
        self.max_abs / self.ref_max
    }
}

fn diff(a: &[f32], b: &[f32]) -> StepDiff {
    assert_eq!(a.len(), b.len(), "logit rows differ in length");
    let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
    let mut d = StepDiff { cosine: 0.0, max_abs: -1.0, at: 0, actual: 0.0, expected: 0.0, ref_max: 0.0, bit_exact: true };
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        let (xf, yf) = (x as f64, y as f64);
        dot += xf * yf;
        na += xf * xf;
        nb += yf * yf;
        d.ref_max = d.ref_max.max(yf.abs());
        // A NaN compares as the largest error, so it is the one reported.
        let e = if xf.is_nan() || yf.is_nan() { f64::INFINITY } else { (xf - yf).abs() };
        if e > d.max_abs {
            (d.max_abs, d.at, d.actual, d.expected) = (e, i, x, y);
        }
        d.bit_exact &= x.to_bits() == y.to_bits();
    }
    d.cosine = dot / (na.sqrt() * nb.sqrt());
    d
}

/// Lowest-index argmax, as the graph's argmax kernel and torch pick.
fn argmax(v: &[f32]) -> usize {
    v.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0
}

/// What [`check_steps`] measured over a run.
struct Summary {
    min_cos: f64,
    max_rel: f64,
    /// Every step bit-identical to the reference.
    exact: bool,
    /// Steps that meet the whole-model rule (ARCHITECTURE.md, parity tolerances) (cosine and relative error).
    design_ok: usize,
}

/// Holds every step of `g` to `min_cos` / `max_rel` against `reference`.
#[track_caller]
fn check_steps(what: &str, g: &[Vec<f32>], reference: &[Vec<f32>], min_cos: f64, max_rel: f64) -> Summary {
    let mut sum = Summary { min_cos: 1.0, max_rel: 0.0, exact: true, design_ok: 0 };
    for (s, (ours, theirs)) in g.iter().zip(reference).enumerate() {
        let d = diff(ours, theirs);
        let tol = max_rel * d.ref_max;
        assert!(
            d.cosine >= min_cos,
            "{what}: step {s}: cosine {:.6} < {min_cos} (largest difference at index {}: actual {}, expected {})",
            d.cosine,
            d.at,
            d.actual,
            d.expected
        );
        assert!(
            d.max_abs <= tol,
            "{what}: step {s}: index {}: actual {}, expected {}: |diff| {:.3e} > tolerance {:.3e} (= {max_rel} · max|ref| {:.4})",
            d.at,
            d.actual,
            d.expected,
            d.max_abs,
            tol,
            d.ref_max
        );
        sum.min_cos = sum.min_cos.min(d.cosine);
        sum.max_rel = sum.max_rel.max(d.rel());
        sum.exact &= d.bit_exact;
        sum.design_ok += usize::from(d.cosine >= DESIGN_MIN_COSINE && d.rel() <= DESIGN_MAX_REL);
    }
    sum
}

/// Asserts that `g` (greedy, with its logits) matches HF's expected run:
/// the same tokens (or a divergence at a near-tie, after which the
/// comparison stops) and every compared step's logits within the
/// whole-model tolerance; prints the figures.
fn check_against_hf(what: &str, g: &Generation, exp: &Expected) {
    for (s, l) in g.logits.iter().enumerate() {
        assert_eq!(l.len(), exp.logits[s].len(), "{what}: step {s}: vocab size differs from HF's");
        // The logits returned are the ones that chose the token.
        assert_eq!(g.tokens[s] as usize, argmax(l), "{what}: step {s}: token is not the argmax of its logits");
    }
    // Greedy tokens first: once a token differs, later steps see a
    // different context and their logits are not comparable.
    let mut compared = exp.tokens.len();
    for (s, (&ours, &theirs)) in g.tokens.iter().zip(&exp.tokens).enumerate() {
        if ours == theirs {
            continue;
        }
        let margin = exp.margins[s];
        assert!(
            margin <= MARGIN,
            "{what}: step {s}: greedy token {ours} (logit {}), HF chose {theirs} (logit {}) with top-2 margin {margin:.4} > {MARGIN}",
            g.logits[s][ours as usize],
            exp.logits[s][theirs as usize]
        );
        // A near-tie HF resolved the other way: allowed, and the
        // comparison stops after this step (the contexts diverge).
        println!("{what}: step {s}: token {ours} vs HF {theirs} at top-2 margin {margin:.4} <= {MARGIN}; comparing steps 0..={s}");
        compared = s + 1;
        break;
    }
    let sum = check_steps(what, &g.logits[..compared], &exp.logits[..compared], MIN_COSINE, MAX_REL);
    println!(
        "{what}: {compared}/{} steps compared, tokens {}; min cosine {:.6}, max rel err {:.4} (asserted: cosine >= {MIN_COSINE}, rel <= {MAX_REL}); \
         steps meeting the whole-model rule's cosine >= {DESIGN_MIN_COSINE} and rel <= {DESIGN_MAX_REL}: {}/{compared}",
        exp.tokens.len(),
        if compared == exp.tokens.len() && g.tokens == exp.tokens { "identical" } else { "diverge at a near-tie" },
        sum.min_cos,
        sum.max_rel,
        sum.design_ok,
    );
}

per_backend! {
    fn matches_hf_transformers(be) {
        for name in FIXTURES {
            let exp = expected(name);
            let g = run(name, &be, &exp);
            check_against_hf(&format!("{name} on {} vs HF", be.name()), &g, &exp);
        }
    }
}

per_backend! {
    /// Both orders of a MoE layer's single-row decode steps, whichever the
    /// backend picks by default: the dense MLP beside the routing and the
    /// experts (`Backend::enqueue_concurrent`), and in line before them.
    fn moe_layers_in_either_order_match_hf_transformers(be) {
        for name in ["tiny-moe", "tiny-26b-a4b"] {
            let exp = expected(name);
            for beside in [true, false] {
                let g = run_ordered(name, &be, &exp, Some(beside));
                let order = if beside { "beside" } else { "in line" };
                check_against_hf(&format!("{name} on {}, dense MLP {order}, vs HF", be.name()), &g, &exp);
            }
        }
    }
}

per_backend! {
    gpu fn matches_the_cpu_reference(be) {
        let cpu: Arc<dyn Backend> = switchyard_cpu_ref::cpu_backend();
        for name in FIXTURES {
            let exp = expected(name);
            let reference = run(name, &cpu, &exp);
            let g = run(name, &be, &exp);
            let what = format!("{name} on {} vs cpu", be.name());
            let sum = check_steps(&what, &g.logits, &reference.logits, XB_MIN_COSINE, XB_MAX_REL);
            assert_eq!(g.tokens, reference.tokens, "{what}: greedy tokens differ");
            println!(
                "{what}: min cosine {:.7}, max rel err {:.3e}, logits bit-exact: {} (asserted: cosine >= {XB_MIN_COSINE}, rel <= {XB_MAX_REL})",
                sum.min_cos,
                sum.max_rel,
                if sum.exact { "yes" } else { "no" }
            );
        }
    }
}

/// Sequences decoded together in the batched test (the batch `bench-model` times).
const BATCH: usize = 16;

/// The batched test's bounds on `be`, (min cosine, max relative error). On
/// cpu and wgpu a batched row runs the same arithmetic as the row alone
/// (bit-exact, or a few 1e-3 where a plan's split differs), so the
/// cross-backend bounds apply. CUDA's batched steps run the m = 16
/// tensor-core GEMVs, whose K order differs from the m = 1 kernels' (their
/// contract is the NMSE bound, not the bits), and the difference compounds
/// through the layers as the difference from HF does. On the H200 (max
/// relative error, min cosine over the 16 sequences): tiny-dense 1.755e-3 /
/// 0.9999927, tiny-moe 4.158e-3 / 0.9999776, tiny-e4b 1.246e-2 / 0.9999310,
/// tiny-e2b 1.771e-2 / 0.9998138 (deterministic, whatever the launch
/// features), e2b being also the fixture furthest from HF (0.017 / 0.999771).
/// Two such evaluations are held to the whole-model rule.
fn batched_bounds(be: &dyn Backend) -> (f64, f64) {
    if be.kind() == BackendKind::Cuda {
        (MIN_COSINE, MAX_REL)
    } else {
        (XB_MIN_COSINE, XB_MAX_REL)
    }
}

per_backend! {
    fn batched_decode_matches_single_sequences(be) {
        // 16 sequences with prompts of different lengths (so each row has its
        // own position and context length) decode together, one token each per
        // step; each must follow the run it makes alone. Sequence 0 has the
        // fixture's prompt, so the batched path is also tied to HF's tokens.
        for name in FIXTURES {
            let exp = expected(name);
            let ck = Checkpoint::open(&dir(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            let model = Model::load(&ck, be.clone(), Quant::None).unwrap_or_else(|e| panic!("{name}: loading on {}: {e}", be.name()));
            let vocab = model.cfg.vocab_size as u32;
            let steps = exp.tokens.len();
            let prompts: Vec<Vec<u32>> = (0..BATCH)
                .map(|b| if b == 0 { exp.prompt.clone() } else { (0..3 + b).map(|i| 2 + (b as u32 * 37 + i as u32 * 11) % (vocab - 2)).collect() })
                .collect();
            let longest = prompts.iter().map(Vec::len).max().unwrap_or(1);
            let mut s = Session::new(&model, BATCH, longest + steps, longest).unwrap_or_else(|e| panic!("{name}: session: {e}"));
            let mut batched: Vec<Generation> = Vec::with_capacity(BATCH);
            let mut next = Vec::with_capacity(BATCH);
            for (b, p) in prompts.iter().enumerate() {
                let row = s.prefill(b, p, 0, true).unwrap_or_else(|e| panic!("{name}: prefill {b}: {e}"));
                next.push(row.token);
                batched.push(Generation { tokens: vec![row.token], logits: vec![row.logits.unwrap_or_default()], stopped_at_eos: false, stopped_by_caller: false, timings: Default::default() });
            }
            for step in 1..steps {
                let positions: Vec<usize> = prompts.iter().map(|p| p.len() + step - 1).collect();
                let rows = s.decode(&next, &positions, true).unwrap_or_else(|e| panic!("{name}: batched decode step {step}: {e}"));
                assert_eq!(rows.len(), BATCH, "{name}: one output per sequence");
                next.clear();
                for (b, r) in rows.into_iter().enumerate() {
                    next.push(r.token);
                    batched[b].tokens.push(r.token);
                    batched[b].logits.push(r.logits.unwrap_or_default());
                }
            }
            let mut exact = true;
            let (mut min_cos, mut max_rel) = (1f64, 0f64);
            for (b, p) in prompts.iter().enumerate() {
                let req = Request { prompt: p.clone(), max_new_tokens: steps, want_logits: true, stop_at_eos: false };
                let alone = generate(&model, &req).unwrap_or_else(|e| panic!("{name}: sequence {b} alone: {e}"));
                let what = format!("{name} on {}: sequence {b} of {BATCH} batched vs alone", be.name());
                let (cos_bound, rel_bound) = batched_bounds(be.as_ref());
                let sum = check_steps(&what, &batched[b].logits, &alone.logits, cos_bound, rel_bound);
                assert_eq!(batched[b].tokens, alone.tokens, "{what}: greedy tokens differ");
                exact &= sum.exact;
                min_cos = min_cos.min(sum.min_cos);
                max_rel = max_rel.max(sum.max_rel);
            }
            assert_eq!(batched[0].tokens, exp.tokens, "{name} on {}: batched sequence 0 differs from HF's tokens", be.name());
            println!(
                "{name} on {}: {BATCH} sequences batched vs alone: min cosine {min_cos:.7}, max rel err {max_rel:.3e}, bit-exact: {}",
                be.name(),
                if exact { "yes" } else { "no" }
            );
        }
    }
}

fn default_model_matches_hf_transformers() {
    // The binary's built-in model (model/default, trained by
    // scripts/train_default_model.py) against HF's f32 eager greedy run of
    // its default prompt, recorded in model/default/expected.json at
    // training time: on the cpu backend, every step under the whole-model
    // rule (ARCHITECTURE.md: cosine and max abs against HF f32, or, where
    // HF's own bf16 run is further than that, no more than twice HF-bf16's
    // distance), and the greedy tokens identical at every step (the default run
    // prints their text, so a near-tie resolved the other way would show;
    // the smallest top-2 margin is printed). The embedded bytes are checked
    // to be the committed files, so the test and the binary see one model.
    let root = source_root().join("model").join("default");
    let config = std::fs::read_to_string(root.join("config.json")).expect("reading model/default/config.json");
    assert_eq!(switchyard_model::default_model::CONFIG, config, "the embedded config.json is not model/default's");
    let st = std::fs::read(root.join("model.safetensors")).expect("reading model/default/model.safetensors");
    assert!(switchyard_model::default_model::SAFETENSORS == st.as_slice(), "the embedded weights are not model/default's");
    let exp = expected_at(&root.join("expected.json"));
    let ck = switchyard_model::default_model::checkpoint().expect("opening the built-in model");
    let model = Model::load(&ck, switchyard_cpu_ref::cpu_backend(), Quant::None).expect("loading the built-in model");
    let req = Request { prompt: exp.prompt.clone(), max_new_tokens: exp.tokens.len(), want_logits: true, stop_at_eos: false };
    let g = generate(&model, &req).expect("generating with the built-in model");
    let what = "built-in model on cpu vs HF";
    // The rule's second arm needs HF's own bf16 distance, per step
    // (teacher-forced on the f32 tokens), which the training script records.
    let v: Value = serde_json::from_str(&std::fs::read_to_string(root.join("expected.json")).expect("expected.json")).expect("JSON");
    let bf_cos = floats(&v["hf_bf16_cosine"], "hf_bf16_cosine");
    let bf_max = floats(&v["hf_bf16_max_abs"], "hf_bf16_max_abs");
    assert!(bf_cos.len() == exp.tokens.len() && bf_max.len() == exp.tokens.len(), "expected.json: one HF-bf16 distance per step");
    let (mut min_cos, mut max_rel, mut second_arm) = (1f64, 0f64, 0);
    for (s, (ours, theirs)) in g.logits.iter().zip(&exp.logits).enumerate() {
        let d = diff(ours, theirs);
        let bound = DESIGN_MAX_REL * d.ref_max;
        let first = d.cosine >= DESIGN_MIN_COSINE && d.max_abs <= bound;
        // Where bf16 arithmetic alone (HF's) is further than the first arm
        // allows, ours may be up to twice as far as HF's bf16 run.
        let hf_bf16_outside = bf_cos[s] < DESIGN_MIN_COSINE || bf_max[s] > bound;
        let second = hf_bf16_outside && 1.0 - d.cosine <= 2.0 * (1.0 - bf_cos[s]) && d.max_abs <= 2.0 * bf_max[s];
        assert!(
            first || second,
            "{what}: step {s}: cosine {:.6}, max abs {:.4} at index {} (ours {}, HF {}); the rule: cosine >= {DESIGN_MIN_COSINE} and max abs \
             <= {bound:.4}, or (HF bf16 being at cosine {:.6}, max abs {:.4}) no more than twice HF bf16's distance",
            d.cosine,
            d.max_abs,
            d.at,
            d.actual,
            d.expected,
            bf_cos[s],
            bf_max[s]
        );
        second_arm += usize::from(!first);
        min_cos = min_cos.min(d.cosine);
        max_rel = max_rel.max(d.rel());
    }
    let min_margin = exp.margins.iter().cloned().fold(f64::INFINITY, f64::min);
    println!(
        "{what}: {} steps; min cosine {min_cos:.6}, max rel err {max_rel:.4}; steps passing on the HF-bf16 arm: {second_arm}; \
         HF bf16 vs f32: min cosine {:.6}, max abs {:.4}; smallest HF top-2 margin {min_margin:.4}; tokens {}",
        exp.tokens.len(),
        bf_cos.iter().cloned().fold(f64::INFINITY, f64::min),
        bf_max.iter().cloned().fold(0.0, f64::max),
        if g.tokens == exp.tokens { "identical" } else { "DIFFER" }
    );
    assert_eq!(g.tokens, exp.tokens, "{what}: greedy tokens differ from HF's");
}

switchyard_tests::harness::tests!(default_model_matches_hf_transformers);
switchyard_tests::main!();
