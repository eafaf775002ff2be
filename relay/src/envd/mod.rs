//! The relay's one client of a sandbox's daemon: gRPC over h2c with the sandbox's access token.
//!
//! Invariant: everything that comes back is sandbox data, never a decision: output is passed on
//! as text, and ownership is decided by the relay's MAC, not by anything envd says.
use std::time::Duration;

use crate::error::Error;
use hangar_proto::{
    ext::{daemon_client::DaemonClient, files_client::FilesClient, processes_client::ProcessesClient, InfoRequest},
    process::process_client::ProcessClient,
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

#[derive(Clone)]
pub struct Envd {
    channel: Channel,
    auth: Auth,
}

impl Envd {
    /// A lazily connecting client; calls fail fast if the daemon is gone.
    pub fn new(url: &str, token: &str) -> Result<Envd, EnvdError> {
        let endpoint = Endpoint::from_shared(url.to_string())
            .map_err(|_| EnvdError::Address(url.to_string()))?
            .connect_timeout(Duration::from_secs(3))
            .http2_keep_alive_interval(Duration::from_secs(30))
            .tcp_nodelay(true);
        let token = MetadataValue::try_from(token).map_err(|_| EnvdError::Token)?;
        Ok(Envd { channel: endpoint.connect_lazy(), auth: Auth { token } })
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

    /// Whether the daemon answers (with this token) within `timeout`.
    pub async fn alive(&self, timeout: Duration) -> Result<(), EnvdError> {
        let mut client = DaemonClient::with_interceptor(self.channel.clone(), self.auth.clone());
        let mut req = Request::new(InfoRequest {});
        req.set_timeout(timeout);
        match tokio::time::timeout(timeout, client.info(req)).await {
            Ok(Ok(_)) => Ok(()),
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
