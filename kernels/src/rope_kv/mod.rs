//! Attention input preparation: q/k/v RMSNorm, rotate-half RoPE and the write
//! of K and V into the paged KV pool.
//!
//! The pool is `[num_slots, nkv, hd]` bf16 for K and for V; with pages of `P`
//! tokens a slot is `page · P + offset`, so the paged layout is the same
//! memory viewed as `[pages, P, nkv, hd]`. `slot[r]` is the slot row `r`
//! writes to.
use crate::ops::{bf16s, i32_arg, optional, region, require, require_eps, saturating_product, scalar, words, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use crate::plan::{env_override, groups, positive, CudaPlan, DeviceFacts, PlanArgs, WgslPlan};
use switchyard_core::codec::bytes;
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, Error, Region, Result};

declare_kernel! {
    /// For each row `r < rows` and head: source row `s = pmap[r]` (`pmap` null: `s = r`).
    /// `pmap` lets a launcher prepare a subset of rows (say the last token of
    /// each sequence) straight from the projection output, with no gather copy.
    ///
    /// Query head `h < nh`: `n = bf16(rmsnorm(q_raw[s, h]; q_norm))`, then
    /// rotate-half RoPE with `(cos, sin) = cos_sin[pos[r]][i]`:
    /// `q_out[r, h, i] = bf16(n[i]·cos − n[i+hd/2]·sin)`,
    /// `q_out[r, h, i+hd/2] = bf16(n[i+hd/2]·cos + n[i]·sin)` (f32 math).
    /// KV head `j = h − nh < nkv`: K the same with `k_norm` into
    /// `k_pool[slot[r], j]`; V is `bf16(rmsnorm(v_raw[s, j]))` without weight
    /// and without RoPE into `v_pool[slot[r], j]`. `v_raw` may equal `k_raw`
    /// (Gemma's `attention_k_eq_v`). `q_norm` / `k_norm` null: unscaled.
    ///
    /// Rows: `slot[r]` outside `[0, num_slots)` skips the KV write (negative
    /// slots are padding). `pos[r]` outside `[0, max_pos)` or `s` outside
    /// `[0, src_rows)` makes that row's q output bf16 NaN (0x7fc0), and its K
    /// and V rows NaN too when its slot is valid, so the bad row is loud.
    /// `nkv = 0`: queries only, and the KV pointers may be null.
    /// Shapes: q_raw `[src_rows, nh·hd]`, k_raw/v_raw `[src_rows, nkv·hd]`,
    /// q_out `[rows, nh·hd]`, cos_sin f32 `[max_pos][hd/2][2]`, pos/slot/pmap i32 `[rows]`; hd even, ≤ 512.
    QKV_PREP_BF16 = "rope_kv"::"qkv_prep_bf16"(
        A::output("q_out"), A::inout("k_pool").or_null(), A::inout("v_pool").or_null(),
        A::input("q_raw"), A::input("k_raw").or_null(), A::input("v_raw").or_null(),
        A::input("q_norm").or_null(), A::input("k_norm").or_null(), A::input("cos_sin"),
        A::input("pos"), A::input("slot").or_null(),
        A::i32("nh"), A::i32("nkv"), A::i32("hd"), A::f32("eps"), A::input("pmap").or_null(),
        A::i32("rows"), A::i32("src_rows"), A::i32("max_pos"), A::i32("num_slots"))
}

/// Tensors and sizes of one [`Ops::qkv_prep_bf16`] call.
#[derive(Clone, Copy, Debug)]
pub struct QkvPrep {
    /// Output queries `[rows, nh·hd]`.
    pub q_out: Region,
    /// K pool `[num_slots, nkv, hd]` (None when nkv = 0).
    pub k_pool: Option<Region>,
    /// V pool `[num_slots, nkv, hd]` (None when nkv = 0).
    pub v_pool: Option<Region>,
    /// Projected queries `[src_rows, nh·hd]`.
    pub q_raw: Region,
    /// Projected keys `[src_rows, nkv·hd]` (None when nkv = 0).
    pub k_raw: Option<Region>,
    /// Projected values (may equal `k_raw`; None when nkv = 0).
    pub v_raw: Option<Region>,
    /// q_norm weight `[hd]`, or None: unscaled.
    pub q_norm: Option<Region>,
    /// k_norm weight `[hd]`, or None: unscaled.
    pub k_norm: Option<Region>,
    /// RoPE table f32 `[max_pos][hd/2][2]`.
    pub cos_sin: Region,
    /// Positions i32 `[rows]`.
    pub pos: Region,
    /// KV slots i32 `[rows]` (None when nkv = 0).
    pub slot: Option<Region>,
    /// Source-row map i32 `[rows]`, or None: row `r` reads source row `r`.
    pub pmap: Option<Region>,
    /// Output rows.
    pub rows: usize,
    /// Rows of the raw projections.
    pub src_rows: usize,
    /// Query heads.
    pub nh: usize,
    /// KV heads (0: queries only).
    pub nkv: usize,
    /// Head dimension.
    pub hd: usize,
    /// Positions in the RoPE table.
    pub max_pos: usize,
    /// Slots in the KV pools.
    pub num_slots: usize,
    /// RMSNorm epsilon.
    pub eps: f32,
}

impl QkvPrep {
    /// A layer that owns its KV with both norms and no position map
    /// (`src_rows = rows`), from regions in the kernel's argument order:
    /// q_out, k_pool, v_pool, q_raw, k_raw, v_raw, q_norm, k_norm, cos_sin,
    /// pos, slot. `[rows, nh, nkv, hd]` as the fields.
    pub fn owning_kv(r: [Region; 11], [rows, nh, nkv, hd]: [usize; 4], max_pos: usize, num_slots: usize, eps: f32) -> Self {
        let [q_out, k_pool, v_pool, q_raw, k_raw, v_raw, q_norm, k_norm, cos_sin, pos, slot] = r;
        QkvPrep {
            q_out,
            k_pool: Some(k_pool),
            v_pool: Some(v_pool),
            q_raw,
            k_raw: Some(k_raw),
            v_raw: Some(v_raw),
            q_norm: Some(q_norm),
            k_norm: Some(k_norm),
            cos_sin,
            pos,
            slot: Some(slot),
            pmap: None,
            rows,
            src_rows: rows,
            nh,
            nkv,
            hd,
            max_pos,
            num_slots,
            eps,
        }
    }
}

/// Threads of a CUDA qkv_prep block (`QKV_THREADS` in rope_kv.cu).
pub const QKV_THREADS: u32 = 128;
/// Blocks of [`QKV_THREADS`] an SM keeps resident (`QKV_MIN_BLOCKS`, the
/// kernel's launch bound, so the compiler keeps the registers to it).
pub const QKV_MIN_BLOCKS: u32 = 5;
/// Head vectors a CUDA warp takes at once (rope_kv.cu's U at hd 256).
const QKV_VECTORS_PER_WARP: u64 = 8;

/// `(rows, nh + nkv)`: one block (workgroup) per row and head.
fn row_head_grid(a: &PlanArgs) -> Result<[u32; 3]> {
    let heads = a.u32("nh")?.checked_add(a.u32("nkv")?).filter(|&h| h > 0);
    let heads = heads.ok_or_else(|| Error::invalid(a.kernel.symbol, "nh", "nh + nkv must be in 1..2^32"))?;
    Ok([positive(a, "rows")?, heads, 1])
}

/// CUDA: warps over head vectors (rope_kv.cu): `rows · (nh + 2·nkv)`
/// vectors, one a warp when a wave holds them all (decode: 16 vectors at
/// batch 1 were 2 warps of 8 in turn, ~18 us under ncu), else in groups of
/// 8 (3 at hd 512) a warp, a persistent grid of
/// [`QKV_THREADS`]-thread blocks, at most [`QKV_MIN_BLOCKS`] an SM (one wave).
///
/// H200 numbers for the bench row (rows 4096, nh 32, nkv 16, hd 256): 64
/// vectors a row, 32,768 groups; grid 660 blocks = 2640 warps, 12.4 groups
/// a warp; 20 warps an SM with 8 x 512 bytes each in flight = 80 KiB an SM.
/// The old grid [rows, nh + nkv] (196,608 blocks of one warp) was bound by
/// the block scheduler, not memory.
fn cuda_qkv_prep(a: &PlanArgs, f: &DeviceFacts) -> Result<CudaPlan> {
    let [rows, _, _] = row_head_grid(a)?;
    let vectors = a.u32("nh")? as u64 + 2 * a.u32("nkv")? as u64;
    let warps_per_block = (QKV_THREADS / 32) as u64;
    let resident = match f.multiprocessors {
        0 => u64::MAX,
        sms => sms as u64 * QKV_MIN_BLOCKS as u64,
    };
    // No more vectors than one wave has warps (decode): a warp per vector,
    // which the kernel infers from the grid. Else groups of
    // QKV_VECTORS_PER_WARP a warp, so each warp keeps that many loads in flight.
    let all = rows as u64 * vectors;
    let one_each = all.div_ceil(warps_per_block);
    let groups = rows as u64 * vectors.div_ceil(QKV_VECTORS_PER_WARP);
    let needed = if one_each <= resident { one_each } else { groups.div_ceil(warps_per_block) };
    let grid = needed.min(resident);
    let grid = u32::try_from(grid.max(1))
        .map_err(|_| Error::invalid(a.kernel.symbol, "rows", format!("{groups} vector groups need more than 2^32 blocks")))?;
    Ok(CudaPlan::single(a.kernel, [grid, 1, 1], [QKV_THREADS, 1, 1]))
}

/// Threads of a WGSL `qkv_prep_bf16_vec` workgroup.
const WGSL_QKV_THREADS: u64 = 256;

/// WGSL: at hd % 16 == 0, `qkv_prep_bf16_vec` over the launch's
/// `rows · (nh + 2·nkv)` head vectors, hd / 16 lanes a vector (two 16-byte
/// loads of its data each) rounded up to a power of two (the reduction's
/// run), 256 / run vectors a workgroup: 16 at hd 256, so the bench row
/// (4096 · 64 vectors) runs as 16,384 workgroups of 256. Other hd:
/// [`row_head_grid`], workgroups of 128 (`qkv_prep_bf16`).
///
/// `SWITCHYARD_WGSL_QKV_VPL=2` (read once a process) gives each lane two
/// head vectors (the shader's `VPL`), both loaded before either's
/// reduction, in half the workgroups: the candidate the eighth session's
/// H200 call named (more independent vectors in flight a lane, as named
/// registers, where arrays indexed in loops had lost); on the H200 it read
/// at 54-57% of the copy ceiling against 62% for one vector a lane
/// (thirteenth session), so it is not the default.
fn wgsl_qkv_prep(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    static VPL: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let vpl = env_override(&VPL, "SWITCHYARD_WGSL_QKV_VPL", |v| [1, 2].contains(&v)).unwrap_or(1);
    wgsl_qkv_prep_plan(a, vpl)
}

/// [`wgsl_qkv_prep`] with `vpl` head vectors a lane.
fn wgsl_qkv_prep_plan(a: &PlanArgs, vpl: u32) -> Result<WgslPlan> {
    let [rows, _, _] = row_head_grid(a)?;
    let hd = a.u32("hd")? as u64;
    if hd % 16 != 0 || hd > 16 * WGSL_QKV_THREADS {
        return Ok(WgslPlan::single(a.kernel, row_head_grid(a)?));
    }
    let run = (hd / 16).next_power_of_two();
    let vectors = rows as u64 * (a.u32("nh")? as u64 + 2 * a.u32("nkv")? as u64);
    let mut plan = WgslPlan::single(a.kernel, [groups(a.kernel, vectors, WGSL_QKV_THREADS / run * vpl as u64)?, 1, 1]);
    plan.passes[0].entry = "qkv_prep_bf16_vec";
    plan.passes[0].consts = vec![("VPL", vpl)];
    Ok(plan)
}

cuda_plan!(QKV_PREP_BF16 => cuda_qkv_prep);
wgsl_plan!(QKV_PREP_BF16, "rope_kv/qkv_prep_bf16.wgsl" => wgsl_qkv_prep);

impl Ops {
    /// See [`QKV_PREP_BF16`].
    pub fn qkv_prep_bf16(&self, p: &QkvPrep) -> Result<()> {
        let k = QKV_PREP_BF16.symbol;
        require(p.rows > 0 && p.src_rows > 0, k, "rows", || "rows and src_rows must be > 0".into())?;
        require(p.pmap.is_some() || p.src_rows >= p.rows, k, "src_rows", || {
            format!("src_rows = {} < rows = {} with no pmap", p.src_rows, p.rows)
        })?;
        require(p.nh > 0, k, "nh", || "nh must be > 0".into())?;
        require(p.hd > 0 && p.hd % 2 == 0 && p.hd <= 512, k, "hd", || format!("hd = {} must be even and in 2..=512", p.hd))?;
        require(p.max_pos > 0, k, "max_pos", || "max_pos must be > 0".into())?;
        require_eps(k, p.eps)?;
        if p.nkv > 0 {
            for (name, r) in [("k_pool", p.k_pool), ("v_pool", p.v_pool), ("k_raw", p.k_raw), ("v_raw", p.v_raw), ("slot", p.slot)] {
                require(r.is_some(), k, name, || "null while nkv > 0".into())?;
            }
            require(p.num_slots > 0, k, "num_slots", || "num_slots must be > 0 when nkv > 0".into())?;
        }
        // With nkv = 0 the kernel touches none of the KV buffers, whatever was passed.
        let kv = |bytes: usize| if p.nkv > 0 { bytes } else { 0 };
        let kv_raw = kv(bf16s(saturating_product(&[p.src_rows, p.nkv, p.hd])));
        let pool = kv(bf16s(saturating_product(&[p.num_slots, p.nkv, p.hd])));
        self.launch(
            &QKV_PREP_BF16,
            &[
                region(p.q_out, bf16s(saturating_product(&[p.rows, p.nh, p.hd]))),
                optional(p.k_pool, pool),
                optional(p.v_pool, pool),
                region(p.q_raw, bf16s(saturating_product(&[p.src_rows, p.nh, p.hd]))),
                optional(p.k_raw, kv_raw),
                optional(p.v_raw, kv_raw),
                optional(p.q_norm, bf16s(p.hd)),
                optional(p.k_norm, bf16s(p.hd)),
                region(p.cos_sin, words(saturating_product(&[p.max_pos, p.hd]))),
                region(p.pos, words(p.rows)),
                optional(p.slot, kv(words(p.rows))),
                scalar(I(i32_arg(k, "nh", p.nh)?)),
                scalar(I(i32_arg(k, "nkv", p.nkv)?)),
                scalar(I(i32_arg(k, "hd", p.hd)?)),
                scalar(F(p.eps)),
                optional(p.pmap, words(p.rows)),
                scalar(I(i32_arg(k, "rows", p.rows)?)),
                scalar(I(i32_arg(k, "src_rows", p.src_rows)?)),
                scalar(I(i32_arg(k, "max_pos", p.max_pos)?)),
                scalar(I(i32_arg(k, "num_slots", p.num_slots)?)),
            ],
        )
    }
}

/// A RoPE table `[max_pos][hd/2][2]` for `theta`, with only the first
/// `rotated` frequency pairs non-trivial (the rest cos = 1, sin = 0: Gemma's
/// "proportional" RoPE with `partial_rotary_factor`).
pub fn rope_table(max_pos: usize, hd: usize, theta: f64, rotated: usize) -> Vec<f32> {
    let half = hd / 2;
    let mut t = Vec::with_capacity(max_pos * hd);
    for p in 0..max_pos {
        for i in 0..half {
            if i < rotated {
                let inv_freq = theta.powf(-(2.0 * i as f64) / hd as f64);
                let a = p as f64 * inv_freq;
                t.extend([a.cos() as f32, a.sin() as f32]);
            } else {
                t.extend([1.0, 0.0]);
            }
        }
    }
    t
}

struct Shape {
    rows: usize,
    nh: usize,
    nkv: usize,
    hd: usize,
    k_eq_v: bool,
    pmap: bool,
    norms: bool,
}

/// q and K are RoPE applied to a rounded norm output, so a 1-ulp difference
/// in the norm (GPU tree reduction vs the reference's index order) becomes up
/// to 2 ulp after the rotation: a finding, as the parity rules ask to record. V is a
/// direct norm output but shares the pool buffers' tolerance.
const DERIVED: Tolerance = Tolerance::Bf16Ulp(2);

fn cases(g: &mut Gen) -> Vec<Case> {
    let shapes = [
        Shape { rows: 1, nh: 2, nkv: 1, hd: 64, k_eq_v: false, pmap: false, norms: true },
        Shape { rows: 5, nh: 4, nkv: 2, hd: 42, k_eq_v: true, pmap: false, norms: true },
        Shape { rows: 3, nh: 3, nkv: 0, hd: 128, k_eq_v: false, pmap: false, norms: true },
        Shape { rows: 6, nh: 2, nkv: 2, hd: 256, k_eq_v: false, pmap: true, norms: false },
        Shape { rows: 4, nh: 8, nkv: 1, hd: 512, k_eq_v: true, pmap: false, norms: true },
        // hd / 16 = 3 lanes a vector: the WGSL vector entry's run of 4 with an idle lane.
        Shape { rows: 3, nh: 3, nkv: 1, hd: 48, k_eq_v: false, pmap: false, norms: true },
        // 6000 groups of vectors: over two per warp of an H200's persistent grid (2640 warps).
        Shape { rows: 3000, nh: 8, nkv: 2, hd: 256, k_eq_v: false, pmap: true, norms: true },
    ];
    shapes
        .into_iter()
        .map(|s| {
            let (rows, nh, nkv, hd) = (s.rows, s.nh, s.nkv, s.hd);
            let src_rows = if s.pmap { rows + 3 } else { rows };
            let max_pos = 40;
            let num_slots = rows * 2 + 5;
            let (_, q_raw) = g.bf16(src_rows * nh * hd, 0.01, 3.0);
            let (_, k_raw) = g.bf16(src_rows * nkv.max(1) * hd, 0.01, 3.0);
            let (_, v_raw) = g.bf16(src_rows * nkv.max(1) * hd, 0.01, 3.0);
            let (_, q_norm) = g.bf16(hd, 0.1, 2.0);
            let (_, k_norm) = g.bf16(hd, 0.1, 2.0);
            let table = rope_table(max_pos, hd, 10000.0, hd / 4 + 1);
            let (mut pos, _) = g.i32(rows, 0, max_pos as i32);
            // Distinct slots; the last row is padding (slot -1) when there are several rows.
            let mut slots: Vec<i32> = (0..num_slots as i32).collect();
            for i in (1..slots.len()).rev() {
                let j = rand::Rng::random_range(&mut g.rng, 0..=i);
                slots.swap(i, j);
            }
            slots.truncate(rows);
            if rows >= 1000 {
                // The wide case exercises the CUDA grid's loop over vector groups, not RoPE
                // (the small cases do): position 0 rotates by nothing. Rotation outputs
                // cancel (a·cos − b·sin ≈ 0), where the norm's 1-ulp freedom (sum order)
                // is many ulps of the result; over millions of elements some always do
                // (seen on lavapipe: 14 ulp at rows 3000).
                pos.fill(0);
            }
            if rows > 2 {
                slots[rows - 1] = -1;
                pos[1] = max_pos as i32 + 2; // out of the table: the NaN-row contract
            }
            let (pmap, _) = g.i32(rows, 0, src_rows as i32);
            let (_, k_pool) = g.bf16(num_slots * nkv.max(1) * hd, 0.5, 1.0);
            let (_, v_pool) = g.bf16(num_slots * nkv.max(1) * hd, 0.5, 1.0);
            let pool_check = |name, data| {
                if nkv > 0 {
                    Buffer::inout(name, data, DType::BF16, DERIVED)
                } else {
                    Buffer::input(name, data)
                }
            };
            let buffers = vec![
                Buffer::output("q_out", DType::BF16, rows * nh * hd, DERIVED),
                pool_check("k_pool", k_pool),
                pool_check("v_pool", v_pool),
                Buffer::input("q_raw", q_raw),
                Buffer::input("k_raw", k_raw),
                Buffer::input("v_raw", v_raw),
                Buffer::input("q_norm", q_norm),
                Buffer::input("k_norm", k_norm),
                Buffer::input("cos_sin", bytes::f32_bytes(&table)),
                Buffer::input("pos", bytes::i32_bytes(&pos)),
                Buffer::input("slot", bytes::i32_bytes(&slots)),
                Buffer::input("pmap", bytes::i32_bytes(&pmap)),
            ];
            let label = format!(
                "rows={rows} nh={nh} nkv={nkv} hd={hd}{}{}{}",
                if s.k_eq_v { " k_eq_v" } else { "" },
                if s.pmap { " pmap" } else { "" },
                if s.norms { "" } else { " norms=null" }
            );
            let (k_eq_v, use_pmap, norms) = (s.k_eq_v, s.pmap, s.norms);
            Case {
                kernel: &QKV_PREP_BF16,
                label,
                buffers,
                run: Box::new(move |o, a| {
                    let kv = |r: Region| (nkv > 0).then_some(r);
                    o.qkv_prep_bf16(&QkvPrep {
                        q_out: a[0],
                        k_pool: kv(a[1]),
                        v_pool: kv(a[2]),
                        q_raw: a[3],
                        k_raw: kv(a[4]),
                        v_raw: kv(if k_eq_v { a[4] } else { a[5] }),
                        q_norm: norms.then_some(a[6]),
                        k_norm: norms.then_some(a[7]),
                        cos_sin: a[8],
                        pos: a[9],
                        slot: kv(a[10]),
                        pmap: use_pmap.then_some(a[11]),
                        rows,
                        src_rows,
                        nh,
                        nkv,
                        hd,
                        max_pos,
                        num_slots,
                        eps: 1e-6,
                    })
                }),
            }
        })
        .collect()
}

inventory::submit! { CaseSet { kernel: &QKV_PREP_BF16, cases } }

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources;

    #[test]
    fn the_cuda_plan_matches_the_kernel_bounds() {
        let cu = sources::cuda("rope_kv").expect("rope_kv.cu").text;
        assert!(cu.contains(&format!("#define QKV_THREADS {QKV_THREADS}\n")));
        assert!(cu.contains(&format!("#define QKV_MIN_BLOCKS {QKV_MIN_BLOCKS}\n")));
        let facts = DeviceFacts {
            multiprocessors: 132,
            max_shared_bytes: 232_448,
            subgroup_size: 32,
            max_groups_per_dim: 65535,
            max_binding_bytes: u64::MAX,
            cuda_sm90a: false,
            cuda_clusters: false,
            wgsl_coopmat: false,
        };
        let args = |rows: i32, nh: i32, nkv: i32| -> Vec<switchyard_core::Arg> {
            QKV_PREP_BF16
                .args
                .iter()
                .map(|spec| match (spec.kind, spec.name) {
                    (switchyard_core::ArgKind::Ptr, _) => P(0x1000),
                    (switchyard_core::ArgKind::F32, _) => F(1e-6),
                    (_, "rows") => I(rows),
                    (_, "nh") => I(nh),
                    (_, "nkv") => I(nkv),
                    _ => I(256),
                })
                .collect()
        };
        // The bench row: 32,768 groups, capped at one wave of 5 blocks on 132 SMs.
        let a = args(4096, 32, 16);
        let p = cuda_qkv_prep(&PlanArgs::new(&QKV_PREP_BF16, &a), &facts).unwrap();
        assert_eq!((p.passes[0].grid, p.passes[0].block), ([660, 1, 1], [128, 1, 1]));
        // Launches that fit in one wave get a warp per vector (4 a block):
        // 9 vectors, then Gemma's decode step at batch 1 and 16 (16 vectors a row).
        for (rows, nh, nkv, blocks) in [(3, 3, 0, 3), (1, 8, 4, 4), (16, 8, 4, 64)] {
            let a = args(rows, nh, nkv);
            assert_eq!(cuda_qkv_prep(&PlanArgs::new(&QKV_PREP_BF16, &a), &facts).unwrap().passes[0].grid, [blocks, 1, 1]);
        }
        let a = args(0, 3, 0);
        assert!(cuda_qkv_prep(&PlanArgs::new(&QKV_PREP_BF16, &a), &facts).is_err());
        // WGSL, the bench row at hd 256: 16 vectors a workgroup, or 32 at two a lane.
        let a = args(4096, 32, 16);
        for (vpl, groups) in [(1, 16_384), (2, 8192)] {
            let p = wgsl_qkv_prep_plan(&PlanArgs::new(&QKV_PREP_BF16, &a), vpl).unwrap();
            assert_eq!(
                (p.passes[0].entry, p.passes[0].grid, p.passes[0].consts.clone()),
                ("qkv_prep_bf16_vec", [groups, 1, 1], vec![("VPL", vpl)])
            );
        }
    }
}
