//! Redaction of secret values from text and JSON before anything is stored or served.
//!
//! Redaction works on decoded strings (a JSON event's strings, not its escaped text), and finds
//! each value in the forms an agent's output commonly carries it, so that printing a secret
//! through a common encoder does not walk it past the step:
//! - as it is, in any ASCII case, and with whitespace anywhere inside it (a terminal's wrapping,
//!   a CLI's line breaks, spaced-out characters);
//! - reversed;
//! - as hex;
//! - base64, standard or URL-safe alphabet, padded or not, at each of the three alignments a
//!   value can have inside a longer encoded text (the characters that depend on the value's
//!   bytes alone);
//! - URL-escaped (`%XX` for every byte outside the unreserved set), JSON-escaped, and with every
//!   character as a `\uXXXX` escape.
//!
//! What it cannot catch: an agent that wants a secret out can always transform it in a way no
//! list foresees (encrypt it, split it over two events, print every other character). Redaction
//! keeps an honest agent's output from carrying a credential; it is no boundary against a
//! hostile one.
//!
//! Where secrets overlap (one is a part of another), the longer match wins, so the name shown is
//! the secret that was actually there.

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use base64::{
    engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD},
    Engine as _,
};
use serde_json::{Map, Value};

/// A derived form shorter than this is not searched for: it would match ordinary text. The value
/// itself is always searched for.
const MIN_DERIVED_BYTES: usize = 8;

/// A set of named secrets to redact.
#[derive(Clone, Default)]
pub struct Redactor {
    /// The secrets' names, in the order of `needles`' owners.
    names: Vec<String>,
    /// Every form of every value, folded (see [`fold`]), as one automaton.
    matcher: Option<AhoCorasick>,
    /// For each pattern of `matcher`, the index of its secret in `names`.
    owner: Vec<usize>,
}

// Debug must never print the values (nor their forms).
impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor").field("names", &self.names).finish()
    }
}

/// Whitespace is skipped and ASCII letters lowered, on both the values and the text, so that
/// matching ignores both. Bytes are mapped one to one or dropped, never split: a match in the
/// folded text maps back to a span of whole characters of the original.
fn fold(b: u8) -> Option<u8> {
    (!b.is_ascii_whitespace()).then(|| b.to_ascii_lowercase())
}

fn folded(s: &[u8]) -> Vec<u8> {
    s.iter().copied().filter_map(fold).collect()
}

/// The forms of `value` that redaction searches for (before folding).
fn forms(value: &str) -> Vec<Vec<u8>> {
    let bytes = value.as_bytes();
    let mut out = vec![bytes.to_vec()];
    let mut derived = vec![value.chars().rev().collect::<String>().into_bytes()];
    derived.push(bytes.iter().flat_map(|b| format!("{b:02x}").into_bytes()).collect());
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        for align in 0..3usize {
            // The value after `align` bytes of something else: only the characters whose six
            // bits all come from the value are the same whatever surrounds it.
            let mut input = vec![0u8; align];
            input.extend_from_slice(bytes);
            let encoded = engine.encode(&input).into_bytes();
            let (first, end) = ((8 * align).div_ceil(6), (8 * (align + bytes.len())) / 6);
            if first < end && end <= encoded.len() {
                derived.push(encoded[first..end].to_vec());
            }
        }
    }
    derived.push(
        bytes
            .iter()
            .flat_map(|&b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => vec![b],
                _ => format!("%{b:02X}").into_bytes(),
            })
            .collect(),
    );
    if let Ok(json) = serde_json::to_string(value) {
        derived.push(json.as_bytes()[1..json.len() - 1].to_vec());
    }
    derived.push(value.encode_utf16().flat_map(|u| format!("\\u{u:04x}").into_bytes()).collect());
    out.extend(derived.into_iter().filter(|d| d.len() >= MIN_DERIVED_BYTES));
    out
}

impl Redactor {
    /// Empty values are ignored: they would match everywhere.
    pub fn new<I: IntoIterator<Item = (String, String)>>(secrets: I) -> Redactor {
        let mut secrets: Vec<(String, String)> = secrets.into_iter().filter(|(_, v)| !v.is_empty()).collect();
        // By name, then value, so that the result does not depend on the input's order.
        secrets.sort();
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut owner = Vec::new();
        for (i, (_, value)) in secrets.iter().enumerate() {
            for form in forms(value) {
                let form = folded(&form);
                if !form.is_empty() && !patterns.contains(&form) {
                    patterns.push(form);
                    owner.push(i);
                }
            }
        }
        // Leftmost-longest: where two secrets' forms start at one place, the longer is named.
        let matcher = (!patterns.is_empty())
            .then(|| AhoCorasickBuilder::new().match_kind(MatchKind::LeftmostLongest).build(&patterns).ok())
            .flatten();
        Redactor { names: secrets.into_iter().map(|(n, _)| n).collect(), matcher, owner }
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// `s` with every form of every secret's value replaced by `[redacted:<name>]`. A match is
    /// never searched again, so a secret cannot match inside another's placeholder.
    pub fn text<'a>(&self, s: &'a str) -> Cow<'a, str> {
        let Some(matcher) = &self.matcher else { return Cow::Borrowed(s) };
        let norm = folded(s.as_bytes());
        let mut found = matcher.find_iter(&norm).peekable();
        if found.peek().is_none() {
            return Cow::Borrowed(s);
        }
        // Each folded index's byte in `s`: the kept bytes, in order.
        let at: Vec<usize> = s.bytes().enumerate().filter(|(_, b)| fold(*b).is_some()).map(|(i, _)| i).collect();
        let mut out = String::with_capacity(s.len());
        let mut copied = 0;
        for m in found {
            let (start, end) = (at[m.start()], at[m.end() - 1] + 1);
            out.push_str(&s[copied..start]);
            out.push_str("[redacted:");
            out.push_str(&self.names[self.owner[m.pattern().as_usize()]]);
            out.push(']');
            copied = end;
        }
        out.push_str(&s[copied..]);
        Cow::Owned(out)
    }

    /// Every string in `v` (object keys too), redacted in place.
    pub fn json(&self, v: &mut Value) {
        if self.is_empty() {
            return;
        }
        match v {
            Value::String(s) => {
                if let Cow::Owned(r) = self.text(s) {
                    *s = r;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| self.json(i)),
            Value::Object(map) => {
                let old = std::mem::take(map);
                let mut new = Map::with_capacity(old.len());
                for (k, mut v) in old {
                    self.json(&mut v);
                    new.insert(self.text(&k).into_owned(), v);
                }
                *map = new;
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r(pairs: &[(&str, &str)]) -> Redactor {
        Redactor::new(pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())))
    }

    #[test]
    fn replaces_every_occurrence() {
        let red = r(&[("API_KEY", "sk-123"), ("EMPTY", "")]);
        assert!(!red.is_empty());
        assert_eq!(red.text("key sk-123 and sk-123."), "key [redacted:API_KEY] and [redacted:API_KEY].");
        assert!(matches!(red.text("nothing here"), Cow::Borrowed(_)));
        assert!(r(&[("EMPTY", "")]).is_empty());
    }

    #[test]
    fn overlapping_secrets_redact_to_the_longer() {
        for pairs in [[("SHORT", "abc"), ("LONG", "xxabcxx")], [("LONG", "xxabcxx"), ("SHORT", "abc")]] {
            let red = r(&pairs);
            assert_eq!(red.text("a xxabcxx b abc"), "a [redacted:LONG] b [redacted:SHORT]");
        }
        // A prefix of another secret.
        let red = r(&[("A", "tok"), ("B", "token-9")]);
        assert_eq!(red.text("token-9 tok"), "[redacted:B] [redacted:A]");
        // A secret that appears inside a placeholder is not replaced again.
        let red = r(&[("X", "secret"), ("Y", "red")]);
        assert_eq!(red.text("secret red"), "[redacted:X] [redacted:Y]");
    }

    #[test]
    fn unicode_text_is_kept_whole() {
        let red = r(&[("K", "ключ")]);
        assert_eq!(red.text("é ключ ü"), "é [redacted:K] ü");
    }

    #[test]
    fn json_strings_and_keys() {
        let red = r(&[("TOKEN", "t0k")]);
        let mut v = json!({"a": "x t0k", "t0k": [1, "t0k", {"b": null}], "n": 5});
        red.json(&mut v);
        assert_eq!(
            v,
            json!({"a": "x [redacted:TOKEN]", "[redacted:TOKEN]": [1, "[redacted:TOKEN]", {"b": null}], "n": 5})
        );
    }

    /// The value's forms an agent's output commonly carries, each found and named.
    #[test]
    fn common_encodings_are_redacted() {
        use base64::engine::general_purpose::{STANDARD, URL_SAFE};
        let value = "sk-live/Key+9?Zq~ü\"x";
        let red = r(&[("API_KEY", value)]);
        let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
        let escaped: String = value.encode_utf16().map(|u| format!("\\u{u:04X}")).collect();
        let mut cases = vec![
            value.to_string(),
            value.to_ascii_uppercase(),
            value.chars().rev().collect(),
            hex.clone(),
            hex.to_uppercase(),
            "sk-live%2FKey%2B9%3FZq~%C3%BC%22x".to_string(),
            serde_json::to_string(value).unwrap(),
            escaped,
            // Wrapped by a terminal, and spaced out.
            format!("{}\n{}", &value[..5], &value[5..]),
            value.chars().map(|c| format!("{c} ")).collect(),
        ];
        // Base64 of the value inside longer text, at each alignment, both alphabets, with and
        // without padding.
        for prefix in ["", "a", "ab", "abc"] {
            for suffix in ["", "z", "zz"] {
                let plain = format!("{prefix}{value}{suffix}");
                cases.push(STANDARD.encode(&plain));
                cases.push(URL_SAFE.encode(&plain));
                cases.push(STANDARD.encode(&plain).trim_end_matches('=').to_string());
            }
        }
        for case in cases {
            let text = format!("before {case} after");
            let out = red.text(&text);
            assert!(out.contains("[redacted:API_KEY]"), "{case:?} was not redacted: {out:?}");
            assert!(out.starts_with("before ") && out.ends_with(" after"), "only the value goes: {out:?}");
        }
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        let red = r(&[("API_KEY", "sk-ant-0123456789abcdef")]);
        let text = "Ran cargo test: 42 passed. The key is read from $API_KEY. aGVsbG8gd29ybGQ= 0xdeadbeef";
        assert!(matches!(red.text(text), Cow::Borrowed(_)));
    }

    #[test]
    fn whitespace_inside_a_match_goes_with_it_and_around_it_stays() {
        let red = r(&[("K", "abcdefghij")]);
        assert_eq!(red.text("x abcde\n  fghij y"), "x [redacted:K] y");
        assert_eq!(red.text("ABCDEFGHIJ"), "[redacted:K]");
    }

    #[test]
    fn debug_hides_values() {
        let red = r(&[("TOKEN", "t0k")]);
        let d = format!("{red:?}");
        assert!(d.contains("TOKEN") && !d.contains("t0k"));
    }
}
