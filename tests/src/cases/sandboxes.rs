//! Sandboxes on a platform: commands through the daemon and through the provider's own exec,
//! options, pause and resume, a sandbox removed behind the relay's back, and background
//! processes without a daemon.
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{
    docker::{container_of, docker_ok, inspect, pids_named, Containers},
    platform::{Daemon, Platform},
    relay::{Relay, StateDir, ADMIN},
    timing::{wait_until, STEP},
};

async fn exec(relay: &Relay, sandbox: &str, body: Value) -> Value {
    let r = relay.call("POST", &format!("/api/sandboxes/{sandbox}/exec"), Some(ADMIN), Some(body.clone())).await;
    assert_eq!(r.status, 200, "{body}: {r:?}");
    r.json()
}

/// Reads a streamed exec to its end: (events before the result, the result).
async fn stream(relay: &Relay, sandbox: &str, body: Value) -> (Vec<(String, String)>, Value) {
    let mut s = relay.sse("POST", &format!("/api/sandboxes/{sandbox}/exec/stream"), Some(ADMIN), Some(body)).await;
    assert_eq!(s.status, 200);
    let events = s.collect(STEP).await;
    let (last, rest) = events.split_last().expect("at least the result");
    assert_eq!(last.event, "result", "{events:?}");
    let out = rest
        .iter()
        .map(|e| {
            assert!(e.event == "stdout" || e.event == "stderr", "{e:?}");
            (e.event.clone(), e.json()["data"].as_str().expect("data").to_string())
        })
        .collect();
    (out, last.json())
}

/// The sandbox's name and the id of its container.
fn name_and_container(sbx: &Value) -> (String, String) {
    (sbx["name"].as_str().expect("name").to_string(), container_of(sbx["id"].as_str().expect("id")))
}

pub async fn a_sandbox_with_the_daemon_streams_through_it(p: &Platform) {
    let (mut containers, state) = (Containers::new(), StateDir::new());
    let relay = p.relay(&state, &[]);
    let created = Instant::now();
    let sbx = p.sandbox(&relay, &mut containers, "envd", Daemon::With, json!({})).await;
    eprintln!("created a {} sandbox with its daemon in {:?}", p.name, created.elapsed());
    assert_eq!(
        (sbx["provider"].clone(), sbx["state"].clone(), sbx["daemon"].clone()),
        (json!(p.provider), json!("running"), json!(true)),
        "{sbx}"
    );
    let text = sbx.to_string();
    assert!(!text.contains("envd_token") && !text.contains("envd_url"), "no daemon secrets: {text}");
    let (name, c) = name_and_container(&sbx);
    assert_eq!(inspect(&c, "{{ index .Config.Labels \"hangar.sandbox.name\" }}"), name);
    // The daemon has the sandbox's own token: it refuses a call without it.
    let ip = inspect(&c, "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}");
    let out = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", "-X", "POST"])
        .args(["-H", "Content-Type: application/json", "-d", "{}"])
        .arg(format!("http://{ip}:49983/process.Process/List"))
        .output();
    if let Ok(out) = out {
        assert_eq!(String::from_utf8_lossy(&out.stdout), "401", "the daemon answers only with its token");
    }

    let v = exec(&relay, &name, json!({"command": "echo hi; echo oops >&2; exit 3"})).await;
    assert_eq!(
        (v["exit_code"].clone(), v["stdout"].clone(), v["stderr"].clone()),
        (json!(3), json!("hi\n"), json!("oops\n"))
    );
    assert_eq!(v["streamed"], json!(false), "an unstreamed exec says so: {v}");

    // Output arrives as it is printed, in order.
    let mut s = relay
        .sse(
            "POST",
            &format!("/api/sandboxes/{name}/exec/stream"),
            Some(ADMIN),
            Some(json!({"command": "for i in 1 2 3 4; do echo line $i; sleep 0.2; done; echo err >&2; exit 4"})),
        )
        .await;
    assert_eq!(s.status, 200);
    let first = s.next(STEP).await.expect("an event");
    let at_first = Instant::now();
    assert_eq!((first.event.as_str(), first.json()["data"].clone()), ("stdout", json!("line 1\n")));
    let rest = s.collect(STEP).await;
    assert!(at_first.elapsed() >= Duration::from_millis(450), "the first line came before the rest was printed");
    let (result, events) = rest.split_last().expect("result");
    let mut stdout = String::from("line 1\n");
    let mut stderr = String::new();
    for e in events {
        match e.event.as_str() {
            "stdout" => stdout.push_str(e.json()["data"].as_str().unwrap_or_default()),
            "stderr" => stderr.push_str(e.json()["data"].as_str().unwrap_or_default()),
            other => panic!("unexpected event {other}: {e:?}"),
        }
    }
    assert_eq!((stdout.as_str(), stderr.as_str()), ("line 1\nline 2\nline 3\nline 4\n", "err\n"));
    assert_eq!(result.event, "result");
    let r = result.json();
    assert_eq!(
        (r["exit_code"].clone(), r["streamed"].clone(), r["stdout"].clone()),
        (json!(4), json!(true), json!(stdout))
    );

    // A streamed command whose client goes away is killed, inside the container.
    let marker = format!("hangar-gone-{}", std::process::id());
    let mut s = relay
        .sse(
            "POST",
            &format!("/api/sandboxes/{name}/exec/stream"),
            Some(ADMIN),
            Some(json!({"command": format!("echo started; exec -a {marker} sleep 300")})),
        )
        .await;
    assert_eq!(s.next(STEP).await.expect("started").json()["data"], json!("started\n"));
    wait_until(STEP, "the command runs in the container", || !pids_named(&c, &marker).is_empty()).await;
    drop(s);
    wait_until(STEP, "the command is killed once its client is gone", || pids_named(&c, &marker).is_empty()).await;
}

pub async fn a_sandbox_without_the_daemon_falls_back_to_the_providers_exec(p: &Platform) {
    let (mut containers, state) = (Containers::new(), StateDir::new());
    let relay = p.relay(&state, &[]);
    let sbx = p.sandbox(&relay, &mut containers, "plain", Daemon::Without, json!({})).await;
    assert_eq!(sbx["daemon"], json!(false), "{sbx}");
    let (name, c) = name_and_container(&sbx);

    for (command, code) in [("true", 0), ("echo out; echo err >&2; exit 7", 7), ("kill -9 $$", 137)] {
        let v = exec(&relay, &name, json!({ "command": command })).await;
        assert_eq!((v["exit_code"].clone(), v["streamed"].clone()), (json!(code), json!(false)), "{command}: {v}");
        if code == 7 {
            assert_eq!((v["stdout"].clone(), v["stderr"].clone()), (json!("out\n"), json!("err\n")));
        }
    }
    // `bash -lc`, with text passed through as data.
    let v = exec(&relay, &name, json!({"command": "shopt -q login_shell && echo login; printf '%s\\n' \"$0\" 'é ✓'"}))
        .await;
    assert_eq!(v["stdout"], json!("login\nbash\né ✓\n"), "{v}");

    // Streamed without a daemon: the output in one piece at the end, and the result says so.
    let started = Instant::now();
    let (events, result) = stream(
        &relay,
        &name,
        json!({"command": "for i in 1 2 3; do echo line $i; sleep 0.2; done; echo e >&2; exit 2"}),
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(600));
    assert_eq!(events, vec![("stdout".into(), "line 1\nline 2\nline 3\n".into()), ("stderr".into(), "e\n".into())]);
    assert_eq!((result["exit_code"].clone(), result["streamed"].clone()), (json!(2), json!(false)), "{result}");

    // A timeout kills the command and what it started, inside the container.
    let marker = format!("hangar-timeout-{}", std::process::id());
    let started = Instant::now();
    let v = exec(
        &relay,
        &name,
        json!({"command": format!("echo before; (exec -a {marker} sleep 300) & exec -a {marker} sleep 300"), "timeout": 1}),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(8), "{:?}", started.elapsed());
    assert_eq!(
        (v["exit_code"].clone(), v["stdout"].clone(), v["closed"].clone()),
        (json!(-1), json!("before\n"), json!("lifetime")),
        "{v}"
    );
    wait_until(STEP, "the timed-out command is gone", || pids_named(&c, &marker).is_empty()).await;

    // A streamed fallback command whose client goes away is killed too.
    let marker = format!("hangar-fallback-gone-{}", std::process::id());
    let s = relay
        .sse(
            "POST",
            &format!("/api/sandboxes/{name}/exec/stream"),
            Some(ADMIN),
            Some(json!({"command": format!("exec -a {marker} sleep 300")})),
        )
        .await;
    assert_eq!(s.status, 200);
    wait_until(STEP, "the command runs in the container", || !pids_named(&c, &marker).is_empty()).await;
    drop(s);
    wait_until(STEP, "the command is killed once its client is gone", || pids_named(&c, &marker).is_empty()).await;
}

/// `env`, `user` and `workdir`, the options every provider takes by these names.
pub async fn options_reach_commands_through_the_daemon_and_without_it(p: &Platform) {
    let (mut containers, state) = (Containers::new(), StateDir::new());
    let relay = p.relay(&state, &[]);
    for daemon in p.daemons() {
        let extra = json!({"env": {"FOO": "bar baz", "EMPTY": ""}, "user": "user", "workdir": "/tmp/w"});
        let sbx = p.sandbox(&relay, &mut containers, "opts", daemon, extra.clone()).await;
        let want = (p.options(daemon, extra), json!("/tmp/w"));
        assert_eq!((sbx["options"].clone(), sbx["workdir"].clone()), want, "{sbx}");
        let name = sbx["name"].as_str().expect("name").to_string();

        let v = exec(&relay, &name, json!({"command": "id -un; pwd; echo \"$FOO|${EMPTY-unset}|$HOME\""})).await;
        assert_eq!(v["stdout"], json!("user\n/tmp/w\nbar baz||/home/user\n"), "{daemon:?}: {v}");
        // The workdir, made by hangar, is the user's; the daemon's token is not the commands'.
        let v = exec(&relay, &name, json!({"command": "stat -c %U /tmp/w; echo \"${HANGAR_ENVD_ACCESS_TOKEN-none}\""}))
            .await;
        assert_eq!(v["stdout"], json!("user\nnone\n"), "{daemon:?}: {v}");
        // cwd: absolute, `~`, and relative to the workdir, as the daemon resolves them.
        exec(&relay, &name, json!({"command": "mkdir -p sub"})).await;
        for (cwd, want) in [("/", "/"), ("~", "/home/user"), ("sub", "/tmp/w/sub")] {
            let v = exec(&relay, &name, json!({"command": "pwd", "cwd": cwd})).await;
            assert_eq!(v["stdout"], json!(format!("{want}\n")), "{daemon:?} cwd {cwd}: {v}");
        }
        let (events, result) = stream(&relay, &name, json!({"command": "echo $FOO"})).await;
        assert_eq!(events, vec![("stdout".into(), "bar baz\n".into())]);
        assert_eq!(result["streamed"], json!(daemon == Daemon::With), "{daemon:?}: {result}");
    }
}

/// For a platform that can pause: pause freezes the container, commands are refused while it
/// is paused, resume brings the daemon back; destroying removes the container, paused or not.
pub async fn pause_resume_and_destroy(p: &Platform) {
    let (mut containers, state) = (Containers::new(), StateDir::new());
    let relay = p.relay(&state, &[]);
    let mut names = Vec::new();
    for daemon in p.daemons() {
        let sbx = p.sandbox(&relay, &mut containers, "pause", daemon, json!({})).await;
        let (name, c) = name_and_container(&sbx);
        names.push(name.clone());
        let r = relay.call("POST", &format!("/api/sandboxes/{name}/pause"), Some(ADMIN), None).await;
        assert_eq!((r.status, r.json()["state"].clone()), (200, json!("paused")), "{r:?}");
        assert_eq!(inspect(&c, "{{.State.Paused}}"), "true", "the container is frozen");
        let r = relay
            .call("POST", &format!("/api/sandboxes/{name}/exec"), Some(ADMIN), Some(json!({"command": "true"})))
            .await;
        assert_eq!((r.status, r.json()["error"]["code"].clone()), (503, json!("unavailable")), "{daemon:?}: {r:?}");
        let s = relay
            .sse("POST", &format!("/api/sandboxes/{name}/exec/stream"), Some(ADMIN), Some(json!({"command": "true"})))
            .await;
        assert_eq!(s.status, 503, "{daemon:?}: a streamed exec is refused before it starts");
        // Pausing twice is harmless.
        assert_eq!(relay.call("POST", &format!("/api/sandboxes/{name}/pause"), Some(ADMIN), None).await.status, 200);

        let r = relay.call("POST", &format!("/api/sandboxes/{name}/resume"), Some(ADMIN), None).await;
        assert_eq!((r.status, r.json()["state"].clone()), (200, json!("running")), "{r:?}");
        assert_eq!(inspect(&c, "{{.State.Paused}}"), "false");
        let v = exec(&relay, &name, json!({"command": "echo awake"})).await;
        assert_eq!(v["stdout"], json!("awake\n"), "{v}");
        assert_eq!(v["streamed"], json!(false));
        if daemon == Daemon::With {
            let (_, result) = stream(&relay, &name, json!({"command": "echo awake"})).await;
            assert_eq!(result["streamed"], json!(true), "the daemon answers again after resume: {result}");
        }
    }

    // Destroying removes the container, paused or not.
    assert_eq!(relay.call("POST", &format!("/api/sandboxes/{}/pause", names[0]), Some(ADMIN), None).await.status, 200);
    for name in &names {
        assert_eq!(Containers::of_name(name).len(), 1);
        let started = Instant::now();
        let r = relay.call("DELETE", &format!("/api/sandboxes/{name}"), Some(ADMIN), None).await;
        assert_eq!(r.status, 204, "{r:?}");
        eprintln!("destroyed {name} in {:?}", started.elapsed());
        assert!(Containers::of_name(name).is_empty(), "the container of {name} is gone");
        assert_eq!(relay.call("GET", &format!("/api/sandboxes/{name}"), Some(ADMIN), None).await.status, 404);
    }
}

/// A sandbox whose container was removed behind the relay's back: a command says it is gone,
/// and destroying it still works.
pub async fn a_removed_sandbox_is_reported_and_can_be_destroyed(p: &Platform) {
    let (mut containers, state) = (Containers::new(), StateDir::new());
    let relay = p.relay(&state, &[]);
    let sbx = p.sandbox(&relay, &mut containers, "removed", Daemon::With, json!({})).await;
    let (name, c) = name_and_container(&sbx);
    // The relay knows the daemon (and its connection) from here on.
    let (_, result) = stream(&relay, &name, json!({"command": "echo first"})).await;
    assert_eq!(result["stdout"], json!("first\n"), "{result}");

    docker_ok(&["rm", "-f", &c]);
    let r =
        relay.call("POST", &format!("/api/sandboxes/{name}/exec"), Some(ADMIN), Some(json!({"command": "true"}))).await;
    assert!(r.status >= 400, "{r:?}");
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("gone"), "{}: {message}", p.name);
    assert_eq!(relay.call("DELETE", &format!("/api/sandboxes/{name}"), Some(ADMIN), None).await.status, 204);
}

/// Background processes in a sandbox without a daemon: detached (setsid) through the provider's
/// exec, output in ~/.hangar/bg/<id>.out, polled; input needs the daemon; the kill reaches the
/// group.
pub async fn background_processes_without_the_daemon_are_detached_and_polled(p: &Platform) {
    let (mut containers, state) = (Containers::new(), StateDir::new());
    let relay = p.relay(&state, &[]);
    let sbx = p.sandbox(&relay, &mut containers, "bgplain", Daemon::Without, json!({})).await;
    assert_eq!(sbx["daemon"], json!(false), "{sbx}");
    let (name, c) = name_and_container(&sbx);
    let base = format!("/api/sandboxes/{name}/processes");

    let r = relay
        .call(
            "POST",
            &base,
            Some(ADMIN),
            Some(json!({"command": "for i in 1 2 3; do echo line $i; sleep 1; done; exit 5"})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let proc = r.json();
    assert_eq!((proc["polled"].clone(), proc["state"].clone()), (json!(true), json!("running")), "{proc}");
    let id = proc["process_id"].as_str().expect("process_id").to_string();

    let mut s = relay.sse("GET", &format!("{base}/{id}/stream"), Some(ADMIN), None).await;
    assert_eq!(s.status, 200);
    let events = s.collect(Duration::from_secs(20)).await;
    let text: String = events
        .iter()
        .filter(|e| e.event == "output")
        .map(|e| e.json()["data"].as_str().expect("data").to_string())
        .collect();
    assert_eq!(text, "line 1\nline 2\nline 3\n", "{events:?}");
    let end = events.last().expect("an end");
    assert_eq!((end.event.as_str(), end.json()["exit_code"].clone()), ("end", json!(5)), "{end:?}");
    let outputs: Vec<_> = events.iter().filter(|e| e.event == "output").collect();
    assert!(outputs.len() >= 2, "the lines came as they were written, polled: {events:?}");

    // Polling with since, the file under ~/.hangar/bg, the listing.
    let v = relay.call("GET", &format!("{base}/{id}?since=7"), Some(ADMIN), None).await.json();
    assert_eq!((v["output"].clone(), v["next"].clone()), (json!("line 2\nline 3\n"), json!(21)), "{v}");
    let on_disk = docker_ok(&["exec", &c, "bash", "-c", &format!("cat ~/.hangar/bg/{id}.out")]);
    assert_eq!(on_disk.trim_end(), "line 1\nline 2\nline 3", "docker_ok trims the output");
    let list = relay.call("GET", &base, Some(ADMIN), None).await.json();
    let mine = &list["processes"][0];
    assert_eq!(
        (mine["process_id"].clone(), mine["state"].clone(), mine["exit_code"].clone()),
        (json!(id), json!("exited"), json!(5)),
        "{list}"
    );

    // Input needs the daemon; another token sees nothing; the kill reaches the whole group.
    let r = relay.call("POST", &format!("{base}/{id}/input"), Some(ADMIN), Some(json!({"input": "x"}))).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.json()["error"]["message"].as_str().unwrap_or_default().contains("needs the daemon"), "{r:?}");
    let r = relay.call("GET", &format!("/api/sandboxes/{name}/watch?path=/tmp"), Some(ADMIN), None).await;
    assert_eq!(r.status, 503, "a watch needs the daemon: {r:?}");
    assert!(r.json()["error"]["message"].as_str().unwrap_or_default().contains("needs the daemon"), "{r:?}");
    // Shared with everyone: what keeps another token out is the process's owner, not the sandbox's.
    relay.share(&name, &["*"]).await;
    let other = relay.token("o", "user").await.secret;
    assert_eq!(relay.call("GET", &format!("{base}/{id}"), Some(&other), None).await.status, 404);
    assert_eq!(relay.call("GET", &base, Some(&other), None).await.json()["processes"], json!([]));

    let r = relay
        .call(
            "POST",
            &base,
            Some(ADMIN),
            Some(json!({"command": "(exec -a hangar-bg-child sleep 1000) & exec -a hangar-bg-leader sleep 1000"})),
        )
        .await;
    let id2 = r.json()["process_id"].as_str().expect("process_id").to_string();
    wait_until(STEP, "both sleeps run in the container", || {
        !pids_named(&c, "hangar-bg-child").is_empty() && !pids_named(&c, "hangar-bg-leader").is_empty()
    })
    .await;
    assert_eq!(relay.call("DELETE", &format!("{base}/{id2}"), Some(ADMIN), None).await.status, 202);
    wait_until(Duration::from_secs(10), "no survivor in the group", || {
        pids_named(&c, "hangar-bg-child").is_empty() && pids_named(&c, "hangar-bg-leader").is_empty()
    })
    .await;
    let mut v = Value::Null;
    for _ in 0..50 {
        v = relay.call("GET", &format!("{base}/{id2}"), Some(ADMIN), None).await.json();
        if v["process"]["state"] == json!("exited") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!((v["process"]["state"].clone(), v["process"]["exit_code"].clone()), (json!("exited"), json!(-1)), "{v}");
}

/// Nobody attached: the relay still looks every 5 s, so an exit is noticed without anyone asking.
pub async fn an_unattached_process_without_the_daemon_is_still_watched(p: &Platform) {
    let (mut containers, state) = (Containers::new(), StateDir::new());
    let relay = p.relay(&state, &[]);
    let sbx = p.sandbox(&relay, &mut containers, "bgidle", Daemon::Without, json!({})).await;
    let name = sbx["name"].as_str().expect("name");
    let r = relay
        .call("POST", &format!("/api/sandboxes/{name}/processes"), Some(ADMIN), Some(json!({"command": "exit 3"})))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.json()["process_id"].as_str().expect("process_id").to_string();
    // No call to the API from here on: only the relay's own look can notice the end.
    wait_until(Duration::from_secs(15), "the relay notices the exit by itself", || {
        relay.log().lines().any(|l| l.contains("detached_ended") && l.contains(&id))
    })
    .await;
}
