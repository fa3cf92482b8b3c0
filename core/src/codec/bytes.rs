//! Little-endian conversions between typed host slices and device bytes.
use super::bf16::{bf16_bits, bf16_value};

/// f32 values → bf16 bytes (rounded to nearest even).
pub fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|&x| bf16_bits(x).to_le_bytes()).collect()
}

/// bf16 bytes → bit patterns.
pub fn bf16_bits_from_bytes(b: &[u8]) -> Vec<u16> {
    b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
}

/// bf16 bytes → f32 values.
pub fn bf16_from_bytes(b: &[u8]) -> Vec<f32> {
    bf16_bits_from_bytes(b).into_iter().map(bf16_value).collect()
}

/// f32 values → bytes.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// bytes → f32 values.
pub fn f32_from_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// i32 values → bytes.
pub fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// bytes → i32 values.
pub fn i32_from_bytes(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
