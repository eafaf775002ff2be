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
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::sse;
use crate::{
    api::{extract::Body, ApiError},
    auth::Caller,
    exec::{self, ExecEvent, ExecRequest, ExecResult},
    handles::Relay,
    streams::Front,
};

/// A command to run, as REST's body and (with `sandbox` and `stream`) the `exec` tool's
/// arguments. A doc comment here is the field's description in the tool's schema.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    /// Run with bash -lc
    command: String,
    /// Absolute, or relative to the sandbox's working directory
    cwd: Option<String>,
    /// Seconds (default 600)
    #[schemars(range(min = 1, max = exec::MAX_TIMEOUT_SECONDS))]
    timeout: Option<u64>,
}

impl ExecBody {
    /// The command asked for, checked.
    pub fn checked(self) -> crate::error::Result<ExecRequest> {
        ExecRequest::new(self.command, self.cwd, self.timeout)
    }
}

/// The command an exec body asks for, checked.
pub fn request(b: ExecBody) -> Result<ExecRequest, ApiError> {
    Ok(b.checked()?)
}

pub async fn exec(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Body(body): Body<ExecBody>,
) -> Result<Json<ExecResult>, ApiError> {
    Ok(Json(exec::run(&relay.execs, &caller, &reference, request(body)?).await?))
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
    let events = exec::stream(relay.execs.clone(), &caller, &reference, request(body)?, Front::Rest).await?;
    Ok(Sse::new(events.map(|ev| Ok(event(&ev)))).keep_alive(sse::keep_alive()))
}
