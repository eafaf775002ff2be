//! `POST /api/tickets` `{"path"}`: a one-use ticket that opens the event stream at `path` for a
//! browser's `EventSource` (`?ticket=`), which cannot send the bearer header. Any scope; a `jobs`
//! token only for its jobs' streams.
use std::sync::Arc;

use axum::{extract::State, http::StatusCode, Extension, Json};
use serde::Deserialize;

use crate::{
    api::{
        auth::{is_job_stream_path, is_stream_path, STREAM_ROUTES},
        extract::Body,
        ApiError,
    },
    app::Relay,
    auth::{tickets::TicketError, Caller},
    events,
    store::Scope,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTicket {
    path: String,
}

pub async fn create(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Body(req): Body<CreateTicket>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    // A jobs token reaches only /api/jobs*: so do its tickets (other stream paths are 403, as
    // its bearer header would be there).
    if !is_stream_path(&req.path) {
        let path: String = req.path.chars().take(200).collect();
        let routes = STREAM_ROUTES.join(", ");
        return Err(ApiError::bad_request(format!("path {path:?} is not an event stream; tickets are for {routes}")));
    }
    if caller.scope == Scope::Jobs && !is_job_stream_path(&req.path) {
        return Err(ApiError::forbidden(
            "a jobs token can only read its own jobs: tickets for /api/jobs/{job}/events/stream",
        ));
    }
    issue(&relay, &caller, &req.path)
}

/// A ticket for the caller into the stream at `path` (which the caller may open): `201` with
/// `{ticket, expires_at, path}`.
pub fn issue(relay: &Relay, caller: &Caller, path: &str) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let issued = relay.tickets.issue(&caller.token_id, path).map_err(|e| match e {
        TicketError::TooMany(_) => {
            ApiError { status: StatusCode::TOO_MANY_REQUESTS, code: "resource_exhausted", message: e.to_string() }
        }
        _ => ApiError::bad_request(e.to_string()),
    })?;
    events::TicketIssued { token: &caller.token_id, path }.emit();
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({ "ticket": issued.ticket, "expires_at": issued.expires_at, "path": path })),
    ))
}
