//! Everything a process started, found again so that killing the process kills it all.
//!
//! A signal to a process group misses every descendant that made a session or group of its own
//! (`setsid`, a server that daemonizes). Where the kernel lets the daemon make cgroups (v2 with
//! `cgroup.kill`, Linux 5.14), each process gets a cgroup of its own, joined in the child before
//! exec, so everything it ever starts is in it, and `cgroup.kill` ends them all at once, forks in
//! flight included. Where it cannot (a container whose cgroup mount is read-only, a daemon that
//! is not root, cgroup v1 only), each process's environment carries a mark,
//! `HANGAR_PROCESS=<instance>:<n>`, which its descendants inherit and `/proc/PID/environ` shows:
//! best effort, since a process may start a child with an emptied environment.
//!
//! The cgroups live under `<the daemon's cgroup>/hangar-envd.<instance>/<n>`. The instance (the
//! daemon's pid namespace, pid and start time) tells a live daemon's cgroups and marks from a
//! dead one's, so a daemon that starts kills what one that died (SIGKILL, a crash) left behind.
use std::{
    collections::HashSet,
    fmt, fs, io,
    os::{
        fd::{AsRawFd, OwnedFd},
        unix::fs::MetadataExt as _,
    },
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex, MutexGuard,
    },
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    sys::{
        signal::{kill, killpg, Signal},
        wait::WaitStatus,
    },
    unistd::Pid,
};

use super::Reaper;
use crate::events;

/// The variable that marks a process and its descendants when there are no cgroups.
pub const MARK_VAR: &str = "HANGAR_PROCESS";
/// The daemon's own cgroup is named this, then its instance.
const PARENT_PREFIX: &str = "hangar-envd.";
/// How long a start-up or a shutdown waits for the processes it killed to be gone.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Whether to give each process a cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CgroupPolicy {
    /// Where the daemon can make them; marks otherwise.
    Auto,
    /// Never: marks only.
    Off,
    /// Always: the daemon refuses to start without them.
    Require,
    /// As `require`, each process moving itself into its cgroup before exec instead of being
    /// created in it: what happens where `clone3` is refused (Docker's default seccomp profile).
    /// Slower to start (an RCU grace period each); for tests and comparison.
    Join,
}

#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("cgroups are required (--cgroups {policy}) but cannot be used: {reason}")]
    CgroupsRequired { policy: String, reason: String },
}

/// One daemon run: what its cgroups and marks are named after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Instance {
    pidns: u64,
    pid: u32,
    start: u64,
}

impl fmt::Display for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.pidns, self.pid, self.start)
    }
}

impl Instance {
    fn current() -> Instance {
        Instance { pidns: pidns_of("self"), pid: std::process::id(), start: start_time("self").unwrap_or(0) }
    }

    fn parse(s: &str) -> Option<Instance> {
        let mut it = s.split('.');
        let i = Instance {
            pidns: it.next()?.parse().ok()?,
            pid: it.next()?.parse().ok()?,
            start: it.next()?.parse().ok()?,
        };
        it.next().is_none().then_some(i)
    }

    /// Whether the daemon this names is gone. Only said of a daemon in this pid namespace: one in
    /// another cannot be looked up from here, so it is left alone.
    fn is_dead(&self, me: &Instance) -> bool {
        self.pidns == me.pidns && self != me && start_time(&self.pid.to_string()) != Some(self.start)
    }
}

/// The inode of a process's pid namespace (0 if unknown).
fn pidns_of(pid: &str) -> u64 {
    fs::metadata(format!("/proc/{pid}/ns/pid")).map(|m| m.ino()).unwrap_or(0)
}

/// A process's start time (clock ticks since boot, field 22 of `/proc/PID/stat`): with its pid,
/// it names one process for as long as the machine runs.
fn start_time(pid: &str) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// How one process's tree is found.
#[derive(Debug, Clone)]
enum Kind {
    Cgroup(PathBuf),
    /// The mark's value (after `HANGAR_PROCESS=`).
    Mark(String),
}

/// A process about to be spawned: its cgroup (made, with `cgroup.procs` open for the child to
/// join) or its mark.
#[derive(Debug)]
pub struct Prepared {
    kind: Kind,
    /// The cgroup's directory and its `cgroup.procs`, open.
    join: Option<(OwnedFd, OwnedFd)>,
}

impl Prepared {
    /// The variable to add to the process's environment, if it is found by a mark.
    pub fn mark(&self) -> Option<(String, String)> {
        match &self.kind {
            Kind::Mark(m) => Some((MARK_VAR.to_string(), m.clone())),
            Kind::Cgroup(_) => None,
        }
    }

    /// The process's cgroup, for the child to start in.
    pub fn cgroup(&self) -> Option<super::spawn::Cgroup> {
        self.join.as_ref().map(|(dir, procs)| super::spawn::Cgroup { dir: dir.as_raw_fd(), procs: procs.as_raw_fd() })
    }
}

/// Everything one process started.
#[derive(Debug)]
pub struct Tree {
    pid: u32,
    kind: Kind,
    /// The process itself was reaped: its pid may be reused, so its group is not signalled by
    /// number any more unless something of the tree is known to be alive.
    exited: AtomicBool,
    /// Nothing of the tree is left and its cgroup is removed.
    gone: AtomicBool,
}

impl Tree {
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }

    /// Sends `sig` to the process group (what a terminal does). `ESRCH` when nothing is left.
    pub fn signal_group(&self, sig: Signal) -> Result<(), Errno> {
        if self.is_gone() {
            return Err(Errno::ESRCH);
        }
        if let Kind::Cgroup(dir) = &self.kind {
            // A group's members are all in the cgroup: an empty cgroup means an empty group,
            // and the pid must not be signalled (it may be another process's by now).
            if !populated(dir) {
                return Err(Errno::ESRCH);
            }
        }
        killpg(Pid::from_raw(self.pid as i32), sig)
    }

    /// SIGKILLs everything the process started (itself included, if it still runs). Whether
    /// anyone was there to kill.
    pub fn kill(&self) -> io::Result<bool> {
        if self.is_gone() {
            return Ok(false);
        }
        let running = !self.exited.load(Ordering::SeqCst);
        match &self.kind {
            Kind::Cgroup(dir) => {
                let was = populated(dir);
                if was {
                    cgroup_kill(dir)?;
                }
                // A process that moved itself out of the cgroup (root can) is still in the
                // group; the pid is safe to use while the process is unreaped.
                let group = running && killpg(Pid::from_raw(self.pid as i32), Signal::SIGKILL).is_ok();
                Ok(was || group)
            }
            Kind::Mark(m) => {
                let group = running && killpg(Pid::from_raw(self.pid as i32), Signal::SIGKILL).is_ok();
                Ok(kill_marked(|v| v == m) > 0 || group)
            }
        }
    }

    /// Whether anything of the tree is still alive.
    pub fn alive(&self) -> bool {
        if self.is_gone() {
            return false;
        }
        match &self.kind {
            Kind::Cgroup(dir) => populated(dir),
            Kind::Mark(m) => self.group_alive() || scan_marks().iter().any(|(_, v)| v == m),
        }
    }

    fn group_alive(&self) -> bool {
        killpg(Pid::from_raw(self.pid as i32), None).is_ok()
    }
}

/// The daemon's process trees: the cgroup they live under, and those not known to be gone.
#[derive(Debug)]
pub struct Trees {
    me: Instance,
    /// `<the daemon's cgroup>/hangar-envd.<instance>`, when cgroups are in use.
    parent: Option<PathBuf>,
    seq: AtomicU64,
    /// Trees not yet known to be gone, whether or not their process is still in the table.
    pending: Mutex<Vec<Arc<Tree>>>,
    /// Whether any tree is found by its mark (always, without cgroups).
    any_marks: AtomicBool,
}

impl Trees {
    /// Sets up per-process cgroups as `policy` says (falling back to marks where allowed), and
    /// kills what daemons that died left behind. Before the reaper runs: it reaps the probe.
    pub async fn start(policy: CgroupPolicy, reaper: &Reaper) -> Result<Arc<Trees>, TreeError> {
        let me = Instance::current();
        let parent = match policy {
            CgroupPolicy::Off => None,
            CgroupPolicy::Auto | CgroupPolicy::Require | CgroupPolicy::Join => match setup_cgroups(&me, reaper).await {
                Ok(dir) => {
                    events::CgroupsEnabled { parent: &dir }.emit();
                    Some(dir)
                }
                Err(reason) if policy != CgroupPolicy::Auto => {
                    // The flag's own spelling, as clap takes it.
                    let policy = clap::ValueEnum::to_possible_value(&policy)
                        .map_or_else(|| format!("{policy:?}"), |v| v.get_name().to_string());
                    return Err(TreeError::CgroupsRequired { policy, reason });
                }
                Err(reason) => {
                    events::CgroupsUnavailable { reason: &reason }.emit();
                    None
                }
            },
        };
        if policy == CgroupPolicy::Join {
            super::spawn::join_after_fork();
        }
        reclaim_marks(&me).await;
        Ok(Arc::new(Trees {
            me,
            any_marks: AtomicBool::new(parent.is_none()),
            parent,
            seq: AtomicU64::new(0),
            pending: Mutex::new(Vec::new()),
        }))
    }

    fn pending(&self) -> MutexGuard<'_, Vec<Arc<Tree>>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn uses_cgroups(&self) -> bool {
        self.parent.is_some()
    }

    /// A cgroup (or a mark) for the next process.
    pub fn prepare(&self) -> Prepared {
        let n = self.seq.fetch_add(1, Ordering::SeqCst);
        if let Some(parent) = &self.parent {
            let dir = parent.join(n.to_string());
            let made = fs::create_dir(&dir).and_then(|()| {
                let handle = fs::File::open(&dir)?;
                Ok((handle.into(), open_write(&dir.join("cgroup.procs"))?))
            });
            match made {
                Ok(fds) => return Prepared { kind: Kind::Cgroup(dir), join: Some(fds) },
                Err(error) => {
                    // Past `cgroup.max.descendants`, say: this process goes by its mark.
                    events::CgroupNotMade { path: &dir, error: &error }.emit();
                    let _ = fs::remove_dir(&dir);
                }
            }
        }
        self.any_marks.store(true, Ordering::SeqCst);
        Prepared { kind: Kind::Mark(format!("{}:{n}", self.me)), join: None }
    }

    /// The spawn failed: remove what `prepare` made.
    pub fn abandon(&self, p: Prepared) {
        if let Kind::Cgroup(dir) = &p.kind {
            let _ = fs::remove_dir(dir);
        }
    }

    /// The process `pid` runs (in its cgroup, or with its mark).
    pub fn adopt(&self, p: Prepared, pid: u32) -> Arc<Tree> {
        // Closing `cgroup.procs` here: the child joined before exec.
        let Prepared { kind, join: _ } = p;
        let tree = Arc::new(Tree { pid, kind, exited: AtomicBool::new(false), gone: AtomicBool::new(false) });
        self.pending().push(tree.clone());
        tree
    }

    /// The process itself was reaped. Its cgroup goes now if nothing else is in it; otherwise
    /// (or for a mark, which takes a scan of /proc) the sweep finds out later.
    pub fn exited(&self, tree: &Arc<Tree>) {
        tree.exited.store(true, Ordering::SeqCst);
        if let Kind::Cgroup(dir) = &tree.kind {
            if !populated(dir) && remove_cgroup(dir) {
                tree.gone.store(true, Ordering::SeqCst);
                self.pending().retain(|t| !Arc::ptr_eq(t, tree));
            }
        }
    }

    /// Forgets the trees whose processes have all gone, removing their cgroups: one scan of
    /// /proc for all the marked ones.
    pub fn sweep(&self) {
        let exited: Vec<Arc<Tree>> =
            self.pending().iter().filter(|t| t.exited.load(Ordering::SeqCst)).cloned().collect();
        if exited.is_empty() {
            return;
        }
        let marks: HashSet<String> = if exited.iter().any(|t| matches!(t.kind, Kind::Mark(_))) {
            scan_marks().into_iter().map(|(_, v)| v).collect()
        } else {
            HashSet::new()
        };
        for t in &exited {
            let gone = match &t.kind {
                Kind::Cgroup(dir) => !populated(dir) && remove_cgroup(dir),
                Kind::Mark(m) => !marks.contains(m) && !t.group_alive(),
            };
            if gone {
                t.gone.store(true, Ordering::SeqCst);
            }
        }
        self.pending().retain(|t| !t.is_gone());
    }

    /// The daemon is stopping: kills every process it started and all they started, waits for
    /// them to go (the reaper must still run), and removes its cgroups.
    pub async fn shutdown(&self) {
        let mut killed = 0;
        if let Some(parent) = &self.parent {
            killed += procs_in(parent);
            if let Err(error) = cgroup_kill(parent) {
                events::CgroupKillFailed { path: parent, error: &error }.emit();
            }
        }
        let prefix = format!("{}:", self.me);
        let marks = self.any_marks.load(Ordering::SeqCst);
        if marks {
            // The groups first: a process that emptied its environment may still be in one.
            for t in self.pending().iter().filter(|t| !t.exited.load(Ordering::SeqCst)) {
                let _ = killpg(Pid::from_raw(t.pid as i32), Signal::SIGKILL);
            }
            killed += kill_marked(|v| v.starts_with(&prefix));
        }
        let deadline = Instant::now() + KILL_WAIT;
        loop {
            let cgroups_empty = self.parent.as_deref().is_none_or(|p| !populated(p));
            let marks_gone = !marks || !scan_marks().iter().any(|(_, v)| v.starts_with(&prefix));
            if (cgroups_empty && marks_gone) || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if let Some(parent) = &self.parent {
            remove_cgroup_tree(parent);
        }
        events::ShutdownKilled { processes: killed }.emit();
    }
}

/// Finds this daemon's cgroup, kills what dead daemons left in theirs, makes
/// `hangar-envd.<instance>` and checks that a child can join a cgroup under it. The reason
/// when any of it fails.
async fn setup_cgroups(me: &Instance, reaper: &Reaper) -> Result<PathBuf, String> {
    let own = own_cgroup_dir()?;
    reclaim_cgroups(&own, me).await;
    let parent = own.join(format!("{PARENT_PREFIX}{me}"));
    match fs::create_dir(&parent) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("making {}: {e}", parent.display())),
    }
    if !parent.join("cgroup.kill").exists() {
        let _ = fs::remove_dir(&parent);
        return Err("the kernel has no cgroup.kill (Linux 5.14 or later)".into());
    }
    if let Err(e) = probe(&parent, reaper).await {
        let _ = fs::remove_dir(&parent);
        return Err(e);
    }
    Ok(parent)
}

/// The directory of this process's cgroup: the cgroup2 mount (from /proc/self/mountinfo; it may
/// be /sys/fs/cgroup or /sys/fs/cgroup/unified) joined with the `0::` path of /proc/self/cgroup.
fn own_cgroup_dir() -> Result<PathBuf, String> {
    let own = fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("reading /proc/self/cgroup: {e}"))?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::")).ok_or("no cgroup v2 in /proc/self/cgroup")?;
    let mountinfo =
        fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    mountinfo
        .lines()
        .find_map(|l| cgroup2_dir(l, path))
        .ok_or_else(|| format!("no cgroup2 mount holds this process's cgroup {path}"))
}

/// The directory of cgroup `path` under the mount a mountinfo line describes, if the line is a
/// cgroup2 mount whose root holds `path`.
fn cgroup2_dir(line: &str, path: &str) -> Option<PathBuf> {
    let (left, right) = line.split_once(" - ")?;
    if right.split_whitespace().next()? != "cgroup2" {
        return None;
    }
    let f: Vec<&str> = left.split_whitespace().collect();
    let (root, mount) = (unescape(f.get(3)?), unescape(f.get(4)?));
    let rel = if root == "/" { path } else { path.strip_prefix(root.as_str())? };
    if !rel.is_empty() && !rel.starts_with('/') {
        return None;
    }
    Some(PathBuf::from(mount).join(rel.trim_start_matches('/')))
}

/// mountinfo writes space, tab, newline and backslash as octal escapes (`\040`).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Forks a child that joins `parent/probe` and exits: making a cgroup is not enough, moving a
/// process into it may still be refused (a delegation the daemon does not have). Through the
/// reaper, as every wait.
async fn probe(parent: &Path, reaper: &Reaper) -> Result<(), String> {
    let dir = parent.join("probe");
    if let Err(e) = fs::create_dir(&dir) {
        if e.kind() != io::ErrorKind::AlreadyExists {
            return Err(format!("making {}: {e}", dir.display()));
        }
    }
    let result = probe_join(&dir, reaper).await;
    // The probe has exited (or never ran): its cgroup is empty.
    let _ = fs::remove_dir(&dir);
    result
}

async fn probe_join(dir: &Path, reaper: &Reaper) -> Result<(), String> {
    let procs =
        open_write(&dir.join("cgroup.procs")).map_err(|e| format!("opening {}/cgroup.procs: {e}", dir.display()))?;
    let fd = procs.as_raw_fd();
    let ((), mut exited) = reaper
        .spawn(move || {
            // SAFETY: the child only makes async-signal-safe system calls (write, _exit).
            match unsafe { libc::fork() } {
                -1 => Err(io::Error::last_os_error()),
                0 => unsafe {
                    let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                    libc::_exit(if ok { 0 } else { 1 })
                },
                pid => Ok((pid, ())),
            }
        })
        .await
        .map_err(|e| format!("forking the probe: {e}"))?;
    let deadline = Instant::now() + KILL_WAIT;
    loop {
        // The reaper's task does not run yet: reap here.
        reaper.reap().await;
        match exited.try_recv() {
            Ok(WaitStatus::Exited(_, 0)) => return Ok(()),
            Ok(status) => return Err(format!("a child could not join {} ({status:?})", dir.display())),
            Err(_) if Instant::now() >= deadline => return Err("the probe did not exit".into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(2)).await,
        }
    }
}

/// Kills and removes the cgroups that daemons which died left beside this one's.
async fn reclaim_cgroups(own: &Path, me: &Instance) {
    let Ok(entries) = fs::read_dir(own) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(inst) = name.to_str().and_then(|n| n.strip_prefix(PARENT_PREFIX)).and_then(Instance::parse) else {
            continue;
        };
        if !inst.is_dead(me) {
            continue;
        }
        let dir = e.path();
        let processes = procs_in(&dir);
        if processes > 0 {
            if let Err(error) = cgroup_kill(&dir) {
                events::CgroupKillFailed { path: &dir, error: &error }.emit();
                continue;
            }
            let deadline = Instant::now() + KILL_WAIT;
            while populated(&dir) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        remove_cgroup_tree(&dir);
        events::LeftoversKilled { instance: &inst.to_string(), processes, cgroup: Some(&dir) }.emit();
    }
}

/// Kills the marked processes that daemons which died left behind.
async fn reclaim_marks(me: &Instance) {
    let dead: HashSet<String> = scan_marks()
        .into_iter()
        .filter_map(|(_, v)| v.split_once(':').map(|(i, _)| i.to_string()))
        .filter(|i| Instance::parse(i).is_some_and(|i| i.is_dead(me)))
        .collect();
    for inst in dead {
        let prefix = format!("{inst}:");
        let processes = kill_marked(|v| v.starts_with(&prefix));
        events::LeftoversKilled { instance: &inst, processes, cgroup: None }.emit();
    }
}

/// SIGKILLs every process whose mark `wanted` accepts, scanning again until a scan finds none it
/// has not killed yet (what forked during a scan is found by the next). How many it killed.
fn kill_marked(wanted: impl Fn(&str) -> bool) -> usize {
    let mut killed = HashSet::new();
    loop {
        let found: Vec<i32> =
            scan_marks().into_iter().filter(|(pid, v)| wanted(v) && !killed.contains(pid)).map(|(p, _)| p).collect();
        if found.is_empty() {
            return killed.len();
        }
        for pid in found {
            // A process that exited meanwhile is ESRCH: nothing to do.
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            killed.insert(pid);
        }
    }
}

/// `(pid, mark)` of every process (but this one) whose environment has a mark. A zombie's
/// environment reads empty, so a killed process stops counting as soon as it dies.
fn scan_marks() -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let Ok(dir) = fs::read_dir("/proc") else { return Vec::new() };
    let key = format!("{MARK_VAR}=");
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        // Another user's process, without privileges, is unreadable: it cannot be ours.
        let Ok(env) = fs::read(e.path().join("environ")) else { continue };
        let mark = env.split(|b| *b == 0).find_map(|kv| kv.strip_prefix(key.as_bytes()));
        if let Some(m) = mark.and_then(|m| std::str::from_utf8(m).ok()) {
            out.push((pid, m.to_string()));
        }
    }
    out
}

fn open_write(path: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt as _;
    Ok(fs::OpenOptions::new().write(true).custom_flags(libc::O_CLOEXEC).open(path)?.into())
}

/// Whether any process is in the cgroup or below it (`populated` of `cgroup.events`). A cgroup
/// that no longer exists is empty.
fn populated(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.events")).map(|s| s.lines().any(|l| l.trim() == "populated 1")).unwrap_or(false)
}

/// SIGKILLs every process in the cgroup and below it, in one step the kernel makes atomic with
/// respect to forks.
fn cgroup_kill(dir: &Path) -> io::Result<()> {
    fs::write(dir.join("cgroup.kill"), b"1")
}

/// The processes in a cgroup and below it.
fn procs_in(dir: &Path) -> usize {
    let here = fs::read_to_string(dir.join("cgroup.procs")).map(|s| s.lines().count()).unwrap_or(0);
    let below: usize = fs::read_dir(dir)
        .map(|rd| rd.flatten().filter(|e| e.path().is_dir()).map(|e| procs_in(&e.path())).sum())
        .unwrap_or(0);
    here + below
}

/// Removes an empty cgroup. Whether it is gone (a cgroup still populated, or whose last process
/// has not been released yet, is `EBUSY`: a later sweep tries again).
fn remove_cgroup(dir: &Path) -> bool {
    match fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => true,
        Err(_) => false,
    }
}

/// Removes a cgroup and every cgroup below it (processes may have made their own), deepest
/// first. A cgroup holds only the kernel's files, which go with it.
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.path().is_dir() {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    if !remove_cgroup(dir) {
        events::CgroupNotRemoved { path: dir }.emit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_round_trip_and_the_current_one_lives() {
        let me = Instance::current();
        assert!(me.start > 0 && me.pidns > 0, "{me:?}");
        assert_eq!(Instance::parse(&me.to_string()), Some(me));
        assert!(!me.is_dead(&me));
        assert_eq!(Instance::parse("1.2"), None);
        assert_eq!(Instance::parse("1.2.3.4"), None);
        // Same namespace, a start time no process has: dead. Another namespace: left alone.
        assert!(Instance { start: me.start + 1, ..me }.is_dead(&me));
        assert!(!Instance { pidns: me.pidns + 1, start: 1, ..me }.is_dead(&me));
    }

    #[test]
    fn cgroup2_mounts_are_read_from_mountinfo() {
        let hybrid = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw";
        assert_eq!(cgroup2_dir(hybrid, "/"), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(cgroup2_dir(hybrid, "/a/b"), Some(PathBuf::from("/sys/fs/cgroup/unified/a/b")));
        let v1 = "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu";
        assert_eq!(cgroup2_dir(v1, "/"), None);
        // A mount of a subtree holds only the paths below its root.
        let sub = "50 31 0:38 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw";
        assert_eq!(cgroup2_dir(sub, "/docker/abc/x"), Some(PathBuf::from("/sys/fs/cgroup/x")));
        assert_eq!(cgroup2_dir(sub, "/docker/abcd"), None);
        assert_eq!(cgroup2_dir(sub, "/other"), None);
        let spaced = r"60 31 0:38 / /mnt/with\040space rw - cgroup2 cgroup2 rw";
        assert_eq!(cgroup2_dir(spaced, "/"), Some(PathBuf::from("/mnt/with space")));
    }
}
