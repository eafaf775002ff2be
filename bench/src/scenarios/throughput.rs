//! Scenario 4a, throughput: a process writing as fast as it can (`head -c N /dev/zero`), read
//! through envd's `Start` stream over gRPC with no rate limit, beside the same bytes through a
//! plain pipe to /dev/null (`head -c N /dev/zero | cat > /dev/null`) and beside the same path
//! without hangar: the pipe through a minimal copier into a loopback socket the bench reads
//! (`crate::floor`), which is what any daemon between the pipe and a client must at least do.

use std::time::Instant;

use hangar_e2e::{pb::process_event, procfs, start_req};
use serde::Serialize;
use tokio::io::AsyncReadExt;

use crate::{
    error::{fail, IoContext, Result},
    stats::{percentile, ratio, round3},
    world::host_envd,
};

pub struct Config {
    pub bytes: u64,
    pub runs: usize,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub bytes: u64,
    pub runs: usize,
    /// Median of the runs, MiB/s.
    pub hangar_mib_s: f64,
    pub pipe_mib_s: f64,
    pub hangar_vs_pipe: Option<f64>,
    /// The same bytes through one minimal copier into a socket the bench reads.
    pub floor_mib_s: f64,
    pub floor_vs_pipe: Option<f64>,
    pub hangar_vs_floor: Option<f64>,
    /// The daemon's CPU time per GiB streamed, in seconds (median run).
    pub daemon_cpu_s_per_gib: f64,
    pub hangar_runs_mib_s: Vec<f64>,
    pub pipe_runs_mib_s: Vec<f64>,
    pub floor_runs_mib_s: Vec<f64>,
}

pub async fn run(cfg: &Config) -> Result<Report> {
    let envd = host_envd(&[]);
    let mut client = envd.process().await;
    let n = cfg.bytes.to_string();
    let (mut hangar, mut pipe, mut floor, mut cpu) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..cfg.runs {
        let cpu0 = procfs::cpu_seconds(envd.pid()).ctx("the daemon's CPU time")?;
        let t = Instant::now();
        let mut stream =
            client.start(start_req("head", &["-c", &n, "/dev/zero"])).await.map_err(|e| fail("Start", e))?.into_inner();
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
        if !ended || got != cfg.bytes {
            return Err(fail("the Start stream", format!("{got} of {} bytes, ended: {ended}", cfg.bytes)));
        }
        hangar.push(mib_s(cfg.bytes, secs));
        cpu.push(
            (procfs::cpu_seconds(envd.pid()).ctx("the daemon's CPU time")? - cpu0) * (1u64 << 30) as f64
                / cfg.bytes as f64,
        );

        let t = Instant::now();
        let status = std::process::Command::new("bash")
            .args(["-c", &format!("head -c {n} /dev/zero | cat > /dev/null")])
            .status()
            .ctx("running the pipe")?;
        if !status.success() {
            return Err(fail("the pipe", status));
        }
        pipe.push(mib_s(cfg.bytes, t.elapsed().as_secs_f64()));

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
    }
    let (h, p, f) = (median(&hangar), median(&pipe), median(&floor));
    Ok(Report {
        bytes: cfg.bytes,
        runs: cfg.runs,
        hangar_mib_s: h,
        pipe_mib_s: p,
        hangar_vs_pipe: ratio(h, p),
        floor_mib_s: f,
        floor_vs_pipe: ratio(f, p),
        hangar_vs_floor: ratio(h, f),
        daemon_cpu_s_per_gib: median(&cpu),
        hangar_runs_mib_s: hangar,
        pipe_runs_mib_s: pipe,
        floor_runs_mib_s: floor,
    })
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
