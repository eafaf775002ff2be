//! A Kubernetes API server test double for the relay's `kubernetes` provider: an HTTP server
//! that answers exactly the requests the provider (kube-rs) and `kubectl get`/`describe` make,
//! as the API server does — paths, query strings, objects built from the `k8s-openapi` types
//! (with `uid`, `resourceVersion`, `creationTimestamp`, defaults and status conditions), `Status`
//! errors (404, 409, 422), watch streams with bookmarks, the `exec` and `portforward` WebSocket
//! upgrades, and the discovery `kubectl` needs. Where a pod would run, `kubelet` runs a real
//! Docker container from its image, so the relay's streams reach the real hangar-envd.
//!
//! It checks what it is sent: a request it does not know, or a pod body with fields the
//! `k8s-openapi` types do not have, is recorded in `unexpected()` (tests assert it is empty) and
//! answered as the API server would answer it.
mod kubelet;
mod objects;
mod stream;

use std::{
    collections::BTreeMap,
    convert::Infallible,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use k8s_openapi::{
    api::core::v1::{Event, Pod},
    apimachinery::pkg::apis::meta::v1::{ListMeta, Status, StatusCause, StatusDetails},
};
pub use kubelet::container_name;
use objects::Objects;
use serde_json::{json, Value};

/// The one node the double's pods are scheduled to.
pub const NODE: &str = "hangar-double-node";
/// The Kubernetes version the double answers as (the `k8s-openapi` feature the relay pins).
pub const VERSION: (&str, &str) = ("1", "33");

type Body = BoxBody<Bytes, Infallible>;

/// A request the double was sent.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: Vec<(String, String)>,
}

impl Seen {
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

#[derive(Clone, Default)]
struct Shared {
    objects: Objects,
    seen: Arc<Mutex<Vec<Seen>>>,
    unexpected: Arc<Mutex<Vec<String>>>,
}

/// The running double, on a runtime of its own (so a test's blocking calls never stall it); it
/// stops (and removes its pods' containers) when dropped.
pub struct ApiServer {
    pub addr: SocketAddr,
    shared: Shared,
    runtime: Option<tokio::runtime::Runtime>,
}

impl ApiServer {
    pub async fn start() -> ApiServer {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("the API server double's runtime");
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding the API server double");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let addr = std_listener.local_addr().expect("its address");
        let shared = Shared::default();
        let s = shared.clone();
        runtime.spawn(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else { return };
            loop {
                let Ok((conn, _)) = listener.accept().await else { continue };
                let s = s.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let s = s.clone();
                        async move { Ok::<_, Infallible>(handle(s, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(conn), svc)
                        .with_upgrades()
                        .await;
                });
            }
        });
        ApiServer { addr, shared, runtime: Some(runtime) }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes a kubeconfig for the double into `dir`, with `namespace` as its context's.
    pub fn kubeconfig(&self, dir: &Path, namespace: &str) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: double\n  cluster:\n    server: {}\ncontexts:\n- name: double\n  \
             context:\n    cluster: double\n    user: tester\n    namespace: {namespace}\ncurrent-context: double\nusers:\n\
             - name: tester\n  user:\n    token: double-token\n",
            self.url()
        );
        std::fs::create_dir_all(dir).expect("kubeconfig dir");
        std::fs::write(&path, text).expect("writing the kubeconfig");
        path
    }

    /// Every request, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// What the double was sent that the API server would not expect (tests assert it is empty).
    pub fn unexpected(&self) -> Vec<String> {
        self.shared.unexpected.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The pod bodies the double was sent on create, as sent.
    pub fn created(&self) -> Vec<Value> {
        self.shared.objects.lock().created.clone()
    }

    pub fn pod(&self, ns: &str, name: &str) -> Option<Pod> {
        self.shared.objects.pod(ns, name)
    }

    pub fn pods(&self) -> Vec<Pod> {
        self.shared.objects.lock().pods.values().cloned().collect()
    }

    /// Deletes a pod as `kubectl delete pod` would (through the API).
    pub async fn delete_pod(&self, ns: &str, name: &str) -> bool {
        let Some(rt) = &self.runtime else { return false };
        let (objects, ns, name) = (self.shared.objects.clone(), ns.to_string(), name.to_string());
        rt.spawn(async move { delete(&objects, &ns, &name).await.is_some() }).await.unwrap_or(false)
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
        for pod in self.pods() {
            let _ = std::process::Command::new("docker").args(["rm", "-f", "-v", &container_name(&pod)]).output();
        }
    }
}

fn full(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)).boxed())
        .unwrap_or_default()
}

fn ok_json(v: &impl k8s_openapi::serde::Serialize) -> Response<Body> {
    full(StatusCode::OK, serde_json::to_vec(v).unwrap_or_default())
}

/// A `Status` error, as the API server answers one.
fn status(code: u16, reason: &str, message: String, details: Option<StatusDetails>) -> Response<Body> {
    let s = Status {
        code: Some(i32::from(code)),
        message: Some(message),
        reason: Some(reason.into()),
        status: Some("Failure".into()),
        details,
        metadata: ListMeta::default(),
    };
    let mut v = serde_json::to_value(&s).unwrap_or_default();
    v["kind"] = json!("Status");
    v["apiVersion"] = json!("v1");
    full(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        serde_json::to_vec(&v).unwrap_or_default(),
    )
}

fn not_found(kind: &str, name: &str) -> Response<Body> {
    let details = StatusDetails { name: Some(name.into()), kind: Some(kind.into()), ..Default::default() };
    status(404, "NotFound", format!("{kind} {name:?} not found"), Some(details))
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_of(q: Option<&str>) -> Vec<(String, String)> {
    q.unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

/// A label selector's terms (`k`, `!k`, `k=v`, `k==v`, `k!=v`) hold for `labels`; `None` for
/// a selector the double does not know.
fn selects(selector: &str, labels: &BTreeMap<String, String>) -> Option<bool> {
    let mut all = true;
    for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let holds = if let Some((k, v)) = term.split_once("!=") {
            labels.get(k.trim()).map(String::as_str) != Some(v.trim())
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            labels.get(k.trim()).map(String::as_str) == Some(v.trim())
        } else if let Some(k) = term.strip_prefix('!') {
            !labels.contains_key(k)
        } else if term.contains([' ', '(', ')']) {
            return None;
        } else {
            labels.contains_key(term)
        };
        all &= holds;
    }
    Some(all)
}

/// The pod body's fields the `k8s-openapi` types do not know (or the value they change): what
/// the API server's strict field validation would warn of.
pub fn unknown_fields(sent: &Value, typed: &Value, at: &str, found: &mut Vec<String>) {
    match (sent, typed) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                match b.get(k) {
                    Some(w) => unknown_fields(v, w, &format!("{at}.{k}"), found),
                    None if v.is_null() => {}
                    None => found.push(format!("{at}.{k}")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                unknown_fields(v, w, &format!("{at}[{i}]"), found);
            }
        }
        (a, b) if a != b => found.push(format!("{at} (changed from {a})")),
        _ => {}
    }
}

fn dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// The API server's validation of a new pod, the part the double can check: its causes.
fn invalid(pod: &Pod) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let mut cause = |field: &str, message: String| {
        causes.push(StatusCause {
            field: Some(field.into()),
            message: Some(message),
            reason: Some("FieldValueInvalid".into()),
        })
    };
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    if !name.split('.').all(dns_label) || name.len() > 253 {
        cause("metadata.name", format!("Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"));
    }
    for (k, v) in pod.metadata.labels.iter().flatten() {
        let b = v.as_bytes();
        let ok = b.is_empty()
            || (b.len() <= 63
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')));
        if !ok {
            cause(&format!("metadata.labels.{k}"), format!("Invalid value: {v:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.'"));
        }
    }
    match &pod.spec {
        None => cause("spec", "Required value".into()),
        Some(spec) => {
            if spec.containers.is_empty() {
                cause("spec.containers", "Required value".into());
            }
            for (i, c) in spec.containers.iter().enumerate() {
                if !dns_label(&c.name) {
                    cause(&format!("spec.containers[{i}].name"), format!("Invalid value: {:?}", c.name));
                }
                if c.image.as_deref().is_none_or(|i| i.trim().is_empty()) {
                    cause(&format!("spec.containers[{i}].image"), "Required value".into());
                }
            }
            if !matches!(spec.restart_policy.as_deref(), None | Some("Always" | "OnFailure" | "Never")) {
                cause("spec.restartPolicy", "Unsupported value".into());
            }
        }
    }
    causes
}

fn path_parts(path: &str) -> Vec<&str> {
    path.trim_matches('/').split('/').collect()
}

async fn handle(s: Shared, req: Request<Incoming>) -> Response<Body> {
    let seen = Seen {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
        query: query_of(req.uri().query()),
    };
    s.seen.lock().unwrap_or_else(|p| p.into_inner()).push(seen.clone());
    let unexpected = |why: String| {
        s.unexpected.lock().unwrap_or_else(|p| p.into_inner()).push(why);
    };
    let table = req.headers().get("accept").and_then(|a| a.to_str().ok()).is_some_and(|a| a.contains("as=Table"));
    let parts = path_parts(&seen.path);
    let method = req.method().clone();
    match (&method, parts.as_slice()) {
        (&Method::GET, ["version"]) => ok_json(&json!({
            "major": VERSION.0, "minor": VERSION.1, "gitVersion": format!("v{}.{}.0-hangar-double", VERSION.0, VERSION.1),
            "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
            "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24.0", "compiler": "gc", "platform": "linux/amd64"
        })),
        (&Method::GET, ["api"]) => ok_json(&json!({
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": s_addr(&req)}]
        })),
        (&Method::GET, ["apis"]) => ok_json(&json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})),
        (&Method::GET, ["api", "v1"]) => ok_json(&discovery_v1()),
        (_, ["api", "v1", "namespaces", ns, "pods"]) => pods(&s, &method, ns, &seen, req, table, unexpected).await,
        (_, ["api", "v1", "namespaces", ns, "pods", name]) => match method {
            Method::GET => match s.objects.pod(ns, name) {
                Some(p) if table => ok_json(&table_of(&[p], true)),
                Some(p) => ok_json(&p),
                None => not_found("pods", name),
            },
            Method::DELETE => match delete(&s.objects, ns, name).await {
                Some(p) => ok_json(&p),
                None => not_found("pods", name),
            },
            _ => {
                unexpected(format!("{} {}", method, seen.path));
                status(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource".into(),
                    None,
                )
            }
        },
        (&Method::GET, ["api", "v1", "namespaces", ns, "pods", name, "log"]) => {
            let Some(pod) = s.objects.pod(ns, name) else { return not_found("pods", name) };
            if let Some(k) = seen
                .query
                .iter()
                .map(|(k, _)| k.as_str())
                .find(|k| !matches!(*k, "container" | "tailLines" | "limitBytes"))
            {
                unexpected(format!("log: parameter {k}"));
            }
            let tail = seen.param("tailLines").and_then(|t| t.parse().ok());
            match kubelet::logs(&pod, tail).await {
                Ok(mut log) => {
                    if let Some(limit) = seen.param("limitBytes").and_then(|l| l.parse::<usize>().ok()) {
                        log.truncate(limit);
                    }
                    Response::builder()
                        .header("content-type", "text/plain")
                        .body(Full::new(Bytes::from(log)).boxed())
                        .unwrap_or_default()
                }
                Err(e) => status(
                    400,
                    "BadRequest",
                    format!("container \"sandbox\" in pod {name:?} is waiting to start: {e}"),
                    None,
                ),
            }
        }
        (
            &Method::GET | &Method::POST,
            ["api", "v1", "namespaces", ns, "pods", name, sub @ ("exec" | "portforward")],
        ) => upgrade(&s, ns, name, sub, &seen, req, unexpected).await,
        (&Method::GET, ["api", "v1", "namespaces", ns, "events"]) => {
            let fields = seen.param("fieldSelector").unwrap_or_default().to_string();
            let mut wanted = Vec::new();
            for term in fields.split(',').filter(|t| !t.is_empty()) {
                match term.split_once('=') {
                    Some((
                        k @ ("involvedObject.name"
                        | "involvedObject.namespace"
                        | "involvedObject.uid"
                        | "involvedObject.kind"),
                        v,
                    )) => wanted.push((k.to_string(), v.to_string())),
                    _ => unexpected(format!("events: field selector {term:?}")),
                }
            }
            let st = s.objects.lock();
            let items: Vec<Event> = st
                .events
                .iter()
                .filter(|e| e.metadata.namespace.as_deref() == Some(ns))
                .filter(|e| {
                    wanted.iter().all(|(k, v)| {
                        let o = &e.involved_object;
                        let have = match k.as_str() {
                            "involvedObject.name" => o.name.as_deref(),
                            "involvedObject.namespace" => o.namespace.as_deref(),
                            "involvedObject.uid" => o.uid.as_deref(),
                            _ => o.kind.as_deref(),
                        };
                        have == Some(v.as_str())
                    })
                })
                .cloned()
                .collect();
            ok_json(
                &json!({"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": st.rv.to_string()}, "items": items}),
            )
        }
        _ => {
            unexpected(format!("{} {}?{}", method, seen.path, req.uri().query().unwrap_or_default()));
            status(404, "NotFound", "the server could not find the requested resource".into(), None)
        }
    }
}

fn s_addr(req: &Request<Incoming>) -> String {
    req.headers().get("host").and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1").to_string()
}

async fn delete(objects: &Objects, ns: &str, name: &str) -> Option<Pod> {
    let pod = objects.pod(ns, name)?;
    objects.update_pod(ns, name, |p| {
        p.metadata.deletion_timestamp = Some(objects::now());
        p.metadata.deletion_grace_period_seconds = Some(30);
    });
    objects.event(&pod, "Normal", "Killing", "Stopping container sandbox", "kubelet");
    let marked = objects.pod(ns, name)?;
    let (objects, ns, name, gone) = (objects.clone(), ns.to_string(), name.to_string(), marked.clone());
    tokio::spawn(async move {
        kubelet::kill(&gone).await;
        objects.remove_pod(&ns, &name);
    });
    Some(marked)
}

async fn pods(
    s: &Shared,
    method: &Method,
    ns: &str,
    seen: &Seen,
    req: Request<Incoming>,
    table: bool,
    unexpected: impl Fn(String),
) -> Response<Body> {
    match *method {
        Method::POST => {
            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let sent: Value = match serde_json::from_slice(&body) {
                Ok(v) => v,
                Err(e) => {
                    return status(
                        400,
                        "BadRequest",
                        format!("the body of the request was in an unknown format: {e}"),
                        None,
                    )
                }
            };
            s.objects.lock().created.push(sent.clone());
            let pod: Pod = match serde_json::from_value(sent.clone()) {
                Ok(p) => p,
                Err(e) => {
                    return status(
                        400,
                        "BadRequest",
                        format!("Pod in version \"v1\" cannot be handled as a Pod: {e}"),
                        None,
                    )
                }
            };
            let mut unknown = Vec::new();
            unknown_fields(&sent, &serde_json::to_value(&pod).unwrap_or_default(), "", &mut unknown);
            for u in unknown {
                unexpected(format!("pod body: unknown field {u}"));
            }
            let causes = invalid(&pod);
            let name = pod.metadata.name.clone().unwrap_or_default();
            if !causes.is_empty() {
                let msg = causes
                    .iter()
                    .map(|c| format!("{}: {}", c.field.as_deref().unwrap_or(""), c.message.as_deref().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join(", ");
                let details = StatusDetails {
                    name: Some(name.clone()),
                    kind: Some("Pod".into()),
                    causes: Some(causes),
                    ..Default::default()
                };
                return status(422, "Invalid", format!("Pod {name:?} is invalid: {msg}"), Some(details));
            }
            match s.objects.add_pod(ns, pod) {
                Some(p) => {
                    tokio::spawn(kubelet::run(s.objects.clone(), ns.to_string(), name));
                    full(StatusCode::CREATED, serde_json::to_vec(&p).unwrap_or_default())
                }
                None => {
                    let details =
                        StatusDetails { name: Some(name.clone()), kind: Some("pods".into()), ..Default::default() };
                    status(409, "AlreadyExists", format!("pods {name:?} already exists"), Some(details))
                }
            }
        }
        Method::GET => {
            for (k, _) in &seen.query {
                if !matches!(
                    k.as_str(),
                    "labelSelector"
                        | "fieldSelector"
                        | "limit"
                        | "resourceVersion"
                        | "resourceVersionMatch"
                        | "watch"
                        | "timeoutSeconds"
                        | "allowWatchBookmarks"
                        | "sendInitialEvents"
                        | "continue"
                ) {
                    unexpected(format!("pods: parameter {k}"));
                }
            }
            let selector = seen.param("labelSelector").unwrap_or_default().to_string();
            let field = seen.param("fieldSelector").unwrap_or_default().to_string();
            if selects(&selector, &BTreeMap::new()).is_none() {
                unexpected(format!("pods: label selector {selector:?}"));
            }
            let matches = move |p: &Pod| -> bool {
                let labels = p.metadata.labels.clone().unwrap_or_default();
                let by_label = selects(&selector, &labels).unwrap_or(false);
                let by_field = field.split(',').filter(|t| !t.is_empty()).all(|t| match t.split_once('=') {
                    Some(("metadata.name", v)) => p.metadata.name.as_deref() == Some(v),
                    Some(("metadata.namespace", v)) => p.metadata.namespace.as_deref() == Some(v),
                    _ => false,
                });
                by_label && by_field
            };
            if seen.param("watch") == Some("true") || seen.param("watch") == Some("1") {
                return watch(s, ns, seen, Box::new(matches));
            }
            let st = s.objects.lock();
            let items: Vec<Pod> =
                st.pods.iter().filter(|((n, _), p)| n == ns && matches(p)).map(|(_, p)| p.clone()).collect();
            if table {
                return ok_json(&table_of(&items, false));
            }
            let items: Vec<Value> = items
                .iter()
                .map(|p| {
                    // A list's items carry no kind or apiVersion.
                    let mut v = serde_json::to_value(p).unwrap_or_default();
                    if let Some(o) = v.as_object_mut() {
                        o.remove("kind");
                        o.remove("apiVersion");
                    }
                    v
                })
                .collect();
            ok_json(
                &json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": st.rv.to_string()}, "items": items}),
            )
        }
        _ => {
            unexpected(format!("{method} {}", seen.path));
            status(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource".into(),
                None,
            )
        }
    }
}

/// A watch: the changes after `resourceVersion` (or, without one, the pods now as ADDED), then
/// each change as it happens; BOOKMARKs when asked for; ends after `timeoutSeconds`.
fn watch(s: &Shared, ns: &str, seen: &Seen, matches: Box<dyn Fn(&Pod) -> bool + Send>) -> Response<Body> {
    let objects = s.objects.clone();
    let ns = ns.to_string();
    let from: Option<u64> = seen.param("resourceVersion").and_then(|r| r.parse().ok()).filter(|r| *r > 0);
    let bookmarks = seen.param("allowWatchBookmarks") == Some("true");
    let initial = seen.param("sendInitialEvents") == Some("true");
    let timeout = seen.param("timeoutSeconds").and_then(|t| t.parse().ok()).unwrap_or(1800u64);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(64);
    tokio::spawn(async move {
        let send = |v: Value| {
            let mut line = serde_json::to_vec(&v).unwrap_or_default();
            line.push(b'\n');
            tx.send(Ok(Frame::data(Bytes::from(line))))
        };
        let bookmark = |rv: u64, end: bool| {
            let mut meta = json!({"resourceVersion": rv.to_string()});
            if end {
                meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": meta}})
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
        let mut cursor = match from {
            Some(rv) => rv,
            None => {
                let (now, pods) = {
                    let st = objects.lock();
                    (
                        st.rv,
                        st.pods
                            .iter()
                            .filter(|((n, _), p)| *n == ns && matches(p))
                            .map(|(_, p)| p.clone())
                            .collect::<Vec<_>>(),
                    )
                };
                for p in pods {
                    if send(json!({"type": "ADDED", "object": p})).await.is_err() {
                        return;
                    }
                }
                if initial && bookmarks && send(bookmark(now, true)).await.is_err() {
                    return;
                }
                now
            }
        };
        loop {
            let notified = objects.changed.notified();
            let (changes, now) = {
                let st = objects.lock();
                let c: Vec<_> = st.history.iter().filter(|c| c.rv > cursor).cloned().collect();
                (c, st.rv)
            };
            for c in changes {
                let in_ns = c.pod.metadata.namespace.as_deref() == Some(ns.as_str());
                if in_ns && matches(&c.pod) && send(json!({"type": c.kind, "object": c.pod})).await.is_err() {
                    return;
                }
            }
            cursor = now;
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    if bookmarks && send(bookmark(cursor, false)).await.is_err() { return }
                }
                _ = tokio::time::sleep_until(deadline) => return,
            }
        }
    });
    let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    Response::builder()
        .header("content-type", "application/json")
        .header("transfer-encoding", "chunked")
        .body(BodyExt::boxed(body))
        .unwrap_or_default()
}

async fn upgrade(
    s: &Shared,
    ns: &str,
    name: &str,
    sub: &str,
    seen: &Seen,
    mut req: Request<Incoming>,
    unexpected: impl Fn(String),
) -> Response<Body> {
    let Some(pod) = s.objects.pod(ns, name) else { return not_found("pods", name) };
    // A pod whose container is started has it; one that vanished since is gone.
    if pod.status.as_ref().and_then(|st| st.pod_ip.as_ref()).is_some() && kubelet::vanished(&s.objects, ns, &pod).await
    {
        return not_found("pods", name);
    }
    let header = |h: &str| req.headers().get(h).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let offered: Vec<String> = header("sec-websocket-protocol").split(',').map(|p| p.trim().to_string()).collect();
    // The API server's choices: exec speaks v5 (stream close) or v4 (the status channel);
    // port-forward speaks v4's framing.
    let known: &[&str] = if sub == "exec" {
        &["v5.channel.k8s.io", "v4.channel.k8s.io"]
    } else {
        &["v4.channel.k8s.io", "portforward.k8s.io"]
    };
    let Some(protocol) = known.iter().find(|k| offered.iter().any(|o| o == *k)).map(|p| p.to_string()) else {
        unexpected(format!("{sub}: subprotocols {offered:?}"));
        return status(400, "BadRequest", "no supported WebSocket subprotocol".into(), None);
    };
    if !header("upgrade").eq_ignore_ascii_case("websocket") {
        unexpected(format!("{sub}: not a WebSocket upgrade"));
        return status(400, "BadRequest", "Upgrade request required".into(), None);
    }
    let key = header("sec-websocket-key");
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let ip = pod.status.as_ref().and_then(|st| st.pod_ip.clone()).unwrap_or_default();
    let container = container_name(&pod);
    if sub == "exec" {
        let argv: Vec<String> = seen.query.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.clone()).collect();
        for (k, v) in &seen.query {
            match k.as_str() {
                "command" | "stdin" | "stdout" | "stderr" | "tty" => {}
                "container" if v == "sandbox" => {}
                other => unexpected(format!("exec: parameter {other}={v}")),
            }
        }
        if argv.is_empty() {
            return status(400, "BadRequest", "you must specify at least 1 command".into(), None);
        }
        let stdin = seen.param("stdin") == Some("true");
        let v5 = protocol.starts_with("v5");
        tokio::spawn(async move {
            if let Ok(up) = hyper::upgrade::on(&mut req).await {
                stream::exec(stream::socket(up).await, container, argv, stdin, v5).await;
            }
        });
    } else {
        let ports: Vec<u16> =
            seen.param("ports").unwrap_or_default().split(',').filter_map(|p| p.trim().parse().ok()).collect();
        if ports.is_empty() {
            unexpected("portforward: no ports".into());
            return status(400, "BadRequest", "ports are required".into(), None);
        }
        tokio::spawn(async move {
            if let Ok(up) = hyper::upgrade::on(&mut req).await {
                stream::portforward(stream::socket(up).await, ip, ports).await;
            }
        });
    }
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("upgrade", "websocket")
        .header("connection", "Upgrade")
        .header("sec-websocket-accept", accept)
        .header("sec-websocket-protocol", protocol)
        .body(Full::new(Bytes::new()).boxed())
        .unwrap_or_default()
}

/// `GET /api/v1`: the resources the double serves.
fn discovery_v1() -> Value {
    let r = |name: &str, kind: &str, namespaced: bool, verbs: &[&str], short: &[&str]| {
        json!({"name": name, "singularName": if name.contains('/') { "" } else { name.trim_end_matches('s') },
               "namespaced": namespaced, "kind": kind, "verbs": verbs, "shortNames": short})
    };
    json!({
        "kind": "APIResourceList", "groupVersion": "v1",
        "resources": [
            r("pods", "Pod", true, &["create", "delete", "get", "list", "watch"], &["po"]),
            r("pods/log", "Pod", true, &["get"], &[]),
            r("pods/exec", "PodExecOptions", true, &["create", "get"], &[]),
            r("pods/portforward", "PodPortForwardOptions", true, &["create", "get"], &[]),
            r("events", "Event", true, &["list"], &["ev"]),
        ]
    })
}

fn age(p: &Pod) -> String {
    let Some(t) = &p.metadata.creation_timestamp else { return "<unknown>".into() };
    let secs = (objects::now_ts().as_second() - t.0.as_second()).max(0);
    if secs < 120 {
        format!("{secs}s")
    } else {
        format!("{}m", secs / 60)
    }
}

/// A `meta.k8s.io/v1` Table of pods, with the columns the API server's pod printer makes.
fn table_of(pods: &[Pod], _one: bool) -> Value {
    let col = |name: &str, t: &str, p: i32| json!({"name": name, "type": t, "format": if name == "Name" { "name" } else { "" }, "description": name, "priority": p});
    let rows: Vec<Value> = pods
        .iter()
        .map(|p| {
            let st = p.status.clone().unwrap_or_default();
            let cs = st.container_statuses.clone().unwrap_or_default();
            let ready = cs.iter().filter(|c| c.ready).count();
            let total = p.spec.as_ref().map(|s| s.containers.len()).unwrap_or(0);
            let reason = cs
                .iter()
                .find_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
                .or_else(|| p.metadata.deletion_timestamp.as_ref().map(|_| "Terminating".to_string()))
                .or(st.phase.clone())
                .unwrap_or_default();
            let mut meta = serde_json::to_value(&p.metadata).unwrap_or_default();
            if let Some(o) = meta.as_object_mut() {
                o.remove("managedFields");
            }
            json!({
                "cells": [p.metadata.name, format!("{ready}/{total}"), reason, 0, age(p),
                          st.pod_ip.clone().unwrap_or("<none>".into()),
                          p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or("<none>".into()), "<none>", "<none>"],
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
            })
        })
        .collect();
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": ""},
        "columnDefinitions": [col("Name", "string", 0), col("Ready", "string", 0), col("Status", "string", 0),
            col("Restarts", "string", 0), col("Age", "string", 0), col("IP", "string", 1), col("Node", "string", 1),
            col("Nominated Node", "string", 1), col("Readiness Gates", "string", 1)],
        "rows": rows
    })
}
