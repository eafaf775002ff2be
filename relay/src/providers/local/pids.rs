//! Host processes by pid, told apart from later ones that reuse the pid: a pid is only ever
//! signalled together with the start time recorded when it was found (field 22 of
//! `/proc/PID/stat`, clock ticks after boot), and skipped when that no longer matches.
use std::{collections::HashMap, io, time::Duration};

/// One process: its pid and when it started. The pair never names two processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub start: u64,
}

/// What `/proc/PID/stat` says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    ppid: i32,
    state: char,
    start: u64,
}

fn stat(pid: i32) -> io::Result<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&text).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("/proc/{pid}/stat: {text:?}")))
}

fn parse_stat(text: &str) -> Option<Stat> {
    // The command name (field 2) may hold spaces and parentheses: the fields start after the
    // last ')'. Field 3 (the state) is the first after it, field 4 the parent, 22 the start.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).copied();
    Some(Stat { state: field(3)?.chars().next()?, ppid: field(4)?.parse().ok()?, start: field(22)?.parse().ok()? })
}

impl Proc {
    /// The process that has `pid` now.
    pub fn of(pid: i32) -> io::Result<Proc> {
        Ok(Proc { pid, start: stat(pid)?.start })
    }

    /// From what a sandbox's row recorded; `None` for a pid that could never be signalled
    /// safely (0, 1, negative: kill(2) would reach a group or everyone).
    pub fn recorded(pid: Option<i64>, start: Option<i64>) -> Option<Proc> {
        let pid = i32::try_from(pid?).ok().filter(|p| *p > 1)?;
        Some(Proc { pid, start: u64::try_from(start?).ok()? })
    }

    /// Whether this process still runs: its pid has the same start time, and it is no zombie.
    pub fn alive(self) -> bool {
        matches!(stat(self.pid), Ok(s) if s.start == self.start && s.state != 'Z')
    }

    /// Sends `sig` if the pid is still this process; false (and nothing sent) otherwise. The
    /// check and the kill are two steps, but a pid is reused only after its process has been
    /// reaped, and the daemons this is for are the relay's children or their namespace's
    /// init, so the window is the reaping of a process that is already dead.
    pub fn signal(self, sig: i32) -> bool {
        if !self.alive() {
            return false;
        }
        // SAFETY: kill(2) on a pid checked just above to be the process recorded.
        unsafe { libc::kill(self.pid, sig) == 0 }
    }

    /// Whether the pid still names this process, zombie or not: it has not been reaped yet.
    fn exists(self) -> bool {
        matches!(stat(self.pid), Ok(s) if s.start == self.start)
    }

    /// Waits up to `limit` for the process to be reaped; whether it was. Reaped, not merely a
    /// zombie: a multi-threaded process's leader is a zombie while its other threads still exit,
    /// and a PID namespace's init is reaped only after every process in the namespace is gone.
    pub async fn gone_within(self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while self.exists() {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }
}

/// Every live process's parent, from one pass over /proc.
fn parents() -> HashMap<i32, (i32, Stat)> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if let Ok(s) = stat(pid) {
            out.insert(pid, (s.ppid, s));
        }
    }
    out
}

/// The live (not zombie) children of `parent`.
pub fn children(parent: Proc) -> Vec<Proc> {
    parents()
        .into_iter()
        .filter(|(_, (ppid, s))| *ppid == parent.pid && s.state != 'Z')
        .map(|(pid, (_, s))| Proc { pid, start: s.start })
        .collect()
}

/// The live descendants of `root`, at one moment.
pub fn descendants(root: Proc) -> Vec<Proc> {
    let all = parents();
    let mut by_parent: HashMap<i32, Vec<(i32, Stat)>> = HashMap::new();
    for (pid, (ppid, s)) in &all {
        by_parent.entry(*ppid).or_default().push((*pid, *s));
    }
    let mut out = Vec::new();
    let mut todo = vec![root.pid];
    while let Some(p) = todo.pop() {
        for (pid, s) in by_parent.get(&p).into_iter().flatten() {
            if *pid != root.pid {
                todo.push(*pid);
                if s.state != 'Z' {
                    out.push(Proc { pid: *pid, start: s.start });
                }
            }
        }
    }
    out
}

/// SIGKILLs every descendant of `root` (not `root` itself), again and again until none is
/// left: a process that forks between a look and the kills leaves an orphan, which the root
/// (a child subreaper) adopts and the next look finds. Returns how many are left after
/// `rounds` looks: 0 unless something forks faster than it is killed.
pub async fn kill_descendants(root: Proc, rounds: usize) -> usize {
    for _ in 0..rounds {
        let found = descendants(root);
        if found.is_empty() {
            return 0;
        }
        for p in found {
            p.signal(libc::SIGKILL);
        }
        // Let the killed exit, so the next look does not count them again.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    descendants(root).len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_last_parenthesis() {
        let line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_stat(line), Some(Stat { ppid: 17, state: 'S', start: 987654 }));
        assert_eq!(parse_stat("4242 (x) S 17"), None);
    }

    #[test]
    fn recorded_pids_that_would_reach_a_group_or_everyone_are_refused() {
        assert_eq!(Proc::recorded(Some(0), Some(5)), None);
        assert_eq!(Proc::recorded(Some(1), Some(5)), None);
        assert_eq!(Proc::recorded(Some(-7), Some(5)), None);
        assert_eq!(Proc::recorded(Some(42), None), None);
        assert_eq!(Proc::recorded(Some(42), Some(5)), Some(Proc { pid: 42, start: 5 }));
    }

    /// A pid whose start time is not the one recorded is another process (the recorded one
    /// ended and its pid was given again): it is never signalled.
    #[test]
    fn a_reused_pid_is_not_signalled() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let pid = i32::try_from(child.id()).expect("a pid");
        let now = Proc::of(pid).expect("its stat");
        assert!(now.alive());
        // What a row would hold had an earlier process had this pid.
        let earlier = Proc { pid, start: now.start.saturating_sub(1) };
        assert!(!earlier.alive());
        assert!(!earlier.signal(libc::SIGKILL), "a stale pid is signalled");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(child.try_wait().expect("try_wait"), None, "the process with the reused pid was killed");
        assert!(now.signal(libc::SIGKILL), "the recorded process is signalled");
        let status = child.wait().expect("wait");
        assert!(!status.success());
        assert!(!now.alive(), "a reaped process is not alive");
    }
}
