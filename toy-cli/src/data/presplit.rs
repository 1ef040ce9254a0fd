//! Pre-tokenizers: how text is split into words before a byte-level BPE's
//! merges, one per `tokenizer.ggml.pre` value toy runs. Each is the split
//! llama.cpp applies for that value (`llm_tokenizer_bpe::llm_tokenizer_bpe` in
//! src/llama-vocab.cpp, which also says which vocabularies ignore merges),
//! built from the `tokenizers` crate's pieces as Hugging Face's own
//! `tokenizer.json` files describe it.

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::{digits::Digits, sequence::Sequence, PreTokenizerWrapper};
use tokenizers::SplitDelimiterBehavior;

/// llama.cpp's split regex for `LLAMA_VOCAB_PRE_TYPE_LLAMA3` (src/llama-vocab.cpp,
/// "adapted" form of Llama 3's `(?i:'s|'t|…)`: the contractions spelled with
/// both cases instead of a case-insensitive group). Numbers split into runs of
/// 1 to 3 digits.
pub const LLAMA3_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// llama.cpp's split regex for `LLAMA_VOCAB_PRE_TYPE_QWEN2` (src/llama-vocab.cpp,
/// adapted as [`LLAMA3_REGEX`]): Llama 3's with every digit on its own.
pub const QWEN2_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The case-insensitive originals of [`LLAMA3_REGEX`] and [`QWEN2_REGEX`], as
/// Llama 3's and Qwen2's `tokenizer.json` spell them (llama.cpp quotes them
/// in comments next to its adapted forms).
const LLAMA3_HF: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_HF: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// How text is split before the merges, as llama.cpp names it (`tokenizer.ggml.pre`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreSplit {
    /// `gpt-2`: HF's `ByteLevel` regex (what `toy prep` trains).
    Gpt2,
    /// `smollm` (SmolLM2): every digit on its own, then the `gpt-2` regex
    /// (llama.cpp's `LLAMA_VOCAB_PRE_TYPE_SMOLLM`; HF: `Sequence[Digits(individual), ByteLevel]`).
    SmolLm,
    /// `llama-bpe` (Llama 3): [`LLAMA3_REGEX`], and a word that is a token
    /// whole is that token without merging (llama.cpp's `ignore_merges`).
    Llama3,
    /// `qwen2` (Qwen2, Qwen2.5): [`QWEN2_REGEX`].
    Qwen2,
}

/// The values of `tokenizer.ggml.pre` toy runs, for messages.
pub const KNOWN: &str = "gpt-2, smollm, llama-bpe or qwen2";

fn byte_level(use_regex: bool) -> ByteLevel {
    ByteLevel::new(false, true, use_regex)
}

/// HF's decoder of every byte-level BPE (the regex flag plays no part in decoding).
pub fn decoder() -> ByteLevel {
    byte_level(true)
}

impl PreSplit {
    /// The `tokenizer.ggml.pre` value toy writes.
    pub fn name(self) -> &'static str {
        match self {
            PreSplit::Gpt2 => "gpt-2",
            PreSplit::SmolLm => "smollm",
            PreSplit::Llama3 => "llama-bpe",
            PreSplit::Qwen2 => "qwen2",
        }
    }

    /// The split a `tokenizer.ggml.pre` value names; llama.cpp's other names
    /// of the same split (`llama3`, `llama-v3`) are taken too.
    pub fn from_name(name: &str) -> Option<PreSplit> {
        match name {
            "gpt-2" => Some(PreSplit::Gpt2),
            "smollm" => Some(PreSplit::SmolLm),
            "llama-bpe" | "llama3" | "llama-v3" => Some(PreSplit::Llama3),
            "qwen2" => Some(PreSplit::Qwen2),
            _ => None,
        }
    }

    /// The split regex, for the splits that are one regex before a byte-level
    /// mapping without its own regex.
    pub fn regex(self) -> Option<&'static str> {
        match self {
            PreSplit::Llama3 => Some(LLAMA3_REGEX),
            PreSplit::Qwen2 => Some(QWEN2_REGEX),
            PreSplit::Gpt2 | PreSplit::SmolLm => None,
        }
    }

    /// Whether a word found whole in the vocabulary is emitted as that token
    /// before any merge (llama.cpp's `ignore_merges`, set for `llama-bpe`;
    /// HF's BPE `ignore_merges`).
    pub fn ignore_merges(self) -> bool {
        self == PreSplit::Llama3
    }

    /// The `tokenizers` pre-tokenizer that splits as llama.cpp does.
    pub fn pre_tokenizer(self) -> PreTokenizerWrapper {
        match (self, self.regex()) {
            (_, Some(re)) => {
                let split = Split::new(SplitPattern::Regex(re.into()), SplitDelimiterBehavior::Isolated, false)
                    .expect("llama.cpp's split regexes compile");
                Sequence::new(vec![split.into(), byte_level(false).into()]).into()
            }
            (PreSplit::SmolLm, None) => Sequence::new(vec![Digits::new(true).into(), byte_level(true).into()]).into(),
            (_, None) => byte_level(true).into(),
        }
    }

    /// The split a `tokenizer.json`'s `pre_tokenizer` describes, if toy runs it.
    pub fn of_json(pre: &serde_json::Value) -> Option<PreSplit> {
        let is_byte_level = |v: &serde_json::Value, regex: bool| {
            v["type"] == "ByteLevel" && v["add_prefix_space"] == false && (v["use_regex"] != false) == regex
        };
        if is_byte_level(pre, true) {
            return Some(PreSplit::Gpt2);
        }
        let seq = pre["pretokenizers"].as_array().filter(|s| pre["type"] == "Sequence" && s.len() == 2)?;
        if seq[0]["type"] == "Digits" && seq[0]["individual_digits"] == true && is_byte_level(&seq[1], true) {
            return Some(PreSplit::SmolLm);
        }
        let split = &seq[0];
        if split["type"] != "Split" || split["behavior"] != "Isolated" || split["invert"] != false || !is_byte_level(&seq[1], false) {
            return None;
        }
        match split["pattern"]["Regex"].as_str()? {
            LLAMA3_HF | LLAMA3_REGEX => Some(PreSplit::Llama3),
            QWEN2_HF | QWEN2_REGEX => Some(PreSplit::Qwen2),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PreSplit;
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

    /// The words `s` is split into, as text (the byte-level mapping undone).
    fn words(p: PreSplit, s: &str) -> Vec<String> {
        let mut pts = PreTokenizedString::from(s);
        p.pre_tokenizer().pre_tokenize(&mut pts).unwrap();
        pts.get_splits(OffsetReferential::Original, OffsetType::Byte).into_iter().map(|(_, (a, b), _)| s[a..b].to_string()).collect()
    }

    fn check(p: PreSplit, s: &str, want: &[&str]) {
        assert_eq!(words(p, s), want, "{} on {s:?}", p.name());
    }

    #[test]
    fn numbers_split_in_runs_of_three_for_llama3_and_one_for_qwen2() {
        check(PreSplit::Llama3, "1234567 x12", &["123", "456", "7", " x", "12"]);
        check(PreSplit::Qwen2, "1234567 x12", &["1", "2", "3", "4", "5", "6", "7", " x", "1", "2"]);
        // A number is never joined to the space before it, nor to letters.
        check(PreSplit::Llama3, "a 2024b", &["a", " ", "202", "4", "b"]);
        check(PreSplit::Qwen2, "v2", &["v", "2"]);
        // Other numerals are \p{N} too: Arabic-Indic digits and Roman numerals.
        check(PreSplit::Llama3, "٣٤٥٦Ⅻ", &["٣٤٥", "٦Ⅻ"]);
        check(PreSplit::Qwen2, "٣٤", &["٣", "٤"]);
    }

    #[test]
    fn contractions_split_off_in_either_case() {
        for p in [PreSplit::Llama3, PreSplit::Qwen2] {
            check(p, "we'LL it's", &["we", "'LL", " it", "'s"]);
            check(p, "don't", &["don", "'t"]);
            // Not a contraction: the apostrophe starts a word.
            check(p, "'hello'", &["'hello", "'"]);
        }
    }

    #[test]
    fn whitespace_runs_leave_one_space_for_the_next_word() {
        for p in [PreSplit::Llama3, PreSplit::Qwen2] {
            check(p, "a   b", &["a", "  ", " b"]);
            check(p, "a \t\n\n  b  ", &["a", " \t\n\n", " ", " b", "  "]);
            check(p, "x\r\n\r\ny", &["x", "\r\n\r\n", "y"]);
            // Punctuation takes one space before it and the newlines after it.
            check(p, "f(x);\n\n}", &["f", "(x", ");\n\n", "}"]);
        }
    }

    #[test]
    fn letters_and_marks_of_any_script() {
        for p in [PreSplit::Llama3, PreSplit::Qwen2] {
            check(p, "naïve Ελλάδα 東京", &["naïve", " Ελλάδα", " 東京"]);
            // A combining mark is not \p{L}: it ends the word and starts a piece.
            check(p, "cafe\u{301} x", &["cafe", "\u{301}", " x"]);
            // Any one non-letter, non-digit but a newline may lead a word.
            check(p, "$hello\nworld", &["$hello", "\n", "world"]);
            check(p, "🙂ok", &["🙂ok"]);
        }
    }

    #[test]
    fn chat_markup_is_split_as_text() {
        check(PreSplit::Qwen2, "<|im_start|>user\n", &["<|", "im", "_start", "|>", "user", "\n"]);
    }

    #[test]
    fn names_round_trip_and_aliases_are_taken() {
        for p in [PreSplit::Gpt2, PreSplit::SmolLm, PreSplit::Llama3, PreSplit::Qwen2] {
            assert_eq!(PreSplit::from_name(p.name()), Some(p));
        }
        assert_eq!(PreSplit::from_name("llama3"), Some(PreSplit::Llama3));
        assert_eq!(PreSplit::from_name("deepseek-llm"), None);
    }

    #[test]
    fn tokenizer_json_splits_are_recognised() {
        let json = |re: &str| {
            serde_json::json!({"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": re}, "behavior": "Isolated", "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})
        };
        assert_eq!(PreSplit::of_json(&json(super::LLAMA3_HF)), Some(PreSplit::Llama3));
        assert_eq!(PreSplit::of_json(&json(super::QWEN2_HF)), Some(PreSplit::Qwen2));
        assert_eq!(PreSplit::of_json(&json(r"\w+")), None);
    }
}
