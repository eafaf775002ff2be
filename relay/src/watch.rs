//! Directory watches through the sandbox's daemon (envd's WatchDir, inotify), admitted against
//! the stream limits and closed like every stream. The REST SSE route and the MCP watch
//! resources both read these.
use futures::Stream;
use hangar_proto::{ext::watch_event, filesystem::WatchDirRequest};

use crate::{
    app::Relay,
    auth::Caller,
    envd::daemon_error,
    error::Result,
    streams::{Front, Kind, Reason},
    time,
};

/// One thing a watch reports.
#[derive(Debug, Clone)]
pub enum WatchItem {
    /// A change: `data` is `{seq, ts, name, type}` (type create, write, remove, rename or chmod).
    Change { seq: u64, data: serde_json::Value },
    /// The daemon dropped events: rescan the directory.
    Overflow { seq: u64, dropped: u64 },
    /// The watch ended, and why (the last item).
    Closed { reason: Reason, message: Option<String> },
}

/// Watches `path` (absolute, or relative to the sandbox's working directory) in the sandbox
/// `reference`. Needs the daemon; counts as a watch for `HANGAR_WATCH_MAX_PER_TOKEN`.
pub async fn watch(
    relay: &Relay,
    caller: &Caller,
    reference: &str,
    path: &str,
    recursive: bool,
    front: Front,
) -> Result<impl Stream<Item = WatchItem> + Send + 'static> {
    let mut row = relay.sandboxes.get(reference)?;
    let path = relay.sandboxes.resolve_path(&row, path)?;
    let envd = relay.sandboxes.require_daemon(&mut row, "watching a directory").await?;
    let mut admitted = relay.streams.open(caller, &row.id, Kind::Watch, front)?;
    let req = WatchDirRequest { path, recursive, include_entry: false, allow_network_mounts: false };
    let mut watch = envd.files().watch_dir(req).await.map_err(|s| daemon_error("watching", s))?.into_inner();
    Ok(async_stream::stream! {
        loop {
            // A close first: a destroyed sandbox's daemon stream breaks too, and why is the destroy.
            let msg = tokio::select! {
                biased;
                reason = admitted.closed() => {
                    admitted.end(reason);
                    yield WatchItem::Closed { reason, message: None };
                    return;
                }
                m = watch.message() => m,
            };
            let ev = match msg {
                Ok(Some(m)) => m.event,
                Ok(None) => {
                    admitted.end(Reason::Done);
                    yield WatchItem::Closed { reason: Reason::Done, message: None };
                    return;
                }
                Err(s) => {
                    admitted.end(Reason::Error);
                    yield WatchItem::Closed { reason: Reason::Error, message: Some(s.message().to_string()) };
                    return;
                }
            };
            let Some(ev) = ev else { continue };
            let seq = ev.seq;
            match ev.event {
                Some(watch_event::Event::Filesystem(f)) => {
                    let kind = hangar_proto::filesystem::EventType::try_from(f.r#type)
                        .map(|t| t.as_str_name().trim_start_matches("EVENT_TYPE_").to_ascii_lowercase())
                        .unwrap_or_else(|_| "unknown".into());
                    let data = serde_json::json!({ "seq": seq, "ts": time::now(), "name": f.name, "type": kind });
                    if admitted.send(data.to_string().len() as u64).await.is_err() {
                        admitted.end(Reason::MaxBytes);
                        yield WatchItem::Closed { reason: Reason::MaxBytes, message: None };
                        return;
                    }
                    yield WatchItem::Change { seq, data };
                }
                Some(watch_event::Event::Overflow(o)) => yield WatchItem::Overflow { seq, dropped: o.dropped },
                _ => continue,
            }
        }
    })
}
