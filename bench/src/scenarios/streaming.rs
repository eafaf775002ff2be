//! Scenario 1, streaming a command's output (item 1 of "What is measured" in
//! docs/performance.md): a command printing a stamped line every 100 ms, seen by a client in each
//! way hangar offers, beside `docker exec` and the no-daemon fallback, in the same run and
//! interleaved (run 1 of every method, then run 2, ...), so drift in the machine's load touches
//! every row alike. Rows split the path by hop: the floor (the same command on a plain pipe,
//! read by the same reader), the floors of one and two hops (the pipe through one and two minimal
//! copiers into loopback sockets, `crate::floor`), and the sandbox's daemon read directly (its
//! `Start` stream over gRPC, with the container's own token), so the cost of the daemon and of the
//! relay shows apart, each beside the least a hop of its kind costs on the machine.

use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use crate::{
    error::{fail, IoContext, Result},
    mcp::Mcp,
    pipe::read_stamped,
    stats::{now, ratio, Lines, Summary},
    world::{container_of, image, RelayWorld, Sandbox},
};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Method {
    Pipe,
    OneCopy,
    TwoCopies,
    DaemonStart,
    RestStream,
    McpProgress,
    ProcessAttach,
    ExecAtEnd,
    PollSince,
    DockerExec,
    FallbackStream,
    FallbackAttach,
}

const METHODS: [Method; 12] = [
    Method::Pipe,
    Method::OneCopy,
    Method::TwoCopies,
    Method::DaemonStart,
    Method::RestStream,
    Method::McpProgress,
    Method::ProcessAttach,
    Method::ExecAtEnd,
    Method::PollSince,
    Method::DockerExec,
    Method::FallbackStream,
    Method::FallbackAttach,
];

impl Method {
    /// The floor of this path's hops, for the rows that go through hangar's daemon: one hop
    /// (the daemon) or two (the daemon and the relay).
    fn hop_floor(self) -> Option<Method> {
        match self {
            Method::DaemonStart => Some(Method::OneCopy),
            Method::RestStream | Method::McpProgress | Method::ProcessAttach => Some(Method::TwoCopies),
            _ => None,
        }
    }

    fn key(self) -> &'static str {
        match self {
            Method::Pipe => "plain_pipe",
            Method::OneCopy => "one_copy",
            Method::TwoCopies => "two_copies",
            Method::DaemonStart => "daemon_start_grpc",
            Method::RestStream => "rest_exec_stream",
            Method::McpProgress => "mcp_exec_progress",
            Method::ProcessAttach => "process_attach_sse",
            Method::ExecAtEnd => "exec_result_at_end",
            Method::PollSince => "poll_since_1s",
            Method::DockerExec => "docker_exec",
            Method::FallbackStream => "fallback_exec_stream",
            Method::FallbackAttach => "fallback_process_attach",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Method::Pipe => "floor: a plain pipe (`bash -lc`, no sandbox)",
            Method::OneCopy => "floor of one hop: the pipe in the sandbox through a minimal copier to the host",
            Method::TwoCopies => "floor of two hops: the same through a second copier on the host",
            Method::DaemonStart => "hop: the daemon's `Start` over gRPC, read directly",
            Method::RestStream => "REST `exec/stream` (SSE)",
            Method::McpProgress => "MCP `exec`, progress notifications",
            Method::ProcessAttach => "`processes` start + attach (SSE)",
            Method::ExecAtEnd => "`exec`, the result at the end",
            Method::PollSince => "`processes/{id}?since=` every 1 s",
            Method::DockerExec => "peer: `docker exec`",
            Method::FallbackStream => "no daemon: `exec/stream` (provider exec)",
            Method::FallbackAttach => "no daemon: start + attach (polled)",
        }
    }
}

pub struct Config {
    pub runs: usize,
    pub lines: u64,
}

#[derive(Debug, Serialize)]
pub struct Row {
    pub method: &'static str,
    pub label: &'static str,
    /// From the request (or `docker exec`) to the first line, in ms.
    pub first_line_ms: Summary,
    /// From each line's printing to its arrival, in ms.
    pub line_delay_ms: Summary,
    /// This row's p50 and p95 over `docker exec`'s.
    pub first_line_vs_docker_exec: [Option<f64>; 2],
    pub line_delay_vs_docker_exec: [Option<f64>; 2],
    /// This row's p50 and p95 minus the plain pipe's, in ms: what the path adds to the floor.
    pub first_line_over_pipe_ms: [f64; 2],
    pub line_delay_over_pipe_ms: [f64; 2],
    /// For hangar's streaming rows: p50 and p95 minus those of the floor of as many hops (one
    /// copier for the daemon alone, two for the daemon and the relay), in ms: what hangar adds
    /// beyond the least a hop costs.
    pub line_delay_over_hop_floor_ms: Option<[f64; 2]>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub runs: usize,
    pub lines: u64,
    pub command: String,
    pub rows: Vec<Row>,
}

/// What one run of one method saw.
struct Seen {
    started: f64,
    lines: Lines,
}

struct Setup {
    world: RelayWorld,
    token: String,
    mcp: Mcp,
    daemon: Sandbox,
    plain: Sandbox,
    container: String,
}

pub fn command(lines: u64) -> String {
    format!(r#"for i in $(seq {lines}); do sleep 0.1; echo "$i $EPOCHREALTIME"; done"#)
}

pub async fn run(cfg: &Config) -> Result<Report> {
    let mut world = RelayWorld::start(&[]);
    let daemon = world.docker_sandbox("stream", &image("envd"), true).await?;
    let plain = world.docker_sandbox("plain", &image("plain"), false).await?;
    let token = world.relay.token("bench", "user").await.secret;
    let mcp_token = world.relay.token("bench-mcp", "mcp").await.secret;
    let mcp = Mcp::connect(world.addr(), &mcp_token).await?;
    let container = container_of(&daemon);
    crate::floor::check_installed(&container)?;
    let mut s = Setup { world, token, mcp, daemon, plain, container };
    let cmd = command(cfg.lines);

    // One unmeasured pass, so that no method pays for first connections and cold caches.
    for m in METHODS {
        measure(&mut s, m, &command(2), 2).await?;
    }
    let mut first: Vec<Vec<f64>> = vec![Vec::new(); METHODS.len()];
    let mut delays: Vec<Vec<f64>> = vec![Vec::new(); METHODS.len()];
    for run in 0..cfg.runs {
        for (i, m) in METHODS.iter().enumerate() {
            let seen = measure(&mut s, *m, &cmd, cfg.lines).await?;
            seen.lines.check_complete(&format!("{} run {}", m.key(), run + 1), cfg.lines)?;
            let at = seen.lines.first_at.unwrap_or(seen.started);
            first[i].push((at - seen.started) * 1000.0);
            delays[i].extend(&seen.lines.delays_ms);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let mut rows = Vec::new();
    for (i, m) in METHODS.iter().enumerate() {
        rows.push(Row {
            method: m.key(),
            label: m.label(),
            first_line_ms: Summary::of(m.key(), &first[i])?,
            line_delay_ms: Summary::of(m.key(), &delays[i])?,
            first_line_vs_docker_exec: [None, None],
            line_delay_vs_docker_exec: [None, None],
            first_line_over_pipe_ms: [0.0, 0.0],
            line_delay_over_pipe_ms: [0.0, 0.0],
            line_delay_over_hop_floor_ms: None,
        });
    }
    let peer = METHODS.iter().position(|m| *m == Method::DockerExec).unwrap_or(0);
    let (pf, pd) = (rows[peer].first_line_ms.clone(), rows[peer].line_delay_ms.clone());
    for r in &mut rows {
        r.first_line_vs_docker_exec = [ratio(r.first_line_ms.p50, pf.p50), ratio(r.first_line_ms.p95, pf.p95)];
        r.line_delay_vs_docker_exec = [ratio(r.line_delay_ms.p50, pd.p50), ratio(r.line_delay_ms.p95, pd.p95)];
    }
    let floor = METHODS.iter().position(|m| *m == Method::Pipe).unwrap_or(0);
    let (ff, fd) = (rows[floor].first_line_ms.clone(), rows[floor].line_delay_ms.clone());
    for r in &mut rows {
        r.first_line_over_pipe_ms = [r.first_line_ms.p50 - ff.p50, r.first_line_ms.p95 - ff.p95];
        r.line_delay_over_pipe_ms = [r.line_delay_ms.p50 - fd.p50, r.line_delay_ms.p95 - fd.p95];
    }
    let delays_of: Vec<Summary> = rows.iter().map(|r| r.line_delay_ms.clone()).collect();
    for (r, m) in rows.iter_mut().zip(METHODS) {
        if let Some(i) = m.hop_floor().and_then(|f| METHODS.iter().position(|x| *x == f)) {
            let f = &delays_of[i];
            r.line_delay_over_hop_floor_ms = Some([r.line_delay_ms.p50 - f.p50, r.line_delay_ms.p95 - f.p95]);
        }
    }
    Ok(Report { runs: cfg.runs, lines: cfg.lines, command: cmd, rows })
}

async fn measure(s: &mut Setup, m: Method, cmd: &str, lines: u64) -> Result<Seen> {
    let limit = Duration::from_secs(lines / 10 + 30);
    match m {
        Method::Pipe => pipe(cmd, lines, limit).await,
        Method::OneCopy => copies(&s.container, cmd, 1, lines, limit).await,
        Method::TwoCopies => copies(&s.container, cmd, 2, lines, limit).await,
        Method::DaemonStart => daemon_start(&s.container, cmd, lines, limit).await,
        Method::RestStream => rest_stream(s, &s.daemon.name, cmd, limit).await,
        Method::FallbackStream => rest_stream(s, &s.plain.name, cmd, limit).await,
        Method::ExecAtEnd => exec_at_end(s, cmd).await,
        Method::McpProgress => mcp_exec(s, cmd).await,
        Method::ProcessAttach => attach(s, &s.daemon.name, cmd, limit).await,
        Method::FallbackAttach => attach(s, &s.plain.name, cmd, limit).await,
        Method::PollSince => poll(s, cmd, limit).await,
        Method::DockerExec => docker_exec(&s.container, cmd, lines, limit).await,
    }
}

async fn rest_stream(s: &Setup, sandbox: &str, cmd: &str, limit: Duration) -> Result<Seen> {
    let mut seen = Seen { started: now(), lines: Lines::default() };
    let path = format!("/api/sandboxes/{sandbox}/exec/stream");
    let mut sse = s.world.relay.sse("POST", &path, Some(&s.token), Some(json!({"command": cmd}))).await;
    if sse.status != 200 {
        return Err(fail(format!("POST {path}"), sse.status));
    }
    while let Some(ev) = sse.next(limit).await {
        let at = now();
        match ev.event.as_str() {
            "stdout" => seen.lines.feed(ev.json()["data"].as_str().unwrap_or_default(), at),
            "result" => {
                let r = ev.json();
                check_exit(&path, &r)?;
                // Without a daemon the output comes only in the result.
                if seen.lines.numbers.is_empty() {
                    seen.lines.feed(r["stdout"].as_str().unwrap_or_default(), at);
                }
                return Ok(seen);
            }
            _ => {}
        }
    }
    Err(fail(format!("POST {path}"), "the stream ended without a result"))
}

async fn exec_at_end(s: &Setup, cmd: &str) -> Result<Seen> {
    let mut seen = Seen { started: now(), lines: Lines::default() };
    let path = format!("/api/sandboxes/{}/exec", s.daemon.name);
    let r = s.world.relay.call("POST", &path, Some(&s.token), Some(json!({"command": cmd}))).await;
    let at = now();
    if r.status != 200 {
        return Err(fail(format!("POST {path}"), r.status));
    }
    let v = r.json();
    check_exit(&path, &v)?;
    seen.lines.feed(v["stdout"].as_str().unwrap_or_default(), at);
    Ok(seen)
}

async fn mcp_exec(s: &mut Setup, cmd: &str) -> Result<Seen> {
    let started = now();
    let mut lines = Lines::default();
    let args = json!({"sandbox": s.daemon.name, "command": cmd, "stream": true});
    let r = s.mcp.call_tool("exec", args, &mut |text, at| lines.feed(text, at)).await?;
    check_exit("MCP exec", &r)?;
    Ok(Seen { started, lines })
}

/// Starts a background process; its id.
async fn start(s: &Setup, sandbox: &str, cmd: &str) -> Result<String> {
    let path = format!("/api/sandboxes/{sandbox}/processes");
    let r = s.world.relay.call("POST", &path, Some(&s.token), Some(json!({"command": cmd}))).await;
    if r.status != 201 {
        return Err(fail(format!("POST {path}"), format!("{}: {}", r.status, String::from_utf8_lossy(&r.body))));
    }
    r.json()["process_id"].as_str().map(str::to_string).ok_or_else(|| fail(format!("POST {path}"), "no process_id"))
}

async fn attach(s: &Setup, sandbox: &str, cmd: &str, limit: Duration) -> Result<Seen> {
    let mut seen = Seen { started: now(), lines: Lines::default() };
    let id = start(s, sandbox, cmd).await?;
    let path = format!("/api/sandboxes/{sandbox}/processes/{id}/stream?since=0");
    let mut sse = s.world.relay.sse("GET", &path, Some(&s.token), None).await;
    if sse.status != 200 {
        return Err(fail(format!("GET {path}"), sse.status));
    }
    while let Some(ev) = sse.next(limit).await {
        let at = now();
        match ev.event.as_str() {
            "output" => seen.lines.feed(ev.json()["data"].as_str().unwrap_or_default(), at),
            "end" => {
                let v = ev.json();
                if v["exit_code"] != 0 {
                    return Err(fail(format!("GET {path}"), format!("the process ended with {v}")));
                }
                return Ok(seen);
            }
            "gap" => return Err(fail(format!("GET {path}"), "output was lost")),
            _ => {}
        }
    }
    Err(fail(format!("GET {path}"), "the stream ended before the process did"))
}

async fn poll(s: &Setup, cmd: &str, limit: Duration) -> Result<Seen> {
    let mut seen = Seen { started: now(), lines: Lines::default() };
    let t0 = tokio::time::Instant::now();
    let id = start(s, &s.daemon.name, cmd).await?;
    let mut next = 0u64;
    for k in 1.. {
        tokio::time::sleep_until(t0 + Duration::from_secs(k)).await;
        let path = format!("/api/sandboxes/{}/processes/{id}?since={next}", s.daemon.name);
        let r = s.world.relay.call("GET", &path, Some(&s.token), None).await;
        let at = now();
        if r.status != 200 {
            return Err(fail(format!("GET {path}"), r.status));
        }
        let v = r.json();
        seen.lines.feed(v["output"].as_str().unwrap_or_default(), at);
        next = v["next"].as_u64().ok_or_else(|| fail(format!("GET {path}"), "no next"))?;
        if v["process"]["state"] == "exited" {
            return Ok(seen);
        }
        if t0.elapsed() > limit {
            break;
        }
    }
    Err(fail("polling", "the process did not end in time"))
}

async fn docker_exec(container: &str, cmd: &str, lines: u64, limit: Duration) -> Result<Seen> {
    let mut c = tokio::process::Command::new("docker");
    c.args(["exec", container, "bash", "-lc", cmd]);
    stdout_of("docker exec", c, lines, limit).await
}

/// `command`'s standard output read as stamped lines; it must then exit 0.
async fn stdout_of(what: &str, mut command: tokio::process::Command, lines: u64, limit: Duration) -> Result<Seen> {
    let started = now();
    let mut child =
        command.stdout(std::process::Stdio::piped()).kill_on_drop(true).spawn().ctx(format!("spawning {what}"))?;
    let out = child.stdout.take().ok_or_else(|| fail(what, "no stdout"))?;
    let lines = read_stamped(what, out, lines, limit).await?;
    let status = child.wait().await.ctx(format!("waiting for {what}"))?;
    if !status.success() {
        return Err(fail(what, status));
    }
    Ok(Seen { started, lines })
}

/// The floor: the same command on a plain pipe, read the same way. The login shell gets no home
/// of the bench user's (a home directory's profile, such as a version manager's, would make the
/// floor's first line slower than the sandbox's own, which has none).
async fn pipe(cmd: &str, lines: u64, limit: Duration) -> Result<Seen> {
    let mut c = tokio::process::Command::new("bash");
    c.args(["-lc", cmd]).env_clear().env("PATH", "/usr/local/bin:/usr/bin:/bin").env("HOME", "/nonexistent");
    stdout_of("plain pipe", c, lines, limit).await
}

/// The floor of `hops` hops: the command on a pipe in the sandbox's container (as its daemon runs
/// it) through that many minimal copiers, the first in the container sending across the Docker
/// bridge as the daemon does, the last one's socket read the same way. Its first line includes
/// `docker exec`'s start, so only its per-line delay is a floor.
async fn copies(container: &str, cmd: &str, hops: usize, lines: u64, limit: Duration) -> Result<Seen> {
    let started = now();
    let first = crate::floor::First::Container { name: container.to_string(), script: cmd.to_string() };
    let path = crate::floor::through_copies(first, hops).await?;
    let lines = read_stamped("the copiers", path.stream, lines, limit).await?;
    Ok(Seen { started, lines })
}

/// The first hop alone: the sandbox's daemon, at the container's address with the container's own
/// access token (read from Docker, as only the relay and the bench may), `Start` of `bash -lc`
/// over gRPC, each data event timed as it arrives.
async fn daemon_start(container: &str, cmd: &str, lines: u64, limit: Duration) -> Result<Seen> {
    use hangar_proto::process::{process_client::ProcessClient, process_event, ProcessConfig, StartRequest};
    let inspect = |format: &str| {
        std::process::Command::new("docker")
            .args(["inspect", "--format", format, container])
            .output()
            .ctx("docker inspect")
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let ip = inspect("{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}")?;
    let env = inspect("{{range .Config.Env}}{{println .}}{{end}}")?;
    let token = env
        .lines()
        .find_map(|l| l.strip_prefix("HANGAR_ENVD_ACCESS_TOKEN="))
        .ok_or_else(|| fail("the daemon's token", "not in the container's environment"))?
        .to_string();
    let started = now();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{ip}:{}", crate::world::CONTAINER_ENVD_PORT))
        .map_err(|e| fail("the daemon's address", e))?
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|e| fail("connecting to the daemon", e))?;
    let mut req = tonic::Request::new(StartRequest {
        process: Some(ProcessConfig {
            cmd: "/bin/bash".into(),
            args: vec!["-lc".into(), cmd.into()],
            ..Default::default()
        }),
        ..Default::default()
    });
    let value = token.parse().map_err(|_| fail("the daemon's token", "not a header value"))?;
    req.metadata_mut().insert("x-access-token", value);
    let mut stream =
        ProcessClient::new(channel).start(req).await.map_err(|e| fail("the daemon's Start", e))?.into_inner();
    let mut seen = Seen { started, lines: Lines::default() };
    let read = async {
        while (seen.lines.numbers.len() as u64) < lines {
            let Some(msg) = stream.message().await.map_err(|e| fail("the daemon's Start", e))? else { break };
            let at = now();
            if let Some(process_event::Event::Data(d)) = msg.event.and_then(|e| e.event) {
                if let Some(process_event::data_event::Output::Stdout(b)) = d.output {
                    seen.lines.feed(&String::from_utf8_lossy(&b), at);
                }
            }
        }
        Ok::<_, crate::error::BenchError>(())
    };
    tokio::time::timeout(limit, read).await.map_err(|_| fail("the daemon's Start", "timed out"))??;
    Ok(seen)
}

fn check_exit(what: &str, result: &Value) -> Result<()> {
    if result["exit_code"] == 0 {
        Ok(())
    } else {
        Err(fail(what, format!("the command failed: {result}")))
    }
}
