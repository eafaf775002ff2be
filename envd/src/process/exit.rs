//! How a process ended, in E2B's words ("exit status 3", "signal: killed").
use std::time::SystemTime;

use nix::sys::{signal::Signal, wait::WaitStatus};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitInfo {
    /// The exit code, or -1 when a signal ended the process (as Go's `ExitCode()`).
    pub exit_code: i32,
    pub signal: Option<i32>,
    /// Like Go's `ProcessState.String()`, which E2B's envd reports.
    pub status: String,
    pub error: Option<String>,
    pub ended_at: SystemTime,
}

impl ExitInfo {
    pub fn from_code(code: i32) -> Self {
        ExitInfo {
            exit_code: code,
            signal: None,
            status: format!("exit status {code}"),
            error: None,
            ended_at: SystemTime::now(),
        }
    }

    pub fn from_signal(sig: i32, core_dumped: bool) -> Self {
        let mut status = format!("signal: {}", signal_description(sig));
        if core_dumped {
            status.push_str(" (core dumped)");
        }
        ExitInfo { exit_code: -1, signal: Some(sig), status, error: None, ended_at: SystemTime::now() }
    }

    pub fn from_wait(status: WaitStatus) -> Option<Self> {
        match status {
            WaitStatus::Exited(_, code) => Some(Self::from_code(code)),
            WaitStatus::Signaled(_, sig, core) => Some(Self::from_signal(sig as i32, core)),
            _ => None,
        }
    }

    pub fn exited(&self) -> bool {
        self.signal.is_none()
    }
}

/// The descriptions Go uses (and so E2B's status strings).
fn signal_description(sig: i32) -> String {
    let Ok(s) = Signal::try_from(sig) else { return format!("signal {sig}") };
    let d = match s {
        Signal::SIGHUP => "hangup",
        Signal::SIGINT => "interrupt",
        Signal::SIGQUIT => "quit",
        Signal::SIGILL => "illegal instruction",
        Signal::SIGTRAP => "trace/breakpoint trap",
        Signal::SIGABRT => "aborted",
        Signal::SIGBUS => "bus error",
        Signal::SIGFPE => "floating point exception",
        Signal::SIGKILL => "killed",
        Signal::SIGUSR1 => "user defined signal 1",
        Signal::SIGSEGV => "segmentation fault",
        Signal::SIGUSR2 => "user defined signal 2",
        Signal::SIGPIPE => "broken pipe",
        Signal::SIGALRM => "alarm clock",
        Signal::SIGTERM => "terminated",
        Signal::SIGSTKFLT => "stack fault",
        Signal::SIGCHLD => "child exited",
        Signal::SIGCONT => "continued",
        Signal::SIGSTOP => "stopped (signal)",
        Signal::SIGTSTP => "stopped",
        Signal::SIGTTIN => "stopped (tty input)",
        Signal::SIGTTOU => "stopped (tty output)",
        Signal::SIGURG => "urgent I/O condition",
        Signal::SIGXCPU => "CPU time limit exceeded",
        Signal::SIGXFSZ => "file size limit exceeded",
        Signal::SIGVTALRM => "virtual timer expired",
        Signal::SIGPROF => "profiling timer expired",
        Signal::SIGWINCH => "window changed",
        Signal::SIGIO => "I/O possible",
        Signal::SIGPWR => "power failure",
        Signal::SIGSYS => "bad system call",
        _ => return format!("signal {sig}"),
    };
    d.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_like_go() {
        assert_eq!(ExitInfo::from_code(3).status, "exit status 3");
        let k = ExitInfo::from_signal(9, false);
        assert_eq!((k.exit_code, k.status.as_str(), k.exited()), (-1, "signal: killed", false));
        assert_eq!(ExitInfo::from_signal(15, false).status, "signal: terminated");
        assert_eq!(ExitInfo::from_signal(6, true).status, "signal: aborted (core dumped)");
    }
}
