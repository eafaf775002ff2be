//! The provider's primitive for the shared fallback exec (`providers::fallback`): a program
//! started in a pod through its `exec` subresource.
//!
//! Kubernetes' exec takes no environment and no user: the program runs as the container's user,
//! under `env` with the exec's mark (`HANGAR_EXEC`) and the caller's variables as arguments (no
//! input is spliced into a script's text).
use std::{future::Future, pin::Pin};

use k8s_openapi::{api::core::v1::Pod, apimachinery::pkg::apis::meta::v1::Status};
use kube::api::{Api, AttachParams, AttachedProcess};

use super::{
    super::options::{bad, valid_env_key, ENV_EXEC_MARK},
    api_error, gone,
    pod::{pod_name, CONTAINER},
    status, KubernetesProvider,
};
use crate::{
    providers::{
        fallback::{Running, Spawn},
        read_tail, ProviderError,
    },
    store::SandboxRow,
    text::Tail,
};

fn attach() -> AttachParams {
    AttachParams::default().container(CONTAINER).stdin(false).stdout(true).stderr(true).tty(false)
}

/// The exit code Kubernetes reports on the exec's status channel: `Success` is 0; a
/// `NonZeroExitCode` failure carries it as the `ExitCode` cause.
fn exit_code(status: &Status) -> Option<i32> {
    if status.status.as_deref() == Some("Success") {
        return Some(0);
    }
    if status.reason.as_deref() != Some("NonZeroExitCode") {
        return None;
    }
    status
        .details
        .as_ref()?
        .causes
        .iter()
        .flatten()
        .find(|c| c.reason.as_deref() == Some("ExitCode"))?
        .message
        .as_deref()?
        .parse()
        .ok()
}

impl KubernetesProvider {
    /// The sandbox's pod, to start programs in.
    pub(super) async fn pod(&self, sandbox: &SandboxRow) -> Result<PodExec, ProviderError> {
        Ok(PodExec { pods: self.cluster().await?.pods(), sandbox: sandbox.clone() })
    }
}

/// A sandbox's pod, reached through the API server.
#[derive(Clone)]
pub(super) struct PodExec {
    pods: Api<Pod>,
    sandbox: SandboxRow,
}

/// An exec's end on its status channel.
type Ended = Pin<Box<dyn Future<Output = Option<Status>> + Send>>;

pub(super) struct Attached {
    process: Option<AttachedProcess>,
    status: Option<Ended>,
    /// What the status channel said, once the outputs ended.
    ended: Option<Status>,
}

#[tonic::async_trait]
impl Spawn for PodExec {
    type Running = Attached;

    async fn spawn(
        &self,
        argv: Vec<String>,
        _user: Option<String>,
        env: &[(String, String)],
        mark: Option<&str>,
    ) -> Result<Attached, ProviderError> {
        let mut full = Vec::new();
        if let Some(mark) = mark {
            full = vec!["env".to_string(), format!("{ENV_EXEC_MARK}={mark}")];
            for (k, v) in env {
                if !valid_env_key(k) || k == ENV_EXEC_MARK {
                    return Err(bad(format!("env: {k:?} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")));
                }
                full.push(format!("{k}={v}"));
            }
        }
        full.extend(argv);
        let mut process = match self.pods.exec(&pod_name(&self.sandbox.id), full, &attach()).await {
            Ok(a) => a,
            Err(e) if status(&e) == Some(404) => return Err(gone(&self.sandbox, "no longer exists")),
            Err(e) => return Err(api_error("starting the command", e)),
        };
        let status = process.take_status().map(|s| Box::pin(s) as Ended);
        Ok(Attached { process: Some(process), status, ended: None })
    }
}

#[tonic::async_trait]
impl Running for Attached {
    /// Reads both outputs and then the status channel: the timeout around this covers the end.
    async fn outputs(&mut self, stdout: &mut Tail, stderr: &mut Tail) -> Result<(), ProviderError> {
        let Some(process) = self.process.as_mut() else { return Ok(()) };
        let (out, err) = (process.stdout(), process.stderr());
        tokio::join!(read_tail(out, stdout), read_tail(err, stderr));
        if let Some(status) = self.status.take() {
            self.ended = status.await;
        }
        Ok(())
    }

    async fn exit_code(mut self) -> Result<i32, ProviderError> {
        self.process = None;
        match self.ended {
            Some(s) => exit_code(&s).ok_or_else(|| {
                ProviderError::Engine(format!(
                    "running the command: Kubernetes reported {}",
                    s.message.as_deref().unwrap_or("a failure without a message")
                ))
            }),
            // The stream ended without a status: the pod went away under it.
            None => Ok(-1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};

    #[test]
    fn exit_codes_from_the_status_channel() {
        let ok = Status { status: Some("Success".into()), ..Default::default() };
        assert_eq!(exit_code(&ok), Some(0));
        let failed = Status {
            status: Some("Failure".into()),
            reason: Some("NonZeroExitCode".into()),
            details: Some(StatusDetails {
                causes: Some(vec![StatusCause {
                    reason: Some("ExitCode".into()),
                    message: Some("3".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(exit_code(&failed), Some(3));
        let other =
            Status { status: Some("Failure".into()), reason: Some("InternalError".into()), ..Default::default() };
        assert_eq!(exit_code(&other), None);
    }
}
