//! Scenario 3, watching a directory: a file created every 100 ms, and the delay from its
//! creation to its event, for hangar-envd's `WatchDir` beside `inotifywait -m`, and beside a
//! second `inotifywait -m` whose output goes through a minimal copier into a socket (the floor of
//! one hop, `crate::floor`, which a daemon between inotify and its client costs at least), all
//! watching the same host directory at once.

use std::{
    collections::HashMap,
    process::Stdio,
    time::{Duration, Instant},
};

use hangar_e2e::files::Scratch;
use hangar_proto::{
    ext::{files_client::FilesClient, watch_event},
    filesystem::{EventType, WatchDirRequest},
};
use serde::Serialize;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    task::JoinHandle,
};

use crate::{
    error::{fail, IoContext, Result},
    stats::{now, ratio, Summary},
    world::host_envd,
};

pub struct Config {
    pub files: u64,
}

#[derive(Debug, Serialize)]
pub struct Row {
    pub watcher: &'static str,
    pub delay_ms: Summary,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub files: u64,
    pub fs: String,
    pub rows: Vec<Row>,
    /// hangar's p50 and p95 over inotifywait's.
    pub hangar_vs_inotifywait: [Option<f64>; 2],
    /// hangar's p50 and p95 over those of inotifywait through one copier.
    pub hangar_vs_one_hop: [Option<f64>; 2],
}

/// Names seen, with when each arrived.
type Seen = JoinHandle<Result<HashMap<String, f64>>>;

pub async fn run(cfg: &Config) -> Result<Report> {
    let envd = host_envd(&[]);
    let dir = Scratch::new("bench-watch");
    let path = dir.at(".");
    let limit = Duration::from_secs(cfg.files / 10 + 15);
    let hangar = hangar_watch(envd.channel().await, &path, cfg.files, limit).await?;
    let inotify = inotifywait(&path, cfg.files, limit, Hop::None).await?;
    let copied = inotifywait(&path, cfg.files, limit, Hop::Copier).await?;
    let mut created = HashMap::new();
    for i in 1..=cfg.files {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let name = format!("f{i}");
        created.insert(name.clone(), now());
        std::fs::File::create(dir.join(&name)).ctx(format!("creating {name}"))?;
    }
    let mut rows = Vec::new();
    let watchers =
        [("hangar-envd WatchDir", hangar), ("inotifywait -m", inotify), ("inotifywait -m through a copier", copied)];
    for (watcher, seen) in watchers {
        let seen = seen.await.map_err(|e| fail(watcher, e))??;
        let mut delays = Vec::new();
        for (name, at) in &created {
            let got = seen.get(name).ok_or_else(|| fail(watcher, format!("no event for {name}")))?;
            delays.push((got - at) * 1000.0);
        }
        rows.push(Row { watcher, delay_ms: Summary::of(watcher, &delays)? });
    }
    let vs = |i: usize| {
        [ratio(rows[0].delay_ms.p50, rows[i].delay_ms.p50), ratio(rows[0].delay_ms.p95, rows[i].delay_ms.p95)]
    };
    let (hangar_vs_inotifywait, hangar_vs_one_hop) = (vs(1), vs(2));
    Ok(Report { files: cfg.files, fs: crate::machine::fs_type(&path), rows, hangar_vs_inotifywait, hangar_vs_one_hop })
}

/// hangar's WatchDir, once its start event says the watch is in place.
async fn hangar_watch(channel: tonic::transport::Channel, path: &str, files: u64, limit: Duration) -> Result<Seen> {
    let req = WatchDirRequest { path: path.to_string(), recursive: false, ..Default::default() };
    let mut stream = FilesClient::new(channel).watch_dir(req).await.map_err(|e| fail("WatchDir", e))?.into_inner();
    let first = stream.message().await.map_err(|e| fail("WatchDir", e))?;
    if !matches!(first.and_then(|r| r.event).and_then(|e| e.event), Some(watch_event::Event::Start(_))) {
        return Err(fail("WatchDir", "the first event is not start"));
    }
    Ok(tokio::spawn(async move {
        let mut seen = HashMap::new();
        let started = Instant::now();
        while (seen.len() as u64) < files {
            let left = limit.saturating_sub(started.elapsed());
            let msg = tokio::time::timeout(left, stream.message()).await.map_err(|_| fail("WatchDir", "timed out"))?;
            let ev = msg.map_err(|e| fail("WatchDir", e))?.ok_or_else(|| fail("WatchDir", "the stream ended"))?;
            match ev.event.and_then(|e| e.event) {
                Some(watch_event::Event::Filesystem(f)) if f.r#type == EventType::Create as i32 => {
                    seen.entry(f.name).or_insert_with(now);
                }
                Some(watch_event::Event::Overflow(_)) => return Err(fail("WatchDir", "events were lost")),
                _ => {}
            }
        }
        Ok(seen)
    }))
}

/// How inotifywait's lines reach the bench.
#[derive(Clone, Copy, PartialEq)]
enum Hop {
    /// Its standard output, a pipe.
    None,
    /// Its standard output through a minimal copier into a loopback socket.
    Copier,
}

/// `inotifywait -m -e create`, once it says its watch is established.
async fn inotifywait(path: &str, files: u64, limit: Duration, hop: Hop) -> Result<Seen> {
    let mut child = tokio::process::Command::new("inotifywait")
        .args(["-m", "-e", "create", "--format", "%f", path])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .ctx("starting inotifywait (Debian's inotify-tools)")?;
    let stderr = child.stderr.take().ok_or_else(|| fail("inotifywait", "no stderr"))?;
    let mut err_lines = BufReader::new(stderr).lines();
    let established = async {
        while let Some(l) = err_lines.next_line().await.ctx("reading inotifywait's stderr")? {
            if l.contains("Watches established") {
                return Ok(());
            }
        }
        Err(fail("inotifywait", "exited before its watch was established"))
    };
    tokio::time::timeout(Duration::from_secs(10), established).await.map_err(|_| fail("inotifywait", "no watch"))??;
    let stdout = child.stdout.take().ok_or_else(|| fail("inotifywait", "no stdout"))?;
    let (copier, reader): (_, Box<dyn tokio::io::AsyncRead + Send + Unpin>) = match hop {
        Hop::None => (None, Box::new(stdout)),
        Hop::Copier => {
            let (c, sock) = crate::floor::copy_from(stdout.into_owned_fd().ctx("inotifywait's stdout")?.into()).await?;
            (Some(c), Box::new(sock))
        }
    };
    Ok(tokio::spawn(async move {
        let mut seen = HashMap::new();
        let mut lines = BufReader::new(reader).lines();
        let read = async {
            while (seen.len() as u64) < files {
                match lines.next_line().await.ctx("reading inotifywait")? {
                    Some(name) => {
                        seen.entry(name).or_insert_with(now);
                    }
                    None => return Err(fail("inotifywait", "exited")),
                }
            }
            Ok(())
        };
        tokio::time::timeout(limit, read).await.map_err(|_| fail("inotifywait", "timed out"))??;
        drop((child, copier));
        Ok(seen)
    }))
}
