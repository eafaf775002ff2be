//! The MCP endpoint: Streamable HTTP at `/mcp` (the official Rust SDK, `rmcp`), with the relay's
//! bearer tokens (any scope but `jobs`). 2026-07-28 clients are served statelessly; 2025-era
//! clients get sessions. Tools are thin: they check arguments and call the same domain modules
//! as the REST handlers (`exec`, `sandboxes`, `streams`), so limits, ownership and closing are
//! the same.
mod process;
mod tools;

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    Router,
};
use rmcp::{
    model::{
        CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult, PaginatedRequestParams,
        ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
    transport::streamable_http_server::{
        session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
    },
    ErrorData as McpError, RoleServer, ServerHandler,
};
use tokio_util::sync::CancellationToken;

use crate::{auth::Caller, error::ApiError, store::Scope, Relay};

/// Where the endpoint is served.
pub const PATH: &str = "/mcp";

/// The MCP service, one per request (it holds only the relay).
#[derive(Clone)]
pub struct Hangar {
    relay: Arc<Relay>,
}

/// The `/mcp` routes: bearer authentication, then the SDK's Streamable HTTP service.
/// `allowed_hosts` are the `Host` values accepted (DNS-rebinding protection); `shutdown`, once
/// cancelled, ends the SDK's streams and sessions.
pub fn router(relay: Arc<Relay>, allowed_hosts: Vec<String>, shutdown: CancellationToken) -> Router<Arc<Relay>> {
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts)
        .with_cancellation_token(shutdown)
        .with_max_request_body_bytes(super::rest::MAX_BODY_BYTES);
    let service_relay = relay.clone();
    let service = StreamableHttpService::new(
        move || Ok(Hangar { relay: service_relay.clone() }),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new()
        .nest_service(PATH, service)
        .layer(middleware::from_fn_with_state(relay.clone(), refuse_jobs))
        .layer(middleware::from_fn_with_state(relay, super::rest::authenticate))
}

/// A `jobs` token can only read its own jobs: no sandboxes, so no MCP.
async fn refuse_jobs(State(_relay): State<Arc<Relay>>, req: Request, next: Next) -> Response {
    if req.extensions().get::<Caller>().is_some_and(|c| c.scope == Scope::Jobs) {
        return ApiError::forbidden("a jobs token can only read its own jobs").into_response();
    }
    next.run(req).await
}

/// The caller the authentication layer put on the HTTP request this call came in.
fn caller(ctx: &RequestContext<RoleServer>) -> Result<Caller, McpError> {
    ctx.extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<Caller>())
        .cloned()
        .ok_or_else(|| McpError::invalid_request("no authenticated caller on this request", None))
}

impl ServerHandler for Hangar {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("hangar-relay", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "hangar: run commands in sandboxes. `sandboxes` lists them; `exec` runs a command \
                 (stream: true with a progress token sends its output as progress notifications).",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools::list()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let caller = caller(&context)?;
        Ok(tools::call(&self.relay, &caller, request, context).await.into())
    }
}
