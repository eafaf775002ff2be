//! Scenario 8, starting a process: from sending `Start` to its `start` event (the daemon sends
//! it once the command has exec'd), on host daemons that give each process a cgroup of its
//! own the two ways the kernel allows (created in it by `clone3`, the default; moved into it
//! by the child before exec, `--cgroups join`, as where seccomp refuses `clone3`) and one
//! without cgroups (`--cgroups off`), beside the floor: the bench forking and exec'ing the same
//! command itself (std's `Command::spawn`, which returns once the exec has happened).
//! Interleaved, one start of each way in turn, the same `/bin/true` every time, each start alone
//! (`APART` after the one before), as a person's or an agent's commands come: moving a process
//! into a cgroup is cheap right after another move (the kernel's lock for it stays in its fast
//! mode a while) and costs an RCU grace period when it comes alone, which back-to-back starts
//! would hide.
use std::time::Instant;

use hangar_e2e::{pb::process_event, start_req, Envd};
use serde::Serialize;

use crate::{
    error::{fail, IoContext, Result},
    stats::{ratio, Summary},
    world::host_envd,
};

/// Time between two starts: well past the grace periods after which the kernel's cgroup lock
/// leaves its fast mode.
const APART: std::time::Duration = std::time::Duration::from_millis(100);

pub struct Config {
    pub starts: usize,
}

#[derive(Debug, Serialize)]
pub struct Row {
    pub way: &'static str,
    pub start_ms: Summary,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub starts: usize,
    pub rows: Vec<Row>,
    /// The default (cgroups made by `clone3`) over the floor, p50 and p95.
    pub hangar_vs_floor: [Option<f64>; 2],
    /// Each child moving itself into its cgroup before exec over making it there, p50 and p95.
    pub joined_vs_cloned: [Option<f64>; 2],
}

const CLONED: &str = "hangar-envd, a cgroup per process (clone3, the default)";
const JOINED: &str = "hangar-envd, a cgroup per process the child joins before exec (`--cgroups join`)";
const NO_CGROUPS: &str = "hangar-envd without cgroups (`--cgroups off`)";
const FLOOR: &str = "floor: fork and exec in the bench (std `Command::spawn`)";

pub async fn run(cfg: &Config) -> Result<Report> {
    let daemon = |mode: &str| Envd::builder().env("HANGAR_LOG", "warn").env("HANGAR_ENVD_CGROUPS", mode).start();
    // `require` and `join` refuse to start without cgroups: the run fails rather than measure
    // something else (the bench runs as root; a container's read-only cgroup mount would fail).
    let daemons =
        [(CLONED, daemon("require")), (JOINED, daemon("join")), (NO_CGROUPS, host_envd(&["--cgroups", "off"]))];
    let mut clients = Vec::new();
    for (way, envd) in &daemons {
        clients.push((*way, envd.process().await));
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); clients.len() + 1];
    for _ in 0..cfg.starts {
        for (i, (way, client)) in clients.iter_mut().enumerate() {
            let way: &str = way;
            tokio::time::sleep(APART).await;
            let t = Instant::now();
            let mut stream = client.start(start_req("/bin/true", &[])).await.map_err(|e| fail(way, e))?.into_inner();
            let first = stream.message().await.map_err(|e| fail(way, e))?;
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            if !matches!(first.and_then(|m| m.event).and_then(|e| e.event), Some(process_event::Event::Start(_))) {
                return Err(fail(way, "the first event was not the start"));
            }
            // To its end, so that no start overlaps another's process.
            while stream.message().await.map_err(|e| fail(way, e))?.is_some() {}
            samples[i].push(ms);
        }
        tokio::time::sleep(APART).await;
        let t = Instant::now();
        let mut child = std::process::Command::new("/bin/true").spawn().ctx("starting /bin/true")?;
        samples[clients.len()].push(t.elapsed().as_secs_f64() * 1000.0);
        child.wait().ctx("waiting for /bin/true")?;
    }
    let ways = [CLONED, JOINED, NO_CGROUPS, FLOOR];
    let mut rows = Vec::new();
    for (way, s) in ways.into_iter().zip(&samples) {
        rows.push(Row { way, start_ms: Summary::of(way, s)? });
    }
    let pair = |a: &Summary, b: &Summary| [ratio(a.p50, b.p50), ratio(a.p95, b.p95)];
    Ok(Report {
        starts: cfg.starts,
        hangar_vs_floor: pair(&rows[0].start_ms, &rows[3].start_ms),
        joined_vs_cloned: pair(&rows[1].start_ms, &rows[0].start_ms),
        rows,
    })
}
