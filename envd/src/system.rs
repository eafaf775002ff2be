//! The machine's load, for `GET /metrics`, read from /proc and statvfs.
use std::{sync::Mutex, time::SystemTime};

#[derive(Debug, Default)]
pub struct System {
    /// `(idle, total)` jiffies at the previous sample, for CPU use since then.
    prev_cpu: Mutex<Option<(u64, u64)>>,
}

const MIB: u64 = 1024 * 1024;

impl System {
    pub fn snapshot(&self) -> serde_json::Value {
        let ts = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let cpu_count = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let cpu_used_pct = self.cpu_used_pct();
        let mem = meminfo();
        let (disk_used, disk_total) = disk("/");
        serde_json::json!({
            "ts": ts,
            "cpu_count": cpu_count,
            "cpu_used_pct": cpu_used_pct,
            "mem_total": mem.total,
            "mem_used": mem.used,
            "mem_cache": mem.cache,
            "mem_total_mib": mem.total / MIB,
            "mem_used_mib": mem.used / MIB,
            "disk_used": disk_used,
            "disk_total": disk_total,
        })
    }

    fn cpu_used_pct(&self) -> f64 {
        let Some((idle, total)) = cpu_jiffies() else { return 0.0 };
        let mut prev = self.prev_cpu.lock().unwrap_or_else(|p| p.into_inner());
        let (pi, pt) = prev.replace((idle, total)).unwrap_or((0, 0));
        let (di, dt) = (idle.saturating_sub(pi), total.saturating_sub(pt));
        if dt == 0 {
            return 0.0;
        }
        ((1.0 - di as f64 / dt as f64) * 10000.0).round() / 100.0
    }
}

fn cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
    Some((idle, v.iter().take(8).sum()))
}

struct Mem {
    total: u64,
    used: u64,
    cache: u64,
}

fn meminfo() -> Mem {
    let s = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let get = |k: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(0)
    };
    let total = get("MemTotal");
    Mem { total, used: total.saturating_sub(get("MemAvailable")), cache: get("Cached") }
}

fn disk(path: &str) -> (u64, u64) {
    match nix::sys::statvfs::statvfs(path) {
        Ok(s) => {
            let f = s.fragment_size();
            let total = s.blocks() * f;
            (total - s.blocks_free() * f, total)
        }
        Err(_) => (0, 0),
    }
}
