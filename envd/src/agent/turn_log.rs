//! `hangar-envd turn-log --max-bytes N`: the writer of a turn's log. The supervisor runs it with
//! the harness's output (a FIFO) on stdin and the log, opened for appending, on stdout.
//!
//! What `cat` did, with two bounds, so that nothing a harness prints can cost the relay more
//! than the log's size limit, nor make it read a line it cannot hold:
//! - A line over [`MAX_LINE`] is cut as it streams: its first `MAX_LINE - MARK_MAX` bytes are
//!   written, the rest is read and counted, and a [`Mark::Cut`] with that count ends the line.
//!   The line is never held whole (a 1 GiB line costs 1 MiB).
//! - Once the log would pass `--max-bytes`, what fits of the current line is written with a
//!   [`Mark::LogFull`], once; what follows is read and thrown away, but for the last line, which
//!   is written when the harness's output ends (the result line an agent CLI prints last). So the
//!   log is at most the limit, a mark, and one line.
//!
//! It reads to the end whatever happens (a failed write included), so the harness never blocks
//! on a full pipe. A [`MARK_BYTE`] of the harness's own is written as [`MARK_BYTE_SUBSTITUTE`],
//! so every mark in a log this writer wrote is its own.
use std::{
    fs::File,
    io::{self, BufRead, BufReader, Read, Write},
    os::fd::AsFd as _,
};

use hangar_agents::lines::{Mark, MARK_BYTE, MARK_BYTE_SUBSTITUTE, MARK_MAX, MAX_LINE};

use super::{say, TurnLogArgs, EXIT_FAILURE};

/// The start of a cut line that is kept: with its mark, never more than [`MAX_LINE`].
const KEEP: usize = MAX_LINE - MARK_MAX;
/// Reads and writes are this large at most (what the supervisor's FIFO holds, and more).
const CHUNK: usize = 64 * 1024;

pub(super) fn run(args: TurnLogArgs) -> u8 {
    let open = || -> io::Result<(File, File)> {
        let input = File::from(io::stdin().as_fd().try_clone_to_owned()?);
        let out = File::from(io::stdout().as_fd().try_clone_to_owned()?);
        Ok((input, out))
    };
    let (input, mut out) = match open() {
        Ok(files) => files,
        Err(e) => {
            say(&format!("turn-log: standard input or output: {e}"));
            return EXIT_FAILURE;
        }
    };
    // Appending to an existing log: the limit is the file's size, not what this run writes.
    let size = out.metadata().map(|m| m.len()).unwrap_or(0);
    match copy(input, &mut out, size, args.max_bytes) {
        Ok(Copied { write_error: None }) => 0,
        Ok(Copied { write_error: Some(e) }) => {
            say(&format!("turn-log: writing the log failed (the rest was read and dropped): {e}"));
            EXIT_FAILURE
        }
        Err(e) => {
            say(&format!("turn-log: reading the harness's output: {e}"));
            EXIT_FAILURE
        }
    }
}

/// How a copy went: it read to the end; a failed write stopped the writing only.
#[derive(Debug)]
pub(super) struct Copied {
    pub write_error: Option<io::Error>,
}

/// Copies `input` to `out` (holding `size` bytes already) as the module doc says, until the
/// input ends. Only a failed read is an error.
pub(super) fn copy(input: impl Read, out: &mut impl Write, size: u64, max: u64) -> io::Result<Copied> {
    let mut reader = BufReader::with_capacity(CHUNK, input);
    let mut w = Writer {
        out,
        size,
        max,
        full: false,
        last: Vec::new(),
        last_ending: Ending::None,
        pending: Vec::new(),
        error: None,
    };
    let mut line = Vec::new();
    loop {
        // Nothing buffered: the next read may wait for the harness, so what it printed goes out now.
        if reader.buffer().is_empty() {
            w.flush();
        }
        line.clear();
        let n = (&mut reader).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        let ending = if line.last() == Some(&b'\n') {
            line.pop();
            Ending::Newline
        } else if line.len() > MAX_LINE {
            // Longer than a line may be: keep its start, count the rest without holding it.
            let rest = skip_line(&mut reader)?;
            let dropped = (line.len() - KEEP) as u64 + rest;
            line.truncate(KEEP);
            Ending::Cut(dropped)
        } else {
            // The input ended inside a line: it is written as it came, as `cat` would.
            Ending::None
        };
        w.line(&mut line, ending);
    }
    w.finish();
    Ok(Copied { write_error: w.error })
}

/// Reads up to and including the next `'\n'` (or to the end), holding nothing; the bytes read
/// before the `'\n'`.
fn skip_line(reader: &mut impl BufRead) -> io::Result<u64> {
    let mut skipped = 0u64;
    loop {
        let buf = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(skipped);
        }
        match find_newline(buf) {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(skipped + i as u64);
            }
            None => {
                let n = buf.len();
                skipped += n as u64;
                reader.consume(n);
            }
        }
    }
}

/// The first `'\n'` in `buf`. glibc's `memchr` rather than an iterator: the skipped part of a
/// long line is all that a 1 GiB line costs, and the debug build the tests run would scan it at
/// a fraction of the pipe's speed.
fn find_newline(buf: &[u8]) -> Option<usize> {
    // SAFETY: `memchr` reads at most `buf.len()` bytes from `buf`'s start, which are `buf`'s;
    // the pointer it returns, if any, is inside them.
    let at = unsafe { libc::memchr(buf.as_ptr().cast(), b'\n' as libc::c_int, buf.len()) };
    (!at.is_null()).then(|| at as usize - buf.as_ptr() as usize)
}

/// How a line read ends in the log.
#[derive(Debug, Clone, Copy)]
enum Ending {
    Newline,
    /// Cut: this many bytes were dropped, said by a mark, then a `'\n'`.
    Cut(u64),
    /// The input ended first.
    None,
}

struct Writer<'a, W: Write> {
    out: &'a mut W,
    /// The log's size with what is pending.
    size: u64,
    max: u64,
    full: bool,
    /// Once full: the last line read (as read, and how it ended), written at the end.
    last: Vec<u8>,
    last_ending: Ending,
    pending: Vec<u8>,
    /// The first failed write; nothing is written after it.
    error: Option<io::Error>,
}

impl<W: Write> Writer<'_, W> {
    fn line(&mut self, body: &mut [u8], ending: Ending) {
        if self.full {
            self.keep_last(body, ending);
            return;
        }
        substitute(body);
        let start = self.pending.len();
        self.pending.extend_from_slice(body);
        push_ending(&mut self.pending, ending);
        let len = (self.pending.len() - start) as u64;
        if self.size + len <= self.max {
            self.size += len;
        } else {
            // What fits, never more than a cut line keeps, then the one `log_full` mark.
            let room = self.max.saturating_sub(self.size) as usize;
            self.pending.truncate(start + room.min(body.len()).min(KEEP));
            self.pending.extend_from_slice(&Mark::LogFull { limit: self.max }.to_bytes());
            self.pending.push(b'\n');
            self.full = true;
            // The line may be the harness's last: it is kept whole for the end.
            self.keep_last(body, ending);
        }
        if self.pending.len() >= CHUNK {
            self.flush();
        }
    }

    fn keep_last(&mut self, body: &[u8], ending: Ending) {
        self.last.clear();
        self.last.extend_from_slice(body);
        self.last_ending = ending;
    }

    fn finish(&mut self) {
        if self.full && (!self.last.is_empty() || !matches!(self.last_ending, Ending::None)) {
            let mut last = std::mem::take(&mut self.last);
            substitute(&mut last);
            self.pending.extend_from_slice(&last);
            push_ending(&mut self.pending, self.last_ending);
        }
        self.flush();
    }

    fn flush(&mut self) {
        if self.error.is_none() && !self.pending.is_empty() {
            if let Err(e) = self.out.write_all(&self.pending).and_then(|()| self.out.flush()) {
                self.error = Some(e);
            }
        }
        self.pending.clear();
    }
}

fn push_ending(out: &mut Vec<u8>, ending: Ending) {
    match ending {
        Ending::Newline => out.push(b'\n'),
        Ending::Cut(dropped) => {
            out.extend_from_slice(&Mark::Cut { dropped }.to_bytes());
            out.push(b'\n');
        }
        Ending::None => {}
    }
}

/// The harness's own mark bytes, made something no reader takes for a mark.
fn substitute(body: &mut [u8]) {
    for b in body.iter_mut().filter(|b| **b == MARK_BYTE) {
        *b = MARK_BYTE_SUBSTITUTE;
    }
}

#[cfg(test)]
mod tests {
    use hangar_agents::lines::{Line, Lines};

    use super::*;

    /// A reader giving `data` a few bytes at a time, as a pipe may.
    struct Dribble<'a>(&'a [u8], usize);

    impl Read for Dribble<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(buf.len()).min(self.1);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn write(input: &[u8], size: u64, max: u64) -> Vec<u8> {
        let mut out = Vec::new();
        for step in [usize::MAX, 4093] {
            out.clear();
            let copied = copy(Dribble(input, step), &mut out, size, max).expect("copy");
            assert!(copied.write_error.is_none());
        }
        out
    }

    fn lines(log: &[u8]) -> Vec<Line> {
        let mut l = Lines::new(0);
        l.push(log)
    }

    #[test]
    fn lines_up_to_the_limit_pass_as_they_are_but_for_mark_bytes() {
        let mut input = b"a\n\nb \x1e c\n".to_vec();
        input.extend(vec![b'x'; MAX_LINE]);
        input.extend_from_slice(b"\nno newline");
        let mut want = input.clone();
        want[5] = MARK_BYTE_SUBSTITUTE;
        assert_eq!(write(&input, 0, u64::MAX), want);
    }

    #[test]
    fn a_long_line_keeps_its_start_and_says_what_it_dropped() {
        let mut input = b"before\n".to_vec();
        input.extend(vec![b'y'; MAX_LINE + 1]);
        input.extend_from_slice(b"\nafter\n");
        input.extend(vec![b'z'; 3 * MAX_LINE]);
        let log = write(&input, 0, u64::MAX);
        let cut = 7 + KEEP as u64 + Mark::Cut { dropped: 0 }.to_bytes().len() as u64 + 1 + 7;
        assert_eq!(
            lines(&log),
            vec![
                Line::Text { offset: 0, bytes: b"before".to_vec() },
                Line::Marked {
                    offset: 7,
                    kept: KEEP as u64,
                    mark: Mark::Cut { dropped: (MAX_LINE + 1 - KEEP) as u64 }
                },
                Line::Text { offset: cut - 6, bytes: b"after".to_vec() },
                Line::Marked {
                    offset: cut,
                    kept: KEEP as u64,
                    mark: Mark::Cut { dropped: (3 * MAX_LINE - KEEP) as u64 }
                },
            ]
        );
        assert!(log.split(|&b| b == b'\n').all(|l| l.len() <= MAX_LINE), "no line the relay reads is too long");
    }

    #[test]
    fn a_full_log_says_so_once_drops_what_follows_and_keeps_the_last_line() {
        let input = b"one\ntwo\nthree\nfour\n{\"type\":\"result\"}\n";
        let log = write(input, 2, 10);
        let mut want = b"one\ntwo\n".to_vec();
        want.extend_from_slice(&Mark::LogFull { limit: 10 }.to_bytes());
        want.extend_from_slice(b"\n{\"type\":\"result\"}\n");
        assert_eq!(log, want);
        // The line that filled the log is the last one: written whole after the mark.
        let log = write(b"one\ntwo\nthree\n", 0, 5);
        let mut want = b"one\nt".to_vec();
        want.extend_from_slice(&Mark::LogFull { limit: 5 }.to_bytes());
        want.extend_from_slice(b"\nthree\n");
        assert_eq!(log, want);
        // A log full already: the mark first.
        let mut want = Mark::LogFull { limit: 5 }.to_bytes();
        want.extend_from_slice(b"\nb\n");
        assert_eq!(write(b"a\nb\n", 9, 5), want);
    }

    /// A writer whose disk is full.
    struct Full;

    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from_raw_os_error(libc::ENOSPC))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_stops_writing_not_reading() {
        let input = vec![b'q'; 10 * CHUNK];
        let mut reader = io::Cursor::new(&input);
        let copied = copy(&mut reader, &mut Full, 0, u64::MAX).expect("reads to the end");
        assert!(copied.write_error.is_some());
        assert_eq!(reader.position(), input.len() as u64, "everything was read");
    }
}
