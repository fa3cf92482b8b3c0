//! The model's tokenizer: HF's `tokenizers` crate reading the model
//! directory's `tokenizer.json` (built without its C dependencies: the
//! pure-Rust `fancy-regex` engine instead of Oniguruma, no `esaxx` C++).
use anyhow::{anyhow, Result};
use std::collections::HashSet;

/// A loaded `tokenizer.json`.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Ids of the special added tokens (left out of decoded text).
    special: HashSet<u32>,
    /// Where it came from, for messages.
    pub origin: String,
}

/// What a token contributes to decoded text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// Ordinary text.
    Text,
    /// A byte-fallback token (`<0xNN>`): its text depends on the byte
    /// tokens around it, since a run of them is decoded as one UTF-8
    /// sequence (and, if invalid, as one U+FFFD per byte).
    Byte,
    /// Nothing: a special token (skipped when decoding) or an id the
    /// vocabulary does not have.
    Invisible,
}

impl Tokenizer {
    /// Parses `tokenizer.json` bytes (`origin` names them in errors).
    pub fn from_bytes(bytes: &[u8], origin: &str) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_bytes(bytes)
            .map_err(|e| anyhow!("{origin}: not a tokenizer.json the tokenizers library can load: {e}"))?;
        let special = inner.get_added_tokens_decoder().into_iter().filter(|(_, t)| t.special).map(|(id, _)| id).collect();
        Ok(Tokenizer { inner, special, origin: origin.to_string() })
    }

    /// Token ids of `text`. With `add_special_tokens`, the tokenizer's
    /// post-processor adds what the model expects around a plain prompt
    /// (Gemma: `<bos>` in front), as HF's `tokenizer(text)` does; a rendered
    /// chat template already holds them, so it is encoded without.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, add_special_tokens).map_err(|e| anyhow!("{}: tokenizing failed: {e}", self.origin))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids` (special tokens left out when `skip_special`). Ids
    /// the tokenizer does not know are skipped, as HF's decode does.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner.decode(ids, skip_special).map_err(|e| anyhow!("{}: decoding failed: {e}", self.origin))
    }

    /// The id of a token written as text (`<eos>`), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// What `id` contributes to decoded text (special tokens skipped).
    pub fn kind(&self, id: u32) -> TokenKind {
        if self.special.contains(&id) {
            return TokenKind::Invisible;
        }
        match self.inner.id_to_token(id) {
            None => TokenKind::Invisible,
            Some(t) if is_byte_token(&t) => TokenKind::Byte,
            Some(_) => TokenKind::Text,
        }
    }

    /// Tokens in the vocabulary, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

/// `<0xNN>` with two upper-case hex digits: the byte tokens of a
/// byte-fallback vocabulary.
fn is_byte_token(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() == 6 && t.starts_with("<0x") && b[5] == b'>' && b[3..5].iter().all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(c))
}

#[cfg(test)]
mod tests {
    //! Ids for fixed strings, against the committed test tokenizer
    //! (`cli/tests/data/gemma-shape/tokenizer.json`). Every expected id was
    //! worked out by hand from that file's vocabulary and merge list (the
    //! derivations are in the comments), not by running this code.
    use super::*;
    use crate::text::test_data;

    fn tok() -> Tokenizer {
        Tokenizer::from_bytes(&test_data("tokenizer.json"), "test tokenizer.json").unwrap()
    }

    // Ids of the test vocabulary (see tests/data/gemma-shape/README.md).
    const BOS: u32 = 2;
    const TURN_OPEN: u32 = 4;
    const TURN_CLOSE: u32 = 5;
    /// `<0xNN>` byte tokens start at id 6.
    const fn byte(b: u8) -> u32 {
        6 + b as u32
    }
    const NL: u32 = 262;
    const H: u32 = 264;
    const L: u32 = 266;
    const D: u32 = 270;
    const BANG: u32 = 275;
    const HELLO: u32 = 279;
    const SP_WOR: u32 = 282;
    const USER: u32 = 285;
    const HI: u32 = 286;
    const MODEL: u32 = 290;

    #[test]
    fn bpe_merges_in_rank_order_and_bos_is_added() {
        // "hello world" → normalized "hello▁world" → h e l l o ▁ w o r l d.
        // Lowest-rank pair each time: (l,l)#1 → (h,e)#2 → (he,ll)#3 →
        // (hell,o)#4 → (▁,w)#5 → (o,r)#6 → (▁w,or)#7; then (▁wor,l) and
        // (l,d) have no merge: hello ▁wor l d. The post-processor puts <bos> first.
        assert_eq!(tok().encode("hello world", true).unwrap(), [BOS, HELLO, SP_WOR, L, D]);
        assert_eq!(tok().encode("hello world", false).unwrap(), [HELLO, SP_WOR, L, D]);
    }

    #[test]
    fn characters_outside_the_vocabulary_fall_back_to_bytes() {
        // "é" is U+00E9 = C3 A9 in UTF-8, not in the vocabulary: <0xC3> <0xA9>.
        // "🙂" is U+1F642 = F0 9F 99 82.
        assert_eq!(tok().encode("hé", false).unwrap(), [H, byte(0xC3), byte(0xA9)]);
        assert_eq!(tok().encode("🙂!", false).unwrap(), [byte(0xF0), byte(0x9F), byte(0x99), byte(0x82), BANG]);
        assert_eq!(tok().decode(&[H, byte(0xC3), byte(0xA9), BANG], false).unwrap(), "hé!");
        // An incomplete UTF-8 sequence decodes to U+FFFD, which the stream holds back.
        assert_eq!(tok().decode(&[H, byte(0xC3)], false).unwrap(), "h\u{fffd}");
    }

    #[test]
    fn special_tokens_are_split_out_whole() {
        // "<|turn>" and "<turn|>" are special added tokens: matched in the raw
        // text before normalization. Between them "user\nhi": (u,s)#8 →
        // (us,e)#9 → (use,r)#10 → (h,i)#11: user \n hi.
        assert_eq!(tok().encode("<|turn>user\nhi<turn|>", false).unwrap(), [TURN_OPEN, USER, NL, HI, TURN_CLOSE]);
        // "model": (m,o)#12 → (mo,d)#13 → (e,l)#14 → (mod,el)#15.
        assert_eq!(tok().encode("model", false).unwrap(), [MODEL]);
        // Skipped on decode when asked.
        assert_eq!(tok().decode(&[BOS, HELLO, TURN_CLOSE], true).unwrap(), "hello");
        assert_eq!(tok().decode(&[BOS, HELLO, TURN_CLOSE], false).unwrap(), "<bos>hello<turn|>");
        assert_eq!(tok().token_id("<turn|>"), Some(TURN_CLOSE));
        assert_eq!(
            [tok().kind(TURN_CLOSE), tok().kind(byte(0x41)), tok().kind(HELLO), tok().kind(9999)],
            [TokenKind::Invisible, TokenKind::Byte, TokenKind::Text, TokenKind::Invisible]
        );
    }

    #[test]
    fn a_broken_file_names_itself() {
        let e = Tokenizer::from_bytes(b"{\"model\": 3}", "DIR/tokenizer.json").err().unwrap().to_string();
        assert!(e.starts_with("DIR/tokenizer.json: not a tokenizer.json"), "{e}");
    }
}
