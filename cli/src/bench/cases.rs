use super::{BenchCase, BufSpec, Fill};
use switchyard_core::Region;
use switchyard_kernels::attn::{visible_keys, AttnDecode, AttnParams, KvView};
use switchyard_kernels::gemm::w4a16::Fp4Weight;
use switchyard_kernels::rope_kv::{rope_table, QkvPrep};
use switchyard_model::kv_cache::PAGE;

/// Shape scale: production shapes for GPUs, a reduced set for the CPU
/// reference (whose absolute times mean nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// rows = 4096, hidden = 5376, vocab = 262144 (issues 3 and 4).
    Production,
    /// rows and vocab divided by 64.
    Small,
}

fn buf(bytes: usize, fill: Fill) -> BufSpec {
    BufSpec { bytes, fill }
}

/// The bench cases at `scale`.
pub fn cases(scale: Scale) -> Vec<BenchCase> {
    let div = if scale == Scale::Production { 1 } else { 64 };
    let rows = 4096 / div;
    let dim = 5376;
    let vocab = 262144 / div;
    let n = rows * dim;
    let mut v = Vec::new();

    v.push(BenchCase {
        kernel: "rmsnorm_bf16",
        shape: format!("rows={rows} dim={dim}"),
        buffers: vec![buf(2 * n, Fill::Output), buf(2 * n, Fill::Bf16(3.0)), buf(2 * dim, Fill::Bf16(2.0))],
        bytes: (4 * n + 2 * dim) as f64,
        flops: 0.0,
        gemm: None,
        run: Box::new(move |o, a| o.rmsnorm_bf16(a[0], a[1], Some(a[2]), rows, dim, 1e-6)),
    });
    v.push(BenchCase {
        kernel: "post_norm_add_pre_norm_bf16",
        shape: format!("rows={rows} dim={dim}"),
        buffers: vec![
            buf(2 * n, Fill::Output),
            buf(2 * n, Fill::Output),
            buf(2 * n, Fill::Bf16(3.0)),
            buf(2 * n, Fill::Bf16(3.0)),
            buf(2 * dim, Fill::Bf16(1.0)),
            buf(2 * dim, Fill::Bf16(1.0)),
        ],
        bytes: (8 * n + 4 * dim) as f64,
        flops: 0.0,
        gemm: None,
        run: Box::new(move |o, a| o.post_norm_add_pre_norm_bf16(a[0], Some(a[1]), a[2], a[3], Some(a[4]), Some(a[5]), rows, dim, 1e-6)),
    });
    v.push(BenchCase {
        kernel: "layer_out_bf16",
        shape: format!("rows={rows} dim={dim}"),
        buffers: vec![
            buf(2 * n, Fill::Output),
            buf(2 * n, Fill::Bf16(3.0)),
            buf(2 * n, Fill::Bf16(3.0)),
            buf(2 * dim, Fill::Bf16(1.0)),
            buf(4, Fill::F32(1.0)),
        ],
        bytes: (6 * n + 2 * dim) as f64,
        flops: 0.0,
        gemm: None,
        run: Box::new(move |o, a| o.layer_out_bf16(a[0], a[1], a[2], Some(a[3]), a[4], rows, dim, 1e-6)),
    });

    // The row kernels' yardstick at their own size: a plain copy of the
    // rmsnorm row's bytes (the copy ceiling above is measured at 1 GiB).
    v.push(BenchCase {
        kernel: "copy_u32",
        shape: format!("rows={rows} dim={dim}"),
        buffers: vec![buf(2 * n, Fill::Output), buf(2 * n, Fill::Bf16(1.0))],
        bytes: (4 * n) as f64,
        flops: 0.0,
        gemm: None,
        run: Box::new(move |o, a| o.copy_u32(a[0], a[1], n / 2)),
    });

    // Gemma-4-31B-like attention heads: 32 query heads, 16 KV heads, head_dim 256.
    let (nh, nkv, hd, max_pos) = (32, 16, 256, rows);
    let slots = rows;
    let qn = rows * nh * hd;
    let kn = rows * nkv * hd;
    let table = rope_table(max_pos, hd, 10000.0, hd / 2);
    v.push(BenchCase {
        kernel: "qkv_prep_bf16",
        shape: format!("rows={rows} nh={nh} nkv={nkv} hd={hd}"),
        buffers: vec![
            buf(2 * qn, Fill::Output),
            buf(2 * kn, Fill::Output),
            buf(2 * kn, Fill::Output),
            buf(2 * qn, Fill::Bf16(3.0)),
            buf(2 * kn, Fill::Bf16(3.0)),
            buf(2 * kn, Fill::Bf16(3.0)),
            buf(2 * hd, Fill::Bf16(2.0)),
            buf(2 * hd, Fill::Bf16(2.0)),
            buf(4 * table.len(), Fill::Bytes(table.iter().flat_map(|x| x.to_le_bytes()).collect())),
            buf(4 * rows, Fill::Permutation),
            buf(4 * rows, Fill::Permutation),
        ],
        // q, k, v read and written once; one cos/sin row per token.
        bytes: (4 * qn + 8 * kn + 4 * rows * hd + 8 * rows) as f64,
        flops: 0.0,
        gemm: None,
        run: Box::new(move |o, a| {
            o.qkv_prep_bf16(&QkvPrep::owning_kv(std::array::from_fn(|i| a[i]), [rows, nh, nkv, hd], max_pos, slots, 1e-6))
        }),
    });

    v.push(embed_fp8_case(rows, dim, vocab, String::new(), Fill::Fp8, Fill::I32(0, vocab as i32)));
    v.push(embed_bf16_case(rows, dim, vocab, String::new(), Fill::Bf16(0.1), Fill::I32(0, vocab as i32)));
    v.push(gather_rows_case(rows, dim, rows, String::new(), Fill::Bf16(1.0), Fill::Permutation));
    // Where the wgpu gathers' time goes (issue 14 item 2):
    // SWITCHYARD_BENCH_GATHER_DIAG=1 adds gather_diag_cases, =only runs them
    // instead of the three cases above (whose table fills take seconds).
    let diag = std::env::var("SWITCHYARD_BENCH_GATHER_DIAG").ok();
    // =fill or =fill2 runs gather_fill_cases instead (the full set, or its
    // two random-table rows for an A/B).
    match diag.as_deref().map(str::trim) {
        Some(mode @ ("fill" | "fill2")) => {
            v.retain(|c| !c.kernel.contains("gather"));
            v.extend(gather_fill_cases(rows, dim, vocab, mode == "fill2"));
        }
        Some(mode) => {
            if mode == "only" {
                v.retain(|c| !c.kernel.contains("gather"));
            }
            v.extend(gather_diag_cases(rows, dim, vocab));
        }
        None => {}
    }

    for m in [1usize, 16] {
        v.push(BenchCase {
            kernel: "lm_head_logits_fp8",
            shape: format!("m={m} vocab={vocab} hdim={dim}"),
            buffers: vec![
                buf(4 * m * vocab, Fill::Output),
                buf(2 * m * dim, Fill::Bf16(1.0)),
                buf(vocab * dim, Fill::Fp8),
                buf(4 * vocab, Fill::F32(0.01)),
            ],
            bytes: (vocab * dim + 4 * vocab + 4 * m * vocab + 2 * m * dim) as f64,
            flops: (2 * m * vocab * dim) as f64,
            gemm: None,
            run: Box::new(move |o, a| o.lm_head_logits_fp8(a[0], a[1], a[2], a[3], m, vocab, dim, 30.0)),
        });
        v.push(head_bf16_case(m, vocab, dim, ""));
    }

    // SWITCHYARD_BENCH_HEAD_DIAG=1: the bf16 head at m = 1 over half the
    // vocabulary (1.4 GB, one binding on the H200, one pass), beside the
    // full table's two windows and the fp8 head's 1.4 GB of codes, to
    // separate the split and the table size from the kernel.
    if std::env::var("SWITCHYARD_BENCH_HEAD_DIAG").is_ok_and(|d| d.trim() == "1") {
        v.push(head_bf16_case(1, vocab / 2, dim, " diag"));
    }

    v.push(argmax_case(16, vocab, ""));
    // SWITCHYARD_BENCH_ARGMAX_DIAG=1: the argmax of 16 rows of 1024 logits
    // (64 KiB: the time of its dispatches with next to no data) and of one
    // decode row, to split the bench row's time into fixed cost and stream.
    if std::env::var("SWITCHYARD_BENCH_ARGMAX_DIAG").is_ok_and(|d| d.trim() == "1") {
        v.push(argmax_case(16, 1024, " diag"));
        v.push(argmax_case(1, vocab, " diag"));
    }
    let labels = 4;
    v.push(BenchCase {
        kernel: "letter_logits_fp8",
        shape: format!("rows={rows} labels={labels} hdim={dim}"),
        buffers: vec![
            buf(4 * rows * labels, Fill::Output),
            buf(2 * n, Fill::Bf16(1.0)),
            buf(vocab * dim, Fill::Fp8),
            buf(4 * vocab, Fill::F32(0.01)),
            buf(4 * labels, Fill::I32(0, vocab as i32)),
        ],
        bytes: (2 * n + labels * dim + 4 * rows * labels) as f64,
        flops: (2 * rows * labels * dim) as f64,
        gemm: None,
        run: Box::new(move |o, a| o.letter_logits_fp8(a[0], a[1], a[2], a[3], a[4], rows, labels, dim, vocab, 30.0)),
    });

    // MoE routing at 4096 tokens, top-8 of 128 experts.
    let (pairs, e) = (rows * 8, 128);
    v.push(BenchCase {
        kernel: "moe_count",
        shape: format!("pairs={pairs} e={e}"),
        buffers: vec![buf(4 * e, Fill::Output), buf(4 * pairs, Fill::I32(0, e as i32))],
        bytes: (4 * pairs + 4 * e) as f64,
        flops: 0.0,
        gemm: None,
        run: Box::new(move |o, a| o.moe_count(a[0], a[1], pairs, e)),
    });
    v.push(BenchCase {
        kernel: "moe_scatter",
        shape: format!("pairs={pairs} e={e}"),
        buffers: vec![
            buf(4 * pairs, Fill::Output),
            buf(4 * pairs, Fill::Output),
            buf(4 * e, Fill::Output),
            buf(4 * (e + 1), Fill::Bytes(uniform_offsets(pairs, e))),
            buf(4 * pairs, Fill::Bytes(round_robin_ids(pairs, e))),
        ],
        bytes: (12 * pairs + 8 * e) as f64,
        flops: 0.0,
        gemm: None,
        run: Box::new(move |o, a| o.moe_scatter(a[0], a[1], a[2], a[3], a[4], pairs, e)),
    });
    attention_decode_cases(&mut v, scale);
    gemm_cases(&mut v, scale);
    v
}

/// Decode attention at Gemma-4-31B-like layer shapes, contexts 16k and 32k
/// (divided by 64 for the CPU), batch 1 and 16:
/// - sliding layers: 32 query heads over 16 KV heads of 256, window 1024,
///   separate K and V pools. Only the last `window` keys are read, so the
///   bytes (and the pool, which holds just the pages those keys use) are
///   bounded by the window, not the context;
/// - global layers: 32 query heads over 4 KV heads of 512, full context, V
///   = K (`attention_k_eq_v`: one pool passed as both).
///
/// "MB moved" is the K/V bytes a step must read (each visible row of each KV
/// head once, once in all when V = K) plus q and out. Pages are 16 tokens
/// (the model's `PAGE`), handed out from the end of the pool as the model's
/// cache does; the block table maps every visible page.
///
/// `SWITCHYARD_BENCH_ATTN_SHAPE`, when set, keeps only the cases whose shape
/// contains it (one case under a profiler, e.g. `global b=16 ctx=16384`).
fn attention_decode_cases(v: &mut Vec<BenchCase>, scale: Scale) {
    let only = std::env::var("SWITCHYARD_BENCH_ATTN_SHAPE").ok();
    let div = if scale == Scale::Production { 1 } else { 64 };
    let layers = [("sliding", 32usize, 16usize, 256usize, 1024 / div, false), ("global", 32, 4, 512, 0, true)];
    for (layer, nh, nkv, hd, window, k_eq_v) in layers {
        for ctx in [16384 / div, 32768 / div] {
            for batch in [1usize, 16] {
                let lo = ctx - visible_keys(ctx, window);
                let (first_page, max_pages) = (lo / PAGE, ctx.div_ceil(PAGE));
                let used = max_pages - first_page;
                let total = batch * used;
                // Pages before the window are never read: -1, as unmapped.
                let mut table = vec![-1i32; batch * max_pages];
                for b in 0..batch {
                    for (i, e) in table[b * max_pages + first_page..(b + 1) * max_pages].iter_mut().enumerate() {
                        *e = (total - 1 - (b * used + i)) as i32;
                    }
                }
                let num_slots = total * PAGE;
                let pool = 2 * num_slots * nkv * hd;
                let width = nh * hd;
                let kv_bytes = batch * visible_keys(ctx, window) * nkv * hd * 2 * if k_eq_v { 1 } else { 2 };
                let shape =
                    format!("{layer} b={batch} ctx={ctx} nh={nh} nkv={nkv} hd={hd} window={window}{}", if k_eq_v { " v=k" } else { "" });
                if only.as_deref().is_some_and(|o| !shape.contains(o)) {
                    continue;
                }
                v.push(BenchCase {
                    kernel: "attention_decode",
                    shape,
                    buffers: vec![
                        buf(2 * batch * width, Fill::Output),
                        buf(2 * batch * width, Fill::Bf16(1.0)),
                        buf(pool, Fill::Bf16(1.0)),
                        buf(if k_eq_v { 4 } else { pool }, Fill::Bf16(1.0)),
                        buf(4 * table.len(), Fill::Bytes(table.iter().flat_map(|x| x.to_le_bytes()).collect())),
                        buf(4 * batch, Fill::Bytes((0..batch).flat_map(|_| (ctx as i32).to_le_bytes()).collect())),
                    ],
                    bytes: (kv_bytes + 4 * batch * width) as f64,
                    flops: (4 * batch * visible_keys(ctx, window) * width) as f64,
                    gemm: None,
                    run: Box::new(move |o, a| {
                        let d = AttnDecode { out: a[0], q: a[1], ctx_len: a[5], batch, max_ctx: ctx };
                        let kv = KvView {
                            k_pool: a[2],
                            v_pool: if k_eq_v { a[2] } else { a[3] },
                            block_table: a[4],
                            nkv,
                            hd,
                            page: PAGE,
                            max_pages,
                            num_seqs: batch,
                            num_slots,
                        };
                        o.attention_decode(&d, &kv, &AttnParams { nh, window, scale: 1.0 })
                    }),
                });
            }
        }
    }
}

/// Issue 5's shapes: prefill M in {512, 4096}, decode M in {1, 16}, and
/// (N, K) in {(8192, 8192), (21504, 5376), (5376, 21504)}; reduced for the CPU.
fn gemm_cases(v: &mut Vec<BenchCase>, scale: Scale) {
    gemv_cases(v, scale);
    let (mdiv, nkdiv) = if scale == Scale::Production { (1, 1) } else { (64, 16) };
    for (n, k) in [(8192usize, 8192usize), (21504, 5376), (5376, 21504)] {
        let (n, k) = (n / nkdiv, k / nkdiv);
        for m in [512usize, 4096].map(|m| (m / mdiv).max(1)) {
            let flops = (2 * m * n * k) as f64;
            v.push(BenchCase {
                kernel: "dense_gemm_bf16_pipelined",
                shape: format!("m={m} n={n} k={k}"),
                buffers: vec![buf(2 * m * k, Fill::Bf16(1.0)), buf(2 * n * k, Fill::Bf16(0.1)), buf(2 * m * n, Fill::Output)],
                bytes: (2 * (m * k + n * k + m * n)) as f64,
                flops,
                gemm: Some((m, n, k)),
                run: Box::new(move |o, a| o.dense_gemm_prefill(a[0], a[1], a[2], m, n, k)),
            });
            v.push(fp4_case("w4a16_gemm_n128_m128", m, n, k, |o, a, w, c, m, n, k| o.w4a16_gemm_n128_m128(a, w, c, m, n, k)));
        }
        for m in [1usize, 16] {
            v.push(fp4_case("w4a16_gemm_decode", m, n, k, |o, a, w, c, m, n, k| o.w4a16_gemm_decode(a, w, c, m, n, k)));
        }
    }
}

/// The decode GEMVs (M ≤ 16) on issue 5's shapes (beside cuBLAS) and on
/// the default bench-model's layer shapes (hidden 2560: the stacked q/k/v
/// projection, o, the gate/up projection with its gated GELU, down); the
/// tensor-core GEMM the GEMVs replaced is kept on two shapes as the
/// before figure. Bytes are the weights plus activations and output.
fn gemv_cases(v: &mut Vec<BenchCase>, scale: Scale) {
    let div = if scale == Scale::Production { 1 } else { 16 };
    let issue5 = [(8192usize, 8192usize), (21504, 5376), (5376, 21504)];
    let gemma = [(4096usize, 2560usize), (2560, 2048), (2560, 10240)];
    for (n, k) in issue5.into_iter().chain(gemma) {
        let (n, k) = (n / div, k / div);
        for m in [1usize, 16] {
            v.push(BenchCase {
                kernel: "dense_gemv_bf16",
                shape: format!("m={m} n={n} k={k}"),
                buffers: vec![buf(2 * m * k, Fill::Bf16(1.0)), buf(2 * n * k, Fill::Bf16(0.1)), buf(2 * m * n, Fill::Output)],
                bytes: (2 * (m * k + n * k + m * n)) as f64,
                flops: (2 * m * n * k) as f64,
                gemm: Some((m, n, k)),
                run: Box::new(move |o, a| o.dense_gemv_bf16(a[0], a[1], a[2], m, n, k, [n, n])),
            });
        }
    }
    let (inter, hidden) = (10240 / div, 2560 / div);
    for m in [1usize, 16] {
        v.push(BenchCase {
            kernel: "dense_gemv_gelu_mul_bf16",
            shape: format!("m={m} n={inter} k={hidden}"),
            buffers: vec![buf(2 * m * hidden, Fill::Bf16(1.0)), buf(4 * inter * hidden, Fill::Bf16(0.1)), buf(2 * m * inter, Fill::Output)],
            bytes: (2 * (m * hidden + 2 * inter * hidden + m * inter)) as f64,
            flops: (4 * m * inter * hidden) as f64,
            gemm: Some((m, 2 * inter, hidden)),
            run: Box::new(move |o, a| o.dense_gemv_gelu_mul_bf16(a[0], a[1], a[2], m, inter, hidden)),
        });
    }
    for (n, k) in [(4096 / div, 2560 / div), (2560 / div, 10240 / div)] {
        for m in [1usize, 16] {
            v.push(BenchCase {
                kernel: "dense_gemm_tc",
                shape: format!("m={m} n={n} k={k}"),
                buffers: vec![buf(2 * m * k, Fill::Bf16(1.0)), buf(2 * n * k, Fill::Bf16(0.1)), buf(2 * m * n, Fill::Output)],
                bytes: (2 * (m * k + n * k + m * n)) as f64,
                flops: (2 * m * n * k) as f64,
                gemm: Some((m, n, k)),
                run: Box::new(move |o, a| o.dense_gemm_tc(a[0], a[1], a[2], m, n, k)),
            });
        }
    }
}

type Fp4Launch = fn(&switchyard_kernels::Ops, Region, &Fp4Weight, Region, usize, usize, usize) -> switchyard_core::Result<()>;

/// A W4A16 case: random activations, random NVFP4 codes and finite scales.
/// Bytes are the weights (codes + scales) plus activations and output.
fn fp4_case(kernel: &'static str, m: usize, n: usize, k: usize, launch: Fp4Launch) -> BenchCase {
    BenchCase {
        kernel,
        shape: format!("m={m} n={n} k={k}"),
        buffers: vec![buf(2 * m * k, Fill::Bf16(1.0)), buf(n * k / 2, Fill::Fp8), buf(n * k / 16, Fill::Fp8), buf(2 * m * n, Fill::Output)],
        bytes: (n * k / 2 + n * k / 16 + 2 * m * k + 2 * m * n) as f64,
        flops: (2 * m * n * k) as f64,
        gemm: Some((m, n, k)),
        run: Box::new(move |o, a| launch(o, a[0], &Fp4Weight { bq: a[1], bs: a[2], scale2: 1e-3, ldb: n }, a[3], m, n, k)),
    }
}

/// Ids `p % e`: every expert gets `pairs / e` pairs, matching [`uniform_offsets`].
fn round_robin_ids(pairs: usize, e: usize) -> Vec<u8> {
    (0..pairs).flat_map(|p| ((p % e) as i32).to_le_bytes()).collect()
}

fn uniform_offsets(pairs: usize, e: usize) -> Vec<u8> {
    (0..=e).flat_map(|x| ((x * pairs / e) as i32).to_le_bytes()).collect()
}

/// `lm_head_logits_bf16` of `m` rows over a `vocab × dim` table; `note` ends the shape.
fn head_bf16_case(m: usize, vocab: usize, dim: usize, note: &str) -> BenchCase {
    BenchCase {
        kernel: "lm_head_logits_bf16",
        shape: format!("m={m} vocab={vocab} hdim={dim}{note}"),
        buffers: vec![buf(4 * m * vocab, Fill::Output), buf(2 * m * dim, Fill::Bf16(1.0)), buf(2 * vocab * dim, Fill::Bf16(0.05))],
        bytes: (2 * vocab * dim + 4 * m * vocab + 2 * m * dim) as f64,
        flops: (2 * m * vocab * dim) as f64,
        gemm: None,
        run: Box::new(move |o, a| o.lm_head_logits_bf16(a[0], a[1], a[2], m, vocab, dim, 30.0)),
    }
}

/// `argmax_rows` over `m` rows of `vocab` logits; `note` ends the shape.
fn argmax_case(m: usize, vocab: usize, note: &str) -> BenchCase {
    BenchCase {
        kernel: "argmax_rows",
        shape: format!("m={m} vocab={vocab}{note}"),
        buffers: vec![buf(4 * m, Fill::Output), buf(4 * m, Fill::Output), buf(4 * m * vocab, Fill::F32(30.0))],
        bytes: (4 * m * vocab + 8 * m) as f64,
        flops: 0.0,
        gemm: None,
        run: Box::new(move |o, a| o.argmax_rows(a[0], a[1], a[2], m, vocab, 0, 1)),
    }
}

/// `gather_rows_bf16` of `rows` ids into an `n_src × dim` source filled by
/// `src`, the ids by `ids`; `note` ends the shape.
fn gather_rows_case(rows: usize, dim: usize, n_src: usize, note: String, src: Fill, ids: Fill) -> BenchCase {
    let n = rows * dim;
    BenchCase {
        kernel: "gather_rows_bf16",
        shape: format!("rows={rows} h={dim}{note}"),
        buffers: vec![buf(2 * n, Fill::Output), buf(2 * n_src * dim, src), buf(4 * rows, ids)],
        bytes: (4 * n + 4 * rows) as f64,
        flops: 0.0,
        gemm: None,
        run: Box::new(move |o, a| o.gather_rows_bf16(a[0], a[1], a[2], rows, n_src, dim)),
    }
}

/// `embed_gather_fp8` of `rows` ids into a `vocab × dim` code table filled
/// by `table` (row scales random), the ids by `ids`; `note` ends the shape.
fn embed_fp8_case(rows: usize, dim: usize, vocab: usize, note: String, table: Fill, ids: Fill) -> BenchCase {
    let n = rows * dim;
    BenchCase {
        kernel: "embed_gather_fp8",
        shape: format!("rows={rows} h={dim} vocab={vocab}{note}"),
        buffers: vec![buf(2 * n, Fill::Output), buf(vocab * dim, table), buf(4 * vocab, Fill::F32(0.01)), buf(4 * rows, ids)],
        bytes: (3 * n + 8 * rows) as f64,
        flops: 0.0,
        gemm: None,
        run: Box::new(move |o, a| o.embed_gather_fp8(a[0], a[1], a[2], a[3], rows, vocab, dim, 73.3)),
    }
}

/// `embed_gather_bf16` of `rows` ids into a `vocab × dim` table filled by
/// `table`, the ids by `ids`; `note` ends the shape.
fn embed_bf16_case(rows: usize, dim: usize, vocab: usize, note: String, table: Fill, ids: Fill) -> BenchCase {
    let n = rows * dim;
    BenchCase {
        kernel: "embed_gather_bf16",
        shape: format!("rows={rows} h={dim} vocab={vocab}{note}"),
        buffers: vec![buf(2 * n, Fill::Output), buf(2 * vocab * dim, table), buf(4 * rows, ids)],
        bytes: (4 * n + 4 * rows) as f64,
        flops: 0.0,
        gemm: None,
        run: Box::new(move |o, a| o.embed_gather_bf16(a[0], a[1], a[2], rows, vocab, dim, 73.3)),
    }
}

/// The gathers at the bench rows over tables of other sizes and with other
/// id patterns, tables left as allocated (zeros; a 2.8 GB random fill costs
/// seconds): source or table rows 4096 (44 MB) to 262144 (2.8 GB, two
/// binding windows) with random ids; the 2.8 GB table with ids in its first
/// window only, sorted, or all one row; the bf16 embed at 24576 and 262144
/// rows also over random tables (zeros against random data); the fp8 table
/// at 24576 and 262144 rows. Shapes carry `diag`. Sizes are those at the
/// production scale (fractions of vocab).
fn gather_diag_cases(rows: usize, dim: usize, vocab: usize) -> Vec<BenchCase> {
    // 24576, 98304 and 196608 rows (264 MB, 1.06 GB, 2.11 GB: one binding).
    let (small, mid, one) = (vocab * 3 / 32, vocab * 3 / 8, vocab * 3 / 4);
    let mut v = Vec::new();
    for n_src in [rows, small, mid, one, vocab] {
        v.push(gather_rows_case(rows, dim, n_src, format!(" n_src={n_src} ids=random diag"), Fill::Output, Fill::I32(0, n_src as i32)));
    }
    // Sorted ids: a fixed LCG draw over the table, ascending.
    let mut x = 0x2545_f491_u64;
    let mut sorted: Vec<i32> = (0..rows)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 33) % vocab as u64) as i32
        })
        .collect();
    sorted.sort_unstable();
    let sorted: Vec<u8> = sorted.iter().flat_map(|i| i.to_le_bytes()).collect();
    let embeds: [(usize, &str, Fill); 6] = [
        (small, "random", Fill::I32(0, small as i32)),
        (one, "random", Fill::I32(0, one as i32)),
        (vocab, "random", Fill::I32(0, vocab as i32)),
        (vocab, "first-window", Fill::I32(0, one as i32)),
        (vocab, "sorted", Fill::Bytes(sorted)),
        (vocab, "one-row", Fill::I32(7, 8)),
    ];
    for (vocab, ids, fill) in embeds {
        v.push(embed_bf16_case(rows, dim, vocab, format!(" ids={ids} diag"), Fill::Output, fill));
    }
    // The same random-id gathers over tables filled with random bf16 (the
    // bench rows' fill) rather than left as allocated (zeros): zeros against
    // random data at the same addresses, 264 MB and the whole 2.8 GB.
    for vocab in [small, vocab] {
        v.push(embed_bf16_case(rows, dim, vocab, " ids=random table=random diag".into(), Fill::Bf16(1.0), Fill::I32(0, vocab as i32)));
    }
    let fp8: [(usize, &str, Fill); 3] =
        [(small, "random", Fill::I32(0, small as i32)), (vocab, "random", Fill::I32(0, vocab as i32)), (vocab, "one-row", Fill::I32(7, 8))];
    for (vocab, ids, fill) in fp8 {
        v.push(embed_fp8_case(rows, dim, vocab, format!(" ids={ids} diag"), Fill::Output, fill));
    }
    v
}

/// Whether the bf16 embed's time depends on what its table holds (issue 14
/// item 2): the bench row (random bf16 over 2.8 GB) ran at 27% of copy, the
/// diagnostic over a table left as allocated (zeros) at 76%, and zeros may
/// be stored compressed. The same kernel, random ids, over a 4096-row
/// (44 MB) and a 262144-row (2.8 GB) table, each left as allocated, written
/// with zeros (2.8 GB) or filled with random bf16 bits ([`Fill::Bits16`]);
/// then the random 2.8 GB table with ids confined to its first 4096 rows
/// (44 MB) and 24576 rows (264 MB), to tell the data from the rows' spread.
/// `short`: only the two random-table, random-id rows.
fn gather_fill_cases(rows: usize, dim: usize, vocab: usize, short: bool) -> Vec<BenchCase> {
    let small = vocab * 3 / 32;
    let ids = |n: usize| Fill::I32(0, n as i32);
    let mut v = Vec::new();
    if !short {
        v.push(embed_bf16_case(rows, dim, rows, " ids=random table=allocated diag".into(), Fill::Output, ids(rows)));
    }
    v.push(embed_bf16_case(rows, dim, rows, " ids=random table=random diag".into(), Fill::Bits16, ids(rows)));
    if !short {
        v.push(embed_bf16_case(rows, dim, vocab, " ids=random table=allocated diag".into(), Fill::Output, ids(vocab)));
        v.push(embed_bf16_case(rows, dim, vocab, " ids=random table=zeros diag".into(), Fill::Zeros, ids(vocab)));
    }
    v.push(embed_bf16_case(rows, dim, vocab, " ids=random table=random diag".into(), Fill::Bits16, ids(vocab)));
    if !short {
        v.push(embed_bf16_case(rows, dim, vocab, format!(" ids<{rows} table=random diag"), Fill::Bits16, ids(rows)));
        v.push(embed_bf16_case(rows, dim, vocab, format!(" ids<{small} table=random diag"), Fill::Bits16, ids(small)));
    }
    v
}
