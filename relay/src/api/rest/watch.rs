//! `GET /api/sandboxes/{ref}/watch?path=&recursive=`: a directory's changes as Server-Sent
//! Events, `{seq, ts, name, type}` with `id` = seq, through the daemon's inotify watch.
use std::{convert::Infallible, sync::Arc, time::SystemTime};

use axum::{
    extract::{Path, State},
    response::sse::{Event, KeepAlive, Sse},
    Extension,
};
use futures::Stream;
use hangar_proto::{ext::watch_event, filesystem::WatchDirRequest};
use serde::Deserialize;

use super::{exec::SSE_KEEPALIVE, processes::close_event, require_sandbox_scope, Params};
use crate::{
    auth::Caller,
    envd::daemon_error,
    error::ApiError,
    streams::{Kind, Reason},
    Relay,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchQuery {
    path: Option<String>,
    #[serde(default)]
    recursive: bool,
}

fn now_rfc3339() -> String {
    hangar_proto::Timestamp::from(SystemTime::now()).to_string()
}

pub async fn watch(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Params(q): Params<WatchQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    require_sandbox_scope(&caller)?;
    let mut row = relay.sandboxes.get(&relay.store, &reference)?;
    let path = relay.sandboxes.resolve_path(&row, q.path.as_deref().unwrap_or(""))?;
    let Some(envd) = relay.sandboxes.daemon(&relay.store, &mut row).await? else {
        return Err(ApiError::unavailable(format!(
            "sandbox {:?} has no daemon: watching a directory needs the daemon",
            row.name
        )));
    };
    let mut admitted = relay.streams.open(&caller, &row.id, Kind::Watch)?;
    let req = WatchDirRequest { path, recursive: q.recursive, include_entry: false, allow_network_mounts: false };
    let mut watch = envd.files().watch_dir(req).await.map_err(|s| daemon_error("watching", s))?.into_inner();
    let events = async_stream::stream! {
        loop {
            // A close first: a destroyed sandbox's daemon stream breaks too, and why is the destroy.
            let msg = tokio::select! {
                biased;
                reason = admitted.closed() => {
                    admitted.end(reason);
                    yield Ok(close_event(reason, None));
                    return;
                }
                m = watch.message() => m,
            };
            let ev = match msg {
                Ok(Some(m)) => m.event,
                Ok(None) => { admitted.end(Reason::Done); yield Ok(close_event(Reason::Done, None)); return; }
                Err(s) => {
                    admitted.end(Reason::Error);
                    yield Ok(close_event(Reason::Error, Some(s.message())));
                    return;
                }
            };
            let Some(ev) = ev else { continue };
            let seq = ev.seq;
            let out = match ev.event {
                Some(watch_event::Event::Filesystem(f)) => {
                    let kind = hangar_proto::filesystem::EventType::try_from(f.r#type)
                        .map(|t| t.as_str_name().trim_start_matches("EVENT_TYPE_").to_ascii_lowercase())
                        .unwrap_or_else(|_| "unknown".into());
                    let data = serde_json::json!({ "seq": seq, "ts": now_rfc3339(), "name": f.name, "type": kind });
                    if admitted.send(data.to_string().len() as u64).await.is_err() {
                        admitted.end(Reason::MaxBytes);
                        yield Ok(close_event(Reason::MaxBytes, None));
                        return;
                    }
                    Event::default().event("change").id(seq.to_string()).json_data(data)
                }
                Some(watch_event::Event::Overflow(o)) => Event::default()
                    .event("overflow")
                    .id(seq.to_string())
                    .json_data(serde_json::json!({ "seq": seq, "dropped": o.dropped, "message": "events were lost: rescan the directory" })),
                _ => continue,
            };
            if let Ok(e) = out {
                yield Ok(e);
            }
        }
    };
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(SSE_KEEPALIVE)))
}
