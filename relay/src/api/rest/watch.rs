//! `GET /api/sandboxes/{ref}/watch?path=&recursive=`: a directory's changes as Server-Sent
//! Events, `{seq, ts, name, type}` with `id` = seq, through the daemon's inotify watch.
use std::{convert::Infallible, sync::Arc};

use axum::{
    extract::{Path, State},
    response::sse::{Event, KeepAlive, Sse},
    Extension,
};
use futures::{Stream, StreamExt};
use serde::Deserialize;

use super::{exec::SSE_KEEPALIVE, processes::close_event, require_sandbox_scope, Params};
use crate::{
    auth::Caller,
    error::ApiError,
    streams::Kind,
    watch::{self, WatchItem},
    Relay,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchQuery {
    path: Option<String>,
    #[serde(default)]
    recursive: bool,
}

pub async fn watch(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Params(q): Params<WatchQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    require_sandbox_scope(&caller)?;
    let path = q.path.unwrap_or_default();
    let items = watch::watch(&relay, &caller, &reference, &path, q.recursive, Kind::Watch).await?;
    let events = items.filter_map(|item| async move {
        let ev = match item {
            WatchItem::Change { seq, data } => {
                Event::default().event("change").id(seq.to_string()).json_data(data).ok()?
            }
            WatchItem::Overflow { seq, dropped } => Event::default()
                .event("overflow")
                .id(seq.to_string())
                .json_data(serde_json::json!({ "seq": seq, "dropped": dropped, "message": "events were lost: rescan the directory" }))
                .ok()?,
            WatchItem::Closed { reason, message } => close_event(reason, message.as_deref()),
        };
        Some(Ok(ev))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(SSE_KEEPALIVE)))
}
