//! The bodies of Switchyard's fuzz targets, as plain functions over bytes.
//!
//! They live here, not in `fuzz_targets/`, so that the regression suite
//! (`tests/tests/fuzz_regressions.rs`, which includes this file by path)
//! replays a saved input through exactly the code the fuzzer ran. The file
//! depends only on the Switchyard crates: no libFuzzer, no `arbitrary`.
//!
//! Both harnesses drive the bounds-checked CPU reference backend. A harness
//! returning normally means the input was handled; a panic (an `expect`, an
//! arithmetic overflow with debug assertions, an index out of range, or one
//! of the asserts below) is a finding.
use std::sync::Arc;
use switchyard_core::{registry, Arg, ArgKind, Backend, DeviceBuffer, Region};
use switchyard_kernels::attn::{AttnDecode, AttnParams, KvView};
use switchyard_kernels::gemm::w4a16::Fp4Weight;
use switchyard_kernels::moe::expert::ExpertWeights;
use switchyard_kernels::rope_kv::QkvPrep;
use switchyard_kernels::Ops;
use switchyard_model::checkpoint::Checkpoint;
use switchyard_model::graph::Model;
use switchyard_model::quant::Quant;

/// Reads the fuzz input front to back; past the end every read is 0, so
/// short inputs still describe a complete (mostly default) case.
pub struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data }
    }
    /// Next byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }
    /// Next little-endian u16.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    /// Next little-endian u32.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    /// Next little-endian u64.
    pub fn u64(&mut self) -> u64 {
        (self.u32() as u64) | ((self.u32() as u64) << 32)
    }
    /// An index in `0..n` (`n` > 0).
    pub fn pick(&mut self, n: usize) -> usize {
        self.u8() as usize % n
    }
}

// ---------------------------------------------------------------------------
// checkpoint_loader

/// Splits a loader input: byte 0 picks the quantization, then the config
/// text up to the first NUL byte, then the safetensors bytes. `None` when the
/// config part is not UTF-8 (`Checkpoint::open` refuses such a file before
/// parsing, so there is nothing further to exercise).
pub fn split_loader_input(data: &[u8]) -> Option<(Quant, String, Vec<u8>)> {
    let (&q, rest) = data.split_first()?;
    let quant = [Quant::None, Quant::Fp8Embed, Quant::Nvfp4][q as usize % 3];
    let (cfg, st) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    Some((quant, String::from_utf8(cfg.to_vec()).ok()?, st.to_vec()))
}

/// Builds a loader input from its parts (the inverse of [`split_loader_input`]).
pub fn join_loader_input(quant: u8, config: &str, safetensors: &[u8]) -> Vec<u8> {
    let mut v = vec![quant];
    v.extend_from_slice(config.as_bytes());
    v.push(0);
    v.extend_from_slice(safetensors);
    v
}

/// What one load did, for the regression tests to assert on.
#[derive(Debug)]
pub enum LoadOutcome {
    /// `Checkpoint::from_bytes` refused the safetensors bytes.
    CheckpointErr(String),
    /// The checkpoint parsed; `Model::load` refused it.
    ModelErr(String),
    /// The model loaded, with this many device bytes live while it existed.
    Loaded(usize),
}

/// The whole load path on a fresh CPU backend: parse the checkpoint, then
/// `Model::load` (config validation, tensor lookup, shape and dtype checks,
/// quantization, upload). Asserts that every error has a message and that
/// everything uploaded is freed once the model (or the failed load) is gone.
pub fn load_once(quant: Quant, config: String, safetensors: Vec<u8>) -> LoadOutcome {
    let be = switchyard_cpu_ref::cpu_backend();
    let outcome = match Checkpoint::from_bytes("fuzz", config, safetensors) {
        Err(e) => LoadOutcome::CheckpointErr(e.to_string()),
        Ok(ck) => match Model::load(&ck, be.clone(), quant) {
            Err(e) => LoadOutcome::ModelErr(e.to_string()),
            Ok(model) => {
                let live = be.live_bytes();
                // A loaded model holds exactly what it says it uploaded
                // (bf16/quantised copies) and nothing else.
                assert!(live >= model.weights.device_bytes, "live {live} < uploaded {}", model.weights.device_bytes);
                drop(model);
                LoadOutcome::Loaded(live)
            }
        },
    };
    if let LoadOutcome::CheckpointErr(m) | LoadOutcome::ModelErr(m) = &outcome {
        assert!(!m.trim().is_empty(), "an error without a message");
    }
    // A failed load must not leak what it uploaded before it failed.
    assert_eq!(be.live_bytes(), 0, "device bytes still live after the load ended: {outcome:?}");
    outcome
}

// ---------------------------------------------------------------------------
// launch_validator

/// Live and dead addresses the launch arguments are drawn from.
struct Pool {
    bufs: Vec<DeviceBuffer>,
    freed: u64,
    /// A region of a buffer that has been dropped (typed launchers must refuse it).
    freed_region: Region,
}

/// Small values, boundaries and overflow bait, for scalars and shapes.
const EDGES: [u64; 20] =
    [0, 1, 2, 3, 7, 8, 16, 17, 32, 64, 128, 256, 4096, 65_535, (1 << 31) - 1, 1 << 31, (1 << 32) - 1, 1 << 32, 1 << 62, u64::MAX];

impl Pool {
    fn new(be: &Arc<dyn Backend>, r: &mut Reader) -> Pool {
        let n = 1 + r.pick(4);
        let mut bufs = Vec::with_capacity(n);
        for _ in 0..n {
            let size = 1 + r.u16() as usize % 4096;
            let b = DeviceBuffer::new(be, size).expect("a buffer of at most 4 KiB must allocate");
            // Contents matter for index-typed inputs (ids, offsets, block
            // tables): sometimes small in-range i32s, sometimes raw noise.
            let seed = r.u64();
            let fill: Vec<u8> = match r.pick(4) {
                0 => vec![0; size],
                1 => (0..size).map(|i| if i % 4 == 0 { (seed.rotate_left(i as u32 % 64) % 8) as u8 } else { 0 }).collect(),
                2 => (0..size).map(|i| (seed.wrapping_mul(i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8).collect(),
                _ => (0..size).map(|i| if i % 2 == 1 { 0x3f } else { (i as u8).wrapping_mul(seed as u8) }).collect(),
            };
            b.write(&fill).expect("upload into a fresh buffer");
            bufs.push(b);
        }
        let freed = be.alloc(64).expect("alloc 64 bytes");
        be.free(freed).expect("free what was just allocated");
        let freed_region = DeviceBuffer::new(be, 64).expect("alloc 64 bytes").region();
        Pool { bufs, freed, freed_region }
    }

    /// A region for a typed launcher: a whole live buffer, a sub-range of
    /// one (possibly empty), or a region whose buffer was freed.
    fn region(&self, r: &mut Reader) -> Region {
        let b = &self.bufs[r.pick(self.bufs.len())];
        let len = b.len();
        match r.pick(8) {
            0 => self.freed_region,
            1 | 2 => {
                let off = r.u16() as usize % (len + 1);
                b.region().tail(off).expect("offset within the buffer")
            }
            3 => {
                let off = r.u16() as usize % (len + 1);
                let n = r.u16() as usize % (len - off + 1);
                b.slice(off, n).expect("range within the buffer")
            }
            _ => b.region(),
        }
    }

    /// An optional region: absent one time in four.
    fn opt_region(&self, r: &mut Reader) -> Option<Region> {
        if r.pick(4) == 0 {
            None
        } else {
            Some(self.region(r))
        }
    }

    /// A pointer argument: null, inside a live buffer, at or past its end,
    /// into a freed allocation, or a random 64-bit value.
    fn ptr(&self, r: &mut Reader) -> u64 {
        let b = &self.bufs[r.pick(self.bufs.len())];
        let (base, len) = (b.addr(), b.len() as u64);
        match r.pick(10) {
            0 => 0,
            1..=3 => base,
            4 => base + r.u16() as u64 % len,
            5 => base + len,
            6 => base.wrapping_add(len + r.u16() as u64),
            7 => self.freed + r.u8() as u64 % 64,
            8 => r.u64(),
            _ => base.wrapping_add(r.u32() as u64),
        }
    }
}

fn edge(r: &mut Reader) -> u64 {
    match r.pick(4) {
        0 | 1 => r.u8() as u64 % 33,
        2 => EDGES[r.pick(EDGES.len())],
        _ => r.u64(),
    }
}

/// A shape: usually small, sometimes a boundary or an overflow.
fn dim(r: &mut Reader) -> usize {
    edge(r) as usize
}

fn scalar_f32(r: &mut Reader) -> f32 {
    match r.pick(6) {
        0 => 0.0,
        1 => 1.0,
        2 => 1e-6,
        3 => f32::NAN,
        4 => f32::INFINITY,
        _ => f32::from_bits(r.u32()),
    }
}

fn arg_of_kind(kind: ArgKind, pool: &Pool, r: &mut Reader) -> Arg {
    match kind {
        ArgKind::Ptr => Arg::P(pool.ptr(r)),
        ArgKind::I32 => Arg::I(match r.pick(3) {
            0 => -(r.u8() as i32),
            _ => edge(r) as i32,
        }),
        ArgKind::U32 => Arg::U(edge(r) as u32),
        ArgKind::F32 => Arg::F(scalar_f32(r)),
    }
}

/// A raw `Backend::launch` of a registered kernel with arbitrary arguments.
fn raw_launch(be: &Arc<dyn Backend>, pool: &Pool, r: &mut Reader) {
    let all = registry::kernels();
    let sig = all[r.u8() as usize % all.len()];
    let kinds = [ArgKind::Ptr, ArgKind::I32, ArgKind::U32, ArgKind::F32];
    let n = if r.pick(8) == 0 { r.pick(24) } else { sig.args.len() };
    let args: Vec<Arg> = (0..n)
        .map(|i| {
            let kind = match sig.args.get(i) {
                Some(spec) if r.pick(8) != 0 => spec.kind,
                _ => kinds[r.pick(4)],
            };
            arg_of_kind(kind, pool, r)
        })
        .collect();
    if let Err(e) = be.launch(sig, &args) {
        assert!(!e.to_string().is_empty());
    }
}

/// One of the typed launchers with arbitrary shapes and pointers.
fn typed_launch(be: &Arc<dyn Backend>, pool: &Pool, r: &mut Reader) {
    let ops = Ops::new(be.clone());
    let reg = |r: &mut Reader| pool.region(r);
    let res = match r.pick(18) {
        0 => ops.dense_gemm_bf16(pool.region(r), pool.region(r), pool.region(r), dim(r), dim(r), dim(r)),
        1 => ops.dense_gemm_tc_scaled_acc(pool.region(r), pool.region(r), pool.region(r), dim(r), dim(r), dim(r), scalar_f32(r)),
        2 => ops.dense_gemm_splitk_bf16(pool.region(r), pool.region(r), pool.region(r), dim(r), dim(r), dim(r), dim(r)),
        3 => ops.rmsnorm_bf16(pool.region(r), pool.region(r), pool.opt_region(r), dim(r), dim(r), scalar_f32(r)),
        4 => ops.lm_head_logits_bf16(reg(r), reg(r), reg(r), dim(r), dim(r), dim(r), scalar_f32(r)),
        5 => ops.argmax_rows(reg(r), reg(r), reg(r), dim(r), dim(r), edge(r) as i32, edge(r) as i32),
        6 => ops.embed_gather_bf16(reg(r), reg(r), reg(r), dim(r), dim(r), dim(r), scalar_f32(r)),
        7 => ops.gather_rows_bf16(reg(r), reg(r), reg(r), dim(r), dim(r), dim(r)),
        8 => ops.moe_route(reg(r), reg(r), reg(r), reg(r), reg(r), reg(r), dim(r), dim(r), dim(r)),
        9 => ops.moe_router_topk(reg(r), reg(r), reg(r), reg(r), dim(r), dim(r), dim(r)),
        10 => ops.moe_gather_bf16(reg(r), reg(r), reg(r), dim(r), dim(r), dim(r), dim(r)),
        11 => {
            let w = if r.pick(2) == 0 {
                ExpertWeights::Bf16 { w: reg(r) }
            } else {
                ExpertWeights::Nvfp4 { wq: reg(r), ws: reg(r), scale2: reg(r) }
            };
            ops.moe_grouped_gemm(reg(r), reg(r), &w, reg(r), dim(r), dim(r), dim(r), dim(r))
        }
        12 => ops.gelu_mul_bf16(reg(r), reg(r), dim(r), dim(r)),
        13 => ops.moe_combine_bf16(reg(r), reg(r), reg(r), reg(r), dim(r), dim(r), dim(r), dim(r)),
        14 => {
            let w = Fp4Weight { bq: pool.region(r), bs: pool.region(r), scale2: scalar_f32(r), ldb: dim(r) };
            match r.pick(3) {
                0 => ops.w4a16_gemm(pool.region(r), &w, pool.region(r), dim(r), dim(r), dim(r)),
                1 => ops.w4a16_gemm_n128_ldb(pool.region(r), &w, pool.region(r), dim(r), dim(r), dim(r)),
                _ => ops.w4a16_gemm_decode(pool.region(r), &w, pool.region(r), dim(r), dim(r), dim(r)),
            }
        }
        15 => ops.copy_u32(reg(r), reg(r), dim(r)),
        16 => {
            let kv = KvView {
                k_pool: pool.region(r),
                v_pool: pool.region(r),
                block_table: pool.region(r),
                nkv: dim(r),
                hd: dim(r),
                page: dim(r),
                max_pages: dim(r),
                num_seqs: dim(r),
                num_slots: dim(r),
            };
            let ap = AttnParams { nh: dim(r), window: dim(r), scale: scalar_f32(r) };
            if r.pick(2) == 0 {
                ops.attention_prefill(pool.region(r), pool.region(r), pool.region(r), pool.region(r), dim(r), &kv, &ap)
            } else {
                let d = AttnDecode { out: pool.region(r), q: pool.region(r), ctx_len: pool.region(r), batch: dim(r), max_ctx: dim(r) };
                ops.attention_decode(&d, &kv, &ap)
            }
        }
        _ => ops.qkv_prep_bf16(&QkvPrep {
            q_out: pool.region(r),
            k_pool: pool.opt_region(r),
            v_pool: pool.opt_region(r),
            q_raw: pool.region(r),
            k_raw: pool.opt_region(r),
            v_raw: pool.opt_region(r),
            q_norm: pool.opt_region(r),
            k_norm: pool.opt_region(r),
            cos_sin: pool.region(r),
            pos: pool.region(r),
            slot: pool.opt_region(r),
            pmap: pool.opt_region(r),
            rows: dim(r),
            src_rows: dim(r),
            nh: dim(r),
            nkv: dim(r),
            hd: dim(r),
            max_pos: dim(r),
            num_slots: dim(r),
            eps: scalar_f32(r),
        }),
    };
    if let Err(e) = res {
        assert!(!e.to_string().is_empty());
    }
}

/// One fuzz case: a pool of live buffers (plus a freed one) on a fresh CPU
/// backend, then a few raw or typed launches against it. Afterwards the
/// pool is dropped and nothing may remain allocated.
pub fn launch_once(data: &[u8]) {
    let be = switchyard_cpu_ref::cpu_backend();
    let mut r = Reader::new(data);
    {
        let pool = Pool::new(&be, &mut r);
        for _ in 0..1 + r.pick(3) {
            if r.pick(2) == 0 {
                raw_launch(&be, &pool, &mut r);
            } else {
                typed_launch(&be, &pool, &mut r);
            }
        }
        be.synchronize().expect("the CPU backend has nothing deferred to fail");
    }
    assert_eq!(be.live_bytes(), 0, "allocations outlived every buffer");
}
