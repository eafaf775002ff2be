//! Commands run to completion: through the sandbox's daemon (output streamed as it prints) or,
//! without one, through the provider's exec (output in one piece at the end).
use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use futures::Stream;
use hangar_proto::{
    ext::SignalRequest,
    process::{process_event, process_selector, ProcessConfig, ProcessSelector, StartRequest},
};

use crate::{envd::Envd, providers::ExecOutput};

/// How much of each output the result keeps.
pub const RESULT_TAIL_BYTES: usize = 256 * 1024;

#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub command: String,
    pub cwd: Option<String>,
    pub timeout: Duration,
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
