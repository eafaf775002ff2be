//! The relay's `docker` provider end to end: the real relay on real containers, made from the two
//! test images (images/build-test-images): `hangar-test:envd` (hangar-envd as the entrypoint) and
//! `hangar-test:plain` (no daemon). Every case of `hangar_e2e::cases` runs here; the tests below
//! them are the docker provider's own (its option names, its never-pull rule, restarting a
//! stopped container, a relay without Docker). Without Docker these tests fail under CI=true and
//! are skipped, with a notice, otherwise (see hangar_e2e::docker).
use std::time::{Duration, Instant};

use hangar_e2e::{
    docker::{self, container_of, create_sandbox as create, docker_ok, inspect, Containers, ENVD_IMAGE, PLAIN_IMAGE},
    eventually,
    platform::Platform,
    platform_cases,
    relay::{Relay, StateDir, ADMIN},
    STEP,
};
use serde_json::{json, Value};

platform_cases!(Platform::docker;
    a_sandbox_with_the_daemon_streams_through_it,
    a_sandbox_without_the_daemon_falls_back_to_the_providers_exec,
    options_reach_commands_through_the_daemon_and_without_it,
    pause_resume_and_destroy,
    a_removed_sandbox_is_reported_and_can_be_destroyed,
    background_processes_without_the_daemon_are_detached_and_polled,
    an_unattached_process_without_the_daemon_is_still_watched,
    with_the_daemon_a_turn_is_followed_and_split_and_forgeries_change_nothing,
    without_the_daemon_a_turn_is_polled_and_cancel_still_works,
    a_destroyed_sandbox_cancels_its_turns_and_a_vanished_one_crashes_them,
    a_job_creates_its_sandbox_runs_and_verifies_there_and_a_failing_verification_fails_the_next,
);

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

/// Reads a streamed exec to its end; its result.
async fn stream(relay: &Relay, sandbox: &str, body: Value) -> Value {
    let mut s = relay.sse("POST", &format!("/api/sandboxes/{sandbox}/exec/stream"), Some(ADMIN), Some(body)).await;
    assert_eq!(s.status, 200);
    let events = s.collect(STEP).await;
    let last = events.last().expect("at least the result");
    assert_eq!(last.event, "result", "{events:?}");
    last.json()
}

/// The container's name, its labels, and the resources the docker provider's own options set.
#[tokio::test]
async fn the_container_is_named_labelled_and_limited() {
    let Some((mut containers, _state, relay)) = docker_relay("the_container_is_named_labelled_and_limited") else {
        return;
    };
    for image in [ENVD_IMAGE, PLAIN_IMAGE] {
        let name = containers.name("limits");
        let sbx = create(&relay, &name, json!({"image": image, "memory_mb": 256, "cpus": 0.5})).await;
        let id = sbx["id"].as_str().expect("id");
        let c = container_of(id);
        assert_eq!(inspect(&c, "{{.Name}}"), format!("/hangar-{id}"));
        assert_eq!(inspect(&c, "{{ index .Config.Labels \"hangar.sandbox.name\" }}"), name);
        assert_eq!(inspect(&c, "{{.HostConfig.Memory}} {{.HostConfig.NanoCpus}}"), "268435456 500000000");
    }
    // Without options, commands run as the image's user (root here) in its home.
    let name = containers.name("noopts");
    create(&relay, &name, json!({"image": PLAIN_IMAGE})).await;
    let r = relay
        .call("POST", &format!("/api/sandboxes/{name}/exec"), Some(ADMIN), Some(json!({"command": "id -un; pwd"})))
        .await;
    assert_eq!(r.json()["stdout"], json!("root\n/root\n"), "{r:?}");
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
async fn a_stopped_container_starts_again() {
    let Some((mut containers, _state, relay)) = docker_relay("a_stopped_container_starts_again") else {
        return;
    };
    let name = containers.name("restart");
    let sbx = create(&relay, &name, json!({"image": ENVD_IMAGE})).await;
    let c = container_of(sbx["id"].as_str().expect("id"));
    // The relay now knows the daemon (and its connection): stopping the container must not
    // leave it answering from what it knew.
    let result = stream(&relay, &name, json!({"command": "echo first"})).await;
    assert_eq!(result["stdout"], json!("first\n"), "{result}");
    docker_ok(&["stop", "-t", "1", &c]);
    let result = stream(&relay, &name, json!({"command": "echo back"})).await;
    assert_eq!((result["stdout"].clone(), result["streamed"].clone()), (json!("back\n"), json!(true)), "{result}");
    assert_eq!(inspect(&c, "{{.State.Running}}"), "true");
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
