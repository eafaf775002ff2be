//! The fleet's change log, for its stream: the last `RING` changes, each numbered `n` in this
//! relay run, whose `epoch` is random at each start. A stream event's id is `<epoch>.<n>`; a
//! stream that resumes from one gets the units changed after `n`, as long as the ring still holds
//! every change since (an id from another run, or older than the ring, gets a fresh snapshot).
//! Streams wait on a watch channel of the latest `n`.
use std::{
    collections::VecDeque,
    sync::{Mutex, MutexGuard},
};

use tokio::sync::watch;

/// How many changes are kept.
pub const RING: usize = 4_096;

/// What changed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    /// A unit, by its sandbox id: its sandbox, a session, turn or job in it, its live picture,
    /// or an inbox item on it.
    Unit(String),
    /// The inbox (an item opened or ended).
    Inbox,
}

/// Changes after a position: what changed, each with its `n`, oldest first.
pub type Since = Vec<(u64, Key)>;

#[derive(Debug, Default)]
struct Ring {
    entries: VecDeque<(u64, Key)>,
    head: u64,
}

impl Ring {
    fn push(&mut self, key: Key) -> u64 {
        self.head += 1;
        self.entries.push_back((self.head, key));
        while self.entries.len() > RING {
            self.entries.pop_front();
        }
        self.head
    }

    /// Every change after `n`, or `None` when the ring no longer holds them all (or `n` is
    /// ahead of the log).
    fn since(&self, n: u64) -> Option<Since> {
        let floor = self.entries.front().map_or(self.head, |(first, _)| first - 1);
        if n < floor || n > self.head {
            return None;
        }
        Some(self.entries.iter().filter(|(m, _)| *m > n).cloned().collect())
    }
}

pub struct Changes {
    epoch: String,
    ring: Mutex<Ring>,
    tx: watch::Sender<u64>,
}

impl Changes {
    pub fn new(epoch: String) -> Changes {
        Changes { epoch, ring: Mutex::default(), tx: watch::channel(0).0 }
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a change and wakes the streams; its number.
    pub fn record(&self, key: Key) -> u64 {
        let n = self.lock().push(key);
        self.tx.send_replace(n);
        n
    }

    /// Records several changes at once (one wake-up).
    pub fn record_all(&self, keys: impl IntoIterator<Item = Key>) {
        let mut ring = self.lock();
        let before = ring.head;
        for k in keys {
            ring.push(k);
        }
        let head = ring.head;
        drop(ring);
        if head != before {
            self.tx.send_replace(head);
        }
    }

    /// The latest change's number (0: none yet).
    pub fn head(&self) -> u64 {
        self.lock().head
    }

    pub fn since(&self, n: u64) -> Option<Since> {
        self.lock().since(n)
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }

    /// A stream event's id for change `n`.
    pub fn id(&self, n: u64) -> String {
        format!("{}.{n}", self.epoch)
    }

    /// The change an id of this run names; `None` for another run's id or no id at all.
    pub fn parse(&self, id: &str) -> Option<u64> {
        let (epoch, n) = id.trim().split_once('.')?;
        if epoch != self.epoch {
            return None;
        }
        n.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(s: &str) -> Key {
        Key::Unit(s.to_string())
    }

    #[test]
    fn a_resume_gets_what_changed_since_while_the_ring_holds_it() {
        let c = Changes::new("e1".into());
        assert_eq!(c.since(0), Some(vec![]), "nothing happened yet");
        let a = c.record(unit("a"));
        c.record_all([unit("b"), Key::Inbox]);
        assert_eq!(c.head(), 3);
        assert_eq!(c.since(a), Some(vec![(2, unit("b")), (3, Key::Inbox)]));
        assert_eq!(c.since(3), Some(vec![]));
        assert_eq!(c.since(4), None, "ahead of the log");
        assert_eq!(c.id(3), "e1.3");
        assert_eq!((c.parse("e1.3"), c.parse("e0.3"), c.parse("e1.x"), c.parse("3")), (Some(3), None, None, None));

        for i in 0..RING {
            c.record(unit(&format!("u{i}")));
        }
        let head = c.head();
        assert_eq!(c.since(head - RING as u64).map(|v| v.len()), Some(RING), "the ring holds the last RING");
        assert_eq!(c.since(head - RING as u64 - 1), None, "older than the ring: a snapshot instead");
        assert_eq!(c.since(a), None);
    }

    #[tokio::test]
    async fn streams_are_woken_by_a_change() {
        let c = Changes::new("e".into());
        let mut rx = c.subscribe();
        c.record(Key::Inbox);
        rx.changed().await.unwrap();
        assert_eq!(*rx.borrow_and_update(), 1);
        c.record_all([]);
        assert!(!rx.has_changed().unwrap(), "nothing recorded, nobody woken");
    }
}
