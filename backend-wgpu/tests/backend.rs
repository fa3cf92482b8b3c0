//! The driver beneath the kernels: byte-exact memory operations at any
//! alignment, argument offsets, aliasing, grid folding, errors, and the
//! launch-overhead figure. Skipped (visibly) without an adapter unless
//! SWITCHYARD_REQUIRE_WGPU=1.
use std::sync::Arc;
use switchyard_core::codec::bytes;
use switchyard_core::{Backend, DeviceBuffer, Error, Region};
use switchyard_kernels::parity::{self, Gen};
use switchyard_kernels::rope_kv::{rope_table, QkvPrep};
use switchyard_kernels::Ops;
use switchyard_wgpu::{wgpu_backend_with, WgpuOptions};

mod common;
use common::{backend, down as download};

fn memory_operations_are_byte_exact_at_any_alignment() {
    let be = backend("memory_operations_are_byte_exact_at_any_alignment", WgpuOptions::default());
    let n = 1037;
    let init: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
    let a = DeviceBuffer::from_bytes(&be, &init).unwrap();
    let b = DeviceBuffer::new(&be, n).unwrap();
    let mut host = init.clone();
    assert_eq!(download(&be, a.addr(), n), host);

    // Unaligned upload inside the buffer: neighbours keep their bytes.
    for (off, len) in [(3usize, 5usize), (1, 2), (8, 3), (5, 700), (1030, 7), (0, 1)] {
        let data: Vec<u8> = (0..len).map(|i| (i * 13 + off) as u8 ^ 0x5a).collect();
        be.upload(a.at(off).unwrap(), &data).unwrap();
        host[off..off + len].copy_from_slice(&data);
        assert_eq!(download(&be, a.addr(), n), host, "upload at {off} len {len}");
    }
    // Unaligned downloads.
    for (off, len) in [(1usize, 1usize), (2, 9), (1033, 4), (7, 1000)] {
        assert_eq!(download(&be, a.at(off).unwrap(), len), host[off..off + len], "download at {off} len {len}");
    }
    // memset0 over aligned, unaligned and sub-word ranges.
    for (off, len) in [(1usize, 2usize), (6, 1), (13, 30), (64, 64), (999, 38)] {
        be.memset0(a.at(off).unwrap(), len).unwrap();
        host[off..off + len].fill(0);
        assert_eq!(download(&be, a.addr(), n), host, "memset0 at {off} len {len}");
    }
    // Copies across buffers (aligned: copy command; unaligned: shader) and within one buffer.
    let mut hb = vec![0u8; n];
    be.memset0(b.addr(), n).unwrap();
    for (d, s, len) in [(0usize, 0usize, 400usize), (5, 9, 77), (3, 0, 1), (512, 100, 301)] {
        be.copy(b.at(d).unwrap(), a.at(s).unwrap(), len).unwrap();
        hb[d..d + len].copy_from_slice(&host[s..s + len]);
        assert_eq!(download(&be, b.addr(), n), hb, "copy {s} -> {d} len {len}");
    }
    be.copy(a.at(600).unwrap(), a.at(3).unwrap(), 301).unwrap();
    host.copy_within(3..304, 600);
    assert_eq!(download(&be, a.addr(), n), host, "copy within one buffer");
    assert!(matches!(be.copy(a.at(10).unwrap(), a.at(12).unwrap(), 8), Err(Error::InvalidArgument { .. })));
    // Work recorded before an upload runs before it.
    be.memset0(a.addr(), 16).unwrap();
    be.upload(a.addr(), &[9u8; 8]).unwrap();
    assert_eq!(download(&be, a.addr(), 16), [[9u8; 8], [0u8; 8]].concat());
}

fn bad_addresses_and_sizes_are_typed_errors() {
    let be = backend("bad_addresses_and_sizes_are_typed_errors", WgpuOptions::default());
    let ops = Ops::new(be.clone());
    let x = DeviceBuffer::zeroed(&be, 4 * 64 + 2).unwrap();
    let out = DeviceBuffer::zeroed(&be, 4 * 64).unwrap();
    // A pointer 2 bytes into a buffer cannot be a WGSL word offset.
    let e = ops.rmsnorm_bf16(out.region(), x.slice(2, 4 * 64).unwrap(), None, 2, 64, 1e-6).unwrap_err();
    assert!(matches!(&e, Error::InvalidArgument { kernel, arg, .. } if kernel == "rmsnorm_bf16" && arg == "x"), "{e}");
    let e = ops.rmsnorm_bf16(out.region(), x.region(), None, 3, 64, 1e-6).unwrap_err();
    assert!(matches!(e, Error::OutOfBounds { .. }), "{e}");
    let max = be.info().max_alloc_bytes as usize;
    assert!(matches!(be.alloc(max.saturating_add(1)), Err(Error::InvalidArgument { .. })));
    assert!(matches!(be.alloc(0), Err(Error::InvalidArgument { .. })));
    let dead = be.alloc(64).unwrap();
    be.free(dead).unwrap();
    assert!(matches!(be.upload(dead, &[0; 4]), Err(Error::OutOfBounds { .. })));
    assert!(matches!(be.free(dead), Err(Error::OutOfBounds { .. })));
    let e = wgpu_backend_with(WgpuOptions { adapter: Some("no-such-adapter-xyzzy".into()), ..WgpuOptions::default() }).err().unwrap();
    assert!(matches!(&e, Error::Unavailable { reason, .. } if reason.contains("xyzzy")), "{e}");
}

/// Runs the same launch on cpu-ref and wgpu from identical inputs and returns both outputs.
fn both(
    be: &Arc<dyn Backend>,
    inputs: &[Vec<u8>],
    outputs: &[usize],
    run: &dyn Fn(&Ops, &[Region]) -> switchyard_core::Result<()>,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let go = |be: &Arc<dyn Backend>| {
        let bufs: Vec<DeviceBuffer> = inputs.iter().map(|d| DeviceBuffer::from_bytes(be, d).unwrap()).collect();
        let regions: Vec<Region> = bufs.iter().map(|b| b.region()).collect();
        run(&Ops::new(be.clone()), &regions).unwrap();
        be.synchronize().unwrap();
        outputs.iter().map(|&i| bufs[i].to_vec().unwrap()).collect::<Vec<_>>()
    };
    (go(&switchyard_cpu_ref::cpu_backend()), go(be))
}

fn max_ulp(a: &[u8], b: &[u8]) -> u32 {
    let (a, b) = (bytes::bf16_bits_from_bytes(a), bytes::bf16_bits_from_bytes(b));
    a.iter().zip(&b).map(|(&x, &y)| switchyard_core::compare::bf16_ulp_distance(x, y)).max().unwrap_or(0)
}

fn offsets_aliasing_and_null_weights() {
    let be = backend("offsets_aliasing_and_null_weights", WgpuOptions::default());
    let mut g = Gen::new(11);
    let (rows, dim) = (6, 1030);
    let n = rows * dim * 2;
    // Every tensor sits at a non-zero offset of a shared arena, past the storage offset alignment.
    let pad = 4 * 1000 + 8;
    let (_, resid) = g.bf16(rows * dim, 0.5, 4.0);
    let (_, x) = g.bf16(rows * dim, 0.01, 3.0);
    let (_, w) = g.bf16(dim, 0.1, 2.0);
    let mut arena = vec![0u8; pad];
    for t in [&resid, &x, &w] {
        arena.extend_from_slice(t);
        arena.extend_from_slice(&[0u8; 12]);
    }
    let (ro, xo, wo) = (pad, pad + n + 12, pad + 2 * n + 24);
    let normed_at = arena.len();
    arena.extend(vec![0u8; n]);
    // resid_out aliases resid; w_post is null (unscaled).
    let (cpu, gpu) = both(&be, &[arena], &[0], &|o, a| {
        let resid = a[0].slice(ro, n)?;
        let w_pre = a[0].slice(wo, 2 * dim)?;
        o.post_norm_add_pre_norm_bf16(resid, Some(a[0].slice(normed_at, n)?), resid, a[0].slice(xo, n)?, None, Some(w_pre), rows, dim, 1e-6)
    });
    let (c, w) = (&cpu[0], &gpu[0]);
    assert!(max_ulp(&w[ro..ro + n], &c[ro..ro + n]) <= 1, "resid_out (aliased) differs");
    assert!(max_ulp(&w[normed_at..normed_at + n], &c[normed_at..normed_at + n]) <= 1, "normed differs");
    assert_eq!(w[..pad], c[..pad], "bytes before the tensors changed");
}

fn folded_grids_match_cpu_ref() {
    // A fold limit of 16 folds every grid wider than 16 workgroups: x into y for 1-D grids, into z for 2-D ones.
    let opts = WgpuOptions { fold_limit: Some(16), ..WgpuOptions::default() };
    let be = backend("folded_grids_match_cpu_ref", opts);
    let cpu = switchyard_cpu_ref::cpu_backend();
    let rows = parity::run_all(&Ops::new(cpu), &Ops::new(be.clone()), 77, None);
    // Folding bugs show up as unwritten (poisoned) elements, guard writes or
    // wrong rows. Allowed, and only here because this seed differs from the
    // main parity test's: a 2-ulp difference in an output computed from an
    // intermediate that is itself rounded to bf16 (sandwich `normed` from
    // `resid_out`, layer_out's `out` from `s`, rope from the normed head).
    // The GPU's tree-ordered sum of squares differs from the reference's
    // index-order sum in the last f32 bits, which can move the intermediate
    // by 1 ulp (within tolerance) and the derived output by 2. Reported as a
    // finding: the 1-ulp rule cannot hold for these outputs on any parallel
    // backend unless the reference fixes the reduction order.
    let derived = |r: &parity::Row| {
        matches!(
            (r.kernel, r.output.as_str()),
            ("post_norm_add_pre_norm_bf16", "normed") | ("layer_out_bf16", "out") | ("qkv_prep_bf16", "q_out" | "k_pool")
        )
    };
    // Under a limit of 16 a 1-D grid folds up to 256 workgroups and y, z
    // never fold, so the wide cases (thousands of rows) and the 2-D grids
    // with more than 16 rows of y are refused by name: those shapes are
    // the main parity test's (real limit, 65535), not this one's.
    let unfoldable = |r: &parity::Row| matches!(&r.status, parity::Status::Error(e) if e.contains("cannot be folded"));
    let bad: Vec<_> = rows
        .iter()
        .filter(|r| {
            !(r.status.passed() || unfoldable(r) || (matches!(r.status, parity::Status::Mismatch(_)) && derived(r) && r.max_err <= 2.0))
        })
        .collect();
    assert!(bad.is_empty(), "{}", parity::table(&rows));
    let folded = rows.iter().filter(|r| !unfoldable(r)).count();
    assert!(folded >= 80, "only {folded} parity rows ran under the fold limit");

    // qkv_prep over 40 rows: a 2-D grid (rows, heads) folded into z.
    let mut g = Gen::new(5);
    let (rows, nh, nkv, hd, max_pos) = (40usize, 3usize, 2usize, 64usize, 50usize);
    let num_slots = rows + 3;
    let (_, q_raw) = g.bf16(rows * nh * hd, 0.01, 3.0);
    let (_, k_raw) = g.bf16(rows * nkv * hd, 0.01, 3.0);
    let (_, v_raw) = g.bf16(rows * nkv * hd, 0.01, 3.0);
    let (_, qn) = g.bf16(hd, 0.1, 2.0);
    let (_, kn) = g.bf16(hd, 0.1, 2.0);
    let (pos, _) = g.i32(rows, 0, max_pos as i32);
    let slots: Vec<i32> = (0..rows as i32).rev().collect();
    let pool = vec![0u8; num_slots * nkv * hd * 2];
    let inputs = vec![
        vec![0u8; rows * nh * hd * 2],
        pool.clone(),
        pool,
        q_raw,
        k_raw,
        v_raw,
        qn,
        kn,
        bytes::f32_bytes(&rope_table(max_pos, hd, 10000.0, hd / 2)),
        bytes::i32_bytes(&pos),
        bytes::i32_bytes(&slots),
    ];
    let (c, w) = both(&be, &inputs, &[0, 1, 2], &|o, a| {
        o.qkv_prep_bf16(&QkvPrep::owning_kv(std::array::from_fn(|i| a[i]), [rows, nh, nkv, hd], max_pos, num_slots, 1e-6))
    });
    for (i, name) in ["q_out", "k_pool", "v_pool"].iter().enumerate() {
        let d = max_ulp(&w[i], &c[i]);
        assert!(d <= 1, "{name} differs by {d} ulp with a z-folded grid");
    }
}

fn rows_longer_than_the_register_cache_match_cpu_ref() {
    // Norm kernels keep up to 8192 elements per row in registers; 8194 takes the re-reading path.
    let be = backend("rows_longer_than_the_register_cache_match_cpu_ref", WgpuOptions::default());
    let mut g = Gen::new(3);
    let (rows, dim) = (2usize, 8194usize);
    let n = rows * dim * 2;
    let (_, a) = g.bf16(rows * dim, 0.5, 4.0);
    // x from {±0.5, ±1, ±2}: every partial sum of squares is exact in f32, so
    // the GPU's reduction order cannot move inv and the results must agree to
    // the reference's roundings (this test is about the long-row code path).
    let (sel, _) = g.i32(rows * dim, 0, 6);
    let x = bytes::bf16_bytes(&sel.iter().map(|&k| [0.5, 1.0, 2.0, -0.5, -1.0, -2.0][k as usize]).collect::<Vec<f32>>());
    let (_, w) = g.bf16(dim, 0.1, 2.0);
    let (_, w2) = g.bf16(dim, 0.1, 2.0);
    let scalar = bytes::f32_bytes(&[0.7]);
    let inputs = vec![vec![0u8; n], vec![0u8; n], a, x, w, w2, scalar, vec![0u8; n]];
    let (c, gp) = both(&be, &inputs, &[0, 1, 7], &|o, b| {
        o.rmsnorm_bf16(b[0], b[3], Some(b[4]), rows, dim, 1e-6)?;
        o.post_norm_add_pre_norm_bf16(b[1], Some(b[7]), b[2], b[3], Some(b[4]), Some(b[5]), rows, dim, 1e-6)
    });
    let d: Vec<u32> = (0..3).map(|i| max_ulp(&gp[i], &c[i])).collect();
    assert!(d.iter().all(|&d| d <= 1), "rmsnorm, resid_out, normed differ on long rows by {d:?} ulp");
    let (c, gp) = both(&be, &inputs, &[0], &|o, b| o.layer_out_bf16(b[0], b[2], b[3], Some(b[4]), b[6], rows, dim, 1e-6));
    assert!(max_ulp(&gp[0], &c[0]) <= 1, "layer_out differs on long rows");
}

switchyard_test_harness::tests!(needs "wgpu": memory_operations_are_byte_exact_at_any_alignment, bad_addresses_and_sizes_are_typed_errors, offsets_aliasing_and_null_weights, folded_grids_match_cpu_ref, rows_longer_than_the_register_cache_match_cpu_ref);
switchyard_test_harness::main!(common::probe);
