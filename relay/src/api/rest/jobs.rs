//! Jobs: `POST/GET /api/jobs`, `GET /api/jobs/{id}`, `POST /api/jobs/{id}/cancel` and
//! `GET /api/jobs/{id}/events/stream?since=` (SSE of the job's session's events, `id` the seq,
//! ending once the job has: `jobs::follow`). Every scope may use them; a `jobs` token sees only its own jobs.
use std::{convert::Infallible, sync::Arc};

use axum::{
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::sse::{Event, Sse},
    Extension, Json,
};
use futures::Stream;
use serde::Deserialize;

use super::sse;
use crate::{
    api::{
        extract::{Body, Params},
        ApiError,
    },
    auth::Caller,
    handles::Relay,
    jobs::{self, JobView, StartRequest},
    sessions::follow::Charge,
    streams::Front,
};

pub async fn create(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Body(req): Body<StartRequest>,
) -> Result<(StatusCode, Json<JobView>), ApiError> {
    let view = jobs::start(&relay.jobs, &caller, req).await?;
    let status = if view.idempotent_replay { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(view)))
}

pub async fn list(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(serde_json::json!({ "jobs": jobs::list(&relay.jobs, &caller).await? })))
}

pub async fn get(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    Ok(Json(jobs::get(&relay.jobs, &caller, &id).await?))
}

pub async fn cancel(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    Ok(Json(jobs::cancel(&relay.jobs, &caller, &id).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobStreamQuery {
    #[serde(default)]
    since: Option<i64>,
}

pub async fn stream(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Params(q): Params<JobStreamQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let since = sse::resume_seq(&headers, q.since)?;
    let followed = jobs::follow(&relay.jobs, &caller, &id, since, Front::Rest, Charge::Events).await?;
    Ok(Sse::new(sse::follow(followed)).keep_alive(sse::keep_alive()))
}
