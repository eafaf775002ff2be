//! The hangar-envd users put into their images (scripts/build-envd, cargo profile `ship`): its
//! size beside the goal, the newest glibc it needs, and whether the scenarios ran it. bench/run
//! has them run cargo's output before the strip (the same code, with the symbol table `perf`
//! needs), so that every figure is the shipped daemon's.

use std::{path::Path, process::Command};

use serde::Serialize;

use crate::error::{fail, IoContext, Result};

/// The size the shipped binary should stay within (the goal; scripts/build-envd enforces it).
pub const GOAL_BYTES: u64 = 8 << 20;

#[derive(Debug, Clone, Serialize)]
pub struct Shipped {
    pub path: String,
    pub bytes: u64,
    pub mib: f64,
    pub goal_mib: f64,
    /// The highest `GLIBC_x.y` the binary needs (`2.28`), or None for a static binary.
    pub glibc: Option<String>,
    /// The daemon the scenarios ran (`HANGAR_ENVD_BIN`) is this build as cargo linked it, before
    /// the strip: `<profile>/hangar-envd` beside `<profile>/dist/hangar-envd`.
    pub scenarios_ran_it: bool,
}

impl Shipped {
    /// Measures the binary `HANGAR_SHIP_ENVD_BIN` names (bench/run sets it); None when unset.
    pub fn from_env() -> Result<Option<Shipped>> {
        match std::env::var_os("HANGAR_SHIP_ENVD_BIN") {
            Some(p) => {
                let ran = std::env::var_os("HANGAR_ENVD_BIN");
                let scenarios_ran_it = ran.is_some_and(|run| is_unstripped_copy(Path::new(&p), Path::new(&run)));
                Ok(Some(Shipped { scenarios_ran_it, ..Shipped::measure(Path::new(&p))? }))
            }
            None => Ok(None),
        }
    }

    pub fn measure(path: &Path) -> Result<Shipped> {
        let bytes = std::fs::metadata(path).ctx(format!("the shipped hangar-envd at {}", path.display()))?.len();
        let out = Command::new("readelf")
            .args(["-V", "-W"])
            .arg(path)
            .output()
            .ctx("running readelf (binutils) on the shipped hangar-envd")?;
        if !out.status.success() {
            return Err(fail("readelf -V on the shipped hangar-envd", String::from_utf8_lossy(&out.stderr)));
        }
        let mib = |b: u64| (b as f64 / 1_048_576.0 * 100.0).round() / 100.0;
        Ok(Shipped {
            path: path.display().to_string(),
            bytes,
            mib: mib(bytes),
            goal_mib: mib(GOAL_BYTES),
            glibc: highest_glibc(&String::from_utf8_lossy(&out.stdout)),
            scenarios_ran_it: false,
        })
    }
}

/// `run` is the binary scripts/build-envd stripped into `shipped` (`.../ship/dist/hangar-envd`
/// from `.../ship/hangar-envd`), by path: the strip is all that lies between them.
fn is_unstripped_copy(shipped: &Path, run: &Path) -> bool {
    let canonical = |p: &Path| std::fs::canonicalize(p).ok();
    let built = shipped.parent().and_then(Path::parent).map(|profile| profile.join("hangar-envd"));
    match (built.and_then(|b| canonical(&b)), canonical(run)) {
        (Some(b), Some(r)) => b == r,
        _ => false,
    }
}

/// The highest glibc version in `readelf -V`'s version-needs entries (`Name: GLIBC_2.28`),
/// compared number by number (2.3 < 2.28).
pub fn highest_glibc(readelf: &str) -> Option<String> {
    readelf
        .lines()
        .filter_map(|l| l.split_once("Name: GLIBC_").map(|(_, rest)| rest))
        .filter_map(|rest| {
            let v = rest.split_whitespace().next()?;
            let nums: Option<Vec<u32>> = v.split('.').map(|n| n.parse().ok()).collect();
            Some((nums?, v.to_string()))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highest_glibc_compares_numbers() {
        let readelf = "\
Version needs section '.gnu.version_r' contains 1 entry:
 Addr: 0x0000000000000f30  Offset: 0x000f30  Link: 6 (.dynstr)
  000000: Version: 1  File: libc.so.6  Cnt: 4
  0x0010:   Name: GLIBC_2.3  Flags: none  Version: 5
  0x0020:   Name: GLIBC_2.28  Flags: none  Version: 4
  0x0030:   Name: GLIBC_2.2.5  Flags: none  Version: 3
  0x0040:   Name: GLIBC_PRIVATE  Flags: none  Version: 2
";
        assert_eq!(highest_glibc(readelf).as_deref(), Some("2.28"));
        assert_eq!(highest_glibc("Version symbols section '.gnu.version' contains 0 entries:\n"), None);
    }

    #[test]
    fn the_unstripped_copy_is_the_one_beside_dist() {
        let dir = std::env::temp_dir().join(format!("hangar-bench-shipped-{}", std::process::id()));
        let dist = dir.join("ship/dist");
        std::fs::create_dir_all(&dist).unwrap();
        let (built, shipped, other) = (dir.join("ship/hangar-envd"), dist.join("hangar-envd"), dir.join("hangar-envd"));
        for f in [&built, &shipped, &other] {
            std::fs::write(f, b"").unwrap();
        }
        assert!(is_unstripped_copy(&shipped, &built));
        assert!(is_unstripped_copy(&shipped, &dir.join("ship/./hangar-envd")));
        assert!(!is_unstripped_copy(&shipped, &shipped));
        assert!(!is_unstripped_copy(&shipped, &other));
        assert!(!is_unstripped_copy(&shipped, &dir.join("missing")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
