//! Following a session's events as they are recorded: the one loop that REST's SSE streams (a
//! session's and a job's) and the `session` tool's progress stream share. A follower that keeps
//! up is served from memory (`live`, the events' JSON made once for all followers); one behind
//! it, or after a gap memory cannot fill, reads the store; a follower reads the store at its
//! start and after each `run.state`, since only the store says whether the turn has ended.
//!
//! The long poll (`sessions::events`) is not a follower: it answers with the first events and
//! the turn's state, which is one read of the store either way.
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch;

use super::live::{Live, Recent};
use crate::{
    error::Result,
    store::{EventRow, JobState, Store, TurnState},
};

/// What an event marks, beyond being one: what a follower's end is decided by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Plain,
    /// hangar's `run.state`: a turn moved, perhaps to its end, which only the store says.
    TurnMoved,
    /// hangar's `job.state` to a terminal state: the last of a job's events.
    JobEnded,
}

impl Mark {
    pub fn of(kind: &str, data: &Value) -> Mark {
        match kind {
            "run.state" => Mark::TurnMoved,
            "job.state"
                if data.get("source").and_then(Value::as_str) == Some("hangar")
                    && data
                        .get("to")
                        .and_then(Value::as_str)
                        .and_then(JobState::parse)
                        .is_some_and(JobState::is_terminal) =>
            {
                Mark::JobEnded
            }
            _ => Mark::Plain,
        }
    }
}

/// When a follower ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// Once the session's latest turn has ended and its end was sent.
    TurnEnds,
    /// Never: the caller decides (a stream that follows the next turns, a job's stream).
    Never,
}

/// What a follower has next.
#[derive(Debug)]
pub enum Next {
    /// Events after the previous ones, in order, at least one.
    Events(Vec<Recent>),
    /// The session's latest turn has ended, and every event up to its end was sent.
    Ended(TurnState),
}

pub struct Follower {
    store: Arc<Store>,
    live: Arc<Live>,
    session_id: String,
    since: i64,
    until: Until,
    rx: watch::Receiver<i64>,
    /// Whether memory cannot tell what comes next: at the start, and after a `run.state`.
    read_store: bool,
}

impl Follower {
    /// Follows the session's events after `since`; `at` is the session's last seq as read.
    pub fn new(store: &Arc<Store>, live: &Arc<Live>, session_id: &str, at: i64, since: i64, until: Until) -> Follower {
        Follower {
            store: store.clone(),
            live: live.clone(),
            session_id: session_id.to_string(),
            since,
            until,
            rx: live.subscribe(session_id, at),
            read_store: true,
        }
    }

    /// Waits for the next events (at most `max`) or the end. Cancel-safe: dropped while it
    /// waits, nothing is lost, since its position moves only as it answers. `None` once the
    /// relay stops telling followers anything (it is shutting down).
    pub async fn next(&mut self, max: usize) -> Result<Option<Next>> {
        loop {
            // Before anything is read: a seq recorded from here on wakes `changed` below.
            let latest = *self.rx.borrow_and_update();
            if let Some(recent) = self.live.recent(&self.session_id, self.since, max) {
                return Ok(Some(self.answer(recent)));
            }
            if self.read_store || latest > self.since {
                let (events, state) = self.store.events_page(&self.session_id, self.since, max).await?;
                if !events.is_empty() {
                    // What follows may be in memory, or not yet: the store is read once more.
                    self.read_store = true;
                    return Ok(Some(self.answer(events.iter().map(served).collect())));
                }
                // A turn's state and its `run.state` are one write: ended means its end was sent.
                let state = state.unwrap_or(TurnState::Queued);
                if self.until == Until::TurnEnds && state.is_terminal() {
                    return Ok(Some(Next::Ended(state)));
                }
                self.read_store = false;
            }
            if self.rx.changed().await.is_err() {
                return Ok(None);
            }
        }
    }

    fn answer(&mut self, events: Vec<Recent>) -> Next {
        if let Some(last) = events.last() {
            self.since = last.seq;
        }
        self.read_store |= events.iter().any(|r| r.mark == Mark::TurnMoved);
        Next::Events(events)
    }
}

/// A recorded event as a follower serves it.
fn served(e: &EventRow) -> Recent {
    Recent {
        seq: e.seq,
        mark: Mark::of(&e.kind, &e.data),
        json: Arc::from(serde_json::to_string(e).unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::store::{testing, NewEvent};

    fn ev(n: i64) -> NewEvent {
        NewEvent { kind: "message", data: json!({ "n": n }), src_offset: Some(n), part: 0 }
    }

    fn moved(to: &str) -> NewEvent {
        NewEvent { kind: "run.state", data: json!({ "to": to, "source": "hangar" }), src_offset: None, part: 0 }
    }

    /// Records as the turn's reader does: the store, then memory.
    async fn record(store: &Store, live: &Live, events: Vec<NewEvent>) {
        let (last, recorded) = store.record_events("s1", "t1", events.clone(), 1.0, None, None).await.unwrap();
        live.publish_events("s1", "t1", 1.0, &events, &recorded, last);
    }

    async fn next(f: &mut Follower, max: usize) -> Option<Next> {
        tokio::time::timeout(Duration::from_secs(5), f.next(max)).await.ok().and_then(Result::ok).flatten()
    }

    fn seqs(n: Option<Next>) -> Vec<i64> {
        match n {
            Some(Next::Events(e)) => e.into_iter().map(|e| e.seq).collect(),
            other => panic!("expected events, got {other:?}"),
        }
    }

    /// History from the store, then what is recorded as it comes (from memory), in order, none
    /// twice; the turn's end is sent before the follower says it ended, and `Never` goes on.
    #[tokio::test]
    async fn a_follower_gets_every_event_once_in_order_then_the_end() {
        let (store, dir) = testing::store("follow").await;
        let store = Arc::new(store);
        let live = Arc::new(Live::default());
        store.create_session(&testing::session("s1"), &testing::turn("t1", "s1")).await.unwrap();
        record(&store, &live, vec![ev(1), ev(2), ev(3)]).await;
        let mut to_end = Follower::new(&store, &live, "s1", 3, 0, Until::TurnEnds);
        let mut forever = Follower::new(&store, &live, "s1", 3, 1, Until::Never);
        assert_eq!(seqs(next(&mut to_end, 2).await), vec![1, 2], "a page at most");
        assert_eq!(seqs(next(&mut to_end, 10).await), vec![3]);
        assert_eq!(seqs(next(&mut forever, 10).await), vec![2, 3]);

        let waiting = tokio::spawn(async move {
            let got = seqs(next(&mut to_end, 10).await);
            (got, to_end)
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        record(&store, &live, vec![ev(4), ev(5)]).await;
        let (got, mut to_end) = waiting.await.unwrap();
        assert_eq!(got, vec![4, 5], "woken by what was recorded");
        assert!(live.recent("s1", 3, 10).is_some(), "served from memory");

        let end = store.move_turn("s1", "t1", TurnState::Succeeded, None, None, 2.0, moved("succeeded"));
        let seq = end.await.unwrap().unwrap();
        live.publish_events("s1", "t1", 2.0, &[moved("succeeded")], &[(0, seq)], seq);
        assert_eq!(seqs(next(&mut to_end, 10).await), vec![6], "the end is sent first");
        assert!(matches!(next(&mut to_end, 10).await, Some(Next::Ended(TurnState::Succeeded))));
        assert_eq!(seqs(next(&mut forever, 10).await), vec![4, 5, 6]);
        let more = tokio::time::timeout(Duration::from_millis(100), forever.next(10)).await;
        assert!(more.is_err(), "`Never` waits for the next turn");

        // A follower that starts after the end ends at once; one behind it reads the rest first.
        let mut late = Follower::new(&store, &live, "s1", 6, 6, Until::TurnEnds);
        assert!(matches!(next(&mut late, 10).await, Some(Next::Ended(TurnState::Succeeded))));
        let mut behind = Follower::new(&store, &live, "s1", 6, 4, Until::TurnEnds);
        assert_eq!(seqs(next(&mut behind, 10).await), vec![5, 6]);
        assert!(matches!(next(&mut behind, 10).await, Some(Next::Ended(_))));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn marks() {
        assert_eq!(Mark::of("message", &json!({})), Mark::Plain);
        assert_eq!(Mark::of("run.state", &json!({ "to": "running" })), Mark::TurnMoved);
        let ended = json!({ "to": "succeeded", "source": "hangar" });
        assert_eq!(Mark::of("job.state", &ended), Mark::JobEnded);
        assert_eq!(Mark::of("job.state", &json!({ "to": "running", "source": "hangar" })), Mark::Plain);
        assert_eq!(
            Mark::of("job.state", &json!({ "to": "succeeded", "source": "agent" })),
            Mark::Plain,
            "not hangar's"
        );
    }
}
