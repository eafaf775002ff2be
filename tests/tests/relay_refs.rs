//! References (docs/api.md, "References"): every route that takes a sandbox, a session, a job or
//! an inbox item takes its full id, its name, a unit's short name (`HGR-8AA3`, any case) and a
//! unique prefix of the id or name, resolved among what the caller sees. A reference that names
//! more than one of the caller's things is a 400 `ambiguous` listing only the caller's; another
//! person's things stay a 404, and never make one of the caller's ambiguous.
use hangar_e2e::{
    relay::{Relay, StateDir, ADMIN},
    sessions::{harness_file, profile, until_ended},
};
use serde_json::{json, Value};

fn relay(state: &StateDir) -> Relay {
    let quick: Vec<String> = ["bash", "-c", "cat >/dev/null; echo done"].iter().map(|s| s.to_string()).collect();
    let failing: Vec<String> = ["bash", "-c", "cat >/dev/null; exit 4"].iter().map(|s| s.to_string()).collect();
    let file = harness_file(
        &state.0,
        &[profile("quick", &quick, Some(&quick), "text", "none"), profile("failing", &failing, None, "text", "none")],
    );
    Relay::start(
        &state.0,
        &[("HANGAR_HARNESSES", file.to_str().expect("path")), ("HANGAR_SESSION_POLL_SECONDS", "0.3")],
    )
}

/// A user token for person `id`: its secret.
async fn person(relay: &Relay, id: &str) -> String {
    let body = json!({"name": id, "scope": "user", "person": {"id": id, "name": id}});
    let r = relay.call("POST", "/api/tokens", Some(ADMIN), Some(body)).await;
    assert_eq!(r.status, 201, "{r:?}");
    r.json()["secret"].as_str().expect("secret").to_string()
}

/// The status and body of a call.
async fn call(relay: &Relay, token: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let r = relay.call(method, path, Some(token), body).await;
    (r.status, serde_json::from_slice(&r.body).unwrap_or(Value::Null))
}

async fn ok(relay: &Relay, token: &str, method: &str, path: &str, body: Option<Value>) -> Value {
    let (status, v) = call(relay, token, method, path, body).await;
    assert!((200..300).contains(&status), "{method} {path}: {status} {v}");
    v
}

/// The ids an ambiguous answer lists, after checking its status, code and message.
fn candidates(status: u16, v: &Value) -> Vec<String> {
    assert_eq!((status, v["error"]["code"].as_str()), (400, Some("ambiguous")), "{v}");
    let listed: Vec<String> = v["error"]["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .map(|c| {
            assert!(c["name"].is_string(), "{c}");
            c["id"].as_str().expect("id").to_string()
        })
        .collect();
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(listed.iter().all(|id| message.contains(id.as_str())), "the message names them: {message}");
    listed
}

/// `sbx_` and the first `n` characters after it.
fn prefix(id: &str, n: usize) -> String {
    id.chars().take(4 + n).collect()
}

#[tokio::test]
async fn sandboxes_are_found_by_prefix_short_name_and_name_prefix_among_the_callers_own() {
    let state = StateDir::new();
    let relay = relay(&state);
    let (ana, bob) = (person(&relay, "ana").await, person(&relay, "bob").await);
    let a = ok(&relay, &ana, "POST", "/api/sandboxes", Some(json!({"name": "proj-ana"}))).await;
    let b1 = ok(&relay, &bob, "POST", "/api/sandboxes", Some(json!({"name": "proj-bob-1"}))).await;
    let b2 = ok(&relay, &bob, "POST", "/api/sandboxes", Some(json!({"name": "proj-bob-2"}))).await;
    let id = |v: &Value| v["id"].as_str().expect("id").to_string();
    let (a, b1, b2) = (id(&a), id(&b1), id(&b2));

    // The list and a get name each by its short name, as the fleet's units do.
    let listed = ok(&relay, &ana, "GET", "/api/sandboxes", None).await;
    let short = listed["sandboxes"]
        .as_array()
        .and_then(|l| l.iter().find(|s| s["id"] == a.as_str()))
        .and_then(|s| s["short"].as_str())
        .expect("a short name")
        .to_string();
    assert!(short.starts_with("HGR-") && short.len() >= 8, "{short}");
    assert!(a.to_ascii_uppercase().ends_with(&short[4..]), "{short} is the tail of {a}");

    // A prefix of the id, the short name (any case), a prefix of the name: the same sandbox.
    for reference in [prefix(&a, 4), prefix(&a, 6).to_ascii_uppercase(), short.clone(), short.to_lowercase()] {
        let v = ok(&relay, &ana, "GET", &format!("/api/sandboxes/{reference}"), None).await;
        assert_eq!((v["id"].as_str(), v["short"].as_str()), (Some(a.as_str()), Some(short.as_str())), "{reference}");
    }
    // Working inside by a short name: the sandbox the reference names.
    let v =
        ok(&relay, &ana, "POST", &format!("/api/sandboxes/{short}/exec"), Some(json!({"command": "echo hi"}))).await;
    assert_eq!(v["stdout"], "hi\n", "{v}");

    // Too short to be a reference: no guess.
    let (status, v) = call(&relay, &ana, "GET", &format!("/api/sandboxes/{}", prefix(&a, 3)), None).await;
    assert_eq!(status, 404, "{v}");

    // `proj` names three sandboxes, one of them ana's: hers. Bob has two: ambiguous, his alone listed.
    let v = ok(&relay, &ana, "GET", "/api/sandboxes/proj", None).await;
    assert_eq!(v["id"], a.as_str(), "{v}");
    let (status, v) = call(&relay, &bob, "POST", "/api/sandboxes/proj/pause", None).await;
    let mut listed = candidates(status, &v);
    listed.sort();
    let mut bobs = vec![b1.clone(), b2.clone()];
    bobs.sort();
    assert_eq!(listed, bobs, "{v}");
    // Nothing was paused by an ambiguous reference.
    for b in [&b1, &b2] {
        assert_eq!(ok(&relay, &bob, "GET", &format!("/api/sandboxes/{b}"), None).await["state"], "running");
    }
    // Exactly one of bob's: managed by its prefix.
    let v = ok(&relay, &bob, "POST", "/api/sandboxes/proj-bob-2/pause", None).await;
    assert_eq!((v["id"].as_str(), v["state"].as_str()), (Some(b2.as_str()), Some("paused")), "{v}");
    ok(&relay, &bob, "POST", &format!("/api/sandboxes/{}/resume", prefix(&b2, 8)), None).await;
}

#[tokio::test]
async fn sessions_jobs_and_inbox_items_are_found_by_unique_prefix_and_never_across_persons() {
    let state = StateDir::new();
    let relay = relay(&state);
    let (ana, bob) = (person(&relay, "ana").await, person(&relay, "bob").await);
    for (token, name) in [(&ana, "ana-box"), (&bob, "bob-box")] {
        ok(&relay, token, "POST", "/api/sandboxes", Some(json!({"name": name}))).await;
    }
    let start = |name: &str, sandbox: &str, harness: &str| json!({"name": name, "sandbox": sandbox, "harness": harness, "prompt": "go"});
    let a = ok(&relay, &ana, "POST", "/api/sessions", Some(start("fix-ana", "ana-box", "failing"))).await;
    let b1 = ok(&relay, &bob, "POST", "/api/sessions", Some(start("fix-bob-1", "bob-box", "quick"))).await;
    let b2 = ok(&relay, &bob, "POST", "/api/sessions", Some(start("fix-bob-2", "bob-box", "quick"))).await;
    let id = |v: &Value| v["id"].as_str().expect("id").to_string();
    let (a, b1, b2) = (id(&a), id(&b1), id(&b2));
    for (token, s) in [(&ana, &a), (&bob, &b1), (&bob, &b2)] {
        until_ended(&relay, token, s, hangar_e2e::STEP).await;
    }

    // Sessions: an id prefix, a name prefix; ana's own among bob's.
    let v = ok(&relay, &ana, "GET", &format!("/api/sessions/{}", prefix(&a, 4)), None).await;
    assert_eq!(v["id"], a.as_str());
    assert_eq!(ok(&relay, &ana, "GET", "/api/sessions/fix-", None).await["id"], a.as_str());
    let (status, v) = call(&relay, &bob, "GET", "/api/sessions/fix-", None).await;
    let mut listed = candidates(status, &v);
    listed.sort();
    let mut bobs = vec![b1.clone(), b2.clone()];
    bobs.sort();
    assert_eq!(listed, bobs);
    assert!(!v.to_string().contains(&a) && !v.to_string().contains("fix-ana"), "nothing of ana's: {v}");
    // Another person's session by its prefix: not found, as by its id.
    let (status, v) = call(&relay, &ana, "GET", &format!("/api/sessions/{}", prefix(&b1, 6)), None).await;
    assert_eq!((status, v["error"]["code"].as_str()), (404, Some("not_found")), "{v}");
    let (status, _) = call(&relay, &ana, "GET", &format!("/api/sessions/{b1}"), None).await;
    assert_eq!(status, 404);
    // An admin sees everyone's: `fix-` names all three.
    let (status, v) = call(&relay, ADMIN, "GET", "/api/sessions/fix-", None).await;
    assert_eq!(candidates(status, &v).len(), 3, "{v}");

    // Inbox items: ana's failed turn, acknowledged by a prefix of its id.
    let inbox = ok(&relay, &ana, "GET", "/api/inbox", None).await;
    let item = inbox["items"]
        .as_array()
        .and_then(|i| i.iter().find(|i| i["kind"] == "failed"))
        .and_then(|i| i["id"].as_str())
        .unwrap_or_else(|| panic!("a failed item: {inbox}"))
        .to_string();
    let (status, v) = call(&relay, &bob, "POST", &format!("/api/inbox/{}/ack", prefix(&item, 6)), None).await;
    assert_eq!(status, 404, "another person's item: {v}");
    let v = ok(&relay, &ana, "POST", &format!("/api/inbox/{}/ack", prefix(&item, 6)), None).await;
    assert_eq!((v["id"].as_str(), v["state"].as_str()), (Some(item.as_str()), Some("acked")), "{v}");

    // Jobs: by a prefix of the id, the caller's only.
    let job =
        ok(&relay, &bob, "POST", "/api/jobs", Some(json!({"sandbox": "bob-box", "harness": "quick", "prompt": "go"})))
            .await;
    let job = id(&job);
    let v = ok(&relay, &bob, "GET", &format!("/api/jobs/{}", prefix(&job, 5)), None).await;
    assert_eq!(v["id"], job.as_str());
    let (status, _) = call(&relay, &ana, "GET", &format!("/api/jobs/{}", prefix(&job, 5)), None).await;
    assert_eq!(status, 404);
    let (status, _) = call(&relay, &bob, "GET", "/api/jobs/job_", None).await;
    assert_eq!(status, 404, "a bare kind is no reference");
}
