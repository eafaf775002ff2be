//! What the relay keeps for one stream's client, between the sandbox's daemon and the client.
//!
//! A sandbox's streams share one HTTP/2 connection to its daemon, so a stream the relay reads
//! only as fast as its client would let a client that stops reading hold data the connection
//! must carry for everyone. Instead a task drains the daemon's stream as it comes into a queue
//! the client reads from, bounded in bytes (`HANGAR_STREAM_BUFFER_BYTES`). Past the bound the
//! kind's [`Shed`] says what goes, and puts a marker in its place (a process's oldest output
//! becomes a gap, a watch's newest changes an overflow), or, for a command's own client
//! ([`Full::Hold`]), the task stops reading while that client keeps reading, so the command
//! waits for it, and sheds once the client has taken nothing for the stall bound.
//!
//! Invariant: the queue holds at most the bound (and the one item that crossed it); markers
//! cost nothing; the task ends with its source or when the reader is dropped.
use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use futures::{Stream, StreamExt};
use tokio::{sync::Notify, task::JoinHandle, time::Instant};
use tracing::Instrument;

/// What a kind of stream gives up when its client falls too far behind.
pub trait Shed<T>: Send + 'static {
    /// The bytes `item` keeps while queued; markers (a start, a gap, an end) cost 0.
    fn cost(&self, item: &T) -> usize;
    /// The queue is over its bound: drops something and says so with a marker in its place.
    /// Returns the bytes freed; 0 when nothing can go (then the queue stays as it is).
    fn shed(&mut self, queue: &mut VecDeque<T>) -> usize;
    /// `item` left the queue for the client (what the next shed counts from).
    fn took(&mut self, _item: &T) {}
}

/// What happens when the queue is full.
#[derive(Debug, Clone, Copy)]
pub enum Full {
    /// Shed at once: the source never waits for this client.
    Shed,
    /// Stop reading the source while the client has taken something within `stall` (the
    /// daemon then holds the command back, as a slow terminal would); shed once it has not.
    Hold { stall: Duration },
}

struct State<T, P> {
    queue: VecDeque<T>,
    bytes: usize,
    shed: P,
    /// Since when the client has had something to take and taken nothing: its last take, or
    /// when an item came into an empty queue.
    waiting_since: Instant,
    /// The source ended: after the queue, nothing more.
    ended: bool,
}

struct Shared<T, P> {
    state: Mutex<State<T, P>>,
    /// An item was queued, or the source ended.
    queued: Notify,
    /// The client took an item.
    taken: Notify,
}

impl<T, P> Shared<T, P> {
    fn lock(&self) -> MutexGuard<'_, State<T, P>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The client's end of a drained stream. Dropping it stops the task, which drops the source.
pub struct Buffer<T, P> {
    shared: Arc<Shared<T, P>>,
    task: JoinHandle<()>,
}

impl<T: Send + 'static, P: Shed<T>> Buffer<T, P> {
    /// Starts draining `source` into a queue of at most `bound` bytes.
    pub fn spawn<S>(source: S, shed: P, bound: usize, full: Full) -> Buffer<T, P>
    where
        S: Stream<Item = T> + Send + 'static,
    {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                bytes: 0,
                shed,
                waiting_since: Instant::now(),
                ended: false,
            }),
            queued: Notify::new(),
            taken: Notify::new(),
        });
        let task = tokio::spawn(drain(source, shared.clone(), bound, full).in_current_span());
        Buffer { shared, task }
    }

    /// The next item; `None` once the source has ended and everything was taken. Cancel-safe:
    /// an item is either returned or still queued.
    pub async fn next(&self) -> Option<T> {
        loop {
            // Registered before looking, so an item queued in between still wakes this.
            let queued = self.shared.queued.notified();
            {
                let mut s = self.shared.lock();
                if let Some(item) = s.queue.pop_front() {
                    let cost = s.shed.cost(&item);
                    s.bytes = s.bytes.saturating_sub(cost);
                    s.shed.took(&item);
                    s.waiting_since = Instant::now();
                    drop(s);
                    self.shared.taken.notify_one();
                    return Some(item);
                }
                if s.ended {
                    return None;
                }
            }
            queued.await;
        }
    }

    /// The items as a stream, ending with the source.
    pub fn into_stream(self) -> impl Stream<Item = T> + Send
    where
        P: Send,
    {
        futures::stream::unfold(self, |b| async move { b.next().await.map(|item| (item, b)) })
    }
}

impl<T, P> Drop for Buffer<T, P> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads `source` as it comes into the queue, making room as `full` says.
async fn drain<T, P, S>(source: S, shared: Arc<Shared<T, P>>, bound: usize, full: Full)
where
    T: Send + 'static,
    P: Shed<T>,
    S: Stream<Item = T> + Send + 'static,
{
    // However the task ends (its source's end, a panic), the reader is told: nothing more comes.
    let _ended = Ended(&shared);
    futures::pin_mut!(source);
    while let Some(item) = source.next().await {
        let must_fit = match full {
            Full::Shed => true,
            Full::Hold { stall } => !room_or_stalled(&shared, bound, stall).await,
        };
        let mut s = shared.lock();
        if s.queue.is_empty() {
            // A client that was waiting for this is reading, however long ago it last took.
            s.waiting_since = Instant::now();
        }
        let cost = s.shed.cost(&item);
        s.bytes += cost;
        s.queue.push_back(item);
        if must_fit {
            let State { queue, bytes, shed, .. } = &mut *s;
            while *bytes > bound {
                let freed = shed.shed(queue);
                if freed == 0 {
                    break;
                }
                *bytes = bytes.saturating_sub(freed);
            }
        }
        drop(s);
        shared.queued.notify_one();
    }
}

struct Ended<'a, T, P>(&'a Shared<T, P>);

impl<T, P> Drop for Ended<'_, T, P> {
    fn drop(&mut self) {
        self.0.lock().ended = true;
        self.0.queued.notify_one();
    }
}

/// Waits while the queue is full and its client is reading. True when there is room; false
/// when the client has taken nothing for `stall` (it is not reading: what comes must fit).
async fn room_or_stalled<T, P>(shared: &Shared<T, P>, bound: usize, stall: Duration) -> bool {
    loop {
        let taken = shared.taken.notified();
        let wait = {
            let s = shared.lock();
            if s.bytes < bound {
                return true;
            }
            let idle = s.waiting_since.elapsed();
            if idle >= stall {
                return false;
            }
            stall - idle
        };
        // Woken by a take (there may be room now), or at the end of the stall.
        let _ = tokio::time::timeout(wait, taken).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes with their offsets; shedding the oldest leaves a count of what went.
    #[derive(Debug, Clone, PartialEq)]
    enum Item {
        Data(usize),
        Lost(usize),
    }

    struct Oldest;

    impl Shed<Item> for Oldest {
        fn cost(&self, item: &Item) -> usize {
            match item {
                Item::Data(n) => *n,
                Item::Lost(_) => 0,
            }
        }

        fn shed(&mut self, queue: &mut VecDeque<Item>) -> usize {
            let Some(i) = queue.iter().position(|x| matches!(x, Item::Data(_))) else { return 0 };
            let Some(Item::Data(n)) = queue.remove(i) else { return 0 };
            match i.checked_sub(1).and_then(|j| queue.get_mut(j)) {
                Some(Item::Lost(m)) => *m += n,
                _ => queue.insert(i, Item::Lost(n)),
            }
            n
        }
    }

    async fn all(b: Buffer<Item, Oldest>) -> Vec<Item> {
        b.into_stream().collect().await
    }

    #[tokio::test]
    async fn a_reader_that_falls_behind_loses_the_oldest_and_is_told() {
        let source = futures::stream::iter((0..10).map(|_| Item::Data(10)));
        let b = Buffer::spawn(source, Oldest, 35, Full::Shed);
        // Let the task drain everything before reading anything.
        while !b.shared.lock().ended {
            tokio::task::yield_now().await;
        }
        assert_eq!(all(b).await, vec![Item::Lost(70), Item::Data(10), Item::Data(10), Item::Data(10)]);
    }

    /// Polls `f` on the buffer's state until it holds (bounded).
    async fn until(b: &Buffer<Item, Oldest>, what: &str, f: impl Fn(&VecDeque<Item>) -> bool) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while !f(&b.shared.lock().queue) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{what}"));
    }

    #[tokio::test]
    async fn a_held_source_waits_for_a_reading_client_and_not_for_a_stalled_one() {
        let stall = Duration::from_millis(500);
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let b = Buffer::spawn(rx, Oldest, 20, Full::Hold { stall });
        for _ in 0..4 {
            tx.unbounded_send(Item::Data(10)).unwrap();
        }
        // Two fit; the third waits for room while the client may still read.
        until(&b, "two queued", |q| q.len() == 2).await;
        tokio::time::sleep(stall / 5).await;
        assert_eq!(b.shared.lock().queue.len(), 2, "the source waits");
        assert_eq!(b.next().await, Some(Item::Data(10)));
        // A take makes room for the third; the fourth waits out the stall, then the oldest goes.
        until(&b, "the oldest shed", |q| q.front() == Some(&Item::Lost(10))).await;
        drop(tx);
        assert_eq!(all(b).await, vec![Item::Lost(10), Item::Data(10), Item::Data(10)]);
    }

    #[tokio::test]
    async fn dropping_the_reader_drops_the_source() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Item>();
        let b = Buffer::spawn(rx, Oldest, 20, Full::Shed);
        drop(b);
        tokio::time::timeout(Duration::from_secs(5), async {
            while !tx.is_closed() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the source is dropped");
    }
}
