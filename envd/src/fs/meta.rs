//! User metadata on files: extended attributes under `user.e2b.`, the prefix stripped (E2B's
//! convention, so metadata set by either daemon or by `setfattr` reads the same).
use std::{collections::HashMap, fs::File, path::Path};

use xattr::FileExt as _;

use super::{FsError, FsResult};

pub const PREFIX: &str = "user.e2b.";
/// Linux caps an xattr name at 255 bytes, prefix included.
pub const MAX_KEY_BYTES: usize = 255 - PREFIX.len();
/// ext4 keeps all of an inode's xattrs in one 4 KiB block; past this a write would fail late.
pub const MAX_TOTAL_BYTES: usize = 4096;

/// The metadata on `path` (not following a final symlink). Unsupported file systems, unreadable
/// attributes and non-UTF-8 entries read as no metadata: a listing never fails because of them.
pub fn read(path: &Path) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let Ok(names) = xattr::list(path) else { return out };
    for name in names {
        let Some(key) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else { continue };
        if let Ok(Some(value)) = xattr::get(path, &name) {
            if let Ok(value) = String::from_utf8(value) {
                out.insert(key.to_string(), value);
            }
        }
    }
    out
}

/// Checks keys and values before anything is written: non-empty printable-ASCII keys of at most
/// `MAX_KEY_BYTES`, printable-ASCII values, `MAX_TOTAL_BYTES` in all.
pub fn validate(metadata: &HashMap<String, String>) -> FsResult<()> {
    let printable = |s: &str| s.bytes().all(|b| (0x20..=0x7e).contains(&b));
    let mut total = 0;
    for (k, v) in metadata {
        if k.is_empty() {
            return Err(FsError::BadMetadata("a key must not be empty".into()));
        }
        if k.len() > MAX_KEY_BYTES {
            return Err(FsError::BadMetadata(format!("key {k:?} is longer than {MAX_KEY_BYTES} bytes")));
        }
        if !printable(k) {
            return Err(FsError::BadMetadata(format!("key {k:?} is not printable ASCII")));
        }
        if !printable(v) {
            return Err(FsError::BadMetadata(format!("the value of {k:?} is not printable ASCII")));
        }
        total += PREFIX.len() + k.len() + v.len();
    }
    if total > MAX_TOTAL_BYTES {
        return Err(FsError::BadMetadata(format!("{total} bytes of metadata, more than {MAX_TOTAL_BYTES}")));
    }
    Ok(())
}

/// Makes `metadata` the file's whole metadata: keys not in it are removed, so overwriting a file
/// (which keeps its xattrs) never leaves stale metadata behind.
pub fn replace(file: &File, path: &Path, metadata: &HashMap<String, String>) -> FsResult<()> {
    let unsupported = |e: &std::io::Error| matches!(e.raw_os_error(), Some(libc::ENOTSUP));
    match file.list_xattr() {
        Ok(names) => {
            for name in names {
                let Some(key) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else { continue };
                if !metadata.contains_key(key) {
                    if let Err(e) = file.remove_xattr(&name) {
                        if e.raw_os_error() != Some(libc::ENODATA) {
                            return Err(FsError::io("removing metadata from", path, e));
                        }
                    }
                }
            }
        }
        // Nothing can be stored there, so nothing stale either.
        Err(e) if unsupported(&e) && metadata.is_empty() => return Ok(()),
        Err(e) if unsupported(&e) => return Err(FsError::MetadataUnsupported(path.to_path_buf())),
        Err(e) => return Err(FsError::io("listing metadata of", path, e)),
    }
    for (k, v) in metadata {
        file.set_xattr(format!("{PREFIX}{k}"), v.as_bytes()).map_err(|e| {
            if unsupported(&e) {
                FsError::MetadataUnsupported(path.to_path_buf())
            } else {
                FsError::io("writing metadata to", path, e)
            }
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        let m = |k: &str, v: &str| HashMap::from([(k.to_string(), v.to_string())]);
        assert!(validate(&m("author", "mish")).is_ok());
        assert!(validate(&m("", "x")).is_err());
        assert!(validate(&m("k", "bad\nvalue")).is_err());
        assert!(validate(&m("ключ", "x")).is_err());
        assert!(validate(&m(&"k".repeat(MAX_KEY_BYTES + 1), "x")).is_err());
        assert!(validate(&m("k", &"v".repeat(MAX_TOTAL_BYTES))).is_err());
    }
}
