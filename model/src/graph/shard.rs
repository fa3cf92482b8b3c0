//! The collectives of a tensor-parallel pass (ARCHITECTURE.md, "Tensor
//! parallelism"): the sums of partial outputs (embedding, attention output,
//! MLP and experts) and the distributed argmax of the vocabulary-split LM
//! head. On a model without a group each is a no-op (or the plain read).
use super::{RowOut, Session};
use crate::error::{Error, Result};
use switchyard_core::codec::bytes;
use switchyard_core::{DType, Region};
use switchyard_kernels::head::MAX_HEAD_ROWS;

impl Session<'_> {
    /// Sums the `elems` bf16 values at the start of `r` over the ranks, in
    /// place; nothing without a group of more than one rank.
    pub(super) fn all_reduce(&self, r: Region, elems: usize) -> Result<()> {
        match &self.model.tp {
            Some(tp) if tp.plan.world > 1 => Ok(tp.comm.all_reduce_sum(r, DType::BF16, elems)?),
            _ => Ok(()),
        }
    }

    /// Every rank's head output (its argmax index and value per row, over
    /// its vocabulary rows) into `head_all`, in rank order.
    pub(super) fn gather_head(&self) -> Result<()> {
        match (&self.model.tp, &self.s.head_all) {
            (Some(tp), Some(all)) => Ok(tp.comm.all_gather(self.s.head_out.region(), all.region())?),
            _ => Ok(()),
        }
    }

    /// [`Session::read_head`] on a tensor-parallel rank: per row, the
    /// largest of the ranks' maxima, the lowest rank on ties. Each rank's
    /// index is the lowest of its maxima and rank `r` holds lower ids than
    /// rank `r + 1`, so this is the lowest global id on ties: the
    /// single-rank argmax contract. Every rank reads the same gathered
    /// bytes, so every rank picks the same token. With `want_logits`, the
    /// ranks' logits are gathered and each row is put back together.
    pub(super) fn read_head_sharded(&mut self, count: usize, want_logits: bool) -> Result<Vec<RowOut>> {
        let tp = self.model.tp.as_ref().expect("a tensor-parallel session");
        let (world, v_local) = (tp.plan.world, tp.local.vocab_size);
        let all = self.s.head_all.as_ref().expect("a group's scratch has head_all");
        let mut raw = vec![0u8; all.len()];
        self.model.ops.be.download(all.addr(), &mut raw)?;
        let words = bytes::i32_from_bytes(&raw);
        let logits = if want_logits {
            let gathered = self.s.logits_all.as_ref().expect("a group's scratch has logits_all");
            let send = self.s.logits.region().slice(0, count * v_local * 4)?;
            tp.comm.all_gather(send, gathered.region())?;
            let mut l = vec![0u8; world * count * v_local * 4];
            self.model.ops.be.download(gathered.addr(), &mut l)?;
            Some(bytes::f32_from_bytes(&l))
        } else {
            None
        };
        (0..count)
            .map(|row| {
                let mut best: Option<(f32, usize)> = None;
                for r in 0..world {
                    let base = r * 2 * MAX_HEAD_ROWS;
                    let Ok(local) = usize::try_from(words[base + row]) else { continue };
                    let value = f32::from_bits(words[base + MAX_HEAD_ROWS + row] as u32);
                    if best.is_none_or(|(b, _)| value > b) {
                        best = Some((value, r * v_local + local));
                    }
                }
                let (_, token) = best.ok_or_else(|| Error::Numeric(format!("row {row}: every logit is NaN (no argmax)")))?;
                let logits = logits
                    .as_ref()
                    .map(|l| (0..world).flat_map(|r| &l[(r * count + row) * v_local..(r * count + row + 1) * v_local]).copied().collect());
                Ok(RowOut { token: token as u32, logits })
            })
            .collect()
    }
}
