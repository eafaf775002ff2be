//! The relay's one change feed: what the writers changed, typed, for whoever keeps a view of it.
//!
//! Writers (the sandboxes' lifecycle, sessions, the turn watcher's ingest, the jobs' driver, the
//! inbox)
//! `publish` each change after it is stored; subscribers (the fleet's memory, the inbox) are
//! added in the wiring and never called directly. Changes borrow the writer's rows: a
//! subscriber copies what it keeps.
//!
//! Invariants:
//! - Every subscriber sees every change, in the order the writer published them, before the
//!   writer goes on: a view read right after a write has it (the tests read the fleet and the
//!   inbox just after the API call that changed them).
//! - A subscriber's failure is its own: it logs it and the writer's change stands (what the
//!   writer stored is the truth; a view catches up at its next change or the relay's next start).
use std::sync::{Arc, RwLock};

use futures::future::BoxFuture;

use crate::store::{ItemRow, JobRow, JobState, NewEvent, SandboxRow, SessionRow, TurnRow};

/// One change, as its writer stored it.
#[derive(Clone, Copy)]
pub enum Change<'a> {
    /// A sandbox made, or its state, name or sharing changed.
    Sandbox(&'a SandboxRow),
    /// A sandbox destroyed, or found vanished: it is `gone` for good.
    SandboxGone(&'a SandboxRow),
    /// A session made with its first turn, or a turn queued on it.
    TurnQueued { session: &'a SessionRow, turn: &'a TurnRow },
    /// A turn moved between states; the row as stored after the move.
    TurnMoved(&'a TurnRow),
    /// A turn reached a terminal state (after its `TurnMoved`); `failed` for failed, crashed and
    /// timed out.
    TurnEnded { session: &'a SessionRow, turn: &'a TurnRow, failed: bool },
    /// A live turn's driver is at work (after a restart, too): asks may come from its sandbox.
    TurnLive { session: &'a SessionRow },
    /// A session deleted with its turns and events.
    SessionDeleted(&'a SessionRow),
    /// Events recorded in a turn, at `ts`, in order.
    Events { session_id: &'a str, turn_id: &'a str, events: &'a [NewEvent], ts: f64 },
    /// A job made or changed (its state, sandbox, session or result); the row as stored.
    Job(&'a JobRow),
    /// A token made for a person (its id and name).
    Person { id: &'a str, name: &'a str },
    /// A job moved between states (after its `Job`): the row with its new state, reason and
    /// detail, and the state it left.
    JobMoved { job: &'a JobRow, from: JobState },
    /// An inbox item opened or ended (the row as it was opened; an ended one is no longer open).
    Item(&'a ItemRow),
}

/// What a subscriber does with each change. Awaited in order before the writer goes on, so
/// keep it short: anything long belongs on the subscriber's own task.
pub trait Subscriber: Send + Sync {
    fn changed<'a>(&'a self, change: Change<'a>) -> BoxFuture<'a, ()>;
}

/// The feed: subscribers, added in the wiring before the relay serves.
#[derive(Default)]
pub struct Feed {
    subscribers: RwLock<Arc<[Arc<dyn Subscriber>]>>,
}

impl Feed {
    pub fn new() -> Arc<Feed> {
        Arc::new(Feed { subscribers: RwLock::new(Arc::new([])) })
    }

    pub fn subscribe(&self, subscriber: Arc<dyn Subscriber>) {
        let mut all = self.subscribers.write().unwrap_or_else(|e| e.into_inner());
        *all = all.iter().cloned().chain([subscriber]).collect();
    }

    /// Tells every subscriber, in the order they subscribed.
    pub async fn publish(&self, change: Change<'_>) {
        let subscribers = self.subscribers.read().unwrap_or_else(|e| e.into_inner()).clone();
        for s in subscribers.iter() {
            s.changed(change).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    struct Log(&'static str, Arc<Mutex<Vec<String>>>);

    impl Subscriber for Log {
        fn changed<'a>(&'a self, change: Change<'a>) -> BoxFuture<'a, ()> {
            Box::pin(async move {
                if let Change::Events { session_id, .. } = change {
                    self.1.lock().unwrap().push(format!("{} {session_id}", self.0));
                }
            })
        }
    }

    #[tokio::test]
    async fn every_subscriber_sees_every_change_in_order_before_publish_returns() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let feed = Feed::new();
        feed.subscribe(Arc::new(Log("a", seen.clone())));
        feed.subscribe(Arc::new(Log("b", seen.clone())));
        for id in ["s1", "s2"] {
            feed.publish(Change::Events { session_id: id, turn_id: "t", events: &[], ts: 0.0 }).await;
        }
        assert_eq!(*seen.lock().unwrap(), ["a s1", "b s1", "a s2", "b s2"]);
    }
}
