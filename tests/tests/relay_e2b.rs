//! The relay's `e2b` provider end to end: the real relay against `hangar_e2e::e2b_api`, a test
//! double of E2B's REST API (every request checked against E2B's published OpenAPI spec) whose
//! sandboxes are real containers of a hangar-envd image behind a double of E2B's edge. Nothing
//! here has run against E2B's own service (docs/e2b.md says what that leaves open).
//!
//! First the cases of `hangar_e2e::cases` that apply to an E2B sandbox. The ones that do not:
//! - `a_sandbox_without_the_daemon_falls_back_to_the_providers_exec`,
//!   `background_processes_without_the_daemon_are_detached_and_polled`,
//!   `an_unattached_process_without_the_daemon_is_still_watched`,
//!   `without_the_daemon_a_turn_is_polled_and_cancel_still_works`: every E2B sandbox has its
//!   envd, and E2B has no exec without it, so there is no sandbox without a daemon.
//! - `options_reach_commands_through_the_daemon_and_without_it`: E2B's API takes no `user` or
//!   `workdir` (the template's apply: `user` in `/home/user`); `env` is tested below.
//!
//! Then the provider's own tests. The tests that make sandboxes need Docker: without it they
//! fail under CI=true and are skipped, with a notice, otherwise (see hangar_e2e::docker). The
//! ones about settings and errors found before any sandbox exists run everywhere.
use hangar_e2e::{
    docker::{self, container_of, inspect, pids_named, Containers, E2B_ENVD_IMAGE},
    e2b_api::{E2bApi, SandboxState, TEMPLATE_USER},
    platform::Platform,
    platform_cases,
    relay::{Relay, StateDir, ADMIN},
    wait_until, STEP,
};
use serde_json::{json, Value};

platform_cases!(e2b;
    a_sandbox_with_the_daemon_streams_through_it,
    pause_resume_and_destroy,
    a_removed_sandbox_is_reported_and_can_be_destroyed,
    with_the_daemon_a_turn_is_followed_and_split_and_forgeries_change_nothing,
    a_destroyed_sandbox_cancels_its_turns_and_a_vanished_one_crashes_them,
    a_job_creates_its_sandbox_runs_and_verifies_there_and_a_failing_verification_fails_the_next,
);

/// The `e2b` provider against the double, or `None` when the test must skip. Its sandboxes run
/// as the template's user, which the provider does not take as an option.
fn e2b(test: &str) -> Option<Platform> {
    if !docker::available(test) {
        return None;
    }
    let double = E2bApi::start(&image());
    let env = double.relay_env().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let platform = Platform::new("e2b", "e2b", json!({}), None, env, Some(Box::new(double)));
    // On an image whose daemon serves only E2B's services, as E2B's envd, turns are polled.
    let platform = if image() == E2B_ENVD_IMAGE { platform.without_follow() } else { platform };
    Some(platform.with_fixed(json!({ "user": TEMPLATE_USER })))
}

/// The image the double's `base` template runs: hangar-envd serving only E2B's services over
/// HTTP/1.1, as E2B's own envd does (`HANGAR_TEST_E2B_IMAGE` names another, such as
/// `hangar-test:envd`, to run the same tests with hangar's extensions behind E2B's edge).
fn image() -> String {
    std::env::var("HANGAR_TEST_E2B_IMAGE").unwrap_or_else(|_| E2B_ENVD_IMAGE.to_string())
}

/// Docker, the double, a fresh state directory and a relay pointed at the double, or `None`
/// when the test must skip. Keep them all alive for the test: dropping them removes the
/// containers, the relay and its daemons.
fn e2b_relay(test: &str) -> Option<(Containers, E2bApi, StateDir, Relay)> {
    if !docker::available(test) {
        return None;
    }
    let e2b = E2bApi::start(&image());
    let state = StateDir::new();
    let env = e2b.relay_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let relay = Relay::start(&state.0, &env);
    Some((Containers::new(), e2b, state, relay))
}

async fn create(relay: &Relay, name: &str, options: Value) -> hangar_e2e::RawResponse {
    let body = json!({"name": name, "provider": "e2b", "options": options});
    relay.call("POST", "/api/sandboxes", Some(ADMIN), Some(body)).await
}

async fn exec(relay: &Relay, sandbox: &str, command: &str) -> hangar_e2e::RawResponse {
    relay.call("POST", &format!("/api/sandboxes/{sandbox}/exec"), Some(ADMIN), Some(json!({"command": command}))).await
}

/// The relay's error code (`{"error": {"code"}}`).
fn code(r: &hangar_e2e::RawResponse) -> Option<String> {
    r.json()["error"]["code"].as_str().map(str::to_string)
}

/// The requests the double got for `method` and a path starting with `path`.
fn got(e2b: &E2bApi, method: &str, path: &str) -> Vec<hangar_e2e::e2b_api::Recorded> {
    e2b.requests().into_iter().filter(|r| r.method == method && r.path.starts_with(path)).collect()
}

#[tokio::test]
async fn a_sandbox_is_made_through_e2b_api_and_its_envd_streams() {
    let Some((mut containers, e2b, _state, relay)) =
        e2b_relay("a_sandbox_is_made_through_e2b_api_and_its_envd_streams")
    else {
        return;
    };
    let name = containers.name("e2b");
    let options = json!({"template": "base", "timeout_seconds": 600, "env": {"GREETING": "hello from e2b"},
        "metadata": {"team": "ana"}});
    let r = create(&relay, &name, options).await;
    assert_eq!(r.status, 201, "{r:?}");
    let sbx = r.json();
    assert_eq!(
        (sbx["provider"].clone(), sbx["state"].clone(), sbx["daemon"].clone(), sbx["isolation"].clone()),
        (json!("e2b"), json!("running"), json!(true), json!("vm"))
    );
    let text = sbx.to_string();
    assert!(!text.contains("envd_token") && !text.contains("envd_url") && !text.contains("provider_ref"), "{text}");
    let id = sbx["id"].as_str().expect("id").to_string();

    // What E2B got: one create, with the API key, as the spec says it.
    let creates = got(&e2b, "POST", "/sandboxes");
    assert_eq!(creates.len(), 1, "{creates:?}");
    let c = &creates[0];
    assert_eq!((c.status, c.api_key.as_deref()), (201, Some(e2b.key.as_str())), "{c:?}");
    assert_eq!(
        c.body,
        Some(json!({
            "templateID": "base",
            "timeout": 600,
            "autoPause": false,
            "secure": true,
            "metadata": {"team": "ana", "hangar.sandbox": id, "hangar.sandbox.name": name},
            "envVars": {"GREETING": "hello from e2b"},
        }))
    );
    let e2b_id = c.answer["sandboxID"].as_str().expect("E2B's id").to_string();
    let made = e2b.sandbox(&e2b_id).expect("the double has the sandbox");
    // The container carries hangar's labels, from the metadata.
    let container = container_of(&id);
    assert_eq!(inspect(&container, "{{ index .Config.Labels \"hangar.sandbox.name\" }}"), name);

    // Commands go through the sandbox's envd, through the edge, with E2B's token; the variables
    // came through E2B's envVars.
    let r = exec(&relay, &name, "echo \"$GREETING\"; echo oops >&2; exit 3").await;
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    assert_eq!(
        (v["exit_code"].clone(), v["stdout"].clone(), v["stderr"].clone()),
        (json!(3), json!("hello from e2b\n"), json!("oops\n"))
    );
    let mut s = relay
        .sse(
            "POST",
            &format!("/api/sandboxes/{name}/exec/stream"),
            Some(ADMIN),
            Some(json!({"command": "for i in 1 2 3; do echo line $i; done; exit 4"})),
        )
        .await;
    assert_eq!(s.status, 200);
    let events = s.collect(STEP).await;
    let (result, out) = events.split_last().expect("a result");
    let stdout: String = out.iter().map(|e| e.json()["data"].as_str().unwrap_or_default().to_string()).collect();
    assert_eq!((stdout.as_str(), result.event.as_str()), ("line 1\nline 2\nline 3\n", "result"));
    assert_eq!((result.json()["exit_code"].clone(), result.json()["streamed"].clone()), (json!(4), json!(true)));

    let edge = e2b.edge_requests();
    assert!(!edge.is_empty(), "the envd was reached through the edge");
    for e in &edge {
        assert_eq!(e.sandbox_id.as_deref(), Some(e2b_id.as_str()), "{e:?}");
        assert!(e.by_headers, "routed by E2b-Sandbox-Id and E2b-Sandbox-Port: {e:?}");
        assert_eq!(e.access_token, made.token, "with E2B's envd access token: {e:?}");
        assert!(!e.http2, "Connect over HTTP/1.1, what E2B's edge forwards: {e:?}");
    }
    assert_eq!(e2b.spec_problems(), Vec::<String>::new());
    // The key never reaches the relay's log.
    assert!(!relay.log().contains(&e2b.key), "the API key is in the relay's log");
}

#[tokio::test]
async fn pause_resume_and_destroy_are_e2b_own() {
    let Some((mut containers, e2b, _state, relay)) = e2b_relay("pause_resume_and_destroy_are_e2b_own") else {
        return;
    };
    let name = containers.name("life");
    let r = create(&relay, &name, json!({})).await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.json()["id"].as_str().expect("id").to_string();
    // The defaults: E2B's base template, an hour.
    let body = got(&e2b, "POST", "/sandboxes")[0].body.clone().expect("a body");
    assert_eq!((body["templateID"].clone(), body["timeout"].clone()), (json!("base"), json!(3600)));
    let e2b_id = e2b.sandbox_of(&id).expect("E2B's sandbox").id;
    let container = container_of(&id);

    // A background process started before the pause is still there after it (E2B keeps memory).
    let marker = format!("hangar-e2b-pause-{}", std::process::id());
    let r = relay
        .call(
            "POST",
            &format!("/api/sandboxes/{name}/processes"),
            Some(ADMIN),
            Some(json!({"command": format!("exec -a {marker} sleep 300")})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let process = r.json()["process_id"].as_str().expect("process id").to_string();
    wait_until(STEP, "the process runs", || !pids_named(&container, &marker).is_empty()).await;

    let r = relay.call("POST", &format!("/api/sandboxes/{name}/pause"), Some(ADMIN), None).await;
    assert_eq!((r.status, r.json()["state"].clone()), (200, json!("paused")), "{r:?}");
    assert_eq!(e2b.sandbox(&e2b_id).map(|s| s.state), Some(SandboxState::Paused));
    assert_eq!(inspect(&container, "{{.State.Status}}"), "paused");
    let pause = got(&e2b, "POST", &format!("/sandboxes/{e2b_id}/pause"));
    assert_eq!(
        (pause.len(), pause[0].status, pause[0].body.clone()),
        (1, 204, Some(json!({"memory": true}))),
        "{pause:?}"
    );
    assert_eq!(exec(&relay, &name, "true").await.status, 503, "a paused sandbox runs nothing");
    // Pausing again is no error.
    assert_eq!(relay.call("POST", &format!("/api/sandboxes/{name}/pause"), Some(ADMIN), None).await.status, 200);

    let r = relay.call("POST", &format!("/api/sandboxes/{name}/resume"), Some(ADMIN), None).await;
    assert_eq!((r.status, r.json()["state"].clone()), (200, json!("running")), "{r:?}");
    let connect = got(&e2b, "POST", &format!("/sandboxes/{e2b_id}/connect"));
    assert_eq!(
        (connect.len(), connect[0].status, connect[0].body.clone()),
        (1, 201, Some(json!({"timeout": 3600}))),
        "{connect:?}"
    );
    assert_eq!(exec(&relay, &name, "echo back").await.json()["stdout"], json!("back\n"));
    let r = relay.call("GET", &format!("/api/sandboxes/{name}/processes/{process}"), Some(ADMIN), None).await;
    assert_eq!((r.status, r.json()["process"]["state"].clone()), (200, json!("running")), "{r:?}");
    assert!(!pids_named(&container, &marker).is_empty(), "the process lived through the pause");

    let r = relay.call("DELETE", &format!("/api/sandboxes/{name}"), Some(ADMIN), None).await;
    assert!(r.status == 200 || r.status == 204, "{r:?}");
    let kill = got(&e2b, "DELETE", &format!("/sandboxes/{e2b_id}"));
    assert_eq!((kill.len(), kill[0].status), (1, 204), "{kill:?}");
    assert!(e2b.sandbox(&e2b_id).is_none());
    assert!(Containers::of_name(&name).is_empty(), "the container is gone");
    assert_eq!(e2b.spec_problems(), Vec::<String>::new());
}

#[tokio::test]
async fn a_sandbox_e2b_no_longer_has_is_gone() {
    let Some((mut containers, e2b, _state, relay)) = e2b_relay("a_sandbox_e2b_no_longer_has_is_gone") else {
        return;
    };
    let name = containers.name("gone");
    let r = create(&relay, &name, json!({})).await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.json()["id"].as_str().expect("id").to_string();
    assert_eq!(exec(&relay, &name, "echo up").await.status, 200);
    // E2B ends it behind hangar's back (its timeout, or another client's kill).
    let e2b_id = e2b.sandbox_of(&id).expect("E2B's sandbox").id;
    e2b.expire(&e2b_id);

    let r = exec(&relay, &name, "echo up").await;
    assert_eq!(r.status, 502, "{r:?}");
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("E2B no longer has its sandbox") && message.contains(&e2b_id), "{message}");
    let lookups = got(&e2b, "GET", &format!("/sandboxes/{e2b_id}"));
    assert!(lookups.iter().any(|l| l.status == 404), "the relay asked E2B: {lookups:?}");

    // Destroying it is no error: there is nothing left to kill.
    let r = relay.call("DELETE", &format!("/api/sandboxes/{name}"), Some(ADMIN), None).await;
    assert!(r.status == 200 || r.status == 204, "{r:?}");
    assert_eq!(relay.call("GET", &format!("/api/sandboxes/{name}"), Some(ADMIN), None).await.status, 404);
    assert_eq!(e2b.spec_problems(), Vec::<String>::new());
}

#[tokio::test]
async fn a_bad_api_key_is_a_clear_error_that_names_no_key() {
    if !docker::available("a_bad_api_key_is_a_clear_error_that_names_no_key") {
        return;
    }
    let e2b = E2bApi::start(&image());
    let state = StateDir::new();
    let wrong = "e2b_0123456789abcdef0123456789abcdef01234567";
    let mut env = e2b.relay_env();
    env.retain(|(k, _)| *k != "HANGAR_E2B_API_KEY");
    env.push(("HANGAR_E2B_API_KEY", wrong.to_string()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let relay = Relay::start(&state.0, &env);
    let mut containers = Containers::new();
    let name = containers.name("badkey");

    let r = create(&relay, &name, json!({})).await;
    assert_eq!((r.status, code(&r)), (502, Some("sandbox_error".to_string())), "{r:?}");
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(
        message.contains("E2B refused the relay's API key (401") && message.contains("HANGAR_E2B_API_KEY"),
        "{message}"
    );
    assert!(!message.contains(wrong) && !message.contains(&wrong[4..]), "{message}");
    let creates = got(&e2b, "POST", "/sandboxes");
    assert_eq!((creates.len(), creates[0].status), (1, 401), "{creates:?}");
    assert_eq!(relay.call("GET", &format!("/api/sandboxes/{name}"), Some(ADMIN), None).await.status, 404);
    assert!(Containers::of_name(&name).is_empty(), "nothing was made");
    let log = relay.log();
    assert!(!log.contains(wrong) && !log.contains(&e2b.key), "a key is in the relay's log:\n{log}");
}

/// A relay whose e2b provider points at `api_url` with `key`, with no double behind it.
fn relay_without_e2b(state: &StateDir, api_url: &str, key: Option<&str>) -> Relay {
    let mut env = vec![("HANGAR_E2B_API_URL", api_url), ("HANGAR_E2B_ENVD_URL", "http://127.0.0.1:9")];
    if let Some(k) = key {
        env.push(("HANGAR_E2B_API_KEY", k));
    }
    Relay::start(&state.0, &env)
}

#[tokio::test]
async fn e2b_unreachable_or_unconfigured_is_a_clear_error() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("address").port();
    let state = StateDir::new();
    let key = "e2b_unreachable0123456789abcdef0123456789";
    let relay = relay_without_e2b(&state, &format!("http://127.0.0.1:{port}"), Some(key));
    let r = create(&relay, "nowhere", json!({})).await;
    assert_eq!((r.status, code(&r)), (502, Some("sandbox_error".to_string())), "{r:?}");
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("E2B's API at") && message.contains("is not reachable"), "{message}");
    assert!(!message.contains(key), "{message}");
    assert_eq!(relay.call("GET", "/api/sandboxes/nowhere", Some(ADMIN), None).await.status, 404);
    assert!(!relay.log().contains(key));

    // Without a key nothing is sent, and the error says which setting is missing.
    let state = StateDir::new();
    let relay = relay_without_e2b(&state, &format!("http://127.0.0.1:{port}"), None);
    let r = create(&relay, "keyless", json!({})).await;
    assert_eq!(r.status, 502, "{r:?}");
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("no E2B API key") && message.contains("HANGAR_E2B_API_KEY"), "{message}");
}

#[tokio::test]
async fn a_setting_the_provider_cannot_use_stops_the_relay_at_start() {
    let state = StateDir::new();
    let out = std::process::Command::new(hangar_e2e::relay::relay_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(&state.0)
        .env("HANGAR_ADMIN_TOKEN", ADMIN)
        .env("HANGAR_E2B_ENVD_URL", "ftp://{sandbox_id}")
        .output()
        .expect("running hangar-relay");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("HANGAR_E2B_ENVD_URL"), "{stderr}");
}

#[tokio::test]
async fn bad_options_are_refused_before_or_by_e2b() {
    let Some((mut containers, e2b, _state, relay)) = e2b_relay("bad_options_are_refused_before_or_by_e2b") else {
        return;
    };
    for (options, says) in [
        (json!({"image": "x"}), "unknown option \"image\""),
        (json!({"template": "a b"}), "template:"),
        (json!({"timeout_seconds": 0}), "timeout_seconds:"),
        (json!({"timeout_seconds": 86401}), "timeout_seconds:"),
        (json!({"env": {"1A": "x"}}), "env:"),
        (json!({"env": {"A": 1}}), "env:"),
        (json!({"metadata": {"hangar.sandbox": "x"}}), "metadata:"),
        (json!({"metadata": {"k": true}}), "metadata:"),
    ] {
        let name = containers.name("bad");
        let r = create(&relay, &name, options.clone()).await;
        assert_eq!((r.status, code(&r)), (400, Some("invalid_argument".to_string())), "{options}: {r:?}");
        let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
        assert!(message.contains(says), "{options}: {message}");
    }
    assert!(got(&e2b, "POST", "/sandboxes").is_empty(), "nothing reached E2B");

    // A template E2B does not have is E2B's to say, and the request's to fix.
    let name = containers.name("notemplate");
    let r = create(&relay, &name, json!({"template": "nope"})).await;
    assert_eq!((r.status, code(&r)), (400, Some("invalid_argument".to_string())), "{r:?}");
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("template 'nope' not found"), "{message}");
    assert_eq!(got(&e2b, "POST", "/sandboxes")[0].status, 404);
    assert_eq!(e2b.spec_problems(), Vec::<String>::new());
}
