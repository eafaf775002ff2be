//! Scenario 5, scale: `HANGAR_STREAM_MAX_TOTAL` (512) streams open through one relay at once,
//! each a command printing a stamped line every 100 ms; the per-line delay over all of them,
//! the relay's CPU and memory while all are open, and the 513th stream refused.
//!
//! The command waits with bash's own `read -t` rather than `sleep`, so 512 streams do not cost
//! the machine 5,120 process starts a second: what is measured is the relay.
//!
//! Opening is measured beside its floor: the same 512 commands (two lines each) started at once
//! by one loop in the sandbox, without hangar, until the last one has printed its first line.
//! Each is a login shell that forks twice before it prints, so on a small machine starting them
//! is what opening costs, whoever starts them.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use hangar_e2e::procfs;
use serde::Serialize;
use serde_json::json;
use tokio::sync::{Notify, Semaphore};

use crate::{
    error::{fail, IoContext, Result},
    stats::{now, round3, Lines, Summary},
    world::{container_of, image, RelayWorld},
};

/// The relay's default `HANGAR_STREAM_MAX_TOTAL` and `HANGAR_STREAM_MAX_PER_TOKEN`.
pub const STREAMS: usize = 512;
const PER_TOKEN: usize = 16;

pub struct Config {
    pub lines: u64,
}

#[derive(Debug, Serialize)]
pub struct Refused {
    pub status: u16,
    pub code: String,
    pub message: String,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub streams: usize,
    pub lines_per_stream: u64,
    /// From the first request to the last stream's answer.
    pub open_seconds: f64,
    /// From the first request to the last stream's first line.
    pub first_lines_seconds: f64,
    /// The floor: the same commands started by one loop in the sandbox, from the loop's start to
    /// the last one's first line.
    pub floor_first_lines_seconds: f64,
    /// From the last stream's opening to the first one's end: all open.
    pub window_seconds: f64,
    pub line_delay_ms: Summary,
    /// Only the lines printed while all the streams were open (none opening or closing).
    pub line_delay_all_open_ms: Summary,
    /// The relay's CPU while all streams were open, in % of one core, and per stream.
    pub relay_cpu_percent: f64,
    pub relay_cpu_percent_per_stream: f64,
    pub relay_rss_idle_kib: u64,
    pub relay_rss_kib: u64,
    pub refused: Refused,
}

pub async fn run(cfg: &Config) -> Result<Report> {
    let mut world = RelayWorld::start(&[]);
    let sandbox = world.docker_sandbox("scale", &image("envd"), true).await?;
    let mut tokens = Vec::new();
    for i in 0..=STREAMS / PER_TOKEN {
        tokens.push(world.relay.token(&format!("scale-{i}"), "user").await.secret);
    }
    let world = Arc::new(world);
    let relay_pid = world.relay.pid();
    let command = |lines: u64| {
        format!(r#"exec 3<> <(:); for i in $(seq {lines}); do read -t 0.1 -u 3; echo "$i $EPOCHREALTIME"; done"#)
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let relay_rss_idle_kib = procfs::rss_kib(relay_pid).ctx("the relay's resident memory")?;

    let cmd = command(cfg.lines);
    let path = format!("/api/sandboxes/{}/exec/stream", sandbox.name);
    let opened = Arc::new(AtomicUsize::new(0));
    let ended = Arc::new(AtomicUsize::new(0));
    let all_open = Arc::new(Notify::new());
    let first_end = Arc::new(Notify::new());
    // Requests in flight at once: the relay looks each sandbox's daemon up in turn, and a
    // client that sent all 512 at once would time out waiting, not measure streaming.
    let gate = Arc::new(Semaphore::new(32));
    let t_start = now();
    let mut tasks = Vec::new();
    for i in 0..STREAMS {
        let (world, token, path, cmd) = (world.clone(), tokens[i / PER_TOKEN].clone(), path.clone(), cmd.clone());
        let (opened, ended, all_open, first_end, gate) =
            (opened.clone(), ended.clone(), all_open.clone(), first_end.clone(), gate.clone());
        let limit = Duration::from_secs(cfg.lines / 10 + 60);
        tasks.push(tokio::spawn(async move {
            let permit = gate.acquire_owned().await.map_err(|e| fail("the gate", e))?;
            let mut sse = world.relay.sse("POST", &path, Some(&token), Some(json!({"command": cmd}))).await;
            drop(permit);
            if sse.status != 200 {
                return Err(fail(format!("stream {i}"), format!("answered {}", sse.status)));
            }
            if opened.fetch_add(1, Ordering::SeqCst) + 1 == STREAMS {
                all_open.notify_one();
            }
            let mut lines = Lines::default();
            while let Some(ev) = sse.next(limit).await {
                let at = now();
                match ev.event.as_str() {
                    "stdout" => lines.feed(ev.json()["data"].as_str().unwrap_or_default(), at),
                    "result" => break,
                    _ => {}
                }
            }
            ended.fetch_add(1, Ordering::SeqCst);
            first_end.notify_one();
            Ok::<_, crate::error::BenchError>(lines)
        }));
    }
    tokio::time::timeout(Duration::from_secs(cfg.lines / 10 + 30), all_open.notified())
        .await
        .map_err(|_| fail("opening the streams", format!("only {} opened", opened.load(Ordering::SeqCst))))?;
    let t_open = now();
    let gone = ended.load(Ordering::SeqCst);
    if gone > 0 {
        return Err(fail(
            "opening the streams",
            format!(
                "{gone} had ended before the last opened, {:.1} s after the first: more lines needed",
                t_open - t_start
            ),
        ));
    }
    let cpu0 = procfs::cpu_seconds(relay_pid).ctx("the relay's CPU time")?;
    // While all are open, one more is refused.
    let r = world.relay.call("POST", &path, Some(&tokens[STREAMS / PER_TOKEN]), Some(json!({"command": "true"}))).await;
    let body = r.json();
    let refused = Refused {
        status: r.status,
        code: body["error"]["code"].as_str().unwrap_or_default().to_string(),
        message: body["error"]["message"].as_str().unwrap_or_default().to_string(),
    };
    if refused.status != 429 || !refused.message.contains("HANGAR_STREAM_MAX_TOTAL") {
        return Err(fail(
            "the 513th stream",
            format!("answered {} {body}, want 429 naming HANGAR_STREAM_MAX_TOTAL", r.status),
        ));
    }
    let mut relay_rss_kib = procfs::rss_kib(relay_pid).ctx("the relay's resident memory")?;
    let sample = async {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if let Ok(kib) = procfs::rss_kib(relay_pid) {
                relay_rss_kib = relay_rss_kib.max(kib);
            }
        }
    };
    tokio::select! {
        _ = first_end.notified() => {}
        _ = sample => {}
    }
    let t_end = now();
    let cpu = procfs::cpu_seconds(relay_pid).ctx("the relay's CPU time")? - cpu0;
    let window = t_end - t_open;
    if window < 1.0 {
        return Err(fail(
            "the scale window",
            format!("all streams were open for only {window:.2} s: more lines needed"),
        ));
    }
    let (mut delays, mut open_delays) = (Vec::new(), Vec::new());
    let mut last_first_line = t_start;
    for (i, t) in tasks.into_iter().enumerate() {
        let lines = t.await.map_err(|e| fail(format!("stream {i}"), e))??;
        lines.check_complete(&format!("stream {i}"), cfg.lines)?;
        last_first_line = last_first_line.max(lines.first_at.unwrap_or(t_start));
        for (d, stamp) in lines.delays_ms.iter().zip(&lines.stamps) {
            if (t_open..t_end).contains(stamp) {
                open_delays.push(*d);
            }
        }
        delays.extend(lines.delays_ms);
    }
    // After the streams, so that its 512 exited shells cannot weigh on them.
    let floor_first_lines_seconds = floor(&container_of(&sandbox), &command(2))?;
    let cpu_percent = cpu / window * 100.0;
    Ok(Report {
        streams: STREAMS,
        lines_per_stream: cfg.lines,
        open_seconds: round3(t_open - t_start),
        first_lines_seconds: round3(last_first_line - t_start),
        floor_first_lines_seconds,
        window_seconds: round3(window),
        line_delay_ms: Summary::of("scale", &delays)?,
        line_delay_all_open_ms: Summary::of("scale, all open", &open_delays)?,
        relay_cpu_percent: round3(cpu_percent),
        relay_cpu_percent_per_stream: round3(cpu_percent / STREAMS as f64),
        relay_rss_idle_kib,
        relay_rss_kib,
        refused,
    })
}

/// Starts `STREAMS` copies of `bash -lc command` at once from one loop in `container` and
/// returns the seconds from the loop's start to the last copy's first line (the first stamp
/// each prints).
fn floor(container: &str, command: &str) -> Result<f64> {
    let script = format!(
        r#"d=/tmp/hangar-scale-floor; rm -rf $d; mkdir -p $d; start=$EPOCHREALTIME
for i in $(seq {STREAMS}); do bash -lc "$1" > $d/$i & done
wait; echo "$start"
for f in $d/*; do read -r n t < "$f"; echo "$t"; done
rm -rf $d"#
    );
    let out = hangar_e2e::docker::docker(&["exec", container, "bash", "-c", &script, "floor", command]);
    if !out.status.success() {
        return Err(fail("the floor of opening", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let stamps = text.split_whitespace().map(str::parse::<f64>).collect::<std::result::Result<Vec<_>, _>>();
    let stamps = stamps.map_err(|e| fail("the floor of opening", format!("{e} in {text:?}")))?;
    match stamps.split_first() {
        Some((start, firsts)) if firsts.len() == STREAMS => {
            Ok(round3(firsts.iter().fold(*start, |a, b| a.max(*b)) - start))
        }
        _ => Err(fail("the floor of opening", format!("want a start and {STREAMS} first lines, got {text:?}"))),
    }
}
