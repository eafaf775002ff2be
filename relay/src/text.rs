//! Output bytes as text: chunked UTF-8 decoding that never splits a character, the same with
//! byte offsets to resume from, bounded tails, and the wording of an exit. The one place the
//! relay turns sandbox bytes into strings; it does no I/O.
//!
//! Invalid UTF-8 becomes U+FFFD: these text forms are lossy for binary output.

/// Decodes UTF-8 that arrives in chunks which may split a character: an incomplete character at
/// the end of a chunk waits for the next one.
#[derive(Debug, Default)]
pub struct Utf8Decoder {
    pending: Vec<u8>,
}

impl Utf8Decoder {
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                    }
                }
            }
        }
    }
}

/// How output bytes are handed to a client: as text (lossy: invalid UTF-8 becomes U+FFFD), or
/// as base64 of the exact bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Text,
    Base64,
}

/// Turns offset-addressed bytes into text without splitting characters: an incomplete character
/// at the end waits for its next bytes, and the resume offset stays before it. In base64 every
/// byte is handed out at once, exactly.
#[derive(Debug, Default)]
pub struct OffsetText {
    /// Offset of the first byte not yet handed out (including `pending`).
    at: u64,
    pending: Vec<u8>,
    encoding: Encoding,
}

impl OffsetText {
    pub fn starting_at(at: u64) -> Self {
        OffsetText { at, pending: Vec::new(), encoding: Encoding::Text }
    }

    pub fn encoded(at: u64, encoding: Encoding) -> Self {
        OffsetText { at, pending: Vec::new(), encoding }
    }

    /// The text of `data` (which starts at `offset`) not handed out before, and the offset after
    /// it; `None` while only part of a character has come.
    pub fn push(&mut self, offset: u64, data: &[u8]) -> Option<(String, u64)> {
        let expected = self.at + self.pending.len() as u64;
        // Skip anything already covered (a resume from inside a chunk).
        let skip = expected.saturating_sub(offset).min(data.len() as u64) as usize;
        self.pending.extend_from_slice(&data[skip..]);
        if self.encoding == Encoding::Base64 {
            if self.pending.is_empty() {
                return None;
            }
            use base64::Engine as _;
            let text = base64::engine::general_purpose::STANDARD.encode(&self.pending);
            self.at += self.pending.len() as u64;
            self.pending.clear();
            return Some((text, self.at));
        }
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            // Invalid bytes are not text: hand them out replaced, whole.
            Err(_) => self.pending.len(),
        };
        if valid == 0 {
            return None;
        }
        let text = String::from_utf8_lossy(&self.pending[..valid]).into_owned();
        self.pending.drain(..valid);
        self.at += valid as u64;
        Some((text, self.at))
    }

    /// Hands out what waits for the rest of a character (the output ended without it).
    pub fn flush(&mut self) -> Option<(String, u64)> {
        if self.pending.is_empty() {
            return None;
        }
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.at += self.pending.len() as u64;
        self.pending.clear();
        Some((text, self.at))
    }

    /// Starts again at `at` (after a gap), dropping what waited.
    pub fn restart_at(&mut self, at: u64) {
        *self = OffsetText::encoded(at, self.encoding);
    }
}

/// The last `cap` bytes of an output, and how many bytes came before them.
#[derive(Debug)]
pub struct Tail {
    cap: usize,
    buf: Vec<u8>,
    /// Every byte pushed.
    total: u64,
}

impl Tail {
    pub fn new(cap: usize) -> Tail {
        Tail { cap, buf: Vec::new(), total: 0 }
    }

    pub fn push(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
        self.total += b.len() as u64;
        // Trim only once it is twice the cap, so pushes cost amortized O(1).
        if self.buf.len() > self.cap.saturating_mul(2) {
            self.buf.drain(..self.buf.len() - self.cap);
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.buf.len().saturating_sub(self.cap)..]
    }

    pub fn into_bytes(mut self) -> Vec<u8> {
        let start = self.buf.len().saturating_sub(self.cap);
        self.buf.drain(..start);
        self.buf
    }

    /// The bytes pushed that `bytes` no longer holds.
    pub fn dropped(&self) -> u64 {
        self.total - self.bytes().len() as u64
    }

    /// The bytes pushed that `text` does not show: those `bytes` dropped, and the rest of a
    /// character they cut.
    pub fn text_dropped(&self) -> u64 {
        self.dropped() + (self.bytes().len() - text_start(self.bytes()).len()) as u64
    }

    /// The tail as text, starting at a character boundary.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(text_start(self.bytes())).into_owned()
    }
}

/// `tail` from its first byte that is not a UTF-8 continuation byte.
fn text_start(mut tail: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = tail {
        if first & 0b1100_0000 == 0b1000_0000 {
            tail = rest;
        } else {
            break;
        }
    }
    tail
}

/// The first `cap` bytes of `s`, ending on a character boundary.
pub fn head_str(s: &str, cap: usize) -> &str {
    let mut end = s.len().min(cap);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The last `cap` bytes of `s`, starting on a character boundary.
pub fn tail_str(s: &str, cap: usize) -> &str {
    let mut start = s.len().saturating_sub(cap);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// How a process ended, worded as the daemon words it: `exit status N`, or `signal: killed`
/// when it was killed and left no code.
pub fn exit_status(code: Option<i32>) -> String {
    match code {
        Some(c) => format!("exit status {c}"),
        None => "signal: killed".to_string(),
    }
}

/// A string as one single-quoted shell word: what the relay puts in a script it runs in a
/// sandbox never becomes more than that word.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// An error with its causes, for a message (hyper's top level says only "client error").
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_counts_what_it_dropped_and_what_its_text_does_not_show() {
        let mut t = Tail::new(4);
        t.push(b"ab");
        assert_eq!((t.bytes(), t.dropped(), t.text_dropped()), (&b"ab"[..], 0, 0));
        // 7 bytes pushed in all: "a" and the euro sign's first two bytes are gone.
        t.push("€".as_bytes());
        t.push(b"xy");
        assert_eq!((t.text(), t.dropped(), t.text_dropped()), ("xy".to_string(), 3, 5));
        t.push(&[b'z'; 20]);
        assert_eq!((t.dropped(), t.text_dropped()), (23, 23));
    }

    #[test]
    fn split_characters_decode_once_whole() {
        let mut d = Utf8Decoder::default();
        let euro = "€".as_bytes();
        assert_eq!(d.push(&euro[..1]), "");
        assert_eq!(d.push(&euro[1..]), "€");
        assert_eq!(d.push(b"a\xffb"), "a\u{fffd}b");
    }

    #[test]
    fn offset_text_never_splits_a_character_and_offsets_resume_exactly() {
        let mut t = OffsetText::starting_at(10);
        let euro = "€".as_bytes();
        assert_eq!(t.push(10, b"ab"), Some(("ab".into(), 12)));
        assert_eq!(t.push(12, &euro[..2]), None, "half a character waits");
        assert_eq!(t.push(14, &euro[2..]), Some(("€".into(), 15)));
        // A chunk that starts before what was handed out is trimmed.
        assert_eq!(t.push(13, &[euro[1], euro[2], b'z']), Some(("z".into(), 16)));
        assert_eq!(t.push(16, &euro[..1]), None);
        assert_eq!(t.flush(), Some(("\u{fffd}".into(), 17)), "an output that ends mid-character");
    }

    #[test]
    fn base64_hands_out_the_exact_bytes_and_joins_them() {
        let mut t = OffsetText::encoded(0, Encoding::Base64);
        let (a, n) = t.push(0, b"\xff\xfe").unwrap();
        assert_eq!((a.as_str(), n), ("//4=", 2));
        let (b, n) = t.push(1, b"\xfeA").unwrap();
        assert_eq!((b.as_str(), n), ("QQ==", 3), "what was handed out is skipped");
        assert_eq!(format!("{a}{b}"), "//4=QQ==", "each piece is whole base64 of its bytes");
        assert_eq!(t.flush(), None);
    }

    #[test]
    fn tails_keep_the_end_on_a_character_boundary() {
        let cap = 1024;
        let mut t = Tail::new(cap);
        t.push(&vec![b'x'; cap * 3]);
        t.push("é".as_bytes());
        let s = t.text();
        assert!(s.len() <= cap && s.ends_with('é'));
        assert!(!s.starts_with('\u{fffd}'));
        assert_eq!(t.into_bytes().len(), cap);
    }

    #[test]
    fn string_tails_start_on_a_character() {
        assert_eq!(tail_str("aé", 1), "");
        assert_eq!(tail_str("aéb", 2), "b");
        assert_eq!(tail_str("abc", 10), "abc");
    }

    #[test]
    fn exits_are_worded_once() {
        assert_eq!(exit_status(Some(3)), "exit status 3");
        assert_eq!(exit_status(None), "signal: killed");
    }
}
