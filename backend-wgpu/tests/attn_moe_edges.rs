//! Attention and MoE expert kernels on wgpu against the CPU reference in the
//! cases the parity catalogue does not reach: NaN rows for invalid
//! sequences, positions, pages, slots and contexts (prefill and decode,
//! decode in one chunk and in several with idle ones), rows of
//! different sequences interleaved within one workgroup, query-head groups
//! wider than one workgroup (GQA chunks), the widest head size with many
//! heads, and the MoE gather / combine poison rules. Outputs are poisoned
//! before each run; NaN rows must match position for position, the rest
//! within the attention NMSE. Skipped (visibly) without an adapter unless
//! SWITCHYARD_REQUIRE_WGPU=1.
use std::sync::Arc;
use switchyard_core::codec::{bf16_value, bytes};
use switchyard_core::compare::nmse;
use switchyard_core::{Backend, DeviceBuffer, Region, Result};
use switchyard_kernels::attn::{AttnDecode, AttnParams, KvView, ATTN_NMSE};
use switchyard_kernels::parity::Gen;
use switchyard_kernels::Ops;

mod common;
use common::wgpu;

/// Uploads `inputs` after a poisoned output of `out_bytes` (buffer 0), runs
/// `f` with all of them, and returns the output bytes.
fn run_buffers(be: &Arc<dyn Backend>, out_bytes: usize, inputs: &[&[u8]], f: &dyn Fn(&Ops, &[DeviceBuffer]) -> Result<()>) -> Vec<u8> {
    let mut bufs = vec![DeviceBuffer::from_bytes(be, &vec![0xffu8; out_bytes]).unwrap()];
    bufs.extend(inputs.iter().map(|d| DeviceBuffer::from_bytes(be, d).unwrap()));
    f(&Ops::new(be.clone()), &bufs).unwrap();
    be.synchronize().unwrap();
    bufs[0].to_vec().unwrap()
}

/// [`run_buffers`] for launchers that take regions.
fn run_regions(be: &Arc<dyn Backend>, out_bytes: usize, inputs: &[&[u8]], f: &dyn Fn(&Ops, &[Region]) -> Result<()>) -> Vec<u8> {
    run_buffers(be, out_bytes, inputs, &|o, b| f(o, &b.iter().map(|b| b.region()).collect::<Vec<_>>()))
}

fn bf16s(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(2).map(|c| bf16_value(u16::from_le_bytes([c[0], c[1]])) as f64).collect()
}

/// Same NaN positions, NMSE of the rest within `tol`.
fn check(what: &str, got: &[u8], want: &[u8], tol: f64) {
    let (g, w) = (bf16s(got), bf16s(want));
    let mut ga = Vec::new();
    let mut wa = Vec::new();
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        assert_eq!(a.is_nan(), b.is_nan(), "{what}: element {i}: wgpu {a}, reference {b}");
        if !b.is_nan() {
            ga.push(a);
            wa.push(b);
        }
    }
    let e = if wa.is_empty() { 0.0 } else { nmse(&ga, &wa) };
    assert!(e <= tol, "{what}: NMSE {e} > {tol}");
}

struct Cache {
    k: Vec<u8>,
    v: Vec<u8>,
    table: Vec<i32>,
    num_slots: usize,
    max_pages: usize,
}

fn cache(g: &mut Gen, seqs: usize, max_pages: usize, nkv: usize, hd: usize, page: usize) -> Cache {
    let pages = seqs * max_pages + 1;
    // Pages in reverse order, so that page and sequence order disagree.
    let table: Vec<i32> = (0..seqs * max_pages).map(|i| (pages - 1 - i) as i32).collect();
    let num_slots = pages * page;
    let (_, k) = g.bf16(num_slots * nkv * hd, 0.01, 1.0);
    let (_, v) = g.bf16(num_slots * nkv * hd, 0.01, 1.0);
    Cache { k, v, table, num_slots, max_pages }
}

fn prefill_edges_match_the_reference() {
    let be = wgpu("prefill_edges_match_the_reference");
    let cpu = switchyard_cpu_ref::cpu_backend();
    let mut g = Gen::new(71);
    // (nh, nkv, hd, page, window): a wide GQA group at hd 512, a narrow head, a window.
    for (nh, nkv, hd, page, window) in [(16usize, 1usize, 512usize, 8usize, 0usize), (4, 2, 8, 4, 0), (8, 2, 96, 16, 11)] {
        let (seqs, max_pages) = (3usize, 5usize);
        let mut c = cache(&mut g, seqs, max_pages, nkv, hd, page);
        // Sequence 2 has an invalid page in the middle and one past the pool.
        c.table[2 * max_pages + 2] = -1;
        c.table[2 * max_pages + 4] = (c.num_slots / page + 3) as i32;
        let cap = (max_pages * page) as i32;
        // Interleaved sequences, then the bad rows: sequence out of range, negative
        // position, position past the table, and positions before / on / past the bad pages.
        let mut rows: Vec<(i32, i32)> = (0..30).map(|i| (i % 2, (i * 5 + 3) % cap)).collect();
        rows.extend([(3, 0), (-1, 2), (0, -1), (1, cap), (2, page as i32 - 1)]);
        rows.extend([(2, 2 * page as i32), (2, 3 * page as i32 + 1), (2, cap - 1)]);
        let (seq_of_row, pos): (Vec<i32>, Vec<i32>) = rows.iter().copied().unzip();
        let n = rows.len();
        let (_, q) = g.bf16(n * nh * hd, 0.01, 1.0);
        let params = AttnParams { nh, window, scale: 0.07 };
        let (tb, sb, pb) = (bytes::i32_bytes(&c.table), bytes::i32_bytes(&seq_of_row), bytes::i32_bytes(&pos));
        let inputs: [&[u8]; 6] = [&q, &c.k, &c.v, &tb, &sb, &pb];
        let (max_pages, num_slots) = (c.max_pages, c.num_slots);
        let go = |o: &Ops, a: &[Region]| {
            let kv = KvView { k_pool: a[2], v_pool: a[3], block_table: a[4], nkv, hd, page, max_pages, num_seqs: seqs, num_slots };
            o.attention_prefill(a[0], a[1], a[5], a[6], n, &kv, &params)
        };
        let got = run_regions(&be, n * nh * hd * 2, &inputs, &go);
        let want = run_regions(&cpu, n * nh * hd * 2, &inputs, &go);
        check(&format!("prefill nh={nh} nkv={nkv} hd={hd} window={window}"), &got, &want, ATTN_NMSE);
        // The bad rows really are NaN, the interleaved ones really are not.
        let row = |r: usize| bf16s(&got[r * nh * hd * 2..(r + 1) * nh * hd * 2]);
        assert!(row(0).iter().all(|x| !x.is_nan()) && row(31).iter().all(|x| x.is_nan()));
        assert!(row(34).iter().all(|x| !x.is_nan()) && row(35).iter().all(|x| x.is_nan()) && row(n - 1).iter().all(|x| x.is_nan()));
    }
}

fn decode_edges_match_the_reference() {
    let be = wgpu("decode_edges_match_the_reference");
    let cpu = switchyard_cpu_ref::cpu_backend();
    let mut g = Gen::new(72);
    // 6 pages: one chunk per sequence. 80 pages: several chunks for the long
    // contexts, and idle chunks for the short ones (max_ctx is the capacity).
    for max_pages in [6usize, 80] {
        for (nh, nkv, hd, page, window) in [(16usize, 2usize, 512usize, 8usize, 0usize), (64, 1, 128, 16, 0), (6, 3, 8, 4, 9)] {
            let batch = 5usize;
            let mut c = cache(&mut g, batch, max_pages, nkv, hd, page);
            let cap = max_pages * page;
            // ctx 0 and past max_ctx are invalid; sequence 3 has a bad page inside its context.
            let ctx: Vec<i32> = vec![cap as i32, 0, (cap + 1) as i32, (2 * page + 3) as i32, (page + 1) as i32];
            c.table[3 * max_pages + 1] = -7;
            let (_, q) = g.bf16(batch * nh * hd, 0.01, 1.0);
            let params = AttnParams { nh, window, scale: 0.05 };
            let (tb, cb) = (bytes::i32_bytes(&c.table), bytes::i32_bytes(&ctx));
            let inputs: [&[u8]; 5] = [&q, &c.k, &c.v, &tb, &cb];
            let num_slots = c.num_slots;
            let go = |o: &Ops, a: &[Region]| {
                let kv = KvView { k_pool: a[2], v_pool: a[3], block_table: a[4], nkv, hd, page, max_pages, num_seqs: batch, num_slots };
                let d = AttnDecode { out: a[0], q: a[1], ctx_len: a[5], batch, max_ctx: cap };
                o.attention_decode(&d, &kv, &params)
            };
            let got = run_regions(&be, batch * nh * hd * 2, &inputs, &go);
            let want = run_regions(&cpu, batch * nh * hd * 2, &inputs, &go);
            check(&format!("decode nh={nh} nkv={nkv} hd={hd} window={window} max_ctx={cap}"), &got, &want, ATTN_NMSE);
            let row = |b: usize| bf16s(&got[b * nh * hd * 2..(b + 1) * nh * hd * 2]);
            assert!(row(0).iter().all(|x| !x.is_nan()) && row(4).iter().all(|x| !x.is_nan()));
            assert!([1, 2, 3].iter().all(|&b| row(b).iter().all(|x| x.is_nan())));
        }
    }
}

fn gather_and_combine_poison_rules_match_the_reference() {
    let be = wgpu("gather_and_combine_poison_rules_match_the_reference");
    let cpu = switchyard_cpu_ref::cpu_backend();
    let mut g = Gen::new(73);
    let (rows, k, h) = (6usize, 2usize, 70usize);
    let (_, x) = g.bf16(rows * h, 0.01, 2.0);
    // A valid pair, an empty slot, a negative pair other than −1, a pair past the tokens.
    let pairs: Vec<i32> = vec![3, -1, -5, (rows * k) as i32, 11, 0];
    let pb = bytes::i32_bytes(&pairs);
    let n = pairs.len();
    let go = |o: &Ops, a: &[Region]| o.moe_gather_bf16(a[0], a[1], a[2], n, k, h, rows);
    let got = run_regions(&be, n * h * 2, &[&x, &pb], &go);
    assert_eq!(got, run_regions(&cpu, n * h * 2, &[&x, &pb], &go), "moe_gather");

    let ny = 5usize;
    let (yv, _) = g.f32(ny * h, 0.01, 2.0);
    let y = bytes::bf16_bytes(&yv);
    // Token 1 drops a pair, token 2 has a slot past n, token 3 a slot below −1.
    let slots: Vec<i32> = vec![0, 4, -1, 2, 1, 5, -2, 3, 4, 4, 1, 0];
    let (_, w) = g.f32(slots.len(), 0.05, 1.0);
    let sb = bytes::i32_bytes(&slots);
    let go = |o: &Ops, a: &[Region]| o.moe_combine_bf16(a[0], a[1], a[2], a[3], rows, k, h, ny);
    let got = run_regions(&be, rows * h * 2, &[&y, &sb, &w], &go);
    let want = run_regions(&cpu, rows * h * 2, &[&y, &sb, &w], &go);
    check("moe_combine", &got, &want, 1e-6);
    assert!(bf16s(&got[2 * h * 2..4 * h * 2]).iter().all(|v| v.is_nan()));
    assert!(bf16s(&got[..2 * h * 2]).iter().all(|v| !v.is_nan()));
}

switchyard_test_harness::tests!(needs "wgpu": prefill_edges_match_the_reference, decode_edges_match_the_reference, gather_and_combine_poison_rules_match_the_reference);
switchyard_test_harness::main!(common::probe);
