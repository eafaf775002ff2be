//! The one place that waits for children. The daemon is a child subreaper (and may be PID 1), so
//! orphans are reparented to it; `waitpid(-1)` reaps them all, and hands the status of the
//! processes it started to whoever registered them.
//!
//! Spawning and reaping share one lock: spawn waits on a child whose exec failed, and a
//! concurrent `waitpid(-1)` must not steal that status. It is an async lock: a start that waits
//! for another's fork and exec yields its worker thread instead of blocking it (with a blocking
//! lock, two starts at once held both of a 2-core machine's workers, and every stream stalled).
use std::{collections::HashMap, io, time::Duration};

use nix::{
    errno::Errno,
    sys::wait::{waitpid, WaitPidFlag, WaitStatus},
};
use tokio::{
    signal::unix::{signal, SignalKind},
    sync::{oneshot, Mutex},
};

use crate::events;

#[derive(Debug, Default)]
pub struct Reaper {
    waiters: Mutex<HashMap<i32, oneshot::Sender<WaitStatus>>>,
}

impl Reaper {
    /// Marks this process a child subreaper, so orphans of its children come back to it.
    pub fn become_subreaper() {
        // SAFETY: prctl with these arguments only sets a flag on this process.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        if rc != 0 {
            tracing::warn!(error = %io::Error::last_os_error(), "could not become a child subreaper");
        }
    }

    /// Runs `spawn` (which returns the new pid) on the blocking pool and registers the pid before
    /// any reaping can see it. On the pool, because a clone with `CLONE_VFORK` suspends its
    /// thread until the child has exec'd: on the daemon's one serving thread, every stream
    /// waited for every start queued before it (bench scenario 5: each line's p99 while 512
    /// streams opened went from 9 ms to 70 and more). Not cancel-safe: a caller dropped while
    /// the clone runs leaves the child unregistered, so callers run this to its end
    /// ([`super::Table::start`] does so on a task of its own).
    pub async fn spawn<T: Send + 'static>(
        &self,
        spawn: impl FnOnce() -> io::Result<(i32, T)> + Send + 'static,
    ) -> io::Result<(T, oneshot::Receiver<WaitStatus>)> {
        let mut waiters = self.waiters.lock().await;
        let (pid, value) = match tokio::task::spawn_blocking(spawn).await {
            Ok(spawned) => spawned?,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => return Err(io::Error::other(e)),
        };
        let (tx, rx) = oneshot::channel();
        waiters.insert(pid, tx);
        Ok((value, rx))
    }

    /// Reaps every child that has exited.
    pub async fn reap(&self) {
        let mut waiters = self.waiters.lock().await;
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "waitpid failed");
                    break;
                }
                Ok(status) => {
                    let Some(pid) = status.pid() else { continue };
                    match waiters.remove(&pid.as_raw()) {
                        Some(tx) => {
                            let _ = tx.send(status);
                        }
                        None => events::OrphanReaped { pid: pid.as_raw() }.emit(),
                    }
                }
            }
        }
    }

    /// Reaps on every SIGCHLD, and once a second in case a signal was coalesced away.
    pub async fn run(self: std::sync::Arc<Self>) -> io::Result<()> {
        let mut sigchld = signal(SignalKind::child())?;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = sigchld.recv() => {}
                _ = tick.tick() => {}
            }
            self.reap().await;
        }
    }
}
