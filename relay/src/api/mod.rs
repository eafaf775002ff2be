//! The relay's HTTP surface: REST and Server-Sent Events under `/api` (`rest`), the MCP
//! endpoint at `/mcp` (`mcp`), bearer authentication and scope rules as router layers (`auth`),
//! and the one mapping of the domain's errors to statuses and codes (`error`).
//!
//! Invariant: only this module (and the application's wiring) knows HTTP. Handlers map requests
//! and results to their protocol and nothing more: limits, ownership and closing reasons are
//! decided once, in the domain modules both APIs call.
pub mod auth;
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
    rest::router(relay.clone()).merge(mcp::router(relay.clone(), mcp_allowed_hosts, mcp_shutdown).with_state(relay))
}
