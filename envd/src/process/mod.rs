//! Processes: spawning in their own process groups, output logs, input, signals, and the table
//! that finds them by pid or tag while they run and for a retention window after they exit.
//!
//! Invariant: this module knows nothing of RPCs, HTTP or protobuf. Callers hand it validated
//! specs and get typed errors back.
mod exit;
mod fdio;
pub mod output;
mod reaper;
mod spawn;

use std::{
    collections::HashMap,
    io,
    os::fd::OwnedFd,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant, SystemTime},
};

use bytes::Bytes;
use nix::{
    errno::Errno,
    sys::signal::{killpg, Signal},
    unistd::Pid,
};

pub use exit::ExitInfo;
pub use output::{Chunk, Event, OutputLog, StreamKind, Subscriber};
pub use reaper::Reaper;
pub use spawn::SpawnSpec;

use crate::events;
use fdio::AsyncFdIo;

/// How callers name a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    Pid(u32),
    /// Exact match on the whole tag.
    Tag(String),
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Selector::Pid(p) => write!(f, "pid {p}"),
            Selector::Tag(t) => write!(f, "tag {t:?}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("no process with {0}")]
    NotFound(Selector),
    #[error("process {0} has exited")]
    Exited(u32),
    #[error("a running process already has tag {0:?}")]
    TagInUse(String),
    #[error("cannot start {cmd:?}: {source}")]
    Spawn { cmd: String, source: io::Error },
    #[error("process {0} has no PTY")]
    NotPty(u32),
    #[error("process {0} has a PTY: send input as pty bytes")]
    IsPty(u32),
    #[error("process {0}'s stdin is closed or /dev/null")]
    StdinClosed(u32),
    #[error("process {0} has exited: its terminal is closed")]
    PtyClosed(u32),
    #[error("signal {0} is not a valid signal number")]
    BadSignal(i32),
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
}

/// The start parameters a caller asked for, kept for listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandInfo {
    pub cmd: String,
    pub args: Vec<String>,
    /// The environment the request added (not the whole environment).
    pub envs: HashMap<String, String>,
    pub cwd: Option<String>,
}

pub struct Process {
    pub pid: u32,
    pub tag: Option<String>,
    pub command: CommandInfo,
    pub user: String,
    pub started_at: SystemTime,
    pub log: Arc<OutputLog>,
    /// Held across a whole write, so two inputs never interleave their bytes.
    writing: tokio::sync::Mutex<()>,
    /// The write end of the stdin pipe, until it is closed (`CloseStdin`) or the process exits.
    /// An exited process keeps no descriptor: thousands are kept for the retention window, and
    /// a descriptor each would exhaust the daemon's limit. A write in flight holds its own `Arc`,
    /// so closing never waits for a write the process does not read.
    stdin: Mutex<Option<Arc<AsyncFdIo>>>,
    /// The PTY master, until the process exited and its output was read to the end.
    pty: Mutex<Option<Arc<AsyncFdIo>>>,
    is_pty: bool,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process").field("pid", &self.pid).field("tag", &self.tag).finish()
    }
}

impl Process {
    pub fn is_pty(&self) -> bool {
        self.is_pty
    }

    fn stdin_pipe(&self) -> Option<Arc<AsyncFdIo>> {
        self.stdin.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn pty_master(&self) -> Option<Arc<AsyncFdIo>> {
        self.pty.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Closes the stdin pipe's write end (the process sees end of file once nobody else holds it).
    fn drop_stdin(&self) {
        self.stdin.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn drop_pty(&self) {
        self.pty.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    pub fn running(&self) -> bool {
        self.log.exit().is_none()
    }

    /// Sends `sig` to the whole process group. A group with nobody left is `Exited`.
    pub fn signal(&self, sig: Signal) -> Result<(), ProcessError> {
        match killpg(Pid::from_raw(self.pid as i32), sig) {
            Ok(()) => Ok(()),
            Err(Errno::ESRCH) => Err(ProcessError::Exited(self.pid)),
            Err(e) => Err(ProcessError::Io { context: format!("signalling group {}", self.pid), source: e.into() }),
        }
    }

    /// Whether anyone is left in the process group.
    pub fn group_alive(&self) -> bool {
        killpg(Pid::from_raw(self.pid as i32), None).is_ok()
    }

    /// Sends `sig`, then SIGKILL after `grace` if anyone in the group is still alive.
    pub fn signal_escalating(self: &Arc<Self>, sig: Signal, grace: Option<Duration>) -> Result<(), ProcessError> {
        self.signal(sig)?;
        if let Some(grace) = grace {
            let p = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                if p.group_alive() {
                    let _ = p.signal(Signal::SIGKILL);
                }
            });
        }
        Ok(())
    }

    /// Kills the group at `deadline` unless the process finished first.
    pub fn kill_at(self: &Arc<Self>, deadline: Instant) {
        let p = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline.into()) => {
                    if !p.log.finished() {
                        events::ProcessDeadline { pid: p.pid }.emit();
                        let _ = p.signal(Signal::SIGKILL);
                    }
                }
                _ = p.log.wait_finished() => {}
            }
        });
    }

    pub async fn write_stdin(&self, data: &[u8]) -> Result<(), ProcessError> {
        if self.is_pty() {
            return Err(ProcessError::IsPty(self.pid));
        }
        let _serialized = self.writing.lock().await;
        let pipe = self.stdin_pipe().ok_or(ProcessError::StdinClosed(self.pid))?;
        pipe.write_all(data).await.map_err(|e| {
            if e.raw_os_error() == Some(libc::EPIPE) {
                ProcessError::StdinClosed(self.pid)
            } else {
                ProcessError::Io { context: format!("writing to process {}'s stdin", self.pid), source: e }
            }
        })
    }

    pub async fn write_pty(&self, data: &[u8]) -> Result<(), ProcessError> {
        if !self.is_pty() {
            return Err(ProcessError::NotPty(self.pid));
        }
        let _serialized = self.writing.lock().await;
        let pty = self.pty_master().ok_or(ProcessError::PtyClosed(self.pid))?;
        pty.write_all(data)
            .await
            .map_err(|e| ProcessError::Io { context: format!("writing to process {}'s PTY", self.pid), source: e })
    }

    pub async fn close_stdin(&self) -> Result<(), ProcessError> {
        if self.is_pty() {
            return Err(ProcessError::IsPty(self.pid));
        }
        self.drop_stdin();
        Ok(())
    }

    pub fn resize(&self, cols: u16, rows: u16) -> Result<(), ProcessError> {
        if !self.is_pty() {
            return Err(ProcessError::NotPty(self.pid));
        }
        let pty = self.pty_master().ok_or(ProcessError::PtyClosed(self.pid))?;
        spawn::resize(pty.raw(), cols, rows)
            .map_err(|e| ProcessError::Io { context: format!("resizing process {}'s PTY", self.pid), source: e })
    }
}

/// What `Table::start` needs beyond the fork itself.
#[derive(Debug, Clone)]
pub struct StartSpec {
    pub spawn: SpawnSpec,
    pub tag: Option<String>,
    pub command: CommandInfo,
}

/// The most exited processes kept at once; the oldest go first past it.
pub const MAX_EXITED_KEPT: usize = 1024;

pub struct Table {
    procs: Mutex<HashMap<u32, Arc<Process>>>,
    reaper: Arc<Reaper>,
    ring_bytes: u64,
    retention: Duration,
}

impl Table {
    pub fn new(reaper: Arc<Reaper>, ring_bytes: u64, retention: Duration) -> Arc<Self> {
        Arc::new(Self { procs: Mutex::new(HashMap::new()), reaper, ring_bytes, retention })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u32, Arc<Process>>> {
        self.procs.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn ring_bytes(&self) -> u64 {
        self.ring_bytes
    }

    pub fn retention(&self) -> Duration {
        self.retention
    }

    /// Starts a process and returns it with its primary subscriber (the one that may slow it).
    pub fn start(&self, spec: StartSpec) -> Result<(Arc<Process>, Subscriber), ProcessError> {
        let mut procs = self.lock();
        if let Some(tag) = &spec.tag {
            if procs.values().any(|p| p.tag.as_ref() == Some(tag) && p.running()) {
                return Err(ProcessError::TagInUse(tag.clone()));
            }
        }
        let cmd = spec.spawn.cmd.clone();
        let (spawned, exited) = self
            .reaper
            .spawn(|| spawn::spawn(&spec.spawn).map(|s| (s.pid, s)))
            .map_err(|source| ProcessError::Spawn { cmd, source })?;
        let pid = spawned.pid as u32;
        let io_err =
            |source: io::Error| ProcessError::Io { context: format!("setting up process {pid}'s I/O"), source };

        let outputs: Vec<(OwnedFd, StreamKind)> = match spawned.pty_master.as_ref() {
            Some(m) => vec![(m.try_clone().map_err(io_err)?, StreamKind::Pty)],
            None => [(spawned.stdout, StreamKind::Stdout), (spawned.stderr, StreamKind::Stderr)]
                .into_iter()
                .filter_map(|(fd, k)| fd.map(|fd| (fd, k)))
                .collect(),
        };
        let log = OutputLog::new(self.ring_bytes, outputs.len());
        let primary = log.subscribe(0, true);
        let stdin = spawned.stdin.map(AsyncFdIo::new).transpose().map_err(io_err)?.map(Arc::new);
        let pty = spawned.pty_master.map(AsyncFdIo::new).transpose().map_err(io_err)?.map(Arc::new);
        let process = Arc::new(Process {
            pid,
            tag: spec.tag,
            command: spec.command,
            user: spec.spawn.user.name.clone(),
            started_at: SystemTime::now(),
            log: log.clone(),
            writing: tokio::sync::Mutex::new(()),
            is_pty: pty.is_some(),
            stdin: Mutex::new(stdin),
            pty: Mutex::new(pty),
        });
        for (fd, kind) in outputs {
            let io = AsyncFdIo::new(fd).map_err(io_err)?;
            tokio::spawn(pump_output(io, kind, log.clone(), pid));
        }
        tokio::spawn({
            let process = process.clone();
            async move {
                let exit = match exited.await {
                    Ok(status) => ExitInfo::from_wait(status),
                    Err(_) => None,
                }
                .unwrap_or_else(|| ExitInfo {
                    error: Some("the daemon lost track of the process".into()),
                    ..ExitInfo::from_code(-1)
                });
                events::ProcessExited { pid, status: &exit.status }.emit();
                // Nobody reads the pipe now that the process is gone (as Go's `Cmd.Wait`, which
                // E2B's envd uses, closes it); its descendants read what they inherited.
                process.drop_stdin();
                process.log.set_exit(exit);
                // The master stays while the terminal has output to read: descendants may hold
                // the terminal after the process itself exited.
                process.log.wait_finished().await;
                process.drop_pty();
            }
        });
        // A reused pid replaces the exited process that had it before.
        procs.insert(pid, process.clone());
        Ok((process, primary))
    }

    /// A process by pid or exact tag: the running one with that tag, else the latest to exit.
    pub fn get(&self, sel: &Selector) -> Result<Arc<Process>, ProcessError> {
        let procs = self.lock();
        let found = match sel {
            Selector::Pid(pid) => procs.get(pid).cloned(),
            Selector::Tag(tag) => procs
                .values()
                .filter(|p| p.tag.as_deref() == Some(tag.as_str()))
                .max_by_key(|p| (p.running(), p.started_at))
                .cloned(),
        };
        found.ok_or_else(|| ProcessError::NotFound(sel.clone()))
    }

    /// Every process kept, oldest first.
    pub fn list(&self) -> Vec<Arc<Process>> {
        let mut v: Vec<_> = self.lock().values().cloned().collect();
        v.sort_by_key(|p| (p.started_at, p.pid));
        v
    }

    /// Forgets processes that finished more than the retention window ago, and the oldest
    /// finished ones past `MAX_EXITED_KEPT`.
    pub fn sweep(&self) {
        let now = SystemTime::now();
        let mut procs = self.lock();
        let mut finished: Vec<(SystemTime, u32)> = procs
            .values()
            .filter(|p| p.log.finished())
            .filter_map(|p| p.log.exit().map(|e| (e.ended_at, p.pid)))
            .collect();
        finished.sort();
        let over = finished.len().saturating_sub(MAX_EXITED_KEPT);
        for (i, (ended, pid)) in finished.into_iter().enumerate() {
            let expired = now.duration_since(ended).map(|d| d >= self.retention).unwrap_or(false);
            if i < over || expired {
                procs.remove(&pid);
            }
        }
    }

    pub async fn run_sweeper(self: Arc<Self>) {
        let mut tick =
            tokio::time::interval(Duration::from_secs(5).min(self.retention.max(Duration::from_millis(100))));
        loop {
            tick.tick().await;
            self.sweep();
        }
    }
}

/// Copies one output of a process into its log until end of file, pausing (and so not reading
/// the pipe) while the primary subscriber is a ring behind.
async fn pump_output(io: AsyncFdIo, kind: StreamKind, log: Arc<OutputLog>, pid: u32) {
    let mut buf = vec![0u8; log.read_chunk()];
    loop {
        match io.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => log.push_within_room(kind, Bytes::copy_from_slice(&buf[..n])).await,
            Err(e) => {
                tracing::warn!(pid, ?kind, error = %e, "reading process output failed");
                break;
            }
        }
    }
    log.close_output();
}
