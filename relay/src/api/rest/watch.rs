//! `GET /api/sandboxes/{ref}/watch?path=&recursive=`: a directory's changes as Server-Sent
//! Events, `{seq, ts, name, type}` with `id` = seq, through the daemon's inotify watch.
use std::{convert::Infallible, sync::Arc};

use axum::{
    extract::{Path, State},
    response::sse::{Event, Sse},
    Extension,
};
use futures::{Stream, StreamExt};
use serde::Deserialize;

use super::sse;
use crate::{
    api::{extract::Params, ApiError},
    auth::Caller,
    handles::Relay,
    streams::Front,
    watch::WatchItem,
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
    let path = q.path.unwrap_or_default();
    let items = relay.watches.watch(&caller, &reference, &path, q.recursive, Front::Rest).await?;
    let events = items.filter_map(|item| async move {
        let ev = match item {
            WatchItem::Change { seq, data } => sse::json(Event::default().event("change").id(seq.to_string()), &data),
            WatchItem::Overflow { seq, dropped } => sse::json(
                Event::default().event("overflow").id(seq.to_string()),
                &serde_json::json!({ "seq": seq, "dropped": dropped, "message": "events were lost: rescan the directory" }),
            ),
            WatchItem::Closed { reason, message } => sse::close_event(reason, message.as_deref()),
        };
        Some(Ok(ev))
    });
    Ok(Sse::new(events).keep_alive(sse::keep_alive()))
}
