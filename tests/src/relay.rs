//! The relay harness: start the real `hangar-relay` on a fresh state directory and drive its
//! REST and SSE API as curl would. Dropping it stops the relay and every daemon its local
//! sandboxes started (they outlive the relay by design).
use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;

use crate::{
    build_request, cmdline, descendants, envd_bin, full_body, pids_with_all, read_raw, send_http1, within, RawResponse,
    STEP,
};

pub const ADMIN: &str = "admin-secret-for-tests";

pub fn relay_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("HANGAR_RELAY_BIN") {
        return PathBuf::from(p);
    }
    envd_bin().with_file_name("hangar-relay")
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh state directory, removed (with its daemons) when the `StateDir` drops.
pub struct StateDir(pub PathBuf);

impl StateDir {
    pub fn new() -> StateDir {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("hangar-relay-e2e-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        StateDir(p)
    }

    /// Pids of the daemons whose command line names this state directory: the `hangar-envd`
    /// processes themselves, not the `unshare` that starts an isolated one (whose arguments
    /// name it too).
    pub fn daemons(&self) -> Vec<u32> {
        // With the separator: `...-1` must not match the daemons of `...-10`.
        let needle = format!("{}/", self.0.to_string_lossy());
        pids_with_all(&[&needle, "hangar-envd"])
            .into_iter()
            .filter(|p| {
                cmdline(*p).is_some_and(|c| c.split('\0').next().is_some_and(|exe| exe.ends_with("hangar-envd")))
            })
            .collect()
    }

    /// The host pid of one sandbox's daemon (not its `unshare`), found by the token file its
    /// command line names; fails the test unless there is exactly one.
    pub fn daemon_of(&self, sandbox_id: &str) -> u32 {
        let token_file = format!("{}/sandboxes/{sandbox_id}/envd.token", self.0.display());
        let pids: Vec<u32> = self
            .daemons()
            .into_iter()
            .filter(|p| cmdline(*p).is_some_and(|c| c.split('\0').any(|a| a == token_file)))
            .collect();
        assert_eq!(pids.len(), 1, "one daemon for {sandbox_id}: {pids:?}");
        pids[0]
    }
}

impl Default for StateDir {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for StateDir {
    fn drop(&mut self) {
        for pid in self.daemons() {
            for p in descendants(pid) {
                // SAFETY: kill(2) on processes this test's relay started.
                unsafe { libc::kill(p.pid as i32, libc::SIGKILL) };
            }
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        // Local sandboxes' work directories are filesystems mounted on the host (when the relay
        // is root): unmounted first, or removing the directory would leave them, and their loop
        // devices, behind.
        for point in crate::mount_points_under(&self.0) {
            if let Ok(c) = std::ffi::CString::new(point.as_os_str().as_encoded_bytes()) {
                // SAFETY: umount2(2) on a mount under this test's own state directory.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A token as its creation shows it: the id (to revoke it) and the secret (shown once).
pub struct Token {
    pub id: String,
    pub secret: String,
}

pub struct Relay {
    child: Child,
    pub addr: SocketAddr,
    stderr_path: PathBuf,
}

impl Relay {
    /// Starts a relay on `state` with the admin token `ADMIN` and `env` added.
    pub fn start(state: &Path, env: &[(&str, &str)]) -> Relay {
        Relay::start_under(&[], state, env)
    }

    /// As `start`, with the relay run by the command `wrapper` (its program and arguments, the
    /// relay's command line following), such as `unshare` into a scratch mount namespace.
    pub fn start_under(wrapper: &[&str], state: &Path, env: &[(&str, &str)]) -> Relay {
        std::fs::create_dir_all(state.parent().unwrap_or(Path::new("/tmp"))).expect("temp dir");
        let stderr_path = state.with_extension(format!("stderr-{}.log", COUNTER.fetch_add(1, Ordering::SeqCst)));
        let stderr = std::fs::File::create(&stderr_path).expect("relay log file");
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(relay_bin());
                c
            }
            None => Command::new(relay_bin()),
        };
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--state-dir"])
            .arg(state)
            .env("HANGAR_ADMIN_TOKEN", ADMIN)
            .env("HANGAR_ENVD_BIN", envd_bin())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        // A relay that is not root cannot isolate its local sandboxes and, by default, lets only
        // admin tokens use them: the tests that use other tokens there would fail for a reason
        // that is not theirs. As root the sandboxes are isolated and nothing is allowed here;
        // a test may still say otherwise in `env`.
        if !crate::is_root() {
            cmd.env("HANGAR_ALLOW_UNISOLATED_SANDBOXES", "true");
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("starting {}: {e}", relay_bin().display()));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let addr = loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(a) = line.strip_prefix("hangar-relay listening on http://") {
                        break a.parse().expect("relay address");
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    panic!(
                        "hangar-relay printed no address; stderr:\n{}",
                        std::fs::read_to_string(&stderr_path).unwrap_or_default()
                    );
                }
            }
        };
        Relay { child, addr, stderr_path }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// SIGTERM, then wait for the exit.
    pub fn stop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!("hangar-relay did not exit within 10 s of SIGTERM");
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Bytes>,
    ) -> hyper::Request<crate::ReqBody> {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut headers: Vec<(&str, &str)> = vec![("content-type", "application/json")];
        if let Some(a) = &auth {
            headers.push(("authorization", a));
        }
        build_request(method, path, self.addr, false, &headers, full_body(body.unwrap_or_default()))
    }

    /// A new token of `scope` made with the admin token.
    pub async fn token(&self, name: &str, scope: &str) -> Token {
        let r = self
            .call("POST", "/api/tokens", Some(ADMIN), Some(serde_json::json!({"name": name, "scope": scope})))
            .await;
        assert_eq!(r.status, 201, "creating token {name:?}: {r:?}");
        let v = r.json();
        let field = |k: &str| v[k].as_str().unwrap_or_else(|| panic!("token without {k}: {v}")).to_string();
        Token { id: field("id"), secret: field("secret") }
    }

    /// Shares a sandbox (with the admin token) with `persons` (`"*"`: every person), replacing
    /// whom it was shared with.
    pub async fn share(&self, sandbox: &str, persons: &[&str]) {
        let body = serde_json::json!({ "shared_with": persons });
        let r = self.call("PATCH", &format!("/api/sandboxes/{sandbox}"), Some(ADMIN), Some(body)).await;
        assert_eq!(r.status, 200, "sharing sandbox {sandbox:?}: {r:?}");
    }

    /// Shares the `default` sandbox, which is the admins' alone until then, with every person:
    /// for tests that use it with other tokens than the admin's.
    pub async fn share_default(&self) {
        self.share("default", &["*"]).await;
    }

    /// One request, the whole response.
    pub async fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<Value>) -> RawResponse {
        self.call_raw(method, path, token, body.map(|b| Bytes::from(b.to_string()))).await
    }

    pub async fn call_raw(&self, method: &str, path: &str, token: Option<&str>, body: Option<Bytes>) -> RawResponse {
        let req = self.request(method, path, token, body);
        let resp = within(STEP, &format!("{method} {path}"), send_http1(self.addr, req)).await;
        within(STEP, &format!("reading {method} {path}"), read_raw(resp)).await
    }

    /// Opens an SSE stream on a connection whose socket receives at most about `rcvbuf` bytes
    /// (`SO_RCVBUF`, set before connecting so the TCP window is small from the start). Until it
    /// is read, it is a client that opened a stream and stopped reading: the relay's writes to
    /// it block as soon as the kernel's buffers are full.
    pub async fn sse_stalled(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
        rcvbuf: u32,
    ) -> Sse {
        let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
        socket.set_recv_buffer_size(rcvbuf).expect("SO_RCVBUF");
        let tcp = within(STEP, "connecting to the relay", socket.connect(self.addr))
            .await
            .unwrap_or_else(|e| panic!("connect {}: {e}", self.addr));
        let req = self.request(method, path, token, body.map(|b| Bytes::from(b.to_string())));
        let resp = within(STEP, &format!("{method} {path}"), crate::send_http1_over(tcp, req)).await;
        Sse::from_response(resp)
    }

    /// Opens an SSE `GET` with `headers` added (a reconnecting client's `Last-Event-ID`).
    pub async fn sse_with(&self, path: &str, token: Option<&str>, headers: &[(&str, &str)]) -> Sse {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut all: Vec<(&str, &str)> = headers.to_vec();
        if let Some(a) = &auth {
            all.push(("authorization", a));
        }
        let req = build_request("GET", path, self.addr, false, &all, full_body(Bytes::new()));
        let resp = within(STEP, &format!("GET {path}"), send_http1(self.addr, req)).await;
        Sse::from_response(resp)
    }

    /// Opens an SSE stream.
    pub async fn sse(&self, method: &str, path: &str, token: Option<&str>, body: Option<Value>) -> Sse {
        let req = self.request(method, path, token, body.map(|b| Bytes::from(b.to_string())));
        let resp = within(STEP, &format!("{method} {path}"), send_http1(self.addr, req)).await;
        Sse::from_response(resp)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One SSE event.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

impl SseEvent {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {:?}", self.data))
    }
}

pub struct Sse {
    pub status: u16,
    body: Incoming,
    buf: BytesMut,
}

impl Sse {
    /// Reads a response already received as a stream of events (an MCP call's answer, say).
    pub fn from_response(resp: hyper::Response<Incoming>) -> Sse {
        Sse { status: resp.status().as_u16(), body: resp.into_body(), buf: BytesMut::new() }
    }

    /// The next event (comments skipped), or `None` when the stream ends; fails after `limit`.
    pub async fn next(&mut self, limit: Duration) -> Option<SseEvent> {
        within(limit, "the next SSE event", async {
            loop {
                if let Some(ev) = self.parse_one() {
                    if ev.event.is_empty() && ev.data.is_empty() {
                        continue;
                    }
                    return Some(ev);
                }
                match self.body.frame().await {
                    Some(Ok(f)) => {
                        if let Ok(d) = f.into_data() {
                            self.buf.extend_from_slice(&d);
                        }
                    }
                    _ => return None,
                }
            }
        })
        .await
    }

    /// Every event until the stream ends.
    pub async fn collect(&mut self, limit: Duration) -> Vec<SseEvent> {
        let mut v = Vec::new();
        while let Some(e) = self.next(limit).await {
            v.push(e);
        }
        v
    }

    fn parse_one(&mut self) -> Option<SseEvent> {
        let text = std::str::from_utf8(&self.buf).ok()?;
        let end = text.find("\n\n")?;
        let block = text[..end].to_string();
        let _ = self.buf.split_to(end + 2);
        let mut ev = SseEvent { event: String::new(), id: None, data: String::new() };
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event:") {
                ev.event = v.trim_start().to_string();
            } else if let Some(v) = line.strip_prefix("id:") {
                ev.id = Some(v.trim_start().to_string());
            } else if let Some(v) = line.strip_prefix("data:") {
                if !ev.data.is_empty() {
                    ev.data.push('\n');
                }
                ev.data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
        }
        Some(ev)
    }
}
