//! Background processes: started, listed, read, fed and killed for the token that started them,
//! whichever backend the sandbox has. The APIs call only this façade; it owns the per-token
//! limit, ownership checks and stream admission, and returns one output type both render.
//!
//! Each backend is a `Backend`, and `Opened::backend` is the one place that picks it from the
//! sandbox's runner (`sandboxes::run`):
//! - `daemon` (`DaemonProcesses`): through the sandbox's daemon; ownership is a MAC'd envd tag.
//! - `followed` (`FollowedProcesses`): through a daemon without hangar's extensions (E2B's
//!   envd): the relay follows each process itself and keeps its ring; ownership is the same
//!   MAC'd tag.
//! - `polled` (`PolledProcesses`): without a daemon, detached through the provider's exec and
//!   polled; ownership is the relay's own row.
//! - `output`: the items a read yields and the one fold into `since / output / lost / next`.
mod daemon;
mod followed;
mod output;
mod polled;

use std::{
    collections::{HashMap, HashSet},
    pin::Pin,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{Stream, StreamExt};
use serde::Serialize;

use daemon::DaemonProcesses;
use followed::FollowedProcesses;
pub use output::{Chunk, OnData, Output, OutputStream, BACKLOG_QUIET};
pub use polled::watch_unattached;
use polled::PolledProcesses;

use crate::{
    auth::{Caller, MacKey},
    config::Limits,
    envd::Envd,
    error::{Error, Limit, Result},
    events,
    sandboxes::{
        run::{check_command, Runner},
        Sandboxes,
    },
    store::{SandboxRow, SandboxState, Store},
    streams::{self, Front, Kind, Reason},
    text::Encoding,
    time::Epoch,
};

/// SIGTERM, then SIGKILL this long after if anyone in its group is left.
pub const KILL_GRACE_MS: u32 = 3000;

/// A process id as the relay makes them: `p_` and 12 hex digits.
pub fn valid_id(id: &str) -> bool {
    id.len() == 14 && id.starts_with("p_") && id[2..].bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// A process id as the relay makes them; anything else is nobody's process.
fn check_id(id: &str) -> Result<()> {
    if valid_id(id) {
        Ok(())
    } else {
        Err(Error::not_found(format!("no process {id:?}")))
    }
}

/// Another token's process, or none: the caller cannot tell them apart.
fn not_yours(id: &str, sandbox: &str) -> Error {
    Error::not_found(format!("no process {id:?} of yours in sandbox {sandbox:?}"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProcessState {
    Running,
    Exited,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ProcessView {
    pub process_id: String,
    pub sandbox: String,
    pub pid: u32,
    pub command: String,
    pub state: ProcessState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    pub started_at: Option<Epoch>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Epoch>,
    /// Bytes written so far: where the next byte will be.
    pub output_bytes: u64,
    /// Found again by its tag, not started by this run of the relay.
    pub adopted: bool,
    /// Run without a daemon: detached, its output in a file the relay polls (no input).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub polled: bool,
    /// `"lost"`: adopted after a relay restart on a daemon without hangar's ring (E2B's envd),
    /// so what it wrote before is gone and its offsets count from the adoption.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub earlier_output: Option<&'static str>,
}

type Owner = (String, String);

/// Background processes: what they need (the sandboxes, the store, the streams, the MAC key and
/// the limits) and what the relay keeps about them across requests.
pub struct Processes {
    sandboxes: Arc<Sandboxes>,
    store: Arc<Store>,
    streams: Arc<streams::Streams>,
    key: MacKey,
    limits: Limits,
    /// (sandbox id, process id) of those this run of the relay started: the others are adopted.
    started: Mutex<HashSet<Owner>>,
    /// One lock per (token, sandbox): counting the running processes and starting one more
    /// happen under it, so concurrent starts never pass the per-token limit together.
    starting: Mutex<HashMap<Owner, Arc<tokio::sync::Mutex<()>>>>,
    /// The processes the relay follows itself, on daemons without hangar's extensions.
    followed: followed::Registry,
}

impl Processes {
    pub fn new(
        sandboxes: Arc<Sandboxes>,
        store: Arc<Store>,
        streams: Arc<streams::Streams>,
        key: MacKey,
        limits: Limits,
    ) -> Arc<Processes> {
        Arc::new(Processes {
            sandboxes,
            store,
            streams,
            key,
            limits,
            started: Mutex::default(),
            starting: Mutex::default(),
            followed: followed::Registry::default(),
        })
    }

    fn remember(&self, sandbox: &str, id: &str) {
        self.started.lock().unwrap_or_else(|p| p.into_inner()).insert((sandbox.to_string(), id.to_string()));
    }

    fn adopted(&self, sandbox: &str, id: &str) -> bool {
        !self.started.lock().unwrap_or_else(|p| p.into_inner()).contains(&(sandbox.to_string(), id.to_string()))
    }

    fn start_lock(&self, token: &str, sandbox: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.starting.lock().unwrap_or_else(|p| p.into_inner());
        // Locks nobody holds or waits for are dropped, so the map stays as small as the starts in flight.
        map.retain(|_, l| Arc::strong_count(l) > 1);
        map.entry((token.to_string(), sandbox.to_string())).or_default().clone()
    }
}

/// What every backend does for one caller in one sandbox: the façade's operations, each
/// answered the way that backend's sandbox can.
#[tonic::async_trait]
trait Backend: Send + Sync {
    /// The caller's processes in the sandbox, running and recently exited.
    async fn list(&self) -> Result<Vec<ProcessView>>;
    /// One of the caller's processes (another token's is not found).
    async fn get(&self, id: &str) -> Result<ProcessView>;
    /// Starts `command` (bash -lc) under `id`; returns as soon as it runs.
    async fn start(&self, id: String, command: &str, cwd: Option<String>) -> Result<ProcessView>;
    async fn input(&self, id: &str, data: Vec<u8>, eof: bool) -> Result<()>;
    /// SIGTERM to its process group, SIGKILL `KILL_GRACE_MS` later if it is still running.
    async fn kill(&self, id: &str) -> Result<()>;
    /// The output from `since`, then live, then the end; ownership checked before anything
    /// streams. The stream outlives the request, so it may hold the relay.
    async fn follow(&self, p: &Arc<Processes>, id: &str, since: Option<u64>, encoding: Encoding) -> Result<Items>;
}

/// A sandbox opened for its background processes: its runner, and the pids the relay started
/// its processes with there (`DaemonProcesses::started`).
struct Opened<'a> {
    runner: Runner<'a>,
    started: HashMap<String, u32>,
}

impl<'a> Opened<'a> {
    async fn of(p: &'a Processes, row: SandboxRow) -> Result<Opened<'a>> {
        let runner = Runner::open(&p.sandboxes, row).await?;
        let started = match runner.envd {
            Some(_) => p.store.started_pids(&runner.row.id).await?,
            None => HashMap::new(),
        };
        Ok(Opened { runner, started })
    }

    fn row(&self) -> &SandboxRow {
        &self.runner.row
    }

    /// The backend that serves the sandbox's processes: the one place that tells them apart.
    fn backend<'b>(&'b self, p: &'b Processes, caller: &'b Caller) -> Box<dyn Backend + 'b> {
        let (sandbox, started, key) = (&self.runner.row, &self.started, &p.key);
        match &self.runner.envd {
            // A daemon without hangar's extensions (E2B's envd): the relay follows each process.
            Some(envd) if envd.is_e2b() => {
                Box::new(FollowedProcesses { envd, key, caller, sandbox, started, registry: &p.followed })
            }
            Some(envd) => Box::new(DaemonProcesses {
                envd,
                key,
                caller,
                sandbox,
                started,
                processes: p,
                buffer_bytes: p.limits.buffer_bytes,
            }),
            None => Box::new(PolledProcesses { processes: p, runner: &self.runner, caller }),
        }
    }
}

/// The caller's sandbox opened, if the caller may work inside it (its isolation).
async fn open<'a>(p: &'a Processes, caller: &Caller, reference: &str) -> Result<Opened<'a>> {
    Opened::of(p, p.sandboxes.enter(reference, caller).await?).await
}

/// At a relay's start: follows again the running background processes `tokens` started in a
/// sandbox whose daemon is E2B's (their tags' MACs checked); how many.
pub async fn recover_followed(p: &Processes, row: &SandboxRow, envd: &Envd, tokens: &[String]) -> Result<usize> {
    let started = p.store.started_pids(&row.id).await?;
    followed::recover(envd, &p.key, &p.followed, row, &started, tokens).await
}

/// Starts `command` (bash -lc) and returns as soon as it runs, within
/// `HANGAR_BACKGROUND_MAX_PER_TOKEN` running processes per token and sandbox.
pub async fn start(
    p: &Processes,
    caller: &Caller,
    reference: &str,
    command: &str,
    cwd: Option<String>,
) -> Result<ProcessView> {
    check_command(command)?;
    let opened = open(p, caller, reference).await?;
    let (row, b) = (opened.row(), opened.backend(p, caller));
    let cwd = cwd.map(|c| p.sandboxes.resolve_cwd(row, &c)).transpose()?;
    let lock = p.start_lock(&caller.token_id, &row.id);
    let _held = lock.lock().await;
    let limit = p.limits.background_per_token;
    let running = b.list().await?.iter().filter(|p| p.state == ProcessState::Running).count();
    if running >= limit {
        let message =
            format!("this token already has {running} running background processes in this sandbox (limit {limit})");
        return Err(Error::Limit { limit: Limit::BackgroundPerToken, message });
    }
    let id = format!("p_{}", crate::random::hex(6));
    let view = b.start(id, command, cwd).await?;
    p.remember(&row.id, &view.process_id);
    if !view.polled {
        p.store.record_started(&row.id, &view.process_id, view.pid).await?;
    }
    Ok(view)
}

/// The caller's processes in the sandbox, running and recently exited.
pub async fn list(p: &Processes, caller: &Caller, reference: &str) -> Result<Vec<ProcessView>> {
    open(p, caller, reference).await?.backend(p, caller).list().await
}

/// One of the caller's processes (another token's is not found).
pub async fn get(p: &Processes, caller: &Caller, reference: &str, id: &str) -> Result<ProcessView> {
    check_id(id)?;
    open(p, caller, reference).await?.backend(p, caller).get(id).await
}

/// Writes to its stdin; `eof` closes it. Needs the daemon.
pub async fn input(p: &Processes, caller: &Caller, reference: &str, id: &str, data: Vec<u8>, eof: bool) -> Result<()> {
    check_id(id)?;
    if data.is_empty() && !eof {
        return Err(Error::invalid("nothing to do: give input, eof, or both"));
    }
    open(p, caller, reference).await?.backend(p, caller).input(id, data, eof).await
}

/// SIGTERM to its process group, SIGKILL 3 s later if it is still running.
pub async fn kill(p: &Processes, caller: &Caller, reference: &str, id: &str) -> Result<()> {
    check_id(id)?;
    open(p, caller, reference).await?.backend(p, caller).kill(id).await
}

/// Kills every running process `caller` has in the sandbox (its token was revoked); how many.
/// The relay's own doing, so no isolation rule applies.
pub async fn kill_all(p: &Processes, caller: &Caller, row: &SandboxRow) -> Result<usize> {
    let opened = Opened::of(p, row.clone()).await?;
    let b = opened.backend(p, caller);
    let running: Vec<ProcessView> = b.list().await?.into_iter().filter(|p| p.state == ProcessState::Running).collect();
    for p in &running {
        b.kill(&p.process_id).await?;
    }
    Ok(running.len())
}

type Items = Pin<Box<dyn Stream<Item = Output> + Send>>;

/// The output from `since` (default: all still kept), then live, then the end; with the
/// sandbox's id. Ownership is checked before anything streams.
async fn follow(
    p: &Arc<Processes>,
    caller: &Caller,
    reference: &str,
    id: &str,
    since: Option<u64>,
    encoding: Encoding,
) -> Result<(String, Items)> {
    check_id(id)?;
    let opened = open(p, caller, reference).await?;
    let items = opened.backend(p, caller).follow(p, id, since, encoding).await?;
    Ok((opened.row().id.clone(), items))
}

/// A process's output as an admitted stream: paced and capped like every stream, and ended by
/// the relay's closes (revocation, pause, destroy, shutdown, lifetime), each said as `Closed`.
/// With a daemon, its items were drained as they came: a reader more than
/// `HANGAR_STREAM_BUFFER_BYTES` behind gets a `Gap` for its oldest output, then goes on.
pub struct Attached {
    items: Items,
    admitted: streams::Stream,
    /// An item read and charged for, and when its pace lets it go (`None`: at once). Kept here
    /// so `next` stays cancel-safe.
    pending: Option<(Output, Option<tokio::time::Instant>)>,
    over: bool,
}

impl Attached {
    /// The next item; `None` after the last.
    pub async fn next(&mut self) -> Option<Output> {
        if self.over {
            return None;
        }
        if self.pending.is_none() {
            // A close first: a destroyed sandbox's daemon stream breaks too, and why is the destroy.
            let item = tokio::select! {
                biased;
                reason = self.admitted.closed() => Output::Closed { reason, message: None },
                item = self.items.next() => item.unwrap_or(Output::Closed {
                    reason: Reason::Error,
                    message: Some("the output stream ended early".into()),
                }),
            };
            let mut ready = None;
            let item = match &item {
                Output::Data { data, .. } => match self.admitted.charge(data.len() as u64) {
                    Ok(wait) => {
                        // No timer without a wait: tokio fires a timer at the next millisecond
                        // tick at the soonest, which cost each line up to a millisecond.
                        ready = (!wait.is_zero()).then(|| tokio::time::Instant::now() + wait);
                        item
                    }
                    Err(reason) => Output::Closed { reason, message: None },
                },
                _ => item,
            };
            self.pending = Some((item, ready));
        }
        if let Some((_, Some(ready))) = &self.pending {
            tokio::time::sleep_until(*ready).await;
        }
        let (item, _) = self.pending.take()?;
        match &item {
            Output::End { .. } => self.admitted.end(Reason::Done),
            Output::Closed { reason, .. } => self.admitted.end(*reason),
            _ => {}
        }
        self.over = item.is_last();
        Some(item)
    }

    /// Records why the reader stopped early (the first reason given wins).
    pub fn end(&mut self, reason: Reason) {
        self.admitted.end(reason);
    }

    /// The items as a stream, ending after the last.
    pub fn into_stream(self) -> impl Stream<Item = Output> + Send {
        futures::stream::unfold(self, |mut a| async move { a.next().await.map(|o| (o, a)) })
    }
}

/// Follows a process's output as a stream admitted against the limits (`front` says who serves it).
pub async fn attach(
    p: &Arc<Processes>,
    caller: &Caller,
    reference: &str,
    id: &str,
    since: Option<u64>,
    encoding: Encoding,
    front: Front,
) -> Result<Attached> {
    let (sandbox_id, items) = follow(p, caller, reference, id, since, encoding).await?;
    let admitted = p.streams.open(caller, &sandbox_id, Kind::Process, front)?;
    Ok(Attached { items, admitted, pending: None, over: false })
}

/// How a read goes: from where, how long it waits for more, how much text it keeps.
pub struct Read {
    pub since: Option<u64>,
    /// Text (lossy for bytes that are not UTF-8), or base64 of the exact bytes.
    pub encoding: Encoding,
    pub wait: Duration,
    pub tail: usize,
    /// Read as a stream admitted for this front end (it waits, so it counts); `None` for a
    /// read that returns what was already written.
    pub admit: Option<Front>,
}

/// Reads a process's output (what was written before the read, and what comes during its
/// wait); `on_data` sees each piece as it comes. The process as it is after the read.
pub async fn read(
    p: &Arc<Processes>,
    caller: &Caller,
    reference: &str,
    id: &str,
    how: Read,
    on_data: OnData<'_>,
) -> Result<(ProcessView, Chunk)> {
    let chunk = match how.admit {
        Some(front) => {
            let mut attached = attach(p, caller, reference, id, how.since, how.encoding, front).await?;
            let chunk = {
                let items = futures::stream::unfold(&mut attached, |a| async move {
                    let item = a.next().await?;
                    Some((item, a))
                });
                output::fold(items, how.since, how.encoding, how.wait, how.tail, on_data).await
            };
            // A read that ended by its own choice (its wait was over) ends as done.
            attached.end(if chunk.is_ok() { Reason::Done } else { Reason::Client });
            chunk?
        }
        None => {
            let (_, items) = follow(p, caller, reference, id, how.since, how.encoding).await?;
            output::fold(items, how.since, how.encoding, how.wait, how.tail, on_data).await?
        }
    };
    let view = get(p, caller, reference, id).await?;
    Ok((view, chunk))
}

/// Ends what a revoked token has running in every running sandbox; failures are said, not dropped.
pub async fn kill_everywhere(p: &Processes, caller: &Caller) -> usize {
    let sandboxes = match p.sandboxes.list().await {
        Ok(s) => s,
        Err(e) => {
            events::RevocationIncomplete { token: &caller.token_id, sandbox: "*", error: &e.to_string() }.emit();
            return 0;
        }
    };
    let mut killed = 0;
    for row in sandboxes.iter().filter(|s| s.state == SandboxState::Running) {
        match kill_all(p, caller, row).await {
            Ok(n) => killed += n,
            Err(e) => {
                events::RevocationIncomplete { token: &caller.token_id, sandbox: &row.name, error: &e.to_string() }
                    .emit()
            }
        }
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_the_relays_own_form() {
        assert!(valid_id("p_0123456789ab"));
        assert!(!valid_id("p_0123456789AB"));
        assert!(!valid_id("p_0123"));
        assert!(!valid_id("../../etc/pas"));
    }
}
