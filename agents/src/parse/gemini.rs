//! Gemini CLI: `gemini -o stream-json`.
//!
//! One JSON object per line with `type` and `timestamp` (schema:
//! `packages/core/src/output/types.ts`): `init`, `message`, `tool_use`, `tool_result`, `error`,
//! `result`. The CLI prints banner lines on stderr before the JSON ("YOLO mode is enabled...");
//! they become `harness.unknown` like any line that is not JSON. The assistant's text arrives as
//! `delta` pieces: each is its own `message` with `delta: true`, and the pieces after the last tool
//! call, joined, are the `run.result`'s `final_text` (the CLI's `result` has none).

use serde_json::{Map, Value};

use super::{error, final_text, message, num_at, obj_at, output_text, str_at, str_val, State, ToolStart};
use crate::event::{obj, Event, EventType};

/// The events of one decoded line of type `kind`; false if the type is not Gemini's.
pub(super) fn feed(state: &mut State, kind: &str, o: &Map<String, Value>, out: &mut Vec<Event>) -> bool {
    match kind {
        "init" => {
            state.end_turn();
            out.push(Event::agent(
                EventType::RunStarted,
                obj! {
                    "session_id" => str_val(o, "session_id"),
                    "model" => str_val(o, "model"),
                    "cwd" => str_val(o, "cwd"),
                    "harness_version" => str_val(o, "version"),
                },
            ));
        }
        "message" => {
            // The user's own prompt, echoed: nothing new.
            if str_at(o, "role") != Some("assistant") {
                return true;
            }
            let text = output_text(o.get("content").unwrap_or(&Value::Null));
            if text.is_empty() {
                return true;
            }
            let delta = o.get("delta").and_then(Value::as_bool) == Some(true);
            out.push(message(&text, delta));
            state.reply(&text, !delta);
        }
        "tool_use" => {
            let name = str_at(o, "tool_name").unwrap_or_default().to_string();
            let id = str_at(o, "tool_id").map(String::from);
            state.tool_start(ToolStart::of_call(id, name, obj_at(o, "parameters"), "run_shell_command"), out);
        }
        "tool_result" => {
            let ok = str_at(o, "status") == Some("success");
            let mut output = output_text(o.get("output").unwrap_or(&Value::Null));
            if output.is_empty() {
                if let Some(m) = obj_at(o, "error").and_then(|e| str_at(e, "message")) {
                    output = m.to_string();
                }
            }
            state.tool_end(str_at(o, "tool_id"), ok, &output, o.get("duration_ms"), out);
        }
        "error" => {
            let warning = str_at(o, "severity") == Some("warning");
            let msg = str_at(o, "message").unwrap_or("error");
            out.push(error(if warning { "warning" } else { "error" }, msg, warning));
        }
        "result" => {
            let status = str_at(o, "status");
            if let Some(stats) = obj_at(o, "stats") {
                out.push(Event::agent(
                    EventType::Usage,
                    obj! {
                        "input_tokens" => num_at(stats, "input_tokens"),
                        "output_tokens" => num_at(stats, "output_tokens"),
                        "cache_read_tokens" => num_at(stats, "cached"),
                    },
                ));
            }
            if let Some(e) = obj_at(o, "error").filter(|_| status != Some("success")) {
                out.push(error(str_at(e, "type").unwrap_or("error"), str_at(e, "message").unwrap_or("error"), false));
            }
            let reply = (!state.reply.is_empty()).then_some(state.reply.as_str());
            out.push(Event::agent(
                EventType::RunResult,
                obj! {
                    "ok" => status == Some("success"),
                    "subtype" => status,
                    "num_turns" => None::<u64>,
                    "duration_ms" => obj_at(o, "stats").map(|s| num_at(s, "duration_ms")).unwrap_or(Value::Null),
                    "cost_usd" => None::<f64>,
                    "final_text" => final_text(reply),
                },
            ));
            state.end_turn();
        }
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::super::{Format, Parser};
    use crate::event::Event;
    use crate::event::EventType::{self, *};
    use serde_json::json;

    fn run(fixture: &str) -> Vec<Event> {
        let mut p = Parser::new(Format::GeminiStreamJson);
        fixture.lines().flat_map(|l| p.feed(l.as_bytes())).collect()
    }

    fn kinds(events: &[Event]) -> Vec<EventType> {
        events.iter().map(|e| e.kind).collect()
    }

    #[test]
    fn banner_and_go_test() {
        let ev = run(include_str!("../../fixtures/gemini-banner.jsonl"));
        assert_eq!(
            kinds(&ev),
            [
                HarnessUnknown,
                HarnessUnknown,
                RunStarted,
                Message,
                Message,
                ToolStart,
                Phase,
                ToolEnd,
                Message,
                ToolStart,
                Phase,
                ToolEnd,
                TestResult,
                Message,
                Message,
                Usage,
                RunResult
            ]
        );
        assert_eq!(ev[0].data["raw"], "YOLO mode is enabled. All tool calls will be automatically approved.");
        assert_eq!(ev[1].data["raw"], "Loaded cached credentials.");
        assert_eq!(
            (&ev[2].data["model"], &ev[2].data["session_id"]),
            (&json!("gemini-2.5-pro"), &json!("c0ffee00-1234-4d1e-9a7b-5f0e8c2d4a61"))
        );
        assert_eq!(ev[3].data["delta"], true);
        assert_eq!((&ev[5].data["name"], &ev[5].data["file"]), (&json!("read_file"), &json!("/work/x/parse/parse.go")));
        assert_eq!(ev[6].data["phase"], "reading");
        assert_eq!(ev[10].data["phase"], "running_tests");
        assert_eq!(ev[11].data["ok"], true);
        assert_eq!(
            ev[12].data,
            json!({"framework": "go", "passed": null, "failed": 1, "errors": 0, "skipped": null, "duration_s": 0.022,
                "command": "go test ./...", "source": "parsed"})
        );
        assert_eq!(
            ev[15].data,
            json!({"input_tokens": 18234, "output_tokens": 412, "cache_read_tokens": 9000, "source": "agent"})
        );
        assert_eq!(
            (&ev[16].data["ok"], &ev[16].data["duration_ms"], &ev[16].data["final_text"]),
            (
                &json!(true),
                &json!(15342),
                &json!("`go test` fails in `parse`: TestParse expects 2 but the parser returns 1.")
            )
        );
    }

    #[test]
    fn errors_and_failed_results() {
        let ev = run(concat!(
            r#"{"type":"message","role":"user","content":"hi"}"#,
            "\n",
            r#"{"type":"error","severity":"warning","message":"Retrying after 429"}"#,
            "\n",
            r#"{"type":"tool_use","tool_name":"write_file","tool_id":"w1","parameters":{"file_path":"/a.txt","content":"x"}}"#,
            "\n",
            r#"{"type":"tool_result","tool_id":"w1","status":"error","error":{"type":"permission","message":"denied"}}"#,
            "\n",
            r#"{"type":"error","severity":"error","message":"boom"}"#,
            "\n",
            r#"{"type":"result","status":"error","error":{"type":"FatalTurnLimitedError","message":"turn limit"}}"#,
        ));
        assert_eq!(kinds(&ev), [Error, ToolStart, Phase, ToolEnd, Error, Error, RunResult]);
        assert_eq!(ev[0].data["retryable"], true);
        assert_eq!((&ev[1].data["file"], &ev[2].data["phase"]), (&json!("/a.txt"), &json!("editing")));
        assert_eq!(
            (&ev[3].data["ok"], &ev[3].data["summary"], &ev[3].data["name"]),
            (&json!(false), &json!("denied"), &json!("write_file"))
        );
        assert_eq!(ev[4].data["retryable"], false);
        assert_eq!(ev[5].data["code"], "FatalTurnLimitedError");
        assert_eq!((&ev[6].data["ok"], &ev[6].data["subtype"]), (&json!(false), &json!("error")));
    }
}
