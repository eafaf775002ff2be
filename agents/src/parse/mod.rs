//! Parsers from agent CLIs' log lines to [`Event`]s, one file per format.
//!
//! A [`Parser`] is fed one complete line at a time and returns the events that line makes. It keeps
//! a little state between lines: the current phase (a `phase` event comes only when it changes) and
//! the tool calls under way (so a `tool.end` is named and a test run is recognized). Whatever the
//! bytes, `feed` returns events and never fails: a line it cannot place becomes `harness.unknown`
//! with the raw line, and a blank line makes nothing.
//!
//! Files: `claude.rs`, `codex.rs`, `gemini.rs` and `text.rs` are the formats; `tests.rs` spots test
//! runners in shell commands and reads their summaries (and, for callers that classify what a
//! command does, says which programs it runs: [`commands`], [`runs_tests`]).

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::cut;
use crate::event::{obj, Event, EventType};

mod claude;
mod codex;
mod gemini;
#[cfg(test)]
mod golden;
mod tests;
mod text;

pub(crate) use tests::base;
pub use tests::{commands, runs_tests};

/// A log format: how a harness's CLI writes its run log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// `claude -p --output-format stream-json --verbose`.
    ClaudeStreamJson,
    /// `codex exec --json`.
    CodexJsonl,
    /// `gemini -o stream-json`.
    GeminiStreamJson,
    /// Anything else: no events from lines.
    Text,
}

impl Format {
    /// Every format.
    const ALL: [Format; 4] = [Format::ClaudeStreamJson, Format::CodexJsonl, Format::GeminiStreamJson, Format::Text];

    /// The name used in harness profiles, the same as serde's.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::ClaudeStreamJson => "claude-stream-json",
            Format::CodexJsonl => "codex-jsonl",
            Format::GeminiStreamJson => "gemini-stream-json",
            Format::Text => "text",
        }
    }

    /// The format named `s`, if any.
    pub fn parse(s: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.as_str() == s)
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A log parser for one format. See the module doc.
#[derive(Debug)]
pub struct Parser {
    format: Format,
    state: State,
}

impl Parser {
    pub fn new(format: Format) -> Parser {
        Parser { format, state: State::default() }
    }

    /// A parser that goes on where one stopped, from what [`Parser::snapshot`] said of it: the
    /// phase, the tool calls under way, the reply so far. A snapshot that does not read (written
    /// by another version) starts afresh.
    pub fn resume(format: Format, snapshot: &str) -> Parser {
        Parser { format, state: serde_json::from_str(snapshot).unwrap_or_default() }
    }

    /// What the parser remembers between lines, as JSON: kept with the log's read position, so a
    /// reader that restarts there makes the same events as one that never stopped (no second
    /// `phase`, no `tool.end` without its tool's name).
    pub fn snapshot(&self) -> String {
        serde_json::to_string(&self.state).unwrap_or_default()
    }

    /// One complete line of the log, without its '\n' (a trailing '\r' is ignored). The events it
    /// makes, in order.
    pub fn feed(&mut self, line: &[u8]) -> Vec<Event> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return Vec::new();
        }
        if self.format == Format::Text {
            return text::feed(line);
        }
        // A JSON object with a string `type`; anything else is not one of the CLI's events.
        let parsed = serde_json::from_slice::<Value>(line).ok().and_then(|v| match v {
            Value::Object(o) if o.get("type").is_some_and(Value::is_string) => Some(o),
            _ => None,
        });
        let Some(o) = parsed else { return vec![unknown(line)] };
        let kind = o.get("type").and_then(Value::as_str).unwrap_or_default();
        let mut out = Vec::new();
        let known = match self.format {
            Format::ClaudeStreamJson => claude::feed(&mut self.state, kind, &o, &mut out),
            Format::CodexJsonl => codex::feed(&mut self.state, kind, &o, &mut out),
            Format::GeminiStreamJson => gemini::feed(&mut self.state, kind, &o, &mut out),
            Format::Text => true,
        };
        if !known {
            out.push(unknown(line));
        }
        out
    }
}

/// The most tool calls remembered at once: a started call that never ends (seen with Codex) must
/// not grow the parser forever.
const MAX_TOOLS: usize = 1024;

/// A tool call under way.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Tool {
    name: String,
    /// The shell command, for shell tools: it decides whether the call ran tests.
    command: Option<String>,
}

/// What a parser remembers between lines; each format uses the parts it needs.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
struct State {
    phase: Option<String>,
    tools: BTreeMap<String, Tool>,
    /// Tool ids in the order they started, to forget the oldest past [`MAX_TOOLS`].
    order: VecDeque<String>,
    /// The assistant's text since the last tool call, for a `run.result`'s `final_text` when the
    /// CLI does not say it (Codex, Gemini). Kept to a little over the 2 KiB that is reported.
    reply: String,
    /// Claude: the last rate limit said `rejected`, so the next synthetic message is about it.
    rejected: bool,
}

impl State {
    /// A `phase` event, if `phase` is not the current one.
    fn phase(&mut self, phase: &'static str, out: &mut Vec<Event>) {
        if self.phase.as_deref() != Some(phase) {
            self.phase = Some(phase.to_string());
            out.push(Event::agent(EventType::Phase, obj! {"phase" => phase}));
        }
    }

    /// Forgets the turn: the next turn's first phase is reported even if it equals the last one.
    fn end_turn(&mut self) {
        self.phase = None;
        self.tools.clear();
        self.order.clear();
        self.reply.clear();
        self.rejected = false;
    }

    /// Appends assistant text to the turn's reply (`fresh`: it replaces what was there).
    fn reply(&mut self, text: &str, fresh: bool) {
        if fresh {
            self.reply.clear();
        }
        if self.reply.len() <= MAX_TEXT {
            self.reply.push_str(cut::bytes(text, MAX_TEXT + 1).0);
        }
    }

    fn started(&self, id: &str) -> bool {
        self.tools.contains_key(id)
    }

    /// A `tool.start` and the phase it puts the agent in. `command` is the shell command for shell
    /// tools; `file` the file a reading or editing tool works on.
    fn tool_start(&mut self, start: ToolStart, out: &mut Vec<Event>) {
        let phase = start.phase.or_else(|| start.command.as_deref().map(tests::command_phase));
        let mut data = obj! {
            "tool_id" => start.id.clone(),
            "name" => start.name.clone(),
            "summary" => start.summary.map(|s| cut::summary(&s, MAX_SUMMARY)),
            "file" => start.file,
        };
        if let Some(files) = start.files {
            data.insert("files".into(), Value::from(files));
        }
        out.push(Event::agent(EventType::ToolStart, data));
        if let Some(p) = phase {
            self.phase(p, out);
        }
        // A new reply starts after each tool call: the final text is what comes after the last.
        self.reply.clear();
        if let Some(id) = start.id {
            if self.tools.insert(id.clone(), Tool { name: start.name, command: start.command }).is_none() {
                self.order.push_back(id);
            }
            while self.order.len() > MAX_TOOLS {
                if let Some(old) = self.order.pop_front() {
                    self.tools.remove(&old);
                }
            }
        }
    }

    /// A `tool.end`, and a `test.result` if the call ran tests whose summary is in `output`.
    fn tool_end(
        &mut self,
        id: Option<&str>,
        ok: bool,
        output: &str,
        duration_ms: Option<&Value>,
        out: &mut Vec<Event>,
    ) {
        let tool = id.and_then(|id| self.tools.remove(id));
        if let (Some(id), Some(_)) = (id, &tool) {
            self.order.retain(|o| o != id);
        }
        let summary = cut::summary(output, MAX_SUMMARY);
        let mut data = obj! {
            "tool_id" => id,
            "name" => tool.as_ref().map(|t| t.name.clone()),
            "ok" => ok,
            "summary" => summary,
        };
        if let Some(d) = duration_ms.filter(|d| d.is_number()) {
            data.insert("duration_ms".into(), d.clone());
        }
        out.push(Event::agent(EventType::ToolEnd, data));
        if let Some(command) = tool.and_then(|t| t.command) {
            if let Some(result) = tests::test_result(&command, output) {
                out.push(Event::agent(EventType::TestResult, result));
            }
        }
    }
}

/// The parts of a `tool.start`.
#[derive(Debug, Default)]
struct ToolStart {
    id: Option<String>,
    name: String,
    summary: Option<String>,
    file: Option<String>,
    /// Every path of a change to several files (Codex `file_change`).
    files: Option<Vec<String>>,
    command: Option<String>,
    /// The phase, when the tool's name does not say it through `command`.
    phase: Option<&'static str>,
}

impl ToolStart {
    /// A tool call by name and input, as Claude's `tool_use` and Gemini's carry them: `shell` is
    /// the CLI's name for its shell tool, whose `command` says the phase and is the summary.
    fn of_call(id: Option<String>, name: String, input: Option<&Map<String, Value>>, shell: &str) -> ToolStart {
        let is_shell = name == shell;
        let command = if is_shell { input.and_then(|i| str_at(i, "command")).map(String::from) } else { None };
        let phase = if is_shell && command.is_none() { Some("running_command") } else { tool_phase(&name) };
        let summary = match &command {
            Some(c) => Some(tests::unwrap(c)),
            None => input_summary(input),
        };
        ToolStart { id, file: input_file(phase, input), name, summary, command, phase, files: None }
    }
}

/// The most bytes of a message's text, or of a final text.
const MAX_TEXT: usize = 2 << 10;
/// The most chars of a tool's summary.
const MAX_SUMMARY: usize = 200;
/// The most bytes of a raw unknown line.
const MAX_RAW: usize = 4 << 10;

/// `harness.unknown` for a line no parser places.
fn unknown(line: &[u8]) -> Event {
    let raw = String::from_utf8_lossy(line);
    let (raw, cut) = cut::bytes(&raw, MAX_RAW);
    let mut data = obj! {"raw" => raw};
    if cut {
        data.insert("truncated".into(), Value::Bool(true));
    }
    Event::agent(EventType::HarnessUnknown, data)
}

/// A `message` from the assistant. `delta`: a streamed piece (Gemini).
fn message(text: &str, delta: bool) -> Event {
    let (text, cut) = cut::bytes(text, MAX_TEXT);
    let mut data = obj! {"role" => "assistant", "text" => text, "final" => false};
    if cut {
        data.insert("truncated".into(), Value::Bool(true));
    }
    if delta {
        data.insert("delta".into(), Value::Bool(true));
    }
    Event::agent(EventType::Message, data)
}

/// An `error`.
fn error(code: &str, message: &str, retryable: bool) -> Event {
    let (message, _) = cut::bytes(message, MAX_TEXT);
    Event::agent(EventType::Error, obj! {"code" => code, "message" => message, "retryable" => retryable})
}

/// `final_text` for a `run.result`: at most 2 KiB.
fn final_text(text: Option<&str>) -> Value {
    text.map(|t| Value::from(cut::bytes(t, MAX_TEXT).0)).unwrap_or(Value::Null)
}

/// The phase a tool puts the agent in, by its name (shell tools go by their command instead).
/// The live picture's stages read tools by it too.
pub(crate) fn tool_phase(name: &str) -> Option<&'static str> {
    Some(match name {
        "Read" | "NotebookRead" | "LS" | "WebFetch" | "read_file" | "read_many_files" | "list_directory"
        | "web_fetch" => "reading",
        "Grep"
        | "Glob"
        | "WebSearch"
        | "glob"
        | "grep"
        | "search_file_content"
        | "google_web_search"
        | "web_search" => "searching",
        "Edit" | "Write" | "MultiEdit" | "NotebookEdit" | "write_file" | "replace" | "edit" => "editing",
        "AskUserQuestion" => "waiting",
        _ => return None,
    })
}

/// Field readers that take whatever is there: a missing field or one of the wrong type is `None`.
fn str_at<'a>(o: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    o.get(key).and_then(Value::as_str)
}

fn obj_at<'a>(o: &'a Map<String, Value>, key: &str) -> Option<&'a Map<String, Value>> {
    o.get(key).and_then(Value::as_object)
}

/// A number field as it is (integer or float), or `Null`.
fn num_at(o: &Map<String, Value>, key: &str) -> Value {
    o.get(key).filter(|v| v.is_number()).cloned().unwrap_or(Value::Null)
}

/// A string field, or `Null`.
fn str_val(o: &Map<String, Value>, key: &str) -> Value {
    str_at(o, key).map(Value::from).unwrap_or(Value::Null)
}

/// The text of tool output that is a string, or a list of blocks (`{"type": "text", "text": ...}`)
/// or strings; other values are their JSON.
fn output_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .filter_map(|i| match i {
                Value::String(s) => Some(s.as_str()),
                Value::Object(o) => str_at(o, "text"),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

/// A one-line summary of a tool's input: the command, the path, the pattern... or its JSON.
fn input_summary(input: Option<&Map<String, Value>>) -> Option<String> {
    let input = input?;
    const KEYS: [&str; 11] = [
        "command",
        "file_path",
        "notebook_path",
        "absolute_path",
        "pattern",
        "query",
        "url",
        "path",
        "dir_path",
        "description",
        "prompt",
    ];
    if let Some(s) = KEYS.iter().find_map(|k| str_at(input, k)) {
        return Some(s.to_string());
    }
    (!input.is_empty()).then(|| Value::Object(input.clone()).to_string())
}

/// The file a reading or editing tool works on.
fn input_file(phase: Option<&str>, input: Option<&Map<String, Value>>) -> Option<String> {
    if !matches!(phase, Some("reading" | "editing")) {
        return None;
    }
    let input = input?;
    ["file_path", "notebook_path", "absolute_path", "path"].iter().find_map(|k| str_at(input, k)).map(String::from)
}

#[cfg(test)]
mod checks {
    use super::*;
    use serde_json::json;

    /// A parser snapshotted and resumed after every line makes exactly the events of one that
    /// never stopped, for every fixture of every format: a reader restarted anywhere in a log.
    #[test]
    fn a_resumed_parser_makes_the_same_events_as_one_that_never_stopped() {
        let fixtures: &[(Format, &str)] = &[
            (Format::ClaudeStreamJson, include_str!("../../fixtures/claude-long-turn.jsonl")),
            (Format::ClaudeStreamJson, include_str!("../../fixtures/claude-stream-json-executor.jsonl")),
            (Format::ClaudeStreamJson, include_str!("../../fixtures/claude-rate-limit-rejected.jsonl")),
            (Format::CodexJsonl, include_str!("../../fixtures/codex-out-of-order.jsonl")),
            (Format::CodexJsonl, include_str!("../../fixtures/codex-exec-json-minimal.jsonl")),
            (Format::GeminiStreamJson, include_str!("../../fixtures/gemini-banner.jsonl")),
        ];
        for (format, text) in fixtures {
            let mut whole = Parser::new(*format);
            let expected: Vec<Event> = text.lines().flat_map(|l| whole.feed(l.as_bytes())).collect();
            let mut got = Vec::new();
            let mut snapshot = Parser::new(*format).snapshot();
            for line in text.lines() {
                let mut p = Parser::resume(*format, &snapshot);
                got.extend(p.feed(line.as_bytes()));
                snapshot = p.snapshot();
            }
            assert_eq!(got, expected, "{format:?}");
        }
        // A snapshot it cannot read starts afresh.
        assert_eq!(
            Parser::resume(Format::ClaudeStreamJson, "not json").snapshot(),
            Parser::new(Format::ClaudeStreamJson).snapshot()
        );
    }

    #[test]
    fn format_names() {
        for f in Format::ALL {
            assert_eq!(Format::parse(f.as_str()), Some(f));
            assert_eq!(serde_json::to_value(f).unwrap(), json!(f.as_str()));
        }
        assert_eq!(Format::parse("claude"), None);
    }

    #[test]
    fn odd_lines_never_panic() {
        let lines: &[&[u8]] = &[
            b"",
            b"   \t",
            b"\r",
            b"[1,2,3]",
            b"42",
            b"\"type\"",
            b"null",
            b"{\"type\": 7}",
            b"{\"type\": \"assistant\", \"message\": 7}",
            b"{\"type\": \"assistant\", \"message\": {\"content\": \"text\"}}",
            b"{\"type\": \"assistant\", \"message\": {\"content\": [1, null, {\"type\": 3}, {\"type\": \"tool_use\", \"input\": []}]}}",
            b"{\"type\": \"user\", \"message\": {\"content\": [{\"type\": \"tool_result\", \"content\": {\"a\": 1}, \"is_error\": \"yes\"}]}}",
            b"{\"type\": \"result\", \"usage\": [], \"num_turns\": \"2\", \"total_cost_usd\": \"1\"}",
            b"{\"type\": \"rate_limit_event\", \"rate_limit_info\": {\"unifiedWindows\": {\"x\": 3}, \"utilization\": \"9\"}}",
            b"{\"type\": \"rate_limit_event\", \"rate_limit_info\": {\"utilization\": 1e308, \"resetsAt\": -1}}",
            b"{\"type\": \"item.completed\", \"item\": {\"type\": \"command_execution\", \"id\": 5}}",
            b"{\"type\": \"item.completed\", \"item\": {\"type\": \"file_change\", \"changes\": [3, {\"path\": 4}]}}",
            b"{\"type\": \"turn.completed\", \"usage\": {\"input_tokens\": -5}}",
            b"{\"type\": \"request_user_input\", \"questions\": \"why\"}",
            b"{\"type\": \"tool_use\", \"parameters\": 1}",
            b"{\"type\": \"tool_result\", \"status\": 1, \"error\": \"x\"}",
            b"{\"type\": \"message\", \"role\": \"assistant\", \"content\": [1]}",
            b"{\"type\": \"result\", \"stats\": null}",
            b"\xff\xfe{\"type\":\"init\"}",
            b"{\"type\":\"system\",\"subtype\":\"init\",\"model\":\"\xff\"}",
            b"{\"a\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
        ];
        for format in Format::ALL {
            let mut p = Parser::new(format);
            for line in lines {
                for e in p.feed(line) {
                    assert!(e.data.is_object(), "{format}: {e:?}");
                    let want = if e.kind == EventType::TestResult { "parsed" } else { "agent" };
                    assert_eq!(e.data["source"], want, "{format}: {e:?}");
                }
            }
        }
    }

    #[test]
    fn blank_lines_make_nothing_and_non_json_is_unknown() {
        for format in [Format::ClaudeStreamJson, Format::CodexJsonl, Format::GeminiStreamJson] {
            let mut p = Parser::new(format);
            assert_eq!(p.feed(b""), vec![]);
            assert_eq!(p.feed(b"  \r"), vec![]);
            for line in
                [&b"[1,2]"[..], b"42", b"{\"no_type\": 1}", b"{\"type\": \"from.the.future\"}", b"Error: boom\r"]
            {
                let out = p.feed(line);
                assert_eq!(out.len(), 1, "{format} {line:?}");
                assert_eq!(out[0].kind, EventType::HarnessUnknown);
                assert_eq!(
                    out[0].data["raw"],
                    String::from_utf8_lossy(line.strip_suffix(b"\r").unwrap_or(line)).as_ref()
                );
            }
        }
    }

    #[test]
    fn non_utf8_lines_are_lossy() {
        let mut p = Parser::new(Format::ClaudeStreamJson);
        let out = p.feed(b"caf\xe9 \xff\xfe");
        assert_eq!(out[0].data["raw"], "caf\u{fffd} \u{fffd}\u{fffd}");
    }

    #[test]
    fn long_unknown_lines_are_cut_on_a_char_boundary() {
        let line = "é".repeat(3000); // 6000 bytes
        let out = Parser::new(Format::CodexJsonl).feed(line.as_bytes());
        let raw = out[0].data["raw"].as_str().unwrap();
        assert_eq!(raw.len(), 4096);
        assert_eq!(out[0].data["truncated"], true);
        let short = Parser::new(Format::CodexJsonl).feed(b"plain");
        assert_eq!(short[0].data, json!({"raw": "plain", "source": "agent"}));
    }

    #[test]
    fn text_format_makes_no_events() {
        let mut p = Parser::new(Format::Text);
        assert!(p.feed(b"{\"type\": \"result\"}").is_empty());
        assert!(p.feed(b"hello").is_empty());
    }

    #[test]
    fn long_messages_are_cut() {
        let m = message(&"ü".repeat(2000), false);
        assert_eq!(m.data["text"].as_str().unwrap().len(), 2048);
        assert_eq!(m.data["truncated"], true);
    }

    #[test]
    fn forgets_tool_calls_that_never_end() {
        let mut s = State::default();
        let mut out = Vec::new();
        for i in 0..(MAX_TOOLS + 10) {
            s.tool_start(
                ToolStart { id: Some(format!("t{i}")), name: "Bash".into(), ..ToolStart::default() },
                &mut out,
            );
        }
        assert_eq!(s.tools.len(), MAX_TOOLS);
        assert!(!s.started("t0"));
        assert!(s.started(&format!("t{}", MAX_TOOLS + 9)));
    }
}
