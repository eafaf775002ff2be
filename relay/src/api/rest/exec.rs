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
    events,
    exec::{self, ExecEvent, ExecRequest, ExecResult},
    Relay,
};

/// The longest a command may run.
const MAX_TIMEOUT_SECONDS: u64 = 24 * 3600;
const DEFAULT_TIMEOUT_SECONDS: u64 = 600;
/// A comment this often keeps proxies from timing the connection out.
const SSE_KEEPALIVE: Duration = Duration::from_secs(15);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    command: String,
    cwd: Option<String>,
    /// Seconds.
    timeout: Option<u64>,
}

fn request(b: ExecBody) -> Result<ExecRequest, ApiError> {
    if b.command.trim().is_empty() {
        return Err(ApiError::bad_request("command must not be empty"));
    }
    let timeout = b.timeout.unwrap_or(DEFAULT_TIMEOUT_SECONDS);
    if timeout == 0 || timeout > MAX_TIMEOUT_SECONDS {
        return Err(ApiError::bad_request(format!("timeout: 1 to {MAX_TIMEOUT_SECONDS} seconds")));
    }
    Ok(ExecRequest { command: b.command, cwd: b.cwd, timeout: Duration::from_secs(timeout) })
}

pub async fn exec(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Body(body): Body<ExecBody>,
) -> Result<Json<ExecResult>, ApiError> {
    require_sandbox_scope(&caller)?;
    let req = request(body)?;
    let mut row = relay.sandboxes.get(&relay.store, &reference)?;
    let result = match relay.sandboxes.daemon(&relay.store, &mut row).await {
        Ok(Some(envd)) => {
            let mut result = None;
            let events = exec::through_daemon(envd, req);
            futures::pin_mut!(events);
            while let Some(ev) = events.next().await {
                if let ExecEvent::Result(r) = ev {
                    result = Some(ExecResult { streamed: false, ..r });
                }
            }
            result.ok_or_else(|| ApiError::bad_gateway("the command's stream ended without a result"))?
        }
        _ => exec::from_fallback(
            relay.sandboxes.exec_fallback(&row, &req.command, req.cwd.as_deref(), req.timeout).await?,
        ),
    };
    events::ExecFinished { sandbox: &row.name, streamed: false, exit_code: result.exit_code, closed: result.closed }
        .emit();
    Ok(Json(result))
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
    let req = request(body)?;
    let mut row = relay.sandboxes.get(&relay.store, &reference)?;
    let daemon = match relay.sandboxes.daemon(&relay.store, &mut row).await {
        Ok(d) => d,
        // A paused sandbox runs nothing: 503 before any stream starts, as for an unstreamed exec.
        Err(e) if e.status == axum::http::StatusCode::SERVICE_UNAVAILABLE => return Err(e),
        Err(_) => None,
    };
    let name = row.name.clone();
    let stream = async_stream::stream! {
        let events: std::pin::Pin<Box<dyn Stream<Item = ExecEvent> + Send>> = match daemon {
            Some(envd) => Box::pin(exec::through_daemon(envd, req)),
            None => {
                let r = relay.sandboxes.exec_fallback(&row, &req.command, req.cwd.as_deref(), req.timeout).await;
                let r = match r {
                    Ok(o) => exec::from_fallback(o),
                    Err(e) => ExecResult {
                        exit_code: -1, stdout: String::new(), stderr: String::new(), streamed: false,
                        closed: Some("error"), error: Some(e.message),
                    },
                };
                // Without a daemon the output arrives in one piece at the end.
                let mut v = Vec::new();
                if !r.stdout.is_empty() { v.push(ExecEvent::Stdout(r.stdout.clone())); }
                if !r.stderr.is_empty() { v.push(ExecEvent::Stderr(r.stderr.clone())); }
                v.push(ExecEvent::Result(r));
                Box::pin(futures::stream::iter(v))
            }
        };
        futures::pin_mut!(events);
        while let Some(ev) = events.next().await {
            if let ExecEvent::Result(r) = &ev {
                events::ExecFinished { sandbox: &name, streamed: r.streamed, exit_code: r.exit_code, closed: r.closed }.emit();
            }
            yield Ok(sse(&ev));
        }
    };
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(SSE_KEEPALIVE)))
}
