//! Virtual device addresses for backends without real device pointers (the
//! CPU reference, wgpu), and range tables for bounds checks on any backend.
//!
//! A virtual address packs `(allocation id, byte offset)` into a `u64`: the
//! top [`ID_BITS`] bits hold the id (never 0, never reused, so a freed
//! allocation's addresses stay recognisably dead) and the low [`OFFSET_BITS`]
//! hold the offset. Address 0 is null.
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bits of a virtual address that hold the byte offset.
pub const OFFSET_BITS: u32 = 40;
/// Bits of a virtual address that hold the allocation id.
pub const ID_BITS: u32 = 64 - OFFSET_BITS;
/// Largest single virtual allocation (1 TiB).
pub const MAX_ALLOC: u64 = 1 << OFFSET_BITS;

/// Packs an allocation id and an offset.
pub fn pack(id: u64, offset: u64) -> u64 {
    debug_assert!(id != 0 && id < (1 << ID_BITS) && offset < MAX_ALLOC);
    (id << OFFSET_BITS) | offset
}

/// Splits an address into `(allocation id, byte offset)`.
pub fn unpack(addr: u64) -> (u64, u64) {
    (addr >> OFFSET_BITS, addr & (MAX_ALLOC - 1))
}

/// Live virtual allocations, each with a backend payload `T` (host bytes on
/// the CPU reference, a `wgpu::Buffer` on wgpu).
pub struct VirtualAllocs<T> {
    next_id: u64,
    live: HashMap<u64, (u64, T)>,
    live_bytes: u64,
}

impl<T> Default for VirtualAllocs<T> {
    fn default() -> Self {
        VirtualAllocs { next_id: 1, live: HashMap::new(), live_bytes: 0 }
    }
}

impl<T> VirtualAllocs<T> {
    /// Registers a new allocation of `len` bytes and returns its base address.
    pub fn insert(&mut self, len: u64, payload: T) -> Result<u64, String> {
        if len == 0 || len > MAX_ALLOC {
            return Err(format!("allocation of {len} bytes: size must be in 1..={MAX_ALLOC}"));
        }
        if self.next_id >= (1 << ID_BITS) {
            return Err("virtual address space exhausted".into());
        }
        let id = self.next_id;
        self.next_id += 1;
        self.live.insert(id, (len, payload));
        self.live_bytes += len;
        Ok(pack(id, 0))
    }

    /// Removes the allocation whose base address is `addr`.
    pub fn remove(&mut self, addr: u64) -> Result<T, String> {
        let (id, off) = unpack(addr);
        if off != 0 {
            return Err(format!("{addr:#x} is not the base of an allocation (offset {off})"));
        }
        match self.live.remove(&id) {
            Some((len, t)) => {
                self.live_bytes -= len;
                Ok(t)
            }
            None => Err(self.describe_dead(addr)),
        }
    }

    /// Resolves `[addr, addr + bytes)` to `(payload, offset)`, checking that
    /// the whole range is inside one live allocation.
    pub fn resolve(&self, addr: u64, bytes: u64) -> Result<(&T, u64), String> {
        let (id, off) = unpack(addr);
        let (len, t) = self.live.get(&id).ok_or_else(|| self.describe_dead(addr))?;
        check_within(addr, off, bytes, *len)?;
        Ok((t, off))
    }

    /// Mutable variant of [`VirtualAllocs::resolve`].
    pub fn resolve_mut(&mut self, addr: u64, bytes: u64) -> Result<(&mut T, u64), String> {
        let (id, off) = unpack(addr);
        if !self.live.contains_key(&id) {
            return Err(self.describe_dead(addr));
        }
        let (len, t) = self.live.get_mut(&id).expect("checked above");
        check_within(addr, off, bytes, *len)?;
        Ok((t, off))
    }

    /// Length of the live allocation that `addr` points into.
    pub fn len_of(&self, addr: u64) -> Option<u64> {
        self.live.get(&unpack(addr).0).map(|e| e.0)
    }

    /// Total bytes in live allocations.
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    fn describe_dead(&self, addr: u64) -> String {
        let (id, _) = unpack(addr);
        if addr == 0 {
            "null address".into()
        } else if id != 0 && id < self.next_id {
            format!("address {addr:#x} points into allocation #{id}, which was freed")
        } else {
            format!("address {addr:#x} was not made by this backend's allocator")
        }
    }
}

fn check_within(addr: u64, off: u64, bytes: u64, len: u64) -> Result<(), String> {
    match off.checked_add(bytes) {
        Some(end) if end <= len => Ok(()),
        _ => Err(format!("range [{addr:#x}, +{bytes}) runs past the end of its allocation ({len} bytes, offset {off})")),
    }
}

/// Live allocations keyed by real base address, for backends whose addresses
/// are real device pointers (CUDA): answers "is this range inside one live
/// allocation".
///
/// Each allocation also gets a serial, unique across every table in the
/// process, so that `(base, serial)` names one allocation even after the
/// driver hands the same base address out again: a recording stores these
/// identities and [`RangeTable::is_live`] tells at replay whether the very
/// allocation it used still exists.
#[derive(Default)]
pub struct RangeTable {
    live: BTreeMap<u64, (u64, u64)>,
    live_bytes: u64,
}

/// Serials for [`RangeTable`] allocations; process-wide so that tables of two
/// backend instances never give the same serial to different allocations.
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

impl RangeTable {
    /// Records an allocation and returns its serial (larger than every
    /// serial handed out before, by any table).
    pub fn insert(&mut self, base: u64, len: u64) -> u64 {
        let serial = NEXT_SERIAL.fetch_add(1, Ordering::Relaxed);
        self.live.insert(base, (len, serial));
        self.live_bytes += len;
        serial
    }

    /// Forgets the allocation based at `base`.
    pub fn remove(&mut self, base: u64) -> Result<u64, String> {
        match self.live.remove(&base) {
            Some((len, _)) => {
                self.live_bytes -= len;
                Ok(len)
            }
            None => Err(format!("{base:#x} is not the base of a live allocation (already freed, or never allocated)")),
        }
    }

    /// The live allocation containing `addr`, as `(base, len, serial)`.
    fn containing(&self, addr: u64) -> Option<(u64, u64, u64)> {
        let (&base, &(len, serial)) = self.live.range(..=addr).next_back()?;
        (addr < base + len).then_some((base, len, serial))
    }

    /// Checks that `[addr, addr + bytes)` lies inside one live allocation.
    pub fn check(&self, addr: u64, bytes: u64) -> Result<(), String> {
        let Some((base, len, _)) = self.containing(addr) else {
            return Err(match self.live.range(..=addr).next_back() {
                Some((&b, &(l, _))) => {
                    format!("address {addr:#x} is not inside any live allocation (nearest below ends at {:#x})", b + l)
                }
                None => format!("address {addr:#x} is not inside any live allocation"),
            });
        };
        check_within(addr, addr - base, bytes, len)
    }

    /// The identity `(base, serial)` of the live allocation containing `addr`.
    pub fn identity(&self, addr: u64) -> Option<(u64, u64)> {
        self.containing(addr).map(|(base, _, serial)| (base, serial))
    }

    /// Whether the allocation `(base, serial)` (from [`RangeTable::identity`])
    /// is still live: false once it is freed, even if a later allocation
    /// reuses its base address.
    pub fn is_live(&self, base: u64, serial: u64) -> bool {
        self.live.get(&base).is_some_and(|&(_, s)| s == serial)
    }

    /// Total bytes in live allocations.
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// Base addresses of every live allocation.
    pub fn bases(&self) -> Vec<u64> {
        self.live.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_ranges_are_checked() {
        let mut t = VirtualAllocs::default();
        let a = t.insert(100, ()).unwrap();
        assert!(t.resolve(a + 96, 4).is_ok());
        assert!(t.resolve(a + 97, 4).unwrap_err().contains("past the end"));
        t.remove(a).unwrap();
        assert!(t.resolve(a, 1).unwrap_err().contains("freed"));
        assert!(t.resolve(pack(99, 0), 1).unwrap_err().contains("not made"));
        assert_eq!(t.live_bytes(), 0);
    }

    #[test]
    fn real_ranges_are_checked() {
        let mut t = RangeTable::default();
        t.insert(0x1000, 0x100);
        assert!(t.check(0x1000, 0x100).is_ok());
        assert!(t.check(0x10ff, 2).is_err());
        assert!(t.check(0x1100, 1).is_err());
        assert!(t.check(0xfff, 1).is_err());
        t.remove(0x1000).unwrap();
        assert!(t.check(0x1000, 1).is_err());
    }

    #[test]
    fn identities_outlive_address_reuse() {
        let mut t = RangeTable::default();
        let s1 = t.insert(0x1000, 0x100);
        assert_eq!(t.identity(0x10ff), Some((0x1000, s1)));
        assert_eq!(t.identity(0x1100), None);
        assert!(t.is_live(0x1000, s1));
        t.remove(0x1000).unwrap();
        assert!(!t.is_live(0x1000, s1));
        // The driver may hand the same base out again: a new allocation, a new serial.
        let s2 = t.insert(0x1000, 0x100);
        assert!(s2 > s1);
        assert!(!t.is_live(0x1000, s1) && t.is_live(0x1000, s2));
        // Serials are unique across tables too (two backend instances).
        let mut other = RangeTable::default();
        assert!(other.insert(0x1000, 0x100) > s2);
    }
}
