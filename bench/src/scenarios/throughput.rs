//! Scenario 4a, throughput: a process writing as fast as it can (`head -c N /dev/zero`), read
//! through envd's `Start` stream over gRPC with no rate limit, beside the same bytes through a
//! plain pipe to /dev/null (`head -c N /dev/zero | cat > /dev/null`) and beside the same path
//! without hangar: the pipe through a minimal copier into a loopback socket the bench reads
//! (`crate::floor`), which is what any daemon between the pipe and a client must at least do.
//! That floor's reader only counts bytes; the second floor is read by the same gRPC client as
//! hangar: a minimal copier serving the pipe as the `Start` stream, one data event a read with
//! no copy in user space. The goal's ratio is to that floor, whose client is hangar's.
//!
//! Two gRPC clients read the stream: one that accepts HTTP/2 frames as large as the relay's
//! client does ([`RELAY_MAX_FRAME`]), which is how hangar itself reads a daemon, and one with
//! HTTP/2's default of 16 KiB, as an outside client opens. A server may send no frame larger
//! than its client allows, and each frame costs the daemon a system call of its own.

use std::time::Instant;

use hangar_e2e::{pb::process_event, procfs, start_req};
use hangar_proto::process::process_client::ProcessClient;
use serde::Serialize;
use tokio::io::AsyncReadExt;
use tonic::transport::Channel;

use crate::{
    error::{fail, IoContext, Result},
    stats::{percentile, ratio, round3},
    world::{channel_to, host_envd},
};

/// The largest HTTP/2 frame the relay's client accepts from a daemon (`relay/src/envd/mod.rs`,
/// `MAX_FRAME`).
pub const RELAY_MAX_FRAME: u32 = 256 * 1024;

pub struct Config {
    pub bytes: u64,
    pub runs: usize,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub bytes: u64,
    pub runs: usize,
    /// Median of the runs, MiB/s, read by a client that accepts frames as large as the relay's.
    pub hangar_mib_s: f64,
    pub pipe_mib_s: f64,
    pub hangar_vs_pipe: Option<f64>,
    /// The same bytes through one minimal copier into a socket the bench reads.
    pub floor_mib_s: f64,
    pub floor_vs_pipe: Option<f64>,
    pub hangar_vs_floor: Option<f64>,
    /// The daemon's CPU time per GiB streamed, in seconds (median run).
    pub daemon_cpu_s_per_gib: f64,
    /// The copier's CPU time per GiB (median run): the floor of the daemon's.
    pub floor_cpu_s_per_gib: f64,
    /// The gRPC client's CPU time per GiB, and the floor's reader's (which only counts bytes):
    /// they share the machine's cores with the daemon and the copier.
    pub client_cpu_s_per_gib: f64,
    pub floor_reader_cpu_s_per_gib: f64,
    /// The same bytes through a minimal copier serving them as the `Start` stream, read by the
    /// same gRPC client as hangar's row (`hangar-bench-copy-grpc`).
    pub grpc_floor_mib_s: f64,
    pub hangar_vs_grpc_floor: Option<f64>,
    /// That copier's CPU time per GiB, and its client's.
    pub grpc_floor_cpu_s_per_gib: f64,
    pub grpc_floor_client_cpu_s_per_gib: f64,
    /// The same stream read by a client with HTTP/2's default 16 KiB frames.
    pub default_frames_mib_s: f64,
    pub default_frames_vs_floor: Option<f64>,
    pub default_frames_daemon_cpu_s_per_gib: f64,
    pub hangar_runs_mib_s: Vec<f64>,
    pub default_frames_runs_mib_s: Vec<f64>,
    pub pipe_runs_mib_s: Vec<f64>,
    pub floor_runs_mib_s: Vec<f64>,
    pub grpc_floor_runs_mib_s: Vec<f64>,
}

/// One run through a `Start` stream.
struct Run {
    mib_s: f64,
    /// The server's (the daemon's, or the gRPC copier's) and the client's CPU seconds per GiB.
    daemon_cpu: f64,
    client_cpu: f64,
}

/// One figure of each run.
fn each(runs: &[Run], figure: impl Fn(&Run) -> f64) -> Vec<f64> {
    runs.iter().map(figure).collect()
}

pub async fn run(cfg: &Config) -> Result<Report> {
    let envd = host_envd(&[]);
    let mut relay_like = ProcessClient::new(channel_to(&envd.url(), Some(RELAY_MAX_FRAME)).await?);
    let mut default_frames = ProcessClient::new(channel_to(&envd.url(), None).await?);
    let n = cfg.bytes.to_string();
    let (mut hangar, mut default, mut grpc_floor, mut pipe, mut floor, mut floor_cpu, mut floor_reader_cpu) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..cfg.runs {
        hangar.push(through_start(envd.pid(), &mut relay_like, cfg.bytes).await?);
        default.push(through_start(envd.pid(), &mut default_frames, cfg.bytes).await?);

        let mut head = tokio::process::Command::new("head");
        head.args(["-c", &n, "/dev/zero"]);
        let copier = crate::floor::grpc_copier(head).await?;
        let mut client = ProcessClient::new(channel_to(&copier.url, Some(RELAY_MAX_FRAME)).await?);
        grpc_floor.push(through_start(copier.pid, &mut client, cfg.bytes).await?);

        let t = Instant::now();
        let status = std::process::Command::new("bash")
            .args(["-c", &format!("head -c {n} /dev/zero | cat > /dev/null")])
            .status()
            .ctx("running the pipe")?;
        if !status.success() {
            return Err(fail("the pipe", status));
        }
        pipe.push(mib_s(cfg.bytes, t.elapsed().as_secs_f64()));

        let own0 = own_cpu_seconds()?;
        let t = Instant::now();
        let mut head = tokio::process::Command::new("head");
        head.args(["-c", &n, "/dev/zero"]);
        let mut path = crate::floor::through_copies(crate::floor::First::Host(head), 1).await?;
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0u64;
        loop {
            let k = path.stream.read(&mut buf).await.ctx("reading the copier's socket")?;
            if k == 0 {
                break;
            }
            got += k as u64;
        }
        if got != cfg.bytes {
            return Err(fail("the copier", format!("{got} of {} bytes", cfg.bytes)));
        }
        floor.push(mib_s(cfg.bytes, t.elapsed().as_secs_f64()));
        floor_reader_cpu.push(per_gib(own_cpu_seconds()? - own0, cfg.bytes));
        floor_cpu.push(per_gib(path.host_copiers_cpu_seconds().await?, cfg.bytes));
    }
    let (rates, defaults) = (each(&hangar, |r| r.mib_s), each(&default, |r| r.mib_s));
    let grpc_rates = each(&grpc_floor, |r| r.mib_s);
    let (h, d, p, f, g) = (median(&rates), median(&defaults), median(&pipe), median(&floor), median(&grpc_rates));
    Ok(Report {
        bytes: cfg.bytes,
        runs: cfg.runs,
        hangar_mib_s: h,
        pipe_mib_s: p,
        hangar_vs_pipe: ratio(h, p),
        floor_mib_s: f,
        floor_vs_pipe: ratio(f, p),
        hangar_vs_floor: ratio(h, f),
        daemon_cpu_s_per_gib: median(&each(&hangar, |r| r.daemon_cpu)),
        floor_cpu_s_per_gib: median(&floor_cpu),
        client_cpu_s_per_gib: median(&each(&hangar, |r| r.client_cpu)),
        floor_reader_cpu_s_per_gib: median(&floor_reader_cpu),
        grpc_floor_mib_s: g,
        hangar_vs_grpc_floor: ratio(h, g),
        grpc_floor_cpu_s_per_gib: median(&each(&grpc_floor, |r| r.daemon_cpu)),
        grpc_floor_client_cpu_s_per_gib: median(&each(&grpc_floor, |r| r.client_cpu)),
        default_frames_mib_s: d,
        default_frames_vs_floor: ratio(d, f),
        default_frames_daemon_cpu_s_per_gib: median(&each(&default, |r| r.daemon_cpu)),
        hangar_runs_mib_s: rates,
        default_frames_runs_mib_s: defaults,
        pipe_runs_mib_s: pipe,
        floor_runs_mib_s: floor,
        grpc_floor_runs_mib_s: grpc_rates,
    })
}

/// `bytes` from `head -c` through a `Start` stream served by `server` (the daemon, or the gRPC
/// copier, which ignores the request and serves its own input), read by `client`.
async fn through_start(server: u32, client: &mut ProcessClient<Channel>, bytes: u64) -> Result<Run> {
    let cpu0 = procfs::cpu_seconds(server).ctx("the server's CPU time")?;
    let own0 = own_cpu_seconds()?;
    let t = Instant::now();
    let mut stream = client
        .start(start_req("head", &["-c", &bytes.to_string(), "/dev/zero"]))
        .await
        .map_err(|e| fail("Start", e))?
        .into_inner();
    let mut got = 0u64;
    let mut ended = false;
    while let Some(msg) = stream.message().await.map_err(|e| fail("the Start stream", e))? {
        match msg.event.and_then(|e| e.event) {
            Some(process_event::Event::Data(d)) => {
                if let Some(process_event::data_event::Output::Stdout(b)) = d.output {
                    got += b.len() as u64;
                }
            }
            Some(process_event::Event::End(_)) => ended = true,
            _ => {}
        }
    }
    let secs = t.elapsed().as_secs_f64();
    if !ended || got != bytes {
        return Err(fail("the Start stream", format!("{got} of {bytes} bytes, ended: {ended}")));
    }
    let cpu = procfs::cpu_seconds(server).ctx("the server's CPU time")? - cpu0;
    Ok(Run {
        mib_s: mib_s(bytes, secs),
        daemon_cpu: per_gib(cpu, bytes),
        client_cpu: per_gib(own_cpu_seconds()? - own0, bytes),
    })
}

/// The bench's own CPU time: while a path runs, only its client is busy in the bench.
fn own_cpu_seconds() -> Result<f64> {
    procfs::cpu_seconds(std::process::id()).ctx("the bench's own CPU time")
}

fn per_gib(secs: f64, bytes: u64) -> f64 {
    round3(secs * (1u64 << 30) as f64 / bytes as f64)
}

fn mib_s(bytes: u64, secs: f64) -> f64 {
    round3(bytes as f64 / (1024.0 * 1024.0) / secs.max(1e-9))
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        0.0
    } else {
        percentile(&s, 50.0)
    }
}
