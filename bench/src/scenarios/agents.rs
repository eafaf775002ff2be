//! Scenario 9, the fleet under load (item 9 of "What is measured" in docs/performance.md): N
//! agent sessions across S sandboxes of one relay, each in a working directory of its own, each a
//! real turn under the supervisor whose harness is `hangar-bench-agent-writer` (one small process
//! per agent, no forks: it writes Claude Code stream-json lines a line every 200 ms to 1 s, or at
//! a fixed rate, a 64 KiB tool result now and then and one 1 MiB line, each stamped with its
//! writing time in a field its first event keeps). Beside them: an unrelated `exec/stream`
//! printing a line every 10 ms (set against the same stream with no agents), a reader of
//! `/api/fleet/stream`, `GET /api/fleet` read in a loop, and 10 SSE followers on tokens of their
//! own, each following sampled sessions' `events/stream` (as many as the stream limits leave).
//!
//! Measured per case: each line's writing to its event's recording (`ts`, every line of every
//! session, read back from the store once the turns ended) and to its arrival at a follower; the
//! unrelated stream's per-line delay over its idle value; the fleet stream's update delay beyond
//! its 2 s coalescing; fleet read latency; the relay's CPU and resident memory and the machine's
//! CPU while every agent writes; the relay's bytes written (`/proc/<pid>/io`, its SQLite) per
//! event; the writers' own CPU (each says its `getrusage` in its `result` line); and turns that
//! did not end `succeeded`, counted and named (they fail the run once it is written, as does a
//! line whose event is missing, which fails its case).

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use hangar_e2e::{files::Scratch, procfs, relay::ADMIN};
use serde::Serialize;
use serde_json::{json, Value};

use crate::{
    error::{fail, IoContext, Result},
    stats::{now, round3, significant, Lines, Summary},
    world::{image, RelayWorld},
};

/// Where bench/run's images carry the writer (images/build-test-images, `HANGAR_IMAGE_ALSO`).
const IMAGE_WRITER: &str = "/usr/local/bin/hangar-bench-agent-writer";
/// Readers following sessions, each on a token of its own.
pub const FOLLOWERS: usize = 10;
/// The relay's default stream limits (operations.md).
pub const DEFAULT_MAX_TOTAL: usize = 512;
pub const DEFAULT_PER_TOKEN: usize = 16;
/// The total a user would raise it to for 1,000 agents (each live turn's log is a stream).
pub const RAISED_MAX_TOTAL: usize = 2048;
/// The kernel's limit on inotify instances per user, raised with the stream limits.
const INOTIFY_INSTANCES: &str = "/proc/sys/fs/inotify/max_user_instances";
const RAISED_INOTIFY_INSTANCES: u64 = 4096;
/// The unrelated stream's pace.
const UNRELATED_EVERY_MS: u64 = 10;
/// Session starts in flight at once on the ramp, as a script starting a fleet would have.
const START_IN_FLIGHT: usize = 8;
/// How often the fleet is read during the load.
const FLEET_READ_EVERY: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Local,
    Docker,
}

/// How fast each agent writes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Pace {
    /// A line every 200 ms to 1 s, uniformly, as agent CLIs do.
    Mix,
    /// A line every this many ms.
    Every(u64),
}

impl Pace {
    fn range_ms(self) -> (u64, u64) {
        match self {
            Pace::Mix => (200, 1000),
            Pace::Every(ms) => (ms, ms),
        }
    }

    fn label(self) -> String {
        match self {
            Pace::Mix => "a line every 0.2 to 1 s".into(),
            Pace::Every(ms) => format!("{} lines/s each", significant(1000.0 / ms as f64, 3)),
        }
    }

    /// Lines a second, per agent, on average.
    fn per_second(self) -> f64 {
        let (a, b) = self.range_ms();
        2000.0 / (a + b) as f64
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub provider: Provider,
    pub agents: usize,
    pub sandboxes: usize,
    pub pace: Pace,
    /// Stream limits raised (`HANGAR_STREAM_MAX_TOTAL`), as a user would for this many agents.
    pub raised: bool,
}

impl Case {
    /// `provider:N:S[:ms][:raised]`; `None` if it does not parse.
    pub fn parse(spec: &str) -> Option<Case> {
        let parts: Vec<&str> = spec.trim().split(':').collect();
        let provider = match *parts.first()? {
            "local" => Provider::Local,
            "docker" => Provider::Docker,
            _ => return None,
        };
        let agents = parts.get(1)?.parse().ok()?;
        let sandboxes: usize = parts.get(2)?.parse().ok()?;
        let pace = match parts.get(3) {
            Some(ms) if *ms != "mix" => Pace::Every(ms.parse().ok()?),
            _ => Pace::Mix,
        };
        let raised = parts.get(4) == Some(&"raised");
        (sandboxes > 0 && agents >= sandboxes).then_some(Case { provider, agents, sandboxes, pace, raised })
    }
}

pub struct Config {
    pub cases: Vec<Case>,
    /// How long each agent writes.
    pub seconds: f64,
    /// Over how long the sessions are started.
    pub ramp: f64,
    /// The unrelated stream's idle run, in lines.
    pub idle_lines: u64,
}

impl Config {
    /// The quick or full sizes; `HANGAR_BENCH_AGENTS` (`provider:N:S[:ms][:raised]`, comma
    /// separated: `local:50:5,docker:200:20:200`) runs those cases instead, at the chosen sizes'
    /// durations. A case that does not parse is an error naming it, not a case left out.
    pub fn new(quick: bool) -> Result<Config> {
        let mut cfg = Config::sizes(quick);
        if let Ok(spec) = std::env::var("HANGAR_BENCH_AGENTS") {
            cfg.cases = spec
                .split(',')
                .map(|c| {
                    Case::parse(c).ok_or_else(|| {
                        fail("HANGAR_BENCH_AGENTS", format!("{c:?} is not provider:N:S[:ms|mix][:raised]"))
                    })
                })
                .collect::<Result<_>>()?;
        }
        Ok(cfg)
    }

    fn sizes(quick: bool) -> Config {
        if quick {
            let case = |provider| Case { provider, agents: 5, sandboxes: 1, pace: Pace::Mix, raised: false };
            return Config {
                cases: vec![case(Provider::Local), case(Provider::Docker)],
                seconds: 8.0,
                ramp: 1.0,
                idle_lines: 200,
            };
        }
        let mut cases = Vec::new();
        for provider in [Provider::Local, Provider::Docker] {
            for agents in [50, 200, 500] {
                for sandboxes in [agents / 10, 1] {
                    cases.push(Case { provider, agents, sandboxes, pace: Pace::Mix, raised: false });
                }
            }
            for sandboxes in [100, 1] {
                cases.push(Case { provider, agents: 1000, sandboxes, pace: Pace::Mix, raised: true });
            }
            // The goals' fixed rates: 200 agents at 5 lines/s on 20 sandboxes and 500 at 1 on 50.
            // (200 local sandboxes would be 200 daemons' inotify instances, past the kernel's 128
            // a user: the fleet read at 200 sandboxes is scenario 7's.)
            cases.push(Case { provider, agents: 200, sandboxes: 20, pace: Pace::Every(200), raised: false });
            cases.push(Case { provider, agents: 500, sandboxes: 50, pace: Pace::Every(1000), raised: false });
        }
        Config { cases, seconds: 45.0, ramp: 10.0, idle_lines: 1000 }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Goal {
    pub what: String,
    pub value: f64,
    pub limit: f64,
    pub met: bool,
}

fn goal(what: impl Into<String>, value: f64, limit: f64) -> Goal {
    Goal { what: what.into(), value, limit, met: value <= limit }
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub provider: Provider,
    pub agents: usize,
    pub sandboxes: usize,
    pub pace: String,
    /// Lines a second from all agents, nominal.
    pub lines_per_second: f64,
    pub stream_max_total: usize,
    /// The limits raised for this case, as a user would (none: the defaults).
    pub raised_limits: Vec<String>,
    pub seconds: f64,
    /// Stamped lines written, and events recorded (hangar's own included).
    pub lines: usize,
    pub events: usize,
    /// From a line's writing to its (first) event's `ts`, every line of every session, ms.
    pub recorded_ms: Summary,
    /// From a line's writing to its event's arrival at a follower, ms.
    pub delivered_ms: Summary,
    pub followed_sessions: usize,
    /// Turns whose log the relay polled rather than followed (the stream limit reached).
    pub polled_turns: usize,
    /// Why, from the relay's `turn_polled` log lines, counted (with `HANGAR_BENCH_RELAY_LOG=info`).
    pub polled_why: Vec<(String, usize)>,
    /// The unrelated stream's per-line delay alone (before the agents) and during the load, ms.
    pub unrelated_idle_ms: Summary,
    pub unrelated_loaded_ms: Summary,
    /// Loaded over idle, p50 and p99.
    pub unrelated_ratio: [Option<f64>; 2],
    /// A fleet stream `agent` update's arrival beyond the later of its unit's previous update
    /// plus 2 s and the change it carries (`last_activity_at`), ms.
    pub fleet_update_excess_ms: Option<Summary>,
    /// `GET /api/fleet` (admin, every unit) during the load, ms.
    pub fleet_read_ms: Summary,
    /// How long starting the sessions took (planned: the config's `ramp`).
    pub ramp_seconds: f64,
    /// From the first session's request until the last turn was running (its `started_at`):
    /// how fast turns start. A window that opens before it has turns starting inside it.
    pub all_running_seconds: f64,
    /// While every agent wrote (the window after the ramp).
    pub window_seconds: f64,
    /// The relay's CPU serving the unrelated stream alone, before the agents, % of a core.
    pub relay_cpu_idle_percent: f64,
    pub relay_cpu_percent: f64,
    /// The relay's CPU time per 1,000 events recorded in the window, ms.
    pub relay_cpu_ms_per_1000_events: f64,
    pub relay_rss_kib: u64,
    /// The whole machine's CPU in the window, % of all its cores.
    /// The same while the unrelated stream ran alone, before the agents.
    pub machine_cpu_idle_percent: f64,
    pub machine_cpu_percent: f64,
    /// The writers' own CPU, all of them together, % of one core over their run; and per line, µs.
    pub writers_cpu_percent: f64,
    pub writer_cpu_us_per_line: f64,
    /// The relay's bytes written to storage in the window (`/proc/<pid>/io` `write_bytes`: its
    /// SQLite) per event recorded in it.
    pub sqlite_bytes_per_event: f64,
    pub turns_not_succeeded: usize,
    /// The first few of them: the turn's state, reason and detail, or what its events lack.
    pub not_succeeded_why: Vec<String>,
    pub goals: Vec<Goal>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub seconds: f64,
    pub ramp: f64,
    pub followers: usize,
    pub rows: Vec<Row>,
    /// Cases that ended without a row: an error or a panic, in the order they ran.
    pub failed: Vec<Failed>,
}

/// A case that could not be measured, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Failed {
    pub provider: Provider,
    pub agents: usize,
    pub sandboxes: usize,
    pub pace: String,
    pub error: String,
}

/// Runs every case; `after_case` sees the report so far as each case ends, so that a later case
/// (or the machine) failing loses none before it. A case's error or panic is its `failed` entry,
/// and the run goes on with the next case.
pub async fn run(cfg: &Config, mut after_case: impl FnMut(&Report)) -> Result<Report> {
    let writer = writer_bin()?;
    let mut report =
        Report { seconds: cfg.seconds, ramp: cfg.ramp, followers: FOLLOWERS, rows: vec![], failed: vec![] };
    for case in &cfg.cases {
        eprintln!(
            "hangar-bench: agents: {} agents on {} {:?} sandboxes, {}",
            case.agents,
            case.sandboxes,
            case.provider,
            case.pace.label()
        );
        // The case's world (relay, daemons, containers) is dropped as the panic unwinds.
        let ended = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(run_case(cfg, case, &writer))).await;
        let error = match ended {
            Ok(Ok(row)) => {
                report.rows.push(row);
                None
            }
            Ok(Err(e)) => Some(e.to_string()),
            Err(panic) => Some(format!("panicked: {}", panic_text(panic.as_ref()))),
        };
        if let Some(error) = error {
            eprintln!("hangar-bench: agents: the case failed: {error}");
            let (provider, agents, sandboxes, pace) = (case.provider, case.agents, case.sandboxes, case.pace.label());
            report.failed.push(Failed { provider, agents, sandboxes, pace, error });
        }
        after_case(&report);
    }
    Ok(report)
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// The writer built beside this bench (`HANGAR_BENCH_AGENT_WRITER` names another).
fn writer_bin() -> Result<std::path::PathBuf> {
    let p = match std::env::var_os("HANGAR_BENCH_AGENT_WRITER") {
        Some(p) => std::path::PathBuf::from(p),
        None => std::env::current_exe().ctx("the bench's own path")?.with_file_name("hangar-bench-agent-writer"),
    };
    if !p.is_file() {
        return Err(fail("the agents' writer", format!("{} is missing (cargo build -p hangar-bench)", p.display())));
    }
    Ok(p)
}

/// The harness profile running the writer at `path`.
fn harnesses(path: &str) -> String {
    format!("[harness.writer]\nnew = [\"{path}\"]\nformat = \"claude-stream-json\"\n")
}

struct Sb {
    name: String,
    workdir: String,
}

async fn post(world: &RelayWorld, token: &str, path: &str, body: Value) -> Result<Value> {
    let r = world.relay.call("POST", path, Some(token), Some(body)).await;
    let v = r.json();
    if r.status != 201 && r.status != 200 {
        return Err(fail(format!("POST {path}"), format!("{}: {v}", r.status)));
    }
    Ok(v)
}

async fn get(world: &RelayWorld, path: &str) -> Result<Value> {
    let r = world.relay.call("GET", path, Some(ADMIN), None).await;
    if r.status != 200 {
        return Err(fail(format!("GET {path}"), r.status));
    }
    Ok(r.json())
}

/// Runs `command` in `sandbox` through the relay's exec, as the admin; its stdout.
async fn exec(world: &RelayWorld, sandbox: &str, command: &str) -> Result<String> {
    let path = format!("/api/sandboxes/{sandbox}/exec");
    let r = world.relay.call("POST", &path, Some(ADMIN), Some(json!({ "command": command }))).await;
    let v = r.json();
    if r.status != 200 || v["exit_code"] != 0 {
        return Err(fail(format!("POST {path}"), format!("{}: {v}", r.status)));
    }
    Ok(v["stdout"].as_str().unwrap_or_default().to_string())
}

/// The CPU counters of /proc/stat's first line: (busy, all), in ticks.
fn machine_ticks() -> Result<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/stat").ctx("reading /proc/stat")?;
    let v: Vec<u64> =
        s.lines().next().unwrap_or_default().split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    if v.len() < 5 {
        return Err(fail("/proc/stat", "no cpu line"));
    }
    let all: u64 = v.iter().take(8).sum();
    Ok((all - v[3] - v[4], all))
}

/// A kernel setting raised for a case and put back when dropped.
struct Sysctl {
    path: &'static str,
    was: u64,
}

impl Sysctl {
    fn raise(path: &'static str, to: u64) -> Result<Sysctl> {
        let was: u64 = std::fs::read_to_string(path)
            .ctx(format!("reading {path}"))?
            .trim()
            .parse()
            .map_err(|e| fail(format!("reading {path}"), e))?;
        if was < to {
            std::fs::write(path, to.to_string()).ctx(format!("raising {path} (the bench runs as root)"))?;
        }
        Ok(Sysctl { path, was })
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path, self.was.to_string());
    }
}

/// The machine's busy share between two /proc/stat readings, % of all its cores.
fn busy_percent(a: (u64, u64), b: (u64, u64)) -> f64 {
    b.0.saturating_sub(a.0) as f64 / b.1.saturating_sub(a.1).max(1) as f64 * 100.0
}

/// The bytes a process caused to be written to storage (`write_bytes` of /proc/<pid>/io).
fn write_bytes(pid: u32) -> Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/io")).ctx("reading the relay's /proc/<pid>/io")?;
    s.lines()
        .find_map(|l| l.strip_prefix("write_bytes:")?.trim().parse().ok())
        .ok_or_else(|| fail("the relay's /proc/<pid>/io", "no write_bytes"))
}

/// The stamps `hb:<n>:<seconds>` in `text`, in order.
pub fn stamps_in(text: &str) -> Vec<(u64, f64)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("hb:") {
        rest = &rest[i + 3..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || rest.as_bytes().get(digits) != Some(&b':') {
            continue;
        }
        let n = rest[..digits].parse::<u64>().ok();
        let tail = &rest[digits + 1..];
        let len = tail.bytes().take_while(|b| b.is_ascii_digit() || *b == b'.').count();
        if let (Some(n), Ok(t)) = (n, tail[..len].parse::<f64>()) {
            out.push((n, t));
        }
    }
    out
}

/// Each stamped line's first sighting: line number to (stamp, when seen).
#[derive(Default)]
struct Sightings(HashMap<u64, (f64, f64)>);

impl Sightings {
    fn see(&mut self, text: &str, at: f64) {
        for (n, t) in stamps_in(text) {
            self.0.entry(n).or_insert((t, at));
        }
    }

    /// Delays in ms, failing unless lines 1..=lines were all seen, each after it was written.
    fn delays(&self, what: &str, lines: u64) -> Result<Vec<f64>> {
        let mut out = Vec::with_capacity(lines as usize);
        for n in 1..=lines {
            let Some((t, at)) = self.0.get(&n) else {
                return Err(fail(what, format!("line {n} of {lines} made no event (lost)")));
            };
            if at < t {
                return Err(fail(what, format!("line {n}: written at {t}, seen at {at}")));
            }
            out.push((at - t) * 1000.0);
        }
        if self.0.len() as u64 != lines {
            return Err(fail(what, format!("{} stamped lines, the writer said {lines}", self.0.len())));
        }
        Ok(out)
    }
}

/// The `why` of each `turn_polled` line of the relay's log, counted, most first.
fn polled_reasons(log: &str) -> Vec<(String, usize)> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for line in log.lines().filter(|l| l.contains("event=\"turn_polled\"")) {
        let why = line.split_once("why=").map_or("", |(_, w)| w.trim());
        *counts.entry(why.trim_matches('"').to_string()).or_default() += 1;
    }
    let mut v: Vec<(String, usize)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// `lines=` and `cpu_us=` from the writer's result text.
fn writer_tally(text: &str) -> Option<(u64, u64)> {
    let field = |k: &str| text.split_whitespace().find_map(|w| w.strip_prefix(k)?.parse::<u64>().ok());
    Some((field("lines=")?, field("cpu_us=")?))
}

/// The unrelated command: a stamped line every 10 ms, without forking.
fn unrelated_command(lines: u64) -> String {
    let wait = UNRELATED_EVERY_MS as f64 / 1000.0;
    format!(r#"exec 3<> <(:); for i in $(seq {lines}); do read -t {wait} -u 3; echo "$i $EPOCHREALTIME"; done"#)
}

async fn unrelated(world: Arc<RelayWorld>, token: String, sandbox: String, lines: u64) -> Result<Vec<f64>> {
    let path = format!("/api/sandboxes/{sandbox}/exec/stream");
    let mut sse =
        world.relay.sse("POST", &path, Some(&token), Some(json!({"command": unrelated_command(lines)}))).await;
    if sse.status != 200 {
        return Err(fail(format!("POST {path}"), sse.status));
    }
    let mut got = Lines::default();
    let limit = Duration::from_secs(lines * UNRELATED_EVERY_MS / 1000 * 4 + 60);
    while let Some(ev) = sse.next(limit).await {
        let at = now();
        match ev.event.as_str() {
            "stdout" => got.feed(ev.json()["data"].as_str().unwrap_or_default(), at),
            "result" => break,
            _ => {}
        }
    }
    got.check_complete("the unrelated stream", lines)?;
    Ok(got.delays_ms)
}

/// Follows one session's events until its `close`: each stamped line's first arrival.
async fn follow(world: Arc<RelayWorld>, token: String, session: String) -> Result<Sightings> {
    let path = format!("/api/sessions/{session}/events/stream?since=0");
    let mut sse = world.relay.sse("GET", &path, Some(&token), None).await;
    if sse.status != 200 {
        return Err(fail(format!("GET {path}"), sse.status));
    }
    let mut seen = Sightings::default();
    loop {
        let Some(ev) = sse.next(Duration::from_secs(600)).await else {
            return Err(fail(format!("GET {path}"), "ended without close"));
        };
        let at = now();
        if ev.event == "close" {
            return Ok(seen);
        }
        seen.see(&ev.data, at);
    }
}

/// Reads the fleet stream until `stop`: each `agent` update's delay beyond its coalescing.
async fn fleet_stream(world: Arc<RelayWorld>, stop: Arc<AtomicBool>) -> Result<Vec<f64>> {
    const PATH: &str = "/api/fleet/stream?include_stopped=true";
    let mut sse = world.relay.sse("GET", PATH, Some(ADMIN), None).await;
    if sse.status != 200 {
        return Err(fail(format!("GET {PATH}"), sse.status));
    }
    let mut last: HashMap<String, (f64, f64)> = HashMap::new();
    let mut excess = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let next = tokio::time::timeout(Duration::from_millis(500), sse.next(Duration::from_secs(3600))).await;
        let Ok(ev) = next else { continue };
        let Some(ev) = ev else { return Err(fail(format!("GET {PATH}"), "ended early")) };
        let at = now();
        if ev.event != "agent" {
            continue;
        }
        let unit = ev.json();
        let Some(id) = unit["id"].as_str() else { continue };
        // Every update starts the unit's coalescing again, whatever it carries; one that carries
        // a newer change (`last_activity_at`) is timed.
        let change = unit["last_activity_at"].as_f64();
        let prev = last.insert(id.to_string(), (at, change.unwrap_or(f64::NEG_INFINITY)));
        match (prev, change) {
            (Some((prev_at, prev_change)), Some(change)) if change > prev_change => {
                excess.push((at - (prev_at + 2.0).max(change)) * 1000.0);
            }
            (None, Some(change)) => excess.push((at - change) * 1000.0),
            _ => {}
        }
    }
    Ok(excess)
}

/// Reads `GET /api/fleet` every `FLEET_READ_EVERY` until `stop`.
async fn fleet_reads(world: Arc<RelayWorld>, stop: Arc<AtomicBool>, units: usize) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let t = Instant::now();
        let r = world.relay.call("GET", "/api/fleet?include_stopped=true", Some(ADMIN), None).await;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        let got = r.json()["units"].as_array().map_or(0, Vec::len);
        if r.status != 200 || got < units {
            return Err(fail("GET /api/fleet", format!("{}: {got} units, want {units} or more", r.status)));
        }
        out.push(ms);
        tokio::time::sleep(FLEET_READ_EVERY).await;
    }
    Ok(out)
}

fn joined<T>(r: std::result::Result<Result<T>, tokio::task::JoinError>) -> Result<T> {
    r.map_err(|e| fail("a task of the agents scenario", e))?
}

async fn run_case(cfg: &Config, case: &Case, writer: &std::path::Path) -> Result<Row> {
    let scratch = Scratch::new("bench-agents");
    let writer_path = match case.provider {
        Provider::Local => {
            // Isolated local sandboxes see the host's filesystem as an unprivileged user does.
            let p = scratch.join("hangar-bench-agent-writer");
            std::fs::copy(writer, &p).ctx(format!("copying the writer to {}", p.display()))?;
            hangar_e2e::files::chmod(&p, 0o755);
            hangar_e2e::files::chmod(scratch.path(), 0o755);
            p.to_string_lossy().into_owned()
        }
        Provider::Docker => IMAGE_WRITER.to_string(),
    };
    let file = scratch.join("harnesses.toml");
    std::fs::write(&file, harnesses(&writer_path)).ctx(format!("writing {}", file.display()))?;
    let file = file.to_string_lossy().into_owned();
    let max_total = if case.raised { RAISED_MAX_TOTAL } else { DEFAULT_MAX_TOTAL };
    // A daemon's follows (each followed turn log is one) share one inotify instance, and the
    // kernel allows `fs.inotify.max_user_instances` (128) a user on the host, shared by every
    // daemon running as root: past about a hundred local sandboxes with followed turns, a user
    // raises it (here, put back when the case ends). A daemon follows at most `--max-follows`
    // (1,024) files, more than any case here puts in one sandbox.
    let mut raised = Vec::new();
    let _inotify = if case.raised {
        raised.push(format!("HANGAR_STREAM_MAX_TOTAL={max_total}"));
        let guard = Sysctl::raise(INOTIFY_INSTANCES, RAISED_INOTIFY_INSTANCES)?;
        raised.push(format!("fs.inotify.max_user_instances={RAISED_INOTIFY_INSTANCES} (was {})", guard.was));
        Some(guard)
    } else {
        None
    };
    let total = max_total.to_string();
    // `HANGAR_BENCH_RELAY_LOG=info` logs why each polled turn was polled (`turn_polled`), which
    // the report then counts; the default, warnings only, leaves logging out of what is measured.
    let log = std::env::var("HANGAR_BENCH_RELAY_LOG").unwrap_or_else(|_| "warn".into());
    let mut world =
        RelayWorld::start(&[("HANGAR_HARNESSES", &file), ("HANGAR_STREAM_MAX_TOTAL", &total), ("HANGAR_LOG", &log)]);

    let docker_image = image("envd");
    let mut sandboxes = Vec::new();
    for s in 0..case.sandboxes {
        let name = match case.provider {
            Provider::Local => {
                let name = format!("agents-{s:03}");
                // The smallest filesystem a local sandbox takes: 200 of them reserve 12.5 GiB
                // (the turns' logs are in the host's /var/lib/hangar, not in it).
                let body =
                    json!({"name": name, "provider": "local", "options": {"disk_mib": 64}, "shared_with": ["*"]});
                post(&world, ADMIN, "/api/sandboxes", body).await?;
                name
            }
            Provider::Docker => {
                let options = json!({"image": docker_image, "user": "user"});
                world.docker_sandbox_with(&format!("agents-{s:03}"), options, true).await?.name
            }
        };
        let v = get(&world, &format!("/api/sandboxes/{name}")).await?;
        let workdir = match v["workdir"].as_str() {
            Some(w) => w.to_string(),
            // The image's, not known to the relay: where commands start.
            None => exec(&world, &name, "pwd").await?.trim().to_string(),
        };
        sandboxes.push(Sb { name, workdir });
    }
    // Each session's own working directory.
    let cwd = |i: usize| format!("{}/agent-{i:04}", sandboxes[i % sandboxes.len()].workdir);
    for (s, sb) in sandboxes.iter().enumerate() {
        let dirs: Vec<String> = (s..case.agents).step_by(sandboxes.len()).map(cwd).collect();
        exec(&world, &sb.name, &format!("mkdir -p {}", dirs.join(" "))).await?;
    }
    let world = Arc::new(world);
    let exec_token = world.relay.token("bench-unrelated", "admin").await.secret;
    let mut followers = Vec::new();
    for k in 0..FOLLOWERS {
        followers.push(world.relay.token(&format!("bench-follower-{k}"), "admin").await.secret);
    }
    // The streams left once every turn's log is followed, the unrelated stream and the fleet
    // reader: spread over the followers, at most 16 each (the per-token default).
    let left = max_total.saturating_sub(case.agents + 2);
    let per = (left / FOLLOWERS).min(DEFAULT_PER_TOKEN);
    if per == 0 {
        return Err(fail(
            "the agents scenario",
            format!("{} agents leave no stream of {max_total} to follow", case.agents),
        ));
    }
    let followed = (per * FOLLOWERS).min(case.agents);
    let stride = case.agents / followed;

    // The unrelated stream alone first: its floor, and the relay's and the machine's CPU without agents.
    let pid = world.relay.pid();
    let (ic0, im0, it0) = (procfs::cpu_seconds(pid).ctx("the relay's CPU")?, machine_ticks()?, Instant::now());
    let idle = unrelated(world.clone(), exec_token.clone(), sandboxes[0].name.clone(), cfg.idle_lines).await?;
    let idle_seconds = it0.elapsed().as_secs_f64();
    let relay_cpu_idle = (procfs::cpu_seconds(pid).ctx("the relay's CPU")? - ic0) / idle_seconds * 100.0;
    let machine_idle = busy_percent(im0, machine_ticks()?);

    let stop = Arc::new(AtomicBool::new(false));
    let fleet = tokio::spawn(fleet_stream(world.clone(), stop.clone()));
    let reads_stop = Arc::new(AtomicBool::new(false));
    let (min_ms, max_ms) = case.pace.range_ms();
    let huge_at = ((cfg.seconds * 1000.0 / (min_ms + max_ms) as f64) as u64).max(4);
    let t0 = Instant::now();
    let wall_t0 = now();
    // Started as an orchestrator starts a fleet: each at its time on the ramp, up to
    // START_IN_FLIGHT requests at once; a followed session's follower connects once it exists.
    let in_flight = Arc::new(tokio::sync::Semaphore::new(START_IN_FLIGHT));
    let mut starts = Vec::new();
    let mut names = Vec::new();
    for i in 0..case.agents {
        let due = t0 + Duration::from_secs_f64(cfg.ramp * i as f64 / case.agents as f64);
        tokio::time::sleep_until(due.into()).await;
        let permit = in_flight.clone().acquire_owned().await.map_err(|e| fail("the agents' starts", e))?;
        let name = format!("a-{i:04}");
        let prompt = format!(
            "min_ms={min_ms} max_ms={max_ms} seconds={} big_every=40 huge_at={} seed={}",
            cfg.seconds,
            if i % 10 == 0 { huge_at } else { 0 },
            i + 1
        );
        let body = json!({"name": name, "sandbox": sandboxes[i % sandboxes.len()].name, "harness": "writer", "prompt": prompt, "cwd": cwd(i)});
        let follower = (i % stride == 0 && i / stride < followed).then(|| followers[(i / stride) % FOLLOWERS].clone());
        let world = world.clone();
        names.push(name.clone());
        starts.push(tokio::spawn(async move {
            let v = post(&world, ADMIN, "/api/sessions", body).await?;
            drop(permit);
            if v["turns"][0]["id"].as_str().is_none() {
                return Err(fail(format!("session {name}"), format!("no turn: {v}")));
            }
            Ok(follower.map(|token| tokio::spawn(follow(world.clone(), token, name))))
        }));
    }
    let mut follows = Vec::new();
    for s in starts {
        if let Some(f) = joined(s.await)? {
            follows.push(f);
        }
    }
    // The window: every agent writing, from the ramp's end (later than planned if starting the
    // sessions took longer) until a second before the first one's end.
    let ramp_seconds = t0.elapsed().as_secs_f64();
    let window = cfg.seconds - ramp_seconds - 1.0;
    if window < 1.0 {
        return Err(fail(
            "the agents scenario",
            format!("starting {} sessions took {ramp_seconds:.1} s of the writers' {} s", case.agents, cfg.seconds),
        ));
    }
    let reads = tokio::spawn(fleet_reads(world.clone(), reads_stop.clone(), case.sandboxes));
    let loaded_lines = (window * 1000.0 / UNRELATED_EVERY_MS as f64) as u64;
    let loaded = tokio::spawn(unrelated(world.clone(), exec_token.clone(), sandboxes[0].name.clone(), loaded_lines));
    let cpu0 = procfs::cpu_seconds(pid).ctx("the relay's CPU")?;
    let m0 = machine_ticks()?;
    let io0 = write_bytes(pid)?;
    let w0 = Instant::now();
    let wall0 = now();
    // Said as it starts, so that a profiler can be pointed at the window (docs/performance.md).
    eprintln!("hangar-bench: agents: the window starts: every agent writes for {window:.0} s");
    let mut rss = procfs::rss_kib(pid).ctx("the relay's resident memory")?;
    while w0.elapsed().as_secs_f64() < window {
        tokio::time::sleep(Duration::from_millis(500)).await;
        rss = rss.max(procfs::rss_kib(pid).ctx("the relay's resident memory")?);
    }
    let cpu1 = procfs::cpu_seconds(pid).ctx("the relay's CPU")?;
    let m1 = machine_ticks()?;
    let io1 = write_bytes(pid)?;
    let wall1 = now();
    let window_seconds = w0.elapsed().as_secs_f64();
    reads_stop.store(true, Ordering::SeqCst);
    let reads = joined(reads.await)?;
    let loaded = joined(loaded.await)?;

    // Every turn ends: the writers' own time, then the supervisor's end.
    let deadline = Instant::now() + Duration::from_secs_f64(cfg.seconds + 180.0);
    loop {
        let v = get(&world, "/api/sessions").await?;
        let live = v["sessions"].as_array().map_or(0, |s| {
            s.iter()
                .filter(|x| matches!(x["state"].as_str(), Some("queued" | "starting" | "running" | "waiting_input")))
                .count()
        });
        if live == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(fail("the agents' turns", format!("{live} still live long after their writers' end")));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let excess = joined(fleet.await)?;

    // Every session: its turn's end, its events, each line's recording.
    let (mut recorded, mut events, mut lines, mut cpu_us) = (Vec::new(), 0usize, 0usize, 0u64);
    let mut window_events = 0usize;
    // Turns that did not succeed are counted and said in the report (a goal is that there are
    // none); the figures are of the others.
    let (mut not_ok, mut failed, mut polled) = (Vec::new(), 0usize, 0);
    let mut line_counts = HashMap::new();
    let mut last_started = wall_t0;
    for name in &names {
        let s = get(&world, &format!("/api/sessions/{name}")).await?;
        let turn = &s["turns"][0];
        last_started = last_started.max(turn["started_at"].as_f64().unwrap_or(wall_t0));
        if turn["state"] != "succeeded" {
            failed += 1;
            not_ok.push(format!("{name}: {} {} ({})", turn["state"], turn["reason"], turn["detail"]));
        }
        if turn["polled"] == true {
            polled += 1;
        }
        let mut seen = Sightings::default();
        let mut tally = None;
        let mut session_events = 0;
        let mut since = 0;
        loop {
            let v = get(&world, &format!("/api/sessions/{name}/events?since={since}&limit=1000")).await?;
            let list = v["events"].as_array().cloned().unwrap_or_default();
            for e in &list {
                events += 1;
                session_events += 1;
                let data = e["data"].to_string();
                if let Some(ts) = e["ts"].as_f64() {
                    seen.see(&data, ts);
                    if (wall0..wall1).contains(&ts) {
                        window_events += 1;
                    }
                }
                if e["type"] == "run.result" {
                    tally = tally.or_else(|| writer_tally(e["data"]["final_text"].as_str().unwrap_or_default()));
                }
            }
            since = v["next"].as_i64().unwrap_or(since);
            if v["more"] != true || list.is_empty() {
                break;
            }
        }
        let Some((n, cpu)) = tally else {
            // A turn that did not succeed is said once, above. One that did without its
            // writer's result: what the relay has of it, to tell a lost end from a lost log.
            if turn["state"] != "succeeded" {
                continue;
            }
            failed += 1;
            not_ok.push(format!(
                "{name}: no result line from the writer ({} stamped lines recorded, the last hb:{}; {} events; \
                 the turn {} {}, exit code {}, log offset {}, polled {})",
                seen.0.len(),
                seen.0.keys().max().copied().unwrap_or(0),
                session_events,
                turn["state"],
                turn["reason"],
                turn["exit_code"],
                turn["log_offset"],
                turn["polled"]
            ));
            continue;
        };
        recorded.extend(seen.delays(&format!("session {name}'s events"), n)?);
        line_counts.insert(name.clone(), n);
        lines += n as usize;
        cpu_us += cpu;
    }
    if failed > 0 {
        let first: Vec<&str> = not_ok.iter().take(5).map(String::as_str).collect();
        eprintln!("hangar-bench: agents: {failed} of {} turns did not succeed: {}", case.agents, first.join("; "));
    }
    let mut delivered = Vec::new();
    let followed_names: Vec<&String> = names.iter().step_by(stride).take(followed).collect();
    for (h, name) in follows.into_iter().zip(followed_names) {
        let seen = joined(h.await)?;
        // A follower of a turn that failed has nothing to be measured against.
        if let Some(&n) = line_counts.get(name) {
            delivered.extend(seen.delays(&format!("session {name} at its follower"), n)?);
        }
    }

    let idle_s = Summary::of("the unrelated stream, idle", &idle)?;
    let loaded_s = Summary::of("the unrelated stream, loaded", &loaded)?;
    let relay_cpu = (cpu1 - cpu0) / window_seconds * 100.0;
    let window_events = window_events.max(1) as f64;
    let machine = busy_percent(m0, m1);
    let recorded_ms = Summary::of("recorded", &recorded)?;
    let delivered_ms = Summary::of("delivered", &delivered)?;
    let fleet_update_excess_ms = Summary::of("fleet updates", &excess).ok();
    let fleet_read_ms = Summary::of("fleet reads", &reads)?;
    let relay_rss_kib = rss;
    let mut goals = Vec::new();
    let rate = case.agents as f64 * case.pace.per_second();
    if case.pace == Pace::Every(200) && case.agents == 200 {
        goals.push(goal("recorded p99, ms (200 agents × 5 lines/s)", recorded_ms.p99, 20.0));
        goals.push(goal("SSE arrival p99, ms", delivered_ms.p99, 30.0));
        goals.push(goal("unrelated stream p99 over idle", loaded_s.p99 / idle_s.p99, 2.0));
        goals.push(goal("relay CPU, % of a core", relay_cpu, 25.0));
    }
    if case.agents == 500 && !case.raised {
        goals.push(goal("recorded p99, ms (500 agents, default limits)", recorded_ms.p99, 50.0));
        goals.push(goal("turns polled, not followed live", polled as f64, 0.0));
    }
    if case.raised {
        goals.push(goal("recorded p99, ms (limits raised)", recorded_ms.p99, 100.0));
        goals.push(goal("relay RSS, MiB", relay_rss_kib as f64 / 1024.0, 300.0));
    }
    if let Some(e) = &fleet_update_excess_ms {
        goals.push(goal("fleet stream update beyond 2 s, max, ms", e.max, 50.0));
    }
    if case.sandboxes >= 200 {
        goals.push(goal("fleet read p95, ms (200 sandboxes)", fleet_read_ms.p95, 2.0));
    }
    goals.push(goal("turns not succeeded", failed as f64, 0.0));
    Ok(Row {
        provider: case.provider,
        agents: case.agents,
        sandboxes: case.sandboxes,
        pace: case.pace.label(),
        lines_per_second: round3(rate),
        stream_max_total: max_total,
        raised_limits: raised,
        seconds: cfg.seconds,
        lines,
        events,
        unrelated_ratio: [crate::stats::ratio(loaded_s.p50, idle_s.p50), crate::stats::ratio(loaded_s.p99, idle_s.p99)],
        recorded_ms,
        delivered_ms,
        followed_sessions: followed,
        polled_turns: polled,
        polled_why: polled_reasons(&world.relay.log()),
        unrelated_idle_ms: idle_s,
        unrelated_loaded_ms: loaded_s,
        fleet_update_excess_ms,
        fleet_read_ms,
        ramp_seconds: round3(ramp_seconds),
        all_running_seconds: round3(last_started - wall_t0),
        window_seconds: round3(window_seconds),
        relay_cpu_idle_percent: round3(relay_cpu_idle),
        relay_cpu_percent: round3(relay_cpu),
        relay_cpu_ms_per_1000_events: round3((cpu1 - cpu0) * 1000.0 / window_events * 1000.0),
        relay_rss_kib,
        machine_cpu_idle_percent: round3(machine_idle),
        machine_cpu_percent: round3(machine),
        writers_cpu_percent: round3(cpu_us as f64 / 1e6 / cfg.seconds * 100.0),
        writer_cpu_us_per_line: round3(cpu_us as f64 / lines.max(1) as f64),
        sqlite_bytes_per_event: round3(io1.saturating_sub(io0) as f64 / window_events),
        turns_not_succeeded: failed,
        not_succeeded_why: not_ok.into_iter().take(5).collect(),
        goals,
    })
}

#[cfg(test)]
mod tests {
    use hangar_agents::harness::{Harnesses, Vars};

    use super::*;

    #[test]
    fn the_profile_runs_the_writer() {
        let all = Harnesses::with_file(&harnesses("/tmp/x/hangar-bench-agent-writer")).expect("the profile loads");
        let vars = Vars { session_id: None, cwd: "/w", prompt_file: "/p", turn: "turn_1" };
        let argv = all.get("writer").expect("writer").argv(false, &vars).expect("argv");
        assert_eq!(argv, ["/tmp/x/hangar-bench-agent-writer"]);
    }

    #[test]
    fn stamps_are_found_in_event_data() {
        let data = r#"{"summary":"hb:12:1765000000.250000 src/x.py","text":"hb:x hb:3 hb:4:1.5"}"#;
        assert_eq!(stamps_in(data), vec![(12, 1765000000.25), (4, 1.5)]);
        let mut s = Sightings::default();
        s.see("hb:1:10.0", 10.002);
        s.see("hb:2:10.5 hb:1:10.0", 10.6);
        let d: Vec<i64> = s.delays("t", 2).expect("complete").iter().map(|x| x.round() as i64).collect();
        assert_eq!(d, vec![2, 100]);
        assert!(s.delays("t", 3).is_err(), "a line lost is an error");
        let mut early = Sightings::default();
        early.see("hb:1:10.0", 9.0);
        assert!(early.delays("t", 1).is_err(), "seen before it was written: mapped wrong");
    }

    #[test]
    fn cases_parse() {
        let c = Case::parse("docker:200:20:200").expect("case");
        assert_eq!(
            (c.provider, c.agents, c.sandboxes, c.pace, c.raised),
            (Provider::Docker, 200, 20, Pace::Every(200), false)
        );
        let c = Case::parse("local:1000:1:mix:raised").expect("case");
        assert_eq!((c.pace, c.raised), (Pace::Mix, true));
        assert!(Case::parse("k8s:5:1").is_none());
        assert!(Case::parse("local:5:0").is_none());
    }

    #[test]
    fn polled_turns_are_counted_by_why() {
        let log = "x INFO hangar_relay: turn log polled event=\"turn_polled\" turn=\"t1\" why=\"HANGAR_STREAM_MAX_TOTAL streams are open\"\n\
                   x INFO hangar_relay: turn log polled event=\"turn_polled\" turn=\"t2\" why=\"the stream broke: x\"\n\
                   x INFO hangar_relay: turn log polled event=\"turn_polled\" turn=\"t3\" why=\"the stream broke: x\"\n";
        assert_eq!(
            polled_reasons(log),
            vec![("the stream broke: x".to_string(), 2), ("HANGAR_STREAM_MAX_TOTAL streams are open".to_string(), 1)]
        );
    }

    #[test]
    fn writers_say_their_tally() {
        assert_eq!(writer_tally("hb:40:1.5 lines=40 cpu_us=1234"), Some((40, 1234)));
        assert_eq!(writer_tally("hb:40:1.5"), None);
    }

    #[test]
    fn full_cases_fit_the_default_limits() {
        for c in Config::sizes(false).cases.iter().chain(Config::sizes(true).cases.iter()) {
            let total = if c.raised { RAISED_MAX_TOTAL } else { DEFAULT_MAX_TOTAL };
            assert!(total >= c.agents + 2 + FOLLOWERS, "{c:?}");
        }
    }
}
