//! `filesystem.Filesystem`'s unary operations: Stat, MakeDir, Move, ListDir, Remove.
use std::sync::Arc;

use hangar_proto::filesystem::{
    ListDirRequest, ListDirResponse, MakeDirRequest, MakeDirResponse, MoveRequest, MoveResponse, RemoveRequest,
    RemoveResponse, StatRequest, StatResponse,
};
use tonic::{Request, Response, Status};

use super::Core;

pub struct FileOps {
    #[allow(dead_code)]
    core: Arc<Core>,
}

fn todo<T>() -> Result<T, Status> {
    Err(Status::unimplemented("not implemented yet"))
}

impl FileOps {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core }
    }
    pub async fn stat(&self, _req: Request<StatRequest>) -> Result<Response<StatResponse>, Status> {
        todo()
    }
    pub async fn make_dir(&self, _req: Request<MakeDirRequest>) -> Result<Response<MakeDirResponse>, Status> {
        todo()
    }
    pub async fn move_entry(&self, _req: Request<MoveRequest>) -> Result<Response<MoveResponse>, Status> {
        todo()
    }
    pub async fn list_dir(&self, _req: Request<ListDirRequest>) -> Result<Response<ListDirResponse>, Status> {
        todo()
    }
    pub async fn remove(&self, _req: Request<RemoveRequest>) -> Result<Response<RemoveResponse>, Status> {
        todo()
    }
}
