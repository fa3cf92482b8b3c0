//! Text in, text out: the text files of a checkpoint directory and what the
//! binary does with them.
//!
//! [`TextAssets`] reads `tokenizer.json` ([`tokenizer`]), the chat template
//! (`chat_template.jinja`, else `tokenizer_config.json`'s `chat_template`;
//! rendered by [`chat`]), the special tokens the template reads, and
//! `generation_config.json` ([`gen_config`]: stop ids and sampling
//! defaults). [`stream`] turns generated ids back into text as they arrive,
//! holding back incomplete UTF-8 and anything that may be the start of a
//! stop string.
pub mod chat;
pub mod gen_config;
pub mod stream;
pub mod tokenizer;

use anyhow::{Context, Result};
use chat::{ChatTemplate, SpecialTokens};
use gen_config::GenerationConfig;
use std::path::Path;
use switchyard_model::default_model;
use switchyard_model::files::{self, Limits};
use switchyard_model::text;
use tokenizer::Tokenizer;

/// The text side of a model: everything optional, so that a checkpoint
/// with weights only still runs on token ids.
pub struct TextAssets {
    /// Where they came from (the directory, or the built-in model's name).
    pub origin: String,
    /// From `tokenizer.json`.
    pub tokenizer: Option<Tokenizer>,
    /// The chat template and the file it came from.
    pub chat_template: Option<ChatTemplate>,
    /// Special tokens as text (`bos_token`, …), for the template.
    pub special: SpecialTokens,
    /// `generation_config.json`, or its defaults when there is none.
    pub generation: GenerationConfig,
}

/// The raw files, wherever they come from (a directory, or bytes built
/// into the binary).
#[derive(Default)]
pub struct TextFiles {
    /// `tokenizer.json`.
    pub tokenizer_json: Option<Vec<u8>>,
    /// `tokenizer_config.json`.
    pub tokenizer_config: Option<Vec<u8>>,
    /// `special_tokens_map.json` (older checkpoints keep `bos_token` there).
    pub special_tokens_map: Option<Vec<u8>>,
    /// `chat_template.jinja`.
    pub chat_template: Option<Vec<u8>>,
    /// `generation_config.json`.
    pub generation_config: Option<Vec<u8>>,
}

impl TextFiles {
    /// Reads whichever of the files `dir` holds. Each must be a regular file
    /// under the JSON size cap ([`Limits`]); an absent one is `None`.
    pub fn read_dir(dir: &Path) -> Result<Self> {
        let limits = Limits::from_env()?;
        let read = |name: &str| -> Result<Option<Vec<u8>>> {
            let p = dir.join(name);
            if !files::present(&p)? {
                return Ok(None);
            }
            Ok(Some(files::read_capped(&p, name, limits.json_bytes)?))
        };
        Ok(TextFiles {
            tokenizer_json: read("tokenizer.json")?,
            tokenizer_config: read("tokenizer_config.json")?,
            special_tokens_map: read("special_tokens_map.json")?,
            chat_template: read("chat_template.jinja")?,
            generation_config: read("generation_config.json")?,
        })
    }
}

impl TextAssets {
    /// No tokenizer, no template, default generation settings.
    pub fn none(origin: &str) -> Self {
        TextAssets {
            origin: origin.to_string(),
            tokenizer: None,
            chat_template: None,
            special: SpecialTokens::default(),
            generation: GenerationConfig::default(),
        }
    }

    /// The built-in model's text files ([`default_model`]), from the binary.
    pub fn built_in() -> Result<Self> {
        Self::from_files(
            default_model::NAME,
            TextFiles {
                tokenizer_json: Some(default_model::TOKENIZER_JSON.to_vec()),
                tokenizer_config: Some(default_model::TOKENIZER_CONFIG.to_vec()),
                special_tokens_map: None,
                chat_template: Some(default_model::CHAT_TEMPLATE.to_vec()),
                generation_config: Some(default_model::GENERATION_CONFIG.to_vec()),
            },
        )
    }

    /// The text files of checkpoint directory `dir`.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let origin = text::path(dir);
        let files = TextFiles::read_dir(dir).with_context(|| format!("reading the text files of {origin}"))?;
        Self::from_files(&origin, files)
    }

    /// Parses `files`; `origin` prefixes each file's name in messages.
    pub fn from_files(origin: &str, f: TextFiles) -> Result<Self> {
        let name = |file: &str| format!("{origin}/{file}");
        let tokenizer = f.tokenizer_json.as_deref().map(|b| Tokenizer::from_bytes(b, &name("tokenizer.json"))).transpose()?;
        let config = f.tokenizer_config.as_deref().map(|b| parse_json(b, &name("tokenizer_config.json"))).transpose()?;
        let map = f.special_tokens_map.as_deref().map(|b| parse_json(b, &name("special_tokens_map.json"))).transpose()?;
        let special = SpecialTokens::from_configs(config.as_ref(), map.as_ref());
        // HF's order: a chat_template.jinja file wins over the config's field.
        let chat_template = match (&f.chat_template, &config) {
            (Some(b), _) => {
                let src = String::from_utf8(b.clone()).map_err(|_| anyhow::anyhow!("{}: not UTF-8", name("chat_template.jinja")))?;
                Some(ChatTemplate::new(src, &name("chat_template.jinja")))
            }
            (None, Some(c)) => ChatTemplate::from_tokenizer_config(c, &name("tokenizer_config.json"))?,
            (None, None) => None,
        };
        let generation = match &f.generation_config {
            Some(b) => GenerationConfig::parse(b, &name("generation_config.json"))?,
            None => GenerationConfig::default(),
        };
        Ok(TextAssets { origin: origin.to_string(), tokenizer, chat_template, special, generation })
    }

    /// The tokenizer, or an error saying which flag needed it and where it was looked for.
    pub fn require_tokenizer(&self, flag: &str) -> Result<&Tokenizer> {
        self.tokenizer.as_ref().ok_or_else(|| {
            anyhow::anyhow!(
                "{flag} needs the model's tokenizer, and {} has no tokenizer.json (give token ids with --prompt-ids, or a \
                 checkpoint directory that has one with --model)",
                self.origin
            )
        })
    }
}

fn parse_json(bytes: &[u8], origin: &str) -> Result<serde_json::Value> {
    serde_json::from_slice(bytes).with_context(|| format!("{origin}: not valid JSON"))
}

/// A file of the committed test data (`cli/tests/data/gemma-shape`).
#[cfg(test)]
pub(crate) fn test_data(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gemma-shape").join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_files() -> TextFiles {
        TextFiles {
            tokenizer_json: Some(test_data("tokenizer.json")),
            tokenizer_config: Some(test_data("tokenizer_config.json")),
            special_tokens_map: None,
            chat_template: Some(test_data("chat_template.jinja")),
            generation_config: Some(test_data("generation_config.json")),
        }
    }

    #[test]
    fn the_test_directory_loads_whole() {
        let a = TextAssets::from_files("D", all_files()).unwrap();
        assert!(a.tokenizer.is_some());
        assert_eq!(a.chat_template.as_ref().unwrap().origin, "D/chat_template.jinja");
        assert_eq!(a.special.bos.as_deref(), Some("<bos>"));
        assert_eq!(a.generation.eos_token_ids, [1, 5]);
    }

    #[test]
    fn the_built_in_model_has_every_text_file() {
        // Greedy (no do_sample), stopping at <eos> and <turn|>, with the
        // chat template and the special tokens it reads.
        let a = TextAssets::built_in().unwrap();
        let tok = a.require_tokenizer("--prompt").unwrap();
        assert_eq!(a.generation.eos_token_ids, [1, 5]);
        assert_eq!(a.special.bos.as_deref(), Some("<bos>"));
        assert_eq!(a.chat_template.as_ref().unwrap().origin, format!("{}/chat_template.jinja", default_model::NAME));
        for (t, id) in [("<pad>", 0), ("<eos>", 1), ("<bos>", 2), ("<unk>", 3), ("<|turn>", 4), ("<turn|>", 5), ("<0x00>", 6)] {
            assert_eq!(tok.token_id(t), Some(id), "{t}");
        }
        // The prompt gets <bos>; text round-trips, bytes outside the vocabulary included.
        let ids = tok.encode(default_model::PROMPT_TEXT, true).unwrap();
        assert_eq!(ids[0], 2);
        assert_eq!(tok.decode(&ids, true).unwrap(), default_model::PROMPT_TEXT);
        let s = "Return the naïve 🙂 value.\n";
        assert_eq!(tok.decode(&tok.encode(s, false).unwrap(), false).unwrap(), s);
    }

    #[test]
    fn the_jinja_file_wins_over_the_config_field() {
        let mut f = all_files();
        f.tokenizer_config = Some(br#"{"bos_token": "<bos>", "chat_template": "from config"}"#.to_vec());
        let a = TextAssets::from_files("D", f).unwrap();
        assert_eq!(a.chat_template.unwrap().origin, "D/chat_template.jinja");
        let mut f = all_files();
        f.chat_template = None;
        f.tokenizer_config = Some(br#"{"bos_token": "<bos>", "chat_template": "from config"}"#.to_vec());
        let t = TextAssets::from_files("D", f).unwrap().chat_template.unwrap();
        assert_eq!((t.origin.as_str(), t.source.as_str()), ("D/tokenizer_config.json", "from config"));
    }

    #[test]
    fn missing_and_broken_files_say_which() {
        let a = TextAssets::from_files("D", TextFiles::default()).unwrap();
        let e = a.require_tokenizer("--prompt").err().unwrap().to_string();
        assert!(e.contains("--prompt needs the model's tokenizer") && e.contains("D has no tokenizer.json"), "{e}");
        let f = TextFiles { generation_config: Some(b"{".to_vec()), ..Default::default() };
        let e = format!("{:#}", TextAssets::from_files("D", f).err().unwrap());
        assert!(e.contains("D/generation_config.json"), "{e}");
        let f = TextFiles { tokenizer_json: Some(b"[]".to_vec()), ..Default::default() };
        let e = format!("{:#}", TextAssets::from_files("D", f).err().unwrap());
        assert!(e.contains("D/tokenizer.json: not a tokenizer.json"), "{e}");
    }
}
