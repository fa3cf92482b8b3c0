//! fp8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities;
//! NaN is 0x7f / 0xff; the largest finite magnitude is 448; subnormals step
//! by 2^-9.
//!
//! Encoding rounds to nearest, ties to the even code, and saturates: any
//! finite or infinite magnitude that would round above 448 becomes ±448.

/// Largest finite e4m3fn magnitude.
pub const E4M3_MAX: f32 = 448.0;

/// Decodes one e4m3fn byte.
pub fn e4m3_to_f32(b: u8) -> f32 {
    E4M3_TABLE[b as usize]
}

/// Decoding table for all 256 codes (NaN at 0x7f and 0xff).
pub static E4M3_TABLE: [f32; 256] = build_table();

const fn build_table() -> [f32; 256] {
    let mut t = [0f32; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let exp = ((b >> 3) & 0xf) as i32;
        let man = (b & 7) as f32;
        let mag = if exp == 0xf && (b & 7) == 7 {
            f32::NAN
        } else if exp == 0 {
            man / 8.0 / 64.0 // man * 2^-3 * 2^-6
        } else {
            (1.0 + man / 8.0) * pow2(exp - 7)
        };
        t[i] = if b & 0x80 != 0 { -mag } else { mag };
        i += 1;
    }
    t
}

const fn pow2(e: i32) -> f32 {
    let mut v = 1.0f32;
    let mut k = 0;
    if e >= 0 {
        while k < e {
            v *= 2.0;
            k += 1;
        }
    } else {
        while k < -e {
            v *= 0.5;
            k += 1;
        }
    }
    v
}

/// Encodes an f32 as e4m3fn: round to nearest even, saturate at ±448, NaN → 0x7f/0xff.
pub fn f32_to_e4m3(x: f32) -> u8 {
    let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
    if x.is_nan() {
        return sign | 0x7f;
    }
    let a = x.abs() as f64;
    if a >= E4M3_MAX as f64 {
        return sign | 0x7e;
    }
    // Quantum of the binade holding `a` (subnormals share the 2^-6 binade's 2^-9 step).
    let e = if a == 0.0 { -6 } else { f64_exponent(a).max(-6) };
    let q = 2f64.powi(e - 3);
    let r = round_half_even(a / q) * q;
    if r > E4M3_MAX as f64 {
        return sign | 0x7e;
    }
    sign | encode_exact(r)
}

/// Encodes a non-negative value that is exactly representable.
fn encode_exact(r: f64) -> u8 {
    if r == 0.0 {
        return 0;
    }
    let e = f64_exponent(r);
    if e < -6 {
        (r / 2f64.powi(-9)) as u8
    } else {
        let man = (r / 2f64.powi(e) - 1.0) * 8.0;
        (((e + 7) as u8) << 3) | man as u8
    }
}

pub(crate) fn f64_exponent(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

pub(crate) fn round_half_even(v: f64) -> f64 {
    let f = v.floor();
    let d = v - f;
    if d > 0.5 || (d == 0.5 && f % 2.0 != 0.0) {
        f + 1.0
    } else {
        f
    }
}

/// Quantises a row-major `[rows, cols]` f32 table to e4m3 with one f32 scale
/// per row (`scale = amax / 448`, all-zero rows get scale 1). Returns
/// `(codes, row_scales)`; a value decodes as `e4m3(code) * row_scale`.
pub fn quantize_rows(values: &[f32], rows: usize, cols: usize) -> (Vec<u8>, Vec<f32>) {
    assert_eq!(values.len(), rows * cols, "quantize_rows: values.len() != rows * cols");
    let mut codes = Vec::with_capacity(values.len());
    let mut scales = Vec::with_capacity(rows);
    for row in values.chunks_exact(cols.max(1)).take(rows) {
        let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        let s = if amax > 0.0 { amax / E4M3_MAX } else { 1.0 };
        scales.push(s);
        codes.extend(row.iter().map(|&v| f32_to_e4m3(v / s)));
    }
    (codes, scales)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The f64 model: the nearest finite code by brute force over all codes,
    /// ties to the even code, saturating.
    fn nearest_by_search(x: f64) -> u8 {
        let mut best = 0u8;
        let mut best_d = f64::INFINITY;
        for c in 0u8..=0x7e {
            let d = (E4M3_TABLE[c as usize] as f64 - x.abs()).abs();
            if d < best_d || (d == best_d && c % 2 == 0) {
                best = c;
                best_d = d;
            }
        }
        best | if x < 0.0 { 0x80 } else { 0 }
    }

    #[test]
    fn known_values() {
        assert_eq!(e4m3_to_f32(0x7e), 448.0);
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(e4m3_to_f32(0x38), 1.0);
        assert!(e4m3_to_f32(0x7f).is_nan() && e4m3_to_f32(0xff).is_nan());
        assert_eq!(f32_to_e4m3(1000.0), 0x7e);
        assert_eq!(f32_to_e4m3(-1e9), 0xfe);
        assert_eq!(f32_to_e4m3(f32::INFINITY), 0x7e);
        assert_eq!(f32_to_e4m3(f32::NAN), 0x7f);
        assert_eq!(f32_to_e4m3(-f32::NAN), 0xff);
    }

    #[test]
    fn every_code_round_trips() {
        for c in 0u8..=255 {
            if c & 0x7f == 0x7f {
                continue;
            }
            assert_eq!(f32_to_e4m3(e4m3_to_f32(c)), c, "code {c:#x}");
        }
    }

    #[test]
    fn encoding_matches_the_f64_model() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        // Midpoints between neighbouring codes exercise ties; random values the rest.
        let mut xs: Vec<f64> = (0u8..0x7e).map(|c| (E4M3_TABLE[c as usize] as f64 + E4M3_TABLE[c as usize + 1] as f64) / 2.0).collect();
        xs.extend((0..20000).map(|_| {
            let e: i32 = rng.random_range(-12..10);
            rng.random_range(-1.0..1.0) * 2f64.powi(e)
        }));
        xs.extend([460.0, 463.9, 464.0, 500.0, -470.0]);
        for x in xs {
            let x32 = x as f32;
            assert_eq!(f32_to_e4m3(x32), nearest_by_search(x32 as f64), "x = {x32:e}");
        }
    }
}
