//! A watch's bounded queue. When it is full, further changes are dropped and counted into one
//! overflow marker at its end, until the consumer empties it: so what the consumer sees is
//! always a true prefix of what happened, then the loss, then what happened after it.
use std::{
    collections::VecDeque,
    sync::{Mutex, MutexGuard},
};

use tokio::sync::Notify;

use super::{Change, WatchError};

/// What a consumer gets from the queue, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// `seq` numbers changes from 1 in the order the watch saw them, dropped ones included.
    Change { seq: u64, change: Change },
    /// Changes were lost here: `dropped` by this queue (0 when only the kernel's queue
    /// overflowed, which does not say how many). `seq` is the number of the last change seen
    /// before this marker, so the next change is numbered `seq + 1`.
    Overflow { seq: u64, dropped: u64 },
}

/// Why a watch stopped.
#[derive(Debug, Clone)]
pub enum Ended {
    /// The watched directory was removed, moved away or unmounted.
    Gone,
    Failed(WatchError),
}

/// A consumer's take: the queued items, then the end if the watch stopped after them.
#[derive(Debug, Default)]
pub struct Batch {
    pub items: Vec<Item>,
    pub end: Option<Ended>,
}

#[derive(Debug)]
pub(crate) struct State {
    items: VecDeque<Item>,
    cap: usize,
    seq: u64,
    end: Option<Ended>,
}

impl State {
    pub(crate) fn new(cap: usize) -> State {
        State { items: VecDeque::new(), cap: cap.max(1), seq: 0, end: None }
    }

    pub(crate) fn push(&mut self, change: Change) {
        self.seq += 1;
        let seq = self.seq;
        if self.items.len() < self.cap {
            self.items.push_back(Item::Change { seq, change });
            return;
        }
        match self.items.back_mut() {
            Some(Item::Overflow { seq: s, dropped }) => {
                *s = seq;
                *dropped += 1;
            }
            _ => self.items.push_back(Item::Overflow { seq, dropped: 1 }),
        }
    }

    /// The kernel dropped events (IN_Q_OVERFLOW): say so once, at this point of the queue.
    pub(crate) fn kernel_overflow(&mut self) {
        if !matches!(self.items.back(), Some(Item::Overflow { .. })) {
            self.items.push_back(Item::Overflow { seq: self.seq, dropped: 0 });
        }
    }

    pub(crate) fn end(&mut self, why: Ended) {
        self.end.get_or_insert(why);
    }

    fn take(&mut self) -> Batch {
        Batch { items: self.items.drain(..).collect(), end: self.end.clone() }
    }

    fn ready(&self) -> bool {
        !self.items.is_empty() || self.end.is_some()
    }
}

/// The queue between a watch's task (the only producer) and its one consumer.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    notify: Notify,
}

impl Shared {
    pub(crate) fn new(cap: usize) -> Shared {
        Shared { state: Mutex::new(State::new(cap)), notify: Notify::new() }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the consumer (a permit is kept if it is not waiting yet).
    pub(crate) fn wake(&self) {
        self.notify.notify_one();
    }

    pub(crate) fn take(&self) -> Batch {
        self.lock().take()
    }

    pub(crate) async fn next(&self) -> Batch {
        loop {
            {
                let mut st = self.lock();
                if st.ready() {
                    return st.take();
                }
            }
            self.notify.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::Kind;

    fn change(n: &str) -> Change {
        Change { name: n.into(), kind: Kind::Create, entry: None }
    }

    #[test]
    fn overflow_keeps_a_prefix_and_counts_the_rest() {
        let mut st = State::new(2);
        for n in ["a", "b", "c", "d", "e"] {
            st.push(change(n));
        }
        let b = st.take();
        assert_eq!(
            b.items,
            vec![
                Item::Change { seq: 1, change: change("a") },
                Item::Change { seq: 2, change: change("b") },
                Item::Overflow { seq: 5, dropped: 3 },
            ]
        );
        st.push(change("f"));
        assert_eq!(st.take().items, vec![Item::Change { seq: 6, change: change("f") }]);
    }

    #[test]
    fn kernel_overflow_is_marked_once() {
        let mut st = State::new(8);
        st.push(change("a"));
        st.kernel_overflow();
        st.kernel_overflow();
        st.push(change("b"));
        let items = st.take().items;
        assert_eq!(items.len(), 3);
        assert_eq!(items[1], Item::Overflow { seq: 1, dropped: 0 });
    }

    #[test]
    fn end_follows_the_items_and_stays() {
        let mut st = State::new(8);
        st.push(change("a"));
        st.end(Ended::Gone);
        let b = st.take();
        assert_eq!(b.items.len(), 1);
        assert!(matches!(b.end, Some(Ended::Gone)));
        assert!(matches!(st.take().end, Some(Ended::Gone)));
    }
}
