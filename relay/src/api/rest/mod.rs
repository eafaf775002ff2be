//! REST and Server-Sent Events under `/api`, with `Authorization: Bearer` on every route but
//! `GET /health`. Scopes are router layers: tokens are admin-only; sandbox, session and fleet
//! routes refuse `jobs`; jobs routes take every scope (the domain shows each caller only its own
//! jobs). The SSE `GET`s and the terminal's WebSocket also take a one-use `?ticket=` from
//! `POST /api/tickets` (or, for the fleet's, `POST /api/fleet/tickets`), for browsers (see `auth`).
mod diff;
mod exec;
mod fleet;
mod inbox;
mod jobs;
mod processes;
mod sandboxes;
mod sessions;
mod sse;
mod terminal;
mod tickets;
mod tokens;
mod watch;

use std::sync::Arc;

use axum::{
    extract::{DefaultBodyLimit, State},
    http::StatusCode,
    middleware,
    response::{IntoResponse, Response},
    routing::{delete, get, post},
    Router,
};

use super::{auth, extract::MAX_BODY_BYTES, ApiError};
use crate::handles::Relay;

/// Every query string and JSON body the routes read, with the steps that parse them beyond
/// deserializing: named so they can be exercised apart from the handlers (hangar-fuzz). The
/// domain's requests are read as they are and are not repeated here: `sessions::StartRequest`
/// and `TurnRequest`, `jobs::StartRequest`.
pub mod inputs {
    pub use super::{
        diff::DiffQuery,
        exec::{request as exec_request, ExecBody},
        fleet::{FleetQuery, FleetStreamQuery},
        inbox::{AckAll, AnswerBody, Decide, InboxQuery},
        jobs::JobStreamQuery,
        processes::{resume_from, InputBody, SinceQuery, StartBody},
        sandboxes::{CreateSandbox, ShareSandbox},
        sessions::{CreateSecret, EventsQuery, SecretQuery, StreamQuery},
        terminal::TerminalQuery,
        tickets::CreateTicket,
        tokens::CreateToken,
        watch::WatchQuery,
    };

    /// The top-level fields a body or query string takes, as derived from its type: hangar-fuzz
    /// checks that nothing else is accepted.
    pub fn fields<T: schemars::JsonSchema>() -> Vec<String> {
        let schema = schemars::schema_for!(T);
        let properties = schema.get("properties").and_then(serde_json::Value::as_object);
        properties.map(|p| p.keys().cloned().collect()).unwrap_or_default()
    }
}

pub fn router(relay: Arc<Relay>) -> Router {
    let tokens = Router::new()
        .route("/api/tokens", post(tokens::create).get(tokens::list))
        .route("/api/tokens/{id}", delete(tokens::revoke))
        .route_layer(middleware::from_fn(auth::admin_scope));
    // A person's own secrets (an admin's: anyone's); not an agent's token (`mcp`, `jobs`).
    let secrets = Router::new()
        .route("/api/secrets", post(sessions::create_secret).get(sessions::list_secrets))
        .route("/api/secrets/{name}", delete(sessions::delete_secret))
        .route_layer(middleware::from_fn(auth::person_scopes));
    let agents = Router::new()
        .route("/api/sessions", post(sessions::create).get(sessions::list))
        .route("/api/sessions/{session}", get(sessions::get).delete(sessions::delete))
        .route("/api/sessions/{session}/turns", post(sessions::turn))
        .route("/api/sessions/{session}/cancel", post(sessions::cancel))
        .route("/api/sessions/{session}/events", get(sessions::events))
        .route("/api/sessions/{session}/events/stream", get(sessions::stream))
        .route("/api/sessions/{session}/diff", get(diff::session))
        .route("/api/usage", get(sessions::usage))
        .route("/api/inbox", get(inbox::list))
        .route("/api/inbox/{item}/ack", post(inbox::ack))
        .route("/api/inbox/ack", post(inbox::ack_all))
        .route("/api/approvals/{approval}", post(inbox::decide))
        .route("/api/questions/{question}", post(inbox::answer))
        .route("/api/fleet", get(fleet::read))
        .route("/api/fleet/stream", get(fleet::stream))
        .route("/api/fleet/tickets", post(fleet::ticket))
        .route_layer(middleware::from_fn(auth::sandbox_scopes));
    // Any scope: a `jobs` token (a pipeline's) reaches these routes and no others.
    let jobs = Router::new()
        .route("/api/jobs", post(jobs::create).get(jobs::list))
        .route("/api/jobs/{job}", get(jobs::get))
        .route("/api/jobs/{job}/cancel", post(jobs::cancel))
        .route("/api/jobs/{job}/diff", get(diff::job))
        .route("/api/jobs/{job}/events/stream", get(jobs::stream));
    // Work inside a sandbox (the domain holds it to the sandbox's isolation).
    let inside = Router::new()
        .route("/api/sandboxes/{sandbox}/exec", post(exec::exec))
        .route("/api/sandboxes/{sandbox}/exec/stream", post(exec::exec_stream))
        .route("/api/sandboxes/{sandbox}/processes", post(processes::start).get(processes::list))
        .route("/api/sandboxes/{sandbox}/processes/{id}", get(processes::read).delete(processes::kill))
        .route("/api/sandboxes/{sandbox}/processes/{id}/stream", get(processes::stream))
        .route("/api/sandboxes/{sandbox}/processes/{id}/input", post(processes::input))
        .route("/api/sandboxes/{sandbox}/watch", get(watch::watch))
        .route("/api/sandboxes/{sandbox}/terminal", get(terminal::open));
    let sandboxes = Router::new()
        .route("/api/sandboxes", post(sandboxes::create).get(sandboxes::list))
        .route("/api/sandboxes/{sandbox}", get(sandboxes::get).patch(sandboxes::share).delete(sandboxes::destroy))
        .route("/api/sandboxes/{sandbox}/pause", post(sandboxes::pause))
        .route("/api/sandboxes/{sandbox}/resume", post(sandboxes::resume))
        .merge(inside)
        .route_layer(middleware::from_fn(auth::sandbox_scopes));
    let api = Router::new()
        .route("/metrics", get(metrics))
        // Any scope (a `jobs` token only for its jobs' streams): see `tickets`.
        .route("/api/tickets", post(tickets::create))
        .merge(tokens)
        .merge(secrets)
        .merge(sandboxes)
        .merge(agents)
        .merge(jobs)
        .fallback(|| async { ApiError::no_route() })
        .layer(middleware::from_fn_with_state(relay.clone(), auth::authenticate));
    Router::new()
        .route("/health", get(|| async { StatusCode::NO_CONTENT }))
        .merge(api)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(relay)
}

/// Prometheus text: the `hangar_stream*` families. Any valid token may read it.
async fn metrics(State(relay): State<Arc<Relay>>) -> Response {
    ([(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], relay.streams.metrics.render()).into_response()
}
