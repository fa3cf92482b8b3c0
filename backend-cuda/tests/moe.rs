//! The grouped MoE GEMM's Hopper plan on a CUDA device (each test ignored,
//! with the reason, without one): which entry the plan picks from the
//! device's own facts, and the wgmma kernel against the CPU reference at a
//! size where every block walks several tiles, with segments off tile
//! boundaries, empty ones and zero rows on both ends, launched twice to the
//! same bits.
use switchyard_core::codec::bf16_value;
use switchyard_core::compare::nmse;
use switchyard_core::{Arg, DeviceBuffer};
use switchyard_cuda::CudaBackend;
use switchyard_kernels::gemm::REORDERED_NMSE;
use switchyard_kernels::moe::expert::{ExpertWeights, MOE_GROUPED_GEMM_BF16};
use switchyard_kernels::parity::Gen;
use switchyard_kernels::plan::{cuda_kernel, DeviceFacts, PlanArgs};
use switchyard_kernels::Ops;

mod common;

/// The plan's first entry for a launch of `n` slots, `e` experts, N × K,
/// with every pointer at `addr`.
fn entry(f: &DeviceFacts, n: i32, e: i32, big_n: i32, big_k: i32, addr: u64) -> (&'static str, [u32; 3], [u32; 3]) {
    let args: Vec<Arg> = MOE_GROUPED_GEMM_BF16
        .args
        .iter()
        .map(|a| match a.name {
            "n" => Arg::I(n),
            "e" => Arg::I(e),
            "big_n" => Arg::I(big_n),
            "big_k" => Arg::I(big_k),
            _ => Arg::P(addr),
        })
        .collect();
    let plan = (cuda_kernel(&MOE_GROUPED_GEMM_BF16).expect("registered").plan)(&PlanArgs::new(&MOE_GROUPED_GEMM_BF16, &args), f).unwrap();
    (plan.passes[0].entry, plan.passes[0].grid, plan.passes[0].block)
}

/// On this device's facts: the wgmma entries at the issue-13 MoE shapes
/// when it runs sm_90a entries (the ping-pong kernel's 176-column tiles for
/// gate_up N = 1408 and down N = 2816); decode sizes, misaligned operands,
/// N % 8 != 0 and a device without sm_90a keep the other plans.
fn grouped_plan_picks_the_wgmma_entries_at_prefill_sizes() {
    let cb = CudaBackend::open(0).unwrap_or_else(|e| panic!("opening CUDA device 0: {e}"));
    let f = cb.device_facts();
    println!("{}: cuda_sm90a {}, {} SMs", cb.arch(), f.cuda_sm90a, f.multiprocessors);
    let tiles = "moe_grouped_gemm_bf16";
    let plain = DeviceFacts { cuda_sm90a: false, ..f };
    assert_eq!(entry(&plain, 32768, 128, 1408, 2816, 256).0, tiles);
    assert_eq!(entry(&f, 128, 128, 1408, 2816, 256).0, "moe_grouped_gemm_bf16_seg");
    if f.cuda_sm90a {
        let wg = |name: &'static str| (name, [f.multiprocessors, 1, 1], [384, 1, 1]);
        assert_eq!(entry(&f, 32768, 128, 1408, 2816, 256), wg("moe_sm90::moe_grouped_gemm_wgmma_pp_n176"));
        assert_eq!(entry(&f, 32768, 128, 2816, 704, 256), wg("moe_sm90::moe_grouped_gemm_wgmma_pp_n176"));
        assert_eq!(entry(&f, 32768, 128, 1408, 2816, 264).0, tiles, "8-byte aligned operands");
        assert_eq!(entry(&f, 32768, 128, 1410, 2816, 256).0, tiles, "N % 8 != 0");
    } else {
        assert_eq!(entry(&f, 32768, 128, 1408, 2816, 256).0, tiles);
    }
}

/// 32 experts over 6280 slots (segments of 0 to 399 rows, three empty,
/// the last among them; the first starting at row 2, three zero rows past
/// the last), N = 1056 (176-column tiles), K = 256: 384 tiles, so each of
/// the H200's 132 blocks walks about three and the ring's phases carry
/// across tiles, both consumer warpgroups of the ping-pong kernel taking
/// turns. Against the CPU reference, on NaN-poisoned outputs, twice.
fn grouped_wgmma_matches_the_reference_over_many_tiles() {
    let cb = CudaBackend::open(0).unwrap_or_else(|e| panic!("opening CUDA device 0: {e}"));
    let (e, big_n, big_k) = (32usize, 1056usize, 256usize);
    let mut offsets = vec![2i32];
    for x in 0..e {
        let len = if x % 13 == 5 { 0 } else { (x * 181 + 37) % 400 };
        offsets.push(offsets[x] + len as i32);
    }
    let n = offsets[e] as usize + 3;
    let facts = cb.device_facts();
    let picked = entry(&facts, n as i32, e as i32, big_n as i32, big_k as i32, 256).0;
    println!("n = {n}: {picked}");
    assert!(!facts.cuda_sm90a || picked == "moe_sm90::moe_grouped_gemm_wgmma_pp_n176", "{picked}");
    let mut gen = Gen::new(0x13e5);
    let (_, a) = gen.bf16(n * big_k, 0.01, 1.0);
    let (_, w) = gen.bf16(e * big_n * big_k, 0.01, 0.5);
    let offs: Vec<u8> = offsets.iter().flat_map(|o| o.to_le_bytes()).collect();
    let run = |be: &std::sync::Arc<dyn switchyard_core::Backend>| -> Vec<u8> {
        let ops = Ops::new(be.clone());
        let up = |d: &[u8]| DeviceBuffer::from_bytes(be, d).unwrap();
        let (a, w, o) = (up(&a), up(&w), up(&offs));
        let out = up(&vec![0xffu8; n * big_n * 2]);
        ops.moe_grouped_gemm(out.region(), a.region(), &ExpertWeights::Bf16 { w: w.region() }, o.region(), n, e, big_n, big_k).unwrap();
        out.to_vec().unwrap()
    };
    let cuda: std::sync::Arc<dyn switchyard_core::Backend> = std::sync::Arc::new(cb);
    let (got, again) = (run(&cuda), run(&cuda));
    let want = run(&switchyard_cpu_ref::cpu_backend());
    assert!(got == again, "two launches differ");
    let f64s = |b: &[u8]| b.chunks_exact(2).map(|c| bf16_value(u16::from_le_bytes([c[0], c[1]])) as f64).collect::<Vec<_>>();
    let (g, r) = (f64s(&got), f64s(&want));
    assert!(g.iter().all(|v| v.is_finite()), "an output the kernel never wrote (NaN poison) or a non-finite value");
    let outside = |row: usize| row < offsets[0] as usize || row >= offsets[e] as usize;
    for row in (0..n).filter(|&r| outside(r)) {
        assert!(got[row * big_n * 2..(row + 1) * big_n * 2].iter().all(|&b| b == 0), "row {row} outside every segment is not +0");
    }
    let err = nmse(&g, &r);
    println!("NMSE vs cpu-ref {err:.2e}");
    assert!(err <= REORDERED_NMSE, "NMSE {err:.2e}");
}

switchyard_test_harness::tests!(needs "cuda": grouped_plan_picks_the_wgmma_entries_at_prefill_sizes, grouped_wgmma_matches_the_reference_over_many_tiles);
switchyard_test_harness::main!(common::probe);
