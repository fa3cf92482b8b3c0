//! CUDA kernel bandwidth check at the production shapes of issue 4, with
//! block-size sweeps (the full harness is `switchyard bench`; this one needs
//! only this crate).
//!
//! `cargo run --release -p switchyard-cuda --example cuda_bench`
//!
//! For each kernel and block size: the median time of one launch between two
//! events (what `switchyard bench` measures, so it includes the host's launch
//! latency), and the median per-launch time of 20 back-to-back launches
//! (the kernel's own throughput), the bytes the kernel must move, GB/s and
//! the ratio to a device-to-device copy measured in the same run. Inputs
//! rotate among several buffer sets so that L2 (50 MB on an H200) does not
//! serve repeated runs. The grid is always the one the kernel's plan (or,
//! for kernels not yet moved to plans, its launcher) computes; every block
//! size goes through `CudaBackend::launch_with_geometry`, checked like a
//! launch, with the plan's shared memory and workspace. Kernels whose plan
//! has several passes (argmax) or a persistent grid that is not a block
//! sweep (qkv_prep) run through their plan as a plain launch (block 0 in
//! the table).
use std::sync::Arc;
use switchyard_core::{Arg, Arg::*, Backend, Result};
use switchyard_cuda::CudaBackend;
use switchyard_kernels::rope_kv::rope_table;

mod common;
use common::{i32_bytes, Buffers, Lcg};

fn bf16_bytes(n: usize, rng: &mut Lcg, scale: f32) -> Vec<u8> {
    (0..n).flat_map(|_| switchyard_core::codec::bf16_bits(rng.unit() * scale + 0.01).to_le_bytes()).collect()
}
/// Fast random finite bf16 (|x| < 2): for large tables.
fn bf16_fast(n: usize, rng: &mut Lcg) -> Vec<u8> {
    let mut v = vec![0u8; 2 * n];
    for c in v.chunks_mut(4) {
        let w = (rng.next() & 0xbfff_bfff).to_le_bytes();
        c.copy_from_slice(&w[..c.len()]);
    }
    v
}
fn f32_bytes(n: usize, rng: &mut Lcg, scale: f32) -> Vec<u8> {
    (0..n).flat_map(|_| (rng.unit() * scale).to_le_bytes()).collect()
}

struct Bench {
    cb: Arc<CudaBackend>,
    be: Arc<dyn Backend>,
    bufs: Vec<u64>,
    copy_gbs: f64,
}
common::buffers_in_fields!(Bench);

impl Bench {
    /// (median ms of single timed launches, median per-launch ms of 20 back-to-back launches).
    fn time(&self, sets: usize, f: &mut dyn FnMut(usize) -> Result<()>) -> Result<(f64, f64)> {
        for s in 0..sets.max(2) {
            f(s % sets)?;
        }
        self.be.synchronize()?;
        let mut single = Vec::new();
        for rep in 0..15 {
            single.push(self.be.time_ms(&mut || f(rep % sets))?);
        }
        let mut b2b = Vec::new();
        for _ in 0..5 {
            let ms = self.be.time_ms(&mut || {
                for i in 0..20 {
                    f(i % sets)?;
                }
                Ok(())
            })?;
            b2b.push(ms / 20.0);
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        Ok((med(&mut single), med(&mut b2b)))
    }
    fn report(&self, name: &str, block: u32, t: (f64, f64), bytes: f64) {
        let (one, b2b) = t;
        let g1 = bytes / one / 1e6;
        let g2 = bytes / b2b / 1e6;
        println!(
            "| {name} | {block} | {one:.4} | {b2b:.4} | {:.1} | {g1:.0} | {:.0}% | {g2:.0} | {:.0}% |",
            bytes / 1e6,
            100.0 * g1 / self.copy_gbs,
            100.0 * g2 / self.copy_gbs
        );
    }
    /// Times `module::symbol` launched with its own plan (every pass, the
    /// plan's geometry), argument sets rotating.
    fn planned(&self, name: &str, module: &str, symbol: &str, sets: &[Vec<Arg>], bytes: f64) -> Result<()> {
        let sig = switchyard_core::registry::lookup(module, symbol)?;
        let t = self.time(sets.len(), &mut |s| self.be.launch(sig, &sets[s]))?;
        self.report(name, 0, t, bytes);
        Ok(())
    }
    /// Times `module::symbol` at `grid` for each block size, argument sets rotating.
    #[allow(clippy::too_many_arguments)]
    fn sweep(&self, name: &str, module: &str, symbol: &str, grid: [u32; 3], blocks: &[u32], sets: &[Vec<Arg>], bytes: f64) -> Result<()> {
        for &b in blocks {
            let sig = switchyard_core::registry::lookup(module, symbol)?;
            let t = self.time(sets.len(), &mut |s| self.cb.launch_with_geometry(sig, grid, [b, 1, 1], &sets[s]))?;
            self.report(name, b, t, bytes);
        }
        Ok(())
    }
}

fn main() -> Result<()> {
    let cb = Arc::new(CudaBackend::open(0)?);
    let t0 = std::time::Instant::now();
    cb.preload()?;
    let compile_s = t0.elapsed().as_secs_f64();
    let be: Arc<dyn Backend> = cb.clone();
    let info = be.info();
    println!("device: {} ({}) {:?}", info.device, info.driver, info.details);
    let mut b = Bench { cb, be: be.clone(), bufs: Vec::new(), copy_gbs: 1.0 };
    let mut rng = Lcg(7);
    println!("NVRTC compile / cache load of all modules: {compile_s:.2} s");

    // Ceiling: 1 GiB device-to-device copy (read + write bytes).
    let n = 1usize << 30;
    let (src, dst) = (b.zeros(n)?, b.zeros(n)?);
    let (copy_one, copy_b2b) = b.time(1, &mut |_| be.copy(dst, src, n))?;
    b.copy_gbs = 2.0 * n as f64 / copy_one / 1e6;
    println!("\ncopy ceiling: {:.0} GB/s (1 GiB dtod, read + write; back-to-back {:.0})\n", b.copy_gbs, 2.0 * n as f64 / copy_b2b / 1e6);
    for a in [src, dst] {
        be.free(a)?;
        b.bufs.retain(|&x| x != a);
    }
    println!("| kernel | block | one launch ms | b2b ms/launch | MB | GB/s one | % copy one | GB/s b2b | % copy b2b |\n|---|---|---|---|---|---|---|---|---|");

    let (rows, dim, eps) = (4096usize, 5376usize, 1e-6f32);
    // The plans' persistent grid (one resident wave) at the plan's block size.
    let nb = switchyard_kernels::norm::norm_block(dim);
    let g_rows = [switchyard_kernels::norm::persistent_rows(rows as u32, nb, &b.cb.device_facts()), 1, 1];
    let act = rows * dim * 2;
    let sets = 3;
    let xs: Vec<u64> = (0..sets).map(|_| b.buf(&bf16_bytes(rows * dim, &mut rng, 3.0))).collect::<Result<_>>()?;
    let rs: Vec<u64> = (0..sets).map(|_| b.buf(&bf16_bytes(rows * dim, &mut rng, 3.0))).collect::<Result<_>>()?;
    let outs: Vec<u64> = (0..sets).map(|_| b.zeros(act)).collect::<Result<_>>()?;
    let outs2: Vec<u64> = (0..sets).map(|_| b.zeros(act)).collect::<Result<_>>()?;
    let w = b.buf(&bf16_bytes(dim, &mut rng, 1.0))?;
    let scalar = b.buf(&0.7f32.to_le_bytes())?;
    // The norm and gather kernels take blocks of up to 128 threads (their launch bounds).
    let norm_blocks = [nb, 64, 128];

    let (r, d) = (I(rows as i32), I(dim as i32));
    let a: Vec<Vec<Arg>> = (0..sets).map(|s| vec![P(outs[s]), P(xs[s]), P(w), r, d, F(eps)]).collect();
    b.sweep("rmsnorm_bf16", "norm", "rmsnorm_bf16", g_rows, &norm_blocks, &a, 2.0 * act as f64)?;
    let a: Vec<Vec<Arg>> = (0..sets).map(|s| vec![P(outs[s]), P(outs2[s]), P(rs[s]), P(xs[s]), P(w), P(w), r, d, F(eps)]).collect();
    b.sweep("post_norm_add_pre_norm_bf16", "norm", "post_norm_add_pre_norm_bf16", g_rows, &norm_blocks, &a, 4.0 * act as f64)?;
    let a: Vec<Vec<Arg>> = (0..sets).map(|s| vec![P(outs[s]), P(rs[s]), P(xs[s]), P(w), P(scalar), r, d, F(eps)]).collect();
    b.sweep("layer_out_bf16", "norm", "layer_out_bf16", g_rows, &norm_blocks, &a, 3.0 * act as f64)?;

    // Embedding gathers from a 262144-row table.
    let vocab = 262144usize;
    let table8: Vec<u8> = (0..vocab * dim).map(|_| (rng.next() as u8) & 0xfe).collect();
    let e8 = b.buf(&table8)?;
    drop(table8);
    let scales = b.buf(&f32_bytes(vocab, &mut rng, 0.01))?;
    let idsets: Vec<u64> = (0..sets)
        .map(|_| b.buf(&i32_bytes(&(0..rows).map(|_| (rng.next() as usize % vocab) as i32).collect::<Vec<_>>())))
        .collect::<Result<_>>()?;
    let a: Vec<Vec<Arg>> = (0..sets).map(|s| vec![P(outs[s]), P(e8), P(scales), P(idsets[s]), r, d, I(vocab as i32), F(73.3)]).collect();
    b.sweep("embed_gather_fp8", "embed", "embed_gather_fp8", g_rows, &[nb, 64, 128], &a, (rows * dim + act) as f64)?;
    let tbf = b.buf(&bf16_fast(vocab * dim, &mut rng))?;
    let a: Vec<Vec<Arg>> = (0..sets).map(|s| vec![P(outs[s]), P(tbf), P(idsets[s]), r, d, I(vocab as i32), F(73.3)]).collect();
    b.sweep("embed_gather_bf16", "embed", "embed_gather_bf16", g_rows, &[nb, 128], &a, 2.0 * act as f64)?;
    let a: Vec<Vec<Arg>> = (0..sets).map(|s| vec![P(outs[s]), P(xs[(s + 1) % sets]), P(idsets[s]), r, d, I(4096)]).collect();
    b.sweep("gather_rows_bf16", "embed", "gather_rows_bf16", g_rows, &[nb, 128], &a, 2.0 * act as f64)?;

    // qkv_prep at the bench's shape (32 query heads, 16 KV heads, hd 256) with its plan's geometry, and a tiny-hd probe of the fixed cost.
    for (nh, nkv, hd) in [(32usize, 16usize, 256usize), (32, 16, 8)] {
        let max_pos = rows;
        let cs = b.buf(&rope_table(max_pos, hd, 10000.0, hd / 2).iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())?;
        let q_raw = b.buf(&bf16_bytes(rows * nh * hd, &mut rng, 3.0))?;
        let k_raw = b.buf(&bf16_bytes(rows * nkv * hd, &mut rng, 3.0))?;
        let v_raw = b.buf(&bf16_bytes(rows * nkv * hd, &mut rng, 3.0))?;
        let qn = b.buf(&bf16_bytes(hd, &mut rng, 1.0))?;
        let q_out = b.zeros(rows * nh * hd * 2)?;
        let num_slots = rows;
        let kp = b.zeros(num_slots * nkv * hd * 2)?;
        let vp = b.zeros(num_slots * nkv * hd * 2)?;
        let mut perm: Vec<i32> = (0..rows as i32).collect();
        for i in (1..rows).rev() {
            perm.swap(i, rng.next() as usize % (i + 1));
        }
        let pos = b.buf(&i32_bytes(&perm))?;
        let slot = b.buf(&i32_bytes(&perm))?;
        let args = vec![vec![
            P(q_out),
            P(kp),
            P(vp),
            P(q_raw),
            P(k_raw),
            P(v_raw),
            P(qn),
            P(qn),
            P(cs),
            P(pos),
            P(slot),
            I(nh as i32),
            I(nkv as i32),
            I(hd as i32),
            F(eps),
            P(0),
            I(rows as i32),
            I(rows as i32),
            I(max_pos as i32),
            I(num_slots as i32),
        ]];
        let bytes = 2.0 * (rows * (nh + 2 * nkv) * hd * 2) as f64 + (rows * hd * 4) as f64;
        b.planned(&format!("qkv_prep_bf16 hd={hd}"), "rope_kv", "qkv_prep_bf16", &args, bytes)?;
    }

    // lm_head over the fp8 and bf16 tables, m = 1 and 16 (bytes as switchyard bench counts them).
    let g_head = [vocab.div_ceil(4) as u32, 1, 1];
    for m in [1usize, 16] {
        let h = b.buf(&bf16_bytes(m * dim, &mut rng, 2.0))?;
        let out = b.zeros(m * vocab * 4)?;
        let a = vec![vec![P(out), P(h), P(e8), P(scales), I(m as i32), I(vocab as i32), I(dim as i32), F(30.0)]];
        let bytes = (vocab * dim + 4 * vocab + 4 * m * vocab + 2 * m * dim) as f64;
        b.sweep(
            &format!("lm_head_logits_fp8 m={m}"),
            "head",
            "lm_head_logits_fp8",
            g_head,
            if m == 1 { &[128] } else { &[128, 256] },
            &a,
            bytes,
        )?;
        let a = vec![vec![P(out), P(h), P(tbf), I(m as i32), I(vocab as i32), I(dim as i32), F(30.0)]];
        let bytes = (2 * vocab * dim + 4 * m * vocab + 2 * m * dim) as f64;
        b.sweep(&format!("lm_head_logits_bf16 m={m}"), "head", "lm_head_logits_bf16", g_head, &[128], &a, bytes)?;
    }

    // argmax over 16 x 262144 f32, rotating 8 sets (134 MB > L2).
    let m = 16;
    let asets = 8;
    let logits: Vec<u64> = (0..asets).map(|_| b.buf(&f32_bytes(m * vocab, &mut rng, 20.0))).collect::<Result<_>>()?;
    let (idx, val) = (b.zeros(m * 4)?, b.zeros(m * 4)?);
    let a: Vec<Vec<Arg>> = (0..asets).map(|s| vec![P(idx), P(val), P(logits[s]), I(m as i32), I(vocab as i32), I(3), I(-1)]).collect();
    b.planned("argmax_rows m=16", "head", "argmax_rows", &a, (m * vocab * 4 + 8 * m) as f64)?;

    for a in std::mem::take(&mut b.bufs) {
        be.free(a)?;
    }
    Ok(())
}
