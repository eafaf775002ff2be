//! The relay's answers to requests it cannot serve: each is a JSON error with the right status
//! and code, the same on every route that takes the same input, and nothing runs.
use hangar_e2e::{
    docker::{self, Containers, PLAIN_IMAGE},
    relay::{Relay, StateDir, ADMIN},
    sessions::{all_events, harness_file, profile, start, until_ended},
    STEP,
};
use serde_json::{json, Value};

fn code(r: &hangar_e2e::RawResponse) -> (u16, Value) {
    (r.status, r.json()["error"]["code"].clone())
}

/// A `cwd` that does not exist, on every route that takes one, in the sandbox `sandbox`.
async fn a_missing_cwd_is_refused_everywhere(relay: &Relay, sandbox: &str) {
    let body = json!({"command": "echo ran", "cwd": "no/such/dir"});
    for route in ["exec", "exec/stream", "processes"] {
        let r = relay.call("POST", &format!("/api/sandboxes/{sandbox}/{route}"), Some(ADMIN), Some(body.clone())).await;
        assert_eq!(code(&r), (400, json!("invalid_argument")), "{route}: {r:?}");
        let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
        assert!(message.contains("no/such/dir"), "{route}: the message names the cwd: {message}");
    }
    // Nothing was started by the refused calls.
    let list = relay.call("GET", &format!("/api/sandboxes/{sandbox}/processes"), Some(ADMIN), None).await;
    assert_eq!(list.json()["processes"], json!([]), "{list:?}");
    // A directory that exists is fine.
    let ok = relay
        .call("POST", &format!("/api/sandboxes/{sandbox}/exec"), Some(ADMIN), Some(json!({"command": "mkdir -p d/e"})))
        .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    let ok = relay
        .call(
            "POST",
            &format!("/api/sandboxes/{sandbox}/exec"),
            Some(ADMIN),
            Some(json!({"command": "pwd", "cwd": "d/e"})),
        )
        .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    assert!(ok.json()["stdout"].as_str().unwrap_or_default().trim_end().ends_with("/d/e"), "{ok:?}");
}

#[tokio::test]
async fn a_missing_cwd_is_a_400_on_every_route() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    a_missing_cwd_is_refused_everywhere(&relay, "default").await;
}

#[tokio::test]
async fn a_missing_cwd_is_a_400_without_a_daemon_too() {
    if !docker::available("a_missing_cwd_is_a_400_without_a_daemon_too") {
        return;
    }
    let mut containers = Containers::new();
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let name = containers.name("cwd");
    let body = json!({"name": name, "provider": "docker", "options": {"image": PLAIN_IMAGE}});
    let r = relay.call("POST", "/api/sandboxes", Some(ADMIN), Some(body)).await;
    assert_eq!((r.status, r.json()["daemon"].clone()), (201, json!(false)), "{r:?}");
    a_missing_cwd_is_refused_everywhere(&relay, &name).await;
}

#[tokio::test]
async fn commands_no_kernel_would_run_are_a_400() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    for (route, command) in
        [("exec", "echo a\u{0}b"), ("exec/stream", "\u{0}"), ("processes", "sleep 1\u{0}"), ("exec", " ")]
    {
        let r = relay
            .call("POST", &format!("/api/sandboxes/default/{route}"), Some(ADMIN), Some(json!({ "command": command })))
            .await;
        assert_eq!(code(&r), (400, json!("invalid_argument")), "{route} {command:?}: {r:?}");
    }
    let r = relay.call("GET", "/api/sandboxes/default/watch?path=a%00b", Some(ADMIN), None).await;
    assert_eq!(code(&r), (400, json!("invalid_argument")), "a watch of a path with a NUL: {r:?}");
}

#[tokio::test]
async fn times_are_epoch_seconds_everywhere() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    let near = |v: &Value, what: &str| {
        let t = v.as_f64().unwrap_or_else(|| panic!("{what} is a number: {v}"));
        assert!((t - now).abs() < 120.0, "{what} {t} is about now ({now})");
    };
    let sbx = relay.call("GET", "/api/sandboxes/default", Some(ADMIN), None).await.json();
    near(&sbx["created_at"], "a sandbox's created_at");
    let tok = relay.call("POST", "/api/tokens", Some(ADMIN), Some(json!({"name": "t", "scope": "user"}))).await.json();
    near(&tok["created_at"], "a token's created_at");
    assert_eq!(tok["revoked_at"], Value::Null);
    let p = relay.call("POST", "/api/sandboxes/default/processes", Some(ADMIN), Some(json!({"command": "true"}))).await;
    assert_eq!(p.status, 201, "{p:?}");
    near(&p.json()["started_at"], "a started process's started_at");
    let id = p.json()["process_id"].as_str().unwrap_or_default().to_string();
    // Polled with await: a blocking executor inside the test's runtime would starve the client.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let ended = loop {
        let v = relay.call("GET", &format!("/api/sandboxes/default/processes/{id}"), Some(ADMIN), None).await.json();
        if v["process"]["state"] == json!("exited") {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "the process ends: {v}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    near(&ended["process"]["started_at"], "an exited process's started_at");
    near(&ended["process"]["ended_at"], "an exited process's ended_at");
}

#[tokio::test]
async fn another_token_s_process_is_not_found_and_no_mac_is_shown() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    relay.share_default().await;
    let mine = relay.token("mine", "user").await;
    let theirs = relay.token("theirs", "user").await;
    let p = relay
        .call("POST", "/api/sandboxes/default/processes", Some(&mine.secret), Some(json!({"command": "sleep 30"})))
        .await;
    assert_eq!(p.status, 201, "{p:?}");
    let id = p.json()["process_id"].as_str().unwrap_or_default().to_string();
    let base = format!("/api/sandboxes/default/processes/{id}");
    let calls = [
        ("GET", base.clone(), None),
        ("GET", format!("{base}/stream"), None),
        ("POST", format!("{base}/input"), Some(json!({"input": "x"}))),
        ("DELETE", base.clone(), None),
    ];
    for (method, path, body) in calls {
        let r = relay.call(method, &path, Some(&theirs.secret), body).await;
        assert_eq!(code(&r), (404, json!("not_found")), "{method} {path}: {r:?}");
        let text = String::from_utf8_lossy(&r.body).into_owned();
        assert!(!text.contains("hangar:"), "{method} {path}: no tag, and so no MAC, is shown: {text}");
        assert!(text.contains(&id), "{method} {path}: the error names the id: {text}");
    }
    let r = relay.call("DELETE", &base, Some(&mine.secret), None).await;
    assert_eq!(r.status, 202, "{r:?}");
}

/// A session's events read with each parameter out of its range: a 400 naming the parameter and
/// its range (never a clamp that reads something else), on the long poll and on both streams of
/// events; the edges of each range are read as asked, and the refusals lose nothing.
#[tokio::test]
async fn out_of_range_event_reads_are_a_400_naming_the_range() {
    let state = StateDir::new();
    let quick = ["bash", "-c", "cat >/dev/null; echo one; echo two; echo three"].map(String::from);
    let file = harness_file(&state.0, &[profile("quick", &quick, None, "text", "none")]);
    let relay = Relay::start(&state.0, &[("HANGAR_HARNESSES", file.to_str().expect("path"))]);
    let body = json!({"name": "ranges", "sandbox": "default", "harness": "quick", "prompt": "p"});
    start(&relay, ADMIN, body).await;
    until_ended(&relay, ADMIN, "ranges", STEP).await;
    let all = all_events(&relay, ADMIN, "ranges").await;
    assert!(all.len() >= 3, "{all:?}");

    let events = "/api/sessions/ranges/events";
    for (query, names) in [
        ("since=-1", ["since: -1", "0 or more"]),
        ("limit=5000", ["limit: 5000", "1 to 1000"]),
        ("limit=0", ["limit: 0", "1 to 1000"]),
        ("wait=26", ["wait: 26", "0 to 25 seconds"]),
        ("wait=-1", ["wait: -1", "0 to 25 seconds"]),
        ("wait=NaN", ["wait: NaN", "0 to 25 seconds"]),
    ] {
        let r = relay.call("GET", &format!("{events}?{query}"), Some(ADMIN), None).await;
        assert_eq!(code(&r), (400, json!("invalid_argument")), "{query}: {r:?}");
        let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
        for name in names {
            assert!(message.contains(name), "{query}: the message says {name:?}: {message}");
        }
    }
    for path in ["/api/sessions/ranges/events/stream?since=-1", "/api/jobs/job_x/events/stream?since=-1"] {
        let r = relay.call("GET", path, Some(ADMIN), None).await;
        assert_eq!(code(&r), (400, json!("invalid_argument")), "{path}: {r:?}");
        assert!(String::from_utf8_lossy(&r.body).contains("since: -1"), "{path}: {r:?}");
    }
    let s = relay.sse_with("/api/sessions/ranges/events/stream", Some(ADMIN), &[("last-event-id", "-1")]).await;
    assert_eq!(s.status, 400, "a Last-Event-ID before the first event");

    // The edges are read as asked.
    let r = relay.call("GET", &format!("{events}?since=0&limit=1000&wait=25"), Some(ADMIN), None).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["events"], json!(all), "every event, once");
    let r = relay.call("GET", &format!("{events}?since=1&limit=1&wait=0"), Some(ADMIN), None).await;
    assert_eq!(r.status, 200, "{r:?}");
    let page = r.json();
    assert_eq!(
        (page["events"].clone(), page["next"].clone(), page["more"].clone()),
        (json!([all[1]]), json!(2), json!(true))
    );
    // Nothing was lost to the refusals.
    assert_eq!(all_events(&relay, ADMIN, "ranges").await, all);
}
