//! Acting as a user on one thread: file operations run with the user's file-system uid, gid and
//! supplementary groups, so the kernel applies that user's permissions and new files and
//! directories are owned by them.
//!
//! Linux keeps credentials per thread; glibc's `setuid`/`setgroups` broadcast a change to every
//! thread of the process, which would switch the whole daemon. The raw `setfsuid`, `setfsgid`
//! and `setgroups` system calls change only the calling thread, so an operation runs on a
//! blocking-pool thread that switches, does its work and switches back (a guard restores even on
//! panic; if restoring ever failed the daemon aborts rather than let a later task on that thread
//! run with the wrong identity). Switching the fsuid from 0 drops the file-system capabilities
//! (`CAP_DAC_OVERRIDE`, `CAP_FOWNER`, ...) of that thread and switching back restores them.
use std::io;

use crate::{events, users::User};

/// Whom a thread acts as while switched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
}

impl Identity {
    /// The identity to switch to for `user`, or `None` when no switch is needed or possible
    /// (the daemon is that user already, or is not root and acts as itself).
    pub fn for_user(user: &User) -> Option<Identity> {
        let euid = unsafe { libc::geteuid() };
        if euid != 0 || user.uid == euid {
            return None;
        }
        let mut groups = user.groups.clone();
        if !groups.contains(&user.gid) {
            groups.push(user.gid);
        }
        Some(Identity { uid: user.uid, gid: user.gid, groups })
    }
}

/// Runs `f` on a blocking thread, acting as `who` (or as the daemon when `None`).
pub async fn run_as<T, F>(who: Option<Identity>, f: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let task = tokio::task::spawn_blocking(move || -> io::Result<T> {
        let _guard = match &who {
            Some(id) => Some(Switched::to(id)?),
            None => None,
        };
        Ok(f())
    });
    match task.await {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(io::Error::other(e)),
    }
}

/// Runs `f` on the calling thread acting as `who` (or as the daemon when `None`), switching
/// back before returning. Only for short synchronous work with no await inside (opening a file
/// for a follow): the identity belongs to the thread for exactly the call.
pub fn as_identity<T>(who: Option<&Identity>, f: impl FnOnce() -> T) -> io::Result<T> {
    let _guard = match who {
        Some(id) => Some(Switched::to(id)?),
        None => None,
    };
    Ok(f())
}

/// The thread's own credentials, put back on drop.
struct Switched {
    fsuid: libc::uid_t,
    fsgid: libc::gid_t,
    groups: Vec<libc::gid_t>,
}

impl Switched {
    fn to(id: &Identity) -> io::Result<Switched> {
        let saved = Switched { fsuid: set_fsuid(u32::MAX), fsgid: set_fsgid(u32::MAX), groups: thread_groups()? };
        set_thread_groups(&id.groups)?;
        // From here on, dropping `saved` restores whatever was already switched.
        set_fsgid(id.gid);
        set_fsuid(id.uid);
        if set_fsgid(u32::MAX) != id.gid || set_fsuid(u32::MAX) != id.uid {
            drop(saved);
            return Err(io::Error::other(format!("could not switch this thread to uid {} gid {}", id.uid, id.gid)));
        }
        Ok(saved)
    }
}

impl Drop for Switched {
    fn drop(&mut self) {
        // fsuid first: going back to 0 restores the capabilities needed for the rest.
        set_fsuid(self.fsuid);
        set_fsgid(self.fsgid);
        let groups_ok = set_thread_groups(&self.groups).is_ok();
        if !groups_ok || set_fsuid(u32::MAX) != self.fsuid || set_fsgid(u32::MAX) != self.fsgid {
            events::CredentialsNotRestored { fsuid: self.fsuid, fsgid: self.fsgid }.emit();
            std::process::abort();
        }
    }
}

/// `setfsuid(2)` for this thread only; returns the previous fsuid. `u32::MAX` (-1) is never a
/// valid id, so it only reads the current one.
fn set_fsuid(uid: libc::uid_t) -> libc::uid_t {
    (unsafe { libc::syscall(libc::SYS_setfsuid, uid as libc::c_long) }) as libc::uid_t
}

fn set_fsgid(gid: libc::gid_t) -> libc::gid_t {
    (unsafe { libc::syscall(libc::SYS_setfsgid, gid as libc::c_long) }) as libc::gid_t
}

fn thread_groups() -> io::Result<Vec<libc::gid_t>> {
    let n = unsafe { libc::syscall(libc::SYS_getgroups, 0 as libc::c_long, std::ptr::null_mut::<libc::gid_t>()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut groups = vec![0 as libc::gid_t; n as usize];
    let got = unsafe { libc::syscall(libc::SYS_getgroups, n, groups.as_mut_ptr()) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    groups.truncate(got as usize);
    Ok(groups)
}

fn set_thread_groups(groups: &[libc::gid_t]) -> io::Result<()> {
    let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len() as libc::c_long, groups.as_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_the_fsuid_changes_nothing() {
        let before = set_fsuid(u32::MAX);
        assert_eq!(set_fsuid(u32::MAX), before);
        assert_eq!(before, unsafe { libc::geteuid() });
    }

    /// As root, a switched thread writes as the user and other threads stay root.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn switches_one_thread_and_restores_it() {
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let id = Identity { uid: 65534, gid: 65534, groups: vec![65534] };
        let (uid, gid) = run_as(Some(id), || (set_fsuid(u32::MAX), set_fsgid(u32::MAX))).await.unwrap();
        assert_eq!((uid, gid), (65534, 65534));
        assert_eq!(set_fsuid(u32::MAX), 0, "this thread was never switched");
        // Every blocking thread is root again afterwards.
        for _ in 0..8 {
            let uid = run_as(None, || set_fsuid(u32::MAX)).await.unwrap();
            assert_eq!(uid, 0);
        }
        let dir = std::env::temp_dir().join(format!("hangar-creds-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        let probe = dir.clone();
        let nobody = Identity { uid: 65534, gid: 65534, groups: vec![] };
        let denied = run_as(Some(nobody), move || std::fs::read_dir(&probe).map(|_| ())).await.unwrap();
        let root_reads = std::fs::read_dir(&dir).is_ok();
        std::fs::remove_dir(&dir).unwrap();
        assert_eq!(denied.map_err(|e| e.kind()), Err(io::ErrorKind::PermissionDenied));
        assert!(root_reads);
    }
}
