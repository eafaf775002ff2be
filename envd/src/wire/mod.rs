//! The one port: Connect (HTTP/1.1 and h2c), gRPC (h2c) and E2B's plain routes, told apart by
//! path and content type, all behind the same admission check. Under `--e2b-only` the port
//! speaks HTTP/1.1 alone, as E2B's envd does, so gRPC and h2c fail there as they do against it.
//!
//! Invariant: only this module knows about HTTP, headers and encodings.
pub mod connect;
pub mod context;
pub mod files;
mod reflection;
mod routes;

use std::{net::SocketAddr, sync::Arc};

use axum::{
    body::Body,
    extract::State,
    middleware,
    routing::{get, post},
    Router,
};
use hangar_proto::{
    ext::{daemon_server::DaemonServer, files_server::FilesServer, processes_server::ProcessesServer},
    filesystem::filesystem_server::FilesystemServer,
    process::process_server::ProcessServer,
};
use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
    service::TowerToHyperService,
};
use tower::ServiceExt as _;

use crate::{
    auth::AccessToken,
    events,
    service::{Core, DaemonService, FilesService, FilesystemService, ProcessService, ProcessesService},
    settings::Settings,
    system::System,
};
use connect::{ConnectRouter, Protocol};

/// What the transport holds.
pub struct Wire {
    pub token: Arc<AccessToken>,
    pub settings: Arc<Settings>,
    pub system: System,
    grpc: Router,
    connect: ConnectRouter,
}

const PLAIN_ROUTES: &[&str] = &["/health", "/init", "/envs", "/metrics", "/files"];

fn is_plain_route(path: &str) -> bool {
    PLAIN_ROUTES.contains(&path)
}

/// Which services the port serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Services {
    /// E2B's and hangar's.
    All,
    /// E2B's alone (`--e2b-only`): hangar's paths are unknown, so each answers as on any server
    /// without them (Connect `unimplemented` "no method"), and the port speaks HTTP/1.1 alone,
    /// so gRPC (reflection too) is not reached. What a client sees of E2B's own envd.
    E2bOnly,
}

/// Builds the application for `core`.
pub fn app(core: Arc<Core>, token: Arc<AccessToken>, services: Services) -> Router {
    let max = core.max_message_bytes as usize;
    let process = Arc::new(ProcessService::new(core.clone()));
    let processes = Arc::new(ProcessesService::new(core.clone()));
    let daemon = Arc::new(DaemonService::new(core.clone()));
    let filesystem = Arc::new(FilesystemService::new(core.clone()));
    let files = Arc::new(FilesService::new(core.clone()));
    let hangar = services == Services::All;

    let mut routes =
        tonic::service::Routes::new(ProcessServer::from_arc(process.clone()).max_decoding_message_size(max))
            .add_service(FilesystemServer::from_arc(filesystem.clone()).max_decoding_message_size(max));
    if hangar {
        routes = routes
            .add_service(ProcessesServer::from_arc(processes.clone()).max_decoding_message_size(max))
            .add_service(DaemonServer::from_arc(daemon.clone()).max_decoding_message_size(max))
            .add_service(FilesServer::from_arc(files.clone()).max_decoding_message_size(max));
    }
    // E2B's envd has no reflection (and over HTTP/1.1 alone no gRPC client reaches it).
    if hangar {
        routes = reflection::add_to(routes);
    }
    let grpc = routes.prepare().into_axum_router().layer(middleware::map_response(oversize_is_resource_exhausted));

    let connect = ConnectRouter::new(max);
    let connect = e2b_routes(connect, &process, &filesystem);
    let connect = if hangar { hangar_routes(connect, Handlers { processes, daemon, files }) } else { connect };
    let wire = Arc::new(Wire { token, settings: core.settings.clone(), system: System::default(), grpc, connect });

    Router::new()
        .route("/health", get(routes::health))
        .route("/init", post(routes::init))
        .route("/envs", get(routes::envs))
        .route("/metrics", get(routes::metrics))
        .route("/files", get(files::download).post(files::upload))
        .fallback(dispatch_rpc)
        .layer(middleware::from_fn_with_state(wire.clone(), context::admit))
        .with_state(wire)
}

macro_rules! route {
    ($router:expr, $kind:ident, $path:literal, $svc:expr, $trait:path, $method:ident) => {{
        let s = $svc.clone();
        $router.$kind($path, move |r| {
            let s = s.clone();
            async move { <_ as $trait>::$method(&*s, r).await }
        })
    }};
}

/// hangar's own services' handlers.
struct Handlers {
    processes: Arc<ProcessesService>,
    daemon: Arc<DaemonService>,
    files: Arc<FilesService>,
}

fn e2b_routes(r: ConnectRouter, p: &Arc<ProcessService>, f: &Arc<FilesystemService>) -> ConnectRouter {
    use hangar_proto::{filesystem::filesystem_server::Filesystem, process::process_server::Process};
    let r = route!(r, unary, "/process.Process/List", p, Process, list);
    let r = route!(r, server_stream, "/process.Process/Connect", p, Process, connect);
    let r = route!(r, server_stream, "/process.Process/Start", p, Process, start);
    let r = route!(r, unary, "/process.Process/Update", p, Process, update);
    let r = route!(r, client_stream, "/process.Process/StreamInput", p, Process, stream_input);
    let r = route!(r, unary, "/process.Process/SendInput", p, Process, send_input);
    let r = route!(r, unary, "/process.Process/SendSignal", p, Process, send_signal);
    let r = route!(r, unary, "/process.Process/CloseStdin", p, Process, close_stdin);
    let r = route!(r, unary, "/filesystem.Filesystem/Stat", f, Filesystem, stat);
    let r = route!(r, unary, "/filesystem.Filesystem/MakeDir", f, Filesystem, make_dir);
    let r = route!(r, unary, "/filesystem.Filesystem/Move", f, Filesystem, r#move);
    let r = route!(r, unary, "/filesystem.Filesystem/ListDir", f, Filesystem, list_dir);
    let r = route!(r, unary, "/filesystem.Filesystem/Remove", f, Filesystem, remove);
    let r = route!(r, server_stream, "/filesystem.Filesystem/WatchDir", f, Filesystem, watch_dir);
    let r = route!(r, unary, "/filesystem.Filesystem/CreateWatcher", f, Filesystem, create_watcher);
    let r = route!(r, unary, "/filesystem.Filesystem/GetWatcherEvents", f, Filesystem, get_watcher_events);
    route!(r, unary, "/filesystem.Filesystem/RemoveWatcher", f, Filesystem, remove_watcher)
}

fn hangar_routes(r: ConnectRouter, s: Handlers) -> ConnectRouter {
    use hangar_proto::ext::{daemon_server::Daemon, files_server::Files, processes_server::Processes};
    let Handlers { processes: x, daemon: d, files: h } = s;
    let r = route!(r, server_stream, "/hangar.envd.v1.Processes/Attach", x, Processes, attach);
    let r = route!(r, unary, "/hangar.envd.v1.Processes/Signal", x, Processes, signal);
    let r = route!(r, unary, "/hangar.envd.v1.Processes/List", x, Processes, list);
    let r = route!(r, server_stream, "/hangar.envd.v1.Files/Follow", h, Files, follow);
    let r = route!(r, server_stream, "/hangar.envd.v1.Files/WatchDir", h, Files, watch_dir);
    route!(r, unary, "/hangar.envd.v1.Daemon/Info", d, Daemon, info)
}

async fn dispatch_rpc(State(wire): State<Arc<Wire>>, req: Request<Body>) -> Response<Body> {
    match Protocol::of(req.headers()) {
        // Server-streaming methods frame gRPC themselves (see `connect`); tonic serves the rest.
        Protocol::Grpc if !wire.connect.serves_grpc(req.uri().path()) => match wire.grpc.clone().oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        },
        _ => wire.connect.serve(req).await,
    }
}

/// tonic's framing calls an oversize message `out_of_range` (11); gRPC's convention, and this
/// daemon's documentation, say `resource_exhausted` (8).
async fn oversize_is_resource_exhausted(mut resp: Response<Body>) -> Response<Body> {
    let h = resp.headers();
    let is_oversize = h.get("grpc-status").is_some_and(|v| v == "11")
        && h.get("grpc-message")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|m| m.contains("too%20large") || m.contains("too large"));
    if is_oversize {
        resp.headers_mut().insert("grpc-status", HeaderValue::from_static("8"));
    }
    resp
}

/// A bound listener, ready to serve.
pub struct Server {
    listener: tokio::net::TcpListener,
    app: Router,
    services: Services,
}

impl Server {
    pub async fn bind(addr: SocketAddr, app: Router, services: Services) -> std::io::Result<Self> {
        Ok(Self { listener: tokio::net::TcpListener::bind(addr).await?, app, services })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves HTTP/1.1 and h2c (prior knowledge) on the one port until the future is dropped;
    /// HTTP/1.1 alone for [`Services::E2bOnly`] (E2B's envd is a plain Go `ListenAndServe`).
    ///
    /// Not `axum::serve`, for two settings it does not offer: `TCP_NODELAY`, so a small event
    /// is sent when written rather than held for the previous one's ACK, and HTTP/2's
    /// concurrent-stream limit, which hyper sets to 200 per connection: a relay multiplexes
    /// every stream of a sandbox on one connection, and the 201st would wait for a slot.
    pub async fn serve(self) -> std::io::Result<()> {
        let service = TowerToHyperService::new(self.app.map_request(|req: Request<Incoming>| req.map(Body::new)));
        loop {
            let (tcp, _) = match self.listener.accept().await {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of descriptors and the like: wait rather than spin (as axum does).
                    events::AcceptFailed { error: &e }.emit();
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let service = service.clone();
            let http1_only = self.services == Services::E2bOnly;
            tokio::spawn(async move {
                // A connection's errors (a client gone mid-request) are the client's business.
                if http1_only {
                    // Not auto's `http1_only`: its upgradeable connection still reads the version.
                    let http1 = hyper::server::conn::http1::Builder::new();
                    let _ = http1.serve_connection(TokioIo::new(tcp), service).with_upgrades().await;
                    return;
                }
                let mut builder = auto::Builder::new(TokioExecutor::new());
                builder.http2().max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
                let _ = builder.serve_connection_with_upgrades(TokioIo::new(tcp), service).await;
            });
        }
    }
}

/// HTTP/2 streams one connection may have open at once: far above the relay's 512 streams in
/// all, so only the daemon's own limits (watches, message sizes) ever refuse one.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 4096;
