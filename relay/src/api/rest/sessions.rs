//! Agent sessions: `POST/GET /api/sessions`, `GET/DELETE /api/sessions/{ref}`,
//! `POST /api/sessions/{ref}/turns` (a follow-up), `POST /api/sessions/{ref}/cancel`,
//! `GET /api/sessions/{ref}/events?since=&limit=&wait=` (a long poll) and
//! `GET /api/sessions/{ref}/events/stream?since=&follow=&until=input` (SSE, `id` the seq);
//! `GET /api/usage`; and
//! `POST/GET /api/secrets`, `DELETE /api/secrets/{name}` (a person's own, an admin's any).
use std::{convert::Infallible, sync::Arc};

use axum::{
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::sse::{Event, Sse},
    Extension, Json,
};
use futures::Stream;
use schemars::JsonSchema;
use serde::Deserialize;

use super::sse;
use crate::{
    api::{
        extract::{Body, Params},
        ApiError,
    },
    auth::Caller,
    handles::Relay,
    secrets::{NewSecret, SecretView},
    sessions::{
        self,
        follow::{Charge, Start, Until},
        EventsPage, EventsRead, SessionView, StartRequest, TurnRequest,
    },
    streams::Front,
};

pub async fn create(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Body(req): Body<StartRequest>,
) -> Result<(StatusCode, Json<SessionView>), ApiError> {
    let view = sessions::start(&relay.sessions, &caller, req).await?;
    let status = if view.idempotent_replay { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(view)))
}

pub async fn list(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(serde_json::json!({ "sessions": sessions::list(&relay.sessions, &caller).await? })))
}

pub async fn get(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
) -> Result<Json<SessionView>, ApiError> {
    Ok(Json(sessions::get(&relay.sessions, &caller, &reference).await?))
}

pub async fn delete(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
) -> Result<StatusCode, ApiError> {
    sessions::delete(&relay.sessions, &caller, &reference).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn turn(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Body(req): Body<TurnRequest>,
) -> Result<(StatusCode, Json<SessionView>), ApiError> {
    let view = sessions::follow_up(&relay.sessions, &caller, &reference, req).await?;
    let status = if view.idempotent_replay { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(view)))
}

pub async fn cancel(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
) -> Result<Json<SessionView>, ApiError> {
    Ok(Json(sessions::cancel(&relay.sessions, &caller, &reference).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    #[serde(default)]
    since: Option<i64>,
    #[serde(default)]
    limit: Option<usize>,
    /// Seconds to wait for an event newer than `since`.
    #[serde(default)]
    wait: Option<f64>,
}

pub async fn events(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Params(q): Params<EventsQuery>,
) -> Result<Json<EventsPage>, ApiError> {
    let read = EventsRead::new(q.since, q.limit, q.wait, "wait")?;
    Ok(Json(sessions::events(&relay.sessions, &caller, &reference, read).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    #[serde(default)]
    since: Option<i64>,
    /// Stay open for the session's next turns (default: end once its turn has ended and every
    /// event was sent).
    #[serde(default)]
    follow: bool,
    /// `input`: end also once the turn starts to wait for input (an approval or a question of it
    /// opened), as an orchestrator's wait does.
    #[serde(default)]
    until: Option<StreamUntil>,
}

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum StreamUntil {
    Input,
}

pub async fn stream(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Params(q): Params<StreamQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let since = sse::resume_seq(&headers, q.since)?;
    let until = match (q.follow, q.until) {
        (true, Some(_)) => return Err(ApiError::bad_request("until=input ends a stream that follow=true keeps open")),
        (true, None) => Until::Never,
        (false, Some(StreamUntil::Input)) => Until::TurnEndsOrWaits,
        (false, None) => Until::TurnEnds,
    };
    let start = Start { since: Some(since), until, wait: None, limit: None };
    let followed = sessions::follow(&relay.sessions, &caller, &reference, start, Front::Rest, Charge::Events).await?;
    Ok(Sse::new(sse::follow(followed)).keep_alive(sse::keep_alive()))
}

pub async fn usage(State(relay): State<Arc<Relay>>) -> Result<Json<sessions::Usage>, ApiError> {
    Ok(Json(sessions::usage(&relay.sessions).await?))
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSecret {
    name: String,
    value: String,
    /// Whose it is (an admin's choice): a person's id, or `null` for the admins'.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<String>")]
    person: Option<Option<String>>,
    #[serde(default)]
    shared_with: Vec<String>,
}

/// `"person": null` (the admins') apart from no `person` at all (the caller's default).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretQuery {
    /// An admin's: the person whose secret is meant; empty for the admins'.
    #[serde(default)]
    person: Option<String>,
}

pub async fn create_secret(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Body(b): Body<CreateSecret>,
) -> Result<(StatusCode, Json<SecretView>), ApiError> {
    let new = NewSecret { name: b.name, value: b.value, person: b.person, shared_with: b.shared_with };
    Ok((StatusCode::CREATED, Json(relay.secrets.put(&caller, new).await?)))
}

pub async fn list_secrets(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(serde_json::json!({ "secrets": relay.secrets.list(&caller).await? })))
}

pub async fn delete_secret(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Params(q): Params<SecretQuery>,
) -> Result<StatusCode, ApiError> {
    let person = q.person.map(|p| Some(p).filter(|p| !p.is_empty()));
    relay.secrets.delete(&caller, &name, person).await?;
    Ok(StatusCode::NO_CONTENT)
}
