//! A run's summary: what the agent is doing now and what it has done, folded from its events.
//!
//! Choices made here:
//! - `last_message` is the last assistant text, at most 500 chars. Streamed pieces (`delta: true`,
//!   Gemini) that come in a row are joined into one message; any other event ends the row.
//! - `time_to_first_test_s` is measured to the first `test.result`, not to the first
//!   `running_tests` phase: a run that only started a test command has not run tests yet.
//! - `warnings` holds the errors and truncations seen (`"<code>: <message>"`), the last 20.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cut;
use crate::event::{Event, EventType};

/// The most files in `files_touched`, and warnings in `warnings`.
const MAX_FILES: usize = 20;
const MAX_WARNINGS: usize = 20;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// thinking, reading, editing, searching, running_tests, running_command, git or waiting.
    pub phase: Option<String>,
    /// The last tool started: `"Bash"`.
    pub last_tool: Option<String>,
    /// Its summary (at most 200 chars): `"uv run pytest -q tests/"`.
    pub last_tool_summary: Option<String>,
    /// Where the last tool ran in a subagent: the `tool_id` of the call that started the
    /// subagent (Claude Code's `Agent`/`Task`); `None` for the main agent's own.
    pub last_tool_parent: Option<String>,
    pub current_file: Option<String>,
    /// The last 20 distinct files read or edited, newest last.
    pub files_touched: Vec<String>,
    /// The sum of the `run.result`s' `num_turns`.
    pub turns: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    /// The sum of the costs the harness reported; `None` if it reported none.
    pub cost_usd: Option<f64>,
    /// The last `test.result`'s data.
    pub tests: Option<Value>,
    /// The last assistant text, at most 500 chars.
    pub last_message: Option<String>,
    pub time_to_first_test_s: Option<f64>,
    pub warnings: Vec<String>,
    /// Whether the last event folded in was a streamed message piece, which the next one extends.
    #[serde(skip)]
    in_delta: bool,
}

impl Summary {
    /// Folds one event in. `ts` is when it was recorded and `started_at` when the session's first
    /// turn started (both epoch seconds), for time_to_first_test_s.
    pub fn apply(&mut self, event: &Event, ts: f64, started_at: f64) {
        let was_delta = std::mem::take(&mut self.in_delta);
        match event.kind {
            EventType::Phase => {
                if let Some(p) = event.get("phase").as_str() {
                    self.phase = Some(p.to_string());
                }
            }
            EventType::ToolStart => {
                self.last_tool = event.get("name").as_str().map(String::from);
                self.last_tool_summary = event.get("summary").as_str().map(|s| cut::chars(s, 200).0.to_string());
                self.last_tool_parent = event.get("parent_tool_id").as_str().map(String::from);
                let files = event.files();
                if let Some(first) = files.first() {
                    self.current_file = Some(first.to_string());
                }
                for f in files {
                    self.touch(f);
                }
            }
            EventType::Message if event.get("role").as_str() == Some("assistant") => {
                if let Some(text) = event.get("text").as_str() {
                    let delta = event.get("delta").as_bool() == Some(true);
                    let joined = match (&self.last_message, delta && was_delta) {
                        (Some(prev), true) => format!("{prev}{text}"),
                        _ => text.to_string(),
                    };
                    self.last_message = Some(cut::chars(&joined, 500).0.to_string());
                    self.in_delta = delta;
                }
            }
            EventType::Usage => {
                self.input_tokens = self.input_tokens.saturating_add(count(event.get("input_tokens")));
                self.output_tokens = self.output_tokens.saturating_add(count(event.get("output_tokens")));
                self.cache_read_tokens = self.cache_read_tokens.saturating_add(count(event.get("cache_read_tokens")));
                if let Some(c) = event.get("cost_usd").as_f64().filter(|c| c.is_finite()) {
                    self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + c);
                }
            }
            EventType::RunResult => {
                self.turns = self.turns.saturating_add(count(event.get("num_turns")));
            }
            EventType::TestResult => {
                self.tests = Some(event.data.clone());
                if self.time_to_first_test_s.is_none() {
                    self.time_to_first_test_s = Some((ts - started_at).max(0.0));
                }
            }
            EventType::Error => {
                let code = event.get("code").as_str().unwrap_or("error");
                let message = event.get("message").as_str().unwrap_or_default();
                self.warn(format!("{code}: {message}"));
            }
            EventType::HarnessTruncated => self.warn("harness.truncated: events were dropped".to_string()),
            _ => {}
        }
    }

    fn touch(&mut self, file: &str) {
        self.files_touched.retain(|f| f != file);
        self.files_touched.push(file.to_string());
        if self.files_touched.len() > MAX_FILES {
            self.files_touched.remove(0);
        }
    }

    fn warn(&mut self, warning: String) {
        self.warnings.push(cut::chars(&warning, 200).0.to_string());
        if self.warnings.len() > MAX_WARNINGS {
            self.warnings.remove(0);
        }
    }
}

/// A token or turn count; anything else counts as 0.
fn count(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{Format, Parser};
    use serde_json::json;

    /// Folds a fixture's events with `ts` = the event's index and `started_at` = 0.
    pub(crate) fn fold(format: Format, fixture: &str) -> Summary {
        let mut p = Parser::new(format);
        let mut s = Summary::default();
        let events: Vec<Event> = fixture.lines().flat_map(|l| p.feed(l.as_bytes())).collect();
        for (i, e) in events.iter().enumerate() {
            s.apply(e, i as f64, 0.0);
        }
        s
    }

    #[test]
    fn claude_long_turn() {
        let s = fold(Format::ClaudeStreamJson, include_str!("../fixtures/claude-long-turn.jsonl"));
        assert_eq!(s.phase.as_deref(), Some("git"));
        assert_eq!(s.last_tool.as_deref(), Some("Bash"));
        assert_eq!(s.files_touched, ["src/shipper/cli.py", "src/shipper/config.py"]);
        assert_eq!(s.current_file.as_deref(), Some("src/shipper/config.py"));
        assert_eq!(s.turns, 14);
        assert_eq!((s.input_tokens, s.output_tokens, s.cache_read_tokens), (48, 3912, 412883));
        assert_eq!(s.cost_usd, Some(0.4127));
        let tests = s.tests.unwrap();
        assert_eq!((&tests["framework"], &tests["passed"]), (&json!("cargo"), &json!(14)));
        assert!(s.time_to_first_test_s.is_some());
        assert!(s.last_message.unwrap().starts_with("Fixed the config loader"));
        assert!(s.warnings.is_empty());
    }

    /// The last tool names the subagent it ran in, and the main agent's next names none.
    #[test]
    fn a_subagents_tool_is_attributed_to_it() {
        let lines = concat!(
            r#"{"type":"assistant","message":{"content":[{"id":"t1","input":{"description":"look","prompt":"Look."},"name":"Agent","type":"tool_use"}]},"parent_tool_use_id":null}"#,
            "\n",
            r#"{"type":"assistant","message":{"content":[{"id":"t2","input":{"command":"pwd"},"name":"Bash","type":"tool_use"}]},"parent_tool_use_id":"t1"}"#,
            "\n",
        );
        let s = fold(Format::ClaudeStreamJson, lines);
        assert_eq!((s.last_tool.as_deref(), s.last_tool_parent.as_deref()), (Some("Bash"), Some("t1")));
        let after = format!(
            "{lines}{}\n",
            r#"{"type":"assistant","message":{"content":[{"id":"t3","input":{"command":"ls"},"name":"Bash","type":"tool_use"}]},"parent_tool_use_id":null}"#
        );
        assert_eq!(fold(Format::ClaudeStreamJson, &after).last_tool_parent, None);
    }

    #[test]
    fn claude_errors_become_warnings() {
        let s = fold(Format::ClaudeStreamJson, include_str!("../fixtures/claude-rate-limit-rejected.jsonl"));
        assert_eq!(s.warnings.len(), 2);
        assert!(s.warnings[0].starts_with("rate_limited: You've hit your limit"));
        assert_eq!(s.last_message, None, "a synthetic message is an error, not the agent's text");
        assert_eq!(s.tests, None);
        assert_eq!(s.time_to_first_test_s, None);
    }

    #[test]
    fn codex_and_gemini() {
        let s = fold(Format::CodexJsonl, include_str!("../fixtures/codex-out-of-order.jsonl"));
        assert_eq!(s.files_touched, ["src/config.rs", "src/lib.rs"]);
        assert_eq!(s.current_file.as_deref(), Some("src/config.rs"));
        assert_eq!((s.input_tokens, s.output_tokens, s.cache_read_tokens), (51234, 1830, 40960));
        assert_eq!(s.cost_usd, None);
        assert_eq!(s.turns, 0, "codex does not report turns");
        assert_eq!(s.tests.as_ref().unwrap()["passed"], 12);

        let s = fold(Format::GeminiStreamJson, include_str!("../fixtures/gemini-banner.jsonl"));
        assert_eq!(
            s.last_message.as_deref(),
            Some("`go test` fails in `parse`: TestParse expects 2 but the parser returns 1.")
        );
        assert_eq!(s.files_touched, ["/work/x/parse/parse.go"]);
        assert_eq!(s.tests.as_ref().unwrap()["failed"], 1);
        assert_eq!((s.input_tokens, s.output_tokens), (18234, 412));
    }

    #[test]
    fn every_fixture() {
        // (fixture, format, (input, output, cache read) tokens, cost, turns, last message, warnings, phase)
        type Row = (
            &'static str,
            Format,
            (u64, u64, u64),
            Option<f64>,
            u64,
            Option<&'static str>,
            usize,
            Option<&'static str>,
        );
        let rows: [Row; 9] = [
            (
                "claude-stream-json-executor",
                Format::ClaudeStreamJson,
                (2, 113, 12743),
                Some(0.0178546),
                2,
                Some("OK"),
                0,
                None,
            ),
            (
                "claude-long-turn",
                Format::ClaudeStreamJson,
                (48, 3912, 412883),
                Some(0.4127),
                14,
                Some("Fixed the config loader"),
                0,
                Some("git"),
            ),
            ("claude-api-error", Format::ClaudeStreamJson, (0, 0, 0), Some(0.0), 1, None, 2, None),
            ("claude-rate-limit-rejected", Format::ClaudeStreamJson, (0, 0, 0), Some(0.0), 1, None, 2, None),
            ("claude-resume-missing", Format::ClaudeStreamJson, (0, 0, 0), Some(0.0), 0, None, 1, None),
            ("codex-exec-json-minimal", Format::CodexJsonl, (20391, 5, 6912), None, 0, Some("OK"), 0, None),
            (
                "codex-out-of-order",
                Format::CodexJsonl,
                (51234, 1830, 40960),
                None,
                0,
                Some("`parse_config` now rejects"),
                1,
                Some("editing"),
            ),
            ("codex-turn-failed", Format::CodexJsonl, (0, 0, 0), None, 0, None, 2, None),
            (
                "gemini-banner",
                Format::GeminiStreamJson,
                (18234, 412, 9000),
                None,
                0,
                Some("`go test` fails"),
                0,
                Some("running_tests"),
            ),
        ];
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        for (name, format, tokens, cost, turns, message, warnings, phase) in rows {
            let text = std::fs::read_to_string(dir.join(format!("{name}.jsonl"))).unwrap();
            let s = fold(format, &text);
            assert_eq!((s.input_tokens, s.output_tokens, s.cache_read_tokens), tokens, "{name}");
            assert_eq!((s.cost_usd, s.turns), (cost, turns), "{name}");
            match message {
                Some(m) => assert!(
                    s.last_message.as_deref().unwrap_or_default().starts_with(m),
                    "{name}: {:?}",
                    s.last_message
                ),
                None => assert_eq!(s.last_message, None, "{name}"),
            }
            assert_eq!(s.warnings.len(), warnings, "{name}: {:?}", s.warnings);
            assert_eq!(s.phase.as_deref(), phase, "{name}");
        }
    }

    #[test]
    fn limits_and_odd_values() {
        let mut s = Summary::default();
        for i in 0..25 {
            let e =
                Event::agent(EventType::ToolStart, crate::event::obj! {"name" => "Read", "file" => format!("f{i}")});
            s.apply(&e, 0.0, 0.0);
        }
        s.apply(&Event::agent(EventType::ToolStart, crate::event::obj! {"name" => "Read", "file" => "f10"}), 0.0, 0.0);
        assert_eq!(s.files_touched.len(), 20);
        assert_eq!(s.files_touched.first().map(String::as_str), Some("f5"));
        assert_eq!(s.files_touched.last().map(String::as_str), Some("f10"));
        s.apply(&Event::agent(EventType::ToolStart, crate::event::obj! {"name" => "Read", "file" => ""}), 0.0, 0.0);
        assert_eq!(s.files_touched.last().map(String::as_str), Some("f10"), "an empty file names none");
        let odd =
            Event { kind: EventType::Usage, data: json!({"input_tokens": -3, "output_tokens": "7", "cost_usd": "1"}) };
        s.apply(&odd, 0.0, 0.0);
        assert_eq!((s.input_tokens, s.output_tokens, s.cost_usd), (0, 0, None));
        let not_object = Event { kind: EventType::Message, data: json!([1]) };
        s.apply(&not_object, 0.0, 0.0);
        let test = Event { kind: EventType::TestResult, data: json!({"passed": 1}) };
        s.apply(&test, 5.0, 10.0);
        assert_eq!(s.time_to_first_test_s, Some(0.0), "a clock step back is not a negative time");
        s.apply(&test, 50.0, 10.0);
        assert_eq!(s.time_to_first_test_s, Some(0.0), "only the first test counts");
    }

    #[test]
    fn deltas_in_a_row_are_joined() {
        let mut s = Summary::default();
        let d = |t: &str| {
            Event::agent(EventType::Message, crate::event::obj! {"role" => "assistant", "text" => t, "delta" => true})
        };
        s.apply(&d("Hel"), 0.0, 0.0);
        s.apply(&d("lo"), 0.0, 0.0);
        assert_eq!(s.last_message.as_deref(), Some("Hello"));
        s.apply(&Event::agent(EventType::Phase, crate::event::obj! {"phase" => "reading"}), 0.0, 0.0);
        s.apply(&d("Done"), 0.0, 0.0);
        assert_eq!(s.last_message.as_deref(), Some("Done"));
        let round = serde_json::to_value(&s).unwrap();
        assert!(round.get("in_delta").is_none());
    }
}
