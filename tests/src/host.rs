//! What this machine provides: root, cgroup v2, and skipping (or, under CI, failing) a test that
//! needs something it lacks.
use std::path::PathBuf;

/// Whether a test must be skipped because this machine lacks `what` (root, a mount). Under
/// `CI=true` a missing capability fails the test instead: CI runs as root and a skip there would
/// count as a pass.
pub fn skip_without(available: bool, what: &str) -> bool {
    if available {
        return false;
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "CI must provide {what} for this test");
    eprintln!("skipped: needs {what}");
    true
}

pub fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// The directory of cgroup `path` (a cgroup v2 path as `/proc/PID/cgroup` shows it, relative to
/// this process's cgroup namespace), if the machine has cgroup v2 mounted.
pub fn cgroup_dir(path: &str) -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let f: Vec<&str> = left.split_whitespace().collect();
        let (root, mount) = (*f.get(3)?, *f.get(4)?);
        let rel = if root == "/" { path } else { path.strip_prefix(root)? };
        Some(PathBuf::from(mount).join(rel.trim_start_matches('/')))
    })
}

/// The mount points at or under `dir` in this process's mount namespace, deepest first (as
/// `/proc/self/mountinfo` lists them, its octal escapes undone).
pub fn mount_points_under(dir: &std::path::Path) -> Vec<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .map(|p| PathBuf::from(unescape_mountinfo(p)))
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    points
}

/// mountinfo writes a space, tab, newline and backslash in a path as `\ooo`.
fn unescape_mountinfo(p: &str) -> String {
    let mut out = Vec::new();
    let b = p.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let code = b.get(i + 1..i + 4).and_then(|o| u8::from_str_radix(std::str::from_utf8(o).ok()?, 8).ok());
        match (b[i], code) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The directory of this process's cgroup v2.
pub fn own_cgroup_dir() -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    cgroup_dir(own.lines().find_map(|l| l.strip_prefix("0::"))?)
}

/// Whether a daemon started by this test could make cgroups: root, cgroup v2 with `cgroup.kill`
/// (Linux 5.14), and this process's cgroup writable (a child made and removed here).
pub fn cgroups_usable() -> bool {
    let Some(dir) = own_cgroup_dir() else { return false };
    if !is_root() {
        return false;
    }
    // Tests run in parallel threads: a probe of its own for each call.
    static PROBES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let probe = dir.join(format!("hangar-e2e-probe.{}.{n}", std::process::id()));
    let ok = std::fs::create_dir(&probe).is_ok() && probe.join("cgroup.kill").exists();
    let _ = std::fs::remove_dir(&probe);
    ok
}

/// The two ways a daemon starts a process, as `HANGAR_ENVD_CGROUPS` values: created in a cgroup
/// of its own (`require`) and without cgroups (`off`). Only `off` where this machine cannot make
/// cgroups (skipped, as `skip_without` says: a failure under CI).
pub fn start_modes() -> &'static [&'static str] {
    if skip_without(cgroups_usable(), "root and a writable cgroup v2 with cgroup.kill") {
        return &["off"];
    }
    &["require", "off"]
}
