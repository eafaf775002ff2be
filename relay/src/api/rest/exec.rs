//! `POST /api/sandboxes/{ref}/exec` (the result at the end) and `.../exec/stream` (SSE: `stdout`
//! and `stderr` events as it prints, a `gap` where a client that stopped reading lost output,
//! then one `result`).
use std::{convert::Infallible, sync::Arc};

use axum::{
    extract::{Path, State},
    response::sse::{Event, Sse},
    Extension, Json,
};
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};

use super::sse;
use crate::{
    api::{extract::Body, ApiError},
    app::Relay,
    auth::Caller,
    exec::{self, ExecEvent, ExecRequest, ExecResult},
    streams::Front,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    command: String,
    cwd: Option<String>,
    /// Seconds.
    timeout: Option<u64>,
}

/// The command an exec body asks for, checked.
pub fn request(b: ExecBody) -> Result<ExecRequest, ApiError> {
    Ok(ExecRequest::new(b.command, b.cwd, b.timeout)?)
}

pub async fn exec(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Body(body): Body<ExecBody>,
) -> Result<Json<ExecResult>, ApiError> {
    Ok(Json(exec::run(&relay, &caller, &reference, request(body)?).await?))
}

/// `{"data": ...}`, borrowed: each line's event is serialized straight from the text.
#[derive(Serialize)]
struct Text<'a> {
    data: &'a str,
}

fn event(ev: &ExecEvent) -> Event {
    match ev {
        ExecEvent::Stdout(t) => sse::json(Event::default().event("stdout"), &Text { data: t }),
        ExecEvent::Stderr(t) => sse::json(Event::default().event("stderr"), &Text { data: t }),
        ExecEvent::Gap { stream, from, to } => sse::json(
            Event::default().event("gap"),
            &serde_json::json!({ "stream": stream, "from": from, "to": to, "lost": to - from }),
        ),
        ExecEvent::Result(r) => sse::json(Event::default().event("result"), r),
    }
}

pub async fn exec_stream(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Body(body): Body<ExecBody>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let events = exec::stream(relay, &caller, &reference, request(body)?, Front::Rest).await?;
    Ok(Sse::new(events.map(|ev| Ok(event(&ev)))).keep_alive(sse::keep_alive()))
}
