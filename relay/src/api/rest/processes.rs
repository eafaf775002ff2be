//! Background processes: `POST/GET /api/sandboxes/{ref}/processes`, `GET .../processes/{id}?since=`
//! (buffered output, for polling), `GET .../processes/{id}/stream?since=` (SSE whose `id` is the
//! byte offset to resume from, so `Last-Event-ID` resumes exactly), `POST .../processes/{id}/input`,
//! `DELETE .../processes/{id}`.
use std::{convert::Infallible, sync::Arc, time::Duration};

use axum::{
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::sse::{Event, Sse},
    Extension, Json,
};
use base64::Engine as _;
use futures::{Stream, StreamExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::sse;
use crate::{
    api::{
        extract::{Body, Params},
        ApiError,
    },
    auth::Caller,
    handles::Relay,
    processes::{self, Output, OutputStream, ProcessView, Read},
    streams::Front,
    text::Encoding,
};

/// A background process to start, as REST's body and (with `sandbox`) the `process` tool's
/// `start`. A doc comment here is the field's description in the tool's schema.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    /// Run with bash -lc
    pub command: String,
    /// Absolute, or relative to the sandbox's working directory
    pub cwd: Option<String>,
}

pub async fn start(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Body(body): Body<StartBody>,
) -> Result<(StatusCode, Json<ProcessView>), ApiError> {
    let view = processes::start(&relay.processes, &caller, &reference, &body.command, body.cwd).await?;
    Ok((StatusCode::CREATED, Json(view)))
}

pub async fn list(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let list = processes::list(&relay.processes, &caller, &reference).await?;
    Ok(Json(serde_json::json!({ "processes": list })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinceQuery {
    since: Option<u64>,
    /// `text` (the default; invalid UTF-8 becomes U+FFFD) or `base64` (the exact bytes).
    #[serde(default)]
    encoding: Encoding,
}

/// The output written from `since` up to when the call came, without waiting for more.
pub async fn read(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path((reference, id)): Path<(String, String)>,
    Params(q): Params<SinceQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let how = Read { since: q.since, encoding: q.encoding, wait: Duration::ZERO, tail: usize::MAX, admit: None };
    let (view, c) =
        processes::read(&relay.processes, &caller, &reference, &id, how, Box::new(|_, _| Box::pin(async { true })))
            .await?;
    Ok(Json(serde_json::json!({
        "process": view,
        "since": c.since,
        "encoding": q.encoding,
        "output": c.output,
        "lost": c.lost,
        "next": c.next,
    })))
}

/// An `output` event's data, borrowed from the process's output.
#[derive(Serialize)]
struct Data<'a> {
    data: &'a str,
    stream: &'a OutputStream,
    encoding: Encoding,
}

fn event(item: &Output, encoding: Encoding) -> Option<Event> {
    Some(match item {
        Output::Start { .. } => return None,
        Output::Data { data, stream, next } => {
            sse::json(Event::default().event("output").id(next.to_string()), &Data { data, stream, encoding })
        }
        Output::Gap { from, to } => sse::json(
            Event::default().event("gap").id(to.to_string()),
            &serde_json::json!({ "from": from, "to": to, "lost": to - from }),
        ),
        Output::Lost { at, message } => sse::json(
            Event::default().event("lost").id(at.to_string()),
            &serde_json::json!({ "at": at, "message": message }),
        ),
        Output::End { exit_code, status, total } => sse::json(
            Event::default().event("end").id(total.to_string()),
            &serde_json::json!({ "exit_code": exit_code, "status": status, "total": total, "reason": "done" }),
        ),
        Output::Closed { reason, message } => sse::close_event(*reason, message.as_deref()),
    })
}

/// Where a process stream starts: a reconnecting EventSource's `Last-Event-ID` says where it
/// got to, and wins over the `since` of the URL it first used.
pub fn resume_from(headers: &HeaderMap, q: &SinceQuery) -> Result<Option<u64>, ApiError> {
    match headers.get("last-event-id").map(|v| v.to_str().map(|s| s.trim().parse::<u64>())) {
        Some(Ok(Ok(n))) => Ok(Some(n)),
        Some(_) => Err(ApiError::bad_request("Last-Event-ID must be a byte offset")),
        None => Ok(q.since),
    }
}

pub async fn stream(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path((reference, id)): Path<(String, String)>,
    Params(q): Params<SinceQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let since = resume_from(&headers, &q)?;
    let attached =
        processes::attach(&relay.processes, &caller, &reference, &id, since, q.encoding, Front::Rest).await?;
    let encoding = q.encoding;
    let events = attached.into_stream().filter_map(move |item| async move { event(&item, encoding).map(Ok) });
    Ok(Sse::new(events).keep_alive(sse::keep_alive()))
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InputBody {
    #[serde(default)]
    input: String,
    #[serde(default)]
    base64: bool,
    #[serde(default)]
    eof: bool,
}

pub async fn input(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path((reference, id)): Path<(String, String)>,
    Body(body): Body<InputBody>,
) -> Result<StatusCode, ApiError> {
    let data = if body.base64 {
        base64::engine::general_purpose::STANDARD
            .decode(body.input.as_bytes())
            .map_err(|e| ApiError::bad_request(format!("input is not base64: {e}")))?
    } else {
        body.input.into_bytes()
    };
    processes::input(&relay.processes, &caller, &reference, &id, data, body.eof).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn kill(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path((reference, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    processes::kill(&relay.processes, &caller, &reference, &id).await?;
    Ok(StatusCode::ACCEPTED)
}
