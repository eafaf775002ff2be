//! Agent sessions: `hangar sessions`, `session start|prompt|cancel|show` and `events`
//! (`GET /api/sessions/{ref}/events/stream`, one readable line per event).
use std::io::Read;

use serde_json::{json, Value};

use crate::{
    args::{EventsArgs, SessionCmd, SessionStartArgs},
    client::{on_close, path, with_query, Error, Next, SseEvent},
    render::{self, ago_of, cell, clean, clip, s},
    Ctx,
};

pub async fn list(ctx: &Ctx) -> Result<i32, Error> {
    let v = ctx.client.get("/api/sessions").await?;
    ctx.print_as(&v, Some("sessions"), crate::id_of, |v, wide| table(v, render::now(), wide))
}

/// The sessions; `wide` adds the id, the last turn's reason and the cost.
pub fn table(v: &Value, now: f64, wide: bool) -> String {
    let rows: Vec<Vec<String>> = v["sessions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|x| {
            let mut row = vec![
                clean(s(x, "name")),
                render::state_cell(&x["state"]),
                cell(&x["harness"]),
                clean(s(x, "sandbox")),
                x["turns"].as_array().map_or(0, Vec::len).to_string(),
                x["summary"]["phase"].as_str().map(clean).unwrap_or_else(|| "-".into()),
                clean(s(x, "person")),
                ago_of(now, &x["created_at"]),
            ];
            if wide {
                let cost = render::usd(&x["summary"]["cost_usd"], 4).unwrap_or_else(|| "-".into());
                row.extend([clean(s(x, "id")), cell(&x["reason"]), cost]);
            }
            row
        })
        .collect();
    let mut headers = vec!["NAME", "STATE", "HARNESS", "SANDBOX", "TURNS", "PHASE", "PERSON", "CREATED"];
    if wide {
        headers.extend(["ID", "REASON", "COST"]);
    }
    render::table(&headers, &rows)
}

pub async fn run(ctx: &Ctx, cmd: SessionCmd) -> Result<i32, Error> {
    let v = match &cmd {
        SessionCmd::Start(a) => {
            let prompt = read_prompt(a.prompt.as_deref(), a.prompt_file.as_deref())?;
            ctx.client.post("/api/sessions", &start_body(a, prompt)).await?
        }
        SessionCmd::Prompt(a) => {
            let mut body = json!({ "prompt": a.text });
            if let Some(t) = a.timeout {
                body["timeout_minutes"] = json!(t);
            }
            ctx.client.post(&path(&["api", "sessions", &a.session, "turns"]), &body).await?
        }
        SessionCmd::Cancel(a) => ctx.client.post(&path(&["api", "sessions", &a.session, "cancel"]), &json!({})).await?,
        SessionCmd::Show(a) => {
            let v = ctx.client.get(&path(&["api", "sessions", &a.session])).await?;
            return ctx.print_as(&v, None, crate::id_of, |v, _| show(v, render::now()));
        }
        SessionCmd::Rm(a) => {
            ctx.client.delete(&path(&["api", "sessions", &a.session])).await?;
            if !ctx.json {
                render::line(&format!("removed session {}", clean(&a.session)))?;
            }
            return Ok(0);
        }
    };
    if ctx.json {
        render::json(&v)?;
        return Ok(0);
    }
    for w in v["warnings"].as_array().map(Vec::as_slice).unwrap_or_default() {
        note!("hangar: warning: {}", cell(w));
    }
    render::line(&headline(&v))?;
    Ok(0)
}

/// The prompt from `--prompt` or `--prompt-file` (`-`: standard input).
pub fn read_prompt(text: Option<&str>, file: Option<&str>) -> Result<String, Error> {
    match (text, file) {
        (Some(t), _) => Ok(t.to_string()),
        (None, Some("-")) => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).map_err(|e| Error::Input(format!("reading the prompt: {e}")))?;
            Ok(s)
        }
        (None, Some(f)) => {
            std::fs::read_to_string(f).map_err(|e| Error::Input(format!("reading the prompt from {f}: {e}")))
        }
        // clap requires one of the two.
        (None, None) => Err(Error::Input("a prompt is needed: --prompt TEXT or --prompt-file FILE".into())),
    }
}

pub fn start_body(a: &SessionStartArgs, prompt: String) -> Value {
    let mut b = json!({ "name": a.name, "sandbox": a.sandbox, "prompt": prompt });
    let optional = [("harness", &a.harness), ("cwd", &a.cwd), ("idempotency_key", &a.idempotency_key)];
    for (k, v) in optional {
        if let Some(v) = v {
            b[k] = json!(v);
        }
    }
    if let Some(t) = a.timeout {
        b["timeout_minutes"] = json!(t);
    }
    if !a.approvals.is_empty() {
        b["approvals"] = json!(a.approvals);
    }
    if !a.secrets.is_empty() {
        b["secrets"] = json!(a.secrets);
    }
    if a.sandbox_login {
        b["sandbox_login"] = json!(true);
    }
    b
}

/// `session fix-config (ses_…): turn 1 queued`
pub fn headline(v: &Value) -> String {
    let turn = v["turns"].as_array().and_then(|t| t.last()).cloned().unwrap_or(Value::Null);
    let replay = if v["idempotent_replay"] == true { " (an earlier request's, replayed)" } else { "" };
    format!(
        "session {} ({}): turn {} {}{replay}",
        clean(s(v, "name")),
        clean(s(v, "id")),
        cell(&turn["n"]),
        cell(&turn["state"])
    )
}

pub fn show(v: &Value, now: f64) -> String {
    let sum = &v["summary"];
    let state = match v["reason"].as_str() {
        Some(r) => format!("{} ({})", cell(&v["state"]), clean(r)),
        None => cell(&v["state"]),
    };
    let files: Vec<String> =
        sum["files_touched"].as_array().map(Vec::as_slice).unwrap_or_default().iter().map(cell).collect();
    let last_tool = match (sum["last_tool"].as_str(), sum["last_tool_summary"].as_str()) {
        (Some(t), Some(d)) => clip(&format!("{t}: {d}"), 100),
        (Some(t), None) => clean(t),
        _ => String::new(),
    };
    let mut out = render::fields(&[
        ("name", clean(s(v, "name"))),
        ("id", clean(s(v, "id"))),
        ("person", clean(s(v, "person"))),
        ("sandbox", clean(s(v, "sandbox"))),
        ("harness", clean(s(v, "harness"))),
        ("cwd", clean(s(v, "cwd"))),
        ("state", render::state(&state)),
        ("phase", sum["phase"].as_str().map(clean).unwrap_or_default()),
        ("last tool", last_tool),
        ("files", clip(&files.join(", "), 100)),
        ("tests", if sum["tests"].is_object() { tests(&sum["tests"]) } else { String::new() }),
        ("tokens", tokens(sum)),
        (
            "cost",
            render::usd(&sum["cost_usd"], 4).map(|c| format!("{c} (API-equivalent estimate)")).unwrap_or_default(),
        ),
        ("message", sum["last_message"].as_str().map(|m| clip(m, 100)).unwrap_or_default()),
        ("created", ago_of(now, &v["created_at"])),
    ]);
    let turns: Vec<Vec<String>> = v["turns"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|t| {
            vec![
                cell(&t["n"]),
                cell(&t["id"]),
                cell(&t["state"]),
                cell(&t["reason"]),
                ago_of(now, &t["created_at"]),
                clip(s(t, "prompt"), 50),
            ]
        })
        .collect();
    out.push('\n');
    out.push_str(&render::table(&["TURN", "ID", "STATE", "REASON", "CREATED", "PROMPT"], &turns));
    out
}

fn tests(t: &Value) -> String {
    let mut parts = vec![];
    for k in ["passed", "failed", "errors", "skipped"] {
        if let Some(n) = t[k].as_i64() {
            parts.push(format!("{n} {k}"));
        }
    }
    let took = t["duration_s"].as_f64().map(|d| format!(" in {d}s")).unwrap_or_default();
    format!("{}: {}{took}", cell(&t["framework"]), parts.join(", "))
}

fn tokens(d: &Value) -> String {
    let parts: Vec<String> = [("in", "input_tokens"), ("out", "output_tokens"), ("cache", "cache_read_tokens")]
        .iter()
        .filter_map(|(label, k)| d[*k].as_i64().map(|n| format!("{label} {n}")))
        .collect();
    parts.join(", ")
}

pub async fn events(ctx: &Ctx, a: EventsArgs) -> Result<i32, Error> {
    let mut q = vec![];
    if let Some(s) = a.since {
        q.push(("since", s.to_string()));
    }
    if a.follow {
        q.push(("follow", "true".to_string()));
    }
    let p = with_query(&path(&["api", "sessions", &a.session, "events", "stream"]), &q);
    let json = ctx.json;
    let mut ending = Ending { until_input: a.until_input, ..Ending::default() };
    // Each event's id is its seq: a reconnect (Last-Event-ID) repeats and misses nothing.
    ctx.client.follow(&p, None, |ev| print_event(ev, json, &mut ending)).await
}

/// How a followed turn or job ended, as an exit code (docs/cli.md's table): 0 succeeded, 3
/// failed or crashed, 4 cancelled or timed out, 5 waiting for a person (`--until-input`).
pub const EXIT_FAILED: i32 = 3;
pub const EXIT_CANCELLED: i32 = 4;
pub const EXIT_WAITING: i32 = 5;

/// What a session's (or a job's) stream has said of its end so far.
#[derive(Debug, Default)]
pub struct Ending {
    /// The last state a `run.state` or `job.state` event moved to (a job's own wins).
    state: Option<String>,
    job_state: Option<String>,
    /// Stop (exiting 5) once the turn waits for a person.
    pub until_input: bool,
}

impl Ending {
    /// Notes an event; `Some(code)` when the reader should stop there.
    pub fn saw(&mut self, e: &Value) -> Option<i32> {
        let to = e["data"]["to"].as_str().map(str::to_string);
        match s(e, "type") {
            "run.state" => self.state = to,
            "job.state" => self.job_state = to,
            "inbox.opened" if self.until_input && e["data"]["ask"].is_string() => return Some(EXIT_WAITING),
            _ => {}
        }
        (self.until_input && self.state.as_deref() == Some("waiting_input") && self.job_state.is_none())
            .then_some(EXIT_WAITING)
    }

    /// The exit code of a stream closed `done` with `message` (`the turn ended: failed`): the
    /// state the relay names, else the last one seen.
    pub fn code(&self, message: Option<&str>) -> i32 {
        let named = message.and_then(|m| m.rsplit_once("ended: ")).map(|(_, st)| st.trim());
        match named.or(self.job_state.as_deref()).or(self.state.as_deref()) {
            Some("failed" | "crashed") => EXIT_FAILED,
            Some("cancelled" | "timed_out") => EXIT_CANCELLED,
            _ => 0,
        }
    }
}

/// One event of a session's (or a job's) stream, printed; the stream's `close` decides the end,
/// and its exit code says how the turn or job ended (`Ending`).
pub fn print_event(ev: &SseEvent, json: bool, ending: &mut Ending) -> Result<Next, Error> {
    if json {
        render::json(&ev.to_json())?;
    }
    if ev.event == "close" {
        return match on_close(ev)? {
            Next::Stop(0) => Ok(Next::Stop(ending.code(ev.json().ok().as_ref().and_then(|v| v["message"].as_str())))),
            next => Ok(next),
        };
    }
    let e = ev.json()?;
    if !json {
        render::line(&event_line(&e))?;
    }
    match ending.saw(&e) {
        Some(code) => Ok(Next::Stop(code)),
        None => Ok(Next::Continue),
    }
}

/// `12:00:01  #9  tool.start  Bash: uv run pytest -q tests/`: the time, seq and type, then the
/// event's key fields, made one safe line (the agent's text is untrusted, escapes included).
pub fn event_line(e: &Value) -> String {
    let at = e["ts"].as_f64().map(render::clock).unwrap_or_else(|| "--:--:--".into());
    format!("{at}  #{:<4} {:<15} {}", cell(&e["seq"]), clean(s(e, "type")), clip(&detail(e), 160))
        .trim_end()
        .to_string()
}

fn detail(e: &Value) -> String {
    let d = &e["data"];
    let f = |k: &str| d[k].as_str().map(clean).unwrap_or_default();
    let or_dash = |k: &str| match &d[k] {
        Value::Null => "-".to_string(),
        v => cell(v),
    };
    let reason = |k: &str| d[k].as_str().map(|r| format!(" ({})", clean(r))).unwrap_or_default();
    match s(e, "type") {
        "run.state" | "job.state" => {
            let detail = d["detail"].as_str().map(|x| format!(": {}", clean(x))).unwrap_or_default();
            format!("{} -> {}{}{detail}", f("from"), f("to"), reason("reason"))
        }
        "run.started" => format!("model {}, cwd {}", or_dash("model"), or_dash("cwd")),
        "message" => {
            let fin = if d["final"] == true { " (final)" } else { "" };
            format!("{}{fin}: {}", f("role"), f("text"))
        }
        "tool.start" => format!("{}: {}", f("name"), f("summary")),
        "tool.end" => {
            let ok = if d["ok"] == true { "ok" } else { "failed" };
            let took = d["duration_ms"].as_f64().map(|ms| format!(" in {:.1}s", ms / 1000.0)).unwrap_or_default();
            // The first line of what the tool printed: the rest is for `--json`.
            let first = s(d, "summary").lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
            format!("{} {ok}{took}: {}", f("name"), clip(first, 100))
        }
        "phase" => f("phase"),
        "test.result" => tests(d),
        "usage" => {
            let cost = render::usd(&d["cost_usd"], 4).map(|c| format!(", {c}")).unwrap_or_default();
            format!("{}{cost}", tokens(d))
        }
        "rate_limit" => format!("{} {}% used, {}", or_dash("window"), or_dash("used_pct"), or_dash("status")),
        "input.requested" => format!("{}: {}", or_dash("kind"), f("prompt")),
        "error" => format!("{}: {}", or_dash("code"), f("message")),
        "run.result" => {
            let ok = if d["ok"] == true { "ok" } else { "not ok" };
            let cost = render::usd(&d["cost_usd"], 4).map(|c| format!(", {c}")).unwrap_or_default();
            let turns = match d["num_turns"].as_i64() {
                Some(1) => "1 turn".to_string(),
                Some(n) => format!("{n} turns"),
                None => "- turns".to_string(),
            };
            format!("{ok} ({}), {turns}{cost}", or_dash("subtype"))
        }
        "harness.unknown" => f("raw"),
        "inbox.opened" => format!("{} {} {}: {}", f("kind"), f("item"), f("ask"), crate::inbox::what(d)),
        "inbox.ended" => format!("{} {} {} by {}", f("kind"), f("item"), f("state"), f("by")),
        "agent.progress" => match d["pct"].as_i64() {
            Some(p) => format!("{p}% {}", f("text")),
            None => f("text"),
        },
        "job.result" => job_result(&d["result"]),
        _ => {
            let mut rest = d.clone();
            if let Some(o) = rest.as_object_mut() {
                o.remove("source");
            }
            clean(&rest.to_string())
        }
    }
}

/// What hangar measured, on one line.
pub fn job_result(r: &Value) -> String {
    let mut parts = vec![];
    if let Some(b) = r["branch"].as_str() {
        parts.push(format!("branch {}", clean(b)));
    }
    if let Some(h) = r["head"].as_str() {
        parts.push(format!("head {}", clean(&h.chars().take(8).collect::<String>())));
    }
    if let Some(n) = r["commits_ahead"].as_i64() {
        parts.push(format!("{n} commit{} ahead", if n == 1 { "" } else { "s" }));
    }
    if let Some(d) = r["dirty"].as_bool() {
        parts.push(if d { "dirty" } else { "clean" }.to_string());
    }
    if let Some(c) = r["verification"]["exit_code"].as_i64() {
        parts.push(format!("verify exited {c}"));
    }
    if let Some(u) = r["pr_url"].as_str() {
        parts.push(format!("PR {} (agent reported)", clean(u)));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_followed_turn_or_job_exits_with_how_it_ended() {
        let state = |ty: &str, to: &str| json!({"type": ty, "data": {"from": "running", "to": to}});
        let mut e = Ending::default();
        assert_eq!(e.code(Some("the turn ended: succeeded")), 0);
        assert_eq!(e.code(Some("the turn ended: failed")), EXIT_FAILED);
        assert_eq!(e.code(Some("the turn ended: crashed")), EXIT_FAILED);
        assert_eq!(e.code(Some("the job ended: cancelled")), EXIT_CANCELLED);
        assert_eq!(e.code(Some("the turn ended: timed_out")), EXIT_CANCELLED);
        // Without the relay's word, the last state seen; a job's own over its turn's.
        assert_eq!(e.saw(&state("run.state", "failed")), None);
        assert_eq!(e.code(None), EXIT_FAILED);
        e.saw(&state("run.state", "succeeded"));
        e.saw(&state("job.state", "cancelled"));
        assert_eq!(e.code(None), EXIT_CANCELLED);
        assert_eq!(Ending::default().code(None), 0);
        // Waiting for a person stops a reader only when asked.
        let opened = json!({"type": "inbox.opened", "data": {"kind": "approval", "ask": "apr_1"}});
        assert_eq!(Ending::default().saw(&opened), None);
        assert_eq!(Ending::default().saw(&state("run.state", "waiting_input")), None);
        let mut until = Ending { until_input: true, ..Ending::default() };
        assert_eq!(until.saw(&opened), Some(EXIT_WAITING));
        let mut until = Ending { until_input: true, ..Ending::default() };
        assert_eq!(until.saw(&state("run.state", "waiting_input")), Some(EXIT_WAITING));
    }

    fn ev(ty: &str, data: Value) -> Value {
        json!({"seq": 9, "ts": 0.0, "turn": "turn_1", "type": ty, "data": data})
    }

    fn detail_of(ty: &str, data: Value) -> String {
        let l = event_line(&ev(ty, data));
        l.split_once(ty).map(|(_, d)| d.trim().to_string()).unwrap_or(l)
    }

    #[test]
    fn an_event_line_has_the_seq_the_type_and_its_key_fields() {
        let l = event_line(&ev("tool.start", json!({"name": "Bash", "summary": "uv run pytest -q tests/"})));
        assert!(l.ends_with("  #9    tool.start      Bash: uv run pytest -q tests/"), "{l:?}");
    }

    #[test]
    fn each_type_says_what_matters() {
        let d = detail_of;
        assert_eq!(
            d("run.state", json!({"from": "running", "to": "succeeded", "reason": "ok", "detail": "exit code 0"})),
            "running -> succeeded (ok): exit code 0"
        );
        assert_eq!(d("run.state", json!({"from": "queued", "to": "starting", "reason": null})), "queued -> starting");
        assert_eq!(d("run.started", json!({"model": "claude-sonnet-5", "cwd": "/w"})), "model claude-sonnet-5, cwd /w");
        assert_eq!(
            d("message", json!({"role": "assistant", "text": "Done.\nAll good", "final": true})),
            "assistant (final): Done. All good"
        );
        assert_eq!(
            d(
                "tool.end",
                json!({"name": "Bash", "ok": false, "summary": "\nExit code 1\n....F [33%]", "duration_ms": 1500})
            ),
            "Bash failed in 1.5s: Exit code 1"
        );
        assert_eq!(
            d(
                "test.result",
                json!({"framework": "pytest", "passed": 210, "failed": 3, "errors": null, "skipped": 2, "duration_s": 4.21})
            ),
            "pytest: 210 passed, 3 failed, 2 skipped in 4.21s"
        );
        assert_eq!(
            d(
                "usage",
                json!({"input_tokens": 48, "output_tokens": 3912, "cache_read_tokens": 412883, "cost_usd": 0.4127})
            ),
            "in 48, out 3912, cache 412883, ≈$0.4127"
        );
        assert_eq!(
            d("run.result", json!({"ok": true, "subtype": "success", "num_turns": 14, "cost_usd": null})),
            "ok (success), 14 turns"
        );
        assert_eq!(
            d(
                "inbox.opened",
                json!({"item": "inb_1", "kind": "question", "ask": "qst_1", "title": "Question from x", "text": "Which database?", "options": ["postgres", "sqlite"]})
            ),
            "question inb_1 qst_1: Which database? [postgres | sqlite]"
        );
        assert_eq!(
            d("inbox.ended", json!({"item": "inb_1", "kind": "question", "state": "answered", "by": "ada"})),
            "question inb_1 answered by ada"
        );
        assert_eq!(d("agent.progress", json!({"text": "halfway", "pct": 40})), "40% halfway");
        assert_eq!(
            d("job.state", json!({"from": "verifying", "to": "succeeded", "reason": "ok", "detail": null})),
            "verifying -> succeeded (ok)"
        );
        assert_eq!(
            d("job.result", json!({"result": {"branch": "main", "head": "e7492af051bf", "commits_ahead": 1, "dirty": false,
                "verification": {"exit_code": 0}, "pr_url": "https://github.com/a/b/pull/4"}})),
            "branch main, head e7492af0, 1 commit ahead, clean, verify exited 0, PR https://github.com/a/b/pull/4 (agent reported)"
        );
        assert_eq!(d("some.future", json!({"x": 1, "source": "hangar"})), r#"{"x":1}"#);
    }

    #[test]
    fn agent_text_cannot_reach_the_terminal_raw() {
        let l = event_line(&ev("message", json!({"role": "assistant", "text": "hi\x1b]0;pwned\x07\nthere"})));
        assert!(!l.chars().any(|c| c.is_control()), "{l:?}");
        let long = "x".repeat(500);
        assert!(event_line(&ev("harness.unknown", json!({"raw": long}))).chars().count() < 260);
    }

    #[test]
    fn the_start_body_has_only_what_was_given() {
        let mut a = SessionStartArgs {
            name: "fix".into(),
            sandbox: "default".into(),
            harness: None,
            prompt: Some("p".into()),
            prompt_file: None,
            cwd: None,
            approvals: vec![],
            secrets: vec![],
            sandbox_login: false,
            timeout: None,
            idempotency_key: None,
        };
        assert_eq!(start_body(&a, "p".into()), json!({"name": "fix", "sandbox": "default", "prompt": "p"}));
        a.harness = Some("replay".into());
        a.approvals = vec!["Bash(git push*)".into()];
        a.secrets = vec!["KEY".into()];
        a.timeout = Some(5);
        a.cwd = Some("/w".into());
        a.sandbox_login = true;
        assert_eq!(
            start_body(&a, "p".into()),
            json!({"name": "fix", "sandbox": "default", "prompt": "p", "harness": "replay", "cwd": "/w",
                   "approvals": ["Bash(git push*)"], "secrets": ["KEY"], "timeout_minutes": 5, "sandbox_login": true})
        );
    }

    #[test]
    fn a_prompt_from_a_file() {
        let f = std::env::temp_dir().join(format!("hangar-cli-prompt-{}", std::process::id()));
        std::fs::write(&f, "from a file\n").expect("write");
        let path = f.to_str().expect("path");
        assert_eq!(read_prompt(None, Some(path)).expect("read"), "from a file\n");
        assert_eq!(read_prompt(Some("inline"), None).expect("inline"), "inline");
        let _ = std::fs::remove_file(&f);
        let e = read_prompt(None, Some(path)).expect_err("gone");
        assert!(e.to_string().contains(path), "{e}");
    }

    #[test]
    fn the_headline_and_the_record() {
        let v = json!({"id": "ses_1", "name": "fix", "state": "succeeded", "reason": "ok", "created_at": 0.0,
            "summary": {"phase": "git", "tests": {"framework": "cargo", "passed": 14, "failed": 0}, "cost_usd": 0.5},
            "turns": [{"n": 1, "id": "turn_1", "state": "succeeded", "reason": "ok", "prompt": "go", "created_at": 0.0}]});
        assert_eq!(headline(&v), "session fix (ses_1): turn 1 succeeded");
        let out = show(&v, 60.0);
        assert!(out.contains("state    succeeded (ok)\n"), "{out}");
        assert!(out.contains("tests    cargo: 14 passed, 0 failed\n"), "{out}");
        assert!(out.contains("cost     ≈$0.5000 (API-equivalent estimate)\n"), "{out}");
        assert!(out.contains("1     turn_1  succeeded  ok      1m ago   go"), "{out}");
    }
}
