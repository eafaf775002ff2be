//! Many turns at once in one sandbox: 50 sessions started together, each in its own working
//! directory, then 20 follow-ups together; every turn runs its harness and ends `succeeded`,
//! every line it printed recorded, its events in order, none twice. Local (the relay as root:
//! the uid split) and Docker with the daemon and a `user` (the split too). The Docker test fails under CI=true
//! without Docker and is skipped, with a notice, otherwise.
use std::time::Duration;

use futures::future::join_all;
use hangar_e2e::{
    docker::{self, sandbox_of, Containers, ENVD_IMAGE},
    relay::{Relay, StateDir, ADMIN},
    sessions::{all_events, assert_contiguous, harness_file, profile, start, states, until_ended},
};
use serde_json::{json, Value};

const SESSIONS: usize = 50;
const FOLLOW_UPS: usize = 20;
const LIMIT: Duration = Duration::from_secs(180);

/// Prints five numbered lines, the turn's, then ends well.
const SAY: &str = "cat >/dev/null; for i in 1 2 3 4 5; do echo \"line $i of $HANGAR_TURN\"; done";

fn relay(state: &StateDir) -> Relay {
    let argv: Vec<String> = ["bash", "-c", SAY].iter().map(|s| s.to_string()).collect();
    let file = harness_file(&state.0, &[profile("say", &argv, Some(&argv), "claude-stream-json", "none")]);
    Relay::start(
        &state.0,
        &[("HANGAR_HARNESSES", file.to_str().expect("path")), ("HANGAR_MAX_RUNS_PER_CREDENTIAL", "1000")],
    )
}

/// Makes `n` working directories in the sandbox; their paths.
async fn workdirs(relay: &Relay, sandbox: &str, base: &str, n: usize) -> Vec<String> {
    let dirs: Vec<String> = (0..n).map(|i| format!("{base}/w{i}")).collect();
    let r = relay
        .call(
            "POST",
            &format!("/api/sandboxes/{sandbox}/exec"),
            Some(ADMIN),
            Some(json!({"command": format!("mkdir -p {}", dirs.join(" "))})),
        )
        .await;
    assert_eq!((r.status, r.json()["exit_code"].clone()), (200, json!(0)), "{r:?}");
    dirs
}

/// The session's turns each ran the harness once and succeeded with their events in order,
/// and every line the harness printed was recorded once.
async fn assert_every_turn_whole(relay: &Relay, name: &str, turns: usize) {
    let s = until_ended(relay, ADMIN, name, LIMIT).await;
    let events = all_events(relay, ADMIN, name).await;
    assert_contiguous(&events);
    let got = s["turns"].as_array().map(Vec::len).unwrap_or(0);
    assert_eq!(got, turns, "{name}: {s}");
    let mut want_states = Vec::new();
    let mut want_lines = Vec::new();
    for t in s["turns"].as_array().expect("turns") {
        assert_eq!(t["state"], json!("succeeded"), "{name}: {t}\nevents: {events:?}");
        let id = t["id"].as_str().expect("turn id");
        want_lines.extend((1..=5).map(|i| format!("line {i} of {id}")));
        want_states.extend(["queued>starting:-", "starting>running:-", "running>succeeded:ok"].map(String::from));
    }
    assert_eq!(states(&events), want_states, "{name}");
    let got: Vec<String> = events.iter().filter_map(|e| e["data"]["raw"].as_str().map(str::to_string)).collect();
    if got != want_lines {
        // What the logs hold, to tell a line never written from one never read.
        let sandbox = s["sandbox"].as_str().unwrap_or_default();
        let row = relay.call("GET", &format!("/api/sandboxes/{sandbox}"), Some(ADMIN), None).await.json();
        let ids: Vec<&str> = s["turns"].as_array().expect("turns").iter().filter_map(|t| t["id"].as_str()).collect();
        let dir = format!("/var/lib/hangar/runs/{}", row["id"].as_str().unwrap_or_default());
        let command =
            ids.iter().map(|t| format!("ls -l {dir}/{t}.*; cat {dir}/{t}.log")).collect::<Vec<_>>().join("; ");
        let path = format!("/api/sandboxes/{sandbox}/exec");
        let r = relay.call("POST", &path, Some(ADMIN), Some(json!({"command": command}))).await;
        panic!(
            "{name}: every line once, in order: got {got:?}, want {want_lines:?}\nsession: {s}\nlogs: {:?}",
            r.json()
        );
    }
}

async fn many_at_once(relay: &Relay, sandbox: &str, base: &str) {
    let dirs = workdirs(relay, sandbox, base, SESSIONS).await;
    let starts = dirs.iter().enumerate().map(|(i, cwd)| {
        let body = json!({"name": format!("m{i}"), "sandbox": sandbox, "harness": "say", "prompt": "go", "cwd": cwd});
        start(relay, ADMIN, body)
    });
    join_all(starts).await;
    for i in 0..SESSIONS {
        assert_every_turn_whole(relay, &format!("m{i}"), 1).await;
    }
    let follow_ups = (0..FOLLOW_UPS).map(|i| async move {
        let path = format!("/api/sessions/m{i}/turns");
        let r = relay.call("POST", &path, Some(ADMIN), Some(json!({"prompt": "again"}))).await;
        assert_eq!(r.status, 201, "m{i}: {r:?}");
    });
    join_all(follow_ups).await;
    for i in 0..SESSIONS {
        assert_every_turn_whole(relay, &format!("m{i}"), if i < FOLLOW_UPS { 2 } else { 1 }).await;
    }
}

async fn default_sandbox(relay: &Relay) -> String {
    let sandbox: Value = relay.call("GET", "/api/sandboxes/default", Some(ADMIN), None).await.json();
    sandbox["workdir"].as_str().expect("workdir").to_string()
}

#[tokio::test]
async fn fifty_turns_at_once_in_a_local_sandbox_all_run_and_succeed() {
    let state = StateDir::new();
    let relay = relay(&state);
    let base = default_sandbox(&relay).await;
    many_at_once(&relay, "default", &base).await;
}

#[tokio::test]
async fn fifty_turns_at_once_in_a_docker_sandbox_all_run_and_succeed() {
    if !docker::available("fifty_turns_at_once_in_a_docker_sandbox_all_run_and_succeed") {
        return;
    }
    let mut containers = Containers::new();
    let state = StateDir::new();
    let relay = relay(&state);
    let sbx = sandbox_of(&relay, &mut containers, "many", ENVD_IMAGE, Some("user")).await;
    let name = sbx["name"].as_str().expect("name").to_string();
    many_at_once(&relay, &name, "/home/user").await;
}
