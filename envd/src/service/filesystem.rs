//! E2B's `filesystem.Filesystem` service: the unary file operations live in `file_ops.rs`, the
//! watches in `watch.rs`; this impl only routes to them.
use std::sync::Arc;

use hangar_proto::filesystem::{
    filesystem_server::Filesystem, CreateWatcherRequest, CreateWatcherResponse, GetWatcherEventsRequest,
    GetWatcherEventsResponse, ListDirRequest, ListDirResponse, MakeDirRequest, MakeDirResponse, MoveRequest,
    MoveResponse, RemoveRequest, RemoveResponse, RemoveWatcherRequest, RemoveWatcherResponse, StatRequest,
    StatResponse, WatchDirRequest, WatchDirResponse,
};
use tonic::{Request, Response, Status};

use super::{file_ops::FileOps, watch::WatchOps, Core, RpcStream};

pub struct FilesystemService {
    files: FileOps,
    watches: WatchOps,
}

impl FilesystemService {
    pub fn new(core: Arc<Core>) -> Self {
        Self { files: FileOps::new(core.clone()), watches: WatchOps::new(core) }
    }
}

#[tonic::async_trait]
impl Filesystem for FilesystemService {
    type WatchDirStream = RpcStream<WatchDirResponse>;

    async fn stat(&self, req: Request<StatRequest>) -> Result<Response<StatResponse>, Status> {
        self.files.stat(req).await
    }
    async fn make_dir(&self, req: Request<MakeDirRequest>) -> Result<Response<MakeDirResponse>, Status> {
        self.files.make_dir(req).await
    }
    async fn r#move(&self, req: Request<MoveRequest>) -> Result<Response<MoveResponse>, Status> {
        self.files.move_entry(req).await
    }
    async fn list_dir(&self, req: Request<ListDirRequest>) -> Result<Response<ListDirResponse>, Status> {
        self.files.list_dir(req).await
    }
    async fn remove(&self, req: Request<RemoveRequest>) -> Result<Response<RemoveResponse>, Status> {
        self.files.remove(req).await
    }
    async fn watch_dir(&self, req: Request<WatchDirRequest>) -> Result<Response<Self::WatchDirStream>, Status> {
        self.watches.watch_dir(req).await
    }
    async fn create_watcher(
        &self,
        req: Request<CreateWatcherRequest>,
    ) -> Result<Response<CreateWatcherResponse>, Status> {
        self.watches.create_watcher(req).await
    }
    async fn get_watcher_events(
        &self,
        req: Request<GetWatcherEventsRequest>,
    ) -> Result<Response<GetWatcherEventsResponse>, Status> {
        self.watches.get_watcher_events(req).await
    }
    async fn remove_watcher(
        &self,
        req: Request<RemoveWatcherRequest>,
    ) -> Result<Response<RemoveWatcherResponse>, Status> {
        self.watches.remove_watcher(req).await
    }
}
