//! The double's objects: pods and events, made and changed as the API server does (uid,
//! resourceVersion, creationTimestamp, defaults), and the history its watches read.
use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, MutexGuard},
};

use k8s_openapi::{
    api::core::v1::{Event, EventSource, ObjectReference, Pod, PodCondition, PodStatus, Toleration},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
    jiff::Timestamp,
};
use tokio::sync::Notify;

/// One change, as a watch reports it.
#[derive(Clone, Debug)]
pub struct Change {
    pub rv: u64,
    /// ADDED, MODIFIED or DELETED.
    pub kind: &'static str,
    pub pod: Pod,
}

#[derive(Default)]
pub struct Inner {
    pub rv: u64,
    pub pods: BTreeMap<(String, String), Pod>,
    pub events: Vec<Event>,
    pub history: Vec<Change>,
    /// Every pod body the double was sent on create, as sent.
    pub created: Vec<serde_json::Value>,
    serial: u64,
}

#[derive(Clone, Default)]
pub struct Objects {
    inner: Arc<Mutex<Inner>>,
    pub changed: Arc<Notify>,
}

pub fn now() -> Time {
    Time(now_ts())
}

pub fn now_ts() -> Timestamp {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Timestamp::new(d.as_secs() as i64, d.subsec_micros() as i32 * 1000).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn uid(serial: u64) -> String {
    format!("{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}", std::process::id(), serial & 0xffff, serial & 0xfff, 0, serial)
}

impl Objects {
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a new pod (the API server's part of a create): returns it as stored, or `None` when
    /// one of that name exists.
    pub fn add_pod(&self, ns: &str, mut pod: Pod) -> Option<Pod> {
        let mut st = self.lock();
        let name = pod.metadata.name.clone().unwrap_or_default();
        if st.pods.contains_key(&(ns.to_string(), name.clone())) {
            return None;
        }
        st.serial += 1;
        st.rv += 1;
        let (serial, rv) = (st.serial, st.rv);
        pod.metadata.namespace = Some(ns.to_string());
        pod.metadata.uid = Some(uid(serial));
        pod.metadata.resource_version = Some(rv.to_string());
        pod.metadata.creation_timestamp = Some(now());
        default_spec(&mut pod);
        pod.status =
            Some(PodStatus { phase: Some("Pending".into()), qos_class: Some(qos(&pod)), ..Default::default() });
        st.pods.insert((ns.to_string(), name), pod.clone());
        st.history.push(Change { rv, kind: "ADDED", pod: pod.clone() });
        drop(st);
        self.changed.notify_waiters();
        Some(pod)
    }

    pub fn pod(&self, ns: &str, name: &str) -> Option<Pod> {
        self.lock().pods.get(&(ns.to_string(), name.to_string())).cloned()
    }

    /// Changes a pod (as the kubelet or a delete does); `false` when it is gone.
    pub fn update_pod(&self, ns: &str, name: &str, f: impl FnOnce(&mut Pod)) -> bool {
        let mut st = self.lock();
        st.rv += 1;
        let rv = st.rv;
        let Some(pod) = st.pods.get_mut(&(ns.to_string(), name.to_string())) else { return false };
        f(pod);
        pod.metadata.resource_version = Some(rv.to_string());
        let pod = pod.clone();
        st.history.push(Change { rv, kind: "MODIFIED", pod });
        drop(st);
        self.changed.notify_waiters();
        true
    }

    /// Removes a pod; the watch says DELETED. `None` when it was not there.
    pub fn remove_pod(&self, ns: &str, name: &str) -> Option<Pod> {
        let mut st = self.lock();
        let mut pod = st.pods.remove(&(ns.to_string(), name.to_string()))?;
        st.rv += 1;
        pod.metadata.resource_version = Some(st.rv.to_string());
        let rv = st.rv;
        st.history.push(Change { rv, kind: "DELETED", pod: pod.clone() });
        drop(st);
        self.changed.notify_waiters();
        Some(pod)
    }

    /// Records an event about a pod, as the scheduler and the kubelet do.
    pub fn event(&self, pod: &Pod, type_: &str, reason: &str, message: &str, component: &str) {
        let mut st = self.lock();
        st.serial += 1;
        st.rv += 1;
        let (serial, rv) = (st.serial, st.rv);
        let name = pod.metadata.name.clone().unwrap_or_default();
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        st.events.push(Event {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{serial:x}")),
                namespace: Some(ns.clone()),
                uid: Some(uid(serial)),
                resource_version: Some(rv.to_string()),
                creation_timestamp: Some(now()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name),
                namespace: Some(ns),
                uid: pod.metadata.uid.clone(),
                resource_version: pod.metadata.resource_version.clone(),
                field_path: (component == "kubelet").then(|| "spec.containers{sandbox}".to_string()),
            },
            type_: Some(type_.into()),
            reason: Some(reason.into()),
            message: Some(message.into()),
            count: Some(1),
            first_timestamp: Some(now()),
            last_timestamp: Some(now()),
            source: Some(EventSource {
                component: Some(component.into()),
                host: (component == "kubelet").then(|| super::NODE.to_string()),
            }),
            reporting_component: Some(component.into()),
            reporting_instance: Some(super::NODE.into()),
            ..Default::default()
        });
    }
}

/// What the API server fills in on create (the defaults `kubectl get -o yaml` shows).
fn default_spec(pod: &mut Pod) {
    let Some(spec) = pod.spec.as_mut() else { return };
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.scheduler_name.get_or_insert_with(|| "default-scheduler".into());
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.service_account_name.get_or_insert_with(|| "default".into());
    spec.enable_service_links.get_or_insert(true);
    spec.priority.get_or_insert(0);
    spec.preemption_policy.get_or_insert_with(|| "PreemptLowerPriority".into());
    spec.security_context.get_or_insert_with(Default::default);
    // The DefaultTolerationSeconds admission plugin.
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
        if !tolerations.iter().any(|t| t.key.as_deref() == Some(key)) {
            tolerations.push(Toleration {
                key: Some(key.into()),
                operator: Some("Exists".into()),
                effect: Some("NoExecute".into()),
                toleration_seconds: Some(300),
                ..Default::default()
            });
        }
    }
    for c in &mut spec.containers {
        c.termination_message_path.get_or_insert_with(|| "/dev/termination-log".into());
        c.termination_message_policy.get_or_insert_with(|| "File".into());
        let latest = c.image.as_deref().is_none_or(|i| {
            let last = i.rsplit('/').next().unwrap_or(i);
            !last.contains(':') || last.ends_with(":latest")
        });
        c.image_pull_policy.get_or_insert_with(|| if latest { "Always".into() } else { "IfNotPresent".into() });
        c.resources.get_or_insert_with(Default::default);
        if let Some(p) = c.readiness_probe.as_mut() {
            p.timeout_seconds.get_or_insert(1);
            p.period_seconds.get_or_insert(10);
            p.success_threshold.get_or_insert(1);
            p.failure_threshold.get_or_insert(3);
            if let Some(h) = p.http_get.as_mut() {
                h.scheme.get_or_insert_with(|| "HTTP".into());
            }
        }
    }
}

fn qos(pod: &Pod) -> String {
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
    let res: Vec<_> = containers.iter().filter_map(|c| c.resources.as_ref()).collect();
    let any = res.iter().any(|r| {
        r.requests.as_ref().is_some_and(|m| !m.is_empty()) || r.limits.as_ref().is_some_and(|m| !m.is_empty())
    });
    let guaranteed = !res.is_empty()
        && res.len() == containers.len()
        && res.iter().all(|r| {
            let l = r.limits.clone().unwrap_or_default();
            let q = r.requests.clone().unwrap_or_default();
            ["cpu", "memory"].iter().all(|k| l.contains_key(*k) && q.get(*k).is_none_or(|v| Some(v) == l.get(*k)))
        });
    if guaranteed {
        "Guaranteed".into()
    } else if any {
        "Burstable".into()
    } else {
        "BestEffort".into()
    }
}

/// A pod condition, as the kubelet sets them.
pub fn condition(type_: &str, ok: bool) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        last_transition_time: Some(now()),
        ..Default::default()
    }
}

/// Sets (or adds) a condition, keeping its transition time when its status is unchanged.
pub fn set_condition(status: &mut PodStatus, c: PodCondition) {
    let list = status.conditions.get_or_insert_with(Vec::new);
    match list.iter_mut().find(|x| x.type_ == c.type_) {
        Some(x) if x.status == c.status => {}
        Some(x) => *x = c,
        None => list.push(c),
    }
}
