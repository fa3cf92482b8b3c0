//! The CPU backend's own guarantees: bounds-checked memory and kernels,
//! typed errors, aliasing, and a failed kernel leaving memory untouched.
//! Numeric contracts are tested independently (f64) in the tests crate; the
//! few exact spot checks here pin behaviour only this backend defines.
use switchyard_core::codec::bytes::{bf16_bits_from_bytes, bf16_bytes, f32_bytes, f32_from_bytes, i32_bytes, i32_from_bytes};
use switchyard_core::{Arg, ArgSpec, Backend, DeviceBuffer, Error, KernelSig};
use switchyard_cpu_ref::{cpu_backend, CpuBackend};
use switchyard_kernels::rope_kv::QkvPrep;
use switchyard_kernels::{norm, Ops};

mod common;
use common::{buffer, down, poisoned_buffer, up};

fn oob(e: Error) -> (String, String, String) {
    match e {
        Error::OutOfBounds { kernel, arg, detail } => (kernel, arg, detail),
        other => panic!("expected OutOfBounds, got {other:?}"),
    }
}

#[test]
fn memory_operations_are_bounds_checked() {
    let be = cpu_backend();
    assert_eq!(be.name(), "cpu");
    let a = be.alloc(16).unwrap();
    let b = be.alloc(8).unwrap();
    assert_eq!(be.live_bytes(), 24);
    be.upload(a, &[7u8; 16]).unwrap();
    assert_eq!(oob(be.upload(a + 10, &[0u8; 8]).unwrap_err()).0, "upload");
    let (k, arg, _) = oob(be.download(a + 9, &mut [0u8; 8]).unwrap_err());
    assert_eq!((k.as_str(), arg.as_str()), ("download", "src"));
    assert_eq!(oob(be.memset0(b, 9).unwrap_err()).1, "dst");
    assert_eq!(oob(be.copy(b, a, 9).unwrap_err()).1, "dst");
    assert_eq!(oob(be.copy(a, b, 9).unwrap_err()).1, "src");
    assert!(matches!(be.copy(a + 4, a, 8).unwrap_err(), Error::InvalidArgument { .. }), "overlapping copy");
    be.copy(b, a + 8, 8).unwrap();
    assert_eq!(down(&be, b, 8), vec![7u8; 8]);
    be.memset0(a + 4, 4).unwrap();
    assert_eq!(down(&be, a, 8), [7, 7, 7, 7, 0, 0, 0, 0]);
    assert!(be.check_range(a, 16).is_ok() && be.check_range(a, 17).is_err());
    assert!(matches!(be.alloc(0).unwrap_err(), Error::InvalidArgument { .. }));

    be.free(a).unwrap();
    assert_eq!(be.live_bytes(), 8);
    let (k, _, detail) = oob(be.download(a, &mut [0u8; 1]).unwrap_err());
    assert_eq!(k, "download");
    assert!(detail.contains("freed"), "{detail}");
    assert!(oob(be.free(a).unwrap_err()).2.contains("freed"));
    be.free(b).unwrap();
    assert_eq!(be.live_bytes(), 0);
}

#[test]
fn kernel_reads_past_an_allocation_name_kernel_and_argument() {
    let be = cpu_backend();
    let x = up(&be, &bf16_bytes(&[1.0; 8]));
    let out = be.alloc(64).unwrap();
    // Four rows of 4 through the raw launch (Ops would refuse the shape): x holds two.
    let args = [Arg::P(out), Arg::P(x), Arg::P(0), Arg::I(4), Arg::I(4), Arg::F(1e-6)];
    let e = be.launch(&switchyard_kernels::norm::RMSNORM_BF16, &args).unwrap_err();
    let (k, arg, _) = oob(e);
    assert_eq!((k.as_str(), arg.as_str()), ("rmsnorm_bf16", "x"));
    // Nothing of the failed launch was written: the first two rows were valid but are not committed.
    assert_eq!(down(&be, out, 64), vec![0u8; 64]);

    // Output too small for the rows.
    let small = be.alloc(8).unwrap();
    let args = [Arg::P(small), Arg::P(x), Arg::P(0), Arg::I(2), Arg::I(4), Arg::F(1e-6)];
    let (_, arg, _) = oob(be.launch(&switchyard_kernels::norm::RMSNORM_BF16, &args).unwrap_err());
    assert_eq!(arg, "out");

    // A freed weight buffer.
    let w = up(&be, &bf16_bytes(&[1.0; 4]));
    be.free(w).unwrap();
    let args = [Arg::P(out), Arg::P(x), Arg::P(w), Arg::I(1), Arg::I(4), Arg::F(1e-6)];
    let (_, arg, detail) = oob(be.launch(&switchyard_kernels::norm::RMSNORM_BF16, &args).unwrap_err());
    assert_eq!(arg, "w");
    assert!(detail.contains("freed"), "{detail}");
}

static NOT_IMPLEMENTED: KernelSig = KernelSig { module: "norm", symbol: "no_such_kernel", args: &[ArgSpec::i32("n")] };

#[test]
fn unknown_kernels_are_typed_errors() {
    let be = CpuBackend::new();
    match be.enqueue(&NOT_IMPLEMENTED, &[Arg::I(1)]).unwrap_err() {
        Error::UnknownKernel { backend, symbol, .. } => {
            assert_eq!(backend.as_deref(), Some("cpu"));
            assert_eq!(symbol, "no_such_kernel");
        }
        other => panic!("expected UnknownKernel, got {other:?}"),
    }
    assert!(matches!(be.launch(&NOT_IMPLEMENTED, &[Arg::I(1)]).unwrap_err(), Error::UnknownKernel { .. }));
}

#[test]
fn every_kernel_in_the_five_families_is_registered() {
    let names: Vec<_> = switchyard_core::registry::kernels()
        .into_iter()
        .filter(|k| switchyard_core::registry::implements(switchyard_core::BackendKind::Cpu, k))
        .map(|k| k.symbol)
        .collect();
    for s in [
        "embed_gather_fp8",
        "embed_gather_bf16",
        "gather_rows_bf16",
        "rmsnorm_bf16",
        "post_norm_add_pre_norm_bf16",
        "layer_out_bf16",
        "qkv_prep_bf16",
        "moe_count",
        "moe_offsets",
        "moe_scatter",
        "lm_head_logits_fp8",
        "lm_head_logits_bf16",
        "argmax_rows",
        "letter_logits_fp8",
    ] {
        assert!(names.contains(&s), "{s} missing from {names:?}");
    }
    assert!(switchyard_core::registry::orphan_implementations().is_empty());
}

#[test]
fn sandwich_in_place_equals_out_of_place() {
    let be = cpu_backend();
    let ops = Ops::new(be.clone());
    let (rows, dim) = (3, 10);
    let resid: Vec<f32> = (0..rows * dim).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    let x: Vec<f32> = (0..rows * dim).map(|i| (i as f32 * 0.91).cos()).collect();
    let w: Vec<f32> = (0..dim).map(|i| 0.5 + i as f32 * 0.1).collect();
    let buf = |v: &[f32]| DeviceBuffer::from_bytes(&be, &bf16_bytes(v)).unwrap();
    let (r1, xa, wa) = (buf(&resid), buf(&x), buf(&w));
    let n = rows * dim * 2;
    let (out, n1, n2) = (DeviceBuffer::new(&be, n).unwrap(), DeviceBuffer::new(&be, n).unwrap(), DeviceBuffer::new(&be, n).unwrap());
    let w = Some(wa.region());
    ops.post_norm_add_pre_norm_bf16(out.region(), Some(n1.region()), r1.region(), xa.region(), w, w, rows, dim, 1e-6).unwrap();
    ops.post_norm_add_pre_norm_bf16(r1.region(), Some(n2.region()), r1.region(), xa.region(), w, w, rows, dim, 1e-6).unwrap();
    assert_eq!(out.to_vec().unwrap(), r1.to_vec().unwrap());
    assert_eq!(n1.to_vec().unwrap(), n2.to_vec().unwrap());
}

#[test]
fn rmsnorm_null_weight_is_unscaled() {
    let be = cpu_backend();
    let ops = Ops::new(be.clone());
    // mean(x²) = (9 + 16) / 2 = 12.5 → x / sqrt(12.5).
    let x = DeviceBuffer::from_bytes(&be, &bf16_bytes(&[3.0, -4.0])).unwrap();
    let out = DeviceBuffer::new(&be, 4).unwrap();
    ops.rmsnorm_bf16(out.region(), x.region(), None, 1, 2, 0.0).unwrap();
    let got = bf16_bits_from_bytes(&out.to_vec().unwrap());
    let inv = 1.0 / 12.5f32.sqrt();
    assert_eq!(got, vec![switchyard_core::codec::bf16_bits(3.0 * inv), switchyard_core::codec::bf16_bits(-4.0 * inv)]);
    assert_eq!(norm::RMSNORM_BF16.symbol, "rmsnorm_bf16");
}

#[test]
fn qkv_prep_k_eq_v_and_padding_slots() {
    let be = cpu_backend();
    let ops = Ops::new(be.clone());
    let (rows, nh, nkv, hd, max_pos, num_slots) = (2, 1, 1, 4, 4, 3);
    let raw: Vec<f32> = (0..rows * hd).map(|i| i as f32 + 1.0).collect();
    let table = switchyard_kernels::rope_kv::rope_table(max_pos, hd, 10000.0, hd / 2);
    let buf = |data: &[u8]| DeviceBuffer::from_bytes(&be, data).unwrap();
    let (q_raw, k_raw) = (buf(&bf16_bytes(&raw)), buf(&bf16_bytes(&raw)));
    let pool_init = bf16_bytes(&vec![9.0; num_slots * nkv * hd]);
    let (k_pool, v_pool) = (buf(&pool_init), buf(&pool_init));
    let q_out = DeviceBuffer::new(&be, rows * nh * hd * 2).unwrap();
    let (cos_sin, pos, slot) = (buf(&f32_bytes(&table)), buf(&i32_bytes(&[0, 1])), buf(&i32_bytes(&[2, -1])));
    let p = QkvPrep {
        q_out: q_out.region(),
        k_pool: Some(k_pool.region()),
        v_pool: Some(v_pool.region()),
        q_raw: q_raw.region(),
        k_raw: Some(k_raw.region()),
        v_raw: Some(k_raw.region()),
        q_norm: None,
        k_norm: None,
        cos_sin: cos_sin.region(),
        pos: pos.region(),
        slot: Some(slot.region()),
        pmap: None,
        rows,
        src_rows: rows,
        nh,
        nkv,
        hd,
        max_pos,
        num_slots,
        eps: 1e-6,
    };
    ops.qkv_prep_bf16(&p).unwrap();
    let k = bf16_bits_from_bytes(&k_pool.to_vec().unwrap());
    let v = bf16_bits_from_bytes(&v_pool.to_vec().unwrap());
    let q = bf16_bits_from_bytes(&q_out.to_vec().unwrap());
    let nine = switchyard_core::codec::bf16_bits(9.0);
    // Slot -1 (row 1) writes nothing; slot 2 (row 0) is written; slots 0 and 1 keep their contents.
    assert!(k[..2 * hd].iter().chain(&v[..2 * hd]).all(|&b| b == nine));
    // Position 0 is the identity rotation, so row 0's K equals its Q (same raw values, no weights), and V too.
    assert_eq!(&k[2 * hd..], &q[..hd]);
    assert_eq!(&v[2 * hd..], &q[..hd]);
}

#[test]
fn argmax_and_moe_follow_their_tie_rules() {
    let be = cpu_backend();
    let ops = Ops::new(be.clone());
    // Row 0: the excluded 9 would win, then a tie between 2 and 3. Row 1: only NaN and the excluded id.
    let logits = [9.0, f32::NAN, 5.0, 5.0, 9.0, f32::NAN, f32::NAN, f32::NAN];
    let (idx, val) = (poisoned_buffer(&be, 8), poisoned_buffer(&be, 8));
    let la = buffer(&be, &f32_bytes(&logits));
    ops.argmax_rows(idx.region(), val.region(), la.region(), 2, 4, -1, 0).unwrap();
    assert_eq!(i32_from_bytes(&idx.to_vec().unwrap()), [2, -1]);
    assert_eq!(f32_from_bytes(&val.to_vec().unwrap()), [5.0, f32::NEG_INFINITY]);

    let ids = [1, 0, 1, 7, 0, 1];
    let (n, e) = (ids.len(), 2);
    let topk = buffer(&be, &i32_bytes(&ids));
    let (counts, offsets, cursor) = (poisoned_buffer(&be, 4 * e), poisoned_buffer(&be, 4 * (e + 1)), poisoned_buffer(&be, 4 * e));
    let (pos, sop) = (poisoned_buffer(&be, 4 * n), poisoned_buffer(&be, 4 * n));
    ops.moe_route(counts.region(), offsets.region(), cursor.region(), pos.region(), sop.region(), topk.region(), n, 1, e).unwrap();
    assert_eq!(i32_from_bytes(&counts.to_vec().unwrap()), [2, 3]);
    assert_eq!(i32_from_bytes(&offsets.to_vec().unwrap()), [0, 2, 5]);
    assert_eq!(i32_from_bytes(&cursor.to_vec().unwrap()), [2, 5]);
    assert_eq!(i32_from_bytes(&pos.to_vec().unwrap()), [1, 4, 0, 2, 5, -1]);
    assert_eq!(i32_from_bytes(&sop.to_vec().unwrap()), [2, 0, 3, -1, 1, 4]);
}

#[test]
fn concurrent_pieces_run_in_order_on_one_queue_and_a_failure_stops_the_rest() {
    let be = cpu_backend();
    let buf = be.alloc(8).unwrap();
    // Both pieces' copies land, in order: the second overwrites half of the first's bytes.
    let src = be.alloc(8).unwrap();
    be.upload(src, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    be.enqueue_concurrent(&mut || be.copy(buf, src, 8), &mut || be.memset0(buf, 4)).unwrap();
    assert_eq!(down(&be, buf, 8), [0, 0, 0, 0, 5, 6, 7, 8]);
    // A failing first piece comes back and the second does not run.
    let mut second_ran = false;
    let e = be
        .enqueue_concurrent(&mut || be.memset0(buf, 9), &mut || {
            second_ran = true;
            Ok(())
        })
        .unwrap_err();
    assert_eq!(oob(e).0, "memset0");
    assert!(!second_ran, "the second piece ran after the first failed");
    be.free(buf).unwrap();
    be.free(src).unwrap();
}
