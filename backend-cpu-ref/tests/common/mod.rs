//! Helpers shared by the CPU backend's integration tests (each test file is
//! its own crate and uses a subset of them).
#![allow(dead_code)]
use std::sync::Arc;
use switchyard_core::Backend;

/// A fresh allocation holding `data`.
pub fn up(be: &Arc<dyn Backend>, data: &[u8]) -> u64 {
    let a = be.alloc(data.len()).unwrap();
    be.upload(a, data).unwrap();
    a
}

/// `n` bytes at `addr`.
pub fn down(be: &Arc<dyn Backend>, addr: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    be.download(addr, &mut v).unwrap();
    v
}

/// An output of `bytes` bytes filled with 0xff (NaN as bf16 and f32), so an unwritten element shows.
pub fn poisoned(be: &Arc<dyn Backend>, bytes: usize) -> u64 {
    up(be, &vec![0xff; bytes])
}

/// A fresh buffer holding `data`, for the launchers that take regions (freed on drop).
pub fn buffer(be: &Arc<dyn Backend>, data: &[u8]) -> switchyard_core::DeviceBuffer {
    switchyard_core::DeviceBuffer::from_bytes(be, data).unwrap()
}

/// [`poisoned`] as a buffer.
pub fn poisoned_buffer(be: &Arc<dyn Backend>, bytes: usize) -> switchyard_core::DeviceBuffer {
    buffer(be, &vec![0xff; bytes])
}
