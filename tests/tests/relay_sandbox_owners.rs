//! Sandboxes have owners, and sharing is explicit. A sandbox is its creator's person's (or a
//! job's); `default`, which nobody made, is the admins'. Only an admin, the owner and the persons
//! it is shared with (`shared_with`, `"*"` for everyone) may work inside it: commands, processes,
//! watches and their tickets, sessions and their turns, jobs, MCP tools. Only an admin or the
//! owner may pause, resume, destroy it or change whom it is shared with (`PATCH
//! /api/sandboxes/{ref}`). Every refusal is a 403 naming the sandbox and why; reading a sandbox
//! stays open.
use hangar_e2e::{
    mcp,
    relay::{Relay, StateDir, ADMIN},
    sessions::{harness_file, profile, until_ended},
    STEP,
};
use serde_json::{json, Value};

fn relay_with_harness(state: &StateDir) -> Relay {
    let quick: Vec<String> = ["bash", "-c", "cat >/dev/null; echo done"].iter().map(|s| s.to_string()).collect();
    let file = harness_file(&state.0, &[profile("quick", &quick, Some(&quick), "text", "none")]);
    Relay::start(
        &state.0,
        &[("HANGAR_HARNESSES", file.to_str().expect("path")), ("HANGAR_SESSION_POLL_SECONDS", "0.3")],
    )
}

/// A token of `scope` for person `id`: its secret.
async fn person_token(relay: &Relay, id: &str, scope: &str) -> String {
    let body = json!({"name": format!("{id}-{scope}"), "scope": scope, "person": {"id": id, "name": id}});
    let r = relay.call("POST", "/api/tokens", Some(ADMIN), Some(body)).await;
    assert_eq!(r.status, 201, "{r:?}");
    r.json()["secret"].as_str().expect("secret").to_string()
}

/// The status, error code and message of a call.
async fn call(relay: &Relay, token: &str, method: &str, path: &str, body: Option<Value>) -> (u16, String, String) {
    let r = relay.call(method, path, Some(token), body).await;
    let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    let field = |k: &str| v["error"][k].as_str().unwrap_or_default().to_string();
    (r.status, field("code"), field("message"))
}

/// Every way inside a sandbox and every way of managing it, as `(method, path, body)`.
fn inside(sandbox: &str) -> Vec<(&'static str, String, Option<Value>)> {
    let s = format!("/api/sandboxes/{sandbox}");
    vec![
        ("POST", format!("{s}/exec"), Some(json!({"command": "cat /proc/1/environ"}))),
        ("POST", format!("{s}/exec/stream"), Some(json!({"command": "true"}))),
        ("POST", format!("{s}/processes"), Some(json!({"command": "sleep 30"}))),
        ("GET", format!("{s}/processes"), None),
        ("GET", format!("{s}/watch?path=."), None),
        ("POST", "/api/tickets".into(), Some(json!({"path": format!("{s}/watch")}))),
        (
            "POST",
            "/api/sessions".into(),
            Some(json!({"name": "in", "sandbox": sandbox, "harness": "quick", "prompt": "hi"})),
        ),
        ("POST", "/api/jobs".into(), Some(json!({"sandbox": sandbox, "harness": "quick", "prompt": "hi"}))),
    ]
}

fn manage(sandbox: &str) -> Vec<(&'static str, String, Option<Value>)> {
    let s = format!("/api/sandboxes/{sandbox}");
    vec![
        ("POST", format!("{s}/pause"), None),
        ("POST", format!("{s}/resume"), None),
        ("DELETE", s.clone(), None),
        ("PATCH", s, Some(json!({"shared_with": ["*"]}))),
    ]
}

/// Asserts that every one of `calls` is refused to `token` with 403 `permission_denied` and a
/// message holding `why`.
async fn all_refused(relay: &Relay, token: &str, calls: Vec<(&'static str, String, Option<Value>)>, why: &str) {
    for (method, path, body) in calls {
        let (status, code, message) = call(relay, token, method, &path, body).await;
        assert_eq!((status, code.as_str()), (403, "permission_denied"), "{method} {path}: {message}");
        assert!(message.contains(why), "{method} {path}: {message:?} does not say {why:?}");
    }
}

async fn exec(relay: &Relay, token: &str, sandbox: &str, command: &str) -> Value {
    let r = relay
        .call("POST", &format!("/api/sandboxes/{sandbox}/exec"), Some(token), Some(json!({ "command": command })))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

async fn share(relay: &Relay, token: &str, sandbox: &str, persons: Value) -> Value {
    let r = relay
        .call("PATCH", &format!("/api/sandboxes/{sandbox}"), Some(token), Some(json!({ "shared_with": persons })))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

#[tokio::test]
async fn a_sandbox_is_its_owners_and_theirs_it_is_shared_with() {
    let state = StateDir::new();
    let relay = relay_with_harness(&state);
    let ana = person_token(&relay, "ana", "user").await;
    let bob = person_token(&relay, "bob", "user").await;

    let r = relay.call("POST", "/api/sandboxes", Some(&ana), Some(json!({"name": "anas"}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(exec(&relay, &ana, "anas", "echo mine").await["stdout"], json!("mine\n"));

    // Bob may look at it, not work in it nor manage it.
    all_refused(&relay, &bob, inside("anas"), r#"sandbox "anas" is ana's and not shared with you"#).await;
    all_refused(&relay, &bob, manage("anas"), "only ana or an admin may").await;
    let seen = relay.call("GET", "/api/sandboxes/anas", Some(&bob), None).await;
    assert_eq!((seen.status, &seen.json()["owner"], &seen.json()["shared_with"]), (200, &json!("ana"), &json!([])));

    // Shared with Bob: he works in it (a session too), and still may not manage it.
    let v = share(&relay, &ana, "anas", json!(["bob"])).await;
    assert_eq!((&v["name"], &v["shared_with"]), (&json!("anas"), &json!(["bob"])), "{v}");
    let listed = relay.call("GET", "/api/sandboxes", Some(&bob), None).await.json();
    let row = listed["sandboxes"].as_array().and_then(|l| l.iter().find(|s| s["name"] == json!("anas"))).cloned();
    assert_eq!(row.map(|r| r["shared_with"].clone()), Some(json!(["bob"])), "{listed}");
    assert_eq!(exec(&relay, &bob, "anas", "echo shared").await["stdout"], json!("shared\n"));
    let body = json!({"name": "bobs", "sandbox": "anas", "harness": "quick", "prompt": "hi"});
    let r = relay.call("POST", "/api/sessions", Some(&bob), Some(body)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let first = until_ended(&relay, &bob, "bobs", STEP * 3).await;
    assert_eq!(first["state"], json!("succeeded"), "{first}");
    all_refused(&relay, &bob, manage("anas"), "only ana or an admin may").await;

    // Withdrawn: Bob is refused again, his session's next turn too.
    assert_eq!(share(&relay, &ana, "anas", json!([])).await["shared_with"], json!([]));
    all_refused(&relay, &bob, inside("anas"), "is ana's and not shared with you").await;
    let (status, code, message) =
        call(&relay, &bob, "POST", "/api/sessions/bobs/turns", Some(json!({"prompt": "again"}))).await;
    assert_eq!((status, code.as_str()), (403, "permission_denied"), "{message}");
    assert!(message.contains("not shared with you"), "{message}");

    // The owner and an admin manage it.
    assert_eq!(share(&relay, ADMIN, "anas", json!(["cy"])).await["shared_with"], json!(["cy"]));
    for (method, path) in [("POST", "/api/sandboxes/anas/pause"), ("POST", "/api/sandboxes/anas/resume")] {
        assert_eq!(relay.call(method, path, Some(&ana), None).await.status, 200, "{method} {path}");
    }
    assert_eq!(relay.call("DELETE", "/api/sandboxes/anas", Some(&ana), None).await.status, 204);
    let log = relay.log();
    assert!(log.contains("sandbox_refused") && log.contains("sandbox_shared"), "the refusals and sharing are logged");
}

#[tokio::test]
async fn the_default_sandbox_is_the_admins_until_an_admin_shares_it() {
    let state = StateDir::new();
    let relay = relay_with_harness(&state);
    let user = person_token(&relay, "ana", "user").await;
    let agent = person_token(&relay, "bob", "mcp").await;
    let session = mcp::open_session(&relay, &agent).await;

    for token in [&user, &agent] {
        all_refused(&relay, token, inside("default"), "has no owner: only admins may use it unless an admin shares it")
            .await;
        all_refused(&relay, token, manage("default"), r#"sandbox "default" has no owner: only admins may"#).await;
    }
    let r = mcp::call_tool(&relay, &agent, &session, "exec", json!({"sandbox": "default", "command": "true"})).await;
    assert_eq!(r["isError"], json!(true), "{r}");
    assert_eq!(r["structuredContent"]["error"]["code"], json!("permission_denied"), "{r}");
    let listed = mcp::call_tool(&relay, &agent, &session, "sandboxes", json!({})).await;
    assert_eq!(listed["structuredContent"]["sandboxes"], json!([]), "the tool lists only what it may use: {listed}");
    let r = relay.call("GET", "/api/sandboxes/default", Some(&user), None).await;
    assert_eq!((r.status, &r.json()["owner"]), (200, &Value::Null), "reading it stays open: {r:?}");
    assert_eq!(exec(&relay, ADMIN, "default", "echo admin").await["stdout"], json!("admin\n"));

    // Shared with everyone: every person's tokens work in it; only admins still manage it.
    assert_eq!(share(&relay, ADMIN, "default", json!(["*"])).await["shared_with"], json!(["*"]));
    assert_eq!(exec(&relay, &user, "default", "echo user").await["stdout"], json!("user\n"));
    assert_eq!(exec(&relay, &agent, "default", "echo agent").await["stdout"], json!("agent\n"));
    let r =
        mcp::call_tool(&relay, &agent, &session, "exec", json!({"sandbox": "default", "command": "echo tool"})).await;
    assert_eq!((&r["isError"], &r["structuredContent"]["stdout"]), (&json!(false), &json!("tool\n")), "{r}");
    let listed = mcp::call_tool(&relay, &agent, &session, "sandboxes", json!({})).await;
    let names: Vec<&Value> = listed["structuredContent"]["sandboxes"].as_array().expect("list").iter().collect();
    assert_eq!(
        names.iter().map(|s| (&s["name"], &s["shared_with"])).collect::<Vec<_>>(),
        [(&json!("default"), &json!(["*"]))],
        "{listed}"
    );
    all_refused(&relay, &user, manage("default"), "has no owner: only admins may").await;
}

#[tokio::test]
async fn sharing_takes_only_person_ids_and_says_what_is_wrong() {
    let state = StateDir::new();
    let relay = relay_with_harness(&state);
    let ana = person_token(&relay, "ana", "user").await;
    let bob = person_token(&relay, "bob", "user").await;
    let r = relay
        .call("POST", "/api/sandboxes", Some(&ana), Some(json!({"name": "box", "shared_with": ["bob", "*", "bob"]})))
        .await;
    assert_eq!((r.status, &r.json()["shared_with"]), (201, &json!(["*", "bob"])), "sorted, once each: {r:?}");
    assert_eq!(exec(&relay, &bob, "box", "echo in").await["stdout"], json!("in\n"));

    let many: Vec<String> = (0..65).map(|i| format!("p{i}")).collect();
    for body in [
        json!({"shared_with": ["bad\u{1}id"]}),
        json!({"shared_with": [""]}),
        json!({"shared_with": ["x".repeat(129)]}),
        json!({"shared_with": many}),
        json!({"shared_with": "bob"}),
        json!({"shared_with": ["bob"], "colour": "red"}),
        json!({}),
    ] {
        let (status, code, message) = call(&relay, &ana, "PATCH", "/api/sandboxes/box", Some(body.clone())).await;
        assert_eq!((status, code.as_str()), (400, "invalid_argument"), "{body}: {message}");
    }
    let (status, _, message) =
        call(&relay, &ana, "PATCH", "/api/sandboxes/box", Some(json!({"shared_with": many}))).await;
    assert!(status == 400 && message.contains("at most 64 person ids"), "{message}");
    let kept = relay.call("GET", "/api/sandboxes/box", Some(&ana), None).await.json();
    assert_eq!(kept["shared_with"], json!(["*", "bob"]), "a refused change changes nothing: {kept}");

    let (status, code, _) = call(&relay, &ana, "PATCH", "/api/sandboxes/nope", Some(json!({"shared_with": []}))).await;
    assert_eq!((status, code.as_str()), (404, "not_found"));
    let body = json!({"name": "other", "shared_with": ["bad\u{7f}id"]});
    let (status, code, _) = call(&relay, &ana, "POST", "/api/sandboxes", Some(body)).await;
    assert_eq!((status, code.as_str()), (400, "invalid_argument"));
    assert_eq!(relay.call("GET", "/api/sandboxes/other", Some(&ana), None).await.status, 404, "nothing was made");
}
