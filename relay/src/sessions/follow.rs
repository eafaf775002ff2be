//! Following a session's events as they are recorded, the one way every stream of them is
//! served: REST's SSE (a session's, and a job's through `jobs::follow`), the `session` tool's
//! progress and its long poll, and MCP's resource subscriptions. `follow` admits the stream
//! (`streams`' limits, closed by revocation, shutdown, pause, destroy and its lifetime), hands
//! over pages of events charged to it, and says why it ended (`End`); the APIs only render both.
//!
//! Underneath, a `Follower` that keeps up is served from memory (`live`, the events' JSON made
//! once for all followers); one behind it, or after a gap memory cannot fill, reads the store; a
//! follower reads the store at its start and after each `run.state`, since only the store says
//! whether the turn has ended.
//!
//! The long poll (`sessions::events`) is not a follower: it answers with the first events and
//! the turn's state, which is one read of the store either way. `wait` admits it as a stream for
//! the `session` tool, so that the relay's closes cut it short there too.
use std::{future::Future, sync::Arc, time::Duration};

use serde_json::Value;
use tokio::{sync::watch, time::Instant};

use super::{
    live::{Live, Recent},
    EventsPage, EventsRead,
};
use crate::{
    auth::Caller,
    error::Result,
    sessions::Sessions,
    store::{EventRow, JobState, SessionRow, Store, TurnState},
    streams::{self, Front, Kind, Reason},
};

/// The most events a follow hands over at a time.
pub const PAGE: usize = 200;

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
    /// Once the session's latest turn has ended, or has started to wait for input (an approval
    /// or a question of it opened: its `run.state` to `waiting_input` was handed over and it
    /// still waits), every event up to that sent: what an orchestrator waits for. A follow that
    /// starts after that move waits on for what comes next, so that one waiting for a person
    /// does not spin.
    TurnEndsOrWaits,
    /// Never: the caller decides (a stream that follows the next turns, a job's stream).
    Never,
}

impl Until {
    fn at_input(self) -> bool {
        self == Until::TurnEndsOrWaits
    }

    fn at_end(self) -> bool {
        matches!(self, Until::TurnEnds | Until::TurnEndsOrWaits)
    }
}

/// What a follower has next.
#[derive(Debug)]
pub enum Next {
    /// Events after the previous ones, in order, at least one.
    Events(Vec<Recent>),
    /// The session's latest turn has ended, and every event up to its end was sent.
    Ended(TurnState),
    /// The session's latest turn waits for input: these open asks (inbox item ids).
    Waiting(Vec<String>),
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
    /// A page handed over moved the turn (`TurnEndsOrWaits`): whether it now waits for input is
    /// read before anything else.
    check_input: bool,
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
            check_input: false,
        }
    }

    /// Waits for the next events (at most `max`) or the end. Cancel-safe: dropped while it
    /// waits, nothing is lost, since its position moves only as it answers. `None` once the
    /// relay stops telling followers anything (it is shutting down).
    pub async fn next(&mut self, max: usize) -> Result<Option<Next>> {
        loop {
            // Before anything is read: a seq recorded from here on wakes `changed` below.
            let latest = *self.rx.borrow_and_update();
            if std::mem::take(&mut self.check_input) {
                // The turn waits once its move there was handed over (a state and its `run.state`
                // are one write): what the agent printed after it does not keep the follow going.
                let (events, state) = self.store.events_page(&self.session_id, self.since, max).await?;
                let moves_unsent = events.iter().any(|e| e.kind == "run.state") || events.len() >= max;
                if !moves_unsent {
                    if let Some(waiting) = self.waiting(state).await? {
                        return Ok(Some(waiting));
                    }
                }
                if !events.is_empty() {
                    self.read_store = true;
                    self.check_input = state == Some(TurnState::WaitingInput);
                    return Ok(Some(self.answer(events.iter().map(served).collect())));
                }
            }
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
                if self.until.at_end() && state.is_terminal() {
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
        self.check_input |= self.until.at_input() && events.iter().any(|r| r.mark == Mark::TurnMoved);
        Next::Events(events)
    }

    /// `Next::Waiting` when the follow ends at input and the turn (in `state`) waits for it.
    async fn waiting(&self, state: Option<TurnState>) -> Result<Option<Next>> {
        if !self.until.at_input() || state != Some(TurnState::WaitingInput) {
            return Ok(None);
        }
        Ok(Some(Next::Waiting(self.store.open_asks_of_session(&self.session_id).await?)))
    }
}

/// Why a follow ended.
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    /// The session's latest turn ended, and every event up to its end was handed over.
    TurnEnded(TurnState),
    /// The job ended, and its last event was handed over (or it never had a session).
    JobEnded(JobState),
    /// The session's latest turn waits for input: these open asks (inbox item ids), every event
    /// up to that handed over.
    Waiting(Vec<String>),
    /// The wait the client asked for ran out.
    Waited,
    /// As many events as the client asked for were handed over.
    Limit,
    /// The relay closed the stream (revoked, shutdown, paused, destroyed, gone, its lifetime) or
    /// it reached its byte cap (`max_bytes`).
    Closed(Reason),
    /// The relay stopped telling followers anything (it is shutting down).
    Stopped,
    /// What comes next could not be read (or the job could no longer be found).
    Failed(String),
}

impl End {
    /// The stream's closing reason, as counted and as clients are told.
    pub fn reason(&self) -> Reason {
        match self {
            End::TurnEnded(_) | End::JobEnded(_) | End::Waiting(_) | End::Waited | End::Limit => Reason::Done,
            End::Closed(r) => *r,
            End::Stopped | End::Failed(_) => Reason::Error,
        }
    }

    /// What clients are told beside the reason.
    pub fn message(&self) -> Option<String> {
        match self {
            End::TurnEnded(state) => Some(format!("the turn ended: {}", state.as_str())),
            End::JobEnded(state) => Some(format!("the job ended: {}", state.as_str())),
            End::Waiting(items) => Some(format!("the turn waits for input: {}", items.join(", "))),
            End::Stopped => Some("the session's events ended".to_string()),
            End::Failed(why) => Some(why.clone()),
            End::Waited | End::Limit | End::Closed(_) => None,
        }
    }

    /// The close that cut the follow short, if that is why it ended.
    pub fn closed(&self) -> Option<Reason> {
        match self {
            End::Closed(r) => Some(*r),
            _ => None,
        }
    }
}

/// What a follow has next.
#[derive(Debug)]
pub enum Step {
    /// Events after the previous ones, in order, at least one, charged to the stream.
    Page(Vec<Recent>),
    /// The end; every later call says it again.
    End(End),
}

/// What a page costs the stream it goes out on, for its pace and byte cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charge {
    /// Each event's JSON: what an SSE stream or a progress notification sends.
    Events,
    /// This many bytes a page: one notice that there is more to read (an MCP resource's update).
    Notice(u64),
}

/// A follow of events, page by page, until its end.
pub trait Pages: Send {
    fn next(&mut self) -> impl Future<Output = Step> + Send;
}

/// A follow's admitted stream (kind `events`): what the relay's closes, the pace and the byte
/// cap say, and the end, said once and recorded as the stream's closing reason.
pub struct Gate {
    admitted: streams::Stream,
    charge: Charge,
    ended: Option<End>,
}

impl Gate {
    /// Admits a follow under `sandbox` (empty: under none, so no pause or destroy closes it).
    pub fn open(sessions: &Sessions, caller: &Caller, sandbox: &str, front: Front, charge: Charge) -> Result<Gate> {
        Ok(Gate::over(sessions.streams.open(caller, sandbox, Kind::Events, front)?, charge))
    }

    fn over(admitted: streams::Stream, charge: Charge) -> Gate {
        Gate { admitted, charge, ended: None }
    }

    /// The end, once there is one.
    pub fn ended(&self) -> Option<End> {
        self.ended.clone()
    }

    /// What `next` answers, unless the relay closes the stream first (a close wins a tie).
    pub async fn first<T>(&mut self, next: impl Future<Output = T>) -> std::result::Result<T, Reason> {
        tokio::select! {
            biased;
            reason = self.admitted.closed() => Err(reason),
            t = next => Ok(t),
        }
    }

    /// Ends the follow: the first end holds.
    pub fn end(&mut self, end: End) -> Step {
        let end = self.ended.get_or_insert(end).clone();
        self.admitted.end(end.reason());
        Step::End(end)
    }

    /// `events` charged to the stream, after the wait its pace asks for; those past the byte
    /// cap are cut, and the follow ends there (after the rest, if any, is handed over).
    pub async fn pass(&mut self, mut events: Vec<Recent>) -> Step {
        let mut wait = Duration::ZERO;
        let mut capped = None;
        match self.charge {
            Charge::Events => {
                for (i, e) in events.iter().enumerate() {
                    match self.admitted.charge(e.json.len() as u64) {
                        Ok(w) => wait = w,
                        Err(reason) => {
                            capped = Some((i, reason));
                            break;
                        }
                    }
                }
            }
            Charge::Notice(bytes) => match self.admitted.charge(bytes) {
                Ok(w) => wait = w,
                Err(reason) => capped = Some((0, reason)),
            },
        }
        if let Some((kept, reason)) = capped {
            events.truncate(kept);
            let end = self.end(End::Closed(reason));
            if events.is_empty() {
                return end;
            }
        }
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        Step::Page(events)
    }
}

/// Where a session's follow starts, and what ends it besides the relay's closes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Start {
    /// After this seq; `None`: after the latest recorded (only what comes next).
    pub since: Option<i64>,
    pub until: Until,
    /// The longest it runs (a bounded wait); `None`: as long as the stream may.
    pub wait: Option<Duration>,
    /// The most events it hands over; `None`: no limit.
    pub limit: Option<usize>,
}

/// A session's events followed on an admitted stream.
pub struct SessionFollow {
    session: SessionRow,
    gate: Gate,
    follower: Follower,
    deadline: Option<Instant>,
    left: Option<usize>,
}

/// Follows the caller's session `reference` (not found unless the caller sees it) as one
/// admitted stream (refused over the stream limits).
pub async fn follow(
    sessions: &Sessions,
    caller: &Caller,
    reference: &str,
    start: Start,
    front: Front,
    charge: Charge,
) -> Result<SessionFollow> {
    let session = super::find(sessions, caller, reference).await?;
    let gate = Gate::open(sessions, caller, &session.sandbox_id, front, charge)?;
    let since = start.since.unwrap_or(session.event_seq);
    let follower = Follower::new(&sessions.store, &sessions.live, &session.id, session.event_seq, since, start.until);
    let deadline = start.wait.map(|w| Instant::now() + w);
    Ok(SessionFollow { session, gate, follower, deadline, left: start.limit })
}

/// A follower of the session `session_id`'s events after `since`, for a follow of its own (a
/// job's).
pub async fn follower(sessions: &Sessions, session_id: &str, since: i64, until: Until) -> Result<Follower> {
    let at = sessions.store.session_by_id(session_id).await?.map_or(0, |s| s.event_seq);
    Ok(Follower::new(&sessions.store, &sessions.live, session_id, at, since, until))
}

impl SessionFollow {
    /// The session followed, as it was found.
    pub fn session(&self) -> &SessionRow {
        &self.session
    }
}

impl Pages for SessionFollow {
    async fn next(&mut self) -> Step {
        if let Some(end) = self.gate.ended() {
            return Step::End(end);
        }
        let max = self.left.map_or(PAGE, |left| left.min(PAGE));
        if max == 0 {
            return self.gate.end(End::Limit);
        }
        let deadline = self.deadline;
        let follower = &mut self.follower;
        let next = async move {
            tokio::select! {
                next = follower.next(max) => Some(next),
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => None,
            }
        };
        match self.gate.first(next).await {
            Err(reason) => self.gate.end(End::Closed(reason)),
            Ok(None) => self.gate.end(End::Waited),
            Ok(Some(Ok(Some(Next::Events(events))))) => {
                let step = self.gate.pass(events).await;
                if let (Some(left), Step::Page(events)) = (&mut self.left, &step) {
                    *left = left.saturating_sub(events.len());
                }
                step
            }
            Ok(Some(Ok(Some(Next::Ended(state))))) => self.gate.end(End::TurnEnded(state)),
            Ok(Some(Ok(Some(Next::Waiting(items))))) => self.gate.end(End::Waiting(items)),
            Ok(Some(Ok(None))) => self.gate.end(End::Stopped),
            Ok(Some(Err(e))) => self.gate.end(End::Failed(e.to_string())),
        }
    }
}

/// The long poll as one admitted stream (the `session` tool's `events` without progress):
/// `sessions::events`' answer, or, when a close of the relay's cuts the wait short, what is
/// there and that close. The session as found, too.
pub async fn wait(
    sessions: &Sessions,
    caller: &Caller,
    reference: &str,
    read: EventsRead,
    front: Front,
) -> Result<(SessionRow, EventsPage, Option<Reason>)> {
    let session = super::find(sessions, caller, reference).await?;
    let mut gate = Gate::open(sessions, caller, &session.sandbox_id, front, Charge::Events)?;
    let (page, closed) = match gate.first(super::events(sessions, caller, &session.id, read)).await {
        Ok(page) => (page?, None),
        Err(reason) => (super::read_page(sessions, &session.id, read.since(), read.limit()).await?, Some(reason)),
    };
    gate.admitted.end(closed.unwrap_or(Reason::Done));
    Ok((session, page, closed))
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

    /// An orchestrator's follow ends once the turn starts to wait for input (its move handed
    /// over, with the asks it waits for), whatever is printed after; one that starts past that
    /// move waits on, and one to the turn's end alone does not stop there.
    #[tokio::test]
    async fn a_follow_to_input_ends_when_the_turn_starts_to_wait() {
        let (store, dir) = testing::store("follow_input").await;
        let store = Arc::new(store);
        let live = Arc::new(Live::default());
        store.create_session(&testing::session("s1"), &testing::turn("t1", "s1")).await.unwrap();
        let to_running = store.move_turn("s1", "t1", TurnState::Running, None, None, 1.0, moved("running"));
        let seq = to_running.await.unwrap().unwrap();
        live.publish_events("s1", "t1", 1.0, &[moved("running")], &[(0, seq)], seq);
        let mut waits = Follower::new(&store, &live, "s1", seq, 0, Until::TurnEndsOrWaits);
        let mut to_end = Follower::new(&store, &live, "s1", seq, 0, Until::TurnEnds);
        assert_eq!(seqs(next(&mut waits, 10).await), vec![seq]);
        assert_eq!(seqs(next(&mut to_end, 10).await), vec![seq]);

        let mut ask = crate::store::ItemRow {
            id: "inb_1".into(),
            kind: crate::store::ItemKind::Question,
            state: crate::store::ItemState::Open,
            person: "p".into(),
            ask_id: Some("qst_1".into()),
            request: None,
            session_id: Some("s1".into()),
            session_name: Some("s1".into()),
            turn_id: Some("t1".into()),
            job_id: None,
            sandbox_id: None,
            sandbox_name: None,
            title: String::new(),
            text: "Go on?".into(),
            options: vec![],
            tool: None,
            call: None,
            created_at: 2.0,
            expires_at: None,
            ended_at: None,
            ended_by: None,
            outcome: None,
        };
        store.insert_item(&ask).await.unwrap();
        ask.id = "inb_2".into();
        ask.kind = crate::store::ItemKind::Failed;
        store.insert_item(&ask).await.unwrap();
        let wait = store.move_turn_from(
            "s1",
            "t1",
            Some(TurnState::Running),
            TurnState::WaitingInput,
            None,
            None,
            2.0,
            moved("waiting_input"),
        );
        let at = wait.await.unwrap().unwrap();
        live.publish_events("s1", "t1", 2.0, &[moved("waiting_input")], &[(0, at)], at);
        // A heartbeat right after: it does not keep the follow going.
        record(&store, &live, vec![ev(100)]).await;
        assert_eq!(seqs(next(&mut waits, 1).await), vec![at], "the move is handed over first");
        assert!(
            matches!(next(&mut waits, 10).await, Some(Next::Waiting(items)) if items == ["inb_1"]),
            "then the end, naming the open ask alone"
        );
        assert_eq!(seqs(next(&mut to_end, 10).await), vec![at, at + 1], "to the end: it goes on");

        let mut late = Follower::new(&store, &live, "s1", at + 1, at + 1, Until::TurnEndsOrWaits);
        let more = tokio::time::timeout(Duration::from_millis(100), late.next(10)).await;
        assert!(more.is_err(), "past the move it waits for what comes next");
        let from = |f: TurnState, t: TurnState| {
            store.move_turn_from("s1", "t1", Some(f), t, None, None, 3.0, moved(t.as_str()))
        };
        assert!(from(TurnState::WaitingInput, TurnState::Running).await.unwrap().is_some());
        assert!(
            from(TurnState::WaitingInput, TurnState::Running).await.unwrap().is_none(),
            "a move from a state the turn is not in changes nothing"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    fn gate(max_bytes: u64, charge: Charge) -> (Arc<streams::Streams>, Gate) {
        #[derive(clap::Parser)]
        struct Args {
            #[command(flatten)]
            limits: crate::config::Limits,
        }
        let mut limits = <Args as clap::Parser>::parse_from(["relay"]).limits;
        limits.max_bytes = max_bytes;
        let streams = streams::Streams::new(limits);
        let admitted = streams.open(&Caller::of_token("tok_1"), "sbx_1", Kind::Events, Front::Rest).unwrap();
        (streams, Gate::over(admitted, charge))
    }

    fn recent(seq: i64, bytes: usize) -> Recent {
        Recent { seq, mark: Mark::Plain, json: Arc::from("x".repeat(bytes)) }
    }

    fn page(step: Step) -> Vec<i64> {
        match step {
            Step::Page(events) => events.into_iter().map(|e| e.seq).collect(),
            Step::End(end) => panic!("expected a page, got {end:?}"),
        }
    }

    /// A page goes out charged to its stream; what the byte cap cuts off ends the follow after
    /// the rest, and the first end holds.
    #[tokio::test]
    async fn a_gate_charges_pages_and_ends_at_the_cap_once() {
        let (_streams, mut g) = gate(250, Charge::Events);
        assert_eq!(page(g.pass(vec![recent(1, 100), recent(2, 100)]).await), vec![1, 2]);
        assert_eq!(page(g.pass(vec![recent(3, 40), recent(4, 40)]).await), vec![3], "4 is past the cap");
        assert_eq!(g.ended(), Some(End::Closed(Reason::MaxBytes)));
        assert!(matches!(g.end(End::Limit), Step::End(End::Closed(Reason::MaxBytes))), "the first end holds");

        let (_streams, mut g) = gate(100, Charge::Notice(64));
        assert_eq!(page(g.pass(vec![recent(1, 1000), recent(2, 1000)]).await), vec![1, 2], "a notice a page");
        assert!(matches!(g.pass(vec![recent(3, 1)]).await, Step::End(End::Closed(Reason::MaxBytes))));
    }

    /// A close of the relay's wins over what the follow waits for.
    #[tokio::test]
    async fn a_gate_ends_at_the_relays_close() {
        let (streams, mut g) = gate(1 << 20, Charge::Events);
        assert_eq!(g.first(async { 7 }).await, Ok(7));
        streams.close_sandbox("sbx_1", Reason::Paused);
        assert_eq!(g.first(std::future::pending::<()>()).await, Err(Reason::Paused));
        assert_eq!(g.first(async { 7 }).await, Err(Reason::Paused), "a close wins a tie");
    }

    #[test]
    fn ends_say_their_reason_and_why() {
        let said = |e: End| (e.reason(), e.message(), e.closed());
        let done = Reason::Done;
        assert_eq!(said(End::TurnEnded(TurnState::Succeeded)), (done, Some("the turn ended: succeeded".into()), None));
        assert_eq!(said(End::JobEnded(JobState::Failed)), (done, Some("the job ended: failed".into()), None));
        assert_eq!(said(End::Waited), (done, None, None));
        assert_eq!(said(End::Limit), (done, None, None));
        assert_eq!(said(End::Closed(Reason::Revoked)), (Reason::Revoked, None, Some(Reason::Revoked)));
        assert_eq!(said(End::Failed("no job".into())), (Reason::Error, Some("no job".into()), None));
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
