//! What a turn's harness writes is bounded, end to end through the real relay and the local
//! sandbox's hangar-envd (issue 35): a line over 1 MiB is cut by the log's writer and everything
//! after it is recorded, followed and polled; the log stops at its limit and says so once; the
//! events recorded stop at the turn's cap, and a flood never costs the `run.result`.
use std::time::Duration;

use hangar_e2e::{
    relay::{Relay, StateDir, ADMIN},
    sessions::{agent_events, all_events, harness_file, log_path, profile, start, until_ended},
};
use serde_json::{json, Value};

/// A turn writing a 1 GiB line takes a few seconds; this tells a finished turn from a stuck one.
const TURN: Duration = Duration::from_secs(180);
const MIB: u64 = 1 << 20;
/// What a harness prints last: Claude Code's result line.
const RESULT: &str = r#"{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"s"}"#;

/// A harness profile running `script` under bash (the prompt read first), Claude Code's format.
/// Braces are doubled: a profile's `{...}` are placeholders.
fn bash(name: &str, script: &str) -> String {
    let script = format!("cat >/dev/null; {script}").replace('{', "{{").replace('}', "}}");
    profile(name, &["bash".into(), "-c".into(), script], None, "claude-stream-json", "none")
}

/// `before`, a line of `n` bytes (NULs: /dev/zero straight into the log's path), `after`, a result.
fn long_line(n: u64) -> String {
    bash(
        &format!("long{n}"),
        &format!(
            r#"echo '{{"type":"unknown_a","n":1}}'; head -c {n} /dev/zero; echo; echo '{{"type":"unknown_b","n":2}}'; echo '{RESULT}'"#
        ),
    )
}

fn relay(state: &StateDir, profiles: &[String], env: &[(&str, &str)]) -> Relay {
    let file = harness_file(&state.0, profiles);
    let mut all = vec![("HANGAR_HARNESSES", file.to_str().expect("path")), ("HANGAR_SESSION_POLL_SECONDS", "0.3")];
    all.extend_from_slice(env);
    Relay::start(&state.0, &all)
}

fn body(name: &str, harness: &str) -> Value {
    json!({"name": name, "sandbox": "default", "harness": harness, "prompt": "go"})
}

/// Runs the session to its end: it succeeded with exit code 0; its agent events then.
async fn run(relay: &Relay, name: &str, harness: &str) -> (Value, Vec<(String, Value)>) {
    start(relay, ADMIN, body(name, harness)).await;
    let s = until_ended(relay, ADMIN, name, TURN).await;
    let events = agent_events(&all_events(relay, ADMIN, name).await);
    assert_eq!((s["state"].clone(), s["turns"][0]["exit_code"].clone()), (json!("succeeded"), json!(0)), "{s}");
    (s, events)
}

fn types(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(t, _)| t.as_str()).collect()
}

fn truncated<'a>(events: &'a [(String, Value)], reason: &str) -> Vec<&'a Value> {
    events.iter().filter(|(t, d)| t == "harness.truncated" && d["reason"] == reason).map(|(_, d)| d).collect()
}

/// The harness's result is recorded, after every other event of its (hangar's count aside).
fn assert_result_last(events: &[(String, Value)]) {
    let theirs: Vec<&str> = types(events).into_iter().filter(|t| *t != "harness.truncated").collect();
    assert_eq!(theirs.last(), Some(&"run.result"), "{:?}", &events[events.len().saturating_sub(3)..]);
}

#[tokio::test]
async fn a_line_over_1_mib_is_cut_and_everything_after_it_is_recorded_followed_and_polled() {
    let sizes = [MIB + 1, 10 * MIB, 1024 * MIB];
    let profiles: Vec<String> = sizes.iter().map(|n| long_line(*n)).collect();
    for (mode, env) in [("followed", None), ("polled", Some(("HANGAR_STREAM_TURN_LOGS", "false")))] {
        let state = StateDir::new();
        let relay = relay(&state, &profiles, env.as_slice());
        for n in sizes {
            let name = format!("{mode}-{n}");
            let (s, events) = run(&relay, &name, &format!("long{n}")).await;
            assert_eq!(s["turns"][0]["polled"], json!(mode == "polled"), "{s}");
            assert_eq!(
                types(&events),
                ["harness.unknown", "harness.truncated", "harness.unknown", "run.result"],
                "{name}: the line is said and what follows it recorded: {events:?}"
            );
            let cut = &events[1].1;
            assert_eq!((cut["reason"].clone(), cut["bytes"].clone()), (json!("line_too_long"), json!(n)), "{cut}");
            let kept = n - cut["dropped"].as_u64().expect("dropped");
            assert!((MIB - 64..=MIB).contains(&kept), "the line's start is kept, up to 1 MiB: {cut}");
            assert_eq!(events[3].1["ok"], json!(true), "{events:?}");
            // No line the relay reads is longer than it holds.
            let log = std::fs::read(log_path(&relay, &s).await).expect("log");
            assert!(log.len() < 2 * MIB as usize, "{name}: the log holds the line's start only: {}", log.len());
            assert!(log.split(|b| *b == b'\n').all(|l| l.len() as u64 <= MIB), "{name}: a line over 1 MiB");
        }
    }
}

#[tokio::test]
async fn a_turns_log_stops_at_its_limit_says_so_once_and_keeps_the_result() {
    // 40 lines of 64 KiB and a 64 MiB one: far past a 1 MiB limit, drained to the end.
    let script = format!(
        "for i in $(seq 40); do head -c 65535 /dev/zero | tr '\\0' a; echo; done; head -c {} /dev/zero; echo; echo '{RESULT}'",
        64 * MIB
    );
    let state = StateDir::new();
    let relay = relay(&state, &[bash("flood", &script)], &[("HANGAR_TURN_LOG_MAX_BYTES", &MIB.to_string())]);
    let (s, events) = run(&relay, "full", "flood").await;
    let full = truncated(&events, "log_full");
    assert_eq!(full, [&json!({"reason": "log_full", "limit": MIB, "source": "hangar"})], "said once: {events:?}");
    assert_eq!(events.last().map(|(t, _)| t.as_str()), Some("run.result"), "the last line is kept: {events:?}");
    let size = std::fs::metadata(log_path(&relay, &s).await).expect("log").len();
    assert!(size <= MIB + 64 + RESULT.len() as u64 + 1, "the log is at its limit, a mark and the last line: {size}");
}

#[tokio::test]
async fn a_flood_of_events_stops_at_the_turns_cap_and_keeps_the_result() {
    let script =
        format!(r#"for i in $(seq 5000); do echo "{{\"type\":\"unknown_a\",\"n\":$i}}"; done; echo '{RESULT}'"#);
    let state = StateDir::new();
    let relay = relay(&state, &[bash("flood", &script)], &[("HANGAR_TURN_EVENT_MAX", "100")]);
    let (_, events) = run(&relay, "flood", "flood").await;
    let unknown = events.iter().filter(|(t, _)| t == "harness.unknown").count();
    assert_eq!(unknown, 100, "the turn's cap holds as events are written");
    let cut = truncated(&events, "too_many_events");
    assert_eq!(cut, [&json!({"reason": "too_many_events", "dropped": 4900, "limit": 100, "source": "hangar"})]);
    assert_result_last(&events);
}

#[tokio::test]
async fn a_batch_over_2000_events_still_records_its_result() {
    // Polled, the whole flood is one read (90 KiB): the batch's cap cuts it, never its result.
    let script = format!("sleep 1; yes '{{}}' | head -n 30000; echo '{RESULT}'");
    let state = StateDir::new();
    let relay = relay(&state, &[bash("burst", &script)], &[("HANGAR_STREAM_TURN_LOGS", "false")]);
    let (_, events) = run(&relay, "burst", "burst").await;
    assert_result_last(&events);
    let cut = truncated(&events, "too_many_events");
    assert_eq!(cut.len(), 1, "one count for the turn, kept current: {cut:?}");
    let kept = events.iter().filter(|(t, _)| t == "harness.unknown").count() as u64;
    assert_eq!(kept + cut[0]["dropped"].as_u64().expect("dropped"), 30000, "every line recorded or counted");
}
