//! NVFP4: e2m1 values (1 sign, 2 exponent, 1 mantissa bit: ±{0, 0.5, 1, 1.5,
//! 2, 3, 4, 6}) packed two per byte, low nibble first along K; one e4m3fn
//! scale per [`BLOCK`] elements along K; one f32 global scale per tensor
//! (`weight_scale_2` in HF checkpoints).
//!
//! A weight `w[n, k]` decodes as
//! `e2m1(packed[n, k/2] nibble k%2) * e4m3(scales[n, k/16]) * global_scale`.
use super::fp8::{e4m3_to_f32, f32_to_e4m3, round_half_even, E4M3_MAX};

/// Elements along K that share one e4m3 scale.
pub const BLOCK: usize = 16;
/// Largest e2m1 magnitude.
pub const E2M1_MAX: f32 = 6.0;
/// The eight non-negative e2m1 magnitudes, indexed by the low three bits of a code.
pub const E2M1_VALUES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// Decodes a 4-bit e2m1 code (bit 3 is the sign).
pub fn e2m1_to_f32(code: u8) -> f32 {
    let m = E2M1_VALUES[(code & 7) as usize];
    if code & 8 != 0 {
        -m
    } else {
        m
    }
}

/// Encodes an f32 as e2m1: round to nearest, ties to the even code, saturating at ±6.
/// NaN encodes as 0 (e2m1 has no NaN; the quantiser rejects NaN input first).
pub fn f32_to_e2m1(x: f32) -> u8 {
    let sign = if x.is_sign_negative() { 8u8 } else { 0 };
    let a = x.abs() as f64;
    if a.is_nan() {
        return 0;
    }
    // Grid steps: 0.5 below 2, 1 in [2, 4), 2 in [4, 6].
    let r = if a < 2.0 {
        round_half_even(a * 2.0) / 2.0
    } else if a < 4.0 {
        round_half_even(a)
    } else {
        round_half_even(a / 2.0) * 2.0
    };
    let r = r.min(E2M1_MAX as f64) as f32;
    let code = E2M1_VALUES.iter().position(|&v| v == r).expect("r is on the e2m1 grid") as u8;
    sign | code
}

/// A weight matrix `[n, k]` in NVFP4.
#[derive(Clone, Debug, PartialEq)]
pub struct Nvfp4Matrix {
    /// Rows (output features).
    pub n: usize,
    /// Columns (input features); a multiple of [`BLOCK`].
    pub k: usize,
    /// `[n, k/2]` bytes, low nibble = even column.
    pub packed: Vec<u8>,
    /// `[n, k/16]` e4m3 block scales.
    pub scales: Vec<u8>,
    /// Global scale (`weight_scale_2`).
    pub global_scale: f32,
}

/// Why a matrix cannot be quantised.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuantizeError {
    /// K is not a multiple of the scale block.
    #[error("nvfp4: k = {0} is not a multiple of the {BLOCK}-element scale block")]
    KNotBlockMultiple(usize),
    /// Slice length does not match the shape.
    #[error("nvfp4: {len} values for a [{n}, {k}] matrix")]
    ShapeMismatch {
        /// Values given.
        len: usize,
        /// Rows.
        n: usize,
        /// Columns.
        k: usize,
    },
    /// Input holds NaN or infinity at this index.
    #[error("nvfp4: non-finite value at index {0}")]
    NonFinite(usize),
}

/// Quantises a row-major `[n, k]` matrix: global scale = amax / (6 · 448), so
/// that the largest block scale lands at the top of e4m3's range; each block
/// scale = e4m3(block_amax / 6 / global); each value = e2m1(x / (scale · global)).
pub fn quantize(values: &[f32], n: usize, k: usize) -> Result<Nvfp4Matrix, QuantizeError> {
    if k % BLOCK != 0 {
        return Err(QuantizeError::KNotBlockMultiple(k));
    }
    if values.len() != n * k {
        return Err(QuantizeError::ShapeMismatch { len: values.len(), n, k });
    }
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(QuantizeError::NonFinite(i));
    }
    let amax = values.iter().fold(0f32, |m, v| m.max(v.abs()));
    let global_scale = if amax > 0.0 { amax / (E2M1_MAX * E4M3_MAX) } else { 1.0 };
    let mut packed = vec![0u8; n * k / 2];
    let mut scales = vec![0u8; n * k / BLOCK];
    for (bi, block) in values.chunks_exact(BLOCK).enumerate() {
        let bmax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let s = f32_to_e4m3(bmax / E2M1_MAX / global_scale);
        scales[bi] = s;
        let step = e4m3_to_f32(s) * global_scale;
        for (j, &x) in block.iter().enumerate() {
            let code = if step > 0.0 { f32_to_e2m1(x / step) } else { 0 };
            let idx = bi * BLOCK + j;
            packed[idx / 2] |= code << (4 * (idx % 2));
        }
    }
    Ok(Nvfp4Matrix { n, k, packed, scales, global_scale })
}

impl Nvfp4Matrix {
    /// Decoded value at `[row, col]`: `(e2m1 · scale) · global`, in f32 in that order.
    pub fn get(&self, row: usize, col: usize) -> f32 {
        let idx = row * self.k + col;
        let code = (self.packed[idx / 2] >> (4 * (idx % 2))) & 0xf;
        e2m1_to_f32(code) * e4m3_to_f32(self.scales[idx / BLOCK]) * self.global_scale
    }

    /// The K-major ("transposed") device layout the W4A16 kernels read, with
    /// row stride `ldb >= n` bytes and the pad columns zero-filled:
    /// `packed[kp][col] = code(col, 2kp) | code(col, 2kp+1) << 4` (`[k/2, ldb]`)
    /// and `scales[kb][col]` (`[k/16, ldb]`). Consecutive output columns are
    /// adjacent in memory, so a warp's loads along N coalesce.
    pub fn k_major(&self, ldb: usize) -> (Vec<u8>, Vec<u8>) {
        assert!(ldb >= self.n, "k_major: ldb {ldb} < n {}", self.n);
        let mut packed = vec![0u8; self.k / 2 * ldb];
        let mut scales = vec![0u8; self.k / BLOCK * ldb];
        for col in 0..self.n {
            for kp in 0..self.k / 2 {
                packed[kp * ldb + col] = self.packed[(col * self.k) / 2 + kp];
            }
            for kb in 0..self.k / BLOCK {
                scales[kb * ldb + col] = self.scales[col * (self.k / BLOCK) + kb];
            }
        }
        (packed, scales)
    }

    /// The whole matrix decoded, row-major.
    pub fn dequantize(&self) -> Vec<f32> {
        (0..self.n * self.k).map(|i| self.get(i / self.k, i % self.k)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn nearest_e2m1(x: f64) -> u8 {
        let mut best = 0u8;
        for c in 1u8..8 {
            let d = (E2M1_VALUES[c as usize] as f64 - x.abs()).abs();
            let bd = (E2M1_VALUES[best as usize] as f64 - x.abs()).abs();
            if d < bd || (d == bd && c % 2 == 0) {
                best = c;
            }
        }
        best | if x < 0.0 { 8 } else { 0 }
    }

    #[test]
    fn e2m1_matches_the_f64_model() {
        let mut xs: Vec<f64> = (0..7).map(|i| (E2M1_VALUES[i] as f64 + E2M1_VALUES[i + 1] as f64) / 2.0).collect();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        xs.extend((0..5000).map(|_| rng.random_range(-8.0..8.0)));
        for x in xs {
            assert_eq!(f32_to_e2m1(x as f32), nearest_e2m1(x), "x = {x}");
        }
        for c in 0..16u8 {
            if c != 8 {
                assert_eq!(f32_to_e2m1(e2m1_to_f32(c)), c);
            }
        }
    }

    #[test]
    fn quantize_round_trip_error_is_within_half_a_step() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        let (n, k) = (7, 48);
        let v: Vec<f32> = (0..n * k).map(|_| rng.random_range(-3.0f32..3.0) * 2f32.powi(rng.random_range(-4..3))).collect();
        let q = quantize(&v, n, k).unwrap();
        for r in 0..n {
            for c in 0..k {
                let x = v[r * k + c] as f64;
                let step = e4m3_to_f32(q.scales[(r * k + c) / BLOCK]) as f64 * q.global_scale as f64;
                let deq = q.get(r, c) as f64;
                // Independent f64 model: nearest grid point of x / step, saturated at 6.
                let code = nearest_e2m1(x / step);
                let expect = (e2m1_to_f32(code) * e4m3_to_f32(q.scales[(r * k + c) / BLOCK]) * q.global_scale) as f64;
                assert_eq!(deq, expect, "[{r}, {c}]: x = {x}");
                // And the grid is fine enough: error ≤ half of the largest step (2 · step) in the block.
                assert!((deq - x).abs() <= step + 1e-12 || (x / step).abs() > 6.0, "[{r}, {c}]");
            }
        }
    }

    #[test]
    fn k_major_layout_holds_the_same_codes() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
        let (n, k, ldb) = (5, 32, 16);
        let v: Vec<f32> = (0..n * k).map(|_| rng.random_range(-2.0f32..2.0)).collect();
        let q = quantize(&v, n, k).unwrap();
        let (p, s) = q.k_major(ldb);
        for col in 0..ldb {
            for kk in 0..k {
                let code = (p[(kk / 2) * ldb + col] >> (4 * (kk % 2))) & 0xf;
                let scale = s[(kk / BLOCK) * ldb + col];
                if col < n {
                    let d = e2m1_to_f32(code) * e4m3_to_f32(scale) * q.global_scale;
                    assert_eq!(d, q.get(col, kk), "[{col}, {kk}]");
                } else {
                    assert_eq!((code, scale), (0, 0), "pad column {col} must be zero");
                }
            }
        }
    }

    #[test]
    fn bad_input_is_refused() {
        assert_eq!(quantize(&[0.0; 8], 1, 8), Err(QuantizeError::KNotBlockMultiple(8)));
        assert!(matches!(quantize(&[0.0; 16], 2, 16), Err(QuantizeError::ShapeMismatch { .. })));
        let mut v = vec![1.0; 16];
        v[3] = f32::NAN;
        assert_eq!(quantize(&v, 1, 16), Err(QuantizeError::NonFinite(3)));
    }
}
