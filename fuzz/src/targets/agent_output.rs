//! What an agent CLI writes to its turn's log (`hangar-agents`): the line splitter, the parser of
//! each format, the summary and the live picture and the redaction step, fed what the agent
//! controls.
//!
//! Input: one byte choosing the format (its value mod 4: claude-stream-json, codex-jsonl,
//! gemini-stream-json, text), then the log's bytes.
use hangar_agents::{live, Event, EventType, Format, Line, Lines, LiveState, Parser, Redactor, Summary};
use proptest::prelude::*;
use serde_json::{json, Value};

use crate::{property, Failure, Runs, Target};

pub const TARGET: Target = Target {
    name: "agent_output",
    about: "agent CLIs' logs: lines split alike however the bytes arrive, every event an object \
            that says its source and survives a serde round trip, summaries and live pictures fold \
            without panic and stay bounded, and no secret's value survives redaction",
    run,
    props,
};

const FORMATS: [Format; 4] = [Format::ClaudeStreamJson, Format::CodexJsonl, Format::GeminiStreamJson, Format::Text];
/// A secret the checks redact (inputs may well contain it: the corpus and the properties do).
const SECRET: &str = "sk-fuzz-SECRET-0123";

pub fn run(data: &[u8]) {
    let Some((&which, log)) = data.split_first() else { return };
    check(FORMATS[which as usize % 4], log);
}

fn split(log: &[u8], chunk: usize) -> Vec<Line> {
    let mut lines = Lines::new(0);
    let mut out = Vec::new();
    for c in log.chunks(chunk.max(1)) {
        out.extend(lines.push(c));
    }
    assert!(lines.consumed() + lines.pending() as u64 == log.len() as u64, "every byte is consumed or pending");
    out
}

fn check(format: Format, log: &[u8]) {
    let lines = split(log, log.len());
    assert_eq!(lines, split(log, 7), "lines do not depend on how the bytes arrive");
    let redactor = Redactor::new([("FUZZ_KEY".to_string(), SECRET.to_string())]);
    let mut parser = Parser::new(format);
    let mut summary = Summary::default();
    let mut picture = LiveState::default();
    let mut last_end = 0u64;
    for line in &lines {
        let Line::Text { offset, bytes } = line else { continue };
        assert!(*offset >= last_end, "offsets only grow");
        last_end = offset + bytes.len() as u64 + 1;
        for mut event in parser.feed(bytes) {
            let data = event.data.as_object().unwrap_or_else(|| panic!("{:?}: data is not an object", event.kind));
            let source = data.get("source").and_then(Value::as_str);
            assert!(matches!(source, Some("agent" | "parsed")), "{:?} says its source: {source:?}", event.kind);
            let relays =
                matches!(event.kind, EventType::RunState | EventType::HarnessTruncated | EventType::AgentProgress);
            assert!(!relays, "the relay's own");
            let text = serde_json::to_string(&event).expect("an event serializes");
            let back: Event = serde_json::from_str(&text).expect("and reads back");
            assert_eq!(back.kind, event.kind);
            redactor.json(&mut event.data);
            assert!(!event.data.to_string().contains(SECRET), "redacted: {}", event.data);
            summary.apply(&event, 1.0, 0.0);
            picture.apply(&event, 1.0);
        }
    }
    let folded = serde_json::to_string(&summary).expect("a summary serializes");
    assert!(folded.len() < 64 * 1024, "a summary stays small: {} bytes", folded.len());
    assert!(picture.stages.len() <= live::MAX_STAGES && picture.files_changed() <= live::MAX_FILES as u64);
}

/// A line of JSON from parts: a type the formats know, fields of any shape.
fn json_line() -> impl Strategy<Value = String> {
    let types = prop_oneof![
        Just("system".to_string()),
        Just("assistant".to_string()),
        Just("user".to_string()),
        Just("result".to_string()),
        Just("rate_limit_event".to_string()),
        Just("thread.started".to_string()),
        Just("item.started".to_string()),
        Just("item.completed".to_string()),
        Just("turn.completed".to_string()),
        Just("turn.failed".to_string()),
        Just("error".to_string()),
        Just("init".to_string()),
        Just("message".to_string()),
        Just("tool_use".to_string()),
        Just("tool_result".to_string()),
        Just("request_user_input".to_string()),
        ".{0,8}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,24}".prop_map(Value::String),
        Just(Value::String(SECRET.to_string())),
    ];
    let value = leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("type".to_string()),
                    Just("subtype".to_string()),
                    Just("text".to_string()),
                    Just("content".to_string()),
                    Just("message".to_string()),
                    Just("item".to_string()),
                    Just("id".to_string()),
                    Just("command".to_string()),
                    Just("usage".to_string()),
                    Just("rate_limit_info".to_string()),
                    "[a-z_]{1,8}",
                ],
                inner,
                0..5,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    (types, proptest::collection::btree_map("[a-z_]{1,10}", value, 0..4)).prop_map(|(t, fields)| {
        let mut o: serde_json::Map<String, Value> = fields.into_iter().collect();
        o.insert("type".into(), Value::String(t));
        Value::Object(o).to_string()
    })
}

fn log_case() -> impl Strategy<Value = (u8, Vec<String>)> {
    let line = prop_oneof![4 => json_line(), 1 => ".{0,40}", 1 => Just(format!("plain {SECRET} text"))];
    (0u8..4, proptest::collection::vec(line, 0..6))
}

fn to_input(case: &(u8, Vec<String>)) -> Vec<u8> {
    let mut v = vec![case.0];
    for l in &case.1 {
        v.extend_from_slice(l.as_bytes());
        v.push(b'\n');
    }
    v
}

fn props(runner: &mut Runs) -> Result<(), Failure> {
    property(runner, log_case(), to_input, |c| run(&to_input(c)))
}
