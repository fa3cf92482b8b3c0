//! Tables past one storage binding (ARCHITECTURE.md, "Tables past one
//! binding"): the embedding gathers and the output head run split plans that
//! bind a window of the table per pass.
//!
//! - At the adapter's real limit: a table of the 31B shape's proportion
//!   (262144 x 5376 bf16 is 1.3125 times a 2 GiB binding; here hidden 5376
//!   and a vocabulary making the table 1.3125 times this adapter's binding
//!   limit: 16384 rows on lavapipe's 128 MiB, the real 262144 on a 2 GiB
//!   adapter) through the parity harness against the CPU reference.
//! - Every registered parity case of the six split kernels with plans told
//!   the binding limit is 16 KiB, so tables of a few rows' bytes split into
//!   many windows (NaN rows for bad ids, windows cut mid-workgroup, the
//!   word-at-a-time paths of odd shapes).
//! - A table that starts at an unaligned offset of its allocation.
//! - The grouped expert kernels' weights past one binding (windows of whole
//!   experts, a pass each): every registered parity case of the three, with
//!   plans told a limit that cuts the larger cases' experts into several
//!   windows (a window an expert for some).
use std::sync::Arc;
use switchyard_core::codec::bytes;
use switchyard_core::compare::Tolerance;
use switchyard_core::{Backend, DType, DeviceBuffer, KernelSig};
use switchyard_kernels::moe::expert::{MOE_GATE_UP_GELU_BF16, MOE_GROUPED_GEMM_BF16, MOE_GROUPED_W4A16};
use switchyard_kernels::parity::{self, Buffer, Case, Gen, Row};
use switchyard_kernels::plan::{row_windows, WINDOW_SLACK};
use switchyard_kernels::{embed, head, Ops};
use switchyard_wgpu::WgpuOptions;

mod common;
use common::{backend, wgpu};

/// Gemma 4 31B's hidden size.
const HIDDEN: usize = 5376;
/// 262144 x 5376 bf16 over a 2 GiB binding.
const RATIO_31B: f64 = 262_144.0 * 5376.0 * 2.0 / (1u64 << 31) as f64;
/// The binding limit plans see in the small-table test.
const SMALL_LIMIT: u64 = 16 << 10;

fn split_kernels() -> [&'static KernelSig; 6] {
    [
        &embed::EMBED_GATHER_BF16,
        &embed::EMBED_GATHER_FP8,
        &embed::GATHER_ROWS_BF16,
        &head::LM_HEAD_LOGITS_BF16,
        &head::LM_HEAD_LOGITS_FP8,
        &head::LETTER_LOGITS_FP8,
    ]
}

/// bf16 values in the pool the big table is cut from.
const POOL: usize = 1 << 20;

/// A `[rows, HIDDEN]` bf16 table whose row r is the pool's run of HIDDEN
/// values from (61·r) mod (POOL − HIDDEN): rows differ from their
/// neighbours (a row read from the wrong window shows), and building it is
/// a copy, not a draw per element.
fn tiled(pool: &[u8], rows: usize) -> Vec<u8> {
    let mut t = Vec::with_capacity(rows * HIDDEN * 2);
    for r in 0..rows {
        let at = (61 * r) % (POOL - HIDDEN);
        t.extend_from_slice(&pool[2 * at..2 * (at + HIDDEN)]);
    }
    t
}

fn limit_of(be: &Arc<dyn Backend>) -> u64 {
    let info = be.info();
    let v = info.details.iter().find(|(k, _)| k == "max_storage_buffer_binding_size").expect("the wgpu backend reports its binding limit");
    v.1.parse().expect("a byte count")
}

fn assert_passed(what: &str, rows: &[Row]) {
    println!("{}", parity::table(rows));
    let failed = rows.iter().filter(|r| !r.status.passed()).count();
    assert!(!rows.is_empty(), "{what}: no rows ran");
    assert_eq!(failed, 0, "{what}: {failed} of {} parity rows failed (see table above)", rows.len());
}

/// Windows a table of `rows` rows of `row_bytes` splits into under `limit` (0: not split).
fn windows(rows: u64, row_bytes: u64, limit: u64) -> usize {
    row_windows(&embed::EMBED_GATHER_BF16, "table", rows, row_bytes, limit).unwrap().map_or(0, |w| w.len())
}

fn plans_split_tables_by_rows() {
    // The 31B tables under a 2 GiB binding: the bf16 table (2.8 GB) in two
    // windows, the fp8 one (1.4 GB) whole.
    let gib2 = 1u64 << 31;
    assert_eq!(windows(262_144, 2 * HIDDEN as u64, gib2), 2);
    assert_eq!(windows(262_144, HIDDEN as u64, gib2), 0);
    let w = row_windows(&embed::EMBED_GATHER_BF16, "table", 262_144, 2 * HIDDEN as u64, gib2).unwrap().unwrap();
    assert_eq!(w, vec![(0, 199_728), (199_728, 62_416)]);
    assert!(w[0].1 * 2 * HIDDEN as u64 + WINDOW_SLACK <= gib2);
    // A row that alone exceeds the binding is refused, naming the table.
    let e = row_windows(&head::LM_HEAD_LOGITS_FP8, "e8", 4, 1 << 20, 1 << 16).unwrap_err().to_string();
    assert!(e.contains("e8") && e.contains("does not fit"), "{e}");
}

fn tables_past_one_binding_match_cpu_ref() {
    let name = "tables_past_one_binding_match_cpu_ref";
    let t0 = std::time::Instant::now();
    let be = wgpu(name);
    let limit = limit_of(&be);
    let row = 2 * HIDDEN as u64;
    let vocab = ((limit as f64 * RATIO_31B / row as f64).ceil() as usize).next_multiple_of(64);
    let table_bytes = vocab as u64 * row;
    assert!(table_bytes > limit);
    let windows = row_windows(&embed::EMBED_GATHER_BF16, "table", vocab as u64, row, limit).unwrap().expect("the table splits");
    eprintln!(
        "{name}: binding limit {limit} bytes; table {vocab} x {HIDDEN} bf16 = {table_bytes} bytes ({:.4} x the limit) in {} windows {windows:?}",
        table_bytes as f64 / limit as f64,
        windows.len()
    );
    let cut = windows[0].1 as i32;
    let v = vocab as i32;
    let mut g = Gen::new(0x31b);
    // Random bf16 values in [0.001, 0.2) with random signs, and the same without signs.
    let (_, pool) = g.bf16(POOL, 0.001, 0.2);
    let abs_pool: Vec<u8> = pool.chunks(2).flat_map(|c| [c[0], c[1] & 0x7f]).collect();
    let table = tiled(&pool, vocab);
    eprintln!("{name}: table built after {:.1} s", t0.elapsed().as_secs_f64());
    // Ids on both sides of the first cut, the ends, one past the table (NaN row), and a few at random.
    let (random, _) = g.i32(8, 0, v);
    let ids: Vec<i32> = [0, cut - 1, cut, cut + 1, v - 1, v + 5].into_iter().chain(random).collect();
    let rows = ids.len();
    let ids = bytes::i32_bytes(&ids);

    let cpu = Ops::new(switchyard_cpu_ref::cpu_backend());
    let wg = Ops::new(be.clone());
    let m = 2;
    let (hv, hb) = g.bf16(m * HIDDEN, 0.01, 2.0);
    // Σ|h·t| per logit (the dot tolerance's bound): the same kernel over |h| and |table| on the CPU reference.
    let bound = {
        let abs_h: Vec<u8> = hb.chunks(2).flat_map(|c| [c[0], c[1] & 0x7f]).collect();
        let cb = cpu.be.clone();
        let (t, h) = (DeviceBuffer::from_bytes(&cb, &tiled(&abs_pool, vocab)).unwrap(), DeviceBuffer::from_bytes(&cb, &abs_h).unwrap());
        let out = DeviceBuffer::zeroed(&cb, 4 * m * vocab).unwrap();
        cpu.lm_head_logits_bf16(out.region(), h.region(), t.region(), m, vocab, HIDDEN, 0.0).unwrap();
        bytes::f32_from_bytes(&out.to_vec().unwrap()).into_iter().map(|x| x as f64).collect::<Vec<f64>>()
    };
    assert!(hv.iter().all(|x| x.is_finite()));
    let scale = 73.25;
    let cases = vec![
        Case {
            kernel: &embed::EMBED_GATHER_BF16,
            label: format!("rows={rows} h={HIDDEN} vocab={vocab} (31B-proportional)"),
            buffers: vec![
                Buffer::output("out", DType::BF16, rows * HIDDEN, Tolerance::Bf16Ulp(1)),
                Buffer::input("table", table.clone()),
                Buffer::input("ids", ids.clone()),
            ],
            run: Box::new(move |o, a| o.embed_gather_bf16(a[0], a[1], a[2], rows, vocab, HIDDEN, scale)),
        },
        Case {
            kernel: &embed::GATHER_ROWS_BF16,
            label: format!("rows={rows} h={HIDDEN} n_src={vocab} (31B-proportional)"),
            buffers: vec![
                Buffer::output("out", DType::BF16, rows * HIDDEN, Tolerance::Exact),
                Buffer::input("src", table.clone()),
                Buffer::input("idx", ids),
            ],
            run: Box::new(move |o, a| o.gather_rows_bf16(a[0], a[1], a[2], rows, vocab, HIDDEN)),
        },
        Case {
            kernel: &head::LM_HEAD_LOGITS_BF16,
            label: format!("m={m} vocab={vocab} hdim={HIDDEN} softcap=30 (31B-proportional)"),
            buffers: vec![
                Buffer::output("out", DType::F32, m * vocab, Tolerance::dot(bound)),
                Buffer::input("h", hb),
                Buffer::input("table", table),
            ],
            run: Box::new(move |o, a| o.lm_head_logits_bf16(a[0], a[1], a[2], m, vocab, HIDDEN, 30.0)),
        },
    ];
    eprintln!("{name}: inputs ready after {:.1} s", t0.elapsed().as_secs_f64());
    let rows = parity::check_cases(&cpu, &wg, &cases);
    eprintln!("{name}: parity done after {:.1} s", t0.elapsed().as_secs_f64());
    assert_passed(name, &rows);
    assert_eq!(be.live_bytes(), 0, "{name} leaked device memory");
}

fn split_plans_match_cpu_ref_on_small_tables() {
    let name = "split_plans_match_cpu_ref_on_small_tables";
    let be = backend(name, WgpuOptions { plan_binding_limit: Some(SMALL_LIMIT), ..WgpuOptions::default() });
    let cpu = Ops::new(switchyard_cpu_ref::cpu_backend());
    let wg = Ops::new(be.clone());
    // Under 16 KiB every registered case with more than a few rows' bytes of table splits, e.g.
    // embed_gather_bf16 at h 5376, vocab 40 (a window a row) and lm_head at vocab 1001, hdim 136:
    assert_eq!(windows(40, 2 * 5376, SMALL_LIMIT), 40);
    assert_eq!(windows(1001, 2 * 136, SMALL_LIMIT), 18);
    let mut rows = Vec::new();
    for sig in split_kernels() {
        rows.extend(parity::check_kernel(&cpu, &wg, sig, 0x5eed));
    }
    assert_passed(name, &rows);
    assert_eq!(be.live_bytes(), 0, "{name} leaked device memory");
}

/// The grouped expert kernels under limits that split their larger cases:
/// per kernel, the limit and a case's (experts, bytes an expert) with the
/// windows it must split into, so the test cannot pass without splitting.
fn expert_windows_match_cpu_ref() {
    let name = "expert_windows_match_cpu_ref";
    let cpu = Ops::new(switchyard_cpu_ref::cpu_backend());
    let kernels: [(&'static KernelSig, u64, (u64, u64, usize)); 3] = [
        // gate_up at e 16, inter 704, K 1408: 3.96 MB an expert, two a window.
        (&MOE_GATE_UP_GELU_BF16, 8 << 20, (16, 2 * 704 * 1408 * 2, 8)),
        // The 192-expert case (N 352, K 200: 140800 bytes an expert), one a window.
        (&MOE_GROUPED_GEMM_BF16, 256 << 10, (192, 352 * 200 * 2, 192)),
        // NVFP4 codes at e 16, N 128, K 208: 13312 bytes an expert, four a window.
        (&MOE_GROUPED_W4A16, 64 << 10, (16, 208 / 2 * 128, 4)),
    ];
    let mut rows = Vec::new();
    for (sig, limit, (e, expert_bytes, want)) in kernels {
        assert_eq!(windows(e, expert_bytes, limit), want, "{}", sig.symbol);
        let be = backend(name, WgpuOptions { plan_binding_limit: Some(limit), ..WgpuOptions::default() });
        rows.extend(parity::check_kernel(&cpu, &Ops::new(be.clone()), sig, 0x5eed));
        assert_eq!(be.live_bytes(), 0, "{name} leaked device memory");
    }
    assert_passed(name, &rows);
}

/// A table at byte offset 4 of its allocation: windows start below it (the
/// binding's alignment), its Params word is not a multiple of 4 (the word
/// paths), and its last window ends before the allocation does.
fn split_tables_at_an_unaligned_offset_match_cpu_ref() {
    let name = "split_tables_at_an_unaligned_offset_match_cpu_ref";
    let be = backend(name, WgpuOptions { plan_binding_limit: Some(SMALL_LIMIT), ..WgpuOptions::default() });
    let cpu = switchyard_cpu_ref::cpu_backend();
    let (vocab, h, m, rows) = (301usize, 136usize, 3usize, 9usize);
    let mut g = Gen::new(7);
    let (tv, table) = g.bf16(vocab * h, 0.001, 0.2);
    let (hv, hb) = g.bf16(m * h, 0.01, 2.0);
    let (mut ids, _) = g.i32(rows, 0, vocab as i32);
    ids[3] = -2;
    ids[5] = vocab as i32 - 1;
    let ids = bytes::i32_bytes(&ids);
    let mut padded = vec![0x55u8; 4];
    padded.extend(&table);
    padded.extend([0x55u8; 12]);
    let run = |be: &Arc<dyn Backend>| -> (Vec<u8>, Vec<u8>) {
        let ops = Ops::new(be.clone());
        let t = DeviceBuffer::from_bytes(be, &padded).unwrap();
        let tr = t.slice(4, table.len()).unwrap();
        let (hd, id) = (DeviceBuffer::from_bytes(be, &hb).unwrap(), DeviceBuffer::from_bytes(be, &ids).unwrap());
        let (emb, logits) = (DeviceBuffer::zeroed(be, 2 * rows * h).unwrap(), DeviceBuffer::zeroed(be, 4 * m * vocab).unwrap());
        ops.embed_gather_bf16(emb.region(), tr, id.region(), rows, vocab, h, 2.0).unwrap();
        ops.lm_head_logits_bf16(logits.region(), hd.region(), tr, m, vocab, h, 0.0).unwrap();
        (emb.to_vec().unwrap(), logits.to_vec().unwrap())
    };
    assert_eq!(windows(vocab as u64, 2 * h as u64, SMALL_LIMIT), 6);
    let (we, wl) = run(&be);
    let (ce, cl) = run(&cpu);
    assert_eq!(we, ce, "embedding rows differ from the CPU reference");
    let (wl, cl) = (bytes::f32_from_bytes(&wl), bytes::f32_from_bytes(&cl));
    for (k, (a, b)) in wl.iter().zip(&cl).enumerate() {
        let (i, v) = (k / vocab, k % vocab);
        let bound: f32 = (0..h).map(|j| (hv[i * h + j] * tv[v * h + j]).abs()).sum();
        assert!((a - b).abs() <= 1e-5 * bound, "logit {k}: wgpu {a}, cpu {b}, bound {bound}");
    }
}

switchyard_test_harness::tests!(plans_split_tables_by_rows);
switchyard_test_harness::tests!(needs "wgpu":
    tables_past_one_binding_match_cpu_ref,
    split_plans_match_cpu_ref_on_small_tables,
    split_tables_at_an_unaligned_offset_match_cpu_ref,
    expert_windows_match_cpu_ref,
);
switchyard_test_harness::main!(common::probe);
