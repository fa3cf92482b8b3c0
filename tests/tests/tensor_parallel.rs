//! Tensor parallelism on the CPU reference: the thread communicator's
//! collectives (sums against an f64 sum, gathers, rank-order determinism,
//! refused misuse), and the sharded Gemma 4 graph at `--tp 2` and `--tp 4`
//! against `--tp 1` on the committed fixtures, under the whole-model rule
//! (ARCHITECTURE.md, parity tolerances: per step, cosine >= 0.999 and max
//! |tp - tp1| <= 2e-2 · max |tp1|) and with identical greedy tokens.
//!
//! On CUDA (`tp2_on_cuda_matches_tp1_on_cuda`): `--tp 2` over two GPUs
//! joined by NCCL against `--tp 1` on one, on every fixture, under the same
//! rule and with identical tokens. It needs two GPUs and libnccl (the probe
//! `cuda-tp2` opens GPUs 0 and 1 and loads NCCL); without them it ends
//! ignored with the reason, or failed when `SWITCHYARD_REQUIRE_CUDA_TP2=1`
//! (scripts/h200_checks.sh's `tp` part sets it). This binary uses
//! `switchyard-test-harness` for that, so its tests are registered with
//! `tests!` (a test attribute would never run here).
//!
//! Run with `--nocapture` to see each comparison's summary line.
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;
use switchyard_core::codec::{bf16_bits, bf16_value, bytes};
use switchyard_core::comm::{Communicator, ThreadComm};
use switchyard_core::{Backend, DType, DeviceBuffer};

/// Runs `f` on `world` ranks, each a thread with its own CPU reference
/// backend and its rank of one thread communicator; returns the results in
/// rank order.
fn on_ranks<T: Send>(world: usize, f: impl Fn(&ThreadComm) -> T + Sync) -> Vec<T> {
    let backends: Vec<Arc<dyn Backend>> = (0..world).map(|_| switchyard_cpu_ref::cpu_backend()).collect();
    let comms = ThreadComm::group(backends).expect("a group of threads");
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = comms.into_iter().map(|c| s.spawn(move || f(&c))).collect();
        handles.into_iter().map(|h| h.join().expect("a rank panicked")).collect()
    })
}

/// Rank `r`'s operand of `n` values: a seeded normal-ish spread with a few
/// large magnitudes, so that the sums exercise rounding.
fn operand(r: usize, n: usize) -> Vec<f32> {
    let mut rng = SmallRng::seed_from_u64(0x7e11 + r as u64);
    (0..n).map(|i| rng.random_range(-1.0f32..1.0) * if i % 17 == 0 { 300.0 } else { 1.0 }).collect()
}

fn ulp_bf16(x: f64) -> f64 {
    // The spacing of bf16 values at |x| (8 significant bits).
    let e = if x == 0.0 { -133 } else { x.abs().log2().floor() as i32 };
    2f64.powi(e.max(-133) - 7)
}

fn all_reduce_sums_f32_and_bf16_like_an_f64_sum() {
    const N: usize = 1000;
    for world in [2, 3, 4] {
        for dtype in [DType::F32, DType::BF16] {
            let results = on_ranks(world, |c| {
                let vals = operand(c.rank(), N);
                let data = match dtype {
                    DType::F32 => bytes::f32_bytes(&vals),
                    _ => vals.iter().flat_map(|&v| bf16_bits(v).to_le_bytes()).collect(),
                };
                let buf = DeviceBuffer::from_bytes(c.backend(), &data).unwrap();
                c.all_reduce_sum(buf.region(), dtype, N).unwrap();
                buf.to_vec().unwrap()
            });
            assert!(results.iter().all(|r| r == &results[0]), "world {world} {dtype:?}: ranks got different bytes");
            let got: Vec<f64> = match dtype {
                DType::F32 => bytes::f32_from_bytes(&results[0]).into_iter().map(f64::from).collect(),
                _ => bytes::bf16_bits_from_bytes(&results[0]).into_iter().map(|b| bf16_value(b) as f64).collect(),
            };
            let (mut worst, mut exact) = (0f64, 0usize);
            for i in 0..N {
                // The exact sum of the values each rank contributed (bf16
                // operands are the rounded values).
                let terms: Vec<f64> = (0..world)
                    .map(|r| {
                        let v = operand(r, N)[i];
                        if dtype == DType::BF16 {
                            bf16_value(bf16_bits(v)) as f64
                        } else {
                            v as f64
                        }
                    })
                    .collect();
                let sum: f64 = terms.iter().sum();
                let mag: f64 = terms.iter().map(|t| t.abs()).sum();
                // f32 additions in rank order: each rounds by at most 2^-24 of its partial sum.
                let f32_err = (world as f64) * 2f64.powi(-24) * mag;
                let bound = match dtype {
                    DType::F32 => f32_err,
                    _ => ulp_bf16(sum) / 2.0 + f32_err + ulp_bf16(sum + f32_err) / 2.0,
                };
                let err = (got[i] - sum).abs();
                assert!(err <= bound, "world {world} {dtype:?}: element {i}: {} vs f64 sum {sum}: |err| {err:e} > {bound:e}", got[i]);
                worst = worst.max(err / bound.max(f64::MIN_POSITIVE));
                exact += usize::from(err == 0.0);
            }
            println!("all_reduce world {world} {dtype:?}: worst error {worst:.3} of its bound, {exact}/{N} exactly the f64 sum");
        }
    }
}

fn all_reduce_adds_in_rank_order_whatever_the_arrival_order() {
    // In f32, ((1e8 + 1) - 1e8) + 1 = 1 (1e8 + 1 rounds to 1e8), while any
    // order that meets -1e8 before the first 1 gives 2: the result shows
    // the order. The ranks arrive in a different order each round.
    const VALUES: [f32; 4] = [1e8, 1.0, -1e8, 1.0];
    for round in 0..12u64 {
        let results = on_ranks(4, |c| {
            // Arrival order: a rotation and reversal that changes per round.
            let slot = (c.rank() as u64 + round) % 4;
            let delay = if round % 2 == 0 { slot } else { 3 - slot };
            std::thread::sleep(Duration::from_millis(3 * delay));
            let buf = DeviceBuffer::from_bytes(c.backend(), &bytes::f32_bytes(&[VALUES[c.rank()]; 8])).unwrap();
            c.all_reduce_sum(buf.region(), DType::F32, 8).unwrap();
            buf.to_vec().unwrap()
        });
        for (r, bytes) in results.iter().enumerate() {
            assert_eq!(bytes::f32_from_bytes(bytes), [1.0f32; 8], "round {round}: rank {r}: not the rank-order sum");
        }
    }
}

fn all_gather_concatenates_in_rank_order() {
    for world in [1, 2, 4] {
        let results = on_ranks(world, |c| {
            let mine: Vec<u8> = (0..12u8).map(|i| (c.rank() as u8) * 16 + i).collect();
            let send = DeviceBuffer::from_bytes(c.backend(), &mine).unwrap();
            // One byte of slack after the gathered bytes: it must stay as it was.
            let recv = DeviceBuffer::from_bytes(c.backend(), &vec![0xEEu8; 12 * world + 1]).unwrap();
            c.all_gather(send.region(), recv.region()).unwrap();
            c.barrier().unwrap();
            recv.to_vec().unwrap()
        });
        let mut expect: Vec<u8> = (0..world).flat_map(|r| (0..12u8).map(move |i| r as u8 * 16 + i)).collect();
        expect.push(0xEE);
        for (r, got) in results.iter().enumerate() {
            assert_eq!(got, &expect, "world {world}: rank {r}");
        }
    }
}

fn communicator_misuse_is_refused_with_its_reason() {
    // Ranks that disagree on the count: every rank is told, naming both calls.
    let errs = on_ranks(2, |c| {
        let buf = DeviceBuffer::zeroed(c.backend(), 64).unwrap();
        c.all_reduce_sum(buf.region(), DType::F32, 4 + 4 * c.rank()).unwrap_err().to_string()
    });
    for e in &errs {
        assert!(e.contains("all_reduce_sum") && e.contains("ranks disagree") && e.contains("count: 4") && e.contains("count: 8"), "{e}");
    }
    // An integer dtype, and a count past the buffer: refused before any exchange.
    let errs = on_ranks(1, |c| {
        let buf = DeviceBuffer::zeroed(c.backend(), 16).unwrap();
        let dtype = c.all_reduce_sum(buf.region(), DType::I32, 4).unwrap_err().to_string();
        let count = c.all_reduce_sum(buf.region(), DType::F32, 5).unwrap_err().to_string();
        let gather = c.all_gather(buf.slice(0, 8).unwrap(), buf.slice(8, 4).unwrap()).unwrap_err().to_string();
        (dtype, count, gather)
    });
    let (dtype, count, gather) = &errs[0];
    assert!(dtype.contains("communicator rank 0: all_reduce_sum: dtype I32"), "{dtype}");
    assert!(count.contains("count 5 of F32 does not fit the 16-byte buffer"), "{count}");
    assert!(gather.contains("recv holds 4 bytes, fewer than 1 ranks x 8 bytes"), "{gather}");
    // A rank that leaves (its communicator dropped, as when its thread fails)
    // releases the ranks waiting for it with an error that names it.
    let errs = on_ranks(3, |c| {
        if c.rank() == 1 {
            return String::from("left");
        }
        let buf = DeviceBuffer::zeroed(c.backend(), 8).unwrap();
        c.all_reduce_sum(buf.region(), DType::F32, 2).unwrap_err().to_string()
    });
    // `on_ranks` drops a rank's communicator when its closure returns.
    for (r, e) in errs.iter().enumerate().filter(|(r, _)| *r != 1) {
        assert!(e.contains("rank 1") && e.contains("left the group"), "rank {r}: {e}");
    }
    assert!(ThreadComm::group(Vec::new()).unwrap_err().to_string().contains("at least one rank"));
}

// ---- The sharded graph ----

use std::path::PathBuf;
use switchyard_model::checkpoint::{Checkpoint, Slice};
use switchyard_model::config::ModelConfig;
use switchyard_model::generate::{generate, Generation, Request};
use switchyard_model::graph::Model;
use switchyard_model::quant::Quant;
use switchyard_model::serde_json::{self, Value};
use switchyard_model::tp::group::{thread_ranks, TpGroup};
use switchyard_model::tp::TpPlan;

/// ARCHITECTURE.md, "Parity tolerances", the whole-model rule, held per step.
const MIN_COSINE: f64 = 0.999;
const MAX_REL: f64 = 2e-2;

/// The fixture `name`: under this crate where the binary was built, else
/// under `tests/fixtures` of the current directory (a test binary carried
/// to the GPU machine runs from the repository root there).
fn dir(name: &str) -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let root = if built.is_dir() { built } else { PathBuf::from("tests/fixtures") };
    root.join(name)
}

/// The fixture's HF prompt, and as many new tokens as HF generated.
fn request(name: &str) -> Request {
    let path = dir(name).join("expected.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let ids = |k: &str| v[k].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<u32>>();
    Request { prompt: ids("prompt"), max_new_tokens: ids("tokens").len(), want_logits: true, stop_at_eos: false }
}

fn open(name: &str) -> Checkpoint {
    Checkpoint::open(&dir(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// `--tp 1`: the model on one backend.
fn run_single_on(name: &str, be: Arc<dyn Backend>) -> Generation {
    let what = be.name();
    let model = Model::load(&open(name), be, Quant::None).unwrap_or_else(|e| panic!("{name} {what} tp 1: loading: {e}"));
    generate(&model, &request(name)).unwrap_or_else(|e| panic!("{name} {what} tp 1: {e}"))
}

/// `--tp 1` on one CPU reference backend.
fn run_single(name: &str) -> Generation {
    run_single_on(name, switchyard_cpu_ref::cpu_backend())
}

/// A group of `tp` ranks, each a thread with its own CPU reference backend.
fn group(name: &str, tp: usize) -> switchyard_model::Result<TpGroup> {
    let backends: Vec<Arc<dyn Backend>> = (0..tp).map(|_| switchyard_cpu_ref::cpu_backend()).collect();
    TpGroup::load(&open(name), Quant::None, thread_ranks(backends)?)
}

/// Generation over a started group of `tp` ranks.
fn run_group(name: &str, tp: usize, g: switchyard_model::Result<TpGroup>, what: &str) -> Generation {
    let g = g.unwrap_or_else(|e| panic!("{name} {what} tp {tp}: loading: {e}"));
    assert_eq!(g.world(), tp);
    generate(&g, &request(name)).unwrap_or_else(|e| panic!("{name} {what} tp {tp}: {e}"))
}

fn run_tp(name: &str, tp: usize) -> Generation {
    run_group(name, tp, group(name, tp), "cpu")
}

/// Cosine and max |a - b| / max |b| of one step's logits.
fn step_diff(a: &[f32], b: &[f32]) -> (f64, f64) {
    assert_eq!(a.len(), b.len(), "logit rows differ in length");
    let (mut dot, mut na, mut nb, mut max_abs, mut ref_max) = (0f64, 0f64, 0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (x as f64, y as f64);
        dot += x * y;
        na += x * x;
        nb += y * y;
        max_abs = max_abs.max(if x.is_nan() || y.is_nan() { f64::INFINITY } else { (x - y).abs() });
        ref_max = ref_max.max(y.abs());
    }
    (dot / (na.sqrt() * nb.sqrt()), max_abs / ref_max)
}

/// A `--tp N` generation `g` against the `--tp 1` one, `single`, on
/// fixture `name` (`what`: the backend, for the messages): every step
/// within the whole-model rule, and the same greedy tokens.
fn compare(name: &str, what: &str, tp: usize, g: &Generation, single: &Generation) {
    assert_eq!(g.tokens, single.tokens, "{name} {what}: --tp {tp} chose other greedy tokens than --tp 1");
    assert_eq!(g.logits.len(), single.logits.len(), "{name} {what} tp {tp}: one logit row per step");
    assert!(!g.logits.is_empty(), "{name} {what} tp {tp}: no logits to compare");
    let (mut min_cos, mut max_rel, mut exact) = (1f64, 0f64, true);
    for (s, (ours, theirs)) in g.logits.iter().zip(&single.logits).enumerate() {
        let (cos, rel) = step_diff(ours, theirs);
        assert!(cos >= MIN_COSINE && rel <= MAX_REL, "{name} {what} tp {tp}: step {s}: cosine {cos:.6}, max rel err {rel:.3e}");
        min_cos = min_cos.min(cos);
        max_rel = max_rel.max(rel);
        exact &= ours.iter().zip(theirs).all(|(a, b)| a.to_bits() == b.to_bits());
    }
    println!(
        "{name} on {what}: --tp {tp} vs --tp 1: {} steps, min cosine {min_cos:.7}, max rel err {max_rel:.3e} (rule: cosine >= \
         {MIN_COSINE}, rel <= {MAX_REL}), logits bit-identical: {}, greedy tokens identical: {:?}",
        g.tokens.len(),
        if exact { "yes" } else { "no" },
        g.tokens
    );
}

/// `--tp N` against `--tp 1` on fixture `name`, on the CPU reference.
fn check_against_single(name: &str, tps: &[usize]) {
    let single = run_single(name);
    for &tp in tps {
        compare(name, "cpu", tp, &run_tp(name, tp), &single);
    }
}

fn tp_matches_tp1_on_dense_fixtures() {
    // tiny-dense has 2 query heads, so 2 ranks at most; tiny-31b (4 heads,
    // 2 KV heads on sliding layers, 1 on its k = v global layer) takes 4,
    // replicating the global layer's KV head.
    check_against_single("tiny-dense", &[2]);
    check_against_single("tiny-31b", &[2, 4]);
}

fn tp_matches_tp1_on_moe_fixtures() {
    // 8 experts, 2 or 4 per rank; tiny-moe's global layers have one KV head
    // and k = v.
    check_against_single("tiny-moe", &[2, 4]);
    check_against_single("tiny-26b-a4b", &[2, 4]);
}

fn tp_runs_per_layer_inputs_and_kv_sharing() {
    // E2B's flags: per-layer inputs (replicated on every rank), KV-shared
    // layers (attending over their source's pool on each rank), a
    // double-wide MLP on the shared layers, one KV head replicated.
    check_against_single("tiny-e2b", &[2]);
}

fn tp_runs_are_bit_identical_from_run_to_run() {
    let a = run_tp("tiny-moe", 4);
    let b = run_tp("tiny-moe", 4);
    assert_eq!(a.tokens, b.tokens);
    for (s, (x, y)) in a.logits.iter().zip(&b.logits).enumerate() {
        assert!(x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()), "tiny-moe tp 4: step {s}: logits differ between two runs");
    }
}

fn a_config_that_does_not_split_is_refused_naming_tp_and_the_value() {
    let e = group("tiny-dense", 4).err().expect("2 heads over 4 ranks").to_string();
    assert!(e.contains("--tp 4: num_attention_heads = 2 is not a multiple of 4"), "{e}");
    let e = group("tiny-moe", 3).err().expect("4 heads over 3 ranks").to_string();
    assert!(e.contains("--tp 3: num_attention_heads = 4 is not a multiple of 3"), "{e}");
    let cfg = ModelConfig::from_json(&open("tiny-moe").config_json).unwrap();
    let refused = |edit: &dyn Fn(&mut ModelConfig), world: usize| {
        let mut c = cfg.clone();
        edit(&mut c);
        TpPlan::new(&c, 0, world).err().expect("refused").to_string()
    };
    let e = refused(&|c| c.layers[1].num_kv_heads = 3, 2);
    assert!(e.contains("--tp 2: layer 1 has 3 KV heads, neither a multiple nor a divisor of 2"), "{e}");
    let e = refused(&|c| c.layers[0].intermediate = 129, 2);
    assert!(e.contains("--tp 2: layer 0's MLP intermediate size 129 is not a multiple of 2"), "{e}");
    let e = refused(&|c| c.vocab_size = 510, 4);
    assert!(e.contains("--tp 4: vocab_size = 510 is not a multiple of 4"), "{e}");
    let e = refused(&|c| c.moe.as_mut().unwrap().num_experts = 6, 4);
    assert!(e.contains("--tp 4: num_experts = 6 is not a multiple of 4"), "{e}");
    assert!(TpPlan::new(&cfg, 0, 0).unwrap_err().to_string().contains("--tp 0: a tensor-parallel group needs at least one rank"));
    assert!(TpPlan::new(&cfg, 2, 2).unwrap_err().to_string().contains("rank 2 is not one of the 2 ranks"));
    assert!(TpGroup::load(&open("tiny-moe"), Quant::None, Vec::new()).err().unwrap().to_string().contains("at least one rank"));
}

fn a_plan_splits_heads_kv_heads_vocabulary_and_experts() {
    let cfg = ModelConfig::from_json(&open("tiny-moe").config_json).unwrap();
    // 4 query heads; sliding layers 2 KV heads, global layers 1.
    let p = TpPlan::new(&cfg, 3, 4).unwrap();
    assert_eq!((p.vocab.clone(), p.experts.clone()), (384..512, Some(6..8)));
    assert_eq!(p.layers[0].q_heads, 3..4);
    assert_eq!(p.layers[0].kv_heads, 1..2, "query head 3 reads KV head 1 of 2");
    assert_eq!(p.layers[2].kv_heads, 0..1, "the global layer's single KV head, replicated");
    assert_eq!(p.layers[0].intermediate, 96..128);
    assert_eq!((p.local_token(385), p.local_token(3)), (1, 128), "another rank's token gathers the zero row");
    assert_eq!(p.expert_map(8).unwrap(), [2, 2, 2, 2, 2, 2, 0, 1]);
    let local = p.local_config(&cfg);
    assert_eq!((local.num_heads, local.layers[0].num_kv_heads, local.layers[3].num_kv_heads, local.vocab_size), (1, 1, 1, 128));
}

fn a_shard_reads_slices_of_the_checkpoint_tensors() {
    let ck = open("tiny-moe");
    // [hidden 128, heads 4 · hd 32]: columns 32..64 of o_proj, row by row.
    let o = ck.tensor("layers.0.self_attn.o_proj.weight", &[128, 128]).unwrap();
    let cols = ck.tensor_slice("layers.0.self_attn.o_proj.weight", &[128, 128], &Slice::Cols(32..64)).unwrap();
    assert_eq!(cols.shape, [128, 32]);
    let expect: Vec<u16> = (0..128).flat_map(|r| o.data[r * 128 + 32..r * 128 + 64].to_vec()).collect();
    assert_eq!(cols.data, expect);
    // Experts 2..4 of [8, 2·32, 128]: one contiguous range.
    let all = ck.tensor("layers.1.experts.gate_up_proj", &[8, 64, 128]).unwrap();
    let some = ck.tensor_slice("layers.1.experts.gate_up_proj", &[8, 64, 128], &Slice::Lead(2..4)).unwrap();
    assert_eq!((some.shape.as_slice(), some.data.as_slice()), ([2, 64, 128].as_slice(), &all.data[2 * 64 * 128..4 * 64 * 128]));
    let e = ck.tensor_slice("layers.1.experts.gate_up_proj", &[8, 64, 128], &Slice::Lead(6..9)).unwrap_err().to_string();
    assert!(e.contains("rows 6..9 are not inside its 8"), "{e}");
    let e = ck.tensor_slice("layers.1.experts.gate_up_proj", &[8, 64, 128], &Slice::Cols(0..2)).unwrap_err().to_string();
    assert!(e.contains("a column slice needs a 2-D tensor"), "{e}");
    let e = ck.tensor_slice("layers.0.self_attn.o_proj.weight", &[128, 64], &Slice::Cols(0..2)).unwrap_err().to_string();
    assert!(e.contains("has shape [128, 128], expected [128, 64]"), "{e}");
}

// ---- On two GPUs ----

/// Every fixture: dense, MoE, the 31B and 26B-A4B flag sets, and E2B's
/// per-layer inputs and KV sharing.
const CUDA_FIXTURES: [&str; 5] = ["tiny-dense", "tiny-31b", "tiny-moe", "tiny-26b-a4b", "tiny-e2b"];

fn tp2_on_cuda_matches_tp1_on_cuda() {
    for name in CUDA_FIXTURES {
        let be = switchyard_cli::backends::open("cuda").unwrap_or_else(|e| panic!("cuda: {e}"));
        let single = run_single_on(name, be);
        // GPUs 0 and 1, one thread each, joined by NCCL (NCCL_NVLS_ENABLE=0).
        let ranks = switchyard_cli::backends::tp_ranks("cuda", 2).unwrap_or_else(|e| panic!("{name}: cuda --tp 2: {e:#}"));
        let g = run_group(name, 2, TpGroup::load(&open(name), Quant::None, ranks), "cuda");
        compare(name, "cuda (NCCL)", 2, &g, &single);
    }
}

/// Opens backend `name`; `cuda-tp2` is two CUDA GPUs joined by NCCL (GPUs 0
/// and 1 opened, libnccl loaded and checked, a group id made).
fn probe(name: &str) -> Result<(), String> {
    match name {
        "cuda-tp2" => switchyard_cli::backends::tp_ranks("cuda", 2).map(drop).map_err(|e| format!("{e:#}")),
        other => switchyard_cli::backends::open(other).map(drop).map_err(|e| e.to_string()),
    }
}

switchyard_test_harness::tests!(
    all_reduce_sums_f32_and_bf16_like_an_f64_sum,
    all_reduce_adds_in_rank_order_whatever_the_arrival_order,
    all_gather_concatenates_in_rank_order,
    communicator_misuse_is_refused_with_its_reason,
    tp_matches_tp1_on_dense_fixtures,
    tp_matches_tp1_on_moe_fixtures,
    tp_runs_per_layer_inputs_and_kv_sharing,
    tp_runs_are_bit_identical_from_run_to_run,
    a_config_that_does_not_split_is_refused_naming_tp_and_the_value,
    a_plan_splits_heads_kv_heads_vocabulary_and_experts,
    a_shard_reads_slices_of_the_checkpoint_tensors,
);
switchyard_test_harness::tests!(needs "cuda-tp2": tp2_on_cuda_matches_tp1_on_cuda);
switchyard_test_harness::main!(probe);
