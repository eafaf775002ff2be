//! The fallback exec: a command run in a container through the Engine's exec API (for a sandbox
//! without a daemon, and for the provider's own setup), its output kept to its last bytes, and
//! every process it started killed when it times out or its caller goes away.
use std::{sync::Arc, time::Duration};

use bollard::{
    container::LogOutput,
    exec::{StartExecOptions, StartExecResults},
    models::ExecConfig,
    Docker,
};
use futures::StreamExt;
use tokio::sync::OnceCell;

use super::{
    container_name,
    engine::{engine, gone, status},
    scripts::KILL_SCRIPT,
    DockerProvider,
};
use crate::{
    events,
    providers::{options::ENV_EXEC_MARK, ExecOutput, ProviderError, EXEC_OUTPUT_BYTES},
    store::SandboxRow,
    text::Tail,
};

/// How long to wait for an exec's exit code once its output has ended.
const EXIT_CODE_WAIT: Duration = Duration::from_secs(5);

impl DockerProvider {
    /// Runs `cmd` in the container through the Engine's exec API, collecting its output until it
    /// ends or `timeout` passes; then every process of the exec is killed.
    pub(super) async fn run_exec(
        &self,
        sandbox: &SandboxRow,
        cmd: Vec<String>,
        user: Option<String>,
        env: &[(String, String)],
        timeout: Duration,
    ) -> Result<ExecOutput, ProviderError> {
        let docker = self.docker().await?;
        let name = container_name(sandbox);
        let mark = crate::random::hex(12);
        let config = ExecConfig {
            attach_stdin: Some(false),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).chain([format!("{ENV_EXEC_MARK}={mark}")]).collect()),
            cmd: Some(cmd),
            user: user.clone(),
            ..Default::default()
        };
        let created = match docker.create_exec(&name, config).await {
            Ok(c) => c,
            Err(e) if status(&e) == Some(404) => return Err(gone(sandbox)),
            Err(e) => return Err(engine("starting the command", e)),
        };
        // Whatever happens from here (a timeout, the caller going away), the exec's processes
        // die with it unless it ends by itself.
        let mut guard = KillOnDrop {
            client: self.client.clone(),
            sandbox: sandbox.name.clone(),
            container: name.clone(),
            user,
            mark,
            armed: true,
        };
        let started = docker
            .start_exec(&created.id, Some(StartExecOptions { detach: false, tty: false, output_capacity: None }))
            .await
            .map_err(|e| engine("starting the command", e))?;
        let StartExecResults::Attached { mut output, .. } = started else {
            return Err(ProviderError::Engine("starting the command: Docker did not attach its output".into()));
        };
        let (mut stdout, mut stderr) = (Tail::new(EXEC_OUTPUT_BYTES), Tail::new(EXEC_OUTPUT_BYTES));
        let deadline = tokio::time::Instant::now() + timeout;
        let mut timed_out = false;
        loop {
            match tokio::time::timeout_at(deadline, output.next()).await {
                Ok(Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message }))) => stdout.push(&message),
                Ok(Some(Ok(LogOutput::StdErr { message }))) => stderr.push(&message),
                Ok(Some(Ok(LogOutput::StdIn { .. }))) => {}
                Ok(Some(Err(e))) => return Err(engine("reading the command's output", e)),
                Ok(None) => break,
                Err(_) => {
                    timed_out = true;
                    break;
                }
            }
        }
        drop(output);
        if timed_out {
            guard.kill().await;
            events::FallbackExecKilled { sandbox: &sandbox.name, reason: "timeout" }.emit();
            return Ok(ExecOutput::of(-1, stdout, stderr, true));
        }
        guard.armed = false;
        // The output ends a moment before the Engine records the exit code.
        let until = tokio::time::Instant::now() + EXIT_CODE_WAIT;
        let exit_code = loop {
            let info = docker.inspect_exec(&created.id).await.map_err(|e| engine("inspecting the command", e))?;
            match (info.running, info.exit_code) {
                (Some(false), Some(code)) => break i32::try_from(code).unwrap_or(-1),
                _ if tokio::time::Instant::now() >= until => break -1,
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        Ok(ExecOutput::of(exit_code, stdout, stderr, false))
    }
}

/// Kills a fallback exec's processes (found by their environment mark, from a second exec) when
/// its run ends early: at its timeout, or when the caller goes away. The second exec runs as the
/// command's user: root in a container lacks CAP_SYS_PTRACE, so it could not read another
/// user's `/proc/<pid>/environ`.
struct KillOnDrop {
    client: Arc<OnceCell<Docker>>,
    sandbox: String,
    container: String,
    user: Option<String>,
    mark: String,
    armed: bool,
}

impl KillOnDrop {
    fn killer(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (client, container, mark, user) =
            (self.client.clone(), self.container.clone(), self.mark.clone(), self.user.clone());
        async move {
            let Some(docker) = client.get() else { return };
            let config = ExecConfig {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(vec!["bash".into(), "-c".into(), KILL_SCRIPT.into(), "hangar-kill".into(), mark]),
                user,
                ..Default::default()
            };
            let Ok(created) = docker.create_exec(&container, config).await else { return };
            if let Ok(StartExecResults::Attached { mut output, .. }) = docker.start_exec(&created.id, None).await {
                let _ = tokio::time::timeout(Duration::from_secs(10), async { while output.next().await.is_some() {} })
                    .await;
            }
        }
    }

    async fn kill(&mut self) {
        self.armed = false;
        self.killer().await;
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.armed {
            events::FallbackExecKilled { sandbox: &self.sandbox, reason: "client" }.emit();
            tokio::spawn(self.killer());
        }
    }
}
