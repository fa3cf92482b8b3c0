//! Paged attention and the MoE expert path on the CPU reference, checked by
//! hand and against independent f64 loops: a single key returns v exactly, a
//! hand-computed two-key softmax (and the sliding-window edge), GQA head
//! mapping, decode agreeing with prefill's last row (bit for bit in one
//! chunk), decode's chunk rule written out from its contract, max_ctx
//! changing no bit, invalid pages and contexts giving NaN rows, top-k ties,
//! the combine skipping dropped pairs, and the grouped GEMMs / gather / gelu
//! against plain loops.
use std::sync::Arc;
use switchyard_core::codec::bytes::{
    bf16_bits_from_bytes, bf16_bytes, bf16_from_bytes, f32_bytes, f32_from_bytes, i32_bytes, i32_from_bytes,
};
use switchyard_core::codec::fp8::e4m3_to_f32;
use switchyard_core::codec::nvfp4::e2m1_to_f32;
use switchyard_core::codec::{bf16_bits, bf16_round, bf16_value};
use switchyard_core::compare::{bf16_ulp_distance, nmse};
use switchyard_core::{Backend, DeviceBuffer, Error, Region};
use switchyard_cpu_ref::cpu_backend;
use switchyard_kernels::attn::{AttnDecode, AttnParams, KvView, ATTENTION_PREFILL};
use switchyard_kernels::gemm::w4a16::random_weight;
use switchyard_kernels::moe::expert::ExpertWeights;
use switchyard_kernels::moe::rows::CombinePostNorms;
use switchyard_kernels::parity::Gen;
use switchyard_kernels::Ops;

mod common;
use common::{buffer, down, poisoned_buffer, up};

/// A paged cache for `lens`: K and V values (f32, bf16-exact) per slot, and a
/// block table whose pages are permuted across the pool so paging mistakes show.
#[derive(Clone)]
struct Cache {
    k: Vec<f32>,
    v: Vec<f32>,
    table: Vec<i32>,
    num_slots: usize,
    max_pages: usize,
}

fn cache(g: &mut Gen, lens: &[usize], nkv: usize, hd: usize, page: usize) -> Cache {
    let max_pages = lens.iter().map(|l| l.div_ceil(page)).max().unwrap().max(1);
    // 7 is coprime to an odd page total (forced odd below), so p -> 7p+3 mod total is a permutation.
    let total = (lens.len() * max_pages + 2) | 1;
    let table: Vec<i32> = (0..lens.len() * max_pages).map(|p| ((p * 7 + 3) % total) as i32).collect();
    let num_slots = total * page;
    let (k, _) = g.bf16(num_slots * nkv * hd, 0.01, 1.0);
    let (v, _) = g.bf16(num_slots * nkv * hd, 0.01, 1.0);
    Cache { k, v, table, num_slots, max_pages }
}

/// `c` with `extra` more block-table columns, all −1: a session's capacity
/// beyond what its sequences hold so far.
fn widened(c: &Cache, seqs: usize, extra: usize) -> Cache {
    let max_pages = c.max_pages + extra;
    let mut table = vec![-1; seqs * max_pages];
    for b in 0..seqs {
        table[b * max_pages..b * max_pages + c.max_pages].copy_from_slice(&c.table[b * c.max_pages..(b + 1) * c.max_pages]);
    }
    Cache { table, max_pages, ..c.clone() }
}

/// Device buffers a test's regions point into, alive until the test ends.
#[derive(Default)]
struct Held(Vec<DeviceBuffer>);

impl Held {
    fn up(&mut self, be: &Arc<dyn Backend>, data: &[u8]) -> Region {
        let b = DeviceBuffer::from_bytes(be, data).unwrap();
        let r = b.region();
        self.0.push(b);
        r
    }

    /// `bytes` of 0xff (NaN as bf16 and f32), so an unwritten element shows.
    fn poisoned(&mut self, be: &Arc<dyn Backend>, bytes: usize) -> Region {
        self.up(be, &vec![0xff; bytes])
    }
}

/// The bf16 bits in `r`.
fn read_bf16(be: &Arc<dyn Backend>, r: Region) -> Vec<u16> {
    bf16_bits_from_bytes(&down(be, r.addr(), r.len()))
}

/// The device side of a cache.
fn upload_cache(be: &Arc<dyn Backend>, held: &mut Held, c: &Cache, nkv: usize, hd: usize, page: usize, num_seqs: usize) -> KvView {
    KvView {
        k_pool: held.up(be, &bf16_bytes(&c.k)),
        v_pool: held.up(be, &bf16_bytes(&c.v)),
        block_table: held.up(be, &i32_bytes(&c.table)),
        nkv,
        hd,
        page,
        max_pages: c.max_pages,
        num_seqs,
        num_slots: c.num_slots,
    }
}

/// Runs prefill over query rows `q` (`[rows, nh·hd]`) of sequences `seq` at positions `pos`.
fn prefill_rows(ops: &Ops, q: &[f32], seq: &[i32], pos: &[i32], kv: &KvView, p: &AttnParams) -> Vec<u16> {
    let be = &ops.be;
    let mut held = Held::default();
    let rows = pos.len();
    let out = held.poisoned(be, rows * p.nh * kv.hd * 2);
    let (qa, sa, pa) = (held.up(be, &bf16_bytes(q)), held.up(be, &i32_bytes(seq)), held.up(be, &i32_bytes(pos)));
    ops.attention_prefill(out, qa, sa, pa, rows, kv, p).unwrap();
    read_bf16(be, out)
}

/// Runs prefill over every position of every sequence (rows in sequence-major order).
fn prefill(ops: &Ops, q: &[f32], lens: &[usize], kv: &KvView, p: &AttnParams) -> Vec<u16> {
    let (mut seq, mut pos) = (Vec::new(), Vec::new());
    for (b, &l) in lens.iter().enumerate() {
        for j in 0..l {
            seq.push(b as i32);
            pos.push(j as i32);
        }
    }
    prefill_rows(ops, q, &seq, &pos, kv, p)
}

/// Runs decode for queries `q` (`[batch, nh·hd]`) at context lengths `ctx` under the bound `max_ctx`.
fn decode(ops: &Ops, q: &[f32], ctx: &[i32], max_ctx: usize, kv: &KvView, p: &AttnParams) -> Vec<u16> {
    let be = &ops.be;
    let mut held = Held::default();
    let batch = ctx.len();
    let d = AttnDecode {
        out: held.poisoned(be, batch * p.nh * kv.hd * 2),
        q: held.up(be, &bf16_bytes(q)),
        ctx_len: held.up(be, &i32_bytes(ctx)),
        batch,
        max_ctx,
    };
    ops.attention_decode(&d, kv, p).unwrap();
    read_bf16(be, d.out)
}

/// f64 attention of one query (`[hd]`) at position `p` of sequence `b`, head `h`.
fn reference(c: &Cache, q: &[f32], b: usize, pos: usize, h: usize, kv: &KvView, p: &AttnParams) -> Vec<f64> {
    let (hd, group) = (kv.hd, p.nh / kv.nkv);
    let kvh = h / group;
    let lo = if p.window > 0 { (pos + 1).saturating_sub(p.window) } else { 0 };
    let slot = |j: usize| c.table[b * c.max_pages + j / kv.page] as usize * kv.page + j % kv.page;
    let row = |pool: &[f32], j: usize| pool[(slot(j) * kv.nkv + kvh) * hd..][..hd].iter().map(|&x| x as f64).collect::<Vec<_>>();
    let s: Vec<f64> = (lo..=pos).map(|j| p.scale as f64 * row(&c.k, j).iter().zip(q).map(|(a, &b)| a * b as f64).sum::<f64>()).collect();
    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
    let l: f64 = e.iter().sum();
    let mut o = vec![0f64; hd];
    for (j, w) in (lo..=pos).zip(&e) {
        for (od, vd) in o.iter_mut().zip(row(&c.v, j)) {
            *od += w * vd / l;
        }
    }
    o
}

/// `attention_decode`'s result for one query, written out from its contract
/// in f32 with the chunk rule's numbers spelled out (512 target blocks, 256
/// keys per chunk at least): the visible keys in `S` chunks of `⌈K/S⌉`, each
/// chunk a two-pass softmax with keys in order, the chunks combined in order.
#[allow(clippy::too_many_arguments)]
fn decode_by_contract(c: &Cache, q: &[f32], b: usize, n: usize, h: usize, batch: usize, kv: &KvView, p: &AttnParams) -> Vec<u16> {
    let (hd, kvh) = (kv.hd, h / (p.nh / kv.nkv));
    let slot = |j: usize| c.table[b * c.max_pages + j / kv.page] as usize * kv.page + j % kv.page;
    let row = |pool: &'_ [f32], j: usize| pool[(slot(j) * kv.nkv + kvh) * hd..][..hd].to_vec();
    let lo = if p.window > 0 { n.saturating_sub(p.window) } else { 0 };
    let keys = n - lo;
    let chunks = (256usize.div_ceil(batch * kv.nkv)).min(keys.div_ceil(64)).max(1);
    let len = keys.div_ceil(chunks);
    let mut parts = Vec::new();
    for s in 0..chunks {
        let (start, stop) = (lo + s * len, (lo + (s + 1) * len).min(n));
        if start >= stop {
            continue;
        }
        let scores: Vec<f32> = (start..stop)
            .map(|j| {
                let mut dot = 0f32;
                for (a, k) in q.iter().zip(row(&c.k, j)) {
                    dot += a * k;
                }
                p.scale * dot
            })
            .collect();
        let m = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let (mut l, mut o) = (0f32, vec![0f32; hd]);
        for (j, &sc) in (start..stop).zip(&scores) {
            let e = (sc - m).exp();
            l += e;
            for (od, vd) in o.iter_mut().zip(row(&c.v, j)) {
                *od += e * vd;
            }
        }
        parts.push((m, l, o));
    }
    let big = parts.iter().map(|x| x.0).fold(f32::NEG_INFINITY, f32::max);
    let (mut den, mut num) = (0f32, vec![0f32; hd]);
    for (m, l, o) in &parts {
        let w = (m - big).exp();
        den += w * l;
        for (nd, od) in num.iter_mut().zip(o) {
            *nd += w * od;
        }
    }
    num.iter().map(|x| bf16_bits(x / den)).collect()
}

fn as_f64(bits: &[u16]) -> Vec<f64> {
    bits.iter().map(|&b| bf16_value(b) as f64).collect()
}

#[test]
fn a_single_key_returns_v_exactly_through_the_gqa_mapping() {
    let ops = Ops::new(cpu_backend());
    let mut g = Gen::new(11);
    let (nh, nkv, hd, page) = (4, 2, 64, 16);
    let c = cache(&mut g, &[1], nkv, hd, page);
    let mut held = Held::default();
    let kv = upload_cache(&ops.be, &mut held, &c, nkv, hd, page, 1);
    let (q, _) = g.bf16(nh * hd, 0.01, 1.0);
    let p = AttnParams { nh, window: 0, scale: 1.0 };
    let out = prefill(&ops, &q, &[1], &kv, &p);
    let slot = c.table[0] as usize * page;
    for h in 0..nh {
        // Heads 0, 1 read KV head 0; heads 2, 3 read KV head 1.
        let v = &c.v[(slot * nkv + h / 2) * hd..][..hd];
        let want: Vec<u16> = v.iter().map(|&x| bf16_bits(x)).collect();
        assert_eq!(&out[h * hd..(h + 1) * hd], &want[..], "head {h}");
    }
    // Decode of the same single key: the same row.
    assert_eq!(decode(&ops, &q, &[1], 1, &kv, &p), out);
}

#[test]
fn a_two_key_softmax_by_hand_and_the_window_edge() {
    let ops = Ops::new(cpu_backend());
    let be = &ops.be;
    let (hd, page) = (8, 4);
    // One KV head, one page at slot 0: k0 = 0, k1 = e_0; v0 = 4, v1 = 8 (in dim 0), q = e_0.
    let (mut k, mut v) = (vec![0f32; page * hd], vec![0f32; page * hd]);
    k[hd] = 1.0;
    v[0] = 4.0;
    v[hd] = 8.0;
    let c = Cache { k, v, table: vec![0], num_slots: page, max_pages: 1 };
    let mut held = Held::default();
    let kv = upload_cache(be, &mut held, &c, 1, hd, page, 1);
    let mut q = vec![0f32; 2 * hd];
    q[0] = 1.0;
    q[hd] = 1.0;
    // scale = ln 3: scores 0 and ln 3 give weights 1/4 and 3/4, so row 1 = 4/4 + 3·8/4 = 7.
    let p = AttnParams { nh: 1, window: 0, scale: 3f32.ln() };
    let out = prefill(&ops, &q, &[2], &kv, &p);
    assert_eq!(bf16_value(out[0]), 4.0, "row 0 sees only key 0");
    assert_eq!(bf16_value(out[hd]), 7.0, "row 1: (1·4 + 3·8) / 4");
    assert!(out[1..hd].iter().chain(&out[hd + 1..]).all(|&b| b == 0), "dims with zero values stay zero");
    assert_eq!(bf16_value(decode(&ops, &q[hd..], &[2], 4, &kv, &p)[0]), 7.0, "decode at ctx 2");
    // Window 1: a query at p sees keys j > p − 1 only, i.e. itself.
    let out = prefill(&ops, &q, &[2], &kv, &AttnParams { window: 1, ..p });
    assert_eq!((bf16_value(out[0]), bf16_value(out[hd])), (4.0, 8.0));
    assert_eq!(bf16_value(decode(&ops, &q[hd..], &[2], 4, &kv, &AttnParams { window: 1, ..p })[0]), 8.0);
    // Window 2 is the full two keys again.
    let out = prefill(&ops, &q, &[2], &kv, &AttnParams { window: 2, ..p });
    assert_eq!(bf16_value(out[hd]), 7.0);
}

#[test]
fn prefill_matches_an_f64_reference_at_and_around_the_window_edge() {
    let mut g = Gen::new(12);
    for &(window, scale) in &[(0usize, 0.125f32), (7, 0.3), (16, 1.0)] {
        let ops = Ops::new(cpu_backend());
        let (lens, nh, nkv, hd, page) = ([40usize, 23, 9], 4, 2, 72, 8);
        let c = cache(&mut g, &lens, nkv, hd, page);
        let mut held = Held::default();
        let kv = upload_cache(&ops.be, &mut held, &c, nkv, hd, page, lens.len());
        let rows: usize = lens.iter().sum();
        let (q, _) = g.bf16(rows * nh * hd, 0.01, 1.0);
        let p = AttnParams { nh, window, scale };
        let out = prefill(&ops, &q, &lens, &kv, &p);
        let mut r = 0;
        let mut worst = 0;
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for (b, &l) in lens.iter().enumerate() {
            for pos in 0..l {
                for h in 0..nh {
                    let at = (r * nh + h) * hd;
                    let e = reference(&c, &q[at..at + hd], b, pos, h, &kv, &p);
                    for (d, &x) in e.iter().enumerate() {
                        // The reference rounded once to bf16: the f32 kernel may land one ulp off on a near-tie.
                        worst = worst.max(bf16_ulp_distance(out[at + d], bf16_bits(x as f32)));
                    }
                    got.extend(as_f64(&out[at..at + hd]));
                    want.extend(e);
                }
                r += 1;
            }
        }
        assert!(worst <= 1, "window {window}: {worst} bf16 ulp from the f64 reference");
        // bf16 storage alone is ~1e-6 NMSE against unrounded f64, so bound it at 1e-5 here.
        let err = nmse(&got, &want);
        assert!(err <= 1e-5, "window {window}: NMSE {err}");
    }
}

/// Each sequence's last position through prefill: `(q rows, prefill rows)`.
fn last_rows(ops: &Ops, q: &[f32], lens: &[usize], kv: &KvView, p: &AttnParams) -> Vec<u16> {
    let seq: Vec<i32> = (0..lens.len() as i32).collect();
    let pos: Vec<i32> = lens.iter().map(|&l| l as i32 - 1).collect();
    prefill_rows(ops, q, &seq, &pos, kv, p)
}

#[test]
fn decode_in_one_chunk_is_the_prefill_row_at_any_max_ctx() {
    let mut g = Gen::new(13);
    for &window in &[0usize, 16, 7] {
        let ops = Ops::new(cpu_backend());
        let (lens, nh, nkv, hd, page) = ([16usize, 9, 1], 4, 2, 128, 16);
        let c = cache(&mut g, &lens, nkv, hd, page);
        let wide = widened(&c, lens.len(), 30);
        let mut held = Held::default();
        let kv = upload_cache(&ops.be, &mut held, &c, nkv, hd, page, lens.len());
        let kv_wide = upload_cache(&ops.be, &mut held, &wide, nkv, hd, page, lens.len());
        let (q, _) = g.bf16(lens.len() * nh * hd, 0.01, 1.0);
        let p = AttnParams { nh, window, scale: 0.0625 };
        let want = last_rows(&ops, &q, &lens, &kv, &p);
        let ctx = lens.map(|l| l as i32);
        // At most 16 keys: one chunk, the prefill computation exactly (same scores, same order, same o / l),
        // whether max_ctx is the longest context or a capacity that plans several chunks.
        assert_eq!(decode(&ops, &q, &ctx, 16, &kv, &p), want, "window {window}: max_ctx 16");
        assert_eq!(decode(&ops, &q, &ctx, wide.max_pages * page, &kv_wide, &p), want, "window {window}: max_ctx = capacity");
    }
}

#[test]
fn long_decode_follows_the_chunk_rule_agrees_with_prefill_and_ignores_max_ctx() {
    let mut g = Gen::new(17);
    for &window in &[0usize, 600, 100] {
        let ops = Ops::new(cpu_backend());
        // batch 3 · nkv 2: 43 chunks wanted, at most one per 16 keys: 700 keys -> 43, 300 -> 19, 1 -> 1 (window 600: 38, 19, 1; 100: 7, 7, 1).
        let (lens, nh, nkv, hd, page) = ([700usize, 300, 1], 4, 2, 64, 16);
        let c = cache(&mut g, &lens, nkv, hd, page);
        let wide = widened(&c, lens.len(), 100);
        let mut held = Held::default();
        let kv = upload_cache(&ops.be, &mut held, &c, nkv, hd, page, lens.len());
        let kv_wide = upload_cache(&ops.be, &mut held, &wide, nkv, hd, page, lens.len());
        let width = nh * hd;
        let (q, _) = g.bf16(lens.len() * width, 0.01, 1.0);
        let p = AttnParams { nh, window, scale: 0.125 };
        let ctx = lens.map(|l| l as i32);
        let got = decode(&ops, &q, &ctx, 700, &kv, &p);
        assert_eq!(decode(&ops, &q, &ctx, wide.max_pages * page, &kv_wide, &p), got, "window {window}: max_ctx changed bits");
        for (b, &n) in lens.iter().enumerate() {
            for h in 0..nh {
                let at = b * width + h * hd;
                let want = decode_by_contract(&c, &q[at..at + hd], b, n, h, lens.len(), &kv, &p);
                assert_eq!(&got[at..at + hd], &want[..], "window {window}: sequence {b} head {h}");
            }
        }
        let full = last_rows(&ops, &q, &lens, &kv, &p);
        let err = nmse(&as_f64(&got), &as_f64(&full));
        assert!(err <= 1e-6, "window {window}: NMSE {err} against prefill");
    }
}

#[test]
fn decode_sums_its_chunks_in_chunk_order() {
    // One sequence of one KV head: 256 chunks wanted, one per 16 keys, so
    // 700 keys are 44 chunks of 16: [0, 16), ..., [672, 688), [688, 700). q = 0
    // makes every score 0 and every weight 1, so the output is (Σ v) / 700
    // with the sum in the contract's order. v = 2^24 at key 0, −2^24 at key
    // 699, 1 elsewhere: one pass over the keys absorbs every 1 into 2^24 (f32
    // has 24 bits) and ends at 0, as prefill does; by chunks it is 2^24 (the
    // first chunk's 15 ones absorbed) + 42 · 16 + (11 − 2^24) = 683, each step
    // exact.
    let ops = Ops::new(cpu_backend());
    let (n, hd, page) = (700usize, 8, 16);
    let mut g = Gen::new(18);
    let mut c = cache(&mut g, &[n], 1, hd, page);
    let slot = |j: usize| c.table[j / page] as usize * page + j % page;
    let (first, last) = (slot(0), slot(n - 1));
    for j in 0..n {
        let s = slot(j);
        c.v[s * hd..(s + 1) * hd].fill(1.0);
    }
    c.v[first * hd..(first + 1) * hd].fill(16_777_216.0);
    c.v[last * hd..(last + 1) * hd].fill(-16_777_216.0);
    let mut held = Held::default();
    let kv = upload_cache(&ops.be, &mut held, &c, 1, hd, page, 1);
    let p = AttnParams { nh: 1, window: 0, scale: 1.0 };
    let q = vec![0f32; hd];
    assert_eq!(decode(&ops, &q, &[n as i32], n, &kv, &p), vec![bf16_bits(683.0 / 700.0); hd]);
    assert_eq!(last_rows(&ops, &q, &[n], &kv, &p), vec![0; hd], "prefill: one pass");
    // A window of 16 keys (684..700) is a single chunk: decode is prefill's one pass again.
    let w = AttnParams { window: 16, ..p };
    assert_eq!(decode(&ops, &q, &[n as i32], n, &kv, &w), last_rows(&ops, &q, &[n], &kv, &w));
}

#[test]
fn invalid_sequences_pages_slots_and_contexts_give_nan_rows() {
    let ops = Ops::new(cpu_backend());
    let be = ops.be.clone();
    let mut g = Gen::new(14);
    let (nh, nkv, hd, page) = (2, 1, 16, 4);
    let mut c = cache(&mut g, &[8, 8], nkv, hd, page);
    c.table[3] = -1; // sequence 1, page 1: keys 4..8 of sequence 1
    let mut held = Held::default();
    let kv = upload_cache(&be, &mut held, &c, nkv, hd, page, 2);
    let p = AttnParams { nh, window: 0, scale: 1.0 };
    let width = nh * hd;
    // Rows: (seq 0, p 7) valid; (seq 1, p 3) valid (page 0 only); (seq 1, p 4) bad page;
    // (seq 2, p 0) bad sequence; (seq 0, p 8) past max_pages·page.
    let seq = [0, 1, 1, 2, 0];
    let pos = [7, 3, 4, 0, 8];
    let (q, _) = g.bf16(seq.len() * width, 0.01, 1.0);
    let bits = prefill_rows(&ops, &q, &seq, &pos, &kv, &p);
    for (r, valid) in [true, true, false, false, false].into_iter().enumerate() {
        let row = &bits[r * width..(r + 1) * width];
        if valid {
            assert!(row.iter().all(|&b| !bf16_value(b).is_nan()), "row {r} should be finite");
        } else {
            assert!(row.iter().all(|&b| b == 0x7fc0), "row {r} should be the bf16 NaN");
        }
    }
    // Decode: sequence 1 at ctx 8 crosses the bad page; sequence 0 is fine.
    let bits = decode(&ops, &q[..2 * width], &[8, 8], 8, &kv, &p);
    assert!(bits[..width].iter().all(|&b| !bf16_value(b).is_nan()));
    assert!(bits[width..].iter().all(|&b| b == 0x7fc0));
    // Contexts outside 1..=max_ctx: NaN, beside a valid one (sequence 1 at ctx 4 avoids the bad page).
    for ctx in [[0, 4], [7, 4]] {
        let bits = decode(&ops, &q[..2 * width], &ctx, 6, &kv, &p);
        assert!(bits[..width].iter().all(|&b| b == 0x7fc0), "ctx {ctx:?}: sequence 0 must be NaN");
        assert!(bits[width..].iter().all(|&b| !bf16_value(b).is_nan()), "ctx {ctx:?}: sequence 1 is valid");
    }
}

#[test]
fn attention_rejects_shapes_with_a_named_argument() {
    use switchyard_core::Arg::*;
    use switchyard_kernels::attn::ATTENTION_DECODE;
    let ops = Ops::new(cpu_backend());
    let be = &ops.be;
    let buf = up(be, &[0u8; 4096]);
    // nh not a multiple of nkv, through the raw launch (Ops refuses it earlier).
    let args = [P(buf), P(buf), P(buf), P(buf), P(buf), P(buf), P(buf), I(1), I(3), I(2), I(8), I(4), I(1), I(1), I(4), I(0), F(1.0)];
    match be.launch(&ATTENTION_PREFILL, &args).unwrap_err() {
        Error::InvalidArgument { kernel, arg, .. } => assert_eq!((kernel.as_str(), arg.as_str()), ("attention_prefill", "nh")),
        e => panic!("unexpected {e:?}"),
    }
    // A pool shorter than num_slots · nkv · hd.
    let args = [P(buf), P(buf), P(buf), P(buf), P(buf), P(buf), P(buf), I(1), I(2), I(2), I(8), I(4), I(1), I(1), I(4096), I(0), F(1.0)];
    match be.launch(&ATTENTION_PREFILL, &args).unwrap_err() {
        Error::OutOfBounds { arg, .. } => assert_eq!(arg, "k_pool"),
        e => panic!("unexpected {e:?}"),
    }
    // Decode: the same head mapping, and an empty batch.
    let decode = |batch: i32, nh: i32| {
        let mut a = vec![P(buf); 6];
        a.extend([I(batch), I(4), I(nh), I(2), I(8), I(4), I(1), I(4), I(0)]);
        a.push(F(1.0));
        be.launch(&ATTENTION_DECODE, &a).unwrap_err()
    };
    for (batch, nh, name) in [(1, 3, "nh"), (0, 2, "batch")] {
        match decode(batch, nh) {
            Error::InvalidArgument { kernel, arg, .. } => assert_eq!((kernel.as_str(), arg.as_str()), ("attention_decode", name)),
            e => panic!("unexpected {e:?}"),
        }
    }
}

#[test]
fn router_topk_takes_the_lowest_index_on_ties_and_renormalises() {
    let ops = Ops::new(cpu_backend());
    let be = &ops.be;
    // Experts 1, 2 and 4 tie at the top; 0 is next. k = 3 takes 1, 2, 4 in that order.
    let logits = [1.0f32, 2.0, 2.0, -1.0, 2.0, 0.5];
    let scale = [1.0f32, 0.5, 2.0, 1.0, 4.0, 1.0];
    let (ids, w) = (poisoned_buffer(be, 12), poisoned_buffer(be, 12));
    let (la, sa) = (buffer(be, &bf16_bytes(&logits)), buffer(be, &f32_bytes(&scale)));
    ops.moe_router_topk(ids.region(), w.region(), la.region(), sa.region(), 1, 6, 3).unwrap();
    assert_eq!(i32_from_bytes(&ids.to_vec().unwrap()), [1, 2, 4]);
    let w = f32_from_bytes(&w.to_vec().unwrap());
    // Equal probabilities renormalise to 1/3 each (up to the f32 softmax), times the scales.
    for (got, s) in w.iter().zip([0.5f32, 2.0, 4.0]) {
        assert!((got - s / 3.0).abs() <= 1e-6 * s, "{w:?}");
    }
    // Equal probabilities are bit-identical before the (power-of-two) scales.
    assert!(w[0] / 0.5 == w[1] / 2.0 && w[1] / 2.0 == w[2] / 4.0, "{w:?}");
}

#[test]
fn combine_skips_dropped_pairs_and_poisons_bad_slots() {
    let ops = Ops::new(cpu_backend());
    let be = &ops.be;
    let h = 4;
    let y: Vec<f32> = (0..3 * h).map(|i| (i / h + 1) as f32).collect(); // row s is all s+1
                                                                        // Token 0: slots 2 (w .5) and 0 (w 2); token 1: dropped and slot 1 (w 3); token 2: slot 7 (bad).
    let sop = [2, 0, -1, 1, 7, 0];
    let w = [0.5f32, 2.0, 100.0, 3.0, 1.0, 1.0];
    let out = poisoned_buffer(be, 3 * h * 2);
    let (ya, sa, wa) = (buffer(be, &bf16_bytes(&y)), buffer(be, &i32_bytes(&sop)), buffer(be, &f32_bytes(&w)));
    ops.moe_combine_bf16(out.region(), ya.region(), sa.region(), wa.region(), 3, 2, h, 3).unwrap();
    let got = bf16_from_bytes(&out.to_vec().unwrap());
    assert_eq!(&got[..h], &[3.5; 4]); // 0.5·3 + 2·1
    assert_eq!(&got[h..2 * h], &[6.0; 4]); // the dropped pair's weight 100 is not used
    assert!(got[2 * h..].iter().all(|x| x.is_nan()));
}

/// `x · (mean(x²) + eps)^-0.5 · w` in f64.
fn rms_f64(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let inv = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64 + eps).sqrt();
    x.iter().zip(w).map(|(v, w)| v * inv * w).collect()
}

#[test]
fn combine_post_norms_is_the_combine_then_both_norms_added() {
    let ops = Ops::new(cpu_backend());
    let be = &ops.be;
    let mut g = Gen::new(0xc0b1);
    let (rows, k, h, n) = (3usize, 4usize, 96usize, 10usize);
    let eps = 1e-6f32;
    let (yv, y) = g.bf16(n * h, 0.01, 2.0);
    let (mv, mlp) = g.bf16(rows * h, 0.01, 3.0);
    let (wm, w_mlp) = g.bf16(h, 0.05, 2.0);
    let (we, w_moe) = g.bf16(h, 0.05, 2.0);
    // Row 0: four slots; row 1: a dropped pair; row 2: slot 10 is outside [0, n).
    let sop = [3, 0, 7, 9, 1, -1, 4, 2, 5, 6, 10, 8];
    let (tw, twb) = g.f32(rows * k, 0.05, 1.0);
    let out = poisoned_buffer(be, rows * h * 2);
    let bufs = [&mlp, &y, &i32_bytes(&sop), &twb, &w_mlp, &w_moe].map(|b| buffer(be, b));
    let b = CombinePostNorms {
        out: out.region(),
        mlp: bufs[0].region(),
        y: bufs[1].region(),
        slot_of_pair: bufs[2].region(),
        topk_w: bufs[3].region(),
        w_mlp: bufs[4].region(),
        w_moe: bufs[5].region(),
    };
    ops.moe_combine_post_norms_bf16(b, rows, k, h, n, eps).unwrap();
    let got = bf16_from_bytes(&out.to_vec().unwrap());
    let (wm, we): (Vec<f64>, Vec<f64>) = (wm.iter().map(|&v| v as f64).collect(), we.iter().map(|&v| v as f64).collect());
    for t in 0..2 {
        let mut e = vec![0f64; h];
        for j in 0..k {
            if let Ok(s) = usize::try_from(sop[t * k + j]) {
                for (a, &v) in e.iter_mut().zip(&yv[s * h..(s + 1) * h]) {
                    *a += tw[t * k + j] as f64 * v as f64;
                }
            }
        }
        let m: Vec<f64> = mv[t * h..(t + 1) * h].iter().map(|&v| v as f64).collect();
        let (mn, en) = (rms_f64(&m, &wm, eps as f64), rms_f64(&e, &we, eps as f64));
        for (i, &x) in got[t * h..(t + 1) * h].iter().enumerate() {
            let w = mn[i] + en[i];
            // Three bf16 roundings (e, each norm's output, the sum), each at
            // most half an ulp of a magnitude no larger than the addends'.
            let tol = 4.0 * bf16_ulp_of(mn[i].abs().max(en[i].abs()));
            assert!((x as f64 - w).abs() <= tol, "row {t} index {i}: actual {x}, expected {w}, tolerance {tol}");
        }
    }
    assert!(got[2 * h..].iter().all(|x| x.is_nan()), "a bad slot poisons row 2: {:?}", &got[2 * h..2 * h + 4]);
}

/// One bf16 ulp at magnitude `x` (8 significant bits).
fn bf16_ulp_of(x: f64) -> f64 {
    if x == 0.0 {
        return f64::MIN_POSITIVE;
    }
    2f64.powi(x.abs().log2().floor() as i32 - 7)
}

#[test]
fn gather_zero_rows_for_empty_slots_and_nan_for_bad_tokens() {
    let ops = Ops::new(cpu_backend());
    let be = &ops.be;
    let (h, k, rows) = (4, 2, 2);
    let x: Vec<f32> = (0..rows * h).map(|i| i as f32 + 1.0).collect();
    // Pairs 3 -> token 1, 0 -> token 0, -1 empty, 4 -> token 2 (out of range), -3 malformed.
    let pos = [3, 0, -1, 4, -3];
    let out = poisoned_buffer(be, pos.len() * h * 2);
    let (xa, pa) = (buffer(be, &bf16_bytes(&x)), buffer(be, &i32_bytes(&pos)));
    ops.moe_gather_bf16(out.region(), xa.region(), pa.region(), pos.len(), k, h, rows).unwrap();
    let got = bf16_from_bytes(&out.to_vec().unwrap());
    assert_eq!(&got[..2 * h], &[5.0, 6.0, 7.0, 8.0, 1.0, 2.0, 3.0, 4.0]);
    assert_eq!(&got[2 * h..3 * h], &[0.0; 4]);
    assert!(got[3 * h..].iter().all(|x| x.is_nan()));
}

#[test]
fn grouped_gemms_match_plain_loops_and_zero_rows_past_the_segments() {
    let ops = Ops::new(cpu_backend());
    let be = &ops.be;
    let mut g = Gen::new(15);
    let (e, big_n, big_k) = (3, 32, 48);
    let offsets = [0i32, 2, 2, 5];
    let n = 7; // rows 5 and 6 are past offsets[e]
    let (a, ab) = g.bf16(n * big_k, 0.01, 1.0);
    let (w, wb) = g.bf16(e * big_n * big_k, 0.01, 0.5);
    let expert = |s: usize| (0..e).find(|&x| (offsets[x] as usize..offsets[x + 1] as usize).contains(&s));
    let (aa, oa, wa) = (buffer(be, &ab), buffer(be, &i32_bytes(&offsets)), buffer(be, &wb));
    let (aa, oa, bf16_w) = (aa.region(), oa.region(), ExpertWeights::Bf16 { w: wa.region() });
    let out = poisoned_buffer(be, n * big_n * 2);
    ops.moe_grouped_gemm(out.region(), aa, &bf16_w, oa, n, e, big_n, big_k).unwrap();
    let got = bf16_bits_from_bytes(&out.to_vec().unwrap());
    for s in 0..n {
        for j in 0..big_n {
            let want = match expert(s) {
                // Strict k order from +0, f32, one rounding: exact equality.
                Some(x) => bf16_bits((0..big_k).fold(0f32, |acc, kk| acc + a[s * big_k + kk] * w[(x * big_n + j) * big_k + kk])),
                None => 0,
            };
            assert_eq!(got[s * big_n + j], want, "bf16 row {s} col {j}");
        }
    }
    // NVFP4: decode each expert's K-major codes independently and repeat.
    let (mut wq, mut ws, mut s2) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..e {
        let (q, s, g2) = random_weight(&mut g, big_n, big_k, big_n);
        wq.extend(q);
        ws.extend(s);
        s2.push(g2);
    }
    let wt = |x: usize, j: usize, kk: usize| {
        let code = wq[x * big_k / 2 * big_n + (kk / 2) * big_n + j] >> (4 * (kk % 2)) & 0xf;
        e2m1_to_f32(code) * e4m3_to_f32(ws[x * big_k / 16 * big_n + (kk / 16) * big_n + j])
    };
    let out = poisoned_buffer(be, n * big_n * 2);
    let (qa, sa, s2a) = (buffer(be, &wq), buffer(be, &ws), buffer(be, &f32_bytes(&s2)));
    let fp4 = ExpertWeights::Nvfp4 { wq: qa.region(), ws: sa.region(), scale2: s2a.region() };
    ops.moe_grouped_gemm(out.region(), aa, &fp4, oa, n, e, big_n, big_k).unwrap();
    let got = bf16_bits_from_bytes(&out.to_vec().unwrap());
    for s in 0..n {
        for j in 0..big_n {
            let want = match expert(s) {
                Some(x) => bf16_bits(s2[x] * (0..big_k).fold(0f32, |acc, kk| acc + a[s * big_k + kk] * wt(x, j, kk))),
                None => 0,
            };
            assert_eq!(got[s * big_n + j], want, "nvfp4 row {s} col {j}");
        }
    }
    // Offsets that run backwards are refused, naming the argument.
    let bad = buffer(be, &i32_bytes(&[0, 3, 2, 5]));
    match ops.moe_grouped_gemm(out.region(), aa, &bf16_w, bad.region(), n, e, big_n, big_k).unwrap_err() {
        Error::InvalidArgument { arg, .. } => assert_eq!(arg, "offsets"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn gelu_mul_and_router_norm_follow_their_formulas() {
    let ops = Ops::new(cpu_backend());
    let be = &ops.be;
    let mut g = Gen::new(16);
    let (rows, inter) = (3, 10);
    let (gu, gub) = g.bf16(rows * 2 * inter, 0.01, 4.0);
    let (out, gua) = (poisoned_buffer(be, rows * inter * 2), buffer(be, &gub));
    ops.gelu_mul_bf16(out.region(), gua.region(), rows, inter).unwrap();
    let got = bf16_from_bytes(&out.to_vec().unwrap());
    for r in 0..rows {
        for i in 0..inter {
            let (x, u) = (gu[r * 2 * inter + i] as f64, gu[r * 2 * inter + inter + i] as f64);
            let gelu = 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh());
            let want = bf16_round(gelu as f32) as f64 * u;
            let rel = (got[r * inter + i] as f64 - want).abs() / want.abs().max(1e-6);
            assert!(rel <= 1.0 / 128.0, "gelu_mul r{r} i{i}: {} vs {want}", got[r * inter + i]);
        }
    }
    // gelu(0) = 0 exactly and gelu(x) ≈ x for large x.
    let (out2, gu2) = (poisoned_buffer(be, 2 * 2), buffer(be, &bf16_bytes(&[0.0, 10.0, 5.0, 3.0])));
    ops.gelu_mul_bf16(out2.region(), gu2.region(), 1, 2).unwrap();
    assert_eq!(bf16_from_bytes(&out2.to_vec().unwrap()), [0.0, 30.0]);

    let (dim, root) = (16, 16f32.powf(-0.5));
    let (x, xb) = g.bf16(2 * dim, 0.01, 3.0);
    let (sc, sb) = g.bf16(dim, 0.1, 2.0);
    let (out, xa, sa) = (poisoned_buffer(be, 2 * dim * 2), buffer(be, &xb), buffer(be, &sb));
    ops.router_norm_bf16(out.region(), xa.region(), sa.region(), 2, dim, 1e-6, root).unwrap();
    let got = bf16_bits_from_bytes(&out.to_vec().unwrap());
    for r in 0..2 {
        let xr = &x[r * dim..(r + 1) * dim];
        let inv = 1.0 / (xr.iter().fold(0f32, |s, &v| s + v * v) / dim as f32 + 1e-6).sqrt();
        for j in 0..dim {
            assert_eq!(got[r * dim + j], bf16_bits(xr[j] * inv * sc[j] * root), "router_norm r{r} j{j}");
        }
    }
}
