//! The fleet's stream, as events to send: first the whole view (`snapshot`), or, for a stream
//! that resumes from an id of this run the change log still covers, the inbox, the summary and
//! the units changed since; then each changed unit whole (`agent`, at most one per unit every
//! `COALESCE`, with its latest picture), `gone` for a unit that left the caller's view, `inbox`
//! and `summary` when they differ from what was sent. What wakes it is a change in the log; the
//! clock alone (an estimate moving) is not one.
//!
//! Every event's id is `<epoch>.<n>`: every change up to `n` has been sent (changes of a unit
//! held back by the coalescing are not yet), so a stream resumed from it misses nothing.
use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use tokio::{sync::watch, time::Instant};

use super::{changes::Key, view::Summary, Filter, Fleet};
use crate::{auth::Caller, error::Result, time};

/// At most one `agent` event per unit in this long.
pub const COALESCE: Duration = Duration::from_secs(2);

/// One event to send: its name (`snapshot`, `agent`, `gone`, `inbox`, `summary`), id and data
/// (JSON, its fields in the order the view declares them).
#[derive(Debug, Clone, PartialEq)]
pub struct Out {
    pub event: &'static str,
    pub id: String,
    pub data: String,
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_string())
}

enum Start {
    Snapshot,
    Resume(u64),
}

pub struct Follower {
    caller: Caller,
    filter: Filter,
    rx: watch::Receiver<u64>,
    start: Option<Start>,
    /// Changes read from the log up to here.
    cursor: u64,
    /// Units the client has (sent, not gone since).
    shown: HashSet<String>,
    /// Units changed and not yet sent, with their first unsent change.
    pending: HashMap<String, u64>,
    /// When each unit was last sent.
    sent_at: HashMap<String, Instant>,
    /// Units changed since a resume's id: sent `gone` if no longer there, whatever `shown` says.
    unknown: HashSet<String>,
    summary: Option<Summary>,
    /// The inbox as last sent (its JSON).
    inbox: Option<String>,
    inbox_dirty: bool,
}

impl Follower {
    /// A stream for `caller` through `filter`; `last_event_id` is what a reconnecting client sent.
    pub fn new(fleet: &Fleet, caller: Caller, filter: Filter, last_event_id: Option<&str>) -> Follower {
        let changes = &fleet.changes;
        let rx = changes.subscribe();
        let start = match last_event_id.and_then(|id| changes.parse(id)).filter(|n| changes.since(*n).is_some()) {
            Some(n) => Start::Resume(n),
            None => Start::Snapshot,
        };
        Follower {
            caller,
            filter,
            rx,
            start: Some(start),
            cursor: 0,
            shown: HashSet::new(),
            pending: HashMap::new(),
            sent_at: HashMap::new(),
            unknown: HashSet::new(),
            summary: None,
            inbox: None,
            inbox_dirty: false,
        }
    }

    async fn snapshot(&mut self, fleet: &Fleet) -> Result<Vec<Out>> {
        // Mark the wake-ups seen, then read the log's head, then the view: a change after the
        // head is sent later (again, perhaps), never missed.
        self.rx.borrow_and_update();
        let head = fleet.changes.head();
        let view = fleet.read(&self.caller, &self.filter);
        self.cursor = head;
        self.pending.clear();
        self.shown = view.units.iter().map(|u| u.id.clone()).collect();
        self.summary =
            Some(Summary { counts: view.counts.clone(), owners: view.owners.clone(), slots: view.slots.clone() });
        self.inbox = Some(json(&view.inbox));
        self.inbox_dirty = false;
        Ok(vec![Out { event: "snapshot", id: fleet.changes.id(head), data: json(&view) }])
    }

    /// The next events, waiting until there are some.
    pub async fn next(&mut self, fleet: &Fleet) -> Result<Vec<Out>> {
        loop {
            match self.start.take() {
                Some(Start::Snapshot) => return self.snapshot(fleet).await,
                Some(Start::Resume(n)) => {
                    self.cursor = n;
                    self.inbox_dirty = true;
                    self.summary = None;
                }
                None => {}
            }
            self.rx.borrow_and_update();
            let Some(since) = fleet.changes.since(self.cursor) else {
                // Behind the ring: what changed is no longer known, so the whole view again.
                self.start = Some(Start::Snapshot);
                continue;
            };
            let resuming = self.summary.is_none();
            for (n, key) in since {
                self.cursor = n;
                match key {
                    Key::Unit(id) => {
                        if resuming {
                            self.unknown.insert(id.clone());
                        }
                        self.pending.entry(id).or_insert(n);
                    }
                    Key::Inbox => self.inbox_dirty = true,
                }
            }
            let at = Instant::now();
            let due: Vec<String> = self
                .pending
                .keys()
                .filter(|id| self.sent_at.get(*id).is_none_or(|t| at >= *t + COALESCE))
                .cloned()
                .collect();
            // The picture of every unit is built only when something is to be sent: a unit due, one
            // that left (said at once), the inbox, a resume. A change to a unit sent less than
            // 2 s ago waits for its due time, and the summary with it: at a thousand events a
            // second, building the picture for every change was a fifth of the relay's CPU.
            let left = self.pending.keys().any(|id| !fleet.has_unit(id));
            if !due.is_empty() || left || resuming || self.inbox_dirty {
                let out = self.changes_out(fleet, &due, at).await?;
                if !out.is_empty() {
                    return Ok(out);
                }
            }
            let wake = self.pending.keys().filter_map(|id| self.sent_at.get(id)).map(|t| *t + COALESCE).min();
            tokio::select! {
                changed = self.rx.changed() => if changed.is_err() {
                    return Err(crate::error::Error::unavailable("the relay is stopping"));
                },
                _ = tokio::time::sleep_until(wake.unwrap_or(at)), if wake.is_some() => {}
            }
        }
    }

    /// The events for the units due and whatever else differs from what was sent.
    async fn changes_out(&mut self, fleet: &Fleet, due: &[String], at: Instant) -> Result<Vec<Out>> {
        let items = fleet.inbox.open_items(None);
        let p = fleet.picture(&items, &self.caller, &self.filter, time::now());
        let mut out: Vec<(&'static str, String)> = Vec::new();
        let units: HashMap<&str, &super::Unit> = p.units.iter().map(|u| (u.id.as_str(), u)).collect();
        for id in due {
            self.pending.remove(id);
            match units.get(id.as_str()) {
                Some(u) => {
                    out.push(("agent", json(u)));
                    self.sent_at.insert(id.clone(), at);
                    self.shown.insert(id.clone());
                }
                None => {
                    if self.shown.remove(id) || self.unknown.contains(id) {
                        out.push(("gone", json(&serde_json::json!({ "id": id }))));
                    }
                    self.sent_at.remove(id);
                }
            }
        }
        // A unit that left is said at once, not after the coalescing's wait.
        let left: Vec<String> = self.pending.keys().filter(|id| !units.contains_key(id.as_str())).cloned().collect();
        for id in left {
            self.pending.remove(&id);
            self.sent_at.remove(&id);
            if self.shown.remove(&id) || self.unknown.contains(&id) {
                out.push(("gone", json(&serde_json::json!({ "id": id }))));
            }
        }
        self.unknown.clear();
        if self.inbox_dirty {
            self.inbox_dirty = false;
            let inbox = json(&fleet.inbox.open_view(&self.caller));
            if self.inbox.as_ref() != Some(&inbox) {
                out.push(("inbox", inbox.clone()));
                self.inbox = Some(inbox);
            }
        }
        if self.summary.as_ref() != Some(&p.summary) {
            out.push(("summary", json(&p.summary)));
            self.summary = Some(p.summary);
        }
        // Everything up to the first change still held back has been sent.
        let sent_to = self.pending.values().min().map_or(self.cursor, |first| first - 1);
        let id = fleet.changes.id(sent_to);
        Ok(out.into_iter().map(|(event, data)| Out { event, id: id.clone(), data }).collect())
    }
}
