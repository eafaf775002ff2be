//! What a relay finds when it starts again: streamed commands orphaned by a crash are killed,
//! what a graceful shutdown spared runs on, unstreamed commands run to their end and still count
//! against their token, background processes are adopted, and what a token revoked while the
//! relay was down started is killed. Counted with the real processes in /proc.
use std::time::Duration;

use hangar_e2e::{
    pids_with,
    relay::{Relay, StateDir, Token},
    wait_until,
};
use serde_json::{json, Value};

/// A marker no other test's process carries.
fn marker(what: &str) -> String {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("hangar-recovery-{what}-{}-{n}", std::process::id())
}

/// `sleep 300` whose command line carries `m`.
fn sleeper(m: &str) -> Value {
    json!({ "command": format!("exec -a {m} sleep 300") })
}

fn running(m: &str) -> bool {
    !pids_with(m).is_empty()
}

fn kill_all(m: &str) {
    for pid in pids_with(m) {
        // SAFETY: kill(2) on a test's own sleeper, found by its unique marker.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
}

const START: Duration = Duration::from_secs(10);

/// An unstreamed exec whose client goes away once the command runs.
async fn abandoned_exec(relay: &Relay, token: &Token, m: &str) {
    let call = relay.call("POST", "/api/sandboxes/default/exec", Some(&token.secret), Some(sleeper(m)));
    // The call never answers while the command runs: give up on it once the command is there.
    let _ = tokio::time::timeout(Duration::from_millis(500), call).await;
    wait_until(START, &format!("{m} runs"), || running(m)).await;
}

/// A streamed exec, its stream kept open by the caller.
async fn streamed_exec(relay: &Relay, token: &Token, m: &str) -> hangar_e2e::relay::Sse {
    let s = relay.sse("POST", "/api/sandboxes/default/exec/stream", Some(&token.secret), Some(sleeper(m))).await;
    wait_until(START, &format!("{m} runs"), || running(m)).await;
    s
}

async fn background(relay: &Relay, token: &Token, m: &str) -> String {
    let r = relay.call("POST", "/api/sandboxes/default/processes", Some(&token.secret), Some(sleeper(m))).await;
    assert_eq!(r.status, 201, "{r:?}");
    wait_until(START, &format!("{m} runs"), || running(m)).await;
    r.json()["process_id"].as_str().unwrap_or_default().to_string()
}

/// Revokes a token in the store itself, as another relay on the same state would, while this one is down.
fn revoke_in_store(state: &StateDir, token: &Token) {
    let script = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); \
                  c.execute('UPDATE tokens SET revoked_at = 1 WHERE id = ?', (sys.argv[2],)); c.commit()";
    let db = state.0.join("relay.sqlite");
    let out = std::process::Command::new("python3").args(["-c", script]).arg(&db).arg(&token.id).output();
    assert!(out.as_ref().is_ok_and(|o| o.status.success()), "revoking in the store: {out:?}");
}

#[tokio::test]
async fn after_a_crash_orphans_die_unstreamed_commands_run_on_and_revocations_apply() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    relay.share_default().await;
    let (kept, gone) = (relay.token("kept", "user").await, relay.token("gone", "user").await);
    let m = |w: &str| marker(w);
    let (orphan, unstreamed, bg, gone_bg, gone_exec) =
        (m("orphan"), m("unstreamed"), m("bg"), m("gone-bg"), m("gone-exec"));
    let _stream = streamed_exec(&relay, &kept, &orphan).await;
    abandoned_exec(&relay, &kept, &unstreamed).await;
    let bg_id = background(&relay, &kept, &bg).await;
    background(&relay, &gone, &gone_bg).await;
    abandoned_exec(&relay, &gone, &gone_exec).await;

    // kill -9: nothing is told, nothing is spared.
    drop(relay);
    revoke_in_store(&state, &gone);
    assert!(running(&orphan), "the crash itself kills nothing");
    let relay = Relay::start(&state.0, &[("HANGAR_EXEC_UNSTREAMED_MAX_PER_TOKEN", "1")]);

    wait_until(START, "the orphaned streamed command is killed", || !running(&orphan)).await;
    wait_until(START, "the revoked token's command and process are killed", || {
        !running(&gone_bg) && !running(&gone_exec)
    })
    .await;
    assert!(running(&unstreamed), "an unstreamed command runs to its end");
    assert!(running(&bg), "a background process runs on");
    let list = relay.call("GET", "/api/sandboxes/default/processes", Some(&kept.secret), None).await.json();
    let p = list["processes"].as_array().and_then(|ps| ps.iter().find(|p| p["process_id"] == json!(bg_id)).cloned());
    assert_eq!(p.map(|p| p["adopted"].clone()), Some(json!(true)), "adopted after the restart: {list}");
    // The unstreamed command found running still counts against its token's limit (1).
    let r =
        relay.call("POST", "/api/sandboxes/default/exec", Some(&kept.secret), Some(json!({"command": "true"}))).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert!(r.json()["error"]["message"].as_str().unwrap_or_default().contains("HANGAR_EXEC_UNSTREAMED_MAX_PER_TOKEN"));
    assert!(relay.log().contains("\"recovered\"") || relay.log().contains("recovered"), "{}", relay.log());
    for x in [&unstreamed, &bg] {
        kill_all(x);
    }
}

#[tokio::test]
async fn a_graceful_shutdown_spares_streamed_commands_across_a_restart() {
    let state = StateDir::new();
    let mut relay = Relay::start(&state.0, &[]);
    relay.share_default().await;
    let token = relay.token("t", "user").await;
    let spared = marker("spared");
    let mut stream = streamed_exec(&relay, &token, &spared).await;
    relay.stop();
    let closed = stream.collect(Duration::from_secs(5)).await;
    assert!(closed.iter().any(|e| e.event == "result" && e.json()["closed"] == json!("shutdown")), "{closed:?}");
    let relay = Relay::start(&state.0, &[]);
    // Recovery has run once the relay says so.
    wait_until(START, "recovery ran", || relay.log().contains("recovered")).await;
    assert!(running(&spared), "a command the shutdown spared runs on after the restart");
    kill_all(&spared);
}

#[tokio::test]
async fn unstreamed_execs_count_until_they_end_whatever_their_clients_do() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[("HANGAR_EXEC_UNSTREAMED_MAX_PER_TOKEN", "2")]);
    relay.share_default().await;
    let (busy, other) = (relay.token("busy", "user").await, relay.token("other", "user").await);
    let (a, b) = (marker("a"), marker("b"));
    abandoned_exec(&relay, &busy, &a).await;
    abandoned_exec(&relay, &busy, &b).await;
    let quick = json!({"command": "echo hi"});
    let r = relay.call("POST", "/api/sandboxes/default/exec", Some(&busy.secret), Some(quick.clone())).await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (429, json!("resource_exhausted")), "{r:?}");
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.starts_with("HANGAR_EXEC_UNSTREAMED_MAX_PER_TOKEN"), "{message}");
    // Another token is not held back, and a streamed exec is not an unstreamed one.
    let r = relay.call("POST", "/api/sandboxes/default/exec", Some(&other.secret), Some(quick.clone())).await;
    assert_eq!((r.status, r.json()["stdout"].clone()), (200, json!("hi\n")), "{r:?}");
    let mut s = relay.sse("POST", "/api/sandboxes/default/exec/stream", Some(&busy.secret), Some(quick.clone())).await;
    let events = s.collect(Duration::from_secs(10)).await;
    assert!(events.iter().any(|e| e.event == "result" && e.json()["exit_code"] == json!(0)), "{events:?}");
    // Once they end, the token may run commands again.
    kill_all(&a);
    kill_all(&b);
    let mut last = None;
    for _ in 0..100 {
        let r = relay.call("POST", "/api/sandboxes/default/exec", Some(&busy.secret), Some(quick.clone())).await;
        if r.status == 200 {
            last = None;
            break;
        }
        last = Some(r);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(last.is_none(), "the token runs commands again once its commands ended: {last:?}");
}
