//! What a file operation can fail with, classified so each transport can give its own code.
use std::{io, path::PathBuf};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum FsError {
    #[error("a path is required")]
    EmptyPath,
    #[error("path {0:?} contains a NUL byte")]
    NulInPath(String),
    #[error("no such file or directory: {}", .0.display())]
    NotFound(PathBuf),
    /// A file (or something else) where a directory is wanted, as the path or one of its parents.
    #[error("not a directory: {}", .0.display())]
    NotADirectory(PathBuf),
    /// A directory where a file is wanted (download, upload, moving a file onto a directory).
    #[error("is a directory: {}", .0.display())]
    IsADirectory(PathBuf),
    /// Neither a regular file nor a directory (a FIFO, socket or device) where a file is wanted.
    #[error("not a regular file: {}", .0.display())]
    NotARegularFile(PathBuf),
    #[error("directory already exists: {}", .0.display())]
    DirExists(PathBuf),
    #[error("path already exists and is not a directory: {}", .0.display())]
    ExistsNotDir(PathBuf),
    #[error("destination is a non-empty directory: {}", .0.display())]
    NotEmpty(PathBuf),
    #[error("permission denied: {}", .0.display())]
    PermissionDenied(PathBuf),
    #[error("read-only file system: {}", .0.display())]
    ReadOnly(PathBuf),
    #[error("no space left on device: {}", .0.display())]
    NoSpace(PathBuf),
    #[error("too many levels of symbolic links (a cycle?): {}", .0.display())]
    SymlinkLoop(PathBuf),
    #[error("cannot move {} across file systems", .0.display())]
    CrossDevice(PathBuf),
    #[error("cannot move {} into itself", .0.display())]
    IntoItself(PathBuf),
    #[error("refusing to remove /")]
    RemoveRoot,
    #[error("invalid metadata: {0}")]
    BadMetadata(String),
    #[error("the file system does not support metadata (extended attributes): {}", .0.display())]
    MetadataUnsupported(PathBuf),
    #[error("{op} {}: {source}", .path.display())]
    Io { op: &'static str, path: PathBuf, source: io::Error },
}

impl FsError {
    /// Classifies an I/O error by its errno; what is not a known client-side cause stays `Io`.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> FsError {
        let path = path.into();
        match source.raw_os_error() {
            Some(libc::ENOENT) => FsError::NotFound(path),
            Some(libc::ENOTDIR) => FsError::NotADirectory(path),
            Some(libc::EISDIR) => FsError::IsADirectory(path),
            Some(libc::EACCES | libc::EPERM) => FsError::PermissionDenied(path),
            Some(libc::EROFS) => FsError::ReadOnly(path),
            Some(libc::ENOSPC | libc::EDQUOT) => FsError::NoSpace(path),
            Some(libc::ELOOP) => FsError::SymlinkLoop(path),
            Some(libc::ENOTEMPTY | libc::EEXIST) => FsError::NotEmpty(path),
            Some(libc::EXDEV) => FsError::CrossDevice(path),
            _ => FsError::Io { op, path, source },
        }
    }
}

pub type FsResult<T> = Result<T, FsError>;
