//! The RPC handlers: tonic's generated service traits, implemented once over the process core.
//! gRPC reaches them through tonic; Connect through `wire::connect`, which builds the same
//! `tonic::Request`s. Either way a `CallContext` in the request's extensions says who calls.
//!
//! Invariant: nothing here parses HTTP; the transport hands over a `CallContext`.
//!
//! One file per service, named after it:
//! - `process.rs`: E2B's `process.Process`.
//! - `filesystem.rs`: E2B's `filesystem.Filesystem`, routing to `file_ops.rs` (its unary file
//!   operations) and `watch.rs` (its watches, and what hangar's `Files/WatchDir` shares with them).
//! - `processes.rs`: hangar's `hangar.envd.v1.Processes` (attach, signal, list).
//! - `files.rs`: hangar's `hangar.envd.v1.Files` (follow, watch).
//! - `daemon.rs`: hangar's `hangar.envd.v1.Daemon` (info).
mod daemon;
mod file_ops;
mod files;
mod filesystem;
mod process;
mod processes;
mod watch;

use std::{
    path::{Path, PathBuf},
    pin::Pin,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use futures::Stream;
use tokio_stream::StreamExt as _;

pub use daemon::DaemonService;
pub(crate) use file_ops::user_path;
pub use files::FilesService;
pub use filesystem::FilesystemService;
pub use process::ProcessService;
pub use processes::ProcessesService;

use crate::{
    error::RpcError,
    events,
    process::{Event, ProcessError, Selector, Subscriber, Table},
    settings::Settings,
    users::User,
};

/// The E2B envd version reported to the e2b SDKs, which gate features on it.
pub const ENVD_VERSION: &str = "0.6.4";

/// Who is calling and under what limits; built by the transport from the request's headers.
#[derive(Debug, Clone)]
pub struct CallContext {
    pub user: User,
    /// The caller's deadline (`Connect-Timeout-Ms` or `grpc-timeout`).
    pub deadline: Option<Instant>,
    /// After this long without events a stream sends a keepalive.
    pub keepalive: Duration,
}

/// What every handler shares.
pub struct Core {
    pub table: Arc<Table>,
    pub settings: Arc<Settings>,
    pub max_message_bytes: u64,
    pub max_watches: u32,
    /// Directory watches: their slots and the polled watchers.
    pub watches: Arc<crate::watch::Registry>,
    /// Follows: their shared inotify instance and their slots.
    pub follows: crate::follow::Follows,
}

pub(crate) fn context<T>(req: &tonic::Request<T>) -> Result<CallContext, RpcError> {
    req.extensions()
        .get::<CallContext>()
        .cloned()
        .ok_or_else(|| RpcError::internal("the transport did not attach a call context"))
}

pub(crate) type RpcStream<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send + 'static>>;

impl From<ProcessError> for RpcError {
    fn from(e: ProcessError) -> Self {
        let msg = e.to_string();
        match &e {
            ProcessError::NotFound(_) | ProcessError::Exited(_) => RpcError::not_found(msg),
            ProcessError::TagInUse(_) => RpcError::already_exists(msg),
            ProcessError::NotPty(_)
            | ProcessError::IsPty(_)
            | ProcessError::StdinClosed(_)
            | ProcessError::PtyClosed(_) => RpcError::failed_precondition(msg),
            ProcessError::BadSignal(_) => RpcError::invalid_argument(msg),
            ProcessError::ShuttingDown => RpcError::unavailable(msg),
            ProcessError::Spawn { source, .. }
                if matches!(
                    source.raw_os_error(),
                    Some(libc::ENOENT | libc::EACCES | libc::ENOTDIR | libc::ENOEXEC)
                ) =>
            {
                RpcError::invalid_argument(msg)
            }
            // Out of descriptors or processes: the caller may retry once others have exited.
            ProcessError::Spawn { source, .. }
                if matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::EAGAIN)) =>
            {
                RpcError::resource_exhausted(msg)
            }
            ProcessError::Spawn { .. } | ProcessError::Io { .. } => RpcError::internal(msg),
        }
    }
}

/// Logs a failed call and turns it into a status.
pub(crate) fn fail(method: &str, e: impl Into<RpcError>) -> tonic::Status {
    let e: RpcError = e.into();
    events::RpcFailed { method, code: e.code, message: &e.message }.emit();
    e.into()
}

pub(crate) fn selector(sel: Option<hangar_proto::process::ProcessSelector>) -> Result<Selector, RpcError> {
    use hangar_proto::process::process_selector::Selector as S;
    match sel.and_then(|s| s.selector) {
        Some(S::Pid(pid)) => Ok(Selector::Pid(pid)),
        Some(S::Tag(tag)) => Ok(Selector::Tag(tag)),
        None => Err(RpcError::invalid_argument("process selector (pid or tag) is required")),
    }
}

pub(crate) fn timestamp(t: SystemTime) -> hangar_proto::Timestamp {
    t.into()
}

/// Resolves a path for `user`: `~` and relative paths against the default workdir or home.
pub(crate) fn resolve_path(p: &str, user: &User, workdir: Option<&Path>) -> PathBuf {
    if p == "~" {
        return user.home.clone();
    }
    if let Some(rest) = p.strip_prefix("~/") {
        return user.home.join(rest);
    }
    let path = Path::new(p);
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        workdir.unwrap_or(&user.home).join(path)
    }
}

/// Resolves at the call's deadline, or never without one.
pub(crate) async fn until_deadline(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

/// When a stream has been silent for its keepalive interval: one timer for the stream's life,
/// moved only when it fires. A timer made for each wait cost every message a timer-wheel
/// insertion and removal; now a message costs a clock read.
pub(crate) struct Silence {
    every: Duration,
    last: tokio::time::Instant,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl Silence {
    pub(crate) fn new(every: Duration) -> Silence {
        let last = tokio::time::Instant::now();
        Silence { every, last, timer: Box::pin(tokio::time::sleep_until(last + every)) }
    }

    /// Something was sent: the silence starts again.
    pub(crate) fn sent(&mut self) {
        self.last = tokio::time::Instant::now();
    }

    /// Resolves once nothing was sent for the interval, and counts the keepalive the caller
    /// then sends. Cancel-safe: dropped unresolved, the timer stays as it was.
    pub(crate) async fn elapsed(&mut self) {
        loop {
            self.timer.as_mut().await;
            let due = self.last + self.every;
            if tokio::time::Instant::now() >= due {
                self.sent();
                self.timer.as_mut().reset(self.last + self.every);
                return;
            }
            self.timer.as_mut().reset(due);
        }
    }
}

/// What a process stream sees between its events.
pub(crate) enum Pumped {
    Event(Event),
    KeepAlive,
    Deadline,
}

/// Drives a subscriber: its events, keepalives after `keepalive` of silence, and `Deadline`
/// (then nothing) at `deadline`. Ends after `End`.
pub(crate) fn pump(
    mut sub: Subscriber,
    keepalive: Duration,
    deadline: Option<Instant>,
) -> impl Stream<Item = Pumped> + Send + 'static {
    async_stream::stream! {
        let until = until_deadline(deadline);
        tokio::pin!(until);
        let mut silence = Silence::new(keepalive);
        loop {
            tokio::select! {
                ev = sub.next() => {
                    silence.sent();
                    let end = matches!(ev, Event::End { .. });
                    yield Pumped::Event(ev);
                    if end { break; }
                }
                () = silence.elapsed() => yield Pumped::KeepAlive,
                _ = &mut until => { yield Pumped::Deadline; break; }
            }
        }
    }
}

/// Maps a pump to an RPC's messages; `None` skips an item.
pub(crate) fn rpc_stream<T: Send + 'static>(
    items: impl Stream<Item = Pumped> + Send + 'static,
    first: Option<T>,
    map: impl Fn(Pumped) -> Option<Result<T, tonic::Status>> + Send + 'static,
) -> RpcStream<T> {
    let head = tokio_stream::iter(first.map(Ok));
    Box::pin(head.chain(items.filter_map(map)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::{sleep, Instant};

    #[tokio::test(start_paused = true)]
    async fn a_keepalive_comes_after_a_whole_interval_of_silence() {
        let t0 = Instant::now();
        let mut silence = Silence::new(Duration::from_secs(10));
        sleep(Duration::from_secs(6)).await;
        silence.sent();
        silence.elapsed().await;
        assert_eq!(t0.elapsed(), Duration::from_secs(16), "counted from the last message");
        silence.elapsed().await;
        assert_eq!(t0.elapsed(), Duration::from_secs(26), "and from the keepalive before");
    }

    #[tokio::test(start_paused = true)]
    async fn messages_more_often_than_the_interval_hold_keepalives_back() {
        let mut silence = Silence::new(Duration::from_secs(10));
        for _ in 0..10 {
            tokio::select! {
                () = silence.elapsed() => panic!("a keepalive 3 s after a message"),
                () = sleep(Duration::from_secs(3)) => silence.sent(),
            }
        }
    }
}
