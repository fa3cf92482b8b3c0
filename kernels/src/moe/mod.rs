//! MoE routing bookkeeping: from the router's top-k expert ids `[rows, k]`
//! (flattened to `n = rows·k` pairs) to expert-sorted slots.
//!
//! Deterministic by contract: within an expert's segment, pairs appear in
//! increasing pair order (DESIGN.md), so results reproduce bit for bit.
pub mod expert;

use crate::ops::{blocks, i32_arg, require, sat, words, Ops};
use crate::parity::{Buffer, Case, CaseSet, Gen};
use switchyard_core::codec::bytes;
use switchyard_core::compare::Tolerance;
use switchyard_core::{Arg::*, ArgSpec as A, DType, Result};

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

fn check(kernel: &str, n: usize, e: usize) -> Result<()> {
    require(n > 0, kernel, "n", || "n (rows·k) must be > 0".into())?;
    require(e > 0, kernel, "e", || "e (experts) must be > 0".into())
}

impl Ops {
    /// Zeroes `counts`, then counts pairs per expert. See [`MOE_COUNT`].
    pub fn moe_count(&self, counts: u64, topk_ids: u64, n: usize, e: usize) -> Result<()> {
        let k = MOE_COUNT.symbol;
        check(k, n, e)?;
        self.be.check_range(counts, words(e)).map_err(|d| switchyard_core::Error::oob(k, "counts", d))?;
        self.be.memset0(counts, words(e))?;
        self.go(
            &MOE_COUNT,
            [blocks(k, n, 256)?, 1, 1],
            [256, 1, 1],
            &[(P(counts), words(e)), (P(topk_ids), words(n)), (I(i32_arg(k, "n", n)?), 0), (I(i32_arg(k, "e", e)?), 0)],
        )
    }

    /// Exclusive prefix sum of the counts. See [`MOE_OFFSETS`].
    pub fn moe_offsets(&self, offsets: u64, cursor: u64, counts: u64, e: usize) -> Result<()> {
        let k = MOE_OFFSETS.symbol;
        check(k, 1, e)?;
        self.go(
            &MOE_OFFSETS,
            [1, 1, 1],
            [256, 1, 1],
            &[(P(offsets), words(e.saturating_add(1))), (P(cursor), words(e)), (P(counts), words(e)), (I(i32_arg(k, "e", e)?), 0)],
        )
    }

    /// Deterministic scatter into expert order. See [`MOE_SCATTER`].
    #[allow(clippy::too_many_arguments)]
    pub fn moe_scatter(
        &self,
        pair_of_slot: u64,
        slot_of_pair: u64,
        cursor: u64,
        offsets: u64,
        topk_ids: u64,
        n: usize,
        e: usize,
    ) -> Result<()> {
        let k = MOE_SCATTER.symbol;
        check(k, n, e)?;
        self.go(
            &MOE_SCATTER,
            [blocks(k, e, 1)?, 1, 1],
            [256, 1, 1],
            &[
                (P(pair_of_slot), words(n)),
                (P(slot_of_pair), words(n)),
                (P(cursor), words(e)),
                (P(offsets), words(e.saturating_add(1))),
                (P(topk_ids), words(n)),
                (I(i32_arg(k, "n", n)?), 0),
                (I(i32_arg(k, "e", e)?), 0),
            ],
        )
    }

    /// The whole routing: count, offsets, scatter. `cursor` is scratch `[e]`.
    #[allow(clippy::too_many_arguments)]
    pub fn moe_route(
        &self,
        counts: u64,
        offsets: u64,
        cursor: u64,
        pair_of_slot: u64,
        slot_of_pair: u64,
        topk_ids: u64,
        rows: usize,
        k: usize,
        e: usize,
    ) -> Result<()> {
        let n = sat(&[rows, k]);
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
            run: Box::new(move |o, a| o.moe_count(a[0].addr(), a[1].addr(), n, e)),
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
                run: Box::new(move |o, a| o.moe_offsets(a[0].addr(), a[1].addr(), a[2].addr(), e)),
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
                run: Box::new(move |o, a| o.moe_scatter(a[0].addr(), a[1].addr(), a[2].addr(), a[3].addr(), a[4].addr(), n, e)),
            }
        })
        .collect()
}

inventory::submit! { CaseSet { kernel: &MOE_COUNT, cases: count_cases } }
inventory::submit! { CaseSet { kernel: &MOE_OFFSETS, cases: offsets_cases } }
inventory::submit! { CaseSet { kernel: &MOE_SCATTER, cases: scatter_cases } }
