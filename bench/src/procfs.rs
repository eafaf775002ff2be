//! A process's resident memory and CPU time, from /proc.

use hangar_e2e::files::proc_status_kib;

use crate::error::{fail, IoContext, Result};

/// Resident memory (`VmRSS`) of `pid`, in KiB.
pub fn rss_kib(pid: u32) -> Result<u64> {
    proc_status_kib(pid, "VmRSS").ok_or_else(|| fail(format!("/proc/{pid}/status"), "no such process or no VmRSS"))
}

/// User plus system CPU time `pid` has used, in seconds.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ctx(format!("reading /proc/{pid}/stat"))?;
    // The command name is in parentheses and may hold spaces: fields count from after it.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).ok_or_else(|| fail("/proc/PID/stat", "no ')'"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of stat(5), utime 14 and stime 15.
    let ticks = |i: usize| fields.get(i - 3).and_then(|v| v.parse::<u64>().ok());
    let (Some(utime), Some(stime)) = (ticks(14), ticks(15)) else {
        return Err(fail(format!("/proc/{pid}/stat"), "no utime/stime"));
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok((utime + stime) as f64 / hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        assert!(rss_kib(me).expect("rss") > 0);
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(50) {
            std::hint::black_box(0);
        }
        assert!(cpu_seconds(me).expect("cpu") > 0.0);
        assert!(rss_kib(u32::MAX).is_err());
    }
}
