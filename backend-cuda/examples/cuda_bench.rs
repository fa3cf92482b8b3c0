//! Quick CUDA kernel bandwidth check at the production shapes of issue 4
//! (the full harness is `switchyard bench`; this one needs only this crate).
//!
//! `cargo run --release -p switchyard-cuda --example cuda_bench`
//!
//! Prints, per kernel, the median time over timed repetitions, the bytes the
//! kernel must move, GB/s and the ratio to a device-to-device copy measured
//! in the same run. Inputs rotate among several buffer sets so that L2 (50 MB
//! on an H200) does not serve repeated runs.
use std::sync::Arc;
use switchyard_core::{Backend, Result};
use switchyard_kernels::rope_kv::{rope_table, QkvPrep};
use switchyard_kernels::Ops;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
    fn unit(&mut self) -> f32 {
        self.next() as f32 / (1u64 << 31) as f32 * 2.0 - 1.0
    }
}

fn bf16_bytes(n: usize, rng: &mut Lcg, scale: f32) -> Vec<u8> {
    (0..n).flat_map(|_| switchyard_core::codec::bf16_bits(rng.unit() * scale + 0.01).to_le_bytes()).collect()
}
fn f32_bytes(n: usize, rng: &mut Lcg, scale: f32) -> Vec<u8> {
    (0..n).flat_map(|_| (rng.unit() * scale).to_le_bytes()).collect()
}
fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

struct Bench {
    be: Arc<dyn Backend>,
    ops: Ops,
    bufs: Vec<u64>,
}

impl Bench {
    fn buf(&mut self, data: &[u8]) -> Result<u64> {
        let a = self.be.alloc(data.len())?;
        self.be.upload(a, data)?;
        self.bufs.push(a);
        Ok(a)
    }
    fn zeros(&mut self, n: usize) -> Result<u64> {
        let a = self.be.alloc(n)?;
        self.be.memset0(a, n)?;
        self.bufs.push(a);
        Ok(a)
    }
    /// Median milliseconds per call of `f(set)` over rotating sets.
    fn time(&self, sets: usize, f: &mut dyn FnMut(usize) -> Result<()>) -> Result<f64> {
        for s in 0..sets {
            f(s)?;
        }
        self.be.synchronize()?;
        let mut times = Vec::new();
        for rep in 0..15 {
            let s = rep % sets;
            times.push(self.be.time_ms(&mut || f(s))?);
        }
        times.sort_by(|a, b| a.total_cmp(b));
        Ok(times[times.len() / 2])
    }
}

fn report(name: &str, ms: f64, bytes: f64, copy_gbs: f64) {
    let gbs = bytes / ms / 1e6;
    println!("| {name} | {ms:.4} | {:.1} | {gbs:.0} | {:.0}% |", bytes / 1e6, 100.0 * gbs / copy_gbs);
}

fn main() -> Result<()> {
    let cb = Arc::new(switchyard_cuda::CudaBackend::open(0)?);
    let t0 = std::time::Instant::now();
    cb.preload()?;
    let compile_s = t0.elapsed().as_secs_f64();
    let be: Arc<dyn Backend> = cb;
    let info = be.info();
    println!("device: {} ({}) {:?}", info.device, info.driver, info.details);
    let mut b = Bench { be: be.clone(), ops: Ops::new(be.clone()), bufs: Vec::new() };
    let mut rng = Lcg(7);
    println!("NVRTC compile / cache load of all modules: {compile_s:.2} s");

    // Ceiling: 1 GiB device-to-device copy (read + write bytes).
    let n = 1usize << 30;
    let (src, dst) = (b.zeros(n)?, b.zeros(n)?);
    let copy_ms = b.time(1, &mut |_| be.copy(dst, src, n))?;
    let copy_gbs = 2.0 * n as f64 / copy_ms / 1e6;
    println!("\ncopy ceiling: {copy_gbs:.0} GB/s (1 GiB dtod, read + write)\n");
    println!("| kernel | ms | MB moved | GB/s | of copy |\n|---|---|---|---|---|");

    let (rows, dim, eps) = (4096usize, 5376usize, 1e-6f32);
    let act = rows * dim * 2;
    let sets = 3;
    let xs: Vec<u64> = (0..sets).map(|_| b.buf(&bf16_bytes(rows * dim, &mut rng, 3.0))).collect::<Result<_>>()?;
    let rs: Vec<u64> = (0..sets).map(|_| b.buf(&bf16_bytes(rows * dim, &mut rng, 3.0))).collect::<Result<_>>()?;
    let outs: Vec<u64> = (0..sets).map(|_| b.zeros(act)).collect::<Result<_>>()?;
    let outs2: Vec<u64> = (0..sets).map(|_| b.zeros(act)).collect::<Result<_>>()?;
    let w = b.buf(&bf16_bytes(dim, &mut rng, 1.0))?;
    let scalar = b.buf(&0.7f32.to_le_bytes())?;

    let ms = b.time(sets, &mut |s| b.ops.rmsnorm(outs[s], xs[s], w, rows, dim, eps))?;
    report("rmsnorm_bf16", ms, 2.0 * act as f64, copy_gbs);
    let ms = b.time(sets, &mut |s| b.ops.sandwich(outs[s], outs2[s], rs[s], xs[s], w, w, rows, dim, eps))?;
    report("post_norm_add_pre_norm_bf16", ms, 4.0 * act as f64, copy_gbs);
    let ms = b.time(sets, &mut |s| b.ops.layer_out(outs[s], rs[s], xs[s], w, scalar, rows, dim, eps))?;
    report("layer_out_bf16", ms, 3.0 * act as f64, copy_gbs);

    // Embedding gathers from a 262144-row table.
    let vocab = 262144usize;
    let table8: Vec<u8> = (0..vocab * dim).map(|_| (rng.next() as u8) & 0x7e).collect();
    let e8 = b.buf(&table8)?;
    drop(table8);
    let scales = b.buf(&f32_bytes(vocab, &mut rng, 0.01))?;
    let idsets: Vec<u64> = (0..sets)
        .map(|_| b.buf(&i32_bytes(&(0..rows).map(|_| (rng.next() as usize % vocab) as i32).collect::<Vec<_>>())))
        .collect::<Result<_>>()?;
    let ms = b.time(sets, &mut |s| b.ops.embed_gather_fp8(outs[s], e8, scales, idsets[s], rows, vocab, dim, 73.3))?;
    report("embed_gather_fp8", ms, (rows * dim + act) as f64, copy_gbs);
    let tbf = b.buf(&bf16_bytes(vocab / 4 * dim, &mut rng, 1.0))?;
    let ms = b.time(sets, &mut |s| b.ops.embed_gather_bf16(outs[s], tbf, idsets[s], rows, vocab / 4, dim, 73.3))?;
    report("embed_gather_bf16", ms, 2.0 * act as f64, copy_gbs);
    let ms = b.time(sets, &mut |s| b.ops.gather_rows_bf16(outs[s], xs[(s + 1) % sets], idsets[s], rows, 4096, dim))?;
    report("gather_rows_bf16", ms, 2.0 * act as f64, copy_gbs);

    // qkv_prep: Gemma-style 32 query heads, 16 KV heads, hd 128; and hd 256.
    for (nh, nkv, hd) in [(32usize, 16usize, 128usize), (16, 8, 256)] {
        let max_pos = 8192;
        let cs = b.buf(&rope_table(max_pos, hd, 10000.0, hd / 2).iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())?;
        let q_raw = b.buf(&bf16_bytes(rows * nh * hd, &mut rng, 3.0))?;
        let k_raw = b.buf(&bf16_bytes(rows * nkv * hd, &mut rng, 3.0))?;
        let v_raw = b.buf(&bf16_bytes(rows * nkv * hd, &mut rng, 3.0))?;
        let qn = b.buf(&bf16_bytes(hd, &mut rng, 1.0))?;
        let q_out = b.zeros(rows * nh * hd * 2)?;
        let num_slots = rows * 2;
        let kp = b.zeros(num_slots * nkv * hd * 2)?;
        let vp = b.zeros(num_slots * nkv * hd * 2)?;
        let pos = b.buf(&i32_bytes(&(0..rows as i32).collect::<Vec<_>>()))?;
        let slot = b.buf(&i32_bytes(&(0..rows as i32).map(|r| r * 2).collect::<Vec<_>>()))?;
        let p = QkvPrep {
            q_out,
            k_pool: kp,
            v_pool: vp,
            q_raw,
            k_raw,
            v_raw,
            q_norm: qn,
            k_norm: qn,
            cos_sin: cs,
            pos,
            slot,
            pmap: 0,
            rows,
            src_rows: rows,
            nh,
            nkv,
            hd,
            max_pos,
            num_slots,
            eps,
        };
        let ms = b.time(1, &mut |_| b.ops.qkv_prep(&p))?;
        let bytes = 2.0 * (rows * (nh + 2 * nkv) * hd * 2) as f64 + (rows * hd * 4) as f64;
        report(&format!("qkv_prep_bf16 nh={nh} nkv={nkv} hd={hd}"), ms, bytes, copy_gbs);
    }

    // lm_head over the fp8 table, m = 1 and 16 (table bytes only).
    for m in [1usize, 16] {
        let h = b.buf(&bf16_bytes(m * dim, &mut rng, 2.0))?;
        let out = b.zeros(m * vocab * 4)?;
        let ms = b.time(1, &mut |_| b.ops.lm_head_logits_fp8(out, h, e8, scales, m, vocab, dim, 30.0))?;
        report(&format!("lm_head_logits_fp8 m={m}"), ms, (vocab * dim) as f64, copy_gbs);
    }
    for m in [1usize, 16] {
        let h = b.buf(&bf16_bytes(m * dim, &mut rng, 2.0))?;
        let out = b.zeros(m * vocab / 4 * 4)?;
        let ms = b.time(1, &mut |_| b.ops.lm_head_logits_bf16(out, h, tbf, m, vocab / 4, dim, 30.0))?;
        report(&format!("lm_head_logits_bf16 m={m} vocab={}", vocab / 4), ms, (vocab / 4 * dim * 2) as f64, copy_gbs);
    }

    // argmax over 16 x 262144 f32, rotating 8 sets (134 MB > L2).
    let m = 16;
    let asets = 8;
    let logits: Vec<u64> = (0..asets).map(|_| b.buf(&f32_bytes(m * vocab, &mut rng, 20.0))).collect::<Result<_>>()?;
    let (idx, val) = (b.zeros(m * 4)?, b.zeros(m * 4)?);
    let ms = b.time(asets, &mut |s| b.ops.argmax_rows(idx, val, logits[s], m, vocab, 3, -1))?;
    report("argmax_rows m=16", ms, (m * vocab * 4) as f64, copy_gbs);

    for a in std::mem::take(&mut b.bufs) {
        be.free(a)?;
    }
    Ok(())
}
