//! The relay's one client of a sandbox's daemon, with the sandbox's access token, over one of two
//! transports under the same generated clients: gRPC over h2c (or TLS) for hangar-envd, and
//! Connect over HTTP/1.1 (`connect.rs`) for E2B's envd, which serves nothing else, and for any
//! daemon behind E2B's edge, which forwards HTTP/1.1 alone.
//!
//! Invariant: everything that comes back is sandbox data, never a decision: output is passed on
//! as text, and ownership is decided by the relay's MAC, not by anything envd says.
pub mod connect;

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicU8, Ordering},
        Arc,
    },
    task::{Context, Poll},
    time::Duration,
};

pub use crate::store::DaemonKind;
pub use connect::Connect;
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
    metadata::{Ascii, MetadataKey, MetadataValue},
    service::interceptor::InterceptedService,
    transport::{Channel, ClientTlsConfig, Endpoint},
    Code, Request, Status,
};

#[derive(Debug, thiserror::Error)]
pub enum EnvdError {
    #[error("bad daemon address {0:?}")]
    Address(String),
    #[error("the daemon's access token is not a valid header value")]
    Token,
    #[error("a routing header for the daemon is not valid: {0}")]
    Route(String),
    #[error("TLS for the daemon at {0:?}: {1}")]
    Tls(String, String),
    #[error("the daemon did not answer: {0}")]
    Unreachable(String),
}

#[derive(Clone)]
pub struct Auth {
    token: MetadataValue<Ascii>,
    /// Headers an edge in front of the daemon routes by (E2B's `E2b-Sandbox-Id` and
    /// `E2b-Sandbox-Port`); none for a daemon reached directly.
    route: Arc<[(MetadataKey<Ascii>, MetadataValue<Ascii>)]>,
}

impl Auth {
    fn new(token: &str, route: &[(&'static str, &str)]) -> Result<Auth, EnvdError> {
        let token = MetadataValue::try_from(token).map_err(|_| EnvdError::Token)?;
        let route = route
            .iter()
            .map(|(k, v)| {
                let bad = || EnvdError::Route(k.to_string());
                Ok((
                    MetadataKey::from_bytes(k.as_bytes()).map_err(|_| bad())?,
                    MetadataValue::try_from(*v).map_err(|_| bad())?,
                ))
            })
            .collect::<Result<Vec<_>, EnvdError>>()?;
        Ok(Auth { token, route: route.into() })
    }
}

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let metadata = req.metadata_mut();
        metadata.insert("x-access-token", self.token.clone());
        for (k, v) in self.route.iter() {
            metadata.insert(k.clone(), v.clone());
        }
        Ok(req)
    }
}

/// How one client's calls reach the daemon.
#[derive(Clone)]
pub enum Wire {
    Grpc(Channel),
    Connect(Connect),
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<http::Request<tonic::body::Body>> for Wire {
    type Response = http::Response<tonic::body::Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Wire::Grpc(c) => c.poll_ready(cx).map_err(Into::into),
            Wire::Connect(c) => c.poll_ready(cx).map_err(|never| match never {}),
        }
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        match self {
            Wire::Grpc(c) => {
                let answer = c.call(req);
                Box::pin(async move { answer.await.map_err(Into::into) })
            }
            Wire::Connect(c) => {
                let answer = c.call(req);
                Box::pin(async move { answer.await.map_err(|never| match never {}) })
            }
        }
    }
}

type Authed = InterceptedService<Wire, Auth>;

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
/// The largest HTTP/2 frame a daemon may send: a stream's whole window, so a message of output
/// (up to 64 KiB) goes out in one frame. A server sends no frame larger than its client allows,
/// and HTTP/2's default of 16 KiB cut each message into four, each its own system call in the
/// daemon (bench scenario 4: with two serving threads, the daemon's CPU per GiB streamed went
/// from about 0.9 s to 0.6). h2 holds one frame at a time per connection while reading it, so a
/// daemon can make the relay buffer at most this much per connection.
const MAX_FRAME: u32 = STREAM_WINDOW;

const KIND_UNKNOWN: u8 = 0;
const KIND_HANGAR: u8 = 1;
const KIND_E2B: u8 = 2;

#[derive(Clone)]
pub struct Envd {
    channel: Channel,
    /// Connect over HTTP/1.1 to the same daemon: how `alive` tells the kinds apart, and how E2B's
    /// envd is reached. None over a tunnel (`with_connector`), which reaches hangar-envd.
    connect: Option<Connect>,
    /// Every call over Connect, whichever the daemon (behind E2B's edge).
    connect_only: bool,
    auth: Auth,
    /// What `alive` found, shared by every clone on this connection.
    kind: Arc<AtomicU8>,
}

impl Envd {
    /// A lazily connecting client; calls fail fast if the daemon is gone.
    pub fn new(url: &str, token: &str) -> Result<Envd, EnvdError> {
        Envd::routed(url, token, &[])
    }

    /// A client whose every request also carries `route`'s headers, for a daemon behind an edge
    /// that routes by them. An `https://` URL is reached over TLS, checked against webpki's roots.
    pub fn routed(url: &str, token: &str, route: &[(&'static str, &str)]) -> Result<Envd, EnvdError> {
        let mut endpoint = endpoint(url)?;
        if url.starts_with("https://") {
            endpoint = endpoint
                .tls_config(ClientTlsConfig::new().with_webpki_roots())
                .map_err(|e| EnvdError::Tls(url.to_string(), e.to_string()))?;
        }
        let mut envd = Envd::on(endpoint.connect_lazy(), Auth::new(token, route)?);
        envd.connect = Some(Connect::new(url)?);
        Ok(envd)
    }

    /// The same, every call over Connect on HTTP/1.1: for a daemon behind E2B's edge, which
    /// forwards HTTP/1.1 alone (so hangar-envd there is reached this way too).
    pub fn over_http1(url: &str, token: &str, route: &[(&'static str, &str)]) -> Result<Envd, EnvdError> {
        let mut envd = Envd::routed(url, token, route)?;
        envd.connect_only = true;
        Ok(envd)
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
        Ok(Envd::on(endpoint(url)?.connect_with_connector_lazy(connector), Auth::new(token, &[])?))
    }

    fn on(channel: Channel, auth: Auth) -> Envd {
        Envd { channel, connect: None, connect_only: false, auth, kind: Arc::new(AtomicU8::new(KIND_UNKNOWN)) }
    }

    /// The transport for the next client: Connect where it must be (E2B's envd, E2B's edge),
    /// else gRPC, the faster (one multiplexed connection, flow control per stream).
    pub fn wire(&self) -> Wire {
        match &self.connect {
            Some(c) if self.connect_only || self.is_e2b() => Wire::Connect(c.clone()),
            _ => Wire::Grpc(self.channel.clone()),
        }
    }

    pub fn process(&self) -> ProcessClient<Authed> {
        ProcessClient::with_interceptor(self.wire(), self.auth.clone())
    }

    pub fn processes(&self) -> ProcessesClient<Authed> {
        ProcessesClient::with_interceptor(self.wire(), self.auth.clone())
    }

    pub fn files(&self) -> FilesClient<Authed> {
        FilesClient::with_interceptor(self.wire(), self.auth.clone())
    }

    /// E2B's `filesystem.Filesystem` (its `WatchDir` is what a daemon without hangar's watches has).
    pub fn filesystem(&self) -> FilesystemClient<Authed> {
        FilesystemClient::with_interceptor(self.wire(), self.auth.clone())
    }

    /// Whether `other` is a clone of this client: the same connection to the same daemon
    /// process, so what it said about itself still holds.
    pub fn same_connection(&self, other: &Envd) -> bool {
        Arc::ptr_eq(&self.kind, &other.kind)
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
    /// `Daemon/Info` answers, or it is `unimplemented` (E2B's envd; Connect's HTTP 404 for an
    /// unknown path means the same) and E2B's `process.Process/List` answers. Not yet known, it
    /// is asked over Connect on HTTP/1.1, which both serve (E2B's envd nothing else); once known,
    /// one call over the transport in use checks it again: the kind of daemon at an address does
    /// not change while its connection lasts.
    pub async fn alive(&self, timeout: Duration) -> Result<DaemonKind, EnvdError> {
        let answered = tokio::time::timeout(timeout, async {
            let wire = match (self.kind(), &self.connect) {
                (None, Some(c)) => Wire::Connect(c.clone()),
                _ => self.wire(),
            };
            if self.kind() != Some(DaemonKind::E2b) {
                let mut client = DaemonClient::with_interceptor(wire.clone(), self.auth.clone());
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
            ProcessClient::with_interceptor(wire, self.auth.clone()).list(req).await.map(|_| DaemonKind::E2b)
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

fn endpoint(url: &str) -> Result<Endpoint, EnvdError> {
    Ok(Endpoint::from_shared(url.to_string())
        .map_err(|_| EnvdError::Address(url.to_string()))?
        .connect_timeout(Duration::from_secs(3))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_https_daemon_is_reached_over_tls_with_its_routing_headers() {
        let route = [("e2b-sandbox-id", "iabc"), ("e2b-sandbox-port", "49983")];
        let envd = Envd::routed("https://49983-iabc.e2b.app", "token", &route).expect("a TLS client");
        let mut auth = envd.auth.clone();
        let req = tonic::service::Interceptor::call(&mut auth, Request::new(())).expect("intercepted");
        let header = |k: &str| req.metadata().get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
        assert_eq!(
            (header("x-access-token"), header("e2b-sandbox-id"), header("e2b-sandbox-port")),
            (Some("token".into()), Some("iabc".into()), Some("49983".into()))
        );
        assert!(matches!(Envd::routed("http://127.0.0.1:1", "t", &[("bad header", "x")]), Err(EnvdError::Route(_))));
        assert!(matches!(Envd::routed("http://127.0.0.1:1", "t", &[("x", "a\nb")]), Err(EnvdError::Route(_))));
    }
}
