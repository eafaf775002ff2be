//! What an agent has changed: `GET /api/sessions/{ref}/diff?turn=&path=` (the summary, or with
//! `path` that file's patch), read by `sessions::diff`; `GET /api/jobs/{id}/diff` the same of a
//! job's session, for whoever sees the job.
use std::sync::Arc;

use axum::{
    extract::{Path, State},
    Extension, Json,
};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{
    api::{extract::Params, ApiError},
    auth::Caller,
    error::Error,
    handles::Relay,
    jobs,
    sessions::{self, diff},
};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiffQuery {
    /// One file's patch (its path as the summary lists it) rather than the summary.
    #[serde(default)]
    path: Option<String>,
    /// The turn (its n) whose start the work tree is compared with; default the latest that has
    /// started.
    #[serde(default)]
    turn: Option<i64>,
}

pub async fn session(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Params(q): Params<DiffQuery>,
) -> Result<Json<diff::Answer>, ApiError> {
    let session = sessions::find(&relay.sessions, &caller, &reference).await?;
    let ask = diff::Ask { path: q.path, turn: q.turn };
    Ok(Json(diff::read(&relay.sessions, &caller, &session, ask).await?))
}

pub async fn job(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Params(q): Params<DiffQuery>,
) -> Result<Json<diff::Answer>, ApiError> {
    let job = jobs::get(&relay.jobs, &caller, &id).await?.job;
    let Some(session) = job.session_id else {
        return Err(Error::Conflict(format!("job {id:?} has no session yet: it has not started")).into());
    };
    let session = sessions::find(&relay.sessions, &caller, &session).await?;
    let ask = diff::Ask { path: q.path, turn: q.turn };
    Ok(Json(diff::read(&relay.sessions, &caller, &session, ask).await?))
}
