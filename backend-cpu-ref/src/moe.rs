//! MoE routing bookkeeping, sequential by construction: pairs are visited in
//! increasing pair order, which is exactly the deterministic order the
//! contract fixes within each expert's segment.
use crate::ctx::Ctx;
use crate::embed::in_range;
use switchyard_core::{Error, Result};
use switchyard_kernels::moe::{MOE_COUNT, MOE_OFFSETS, MOE_SCATTER};

register!(MOE_COUNT => moe_count);
register!(MOE_OFFSETS => moe_offsets);
register!(MOE_SCATTER => moe_scatter);

fn moe_count(c: &mut Ctx<'_>) -> Result<()> {
    let (counts, topk_ids) = (c.buf("counts")?, c.buf("topk_ids")?);
    let (n, e) = (c.size("n")?, c.size("e")?);
    let ids = c.i32s(topk_ids, 0, n)?;
    // Accumulates onto what is there (the launcher zeroes it), as the GPU atomics do.
    let mut acc = c.i32s(counts, 0, e)?;
    for id in ids {
        if let Some(x) = in_range(id, e) {
            acc[x] = acc[x].wrapping_add(1);
        }
    }
    c.put_i32(counts, 0, &acc)
}

fn moe_offsets(c: &mut Ctx<'_>) -> Result<()> {
    let (offsets, cursor, counts) = (c.buf("offsets")?, c.buf("cursor")?, c.buf("counts")?);
    let e = c.size("e")?;
    let cnt = c.i32s(counts, 0, e)?;
    let mut off = Vec::with_capacity(e + 1);
    off.push(0i32);
    for (x, &k) in cnt.iter().enumerate() {
        // i32 arithmetic as on the device; wrapping keeps garbage counts from panicking.
        off.push(off[x].wrapping_add(k));
    }
    c.put_i32(offsets, 0, &off)?;
    c.put_i32(cursor, 0, &off[..e])
}

fn moe_scatter(c: &mut Ctx<'_>) -> Result<()> {
    let (pair_of_slot, slot_of_pair, cursor) = (c.buf("pair_of_slot")?, c.buf("slot_of_pair")?, c.buf("cursor")?);
    let (offsets, topk_ids) = (c.buf("offsets")?, c.buf("topk_ids")?);
    let (n, e) = (c.size("n")?, c.size("e")?);
    let off = c.i32s(offsets, 0, e + 1)?;
    let ids = c.i32s(topk_ids, 0, n)?;
    // Slots nobody claims (past the last valid pair, when offsets match the ids) stay -1.
    let mut pos = vec![-1i32; n];
    let mut sop = vec![-1i32; n];
    let mut seen = vec![0i64; e];
    for (p, &id) in ids.iter().enumerate() {
        let Some(x) = in_range(id, e) else { continue };
        let slot = off[x] as i64 + seen[x];
        seen[x] += 1;
        // Offsets that do not match the ids would make segments overlap or run past n:
        // refuse them rather than write an order that depends on the backend.
        if slot >= off[x + 1] as i64 || slot < 0 || slot >= n as i64 {
            return Err(Error::invalid(
                c.kernel(),
                "offsets",
                format!(
                    "pair {p} (expert {x}) gets slot {slot}, outside its segment [{}, {}) or the {n} slots: \
                     offsets are not the prefix sum of these ids' counts",
                    off[x],
                    off[x + 1]
                ),
            ));
        }
        pos[slot as usize] = p as i32;
        sop[p] = slot as i32;
    }
    c.put_i32(pair_of_slot, 0, &pos)?;
    c.put_i32(slot_of_pair, 0, &sop)?;
    c.put_i32(cursor, 0, &off[1..])
}
