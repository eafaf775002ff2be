//! Reading processes from `/proc`: their state, parent, group and command line (to find what a
//! daemon started, left behind or failed to reap), and their memory and CPU time (for the
//! memory tests and the bench).
use std::collections::HashMap;

/// The fields of `/proc/PID/stat` the tests and the bench use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: u32,
    pub comm: String,
    pub state: char,
    pub ppid: u32,
    pub pgrp: u32,
    pub session: u32,
    /// CPU time spent in user mode, in clock ticks (`utime`).
    pub utime: u64,
    /// CPU time spent in the kernel, in clock ticks (`stime`).
    pub stime: u64,
}

impl ProcStat {
    /// User plus system CPU time, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        (self.utime + self.stime) as f64 / hz
    }
}

/// `/proc/PID/stat`, or `None` if there is no such process.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = s.find('(')?;
    // The command name may hold spaces and parentheses: the fields start after the last ')'.
    let close = s.rfind(')')?;
    let comm = s[open + 1..close].to_string();
    // Field 3 of proc_pid_stat(5) (the state) is the first after the name.
    let fields: Vec<&str> = s[close + 1..].split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).copied();
    let id = |n: usize| field(n)?.parse::<u32>().ok();
    let ticks = |n: usize| field(n)?.parse::<u64>().ok();
    Some(ProcStat {
        pid,
        comm,
        state: field(3)?.chars().next()?,
        ppid: id(4)?,
        pgrp: id(5)?,
        session: id(6)?,
        utime: ticks(14)?,
        stime: ticks(15)?,
    })
}

/// User plus system CPU time `pid` has used so far, in seconds.
pub fn cpu_seconds(pid: u32) -> std::io::Result<f64> {
    proc_stat(pid).map(|s| s.cpu_seconds()).ok_or_else(|| not_there(pid, "stat"))
}

/// The command line of `pid`, its arguments joined by NUL bytes as /proc has them; `None` if
/// there is no such process.
pub fn cmdline(pid: u32) -> Option<String> {
    std::fs::read(format!("/proc/{pid}/cmdline")).ok().map(|c| String::from_utf8_lossy(&c).into_owned())
}

/// Pids of the processes whose command line contains every one of `markers`.
pub fn pids_with_all(markers: &[&str]) -> Vec<u32> {
    all_procs()
        .into_iter()
        .filter(|p| cmdline(p.pid).is_some_and(|c| markers.iter().all(|m| c.contains(m))))
        .map(|p| p.pid)
        .collect()
}

/// Pids of the processes whose command line contains `marker`.
pub fn pids_with(marker: &str) -> Vec<u32> {
    pids_with_all(&[marker])
}

/// The host pid of the process that is `pid` in the PID namespace of process `member` (an
/// isolated sandbox's daemon, say): the pids a sandbox's daemon reports are its namespace's.
/// In the host's own namespace that is `pid` itself.
pub fn host_pid(member: u32, pid: u32) -> Option<u32> {
    let ns = |p: u32| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok();
    let want = ns(member)?;
    // The last NSpid is the process's pid in its innermost namespace.
    let inner = |p: u32| -> Option<u32> {
        let status = std::fs::read_to_string(format!("/proc/{p}/status")).ok()?;
        status.lines().find_map(|l| l.strip_prefix("NSpid:"))?.split_whitespace().last()?.parse().ok()
    };
    all_procs().into_iter().map(|p| p.pid).find(|p| inner(*p) == Some(pid) && ns(*p).as_ref() == Some(&want))
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

/// How many descriptors `pid` has open (the entries of `/proc/PID/fd`).
pub fn fd_count(pid: u32) -> std::io::Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

/// The cgroup v2 path of `pid` (the `0::` line of `/proc/PID/cgroup`), as seen from here.
pub fn cgroup_of(pid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_string)
}

/// A `kB` field of `/proc/PID/status` (`VmRSS`, `VmHWM`, ...), in KiB.
pub fn status_kib(pid: u32, field: &str) -> std::io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| not_there(pid, &format!("status field {field}")))
}

/// The resident memory of `pid` (`VmRSS`), in KiB.
pub fn rss_kib(pid: u32) -> std::io::Result<u64> {
    status_kib(pid, "VmRSS")
}

/// The peak resident memory of `pid` so far (`VmHWM`), in KiB.
pub fn vm_hwm_kib(pid: u32) -> std::io::Result<u64> {
    status_kib(pid, "VmHWM")
}

fn not_there(pid: u32, what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::NotFound, format!("/proc/{pid}: no such process or no {what}"))
}

/// Thread `tid`'s scheduling slice in microseconds as `sched_getattr` reports it (its custom
/// slice or the kernel's default; always 0 before Linux 6.12), or `None` if there is no such
/// thread. Thread 0 is the caller.
pub fn sched_slice_us(tid: u32) -> Option<u64> {
    hangar_sched::slice_us(tid).ok()
}

/// Whether the kernel honours custom scheduling slices for fair threads (Linux 6.12 and newer).
pub fn kernel_has_custom_slices() -> bool {
    hangar_sched::kernel_honours_custom_slices()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let st = proc_stat(me).expect("/proc/self/stat");
        assert!(st.pid == me && st.ppid > 0 && !st.comm.is_empty() && st.state != 'Z', "{st:?}");
        assert!(cmdline(me).is_some_and(|c| !c.is_empty()));
        assert!(rss_kib(me).expect("VmRSS") > 0);
        assert!(vm_hwm_kib(me).expect("VmHWM") > 0);
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(50) {
            std::hint::black_box(0);
        }
        assert!(cpu_seconds(me).expect("CPU time") > 0.0);
        assert!(rss_kib(u32::MAX).is_err());
        assert!(cpu_seconds(u32::MAX).is_err());
        assert!(proc_stat(u32::MAX).is_none());
    }
}
