//! Jobs on the local provider, end to end through the real relay: a harness profile stands in
//! for the agent (it commits in the sandbox's git repository and reports a PR URL). A job runs
//! its session, verifies, and records what hangar measured with git; a failing verification or
//! turn fails it; an idempotency key returns the same job; a `jobs` token sees only its own jobs
//! and no sandbox route; cancel ends a running job, and a verifying one with its verification's
//! processes; a relay killed while a job runs or verifies carries it to one measured end; the
//! job stream resumes from Last-Event-ID; bad input gets a clear error.
use std::time::Duration;

use hangar_e2e::sessions::exec_ok as exec;
use hangar_e2e::{
    pids_with,
    relay::{Relay, StateDir, ADMIN},
    sessions::{all_events, assert_contiguous, fixture, harness_file, profile},
    wait_until, STEP,
};
use serde_json::{json, Value};

const PR: &str = "https://github.com/acme/shipper/pull/42";

/// Literal arguments: braces are doubled, since a profile's `{...}` are placeholders.
fn argv(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.replace('{', "{{").replace('}', "}}")).collect()
}

fn profiles() -> Vec<String> {
    let result = format!(
        r#"{{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"Done. Opened {PR} for review."}}"#
    );
    let worker = format!(
        "cat >/dev/null; git -c user.email=a@b -c user.name=agent commit -q --allow-empty -m work; echo '{result}'"
    );
    // Commits, then replays a capture a line every 100 ms (about 3 s).
    let slow = vec![
        "bash".to_string(),
        "-c".to_string(),
        "cat >/dev/null; git -c user.email=a@b -c user.name=agent commit -q --allow-empty -m work; \
         while IFS= read -r l; do printf '%s\\n' \"$l\"; sleep 0.1; done < \"$1\""
            .to_string(),
        "slow".to_string(),
        fixture("claude-long-turn.jsonl").to_string_lossy().into_owned(),
    ];
    vec![
        profile("worker", &argv(&["bash", "-c", &worker]), None, "claude-stream-json", "none"),
        profile("slow", &slow, None, "claude-stream-json", "none"),
        profile("sleeper", &argv(&["bash", "-c", "cat >/dev/null; exec sleep 60"]), None, "claude-stream-json", "none"),
        profile("fails", &argv(&["bash", "-c", "cat >/dev/null; echo oops >&2; exit 3"]), None, "text", "none"),
        profile(
            "forger",
            &argv(&["bash", "-c", &format!("{FORGER}; echo '{result}'")]),
            None,
            "claude-stream-json",
            "none",
        ),
    ]
}

/// An agent that would forge its job's measured result: a login profile that makes `false`
/// succeed, untracked files hidden from `git status` by the repository's configuration and its
/// own exclude file, one of them left behind, and a commit.
const FORGER: &str = "cat >/dev/null; echo 'false() { return 0; }' >> \"$HOME/.bash_profile\"; \
     git config status.showUntrackedFiles no; echo left-behind.txt >> .git/info/exclude; \
     echo half-done > left-behind.txt; git -c user.email=a@b -c user.name=agent commit -q --allow-empty -m work";

fn relay(state: &StateDir) -> Relay {
    let file = harness_file(&state.0, &profiles());
    Relay::start(
        &state.0,
        &[
            ("HANGAR_HARNESSES", file.to_str().expect("path")),
            ("HANGAR_SESSION_POLL_SECONDS", "0.3"),
            // The default sandbox may isolate nothing where the tests run: non-admin tokens
            // may use it all the same.
            ("HANGAR_ALLOW_UNISOLATED_SANDBOXES", "1"),
        ],
    )
}

/// A git repository with one commit on `main`; its head.
async fn repo(relay: &Relay) -> String {
    exec(relay, "git init -q -b main && git -c user.email=a@b -c user.name=t commit -q --allow-empty -m base").await;
    exec(relay, "git rev-parse HEAD").await.trim().to_string()
}

async fn create(relay: &Relay, token: &str, body: Value) -> Value {
    let r = relay.call("POST", "/api/jobs", Some(token), Some(body.clone())).await;
    assert_eq!(r.status, 201, "{body}: {r:?}");
    r.json()
}

async fn get(relay: &Relay, token: &str, id: &str) -> Value {
    let r = relay.call("GET", &format!("/api/jobs/{id}"), Some(token), None).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

/// Polls the job until it is in one of `states`.
async fn until(relay: &Relay, token: &str, id: &str, states: &[&str], limit: Duration) -> Value {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let j = get(relay, token, id).await;
        if states.iter().any(|s| j["state"] == json!(s)) {
            return j;
        }
        assert!(std::time::Instant::now() < deadline, "job {id} not {states:?} after {limit:?}: {j}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn ended(relay: &Relay, token: &str, id: &str) -> Value {
    until(relay, token, id, &["succeeded", "failed", "cancelled"], STEP * 3).await
}

fn job_body(harness: &str, prompt: &str) -> Value {
    json!({ "sandbox": "default", "harness": harness, "prompt": prompt })
}

#[tokio::test]
async fn a_job_runs_its_session_verifies_and_records_what_hangar_measured() {
    let state = StateDir::new();
    let relay = relay(&state);
    let base = repo(&relay).await;
    let mut body = job_body("worker", "add the feature");
    body["verify"] = json!("git log --oneline | wc -l; echo verified");
    let created = create(&relay, ADMIN, body).await;
    let id = created["id"].as_str().expect("id").to_string();
    assert!(id.starts_with("job_"), "{created}");
    assert_eq!(created["state"], json!("queued"), "{created}");

    let job = ended(&relay, ADMIN, &id).await;
    assert_eq!((job["state"].clone(), job["reason"].clone()), (json!("succeeded"), json!("ok")), "{job}");
    assert_eq!(job["base"], json!(base), "{job}");
    let r = &job["result"];
    let head = exec(&relay, "git rev-parse HEAD").await.trim().to_string();
    assert_ne!(head, base, "the agent committed");
    assert_eq!(r["measured_by"], json!("hangar"), "{r}");
    assert_eq!(r["branch"], json!("main"), "{r}");
    assert_eq!(r["head"], json!(head), "{r}");
    assert_eq!(r["base"], json!(base), "{r}");
    assert_eq!(r["commits_ahead"], json!(1), "{r}");
    assert_eq!(r["dirty"], json!(false), "{r}");
    assert_eq!(r["pushed"], Value::Null, "no upstream: {r}");
    assert_eq!(r["verification"]["exit_code"], json!(0), "{r}");
    let tail = r["verification"]["output_tail"].as_str().expect("output_tail");
    assert!(tail.contains('2') && tail.contains("verified"), "{tail}");
    assert_eq!((r["pr_url"].clone(), r["pr_url_source"].clone()), (json!(PR), json!("agent_reported")), "{r}");
    assert_eq!(job["agent_text"], json!(["result.pr_url"]), "{job}");

    // Its session is the person's, named after the job.
    let session = job["session"].as_str().expect("session");
    let r = relay.call("GET", &format!("/api/sessions/{session}"), Some(ADMIN), None).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["name"], json!(format!("job-{}", id.trim_start_matches("job_"))));

    // The job's events are its session's, with the job's own states and result, then a close.
    let mut sse = relay.sse("GET", &format!("/api/jobs/{id}/events/stream"), Some(ADMIN), None).await;
    assert_eq!(sse.status, 200);
    let events = sse.collect(STEP).await;
    let (close, events) = events.split_last().expect("events then close");
    assert_eq!(close.event, "close", "{close:?}");
    let types: Vec<String> = events.iter().map(|e| e.json()["type"].as_str().unwrap_or_default().to_string()).collect();
    assert!(types.contains(&"run.result".to_string()), "{types:?}");
    let job_states: Vec<String> = events
        .iter()
        .map(|e| e.json())
        .filter(|e| e["type"] == "job.state")
        .map(|e| e["data"]["to"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(job_states, ["running", "verifying", "succeeded"], "{types:?}");
    assert_eq!(types.last().map(String::as_str), Some("job.state"), "{types:?}");
    assert!(types.contains(&"job.result".to_string()), "{types:?}");
}

#[tokio::test]
async fn a_failing_verification_or_turn_fails_the_job_with_its_reason() {
    let state = StateDir::new();
    let relay = relay(&state);
    repo(&relay).await;
    let mut body = job_body("worker", "add the feature");
    body["verify"] = json!("echo 'tests failed: 3'; exit 4");
    let id = create(&relay, ADMIN, body).await["id"].as_str().expect("id").to_string();
    let job = ended(&relay, ADMIN, &id).await;
    assert_eq!((job["state"].clone(), job["reason"].clone()), (json!("failed"), json!("verify_failed")), "{job}");
    let v = &job["result"]["verification"];
    assert_eq!(v["exit_code"], json!(4), "{v}");
    assert!(v["output_tail"].as_str().is_some_and(|t| t.contains("tests failed: 3")), "{v}");
    // What the agent did is measured all the same.
    assert_eq!(job["result"]["commits_ahead"], json!(1), "{job}");

    // A turn that fails: no verification runs, the turn's reason is the job's.
    let mut body = job_body("fails", "anything");
    body["verify"] = json!("touch verify-ran");
    let id = create(&relay, ADMIN, body).await["id"].as_str().expect("id").to_string();
    let job = ended(&relay, ADMIN, &id).await;
    assert_eq!((job["state"].clone(), job["reason"].clone()), (json!("failed"), json!("nonzero_exit")), "{job}");
    assert_eq!(job["result"]["verification"], Value::Null, "{job}");
    assert_eq!(exec(&relay, "test -e verify-ran && echo ran || echo not").await.trim(), "not");
}

#[tokio::test]
async fn an_agent_cannot_forge_its_verification_or_hide_what_it_left_behind() {
    let state = StateDir::new();
    let relay = relay(&state);
    repo(&relay).await;
    let mut body = job_body("forger", "add the feature");
    body["verify"] = json!("test -d .git && false");
    let id = create(&relay, ADMIN, body).await["id"].as_str().expect("id").to_string();
    let job = ended(&relay, ADMIN, &id).await;
    // The agent's profile did run for a login shell, and git's own status hides the file.
    let forged = exec(&relay, "bash -lc 'test -d .git && false' && echo passes; git status --porcelain").await;
    assert_eq!(forged.trim(), "passes", "the agent's forgery is in place: {forged}");
    assert_eq!((job["state"].clone(), job["reason"].clone()), (json!("failed"), json!("verify_failed")), "{job}");
    let r = &job["result"];
    assert_eq!(r["verification"]["exit_code"], json!(1), "{r}");
    assert_eq!(r["dirty"], json!(true), "{r}");
    assert_eq!(r["commits_ahead"], json!(1), "{r}");
}

#[tokio::test]
async fn the_same_idempotency_key_returns_the_same_job_and_another_prompt_with_it_conflicts() {
    let state = StateDir::new();
    let relay = relay(&state);
    repo(&relay).await;
    let mut body = job_body("worker", "add the feature");
    body["idempotency_key"] = json!("ci-run-17");
    let first = create(&relay, ADMIN, body.clone()).await;
    let r = relay.call("POST", "/api/jobs", Some(ADMIN), Some(body.clone())).await;
    assert_eq!(r.status, 200, "a replay: {r:?}");
    let again = r.json();
    assert_eq!((again["id"].clone(), again["idempotent_replay"].clone()), (first["id"].clone(), json!(true)));
    body["prompt"] = json!("something else");
    let r = relay.call("POST", "/api/jobs", Some(ADMIN), Some(body)).await;
    assert_eq!(r.status, 409, "{r:?}");
    let r = relay.call("GET", "/api/jobs", Some(ADMIN), None).await;
    assert_eq!(r.json()["jobs"].as_array().map(Vec::len), Some(1), "{r:?}");
}

#[tokio::test]
async fn a_jobs_token_sees_only_its_own_jobs_and_no_sandbox_route() {
    let state = StateDir::new();
    let relay = relay(&state);
    relay.share_default().await;
    repo(&relay).await;
    let a = relay.token("pipeline-a", "jobs").await;
    let b = relay.token("pipeline-b", "jobs").await;
    let user = relay.token("someone", "user").await;
    let mine = create(&relay, &a.secret, job_body("worker", "from a")).await;
    let id = mine["id"].as_str().expect("id").to_string();
    let theirs = create(&relay, &b.secret, job_body("worker", "from b")).await;

    assert_eq!(get(&relay, &a.secret, &id).await["id"], json!(id));
    for (token, who) in [(&b.secret, "another jobs token"), (&user.secret, "another person")] {
        let r = relay.call("GET", &format!("/api/jobs/{id}"), Some(token), None).await;
        assert_eq!(r.status, 404, "{who}: {r:?}");
        let r = relay.call("POST", &format!("/api/jobs/{id}/cancel"), Some(token), None).await;
        assert_eq!(r.status, 404, "{who}: {r:?}");
        let r = relay.call("GET", &format!("/api/jobs/{id}/events/stream"), Some(token), None).await;
        assert_eq!(r.status, 404, "{who}: {r:?}");
    }
    let ids =
        |v: Value| -> Vec<Value> { v["jobs"].as_array().expect("jobs").iter().map(|j| j["id"].clone()).collect() };
    assert_eq!(ids(relay.call("GET", "/api/jobs", Some(&a.secret), None).await.json()), [json!(id)]);
    assert_eq!(ids(relay.call("GET", "/api/jobs", Some(&b.secret), None).await.json()), [theirs["id"].clone()]);
    assert!(ids(relay.call("GET", "/api/jobs", Some(&user.secret), None).await.json()).is_empty());
    assert_eq!(ids(relay.call("GET", "/api/jobs", Some(ADMIN), None).await.json()).len(), 2, "an admin sees all");

    for path in ["/api/sandboxes", "/api/sessions", "/api/sandboxes/default"] {
        let r = relay.call("GET", path, Some(&a.secret), None).await;
        assert_eq!(r.status, 403, "{path}: {r:?}");
    }
    let r = relay.call("POST", "/api/sandboxes/default/exec", Some(&a.secret), Some(json!({"command": "id"}))).await;
    assert_eq!(r.status, 403, "{r:?}");
    ended(&relay, &a.secret, &id).await;
}

#[tokio::test]
async fn cancel_ends_a_running_job_and_its_session() {
    let state = StateDir::new();
    let relay = relay(&state);
    let id = create(&relay, ADMIN, job_body("sleeper", "wait")).await["id"].as_str().expect("id").to_string();
    let job = until(&relay, ADMIN, &id, &["running"], STEP).await;
    let r = relay.call("POST", &format!("/api/jobs/{id}/cancel"), Some(ADMIN), None).await;
    assert_eq!(r.status, 200, "{r:?}");
    let job_after = ended(&relay, ADMIN, &id).await;
    assert_eq!(job_after["state"], json!("cancelled"), "{job_after}");
    let session = job["session"].as_str().expect("session");
    let s = relay.call("GET", &format!("/api/sessions/{session}"), Some(ADMIN), None).await.json();
    assert_eq!(s["state"], json!("cancelled"), "{s}");
    // Cancelling again answers the ended job.
    let r = relay.call("POST", &format!("/api/jobs/{id}/cancel"), Some(ADMIN), None).await;
    assert_eq!((r.status, r.json()["state"].clone()), (200, json!("cancelled")));
}

#[tokio::test]
async fn a_job_with_a_sandbox_spec_creates_its_sandbox_and_keeps_it() {
    let state = StateDir::new();
    let relay = relay(&state);
    let body = json!({ "sandbox_spec": { "provider": "local" }, "harness": "worker", "prompt": "go" });
    let id = create(&relay, ADMIN, body).await["id"].as_str().expect("id").to_string();
    let job = ended(&relay, ADMIN, &id).await;
    let name = format!("job-{}", id.trim_start_matches("job_"));
    assert_eq!((job["state"].clone(), job["created_sandbox"].clone()), (json!("succeeded"), json!(true)), "{job}");
    assert_eq!(job["sandbox"], json!(name), "{job}");
    // Not a git repository: nothing to measure there, and no base.
    assert_eq!((job["result"]["git_repository"].clone(), job["base"].clone()), (json!(false), Value::Null), "{job}");
    let r = relay.call("GET", &format!("/api/sandboxes/{name}"), Some(ADMIN), None).await;
    assert_eq!(r.status, 200, "the sandbox is kept: {r:?}");
}

#[tokio::test]
async fn bad_input_gets_a_clear_error() {
    let state = StateDir::new();
    let relay = relay(&state);
    let cases = [
        (json!({"harness": "worker", "prompt": "x"}), 400, "exactly one of"),
        (
            json!({"sandbox": "default", "sandbox_spec": {"provider": "local"}, "harness": "worker", "prompt": "x"}),
            400,
            "exactly one of",
        ),
        (json!({"sandbox": "default", "harness": "worker", "prompt": " "}), 400, "prompt"),
        (json!({"sandbox": "default", "harness": "nope", "prompt": "x"}), 400, "harness"),
        (json!({"sandbox_spec": {"provider": "nope"}, "harness": "worker", "prompt": "x"}), 400, "provider"),
        (json!({"sandbox": "default", "harness": "worker", "prompt": "x", "timeout_minutes": 0}), 400, "timeout"),
        (json!({"sandbox": "default", "harness": "worker", "prompt": "x", "verify": ""}), 400, "verify"),
        (json!({"sandbox": "default", "harness": "worker", "prompt": "x", "bogus": 1}), 400, "bogus"),
        (json!({"sandbox": "nowhere", "harness": "worker", "prompt": "x"}), 404, "nowhere"),
    ];
    for (body, status, says) in cases {
        let r = relay.call("POST", "/api/jobs", Some(ADMIN), Some(body.clone())).await;
        let text = String::from_utf8_lossy(&r.body).into_owned();
        assert_eq!(r.status, status, "{body}: {text}");
        assert!(text.contains(says), "{body}: {text}");
    }
    let r = relay.call("GET", "/api/jobs/job_nope", Some(ADMIN), None).await;
    assert_eq!(r.status, 404, "{r:?}");
    let r = relay.call("GET", "/api/jobs", Some(ADMIN), None).await;
    assert_eq!(r.json()["jobs"], json!([]), "nothing was created");
}

#[tokio::test]
async fn the_job_stream_resumes_exactly_from_last_event_id() {
    let state = StateDir::new();
    let relay = relay(&state);
    repo(&relay).await;
    let id = create(&relay, ADMIN, job_body("worker", "go")).await["id"].as_str().expect("id").to_string();
    let job = ended(&relay, ADMIN, &id).await;
    let last = job["events_cursor"].as_i64().expect("events_cursor");
    assert!(last > 4, "{job}");
    let path = format!("/api/jobs/{id}/events/stream");
    let auth = format!("Bearer {ADMIN}");
    let send = |last_id: &'static str| {
        let req = hangar_e2e::build_request(
            "GET",
            &path,
            relay.addr,
            false,
            &[("authorization", &auth), ("last-event-id", last_id)],
            hangar_e2e::full_body(Default::default()),
        );
        hangar_e2e::send_http1(relay.addr, req)
    };
    let mut resumed = hangar_e2e::relay::Sse::from_response(send("3").await);
    assert_eq!(resumed.status, 200);
    let events = resumed.collect(STEP).await;
    let seqs: Vec<i64> =
        events.iter().filter(|e| e.event.is_empty()).filter_map(|e| e.json()["seq"].as_i64()).collect();
    assert_eq!(seqs, (4..=last).collect::<Vec<_>>(), "from the event after the last one seen");
    // Each event's SSE id is its seq (what a client sends back as Last-Event-ID).
    let ids: Vec<Option<String>> = events.iter().filter(|e| e.event.is_empty()).map(|e| e.id.clone()).collect();
    assert_eq!(ids, seqs.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>());
    assert_eq!(events.last().map(|e| e.event.as_str()), Some("close"));
    // Last-Event-ID wins over ?since=.
    let req = hangar_e2e::build_request(
        "GET",
        &format!("{path}?since=1"),
        relay.addr,
        false,
        &[("authorization", &auth), ("last-event-id", &last.to_string())],
        hangar_e2e::full_body(Default::default()),
    );
    let mut none = hangar_e2e::relay::Sse::from_response(hangar_e2e::send_http1(relay.addr, req).await);
    let events = none.collect(STEP).await;
    assert_eq!(events.iter().map(|e| e.event.as_str()).collect::<Vec<_>>(), ["close"], "nothing after the last");
    assert_eq!(send("x").await.status(), 400, "a malformed Last-Event-ID is refused");
}

/// The job's events, read through its session: contiguous, with one `job.result` and one
/// terminal `job.state` (the last event); the `job.state`s' `to`s.
async fn job_events_once(relay: &Relay, job: &Value) -> Vec<String> {
    let session = job["session"].as_str().expect("session");
    let events = all_events(relay, ADMIN, session).await;
    assert_contiguous(&events);
    let of = |kind: &str| events.iter().filter(|e| e["type"] == json!(kind)).cloned().collect::<Vec<_>>();
    assert_eq!(of("job.result").len(), 1, "one job.result: {events:?}");
    let states: Vec<String> =
        of("job.state").iter().map(|e| e["data"]["to"].as_str().unwrap_or_default().to_string()).collect();
    let terminal = states.iter().filter(|s| ["succeeded", "failed", "cancelled"].contains(&s.as_str())).count();
    assert_eq!(terminal, 1, "one terminal job.state: {states:?}");
    assert_eq!(events.last().map(|e| e["type"].clone()), Some(json!("job.state")), "the job's end is its last event");
    states
}

/// Kills the relay (SIGKILL, what dropping it does) and starts another on the same state.
async fn restart(relay: Relay, state: &StateDir) -> Relay {
    drop(relay);
    tokio::time::sleep(Duration::from_millis(700)).await;
    self::relay(state)
}

#[tokio::test]
async fn a_relay_killed_while_a_job_runs_carries_it_to_one_measured_end() {
    let state = StateDir::new();
    let relay = relay(&state);
    let base = repo(&relay).await;
    let mut body = job_body("slow", "take your time");
    body["verify"] = json!("echo verified");
    let id = create(&relay, ADMIN, body).await["id"].as_str().expect("id").to_string();
    // Running, some of the agent's events recorded, many to come.
    let deadline = std::time::Instant::now() + STEP;
    loop {
        let j = get(&relay, ADMIN, &id).await;
        if j["state"] == json!("running") && j["events_cursor"].as_i64().unwrap_or(0) >= 8 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not running with events: {j}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let relay = restart(relay, &state).await;
    let job = ended(&relay, ADMIN, &id).await;
    assert_eq!((job["state"].clone(), job["reason"].clone()), (json!("succeeded"), json!("ok")), "{job}");
    assert_eq!(job["base"], json!(base), "the base read before the turn: {job}");
    let r = &job["result"];
    assert_eq!((r["base"].clone(), r["commits_ahead"].clone()), (json!(base), json!(1)), "{r}");
    assert_eq!(r["verification"]["exit_code"], json!(0), "{r}");
    assert_eq!(job_events_once(&relay, &job).await, ["running", "verifying", "succeeded"]);
}

#[tokio::test]
async fn a_relay_killed_while_a_job_verifies_runs_the_verification_again() {
    let state = StateDir::new();
    let relay = relay(&state);
    repo(&relay).await;
    let mut body = job_body("worker", "add the feature");
    body["verify"] = json!("sleep 2; echo verified");
    let id = create(&relay, ADMIN, body).await["id"].as_str().expect("id").to_string();
    until(&relay, ADMIN, &id, &["verifying"], STEP).await;
    let relay = restart(relay, &state).await;
    let job = ended(&relay, ADMIN, &id).await;
    assert_eq!((job["state"].clone(), job["reason"].clone()), (json!("succeeded"), json!("ok")), "{job}");
    let v = &job["result"]["verification"];
    assert_eq!(v["exit_code"], json!(0), "{v}");
    assert!(v["output_tail"].as_str().is_some_and(|t| t.contains("verified")), "{v}");
    assert_eq!(job["result"]["commits_ahead"], json!(1), "{job}");
    // The restarted driver moves on from `verifying`: no second `verifying`.
    assert_eq!(job_events_once(&relay, &job).await, ["running", "verifying", "succeeded"]);
}

#[tokio::test]
async fn cancel_ends_a_verifying_job_and_stops_its_verification() {
    let state = StateDir::new();
    let relay = relay(&state);
    repo(&relay).await;
    // A marked sleep in the background, waited for: cancel must reach what the command started.
    let marker = format!("hangar-verify-{}", std::process::id());
    let mut body = job_body("worker", "add the feature");
    body["verify"] = json!(format!("(exec -a {marker} sleep 30) & wait"));
    let id = create(&relay, ADMIN, body).await["id"].as_str().expect("id").to_string();
    until(&relay, ADMIN, &id, &["verifying"], STEP).await;
    wait_until(STEP, "the verification's sleep started", || !pids_with(&marker).is_empty()).await;
    let r = relay.call("POST", &format!("/api/jobs/{id}/cancel"), Some(ADMIN), None).await;
    assert_eq!(r.status, 200, "{r:?}");
    let job = ended(&relay, ADMIN, &id).await;
    assert_eq!((job["state"].clone(), job["reason"].clone()), (json!("cancelled"), json!("cancel_requested")), "{job}");
    assert_eq!(job["result"]["verification"], Value::Null, "{job}");
    assert_eq!(job["result"]["commits_ahead"], json!(1), "what the agent left is measured: {job}");
    wait_until(STEP, "the verification's sleep stopped", || pids_with(&marker).is_empty()).await;
    assert_eq!(job_events_once(&relay, &job).await, ["running", "verifying", "cancelled"]);
}
