//! Determinism: the same inputs give bit-identical outputs across repeated
//! runs on one backend. ARCHITECTURE.md makes this a contract (MoE routing orders
//! pairs within an expert's segment by pair index, not by atomic arrival),
//! so these tests compare bytes with `==`, never under a tolerance.
//!
//! 1. Every parity case of every kernel the backend implements, run twice
//!    (same inputs, same poison in the outputs): every output byte-equal.
//! 2. MoE routing end to end (router top-k, then count / offsets / scatter)
//!    on logits full of ties, five times: byte-equal, and on GPU backends
//!    equal to the CPU reference (integer outputs are exact by contract).
//! 3. Whole-model generation on the tiny-moe fixture: tokens and every
//!    logit's bits equal across two runs and across a fresh load.
use std::path::Path;
use std::sync::Arc;
use switchyard_core::{registry, Backend, DeviceBuffer};
use switchyard_kernels::parity::{Case, CaseSet, Gen, Init};
use switchyard_kernels::Ops;
use switchyard_model::checkpoint::Checkpoint;
use switchyard_model::generate::{generate, Request};
use switchyard_model::graph::Model;
use switchyard_model::quant::Quant;
use switchyard_tests::per_backend;

/// Poison written into every output before a run (the same both times, so a
/// difference can only come from the kernel).
const POISON: u8 = 0xff;

/// Runs `case` once on `ops`; returns the bytes of every checked output and
/// in-out buffer, in buffer order.
fn run_case(ops: &Ops, case: &Case) -> Vec<Vec<u8>> {
    let be = &ops.be;
    let bufs: Vec<DeviceBuffer> = case
        .buffers
        .iter()
        .map(|b| {
            let bytes = match &b.init {
                Init::Data(d) => d.clone(),
                Init::Poison(n) => vec![POISON; *n],
            };
            DeviceBuffer::from_bytes(be, &bytes).or_else(|_| DeviceBuffer::zeroed(be, 1)).expect("alloc")
        })
        .collect();
    let regions: Vec<_> = case.buffers.iter().zip(&bufs).map(|(b, d)| d.slice(0, b.len()).expect("buffer holds its data")).collect();
    (case.run)(ops, &regions).unwrap_or_else(|e| panic!("{} {}: {e}", case.kernel.symbol, case.label));
    be.synchronize().unwrap();
    case.buffers.iter().zip(&bufs).filter(|(b, _)| b.check.is_some()).map(|(_, d)| d.to_vec().unwrap()).collect()
}

per_backend! {
    fn every_parity_case_is_bit_reproducible(be) {
        let ops = Ops::new(be.clone());
        let mut kernels_run = 0;
        for set in inventory::iter::<CaseSet> {
            if !registry::implements(be.kind(), set.kernel) {
                continue;
            }
            // Seeded like the parity suite, per kernel.
            let mut g = Gen::new(0x5eed ^ set.kernel.symbol.len() as u64);
            for case in (set.cases)(&mut g) {
                let a = run_case(&ops, &case);
                let b = run_case(&ops, &case);
                assert!(!a.is_empty(), "{}: a case with no checked output", case.kernel.symbol);
                for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                    if x != y {
                        let first = x.iter().zip(y).position(|(p, q)| p != q).unwrap();
                        panic!(
                            "{} {} on {}: output {i} differs between two runs (first at byte {first} of {})",
                            case.kernel.symbol, case.label, be.name(), x.len()
                        );
                    }
                }
            }
            kernels_run += 1;
        }
        // The registry walk must have found the catalogue, not nothing.
        assert!(kernels_run >= 10, "only {kernels_run} kernels with cases on {}", be.name());
    }
}

/// Router logits with heavy ties: values from a set of 3, so most rows have
/// several experts at the same score and the top-k tie-break decides.
fn tied_logits(rows: usize, e: usize) -> Vec<u8> {
    let vals = [0.5f32, -0.25, 0.5];
    (0..rows * e).flat_map(|i| switchyard_core::codec::bf16_bits(vals[(i * 7 + i / e) % 3]).to_le_bytes()).collect()
}

/// Router top-k then the routing tables: returns (topk ids, topk weights,
/// counts, offsets, pair_of_slot, slot_of_pair) as bytes.
fn route(be: &Arc<dyn Backend>, rows: usize, e: usize, k: usize) -> Vec<Vec<u8>> {
    let ops = Ops::new(be.clone());
    let n = rows * k;
    let logits = DeviceBuffer::from_bytes(be, &tied_logits(rows, e)).unwrap();
    let scale: Vec<u8> = (0..e).flat_map(|x| (1.0f32 + (x % 2) as f32).to_le_bytes()).collect();
    let scale = DeviceBuffer::from_bytes(be, &scale).unwrap();
    let ids = DeviceBuffer::zeroed(be, 4 * n).unwrap();
    let w = DeviceBuffer::zeroed(be, 4 * n).unwrap();
    ops.moe_router_topk(ids.region(), w.region(), logits.region(), scale.region(), rows, e, k).unwrap();
    let counts = DeviceBuffer::zeroed(be, 4 * e).unwrap();
    let offsets = DeviceBuffer::zeroed(be, 4 * (e + 1)).unwrap();
    let cursor = DeviceBuffer::zeroed(be, 4 * e).unwrap();
    let pos = DeviceBuffer::zeroed(be, 4 * n).unwrap();
    let sop = DeviceBuffer::zeroed(be, 4 * n).unwrap();
    ops.moe_route(counts.region(), offsets.region(), cursor.region(), pos.region(), sop.region(), ids.region(), rows, k, e).unwrap();
    be.synchronize().unwrap();
    [&ids, &w, &counts, &offsets, &pos, &sop].iter().map(|b| b.to_vec().unwrap()).collect()
}

per_backend! {
    fn moe_routing_is_bit_reproducible(be) {
        // Decode-sized and prefill-sized (several 256-pair scatter chunks).
        for (rows, e, k) in [(1, 8, 2), (37, 16, 4), (300, 64, 8)] {
            let first = route(&be, rows, e, k);
            for run in 1..5 {
                assert!(route(&be, rows, e, k) == first, "{}: rows {rows} e {e} k {k}: run {run} differs from run 0", be.name());
            }
            // Every pair has a slot: the routing is a permutation, not a partial write.
            let pos: Vec<i32> = first[4].chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            let mut sorted = pos.clone();
            sorted.sort();
            assert_eq!(sorted, (0..(rows * k) as i32).collect::<Vec<_>>(), "pair_of_slot is not a permutation");
            if be.name() != "cpu" {
                let cpu = route(&switchyard_cpu_ref::cpu_backend(), rows, e, k);
                // ids, counts, offsets and slots are integers: exact. Weights are
                // f32 softmax outputs: compared in the parity suite, not here.
                for i in [0, 2, 3, 4, 5] {
                    assert!(first[i] == cpu[i], "{}: routing output {i} differs from the CPU reference", be.name());
                }
            }
        }
    }
}

fn tiny_moe() -> Checkpoint {
    Checkpoint::open(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tiny-moe")).expect("open tiny-moe")
}

per_backend! {
    fn tiny_moe_generation_is_bit_reproducible(be) {
        let ck = tiny_moe();
        let req = Request { prompt: vec![2, 17, 99, 5, 250, 31], max_new_tokens: 10, want_logits: true, stop_at_eos: false };
        let bits = |g: &switchyard_model::generate::Generation| -> Vec<Vec<u32>> {
            g.logits.iter().map(|l| l.iter().map(|v| v.to_bits()).collect()).collect()
        };
        let model = Model::load(&ck, be.clone(), Quant::None).expect("load tiny-moe");
        assert!(model.cfg.moe.is_some(), "the fixture must exercise the MoE branch");
        let a = generate(&model, &req).unwrap();
        let b = generate(&model, &req).unwrap();
        drop(model);
        // A fresh load: nothing cached from the first model may matter.
        let model = Model::load(&ck, be.clone(), Quant::None).unwrap();
        let c = generate(&model, &req).unwrap();
        assert_eq!(a.tokens.len(), 10);
        assert_eq!(a.logits.len(), 10);
        for (other, what) in [(&b, "second run"), (&c, "fresh load")] {
            assert_eq!(a.tokens, other.tokens, "{}: tokens differ ({what})", be.name());
            assert!(bits(&a) == bits(other), "{}: logits differ bitwise ({what})", be.name());
        }
    }
}

switchyard_tests::main!();
