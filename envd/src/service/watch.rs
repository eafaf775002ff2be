//! Directory watches as RPCs over `crate::watch`: E2B's streaming `WatchDir` and polling trio
//! (`WatchOps`, which `filesystem.rs` routes to), and what hangar's `Files/WatchDir` (`files.rs`)
//! shares with them: the request's spec, the stream of batches and keepalives, the event's shape.
//!
//! Lost events: hangar's `WatchDir` says so with an `overflow` event and goes on. E2B's messages
//! have no way to say it, so rather than pretend nothing was lost, its `WatchDir` stream sends the
//! events before the loss and then ends with `data_loss`, and a polled watcher answers the events
//! before the loss, then `data_loss` on every later call until it is removed (as E2B's envd does
//! with any watcher error). Either way the client knows to rescan and watch again.
use std::{
    pin::Pin,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::Stream;
use hangar_proto::filesystem::{
    watch_dir_response as wdr, CreateWatcherRequest, CreateWatcherResponse, EventType, FilesystemEvent,
    GetWatcherEventsRequest, GetWatcherEventsResponse, RemoveWatcherRequest, RemoveWatcherResponse, WatchDirRequest,
    WatchDirResponse,
};
use tokio_stream::StreamExt as _;
use tonic::{Request, Response, Status};

use super::{context, fail, resolve_path, until_deadline, CallContext, Core, RpcStream, Silence};
use crate::{
    error::RpcError,
    events,
    fs::creds,
    watch::{Batch, Change, Ended, Item, Kind, Watch, WatchError, WatchSpec},
};

impl From<WatchError> for RpcError {
    fn from(e: WatchError) -> Self {
        let msg = e.to_string();
        match e {
            WatchError::NotFound(_) | WatchError::NoWatcher(_) => RpcError::not_found(msg),
            // E2B's envd answers both with invalid_argument.
            WatchError::NotADirectory(_) | WatchError::NetworkMount { .. } => RpcError::invalid_argument(msg),
            WatchError::Full(_) | WatchError::KernelLimit { .. } => RpcError::resource_exhausted(msg),
            WatchError::PermissionDenied { .. } => RpcError::permission_denied(msg),
            WatchError::EventsLost { .. } => RpcError::data_loss(msg),
            WatchError::Io { .. } => RpcError::internal(msg),
        }
    }
}

pub(super) fn absolute(core: &Core, ctx: &CallContext, path: &str) -> Result<std::path::PathBuf, RpcError> {
    if path.is_empty() {
        return Err(RpcError::invalid_argument("path is required"));
    }
    Ok(resolve_path(path, &ctx.user, core.settings.get().workdir.as_deref()))
}

pub(super) fn watch_spec(core: &Core, ctx: &CallContext, r: WatchDirRequest) -> Result<WatchSpec, RpcError> {
    let root = absolute(core, ctx, &r.path)?;
    // A caller watches only a directory it may list. (The kernel's watches themselves are the
    // daemon's: inotify checks permission once, when a watch is added.)
    let listable =
        creds::as_identity(creds::Identity::for_user(&ctx.user).as_ref(), || std::fs::read_dir(&root).map(drop))
            .and_then(|r| r);
    if let Err(e) = listable {
        if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) {
            return Err(RpcError::permission_denied(format!("{} may not list {}", ctx.user.name, root.display())));
        }
    }
    Ok(WatchSpec {
        root,
        recursive: r.recursive,
        include_entry: r.include_entry,
        allow_network_mounts: r.allow_network_mounts,
    })
}

pub(super) fn fs_event(c: Change) -> FilesystemEvent {
    let kind = match c.kind {
        Kind::Create => EventType::Create,
        Kind::Write => EventType::Write,
        Kind::Remove => EventType::Remove,
        Kind::Rename => EventType::Rename,
        Kind::Chmod => EventType::Chmod,
    };
    FilesystemEvent { name: c.name, r#type: kind as i32, entry: c.entry.map(|e| *e) }
}

/// What a watch stream sees between its messages.
pub(super) enum Tick {
    Batch(Batch),
    KeepAlive,
    Deadline,
}

/// Drives a watch: its batches, keepalives after `keepalive` of silence, and `Deadline` (then
/// nothing) at `deadline`. Ends after a batch that ends the watch. Dropping it drops the watch.
pub(super) fn ticks(
    watch: Watch,
    keepalive: Duration,
    deadline: Option<Instant>,
) -> Pin<Box<dyn Stream<Item = Tick> + Send>> {
    Box::pin(async_stream::stream! {
        let until = until_deadline(deadline);
        tokio::pin!(until);
        let mut silence = Silence::new(keepalive);
        loop {
            tokio::select! {
                b = watch.next() => {
                    silence.sent();
                    let end = b.end.is_some();
                    yield Tick::Batch(b);
                    if end { break; }
                }
                () = silence.elapsed() => yield Tick::KeepAlive,
                _ = &mut until => { yield Tick::Deadline; break; }
            }
        }
    })
}

pub(super) fn deadline_passed() -> Status {
    Status::deadline_exceeded("the call's deadline passed")
}

pub struct WatchOps {
    core: Arc<Core>,
}

impl WatchOps {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core }
    }

    pub async fn watch_dir(
        &self,
        req: Request<WatchDirRequest>,
    ) -> Result<Response<RpcStream<WatchDirResponse>>, Status> {
        const M: &str = "filesystem.WatchDir";
        let ctx = context(&req).map_err(|e| fail(M, e))?;
        let spec = watch_spec(&self.core, &ctx, req.into_inner()).map_err(|e| fail(M, e))?;
        let watch = self.core.watches.watch(spec).await.map_err(|e| fail(M, e))?;
        let root = watch.root().to_path_buf();
        let msg = |e: wdr::Event| WatchDirResponse { event: Some(e) };
        let mut ticks = ticks(watch, ctx.keepalive, ctx.deadline);
        Ok(Response::new(Box::pin(async_stream::stream! {
            yield Ok(msg(wdr::Event::Start(wdr::StartEvent {})));
            while let Some(tick) = ticks.next().await {
                match tick {
                    Tick::Batch(b) => {
                        for item in b.items {
                            match item {
                                Item::Change { change, .. } => yield Ok(msg(wdr::Event::Filesystem(fs_event(change)))),
                                Item::Overflow { dropped, .. } => {
                                    events::WatchEventsLost { path: &root, dropped }.emit();
                                    yield Err(fail(M, WatchError::EventsLost { dropped }));
                                    return;
                                }
                            }
                        }
                        match b.end {
                            Some(Ended::Failed(e)) => {
                                yield Err(fail(M, e));
                                return;
                            }
                            Some(Ended::Gone) => return,
                            None => {}
                        }
                    }
                    Tick::KeepAlive => yield Ok(msg(wdr::Event::Keepalive(wdr::KeepAlive {}))),
                    Tick::Deadline => {
                        yield Err(deadline_passed());
                        return;
                    }
                }
            }
        })))
    }

    pub async fn create_watcher(
        &self,
        req: Request<CreateWatcherRequest>,
    ) -> Result<Response<CreateWatcherResponse>, Status> {
        const M: &str = "filesystem.CreateWatcher";
        let ctx = context(&req).map_err(|e| fail(M, e))?;
        let r = req.into_inner();
        let spec = watch_spec(
            &self.core,
            &ctx,
            WatchDirRequest {
                path: r.path,
                recursive: r.recursive,
                include_entry: r.include_entry,
                allow_network_mounts: r.allow_network_mounts,
            },
        )
        .map_err(|e| fail(M, e))?;
        let watcher_id = self.core.watches.create_watcher(spec).await.map_err(|e| fail(M, e))?;
        Ok(Response::new(CreateWatcherResponse { watcher_id }))
    }

    pub async fn get_watcher_events(
        &self,
        req: Request<GetWatcherEventsRequest>,
    ) -> Result<Response<GetWatcherEventsResponse>, Status> {
        const M: &str = "filesystem.GetWatcherEvents";
        let id = req.into_inner().watcher_id;
        let changes = self.core.watches.watcher_events(&id).map_err(|e| fail(M, e))?;
        Ok(Response::new(GetWatcherEventsResponse { events: changes.into_iter().map(fs_event).collect() }))
    }

    pub async fn remove_watcher(
        &self,
        req: Request<RemoveWatcherRequest>,
    ) -> Result<Response<RemoveWatcherResponse>, Status> {
        const M: &str = "filesystem.RemoveWatcher";
        let id = req.into_inner().watcher_id;
        self.core.watches.remove_watcher(&id).map_err(|e| fail(M, e))?;
        Ok(Response::new(RemoveWatcherResponse {}))
    }
}
