//! `filesystem.Filesystem`'s unary operations: Stat, MakeDir, Move, ListDir, Remove. Each runs
//! as the calling user (see `fs::creds`), on a blocking thread.
use std::{path::PathBuf, sync::Arc};

use hangar_proto::filesystem::{
    ListDirRequest, ListDirResponse, MakeDirRequest, MakeDirResponse, MoveRequest, MoveResponse, RemoveRequest,
    RemoveResponse, StatRequest, StatResponse,
};
use tonic::{Request, Response, Status};

use super::{context, fail, resolve_path, CallContext, Core};
use crate::{
    error::RpcError,
    fs::{self, FsError, FsResult, Identity},
    settings::Settings,
    users::User,
};

impl From<FsError> for RpcError {
    fn from(e: FsError) -> Self {
        let msg = e.to_string();
        match e {
            FsError::NotFound(_) => RpcError::not_found(msg),
            FsError::DirExists(_) | FsError::NotEmpty(_) => RpcError::already_exists(msg),
            FsError::PermissionDenied(_) => RpcError::permission_denied(msg),
            FsError::NoSpace(_) => RpcError::resource_exhausted(msg),
            FsError::ReadOnly(_) | FsError::CrossDevice(_) | FsError::MetadataUnsupported(_) => {
                RpcError::failed_precondition(msg)
            }
            FsError::EmptyPath
            | FsError::NulInPath(_)
            | FsError::NotADirectory(_)
            | FsError::IsADirectory(_)
            | FsError::NotARegularFile(_)
            | FsError::ExistsNotDir(_)
            | FsError::IntoItself(_)
            | FsError::SymlinkLoop(_)
            | FsError::RemoveRoot
            | FsError::BadMetadata(_) => RpcError::invalid_argument(msg),
            FsError::Io { .. } => RpcError::internal(msg),
        }
    }
}

/// A client's path for `user`: `~` and relative paths against the default workdir or the home,
/// `.` and `..` removed.
pub(crate) fn user_path(settings: &Settings, user: &User, p: &str) -> FsResult<PathBuf> {
    if p.is_empty() {
        return Err(FsError::EmptyPath);
    }
    if p.contains('\0') {
        return Err(FsError::NulInPath(p.replace('\0', "\\0")));
    }
    let workdir = settings.get().workdir;
    Ok(fs::clean(&resolve_path(p, user, workdir.as_deref())))
}

/// Runs a blocking file operation as the call's user.
pub(crate) async fn as_caller<T: Send + 'static>(
    ctx: &CallContext,
    op: impl FnOnce() -> FsResult<T> + Send + 'static,
) -> Result<T, RpcError> {
    match fs::run_as(Identity::for_user(&ctx.user), op).await {
        Ok(r) => r.map_err(RpcError::from),
        Err(e) => Err(RpcError::internal(format!("acting as {}: {e}", ctx.user.name))),
    }
}

pub struct FileOps {
    core: Arc<Core>,
}

impl FileOps {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core }
    }

    async fn call<Req, T: Send + 'static>(
        &self,
        req: &Request<Req>,
        paths: &[&str],
        op: impl FnOnce(Vec<PathBuf>) -> FsResult<T> + Send + 'static,
    ) -> Result<T, RpcError> {
        let ctx = context(req)?;
        let paths = paths.iter().map(|p| user_path(&self.core.settings, &ctx.user, p)).collect::<FsResult<Vec<_>>>()?;
        as_caller(&ctx, move || op(paths)).await
    }

    pub async fn stat(&self, req: Request<StatRequest>) -> Result<Response<StatResponse>, Status> {
        let path = req.get_ref().path.clone();
        let entry = self.call(&req, &[&path], |p| fs::ops::stat(&p[0])).await.map_err(|e| fail("Stat", e))?;
        Ok(Response::new(StatResponse { entry: Some(entry) }))
    }

    pub async fn make_dir(&self, req: Request<MakeDirRequest>) -> Result<Response<MakeDirResponse>, Status> {
        let path = req.get_ref().path.clone();
        let entry = self.call(&req, &[&path], |p| fs::ops::make_dir(&p[0])).await.map_err(|e| fail("MakeDir", e))?;
        Ok(Response::new(MakeDirResponse { entry: Some(entry) }))
    }

    pub async fn move_entry(&self, req: Request<MoveRequest>) -> Result<Response<MoveResponse>, Status> {
        let MoveRequest { source, destination } = req.get_ref().clone();
        let entry = self
            .call(&req, &[&source, &destination], |p| fs::ops::rename(&p[0], &p[1]))
            .await
            .map_err(|e| fail("Move", e))?;
        Ok(Response::new(MoveResponse { entry: Some(entry) }))
    }

    pub async fn list_dir(&self, req: Request<ListDirRequest>) -> Result<Response<ListDirResponse>, Status> {
        let ListDirRequest { path, depth } = req.get_ref().clone();
        let entries = self
            .call(&req, &[&path], move |p| fs::ops::list_dir(&p[0], depth))
            .await
            .map_err(|e| fail("ListDir", e))?;
        Ok(Response::new(ListDirResponse { entries }))
    }

    pub async fn remove(&self, req: Request<RemoveRequest>) -> Result<Response<RemoveResponse>, Status> {
        let path = req.get_ref().path.clone();
        self.call(&req, &[&path], |p| fs::ops::remove(&p[0])).await.map_err(|e| fail("Remove", e))?;
        Ok(Response::new(RemoveResponse {}))
    }
}
