//! [`Region`]: a device address together with its extent.
use crate::{DeviceBuffer, Error, Result};

/// A byte range of one device allocation: an address that cannot travel
/// without its size. Launchers take regions, so a caller cannot hand a
/// kernel an address whose extent nobody knows; the launcher checks that the
/// region covers every byte the kernel will touch. Made from a
/// [`DeviceBuffer`] (whole, or a sub-range).
///
/// A region is `Copy` and does not keep its allocation alive; a region of a
/// freed buffer is refused at launch by the backend's liveness check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    addr: u64,
    bytes: usize,
}

impl Region {
    /// The device address of the first byte.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The sub-range `[offset, offset + bytes)` of this region.
    pub fn slice(&self, offset: usize, bytes: usize) -> Result<Region> {
        match offset.checked_add(bytes) {
            Some(end) if end <= self.bytes => Ok(Region { addr: self.addr + offset as u64, bytes }),
            _ => Err(Error::oob("Region::slice", "offset", format!("[{offset}, +{bytes}) is not inside a {}-byte region", self.bytes))),
        }
    }

    /// Everything from `offset` (at most the length) to the end of this region.
    pub fn tail(&self, offset: usize) -> Result<Region> {
        self.slice(offset, self.bytes.checked_sub(offset).unwrap_or(usize::MAX))
    }
}

impl DeviceBuffer {
    /// The whole buffer as a [`Region`].
    pub fn region(&self) -> Region {
        Region { addr: self.addr(), bytes: self.len() }
    }

    /// The sub-range `[offset, offset + bytes)` as a [`Region`].
    pub fn slice(&self, offset: usize, bytes: usize) -> Result<Region> {
        self.region().slice(offset, bytes)
    }
}

impl From<&DeviceBuffer> for Region {
    fn from(b: &DeviceBuffer) -> Region {
        b.region()
    }
}
