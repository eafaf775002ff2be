//! `POST /api/sandboxes/{ref}/exec` (the result at the end) and `.../exec/stream` (SSE: `stdout`
//! and `stderr` events as it prints, then one `result`).
use std::{convert::Infallible, sync::Arc, time::Duration};

use axum::{
    extract::{Path, State},
    response::sse::{Event, KeepAlive, Sse},
    Extension, Json,
};
use futures::{Stream, StreamExt};
use serde::Deserialize;

use super::{require_sandbox_scope, Body};
use crate::{
    auth::Caller,
    error::ApiError,
    exec::{self, ExecEvent, ExecRequest, ExecResult},
    streams::Kind,
    Relay,
};

/// A comment this often keeps proxies from timing the connection out.
pub const SSE_KEEPALIVE: Duration = Duration::from_secs(15);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    command: String,
    cwd: Option<String>,
    /// Seconds.
    timeout: Option<u64>,
}

fn request(b: ExecBody) -> Result<ExecRequest, ApiError> {
    ExecRequest::new(b.command, b.cwd, b.timeout)
}

pub async fn exec(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Body(body): Body<ExecBody>,
) -> Result<Json<ExecResult>, ApiError> {
    require_sandbox_scope(&caller)?;
    Ok(Json(exec::run(&relay, &reference, request(body)?).await?))
}

fn sse(ev: &ExecEvent) -> Event {
    match ev {
        ExecEvent::Stdout(t) => Event::default().event("stdout").json_data(serde_json::json!({ "data": t })),
        ExecEvent::Stderr(t) => Event::default().event("stderr").json_data(serde_json::json!({ "data": t })),
        ExecEvent::Result(r) => Event::default().event("result").json_data(r),
    }
    .unwrap_or_else(|_| Event::default().event("error").data("unserializable event"))
}

pub async fn exec_stream(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Body(body): Body<ExecBody>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    require_sandbox_scope(&caller)?;
    let events = exec::stream(relay, &caller, &reference, request(body)?, Kind::Exec).await?;
    Ok(Sse::new(events.map(|ev| Ok(sse(&ev)))).keep_alive(KeepAlive::new().interval(SSE_KEEPALIVE)))
}
