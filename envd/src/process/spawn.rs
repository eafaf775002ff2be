//! Forking a process: its own session and process group, pipes or a PTY, the user it runs as,
//! and its cgroup.
//!
//! The fork and what the child does before exec are written here rather than left to std's
//! `Command`, for one reason: a process that joins its cgroup by writing `cgroup.procs` makes the
//! kernel wait for an RCU grace period (the cgroup threadgroup lock taken for writing), which
//! cost 10 to 15 ms of every start on the machines measured, before the command ran at all.
//! `clone3` with `CLONE_INTO_CGROUP` (Linux 5.7) creates the child in its cgroup instead, at the
//! cost of a fork. Where `clone3` is refused (Docker's default seccomp profile answers ENOSYS),
//! the child is forked as before and writes `cgroup.procs` itself.
//!
//! Invariant: between fork and exec the child makes system calls only, on memory prepared
//! before the fork: no allocation, no lock, no glibc call that consults thread state (after a
//! raw `clone3`, glibc still believes the child has the daemon's threads).
use std::{
    ffi::{CString, OsStr},
    io,
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
        unix::ffi::OsStrExt,
    },
    path::PathBuf,
    sync::atomic::{AtomicBool, Ordering},
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

/// The cgroup a new process starts in: its directory (for `clone3`) and its `cgroup.procs`
/// (for a child that must join by writing it).
#[derive(Debug, Clone, Copy)]
pub struct Cgroup {
    pub dir: RawFd,
    pub procs: RawFd,
}

/// `clone3` was refused once (a seccomp profile, a kernel before 5.7): every later start forks.
static NO_CLONE3: AtomicBool = AtomicBool::new(false);

/// From now on children join their cgroups after fork (`--cgroups join`).
pub fn join_after_fork() {
    NO_CLONE3.store(true, Ordering::Relaxed);
}

/// Where the command is looked for when the environment has no `PATH` (glibc's `execvp`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Forks `spec` and execs its command. With a `cgroup`, the process is in it from its first
/// instruction on, so everything it will ever start is too. The command is looked up in the
/// `PATH` of `spec.env`, as `execvp` does. Errors: what failed before the fork, or the child's
/// own error before exec (a `cwd` that does not exist, a command not found or not executable,
/// a refused user switch), with the child reaped.
pub fn spawn(spec: &SpawnSpec, cgroup: Option<Cgroup>) -> io::Result<Spawned> {
    let exec = Exec::prepare(spec)?;

    // Each stdio: the fd the child gets, and the parent's end.
    let (child_fds, parent): ([OwnedFd; 3], Spawned) = match spec.pty {
        Some((cols, rows)) => {
            let ws = Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
            let pair = openpty(Some(&ws), None).map_err(io::Error::from)?;
            set_cloexec(&pair.master)?;
            // Clones are above the standard fds and close-on-exec (`OwnedFd::try_clone`).
            let fds = [pair.slave.try_clone()?, pair.slave.try_clone()?, pair.slave.try_clone()?];
            (fds, Spawned { pid: 0, stdin: None, stdout: None, stderr: None, pty_master: Some(pair.master) })
        }
        None => {
            let (stdin_child, stdin_parent) = if spec.stdin {
                let (r, w) = pipe()?;
                (r, Some(w))
            } else {
                (dev_null()?, None)
            };
            let (out_r, out_w) = pipe()?;
            let (err_r, err_w) = pipe()?;
            let fds = [above_stdio(stdin_child)?, above_stdio(out_w)?, above_stdio(err_w)?];
            (fds, Spawned { pid: 0, stdin: stdin_parent, stdout: Some(out_r), stderr: Some(err_r), pty_master: None })
        }
    };
    // The child reports an error before exec here; exec closes it, so EOF means the exec.
    let (report_r, report_w) = pipe()?;
    let child = Child {
        exec: &exec,
        stdio: [child_fds[0].as_raw_fd(), child_fds[1].as_raw_fd(), child_fds[2].as_raw_fd()],
        report: report_w.as_raw_fd(),
        pty: spec.pty.is_some(),
        ids: spec.switch_user.then_some((spec.user.uid, spec.user.gid, spec.user.groups.as_slice())),
        join: None,
    };

    let pid = match cgroup {
        Some(cg) if !NO_CLONE3.load(Ordering::Relaxed) => match clone_into(cg.dir) {
            Ok(0) => child.run(),
            Ok(pid) => pid,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM | libc::E2BIG)) => {
                NO_CLONE3.store(true, Ordering::Relaxed);
                crate::events::Clone3Refused { error: &e }.emit();
                fork(Child { join: Some(cg.procs), ..child })?
            }
            Err(e) => return Err(e),
        },
        Some(cg) => fork(Child { join: Some(cg.procs), ..child })?,
        None => fork(child)?,
    };

    // The parent keeps only its own ends: the child's close here, so EOF reaches the readers.
    drop(child_fds);
    drop(report_w);
    if let Some(errno) = read_report(&report_r) {
        // The child exited without exec: reap it here, under the reaper's lock (reaper.rs).
        let mut status = 0;
        // SAFETY: waits for our own child, writing its status into a valid int.
        while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
            && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
        {}
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok(Spawned { pid, ..parent })
}

/// What exec needs, as C strings and pointer arrays made before the fork.
struct Exec {
    /// Each place the command may be, in `PATH` order (one when it names a path).
    candidates: Vec<CString>,
    cwd: CString,
    /// Owners of what `argv` and `envp` point into.
    _strings: Vec<CString>,
    /// NUL-terminated.
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

impl Exec {
    fn prepare(spec: &SpawnSpec) -> io::Result<Exec> {
        let c = |s: &[u8]| {
            CString::new(s).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a NUL byte in the command, an argument, the environment or the directory",
                )
            })
        };
        let candidates = if spec.cmd.contains('/') {
            vec![c(spec.cmd.as_bytes())?]
        } else if spec.cmd.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        } else {
            let path = spec.env.iter().find(|(k, _)| k == "PATH").map_or(DEFAULT_PATH, |(_, v)| v.as_str());
            path.split(':')
                .map(|dir| {
                    // An empty entry is the current directory, as execvp has it.
                    let dir = if dir.is_empty() { "." } else { dir };
                    c(format!("{}/{}", dir.trim_end_matches('/'), spec.cmd).as_bytes())
                })
                .collect::<io::Result<_>>()?
        };
        let mut strings = vec![c(spec.cmd.as_bytes())?];
        for a in &spec.args {
            strings.push(c(a.as_bytes())?);
        }
        let argc = strings.len();
        for (k, v) in &spec.env {
            strings.push(c(format!("{k}={v}").as_bytes())?);
        }
        // The CStrings' buffers do not move when `strings` is moved into the struct.
        let ptrs = |s: &[CString]| s.iter().map(|c| c.as_ptr()).chain([std::ptr::null()]).collect::<Vec<_>>();
        let (argv, envp) = (ptrs(&strings[..argc]), ptrs(&strings[argc..]));
        let cwd = c(OsStr::as_bytes(spec.cwd.as_os_str()))?;
        Ok(Exec { candidates, cwd, _strings: strings, argv, envp })
    }
}

/// The child's side, between fork and exec.
#[derive(Clone, Copy)]
struct Child<'a> {
    exec: &'a Exec,
    stdio: [RawFd; 3],
    report: RawFd,
    pty: bool,
    ids: Option<(u32, u32, &'a [u32])>,
    /// `cgroup.procs` to write when the child was not created in its cgroup.
    join: Option<RawFd>,
}

impl Child<'_> {
    /// Sets the child up and execs; reports the first error on `report` and exits otherwise.
    fn run(self) -> ! {
        let errno = match self.setup() {
            Ok(()) => self.exec(),
            Err(errno) => errno,
        };
        let bytes = errno.to_ne_bytes();
        // SAFETY: system calls on fds and memory this process owns; exit_group never returns.
        unsafe {
            libc::write(self.report, bytes.as_ptr().cast(), bytes.len());
            libc::syscall(libc::SYS_exit_group, 127);
        }
        unreachable!("exit_group returned")
    }

    fn setup(&self) -> Result<(), i32> {
        let check = |rc: libc::c_long| if rc < 0 { Err(errno()) } else { Ok(()) };
        // SAFETY: system calls only, on fds and memory prepared before the fork.
        unsafe {
            // Each source is above 2 (`above_stdio`), so no dup overwrites a later source.
            for (target, &fd) in self.stdio.iter().enumerate() {
                check(libc::syscall(libc::SYS_dup3, fd, target, 0))?;
            }
            check(libc::syscall(libc::SYS_chdir, self.exec.cwd.as_ptr()))?;
            // The daemon ignores SIGPIPE (Rust's runtime does), and an ignored signal stays
            // ignored across exec; nor may the child inherit a blocked signal.
            let dfl = KernelSigaction { handler: libc::SIG_DFL, flags: 0, restorer: 0, mask: 0 };
            check(libc::syscall(libc::SYS_rt_sigaction, libc::SIGPIPE, &dfl, std::ptr::null::<KernelSigaction>(), 8))?;
            let empty: u64 = 0;
            check(libc::syscall(libc::SYS_rt_sigprocmask, libc::SIG_SETMASK, &empty, std::ptr::null::<u64>(), 8))?;
            mark_inherited_fds_cloexec();
            check(libc::syscall(libc::SYS_setsid))?;
            if self.pty {
                check(libc::syscall(libc::SYS_ioctl, 0, libc::TIOCSCTTY, 0))?;
            }
            // Before switching user: moving a process needs the daemon's rights. "0" means the
            // writer itself.
            if let Some(fd) = self.join {
                if libc::syscall(libc::SYS_write, fd, b"0".as_ptr(), 1) != 1 {
                    return Err(errno());
                }
            }
            if let Some((uid, gid, groups)) = self.ids {
                check(libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()))?;
                check(libc::syscall(libc::SYS_setgid, gid))?;
                check(libc::syscall(libc::SYS_setuid, uid))?;
            }
        }
        Ok(())
    }

    /// Tries each candidate as `execvp` does; returns the error to report when none ran.
    fn exec(&self) -> i32 {
        let mut found = libc::ENOENT;
        for path in &self.exec.candidates {
            // SAFETY: NUL-terminated arrays of pointers into CStrings that outlive the call.
            unsafe {
                libc::syscall(libc::SYS_execve, path.as_ptr(), self.exec.argv.as_ptr(), self.exec.envp.as_ptr());
            }
            match errno() {
                // Not here: the next place on PATH.
                libc::ENOENT | libc::ENOTDIR => {}
                // Here but not runnable: said unless a later place has it.
                libc::EACCES => found = libc::EACCES,
                e => return e,
            }
        }
        found
    }
}
/// `struct sigaction` as the `rt_sigaction` system call takes it on x86_64 and aarch64 (not
/// glibc's, whose mask comes first and is 128 bytes).
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// `clone3(CLONE_INTO_CGROUP)`: like fork, the child in the cgroup `dir`. Returns 0 in the child.
fn clone_into(dir: RawFd) -> io::Result<i32> {
    #[repr(C)]
    #[derive(Default)]
    struct CloneArgs {
        flags: u64,
        pidfd: u64,
        child_tid: u64,
        parent_tid: u64,
        exit_signal: u64,
        stack: u64,
        stack_size: u64,
        tls: u64,
        set_tid: u64,
        set_tid_size: u64,
        cgroup: u64,
    }
    const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: dir as u64,
        ..Default::default()
    };
    // SAFETY: without CLONE_VM or a stack the child runs on a copy of this thread's stack, as
    // after fork; it only runs `Child::run`, which makes system calls and never returns.
    let rc = unsafe { libc::syscall(libc::SYS_clone3, &args as *const CloneArgs, std::mem::size_of::<CloneArgs>()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc as i32)
}

/// fork(2): the child runs `child`.
fn fork(child: Child<'_>) -> io::Result<i32> {
    // SAFETY: glibc's fork; the child only runs `Child::run`, which never returns.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => child.run(),
        pid => Ok(pid),
    }
}

/// The errno the child reported, if it reported one before exec.
fn read_report(report: &OwnedFd) -> Option<i32> {
    let mut buf = [0u8; 4];
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: reads into the unfilled part of a local buffer.
        let n = unsafe { libc::read(report.as_raw_fd(), buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        match n {
            0 => break,
            n if n > 0 => got += n as usize,
            _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            _ => break,
        }
    }
    (got == buf.len()).then(|| i32::from_ne_bytes(buf))
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// A pipe, both ends close-on-exec: `(read, write)`.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into a valid array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `fd`, or a close-on-exec copy of it above the standard fds when it is one of them (the
/// daemon was started with its own stdio closed), so the child's dups cannot collide.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    fd.try_clone()
}

fn dev_null() -> io::Result<OwnedFd> {
    Ok(std::fs::OpenOptions::new().read(true).write(true).open("/dev/null")?.into())
}

/// The daemon may have inherited descriptors without close-on-exec (from whoever started it);
/// a sandboxed process gets only its stdio. Runs between fork and exec: system calls only.
/// Marking rather than closing keeps the exec-error pipe working.
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
