//! Paged attention over the KV pool that [`crate::rope_kv`] writes.
//!
//! KV cache layout: K and V pools `[num_slots, nkv, hd]` bf16, in pages of
//! `page` tokens; sequence `b`'s token `j` lives in slot
//! `block_table[b · max_pages + j / page] · page + j % page`. Query head `h`
//! reads KV head `h / (nh / nkv)` (grouped-query attention).
//!
//! Contract, both kernels: scores `s_j = scale · Σ_d q[d] · k_j[d]` in f32
//! (Gemma 4 uses scale = 1.0), causal (keys `j <= p` for a query at position
//! `p`) and, when `window > 0`, sliding (keys `j > p − window`, as HF's
//! sliding-window mask); softmax in f32 with the running-max (online) form;
//! `out = bf16(Σ_j softmax(s)_j · v_j)` with f32 accumulation. The order of
//! the sums is the backend's: parity is NMSE ≤ 1e-6 against the reference.
//! A row whose sequence, pages or slots fall outside the tables gets bf16 NaN.
use crate::ops::{bf16s, blocks, i32_arg, require, sat, words, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use switchyard_core::codec::bytes;
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, Error, Result};

/// NMSE bound for attention outputs (summation order differs by backend).
pub const ATTN_NMSE: f64 = 1e-6;
/// Blocks the decode split aims to launch, so that long single sequences fill the GPU.
const DECODE_TARGET_BLOCKS: usize = 512;
/// Fewest keys a decode split should cover.
const MIN_SPLIT_KEYS: usize = 256;

declare_kernel! {
    /// Causal (optionally sliding) attention for `rows` query rows of any mix
    /// of sequences: row `r` belongs to sequence `seq_of_row[r]` at position
    /// `pos[r]` and attends to that sequence's keys `0..=pos[r]` (window
    /// permitting) through the block table. Its own KV must already be in the
    /// pool. Shapes: out, q bf16 `[rows, nh·hd]`; block_table i32
    /// `[num_seqs, max_pages]`; seq_of_row, pos i32 `[rows]`. Grid
    /// `(⌈rows/64⌉, nh)`, block 128. hd % 8 == 0, hd ≤ 512, nh % nkv == 0.
    ATTENTION_PREFILL = "attn"::"attention_prefill"(
        A::output("out"), A::input("q"), A::input("k_pool"), A::input("v_pool"), A::input("block_table"),
        A::input("seq_of_row"), A::input("pos"), A::i32("rows"), A::i32("nh"), A::i32("nkv"), A::i32("hd"),
        A::i32("page"), A::i32("max_pages"), A::i32("num_seqs"), A::i32("num_slots"), A::i32("window"), A::f32("scale"))
}

declare_kernel! {
    /// Decode phase 1: one query per sequence (`q` `[batch, nh·hd]`, at
    /// position `ctx_len[b] − 1`, its KV already written), keys split into
    /// `splits` chunks of `split_len` starting at the window's first key.
    /// Per (b, h, split): `m` = max score, `l = Σ e^{s−m}`, `o = Σ e^{s−m} v`
    /// (unnormalised, f32) into `o_ws` `[batch, nh, splits, hd]` and `ml_ws`
    /// `[batch, nh, splits, 2]`; an empty split writes `m = −inf, l = 0, o = 0`.
    /// Grid `(splits, nh, batch)`, block 128.
    ATTENTION_DECODE_PARTIAL = "attn"::"attention_decode_partial"(
        A::output("o_ws"), A::output("ml_ws"), A::input("q"), A::input("k_pool"), A::input("v_pool"),
        A::input("block_table"), A::input("ctx_len"), A::i32("batch"), A::i32("nh"), A::i32("nkv"), A::i32("hd"),
        A::i32("page"), A::i32("max_pages"), A::i32("num_slots"), A::i32("window"), A::f32("scale"),
        A::i32("splits"), A::i32("split_len"))
}

declare_kernel! {
    /// Decode phase 2: `M = max_s m_s`, `out[b, h] = bf16(Σ_s e^{m_s−M} o_s / Σ_s e^{m_s−M} l_s)`,
    /// summed in split order. Grid `(batch, nh)`, block 128.
    ATTENTION_DECODE_REDUCE = "attn"::"attention_decode_reduce"(
        A::output("out"), A::input("o_ws"), A::input("ml_ws"), A::i32("batch"), A::i32("nh"), A::i32("hd"), A::i32("splits"))
}

/// The paged KV cache a launch reads.
#[derive(Clone, Copy, Debug)]
pub struct KvView {
    /// K pool `[num_slots, nkv, hd]`.
    pub k_pool: u64,
    /// V pool `[num_slots, nkv, hd]`.
    pub v_pool: u64,
    /// Block table i32 `[num_seqs, max_pages]`.
    pub block_table: u64,
    /// KV heads.
    pub nkv: usize,
    /// Head dimension.
    pub hd: usize,
    /// Tokens per page.
    pub page: usize,
    /// Pages per sequence in the block table.
    pub max_pages: usize,
    /// Rows (sequences) of the block table.
    pub num_seqs: usize,
    /// Slots in the pools.
    pub num_slots: usize,
}

/// Attention settings shared by prefill and decode.
#[derive(Clone, Copy, Debug)]
pub struct AttnParams {
    /// Query heads.
    pub nh: usize,
    /// Sliding window (0 = full causal).
    pub window: usize,
    /// Score scale.
    pub scale: f32,
}

fn check_view(kernel: &str, kv: &KvView, p: &AttnParams) -> Result<()> {
    require(kv.hd > 0 && kv.hd % 8 == 0 && kv.hd <= 512, kernel, "hd", || format!("hd = {} must be a multiple of 8 in 8..=512", kv.hd))?;
    require(kv.nkv > 0 && p.nh > 0 && p.nh % kv.nkv == 0, kernel, "nh", || {
        format!("nh = {} must be a positive multiple of nkv = {}", p.nh, kv.nkv)
    })?;
    require(kv.page > 0, kernel, "page", || "page must be > 0".into())?;
    require(kv.max_pages > 0 && kv.num_seqs > 0 && kv.num_slots > 0, kernel, "block_table", || {
        "max_pages, num_seqs and num_slots must be > 0".into()
    })?;
    require(p.scale.is_finite(), kernel, "scale", || format!("scale = {} must be finite", p.scale))?;
    i32_arg(kernel, "window", p.window).map(|_| ())
}

fn kv_args(kernel: &str, kv: &KvView) -> Result<[(switchyard_core::Arg, usize); 3]> {
    i32_arg(kernel, "num_slots", kv.num_slots)?;
    let pool = bf16s(sat(&[kv.num_slots, kv.nkv, kv.hd]));
    Ok([(P(kv.k_pool), pool), (P(kv.v_pool), pool), (P(kv.block_table), words(sat(&[kv.num_seqs, kv.max_pages])))])
}

/// Buffers and sizes of one decode step.
#[derive(Clone, Copy, Debug)]
pub struct AttnDecode {
    /// Output `[batch, nh·hd]` bf16.
    pub out: u64,
    /// Queries `[batch, nh·hd]` bf16.
    pub q: u64,
    /// Context lengths i32 `[batch]` (query position + 1).
    pub ctx_len: u64,
    /// Sequences.
    pub batch: usize,
    /// Upper bound on every `ctx_len`, known on the host; sizes the split.
    pub max_ctx: usize,
    /// f32 workspace of at least [`AttnDecode::workspace_bytes`] bytes.
    pub workspace: u64,
    /// Splits the workspace has room for.
    pub max_splits: usize,
}

impl AttnDecode {
    /// Workspace bytes for `batch` sequences, `nh` heads and up to `splits` splits.
    pub fn workspace_bytes(batch: usize, nh: usize, hd: usize, splits: usize) -> usize {
        words(sat(&[batch, nh, splits, hd.saturating_add(2)]))
    }
}

impl Ops {
    /// See [`ATTENTION_PREFILL`].
    #[allow(clippy::too_many_arguments)]
    pub fn attention_prefill(&self, out: u64, q: u64, seq_of_row: u64, pos: u64, rows: usize, kv: &KvView, p: &AttnParams) -> Result<()> {
        let k = ATTENTION_PREFILL.symbol;
        check_view(k, kv, p)?;
        require(rows > 0, k, "rows", || "rows must be > 0".into())?;
        let width = sat(&[p.nh, kv.hd]);
        let [kp, vp, bt] = kv_args(k, kv)?;
        self.go(
            &ATTENTION_PREFILL,
            [blocks(k, rows, 64)?, blocks(k, p.nh, 1)?, 1],
            [128, 1, 1],
            &[
                (P(out), bf16s(sat(&[rows, width]))),
                (P(q), bf16s(sat(&[rows, width]))),
                kp,
                vp,
                bt,
                (P(seq_of_row), words(rows)),
                (P(pos), words(rows)),
                (I(i32_arg(k, "rows", rows)?), 0),
                (I(i32_arg(k, "nh", p.nh)?), 0),
                (I(i32_arg(k, "nkv", kv.nkv)?), 0),
                (I(kv.hd as i32), 0),
                (I(i32_arg(k, "page", kv.page)?), 0),
                (I(i32_arg(k, "max_pages", kv.max_pages)?), 0),
                (I(i32_arg(k, "num_seqs", kv.num_seqs)?), 0),
                (I(kv.num_slots as i32), 0),
                (I(p.window as i32), 0),
                (F(p.scale), 0),
            ],
        )
    }

    /// Split-K decode attention: chooses the split from `max_ctx` and the
    /// window so that long single sequences still fill the device, then runs
    /// the partial and reduce kernels.
    pub fn attention_decode(&self, d: &AttnDecode, kv: &KvView, p: &AttnParams) -> Result<()> {
        let k = ATTENTION_DECODE_PARTIAL.symbol;
        check_view(k, kv, p)?;
        require(d.batch > 0 && d.batch <= kv.num_seqs, k, "batch", || {
            format!("batch = {} must be in 1..=num_seqs ({})", d.batch, kv.num_seqs)
        })?;
        require(d.max_ctx > 0 && d.max_ctx <= sat(&[kv.max_pages, kv.page]), k, "max_ctx", || {
            format!("max_ctx = {} must be in 1..=max_pages·page ({})", d.max_ctx, sat(&[kv.max_pages, kv.page]))
        })?;
        require(d.max_splits > 0, k, "workspace", || "max_splits must be > 0".into())?;
        let keys = if p.window > 0 { d.max_ctx.min(p.window) } else { d.max_ctx };
        let want = DECODE_TARGET_BLOCKS.div_ceil(d.batch * p.nh);
        let splits = want.min(keys.div_ceil(MIN_SPLIT_KEYS)).clamp(1, d.max_splits);
        let split_len = keys.div_ceil(splits);
        self.attention_decode_split(d, kv, p, splits, split_len)
    }

    /// Decode attention with an explicit split (`splits · split_len` must cover
    /// the keys a query can see). See [`ATTENTION_DECODE_PARTIAL`].
    pub fn attention_decode_split(&self, d: &AttnDecode, kv: &KvView, p: &AttnParams, splits: usize, split_len: usize) -> Result<()> {
        let k = ATTENTION_DECODE_PARTIAL.symbol;
        check_view(k, kv, p)?;
        require((1..=d.max_splits).contains(&splits), k, "splits", || format!("splits = {splits} must be in 1..={}", d.max_splits))?;
        require(split_len > 0, k, "split_len", || "split_len must be > 0".into())?;
        let keys = if p.window > 0 { d.max_ctx.min(p.window) } else { d.max_ctx };
        require(splits * split_len >= keys, k, "split_len", || format!("{splits} splits of {split_len} keys do not cover {keys} keys"))?;
        let width = sat(&[p.nh, kv.hd]);
        let o_bytes = words(sat(&[d.batch, p.nh, splits, kv.hd]));
        let ml_bytes = words(sat(&[d.batch, p.nh, splits, 2]));
        let ws_bytes = AttnDecode::workspace_bytes(d.batch, p.nh, kv.hd, d.max_splits);
        self.be.check_range(d.workspace, ws_bytes).map_err(|e| Error::oob(k, "workspace", e))?;
        let (o_ws, ml_ws) = (d.workspace, d.workspace + o_bytes as u64);
        let [kp, vp, bt] = kv_args(k, kv)?;
        let (b32, nh32) = (i32_arg(k, "batch", d.batch)?, i32_arg(k, "nh", p.nh)?);
        self.go(
            &ATTENTION_DECODE_PARTIAL,
            [blocks(k, splits, 1)?, blocks(k, p.nh, 1)?, blocks(k, d.batch, 1)?],
            [128, 1, 1],
            &[
                (P(o_ws), o_bytes),
                (P(ml_ws), ml_bytes),
                (P(d.q), bf16s(sat(&[d.batch, width]))),
                kp,
                vp,
                bt,
                (P(d.ctx_len), words(d.batch)),
                (I(b32), 0),
                (I(nh32), 0),
                (I(i32_arg(k, "nkv", kv.nkv)?), 0),
                (I(kv.hd as i32), 0),
                (I(i32_arg(k, "page", kv.page)?), 0),
                (I(i32_arg(k, "max_pages", kv.max_pages)?), 0),
                (I(kv.num_slots as i32), 0),
                (I(p.window as i32), 0),
                (F(p.scale), 0),
                (I(splits as i32), 0),
                (I(i32_arg(k, "split_len", split_len)?), 0),
            ],
        )?;
        let r = ATTENTION_DECODE_REDUCE.symbol;
        self.go(
            &ATTENTION_DECODE_REDUCE,
            [blocks(r, d.batch, 1)?, blocks(r, p.nh, 1)?, 1],
            [128, 1, 1],
            &[
                (P(d.out), bf16s(sat(&[d.batch, width]))),
                (P(o_ws), o_bytes),
                (P(ml_ws), ml_bytes),
                (I(b32), 0),
                (I(nh32), 0),
                (I(kv.hd as i32), 0),
                (I(splits as i32), 0),
            ],
        )
    }
}

/// A random paged KV cache for `lens` sequences: pools, a block table whose
/// pages are shuffled across the pool (so paging bugs show), and the sizes.
struct PagedCache {
    k_pool: Vec<u8>,
    v_pool: Vec<u8>,
    table: Vec<i32>,
    num_slots: usize,
    max_pages: usize,
}

fn paged_cache(g: &mut Gen, lens: &[usize], nkv: usize, hd: usize, page: usize) -> PagedCache {
    let max_pages = lens.iter().map(|l| l.div_ceil(page)).max().unwrap_or(1).max(1);
    let total_pages = lens.len() * max_pages + 2;
    let mut pages: Vec<i32> = (0..total_pages as i32).collect();
    for i in (1..pages.len()).rev() {
        let j = rand::Rng::random_range(&mut g.rng, 0..=i);
        pages.swap(i, j);
    }
    let table = pages[..lens.len() * max_pages].to_vec();
    let num_slots = total_pages * page;
    let (_, k_pool) = g.bf16(num_slots * nkv * hd, 0.01, 1.0);
    let (_, v_pool) = g.bf16(num_slots * nkv * hd, 0.01, 1.0);
    PagedCache { k_pool, v_pool, table, num_slots, max_pages }
}

struct AttnShape {
    lens: &'static [usize],
    nh: usize,
    nkv: usize,
    hd: usize,
    page: usize,
    window: usize,
    scale: f32,
}

const ATTN_SHAPES: [AttnShape; 5] = [
    AttnShape { lens: &[1], nh: 2, nkv: 1, hd: 64, page: 16, window: 0, scale: 1.0 },
    AttnShape { lens: &[37, 5], nh: 4, nkv: 2, hd: 128, page: 16, window: 0, scale: 0.125 },
    AttnShape { lens: &[40, 23, 9], nh: 4, nkv: 1, hd: 72, page: 8, window: 7, scale: 0.3 },
    AttnShape { lens: &[70], nh: 2, nkv: 2, hd: 256, page: 16, window: 16, scale: 0.0625 },
    AttnShape { lens: &[19, 33], nh: 2, nkv: 1, hd: 512, page: 4, window: 0, scale: 0.05 },
];

fn label(s: &AttnShape) -> String {
    format!("lens={:?} nh={} nkv={} hd={} page={} window={}", s.lens, s.nh, s.nkv, s.hd, s.page, s.window)
}

fn prefill_cases(g: &mut Gen) -> Vec<Case> {
    ATTN_SHAPES
        .iter()
        .map(|s| {
            let c = paged_cache(g, s.lens, s.nkv, s.hd, s.page);
            // Every position of every sequence, interleaved, like a batched prefill.
            let (mut seq_of_row, mut pos) = (Vec::new(), Vec::new());
            for (b, &l) in s.lens.iter().enumerate() {
                for p in 0..l {
                    seq_of_row.push(b as i32);
                    pos.push(p as i32);
                }
            }
            let rows = pos.len();
            let (_, q) = g.bf16(rows * s.nh * s.hd, 0.01, 1.0);
            let kv = KvView {
                k_pool: 0,
                v_pool: 0,
                block_table: 0,
                nkv: s.nkv,
                hd: s.hd,
                page: s.page,
                max_pages: c.max_pages,
                num_seqs: s.lens.len(),
                num_slots: c.num_slots,
            };
            let params = AttnParams { nh: s.nh, window: s.window, scale: s.scale };
            Case {
                kernel: &ATTENTION_PREFILL,
                label: label(s),
                buffers: vec![
                    Buffer::output("out", DType::BF16, rows * s.nh * s.hd, Tolerance::Nmse(ATTN_NMSE)),
                    Buffer::input("q", q),
                    Buffer::input("k_pool", c.k_pool),
                    Buffer::input("v_pool", c.v_pool),
                    Buffer::input("block_table", bytes::i32_bytes(&c.table)),
                    Buffer::input("seq_of_row", bytes::i32_bytes(&seq_of_row)),
                    Buffer::input("pos", bytes::i32_bytes(&pos)),
                ],
                run: Box::new(move |o, a| {
                    let kv = KvView { k_pool: a[2].addr(), v_pool: a[3].addr(), block_table: a[4].addr(), ..kv };
                    o.attention_prefill(a[0].addr(), a[1].addr(), a[5].addr(), a[6].addr(), rows, &kv, &params)
                }),
            }
        })
        .collect()
}

fn decode_cases(g: &mut Gen) -> Vec<Case> {
    ATTN_SHAPES
        .iter()
        .flat_map(|s| {
            // Each shape twice: the split Ops picks, and many short splits (some empty past the window).
            [None, Some(5usize)].into_iter().map(move |forced| (s, forced))
        })
        .map(|(s, forced)| {
            let c = paged_cache(g, s.lens, s.nkv, s.hd, s.page);
            let batch = s.lens.len();
            let max_ctx = *s.lens.iter().max().expect("non-empty");
            let (_, q) = g.bf16(batch * s.nh * s.hd, 0.01, 1.0);
            let ctx: Vec<i32> = s.lens.iter().map(|&l| l as i32).collect();
            let max_splits = 8;
            let ws = AttnDecode::workspace_bytes(batch, s.nh, s.hd, max_splits);
            let kv = KvView {
                k_pool: 0,
                v_pool: 0,
                block_table: 0,
                nkv: s.nkv,
                hd: s.hd,
                page: s.page,
                max_pages: c.max_pages,
                num_seqs: batch,
                num_slots: c.num_slots,
            };
            let params = AttnParams { nh: s.nh, window: s.window, scale: s.scale };
            Case {
                kernel: &ATTENTION_DECODE_PARTIAL,
                label: format!("{}{}", label(s), forced.map_or(String::new(), |n| format!(" split_len={n}"))),
                buffers: vec![
                    Buffer::output("out", DType::BF16, batch * s.nh * s.hd, Tolerance::Nmse(ATTN_NMSE)),
                    Buffer::input("q", q),
                    Buffer::input("k_pool", c.k_pool),
                    Buffer::input("v_pool", c.v_pool),
                    Buffer::input("block_table", bytes::i32_bytes(&c.table)),
                    Buffer::input("ctx_len", bytes::i32_bytes(&ctx)),
                    Buffer::input("workspace", vec![0u8; ws]),
                ],
                run: Box::new(move |o, a| {
                    let kv = KvView { k_pool: a[2].addr(), v_pool: a[3].addr(), block_table: a[4].addr(), ..kv };
                    let d = AttnDecode {
                        out: a[0].addr(),
                        q: a[1].addr(),
                        ctx_len: a[5].addr(),
                        batch,
                        max_ctx,
                        workspace: a[6].addr(),
                        max_splits,
                    };
                    match forced {
                        None => o.attention_decode(&d, &kv, &params),
                        Some(len) => {
                            let keys = if params.window > 0 { max_ctx.min(params.window) } else { max_ctx };
                            o.attention_decode_split(
                                &d,
                                &kv,
                                &params,
                                keys.div_ceil(len).min(max_splits),
                                len.max(keys.div_ceil(max_splits)),
                            )
                        }
                    }
                }),
            }
        })
        .collect()
}

fn reduce_cases(g: &mut Gen) -> Vec<Case> {
    [(1usize, 2usize, 64usize, 1usize), (3, 4, 72, 5), (2, 2, 512, 8)]
        .into_iter()
        .map(|(batch, nh, hd, splits)| {
            let (_, o) = g.f32(batch * nh * splits * hd, -3.0, 3.0);
            let (mut ml, _) = g.f32(batch * nh * splits * 2, 0.5, 4.0);
            if splits > 2 {
                ml[2] = f32::NEG_INFINITY; // an empty split
                ml[3] = 0.0;
            }
            Case {
                kernel: &ATTENTION_DECODE_REDUCE,
                label: format!("batch={batch} nh={nh} hd={hd} splits={splits}"),
                buffers: vec![
                    Buffer::output("out", DType::BF16, batch * nh * hd, Tolerance::Nmse(ATTN_NMSE)),
                    Buffer::input("o_ws", o),
                    Buffer::input("ml_ws", bytes::f32_bytes(&ml)),
                ],
                run: Box::new(move |ops, a| ops.attention_decode_reduce(a[0].addr(), a[1].addr(), a[2].addr(), batch, nh, hd, splits)),
            }
        })
        .collect()
}

impl Ops {
    /// Decode phase 2 alone. See [`ATTENTION_DECODE_REDUCE`].
    #[allow(clippy::too_many_arguments)]
    pub fn attention_decode_reduce(
        &self,
        out: u64,
        o_ws: u64,
        ml_ws: u64,
        batch: usize,
        nh: usize,
        hd: usize,
        splits: usize,
    ) -> Result<()> {
        let r = ATTENTION_DECODE_REDUCE.symbol;
        require(hd > 0 && hd % 8 == 0 && hd <= 512, r, "hd", || format!("hd = {hd} must be a multiple of 8 in 8..=512"))?;
        require(batch > 0 && nh > 0 && splits > 0, r, "batch", || "batch, nh and splits must be > 0".into())?;
        self.go(
            &ATTENTION_DECODE_REDUCE,
            [blocks(r, batch, 1)?, blocks(r, nh, 1)?, 1],
            [128, 1, 1],
            &[
                (P(out), bf16s(sat(&[batch, nh, hd]))),
                (P(o_ws), words(sat(&[batch, nh, splits, hd]))),
                (P(ml_ws), words(sat(&[batch, nh, splits, 2]))),
                (I(i32_arg(r, "batch", batch)?), 0),
                (I(i32_arg(r, "nh", nh)?), 0),
                (I(hd as i32), 0),
                (I(i32_arg(r, "splits", splits)?), 0),
            ],
        )
    }
}

inventory::submit! { CaseSet { kernel: &ATTENTION_PREFILL, cases: prefill_cases } }
inventory::submit! { CaseSet { kernel: &ATTENTION_DECODE_PARTIAL, cases: decode_cases } }
inventory::submit! { CaseSet { kernel: &ATTENTION_DECODE_REDUCE, cases: reduce_cases } }
