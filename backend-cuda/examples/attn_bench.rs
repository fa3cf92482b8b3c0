//! CUDA timing of the attention kernels and the MoE expert path (issue 6).
//!
//! `cargo run --release -p switchyard-cuda --example attn_bench`
//!
//! - Decode attention (split-K partial + reduce in one launch) at context
//!   4k / 16k / 32k, batch 1 and 16, for Gemma-like sliding layers (nh 32,
//!   nkv 16, hd 256) and full layers (nh 32, nkv 4, hd 512): KV bytes / time
//!   against a device-to-device copy measured in the same run, with
//!   `max_ctx` = the context (one launch per length) and = the 32k capacity
//!   (what a session passes, fixed across steps: idle chunks past ctx).
//! - Prefill attention (causal, one 4096-token sequence, and sliding
//!   window 1024; hd 256 and hd 512, the latter also with V = K): TFLOP/s
//!   counting only the unmasked score/value products (4 · Σ keys_seen · hd ·
//!   nh), for attn.cu's kernel and the flash kernels (flash_prefill.cu) in
//!   the same run, with the NMSE between their outputs. `attn_sdpa.py`
//!   beside this file times PyTorch's scaled_dot_product_attention on the
//!   same shapes for the ratio.
//! - The MoE expert path at 128 experts, top-8, 4096 tokens: grouped GEMMs
//!   (bf16 and NVFP4 weights) in TFLOP/s, the bf16 ones beside cuBLAS (a
//!   call per expert segment, and one dense GEMM of the same FLOPs) with
//!   the NMSE against cuBLAS's output, and the gather / gelu / combine
//!   kernels in GB/s. `--moe` runs only this part (libcublas on
//!   LD_LIBRARY_PATH).
use std::sync::Arc;
use switchyard_core::{Backend, DeviceBuffer, Region, Result};
use switchyard_kernels::attn::{AttnDecode, AttnParams, KvView};
use switchyard_kernels::moe::expert::ExpertWeights;
use switchyard_kernels::Ops;

mod common;
use common::{i32_bytes, Buffers, Lcg};

fn bf16_bytes(n: usize, rng: &mut Lcg, scale: f32) -> Vec<u8> {
    (0..n).flat_map(|_| switchyard_core::codec::bf16_bits(rng.unit() * scale).to_le_bytes()).collect()
}

struct Bench {
    be: Arc<dyn Backend>,
    ops: Ops,
    bufs: Vec<u64>,
    /// Buffers the region-taking launchers read, freed on drop.
    owned: Vec<DeviceBuffer>,
}
common::buffers_in_fields!(Bench);

/// Fills `bytes` at `a` with random bf16: one 64 MiB random block uploaded,
/// then copied on the device to fill the rest (uploading gigabytes would
/// dominate the run).
fn fill_random(be: &Arc<dyn Backend>, a: u64, bytes: usize, rng: &mut Lcg) -> Result<()> {
    let chunk = (64usize << 20).min(bytes);
    be.upload(a, &bf16_bytes(chunk / 2, rng, 1.0))?;
    let mut done = chunk;
    while done < bytes {
        let n = chunk.min(bytes - done);
        be.copy(a + done as u64, a, n)?;
        done += n;
    }
    Ok(())
}

impl Bench {
    /// [`Bench::random_big`] as a region.
    fn random_region(&mut self, bytes: usize, rng: &mut Lcg) -> Result<Region> {
        let chunk = (64usize << 20).min(bytes);
        let d = DeviceBuffer::new(&self.be, bytes)?;
        d.write(&bf16_bytes(chunk / 2, rng, 1.0))?;
        let mut done = chunk;
        while done < bytes {
            let n = chunk.min(bytes - done);
            self.be.copy(d.addr() + done as u64, d.addr(), n)?;
            done += n;
        }
        Ok(self.own(d))
    }
    /// A new buffer holding `data`, as a region.
    fn region(&mut self, data: &[u8]) -> Result<Region> {
        let d = DeviceBuffer::from_bytes(&self.be, data)?;
        Ok(self.own(d))
    }
    /// A new buffer of `n` zero bytes, as a region.
    fn zero_region(&mut self, n: usize) -> Result<Region> {
        let d = DeviceBuffer::zeroed(&self.be, n)?;
        Ok(self.own(d))
    }
    fn own(&mut self, d: DeviceBuffer) -> Region {
        let r = d.region();
        self.owned.push(d);
        r
    }
    /// Median milliseconds of `f` over 15 timed runs after one warm-up.
    fn time(&self, f: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        f()?;
        self.be.synchronize()?;
        let mut times = Vec::new();
        for _ in 0..15 {
            times.push(self.be.time_ms(&mut *f)?);
        }
        times.sort_by(|a, b| a.total_cmp(b));
        Ok(times[times.len() / 2])
    }
}

fn main() -> Result<()> {
    // --moe: only the MoE expert path (and no preload: the other modules are
    // compiled only if used).
    let moe_only = std::env::args().skip(1).any(|a| a == "--moe");
    let cb = Arc::new(switchyard_cuda::CudaBackend::open(0)?);
    if !moe_only {
        cb.preload()?;
    }
    let be: Arc<dyn Backend> = cb.clone();
    let info = be.info();
    println!("device: {} ({}) {:?}", info.device, info.driver, info.details);
    let mut b = Bench { be: be.clone(), ops: Ops::new(be.clone()), bufs: Vec::new(), owned: Vec::new() };
    let mut rng = Lcg(11);

    if !moe_only {
        attention(&mut b, &be, &mut rng)?;
    }
    // ---- MoE expert path: 128 experts, top-8, 4096 tokens.
    let (e, top_k, tokens, hidden, inter) = (128usize, 8usize, 4096usize, 2816usize, 704usize);
    let rows = tokens * top_k;
    let mut offsets = vec![0i32; e + 1];
    // Uneven segments (a token's experts spread round-robin with a skew).
    let mut counts = vec![0usize; e];
    for p in 0..rows {
        counts[(p * 7 + (p / 13)) % e] += 1;
    }
    for x in 0..e {
        offsets[x + 1] = offsets[x] + counts[x] as i32;
    }
    // The MoE launchers take regions: these buffers are freed when dropped.
    let big = |bytes: usize, rng: &mut Lcg| -> Result<DeviceBuffer> {
        let d = DeviceBuffer::new(&be, bytes)?;
        fill_random(&be, d.addr(), bytes, rng)?;
        Ok(d)
    };
    let offs_buf = DeviceBuffer::from_bytes(&be, &i32_bytes(&offsets))?;
    let offs = offs_buf.region();
    let a_gu = DeviceBuffer::from_bytes(&be, &bf16_bytes(rows * hidden, &mut rng, 1.0))?;
    let gu = DeviceBuffer::zeroed(&be, rows * 2 * inter * 2)?;
    let act = DeviceBuffer::zeroed(&be, rows * inter * 2)?;
    let y = DeviceBuffer::zeroed(&be, rows * hidden * 2)?;
    let w_gu = big(e * 2 * inter * hidden * 2, &mut rng)?;
    let w_dn = big(e * hidden * inter * 2, &mut rng)?;
    println!("\n| MoE expert path (e=128, top-8, 4096 tokens, hidden {hidden}, inter {inter}) | ms | TFLOP/s | GB/s |\n|---|---|---|---|");
    let gemm = |name: &str, ms: f64, big_n: usize, big_k: usize, wbytes: usize| {
        let flops = 2.0 * (rows * big_n * big_k) as f64;
        let bytes = (wbytes + rows * (big_k + big_n) * 2) as f64;
        println!("| {name} | {ms:.3} | {:.1} | {:.0} |", flops / ms / 1e9, bytes / ms / 1e6);
    };
    // The bf16 grouped GEMMs beside cuBLAS in the same process: one cuBLAS
    // call per expert segment (what the grouped kernel replaces) and one
    // dense GEMM of the same FLOPs (M = all rows, expert 0's weights); then
    // the NMSE of the grouped output against the per-expert cuBLAS one over
    // all rows (the outputs start zeroed, so a row the kernel never wrote
    // shows).
    let blas = switchyard_cuda::Cublas::new(&cb)?;
    fill_random(&be, act.addr(), rows * inter * 2, &mut rng)?;
    let reference = DeviceBuffer::zeroed(&be, rows * hidden.max(2 * inter) * 2)?;
    for (name, out, a, w, big_n, big_k) in [("gate_up", &gu, &a_gu, &w_gu, 2 * inter, hidden), ("down", &y, &act, &w_dn, hidden, inter)] {
        let wb = ExpertWeights::Bf16 { w: w.region() };
        let ms = b.time(&mut || b.ops.moe_grouped_gemm(out.region(), a.region(), &wb, offs, rows, e, big_n, big_k))?;
        gemm(&format!("grouped bf16 {name}"), ms, big_n, big_k, e * big_n * big_k * 2);
        let per_expert = || -> Result<()> {
            for x in 0..e {
                let (lo, hi) = (offsets[x] as usize, offsets[x + 1] as usize);
                if hi > lo {
                    let (a_x, w_x) = (a.addr() + (lo * big_k * 2) as u64, w.addr() + (x * big_n * big_k * 2) as u64);
                    blas.gemm_bf16(a_x, w_x, reference.addr() + (lo * big_n * 2) as u64, hi - lo, big_n, big_k)?;
                }
            }
            Ok(())
        };
        let ms = b.time(&mut || per_expert())?;
        gemm(&format!("cuBLAS, a call per expert ({e}) {name}"), ms, big_n, big_k, e * big_n * big_k * 2);
        let ms = b.time(&mut || blas.gemm_bf16(a.addr(), w.addr(), reference.addr(), rows, big_n, big_k))?;
        gemm(&format!("cuBLAS dense {rows} x {big_n} x {big_k} {name}"), ms, big_n, big_k, big_n * big_k * 2);
        per_expert()?;
        let nmse = nmse_bf16(&be, out.addr(), reference.addr(), rows * big_n)?;
        println!("| grouped bf16 {name} vs cuBLAS per expert: NMSE {nmse:.2e} ({}) | | | |", if nmse <= 1e-5 { "ok" } else { "MISMATCH" });
    }
    drop(blas);
    // NVFP4: random codes; scales drawn from small positive e4m3 codes.
    let wq = big(e * hidden / 2 * 2 * inter, &mut rng)?;
    let scales: Vec<u8> = (0..e * hidden / 16 * 2 * inter).map(|_| 0x30 + (rng.next() % 8) as u8).collect();
    let wsc = DeviceBuffer::from_bytes(&be, &scales)?;
    let s2 = DeviceBuffer::from_bytes(&be, &(0..e).flat_map(|_| 0.01f32.to_le_bytes()).collect::<Vec<u8>>())?;
    let fp4 = ExpertWeights::Nvfp4 { wq: wq.region(), ws: wsc.region(), scale2: s2.region() };
    let ms = b.time(&mut || b.ops.moe_grouped_gemm(gu.region(), a_gu.region(), &fp4, offs, rows, e, 2 * inter, hidden))?;
    gemm("grouped nvfp4 gate_up", ms, 2 * inter, hidden, e * 2 * inter * hidden * 9 / 16);
    let ms = b.time(&mut || b.ops.gelu_mul_bf16(act.region(), gu.region(), rows, inter))?;
    println!("| gelu_mul | {ms:.3} | | {:.0} |", (rows * 3 * inter * 2) as f64 / ms / 1e6);
    let x = DeviceBuffer::from_bytes(&be, &bf16_bytes(tokens * hidden, &mut rng, 1.0))?;
    let pairs: Vec<i32> = (0..rows as i32).collect();
    let pos = DeviceBuffer::from_bytes(&be, &i32_bytes(&pairs))?;
    let ms = b.time(&mut || b.ops.moe_gather_bf16(a_gu.region(), x.region(), pos.region(), rows, top_k, hidden, tokens))?;
    println!("| moe_gather | {ms:.3} | | {:.0} |", (2 * rows * hidden * 2) as f64 / ms / 1e6);
    let tw = DeviceBuffer::from_bytes(&be, &(0..rows).flat_map(|_| 0.125f32.to_le_bytes()).collect::<Vec<u8>>())?;
    let ms = b.time(&mut || b.ops.moe_combine_bf16(x.region(), y.region(), pos.region(), tw.region(), tokens, top_k, hidden, rows))?;
    println!("| moe_combine | {ms:.3} | | {:.0} |", ((rows + tokens) * hidden * 2) as f64 / ms / 1e6);

    for a in std::mem::take(&mut b.bufs) {
        be.free(a)?;
    }
    Ok(())
}

/// The decode and prefill attention tables.
fn attention(b: &mut Bench, be: &Arc<dyn Backend>, rng: &mut Lcg) -> Result<()> {
    let n = 1usize << 30;
    let (src, dst) = (b.zeros(n)?, b.zeros(n)?);
    let copy_ms = b.time(&mut || be.copy(dst, src, n))?;
    let copy_gbs = 2.0 * n as f64 / copy_ms / 1e6;
    println!("\ncopy ceiling: {copy_gbs:.0} GB/s (1 GiB dtod, read + write)\n");

    // ---- decode
    let (page, max_batch, max_ctx) = (16usize, 16usize, 32768usize);
    let pool_bytes = max_batch * max_ctx * 4096 * 2; // nkv·hd = 4096 (16·256) or 2048 (4·512)
    let k_pool = b.random_region(pool_bytes, rng)?;
    let v_pool = b.random_region(pool_bytes, rng)?;
    let max_pages = max_ctx / page;
    // Sequence b owns pages b·max_pages.., in an interleaved order so that
    // consecutive pages are not adjacent in the pool.
    let table: Vec<i32> = (0..max_batch * max_pages)
        .map(|i| {
            let (s, p) = (i / max_pages, i % max_pages);
            (s * max_pages + (p * 37) % max_pages) as i32
        })
        .collect();
    let bt = b.region(&i32_bytes(&table))?;
    let nh = 32usize;
    let q = b.region(&bf16_bytes(max_batch * nh * 512, rng, 1.0))?;
    let out = b.zero_region(max_batch * nh * 512 * 2)?;
    println!(
        "| decode attention | batch | ctx | ms | KV MB | GB/s | of copy | ms at max_ctx {max_ctx} |\n|---|---|---|---|---|---|---|---|"
    );
    for (nkv, hd) in [(16usize, 256usize), (4, 512)] {
        for batch in [1usize, 16] {
            for ctx in [4096usize, 16384, 32768] {
                let ctx_len = b.region(&i32_bytes(&vec![ctx as i32; batch]))?;
                let kv = KvView {
                    k_pool,
                    v_pool,
                    block_table: bt,
                    nkv,
                    hd,
                    page,
                    max_pages,
                    num_seqs: max_batch,
                    num_slots: max_batch * max_pages * page,
                };
                let d = AttnDecode { out, q, ctx_len, batch, max_ctx: ctx };
                let p = AttnParams { nh, window: 0, scale: 1.0 };
                let ms = b.time(&mut || b.ops.attention_decode(&d, &kv, &p))?;
                let fixed = AttnDecode { max_ctx, ..d };
                let ms_fixed = b.time(&mut || b.ops.attention_decode(&fixed, &kv, &p))?;
                let bytes = (batch * ctx * nkv * hd * 2 * 2) as f64;
                let gbs = bytes / ms / 1e6;
                println!(
                    "| nh={nh} nkv={nkv} hd={hd} | {batch} | {ctx} | {ms:.4} | {:.0} | {gbs:.0} | {:.0}% | {ms_fixed:.4} |",
                    bytes / 1e6,
                    100.0 * gbs / copy_gbs
                );
            }
        }
    }

    // ---- prefill: one sequence of L tokens, rows 0..L; attn.cu's kernel
    // and the flash kernels (flash_prefill.cu) in the same run, and how far
    // apart their outputs are (NMSE of flash against attn.cu's).
    println!(
        "\n| prefill attention | L | window | attn.cu ms | TFLOP/s | flash ms | TFLOP/s | flash / attn.cu | NMSE flash vs attn.cu |\n|---|---|---|---|---|---|---|---|---|"
    );
    let l = 4096usize;
    let seq0 = b.region(&i32_bytes(&vec![0; l]))?;
    let posv = b.region(&i32_bytes(&(0..l as i32).collect::<Vec<_>>()))?;
    let qp = b.region(&bf16_bytes(l * nh * 512, rng, 1.0))?;
    let op = b.zero_region(l * nh * 512 * 2)?;
    let flash_default = switchyard_kernels::attn::flash_prefill();
    for (nkv, hd, window, k_eq_v) in
        [(16usize, 256usize, 0usize, false), (16, 256, 1024, false), (4, 512, 0, false), (4, 512, 0, true), (4, 512, 1024, true)]
    {
        let kv = KvView {
            k_pool,
            v_pool: if k_eq_v { k_pool } else { v_pool },
            block_table: bt,
            nkv,
            hd,
            page,
            max_pages,
            num_seqs: max_batch,
            num_slots: max_batch * max_pages * page,
        };
        // hd 512's random scores are wider; scale them as a model would (1/sqrt(hd)) so the softmax is not one-hot.
        let p = AttnParams { nh, window, scale: 1.0 / (hd as f32).sqrt() };
        let keys: f64 = (0..l).map(|i| if window > 0 { (i + 1).min(window) } else { i + 1 } as f64).sum();
        let flops = 4.0 * keys * (hd * nh) as f64;
        let out_bytes = l * nh * hd * 2;
        let run = |flash: bool| -> Result<(f64, Vec<f32>)> {
            switchyard_kernels::attn::set_flash_prefill(flash);
            let ms = b.time(&mut || b.ops.attention_prefill(op, qp, seq0, posv, l, &kv, &p))?;
            let mut bytes = vec![0u8; out_bytes];
            be.download(op.addr(), &mut bytes)?;
            Ok((ms, bytes.chunks_exact(2).map(|c| switchyard_core::codec::bf16_value(u16::from_le_bytes([c[0], c[1]]))).collect()))
        };
        let (ms_old, old) = run(false)?;
        let (ms_new, new) = run(true)?;
        let (mut err, mut norm, mut nan) = (0.0f64, 0.0f64, 0usize);
        for (a, r) in new.iter().zip(&old) {
            if !a.is_finite() || !r.is_finite() {
                nan += 1;
                continue;
            }
            err += ((a - r) as f64).powi(2);
            norm += (*r as f64).powi(2);
        }
        println!(
            "| nh={nh} nkv={nkv} hd={hd}{} | {l} | {window} | {ms_old:.3} | {:.1} | {ms_new:.3} | {:.1} | {:.2}x | {:.2e}{} |",
            if k_eq_v { " k=v" } else { "" },
            flops / ms_old / 1e9,
            flops / ms_new / 1e9,
            ms_old / ms_new,
            err / norm.max(f64::MIN_POSITIVE),
            if nan > 0 { format!(" ({nan} non-finite)") } else { String::new() }
        );
    }
    switchyard_kernels::attn::set_flash_prefill(flash_default);

    // ---- prefill edges, attn.cu's kernel against the flash kernels: an
    // invalid page entry (-1), a page past the pool, a row of an unknown
    // sequence and one past the table's capacity must give the same NaN rows
    // (the reference's rule), and the other rows must agree.
    println!("\n| prefill edges (flash vs attn.cu) | window | NaN rows attn.cu | NaN rows flash | differing NaN rows | NMSE of the rest |\n|---|---|---|---|---|---|");
    let (emp, epage) = (32usize, 16usize);
    let mut etable: Vec<i32> = (0..2 * emp as i32).collect();
    etable[5] = -1; // sequence 0, keys 80..96
    etable[emp + 3] = 1_000_000; // sequence 1, keys 48..64: a slot past num_slots
    let ebt = b.region(&i32_bytes(&etable))?;
    let (mut eseq, mut epos) = (Vec::new(), Vec::new());
    for p in 0..300 {
        eseq.push(0);
        epos.push(p);
        if p < 100 {
            eseq.push(1);
            epos.push(p);
        }
    }
    eseq.extend([5, 0]);
    epos.extend([3, 10_000]);
    let erows = eseq.len();
    let eseq_r = b.region(&i32_bytes(&eseq))?;
    let epos_r = b.region(&i32_bytes(&epos))?;
    for (nkv, hd, window, k_eq_v) in [(16usize, 256usize, 0usize, false), (16, 256, 64, false), (4, 512, 0, true), (4, 128, 40, false)] {
        let kv = KvView {
            k_pool,
            v_pool: if k_eq_v { k_pool } else { v_pool },
            block_table: ebt,
            nkv,
            hd,
            page: epage,
            max_pages: emp,
            num_seqs: 2,
            num_slots: 2 * emp * epage,
        };
        let p = AttnParams { nh, window, scale: 1.0 / (hd as f32).sqrt() };
        let run = |flash: bool| -> Result<Vec<f32>> {
            switchyard_kernels::attn::set_flash_prefill(flash);
            b.ops.attention_prefill(op, qp, eseq_r, epos_r, erows, &kv, &p)?;
            let mut bytes = vec![0u8; erows * nh * hd * 2];
            be.download(op.addr(), &mut bytes)?;
            Ok(bytes.chunks_exact(2).map(|c| switchyard_core::codec::bf16_value(u16::from_le_bytes([c[0], c[1]]))).collect())
        };
        let (old, new) = (run(false)?, run(true)?);
        let nan_rows = |v: &[f32]| -> Vec<bool> { v.chunks_exact(nh * hd).map(|r| r.iter().any(|x| x.is_nan())).collect() };
        let (no, nn) = (nan_rows(&old), nan_rows(&new));
        let differ = no.iter().zip(&nn).filter(|(a, b)| a != b).count();
        let (mut err, mut norm) = (0.0f64, 0.0f64);
        for ((ro, rn), bad) in old.chunks_exact(nh * hd).zip(new.chunks_exact(nh * hd)).zip(&no) {
            if !bad {
                for (x, y) in ro.iter().zip(rn) {
                    err += ((x - y) as f64).powi(2);
                    norm += (*x as f64).powi(2);
                }
            }
        }
        println!(
            "| nh={nh} nkv={nkv} hd={hd}{} rows={erows} | {window} | {} | {} | {differ} | {:.2e} |",
            if k_eq_v { " k=v" } else { "" },
            no.iter().filter(|&&x| x).count(),
            nn.iter().filter(|&&x| x).count(),
            err / norm.max(f64::MIN_POSITIVE)
        );
    }
    switchyard_kernels::attn::set_flash_prefill(flash_default);
    Ok(())
}

/// Σ(x − y)² / Σ y² over `n` bf16 values at `x` and `y` (y the reference);
/// infinite where x holds a non-finite value.
fn nmse_bf16(be: &Arc<dyn Backend>, x: u64, y: u64, n: usize) -> Result<f64> {
    let (mut xb, mut yb) = (vec![0u8; 2 * n], vec![0u8; 2 * n]);
    be.download(x, &mut xb)?;
    be.download(y, &mut yb)?;
    let v = |c: &[u8]| switchyard_core::codec::bf16_value(u16::from_le_bytes([c[0], c[1]])) as f64;
    let (mut err, mut norm) = (0f64, 0f64);
    for (a, r) in xb.chunks_exact(2).map(v).zip(yb.chunks_exact(2).map(v)) {
        if !a.is_finite() {
            return Ok(f64::INFINITY);
        }
        err += (a - r).powi(2);
        norm += r * r;
    }
    Ok(err / norm.max(f64::MIN_POSITIVE))
}
