//! Redaction of secret values from text and JSON before anything is stored or served.
//!
//! Redaction works on decoded strings: a value is found as the agent printed it, not in an escaped
//! form. Where secrets overlap (one is a part of another), the longer one wins, so the name shown
//! is the secret that was actually there.

use std::borrow::Cow;

use serde_json::{Map, Value};

/// A set of named secrets to redact.
#[derive(Clone, Default)]
pub struct Redactor {
    /// (name, value), longest value first.
    secrets: Vec<(String, String)>,
}

// Debug must never print the values.
impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor").field("names", &self.secrets.iter().map(|(n, _)| n).collect::<Vec<_>>()).finish()
    }
}

impl Redactor {
    /// Empty values are ignored: they would match everywhere.
    pub fn new<I: IntoIterator<Item = (String, String)>>(secrets: I) -> Redactor {
        let mut secrets: Vec<(String, String)> = secrets.into_iter().filter(|(_, v)| !v.is_empty()).collect();
        // Longest first, then by name, so that the result does not depend on the input's order.
        secrets.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
        Redactor { secrets }
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// `s` with every secret's value replaced by `[redacted:<name>]`.
    pub fn text<'a>(&self, s: &'a str) -> Cow<'a, str> {
        if !self.secrets.iter().any(|(_, v)| s.contains(v.as_str())) {
            return Cow::Borrowed(s);
        }
        // One pass, trying the longest secret first at each position: a replacement is never
        // searched again, so a secret cannot match inside another's placeholder.
        let mut out = String::with_capacity(s.len());
        let mut i = 0;
        while i < s.len() {
            let rest = &s[i..];
            if let Some((name, value)) = self.secrets.iter().find(|(_, v)| rest.starts_with(v.as_str())) {
                out.push_str("[redacted:");
                out.push_str(name);
                out.push(']');
                i += value.len();
            } else {
                let c = rest.chars().next().map_or(1, char::len_utf8);
                out.push_str(&rest[..c]);
                i += c;
            }
        }
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

    #[test]
    fn debug_hides_values() {
        let red = r(&[("TOKEN", "t0k")]);
        let d = format!("{red:?}");
        assert!(d.contains("TOKEN") && !d.contains("t0k"));
    }
}
