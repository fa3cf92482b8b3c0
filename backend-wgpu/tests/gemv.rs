//! The decode GEMVs on wgpu beyond the parity table: odd output widths and
//! odd segment widths (bf16 outputs that share a u32 word with an output of
//! another invocation or workgroup, stored half by half), an odd element
//! count (the last word's other half is not the kernel's), an output at a
//! word offset that is not a multiple of 16 bytes, one-pass and split-K
//! plans, against the CPU reference (NMSE, as the contract allows any K
//! order), with the bytes around the output untouched and repeated launches
//! byte-identical. Skipped (visibly) without an adapter unless
//! SWITCHYARD_REQUIRE_WGPU=1.
use std::sync::Arc;
use switchyard_core::codec::bf16_value;
use switchyard_core::codec::bytes::bf16_bits_from_bytes;
use switchyard_core::compare::nmse;
use switchyard_core::{Backend, DeviceBuffer, Region, Result};
use switchyard_kernels::gemm::REORDERED_NMSE;
use switchyard_kernels::parity::Gen;
use switchyard_kernels::Ops;

mod common;
use common::wgpu;

/// Bytes of sentinel before the output (a word, so the output starts off a
/// 16-byte boundary) and after it.
const LEAD: usize = 4;
const TRAIL: usize = 10;
const SENTINEL: u8 = 0xa5;

/// Runs `launch(a, b, c)` on `be` with c (`out` bf16 elements, NaN-poisoned)
/// at byte LEAD of a sentinel-filled buffer; returns the output bytes after
/// checking the sentinels.
fn run(be: &Arc<dyn Backend>, a: &[u8], b: &[u8], out: usize, launch: &dyn Fn(&Ops, Region, Region, Region) -> Result<()>) -> Vec<u8> {
    let o = Ops::new(be.clone());
    let (pa, pb) = (DeviceBuffer::from_bytes(be, a).unwrap(), DeviceBuffer::from_bytes(be, b).unwrap());
    let mut init = vec![SENTINEL; LEAD + 2 * out + TRAIL];
    init[LEAD..LEAD + 2 * out].fill(0xff);
    let pc = DeviceBuffer::from_bytes(be, &init).unwrap();
    launch(&o, pa.region(), pb.region(), pc.slice(LEAD, 2 * out).unwrap()).unwrap();
    let got = pc.to_vec().unwrap();
    let name = be.info().backend.name();
    assert!(got[..LEAD].iter().chain(&got[LEAD + 2 * out..]).all(|&x| x == SENTINEL), "{name}: bytes around the output changed");
    got[LEAD..LEAD + 2 * out].to_vec()
}

/// wgpu against the CPU reference, and wgpu against itself.
fn check(be: &Arc<dyn Backend>, label: &str, a: &[u8], b: &[u8], out: usize, launch: &dyn Fn(&Ops, Region, Region, Region) -> Result<()>) {
    let cpu: Arc<dyn Backend> = switchyard_cpu_ref::cpu_backend();
    let want: Vec<f64> = bf16_bits_from_bytes(&run(&cpu, a, b, out, launch)).into_iter().map(|x| bf16_value(x) as f64).collect();
    let first = run(be, a, b, out, launch);
    let got: Vec<f64> = bf16_bits_from_bytes(&first).into_iter().map(|x| bf16_value(x) as f64).collect();
    assert!(got.iter().all(|x| x.is_finite()), "{label}: output left unwritten (NaN poison)");
    let e = nmse(&got, &want);
    assert!(e <= REORDERED_NMSE, "{label}: NMSE {e:e} > {REORDERED_NMSE:e}");
    assert!(run(be, a, b, out, launch) == first, "{label}: a second launch gave different bytes");
}

fn operands(g: &mut Gen, m: usize, rows: usize, k: usize) -> (Vec<u8>, Vec<u8>) {
    (g.bf16(m * k, 0.01, 1.0).1, g.bf16(rows * k, 0.01, 0.5).1)
}

fn odd_widths_and_segments_store_each_bf16_once_without_touching_neighbours() {
    let be = wgpu("odd_widths_and_segments_store_each_bf16_once_without_touching_neighbours");
    let mut g = Gen::new(0x9e3c);
    // (m, n, k, seg1, seg2): one pass (k < 512) and split K; odd segment
    // widths, an empty middle segment, odd m · n, ragged row blocks.
    for (m, n, k, seg1, seg2) in [
        (3, 97, 264, 33, 70),
        (16, 257, 264, 1, 256),
        (2, 3, 8, 1, 2),
        (5, 131, 1032, 45, 45),
        (1, 129, 2048, 129, 129),
        (7, 301, 1544, 99, 200),
    ] {
        let (a, b) = operands(&mut g, m, n, k);
        let label = format!("dense_gemv_bf16 m={m} n={n} k={k} segs={seg1},{seg2}");
        check(&be, &label, &a, &b, m * n, &|o, a, b, c| o.dense_gemv_bf16(a, b, c, m, n, k, [seg1, seg2]));
    }
    // (m, n, k): one pass and split K, odd n (and m · n), ragged column blocks.
    for (m, n, k) in [(3, 67, 264), (16, 65, 2056), (5, 33, 1032), (1, 129, 520)] {
        let (a, b) = operands(&mut g, m, 2 * n, k);
        let label = format!("dense_gemv_gelu_mul_bf16 m={m} n={n} k={k}");
        check(&be, &label, &a, &b, m * n, &|o, a, b, c| o.dense_gemv_gelu_mul_bf16(a, b, c, m, n, k));
    }
    assert_eq!(be.live_bytes(), 0, "the test leaked device memory");
}

switchyard_test_harness::tests!(needs "wgpu": odd_widths_and_segments_store_each_bf16_once_without_touching_neighbours);
switchyard_test_harness::main!(common::probe);
