//! The `kubernetes` provider: each sandbox is a pod in one configured namespace, made through
//! the API server with kube-rs.
//!
//! - The pod is `hangar-<sandbox id>` (`_` made `-`), labelled `hangar.sandbox=<id>` and
//!   `hangar.sandbox.name=<name>`, with one container `sandbox` from the `image` option and
//!   `allowPrivilegeEscalation: false`. Its daemon's access token is made per sandbox and given
//!   in `HANGAR_ENVD_ACCESS_TOKEN` (kept in the sandbox row's `envd_token`).
//! - Creation waits for the pod to be Ready (its readiness probe is the daemon's `/health`) and
//!   for the daemon to answer; a pod that does not get there is deleted, and the error quotes
//!   its events and the end of its log.
//! - The daemon is reached at the pod's IP, or through the API server's port-forward (one
//!   port-forward stream per connection, `forward`), as `Settings::reach` says.
//! - Without a daemon (`daemon: false`), the shared fallback exec (`providers::fallback`) goes
//!   through the pod's `exec` subresource (`exec`).
//! - Kubernetes cannot pause a pod: pause and resume are `Unsupported`.
//! - A watch on the namespace's sandbox pods (`watch`) reports pods that vanish to
//!   `sessions::gone`.
//!
//! Invariant: the API server is reached lazily. The relay starts without a cluster; a
//! kubernetes sandbox then fails with `ProviderError::Unreachable`, and the next call tries again.
mod exec;
mod forward;
mod options;
mod pod;
mod settings;
mod watch;

use crate::providers::options::bad;
use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::{
    api::{Api, DeleteParams, ListParams, LogParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
    Client, Config,
};
use tokio::sync::{Notify, OnceCell};

pub use self::settings::{Reach, Settings};
use self::{
    options::Options,
    pod::{pod_ip, pod_name, standing, Standing, CONTAINER, ENVD_PORT},
};
use super::{fallback, ExecOutput, Provider, ProviderError};
use crate::{
    envd::Envd,
    events,
    providers::gone::GoneSender,
    store::{Isolation, SandboxRow},
    text::Tail,
};

/// How long one API request may take.
const API_TIMEOUT: Duration = Duration::from_secs(30);
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a Ready pod's daemon gets to answer the relay.
const DAEMON_ANSWER: Duration = Duration::from_secs(15);
/// How often a starting pod is looked at.
const START_POLL: Duration = Duration::from_millis(250);
/// How much of a failed pod's log an error message quotes.
const LOG_TAIL_BYTES: usize = 1024;
/// How many of a failed pod's events an error message quotes (the latest).
const EVENTS_QUOTED: usize = 10;

/// A client of one cluster, and where sandboxes go in it.
#[derive(Clone)]
struct Cluster {
    client: Client,
    namespace: String,
    reach: Reach,
}

impl Cluster {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }
}

pub struct KubernetesProvider {
    settings: Settings,
    cluster: Arc<OnceCell<Cluster>>,
    /// Where vanished pods are reported.
    gone: GoneSender,
    /// Wakes the watch when a call connected first.
    connected: Arc<Notify>,
}

/// A kube error in the provider's terms: the API server not answering is `Unreachable`, an
/// error it answered with is `Engine` (`BadOptions` for a spec it refused as invalid).
fn api_error(context: &str, e: kube::Error) -> ProviderError {
    match e {
        kube::Error::Api(s) if matches!(s.code, 400 | 422) => {
            ProviderError::BadOptions(format!("{context}: the API server refused it: {}", s.message))
        }
        kube::Error::Api(s) if s.code == 403 => ProviderError::Engine(format!(
            "{context}: the API server forbids it (the relay's RBAC, docs/kubernetes.md): {}",
            s.message
        )),
        kube::Error::Api(s) => {
            ProviderError::Engine(format!("{context}: the API server answered {}: {}", s.code, s.message))
        }
        e @ (kube::Error::HyperError(_) | kube::Error::Service(_)) => {
            ProviderError::Unreachable(format!("{context}: the Kubernetes API server is not reachable: {e}"))
        }
        e => ProviderError::Engine(format!("{context}: {e}")),
    }
}

fn status(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

fn gone(sandbox: &SandboxRow, why: &str) -> ProviderError {
    ProviderError::Gone(format!(
        "sandbox {:?} is gone: its pod {} {why}; destroy the sandbox",
        sandbox.name,
        pod_name(&sandbox.id)
    ))
}

async fn connect(settings: &Settings) -> Result<Cluster, ProviderError> {
    let unconfigured = |e: String| {
        ProviderError::Unreachable(format!(
            "kubernetes: no cluster is configured or reachable ({e}); set HANGAR_KUBERNETES_KUBECONFIG or \
             KUBECONFIG, or run the relay in a cluster"
        ))
    };
    let options = KubeConfigOptions { context: settings.context.clone(), ..Default::default() };
    let config = match (&settings.kubeconfig, &settings.context) {
        (Some(path), _) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|e| unconfigured(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await.map_err(|e| unconfigured(e.to_string()))?
        }
        (None, Some(_)) => Config::from_kubeconfig(&options).await.map_err(|e| unconfigured(e.to_string()))?,
        (None, None) => Config::infer().await.map_err(|e| unconfigured(e.to_string()))?,
    };
    let namespace = settings.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let mut config = config;
    config.read_timeout = Some(API_TIMEOUT);
    config.write_timeout = Some(API_TIMEOUT);
    config.connect_timeout = Some(Duration::from_secs(10));
    let client = Client::try_from(config).map_err(|e| unconfigured(e.to_string()))?;
    let version = tokio::time::timeout(Duration::from_secs(10), client.apiserver_version())
        .await
        .map_err(|_| unconfigured("the API server did not answer within 10 s".into()))?
        .map_err(|e| api_error("kubernetes: asking the API server its version", e))?;
    let reach = settings.reach.resolve();
    events::KubernetesConnected { version: &version.git_version, namespace: &namespace, reach: reach.as_str() }.emit();
    Ok(Cluster { client, namespace, reach })
}

impl KubernetesProvider {
    /// A provider that connects to the cluster on first use, and reports vanished pods to `gone`.
    pub fn new(settings: Settings, gone: GoneSender) -> Self {
        Self { settings, cluster: Arc::new(OnceCell::new()), gone, connected: Arc::new(Notify::new()) }
    }

    /// Starts the watch on sandbox pods (in the background, for the relay's life). Without a
    /// cluster it says so once and waits for one.
    pub fn watch_in_background(&self) {
        tokio::spawn(watch::run(
            self.settings.clone(),
            self.cluster.clone(),
            self.connected.clone(),
            self.gone.clone(),
        ));
    }

    async fn cluster(&self) -> Result<&Cluster, ProviderError> {
        let first = !self.cluster.initialized();
        let c = self.cluster.get_or_try_init(|| connect(&self.settings)).await?;
        if first {
            self.connected.notify_one();
        }
        Ok(c)
    }

    async fn get_pod(&self, sandbox: &SandboxRow) -> Result<Pod, ProviderError> {
        let cluster = self.cluster().await?;
        match cluster.pods().get_opt(&pod_name(&sandbox.id)).await {
            Ok(Some(p)) => Ok(p),
            Ok(None) => {
                let why = "no longer exists (deleted outside hangar, evicted or its node lost)";
                // Found before the watch said so: the sandbox is gone all the same.
                self.gone.vanished(&sandbox.id, why);
                Err(gone(sandbox, why))
            }
            Err(e) => Err(api_error("reading the pod", e)),
        }
    }

    /// A client of the pod's daemon, as `reach` says.
    fn envd(&self, cluster: &Cluster, sandbox: &SandboxRow, pod: &Pod) -> Option<(Option<String>, Envd)> {
        let token = sandbox.envd_token.as_deref()?;
        match cluster.reach {
            Reach::PortForward => {
                let name = pod_name(&sandbox.id);
                let url = format!("http://{name}:{ENVD_PORT}");
                let connector = forward::PortForward::new(cluster.pods(), name);
                Envd::with_connector(&url, token, connector).ok().map(|e| (None, e))
            }
            _ => {
                let ip = pod_ip(pod)?;
                let url = if ip.contains(':') {
                    format!("http://[{ip}]:{ENVD_PORT}")
                } else {
                    format!("http://{ip}:{ENVD_PORT}")
                };
                Envd::new(&url, token).ok().map(|e| (Some(url), e))
            }
        }
    }

    /// Asks the daemon until it answers or `limit` passes (at least once).
    async fn answers(envd: &Envd, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if envd.alive(HEALTH_TIMEOUT).await.is_ok() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the pod is Ready, has ended or is stuck, or `limit` passes.
    async fn wait_ready(&self, sandbox: &SandboxRow, limit: Duration) -> Result<Pod, String> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let pod = self.get_pod(sandbox).await.map_err(|e| e.to_string())?;
            match standing(&pod) {
                Standing::Ready => return Ok(pod),
                Standing::Failed(why) => return Err(why),
                Standing::Pending if tokio::time::Instant::now() >= deadline => {
                    return Err(format!("it was not ready within {limit:?}"))
                }
                Standing::Pending => tokio::time::sleep(START_POLL).await,
            }
        }
    }

    /// The pod's latest events and the end of its log, for an error message. Both are the
    /// cluster's and the sandbox's text: passed on as data, bounded.
    async fn why_not_running(&self, cluster: &Cluster, name: &str) -> String {
        let mut text = String::new();
        let events: Api<Event> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
        let lp = ListParams::default().fields(&format!("involvedObject.name={name}"));
        if let Ok(Ok(list)) = tokio::time::timeout(Duration::from_secs(5), events.list(&lp)).await {
            let mut items = list.items;
            items.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
            let start = items.len().saturating_sub(EVENTS_QUOTED);
            let quoted: Vec<String> = items[start..]
                .iter()
                .map(|e| {
                    format!(
                        "{} {}: {}",
                        e.type_.as_deref().unwrap_or("Normal"),
                        e.reason.as_deref().unwrap_or("-"),
                        e.message.as_deref().unwrap_or("").trim()
                    )
                })
                .collect();
            if !quoted.is_empty() {
                text.push_str(&format!("; its events: {}", quoted.join(" | ")));
            }
        }
        let lp = LogParams {
            container: Some(CONTAINER.into()),
            tail_lines: Some(20),
            limit_bytes: Some(LOG_TAIL_BYTES as i64 * 4),
            ..Default::default()
        };
        if let Ok(Ok(log)) = tokio::time::timeout(Duration::from_secs(5), cluster.pods().logs(name, &lp)).await {
            let mut tail = Tail::new(LOG_TAIL_BYTES);
            tail.push(log.as_bytes());
            let log = tail.text();
            let log = log.trim();
            if !log.is_empty() {
                text.push_str(&format!("; its log ends: {log}"));
            }
        }
        text
    }

    async fn delete_pod(&self, cluster: &Cluster, name: &str) -> Result<(), ProviderError> {
        match cluster.pods().delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if status(&e) == Some(404) => Ok(()),
            Err(e) => Err(api_error("deleting the pod", e)),
        }
    }

    async fn make_workdir(&self, sandbox: &SandboxRow, dir: &str, owner: Option<String>) -> Result<(), ProviderError> {
        let pod = self.pod(sandbox).await?;
        fallback::make_workdir(&pod, sandbox, dir, owner, None).await
    }

    /// What `create` does once the pod exists; an error here deletes it.
    async fn start(&self, sandbox: &mut SandboxRow, opts: &Options, token: &str) -> Result<(), ProviderError> {
        let cluster = self.cluster().await?.clone();
        let name = pod_name(&sandbox.id);
        let limit = self.settings.start_timeout();
        let pod = match self.wait_ready(sandbox, limit).await {
            Ok(p) => p,
            Err(why) => {
                let detail = self.why_not_running(&cluster, &name).await;
                return Err(ProviderError::DaemonStart(format!(
                    "pod {name} of image {:?} did not become ready: {why}{detail}",
                    opts.image
                )));
            }
        };
        sandbox.envd_token = Some(token.to_string());
        sandbox.workdir = opts.workdir.clone();
        sandbox.envd_pid = None;
        sandbox.isolation = Isolation::Container;
        if let Some(w) = &opts.workdir {
            self.make_workdir(sandbox, w, opts.user.clone()).await?;
        }
        if !opts.daemon {
            sandbox.envd_url = None;
            sandbox.daemon = false;
            return Ok(());
        }
        let Some((url, envd)) = self.envd(&cluster, sandbox, &pod) else {
            return Err(ProviderError::DaemonStart(format!("pod {name} is ready but has no IP")));
        };
        if !Self::answers(&envd, DAEMON_ANSWER).await {
            let detail = self.why_not_running(&cluster, &name).await;
            return Err(ProviderError::DaemonStart(format!(
                "pod {name} is ready but its daemon did not answer the relay on port {ENVD_PORT} \
                 (reached by {}){detail}",
                cluster.reach.as_str()
            )));
        }
        sandbox.envd_url = url;
        sandbox.daemon = true;
        Ok(())
    }
}

#[tonic::async_trait]
impl Provider for KubernetesProvider {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    async fn create(&self, sandbox: &mut SandboxRow) -> Result<(), ProviderError> {
        let opts = Options::parse(&sandbox.options)?;
        if !options::valid_label_value(&sandbox.name) {
            return Err(bad(format!(
                "sandbox name {:?}: on kubernetes it is a label value, so it must end with a letter or digit",
                sandbox.name
            )));
        }
        let cluster = self.cluster().await?.clone();
        let token = crate::random::hex(32);
        let spec = pod::spec(sandbox, &opts, &token);
        let name = pod_name(&sandbox.id);
        match cluster.pods().create(&PostParams::default(), &spec).await {
            Ok(_) => {}
            Err(e) if status(&e) == Some(409) => {
                return Err(ProviderError::Engine(format!("creating the pod: a pod named {name} exists")))
            }
            Err(e) => return Err(api_error("creating the pod", e)),
        }
        // From here on a failure deletes the pod again.
        if let Err(e) = self.start(sandbox, &opts, &token).await {
            if let Err(undo) = self.delete_pod(&cluster, &name).await {
                events::CleanupFailed { what: "deleting a pod that did not start", error: &undo.to_string() }.emit();
            }
            return Err(e);
        }
        events::PodStarted { sandbox: &sandbox.name, pod: &name, image: &opts.image, daemon: sandbox.daemon }.emit();
        Ok(())
    }

    async fn daemon(&self, sandbox: &mut SandboxRow) -> Result<Option<Envd>, ProviderError> {
        let cluster = self.cluster().await?.clone();
        let pod = self.get_pod(sandbox).await?;
        if let Standing::Failed(why) = standing(&pod) {
            return Err(gone(sandbox, &why));
        }
        let opts = Options::parse(&sandbox.options)?;
        if !opts.daemon {
            sandbox.daemon = false;
            return Ok(None);
        }
        match self.envd(&cluster, sandbox, &pod) {
            Some((url, envd)) if Self::answers(&envd, Duration::ZERO).await => {
                sandbox.envd_url = url;
                sandbox.daemon = true;
                Ok(Some(envd))
            }
            _ => {
                sandbox.daemon = false;
                Ok(None)
            }
        }
    }

    async fn pause(&self, _sandbox: &mut SandboxRow) -> Result<(), ProviderError> {
        Err(ProviderError::Unsupported("pausing (Kubernetes cannot freeze a pod)", "kubernetes"))
    }

    async fn resume(&self, _sandbox: &mut SandboxRow) -> Result<(), ProviderError> {
        Err(ProviderError::Unsupported("resuming (Kubernetes cannot freeze a pod)", "kubernetes"))
    }

    async fn destroy(&self, sandbox: &SandboxRow) -> Result<(), ProviderError> {
        let cluster = self.cluster().await?.clone();
        let name = pod_name(&sandbox.id);
        self.delete_pod(&cluster, &name).await?;
        events::PodDeleted { sandbox: &sandbox.name, pod: &name }.emit();
        Ok(())
    }

    async fn exec(
        &self,
        sandbox: &SandboxRow,
        command: &str,
        cwd: Option<&str>,
        env: &[(String, String)],
        timeout: Duration,
    ) -> Result<ExecOutput, ProviderError> {
        let pod = self.pod(sandbox).await?;
        fallback::exec(&pod, sandbox, command, cwd, None, env, timeout).await
    }
}
