//! Commands run to completion: through the sandbox's daemon (output streamed as it prints) or,
//! without one, through the provider's exec (output in one piece at the end). Both are reached
//! through the sandbox's runner (`sandboxes::run`); this module shapes their output into events
//! and a result.
use std::{
    collections::VecDeque,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use futures::{Stream, StreamExt};
use hangar_proto::process::{process_event, StartResponse};

use crate::{
    auth::{Caller, MacKey},
    config::Limits,
    envd::Envd,
    error::{Error, Limit, Result},
    events,
    processes::OutputStream,
    providers::{ExecOutput, EXEC_OUTPUT_BYTES},
    sandboxes::{
        run::{self, Program, Runner},
        Sandboxes,
    },
    store::{SandboxRow, Store},
    streams::{
        buffer::{Buffer, Full, Shed},
        Front, Kind, Reason, Streams, MESSAGE_OVERHEAD,
    },
    text::{Tail, Utf8Decoder},
};

/// How much of each output the result keeps: what a provider's exec keeps, so a result says the
/// same with a daemon or without.
pub const RESULT_TAIL_BYTES: usize = EXEC_OUTPUT_BYTES;
/// The longest a command may run.
pub const MAX_TIMEOUT_SECONDS: u64 = 24 * 3600;
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 600;
/// Checking that a `cwd` exists is one short command.
const CWD_CHECK_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub command: String,
    pub cwd: Option<String>,
    pub timeout: Duration,
}

/// Whether an exec's client reads its output as it prints (and its command dies with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Streamed,
    Unstreamed,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Streamed => "s",
            Mode::Unstreamed => "u",
        }
    }

    fn parse(s: &str) -> Option<Mode> {
        match s {
            "s" => Some(Mode::Streamed),
            "u" => Some(Mode::Unstreamed),
            _ => None,
        }
    }
}

const TAG_PREFIX: &str = "hangar-exec:";

/// The daemon tag of a command the relay runs: `hangar-exec:<mode>:<token id>:<id>:<MAC>`, the
/// MAC (under the relay's key) of token, sandbox, id and mode. It lets a restarted relay find
/// what it started, whose it was and how, and nothing made up in the sandbox passes for it. The
/// id starts with the run of the relay that made it (`x_<run>_...`), so a relay never takes its
/// own commands for an earlier run's.
pub fn tag(key: &MacKey, run: &str, token_id: &str, sandbox: &SandboxRow, mode: Mode) -> String {
    let id = format!("x_{run}_{}", crate::random::hex(6));
    let mac = key.mac(&[token_id, &sandbox.id, &id, mode.as_str()]);
    format!("{TAG_PREFIX}{}:{token_id}:{id}:{mac}", mode.as_str())
}

/// An exec tag the relay made for this sandbox.
pub struct ExecTag {
    pub token: String,
    pub mode: Mode,
    /// The run of the relay that started it.
    pub run: String,
}

/// The exec tag `tag` is, if the relay made it for this sandbox; `None` for anything else.
pub fn parse_tag(key: &MacKey, sandbox: &SandboxRow, tag: &str) -> Option<ExecTag> {
    let mut parts = tag.strip_prefix(TAG_PREFIX)?.split(':');
    let (mode, token, id, mac) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let m = Mode::parse(mode)?;
    let run = id.strip_prefix("x_")?.split_once('_')?.0;
    key.verify(&[token, &sandbox.id, id, mode], mac).then(|| ExecTag {
        token: token.to_string(),
        mode: m,
        run: run.to_string(),
    })
}

/// Commands run to their end: what they need and nothing else.
pub struct Execs {
    sandboxes: Arc<Sandboxes>,
    streams: Arc<Streams>,
    /// Where a spared command's tag is kept for the next run of the relay.
    store: Arc<Store>,
    /// Running unstreamed execs, per token (recovery adopts an earlier run's).
    pub unstreamed: Arc<Unstreamed>,
    /// The MAC key and this run of the relay, in every command's tag.
    key: MacKey,
    run: String,
    limits: Limits,
}

impl Execs {
    pub fn new(
        sandboxes: Arc<Sandboxes>,
        streams: Arc<Streams>,
        store: Arc<Store>,
        key: MacKey,
        run: String,
        limits: Limits,
    ) -> Arc<Execs> {
        Arc::new(Execs { sandboxes, streams, store, unstreamed: Arc::default(), key, run, limits })
    }
}

/// Running unstreamed execs, per token: they count against
/// `HANGAR_EXEC_UNSTREAMED_MAX_PER_TOKEN` until they end, whatever their clients do.
#[derive(Default)]
pub struct Unstreamed {
    running: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

/// One running unstreamed exec's place in the count; freed when dropped.
pub struct Slot {
    execs: Arc<Unstreamed>,
    token: String,
}

impl Unstreamed {
    /// Takes a place for `token`, or says the limit refuses it.
    pub fn take(self: &Arc<Self>, token: &str, limit: usize) -> Result<Slot> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let n = running.entry(token.to_string()).or_default();
        if *n >= limit {
            let message = format!("this token already has {n} running unstreamed execs (limit {limit})");
            return Err(Error::Limit { limit: Limit::UnstreamedExecsPerToken, message });
        }
        *n += 1;
        Ok(Slot { execs: self.clone(), token: token.to_string() })
    }

    /// Takes a place whatever the limit (a command found running after a restart).
    pub fn adopt(self: &Arc<Self>, token: &str) -> Slot {
        *self.running.lock().unwrap_or_else(|p| p.into_inner()).entry(token.to_string()).or_default() += 1;
        Slot { execs: self.clone(), token: token.to_string() }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut running = self.execs.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = running.get_mut(&self.token) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                running.remove(&self.token);
            }
        }
    }
}

impl ExecRequest {
    /// Checks what a client asked for: a command, and a timeout (seconds) within bounds.
    pub fn new(command: String, cwd: Option<String>, timeout: Option<u64>) -> Result<ExecRequest> {
        run::check_command(&command)?;
        let timeout = timeout.unwrap_or(DEFAULT_TIMEOUT_SECONDS);
        if timeout == 0 || timeout > MAX_TIMEOUT_SECONDS {
            return Err(Error::invalid(format!("timeout: 1 to {MAX_TIMEOUT_SECONDS} seconds")));
        }
        Ok(ExecRequest { command, cwd, timeout: Duration::from_secs(timeout) })
    }
}

#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct ExecResult {
    pub exit_code: i32,
    /// The last 256 KiB (`RESULT_TAIL_BYTES`) of each output, as text.
    pub stdout: String,
    pub stderr: String,
    /// The bytes of each output that came before what `stdout` and `stderr` hold (not shown
    /// when none did).
    #[serde(skip_serializing_if = "is_zero")]
    pub stdout_dropped: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub stderr_dropped: u64,
    /// Whether output reached the client as it was printed.
    pub streamed: bool,
    /// Why the command was cut off, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed: Option<Reason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ExecResult {
    /// A result of the outputs' tails.
    fn of(
        exit_code: i32,
        out: &Tail,
        err: &Tail,
        streamed: bool,
        closed: Option<Reason>,
        error: Option<String>,
    ) -> Self {
        ExecResult {
            exit_code,
            stdout: out.text(),
            stderr: err.text(),
            stdout_dropped: out.text_dropped(),
            stderr_dropped: err.text_dropped(),
            streamed,
            closed,
            error,
        }
    }

    /// A command cut off before its end: what was seen of its output, and why.
    fn cut(out: &Tail, err: &Tail, streamed: bool, closed: Reason, error: Option<String>) -> ExecResult {
        ExecResult::of(-1, out, err, streamed, Some(closed), error)
    }

    fn emit(&self, sandbox: &str) {
        events::ExecFinished {
            sandbox,
            streamed: self.streamed,
            exit_code: self.exit_code,
            closed: self.closed.map(Reason::as_str),
        }
        .emit();
    }
}

#[derive(Debug, Clone)]
pub enum ExecEvent {
    Stdout(String),
    Stderr(String),
    /// The client fell behind and bytes `from..to` of `stream`'s text were not sent to it:
    /// offsets count that output's text as this stream sends it (its events' `data` end to end).
    Gap {
        stream: OutputStream,
        from: u64,
        to: u64,
    },
    Result(ExecResult),
}

/// What a streamed command's client that stopped reading gives up: its oldest output, said by
/// a gap per output in its place. The result still has the end of each output.
#[derive(Default)]
struct ShedOldestText {
    /// Bytes of stdout's and stderr's text that left the queue, sent or shed.
    stdout: u64,
    stderr: u64,
}

impl ShedOldestText {
    fn gone(&mut self, stream: OutputStream) -> &mut u64 {
        match stream {
            OutputStream::Stdout => &mut self.stdout,
            OutputStream::Stderr => &mut self.stderr,
        }
    }
}

/// Which output an event's text is from, and its length.
fn text(ev: &ExecEvent) -> Option<(OutputStream, u64)> {
    match ev {
        ExecEvent::Stdout(t) => Some((OutputStream::Stdout, t.len() as u64)),
        ExecEvent::Stderr(t) => Some((OutputStream::Stderr, t.len() as u64)),
        _ => None,
    }
}

impl Shed<ExecEvent> for ShedOldestText {
    fn cost(&self, ev: &ExecEvent) -> usize {
        text(ev).map_or(0, |(_, len)| (len + MESSAGE_OVERHEAD) as usize)
    }

    fn shed(&mut self, queue: &mut VecDeque<ExecEvent>) -> usize {
        let Some((i, (stream, len))) = queue.iter().enumerate().find_map(|(i, e)| Some((i, text(e)?))) else {
            return 0;
        };
        queue.remove(i);
        let gone = self.gone(stream);
        let from = *gone;
        *gone += len;
        // Only gaps come before the oldest output: extend this output's, or add one.
        let earlier = queue.iter_mut().take(i).find_map(|e| match e {
            ExecEvent::Gap { stream: s, to, .. } if *s == stream && *to == from => Some(to),
            _ => None,
        });
        match earlier {
            Some(to) => *to = from + len,
            None => queue.insert(i, ExecEvent::Gap { stream, from, to: from + len }),
        }
        (len + MESSAGE_OVERHEAD) as usize
    }

    fn took(&mut self, ev: &ExecEvent) {
        if let Some((stream, len)) = text(ev) {
            *self.gone(stream) += len;
        }
    }
}

/// Kills the command's process group if the stream is dropped before its end: a streamed command
/// whose client goes away, or whose token is revoked, is killed. `spare` (set by whoever cuts
/// the stream off for a shutdown, pause or destroy) lets it run on.
struct KillOnAbandon {
    envd: Envd,
    pid: Option<u32>,
    armed: bool,
    spare: Arc<AtomicBool>,
}

impl Drop for KillOnAbandon {
    fn drop(&mut self) {
        if let (true, false, Some(pid)) = (self.armed, self.spare.load(Ordering::SeqCst), self.pid) {
            let envd = self.envd.clone();
            tokio::spawn(async move {
                if let Err(s) = envd.kill_pid(pid).await {
                    events::CleanupFailed { what: "killing a streamed command", error: s.message() }.emit();
                }
            });
        }
    }
}

/// Starts `req` through the daemon; a refusal (a `cwd` that does not exist, a limit) is the
/// caller's error before anything streams. Then output events as they arrive, and the result.
/// Dropping the stream before the result kills the command unless `spare` is set.
async fn through_daemon(
    envd: Envd,
    req: ExecRequest,
    tag: String,
    spare: Arc<AtomicBool>,
) -> Result<impl Stream<Item = ExecEvent> + Send + 'static> {
    // The daemon kills the process group at the deadline.
    let program = Program::command(&req.command, req.cwd.clone()).tag(tag).deadline(req.timeout);
    let stream = run::start(&envd, program, "the command").await?;
    Ok(daemon_events(envd, stream, spare))
}

fn daemon_events(
    envd: Envd,
    mut stream: tonic::Streaming<StartResponse>,
    spare: Arc<AtomicBool>,
) -> impl Stream<Item = ExecEvent> + Send + 'static {
    async_stream::stream! {
        let mut guard = KillOnAbandon { envd, pid: None, armed: true, spare };
        let (mut out, mut err) = (Tail::new(RESULT_TAIL_BYTES), Tail::new(RESULT_TAIL_BYTES));
        let (mut out_text, mut err_text) = (Utf8Decoder::default(), Utf8Decoder::default());
        loop {
            let ev = match stream.message().await {
                Ok(Some(m)) => m.event.and_then(|e| e.event),
                Ok(None) => {
                    guard.armed = false;
                    let why = "the daemon ended the stream without an end event".to_string();
                    yield ExecEvent::Result(ExecResult::cut(&out, &err, true, Reason::Error, Some(why)));
                    return;
                }
                Err(s) => {
                    guard.armed = false;
                    let why = format!("the daemon's stream broke: {}", s.message());
                    yield ExecEvent::Result(ExecResult::cut(&out, &err, true, Reason::Error, Some(why)));
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
                    yield ExecEvent::Result(ExecResult::of(end.exit_code, &out, &err, true, None, end.error));
                    return;
                }
                Some(process_event::Event::Keepalive(_)) | None => {}
            }
        }
    }
}

/// Runs a command to its end and returns the result: through the sandbox's daemon, or its
/// provider's exec without one. Not cut off by its client: it runs to its end or its timeout,
/// and counts against `HANGAR_EXEC_UNSTREAMED_MAX_PER_TOKEN` until then, even when the client
/// that asked is gone.
pub async fn run(execs: &Arc<Execs>, caller: &Caller, reference: &str, mut req: ExecRequest) -> Result<ExecResult> {
    let row = execs.sandboxes.enter(reference, caller).await?;
    execs.sandboxes.runnable(&row)?;
    req.cwd = req.cwd.map(|c| execs.sandboxes.resolve_cwd(&row, &c)).transpose()?;
    let slot = execs.unstreamed.take(&caller.token_id, execs.limits.unstreamed_execs_per_token)?;
    let runner = Runner::open_any(&execs.sandboxes, row).await;
    // Started before this returns, so a refusal is the caller's error.
    let events = match &runner.envd {
        Some(envd) => {
            let tag = tag(&execs.key, &execs.run, &caller.token_id, &runner.row, Mode::Unstreamed);
            Some(through_daemon(envd.clone(), req.clone(), tag, Arc::new(AtomicBool::new(true))).await?)
        }
        None => None,
    };
    let row = runner.row;
    // The command runs on in its own task whatever happens to this call (its client may go).
    let execs = execs.clone();
    let task = tokio::spawn(async move {
        let _slot = slot;
        let result = match events {
            Some(events) => {
                futures::pin_mut!(events);
                let mut result = None;
                while let Some(ev) = events.next().await {
                    if let ExecEvent::Result(r) = ev {
                        result = Some(ExecResult { streamed: false, ..r });
                    }
                }
                result.ok_or_else(|| Error::daemon("the command's stream ended without a result"))?
            }
            None => {
                let runner = Runner::provider(&execs.sandboxes, row.clone());
                from_fallback(runner.fallback(&req.command, req.cwd.as_deref(), &[], req.timeout).await?)
            }
        };
        result.emit(&row.name);
        Ok(result)
    });
    task.await.map_err(|e| Error::daemon(format!("the command's task failed: {e}")))?
}

/// Runs a command as a stream (`front` says who serves it): output events as it prints, then one
/// result. The stream is admitted against the limits, and the command started, before this
/// returns (the error says which limit, or why the daemon refused it). Dropping the stream
/// before its result (the client went away) kills the command; a revoked token kills it too; a
/// shutdown, pause or destroyed sandbox spares it and the result says `closed` and why. Without
/// a daemon the output arrives in one piece at the end.
pub async fn stream(
    execs: Arc<Execs>,
    caller: &Caller,
    reference: &str,
    mut req: ExecRequest,
    front: Front,
) -> Result<impl Stream<Item = ExecEvent> + Send + 'static> {
    let row = execs.sandboxes.enter(reference, caller).await?;
    execs.sandboxes.runnable(&row)?;
    req.cwd = req.cwd.map(|c| execs.sandboxes.resolve_cwd(&row, &c)).transpose()?;
    let mut stream = execs.streams.open(caller, &row.id, Kind::Exec, front)?;
    let spare = Arc::new(AtomicBool::new(false));
    let tag = tag(&execs.key, &execs.run, &caller.token_id, &row, Mode::Streamed);
    let runner = Runner::open_any(&execs.sandboxes, row).await;
    let events: std::pin::Pin<Box<dyn Stream<Item = ExecEvent> + Send>> = match &runner.envd {
        Some(envd) => match through_daemon(envd.clone(), req, tag.clone(), spare.clone()).await {
            Ok(events) => Box::pin(events),
            Err(e) => {
                stream.end(Reason::Error);
                return Err(e);
            }
        },
        None => {
            // A `cwd` that does not exist is the caller's error before anything streams (the
            // command itself runs only at the end, in one piece).
            if let Some(cwd) = &req.cwd {
                if let Err(e) = runner.fallback("true", Some(cwd), &[], CWD_CHECK_TIMEOUT).await {
                    stream.end(Reason::Error);
                    return Err(e);
                }
            }
            let execs = execs.clone();
            let row = runner.row.clone();
            Box::pin(
                futures::stream::once(async move {
                    let runner = Runner::provider(&execs.sandboxes, row);
                    runner.fallback(&req.command, req.cwd.as_deref(), &[], req.timeout).await
                })
                .flat_map(|r| {
                    let r = match r {
                        Ok(o) => from_fallback(o),
                        Err(e) => {
                            let none = Tail::new(0);
                            ExecResult::of(-1, &none, &none, false, Some(Reason::Error), Some(e.to_string()))
                        }
                    };
                    // Without a daemon the output arrives in one piece at the end.
                    let mut v = Vec::new();
                    if !r.stdout.is_empty() {
                        v.push(ExecEvent::Stdout(r.stdout.clone()));
                    }
                    if !r.stderr.is_empty() {
                        v.push(ExecEvent::Stderr(r.stderr.clone()));
                    }
                    v.push(ExecEvent::Result(r));
                    futures::stream::iter(v)
                }),
            )
        }
    };
    let row = runner.row;
    let (name, sandbox_id) = (row.name, row.id);
    // The client is the command's primary reader: while it reads, the command waits for it (the
    // daemon holds the command back when the relay stops reading); once it has taken nothing
    // for the stall bound, the command runs on and the client's oldest output goes. Either way
    // its stream never holds the sandbox's shared connection (streams::buffer).
    let full = Full::Hold { stall: execs.limits.stall() };
    let events = Buffer::spawn(events, ShedOldestText::default(), execs.limits.buffer_bytes, full);
    Ok(async_stream::stream! {
        // What the client was sent, for a result when the stream is cut off.
        let (mut out, mut err) = (Tail::new(RESULT_TAIL_BYTES), Tail::new(RESULT_TAIL_BYTES));
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
                        // A restarted relay must know this one was spared, not orphaned.
                        if let Err(e) = execs.store.spare_exec(&sandbox_id, &tag).await {
                            events::CleanupFailed { what: "recording a spared command", error: &e.to_string() }.emit();
                        }
                    }
                    stream.end(reason);
                    let r = ExecResult::cut(&out, &err, true, reason, None);
                    r.emit(&name);
                    yield ExecEvent::Result(r);
                    return;
                }
                ev = events.next() => ev,
            };
            let Some(ev) = ev else { stream.end(Reason::Error); return; };
            match &ev {
                ExecEvent::Gap { .. } => {
                    if capped { continue; }
                }
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
                    let mut r = r.clone();
                    if capped && r.closed.is_none() {
                        r.closed = Some(Reason::MaxBytes);
                    }
                    stream.end(match r.closed {
                        Some(Reason::Error) => Reason::Error,
                        _ if capped => Reason::MaxBytes,
                        _ => Reason::Done,
                    });
                    r.emit(&name);
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
    let (mut out, mut err) = (Tail::new(RESULT_TAIL_BYTES), Tail::new(RESULT_TAIL_BYTES));
    out.push(&o.stdout);
    err.push(&o.stderr);
    let mut r = ExecResult::of(
        o.exit_code,
        &out,
        &err,
        false,
        o.timed_out.then_some(Reason::Lifetime),
        o.timed_out.then(|| "the command timed out and was killed".to_string()),
    );
    // What the provider dropped before the relay saw it.
    r.stdout_dropped += o.stdout_dropped;
    r.stderr_dropped += o.stderr_dropped;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(id: &str) -> SandboxRow {
        SandboxRow { daemon: true, ..SandboxRow::new(id.into(), "s", "local", serde_json::json!({})) }
    }

    #[test]
    fn exec_tags_say_whose_how_and_which_run_and_cannot_be_forged() {
        let dir = std::env::temp_dir().join(format!("hangar-exec-tag-{}", crate::random::hex(4)));
        std::fs::create_dir_all(&dir).unwrap();
        let key = MacKey::load_or_create(&dir.join("key")).unwrap();
        let s = sandbox("sbx_1");
        let t = tag(&key, "ab12", "tok_1", &s, Mode::Streamed);
        let parsed = parse_tag(&key, &s, &t).unwrap();
        assert_eq!((parsed.token.as_str(), parsed.mode, parsed.run.as_str()), ("tok_1", Mode::Streamed, "ab12"));
        assert!(parse_tag(&key, &sandbox("sbx_2"), &t).is_none(), "bound to its sandbox");
        assert!(parse_tag(&key, &s, &t.replace(":s:", ":u:")).is_none(), "the mode is under the MAC");
        assert!(parse_tag(&key, &s, &t.replace("tok_1", "tok_2")).is_none(), "the token is under the MAC");
        assert!(parse_tag(&key, &s, "hangar-exec:s:tok_1:x_ab12_00:AAAA").is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn commands_longer_than_one_argument_are_refused() {
        assert!(run::check_command(&"x".repeat(run::MAX_COMMAND_BYTES)).is_ok());
        assert!(matches!(run::check_command(&"x".repeat(run::MAX_COMMAND_BYTES + 1)), Err(Error::Invalid(_))));
    }

    fn shown(q: &VecDeque<ExecEvent>) -> Vec<String> {
        q.iter()
            .map(|e| match e {
                ExecEvent::Stdout(t) => format!("out {t}"),
                ExecEvent::Stderr(t) => format!("err {t}"),
                ExecEvent::Gap { stream, from, to } => format!("gap {stream:?} {from}..{to}"),
                ExecEvent::Result(_) => "result".into(),
            })
            .collect()
    }

    #[test]
    fn a_stalled_client_loses_its_oldest_text_to_a_gap_per_output() {
        let mut shed = ShedOldestText::default();
        let mut q: VecDeque<ExecEvent> = vec![
            ExecEvent::Stdout("ab".into()),
            ExecEvent::Stderr("xyz".into()),
            ExecEvent::Stdout("cde".into()),
            ExecEvent::Stdout("f".into()),
        ]
        .into();
        shed.took(&q.pop_front().unwrap());
        for _ in 0..2 {
            assert!(shed.shed(&mut q) > 0);
        }
        // Offsets count each output's text: stdout's 2 bytes were sent, 3 lost; stderr's first 3 lost.
        assert_eq!(shown(&q), ["gap Stderr 0..3", "gap Stdout 2..5", "out f"].map(String::from));
        q.push_back(ExecEvent::Result(from_fallback(ExecOutput::default())));
        shed.shed(&mut q);
        assert_eq!(shown(&q), ["gap Stderr 0..3", "gap Stdout 2..6", "result"].map(String::from));
        assert_eq!(shed.shed(&mut q), 0, "the result is never shed");
    }
}
