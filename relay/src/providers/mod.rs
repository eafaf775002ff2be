//! Providers create and control sandboxes: `local` (a directory and a hangar-envd on loopback),
//! `docker` (a container from a local image, its hangar-envd reached at the container's IP),
//! `e2b` (an E2B sandbox made through E2B's REST API, its own envd reached through E2B's edge) and
//! `kubernetes` (a pod, its hangar-envd reached at the pod's IP or through the API server's
//! port-forward). A provider that sees a sandbox's resource vanish reports it through `gone`
//! (to `sessions::gone`).
//!
//! `fallback` is the container providers' one fallback exec (each gives its primitive, `Spawn`),
//! with the shell scripts it runs in `scripts`.
//!
//! Invariant: providers own the sandbox's lifecycle and the fallback exec; they never interpret
//! what runs inside.
pub mod docker;
pub mod e2b;
mod fallback;
pub mod gone;
pub mod kubernetes;
pub mod local;
pub mod options;
mod scripts;

use std::{path::PathBuf, time::Duration};

use crate::{envd::Envd, store::SandboxRow};

/// How much of each output (stdout, stderr) a provider's own exec keeps: its last 256 KiB.
pub const EXEC_OUTPUT_BYTES: usize = 256 * 1024;

/// Reads `reader` to its end (or its first error) into `tail`, which keeps only its last bytes
/// as they come: an exec's output costs the relay its tail, however much the command prints.
pub(crate) async fn read_tail(reader: Option<impl tokio::io::AsyncRead + Unpin>, tail: &mut crate::text::Tail) {
    use tokio::io::AsyncReadExt as _;
    let Some(mut reader) = reader else { return };
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = reader.read(&mut buf).await {
        if n == 0 {
            break;
        }
        tail.push(&buf[..n]);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("{0}")]
    BadOptions(String),
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    #[error("the sandbox's daemon did not start: {0}")]
    DaemonStart(String),
    /// The sandbox's daemon could not be reached or addressed (its client's own error, kept
    /// whole: an unreachable daemon may answer later, a bad address never will).
    #[error("the sandbox's daemon did not start: {0}")]
    Envd(#[from] crate::envd::EnvdError),
    #[error("{0} is not supported by the {1} provider")]
    Unsupported(&'static str, &'static str),
    /// The image a sandbox names is not on the provider's host (hangar never pulls).
    #[error("image {0:?} is not on the Docker host (hangar never pulls images: build or load it there first)")]
    ImageNotFound(String),
    /// The provider's backend (the Docker Engine) does not answer.
    #[error("{0}")]
    Unreachable(String),
    /// The backend answered with an error.
    #[error("{0}")]
    Engine(String),
    /// What the sandbox was made of (its container) no longer exists.
    #[error("{0}")]
    Gone(String),
    /// The provider's exec was given a working directory that does not exist.
    #[error("cwd {0:?} is not an existing directory")]
    NoSuchDirectory(String),
    /// A local sandbox's own filesystem could not be made, mounted or unmounted.
    #[error(transparent)]
    Disk(#[from] local::DiskError),
}

/// What a provider's own exec (no daemon) returns.
#[derive(Debug, Clone, Default)]
pub struct ExecOutput {
    pub exit_code: i32,
    /// The last `EXEC_OUTPUT_BYTES` of each output, and how many bytes came before them.
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
    pub timed_out: bool,
}

impl ExecOutput {
    /// The outputs as their tails kept them.
    pub(crate) fn of(exit_code: i32, stdout: crate::text::Tail, stderr: crate::text::Tail, timed_out: bool) -> Self {
        let (stdout_dropped, stderr_dropped) = (stdout.dropped(), stderr.dropped());
        ExecOutput {
            exit_code,
            stdout: stdout.into_bytes(),
            stderr: stderr.into_bytes(),
            stdout_dropped,
            stderr_dropped,
            timed_out,
        }
    }
}

#[tonic::async_trait]
pub trait Provider: Send + Sync {
    fn name(&self) -> &'static str;
    /// The host directory a sandbox's files live in, when they are on the relay's own host:
    /// the paths clients name there are confined to it. `None` elsewhere.
    fn host_root(&self, _sandbox: &SandboxRow) -> Option<PathBuf> {
        None
    }
    /// Creates the sandbox: fills in its workdir and, when it has one, its daemon.
    async fn create(&self, sandbox: &mut SandboxRow) -> Result<(), ProviderError>;
    /// Makes sure a running sandbox's daemon answers, restarting it where the provider can.
    /// Returns the client, or `None` for a sandbox without a daemon.
    async fn daemon(&self, sandbox: &mut SandboxRow) -> Result<Option<Envd>, ProviderError>;
    async fn pause(&self, sandbox: &mut SandboxRow) -> Result<(), ProviderError>;
    async fn resume(&self, sandbox: &mut SandboxRow) -> Result<(), ProviderError>;
    /// Destroys the sandbox and everything running in it.
    async fn destroy(&self, sandbox: &SandboxRow) -> Result<(), ProviderError>;
    /// The provider's own exec: `bash -lc command` with `env` added to its environment, output
    /// in one piece.
    async fn exec(
        &self,
        sandbox: &SandboxRow,
        command: &str,
        cwd: Option<&str>,
        env: &[(String, String)],
        timeout: Duration,
    ) -> Result<ExecOutput, ProviderError>;
}
