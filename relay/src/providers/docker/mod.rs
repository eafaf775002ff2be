//! The `docker` provider: each sandbox is a container made from a LOCAL image through the Docker
//! Engine API (bollard). hangar never pulls: an image missing on the Docker host is the client's
//! mistake (`ProviderError::ImageNotFound`, a 400).
//!
//! - The container is `hangar-<sandbox id>`, labelled `hangar.sandbox=<id>` and
//!   `hangar.sandbox.name=<name>`, and gets its own envd access token in
//!   `HANGAR_ENVD_ACCESS_TOKEN` (kept in the sandbox row's `envd_token`).
//! - Its daemon, when the image has one (the image label `hangar.envd=true` says so, and creation
//!   then waits for it), is reached at the container's IP on port 49983 (on the network the
//!   `network` option names, else the default bridge). A container without a daemon is normal:
//!   exec falls back to the Engine's exec API.
//! - Pause and resume are the Engine's (cgroup freezer): everything in the container stops.
//!
//! Invariant: the Docker socket is reached lazily. The relay starts without Docker; a docker
//! sandbox then fails with `ProviderError::Unreachable`, and the next call tries again.
//!
//! This file is the provider itself: connecting to the Engine and each sandbox's lifecycle
//! (create, daemon, pause, resume, destroy). Beside it: `options` (a sandbox's options, validated),
//! `engine` (the Engine's answers in the provider's terms) and `exec` (the primitive of the shared
//! fallback exec, `providers::fallback`: a program started through the Engine's exec API).
mod engine;
mod exec;
mod options;

use std::{collections::HashMap, sync::Arc, time::Duration};

use bollard::{
    models::{ContainerCreateBody, ContainerInspectResponse, ContainerStateStatusEnum, HostConfig},
    query_parameters::{
        CreateContainerOptionsBuilder, DownloadFromContainerOptionsBuilder, LogsOptionsBuilder,
        RemoveContainerOptionsBuilder, StopContainerOptionsBuilder,
    },
    Docker,
};
use futures::StreamExt;
use tokio::sync::OnceCell;

use self::engine::{answer, container_ip, engine, env_of, first_file, gone, has_daemon, state_of, status};
use self::options::Options;
use super::options::{bad, ENV_TOKEN, ENV_USER, ENV_WORKDIR};
use super::{fallback, ExecOutput, Provider, ProviderError};
use crate::{
    envd::Envd,
    events,
    store::{Isolation, SandboxRow},
    text::Tail,
};

/// E2B's envd port, where hangar-envd listens inside a container.
const ENVD_PORT: u16 = 49983;
/// The label naming the sandbox a container belongs to.
const LABEL_SANDBOX: &str = "hangar.sandbox";
/// The label with the sandbox's name.
const LABEL_SANDBOX_NAME: &str = "hangar.sandbox.name";
/// The image label saying hangar-envd is the entrypoint (value `true`).
const LABEL_ENVD: &str = "hangar.envd";

/// How long one Engine request may take.
const ENGINE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `docker stop` waits after SIGTERM before SIGKILL when a sandbox is destroyed.
const STOP_SECONDS: i32 = 2;
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a (re)started container's daemon gets to answer.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// How much of a failed container's log an error message quotes.
const LOG_TAIL_BYTES: usize = 1024;

/// The largest archive of `/etc/passwd` read to check a user.
const MAX_PASSWD_ARCHIVE: usize = 1024 * 1024;

/// The container of a sandbox. Sandbox ids are relay-made (`sbx_<hex>`), never client text.
fn container_name(sandbox: &SandboxRow) -> String {
    format!("hangar-{}", sandbox.id)
}

pub struct DockerProvider {
    client: Arc<OnceCell<Docker>>,
}

impl Default for DockerProvider {
    fn default() -> Self {
        Self::new()
    }
}

async fn connect() -> Result<Docker, ProviderError> {
    let docker = Docker::connect_with_local_defaults()
        .map_err(|e| engine("connecting to Docker", e))?
        .with_timeout(ENGINE_TIMEOUT);
    // The Engine may be older than bollard's API version: speak the older one.
    let docker = tokio::time::timeout(Duration::from_secs(10), docker.negotiate_version())
        .await
        .map_err(|_| {
            ProviderError::Unreachable("connecting to Docker: Docker is not reachable: no answer within 10 s".into())
        })?
        .map_err(|e| engine("connecting to Docker", e))?;
    let version = docker.client_version();
    events::DockerConnected { api_version: &format!("{}.{}", version.major_version, version.minor_version) }.emit();
    Ok(docker)
}

impl DockerProvider {
    /// A provider that connects to Docker (`DOCKER_HOST=unix://...`, else
    /// `/var/run/docker.sock`) on first use.
    pub fn new() -> Self {
        Self { client: Arc::new(OnceCell::new()) }
    }

    /// Tries to connect in the background, so the relay's log says at start whether Docker is
    /// there. A failure is only logged: calls try again.
    pub fn connect_in_background(&self) {
        let client = self.client.clone();
        tokio::spawn(async move {
            if let Err(e) = client.get_or_try_init(connect).await {
                events::DockerUnavailable { error: &e.to_string() }.emit();
            }
        });
    }

    async fn docker(&self) -> Result<&Docker, ProviderError> {
        self.client.get_or_try_init(connect).await
    }

    async fn inspect(&self, sandbox: &SandboxRow) -> Result<ContainerInspectResponse, ProviderError> {
        let docker = self.docker().await?;
        match docker.inspect_container(&container_name(sandbox), None).await {
            Ok(i) => Ok(i),
            Err(e) if status(&e) == Some(404) => Err(gone(sandbox)),
            Err(e) => Err(engine("inspecting the container", e)),
        }
    }

    /// Asks the daemon at the container's address until it answers or `limit` passes (at least
    /// once).
    async fn find_daemon(
        &self,
        sandbox: &SandboxRow,
        info: &ContainerInspectResponse,
        limit: Duration,
    ) -> Option<(String, Envd)> {
        let ip = container_ip(info)?;
        let token = sandbox.envd_token.as_deref()?;
        let url =
            if ip.contains(':') { format!("http://[{ip}]:{ENVD_PORT}") } else { format!("http://{ip}:{ENVD_PORT}") };
        let envd = Envd::new(&url, token).ok()?;
        let start = tokio::time::Instant::now();
        let (deadline, mut next_check) = (start + limit, start + Duration::from_secs(1));
        loop {
            if envd.alive(HEALTH_TIMEOUT).await.is_ok() {
                return Some((url, envd));
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return None;
            }
            // A container that exited will not answer: stop waiting.
            if now >= next_check {
                next_check = now + Duration::from_secs(1);
                match self.inspect(sandbox).await {
                    Ok(i) if state_of(&i) == Some(ContainerStateStatusEnum::RUNNING) => {}
                    _ => return None,
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn remove(&self, docker: &Docker, name: &str) -> Result<(), ProviderError> {
        let opts = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
        match docker.remove_container(name, Some(opts)).await {
            Ok(()) => Ok(()),
            Err(e) if status(&e) == Some(404) => Ok(()),
            Err(e) => Err(engine("removing the container", e)),
        }
    }

    /// The container's state and the end of its log, for an error message. The log is the
    /// sandbox's text: passed on as data, at most `LOG_TAIL_BYTES`.
    async fn why_not_running(&self, docker: &Docker, name: &str) -> String {
        let state = match docker.inspect_container(name, None).await {
            Ok(info) => match info.state {
                Some(s) if s.running == Some(true) => "; the container is running".to_string(),
                Some(s) => format!("; the container exited with code {}", s.exit_code.unwrap_or(-1)),
                None => String::new(),
            },
            Err(_) => String::new(),
        };
        let opts = LogsOptionsBuilder::default().stdout(true).stderr(true).tail("20").build();
        let mut log = Tail::new(LOG_TAIL_BYTES);
        let mut lines = docker.logs(name, Some(opts));
        let read = async {
            while let Some(Ok(chunk)) = lines.next().await {
                log.push(chunk.as_ref());
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
        let text = log.text();
        let text = text.trim();
        if text.is_empty() {
            state
        } else {
            format!("{state}; its log ends: {text}")
        }
    }

    /// A `user` the image does not know is the client's error, found before the container starts
    /// (its daemon would exit on it; `docker exec` would fail at each command): the user must be
    /// in the image's `/etc/passwd`. An image whose passwd cannot be read plainly (a symlink, a
    /// huge file) is not checked.
    async fn check_user(&self, docker: &Docker, name: &str, user: &str) -> Result<(), ProviderError> {
        let opts = DownloadFromContainerOptionsBuilder::default().path("/etc/passwd").build();
        let mut archive = docker.download_from_container(name, Some(opts));
        let mut tar = Vec::new();
        while let Some(chunk) = archive.next().await {
            match chunk {
                Ok(b) if tar.len() + b.len() <= MAX_PASSWD_ARCHIVE => tar.extend_from_slice(&b),
                Ok(_) => return Ok(()),
                Err(e) if status(&e) == Some(404) => {
                    return Err(bad(format!("user {user:?}: the image has no /etc/passwd")));
                }
                Err(e) => return Err(engine("reading the image's /etc/passwd", e)),
            }
        }
        let Some(passwd) = first_file(&tar) else { return Ok(()) };
        let known = String::from_utf8_lossy(passwd).lines().any(|l| l.split(':').next() == Some(user));
        if known {
            Ok(())
        } else {
            Err(bad(format!("user {user:?} is not in the image's /etc/passwd")))
        }
    }

    /// A `network` must be on the Docker host already (hangar never creates one) and be one a
    /// container can join by name: a missing one is the client's error, named.
    async fn check_network(&self, docker: &Docker, name: &str) -> Result<(), ProviderError> {
        let net = match docker.inspect_network(name, None).await {
            Ok(n) => n,
            Err(e) if status(&e) == Some(404) => {
                return Err(bad(format!(
                    "network {name:?} is not on the Docker host (hangar never creates networks: \
                     docker network create {name})"
                )))
            }
            Err(e) => return Err(engine(&format!("inspecting network {name:?}"), e)),
        };
        // `host` and `none` are refused by name already; these drivers are the same modes under
        // another name or ID.
        match net.driver.as_deref() {
            Some(d @ ("host" | "null")) => {
                Err(bad(format!("network {name:?}: its driver {d:?} cannot hold a sandbox")))
            }
            _ => Ok(()),
        }
    }

    /// Makes the workdir as root: the sandbox's user may not be allowed to.
    async fn make_workdir(&self, sandbox: &SandboxRow, dir: &str, owner: Option<String>) -> Result<(), ProviderError> {
        let container = self.container(sandbox).await?;
        fallback::make_workdir(&container, sandbox, dir, owner, Some("0".into())).await
    }
}

#[tonic::async_trait]
impl Provider for DockerProvider {
    fn name(&self) -> &'static str {
        "docker"
    }

    async fn create(&self, sandbox: &mut SandboxRow) -> Result<(), ProviderError> {
        let opts = Options::parse(&sandbox.options)?;
        let docker = self.docker().await?;
        // Never pull: the image must be on the Docker host.
        let image = match docker.inspect_image(&opts.image).await {
            Ok(i) => i,
            Err(e) if status(&e) == Some(404) => return Err(ProviderError::ImageNotFound(opts.image)),
            Err(e) if status(&e) == Some(400) => return Err(bad(format!("image {:?}: {}", opts.image, answer(&e)))),
            Err(e) => return Err(engine(&format!("inspecting image {:?}", opts.image), e)),
        };
        // Never make a network either: a named one must exist, and be one a container joins.
        if let Some(net) = &opts.network {
            self.check_network(docker, net).await?;
        }
        let image_config = image.config.unwrap_or_default();
        let image_env = image_config.env.clone().unwrap_or_default();
        let daemon = has_daemon(image_config.labels.as_ref());
        let workdir = opts
            .workdir
            .clone()
            .or_else(|| env_of(&image_env, ENV_WORKDIR).map(str::to_string))
            .or_else(|| image_config.working_dir.clone())
            .filter(|w| !w.is_empty());

        let token = crate::random::hex(32);
        let mut env = vec![format!("{ENV_TOKEN}={token}")];
        if let Some(u) = &opts.user {
            env.push(format!("{ENV_USER}={u}"));
        }
        if let Some(w) = &workdir {
            env.push(format!("{ENV_WORKDIR}={w}"));
        }
        env.extend(opts.env.iter().map(|(k, v)| format!("{k}={v}")));
        // The daemon gives its processes only PATH and its global variables: pass the sandbox's
        // variables to it as globals, after the image's own arguments.
        let cmd = (daemon && !opts.env.is_empty()).then(|| {
            let mut cmd = image_config.cmd.clone().unwrap_or_default();
            for (k, v) in &opts.env {
                cmd.push("--env".into());
                cmd.push(format!("{k}={v}"));
            }
            cmd
        });
        let name = container_name(sandbox);
        let labels = HashMap::from([
            (LABEL_SANDBOX.to_string(), sandbox.id.clone()),
            (LABEL_SANDBOX_NAME.to_string(), sandbox.name.clone()),
        ]);
        let body = ContainerCreateBody {
            image: Some(opts.image.clone()),
            env: Some(env),
            cmd,
            labels: Some(labels),
            host_config: Some(HostConfig {
                memory: opts.memory_mb.map(|m| (m as i64) * 1024 * 1024),
                nano_cpus: opts.cpus.map(|c| (c * 1e9) as i64),
                // Docker's default bridge unless a network is named.
                network_mode: opts.network.clone(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let create = CreateContainerOptionsBuilder::default().name(&name).build();
        match docker.create_container(Some(create), body).await {
            Ok(_) => {}
            Err(e) if status(&e) == Some(404) => return Err(ProviderError::ImageNotFound(opts.image)),
            Err(e) if status(&e) == Some(400) => return Err(bad(format!("creating the container: {}", answer(&e)))),
            Err(e) => return Err(engine("creating the container", e)),
        }
        // From here on a failure removes the container again.
        let started = async {
            if let Some(u) = &opts.user {
                self.check_user(docker, &name, u).await?;
            }
            docker.start_container(&name, None).await.map_err(|e| engine("starting the container", e))?;
            if let Some(w) = &opts.workdir {
                let owner = opts
                    .user
                    .clone()
                    .or_else(|| env_of(&image_env, ENV_USER).map(str::to_string))
                    .or_else(|| image_config.user.clone())
                    .filter(|u| !u.is_empty());
                self.make_workdir(sandbox, w, owner).await?;
            }
            let info = self.inspect(sandbox).await?;
            sandbox.envd_token = Some(token.clone());
            sandbox.workdir = workdir.clone();
            sandbox.envd_pid = None;
            sandbox.isolation = Isolation::Container;
            // An image with the daemon gets time to start it; any other is asked once.
            let limit = if daemon { START_TIMEOUT } else { Duration::ZERO };
            match self.find_daemon(sandbox, &info, limit).await {
                Some((url, _)) => {
                    sandbox.envd_url = Some(url);
                    sandbox.daemon = true;
                }
                None if daemon => {
                    return Err(ProviderError::DaemonStart(format!(
                        "image {:?} is labelled {LABEL_ENVD}=true but nothing answered on port {ENVD_PORT} \
                         (waited up to {START_TIMEOUT:?}){}",
                        opts.image,
                        self.why_not_running(docker, &name).await
                    )))
                }
                None => {
                    sandbox.envd_url = None;
                    sandbox.daemon = false;
                }
            }
            Ok::<_, ProviderError>(())
        }
        .await;
        if let Err(e) = started {
            let _ = self.remove(docker, &name).await;
            return Err(e);
        }
        events::ContainerStarted {
            sandbox: &sandbox.name,
            container: &name,
            image: &opts.image,
            daemon: sandbox.daemon,
        }
        .emit();
        Ok(())
    }

    async fn daemon(&self, sandbox: &mut SandboxRow) -> Result<Option<Envd>, ProviderError> {
        let mut info = self.inspect(sandbox).await?;
        let mut restarted = false;
        match state_of(&info) {
            Some(ContainerStateStatusEnum::RUNNING) => {}
            Some(ContainerStateStatusEnum::PAUSED) => {
                return Err(ProviderError::Engine(format!(
                    "sandbox {:?}: its container is paused outside hangar; unpause it or resume the sandbox",
                    sandbox.name
                )))
            }
            _ => {
                // Stopped (its main process exited, or the machine restarted): start it again.
                // What ran in it is gone.
                let docker = self.docker().await?;
                docker
                    .start_container(&container_name(sandbox), None)
                    .await
                    .map_err(|e| engine("starting the stopped container", e))?;
                events::SandboxRestarted { sandbox: &sandbox.name }.emit();
                info = self.inspect(sandbox).await?;
                restarted = true;
            }
        }
        let labelled = has_daemon(info.config.as_ref().and_then(|c| c.labels.as_ref()));
        let limit = if restarted && labelled { START_TIMEOUT } else { Duration::ZERO };
        match self.find_daemon(sandbox, &info, limit).await {
            Some((url, envd)) => {
                sandbox.envd_url = Some(url);
                sandbox.daemon = true;
                Ok(Some(envd))
            }
            None => {
                sandbox.daemon = false;
                Ok(None)
            }
        }
    }

    async fn pause(&self, sandbox: &mut SandboxRow) -> Result<(), ProviderError> {
        let info = self.inspect(sandbox).await?;
        if state_of(&info) == Some(ContainerStateStatusEnum::PAUSED) {
            return Ok(());
        }
        let docker = self.docker().await?;
        docker.pause_container(&container_name(sandbox)).await.map_err(|e| engine("pausing the container", e))
    }

    async fn resume(&self, sandbox: &mut SandboxRow) -> Result<(), ProviderError> {
        let info = self.inspect(sandbox).await?;
        if state_of(&info) != Some(ContainerStateStatusEnum::PAUSED) {
            return Ok(());
        }
        let docker = self.docker().await?;
        docker.unpause_container(&container_name(sandbox)).await.map_err(|e| engine("resuming the container", e))
    }

    async fn destroy(&self, sandbox: &SandboxRow) -> Result<(), ProviderError> {
        let docker = self.docker().await?;
        let name = container_name(sandbox);
        let info = match self.inspect(sandbox).await {
            Ok(i) => i,
            Err(ProviderError::Gone(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        if state_of(&info) == Some(ContainerStateStatusEnum::PAUSED) {
            // A frozen container cannot take the stop signal.
            let _ = docker.unpause_container(&name).await;
        }
        if state_of(&info) != Some(ContainerStateStatusEnum::EXITED) {
            let stop = StopContainerOptionsBuilder::default().t(STOP_SECONDS).build();
            match docker.stop_container(&name, Some(stop)).await {
                Ok(()) => {}
                // Not running, or already gone: the removal below settles it.
                Err(e) if matches!(status(&e), Some(304 | 404 | 409)) => {}
                Err(e) => return Err(engine("stopping the container", e)),
            }
        }
        self.remove(docker, &name).await?;
        events::ContainerRemoved { sandbox: &sandbox.name, container: &name }.emit();
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
        let info = self.inspect(sandbox).await?;
        // Commands run as the sandbox's user, as the daemon's do: the `user` option or the
        // image's default user for the daemon, else the image's USER.
        let user = info
            .config
            .as_ref()
            .and_then(|c| c.env.as_deref())
            .and_then(|env| env_of(env, ENV_USER))
            .map(str::to_string);
        let container = self.container(sandbox).await?;
        fallback::exec(&container, sandbox, command, cwd, user, env, timeout).await
    }
}
