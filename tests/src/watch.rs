//! Helpers for the directory watch and log following tests: clients, scratch directories, and
//! watch and follow streams read event by event with bounded waits.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use tonic::{transport::Channel, Status, Streaming};

pub use hangar_proto::filesystem as fspb;

use crate::{abridge, within, Envd, STEP};
use fspb::{
    filesystem_client::FilesystemClient, watch_dir_response, EntryInfo, EventType, FilesystemEvent, WatchDirRequest,
    WatchDirResponse,
};
use hangar_proto::ext::{
    files_client::FilesClient, follow_event, watch_event, FollowRequest, FollowResponse, WatchResponse,
};

impl Envd {
    /// E2B's `filesystem.Filesystem` over gRPC.
    pub async fn filesystem(&self) -> FilesystemClient<Channel> {
        FilesystemClient::new(self.channel().await)
    }

    /// hangar's `Files` over gRPC.
    pub async fn files(&self) -> FilesClient<Channel> {
        FilesClient::new(self.channel().await)
    }

    /// A connection whose streams the daemon can get ahead of by only about `window` bytes
    /// (HTTP/2 flow control), for tests of a client that stops reading: by default a client
    /// lets megabytes pile up in the transport.
    pub async fn narrow_channel(&self, window: u32) -> Channel {
        let ep = tonic::transport::Endpoint::from_shared(self.url())
            .expect("endpoint")
            .initial_stream_window_size(window)
            .initial_connection_window_size(window);
        within(STEP, "gRPC connect", ep.connect()).await.expect("gRPC channel connect")
    }
}

pub use crate::files::Scratch;

/// The event type's short name, as the SDKs call it: `create`, `write`, ...
pub fn kind_name(t: i32) -> &'static str {
    match EventType::try_from(t) {
        Ok(EventType::Create) => "create",
        Ok(EventType::Write) => "write",
        Ok(EventType::Remove) => "remove",
        Ok(EventType::Rename) => "rename",
        Ok(EventType::Chmod) => "chmod",
        _ => "unspecified",
    }
}

/// One filesystem event as a test looks at it.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub name: String,
    pub kind: &'static str,
    pub entry: Option<EntryInfo>,
}

impl From<FilesystemEvent> for Seen {
    fn from(e: FilesystemEvent) -> Seen {
        Seen { name: e.name, kind: kind_name(e.r#type), entry: e.entry }
    }
}

/// Whether `seen` holds an event `kind` for `name`.
pub fn has(seen: &[Seen], name: &str, kind: &str) -> bool {
    seen.iter().any(|s| s.name == name && s.kind == kind)
}

/// How many events `kind` for `name` `seen` holds.
pub fn count(seen: &[Seen], name: &str, kind: &str) -> usize {
    seen.iter().filter(|s| s.name == name && s.kind == kind).count()
}

/// `name kind` pairs, for messages.
pub fn summary(seen: &[Seen]) -> Vec<String> {
    seen.iter().map(|s| format!("{} {}", s.kind, s.name)).collect()
}

pub fn watch_req(path: &Path, recursive: bool, include_entry: bool) -> WatchDirRequest {
    WatchDirRequest { path: path.to_string_lossy().into_owned(), recursive, include_entry, allow_network_mounts: false }
}

/// How a stream ended: `Ok` cleanly, or with its status.
pub type Ending = Result<(), Status>;

/// Reads one message within `limit`; `Err` is the stream's end.
async fn next_msg<T>(s: &mut Streaming<T>, limit: Duration, what: &str) -> Result<T, Ending> {
    match within(limit, what, s.message()).await {
        Ok(Some(m)) => Ok(m),
        Ok(None) => Err(Ok(())),
        Err(st) => Err(Err(st)),
    }
}

/// E2B's `WatchDir` stream over gRPC.
pub struct E2bWatch {
    s: Streaming<WatchDirResponse>,
    pub seen: Vec<Seen>,
    pub keepalives: usize,
    pub ended: Option<Ending>,
}

impl E2bWatch {
    /// Opens the stream and reads its start event.
    pub async fn open(client: &mut FilesystemClient<Channel>, req: WatchDirRequest) -> Result<E2bWatch, Status> {
        Self::open_req(client, tonic::Request::new(req)).await
    }

    pub async fn open_req(
        client: &mut FilesystemClient<Channel>,
        req: tonic::Request<WatchDirRequest>,
    ) -> Result<E2bWatch, Status> {
        let mut s = within(STEP, "WatchDir", client.watch_dir(req)).await?.into_inner();
        match next_msg(&mut s, STEP, "WatchDir start event").await {
            Ok(WatchDirResponse { event: Some(watch_dir_response::Event::Start(_)) }) => {}
            Ok(other) => panic!("the first WatchDir event must be start, got {other:?}"),
            Err(Err(st)) => return Err(st),
            Err(Ok(())) => panic!("WatchDir ended before its start event"),
        }
        Ok(E2bWatch { s, seen: vec![], keepalives: 0, ended: None })
    }

    /// Reads one more event (recorded); `false` once the stream ended.
    pub async fn read_one(&mut self, limit: Duration) -> bool {
        if self.ended.is_some() {
            return false;
        }
        match next_msg(&mut self.s, limit, "next WatchDir event").await {
            Ok(m) => {
                match m.event {
                    Some(watch_dir_response::Event::Filesystem(e)) => self.seen.push(e.into()),
                    Some(watch_dir_response::Event::Keepalive(_)) => self.keepalives += 1,
                    other => panic!("unexpected WatchDir event {other:?}"),
                }
                true
            }
            Err(end) => {
                self.ended = Some(end);
                false
            }
        }
    }

    /// Reads until `pred` holds; fails the test on timeout or if the stream ends first.
    pub async fn until(&mut self, limit: Duration, what: &str, pred: impl Fn(&[Seen]) -> bool) {
        let deadline = Instant::now() + limit;
        while !pred(&self.seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!("timed out after {limit:?} waiting for {what}; seen: {:?}", summary(&self.seen));
            }
            let read = match tokio::time::timeout(left, self.read_one(left + Duration::from_secs(1))).await {
                Ok(r) => r,
                Err(_) => continue,
            };
            if !read {
                panic!("stream ended ({:?}) before {what}; seen: {:?}", self.ended, summary(&self.seen));
            }
        }
    }

    /// Reads whatever arrives within `d` (the stream may end meanwhile).
    pub async fn drain_for(&mut self, d: Duration) {
        let deadline = Instant::now() + d;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.ended.is_some() {
                return;
            }
            if tokio::time::timeout(left, self.read_one(left + Duration::from_secs(1))).await.is_err() {
                return;
            }
        }
    }

    /// Reads to the end of the stream (bounded by `limit`) and returns how it ended.
    pub async fn to_end(&mut self, limit: Duration) -> Ending {
        let deadline = Instant::now() + limit;
        while self.ended.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!("WatchDir did not end within {limit:?}; seen: {:?}", summary(&self.seen));
            }
            self.read_one(left).await;
        }
        self.ended.clone().unwrap_or(Ok(()))
    }
}

/// One event of hangar's `Files/WatchDir`.
// Test data: a few hundred events at most, size is no concern.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum HangarEv {
    Fs { seq: u64, seen: Seen },
    Overflow { seq: u64, dropped: u64 },
    KeepAlive { seq: u64 },
}

/// hangar's `Files/WatchDir` stream over gRPC.
pub struct HangarWatch {
    s: Streaming<WatchResponse>,
    pub events: Vec<HangarEv>,
    pub ended: Option<Ending>,
}

impl HangarWatch {
    pub async fn open(client: &mut FilesClient<Channel>, req: WatchDirRequest) -> Result<HangarWatch, Status> {
        Self::open_req(client, tonic::Request::new(req)).await
    }

    pub async fn open_req(
        client: &mut FilesClient<Channel>,
        req: tonic::Request<WatchDirRequest>,
    ) -> Result<HangarWatch, Status> {
        let mut s = within(STEP, "Files/WatchDir", client.watch_dir(req)).await?.into_inner();
        match next_msg(&mut s, STEP, "Files/WatchDir start event").await {
            Ok(WatchResponse { event: Some(ev) }) => {
                assert!(matches!(ev.event, Some(watch_event::Event::Start(_))), "first event must be start: {ev:?}");
                assert_eq!(ev.seq, 0, "the start event's seq");
            }
            Ok(other) => panic!("the first Files/WatchDir message must be start, got {other:?}"),
            Err(Err(st)) => return Err(st),
            Err(Ok(())) => panic!("Files/WatchDir ended before its start event"),
        }
        Ok(HangarWatch { s, events: vec![], ended: None })
    }

    pub async fn read_one(&mut self, limit: Duration) -> bool {
        if self.ended.is_some() {
            return false;
        }
        match next_msg(&mut self.s, limit, "next Files/WatchDir event").await {
            Ok(WatchResponse { event: Some(ev) }) => {
                let seq = ev.seq;
                self.events.push(match ev.event {
                    Some(watch_event::Event::Filesystem(e)) => HangarEv::Fs { seq, seen: e.into() },
                    Some(watch_event::Event::Overflow(o)) => HangarEv::Overflow { seq, dropped: o.dropped },
                    Some(watch_event::Event::Keepalive(_)) => HangarEv::KeepAlive { seq },
                    other => panic!("unexpected Files/WatchDir event {other:?}"),
                });
                true
            }
            Ok(other) => panic!("Files/WatchDir message without an event: {other:?}"),
            Err(end) => {
                self.ended = Some(end);
                false
            }
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.events
            .iter()
            .filter_map(|e| match e {
                HangarEv::Fs { seen, .. } => Some(seen.clone()),
                _ => None,
            })
            .collect()
    }

    pub async fn until(&mut self, limit: Duration, what: &str, pred: impl Fn(&[HangarEv]) -> bool) {
        let deadline = Instant::now() + limit;
        while !pred(&self.events) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!("timed out after {limit:?} waiting for {what}; events: {:?}", self.short());
            }
            let read = match tokio::time::timeout(left, self.read_one(left + Duration::from_secs(1))).await {
                Ok(r) => r,
                Err(_) => continue,
            };
            if !read {
                panic!("stream ended ({:?}) before {what}; events: {:?}", self.ended, self.short());
            }
        }
    }

    pub async fn to_end(&mut self, limit: Duration) -> Ending {
        let deadline = Instant::now() + limit;
        while self.ended.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!("Files/WatchDir did not end within {limit:?}; events: {:?}", self.short());
            }
            self.read_one(left).await;
        }
        self.ended.clone().unwrap_or(Ok(()))
    }

    /// The events, briefly (long runs elided).
    pub fn short(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .events
            .iter()
            .map(|e| match e {
                HangarEv::Fs { seq, seen } => format!("#{seq} {} {}", seen.kind, seen.name),
                HangarEv::Overflow { seq, dropped } => format!("#{seq} overflow dropped={dropped}"),
                HangarEv::KeepAlive { seq } => format!("#{seq} keepalive"),
            })
            .collect();
        abridge(&mut v);
        v
    }
}

/// One follow event, as the tests see it (keepalives are counted apart).
pub type FollowEv = follow_event::Event;

/// hangar's `Files/Follow` stream over gRPC.
pub struct FollowLog {
    s: Streaming<FollowResponse>,
    pub start: follow_event::Start,
    pub events: Vec<FollowEv>,
    /// When each event arrived.
    pub arrived: Vec<Instant>,
    pub keepalives: usize,
    pub ended: Option<Ending>,
}

pub fn follow_req(path: &Path, offset: Option<u64>) -> FollowRequest {
    FollowRequest { path: path.to_string_lossy().into_owned(), offset, allow_network_mounts: false }
}

impl FollowLog {
    pub async fn open(client: &mut FilesClient<Channel>, req: FollowRequest) -> Result<FollowLog, Status> {
        Self::open_req(client, tonic::Request::new(req)).await
    }

    pub async fn open_req(
        client: &mut FilesClient<Channel>,
        req: tonic::Request<FollowRequest>,
    ) -> Result<FollowLog, Status> {
        let mut s = within(STEP, "Follow", client.follow(req)).await?.into_inner();
        let start = match next_msg(&mut s, STEP, "Follow start event").await {
            Ok(FollowResponse { event: Some(hangar_proto::ext::FollowEvent { event: Some(FollowEv::Start(st)) }) }) => {
                st
            }
            Ok(other) => panic!("the first Follow event must be start, got {other:?}"),
            Err(Err(st)) => return Err(st),
            Err(Ok(())) => panic!("Follow ended before its start event"),
        };
        Ok(FollowLog { s, start, events: vec![], arrived: vec![], keepalives: 0, ended: None })
    }

    pub async fn read_one(&mut self, limit: Duration) -> bool {
        if self.ended.is_some() {
            return false;
        }
        match next_msg(&mut self.s, limit, "next Follow event").await {
            Ok(FollowResponse { event: Some(hangar_proto::ext::FollowEvent { event: Some(ev) }) }) => {
                match ev {
                    FollowEv::Keepalive(_) => self.keepalives += 1,
                    FollowEv::Start(_) => panic!("a second start event"),
                    ev => {
                        self.events.push(ev);
                        self.arrived.push(Instant::now());
                    }
                }
                true
            }
            Ok(other) => panic!("Follow message without an event: {other:?}"),
            Err(end) => {
                self.ended = Some(end);
                false
            }
        }
    }

    pub async fn until(&mut self, limit: Duration, what: &str, pred: impl Fn(&FollowLog) -> bool) {
        let deadline = Instant::now() + limit;
        while !pred(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!("timed out after {limit:?} waiting for {what}; events: {:?}", self.short());
            }
            let read = match tokio::time::timeout(left, self.read_one(left + Duration::from_secs(1))).await {
                Ok(r) => r,
                Err(_) => continue,
            };
            if !read {
                panic!("Follow ended ({:?}) before {what}; events: {:?}", self.ended, self.short());
            }
        }
    }

    /// Reads whatever arrives within `d`.
    pub async fn drain_for(&mut self, d: Duration) {
        let deadline = Instant::now() + d;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.ended.is_some() {
                return;
            }
            if tokio::time::timeout(left, self.read_one(left + Duration::from_secs(1))).await.is_err() {
                return;
            }
        }
    }

    /// Bytes received so far in the current file (since the last switch).
    pub fn current(&self) -> Vec<u8> {
        self.generations().pop().unwrap_or_default()
    }

    /// Checks the stream's consistency (every data event starts where the previous one ended; a
    /// truncation, replacement or removal names the offset reached) and returns the bytes of each
    /// file followed in turn: the first from the start offset, then each from 0.
    pub fn generations(&self) -> Vec<Vec<u8>> {
        let mut gens = vec![Vec::new()];
        let mut cursor = self.start.offset;
        let mut waiting = !self.start.exists;
        for (i, ev) in self.events.iter().enumerate() {
            match ev {
                FollowEv::Data(d) => {
                    assert!(!waiting, "data event #{i} while no file was open: {:?}", self.short());
                    assert_eq!(d.offset, cursor, "data event #{i} must start where the last ended: {:?}", self.short());
                    assert!(!d.data.is_empty(), "empty data event #{i}");
                    assert!(d.data.len() <= 64 * 1024, "data event #{i} over 64 KiB ({})", d.data.len());
                    cursor += d.data.len() as u64;
                    if let Some(g) = gens.last_mut() {
                        g.extend_from_slice(&d.data);
                    }
                }
                FollowEv::Truncated(t) => {
                    assert!(!waiting, "truncated #{i} while no file was open");
                    assert_eq!(t.previous_offset, cursor, "truncated #{i} previous_offset: {:?}", self.short());
                    assert!(t.size < cursor, "truncated #{i}: size {} not below {cursor}", t.size);
                    cursor = 0;
                    gens.push(Vec::new());
                }
                FollowEv::Replaced(r) => {
                    assert!(!waiting, "replaced #{i} while no file was open");
                    assert_eq!(r.previous_offset, cursor, "replaced #{i} previous_offset: {:?}", self.short());
                    cursor = 0;
                    gens.push(Vec::new());
                }
                FollowEv::Removed(r) => {
                    assert!(!waiting, "removed #{i} while no file was open");
                    assert_eq!(r.previous_offset, cursor, "removed #{i} previous_offset: {:?}", self.short());
                    waiting = true;
                }
                FollowEv::Created(_) => {
                    assert!(waiting, "created #{i} while a file was open: {:?}", self.short());
                    waiting = false;
                    cursor = 0;
                    gens.push(Vec::new());
                }
                FollowEv::Start(_) | FollowEv::Keepalive(_) => unreachable!("kept apart"),
            }
        }
        gens
    }

    /// The event kinds in order, with offsets and lengths.
    pub fn short(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .events
            .iter()
            .map(|e| match e {
                FollowEv::Data(d) => format!("data{{off:{} len:{}}}", d.offset, d.data.len()),
                FollowEv::Truncated(t) => format!("truncated{{prev:{} size:{}}}", t.previous_offset, t.size),
                FollowEv::Replaced(r) => format!("replaced{{prev:{}}}", r.previous_offset),
                FollowEv::Removed(r) => format!("removed{{prev:{}}}", r.previous_offset),
                FollowEv::Created(_) => "created".into(),
                FollowEv::Start(_) | FollowEv::Keepalive(_) => "?".into(),
            })
            .collect();
        abridge(&mut v);
        v
    }

    /// Whether a non-data event of this kind was seen.
    pub fn saw(&self, kind: &str) -> bool {
        self.events.iter().any(|e| {
            matches!(
                (kind, e),
                ("truncated", FollowEv::Truncated(_))
                    | ("replaced", FollowEv::Replaced(_))
                    | ("removed", FollowEv::Removed(_))
                    | ("created", FollowEv::Created(_))
            )
        })
    }
}
