//! hangar's `hangar.envd.v1.Files` service: `Follow` (a log followed over `crate::follow`) and
//! `WatchDir` (a directory watch whose events carry sequence numbers and say an overflow, built
//! from what `watch.rs` shares with E2B's watches).
use std::sync::Arc;

use hangar_proto::{
    ext::{
        files_server::Files, follow_event as fe, watch_event as we, FollowEvent, FollowRequest, FollowResponse,
        WatchEvent, WatchResponse,
    },
    filesystem::WatchDirRequest,
};
use tokio_stream::StreamExt as _;
use tonic::{Request, Response, Status};

use super::{
    context, fail, until_deadline,
    watch::{absolute, deadline_passed, fs_event, ticks, watch_spec, Tick},
    Core, RpcStream, Silence,
};
use crate::{
    error::RpcError,
    events,
    follow::{self, FollowError, FollowSpec},
    fs::creds,
    watch::{Ended, Item},
};

impl From<FollowError> for RpcError {
    fn from(e: FollowError) -> Self {
        let msg = e.to_string();
        match e {
            FollowError::IsADirectory(_) | FollowError::NotRegular(_) | FollowError::NetworkMount { .. } => {
                RpcError::invalid_argument(msg)
            }
            FollowError::Full(_) | FollowError::KernelLimit { .. } => RpcError::resource_exhausted(msg),
            FollowError::PermissionDenied { .. } => RpcError::permission_denied(msg),
            FollowError::Io { .. } => RpcError::internal(msg),
        }
    }
}

/// hangar's `Files` service.
pub struct FilesService {
    core: Arc<Core>,
}

impl FilesService {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core }
    }
}

fn watch_msg(seq: u64, e: we::Event) -> WatchResponse {
    WatchResponse { event: Some(WatchEvent { seq, event: Some(e) }) }
}

fn follow_msg(e: fe::Event) -> FollowResponse {
    FollowResponse { event: Some(FollowEvent { event: Some(e) }) }
}

fn follow_event(e: follow::Event) -> fe::Event {
    match e {
        follow::Event::Data { offset, data } => fe::Event::Data(fe::Data { offset, data: data.into() }),
        follow::Event::Truncated { previous_offset, size } => {
            fe::Event::Truncated(fe::Truncated { previous_offset, size })
        }
        follow::Event::Replaced { previous_offset } => fe::Event::Replaced(fe::Replaced { previous_offset }),
        follow::Event::Removed { previous_offset } => fe::Event::Removed(fe::Removed { previous_offset }),
        follow::Event::Created => fe::Event::Created(fe::Created {}),
    }
}

#[tonic::async_trait]
impl Files for FilesService {
    type FollowStream = RpcStream<FollowResponse>;
    type WatchDirStream = RpcStream<WatchResponse>;

    async fn follow(&self, req: Request<FollowRequest>) -> Result<Response<Self::FollowStream>, Status> {
        const M: &str = "hangar.envd.v1.Files.Follow";
        let ctx = context(&req).map_err(|e| fail(M, e))?;
        let r = req.into_inner();
        let path = absolute(&self.core, &ctx, &r.path).map_err(|e| fail(M, e))?;
        let spec = FollowSpec {
            path,
            offset: r.offset,
            allow_network_mounts: r.allow_network_mounts,
            who: creds::Identity::for_user(&ctx.user),
        };
        let (mut follower, start) = self.core.follows.start(spec).map_err(|e| fail(M, e))?;
        let first = follow_msg(fe::Event::Start(fe::Start {
            path: start.path.to_string_lossy().into_owned(),
            exists: start.exists,
            offset: start.offset,
            size: start.size,
        }));
        let (keepalive, deadline) = (ctx.keepalive, ctx.deadline);
        Ok(Response::new(Box::pin(async_stream::stream! {
            yield Ok(first);
            let until = until_deadline(deadline);
            tokio::pin!(until);
            let mut silence = Silence::new(keepalive);
            loop {
                tokio::select! {
                    ev = follower.next() => match ev {
                        Ok(ev) => {
                            silence.sent();
                            yield Ok(follow_msg(follow_event(ev)));
                        }
                        Err(e) => {
                            yield Err(fail(M, e));
                            return;
                        }
                    },
                    () = silence.elapsed() => yield Ok(follow_msg(fe::Event::Keepalive(fe::KeepAlive {}))),
                    _ = &mut until => {
                        yield Err(deadline_passed());
                        return;
                    }
                }
            }
        })))
    }

    async fn watch_dir(&self, req: Request<WatchDirRequest>) -> Result<Response<Self::WatchDirStream>, Status> {
        const M: &str = "hangar.envd.v1.Files.WatchDir";
        let ctx = context(&req).map_err(|e| fail(M, e))?;
        let spec = watch_spec(&self.core, &ctx, req.into_inner()).map_err(|e| fail(M, e))?;
        let watch = self.core.watches.watch(spec).await.map_err(|e| fail(M, e))?;
        let root = watch.root().to_path_buf();
        let mut ticks = ticks(watch, ctx.keepalive, ctx.deadline);
        Ok(Response::new(Box::pin(async_stream::stream! {
            yield Ok(watch_msg(0, we::Event::Start(we::Start {})));
            let mut last = 0;
            while let Some(tick) = ticks.next().await {
                match tick {
                    Tick::Batch(b) => {
                        for item in b.items {
                            match item {
                                Item::Change { seq, change } => {
                                    last = seq;
                                    yield Ok(watch_msg(seq, we::Event::Filesystem(fs_event(change))));
                                }
                                Item::Overflow { seq, dropped } => {
                                    last = seq;
                                    events::WatchEventsLost { path: &root, dropped }.emit();
                                    yield Ok(watch_msg(seq, we::Event::Overflow(we::Overflow { dropped })));
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
                    Tick::KeepAlive => yield Ok(watch_msg(last, we::Event::Keepalive(we::KeepAlive {}))),
                    Tick::Deadline => {
                        yield Err(deadline_passed());
                        return;
                    }
                }
            }
        })))
    }
}
