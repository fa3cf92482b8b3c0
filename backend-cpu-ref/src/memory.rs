//! Host memory behind virtual device addresses: every operation resolves its
//! range through [`VirtualAllocs`], so a bad address or a range past the end
//! is an [`Error::OutOfBounds`] naming the operation and the argument.
use std::sync::{Mutex, MutexGuard};
use switchyard_core::vaddr::{unpack, VirtualAllocs};
use switchyard_core::{Error, Result};

/// The allocation table: one zero-initialised `Vec<u8>` per allocation.
pub(crate) type Allocs = VirtualAllocs<Vec<u8>>;

/// The CPU backend's memory.
#[derive(Default)]
pub(crate) struct Memory {
    allocs: Mutex<Allocs>,
}

impl Memory {
    /// Locks the table. A panic while it was held (only possible from a bug
    /// in this crate) leaves it consistent, because writes are applied only
    /// after all checks pass, so a poisoned lock is recovered, not propagated.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Allocs> {
        self.allocs.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn alloc(&self, bytes: usize) -> Result<u64> {
        if bytes == 0 {
            return Err(Error::invalid("alloc", "bytes", "allocation of 0 bytes: size must be > 0"));
        }
        let mut v = Vec::new();
        // try_reserve turns an impossible request into an error instead of aborting the process.
        v.try_reserve_exact(bytes).map_err(|e| {
            Error::driver(switchyard_core::BackendKind::Cpu.name(), format!("alloc of {bytes} bytes failed: host memory exhausted ({e})"))
        })?;
        v.resize(bytes, 0);
        self.lock().insert(bytes as u64, v).map_err(|d| Error::invalid("alloc", "bytes", d))
    }

    pub(crate) fn free(&self, addr: u64) -> Result<()> {
        self.lock().remove(addr).map(drop).map_err(|d| Error::oob("free", "addr", d))
    }

    pub(crate) fn upload(&self, dst: u64, data: &[u8]) -> Result<()> {
        let mut m = self.lock();
        let (buf, off) = m.resolve_mut(dst, data.len() as u64).map_err(|d| Error::oob("upload", "dst", d))?;
        let off = off as usize;
        buf[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }

    pub(crate) fn download(&self, src: u64, out: &mut [u8]) -> Result<()> {
        let m = self.lock();
        let (buf, off) = m.resolve(src, out.len() as u64).map_err(|d| Error::oob("download", "src", d))?;
        let off = off as usize;
        out.copy_from_slice(&buf[off..off + out.len()]);
        Ok(())
    }

    pub(crate) fn memset0(&self, dst: u64, bytes: usize) -> Result<()> {
        let mut m = self.lock();
        let (buf, off) = m.resolve_mut(dst, bytes as u64).map_err(|d| Error::oob("memset0", "dst", d))?;
        let off = off as usize;
        buf[off..off + bytes].fill(0);
        Ok(())
    }

    pub(crate) fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        let mut m = self.lock();
        let (sbuf, soff) = m.resolve(src, bytes as u64).map_err(|d| Error::oob("copy", "src", d))?;
        // Both ranges are checked before anything moves, so a bad dst leaves memory untouched.
        let tmp = sbuf[soff as usize..soff as usize + bytes].to_vec();
        let (dbuf, doff) = m.resolve_mut(dst, bytes as u64).map_err(|d| Error::oob("copy", "dst", d))?;
        let ((sid, so), (did, d_o)) = (unpack(src), unpack(dst));
        if sid == did && bytes > 0 && so < d_o + bytes as u64 && d_o < so + bytes as u64 {
            return Err(Error::invalid(
                "copy",
                "dst",
                format!("[{dst:#x}, +{bytes}) overlaps the source [{src:#x}, +{bytes}); copy takes disjoint ranges"),
            ));
        }
        let doff = doff as usize;
        dbuf[doff..doff + bytes].copy_from_slice(&tmp);
        Ok(())
    }

    pub(crate) fn check_range(&self, addr: u64, bytes: usize) -> std::result::Result<(), String> {
        self.lock().resolve(addr, bytes as u64).map(drop)
    }

    pub(crate) fn live_bytes(&self) -> usize {
        self.lock().live_bytes() as usize
    }
}
