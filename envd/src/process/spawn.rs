//! Forking a process: its own session and process group, pipes or a PTY, the user it runs as.
use std::{
    io,
    os::{
        fd::{AsRawFd, OwnedFd, RawFd},
        unix::process::CommandExt,
    },
    path::PathBuf,
    process::{Command, Stdio},
};

use nix::pty::{openpty, Winsize};

use crate::users::User;

/// Everything needed to fork one process; already validated.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    pub cmd: String,
    pub args: Vec<String>,
    /// The complete environment (nothing is inherited).
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub user: User,
    /// Switch to `user` in the child (the daemon is root and `user` is not itself).
    pub switch_user: bool,
    /// `(cols, rows)` for a PTY.
    pub pty: Option<(u16, u16)>,
    /// An open stdin pipe (otherwise /dev/null). Ignored for a PTY.
    pub stdin: bool,
}

/// The parent's ends of a new process's I/O.
#[derive(Debug)]
pub struct Spawned {
    pub pid: i32,
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
    pub pty_master: Option<OwnedFd>,
}

/// Forks `spec`. With `join_cgroup` (an open `cgroup.procs`), the child joins that cgroup before
/// exec, so everything it will ever start is in it from the first instruction on.
pub fn spawn(spec: &SpawnSpec, join_cgroup: Option<RawFd>) -> io::Result<Spawned> {
    let mut cmd = Command::new(&spec.cmd);
    cmd.args(&spec.args).env_clear().envs(spec.env.iter().cloned()).current_dir(&spec.cwd);

    let mut pty_master = None;
    if let Some((cols, rows)) = spec.pty {
        let ws = Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        let pair = openpty(Some(&ws), None).map_err(io::Error::from)?;
        set_cloexec(&pair.master)?;
        cmd.stdin(Stdio::from(pair.slave.try_clone()?))
            .stdout(Stdio::from(pair.slave.try_clone()?))
            .stderr(Stdio::from(pair.slave));
        pty_master = Some(pair.master);
    } else {
        cmd.stdin(if spec.stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    }

    let is_pty = spec.pty.is_some();
    let ids = spec.switch_user.then(|| {
        let groups: Vec<libc::gid_t> = spec.user.groups.clone();
        (spec.user.uid, spec.user.gid, groups)
    });
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe system
    // calls; everything it needs was computed before the fork.
    unsafe {
        cmd.pre_exec(move || {
            mark_inherited_fds_cloexec();
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if is_pty && libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            // Before switching user: moving a process needs the daemon's rights. "0" means
            // the writer itself.
            if let Some(fd) = join_cgroup {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(io::Error::last_os_error());
                }
            }
            if let Some((uid, gid, groups)) = &ids {
                if libc::setgroups(groups.len() as _, groups.as_ptr()) < 0
                    || libc::setgid(*gid) < 0
                    || libc::setuid(*uid) < 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }

    let mut child = cmd.spawn()?;
    // Dropping `cmd` closes the parent's copies of the PTY slave, so the master sees EOF (EIO)
    // once the process and its children have closed theirs.
    drop(cmd);
    let pid = child.id() as i32;
    Ok(Spawned {
        pid,
        stdin: child.stdin.take().map(OwnedFd::from),
        stdout: child.stdout.take().map(OwnedFd::from),
        stderr: child.stderr.take().map(OwnedFd::from),
        pty_master,
    })
    // `child` is dropped without waiting: the reaper owns every wait.
}

/// The daemon may have inherited descriptors without close-on-exec (from whoever started it);
/// a sandboxed process gets only its stdio. Runs between fork and exec: system calls only.
/// Marking rather than closing keeps std's own exec-error pipe working.
unsafe fn mark_inherited_fds_cloexec() {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets flags on this process's fds.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    if rc != 0 {
        // Kernels before 5.11: walk a bounded range instead.
        for fd in 3..4096 {
            // SAFETY: fcntl on a possibly-closed fd only fails with EBADF.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
    }
}

fn set_cloexec(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fcntl on a valid, owned fd.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFD);
        if flags < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, flags | libc::FD_CLOEXEC) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Sets a PTY's window size.
pub fn resize(master: i32, cols: u16, rows: u16) -> io::Result<()> {
    let ws = libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCSWINSZ reads a winsize from a valid pointer.
    if unsafe { libc::ioctl(master, libc::TIOCSWINSZ, &ws) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
