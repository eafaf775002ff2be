//! Scenario 2, following a file: a stamped line appended every 100 ms, and the delay from its
//! write to its delivery, for hangar-envd's `Follow` beside GNU `tail -F` at its default 1 s
//! interval and with `-s 0.1`, all reading the same file at once: on a host directory, on a
//! kernel overlayfs mounted on the host, and inside a container on its root filesystem (Docker's
//! storage driver: overlayfs, or fuse-overlayfs where the engine uses that). Every reader is
//! timed where the bench receives it: hangar's over gRPC, tail's through its pipe (in the
//! container, through `docker exec`'s).

use std::{io::Write as _, process::Stdio, time::Duration};

use hangar_e2e::files::Scratch;
use hangar_proto::ext::{files_client::FilesClient, follow_event, FollowRequest, FollowResponse};
use serde::Serialize;
use tokio::task::JoinHandle;
use tonic::{transport::Channel, Streaming};

use crate::{
    error::{fail, IoContext, Result},
    machine::fs_type,
    pipe::read_stamped,
    stats::{now, ratio, Lines, Summary},
    world::{host_envd, image, Container},
};

pub struct Config {
    pub lines: u64,
}

#[derive(Debug, Serialize)]
pub struct Row {
    pub location: &'static str,
    /// The filesystem the followed file is on.
    pub fs: String,
    pub reader: &'static str,
    pub delay_ms: Summary,
    /// hangar's p50 and p95 over this reader's.
    pub hangar_vs_this: [Option<f64>; 2],
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub lines: u64,
    pub rows: Vec<Row>,
}

const HANGAR: &str = "hangar-envd Follow";
const READERS: [&str; 3] = [HANGAR, "tail -F (default 1 s)", "tail -F -s 0.1"];

pub async fn run(cfg: &Config) -> Result<Report> {
    let dir = Scratch::new("bench-follow");
    let mut rows = host(cfg, "host", &dir.at(".")).await?;
    let overlay = Overlay::mount()?;
    rows.extend(host(cfg, "host overlayfs", &overlay.merged()).await?);
    drop(overlay);
    rows.extend(container(cfg).await?);
    Ok(Report { lines: cfg.lines, rows })
}

fn limit(lines: u64) -> Duration {
    Duration::from_secs(lines / 10 + 15)
}

async fn host(cfg: &Config, location: &'static str, dir: &str) -> Result<Vec<Row>> {
    let envd = host_envd(&[]);
    let path = format!("{dir}/follow.log");
    std::fs::write(&path, b"").ctx(format!("creating {path}"))?;
    let fs = fs_type(dir);
    let hangar = follow(envd.channel().await, &path, cfg.lines, false).await?;
    let tails = [
        spawn_reader("tail", &["-F", "-n", "0", &path], cfg.lines)?,
        spawn_reader("tail", &["-F", "-n", "0", "-s", "0.1", &path], cfg.lines)?,
    ];
    // tail opens the file as it starts; give it that time before the first line.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for i in 1..=cfg.lines {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).ctx(format!("opening {path}"))?;
        f.write_all(format!("{i} {:.6}\n", now()).as_bytes()).ctx(format!("appending to {path}"))?;
    }
    let [t1, t2] = tails;
    rows(location, fs, [hangar, t1, t2], cfg.lines).await
}

async fn container(cfg: &Config) -> Result<Vec<Row>> {
    let c = Container::run(&image("envd"), "follow")?;
    let path = "/home/user/follow.log";
    c.exec(&["touch", path])?;
    // The container's root filesystem, from its own /proc/mounts (the image has no awk).
    let fs =
        c.exec(&["bash", "-c", r#"while read -r _ m t _; do [ "$m" = / ] && echo "$t"; done < /proc/mounts; true"#])?;
    // fuse-overlayfs (some engines' storage driver) is a FUSE filesystem, which Follow refuses
    // unless told: changes made elsewhere would go unseen. Here every write goes through this
    // container's own mount, which inotify does see.
    let allow = fs.starts_with("fuse");
    let hangar = follow(c.envd_channel().await?, path, cfg.lines, allow).await?;
    let docker_tail = |extra: &[&str]| {
        let mut args = vec!["exec", c.name.as_str(), "tail", "-F", "-n", "0"];
        args.extend_from_slice(extra);
        args.push(path);
        spawn_reader("docker", &args, cfg.lines)
    };
    let tails = [docker_tail(&[])?, docker_tail(&["-s", "0.1"])?];
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let script = format!(r#"for i in $(seq {}); do sleep 0.1; echo "$i $EPOCHREALTIME" >> {path}; done"#, cfg.lines);
    c.exec(&["bash", "-c", &script])?;
    let [t1, t2] = tails;
    rows("container", fs, [hangar, t1, t2], cfg.lines).await
}

/// Collects the readers' lines and makes one row per reader, hangar's first.
async fn rows(location: &'static str, fs: String, readers: [Reader; 3], lines: u64) -> Result<Vec<Row>> {
    let mut out = Vec::new();
    for (reader, label) in readers.into_iter().zip(READERS) {
        let seen = reader.0.await.map_err(|e| fail(label, e))??;
        seen.check_complete(&format!("{label} on the {location}"), lines)?;
        out.push(Row {
            location,
            fs: fs.clone(),
            reader: label,
            delay_ms: Summary::of(label, &seen.delays_ms)?,
            hangar_vs_this: [None, None],
        });
    }
    let (h50, h95) = (out[0].delay_ms.p50, out[0].delay_ms.p95);
    for r in &mut out {
        r.hangar_vs_this = [ratio(h50, r.delay_ms.p50), ratio(h95, r.delay_ms.p95)];
    }
    Ok(out)
}

/// A reader running in its own task: its stamped lines.
struct Reader(JoinHandle<Result<Lines>>);

/// Starts `program` and a task reading its stdout; the program is killed when the task ends.
fn spawn_reader(program: &str, args: &[&str], lines: u64) -> Result<Reader> {
    let what = format!("{program} {}", args.join(" "));
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .ctx(format!("starting {what}"))?;
    let out = child.stdout.take().ok_or_else(|| fail(&what, "no stdout"))?;
    Ok(Reader(tokio::spawn(async move {
        let seen = read_stamped(&what, out, lines, limit(lines)).await;
        drop(child);
        seen
    })))
}

/// Opens a Follow stream from the file's current end and waits for its start event.
async fn follow(channel: Channel, path: &str, lines: u64, allow_network_mounts: bool) -> Result<Reader> {
    let req = FollowRequest { path: path.to_string(), offset: None, allow_network_mounts };
    let mut stream =
        FilesClient::new(channel).follow(req).await.map_err(|e| fail(format!("Follow {path}"), e))?.into_inner();
    match next_event(&mut stream, path).await? {
        Some(follow_event::Event::Start(_)) => {}
        other => return Err(fail(format!("Follow {path}"), format!("first event {other:?}, want start"))),
    }
    let path = path.to_string();
    Ok(Reader(tokio::spawn(async move {
        let mut seen = Lines::default();
        let read = async {
            while (seen.numbers.len() as u64) < lines {
                match next_event(&mut stream, &path).await? {
                    Some(follow_event::Event::Data(d)) => seen.feed(&String::from_utf8_lossy(&d.data), now()),
                    Some(follow_event::Event::Keepalive(_)) => {}
                    Some(other) => return Err(fail(format!("Follow {path}"), format!("unexpected {other:?}"))),
                    None => return Err(fail(format!("Follow {path}"), "the stream ended")),
                }
            }
            Ok(())
        };
        tokio::time::timeout(limit(lines), read).await.map_err(|_| fail("Follow", "timed out"))??;
        Ok(seen)
    })))
}

async fn next_event(stream: &mut Streaming<FollowResponse>, path: &str) -> Result<Option<follow_event::Event>> {
    match stream.message().await {
        Ok(Some(r)) => Ok(r.event.and_then(|e| e.event)),
        Ok(None) => Ok(None),
        Err(e) => Err(fail(format!("Follow {path}"), e)),
    }
}

/// A kernel overlayfs mounted on the host for the scenario, unmounted when dropped.
struct Overlay {
    dir: Scratch,
}

impl Overlay {
    fn mount() -> Result<Overlay> {
        let dir = Scratch::new("bench-overlay");
        for d in ["lower", "upper", "work", "merged"] {
            std::fs::create_dir(dir.join(d)).ctx(format!("creating the overlay's {d}"))?;
        }
        let opts = format!("lowerdir={},upperdir={},workdir={}", dir.at("lower"), dir.at("upper"), dir.at("work"));
        let out = std::process::Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &opts, &dir.at("merged")])
            .output()
            .ctx("running mount")?;
        if !out.status.success() {
            return Err(fail("mounting an overlayfs (needs root)", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(Overlay { dir })
    }

    fn merged(&self) -> String {
        self.dir.at("merged")
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.dir.at("merged")).output();
    }
}
