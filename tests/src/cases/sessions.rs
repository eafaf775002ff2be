//! Agent sessions on a platform, with and without the daemon: the uid split (the harness as the
//! sandbox's user with no_new_privs, hangar's files out of its reach, so a forged exit file or
//! log changes nothing hangar records), following against polling, and a sandbox destroyed or
//! removed under a running turn.
use std::time::Duration;

use serde_json::{json, Value};

use crate::{
    docker::{container_of, docker_ok, Containers},
    platform::{Daemon, Platform},
    relay::{Relay, StateDir, ADMIN},
    sessions::{
        agent_events, all_events, assert_contiguous, fixture, get, golden, harness_file, profile, replay_argv, start,
        states, until_ended,
    },
};

const LONG: &str = "claude-long-turn.jsonl";
/// Where the tests copy the fixture in a container.
const IN_SANDBOX: &str = "/tmp/fixture.jsonl";
const LIMIT: Duration = Duration::from_secs(30);

fn argv(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.replace('{', "{{").replace('}', "}}")).collect()
}

/// The agent, as the harness runs it: it tries to forge what hangar reads (its own links to the
/// log and the exit file, replaced by files saying success; hangar's own files, which it may not
/// write), says who it is, and fails.
const FORGER: &str = r#"cat >/dev/null
d=$HOME/.hangar/runs
link=$(ls -l "$d/$HANGAR_TURN.log"); real=${link##*-> }; real=${real%/*}
echo "target=${real%/*}"
rm -f "$d/$HANGAR_TURN.exit.json" "$d/$HANGAR_TURN.log"
echo '{"code":0,"signal":null,"ended_at":1}' > "$d/$HANGAR_TURN.exit.json"
echo '{"type":"result","subtype":"success","is_error":false,"result":"forged"}' > "$d/$HANGAR_TURN.log"
for f in log exit.json exit.json.tmp pid; do (echo forged >> "$real/$HANGAR_TURN.$f") 2>/dev/null && echo "WROTE $f"; done
(echo x > "$real/supervisor.sh") 2>/dev/null && echo "WROTE supervisor.sh"
echo "uid=$(id -u) $(grep NoNewPrivs /proc/self/status | tr -d '\t')"
exit 3"#;

fn relay_with(p: &Platform, state: &StateDir) -> Relay {
    let init = r#"{"type":"system","subtype":"init","session_id":"s","model":"m","cwd":"/"}"#;
    let profiles = vec![
        profile("replay", &replay_argv(IN_SANDBOX, 0.1), None, "claude-stream-json", "none"),
        profile("forger", &argv(&["bash", "-c", FORGER]), None, "claude-stream-json", "none"),
        profile(
            "sleeper",
            &argv(&["bash", "-c", &format!("cat >/dev/null; echo '{init}'; exec sleep 60")]),
            None,
            "claude-stream-json",
            "none",
        ),
    ];
    let file = harness_file(&state.0, &profiles);
    p.relay(state, &[("HANGAR_HARNESSES", file.to_str().expect("path")), ("HANGAR_SESSION_POLL_SECONDS", "0.3")])
}

/// A sandbox of kind `daemon` (as `user` where given) with the long fixture copied in; its name.
async fn sandbox(
    p: &Platform,
    relay: &Relay,
    containers: &mut Containers,
    daemon: Daemon,
    user: Option<&str>,
) -> String {
    let extra = user.map_or(json!({}), |u| json!({ "user": u }));
    let v = p.sandbox(relay, containers, "sessions", daemon, extra).await;
    let (name, id) = (v["name"].as_str().expect("name").to_string(), v["id"].as_str().expect("id"));
    let c = container_of(id);
    docker_ok(&["cp", fixture(LONG).to_str().expect("path"), &format!("{c}:{IN_SANDBOX}")]);
    docker_ok(&["exec", &c, "chmod", "644", IN_SANDBOX]);
    name
}

fn body(name: &str, sandbox: &str, harness: &str) -> Value {
    json!({"name": name, "sandbox": sandbox, "harness": harness, "prompt": "go", "cwd": "/tmp"})
}

pub async fn with_the_daemon_a_turn_is_followed_and_split_and_forgeries_change_nothing(p: &Platform) {
    let (mut containers, state) = (Containers::new(), StateDir::new());
    let relay = relay_with(p, &state);
    let sbx = sandbox(p, &relay, &mut containers, Daemon::With, Some("user")).await;

    start(&relay, ADMIN, body("replay", &sbx, "replay")).await;
    let s = until_ended(&relay, ADMIN, "replay", LIMIT).await;
    assert_eq!((s["state"].clone(), s["split"].clone()), (json!("succeeded"), json!(true)), "{s}");
    let polled = !p.daemon_follows_files();
    assert_eq!(s["turns"][0]["polled"], json!(polled), "followed through the daemon where it can: {s}");
    let events = all_events(&relay, ADMIN, "replay").await;
    assert_contiguous(&events);
    assert_eq!(agent_events(&events), golden(LONG));

    start(&relay, ADMIN, body("forger", &sbx, "forger")).await;
    let s = until_ended(&relay, ADMIN, "forger", LIMIT).await;
    let t = &s["turns"][0];
    assert_eq!(
        (s["state"].clone(), s["reason"].clone(), t["exit_code"].clone()),
        (json!("failed"), json!("nonzero_exit"), json!(3)),
        "the agent's forged exit file and log change nothing hangar records: {s}"
    );
    let events = all_events(&relay, ADMIN, "forger").await;
    let raw: Vec<String> =
        agent_events(&events).iter().filter_map(|(_, d)| d["raw"].as_str().map(str::to_string)).collect();
    assert_eq!(
        raw,
        ["target=/var/lib/hangar/runs", "uid=1000 NoNewPrivs:1"],
        "the harness ran as the sandbox's user with no_new_privs, wrote nothing of hangar's: {events:?}"
    );
    assert!(!serde_json::to_string(&events).unwrap_or_default().contains("forged"), "{events:?}");
}

pub async fn without_the_daemon_a_turn_is_polled_and_cancel_still_works(p: &Platform) {
    let (mut containers, state) = (Containers::new(), StateDir::new());
    let relay = relay_with(p, &state);
    let sbx = sandbox(p, &relay, &mut containers, Daemon::Without, None).await;

    start(&relay, ADMIN, body("polled", &sbx, "replay")).await;
    let s = until_ended(&relay, ADMIN, "polled", LIMIT).await;
    assert_eq!((s["state"].clone(), s["split"].clone()), (json!("succeeded"), json!(false)), "{s}");
    assert_eq!(s["turns"][0]["polled"], json!(true), "{s}");
    let events = all_events(&relay, ADMIN, "polled").await;
    assert_contiguous(&events);
    assert_eq!(agent_events(&events), golden(LONG), "polling loses and repeats nothing");

    start(&relay, ADMIN, body("cancel", &sbx, "sleeper")).await;
    let deadline = std::time::Instant::now() + LIMIT;
    while get(&relay, ADMIN, "cancel").await["state"] != json!("running") {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    relay.call("POST", "/api/sessions/cancel/cancel", Some(ADMIN), None).await;
    let s = until_ended(&relay, ADMIN, "cancel", LIMIT).await;
    assert_eq!((s["state"].clone(), s["reason"].clone()), (json!("cancelled"), json!("cancel_agent")), "{s}");
}

pub async fn a_destroyed_sandbox_cancels_its_turns_and_a_vanished_one_crashes_them(p: &Platform) {
    let (mut containers, state) = (Containers::new(), StateDir::new());
    let relay = relay_with(p, &state);
    for how in ["destroy", "vanish"] {
        let sbx = sandbox(p, &relay, &mut containers, Daemon::With, Some("user")).await;
        start(&relay, ADMIN, body(how, &sbx, "sleeper")).await;
        let deadline = std::time::Instant::now() + LIMIT;
        while get(&relay, ADMIN, how).await["state"] != json!("running") {
            assert!(std::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let want = if how == "destroy" {
            let r = relay.call("DELETE", &format!("/api/sandboxes/{sbx}"), Some(ADMIN), None).await;
            assert_eq!(r.status, 204, "{r:?}");
            ("cancelled", "sandbox_destroyed")
        } else {
            let sandbox = relay.call("GET", &format!("/api/sandboxes/{sbx}"), Some(ADMIN), None).await.json();
            docker_ok(&["rm", "-f", &container_of(sandbox["id"].as_str().expect("id"))]);
            ("crashed", "sandbox_gone")
        };
        let s = until_ended(&relay, ADMIN, how, LIMIT).await;
        assert_eq!((s["state"].clone(), s["reason"].clone()), (json!(want.0), json!(want.1)), "{s}");
        let events = all_events(&relay, ADMIN, how).await;
        assert_eq!(states(&events).last().cloned(), Some(format!("running>{}:{}", want.0, want.1)));
    }
}
