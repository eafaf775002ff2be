//! `POST /api/tickets` `{"path"}`: a one-use ticket that opens the event stream at `path` for a
//! browser's `EventSource` (`?ticket=`), which cannot send the bearer header. Any scope; a `jobs`
//! token only for its jobs' streams; only for a stream that is there for the caller.
use std::sync::Arc;

use axum::{extract::State, http::StatusCode, Extension, Json};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{
    api::{
        auth::{stream_target, StreamTarget, STREAM_ROUTES},
        extract::Body,
        ApiError,
    },
    auth::{tickets::TicketError, Caller, Scope},
    error::Error,
    events,
    handles::Relay,
    jobs, processes, sessions,
};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTicket {
    path: String,
}

pub async fn create(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Body(req): Body<CreateTicket>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let Some(target) = stream_target(&req.path) else {
        let path: String = req.path.chars().take(200).collect();
        let routes = STREAM_ROUTES.join(", ");
        return Err(ApiError::bad_request(format!("path {path:?} is not an event stream; tickets are for {routes}")));
    };
    // A jobs token reaches only /api/jobs*: so do its tickets (other stream paths are 403, as
    // its bearer header would be there).
    if caller.scope == Scope::Jobs && !matches!(target, StreamTarget::Job(_)) {
        return Err(ApiError::forbidden(
            "a jobs token can only read its own jobs: tickets for /api/jobs/{job}/events/stream",
        ));
    }
    check_target(&relay, &caller, &target).await?;
    issue(&relay, &caller, &req.path)
}

/// Refuses a ticket for a stream that is not there for the caller, with the error the stream
/// would answer: the lookup its own handler starts with (the sandbox the caller may enter, the
/// caller's process in it, the caller's session or job), so no ticket is issued for a path that
/// could only answer 404.
async fn check_target(relay: &Relay, caller: &Caller, target: &StreamTarget) -> Result<(), Error> {
    match target {
        StreamTarget::Process { sandbox, id } => processes::get(&relay.processes, caller, sandbox, id).await.map(drop),
        StreamTarget::Watch { sandbox } | StreamTarget::Terminal { sandbox } => {
            relay.sandboxes.enter(sandbox, caller).await.map(drop)
        }
        StreamTarget::Session(session) => sessions::find(&relay.sessions, caller, session).await.map(drop),
        StreamTarget::Job(job) => jobs::find(&relay.jobs, caller, job).await.map(drop),
        StreamTarget::Fleet => Ok(()),
    }
}

/// A ticket for the caller into the stream at `path` (which the caller may open): `201` with
/// `{ticket, expires_at, path}`.
pub fn issue(relay: &Relay, caller: &Caller, path: &str) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let issued = relay.tickets.issue(&caller.token_id, path).map_err(|e| match e {
        TicketError::TooMany(_) => ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: "resource_exhausted",
            message: e.to_string(),
            candidates: Vec::new(),
        },
        _ => ApiError::bad_request(e.to_string()),
    })?;
    events::TicketIssued { token: &caller.token_id, path }.emit();
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({ "ticket": issued.ticket, "expires_at": issued.expires_at, "path": path })),
    ))
}
