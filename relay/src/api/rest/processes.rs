//! Background processes: `POST/GET /api/sandboxes/{ref}/processes`, `GET .../processes/{id}?since=`
//! (buffered output, for polling), `GET .../processes/{id}/stream?since=` (SSE whose `id` is the
//! byte offset to resume from, so `Last-Event-ID` resumes exactly), `POST .../processes/{id}/input`,
//! `DELETE .../processes/{id}`.
use std::{convert::Infallible, sync::Arc, time::Duration};

use axum::{
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::sse::{Event, KeepAlive, Sse},
    Extension, Json,
};
use base64::Engine as _;
use futures::{Stream, StreamExt};
use serde::Deserialize;

use super::{require_sandbox_scope, Body, Params};
use crate::{
    auth::Caller,
    background::{self, check_id, Backend},
    detached::Detached,
    error::ApiError,
    processes::{self, Output},
    streams::{Kind, Reason},
    Relay,
};

use super::exec::SSE_KEEPALIVE;
/// A poll returns once it has what was written when it asked, or after this much quiet.
const POLL_QUIET: Duration = Duration::from_millis(250);

async fn backend(relay: &Relay, caller: &Caller, reference: &str) -> Result<Backend, ApiError> {
    require_sandbox_scope(caller)?;
    background::backend(relay, reference).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    command: String,
    cwd: Option<String>,
}

pub async fn start(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Body(body): Body<StartBody>,
) -> Result<(StatusCode, Json<processes::ProcessView>), ApiError> {
    require_sandbox_scope(&caller)?;
    let view = background::start(&relay, &caller, &reference, &body.command, body.cwd).await?;
    Ok((StatusCode::CREATED, Json(view)))
}

pub async fn list(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    require_sandbox_scope(&caller)?;
    let list = background::list(&relay, &caller, &reference).await?;
    Ok(Json(serde_json::json!({ "processes": list })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinceQuery {
    since: Option<u64>,
}

/// The output written from `since` up to when the call came, without waiting for more.
pub async fn read(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path((reference, id)): Path<(String, String)>,
    Params(q): Params<SinceQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    check_id(&id)?;
    let target = match backend(&relay, &caller, &reference).await? {
        Backend::Daemon(t) => t,
        Backend::Polled(row) => {
            let d = Detached { relay: &relay, sandbox: &row, caller: &caller };
            let (view, output, next) = d.read(&id, q.since).await?;
            return Ok(Json(serde_json::json!({
                "process": view, "since": q.since.unwrap_or(0), "output": output, "lost": 0, "next": next,
            })));
        }
    };
    let at = target.at(&relay, &caller);
    let view = relay.processes.get(&at, &id).await?;
    let stream = relay.processes.attach(&at, &id, q.since).await?;
    futures::pin_mut!(stream);
    let (mut output, mut lost, mut next, mut target, mut start) =
        (String::new(), 0u64, q.since.unwrap_or(0), None, None);
    loop {
        let item = match tokio::time::timeout(POLL_QUIET, stream.next()).await {
            Ok(Some(i)) => i,
            Ok(None) | Err(_) => break,
        };
        match item {
            Output::Start { oldest, next: n } => {
                start = Some(q.since.unwrap_or(oldest));
                next = start.unwrap_or(oldest);
                target = Some(n);
            }
            Output::Data { data, next: n, .. } => {
                output.push_str(&data);
                next = n;
            }
            Output::Gap { from, to } => {
                lost += to - from;
                next = to;
            }
            Output::End { total, .. } => {
                next = total;
                break;
            }
            Output::Broken(m) => return Err(ApiError::bad_gateway(format!("reading the process's output: {m}"))),
        }
        if target.is_some_and(|t| next >= t) {
            break;
        }
    }
    Ok(Json(serde_json::json!({
        "process": view,
        "since": start.unwrap_or(next),
        "output": output,
        "lost": lost,
        "next": next,
    })))
}

fn sse_event(item: &Output) -> Option<Event> {
    let ev = match item {
        Output::Start { .. } => return None,
        Output::Data { data, stream, next } => Event::default()
            .event("output")
            .id(next.to_string())
            .json_data(serde_json::json!({ "data": data, "stream": stream })),
        Output::Gap { from, to } => Event::default()
            .event("gap")
            .id(to.to_string())
            .json_data(serde_json::json!({ "from": from, "to": to, "lost": to - from })),
        Output::End { exit_code, status, total } => Event::default().event("end").id(total.to_string()).json_data(
            serde_json::json!({ "exit_code": exit_code, "status": status, "total": total, "reason": "done" }),
        ),
        Output::Broken(m) => return Some(close_event(Reason::Error, Some(m))),
    };
    ev.ok()
}

pub async fn stream(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path((reference, id)): Path<(String, String)>,
    Params(q): Params<SinceQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    check_id(&id)?;
    // A reconnecting EventSource says where it got to; that wins over the URL it first used.
    let since = match headers.get("last-event-id").map(|v| v.to_str().map(|s| s.trim().parse::<u64>())) {
        Some(Ok(Ok(n))) => Some(n),
        Some(_) => return Err(ApiError::bad_request("Last-Event-ID must be a byte offset")),
        None => q.since,
    };
    require_sandbox_scope(&caller)?;
    let (sandbox_id, output) = background::follow(&relay, &caller, &reference, &id, since).await?;
    let mut admitted = relay.streams.open(&caller, &sandbox_id, Kind::Process)?;
    let events = async_stream::stream! {
        let mut output = output;
        loop {
            // A close first: a destroyed sandbox's daemon stream breaks too, and why is the destroy.
            let item = tokio::select! {
                biased;
                reason = admitted.closed() => {
                    admitted.end(reason);
                    yield Ok(close_event(reason, None));
                    return;
                }
                item = output.next() => item,
            };
            let Some(item) = item else { admitted.end(Reason::Error); return; };
            if let Output::Data { data, .. } = &item {
                if admitted.send(data.len() as u64).await.is_err() {
                    admitted.end(Reason::MaxBytes);
                    yield Ok(close_event(Reason::MaxBytes, None));
                    return;
                }
            }
            match &item {
                Output::End { .. } => admitted.end(Reason::Done),
                Output::Broken(_) => admitted.end(Reason::Error),
                _ => {}
            }
            let last = matches!(item, Output::End { .. } | Output::Broken(_));
            if let Some(ev) = sse_event(&item) {
                yield Ok(ev);
            }
            if last {
                return;
            }
        }
    };
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(SSE_KEEPALIVE)))
}

/// The SSE event that says why a stream ended early.
pub fn close_event(reason: Reason, message: Option<&str>) -> Event {
    Event::default()
        .event("close")
        .json_data(serde_json::json!({ "reason": reason.as_str(), "message": message }))
        .unwrap_or_else(|_| Event::default().event("close"))
}

#[derive(Deserialize)]
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
    check_id(&id)?;
    let data = if body.base64 {
        base64::engine::general_purpose::STANDARD
            .decode(body.input.as_bytes())
            .map_err(|e| ApiError::bad_request(format!("input is not base64: {e}")))?
    } else {
        body.input.into_bytes()
    };
    require_sandbox_scope(&caller)?;
    background::input(&relay, &caller, &reference, &id, data, body.eof).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn kill(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path((reference, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    require_sandbox_scope(&caller)?;
    background::kill(&relay, &caller, &reference, &id).await?;
    Ok(StatusCode::ACCEPTED)
}
