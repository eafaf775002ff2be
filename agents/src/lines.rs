//! Splitting a growing log into lines, resumable at a byte offset.
//!
//! The log arrives in chunks cut anywhere (a read of whatever is new). [`Lines`] holds the bytes of
//! an incomplete last line until its `'\n'` arrives, so a chunk boundary never changes the lines
//! that come out. A line longer than [`MAX_LINE`] is not kept while it goes on: it comes out as
//! [`Line::Dropped`] with its offset and length, so one huge tool result cannot grow memory.
//!
//! The turn's log writer (`hangar-envd turn-log`) cuts such lines before they reach the log and
//! says what it did with a [`Mark`] at the end of a line; [`Lines`] gives those lines as
//! [`Line::Marked`]. The mark starts with [`MARK_BYTE`], which the writer never passes through
//! from the harness's output, so where that writer runs a mark is always its own.

/// The longest line kept, in bytes, without its `'\n'`.
pub const MAX_LINE: usize = 1 << 20; // 1 MiB

/// The byte a [`Mark`] starts with (ASCII's record separator). The writer writes the harness's
/// own as [`MARK_BYTE_SUBSTITUTE`].
pub const MARK_BYTE: u8 = 0x1e;
/// What the writer writes for a [`MARK_BYTE`] of the harness's output (ASCII's substitute).
pub const MARK_BYTE_SUBSTITUTE: u8 = 0x1a;
/// The longest a mark is, in bytes: a line cut by the writer keeps `MAX_LINE - MARK_MAX` bytes of
/// its start, so with its mark it is never longer than [`MAX_LINE`].
pub const MARK_MAX: usize = 48;

/// What the log's writer says at the end of a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// The line was longer than [`MAX_LINE`]: its start is kept, `dropped` bytes after it are not.
    Cut { dropped: u64 },
    /// The log reached its size limit, `limit` bytes: what the harness writes after is not kept
    /// (but its last line, which follows this one).
    LogFull { limit: u64 },
}

impl Mark {
    /// The mark's bytes, [`MARK_BYTE`] first, without a `'\n'`.
    pub fn to_bytes(self) -> Vec<u8> {
        let text = match self {
            Mark::Cut { dropped } => format!("hangar:cut {dropped}"),
            Mark::LogFull { limit } => format!("hangar:log_full {limit}"),
        };
        let mut out = vec![MARK_BYTE];
        out.extend_from_slice(text.as_bytes());
        out
    }

    /// The mark that ends `line`, if one does, and where it starts.
    pub fn at_end(line: &[u8]) -> Option<(usize, Mark)> {
        let from = line.len().saturating_sub(MARK_MAX);
        let at = from + line[from..].iter().rposition(|&b| b == MARK_BYTE)?;
        let text = std::str::from_utf8(&line[at + 1..]).ok()?;
        let (kind, n) = text.strip_prefix("hangar:")?.split_once(' ')?;
        // Digits only: `u64::from_str` would take a sign.
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: u64 = n.parse().ok()?;
        let mark = match kind {
            "cut" => Mark::Cut { dropped: n },
            "log_full" => Mark::LogFull { limit: n },
            _ => return None,
        };
        Some((at, mark))
    }
}

/// One complete line of the log.
#[derive(Debug, PartialEq)]
pub enum Line {
    /// A line's bytes without its `'\n'`; `offset` is where its first byte is in the log.
    Text { offset: u64, bytes: Vec<u8> },
    /// A line longer than [`MAX_LINE`]: `len` bytes (without its `'\n'`) starting at `offset`.
    Dropped { offset: u64, len: u64 },
    /// A line ending in the writer's [`Mark`]: `kept` bytes of the harness's (not parsed: a
    /// line's cut start, or what fitted before the log was full), then the mark.
    Marked { offset: u64, kept: u64, mark: Mark },
}

/// A line splitter over a byte stream. See the module doc.
#[derive(Debug)]
pub struct Lines {
    /// Offset of the first byte of the current, incomplete line.
    start: u64,
    /// Bytes of the current line seen so far; empty once it is known to be too long.
    buf: Vec<u8>,
    /// Length of the current line so far, kept even when its bytes are not.
    len: u64,
    dropping: bool,
}

impl Lines {
    /// Splitting starts at `offset`, the start of a line (a saved read position).
    pub fn new(offset: u64) -> Lines {
        Lines { start: offset, buf: Vec::new(), len: 0, dropping: false }
    }

    /// The bytes that follow the ones pushed before. Returns each line completed by them, with the
    /// offset of its first byte; a line longer than [`MAX_LINE`] is [`Line::Dropped`] (its bytes are
    /// not kept while it goes on).
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Line> {
        let mut out = Vec::new();
        let mut rest = bytes;
        loop {
            let (seg, newline) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            self.take(seg);
            if !newline {
                break;
            }
            out.push(self.finish());
            rest = &rest[seg.len() + 1..];
        }
        out
    }

    /// The offset just past the last complete line: where to resume after a restart.
    pub fn consumed(&self) -> u64 {
        self.start
    }

    /// Bytes held for an incomplete last line.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The offset just past the last byte pushed: where the next read of the log starts. Not
    /// `consumed() + pending()`: a line being dropped holds none of its bytes.
    pub fn position(&self) -> u64 {
        self.start + self.len
    }

    fn take(&mut self, seg: &[u8]) {
        self.len += seg.len() as u64;
        if self.dropping {
            return;
        }
        if self.len > MAX_LINE as u64 {
            self.dropping = true;
            // Give the memory back: the line may go on for a long time.
            self.buf = Vec::new();
        } else {
            self.buf.extend_from_slice(seg);
        }
    }

    fn finish(&mut self) -> Line {
        let offset = self.start;
        let len = self.len;
        let line = if self.dropping {
            Line::Dropped { offset, len }
        } else {
            let bytes = std::mem::take(&mut self.buf);
            match Mark::at_end(&bytes) {
                Some((kept, mark)) => Line::Marked { offset, kept: kept as u64, mark },
                None => Line::Text { offset, bytes },
            }
        };
        self.start += len + 1;
        self.len = 0;
        self.dropping = false;
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &[u8] = include_bytes!("../fixtures/claude-stream-json-executor.jsonl");

    fn all(offset: u64, chunks: &[&[u8]]) -> (Vec<Line>, u64, usize) {
        let mut lines = Lines::new(offset);
        let mut out = Vec::new();
        for c in chunks {
            out.extend(lines.push(c));
        }
        (out, lines.consumed(), lines.pending())
    }

    #[test]
    fn splits_lines_with_offsets() {
        let (out, consumed, pending) = all(100, &[b"ab\n\ncd\r\nef"]);
        assert_eq!(
            out,
            vec![
                Line::Text { offset: 100, bytes: b"ab".to_vec() },
                Line::Text { offset: 103, bytes: vec![] },
                Line::Text { offset: 104, bytes: b"cd\r".to_vec() },
            ]
        );
        assert_eq!(consumed, 108);
        assert_eq!(pending, 2);
    }

    #[test]
    fn every_split_point_gives_the_same_lines() {
        let whole = all(7, &[FIXTURE]);
        assert_eq!(whole.0.len(), 9);
        for i in 0..=FIXTURE.len() {
            let (a, b) = FIXTURE.split_at(i);
            assert_eq!(all(7, &[a, b]), whole, "split at {i}");
        }
        for size in 1..=7 {
            let chunks: Vec<&[u8]> = FIXTURE.chunks(size).collect();
            assert_eq!(all(7, &chunks), whole, "chunks of {size}");
        }
    }

    #[test]
    fn oversize_line_is_dropped_and_not_kept() {
        let big = vec![b'x'; MAX_LINE + 1];
        let exact = vec![b'y'; MAX_LINE];
        let mut lines = Lines::new(0);
        assert_eq!(lines.push(b"a\n"), vec![Line::Text { offset: 0, bytes: b"a".to_vec() }]);
        assert!(lines.push(&big[..10]).is_empty());
        assert_eq!(lines.pending(), 10);
        assert!(lines.push(&big[10..]).is_empty());
        assert_eq!(lines.pending(), 0, "an oversize line's bytes are not held");
        assert!(lines.push(&big).is_empty(), "still the same line");
        assert_eq!(lines.consumed(), 2);
        assert_eq!(lines.position(), 2 + 2 * (MAX_LINE as u64 + 1), "reading goes on past what was dropped");
        let out = lines.push(b"\nb\n");
        assert_eq!(
            out,
            vec![
                Line::Dropped { offset: 2, len: 2 * (MAX_LINE as u64 + 1) },
                Line::Text { offset: 2 * (MAX_LINE as u64 + 1) + 3, bytes: b"b".to_vec() },
            ]
        );
        // A line of exactly MAX_LINE bytes is kept.
        let mut input = exact.clone();
        input.push(b'\n');
        let start = lines.consumed();
        assert_eq!(lines.push(&input), vec![Line::Text { offset: start, bytes: exact }]);
        assert_eq!(lines.consumed(), start + MAX_LINE as u64 + 1);
    }

    #[test]
    fn oversize_line_split_anywhere_is_dropped_the_same() {
        let mut input = vec![b'z'; MAX_LINE + 5];
        input.extend_from_slice(b"\nok\n");
        let whole = all(0, &[&input]);
        for i in [0, 1, MAX_LINE - 1, MAX_LINE, MAX_LINE + 1, MAX_LINE + 5, MAX_LINE + 6, input.len()] {
            let (a, b) = input.split_at(i);
            assert_eq!(all(0, &[a, b]), whole, "split at {i}");
        }
        assert_eq!(whole.0[0], Line::Dropped { offset: 0, len: MAX_LINE as u64 + 5 });
    }

    #[test]
    fn the_position_is_every_byte_pushed() {
        let mut lines = Lines::new(5);
        lines.push(b"ab\ncd");
        assert_eq!((lines.consumed(), lines.position()), (8, 10));
        lines.push(&vec![b'x'; MAX_LINE + 1]);
        assert_eq!((lines.consumed(), lines.pending(), lines.position()), (8, 0, 10 + MAX_LINE as u64 + 1));
    }

    #[test]
    fn marks_end_lines_and_nothing_else_passes_for_one() {
        for mark in [Mark::Cut { dropped: 0 }, Mark::Cut { dropped: u64::MAX }, Mark::LogFull { limit: 1 << 28 }] {
            let bytes = mark.to_bytes();
            assert!(bytes.len() <= MARK_MAX, "{mark:?}");
            let mut line = b"{\"type\":\"assis".to_vec();
            line.extend_from_slice(&bytes);
            assert_eq!(Mark::at_end(&line), Some((14, mark)));
            let mut input = line.clone();
            input.extend_from_slice(b"\nnext\n");
            assert_eq!(
                all(0, &[&input]).0,
                vec![
                    Line::Marked { offset: 0, kept: 14, mark },
                    Line::Text { offset: line.len() as u64 + 1, bytes: b"next".to_vec() }
                ]
            );
        }
        for not in [
            &b"plain"[..],
            b"\x1ehangar:cut",
            b"\x1ehangar:cut ",
            b"\x1ehangar:cut +5",
            b"\x1ehangar:cut 5 ",
            b"\x1ehangar:cut 99999999999999999999999",
            b"\x1ehangar:other 5",
            b"\x1ehangar:cut 5\x1ex",
            b"\x1ecut 5",
        ] {
            assert_eq!(Mark::at_end(not), None, "{}", String::from_utf8_lossy(not));
        }
    }
}
