//! The relay's path for a daemon without hangar's extensions (E2B's own envd), end to end: the
//! real relay's `docker` provider on `hangar-test:e2b-envd`, whose hangar-envd runs `--e2b-only`
//! and so speaks E2B's protocol alone. The relay detects it, follows background processes itself
//! (its own 256 KiB ring with offsets, attach with `since` and gaps), watches through E2B's
//! `WatchDir`, finds its processes again by tag after a restart (saying the earlier output is
//! lost), says what it cannot do, and runs a session's turn by polling. Without Docker these
//! tests fail under CI=true and are skipped, with a notice, otherwise (see hangar_e2e::docker).
//!
//! Every shared case with a daemon runs here (`platform_cases!` below). The cases without a
//! daemon do not: a sandbox without one has no daemon kind, so they would run the docker
//! platform's very path again (`a_sandbox_without_the_daemon_falls_back_to_the_providers_exec`,
//! `background_processes_without_the_daemon_are_detached_and_polled`,
//! `an_unattached_process_without_the_daemon_is_still_watched`,
//! `without_the_daemon_a_turn_is_polled_and_cancel_still_works`: relay_docker runs them).
use std::time::Duration;

use hangar_e2e::{
    docker::{self, container_of, docker_ok, sandbox_of, Containers, E2B_ENVD_IMAGE, ENVD_IMAGE},
    platform::Platform,
    platform_cases,
    relay::{Relay, StateDir, ADMIN},
    sessions::{self, harness_file, profile},
    within, STEP,
};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(30);

/// The `docker` provider with the daemon on `hangar-test:e2b-envd`: every shared case that
/// needs a daemon runs against E2B's protocol alone.
fn e2b_envd(test: &str) -> Option<Platform> {
    docker::available(test).then(|| {
        Platform::new("docker with E2B's envd", "docker", json!({"image": E2B_ENVD_IMAGE}), None, Vec::new(), None)
            .without_follow()
    })
}

platform_cases!(e2b_envd;
    a_sandbox_with_the_daemon_streams_through_it,
    options_reach_commands_through_the_daemon_and_without_it,
    pause_resume_and_destroy,
    a_removed_sandbox_is_reported_and_can_be_destroyed,
    with_the_daemon_a_turn_is_followed_and_split_and_forgeries_change_nothing,
    a_destroyed_sandbox_cancels_its_turns_and_a_vanished_one_crashes_them,
    a_job_creates_its_sandbox_runs_and_verifies_there_and_a_failing_verification_fails_the_next,
);

fn docker_relay(test: &str) -> Option<(Containers, StateDir, Relay)> {
    if !docker::available(test) {
        return None;
    }
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    Some((Containers::new(), state, relay))
}

/// A sandbox of the E2B-envd image: its name and id.
async fn e2b_sandbox(relay: &Relay, containers: &mut Containers) -> (String, String) {
    let v = sandbox_of(relay, containers, "e2b", E2B_ENVD_IMAGE, None).await;
    assert_eq!((v["daemon"].clone(), v["daemon_kind"].clone()), (json!(true), json!("e2b")), "{v}");
    (v["name"].as_str().expect("name").to_string(), v["id"].as_str().expect("id").to_string())
}

async fn call(relay: &Relay, token: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let r = relay.call(method, path, Some(token), body).await;
    let v = if r.body.is_empty() { Value::Null } else { r.json() };
    (r.status, v)
}

async fn start(relay: &Relay, token: &str, sbx: &str, command: &str) -> String {
    let (status, v) =
        call(relay, token, "POST", &format!("/api/sandboxes/{sbx}/processes"), Some(json!({"command": command}))).await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["polled"], Value::Null, "through the daemon, not polled: {v}");
    v["process_id"].as_str().expect("id").to_string()
}

async fn process(relay: &Relay, token: &str, sbx: &str, id: &str) -> Value {
    let (status, v) = call(relay, token, "GET", &format!("/api/sandboxes/{sbx}/processes/{id}?since=0"), None).await;
    assert_eq!(status, 200, "{v}");
    v
}

/// Reads the process until `done` holds of it (bounded).
async fn until(relay: &Relay, token: &str, sbx: &str, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    within(LIMIT, what, async {
        loop {
            let v = process(relay, token, sbx, id).await;
            if done(&v) {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

/// The daemon kind is told apart and recorded; a streamed exec works as on hangar-envd (E2B's
/// `Start` is all it needs).
#[tokio::test]
async fn the_daemon_is_detected_and_commands_stream() {
    let Some((mut containers, _state, relay)) = docker_relay("the_daemon_is_detected_and_commands_stream") else {
        return;
    };
    let (sbx, _) = e2b_sandbox(&relay, &mut containers).await;
    let hangar = sandbox_of(&relay, &mut containers, "hangar", ENVD_IMAGE, None).await;
    assert_eq!(hangar["daemon_kind"], json!("hangar"), "{hangar}");
    let listed = call(&relay, ADMIN, "GET", &format!("/api/sandboxes/{sbx}"), None).await.1;
    assert_eq!(listed["daemon_kind"], json!("e2b"), "kept in the sandbox's record: {listed}");

    let body = json!({"command": "echo out; echo err >&2; exit 3"});
    let mut s = relay.sse("POST", &format!("/api/sandboxes/{sbx}/exec/stream"), Some(ADMIN), Some(body)).await;
    assert_eq!(s.status, 200);
    let events = s.collect(STEP).await;
    let (last, rest) = events.split_last().expect("a result");
    assert_eq!((last.event.as_str(), last.json()["exit_code"].clone()), ("result", json!(3)), "{events:?}");
    let text = |kind: &str| -> String {
        rest.iter().filter(|e| e.event == kind).map(|e| e.json()["data"].as_str().unwrap_or("").to_string()).collect()
    };
    assert_eq!((text("stdout"), text("stderr")), ("out\n".to_string(), "err\n".to_string()), "{events:?}");
    let (status, v) =
        call(&relay, ADMIN, "POST", &format!("/api/sandboxes/{sbx}/exec"), Some(json!({"command": "id -un"}))).await;
    assert_eq!((status, v["stdout"].clone()), (200, json!("root\n")), "{v}");
}

/// A process nobody attached to: the relay kept its last 256 KiB with their offsets, so an
/// attach later reads from `since`, and one whose `since` left the ring gets a gap of exactly
/// the bytes lost; its exit is kept.
#[tokio::test]
async fn a_background_process_is_followed_by_the_relay_with_since_and_gaps() {
    let Some((mut containers, _state, relay)) =
        docker_relay("a_background_process_is_followed_by_the_relay_with_since_and_gaps")
    else {
        return;
    };
    let (sbx, _) = e2b_sandbox(&relay, &mut containers).await;
    // 300,000 bytes, then a last line: more than the ring keeps.
    let id = start(&relay, ADMIN, &sbx, "head -c 300000 /dev/zero | tr '\\0' a; printf 'tail-end\\n'; exit 4").await;
    until(&relay, ADMIN, &sbx, &id, "the process ends", |v| v["process"]["state"] == json!("exited")).await;
    // Read again: the read that saw the end was answered before it.
    let v = process(&relay, ADMIN, &sbx, &id).await;
    let total: u64 = 300_009;
    let ring: u64 = 256 * 1024;
    assert_eq!(
        (
            v["process"]["exit_code"].clone(),
            v["process"]["output_bytes"].clone(),
            v["since"].clone(),
            v["lost"].clone(),
            v["next"].clone()
        ),
        (json!(4), json!(total), json!(0), json!(total - ring), json!(total)),
        "read from 0: the bytes no longer kept are counted as lost"
    );
    let out = v["output"].as_str().unwrap_or("");
    assert!(
        out.ends_with("aaaa\ntail-end\n") || out.ends_with("atail-end\n"),
        "{}",
        &out[out.len().saturating_sub(40)..]
    );
    assert_eq!(out.len() as u64, ring);

    let path = format!("/api/sandboxes/{sbx}/processes/{id}");
    let (_, tail) = call(&relay, ADMIN, "GET", &format!("{path}?since=300000"), None).await;
    assert_eq!((tail["output"].clone(), tail["lost"].clone()), (json!("tail-end\n"), json!(0)), "{tail}");
    let (status, past) = call(&relay, ADMIN, "GET", &format!("{path}?since=400000"), None).await;
    assert_eq!(status, 400, "since past the end: {past}");

    // The SSE stream from 0: the gap first, then the output kept, then the end.
    let mut s = relay.sse("GET", &format!("{path}/stream?since=0"), Some(ADMIN), None).await;
    assert_eq!(s.status, 200);
    let events = s.collect(STEP).await;
    assert_eq!(events[0].event, "gap", "{:?}", &events[..2]);
    assert_eq!(events[0].json(), json!({"from": 0, "to": total - ring, "lost": total - ring}));
    let last = events.last().expect("the end");
    assert_eq!(
        (last.event.as_str(), last.json()["exit_code"].clone(), last.json()["total"].clone()),
        ("end", json!(4), json!(total))
    );
    let streamed: usize =
        events.iter().filter(|e| e.event == "output").map(|e| e.json()["data"].as_str().unwrap_or("").len()).sum();
    assert_eq!(streamed as u64, ring);

    // Input reaches it, and a kill ends it; another token's process does not exist for the caller.
    let cat = start(&relay, ADMIN, &sbx, "cat").await;
    let (status, _) = call(
        &relay,
        ADMIN,
        "POST",
        &format!("/api/sandboxes/{sbx}/processes/{cat}/input"),
        Some(json!({"input": "hello\n", "eof": true})),
    )
    .await;
    assert_eq!(status, 204);
    let v = until(&relay, ADMIN, &sbx, &cat, "cat ends", |v| v["process"]["state"] == json!("exited")).await;
    assert_eq!((v["output"].clone(), v["process"]["exit_code"].clone()), (json!("hello\n"), json!(0)), "{v}");
    let sleeper = start(&relay, ADMIN, &sbx, "sleep 300").await;
    // Shared with everyone: what keeps another token out is the process's owner, not the sandbox's.
    relay.share(&sbx, &["*"]).await;
    let other = relay.token("other", "user").await;
    let (status, v) =
        call(&relay, &other.secret, "GET", &format!("/api/sandboxes/{sbx}/processes/{sleeper}"), None).await;
    assert_eq!(status, 404, "{v}");
    let (_, mine) = call(&relay, &other.secret, "GET", &format!("/api/sandboxes/{sbx}/processes"), None).await;
    assert_eq!(mine["processes"], json!([]), "{mine}");
    let (status, _) = call(&relay, ADMIN, "DELETE", &format!("/api/sandboxes/{sbx}/processes/{sleeper}"), None).await;
    assert_eq!(status, 202);
    let v =
        until(&relay, ADMIN, &sbx, &sleeper, "the kill ends it", |v| v["process"]["state"] == json!("exited")).await;
    assert_eq!(v["process"]["status"], json!("signal: terminated"), "{v}");
}

/// A watch goes through E2B's `WatchDir`: the relay numbers its changes as hangar-envd does.
#[tokio::test]
async fn a_watch_goes_through_e2bs_watch_dir() {
    let Some((mut containers, _state, relay)) = docker_relay("a_watch_goes_through_e2bs_watch_dir") else {
        return;
    };
    let (sbx, _) = e2b_sandbox(&relay, &mut containers).await;
    let path = format!("/api/sandboxes/{sbx}/exec");
    let exec = |cmd: &str| call(&relay, ADMIN, "POST", &path, Some(json!({"command": cmd})));
    // tmpfs: the test's Docker may store containers on FUSE, which a watch refuses by default.
    let (status, v) = exec("mkdir -p /dev/shm/w").await;
    assert_eq!(status, 200, "{v}");
    let mut s = relay.sse("GET", &format!("/api/sandboxes/{sbx}/watch?path=/dev/shm/w"), Some(ADMIN), None).await;
    assert_eq!(s.status, 200);
    assert_eq!(exec("touch /dev/shm/w/a && mkdir /dev/shm/w/d").await.0, 200);
    let mut seen = Vec::new();
    while !seen.iter().any(|(_, name, _): &(Value, Value, Value)| name == "d") {
        let ev = s.next(STEP).await.expect("a change");
        if ev.event == "change" {
            let d = ev.json();
            seen.push((d["seq"].clone(), d["name"].clone(), d["type"].clone()));
        }
    }
    assert_eq!(seen[0], (json!(1), json!("a"), json!("create")), "{seen:?}");
    let seqs: Vec<Value> = seen.iter().map(|c| c.0.clone()).collect();
    let want: Vec<Value> = (1..=seen.len()).map(|n| json!(n)).collect();
    assert_eq!(seqs, want, "numbered from 1 by the relay: {seen:?}");
    assert_eq!(seen.last().map(|c| c.2.clone()), Some(json!("create")), "{seen:?}");
}

/// After a relay restart (kill -9): the running processes are found again by their tags and
/// followed from then on, said to have lost their earlier output; one that ended while the
/// relay was down cannot be found, and the answer says why.
#[tokio::test]
async fn after_a_restart_processes_are_adopted_by_tag_and_the_earlier_output_is_said_lost() {
    let test = "after_a_restart_processes_are_adopted_by_tag_and_the_earlier_output_is_said_lost";
    let Some((mut containers, state, relay)) = docker_relay(test) else {
        return;
    };
    let (sbx, sbx_id) = e2b_sandbox(&relay, &mut containers).await;
    relay.share(&sbx, &["*"]).await;
    let user = relay.token("someone", "user").await;
    let echo = start(&relay, &user.secret, &sbx, "echo before; cat").await;
    let ended = start(&relay, &user.secret, &sbx, "cat").await;
    until(&relay, &user.secret, &sbx, &echo, "its first line", |v| v["output"] == json!("before\n")).await;
    let pid = process(&relay, &user.secret, &sbx, &ended).await["process"]["pid"].as_u64().expect("pid");

    drop(relay);
    // Ends while no relay follows it.
    docker_ok(&["exec", &container_of(&sbx_id), "kill", &pid.to_string()]);
    let relay = Relay::start(&state.0, &[]);
    // Recovery follows what runs before anyone asks (its log line says how many). Waited for in
    // this sandbox's line: the `default` sandbox has one too, and a read made before this
    // sandbox's recovery would follow the process itself, leaving recovery nothing to follow.
    let recovered = format!("event=\"recovered\" sandbox=\"{sbx}\"");
    within(LIMIT, "recovery", async {
        while !relay.log().contains(&recovered) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    let v = process(&relay, &user.secret, &sbx, &echo).await;
    assert_eq!(
        (v["process"]["state"].clone(), v["process"]["adopted"].clone(), v["process"]["earlier_output"].clone()),
        (json!("running"), json!(true), json!("lost")),
        "{v}"
    );
    let path = format!("/api/sandboxes/{sbx}/processes/{echo}");
    let mut s = relay.sse("GET", &format!("{path}/stream"), Some(&user.secret), None).await;
    assert_eq!(s.status, 200);
    let first = s.next(STEP).await.expect("the loss is said first");
    assert_eq!(first.event, "lost", "{first:?}");
    assert!(first.json()["message"].as_str().unwrap_or("").contains("adopted"), "{first:?}");
    let (status, _) =
        call(&relay, &user.secret, "POST", &format!("{path}/input"), Some(json!({"input": "after\n", "eof": true})))
            .await;
    assert_eq!(status, 204);
    let rest = s.collect(STEP).await;
    let out: String = rest
        .iter()
        .filter(|e| e.event == "output")
        .map(|e| e.json()["data"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(out, "after\n", "output from the adoption on: {rest:?}");
    assert_eq!(rest.last().map(|e| e.event.as_str()), Some("end"), "{rest:?}");

    let (status, v) = call(&relay, &user.secret, "GET", &format!("/api/sandboxes/{sbx}/processes/{ended}"), None).await;
    assert_eq!(status, 404, "{v}");
    assert!(v["error"]["message"].as_str().unwrap_or("").contains("lists running processes only"), "{v}");
    let log = relay.log();
    let line = log.lines().find(|l| l.contains(&recovered)).unwrap_or_default();
    assert!(line.contains("followed=1"), "recovery followed the one running process: {line}");
}

/// A cancel on E2B's envd, which has no group signal with escalation: the relay signals the
/// supervisor by script, as root (a split supervisor is root's), and the turn ends cancelled.
/// The cancel comes the moment the turn is running, when E2B's envd has reported the
/// supervisor's pid but bash may not yet have written its pid file (that signal was once lost).
/// (A turn's run, polled, the uid split and forgeries: the shared case above.)
#[tokio::test]
async fn a_running_turn_is_cancelled() {
    if !docker::available("a_running_turn_is_cancelled") {
        return;
    }
    let state = StateDir::new();
    let init = r#"{"type":"system","subtype":"init","session_id":"s","model":"m","cwd":"/"}"#;
    let sleeper = format!("cat >/dev/null; echo '{init}'; exec sleep 60").replace('{', "{{").replace('}', "}}");
    let profiles = vec![profile("sleeper", &["bash".into(), "-c".into(), sleeper], None, "claude-stream-json", "none")];
    let file = harness_file(&state.0, &profiles);
    let relay = Relay::start(
        &state.0,
        &[("HANGAR_HARNESSES", file.to_str().expect("path")), ("HANGAR_SESSION_POLL_SECONDS", "0.3")],
    );
    let mut containers = Containers::new();
    let v = sandbox_of(&relay, &mut containers, "sessions", E2B_ENVD_IMAGE, Some("user")).await;
    let sbx = v["name"].as_str().expect("name");
    let body = json!({"name": "cancel", "sandbox": sbx, "harness": "sleeper", "prompt": "go", "cwd": "/tmp"});
    sessions::start(&relay, ADMIN, body).await;
    within(LIMIT, "the turn runs", async {
        while sessions::get(&relay, ADMIN, "cancel").await["state"] != json!("running") {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    relay.call("POST", "/api/sessions/cancel/cancel", Some(ADMIN), None).await;
    let s = sessions::until_ended(&relay, ADMIN, "cancel", LIMIT).await;
    assert_eq!((s["state"].clone(), s["split"].clone()), (json!("cancelled"), json!(true)), "{s}");
    assert_eq!(s["reason"], json!("cancel_agent"), "{s}");
}
