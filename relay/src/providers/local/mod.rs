//! The `local` provider, the embedded default: a directory under the state directory with a
//! hangar-envd on a loopback port and its own access token.
//!
//! Where the relay is root and can make namespaces, each sandbox is isolated (`isolation.rs`):
//! its daemon is PID 1 of its own PID namespace, sees only its own files of the state
//! directory (its work directory and home, `layout.rs`), and runs commands as the sandbox's own unprivileged user. Elsewhere it isolates
//! nothing (`Isolation::None`): commands run as the relay's user on the host, and the domain
//! lets only admin tokens use such a sandbox unless the operator allows it. Either way the
//! daemon gets only an allow-listed environment, and a pid is signalled only while it is still
//! the daemon it was recorded for (`pids.rs`). Where it isolates, each sandbox's files are on a
//! filesystem of their own of a bounded size (`disk.rs`), so a sandbox filling it costs no one
//! else.
mod disk;
mod isolation;
mod layout;
mod options;
mod pids;

use std::{
    ffi::OsString,
    io,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::{io::AsyncBufReadExt, process::Command};

pub use disk::{
    DiskError, Support as DiskSupport, DEFAULT_MIB as DEFAULT_DISK_MIB, MAX_MIB as MAX_DISK_MIB,
    MIN_MIB as MIN_DISK_MIB,
};
pub use isolation::Support;
use layout::Layout;
use options::Options;
use pids::Proc;

use super::{ExecOutput, Provider, ProviderError};
use crate::{
    envd::Envd,
    events,
    store::{Isolation, SandboxRow},
};

pub struct LocalProvider {
    /// `<state>/sandboxes`, absolute and without symbolic links: the daemon is told paths under
    /// it, and inside a sandbox's mount namespace they must name the same directories.
    root: PathBuf,
    envd_bin: PathBuf,
    support: Support,
    disk: disk::Support,
}

/// The sandbox's filesystem image, beside its mount point (`layout.rs`).
const IMAGE: &str = "work.img";
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a destroy waits for a killed daemon to be gone (with its namespace, everything in it).
const EXIT_TIMEOUT: Duration = Duration::from_secs(5);
/// How many times a destroy without namespaces looks for processes left below the daemon.
const KILL_ROUNDS: usize = 100;

impl LocalProvider {
    /// Makes the sandboxes' directory and finds out, once, whether sandboxes can be isolated
    /// (it runs `unshare` to try, a few milliseconds) and given filesystems of their own, of
    /// `disk_mib` unless they ask otherwise.
    pub fn new(
        root: PathBuf,
        envd_bin: PathBuf,
        isolation_disabled_for_tests: bool,
        disk_mib: u64,
    ) -> io::Result<Self> {
        std::fs::create_dir_all(&root)?;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))?;
        let root = root.canonicalize()?;
        let support = isolation::detect(&root, isolation_disabled_for_tests);
        let disk = disk::detect(&support, disk_mib);
        Ok(Self { root, envd_bin, support, disk })
    }

    /// Whether new daemons start isolated, and if not, why.
    pub fn support(&self) -> &Support {
        &self.support
    }

    /// Whether new sandboxes get a filesystem of their own, and if not, why.
    pub fn disk(&self) -> &disk::Support {
        &self.disk
    }

    fn dir(&self, sandbox: &SandboxRow) -> PathBuf {
        // Sandbox ids are relay-made (`sbx_<hex>`), never client text.
        self.root.join(&sandbox.id)
    }

    fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> ProviderError {
        let context = context.into();
        move |source| ProviderError::Io { context, source }
    }

    /// The daemon's binary, absolute where it can be, so the namespace script can tell whether
    /// it lies under what it covers.
    fn envd_bin(&self) -> PathBuf {
        self.envd_bin.canonicalize().unwrap_or_else(|_| self.envd_bin.clone())
    }

    /// Starts the sandbox's daemon (isolated where the relay can) and records where it listens,
    /// its pid with its start time, and how it is isolated.
    async fn start_daemon(&self, sandbox: &mut SandboxRow) -> Result<Envd, ProviderError> {
        let dir = self.dir(sandbox);
        let layout = Layout::of(&dir);
        self.remount(sandbox, &dir, &layout.top).await?;
        let token = sandbox.envd_token.clone().unwrap_or_else(|| crate::random::hex(32));
        let token_file = dir.join("envd.token");
        write_secret(&token_file, &token).map_err(Self::io("writing the daemon's token"))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("envd.log"))
            .map_err(Self::io("opening the daemon's log"))?;
        let mut args: Vec<OsString> =
            ["--listen", "127.0.0.1", "--port", "0", "--access-token-file"].into_iter().map(OsString::from).collect();
        args.push(token_file.into());
        args.push("--default-workdir".into());
        args.push(layout.work.clone().into());
        // Processes get the sandbox's home as HOME: login shells there never read the host
        // user's dotfiles, and agent CLIs keep their state out of the work directory.
        args.push("--env".into());
        args.push(format!("HOME={}", layout.home.display()).into());
        let envd_bin = self.envd_bin();
        let (mut cmd, isolation) = match &self.support {
            Support::Namespaces { unshare } => {
                let user = self.prepare_user(sandbox, &dir, &layout).await?;
                args.push("--default-user".into());
                args.push(user.into());
                let stage = dir.join("mnt");
                std::fs::create_dir_all(&stage).map_err(Self::io("making the sandbox's mount point"))?;
                let state = self.root.parent().unwrap_or(&self.root);
                let cover = isolation::cover_point(state);
                let cmd = isolation::command(unshare, &stage, &cover, &dir, &layout.top, &envd_bin, &args)
                    .map_err(Self::io("writing the sandbox's start script"))?;
                (cmd, Isolation::Namespaces)
            }
            Support::Unavailable(_) => {
                let mut cmd = Command::new(&envd_bin);
                cmd.args(&args);
                (cmd, Isolation::None)
            }
        };
        let mut child = cmd
            .env_clear()
            .envs(isolation::daemon_env(&layout.home))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            // Its own process group: a Ctrl-C to the relay's terminal does not reach it, and it
            // outlives the relay.
            .process_group(0)
            .kill_on_drop(false)
            .spawn()
            .map_err(Self::io(format!("starting {}", envd_bin.display())))?;
        let stdout = child.stdout.take().ok_or_else(|| ProviderError::DaemonStart("no stdout".into()))?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let line = tokio::time::timeout(START_TIMEOUT, lines.next_line())
            .await
            .map_err(|_| ProviderError::DaemonStart("it printed no address in time".into()))?
            .map_err(Self::io("reading the daemon's address"))?
            .ok_or_else(|| ProviderError::DaemonStart("it exited at once; see envd.log".into()))?;
        let url = line
            .strip_prefix("hangar-envd listening on ")
            .ok_or_else(|| ProviderError::DaemonStart(format!("unexpected first line {line:?}")))?
            .to_string();
        let launched =
            child.id().and_then(|p| i32::try_from(p).ok()).and_then(|p| Proc::of(p).ok()).ok_or_else(|| {
                ProviderError::DaemonStart("it exited after printing its address; see envd.log".into())
            })?;
        let daemon = match isolation {
            // `unshare` waits for its one child, the daemon, which has printed, so it exists.
            Isolation::Namespaces => pids::children(launched).first().copied().ok_or_else(|| {
                ProviderError::DaemonStart("unshare has no child after the daemon printed its address".into())
            })?,
            _ => launched,
        };
        // Reap it if it dies while the relay runs; after a relay restart init does.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        sandbox.envd_url = Some(url.clone());
        sandbox.envd_token = Some(token.clone());
        sandbox.envd_pid = Some(i64::from(daemon.pid));
        sandbox.envd_pid_start = i64::try_from(daemon.start).ok();
        sandbox.isolation = isolation;
        sandbox.workdir = Some(layout.work.to_string_lossy().into_owned());
        events::DaemonStarted { sandbox: &sandbox.name, url: &url, isolation: isolation.as_str() }.emit();
        Ok(Envd::new(&url, &token)?)
    }

    /// Mounts the sandbox's image on its work directory again where it is not (the host
    /// restarted): the daemon must never start on the directory beneath, on the state
    /// directory's filesystem. A sandbox without an image (made by a relay from before images,
    /// or one that could not make them) keeps its plain directory.
    async fn remount(&self, sandbox: &SandboxRow, dir: &Path, top: &Path) -> Result<(), ProviderError> {
        let image = dir.join(IMAGE);
        if !image.exists() || disk::is_mounted(top) {
            return Ok(());
        }
        let mount = match &self.disk {
            disk::Support::Images { mount, .. } => mount.clone(),
            // A relay that lost the right to mount still tries, and says why it failed.
            disk::Support::Unavailable(_) => PathBuf::from("mount"),
        };
        disk::mount(&mount, &image, top).await.map_err(|e| self.disk_failed(sandbox, "mounting again", e))?;
        events::LocalDiskRemounted { sandbox: &sandbox.name, path: &top.to_string_lossy() }.emit();
        Ok(())
    }

    fn disk_failed(&self, sandbox: &SandboxRow, step: &str, e: disk::DiskError) -> ProviderError {
        events::LocalDiskFailed { sandbox: &sandbox.name, step, error: &e.to_string() }.emit();
        ProviderError::Disk(e)
    }

    /// Makes a new sandbox's files (`layout.rs`): its own filesystem where the relay gives one,
    /// with its work directory and home in it.
    async fn make_work(&self, sandbox: &SandboxRow, dir: &Path, disk_mib: Option<u64>) -> Result<(), ProviderError> {
        let layout = Layout::of(dir);
        std::fs::create_dir_all(&layout.top).map_err(Self::io(format!("creating {}", dir.display())))?;
        // Only the relay's user may look into the sandbox's directory (its token, its log).
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(Self::io(format!("restricting {}", dir.display())))?;
        if let (disk::Support::Images { mkfs, mount, .. }, Some(mib)) = (&self.disk, disk_mib) {
            let image = dir.join(IMAGE);
            disk::make(mkfs, &image, mib).await.map_err(|e| self.disk_failed(sandbox, "making", e))?;
            disk::mount(mount, &image, &layout.top).await.map_err(|e| self.disk_failed(sandbox, "mounting", e))?;
            // mkfs's lost+found (root's, 0700) would be the one thing of the sandbox's its user
            // cannot enter; e2fsck makes it again should it ever need it.
            std::fs::remove_dir(layout.top.join("lost+found"))
                .map_err(Self::io("removing lost+found from the sandbox's filesystem"))?;
        }
        for d in [&layout.work, &layout.home] {
            std::fs::create_dir_all(d).map_err(Self::io(format!("creating {}", d.display())))?;
        }
        Ok(())
    }

    /// Unmounts the sandbox's filesystem, if it has one, and removes its directory.
    async fn remove_dir(&self, sandbox: &SandboxRow) -> Result<(), ProviderError> {
        let dir = self.dir(sandbox);
        let top = Layout::of(&dir).top;
        match disk::unmount(&top).await {
            Ok(disk::Unmount::Detached) => {
                events::LocalDiskDetached { sandbox: &sandbox.name, path: &top.to_string_lossy() }.emit();
            }
            Ok(_) => {}
            // Removing the directory now would leave the mount behind and empty the sandbox's
            // files through it: the sandbox stays, to be destroyed again.
            Err(e) => return Err(self.disk_failed(sandbox, "unmounting", e)),
        }
        // Removing the mount point also detaches the copies of its mount that other sandboxes' mount
        // namespaces made when they started (the kernel does so for a mount point removed in
        // another namespace), so none of them keeps this filesystem alive.
        // A work directory of many files takes a while to remove: not on a runtime worker.
        let removing = dir.clone();
        let removed = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(removing))
            .await
            .unwrap_or_else(|e| Err(io::Error::other(e)));
        match removed {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ProviderError::Io { context: format!("removing {}", dir.display()), source: e }),
        }
    }

    /// The sandbox's own user: its uid (made once, kept in the row), the passwd and group files
    /// its namespace sees, and the sandbox's files given to it. Returns the user's name.
    /// The directory walks (choosing a uid, giving a work directory's files) run off the
    /// runtime's workers.
    async fn prepare_user(
        &self,
        sandbox: &mut SandboxRow,
        dir: &Path,
        layout: &Layout,
    ) -> Result<String, ProviderError> {
        let (root, dir, layout, uid) = (self.root.clone(), dir.to_path_buf(), layout.clone(), sandbox.uid);
        let name = isolation::user_name(&sandbox.id);
        let user = name.clone();
        let uid = tokio::task::spawn_blocking(move || -> Result<u32, ProviderError> {
            let (uid, fresh) = match uid {
                Some(uid) => (uid, false),
                None => (isolation::allocate_uid(&root).map_err(Self::io("choosing the sandbox's uid"))?, true),
            };
            isolation::write_user_files(&dir, &user, uid, &layout.home)
                .map_err(Self::io("writing the sandbox's passwd"))?;
            // A sandbox that had no user yet may hold files the relay's user made: they become its.
            isolation::give_to(&layout.top, uid, fresh).map_err(Self::io("giving the sandbox's files to its user"))?;
            for d in layout.owned().into_iter().skip(1) {
                isolation::give_to(d, uid, false).map_err(Self::io("giving the sandbox's files to its user"))?;
            }
            Ok(uid)
        })
        .await
        .map_err(|e| ProviderError::Io {
            context: "preparing the sandbox's user".into(),
            source: io::Error::other(e),
        })??;
        sandbox.uid = Some(uid);
        Ok(name)
    }

    /// The daemon the row recorded, if that pid is still it. A row written before start times
    /// were recorded is trusted only if the pid's command line names this sandbox's token file.
    fn recorded_daemon(&self, sandbox: &SandboxRow) -> Option<Proc> {
        let pid = sandbox.envd_pid?;
        let found = match Proc::recorded(Some(pid), sandbox.envd_pid_start) {
            Some(p) => Some(p).filter(|p| p.alive()),
            None if sandbox.envd_pid_start.is_none() => {
                let token_file = self.dir(sandbox).join("envd.token");
                i32::try_from(pid)
                    .ok()
                    .filter(|p| *p > 1)
                    .filter(|p| names_file(*p, &token_file))
                    .and_then(|p| Proc::of(p).ok())
            }
            None => None,
        };
        if found.is_none() {
            events::DaemonPidStale { sandbox: &sandbox.name, pid }.emit();
        }
        found
    }
}

/// Whether process `pid`'s command line holds `path` (as one argument).
fn names_file(pid: i32, path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == path.as_os_str().as_bytes()))
}

fn write_secret(path: &Path, secret: &str) -> io::Result<()> {
    use std::{io::Write as _, os::unix::fs::OpenOptionsExt as _};
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(secret.as_bytes())
}

#[tonic::async_trait]
impl Provider for LocalProvider {
    fn name(&self) -> &'static str {
        "local"
    }

    fn host_root(&self, sandbox: &SandboxRow) -> Option<PathBuf> {
        Some(Layout::of(&self.dir(sandbox)).top)
    }

    async fn create(&self, sandbox: &mut SandboxRow) -> Result<(), ProviderError> {
        let options = Options::parse(&sandbox.options, &self.disk)?;
        sandbox.options = options.to_json();
        let dir = self.dir(sandbox);
        let made = match self.make_work(sandbox, &dir, options.disk_mib).await {
            Ok(()) => self.start_daemon(sandbox).await.map(drop),
            Err(e) => Err(e),
        };
        if let Err(e) = made {
            // No row will name this sandbox: nothing of it may stay, its mount least of all.
            if let Err(undo) = self.remove_dir(sandbox).await {
                events::CleanupFailed {
                    what: "removing a local sandbox that failed to start",
                    error: &undo.to_string(),
                }
                .emit();
            }
            return Err(e);
        }
        sandbox.daemon = true;
        Ok(())
    }

    async fn daemon(&self, sandbox: &mut SandboxRow) -> Result<Option<Envd>, ProviderError> {
        if let (Some(url), Some(token)) = (&sandbox.envd_url, &sandbox.envd_token) {
            if let Ok(envd) = Envd::new(url, token) {
                if envd.alive(HEALTH_TIMEOUT).await.is_ok() {
                    sandbox.daemon = true;
                    return Ok(Some(envd));
                }
            }
        }
        // Gone (the machine restarted, or it was killed): start a new one. Processes it had are
        // gone with it.
        let envd = self.start_daemon(sandbox).await?;
        sandbox.daemon = true;
        Ok(Some(envd))
    }

    async fn pause(&self, sandbox: &mut SandboxRow) -> Result<(), ProviderError> {
        // Stops the daemon only: the sandbox's processes keep running, and nothing new starts.
        if let Some(daemon) = self.recorded_daemon(sandbox) {
            daemon.signal(libc::SIGSTOP);
        }
        Ok(())
    }

    async fn resume(&self, sandbox: &mut SandboxRow) -> Result<(), ProviderError> {
        if let Some(daemon) = self.recorded_daemon(sandbox) {
            daemon.signal(libc::SIGCONT);
        }
        Ok(())
    }

    async fn destroy(&self, sandbox: &SandboxRow) -> Result<(), ProviderError> {
        if let Some(daemon) = self.recorded_daemon(sandbox) {
            if sandbox.isolation != Isolation::Namespaces {
                // No namespace whose end ends everything: the daemon is a child subreaper, so
                // what it started, orphans included, stays below it while it lives. Stopped, it
                // starts nothing more; what is below it is killed before it is.
                daemon.signal(libc::SIGSTOP);
                let left = pids::kill_descendants(daemon, KILL_ROUNDS).await;
                if left > 0 {
                    let error = format!("{left} processes were still starting others after {KILL_ROUNDS} rounds");
                    events::CleanupFailed { what: "killing a local sandbox's processes", error: &error }.emit();
                }
            }
            // With namespaces, the daemon is the namespace's PID 1: when it dies the kernel
            // kills every process in the namespace.
            daemon.signal(libc::SIGCONT);
            daemon.signal(libc::SIGKILL);
            if !daemon.gone_within(EXIT_TIMEOUT).await {
                let error = format!("pid {} still runs {} s after SIGKILL", daemon.pid, EXIT_TIMEOUT.as_secs());
                events::CleanupFailed { what: "stopping a local sandbox's daemon", error: &error }.emit();
            }
        }
        self.remove_dir(sandbox).await
    }

    async fn exec(
        &self,
        sandbox: &SandboxRow,
        command: &str,
        cwd: Option<&str>,
        env: &[(String, String)],
        timeout: Duration,
    ) -> Result<ExecOutput, ProviderError> {
        // Without its daemon, a command here would run on the host as the relay's user: never
        // for a sandbox that is, or could be, isolated.
        if sandbox.isolation == Isolation::Namespaces || matches!(self.support, Support::Namespaces { .. }) {
            return Err(ProviderError::DaemonStart(
                "an isolated sandbox runs commands only through its daemon; see envd.log".into(),
            ));
        }
        let layout = Layout::of(&self.dir(sandbox));
        let dir = cwd.map(PathBuf::from).unwrap_or(layout.work.clone());
        if !dir.is_dir() {
            return Err(ProviderError::NoSuchDirectory(dir.to_string_lossy().into_owned()));
        }
        let mut cmd = Command::new("/bin/bash");
        cmd.arg("-lc").arg(command).current_dir(dir);
        cmd.env_clear().envs(isolation::daemon_env(&layout.home)).envs(env.iter().cloned());
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.process_group(0).kill_on_drop(true);
        let mut child =
            cmd.spawn().map_err(|e| ProviderError::Io { context: "running the command".into(), source: e })?;
        // Each output is read into its last EXEC_OUTPUT_BYTES as it comes, as the other
        // providers' execs keep it: a command printing gigabytes costs the relay 256 KiB each.
        let (mut out, mut err) =
            (crate::text::Tail::new(super::EXEC_OUTPUT_BYTES), crate::text::Tail::new(super::EXEC_OUTPUT_BYTES));
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let run = async {
            tokio::join!(super::read_tail(stdout, &mut out), super::read_tail(stderr, &mut err));
            child.wait().await
        };
        // At the timeout the child is dropped, and so killed (`kill_on_drop`).
        match tokio::time::timeout(timeout, run).await {
            Ok(Ok(status)) => Ok(ExecOutput::of(status.code().unwrap_or(-1), out, err, false)),
            Ok(Err(e)) => Err(ProviderError::Io { context: "running the command".into(), source: e }),
            Err(_) => Ok(ExecOutput::of(-1, out, err, true)),
        }
    }
}
