//! Scenario 4b, the daemon's resident memory: idle, with 64 processes whose output rings are
//! full, and with as many directory watches as it allows (64 by default). Each case starts from a
//! fresh daemon; the ring size and the watch limit are the daemon's own, from `Daemon/Info`.

use std::time::Duration;

use hangar_e2e::{bash, ext::InfoRequest, files::Scratch, pb::process_event, procfs, Envd};
use hangar_proto::{
    ext::{files_client::FilesClient, Limits},
    filesystem::WatchDirRequest,
};
use serde::Serialize;

use crate::{
    error::{fail, IoContext, Result},
    world::host_envd,
};

pub const PROCESSES: usize = 64;

#[derive(Debug, Serialize)]
pub struct Report {
    pub idle_kib: u64,
    /// The shipped build's (`HANGAR_SHIP_ENVD_BIN`, what users put in their images) idle.
    pub shipped_idle_kib: Option<u64>,
    /// Each process's `Start` stream on a connection of its own (as E2B's SDKs open them).
    pub full_rings_kib: u64,
    /// The same, every stream on one HTTP/2 connection (as the relay opens them).
    pub full_rings_one_connection_kib: u64,
    /// The same on the shipped build, as users run it.
    pub shipped_full_rings_one_connection_kib: Option<u64>,
    pub processes: usize,
    pub ring_bytes: u64,
    pub watches_kib: u64,
    pub watches: u32,
    /// The second daemon's memory before its watches, to compare with `watches_kib`.
    pub watches_idle_kib: u64,
}

pub async fn run() -> Result<Report> {
    let envd = host_envd(&[]);
    settle().await;
    let idle_kib = daemon_rss_kib(&envd)?;
    let limits = limits(&envd).await?;
    let full_rings_kib = full_rings(&envd, &limits, Connections::EachItsOwn).await?;
    drop(envd);
    let envd = host_envd(&[]);
    settle().await;
    let full_rings_one_connection_kib = full_rings(&envd, &limits, Connections::One).await?;
    drop(envd);
    let (shipped_idle_kib, shipped_full_rings_one_connection_kib) = match std::env::var_os("HANGAR_SHIP_ENVD_BIN") {
        Some(bin) => {
            let shipped = || Envd::builder().bin(&bin).env("HANGAR_LOG", "warn").start();
            let envd = shipped();
            settle().await;
            let idle = daemon_rss_kib(&envd)?;
            drop(envd);
            let envd = shipped();
            settle().await;
            (Some(idle), Some(full_rings(&envd, &limits, Connections::One).await?))
        }
        None => (None, None),
    };

    let envd = host_envd(&[]);
    settle().await;
    let watches_idle_kib = daemon_rss_kib(&envd)?;
    let dirs: Vec<Scratch> = (0..limits.max_watches).map(|i| Scratch::new(&format!("bench-mem-{i}"))).collect();
    let mut open = Vec::new();
    for d in &dirs {
        let req = WatchDirRequest { path: d.at("."), recursive: true, ..Default::default() };
        let mut s =
            FilesClient::new(envd.channel().await).watch_dir(req).await.map_err(|e| fail("WatchDir", e))?.into_inner();
        s.message().await.map_err(|e| fail("WatchDir", e))?.ok_or_else(|| fail("WatchDir", "no start"))?;
        open.push(s);
    }
    // One file in each, so every watch has seen an event.
    for d in &dirs {
        std::fs::write(d.join("x"), b"x").ctx("writing into a watched directory")?;
    }
    settle().await;
    let watches_kib = daemon_rss_kib(&envd)?;
    drop(open);
    Ok(Report {
        idle_kib,
        shipped_idle_kib,
        full_rings_kib,
        full_rings_one_connection_kib,
        shipped_full_rings_one_connection_kib,
        processes: PROCESSES,
        ring_bytes: limits.ring_bytes,
        watches_kib,
        watches: limits.max_watches,
        watches_idle_kib,
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Connections {
    EachItsOwn,
    One,
}

/// Starts `PROCESSES` processes that each print more than a ring holds, then sleep; their Start
/// streams are drained (unread, a stream would hold its process back) and kept open while the
/// daemon's resident memory is read.
async fn full_rings(envd: &Envd, limits: &Limits, connections: Connections) -> Result<u64> {
    let output_bytes = limits.ring_bytes + 64 * 1024;
    let shared = match connections {
        Connections::One => Some(envd.process().await),
        Connections::EachItsOwn => None,
    };
    let mut readers = Vec::new();
    for _ in 0..PROCESSES {
        let mut client = match &shared {
            Some(c) => c.clone(),
            None => envd.process().await,
        };
        let script = format!("head -c {output_bytes} /dev/urandom; exec sleep 600");
        let mut stream = client.start(bash(&script)).await.map_err(|e| fail("Start", e))?.into_inner();
        readers.push(tokio::spawn(async move {
            let mut got = 0u64;
            while got < output_bytes {
                match stream.message().await {
                    Ok(Some(m)) => {
                        if let Some(process_event::Event::Data(d)) = m.event.and_then(|e| e.event) {
                            got += match d.output {
                                Some(process_event::data_event::Output::Stdout(b)) => b.len() as u64,
                                _ => 0,
                            };
                        }
                    }
                    _ => break,
                }
            }
            (got, stream)
        }));
    }
    let mut streams = Vec::new();
    for r in readers {
        let (got, stream) = tokio::time::timeout(Duration::from_secs(30), r)
            .await
            .map_err(|_| fail("filling the rings", "timed out"))?
            .map_err(|e| fail("filling the rings", e))?;
        if got < output_bytes {
            return Err(fail("filling the rings", format!("a process printed {got} bytes")));
        }
        streams.push(stream);
    }
    settle().await;
    daemon_rss_kib(envd)
}

/// The daemon's limits, as it reports them.
async fn limits(envd: &Envd) -> Result<Limits> {
    let info = envd.daemon().await.info(InfoRequest {}).await.map_err(|e| fail("Daemon/Info", e))?.into_inner();
    info.limits.ok_or_else(|| fail("Daemon/Info", "no limits"))
}

/// The daemon's resident memory, in KiB.
fn daemon_rss_kib(envd: &Envd) -> Result<u64> {
    procfs::rss_kib(envd.pid()).ctx("the daemon's resident memory")
}

/// Waits for the daemon's steady state: longer than a process's output stays quiet before the
/// daemon settles its ring and gives the freed blocks back (500 ms, then up to 200 ms), so the
/// figure is what quiet processes cost, not the blocks their last reads landed in.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1500)).await;
}
