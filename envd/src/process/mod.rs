//! Processes: spawning in their own process groups (and cgroups, where the kernel allows), output
//! logs, input, signals, and the table that finds them by pid or tag while they run and for a
//! retention window after they exit.
//!
//! Invariant: this module knows nothing of RPCs, HTTP or protobuf. Callers hand it validated
//! specs and get typed errors back.
mod exit;
mod fdio;
mod heap;
pub mod output;
mod reaper;
mod spawn;
mod tree;

use std::{
    collections::{HashMap, HashSet},
    io,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant, SystemTime},
};

use bytes::BytesMut;
use nix::{errno::Errno, sys::signal::Signal};

pub use exit::ExitInfo;
pub use output::{Chunk, Event, OutputLog, StreamKind, Subscriber};
pub use reaper::Reaper;
pub use spawn::SpawnSpec;
pub use tree::{CgroupPolicy, TreeError, Trees};

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
    #[error("the daemon is stopping")]
    ShuttingDown,
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
    /// Everything the process started: what a kill reaches.
    tree: Arc<tree::Tree>,
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

    /// Sends `sig` to the whole process group; SIGKILL goes further, to everything the process
    /// started (see [`Process::kill`]). A group with nobody left is `Exited`.
    pub fn signal(&self, sig: Signal) -> Result<(), ProcessError> {
        if sig == Signal::SIGKILL {
            return self.kill();
        }
        match self.tree.signal_group(sig) {
            Ok(()) => Ok(()),
            Err(Errno::ESRCH) => Err(ProcessError::Exited(self.pid)),
            Err(e) => Err(ProcessError::Io { context: format!("signalling group {}", self.pid), source: e.into() }),
        }
    }

    /// SIGKILLs the process and everything it started, descendants in sessions and groups of
    /// their own included, even after the process itself exited. `Exited` when nothing is left.
    pub fn kill(&self) -> Result<(), ProcessError> {
        match self.tree.kill() {
            Ok(true) => Ok(()),
            Ok(false) => Err(ProcessError::Exited(self.pid)),
            Err(source) => Err(ProcessError::Io { context: format!("killing process {}'s tree", self.pid), source }),
        }
    }

    /// Whether anything the process started (itself included) is still alive.
    pub fn tree_alive(&self) -> bool {
        self.tree.alive()
    }

    /// Sends `sig`, then kills everything the process started after `grace` if anything of it is
    /// still alive. A group with nobody left is not the end when the process left descendants in
    /// other groups: the escalation still comes for them.
    pub fn signal_escalating(self: &Arc<Self>, sig: Signal, grace: Option<Duration>) -> Result<(), ProcessError> {
        match self.signal(sig) {
            Ok(()) => {}
            Err(ProcessError::Exited(_)) if grace.is_some() && self.tree_alive() => {}
            Err(e) => return Err(e),
        }
        if let Some(grace) = grace {
            let p = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                if p.tree_alive() {
                    p.kill_logged();
                }
            });
        }
        Ok(())
    }

    /// Kills the process and everything it started at `deadline`, unless the process finished
    /// first (exited and its output closed: what it left running in the background then stays,
    /// as E2B's envd leaves it).
    pub fn kill_at(self: &Arc<Self>, deadline: Instant) {
        let p = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline.into()) => {
                    if !p.log.finished() {
                        events::ProcessDeadline { pid: p.pid }.emit();
                        p.kill_logged();
                    }
                }
                _ = p.log.wait_finished() => {}
            }
        });
    }

    /// A kill nobody waits for: a failure is an event.
    fn kill_logged(&self) {
        match self.kill() {
            Ok(()) | Err(ProcessError::Exited(_)) => {}
            Err(e) => events::KillFailed { pid: self.pid, error: &e }.emit(),
        }
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
    /// Tags of processes being started: taken under `procs`' lock (always locked after it), so
    /// two starts cannot both take a tag while neither is in the table yet.
    starting_tags: Mutex<HashSet<String>>,
    reaper: Arc<Reaper>,
    trees: Arc<Trees>,
    /// Set (under the table's lock) once shutdown began: no process starts after the kill.
    closing: std::sync::atomic::AtomicBool,
    ring_bytes: u64,
    retention: Duration,
}

impl Table {
    pub fn new(reaper: Arc<Reaper>, trees: Arc<Trees>, ring_bytes: u64, retention: Duration) -> Arc<Self> {
        Arc::new(Self {
            procs: Mutex::new(HashMap::new()),
            starting_tags: Mutex::new(HashSet::new()),
            reaper,
            trees,
            closing: std::sync::atomic::AtomicBool::new(false),
            ring_bytes,
            retention,
        })
    }

    pub fn uses_cgroups(&self) -> bool {
        self.trees.uses_cgroups()
    }

    /// The daemon is stopping: kills every process it started, and all they started.
    pub async fn shutdown(&self) {
        {
            let _procs = self.lock();
            self.closing.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        self.trees.shutdown().await;
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

    fn starting(&self) -> MutexGuard<'_, HashSet<String>> {
        self.starting_tags.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks that the daemon is not stopping and takes the tag for a start.
    fn reserve(&self, tag: Option<&str>) -> Result<TagTaken<'_>, ProcessError> {
        let procs = self.lock();
        if self.closing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(ProcessError::ShuttingDown);
        }
        if let Some(tag) = tag {
            let mut starting = self.starting();
            let running = procs.values().any(|p| p.tag.as_deref() == Some(tag) && p.running());
            if running || !starting.insert(tag.to_string()) {
                return Err(ProcessError::TagInUse(tag.to_string()));
            }
        }
        Ok(TagTaken { table: self, tag: tag.map(str::to_string) })
    }

    /// Starts a process and returns it with its primary subscriber (the one that may slow it).
    ///
    /// On a task of its own, so that a start runs to its end even when its caller is dropped (a
    /// client gone mid-start): a child cloned but not yet in the table would run unseen.
    pub async fn start(self: &Arc<Self>, spec: StartSpec) -> Result<(Arc<Process>, Subscriber), ProcessError> {
        let table = self.clone();
        match tokio::spawn(async move { table.start_now(spec).await }).await {
            Ok(started) => started,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // The runtime is going away: the daemon is stopping.
            Err(_) => Err(ProcessError::ShuttingDown),
        }
    }

    /// The table's lock is not held across the clone: starts queue on the reaper's (async) lock
    /// instead, and the clone itself runs on the blocking pool, so the streams of running
    /// processes go on meanwhile.
    async fn start_now(&self, mut spec: StartSpec) -> Result<(Arc<Process>, Subscriber), ProcessError> {
        let taken = self.reserve(spec.tag.as_deref())?;
        let (cmd, spec_user) = (spec.spawn.cmd.clone(), spec.spawn.user.name.clone());
        let prepared = self.trees.prepare();
        // Last, so a request's own HANGAR_PROCESS cannot stand in for the daemon's.
        spec.spawn.env.extend(prepared.mark());
        // The cgroup's descriptors stay open meanwhile: `prepared` lives until the clone is done,
        // and this runs to its end (see `start`).
        let (to_spawn, cgroup, user) = (spec.spawn, prepared.cgroup(), spec_user);
        let spawned = self.reaper.spawn(move || spawn::spawn(&to_spawn, cgroup).map(|s| (s.pid, s))).await;
        let (spawned, exited) = match spawned {
            Ok(s) => s,
            Err(source) => {
                self.trees.abandon(prepared);
                return Err(ProcessError::Spawn { cmd, source });
            }
        };
        let pid = spawned.pid as u32;
        let tree = self.trees.adopt(prepared, pid);
        let io_err =
            |source: io::Error| ProcessError::Io { context: format!("setting up process {pid}'s I/O"), source };
        // Out of descriptors, say, or the daemon is stopping. The process runs already: kill it,
        // or it would run unseen.
        let io = (|| -> io::Result<_> {
            let outputs: Vec<(AsyncFdIo, StreamKind)> = match spawned.pty_master.as_ref() {
                Some(m) => vec![(AsyncFdIo::new(m.try_clone()?)?, StreamKind::Pty)],
                None => [(spawned.stdout, StreamKind::Stdout), (spawned.stderr, StreamKind::Stderr)]
                    .into_iter()
                    .filter_map(|(fd, k)| fd.map(|fd| AsyncFdIo::new(fd).map(|io| (io, k))))
                    .collect::<io::Result<_>>()?,
            };
            let stdin = spawned.stdin.map(AsyncFdIo::new).transpose()?.map(Arc::new);
            let pty = spawned.pty_master.map(AsyncFdIo::new).transpose()?.map(Arc::new);
            Ok((outputs, stdin, pty))
        })()
        .map_err(io_err)
        // Shutdown may have begun during the fork: its kill did not see this process.
        .and_then(|io| {
            if self.closing.load(std::sync::atomic::Ordering::SeqCst) {
                Err(ProcessError::ShuttingDown)
            } else {
                Ok(io)
            }
        });
        let (outputs, stdin, pty) = match io {
            Ok(io) => io,
            Err(e) => {
                if let Err(error) = tree.kill() {
                    events::KillFailed { pid, error: &error }.emit();
                }
                let trees = self.trees.clone();
                tokio::spawn(async move {
                    let _ = exited.await;
                    trees.exited(&tree);
                });
                return Err(e);
            }
        };
        let log = OutputLog::new(self.ring_bytes, outputs.len());
        let primary = log.subscribe(0, true);
        let process = Arc::new(Process {
            pid,
            tag: spec.tag,
            command: spec.command,
            user,
            started_at: SystemTime::now(),
            log: log.clone(),
            writing: tokio::sync::Mutex::new(()),
            is_pty: pty.is_some(),
            stdin: Mutex::new(stdin),
            pty: Mutex::new(pty),
            tree,
        });
        for (io, kind) in outputs {
            tokio::spawn(pump_output(io, kind, log.clone(), pid));
        }
        tokio::spawn({
            let process = process.clone();
            let trees = self.trees.clone();
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
                trees.exited(&process.tree);
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
        // A reused pid replaces the exited process that had it before. The tag is let go after:
        // from here the running process holds it.
        self.lock().insert(pid, process.clone());
        drop(taken);
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
        drop(procs);
        // Trees outlive their process's entry: a tree still running keeps its cgroup.
        self.trees.sweep();
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

/// A tag held for a start in progress; let go when the start ends, however it ends.
struct TagTaken<'t> {
    table: &'t Table,
    tag: Option<String>,
}

impl Drop for TagTaken<'_> {
    fn drop(&mut self) {
        if let Some(tag) = &self.tag {
            self.table.starting().remove(tag);
        }
    }
}

/// Moves one output of a process into its log until end of file, pausing (and so not reading
/// the pipe) while the primary subscriber is a ring behind.
///
/// Reads land in the memory the ring keeps: each read fills the unused end of the current block,
/// and what it read is split off the block and handed to the log as is. So no byte is copied on
/// the way in, and a quiet process holds no read buffer of its own beyond its block's unused end
/// (which a short read never touches). A new block is taken when the current one has less than a
/// quarter of a read left, so reads stay large, and only once the pipe is readable: a stream
/// the process never writes to (stderr, often) holds no block. One whose last read filled its
/// block may take a new one on readiness that turns out stale (the read would block); the quiet
/// timer lets go of it.
///
/// An output quiet for [`QUIET`] lets go of its block and settles the log, which copies what
/// the ring holds of the process's blocks into pieces of their exact size: so a quiet process's
/// ring costs what it holds, not the blocks its reads landed in.
async fn pump_output(io: AsyncFdIo, kind: StreamKind, log: Arc<OutputLog>, pid: u32) {
    let chunk = log.read_chunk();
    let mut block = BytesMut::new();
    loop {
        // Biased: while there is output the timer is never polled, so never armed.
        let quiet = tokio::select! {
            biased;
            r = io.readable() => r.err(),
            () = tokio::time::sleep(QUIET) => {
                block = BytesMut::new();
                log.settle();
                heap::freed();
                io.readable().await.err()
            }
        };
        let read = match quiet {
            Some(e) => Err(e),
            None => read_into_block(&io, &mut block, chunk).await,
        };
        match read {
            Ok(0) => break,
            Ok(_) => log.push_within_room(kind, block.split().freeze()).await,
            // Back to waiting beside the timer: a read that filled its block leaves the fd
            // readable as far as tokio knows, and waiting inside the read instead kept a quiet
            // output's new block, and its ring unsettled, for as long as the process stayed
            // quiet (64 KiB a process in the memory benchmark's 64 full rings).
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => {
                tracing::warn!(pid, ?kind, error = %e, "reading process output failed");
                break;
            }
        }
    }
    drop(block);
    log.settle();
    heap::freed();
    log.close_output();
}

/// How long an output stays quiet before its pump lets go of its block and settles the log.
const QUIET: std::time::Duration = std::time::Duration::from_millis(500);

/// One read into `block`, first replacing it when little is left; called once the output is
/// readable (the pump's wait).
async fn read_into_block(io: &AsyncFdIo, block: &mut BytesMut, chunk: usize) -> io::Result<usize> {
    if block.capacity() - block.len() < chunk.div_ceil(4) {
        *block = BytesMut::with_capacity(chunk);
    }
    io.read_buf(block).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read that fills its block leaves the pipe readable as far as tokio knows; the pump
    /// must still go quiet, settle the ring and let go of its block when the process says
    /// nothing more (it used to wait inside the next read, away from its timer, for good).
    #[tokio::test]
    async fn an_output_that_fills_its_block_and_goes_quiet_settles() {
        let log = OutputLog::new(64 * 1024, 1);
        let chunk = log.read_chunk();
        let (r, w) = nix::unistd::pipe().expect("a pipe");
        let pump =
            tokio::spawn(pump_output(AsyncFdIo::new(r).expect("registered"), StreamKind::Stdout, log.clone(), 0));
        let mut w = std::fs::File::from(w);
        std::io::Write::write_all(&mut w, &vec![b'x'; chunk]).expect("written");
        let deadline = Instant::now() + QUIET * 10;
        while !(log.bounds() == (0, chunk as u64) && log.is_settled()) {
            assert!(Instant::now() < deadline, "not settled after {:?}: {:?}", QUIET * 10, log.bounds());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(w);
        tokio::time::timeout(Duration::from_secs(5), pump).await.expect("the pump ends at EOF").expect("no panic");
    }
}
