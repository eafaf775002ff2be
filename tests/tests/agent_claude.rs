//! The real Claude Code (as claude-agent-sdk's wheel bundles it: scripts/agent-clis) through
//! hangar's built-in `claude-code` profile, against the scripted model stand-in
//! (`hangar_e2e::model`), on a local sandbox with the uid split (the relay as root). What is
//! checked is what a person watching would see: every event the CLI's lines make, with their
//! fields, none `harness.unknown`, and what the CLI sent the model.
//!
//! Without the CLI (scripts/agent-clis not run) or root, each test prints a skip notice; under
//! `CI=true` it fails instead.
use std::{path::Path, time::Duration};

use hangar_e2e::{
    clis,
    host::{is_root, skip_without},
    model::{Model, Step, ToolCall},
    procfs::{cmdline, pids_with, pids_with_all},
    relay::{Relay, StateDir, ADMIN},
    sessions::{
        agent_events, all_events, assert_contiguous, harness_file, inbox, item_of, put_secret, start, states,
        until_ended,
    },
};
use serde_json::{json, Value};

/// A turn of the real CLI: its start (about a second) and a few model calls.
const LIMIT: Duration = Duration::from_secs(30);

/// The CLI's version the tests pin (scripts/agent-clis).
const CLAUDE_VERSION: &str = "2.1.337";

/// The CLI, where it is installed and the tests run as root (the uid split); else `None`
/// after a skip notice (a failure under `CI=true`).
fn claude_as_root() -> Option<std::path::PathBuf> {
    let claude = clis::or_skip(clis::claude(), "Claude Code")?;
    (!skip_without(is_root(), "root (the uid split)")).then_some(claude)
}

/// A relay as root (the split) whose sandboxes find `claude` on their PATH.
fn relay_for(claude: &Path, state: &StateDir) -> Relay {
    let dir = claude.parent().expect("the CLI's directory");
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    Relay::start(&state.0, &[("PATH", path.as_str())])
}

/// As [`relay_for`], with the harness profile `profile` (TOML) of the user's own and `env`.
fn relay_with_profile(claude: &Path, state: &StateDir, profile: &str, env: &[(&str, &str)]) -> Relay {
    let file = harness_file(&state.0, &[profile.to_string()]);
    let dir = claude.parent().expect("the CLI's directory");
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut all = vec![("PATH", path.as_str()), ("HANGAR_HARNESSES", file.to_str().expect("path"))];
    all.extend_from_slice(env);
    Relay::start(&state.0, &all)
}

/// The built-in profile with a permission mode, as docs/sessions.md tells a user to write one:
/// `claude -p` edits nothing and runs no command without one, and a job has no person to ask.
/// Approvals still gate what a session names.
const AUTO: &str = r#"[harness.claude-auto]
new = ["claude", "-p", "--output-format", "stream-json", "--verbose", "--session-id", "{session_id}", "--permission-mode", "bypassPermissions"]
format = "claude-stream-json"
session_ids = "assign"
credentials = ["ANTHROPIC_API_KEY"]
approvals = ["--settings", "{settings_file}"]
"#;

/// The secrets the CLI needs to reach `model` (a key, the stand-in's address, a bound on its
/// retries), as the admin's: the names of [`SECRETS`].
async fn secrets_for(relay: &Relay, model: &Model) {
    put_secret(relay, "ANTHROPIC_API_KEY", "sk-ant-stand-in-key").await;
    put_secret(relay, "ANTHROPIC_BASE_URL", &model.url()).await;
    // Claude Code retries even a 401 ten times with backoff (minutes); one retry shows the same.
    // A secret's value is 8 bytes at least, and the CLI reads "00000001" as 1.
    put_secret(relay, "CLAUDE_CODE_MAX_RETRIES", "00000001").await;
}

const SECRETS: [&str; 3] = ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_MAX_RETRIES"];

/// Runs `command` in the default sandbox as its user; its stdout.
async fn exec(relay: &Relay, command: &str) -> String {
    let r = relay.call("POST", "/api/sandboxes/default/exec", Some(ADMIN), Some(json!({"command": command}))).await;
    let v = r.json();
    assert_eq!((r.status, &v["exit_code"]), (200, &json!(0)), "{command}: {v}");
    v["stdout"].as_str().unwrap_or_default().to_string()
}

/// The agent's events of the turn `turn` (its id), without hangar's `run.state`.
fn turn_events(events: &[Value], turn: &str) -> Vec<(String, Value)> {
    let of_turn: Vec<Value> = events.iter().filter(|e| e["turn"] == json!(turn)).cloned().collect();
    agent_events(&of_turn)
}

fn kinds(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(k, _)| k.as_str()).collect()
}

/// The tool results the CLI sent back to the model, in order: `(tool_use_id, text, is_error)`.
fn tool_results(model: &Model) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for r in model.requests().iter().filter(|r| r.scripted) {
        let Some(last) = r.body["messages"].as_array().and_then(|m| m.last()) else { continue };
        for block in last["content"].as_array().into_iter().flatten().filter(|b| b["type"] == "tool_result") {
            let text = match &block["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(""),
                _ => String::new(),
            };
            let id = block["tool_use_id"].as_str().unwrap_or_default().to_string();
            out.push((id, text, block["is_error"] == json!(true)));
        }
    }
    out
}

/// A turn that reads a file (a tool Claude Code runs without asking), then answers; then a
/// follow-up by `--resume` that carries the first turn's conversation to the model. Every line
/// the CLI wrote is an event hangar knows, with the fields docs/sessions.md gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_turn_with_a_tool_call_and_a_follow_up_by_resume() {
    let Some(claude) = claude_as_root() else { return };
    let state = StateDir::new();
    let relay = relay_for(&claude, &state);
    let cwd = exec(&relay, "mkdir -p repo && cd repo && echo 'ship it' > notes.txt && pwd").await.trim().to_string();
    let model = Model::start(vec![
        Step::tool("Read", json!({"file_path": format!("{cwd}/notes.txt")})),
        Step::text("The notes say: ship it."),
        Step::text("Still: ship it."),
    ]);
    secrets_for(&relay, &model).await;

    let body = json!({"name": "real", "sandbox": "default", "harness": "claude-code", "prompt": "What do the notes say?",
        "cwd": cwd, "secrets": SECRETS});
    let created = start(&relay, ADMIN, body).await;
    let s = until_ended(&relay, ADMIN, "real", LIMIT).await;
    let events = all_events(&relay, ADMIN, "real").await;
    assert_eq!(s["state"], json!("succeeded"), "{s}\nevents: {events:#?}");
    assert_eq!(s["split"], json!(true), "{s}");
    let first = created["turns"][0]["id"].as_str().expect("turn").to_string();
    let ev = turn_events(&events, &first);
    assert!(!kinds(&ev).contains(&"harness.unknown"), "every line known: {ev:#?}");
    assert_eq!(
        kinds(&ev),
        ["run.started", "tool.start", "phase", "tool.end", "message", "usage", "run.result"],
        "{ev:#?}"
    );
    let started = &ev[0].1;
    assert_eq!(started["harness_version"], json!(CLAUDE_VERSION), "{started}");
    assert_eq!(started["cwd"], json!(cwd), "{started}");
    assert_eq!(started["session_id"], s["agent_session_id"], "the id hangar assigned: {started} {s}");
    assert!(started["model"].as_str().is_some_and(|m| m.starts_with("claude-")), "{started}");
    let file = format!("{cwd}/notes.txt");
    let tool_id = "toolu_0001_0";
    let agent = "agent";
    assert_eq!(
        ev[1].1,
        json!({"name": "Read", "tool_id": tool_id, "file": file, "summary": file, "source": agent}),
        "{:?}",
        ev[1]
    );
    assert_eq!(ev[2].1, json!({"phase": "reading", "source": agent}));
    assert_eq!(
        ev[3].1,
        json!({"name": "Read", "tool_id": tool_id, "ok": true, "summary": "1\tship it\n2", "source": agent}),
        "{:?}",
        ev[3]
    );
    assert_eq!(ev[4].1["text"], json!("The notes say: ship it."), "{:?}", ev[4]);
    assert_eq!((&ev[4].1["role"], &ev[4].1["source"]), (&json!("assistant"), &json!(agent)));
    // The stand-in's usage: 100 in and 20 out a request, two requests.
    let usage = &ev[5].1;
    assert_eq!(
        (&usage["input_tokens"], &usage["output_tokens"], &usage["turns"]),
        (&json!(200), &json!(40), &json!(2))
    );
    let result = &ev[6].1;
    assert_eq!(
        (&result["ok"], &result["subtype"], &result["final_text"], &result["num_turns"]),
        (&json!(true), &json!("success"), &json!("The notes say: ship it."), &json!(2)),
        "{result}"
    );
    // The file's text reached the model as the tool's result.
    let results = tool_results(&model);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].1.contains("ship it") && !results[0].2, "{results:?}");

    // A follow-up resumes the conversation: the model sees the first turn's messages.
    let r = relay.call("POST", "/api/sessions/real/turns", Some(ADMIN), Some(json!({"prompt": "And now?"}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    let s = until_ended(&relay, ADMIN, "real", LIMIT).await;
    let events = all_events(&relay, ADMIN, "real").await;
    assert_eq!(s["state"], json!("succeeded"), "{s}\nevents: {events:#?}");
    assert_contiguous(&events);
    let second = s["turns"][1]["id"].as_str().expect("turn 2").to_string();
    let ev = turn_events(&events, &second);
    assert_eq!(kinds(&ev), ["run.started", "message", "usage", "run.result"], "{ev:#?}");
    assert_eq!(ev[1].1["text"], json!("Still: ship it."));
    let last = model.requests().into_iter().rfind(|r| r.scripted).expect("a request of the second turn");
    let said = last.body["messages"].to_string();
    assert!(said.contains("What do the notes say?") && said.contains("And now?"), "resumed: {said}");
    assert_eq!(
        states(&events),
        [
            "queued>starting:-",
            "starting>running:-",
            "running>succeeded:ok",
            "queued>starting:-",
            "starting>running:-",
            "running>succeeded:ok"
        ]
    );
}

/// A repository at the top of the sandbox's work directory, where a user's clone lands, and a
/// turn that only reads: `git status` shows nothing afterwards, ignored files included. The
/// CLI's own state (`~/.claude`, `~/.claude.json`) and hangar's `.hangar/` are in the sandbox
/// user's home, which is not in the work directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_changes_nothing_leaves_the_repository_clean() {
    let Some(claude) = claude_as_root() else { return };
    let state = StateDir::new();
    let relay = relay_for(&claude, &state);
    let cwd = exec(
        &relay,
        "git init -q -b main && echo 'ship it' > notes.txt && git add notes.txt && \
         git -c user.email=a@example.com -c user.name=dev commit -q -m notes && pwd",
    )
    .await
    .trim()
    .to_string();
    let model = Model::start(vec![
        Step::tool("Read", json!({"file_path": format!("{cwd}/notes.txt")})),
        Step::text("The notes say: ship it."),
    ]);
    secrets_for(&relay, &model).await;
    let body = json!({"name": "clean", "sandbox": "default", "harness": "claude-code", "prompt": "What do the notes say?",
        "secrets": SECRETS});
    start(&relay, ADMIN, body).await;
    let s = until_ended(&relay, ADMIN, "clean", LIMIT).await;
    let ev = agent_events(&all_events(&relay, ADMIN, "clean").await);
    assert_eq!(s["state"], json!("succeeded"), "{s}\nevents: {ev:#?}");
    assert_eq!(s["cwd"], json!(cwd), "the session ran at the repository's top: {s}");
    assert_eq!(exec(&relay, "git status --porcelain --ignored").await, "", "nothing the agent did not do");
    let home = exec(&relay, "cd && pwd").await.trim().to_string();
    assert!(!home.starts_with(&cwd), "the home {home} is outside the work directory {cwd}");
    assert_eq!(
        exec(&relay, "cd && ls -d .claude .claude.json .hangar").await,
        ".claude\n.claude.json\n.hangar\n",
        "the CLI's state and hangar's are in the home"
    );
}

/// A session working in its home, as E2B's template has it (`/home/user` is both): the CLI's
/// state goes to `~/.hangar/home`, which git ignores, so a repository at the home shows nothing
/// the agent did not do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_in_its_home_keeps_the_clis_state_out_of_the_repository_there() {
    let Some(claude) = claude_as_root() else { return };
    let state = StateDir::new();
    let relay = relay_for(&claude, &state);
    let home = exec(
        &relay,
        "cd && git init -q -b main && echo 'ship it' > notes.txt && git add notes.txt && \
         git -c user.email=a@example.com -c user.name=dev commit -q -m notes && pwd",
    )
    .await
    .trim()
    .to_string();
    let model = Model::start(vec![
        Step::tool("Read", json!({"file_path": format!("{home}/notes.txt")})),
        Step::text("The notes say: ship it."),
    ]);
    secrets_for(&relay, &model).await;
    let (s, ev) = run_session(&relay, "home", "claude-code", &home, json!({})).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}\nevents: {ev:#?}");
    assert_eq!(exec(&relay, "cd && git status --porcelain").await, "", "nothing the agent did not do");
    assert_eq!(
        exec(&relay, "cd && ls -d .hangar/home/.claude .hangar/home/.claude.json").await,
        ".hangar/home/.claude\n.hangar/home/.claude.json\n",
        "the CLI's state"
    );
}

/// One turn of the real CLI in a fresh relay against `script`, with `prompt` in `repo/`: the
/// ended session, its events, and the stand-in (to read what the CLI sent).
async fn one_turn(claude: &Path, script: Vec<Step>) -> (Value, Vec<Value>, Model) {
    let state = StateDir::new();
    let relay = relay_for(claude, &state);
    let cwd = exec(&relay, "mkdir -p repo && cd repo && pwd").await.trim().to_string();
    let model = Model::start(script);
    secrets_for(&relay, &model).await;
    let body = json!({"name": "one", "sandbox": "default", "harness": "claude-code", "prompt": "Go.",
        "cwd": cwd, "secrets": SECRETS});
    start(&relay, ADMIN, body).await;
    let s = until_ended(&relay, ADMIN, "one", LIMIT).await;
    let events = all_events(&relay, ADMIN, "one").await;
    assert_contiguous(&events);
    (s, events, model)
}

/// The model answers 401: the turn fails, and what a person reads says the key was refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_fails_the_turn_saying_so() {
    let Some(claude) = claude_as_root() else { return };
    let (s, events, model) = one_turn(&claude, vec![Step::unauthorized(); 2]).await;
    assert_eq!(model.left(), 0, "the request and its one retry");
    let ev = agent_events(&events);
    assert_eq!(s["state"], json!("failed"), "{s}\nevents: {ev:#?}");
    assert!(!kinds(&ev).contains(&"harness.unknown"), "every line known: {ev:#?}");
    let result = ev.iter().find(|(k, _)| k == "run.result").map(|(_, d)| d.clone()).expect("a run.result");
    assert_eq!(result["ok"], json!(false), "{result}");
    let said =
        ev.iter().filter(|(k, _)| k == "error" || k == "message").map(|(_, d)| d.to_string()).collect::<String>();
    assert!(said.contains("401") || said.to_lowercase().contains("api key"), "a reason a person understands: {ev:#?}");
}

/// A 429 with `retry-after` and a 529 before the answer: the CLI retries, each retry an event
/// as it happens, and the turn succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_and_overload_are_retried_and_shown() {
    let Some(claude) = claude_as_root() else { return };
    // One retry each (CLAUDE_CODE_MAX_RETRIES): the 429 on the first request, the 529 on the
    // second (after a tool call that needs no permission).
    let script = vec![
        Step::rate_limited(1),
        Step::tool("Glob", json!({"pattern": "*"})),
        Step::overloaded(),
        Step::text("Made it."),
    ];
    let (s, events, model) = one_turn(&claude, script).await;
    let ev = agent_events(&events);
    assert_eq!(s["state"], json!("succeeded"), "{s}\nevents: {ev:#?}");
    assert!(!kinds(&ev).contains(&"harness.unknown"), "every line known: {ev:#?}");
    assert_eq!(model.left(), 0, "every step taken");
    let retries: Vec<&Value> =
        ev.iter().filter(|(k, d)| k == "error" && d["code"] == "api_retry").map(|(_, d)| d).collect();
    assert_eq!(retries.len(), 2, "one event a retry: {ev:#?}");
    assert!(retries.iter().all(|d| d["retryable"] == json!(true)), "{retries:?}");
    assert!(retries[0]["message"].as_str().is_some_and(|m| m.contains("429")), "{retries:?}");
    assert!(retries[1]["message"].as_str().is_some_and(|m| m.contains("529")), "{retries:?}");
    let last = ev.iter().rfind(|(k, _)| k == "message").expect("a message");
    assert_eq!(last.1["text"], json!("Made it."));
}

/// A 400 (a request the API refuses) fails the turn with the API's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_request_fails_the_turn_with_the_apis_message() {
    let Some(claude) = claude_as_root() else { return };
    // 2.1.337 sends a refused request six times in all, unchanged and at once, before it gives
    // up: pinned, so that a change in that shows.
    let script = vec![Step::bad_request("the stand-in refuses this request"); 7];
    let (s, events, model) = one_turn(&claude, script).await;
    assert_eq!(model.left(), 1, "six attempts: {:?}", model.requests());
    let ev = agent_events(&events);
    assert_eq!(s["state"], json!("failed"), "{s}\nevents: {ev:#?}");
    assert!(!kinds(&ev).contains(&"harness.unknown"), "every line known: {ev:#?}");
    let said = ev.iter().map(|(_, d)| d.to_string()).collect::<String>();
    assert!(said.contains("the stand-in refuses this request"), "the API's message: {ev:#?}");
}

/// Approvals through the real `PreToolUse` hook: a Bash call a person allows runs, one they deny
/// does not, and the denial's reason reaches the model as the call's error result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_allowed_runs_and_one_denied_tells_the_model_why() {
    let Some(claude) = claude_as_root() else { return };
    let state = StateDir::new();
    let relay = relay_for(&claude, &state);
    let cwd = exec(&relay, "mkdir -p repo && cd repo && pwd").await.trim().to_string();
    let model = Model::start(vec![
        Step::bash("echo yes > allowed.txt"),
        Step::bash("echo no > denied.txt"),
        Step::text("One of two."),
    ]);
    secrets_for(&relay, &model).await;
    let body = json!({"name": "gated", "sandbox": "default", "harness": "claude-code", "prompt": "Write both files.",
        "cwd": cwd, "secrets": SECRETS, "approvals": ["Bash"]});
    start(&relay, ADMIN, body).await;

    let held = item_of(&relay, ADMIN, "approval", "gated").await;
    assert_eq!(held["tool"]["name"], json!("Bash"), "{held}");
    assert_eq!(held["tool"]["input"]["command"], json!("echo yes > allowed.txt"), "{held}");
    let path = format!("/api/approvals/{}", held["ask_id"].as_str().expect("ask_id"));
    let r = relay.call("POST", &path, Some(ADMIN), Some(json!({"decision": "allow"}))).await;
    assert_eq!((r.status, r.json()["state"].clone()), (200, json!("allowed")), "{r:?}");

    let held = item_of(&relay, ADMIN, "approval", "gated").await;
    assert_eq!(held["tool"]["input"]["command"], json!("echo no > denied.txt"), "{held}");
    let path = format!("/api/approvals/{}", held["ask_id"].as_str().expect("ask_id"));
    let deny = json!({"decision": "deny", "reason": "not in this repository"});
    let r = relay.call("POST", &path, Some(ADMIN), Some(deny)).await;
    assert_eq!((r.status, r.json()["state"].clone()), (200, json!("denied")), "{r:?}");

    let s = until_ended(&relay, ADMIN, "gated", LIMIT).await;
    let events = all_events(&relay, ADMIN, "gated").await;
    let ev = agent_events(&events);
    assert_eq!(s["state"], json!("succeeded"), "{s}\nevents: {ev:#?}");
    assert!(!kinds(&ev).contains(&"harness.unknown"), "every line known: {ev:#?}");
    assert_eq!(exec(&relay, &format!("cd {cwd} && ls")).await, "allowed.txt\n", "only the allowed call ran");
    let results = tool_results(&model);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(!results[0].2, "the allowed call's result: {results:?}");
    assert!(
        results[1].2 && results[1].1.contains("not in this repository"),
        "the denial, with its reason: {results:?}"
    );
    let ends: Vec<&Value> = ev.iter().filter(|(k, _)| k == "tool.end").map(|(_, d)| d).collect();
    assert_eq!(ends.iter().map(|d| d["ok"].clone()).collect::<Vec<_>>(), [json!(true), json!(false)], "{ends:?}");
}

/// Cancelling a turn while its tool runs: the CLI and the tool's processes end, nothing of the
/// turn is left running, and the turn ends `cancelled`. A follow-up asked for while it runs is
/// refused (409).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cancelled_in_a_tool_call_leaves_nothing_running() {
    let Some(claude) = claude_as_root() else { return };
    let state = StateDir::new();
    let relay = relay_for(&claude, &state);
    let cwd = exec(&relay, "mkdir -p repo && cd repo && pwd").await.trim().to_string();
    // A wait no other test runs, to find its process by (2.1.337 refuses a plain `sleep N`).
    let marker = format!("timeout {} tail -f /dev/null", 4000 + std::process::id() % 1000);
    let model = Model::start(vec![Step::bash(&marker)]);
    secrets_for(&relay, &model).await;
    let body = json!({"name": "long", "sandbox": "default", "harness": "claude-code", "prompt": "Wait.",
        "cwd": cwd, "secrets": SECRETS, "approvals": ["Bash"]});
    let created = start(&relay, ADMIN, body).await;
    let conversation = created["agent_session_id"].as_str().expect("the id hangar assigned").to_string();
    let held = item_of(&relay, ADMIN, "approval", "long").await;
    let path = format!("/api/approvals/{}", held["ask_id"].as_str().expect("ask_id"));
    let r = relay.call("POST", &path, Some(ADMIN), Some(json!({"decision": "allow"}))).await;
    assert_eq!(r.status, 200, "{r:?}");
    let deadline = std::time::Instant::now() + LIMIT;
    while pids_with(&marker).is_empty() {
        assert!(std::time::Instant::now() < deadline, "the tool never ran: {}", relay.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let claude_pids = pids_with_all(&["claude", "stream-json", &conversation]);
    assert!(!claude_pids.is_empty(), "the CLI runs");
    // A follow-up while the turn runs is refused, as documented (docs/api.md): one live turn.
    let r = relay.call("POST", "/api/sessions/long/turns", Some(ADMIN), Some(json!({"prompt": "more"}))).await;
    assert_eq!(r.status, 409, "{r:?}");

    let r = relay.call("POST", "/api/sessions/long/cancel", Some(ADMIN), None).await;
    assert_eq!(r.status, 200, "{r:?}");
    let s = until_ended(&relay, ADMIN, "long", LIMIT).await;
    assert_eq!(s["state"], json!("cancelled"), "{s}");
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let left: Vec<u32> = pids_with(&marker)
            .into_iter()
            .chain(claude_pids.iter().copied().filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists()))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still running after the cancel: {left:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let events = all_events(&relay, ADMIN, "long").await;
    let ev = agent_events(&events);
    assert!(!kinds(&ev).contains(&"harness.unknown"), "every line known: {ev:#?}");
    assert_eq!(kinds(&ev).first(), Some(&"run.started"), "{ev:#?}");
    assert!(kinds(&ev).contains(&"tool.start"), "{ev:#?}");
}

/// A job whose real agent writes a file and commits it: what hangar measures is exactly that
/// (one commit ahead of the base, not dirty), and `verify` sees the commit ([`AUTO`]'s profile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_agent_commits_measures_exactly_that() {
    let Some(claude) = claude_as_root() else { return };
    let state = StateDir::new();
    let relay = relay_with_profile(&claude, &state, AUTO, &[]);
    let cwd = exec(
        &relay,
        "mkdir -p repo && cd repo && git init -q -b main && git config user.email a@example.com && \
         git config user.name agent && git commit -q --allow-empty -m base && pwd",
    )
    .await
    .trim()
    .to_string();
    let model = Model::start(vec![
        Step::tool("Write", json!({"file_path": format!("{cwd}/hello.txt"), "content": "hello\n"})),
        Step::bash("git add hello.txt && git commit -q -m 'add hello'"),
        Step::text("Committed hello.txt."),
    ]);
    secrets_for(&relay, &model).await;
    let body = json!({"sandbox": "default", "harness": "claude-auto", "prompt": "Add hello.txt and commit it.",
        "cwd": cwd, "secrets": SECRETS, "verify": "test \"$(git log -1 --format=%s)\" = 'add hello'"});
    let r = relay.call("POST", "/api/jobs", Some(ADMIN), Some(body)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.json()["id"].as_str().expect("job id").to_string();
    let deadline = std::time::Instant::now() + LIMIT;
    let job = loop {
        let j = relay.call("GET", &format!("/api/jobs/{id}"), Some(ADMIN), None).await.json();
        if ["succeeded", "failed", "cancelled"].contains(&j["state"].as_str().unwrap_or_default()) {
            break j;
        }
        assert!(std::time::Instant::now() < deadline, "the job still {}: {j}", j["state"]);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let session = job["session"].as_str().expect("its session").to_string();
    let ev = agent_events(&all_events(&relay, ADMIN, &session).await);
    assert_eq!(job["state"], json!("succeeded"), "{job}\nevents: {ev:#?}");
    assert!(!kinds(&ev).contains(&"harness.unknown"), "every line known: {ev:#?}");
    let result = &job["result"];
    assert_eq!(
        (&result["git_repository"], &result["branch"], &result["commits_ahead"], &result["dirty"]),
        (&json!(true), &json!("main"), &json!(1), &json!(false)),
        "{result}"
    );
    assert_eq!(result["verification"]["exit_code"], json!(0), "{result}");
    assert_eq!(exec(&relay, &format!("cd {cwd} && git status --porcelain")).await, "", "nothing else in the work tree");
}

/// A subagent (the `Agent` tool, run in the foreground): its tool calls are attributed to the
/// call that started it (`parent_tool_id`) in events and the summary, the main agent's are not,
/// and its report reaches the main agent as that call's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_calls_are_attributed_to_it() {
    let Some(claude) = claude_as_root() else { return };
    // In order: the main agent's call, the subagent's two requests, the main agent's answer.
    // (In the background, 2.1.337's default, the two agents' requests race for the script.)
    let agent = json!({"description": "look around", "prompt": "Say where you are.",
        "subagent_type": "general-purpose", "run_in_background": false});
    let script = vec![
        Step::tool("Agent", agent),
        Step::tool("Bash", json!({"command": "pwd"})),
        Step::text("I am in the repository."),
        Step::text("The helper is in the repository."),
    ];
    let (s, events, model) = one_turn(&claude, script).await;
    let ev = agent_events(&events);
    assert_eq!(s["state"], json!("succeeded"), "{s}\nevents: {ev:#?}");
    assert!(!kinds(&ev).contains(&"harness.unknown"), "every line known: {ev:#?}");
    assert_eq!(model.left(), 0);
    let calls: Vec<(String, Value, Value)> = ev
        .iter()
        .filter(|(k, _)| k == "tool.start" || k == "tool.end")
        .map(|(k, d)| {
            (
                format!("{k} {}", d["name"].as_str().unwrap_or_default()),
                d["tool_id"].clone(),
                d["parent_tool_id"].clone(),
            )
        })
        .collect();
    let (agent_id, bash_id) = (json!("toolu_0001_0"), json!("toolu_0002_0"));
    assert_eq!(
        calls,
        [
            ("tool.start Agent".to_string(), agent_id.clone(), Value::Null),
            ("tool.start Bash".to_string(), bash_id.clone(), agent_id.clone()),
            ("tool.end Bash".to_string(), bash_id, agent_id.clone()),
            ("tool.end Agent".to_string(), agent_id, Value::Null),
        ],
        "{ev:#?}"
    );
    let summary = &s["summary"];
    assert_eq!(
        (&summary["last_tool"], &summary["last_tool_parent"]),
        (&json!("Bash"), &json!("toolu_0001_0")),
        "the summary's last call is the subagent's: {summary}"
    );
    let results = tool_results(&model);
    assert!(results.last().is_some_and(|r| r.1.contains("I am in the repository.")), "the report: {results:?}");
    let result = ev.iter().rfind(|(k, _)| k == "run.result").expect("run.result");
    assert_eq!(result.1["final_text"], json!("The helper is in the repository."));
}

/// `hangar-envd approve` killed while it holds a call (a crash: a panic, the OOM killer): the
/// call is refused, not run, even where the CLI would run it without asking (a profile with
/// `--permission-mode bypassPermissions`, as a user who gates only some calls writes it).
/// Claude Code takes a hook's exits other than 0 and 2 as "no decision", so hangar's hook
/// command turns them into 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_approval_hook_fails_closed() {
    let Some(claude) = claude_as_root() else { return };
    let state = StateDir::new();
    let relay = relay_with_profile(&claude, &state, AUTO, &[]);
    let cwd = exec(&relay, "mkdir -p repo && cd repo && pwd").await.trim().to_string();
    let model = Model::start(vec![Step::bash("echo ran > ran.txt"), Step::text("Stopped.")]);
    secrets_for(&relay, &model).await;
    let body = json!({"name": "crash", "sandbox": "default", "harness": "claude-auto", "prompt": "Write it.",
        "cwd": cwd, "secrets": SECRETS, "approvals": ["Bash"]});
    let created = start(&relay, ADMIN, body).await;
    let turn = created["turns"][0]["id"].as_str().expect("turn").to_string();
    item_of(&relay, ADMIN, "approval", "crash").await;
    // The daemon's binary itself, not the shell that runs the hook's command.
    let hooks: Vec<u32> = pids_with_all(&["approve", "--turn", &turn])
        .into_iter()
        .filter(|p| cmdline(*p).is_some_and(|c| c.split('\0').next().is_some_and(|a| a.ends_with("hangar-envd"))))
        .collect();
    let all: Vec<String> = pids_with_all(&["approve", "--turn", &turn]).into_iter().filter_map(cmdline).collect();
    assert_eq!(hooks.len(), 1, "the hook holds the call: {all:#?}");
    // SAFETY: kill(2) on the hook process this test's relay started.
    unsafe { libc::kill(hooks[0] as i32, libc::SIGKILL) };
    let s = until_ended(&relay, ADMIN, "crash", LIMIT).await;
    let ev = agent_events(&all_events(&relay, ADMIN, "crash").await);
    assert_eq!(exec(&relay, &format!("cd {cwd} && ls")).await, "", "the held call did not run: {ev:#?}\n{s}");
    let results = tool_results(&model);
    assert!(results.first().is_some_and(|r| r.2), "the call's result is an error: {results:?}");
}

/// Runs a session of `harness` with `prompt` in `cwd` until it ends: the session and its agent
/// events.
async fn run_session(
    relay: &Relay,
    name: &str,
    harness: &str,
    cwd: &str,
    extra: Value,
) -> (Value, Vec<(String, Value)>) {
    run_session_within(relay, name, harness, cwd, extra, LIMIT).await
}

/// `run_session`, waiting up to `limit` for the turn to end.
async fn run_session_within(
    relay: &Relay,
    name: &str,
    harness: &str,
    cwd: &str,
    extra: Value,
    limit: Duration,
) -> (Value, Vec<(String, Value)>) {
    let mut body = json!({"name": name, "sandbox": "default", "harness": harness, "prompt": "Go.", "cwd": cwd,
        "secrets": SECRETS});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    start(relay, ADMIN, body).await;
    let s = until_ended(relay, ADMIN, name, limit).await;
    let events = all_events(relay, ADMIN, name).await;
    assert_contiguous(&events);
    (s, agent_events(&events))
}

/// The latest ended inbox item of `kind` from `session`.
async fn ended_item(relay: &Relay, kind: &str, session: &str) -> Value {
    let ended = inbox(relay, ADMIN, true).await;
    ended["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["kind"] == kind && i["session_name"] == session))
        .cloned()
        .unwrap_or_else(|| panic!("no ended {kind} of {session}: {ended}"))
}

/// Questions the agent asks with `hangar-envd question` (through Bash, as an agent told of
/// `$HANGAR_AGENT` does): one a person answers reaches the model as the command's output; one
/// nobody answers expires (`HANGAR_INBOX_EXPIRY_SECONDS`), and the command tells the model so by
/// its exit status 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_answered_reaches_the_model_and_one_unanswered_expires() {
    let Some(claude) = claude_as_root() else { return };
    let state = StateDir::new();
    let relay = relay_with_profile(&claude, &state, AUTO, &[("HANGAR_INBOX_EXPIRY_SECONDS", "3")]);
    let cwd = exec(&relay, "mkdir -p repo && cd repo && pwd").await.trim().to_string();
    let model = Model::start(vec![
        Step::bash(r#""$HANGAR_AGENT" question "Which database?" --option postgres --option sqlite; echo "exit=$?""#),
        Step::bash(r#""$HANGAR_AGENT" question "Ship it on Friday?"; echo "exit=$?""#),
        Step::text("Postgres, and no answer on Friday."),
    ]);
    secrets_for(&relay, &model).await;
    let body = json!({"name": "asks", "sandbox": "default", "harness": "claude-auto", "prompt": "Ask me.",
        "cwd": cwd, "secrets": SECRETS});
    start(&relay, ADMIN, body).await;
    let asked = item_of(&relay, ADMIN, "question", "asks").await;
    assert_eq!((&asked["text"], &asked["options"]), (&json!("Which database?"), &json!(["postgres", "sqlite"])));
    let path = format!("/api/questions/{}", asked["ask_id"].as_str().expect("ask_id"));
    let r = relay.call("POST", &path, Some(ADMIN), Some(json!({"answer": "postgres"}))).await;
    assert_eq!((r.status, r.json()["state"].clone()), (200, json!("answered")), "{r:?}");
    let second = item_of(&relay, ADMIN, "question", "asks").await;
    assert_eq!(second["text"], json!("Ship it on Friday?"), "{second}");

    let s = until_ended(&relay, ADMIN, "asks", LIMIT).await;
    let ev = agent_events(&all_events(&relay, ADMIN, "asks").await);
    assert_eq!(s["state"], json!("succeeded"), "{s}\nevents: {ev:#?}");
    assert!(!kinds(&ev).contains(&"harness.unknown"), "every line known: {ev:#?}");
    let results = tool_results(&model);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].1.contains("postgres") && results[0].1.contains("exit=0"), "the answer: {results:?}");
    assert!(results[1].1.contains("exit=3"), "unanswered, said by the exit status: {results:?}");
    assert_eq!(ended_item(&relay, "question", "asks").await["state"], json!("expired"));
}

/// An approval nobody decides expires: the call is refused, not run, the model is told, and a
/// `denied` item tells the person.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_nobody_decides_expires_and_the_call_does_not_run() {
    let Some(claude) = claude_as_root() else { return };
    let state = StateDir::new();
    let dir = claude.parent().expect("the CLI's directory");
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    let relay = Relay::start(&state.0, &[("PATH", path.as_str()), ("HANGAR_INBOX_EXPIRY_SECONDS", "3")]);
    let cwd = exec(&relay, "mkdir -p repo && cd repo && pwd").await.trim().to_string();
    let model = Model::start(vec![Step::bash("echo late > late.txt"), Step::text("Not allowed in time.")]);
    secrets_for(&relay, &model).await;
    let (s, ev) = run_session(&relay, "waits", "claude-code", &cwd, json!({"approvals": ["Bash"]})).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}\nevents: {ev:#?}");
    assert!(!kinds(&ev).contains(&"harness.unknown"), "every line known: {ev:#?}");
    assert_eq!(exec(&relay, &format!("cd {cwd} && ls")).await, "", "the call did not run");
    let results = tool_results(&model);
    assert!(results.first().is_some_and(|r| r.2), "the model was told it was refused: {results:?}");
    assert_eq!(ended_item(&relay, "approval", "waits").await["state"], json!("expired"));
    item_of(&relay, ADMIN, "denied", "waits").await;
}

/// What Claude Code does with a `PreToolUse` hook's `ask` in headless (`-p`, stream-json) mode,
/// pinned for this version: hangar answers `allow` or `deny` only (the approvals tests), and a
/// change in the CLI's handling of `ask` would change what a profile of one's own can rely on.
/// 2.1.337 takes `ask` as a `deny`: the call does not run, even under `bypassPermissions`, and
/// the hook's reason is the call's error result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hooks_ask_is_a_refusal_in_headless_mode() {
    let Some(claude) = claude_as_root() else { return };
    let state = StateDir::new();
    // The hook's answer and the settings naming it, where the sandbox's user reads them.
    // (Another scratch directory of the test's: the sandbox's namespace covers only its relay's.)
    let files = StateDir::new();
    std::fs::create_dir_all(&files.0).expect("a scratch directory");
    let answer = files.0.join("ask.json");
    let decision = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask",
        "permissionDecisionReason": "a person should look"}});
    std::fs::write(&answer, decision.to_string()).expect("the hook's answer");
    let settings = files.0.join("settings.json");
    let hooks = json!({"hooks": {"PreToolUse": [{"matcher": "Bash",
        "hooks": [{"type": "command", "command": format!("cat {}", answer.display())}]}]}});
    std::fs::write(&settings, hooks.to_string()).expect("the settings");
    let profile = format!(
        r#"[harness.claude-ask]
new = ["claude", "-p", "--output-format", "stream-json", "--verbose", "--session-id", "{{session_id}}", "--permission-mode", "bypassPermissions", "--settings", "{}"]
format = "claude-stream-json"
session_ids = "assign"
credentials = ["ANTHROPIC_API_KEY"]
"#,
        settings.display()
    );
    let relay = relay_with_profile(&claude, &state, &profile, &[]);
    let cwd = exec(&relay, "mkdir -p repo && cd repo && pwd").await.trim().to_string();
    let model = Model::start(vec![Step::bash("echo asked > asked.txt"), Step::text("It was not run.")]);
    secrets_for(&relay, &model).await;
    let (s, ev) = run_session(&relay, "ask", "claude-ask", &cwd, json!({})).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}\nevents: {ev:#?}");
    assert!(!kinds(&ev).contains(&"harness.unknown"), "every line known: {ev:#?}");
    assert_eq!(exec(&relay, &format!("cd {cwd} && ls")).await, "", "the call did not run");
    let results = tool_results(&model);
    // Exactly a `deny`'s: the hook's reason, as the call's error result.
    assert_eq!(results, [("toolu_0001_0".to_string(), "a person should look".to_string(), true)]);
}

/// A line of the CLI's past 1 MiB (the agent writes a 1.2 MB file: the call's input is in the
/// line that starts it): hangar cuts it (`harness.truncated`, `line_too_long`) and records the
/// rest of the turn, the answer and the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_past_a_mib_is_cut_and_the_rest_of_the_turn_recorded() {
    let Some(claude) = claude_as_root() else { return };
    let state = StateDir::new();
    let relay = relay_with_profile(&claude, &state, AUTO, &[]);
    let cwd = exec(&relay, "mkdir -p repo && cd repo && pwd").await.trim().to_string();
    let big = "a".repeat(1_200_000);
    let model = Model::start(vec![
        Step::tool("Write", json!({"file_path": format!("{cwd}/big.txt"), "content": big})),
        Step::text("Wrote it."),
    ]);
    secrets_for(&relay, &model).await;
    let (s, ev) = run_session(&relay, "big", "claude-auto", &cwd, json!({})).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}\nevents: {:#?}", kinds(&ev));
    assert!(!kinds(&ev).contains(&"harness.unknown"), "every line known: {:#?}", kinds(&ev));
    let cut: Vec<&Value> = ev.iter().filter(|(k, _)| k == "harness.truncated").map(|(_, d)| d).collect();
    assert!(!cut.is_empty(), "the long line was cut: {:#?}", kinds(&ev));
    assert!(cut.iter().all(|d| d["reason"] == json!("line_too_long")), "{cut:?}");
    assert!(cut.iter().all(|d| d["bytes"].as_u64().is_some_and(|b| b > 1 << 20)), "{cut:?}");
    // Both lines of the call pass 1 MiB: the one that starts it (its input) and the one with its
    // result (2.1.337 repeats the file's content in `tool_use_result`). What follows is whole.
    let first_cut = ev.iter().position(|(k, _)| k == "harness.truncated").expect("cut");
    assert_eq!(
        kinds(&ev[first_cut..]),
        ["harness.truncated", "harness.truncated", "message", "usage", "run.result"],
        "{:#?}",
        kinds(&ev)
    );
    assert_eq!(ev.iter().rfind(|(k, _)| k == "message").map(|(_, d)| d["text"].clone()), Some(json!("Wrote it.")));
    assert_eq!(exec(&relay, &format!("wc -c < {cwd}/big.txt")).await.trim(), "1200000");
}

/// A turn of more than 2,000 events (ten answers of 100 `Read` calls each, run in parallel by
/// the CLI): every call's start and end recorded, in order, none twice, and the turn succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_of_two_thousand_events_is_recorded_whole() {
    let Some(claude) = claude_as_root() else { return };
    let state = StateDir::new();
    let relay = relay_for(&claude, &state);
    let cwd = exec(&relay, "mkdir -p repo && cd repo && echo 'ship it' > notes.txt && pwd").await.trim().to_string();
    let read = ToolCall { name: "Read".into(), input: json!({"file_path": format!("{cwd}/notes.txt")}) };
    let mut script: Vec<Step> = (0..10).map(|_| Step::Reply { text: None, tools: vec![read.clone(); 100] }).collect();
    script.push(Step::text("Read it a thousand times."));
    let model = Model::start(script);
    secrets_for(&relay, &model).await;
    // Ten model calls of a hundred tool calls each: about 25 s on a loaded CI machine, so the
    // wait is longer than one turn's (what this asserts is that nothing is lost, not how fast).
    let (s, ev) = run_session_within(&relay, "many", "claude-code", &cwd, json!({}), LIMIT * 4).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}");
    assert_eq!(model.left(), 0, "every answer taken");
    assert!(ev.len() > 2000, "{} events", ev.len());
    assert!(!kinds(&ev).contains(&"harness.unknown"), "every line known");
    assert!(!kinds(&ev).contains(&"harness.truncated"), "nothing dropped");
    let ids = |kind: &str| -> Vec<String> {
        ev.iter()
            .filter(|(k, _)| k == kind)
            .map(|(_, d)| d["tool_id"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let (starts, ends) = (ids("tool.start"), ids("tool.end"));
    assert_eq!(starts.len(), 1000, "every call started");
    let mut unique = starts.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 1000, "none twice");
    let mut ended = ends.clone();
    ended.sort();
    assert_eq!(ended, unique, "every call ended, once");
}

/// A subscription's login (`CLAUDE_CODE_OAUTH_TOKEN`) whose five-hour window the model's limiter
/// reports 97% used: the real CLI writes `rate_limit_event`, hangar records a `rate_limit` event
/// and keeps the window for the credential, and the plan gate (`HANGAR_USAGE_GATE_PCT`, 95) holds
/// the next turn on that credential `queued/plan_limit`; one that sets `ignore_limits` runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plans_usage_from_the_model_gates_the_next_turn() {
    let Some(claude) = claude_as_root() else { return };
    let state = StateDir::new();
    let relay = relay_for(&claude, &state);
    let cwd = exec(&relay, "mkdir -p repo && cd repo && pwd").await.trim().to_string();
    let model = Model::start(vec![Step::text("Used."), Step::text("Past the gate.")]);
    let resets_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() + 3600)
        .unwrap_or_default();
    model.plan_usage(0.97, resets_at);
    put_secret(&relay, "CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-stand-in-token").await;
    put_secret(&relay, "ANTHROPIC_BASE_URL", &model.url()).await;
    put_secret(&relay, "CLAUDE_CODE_MAX_RETRIES", "00000001").await;
    let secrets = json!(["CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_MAX_RETRIES"]);
    let body = |name: &str, ignore: bool| {
        json!({"name": name, "sandbox": "default", "harness": "claude-code", "prompt": "Go.", "cwd": cwd,
            "secrets": secrets, "ignore_limits": ignore})
    };

    start(&relay, ADMIN, body("used", false)).await;
    let s = until_ended(&relay, ADMIN, "used", LIMIT).await;
    let ev = agent_events(&all_events(&relay, ADMIN, "used").await);
    assert_eq!(s["state"], json!("succeeded"), "{s}\nevents: {ev:#?}");
    assert!(!kinds(&ev).contains(&"harness.unknown"), "every line known: {ev:#?}");
    let limits: Vec<&Value> = ev.iter().filter(|(k, _)| k == "rate_limit").map(|(_, d)| d).collect();
    let five = limits.iter().find(|d| d["window"] == json!("five_hour")).unwrap_or_else(|| panic!("{ev:#?}"));
    assert_eq!((&five["used_pct"], &five["resets_at"]), (&json!(97.0), &json!(resets_at)), "{five}");
    let usage = relay.call("GET", "/api/usage", Some(ADMIN), None).await.json();
    assert!(usage.to_string().contains("five_hour"), "the window is kept: {usage}");

    let gated = start(&relay, ADMIN, body("gated", false)).await;
    let warned = gated["warnings"].to_string();
    assert!(warned.contains("five_hour at 97%"), "the start warns: {gated}");
    // The turn is accepted `queued`; its driver then finds the gate closed.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let g = relay.call("GET", "/api/sessions/gated", Some(ADMIN), None).await.json();
        if g["turns"][0]["reason"] == json!("plan_limit") {
            assert_eq!(g["turns"][0]["state"], json!("queued"), "{g}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not held by the plan gate: {g}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    start(&relay, ADMIN, body("anyway", true)).await;
    let s = until_ended(&relay, ADMIN, "anyway", LIMIT).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}");
    let still = relay.call("GET", "/api/sessions/gated", Some(ADMIN), None).await.json();
    assert_eq!(still["turns"][0]["reason"], json!("plan_limit"), "still held until the window resets: {still}");
}
