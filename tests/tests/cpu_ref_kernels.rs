//! Every kernel of the catalogue, run through `Ops` on a backend and compared
//! with an independent f64 computation (`switchyard_tests::reference`, written
//! from the contract text, not from any backend's code) under the parity
//! tolerances (ARCHITECTURE.md):
//!
//! - bf16 outputs: within 1 bf16 ulp of the f64 result rounded once to bf16
//!   (intermediate roundings the contract names are modelled in the f64
//!   reference); bit-exact for gathers;
//! - f32 dot outputs: |actual − expected| ≤ 1e-5 · Σ|aᵢbᵢ| per element;
//! - integer outputs: exact.
//!
//! Inputs are fresh seeded random non-zero values. Outputs are poisoned (NaN
//! bytes for floats, a sentinel for integers) before the run, and followed by
//! guard bytes that must come back untouched. Inputs are allocated at their
//! exact size (an over-read is the backend's bounds error) and must be
//! unchanged after the run.
//!
//! Each test body is a function of the backend; [`kernel_tests!`] instantiates
//! them per backend. Only the CPU reference is instantiated here.
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use switchyard_core::codec::bytes;
use switchyard_core::compare::bf16_ulp_distance;
use switchyard_core::{Backend, DeviceBuffer, Region};
use switchyard_kernels::rope_kv::QkvPrep;
use switchyard_kernels::Ops;
use switchyard_tests::reference::{self as r, bf16_f64, bf16_of_f64, Iv};

// ---------------------------------------------------------------- harness --

const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xa5;
const BF16_POISON: u16 = 0xffff; // a NaN no kernel writes (they write 0x7fc0)
const F32_POISON: u32 = 0xffff_ffff; // NaN
const I32_POISON: i32 = 0x7ead_beef;
/// bf16 NaN the contracts name for "NaN row" outputs.
const BF16_NAN: u16 = 0x7fc0;

/// Which NaN an expected-NaN element accepts.
#[derive(Clone, Copy)]
enum Nan {
    /// Exactly these bits (the contract names them).
    Bits(u16),
    /// Any NaN except the poison pattern (the contract says only "NaN").
    Any,
}

/// One launch's buffers: inputs remembered for an unchanged-check, outputs
/// poisoned and guarded.
struct Bench {
    be: Arc<dyn Backend>,
    ops: Ops,
    label: String,
    inputs: Vec<(String, DeviceBuffer, Vec<u8>)>,
    outputs: Vec<(String, DeviceBuffer, usize)>,
    live_before: usize,
}

/// Handle to an output buffer of a [`Bench`].
#[derive(Clone, Copy)]
struct Out(usize, Region);

impl Out {
    /// The output's data, without its guard bytes.
    fn region(self) -> Region {
        self.1
    }
}

impl Bench {
    fn new(be: &Arc<dyn Backend>, label: impl std::fmt::Display) -> Self {
        Bench {
            be: be.clone(),
            ops: Ops::new(be.clone()),
            label: format!("[{}] {label}", be.name()),
            inputs: vec![],
            outputs: vec![],
            live_before: be.live_bytes(),
        }
    }

    /// An input of exactly these bytes, as a region.
    fn input_region(&mut self, name: &str, data: Vec<u8>) -> Region {
        let buf = DeviceBuffer::from_bytes(&self.be, &data).unwrap_or_else(|e| panic!("{}: upload `{name}`: {e}", self.label));
        let r = buf.region();
        self.inputs.push((name.into(), buf, data));
        r
    }

    /// An output (or in-out buffer) starting as `init`, followed by guard bytes.
    fn output(&mut self, name: &str, init: Vec<u8>) -> Out {
        let len = init.len();
        let mut d = init;
        d.extend([GUARD_BYTE; GUARD]);
        let buf = DeviceBuffer::from_bytes(&self.be, &d).unwrap_or_else(|e| panic!("{}: upload `{name}`: {e}", self.label));
        let r = buf.slice(0, len).expect("the buffer holds its data");
        self.outputs.push((name.into(), buf, len));
        Out(self.outputs.len() - 1, r)
    }

    fn out_bf16(&mut self, name: &str, n: usize) -> Out {
        self.output(name, bf16_bytes(&vec![BF16_POISON; n]))
    }
    fn out_f32(&mut self, name: &str, n: usize) -> Out {
        self.output(name, bytes::f32_bytes(&vec![f32::from_bits(F32_POISON); n]))
    }
    fn out_i32(&mut self, name: &str, n: usize) -> Out {
        self.output(name, bytes::i32_bytes(&vec![I32_POISON; n]))
    }

    /// Runs the launch, panicking with the label on error.
    fn run(&self, f: impl FnOnce(&Ops) -> switchyard_core::Result<()>) {
        f(&self.ops).unwrap_or_else(|e| panic!("{}: launch failed: {e}", self.label));
        self.be.synchronize().unwrap_or_else(|e| panic!("{}: synchronize: {e}", self.label));
    }

    /// Downloads an output, checking its guard bytes.
    fn read(&self, o: Out) -> Vec<u8> {
        let (name, buf, len) = &self.outputs[o.0];
        let all = buf.to_vec().unwrap_or_else(|e| panic!("{}: download `{name}`: {e}", self.label));
        if let Some(i) = all[*len..].iter().position(|&b| b != GUARD_BYTE) {
            panic!("{}: `{name}`: guard byte {i} past the end ({len} bytes) was overwritten with {:#04x}", self.label, all[len + i]);
        }
        all[..*len].to_vec()
    }
    fn bf16(&self, o: Out) -> Vec<u16> {
        bytes::bf16_bits_from_bytes(&self.read(o))
    }
    fn f32(&self, o: Out) -> Vec<f32> {
        bytes::f32_from_bytes(&self.read(o))
    }
    fn i32(&self, o: Out) -> Vec<i32> {
        bytes::i32_from_bytes(&self.read(o))
    }
    fn name(&self, o: Out) -> String {
        format!("{}: `{}`", self.label, self.outputs[o.0].0)
    }

    /// bf16 output within `ulps` of the f64 expectation rounded once to bf16.
    fn check_bf16(&self, o: Out, expected: &[Iv], ulps: u32, nan: Nan) {
        check_bf16(&self.name(o), &self.bf16(o), expected, ulps, nan);
    }
    /// f32 dot outputs: |a − e| ≤ 1e-5 · bound.
    fn check_dot(&self, o: Out, expected: &[f64], bound: &[f64]) {
        check_dot(&self.name(o), &self.f32(o), expected, bound);
    }
    fn check_i32(&self, o: Out, expected: &[i32]) {
        check_i32(&self.name(o), &self.i32(o), expected);
    }

    /// Inputs must come back as uploaded, and freeing the buffers returns
    /// the backend's live bytes to where they were.
    fn finish(self) {
        for (name, buf, data) in &self.inputs {
            let now = buf.to_vec().unwrap();
            if let Some(i) = now.iter().zip(data).position(|(a, b)| a != b) {
                panic!("{}: input `{name}` was modified at byte {i}: {:#04x} (was {:#04x})", self.label, now[i], data[i]);
            }
        }
        let Bench { be, label, inputs, outputs, live_before, .. } = self;
        drop((inputs, outputs));
        assert_eq!(be.live_bytes(), live_before, "{label}: live bytes after freeing every buffer");
    }
}

fn bf16_bytes(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|b| b.to_le_bytes()).collect()
}

fn is_bf16_nan(b: u16) -> bool {
    b & 0x7f80 == 0x7f80 && b & 0x7f != 0
}

/// Distance in bf16 ulps from `a` to the expected interval rounded to bf16
/// (0 inside it).
fn ulps_to(a: u16, e: Iv) -> u32 {
    let (lo, hi) = (bf16_of_f64(e.0), bf16_of_f64(e.1));
    let v = bf16_f64(a);
    if !is_bf16_nan(a) && bf16_f64(lo) <= v && v <= bf16_f64(hi) {
        0
    } else {
        bf16_ulp_distance(a, lo).min(bf16_ulp_distance(a, hi))
    }
}

/// bf16 output vs expected intervals (points except where the contract's
/// intermediate roundings sit on a tie; see `switchyard_tests::reference`).
fn check_bf16(what: &str, actual: &[u16], expected: &[Iv], ulps: u32, nan: Nan) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    let tol = if ulps == 0 { "exact".to_string() } else { format!("{ulps} bf16 ulp") };
    let mut fails = Vec::new();
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        let ok = if e.0.is_nan() {
            match nan {
                Nan::Bits(b) => a == b,
                Nan::Any => is_bf16_nan(a) && a != BF16_POISON,
            }
        } else {
            ulps_to(a, e) <= ulps
        };
        if !ok {
            fails.push(i);
        }
    }
    if let Some(&i) = fails.first() {
        let (a, e) = (actual[i], expected[i]);
        let (lo, hi) = (bf16_of_f64(e.0), bf16_of_f64(e.1));
        let shown = if lo == hi {
            format!("{} ({lo:#06x}, f64 {:e})", bf16_f64(lo), e.0)
        } else {
            format!("[{} ({lo:#06x}), {} ({hi:#06x})] (f64 [{:e}, {:e}])", bf16_f64(lo), bf16_f64(hi), e.0, e.1)
        };
        let nan_note = match nan {
            Nan::Bits(b) if e.0.is_nan() => format!(" (NaN must be {b:#06x})"),
            Nan::Any if e.0.is_nan() => format!(" (any NaN but the poison {BF16_POISON:#06x})"),
            _ => String::new(),
        };
        panic!(
            "{what}: {} of {} elements outside tolerance {tol}{nan_note}; first at index {i}: actual {} ({a:#06x}), expected {shown}, distance {} ulp; failing indices (first 10) {:?}",
            fails.len(),
            actual.len(),
            bf16_f64(a),
            ulps_to(a, e),
            &fails[..fails.len().min(10)]
        );
    }
}

fn check_dot(what: &str, actual: &[f32], expected: &[f64], bound: &[f64]) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    let mut fails = Vec::new();
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        let ok = if e.is_nan() { a.is_nan() && a.to_bits() != F32_POISON } else { (a as f64 - e).abs() <= 1e-5 * bound[i] };
        if !ok {
            fails.push(i);
        }
    }
    if let Some(&i) = fails.first() {
        panic!(
            "{what}: {} of {} elements outside tolerance 1e-5·Σ|ab|; first at index {i}: actual {:e} ({:#010x}), expected {:e}, |diff| {:e}, tolerance {:e}; failing indices (first 10) {:?}",
            fails.len(),
            actual.len(),
            actual[i],
            actual[i].to_bits(),
            expected[i],
            (actual[i] as f64 - expected[i]).abs(),
            1e-5 * bound[i],
            &fails[..fails.len().min(10)]
        );
    }
}

fn check_i32(what: &str, actual: &[i32], expected: &[i32]) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    if let Some(i) = actual.iter().zip(expected).position(|(a, e)| a != e) {
        let n = actual.iter().zip(expected).filter(|(a, e)| a != e).count();
        panic!(
            "{what}: {n} of {} elements differ (tolerance exact); first at index {i}: actual {}, expected {}",
            actual.len(),
            actual[i],
            expected[i]
        );
    }
}

fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}

/// `n` non-zero bf16 values, magnitude in `[lo, hi)`, random sign.
fn rand_bf16(g: &mut SmallRng, n: usize, lo: f32, hi: f32) -> Vec<u16> {
    (0..n)
        .map(|_| loop {
            let s = if g.random_bool(0.5) { -1.0 } else { 1.0 };
            let b = switchyard_core::codec::bf16_bits(s * g.random_range(lo..hi));
            if b & 0x7fff != 0 {
                break b;
            }
        })
        .collect()
}

/// `n` non-zero, non-NaN e4m3 codes of both signs.
fn rand_fp8(g: &mut SmallRng, n: usize) -> Vec<u8> {
    (0..n)
        .map(|_| loop {
            let c: u8 = g.random();
            if c & 0x7f != 0 && c & 0x7f != 0x7f {
                break c;
            }
        })
        .collect()
}

fn rand_f32(g: &mut SmallRng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| g.random_range(lo..hi)).collect()
}

/// Random ids in `[0, n)`.
fn rand_ids(g: &mut SmallRng, count: usize, n: usize) -> Vec<i32> {
    (0..count).map(|_| g.random_range(0..n as i32)).collect()
}

// ------------------------------------------------------------------ embed --

fn embed_gather_fp8(be: &Arc<dyn Backend>) {
    let mut g = rng(1);
    // (rows, h, vocab, bad ids)
    for (rows, h, vocab, bad) in [(1, 8, 5, false), (1, 16, 3, true), (7, 40, 33, true), (16, 136, 97, true), (3, 24, 1, false)] {
        let table = rand_fp8(&mut g, vocab * h);
        let row_scale = rand_f32(&mut g, vocab, 0.001, 0.2);
        let mut ids = rand_ids(&mut g, rows, vocab);
        if bad {
            ids[0] = vocab as i32; // one past the end
            if rows > 2 {
                ids[rows - 1] = -1;
                ids[rows / 2] = i32::MIN;
            }
        }
        let scale = if rows % 2 == 0 { (h as f32).sqrt() } else { g.random_range(0.1..3.0) };
        let mut b = Bench::new(be, format!("embed_gather_fp8 rows={rows} h={h} vocab={vocab} scale={scale}"));
        let out = b.out_bf16("out", rows * h);
        let t = b.input_region("table", table.clone());
        let s = b.input_region("row_scale", bytes::f32_bytes(&row_scale));
        let i = b.input_region("ids", bytes::i32_bytes(&ids));
        b.run(|o| o.embed_gather_fp8(out.region(), t, s, i, rows, vocab, h, scale));
        b.check_bf16(out, &r::embed_gather_fp8(&table, &row_scale, &ids, h, vocab, scale), 1, Nan::Bits(BF16_NAN));
        b.finish();
    }
}

fn embed_gather_bf16(be: &Arc<dyn Backend>) {
    let mut g = rng(2);
    for (rows, h, vocab, bad) in [(1, 2, 3, false), (1, 6, 4, true), (5, 42, 17, true), (9, 130, 61, true)] {
        let table = rand_bf16(&mut g, vocab * h, 0.01, 2.0);
        let mut ids = rand_ids(&mut g, rows, vocab);
        if bad {
            ids[0] = vocab as i32 + 7;
            if rows > 2 {
                ids[2] = -3;
            }
        }
        let scale = g.random_range(0.5..40.0);
        let mut b = Bench::new(be, format!("embed_gather_bf16 rows={rows} h={h} vocab={vocab} scale={scale}"));
        let out = b.out_bf16("out", rows * h);
        let t = b.input_region("table", bf16_bytes(&table));
        let i = b.input_region("ids", bytes::i32_bytes(&ids));
        b.run(|o| o.embed_gather_bf16(out.region(), t, i, rows, vocab, h, scale));
        b.check_bf16(out, &r::pts(r::embed_gather_bf16(&table, &ids, h, vocab, scale)), 1, Nan::Any);
        b.finish();
    }
}

fn gather_rows_bf16(be: &Arc<dyn Backend>) {
    let mut g = rng(3);
    for (rows, h, n_src, bad) in [(1, 2, 3, false), (1, 4, 2, true), (11, 38, 17, true), (4, 256, 4, false), (20, 10, 5, true)] {
        let src = rand_bf16(&mut g, n_src * h, 0.01, 4.0);
        let mut idx = rand_ids(&mut g, rows, n_src);
        if bad {
            idx[0] = n_src as i32;
            if rows > 2 {
                idx[rows - 1] = -1;
            }
        }
        let mut b = Bench::new(be, format!("gather_rows_bf16 rows={rows} h={h} n_src={n_src}"));
        let out = b.out_bf16("out", rows * h);
        let s = b.input_region("src", bf16_bytes(&src));
        let i = b.input_region("idx", bytes::i32_bytes(&idx));
        b.run(|o| o.gather_rows_bf16(out.region(), s, i, rows, n_src, h));
        b.check_bf16(out, &r::pts(r::gather_rows(&src, &idx, h, n_src)), 0, Nan::Any);
        b.finish();
    }
}

// ------------------------------------------------------------------- norm --

/// rows = 1, dims not a multiple of 8 or 32, a dim of 2, a wide row, m = 16.
const NORM_SHAPES: [(usize, usize); 6] = [(1, 2), (1, 64), (5, 42), (3, 1030), (16, 200), (2, 4098)];

fn rmsnorm_bf16(be: &Arc<dyn Backend>) {
    let mut g = rng(4);
    for (k, &(rows, dim)) in NORM_SHAPES.iter().enumerate() {
        for weighted in [true, false] {
            let eps = if k % 2 == 0 { 1e-6 } else { 0.03 };
            let x = rand_bf16(&mut g, rows * dim, 0.01, 3.0);
            let w = rand_bf16(&mut g, dim, 0.1, 2.0);
            let mut b = Bench::new(be, format!("rmsnorm_bf16 rows={rows} dim={dim} eps={eps} w={}", if weighted { "set" } else { "null" }));
            let out = b.out_bf16("out", rows * dim);
            let xa = b.input_region("x", bf16_bytes(&x));
            let wa = weighted.then(|| b.input_region("w", bf16_bytes(&w)));
            b.run(|o| o.rmsnorm_bf16(out.region(), xa, wa, rows, dim, eps));
            b.check_bf16(out, &r::pts(r::rmsnorm(&x, weighted.then_some(&w[..]), dim, eps)), 1, Nan::Any);
            b.finish();
        }
    }
}

fn post_norm_add_pre_norm_bf16(be: &Arc<dyn Backend>) {
    let mut g = rng(5);
    for (k, &(rows, dim)) in NORM_SHAPES.iter().enumerate() {
        // (w_post set, w_pre set, resid_out aliases resid, non-null normed with w_pre null)
        for (wpost_on, wpre_on, alias, normed_given) in
            [(true, true, false, true), (true, false, false, false), (false, true, true, true), (true, false, k % 2 == 0, true)]
        {
            let eps = 1e-6;
            let resid = rand_bf16(&mut g, rows * dim, 0.5, 4.0);
            let x = rand_bf16(&mut g, rows * dim, 0.01, 3.0);
            let wpost = rand_bf16(&mut g, dim, 0.05, 0.5);
            let wpre = rand_bf16(&mut g, dim, 0.1, 2.0);
            let mut b = Bench::new(
                be,
                format!(
                    "post_norm_add_pre_norm_bf16 rows={rows} dim={dim} w_post={} w_pre={} alias={alias} normed={}",
                    if wpost_on { "set" } else { "null" },
                    if wpre_on { "set" } else { "null" },
                    if normed_given { "set" } else { "null" }
                ),
            );
            let (ro, ra) = if alias {
                let o = b.output("resid_out(=resid)", bf16_bytes(&resid));
                (o, o.region())
            } else {
                let o = b.out_bf16("resid_out", rows * dim);
                (o, b.input_region("resid", bf16_bytes(&resid)))
            };
            let normed = normed_given.then(|| b.out_bf16("normed", rows * dim));
            let xa = b.input_region("x", bf16_bytes(&x));
            let wpo = wpost_on.then(|| b.input_region("w_post", bf16_bytes(&wpost)));
            let wpr = wpre_on.then(|| b.input_region("w_pre", bf16_bytes(&wpre)));
            b.run(|o| o.post_norm_add_pre_norm_bf16(ro.region(), normed.map(Out::region), ra, xa, wpo, wpr, rows, dim, eps));
            let (e_ro, e_nm) = r::sandwich(&resid, &x, wpost_on.then_some(&wpost[..]), wpre_on.then_some(&wpre[..]), dim, eps);
            b.check_bf16(ro, &e_ro, 1, Nan::Any);
            match (normed, wpre_on) {
                (Some(n), true) => b.check_bf16(n, &e_nm, 1, Nan::Any),
                // "w_pre null: the second output is skipped": the buffer keeps its poison.
                (Some(n), false) => check_i32(
                    &format!("{} (skipped output must stay untouched)", b.name(n)),
                    &b.bf16(n).iter().map(|&v| v as i32).collect::<Vec<_>>(),
                    &vec![BF16_POISON as i32; rows * dim],
                ),
                (None, _) => {}
            }
            b.finish();
        }
    }
}

fn layer_out_bf16(be: &Arc<dyn Backend>) {
    let mut g = rng(6);
    for &(rows, dim) in &NORM_SHAPES {
        for weighted in [true, false] {
            let eps = 1e-6;
            let mid = rand_bf16(&mut g, rows * dim, 0.5, 4.0);
            let x = rand_bf16(&mut g, rows * dim, 0.01, 3.0);
            let w = rand_bf16(&mut g, dim, 0.05, 0.5);
            let scalar = g.random_range(0.2..1.5f32);
            let mut b =
                Bench::new(be, format!("layer_out_bf16 rows={rows} dim={dim} w={} scalar={scalar}", if weighted { "set" } else { "null" }));
            let out = b.out_bf16("out", rows * dim);
            let ma = b.input_region("mid", bf16_bytes(&mid));
            let xa = b.input_region("x", bf16_bytes(&x));
            let wa = weighted.then(|| b.input_region("w", bf16_bytes(&w)));
            let sa = b.input_region("layer_scalar", bytes::f32_bytes(&[scalar]));
            b.run(|o| o.layer_out_bf16(out.region(), ma, xa, wa, sa, rows, dim, eps));
            b.check_bf16(out, &r::layer_out(&mid, &x, weighted.then_some(&w[..]), scalar, dim, eps), 1, Nan::Any);
            b.finish();
        }
    }
}

// ---------------------------------------------------------------- rope_kv --

struct QkvShape {
    rows: usize,
    nh: usize,
    nkv: usize,
    hd: usize,
    k_eq_v: bool,
    pmap: bool,
    norms: bool,
}

fn qkv_prep_bf16(be: &Arc<dyn Backend>) {
    let mut g = rng(7);
    let shapes = [
        QkvShape { rows: 1, nh: 2, nkv: 1, hd: 64, k_eq_v: false, pmap: false, norms: true },
        QkvShape { rows: 5, nh: 4, nkv: 2, hd: 42, k_eq_v: true, pmap: false, norms: true },
        QkvShape { rows: 3, nh: 3, nkv: 0, hd: 128, k_eq_v: false, pmap: false, norms: true },
        QkvShape { rows: 2, nh: 1, nkv: 0, hd: 6, k_eq_v: false, pmap: true, norms: false },
        QkvShape { rows: 6, nh: 2, nkv: 2, hd: 10, k_eq_v: false, pmap: true, norms: false },
        QkvShape { rows: 4, nh: 8, nkv: 1, hd: 512, k_eq_v: true, pmap: false, norms: true },
        QkvShape { rows: 7, nh: 1, nkv: 1, hd: 2, k_eq_v: false, pmap: true, norms: true },
        QkvShape { rows: 16, nh: 3, nkv: 3, hd: 34, k_eq_v: false, pmap: false, norms: true },
    ];
    for s in shapes {
        let (rows, nh, nkv, hd) = (s.rows, s.nh, s.nkv, s.hd);
        let src_rows = if s.pmap { rows + 3 } else { rows };
        let max_pos = 37;
        let num_slots = rows * 2 + 3;
        let eps = 1e-6;
        let q_raw = rand_bf16(&mut g, src_rows * nh * hd, 0.01, 3.0);
        let k_raw = rand_bf16(&mut g, src_rows * nkv * hd, 0.01, 3.0);
        let v_raw = if s.k_eq_v { k_raw.clone() } else { rand_bf16(&mut g, src_rows * nkv * hd, 0.01, 3.0) };
        let q_norm = rand_bf16(&mut g, hd, 0.1, 2.0);
        let k_norm = rand_bf16(&mut g, hd, 0.1, 2.0);
        // Random (not trigonometric) cos/sin pairs: the kernel must use the table as given.
        let cos_sin = rand_f32(&mut g, max_pos * hd, -1.0, 1.0);
        let mut pos = rand_ids(&mut g, rows, max_pos);
        // Distinct slots in random order.
        let mut slot: Vec<i32> = (0..num_slots as i32).collect();
        for i in (1..slot.len()).rev() {
            slot.swap(i, g.random_range(0..=i));
        }
        slot.truncate(rows);
        let mut pmap = rand_ids(&mut g, rows, src_rows);
        if rows > 2 {
            slot[rows - 1] = -1; // padding: no KV write
            pos[1] = max_pos as i32; // out of the table: NaN row (with a valid slot: NaN KV too)
            pos[rows - 1] = -2; // out of the table on a padding row
        }
        if rows > 4 {
            slot[3] = num_slots as i32; // past the pool: no KV write
        }
        if s.pmap && rows > 3 {
            pmap[2] = src_rows as i32; // source row out of range: NaN row
        }
        let k_pool0 = rand_bf16(&mut g, num_slots * nkv * hd, 0.5, 1.0);
        let v_pool0 = rand_bf16(&mut g, num_slots * nkv * hd, 0.5, 1.0);

        let label = format!(
            "qkv_prep_bf16 rows={rows} src_rows={src_rows} nh={nh} nkv={nkv} hd={hd}{}{}{}",
            if s.k_eq_v { " k_eq_v" } else { "" },
            if s.pmap { " pmap" } else { "" },
            if s.norms { "" } else { " norms=null" }
        );
        let mut b = Bench::new(be, label);
        let q_out = b.out_bf16("q_out", rows * nh * hd);
        let kv = nkv > 0;
        let k_pool = kv.then(|| b.output("k_pool", bf16_bytes(&k_pool0)));
        let v_pool = kv.then(|| b.output("v_pool", bf16_bytes(&v_pool0)));
        let qa = b.input_region("q_raw", bf16_bytes(&q_raw));
        let ka = kv.then(|| b.input_region("k_raw", bf16_bytes(&k_raw)));
        let va = if s.k_eq_v { ka } else { kv.then(|| b.input_region("v_raw", bf16_bytes(&v_raw))) };
        let qn = s.norms.then(|| b.input_region("q_norm", bf16_bytes(&q_norm)));
        let kn = (s.norms && kv).then(|| b.input_region("k_norm", bf16_bytes(&k_norm)));
        let cs = b.input_region("cos_sin", bytes::f32_bytes(&cos_sin));
        let pa = b.input_region("pos", bytes::i32_bytes(&pos));
        let sa = kv.then(|| b.input_region("slot", bytes::i32_bytes(&slot)));
        let pm = s.pmap.then(|| b.input_region("pmap", bytes::i32_bytes(&pmap)));
        let p = QkvPrep {
            q_out: q_out.region(),
            k_pool: k_pool.map(Out::region),
            v_pool: v_pool.map(Out::region),
            q_raw: qa,
            k_raw: ka,
            v_raw: va,
            q_norm: qn,
            k_norm: kn,
            cos_sin: cs,
            pos: pa,
            slot: sa,
            pmap: pm,
            rows,
            src_rows,
            nh,
            nkv,
            hd,
            max_pos,
            num_slots: if kv { num_slots } else { 0 },
            eps,
        };
        b.run(|o| o.qkv_prep_bf16(&p));
        let input = r::QkvIn {
            q_raw: &q_raw,
            k_raw: &k_raw,
            v_raw: &v_raw,
            q_norm: s.norms.then_some(&q_norm[..]),
            k_norm: s.norms.then_some(&k_norm[..]),
            cos_sin: &cos_sin,
            pos: &pos,
            slot: &slot,
            pmap: s.pmap.then_some(&pmap[..]),
            nh,
            nkv,
            hd,
            src_rows,
            max_pos,
            num_slots,
            eps,
        };
        let (eq, ek, ev) = r::qkv_prep(&input, &k_pool0, &v_pool0);
        b.check_bf16(q_out, &eq, 1, Nan::Bits(BF16_NAN));
        if let (Some(k), Some(v)) = (k_pool, v_pool) {
            b.check_bf16(k, &ek, 1, Nan::Bits(BF16_NAN));
            b.check_bf16(v, &ev, 1, Nan::Bits(BF16_NAN));
        }
        b.finish();
    }
}

// -------------------------------------------------------------------- moe --

/// (rows, k, experts): one pair, more experts than pairs, heavy duplication
/// (3 experts), and a batch spanning several 256-pair chunks.
const MOE_SHAPES: [(usize, usize, usize); 5] = [(1, 1, 4), (6, 2, 8), (12, 4, 3), (300, 2, 128), (1024, 4, 64)];

fn moe_ids(g: &mut SmallRng, n: usize, e: usize) -> Vec<i32> {
    let mut ids = rand_ids(g, n, e);
    if n == 1 {
        return ids;
    }
    ids[1] = -1;
    ids[n - 1] = e as i32;
    if n > 5 {
        ids[4] = i32::MIN;
        ids[5] = i32::MAX;
    }
    ids
}

fn moe_count(be: &Arc<dyn Backend>) {
    let mut g = rng(8);
    for &(rows, k, e) in &MOE_SHAPES {
        let n = rows * k;
        let ids = moe_ids(&mut g, n, e);
        let mut b = Bench::new(be, format!("moe_count n={n} e={e}"));
        let counts = b.out_i32("counts", e);
        let ia = b.input_region("topk_ids", bytes::i32_bytes(&ids));
        b.run(|o| o.moe_count(counts.region(), ia, n, e));
        b.check_i32(counts, &r::moe_counts(&ids, e));
        b.finish();
    }
}

fn moe_offsets(be: &Arc<dyn Backend>) {
    let mut g = rng(9);
    for e in [1usize, 7, 128, 300] {
        let counts: Vec<i32> = (0..e).map(|_| g.random_range(0..50)).collect();
        let mut b = Bench::new(be, format!("moe_offsets e={e}"));
        let off = b.out_i32("offsets", e + 1);
        let cur = b.out_i32("cursor", e);
        let ca = b.input_region("counts", bytes::i32_bytes(&counts));
        b.run(|o| o.moe_offsets(off.region(), cur.region(), ca, e));
        let eo = r::moe_offsets(&counts);
        b.check_i32(off, &eo);
        b.check_i32(cur, &eo[..e]);
        b.finish();
    }
}

fn moe_scatter(be: &Arc<dyn Backend>) {
    let mut g = rng(10);
    for &(rows, k, e) in &MOE_SHAPES {
        let n = rows * k;
        let ids = moe_ids(&mut g, n, e);
        let offsets = r::moe_offsets(&r::moe_counts(&ids, e));
        let mut b = Bench::new(be, format!("moe_scatter n={n} e={e}"));
        let pos = b.out_i32("pair_of_slot", n);
        let sop = b.out_i32("slot_of_pair", n);
        let cur = b.output("cursor", bytes::i32_bytes(&offsets[..e]));
        let oa = b.input_region("offsets", bytes::i32_bytes(&offsets));
        let ia = b.input_region("topk_ids", bytes::i32_bytes(&ids));
        b.run(|o| o.moe_scatter(pos.region(), sop.region(), cur.region(), oa, ia, n, e));
        let (epos, esop, ecur) = r::moe_scatter(&ids, &offsets, e);
        b.check_i32(pos, &epos);
        b.check_i32(sop, &esop);
        b.check_i32(cur, &ecur);
        b.finish();
    }
}

fn moe_route(be: &Arc<dyn Backend>) {
    let mut g = rng(11);
    for &(rows, k, e) in &MOE_SHAPES {
        let n = rows * k;
        let ids = moe_ids(&mut g, n, e);
        let mut b = Bench::new(be, format!("moe_route rows={rows} k={k} e={e}"));
        let counts = b.out_i32("counts", e);
        let off = b.out_i32("offsets", e + 1);
        let cur = b.out_i32("cursor", e);
        let pos = b.out_i32("pair_of_slot", n);
        let sop = b.out_i32("slot_of_pair", n);
        let ia = b.input_region("topk_ids", bytes::i32_bytes(&ids));
        b.run(|o| o.moe_route(counts.region(), off.region(), cur.region(), pos.region(), sop.region(), ia, rows, k, e));
        let ec = r::moe_counts(&ids, e);
        let eo = r::moe_offsets(&ec);
        let (epos, esop, ecur) = r::moe_scatter(&ids, &eo, e);
        b.check_i32(counts, &ec);
        b.check_i32(off, &eo);
        b.check_i32(pos, &epos);
        b.check_i32(sop, &esop);
        b.check_i32(cur, &ecur);
        // The contract's order, restated: within each expert's segment, pairs increase.
        let pos_v = b.i32(pos);
        for x in 0..e {
            let seg = &pos_v[eo[x] as usize..eo[x + 1] as usize];
            assert!(seg.windows(2).all(|w| w[0] < w[1]), "{}: expert {x} segment not in pair order: {seg:?}", b.label);
        }
        b.finish();
    }
}

// ------------------------------------------------------------------- head --

/// (m, vocab, hdim, softcap): m = 1 and 16, odd vocabs, hdim = 8, softcap on/off
/// (0.5 saturates most logits).
const HEAD_SHAPES: [(usize, usize, usize, f32); 6] =
    [(1, 97, 64, 0.0), (16, 250, 136, 30.0), (3, 1001, 40, 15.0), (5, 33, 8, 0.0), (16, 7, 16, 0.5), (1, 1, 8, 30.0)];

fn lm_head_logits_fp8(be: &Arc<dyn Backend>) {
    let mut g = rng(12);
    for (m, vocab, hdim, cap) in HEAD_SHAPES {
        let e8 = rand_fp8(&mut g, vocab * hdim);
        let scale = rand_f32(&mut g, vocab, 0.001, 0.1);
        let h = rand_bf16(&mut g, m * hdim, 0.01, 2.0);
        let mut b = Bench::new(be, format!("lm_head_logits_fp8 m={m} vocab={vocab} hdim={hdim} softcap={cap}"));
        let out = b.out_f32("out", m * vocab);
        let ha = b.input_region("h", bf16_bytes(&h));
        let ea = b.input_region("e8", e8.clone());
        let sa = b.input_region("row_scale", bytes::f32_bytes(&scale));
        b.run(|o| o.lm_head_logits_fp8(out.region(), ha, ea, sa, m, vocab, hdim, cap));
        let (exp, bound) = r::lm_head_fp8(&h, &e8, &scale, m, vocab, hdim, cap);
        b.check_dot(out, &exp, &bound);
        b.finish();
    }
}

fn lm_head_logits_bf16(be: &Arc<dyn Backend>) {
    let mut g = rng(13);
    for (m, vocab, hdim, cap) in HEAD_SHAPES {
        let table = rand_bf16(&mut g, vocab * hdim, 0.001, 0.2);
        let h = rand_bf16(&mut g, m * hdim, 0.01, 2.0);
        let mut b = Bench::new(be, format!("lm_head_logits_bf16 m={m} vocab={vocab} hdim={hdim} softcap={cap}"));
        let out = b.out_f32("out", m * vocab);
        let ha = b.input_region("h", bf16_bytes(&h));
        let ta = b.input_region("table", bf16_bytes(&table));
        b.run(|o| o.lm_head_logits_bf16(out.region(), ha, ta, m, vocab, hdim, cap));
        let (exp, bound) = r::lm_head_bf16(&h, &table, m, vocab, hdim, cap);
        b.check_dot(out, &exp, &bound);
        b.finish();
    }
}

fn letter_logits_fp8(be: &Arc<dyn Backend>) {
    let mut g = rng(14);
    for (rows, n_labels, hdim, vocab, cap) in [(1, 4, 64, 50, 0.0), (7, 6, 136, 301, 30.0), (20, 1, 8, 9, 0.0), (3, 5, 16, 2, 2.0)] {
        let e8 = rand_fp8(&mut g, vocab * hdim);
        let scale = rand_f32(&mut g, vocab, 0.001, 0.1);
        let hidden = rand_bf16(&mut g, rows * hdim, 0.01, 2.0);
        let mut labels = rand_ids(&mut g, n_labels, vocab);
        if n_labels > 4 {
            labels[4] = vocab as i32; // out of range: NaN
            labels[1] = -1;
        }
        let mut b = Bench::new(be, format!("letter_logits_fp8 rows={rows} labels={labels:?} hdim={hdim} vocab={vocab} softcap={cap}"));
        let out = b.out_f32("out", rows * n_labels);
        let ha = b.input_region("hidden", bf16_bytes(&hidden));
        let ea = b.input_region("e8", e8.clone());
        let sa = b.input_region("row_scale", bytes::f32_bytes(&scale));
        let la = b.input_region("label_ids", bytes::i32_bytes(&labels));
        b.run(|o| o.letter_logits_fp8(out.region(), ha, ea, sa, la, rows, n_labels, hdim, vocab, cap));
        let (exp, bound) = r::letter_logits(&hidden, &e8, &scale, &labels, hdim, vocab, cap);
        b.check_dot(out, &exp, &bound);
        b.finish();
    }
}

/// Runs argmax over `logits` `[m, vocab]` and checks idx and val exactly.
fn argmax_case(be: &Arc<dyn Backend>, what: &str, logits: &[f32], m: usize, vocab: usize, ex0: i32, ex1: i32) {
    let mut b = Bench::new(be, format!("argmax_rows {what} m={m} vocab={vocab} ex=({ex0},{ex1})"));
    let idx = b.out_i32("idx", m);
    let val = b.out_f32("val", m);
    let la = b.input_region("logits", bytes::f32_bytes(logits));
    b.run(|o| o.argmax_rows(idx.region(), val.region(), la, m, vocab, ex0, ex1));
    let exp: Vec<(i32, f32)> = logits.chunks_exact(vocab).map(|row| r::argmax_row(row, ex0, ex1)).collect();
    b.check_i32(idx, &exp.iter().map(|e| e.0).collect::<Vec<_>>());
    // Values compared bit for bit (the logit itself, -0.0 and -inf included).
    let got: Vec<i32> = b.f32(val).iter().map(|v| v.to_bits() as i32).collect();
    let want: Vec<i32> = exp.iter().map(|e| e.1.to_bits() as i32).collect();
    check_i32(&format!("{} (f32 bits)", b.name(val)), &got, &want);
    b.finish();
}

fn argmax_rows(be: &Arc<dyn Backend>) {
    let mut g = rng(15);
    // Random rows, no exclusions, rows = 1.
    argmax_case(be, "random", &rand_f32(&mut g, 7, -20.0, 20.0), 1, 7, -1, -1);

    // m = 16 over an odd vocab with planted ties, exclusions and NaN.
    let (m, vocab, ex0, ex1) = (16, 4099, 3, 4000);
    let mut l = rand_f32(&mut g, m * vocab, -20.0, 20.0);
    for i in 0..m {
        let row = &mut l[i * vocab..(i + 1) * vocab];
        match i {
            0 => {
                row[ex0 as usize] = 50.0; // max on an excluded id
                row[ex1 as usize] = 49.0; // and the runner-up on the other
                row[100] = 40.0;
                row[200] = 40.0; // tie: 100 wins
            }
            1 => {
                row[0] = f32::NAN;
                row[10] = f32::NAN;
                row[vocab - 1] = 30.0;
                row[vocab - 2] = f32::NAN;
            }
            2 => {
                row.fill(f32::NAN);
                row[vocab - 1] = -100.0; // the only eligible value
            }
            3 => row.fill(f32::NAN), // nothing eligible: -1 / -inf
            4 => {
                row[0] = 45.0;
                row[vocab - 1] = 45.0; // tie at both ends: 0 wins
            }
            5 => row[7] = f32::INFINITY,
            6 => {
                row.fill(f32::NAN);
                row[ex0 as usize] = 1.0;
                row[ex1 as usize] = 2.0; // only excluded values and NaN: -1 / -inf
            }
            7 => {
                row.fill(-5.0); // all equal: lowest non-excluded index (0)
            }
            8 => {
                row.fill(-5.0);
                row[0] = f32::NAN;
                row[1] = f32::NAN;
                row[2] = f32::NAN; // then 3 is excluded: 4 wins
            }
            _ => {}
        }
    }
    argmax_case(be, "planted", &l, m, vocab, ex0, ex1);

    // Every id excluded.
    argmax_case(be, "all excluded", &rand_f32(&mut g, 4, -1.0, 1.0), 2, 2, 0, 1);
    // Both exclusions the same id, and an exclusion past the vocab.
    let mut l = rand_f32(&mut g, 3 * 262, -20.0, 20.0);
    l[5] = 99.0;
    l[262 + 9] = 99.0;
    l[262 + 200] = 98.0;
    argmax_case(be, "ex0 == ex1", &l, 3, 262, 5, 5);
    argmax_case(be, "ex past vocab", &l, 3, 262, 9, 100_000);
}

/// Edges the contract decides by its wording: `-inf` is an eligible value (not
/// NaN, not excluded), so a row of `-inf` gives its lowest eligible index;
/// `-0.0 == 0.0`, so the lowest index wins that tie.
fn argmax_rows_edges(be: &Arc<dyn Backend>) {
    let vocab = 9;
    let mut l = vec![f32::NEG_INFINITY; 3 * vocab];
    // The launch excludes id 0.
    // row 0: all -inf -> index 1 (the lowest eligible), value -inf.
    // row 1: all -inf and a NaN -> index 1, value -inf.
    l[vocab + 4] = f32::NAN;
    // row 2: -0.0 at 3, +0.0 at 6, rest negative: tie -> 3, value -0.0
    for v in &mut l[2 * vocab..] {
        *v = -1.0;
    }
    l[2 * vocab + 3] = -0.0;
    l[2 * vocab + 6] = 0.0;
    argmax_case(be, "edges", &l, 3, vocab, 0, -1);
}

// ------------------------------------------------------------ per backend --

/// The kernels this file tests.
const TESTED: [&str; 14] = [
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
];

/// Instantiates every kernel test for one backend.
macro_rules! kernel_tests {
    ($backend:ident, $make:expr) => {
        mod $backend {
            use super::*;
            fn be() -> Arc<dyn Backend> {
                $make
            }
            #[test]
            fn embed_gather_fp8() {
                super::embed_gather_fp8(&be())
            }
            #[test]
            fn embed_gather_bf16() {
                super::embed_gather_bf16(&be())
            }
            #[test]
            fn gather_rows_bf16() {
                super::gather_rows_bf16(&be())
            }
            #[test]
            fn rmsnorm_bf16() {
                super::rmsnorm_bf16(&be())
            }
            #[test]
            fn post_norm_add_pre_norm_bf16() {
                super::post_norm_add_pre_norm_bf16(&be())
            }
            #[test]
            fn layer_out_bf16() {
                super::layer_out_bf16(&be())
            }
            #[test]
            fn qkv_prep_bf16() {
                super::qkv_prep_bf16(&be())
            }
            #[test]
            fn moe_count() {
                super::moe_count(&be())
            }
            #[test]
            fn moe_offsets() {
                super::moe_offsets(&be())
            }
            #[test]
            fn moe_scatter() {
                super::moe_scatter(&be())
            }
            #[test]
            fn moe_route() {
                super::moe_route(&be())
            }
            #[test]
            fn lm_head_logits_fp8() {
                super::lm_head_logits_fp8(&be())
            }
            #[test]
            fn lm_head_logits_bf16() {
                super::lm_head_logits_bf16(&be())
            }
            #[test]
            fn argmax_rows() {
                super::argmax_rows(&be())
            }
            #[test]
            fn argmax_rows_edges() {
                super::argmax_rows_edges(&be())
            }
            #[test]
            fn letter_logits_fp8() {
                super::letter_logits_fp8(&be())
            }
            /// Every kernel tested above is declared and implemented on this
            /// backend (a test here can never silently skip its kernel).
            #[test]
            fn every_tested_kernel_is_implemented() {
                let be = be();
                for sym in TESTED {
                    let sig = switchyard_core::registry::kernels().into_iter().find(|s| s.symbol == sym);
                    let sig = sig.unwrap_or_else(|| panic!("{sym} is tested here but not declared in the catalogue"));
                    assert!(
                        switchyard_core::registry::implements(be.kind(), sig),
                        "{}::{} is not implemented on {}",
                        sig.module,
                        sym,
                        be.name()
                    );
                }
            }
        }
    };
}

kernel_tests!(cpu, switchyard_cpu_ref::cpu_backend());
