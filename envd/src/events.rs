//! Every log line the daemon emits about its domain, from one typed place, so names and fields
//! stay consistent. No event carries a credential.
use std::{net::SocketAddr, path::Path};

const TARGET: &str = "hangar_envd";

pub struct Listening {
    pub addr: SocketAddr,
}
impl Listening {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "listening", addr = %self.addr, "hangar-envd listening");
    }
}

/// The kernel refused the serving thread's short scheduling slice (`hangar-sched`): the daemon serves
/// on the default slice, each line then possibly waiting for the writer to yield the CPU.
pub struct SchedSliceRefused<'a> {
    pub slice_us: u32,
    pub error: &'a std::io::Error,
}
impl SchedSliceRefused<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "sched_slice_refused", slice_us = self.slice_us, error = %self.error,
            "serving on the kernel's default scheduling slice");
    }
}

/// `HANGAR_LOG` did not parse: the daemon logs at `info`.
pub struct LogFilterInvalid<'a> {
    pub value: &'a str,
    pub error: &'a tracing_subscriber::filter::ParseError,
}
impl LogFilterInvalid<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "log_filter_invalid", value = self.value, error = %self.error,
            "HANGAR_LOG is not a list of `target=level` or a level; logging at info");
    }
}

pub struct AcceptFailed<'a> {
    pub error: &'a std::io::Error,
}
impl AcceptFailed<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "accept_failed", error = %self.error,
            "accepting a connection failed; retrying in 1 s");
    }
}

pub struct ProcessStarted<'a> {
    pub pid: u32,
    pub tag: Option<&'a str>,
    pub cmd: &'a str,
    pub user: &'a str,
    pub pty: bool,
}
impl ProcessStarted<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "process_started", pid = self.pid, tag = self.tag,
            cmd = self.cmd, user = self.user, pty = self.pty, "process started");
    }
}

pub struct ProcessExited<'a> {
    pub pid: u32,
    pub status: &'a str,
}
impl ProcessExited<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "process_exited", pid = self.pid, status = self.status, "process exited");
    }
}

pub struct ProcessDeadline {
    pub pid: u32,
}
impl ProcessDeadline {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "process_deadline", pid = self.pid, "process killed at its deadline");
    }
}

pub struct ProcessSignalled {
    pub pid: u32,
    pub signal: i32,
}
impl ProcessSignalled {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "process_signalled", pid = self.pid, signal = self.signal, "signal sent to process group");
    }
}

pub struct KillFailed<'a> {
    pub pid: u32,
    pub error: &'a dyn std::fmt::Display,
}
impl KillFailed<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "kill_failed", pid = self.pid, error = %self.error,
            "killing a process and what it started failed");
    }
}

pub struct CgroupsEnabled<'a> {
    pub parent: &'a Path,
}
impl CgroupsEnabled<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "cgroups_enabled", cgroup = %self.parent.display(),
            "each process runs in a cgroup of its own");
    }
}

pub struct CgroupsUnavailable<'a> {
    pub reason: &'a str,
}
impl CgroupsUnavailable<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "cgroups_unavailable", reason = self.reason,
            "no cgroups: what a process starts is found by its HANGAR_PROCESS mark");
    }
}

pub struct CgroupNotMade<'a> {
    pub path: &'a Path,
    pub error: &'a std::io::Error,
}
impl CgroupNotMade<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "cgroup_not_made", path = %self.path.display(), error = %self.error,
            "could not make a process's cgroup; it goes by its HANGAR_PROCESS mark");
    }
}

pub struct Clone3Refused<'a> {
    pub error: &'a std::io::Error,
}
impl Clone3Refused<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "clone3_refused", error = %self.error,
            "clone3 is refused here: processes move themselves into their cgroups before exec, which costs each start an RCU grace period");
    }
}

pub struct CgroupKillFailed<'a> {
    pub path: &'a Path,
    pub error: &'a std::io::Error,
}
impl CgroupKillFailed<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "cgroup_kill_failed", path = %self.path.display(), error = %self.error,
            "writing cgroup.kill failed");
    }
}

pub struct CgroupNotRemoved<'a> {
    pub path: &'a Path,
}
impl CgroupNotRemoved<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "cgroup_not_removed", path = %self.path.display(),
            "a cgroup is still busy and stays");
    }
}

/// A daemon that died (SIGKILL, a crash) left processes; this one killed them at start-up.
pub struct LeftoversKilled<'a> {
    pub instance: &'a str,
    pub processes: usize,
    pub cgroup: Option<&'a Path>,
}
impl LeftoversKilled<'_> {
    pub fn emit(self) {
        let cgroup = self.cgroup.map(|p| p.display().to_string());
        if self.processes > 0 {
            tracing::warn!(target: TARGET, event = "leftovers_killed", instance = self.instance, processes = self.processes,
                cgroup, "killed the processes a daemon that died left behind");
        } else {
            tracing::debug!(target: TARGET, event = "leftovers_killed", instance = self.instance, processes = 0,
                cgroup, "removed what a daemon that died left behind");
        }
    }
}

pub struct ShutdownKilled {
    pub processes: usize,
}
impl ShutdownKilled {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "shutdown_killed", processes = self.processes,
            "stopping: killed every process the daemon started");
    }
}

pub struct OrphanReaped {
    pub pid: i32,
}
impl OrphanReaped {
    pub fn emit(self) {
        tracing::debug!(target: TARGET, event = "orphan_reaped", pid = self.pid, "reaped an orphan");
    }
}

pub struct SubscriberGap {
    pub pid: u32,
    pub lost: u64,
}
impl SubscriberGap {
    pub fn emit(self) {
        tracing::debug!(target: TARGET, event = "subscriber_gap", pid = self.pid, lost = self.lost, "a subscriber fell behind the ring");
    }
}

pub struct RpcFailed<'a> {
    pub method: &'a str,
    pub code: tonic::Code,
    pub message: &'a str,
}
impl RpcFailed<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "rpc_failed", method = self.method, code = ?self.code, message = self.message, "rpc failed");
    }
}

pub struct AuthRefused<'a> {
    pub path: &'a str,
}
impl AuthRefused<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "auth_refused", path = self.path, "request without a valid access token");
    }
}

pub struct Initialized {
    pub token_set: bool,
    pub env_vars: usize,
}
impl Initialized {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "initialized", token_set = self.token_set, env_vars = self.env_vars, "init applied");
    }
}

pub struct CredentialsNotRestored {
    pub fsuid: u32,
    pub fsgid: u32,
}
impl CredentialsNotRestored {
    pub fn emit(self) {
        tracing::error!(target: TARGET, event = "credentials_not_restored", fsuid = self.fsuid, fsgid = self.fsgid,
            "a thread could not switch back to the daemon's own file-system identity; aborting");
    }
}

pub struct FileUploaded<'a> {
    pub path: &'a str,
    pub user: &'a str,
    pub bytes: u64,
}
impl FileUploaded<'_> {
    pub fn emit(self) {
        tracing::debug!(target: TARGET, event = "file_uploaded", path = self.path, user = self.user, bytes = self.bytes, "file written");
    }
}

pub struct FileTransferFailed<'a> {
    pub method: &'a str,
    pub query: &'a str,
    pub status: u16,
    pub message: &'a str,
}
impl FileTransferFailed<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "file_transfer_failed", method = self.method, query = self.query,
            status = self.status, message = self.message, "file transfer failed");
    }
}

pub struct WatchStarted<'a> {
    pub path: &'a Path,
}
impl WatchStarted<'_> {
    pub fn emit(self) {
        tracing::debug!(target: TARGET, event = "watch_started", path = %self.path.display(), "directory watch started");
    }
}

pub struct WatchEnded<'a> {
    pub path: &'a Path,
}
impl WatchEnded<'_> {
    pub fn emit(self) {
        tracing::debug!(target: TARGET, event = "watch_ended", path = %self.path.display(), "directory watch ended");
    }
}

/// A watch's queue was full when changes came: `dropped` of them were lost (0: the kernel's
/// queue overflowed, count unknown).
pub struct WatchEventsLost<'a> {
    pub path: &'a Path,
    pub dropped: u64,
}
impl WatchEventsLost<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "watch_events_lost", path = %self.path.display(), dropped = self.dropped,
            "a directory watch lost events");
    }
}

pub struct WatchKernelOverflow<'a> {
    pub path: &'a Path,
}
impl WatchKernelOverflow<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "watch_kernel_overflow", path = %self.path.display(),
            "the kernel's inotify queue overflowed; watches rebuilt");
    }
}

pub struct WatcherExpired<'a> {
    pub id: &'a str,
    pub idle_seconds: u64,
}
impl WatcherExpired<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "watcher_expired", id = self.id, idle_seconds = self.idle_seconds,
            "polled watcher removed: nobody asked for its events");
    }
}

pub struct FollowStarted<'a> {
    pub path: &'a Path,
    pub exists: bool,
    pub offset: u64,
}
impl FollowStarted<'_> {
    pub fn emit(self) {
        tracing::debug!(target: TARGET, event = "follow_started", path = %self.path.display(), exists = self.exists,
            offset = self.offset, "follow started");
    }
}

pub struct FollowEnded<'a> {
    pub path: &'a Path,
}
impl FollowEnded<'_> {
    pub fn emit(self) {
        tracing::debug!(target: TARGET, event = "follow_ended", path = %self.path.display(), "follow ended");
    }
}
