//! The double's "kubelet": where a pod would run, it runs a real Docker container from the pod's
//! image (labelled `hangar.sandbox=<id>` and `hangar.sandbox.name=<name>` from the pod's labels),
//! reports its state in the pod's status and events, probes its readiness, and deletes the pod
//! when the container vanishes (`docker rm -f` from outside: the node lost, as far as the API
//! server can tell).
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, HostIP,
    Pod, PodIP,
};
use tokio::process::Command;

use super::objects::{condition, now, set_condition, Objects};

const SANDBOX_LABEL: &str = "hangar.sandbox";
const NAME_LABEL: &str = "hangar.sandbox.name";

async fn docker(args: &[String]) -> Result<String, String> {
    let out = Command::new("docker").args(args).output().await.map_err(|e| format!("docker: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// Whether the pod's container still exists. One that vanished under the node takes its pod
/// with it, here as in `run`'s watch, so that a request arriving between the two sees what the
/// watch will say (an API server answers for a pod that is gone with 404).
pub async fn vanished(objects: &Objects, ns: &str, pod: &Pod) -> bool {
    if docker(&["inspect".into(), "--format".into(), "{{.Id}}".into(), container_name(pod)]).await.is_ok() {
        return false;
    }
    objects.remove_pod(ns, pod.metadata.name.as_deref().unwrap_or_default());
    true
}

/// The container name of a pod.
pub fn container_name(pod: &Pod) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    format!("k8s_sandbox_{}_{}", pod.metadata.name.as_deref().unwrap_or_default(), &uid[uid.len().saturating_sub(8)..])
}

fn status_of(pod: &mut Pod) -> &mut k8s_openapi::api::core::v1::PodStatus {
    pod.status.get_or_insert_with(Default::default)
}

fn container_status(pod: &Pod, state: ContainerState, ready: bool, id: Option<String>) -> ContainerStatus {
    let image = pod.spec.as_ref().and_then(|s| s.containers.first()).and_then(|c| c.image.clone()).unwrap_or_default();
    ContainerStatus {
        name: "sandbox".into(),
        image: image.clone(),
        image_id: format!("docker://{image}"),
        container_id: id.map(|i| format!("docker://{i}")),
        ready,
        restart_count: 0,
        started: Some(state.running.is_some()),
        state: Some(state),
        ..Default::default()
    }
}

/// Runs the pod: scheduling, the image, the container, then its life until it ends or vanishes.
pub async fn run(objects: Objects, ns: String, name: String) {
    let Some(pod) = objects.pod(&ns, &name) else { return };
    objects.update_pod(&ns, &name, |p| {
        p.spec.get_or_insert_with(Default::default).node_name = Some(super::NODE.into());
        set_condition(status_of(p), condition("PodScheduled", true));
    });
    objects.event(
        &pod,
        "Normal",
        "Scheduled",
        &format!("Successfully assigned {ns}/{name} to {}", super::NODE),
        "default-scheduler",
    );
    let Some(c) = pod.spec.as_ref().and_then(|s| s.containers.first()).cloned() else { return };
    let image = c.image.clone().unwrap_or_default();
    if docker(&["image".into(), "inspect".into(), image.clone()]).await.is_err() {
        let msg = format!("Failed to pull image {image:?}: the double's node has no such image (no registry here)");
        objects.event(&pod, "Warning", "Failed", &msg, "kubelet");
        objects.update_pod(&ns, &name, |p| {
            let waiting = ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ErrImagePull".into()),
                    message: Some(msg.clone()),
                }),
                ..Default::default()
            };
            let cs = container_status(p, waiting, false, None);
            status_of(p).container_statuses = Some(vec![cs]);
        });
        return;
    }
    objects.event(
        &pod,
        "Normal",
        "Pulled",
        &format!("Container image {image:?} already present on machine"),
        "kubelet",
    );
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let mut args: Vec<String> = vec!["run".into(), "-d".into(), "--name".into(), container_name(&pod)];
    for (docker_label, pod_label) in [(SANDBOX_LABEL, SANDBOX_LABEL), (NAME_LABEL, NAME_LABEL)] {
        if let Some(v) = labels.get(pod_label) {
            args.push("--label".into());
            args.push(format!("{docker_label}={v}"));
        }
    }
    args.extend(["--label".into(), format!("io.kubernetes.pod.name={name}")]);
    for e in c.env.iter().flatten() {
        args.push("-e".into());
        args.push(format!("{}={}", e.name, e.value.clone().unwrap_or_default()));
    }
    if c.security_context.as_ref().and_then(|s| s.allow_privilege_escalation) == Some(false) {
        args.extend(["--security-opt".into(), "no-new-privileges".into()]);
    }
    if let Some(w) = &c.working_dir {
        args.extend(["-w".into(), w.clone()]);
    }
    let command = c.command.clone().unwrap_or_default();
    if let Some(first) = command.first() {
        args.extend(["--entrypoint".into(), first.clone()]);
    }
    args.push(image.clone());
    args.extend(command.into_iter().skip(1));
    args.extend(c.args.clone().unwrap_or_default());
    let id = match docker(&args).await {
        Ok(id) => id,
        Err(e) => {
            objects.event(&pod, "Warning", "Failed", &format!("Error: {e}"), "kubelet");
            objects.update_pod(&ns, &name, |p| {
                let waiting = ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some("CreateContainerError".into()),
                        message: Some(e.clone()),
                    }),
                    ..Default::default()
                };
                let cs = container_status(p, waiting, false, None);
                status_of(p).container_statuses = Some(vec![cs]);
            });
            return;
        }
    };
    objects.event(&pod, "Normal", "Created", "Created container: sandbox", "kubelet");
    objects.event(&pod, "Normal", "Started", "Started container sandbox", "kubelet");
    let ip = docker(&[
        "inspect".into(),
        "--format".into(),
        "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}".into(),
        id.clone(),
    ])
    .await
    .unwrap_or_default()
    .split_whitespace()
    .next()
    .unwrap_or_default()
    .to_string();
    let gateway = docker(&[
        "inspect".into(),
        "--format".into(),
        "{{range .NetworkSettings.Networks}}{{.Gateway}} {{end}}".into(),
        id.clone(),
    ])
    .await
    .unwrap_or_default()
    .split_whitespace()
    .next()
    .unwrap_or("127.0.0.1")
    .to_string();
    let probe = c.readiness_probe.as_ref().and_then(|p| p.http_get.clone());
    objects.update_pod(&ns, &name, |p| {
        let running =
            ContainerState { running: Some(ContainerStateRunning { started_at: Some(now()) }), ..Default::default() };
        let cs = container_status(p, running, probe.is_none(), Some(id.clone()));
        let st = status_of(p);
        st.phase = Some("Running".into());
        st.pod_ip = Some(ip.clone());
        st.pod_ips = Some(vec![PodIP { ip: ip.clone() }]);
        st.host_ip = Some(gateway.clone());
        st.host_ips = Some(vec![HostIP { ip: gateway.clone() }]);
        st.start_time = Some(now());
        st.container_statuses = Some(vec![cs]);
        set_condition(st, condition("PodReadyToStartContainers", true));
        set_condition(st, condition("Initialized", true));
        set_condition(st, condition("ContainersReady", probe.is_none()));
        set_condition(st, condition("Ready", probe.is_none()));
    });
    let mut ready = probe.is_none();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Some(current) = objects.pod(&ns, &name) else { return };
        if current.metadata.deletion_timestamp.is_some() {
            return;
        }
        let state =
            docker(&["inspect".into(), "--format".into(), "{{.State.Status}} {{.State.ExitCode}}".into(), id.clone()])
                .await;
        match state.as_deref().map(|s| s.split_once(' ').unwrap_or((s, "0"))) {
            Err(_) => {
                // The container vanished under the node: the pod goes (as a lost node's pods do).
                objects.remove_pod(&ns, &name);
                return;
            }
            Ok(("exited" | "dead", code)) => {
                let code: i32 = code.parse().unwrap_or(-1);
                objects.update_pod(&ns, &name, |p| {
                    let terminated = ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: code,
                            reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
                            finished_at: Some(now()),
                            container_id: Some(format!("docker://{id}")),
                            ..Default::default()
                        }),
                        ..Default::default()
                    };
                    let cs = container_status(p, terminated, false, Some(id.clone()));
                    let st = status_of(p);
                    st.phase = Some(if code == 0 { "Succeeded" } else { "Failed" }.into());
                    st.container_statuses = Some(vec![cs]);
                    set_condition(st, condition("ContainersReady", false));
                    set_condition(st, condition("Ready", false));
                });
                return;
            }
            Ok(_) => {}
        }
        if let Some(h) = &probe {
            let port = match &h.port {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(p) => *p as u16,
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(_) => 0,
            };
            let ok = http_ok(&ip, port, h.path.as_deref().unwrap_or("/")).await;
            if ok != ready {
                ready = ok;
                objects.update_pod(&ns, &name, |p| {
                    let st = status_of(p);
                    if let Some(cs) = st.container_statuses.as_mut().and_then(|v| v.first_mut()) {
                        cs.ready = ok;
                    }
                    set_condition(st, condition("ContainersReady", ok));
                    set_condition(st, condition("Ready", ok));
                });
            }
        }
    }
}

/// A readiness probe's GET: any 2xx or 3xx answer within a second.
async fn http_ok(ip: &str, port: u16, path: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect((ip, port)).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\nUser-Agent: kube-probe/1.33\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut head = [0u8; 12];
        s.read_exact(&mut head).await.ok()?;
        let code = std::str::from_utf8(&head[9..12]).ok()?.parse::<u16>().ok()?;
        Some((200..400).contains(&code))
    };
    tokio::time::timeout(Duration::from_secs(1), attempt).await.ok().flatten().unwrap_or(false)
}

/// Stops and removes a pod's container (a graceful delete, as fast as the double can).
pub async fn kill(pod: &Pod) {
    let _ = docker(&["rm".into(), "-f".into(), "-v".into(), container_name(pod)]).await;
}

/// The end of a pod's container log (`docker logs`, both streams).
pub async fn logs(pod: &Pod, tail: Option<i64>) -> Result<Vec<u8>, String> {
    let mut args = vec!["logs".to_string()];
    if let Some(t) = tail {
        args.extend(["--tail".into(), t.to_string()]);
    }
    args.push(container_name(pod));
    let out = Command::new("docker").args(&args).output().await.map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).to_string());
    }
    let mut all = out.stdout;
    all.extend(out.stderr);
    Ok(all)
}
