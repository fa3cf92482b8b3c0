use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use switchyard_core::codec::{bf16_bits, bf16_value, bytes, fp8};

/// Seeded random inputs: non-zero, mixed sign, in typed host form plus the
/// device bytes.
pub struct Gen {
    /// The generator; public so cases can draw what they need.
    pub rng: SmallRng,
}

impl Gen {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Gen { rng: SmallRng::seed_from_u64(seed) }
    }

    /// `n` non-zero bf16 values with magnitudes in `[lo, hi)` and random sign:
    /// `(values as f32, bytes)`.
    pub fn bf16(&mut self, n: usize, lo: f32, hi: f32) -> (Vec<f32>, Vec<u8>) {
        let v: Vec<f32> = (0..n)
            .map(|_| {
                let m = self.rng.random_range(lo..hi);
                let s = if self.rng.random_bool(0.5) { -1.0 } else { 1.0 };
                let b = bf16_value(bf16_bits(s * m));
                if b == 0.0 {
                    s * hi
                } else {
                    b
                }
            })
            .collect();
        let b = bytes::bf16_bytes(&v);
        (v, b)
    }

    /// `n` f32 values uniform in `[lo, hi)`.
    pub fn f32(&mut self, n: usize, lo: f32, hi: f32) -> (Vec<f32>, Vec<u8>) {
        let v: Vec<f32> = (0..n).map(|_| self.rng.random_range(lo..hi)).collect();
        let b = bytes::f32_bytes(&v);
        (v, b)
    }

    /// `n` i32 values uniform in `[lo, hi)`.
    pub fn i32(&mut self, n: usize, lo: i32, hi: i32) -> (Vec<i32>, Vec<u8>) {
        let v: Vec<i32> = (0..n).map(|_| self.rng.random_range(lo..hi)).collect();
        let b = bytes::i32_bytes(&v);
        (v, b)
    }

    /// `n` bf16 values ±[1, 2) · 2^e, e uniform in `[lo, hi)`: operands whose
    /// sums pass through intermediates many binades apart.
    pub fn binades(&mut self, n: usize, lo: i32, hi: i32) -> Vec<f32> {
        let (m, _) = self.bf16(n, 1.0, 2.0);
        let (e, _) = self.i32(n, lo, hi);
        m.iter().zip(&e).map(|(&m, &e)| m * 2f32.powi(e)).collect()
    }

    /// A random permutation of `0..n`.
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let (keys, _) = self.f32(n, 0.0, 1.0);
        let mut perm: Vec<usize> = (0..n).collect();
        perm.sort_by(|&x, &y| keys[x].total_cmp(&keys[y]));
        perm
    }

    /// An fp8 e4m3 table `[rows, cols]` with per-row f32 scales:
    /// `(codes, scales, decoded values as f32 = e4m3 · scale)`.
    pub fn fp8_table(&mut self, rows: usize, cols: usize) -> (Vec<u8>, Vec<f32>, Vec<f32>) {
        let (v, _) = self.f32(rows * cols, -1.0, 1.0);
        let (codes, scales) = fp8::quantize_rows(&v, rows, cols);
        let decoded = codes.iter().enumerate().map(|(i, &c)| fp8::e4m3_to_f32(c) * scales[i / cols]).collect();
        (codes, scales, decoded)
    }
}

/// Repeats each `row`-long row's first half in its second half in the order
/// `perm` (`row / 2` long), negated where `negate`. Applied to both operands
/// of a dot product with one of them negated, every sum is exactly 0 while
/// its partial sums are not, so the result is its summation order's
/// rounding error alone: data that tells one fixed order from another.
pub fn mirror_halves(perm: &[usize], v: &mut [f32], row: usize, negate: bool) {
    let h = row / 2;
    for r in v.chunks_exact_mut(row) {
        for (i, &q) in perm.iter().enumerate() {
            r[h + i] = if negate { -r[q] } else { r[q] };
        }
    }
}
