//! The relay's one client of a sandbox's daemon: gRPC over h2c with the sandbox's access token.
//!
//! Invariant: everything that comes back is sandbox data, never a decision: output is passed on
//! as text, and ownership is decided by the relay's MAC, not by anything envd says.
use std::{
    sync::{
        atomic::{AtomicU8, Ordering},
        Arc,
    },
    time::Duration,
};

use crate::error::Error;
pub use crate::store::DaemonKind;
use hangar_proto::{
    ext::{
        daemon_client::DaemonClient, files_client::FilesClient, processes_client::ProcessesClient, InfoRequest,
        SignalRequest,
    },
    filesystem::filesystem_client::FilesystemClient,
    process::{
        process_client::ProcessClient, process_selector, ListRequest, ProcessSelector, SendSignalRequest, Signal,
    },
};
use tonic::{
    metadata::MetadataValue,
    service::interceptor::InterceptedService,
    transport::{Channel, Endpoint},
    Code, Request, Status,
};

#[derive(Debug, thiserror::Error)]
pub enum EnvdError {
    #[error("bad daemon address {0:?}")]
    Address(String),
    #[error("the daemon's access token is not a valid header value")]
    Token,
    #[error("the daemon did not answer: {0}")]
    Unreachable(String),
}

#[derive(Clone)]
pub struct Auth {
    token: MetadataValue<tonic::metadata::Ascii>,
}

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        req.metadata_mut().insert("x-access-token", self.token.clone());
        Ok(req)
    }
}

type Authed = InterceptedService<Channel, Auth>;

/// What one stream may have in flight from the daemon before the relay reads it: the daemon's
/// ring (`--ring-bytes`' default), since more in flight buys a reader nothing the ring does not.
const STREAM_WINDOW: u32 = 256 * 1024;
/// HTTP/2's largest window, for the connection. A sandbox's streams share one connection, and
/// HTTP/2 limits the data in flight both per stream and per connection. With hyper's defaults
/// (2 MiB a stream, 5 MiB the connection) a few streams the relay did not read held the whole
/// connection window and every other stream of the sandbox stopped. This one covers 8,192
/// streams each holding its whole window (`HANGAR_STREAM_MAX_TOTAL` is 512 by default), so a
/// stream can only ever stop itself.
const CONNECTION_WINDOW: u32 = (1 << 31) - 1;

const KIND_UNKNOWN: u8 = 0;
const KIND_HANGAR: u8 = 1;
const KIND_E2B: u8 = 2;

#[derive(Clone)]
pub struct Envd {
    channel: Channel,
    auth: Auth,
    /// What `alive` found, shared by every clone on this connection.
    kind: Arc<AtomicU8>,
}

impl Envd {
    /// A lazily connecting client; calls fail fast if the daemon is gone.
    pub fn new(url: &str, token: &str) -> Result<Envd, EnvdError> {
        let endpoint = Endpoint::from_shared(url.to_string())
            .map_err(|_| EnvdError::Address(url.to_string()))?
            .connect_timeout(Duration::from_secs(3))
            .http2_keep_alive_interval(Duration::from_secs(30))
            .tcp_nodelay(true)
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW);
        let token = MetadataValue::try_from(token).map_err(|_| EnvdError::Token)?;
        Ok(Envd { channel: endpoint.connect_lazy(), auth: Auth { token }, kind: Arc::new(AtomicU8::new(KIND_UNKNOWN)) })
    }

    pub fn process(&self) -> ProcessClient<Authed> {
        ProcessClient::with_interceptor(self.channel.clone(), self.auth.clone())
    }

    pub fn processes(&self) -> ProcessesClient<Authed> {
        ProcessesClient::with_interceptor(self.channel.clone(), self.auth.clone())
    }

    pub fn files(&self) -> FilesClient<Authed> {
        FilesClient::with_interceptor(self.channel.clone(), self.auth.clone())
    }

    /// E2B's `filesystem.Filesystem` (its `WatchDir` is what a daemon without hangar's watches has).
    pub fn filesystem(&self) -> FilesystemClient<Authed> {
        FilesystemClient::with_interceptor(self.channel.clone(), self.auth.clone())
    }

    /// Which daemon answered `alive` last; `None` before it was asked.
    pub fn kind(&self) -> Option<DaemonKind> {
        match self.kind.load(Ordering::Relaxed) {
            KIND_HANGAR => Some(DaemonKind::Hangar),
            KIND_E2B => Some(DaemonKind::E2b),
            _ => None,
        }
    }

    /// Whether this daemon has hangar's extensions (as `alive` last found; a daemon never asked
    /// is taken for hangar-envd, whose refusals then say what failed).
    pub fn is_e2b(&self) -> bool {
        self.kind() == Some(DaemonKind::E2b)
    }

    /// SIGKILL to the process `pid`: with everything it started through hangar's `Signal` (its
    /// tree), or through E2B's `SendSignal` on E2B's envd (which signals that process only). A
    /// process already gone is no error.
    pub async fn kill_pid(&self, pid: u32) -> Result<(), Status> {
        let process = Some(ProcessSelector { selector: Some(process_selector::Selector::Pid(pid)) });
        let sent = if self.is_e2b() {
            let req = SendSignalRequest { process, signal: Signal::Sigkill as i32 };
            self.process().send_signal(req).await.map(|_| ())
        } else {
            let req = SignalRequest { process, signal: libc::SIGKILL, escalate_after_ms: None };
            self.processes().signal(req).await.map(|_| ())
        };
        match sent {
            Err(s) if s.code() != Code::NotFound => Err(s),
            _ => Ok(()),
        }
    }

    /// Whether the daemon answers (with this token) within `timeout`, and which it is: hangar's
    /// `Daemon/Info` answers, or it is `unimplemented` (E2B's envd, which a gRPC client sees as
    /// such also when the server answers HTTP 404) and E2B's `process.Process/List` answers.
    /// Once known, one call checks it again: the kind of daemon at an address does not change
    /// while its connection lasts.
    pub async fn alive(&self, timeout: Duration) -> Result<DaemonKind, EnvdError> {
        let answered = tokio::time::timeout(timeout, async {
            if self.kind() != Some(DaemonKind::E2b) {
                let mut client = DaemonClient::with_interceptor(self.channel.clone(), self.auth.clone());
                let mut req = Request::new(InfoRequest {});
                req.set_timeout(timeout);
                match client.info(req).await {
                    Ok(_) => return Ok(DaemonKind::Hangar),
                    Err(s) if s.code() == Code::Unimplemented && self.kind().is_none() => {}
                    Err(s) => return Err(s),
                }
            }
            let mut req = Request::new(ListRequest {});
            req.set_timeout(timeout);
            self.process().list(req).await.map(|_| DaemonKind::E2b)
        })
        .await;
        match answered {
            Ok(Ok(kind)) => {
                let code = if kind == DaemonKind::Hangar { KIND_HANGAR } else { KIND_E2B };
                self.kind.store(code, Ordering::Relaxed);
                Ok(kind)
            }
            Ok(Err(s)) => Err(EnvdError::Unreachable(s.message().to_string())),
            Err(_) => Err(EnvdError::Unreachable("timed out".into())),
        }
    }
}

/// A daemon's refusal as the relay's error; `what` says what was being done. The daemon's
/// codes say whose fault it was: the request's (invalid, not found), or the daemon's.
pub fn daemon_error(what: &str, s: Status) -> Error {
    let m = format!("{what}: {}", s.message());
    match s.code() {
        Code::NotFound => Error::NotFound(m),
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => Error::Invalid(m),
        Code::PermissionDenied => Error::Forbidden(m),
        Code::ResourceExhausted => Error::DaemonLimit(m),
        _ => Error::Daemon(format!("{what}: the sandbox's daemon answered {}", s.message())),
    }
}
