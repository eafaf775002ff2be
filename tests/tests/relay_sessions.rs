//! Agent sessions on the local provider, end to end through the real relay: a harness profile
//! that replays a capture a line every 100 ms stands in for the agent CLI. Every event arrives
//! once and in order, follow-ups continue the seq, cancel and crashes end the turn as the table
//! of states and reasons says (docs/sessions.md), a relay killed mid-turn loses and repeats
//! nothing, a truncated log falls back to polling without losing what is written after, secrets
//! are redacted from everything stored, streamed or logged, and bad input gets a clear error.
use std::time::Duration;

use hangar_e2e::{
    is_root, pids_with, pids_with_all,
    relay::{Relay, StateDir, ADMIN},
    sessions::{
        agent_events, all_events, assert_contiguous, fixture, get, golden, harness_file, log_path, profile, put_secret,
        replay_argv, start, states, until_ended,
    },
    wait_until, STEP,
};
use serde_json::{json, Value};

const LONG: &str = "claude-long-turn.jsonl";
const SHORT: &str = "claude-stream-json-executor.jsonl";

fn text(r: &hangar_e2e::RawResponse) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// Literal arguments: braces are doubled, since a profile's `{...}` are placeholders.
fn argv(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.replace('{', "{{").replace('}', "}}")).collect()
}

/// The profiles every test here may use.
fn profiles() -> Vec<String> {
    let long = fixture(LONG).to_string_lossy().into_owned();
    let short = fixture(SHORT).to_string_lossy().into_owned();
    let codex = fixture("codex-out-of-order.jsonl").to_string_lossy().into_owned();
    let init = r#"{"type":"system","subtype":"init","session_id":"s","model":"m","cwd":"/"}"#;
    let sleeper = argv(&["bash", "-c", &format!("cat >/dev/null; echo '{init}'; exec sleep 60")]);
    vec![
        profile("replay", &replay_argv(&long, 0.1), Some(&replay_argv(&short, 0.1)), "claude-stream-json", "assign"),
        // The follow-up records its arguments: the conversation id the CLI reported comes back.
        profile(
            "codex-replay",
            &replay_argv(&codex, 0.02),
            Some(
                &["bash", "-c", "printf '%s\\n' \"$1\" > resumed.seen; cat >/dev/null", "x", "{session_id}"]
                    .map(String::from),
            ),
            "codex-jsonl",
            "report",
        ),
        profile("sleeper", &sleeper, Some(&sleeper), "claude-stream-json", "none"),
        profile(
            "secret",
            &argv(&[
                "bash",
                "-c",
                r#"cat >/dev/null; printf '{"type":"assistant","message":{"content":[{"type":"text","text":"the key is %s"}]}}\n' "$E2E_TOKEN"; echo "plain $E2E_TOKEN""#,
            ]),
            None,
            "claude-stream-json",
            "none",
        ),
        // Three lines, a pause (the test truncates the log then), three more.
        profile(
            "steps",
            &argv(&[
                "bash",
                "-c",
                r#"cat >/dev/null; for i in 1 2 3; do echo "{\"type\":\"unknown_a\",\"n\":$i}"; done; sleep 2; for i in 4 5 6; do echo "{\"type\":\"unknown_b\",\"n\":$i}"; sleep 0.1; done"#,
            ]),
            None,
            "claude-stream-json",
            "none",
        ),
        profile("fails", &argv(&["bash", "-c", "cat >/dev/null; echo oops >&2; exit 3"]), None, "text", "none"),
    ]
}

fn relay_with(state: &StateDir, env: &[(&str, &str)]) -> Relay {
    let file = harness_file(&state.0, &profiles());
    let mut all: Vec<(&str, &str)> =
        vec![("HANGAR_HARNESSES", file.to_str().expect("path")), ("HANGAR_SESSION_POLL_SECONDS", "0.3")];
    all.extend_from_slice(env);
    Relay::start(&state.0, &all)
}

fn body(name: &str, harness: &str) -> Value {
    json!({"name": name, "sandbox": "default", "harness": harness, "prompt": "fix the failing tests"})
}

#[tokio::test]
async fn a_replayed_turn_streams_every_event_once_in_order_and_a_follow_up_continues_the_seq() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    let created = start(&relay, ADMIN, body("one", "replay")).await;
    assert_eq!(created["turns"][0]["n"], json!(1), "{created}");
    assert!(created["agent_session_id"].as_str().is_some_and(|s| s.len() == 36), "{created}");

    // SSE from the start: every event, then a close once the turn ended.
    let mut sse = relay.sse("GET", "/api/sessions/one/events/stream", Some(ADMIN), None).await;
    assert_eq!(sse.status, 200);
    let streamed = sse.collect(STEP).await;
    let (close, events) = streamed.split_last().expect("events then close");
    assert_eq!(close.event, "close", "{close:?}");
    assert_eq!(close.json()["reason"], json!("done"));
    let events: Vec<Value> = events
        .iter()
        .map(|e| {
            let v = e.json();
            assert_eq!(e.id.as_deref(), Some(v["seq"].to_string().as_str()));
            v
        })
        .collect();
    assert_contiguous(&events);
    assert_eq!(agent_events(&events), golden(LONG), "the recorded events are the parser's, once each, in order");
    assert_eq!(states(&events), ["queued>starting:-", "starting>running:-", "running>succeeded:ok"]);

    let s = get(&relay, ADMIN, "one").await;
    assert_eq!((s["state"].clone(), s["reason"].clone()), (json!("succeeded"), json!("ok")), "{s}");
    assert_eq!(s["split"], json!(is_root()), "the split holds where the daemon is root: {s}");
    let sum = &s["summary"];
    assert_eq!(sum["tests"]["framework"], json!("cargo"), "{sum}");
    assert_eq!(sum["files_touched"], json!(["src/shipper/cli.py", "src/shipper/config.py"]), "{sum}");
    assert!(sum["output_tokens"].as_u64().unwrap_or(0) > 0 && sum["last_message"].as_str().is_some(), "{sum}");
    assert_eq!(s["turns"][0]["exit_code"], json!(0));
    // The prompt reached the agent on its stdin, from the prompt file.
    let work = s["cwd"].as_str().expect("cwd");
    assert_eq!(std::fs::read_to_string(format!("{work}/prompt.seen")).expect("prompt.seen"), "fix the failing tests");

    // A follow-up: a second turn whose events continue the seq.
    let before = events.len() as i64;
    let r = relay.call("POST", "/api/sessions/one/turns", Some(ADMIN), Some(json!({"prompt": "and the docs"}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    let s = until_ended(&relay, ADMIN, "one", STEP).await;
    assert_eq!(s["turns"].as_array().map(Vec::len), Some(2), "{s}");
    let all = all_events(&relay, ADMIN, "one").await;
    assert_contiguous(&all);
    let second: Vec<Value> = all.iter().filter(|e| e["seq"].as_i64() > Some(before)).cloned().collect();
    assert_eq!(agent_events(&second), golden(SHORT));
    assert!(second.iter().all(|e| e["turn"] == s["turns"][1]["id"]), "{second:?}");
}

#[tokio::test]
async fn long_polls_answer_as_soon_as_an_event_is_recorded() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    start(&relay, ADMIN, body("poll", "replay")).await;
    let mut since = 0;
    let mut seen = Vec::new();
    loop {
        let r = relay.call("GET", &format!("/api/sessions/poll/events?since={since}&wait=20"), Some(ADMIN), None).await;
        assert_eq!(r.status, 200, "{r:?}");
        let page = r.json();
        let events = page["events"].as_array().expect("events").clone();
        // Lines come every 100 ms: each answer brings what was recorded, none is empty after a
        // wait that ran out.
        assert!(!events.is_empty() || page["state"] == json!("succeeded"), "an empty answer: {page}");
        since = page["next"].as_i64().expect("next");
        seen.extend(events);
        if page["state"] == json!("succeeded") && page["more"] == json!(false) && since == seen.len() as i64 {
            break;
        }
    }
    assert_contiguous(&seen);
    assert_eq!(agent_events(&seen), golden(LONG));
}

#[tokio::test]
async fn a_reported_conversation_id_is_what_the_follow_up_resumes() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    start(&relay, ADMIN, body("codex", "codex-replay")).await;
    let s = until_ended(&relay, ADMIN, "codex", STEP).await;
    let reported = golden("codex-out-of-order.jsonl")[0].1["session_id"].clone();
    assert!(reported.is_string());
    assert_eq!(s["agent_session_id"], reported, "the thread id codex reported is kept: {s}");
    let r = relay.call("POST", "/api/sessions/codex/turns", Some(ADMIN), Some(json!({"prompt": "more"}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    let s = until_ended(&relay, ADMIN, "codex", STEP).await;
    let work = s["cwd"].as_str().expect("cwd");
    assert_eq!(
        std::fs::read_to_string(format!("{work}/resumed.seen")).expect("resumed.seen").trim(),
        s["agent_session_id"].as_str().unwrap()
    );
}

/// Waits until the session's latest turn is in `state`; the session then.
async fn wait_state(relay: &Relay, name: &str, state: &str) -> Value {
    let deadline = std::time::Instant::now() + STEP;
    loop {
        let s = get(relay, ADMIN, name).await;
        if s["state"] == json!(state) {
            return s;
        }
        assert!(std::time::Instant::now() < deadline, "{name} never {state}: {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The host pids of the turn's supervisor (its command line names the turn).
fn supervisors(turn: &str) -> Vec<u32> {
    pids_with_all(&["supervisor.sh", turn])
}

/// The host pids of the turn's `sleep 60` harness: the process that is `sleep` itself (its
/// command line's arguments are NUL-separated; the supervisor's holds the harness's too) with
/// the turn in its environment.
fn sleepers(turn: &str) -> Vec<u32> {
    let marker = format!("HANGAR_TURN={turn}");
    pids_with("sleep\u{0}60")
        .into_iter()
        .filter(|p| {
            hangar_e2e::cmdline(*p).is_some_and(|c| c.starts_with("sleep\0"))
                && std::fs::read(format!("/proc/{p}/environ"))
                    .is_ok_and(|e| e.split(|b| *b == 0).any(|v| v == marker.as_bytes()))
        })
        .collect()
}

#[tokio::test]
async fn cancel_ends_a_turn_and_is_idempotent_and_a_running_turn_refuses_a_follow_up() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    start(&relay, ADMIN, body("c", "sleeper")).await;
    let s = wait_state(&relay, "c", "running").await;
    let turn = s["turns"][0]["id"].as_str().expect("turn").to_string();
    let r = relay.call("POST", "/api/sessions/c/turns", Some(ADMIN), Some(json!({"prompt": "x"}))).await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (409, json!("already_exists")), "{r:?}");
    let t = std::time::Instant::now();
    for _ in 0..2 {
        let r = relay.call("POST", "/api/sessions/c/cancel", Some(ADMIN), None).await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    let s = until_ended(&relay, ADMIN, "c", STEP).await;
    assert_eq!((s["state"].clone(), s["reason"].clone()), (json!("cancelled"), json!("cancel_agent")), "{s}");
    assert!(t.elapsed() < Duration::from_secs(5), "the harness got SIGTERM, not the grace's KILL: {:?}", t.elapsed());
    // Cancelled is final: another cancel changes nothing.
    let again = relay.call("POST", "/api/sessions/c/cancel", Some(ADMIN), None).await.json();
    assert_eq!(
        (again["state"].clone(), again["turns"][0]["finished_at"].clone()),
        (json!("cancelled"), s["turns"][0]["finished_at"].clone())
    );
    wait_until(STEP, "the supervisor gone", || supervisors(&turn).is_empty()).await;
}

#[tokio::test]
async fn a_failing_harness_fails_and_a_killed_supervisor_is_a_crash_that_takes_its_harness() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    start(&relay, ADMIN, body("f", "fails")).await;
    let s = until_ended(&relay, ADMIN, "f", STEP).await;
    assert_eq!(
        (s["state"].clone(), s["reason"].clone(), s["turns"][0]["exit_code"].clone()),
        (json!("failed"), json!("nonzero_exit"), json!(3)),
        "{s}"
    );

    start(&relay, ADMIN, body("k", "sleeper")).await;
    let s = wait_state(&relay, "k", "running").await;
    let turn = s["turns"][0]["id"].as_str().expect("turn").to_string();
    let pids =
        hangar_e2e::eventually(STEP, "the supervisor", || Some(supervisors(&turn)).filter(|p| !p.is_empty())).await;
    hangar_e2e::eventually(STEP, "the harness running", || sleepers(&turn).first().copied()).await;
    for p in pids {
        // SAFETY: kill(2) on the supervisor this test's relay started.
        unsafe { libc::kill(p as i32, libc::SIGKILL) };
    }
    let s = until_ended(&relay, ADMIN, "k", STEP).await;
    assert_eq!((s["state"].clone(), s["reason"].clone()), (json!("crashed"), json!("process_died")), "{s}");
    assert_eq!(s["turns"][0]["exit_code"], Value::Null);
    wait_until(STEP, "the orphaned harness killed with its group", || sleepers(&turn).is_empty()).await;
}

#[tokio::test]
async fn a_relay_killed_mid_turn_resumes_without_losing_or_repeating_an_event() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    start(&relay, ADMIN, body("r", "replay")).await;
    // Some events recorded, many to come (the replay takes about 3 s).
    let deadline = std::time::Instant::now() + STEP;
    while get(&relay, ADMIN, "r").await["events_cursor"].as_i64().unwrap_or(0) < 8 {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // kill -9 (what dropping the relay does).
    drop(relay);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let relay = relay_with(&state, &[]);
    let s = until_ended(&relay, ADMIN, "r", STEP).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}");
    let events = all_events(&relay, ADMIN, "r").await;
    assert_contiguous(&events);
    assert_eq!(agent_events(&events), golden(LONG), "every line's events once, in order, across the restart");
}

#[tokio::test]
async fn a_truncated_log_falls_back_to_polling_and_loses_nothing_written_after() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    // The first three lines are recorded; then the log is cut to nothing.
    let log = steps_log_after_three(&relay, "t").await;
    std::fs::OpenOptions::new().write(true).open(&log).expect("the log").set_len(0).expect("truncate");
    let s = until_ended(&relay, ADMIN, "t", STEP).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}");
    assert_eq!(s["turns"][0]["polled"], json!(true), "following gave way to polling: {s}");
    let events = all_events(&relay, ADMIN, "t").await;
    assert_contiguous(&events);
    let ns = step_numbers(&events);
    assert_eq!(ns, [1, 2, 3, 4, 5, 6], "every line once: {events:?}");
}

#[tokio::test]
async fn secrets_reach_the_harness_and_are_redacted_from_the_store_the_streams_and_the_logs() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    let value = "sk-e2e-7f3a9c1d2b4e6f80";
    let r = relay.call("POST", "/api/secrets", Some(ADMIN), Some(json!({"name": "E2E_TOKEN", "value": value}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert!(!text(&r).contains(value), "a value is never returned");
    let listed = relay.call("GET", "/api/secrets", Some(ADMIN), None).await;
    assert_eq!(listed.json()["secrets"][0]["name"], json!("E2E_TOKEN"));
    assert!(!text(&listed).contains(value));
    // A person sees its own secrets and those shared with it, never another's (the admins').
    let user = relay.token("u", "user").await;
    let theirs = relay.call("GET", "/api/secrets", Some(&user.secret), None).await;
    assert_eq!((theirs.status, theirs.json()["secrets"].clone()), (200, json!([])), "{theirs:?}");

    let mut b = body("sec", "secret");
    b["secrets"] = json!(["E2E_TOKEN"]);
    b["prompt"] = json!(format!("use {value} to log in"));
    let created = start(&relay, ADMIN, b).await;
    assert!(!created.to_string().contains(value), "the prompt is stored redacted: {created}");
    let mut sse = relay.sse("GET", "/api/sessions/sec/events/stream", Some(ADMIN), None).await;
    let streamed: String = sse.collect(STEP).await.iter().map(|e| e.data.clone()).collect();
    let s = until_ended(&relay, ADMIN, "sec", STEP).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}");
    let events = serde_json::to_string(&all_events(&relay, ADMIN, "sec").await).expect("json");
    assert!(events.contains("the key is [redacted:E2E_TOKEN]"), "the harness got the secret, redacted: {events}");
    for (what, text) in
        [("events", events), ("stream", streamed), ("session", s.to_string()), ("relay log", relay.log())]
    {
        assert!(!text.contains(value), "the secret's value is in the {what}");
    }
    // Nowhere in the relay's database but the secrets table itself.
    let db = std::fs::read(state.0.join("relay.sqlite")).expect("db");
    let wal = std::fs::read(state.0.join("relay.sqlite-wal")).unwrap_or_default();
    let count = |b: &[u8]| b.windows(value.len()).filter(|w| *w == value.as_bytes()).count();
    assert!(
        count(&db) + count(&wal) <= 2,
        "the value is stored only as the secret (db {}, wal {})",
        count(&db),
        count(&wal)
    );
}

#[tokio::test]
async fn bad_requests_get_clear_errors_and_idempotency_keys_replay() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    let bad = [
        (json!({"name": "x", "sandbox": "default", "harness": "nope", "prompt": "p"}), 400, "harness"),
        (json!({"name": "x", "sandbox": "default", "harness": "replay", "prompt": ""}), 400, "prompt"),
        (json!({"name": "a/b", "sandbox": "default", "harness": "replay", "prompt": "p"}), 400, "name"),
        (json!({"name": "x", "sandbox": "nope", "harness": "replay", "prompt": "p"}), 404, "sandbox"),
        (
            json!({"name": "x", "sandbox": "default", "harness": "replay", "prompt": "p", "secrets": ["MISSING"]}),
            403,
            "MISSING",
        ),
        (
            json!({"name": "x", "sandbox": "default", "harness": "replay", "prompt": "p", "timeout_minutes": 0}),
            400,
            "timeout_minutes",
        ),
        (json!({"name": "x", "sandbox": "default", "harness": "replay", "prompt": "p", "extra": 1}), 400, "extra"),
        (json!({"name": "x", "sandbox": "default", "harness": "replay", "prompt": "p".repeat(70_000)}), 400, "prompt"),
    ];
    for (b, status, names) in bad {
        let r = relay.call("POST", "/api/sessions", Some(ADMIN), Some(b.clone())).await;
        assert_eq!(r.status, status, "{b}: {r:?}");
        assert!(text(&r).contains(names), "{b}: the error names {names}: {r:?}");
    }
    assert!(
        relay.call("GET", "/api/sessions", Some(ADMIN), None).await.json()["sessions"].as_array().unwrap().is_empty(),
        "nothing was created"
    );

    let mut b = body("idem", "sleeper");
    b["idempotency_key"] = json!("k1");
    let first = start(&relay, ADMIN, b.clone()).await;
    let again = relay.call("POST", "/api/sessions", Some(ADMIN), Some(b.clone())).await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(
        (again.json()["id"].clone(), again.json()["idempotent_replay"].clone()),
        (first["id"].clone(), json!(true))
    );
    b["prompt"] = json!("something else");
    let conflict = relay.call("POST", "/api/sessions", Some(ADMIN), Some(b)).await;
    assert_eq!(conflict.status, 409, "{conflict:?}");
    let taken = relay.call("POST", "/api/sessions", Some(ADMIN), Some(body("idem", "sleeper"))).await;
    assert_eq!(taken.status, 409, "a name is unique among a person's sessions: {taken:?}");
    let s = wait_state(&relay, "idem", "running").await;
    assert_eq!(s["turns"].as_array().map(Vec::len), Some(1), "{s}");
    // The supervisor's command line names the session's working directory, unique to this test.
    let cwd = s["cwd"].as_str().expect("cwd").to_string();
    // Supervisors by the turn they run (its heartbeat loop is a second process of the same
    // command line).
    let agents = || {
        let mut turns: Vec<String> = pids_with_all(&["supervisor.sh", &cwd])
            .into_iter()
            .filter_map(|p| hangar_e2e::cmdline(p)?.split('\0').nth(2).map(str::to_string))
            .collect();
        turns.dedup();
        turns.len()
    };
    assert_eq!(agents(), 1, "a retry never starts a second agent");
    let r = relay.call("DELETE", "/api/sessions/idem", Some(ADMIN), None).await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(relay.call("GET", "/api/sessions/idem", Some(ADMIN), None).await.status, 404);
    wait_until(STEP, "the deleted session's turn cancelled", || agents() == 0).await;
}

#[tokio::test]
async fn sessions_belong_to_the_person_behind_the_token() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[("HANGAR_ALLOW_UNISOLATED_SANDBOXES", "true")]);
    relay.share_default().await;
    let mk = |name: &'static str, person: Value| {
        let relay = &relay;
        async move {
            let r = relay
                .call(
                    "POST",
                    "/api/tokens",
                    Some(ADMIN),
                    Some(json!({"name": name, "scope": "user", "person": person})),
                )
                .await;
            assert_eq!(r.status, 201, "{r:?}");
            r.json()["secret"].as_str().expect("secret").to_string()
        }
    };
    let console = mk("ada-console", json!({"id": "ada", "name": "Ada"})).await;
    let cli = mk("ada-cli", json!({"id": "ada"})).await;
    let other = mk("bob", Value::Null).await;
    start(&relay, &console, body("mine", "fails")).await;
    assert_eq!(get(&relay, &cli, "mine").await["person"], json!("ada"), "the same person's other token sees it");
    assert_eq!(
        relay.call("GET", "/api/sessions/mine", Some(&other), None).await.status,
        404,
        "another person's does not exist for bob"
    );
    assert!(relay.call("GET", "/api/sessions", Some(&other), None).await.json()["sessions"]
        .as_array()
        .unwrap()
        .is_empty());
    assert_eq!(
        relay.call("GET", "/api/sessions", Some(ADMIN), None).await.json()["sessions"].as_array().unwrap().len(),
        1,
        "an admin sees everyone's"
    );
    // Bob may use the same name: names are unique per person.
    start(&relay, &other, body("mine", "fails")).await;
    let bad = relay
        .call("POST", "/api/tokens", Some(ADMIN), Some(json!({"name": "x", "scope": "user", "person": {"id": ""}})))
        .await;
    assert_eq!(bad.status, 400, "{bad:?}");
}

/// A profile that says its plan is exhausted (Claude's `rate_limit_event`, rejected, resetting
/// in an hour) and ends.
/// `profile`, with `credentials` (the variables whose secret is a turn's credential).
fn with_credentials(p: String) -> String {
    p.replacen("\n\n", "\ncredentials = [\"ANTHROPIC_API_KEY\"]\n\n", 1)
}

fn limited() -> String {
    let resets =
        (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 3600).to_string();
    let line = format!(
        r#"{{"type":"rate_limit_event","rate_limit_info":{{"status":"rejected","rateLimitType":"five_hour","utilization":1.0,"resetsAt":{resets}}}}}"#
    );
    profile(
        "limited",
        &argv(&["bash", "-c", &format!("cat >/dev/null; echo '{line}'")]),
        None,
        "claude-stream-json",
        "none",
    )
}

#[tokio::test]
async fn turns_queue_per_credential_and_wait_for_a_plan_limit_unless_told_to_ignore_it() {
    let state = StateDir::new();
    let mut all = profiles();
    all.push(with_credentials(limited().replacen("[harness.limited]", "[harness.limited-key]", 1)));
    let sleeper = profiles().into_iter().find(|p| p.starts_with("[harness.sleeper]")).expect("sleeper");
    all.push(with_credentials(sleeper.replacen("[harness.sleeper]", "[harness.sleeper-key]", 1)));
    let file = harness_file(&state.0, &all);
    let relay = Relay::start(
        &state.0,
        &[("HANGAR_HARNESSES", file.to_str().expect("path")), ("HANGAR_MAX_RUNS_PER_CREDENTIAL", "2")],
    );
    // A turn's credential is the secret it gets under one of its profile's credential variables.
    put_secret(&relay, "ANTHROPIC_API_KEY", "sk-ant-test-0123456789").await;
    let with_key = |name: &str, harness: &str| {
        let mut b = body(name, harness);
        b["secrets"] = json!(["ANTHROPIC_API_KEY"]);
        b
    };
    for n in ["q1", "q2", "q3"] {
        start(&relay, ADMIN, with_key(n, "sleeper-key")).await;
    }
    wait_state(&relay, "q1", "running").await;
    wait_state(&relay, "q2", "running").await;
    let q3 = get(&relay, ADMIN, "q3").await;
    assert_eq!((q3["state"].clone(), q3["reason"].clone()), (json!("queued"), json!("credential_concurrency")), "{q3}");
    let usage = relay.call("GET", "/api/usage", Some(ADMIN), None).await.json();
    assert_eq!(
        usage["credentials"][0],
        json!({"credential": "ANTHROPIC_API_KEY", "running": 2, "queued": 1}),
        "{usage}"
    );
    // A slot frees: the queued turn starts.
    relay.call("POST", "/api/sessions/q1/cancel", Some(ADMIN), None).await;
    wait_state(&relay, "q3", "running").await;
    for n in ["q2", "q3"] {
        relay.call("POST", &format!("/api/sessions/{n}/cancel"), Some(ADMIN), None).await;
        until_ended(&relay, ADMIN, n, STEP).await;
    }

    // The plan says it is exhausted: the next turn with that credential waits for the reset.
    start(&relay, ADMIN, with_key("lim", "limited-key")).await;
    let s = until_ended(&relay, ADMIN, "lim", STEP).await;
    assert_eq!(s["state"], json!("succeeded"), "running turns are never stopped for a limit: {s}");
    let usage = relay.call("GET", "/api/usage", Some(ADMIN), None).await.json();
    let w = &usage["windows"][0];
    assert_eq!(
        (w["credential"].clone(), w["window"].clone(), w["used_pct"].clone(), w["status"].clone(), w["stale"].clone()),
        (json!("ANTHROPIC_API_KEY"), json!("five_hour"), json!(100.0), json!("rejected"), json!(false)),
        "{usage}"
    );
    let gated = start(&relay, ADMIN, with_key("gated", "sleeper-key")).await;
    let warned = gated["warnings"].as_array().cloned().unwrap_or_default();
    assert!(
        warned.iter().any(|w| w.as_str().is_some_and(|w| w.contains("five_hour") && w.contains("100%"))),
        "a start past HANGAR_USAGE_WARN_PCT warns: {gated}"
    );
    let g = wait_state(&relay, "gated", "queued").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let g2 = get(&relay, ADMIN, "gated").await;
    assert_eq!((g2["state"].clone(), g2["reason"].clone()), (json!("queued"), json!("plan_limit")), "{g} {g2}");
    let mut b = with_key("ignoring", "sleeper-key");
    b["ignore_limits"] = json!(true);
    start(&relay, ADMIN, b).await;
    wait_state(&relay, "ignoring", "running").await;
    // A queued turn is cancelled in the store alone.
    let c = relay.call("POST", "/api/sessions/gated/cancel", Some(ADMIN), None).await.json();
    assert_eq!((c["state"].clone(), c["reason"].clone()), (json!("cancelled"), json!("cancel_agent")), "{c}");
    relay.call("POST", "/api/sessions/ignoring/cancel", Some(ADMIN), None).await;
}

/// Whether the turn's log was polled (rather than followed), once the session ended.
async fn polled_run(relay: &Relay, name: &str) -> bool {
    start(relay, ADMIN, body(name, "replay")).await;
    let s = until_ended(relay, ADMIN, name, STEP).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}");
    let events = all_events(relay, ADMIN, name).await;
    assert_contiguous(&events);
    assert_eq!(agent_events(&events), golden(LONG), "followed or polled, nothing lost or repeated");
    s["turns"][0]["polled"].as_bool().expect("polled")
}

#[tokio::test]
async fn following_is_a_turn_log_stream_and_gives_way_to_polling_when_off_or_when_streams_are_full() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    start(&relay, ADMIN, body("m", "replay")).await;
    // While the turn runs its log is followed: one stream of kind turn_log, in the metrics.
    let deadline = std::time::Instant::now() + STEP;
    loop {
        let m = relay.call("GET", "/metrics", Some(ADMIN), None).await;
        if text(&m).contains("hangar_streams_open{kind=\"turn_log\"} 1") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no turn_log stream: {}", text(&m));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = until_ended(&relay, ADMIN, "m", STEP).await;
    assert_eq!(s["turns"][0]["polled"], json!(false), "{s}");
    assert!(!polled_run(&relay, "followed").await);
    drop(relay);

    // HANGAR_STREAM_TURN_LOGS=false: polled.
    let off = StateDir::new();
    let relay = relay_with(&off, &[("HANGAR_STREAM_TURN_LOGS", "false")]);
    assert!(polled_run(&relay, "off").await);
    drop(relay);

    // Every stream taken (HANGAR_STREAM_MAX_TOTAL=1, held by a client's watch): polled.
    let full = StateDir::new();
    let relay = relay_with(&full, &[("HANGAR_STREAM_MAX_TOTAL", "1")]);
    let held = relay.sse("GET", "/api/sandboxes/default/watch?path=.", Some(ADMIN), None).await;
    assert_eq!(held.status, 200);
    assert!(polled_run(&relay, "full").await);
    drop(held);
}

#[tokio::test]
async fn sse_resumes_exactly_from_last_event_id() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    start(&relay, ADMIN, body("resume", "replay")).await;
    until_ended(&relay, ADMIN, "resume", STEP).await;
    let all = all_events(&relay, ADMIN, "resume").await;
    let path = "/api/sessions/resume/events/stream";
    let auth = format!("Bearer {ADMIN}");
    let send = |last: &'static str| {
        let req = hangar_e2e::build_request(
            "GET",
            path,
            relay.addr,
            false,
            &[("authorization", &auth), ("last-event-id", last)],
            hangar_e2e::full_body(Default::default()),
        );
        hangar_e2e::send_http1(relay.addr, req)
    };
    let mut resumed = hangar_e2e::relay::Sse::from_response(send("10").await);
    assert_eq!(resumed.status, 200);
    let events = resumed.collect(STEP).await;
    let seqs: Vec<i64> =
        events.iter().filter(|e| e.event.is_empty()).map(|e| e.json()["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, (11..=all.len() as i64).collect::<Vec<_>>(), "from the event after the last one seen");
    assert_eq!(events.last().map(|e| e.event.as_str()), Some("close"));
    assert_eq!(send("x").await.status(), 400, "a malformed Last-Event-ID is refused");
}

/// Starts a `steps` session and waits for its first three lines' events; the log hangar reads.
async fn steps_log_after_three(relay: &Relay, name: &str) -> String {
    start(relay, ADMIN, body(name, "steps")).await;
    let s = wait_state(relay, name, "running").await;
    let log = log_path(relay, &s).await;
    let deadline = std::time::Instant::now() + STEP;
    while agent_events(&all_events(relay, ADMIN, name).await).len() < 3 {
        assert!(std::time::Instant::now() < deadline, "the first lines never came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    log
}

/// The `n` of each `steps` line's event, in order.
fn step_numbers(events: &[Value]) -> Vec<i64> {
    agent_events(events)
        .iter()
        .map(|(_, d)| {
            serde_json::from_str::<Value>(d["raw"].as_str().unwrap_or("{}")).unwrap_or_default()["n"]
                .as_i64()
                .unwrap_or(0)
        })
        .collect()
}

#[tokio::test]
async fn a_replaced_log_is_read_from_its_start_by_polling() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    let log = steps_log_after_three(&relay, "rep").await;
    // Another file renamed over the log: what it holds is read from its offset 0.
    let other = format!("{log}.other");
    std::fs::write(&other, "{\"type\":\"replaced_a\",\"n\":7}\n{\"type\":\"replaced_b\",\"n\":8}\n").expect("write");
    std::fs::rename(&other, &log).expect("rename over the log");
    let s = until_ended(&relay, ADMIN, "rep", STEP).await;
    assert_eq!((s["state"].clone(), s["turns"][0]["polled"].clone()), (json!("succeeded"), json!(true)), "{s}");
    let events = all_events(&relay, ADMIN, "rep").await;
    assert_contiguous(&events);
    let ns = step_numbers(&events);
    assert_eq!(&ns[..3], [1, 2, 3], "{events:?}");
    assert!(ns[3..].starts_with(&[7, 8]), "the replacement's lines, from its start: {ns:?}");
}

#[tokio::test]
async fn a_killed_agent_is_a_crash_and_the_supervisor_is_nobodys_background_process() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    relay.share_default().await;
    let user = relay.token("runner", "user").await;
    start(&relay, &user.secret, body("agent", "sleeper")).await;
    let s = wait_state(&relay, "agent", "running").await;
    let r = relay.call("GET", "/api/sandboxes/default/processes", Some(&user.secret), None).await;
    assert_eq!(r.json()["processes"], json!([]), "the supervisor is not one of the token's processes: {r:?}");
    // kill -9 of the agent itself (the harness): the supervisor says so, the turn crashed.
    let turn = s["turns"][0]["id"].as_str().expect("turn").to_string();
    let harness = hangar_e2e::eventually(STEP, "the harness", || sleepers(&turn).first().copied()).await;
    // SAFETY: kill(2) on the harness this test's relay started.
    unsafe { libc::kill(harness as i32, libc::SIGKILL) };
    let s = until_ended(&relay, ADMIN, "agent", STEP).await;
    let t = &s["turns"][0];
    assert_eq!(
        (s["state"].clone(), s["reason"].clone(), t["signal"].clone(), t["exit_code"].clone()),
        (json!("crashed"), json!("process_died"), json!("KILL"), json!(137)),
        "{s}"
    );
    wait_until(STEP, "the supervisor gone", || supervisors(&turn).is_empty()).await;
}

#[tokio::test]
async fn revoking_a_token_ends_its_streams_and_not_its_persons_turns() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    relay.share_default().await;
    let tok = relay.token("ada", "user").await;
    start(&relay, &tok.secret, body("kept", "sleeper")).await;
    wait_state(&relay, "kept", "running").await;
    let mut sse = relay.sse("GET", "/api/sessions/kept/events/stream?follow=true", Some(&tok.secret), None).await;
    assert_eq!(sse.status, 200);
    let r = relay.call("DELETE", &format!("/api/tokens/{}", tok.id), Some(ADMIN), None).await;
    assert_eq!(r.status, 204, "{r:?}");
    let events = sse.collect(STEP).await;
    let close = events.last().expect("a close event");
    assert_eq!((close.event.as_str(), close.json()["reason"].clone()), ("close", json!("revoked")), "{events:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s = get(&relay, ADMIN, "kept").await;
    assert_eq!(s["state"], json!("running"), "the turn runs on: {s}");
    relay.call("POST", "/api/sessions/kept/cancel", Some(ADMIN), None).await;
    until_ended(&relay, ADMIN, "kept", STEP).await;
}

/// A flood of events through the real path (an agent printing 8,000 lines of 2 KB), then a
/// restart whose prune keeps 10 events: the database file and its WAL shrink back.
#[tokio::test]
async fn the_store_shrinks_back_after_a_flood_is_pruned_at_restart() {
    let state = StateDir::new();
    let flood =
        "cat >/dev/null; l=$(head -c 2000 /dev/zero | tr '\\0' x); for i in $(seq 8000); do echo \"$i $l\"; done";
    let profiles =
        vec![profile("flood", &[String::from("bash"), "-c".into(), flood.into()], None, "claude-stream-json", "none")];
    let file = harness_file(&state.0, &profiles);
    let harnesses = file.to_str().expect("path").to_string();
    let mut relay = Relay::start(&state.0, &[("HANGAR_HARNESSES", &harnesses)]);
    start(&relay, ADMIN, json!({"name": "flood", "sandbox": "default", "harness": "flood", "prompt": "go"})).await;
    let s = until_ended(&relay, ADMIN, "flood", Duration::from_secs(120)).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}");
    relay.stop();
    let db = state.0.join("relay.sqlite");
    let wal = state.0.join("relay.sqlite-wal");
    let bytes = || std::fs::metadata(&db).map_or(0, |m| m.len()) + std::fs::metadata(&wal).map_or(0, |m| m.len());
    let full = bytes();
    assert!(full > 16 << 20, "8,000 events of 2 KB: {full} bytes");

    let relay = Relay::start(&state.0, &[("HANGAR_HARNESSES", &harnesses), ("HANGAR_RUN_EVENT_MAX", "10")]);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !relay.log().contains("events_pruned") {
        assert!(std::time::Instant::now() < deadline, "no prune after the restart: {}", relay.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = bytes();
    assert!(after < full / 4, "{full} bytes before the prune, {after} after");
    assert_eq!(all_events(&relay, ADMIN, "flood").await.len(), 10);
}
