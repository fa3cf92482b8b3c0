//! GEMM choice for a linear layer: by weight format, by M, and by what the
//! backend implements (the registry), so the graph itself never names a backend.
use crate::weights::{AttnProj, Linear, StackedFp4};
use switchyard_core::{registry, Region, Result};
use switchyard_kernels::gemm::w4a16::{Fp4Weight, DECODE_MAX_M, W4A16_GEMM_DECODE};
use switchyard_kernels::gemm::DENSE_GEMM_TC;
use switchyard_kernels::gemv::{
    LayerOutRow, QkvEpilogue, SandwichRow, DENSE_GEMV_BF16, DENSE_GEMV_GELU_MUL_BF16, DENSE_GEMV_LAYER_OUT_RMSNORM_BF16,
    DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16, DENSE_GEMV_RMSNORM_BF16, DENSE_GEMV_SANDWICH_GELU_MUL_BF16, GEMV_MAX_M,
};
use switchyard_kernels::rope_kv::QkvPrep;
use switchyard_kernels::Ops;

/// Whether `ops`' backend streams a bf16 weight through `sig` (a GEMV) at this shape.
fn streams(ops: &Ops, sig: &'static switchyard_core::KernelSig, m: usize, k: usize) -> bool {
    m <= GEMV_MAX_M && k % 8 == 0 && registry::implements(ops.be.kind(), sig)
}

/// `c[m, n] = a[m, k] · wᵀ` for a bf16 weight region `[n, k]`: the decode
/// GEMV for M ≤ 16 where the backend has it, else the tensor-core kernel
/// (M ≤ 16), else the prefill dispatcher.
fn bf16(ops: &Ops, w: Region, a: Region, c: Region, m: usize, n: usize, k: usize) -> Result<()> {
    if m > DECODE_MAX_M {
        ops.dense_gemm_prefill(a, w, c, m, n, k)
    } else if streams(ops, &DENSE_GEMV_BF16, m, k) {
        ops.dense_gemv_bf16(a, w, c, m, n, k, [n, n])
    } else if registry::implements(ops.be.kind(), &DENSE_GEMM_TC) && k % 8 == 0 {
        ops.dense_gemm_tc(a, w, c, m, n, k)
    } else {
        ops.dense_gemm_bf16(a, w, c, m, n, k)
    }
}

/// `c[m, n] = a[m, k] · Wᵀ` for the layer's weight.
///
/// bf16: see `bf16` below (private). NVFP4: the decode-only W4A16 kernel for M ≤ 16 where
/// implemented, else the base W4A16 kernel.
pub fn apply(ops: &Ops, w: &Linear, a: Region, c: Region, m: usize) -> Result<()> {
    match w {
        Linear::Bf16 { w, n, k } => bf16(ops, w.region(), a, c, m, *n, *k),
        Linear::Nvfp4 { bq, bs, scale2, n, k } => {
            let fw = Fp4Weight { bq: bq.region(), bs: bs.region(), scale2: *scale2, ldb: *n };
            if m <= DECODE_MAX_M && registry::implements(ops.be.kind(), &W4A16_GEMM_DECODE) {
                ops.w4a16_gemm_decode(a, &fw, c, m, *n, *k)
            } else {
                ops.w4a16_gemm(a, &fw, c, m, *n, *k)
            }
        }
    }
}

/// The attention block's input RMSNorm: `xn = rmsnorm_bf16(x; w, eps)`
/// over `[m, dim]` rows, into the scratch `xn`, which only the attention
/// projections read.
#[derive(Clone, Copy)]
pub struct InputNorm {
    /// The residual stream's rows.
    pub x: Region,
    /// The norm's weight `[dim]`.
    pub w: Region,
    /// Where the normalised rows go when the norm runs on its own.
    pub xn: Region,
    /// Row width (hidden size).
    pub dim: usize,
    /// The norm's epsilon.
    pub eps: f32,
    /// `x` not yet formed: the previous layer's output norm
    /// (`layer_out_bf16` into `x`, same `dim` and `eps`), which the q/k/v
    /// projection runs in its prologue where it can
    /// (`dense_gemv_layer_out_rmsnorm_bf16`), else first.
    pub pending: Option<LayerOutRow>,
}

impl InputNorm {
    /// Runs the pending `layer_out_bf16` over `m` rows, if any.
    pub fn form_rows(&self, ops: &Ops, m: usize) -> Result<()> {
        self.pending.map_or(Ok(()), |p| p.run(ops, m, self.dim, self.eps))
    }

    /// `rmsnorm_bf16` on its own, into `xn`; returns `xn`.
    fn unfused(&self, ops: &Ops, m: usize) -> Result<Region> {
        self.form_rows(ops, m)?;
        ops.rmsnorm_bf16(self.xn, self.x, Some(self.w), m, self.dim, self.eps)?;
        Ok(self.xn)
    }

    /// Whether the norm fuses into a projection of the stacked weight `w`
    /// (`[_, k]`) as `dense_gemv_rmsnorm_bf16`: one row (batch-1 decode),
    /// K % 8 == 0, the operands 16-byte aligned, and a backend that
    /// implements the fused kernel. Then `xn` is never written.
    fn fuses(&self, ops: &Ops, w: Region, k: usize, m: usize) -> bool {
        let aligned = [self.x.addr(), self.w.addr(), w.addr()].iter().all(|a| a.is_multiple_of(16));
        m == 1 && k.is_multiple_of(8) && k == self.dim && aligned && registry::implements(ops.be.kind(), &DENSE_GEMV_RMSNORM_BF16)
    }

    /// The pending layer output where it fuses into that projection too
    /// (its operands 16-byte aligned, a backend that implements it).
    fn fused_layer_out(&self, ops: &Ops) -> Option<LayerOutRow> {
        let p = self.pending?;
        let addrs = [Some(p.mid), Some(p.x), p.w_post].into_iter().flatten().map(|r| r.addr());
        let aligned = addrs.chain([p.out.addr()]).all(|a| a.is_multiple_of(16));
        (aligned && registry::implements(ops.be.kind(), &DENSE_GEMV_LAYER_OUT_RMSNORM_BF16)).then_some(p)
    }
}

/// The input norm, then the q, k and v projections of its rows into `out`,
/// laid out as `[m, nq]`, then `[m, nk]`, then `[m, nv]`; returns the three
/// views (v = k's when V = K). At batch 1 with a stacked bf16 weight this is
/// one launch, the norm in the GEMV's prologue; otherwise `rmsnorm_bf16`
/// into `norm.xn`, then the projections (one weight stream for a stacked
/// weight at decode sizes). `stage`: room for an NVFP4 stack's `[m, nq +
/// nk + nv]` output at decode batches above 1 (see [`StackedFp4`]).
pub fn normed_attention(ops: &Ops, p: &AttnProj, norm: &InputNorm, out: Region, m: usize, stage: Region) -> Result<[Region; 3]> {
    if let AttnProj::Stacked { w, n, k } = p {
        if norm.fuses(ops, w.region(), *k, m) {
            let total = n.iter().sum::<usize>();
            let (c, segs) = (out.slice(0, total * 2)?, [n[0], n[0] + n[1]]);
            match norm.fused_layer_out(ops) {
                Some(row) => ops.dense_gemv_layer_out_rmsnorm_bf16(&row, w.region(), c, total, *k, segs, norm.w, norm.eps)?,
                None => {
                    norm.form_rows(ops, m)?;
                    ops.dense_gemv_rmsnorm_bf16(norm.x, w.region(), c, 1, total, *k, segs, norm.w, norm.eps)?
                }
            }
            return views(p, out, m);
        }
    }
    attention(ops, p, norm.unfused(ops, m)?, out, m, stage)
}

/// [`normed_attention`], then `qkv_prep_bf16` of its q, k and v views
/// (`prep`'s `q_raw`, `k_raw` and `v_raw` are replaced by them). Where the
/// layer boundary is one launch (batch 1, a pending layer output, a stacked
/// bf16 weight, a layer that owns its KV) and the backend implements it,
/// `dense_gemv_layer_out_rmsnorm_qkv_prep_bf16` can do both in that launch,
/// which the graph takes only under `SWITCHYARD_QKV_EPILOGUE=1` (slower on
/// the H200; kernels/src/gemv/layer_out_qkv.rs has the figures).
pub fn normed_attention_prep(
    ops: &Ops,
    p: &AttnProj,
    norm: &InputNorm,
    out: Region,
    m: usize,
    stage: Region,
    prep: &QkvPrep,
) -> Result<()> {
    static FUSED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let fused = super::env_is_one(&FUSED, "SWITCHYARD_QKV_EPILOGUE");
    if let (AttnProj::Stacked { w, n, k }, Some(e)) = (p, fused.then(|| epilogue(ops, p, prep)).flatten()) {
        let (total, segs) = e.columns();
        let stacked = [n[0], n[0] + n[1]] == segs && n.iter().sum::<usize>() == total;
        let row = norm.fused_layer_out(ops).filter(|_| stacked && prep.eps == norm.eps && norm.fuses(ops, w.region(), *k, m));
        if let Some(row) = row {
            let c = out.slice(0, total * 2)?;
            if c.addr().is_multiple_of(16) {
                return ops.dense_gemv_layer_out_rmsnorm_qkv_prep_bf16(&row, w.region(), c, *k, norm.w, norm.eps, &e);
            }
        }
    }
    let [q_raw, k_raw, v_raw] = normed_attention(ops, p, norm, out, m, stage)?;
    ops.qkv_prep_bf16(&QkvPrep { q_raw, k_raw: Some(k_raw), v_raw: Some(v_raw), ..*prep })
}

/// `prep` as the fused kernel's epilogue of the projection `p`, where it
/// is one row of a layer that owns its KV (no position map, both norms), at
/// a head dimension the kernel takes, with the 16-byte alignment of its
/// loads, on a backend that implements it.
fn epilogue(ops: &Ops, p: &AttnProj, prep: &QkvPrep) -> Option<QkvEpilogue> {
    let AttnProj::Stacked { n, .. } = p else { return None };
    let k_eq_v = n[2] == 0;
    let (k_pool, v_pool, slot, q_norm, k_norm) = (prep.k_pool?, prep.v_pool?, prep.slot?, prep.q_norm?, prep.k_norm?);
    let one_row = prep.rows == 1 && prep.src_rows == 1 && prep.pmap.is_none() && prep.nkv > 0;
    let shape = prep.hd.is_multiple_of(8) && prep.hd <= 512;
    let aligned = [prep.q_out, k_pool, v_pool, q_norm, k_norm].iter().all(|r| r.addr().is_multiple_of(16));
    let implemented = registry::implements(ops.be.kind(), &DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16);
    (one_row && shape && aligned && implemented).then_some(QkvEpilogue {
        q_out: prep.q_out,
        k_pool,
        v_pool,
        q_norm,
        k_norm,
        cos_sin: prep.cos_sin,
        pos: prep.pos,
        slot,
        nh: prep.nh,
        nkv: prep.nkv,
        hd: prep.hd,
        k_eq_v,
        max_pos: prep.max_pos,
        num_slots: prep.num_slots,
    })
}

/// The input norm, then the query projection alone into `out` (`[m, nq]`),
/// for a KV-shared layer, whose weights hold only q (stacked: `n = [nq, 0,
/// 0]`); fused as in [`normed_attention`] where it can be.
pub fn normed_query(ops: &Ops, p: &AttnProj, norm: &InputNorm, out: Region, m: usize) -> Result<Region> {
    if let AttnProj::Stacked { w, n, k } = p {
        if norm.fuses(ops, w.region(), *k, m) {
            norm.form_rows(ops, m)?;
            let q_raw = out.slice(0, n[0] * 2)?;
            ops.dense_gemv_rmsnorm_bf16(norm.x, w.region().slice(0, n[0] * k * 2)?, q_raw, 1, n[0], *k, [n[0], n[0]], norm.w, norm.eps)?;
            return Ok(q_raw);
        }
    }
    query(ops, p, norm.unfused(ops, m)?, out, m)
}

/// The q, k and v views of `out` for `m` rows (v = k's when V = K).
fn views(p: &AttnProj, out: Region, m: usize) -> Result<[Region; 3]> {
    let widths = match p {
        AttnProj::Stacked { n, .. } | AttnProj::StackedFp4(StackedFp4 { n, .. }) => *n,
        AttnProj::Separate { q, k, v } => [q.n(), k.as_ref().map_or(0, Linear::n), v.as_ref().map_or(0, Linear::n)],
    };
    let q_raw = out.slice(0, m * widths[0] * 2)?;
    let k_raw = out.slice(m * widths[0] * 2, m * widths[1] * 2)?;
    let v_raw = if widths[2] == 0 { k_raw } else { out.slice(m * (widths[0] + widths[1]) * 2, m * widths[2] * 2)? };
    Ok([q_raw, k_raw, v_raw])
}

/// The q, k and v projections of `a` (`m` rows) into `out`, laid out as
/// `[m, nq]`, then `[m, nk]`, then `[m, nv]`; returns the three views (v =
/// k's when V = K). A stacked weight at decode sizes is one weight stream.
fn attention(ops: &Ops, p: &AttnProj, a: Region, out: Region, m: usize, stage: Region) -> Result<[Region; 3]> {
    let [q_raw, k_raw, v_raw] = views(p, out, m)?;
    match p {
        AttnProj::StackedFp4(sf) => stacked_fp4(ops, sf, a, out, [q_raw, k_raw, v_raw], m, stage)?,
        AttnProj::Stacked { w, n, k } => {
            let total = n.iter().sum::<usize>();
            if streams(ops, &DENSE_GEMV_BF16, m, *k) {
                ops.dense_gemv_bf16(a, w.region(), out.slice(0, m * total * 2)?, m, total, *k, [n[0], n[0] + n[1]])?;
            } else {
                let mut row = 0;
                for (&rows, dst) in n.iter().zip([q_raw, k_raw, v_raw]) {
                    if rows > 0 {
                        bf16(ops, w.region().slice(row * k * 2, rows * k * 2)?, a, dst, m, rows, *k)?;
                    }
                    row += rows;
                }
            }
        }
        AttnProj::Separate { q, k, v } => {
            apply(ops, q, a, q_raw, m)?;
            if let Some(k) = k {
                apply(ops, k, a, k_raw, m)?;
            }
            if let Some(v) = v {
                apply(ops, v, a, v_raw, m)?;
            }
        }
    }
    Ok([q_raw, k_raw, v_raw])
}

/// The query projection alone into `out` (`[m, nq]`), for a KV-shared
/// layer, whose weights hold only q (stacked: `n = [nq, 0, 0]`).
fn query(ops: &Ops, p: &AttnProj, a: Region, out: Region, m: usize) -> Result<Region> {
    match p {
        AttnProj::Stacked { w, n, k } => {
            let q_raw = out.slice(0, m * n[0] * 2)?;
            bf16(ops, w.region().slice(0, n[0] * k * 2)?, a, q_raw, m, n[0], *k)?;
            Ok(q_raw)
        }
        AttnProj::StackedFp4(sf) => {
            let q_raw = out.slice(0, m * sf.n[0] * 2)?;
            if sf.gather.is_none() {
                apply(ops, &sf.w, a, q_raw, m)?;
            } else {
                segment_ldb(ops, sf, 0, a, q_raw, m)?;
            }
            Ok(q_raw)
        }
        AttnProj::Separate { q, .. } => {
            let q_raw = out.slice(0, m * q.n() * 2)?;
            apply(ops, q, a, q_raw, m)?;
            Ok(q_raw)
        }
    }
}

/// The NVFP4 stack's q, k and v of `a` (`m` rows) into `dst`, the three
/// views of `out` (`dst[2]` is ignored when nv = 0). One launch where its
/// `[m, total]` output is already that layout (one row, or one segment); at
/// other decode batches, the stack into `stage` and one row gather a
/// segment into place; at prefill sizes (or without the room), each
/// segment's columns as a W4A16 `_ldb` view.
fn stacked_fp4(ops: &Ops, sf: &StackedFp4, a: Region, out: Region, dst: [Region; 3], m: usize, stage: Region) -> Result<()> {
    let total: usize = sf.n.iter().sum();
    let Some((table, chunk)) = &sf.gather else {
        return apply(ops, &sf.w, a, out.slice(0, m * total * 2)?, m);
    };
    if m == 1 {
        // q, k and v of one row are consecutive: the views are the stacked output's pieces.
        return apply(ops, &sf.w, a, out.slice(0, total * 2)?, m);
    }
    if m <= DECODE_MAX_M && stage.len() >= m * total * 2 {
        let st = stage.slice(0, m * total * 2)?;
        apply(ops, &sf.w, a, st, m)?;
        for (s, d) in dst.into_iter().enumerate().filter(|&(s, _)| sf.n[s] > 0) {
            let (first, per) = sf.gather_segment(s).expect("a stack with a gather table has its segments");
            let idx = table.region().slice(first * 4, m * per * 4)?;
            ops.gather_rows_bf16(d, st, idx, m * per, m * total / chunk, *chunk)?;
        }
        return Ok(());
    }
    for (s, d) in dst.into_iter().enumerate().filter(|&(s, _)| sf.n[s] > 0) {
        segment_ldb(ops, sf, s, a, d, m)?;
    }
    Ok(())
}

/// Segment `s` of an NVFP4 stack through the `_ldb` W4A16 kernel: its
/// columns start `Σ n[..s]` bytes into each K-pair row of codes and scales,
/// rows `total` apart (the padding row keeps the view inside the buffers).
fn segment_ldb(ops: &Ops, sf: &StackedFp4, s: usize, a: Region, c: Region, m: usize) -> Result<()> {
    let (total, col) = (sf.n.iter().sum::<usize>(), sf.n[..s].iter().sum::<usize>());
    let fw = sf.w.fp4().expect("an NVFP4 stack's weight is NVFP4");
    let k = sf.k;
    let view = Fp4Weight {
        bq: fw.bq.slice(col, k / 2 * total)?,
        bs: fw.bs.slice(col, k / switchyard_core::codec::nvfp4::BLOCK * total)?,
        scale2: fw.scale2,
        ldb: total,
    };
    ops.w4a16_gemm_n128_ldb(a, &view, c, m, sf.n[s], k)
}

/// `c[m, n] = a[m, k] · Wᵀ` for a plain bf16 weight region `w` `[n, k]`.
pub fn bf16_region(ops: &Ops, w: Region, a: Region, c: Region, m: usize, n: usize, k: usize) -> Result<()> {
    bf16(ops, w, a, c, m, n, k)
}

/// `SWITCHYARD_SANDWICH_UNFUSED=1` keeps the sandwich and the gate/up GEMV
/// in two launches at batch 1 (an A/B of the fused kernel); read once a process.
fn sandwich_unfused() -> bool {
    static UNFUSED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    super::env_is_one(&UNFUSED, "SWITCHYARD_SANDWICH_UNFUSED")
}

/// The sandwich between attention and MLP (`row`: x into `row.out`, its
/// pre-norm in registers and shared memory only) and the gated activation
/// `act[1, inter]` in one launch, `dense_gemv_sandwich_gelu_mul_bf16`, where
/// it fuses: one row (batch-1 decode), a bf16 gate/up weight with K % 8 ==
/// 0, the operands 16-byte aligned, and a backend that implements it.
/// Returns whether it ran; if not, the caller runs the sandwich and
/// [`gated_up`].
pub fn sandwich_gated_up(ops: &Ops, w: &Linear, row: &SandwichRow, act: Region, m: usize, inter: usize, eps: f32) -> Result<bool> {
    let Linear::Bf16 { w, k, .. } = w else { return Ok(false) };
    let regions = [row.out, row.resid, row.x, row.w_pre, w.region()].into_iter().chain(row.w_post);
    let aligned = regions.map(|r| r.addr()).all(|a| a.is_multiple_of(16));
    if m != 1
        || !k.is_multiple_of(8)
        || !aligned
        || sandwich_unfused()
        || !registry::implements(ops.be.kind(), &DENSE_GEMV_SANDWICH_GELU_MUL_BF16)
    {
        return Ok(false);
    }
    ops.dense_gemv_sandwich_gelu_mul_bf16(row, w.region(), act, inter, *k, eps)?;
    Ok(true)
}

/// The dense MLP's gated activation `act[m, inter] = gelu_tanh(gate) · up`
/// from the stacked gate/up weight: fused into the weight stream at decode
/// sizes, else the GEMM into `gu` followed by `gelu_mul_bf16`.
pub fn gated_up(ops: &Ops, w: &Linear, a: Region, gu: Region, act: Region, m: usize, inter: usize) -> Result<()> {
    if let Linear::Bf16 { w, k, .. } = w {
        if streams(ops, &DENSE_GEMV_GELU_MUL_BF16, m, *k) {
            return ops.dense_gemv_gelu_mul_bf16(a, w.region(), act, m, inter, *k);
        }
    }
    apply(ops, w, a, gu, m)?;
    ops.gelu_mul_bf16(act, gu, m, inter)
}
