//! The fallback exec: a command run in a pod through its `exec` subresource (for a sandbox
//! without a daemon, and for the provider's own setup), its output kept to its last bytes, and
//! every process it started killed when it times out or its caller goes away — the docker
//! provider's semantics (`docker/exec.rs`).
//!
//! Kubernetes' exec takes no environment and no user: the command runs as the container's user,
//! under `env` with the exec's mark (`HANGAR_EXEC`) and the caller's variables as arguments (no
//! input is spliced into a script's text).
use std::time::Duration;

use k8s_openapi::{api::core::v1::Pod, apimachinery::pkg::apis::meta::v1::Status};
use kube::api::{Api, AttachParams};

use super::{
    super::options::{bad, valid_env_key, ENV_EXEC_MARK},
    api_error, gone,
    pod::{pod_name, CONTAINER},
    status, KubernetesProvider,
};
use crate::{
    events,
    providers::{docker::scripts::KILL_SCRIPT, read_tail, ExecOutput, ProviderError, EXEC_OUTPUT_BYTES},
    store::SandboxRow,
    text::Tail,
};

/// How long the kill of a timed-out exec may take.
const KILL_WAIT: Duration = Duration::from_secs(10);

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
    /// Runs `cmd` in the pod through its `exec` subresource, collecting its output until it ends
    /// or `timeout` passes; then every process of the exec is killed.
    pub(super) async fn run_exec(
        &self,
        sandbox: &SandboxRow,
        cmd: Vec<String>,
        env: &[(String, String)],
        timeout: Duration,
    ) -> Result<ExecOutput, ProviderError> {
        let pods = self.cluster().await?.pods();
        let name = pod_name(&sandbox.id);
        let mark = crate::random::hex(12);
        let mut argv = vec!["env".to_string(), format!("{ENV_EXEC_MARK}={mark}")];
        for (k, v) in env {
            if !valid_env_key(k) || k == ENV_EXEC_MARK {
                return Err(bad(format!("env: {k:?} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")));
            }
            argv.push(format!("{k}={v}"));
        }
        argv.extend(cmd);
        let mut attached = match pods.exec(&name, argv, &attach()).await {
            Ok(a) => a,
            Err(e) if status(&e) == Some(404) => return Err(gone(sandbox, "no longer exists")),
            Err(e) => return Err(api_error("starting the command", e)),
        };
        // Whatever happens from here (a timeout, the caller going away), the exec's processes
        // die with it unless it ends by itself.
        let mut guard = KillOnDrop { pods, pod: name, sandbox: sandbox.name.clone(), mark, armed: true };
        let (stdout, stderr) = (attached.stdout(), attached.stderr());
        let status = attached.take_status();
        let (mut out, mut err) = (Tail::new(EXEC_OUTPUT_BYTES), Tail::new(EXEC_OUTPUT_BYTES));
        let run = async {
            tokio::join!(read_tail(stdout, &mut out), read_tail(stderr, &mut err));
            match status {
                Some(s) => s.await,
                None => None,
            }
        };
        let ended = tokio::time::timeout(timeout, run).await;
        drop(attached);
        let Ok(ended) = ended else {
            guard.kill().await;
            events::FallbackExecKilled { sandbox: &sandbox.name, reason: "timeout" }.emit();
            return Ok(ExecOutput::of(-1, out, err, true));
        };
        guard.armed = false;
        let exit_code = match ended {
            Some(s) => exit_code(&s).ok_or_else(|| {
                ProviderError::Engine(format!(
                    "running the command: Kubernetes reported {}",
                    s.message.as_deref().unwrap_or("a failure without a message")
                ))
            })?,
            // The stream ended without a status: the pod went away under it.
            None => -1,
        };
        Ok(ExecOutput::of(exit_code, out, err, false))
    }
}

/// Kills a fallback exec's processes (found by their environment mark, from a second exec) when
/// its run ends early: at its timeout, or when the caller goes away. Kubernetes ends neither an
/// exec's processes when its stream closes, so this is the only way they end.
struct KillOnDrop {
    pods: Api<Pod>,
    pod: String,
    sandbox: String,
    mark: String,
    armed: bool,
}

impl KillOnDrop {
    fn killer(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (pods, pod, mark) = (self.pods.clone(), self.pod.clone(), self.mark.clone());
        async move {
            let cmd = vec!["bash".to_string(), "-c".into(), KILL_SCRIPT.into(), "hangar-kill".into(), mark];
            let Ok(attached) = pods.exec(&pod, cmd, &attach()).await else { return };
            let _ = tokio::time::timeout(KILL_WAIT, attached.join()).await;
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
