//! The fleet, end to end through the real relay, with replayed captures standing in for agents on
//! the local provider: `GET /api/fleet` joins every sandbox with its job and session, its role
//! (running, queued, failed...), the stage its agent's own events put it in, its files, commits,
//! usage and tokens per five minutes; owners and slots; `?owner=` and `?include_stopped=`; a
//! person sees only theirs and an admin everyone's; a `jobs` token gets 403. `GET
//! /api/fleet/stream` starts with a snapshot, coalesces a burst into at most one `agent` event per
//! unit every 2 s, says `gone` when a sandbox is destroyed, resumes from `Last-Event-ID` with only
//! what changed (a stale or foreign id gets a snapshot), takes one-use tickets from
//! `POST /api/fleet/tickets`, counts against the stream limits and closes on revocation.
use std::time::{Duration, Instant};

use hangar_e2e::{
    relay::{Relay, Sse, SseEvent, StateDir, ADMIN},
    sessions::{fixture, harness_file, profile},
    STEP,
};
use serde_json::{json, Value};

const LONG: &str = "claude-long-turn.jsonl";
const SHORT: &str = "claude-stream-json-executor.jsonl";

/// Literal arguments: braces are doubled, since a profile's `{...}` are placeholders.
fn argv(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.replace('{', "{{").replace('}', "}}")).collect()
}

/// Replays a capture a line every `delay` seconds, then stays running (`hold` seconds) as an
/// agent that has not finished.
fn replaying(name: &str, delay: f64, hold: u32) -> Vec<String> {
    let script = format!(
        "cat >/dev/null; while IFS= read -r l; do printf '%s\\n' \"$l\"; sleep {delay}; done < \"$1\"; exec sleep {hold}"
    );
    let mut v = argv(&["bash", "-c", &script, "replay"]);
    v.push(fixture(name).to_string_lossy().into_owned());
    v
}

fn profiles() -> Vec<String> {
    let init = r#"{"type":"system","subtype":"init","session_id":"s","model":"claude-opus-5","cwd":"/"}"#;
    let push = r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_p","name":"Bash","input":{"command":"git push -u origin fix && gh pr create --fill"}}]}}"#;
    let pusher = argv(&["bash", "-c", &format!("cat >/dev/null; echo '{init}'; echo '{push}'; exec sleep 60")]);
    let sleeper = argv(&["bash", "-c", "cat >/dev/null; exec sleep 60"]);
    vec![
        profile("agent", &replaying(LONG, 0.05, 60), None, "claude-stream-json", "none"),
        profile("burst", &replaying(LONG, 0.15, 60), None, "claude-stream-json", "none"),
        profile("quick", &replaying(SHORT, 0.02, 0), Some(&replaying(SHORT, 0.02, 0)), "claude-stream-json", "none"),
        profile("pusher", &pusher, None, "claude-stream-json", "none"),
        profile("fails", &argv(&["bash", "-c", "cat >/dev/null; echo oops >&2; exit 3"]), None, "text", "none"),
        profile("sleeper-key", &sleeper, None, "claude-stream-json", "none").replacen(
            "\n\n",
            "\ncredentials = [\"ANTHROPIC_API_KEY\"]\n\n",
            1,
        ),
    ]
}

fn relay_with(state: &StateDir, env: &[(&str, &str)]) -> Relay {
    let file = harness_file(&state.0, &profiles());
    let mut all: Vec<(&str, &str)> =
        vec![("HANGAR_HARNESSES", file.to_str().expect("path")), ("HANGAR_SESSION_POLL_SECONDS", "0.3")];
    all.extend_from_slice(env);
    Relay::start(&state.0, &all)
}

/// A token of `scope` for person `id` (named `name`); its secret and id.
async fn person_token(relay: &Relay, id: &str, name: &str, scope: &str) -> (String, String) {
    let body = json!({"name": format!("{id}-{scope}"), "scope": scope, "person": {"id": id, "name": name}});
    let r = relay.call("POST", "/api/tokens", Some(ADMIN), Some(body)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let v = r.json();
    (v["secret"].as_str().expect("secret").to_string(), v["id"].as_str().expect("id").to_string())
}

async fn sandbox(relay: &Relay, token: &str, name: &str) -> Value {
    let r = relay.call("POST", "/api/sandboxes", Some(token), Some(json!({ "name": name }))).await;
    assert_eq!(r.status, 201, "{r:?}");
    r.json()
}

async fn session(relay: &Relay, token: &str, name: &str, sandbox: &str, harness: &str, secrets: &[&str]) -> Value {
    let body = json!({"name": name, "sandbox": sandbox, "harness": harness, "prompt": "Fix the failing tests\nthe config loader drops retries", "secrets": secrets});
    let r = relay.call("POST", "/api/sessions", Some(token), Some(body)).await;
    assert_eq!(r.status, 201, "{r:?}");
    r.json()
}

async fn fleet(relay: &Relay, token: &str, query: &str) -> Value {
    let r = relay.call("GET", &format!("/api/fleet{query}"), Some(token), None).await;
    assert_eq!(r.status, 200, "{query}: {r:?}");
    r.json()
}

fn unit<'a>(f: &'a Value, name: &str) -> &'a Value {
    f["units"].as_array().and_then(|u| u.iter().find(|u| u["name"] == name)).unwrap_or(&Value::Null)
}

fn names(f: &Value) -> Vec<String> {
    let mut v: Vec<String> =
        f["units"].as_array().expect("units").iter().map(|u| u["name"].as_str().unwrap_or("").to_string()).collect();
    v.sort();
    v
}

/// Reads `/api/fleet` until `cond` holds of it; fails after `limit` with the last read.
async fn fleet_until(relay: &Relay, token: &str, query: &str, limit: Duration, cond: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let f = fleet(relay, token, query).await;
        if cond(&f) {
            return f;
        }
        assert!(Instant::now() < deadline, "the fleet never got there: {f:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn tokens(u: &Value) -> u64 {
    u["tokens_1h"].as_array().map_or(0, |b| b.iter().filter_map(Value::as_u64).sum())
}

#[tokio::test]
async fn the_read_joins_every_unit_with_its_work_and_each_person_sees_theirs() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[("HANGAR_MAX_RUNS_PER_CREDENTIAL", "1")]);
    let (sean, _) = person_token(&relay, "sean", "Sean", "user").await;
    let (ana, _) = person_token(&relay, "ana", "Ana", "user").await;
    let (ci, _) = person_token(&relay, "ci", "CI", "jobs").await;
    // Ana's own key: a person may not use the admins' secrets unless the profile grants them.
    let r = relay
        .call(
            "POST",
            "/api/secrets",
            Some(&ana),
            Some(json!({"name": "ANTHROPIC_API_KEY", "value": "sk-ant-fleet-0123"})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");

    // Sandboxes are their creator's; the default one is nobody's.
    assert_eq!(sandbox(&relay, &sean, "sean-1").await["owner"], json!("sean"));
    for s in ["sean-2", "sean-3"] {
        sandbox(&relay, &sean, s).await;
    }
    for s in ["ana-1", "ana-2", "ana-3"] {
        sandbox(&relay, &ana, s).await;
    }
    let default = relay.call("GET", "/api/sandboxes/default", Some(ADMIN), None).await.json();
    assert_eq!(default["owner"], Value::Null, "{default}");

    session(&relay, &sean, "work", "sean-1", "agent", &[]).await;
    session(&relay, &sean, "pr", "sean-2", "pusher", &[]).await;
    session(&relay, &sean, "done", "sean-3", "quick", &[]).await;
    session(&relay, &ana, "boom", "ana-1", "fails", &[]).await;
    session(&relay, &ana, "q1", "ana-2", "sleeper-key", &["ANTHROPIC_API_KEY"]).await;
    session(&relay, &ana, "q2", "ana-3", "sleeper-key", &["ANTHROPIC_API_KEY"]).await;

    // The replayed agent has told everything (its usage comes last) and runs on.
    let f = fleet_until(&relay, ADMIN, "", STEP * 3, |f| {
        tokens(unit(f, "sean-1")) > 0
            && unit(f, "sean-2")["stage"] == json!("pr")
            && unit(f, "ana-1")["role"] == json!("failed")
            && unit(f, "ana-2")["role"] == json!("running")
            && unit(f, "sean-3").is_null()
    })
    .await;
    assert_eq!(f["person"], json!("admin"));
    assert!(f["at"].as_f64().is_some_and(|t| t > 1.7e9), "{f}");

    let w = unit(&f, "sean-1");
    let id = w["id"].as_str().expect("id");
    assert_eq!(w["tail"].as_str(), Some(&id[id.len() - 4..]));
    assert_eq!(
        (&w["kind"], &w["role"], &w["label"], &w["owner"], &w["harness"], &w["state"], &w["provider"]),
        (
            &json!("session"),
            &json!("running"),
            &json!("Running"),
            &json!("sean"),
            &json!("agent"),
            &json!("running"),
            &json!("local")
        ),
        "{w:#}"
    );
    assert_eq!((&w["session"]["name"], &w["session"]["state"]), (&json!("work"), &json!("running")), "{w:#}");
    assert_eq!(
        (&w["job"], &w["job_state"], &w["environment"], &w["repo"], &w["pr"]),
        (&Value::Null, &Value::Null, &Value::Null, &Value::Null, &Value::Null)
    );
    assert_eq!(w["model"], json!("claude-sonnet-5"), "the model the agent reported: {w:#}");
    // The stages its own events gave: reads first (plan), an edit, the tests, an edit, the tests.
    let stages: Vec<&str> =
        w["stages"].as_array().expect("stages").iter().map(|s| s["stage"].as_str().unwrap_or("")).collect();
    assert_eq!(stages, ["plan", "edit", "test", "edit", "test"], "{w:#}");
    assert_eq!(w["stage"], json!("test"));
    assert_eq!(w["stages"][4]["ended_at"], Value::Null);
    assert!(w["stages"][0]["ended_at"].as_f64() >= w["stages"][0]["started_at"].as_f64(), "{w:#}");
    assert_eq!(w["stage_pct"], Value::Null);
    let est = &w["stage_estimate"];
    assert!(est["pct"].as_u64().is_some_and(|p| p < 100) && est["typical_s"].as_u64().is_some(), "{est}");
    assert!(est["basis"].as_str().is_some_and(|b| !b.is_empty()) && est["samples"].is_u64(), "{est}");
    assert_eq!((&w["files_changed"], &w["commits"]), (&json!(1), &json!(1)), "{w:#}");
    assert_eq!(w["usage"]["output_tokens"], json!(3912), "{w:#}");
    // New tokens: input and output (cache reads are not), in the last five minutes' buckets.
    assert_eq!(w["tokens_1h"].as_array().map(Vec::len), Some(12));
    assert_eq!(tokens(w), 48 + 3912, "{w:#}");
    assert!(w["now"].as_str().is_some_and(|n| n.starts_with("running git add -A")), "{w:#}");
    assert!(w["last_activity_at"].as_f64().is_some_and(|t| t > 1.7e9), "{w:#}");
    assert_eq!((&w["work"], &w["turn"], &w["live"]), (&json!("Fix the failing tests"), &json!(1), &json!(true)));
    assert!(w["task"].as_str().is_some_and(|t| t.contains("drops retries")), "{w:#}");
    assert!(w["expires_at"].as_f64() > w["created_at"].as_f64(), "the turn's deadline: {w:#}");
    // Time running: from the turn's start; no end while it runs.
    assert!(w["started_at"].as_f64() >= w["created_at"].as_f64(), "{w:#}");
    assert_eq!(w["ended_at"], Value::Null, "{w:#}");
    assert_eq!(
        (&w["ask"], &w["question"], &w["question_options"], &w["inbox"]),
        (&Value::Null, &Value::Null, &json!([]), &json!([]))
    );

    let p = unit(&f, "sean-2");
    assert_eq!(p["stages"].as_array().map(Vec::len), Some(1), "a push is the first signal: {p:#}");
    assert!(p["now"].as_str().is_some_and(|n| n.starts_with("running git push")), "{p:#}");
    assert_eq!(p["model"], json!("claude-opus-5"));

    // A failed turn opens an inbox item: the unit is failed, and asks its person to look.
    let b = unit(&f, "ana-1");
    assert_eq!(
        (&b["role"], &b["label"], &b["ask"]["kind"], &b["live"]),
        (&json!("failed"), &json!("Failed"), &json!("inbox"), &json!(false)),
        "{b:#}"
    );
    assert!(b["reason"]["title"].as_str().is_some_and(|t| t.contains("boom")), "{b:#}");
    let item = b["ask"]["item"].as_str().expect("the item").to_string();
    assert_eq!(b["inbox"], json!([item]), "the admin sees everyone's items: {b:#}");
    assert!(f["inbox"]["items"].as_array().is_some_and(|i| i.iter().any(|i| i["id"] == json!(item))), "{f:#}");
    assert_eq!(f["inbox"]["counts"]["failed"], json!(1));

    // One credential, one run at a time: the second turn waits for the slot.
    let q = unit(&f, "ana-3");
    assert_eq!(
        (&q["role"], &q["reason"]["title"], &q["stage"]),
        (&json!("queued"), &json!("Waiting for a slot"), &Value::Null),
        "{q:#}"
    );
    assert_eq!(
        f["counts"],
        json!({"approval": 0, "failed": 1, "denied": 0, "running": 3, "queued": 1, "off": 1}),
        "{f:#}"
    );
    // Running: work, pr (no credential: a slot each) and q1 (the credential's one).
    assert_eq!(f["slots"], json!({"used": 3, "max": 3}), "{f:#}");
    assert_eq!(
        f["owners"],
        json!([{"id": "ana", "name": "Ana", "count": 3}, {"id": "sean", "name": "Sean", "count": 2}, {"id": "none", "name": null, "count": 1}]),
        "{f:#}"
    );
    assert_eq!(unit(&f, "default")["kind"], json!("sandbox"));
    assert!(f["agent_text"].as_array().is_some_and(|a| a.contains(&json!("units.now"))), "{f}");

    // Settled units (their work ended, nothing waits) come with include_stopped.
    let all = fleet(&relay, ADMIN, "?include_stopped=true").await;
    let d = unit(&all, "sean-3");
    assert_eq!(
        (&d["role"], &d["reason"]["title"], &d["live"], &d["stage"]),
        (&json!("off"), &json!("Succeeded"), &json!(false), &Value::Null),
        "{d:#}"
    );
    // It keeps what a tile shows of the work that just ended: the task, the session and its
    // end, the harness, when it ran, and its usage with the cost estimate.
    assert_eq!(
        (&d["work"], &d["session"]["name"], &d["session"]["state"], &d["harness"], &d["label"]),
        (&json!("Fix the failing tests"), &json!("done"), &json!("succeeded"), &json!("quick"), &json!("Off")),
        "{d:#}"
    );
    assert!(d["started_at"].as_f64().is_some_and(|s| d["ended_at"].as_f64() >= Some(s)), "{d:#}");
    assert!(d["usage"]["cost_usd"].as_f64().is_some(), "the turn's usage stays: {d:#}");
    assert_eq!(all["units"].as_array().map(Vec::len), Some(7));

    // The Owners filter.
    assert_eq!(names(&fleet(&relay, ADMIN, "?owner=sean").await), ["sean-1", "sean-2"]);
    assert_eq!(names(&fleet(&relay, ADMIN, "?owner=none").await), ["default"]);
    let mine = fleet(&relay, ADMIN, "?owner=sean&include_stopped=true").await;
    assert_eq!(names(&mine), ["sean-1", "sean-2", "sean-3"]);
    assert_eq!(mine["counts"]["running"], json!(2), "counts are the units shown: {mine:#}");

    // A person sees their own work and their own inbox; an admin everyone's.
    let s = fleet(&relay, &sean, "").await;
    assert_eq!((names(&s), &s["person"]), (vec!["sean-1".to_string(), "sean-2".to_string()], &json!("sean")));
    assert_eq!(s["inbox"]["items"], json!([]), "{s:#}");
    let a = fleet(&relay, &ana, "").await;
    assert_eq!(names(&a), ["ana-1", "ana-2", "ana-3"]);
    assert_eq!(unit(&a, "ana-1")["inbox"], json!([item]));
    assert_eq!(a["owners"], json!([{"id": "ana", "name": "Ana", "count": 3}]));
    assert_eq!(names(&fleet(&relay, &ana, "?owner=sean").await), Vec::<String>::new());

    // A pipeline's token reaches only its jobs.
    for (method, path) in [("GET", "/api/fleet"), ("GET", "/api/fleet/stream"), ("POST", "/api/fleet/tickets")] {
        let r = relay.call(method, path, Some(&ci), None).await;
        assert_eq!((r.status, r.json()["error"]["code"].clone()), (403, json!("permission_denied")), "{path}: {r:?}");
    }
    for bad in ["?colour=red", "?include_stopped=yes"] {
        let r = relay.call("GET", &format!("/api/fleet{bad}"), Some(ADMIN), None).await;
        assert_eq!((r.status, r.json()["error"]["code"].clone()), (400, json!("invalid_argument")), "{bad}: {r:?}");
    }

    // A job's sandbox is the job's person's, and its unit the job's.
    let body = json!({"sandbox_spec": {"provider": "local"}, "harness": "quick", "prompt": "Ship it"});
    let r = relay.call("POST", "/api/jobs", Some(&sean), Some(body)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let job = r.json()["id"].as_str().expect("job id").to_string();
    let f = fleet_until(&relay, &sean, "?include_stopped=true", STEP * 3, |f| {
        f["units"]
            .as_array()
            .is_some_and(|u| u.iter().any(|u| u["job"] == json!(job) && u["job_state"] == json!("succeeded")))
    })
    .await;
    let j = f["units"].as_array().expect("units").iter().find(|u| u["job"] == json!(job)).expect("the job's unit");
    assert_eq!(
        (&j["kind"], &j["owner"], &j["actor"], &j["role"], &j["work"]),
        (&json!("job"), &json!("sean"), &json!("user:sean"), &json!("off"), &json!("Ship it")),
        "{j:#}"
    );
    assert!(j["session"]["name"].as_str().is_some_and(|n| n.starts_with("job-")), "{j:#}");
    // A job that just ended stays, with its final state, work and usage.
    assert_eq!((&j["label"], &j["reason"]["title"]), (&json!("Off"), &json!("Succeeded")), "{j:#}");
    assert!(j["usage"]["cost_usd"].as_f64().is_some() && j["started_at"].as_f64().is_some(), "{j:#}");
    assert!(names(&fleet(&relay, &ana, "?include_stopped=true").await).iter().all(|n| !n.starts_with("job-")));
}

/// The next event within `limit`, or `None` when none came.
async fn next_within(sse: &mut Sse, limit: Duration) -> Option<SseEvent> {
    tokio::time::timeout(limit, sse.next(Duration::from_secs(3600))).await.ok().flatten()
}

/// Events until none comes for `quiet` (at most `limit` in all), each with when it came.
async fn drain(sse: &mut Sse, quiet: Duration, limit: Duration) -> Vec<(Instant, SseEvent)> {
    let end = Instant::now() + limit;
    let mut out = Vec::new();
    while Instant::now() < end {
        match next_within(sse, quiet.min(end.saturating_duration_since(Instant::now()))).await {
            Some(e) => out.push((Instant::now(), e)),
            None => break,
        }
    }
    out
}

/// `<epoch>.<n>` as its two parts.
fn id_parts(e: &SseEvent) -> (String, u64) {
    let id = e.id.as_deref().unwrap_or_else(|| panic!("no id: {e:?}"));
    let (epoch, n) = id.split_once('.').unwrap_or_else(|| panic!("id {id:?}"));
    (epoch.to_string(), n.parse().unwrap_or_else(|_| panic!("id {id:?}")))
}

#[tokio::test]
async fn the_stream_starts_with_a_snapshot_coalesces_bursts_and_says_gone() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[]);
    let created = sandbox(&relay, ADMIN, "s1").await;
    let id = created["id"].as_str().expect("id").to_string();

    let mut sse = relay.sse("GET", "/api/fleet/stream", Some(ADMIN), None).await;
    assert_eq!(sse.status, 200);
    let first = sse.next(STEP).await.expect("the snapshot");
    assert_eq!(first.event, "snapshot", "{first:?}");
    let snap = first.json();
    assert_eq!(names(&snap), ["default", "s1"]);
    assert!(snap["counts"].is_object() && snap["slots"].is_object() && snap["inbox"]["items"].is_array(), "{snap}");
    let (epoch, n0) = id_parts(&first);

    // A replay writes a line every 150 ms for about four seconds: the unit changes with each.
    session(&relay, ADMIN, "burst", "s1", "burst", &[]).await;
    let events = drain(&mut sse, Duration::from_secs(4), Duration::from_secs(9)).await;
    let agents: Vec<&(Instant, SseEvent)> =
        events.iter().filter(|(_, e)| e.event == "agent" && e.json()["id"] == json!(id)).collect();
    assert!(agents.len() >= 2, "the unit's updates: {events:?}");
    for pair in agents.windows(2) {
        let gap = pair[1].0.duration_since(pair[0].0);
        assert!(gap >= Duration::from_millis(1900), "two agent events {gap:?} apart: {events:?}");
    }
    // ~28 lines in ~4.2 s, more than one change a second: coalesced to one every 2 s.
    assert!(agents.len() <= 5, "{} agent events: {events:?}", agents.len());
    let mut last = n0;
    for (_, e) in &events {
        let (ep, n) = id_parts(e);
        assert_eq!(ep, epoch);
        assert!(n >= last, "ids go forward: {events:?}");
        last = n;
    }
    assert!(last > n0);
    let latest = agents.last().expect("an agent event").1.json();
    assert_eq!(
        (&latest["role"], &latest["stage"]),
        (&json!("running"), &json!("test")),
        "the latest picture: {latest:#}"
    );
    assert!(tokens(&latest) > 0, "{latest:#}");
    assert!(
        events.iter().any(|(_, e)| e.event == "summary" && e.json()["counts"]["running"] == json!(1)),
        "{events:?}"
    );

    // Destroyed: gone at once.
    let r = relay.call("DELETE", "/api/sandboxes/s1", Some(ADMIN), None).await;
    assert_eq!(r.status, 204, "{r:?}");
    let t = Instant::now();
    let gone = loop {
        let e = sse.next(STEP).await.expect("an event");
        if e.event == "gone" {
            break e;
        }
    };
    assert_eq!(gone.json(), json!({ "id": id }));
    assert!(t.elapsed() < Duration::from_secs(2), "gone took {:?}", t.elapsed());
}

#[tokio::test]
async fn a_stream_resumes_from_last_event_id_and_a_stale_or_foreign_id_gets_a_snapshot() {
    let state = StateDir::new();
    let mut relay = relay_with(&state, &[]);
    sandbox(&relay, ADMIN, "a").await;
    let b = sandbox(&relay, ADMIN, "b").await;

    let mut sse = relay.sse("GET", "/api/fleet/stream?include_stopped=true", Some(ADMIN), None).await;
    let snap = sse.next(STEP).await.expect("snapshot");
    assert_eq!(snap.event, "snapshot");
    let last = snap.id.clone().expect("id");
    drop(sse);

    // Only `a` changes while the client is away.
    let r = relay.call("POST", "/api/sandboxes/a/pause", Some(ADMIN), None).await;
    assert_eq!(r.status, 200, "{r:?}");

    let path = "/api/fleet/stream?include_stopped=true";
    let mut sse = relay.sse_with(path, Some(ADMIN), &[("last-event-id", &last)]).await;
    assert_eq!(sse.status, 200);
    let events = drain(&mut sse, Duration::from_millis(1500), STEP).await;
    let kinds: Vec<&str> = events.iter().map(|(_, e)| e.event.as_str()).collect();
    assert!(!kinds.contains(&"snapshot"), "a resume sends what changed, not a snapshot: {kinds:?}");
    assert!(kinds.contains(&"inbox") && kinds.contains(&"summary"), "{kinds:?}");
    let agents: Vec<Value> = events.iter().filter(|(_, e)| e.event == "agent").map(|(_, e)| e.json()).collect();
    assert_eq!(agents.len(), 1, "only the unit that changed: {kinds:?}");
    assert_eq!(
        (&agents[0]["name"], &agents[0]["state"], &agents[0]["reason"]["title"]),
        (&json!("a"), &json!("paused"), &json!("Paused"))
    );
    assert!(agents.iter().all(|u| u["id"] != b["id"]));
    drop(sse);
    let r = relay.call("POST", "/api/sandboxes/a/resume", Some(ADMIN), None).await;
    assert_eq!(r.status, 200, "{r:?}");

    // A browser's new EventSource, which cannot set the header, says where it was in the query.
    let mut sse = relay.sse("GET", &format!("{path}&last_event_id={last}"), Some(ADMIN), None).await;
    assert_eq!(sse.status, 200);
    let events = drain(&mut sse, Duration::from_millis(1500), STEP).await;
    let kinds: Vec<&str> = events.iter().map(|(_, e)| e.event.as_str()).collect();
    assert!(!kinds.contains(&"snapshot") && kinds.contains(&"agent"), "resumed from the query: {kinds:?}");
    drop(sse);

    // Another run's id, an id ahead of the log, or no id at all: a snapshot.
    let (epoch, _) = id_parts(&snap);
    for bad in ["deadbeef.1".to_string(), format!("{epoch}.999999"), "garbage".to_string()] {
        let mut sse = relay.sse_with(path, Some(ADMIN), &[("last-event-id", &bad)]).await;
        assert_eq!(sse.next(STEP).await.expect("an event").event, "snapshot", "{bad}");
    }

    // After a restart, the old id is from before it.
    relay.stop();
    let relay = relay_with(&state, &[]);
    let mut sse = relay.sse_with(path, Some(ADMIN), &[("last-event-id", &last)]).await;
    let first = sse.next(STEP).await.expect("an event");
    assert_eq!(first.event, "snapshot");
    assert_ne!(id_parts(&first).0, epoch, "a new run, a new epoch");
    assert_eq!(names(&first.json()), ["a", "b", "default"]);
}

#[tokio::test]
async fn fleet_tickets_open_the_stream_once_and_streams_count_against_the_limits_and_close_on_revocation() {
    let state = StateDir::new();
    let relay = relay_with(&state, &[("HANGAR_TICKET_SECONDS", "1"), ("HANGAR_STREAM_MAX_PER_TOKEN", "2")]);
    let (sean, sean_id) = person_token(&relay, "sean", "Sean", "user").await;
    let (mcp, _) = person_token(&relay, "sean", "Sean", "mcp").await;
    sandbox(&relay, &sean, "mine").await;

    let ticket = |token: String| {
        let relay = &relay;
        async move {
            let r = relay.call("POST", "/api/fleet/tickets", Some(&token), None).await;
            assert_eq!(r.status, 201, "{r:?}");
            let v = r.json();
            assert_eq!(v["path"], json!("/api/fleet/stream"), "{v}");
            assert!(v["expires_at"].as_f64().is_some_and(|t| t > 1.7e9), "{v}");
            v["ticket"].as_str().expect("ticket").to_string()
        }
    };

    // Bound to its caller: the stream is sean's fleet, with the filter as asked.
    let t = ticket(sean.clone()).await;
    let mut s1 = relay.sse("GET", &format!("/api/fleet/stream?ticket={t}&owner=sean"), None, None).await;
    assert_eq!(s1.status, 200);
    let snap = s1.next(STEP).await.expect("snapshot");
    assert_eq!((snap.event.as_str(), &snap.json()["person"]), ("snapshot", &json!("sean")));
    assert_eq!(names(&snap.json()), ["mine"]);
    // Once only.
    let r = relay.call("GET", &format!("/api/fleet/stream?ticket={t}"), None, None).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(String::from_utf8_lossy(&r.body).contains("already used"), "{r:?}");
    // Late.
    let late = ticket(sean.clone()).await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let r = relay.call("GET", &format!("/api/fleet/stream?ticket={late}"), None, None).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(String::from_utf8_lossy(&r.body).contains("expired"), "{r:?}");
    // An MCP token is an agent's: no fleet tickets (it may read with its bearer header).
    let r = relay.call("POST", "/api/fleet/tickets", Some(&mcp), None).await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (403, json!("permission_denied")), "{r:?}");
    assert_eq!(relay.call("GET", "/api/fleet", Some(&mcp), None).await.status, 200);
    // The general tickets route issues them too.
    let r = relay.call("POST", "/api/tickets", Some(ADMIN), Some(json!({"path": "/api/fleet/stream"}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    let admin_ticket = r.json()["ticket"].as_str().expect("ticket").to_string();
    let mut a = relay.sse("GET", &format!("/api/fleet/stream?ticket={admin_ticket}"), None, None).await;
    assert_eq!(a.next(STEP).await.expect("snapshot").json()["person"], json!("admin"));

    // The ticket's stream is one of sean's two; a third is refused.
    let mut s2 = relay.sse("GET", "/api/fleet/stream", Some(&sean), None).await;
    assert_eq!(s2.status, 200);
    assert_eq!(s2.next(STEP).await.expect("snapshot").event, "snapshot");
    let r = relay.call("GET", "/api/fleet/stream", Some(&sean), None).await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (429, json!("resource_exhausted")), "{r:?}");
    assert!(String::from_utf8_lossy(&r.body).contains("HANGAR_STREAM_MAX_PER_TOKEN"), "{r:?}");

    // Revoked: both close, saying so.
    let r = relay.call("DELETE", &format!("/api/tokens/{sean_id}"), Some(ADMIN), None).await;
    assert_eq!(r.status, 204, "{r:?}");
    for s in [&mut s1, &mut s2] {
        let close = loop {
            let e = s.next(STEP).await.expect("an event before the end");
            if e.event == "close" {
                break e;
            }
        };
        assert_eq!(close.json()["reason"], json!("revoked"), "{close:?}");
        assert_eq!(close.json()["code"], json!("revoked"), "{close:?}");
        assert!(s.next(STEP).await.is_none(), "the stream ends after close");
    }
}
