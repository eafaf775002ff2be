//! From a turn's log bytes to recorded events: complete lines, the harness's parser, the one
//! redaction step, the session's summary, plan usage, and the store, in one transaction per
//! batch with the read position; then live readers are told.
use hangar_agents::{lines::Mark, Event, EventType, Line, Lines, Parser, Summary};
use serde_json::{json, Value};

use crate::{
    error::Result,
    feed::Change,
    sessions::Sessions,
    store::{NewEvent, SessionRow, TurnRow, TurnState, UsageRow, CURRENT_OFFSET},
    time,
};

/// At most this many events from the log are recorded at their place from one batch (a poll's
/// 256 KiB, a followed chunk), so that one transaction stays small; past it they count as
/// dropped (`Tally`) and the read position still advances, so a flood cannot wedge the watcher.
pub const MAX_EVENTS_PER_BATCH: usize = 2_000;

/// The kinds recorded whatever the caps: what the turn's outcome, plan usage and waiting state
/// are decided and shown by. `run.state` is the relay's own and never comes from a log.
fn always_kept(kind: EventType) -> bool {
    matches!(
        kind,
        EventType::RunResult
            | EventType::Usage
            | EventType::RateLimit
            | EventType::InputRequested
            | EventType::RunState
    )
}

/// Where an event from the log is recorded.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Place {
    /// At its place in the log.
    Log,
    /// Kept current in this part: it replaces the last event of its kind recorded past a cap.
    Current(i64),
    Dropped,
}

/// The part of the turn's `harness.truncated` that counts what was dropped, kept current; each
/// always-kept kind past a cap has the part after its place in `EventType::ALL`.
const DROPPED_PART: i64 = 0;

/// The per-turn cap on events from the log (`HANGAR_TURN_EVENT_MAX`) and the per-batch one, as
/// events are placed: under both, at their place in the log; past either, an always-kept kind
/// keeps its latest (one row per kind) and the rest are counted in one `harness.truncated`.
/// So a turn holds at most the cap, one event per always-kept kind, and that count.
#[derive(Debug, Default, PartialEq)]
struct Tally {
    max: u64,
    /// Events recorded at their place in the log.
    placed: u64,
    /// Events dropped (replaced always-kept ones included).
    dropped: u64,
    /// The parts kept current so far, as bits.
    current: u64,
}

impl Tally {
    /// From what the store holds for the turn, so a restarted relay counts on.
    async fn load(sessions: &Sessions, turn_id: &str, max: u64) -> Result<Tally> {
        let (placed, current) = sessions.store.turn_event_tally(turn_id).await?;
        let mut t = Tally { max, placed, ..Tally::default() };
        for (part, data) in current {
            if part == DROPPED_PART {
                t.dropped = data.get("dropped").and_then(Value::as_u64).unwrap_or(0);
            }
            t.current |= 1u64.checked_shl(part as u32).unwrap_or(0);
        }
        Ok(t)
    }

    /// Where an event of `kind` goes, the batch having placed `in_batch` before it.
    fn place(&mut self, kind: EventType, in_batch: usize) -> Place {
        if in_batch < MAX_EVENTS_PER_BATCH && self.placed < self.max {
            self.placed += 1;
            return Place::Log;
        }
        if !always_kept(kind) {
            self.dropped += 1;
            return Place::Dropped;
        }
        let part = 1 + EventType::ALL.iter().position(|k| *k == kind).unwrap_or(0) as i64;
        let bit = 1u64 << part;
        if self.current & bit != 0 {
            self.dropped += 1;
        }
        self.current |= bit;
        Place::Current(part)
    }
}

/// What the harness's last `run.result` and errors said about how the turn went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Outcome {
    /// The last `run.result`'s `ok`, if one came.
    pub result_ok: Option<bool>,
    /// The harness reported a rate limit (a 429, a rejected limit).
    pub rate_limited: bool,
}

pub struct Ingest {
    pub session_id: String,
    pub turn_id: String,
    lines: Lines,
    parser: Parser,
    base: i64,
    summary: Summary,
    started_at: f64,
    credential: Option<String>,
    /// The CLI reports its conversation id (`run.started.session_id`) and hangar keeps it.
    keep_session_id: bool,
    pub outcome: Outcome,
    /// The harness asked for input itself (`input.requested`) and has said nothing since.
    harness_asked: bool,
    tally: Tally,
}

impl Ingest {
    pub async fn new(
        sessions: &Sessions,
        session: &SessionRow,
        turn: &TurnRow,
        parser: Parser,
        keep_session_id: bool,
    ) -> Result<Ingest> {
        let summary = serde_json::from_value(session.summary.clone()).unwrap_or_default();
        let tally = Tally::load(sessions, &turn.id, sessions.settings.turn_event_max).await?;
        Ok(Ingest {
            session_id: session.id.clone(),
            turn_id: turn.id.clone(),
            lines: Lines::new(turn.log_offset.max(0) as u64),
            parser,
            base: turn.log_base,
            summary,
            started_at: session.started_at.or(turn.started_at).unwrap_or(turn.created_at),
            credential: turn.credential.clone(),
            keep_session_id,
            outcome: Outcome::default(),
            harness_asked: turn.state == TurnState::WaitingInput,
            tally,
        })
    }

    /// Where the next byte read from the log goes: past every byte read, a long line's that
    /// `Lines` does not hold included (reading again from the line's start would restart it).
    pub fn next_offset(&self) -> u64 {
        self.lines.position()
    }

    /// The log was truncated or replaced: what follows is read from offset 0 of the new file,
    /// placed after everything read before (an incomplete last line is given up).
    pub fn restart(&mut self) {
        self.base += self.lines.consumed() as i64;
        self.lines = Lines::new(0);
    }

    /// Records the events in `bytes`, the log's bytes from `next_offset()` on.
    pub async fn push(&mut self, sessions: &Sessions, bytes: &[u8]) -> Result<()> {
        let lines = self.lines.push(bytes);
        let redactor = sessions.secrets.redactor();
        let ts = time::now();
        let mut new = Vec::new();
        let mut in_batch = 0usize;
        let dropped_before = self.tally.dropped;
        let mut asked_input = false;
        let mut other_agent_event = false;
        for line in lines {
            // The writer's marks and the lines the relay could not hold are hangar's own word,
            // one per line of at least 1 MiB (or per full log): recorded past the caps.
            let (offset, events, capped) = match line {
                Line::Text { offset, bytes } => (offset, self.parser.feed(&bytes), true),
                Line::Dropped { offset, len } => (offset, vec![truncated_line(len, len)], false),
                Line::Marked { offset, kept, mark: Mark::Cut { dropped } } => {
                    (offset, vec![truncated_line(kept.saturating_add(dropped), dropped)], false)
                }
                Line::Marked { offset, mark: Mark::LogFull { limit }, .. } => {
                    let data = json!({ "reason": "log_full", "limit": limit, "source": "hangar" });
                    (offset, vec![Event { kind: EventType::HarnessTruncated, data }], false)
                }
            };
            for (part, mut event) in events.into_iter().enumerate() {
                // The turn's state follows every event, recorded or not.
                match event.kind {
                    EventType::InputRequested => asked_input = true,
                    EventType::HarnessUnknown | EventType::HarnessTruncated => {}
                    _ => other_agent_event = true,
                }
                let place = if capped { self.tally.place(event.kind, in_batch) } else { Place::Log };
                let (src_offset, part) = match place {
                    Place::Dropped => continue,
                    Place::Log => (self.base + offset as i64, part as i64),
                    Place::Current(p) => (CURRENT_OFFSET, p),
                };
                in_batch += usize::from(place == Place::Log);
                redactor.json(&mut event.data);
                self.note(sessions, &event, ts).await?;
                self.summary.apply(&event, ts, self.started_at);
                new.push(NewEvent { kind: event.kind.as_str(), data: event.data, src_offset: Some(src_offset), part });
            }
        }
        if self.tally.dropped > dropped_before {
            // One count per turn, kept current: it replaces the one before.
            new.push(NewEvent {
                kind: EventType::HarnessTruncated.as_str(),
                data: json!({
                    "reason": "too_many_events",
                    "dropped": self.tally.dropped,
                    "limit": self.tally.max,
                    "source": "hangar",
                }),
                src_offset: Some(CURRENT_OFFSET),
                part: DROPPED_PART,
            });
            self.summary.warnings.retain(|w| w != "events_truncated");
            self.summary.warnings.push("events_truncated".into());
        }
        let summary = serde_json::to_value(&self.summary).unwrap_or(Value::Null);
        // The parser's memory goes with the position: a relay restarted there parses on as this one.
        let position = (self.base, self.lines.consumed() as i64, self.parser.snapshot());
        let (seq, recorded) = sessions
            .store
            .record_events(&self.session_id, &self.turn_id, new.clone(), ts, Some(position), Some(&summary))
            .await?;
        sessions.live.publish_events(&self.session_id, &self.turn_id, ts, &new, &recorded, seq);
        let change = Change::Events { session_id: &self.session_id, turn_id: &self.turn_id, events: &new, ts };
        sessions.feed.publish(change).await;
        // The harness's own request waits until its next event; an ask in the inbox waits until
        // it ends, whatever the harness prints meanwhile (a hook's heartbeats): `settle_input`.
        if asked_input && !self.harness_asked {
            self.harness_asked = true;
            super::harness_asked(sessions, &self.session_id, &self.turn_id).await?;
        } else if self.harness_asked && !asked_input && other_agent_event {
            self.harness_asked = false;
            super::settle_input(sessions, &self.session_id, &self.turn_id).await?;
        }
        Ok(())
    }

    /// What an event tells hangar beyond itself: the CLI's conversation id, plan usage, how
    /// the turn went.
    async fn note(&mut self, sessions: &Sessions, event: &Event, ts: f64) -> Result<()> {
        let d = &event.data;
        match event.kind {
            EventType::RunStarted if self.keep_session_id => {
                if let Some(id) = d.get("session_id").and_then(Value::as_str).filter(|s| valid_session_id(s)) {
                    sessions.store.update_session_start(&self.session_id, Some(id), None, ts).await?;
                }
            }
            EventType::RateLimit => {
                let Some(credential) = &self.credential else { return Ok(()) };
                let Some(window) = d.get("window").and_then(Value::as_str) else { return Ok(()) };
                sessions
                    .store
                    .put_usage(&UsageRow {
                        credential: credential.clone(),
                        window: window.chars().take(64).collect(),
                        used_pct: d.get("used_pct").and_then(Value::as_f64),
                        status: d.get("status").and_then(Value::as_str).map(|s| s.chars().take(64).collect()),
                        resets_at: d.get("resets_at").and_then(Value::as_f64),
                        seen_at: ts,
                        raw: d.get("raw").cloned().unwrap_or(Value::Null),
                    })
                    .await?;
                if d.get("status").and_then(Value::as_str) == Some("rejected") {
                    self.outcome.rate_limited = true;
                }
            }
            EventType::RunResult => {
                self.outcome.result_ok = d.get("ok").and_then(Value::as_bool);
                if d.get("api_error_status").and_then(Value::as_i64) == Some(429) {
                    self.outcome.rate_limited = true;
                }
            }
            EventType::Error => {
                let code = d.get("code").and_then(Value::as_str).unwrap_or_default();
                if code.contains("rate_limit") || code.ends_with("429") {
                    self.outcome.rate_limited = true;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// hangar's `harness.truncated` for a line over 1 MiB: `bytes` long, `dropped` of them not kept.
fn truncated_line(bytes: u64, dropped: u64) -> Event {
    let data = json!({ "reason": "line_too_long", "bytes": bytes, "dropped": dropped, "source": "hangar" });
    Event { kind: EventType::HarnessTruncated, data }
}

/// A conversation id the relay may put into a follow-up's command line: it came from the
/// agent's output, so it is one plain word or nothing.
pub fn valid_session_id(s: &str) -> bool {
    (1..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_cap_only_the_latest_of_each_always_kept_kind_is_recorded_and_the_rest_counted() {
        let mut t = Tally { max: 3, ..Tally::default() };
        let kinds = [EventType::Message, EventType::RunResult, EventType::ToolStart];
        assert!(kinds.iter().all(|k| t.place(*k, 0) == Place::Log), "under the cap, at their place");
        assert_eq!(t.place(EventType::Message, 0), Place::Dropped);
        let result = t.place(EventType::RunResult, 0);
        assert!(matches!(result, Place::Current(p) if p > DROPPED_PART));
        assert_eq!(t.dropped, 1, "the first past the cap replaces nothing");
        assert_eq!(t.place(EventType::RunResult, 0), result, "the next replaces it");
        assert_eq!(t.dropped, 2);
        let usage = t.place(EventType::Usage, 0);
        assert!(matches!(usage, Place::Current(_)) && usage != result);
        for kind in [EventType::RateLimit, EventType::InputRequested] {
            assert!(matches!(t.place(kind, 0), Place::Current(_)));
        }
        assert_eq!((t.placed, t.dropped), (3, 2));
    }

    #[test]
    fn a_batch_past_its_cap_keeps_the_always_kept_kinds() {
        let mut t = Tally { max: u64::MAX, ..Tally::default() };
        assert_eq!(t.place(EventType::Message, MAX_EVENTS_PER_BATCH - 1), Place::Log);
        assert_eq!(t.place(EventType::Message, MAX_EVENTS_PER_BATCH), Place::Dropped);
        assert!(matches!(t.place(EventType::RunResult, MAX_EVENTS_PER_BATCH), Place::Current(_)));
        assert!(matches!(t.place(EventType::InputRequested, MAX_EVENTS_PER_BATCH), Place::Current(_)));
        assert_eq!((t.placed, t.dropped), (1, 1));
    }
}
