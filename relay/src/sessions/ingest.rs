//! From a turn's log bytes to recorded events: complete lines, the harness's parser, the one
//! redaction step, the session's summary, plan usage, and the store, in one transaction per
//! batch with the read position; then live readers are told.
use hangar_agents::{Event, EventType, Line, Lines, Parser, Summary};
use serde_json::{json, Value};

use super::transition;
use crate::{
    app::Relay,
    error::Result,
    store::{NewEvent, SessionRow, TurnRow, TurnState, UsageRow},
    time,
};

/// At most this many events are recorded from one batch (a poll's 256 KiB, a followed chunk);
/// past it the rest become one `harness.truncated` and the read position still advances, so a
/// flood cannot wedge the watcher.
pub const MAX_EVENTS_PER_BATCH: usize = 2_000;

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
    /// Running or waiting for input, as the events say.
    pub state: TurnState,
}

impl Ingest {
    pub fn new(session: &SessionRow, turn: &TurnRow, parser: Parser, keep_session_id: bool) -> Ingest {
        let summary = serde_json::from_value(session.summary.clone()).unwrap_or_default();
        Ingest {
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
            state: if turn.state == TurnState::WaitingInput { TurnState::WaitingInput } else { TurnState::Running },
        }
    }

    /// Where the next byte read from the log goes.
    pub fn next_offset(&self) -> u64 {
        self.lines.consumed() + self.lines.pending() as u64
    }

    /// The log was truncated or replaced: what follows is read from offset 0 of the new file,
    /// placed after everything read before (an incomplete last line is given up).
    pub fn restart(&mut self) {
        self.base += self.lines.consumed() as i64;
        self.lines = Lines::new(0);
    }

    /// Records the events in `bytes`, the log's bytes from `next_offset()` on.
    pub fn push(&mut self, relay: &Relay, bytes: &[u8]) -> Result<()> {
        let lines = self.lines.push(bytes);
        let redactor = relay.secrets.redactor();
        let ts = time::now();
        let mut new = Vec::new();
        let mut cut = 0usize;
        let mut asked_input = false;
        let mut other_agent_event = false;
        for line in lines {
            let (offset, events) = match line {
                Line::Text { offset, bytes } => (offset, self.parser.feed(&bytes)),
                Line::Dropped { offset, len } => {
                    let data = json!({ "reason": "line_too_long", "bytes": len, "source": "hangar" });
                    (offset, vec![Event { kind: EventType::HarnessTruncated, data }])
                }
            };
            for (part, mut event) in events.into_iter().enumerate() {
                if new.len() >= MAX_EVENTS_PER_BATCH {
                    cut += 1;
                    continue;
                }
                redactor.json(&mut event.data);
                self.note(relay, &event, ts)?;
                match event.kind {
                    EventType::InputRequested => asked_input = true,
                    EventType::HarnessUnknown | EventType::HarnessTruncated => {}
                    _ => other_agent_event = true,
                }
                self.summary.apply(&event, ts, self.started_at);
                new.push(NewEvent {
                    kind: event.kind.as_str(),
                    data: event.data,
                    src_offset: Some(self.base + offset as i64),
                    part: part as i64,
                });
            }
        }
        if cut > 0 {
            new.push(NewEvent {
                kind: EventType::HarnessTruncated.as_str(),
                data: json!({ "reason": "too_many_events", "dropped": cut, "source": "hangar" }),
                src_offset: None,
                part: 0,
            });
            self.summary.warnings.retain(|w| w != "events_truncated");
            self.summary.warnings.push("events_truncated".into());
        }
        let summary = serde_json::to_value(&self.summary).unwrap_or(Value::Null);
        let position = (self.base, self.lines.consumed() as i64);
        let (seq, _) =
            relay.store.record_events(&self.session_id, &self.turn_id, &new, ts, Some(position), Some(&summary))?;
        relay.sessions.live.publish(&self.session_id, seq);
        relay.fleet.ingested(&self.session_id, &self.turn_id, &new, ts);
        // Waiting for input starts with the harness's request and ends with its next event.
        let to = match (self.state, asked_input, other_agent_event) {
            (TurnState::Running, true, _) => Some(TurnState::WaitingInput),
            (TurnState::WaitingInput, false, true) => Some(TurnState::Running),
            _ => None,
        };
        if let Some(to) = to {
            let from = self.state;
            self.state = to;
            transition(relay, &self.session_id, &self.turn_id, from, to, None, None)?;
        }
        Ok(())
    }

    /// What an event tells hangar beyond itself: the CLI's conversation id, plan usage, how
    /// the turn went.
    fn note(&mut self, relay: &Relay, event: &Event, ts: f64) -> Result<()> {
        let d = &event.data;
        match event.kind {
            EventType::RunStarted if self.keep_session_id => {
                if let Some(id) = d.get("session_id").and_then(Value::as_str).filter(|s| valid_session_id(s)) {
                    relay.store.update_session_start(&self.session_id, Some(id), None, ts)?;
                }
            }
            EventType::RateLimit => {
                let Some(credential) = &self.credential else { return Ok(()) };
                let Some(window) = d.get("window").and_then(Value::as_str) else { return Ok(()) };
                relay.store.put_usage(&UsageRow {
                    credential: credential.clone(),
                    window: window.chars().take(64).collect(),
                    used_pct: d.get("used_pct").and_then(Value::as_f64),
                    status: d.get("status").and_then(Value::as_str).map(|s| s.chars().take(64).collect()),
                    resets_at: d.get("resets_at").and_then(Value::as_f64),
                    seen_at: ts,
                    raw: d.get("raw").cloned().unwrap_or(Value::Null),
                })?;
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

/// A conversation id the relay may put into a follow-up's command line: it came from the
/// agent's output, so it is one plain word or nothing.
pub fn valid_session_id(s: &str) -> bool {
    (1..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}
