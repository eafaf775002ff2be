//! The `local` provider, the embedded default: a directory under the state directory with a
//! hangar-envd on a loopback port and its own access token. It isolates nothing: processes run as
//! the relay's user on the host. For development and tests.
use std::{
    io,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::{io::AsyncBufReadExt, process::Command};

use super::{ExecOutput, Provider, ProviderError};
use crate::{auth, envd::Envd, events, store::SandboxRow};

pub struct LocalProvider {
    root: PathBuf,
    envd_bin: PathBuf,
}

const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
const START_TIMEOUT: Duration = Duration::from_secs(15);

impl LocalProvider {
    pub fn new(root: PathBuf, envd_bin: PathBuf) -> Self {
        Self { root, envd_bin }
    }

    fn dir(&self, sandbox: &SandboxRow) -> PathBuf {
        // Sandbox ids are relay-made (`sbx_<hex>`), never client text.
        self.root.join(&sandbox.id)
    }

    fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> ProviderError {
        let context = context.into();
        move |source| ProviderError::Io { context, source }
    }

    /// Starts the sandbox's daemon and records where it listens.
    async fn start_daemon(&self, sandbox: &mut SandboxRow) -> Result<Envd, ProviderError> {
        let dir = self.dir(sandbox);
        let work = dir.join("work");
        let token = sandbox.envd_token.clone().unwrap_or_else(|| auth::random_hex(32));
        let token_file = dir.join("envd.token");
        write_secret(&token_file, &token).map_err(Self::io("writing the daemon's token"))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("envd.log"))
            .map_err(Self::io("opening the daemon's log"))?;
        let mut child = Command::new(&self.envd_bin)
            .arg("--listen")
            .arg("127.0.0.1")
            .arg("--port")
            .arg("0")
            .arg("--access-token-file")
            .arg(&token_file)
            .arg("--default-workdir")
            .arg(&work)
            // Processes get the sandbox's directory as HOME: login shells there never read the
            // host user's dotfiles.
            .arg("--env")
            .arg(format!("HOME={}", work.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            // Its own process group: a Ctrl-C to the relay's terminal does not reach it, and it
            // outlives the relay.
            .process_group(0)
            .kill_on_drop(false)
            .spawn()
            .map_err(Self::io(format!("starting {}", self.envd_bin.display())))?;
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
        let pid = child.id().map(i64::from);
        // Reap it if it dies while the relay runs; after a relay restart init does.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        sandbox.envd_url = Some(url.clone());
        sandbox.envd_token = Some(token.clone());
        sandbox.envd_pid = pid;
        sandbox.workdir = Some(work.to_string_lossy().into_owned());
        events::DaemonStarted { sandbox: &sandbox.name, url: &url }.emit();
        Envd::new(&url, &token).map_err(|e| ProviderError::DaemonStart(e.to_string()))
    }
}

fn write_secret(path: &Path, secret: &str) -> io::Result<()> {
    use std::{io::Write as _, os::unix::fs::OpenOptionsExt as _};
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(secret.as_bytes())
}

fn signal_pid(pid: Option<i64>, sig: i32) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()).filter(|p| *p > 1) {
        // SAFETY: kill(2) with a pid the relay started; a stale pid fails with ESRCH.
        unsafe { libc::kill(pid, sig) };
    }
}

#[tonic::async_trait]
impl Provider for LocalProvider {
    fn name(&self) -> &'static str {
        "local"
    }

    fn host_root(&self, sandbox: &SandboxRow) -> Option<PathBuf> {
        Some(self.dir(sandbox).join("work"))
    }

    async fn create(&self, sandbox: &mut SandboxRow) -> Result<(), ProviderError> {
        if !sandbox.options.as_object().is_none_or(|o| o.is_empty()) {
            return Err(ProviderError::BadOptions("the local provider takes no options".into()));
        }
        let dir = self.dir(sandbox);
        std::fs::create_dir_all(dir.join("work")).map_err(Self::io(format!("creating {}", dir.display())))?;
        self.start_daemon(sandbox).await?;
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
        // Stops the daemon only: a local sandbox's processes are ordinary host processes.
        signal_pid(sandbox.envd_pid, libc::SIGSTOP);
        Ok(())
    }

    async fn resume(&self, sandbox: &mut SandboxRow) -> Result<(), ProviderError> {
        signal_pid(sandbox.envd_pid, libc::SIGCONT);
        Ok(())
    }

    async fn destroy(&self, sandbox: &SandboxRow) -> Result<(), ProviderError> {
        signal_pid(sandbox.envd_pid, libc::SIGCONT);
        signal_pid(sandbox.envd_pid, libc::SIGKILL);
        let dir = self.dir(sandbox);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ProviderError::Io { context: format!("removing {}", dir.display()), source: e }),
        }
    }

    async fn exec(
        &self,
        sandbox: &SandboxRow,
        command: &str,
        cwd: Option<&str>,
        timeout: Duration,
    ) -> Result<ExecOutput, ProviderError> {
        let work = self.dir(sandbox).join("work");
        let dir = cwd.map(PathBuf::from).unwrap_or(work.clone());
        if !dir.is_dir() {
            return Err(ProviderError::NoSuchDirectory(dir.to_string_lossy().into_owned()));
        }
        let mut cmd = Command::new("/bin/bash");
        cmd.arg("-lc").arg(command).current_dir(dir);
        cmd.env("HOME", &work).stdin(Stdio::null()).process_group(0).kill_on_drop(true);
        let child = cmd.output();
        match tokio::time::timeout(timeout, child).await {
            Ok(Ok(out)) => Ok(ExecOutput {
                exit_code: out.status.code().unwrap_or(-1),
                stdout: out.stdout,
                stderr: out.stderr,
                timed_out: false,
            }),
            Ok(Err(e)) => Err(ProviderError::Io { context: "running the command".into(), source: e }),
            Err(_) => Ok(ExecOutput { exit_code: -1, timed_out: true, ..Default::default() }),
        }
    }
}
