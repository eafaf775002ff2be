//! Background processes as the APIs see them: where a sandbox's live (its daemon, or detached
//! processes the relay polls without one), with the per-token limit and ownership checks. The
//! REST handlers and the MCP `process` tool both call these.
use std::pin::Pin;

use futures::Stream;

use crate::{
    auth::Caller,
    detached::{self, Detached},
    envd::Envd,
    error::ApiError,
    processes::{self, At, Output, ProcessView},
    store::SandboxRow,
    Relay,
};

/// A sandbox with its daemon, for one request.
pub struct Target {
    pub row: SandboxRow,
    pub envd: Envd,
}

impl Target {
    pub fn at<'a>(&'a self, relay: &'a Relay, caller: &'a Caller) -> At<'a> {
        At { envd: &self.envd, key: &relay.key, caller, sandbox: &self.row }
    }
}

/// Where a sandbox's background processes live: its daemon, or (without one) detached processes
/// the relay polls through the provider's exec.
pub enum Backend {
    Daemon(Target),
    Polled(SandboxRow),
}

/// The caller's backend in the sandbox `reference`. The caller's scope is checked by the API.
pub async fn backend(relay: &Relay, reference: &str) -> Result<Backend, ApiError> {
    let mut row = relay.sandboxes.get(&relay.store, reference)?;
    Ok(match relay.sandboxes.daemon(&relay.store, &mut row).await? {
        Some(envd) => Backend::Daemon(Target { row, envd }),
        None => Backend::Polled(row),
    })
}

/// A process id as the relay makes them; anything else is nobody's process.
pub fn check_id(id: &str) -> Result<(), ApiError> {
    if processes::valid_id(id) {
        Ok(())
    } else {
        Err(ApiError::not_found(format!("no process {id:?}")))
    }
}

/// Starts `command` (bash -lc) and returns at once, within `HANGAR_BACKGROUND_MAX_PER_TOKEN`.
pub async fn start(
    relay: &Relay,
    caller: &Caller,
    reference: &str,
    command: &str,
    cwd: Option<String>,
) -> Result<ProcessView, ApiError> {
    if command.trim().is_empty() {
        return Err(ApiError::bad_request("command must not be empty"));
    }
    let limit = relay.limits.background_per_token;
    let over = |running: usize| {
        (running >= limit).then(|| {
            ApiError::too_many(format!(
                "HANGAR_BACKGROUND_MAX_PER_TOKEN: this token already has {running} running background processes in this sandbox (limit {limit})"
            ))
        })
    };
    match backend(relay, reference).await? {
        Backend::Daemon(target) => {
            let cwd = cwd.map(|c| relay.sandboxes.resolve_path(&target.row, &c)).transpose()?;
            let at = target.at(relay, caller);
            let running = relay.processes.list(&at).await?.iter().filter(|p| p.state == "running").count();
            if let Some(e) = over(running) {
                return Err(e);
            }
            relay.processes.start(&at, command, cwd).await
        }
        Backend::Polled(row) => {
            let cwd = cwd.map(|c| relay.sandboxes.resolve_path(&row, &c)).transpose()?;
            let d = Detached { relay, sandbox: &row, caller };
            let running = d.list().await?.iter().filter(|p| p.state == "running").count();
            if let Some(e) = over(running) {
                return Err(e);
            }
            d.start(command, cwd.as_deref()).await
        }
    }
}

/// The caller's processes in the sandbox, running and recently exited.
pub async fn list(relay: &Relay, caller: &Caller, reference: &str) -> Result<Vec<ProcessView>, ApiError> {
    match backend(relay, reference).await? {
        Backend::Daemon(target) => relay.processes.list(&target.at(relay, caller)).await,
        Backend::Polled(row) => Detached { relay, sandbox: &row, caller }.list().await,
    }
}

/// One of the caller's processes (another token's is not found).
pub async fn get(relay: &Relay, caller: &Caller, reference: &str, id: &str) -> Result<ProcessView, ApiError> {
    check_id(id)?;
    match backend(relay, reference).await? {
        Backend::Daemon(target) => relay.processes.get(&target.at(relay, caller), id).await,
        Backend::Polled(row) => Detached { relay, sandbox: &row, caller }.get(id).await,
    }
}

/// Writes to its stdin; `eof` closes it. Needs the daemon.
pub async fn input(
    relay: &Relay,
    caller: &Caller,
    reference: &str,
    id: &str,
    data: Vec<u8>,
    eof: bool,
) -> Result<(), ApiError> {
    check_id(id)?;
    if data.is_empty() && !eof {
        return Err(ApiError::bad_request("nothing to do: give input, eof, or both"));
    }
    match backend(relay, reference).await? {
        Backend::Daemon(target) => relay.processes.input(&target.at(relay, caller), id, data, eof).await,
        Backend::Polled(row) => {
            Detached { relay, sandbox: &row, caller }.get(id).await?;
            Err(ApiError::unavailable(format!(
                "sandbox {:?} has no daemon: input to a background process needs the daemon",
                row.name
            )))
        }
    }
}

/// SIGTERM to its process group, SIGKILL 3 s later if it is still running.
pub async fn kill(relay: &Relay, caller: &Caller, reference: &str, id: &str) -> Result<(), ApiError> {
    check_id(id)?;
    match backend(relay, reference).await? {
        Backend::Daemon(target) => relay.processes.kill(&target.at(relay, caller), id).await,
        Backend::Polled(row) => Detached { relay, sandbox: &row, caller }.kill(id).await,
    }
}

/// A process's output from `since` (default: all still kept), then live, then its end; with the
/// sandbox's id, which the stream is admitted under. Ownership is checked before anything streams.
pub async fn follow(
    relay: &std::sync::Arc<Relay>,
    caller: &Caller,
    reference: &str,
    id: &str,
    since: Option<u64>,
) -> Result<(String, Pin<Box<dyn Stream<Item = Output> + Send>>), ApiError> {
    check_id(id)?;
    Ok(match backend(relay, reference).await? {
        Backend::Daemon(target) => {
            let output = relay.processes.attach(&target.at(relay, caller), id, since).await?;
            (target.row.id.clone(), Box::pin(output))
        }
        Backend::Polled(row) => {
            // Ownership first: another token's id is not found before any stream starts.
            Detached { relay, sandbox: &row, caller }.get(id).await?;
            let sandbox_id = row.id.clone();
            (sandbox_id, Box::pin(detached::output(relay.clone(), row, caller.clone(), id.to_string(), since)))
        }
    })
}
