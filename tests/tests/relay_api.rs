//! hangar-relay end to end: the real relay and daemons, driven over HTTP as curl would.
use std::time::Duration;

use hangar_e2e::{
    is_running, kernel_has_custom_slices, pids_with,
    relay::{Relay, StateDir, Token, ADMIN},
    sched_slice_us, wait_until, STEP,
};
use serde_json::{json, Value};

#[tokio::test]
async fn health_is_open_and_everything_else_needs_a_token() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    assert_eq!(relay.call("GET", "/health", None, None).await.status, 204);
    for token in [None, Some("wrong"), Some("hgr_0000_nope"), Some("")] {
        let r = relay.call("GET", "/api/sandboxes", token, None).await;
        assert_eq!(r.status, 401, "{token:?}: {r:?}");
        assert_eq!(r.json()["error"]["code"], json!("unauthenticated"));
    }
    assert_eq!(relay.call("GET", "/api/sandboxes", Some(ADMIN), None).await.status, 200);
}

#[tokio::test]
async fn tokens_are_shown_once_stored_hashed_and_revocable() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let Token { id, secret } = relay.token("ci", "user").await;
    assert!(secret.starts_with("hgr_"), "{secret}");
    assert_eq!(relay.call("GET", "/api/sandboxes", Some(&secret), None).await.status, 200);

    let list = relay.call("GET", "/api/tokens", Some(ADMIN), None).await;
    assert_eq!(list.status, 200);
    let text = String::from_utf8_lossy(&list.body).into_owned();
    assert!(!text.contains(&secret) && !text.contains("hash") && !text.contains(ADMIN), "no secrets listed: {text}");
    let db = std::fs::read(state.0.join("relay.sqlite")).expect("database");
    assert!(!String::from_utf8_lossy(&db).contains(&secret), "the secret is not stored");

    // A user token manages no tokens.
    let r = relay.call("POST", "/api/tokens", Some(&secret), Some(json!({"name": "x", "scope": "admin"}))).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(relay.call("GET", "/api/tokens", Some(&secret), None).await.status, 403);

    assert_eq!(relay.call("DELETE", &format!("/api/tokens/{id}"), Some(ADMIN), None).await.status, 204);
    assert_eq!(relay.call("GET", "/api/sandboxes", Some(&secret), None).await.status, 401);
    assert_eq!(relay.call("DELETE", &format!("/api/tokens/{id}"), Some(ADMIN), None).await.status, 404);

    let r = relay.call("POST", "/api/tokens", Some(ADMIN), Some(json!({"name": "x", "scope": "root"}))).await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (400, json!("invalid_argument")), "{r:?}");
    // The state directory and its secrets are the relay user's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &str| std::fs::metadata(state.0.join(p)).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode("mac.key"), mode("relay.sqlite")), (0o600, 0o600));
}

#[tokio::test]
async fn generated_admin_token_is_printed_once() {
    let state = StateDir::new();
    let bin = hangar_e2e::relay::relay_bin();
    let out = std::process::Command::new("timeout")
        .args(["3", bin.to_str().unwrap(), "serve", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(&state.0)
        .env_remove("HANGAR_ADMIN_TOKEN")
        .env("HANGAR_ENVD_BIN", hangar_e2e::envd_bin())
        .output()
        .expect("relay");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let secret = stdout
        .lines()
        .find_map(|l| l.strip_prefix("admin token (shown once): "))
        .unwrap_or_else(|| panic!("no admin token line in {stdout:?}"))
        .to_string();
    let relay = Relay::start(&state.0, &[("HANGAR_ADMIN_TOKEN", "")]);
    assert_eq!(relay.call("GET", "/api/tokens", Some(&secret), None).await.status, 200);
    // An empty HANGAR_ADMIN_TOKEN is no token, and an empty Bearer matches nothing.
    assert_eq!(relay.call("GET", "/api/tokens", Some(""), None).await.status, 401);
    let tokens = relay.call("GET", "/api/tokens", Some(&secret), None).await.json();
    assert_eq!(tokens["tokens"].as_array().map(Vec::len), Some(1), "{tokens}");
    drop(relay);
    // A second start prints no token: one admin exists.
    let out = std::process::Command::new("timeout")
        .args(["3", bin.to_str().unwrap(), "serve", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(&state.0)
        .env_remove("HANGAR_ADMIN_TOKEN")
        .env("HANGAR_ENVD_BIN", hangar_e2e::envd_bin())
        .output()
        .expect("relay");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("admin token"));
}

/// Every thread of the relay asks for a 100 µs scheduling slice, which kernels from 6.12 on
/// honour; `HANGAR_SCHED_SLICE_US` chooses another and 0 leaves the kernel's default; a value the
/// kernel would not take is refused at start.
#[tokio::test]
async fn the_relays_threads_run_on_a_short_slice() {
    // The test's own thread runs on the kernel's default.
    let default = sched_slice_us(0).expect("sched_getattr");
    let honoured = |us: u64| if kernel_has_custom_slices() { us } else { default };
    let threads = |pid: u32| -> Vec<u32> {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .expect("/proc/PID/task")
            .flatten()
            .filter_map(|t| t.file_name().to_str()?.parse().ok())
            .collect()
    };
    for (env, want) in [(None, honoured(100)), (Some("2000"), honoured(2000)), (Some("0"), default)] {
        let state = StateDir::new();
        let relay = Relay::start(&state.0, &env.map(|v| [("HANGAR_SCHED_SLICE_US", v)]).unwrap_or_default());
        assert_eq!(relay.call("GET", "/health", None, None).await.status, 204);
        let all = threads(relay.pid());
        assert!(all.len() > 1, "the relay runs its runtime on threads of its own: {all:?}");
        for tid in all {
            // A thread asks for its slice as it starts (a blocking-pool thread may be newborn as
            // it is listed), and one may end before it is read: wait a little for either.
            let mut got = sched_slice_us(tid);
            for _ in 0..40 {
                if got == Some(want) || got.is_none() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
                got = sched_slice_us(tid);
            }
            assert!(got == Some(want) || got.is_none(), "HANGAR_SCHED_SLICE_US={env:?}, thread {tid}: {got:?}");
        }
    }
    let state = StateDir::new();
    let out = std::process::Command::new(hangar_e2e::relay::relay_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--sched-slice-us", "50", "--state-dir"])
        .arg(&state.0)
        .output()
        .expect("relay");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("from 100 to 100000"), "{stderr}");
}

#[tokio::test]
async fn sandboxes_crud_and_bad_input() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let list = relay.call("GET", "/api/sandboxes", Some(ADMIN), None).await.json();
    let names: Vec<_> = list["sandboxes"].as_array().unwrap().iter().map(|s| s["name"].clone()).collect();
    assert_eq!(names, vec![json!("default")], "a default sandbox exists from the first start");
    assert_eq!(list["sandboxes"][0]["daemon"], json!(true));

    let r = relay.call("POST", "/api/sandboxes", Some(ADMIN), Some(json!({"name": "work-1"}))).await;
    assert_eq!(r.status, 201, "{r:?}");
    let created = r.json();
    assert_eq!((created["provider"].clone(), created["state"].clone()), (json!("local"), json!("running")));
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert!(!text.contains("envd_token") && !text.contains("envd_url"), "no daemon secrets: {text}");
    let id = created["id"].as_str().unwrap().to_string();
    for reference in ["work-1", id.as_str()] {
        let r = relay.call("GET", &format!("/api/sandboxes/{reference}"), Some(ADMIN), None).await;
        assert_eq!((r.status, r.json()["id"].clone()), (200, json!(id)), "{reference}");
    }
    let r = relay.call("POST", "/api/sandboxes", Some(ADMIN), Some(json!({"name": "work-1"}))).await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (409, json!("already_exists")));
    for bad in [
        json!({"name": "../escape"}),
        json!({"name": "UPPER"}),
        json!({"name": ""}),
        json!({"name": "x".repeat(64)}),
        json!({"name": "ok", "provider": "nope"}),
        json!({"name": "ok", "options": {"image": "x"}}),
        json!({"name": "ok", "surprise": 1}),
        json!({"nom": "ok"}),
    ] {
        let r = relay.call("POST", "/api/sandboxes", Some(ADMIN), Some(bad.clone())).await;
        assert_eq!((r.status, r.json()["error"]["code"].clone()), (400, json!("invalid_argument")), "{bad}: {r:?}");
    }
    let r = relay.call_raw("POST", "/api/sandboxes", Some(ADMIN), Some("{not json".into())).await;
    assert_eq!(r.status, 400, "{r:?}");
    let huge = bytes::Bytes::from(format!("{{\"name\": \"{}\"}}", "a".repeat(2 * 1024 * 1024)));
    let r = relay.call_raw("POST", "/api/sandboxes", Some(ADMIN), Some(huge)).await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (413, json!("resource_exhausted")), "{r:?}");
    let r = relay.call("GET", "/api/sandboxes/nope", Some(ADMIN), None).await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (404, json!("not_found")));

    let daemons_before = state.daemons().len();
    assert_eq!(relay.call("DELETE", "/api/sandboxes/work-1", Some(ADMIN), None).await.status, 204);
    assert_eq!(relay.call("GET", "/api/sandboxes/work-1", Some(ADMIN), None).await.status, 404);
    assert!(!state.0.join("sandboxes").join(&id).exists(), "its directory is gone");
    wait_until(STEP, "the destroyed sandbox's daemon exits", || state.daemons().len() == daemons_before - 1).await;
}

#[tokio::test]
async fn exec_returns_the_result_at_the_end() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    relay.share_default().await;
    let user = relay.token("u", "user").await.secret;
    let r = relay
        .call(
            "POST",
            "/api/sandboxes/default/exec",
            Some(&user),
            Some(json!({"command": "echo hi; echo oops >&2; exit 3"})),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    assert_eq!(
        (v["exit_code"].clone(), v["stdout"].clone(), v["stderr"].clone()),
        (json!(3), json!("hi\n"), json!("oops\n"))
    );
    assert_eq!(v["streamed"], json!(false));
    // A local sandbox's processes start in its work directory, with its home beside it as HOME.
    let v = relay
        .call("POST", "/api/sandboxes/default/exec", Some(&user), Some(json!({"command": "pwd; echo $HOME"})))
        .await
        .json();
    let out = v["stdout"].as_str().unwrap();
    let lines: Vec<_> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with(state.0.to_str().unwrap()) && lines[0].ends_with("/disk/work"), "{out}");
    assert_eq!(lines[1], lines[0].replace("/disk/work", "/disk/home"), "{out}");

    // cwd: relative to the work directory, and never out of the sandbox's files (`..` is
    // them: the work directory and the home; `../..` is not).
    std::fs::create_dir_all(std::path::Path::new(lines[0]).join("sub")).unwrap();
    let v = relay
        .call("POST", "/api/sandboxes/default/exec", Some(&user), Some(json!({"command": "pwd", "cwd": "sub"})))
        .await
        .json();
    assert_eq!(v["stdout"], json!(format!("{}/sub\n", lines[0])), "{v}");
    for bad in [
        json!({"command": ""}),
        json!({"command": "true", "timeout": 0}),
        json!({"cmd": "true"}),
        json!({"command": "pwd", "cwd": "../.."}),
        json!({"command": "pwd", "cwd": "/etc"}),
    ] {
        let r = relay.call("POST", "/api/sandboxes/default/exec", Some(&user), Some(bad.clone())).await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
    }
    let r = relay.call("POST", "/api/sandboxes/missing/exec", Some(&user), Some(json!({"command": "true"}))).await;
    assert_eq!(r.status, 404, "{r:?}");
}

#[tokio::test]
async fn exec_timeout_kills_the_command() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let started = std::time::Instant::now();
    let v = relay
        .call(
            "POST",
            "/api/sandboxes/default/exec",
            Some(ADMIN),
            Some(json!({"command": "echo before; sleep 30", "timeout": 1})),
        )
        .await
        .json();
    assert!(started.elapsed() < Duration::from_secs(8), "{:?}", started.elapsed());
    assert_eq!((v["exit_code"].clone(), v["stdout"].clone()), (json!(-1), json!("before\n")), "{v}");
}

#[tokio::test]
async fn exec_stream_sends_output_as_it_prints_then_the_result() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let mut s = relay
        .sse(
            "POST",
            "/api/sandboxes/default/exec/stream",
            Some(ADMIN),
            Some(json!({"command": "for i in 1 2 3; do echo line $i; sleep 0.2; done; echo err >&2; exit 4"})),
        )
        .await;
    assert_eq!(s.status, 200);
    let first = s.next(STEP).await.expect("an event");
    let at_first = std::time::Instant::now();
    assert_eq!((first.event.as_str(), first.json()["data"].clone()), ("stdout", json!("line 1\n")));
    let rest = s.collect(STEP).await;
    assert!(at_first.elapsed() >= Duration::from_millis(300), "the first line came before the rest was printed");
    let mut stdout = String::from("line 1\n");
    let mut stderr = String::new();
    for e in &rest[..rest.len() - 1] {
        match e.event.as_str() {
            "stdout" => stdout.push_str(e.json()["data"].as_str().unwrap()),
            "stderr" => stderr.push_str(e.json()["data"].as_str().unwrap()),
            other => panic!("unexpected event {other}: {e:?}"),
        }
    }
    assert_eq!((stdout.as_str(), stderr.as_str()), ("line 1\nline 2\nline 3\n", "err\n"));
    let result = rest.last().unwrap();
    assert_eq!(result.event, "result");
    let v = result.json();
    assert_eq!(
        (v["exit_code"].clone(), v["streamed"].clone(), v["stdout"].clone()),
        (json!(4), json!(true), json!(stdout))
    );
    assert!(v.get("closed").is_none(), "{v}");
}

#[tokio::test]
async fn a_streamed_command_whose_client_goes_away_is_killed() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let marker = format!("hangar-disconnect-{}", std::process::id());
    let mut s = relay
        .sse(
            "POST",
            "/api/sandboxes/default/exec/stream",
            Some(ADMIN),
            Some(json!({"command": format!("echo started; exec -a {marker} sleep 300")})),
        )
        .await;
    let first = s.next(STEP).await.expect("started");
    assert_eq!(first.json()["data"], json!("started\n"));
    let find = || pids_with(&marker);
    wait_until(STEP, "the command is running", || !find().is_empty()).await;
    let pids = find();
    drop(s);
    wait_until(STEP, "the command is killed once its client is gone", || pids.iter().all(|p| !is_running(*p))).await;
}

#[tokio::test]
async fn a_restarted_relay_finds_its_sandboxes_daemons_again() {
    let state = StateDir::new();
    let mut relay = Relay::start(&state.0, &[]);
    let before = state.daemons();
    assert_eq!(before.len(), 1, "one daemon for the default sandbox");
    relay.stop();
    assert!(before.iter().all(|p| is_running(*p)), "the daemon outlives the relay");
    let relay = Relay::start(&state.0, &[]);
    let v: Value = relay
        .call("POST", "/api/sandboxes/default/exec", Some(ADMIN), Some(json!({"command": "echo again"})))
        .await
        .json();
    assert_eq!(v["stdout"], json!("again\n"), "{v}");
    assert_eq!(state.daemons(), before, "the same daemon serves, no second one started");

    // A daemon that died is started again on demand.
    for p in &before {
        unsafe { libc::kill(*p as i32, libc::SIGKILL) };
    }
    wait_until(STEP, "the daemon is gone", || before.iter().all(|p| !is_running(*p))).await;
    let v: Value = relay
        .call("POST", "/api/sandboxes/default/exec", Some(ADMIN), Some(json!({"command": "echo revived"})))
        .await
        .json();
    assert_eq!(v["stdout"], json!("revived\n"), "{v}");
    let after = state.daemons();
    assert_eq!(after.len(), 1);
    assert_ne!(after, before);
}

/// A local sandbox whose daemon cannot start runs a command through the provider's own exec:
/// each output costs the relay its last 256 KiB as it is read, however much the command prints
/// (1 GiB from /dev/zero here, a second or two), and the result is that tail.
#[tokio::test]
async fn the_local_exec_keeps_only_the_last_256_kib_of_each_output() {
    let state = StateDir::new();
    let unisolated = ("HANGAR_TEST_DISABLE_ISOLATION", "1");
    // A sandbox made with its daemon, which then dies and cannot start again (the relay comes
    // back with a daemon binary that is not there): its commands take the provider's exec.
    drop(Relay::start(&state.0, &[unisolated]));
    let daemons = state.daemons();
    assert!(!daemons.is_empty(), "the default sandbox's daemon runs");
    for pid in daemons {
        // SAFETY: kill(2) on the daemon this test's relay started.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    wait_until(STEP, "the daemon gone", || state.daemons().is_empty()).await;
    let relay = Relay::start(&state.0, &[unisolated, ("HANGAR_ENVD_BIN", "/nonexistent/hangar-envd")]);

    let command = "head -c 1073741824 /dev/zero; printf end; head -c 300000 /dev/zero >&2; printf err-end >&2";
    let r = relay.call("POST", "/api/sandboxes/default/exec", Some(ADMIN), Some(json!({ "command": command }))).await;
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body[..r.body.len().min(300)]));
    let v = r.json();
    assert_eq!(
        (v["exit_code"].clone(), v["streamed"].clone()),
        (json!(0), json!(false)),
        "through the provider's exec"
    );
    let printed = [("stdout", "end", (1u64 << 30) + 3), ("stderr", "err-end", 300_007)];
    for (name, end, total) in printed {
        let text = v[name].as_str().unwrap_or_else(|| panic!("no {name}"));
        assert_eq!(text.len(), 256 * 1024, "{name}: its last 256 KiB");
        assert!(text.ends_with(end) && text[..text.len() - end.len()].bytes().all(|b| b == 0), "{name}: its end");
        // And how much came before it, so a client knows the result is a tail.
        assert_eq!(v[format!("{name}_dropped")], json!(total - 256 * 1024), "{name}: the bytes dropped");
    }
    assert!(state.daemons().is_empty(), "no daemon ran the command");
    let peak = hangar_e2e::vm_hwm_kib(relay.pid()).expect("the relay's VmHWM");
    eprintln!("the relay's peak resident memory: {peak} KiB");
    assert!(peak < 256 * 1024, "the relay held what the command printed: a peak of {peak} KiB");
}
