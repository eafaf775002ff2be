//! hangar-e2e: the harness the end-to-end tests use to start the real `hangar-envd` binary and
//! drive it from outside, over gRPC (tonic clients from hangar-proto), Connect JSON and binary on
//! HTTP/1.1 and on h2c, and the plain HTTP routes.
//!
//! Every wait is bounded: a hang fails the test with a message instead of blocking CI.

pub mod docker;
pub mod files;
pub mod relay;

use std::{
    collections::{HashMap, HashSet},
    convert::Infallible,
    future::Future,
    io::{BufRead, BufReader, Read},
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicUsize, Ordering},
        mpsc as std_mpsc,
    },
    time::{Duration, Instant},
};

use base64::Engine as _;
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};

pub mod watch;

pub use hangar_proto::{ext, process as pb};

use ext::{attach_event, daemon_client::DaemonClient, processes_client::ProcessesClient};
use pb::{
    process_client::ProcessClient, process_event, process_event::data_event::Output, process_selector::Selector,
    ProcessConfig, ProcessEvent, ProcessSelector, StartRequest,
};

/// The default bound on one step of a test (one awaited event, one call).
pub const STEP: Duration = Duration::from_secs(10);

/// Runs `fut`, failing the test if it takes longer than `limit`.
pub async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {limit:?} waiting for: {what}"),
    }
}

/// Polls `cond` every 20 ms until it holds; fails the test after `limit`.
pub async fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return;
        }
        if Instant::now() >= deadline {
            panic!("condition not met within {limit:?}: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `f` every 20 ms until it yields a value; fails the test after `limit`.
pub async fn eventually<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("condition not met within {limit:?}: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The daemon
// ---------------------------------------------------------------------------------------------

static LOG_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Where the `hangar-envd` binary is: `HANGAR_ENVD_BIN`, else next to the test executable's
/// directory (`target/<profile>/hangar-envd`, the test itself being in `target/<profile>/deps`).
pub fn envd_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("HANGAR_ENVD_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().and_then(|p| p.parent()).expect("test executable has no grandparent directory");
    dir.join("hangar-envd")
}

/// Options for starting a daemon.
#[derive(Debug, Default, Clone)]
pub struct EnvdBuilder {
    args: Vec<String>,
    envs: Vec<(String, String)>,
}

impl EnvdBuilder {
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|s| s.to_string()));
        self
    }

    pub fn env(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.envs.push((k.into(), v.into()));
        self
    }

    /// Spawns the daemon with `--listen 127.0.0.1 --port 0` plus the given arguments and waits
    /// (10 s at most) for its `hangar-envd listening on http://IP:PORT` line.
    pub fn start(self) -> Envd {
        let bin = envd_bin();
        assert!(
            bin.exists(),
            "hangar-envd binary not found at {} (set HANGAR_ENVD_BIN or `cargo build -p hangar-envd`)",
            bin.display()
        );
        let n = LOG_COUNTER.fetch_add(1, Ordering::SeqCst);
        let log_path = std::env::temp_dir().join(format!("hangar-e2e-envd-{}-{}.log", std::process::id(), n));
        let log = std::fs::File::create(&log_path).expect("create daemon log file");
        let mut cmd = Command::new(&bin);
        cmd.args(["--listen", "127.0.0.1", "--port", "0"])
            .args(&self.args)
            .env_remove("HANGAR_ENVD_ACCESS_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        if std::env::var_os("HANGAR_LOG").is_none() {
            cmd.env("HANGAR_LOG", "debug");
        }
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("stdout piped");
        let (tx, rx) = std_mpsc::channel::<String>();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let mut sent = false;
            loop {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if !sent && line.contains("listening on") {
                            let _ = tx.send(line.trim().to_string());
                            sent = true;
                        }
                    }
                }
            }
            // keep draining so the daemon never blocks on or dies of a closed stdout
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let line = match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "hangar-envd did not print its listening line within 10 s; stderr:\n{}",
                    log_tail(&log_path, 4000)
                );
            }
        };
        let prefix = "hangar-envd listening on http://";
        assert!(line.starts_with(prefix), "unexpected listening line {line:?}, want {prefix}IP:PORT");
        let addr: SocketAddr = line[prefix.len()..]
            .trim_end_matches('/')
            .parse()
            .unwrap_or_else(|e| panic!("bad address in {line:?}: {e}"));
        Envd { child: Some(child), addr, log_path }
    }
}

fn log_tail(path: &PathBuf, max: usize) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    if s.len() > max {
        let mut cut = s.len() - max;
        while !s.is_char_boundary(cut) {
            cut += 1;
        }
        s = s[cut..].to_string();
    }
    s
}

/// A running `hangar-envd`, killed (with everything it started) when dropped.
#[derive(Debug)]
pub struct Envd {
    child: Option<Child>,
    addr: SocketAddr,
    log_path: PathBuf,
}

impl Envd {
    pub fn builder() -> EnvdBuilder {
        EnvdBuilder::default()
    }

    /// Starts a daemon with `--listen 127.0.0.1 --port 0` plus `args`.
    pub fn start(args: &[&str]) -> Envd {
        EnvdBuilder::default().args(args).start()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("daemon running").id()
    }

    /// The daemon's stderr so far (its last `max` bytes).
    pub fn log(&self, max: usize) -> String {
        log_tail(&self.log_path, max)
    }

    /// Whether the daemon process is still alive (not exited).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    // --- gRPC ---

    /// A new HTTP/2 connection (tonic channel) to the daemon.
    pub async fn channel(&self) -> Channel {
        within(STEP, "gRPC connect", Endpoint::from_shared(self.url()).expect("endpoint").connect())
            .await
            .expect("gRPC channel connect")
    }

    pub async fn process(&self) -> ProcessClient<Channel> {
        ProcessClient::new(self.channel().await)
    }

    pub async fn processes(&self) -> ProcessesClient<Channel> {
        ProcessesClient::new(self.channel().await)
    }

    pub async fn daemon(&self) -> DaemonClient<Channel> {
        DaemonClient::new(self.channel().await)
    }

    // --- plain HTTP ---

    /// One HTTP/1.1 request on a fresh connection. `headers` are added as given (`Host` is
    /// always set).
    pub async fn http(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> RawResponse {
        let body: Bytes = body.into();
        let req = build_request(method, path, self.addr, false, headers, full_body(body));
        let resp = within(STEP, &format!("HTTP/1.1 {method} {path}"), async { send_http1(self.addr, req).await }).await;
        read_raw(resp).await
    }

    /// One HTTP/2 cleartext request (prior knowledge) on a fresh connection.
    pub async fn h2(&self, method: &str, path: &str, headers: &[(&str, &str)], body: impl Into<Bytes>) -> RawResponse {
        let body: Bytes = body.into();
        let req = build_request(method, path, self.addr, true, headers, full_body(body));
        let resp = within(STEP, &format!("h2c {method} {path}"), async { send_h2(self.addr, req).await }).await;
        read_raw(resp).await
    }

    /// An HTTP/1.1 request whose body is sent chunked, piece by piece, through the returned
    /// sender; dropping the sender ends the body. The response arrives on the returned future.
    pub fn http_chunked(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (mpsc::Sender<Bytes>, tokio::task::JoinHandle<hyper::Response<Incoming>>) {
        let (tx, rx) = mpsc::channel::<Bytes>(16);
        let stream = futures::StreamExt::map(tokio_stream::wrappers::ReceiverStream::new(rx), |b| {
            Ok::<_, Infallible>(Frame::data(b))
        });
        let body = BoxBody::new(StreamBody::new(stream));
        let req = build_request(method, path, self.addr, false, headers, body);
        let addr = self.addr;
        let handle = tokio::spawn(async move { send_http1(addr, req).await });
        (tx, handle)
    }

    /// Connect unary call with JSON (`application/json`) over HTTP/1.1: (HTTP status, JSON body).
    pub async fn unary(&self, path: &str, json: &Value) -> (u16, Value) {
        self.unary_h(path, json, &[]).await
    }

    /// Like [`Envd::unary`] with extra headers.
    pub async fn unary_h(&self, path: &str, json: &Value, headers: &[(&str, &str)]) -> (u16, Value) {
        let mut h = vec![("content-type", "application/json"), ("connect-protocol-version", "1")];
        h.extend_from_slice(headers);
        let r = self.http("POST", path, &h, json.to_string()).await;
        (r.status, r.json())
    }

    /// Opens a Connect server stream (`application/connect+json`) over HTTP/1.1; the request
    /// message is one envelope.
    pub async fn open_stream(&self, path: &str, json: &Value, headers: &[(&str, &str)]) -> ConnectStream {
        let body = envelope(0, json.to_string().as_bytes());
        self.open_stream_raw(path, "application/connect+json", body, headers).await
    }

    /// Opens a Connect stream with a raw request body and content type.
    pub async fn open_stream_raw(
        &self,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> ConnectStream {
        let mut h = vec![("content-type", content_type), ("connect-protocol-version", "1")];
        h.extend_from_slice(headers);
        let req = build_request("POST", path, self.addr, false, &h, full_body(body.into()));
        let resp =
            within(STEP, &format!("Connect stream {path} response head"), async { send_http1(self.addr, req).await })
                .await;
        ConnectStream::new(resp)
    }

    /// A Connect server stream read to its end (bounded by `limit`).
    pub async fn server_stream(
        &self,
        path: &str,
        json: &Value,
        headers: &[(&str, &str)],
        limit: Duration,
    ) -> StreamOutcome {
        let s = self.open_stream(path, json, headers).await;
        s.collect(limit).await
    }

    /// `GET /health` status.
    pub async fn health(&self) -> u16 {
        self.http("GET", "/health", &[], Bytes::new()).await.status
    }

    /// Asserts the daemon is alive, answers `/health` with 204, and that nothing it started is
    /// still running (after `grace`), nor left as a zombie.
    pub async fn assert_healthy_no_leaks(&mut self, grace: Duration) {
        assert!(self.alive(), "daemon died; stderr:\n{}", self.log(4000));
        assert_eq!(self.health().await, 204, "GET /health after the test");
        let me = self.pid();
        let deadline = Instant::now() + grace;
        loop {
            let left = descendants(me);
            if left.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                panic!("processes left behind by the daemon (pid {me}): {left:#?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Envd {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id();
        // Freeze the daemon so it starts nothing new, then kill everything it started (their
        // process groups too), then the daemon itself.
        unsafe {
            libc::kill(pid as i32, libc::SIGSTOP);
        }
        let ours = unsafe { libc::getpgrp() } as u32;
        let desc = descendants(pid);
        let mut groups = HashSet::new();
        for p in &desc {
            unsafe {
                libc::kill(p.pid as i32, libc::SIGKILL);
            }
            if p.pgrp != ours && p.pgrp > 1 {
                groups.insert(p.pgrp);
            }
        }
        for g in groups {
            unsafe {
                libc::killpg(g as i32, libc::SIGKILL);
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        if std::thread::panicking() {
            eprintln!(
                "---- hangar-envd (pid {pid}) stderr tail ----\n{}\n---- end ----",
                log_tail(&self.log_path, 6000)
            );
        }
        let _ = std::fs::remove_file(&self.log_path);
    }
}

// ---------------------------------------------------------------------------------------------
// /proc
// ---------------------------------------------------------------------------------------------

/// The fields of `/proc/PID/stat` the tests use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: u32,
    pub comm: String,
    pub state: char,
    pub ppid: u32,
    pub pgrp: u32,
    pub session: u32,
}

pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s[open + 1..close].to_string();
    let mut rest = s[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    let pgrp = rest.next()?.parse().ok()?;
    let session = rest.next()?.parse().ok()?;
    Some(ProcStat { pid, comm, state, ppid, pgrp, session })
}

/// Pids of the processes whose command line contains `marker`.
pub fn pids_with(marker: &str) -> Vec<u32> {
    all_procs()
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{}/cmdline", p.pid))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .map(|p| p.pid)
        .collect()
}

/// Every process visible in /proc.
pub fn all_procs() -> Vec<ProcStat> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                if let Some(st) = proc_stat(pid) {
                    out.push(st);
                }
            }
        }
    }
    out
}

/// Processes (zombies included) whose process group is `pgid`.
pub fn procs_in_pgid(pgid: u32) -> Vec<ProcStat> {
    all_procs().into_iter().filter(|p| p.pgrp == pgid).collect()
}

/// Direct children of `ppid` (zombies included).
pub fn children_of(ppid: u32) -> Vec<ProcStat> {
    all_procs().into_iter().filter(|p| p.ppid == ppid).collect()
}

/// Zombie children of `ppid`.
pub fn zombies_of(ppid: u32) -> Vec<ProcStat> {
    children_of(ppid).into_iter().filter(|p| p.state == 'Z').collect()
}

/// All descendants of `pid` (zombies included), not `pid` itself.
pub fn descendants(pid: u32) -> Vec<ProcStat> {
    let all = all_procs();
    let mut by_parent: HashMap<u32, Vec<&ProcStat>> = HashMap::new();
    for p in &all {
        by_parent.entry(p.ppid).or_default().push(p);
    }
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        if let Some(kids) = by_parent.get(&p) {
            for k in kids {
                if k.pid != pid {
                    out.push((*k).clone());
                    todo.push(k.pid);
                }
            }
        }
    }
    out
}

/// Whether `pid` exists and is not a zombie.
pub fn is_running(pid: u32) -> bool {
    matches!(proc_stat(pid), Some(s) if s.state != 'Z')
}

/// Whether a test must be skipped because this machine lacks `what` (root, a mount). Under
/// `CI=true` a missing capability fails the test instead: CI runs as root and a skip there would
/// count as a pass.
pub fn skip_without(available: bool, what: &str) -> bool {
    if available {
        return false;
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "CI must provide {what} for this test");
    eprintln!("skipped: needs {what}");
    true
}

pub fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

// ---------------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------------

pub fn config(cmd: &str, args: &[&str]) -> ProcessConfig {
    ProcessConfig {
        cmd: cmd.to_string(),
        args: args.iter().map(|s| s.to_string()).collect(),
        envs: HashMap::new(),
        cwd: None,
    }
}

/// `StartRequest` for `cmd args...` (stdin left absent, i.e. an open pipe).
pub fn start_req(cmd: &str, args: &[&str]) -> StartRequest {
    StartRequest { process: Some(config(cmd, args)), pty: None, tag: None, stdin: None }
}

/// `StartRequest` for `/bin/bash -c script`.
pub fn bash(script: &str) -> StartRequest {
    start_req("/bin/bash", &["-c", script])
}

pub fn by_pid(pid: u32) -> Option<ProcessSelector> {
    Some(ProcessSelector { selector: Some(Selector::Pid(pid)) })
}

pub fn by_tag(tag: &str) -> Option<ProcessSelector> {
    Some(ProcessSelector { selector: Some(Selector::Tag(tag.to_string())) })
}

pub fn pty_size(rows: u32, cols: u32) -> Option<pb::Pty> {
    Some(pb::Pty { size: Some(pb::pty::Size { cols, rows }) })
}

pub fn stdin_input(bytes: &[u8]) -> Option<pb::ProcessInput> {
    Some(pb::ProcessInput { input: Some(pb::process_input::Input::Stdin(bytes.to_vec())) })
}

pub fn pty_input(bytes: &[u8]) -> Option<pb::ProcessInput> {
    Some(pb::ProcessInput { input: Some(pb::process_input::Input::Pty(bytes.to_vec())) })
}

/// `Authorization: Basic base64("user:")`.
pub fn basic_user(user: &str) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:")))
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn unb64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).unwrap_or_else(|e| panic!("bad base64 {s:?}: {e}"))
}

/// Adds a metadata header to a tonic request.
pub fn with_meta<T>(mut req: tonic::Request<T>, key: &'static str, value: &str) -> tonic::Request<T> {
    req.metadata_mut().insert(key, value.parse().expect("metadata value"));
    req
}

// ---------------------------------------------------------------------------------------------
// Process event streams (gRPC and Connect alike)
// ---------------------------------------------------------------------------------------------

/// `StartResponse` and `ConnectResponse` both carry one `ProcessEvent`.
pub trait HasEvent {
    fn into_event(self) -> Option<process_event::Event>;
}

impl HasEvent for pb::StartResponse {
    fn into_event(self) -> Option<process_event::Event> {
        self.event.and_then(|e| e.event)
    }
}

impl HasEvent for pb::ConnectResponse {
    fn into_event(self) -> Option<process_event::Event> {
        self.event.and_then(|e| e.event)
    }
}

impl HasEvent for ProcessEvent {
    fn into_event(self) -> Option<process_event::Event> {
        self.event
    }
}

/// What a process event stream carried, in order and summed up.
#[derive(Debug, Default, Clone)]
pub struct Collected {
    pub events: Vec<process_event::Event>,
    pub pid: Option<u32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub pty: Vec<u8>,
    pub end: Option<process_event::EndEvent>,
    pub keepalives: usize,
    /// The stream ended with an error status (gRPC) or end-stream error (Connect).
    pub error: Option<(String, String)>,
    /// The stream was closed (cleanly or not).
    pub closed: bool,
}

impl Collected {
    pub fn push(&mut self, ev: process_event::Event) {
        match &ev {
            process_event::Event::Start(s) => {
                if self.pid.is_none() {
                    self.pid = Some(s.pid);
                }
            }
            process_event::Event::Data(d) => match &d.output {
                Some(Output::Stdout(b)) => self.stdout.extend_from_slice(b),
                Some(Output::Stderr(b)) => self.stderr.extend_from_slice(b),
                Some(Output::Pty(b)) => self.pty.extend_from_slice(b),
                None => {}
            },
            process_event::Event::End(e) => self.end = Some(e.clone()),
            process_event::Event::Keepalive(_) => self.keepalives += 1,
        }
        self.events.push(ev);
    }

    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    pub fn pty_str(&self) -> String {
        String::from_utf8_lossy(&self.pty).into_owned()
    }

    /// The end event; fails the test if there was none.
    pub fn end(&self) -> &process_event::EndEvent {
        self.end.as_ref().unwrap_or_else(|| panic!("stream had no end event: {self:#?}"))
    }

    pub fn pid(&self) -> u32 {
        self.pid.unwrap_or_else(|| panic!("stream had no start event: {self:#?}"))
    }

    /// Asserts the shape every Start stream must have: start first, end last, one of each.
    pub fn assert_well_formed(&self) {
        assert!(
            matches!(self.events.first(), Some(process_event::Event::Start(_))),
            "first event must be start: {:?}",
            self.events.first()
        );
        assert!(
            matches!(self.events.last(), Some(process_event::Event::End(_))),
            "last event must be end: {:?}",
            self.events.last()
        );
        let starts = self.events.iter().filter(|e| matches!(e, process_event::Event::Start(_))).count();
        let ends = self.events.iter().filter(|e| matches!(e, process_event::Event::End(_))).count();
        assert_eq!((starts, ends), (1, 1), "exactly one start and one end");
    }
}

/// The next event of a gRPC process stream: `Ok(None)` at the end of the stream.
pub async fn next_event<T: HasEvent>(
    s: &mut tonic::Streaming<T>,
    limit: Duration,
) -> Result<Option<process_event::Event>, tonic::Status> {
    loop {
        match within(limit, "next gRPC process event", s.message()).await? {
            None => return Ok(None),
            Some(m) => {
                if let Some(ev) = m.into_event() {
                    return Ok(Some(ev));
                }
            }
        }
    }
}

/// Reads events into `c` until `pred(c)` holds. Fails on timeout or if the stream ends first.
pub async fn read_until<T: HasEvent>(
    s: &mut tonic::Streaming<T>,
    c: &mut Collected,
    limit: Duration,
    what: &str,
    pred: impl Fn(&Collected) -> bool,
) {
    let deadline = Instant::now() + limit;
    while !pred(c) {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = match tokio::time::timeout(left, s.message()).await {
            Err(_) => panic!("timed out after {limit:?} waiting for {what}; so far: {c:#?}"),
            Ok(m) => m,
        };
        match msg {
            Ok(Some(m)) => {
                if let Some(ev) = m.into_event() {
                    c.push(ev);
                }
            }
            Ok(None) => panic!("stream ended before {what}; got: {c:#?}"),
            Err(st) => panic!("stream failed ({st:?}) before {what}; got: {c:#?}"),
        }
    }
}

/// Reads a gRPC process stream to its end (bounded by `limit`).
pub async fn collect<T: HasEvent>(s: &mut tonic::Streaming<T>, limit: Duration) -> Collected {
    let mut c = Collected::default();
    collect_into(s, &mut c, limit).await;
    c
}

/// Reads a gRPC process stream to its end into `c` (bounded by `limit`).
pub async fn collect_into<T: HasEvent>(s: &mut tonic::Streaming<T>, c: &mut Collected, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = match tokio::time::timeout(left, s.message()).await {
            Err(_) => panic!("timed out after {limit:?} reading the process stream to its end; so far: {c:#?}"),
            Ok(m) => m,
        };
        match msg {
            Ok(Some(m)) => {
                if let Some(ev) = m.into_event() {
                    c.push(ev);
                }
            }
            Ok(None) => {
                c.closed = true;
                return;
            }
            Err(st) => {
                c.closed = true;
                c.error = Some((code_name(st.code()).to_string(), st.message().to_string()));
                return;
            }
        }
    }
}

/// Starts a process over gRPC and returns its stream after reading the start event.
pub async fn grpc_start(
    client: &mut ProcessClient<Channel>,
    req: StartRequest,
) -> (u32, tonic::Streaming<pb::StartResponse>) {
    let mut s = within(STEP, "gRPC Start", client.start(req))
        .await
        .unwrap_or_else(|st| panic!("Start failed: {st:?}"))
        .into_inner();
    match next_event(&mut s, STEP).await {
        Ok(Some(process_event::Event::Start(st))) => (st.pid, s),
        other => panic!("first Start event must be start, got {other:?}"),
    }
}

/// Runs a process over gRPC to its end.
pub async fn grpc_run(client: &mut ProcessClient<Channel>, req: StartRequest, limit: Duration) -> Collected {
    let mut s = within(STEP, "gRPC Start", client.start(req))
        .await
        .unwrap_or_else(|st| panic!("Start failed: {st:?}"))
        .into_inner();
    collect(&mut s, limit).await
}

/// The Connect name of a gRPC code (`not_found`, ...).
pub fn code_name(c: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match c {
        Ok => "ok",
        Cancelled => "canceled",
        Unknown => "unknown",
        InvalidArgument => "invalid_argument",
        DeadlineExceeded => "deadline_exceeded",
        NotFound => "not_found",
        AlreadyExists => "already_exists",
        PermissionDenied => "permission_denied",
        ResourceExhausted => "resource_exhausted",
        FailedPrecondition => "failed_precondition",
        Aborted => "aborted",
        OutOfRange => "out_of_range",
        Unimplemented => "unimplemented",
        Internal => "internal",
        Unavailable => "unavailable",
        DataLoss => "data_loss",
        Unauthenticated => "unauthenticated",
    }
}

// ---------------------------------------------------------------------------------------------
// hangar Attach streams
// ---------------------------------------------------------------------------------------------

/// What an Attach stream carried.
#[derive(Debug, Default, Clone)]
pub struct AttachLog {
    pub start: Option<attach_event::Start>,
    pub events: Vec<attach_event::Event>,
    pub data: Vec<u8>,
    pub gaps: Vec<(u64, u64)>,
    pub end: Option<attach_event::End>,
    pub keepalives: usize,
    pub error: Option<tonic::Status>,
}

impl AttachLog {
    pub fn push(&mut self, ev: attach_event::Event) {
        match &ev {
            attach_event::Event::Start(s) => {
                if self.start.is_none() {
                    self.start = Some(s.clone());
                }
            }
            attach_event::Event::Data(d) => self.data.extend_from_slice(&d.data),
            attach_event::Event::Gap(g) => self.gaps.push((g.from, g.to)),
            attach_event::Event::End(e) => self.end = Some(e.clone()),
            attach_event::Event::Keepalive(_) => self.keepalives += 1,
        }
        self.events.push(ev);
    }

    pub fn start(&self) -> &attach_event::Start {
        self.start.as_ref().unwrap_or_else(|| panic!("attach had no start event: {:?}", self.summary()))
    }

    pub fn end(&self) -> &attach_event::End {
        self.end.as_ref().unwrap_or_else(|| panic!("attach had no end event: {:?}", self.summary()))
    }

    /// Checks that the first event is start, that gap and data events follow each other with no
    /// hole and no overlap from `first` on, and returns the offset after the last byte.
    pub fn assert_contiguous_from(&self, first: u64) -> u64 {
        assert!(
            matches!(self.events.first(), Some(attach_event::Event::Start(_))),
            "first attach event must be start: {:?}",
            self.summary()
        );
        let mut cursor = first;
        for (i, ev) in self.events.iter().enumerate().skip(1) {
            match ev {
                attach_event::Event::Data(d) => {
                    assert_eq!(
                        d.offset,
                        cursor,
                        "data event #{i} offset (len {}) does not follow the previous; events: {:?}",
                        d.data.len(),
                        self.summary()
                    );
                    cursor += d.data.len() as u64;
                }
                attach_event::Event::Gap(g) => {
                    assert_eq!(g.from, cursor, "gap #{i} must start where the data stopped: {:?}", self.summary());
                    assert!(g.to > g.from, "empty or backwards gap #{i}: {g:?}");
                    cursor = g.to;
                }
                attach_event::Event::Start(_) => panic!("second start event at #{i}"),
                attach_event::Event::End(e) => {
                    assert_eq!(i, self.events.len() - 1, "end must be the last event");
                    assert_eq!(e.total_bytes, cursor, "end.total_bytes vs the offset after the last byte");
                }
                attach_event::Event::Keepalive(_) => {}
            }
        }
        cursor
    }

    /// A short description (event kinds with offsets and lengths, not the bytes).
    pub fn summary(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .events
            .iter()
            .map(|e| match e {
                attach_event::Event::Start(s) => {
                    format!("start{{pid:{} oldest:{} next:{}}}", s.pid, s.oldest_offset, s.next_offset)
                }
                attach_event::Event::Data(d) => {
                    format!("data{{off:{} len:{} stream:{}}}", d.offset, d.data.len(), d.stream)
                }
                attach_event::Event::Gap(g) => format!("gap{{{}..{}}}", g.from, g.to),
                attach_event::Event::End(e) => format!("end{{total:{} exit:{:?}}}", e.total_bytes, e.exit),
                attach_event::Event::Keepalive(_) => "keepalive".to_string(),
            })
            .collect();
        if v.len() > 40 {
            let tail = v.split_off(v.len() - 10);
            v.truncate(30);
            v.push("...".to_string());
            v.extend(tail);
        }
        if let Some(e) = &self.error {
            v.push(format!("error {e:?}"));
        }
        v
    }
}

/// Reads an Attach stream to its end (bounded by `limit`).
pub async fn collect_attach(s: &mut tonic::Streaming<ext::AttachResponse>, limit: Duration) -> AttachLog {
    let mut log = AttachLog::default();
    collect_attach_into(s, &mut log, limit).await;
    log
}

/// Reads an Attach stream to its end into `log` (bounded by `limit`).
pub async fn collect_attach_into(s: &mut tonic::Streaming<ext::AttachResponse>, log: &mut AttachLog, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = match tokio::time::timeout(left, s.message()).await {
            Err(_) => panic!("timed out after {limit:?} reading an Attach stream; so far: {:?}", log.summary()),
            Ok(m) => m,
        };
        match msg {
            Ok(Some(m)) => {
                if let Some(ev) = m.event.and_then(|e| e.event) {
                    log.push(ev);
                }
            }
            Ok(None) => return,
            Err(st) => {
                log.error = Some(st);
                return;
            }
        }
    }
}

/// Opens a hangar Attach stream.
pub async fn attach(
    client: &mut ProcessesClient<Channel>,
    process: Option<ProcessSelector>,
    since: Option<u64>,
) -> Result<tonic::Streaming<ext::AttachResponse>, tonic::Status> {
    within(STEP, "Attach", client.attach(ext::AttachRequest { process, since })).await.map(|r| r.into_inner())
}

/// hangar List, all processes (running and exited).
pub async fn hangar_list(client: &mut ProcessesClient<Channel>) -> Vec<ext::ProcessStatus> {
    within(STEP, "hangar List", client.list(ext::ListRequest { running_only: false }))
        .await
        .expect("hangar List")
        .into_inner()
        .processes
}

// ---------------------------------------------------------------------------------------------
// HTTP / Connect plumbing
// ---------------------------------------------------------------------------------------------

pub type ReqBody = BoxBody<Bytes, Infallible>;

pub fn full_body(b: Bytes) -> ReqBody {
    BoxBody::new(Full::new(b))
}

pub fn build_request(
    method: &str,
    path: &str,
    addr: SocketAddr,
    h2: bool,
    headers: &[(&str, &str)],
    body: ReqBody,
) -> hyper::Request<ReqBody> {
    let uri = if h2 { format!("http://{addr}{path}") } else { path.to_string() };
    let mut b = hyper::Request::builder().method(method).uri(uri);
    if !h2 {
        b = b.header("host", addr.to_string());
    }
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(body).expect("request")
}

/// Sends one request on a fresh HTTP/1.1 connection.
pub async fn send_http1(addr: SocketAddr, req: hyper::Request<ReqBody>) -> hyper::Response<Incoming> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.expect("HTTP/1.1 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await.unwrap_or_else(|e| panic!("HTTP/1.1 request failed: {e}"))
}

/// Sends one request on a fresh HTTP/2 cleartext connection (prior knowledge).
pub async fn send_h2(addr: SocketAddr, req: hyper::Request<ReqBody>) -> hyper::Response<Incoming> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await.expect("h2c handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await.unwrap_or_else(|e| panic!("h2c request failed: {e}"))
}

/// A whole HTTP response.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl RawResponse {
    /// The body as JSON (`Value::Null` when empty; fails the test when not JSON).
    pub fn json(&self) -> Value {
        if self.body.is_empty() {
            return Value::Null;
        }
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "response body (status {}) is not JSON ({e}): {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).map(|v| v.to_str().unwrap_or("<non-ascii>").to_string())
    }

    /// The Connect error code in a JSON error body.
    pub fn code(&self) -> Option<String> {
        serde_json::from_slice::<Value>(&self.body)
            .ok()
            .and_then(|v| v.get("code").and_then(|c| c.as_str()).map(str::to_string))
    }
}

/// Reads a whole response (bounded by [`STEP`]).
pub async fn read_raw(resp: hyper::Response<Incoming>) -> RawResponse {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = within(STEP, "response body", resp.into_body().collect()).await.expect("read response body").to_bytes();
    RawResponse { status, headers, body }
}

/// A Connect envelope: flag byte, 4-byte big-endian length, message.
pub fn envelope(flags: u8, msg: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(5 + msg.len());
    v.push(flags);
    v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    v.extend_from_slice(msg);
    v
}

/// One envelope of a Connect stream.
#[derive(Debug, Clone)]
pub struct Envelope {
    pub flags: u8,
    pub data: Bytes,
}

impl Envelope {
    pub fn is_end(&self) -> bool {
        self.flags & 0x02 != 0
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.data).unwrap_or_else(|e| {
            panic!("envelope (flags {:#x}) is not JSON ({e}): {:?}", self.flags, String::from_utf8_lossy(&self.data))
        })
    }
}

/// A Connect streaming response being read envelope by envelope.
#[derive(Debug)]
pub struct ConnectStream {
    pub status: u16,
    pub headers: http::HeaderMap,
    body: Incoming,
    buf: BytesMut,
    eof: bool,
}

impl ConnectStream {
    pub fn new(resp: hyper::Response<Incoming>) -> Self {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        ConnectStream { status, headers, body: resp.into_body(), buf: BytesMut::new(), eof: false }
    }

    /// The next envelope, `Ok(None)` at the end of the body. Not bounded: wrap in [`within`].
    pub async fn next_envelope(&mut self) -> Result<Option<Envelope>, String> {
        loop {
            if self.buf.len() >= 5 {
                let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
                if self.buf.len() >= 5 + len {
                    let flags = self.buf[0];
                    self.buf.advance(5);
                    let data = self.buf.split_to(len).freeze();
                    return Ok(Some(Envelope { flags, data }));
                }
            }
            if self.eof {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(format!(
                    "body ended inside an envelope ({} bytes left: {:?})",
                    self.buf.len(),
                    String::from_utf8_lossy(&self.buf)
                ));
            }
            match self.body.frame().await {
                None => self.eof = true,
                Some(Err(e)) => return Err(format!("body error: {e}")),
                Some(Ok(frame)) => {
                    if let Ok(d) = frame.into_data() {
                        self.buf.extend_from_slice(&d);
                    }
                }
            }
        }
    }

    /// The next envelope within `limit` (fails the test on timeout).
    pub async fn next_within(&mut self, limit: Duration) -> Result<Option<Envelope>, String> {
        within(limit, "next Connect envelope", self.next_envelope()).await
    }

    /// The whole remaining body (for a non-200 answer).
    pub async fn rest(mut self) -> Bytes {
        let mut out = BytesMut::from(&self.buf[..]);
        while let Some(f) = within(STEP, "rest of body", self.body.frame()).await {
            if let Ok(d) = f.expect("body").into_data() {
                out.extend_from_slice(&d);
            }
        }
        out.freeze()
    }

    /// Reads JSON envelopes to the end (bounded by `limit`).
    pub async fn collect(mut self, limit: Duration) -> StreamOutcome {
        let mut out = StreamOutcome { status: self.status, ..Default::default() };
        if self.status != 200 {
            let body = self.rest().await;
            out.http_error = Some(
                serde_json::from_slice(&body)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned())),
            );
            return out;
        }
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let env = match tokio::time::timeout(left, self.next_envelope()).await {
                Err(_) => panic!("timed out after {limit:?} reading a Connect stream; so far: {out:#?}"),
                Ok(e) => e,
            };
            match env {
                Ok(Some(e)) if e.is_end() => {
                    out.end = Some(e.json());
                }
                Ok(Some(e)) => out.messages.push(e.json()),
                Ok(None) => return out,
                Err(e) => {
                    out.transport_error = Some(e);
                    return out;
                }
            }
        }
    }
}

/// A Connect JSON stream read to its end.
#[derive(Debug, Default, Clone)]
pub struct StreamOutcome {
    pub status: u16,
    pub messages: Vec<Value>,
    /// The end-of-stream envelope's JSON.
    pub end: Option<Value>,
    /// The JSON body of a non-200 answer.
    pub http_error: Option<Value>,
    pub transport_error: Option<String>,
}

impl StreamOutcome {
    /// The error code: from a non-200 answer's body or from the end-of-stream envelope.
    pub fn error_code(&self) -> Option<String> {
        if let Some(e) = &self.http_error {
            return e.get("code").and_then(|c| c.as_str()).map(str::to_string);
        }
        self.end
            .as_ref()
            .and_then(|e| e.get("error"))
            .and_then(|e| e.get("code"))
            .and_then(|c| c.as_str())
            .map(str::to_string)
    }

    /// The messages decoded as process events.
    pub fn collected(&self) -> Collected {
        let mut c = Collected::default();
        for m in &self.messages {
            let r: pb::StartResponse = serde_json::from_value(m.clone())
                .unwrap_or_else(|e| panic!("stream message is not a process event ({e}): {m}"));
            if let Some(ev) = r.into_event() {
                c.push(ev);
            }
        }
        c.closed = true;
        if let Some(code) = self.error_code() {
            c.error = Some((code, String::new()));
        }
        c
    }

    /// Asserts a clean end: 200, end-of-stream envelope without error.
    pub fn assert_clean_end(&self) {
        assert_eq!(self.status, 200, "HTTP status of the stream: {self:#?}");
        let end = self.end.as_ref().unwrap_or_else(|| panic!("no end-of-stream envelope: {self:#?}"));
        assert!(end.get("error").is_none(), "stream ended with an error: {end}");
        assert!(self.transport_error.is_none(), "{self:#?}");
    }
}
