//! A process's output log: one ring of its recent output addressed by absolute byte offsets, and
//! the subscribers that read it, each at its own cursor.
//!
//! A subscriber's "queue" is the ring after its cursor, so it is bounded by the ring. A subscriber
//! that falls behind the ring's start loses the oldest bytes and is told exactly which (a gap);
//! it never slows anyone. The one exception is the *primary* subscriber (the `Start` stream):
//! readers stop reading the process's pipes while it lags by a ring's worth, as a slow terminal
//! would, so the primary never loses a byte.
use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, MutexGuard},
};

use bytes::{Bytes, BytesMut};
use tokio::sync::{watch, Notify};

use super::exit::ExitInfo;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamKind {
    Stdout,
    Stderr,
    Pty,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Absolute offset of `data[0]` from the process's first byte of output.
    pub offset: u64,
    pub kind: StreamKind,
    pub data: Bytes,
}

impl Chunk {
    fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

/// What a subscriber sees next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Bytes `[from, to)` left the ring before this subscriber read them.
    Gap {
        from: u64,
        to: u64,
    },
    Data(Chunk),
    /// The process exited and every output reached end of file; `total` bytes were written.
    End {
        exit: ExitInfo,
        total: u64,
    },
}

#[derive(Debug)]
struct Ring {
    chunks: VecDeque<Chunk>,
    start: u64,
    end: u64,
    cap: u64,
    /// Everything before this offset is held in settled pieces (see [`Ring::settle`]).
    settled: u64,
}

/// The largest piece [`Ring::settle`] makes: what the ring's front may hold of bytes it already
/// dropped, once settled.
const SETTLED_PIECE: usize = 16 * 1024;

impl Ring {
    fn push(&mut self, kind: StreamKind, data: Bytes) {
        if data.is_empty() {
            return;
        }
        let len = data.len() as u64;
        self.chunks.push_back(Chunk { offset: self.end, kind, data });
        self.end += len;
        while self.end - self.start > self.cap {
            let excess = (self.end - self.start) - self.cap;
            let Some(front) = self.chunks.front_mut() else { break };
            let flen = front.data.len() as u64;
            if flen <= excess {
                self.start += flen;
                self.chunks.pop_front();
            } else {
                front.data = front.data.slice(excess as usize..);
                front.offset += excess;
                self.start += excess;
            }
        }
    }

    /// Copies what arrived since the last settling into pieces of their exact size, one stream's
    /// bytes each and at most [`SETTLED_PIECE`] long. Until then a chunk is a slice of the block a
    /// read landed in, and keeps all of that block allocated: the block's unused end, and its
    /// head once the ring dropped it. A ring settled while its process is quiet holds what it
    /// holds and little more.
    fn settle(&mut self) {
        let from = self.settled.max(self.start);
        let mut first = self.chunks.partition_point(|c| c.offset < from);
        if first == self.chunks.len() {
            return;
        }
        // The last piece, if short, is made again with what follows: an output that goes quiet
        // after every line fills pieces rather than making one per line.
        if first > 0 && self.chunks[first - 1].data.len() < SETTLED_PIECE {
            first -= 1;
        }
        let fresh: Vec<Chunk> = self.chunks.drain(first..).collect();
        for run in fresh.chunk_by(|a, b| a.kind == b.kind) {
            let kind = run[0].kind;
            let mut offset = run[0].offset;
            let mut left: usize = run.iter().map(|c| c.data.len()).sum();
            let mut want = left.min(SETTLED_PIECE);
            let mut piece = BytesMut::with_capacity(want);
            for c in run {
                let mut data = &c.data[..];
                while !data.is_empty() {
                    let k = data.len().min(want - piece.len());
                    piece.extend_from_slice(&data[..k]);
                    data = &data[k..];
                    if piece.len() == want {
                        left -= want;
                        let len = want as u64;
                        want = left.min(SETTLED_PIECE);
                        let full = std::mem::replace(&mut piece, BytesMut::with_capacity(want));
                        let data = super::heap::page_backed(&full).unwrap_or_else(|| full.freeze());
                        self.chunks.push_back(Chunk { offset, kind, data });
                        offset += len;
                    }
                }
            }
        }
        // A burst of small chunks grew the queue; a settled ring needs a fraction of it.
        if self.chunks.capacity() > 4 * self.chunks.len() + 16 {
            self.chunks.shrink_to(2 * self.chunks.len() + 16);
        }
        self.settled = self.end;
    }

    /// Up to `max` bytes from `cursor`, merging adjacent chunks of the same stream.
    fn read(&self, cursor: u64, max: usize) -> Option<Chunk> {
        if cursor >= self.end || cursor < self.start {
            return None;
        }
        let idx = self.chunks.partition_point(|c| c.end() <= cursor);
        let first = self.chunks.get(idx)?;
        let skip = (cursor - first.offset) as usize;
        let take = (first.data.len() - skip).min(max);
        let head = first.data.slice(skip..skip + take);
        let next = self.chunks.range(idx + 1..).take_while(|c| c.kind == first.kind);
        // Sized once: growing the buffer chunk by chunk copied the merged bytes again at each
        // doubling (bench scenario 4's profile).
        let mut merged = take;
        for c in next.clone() {
            if merged >= max {
                break;
            }
            merged += c.data.len();
        }
        let merged = merged.min(max);
        if merged == take {
            return Some(Chunk { offset: cursor, kind: first.kind, data: head });
        }
        let mut buf = BytesMut::with_capacity(merged);
        buf.extend_from_slice(&head);
        for c in next {
            let room = merged - buf.len();
            if room == 0 {
                break;
            }
            buf.extend_from_slice(&c.data[..c.data.len().min(room)]);
        }
        Some(Chunk { offset: cursor, kind: first.kind, data: buf.freeze() })
    }
}

#[derive(Debug)]
struct State {
    ring: Ring,
    open_outputs: usize,
    exit: Option<ExitInfo>,
    /// The primary subscriber's cursor, while it is attached.
    primary: Option<u64>,
}

impl State {
    fn finished(&self) -> Option<&ExitInfo> {
        if self.open_outputs == 0 {
            self.exit.as_ref()
        } else {
            None
        }
    }
}

/// The largest data event handed out at once.
pub const MAX_EVENT_BYTES: usize = 64 * 1024;

#[derive(Debug)]
pub struct OutputLog {
    state: Mutex<State>,
    /// Bumped on every change subscribers may wait for.
    changed: watch::Sender<u64>,
    /// Signalled when the primary advances or goes away.
    room: Notify,
    /// How much a reader takes from a pipe at once.
    read_chunk: usize,
}

impl OutputLog {
    pub fn new(ring_bytes: u64, outputs: usize) -> Arc<Self> {
        let (changed, _) = watch::channel(0);
        Arc::new(Self {
            state: Mutex::new(State {
                ring: Ring { chunks: VecDeque::new(), start: 0, end: 0, cap: ring_bytes, settled: 0 },
                open_outputs: outputs,
                exit: None,
                primary: None,
            }),
            changed,
            room: Notify::new(),
            read_chunk: (ring_bytes as usize / 4).clamp(1, MAX_EVENT_BYTES),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock leaves plain data behind; keep serving it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// The buffer size a reader should use.
    pub fn read_chunk(&self) -> usize {
        self.read_chunk
    }

    /// Appends without regard for the primary subscriber (tests, and logs with no primary).
    pub fn push(&self, kind: StreamKind, data: Bytes) {
        self.lock().ring.push(kind, data);
        self.bump();
    }

    /// Appends once doing so keeps the primary subscriber inside the ring, waiting for it to read
    /// if need be. The check and the append happen under one lock: with several readers (stdout
    /// and stderr), a check made before a read would be stale by the time its bytes arrive.
    /// A reader waiting here reads no more, so the process blocks on its pipe: backpressure.
    pub async fn push_within_room(&self, kind: StreamKind, data: Bytes) {
        let len = data.len() as u64;
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.lock();
                let fits = match s.primary {
                    // A chunk larger than the ring can never fit; let it through rather than stall.
                    Some(cursor) => s.ring.end - cursor + len <= s.ring.cap || s.ring.end == cursor,
                    None => true,
                };
                if fits {
                    s.ring.push(kind, data);
                    drop(s);
                    self.bump();
                    return;
                }
            }
            notified.await;
        }
    }

    /// Settles the ring (see [`Ring::settle`]): for an output that has gone quiet.
    pub fn settle(&self) {
        self.lock().ring.settle();
    }

    /// Whether everything the ring holds is in settled pieces.
    #[cfg(test)]
    pub fn is_settled(&self) -> bool {
        let s = self.lock();
        s.ring.settled >= s.ring.end
    }

    /// One of the process's outputs reached end of file.
    pub fn close_output(&self) {
        {
            let mut s = self.lock();
            s.open_outputs = s.open_outputs.saturating_sub(1);
        }
        self.bump();
    }

    pub fn set_exit(&self, exit: ExitInfo) {
        self.lock().exit = Some(exit);
        self.bump();
    }

    pub fn exit(&self) -> Option<ExitInfo> {
        self.lock().exit.clone()
    }

    pub fn finished(&self) -> bool {
        self.lock().finished().is_some()
    }

    /// `(oldest offset kept, next offset)`.
    pub fn bounds(&self) -> (u64, u64) {
        let s = self.lock();
        (s.ring.start, s.ring.end)
    }

    /// Waits until the process exited and its outputs closed.
    pub async fn wait_finished(&self) -> ExitInfo {
        let mut rx = self.changed.subscribe();
        loop {
            if let Some(exit) = self.lock().finished() {
                return exit.clone();
            }
            if rx.changed().await.is_err() {
                // The sender lives in self, so this cannot happen while we hold &self.
                std::future::pending::<()>().await;
            }
        }
    }

    /// A subscriber starting at `cursor`. The primary one (at most one) applies backpressure.
    pub fn subscribe(self: &Arc<Self>, cursor: u64, primary: bool) -> Subscriber {
        let rx = self.changed.subscribe();
        if primary {
            self.lock().primary = Some(cursor);
        }
        Subscriber { log: self.clone(), cursor, rx, primary, done: false }
    }
}

#[derive(Debug)]
pub struct Subscriber {
    log: Arc<OutputLog>,
    cursor: u64,
    rx: watch::Receiver<u64>,
    primary: bool,
    done: bool,
}

impl Subscriber {
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The next event. Cancel-safe: nothing is consumed until it returns. After `End` it
    /// never returns again.
    pub async fn next(&mut self) -> Event {
        loop {
            if self.done {
                std::future::pending::<()>().await;
            }
            self.rx.borrow_and_update();
            if let Some(ev) = self.poll_once() {
                return ev;
            }
            if self.rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    fn poll_once(&mut self) -> Option<Event> {
        let ev = {
            let mut s = self.log.lock();
            let ev = if self.cursor < s.ring.start {
                let from = self.cursor;
                self.cursor = s.ring.start;
                Some(Event::Gap { from, to: s.ring.start })
            } else if let Some(chunk) = s.ring.read(self.cursor, MAX_EVENT_BYTES) {
                self.cursor = chunk.end();
                Some(Event::Data(chunk))
            } else if let Some(exit) = s.finished() {
                self.done = true;
                Some(Event::End { exit: exit.clone(), total: s.ring.end })
            } else {
                None
            };
            if self.primary && ev.is_some() {
                s.primary = Some(self.cursor);
            }
            ev
        };
        if self.primary && ev.is_some() {
            self.log.room.notify_waiters();
        }
        ev
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        if self.primary {
            self.log.lock().primary = None;
            self.log.room.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn exit0() -> ExitInfo {
        ExitInfo::from_code(0)
    }

    #[tokio::test]
    async fn ring_keeps_the_last_bytes_with_offsets() {
        let log = OutputLog::new(8, 1);
        log.push(StreamKind::Stdout, Bytes::from_static(b"abcdef"));
        log.push(StreamKind::Stderr, Bytes::from_static(b"ghij"));
        assert_eq!(log.bounds(), (2, 10));
        let mut sub = log.subscribe(0, false);
        assert_eq!(sub.next().await, Event::Gap { from: 0, to: 2 });
        let Event::Data(c) = sub.next().await else { panic!() };
        assert_eq!((c.offset, c.kind, &c.data[..]), (2, StreamKind::Stdout, &b"cdef"[..]));
        let Event::Data(c) = sub.next().await else { panic!() };
        assert_eq!((c.offset, c.kind, &c.data[..]), (6, StreamKind::Stderr, &b"ghij"[..]));
        log.close_output();
        log.set_exit(exit0());
        assert!(matches!(sub.next().await, Event::End { total: 10, .. }));
    }

    /// Everything a subscriber starting at the ring's start reads, as (offset, kind, bytes).
    async fn contents(log: &Arc<OutputLog>) -> Vec<(u64, StreamKind, Vec<u8>)> {
        let (start, end) = log.bounds();
        let mut sub = log.subscribe(start, false);
        let mut out: Vec<(u64, StreamKind, Vec<u8>)> = Vec::new();
        while sub.cursor() < end {
            let Event::Data(c) = sub.next().await else { panic!("a gap or an end inside the ring") };
            match out.last_mut() {
                Some(last) if last.1 == c.kind => last.2.extend_from_slice(&c.data),
                _ => out.push((c.offset, c.kind, c.data.to_vec())),
            }
        }
        out
    }

    #[tokio::test]
    async fn settling_keeps_every_byte_in_pieces_of_their_own() {
        let log = OutputLog::new(100_000, 2);
        // Reads as the pump makes them: slices of one block, stdout and stderr in turn, more
        // than the ring holds, so its front is a slice too.
        let mut block = BytesMut::with_capacity(150_000);
        block.extend((0..150_000u32).map(|i| (i % 251) as u8));
        let block = block.freeze();
        let range = block.as_ptr() as usize..block.as_ptr() as usize + block.len();
        for (i, at) in (0..150_000).step_by(10_000).enumerate() {
            let kind = if i % 3 == 2 { StreamKind::Stderr } else { StreamKind::Stdout };
            log.push(kind, block.slice(at..at + 10_000));
        }
        let before = contents(&log).await;
        let bounds = log.bounds();
        log.settle();
        assert_eq!(log.bounds(), bounds);
        assert_eq!(contents(&log).await, before);
        let s = log.lock();
        for c in &s.ring.chunks {
            assert!(c.data.len() <= SETTLED_PIECE);
            assert!(!range.contains(&(c.data.as_ptr() as usize)), "a settled chunk still points into the block");
        }
    }

    #[tokio::test]
    async fn an_output_quiet_after_every_line_fills_pieces() {
        let log = OutputLog::new(1 << 20, 1);
        let mut all = Vec::new();
        for i in 0..2000 {
            let line = format!("line {i}\n");
            all.extend_from_slice(line.as_bytes());
            log.push(StreamKind::Stdout, Bytes::from(line));
            log.settle();
        }
        assert_eq!(contents(&log).await, vec![(0, StreamKind::Stdout, all.clone())]);
        let pieces = log.lock().ring.chunks.len();
        assert_eq!(pieces, all.len().div_ceil(SETTLED_PIECE), "{pieces} pieces for {} bytes", all.len());
    }

    #[tokio::test]
    async fn adjacent_chunks_of_one_stream_merge() {
        let log = OutputLog::new(1024, 1);
        for _ in 0..10 {
            log.push(StreamKind::Stdout, Bytes::from_static(b"x"));
        }
        let mut sub = log.subscribe(3, false);
        let Event::Data(c) = sub.next().await else { panic!() };
        assert_eq!((c.offset, c.data.len()), (3, 7));
    }

    #[test]
    fn a_merged_read_stops_at_its_limit_and_at_the_other_stream() {
        let mut ring = Ring { chunks: VecDeque::new(), start: 0, end: 0, cap: 1024, settled: 0 };
        for (kind, data) in [(StreamKind::Stdout, "ab"), (StreamKind::Stdout, "cd"), (StreamKind::Stdout, "ef")] {
            ring.push(kind, Bytes::from_static(data.as_bytes()));
        }
        ring.push(StreamKind::Stderr, Bytes::from_static(b"gh"));
        let read = |cursor, max| ring.read(cursor, max).map(|c| (c.offset, c.kind, c.data));
        assert_eq!(read(1, 4), Some((1, StreamKind::Stdout, Bytes::from_static(b"bcde"))));
        assert_eq!(read(1, 5), Some((1, StreamKind::Stdout, Bytes::from_static(b"bcdef"))));
        assert_eq!(read(1, 100), Some((1, StreamKind::Stdout, Bytes::from_static(b"bcdef"))));
        assert_eq!(read(0, 1), Some((0, StreamKind::Stdout, Bytes::from_static(b"a"))));
        assert_eq!(read(6, 100), Some((6, StreamKind::Stderr, Bytes::from_static(b"gh"))));
        assert_eq!(read(8, 100), None);
    }

    #[tokio::test]
    async fn a_push_waits_while_the_primary_is_a_ring_behind() {
        let log = OutputLog::new(4096, 2);
        let mut primary = log.subscribe(0, true);
        log.push_within_room(StreamKind::Stdout, Bytes::from(vec![b'a'; 4094])).await;
        // A second reader's chunk would push unread bytes out of the ring: it must wait.
        let waiter = {
            let log = log.clone();
            tokio::spawn(async move { log.push_within_room(StreamKind::Stderr, Bytes::from_static(b"end\n")).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "a full primary must hold the push back");
        let Event::Data(c) = primary.next().await else { panic!() };
        assert_eq!((c.offset, c.data.len()), (0, 4094), "nothing was lost");
        tokio::time::timeout(Duration::from_secs(2), waiter).await.unwrap().unwrap();
        let Event::Data(c) = primary.next().await else { panic!() };
        assert_eq!((c.offset, &c.data[..]), (4094, &b"end\n"[..]));
        drop(primary);
        // With no primary, nothing waits.
        tokio::time::timeout(
            Duration::from_secs(2),
            log.push_within_room(StreamKind::Stdout, Bytes::from(vec![b'b'; 4096])),
        )
        .await
        .unwrap();
    }
}
