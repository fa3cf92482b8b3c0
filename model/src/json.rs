//! JSON parsing that refuses duplicate object keys.
//!
//! serde_json keeps the last of two equal keys without a word, so
//! `{"hidden_size": 96, "hidden_size": 4096}` or a weight map naming a tensor
//! twice would load as whichever came last. Every JSON file the loader reads
//! (config.json, the shard index, safetensors headers) is parsed here
//! instead, and a repeated key is an error naming it.
use crate::text::Escaped;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::fmt;

/// Parses `text` into a [`Value`], refusing a key repeated in any object.
/// The error is serde_json's, with line and column.
pub fn parse(text: &[u8]) -> serde_json::Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(text);
    let v = StrictValue.deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// The first key that the top-level object of `text` names twice, found
/// without building values (a safetensors header: one key per tensor).
/// Other JSON errors are left to the caller's own parser.
pub fn top_level_duplicate(text: &[u8]) -> Option<String> {
    let mut de = serde_json::Deserializer::from_slice(text);
    let mut found = None;
    let _ = de.deserialize_map(TopKeys(&mut found));
    found
}

fn duplicate<E: de::Error>(key: &str) -> E {
    E::custom(format_args!("duplicate key `{}`", Escaped(key)))
}

struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut v = Vec::new();
        while let Some(x) = seq.next_element_seed(StrictValue)? {
            v.push(x);
        }
        Ok(Value::Array(v))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut m = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if m.contains_key(&k) {
                return Err(duplicate(&k));
            }
            let v = map.next_value_seed(StrictValue)?;
            m.insert(k, v);
        }
        Ok(Value::Object(m))
    }
}

struct TopKeys<'a>(&'a mut Option<String>);

impl<'de> Visitor<'de> for TopKeys<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(k) = map.next_key::<String>()? {
            map.next_value::<IgnoredAny>()?;
            if seen.contains(&k) {
                let e = duplicate(&k);
                *self.0 = Some(k);
                return Err(e);
            }
            seen.insert(k);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_refused_at_any_depth() {
        let e = parse(br#"{"a": 1, "b": {"c": 2, "c": 3}}"#).unwrap_err().to_string();
        assert!(e.contains("duplicate key `c`") && e.contains("line 1"), "{e}");
        let e = parse(br#"{"hidden_size": 96, "hidden_size": 4096}"#).unwrap_err().to_string();
        assert!(e.contains("duplicate key `hidden_size`"), "{e}");
        let e = parse(br#"[{"x\u001b": 1, "x\u001b": 2}]"#).unwrap_err().to_string();
        assert!(e.contains("duplicate key `x\\u{1b}`"), "{e}");
    }

    #[test]
    fn same_values_as_serde_json_otherwise() {
        let text = br#"{"a": [1, -2, 3.5, true, null, "s"], "b": {"c": {}}, "n": 18446744073709551615}"#;
        assert_eq!(parse(text).unwrap(), serde_json::from_slice::<Value>(text).unwrap());
        assert!(parse(b"{} trailing").is_err());
        assert!(parse(&[b'['; 10_000]).unwrap_err().to_string().contains("recursion limit"));
    }

    #[test]
    fn top_level_duplicates_only() {
        assert_eq!(top_level_duplicate(br#"{"t": {"a": 1}, "u": 2, "t": 3}"#).as_deref(), Some("t"));
        assert_eq!(top_level_duplicate(br#"{"t": {"a": 1, "a": 2}}"#), None);
        assert_eq!(top_level_duplicate(b"[1, 2]"), None);
        assert_eq!(top_level_duplicate(b"{not json"), None);
    }
}
