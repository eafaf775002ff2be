//! Local sandboxes against the sandbox itself: what a command run with a `user` token can reach
//! of the relay (its secrets, its state directory, its processes, other sandboxes), how a
//! sandbox says how it is isolated, who may use one that isolates nothing, and that destroying
//! one ends everything in it.
//!
//! The relay runs as root wherever it can, so its sandboxes are isolated (namespaces and a user
//! of their own); `HANGAR_TEST_DISABLE_ISOLATION` starts them as a relay that cannot would.
use std::time::Duration;

use hangar_e2e::{
    build_request, full_body, is_root, pids_with, relay::*, send_http1, skip_without, wait_until, within, STEP,
};
use serde_json::{json, Value};

const CANARY: &str = "canary-4d1f9e2b";

/// Runs `command` in `sandbox` with `token` (unstreamed) and returns the result.
async fn exec(relay: &Relay, token: &str, sandbox: &str, command: &str) -> Value {
    let r = relay
        .call("POST", &format!("/api/sandboxes/{sandbox}/exec"), Some(token), Some(json!({"command": command})))
        .await;
    assert_eq!(r.status, 200, "exec {command:?}: {r:?}");
    r.json()
}

async fn make_sandbox(relay: &Relay, token: &str, name: &str) -> Value {
    let r = relay.call("POST", "/api/sandboxes", Some(token), Some(json!({"name": name}))).await;
    assert_eq!(r.status, 201, "creating {name}: {r:?}");
    r.json()
}

fn environ(pid: u32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).expect("the daemon's environ");
    raw.split(|b| *b == 0).filter(|v| !v.is_empty()).map(|v| String::from_utf8_lossy(v).into_owned()).collect()
}

/// The daemon is started with an allow-listed environment: nothing of the relay's (its admin
/// token, any other variable) reaches it or what it runs, with or without isolation. (Before,
/// the relay passed its whole environment: `HANGAR_ADMIN_TOKEN` was in the daemon's.)
#[tokio::test]
async fn the_daemon_gets_only_an_allow_listed_environment() {
    for disabled in ["false", "true"] {
        if disabled == "false" && !is_root() {
            continue;
        }
        let state = StateDir::new();
        let relay = Relay::start(
            &state.0,
            &[
                ("HANGAR_TEST_DISABLE_ISOLATION", disabled),
                ("HANGAR_ALLOW_UNISOLATED_SANDBOXES", "true"),
                ("HANGAR_ISOLATION_CANARY", CANARY),
            ],
        );
        let id = relay.call("GET", "/api/sandboxes/default", Some(ADMIN), None).await.json()["id"]
            .as_str()
            .expect("an id")
            .to_string();
        let env = environ(state.daemon_of(&id));
        let allowed = ["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HANGAR_LOG"];
        for var in &env {
            let name = var.split('=').next().unwrap_or_default();
            assert!(allowed.contains(&name), "disabled={disabled}: the daemon got {name}: {env:?}");
        }
        let v = exec(&relay, ADMIN, "default", "env").await;
        let out = v["stdout"].as_str().expect("stdout");
        assert!(!out.contains(ADMIN) && !out.contains(CANARY), "disabled={disabled}: a command's env: {out}");
    }
}

/// A command run with a user token cannot read the admin token (nor any variable of the relay's)
/// from any `/proc/*/environ` it can see: the relay is not in its PID namespace, and its daemon
/// is root's. (Before, `/proc/$PPID/environ` was the daemon's, with `HANGAR_ADMIN_TOKEN` in it.)
#[tokio::test]
async fn a_command_cannot_read_the_relays_secrets() {
    if skip_without(is_root(), "root (isolated local sandboxes)") {
        return;
    }
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[("HANGAR_ISOLATION_CANARY", CANARY)]);
    relay.share_default().await;
    let user = relay.token("u", "user").await.secret;
    let script = format!(
        "for f in /proc/[0-9]*/environ; do cat \"$f\" 2>/dev/null | tr '\\0' '\\n'; done \
           | grep -c -e {ADMIN} -e {CANARY}; \
         cat /proc/$PPID/environ >/dev/null 2>&1 && echo parent-readable || echo parent-unreadable"
    );
    let v = exec(&relay, &user, "default", &script).await;
    assert_eq!(v["stdout"], json!("0\nparent-unreadable\n"), "{v}");
}

/// The state directory is out of reach: the relay's database, its MAC key, another sandbox's
/// daemon token and directory, even this sandbox's own daemon token, for reading and for
/// writing. The sandbox's own work directory is there, at the path the host knows it by.
/// (Before, the command was the relay's user: it could read them all and add itself a token.)
#[tokio::test]
async fn a_command_cannot_reach_the_state_directory() {
    if skip_without(is_root(), "root (isolated local sandboxes)") {
        return;
    }
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    relay.share_default().await;
    let user = relay.token("u", "user").await.secret;
    let own = relay.call("GET", "/api/sandboxes/default", Some(ADMIN), None).await.json();
    let other = make_sandbox(&relay, ADMIN, "other").await;
    let s = state.0.display();
    let (own_id, other_id) = (own["id"].as_str().expect("id"), other["id"].as_str().expect("id"));
    let other_work = other["workdir"].as_str().expect("workdir");
    let tries = [
        ("read relay.sqlite", format!("cat {s}/relay.sqlite")),
        ("write relay.sqlite", format!("echo x >> {s}/relay.sqlite")),
        ("read mac.key", format!("cat {s}/mac.key")),
        ("list the state dir", format!("ls {s}")),
        ("list the sandboxes", format!("ls {s}/sandboxes")),
        ("write the state dir", format!("touch {s}/planted")),
        ("read the other token", format!("cat {s}/sandboxes/{other_id}/envd.token")),
        ("list the other work dir", format!("ls {other_work}")),
        ("write the other work dir", format!("touch {other_work}/planted")),
        ("list the other home", format!("ls {s}/sandboxes/{other_id}/disk/home")),
        ("read its own daemon token", format!("cat {s}/sandboxes/{own_id}/envd.token")),
        ("read its daemon log", format!("cat {s}/sandboxes/{own_id}/envd.log")),
    ];
    let mut script = String::from("echo mine > mine.txt; cat mine.txt >/dev/null && echo 'reached: own work dir';");
    for (what, cmd) in &tries {
        script.push_str(&format!(" {cmd} >/dev/null 2>&1 && echo 'reached: {what}';"));
    }
    script.push_str(" true");
    let v = exec(&relay, &user, "default", &script).await;
    assert_eq!(v["stdout"], json!("reached: own work dir\n"), "{v}");
    assert!(!state.0.join("planted").exists());
    assert!(!std::path::Path::new(other_work).join("planted").exists());
    // The host reads what the sandbox wrote, where it always was.
    let work = own["workdir"].as_str().expect("workdir");
    assert_eq!(std::fs::read_to_string(format!("{work}/mine.txt")).expect("mine.txt"), "mine\n");
}

/// `ps` and `/proc` inside show only the sandbox's own processes: its daemon as PID 1 and the
/// command itself, none of the relay's, none of another sandbox's; and `kill -9` of the relay's
/// pid fails. (Before, the command saw every process of the host and could kill the relay.)
#[tokio::test]
async fn a_command_sees_only_its_own_sandbox() {
    if skip_without(is_root(), "root (isolated local sandboxes)") {
        return;
    }
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    relay.share_default().await;
    let user = relay.token("u", "user").await.secret;
    make_sandbox(&relay, ADMIN, "other").await;
    let marker = format!("hangar-elsewhere-{}", std::process::id());
    let r = relay
        .call(
            "POST",
            "/api/sandboxes/other/processes",
            Some(ADMIN),
            Some(json!({"command": format!("exec -a {marker} sleep 300")})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    wait_until(STEP, "the other sandbox's process runs", || !pids_with(&marker).is_empty()).await;

    let v = exec(&relay, &user, "default", "ps -e -o pid=,comm=").await;
    let ps = v["stdout"].as_str().expect("stdout");
    let procs: Vec<(&str, &str)> = ps.lines().filter_map(|l| l.trim().split_once(' ')).collect();
    assert_eq!(procs.first(), Some(&("1", "hangar-envd")), "the daemon is PID 1: {ps}");
    assert!(procs.iter().all(|(_, comm)| ["hangar-envd", "bash", "ps"].contains(comm)), "{ps}");
    let v = exec(&relay, &user, "default", "ls -d /proc/[0-9]* | wc -l").await;
    let n: u32 = v["stdout"].as_str().and_then(|s| s.trim().parse().ok()).expect("a count");
    assert!(n <= 5, "/proc shows {n} processes: the daemon, bash, ls, wc: {v}");

    let pid = relay.pid();
    let v = exec(&relay, &user, "default", &format!("kill -9 {pid}; echo $?")).await;
    assert_ne!(v["stdout"], json!("0\n"), "kill -9 of the relay succeeded: {v}");
    assert_eq!(relay.call("GET", "/health", None, None).await.status, 204, "the relay is gone");
    assert!(!pids_with(&marker).is_empty(), "the other sandbox's process was killed");
}

/// A sandbox's view says how it is isolated; an isolated one's commands run as a user of its
/// own, which owns its work directory, and what they write is theirs with the usual modes.
#[tokio::test]
async fn a_sandbox_says_how_it_is_isolated_and_runs_as_its_own_user() {
    if skip_without(is_root(), "root (isolated local sandboxes)") {
        return;
    }
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    relay.share_default().await;
    let user = relay.token("u", "user").await.secret;
    let v = relay.call("GET", "/api/sandboxes/default", Some(&user), None).await.json();
    assert_eq!(v["isolation"], json!("namespaces"), "{v}");
    let list = relay.call("GET", "/api/sandboxes", Some(&user), None).await.json();
    assert_eq!(list["sandboxes"][0]["isolation"], json!("namespaces"), "{list}");
    let out = exec(&relay, &user, "default", "id -u; id -un; touch made; stat -c '%u %a' made").await;
    let text = out["stdout"].as_str().expect("stdout");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    let uid: u32 = lines[0].parse().expect("a uid");
    assert_ne!(uid, 0, "commands run as root: {out}");
    assert!(lines[1].starts_with("hangar-"), "{out}");
    assert_eq!(lines[2], format!("{uid} 644"), "{out}");
    use std::os::unix::fs::MetadataExt as _;
    let work = v["workdir"].as_str().expect("workdir");
    assert_eq!(std::fs::metadata(work).expect("the work dir").uid(), uid);

    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[("HANGAR_TEST_DISABLE_ISOLATION", "true")]);
    let v = relay.call("GET", "/api/sandboxes/default", Some(ADMIN), None).await.json();
    assert_eq!(v["isolation"], json!("none"), "{v}");
}

/// One MCP `tools/call` of `exec` (a 2025-era session: initialize, initialized, call); the
/// JSON-RPC answer.
async fn mcp_exec(relay: &Relay, token: &str, sandbox: &str, command: &str) -> Value {
    let auth = format!("Bearer {token}");
    let post = |body: Value, session: Option<String>| {
        let auth = auth.clone();
        async move {
            let mut headers = vec![
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
                ("authorization", auth.as_str()),
            ];
            if let Some(s) = &session {
                headers.push(("mcp-session-id", s.as_str()));
            }
            let req = build_request("POST", "/mcp", relay.addr, false, &headers, full_body(body.to_string().into()));
            within(STEP, "an MCP request", send_http1(relay.addr, req)).await
        }
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}}});
    let resp = post(init, None).await;
    assert_eq!(resp.status(), 200, "initialize");
    let session = resp.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string);
    let mut sse = Sse::from_response(resp);
    sse.next(STEP).await.expect("the initialize result");
    let resp = post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), session.clone()).await;
    assert!(resp.status().is_success(), "initialized: {}", resp.status());
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "exec", "arguments": {"sandbox": sandbox, "command": command}}});
    let mut sse = Sse::from_response(post(call, session).await);
    loop {
        let ev = sse.next(STEP).await.expect("the call's answer");
        let v = ev.json();
        if v["id"] == json!(2) {
            return v;
        }
    }
}

/// Without isolation (the relay is not root, or cannot make namespaces; here forced) the relay
/// says so at start, the view says `none`, and only admin tokens may work inside the sandbox,
/// over REST and MCP alike, until the operator allows it with
/// `--allow-unisolated-sandboxes`. (Before, any user or mcp token ran commands as the relay's
/// user: an admin in effect.)
#[tokio::test]
async fn a_sandbox_that_isolates_nothing_is_for_admins_unless_allowed() {
    let state = StateDir::new();
    let env = [("HANGAR_TEST_DISABLE_ISOLATION", "1"), ("HANGAR_ALLOW_UNISOLATED_SANDBOXES", "0")];
    let mut relay = Relay::start(&state.0, &env);
    relay.share_default().await;
    let log = relay.log();
    assert!(
        log.contains("event=\"local_isolation\" isolation=\"none\"") && log.contains("unisolated_allowed=false"),
        "{log}"
    );
    let user = relay.token("u", "user").await.secret;
    let mcp = relay.token("m", "mcp").await.secret;
    let v = relay.call("GET", "/api/sandboxes/default", Some(&user), None).await;
    assert_eq!((v.status, v.json()["isolation"].clone()), (200, json!("none")), "{v:?}");

    let body = json!({"command": "echo hi"});
    for (method, path, body) in [
        ("POST", "/api/sandboxes/default/exec", Some(body.clone())),
        ("POST", "/api/sandboxes/default/exec/stream", Some(body.clone())),
        ("POST", "/api/sandboxes/default/processes", Some(body.clone())),
        ("GET", "/api/sandboxes/default/processes", None),
        ("GET", "/api/sandboxes/default/processes/p_000000000000", None),
        ("GET", "/api/sandboxes/default/watch?path=.", None),
    ] {
        let r = relay.call(method, path, Some(&user), body).await;
        let e = r.json();
        assert_eq!((r.status, e["error"]["code"].clone()), (403, json!("permission_denied")), "{method} {path}: {r:?}");
        let message = e["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("--allow-unisolated-sandboxes"), "{method} {path}: {message}");
    }
    let answer = mcp_exec(&relay, &mcp, "default", "echo hi").await;
    let text = answer["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        answer["result"]["isError"] == json!(true) && text.starts_with("permission_denied: "),
        "MCP exec: {answer}"
    );
    assert_eq!(exec(&relay, ADMIN, "default", "echo hi").await["stdout"], json!("hi\n"));

    relay.stop();
    let relay =
        Relay::start(&state.0, &[("HANGAR_TEST_DISABLE_ISOLATION", "1"), ("HANGAR_ALLOW_UNISOLATED_SANDBOXES", "1")]);
    assert!(relay.log().contains("unisolated_allowed=true"), "{}", relay.log());
    assert_eq!(exec(&relay, &user, "default", "echo hi").await["stdout"], json!("hi\n"));
    let answer = mcp_exec(&relay, &mcp, "default", "echo hi").await;
    assert_eq!(answer["result"]["structuredContent"]["stdout"], json!("hi\n"), "MCP exec: {answer}");
}

/// Destroying a sandbox ends everything in it: a background process, a streamed command still
/// running, and an orphan that left its command (`setsid ... &`); none survives the DELETE,
/// counted on the host right after it. With isolation its PID namespace ends with its daemon;
/// without, the daemon's subreaped process tree is killed first. (Before, only the daemon was
/// killed: everything it had started ran on.)
async fn destroying_leaves_no_survivor(env: &[(&str, &str)]) {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, env);
    let user = relay.token("u", "user").await.secret;
    // The user's own, which it may destroy.
    let created = make_sandbox(&relay, &user, "doomed").await;
    let daemon = state.daemon_of(created["id"].as_str().expect("id"));
    let marker = format!("hangar-doomed-{}-{}", std::process::id(), env.len());
    let r = relay
        .call(
            "POST",
            "/api/sandboxes/doomed/processes",
            Some(&user),
            Some(json!({"command": format!("exec -a {marker}-bg sleep 300")})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let orphan = format!("setsid bash -c 'exec -a {marker}-orphan sleep 300' </dev/null >/dev/null 2>&1 & echo left");
    assert_eq!(exec(&relay, &user, "doomed", &orphan).await["stdout"], json!("left\n"));
    let streamed = format!("echo go; exec -a {marker}-streamed sleep 300");
    let mut sse =
        relay.sse("POST", "/api/sandboxes/doomed/exec/stream", Some(&user), Some(json!({"command": streamed}))).await;
    assert_eq!(sse.status, 200);
    sse.next(STEP).await.expect("the streamed command's first output");
    wait_until(STEP, "the three processes run", || pids_with(&marker).len() == 3).await;

    let r = relay.call("DELETE", "/api/sandboxes/doomed", Some(&user), None).await;
    assert_eq!(r.status, 204, "{r:?}");
    let left = pids_with(&marker);
    assert!(left.is_empty(), "survivors of the destroy: {left:?} ({env:?})");
    assert!(!std::path::Path::new(&format!("/proc/{daemon}/cmdline")).exists(), "the daemon survived ({env:?})");
    // The streamed command's client hears why it ended.
    let rest = sse.collect(Duration::from_secs(5)).await;
    assert!(rest.iter().any(|e| e.event == "result"), "{rest:?}");
}

#[tokio::test]
async fn destroying_an_isolated_sandbox_leaves_no_survivor() {
    if skip_without(is_root(), "root (isolated local sandboxes)") {
        return;
    }
    destroying_leaves_no_survivor(&[]).await;
}

#[tokio::test]
async fn destroying_a_sandbox_without_isolation_leaves_no_survivor() {
    destroying_leaves_no_survivor(&[
        ("HANGAR_TEST_DISABLE_ISOLATION", "true"),
        ("HANGAR_ALLOW_UNISOLATED_SANDBOXES", "true"),
    ])
    .await;
}

/// A package install replaces the host's `/etc/passwd` and `/etc/group` by a rename. Here the
/// relay runs in a scratch mount namespace whose `/etc` is a copy, and the files are replaced
/// in that copy: a sandbox started before still resolves its user (it ran into `setpriv: uid
/// ... not found` when its passwd was a file bound over the host's), and reads what the host
/// replaced elsewhere in `/etc` at once.
#[tokio::test]
async fn a_sandbox_keeps_its_user_when_the_host_replaces_its_passwd_by_a_rename() {
    if skip_without(is_root(), "root (isolated local sandboxes, a scratch mount namespace)") {
        return;
    }
    let state = StateDir::new();
    std::fs::create_dir_all(&state.0).expect("state dir");
    let etc = state.0.with_extension("etc");
    let _ = std::fs::remove_dir_all(&etc);
    let copied = std::process::Command::new("cp").arg("-a").arg("/etc").arg(&etc).status().expect("cp");
    assert!(copied.success(), "copying /etc");
    let etc_arg = etc.to_str().expect("path");
    let wrapper = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        r#"mount --bind "$0" /etc && exec "$@""#,
        etc_arg,
    ];
    let mut relay = Relay::start_under(&wrapper, &state.0, &[]);
    relay.share_default().await;
    let user = relay.token("u", "user").await.secret;
    let who = exec(&relay, &user, "default", "id -un; cat /etc/hosts | tail -n 1").await;
    let name = who["stdout"].as_str().unwrap_or_default().lines().next().unwrap_or_default().to_string();
    assert!(name.starts_with("hangar-"), "{who}");

    for (file, extra) in [("passwd", ""), ("group", ""), ("hosts", "10.9.8.7 replaced-by-rename\n")] {
        let path = etc.join(file);
        let mut text = std::fs::read_to_string(&path).expect("the copy's file");
        text.push_str(extra);
        let new = etc.join(format!("{file}.hangar-new"));
        std::fs::write(&new, text).expect("writing the new file");
        std::fs::rename(&new, &path).expect("renaming it over");
    }
    let who = exec(&relay, &user, "default", "id -un; tail -n 1 /etc/hosts").await;
    assert_eq!(who["stdout"], json!(format!("{name}\n10.9.8.7 replaced-by-rename\n")), "{who}");
    relay.stop();
    drop(state);
    let _ = std::fs::remove_dir_all(&etc);
}
