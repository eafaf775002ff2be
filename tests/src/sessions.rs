//! Agent sessions as tests drive them: harness profiles that stand in for the agent CLIs
//! (replaying a real or hand-written capture a line every 100 ms), and the reads a client makes.
use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use serde_json::{json, Value};

use crate::relay::Relay;

/// A fixture of `agents/fixtures/`.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../agents/fixtures").join(name)
}

/// The events hangar-agents' parser makes of a fixture (its golden file): `(type, data)`.
pub fn golden(name: &str) -> Vec<(String, Value)> {
    let path = fixture(&name.replace(".jsonl", ".events.jsonl"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("golden line");
            (v["type"].as_str().expect("type").to_string(), v["data"].clone())
        })
        .collect()
}

/// A bash command replaying the file at `$1` a line every `delay` seconds (the prompt, on
/// stdin, goes to `prompt.seen` in the working directory first).
pub fn replay_argv(path: &str, delay: f64) -> Vec<String> {
    vec![
        "bash".into(),
        "-c".into(),
        format!("cat > prompt.seen; while IFS= read -r l; do printf '%s\\n' \"$l\"; sleep {delay}; done < \"$1\""),
        "replay".into(),
        path.into(),
    ]
}

/// A harness profile in the TOML `--harnesses` takes.
pub fn profile(name: &str, new: &[String], follow_up: Option<&[String]>, format: &str, ids: &str) -> String {
    let list = |v: &[String]| serde_json::to_string(v).expect("argv");
    let mut s = format!("[harness.{name}]\nnew = {}\n", list(new));
    if let Some(f) = follow_up {
        s.push_str(&format!("follow_up = {}\n", list(f)));
    }
    s.push_str(&format!("format = \"{format}\"\nsession_ids = \"{ids}\"\n\n"));
    s
}

/// Writes `profiles` to a harness file beside `state`; its path, for `HANGAR_HARNESSES`.
pub fn harness_file(state: &Path, profiles: &[String]) -> PathBuf {
    let path = state.with_extension("harnesses.toml");
    std::fs::write(&path, profiles.concat()).expect("harness file");
    path
}

/// Stores a relay secret `name` (as the admin); fails the test unless it is created (201).
pub async fn put_secret(relay: &Relay, name: &str, value: &str) {
    let body = json!({"name": name, "value": value});
    let r = relay.call("POST", "/api/secrets", Some(crate::relay::ADMIN), Some(body)).await;
    assert_eq!(r.status, 201, "{r:?}");
}

/// Starts a session; fails the test unless it is created (201).
pub async fn start(relay: &Relay, token: &str, body: Value) -> Value {
    let r = relay.call("POST", "/api/sessions", Some(token), Some(body.clone())).await;
    assert_eq!(r.status, 201, "{body}: {r:?}");
    r.json()
}

pub async fn get(relay: &Relay, token: &str, session: &str) -> Value {
    let r = relay.call("GET", &format!("/api/sessions/{session}"), Some(token), None).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

/// Waits (long polls) until the session's latest turn is terminal; the session then.
pub async fn until_ended(relay: &Relay, token: &str, session: &str, limit: Duration) -> Value {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let s = get(relay, token, session).await;
        let state = s["state"].as_str().unwrap_or_default().to_string();
        if ["succeeded", "failed", "crashed", "cancelled", "timed_out"].contains(&state.as_str()) {
            return s;
        }
        assert!(std::time::Instant::now() < deadline, "session {session} still {state} after {limit:?}: {s}");
        let since = s["events_cursor"].as_i64().unwrap_or(0);
        let path = format!("/api/sessions/{session}/events?since={since}&wait=2");
        relay.call("GET", &path, Some(token), None).await;
    }
}

/// Every event recorded, in seq order (read in pages).
pub async fn all_events(relay: &Relay, token: &str, session: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut since = 0;
    loop {
        let r = relay
            .call("GET", &format!("/api/sessions/{session}/events?since={since}&limit=100"), Some(token), None)
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        let page = r.json();
        let events = page["events"].as_array().expect("events").clone();
        since = page["next"].as_i64().expect("next");
        let more = page["more"] == json!(true);
        out.extend(events);
        if !more {
            return out;
        }
    }
}

/// The events the agent's output made (not hangar's own `run.state`), as `(type, data)`.
pub fn agent_events(events: &[Value]) -> Vec<(String, Value)> {
    events
        .iter()
        .filter(|e| e["type"] != "run.state")
        .map(|e| (e["type"].as_str().unwrap_or_default().to_string(), e["data"].clone()))
        .collect()
}

/// Seqs are 1, 2, 3... with nothing missing or repeated.
pub fn assert_contiguous(events: &[Value]) {
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().expect("seq")).collect();
    let want: Vec<i64> = (1..=seqs.len() as i64).collect();
    assert_eq!(seqs, want, "seqs are not 1..n");
}

/// The `run.state` transitions, as `from>to:reason`.
pub fn states(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "run.state")
        .map(|e| {
            let d = &e["data"];
            format!(
                "{}>{}:{}",
                d["from"].as_str().unwrap_or_default(),
                d["to"].as_str().unwrap_or_default(),
                d["reason"].as_str().unwrap_or("-")
            )
        })
        .collect()
}

/// The log hangar reads for a session's first turn: its trusted copy where the split holds.
pub async fn log_path(relay: &Relay, s: &Value) -> String {
    let turn = s["turns"][0]["id"].as_str().expect("turn");
    if s["split"] == json!(true) {
        let sandbox = relay.call("GET", "/api/sandboxes/default", Some(crate::relay::ADMIN), None).await.json();
        format!("/var/lib/hangar/runs/{}/{turn}.log", sandbox["id"].as_str().expect("id"))
    } else {
        // The agent's own run directory, in the sandbox user's home.
        let body = json!({"command": "cd && pwd"});
        let r = relay.call("POST", "/api/sandboxes/default/exec", Some(crate::relay::ADMIN), Some(body)).await;
        let home = r.json()["stdout"].as_str().expect("the home").trim().to_string();
        format!("{home}/.hangar/runs/{turn}.log")
    }
}

/// The caller's inbox: its open items, or with `ended` the latest ended ones.
pub async fn inbox(relay: &Relay, token: &str, ended: bool) -> Value {
    let r = relay.call("GET", &format!("/api/inbox?ended={ended}"), Some(token), None).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

/// Waits (40 s at most) for an open item of `kind` from `session`; the item.
pub async fn item_of(relay: &Relay, token: &str, kind: &str, session: &str) -> Value {
    let limit = Duration::from_secs(40);
    let deadline = std::time::Instant::now() + limit;
    loop {
        let v = inbox(relay, token, false).await;
        let found = v["items"]
            .as_array()
            .expect("items")
            .iter()
            .find(|i| i["kind"] == kind && i["session_name"] == session)
            .cloned();
        if let Some(i) = found {
            return i;
        }
        if std::time::Instant::now() >= deadline {
            let events = all_events(relay, crate::relay::ADMIN, session).await;
            panic!("no {kind} item from {session} after {limit:?}: {v}\nevents: {events:?}\nrelay: {}", relay.log());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `command` in the default sandbox's working directory (as an admin); its stdout, after
/// asserting it exited 0.
pub async fn exec_ok(relay: &Relay, command: &str) -> String {
    let body = json!({ "command": command });
    let r = relay.call("POST", "/api/sandboxes/default/exec", Some(crate::relay::ADMIN), Some(body)).await;
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    assert_eq!(v["exit_code"], json!(0), "{command}: {v}");
    v["stdout"].as_str().unwrap_or_default().to_string()
}
