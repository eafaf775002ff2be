//! Live readers of sessions' events: each watched session's last recorded seq, as a watch
//! channel that long polls, SSE streams and MCP subscriptions wait on, and its latest events as
//! they are served (their JSON, made once for every follower), so that a follower that keeps up
//! is served from memory instead of reading the store on every event. A follower behind what
//! memory holds reads the store; nothing here is the record, and a slow reader holds up nobody.
use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex, MutexGuard},
};

use serde::Serialize;
use tokio::sync::watch;

use super::follow::Mark;
use crate::store::{NewEvent, CURRENT_OFFSET};

/// The most events and bytes of JSON memory holds for one watched session: a follower that
/// keeps up is a batch or two behind; one further behind (or an event larger than this) reads
/// the store, as it would without this. At most 64 MiB for 1,000 watched sessions.
const RECENT_EVENTS: usize = 64;
const RECENT_BYTES: usize = 64 * 1024;

#[derive(Default)]
pub struct Live {
    sessions: Mutex<HashMap<String, Watched>>,
}

/// A recorded event as followers are served it: its seq, what it marks and its JSON
/// (`EventRow`'s).
#[derive(Debug, Clone)]
pub struct Recent {
    pub seq: i64,
    pub mark: Mark,
    pub json: Arc<str>,
}

struct Watched {
    tx: watch::Sender<i64>,
    /// The latest recorded events, consecutive seqs from `first`.
    recent: VecDeque<Recent>,
    first: i64,
    bytes: usize,
}

impl Watched {
    fn last(&self) -> i64 {
        self.first + self.recent.len() as i64 - 1
    }

    /// Forgets what it holds: the next events held start at `next`.
    fn clear(&mut self, next: i64) {
        self.recent.clear();
        self.bytes = 0;
        self.first = next;
    }

    fn push(&mut self, r: Recent) {
        let seq = r.seq;
        if self.recent.is_empty() || seq != self.last() + 1 {
            if seq <= self.last() && !self.recent.is_empty() {
                // Published late, after a later batch: it is in the store, not here.
                return;
            }
            self.clear(seq);
        }
        if r.json.len() > RECENT_BYTES {
            self.clear(seq + 1);
            return;
        }
        self.bytes += r.json.len();
        self.recent.push_back(r);
        while self.recent.len() > RECENT_EVENTS || self.bytes > RECENT_BYTES {
            if let Some(old) = self.recent.pop_front() {
                self.bytes -= old.json.len();
                self.first += 1;
            }
        }
    }
}

/// An event as served (`store::EventRow`'s JSON, field for field), borrowed.
#[derive(Serialize)]
struct Served<'a> {
    seq: i64,
    ts: f64,
    turn: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    data: &'a serde_json::Value,
}

impl Live {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Watched>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver that changes when the session records events after `seq`.
    pub fn subscribe(&self, session_id: &str, seq: i64) -> watch::Receiver<i64> {
        let mut map = self.lock();
        // Sessions nobody watches any more go, so the map holds only watched sessions.
        map.retain(|_, w| w.tx.receiver_count() > 0);
        map.entry(session_id.to_string())
            .or_insert_with(|| Watched { tx: watch::channel(seq).0, recent: VecDeque::new(), first: 0, bytes: 0 })
            .tx
            .subscribe()
    }

    /// The session recorded events up to `seq`, none of which memory holds (a job's own): a
    /// follower reads them from the store.
    pub fn publish(&self, session_id: &str, seq: i64) {
        if let Some(w) = self.lock().get_mut(session_id) {
            if seq > w.last() {
                w.clear(seq + 1);
            }
            notify(&w.tx, seq);
        }
    }

    /// The session recorded `events[i]` as seq `s` for each `(i, s)` of `recorded`, and its last
    /// seq is `last`: followers are told, and served these from memory.
    pub fn publish_events(
        &self,
        session_id: &str,
        turn_id: &str,
        ts: f64,
        events: &[NewEvent],
        recorded: &[(usize, i64)],
        last: i64,
    ) {
        if self.lock().get(session_id).is_none_or(|w| w.tx.receiver_count() == 0) {
            return;
        }
        // One event kept current replaced an earlier one, which memory may hold: none are kept.
        let replaced = events.iter().any(|e| e.src_offset == Some(CURRENT_OFFSET));
        // Made outside the lock: every session's publisher takes it.
        let served: Vec<Recent> = if replaced {
            Vec::new()
        } else {
            recorded
                .iter()
                .filter_map(|&(i, seq)| {
                    let e = events.get(i)?;
                    let row = Served { seq, ts, turn: turn_id, kind: e.kind, data: &e.data };
                    let json = Arc::from(serde_json::to_string(&row).ok()?);
                    Some(Recent { seq, mark: Mark::of(e.kind, &e.data), json })
                })
                .collect()
        };
        let mut map = self.lock();
        let Some(w) = map.get_mut(session_id) else { return };
        if replaced {
            w.clear(last + 1);
        }
        for r in served {
            w.push(r);
        }
        notify(&w.tx, last);
    }

    /// The session's events after `since` as served, at most `max`, if memory holds every one
    /// of them from `since + 1` on and at least one; otherwise `None` (read the store).
    pub fn recent(&self, session_id: &str, since: i64, max: usize) -> Option<Vec<Recent>> {
        let map = self.lock();
        let w = map.get(session_id)?;
        if w.recent.is_empty() || since + 1 < w.first || since >= w.last() {
            return None;
        }
        let skip = usize::try_from(since + 1 - w.first).ok()?;
        Some(w.recent.iter().skip(skip).take(max).cloned().collect())
    }
}

fn notify(tx: &watch::Sender<i64>, seq: i64) {
    tx.send_if_modified(|last| {
        let newer = seq > *last;
        if newer {
            *last = seq;
        }
        newer
    });
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ev(n: i64) -> NewEvent {
        NewEvent { kind: "message", data: json!({ "n": n }), src_offset: Some(n), part: 0 }
    }

    fn seqs(v: Option<Vec<Recent>>) -> Option<Vec<i64>> {
        v.map(|v| v.into_iter().map(|r| r.seq).collect())
    }

    #[tokio::test]
    async fn a_subscriber_sees_newer_seqs_only() {
        let live = Live::default();
        live.publish("s", 3); // nobody listens: dropped
        let mut rx = live.subscribe("s", 3);
        live.publish("s", 2);
        assert!(!rx.has_changed().unwrap());
        live.publish("s", 5);
        rx.changed().await.unwrap();
        assert_eq!(*rx.borrow_and_update(), 5);
    }

    /// What memory serves is what the store serves: `EventRow`'s JSON, field for field.
    #[test]
    fn an_event_is_served_as_the_store_serves_it() {
        let live = Live::default();
        let _rx = live.subscribe("s", 0);
        live.publish_events("s", "t1", 12.5, &[ev(7)], &[(0, 1)], 1);
        let Recent { seq, mark, json } = live.recent("s", 0, 10).unwrap().remove(0);
        assert_eq!(mark, Mark::Plain);
        let row = crate::store::EventRow {
            seq: 1,
            ts: 12.5,
            turn: "t1".into(),
            kind: "message".into(),
            data: json!({ "n": 7 }),
            src_offset: Some(7),
        };
        assert_eq!((seq, &*json), (1, serde_json::to_string(&row).unwrap().as_str()));
    }

    /// Memory answers only for a run it holds whole from `since + 1`: a gap, a late batch, a
    /// replaced event or events it never held send the reader to the store.
    #[test]
    fn memory_answers_only_for_what_it_holds_whole() {
        let live = Live::default();
        live.publish_events("s", "t", 1.0, &[ev(0)], &[(0, 1)], 1);
        assert_eq!(live.recent("s", 0, 10).map(|v| v.len()), None, "nobody watches: nothing held");
        let _rx = live.subscribe("s", 1);
        live.publish_events("s", "t", 1.0, &[ev(1), ev(2), ev(3)], &[(0, 2), (2, 3)], 3);
        assert_eq!(seqs(live.recent("s", 1, 10)), Some(vec![2, 3]));
        assert_eq!(seqs(live.recent("s", 2, 1)), Some(vec![3]));
        assert_eq!(seqs(live.recent("s", 0, 10)), None, "seq 1 came before anyone watched");
        assert_eq!(seqs(live.recent("s", 3, 10)), None, "nothing newer");
        // 4 and 5 are recorded by another task and published after 6: 6 starts over.
        live.publish_events("s", "t", 1.0, &[ev(6)], &[(0, 6)], 6);
        live.publish_events("s", "t", 1.0, &[ev(4), ev(5)], &[(0, 4), (1, 5)], 5);
        assert_eq!(seqs(live.recent("s", 3, 10)), None);
        assert_eq!(seqs(live.recent("s", 5, 10)), Some(vec![6]));
        live.publish("s", 7); // a job's event: not held
        assert_eq!(seqs(live.recent("s", 5, 10)), None);
        live.publish_events("s", "t", 1.0, &[ev(8)], &[(0, 8)], 8);
        assert_eq!(seqs(live.recent("s", 7, 10)), Some(vec![8]));
        let current = NewEvent { src_offset: Some(CURRENT_OFFSET), ..ev(9) };
        live.publish_events("s", "t", 1.0, &[current], &[(0, 9)], 9);
        assert_eq!(seqs(live.recent("s", 7, 10)), None, "a replaced event may be held: none are");
        assert_eq!(seqs(live.recent("s", 8, 10)), None);
    }

    #[test]
    fn memory_holds_a_bounded_tail() {
        let live = Live::default();
        let _rx = live.subscribe("s", 0);
        let n = RECENT_EVENTS as i64 + 10;
        for seq in 1..=n {
            live.publish_events("s", "t", 1.0, &[ev(seq)], &[(0, seq)], seq);
        }
        assert_eq!(seqs(live.recent("s", 10, 1)), Some(vec![11]));
        assert_eq!(seqs(live.recent("s", 9, 1)), None);
        let big = NewEvent { data: json!({ "text": "x".repeat(RECENT_BYTES) }), ..ev(0) };
        live.publish_events("s", "t", 1.0, &[big], &[(0, n + 1)], n + 1);
        assert_eq!(seqs(live.recent("s", n, 1)), None, "an event past the bytes is not held");
        live.publish_events("s", "t", 1.0, &[ev(0)], &[(0, n + 2)], n + 2);
        assert_eq!(seqs(live.recent("s", n + 1, 5)), Some(vec![n + 2]));
    }
}
