//! Jobs on a platform, end to end: a job creates its sandbox from a spec (with the daemon, as
//! the image's non-root user, so the uid split holds), runs its session there, verifies, and
//! records what it measured; a failing verification fails the next job in the same sandbox, and
//! its person hears of it in the inbox.
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{
    docker::Containers,
    platform::{Daemon, Platform},
    relay::{Relay, StateDir, ADMIN},
    sessions::{harness_file, profile},
};

const LIMIT: Duration = Duration::from_secs(60);

async fn until_ended(relay: &Relay, id: &str) -> Value {
    let deadline = Instant::now() + LIMIT;
    loop {
        let r = relay.call("GET", &format!("/api/jobs/{id}"), Some(ADMIN), None).await;
        assert_eq!(r.status, 200, "{r:?}");
        let j = r.json();
        if ["succeeded", "failed", "cancelled"].iter().any(|s| j["state"] == json!(s)) {
            return j;
        }
        assert!(Instant::now() < deadline, "job {id} still {} after {LIMIT:?}: {j}", j["state"]);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn a_job_creates_its_sandbox_runs_and_verifies_there_and_a_failing_verification_fails_the_next(p: &Platform) {
    let (mut containers, state) = (Containers::new(), StateDir::new());
    let result = r#"{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"done"}"#;
    let worker =
        format!("cat >/dev/null; echo built > made-by-agent; echo '{result}'").replace('{', "{{").replace('}', "}}");
    let file = harness_file(
        &state.0,
        &[profile("worker", &["bash".into(), "-c".into(), worker], None, "claude-stream-json", "none")],
    );
    let relay =
        p.relay(&state, &[("HANGAR_HARNESSES", file.to_str().expect("path")), ("HANGAR_SESSION_POLL_SECONDS", "0.3")]);

    let spec = json!({"provider": p.provider, "options": p.options(Daemon::With, json!({"user": "user"}))});
    let body = json!({"sandbox_spec": spec, "harness": "worker", "prompt": "build it", "cwd": "/tmp",
                      "verify": "test -s made-by-agent && id -u && echo verified"});
    let r = relay.call("POST", "/api/jobs", Some(ADMIN), Some(body)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.json()["id"].as_str().expect("id").to_string();
    let sandbox = format!("job-{}", id.trim_start_matches("job_"));
    containers.adopt(&sandbox);

    let job = until_ended(&relay, &id).await;
    assert_eq!((job["state"].clone(), job["created_sandbox"].clone()), (json!("succeeded"), json!(true)), "{job}");
    let r = &job["result"];
    assert_eq!((r["measured_by"].clone(), r["git_repository"].clone()), (json!("hangar"), json!(false)), "{r}");
    assert_eq!(r["verification"]["exit_code"], json!(0), "{r}");
    let tail = r["verification"]["output_tail"].as_str().expect("output_tail");
    assert!(tail.contains("1000") && tail.contains("verified"), "verified as the sandbox's user: {tail}");
    let session = job["session"].as_str().expect("session");
    let s = relay.call("GET", &format!("/api/sessions/{session}"), Some(ADMIN), None).await.json();
    assert_eq!(s["split"], json!(true), "{s}");
    let sbx = relay.call("GET", &format!("/api/sandboxes/{sandbox}"), Some(ADMIN), None).await;
    assert_eq!((sbx.status, sbx.json()["provider"].clone()), (200, json!(p.provider)), "{sbx:?}");

    // The same sandbox, a verification that fails.
    let body = json!({"sandbox": sandbox, "harness": "worker", "prompt": "again", "cwd": "/tmp",
                      "verify": "test -e nothing-here"});
    let r = relay.call("POST", "/api/jobs", Some(ADMIN), Some(body)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let failing = r.json()["id"].as_str().expect("id").to_string();
    let job = until_ended(&relay, &failing).await;
    assert_eq!((job["state"].clone(), job["reason"].clone()), (json!("failed"), json!("verify_failed")), "{job}");
    assert_eq!(job["result"]["verification"]["exit_code"], json!(1), "{job}");
    let inbox = relay.call("GET", "/api/inbox", Some(ADMIN), None).await.json();
    let item = inbox["items"].as_array().expect("items").iter().find(|i| i["job"] == json!(failing)).cloned();
    assert_eq!(item.map(|i| i["kind"].clone()), Some(json!("failed")), "{inbox}");
}
