//! bf16 via `half`: round-to-nearest-even on every conversion from f32.
use half::bf16;

/// f32 → bf16 bits, rounding to nearest even (NaN stays NaN).
pub fn bf16_bits(x: f32) -> u16 {
    bf16::from_f32(x).to_bits()
}

/// bf16 bits → f32 (exact).
pub fn bf16_value(bits: u16) -> f32 {
    bf16::from_bits(bits).to_f32()
}

/// Rounds an f32 to the nearest bf16 value, returned as f32.
pub fn bf16_round(x: f32) -> f32 {
    bf16_value(bf16_bits(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_nearest_even() {
        // 1 + 2^-8 is exactly between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
        assert_eq!(bf16_round(1.0 + 2f32.powi(-8)), 1.0);
        // 1 + 3 * 2^-8 is between 1 + 2^-7 (odd) and 1 + 2^-6 (even): goes up.
        assert_eq!(bf16_round(1.0 + 3.0 * 2f32.powi(-8)), 1.0 + 2f32.powi(-6));
        assert!(bf16_round(f32::NAN).is_nan());
        assert_eq!(bf16_round(f32::INFINITY), f32::INFINITY);
    }
}
