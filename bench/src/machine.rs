//! The machine a run was made on, for the report: figures only compare within one run, but a
//! reader needs to know what produced them.

use std::process::Command;

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub os: String,
    pub docker: String,
    pub rustc: String,
    pub commit: String,
    /// The filesystem of the host directory the follow and watch scenarios use.
    pub host_fs: String,
}

impl Machine {
    pub fn describe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, v)| v.trim()))
            .unwrap_or("unknown")
            .to_string();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        let os = os_release
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_else(|| "unknown".into());
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            memory_gib: (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            kernel: output("uname", &["-r"]),
            os,
            docker: output("docker", &["version", "--format", "{{.Server.Version}}"]),
            rustc: output("rustc", &["--version"]),
            commit: commit(),
            host_fs: fs_type(&std::env::temp_dir().to_string_lossy()),
        }
    }
}

/// The type of the filesystem `path` is on, as /proc/mounts names it (`ext4`, `overlay`,
/// `fuse.fuse-overlayfs`): the mount with the longest mount point that contains it.
pub fn fs_type(path: &str) -> String {
    let path = std::fs::canonicalize(path).map(|p| p.to_string_lossy().into_owned()).unwrap_or(path.to_string());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, mnt, fs) = (f.next()?, f.next()?, f.next()?);
            let inside = path == mnt || mnt == "/" || path.starts_with(&format!("{mnt}/"));
            inside.then(|| (mnt.len(), fs.to_string()))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, fs)| fs)
        .unwrap_or_else(|| "unknown".into())
}

/// The checked-out commit, with `-dirty` when the work tree has changes.
fn commit() -> String {
    let head = output("git", &["rev-parse", "--short=12", "HEAD"]);
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    if dirty {
        format!("{head}-dirty")
    } else {
        head
    }
}

fn output(cmd: &str, args: &[&str]) -> String {
    match Command::new(cmd).args(args).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        _ => "unknown".into(),
    }
}
