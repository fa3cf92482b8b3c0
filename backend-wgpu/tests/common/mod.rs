//! Helpers shared by the wgpu integration tests (each test file is its own
//! crate and uses a subset of them).
#![allow(dead_code)]
use std::sync::Arc;
use switchyard_core::{Backend, Error};
use switchyard_wgpu::{wgpu_backend_with, WgpuOptions};

/// The backend with `opts`, or `None` (after printing why) when this machine
/// has no adapter and the environment does not require one
/// (SWITCHYARD_REQUIRE_WGPU=1 makes a missing adapter a failure).
pub fn backend(test: &str, opts: WgpuOptions) -> Option<Arc<dyn Backend>> {
    match wgpu_backend_with(opts) {
        Ok(be) => Some(be),
        Err(e @ Error::Unavailable { .. }) => {
            if std::env::var("SWITCHYARD_REQUIRE_WGPU").is_ok_and(|v| v == "1") {
                panic!("SWITCHYARD_REQUIRE_WGPU=1 but {e}");
            }
            eprintln!("SKIPPED {test}: {e} (set SWITCHYARD_REQUIRE_WGPU=1 to make this a failure)");
            None
        }
        Err(e) => panic!("wgpu backend failed to start: {e}"),
    }
}

/// [`backend`] with the default options.
pub fn wgpu(test: &str) -> Option<Arc<dyn Backend>> {
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
