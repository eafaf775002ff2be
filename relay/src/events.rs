//! Every log line the relay emits about its domain, from one typed place. No event carries a
//! credential.
const TARGET: &str = "hangar_relay";

pub struct Listening {
    pub addr: std::net::SocketAddr,
}
impl Listening {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "listening", addr = %self.addr, "hangar-relay listening");
    }
}

/// The kernel refused the short scheduling slice (`hangar-sched`) for one of the relay's threads:
/// it serves on the default slice.
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

pub struct TokenCreated<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub scope: &'a str,
}
impl TokenCreated<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "token_created", id = self.id, name = self.name, scope = self.scope, "token created");
    }
}

pub struct TokenRevoked<'a> {
    pub id: &'a str,
}
impl TokenRevoked<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "token_revoked", id = self.id, "token revoked");
    }
}

pub struct SandboxChanged<'a> {
    pub name: &'a str,
    pub provider: &'a str,
    pub change: &'a str,
}
impl SandboxChanged<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "sandbox_changed", sandbox = self.name, provider = self.provider, change = self.change, "sandbox changed");
    }
}

/// Whom a sandbox is shared with changed: `by` (a token's id) set it to `shared_with`.
pub struct SandboxShared<'a> {
    pub sandbox: &'a str,
    pub by: &'a str,
    pub shared_with: &'a [String],
}
impl SandboxShared<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "sandbox_shared", sandbox = self.sandbox, by = self.by,
            shared_with = ?self.shared_with, "sandbox sharing changed");
    }
}

/// A token was refused work inside, or the management of, a sandbox that is not its person's.
pub struct SandboxRefused<'a> {
    pub sandbox: &'a str,
    pub token: &'a str,
    pub person: &'a str,
    /// `use` or `manage`.
    pub what: &'a str,
}
impl SandboxRefused<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "sandbox_refused", sandbox = self.sandbox, token = self.token,
            person = self.person, what = self.what, "sandbox refused to a person it is not shared with");
    }
}

pub struct DaemonStarted<'a> {
    pub sandbox: &'a str,
    pub url: &'a str,
    /// `namespaces` or `none`.
    pub isolation: &'a str,
}
impl DaemonStarted<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "daemon_started", sandbox = self.sandbox, url = self.url,
            isolation = self.isolation, "sandbox daemon started");
    }
}

/// At start: whether local sandboxes will be isolated, and if not, why and who may use them.
pub struct LocalIsolation<'a> {
    /// `namespaces` or `none`.
    pub isolation: &'a str,
    /// Why not, when `none`.
    pub reason: Option<&'a str>,
    /// `--allow-unisolated-sandboxes`.
    pub unisolated_allowed: bool,
}
impl LocalIsolation<'_> {
    pub fn emit(self) {
        match (self.reason, self.unisolated_allowed) {
            (None, _) => tracing::info!(target: TARGET, event = "local_isolation", isolation = self.isolation,
                "local sandboxes run in their own PID and mount namespaces, each as its own user"),
            (Some(reason), false) => {
                tracing::warn!(target: TARGET, event = "local_isolation", isolation = self.isolation,
                reason, unisolated_allowed = false,
                "local sandboxes isolate nothing: their commands run as the relay's user; only admin tokens may use them (--allow-unisolated-sandboxes lets every token in)")
            }
            (Some(reason), true) => {
                tracing::warn!(target: TARGET, event = "local_isolation", isolation = self.isolation,
                reason, unisolated_allowed = true,
                "local sandboxes isolate nothing: their commands run as the relay's user, and every token may use them (--allow-unisolated-sandboxes): any token can take the relay over")
            }
        }
    }
}

/// At start: whether new local sandboxes get a filesystem of their own, of what size, and if
/// not, why.
pub struct LocalDisk<'a> {
    /// The size a new sandbox gets when it asks for none; `None` when they get none.
    pub default_mib: Option<u64>,
    pub reason: Option<&'a str>,
}
impl LocalDisk<'_> {
    pub fn emit(self) {
        match (self.default_mib, self.reason) {
            (Some(mib), _) => tracing::info!(target: TARGET, event = "local_disk", default_mib = mib,
                "local sandboxes' work directories are filesystems of their own (disk_mib)"),
            (None, reason) => tracing::warn!(target: TARGET, event = "local_disk", reason,
                "local sandboxes' work directories share the state directory's filesystem: a sandbox can fill it"),
        }
    }
}

/// A local sandbox's filesystem could not be made, mounted or unmounted (`step`).
pub struct LocalDiskFailed<'a> {
    pub sandbox: &'a str,
    pub step: &'a str,
    pub error: &'a str,
}
impl LocalDiskFailed<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "local_disk_failed", sandbox = self.sandbox, step = self.step,
            error = self.error, "a local sandbox's filesystem failed");
    }
}

/// A local sandbox's filesystem was not mounted (the host restarted) and was mounted again
/// before its daemon started.
pub struct LocalDiskRemounted<'a> {
    pub sandbox: &'a str,
    pub path: &'a str,
}
impl LocalDiskRemounted<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "local_disk_remounted", sandbox = self.sandbox, path = self.path,
            "a local sandbox's filesystem was mounted again");
    }
}

/// A destroyed local sandbox's filesystem was busy: it was detached (a lazy unmount) and is
/// freed when its last user lets go.
pub struct LocalDiskDetached<'a> {
    pub sandbox: &'a str,
    pub path: &'a str,
}
impl LocalDiskDetached<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "local_disk_detached", sandbox = self.sandbox, path = self.path,
            "a destroyed local sandbox's filesystem was busy: detached, freed when no longer used");
    }
}

/// A recorded daemon pid no longer names the daemon (it ended, and the pid may be another
/// process's now): it is not signalled.
pub struct DaemonPidStale<'a> {
    pub sandbox: &'a str,
    pub pid: i64,
}
impl DaemonPidStale<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "daemon_pid_stale", sandbox = self.sandbox, pid = self.pid,
            "the sandbox's recorded daemon pid is no longer its daemon: not signalled");
    }
}

pub struct ExecFinished<'a> {
    pub sandbox: &'a str,
    pub streamed: bool,
    pub exit_code: i32,
    pub closed: Option<&'a str>,
}
impl ExecFinished<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "exec_finished", sandbox = self.sandbox, streamed = self.streamed,
            exit_code = self.exit_code, closed = self.closed, "exec finished");
    }
}

pub struct AuthRefused<'a> {
    pub path: &'a str,
}
impl AuthRefused<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "auth_refused", path = self.path, "request without a valid token");
    }
}

/// A ticket was issued for `path` to `token` (the token's id). Never the ticket itself.
pub struct TicketIssued<'a> {
    pub token: &'a str,
    pub path: &'a str,
}
impl TicketIssued<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "ticket_issued", token = self.token, path = self.path, "ticket issued");
    }
}

/// A ticket was refused (why: `unknown`, `expired`, `used`, `other_path`, `not_a_stream`,
/// `token_revoked`). Never the ticket itself.
pub struct TicketRefused<'a> {
    pub path: &'a str,
    pub why: &'a str,
}
impl TicketRefused<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "ticket_refused", path = self.path, why = self.why, "ticket refused");
    }
}

pub struct StreamClosed<'a> {
    pub kind: &'a str,
    pub reason: &'a str,
    pub bytes: u64,
}
impl StreamClosed<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "stream_closed", kind = self.kind, reason = self.reason, bytes = self.bytes, "stream closed");
    }
}

pub struct ShuttingDown {
    pub streams: usize,
}
impl ShuttingDown {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "shutting_down", streams = self.streams, "shutting down: streams closed, new ones refused");
    }
}

pub struct DockerConnected<'a> {
    pub api_version: &'a str,
}
impl DockerConnected<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "docker_connected", api_version = self.api_version, "connected to Docker");
    }
}

pub struct DockerUnavailable<'a> {
    pub error: &'a str,
}
impl DockerUnavailable<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "docker_unavailable", error = self.error,
            "Docker is not reachable; docker sandboxes fail until it is");
    }
}

pub struct ContainerStarted<'a> {
    pub sandbox: &'a str,
    pub container: &'a str,
    pub image: &'a str,
    pub daemon: bool,
}
impl ContainerStarted<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "container_started", sandbox = self.sandbox, container = self.container,
            image = self.image, daemon = self.daemon, "sandbox container started");
    }
}

pub struct SandboxRestarted<'a> {
    pub sandbox: &'a str,
}
impl SandboxRestarted<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "sandbox_restarted", sandbox = self.sandbox,
            "stopped sandbox container started again");
    }
}

pub struct ContainerRemoved<'a> {
    pub sandbox: &'a str,
    pub container: &'a str,
}
impl ContainerRemoved<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "container_removed", sandbox = self.sandbox, container = self.container,
            "sandbox container removed");
    }
}

pub struct E2bSandboxCreated<'a> {
    pub sandbox: &'a str,
    /// E2B's id of the sandbox.
    pub e2b_sandbox: &'a str,
    pub template: &'a str,
}
impl E2bSandboxCreated<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "e2b_sandbox_created", sandbox = self.sandbox,
            e2b_sandbox = self.e2b_sandbox, template = self.template, "E2B sandbox created");
    }
}

pub struct E2bSandboxKilled<'a> {
    pub sandbox: &'a str,
    pub e2b_sandbox: &'a str,
    /// Whether E2B still had it (false: it had ended already).
    pub existed: bool,
}
impl E2bSandboxKilled<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "e2b_sandbox_killed", sandbox = self.sandbox,
            e2b_sandbox = self.e2b_sandbox, existed = self.existed, "E2B sandbox killed");
    }
}

pub struct FallbackExecKilled<'a> {
    pub sandbox: &'a str,
    /// `timeout` or `client`.
    pub reason: &'a str,
}
impl FallbackExecKilled<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "fallback_exec_killed", sandbox = self.sandbox, reason = self.reason,
            "provider exec killed");
    }
}

pub struct DetachedEnded<'a> {
    pub sandbox: &'a str,
    pub process_id: &'a str,
}
impl DetachedEnded<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "detached_ended", sandbox = self.sandbox, process_id = self.process_id,
            "a background process without a daemon ended");
    }
}

pub struct CleanupFailed<'a> {
    /// What was being cleaned up.
    pub what: &'a str,
    pub error: &'a str,
}
impl CleanupFailed<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "cleanup_failed", what = self.what, error = self.error, "cleanup failed");
    }
}

pub struct PollFailed<'a> {
    pub sandbox: &'a str,
    pub error: &'a str,
}
impl PollFailed<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "poll_failed", sandbox = self.sandbox, error = self.error,
            "looking at background processes without a daemon failed");
    }
}

pub struct RevocationDone<'a> {
    pub token: &'a str,
    pub streams: usize,
    pub processes: usize,
}
impl RevocationDone<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "revocation_done", token = self.token, streams = self.streams,
            processes = self.processes, "a revoked token's streams ended and its processes killed");
    }
}

pub struct RevocationIncomplete<'a> {
    pub token: &'a str,
    /// The sandbox whose processes could not be killed, or `*` when none could be looked at.
    pub sandbox: &'a str,
    pub error: &'a str,
}
impl RevocationIncomplete<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "revocation_incomplete", token = self.token, sandbox = self.sandbox,
            error = self.error, "a revoked token's processes could not all be killed");
    }
}

pub struct Recovered<'a> {
    pub sandbox: &'a str,
    pub orphans_killed: usize,
    pub revoked_killed: usize,
    pub adopted: usize,
    /// Background processes the relay follows again itself (a daemon without hangar's ring).
    pub followed: usize,
}
impl Recovered<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "recovered", sandbox = self.sandbox, orphans_killed = self.orphans_killed,
            revoked_killed = self.revoked_killed, adopted = self.adopted, followed = self.followed,
            "found what an earlier run of the relay started");
    }
}

pub struct RecoveryFailed<'a> {
    /// The sandbox, or `*` when none could be looked at.
    pub sandbox: &'a str,
    pub error: &'a str,
}
impl RecoveryFailed<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "recovery_failed", sandbox = self.sandbox, error = self.error,
            "could not look at what an earlier run of the relay started");
    }
}

pub struct SessionStarted<'a> {
    pub session: &'a str,
    pub person: &'a str,
    pub harness: &'a str,
    pub sandbox: &'a str,
}
impl SessionStarted<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "session_started", session = self.session, person = self.person,
            harness = self.harness, sandbox = self.sandbox, "session started");
    }
}

pub struct SessionDeleted<'a> {
    pub session: &'a str,
    pub person: &'a str,
}
impl SessionDeleted<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "session_deleted", session = self.session, person = self.person, "session deleted");
    }
}

/// A turn moved between states (every `run.state` event hangar records).
pub struct TurnState<'a> {
    pub turn: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    pub reason: Option<&'a str>,
}
impl TurnState<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "turn_state", turn = self.turn, from = self.from, to = self.to,
            reason = self.reason, "turn state");
    }
}

pub struct TurnStarted<'a> {
    pub turn: &'a str,
    pub pid: i64,
    pub split: bool,
}
impl TurnStarted<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "turn_started", turn = self.turn, pid = self.pid, split = self.split,
            "turn supervisor started");
    }
}

/// A turn's log is polled rather than followed, and why.
pub struct TurnPolled<'a> {
    pub turn: &'a str,
    pub why: &'a str,
}
impl TurnPolled<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "turn_polled", turn = self.turn, why = self.why, "turn log polled");
    }
}

/// A turn's driver hit an error and will look again.
pub struct TurnTrouble<'a> {
    pub turn: &'a str,
    pub error: &'a str,
}
impl TurnTrouble<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "turn_trouble", turn = self.turn, error = self.error, "turn driver error");
    }
}

pub struct SessionsNotResumed<'a> {
    pub error: &'a str,
}
impl SessionsNotResumed<'_> {
    pub fn emit(self) {
        tracing::error!(target: TARGET, event = "sessions_store_failed", error = self.error, "sessions: store failed");
    }
}

/// At open: a database made before incremental vacuuming switched to it, with the one VACUUM
/// that takes (it rewrites the whole file).
pub struct StoreVacuumed<'a> {
    pub path: &'a str,
    pub before: u64,
    pub after: u64,
}
impl StoreVacuumed<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "store_vacuumed", path = self.path, bytes_before = self.before, bytes_after = self.after, "the store switched to incremental vacuuming");
    }
}

/// After a prune: the pages it freed given back, the WAL cut back (bytes of both files).
pub struct StoreCompacted {
    pub before: u64,
    pub after: u64,
}
impl StoreCompacted {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "store_compacted", bytes_before = self.before, bytes_after = self.after, "the store gave freed space back");
    }
}

/// The store's writer could not start or commit a batch (a full disk, a broken file): every
/// write in it was answered with the error.
pub struct StoreWriteFailed<'a> {
    pub what: &'a str,
    pub error: &'a str,
}
impl StoreWriteFailed<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "store_write_failed", what = self.what, error = self.error, "a store write failed");
    }
}

pub struct EventsPruned {
    pub events: usize,
}
impl EventsPruned {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "events_pruned", events = self.events, "old session events pruned");
    }
}

/// A secret stored or deleted: its name only, never its value.
pub struct SecretChanged<'a> {
    pub name: &'a str,
    /// The person it belongs to; empty: the admins'.
    pub owner: &'a str,
    pub change: &'a str,
}
impl SecretChanged<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "secret_changed", name = self.name, owner = self.owner, change = self.change, "secret changed");
    }
}

/// A job moved between states.
pub struct JobState<'a> {
    pub job: &'a str,
    pub person: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    pub reason: Option<&'a str>,
}
impl JobState<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "job_state", job = self.job, person = self.person, from = self.from,
            to = self.to, reason = self.reason, "job state");
    }
}

/// A job's driver could not read or write its state (it stops; a restart resumes the job).
pub struct JobFailed<'a> {
    pub job: &'a str,
    pub error: &'a str,
}
impl JobFailed<'_> {
    pub fn emit(self) {
        tracing::error!(target: TARGET, event = "job_driver_failed", job = self.job, error = self.error,
            "job driver failed");
    }
}

pub struct InboxItemOpened<'a> {
    pub item: &'a str,
    pub kind: &'a str,
    pub person: &'a str,
    pub session: Option<&'a str>,
}
impl InboxItemOpened<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "inbox_item_opened", item = self.item, kind = self.kind, person = self.person, session = self.session, "inbox item opened");
    }
}

pub struct InboxItemEnded<'a> {
    pub item: &'a str,
    pub kind: &'a str,
    pub state: &'a str,
    pub by: &'a str,
}
impl InboxItemEnded<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "inbox_item_ended", item = self.item, kind = self.kind, state = self.state, by = self.by, "inbox item ended");
    }
}

/// Something went wrong with an inbox item or a sandbox's requests; it is tried again.
pub struct InboxTrouble<'a> {
    pub item: &'a str,
    pub error: &'a str,
}
impl InboxTrouble<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "inbox_trouble", item = self.item, error = self.error, "inbox trouble");
    }
}

/// A file in an agent's inbox that is no request hangar takes.
pub struct InboxRequestRefused<'a> {
    pub file: &'a str,
    pub why: &'a str,
}
impl InboxRequestRefused<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "inbox_request_refused", file = self.file, why = self.why, "inbox request refused");
    }
}

/// Files in an agent's inbox that are no request hangar takes, moved aside into its `refused/`
/// directory (each with its reason in `refused/.reasons`), counted once per scan.
pub struct InboxFilesRefused<'a> {
    pub sandbox: &'a str,
    pub files: usize,
}
impl InboxFilesRefused<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "inbox_files_refused", sandbox = self.sandbox, files = self.files, "inbox files moved aside");
    }
}

/// At start: what the fleet loaded into memory.
pub struct FleetLoaded {
    pub sandboxes: usize,
    pub sessions: usize,
    pub jobs: usize,
}
impl FleetLoaded {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "fleet_loaded", sandboxes = self.sandboxes, sessions = self.sessions,
            jobs = self.jobs, "fleet loaded");
    }
}

/// The fleet could not refresh a turn or a job from the store; it shows the last it knew until
/// the next change.
pub struct FleetTrouble<'a> {
    pub what: &'a str,
    pub error: &'a str,
}
impl FleetTrouble<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "fleet_trouble", what = self.what, error = self.error, "fleet trouble");
    }
}

pub struct KubernetesConnected<'a> {
    pub version: &'a str,
    pub namespace: &'a str,
    pub reach: &'a str,
}
impl KubernetesConnected<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "kubernetes_connected", version = self.version, namespace = self.namespace,
            reach = self.reach, "connected to the Kubernetes API server");
    }
}

pub struct KubernetesUnavailable<'a> {
    pub error: &'a str,
}
impl KubernetesUnavailable<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "kubernetes_unavailable", error = self.error,
            "no Kubernetes cluster is reachable; kubernetes sandboxes fail until one is");
    }
}

pub struct KubernetesWatchTrouble<'a> {
    pub error: &'a str,
}
impl KubernetesWatchTrouble<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "kubernetes_watch_trouble", error = self.error,
            "the watch on sandbox pods failed; it starts again");
    }
}

pub struct PodStarted<'a> {
    pub sandbox: &'a str,
    pub pod: &'a str,
    pub image: &'a str,
    pub daemon: bool,
}
impl PodStarted<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "pod_started", sandbox = self.sandbox, pod = self.pod, image = self.image,
            daemon = self.daemon, "sandbox pod ready");
    }
}

pub struct PodDeleted<'a> {
    pub sandbox: &'a str,
    pub pod: &'a str,
}
impl PodDeleted<'_> {
    pub fn emit(self) {
        tracing::info!(target: TARGET, event = "pod_deleted", sandbox = self.sandbox, pod = self.pod, "sandbox pod deleted");
    }
}

pub struct SandboxGone<'a> {
    pub sandbox: &'a str,
    pub provider: &'a str,
    pub why: &'a str,
}
impl SandboxGone<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "sandbox_gone", sandbox = self.sandbox, provider = self.provider,
            why = self.why, "sandbox gone: what it ran on vanished outside hangar");
    }
}

/// The relay lost a followed process's output stream (a daemon without hangar's ring) and could
/// not take it up again: its readers are told, and its output from then on is not kept.
pub struct ProcessFollowBroken<'a> {
    pub sandbox: &'a str,
    pub pid: u32,
    pub error: &'a str,
}
impl ProcessFollowBroken<'_> {
    pub fn emit(self) {
        tracing::warn!(target: TARGET, event = "process_follow_broken", sandbox = self.sandbox, pid = self.pid,
            error = self.error, "lost a followed process's output stream");
    }
}
