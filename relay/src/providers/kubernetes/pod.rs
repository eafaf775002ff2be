//! A sandbox's pod: its name, the spec made from the sandbox's options, and what the provider
//! reads from its status.
use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{
        Container, EnvVar, HTTPGetAction, LocalObjectReference, Pod, PodSecurityContext, PodSpec, Probe,
        ResourceRequirements, SecurityContext, Toleration,
    },
    apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::ObjectMeta, util::intstr::IntOrString},
};

use super::options::Options;
use crate::providers::options::{ENV_TOKEN, ENV_USER, ENV_WORKDIR};
use crate::store::SandboxRow;

/// E2B's envd port, where hangar-envd listens inside a pod.
pub(super) const ENVD_PORT: u16 = 49983;
/// The label naming the sandbox (its id) a pod belongs to; the watch selects on it.
pub(super) const LABEL_SANDBOX: &str = "hangar.sandbox";
/// The label with the sandbox's name.
pub(super) const LABEL_SANDBOX_NAME: &str = "hangar.sandbox.name";
/// The one container of a sandbox pod.
pub(super) const CONTAINER: &str = "sandbox";

/// The pod of a sandbox: `hangar-` and its id, `_` made `-` (pod names are DNS subdomains).
/// Sandbox ids are relay-made (`sbx_<hex>`), never client text.
pub(super) fn pod_name(sandbox_id: &str) -> String {
    format!("hangar-{}", sandbox_id.replace('_', "-"))
}

/// The sandbox id a pod name stands for, when it is one of hangar's (`pod_name` undone). The
/// name, not a label, says whose a pod is: labels can be changed by whoever may patch pods.
pub(super) fn sandbox_of(pod_name: &str) -> Option<String> {
    let hex = pod_name.strip_prefix("hangar-sbx-")?;
    (!hex.is_empty() && hex.bytes().all(|c| c.is_ascii_hexdigit())).then(|| format!("sbx_{hex}"))
}

/// The pod a sandbox is made of.
pub(super) fn spec(sandbox: &SandboxRow, opts: &Options, token: &str) -> Pod {
    let mut env = vec![EnvVar { name: ENV_TOKEN.into(), value: Some(token.into()), ..Default::default() }];
    if let Some(u) = &opts.user {
        env.push(EnvVar { name: ENV_USER.into(), value: Some(u.clone()), ..Default::default() });
    }
    if let Some(w) = &opts.workdir {
        env.push(EnvVar { name: ENV_WORKDIR.into(), value: Some(w.clone()), ..Default::default() });
    }
    env.extend(opts.env.iter().map(|(k, v)| EnvVar { name: k.clone(), value: Some(v.clone()), ..Default::default() }));
    // The daemon gives its processes only PATH and its global variables: pass the sandbox's
    // variables as its `--env` arguments. These replace the image's CMD (hangar's images have
    // none: hangar-envd is their ENTRYPOINT).
    let args = (opts.daemon && !opts.env.is_empty())
        .then(|| opts.env.iter().flat_map(|(k, v)| ["--env".to_string(), format!("{k}={v}")]).collect());
    let quantities = |pairs: [(&str, &Option<String>); 2]| {
        let m: BTreeMap<String, Quantity> =
            pairs.into_iter().filter_map(|(k, v)| v.as_ref().map(|v| (k.to_string(), Quantity(v.clone())))).collect();
        (!m.is_empty()).then_some(m)
    };
    let requests = quantities([("cpu", &opts.cpu_request), ("memory", &opts.memory_request)]);
    let limits = quantities([("cpu", &opts.cpu_limit), ("memory", &opts.memory_limit)]);
    let resources = (requests.is_some() || limits.is_some()).then(|| ResourceRequirements {
        requests,
        limits,
        ..Default::default()
    });
    // Ready only once the daemon answers its health route.
    let readiness_probe = opts.daemon.then(|| Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/health".into()),
            port: IntOrString::Int(i32::from(ENVD_PORT)),
            ..Default::default()
        }),
        period_seconds: Some(1),
        ..Default::default()
    });
    let container = Container {
        name: CONTAINER.into(),
        image: Some(opts.image.clone()),
        args,
        env: Some(env),
        resources,
        readiness_probe,
        security_context: Some(SecurityContext { allow_privilege_escalation: Some(false), ..Default::default() }),
        ..Default::default()
    };
    let labels = BTreeMap::from([
        (LABEL_SANDBOX.to_string(), sandbox.id.clone()),
        (LABEL_SANDBOX_NAME.to_string(), sandbox.name.clone()),
        ("app.kubernetes.io/managed-by".to_string(), "hangar".to_string()),
    ]);
    let tolerations = opts
        .tolerations
        .iter()
        .map(|t| Toleration {
            key: t.key.clone(),
            operator: t.operator.clone(),
            value: t.value.clone(),
            effect: t.effect.clone(),
            toleration_seconds: t.toleration_seconds,
        })
        .collect::<Vec<_>>();
    Pod {
        metadata: ObjectMeta { name: Some(pod_name(&sandbox.id)), labels: Some(labels), ..Default::default() },
        spec: Some(PodSpec {
            containers: vec![container],
            // A sandbox whose main process ended is over: what ran in it is gone, as it is when
            // the pod is deleted or evicted (the sandbox becomes `gone`).
            restart_policy: Some("Never".into()),
            // No API credentials in the sandbox unless the client named a service account.
            automount_service_account_token: Some(opts.service_account.is_some()),
            service_account_name: opts.service_account.clone(),
            enable_service_links: Some(false),
            node_selector: (!opts.node_selector.is_empty()).then(|| opts.node_selector.clone()),
            tolerations: (!tolerations.is_empty()).then_some(tolerations),
            runtime_class_name: opts.runtime_class.clone(),
            image_pull_secrets: (!opts.image_pull_secrets.is_empty())
                .then(|| opts.image_pull_secrets.iter().map(|n| LocalObjectReference { name: n.clone() }).collect()),
            security_context: Some(PodSecurityContext::default()),
            ..Default::default()
        }),
        status: None,
    }
}

/// Where a pod stands, as the provider sees it.
#[derive(Debug, PartialEq)]
pub(super) enum Standing {
    /// Its `Ready` condition is true.
    Ready,
    /// Not ready yet.
    Pending,
    /// It will never run: ended (`Succeeded`, `Failed`), or stuck on something only a person
    /// can fix (an image that cannot be pulled, a bad config). The reason, for people.
    Failed(String),
}

/// Container states that never get better by waiting.
const HOPELESS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
];

pub(super) fn standing(pod: &Pod) -> Standing {
    let Some(status) = &pod.status else { return Standing::Pending };
    if pod.metadata.deletion_timestamp.is_some() {
        return Standing::Failed("the pod is being deleted".into());
    }
    if let Some(p @ ("Succeeded" | "Failed")) = status.phase.as_deref() {
        let why = status.reason.clone().or_else(|| status.message.clone());
        let exit = status
            .container_statuses
            .iter()
            .flatten()
            .find_map(|c| c.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code));
        let mut text = format!("the pod ended ({p}");
        if let Some(code) = exit {
            text.push_str(&format!(", its container exited with code {code}"));
        }
        if let Some(w) = why {
            text.push_str(&format!(": {w}"));
        }
        text.push(')');
        return Standing::Failed(text);
    }
    for c in status.container_statuses.iter().flatten() {
        if let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            if let Some(r) = w.reason.as_deref().filter(|r| HOPELESS.contains(r)) {
                let msg = w.message.as_deref().unwrap_or_default();
                return Standing::Failed(format!("its container is waiting: {r}: {msg}"));
            }
        }
    }
    let ready = status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
    if ready {
        Standing::Ready
    } else {
        Standing::Pending
    }
}

/// The pod's IP, once it has one.
pub(super) fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status.as_ref()?.pod_ip.clone().filter(|ip| !ip.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_names_round_trip() {
        assert_eq!(pod_name("sbx_0a1b"), "hangar-sbx-0a1b");
        assert_eq!(sandbox_of("hangar-sbx-0a1b").as_deref(), Some("sbx_0a1b"));
        assert_eq!(sandbox_of("hangar-sbx-"), None);
        assert_eq!(sandbox_of("other-pod"), None);
        assert_eq!(sandbox_of("hangar-sbx-xyz"), None);
    }
}
