//! The relay's `kubernetes` provider end to end: the real relay against the Kubernetes API
//! server double (hangar_e2e::kube), whose pods run as real containers of the two test images,
//! in both reach modes (the pod's IP, and the API server's port-forward). The double records
//! every request it does not expect; each test asserts there were none. Without Docker these
//! tests fail under CI=true and are skipped, with a notice, otherwise (hangar_e2e::docker).
//!
//! `against_a_real_cluster` runs only with `--ignored` and `HANGAR_TEST_KUBECONFIG` set.
//!
//! The shared cases (`hangar_e2e::cases`) run on the double in both reach modes (modules
//! `pod_ip` and `port_forward`), all but two: `pause_resume_and_destroy` (Kubernetes cannot
//! pause a pod: `a_pod_with_the_daemon_...` checks the refusal) and
//! `options_reach_commands_through_the_daemon_and_without_it` (its sandbox without a daemon has a
//! `user`, which Kubernetes' exec cannot switch to: the provider refuses that as a bad option).
use std::time::Duration;

use hangar_e2e::{
    docker::{self, docker_ok, pids_named, Containers, ENVD_IMAGE, PLAIN_IMAGE},
    kube::ApiServer,
    relay::{Relay, StateDir, ADMIN},
    sessions::{get, harness_file, profile, start, until_ended},
    wait_until, STEP,
};
use serde_json::{json, Value};

const NS: &str = "sandboxes";

macro_rules! kubernetes_cases {
    ($platform:expr) => {
        hangar_e2e::platform_cases!($platform;
            a_sandbox_with_the_daemon_streams_through_it,
            a_sandbox_without_the_daemon_falls_back_to_the_providers_exec,
            a_removed_sandbox_is_reported_and_can_be_destroyed,
            background_processes_without_the_daemon_are_detached_and_polled,
            an_unattached_process_without_the_daemon_is_still_watched,
            with_the_daemon_a_turn_is_followed_and_split_and_forgeries_change_nothing,
            without_the_daemon_a_turn_is_polled_and_cancel_still_works,
            a_destroyed_sandbox_cancels_its_turns_and_a_vanished_one_crashes_them,
            a_job_creates_its_sandbox_runs_and_verifies_there_and_a_failing_verification_fails_the_next,
        );
    };
}

mod pod_ip {
    fn platform(test: &str) -> Option<hangar_e2e::platform::Platform> {
        hangar_e2e::platform::Platform::kubernetes(test, "pod-ip")
    }
    kubernetes_cases!(platform);
}

mod port_forward {
    fn platform(test: &str) -> Option<hangar_e2e::platform::Platform> {
        hangar_e2e::platform::Platform::kubernetes(test, "port-forward")
    }
    kubernetes_cases!(platform);
}
const REACHES: [&str; 2] = ["pod-ip", "port-forward"];

/// A relay using the double in `reach` mode, with `env` added.
fn relay_on(api: &ApiServer, state: &StateDir, reach: &str, env: &[(&str, &str)]) -> Relay {
    let kubeconfig = api.kubeconfig(&state.0.with_extension("kube"), NS);
    let mut all = vec![
        ("HANGAR_KUBERNETES_KUBECONFIG", kubeconfig.to_str().expect("path").to_string()),
        ("HANGAR_KUBERNETES_REACH", reach.to_string()),
        ("HANGAR_KUBERNETES_START_SECONDS", "20".to_string()),
    ];
    all.extend(env.iter().map(|(k, v)| (*k, v.to_string())));
    let all: Vec<(&str, &str)> = all.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Relay::start(&state.0, &all)
}

async fn create(relay: &Relay, name: &str, options: Value) -> (u16, Value) {
    let body = json!({"name": name, "provider": "kubernetes", "options": options});
    let r = relay.call("POST", "/api/sandboxes", Some(ADMIN), Some(body)).await;
    (r.status, r.json())
}

async fn exec(relay: &Relay, sandbox: &str, body: Value) -> Value {
    let r = relay.call("POST", &format!("/api/sandboxes/{sandbox}/exec"), Some(ADMIN), Some(body.clone())).await;
    assert_eq!(r.status, 200, "{body}: {r:?}");
    r.json()
}

fn pod_of(id: &str) -> String {
    format!("hangar-{}", id.replace('_', "-"))
}

fn container_of_pod(api: &ApiServer, pod: &str) -> String {
    let p = api.pod(NS, pod).unwrap_or_else(|| panic!("no pod {pod}"));
    hangar_e2e::kube::container_name(&p)
}

fn no_surprises(api: &ApiServer) {
    assert_eq!(api.unexpected(), Vec::<String>::new(), "requests the API server double did not expect");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_with_the_daemon_is_made_from_its_options_and_streams_through_it() {
    if !docker::available("a_pod_with_the_daemon_is_made_from_its_options_and_streams_through_it") {
        return;
    }
    for reach in REACHES {
        let mut containers = Containers::new();
        let api = ApiServer::start().await;
        let state = StateDir::new();
        let relay = relay_on(&api, &state, reach, &[]);
        let name = containers.name("envd");
        let options = json!({
            "image": ENVD_IMAGE, "env": {"GREETING": "hello there"}, "user": "user", "workdir": "/work/space",
            "cpu_request": "100m", "cpu_limit": "1", "memory_request": "64Mi", "memory_limit": "256Mi",
            "node_selector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "sandbox", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}],
            "runtime_class": "gvisor", "service_account": "agent", "image_pull_secrets": ["regcred"]
        });
        let (status, sbx) = create(&relay, &name, options).await;
        assert_eq!(status, 201, "{reach}: {sbx}\n{}", relay.log());
        assert_eq!(sbx["daemon"], json!(true), "{sbx}");
        let id = sbx["id"].as_str().expect("id");

        // The pod spec the API server received.
        let created = api.created();
        assert_eq!(created.len(), 1);
        let pod = &created[0];
        assert_eq!(pod["metadata"]["name"], json!(pod_of(id)));
        assert_eq!(pod["metadata"]["labels"]["hangar.sandbox"], json!(id));
        assert_eq!(pod["metadata"]["labels"]["hangar.sandbox.name"], json!(name));
        let spec = &pod["spec"];
        assert_eq!(spec["restartPolicy"], json!("Never"));
        assert_eq!(spec["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
        assert_eq!(
            spec["tolerations"],
            json!([{"key": "sandbox", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}])
        );
        assert_eq!(spec["runtimeClassName"], json!("gvisor"));
        assert_eq!(spec["serviceAccountName"], json!("agent"));
        assert_eq!(spec["imagePullSecrets"], json!([{"name": "regcred"}]));
        let c = &spec["containers"][0];
        assert_eq!(c["image"], json!(ENVD_IMAGE));
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], json!(false));
        assert_eq!(
            c["resources"],
            json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}})
        );
        assert_eq!(c["readinessProbe"]["httpGet"]["port"], json!(49983));
        let env: Vec<String> =
            c["env"].as_array().expect("env").iter().map(|e| e["name"].as_str().unwrap_or("").to_string()).collect();
        assert!(
            env.contains(&"HANGAR_ENVD_ACCESS_TOKEN".to_string()) && env.contains(&"GREETING".to_string()),
            "{env:?}"
        );
        assert_eq!(c["args"], json!(["--env", "GREETING=hello there"]));

        // Through the daemon: the env, the user and the workdir it made.
        let v = exec(
            &relay,
            &name,
            json!({"command": "echo \"$GREETING\"; id -un; pwd; echo \"${HANGAR_ENVD_ACCESS_TOKEN:-none}\""}),
        )
        .await;
        assert_eq!(v["stdout"], json!("hello there\nuser\n/work/space\nnone\n"), "{reach}: {v}");
        let mut s = relay
            .sse(
                "POST",
                &format!("/api/sandboxes/{name}/exec/stream"),
                Some(ADMIN),
                Some(json!({"command": "echo a; sleep 0.2; echo b"})),
            )
            .await;
        let events: Vec<String> = s.collect(STEP).await.iter().map(|e| e.event.clone()).collect();
        assert_eq!(events, vec!["stdout", "stdout", "result"], "{reach}: streamed line by line");

        // Pause is refused, clearly; destroy deletes the pod and its container.
        let r = relay.call("POST", &format!("/api/sandboxes/{name}/pause"), Some(ADMIN), None).await;
        assert_eq!(r.status, 400, "{r:?}");
        assert!(
            r.json()["error"]["message"].as_str().unwrap_or("").contains("Kubernetes cannot freeze a pod"),
            "{r:?}"
        );
        let container = container_of_pod(&api, &pod_of(id));
        let r = relay.call("DELETE", &format!("/api/sandboxes/{name}"), Some(ADMIN), None).await;
        assert_eq!(r.status, 204, "{r:?}");
        wait_until(STEP, "the pod is deleted", || api.pod(NS, &pod_of(id)).is_none()).await;
        wait_until(STEP, "its container is removed", || {
            docker::docker(&["inspect", &container]).status.code() != Some(0)
        })
        .await;
        no_surprises(&api);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_without_the_daemon_execs_through_the_exec_subresource_and_kills_on_timeout() {
    if !docker::available("a_pod_without_the_daemon_execs_through_the_exec_subresource_and_kills_on_timeout") {
        return;
    }
    for reach in REACHES {
        let mut containers = Containers::new();
        let api = ApiServer::start().await;
        let state = StateDir::new();
        let relay = relay_on(&api, &state, reach, &[]);
        let name = containers.name("plain");
        let (status, sbx) =
            create(&relay, &name, json!({"image": PLAIN_IMAGE, "daemon": false, "workdir": "/srv/w"})).await;
        assert_eq!(status, 201, "{sbx}");
        assert_eq!(sbx["daemon"], json!(false), "{sbx}");
        let container = container_of_pod(&api, &pod_of(sbx["id"].as_str().expect("id")));

        for (command, code) in [("true", 0), ("echo out; echo err >&2; exit 7", 7)] {
            let v = exec(&relay, &name, json!({ "command": command })).await;
            assert_eq!((v["exit_code"].clone(), v["streamed"].clone()), (json!(code), json!(false)), "{command}: {v}");
            if code == 7 {
                assert_eq!((v["stdout"].clone(), v["stderr"].clone()), (json!("out\n"), json!("err\n")));
            }
        }
        let v = exec(&relay, &name, json!({"command": "pwd; echo \"${HANGAR_ENVD_ACCESS_TOKEN:-none}\""})).await;
        assert_eq!(v["stdout"], json!("/srv/w\nnone\n"), "{v}");
        let r = relay
            .call(
                "POST",
                &format!("/api/sandboxes/{name}/exec"),
                Some(ADMIN),
                Some(json!({"command": "true", "cwd": "/nope"})),
            )
            .await;
        assert_eq!(r.status, 400, "{r:?}");

        // A timeout kills the command and what it started, inside the pod's container.
        let marker = format!("hangar-k8s-timeout-{}", std::process::id());
        let v = exec(
            &relay,
            &name,
            json!({"command": format!("echo before; (exec -a {marker} sleep 300) & exec -a {marker} sleep 300"), "timeout": 1}),
        )
        .await;
        assert_eq!((v["exit_code"].clone(), v["stdout"].clone()), (json!(-1), json!("before\n")), "{v}");
        wait_until(STEP, "the timed-out command is gone", || pids_named(&container, &marker).is_empty()).await;
        no_surprises(&api);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_that_does_not_start_is_deleted_and_explained() {
    if !docker::available("a_pod_that_does_not_start_is_deleted_and_explained") {
        return;
    }
    let mut containers = Containers::new();
    let api = ApiServer::start().await;
    let state = StateDir::new();
    let relay = relay_on(&api, &state, "pod-ip", &[]);

    // The daemon exits at once (an unknown user): the pod fails; its events and log say why.
    let name = containers.name("baduser");
    let (status, v) = create(&relay, &name, json!({"image": ENVD_IMAGE, "user": "nosuchuser"})).await;
    assert_eq!(status, 502, "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("did not become ready") && msg.contains("its events:") && msg.contains("Started"), "{msg}");
    assert!(msg.contains("its log ends:") && msg.contains("nosuchuser"), "{msg}");
    wait_until(STEP, "the failed pod is deleted", || api.pods().is_empty()).await;
    assert_eq!(relay.call("GET", &format!("/api/sandboxes/{name}"), Some(ADMIN), None).await.status, 404);

    // An image the node cannot pull fails without waiting out the start time.
    let name = containers.name("noimage");
    let (status, v) = create(&relay, &name, json!({"image": "hangar-test:no-such-image"})).await;
    assert_eq!(status, 502, "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("ErrImagePull") && msg.contains("Failed to pull image"), "{msg}");

    // Bad options are the client's error, before anything is made.
    let before = api.created().len();
    for options in [json!({"image": ENVD_IMAGE, "gpu": 1}), json!({"image": ENVD_IMAGE, "memory_limit": "lots"})] {
        let (status, v) = create(&relay, &containers.name("bad"), options).await;
        assert_eq!(status, 400, "{v}");
    }
    assert_eq!(api.created().len(), before);
    no_surprises(&api);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vanished_pod_makes_its_sandbox_gone_and_crashes_its_turns() {
    if !docker::available("a_vanished_pod_makes_its_sandbox_gone_and_crashes_its_turns") {
        return;
    }
    for reach in REACHES {
        let mut containers = Containers::new();
        let api = ApiServer::start().await;
        let state = StateDir::new();
        let init = r#"{"type":"system","subtype":"init","session_id":"s","model":"m","cwd":"/"}"#;
        let argv: Vec<String> = ["bash", "-c", &format!("cat >/dev/null; echo '{init}'; exec sleep 60")]
            .iter()
            .map(|s| s.replace('{', "{{").replace('}', "}}"))
            .collect();
        let file = harness_file(&state.0, &[profile("sleeper", &argv, None, "claude-stream-json", "none")]);
        let relay = relay_on(&api, &state, reach, &[("HANGAR_HARNESSES", file.to_str().expect("path"))]);

        for how in ["docker-rm", "api-delete"] {
            let name = containers.name(how);
            let (status, sbx) = create(&relay, &name, json!({"image": ENVD_IMAGE, "user": "user"})).await;
            assert_eq!(status, 201, "{sbx}");
            let pod = pod_of(sbx["id"].as_str().expect("id"));
            let session = format!("s-{how}");
            start(
                &relay,
                ADMIN,
                json!({"name": session, "sandbox": name, "harness": "sleeper", "prompt": "go", "cwd": "/tmp"}),
            )
            .await;
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while get(&relay, ADMIN, &session).await["state"] != json!("running") {
                assert!(std::time::Instant::now() < deadline, "{reach} {how}: the turn never ran");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if how == "docker-rm" {
                docker_ok(&["rm", "-f", &container_of_pod(&api, &pod)]);
            } else {
                assert!(api.delete_pod(NS, &pod).await);
            }
            let s = until_ended(&relay, ADMIN, &session, Duration::from_secs(30)).await;
            assert_eq!(
                (s["state"].clone(), s["reason"].clone()),
                (json!("crashed"), json!("sandbox_gone")),
                "{reach} {how}: {s}"
            );
            let v = relay.call("GET", &format!("/api/sandboxes/{name}"), Some(ADMIN), None).await.json();
            assert_eq!(v["state"], json!("gone"), "{v}");
            let r = relay
                .call("POST", &format!("/api/sandboxes/{name}/exec"), Some(ADMIN), Some(json!({"command": "true"})))
                .await;
            assert_eq!(r.status, 502, "{r:?}");
            assert!(r.json()["error"]["message"].as_str().unwrap_or("").contains("is gone"), "{r:?}");
            assert_eq!(relay.call("DELETE", &format!("/api/sandboxes/{name}"), Some(ADMIN), None).await.status, 204);
        }
        // The vanishings were found by one watch on the namespace, with bookmarks asked for.
        let watches: Vec<_> = api.seen().into_iter().filter(|s| s.param("watch") == Some("true")).collect();
        assert!(!watches.is_empty());
        for w in &watches {
            assert_eq!(
                (w.param("labelSelector"), w.param("allowWatchBookmarks")),
                (Some("hangar.sandbox"), Some("true")),
                "{w:?}"
            );
        }
        no_surprises(&api);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_relay_without_a_cluster_starts_and_says_why_kubernetes_sandboxes_fail() {
    let state = StateDir::new();
    let missing = state.0.with_extension("no-kubeconfig");
    let relay = Relay::start(&state.0, &[("HANGAR_KUBERNETES_KUBECONFIG", missing.to_str().expect("path"))]);
    let v = exec(&relay, "default", json!({"command": "echo local"})).await;
    assert_eq!(v["stdout"], json!("local\n"));
    let (status, v) = create(&relay, "k", json!({"image": ENVD_IMAGE})).await;
    assert_eq!(status, 502, "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("no cluster is configured or reachable") && msg.contains("HANGAR_KUBERNETES_KUBECONFIG"),
        "{msg}"
    );
    assert!(relay.log().contains("kubernetes_unavailable"), "{}", relay.log());
}

/// Against a real cluster: `HANGAR_TEST_KUBECONFIG` names its kubeconfig, and
/// `HANGAR_TEST_KUBERNETES_IMAGE` an image with hangar-envd that its nodes can pull (default
/// `hangar-envd:latest`). Never run here (no cluster on these machines): docs/kubernetes.md.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a real cluster: set HANGAR_TEST_KUBECONFIG and run with --ignored"]
async fn against_a_real_cluster() {
    let Ok(kubeconfig) = std::env::var("HANGAR_TEST_KUBECONFIG") else {
        panic!("HANGAR_TEST_KUBECONFIG is not set");
    };
    let image = std::env::var("HANGAR_TEST_KUBERNETES_IMAGE").unwrap_or_else(|_| "hangar-envd:latest".into());
    let namespace = std::env::var("HANGAR_TEST_KUBERNETES_NAMESPACE").unwrap_or_else(|_| "default".into());
    let state = StateDir::new();
    let relay = Relay::start(
        &state.0,
        &[("HANGAR_KUBERNETES_KUBECONFIG", kubeconfig.as_str()), ("HANGAR_KUBERNETES_NAMESPACE", namespace.as_str())],
    );
    let name = format!("real-{}", std::process::id());
    let (status, sbx) = create(&relay, &name, json!({"image": image})).await;
    assert_eq!(status, 201, "{sbx}");
    let v = exec(&relay, &name, json!({"command": "echo real"})).await;
    assert_eq!(v["stdout"], json!("real\n"), "{v}");
    let r = relay.call("POST", &format!("/api/sandboxes/{name}/pause"), Some(ADMIN), None).await;
    assert_eq!(r.status, 400);
    assert_eq!(relay.call("DELETE", &format!("/api/sandboxes/{name}"), Some(ADMIN), None).await.status, 204);
}

/// Every manifest of deploy/kubernetes/ parses into its `k8s-openapi` type, with no field the
/// type does not know (an unknown kind, a misspelt field or a wrong type fails).
#[test]
fn the_deploy_manifests_are_kubernetes_objects() {
    use k8s_openapi::{
        api::{
            apps::v1::Deployment,
            core::v1::{Namespace, PersistentVolumeClaim, Service, ServiceAccount},
            networking::v1::NetworkPolicy,
            rbac::v1::{Role, RoleBinding},
        },
        serde::de::DeserializeOwned,
    };
    fn typed<T: DeserializeOwned + k8s_openapi::serde::Serialize>(doc: &Value) -> Result<Value, String> {
        let t: T = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
        serde_json::to_value(&t).map_err(|e| e.to_string())
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes");
    let mut kinds = Vec::new();
    let mut files: Vec<_> =
        std::fs::read_dir(&dir).expect("deploy/kubernetes").map(|e| e.expect("entry").path()).collect();
    files.sort();
    for path in files.iter().filter(|p| p.extension().is_some_and(|e| e == "yaml")) {
        let text = std::fs::read_to_string(path).expect("manifest");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            let back = match kind.as_str() {
                "Namespace" => typed::<Namespace>(&doc),
                "ServiceAccount" => typed::<ServiceAccount>(&doc),
                "Role" => typed::<Role>(&doc),
                "RoleBinding" => typed::<RoleBinding>(&doc),
                "PersistentVolumeClaim" => typed::<PersistentVolumeClaim>(&doc),
                "Deployment" => typed::<Deployment>(&doc),
                "Service" => typed::<Service>(&doc),
                "NetworkPolicy" => typed::<NetworkPolicy>(&doc),
                other => Err(format!("unknown kind {other:?}")),
            }
            .unwrap_or_else(|e| panic!("{}: {kind}: {e}", path.display()));
            let mut unknown = Vec::new();
            hangar_e2e::kube::unknown_fields(&doc, &back, "", &mut unknown);
            assert_eq!(unknown, Vec::<String>::new(), "{}: {kind}: fields its type does not have", path.display());
            kinds.push(kind);
        }
    }
    kinds.sort();
    kinds.dedup();
    assert_eq!(
        kinds,
        [
            "Deployment",
            "Namespace",
            "NetworkPolicy",
            "PersistentVolumeClaim",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount"
        ]
    );
    // The Role is the narrowest the provider needs, and nothing more.
    let rbac = std::fs::read_to_string(dir.join("rbac.yaml")).expect("rbac");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&rbac).expect("rbac yaml");
    let rules: Vec<(String, String)> = docs[0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .flat_map(|r| {
            let verbs: Vec<String> =
                r["verbs"].as_array().expect("verbs").iter().map(|v| v.as_str().unwrap_or("").to_string()).collect();
            r["resources"]
                .as_array()
                .expect("resources")
                .iter()
                .map(move |res| (res.as_str().unwrap_or("").to_string(), verbs.join(",")))
        })
        .collect();
    assert_eq!(
        rules,
        [
            ("pods".into(), "get,list,watch,create,delete".into()),
            ("pods/exec".into(), "create,get".into()),
            ("pods/portforward".into(), "create,get".into()),
            ("pods/log".into(), "get".into()),
            ("events".into(), "list".into())
        ]
    );
}

/// `kubectl` (a second, independent client) reads what the double serves: `get pods -o wide`,
/// `get pod -o yaml` and `describe pod` name the pod, its labels, image and IP.
#[tokio::test(flavor = "multi_thread")]
async fn kubectl_reads_the_doubles_pods() {
    if !docker::available("kubectl_reads_the_doubles_pods") {
        return;
    }
    let kubectl = ["/usr/bin/kubectl", "/usr/local/bin/kubectl"].into_iter().find(|p| std::path::Path::new(p).exists());
    let Some(kubectl) = kubectl else {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "kubectl is required when CI=true (.ci/run installs it)");
        eprintln!("SKIPPED kubectl_reads_the_doubles_pods: no kubectl");
        return;
    };
    let mut containers = Containers::new();
    let api = ApiServer::start().await;
    let state = StateDir::new();
    let relay = relay_on(&api, &state, "pod-ip", &[]);
    let name = containers.name("kubectl");
    let (status, sbx) = create(&relay, &name, json!({"image": ENVD_IMAGE})).await;
    assert_eq!(status, 201, "{sbx}");
    let pod = pod_of(sbx["id"].as_str().expect("id"));
    let ip = api.pod(NS, &pod).and_then(|p| p.status?.pod_ip).expect("pod IP");
    let dir = state.0.with_extension("kubectl");
    let kubeconfig = api.kubeconfig(&dir, NS);
    let run = |args: &[&str]| {
        let out = std::process::Command::new(kubectl)
            .args([
                "--kubeconfig",
                kubeconfig.to_str().expect("path"),
                "--cache-dir",
                dir.join("cache").to_str().expect("path"),
            ])
            .args(args)
            .output()
            .expect("running kubectl");
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let wide = tokio::task::block_in_place(|| run(&["get", "pods", "-o", "wide"]));
    assert!(wide.contains(&pod) && wide.contains(&ip) && wide.contains("Running"), "{wide}");
    let yaml = tokio::task::block_in_place(|| run(&["get", "pod", &pod, "-o", "yaml"]));
    for want in [&pod, &ip, ENVD_IMAGE, &format!("hangar.sandbox.name: {name}"), "allowPrivilegeEscalation: false"] {
        assert!(yaml.contains(want), "{want}: {yaml}");
    }
    let described = tokio::task::block_in_place(|| run(&["describe", "pod", &pod]));
    for want in [&pod, &ip, ENVD_IMAGE, &format!("hangar.sandbox.name={name}"), "Started"] {
        assert!(described.contains(want), "{want}: {described}");
    }
    drop(relay);
    // kubectl's discovery and reads are the double's to answer; nothing else was asked.
    no_surprises(&api);
}
