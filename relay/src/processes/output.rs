//! What reading a background process's output yields, from either backend, and the one fold
//! that turns those items into a read's result (`since`, `output`, `lost`, `next`). REST and
//! MCP only render what comes out of here.
use std::{collections::VecDeque, time::Duration};

use futures::{future::BoxFuture, Stream, StreamExt};
use serde::Serialize;

use crate::{
    error::{Error, Result},
    streams::{buffer::Shed, Reason, MESSAGE_OVERHEAD},
    text::{tail_str, Encoding, Tail},
};

/// Which of a process's outputs a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// One item of a process's output, with text cut on character boundaries and offsets that say
/// where to resume.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// The oldest offset still kept, and where the next byte will be when the read began.
    Start { oldest: u64, next: u64 },
    /// `next` is the offset of the first byte not in `data`: resuming there loses and repeats nothing.
    Data { data: String, stream: OutputStream, next: u64 },
    /// Bytes `from..to` are no longer kept: they are lost to this reader.
    Gap { from: u64, to: u64 },
    /// Output before offset `at` is lost and how much is not known: the relay followed the
    /// process on a daemon without hangar's ring (E2B's envd) and was not reading it then (it
    /// adopted the process after a restart, or took up a broken stream again). `message` says so.
    Lost { at: u64, message: String },
    /// The process ended; `total` is the offset after its last byte.
    End { exit_code: i32, status: String, total: u64 },
    /// The read ended early: the relay closed it (revocation, pause, destroy, shutdown, its
    /// lifetime or byte cap), or the daemon's stream broke (`Error`, with the message).
    Closed { reason: Reason, message: Option<String> },
}

impl Output {
    /// Whether nothing follows it.
    pub fn is_last(&self) -> bool {
        matches!(self, Output::End { .. } | Output::Closed { .. })
    }
}

/// What a reader that falls behind gives up, as the daemon's ring does for its subscribers: its
/// oldest output, said by a `Gap` of exactly those bytes in its place (adjacent gaps merge).
pub struct ShedOldest {
    /// Where the reader asked to start: where the start's output begins.
    since: Option<u64>,
    /// The offset after the last item the reader took: where the first queued output begins.
    taken: Option<u64>,
}

impl ShedOldest {
    pub fn new(since: Option<u64>) -> ShedOldest {
        ShedOldest { since, taken: None }
    }

    /// The offset after `item`.
    fn end(&self, item: &Output) -> Option<u64> {
        match item {
            Output::Start { oldest, .. } => Some(self.since.unwrap_or(*oldest)),
            Output::Data { next, .. } => Some(*next),
            Output::Gap { to, .. } => Some(*to),
            Output::Lost { at, .. } => Some(*at),
            Output::End { total, .. } => Some(*total),
            Output::Closed { .. } => None,
        }
    }
}

impl Shed<Output> for ShedOldest {
    fn cost(&self, item: &Output) -> usize {
        match item {
            Output::Data { data, .. } => data.len() + MESSAGE_OVERHEAD as usize,
            _ => 0,
        }
    }

    fn shed(&mut self, queue: &mut VecDeque<Output>) -> usize {
        let Some((i, len, next)) = queue.iter().enumerate().find_map(|(i, o)| match o {
            Output::Data { data, next, .. } => Some((i, data.len(), *next)),
            _ => None,
        }) else {
            return 0;
        };
        let from = match i.checked_sub(1) {
            Some(j) => self.end(&queue[j]),
            None => self.taken,
        };
        queue.remove(i);
        // A start always comes first, so `from` is known; were it not, the text's length is
        // the bytes it came from (bar replaced invalid UTF-8).
        let from = from.unwrap_or(next.saturating_sub(len as u64));
        let at = match i.checked_sub(1).map(|j| (j, &mut queue[j])) {
            Some((j, Output::Gap { to, .. })) if *to == from => {
                *to = next;
                j
            }
            _ => {
                queue.insert(i, Output::Gap { from, to: next });
                i
            }
        };
        // The daemon's own gap may follow: one gap says both.
        if let Some(&Output::Gap { from: f, to: t }) = queue.get(at + 1) {
            if f == next {
                queue.remove(at + 1);
                if let Some(Output::Gap { to, .. }) = queue.get_mut(at) {
                    *to = t;
                }
            }
        }
        len + MESSAGE_OVERHEAD as usize
    }

    fn took(&mut self, item: &Output) {
        if let Some(end) = self.end(item) {
            self.taken = Some(end);
        }
    }
}

/// What a read gathered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chunk {
    /// Where the output returned starts (the oldest byte kept, when the caller gave no `since`).
    pub since: u64,
    pub output: String,
    /// Bytes that were no longer kept.
    pub lost: u64,
    /// Where to resume: the offset after the last byte read.
    pub next: u64,
    /// The exit code, when the process's end was read.
    pub exit_code: Option<i32>,
    /// Why the relay ended the read early.
    pub closed: Option<Reason>,
}

/// Folds items into a `Chunk`, keeping at most `tail` bytes of text (the end); in base64, the
/// exact bytes are kept (at most `tail` of them) and encoded once at the end.
struct Fold {
    chunk: Chunk,
    encoding: Encoding,
    bytes: Tail,
    started: bool,
    asked: Option<u64>,
    /// Where output was when the read began: a read returns at least up to there.
    target: Option<u64>,
    tail: usize,
}

impl Fold {
    fn new(since: Option<u64>, tail: usize, encoding: Encoding) -> Fold {
        let at = since.unwrap_or(0);
        Fold {
            chunk: Chunk { since: at, next: at, ..Chunk::default() },
            encoding,
            bytes: Tail::new(tail),
            started: false,
            asked: since,
            target: None,
            tail,
        }
    }

    fn caught_up(&self) -> bool {
        self.target.is_some_and(|t| self.chunk.next >= t)
    }

    /// Takes one item; true when nothing more can come.
    fn push(&mut self, item: Output) -> Result<bool> {
        let c = &mut self.chunk;
        match item {
            Output::Start { oldest, next } => {
                self.started = true;
                c.since = self.asked.unwrap_or(oldest);
                c.next = c.since;
                self.target = Some(next);
            }
            Output::Data { data, next, .. } if self.encoding == Encoding::Base64 => {
                use base64::Engine as _;
                let b = base64::engine::general_purpose::STANDARD.decode(&data).unwrap_or_default();
                self.bytes.push(&b);
                c.next = next;
            }
            Output::Data { data, next, .. } => {
                c.output.push_str(&data);
                if c.output.len() > self.tail.saturating_mul(2) {
                    c.output = tail_str(&c.output, self.tail).to_string();
                }
                c.next = next;
            }
            Output::Gap { from, to } => {
                c.lost += to - from;
                c.next = to;
            }
            // Said by the process's `earlier_output`; no byte count to add.
            Output::Lost { .. } => {}
            Output::End { exit_code, total, .. } => {
                c.exit_code = Some(exit_code);
                c.next = total;
                return Ok(true);
            }
            Output::Closed { reason: Reason::Error, message } => {
                return Err(Error::daemon(format!(
                    "reading the process's output: {}",
                    message.as_deref().unwrap_or("the stream broke")
                )));
            }
            Output::Closed { reason, .. } => {
                c.closed = Some(reason);
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn finish(mut self) -> Chunk {
        if self.encoding == Encoding::Base64 {
            use base64::Engine as _;
            self.chunk.output = base64::engine::general_purpose::STANDARD.encode(self.bytes.bytes());
        }
        if self.chunk.output.len() > self.tail && self.encoding == Encoding::Text {
            self.chunk.output = tail_str(&self.chunk.output, self.tail).to_string();
        }
        self.chunk
    }
}

/// Once a read's wait is over, it still reads what was written before it began, until this
/// long passes without any.
pub const BACKLOG_QUIET: Duration = Duration::from_millis(250);
/// How long the start of a read (where output is) may take: a polled sandbox answers through
/// its provider's exec.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Called with each piece of text as it is read, and the offset after it; false stops the read
/// (whoever wanted it is gone).
pub type OnData<'a> = Box<dyn FnMut(String, u64) -> BoxFuture<'static, bool> + Send + 'a>;

/// Reads `items`: everything written before the read began, then what comes during `wait`, or
/// up to the process's end or the read's close, whichever is first. At most `tail` bytes of
/// text are kept (the end); `on_data` sees all of it.
pub async fn fold<S>(
    items: S,
    since: Option<u64>,
    encoding: Encoding,
    wait: Duration,
    tail: usize,
    mut on_data: OnData<'_>,
) -> Result<Chunk>
where
    S: Stream<Item = Output>,
{
    futures::pin_mut!(items);
    let mut fold = Fold::new(since, tail, encoding);
    let until = tokio::time::Instant::now() + wait;
    loop {
        let waiting = tokio::time::Instant::now() < until;
        if !waiting && fold.caught_up() {
            break;
        }
        let now = tokio::time::Instant::now();
        let deadline = match (fold.started, waiting) {
            // The start says where output is; without it nothing can be read.
            (false, _) => until.max(now + START_TIMEOUT),
            (true, true) => until,
            (true, false) => now + BACKLOG_QUIET,
        };
        let item = match tokio::time::timeout_at(deadline, items.next()).await {
            Ok(Some(item)) => item,
            Ok(None) => break,
            Err(_) if !fold.started => break,
            // The wait is over: read what was written before the read began.
            Err(_) if waiting => continue,
            Err(_) => break,
        };
        if let Output::Data { data, next, .. } = &item {
            if !on_data(data.clone(), *next).await {
                return Err(Error::unavailable("the client went away"));
            }
        }
        if fold.push(item)? {
            break;
        }
    }
    if !fold.started {
        return Err(Error::daemon("the process's output did not start in time"));
    }
    Ok(fold.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(s: &str, next: u64) -> Output {
        Output::Data { data: s.into(), stream: OutputStream::Stdout, next }
    }

    fn quiet() -> OnData<'static> {
        Box::new(|_, _| Box::pin(async { true }))
    }

    #[test]
    fn a_reader_behind_loses_its_oldest_output_to_one_gap() {
        let mut shed = ShedOldest::new(Some(5));
        let mut q: VecDeque<Output> = vec![
            Output::Start { oldest: 0, next: 20 },
            data("abc", 8),
            data("de", 10),
            Output::Gap { from: 10, to: 15 },
            data("f", 16),
        ]
        .into();
        assert_eq!(shed.shed(&mut q), 3 + MESSAGE_OVERHEAD as usize);
        assert_eq!(q[1], Output::Gap { from: 5, to: 8 }, "from the start's `since`");
        // The next shed extends it, and takes in the daemon's own gap after it.
        shed.shed(&mut q);
        assert_eq!(
            Vec::from(q.clone()),
            vec![Output::Start { oldest: 0, next: 20 }, Output::Gap { from: 5, to: 15 }, data("f", 16)]
        );
        // What the reader took says where the next shed starts.
        for _ in 0..2 {
            let item = q.pop_front().unwrap();
            shed.took(&item);
        }
        shed.shed(&mut q);
        assert_eq!(Vec::from(q), vec![Output::Gap { from: 15, to: 16 }]);
        assert_eq!(
            shed.shed(&mut VecDeque::from(vec![Output::End { exit_code: 0, status: String::new(), total: 16 }])),
            0
        );
    }

    #[tokio::test]
    async fn a_read_returns_what_was_written_before_it_and_counts_gaps() {
        let items = futures::stream::iter(vec![
            Output::Start { oldest: 10, next: 30 },
            data("abc", 13),
            Output::Gap { from: 13, to: 25 },
            data("defgh", 30),
        ])
        .chain(futures::stream::pending());
        let c = fold(items, None, Encoding::Text, Duration::ZERO, 1024, quiet()).await.unwrap();
        assert_eq!(c, Chunk { since: 10, output: "abcdefgh".into(), lost: 12, next: 30, ..Chunk::default() });
    }

    #[tokio::test]
    async fn an_end_or_a_close_ends_the_read_and_the_tail_is_kept() {
        let items = futures::stream::iter(vec![
            Output::Start { oldest: 0, next: 0 },
            data("0123456789", 10),
            Output::End { exit_code: 3, status: "exit status 3".into(), total: 10 },
        ]);
        let c = fold(items, Some(0), Encoding::Text, Duration::from_secs(60), 4, quiet()).await.unwrap();
        assert_eq!((c.output.as_str(), c.exit_code, c.next), ("6789", Some(3), 10));
        let items = futures::stream::iter(vec![
            Output::Start { oldest: 0, next: 5 },
            Output::Closed { reason: Reason::Revoked, message: None },
        ]);
        let c = fold(items, Some(0), Encoding::Text, Duration::from_secs(60), 4, quiet()).await.unwrap();
        assert_eq!(c.closed, Some(Reason::Revoked));
        let broken = futures::stream::iter(vec![
            Output::Start { oldest: 0, next: 5 },
            Output::Closed { reason: Reason::Error, message: Some("reset".into()) },
        ]);
        assert!(matches!(fold(broken, None, Encoding::Text, Duration::ZERO, 4, quiet()).await, Err(Error::Daemon(_))));
    }
}
