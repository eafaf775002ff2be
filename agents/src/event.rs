//! hangar's normalized event: a type and a JSON object of data.
//!
//! The data shapes are in the crate's parsers; this module only names the types. Parsers add
//! `"source": "agent"` to every event they make: it came from the agent's own output, which is
//! untrusted. The one exception is `test.result`, whose `"source": "parsed"` says its counts were
//! read from a test runner's output (so, from the agent's output too). The relay adds
//! `"source": "hangar"` to the events it makes itself: any other source is untrusted.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The type of an [`Event`], serialized as hangar's dotted name (`"tool.start"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    #[serde(rename = "run.started")]
    RunStarted,
    #[serde(rename = "message")]
    Message,
    #[serde(rename = "tool.start")]
    ToolStart,
    #[serde(rename = "tool.end")]
    ToolEnd,
    #[serde(rename = "phase")]
    Phase,
    #[serde(rename = "test.result")]
    TestResult,
    #[serde(rename = "usage")]
    Usage,
    #[serde(rename = "rate_limit")]
    RateLimit,
    #[serde(rename = "input.requested")]
    InputRequested,
    #[serde(rename = "error")]
    Error,
    #[serde(rename = "run.result")]
    RunResult,
    /// Emitted by the relay, never by a parser.
    #[serde(rename = "run.state")]
    RunState,
    #[serde(rename = "harness.unknown")]
    HarnessUnknown,
    /// Emitted by the relay, never by a parser.
    #[serde(rename = "harness.truncated")]
    HarnessTruncated,
    /// The agent's own progress report (`text`, `pct`), which the relay records from the agent's
    /// inbox; never made by a parser.
    #[serde(rename = "agent.progress")]
    AgentProgress,
}

impl EventType {
    /// Every type, in declaration order (a new one goes last: the relay numbers rows by it).
    pub const ALL: [EventType; 15] = [
        EventType::RunStarted,
        EventType::Message,
        EventType::ToolStart,
        EventType::ToolEnd,
        EventType::Phase,
        EventType::TestResult,
        EventType::Usage,
        EventType::RateLimit,
        EventType::InputRequested,
        EventType::Error,
        EventType::RunResult,
        EventType::RunState,
        EventType::HarnessUnknown,
        EventType::HarnessTruncated,
        EventType::AgentProgress,
    ];

    /// The wire name, the same as serde's.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::RunStarted => "run.started",
            EventType::Message => "message",
            EventType::ToolStart => "tool.start",
            EventType::ToolEnd => "tool.end",
            EventType::Phase => "phase",
            EventType::TestResult => "test.result",
            EventType::Usage => "usage",
            EventType::RateLimit => "rate_limit",
            EventType::InputRequested => "input.requested",
            EventType::Error => "error",
            EventType::RunResult => "run.result",
            EventType::RunState => "run.state",
            EventType::HarnessUnknown => "harness.unknown",
            EventType::HarnessTruncated => "harness.truncated",
            EventType::AgentProgress => "agent.progress",
        }
    }

    /// The type with wire name `s`, if any.
    pub fn parse(s: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One normalized event. `data` is always a JSON object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    #[serde(rename = "type")]
    pub kind: EventType,
    pub data: Value,
}

impl Event {
    /// An event made from the agent's output: `data` gets `"source": "agent"`, unless it says a
    /// more precise source (`test.result`'s `"parsed"`: counts read from a runner's output).
    pub(crate) fn agent(kind: EventType, mut data: Map<String, Value>) -> Event {
        data.entry("source").or_insert_with(|| Value::from("agent"));
        Event { kind, data: Value::Object(data) }
    }

    /// `data[key]`, or `Null` when absent.
    pub(crate) fn get(&self, key: &str) -> &Value {
        self.data.get(key).unwrap_or(&Value::Null)
    }

    /// The files a `tool.start` works on: its `file` first (an empty one names none), then the
    /// others of `files`. The one reading of them for both folds, the summary and the picture.
    pub(crate) fn files(&self) -> Vec<&str> {
        let mut files: Vec<&str> = match self.get("files").as_array() {
            Some(list) => list.iter().filter_map(Value::as_str).collect(),
            None => Vec::new(),
        };
        if let Some(f) = self.get("file").as_str().filter(|f| !f.is_empty()) {
            if !files.contains(&f) {
                files.insert(0, f);
            }
        }
        files
    }
}

/// Builds a JSON object from `key => value` pairs; values go through `serde_json::Value::from`.
macro_rules! obj {
    ($($k:literal => $v:expr),* $(,)?) => {{
        #[allow(unused_mut)]
        let mut m = serde_json::Map::new();
        $( m.insert($k.to_string(), serde_json::Value::from($v)); )*
        m
    }};
}
pub(crate) use obj;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_serde_and_parse() {
        for t in EventType::ALL {
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{}\"", t.as_str()));
            assert_eq!(EventType::parse(t.as_str()), Some(t));
            assert_eq!(serde_json::from_str::<EventType>(&json).unwrap(), t);
        }
        assert_eq!(EventType::parse("tool_start"), None);
    }

    #[test]
    fn event_serializes_with_type_and_data() {
        let e = Event::agent(EventType::Phase, obj! {"phase" => "git"});
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v, serde_json::json!({"type": "phase", "data": {"phase": "git", "source": "agent"}}));
        assert_eq!(serde_json::from_value::<Event>(v).unwrap(), e);
    }
}
