//! The bodies of Switchyard's fuzz targets, as plain functions over bytes.
//!
//! They live here, not in `fuzz_targets/`, so that the regression suite
//! (`tests/tests/fuzz_regressions.rs`, which includes this file by path)
//! replays a saved input through exactly the code the fuzzer ran. The file
//! depends only on the Switchyard crates: no libFuzzer, no `arbitrary`.
//!
//! The harnesses drive the bounds-checked CPU reference backend. A harness
//! returning normally means the input was handled; a panic (an `expect`, an
//! arithmetic overflow with debug assertions, an index out of range, or one
//! of the asserts below) is a finding.
use std::sync::Arc;
use switchyard_cli::request;
use switchyard_core::{registry, Arg, ArgKind, Backend, DeviceBuffer, Region};
use switchyard_kernels::attn::{AttnDecode, AttnParams, KvView};
use switchyard_kernels::gemm::w4a16::Fp4Weight;
use switchyard_kernels::moe::expert::ExpertWeights;
use switchyard_kernels::moe::rows::CombinePostNorms;
use switchyard_kernels::rope_kv::QkvPrep;
use switchyard_kernels::Ops;
use switchyard_model::checkpoint::Checkpoint;
use switchyard_model::config::{ModelConfig, MAX_LAYERS};
use switchyard_model::generate::{generate, Request};
use switchyard_model::graph::Model;
use switchyard_model::quant::Quant;
use switchyard_model::tensors::ModelTensors;
use switchyard_model::text::is_unsafe;

/// A message shown to a user: non-empty, short, and free of anything a
/// terminal would interpret (the inputs are full of control characters).
fn assert_clean_message(m: &str) {
    assert!(!m.trim().is_empty(), "an error without a message");
    assert!(
        m.len() <= 4096,
        "a {}-byte error message (a quoted value not clipped?): {}…",
        m.len(),
        m.chars().take(200).collect::<String>()
    );
    assert!(!m.chars().any(is_unsafe), "a raw control character in the message {m:?}");
}

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

/// `generate`'s flags as text, the way they arrive from the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenArgs {
    /// `--prompt-ids`, when given (else the built-in default prompt).
    pub prompt_ids: Option<String>,
    /// `--max-new-tokens`.
    pub max_new_tokens: String,
    /// `--json` (keep every step's logits).
    pub json: bool,
    /// `--ignore-eos`.
    pub ignore_eos: bool,
}

impl Default for GenArgs {
    fn default() -> Self {
        GenArgs { prompt_ids: Some("1,2,3".into()), max_new_tokens: "3".into(), json: true, ignore_eos: false }
    }
}

/// One checkpoint_loader input, split.
#[derive(Clone, Debug)]
pub struct LoaderInput {
    /// `--quant`.
    pub quant: Quant,
    /// The generation flags.
    pub gen: GenArgs,
    /// `config.json` text.
    pub config: String,
    /// The safetensors file.
    pub safetensors: Vec<u8>,
}

/// Splits a loader input: byte 0 picks the quantization; byte 1 holds the
/// flags (bit 0 `--json`, bit 1 `--ignore-eos`, bit 2 no `--prompt-ids`);
/// then the `--prompt-ids` text, the `--max-new-tokens` text and the config
/// text, each up to a NUL byte; the rest is the safetensors file. `None`
/// when a text part is not UTF-8 (the command line and `Checkpoint::open`
/// refuse those before anything here runs).
pub fn split_loader_input(data: &[u8]) -> Option<LoaderInput> {
    let (&q, rest) = data.split_first()?;
    let (&flags, mut rest) = rest.split_first()?;
    let mut text = || -> Option<String> {
        let (t, r) = match rest.iter().position(|&b| b == 0) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &[][..]),
        };
        rest = r;
        String::from_utf8(t.to_vec()).ok()
    };
    let (prompt, max_new, config) = (text()?, text()?, text()?);
    Some(LoaderInput {
        quant: [Quant::None, Quant::Fp8Embed, Quant::Nvfp4][q as usize % 3],
        gen: GenArgs {
            prompt_ids: (flags & 4 == 0).then_some(prompt),
            max_new_tokens: max_new,
            json: flags & 1 != 0,
            ignore_eos: flags & 2 != 0,
        },
        config,
        safetensors: rest.to_vec(),
    })
}

/// Builds a loader input from its parts (the inverse of [`split_loader_input`]).
pub fn join_loader_input_with(quant: u8, gen: &GenArgs, config: &str, safetensors: &[u8]) -> Vec<u8> {
    let flags = gen.json as u8 | (gen.ignore_eos as u8) << 1 | (gen.prompt_ids.is_none() as u8) << 2;
    let mut v = vec![quant, flags];
    for part in [gen.prompt_ids.as_deref().unwrap_or(""), &gen.max_new_tokens, config] {
        v.extend_from_slice(part.as_bytes());
        v.push(0);
    }
    v.extend_from_slice(safetensors);
    v
}

/// [`join_loader_input_with`] with the default generation flags.
pub fn join_loader_input(quant: u8, config: &str, safetensors: &[u8]) -> Vec<u8> {
    join_loader_input_with(quant, &GenArgs::default(), config, safetensors)
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
/// quantization, upload). Asserts that every error has a clean message and
/// that everything uploaded is freed once the model (or the failed load) is gone.
pub fn load_once(quant: Quant, config: String, safetensors: Vec<u8>) -> LoadOutcome {
    load_with(quant, config, safetensors, None).0
}

fn load_with(quant: Quant, config: String, safetensors: Vec<u8>, gen: Option<&GenArgs>) -> (LoadOutcome, Option<GenOutcome>) {
    let be = switchyard_cpu_ref::cpu_backend();
    let mut generated = None;
    let outcome = match Checkpoint::from_bytes("fuzz", config, safetensors) {
        Err(e) => LoadOutcome::CheckpointErr(e.to_string()),
        Ok(ck) => match Model::load(&ck, be.clone(), quant) {
            Err(e) => LoadOutcome::ModelErr(e.to_string()),
            Ok(model) => {
                let live = be.live_bytes();
                // A loaded model holds exactly what it says it uploaded
                // (bf16/quantised copies) and nothing else.
                assert!(live >= model.weights.device_bytes, "live {live} < uploaded {}", model.weights.device_bytes);
                generated = gen.map(|g| generation_path(&model, g));
                drop(model);
                LoadOutcome::Loaded(live)
            }
        },
    };
    if let LoadOutcome::CheckpointErr(m) | LoadOutcome::ModelErr(m) = &outcome {
        assert_clean_message(m);
    }
    // A failed load (or a finished generation) must not leak what it uploaded.
    assert_eq!(be.live_bytes(), 0, "device bytes still live after the load ended: {outcome:?} {generated:?}");
    (outcome, generated)
}

/// What the generation path did with a loaded model.
#[derive(Debug, PartialEq, Eq)]
pub enum GenOutcome {
    /// `--max-new-tokens` text refused by its parser (clap would print this).
    FlagErr(String),
    /// The flags refused against the config (vocabulary, context).
    RequestErr(String),
    /// An accepted request that failed while running (NaN logits, say).
    GenerateErr(String),
    /// Tokens generated.
    Generated(Vec<u32>),
}

/// Most prompt tokens and new tokens one fuzz case runs. The flags are
/// checked in full (that is the code under test); an accepted request is
/// then run over at most this much, so that a config claiming a huge
/// context cannot make one case take minutes. The same graph and cache code
/// runs either way.
pub const FUZZ_MAX_PROMPT: usize = 48;
/// See [`FUZZ_MAX_PROMPT`].
pub const FUZZ_MAX_NEW: usize = 4;

/// `generate`'s path after the load, as the binary runs it: the
/// `--max-new-tokens` parser, then `request::build` against the config
/// (vocabulary and context checked before anything is allocated), then
/// greedy generation. An accepted request must generate in-vocabulary
/// tokens, as many as asked for unless EOS stopped it, with a logits row
/// of vocabulary length per token when `--json` asked for them.
pub fn generation_path(model: &Model, gen: &GenArgs) -> GenOutcome {
    let max_new = match request::parse_max_new_tokens(&gen.max_new_tokens) {
        Ok(n) => n,
        Err(m) => {
            assert_clean_message(&m);
            return GenOutcome::FlagErr(m);
        }
    };
    if max_new == 0 {
        return GenOutcome::FlagErr("--max-new-tokens must be at least 1".into());
    }
    let req = match request::build(gen.prompt_ids.as_deref(), max_new, gen.json, gen.ignore_eos, &model.cfg) {
        Ok(r) => r,
        Err(e) => {
            let m = format!("{e:#}");
            assert_clean_message(&m);
            return GenOutcome::RequestErr(m);
        }
    };
    // What the binary accepted, the library must accept too.
    switchyard_model::generate::check(&model.cfg, &req).expect("the library refused a request the command line accepted");
    let n = req.prompt.len().min(FUZZ_MAX_PROMPT);
    let run = Request { prompt: req.prompt[req.prompt.len() - n..].to_vec(), max_new_tokens: req.max_new_tokens.min(FUZZ_MAX_NEW), ..req };
    match generate(model, &run) {
        Err(e) => {
            let m = e.to_string();
            assert_clean_message(&m);
            GenOutcome::GenerateErr(m)
        }
        Ok(g) => {
            let v = model.cfg.vocab_size;
            assert!(!g.tokens.is_empty() && g.tokens.len() <= run.max_new_tokens, "{} tokens for {}", g.tokens.len(), run.max_new_tokens);
            assert!(g.stopped_at_eos || g.tokens.len() == run.max_new_tokens, "stopped early without EOS");
            assert!(g.tokens.iter().all(|&t| (t as usize) < v), "a token outside the vocabulary: {:?}", g.tokens);
            if run.want_logits {
                assert_eq!(g.logits.len(), g.tokens.len());
                assert!(g.logits.iter().all(|l| l.len() == v));
            }
            GenOutcome::Generated(g.tokens)
        }
    }
}

/// One checkpoint_loader case: [`load_once`]'s checks, and when the model
/// loads, [`generation_path`] with the input's flags.
pub fn loader_case(input: LoaderInput) -> (LoadOutcome, Option<GenOutcome>) {
    load_with(input.quant, input.config, input.safetensors, Some(&input.gen))
}

// ---------------------------------------------------------------------------
// config_json

/// Parses `data` as a config.json file, alone. A refusal must be a clean
/// message; an accepted config must hold what the rest of the loader relies
/// on: layer count within `MAX_LAYERS`, head sizes the kernels take, KV
/// heads dividing query heads, a positive context, f32-representable
/// scalars, tensor shapes whose sizes compute without overflow, and RoPE
/// tables that are finite (the parser refuses settings whose angles
/// overflow f32 rather than let them turn into NaN logits).
pub fn config_once(data: &[u8]) -> Result<ModelConfig, String> {
    let cfg = match ModelConfig::from_bytes(data) {
        Err(e) => {
            let m = e.to_string();
            assert_clean_message(&m);
            return Err(m);
        }
        Ok(c) => c,
    };
    assert!((1..=MAX_LAYERS).contains(&cfg.layers.len()));
    assert!(cfg.max_position_embeddings >= 1);
    assert!(cfg.hidden_size % 8 == 0 && cfg.intermediate_size % 2 == 0 && cfg.vocab_size > 0);
    assert!(cfg.eps.is_finite() && cfg.eps >= 0.0 && cfg.final_logit_softcapping.is_finite());
    for (i, l) in cfg.layers.iter().enumerate() {
        assert!(l.head_dim % 8 == 0 && (8..=512).contains(&l.head_dim), "layer {i}: head_dim {}", l.head_dim);
        assert!(l.num_kv_heads > 0 && cfg.num_heads % l.num_kv_heads == 0, "layer {i}: {} KV heads", l.num_kv_heads);
        assert!(cfg.num_heads.checked_mul(l.head_dim).is_some());
        let t = (l.rope.theta as f32, l.rope.factor as f32);
        assert!(t.0.is_normal() && t.1.is_normal() && t.0 > 0.0 && t.1 > 0.0, "layer {i}: rope {:?}", l.rope);
        let positions = cfg.max_position_embeddings.min(64);
        let table = switchyard_model::rope::table(&l.rope, l.head_dim, positions).expect("an accepted RoPE setting makes a finite table");
        assert_eq!(table.len(), positions * l.head_dim);
    }
    ModelTensors::of(&cfg).elements().expect("tensor sizes of an accepted config fit u128");
    Ok(cfg)
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
    let res = match r.pick(20) {
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
        17 => ops.moe_norm_gather_bf16(reg(r), reg(r), reg(r), reg(r), dim(r), dim(r), dim(r), dim(r), scalar_f32(r)),
        18 => {
            let b = CombinePostNorms {
                out: reg(r),
                mlp: reg(r),
                y: reg(r),
                slot_of_pair: reg(r),
                topk_w: reg(r),
                w_mlp: reg(r),
                w_moe: reg(r),
            };
            ops.moe_combine_post_norms_bf16(b, dim(r), dim(r), dim(r), dim(r), scalar_f32(r))
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
