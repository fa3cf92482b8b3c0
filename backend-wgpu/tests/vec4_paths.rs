//! The memory-bound WGSL kernels have a 16-byte (vec4<u32>) fast path, taken
//! when the row length allows it and every pointer's word offset in its
//! binding is a multiple of 4, and a word-at-a-time fallback. The parity
//! catalogue allocates each buffer on its own (offset 0) and uses small,
//! odd shapes, so it mostly reaches one of them. Here every kernel runs
//! against the CPU reference at production-like widths (5376), rows longer
//! than the register-cached burst (10240), and with every argument placed
//! 0, 4, 8 or 16 bytes into its allocation (4 and 8 force the fallback, 16
//! a vector path with a nonzero word offset). Outputs are poisoned first.
//! Skipped (visibly) without an adapter unless SWITCHYARD_REQUIRE_WGPU=1.
use std::sync::Arc;
use switchyard_core::codec::bytes;
use switchyard_core::compare::bf16_ulp_distance;
use switchyard_core::{Backend, DeviceBuffer, Region, Result};
use switchyard_kernels::parity::Gen;
use switchyard_kernels::Ops;

mod common;
use common::wgpu;

/// Runs `f` on `be` with outputs (poisoned with 0xff bytes) then inputs, each
/// placed `lead` bytes into its own allocation; returns the outputs.
fn run(be: &Arc<dyn Backend>, lead: usize, outs: &[usize], ins: &[&[u8]], f: &dyn Fn(&Ops, &[Region]) -> Result<()>) -> Vec<Vec<u8>> {
    let mut bufs = Vec::new();
    for &n in outs {
        bufs.push(DeviceBuffer::from_bytes(be, &vec![0xffu8; lead + n]).unwrap());
    }
    for d in ins {
        let mut v = vec![0x5au8; lead];
        v.extend_from_slice(d);
        bufs.push(DeviceBuffer::from_bytes(be, &v).unwrap());
    }
    let regions: Vec<Region> = bufs.iter().map(|b| b.region().tail(lead).unwrap()).collect();
    f(&Ops::new(be.clone()), &regions).unwrap();
    be.synchronize().unwrap();
    outs.iter().enumerate().map(|(i, _)| bufs[i].to_vec().unwrap()[lead..].to_vec()).collect()
}

/// Compares (what, wgpu output, reference output) and panics naming `what`.
type Check = dyn Fn(&str, &[u8], &[u8]);

/// cpu-ref and wgpu outputs for every lead.
fn both(test: &str, outs: &[usize], ins: &[&[u8]], f: &dyn Fn(&Ops, &[Region]) -> Result<()>, check: &Check) {
    let gpu = wgpu(test);
    let cpu = switchyard_cpu_ref::cpu_backend();
    for lead in [0usize, 4, 8, 16] {
        let want = run(&cpu, lead, outs, ins, f);
        let got = run(&gpu, lead, outs, ins, f);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            check(&format!("{test} lead={lead} output {k}"), g, w);
        }
    }
}

fn bf16_within(ulps: u32) -> impl Fn(&str, &[u8], &[u8]) {
    move |what, got, want| {
        let (g, w) = (bytes::bf16_bits_from_bytes(got), bytes::bf16_bits_from_bytes(want));
        for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
            let nan = |x: u16| (x & 0x7fff) > 0x7f80;
            if nan(b) {
                assert!(nan(a), "{what}: element {i}: wgpu {a:#06x}, reference NaN");
                continue;
            }
            assert!(bf16_ulp_distance(a, b) <= ulps, "{what}: element {i}: wgpu {a:#06x}, reference {b:#06x}");
        }
    }
}

fn exact(what: &str, got: &[u8], want: &[u8]) {
    let bad = got.iter().zip(want).position(|(a, b)| a != b);
    assert!(bad.is_none(), "{what}: first difference at byte {bad:?}");
}

/// Widths: production (5376), one past the register burst (10240), odd-word (42).
const DIMS: [(usize, usize); 3] = [(3, 5376), (2, 10240), (3, 42)];

fn norms_on_every_path() {
    let mut g = Gen::new(11);
    for (rows, dim) in DIMS {
        let n = rows * dim;
        let (_, x) = g.bf16(n, 0.01, 3.0);
        let (_, x2) = g.bf16(n, 0.5, 4.0);
        let (_, w) = g.bf16(dim, 0.1, 2.0);
        let (_, w2) = g.bf16(dim, 0.05, 0.5);
        let (_, ls) = g.f32(1, 0.2, 1.5);
        let t = format!("rmsnorm dim={dim}");
        both(&t, &[2 * n], &[&x, &w], &|o, a| o.rmsnorm_bf16(a[0], a[1], Some(a[2]), rows, dim, 1e-6), &bf16_within(1));
        // Outputs computed from a rounded intermediate: 2 ulp (kernels/src/norm/mod.rs, DERIVED).
        let t = format!("sandwich dim={dim}");
        both(
            &t,
            &[2 * n, 2 * n],
            &[&x2, &x, &w2, &w],
            &|o, a| o.post_norm_add_pre_norm_bf16(a[0], Some(a[1]), a[2], a[3], Some(a[4]), Some(a[5]), rows, dim, 1e-6),
            &bf16_within(2),
        );
        let t = format!("layer_out dim={dim}");
        both(
            &t,
            &[2 * n],
            &[&x2, &x, &w2, &ls],
            &|o, a| o.layer_out_bf16(a[0], a[1], a[2], Some(a[3]), a[4], rows, dim, 1e-6),
            &bf16_within(2),
        );
    }
}

fn gathers_on_every_path() {
    let mut g = Gen::new(12);
    let vocab = 37;
    for h in [5376usize, 10240, 42, 40] {
        let rows = 5;
        let ids = bytes::i32_bytes(&[3, -1, 36, 37, 0]);
        let (_, table) = g.bf16(vocab * h, 0.01, 3.0);
        let t = format!("embed_gather_bf16 h={h}");
        both(&t, &[2 * rows * h], &[&table, &ids], &|o, a| o.embed_gather_bf16(a[0], a[1], a[2], rows, vocab, h, 1.7), &bf16_within(1));
        let t = format!("gather_rows_bf16 h={h}");
        both(&t, &[2 * rows * h], &[&table, &ids], &|o, a| o.gather_rows_bf16(a[0], a[1], a[2], rows, vocab, h), &bf16_within(0));
        if h % 8 == 0 {
            let (codes, scales, _) = g.fp8_table(vocab, h);
            let sc = bytes::f32_bytes(&scales);
            let t = format!("embed_gather_fp8 h={h}");
            both(
                &t,
                &[2 * rows * h],
                &[&codes, &sc, &ids],
                &|o, a| o.embed_gather_fp8(a[0], a[1], a[2], a[3], rows, vocab, h, 1.7),
                &bf16_within(1),
            );
        }
    }
}

fn copy_on_every_path() {
    let mut g = Gen::new(13);
    for n in [1usize, 4095, 4096, 4097, 3 * 4096 + 5] {
        let (_, d) = g.i32(n, i32::MIN, i32::MAX);
        both(&format!("copy_u32 n={n}"), &[4 * n], &[&d], &|o, a| o.copy_u32(a[0], a[1], n), &exact);
    }
}

/// f32 outputs of dot products: |got - want| <= 1e-5 · scale (scale bounds Σ|ab| per element).
fn f32_within(scale: f32) -> impl Fn(&str, &[u8], &[u8]) {
    move |what, got, want| {
        let (g, w) = (bytes::f32_from_bytes(got), bytes::f32_from_bytes(want));
        for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
            assert!((a - b).abs() <= 1e-5 * scale, "{what}: element {i}: wgpu {a}, reference {b}");
        }
    }
}

fn lm_head_on_every_path() {
    let mut g = Gen::new(14);
    // 5376: the production width (16-byte fp8 path); 5384: hdim % 16 == 8 (fp8 word path, bf16 vector path).
    for (m, vocab, hdim) in [(1usize, 70usize, 5376usize), (16, 45, 5376), (2, 33, 5384), (7, 40, 512)] {
        let (_, h) = g.bf16(m * hdim, -1.0, 1.0);
        let (codes, scales, _) = g.fp8_table(vocab, hdim);
        let sc = bytes::f32_bytes(&scales);
        // |h| <= 1, |e4m3 · scale| <= 1: Σ|ab| <= hdim.
        let t = format!("lm_head_logits_fp8 m={m} hdim={hdim}");
        both(
            &t,
            &[4 * m * vocab],
            &[&h, &codes, &sc],
            &|o, a| o.lm_head_logits_fp8(a[0], a[1], a[2], a[3], m, vocab, hdim, 0.0),
            &f32_within(hdim as f32),
        );
        let (_, table) = g.bf16(vocab * hdim, -1.0, 1.0);
        let t = format!("lm_head_logits_bf16 m={m} hdim={hdim}");
        both(
            &t,
            &[4 * m * vocab],
            &[&h, &table],
            &|o, a| o.lm_head_logits_bf16(a[0], a[1], a[2], m, vocab, hdim, 30.0),
            &f32_within(hdim as f32),
        );
    }
}

fn argmax_on_every_path() {
    let mut g = Gen::new(15);
    for (m, vocab) in [(3usize, 12288usize), (2, 4100), (16, 1024)] {
        let (mut v, _) = g.f32(m * vocab, -4.0, 4.0);
        // Ties across chunks and within a vector, an excluded maximum, and a NaN.
        v[5000 % (m * vocab)] = 9.0;
        v[(vocab + 3) % (m * vocab)] = 9.0;
        v[vocab - 1] = 9.0;
        v[vocab - 2] = f32::NAN;
        v[2 * vocab % (m * vocab) + 7] = 20.0;
        let d = bytes::f32_bytes(&v);
        let t = format!("argmax_rows m={m} vocab={vocab}");
        both(&t, &[4 * m, 4 * m], &[&d], &|o, a| o.argmax_rows(a[0], a[1], a[2], m, vocab, 7, -1), &exact);
    }
}

fn qkv_prep_on_every_path() {
    use switchyard_kernels::rope_kv::{rope_table, QkvPrep};
    let mut g = Gen::new(16);
    // hd 256 and 64: the vector entry (16 and 4 lanes a head vector); 40: the word entry.
    for (rows, nh, nkv, hd) in [(3usize, 4usize, 2usize, 256usize), (5, 3, 1, 64), (2, 2, 1, 40)] {
        let max_pos = 7;
        let num_slots = rows + 2;
        let (_, q) = g.bf16(rows * nh * hd, 0.01, 3.0);
        let (_, k) = g.bf16(rows * nkv * hd, 0.01, 3.0);
        let (_, v) = g.bf16(rows * nkv * hd, 0.01, 3.0);
        let (_, qn) = g.bf16(hd, 0.1, 2.0);
        let (_, kn) = g.bf16(hd, 0.1, 2.0);
        let cs = bytes::f32_bytes(&rope_table(max_pos, hd, 10000.0, hd / 2));
        // The last row's position is out of the table (NaN rows); slot -1 skips a KV write.
        let mut pos: Vec<i32> = (0..rows as i32).map(|r| (3 * r + 1) % max_pos as i32).collect();
        pos[rows - 1] = max_pos as i32;
        let mut slot: Vec<i32> = (0..rows as i32).map(|r| num_slots as i32 - 1 - r).collect();
        slot[0] = -1;
        let (pos, slot) = (bytes::i32_bytes(&pos), bytes::i32_bytes(&slot));
        let pool = 2 * num_slots * nkv * hd;
        let t = format!("qkv_prep_bf16 rows={rows} nh={nh} nkv={nkv} hd={hd}");
        both(
            &t,
            &[2 * rows * nh * hd, pool, pool],
            &[&q, &k, &v, &qn, &kn, &cs, &pos, &slot],
            &|o, a| o.qkv_prep_bf16(&QkvPrep::owning_kv(std::array::from_fn(|i| a[i]), [rows, nh, nkv, hd], max_pos, num_slots, 1e-6)),
            // RoPE of a rounded norm output: 2 ulp (kernels/src/rope_kv/mod.rs, DERIVED).
            &bf16_within(2),
        );
    }
}

switchyard_test_harness::tests!(needs "wgpu": norms_on_every_path, gathers_on_every_path, copy_on_every_path, lm_head_on_every_path, argmax_on_every_path, qkv_prep_on_every_path);
switchyard_test_harness::main!(common::probe);
