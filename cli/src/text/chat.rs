//! Chat templates, rendered the way HF's `apply_chat_template` renders them.
//!
//! HF compiles templates with Jinja2 (`trim_blocks`, `lstrip_blocks`, the
//! `loopcontrols` extension), adds a `raise_exception(msg)` function and a
//! `tojson` filter that does not escape HTML, and passes `messages`,
//! `add_generation_prompt` and the special tokens (`bos_token`, …) as
//! variables. Templates also call Python string and dict methods
//! (`.strip()`, `.split()`, `.get()`, `.items()`), which minijinja's
//! Python-compatibility callback supplies. A template that loops without
//! end runs out of fuel ([`FUEL`]) instead of hanging the binary.
use anyhow::{anyhow, Result};
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, ErrorKind};
use serde::Serialize;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use switchyard_model::text;

/// Template instructions one render may run: far above any real chat
/// template over a long conversation, and a bound on one that never ends.
pub const FUEL: u64 = 50_000_000;

/// One chat message.
#[derive(Clone, Debug, Serialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message from `role` saying `content`.
    pub fn new(role: &str, content: &str) -> Self {
        Message { role: role.into(), content: content.into() }
    }
}

/// Special tokens as text, for the template's variables.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecialTokens {
    /// `bos_token`.
    pub bos: Option<String>,
    /// `eos_token`.
    pub eos: Option<String>,
    /// `pad_token`.
    pub pad: Option<String>,
    /// `unk_token`.
    pub unk: Option<String>,
}

impl SpecialTokens {
    /// From `tokenizer_config.json`, falling back to `special_tokens_map.json`
    /// per token. Each is a string or an added-token object with `content`.
    pub fn from_configs(config: Option<&Json>, map: Option<&Json>) -> Self {
        let get = |key: &str| {
            [config, map].into_iter().flatten().find_map(|v| match v.get(key)? {
                Json::String(s) => Some(s.clone()),
                Json::Object(o) => o.get("content")?.as_str().map(String::from),
                _ => None,
            })
        };
        SpecialTokens { bos: get("bos_token"), eos: get("eos_token"), pad: get("pad_token"), unk: get("unk_token") }
    }
}

/// A chat template and the file it came from.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    /// The Jinja source.
    pub source: String,
    /// The file, for messages.
    pub origin: String,
}

impl ChatTemplate {
    /// A template from its source.
    pub fn new(source: String, origin: &str) -> Self {
        ChatTemplate { source, origin: origin.to_string() }
    }

    /// `chat_template` of a `tokenizer_config.json`: a string, or a list of
    /// named templates of which HF uses `default`. `None` when it has none.
    pub fn from_tokenizer_config(config: &Json, origin: &str) -> Result<Option<Self>> {
        match config.get("chat_template") {
            None | Some(Json::Null) => Ok(None),
            Some(Json::String(s)) => Ok(Some(Self::new(s.clone(), origin))),
            Some(Json::Array(list)) => {
                let named = |n: &str| list.iter().find(|t| t.get("name").and_then(Json::as_str) == Some(n));
                match named("default").and_then(|t| t.get("template")).and_then(Json::as_str) {
                    Some(s) => Ok(Some(Self::new(s.to_string(), origin))),
                    None => Err(anyhow!("{origin}: chat_template is a list of named templates without one named `default`")),
                }
            }
            Some(_) => Err(anyhow!("{origin}: chat_template must be a string or a list of {{name, template}} objects")),
        }
    }

    /// The prompt text for `messages`, ending with the opening of the
    /// model's turn when `add_generation_prompt`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool, special: &SpecialTokens) -> Result<String> {
        let env = environment();
        let fail = |e: minijinja::Error| {
            // raise_exception's message is the template's own words: show it first.
            let what = match e.kind() {
                ErrorKind::InvalidOperation => e.detail().unwrap_or("invalid operation").to_string(),
                _ => e.to_string(),
            };
            let line = e.line().map(|l| format!(" (line {l})")).unwrap_or_default();
            anyhow!("{}: the chat template failed{line}: {}", self.origin, text::clip(&what))
        };
        let tmpl = env.template_from_named_str("chat", &self.source).map_err(fail)?;
        let mut ctx: BTreeMap<&str, Value> = BTreeMap::new();
        ctx.insert("messages", Value::from_serialize(messages));
        ctx.insert("add_generation_prompt", Value::from(add_generation_prompt));
        for (k, v) in [("bos_token", &special.bos), ("eos_token", &special.eos), ("pad_token", &special.pad), ("unk_token", &special.unk)] {
            if let Some(v) = v {
                ctx.insert(k, Value::from(v.as_str()));
            }
        }
        tmpl.render(ctx).map_err(fail)
    }
}

/// HF's Jinja environment, in minijinja.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_fuel(Some(FUEL));
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |msg: String| -> Result<Value, minijinja::Error> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_filter("tojson", tojson);
    env
}

/// HF's `tojson`: Python's `json.dumps(x, ensure_ascii=False, indent=indent)`
/// (`, ` and `: ` separators, or one item a line with `indent`), and no
/// HTML escaping (minijinja's own filter escapes `<`, which chat markup is full of).
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut out = Vec::new();
    let res = match indent {
        Some(n) => {
            let pad = vec![b' '; n];
            let mut ser = serde_json::Serializer::with_formatter(&mut out, serde_json::ser::PrettyFormatter::with_indent(&pad));
            value.serialize(&mut ser)
        }
        None => value.serialize(&mut serde_json::Serializer::with_formatter(&mut out, PythonFormatter)),
    };
    res.map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let s = String::from_utf8(out).map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    Ok(Value::from_safe_string(s))
}

/// serde_json output with Python's default separators.
struct PythonFormatter;

impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::test_data;

    fn template() -> ChatTemplate {
        ChatTemplate::new(String::from_utf8(test_data("chat_template.jinja")).unwrap(), "test/chat_template.jinja")
    }

    fn special() -> SpecialTokens {
        let cfg: Json = serde_json::from_slice(&test_data("tokenizer_config.json")).unwrap();
        SpecialTokens::from_configs(Some(&cfg), None)
    }

    #[test]
    fn a_two_turn_conversation_renders_exactly() {
        let msgs = [Message::new("user", "hello world"), Message::new("assistant", "hi"), Message::new("user", "hé")];
        let s = template().render(&msgs, true, &special()).unwrap();
        assert_eq!(s, "<bos><|turn>user\nhello world<turn|>\n<|turn>model\nhi<turn|>\n<|turn>user\nhé<turn|>\n<|turn>model\n");
        // Without the generation prompt the text ends after the last turn.
        let s = template().render(&msgs[..2], false, &special()).unwrap();
        assert_eq!(s, "<bos><|turn>user\nhello world<turn|>\n<|turn>model\nhi<turn|>\n");
    }

    #[test]
    fn system_turns_strip_and_thinking_is_dropped() {
        let msgs = [
            Message::new("system", "  be brief \n"),
            Message::new("user", " hi "),
            Message::new("assistant", "<|channel>thought\nplan<channel|>hello"),
        ];
        let s = template().render(&msgs, true, &special()).unwrap();
        // .strip() on the system text, | trim on the user's, the thought
        // channel cut from the model turn; no generation prompt after a model turn.
        assert_eq!(s, "<bos><|turn>system\nbe brief<turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\nhello<turn|>\n");
    }

    #[test]
    fn the_template_tokenizes_to_turn_markers_and_pieces() {
        // The rendered 2-turn prompt through the test tokenizer, without
        // added specials (the template wrote <bos> itself). By hand:
        // <bos>=2 <|turn>=4, "user\nhello world" → user \n hello ▁wor l d
        // (285 262 279 282 266 270), <turn|>=5, "\n"=262, <|turn>, "model\nhi"
        // → model \n hi (290 262 286), 5, 262, 4, "user\nhé" → user \n h
        // <0xC3> <0xA9> (285 262 264 201 175), 5, 262, 4, "model\n" (290 262).
        let msgs = [Message::new("user", "hello world"), Message::new("assistant", "hi"), Message::new("user", "hé")];
        let s = template().render(&msgs, true, &special()).unwrap();
        let tok = crate::text::tokenizer::Tokenizer::from_bytes(&test_data("tokenizer.json"), "t").unwrap();
        assert_eq!(
            tok.encode(&s, false).unwrap(),
            [2, 4, 285, 262, 279, 282, 266, 270, 5, 262, 4, 290, 262, 286, 5, 262, 4, 285, 262, 264, 201, 175, 5, 262, 4, 290, 262]
        );
    }

    #[test]
    fn raise_exception_reaches_the_user() {
        let msgs = [Message::new("user", "a"), Message::new("user", "b")];
        let e = template().render(&msgs, true, &special()).unwrap_err().to_string();
        assert!(e.starts_with("test/chat_template.jinja: the chat template failed (line "), "{e}");
        assert!(e.contains("Conversation roles must alternate user/assistant/user/assistant/..."), "{e}");
        let e = template().render(&[Message::new("tool", "x")], true, &special()).unwrap_err().to_string();
        assert!(e.contains("Unknown role: tool"), "{e}");
    }

    #[test]
    fn syntax_errors_and_endless_templates_are_errors() {
        let t = ChatTemplate::new("{% for m in messages %}".into(), "x.jinja");
        let e = t.render(&[], true, &special()).unwrap_err().to_string();
        assert!(e.starts_with("x.jinja: the chat template failed"), "{e}");
        let t = ChatTemplate::new("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}".into(), "x.jinja");
        let e = t.render(&[], true, &special()).unwrap_err().to_string();
        assert!(e.contains("fuel"), "{e}");
    }

    #[test]
    fn tojson_writes_like_python() {
        let t = ChatTemplate::new("{{ messages[0] | tojson }}|{{ [1, 'é<'] | tojson }}|{{ {'a': [1]} | tojson(indent=2) }}".into(), "x");
        let s = t.render(&[Message::new("user", "a<b")], false, &SpecialTokens::default()).unwrap();
        assert_eq!(s, "{\"role\": \"user\", \"content\": \"a<b\"}|[1, \"é<\"]|{\n  \"a\": [\n    1\n  ]\n}");
    }

    #[test]
    fn special_tokens_come_from_either_file() {
        let cfg: Json = serde_json::json!({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": null});
        let map: Json = serde_json::json!({"eos_token": "</s>", "bos_token": "<ignored>"});
        let s = SpecialTokens::from_configs(Some(&cfg), Some(&map));
        assert_eq!((s.bos.as_deref(), s.eos.as_deref(), s.pad), (Some("<s>"), Some("</s>"), None));
    }

    #[test]
    fn named_templates_pick_default() {
        let cfg = serde_json::json!({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]});
        assert_eq!(ChatTemplate::from_tokenizer_config(&cfg, "c").unwrap().unwrap().source, "D");
        let cfg = serde_json::json!({"chat_template": [{"name": "tool_use", "template": "T"}]});
        assert!(ChatTemplate::from_tokenizer_config(&cfg, "c").unwrap_err().to_string().contains("named `default`"));
        assert!(ChatTemplate::from_tokenizer_config(&serde_json::json!({}), "c").unwrap().is_none());
    }
}
