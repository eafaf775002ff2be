//! Claude Code: `claude -p --output-format stream-json --verbose`.
//!
//! One JSON object per line, tagged by `type` (and `subtype` for `system`). Field sets change
//! between CLI versions, so every field is read defensively. Quirks this parser knows:
//! - `system/init` comes once per turn, hooks' lines may come before it;
//! - API errors come as `result` with `subtype: "success"` and `is_error: true`, after a synthetic
//!   assistant line (`model: "<synthetic>"`) whose text is the error;
//! - `rate_limit_event`'s `utilization` is a fraction and `resetsAt` is in Unix seconds;
//! - per-message `usage` repeats on every content line of a message, so only `result`'s totals
//!   become `usage` events;
//! - a subagent's lines (the `Agent` tool, `Task` before 2.1.3xx) carry `parent_tool_use_id`, the
//!   call that started it: its tool calls, results and messages say it as `parent_tool_id`.

use serde_json::{Map, Value};

use super::{error, final_text, message, num_at, obj_at, output_text, str_at, str_val, State, ToolStart};
use crate::event::{obj, Event, EventType};

/// The events of one decoded line of type `kind`; false if the type is not Claude's.
pub(super) fn feed(state: &mut State, kind: &str, o: &Map<String, Value>, out: &mut Vec<Event>) -> bool {
    match kind {
        "system" => system(state, o, out),
        "assistant" | "user" => {
            let from = out.len();
            if kind == "assistant" {
                assistant(state, o, out);
            } else {
                user(state, o, out);
            }
            // A subagent's (the `Agent` tool's) own lines name the call that started it.
            if let Some(parent) = str_at(o, "parent_tool_use_id") {
                for e in &mut out[from..] {
                    if matches!(
                        e.kind,
                        EventType::ToolStart | EventType::ToolEnd | EventType::Message | EventType::TestResult
                    ) {
                        if let Value::Object(d) = &mut e.data {
                            d.insert("parent_tool_id".into(), Value::from(parent));
                        }
                    }
                }
            }
        }
        "rate_limit_event" => rate_limit(state, o, out),
        "result" => result(state, o, out),
        // Control lines of `--input-format stream-json`: nothing for a watcher.
        "control_request" | "control_response" | "control_cancel_request" | "conversation_reset" => {}
        // Known, and no event: a waiting call's heartbeat (every 30 s while a hook or a long tool
        // runs; the call's `tool.start` already says it is under way), and what the CLI writes for
        // other clients (summaries and suggestions; `stream_event` needs
        // `--include-partial-messages`, which no profile passes).
        "tool_progress" | "tool_use_summary" | "prompt_suggestion" | "post_turn_summary" | "stream_event" => {}
        "auth_status" => {
            if let Some(e) = str_at(o, "error").filter(|e| !e.is_empty()) {
                out.push(error("auth", e, false));
            }
        }
        _ => return false,
    }
    true
}

fn system(state: &mut State, o: &Map<String, Value>, out: &mut Vec<Event>) {
    match str_at(o, "subtype") {
        Some("init") => {
            // Each turn begins with an init: its phases are new.
            state.end_turn();
            out.push(Event::agent(
                EventType::RunStarted,
                obj! {
                    "session_id" => str_val(o, "session_id"),
                    "model" => str_val(o, "model"),
                    "cwd" => str_val(o, "cwd"),
                    "harness_version" => str_val(o, "claude_code_version"),
                },
            ));
        }
        Some("api_retry") => {
            // The retry's fields are not documented: say what is there.
            let mut parts = vec!["API request failed; retrying".to_string()];
            for key in ["error", "error_status", "attempt", "max_retries", "retry_delay_ms"] {
                match o.get(key) {
                    Some(Value::String(s)) => parts.push(format!("{key}: {s}")),
                    Some(v @ Value::Number(_)) => parts.push(format!("{key}: {v}")),
                    _ => {}
                }
            }
            out.push(error("api_retry", &parts.join("; "), true));
        }
        // A denied tool call is not a question to answer: the CLI has already said no.
        Some("permission_denied") => {
            out.push(error("permission_denied", str_at(o, "message").unwrap_or("permission denied"), false))
        }
        _ => {}
    }
}

fn assistant(state: &mut State, o: &Map<String, Value>, out: &mut Vec<Event>) {
    let Some(msg) = obj_at(o, "message") else { return };
    let synthetic = str_at(msg, "model") == Some("<synthetic>");
    let Some(blocks) = msg.get("content").and_then(Value::as_array) else { return };
    for block in blocks.iter().filter_map(Value::as_object) {
        match str_at(block, "type") {
            Some("text") => {
                let text = str_at(block, "text").unwrap_or_default();
                if synthetic {
                    let status = api_status(text);
                    let code = match status {
                        Some(s) => status_code(s),
                        None if state.rejected => "rate_limited".into(),
                        None => "api_error".into(),
                    };
                    out.push(error(&code, text, status.is_some_and(retryable) || state.rejected));
                } else if !text.is_empty() {
                    out.push(message(text, false));
                }
            }
            Some("tool_use") => {
                let name = str_at(block, "name").unwrap_or_default().to_string();
                let id = str_at(block, "id").map(String::from);
                state.tool_start(ToolStart::of_call(id, name, obj_at(block, "input"), "Bash"), out);
            }
            Some("thinking" | "redacted_thinking") => state.phase("thinking", out),
            _ => {}
        }
    }
}

fn user(state: &mut State, o: &Map<String, Value>, out: &mut Vec<Event>) {
    let Some(blocks) = obj_at(o, "message").and_then(|m| m.get("content")).and_then(Value::as_array) else { return };
    let results: Vec<&Map<String, Value>> =
        blocks.iter().filter_map(Value::as_object).filter(|b| str_at(b, "type") == Some("tool_result")).collect();
    // The top-level `tool_use_result` belongs to the line's one tool result.
    let extra = if results.len() == 1 { obj_at(o, "tool_use_result") } else { None };
    for block in results {
        let mut output = output_text(block.get("content").unwrap_or(&Value::Null));
        if output.trim().is_empty() {
            if let Some(stdout) = extra.and_then(|e| str_at(e, "stdout")) {
                output = stdout.to_string();
            }
        }
        let ok = block.get("is_error").and_then(Value::as_bool) != Some(true);
        let duration = extra.and_then(|e| e.get("durationMs").or_else(|| e.get("duration_ms")));
        state.tool_end(str_at(block, "tool_use_id"), ok, &output, duration, out);
    }
}

fn rate_limit(state: &mut State, o: &Map<String, Value>, out: &mut Vec<Event>) {
    let info = obj_at(o, "rate_limit_info").unwrap_or(o);
    let status = str_val(info, "status");
    state.rejected = status == "rejected";
    let raw = Value::Object(info.clone());
    let primary = str_at(info, "rateLimitType");
    let mut windows: Vec<(Option<&str>, &Map<String, Value>)> = Vec::new();
    if let Some(unified) = obj_at(info, "unifiedWindows") {
        for (name, w) in unified {
            if let Some(w) = w.as_object() {
                windows.push((Some(name), w));
            }
        }
    }
    // The primary window comes first, from the top-level fields if the list lacks it.
    match windows.iter().position(|(name, _)| primary.is_some() && *name == primary) {
        Some(i) => {
            let w = windows.remove(i);
            windows.insert(0, w);
        }
        None if primary.is_some() || windows.is_empty() => windows.insert(0, (primary, info)),
        None => {}
    }
    for (window, w) in windows {
        out.push(Event::agent(
            EventType::RateLimit,
            obj! {
                "window" => window,
                "used_pct" => used_pct(w),
                "status" => status.clone(),
                "resets_at" => resets_at(w),
                "raw" => raw.clone(),
            },
        ));
    }
}

/// Percent used, 0 to 100: `utilization` is a fraction (a value over 1 is taken as a percent
/// already), `used_percentage` and `used_pct` are percents. Rounded to hundredths, since 0.57 × 100
/// is 56.99999999999999 in floating point.
fn used_pct(w: &Map<String, Value>) -> Value {
    let pct = if let Some(u) = w.get("utilization").and_then(Value::as_f64) {
        if u <= 1.0 {
            u * 100.0
        } else {
            u
        }
    } else if let Some(p) = w.get("used_percentage").or_else(|| w.get("used_pct")).and_then(Value::as_f64) {
        p
    } else {
        return Value::Null;
    };
    let pct = (pct * 100.0).round() / 100.0;
    serde_json::Number::from_f64(pct).map(Value::Number).unwrap_or(Value::Null)
}

/// When the window resets, in Unix seconds.
fn resets_at(w: &Map<String, Value>) -> Value {
    w.get("resetsAt").or_else(|| w.get("resets_at")).filter(|v| v.is_number()).cloned().unwrap_or(Value::Null)
}

fn result(state: &mut State, o: &Map<String, Value>, out: &mut Vec<Event>) {
    let usage = obj_at(o, "usage");
    let cost = num_at(o, "total_cost_usd");
    let turns = num_at(o, "num_turns");
    if usage.is_some() || !cost.is_null() {
        let empty = Map::new();
        let u = usage.unwrap_or(&empty);
        let mut data = obj! {
            "input_tokens" => num_at(u, "input_tokens"),
            "output_tokens" => num_at(u, "output_tokens"),
            "cache_read_tokens" => num_at(u, "cache_read_input_tokens"),
        };
        if !cost.is_null() {
            data.insert("cost_usd".into(), cost.clone());
        }
        if !turns.is_null() {
            data.insert("turns".into(), turns.clone());
        }
        out.push(Event::agent(EventType::Usage, data));
    }
    let is_error = o.get("is_error").and_then(Value::as_bool) == Some(true);
    let subtype = str_at(o, "subtype");
    let status = o.get("api_error_status").and_then(Value::as_u64);
    if is_error {
        let code = match (status, subtype) {
            (Some(s), _) => status_code(s),
            (None, Some(sub)) if sub != "success" => sub.to_string(),
            _ => "api_error".to_string(),
        };
        let text = match str_at(o, "result") {
            Some(r) if !r.is_empty() => r.to_string(),
            _ => errors_text(o).unwrap_or_else(|| subtype.unwrap_or("error").to_string()),
        };
        out.push(error(&code, &text, status.is_some_and(retryable)));
    }
    let mut data = obj! {
        "ok" => !is_error && subtype == Some("success"),
        "subtype" => subtype,
        "num_turns" => turns,
        "duration_ms" => num_at(o, "duration_ms"),
        "cost_usd" => cost,
        "final_text" => final_text(str_at(o, "result")),
    };
    for key in ["api_error_status", "terminal_reason"] {
        if let Some(v) = o.get(key).filter(|v| !v.is_null()) {
            data.insert(key.into(), v.clone());
        }
    }
    out.push(Event::agent(EventType::RunResult, data));
    state.end_turn();
}

/// `errors` (a list of strings) as one text.
fn errors_text(o: &Map<String, Value>) -> Option<String> {
    let errors: Vec<&str> = o.get("errors")?.as_array()?.iter().filter_map(Value::as_str).collect();
    (!errors.is_empty()).then(|| errors.join("; "))
}

/// The HTTP status in a synthetic `API Error: 500 {...}` text.
fn api_status(text: &str) -> Option<u64> {
    let rest = text.trim_start().strip_prefix("API Error: ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// An error code for an HTTP status: `rate_limited` for 429, else `api_error_<status>`.
fn status_code(status: u64) -> String {
    if status == 429 {
        "rate_limited".into()
    } else {
        format!("api_error_{status}")
    }
}

/// Whether the same request may succeed later: timeouts, rate limits, overload and server errors.
fn retryable(status: u64) -> bool {
    matches!(status, 408 | 429 | 500..=599)
}

#[cfg(test)]
mod tests {
    use super::super::{Format, Parser};
    use crate::event::Event;
    use crate::event::EventType::{self, *};
    use serde_json::json;

    pub(crate) fn run(fixture: &str) -> Vec<Event> {
        let mut p = Parser::new(Format::ClaudeStreamJson);
        fixture.lines().flat_map(|l| p.feed(l.as_bytes())).collect()
    }

    fn kinds(events: &[Event]) -> Vec<EventType> {
        events.iter().map(|e| e.kind).collect()
    }

    fn of(events: &[Event], kind: EventType) -> Vec<&serde_json::Value> {
        events.iter().filter(|e| e.kind == kind).map(|e| &e.data).collect()
    }

    #[test]
    fn executor_capture() {
        let ev = run(include_str!("../../fixtures/claude-stream-json-executor.jsonl"));
        assert_eq!(
            kinds(&ev),
            [HarnessUnknown, RunStarted, Message, ToolStart, ToolEnd, RateLimit, RateLimit, Usage, RunResult]
        );
        assert!(ev[0].data["raw"].as_str().unwrap().starts_with("{\"shipyard_fixture\""));
        assert_eq!(
            ev[1].data,
            json!({"session_id": "<SESSION-3>", "model": "claude-sonnet-5", "cwd": "<TMP>", "harness_version": "2.1.283", "source": "agent"})
        );
        assert_eq!(ev[2].data["text"], "OK");
        assert_eq!(ev[3].data["name"], "StructuredOutput");
        assert_eq!(ev[4].data["name"], "StructuredOutput");
        assert_eq!(ev[4].data["ok"], true);
        assert_eq!(ev[4].data["summary"], "Structured output provided successfully");
        assert_eq!(
            (&ev[5].data["window"], &ev[5].data["used_pct"], &ev[5].data["status"], &ev[5].data["resets_at"]),
            (&json!("seven_day"), &json!(57.0), &json!("allowed_warning"), &json!(1790884800))
        );
        assert_eq!((&ev[6].data["window"], &ev[6].data["used_pct"]), (&json!("five_hour"), &json!(70.0)));
        assert_eq!(ev[6].data["raw"]["rateLimitType"], "seven_day");
        assert_eq!(
            ev[7].data,
            json!({"input_tokens": 2, "output_tokens": 113, "cache_read_tokens": 12743, "cost_usd": 0.0178546, "turns": 2, "source": "agent"})
        );
        assert_eq!(ev[8].data["ok"], true);
        assert_eq!(ev[8].data["terminal_reason"], "completed");
        assert!(ev[8].data.get("api_error_status").is_none());
    }

    #[test]
    fn long_turn() {
        let ev = run(include_str!("../../fixtures/claude-long-turn.jsonl"));
        let starts: Vec<_> = of(&ev, ToolStart).iter().map(|d| d["name"].as_str().unwrap().to_string()).collect();
        assert_eq!(starts, ["Read", "Grep", "Glob", "Read", "Edit", "Bash", "Edit", "Bash", "Bash", "Bash"]);
        let phases: Vec<_> = of(&ev, Phase).iter().map(|d| d["phase"].as_str().unwrap().to_string()).collect();
        assert_eq!(
            phases,
            [
                "thinking",
                "reading",
                "searching",
                "reading",
                "editing",
                "running_tests",
                "editing",
                "running_tests",
                "git"
            ]
        );
        let tests = of(&ev, TestResult);
        assert_eq!(tests.len(), 3);
        assert_eq!(
            (&tests[0]["failed"], &tests[0]["passed"], &tests[0]["skipped"]),
            (&json!(3), &json!(210), &json!(2))
        );
        assert_eq!(tests[0]["command"], "uv run pytest -q tests/");
        assert_eq!((&tests[1]["failed"], &tests[1]["passed"]), (&json!(null), &json!(213)));
        assert_eq!(
            (&tests[2]["framework"], &tests[2]["passed"], &tests[2]["skipped"]),
            (&json!("cargo"), &json!(14), &json!(1))
        );
        let ends = of(&ev, ToolEnd);
        assert_eq!(ends[5]["ok"], false, "pytest exited 1");
        assert_eq!(of(&ev, HarnessUnknown).len(), 1, "the stderr line");
        let usage = of(&ev, Usage);
        assert_eq!(usage.len(), 1, "only the result's totals");
        assert_eq!(usage[0]["input_tokens"], 48);
        assert_eq!(of(&ev, RunResult)[0]["ok"], true);
        assert_eq!(of(&ev, Message).len(), 3);
    }

    #[test]
    fn api_error() {
        let ev = run(include_str!("../../fixtures/claude-api-error.jsonl"));
        assert_eq!(kinds(&ev), [RunStarted, Error, Usage, Error, RunResult]);
        assert_eq!(ev[1].data["code"], "api_error_500");
        assert_eq!(ev[1].data["retryable"], true);
        assert!(ev[1].data["message"].as_str().unwrap().starts_with("API Error: 500"));
        assert_eq!((&ev[3].data["code"], &ev[3].data["retryable"]), (&json!("api_error_500"), &json!(true)));
        assert_eq!((&ev[4].data["ok"], &ev[4].data["subtype"]), (&json!(false), &json!("success")));
        assert_eq!(ev[4].data["api_error_status"], 500);
    }

    #[test]
    fn rate_limit_rejected() {
        let ev = run(include_str!("../../fixtures/claude-rate-limit-rejected.jsonl"));
        assert_eq!(kinds(&ev), [RunStarted, RateLimit, RateLimit, Error, Usage, Error, RunResult]);
        assert_eq!(
            (&ev[1].data["window"], &ev[1].data["used_pct"], &ev[1].data["status"]),
            (&json!("five_hour"), &json!(100.0), &json!("rejected"))
        );
        assert_eq!((&ev[2].data["window"], &ev[2].data["used_pct"]), (&json!("seven_day"), &json!(91.0)));
        assert_eq!(ev[3].data["code"], "rate_limited");
        assert_eq!(ev[3].data["message"], "You've hit your limit · resets 3pm (UTC)");
        assert_eq!((&ev[5].data["code"], &ev[5].data["retryable"]), (&json!("rate_limited"), &json!(true)));
        assert_eq!(ev[6].data["ok"], false);
        assert_eq!(ev[6].data["api_error_status"], 429);
    }

    #[test]
    fn resume_missing() {
        let ev = run(include_str!("../../fixtures/claude-resume-missing.jsonl"));
        assert_eq!(kinds(&ev), [Usage, Error, RunResult]);
        assert_eq!(ev[1].data["code"], "error_during_execution");
        assert!(ev[1].data["message"].as_str().unwrap().starts_with("No conversation found"));
        assert_eq!(ev[1].data["retryable"], false);
        assert_eq!((&ev[2].data["ok"], &ev[2].data["final_text"]), (&json!(false), &json!(null)));
    }

    /// A subagent's lines (2.1.337's shapes, cut down) name the `Agent` call that started it; the
    /// main agent's do not.
    #[test]
    fn a_subagents_calls_name_its_parent() {
        let ev = run(concat!(
            r#"{"type":"assistant","message":{"content":[{"id":"t1","input":{"description":"look around","prompt":"Read the notes."},"name":"Agent","type":"tool_use"}]},"parent_tool_use_id":null}"#,
            "\n",
            r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"Read the notes."}]},"parent_tool_use_id":"t1"}"#,
            "\n",
            r#"{"type":"assistant","message":{"content":[{"id":"t2","input":{"command":"pwd"},"name":"Bash","type":"tool_use"}]},"parent_tool_use_id":"t1"}"#,
            "\n",
            r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"t2","type":"tool_result","content":"/w"}]},"parent_tool_use_id":"t1"}"#,
            "\n",
            r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"t1","type":"tool_result","content":"found it"}]},"parent_tool_use_id":null}"#,
        ));
        let got: Vec<(EventType, serde_json::Value, serde_json::Value)> =
            ev.iter().map(|e| (e.kind, e.get("tool_id").clone(), e.get("parent_tool_id").clone())).collect();
        assert_eq!(
            got,
            [
                (ToolStart, json!("t1"), json!(null)),
                (ToolStart, json!("t2"), json!("t1")),
                (Phase, json!(null), json!(null)),
                (ToolEnd, json!("t2"), json!("t1")),
                (ToolEnd, json!("t1"), json!(null)),
            ]
        );
    }

    /// Lines Claude Code 2.1.337 writes that make no event (their shapes as its source writes
    /// them), and an `auth_status` that failed.
    #[test]
    fn heartbeats_and_summaries_make_no_event() {
        let ev = run(concat!(
            r#"{"type":"tool_progress","tool_use_id":"t1","tool_name":"Bash","parent_tool_use_id":null,"elapsed_time_seconds":30,"heartbeat":true,"session_id":"s","uuid":"u"}"#,
            "\n",
            r#"{"type":"tool_use_summary","summary":"ran tests","preceding_tool_use_ids":["t1"],"uuid":"u","session_id":"s"}"#,
            "\n",
            r#"{"type":"prompt_suggestion","suggestion":"run it again","uuid":"u","session_id":"s"}"#,
            "\n",
            r#"{"type":"post_turn_summary","summarizes_uuid":"","status_category":"done","status_detail":"","needs_action":false}"#,
            "\n",
            r#"{"type":"stream_event","event":{"type":"message_start"},"session_id":"s","uuid":"u"}"#,
            "\n",
            r#"{"type":"auth_status","isAuthenticating":false,"output":[],"uuid":"u","session_id":"s"}"#,
            "\n",
            r#"{"type":"auth_status","isAuthenticating":false,"output":[],"error":"Invalid API key","uuid":"u","session_id":"s"}"#,
        ));
        assert_eq!(kinds(&ev), [Error]);
        assert_eq!(
            ev[0].data,
            json!({"code": "auth", "message": "Invalid API key", "retryable": false, "source": "agent"})
        );
    }

    #[test]
    fn system_lines() {
        let ev = run(concat!(
            r#"{"type":"system","subtype":"hook_started","session_id":"s"}"#,
            "\n",
            r#"{"type":"system","subtype":"compact_boundary"}"#,
            "\n",
            r#"{"type":"system","subtype":"api_retry","attempt":2,"max_retries":10,"error":"overloaded"}"#,
            "\n",
            r#"{"type":"system","subtype":"permission_denied","message":"Bash(rm -rf /) was denied"}"#,
            "\n",
            r#"{"type":"control_request","request":{}}"#,
            "\n",
            r#"{"subtype":"init","session_id":"s2","type":"system"}"#,
        ));
        assert_eq!(kinds(&ev), [Error, Error, RunStarted]);
        assert_eq!(
            ev[0].data,
            json!({"code": "api_retry", "message": "API request failed; retrying; error: overloaded; attempt: 2; max_retries: 10", "retryable": true, "source": "agent"})
        );
        assert_eq!(
            ev[1].data,
            json!({"code": "permission_denied", "message": "Bash(rm -rf /) was denied", "retryable": false, "source": "agent"})
        );
        assert_eq!((&ev[2].data["session_id"], &ev[2].data["model"]), (&json!("s2"), &json!(null)));
    }

    #[test]
    fn tool_result_from_tool_use_result_and_unknown_ids() {
        let ev = run(concat!(
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"cargo test"}}]}}"#,
            "\n",
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":[]}]},"tool_use_result":{"stdout":"test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s","stderr":""}}"#,
            "\n",
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"nope","content":"x","is_error":true}]}}"#,
            "\n",
            r#"{"type":"user","message":{"content":"a plain prompt"}}"#,
        ));
        assert_eq!(kinds(&ev), [ToolStart, Phase, ToolEnd, TestResult, ToolEnd]);
        assert_eq!(ev[3].data["passed"], 1);
        assert_eq!(
            ev[4].data,
            json!({"tool_id": "nope", "name": null, "ok": false, "summary": "x", "source": "agent"})
        );
    }

    #[test]
    fn rate_limit_fields_are_read_defensively() {
        let ev = run(concat!(
            r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","rateLimitType":"five_hour","used_percentage":42.5,"resets_at":1}}"#,
            "\n",
            r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","utilization":91}}"#,
            "\n",
            r#"{"type":"rate_limit_event"}"#,
        ));
        assert_eq!(kinds(&ev), [RateLimit, RateLimit, RateLimit]);
        assert_eq!((&ev[0].data["used_pct"], &ev[0].data["resets_at"]), (&json!(42.5), &json!(1)));
        assert_eq!((&ev[1].data["window"], &ev[1].data["used_pct"]), (&json!(null), &json!(91.0)));
        assert_eq!((&ev[2].data["status"], &ev[2].data["used_pct"]), (&json!(null), &json!(null)));
    }
}
