//! The relay's HTTP surface: REST and Server-Sent Events under `/api` (`rest`), the MCP
//! endpoint at `/mcp` (`mcp`), the web console's files at `/` (`console`), bearer authentication and scope rules as router layers (`auth`),
//! and the one mapping of the domain's errors to statuses and codes (`error`).
//!
//! Invariant: only this module (and the application's wiring) knows HTTP. Handlers map requests
//! and results to their protocol and nothing more: limits, ownership and closing reasons are
//! decided once, in the domain modules both APIs call.
pub mod auth;
pub mod console;
pub mod error;
pub mod extract;
pub mod mcp;
pub mod rest;

use std::sync::Arc;

use axum::Router;
use tokio_util::sync::CancellationToken;

use crate::app::Relay;

pub use error::ApiError;

/// Every route the relay serves. `mcp_allowed_hosts` are the `Host` values `/mcp` accepts;
/// cancelling `mcp_shutdown` ends the MCP SDK's streams and sessions.
pub fn router(relay: Arc<Relay>, mcp_allowed_hosts: Vec<String>, mcp_shutdown: CancellationToken) -> Router {
    rest::router(relay.clone())
        .merge(mcp::router(relay.clone(), mcp_allowed_hosts, mcp_shutdown).with_state(relay))
        .merge(console::router())
}

/// How long MCP responses cut off by a shutdown have to reach their clients.
const MCP_RESULTS_GRACE: std::time::Duration = std::time::Duration::from_millis(500);
/// How long responses have to flush once the shutdown began.
const FLUSH_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves every route on `listener` until `stop` resolves; then every open stream ends at once
/// with `shutdown`, new ones are refused, and this returns once responses have flushed
/// (`FLUSH_GRACE` at the most).
pub async fn serve(
    listener: tokio::net::TcpListener,
    relay: Arc<Relay>,
    mcp_allowed_hosts: Vec<String>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt as _;
    let mcp_shutdown = CancellationToken::new();
    let app = router(relay.clone(), mcp_allowed_hosts, mcp_shutdown.clone());
    let (stopping_tx, stopping) = tokio::sync::oneshot::channel::<()>();
    let streams = relay.streams.clone();
    // TCP_NODELAY: an SSE event or MCP notification goes out when written, not after the
    // previous one's ACK.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        stop.await;
        let closed = streams.shutdown();
        // The MCP calls and subscriptions the shutdown just ended get a moment to send their
        // results before the SDK closes its streams and sessions.
        tokio::spawn(async move {
            tokio::time::sleep(MCP_RESULTS_GRACE).await;
            mcp_shutdown.cancel();
        });
        crate::events::ShuttingDown { streams: closed }.emit();
        let _ = stopping_tx.send(());
    });
    tokio::select! {
        r = server => r,
        _ = async {
            let _ = stopping.await;
            tokio::time::sleep(FLUSH_GRACE).await;
        } => Ok(()),
    }
}
