//! The daemon under test: where the `hangar-envd` binary is, starting it on a free port
//! ([`EnvdBuilder`]), and the running daemon ([`Envd`]) with its clients (gRPC, HTTP/1.1, h2c,
//! Connect). Dropping an [`Envd`] kills it and everything it started.
use std::{
    collections::HashSet,
    convert::Infallible,
    io::{BufRead, BufReader, Read},
    net::SocketAddr,
    os::unix::process::CommandExt as _,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicUsize, Ordering},
        mpsc as std_mpsc,
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, StreamBody};
use hyper::body::{Frame, Incoming};
use serde_json::Value;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};

use crate::{
    build_request, descendants, envelope, full_body, read_raw, send_h2, send_http1, within, ConnectStream, RawResponse,
    StreamOutcome, STEP,
};
use hangar_proto::{
    ext::{daemon_client::DaemonClient, processes_client::ProcessesClient},
    process::process_client::ProcessClient,
};

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
    /// Another hangar-envd binary than [`envd_bin`]'s.
    bin: Option<PathBuf>,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    nofile: Option<u64>,
    user: Option<(u32, u32)>,
}

impl EnvdBuilder {
    /// Runs this binary instead of [`envd_bin`]'s (the bench's shipped build, say).
    pub fn bin(mut self, path: impl Into<PathBuf>) -> Self {
        self.bin = Some(path.into());
        self
    }

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

    /// Starts the daemon with `RLIMIT_NOFILE` (soft and hard) at `n`, as `ulimit -n n` would: for
    /// tests of how many descriptors the daemon keeps.
    pub fn nofile(mut self, n: u64) -> Self {
        self.nofile = Some(n);
        self
    }

    /// Runs the daemon as `uid`/`gid` (no supplementary groups) instead of the test's user: for
    /// a daemon without root's rights. The test must be root.
    pub fn run_as(mut self, uid: u32, gid: u32) -> Self {
        self.user = Some((uid, gid));
        self
    }

    /// Spawns the daemon with `--listen 127.0.0.1 --port 0` plus the given arguments and waits
    /// (10 s at most) for its `hangar-envd listening on http://IP:PORT` line.
    pub fn start(self) -> Envd {
        let bin = self.bin.clone().unwrap_or_else(envd_bin);
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
        if let Some(n) = self.nofile {
            let lim = libc::rlimit { rlim_cur: n as libc::rlim_t, rlim_max: n as libc::rlim_t };
            // SAFETY: setrlimit is async-signal-safe and `lim` was built before the fork.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        if let Some((uid, gid)) = self.user {
            // std drops the supplementary groups too when root switches uid.
            cmd.uid(uid).gid(gid);
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

/// Removes the (now empty) cgroups a killed daemon made beside the test's own
/// (`hangar-envd.<pidns>.<pid>.<start>`), so a test run leaves none behind; a daemon that
/// starts later would remove them too. The start time tells it from a daemon that reuses the pid.
fn remove_cgroups_of(pid: u32, start: u64) {
    fn remove(dir: &std::path::Path) {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                if e.path().is_dir() {
                    remove(&e.path());
                }
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
    let Some(own) = crate::own_cgroup_dir() else { return };
    let Ok(rd) = std::fs::read_dir(&own) else { return };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("hangar-envd.") && name.ends_with(&format!(".{pid}.{start}")) {
            remove(&e.path());
        }
    }
}

/// A process's start time (field 22 of `/proc/PID/stat`, clock ticks since boot).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(22 - 3)?.parse().ok()
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
        let start = start_time(pid);
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
        if let Some(start) = start {
            remove_cgroups_of(pid, start);
        }
        if std::thread::panicking() {
            eprintln!(
                "---- hangar-envd (pid {pid}) stderr tail ----\n{}\n---- end ----",
                log_tail(&self.log_path, 6000)
            );
        }
        let _ = std::fs::remove_file(&self.log_path);
    }
}
