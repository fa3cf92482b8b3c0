//! Numeric codecs shared by every backend and by the tests.
//!
//! - bf16: `half`'s round-to-nearest-even conversion.
//! - fp8 e4m3fn: [`fp8`], round-to-nearest-even, saturating at 448, NaN = 0x7f/0xff.
//! - NVFP4: [`nvfp4`], e2m1 values packed two per byte with an e4m3 scale per
//!   16 elements along K and an f32 global scale.
pub mod bf16;
pub mod bytes;
pub mod fp8;
pub mod nvfp4;

pub use bf16::{bf16_bits, bf16_round, bf16_value};
