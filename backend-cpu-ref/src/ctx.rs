//! The view a kernel gets of its arguments: scalars by name, and every
//! element read or write bounds-checked against the allocation the pointer
//! resolved to.
//!
//! Semantics are "snapshot in, commit out": reads see memory as it was when
//! the launch began, and writes are recorded and applied only after the
//! kernel returns `Ok`, in the order the kernel made them. That makes
//! aliasing (`resid_out == resid`, `v_raw == k_raw`) behave as each contract
//! describes without any kernel having to think about it, and a kernel that
//! fails half-way leaves memory untouched.
use crate::memory::Allocs;
use switchyard_core::codec::{bf16_value, fp8::e4m3_to_f32};
use switchyard_core::{Arg, ArgKind, Error, KernelSig, Result};

/// A pointer argument that resolved to a live allocation.
#[derive(Clone, Copy)]
pub(crate) struct Buf {
    arg: usize,
}

/// One recorded write: `len` arena bytes starting at `start`, to `addr`.
struct Write {
    addr: u64,
    start: usize,
    len: usize,
}

/// Writes a kernel made, to be applied once it has finished.
pub(crate) struct Pending {
    writes: Vec<Write>,
    arena: Vec<u8>,
}

impl Pending {
    /// Applies the writes in order. Each was bounds-checked when recorded
    /// against the same (locked) table, so an error here means the table
    /// changed underneath, which the lock rules out; it is still reported
    /// rather than assumed.
    pub(crate) fn commit(self, mem: &mut Allocs, kernel: &str) -> Result<()> {
        for w in &self.writes {
            let (bytes, off) = mem.resolve_mut(w.addr, w.len as u64).map_err(|d| Error::oob(kernel, "<commit>", d))?;
            let off = off as usize;
            bytes[off..off + w.len].copy_from_slice(&self.arena[w.start..w.start + w.len]);
        }
        Ok(())
    }
}

/// A running kernel's arguments.
pub(crate) struct Ctx<'a> {
    sig: &'static KernelSig,
    args: &'a [Arg],
    /// Per argument: for a non-null pointer, its address and the bytes from
    /// it to the end of its allocation.
    views: Vec<Option<(u64, &'a [u8])>>,
    pending: Pending,
}

impl<'a> Ctx<'a> {
    /// Resolves every non-null pointer argument against `mem`.
    pub(crate) fn new(sig: &'static KernelSig, args: &'a [Arg], mem: &'a Allocs) -> Result<Self> {
        sig.check(args)?;
        let mut views = Vec::with_capacity(args.len());
        for (spec, arg) in sig.args.iter().zip(args) {
            views.push(match *arg {
                Arg::P(0) => None,
                Arg::P(addr) => {
                    let (bytes, off) = mem.resolve(addr, 0).map_err(|d| Error::oob(sig.symbol, spec.name, d))?;
                    Some((addr, &bytes[off as usize..]))
                }
                _ => None,
            });
        }
        Ok(Ctx { sig, args, views, pending: Pending { writes: Vec::new(), arena: Vec::new() } })
    }

    /// The recorded writes, for [`Pending::commit`].
    pub(crate) fn finish(self) -> Pending {
        self.pending
    }

    /// Kernel symbol, for error messages.
    pub(crate) fn kernel(&self) -> &'static str {
        self.sig.symbol
    }

    fn index(&self, name: &str, kind: ArgKind) -> Result<usize> {
        let i =
            self.sig.arg_index(name).ok_or_else(|| Error::invalid(self.sig.symbol, name, "no argument of that name in the signature"))?;
        if self.sig.args[i].kind != kind {
            return Err(Error::invalid(self.sig.symbol, name, format!("declared {:?}, read as {kind:?}", self.sig.args[i].kind)));
        }
        Ok(i)
    }

    /// A pointer argument that must not be null here.
    pub(crate) fn buf(&self, name: &str) -> Result<Buf> {
        self.opt_buf(name)?.ok_or_else(|| Error::invalid(self.sig.symbol, name, "null address where this launch needs a buffer"))
    }

    /// A pointer argument; `None` when null.
    pub(crate) fn opt_buf(&self, name: &str) -> Result<Option<Buf>> {
        let i = self.index(name, ArgKind::Ptr)?;
        Ok(self.views[i].map(|_| Buf { arg: i }))
    }

    /// An i32 scalar.
    pub(crate) fn i32(&self, name: &str) -> Result<i32> {
        match self.args[self.index(name, ArgKind::I32)?] {
            Arg::I(v) => Ok(v),
            other => Err(Error::invalid(self.sig.symbol, name, format!("expected an i32, got {other:?}"))),
        }
    }

    /// An i32 scalar that is a size: must be >= 0.
    pub(crate) fn size(&self, name: &str) -> Result<usize> {
        let v = self.i32(name)?;
        usize::try_from(v).map_err(|_| Error::invalid(self.sig.symbol, name, format!("{v} is negative; a size must be >= 0")))
    }

    /// A u32 scalar that is a size or count (the GEMM family passes M, N, K
    /// this way), widened to usize.
    pub(crate) fn u32_size(&self, name: &str) -> Result<usize> {
        match self.args[self.index(name, ArgKind::U32)?] {
            // u32 always fits usize on the 32- and 64-bit targets this crate builds for.
            Arg::U(v) => Ok(v as usize),
            other => Err(Error::invalid(self.sig.symbol, name, format!("expected a u32, got {other:?}"))),
        }
    }

    /// An f32 scalar.
    pub(crate) fn f32(&self, name: &str) -> Result<f32> {
        match self.args[self.index(name, ArgKind::F32)?] {
            Arg::F(v) => Ok(v),
            other => Err(Error::invalid(self.sig.symbol, name, format!("expected an f32, got {other:?}"))),
        }
    }

    /// Byte range of elements `[start, start + n)` of `width` bytes, checked
    /// against the bytes between the pointer and the end of its allocation.
    fn range(&self, b: Buf, start: usize, n: usize, width: usize) -> Result<(u64, &'a [u8], usize, usize)> {
        let name = self.sig.args[b.arg].name;
        let (addr, view) = self.views[b.arg].ok_or_else(|| Error::invalid(self.sig.symbol, name, "null address read as a buffer"))?;
        let lo = start.checked_mul(width);
        let len = n.checked_mul(width);
        match (lo, len) {
            (Some(lo), Some(len)) if lo.checked_add(len).is_some_and(|hi| hi <= view.len()) => Ok((addr, view, lo, len)),
            _ => Err(Error::oob(
                self.sig.symbol,
                name,
                format!(
                    "elements [{start}, {start}+{n}) of {width} bytes each run past the end of the allocation \
                     ({} bytes from address {addr:#x})",
                    view.len()
                ),
            )),
        }
    }

    /// Raw bytes of elements `[start, start + n)`.
    pub(crate) fn bytes(&self, b: Buf, start: usize, n: usize, width: usize) -> Result<&'a [u8]> {
        let (_, view, lo, len) = self.range(b, start, n, width)?;
        Ok(&view[lo..lo + len])
    }

    /// `n` bf16 bit patterns from element `start`.
    pub(crate) fn bf16_bits(&self, b: Buf, start: usize, n: usize) -> Result<Vec<u16>> {
        Ok(self.bytes(b, start, n, 2)?.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect())
    }

    /// `n` bf16 values (as f32, exact) from element `start`.
    pub(crate) fn bf16(&self, b: Buf, start: usize, n: usize) -> Result<Vec<f32>> {
        Ok(self.bytes(b, start, n, 2)?.chunks_exact(2).map(|c| bf16_value(u16::from_le_bytes([c[0], c[1]]))).collect())
    }

    /// `n` fp8 e4m3fn codes decoded to f32, from element `start`.
    pub(crate) fn e4m3(&self, b: Buf, start: usize, n: usize) -> Result<Vec<f32>> {
        Ok(self.bytes(b, start, n, 1)?.iter().map(|&c| e4m3_to_f32(c)).collect())
    }

    /// `n` f32 values from element `start`.
    pub(crate) fn f32s(&self, b: Buf, start: usize, n: usize) -> Result<Vec<f32>> {
        Ok(self.bytes(b, start, n, 4)?.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// `n` i32 values from element `start`.
    pub(crate) fn i32s(&self, b: Buf, start: usize, n: usize) -> Result<Vec<i32>> {
        Ok(self.bytes(b, start, n, 4)?.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// One f32 element.
    pub(crate) fn f32_at(&self, b: Buf, i: usize) -> Result<f32> {
        let c = self.bytes(b, i, 1, 4)?;
        Ok(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }

    /// One i32 element.
    pub(crate) fn i32_at(&self, b: Buf, i: usize) -> Result<i32> {
        let c = self.bytes(b, i, 1, 4)?;
        Ok(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }

    /// Records a write of `n` elements of `width` bytes at element `start`,
    /// filled by `fill` into the arena once the range is known to be valid.
    fn record(&mut self, b: Buf, start: usize, n: usize, width: usize, fill: impl FnOnce(&mut Vec<u8>)) -> Result<()> {
        let (addr, _, lo, len) = self.range(b, start, n, width)?;
        if len == 0 {
            return Ok(());
        }
        let at = self.pending.arena.len();
        fill(&mut self.pending.arena);
        debug_assert_eq!(self.pending.arena.len() - at, len);
        self.pending.writes.push(Write { addr: addr + lo as u64, start: at, len });
        Ok(())
    }

    /// Stores bf16 bit patterns at element `start`.
    pub(crate) fn put_bf16(&mut self, b: Buf, start: usize, v: &[u16]) -> Result<()> {
        self.record(b, start, v.len(), 2, |a| a.extend(v.iter().flat_map(|x| x.to_le_bytes())))
    }

    /// Stores `n` copies of one bf16 bit pattern at element `start`.
    pub(crate) fn fill_bf16(&mut self, b: Buf, start: usize, n: usize, bits: u16) -> Result<()> {
        self.record(b, start, n, 2, |a| a.extend(std::iter::repeat_n(bits.to_le_bytes(), n).flatten()))
    }

    /// Stores f32 values at element `start`.
    pub(crate) fn put_f32(&mut self, b: Buf, start: usize, v: &[f32]) -> Result<()> {
        self.record(b, start, v.len(), 4, |a| a.extend(v.iter().flat_map(|x| x.to_le_bytes())))
    }

    /// Stores i32 values at element `start`.
    pub(crate) fn put_i32(&mut self, b: Buf, start: usize, v: &[i32]) -> Result<()> {
        self.record(b, start, v.len(), 4, |a| a.extend(v.iter().flat_map(|x| x.to_le_bytes())))
    }
}
