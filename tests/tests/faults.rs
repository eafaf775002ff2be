//! Faults injected from outside, as they happen to a deployment: the relay killed mid-stream, a
//! sandbox's daemon killed, a container killed behind hangar's back, the state directory's disk
//! full. Each test says what must hold: nothing recorded is lost, nothing is repeated, nothing is
//! left running unseen, and every failure is a clear answer rather than a hang.
use std::{path::Path, process::Command, time::Duration};

use hangar_e2e::{
    docker::{self, container_of, docker_ok, Containers, ENVD_IMAGE},
    is_root, pids_with,
    relay::{Relay, StateDir, ADMIN},
    skip_without, wait_until,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(15);

fn marker(what: &str) -> String {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("hangar-fault-{what}-{}-{n}", std::process::id())
}

async fn start(relay: &Relay, sandbox: &str, command: &str) -> String {
    let r = relay
        .call("POST", &format!("/api/sandboxes/{sandbox}/processes"), Some(ADMIN), Some(json!({ "command": command })))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    r.json()["process_id"].as_str().unwrap_or_default().to_string()
}

/// Reads a process stream from `since` to its end or until `enough` bytes of output came: the
/// output, and the offset to resume from.
async fn read(relay: &Relay, path: &str, since: u64, enough: Option<usize>) -> (String, u64, bool) {
    let mut s = relay.sse("GET", &format!("{path}?since={since}"), Some(ADMIN), None).await;
    let (mut out, mut next, mut ended) = (String::new(), since, false);
    while let Some(e) = s.next(WAIT).await {
        match e.event.as_str() {
            "output" => {
                out.push_str(e.json()["data"].as_str().unwrap_or_default());
                next = e.id.as_deref().and_then(|i| i.parse().ok()).unwrap_or(next);
                if enough.is_some_and(|n| out.len() >= n) {
                    break;
                }
            }
            "end" => {
                ended = true;
                break;
            }
            other => panic!("unexpected {other} event: {e:?}"),
        }
    }
    (out, next, ended)
}

#[tokio::test]
async fn a_relay_killed_mid_stream_resumes_exactly_where_its_client_was() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let id = start(&relay, "default", "for i in $(seq 1 300); do echo line-$i; sleep 0.01; done").await;
    let path = format!("/api/sandboxes/default/processes/{id}/stream");
    let (first, next, _) = read(&relay, &path, 0, Some(200)).await;
    drop(relay); // kill -9
    let relay = Relay::start(&state.0, &[]);
    let (rest, _, ended) = read(&relay, &path, next, None).await;
    assert!(ended, "the stream reached the process's end");
    let lines: Vec<String> = format!("{first}{rest}").lines().map(str::to_string).collect();
    let want: Vec<String> = (1..=300).map(|i| format!("line-{i}")).collect();
    assert_eq!(lines, want, "every line once, in order, across the crash");
}

#[tokio::test]
async fn a_killed_daemon_leaves_nothing_running_unseen_and_the_next_request_works() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let m = marker("daemon");
    start(&relay, "default", &format!("exec -a {m} sleep 300")).await;
    wait_until(WAIT, "the process runs", || !pids_with(&m).is_empty()).await;
    let daemons = state.daemons();
    assert_eq!(daemons.len(), 1, "one daemon: {daemons:?}");
    // SAFETY: kill(2) on the daemon this test's relay started, found by its state directory.
    unsafe { libc::kill(daemons[0] as i32, libc::SIGKILL) };
    // The next request gets a daemon again, and what the dead one ran does not live on unseen.
    let r = relay.call("POST", "/api/sandboxes/default/exec", Some(ADMIN), Some(json!({"command": "echo back"}))).await;
    assert_eq!((r.status, r.json()["stdout"].clone()), (200, json!("back\n")), "{r:?}");
    wait_until(WAIT, "the dead daemon's process is gone", || pids_with(&m).is_empty()).await;
    let list = relay.call("GET", "/api/sandboxes/default/processes", Some(ADMIN), None).await;
    assert_eq!(list.status, 200, "{list:?}");
    let listed = list.json();
    let running: Vec<&Value> = listed["processes"]
        .as_array()
        .map(|a| a.iter().filter(|p| p["state"] == json!("running")).collect())
        .unwrap_or_default();
    assert!(running.is_empty(), "nothing is listed as running that is not: {list:?}");
}

#[tokio::test]
async fn a_container_killed_behind_hangar_s_back_ends_its_streams_and_comes_back() {
    if !docker::available("a_container_killed_behind_hangar_s_back_ends_its_streams_and_comes_back") {
        return;
    }
    let mut containers = Containers::new();
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let name = containers.name("killed");
    let body = json!({"name": name, "provider": "docker", "options": {"image": ENVD_IMAGE}});
    let r = relay.call("POST", "/api/sandboxes", Some(ADMIN), Some(body)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = start(&relay, &name, "while true; do echo tick; sleep 0.2; done").await;
    let mut s = relay.sse("GET", &format!("/api/sandboxes/{name}/processes/{id}/stream"), Some(ADMIN), None).await;
    let first = s.next(WAIT).await.expect("output before the kill");
    assert_eq!(first.event, "output", "{first:?}");
    docker_ok(&["kill", &container_of(r.json()["id"].as_str().unwrap_or_default())]);
    // The stream ends, saying why, rather than hanging.
    let mut last = None;
    while let Some(e) = s.next(WAIT).await {
        last = Some(e);
    }
    let last = last.expect("an event after the kill");
    assert_eq!(last.event, "close", "{last:?}");
    assert_eq!(last.json()["reason"], json!("error"), "{last:?}");
    // The sandbox comes back on the next request; the killed process is not listed as running.
    let r = relay
        .call("POST", &format!("/api/sandboxes/{name}/exec"), Some(ADMIN), Some(json!({"command": "echo up"})))
        .await;
    assert_eq!((r.status, r.json()["stdout"].clone()), (200, json!("up\n")), "{r:?}");
    let list = relay.call("GET", &format!("/api/sandboxes/{name}/processes"), Some(ADMIN), None).await.json();
    assert!(list["processes"].as_array().is_some_and(|a| a.iter().all(|p| p["state"] != json!("running"))), "{list}");
}

/// A small tmpfs mounted on a directory for one test, unmounted when dropped.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(dir: &Path, size: &str) -> SmallDisk {
        std::fs::create_dir_all(dir).expect("the state directory");
        let out =
            Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "hangar-test"]).arg(dir).output();
        assert!(out.as_ref().is_ok_and(|o| o.status.success()), "mounting a tmpfs: {out:?}");
        SmallDisk(dir.to_path_buf())
    }

    /// Writes a file until the disk is full.
    fn fill(&self) {
        let _ = Command::new("dd")
            .args(["if=/dev/zero", "bs=64k"])
            .arg(format!("of={}", self.0.join("filler").display()))
            .output();
    }

    fn free(&self) {
        let _ = std::fs::remove_file(self.0.join("filler"));
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

#[tokio::test]
async fn a_full_disk_is_an_error_and_loses_nothing_recorded() {
    if skip_without(is_root(), "root, to mount a small tmpfs for the state directory") {
        return;
    }
    let state = StateDir::new();
    // Room for two local sandboxes' reserved 64 MiB filesystems (default and "kept") and a
    // little more: what fills up is the relay's own state.
    let disk = SmallDisk::mount(&state.0, "136m");
    let relay = Relay::start(&state.0, &[("HANGAR_LOCAL_DISK_MIB", "64")]);
    let before = relay.token("before", "user").await;
    let r = relay.call("POST", "/api/sandboxes", Some(ADMIN), Some(json!({"name": "kept"}))).await;
    assert_eq!(r.status, 201, "{r:?}");

    disk.fill();
    // Writes fail with a clear error; the relay stays up and reads still work.
    let r = relay.call("POST", "/api/tokens", Some(ADMIN), Some(json!({"name": "during", "scope": "user"}))).await;
    assert!(r.status >= 500, "a write on a full disk fails: {r:?}");
    assert!(r.json()["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{r:?}");
    let r = relay.call("POST", "/api/sandboxes", Some(ADMIN), Some(json!({"name": "during"}))).await;
    assert!(r.status >= 500, "a sandbox cannot be made on a full disk: {r:?}");
    assert_eq!(relay.call("GET", "/api/tokens", Some(ADMIN), None).await.status, 200);
    let r = relay.call("GET", "/api/sandboxes", Some(&before.secret), None).await;
    assert_eq!(r.status, 200, "the token made before still works: {r:?}");

    disk.free();
    let r = relay.call("POST", "/api/tokens", Some(ADMIN), Some(json!({"name": "after", "scope": "user"}))).await;
    assert_eq!(r.status, 201, "writes work again once there is room: {r:?}");
    drop(relay);
    let relay = Relay::start(&state.0, &[]);
    let tokens = relay.call("GET", "/api/tokens", Some(ADMIN), None).await.json();
    let names: Vec<&str> =
        tokens["tokens"].as_array().map(|a| a.iter().filter_map(|t| t["name"].as_str()).collect()).unwrap_or_default();
    assert!(names.contains(&"before") && names.contains(&"after") && !names.contains(&"during"), "{names:?}");
    let sandboxes = relay.call("GET", "/api/sandboxes", Some(ADMIN), None).await.json();
    let names: Vec<&str> = sandboxes["sandboxes"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(names.contains(&"kept") && !names.contains(&"during"), "{names:?}");
    let r = relay.call("GET", "/api/sandboxes", Some(&before.secret), None).await;
    assert_eq!(r.status, 200, "{r:?}");
    drop(relay);
    drop(disk);
}
