//! Secrets between persons, driven through the real relay as curl would: a secret belongs to a
//! person (or the admins), is used only by its person and those it is shared with, is refused
//! alike whether it exists or not, and is redacted in the forms an agent's output commonly
//! carries it (base64 at each alignment, hex, reversed, upper-cased, spaced, wrapped,
//! `\u`-escaped).
use hangar_e2e::{
    relay::{Relay, StateDir, ADMIN},
    sessions::{all_events, harness_file, profile, start, until_ended},
    STEP,
};
use serde_json::{json, Value};

/// Literal arguments: braces are doubled, since a profile's `{...}` are placeholders.
fn argv(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.replace('{', "{{").replace('}', "}}")).collect()
}

/// Prints `$E2E_TOKEN` as an agent's messages, once per form, each labelled.
const ENCODINGS: &str = r#"cat >/dev/null
v=$E2E_TOKEN
say() { printf '{"type":"assistant","message":{"content":[{"type":"text","text":"%s %s"}]}}\n' "$1" "$2"; }
say plain "$v"
say b64 "$(printf %s "$v" | base64 -w0)"
say b64a1 "$(printf x%s "$v" | base64 -w0)"
say b64a2 "$(printf xx%s "$v" | base64 -w0 | tr -d =)"
say hex "$(printf %s "$v" | od -An -tx1 -v | tr -d ' \n')"
say rev "$(printf %s "$v" | rev)"
say upper "$(printf %s "$v" | tr a-z A-Z)"
say spaced "$(printf %s "$v" | sed 's/./& /g')"
say wrapped "${v:0:9}\\n${v:9}"
say uesc "$(printf %s "$v" | od -An -tx1 -v | tr -s ' \n' '  ' | sed 's/ \([0-9a-f][0-9a-f]\)/\\\\u00\1/g')"
"#;

const LABELS: [&str; 10] = ["plain", "b64", "b64a1", "b64a2", "hex", "rev", "upper", "spaced", "wrapped", "uesc"];

fn relay(state: &StateDir) -> Relay {
    let script = argv(&["bash", "-c", ENCODINGS]);
    let file = harness_file(&state.0, &[profile("encodings", &script, Some(&script), "claude-stream-json", "none")]);
    Relay::start(
        &state.0,
        &[("HANGAR_HARNESSES", file.to_str().expect("path")), ("HANGAR_SESSION_POLL_SECONDS", "0.3")],
    )
}

fn session(name: &str, secrets: &[&str]) -> Value {
    json!({"name": name, "sandbox": "default", "harness": "encodings", "prompt": "p", "secrets": secrets})
}

async fn put(relay: &Relay, token: &str, body: Value) -> Value {
    let r = relay.call("POST", "/api/secrets", Some(token), Some(body.clone())).await;
    assert_eq!(r.status, 201, "{body}: {r:?}");
    r.json()
}

#[tokio::test]
async fn a_secret_is_its_persons_and_those_it_is_shared_with() {
    let state = StateDir::new();
    let relay = relay(&state);
    relay.share_default().await;
    let (ada, bob) = (relay.token("ada", "user").await, relay.token("bob", "user").await);
    let mcp = relay.token("ada-orchestrator", "mcp").await;
    put(&relay, ADMIN, json!({"name": "ADMIN_KEY", "value": "admin-value-0123456789"})).await;
    let mine = put(&relay, &ada.secret, json!({"name": "E2E_TOKEN", "value": "ada-value-0123456789"})).await;
    assert_eq!((mine["person"].clone(), mine["shared_with"].clone()), (json!("ada"), json!([])), "{mine}");

    // Another person's secret, the admins' and one that does not exist: one refusal, word for
    // word but the name, before anything starts.
    let mut refusals = Vec::new();
    for name in ["E2E_TOKEN", "ADMIN_KEY", "NO_SUCH_KEY"] {
        let r = relay.call("POST", "/api/sessions", Some(&bob.secret), Some(session("steal", &[name]))).await;
        assert_eq!(r.status, 403, "{name}: {r:?}");
        refusals.push(String::from_utf8_lossy(&r.body).replace(name, "NAME"));
    }
    assert!(refusals.windows(2).all(|w| w[0] == w[1]), "{refusals:?}");
    let listed = relay.call("GET", "/api/sessions", Some(&bob.secret), None).await;
    assert_eq!(listed.json()["sessions"], json!([]), "nothing started: {listed:?}");

    // A person cannot make another's secret, nor the admins'; an agent's token manages none.
    for body in [
        json!({"name": "X_KEY", "value": "x-value-0123456789", "person": "ada"}),
        json!({"name": "X_KEY", "value": "x-value-0123456789", "person": null}),
    ] {
        let r = relay.call("POST", "/api/secrets", Some(&bob.secret), Some(body.clone())).await;
        assert_eq!(r.status, 403, "{body}: {r:?}");
    }
    assert_eq!(relay.call("GET", "/api/secrets", Some(&mcp.secret), None).await.status, 403);
    let r = relay.call("DELETE", "/api/secrets/E2E_TOKEN", Some(&bob.secret), None).await;
    assert_eq!(r.status, 404, "{r:?}");

    // Shared: bob now sees it and may use it; its owner and the admins see whom it is shared with.
    put(&relay, &ada.secret, json!({"name": "E2E_TOKEN", "value": "ada-value-0123456789", "shared_with": ["bob"]}))
        .await;
    let seen = relay.call("GET", "/api/secrets", Some(&bob.secret), None).await.json();
    assert_eq!(seen["secrets"][0]["name"], json!("E2E_TOKEN"), "{seen}");
    start(&relay, &bob.secret, session("shared", &["E2E_TOKEN"])).await;
    let s = until_ended(&relay, &bob.secret, "shared", STEP).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}");
    let events = serde_json::to_string(&all_events(&relay, &bob.secret, "shared").await).expect("json");
    assert!(events.contains("plain [redacted:E2E_TOKEN]"), "the harness got ada's value: {events}");

    // Unshared: bob's next turn cannot start with it.
    put(&relay, &ada.secret, json!({"name": "E2E_TOKEN", "value": "ada-value-0123456789"})).await;
    let r = relay.call("POST", "/api/sessions/shared/turns", Some(&bob.secret), Some(json!({"prompt": "again"}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    let s = until_ended(&relay, &bob.secret, "shared", STEP).await;
    assert_ne!(s["state"], json!("succeeded"), "a secret no longer shared is not handed over: {s}");
    assert!(s.to_string().contains("E2E_TOKEN"), "the turn says which secret: {s}");
}

#[tokio::test]
async fn redaction_catches_the_common_encodings_of_a_value() {
    let state = StateDir::new();
    let relay = relay(&state);
    let value = "sk-e2e-7f3a9c1d2b4e6f80";
    put(&relay, ADMIN, json!({"name": "E2E_TOKEN", "value": value})).await;
    start(&relay, ADMIN, session("enc", &["E2E_TOKEN"])).await;
    let s = until_ended(&relay, ADMIN, "enc", STEP).await;
    assert_eq!(s["state"], json!("succeeded"), "{s}");
    let events: Vec<String> = all_events(&relay, ADMIN, "enc").await.iter().map(Value::to_string).collect();
    for label in LABELS {
        let said = events
            .iter()
            .find(|e| e.contains(&format!("\"{label} ")))
            .unwrap_or_else(|| panic!("no message {label}: {events:?}"));
        assert!(said.contains("[redacted:E2E_TOKEN]"), "{label} passed redaction: {said}");
    }
    assert!(!events.concat().contains(value));
}

/// A harness that authenticates has its credential checked when a session or a job starts, not
/// after its CLI has started and failed ("Not logged in"); the refusal names what the harness
/// wants and reads the same whether or not a secret of that name exists. `sandbox_login` (the
/// request's or the profile's) says the CLI logs in by itself. A job passes its secrets to its
/// session as a session does.
#[tokio::test]
async fn a_credential_is_checked_at_the_start_and_a_job_passes_its_secrets() {
    let state = StateDir::new();
    let script = argv(&["bash", "-c", ENCODINGS]);
    let keyed = |name: &str, extra: &str| {
        format!(
            "{}credentials = [\"E2E_TOKEN\"]\n{extra}\n",
            profile(name, &script, None, "claude-stream-json", "none")
        )
    };
    let file = harness_file(&state.0, &[keyed("keyed", ""), keyed("logged-in", "sandbox_login = true")]);
    let relay = Relay::start(
        &state.0,
        &[("HANGAR_HARNESSES", file.to_str().expect("path")), ("HANGAR_SESSION_POLL_SECONDS", "0.3")],
    );
    relay.share_default().await;
    let (ada, bob) = (relay.token("ada", "user").await, relay.token("bob", "user").await);
    let body =
        |name: &str, harness: &str| json!({"name": name, "sandbox": "default", "harness": harness, "prompt": "p"});

    let refused = |r: hangar_e2e::connect::RawResponse| {
        assert_eq!(r.status, 400, "{r:?}");
        r.json()["error"]["message"].as_str().expect("message").to_string()
    };
    let before = refused(relay.call("POST", "/api/sessions", Some(&bob.secret), Some(body("a", "keyed"))).await);
    assert!(before.contains("E2E_TOKEN") && before.contains("sandbox_login"), "{before}");
    put(&relay, &ada.secret, json!({"name": "E2E_TOKEN", "value": "ada-value-0123456789"})).await;
    let after = refused(relay.call("POST", "/api/sessions", Some(&bob.secret), Some(body("a", "keyed"))).await);
    assert_eq!(before, after, "the refusal says nothing of ada's secret");
    let job = json!({"sandbox": "default", "harness": "keyed", "prompt": "p"});
    assert_eq!(refused(relay.call("POST", "/api/jobs", Some(&bob.secret), Some(job)).await), before);
    // The built-in claude-code, the default, wants its own.
    let default = json!({"name": "b", "sandbox": "default", "prompt": "p"});
    let message = refused(relay.call("POST", "/api/sessions", Some(&bob.secret), Some(default)).await);
    assert!(message.contains("ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN"), "{message}");
    let listed = relay.call("GET", "/api/sessions", Some(&bob.secret), None).await;
    assert_eq!(listed.json()["sessions"], json!([]), "nothing started: {listed:?}");

    // Logged in inside the sandbox, by the request's word or the profile's.
    let mut own = body("own", "keyed");
    own["sandbox_login"] = json!(true);
    start(&relay, &bob.secret, own).await;
    start(&relay, &bob.secret, body("profile", "logged-in")).await;
    for name in ["own", "profile"] {
        assert_eq!(until_ended(&relay, &bob.secret, name, STEP).await["state"], json!("succeeded"), "{name}");
    }

    // A job's secrets reach its agent, under the same rules as a session's.
    let job = json!({"sandbox": "default", "harness": "keyed", "prompt": "p", "secrets": ["E2E_TOKEN"]});
    let r = relay.call("POST", "/api/jobs", Some(&bob.secret), Some(job.clone())).await;
    assert_eq!(r.status, 403, "ada's secret is not bob's: {r:?}");
    let r = relay.call("POST", "/api/jobs", Some(&ada.secret), Some(job)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let logged_in = json!({"sandbox": "default", "harness": "keyed", "prompt": "p", "sandbox_login": true});
    let bobs = relay.call("POST", "/api/jobs", Some(&bob.secret), Some(logged_in)).await;
    assert_eq!((bobs.status, bobs.json()["sandbox_login"].clone()), (201, json!(true)), "{bobs:?}");
    let id = r.json()["id"].as_str().expect("id").to_string();
    let deadline = std::time::Instant::now() + STEP;
    let ended = loop {
        let v = relay.call("GET", &format!("/api/jobs/{id}"), Some(&ada.secret), None).await.json();
        if ["succeeded", "failed", "cancelled"].contains(&v["state"].as_str().unwrap_or_default()) {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "the job did not end: {v}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(ended["secrets"], json!(["E2E_TOKEN"]), "{ended}");
    let session = ended["session"].as_str().expect("session");
    let events = serde_json::to_string(&all_events(&relay, &ada.secret, session).await).expect("json");
    assert!(events.contains("plain [redacted:E2E_TOKEN]"), "the job's agent got the value: {events}");
}
