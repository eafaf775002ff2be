//! Directory watches through the sandbox's daemon (envd's WatchDir, inotify), admitted against
//! the stream limits and closed like every stream. The REST SSE route and the MCP watch
//! resources both read these. On a daemon without hangar's extensions (E2B's envd) the watch is
//! E2B's `filesystem.Filesystem/WatchDir`: the relay numbers its events, and a loss (which E2B's
//! stream says by ending with `data_loss`) becomes an `overflow` after which the relay watches
//! again, so the client sees the same items either way.
use std::{collections::VecDeque, sync::Arc};

use futures::Stream;
use hangar_proto::{
    ext::{watch_event, WatchResponse},
    filesystem::{watch_dir_response, EventType, WatchDirRequest, WatchDirResponse},
};

use crate::{
    auth::Caller,
    envd::Envd,
    error::{daemon_error, Result},
    sandboxes::Sandboxes,
    streams::{
        self,
        buffer::{Buffer, Full, Shed},
        Front, Kind, Reason, Streams,
    },
    time,
};

/// Directory watches: what a watch needs and nothing else.
pub struct Watches {
    sandboxes: Arc<Sandboxes>,
    streams: Arc<Streams>,
    /// What the relay holds of one watch's changes for a client that reads slowly.
    buffer_bytes: usize,
}

/// One thing a watch reports.
#[derive(Debug, Clone)]
pub enum WatchItem {
    /// A change: `data` is `{seq, ts, name, type}` (type create, write, remove, rename or chmod).
    Change { seq: u64, data: serde_json::Value },
    /// `dropped` changes were lost (the daemon's queue was full, or the client fell behind the
    /// relay's buffer): rescan the directory.
    Overflow { seq: u64, dropped: u64 },
    /// The watch ended, and why (the last item).
    Closed { reason: Reason, message: Option<String> },
}

impl Watches {
    pub fn new(sandboxes: Arc<Sandboxes>, streams: Arc<Streams>, buffer_bytes: usize) -> Watches {
        Watches { sandboxes, streams, buffer_bytes }
    }

    /// Watches `path` (absolute, or relative to the sandbox's working directory) in the sandbox
    /// `reference`. Needs the daemon; counts as a watch for `HANGAR_WATCH_MAX_PER_TOKEN`.
    pub async fn watch(
        &self,
        caller: &Caller,
        reference: &str,
        path: &str,
        recursive: bool,
        front: Front,
    ) -> Result<impl Stream<Item = WatchItem> + Send + 'static> {
        let mut row = self.sandboxes.enter(reference, caller).await?;
        let path = self.sandboxes.resolve_path(&row, path)?;
        let envd = self.sandboxes.require_daemon(&mut row, "watching a directory").await?;
        let mut admitted = self.streams.open(caller, &row.id, Kind::Watch, front)?;
        let req = WatchDirRequest { path, recursive, include_entry: false, allow_network_mounts: false };
        let changes: std::pin::Pin<Box<dyn Stream<Item = WatchItem> + Send>> = if envd.is_e2b() {
            let watch = envd.filesystem().watch_dir(req.clone()).await.map_err(|s| daemon_error("watching", s))?;
            Box::pin(e2b_changes(envd, req, watch.into_inner()))
        } else {
            Box::pin(changes(envd.files().watch_dir(req).await.map_err(|s| daemon_error("watching", s))?.into_inner()))
        };
        // Drained as the daemon sends it, whatever the client's pace: a client that stops reading
        // must not hold the sandbox's shared connection (streams::buffer).
        let items = Buffer::spawn(changes, ShedNewest, self.buffer_bytes, Full::Shed);
        Ok(async_stream::stream! {
            loop {
                // A close first: a destroyed sandbox's daemon stream breaks too, and why is the destroy.
                let item = tokio::select! {
                    biased;
                    reason = admitted.closed() => {
                        admitted.end(reason);
                        yield WatchItem::Closed { reason, message: None };
                        return;
                    }
                    item = items.next() => item,
                };
                match item {
                    Some(WatchItem::Change { seq, data }) => {
                        if admitted.send(data.to_string().len() as u64).await.is_err() {
                            admitted.end(Reason::MaxBytes);
                            yield WatchItem::Closed { reason: Reason::MaxBytes, message: None };
                            return;
                        }
                        yield WatchItem::Change { seq, data };
                    }
                    Some(WatchItem::Closed { reason, message }) => {
                        admitted.end(reason);
                        yield WatchItem::Closed { reason, message };
                        return;
                    }
                    Some(overflow) => yield overflow,
                    // `items` always ends with a close.
                    None => {
                        admitted.end(Reason::Error);
                        yield WatchItem::Closed { reason: Reason::Error, message: Some("the watch ended early".into()) };
                        return;
                    }
                }
            }
        })
    }
}

/// The daemon's watch events as items, ending with a close: `Done` when the daemon ends the
/// watch, `Error` when its stream breaks.
fn changes(mut watch: tonic::Streaming<WatchResponse>) -> impl Stream<Item = WatchItem> + Send + 'static {
    async_stream::stream! {
        loop {
            let ev = match watch.message().await {
                Ok(Some(m)) => m.event,
                Ok(None) => {
                    yield WatchItem::Closed { reason: Reason::Done, message: None };
                    return;
                }
                Err(s) => {
                    yield WatchItem::Closed { reason: Reason::Error, message: Some(s.message().to_string()) };
                    return;
                }
            };
            let Some(ev) = ev else { continue };
            let seq = ev.seq;
            match ev.event {
                Some(watch_event::Event::Filesystem(f)) => yield change(seq, f.name, f.r#type),
                Some(watch_event::Event::Overflow(o)) => yield WatchItem::Overflow { seq, dropped: o.dropped },
                _ => continue,
            }
        }
    }
}

/// A change as the client sees it; `ts` is when the relay heard of it, whenever its client reads it.
fn change(seq: u64, name: String, kind: i32) -> WatchItem {
    let kind = EventType::try_from(kind)
        .map(|t| t.as_str_name().trim_start_matches("EVENT_TYPE_").to_ascii_lowercase())
        .unwrap_or_else(|_| "unknown".into());
    WatchItem::Change { seq, data: serde_json::json!({ "seq": seq, "ts": time::now(), "name": name, "type": kind }) }
}

/// E2B's watch events as items, numbered by the relay from 1 as hangar-envd numbers its own. A
/// stream that ends with `data_loss` lost events: an `overflow` (how many is not said: 0) says
/// so, and the relay watches again; the client rescans. It ends with a close as `changes` does.
fn e2b_changes(
    envd: Envd,
    req: WatchDirRequest,
    mut watch: tonic::Streaming<WatchDirResponse>,
) -> impl Stream<Item = WatchItem> + Send + 'static {
    async_stream::stream! {
        let mut seq = 0;
        loop {
            let ev = match watch.message().await {
                Ok(Some(m)) => m.event,
                Ok(None) => {
                    yield WatchItem::Closed { reason: Reason::Done, message: None };
                    return;
                }
                Err(s) if s.code() == tonic::Code::DataLoss => {
                    yield WatchItem::Overflow { seq, dropped: 0 };
                    match envd.filesystem().watch_dir(req.clone()).await {
                        Ok(w) => {
                            watch = w.into_inner();
                            continue;
                        }
                        Err(s) => {
                            yield WatchItem::Closed { reason: Reason::Error, message: Some(s.message().to_string()) };
                            return;
                        }
                    }
                }
                Err(s) => {
                    yield WatchItem::Closed { reason: Reason::Error, message: Some(s.message().to_string()) };
                    return;
                }
            };
            if let Some(watch_dir_response::Event::Filesystem(f)) = ev {
                seq += 1;
                yield change(seq, f.name, f.r#type);
            }
        }
    }
}

/// What a watch's client that falls behind gives up, as the daemon's queue does: the newest
/// changes, folded into one overflow marker at the end, so it sees a true prefix, then the
/// loss, then what comes after.
struct ShedNewest;

impl Shed<WatchItem> for ShedNewest {
    fn cost(&self, item: &WatchItem) -> usize {
        match item {
            // The name is most of it; the rest is about the message's overhead.
            WatchItem::Change { data, .. } => {
                data["name"].as_str().map_or(0, str::len) + streams::MESSAGE_OVERHEAD as usize
            }
            _ => 0,
        }
    }

    fn shed(&mut self, queue: &mut VecDeque<WatchItem>) -> usize {
        let Some(WatchItem::Change { seq, .. }) = queue.back() else { return 0 };
        let seq = *seq;
        let Some(change) = queue.pop_back() else { return 0 };
        match queue.back_mut() {
            Some(WatchItem::Overflow { dropped, .. }) => *dropped += 1,
            _ => queue.push_back(WatchItem::Overflow { seq, dropped: 1 }),
        }
        self.cost(&change)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(seq: u64) -> WatchItem {
        WatchItem::Change { seq, data: serde_json::json!({ "seq": seq, "name": "a" }) }
    }

    #[test]
    fn a_client_behind_loses_the_newest_changes_to_one_overflow() {
        let mut q: VecDeque<WatchItem> = vec![change(1), change(2)].into();
        assert!(ShedNewest.shed(&mut q) > 0);
        q.push_back(change(3));
        ShedNewest.shed(&mut q);
        let seen: Vec<String> = q.iter().map(|i| format!("{i:?}")).collect();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(matches!(q.back(), Some(WatchItem::Overflow { seq: 2, dropped: 2 })), "{seen:?}");
        let mut closed: VecDeque<WatchItem> = vec![WatchItem::Closed { reason: Reason::Done, message: None }].into();
        assert_eq!(ShedNewest.shed(&mut closed), 0);
    }
}
