//! The provider's primitive for the shared fallback exec (`providers::fallback`): a program
//! started in a container through the Engine's exec API.
use std::{pin::Pin, time::Duration};

use bollard::{
    container::LogOutput,
    errors::Error as DockerError,
    exec::{StartExecOptions, StartExecResults},
    models::ExecConfig,
    Docker,
};
use futures::{Stream, StreamExt};

use super::{
    container_name,
    engine::{engine, gone, status},
    DockerProvider,
};
use crate::{
    providers::{
        fallback::{Running, Spawn},
        options::ENV_EXEC_MARK,
        ProviderError,
    },
    store::SandboxRow,
    text::Tail,
};

/// How long to wait for an exec's exit code once its output has ended.
const EXIT_CODE_WAIT: Duration = Duration::from_secs(5);

impl DockerProvider {
    /// The sandbox's container, to start programs in.
    pub(super) async fn container(&self, sandbox: &SandboxRow) -> Result<Container, ProviderError> {
        Ok(Container { docker: self.docker().await?.clone(), sandbox: sandbox.clone() })
    }
}

/// A sandbox's container, reached through the Engine.
#[derive(Clone)]
pub(super) struct Container {
    docker: Docker,
    sandbox: SandboxRow,
}

/// An Engine exec's attached output.
type Output = Pin<Box<dyn Stream<Item = Result<LogOutput, DockerError>> + Send>>;

pub(super) struct Exec {
    docker: Docker,
    id: String,
    output: Option<Output>,
}

#[tonic::async_trait]
impl Spawn for Container {
    type Running = Exec;

    async fn spawn(
        &self,
        argv: Vec<String>,
        user: Option<String>,
        env: &[(String, String)],
        mark: Option<&str>,
    ) -> Result<Exec, ProviderError> {
        let mut vars: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        vars.extend(mark.map(|m| format!("{ENV_EXEC_MARK}={m}")));
        let config = ExecConfig {
            attach_stdin: Some(false),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            env: (!vars.is_empty()).then_some(vars),
            cmd: Some(argv),
            user,
            ..Default::default()
        };
        let created = match self.docker.create_exec(&container_name(&self.sandbox), config).await {
            Ok(c) => c,
            Err(e) if status(&e) == Some(404) => return Err(gone(&self.sandbox)),
            Err(e) => return Err(engine("starting the command", e)),
        };
        let started = self
            .docker
            .start_exec(&created.id, Some(StartExecOptions { detach: false, tty: false, output_capacity: None }))
            .await
            .map_err(|e| engine("starting the command", e))?;
        let StartExecResults::Attached { output, .. } = started else {
            return Err(ProviderError::Engine("starting the command: Docker did not attach its output".into()));
        };
        Ok(Exec { docker: self.docker.clone(), id: created.id, output: Some(output) })
    }
}

#[tonic::async_trait]
impl Running for Exec {
    async fn outputs(&mut self, stdout: &mut Tail, stderr: &mut Tail) -> Result<(), ProviderError> {
        let Some(output) = self.output.as_mut() else { return Ok(()) };
        while let Some(chunk) = output.next().await {
            match chunk {
                Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => stdout.push(&message),
                Ok(LogOutput::StdErr { message }) => stderr.push(&message),
                Ok(LogOutput::StdIn { .. }) => {}
                Err(e) => return Err(engine("reading the command's output", e)),
            }
        }
        Ok(())
    }

    async fn exit_code(mut self) -> Result<i32, ProviderError> {
        self.output = None;
        // The output ends a moment before the Engine records the exit code.
        let until = tokio::time::Instant::now() + EXIT_CODE_WAIT;
        loop {
            let info = self.docker.inspect_exec(&self.id).await.map_err(|e| engine("inspecting the command", e))?;
            match (info.running, info.exit_code) {
                (Some(false), Some(code)) => return Ok(i32::try_from(code).unwrap_or(-1)),
                _ if tokio::time::Instant::now() >= until => return Ok(-1),
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }
}
