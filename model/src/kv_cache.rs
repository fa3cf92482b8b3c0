//! The paged KV cache: per layer a K pool and a V pool of `num_pages · PAGE`
//! token slots (`[slots, nkv, hd]` bf16), and one block table shared by all
//! layers mapping each sequence's logical pages to physical pages. Pages are
//! handed out from a free list as sequences grow, so a sequence's tokens are
//! not contiguous in the pool; the kernels only ever see slots and the table.
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use std::sync::Arc;
use switchyard_core::codec::bytes;
use switchyard_core::{Backend, DeviceBuffer};
use switchyard_kernels::attn::KvView;

/// Tokens per page.
pub const PAGE: usize = 16;

/// `n` copies of `v`, reserved fallibly.
pub(crate) fn filled<T: Clone>(n: usize, v: T, what: &str) -> Result<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(n)
        .map_err(|e| Error::Request(format!("cannot allocate the {what} ({n} entries of {} bytes): {e}", std::mem::size_of::<T>())))?;
    out.resize(n, v);
    Ok(out)
}

/// One layer's pools.
pub struct LayerKv {
    /// K pool `[slots, nkv, hd]` bf16.
    pub k: DeviceBuffer,
    /// V pool `[slots, nkv, hd]` bf16.
    pub v: DeviceBuffer,
    /// KV heads.
    pub nkv: usize,
    /// Head dimension.
    pub hd: usize,
}

/// Pools, block table and page bookkeeping.
pub struct KvCache {
    /// One pool pair per layer that owns KV (KV-shared layers have none).
    pub layers: Vec<LayerKv>,
    /// Decoder layer → index into `layers`: its own pool, or its KV
    /// source's for a KV-shared layer.
    pool_of: Vec<usize>,
    block_table: DeviceBuffer,
    host_table: Vec<i32>,
    /// Physical pages not yet given to a sequence.
    free: Vec<i32>,
    /// Pages held per sequence.
    held: Vec<usize>,
    /// Sequences (rows of the block table).
    pub num_seqs: usize,
    /// Pages per sequence (columns of the block table).
    pub max_pages: usize,
    /// Physical pages in each pool.
    pub num_pages: usize,
}

impl KvCache {
    /// Room for `num_seqs` sequences of up to `max_tokens` tokens each.
    ///
    /// The request sizes everything, so it is checked before anything is
    /// allocated: no more tokens per sequence than the model's context
    /// (`max_position_embeddings`), slot numbers that fit the kernels' i32
    /// indices, byte counts that do not overflow; and the host-side tables
    /// are reserved fallibly, so an impossible size is an error, not an abort.
    pub fn new(be: &Arc<dyn Backend>, cfg: &ModelConfig, num_seqs: usize, max_tokens: usize) -> Result<Self> {
        if num_seqs == 0 || max_tokens == 0 {
            return Err(Error::Request("a KV cache needs at least one sequence and one token".into()));
        }
        if max_tokens > cfg.max_position_embeddings {
            return Err(Error::Request(format!(
                "{max_tokens} tokens per sequence exceed the model's context of {} positions (max_position_embeddings)",
                cfg.max_position_embeddings
            )));
        }
        let too_big = || {
            Error::Request(format!(
                "a KV cache of {num_seqs} sequences x {max_tokens} tokens has more slots than the kernels' i32 slot indices address ({})",
                i32::MAX
            ))
        };
        let max_pages = max_tokens.div_ceil(PAGE);
        let num_pages = num_seqs.checked_mul(max_pages).ok_or_else(too_big)?;
        let slots = num_pages.checked_mul(PAGE).filter(|&s| s <= i32::MAX as usize).ok_or_else(too_big)?;
        // Only layers that own KV get pools; a KV-shared layer reads its
        // source's (HF: the shared layers have no cache entry of their own).
        let mut pool_of = Vec::with_capacity(cfg.layers.len());
        let mut owners = 0usize;
        for l in &cfg.layers {
            match l.kv_source {
                None => {
                    pool_of.push(owners);
                    owners += 1;
                }
                Some(src) => pool_of.push(pool_of[src]),
            }
        }
        let layers = cfg
            .layers
            .iter()
            .enumerate()
            .filter(|(_, l)| l.kv_source.is_none())
            .map(|(i, l)| {
                let bytes = slots.checked_mul(l.num_kv_heads).and_then(|n| n.checked_mul(l.head_dim)).and_then(|n| n.checked_mul(2));
                let bytes = bytes.ok_or_else(|| {
                    Error::Request(format!(
                        "the KV cache of layer {i} ({slots} slots x {} KV heads x head_dim {}) overflows a byte count",
                        l.num_kv_heads, l.head_dim
                    ))
                })?;
                // Zeroed so that nothing reads garbage even if a kernel reads a
                // slot before it is written (none should).
                let pool = || {
                    DeviceBuffer::zeroed(be, bytes).map_err(|e| {
                        Error::Request(format!(
                            "cannot allocate the KV cache for {num_seqs} sequence(s) of {max_tokens} tokens (layer {i}: {bytes} bytes): {e}"
                        ))
                    })
                };
                Ok(LayerKv { k: pool()?, v: pool()?, nkv: l.num_kv_heads, hd: l.head_dim })
            })
            .collect::<Result<Vec<_>>>()?;
        let host_table = filled(num_pages, -1i32, "block table")?;
        let block_table = DeviceBuffer::from_bytes(be, &bytes::i32_bytes(&host_table))?;
        // Handed out from the end: sequence 0 gets the highest pages first, so
        // logical and physical order differ and paging is really exercised.
        let mut free = filled(num_pages, 0i32, "free-page list")?;
        for (i, p) in free.iter_mut().enumerate() {
            // In range: num_pages * PAGE <= i32::MAX, checked above.
            *p = i as i32;
        }
        let held = filled(num_seqs, 0usize, "per-sequence page counts")?;
        Ok(KvCache { layers, pool_of, block_table, host_table, free, held, num_seqs, max_pages, num_pages })
    }

    /// Makes positions `0..len` of sequence `seq` addressable, taking pages
    /// from the free list as needed.
    pub fn reserve(&mut self, seq: usize, len: usize) -> Result<()> {
        if seq >= self.num_seqs {
            return Err(Error::Request(format!("sequence {seq} out of range ({} in the cache)", self.num_seqs)));
        }
        let need = len.div_ceil(PAGE);
        if need > self.max_pages {
            return Err(Error::Request(format!("{len} tokens exceed the KV cache's {} per sequence", self.max_pages * PAGE)));
        }
        if need <= self.held[seq] {
            return Ok(());
        }
        while self.held[seq] < need {
            let page = self.free.pop().ok_or_else(|| Error::Request("the KV cache is out of pages".into()))?;
            self.host_table[seq * self.max_pages + self.held[seq]] = page;
            self.held[seq] += 1;
        }
        self.block_table.write(&bytes::i32_bytes(&self.host_table))?;
        Ok(())
    }

    /// Returns sequence `seq`'s pages to the free list.
    pub fn release(&mut self, seq: usize) -> Result<()> {
        if seq >= self.num_seqs {
            return Err(Error::Request(format!("sequence {seq} out of range ({} in the cache)", self.num_seqs)));
        }
        for j in 0..self.held[seq] {
            let e = &mut self.host_table[seq * self.max_pages + j];
            self.free.push(*e);
            *e = -1;
        }
        self.held[seq] = 0;
        self.block_table.write(&bytes::i32_bytes(&self.host_table))?;
        Ok(())
    }

    /// The pool slot of sequence `seq`'s token at `pos` (reserved beforehand).
    pub fn slot(&self, seq: usize, pos: usize) -> Result<i32> {
        let page = pos / PAGE;
        if seq >= self.num_seqs || page >= self.held[seq] {
            return Err(Error::Request(format!("position {pos} of sequence {seq} has no KV page reserved")));
        }
        Ok(self.host_table[seq * self.max_pages + page] * PAGE as i32 + (pos % PAGE) as i32)
    }

    /// Slots in each pool.
    pub fn num_slots(&self) -> usize {
        self.num_pages * PAGE
    }

    /// What the attention kernels read for decoder layer `layer` (its KV
    /// source's pools on a KV-shared layer).
    pub fn view(&self, layer: usize) -> KvView {
        let l = &self.layers[self.pool_of[layer]];
        KvView {
            k_pool: l.k.region(),
            v_pool: l.v.region(),
            block_table: self.block_table.region(),
            nkv: l.nkv,
            hd: l.hd,
            page: PAGE,
            max_pages: self.max_pages,
            num_seqs: self.num_seqs,
            num_slots: self.num_slots(),
        }
    }
}
