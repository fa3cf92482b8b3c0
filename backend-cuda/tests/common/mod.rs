//! Helpers shared by the CUDA integration tests (each test file is its own
//! crate and uses a subset of them).
#![allow(dead_code)]
use std::sync::Arc;
use switchyard_core::{Backend, DeviceBuffer};

/// The harness's probe (`switchyard-test-harness`) for what a test needs:
/// `cuda` (a device), `cublas` (a device and cuBLAS), `nvrtc` (libnvrtc
/// loadable, no device needed) or `no-cuda-device` (the unavailable path).
/// A test whose need is not met here shows as ignored with the reason;
/// `SWITCHYARD_REQUIRE_CUDA=1` (set by scripts/h200_checks.sh) makes a
/// missing device a failure, `SWITCHYARD_REQUIRE_NVRTC=1` a missing NVRTC.
pub fn probe(need: &str) -> Result<(), String> {
    match need {
        "cuda" => switchyard_cuda::cuda_backend().map(drop).map_err(|e| e.to_string()),
        "cublas" => {
            let cb = switchyard_cuda::CudaBackend::open(0).map_err(|e| e.to_string())?;
            switchyard_cuda::Cublas::new(&cb).map(drop).map_err(|e| format!("cuBLAS: {e}"))
        }
        "nvrtc" => switchyard_cuda::nvrtc_version().map(drop).map_err(|e| e.to_string()),
        "no-cuda-device" => match switchyard_cuda::cuda_backend() {
            Ok(be) => Err(format!("a CUDA device is present ({}), so the unavailable path cannot be exercised", be.info().device)),
            Err(_) => Ok(()),
        },
        other => panic!("unknown need `{other}`"),
    }
}

/// The CUDA backend, for a test the harness lets run only where it opened.
pub fn cuda() -> Arc<dyn Backend> {
    switchyard_cuda::cuda_backend().unwrap_or_else(|e| panic!("opening the CUDA backend: {e}"))
}

/// `n` finite, non-zero-mean bf16 values from a 64-bit LCG seeded with `seed`,
/// in `[lo, lo + span)` with random sign.
pub fn bf16_data(n: usize, seed: u64, lo: f32, span: f32) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .flat_map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = (s >> 40) as f32 / (1u64 << 24) as f32;
            let v = (lo + span * u) * if s >> 39 & 1 == 1 { -1.0 } else { 1.0 };
            switchyard_core::codec::bf16_bits(v).to_le_bytes()
        })
        .collect()
}

/// NaN bytes (bf16 0xffff, f32 0xffffffff): what an unwritten output shows.
pub fn poison(b: &DeviceBuffer) {
    b.write(&vec![0xffu8; b.len()]).unwrap();
}
