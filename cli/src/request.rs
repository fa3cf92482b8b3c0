//! `generate`'s flags, turned into a [`Request`] and checked against the
//! model's config before any weight is uploaded: a prompt or a length past
//! the context is refused at once, naming the flag and the limit, instead of
//! running for minutes or sizing an impossible allocation.
//!
//! The fuzz harness (`fuzz/src/lib.rs`) drives these same functions with
//! arbitrary flag text.
use anyhow::{bail, Result};
use switchyard_model::config::ModelConfig;
use switchyard_model::generate::{positions_needed, Request};
use switchyard_model::text::clip;

/// The prompt of a run on a checkpoint directory with no prompt flag: BOS
/// and a few ids, inside any vocabulary of 251 tokens or more (the
/// `tiny-dense` fixture's prompt). The built-in model starts from its text
/// prompt instead (`default_model::PROMPT_TEXT`).
pub const DEFAULT_PROMPT_IDS: [u32; 6] = [2, 17, 99, 5, 250, 31];

/// `--max-new-tokens` when not given, except on the built-in model
/// (`default_model::NEW_TOKENS`).
pub const DEFAULT_NEW_TOKENS: usize = 16;

/// Parses `--prompt-ids` text (`2,17,99`) into token ids.
pub fn parse_prompt_ids(text: &str) -> Result<Vec<u32>> {
    let mut ids = Vec::new();
    for t in text.split(',') {
        let t = t.trim();
        match t.parse::<u32>() {
            // `parse` takes a leading `+`; a token id is digits only.
            Ok(id) if t.bytes().all(|b| b.is_ascii_digit()) => ids.push(id),
            _ if t.is_empty() && text.trim().is_empty() => bail!("--prompt-ids: no ids given"),
            _ => bail!("--prompt-ids: `{}` is not a token id (an integer in 0..={})", clip(t), u32::MAX),
        }
    }
    Ok(ids)
}

/// clap's parser for `--max-new-tokens`: a count, with a message that says
/// what was wrong (0 is refused later, with its own message).
pub fn parse_max_new_tokens(text: &str) -> std::result::Result<usize, String> {
    let t = text.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{}` is not a token count (a non-negative integer)", clip(t)));
    }
    t.parse::<usize>().map_err(|_| format!("{} is more tokens than this machine can count (at most {})", clip(t), usize::MAX))
}

/// The request the flags describe, checked against `cfg`: the prompt
/// (`--prompt-ids`, or [`DEFAULT_PROMPT_IDS`]) in the vocabulary, and prompt
/// plus `--max-new-tokens` within `max_position_embeddings`.
pub fn build(prompt_ids: Option<&str>, max_new_tokens: usize, json: bool, ignore_eos: bool, cfg: &ModelConfig) -> Result<Request> {
    let (prompt, source) = match prompt_ids {
        Some(t) => (parse_prompt_ids(t)?, "--prompt-ids"),
        None => (DEFAULT_PROMPT_IDS.to_vec(), "the default prompt (no --prompt-ids)"),
    };
    build_from(prompt, source, max_new_tokens, json, ignore_eos, cfg)
}

/// As [`build`] for a prompt already in ids (`--prompt` text after the
/// tokenizer); `source` names where it came from in messages.
pub fn build_from(
    prompt: Vec<u32>,
    source: &str,
    max_new_tokens: usize,
    json: bool,
    ignore_eos: bool,
    cfg: &ModelConfig,
) -> Result<Request> {
    if max_new_tokens == 0 {
        bail!("--max-new-tokens must be at least 1");
    }
    if prompt.is_empty() {
        bail!("{source}: no tokens to start from");
    }
    if let Some(t) = prompt.iter().find(|&&t| t as usize >= cfg.vocab_size) {
        bail!("{source}: token id {t} is outside the model's vocabulary of {} (vocab_size in config.json)", cfg.vocab_size);
    }
    let ctx = cfg.max_position_embeddings;
    if prompt.len() > ctx {
        bail!("{source}: {} tokens exceed the model's context of {ctx} positions (max_position_embeddings in config.json)", prompt.len());
    }
    match positions_needed(prompt.len(), max_new_tokens) {
        Some(n) if n <= ctx => {}
        n => bail!(
            "--max-new-tokens {max_new_tokens} after a {}-token prompt needs {} positions, past the model's context of {ctx} \
             (max_position_embeddings in config.json); at most {} new tokens fit",
            prompt.len(),
            n.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string()),
            ctx - prompt.len()
        ),
    }
    Ok(Request { prompt, max_new_tokens, want_logits: json, stop_at_eos: !ignore_eos })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(vocab: usize, ctx: usize) -> ModelConfig {
        let mut v = crate::synthetic::Spec::tiny_dense().config();
        v["vocab_size"] = serde_json::json!(vocab);
        v["max_position_embeddings"] = serde_json::json!(ctx);
        ModelConfig::from_value(v.as_object().unwrap()).unwrap()
    }

    #[test]
    fn prompt_ids_are_digits_only() {
        assert_eq!(parse_prompt_ids(" 2, 17 ,99").unwrap(), [2, 17, 99]);
        for bad in ["+1", "1,,2", "-3", "1e3", "4294967296", "0x10", "1,\u{1b}[2J"] {
            let e = parse_prompt_ids(bad).unwrap_err().to_string();
            assert!(e.starts_with("--prompt-ids: `") && !e.contains('\u{1b}'), "{bad:?}: {e}");
        }
        assert_eq!(parse_prompt_ids(" ").unwrap_err().to_string(), "--prompt-ids: no ids given");
    }

    #[test]
    fn max_new_tokens_at_the_extremes() {
        assert_eq!(parse_max_new_tokens("18446744073709551615"), Ok(usize::MAX));
        assert!(parse_max_new_tokens("18446744073709551616").unwrap_err().contains("more tokens than"));
        assert!(parse_max_new_tokens("ten").unwrap_err().contains("`ten` is not a token count"));
    }

    #[test]
    fn the_context_bounds_prompt_and_new_tokens() {
        let c = cfg(384, 256);
        assert_eq!(build(Some("1,2"), 254, false, false, &c).unwrap().prompt, [1, 2]);
        let e = build(Some("1,2"), 255, false, false, &c).unwrap_err().to_string();
        assert!(e.contains("--max-new-tokens 255") && e.contains("context of 256") && e.contains("at most 254"), "{e}");
        for n in [1usize << 59, usize::MAX] {
            let e = build(None, n, false, false, &c).unwrap_err().to_string();
            assert!(e.contains("max_position_embeddings"), "{e}");
        }
        let long = vec!["1"; 257].join(",");
        let e = build(Some(&long), 1, false, false, &c).unwrap_err().to_string();
        assert!(e.contains("257 tokens exceed the model's context of 256"), "{e}");
        let e = build(Some("384"), 1, false, false, &c).unwrap_err().to_string();
        assert!(e.contains("token id 384 is outside the model's vocabulary of 384"), "{e}");
        let e = build(None, 1, false, false, &cfg(200, 256)).unwrap_err().to_string();
        assert!(e.starts_with("the default prompt"), "{e}");
        let e = build_from(vec![], "--prompt", 1, false, false, &c).unwrap_err().to_string();
        assert_eq!(e, "--prompt: no tokens to start from");
    }
}
