//! Helpers shared by the CUDA benchmark examples (each example uses a subset).
#![allow(dead_code)]
use std::sync::Arc;
use switchyard_core::{Backend, Result};

/// A small deterministic generator (64-bit LCG) for benchmark inputs.
pub struct Lcg(pub u64);

impl Lcg {
    /// The next 31 random bits.
    pub fn next(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        self.next() as f32 / (1u64 << 31) as f32 * 2.0 - 1.0
    }
}

/// Little-endian bytes of `v`.
pub fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A benchmark's device buffers: allocations are recorded in `held` so the
/// benchmark can free them together.
pub trait Buffers {
    /// The device.
    fn backend(&self) -> &Arc<dyn Backend>;
    /// The allocations made so far.
    fn held(&mut self) -> &mut Vec<u64>;

    /// A new buffer holding `data`.
    fn buf(&mut self, data: &[u8]) -> Result<u64> {
        let a = self.backend().alloc(data.len())?;
        self.backend().upload(a, data)?;
        self.held().push(a);
        Ok(a)
    }
    /// A new buffer of `n` zero bytes.
    fn zeros(&mut self, n: usize) -> Result<u64> {
        let a = self.backend().alloc(n)?;
        self.backend().memset0(a, n)?;
        self.held().push(a);
        Ok(a)
    }
}

/// Implements [`Buffers`] for a struct with fields `be: Arc<dyn Backend>` and
/// `bufs: Vec<u64>`.
macro_rules! buffers_in_fields {
    ($t:ty) => {
        impl $crate::common::Buffers for $t {
            fn backend(&self) -> &std::sync::Arc<dyn switchyard_core::Backend> {
                &self.be
            }
            fn held(&mut self) -> &mut Vec<u64> {
                &mut self.bufs
            }
        }
    };
}
pub(crate) use buffers_in_fields;
