//! The fallback exec of the providers whose sandboxes are containers (`docker`, `kubernetes`):
//! a command run without the sandbox's daemon, its output kept to its last bytes, and every
//! process it started killed when it times out or its caller goes away. Each provider gives one
//! primitive, `Spawn` (start a program in a sandbox; read its outputs and its exit code), and
//! this module does the rest once: the mark that finds the command's processes, the timeout,
//! the kill (`KillOnDrop`), the working directory (`scripts::EXEC_SCRIPT`) and the workdir
//! (`scripts::WORKDIR_SCRIPT`).
use std::time::Duration;

use super::{
    scripts::{EXEC_SCRIPT, KILL_SCRIPT, WORKDIR_SCRIPT},
    ExecOutput, ProviderError, EXEC_OUTPUT_BYTES,
};
use crate::{events, store::SandboxRow, text::Tail};

/// How long the kill of a command's processes may take.
const KILL_WAIT: Duration = Duration::from_secs(10);
/// Making a workdir is one short script.
const WORKDIR_TIMEOUT: Duration = Duration::from_secs(30);

/// A provider's one primitive: starting a program in one sandbox (a container, a pod). Cloned
/// into the kill that outlives its caller, so it holds what it needs by value.
#[tonic::async_trait]
pub(crate) trait Spawn: Clone + Send + Sync + 'static {
    type Running: Running;

    /// Starts `argv` as `user` (where the provider can choose; `None`: the sandbox's own), with
    /// `env` added to its environment and, when given, `mark` as `options::ENV_EXEC_MARK`.
    async fn spawn(
        &self,
        argv: Vec<String>,
        user: Option<String>,
        env: &[(String, String)],
        mark: Option<&str>,
    ) -> Result<Self::Running, ProviderError>;
}

/// A program `Spawn` started.
#[tonic::async_trait]
pub(crate) trait Running: Send + Sized {
    /// Reads its outputs into the tails until both end.
    async fn outputs(&mut self, stdout: &mut Tail, stderr: &mut Tail) -> Result<(), ProviderError>;
    /// Its exit code once its outputs ended.
    async fn exit_code(self) -> Result<i32, ProviderError>;
}

/// Runs `argv` to its end, or to `timeout`; then every process it started is killed, as it is
/// when the caller goes away before its end.
pub(crate) async fn run<S: Spawn>(
    spawner: &S,
    sandbox: &SandboxRow,
    argv: Vec<String>,
    user: Option<String>,
    env: &[(String, String)],
    timeout: Duration,
) -> Result<ExecOutput, ProviderError> {
    let mark = crate::random::hex(12);
    let mut running = spawner.spawn(argv, user.clone(), env, Some(&mark)).await?;
    // Whatever happens from here (a timeout, the caller going away), the command's processes
    // die with it unless it ends by itself.
    let mut guard = KillOnDrop { spawner: spawner.clone(), sandbox: sandbox.name.clone(), user, mark, armed: true };
    let (mut stdout, mut stderr) = (Tail::new(EXEC_OUTPUT_BYTES), Tail::new(EXEC_OUTPUT_BYTES));
    let ended = tokio::time::timeout(timeout, running.outputs(&mut stdout, &mut stderr)).await;
    let Ok(ended) = ended else {
        drop(running);
        guard.kill().await;
        events::FallbackExecKilled { sandbox: &sandbox.name, reason: "timeout" }.emit();
        return Ok(ExecOutput::of(-1, stdout, stderr, true));
    };
    // An output that broke leaves the guard armed: the command is killed as the caller's.
    ended?;
    guard.armed = false;
    let exit_code = running.exit_code().await?;
    Ok(ExecOutput::of(exit_code, stdout, stderr, false))
}

/// `Provider::exec` for a container: `bash -lc command` in `cwd` (else the sandbox's workdir,
/// else the user's home) as `user`, through `scripts::EXEC_SCRIPT`.
pub(crate) async fn exec<S: Spawn>(
    spawner: &S,
    sandbox: &SandboxRow,
    command: &str,
    cwd: Option<&str>,
    user: Option<String>,
    env: &[(String, String)],
    timeout: Duration,
) -> Result<ExecOutput, ProviderError> {
    // What the script says when it cannot enter the directory.
    let no_dir = format!("hangar-no-such-directory:{}", crate::random::hex(8));
    let argv = vec![
        "bash".to_string(),
        "-c".into(),
        EXEC_SCRIPT.into(),
        "hangar-exec".into(),
        cwd.unwrap_or_default().to_string(),
        sandbox.workdir.clone().unwrap_or_default(),
        command.to_string(),
        no_dir.clone(),
    ];
    let out = run(spawner, sandbox, argv, user, env, timeout).await?;
    if out.exit_code == 1 && out.stdout.is_empty() && out.stderr == format!("{no_dir}\n").as_bytes() {
        return Err(ProviderError::NoSuchDirectory(cwd.unwrap_or_default().to_string()));
    }
    Ok(out)
}

/// Makes the sandbox's workdir `dir` where the image lacks it, owned by `owner`
/// (`scripts::WORKDIR_SCRIPT`), running as `user` (root, where the provider can choose).
pub(crate) async fn make_workdir<S: Spawn>(
    spawner: &S,
    sandbox: &SandboxRow,
    dir: &str,
    owner: Option<String>,
    user: Option<String>,
) -> Result<(), ProviderError> {
    let argv = vec![
        "bash".to_string(),
        "-c".into(),
        WORKDIR_SCRIPT.into(),
        "hangar-workdir".into(),
        dir.to_string(),
        owner.unwrap_or_default(),
    ];
    let out = run(spawner, sandbox, argv, user, &[], WORKDIR_TIMEOUT).await?;
    if out.exit_code != 0 {
        return Err(ProviderError::Engine(format!(
            "making the workdir {dir:?} (exit code {}): {}",
            out.exit_code,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Kills a command's processes (found by their environment mark, from a second program that
/// does not carry it) when its run ends early: at its timeout, or when the caller goes away.
/// Neither Docker nor Kubernetes ends an exec's processes when its stream closes, so this is
/// the only way they end. The killer runs as the command's user: root in a container lacks
/// CAP_SYS_PTRACE, so it could not read another user's `/proc/<pid>/environ`.
struct KillOnDrop<S: Spawn> {
    spawner: S,
    sandbox: String,
    user: Option<String>,
    mark: String,
    armed: bool,
}

impl<S: Spawn> KillOnDrop<S> {
    fn killer(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (spawner, user, mark) = (self.spawner.clone(), self.user.clone(), self.mark.clone());
        async move {
            let argv = vec!["bash".to_string(), "-c".into(), KILL_SCRIPT.into(), "hangar-kill".into(), mark];
            let Ok(mut running) = spawner.spawn(argv, user, &[], None).await else { return };
            let (mut out, mut err) = (Tail::new(0), Tail::new(0));
            let _ = tokio::time::timeout(KILL_WAIT, running.outputs(&mut out, &mut err)).await;
        }
    }

    async fn kill(&mut self) {
        self.armed = false;
        self.killer().await;
    }
}

impl<S: Spawn> Drop for KillOnDrop<S> {
    fn drop(&mut self) {
        if self.armed {
            events::FallbackExecKilled { sandbox: &self.sandbox, reason: "client" }.emit();
            tokio::spawn(self.killer());
        }
    }
}
