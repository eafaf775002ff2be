//! Files: entry info, path resolution for a user, file operations.
//!
//! Invariant: builds E2B's `EntryInfo` data type but knows nothing of RPCs or HTTP.
use std::{io, os::unix::fs::MetadataExt, path::Path};

use hangar_proto::filesystem::{EntryInfo, FileType};

/// What E2B's `EntryInfo` says of `path`, without following a final symlink.
/// (Baseline: owner, group, permissions string, symlink target and metadata are filled in by the
/// files work.)
pub fn entry_info(path: &Path) -> io::Result<EntryInfo> {
    let md = std::fs::symlink_metadata(path)?;
    let ft = md.file_type();
    let kind = if ft.is_symlink() {
        FileType::Symlink
    } else if ft.is_dir() {
        FileType::Directory
    } else {
        FileType::File
    };
    Ok(EntryInfo {
        name: path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        r#type: kind as i32,
        path: path.to_string_lossy().into_owned(),
        size: md.size() as i64,
        mode: md.mode() & 0o7777,
        modified_time: md.modified().ok().map(Into::into),
        ..Default::default()
    })
}
