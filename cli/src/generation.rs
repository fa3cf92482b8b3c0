//! The `generate` command's text side: the prompt from `--prompt` /
//! `--chat` / `--prompt-ids`, and the [`Observer`] that streams the output
//! text to stdout as tokens arrive, stops on generation_config's stop ids
//! and on `--stop` strings, and draws the prefill progress bar.
use crate::out;
use crate::text::chat::Message;
use crate::text::stream::TextStream;
use crate::text::TextAssets;
use anyhow::{bail, Result};
use std::io::IsTerminal;
use switchyard_model::generate::{Flow, Observer, PREFILL_CHUNK};

/// The prompt flags.
#[derive(Clone, Debug, Default)]
pub struct PromptFlags {
    /// `--prompt`.
    pub text: Option<String>,
    /// `--chat`.
    pub chat: bool,
    /// `--system`.
    pub system: Option<String>,
    /// `--prompt-ids`.
    pub ids: Option<String>,
}

/// The prompt's ids and a name for where they came from (for messages):
/// `--prompt` encoded with the tokenizer's specials (Gemma: `<bos>` first),
/// `--chat` rendered through the chat template then encoded without them
/// (the template writes `<bos>` itself), or `--prompt-ids` as given.
/// `None` means no prompt flag: the caller's default.
pub fn prompt_ids(flags: &PromptFlags, assets: &TextAssets) -> Result<Option<(Vec<u32>, &'static str)>> {
    let Some(text) = &flags.text else {
        return match &flags.ids {
            Some(t) => Ok(Some((crate::request::parse_prompt_ids(t)?, "--prompt-ids"))),
            None => Ok(None),
        };
    };
    if !flags.chat {
        let tok = assets.require_tokenizer("--prompt")?;
        return Ok(Some((tok.encode(text, true)?, "--prompt")));
    }
    let tok = assets.require_tokenizer("--chat")?;
    let Some(template) = &assets.chat_template else {
        bail!(
            "--chat needs the model's chat template, and {} has none (no chat_template.jinja, and no chat_template in \
             tokenizer_config.json)",
            assets.origin
        );
    };
    let mut msgs = Vec::new();
    if let Some(s) = &flags.system {
        msgs.push(Message::new("system", s));
    }
    msgs.push(Message::new("user", text));
    let rendered = template.render(&msgs, true, &assets.special)?;
    Ok(Some((tok.encode(&rendered, false)?, "--chat")))
}

/// Why a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// An EOS id of config.json or generation_config.json.
    Eos,
    /// A `--stop` string.
    StopString,
    /// `--max-new-tokens` reached.
    Length,
}

impl StopReason {
    /// The `--json` spelling.
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Eos => "eos",
            StopReason::StopString => "stop_string",
            StopReason::Length => "max_new_tokens",
        }
    }
}

/// Watches a run: text to stdout, stop ids and strings, prefill progress.
pub struct RunObserver<'t> {
    stream: Option<TextStream<'t>>,
    /// Ids that end the run (config.json's and generation_config.json's EOS);
    /// empty with `--ignore-eos`.
    stop_ids: Vec<u32>,
    /// Write text to stdout as it comes (not with `--json`).
    print: bool,
    /// stdout is a terminal: control characters in the model's text are
    /// shown escaped rather than obeyed.
    terminal: bool,
    bar: Option<indicatif::ProgressBar>,
    /// A failed write (a closed stdout): the run stops, and this is reported.
    pub error: Option<anyhow::Error>,
    /// Set when a stop id or string ended the run.
    pub stopped: Option<StopReason>,
}

impl<'t> RunObserver<'t> {
    /// An observer decoding with `assets`' tokenizer (if any), stopping at
    /// `stop_ids` and `stops`, printing unless `json`.
    pub fn new(assets: &'t TextAssets, stop_ids: Vec<u32>, stops: &[String], json: bool, prompt_len: usize) -> Result<Self> {
        let stream = assets.tokenizer.as_ref().map(|t| TextStream::new(t, stops));
        if stream.is_none() && !stops.is_empty() {
            assets.require_tokenizer("--stop")?;
        }
        // Only for prompts long enough to take several passes, and only on a terminal.
        let bar = (prompt_len > PREFILL_CHUNK && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(prompt_len as u64);
            b.set_style(
                indicatif::ProgressStyle::with_template("prefill [{bar:40}] {pos}/{len} tokens ({eta})")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b
        });
        Ok(RunObserver { stream, stop_ids, print: !json, terminal: std::io::stdout().is_terminal(), bar, error: None, stopped: None })
    }

    /// Whether the output is text (a tokenizer is there) rather than ids.
    pub fn is_text(&self) -> bool {
        self.stream.is_some()
    }

    fn emit(&mut self, piece: &str) {
        if !self.print || piece.is_empty() || self.error.is_some() {
            return;
        }
        if let Err(e) = out::print_text(piece, self.terminal) {
            self.error = Some(e);
        }
    }

    /// Prints what the stream still holds; returns the whole text (`None`
    /// without a tokenizer).
    pub fn finish(&mut self) -> Result<Option<String>> {
        let Some(stream) = self.stream.as_mut() else { return Ok(None) };
        let tail = stream.finish()?;
        let text = stream.text.clone();
        self.emit(&tail);
        if self.print && self.error.is_none() && !text.ends_with('\n') {
            if let Err(e) = out::print("\n") {
                self.error = Some(e);
            }
        }
        Ok(Some(text))
    }
}

impl Observer for RunObserver<'_> {
    fn prefill(&mut self, done: usize, total: usize) {
        if let Some(b) = &self.bar {
            b.set_position(done as u64);
            if done >= total {
                b.finish_and_clear();
            }
        }
    }

    fn token(&mut self, id: u32) -> Flow {
        if self.stop_ids.contains(&id) {
            self.stopped = Some(StopReason::Eos);
            return Flow::Stop;
        }
        let Some(stream) = self.stream.as_mut() else { return Flow::Continue };
        let piece = match stream.push(id) {
            Ok(p) => p,
            Err(e) => {
                self.error = Some(e);
                return Flow::Stop;
            }
        };
        let stopped = stream.stopped();
        self.emit(&piece);
        if stopped {
            self.stopped = Some(StopReason::StopString);
        }
        if self.error.is_some() || stopped {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::{test_data, TextFiles};

    fn assets() -> TextAssets {
        TextAssets::from_files(
            "D",
            TextFiles {
                tokenizer_json: Some(test_data("tokenizer.json")),
                tokenizer_config: Some(test_data("tokenizer_config.json")),
                special_tokens_map: None,
                chat_template: Some(test_data("chat_template.jinja")),
                generation_config: Some(test_data("generation_config.json")),
            },
        )
        .unwrap()
    }

    #[test]
    fn prompt_text_gets_bos_and_chat_gets_the_template() {
        let a = assets();
        let f = PromptFlags { text: Some("hello world".into()), ..Default::default() };
        // <bos> hello ▁wor l d (see tokenizer.rs's tests for the derivation).
        assert_eq!(prompt_ids(&f, &a).unwrap().unwrap(), (vec![2, 279, 282, 266, 270], "--prompt"));
        let f = PromptFlags { text: Some("hi".into()), chat: true, ..Default::default() };
        // "<bos><|turn>user\nhi<turn|>\n<|turn>model\n": 2 4 user \n hi 5 \n 4 model \n.
        assert_eq!(prompt_ids(&f, &a).unwrap().unwrap().0, [2, 4, 285, 262, 286, 5, 262, 4, 290, 262]);
        let f = PromptFlags { ids: Some("7,8".into()), ..Default::default() };
        assert_eq!(prompt_ids(&f, &a).unwrap().unwrap().0, [7, 8]);
        assert!(prompt_ids(&PromptFlags::default(), &a).unwrap().is_none());
    }

    #[test]
    fn text_flags_without_the_files_say_what_is_missing() {
        let none = TextAssets::none("<weights only>");
        let f = PromptFlags { text: Some("x".into()), ..Default::default() };
        let e = prompt_ids(&f, &none).unwrap_err().to_string();
        assert!(e.contains("--prompt needs the model's tokenizer") && e.contains("<weights only>"), "{e}");
        let mut a = assets();
        a.chat_template = None;
        let f = PromptFlags { text: Some("x".into()), chat: true, ..Default::default() };
        assert!(prompt_ids(&f, &a).unwrap_err().to_string().contains("--chat needs the model's chat template"));
        assert!(RunObserver::new(&none, vec![], &["x".into()], true, 3).err().unwrap().to_string().contains("--stop needs"));
    }

    #[test]
    fn the_observer_stops_on_stop_ids_and_strings() {
        let a = assets();
        let mut o = RunObserver::new(&a, vec![1, 5], &[], true, 3).unwrap();
        assert_eq!(o.token(279), Flow::Continue);
        assert_eq!(o.token(5), Flow::Stop);
        assert_eq!(o.stopped, Some(StopReason::Eos));
        assert_eq!(o.finish().unwrap().unwrap(), "hello");
        let mut o = RunObserver::new(&a, vec![], &["wor".into()], true, 3).unwrap();
        assert_eq!([o.token(279), o.token(282)], [Flow::Continue, Flow::Stop]);
        assert_eq!(o.stopped, Some(StopReason::StopString));
        assert_eq!(o.finish().unwrap().unwrap(), "hello ");
    }
}
