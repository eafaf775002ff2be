//! Splitting a growing log into lines, resumable at a byte offset.
//!
//! The log arrives in chunks cut anywhere (a read of whatever is new). [`Lines`] holds the bytes of
//! an incomplete last line until its `'\n'` arrives, so a chunk boundary never changes the lines
//! that come out. A line longer than [`MAX_LINE`] is not kept while it goes on: it comes out as
//! [`Line::Dropped`] with its offset and length, so one huge tool result cannot grow memory.

/// The longest line kept, in bytes, without its `'\n'`.
pub const MAX_LINE: usize = 1 << 20; // 1 MiB

/// One complete line of the log.
#[derive(Debug, PartialEq)]
pub enum Line {
    /// A line's bytes without its `'\n'`; `offset` is where its first byte is in the log.
    Text { offset: u64, bytes: Vec<u8> },
    /// A line longer than [`MAX_LINE`]: `len` bytes (without its `'\n'`) starting at `offset`.
    Dropped { offset: u64, len: u64 },
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
            Line::Text { offset, bytes: std::mem::take(&mut self.buf) }
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
}
