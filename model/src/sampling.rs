//! Choosing the next token from a pass's logits: greedy, or sampled after
//! HF transformers' logits processors, in HF's order (`generate` with
//! `do_sample=True` applies the repetition penalty among the processors,
//! then the warpers temperature, top-k, top-p, min-p).
//!
//! # Where the candidates come from, and what that costs
//!
//! The filters and the draw work on [`Candidates`]: token ids with their
//! logits, any subset of the vocabulary that holds every token the filters
//! would keep. Today [`Candidates::from_logits`] builds them on the host
//! from the whole row that [`crate::graph::Session`] downloads when asked for
//! logits: `vocab × 4` bytes a step ([`logits_bytes_per_step`]; 1 MiB at
//! Gemma 4's 262,144). Greedy decoding without a repetition penalty needs no
//! logits (the device argmax returns one id, 4 bytes).
//!
//! That boundary is where a device-side filter slots in: a kernel that
//! returns the row's top `K` (ids and values, `8·K` bytes) produces the same
//! `Candidates`, and the draw is the same as long as `K` is at least
//! [`SamplingParams::candidates_needed`]: top-k plus the distinct tokens the
//! repetition penalty may push out of it. Top-p and min-p alone bound
//! nothing, so without top-k the whole row is needed. The draw sorts the
//! candidates by (logit descending, id ascending) before walking them, so
//! the token drawn does not depend on the order a source delivers them in.
//!
//! # Reproducibility
//!
//! [`Rng`] is xoshiro256** seeded through SplitMix64, written out here so
//! that a seed means the same stream on every platform and every version of
//! every dependency; a [`Sampler`] owns its generator (no thread-local or
//! global state). A seeded run repeats exactly on one backend; across
//! backends the logits differ in their last bits, which can flip a draw.
use crate::error::{Error, Result};
use crate::graph::RowOut;
use std::collections::HashSet;

/// Bytes of logits a step downloads for host-side sampling of one row.
pub fn logits_bytes_per_step(vocab: usize) -> usize {
    vocab.saturating_mul(4)
}

/// How the next token is chosen. The neutral value of each filter turns it
/// off: `top_k` 0, `top_p` 1, `min_p` 0, `repetition_penalty` 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 is greedy (argmax); otherwise logits are divided by it and a token
    /// is drawn.
    pub temperature: f32,
    /// Keep the `top_k` highest logits (ties with the k-th kept, as HF).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches
    /// `top_p` (HF's rule: drop the tail whose cumulative mass is at most
    /// `1 − top_p`).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one.
    pub min_p: f32,
    /// HF's repetition penalty on every token of the prompt and the output:
    /// positive logits divided by it, negative ones multiplied.
    pub repetition_penalty: f32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self::greedy()
    }
}

impl SamplingParams {
    /// Argmax, no penalty.
    pub fn greedy() -> Self {
        SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0, min_p: 0.0, repetition_penalty: 1.0 }
    }

    /// Whether the values are usable; the error names the parameter.
    pub fn validate(&self) -> Result<()> {
        let bad = |name: &str, v: f32, want: &str| Err(Error::Request(format!("{name} = {v}: {want}")));
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return bad("temperature", self.temperature, "must be a finite number ≥ 0 (0 = greedy)");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", self.top_p, "must be in (0, 1] (1 = off)");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", self.min_p, "must be in [0, 1] (0 = off)");
        }
        if !self.repetition_penalty.is_finite() || self.repetition_penalty <= 0.0 {
            return bad("repetition_penalty", self.repetition_penalty, "must be a finite number > 0 (1 = off)");
        }
        Ok(())
    }

    /// Greedy decoding (temperature 0).
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Whether choosing a token reads the logits (everything but plain
    /// greedy, which the device argmax answers).
    pub fn needs_logits(&self) -> bool {
        !self.is_greedy() || self.repetition_penalty != 1.0
    }

    /// The fewest candidates (highest logits first) a device-side filter
    /// must return for the draw to equal the one over the whole row, given
    /// `distinct_history` distinct tokens in the prompt and output; `None`
    /// when the whole row is needed (no top-k, or greedy with a penalty).
    /// Ties at the k-th logit are kept by HF; a source that cuts through a
    /// tie changes the draw only among the tied tokens.
    pub fn candidates_needed(&self, distinct_history: usize) -> Option<usize> {
        if self.is_greedy() {
            return if self.repetition_penalty == 1.0 { Some(1) } else { None };
        }
        if self.top_k == 0 {
            return None;
        }
        // A penalty lowers logits, so each penalised token can let one
        // token from beyond the first k into the top k.
        let extra = if self.repetition_penalty == 1.0 { 0 } else { distinct_history };
        Some(self.top_k.saturating_add(extra))
    }
}

/// Tokens a sampler may choose from, with their logits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Candidates {
    /// Token ids (distinct).
    pub ids: Vec<u32>,
    /// `logits[i]` belongs to `ids[i]`.
    pub logits: Vec<f32>,
}

impl Candidates {
    /// Every token of a vocabulary row. A NaN or +∞ logit is an error (no
    /// distribution can be formed from it); −∞ is a token that cannot be
    /// chosen.
    pub fn from_logits(logits: &[f32]) -> Result<Self> {
        if let Some(i) = logits.iter().position(|l| l.is_nan() || *l == f32::INFINITY) {
            return Err(Error::Numeric(format!("the logit of token {i} is {} (no distribution to sample)", logits[i])));
        }
        let ids = (0..logits.len())
            .map(|i| u32::try_from(i).map_err(|_| Error::Request("vocabulary past 2^32".into())))
            .collect::<Result<_>>()?;
        Ok(Candidates { ids, logits: logits.to_vec() })
    }

    /// The candidates of one pass's output row (today the whole row of
    /// logits; see the module notes for the device-side top-k that would
    /// fill this instead).
    pub fn of_row(row: &RowOut) -> Result<Self> {
        match &row.logits {
            Some(l) => Self::from_logits(l),
            None => Err(Error::Request("sampling needs the pass's logits, and the pass returned none".into())),
        }
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    fn retain(&mut self, keep: impl Fn(f32) -> bool) {
        let mut w = 0;
        for r in 0..self.ids.len() {
            if keep(self.logits[r]) {
                self.ids[w] = self.ids[r];
                self.logits[w] = self.logits[r];
                w += 1;
            }
        }
        self.ids.truncate(w);
        self.logits.truncate(w);
    }

    /// Indices by (logit descending, id ascending): a total order, so the
    /// result does not depend on the order the candidates arrived in.
    fn ranked(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.len()).collect();
        order.sort_by(|&a, &b| self.logits[b].total_cmp(&self.logits[a]).then(self.ids[a].cmp(&self.ids[b])));
        order
    }

    /// `exp(l − max)` per candidate in f64 (unnormalised softmax), and the max.
    fn weights(&self) -> (Vec<f64>, f64) {
        let max = self.logits.iter().fold(f64::NEG_INFINITY, |m, &l| m.max(l as f64));
        (self.logits.iter().map(|&l| ((l as f64) - max).exp()).collect(), max)
    }
}

/// HF's `RepetitionPenaltyLogitsProcessor`: every candidate that occurs in
/// `history` (prompt and output so far) has a positive logit divided by
/// `penalty` and a negative one multiplied by it, once however often it
/// occurred.
pub fn apply_repetition_penalty(c: &mut Candidates, history: &[u32], penalty: f32) {
    if penalty == 1.0 || history.is_empty() {
        return;
    }
    let seen: HashSet<u32> = history.iter().copied().collect();
    for (id, l) in c.ids.iter().zip(c.logits.iter_mut()) {
        if seen.contains(id) {
            *l = if *l < 0.0 { *l * penalty } else { *l / penalty };
        }
    }
}

/// HF's `TemperatureLogitsWarper`: logits divided by `t` (> 0), in f32 as HF.
pub fn apply_temperature(c: &mut Candidates, t: f32) {
    if t != 1.0 {
        for l in &mut c.logits {
            *l /= t;
        }
    }
}

/// HF's `TopKLogitsWarper`: keeps the candidates whose logit is at least the
/// k-th highest (so ties with it stay). `k` 0 or ≥ the count keeps all.
pub fn apply_top_k(c: &mut Candidates, k: usize) {
    if k == 0 || k >= c.len() {
        return;
    }
    // Selection, not a sort: linear in the vocabulary (262,144 logits a step).
    let mut v = c.logits.clone();
    let (_, kth, _) = v.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
    let kth = *kth;
    c.retain(|l| l >= kth);
}

/// HF's `TopPLogitsWarper`: with the candidates sorted by probability,
/// drops the least likely ones whose cumulative probability (counted from
/// the least likely up) is at most `1 − p`; the most likely always stays.
/// Probabilities in f64.
pub fn apply_top_p(c: &mut Candidates, p: f32) {
    if p >= 1.0 || c.len() <= 1 {
        return;
    }
    let (w, _) = c.weights();
    let total: f64 = w.iter().sum();
    let order = c.ranked();
    let cut = 1.0 - p as f64;
    // Walk up from the least likely; `tail` is the mass of it and everything below.
    let mut keep = vec![false; c.len()];
    let mut tail = 0.0;
    for (rank, &i) in order.iter().enumerate().rev() {
        tail += w[i] / total;
        keep[i] = rank == 0 || tail > cut;
    }
    retain_marked(c, &keep);
}

/// HF's `MinPLogitsWarper`: drops candidates whose probability is below
/// `p` times the most likely one's, i.e. `exp(l − max) < p` (f64).
pub fn apply_min_p(c: &mut Candidates, p: f32) {
    if p <= 0.0 || c.is_empty() {
        return;
    }
    let (w, _) = c.weights();
    let keep: Vec<bool> = w.iter().map(|&x| x >= p as f64).collect();
    retain_marked(c, &keep);
}

fn retain_marked(c: &mut Candidates, keep: &[bool]) {
    let (ids, logits) = c.ids.iter().zip(&c.logits).zip(keep).filter(|(_, &k)| k).map(|((&id, &l), _)| (id, l)).unzip();
    c.ids = ids;
    c.logits = logits;
}

/// The probability of each candidate after softmax, in the candidates'
/// order (f64): what [`draw`] samples from.
pub fn probabilities(c: &Candidates) -> Vec<f64> {
    let (w, _) = c.weights();
    let total: f64 = w.iter().sum();
    w.into_iter().map(|x| x / total).collect()
}

/// Draws one candidate with probability softmax(logits): a uniform number
/// in [0, total weight) walked along the candidates ranked by (logit
/// descending, id ascending).
pub fn draw(c: &Candidates, rng: &mut Rng) -> Result<u32> {
    let (w, max) = c.weights();
    if c.is_empty() || max == f64::NEG_INFINITY {
        return Err(Error::Numeric("no token is left to sample (every candidate's logit is −∞)".into()));
    }
    let order = c.ranked();
    let total: f64 = order.iter().map(|&i| w[i]).sum();
    let u = rng.next_f64() * total;
    let mut acc = 0.0;
    for &i in &order {
        acc += w[i];
        if u < acc {
            return Ok(c.ids[i]);
        }
    }
    // Rounding left u at or past the last sum: the last token with weight.
    let last = order.iter().rev().find(|&&i| w[i] > 0.0).copied().unwrap_or(order[0]);
    Ok(c.ids[last])
}

/// The highest logit, lowest id on ties (the device argmax's rule).
pub fn argmax(c: &Candidates) -> Result<u32> {
    c.ranked().first().map(|&i| c.ids[i]).ok_or_else(|| Error::Numeric("no candidates to choose from".into()))
}

/// xoshiro256** (Blackman and Vigna), seeded by SplitMix64: a small,
/// fast generator whose stream is fixed by this code alone.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// The generator for `seed` (every seed is valid, 0 included).
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Rng { s: [next(), next(), next(), next()] }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1), 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Chooses tokens by [`SamplingParams`] with its own seeded [`Rng`].
#[derive(Clone, Debug)]
pub struct Sampler {
    /// The parameters (validated).
    pub params: SamplingParams,
    rng: Rng,
}

impl Sampler {
    /// A sampler for `params` seeded with `seed`; invalid params are refused.
    pub fn new(params: SamplingParams, seed: u64) -> Result<Self> {
        params.validate()?;
        Ok(Sampler { params, rng: Rng::new(seed) })
    }

    /// The next token from `c`, with `history` the prompt and output so far:
    /// repetition penalty, then (sampling) temperature, top-k, top-p, min-p
    /// and a draw, or (greedy) the argmax.
    pub fn choose(&mut self, mut c: Candidates, history: &[u32]) -> Result<u32> {
        let p = self.params;
        apply_repetition_penalty(&mut c, history, p.repetition_penalty);
        if p.is_greedy() {
            return argmax(&c);
        }
        apply_temperature(&mut c, p.temperature);
        apply_top_k(&mut c, p.top_k);
        apply_top_p(&mut c, p.top_p);
        apply_min_p(&mut c, p.min_p);
        draw(&c, &mut self.rng)
    }
}

impl crate::generate::Picker for Sampler {
    fn needs_logits(&self) -> bool {
        self.params.needs_logits()
    }

    fn pick(&mut self, row: &RowOut, history: &[u32]) -> Result<u32> {
        if !self.params.needs_logits() {
            return Ok(row.token);
        }
        self.choose(Candidates::of_row(row)?, history)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(logits: &[f32]) -> Candidates {
        Candidates::from_logits(logits).unwrap()
    }

    fn sorted_ids(c: &Candidates) -> Vec<u32> {
        let mut v = c.ids.clone();
        v.sort();
        v
    }

    #[test]
    fn repetition_penalty_divides_positive_and_multiplies_negative_once() {
        let mut c = cands(&[2.0, -1.0, 0.5, 3.0]);
        // Token 0 twice, token 1 once; 2 and 3 untouched.
        apply_repetition_penalty(&mut c, &[0, 1, 0], 2.0);
        assert_eq!(c.logits, [1.0, -2.0, 0.5, 3.0]);
    }

    #[test]
    fn temperature_scales_every_logit() {
        let mut c = cands(&[1.0, -0.5, 2.0]);
        apply_temperature(&mut c, 0.5);
        assert_eq!(c.logits, [2.0, -1.0, 4.0]);
    }

    #[test]
    fn top_k_keeps_ties_with_the_kth() {
        let mut c = cands(&[0.1, 3.0, 2.0, 2.0, -1.0]);
        apply_top_k(&mut c, 2);
        // The 2nd highest is 2.0, held by ids 2 and 3: both stay.
        assert_eq!(sorted_ids(&c), [1, 2, 3]);
        let mut c = cands(&[0.1, 3.0, 2.0, 1.0]);
        apply_top_k(&mut c, 1);
        assert_eq!(c.ids, [1]);
        let mut c = cands(&[0.1, 3.0]);
        apply_top_k(&mut c, 0);
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn top_p_drops_the_tail_at_most_one_minus_p() {
        // Probabilities 0.5, 0.25, 0.125, 0.125 (logits ln of them).
        let l = [0.5f32.ln(), 0.25f32.ln(), 0.125f32.ln(), 0.125f32.ln()];
        // p = 0.7: tail masses from the bottom: 0.125, 0.25, 0.5, 1.0.
        // Dropped while ≤ 0.3: the two 0.125s (0.125, 0.25); 0.25's tail is 0.5 > 0.3.
        let mut c = cands(&l);
        apply_top_p(&mut c, 0.7);
        assert_eq!(sorted_ids(&c), [0, 1]);
        // p = 0.5: dropped while ≤ 0.5: both 0.125s and the 0.25 (tail 0.5).
        let mut c = cands(&l);
        apply_top_p(&mut c, 0.5);
        assert_eq!(sorted_ids(&c), [0]);
        // p = 0.8: cut 0.2; only the first 0.125 (tail 0.125) goes. Which of
        // the tied pair ranks lower: the higher id (ranked by id ascending).
        let mut c = cands(&l);
        apply_top_p(&mut c, 0.8);
        assert_eq!(sorted_ids(&c), [0, 1, 2]);
        // p tiny: the most likely always stays.
        let mut c = cands(&l);
        apply_top_p(&mut c, 1e-6);
        assert_eq!(c.ids, [0]);
    }

    #[test]
    fn min_p_scales_with_the_top_probability() {
        // Probability ratios to the top: 1, 0.5, 0.1, 0.01.
        let l = [0.0f32, 0.5f32.ln(), 0.1f32.ln(), 0.01f32.ln()];
        let mut c = cands(&l);
        apply_min_p(&mut c, 0.2);
        assert_eq!(sorted_ids(&c), [0, 1]);
        let mut c = cands(&l);
        apply_min_p(&mut c, 0.05);
        assert_eq!(sorted_ids(&c), [0, 1, 2]);
        let mut c = cands(&l);
        apply_min_p(&mut c, 1.0);
        assert_eq!(c.ids, [0]);
    }

    #[test]
    fn greedy_with_a_penalty_takes_the_argmax_after_it() {
        let mut s = Sampler::new(SamplingParams { repetition_penalty: 4.0, ..SamplingParams::greedy() }, 1).unwrap();
        // Token 2 leads (3.0) but was seen: 3.0 / 4 = 0.75 < token 0's 1.0.
        assert_eq!(s.choose(cands(&[1.0, 0.5, 3.0]), &[2]).unwrap(), 0);
        // Ties go to the lowest id.
        assert_eq!(s.choose(cands(&[1.0, 1.0, 0.0]), &[]).unwrap(), 0);
    }

    #[test]
    fn bad_parameters_and_logits_are_typed_errors() {
        for (p, name) in [
            (SamplingParams { temperature: -1.0, ..Default::default() }, "temperature"),
            (SamplingParams { temperature: f32::NAN, ..Default::default() }, "temperature"),
            (SamplingParams { top_p: 0.0, ..Default::default() }, "top_p"),
            (SamplingParams { top_p: 1.5, ..Default::default() }, "top_p"),
            (SamplingParams { min_p: -0.1, ..Default::default() }, "min_p"),
            (SamplingParams { repetition_penalty: 0.0, ..Default::default() }, "repetition_penalty"),
        ] {
            let e = Sampler::new(p, 0).unwrap_err().to_string();
            assert!(e.contains(name), "{e}");
        }
        assert!(matches!(Candidates::from_logits(&[0.0, f32::NAN]), Err(Error::Numeric(_))));
        let c = cands(&[f32::NEG_INFINITY, f32::NEG_INFINITY]);
        assert!(matches!(draw(&c, &mut Rng::new(0)), Err(Error::Numeric(_))));
    }

    #[test]
    fn rng_matches_the_reference_stream() {
        // SplitMix64 from 0 gives the published first outputs; xoshiro256**
        // from that state was computed with the authors' C code transcribed
        // to Python (arbitrary-precision integers masked to 64 bits), not
        // with this implementation.
        let mut x = 0u64;
        let mut sm = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        assert_eq!([sm(), sm()], [0xe220_a839_7b1d_cdaf, 0x6e78_9e6a_a1b9_65f4]);
        let mut r = Rng::new(0);
        let got: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        assert_eq!(got, XOSHIRO_SEED0);
    }

    const XOSHIRO_SEED0: [u64; 3] = [0x99ec_5f36_cb75_f2b4, 0xbf6e_1f78_4956_452a, 0x1a5f_849d_4933_e6e0];

    #[test]
    fn the_draw_ignores_the_order_of_the_candidates() {
        let l = [0.3f32, -0.2, 1.1, 0.9, 0.0];
        let fwd = cands(&l);
        let mut rev = fwd.clone();
        rev.ids.reverse();
        rev.logits.reverse();
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..200 {
            assert_eq!(draw(&fwd, &mut a).unwrap(), draw(&rev, &mut b).unwrap());
        }
    }

    /// Upper tail of chi-square: P(X ≥ x) for `df` degrees of freedom
    /// (regularised upper incomplete gamma Q(df/2, x/2), series and
    /// continued fraction as in Numerical Recipes).
    fn chi_square_p(x: f64, df: usize) -> f64 {
        let (a, x) = (df as f64 / 2.0, x / 2.0);
        let ln_gamma = |z: f64| {
            // Lanczos, g = 7.
            const C: [f64; 9] = [
                0.999_999_999_999_809_9,
                676.520_368_121_885_1,
                -1_259.139_216_722_402_8,
                771.323_428_777_653_1,
                -176.615_029_162_140_6,
                12.507_343_278_686_905,
                -0.138_571_095_265_720_12,
                9.984_369_578_019_572e-6,
                1.505_632_735_149_311_6e-7,
            ];
            let z = z - 1.0;
            let mut s = C[0];
            for (i, c) in C.iter().enumerate().skip(1) {
                s += c / (z + i as f64);
            }
            let t = z + 7.5;
            0.5 * (2.0 * std::f64::consts::PI).ln() + (z + 0.5) * t.ln() - t + s.ln()
        };
        let front = (-x + a * x.ln() - ln_gamma(a)).exp();
        if x < a + 1.0 {
            let (mut sum, mut term, mut n) = (1.0 / a, 1.0 / a, a);
            for _ in 0..10_000 {
                n += 1.0;
                term *= x / n;
                sum += term;
                if term.abs() < sum.abs() * 1e-15 {
                    break;
                }
            }
            1.0 - front * sum
        } else {
            // Lentz's continued fraction.
            let tiny = 1e-300;
            let mut b = x + 1.0 - a;
            let mut c = 1.0 / tiny;
            let mut d = 1.0 / b;
            let mut h = d;
            for i in 1..10_000 {
                let an = -(i as f64) * (i as f64 - a);
                b += 2.0;
                d = an * d + b;
                if d.abs() < tiny {
                    d = tiny;
                }
                c = b + an / c;
                if c.abs() < tiny {
                    c = tiny;
                }
                d = 1.0 / d;
                let del = d * c;
                h *= del;
                if (del - 1.0).abs() < 1e-15 {
                    break;
                }
            }
            front * h
        }
    }

    #[test]
    fn chi_square_tail_is_right() {
        // Known quantiles: df 1 at 3.841 → 0.05; df 7 at 14.067 → 0.05; df 2: exp(−x/2).
        assert!((chi_square_p(3.841_458_8, 1) - 0.05).abs() < 1e-6);
        assert!((chi_square_p(14.067_140, 7) - 0.05).abs() < 1e-6);
        assert!((chi_square_p(10.0, 2) - (-5.0f64).exp()).abs() < 1e-12);
    }

    /// Draws `n` tokens with `params` from fixed logits and tests the counts
    /// against `expected` (probabilities over the whole vocabulary, computed
    /// by the caller in f64); returns the chi-square p-value.
    fn chi_square_run(logits: &[f32], params: SamplingParams, expected: &[f64], n: usize, seed: u64) -> f64 {
        let mut s = Sampler::new(params, seed).unwrap();
        let mut counts = vec![0usize; logits.len()];
        for _ in 0..n {
            counts[s.choose(cands(logits), &[]).unwrap() as usize] += 1;
        }
        let mut stat = 0.0;
        let mut df = 0usize;
        for (i, (&c, &p)) in counts.iter().zip(expected).enumerate() {
            if p == 0.0 {
                assert_eq!(c, 0, "token {i} has probability 0 but was drawn {c} times");
                continue;
            }
            let e = p * n as f64;
            stat += (c as f64 - e).powi(2) / e;
            df += 1;
        }
        chi_square_p(stat, df - 1)
    }

    fn softmax64(l: &[f64]) -> Vec<f64> {
        let m = l.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = l.iter().map(|x| (x - m).exp()).collect();
        let s: f64 = e.iter().sum();
        e.into_iter().map(|x| x / s).collect()
    }

    fn random_logits(seed: u64, n: usize) -> Vec<f32> {
        let mut r = Rng::new(seed);
        (0..n).map(|_| (r.next_f64() * 6.0 - 3.0) as f32).collect()
    }

    #[test]
    fn sampled_frequencies_match_the_exact_softmax() {
        let logits = random_logits(0xC0FFEE, 10);
        let t = 0.7f64;
        let expected = softmax64(&logits.iter().map(|&l| l as f64 / t).collect::<Vec<_>>());
        let params = SamplingParams { temperature: t as f32, ..SamplingParams::greedy() };
        let p = chi_square_run(&logits, params, &expected, 200_000, 11);
        eprintln!("softmax at T = 0.7, 10 tokens, 200000 draws: chi-square p = {p:.4}");
        assert!(p > 1e-4, "chi-square p = {p}: the draws do not follow softmax(l / T)");
    }

    #[test]
    fn sampled_frequencies_match_the_renormalised_top_k() {
        let logits = random_logits(0xBEEF, 12);
        let k = 5;
        // Expected: softmax over the 5 highest logits at T = 1.3, zero elsewhere.
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        let t = 1.3f64;
        let top: Vec<f64> = order[..k].iter().map(|&i| logits[i] as f64 / t).collect();
        let sm = softmax64(&top);
        let mut expected = vec![0.0; logits.len()];
        for (j, &i) in order[..k].iter().enumerate() {
            expected[i] = sm[j];
        }
        let params = SamplingParams { temperature: t as f32, top_k: k, ..SamplingParams::greedy() };
        let p = chi_square_run(&logits, params, &expected, 200_000, 12);
        eprintln!("top-{k} at T = 1.3, 12 tokens, 200000 draws: chi-square p = {p:.4}");
        assert!(p > 1e-4, "chi-square p = {p}: the draws do not follow the top-{k} softmax");
    }

    #[test]
    fn a_wrong_distribution_is_caught() {
        // The same draws tested against softmax at T = 1 instead of 0.7 must
        // fail: the statistic has the power to see a real error.
        let logits = random_logits(0xC0FFEE, 10);
        let wrong = softmax64(&logits.iter().map(|&l| l as f64).collect::<Vec<_>>());
        let params = SamplingParams { temperature: 0.7, ..SamplingParams::greedy() };
        let p = chi_square_run(&logits, params, &wrong, 200_000, 11);
        eprintln!("T = 0.7 draws against softmax at T = 1: chi-square p = {p:.3e}");
        assert!(p < 1e-6, "chi-square p = {p} against the wrong distribution");
    }

    #[test]
    fn candidates_needed_covers_top_k_and_the_penalised_tokens() {
        let p = SamplingParams { temperature: 1.0, top_k: 64, ..SamplingParams::greedy() };
        assert_eq!(p.candidates_needed(10), Some(64));
        assert_eq!(SamplingParams { repetition_penalty: 1.1, ..p }.candidates_needed(10), Some(74));
        assert_eq!(SamplingParams { top_k: 0, ..p }.candidates_needed(10), None);
        assert_eq!(SamplingParams::greedy().candidates_needed(10), Some(1));
        assert!(!SamplingParams::greedy().needs_logits());
        assert_eq!(logits_bytes_per_step(262_144), 1 << 20);
    }

    #[test]
    fn a_top_k_subset_draws_like_the_whole_row() {
        // The device-side path: handing over only the top candidates (K =
        // candidates_needed) gives the same tokens, seed for seed.
        let logits = random_logits(5, 300);
        let history = [3u32, 17, 250];
        let params = SamplingParams { temperature: 0.9, top_k: 8, top_p: 0.9, min_p: 0.02, repetition_penalty: 1.3 };
        let k = params.candidates_needed(history.len()).unwrap();
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        let sub =
            Candidates { ids: order[..k].iter().map(|&i| i as u32).collect(), logits: order[..k].iter().map(|&i| logits[i]).collect() };
        let (mut a, mut b) = (Sampler::new(params, 3).unwrap(), Sampler::new(params, 3).unwrap());
        for _ in 0..500 {
            assert_eq!(a.choose(cands(&logits), &history).unwrap(), b.choose(sub.clone(), &history).unwrap());
        }
    }
}
