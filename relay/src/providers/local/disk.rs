//! A local sandbox's own filesystem: its files (work directory and home, `layout.rs`) are on an
//! ext4 image (`work.img` beside their mount point) of the sandbox's `disk_mib`, loop-mounted on
//! the host. A full disk then fails the sandbox's own writes (ENOSPC), never the state directory's
//! filesystem, which holds the relay's database. It is mounted on the host, not only in the
//! sandbox's namespace, because the relay resolves and checks the sandbox's paths there.
//!
//! The image's blocks are allocated when it is made (`fallocate`, metadata only on ext4 and xfs:
//! milliseconds), so a sandbox's size is a reservation, not a bound others may use up first: a
//! sandbox the host has no room for is refused at creation (507), and a full host never fails a
//! write inside an image. Deleted blocks stay the image's (no `discard`).
use std::{
    ffi::OsStr,
    io,
    os::unix::fs::{MetadataExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
    process::Stdio,
};

use super::isolation::{find_on_path, Support as IsolationSupport, DEFAULT_PATH};

/// A new sandbox's size when neither it nor the relay (`--local-disk-mib`) says.
pub const DEFAULT_MIB: u64 = 2048;
/// The smallest and largest `disk_mib`: ext4's metadata and journal take a few MiB, and 1 TiB
/// is far past any sandbox's need (a typo's guard).
pub const MIN_MIB: u64 = 64;
pub const MAX_MIB: u64 = 1 << 20;

/// Whether this relay gives local sandboxes filesystems of their own, found once at start.
#[derive(Debug, Clone)]
pub enum Support {
    /// It does: new sandboxes get an image of `default_mib` unless they ask otherwise.
    Images { mkfs: PathBuf, mount: PathBuf, default_mib: u64 },
    /// It does not, and why: new sandboxes' work directories are plain directories of the state
    /// directory's filesystem.
    Unavailable(String),
}

/// Images go with isolation: mounting needs what making namespaces needs (root, or
/// CAP_SYS_ADMIN), and an unisolated sandbox's commands could reach its image anyway.
pub fn detect(isolation: &IsolationSupport, default_mib: u64) -> Support {
    if let IsolationSupport::Unavailable(why) = isolation {
        return Support::Unavailable(format!("local sandboxes are not isolated here: {why}"));
    }
    let (Some(mkfs), Some(mount)) = (find_on_path("mkfs.ext4"), find_on_path("mount")) else {
        return Support::Unavailable("no mkfs.ext4 (e2fsprogs) or mount (util-linux) on PATH".into());
    };
    Support::Images { mkfs, mount, default_mib }
}

#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("making the work directory's image {path}: {source}")]
    Image { path: PathBuf, source: io::Error },
    #[error("the host has no room for the sandbox's {mib} MiB (its disk_mib): free some, or ask for less")]
    NoRoom { mib: u64 },
    #[error("running {tool}: {source}")]
    Spawn { tool: String, source: io::Error },
    #[error("{what}: {tool} failed ({status}): {stderr}")]
    Tool { tool: String, what: String, status: std::process::ExitStatus, stderr: String },
    #[error("unmounting the work directory {path}: {source}")]
    Unmount { path: PathBuf, source: io::Error },
    #[error("the work directory {0} is still a mount point after it was unmounted")]
    StillMounted(PathBuf),
}

/// What `unmount` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmount {
    /// Nothing was mounted there (a sandbox from before images, or one without).
    NotMounted,
    /// Unmounted at once.
    Clean,
    /// It was busy: detached now (`MNT_DETACH`), freed when its last user lets go.
    Detached,
}

/// Makes the image: a file of `mib` MiB, its blocks allocated, 0600, with an empty ext4 in it. A
/// failed attempt leaves no image.
pub async fn make(mkfs: &Path, image: &Path, mib: u64) -> Result<(), DiskError> {
    let bad = |source| DiskError::Image { path: image.to_path_buf(), source };
    let path = image.to_path_buf();
    // Allocating a large file's blocks takes a while on some filesystems: not on a runtime worker.
    let file = tokio::task::spawn_blocking(move || {
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)
    })
    .await
    .unwrap_or_else(|e| Err(io::Error::other(e)))
    .map_err(bad)?;
    let sized = tokio::task::spawn_blocking(move || reserve(&file, mib))
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)))
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOSPC) => DiskError::NoRoom { mib },
            _ => bad(e),
        });
    // No reserved blocks (`-m 0`): the sandbox's user is the only one writing. Allocated blocks
    // read as zeros, so what mkfs would zero (inode tables, journal) is zero already, and
    // discarding it is pointless: both skipped.
    let opts = ["-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard"].map(OsStr::new);
    let made = match sized {
        Ok(()) => {
            run(mkfs, "making the work directory's filesystem", &[&opts[..], &[image.as_os_str()]].concat()).await
        }
        Err(e) => Err(e),
    };
    if made.is_err() {
        let _ = std::fs::remove_file(image);
    }
    made
}

/// Allocates the image's `mib` MiB (unwritten extents: no data is written).
fn reserve(file: &std::fs::File, mib: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    let len = libc::off_t::try_from(mib * 1024 * 1024).map_err(io::Error::other)?;
    // SAFETY: fallocate(2) on an open file descriptor this function borrows.
    match unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Mounts the image on the work directory: no setuid programs or device files from it
/// (`nosuid,nodev`). No `discard`: what the sandbox deletes stays its own to write again.
pub async fn mount(mount: &Path, image: &Path, work: &Path) -> Result<(), DiskError> {
    let opts = ["-t", "ext4", "-o", "loop,nosuid,nodev", "--"].map(OsStr::new);
    run(mount, "mounting the work directory", &[&opts[..], &[image.as_os_str(), work.as_os_str()]].concat()).await
}

/// Whether `work` is a mount point: a directory on another device than its parent. (Only the
/// relay mounts there, and an image is never the state directory's own device.)
pub fn is_mounted(work: &Path) -> bool {
    let (Ok(w), Some(Ok(p))) = (std::fs::metadata(work), work.parent().map(std::fs::metadata)) else {
        return false;
    };
    w.dev() != p.dev()
}

/// Unmounts the work directory if something is mounted there; busy, it is detached instead.
/// Afterwards `work` is a plain directory again, or this is an error.
pub async fn unmount(work: &Path) -> Result<Unmount, DiskError> {
    if !is_mounted(work) {
        return Ok(Unmount::NotMounted);
    }
    let path = work.to_path_buf();
    // umount2 writes the filesystem's dirty pages back first, which may take a while.
    let done = tokio::task::spawn_blocking(move || {
        use std::os::unix::ffi::OsStrExt as _;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
        // SAFETY: umount2(2) on a NUL-terminated path this function owns.
        if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
            return Ok(Unmount::Clean);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(e);
        }
        // SAFETY: as above.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
            return Ok(Unmount::Detached);
        }
        Err(io::Error::last_os_error())
    })
    .await
    .map_err(|e| DiskError::Unmount { path: work.to_path_buf(), source: io::Error::other(e) })?
    .map_err(|source| DiskError::Unmount { path: work.to_path_buf(), source })?;
    if is_mounted(work) {
        return Err(DiskError::StillMounted(work.to_path_buf()));
    }
    Ok(done)
}

/// Runs one of the tools with a fixed environment, its errors in English for the message.
async fn run(tool: &Path, what: &str, args: &[&OsStr]) -> Result<(), DiskError> {
    let name = tool.display().to_string();
    let out = tokio::process::Command::new(tool)
        .args(args)
        .env_clear()
        .env("PATH", DEFAULT_PATH)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|source| DiskError::Spawn { tool: name.clone(), source })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr).trim().chars().take(1000).collect();
    Err(DiskError::Tool { tool: name, what: what.to_string(), status: out.status, stderr })
}
