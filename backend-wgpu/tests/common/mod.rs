//! Helpers shared by the wgpu integration tests (each test file is its own
//! crate and uses a subset of them).
#![allow(dead_code)]
use std::sync::Arc;
use switchyard_core::Backend;
use switchyard_wgpu::{wgpu_backend_with, WgpuOptions};

/// The harness's probe (`switchyard-test-harness`): whether this machine has
/// a wgpu adapter. Without one, every test of the file shows as ignored with
/// the reason, or fails where SWITCHYARD_REQUIRE_WGPU=1.
pub fn probe(name: &str) -> Result<(), String> {
    assert_eq!(name, "wgpu", "the wgpu tests need only wgpu");
    wgpu_backend_with(WgpuOptions::default()).map(drop).map_err(|e| e.to_string())
}

/// The backend with `opts` for test `test`, which the harness lets run only
/// where an adapter was found: any error is a failure.
pub fn backend(test: &str, opts: WgpuOptions) -> Arc<dyn Backend> {
    wgpu_backend_with(opts).unwrap_or_else(|e| panic!("{test}: the wgpu backend failed to start: {e}"))
}

/// [`backend`] with the default options.
pub fn wgpu(test: &str) -> Arc<dyn Backend> {
    backend(test, WgpuOptions::default())
}

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

/// An allocation of `bytes` NaN bytes (0xff), so an element nobody wrote shows.
pub fn poisoned(be: &Arc<dyn Backend>, bytes: usize) -> u64 {
    up(be, &vec![0xff; bytes])
}
