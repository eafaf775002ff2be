//! Reading processes from `/proc`: their state, parent, group and command line, to find what a
//! daemon started, left behind or failed to reap.
use std::collections::HashMap;

/// The fields of `/proc/PID/stat` the tests use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: u32,
    pub comm: String,
    pub state: char,
    pub ppid: u32,
    pub pgrp: u32,
    pub session: u32,
}

pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s[open + 1..close].to_string();
    let mut rest = s[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    let pgrp = rest.next()?.parse().ok()?;
    let session = rest.next()?.parse().ok()?;
    Some(ProcStat { pid, comm, state, ppid, pgrp, session })
}

/// Pids of the processes whose command line contains `marker`.
pub fn pids_with(marker: &str) -> Vec<u32> {
    all_procs()
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{}/cmdline", p.pid))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .map(|p| p.pid)
        .collect()
}

/// Every process visible in /proc.
pub fn all_procs() -> Vec<ProcStat> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                if let Some(st) = proc_stat(pid) {
                    out.push(st);
                }
            }
        }
    }
    out
}

/// Processes (zombies included) whose process group is `pgid`.
pub fn procs_in_pgid(pgid: u32) -> Vec<ProcStat> {
    all_procs().into_iter().filter(|p| p.pgrp == pgid).collect()
}

/// Direct children of `ppid` (zombies included).
pub fn children_of(ppid: u32) -> Vec<ProcStat> {
    all_procs().into_iter().filter(|p| p.ppid == ppid).collect()
}

/// Zombie children of `ppid`.
pub fn zombies_of(ppid: u32) -> Vec<ProcStat> {
    children_of(ppid).into_iter().filter(|p| p.state == 'Z').collect()
}

/// All descendants of `pid` (zombies included), not `pid` itself.
pub fn descendants(pid: u32) -> Vec<ProcStat> {
    let all = all_procs();
    let mut by_parent: HashMap<u32, Vec<&ProcStat>> = HashMap::new();
    for p in &all {
        by_parent.entry(p.ppid).or_default().push(p);
    }
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        if let Some(kids) = by_parent.get(&p) {
            for k in kids {
                if k.pid != pid {
                    out.push((*k).clone());
                    todo.push(k.pid);
                }
            }
        }
    }
    out
}

/// Whether `pid` exists and is not a zombie.
pub fn is_running(pid: u32) -> bool {
    matches!(proc_stat(pid), Some(s) if s.state != 'Z')
}
