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

#[derive(Clone)]
pub struct Envd {
    channel: Channel,
    auth: Auth,
}

impl Envd {
    /// A lazily connecting client; calls fail fast if the daemon is gone.
    pub fn new(url: &str, token: &str) -> Result<Envd, EnvdError> {
        let token = MetadataValue::try_from(token).map_err(|_| EnvdError::Token)?;
        Ok(Envd { channel: endpoint(url)?.connect_lazy(), auth: Auth { token } })
    }

    /// The same, over connections `connector` makes (a tunnel to the daemon, such as the
    /// Kubernetes API server's port-forward); `url` names the daemon for HTTP/2.
    pub fn with_connector<C>(url: &str, token: &str, connector: C) -> Result<Envd, EnvdError>
    where
        C: tower::Service<http::Uri> + Send + 'static,
        C::Response: hyper::rt::Read + hyper::rt::Write + Send + Unpin + 'static,
        C::Future: Send,
        Box<dyn std::error::Error + Send + Sync>: From<C::Error> + Send,
    {
        let token = MetadataValue::try_from(token).map_err(|_| EnvdError::Token)?;
        Ok(Envd { channel: endpoint(url)?.connect_with_connector_lazy(connector), auth: Auth { token } })
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

fn endpoint(url: &str) -> Result<Endpoint, EnvdError> {
    Ok(Endpoint::from_shared(url.to_string())
        .map_err(|_| EnvdError::Address(url.to_string()))?
        .connect_timeout(Duration::from_secs(3))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW))
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
