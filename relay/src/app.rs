//! The application: building the handles every request shares (`handles::Relay`), binding them
//! to a port, and serving the APIs until a signal. The binary only parses flags and calls these.
use std::{net::SocketAddr, sync::Arc};

use crate::{
    api, auth, config::Config, events, exec, feed, fleet, handles::Relay, inbox, jobs, processes, providers, recovery,
    revocation, sandboxes, secrets, sessions, store, streams, watch,
};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("state directory {path}: {source}")]
    StateDir { path: std::path::PathBuf, source: std::io::Error },
    #[error("state store: {0}")]
    Store(#[from] store::StoreError),
    #[error("MAC key: {0}")]
    Key(std::io::Error),
    #[error("binding {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("the default sandbox: {0}")]
    DefaultSandbox(crate::error::Error),
    #[error("harness profiles {path}: {message}")]
    Harnesses { path: std::path::PathBuf, message: String },
    #[error("secrets: {0}")]
    Secrets(crate::error::Error),
    #[error("the e2b provider's settings: {0}")]
    E2b(String),
}

/// A relay bound to its port, with the admin secret to show if one was generated.
pub struct Bound {
    pub listener: tokio::net::TcpListener,
    pub relay: Arc<Relay>,
    pub generated_admin_secret: Option<String>,
    /// `Host` values the MCP endpoint accepts.
    pub mcp_allowed_hosts: Vec<String>,
    /// What `serve` recovers from a crash while it already serves.
    pub recovery: recovery::Recovery,
    /// How often revoked tokens' streams are looked for (`revocation::recheck`).
    pub recheck: std::time::Duration,
}

/// What each of the relay's threads does as it starts: asks for the configured scheduling slice
/// (`--sched-slice-us`), a refusal logged once.
pub fn thread_start(slice_us: u32) -> impl Fn() + Clone + Send + Sync + 'static {
    move || hangar_sched::request_for_thread(slice_us, |error| events::SchedSliceRefused { slice_us, error }.emit())
}

pub async fn bind(config: &Config) -> Result<Bound, StartError> {
    let dir = &config.state_dir;
    let io = |source| StartError::StateDir { path: dir.clone(), source };
    std::fs::create_dir_all(dir).map_err(io)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    }
    let store = Arc::new(store::Store::open(&dir.join("relay.sqlite"), thread_start(config.sched_slice_us)).await?);
    let key = auth::MacKey::load_or_create(&dir.join("mac.key")).map_err(StartError::Key)?;

    let mut generated_admin_secret = None;
    // An empty variable is no token: it must never become a secret that an empty header matches.
    match config.admin_token.as_deref().filter(|t| !t.trim().is_empty()) {
        Some(secret) if auth::verify(&store, secret).await?.is_none() => {
            store.insert_token(&auth::adopt("admin", store::Scope::Admin, secret)).await?;
        }
        Some(_) => {}
        None if !store.any_admin().await? => {
            let (row, secret) = auth::mint("admin", store::Scope::Admin);
            store.insert_token(&row).await?;
            generated_admin_secret = Some(secret);
        }
        None => {}
    }

    let local = providers::local::LocalProvider::new(
        dir.join("sandboxes"),
        config.envd_bin(),
        config.test_disable_isolation,
        config.local_disk_mib,
    )
    .map_err(io)?;
    let reason = match local.support() {
        providers::local::Support::Namespaces { .. } => None,
        providers::local::Support::Unavailable(why) => Some(why.as_str()),
    };
    events::LocalIsolation {
        isolation: if reason.is_some() { "none" } else { "namespaces" },
        reason,
        unisolated_allowed: config.allow_unisolated_sandboxes,
    }
    .emit();
    match local.disk() {
        providers::local::DiskSupport::Images { default_mib, .. } => {
            events::LocalDisk { default_mib: Some(*default_mib), reason: None }.emit()
        }
        providers::local::DiskSupport::Unavailable(why) => {
            events::LocalDisk { default_mib: None, reason: Some(why) }.emit()
        }
    }
    // Docker is reached lazily: the relay starts without it, and says in its log whether it is there.
    let docker = providers::docker::DockerProvider::new();
    docker.connect_in_background();
    // So is the cluster; its watch on sandbox pods reports vanished pods to `sessions::gone`.
    let (gone, vanished) = sessions::gone::channel();
    let kubernetes = providers::kubernetes::KubernetesProvider::new(config.kubernetes.clone(), gone);
    kubernetes.watch_in_background();
    // E2B is reached only when an e2b sandbox is used: without a key the relay starts all the same.
    let e2b = providers::e2b::E2bProvider::new(&config.e2b).map_err(StartError::E2b)?;
    let streams = streams::Streams::new(config.limits.clone());
    let feed = feed::Feed::new();
    let sandboxes = Arc::new(sandboxes::Sandboxes::new(
        store.clone(),
        streams.clone(),
        feed.clone(),
        vec![Box::new(local), Box::new(docker), Box::new(kubernetes), Box::new(e2b)],
        config.allow_unisolated_sandboxes,
    ));
    let harnesses = match &config.sessions.harnesses {
        None => hangar_agents::harness::Harnesses::builtin(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| StartError::Harnesses { path: path.clone(), message: e.to_string() })?;
            hangar_agents::harness::Harnesses::with_file(&text)
                .map_err(|e| StartError::Harnesses { path: path.clone(), message: e.to_string() })?
        }
    };
    let s = &config.sessions;
    let settings = sessions::Settings {
        max_runs_per_credential: s.max_runs_per_credential.max(1),
        max_starting: s.max_starting.max(1),
        usage_warn_pct: s.usage_warn_pct,
        usage_gate_pct: s.usage_gate_pct,
        poll: s.poll(),
        probe: s.probe(),
        follow_logs: s.stream_turn_logs,
        retention_days: s.event_retention_days.max(0.0),
        max_events: s.event_max.max(1),
        turn_event_max: s.turn_event_max.max(1),
        log_max_bytes: s.turn_log_max_bytes.max(64 * 1024),
        ask_expiry: s.inbox_expiry(),
    };
    let secrets = Arc::new(secrets::Secrets::new(store.clone()).await.map_err(StartError::Secrets)?);
    // This run of the relay, in the tags of the commands it starts.
    let run = crate::random::hex(4);
    let processes = processes::Processes::new(
        sandboxes.clone(),
        store.clone(),
        streams.clone(),
        key.clone(),
        config.limits.clone(),
    );
    let revoker =
        Arc::new(revocation::Revoker { store: store.clone(), streams: streams.clone(), processes: processes.clone() });
    let execs = exec::Execs::new(
        sandboxes.clone(),
        streams.clone(),
        store.clone(),
        key.clone(),
        run.clone(),
        config.limits.clone(),
    );
    let sessions = sessions::Sessions::new(
        sessions::Uses {
            store: store.clone(),
            sandboxes: sandboxes.clone(),
            secrets: secrets.clone(),
            feed: feed.clone(),
            streams: streams.clone(),
            key: key.clone(),
        },
        harnesses,
        settings,
    );
    let inbox = inbox::Inbox::new(
        inbox::Uses {
            store: store.clone(),
            sandboxes: sandboxes.clone(),
            sessions: sessions.clone(),
            secrets: secrets.clone(),
            feed: feed.clone(),
        },
        store.open_items().await?,
        config.sessions.inbox_expiry(),
    );
    let fleet = Arc::new(fleet::Fleet::new(config.sessions.max_runs_per_credential, inbox.clone()));
    fleet.load(&store, &secrets.redactor()).await?;
    let jobs = jobs::Jobs::new(jobs::Uses {
        store: store.clone(),
        sandboxes: sandboxes.clone(),
        sessions: sessions.clone(),
        secrets: secrets.clone(),
        feed: feed.clone(),
    });
    let watches = watch::Watches::new(sandboxes.clone(), streams.clone(), config.limits.buffer_bytes);
    let recovery = recovery::Recovery {
        sandboxes: sandboxes.clone(),
        store: store.clone(),
        processes: processes.clone(),
        execs: execs.clone(),
        key,
        run,
    };
    let relay = Arc::new(Relay {
        sandboxes,
        watches,
        processes,
        execs,
        revoker,
        streams,
        sessions: sessions.clone(),
        jobs,
        inbox,
        fleet: fleet.clone(),
        secrets: secrets.clone(),
        tickets: auth::tickets::Tickets::new(config.ticket_lifetime()),
        tokens: auth::Tokens::new(store.clone(), feed.clone()),
    });
    feed.subscribe(Arc::new(fleet::Keeper { fleet, secrets }));
    feed.subscribe(Arc::new(inbox::Subscriber { inbox: Arc::downgrade(&relay.inbox) }));
    relay.sandboxes.ensure_default().await.map_err(StartError::DefaultSandbox)?;
    tokio::spawn(sessions::gone::follow(relay.sessions.clone(), vanished));

    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| StartError::Bind { addr: config.listen, source })?;
    Ok(Bound {
        listener,
        relay,
        generated_admin_secret,
        mcp_allowed_hosts: config.mcp_allowed_hosts.clone(),
        recovery,
        recheck: config.limits.recheck(),
    })
}

/// Serves until SIGTERM or SIGINT. Then every open stream ends at once with `shutdown`, new
/// streams are refused, and the process exits once responses have flushed (10 s at the most).
/// Sandboxes and their processes keep running.
pub async fn serve(bound: Bound) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    if let Ok(addr) = bound.listener.local_addr() {
        events::Listening { addr }.emit();
    }
    let relay = bound.relay;
    let recheck = tokio::spawn(revocation::recheck(relay.revoker.clone(), bound.recheck));
    // What a crash left behind is dealt with while the relay already serves.
    let recovered = tokio::spawn(recovery::recover(bound.recovery));
    let unattached = tokio::spawn(processes::watch_unattached(relay.processes.clone()));
    // Live turns carry on from their saved positions.
    let turns = tokio::spawn(sessions::resume(relay.sessions.clone()));
    // So do live jobs (each from its recorded state).
    jobs::resume(&relay.jobs).await;
    // Open approvals and questions expire on time.
    let inbox_clock = tokio::spawn(inbox::run(relay.inbox.clone()));
    let signalled = async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    };
    let result = api::serve(bound.listener, relay, bound.mcp_allowed_hosts, signalled).await;
    recheck.abort();
    recovered.abort();
    unattached.abort();
    turns.abort();
    inbox_clock.abort();
    result
}
