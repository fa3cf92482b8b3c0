//! Tensor parallelism on the CPU reference: the thread communicator's
//! collectives (sums against an f64 sum, gathers, rank-order determinism,
//! refused misuse), and the sharded Gemma 4 graph at `--tp 2` and `--tp 4`
//! against `--tp 1` on the committed fixtures, under the whole-model rule
//! (ARCHITECTURE.md, parity tolerances: per step, cosine >= 0.999 and max
//! |tp - tp1| <= 2e-2 · max |tp1|) and with identical greedy tokens.
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

#[test]
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

#[test]
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

#[test]
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

#[test]
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
