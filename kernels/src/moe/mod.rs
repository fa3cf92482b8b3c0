//! MoE routing bookkeeping: from the router's top-k expert ids `[rows, k]`
//! (flattened to `n = rows·k` pairs) to expert-sorted slots.
//!
//! Deterministic by contract: within an expert's segment, pairs appear in
//! increasing pair order (a contract, ARCHITECTURE.md), so results reproduce bit for bit.
pub mod expert;
pub mod rows;

use crate::ops::{i32_arg, region, require, saturating_product, scalar, words, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use crate::plan::{groups, CudaPlan, DeviceFacts, PlanArgs, WgslPlan};
use switchyard_core::codec::bytes;
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, Error, Region, Result};

declare_kernel! {
    /// `counts[x] += |{p : topk_ids[p] == x}|` for x in `[0, e)`; ids outside
    /// `[0, e)` are not counted. `counts` i32 `[e]` must be zero before the
    /// launch ([`Ops::moe_count`] zeroes it).
    MOE_COUNT = "moe"::"moe_count"(A::inout("counts"), A::input("topk_ids"), A::i32("n"), A::i32("e"))
}

declare_kernel! {
    /// `offsets[0] = 0`, `offsets[x+1] = offsets[x] + counts[x]` (i32 `[e+1]`),
    /// and `cursor[x] = offsets[x]` (i32 `[e]`).
    MOE_OFFSETS = "moe"::"moe_offsets"(A::output("offsets"), A::output("cursor"), A::input("counts"), A::i32("e"))
}

declare_kernel! {
    /// For each pair `p` with expert `x = topk_ids[p]` in `[0, e)`:
    /// `slot = offsets[x] + |{q < p : topk_ids[q] == x}|`,
    /// `pair_of_slot[slot] = p`, `slot_of_pair[p] = slot`. Pairs with an id
    /// outside `[0, e)` get `slot_of_pair[p] = -1`, and the slots past the last
    /// valid one (`[offsets[e], n)`) get `pair_of_slot = -1`. Afterwards
    /// `cursor[x] = offsets[x+1]`. `offsets` must be the exclusive prefix sum of
    /// the per-expert counts of these ids, as [`MOE_OFFSETS`] produces; the CPU
    /// reference rejects inconsistent offsets, GPUs cannot check them.
    /// Shapes: pair_of_slot, slot_of_pair, topk_ids i32 `[n]`.
    MOE_SCATTER = "moe"::"moe_scatter"(
        A::output("pair_of_slot"), A::output("slot_of_pair"), A::inout("cursor"), A::input("offsets"),
        A::input("topk_ids"), A::i32("n"), A::i32("e"))
}

/// Pairs per [`MOE_COUNT`] block (CUDA) and workgroup (WGSL): the block
/// histogram in moe.cu and the `256u` stride in moe_count.wgsl.
const COUNT_PAIRS_PER_GROUP: u64 = 256;

/// A 256-pair chunk per block: each block folds its chunk into a shared
/// histogram before touching global counts.
fn cuda_moe_count(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    Ok(CudaPlan::single(a.kernel, [groups(a.kernel, a.u32("n")? as u64, COUNT_PAIRS_PER_GROUP)?, 1, 1], [256, 1, 1]))
}

fn wgsl_moe_count(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    Ok(WgslPlan::single(a.kernel, [groups(a.kernel, a.u32("n")? as u64, COUNT_PAIRS_PER_GROUP)?, 1, 1]))
}

/// One block: the scan walks the experts in block-sized chunks with a
/// running carry, so a second block would have nothing to do.
fn cuda_moe_offsets(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    Ok(CudaPlan::single(a.kernel, [1, 1, 1], [256, 1, 1]))
}

fn wgsl_moe_offsets(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    Ok(WgslPlan::single(a.kernel, [1, 1, 1]))
}

/// One block per expert: each walks all pairs in order, which is what makes
/// the slot order deterministic.
fn cuda_moe_scatter(a: &PlanArgs, _: &DeviceFacts) -> Result<CudaPlan> {
    Ok(CudaPlan::single(a.kernel, [a.u32("e")?, 1, 1], [256, 1, 1]))
}

fn wgsl_moe_scatter(a: &PlanArgs, _: &DeviceFacts) -> Result<WgslPlan> {
    Ok(WgslPlan::single(a.kernel, [a.u32("e")?, 1, 1]))
}

cuda_plan!(MOE_COUNT => cuda_moe_count);
cuda_plan!(MOE_OFFSETS => cuda_moe_offsets);
cuda_plan!(MOE_SCATTER => cuda_moe_scatter);
wgsl_plan!(MOE_COUNT, "moe/moe_count.wgsl" => wgsl_moe_count);
wgsl_plan!(MOE_OFFSETS, "moe/moe_offsets.wgsl" => wgsl_moe_offsets);
wgsl_plan!(MOE_SCATTER, "moe/moe_scatter.wgsl" => wgsl_moe_scatter);

fn check(kernel: &str, n: usize, e: usize) -> Result<()> {
    require(n > 0, kernel, "n", || "n (rows·k) must be > 0".into())?;
    require(e > 0, kernel, "e", || "e (experts) must be > 0".into())
}

impl Ops {
    /// Zeroes `counts`, then counts pairs per expert. See [`MOE_COUNT`].
    pub fn moe_count(&self, counts: Region, topk_ids: Region, n: usize, e: usize) -> Result<()> {
        let k = MOE_COUNT.symbol;
        check(k, n, e)?;
        let (n_arg, e_arg) = (i32_arg(k, "n", n)?, i32_arg(k, "e", e)?);
        // The zeroing is a write the launch's range check would only see
        // afterwards: a refused launch must leave `counts` as it was.
        let zeroed = words(e);
        if zeroed > counts.len() {
            return Err(Error::oob(k, "counts", format!("the launcher zeroes {zeroed} bytes; the region holds {}", counts.len())));
        }
        self.be.check_range(counts.addr(), zeroed).map_err(|d| Error::oob(k, "counts", d))?;
        self.be.memset0(counts.addr(), zeroed)?;
        self.launch(&MOE_COUNT, &[region(counts, zeroed), region(topk_ids, words(n)), scalar(I(n_arg)), scalar(I(e_arg))])
    }

    /// Exclusive prefix sum of the counts. See [`MOE_OFFSETS`].
    pub fn moe_offsets(&self, offsets: Region, cursor: Region, counts: Region, e: usize) -> Result<()> {
        let k = MOE_OFFSETS.symbol;
        check(k, 1, e)?;
        self.launch(
            &MOE_OFFSETS,
            &[
                region(offsets, words(e.saturating_add(1))),
                region(cursor, words(e)),
                region(counts, words(e)),
                scalar(I(i32_arg(k, "e", e)?)),
            ],
        )
    }

    /// Deterministic scatter into expert order. See [`MOE_SCATTER`].
    #[allow(clippy::too_many_arguments)]
    pub fn moe_scatter(
        &self,
        pair_of_slot: Region,
        slot_of_pair: Region,
        cursor: Region,
        offsets: Region,
        topk_ids: Region,
        n: usize,
        e: usize,
    ) -> Result<()> {
        let k = MOE_SCATTER.symbol;
        check(k, n, e)?;
        self.launch(
            &MOE_SCATTER,
            &[
                region(pair_of_slot, words(n)),
                region(slot_of_pair, words(n)),
                region(cursor, words(e)),
                region(offsets, words(e.saturating_add(1))),
                region(topk_ids, words(n)),
                scalar(I(i32_arg(k, "n", n)?)),
                scalar(I(i32_arg(k, "e", e)?)),
            ],
        )
    }

    /// The whole routing: count, offsets, scatter. `cursor` i32 `[e]` is the
    /// running slot per expert that [`MOE_OFFSETS`] starts and
    /// [`MOE_SCATTER`] advances (both declare it).
    #[allow(clippy::too_many_arguments)]
    pub fn moe_route(
        &self,
        counts: Region,
        offsets: Region,
        cursor: Region,
        pair_of_slot: Region,
        slot_of_pair: Region,
        topk_ids: Region,
        rows: usize,
        k: usize,
        e: usize,
    ) -> Result<()> {
        let n = saturating_product(&[rows, k]);
        self.moe_count(counts, topk_ids, n, e)?;
        self.moe_offsets(offsets, cursor, counts, e)?;
        self.moe_scatter(pair_of_slot, slot_of_pair, cursor, offsets, topk_ids, n, e)
    }
}

/// Shapes: (pairs, experts). Includes one pair, more experts than pairs, and
/// a prefill-sized batch that spans several 256-pair chunks.
const SHAPES: [(usize, usize); 4] = [(1, 4), (24, 128), (600, 8), (4096, 64)];

fn ids(g: &mut Gen, n: usize, e: usize) -> Vec<i32> {
    let (mut ids, _) = g.i32(n, 0, e as i32);
    if n > 3 {
        ids[2] = -1; // invalid ids are part of the contract
        ids[n - 1] = e as i32;
    }
    ids
}

fn exclusive_offsets(ids: &[i32], e: usize) -> Vec<i32> {
    let mut off = vec![0i32; e + 1];
    for &x in ids {
        if x >= 0 && (x as usize) < e {
            off[x as usize + 1] += 1;
        }
    }
    for i in 0..e {
        off[i + 1] += off[i];
    }
    off
}

fn count_cases(g: &mut Gen) -> Vec<Case> {
    SHAPES
        .iter()
        .map(|&(n, e)| Case {
            kernel: &MOE_COUNT,
            label: format!("n={n} e={e}"),
            buffers: vec![
                Buffer::output("counts", DType::I32, e, Tolerance::Exact),
                Buffer::input("topk_ids", bytes::i32_bytes(&ids(g, n, e))),
            ],
            run: Box::new(move |o, a| o.moe_count(a[0], a[1], n, e)),
        })
        .collect()
}

fn offsets_cases(g: &mut Gen) -> Vec<Case> {
    [1usize, 7, 128, 300]
        .into_iter()
        .map(|e| {
            let (_, cb) = g.i32(e, 0, 50);
            Case {
                kernel: &MOE_OFFSETS,
                label: format!("e={e}"),
                buffers: vec![
                    Buffer::output("offsets", DType::I32, e + 1, Tolerance::Exact),
                    Buffer::output("cursor", DType::I32, e, Tolerance::Exact),
                    Buffer::input("counts", cb),
                ],
                run: Box::new(move |o, a| o.moe_offsets(a[0], a[1], a[2], e)),
            }
        })
        .collect()
}

fn scatter_cases(g: &mut Gen) -> Vec<Case> {
    SHAPES
        .iter()
        .map(|&(n, e)| {
            let ids = ids(g, n, e);
            let off = exclusive_offsets(&ids, e);
            Case {
                kernel: &MOE_SCATTER,
                label: format!("n={n} e={e}"),
                buffers: vec![
                    Buffer::output("pair_of_slot", DType::I32, n, Tolerance::Exact),
                    Buffer::output("slot_of_pair", DType::I32, n, Tolerance::Exact),
                    Buffer::inout("cursor", bytes::i32_bytes(&off[..e]), DType::I32, Tolerance::Exact),
                    Buffer::input("offsets", bytes::i32_bytes(&off)),
                    Buffer::input("topk_ids", bytes::i32_bytes(&ids)),
                ],
                run: Box::new(move |o, a| o.moe_scatter(a[0], a[1], a[2], a[3], a[4], n, e)),
            }
        })
        .collect()
}

inventory::submit! { CaseSet { kernel: &MOE_COUNT, cases: count_cases } }
inventory::submit! { CaseSet { kernel: &MOE_OFFSETS, cases: offsets_cases } }
inventory::submit! { CaseSet { kernel: &MOE_SCATTER, cases: scatter_cases } }
