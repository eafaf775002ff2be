//! hangar-envd: the daemon inside every sandbox. It speaks E2B envd's wire protocol (Connect and
//! gRPC on one port) plus hangar's extensions; see `docs/envd.md`.
//!
//! Layers, each knowing only the one below: `wire` (HTTP, Connect, gRPC) → `service` (RPC
//! semantics on generated message types) → `process` (processes, output logs, reaping), `watch`
//! (inotify directory watches), `follow` (log following) and `fs` (file operations acting as a
//! user), none of which knows RPC or HTTP types.
//!
//! `agent` is apart from the daemon: the agent-side commands (`hangar-envd question|progress|
//! approve`, or the binary invoked as `hangar-agent`), a small synchronous program that reaches a
//! person's inbox through files.
pub mod agent;
pub mod auth;
pub mod config;
pub mod error;
pub mod events;
pub mod follow;
pub mod fs;
pub mod process;
pub mod service;
pub mod settings;
pub mod system;
pub mod users;
pub mod watch;
pub mod wire;

use std::{net::SocketAddr, sync::Arc};

use thiserror::Error;

use config::Config;
use process::{Reaper, Table, Trees};
use service::Core;
use settings::{Defaults, Settings};
use users::User;

#[derive(Debug, Error)]
pub enum StartError {
    #[error("reading the access token file {path}: {source}")]
    TokenFile { path: std::path::PathBuf, source: std::io::Error },
    #[error("default user: {0}")]
    User(#[from] error::RpcError),
    #[error("binding {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("listening for signals: {0}")]
    Signals(std::io::Error),
    #[error(transparent)]
    Trees(#[from] process::TreeError),
}

/// A daemon bound to its port; `run` serves it.
pub struct Daemon {
    server: wire::Server,
    reaper: Arc<Reaper>,
    table: Arc<Table>,
    watches: Arc<watch::Registry>,
}

impl Daemon {
    /// Sets everything up and binds the port. Must run inside a tokio runtime.
    pub async fn bind(config: &Config) -> Result<Daemon, StartError> {
        Reaper::become_subreaper();
        let token = match &config.access_token_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|source| StartError::TokenFile { path: path.clone(), source })?
                    .trim()
                    .to_string(),
            ),
            None => config.access_token.clone(),
        };
        let own = User::current()?;
        let user = match &config.default_user {
            Some(name) if users::can_switch_users() => User::by_name(name)?,
            Some(name) if *name != own.name => {
                tracing::warn!(requested = %name, acting_as = %own.name, "not root: every process runs as the daemon's own user");
                own
            }
            _ => own,
        };
        let settings = Arc::new(Settings::new(Defaults {
            env: config.env.iter().cloned().collect(),
            user,
            workdir: config.default_workdir.clone(),
        }));
        let reaper = Arc::new(Reaper::default());
        let trees = Trees::start(config.cgroups, &reaper).await?;
        let table = Table::new(reaper.clone(), trees, config.ring_bytes, config.exited_retention());
        let watches = watch::Registry::new(config.watch_settings());
        let core = Arc::new(Core {
            table: table.clone(),
            settings,
            max_message_bytes: config.max_message_bytes,
            max_watches: config.max_watches,
            watches: watches.clone(),
            follows: crate::follow::Follows::new(config.max_follows),
        });
        let services = if config.e2b_only { wire::Services::E2bOnly } else { wire::Services::All };
        let app = wire::app(core, Arc::new(auth::AccessToken::new(token)), services);
        let addr = SocketAddr::new(config.listen, config.port);
        let server =
            wire::Server::bind(addr, app, services).await.map_err(|source| StartError::Bind { addr, source })?;
        Ok(Daemon { server, reaper, table, watches })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.server.local_addr().ok()
    }

    /// Serves until SIGTERM or SIGINT, then kills every process it started (and all they
    /// started) before it returns: none outlives the daemon unseen.
    pub async fn run(self) -> Result<(), StartError> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).map_err(StartError::Signals)?;
        let mut int = signal(SignalKind::interrupt()).map_err(StartError::Signals)?;
        if let Some(addr) = self.local_addr() {
            events::Listening { addr }.emit();
        }
        let reaper = tokio::spawn(self.reaper.run());
        let sweeper = tokio::spawn(self.table.clone().run_sweeper());
        let watcher_sweeper = tokio::spawn(self.watches.run_sweeper());
        let result = tokio::select! {
            r = self.server.serve() => r.map_err(|source| StartError::Bind { addr: SocketAddr::from(([0, 0, 0, 0], 0)), source }),
            _ = term.recv() => Ok(()),
            _ = int.recv() => Ok(()),
        };
        // The reaper still runs: the killed processes are reaped while shutdown waits for them.
        self.table.shutdown().await;
        reaper.abort();
        sweeper.abort();
        watcher_sweeper.abort();
        result
    }
}
