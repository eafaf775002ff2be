//! Directory watches (E2B's streaming `WatchDir` and polling trio, hangar's `Files/WatchDir`) and
//! log following (hangar's `Files/Follow`).
use std::sync::Arc;

use hangar_proto::{
    ext::{files_server::Files, FollowRequest, FollowResponse, WatchResponse},
    filesystem::{
        CreateWatcherRequest, CreateWatcherResponse, GetWatcherEventsRequest, GetWatcherEventsResponse,
        RemoveWatcherRequest, RemoveWatcherResponse, WatchDirRequest, WatchDirResponse,
    },
};
use tonic::{Request, Response, Status};

use super::{Core, RpcStream};

fn todo<T>() -> Result<T, Status> {
    Err(Status::unimplemented("not implemented yet"))
}

pub struct WatchOps {
    #[allow(dead_code)]
    core: Arc<Core>,
}

impl WatchOps {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core }
    }
    pub async fn watch_dir(
        &self,
        _req: Request<WatchDirRequest>,
    ) -> Result<Response<RpcStream<WatchDirResponse>>, Status> {
        todo()
    }
    pub async fn create_watcher(
        &self,
        _req: Request<CreateWatcherRequest>,
    ) -> Result<Response<CreateWatcherResponse>, Status> {
        todo()
    }
    pub async fn get_watcher_events(
        &self,
        _req: Request<GetWatcherEventsRequest>,
    ) -> Result<Response<GetWatcherEventsResponse>, Status> {
        todo()
    }
    pub async fn remove_watcher(
        &self,
        _req: Request<RemoveWatcherRequest>,
    ) -> Result<Response<RemoveWatcherResponse>, Status> {
        todo()
    }
}

/// hangar's `Files` service.
pub struct FilesService {
    #[allow(dead_code)]
    core: Arc<Core>,
}

impl FilesService {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core }
    }
}

#[tonic::async_trait]
impl Files for FilesService {
    type FollowStream = RpcStream<FollowResponse>;
    type WatchDirStream = RpcStream<WatchResponse>;

    async fn follow(&self, _req: Request<FollowRequest>) -> Result<Response<Self::FollowStream>, Status> {
        todo()
    }
    async fn watch_dir(&self, _req: Request<WatchDirRequest>) -> Result<Response<Self::WatchDirStream>, Status> {
        todo()
    }
}
