//! Every stream the relay serves goes through here: admission against the limits, pacing, byte
//! caps, lifetime, and closing with a reason (its client left, its token was revoked, its sandbox
//! was paused or destroyed, the relay shut down, a limit was hit). One place counts them for the
//! metrics and opens the `stream <kind>` span.
//!
//! Invariant: a slow or vanished client never blocks another: each stream is paced and capped on
//! its own, drained from the daemon into what is kept for its client alone (`buffer`), and
//! closing is a broadcast the stream observes, never a wait.
pub mod buffer;
pub mod metrics;

use std::{
    collections::HashMap,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex, MutexGuard,
    },
    time::{Duration, Instant},
};

use tokio::sync::watch;

use crate::{
    auth::Caller,
    config::Limits,
    error::{Error, Limit},
};
pub use metrics::Metrics;

/// What a stream carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A streamed command's output.
    Exec,
    /// A background process's output (attach).
    Process,
    /// A directory's changes.
    Watch,
    /// A session's events (SSE, an MCP subscription).
    Events,
    /// The fleet view as it changes (`GET /api/fleet/stream`): no one sandbox's, so a pause or
    /// destroy never closes it.
    Fleet,
    /// The relay following a running turn's log: counts against `HANGAR_STREAM_MAX_TOTAL` only.
    TurnLog,
    /// A terminal (a PTY in the sandbox) over a WebSocket: its output is what is counted.
    Terminal,
}

/// Who serves it: the front end that opened it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Front {
    /// REST and Server-Sent Events under `/api`.
    Rest,
    /// The MCP endpoint (a tool call, or a resource subscription).
    Mcp,
}

impl Kind {
    /// Whether it counts against `HANGAR_WATCH_MAX_PER_TOKEN`.
    pub fn is_watch(self) -> bool {
        matches!(self, Kind::Watch)
    }

    /// Whether `HANGAR_STREAM_MAX_HOURS` applies (a command's stream lasts as long as it runs).
    fn has_lifetime(self) -> bool {
        !matches!(self, Kind::Exec | Kind::TurnLog)
    }
}

/// The `kind` label of the metrics, events and spans: the kind, prefixed `mcp_` when MCP serves it.
pub fn label(kind: Kind, front: Front) -> &'static str {
    match (front, kind) {
        (Front::Rest, Kind::Exec) => "exec",
        (Front::Rest, Kind::Process) => "process",
        (Front::Rest, Kind::Watch) => "watch",
        (Front::Mcp, Kind::Exec) => "mcp_exec",
        (Front::Mcp, Kind::Process) => "mcp_process",
        (Front::Mcp, Kind::Watch) => "mcp_watch",
        (Front::Rest, Kind::Events) => "events",
        (Front::Mcp, Kind::Events) => "mcp_events",
        (Front::Rest, Kind::Fleet) => "fleet",
        (Front::Mcp, Kind::Fleet) => "mcp_fleet",
        (_, Kind::TurnLog) => "turn_log",
        (_, Kind::Terminal) => "terminal",
    }
}

/// Why a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// What it streamed ended.
    Done,
    /// Its client went away.
    Client,
    Shutdown,
    Destroyed,
    Paused,
    /// Its sandbox vanished outside hangar (its state is `gone`).
    Gone,
    Revoked,
    /// Open longer than `HANGAR_STREAM_MAX_HOURS`.
    Lifetime,
    /// `HANGAR_STREAM_MAX_BYTES` reached.
    MaxBytes,
    Error,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Done => "done",
            Reason::Client => "client",
            Reason::Shutdown => "shutdown",
            Reason::Destroyed => "destroyed",
            Reason::Paused => "paused",
            Reason::Gone => "gone",
            Reason::Revoked => "revoked",
            Reason::Lifetime => "lifetime",
            Reason::MaxBytes => "max_bytes",
            Reason::Error => "error",
        }
    }
}

/// Each message costs this many bytes more, so output a byte at a time can't flood a client.
pub const MESSAGE_OVERHEAD: u64 = 64;

struct Entry {
    token: String,
    sandbox: String,
    kind: Kind,
    close: watch::Sender<Option<Reason>>,
}

pub struct Streams {
    limits: Limits,
    entries: Mutex<HashMap<u64, Entry>>,
    next_id: AtomicU64,
    shutting_down: AtomicBool,
    pub metrics: Metrics,
}

impl Streams {
    pub fn new(limits: Limits) -> Arc<Streams> {
        Arc::new(Streams {
            limits,
            entries: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            shutting_down: AtomicBool::new(false),
            metrics: Metrics::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Admits a new stream or says which limit refuses it.
    pub fn open(self: &Arc<Self>, caller: &Caller, sandbox: &str, kind: Kind, front: Front) -> Result<Stream, Error> {
        self.admit(Some(caller), sandbox, kind, front)
    }

    /// Admits one of the relay's own streams (following a turn's log): it counts against the
    /// total, and against no token.
    pub fn open_own(self: &Arc<Self>, sandbox: &str, kind: Kind) -> Result<Stream, Error> {
        self.admit(None, sandbox, kind, Front::Rest)
    }

    fn admit(
        self: &Arc<Self>,
        caller: Option<&Caller>,
        sandbox: &str,
        kind: Kind,
        front: Front,
    ) -> Result<Stream, Error> {
        if self.shutting_down.load(Ordering::SeqCst) {
            return Err(Error::unavailable("the relay is shutting down: no new streams"));
        }
        let mut entries = self.lock();
        let (mut total, mut mine, mut my_watches) = (0, 0, 0);
        let token = caller.map_or("", |c| c.token_id.as_str());
        for e in entries.values() {
            total += 1;
            if caller.is_some() && e.token == token {
                mine += 1;
                if e.kind.is_watch() {
                    my_watches += 1;
                }
            }
        }
        let l = &self.limits;
        if total >= l.streams_total {
            let message = format!("{total} streams are open (limit {})", l.streams_total);
            return Err(Error::Limit { limit: Limit::StreamsTotal, message });
        }
        if caller.is_some() && mine >= l.streams_per_token {
            let message = format!("this token has {mine} open streams (limit {})", l.streams_per_token);
            return Err(Error::Limit { limit: Limit::StreamsPerToken, message });
        }
        if kind.is_watch() && my_watches >= l.watches_per_token {
            let message = format!("this token has {my_watches} open watches (limit {})", l.watches_per_token);
            return Err(Error::Limit { limit: Limit::WatchesPerToken, message });
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (close, closed) = watch::channel(None);
        entries.insert(id, Entry { token: token.to_string(), sandbox: sandbox.to_string(), kind, close });
        drop(entries);
        let label = label(kind, front);
        self.metrics.open.with_label_values(&[label]).inc();
        let span = tracing::info_span!(
            "stream",
            kind = label,
            sandbox,
            token = token,
            bytes = tracing::field::Empty,
            reason = tracing::field::Empty
        );
        Ok(Stream {
            id,
            kind,
            label,
            streams: self.clone(),
            closed,
            started: Instant::now(),
            bytes: 0,
            bytes_metric: self.metrics.bytes.with_label_values(&[label]),
            first_output: false,
            pace: Pace::new(self.limits.bytes_per_second),
            reason: None,
            span,
            lifetime: None,
        })
    }

    fn close_where(&self, reason: Reason, pred: impl Fn(&Entry) -> bool) -> usize {
        let entries = self.lock();
        let mut n = 0;
        for e in entries.values().filter(|e| pred(e)) {
            e.close.send_if_modified(|r| {
                if r.is_none() {
                    *r = Some(reason);
                    true
                } else {
                    false
                }
            });
            n += 1;
        }
        n
    }

    /// Ends a token's streams (revocation).
    pub fn close_token(&self, token_id: &str, reason: Reason) -> usize {
        self.close_where(reason, |e| e.token == token_id)
    }

    /// Ends a sandbox's streams (paused, destroyed).
    pub fn close_sandbox(&self, sandbox_id: &str, reason: Reason) -> usize {
        self.close_where(reason, |e| e.sandbox == sandbox_id)
    }

    pub fn shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Ends every stream and refuses new ones.
    pub fn shutdown(&self) -> usize {
        self.shutting_down.store(true, Ordering::SeqCst);
        self.close_where(Reason::Shutdown, |_| true)
    }

    /// The tokens with open streams, for the revocation recheck.
    pub fn tokens(&self) -> Vec<String> {
        let mut v: Vec<String> =
            self.lock().values().filter(|e| !e.token.is_empty()).map(|e| e.token.clone()).collect();
        v.sort();
        v.dedup();
        v
    }

    pub fn open_count(&self) -> usize {
        self.lock().len()
    }
}

/// A token bucket: `rate` bytes a second, a second's worth of burst.
struct Pace {
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Pace {
    fn new(rate: u64) -> Pace {
        Pace { rate: rate.max(1) as f64, tokens: rate.max(1) as f64, at: Instant::now() }
    }

    /// How long to wait before `n` more bytes may go.
    fn take(&mut self, n: u64) -> Duration {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * self.rate).min(self.rate);
        self.at = now;
        self.tokens -= n as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }
}

/// One admitted stream. Dropping it counts it closed (with `Client` if nothing else was said).
pub struct Stream {
    id: u64,
    kind: Kind,
    label: &'static str,
    streams: Arc<Streams>,
    closed: watch::Receiver<Option<Reason>>,
    started: Instant,
    bytes: u64,
    /// `hangar_stream_bytes{kind}`, resolved once: a label lookup (a hash and a lock) per message
    /// is work on every line's path.
    bytes_metric: prometheus::IntCounter,
    first_output: bool,
    pace: Pace,
    reason: Option<Reason>,
    span: tracing::Span,
    /// The lifetime's timer, made on the first `closed` and kept: `closed` is asked again for
    /// every message, and a timer made and dropped each time is a timer wheel's insert and
    /// removal on every line.
    lifetime: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Stream {
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Resolves when something outside the stream ends it: revocation, pause, destroy, shutdown,
    /// or its lifetime (for `Process` and `Watch` streams).
    pub async fn closed(&mut self) -> Reason {
        if self.lifetime.is_none() && self.kind.has_lifetime() {
            let end = self.started + self.streams.limits.lifetime();
            self.lifetime = Some(Box::pin(tokio::time::sleep_until(end.into())));
        }
        let lifetime = &mut self.lifetime;
        let until = async move {
            match lifetime.as_mut() {
                Some(t) => t.as_mut().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(until);
        loop {
            if let Some(r) = *self.closed.borrow_and_update() {
                return r;
            }
            tokio::select! {
                changed = self.closed.changed() => if changed.is_err() { return Reason::Error; },
                _ = &mut until => return Reason::Lifetime,
            }
        }
    }

    /// Accounts for a message of `n` bytes about to be sent and says how long to wait before
    /// sending it (the pace), or `Err(MaxBytes)` once the stream's byte cap would be passed (the
    /// message is then not sent). It never waits itself, so a reader can keep its place.
    pub fn charge(&mut self, n: u64) -> Result<Duration, Reason> {
        if self.bytes + n > self.streams.limits.max_bytes {
            return Err(Reason::MaxBytes);
        }
        if !self.first_output {
            self.first_output = true;
            self.streams
                .metrics
                .first_output
                .with_label_values(&[self.label])
                .observe(self.started.elapsed().as_secs_f64());
        }
        self.bytes += n;
        self.bytes_metric.inc_by(n);
        Ok(self.pace.take(n + MESSAGE_OVERHEAD))
    }

    /// `charge`, then the wait it asks for.
    pub async fn send(&mut self, n: u64) -> Result<(), Reason> {
        let wait = self.charge(n)?;
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }

    /// Records why the stream ends (the first reason given wins).
    pub fn end(&mut self, reason: Reason) {
        self.reason.get_or_insert(reason);
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let reason = self.reason.unwrap_or(Reason::Client);
        self.streams.lock().remove(&self.id);
        let m = &self.streams.metrics;
        m.open.with_label_values(&[self.label]).dec();
        m.closed.with_label_values(&[self.label, reason.as_str()]).inc();
        self.span.record("bytes", self.bytes);
        self.span.record("reason", reason.as_str());
        crate::events::StreamClosed { kind: self.label, reason: reason.as_str(), bytes: self.bytes }.emit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pace_allows_a_second_of_burst_then_waits() {
        let mut p = Pace::new(1000);
        assert_eq!(p.take(1000), Duration::ZERO);
        let w = p.take(500);
        assert!(w > Duration::from_millis(400) && w <= Duration::from_millis(500), "{w:?}");
    }
}
