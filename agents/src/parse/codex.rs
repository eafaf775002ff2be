//! Codex: `codex exec --json`.
//!
//! One `ThreadEvent` per line, tagged by `type` (schema: `codex-rs/exec/src/exec_events.rs`).
//! Work happens in items (`item.started` / `item.updated` / `item.completed`, keyed by `item.id`).
//! Quirks this parser knows: items complete out of order (matched by id), an item may complete
//! with no start seen (its `tool.start` is made then) or start and never complete (nothing is made
//! for it), commands come wrapped in `/bin/bash -lc '...'`, and `error` lines can be transient.
//!
//! `turn.completed`'s `usage.input_tokens` is reported as is; OpenAI's convention is that it
//! includes `cached_input_tokens` (unverified for Codex).

use serde_json::{Map, Value};

use super::{error, final_text, message, num_at, obj_at, output_text, str_at, State, ToolStart};
use crate::cut;
use crate::event::{obj, Event, EventType};

/// The events of one decoded line of type `kind`; false if the type is not Codex's.
pub(super) fn feed(state: &mut State, kind: &str, o: &Map<String, Value>, out: &mut Vec<Event>) -> bool {
    match kind {
        "thread.started" => out.push(Event::agent(
            EventType::RunStarted,
            obj! {"session_id" => super::str_val(o, "thread_id"), "model" => None::<String>, "cwd" => None::<String>, "harness_version" => None::<String>},
        )),
        "turn.started" => state.end_turn(),
        "item.started" => {
            let Some(item) = obj_at(o, "item") else { return true };
            match str_at(item, "type") {
                Some("reasoning") => state.phase("thinking", out),
                Some(t) if is_tool(t) => {
                    if let Some(start) = tool_start(item) {
                        state.tool_start(start, out);
                    }
                }
                _ => {}
            }
        }
        "item.updated" => {}
        "item.completed" => return completed(state, o, out),
        "turn.completed" => {
            let empty = Map::new();
            let u = obj_at(o, "usage").unwrap_or(&empty);
            out.push(Event::agent(
                EventType::Usage,
                obj! {
                    "input_tokens" => num_at(u, "input_tokens"),
                    "output_tokens" => num_at(u, "output_tokens"),
                    "cache_read_tokens" => num_at(u, "cached_input_tokens"),
                },
            ));
            out.push(run_result(state, true));
            state.end_turn();
        }
        "turn.failed" => {
            let msg = obj_at(o, "error").and_then(|e| str_at(e, "message")).unwrap_or("turn failed");
            out.push(error("turn_failed", msg, false));
            out.push(run_result(state, false));
            state.end_turn();
        }
        "error" => {
            let msg = str_at(o, "message").unwrap_or("error");
            // "Reconnecting... 1/5": the CLI retries by itself.
            let transient = msg.starts_with("Reconnecting") || msg.contains("retrying");
            out.push(error(if transient { "reconnecting" } else { "error" }, msg, transient));
        }
        "request_user_input" => {
            let (prompt, options) = questions(o.get("questions"));
            out.push(Event::agent(
                EventType::InputRequested,
                obj! {"kind" => "question", "prompt" => prompt, "options" => options},
            ));
            state.phase("waiting", out);
        }
        _ => return false,
    }
    true
}

fn is_tool(item_type: &str) -> bool {
    matches!(item_type, "command_execution" | "file_change" | "mcp_tool_call" | "web_search")
}

fn completed(state: &mut State, o: &Map<String, Value>, out: &mut Vec<Event>) -> bool {
    let Some(item) = obj_at(o, "item") else { return true };
    match str_at(item, "type") {
        Some("agent_message") => {
            let text = str_at(item, "text").unwrap_or_default();
            if !text.is_empty() {
                out.push(message(text, false));
                // The turn's final text is its last agent message, as `--output-last-message` has it.
                state.reply(text, true);
            }
        }
        Some("reasoning") => state.phase("thinking", out),
        Some("todo_list" | "plan") => {}
        Some("error") => out.push(error("warning", str_at(item, "message").unwrap_or("error"), false)),
        Some(t) if is_tool(t) => {
            let id = str_at(item, "id");
            if !id.is_some_and(|id| state.started(id)) {
                if let Some(start) = tool_start(item) {
                    state.tool_start(start, out);
                }
            }
            let (ok, output) = tool_end(t, item);
            state.tool_end(id, ok, &output, item.get("duration_ms"), out);
        }
        _ => return false,
    }
    true
}

/// The `tool.start` of a tool item.
fn tool_start(item: &Map<String, Value>) -> Option<ToolStart> {
    let id = str_at(item, "id").map(String::from);
    let start = match str_at(item, "type")? {
        "command_execution" => {
            let command = str_at(item, "command").unwrap_or_default();
            ToolStart {
                id,
                name: "Bash".into(),
                summary: Some(super::tests::unwrap(command)),
                command: Some(command.to_string()),
                ..ToolStart::default()
            }
        }
        "file_change" => {
            let paths: Vec<String> = item
                .get("changes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| c.as_object().and_then(|c| str_at(c, "path")).map(String::from))
                .collect();
            ToolStart {
                id,
                name: "Edit".into(),
                summary: Some(paths.join(", ")),
                file: paths.first().cloned(),
                files: Some(paths),
                phase: Some("editing"),
                ..ToolStart::default()
            }
        }
        "mcp_tool_call" => {
            let server = str_at(item, "server").unwrap_or_default();
            let tool = str_at(item, "tool").unwrap_or_default();
            ToolStart {
                id,
                name: format!("{server}.{tool}"),
                summary: item.get("arguments").filter(|a| !a.is_null()).map(|a| match a {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                }),
                ..ToolStart::default()
            }
        }
        "web_search" => ToolStart {
            id,
            name: "WebSearch".into(),
            summary: str_at(item, "query").map(String::from),
            phase: Some("searching"),
            ..ToolStart::default()
        },
        _ => return None,
    };
    Some(start)
}

/// Whether a completed tool item succeeded, and its output.
fn tool_end(item_type: &str, item: &Map<String, Value>) -> (bool, String) {
    let status = str_at(item, "status");
    let failed = matches!(status, Some("failed" | "declined"));
    match item_type {
        "command_execution" => {
            let ok = match item.get("exit_code").and_then(Value::as_i64) {
                Some(code) => code == 0 && !failed,
                None => status == Some("completed"),
            };
            (ok, str_at(item, "aggregated_output").unwrap_or_default().to_string())
        }
        "file_change" => {
            let changes: Vec<String> = item
                .get("changes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_object)
                .map(|c| format!("{} {}", str_at(c, "kind").unwrap_or("change"), str_at(c, "path").unwrap_or("?")))
                .collect();
            (!failed, changes.join("\n"))
        }
        "mcp_tool_call" => {
            let err = item.get("error").filter(|e| !e.is_null());
            let output = match err {
                Some(e) => {
                    e.as_object().and_then(|e| str_at(e, "message")).map(String::from).unwrap_or_else(|| e.to_string())
                }
                None => match obj_at(item, "result") {
                    Some(r) => output_text(r.get("content").unwrap_or(&Value::Null)),
                    None => String::new(),
                },
            };
            (!failed && err.is_none(), output)
        }
        _ => (!failed, String::new()),
    }
}

fn run_result(state: &State, ok: bool) -> Event {
    let reply = (!state.reply.is_empty()).then_some(state.reply.as_str());
    Event::agent(
        EventType::RunResult,
        obj! {
            "ok" => ok,
            "subtype" => None::<String>,
            "num_turns" => None::<u64>,
            "duration_ms" => None::<u64>,
            "cost_usd" => None::<f64>,
            "final_text" => final_text(reply),
        },
    )
}

/// The prompt (every question's text, one a line) and the options (every option's label) of a
/// `request_user_input`, whose question fields are read defensively.
fn questions(v: Option<&Value>) -> (String, Value) {
    let list: Vec<&Value> = match v {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(other) => vec![other],
        None => vec![],
    };
    let mut prompts = Vec::new();
    let mut options = Vec::new();
    for q in list {
        match q {
            Value::String(s) => prompts.push(s.clone()),
            Value::Object(q) => {
                if let Some(t) = ["question", "text", "prompt", "header"].iter().find_map(|k| str_at(q, k)) {
                    prompts.push(t.to_string());
                }
                for o in q.get("options").and_then(Value::as_array).into_iter().flatten() {
                    match o {
                        Value::String(s) => options.push(Value::from(s.clone())),
                        Value::Object(o) => {
                            if let Some(l) = str_at(o, "label").or_else(|| str_at(o, "value")) {
                                options.push(Value::from(l));
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    let prompt = cut::bytes(&prompts.join("\n"), super::MAX_TEXT).0.to_string();
    (prompt, if options.is_empty() { Value::Null } else { Value::Array(options) })
}

#[cfg(test)]
mod tests {
    use super::super::{Format, Parser};
    use crate::event::Event;
    use crate::event::EventType::{self, *};
    use serde_json::json;

    fn run(fixture: &str) -> Vec<Event> {
        let mut p = Parser::new(Format::CodexJsonl);
        fixture.lines().flat_map(|l| p.feed(l.as_bytes())).collect()
    }

    fn kinds(events: &[Event]) -> Vec<EventType> {
        events.iter().map(|e| e.kind).collect()
    }

    #[test]
    fn minimal_capture() {
        let ev = run(include_str!("../../fixtures/codex-exec-json-minimal.jsonl"));
        assert_eq!(kinds(&ev), [HarnessUnknown, RunStarted, Message, Usage, RunResult]);
        assert_eq!(ev[1].data["session_id"], "<SESSION-1>");
        assert_eq!(
            ev[3].data,
            json!({"input_tokens": 20391, "output_tokens": 5, "cache_read_tokens": 6912, "source": "agent"})
        );
        assert_eq!((&ev[4].data["ok"], &ev[4].data["final_text"]), (&json!(true), &json!("OK")));
    }

    #[test]
    fn out_of_order() {
        let ev = run(include_str!("../../fixtures/codex-out-of-order.jsonl"));
        assert_eq!(
            kinds(&ev),
            [
                RunStarted, Phase, ToolStart, Phase, ToolStart, Phase, ToolStart, Phase, ToolEnd, TestResult, ToolEnd,
                ToolStart, Phase, ToolEnd, Error, Message, Usage, RunResult
            ]
        );
        let d = |i: usize| &ev[i].data;
        assert_eq!(d(1)["phase"], "thinking");
        assert_eq!((&d(2)["tool_id"], &d(2)["summary"]), (&json!("item_1"), &json!("rg -n parse_config src")));
        assert_eq!(d(3)["phase"], "running_command");
        assert_eq!(d(4)["summary"], "cargo test -p config");
        assert_eq!(d(5)["phase"], "running_tests");
        assert_eq!(d(6)["summary"], "sleep 600");
        // item_2 completes first, and is named from its start.
        assert_eq!((&d(8)["tool_id"], &d(8)["name"], &d(8)["ok"]), (&json!("item_2"), &json!("Bash"), &json!(true)));
        assert_eq!((&d(9)["passed"], &d(9)["failed"]), (&json!(12), &json!(0)));
        assert_eq!((&d(10)["tool_id"], &d(10)["ok"]), (&json!("item_1"), &json!(true)));
        // The file_change completed without a start: one is made.
        assert_eq!(
            (&d(11)["name"], &d(11)["file"], &d(11)["files"]),
            (&json!("Edit"), &json!("src/config.rs"), &json!(["src/config.rs", "src/lib.rs"]))
        );
        assert_eq!(d(12)["phase"], "editing");
        assert_eq!(d(13)["summary"], "update src/config.rs\nadd src/lib.rs");
        assert_eq!((&d(14)["code"], &d(14)["retryable"]), (&json!("reconnecting"), &json!(true)));
        assert_eq!(d(16)["input_tokens"], 51234);
        assert_eq!(d(17)["final_text"], ev[15].data["text"]);
        // item_3 never completed: no tool.end for it.
        assert!(!ev.iter().any(|e| e.kind == ToolEnd && e.data["tool_id"] == "item_3"));
    }

    #[test]
    fn turn_failed() {
        let ev = run(include_str!("../../fixtures/codex-turn-failed.jsonl"));
        assert_eq!(kinds(&ev), [RunStarted, Error, Error, RunResult]);
        assert_eq!(ev[1].data["retryable"], true);
        assert_eq!((&ev[2].data["code"], &ev[2].data["retryable"]), (&json!("turn_failed"), &json!(false)));
        assert_eq!((&ev[3].data["ok"], &ev[3].data["final_text"]), (&json!(false), &json!(null)));
    }

    #[test]
    fn items_of_every_kind() {
        let ev = run(concat!(
            r#"{"type":"item.started","item":{"id":"m","type":"mcp_tool_call","server":"gh","tool":"search","arguments":{"q":"x"},"status":"in_progress"}}"#,
            "\n",
            r#"{"type":"item.updated","item":{"id":"t","type":"todo_list","items":[]}}"#,
            "\n",
            r#"{"type":"item.completed","item":{"id":"m","type":"mcp_tool_call","server":"gh","tool":"search","error":{"message":"denied"},"status":"failed"}}"#,
            "\n",
            r#"{"type":"item.completed","item":{"id":"w","type":"web_search","query":"rust toml"}}"#,
            "\n",
            r#"{"type":"item.completed","item":{"id":"e","type":"error","message":"model fallback"}}"#,
            "\n",
            r#"{"type":"item.completed","item":{"id":"c","type":"command_execution","command":"false","aggregated_output":"","exit_code":1,"status":"failed"}}"#,
            "\n",
            r#"{"type":"item.completed","item":{"id":"z","type":"brand_new"}}"#,
            "\n",
            r#"{"type":"request_user_input","id":"r","call_id":"c","questions":[{"id":"q","header":"DB","question":"Which database?","options":[{"label":"Postgres","description":"d"},{"label":"SQLite"}]}]}"#,
        ));
        assert_eq!(
            kinds(&ev),
            [
                ToolStart,
                ToolEnd,
                ToolStart,
                Phase,
                ToolEnd,
                Error,
                ToolStart,
                Phase,
                ToolEnd,
                HarnessUnknown,
                InputRequested,
                Phase
            ]
        );
        assert_eq!((&ev[0].data["name"], &ev[0].data["summary"]), (&json!("gh.search"), &json!(r#"{"q":"x"}"#)));
        assert_eq!((&ev[1].data["ok"], &ev[1].data["summary"]), (&json!(false), &json!("denied")));
        assert_eq!(
            ev[5].data,
            json!({"code": "warning", "message": "model fallback", "retryable": false, "source": "agent"})
        );
        assert_eq!(ev[8].data["ok"], false);
        assert_eq!(
            ev[10].data,
            json!({"kind": "question", "prompt": "Which database?", "options": ["Postgres", "SQLite"], "source": "agent"})
        );
        assert_eq!(ev[11].data["phase"], "waiting");
    }
}
