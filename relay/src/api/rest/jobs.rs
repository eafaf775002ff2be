//! Jobs: `POST/GET /api/jobs`, `GET /api/jobs/{id}`, `POST /api/jobs/{id}/cancel` and
//! `GET /api/jobs/{id}/events/stream?since=` (SSE of the job's session's events, `id` the seq,
//! ending once the job has). Every scope may use them; a `jobs` token sees only its own jobs.
use std::{convert::Infallible, sync::Arc, time::Duration};

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
    app::Relay,
    auth::Caller,
    jobs::{self, JobView, StartRequest},
    sessions::follow::{Follower, Mark, Next, Until},
    store::{JobState, JobsOf},
    streams::{Front, Kind, Reason},
};

pub async fn create(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Body(req): Body<StartRequest>,
) -> Result<(StatusCode, Json<JobView>), ApiError> {
    let view = jobs::start(&relay, &caller, req).await?;
    let status = if view.idempotent_replay { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(view)))
}

pub async fn list(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(serde_json::json!({ "jobs": jobs::list(&relay, &caller).await? })))
}

pub async fn get(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    Ok(Json(jobs::get(&relay, &caller, &id).await?))
}

pub async fn cancel(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    Ok(Json(jobs::cancel(&relay, &caller, &id).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobStreamQuery {
    #[serde(default)]
    since: Option<i64>,
}

/// The most events an SSE stream is handed at a time.
const PAGE: usize = 200;
/// How often a stream looks at a job that has no session yet.
const NO_SESSION_POLL: Duration = Duration::from_millis(300);
/// How long a stream waits for the event that records the job's end once its state says so.
const END_GRACE: Duration = Duration::from_secs(2);
/// How often a stream looks at the job's state when no event comes.
const RECHECK: Duration = Duration::from_secs(5);

/// A job's session's events, through a follower, until the event that records the job's end.
struct JobEvents {
    relay: Arc<Relay>,
    job_id: String,
    follower: Follower,
    saw_end: bool,
    graced: bool,
}

impl sse::Source for JobEvents {
    async fn next(&mut self) -> sse::Next {
        loop {
            let state = self.relay.store.job(&self.job_id, JobsOf::Everyone).await.ok().flatten().map(|j| j.state);
            let ended = state.is_none_or(JobState::is_terminal);
            if ended && (self.saw_end || self.graced) {
                let state = state.map_or("deleted", JobState::as_str);
                return sse::Next::End(Reason::Done, Some(format!("the job ended: {state}")));
            }
            // The job's state is set just before its `job.state` event is recorded: once it
            // says ended, the event has a moment to arrive (a grace with nothing recorded).
            let wait = if ended { END_GRACE } else { RECHECK };
            match tokio::time::timeout(wait, self.follower.next(PAGE)).await {
                Ok(Ok(Some(Next::Events(events)))) => {
                    self.saw_end |= events.iter().any(|e| e.mark == Mark::JobEnded);
                    return sse::Next::Send(events.into_iter().map(super::sessions::served_event).collect());
                }
                // Never ends on a turn's end (`Until::Never`).
                Ok(Ok(Some(Next::Ended(_)))) => {}
                Err(_) => self.graced = ended,
                Ok(Ok(None)) => return sse::Next::Quit,
                Ok(Err(e)) => return sse::Next::End(Reason::Error, Some(e.to_string())),
            }
        }
    }
}

pub async fn stream(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Params(q): Params<JobStreamQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let since = sse::resume_seq(&headers, q.since)?;
    let job = jobs::find(&relay, &caller, &id).await?;
    let events = async_stream::stream! {
        let mut job = job;
        // Until the job has a session there are no events: wait for one, or the job's end.
        let session_id = loop {
            if let Some(s) = &job.session_id {
                break s.clone();
            }
            if job.state.is_terminal() {
                yield Ok(sse::close_event(Reason::Done, Some(&format!("the job ended: {}", job.state.as_str()))));
                return;
            }
            tokio::time::sleep(NO_SESSION_POLL).await;
            match relay.store.job(&job.id, JobsOf::Everyone).await {
                Ok(Some(j)) => job = j,
                _ => {
                    yield Ok(sse::close_event(Reason::Error, Some("the job is gone")));
                    return;
                }
            }
        };
        let sandbox = job.sandbox_id.clone().unwrap_or_default();
        let admitted = match relay.streams.open(&caller, &sandbox, Kind::Events, Front::Rest) {
            Ok(a) => a,
            Err(e) => {
                yield Ok(sse::close_event(Reason::Error, Some(&e.to_string())));
                return;
            }
        };
        let seq = relay.store.session_by_id(&session_id).await.ok().flatten().map_or(0, |s| s.event_seq);
        let follower = Follower::new(&relay.store, &relay.sessions.live, &session_id, seq, since, Until::Never);
        let source = JobEvents { relay, job_id: job.id, follower, saw_end: false, graced: false };
        for await e in sse::serve(admitted, source) {
            yield e;
        }
    };
    Ok(Sse::new(events).keep_alive(sse::keep_alive()))
}
