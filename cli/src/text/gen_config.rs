//! `generation_config.json`: the ids that end a run and the sampling
//! defaults, and how the command-line flags override them.
//!
//! As in HF's `generate`: `do_sample` false (or absent) is greedy; when
//! sampling, a parameter the file leaves out takes HF's global default
//! (temperature 1, top-k 50, top-p 1, no min-p, repetition penalty 1).
//! On the command line, `--temperature 0` is greedy and giving any of
//! `--temperature`, `--top-k`, `--top-p`, `--min-p` turns sampling on,
//! whatever the file says; `--repetition-penalty` applies either way.
use anyhow::{anyhow, bail, Result};
use serde_json::Value as Json;
use switchyard_model::sampling::SamplingParams;

/// HF's `top_k` when sampling and neither the file nor a flag sets it.
pub const HF_DEFAULT_TOP_K: usize = 50;

/// What a `generation_config.json` says (absent fields are `None`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerationConfig {
    /// `eos_token_id`: an id or a list of ids; generation stops at any.
    pub eos_token_ids: Vec<u32>,
    /// `do_sample`.
    pub do_sample: Option<bool>,
    /// `temperature`.
    pub temperature: Option<f32>,
    /// `top_k`.
    pub top_k: Option<usize>,
    /// `top_p`.
    pub top_p: Option<f32>,
    /// `min_p`.
    pub min_p: Option<f32>,
    /// `repetition_penalty`.
    pub repetition_penalty: Option<f32>,
}

impl GenerationConfig {
    /// Parses the file's bytes; a field of the wrong type is an error naming
    /// it. `null` counts as absent, as it does for HF.
    pub fn parse(bytes: &[u8], origin: &str) -> Result<Self> {
        let v: Json = serde_json::from_slice(bytes).map_err(|e| anyhow!("{origin}: not valid JSON: {e}"))?;
        let Json::Object(o) = &v else { bail!("{origin}: expected a JSON object") };
        let field = |k: &str| o.get(k).filter(|v| !v.is_null());
        let bad = |k: &str, want: &str| anyhow!("{origin}: {k} must be {want} (found {})", clip_json(&o[k]));
        let id =
            |k: &str, x: &Json| x.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(|| bad(k, "a token id or a list of token ids"));
        let eos_token_ids = match field("eos_token_id") {
            None => Vec::new(),
            Some(Json::Array(a)) => a.iter().map(|x| id("eos_token_id", x)).collect::<Result<_>>()?,
            Some(x) => vec![id("eos_token_id", x)?],
        };
        let float = |k: &str| -> Result<Option<f32>> {
            field(k).map(|x| x.as_f64().filter(|f| f.is_finite()).map(|f| f as f32).ok_or_else(|| bad(k, "a number"))).transpose()
        };
        Ok(GenerationConfig {
            eos_token_ids,
            do_sample: field("do_sample").map(|x| x.as_bool().ok_or_else(|| bad("do_sample", "true or false"))).transpose()?,
            temperature: float("temperature")?,
            top_k: field("top_k")
                .map(|x| x.as_u64().and_then(|n| usize::try_from(n).ok()).ok_or_else(|| bad("top_k", "a non-negative integer")))
                .transpose()?,
            top_p: float("top_p")?,
            min_p: float("min_p")?,
            repetition_penalty: float("repetition_penalty")?,
        })
    }
}

fn clip_json(v: &Json) -> String {
    switchyard_model::text::clip(&v.to_string())
}

/// The sampling flags as given (`None` = not on the command line).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SamplingFlags {
    /// `--temperature`.
    pub temperature: Option<f32>,
    /// `--top-k`.
    pub top_k: Option<usize>,
    /// `--top-p`.
    pub top_p: Option<f32>,
    /// `--min-p`.
    pub min_p: Option<f32>,
    /// `--repetition-penalty`.
    pub repetition_penalty: Option<f32>,
}

/// The parameters a run uses: flags over `generation_config.json` over
/// HF's defaults (see the module notes), checked.
pub fn resolve(flags: &SamplingFlags, file: &GenerationConfig) -> Result<SamplingParams> {
    let penalty = flags.repetition_penalty.or(file.repetition_penalty).unwrap_or(1.0);
    let flag_samples = flags.temperature.is_some() || flags.top_k.is_some() || flags.top_p.is_some() || flags.min_p.is_some();
    let sample = flags.temperature != Some(0.0) && (flag_samples || file.do_sample == Some(true));
    let p = if sample {
        SamplingParams {
            temperature: flags.temperature.or(file.temperature).unwrap_or(1.0),
            top_k: flags.top_k.or(file.top_k).unwrap_or(HF_DEFAULT_TOP_K),
            top_p: flags.top_p.or(file.top_p).unwrap_or(1.0),
            min_p: flags.min_p.or(file.min_p).unwrap_or(0.0),
            repetition_penalty: penalty,
        }
    } else {
        SamplingParams { repetition_penalty: penalty, ..SamplingParams::greedy() }
    };
    p.validate().map_err(|e| anyhow!("sampling parameters (flags over generation_config.json): {e}"))?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::test_data;

    #[test]
    fn gemma_form_parses() {
        let g = GenerationConfig::parse(&test_data("generation_config.json"), "g").unwrap();
        assert_eq!(g.eos_token_ids, [1, 5]);
        assert_eq!((g.do_sample, g.top_k, g.top_p, g.temperature), (Some(true), Some(64), Some(0.95), None));
        // eos_token_id may be a single id; null is absent.
        let g = GenerationConfig::parse(br#"{"eos_token_id": 1, "top_k": null}"#, "g").unwrap();
        assert_eq!((g.eos_token_ids, g.top_k), (vec![1], None));
    }

    #[test]
    fn wrong_types_name_the_field() {
        for (json, field) in [
            (r#"{"eos_token_id": "x"}"#, "eos_token_id"),
            (r#"{"eos_token_id": [1, -2]}"#, "eos_token_id"),
            (r#"{"do_sample": 1}"#, "do_sample"),
            (r#"{"top_k": 1.5}"#, "top_k"),
            (r#"{"top_p": "high"}"#, "top_p"),
        ] {
            let e = GenerationConfig::parse(json.as_bytes(), "D/generation_config.json").unwrap_err().to_string();
            assert!(e.starts_with(&format!("D/generation_config.json: {field} must be")), "{e}");
        }
        assert!(GenerationConfig::parse(b"[]", "g").unwrap_err().to_string().contains("expected a JSON object"));
    }

    #[test]
    fn flags_override_the_file_and_the_file_overrides_hf() {
        let file = GenerationConfig::parse(&test_data("generation_config.json"), "g").unwrap();
        let none = SamplingFlags::default();
        // do_sample true: top_k 64 and top_p 0.95 from the file, temperature HF's 1.
        let p = resolve(&none, &file).unwrap();
        assert_eq!((p.temperature, p.top_k, p.top_p, p.min_p, p.repetition_penalty), (1.0, 64, 0.95, 0.0, 1.0));
        let p = resolve(&SamplingFlags { top_k: Some(5), min_p: Some(0.1), ..none }, &file).unwrap();
        assert_eq!((p.top_k, p.top_p, p.min_p), (5, 0.95, 0.1));
        // --temperature 0 is greedy whatever the file says; the penalty stays.
        let p = resolve(&SamplingFlags { temperature: Some(0.0), repetition_penalty: Some(1.2), ..none }, &file).unwrap();
        assert!(p.is_greedy() && p.repetition_penalty == 1.2);
        // No file: greedy by default; a sampling flag samples with HF's defaults.
        let empty = GenerationConfig::default();
        assert_eq!(resolve(&none, &empty).unwrap(), SamplingParams::greedy());
        let p = resolve(&SamplingFlags { temperature: Some(0.8), ..none }, &empty).unwrap();
        assert_eq!((p.temperature, p.top_k, p.top_p), (0.8, HF_DEFAULT_TOP_K, 1.0));
        // do_sample false in the file: greedy even though it lists top_k.
        let greedy_file = GenerationConfig { do_sample: Some(false), top_k: Some(3), ..Default::default() };
        assert_eq!(resolve(&none, &greedy_file).unwrap(), SamplingParams::greedy());
    }

    #[test]
    fn bad_values_are_refused_with_their_name() {
        let e = resolve(&SamplingFlags { top_p: Some(1.5), ..Default::default() }, &GenerationConfig::default()).unwrap_err();
        assert!(e.to_string().contains("top_p = 1.5"), "{e}");
        let file = GenerationConfig { do_sample: Some(true), temperature: Some(-2.0), ..Default::default() };
        assert!(resolve(&SamplingFlags::default(), &file).unwrap_err().to_string().contains("temperature = -2"));
    }
}
