//! The relay's `docker` provider end to end: the real relay on real containers, made from the two
//! test images (images/build-test-images): `hangar-test:envd` (hangar-envd as the entrypoint) and
//! `hangar-test:plain` (no daemon). Without Docker these tests fail under CI=true and are skipped,
//! with a notice, otherwise (see hangar_e2e::docker).
use std::time::{Duration, Instant};

use hangar_e2e::{
    docker::{
        self, container_of, create_sandbox as create, docker_ok, inspect, pids_named, Containers, ENVD_IMAGE,
        PLAIN_IMAGE,
    },
    eventually,
    relay::{Relay, StateDir, ADMIN},
    wait_until, STEP,
};
use serde_json::{json, Value};

/// Docker, a fresh state directory and a relay on it, or `None` when the test must skip (never
/// under CI=true: see `docker::available`). Keep all three alive for the test: dropping them
/// removes the containers, the relay and its daemons.
fn docker_relay(test: &str) -> Option<(Containers, StateDir, Relay)> {
    if !docker::available(test) {
        return None;
    }
    let containers = Containers::new();
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    Some((containers, state, relay))
}

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

#[tokio::test]
async fn a_sandbox_with_the_daemon_streams_through_it() {
    let Some((mut containers, _state, relay)) = docker_relay("a_sandbox_with_the_daemon_streams_through_it") else {
        return;
    };
    let name = containers.name("envd");
    let created = Instant::now();
    let sbx = create(&relay, &name, json!({"image": ENVD_IMAGE})).await;
    eprintln!("created a {ENVD_IMAGE} sandbox in {:?}", created.elapsed());
    assert_eq!(
        (sbx["provider"].clone(), sbx["state"].clone(), sbx["daemon"].clone()),
        (json!("docker"), json!("running"), json!(true))
    );
    let text = sbx.to_string();
    assert!(!text.contains("envd_token") && !text.contains("envd_url"), "no daemon secrets: {text}");
    let id = sbx["id"].as_str().expect("id").to_string();
    let c = container_of(&id);
    assert_eq!(inspect(&c, "{{ index .Config.Labels \"hangar.sandbox.name\" }}"), name);
    assert_eq!(inspect(&c, "{{.Name}}"), format!("/hangar-{id}"));
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

#[tokio::test]
async fn a_sandbox_without_the_daemon_falls_back_to_docker_exec() {
    let Some((mut containers, _state, relay)) = docker_relay("a_sandbox_without_the_daemon_falls_back_to_docker_exec")
    else {
        return;
    };
    let name = containers.name("plain");
    let sbx = create(&relay, &name, json!({"image": PLAIN_IMAGE})).await;
    assert_eq!(sbx["daemon"], json!(false), "{sbx}");
    let c = container_of(sbx["id"].as_str().expect("id"));

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

#[tokio::test]
async fn options_reach_commands_through_the_daemon_and_without_it() {
    let Some((mut containers, _state, relay)) =
        docker_relay("options_reach_commands_through_the_daemon_and_without_it")
    else {
        return;
    };
    for image in [ENVD_IMAGE, PLAIN_IMAGE] {
        let name = containers.name("opts");
        let options = json!({"image": image, "env": {"FOO": "bar baz", "EMPTY": ""}, "user": "user",
            "workdir": "/tmp/w", "memory_mb": 256, "cpus": 0.5});
        let sbx = create(&relay, &name, options.clone()).await;
        assert_eq!((sbx["options"].clone(), sbx["workdir"].clone()), (options, json!("/tmp/w")), "{sbx}");
        let c = container_of(sbx["id"].as_str().expect("id"));
        assert_eq!(inspect(&c, "{{.HostConfig.Memory}} {{.HostConfig.NanoCpus}}"), "268435456 500000000");

        let v = exec(&relay, &name, json!({"command": "id -un; pwd; echo \"$FOO|${EMPTY-unset}|$HOME\""})).await;
        assert_eq!(v["stdout"], json!("user\n/tmp/w\nbar baz||/home/user\n"), "{image}: {v}");
        // The workdir, made by hangar, is the user's; the daemon's token is not the commands'.
        let v = exec(&relay, &name, json!({"command": "stat -c %U /tmp/w; echo \"${HANGAR_ENVD_ACCESS_TOKEN-none}\""}))
            .await;
        assert_eq!(v["stdout"], json!("user\nnone\n"), "{image}: {v}");
        // cwd: absolute, `~`, and relative to the workdir, as the daemon resolves them.
        exec(&relay, &name, json!({"command": "mkdir -p sub"})).await;
        for (cwd, want) in [("/", "/"), ("~", "/home/user"), ("sub", "/tmp/w/sub")] {
            let v = exec(&relay, &name, json!({"command": "pwd", "cwd": cwd})).await;
            assert_eq!(v["stdout"], json!(format!("{want}\n")), "{image} cwd {cwd}: {v}");
        }
        let (events, result) = stream(&relay, &name, json!({"command": "echo $FOO"})).await;
        assert_eq!(events, vec![("stdout".into(), "bar baz\n".into())]);
        assert_eq!(result["streamed"], json!(image == ENVD_IMAGE), "{image}: {result}");
    }
    // Without options, commands run as the image's user (root here) in its home.
    let name = containers.name("noopts");
    create(&relay, &name, json!({"image": PLAIN_IMAGE})).await;
    let v = exec(&relay, &name, json!({"command": "id -un; pwd"})).await;
    assert_eq!(v["stdout"], json!("root\n/root\n"), "{v}");
}

#[tokio::test]
async fn pause_resume_and_destroy() {
    let Some((mut containers, _state, relay)) = docker_relay("pause_resume_and_destroy") else { return };
    for image in [ENVD_IMAGE, PLAIN_IMAGE] {
        let name = containers.name("pause");
        let sbx = create(&relay, &name, json!({"image": image})).await;
        let c = container_of(sbx["id"].as_str().expect("id"));
        let r = relay.call("POST", &format!("/api/sandboxes/{name}/pause"), Some(ADMIN), None).await;
        assert_eq!((r.status, r.json()["state"].clone()), (200, json!("paused")), "{r:?}");
        assert_eq!(inspect(&c, "{{.State.Paused}}"), "true", "the Engine froze the container");
        let r = relay
            .call("POST", &format!("/api/sandboxes/{name}/exec"), Some(ADMIN), Some(json!({"command": "true"})))
            .await;
        assert_eq!((r.status, r.json()["error"]["code"].clone()), (503, json!("unavailable")), "{image}: {r:?}");
        let s = relay
            .sse("POST", &format!("/api/sandboxes/{name}/exec/stream"), Some(ADMIN), Some(json!({"command": "true"})))
            .await;
        assert_eq!(s.status, 503, "{image}: a streamed exec is refused before it starts");
        // Pausing twice is harmless.
        assert_eq!(relay.call("POST", &format!("/api/sandboxes/{name}/pause"), Some(ADMIN), None).await.status, 200);

        let r = relay.call("POST", &format!("/api/sandboxes/{name}/resume"), Some(ADMIN), None).await;
        assert_eq!((r.status, r.json()["state"].clone()), (200, json!("running")), "{r:?}");
        assert_eq!(inspect(&c, "{{.State.Paused}}"), "false");
        let v = exec(&relay, &name, json!({"command": "echo awake"})).await;
        assert_eq!(v["stdout"], json!("awake\n"), "{v}");
        assert_eq!(v["streamed"], json!(false));
        if image == ENVD_IMAGE {
            let (_, result) = stream(&relay, &name, json!({"command": "echo awake"})).await;
            assert_eq!(result["streamed"], json!(true), "the daemon answers again after resume: {result}");
        }
    }

    // Destroying removes the container, paused or not.
    let names: Vec<String> = relay.call("GET", "/api/sandboxes", Some(ADMIN), None).await.json()["sandboxes"]
        .as_array()
        .expect("sandboxes")
        .iter()
        .filter(|s| s["provider"] == json!("docker"))
        .map(|s| s["name"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(names.len(), 2);
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

#[tokio::test]
async fn missing_images_and_bad_options_are_the_clients_errors() {
    let Some((mut containers, _state, relay)) = docker_relay("missing_images_and_bad_options_are_the_clients_errors")
    else {
        return;
    };
    let name = containers.name("missing");
    let r = relay
        .call(
            "POST",
            "/api/sandboxes",
            Some(ADMIN),
            Some(json!({"name": name, "provider": "docker", "options": {"image": "hangar-test:no-such-tag"}})),
        )
        .await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (400, json!("invalid_argument")), "{r:?}");
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("hangar-test:no-such-tag") && message.contains("never pulls"), "{message}");
    assert!(Containers::of_name(&name).is_empty(), "no container made");
    assert_eq!(relay.call("GET", &format!("/api/sandboxes/{name}"), Some(ADMIN), None).await.status, 404);

    // A user the image does not know, with the daemon or without.
    for image in [ENVD_IMAGE, PLAIN_IMAGE] {
        let name = containers.name("ghost");
        let r = relay
            .call(
                "POST",
                "/api/sandboxes",
                Some(ADMIN),
                Some(json!({"name": name, "provider": "docker", "options": {"image": image, "user": "ghost"}})),
            )
            .await;
        let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
        assert_eq!((r.status, message.contains("ghost")), (400, true), "{image}: {r:?}");
        assert!(Containers::of_name(&name).is_empty(), "{image}: no container left");
    }

    for options in [
        json!({}),
        json!({"image": ""}),
        json!({"image": 7}),
        json!({"image": "Bad:Reference"}),
        json!({"image": ENVD_IMAGE, "privileged": true}),
        json!({"image": ENVD_IMAGE, "env": ["A=1"]}),
        json!({"image": ENVD_IMAGE, "env": {"HANGAR_ENVD_ACCESS_TOKEN": "chosen"}}),
        json!({"image": ENVD_IMAGE, "workdir": "relative"}),
        json!({"image": ENVD_IMAGE, "user": "x y"}),
        json!({"image": ENVD_IMAGE, "memory_mb": 0}),
        json!({"image": ENVD_IMAGE, "cpus": -1}),
    ] {
        let name = containers.name("bad");
        let r = relay
            .call(
                "POST",
                "/api/sandboxes",
                Some(ADMIN),
                Some(json!({"name": name, "provider": "docker", "options": options})),
            )
            .await;
        assert_eq!((r.status, r.json()["error"]["code"].clone()), (400, json!("invalid_argument")), "{options}: {r:?}");
        assert!(Containers::of_name(&name).is_empty(), "{options}: no container made");
    }
}

#[tokio::test]
async fn an_image_whose_daemon_never_answers_is_refused_with_its_log() {
    if !docker::available("an_image_whose_daemon_never_answers_is_refused_with_its_log") {
        return;
    }
    // Labelled as running the daemon, but its entrypoint fails. Made with `docker commit`, which
    // needs no builder.
    let tag = format!("hangar-test:broken-{}", std::process::id());
    let base = docker_ok(&["create", PLAIN_IMAGE]);
    let committed = docker::docker(&[
        "commit",
        "--change",
        "LABEL hangar.envd=true",
        "--change",
        r#"ENTRYPOINT ["/bin/bash", "-c", "echo envd-broke-here >&2; exit 3"]"#,
        &base,
        &tag,
    ]);
    docker_ok(&["rm", &base]);
    assert!(committed.status.success(), "docker commit: {}", String::from_utf8_lossy(&committed.stderr));
    struct RemoveImage(String);
    impl Drop for RemoveImage {
        fn drop(&mut self) {
            let _ = docker::docker(&["rmi", "-f", &self.0]);
        }
    }
    let _image = RemoveImage(tag.clone());

    let mut containers = Containers::new();
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let name = containers.name("broken");
    let started = Instant::now();
    let r = relay
        .call(
            "POST",
            "/api/sandboxes",
            Some(ADMIN),
            Some(json!({"name": name, "provider": "docker", "options": {"image": tag}})),
        )
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "an exited container is not waited for: {:?}",
        started.elapsed()
    );
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (502, json!("sandbox_error")), "{r:?}");
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("exited with code 3") && message.contains("envd-broke-here"), "{message}");
    assert!(Containers::of_name(&name).is_empty(), "the failed container is removed");
    assert_eq!(relay.call("GET", &format!("/api/sandboxes/{name}"), Some(ADMIN), None).await.status, 404);
}

#[tokio::test]
async fn a_stopped_container_starts_again_and_a_removed_one_is_reported() {
    let Some((mut containers, _state, relay)) =
        docker_relay("a_stopped_container_starts_again_and_a_removed_one_is_reported")
    else {
        return;
    };
    let name = containers.name("restart");
    let sbx = create(&relay, &name, json!({"image": ENVD_IMAGE})).await;
    let c = container_of(sbx["id"].as_str().expect("id"));
    // The relay now knows the daemon (and its connection): stopping the container must not
    // leave it answering from what it knew.
    let (_, result) = stream(&relay, &name, json!({"command": "echo first"})).await;
    assert_eq!(result["stdout"], json!("first\n"), "{result}");
    docker_ok(&["stop", "-t", "1", &c]);
    let (_, result) = stream(&relay, &name, json!({"command": "echo back"})).await;
    assert_eq!((result["stdout"].clone(), result["streamed"].clone()), (json!("back\n"), json!(true)), "{result}");
    assert_eq!(inspect(&c, "{{.State.Running}}"), "true");

    docker_ok(&["rm", "-f", &c]);
    let r =
        relay.call("POST", &format!("/api/sandboxes/{name}/exec"), Some(ADMIN), Some(json!({"command": "true"}))).await;
    assert_eq!(r.status, 502, "{r:?}");
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("gone"), "{message}");
    // Destroying a sandbox whose container is already gone still works.
    assert_eq!(relay.call("DELETE", &format!("/api/sandboxes/{name}"), Some(ADMIN), None).await.status, 204);
}

/// Needs no Docker: a relay that cannot reach it starts, serves local sandboxes, and answers a
/// docker sandbox with a clear error.
#[tokio::test]
async fn a_relay_without_docker_starts_and_says_why_docker_sandboxes_fail() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[("DOCKER_HOST", "unix:///nonexistent/docker.sock")]);
    let v =
        relay.call("POST", "/api/sandboxes/default/exec", Some(ADMIN), Some(json!({"command": "echo local"}))).await;
    assert_eq!(v.json()["stdout"], json!("local\n"), "{v:?}");
    let r = relay
        .call(
            "POST",
            "/api/sandboxes",
            Some(ADMIN),
            Some(json!({"name": "d", "provider": "docker", "options": {"image": ENVD_IMAGE}})),
        )
        .await;
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (502, json!("sandbox_error")), "{r:?}");
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("Docker is not reachable") && message.contains("/nonexistent/docker.sock"), "{message}");
    let log = eventually(STEP, "the relay logs that Docker is missing", || {
        Some(relay.log()).filter(|l| l.contains("docker_unavailable"))
    })
    .await;
    assert!(log.contains("/nonexistent/docker.sock"), "{log}");
    // Bad options are still the client's error, Docker or not.
    let r = relay
        .call("POST", "/api/sandboxes", Some(ADMIN), Some(json!({"name": "d", "provider": "docker", "options": {}})))
        .await;
    assert_eq!(r.status, 400, "{r:?}");
}

/// Background processes in a sandbox without a daemon: detached (setsid) through docker exec,
/// output in ~/.hangar/bg/<id>.out, polled; input needs the daemon; the kill reaches the group.
#[tokio::test]
async fn background_processes_without_the_daemon_are_detached_and_polled() {
    let Some((mut containers, _state, relay)) =
        docker_relay("background_processes_without_the_daemon_are_detached_and_polled")
    else {
        return;
    };
    let name = containers.name("bgplain");
    let sbx = create(&relay, &name, json!({"image": PLAIN_IMAGE})).await;
    assert_eq!(sbx["daemon"], json!(false), "{sbx}");
    let c = container_of(sbx["id"].as_str().expect("id"));
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
    let p = r.json();
    assert_eq!((p["polled"].clone(), p["state"].clone()), (json!(true), json!("running")), "{p}");
    let id = p["process_id"].as_str().unwrap().to_string();

    let mut s = relay.sse("GET", &format!("{base}/{id}/stream"), Some(ADMIN), None).await;
    assert_eq!(s.status, 200);
    let events = s.collect(Duration::from_secs(20)).await;
    let text: String =
        events.iter().filter(|e| e.event == "output").map(|e| e.json()["data"].as_str().unwrap().to_string()).collect();
    assert_eq!(text, "line 1\nline 2\nline 3\n", "{events:?}");
    let end = events.last().unwrap();
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
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("needs the daemon"));
    let r = relay.call("GET", &format!("/api/sandboxes/{name}/watch?path=/tmp"), Some(ADMIN), None).await;
    assert_eq!(r.status, 503, "a watch needs the daemon: {r:?}");
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("needs the daemon"));
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
    let id2 = r.json()["process_id"].as_str().unwrap().to_string();
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
#[tokio::test]
async fn an_unattached_process_without_the_daemon_is_still_watched() {
    let Some((mut containers, _state, relay)) =
        docker_relay("an_unattached_process_without_the_daemon_is_still_watched")
    else {
        return;
    };
    let name = containers.name("bgidle");
    create(&relay, &name, json!({"image": PLAIN_IMAGE})).await;
    let r = relay
        .call("POST", &format!("/api/sandboxes/{name}/processes"), Some(ADMIN), Some(json!({"command": "exit 3"})))
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.json()["process_id"].as_str().unwrap().to_string();
    // No call to the API from here on: only the relay's own look can notice the end.
    wait_until(Duration::from_secs(15), "the relay notices the exit by itself", || {
        relay.log().lines().any(|l| l.contains("detached_ended") && l.contains(&id))
    })
    .await;
}
