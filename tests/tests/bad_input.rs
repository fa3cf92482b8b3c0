//! Negative tests: every kind of bad input gives its typed error variant, and
//! the message names the kernel (or operation) and the argument. Never a
//! panic, never a silent success.
//!
//! The body of each test is a function of the backend; [`bad_input_tests!`]
//! instantiates them per backend (only the CPU reference here).
use std::sync::Arc;
use switchyard_core::{registry, vaddr, Arg, Backend, DeviceBuffer, Error};
use switchyard_kernels::attn::{AttnDecode, AttnParams, KvView};
use switchyard_kernels::rope_kv::QkvPrep;
use switchyard_kernels::Ops;

type R<T = ()> = switchyard_core::Result<T>;

/// Asserts `r` is `InvalidArgument` for `kernel` / `arg`, and that the
/// message names both.
#[track_caller]
fn expect_invalid(r: R, kernel: &str, arg: &str) {
    match &r {
        Err(e @ Error::InvalidArgument { kernel: k, arg: a, .. }) => {
            assert_eq!((k.as_str(), a.as_str()), (kernel, arg), "wrong kernel/argument in {e:?}");
            let msg = e.to_string();
            assert!(msg.contains(kernel) && msg.contains(arg), "message does not name kernel `{kernel}` and argument `{arg}`: {msg}");
        }
        other => panic!("expected InvalidArgument {{ kernel: {kernel}, arg: {arg} }}, got {other:?}"),
    }
}

/// Asserts `r` is `OutOfBounds` for `kernel` / `arg`, that the message names
/// both, and that the detail contains `detail` (lowercase match).
#[track_caller]
fn expect_oob(r: R, kernel: &str, arg: &str, detail: &str) {
    match &r {
        Err(e @ Error::OutOfBounds { kernel: k, arg: a, detail: d }) => {
            assert_eq!((k.as_str(), a.as_str()), (kernel, arg), "wrong kernel/argument in {e:?}");
            let msg = e.to_string();
            assert!(msg.contains(kernel) && msg.contains(arg), "message does not name kernel `{kernel}` and argument `{arg}`: {msg}");
            assert!(d.to_lowercase().contains(detail), "detail should mention `{detail}`: {msg}");
        }
        other => panic!("expected OutOfBounds {{ kernel: {kernel}, arg: {arg} }}, got {other:?}"),
    }
}

fn buf(be: &Arc<dyn Backend>, bytes: usize) -> DeviceBuffer {
    // Non-zero contents, so nothing passes by reading zeros.
    DeviceBuffer::from_bytes(be, &vec![0x3f; bytes]).unwrap()
}

/// A well-formed rmsnorm launch: `[rows = 1, dim]`, returned as raw args.
fn rmsnorm_args(out: &DeviceBuffer, x: &DeviceBuffer, dim: i32) -> Vec<Arg> {
    vec![Arg::P(out.addr()), Arg::P(x.addr()), Arg::P(0), Arg::I(1), Arg::I(dim), Arg::F(1e-6)]
}

const RMSNORM: &switchyard_core::KernelSig = &switchyard_kernels::norm::RMSNORM_BF16;

fn sanity_direct_launch_works(be: &Arc<dyn Backend>) {
    // The raw launch used below is valid as written; only the one defect each test adds makes it fail.
    let (out, x) = (buf(be, 64), buf(be, 64));
    be.launch(RMSNORM, &rmsnorm_args(&out, &x, 32)).unwrap();
    be.synchronize().unwrap();
    assert_ne!(out.to_vec().unwrap(), vec![0x3f; 64], "rmsnorm wrote nothing");
}

fn wrong_argument_count(be: &Arc<dyn Backend>) {
    let (out, x) = (buf(be, 64), buf(be, 64));
    let mut args = rmsnorm_args(&out, &x, 32);
    args.pop();
    expect_invalid(be.launch(RMSNORM, &args), "rmsnorm_bf16", "<argument list>");
    let mut args = rmsnorm_args(&out, &x, 32);
    args.push(Arg::I(0));
    expect_invalid(be.launch(RMSNORM, &args), "rmsnorm_bf16", "<argument list>");
    expect_invalid(be.launch(&switchyard_kernels::head::ARGMAX_ROWS, &[]), "argmax_rows", "<argument list>");
    // Nothing was written by the refused launches.
    assert_eq!(out.to_vec().unwrap(), vec![0x3f; 64]);
}

fn wrong_argument_kind(be: &Arc<dyn Backend>) {
    let (out, x) = (buf(be, 64), buf(be, 64));
    let mut args = rmsnorm_args(&out, &x, 32);
    args[4] = Arg::F(32.0); // dim is i32
    expect_invalid(be.launch(RMSNORM, &args), "rmsnorm_bf16", "dim");
    let mut args = rmsnorm_args(&out, &x, 32);
    args[5] = Arg::I(0); // eps is f32
    expect_invalid(be.launch(RMSNORM, &args), "rmsnorm_bf16", "eps");
    let mut args = rmsnorm_args(&out, &x, 32);
    args[1] = Arg::U(7); // x is a pointer
    expect_invalid(be.launch(RMSNORM, &args), "rmsnorm_bf16", "x");
    let mut args = rmsnorm_args(&out, &x, 32);
    args[4] = Arg::P(x.addr()); // a pointer where a scalar goes
    expect_invalid(be.launch(RMSNORM, &args), "rmsnorm_bf16", "dim");
    assert_eq!(out.to_vec().unwrap(), vec![0x3f; 64]);
}

fn null_where_not_nullable(be: &Arc<dyn Backend>) {
    let (out, x) = (buf(be, 64), buf(be, 64));
    let mut args = rmsnorm_args(&out, &x, 32);
    args[1] = Arg::P(0);
    expect_invalid(be.launch(RMSNORM, &args), "rmsnorm_bf16", "x");
    let mut args = rmsnorm_args(&out, &x, 32);
    args[0] = Arg::P(0);
    expect_invalid(be.launch(RMSNORM, &args), "rmsnorm_bf16", "out");
    // Through Ops: a nullable-by-signature pointer the launcher requires in this configuration.
    let ops = Ops::new(be.clone());
    expect_invalid(
        ops.post_norm_add_pre_norm_bf16(out.region(), None, x.region(), x.region(), None, Some(x.region()), 1, 32, 1e-6),
        "post_norm_add_pre_norm_bf16",
        "normed",
    );
}

fn buffer_too_small_for_the_shape(be: &Arc<dyn Backend>) {
    let ops = Ops::new(be.clone());
    // rows = 2, dim = 32 needs 128 bytes per tensor.
    let (out, x, w) = (buf(be, 128), buf(be, 128), buf(be, 64));
    ops.rmsnorm_bf16(out.region(), x.region(), Some(w.region()), 2, 32, 1e-6).unwrap();
    let small = buf(be, 126);
    expect_oob(ops.rmsnorm_bf16(out.region(), small.region(), Some(w.region()), 2, 32, 1e-6), "rmsnorm_bf16", "x", "region holds 126");
    expect_oob(ops.rmsnorm_bf16(small.region(), x.region(), Some(w.region()), 2, 32, 1e-6), "rmsnorm_bf16", "out", "region holds 126");
    let w_small = buf(be, 62);
    expect_oob(ops.rmsnorm_bf16(out.region(), x.region(), Some(w_small.region()), 2, 32, 1e-6), "rmsnorm_bf16", "w", "region holds 62");
    // lm_head: table one row short.
    let (logits, h, e8, sc) = (buf(be, 4 * 10), buf(be, 2 * 16), buf(be, 9 * 16), buf(be, 4 * 10));
    expect_oob(
        ops.lm_head_logits_fp8(logits.region(), h.region(), e8.region(), sc.region(), 1, 10, 16, 0.0),
        "lm_head_logits_fp8",
        "e8",
        "region holds 144",
    );
    // moe: counts too small (moe_count zeroes it first; the check comes before that write).
    let (counts, ids) = (buf(be, 4 * 7), buf(be, 4 * 5));
    expect_oob(ops.moe_count(counts.region(), ids.region(), 5, 8), "moe_count", "counts", "region holds 28");
    assert_eq!(counts.to_vec().unwrap(), vec![0x3f; 28], "moe_count zeroed a buffer it then refused");
}

fn pointer_inside_but_range_past_the_end(be: &Arc<dyn Backend>) {
    let ops = Ops::new(be.clone());
    let (out, x) = (buf(be, 64), buf(be, 64));
    // x starts 8 bytes before the end of its allocation: the address is live, the range is not.
    let x_tail = x.region().tail(56).unwrap();
    expect_oob(ops.rmsnorm_bf16(out.region(), x_tail, None, 1, 32, 1e-6), "rmsnorm_bf16", "x", "region holds 8");
    // The same through a raw launch, which checks only the signature: GPU
    // backends trust it (the launcher's check is the one layer), the CPU
    // reference still catches the over-read while the kernel runs.
    if be.kind() != switchyard_core::BackendKind::Cpu {
        return;
    }
    let mut args = rmsnorm_args(&out, &x, 32);
    args[1] = Arg::P(x_tail.addr());
    expect_oob(be.launch(RMSNORM, &args), "rmsnorm_bf16", "x", "");
    // And an over-write: out too short for the row.
    let short = buf(be, 16);
    let mut args = rmsnorm_args(&out, &x, 32);
    args[0] = Arg::P(short.addr());
    expect_oob(be.launch(RMSNORM, &args), "rmsnorm_bf16", "out", "");
    assert_eq!(short.to_vec().unwrap(), vec![0x3f; 16], "a refused launch wrote part of its output");
    // An address exactly at the end (an empty tail) is not inside the allocation.
    let mut args = rmsnorm_args(&out, &x, 32);
    args[1] = Arg::P(x.at(64).unwrap());
    expect_oob(be.launch(RMSNORM, &args), "rmsnorm_bf16", "x", "");
}

fn freed_buffer(be: &Arc<dyn Backend>) {
    let ops = Ops::new(be.clone());
    let out = buf(be, 64);
    let x = be.alloc(64).unwrap();
    be.upload(x, &[0x3f; 64]).unwrap();
    be.free(x).unwrap();
    let stale = {
        let b = buf(be, 64);
        b.region()
    };
    expect_oob(ops.rmsnorm_bf16(out.region(), stale, None, 1, 32, 1e-6), "rmsnorm_bf16", "x", "freed");
    expect_oob(
        be.launch(RMSNORM, &[Arg::P(out.addr()), Arg::P(x), Arg::P(0), Arg::I(1), Arg::I(32), Arg::F(1e-6)]),
        "rmsnorm_bf16",
        "x",
        "freed",
    );
    expect_oob(be.upload(x, &[1, 2]), "upload", "dst", "freed");
    expect_oob(be.download(x, &mut [0; 2]), "download", "src", "freed");
    expect_oob(be.memset0(x, 2), "memset0", "dst", "freed");
    expect_oob(be.copy(out.addr(), x, 2), "copy", "src", "freed");
    expect_oob(be.copy(x, out.addr(), 2), "copy", "dst", "freed");
    assert!(be.free(x).is_err(), "double free accepted");
    // A new allocation does not revive the freed address.
    let y = buf(be, 64);
    assert_ne!(y.addr(), x);
    expect_oob(be.download(x, &mut [0; 2]), "download", "src", "freed");
}

fn address_never_allocated(be: &Arc<dyn Backend>) {
    let ops = Ops::new(be.clone());
    let out = buf(be, 64);
    let bogus = vaddr::pack(123_456, 0);
    let _ = &ops;
    expect_oob(be.download(bogus, &mut [0; 4]), "download", "src", "");
    expect_oob(be.upload(0xdead_beef, &[0; 4]), "upload", "dst", "");
    assert!(be.free(bogus).is_err());
    assert!(be.free(out.at(8).unwrap()).is_err(), "free of an interior address accepted");
}

/// A kernel signature that was never declared (not in the registry).
static UNDECLARED: switchyard_core::KernelSig =
    switchyard_core::KernelSig { module: "norm", symbol: "rmsnorm_f16", args: &[switchyard_core::ArgSpec::output("out")] };

fn unknown_kernel(be: &Arc<dyn Backend>) {
    match be.launch(&UNDECLARED, &[Arg::P(0)]) {
        Err(e @ Error::UnknownKernel { backend: Some(_), .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("norm") && msg.contains("rmsnorm_f16") && msg.contains(be.name()), "{msg}");
        }
        other => panic!("expected UnknownKernel, got {other:?}"),
    }
    for (m, s) in [("norm", "rmsnorm_f16"), ("nope", "rmsnorm_bf16"), ("head", "rmsnorm_bf16"), ("", "")] {
        match registry::lookup(m, s) {
            Err(Error::UnknownKernel { module, symbol, backend: None }) => assert_eq!((module.as_str(), symbol.as_str()), (m, s)),
            other => panic!("{m}::{s}: expected UnknownKernel, got {other:?}"),
        }
    }
}

/// A kernel that is declared but that no backend implements.
static DECLARED_ONLY: switchyard_core::KernelSig =
    switchyard_core::KernelSig { module: "test", symbol: "declared_only_bf16", args: &[switchyard_core::ArgSpec::output("out")] };
inventory::submit! { registry::Declared(&DECLARED_ONLY) }

/// A declared kernel launched on a backend that does not implement it is
/// `UnknownKernel` with the backend named, and nothing reaches `enqueue`.
#[test]
fn declared_but_not_implemented() {
    let be = switchyard_cpu_ref::cpu_backend();
    assert!(registry::lookup("test", "declared_only_bf16").is_ok());
    let out = buf(&be, 8);
    match be.launch(&DECLARED_ONLY, &[Arg::P(out.addr())]) {
        Err(e @ Error::UnknownKernel { backend: Some(_), .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("declared_only_bf16") && msg.contains("cpu"), "{msg}");
        }
        other => panic!("expected UnknownKernel on backend cpu, got {other:?}"),
    }
    assert_eq!(out.to_vec().unwrap(), vec![0x3f; 8]);
}

fn shape_contract_violations(be: &Arc<dyn Backend>) {
    let ops = Ops::new(be.clone());
    let big = buf(be, 1 << 20);
    let q_out = buf(be, 128);
    // lm_head: m = 17 (decode-shaped kernels take m <= 16), m = 0, hdim not a multiple of 8, negative softcap.
    let r = big.region();
    expect_invalid(ops.lm_head_logits_fp8(r, r, r, r, 17, 10, 16, 0.0), "lm_head_logits_fp8", "m");
    expect_invalid(ops.lm_head_logits_bf16(r, r, r, 17, 10, 16, 0.0), "lm_head_logits_bf16", "m");
    expect_invalid(ops.lm_head_logits_fp8(r, r, r, r, 0, 10, 16, 0.0), "lm_head_logits_fp8", "m");
    expect_invalid(ops.lm_head_logits_fp8(r, r, r, r, 1, 10, 12, 0.0), "lm_head_logits_fp8", "hdim");
    expect_invalid(ops.lm_head_logits_bf16(r, r, r, 1, 10, 20, 0.0), "lm_head_logits_bf16", "hdim");
    expect_invalid(ops.lm_head_logits_fp8(r, r, r, r, 1, 10, 16, -1.0), "lm_head_logits_fp8", "softcap");
    expect_invalid(ops.letter_logits_fp8(r, r, r, r, r, 1, 2, 12, 10, 0.0), "letter_logits_fp8", "hdim");
    expect_invalid(ops.letter_logits_fp8(r, r, r, r, r, 0, 2, 16, 10, 0.0), "letter_logits_fp8", "rows");
    // Norms: odd dim, zero rows, bad eps.
    expect_invalid(ops.rmsnorm_bf16(r, r, None, 1, 31, 1e-6), "rmsnorm_bf16", "dim");
    expect_invalid(ops.rmsnorm_bf16(r, r, None, 0, 32, 1e-6), "rmsnorm_bf16", "rows");
    expect_invalid(ops.rmsnorm_bf16(r, r, None, 1, 32, f32::NAN), "rmsnorm_bf16", "eps");
    expect_invalid(ops.post_norm_add_pre_norm_bf16(r, Some(r), r, r, None, None, 1, 33, 1e-6), "post_norm_add_pre_norm_bf16", "dim");
    expect_invalid(ops.layer_out_bf16(r, r, r, None, r, 1, 3, 1e-6), "layer_out_bf16", "dim");
    // Embedding: h not a multiple of 8 for the fp8 table, odd h for bf16.
    expect_invalid(ops.embed_gather_fp8(r, r, r, r, 1, 4, 12, 1.0), "embed_gather_fp8", "h");
    expect_invalid(ops.embed_gather_bf16(r, r, r, 1, 4, 7, 1.0), "embed_gather_bf16", "h");
    expect_invalid(ops.gather_rows_bf16(r, r, r, 1, 4, 5), "gather_rows_bf16", "h");
    expect_invalid(ops.gather_rows_bf16(r, r, r, 0, 4, 4), "gather_rows_bf16", "rows");
    // qkv_prep: hd > 512, odd hd, nkv > 0 with null pools.
    let p = QkvPrep {
        q_out: q_out.region(),
        k_pool: None,
        v_pool: None,
        q_raw: r,
        k_raw: None,
        v_raw: None,
        q_norm: None,
        k_norm: None,
        cos_sin: r,
        pos: r,
        slot: None,
        pmap: None,
        rows: 1,
        src_rows: 1,
        nh: 1,
        nkv: 0,
        hd: 64,
        max_pos: 4,
        num_slots: 0,
        eps: 1e-6,
    };
    // (the base configuration is valid)
    ops.qkv_prep_bf16(&p).unwrap();
    expect_invalid(ops.qkv_prep_bf16(&QkvPrep { hd: 514, ..p }), "qkv_prep_bf16", "hd");
    expect_invalid(ops.qkv_prep_bf16(&QkvPrep { hd: 63, ..p }), "qkv_prep_bf16", "hd");
    expect_invalid(ops.qkv_prep_bf16(&QkvPrep { nkv: 1, num_slots: 4, ..p }), "qkv_prep_bf16", "k_pool");
    // Attention: hd not a multiple of 8, nh not a multiple of nkv; decode past
    // the block table's capacity, a zero bound, more sequences than the table.
    let kv = KvView { k_pool: r, v_pool: r, block_table: r, nkv: 2, hd: 64, page: 16, max_pages: 4, num_seqs: 2, num_slots: 64 };
    let ap = AttnParams { nh: 4, window: 0, scale: 1.0 };
    let (q, small) = (big.slice(0, 4 * 64 * 2 * 2).unwrap(), big.slice(0, 8).unwrap());
    expect_invalid(ops.attention_prefill(q, q, small, small, 2, &KvView { hd: 60, ..kv }, &ap), "attention_prefill", "hd");
    expect_invalid(ops.attention_prefill(q, q, small, small, 2, &kv, &AttnParams { nh: 3, ..ap }), "attention_prefill", "nh");
    let d = AttnDecode { out: q, q, ctx_len: small, batch: 2, max_ctx: 64 };
    ops.attention_decode(&d, &kv, &ap).unwrap();
    expect_invalid(ops.attention_decode(&AttnDecode { max_ctx: 65, ..d }, &kv, &ap), "attention_decode", "max_ctx");
    expect_invalid(ops.attention_decode(&AttnDecode { max_ctx: 0, ..d }, &kv, &ap), "attention_decode", "max_ctx");
    expect_invalid(ops.attention_decode(&AttnDecode { batch: 3, ..d }, &kv, &ap), "attention_decode", "batch");
    // MoE: no pairs, no experts.
    expect_invalid(ops.moe_count(r, r, 0, 4), "moe_count", "n");
    expect_invalid(ops.moe_scatter(r, r, r, r, r, 4, 0), "moe_scatter", "e");
    // MoE expert path: top-k past the experts, odd hidden size, router root not finite.
    expect_invalid(ops.moe_router_topk(r, r, r, r, 1, 4, 5), "moe_router_topk", "k");
    expect_invalid(ops.moe_gather_bf16(r, r, r, 4, 1, 7, 4), "moe_gather_bf16", "h");
    expect_invalid(ops.router_norm_bf16(r, r, r, 1, 32, 1e-6, f32::INFINITY), "router_norm_bf16", "root");
    // argmax: an exclusion below -1, no rows.
    expect_invalid(ops.argmax_rows(r, r, r, 1, 10, -2, -1), "argmax_rows", "ex0");
    expect_invalid(ops.argmax_rows(r, r, r, 0, 10, -1, -1), "argmax_rows", "m");
}

fn upload_download_out_of_bounds(be: &Arc<dyn Backend>) {
    let b = buf(be, 16);
    expect_oob(be.upload(b.addr(), &[0; 17]), "upload", "dst", "past the end");
    expect_oob(be.upload(b.at(8).unwrap(), &[0; 9]), "upload", "dst", "past the end");
    expect_oob(be.download(b.addr(), &mut [0; 17]), "download", "src", "past the end");
    expect_oob(be.download(b.at(15).unwrap(), &mut [0; 2]), "download", "src", "past the end");
    expect_oob(be.memset0(b.at(4).unwrap(), 13), "memset0", "dst", "past the end");
    let c = buf(be, 8);
    expect_oob(be.copy(c.addr(), b.addr(), 9), "copy", "dst", "past the end");
    expect_oob(be.copy(b.addr(), c.addr(), 9), "copy", "src", "past the end");
    // In-range transfers still work, and the refused ones wrote nothing.
    assert_eq!(b.to_vec().unwrap(), vec![0x3f; 16]);
    be.upload(b.at(8).unwrap(), &[1; 8]).unwrap();
    let mut tail = [0u8; 8];
    be.download(b.at(8).unwrap(), &mut tail).unwrap();
    assert_eq!(tail, [1; 8]);
    // The RAII helpers refuse too.
    assert!(matches!(b.at(17), Err(Error::OutOfBounds { .. })));
    assert!(matches!(b.write(&[0; 17]), Err(Error::OutOfBounds { .. })));
    // Zero-byte allocations are refused.
    assert!(be.alloc(0).is_err());
}

fn no_leaks(be: &Arc<dyn Backend>) {
    let before = be.live_bytes();
    {
        let _a = buf(be, 100);
        let _b = buf(be, 28);
        assert_eq!(be.live_bytes(), before + 128);
    }
    assert_eq!(be.live_bytes(), before);
}

#[test]
fn registry_is_consistent() {
    assert!(
        registry::orphan_implementations().is_empty(),
        "implementations of undeclared kernels: {:?}",
        registry::orphan_implementations()
    );
    // The catalogue of issue 2: 14 kernels, each declared once.
    for (m, s) in [
        ("embed", "embed_gather_fp8"),
        ("embed", "embed_gather_bf16"),
        ("embed", "gather_rows_bf16"),
        ("norm", "rmsnorm_bf16"),
        ("norm", "post_norm_add_pre_norm_bf16"),
        ("norm", "layer_out_bf16"),
        ("rope_kv", "qkv_prep_bf16"),
        ("moe", "moe_count"),
        ("moe", "moe_offsets"),
        ("moe", "moe_scatter"),
        ("head", "lm_head_logits_fp8"),
        ("head", "lm_head_logits_bf16"),
        ("head", "argmax_rows"),
        ("head", "letter_logits_fp8"),
    ] {
        registry::lookup(m, s).unwrap_or_else(|e| panic!("{m}::{s}: {e}"));
    }
    let all = registry::kernels();
    let mut names: Vec<_> = all.iter().map(|k| (k.module, k.symbol)).collect();
    names.dedup();
    assert_eq!(names.len(), all.len(), "a kernel is declared twice");
}

#[test]
fn every_declared_kernel_is_implemented_on_cpu() {
    let missing: Vec<String> = registry::kernels()
        .into_iter()
        // This file's own declared-only kernel is the one exception.
        .filter(|k| !std::ptr::eq(*k, &DECLARED_ONLY))
        .filter(|k| !registry::implements(switchyard_core::BackendKind::Cpu, k))
        .map(|k| format!("{}::{}", k.module, k.symbol))
        .collect();
    assert!(missing.is_empty(), "declared but not implemented on cpu: {missing:?}");
    assert!(registry::implementing_backends().contains(&switchyard_core::BackendKind::Cpu));
}

/// Instantiates every negative test for one backend.
macro_rules! bad_input_tests {
    ($backend:ident, $make:expr) => {
        mod $backend {
            use super::*;
            fn be() -> Arc<dyn Backend> {
                $make
            }
            #[test]
            fn sanity_direct_launch_works() {
                super::sanity_direct_launch_works(&be())
            }
            #[test]
            fn wrong_argument_count() {
                super::wrong_argument_count(&be())
            }
            #[test]
            fn wrong_argument_kind() {
                super::wrong_argument_kind(&be())
            }
            #[test]
            fn null_where_not_nullable() {
                super::null_where_not_nullable(&be())
            }
            #[test]
            fn buffer_too_small_for_the_shape() {
                super::buffer_too_small_for_the_shape(&be())
            }
            #[test]
            fn pointer_inside_but_range_past_the_end() {
                super::pointer_inside_but_range_past_the_end(&be())
            }
            #[test]
            fn freed_buffer() {
                super::freed_buffer(&be())
            }
            #[test]
            fn address_never_allocated() {
                super::address_never_allocated(&be())
            }
            #[test]
            fn unknown_kernel() {
                super::unknown_kernel(&be())
            }
            #[test]
            fn shape_contract_violations() {
                super::shape_contract_violations(&be())
            }
            #[test]
            fn upload_download_out_of_bounds() {
                super::upload_download_out_of_bounds(&be())
            }
            #[test]
            fn no_leaks() {
                super::no_leaks(&be())
            }
        }
    };
}

bad_input_tests!(cpu, switchyard_cpu_ref::cpu_backend());
