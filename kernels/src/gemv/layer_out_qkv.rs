//! The batch-1 layer boundary and the attention's input preparation in one
//! launch: [`super::DENSE_GEMV_LAYER_OUT_RMSNORM_BF16`] (the previous
//! layer's output norm, this layer's input norm and the stacked q/k/v GEMV),
//! then [`crate::rope_kv::QKV_PREP_BF16`] over its one output row, where
//! the graph runs the two launches back to back (on the H200, leaving the
//! qkv_prep launches out of the replayed step saved 2.3 us a layer). The
//! graph takes it only on request (`SWITCHYARD_QKV_EPILOGUE=1`, in
//! `model/src/graph/linear.rs`): on the H200 it was slower than the two
//! launches it replaces, bench-model batch 1 at the default shape, runs
//! interleaved in one device call (`benchmarks/2026-12-02-qkv-epilogue-h200/`):
//! two launches 395.0 / 392.7 / 389.1 tok/s (2.533 / 2.545 / 2.570 ms a
//! step), this kernel 384.2 / 384.2 / 385.3 (2.603 / 2.598 / 2.595), about
//! 1.7 us a layer more. Every block's fence and arrival, and the last
//! block's read back through L2, sit at the end of the weight stream, on
//! the path to the attention, and cost more than the qkv_prep launch did.
use super::layer_out::{cuda_layer_out_gemv, layer_out_row_tolerance, wgsl_layer_out_gemv};
use super::{gemv_rmsnorm_operands, LayerOutRow, NORMED_NMSE};
use crate::ops::{bf16s, i32_arg, region, require, saturating_product, scalar, words, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use crate::plan::{CudaPlan, DeviceFacts, PlanArgs, WgslPass, WgslPlan};
use crate::rope_kv::rope_table;
use switchyard_core::codec::bytes;
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, Error, Region, Result};

declare_kernel! {
    /// [`super::DENSE_GEMV_LAYER_OUT_RMSNORM_BF16`] of one row, then
    /// [`crate::rope_kv::QKV_PREP_BF16`] of its output `c` (one row, no
    /// `pmap`): `a` and `c` exactly as that kernel defines them (`c` is the
    /// raw q|k|v, stored), then `q_out`, `k_pool` and `v_pool` exactly as
    /// `qkv_prep_bf16` defines them with `q_raw = c[0, seg1)`, `k_raw =
    /// c[seg1, seg2)`, `v_raw = c[seg2, n)` (V = K when `n == seg2`: `v_raw
    /// = k_raw`), reading the bf16 values stored in `c`, the norms' `eps`,
    /// `rows = src_rows = 1` and position `pos[0]`, slot `slot[0]`.
    ///
    /// Arguments: the layer-output GEMV's, in its order, then qkv_prep's
    /// outputs and tables (`q_out` `[nh·hd]`, `k_pool` / `v_pool`
    /// `[num_slots, nkv, hd]`, `q_norm` / `k_norm` `[hd]` (both required),
    /// `cos_sin` f32 `[max_pos][hd/2][2]`, `pos` / `slot` i32 `[1]`) and
    /// sizes. `m = 1`; `nh, nkv ≥ 1`; `hd % 8 == 0`, `hd ≤ 512`; `seg1 =
    /// nh·hd`, `seg2 = seg1 + nkv·hd`, `n = seg2` or `seg2 + nkv·hd`; at most
    /// [`QKV_EPILOGUE_MAX_HEADS`] heads in `c`; the GEMV's alignment, and
    /// `c` 16-byte aligned.
    ///
    /// Tolerance: `a` and `c` as the layer-output GEMV's. `q_out` and the
    /// pools as `c` (NMSE ≤ [`NORMED_NMSE`]), not qkv_prep's 2 ulps: they are
    /// functions of `c`, whose elements the GEMV's free K order may put an
    /// ulp from the reference's; a head's norm and rotation carry that over
    /// at about the same relative size. A row with a bad position is NaN
    /// bits, compared exactly.
    DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16 = "gemv"::"dense_gemv_layer_out_rmsnorm_qkv_prep_bf16"(
        A::output("a"), A::input("b"), A::output("c"), A::u32("m"), A::u32("n"), A::u32("k"), A::u32("seg1"), A::u32("seg2"),
        A::input("norm_w"), A::f32("eps"), A::input("mid"), A::input("x"), A::input("w_post").or_null(), A::input("layer_scalar"),
        A::output("q_out"), A::inout("k_pool"), A::inout("v_pool"), A::input("q_norm"), A::input("k_norm"), A::input("cos_sin"),
        A::input("pos"), A::input("slot"), A::i32("nh"), A::i32("nkv"), A::i32("hd"), A::i32("max_pos"), A::i32("num_slots"))
}

/// Head vectors of `c` the CUDA arrival counters cover (`QKV_EPI_MAX_HEADS`
/// in gemv.cu).
pub const QKV_EPILOGUE_MAX_HEADS: u32 = 1024;

/// The head vectors of `c` (`n / hd`), refusing shapes the entries cannot take.
fn heads(a: &PlanArgs) -> Result<u32> {
    let (n, seg1, seg2) = (a.u32("n")?, a.u32("seg1")?, a.u32("seg2")?);
    let (nh, nkv, hd) = (a.u32("nh")?, a.u32("nkv")?, a.u32("hd")?);
    let s = a.kernel.symbol;
    if hd == 0 || hd % 8 != 0 || hd > 512 {
        return Err(Error::invalid(s, "hd", format!("hd = {hd} must be a multiple of 8 in 8..=512")));
    }
    let q = u64::from(nh) * u64::from(hd);
    let kv = u64::from(nkv) * u64::from(hd);
    if nh == 0 || nkv == 0 || u64::from(seg1) != q || u64::from(seg2) != q + kv || ![q + kv, q + 2 * kv].contains(&u64::from(n)) {
        return Err(Error::invalid(s, "n", format!("n = {n}, segments {seg1}, {seg2} are not nh = {nh}, nkv = {nkv} heads of {hd}")));
    }
    let heads = n / hd;
    if heads > QKV_EPILOGUE_MAX_HEADS {
        return Err(Error::invalid(s, "nh", format!("{heads} heads; the arrival counters cover {QKV_EPILOGUE_MAX_HEADS}")));
    }
    Ok(heads)
}

/// CUDA: the layer-output GEMV's geometry under this kernel's entries (the
/// x2 form and the slices form), each ending in the qkv_prep epilogue.
fn cuda_plan(a: &PlanArgs, f: &DeviceFacts) -> Result<CudaPlan> {
    heads(a)?;
    let mut plan = cuda_layer_out_gemv(a, f)?;
    for pass in &mut plan.passes {
        if pass.entry == "dense_gemv_layer_out_rmsnorm_bf16_x2" {
            pass.entry = "dense_gemv_layer_out_rmsnorm_qkv_prep_bf16_x2";
        }
    }
    Ok(plan)
}

/// WGSL: the layer-output GEMV's own passes (this shader composes their
/// entries), then one pass of a workgroup a head vector of `c`.
fn wgsl_plan(a: &PlanArgs, f: &DeviceFacts) -> Result<WgslPlan> {
    let heads = heads(a)?;
    let mut plan = wgsl_layer_out_gemv(a, f)?;
    plan.passes.push(WgslPass { entry: "qkv_prep_epilogue", grid: [heads, 1, 1], consts: vec![], extra: [0; 4] });
    Ok(plan)
}

cuda_plan!(DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16 => cuda_plan);
wgsl_plan!(DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16, "gemv/dense_gemv_layer_out_rmsnorm_qkv_prep_bf16.wgsl" => wgsl_plan);

/// qkv_prep's side of the launch: where the prepared row goes and what it
/// reads besides `c`.
#[derive(Clone, Copy, Debug)]
pub struct QkvEpilogue {
    /// Output queries `[nh·hd]`.
    pub q_out: Region,
    /// K pool `[num_slots, nkv, hd]`.
    pub k_pool: Region,
    /// V pool `[num_slots, nkv, hd]`.
    pub v_pool: Region,
    /// q_norm weight `[hd]`.
    pub q_norm: Region,
    /// k_norm weight `[hd]`.
    pub k_norm: Region,
    /// RoPE table f32 `[max_pos][hd/2][2]`.
    pub cos_sin: Region,
    /// The row's position, i32 `[1]`.
    pub pos: Region,
    /// The row's KV slot, i32 `[1]` (outside the pool: no KV write).
    pub slot: Region,
    /// Query heads.
    pub nh: usize,
    /// KV heads.
    pub nkv: usize,
    /// Head dimension.
    pub hd: usize,
    /// V is K's projection (`c` holds no V heads).
    pub k_eq_v: bool,
    /// Positions in the RoPE table.
    pub max_pos: usize,
    /// Slots in the KV pools.
    pub num_slots: usize,
}

impl QkvEpilogue {
    /// `(n, [seg1, seg2])` of the GEMV output these heads lay out.
    pub fn columns(&self) -> (usize, [usize; 2]) {
        let (q, kv) = (self.nh * self.hd, self.nkv * self.hd);
        (q + kv + if self.k_eq_v { 0 } else { kv }, [q, q + kv])
    }
}

impl Ops {
    /// See [`DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16`]: `c` receives the
    /// raw q|k|v (`e.columns()`), `k` is the hidden size.
    #[allow(clippy::too_many_arguments)]
    pub fn dense_gemv_layer_out_rmsnorm_qkv_prep_bf16(
        &self,
        row: &LayerOutRow,
        b: Region,
        c: Region,
        k: usize,
        norm_w: Region,
        eps: f32,
        e: &QkvEpilogue,
    ) -> Result<()> {
        let s = DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16.symbol;
        require(e.hd > 0 && e.hd % 8 == 0 && e.hd <= 512, s, "hd", || format!("hd = {} must be a multiple of 8 in 8..=512", e.hd))?;
        require(e.nh > 0 && e.nkv > 0, s, "nkv", || "nh and nkv must be > 0 (the layer owns its KV)".into())?;
        require(e.max_pos > 0 && e.num_slots > 0, s, "num_slots", || "max_pos and num_slots must be > 0".into())?;
        let (n, segs) = e.columns();
        let heads = n / e.hd;
        require(heads <= QKV_EPILOGUE_MAX_HEADS as usize, s, "nh", || format!("{heads} heads; at most {QKV_EPILOGUE_MAX_HEADS}"))?;
        let mut args = gemv_rmsnorm_operands(s, row.out, b, c, n, k, segs, norm_w, eps)?;
        for (name, r) in [("mid", Some(row.mid)), ("x", Some(row.x)), ("w_post", row.w_post), ("c", Some(c))] {
            let addr = r.map_or(0, |r| r.addr());
            require(addr.is_multiple_of(16), s, name, || format!("address {addr:#x} must be 16-byte aligned (vector loads)"))?;
        }
        for (name, r) in [("mid", row.mid), ("x", row.x)] {
            let (lo, hi) = (r.addr(), r.addr().saturating_add(2 * k as u64));
            let (alo, ahi) = (row.out.addr(), row.out.addr().saturating_add(2 * k as u64));
            require(hi <= alo || ahi <= lo, s, name, || "it overlaps `a` (every block reads it while block 0 writes `a`)".to_string())?;
        }
        let pool = bf16s(saturating_product(&[e.num_slots, e.nkv, e.hd]));
        args.extend([
            region(row.mid, bf16s(k)),
            region(row.x, bf16s(k)),
            crate::ops::optional(row.w_post, bf16s(k)),
            region(row.layer_scalar, words(1)),
            region(e.q_out, bf16s(e.nh * e.hd)),
            region(e.k_pool, pool),
            region(e.v_pool, pool),
            region(e.q_norm, bf16s(e.hd)),
            region(e.k_norm, bf16s(e.hd)),
            region(e.cos_sin, words(saturating_product(&[e.max_pos, e.hd]))),
            region(e.pos, words(1)),
            region(e.slot, words(1)),
            scalar(I(i32_arg(s, "nh", e.nh)?)),
            scalar(I(i32_arg(s, "nkv", e.nkv)?)),
            scalar(I(i32_arg(s, "hd", e.hd)?)),
            scalar(I(i32_arg(s, "max_pos", e.max_pos)?)),
            scalar(I(i32_arg(s, "num_slots", e.num_slots)?)),
        ]);
        self.launch(&DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16, &args)
    }
}

/// One parity shape: the GEMV's K, the heads, V = K, the position and slot
/// (bad position: NaN rows; negative slot: padding, no KV write), and
/// whether the layer output has a `w_post`.
struct Shape {
    k: usize,
    nh: usize,
    nkv: usize,
    hd: usize,
    k_eq_v: bool,
    bad_pos: bool,
    padding: bool,
    w_post: bool,
}

/// Gemma's shapes at hidden 2560 (bench-model's default): a sliding layer
/// (8 query heads, 4 KV heads of 256: the CUDA x2 form, WGSL's m = 1 path)
/// and a full layer (8 query heads, 2 KV heads of 512, V = K); a hidden of
/// 5376 (the CUDA slices form) as a padding row (slot -1: the pools keep
/// their bytes); hd 40, whose heads straddle the x2 form's 16-output
/// blocks, with V = K and no `w_post`; a bad position (NaN rows).
fn cases(g: &mut Gen) -> Vec<Case> {
    let shapes = [
        Shape { k: 2560, nh: 8, nkv: 4, hd: 256, k_eq_v: false, bad_pos: false, padding: false, w_post: true },
        Shape { k: 2560, nh: 8, nkv: 2, hd: 512, k_eq_v: true, bad_pos: false, padding: false, w_post: true },
        Shape { k: 5376, nh: 4, nkv: 2, hd: 128, k_eq_v: false, bad_pos: false, padding: true, w_post: true },
        Shape { k: 264, nh: 3, nkv: 1, hd: 40, k_eq_v: true, bad_pos: false, padding: false, w_post: false },
        Shape { k: 264, nh: 2, nkv: 1, hd: 64, k_eq_v: false, bad_pos: true, padding: false, w_post: true },
    ];
    shapes
        .into_iter()
        .map(|s| {
            let Shape { k, nh, nkv, hd, k_eq_v, bad_pos, padding, w_post } = s;
            let (max_pos, num_slots) = (40, 3);
            let n = (nh + if k_eq_v { nkv } else { 2 * nkv }) * hd;
            let (mid_v, mid) = g.bf16(k, 0.5, 40.0);
            let (x_v, x) = g.bf16(k, 0.01, 3.0);
            let (w_post_v, w_post_w) = g.bf16(k, 0.05, 2.0);
            let (ls_v, ls) = g.f32(1, 0.2, 1.5);
            let a_tolerance = layer_out_row_tolerance(&mid_v, &x_v, w_post.then_some(&w_post_v[..]), ls_v[0], k);
            let (_, b) = g.bf16(n * k, 0.01, 0.5);
            let (_, norm_w) = g.bf16(k, 0.05, 2.0);
            let (_, q_norm) = g.bf16(hd, 0.1, 2.0);
            let (_, k_norm) = g.bf16(hd, 0.1, 2.0);
            let pool_elems = num_slots * nkv * hd;
            let (_, k_pool) = g.bf16(pool_elems, 0.5, 1.0);
            let (_, v_pool) = g.bf16(pool_elems, 0.5, 1.0);
            let table = rope_table(max_pos, hd, 10000.0, hd / 4 + 1);
            let (mut pos, _) = g.i32(1, 1, max_pos as i32);
            if bad_pos {
                pos[0] = max_pos as i32 + 2;
            }
            let (mut slot, _) = g.i32(1, 0, num_slots as i32);
            if padding {
                slot[0] = -1;
            }
            // NaN rows compare by their bits; the rest as `c`.
            let derived = if bad_pos { Tolerance::Exact } else { Tolerance::Nmse(NORMED_NMSE) };
            let buffers = vec![
                Buffer::output("a", DType::BF16, k, a_tolerance),
                Buffer::input("b", b),
                Buffer::output("c", DType::BF16, n, Tolerance::Nmse(NORMED_NMSE)),
                Buffer::input("norm_w", norm_w),
                Buffer::input("mid", mid),
                Buffer::input("x", x),
                Buffer::input("w_post", w_post_w),
                Buffer::input("layer_scalar", ls),
                Buffer::output("q_out", DType::BF16, nh * hd, derived.clone()),
                Buffer::inout("k_pool", k_pool, DType::BF16, derived.clone()),
                Buffer::inout("v_pool", v_pool, DType::BF16, derived),
                Buffer::input("q_norm", q_norm),
                Buffer::input("k_norm", k_norm),
                Buffer::input("cos_sin", bytes::f32_bytes(&table)),
                Buffer::input("pos", bytes::i32_bytes(&pos)),
                Buffer::input("slot", bytes::i32_bytes(&slot)),
            ];
            let label = format!(
                "k={k} nh={nh} nkv={nkv} hd={hd}{}{}{}{}",
                if k_eq_v { " k_eq_v" } else { "" },
                if bad_pos { " bad_pos" } else { "" },
                if padding { " slot=-1" } else { "" },
                if w_post { "" } else { " w_post=null" }
            );
            Case {
                kernel: &DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16,
                label,
                buffers,
                run: Box::new(move |o, r| {
                    let row = LayerOutRow { out: r[0], mid: r[4], x: r[5], w_post: w_post.then_some(r[6]), layer_scalar: r[7] };
                    let e = QkvEpilogue {
                        q_out: r[8],
                        k_pool: r[9],
                        v_pool: r[10],
                        q_norm: r[11],
                        k_norm: r[12],
                        cos_sin: r[13],
                        pos: r[14],
                        slot: r[15],
                        nh,
                        nkv,
                        hd,
                        k_eq_v,
                        max_pos,
                        num_slots,
                    };
                    o.dense_gemv_layer_out_rmsnorm_qkv_prep_bf16(&row, r[1], r[2], k, r[3], 1e-6, &e)
                }),
            }
        })
        .collect()
}

inventory::submit! { CaseSet { kernel: &DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16, cases } }

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources;

    fn facts() -> DeviceFacts {
        DeviceFacts {
            multiprocessors: 132,
            max_shared_bytes: 227 * 1024,
            subgroup_size: 32,
            max_groups_per_dim: 65535,
            max_binding_bytes: u64::MAX,
            cuda_sm90a: false,
            cuda_clusters: false,
            wgsl_coopmat: false,
        }
    }

    fn args(n: u32, k: u32, seg1: u32, seg2: u32, [nh, nkv, hd]: [i32; 3]) -> Vec<switchyard_core::Arg> {
        let p = P(0x1000);
        vec![
            p,
            p,
            p,
            U(1),
            U(n),
            U(k),
            U(seg1),
            U(seg2),
            p,
            F(1e-6),
            p,
            p,
            P(0),
            p,
            p,
            p,
            p,
            p,
            p,
            p,
            p,
            p,
            I(nh),
            I(nkv),
            I(hd),
            I(40),
            I(3),
        ]
    }

    #[test]
    fn the_plans_take_the_layer_output_geometry_and_add_the_epilogue() {
        let cu = sources::cuda("gemv").expect("gemv.cu").text;
        assert!(cu.contains(&format!("#define QKV_EPI_MAX_HEADS {QKV_EPILOGUE_MAX_HEADS}\n")));
        // Gemma's sliding layer at hidden 2560: the x2 form, 256 blocks.
        let a = args(4096, 2560, 2048, 3072, [8, 4, 256]);
        let pa = PlanArgs::new(&DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16, &a);
        let c = cuda_plan(&pa, &facts()).unwrap();
        assert_eq!(
            (c.passes.len(), c.passes[0].entry, c.passes[0].grid),
            (1, "dense_gemv_layer_out_rmsnorm_qkv_prep_bf16_x2", [256, 1, 1])
        );
        // Hidden 5376: the slices form under the kernel's own entry.
        let a = args(1024, 5376, 512, 768, [4, 2, 128]);
        let c = cuda_plan(&PlanArgs::new(&DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16, &a), &facts()).unwrap();
        assert_eq!(c.passes[0].entry, "dense_gemv_layer_out_rmsnorm_qkv_prep_bf16");
        // WGSL: the layer output's passes (here its one m = 1 dispatch), then a
        // workgroup a head (V = K: 8 + 2 heads).
        let a = args(5120, 2560, 4096, 5120, [8, 2, 512]);
        let wf = DeviceFacts { multiprocessors: 0, max_shared_bytes: 16384, subgroup_size: 1, max_binding_bytes: 1 << 31, ..facts() };
        let w = wgsl_plan(&PlanArgs::new(&DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16, &a), &wf).unwrap();
        assert_eq!((w.passes.len(), w.passes[0].entry), (2, "dense_gemv_layer_out_rmsnorm_bf16_m1"));
        let last = w.passes.last().unwrap();
        assert_eq!((last.entry, last.grid), ("qkv_prep_epilogue", [10, 1, 1]));
        // Segments that are not the heads', or a head dimension the entries do not take.
        for (a, arg) in [
            (args(4096, 2560, 2048, 3000, [8, 4, 256]), "n"),
            (args(4000, 2560, 2048, 3072, [8, 4, 256]), "n"),
            (args(120, 264, 36, 48, [3, 1, 12]), "hd"),
            (args(4096, 2560, 2048, 3072, [8, 0, 256]), "n"),
        ] {
            match cuda_plan(&PlanArgs::new(&DENSE_GEMV_LAYER_OUT_RMSNORM_QKV_PREP_BF16, &a), &facts()) {
                Err(Error::InvalidArgument { arg: got, .. }) => assert_eq!(got, arg),
                other => panic!("{other:?}"),
            }
        }
    }
}
