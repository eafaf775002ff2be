//! Commands run to completion: through the sandbox's daemon (output streamed as it prints) or,
//! without one, through the provider's exec (output in one piece at the end).
use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use futures::{Stream, StreamExt};
use hangar_proto::{
    ext::SignalRequest,
    process::{process_event, process_selector, ProcessConfig, ProcessSelector, StartRequest},
};

use crate::{
    auth::Caller,
    envd::Envd,
    error::ApiError,
    events,
    providers::ExecOutput,
    streams::{Kind, Reason},
    Relay,
};

/// How much of each output the result keeps.
pub const RESULT_TAIL_BYTES: usize = 256 * 1024;
/// The longest a command may run.
pub const MAX_TIMEOUT_SECONDS: u64 = 24 * 3600;
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 600;

#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub command: String,
    pub cwd: Option<String>,
    pub timeout: Duration,
}

impl ExecRequest {
    /// Checks what a client asked for: a command, and a timeout (seconds) within bounds.
    pub fn new(command: String, cwd: Option<String>, timeout: Option<u64>) -> Result<ExecRequest, ApiError> {
        if command.trim().is_empty() {
            return Err(ApiError::bad_request("command must not be empty"));
        }
        let timeout = timeout.unwrap_or(DEFAULT_TIMEOUT_SECONDS);
        if timeout == 0 || timeout > MAX_TIMEOUT_SECONDS {
            return Err(ApiError::bad_request(format!("timeout: 1 to {MAX_TIMEOUT_SECONDS} seconds")));
        }
        Ok(ExecRequest { command, cwd, timeout: Duration::from_secs(timeout) })
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ExecResult {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    /// Whether output reached the client as it was printed.
    pub streamed: bool,
    /// Why the command was cut off, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone)]
pub enum ExecEvent {
    Stdout(String),
    Stderr(String),
    Result(ExecResult),
}

/// The last `cap` bytes of an output.
#[derive(Debug, Default)]
pub struct Tail {
    buf: Vec<u8>,
}

impl Tail {
    pub fn push(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
        if self.buf.len() > 2 * RESULT_TAIL_BYTES {
            self.buf.drain(..self.buf.len() - RESULT_TAIL_BYTES);
        }
    }

    pub fn text(&self) -> String {
        let start = self.buf.len().saturating_sub(RESULT_TAIL_BYTES);
        let mut tail = &self.buf[start..];
        // Cutting may split a character: start at the next character boundary.
        while let [first, rest @ ..] = tail {
            if first & 0b1100_0000 == 0b1000_0000 {
                tail = rest;
            } else {
                break;
            }
        }
        String::from_utf8_lossy(tail).into_owned()
    }
}

/// Decodes UTF-8 that arrives in chunks which may split a character.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[..valid]).unwrap_or_default());
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                        None => {
                            // An incomplete character at the end: wait for the rest.
                            self.pending.drain(..valid);
                            return out;
                        }
                    }
                }
            }
        }
    }
}

/// Kills the command's process group if the stream is dropped before its end: a streamed command
/// whose client goes away, or whose token is revoked, is killed. `spare` (set by whoever cuts
/// the stream off for a shutdown, pause or destroy) lets it run on.
struct KillOnDrop {
    envd: Envd,
    pid: Option<u32>,
    armed: bool,
    spare: Arc<AtomicBool>,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let (true, false, Some(pid)) = (self.armed, self.spare.load(Ordering::SeqCst), self.pid) {
            let envd = self.envd.clone();
            tokio::spawn(async move {
                let req = SignalRequest {
                    process: Some(ProcessSelector { selector: Some(process_selector::Selector::Pid(pid)) }),
                    signal: libc::SIGKILL,
                    escalate_after_ms: None,
                };
                let _ = envd.processes().signal(req).await;
            });
        }
    }
}

/// Runs `req` through the daemon: output events as they arrive, then the result. Dropping the
/// stream before the result kills the command unless `spare` is set.
pub fn through_daemon(
    envd: Envd,
    req: ExecRequest,
    spare: Arc<AtomicBool>,
) -> impl Stream<Item = ExecEvent> + Send + 'static {
    async_stream::stream! {
        let mut start = tonic::Request::new(StartRequest {
            process: Some(ProcessConfig {
                cmd: "/bin/bash".into(),
                args: vec!["-lc".into(), req.command.clone()],
                envs: Default::default(),
                cwd: req.cwd.clone(),
            }),
            pty: None,
            tag: None,
            stdin: Some(false),
        });
        // The daemon kills the process group at this deadline.
        start.set_timeout(req.timeout);
        let mut guard = KillOnDrop { envd: envd.clone(), pid: None, armed: true, spare };
        let (mut out, mut err) = (Tail::default(), Tail::default());
        let (mut out_text, mut err_text) = (Utf8Stream::default(), Utf8Stream::default());
        let mut stream = match envd.process().start(start).await {
            Ok(s) => s.into_inner(),
            Err(s) => {
                guard.armed = false;
                yield ExecEvent::Result(ExecResult {
                    exit_code: -1, stdout: String::new(), stderr: String::new(), streamed: true,
                    closed: Some("error"), error: Some(format!("the daemon refused the command: {}", s.message())),
                });
                return;
            }
        };
        loop {
            let ev = match stream.message().await {
                Ok(Some(m)) => m.event.and_then(|e| e.event),
                Ok(None) => {
                    guard.armed = false;
                    yield ExecEvent::Result(ExecResult {
                        exit_code: -1, stdout: out.text(), stderr: err.text(), streamed: true,
                        closed: Some("error"), error: Some("the daemon ended the stream without an end event".into()),
                    });
                    return;
                }
                Err(s) => {
                    guard.armed = false;
                    yield ExecEvent::Result(ExecResult {
                        exit_code: -1, stdout: out.text(), stderr: err.text(), streamed: true,
                        closed: Some("error"), error: Some(format!("the daemon's stream broke: {}", s.message())),
                    });
                    return;
                }
            };
            match ev {
                Some(process_event::Event::Start(s)) => guard.pid = Some(s.pid),
                Some(process_event::Event::Data(d)) => match d.output {
                    Some(process_event::data_event::Output::Stdout(b)) => {
                        out.push(&b);
                        let t = out_text.push(&b);
                        if !t.is_empty() { yield ExecEvent::Stdout(t); }
                    }
                    Some(process_event::data_event::Output::Stderr(b)) => {
                        err.push(&b);
                        let t = err_text.push(&b);
                        if !t.is_empty() { yield ExecEvent::Stderr(t); }
                    }
                    _ => {}
                },
                Some(process_event::Event::End(end)) => {
                    guard.armed = false;
                    yield ExecEvent::Result(ExecResult {
                        exit_code: end.exit_code, stdout: out.text(), stderr: err.text(), streamed: true,
                        closed: None, error: end.error,
                    });
                    return;
                }
                Some(process_event::Event::Keepalive(_)) | None => {}
            }
        }
    }
}

/// Runs a command to its end and returns the result: through the sandbox's daemon, or its
/// provider's exec without one. Not cut off by its client: it runs to its end or its timeout.
pub async fn run(relay: &Relay, reference: &str, mut req: ExecRequest) -> Result<ExecResult, ApiError> {
    let mut row = relay.sandboxes.get(&relay.store, reference)?;
    relay.sandboxes.runnable(&row)?;
    req.cwd = req.cwd.map(|c| relay.sandboxes.resolve_path(&row, &c)).transpose()?;
    let result = match relay.sandboxes.daemon(&relay.store, &mut row).await {
        Ok(Some(envd)) => {
            let mut result = None;
            let events = through_daemon(envd, req, Arc::new(AtomicBool::new(true)));
            futures::pin_mut!(events);
            while let Some(ev) = events.next().await {
                if let ExecEvent::Result(r) = ev {
                    result = Some(ExecResult { streamed: false, ..r });
                }
            }
            result.ok_or_else(|| ApiError::bad_gateway("the command's stream ended without a result"))?
        }
        _ => from_fallback(relay.sandboxes.exec_fallback(&row, &req.command, req.cwd.as_deref(), req.timeout).await?),
    };
    events::ExecFinished { sandbox: &row.name, streamed: false, exit_code: result.exit_code, closed: result.closed }
        .emit();
    Ok(result)
}

/// Runs a command as a stream (`kind` says who serves it): output events as it prints, then one
/// result. The stream is admitted against the limits before anything runs (the error says which
/// limit refused it). Dropping the stream before its result (the client went away) kills the
/// command; a revoked token kills it too; a shutdown, pause or destroyed sandbox spares it and
/// the result says `closed` and why. Without a daemon the output arrives in one piece at the end.
pub async fn stream(
    relay: Arc<Relay>,
    caller: &Caller,
    reference: &str,
    mut req: ExecRequest,
    kind: Kind,
) -> Result<impl Stream<Item = ExecEvent> + Send + 'static, ApiError> {
    let mut row = relay.sandboxes.get(&relay.store, reference)?;
    relay.sandboxes.runnable(&row)?;
    req.cwd = req.cwd.map(|c| relay.sandboxes.resolve_path(&row, &c)).transpose()?;
    let mut stream = relay.streams.open(caller, &row.id, kind)?;
    let daemon = relay.sandboxes.daemon(&relay.store, &mut row).await.ok().flatten();
    let name = row.name.clone();
    let spare = Arc::new(AtomicBool::new(false));
    Ok(async_stream::stream! {
        let events: std::pin::Pin<Box<dyn Stream<Item = ExecEvent> + Send>> = match daemon {
            Some(envd) => Box::pin(through_daemon(envd, req, spare.clone())),
            None => {
                let r = relay.sandboxes.exec_fallback(&row, &req.command, req.cwd.as_deref(), req.timeout).await;
                let r = match r {
                    Ok(o) => from_fallback(o),
                    Err(e) => ExecResult {
                        exit_code: -1, stdout: String::new(), stderr: String::new(), streamed: false,
                        closed: Some("error"), error: Some(e.message),
                    },
                };
                // Without a daemon the output arrives in one piece at the end.
                let mut v = Vec::new();
                if !r.stdout.is_empty() { v.push(ExecEvent::Stdout(r.stdout.clone())); }
                if !r.stderr.is_empty() { v.push(ExecEvent::Stderr(r.stderr.clone())); }
                v.push(ExecEvent::Result(r));
                Box::pin(futures::stream::iter(v))
            }
        };
        futures::pin_mut!(events);
        // What the client was sent, for a result when the stream is cut off.
        let (mut out, mut err) = (Tail::default(), Tail::default());
        let mut capped = false;
        loop {
            // A close is checked first: when a sandbox is destroyed its daemon's stream breaks
            // too, and the reason to report is the destroy.
            let ev = tokio::select! {
                biased;
                reason = stream.closed() => {
                    // A shutdown, pause or destroyed sandbox spares the command; revocation kills it.
                    if matches!(reason, Reason::Shutdown | Reason::Paused | Reason::Destroyed) {
                        spare.store(true, Ordering::SeqCst);
                    }
                    stream.end(reason);
                    let r = ExecResult {
                        exit_code: -1, stdout: out.text(), stderr: err.text(), streamed: true,
                        closed: Some(reason.as_str()), error: None,
                    };
                    events::ExecFinished { sandbox: &name, streamed: true, exit_code: -1, closed: r.closed }.emit();
                    yield ExecEvent::Result(r);
                    return;
                }
                ev = events.next() => ev,
            };
            let Some(ev) = ev else { stream.end(Reason::Error); return; };
            match &ev {
                ExecEvent::Stdout(t) | ExecEvent::Stderr(t) => {
                    if capped { continue; }
                    if stream.send(t.len() as u64).await.is_err() {
                        // Past HANGAR_STREAM_MAX_BYTES nothing more is sent; the result still has
                        // the end of the output.
                        capped = true;
                        continue;
                    }
                    match &ev { ExecEvent::Stdout(_) => out.push(t.as_bytes()), _ => err.push(t.as_bytes()) }
                }
                ExecEvent::Result(r) => {
                    let r = if capped && r.closed.is_none() { ExecResult { closed: Some(Reason::MaxBytes.as_str()), ..r.clone() } } else { r.clone() };
                    stream.end(if r.closed == Some("error") { Reason::Error } else if capped { Reason::MaxBytes } else { Reason::Done });
                    events::ExecFinished { sandbox: &name, streamed: r.streamed, exit_code: r.exit_code, closed: r.closed }.emit();
                    yield ExecEvent::Result(r);
                    return;
                }
            }
            yield ev;
        }
    })
}

/// The provider's exec result in the relay's shape.
pub fn from_fallback(o: ExecOutput) -> ExecResult {
    let (mut out, mut err) = (Tail::default(), Tail::default());
    out.push(&o.stdout);
    err.push(&o.stderr);
    ExecResult {
        exit_code: o.exit_code,
        stdout: out.text(),
        stderr: err.text(),
        streamed: false,
        closed: o.timed_out.then_some("lifetime"),
        error: o.timed_out.then(|| "the command timed out and was killed".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_characters_decode_once_whole() {
        let mut d = Utf8Stream::default();
        let euro = "€".as_bytes();
        assert_eq!(d.push(&euro[..1]), "");
        assert_eq!(d.push(&euro[1..]), "€");
        assert_eq!(d.push(b"a\xffb"), "a\u{fffd}b");
    }

    #[test]
    fn tails_keep_the_end_on_a_character_boundary() {
        let mut t = Tail::default();
        t.push(&vec![b'x'; RESULT_TAIL_BYTES * 3]);
        t.push("é".as_bytes());
        let s = t.text();
        assert!(s.len() <= RESULT_TAIL_BYTES && s.ends_with('é'));
        assert!(!s.starts_with('\u{fffd}'));
    }
}
