//! Tolerances and comparisons for parity tests.
//!
//! Every failure message names the worst index, the actual and expected
//! values and the tolerance, as burn's and ggml's checkers do.
use crate::codec::bf16_value;
use std::fmt;

/// Host copy of one kernel output, typed.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// bf16 bit patterns.
    Bf16(Vec<u16>),
    /// f32 values.
    F32(Vec<f32>),
    /// i32 values.
    I32(Vec<i32>),
    /// Raw bytes (fp8 / packed codes).
    U8(Vec<u8>),
}

impl Values {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Values::Bf16(v) => v.len(),
            Values::F32(v) => v.len(),
            Values::I32(v) => v.len(),
            Values::U8(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn as_f64(&self, i: usize) -> f64 {
        match self {
            Values::Bf16(v) => bf16_value(v[i]) as f64,
            Values::F32(v) => v[i] as f64,
            Values::I32(v) => v[i] as f64,
            Values::U8(v) => v[i] as f64,
        }
    }

    fn bits(&self, i: usize) -> u64 {
        match self {
            Values::Bf16(v) => v[i] as u64,
            Values::F32(v) => v[i].to_bits() as u64,
            Values::I32(v) => v[i] as u32 as u64,
            Values::U8(v) => v[i] as u64,
        }
    }

    fn show(&self, i: usize) -> String {
        match self {
            Values::Bf16(v) => format!("{} (bf16 {:#06x})", bf16_value(v[i]), v[i]),
            Values::F32(v) => format!("{:e}", v[i]),
            Values::I32(v) => v[i].to_string(),
            Values::U8(v) => format!("{:#04x}", v[i]),
        }
    }
}

/// How close an output must be to the reference.
#[derive(Clone, Debug, PartialEq)]
pub enum Tolerance {
    /// Bit-identical.
    Exact,
    /// bf16 outputs within this many units in the last place.
    Bf16Ulp(u32),
    /// bf16 outputs within `ulps` units in the last place of
    /// max(|expected|, `magnitude[i]`): for a value built from a rounded sum
    /// whose addends may cancel (a residual add), `magnitude[i]` is the
    /// largest addend carried through the scaling after it, since a 1-ulp
    /// freedom in an addend is that many ulps of the addend, not of the
    /// (possibly much smaller) sum.
    Bf16UlpOf {
        /// Units in the last place allowed.
        ulps: u32,
        /// Per-element magnitude whose ulp is the unit.
        magnitude: Vec<f64>,
    },
    /// |actual − expected| ≤ rel · `bound[i]` per element; for dot products
    /// `bound[i]` is Σ|aⱼbⱼ| of that element.
    ScaledAbs {
        /// Relative factor (1e-5 for f32 dot products).
        rel: f64,
        /// Per-element magnitude the factor applies to.
        bound: Vec<f64>,
    },
    /// Normalised mean squared error Σ(a−e)² / Σe² at most this.
    Nmse(f64),
}

impl Tolerance {
    /// The f32 dot-product parity rule (ARCHITECTURE.md): 1e-5 · Σ|aᵢbᵢ| per element.
    pub fn dot(bound: Vec<f64>) -> Self {
        Tolerance::ScaledAbs { rel: 1e-5, bound }
    }
}

impl fmt::Display for Tolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tolerance::Exact => write!(f, "exact"),
            Tolerance::Bf16Ulp(n) => write!(f, "<= {n} bf16 ulp"),
            Tolerance::Bf16UlpOf { ulps, .. } => write!(f, "<= {ulps} bf16 ulp of the addends"),
            Tolerance::ScaledAbs { rel, .. } => write!(f, "<= {rel:e}·Σ|ab|"),
            Tolerance::Nmse(t) => write!(f, "NMSE <= {t:e}"),
        }
    }
}

/// Outcome of a comparison: the worst element and how many failed.
#[derive(Clone, Debug)]
pub struct Report {
    /// Largest error in the tolerance's own unit (ulp, absolute, bits, NMSE).
    pub max_err: f64,
    /// Index of the worst element (or the first failing one).
    pub worst: usize,
    /// Elements outside tolerance (for NMSE: 0 or the element count).
    pub failures: usize,
    /// Elements compared.
    pub total: usize,
    /// Worst element's actual value, formatted.
    pub actual: String,
    /// Worst element's expected value, formatted.
    pub expected: String,
    /// The tolerance, formatted.
    pub tolerance: String,
}

impl Report {
    /// Whether every element is within tolerance.
    pub fn passed(&self) -> bool {
        self.failures == 0
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} elements outside tolerance {}; worst at index {}: actual {}, expected {} (error {:e})",
            self.failures, self.total, self.tolerance, self.worst, self.actual, self.expected, self.max_err
        )
    }
}

/// The spacing of bf16 values at magnitude `x` (x ≥ 0): 2^(e − 7) for x in
/// [2^e, 2^(e+1)), the subnormal spacing 2^−133 below the normal range.
pub fn bf16_ulp_at(x: f64) -> f64 {
    const MIN_NORMAL: f64 = 1.175_494_350_822_287_5e-38; // 2^-126
    if !(x >= MIN_NORMAL) {
        return 2f64.powi(-133);
    }
    // The f64 exponent of x, exactly.
    let e = ((x.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    2f64.powi(e - 7)
}

/// Distance in bf16 units in the last place, via the sign-magnitude → ordered
/// integer map. Identical bit patterns (NaN included) are 0; NaN against
/// anything else is `u32::MAX`.
pub fn bf16_ulp_distance(a: u16, b: u16) -> u32 {
    if a == b {
        return 0;
    }
    let nan = |x: u16| (x & 0x7f80) == 0x7f80 && (x & 0x7f) != 0;
    if nan(a) || nan(b) {
        return u32::MAX;
    }
    let ord = |x: u16| -> i32 {
        if x & 0x8000 != 0 {
            -((x & 0x7fff) as i32)
        } else {
            x as i32
        }
    };
    (ord(a) - ord(b)).unsigned_abs()
}

/// Normalised mean squared error Σ(a−e)² / Σe² (0 when both are all zero).
pub fn nmse(actual: &[f64], expected: &[f64]) -> f64 {
    let num: f64 = actual.iter().zip(expected).map(|(a, e)| (a - e).powi(2)).sum();
    let den: f64 = expected.iter().map(|e| e * e).sum();
    if den == 0.0 {
        if num == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        num / den
    }
}

/// Largest |a − e| and its index.
pub fn max_abs_diff(actual: &[f64], expected: &[f64]) -> (f64, usize) {
    actual
        .iter()
        .zip(expected)
        .enumerate()
        .map(|(i, (a, e))| (if a.is_nan() || e.is_nan() { f64::INFINITY } else { (a - e).abs() }, i))
        .fold((0.0, 0), |best, x| if x.0 > best.0 { x } else { best })
}

/// Compares `actual` to `expected` under `tol`. Both must be the same variant
/// and length; a mismatch there is reported as a failure of every element.
pub fn compare(actual: &Values, expected: &Values, tol: &Tolerance) -> Report {
    let total = expected.len();
    let mut rep =
        Report { max_err: 0.0, worst: 0, failures: 0, total, actual: String::new(), expected: String::new(), tolerance: tol.to_string() };
    if std::mem::discriminant(actual) != std::mem::discriminant(expected) || actual.len() != total {
        rep.failures = total.max(1);
        rep.max_err = f64::INFINITY;
        rep.actual = format!("{} elements of another type or length", actual.len());
        rep.expected = format!("{total} elements");
        return rep;
    }
    let mut first_fail = None;
    let mut consider = |i: usize, err: f64, ok: bool, rep: &mut Report| {
        if !ok {
            rep.failures += 1;
            first_fail.get_or_insert(i);
        }
        if err > rep.max_err || (err.is_nan() && !rep.max_err.is_nan()) {
            rep.max_err = err;
            rep.worst = i;
        }
    };
    match tol {
        Tolerance::Exact => {
            for i in 0..total {
                let same = actual.bits(i) == expected.bits(i);
                let err = if same { 0.0 } else { (actual.as_f64(i) - expected.as_f64(i)).abs().max(f64::MIN_POSITIVE) };
                consider(i, if err.is_nan() { f64::INFINITY } else { err }, same, &mut rep);
            }
        }
        Tolerance::Bf16Ulp(n) => {
            let (Values::Bf16(a), Values::Bf16(e)) = (actual, expected) else {
                rep.failures = total;
                rep.tolerance = format!("{tol} (not a bf16 output)");
                return rep;
            };
            for i in 0..total {
                let d = bf16_ulp_distance(a[i], e[i]);
                consider(i, d as f64, d <= *n, &mut rep);
            }
        }
        Tolerance::Bf16UlpOf { ulps, magnitude } => {
            let (Values::Bf16(a), Values::Bf16(e)) = (actual, expected) else {
                rep.failures = total;
                rep.tolerance = format!("{tol} (not a bf16 output)");
                return rep;
            };
            for i in 0..total {
                let (av, ev) = (bf16_value(a[i]) as f64, bf16_value(e[i]) as f64);
                // Error in ulps of the larger of the value and its addends' magnitude.
                let d = if a[i] == e[i] {
                    0.0
                } else if av.is_nan() || ev.is_nan() {
                    f64::INFINITY
                } else {
                    let unit = bf16_ulp_at(ev.abs().max(magnitude.get(i).copied().unwrap_or(0.0)));
                    (av - ev).abs() / unit
                };
                consider(i, d, d <= *ulps as f64, &mut rep);
            }
        }
        Tolerance::ScaledAbs { rel, bound } => {
            for i in 0..total {
                let (a, e) = (actual.as_f64(i), expected.as_f64(i));
                let lim = rel * bound.get(i).copied().unwrap_or(0.0);
                let d = if a.is_nan() || e.is_nan() {
                    if actual.bits(i) == expected.bits(i) {
                        0.0
                    } else {
                        f64::INFINITY
                    }
                } else if a == e {
                    0.0
                } else {
                    (a - e).abs()
                };
                consider(i, d, d <= lim, &mut rep);
            }
        }
        Tolerance::Nmse(t) => {
            let a: Vec<f64> = (0..total).map(|i| actual.as_f64(i)).collect();
            let e: Vec<f64> = (0..total).map(|i| expected.as_f64(i)).collect();
            let v = nmse(&a, &e);
            let (_, worst) = max_abs_diff(&a, &e);
            rep.max_err = v;
            rep.worst = worst;
            rep.failures = if v <= *t { 0 } else { total };
        }
    }
    if let Some(i) = first_fail {
        if rep.max_err.is_finite() && rep.failures > 0 && matches!(tol, Tolerance::Exact) {
            rep.worst = i;
        }
    }
    if total > 0 {
        rep.actual = actual.show(rep.worst);
        rep.expected = expected.show(rep.worst);
    }
    rep
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::bf16_bits;

    #[test]
    fn ulps_of_the_addends_measure_a_cancelled_sum_by_its_addends() {
        assert_eq!(bf16_ulp_at(1.0), 2f64.powi(-7));
        assert_eq!(bf16_ulp_at(1.5), 2f64.powi(-7));
        assert_eq!(bf16_ulp_at(0.25), 2f64.powi(-9));
        assert_eq!(bf16_ulp_at(0.0), 2f64.powi(-133));
        // 0.2109375 against 0.21582031 (lavapipe, a residual add at seed 3601): 5 ulps
        // of the sum, 0.625 of addends around 1.
        let (a, e) = (Values::Bf16(vec![0x3e5d, 0x3f80]), Values::Bf16(vec![0x3e58, 0x3f80]));
        assert_eq!(compare(&a, &e, &Tolerance::Bf16Ulp(2)).failures, 1);
        let of = |m: f64| Tolerance::Bf16UlpOf { ulps: 2, magnitude: vec![m, 0.0] };
        let r = compare(&a, &e, &of(1.0));
        assert_eq!((r.failures, r.max_err), (0, 0.625));
        // Without a large addend the sum's own ulp is the unit; NaN only matches itself.
        assert_eq!(compare(&a, &e, &of(0.0)).failures, 1);
        let nan = Values::Bf16(vec![0x7fc0, 0x3f80]);
        assert_eq!(compare(&nan, &e, &of(1.0)).failures, 1);
        assert_eq!(compare(&nan, &nan, &of(1.0)).failures, 0);
    }

    #[test]
    fn ulp_distance() {
        assert_eq!(bf16_ulp_distance(bf16_bits(1.0), bf16_bits(1.0)), 0);
        assert_eq!(bf16_ulp_distance(0x3f80, 0x3f81), 1);
        assert_eq!(bf16_ulp_distance(0x0000, 0x8000), 0 + 0); // +0 and -0 map to the same point
        assert_eq!(bf16_ulp_distance(0x0001, 0x8001), 2);
        assert_eq!(bf16_ulp_distance(0x7fc0, 0x3f80), u32::MAX);
    }

    #[test]
    fn report_names_index_values_and_tolerance() {
        let a = Values::Bf16(vec![bf16_bits(1.0), bf16_bits(2.0), bf16_bits(3.0)]);
        let e = Values::Bf16(vec![bf16_bits(1.0), bf16_bits(2.5), bf16_bits(3.0)]);
        let r = compare(&a, &e, &Tolerance::Bf16Ulp(1));
        assert!(!r.passed());
        let msg = r.to_string();
        assert!(msg.contains("index 1") && msg.contains("actual 2") && msg.contains("expected 2.5") && msg.contains("1 bf16 ulp"), "{msg}");
    }

    #[test]
    fn scaled_abs_and_nmse() {
        let a = Values::F32(vec![1.0, 2.0 + 1e-6]);
        let e = Values::F32(vec![1.0, 2.0]);
        assert!(compare(&a, &e, &Tolerance::dot(vec![1.0, 1.0])).passed());
        assert!(!compare(&a, &e, &Tolerance::dot(vec![1.0, 0.01])).passed());
        assert!(compare(&a, &e, &Tolerance::Nmse(1e-6)).passed());
        let nan = Values::F32(vec![f32::NAN, 2.0]);
        assert!(!compare(&nan, &e, &Tolerance::dot(vec![1.0, 1.0])).passed());
        assert!(!compare(&Values::I32(vec![1, 2]), &Values::I32(vec![1, 3]), &Tolerance::Exact).passed());
    }
}
