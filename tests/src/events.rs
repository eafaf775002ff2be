//! Reading event streams to the end or to a condition, always bounded: process events from
//! Start and Connect (gRPC, or Connect decoded into the same [`Collected`]), and hangar Attach
//! streams ([`AttachLog`]).
use std::time::Duration;

use tonic::transport::Channel;

use crate::{within, Deadline, STEP};
use hangar_proto::{
    ext::{self, attach_event, processes_client::ProcessesClient},
    process::{
        self as pb, process_client::ProcessClient, process_event, process_event::data_event::Output, ProcessEvent,
        ProcessSelector, StartRequest,
    },
};

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
    let deadline = Deadline::after(limit);
    while !pred(c) {
        match deadline.run(s.message(), || format!("waiting for {what}; so far: {c:#?}")).await {
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
    let deadline = Deadline::after(limit);
    loop {
        match deadline.run(s.message(), || format!("reading the process stream to its end; so far: {c:#?}")).await {
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
        abridge(&mut v);
        if let Some(e) = &self.error {
            v.push(format!("error {e:?}"));
        }
        v
    }
}

/// Shortens a long list of event descriptions for a failure message: the first 30, `...`, the
/// last 10.
pub fn abridge(v: &mut Vec<String>) {
    if v.len() > 40 {
        let tail = v.split_off(v.len() - 10);
        v.truncate(30);
        v.push("...".to_string());
        v.extend(tail);
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
    let deadline = Deadline::after(limit);
    loop {
        match deadline.run(s.message(), || format!("reading an Attach stream; so far: {:?}", log.summary())).await {
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
