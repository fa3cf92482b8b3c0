//! Helpers shared by the CUDA integration tests (each test file is its own
//! crate and uses a subset of them).
#![allow(dead_code)]
use std::sync::Arc;
use switchyard_core::{Backend, DeviceBuffer};

/// `SWITCHYARD_REQUIRE_CUDA=1` (set by scripts/h200_checks.sh) turns a
/// missing device from a skip into a failure.
pub const REQUIRE_CUDA: &str = "SWITCHYARD_REQUIRE_CUDA";

/// The CUDA backend, or `None` after printing why the calling test skips.
pub fn cuda() -> Option<Arc<dyn Backend>> {
    match switchyard_cuda::cuda_backend() {
        Ok(b) => Some(b),
        Err(e) => {
            if std::env::var(REQUIRE_CUDA).is_ok_and(|v| v == "1") {
                panic!("{REQUIRE_CUDA}=1 but {e}");
            }
            println!("SKIPPED (no CUDA device): {e}");
            None
        }
    }
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
