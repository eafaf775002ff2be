//! Background processes on a daemon without hangar's extensions (E2B's envd, or hangar-envd
//! `--e2b-only`): no ring with offsets, no `Attach` with `since`, no exited processes listed. The
//! relay keeps hangar-envd's promises itself: it starts each process with E2B's
//! `Start` under the same MAC'd tag `daemon.rs` gives (so ownership is decided the same way),
//! reads that stream for as long as the process runs, and keeps the last `RING_BYTES` of its
//! output with absolute offsets, so an attach with `since` works as on hangar-envd (a `Gap` when
//! `since` left the ring). An exit is kept for `EXITED_RETENTION`, as the daemon keeps one.
//!
//! After a relay restart the relay finds a token's running processes again by tag in E2B's
//! `List` and follows each with E2B's `Connect`: output from then on, offsets counted from the
//! adoption, and what it wrote before is said to be lost (`Output::Lost`, `earlier_output`).
//! What E2B's envd cannot tell (a process that ended while nobody followed it) is said so.
use std::{
    collections::{HashMap, VecDeque},
    pin::Pin,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use hangar_proto::process::{
    process_event, process_input, process_selector, CloseStdinRequest, ListRequest, ProcessEvent, ProcessInfo,
    ProcessInput, ProcessSelector, SendInputRequest, SendSignalRequest, Signal,
};
use tonic::Code;

use super::{
    daemon::{owned_id, tag},
    output::{Output, OutputStream},
    Backend, Items, ProcessState, ProcessView, KILL_GRACE_MS,
};
use crate::{
    auth::{Caller, MacKey},
    envd::Envd,
    error::{daemon_error, Error, Result},
    events,
    store::SandboxRow,
    streams::Reason,
    text::{Encoding, OffsetText},
    time::{self, Epoch},
};

/// Output kept per process while nobody reads it: hangar-envd's default ring.
pub const RING_BYTES: usize = 256 * 1024;
/// How long an exited process stays listed and attachable: hangar-envd's default.
pub const EXITED_RETENTION: Duration = Duration::from_secs(600);
/// Exited processes kept at most, in all (the oldest ends go first): rings are the relay's memory.
pub const EXITED_KEPT: usize = 256;
/// A broken stream of a running process is taken up again this many times (E2B's `Connect`).
const RECONNECTS: u32 = 8;

/// What `earlier_output` says of a process adopted after a relay restart.
pub const EARLIER_LOST: &str = "lost";

/// One piece of a ring: output at an offset, or the mark of output lost before an offset.
#[derive(Debug, Clone)]
enum Piece {
    Data { at: u64, stream: OutputStream, bytes: Bytes },
    Lost { at: u64, message: String },
}

/// The last `cap` bytes of a process's output, each piece at its absolute offset.
#[derive(Debug)]
struct Ring {
    pieces: VecDeque<Piece>,
    kept: usize,
    cap: usize,
    /// The offset of the next byte.
    next: u64,
}

impl Ring {
    fn new(cap: usize) -> Ring {
        Ring { pieces: VecDeque::new(), kept: 0, cap, next: 0 }
    }

    /// The oldest offset still kept.
    fn oldest(&self) -> u64 {
        self.next - self.kept as u64
    }

    fn push(&mut self, stream: OutputStream, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        let at = self.next;
        self.next += bytes.len() as u64;
        self.kept += bytes.len();
        self.pieces.push_back(Piece::Data { at, stream, bytes });
        while self.kept > self.cap {
            let over = self.kept - self.cap;
            match self.pieces.front_mut() {
                Some(Piece::Data { at, bytes, .. }) if bytes.len() > over => {
                    *bytes = bytes.slice(over..);
                    *at += over as u64;
                    self.kept -= over;
                }
                Some(Piece::Data { bytes, .. }) => {
                    self.kept -= bytes.len();
                    self.pieces.pop_front();
                }
                Some(Piece::Lost { .. }) => {
                    self.pieces.pop_front();
                }
                None => break,
            }
        }
        // A mark before the oldest byte says nothing a gap does not.
        while matches!(self.pieces.front(), Some(Piece::Lost { at, .. }) if *at < self.oldest()) {
            self.pieces.pop_front();
        }
    }

    fn lost(&mut self, message: String) {
        self.pieces.push_back(Piece::Lost { at: self.next, message });
    }

    /// What was written from `cursor` on (clipped to what is kept).
    fn from(&self, cursor: u64) -> Vec<Piece> {
        self.pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Data { at, bytes, .. } if at + bytes.len() as u64 <= cursor => None,
                Piece::Data { at, stream, bytes } if *at < cursor => {
                    let skip = (cursor - at) as usize;
                    Some(Piece::Data { at: cursor, stream: *stream, bytes: bytes.slice(skip..) })
                }
                Piece::Lost { at, .. } if *at < cursor => None,
                p => Some(p.clone()),
            })
            .collect()
    }
}

/// How a followed process ended.
#[derive(Debug, Clone)]
struct Ended {
    exit_code: i32,
    status: String,
    at: Epoch,
}

/// What changes as the process is followed.
#[derive(Debug)]
struct Live {
    ring: Ring,
    ended: Option<Ended>,
    /// Following stopped without an end (and when): the readers are told why.
    broken: Option<(String, Epoch)>,
}

/// One process the relay follows.
pub struct Proc {
    tag: String,
    pid: u32,
    command: String,
    started_at: Option<Epoch>,
    /// Found again by its tag after a relay restart: offsets count from then.
    adopted: bool,
    live: Mutex<Live>,
    changed: tokio::sync::watch::Sender<()>,
}

impl Proc {
    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn view(&self, id: &str, sandbox: &str) -> ProcessView {
        let live = self.live();
        ProcessView {
            process_id: id.to_string(),
            sandbox: sandbox.to_string(),
            pid: self.pid,
            command: self.command.clone(),
            state: if live.ended.is_some() { ProcessState::Exited } else { ProcessState::Running },
            exit_code: live.ended.as_ref().map(|e| e.exit_code),
            status: live.ended.as_ref().map(|e| e.status.clone()),
            started_at: self.started_at,
            ended_at: live.ended.as_ref().map(|e| e.at),
            output_bytes: live.ring.next,
            adopted: self.adopted,
            polled: false,
            earlier_output: self.adopted.then_some(EARLIER_LOST),
        }
    }

    fn push(&self, stream: OutputStream, bytes: Bytes) {
        self.live().ring.push(stream, bytes);
        self.changed.send_replace(());
    }

    fn end(&self, exit_code: i32, status: String) {
        self.live().ended = Some(Ended { exit_code, status, at: time::now() });
        self.changed.send_replace(());
    }

    fn lost(&self, message: String) {
        self.live().ring.lost(message);
        self.changed.send_replace(());
    }

    fn broke(&self, why: String) {
        self.live().broken = Some((why, time::now()));
        self.changed.send_replace(());
    }

    fn running(&self) -> bool {
        let live = self.live();
        live.ended.is_none() && live.broken.is_none()
    }
}

type Key = (String, String);

/// Every process the relay follows, by (sandbox id, process id); bounded by the per-token limit
/// for running ones and by `EXITED_KEPT` and `EXITED_RETENTION` for exited ones.
#[derive(Default)]
pub struct Registry {
    procs: Mutex<HashMap<Key, Arc<Proc>>>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<Proc>>> {
        self.procs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops exits past their retention, then the oldest beyond `EXITED_KEPT`.
    fn sweep(map: &mut HashMap<Key, Arc<Proc>>) {
        let now = time::now();
        let retention = EXITED_RETENTION.as_secs_f64();
        let mut exited: Vec<(Key, Epoch)> = Vec::new();
        map.retain(|k, p| {
            let live = p.live();
            let gone = live.ended.as_ref().map(|e| e.at).or(live.broken.as_ref().map(|b| b.1));
            match gone {
                Some(at) if now - at > retention => false,
                Some(at) => {
                    exited.push((k.clone(), at));
                    true
                }
                None => true,
            }
        });
        if exited.len() > EXITED_KEPT {
            exited.sort_by(|a, b| a.1.total_cmp(&b.1));
            for (k, _) in exited.iter().take(exited.len() - EXITED_KEPT) {
                map.remove(k);
            }
        }
    }

    fn get(&self, sandbox: &str, id: &str) -> Option<Arc<Proc>> {
        let mut map = self.lock();
        Self::sweep(&mut map);
        map.get(&(sandbox.to_string(), id.to_string())).cloned()
    }

    /// The processes followed in a sandbox, with their ids.
    fn in_sandbox(&self, sandbox: &str) -> Vec<(String, Arc<Proc>)> {
        let mut map = self.lock();
        Self::sweep(&mut map);
        map.iter().filter(|((s, _), _)| s == sandbox).map(|((_, id), p)| (id.clone(), p.clone())).collect()
    }

    /// Registers `proc` unless one is followed under the key (a concurrent adoption); the one kept.
    fn insert(&self, sandbox: &str, id: &str, proc: Arc<Proc>) -> (Arc<Proc>, bool) {
        let mut map = self.lock();
        let key = (sandbox.to_string(), id.to_string());
        match map.get(&key) {
            Some(p) if p.running() || !proc.running() => (p.clone(), false),
            _ => {
                map.insert(key, proc.clone());
                (proc, true)
            }
        }
    }
}

type Events = Pin<Box<dyn Stream<Item = std::result::Result<Option<ProcessEvent>, tonic::Status>> + Send>>;

fn by_pid(pid: u32) -> Option<ProcessSelector> {
    Some(ProcessSelector { selector: Some(process_selector::Selector::Pid(pid)) })
}

/// Reads the process's events into its ring until it ends; a broken stream is taken up again
/// with E2B's `Connect` while E2B's `List` still shows the process (the bytes between are lost
/// and said so), and ended by what can be known when it no longer does.
async fn follow(envd: Envd, proc: Arc<Proc>, mut events: Events, sandbox: String) {
    let mut tries = 0;
    loop {
        let why = loop {
            match events.next().await {
                Some(Ok(Some(ev))) => match ev.event {
                    Some(process_event::Event::Data(d)) => {
                        use process_event::data_event::Output as O;
                        match d.output {
                            Some(O::Stdout(b)) | Some(O::Pty(b)) => proc.push(OutputStream::Stdout, b),
                            Some(O::Stderr(b)) => proc.push(OutputStream::Stderr, b),
                            None => {}
                        }
                        tries = 0;
                    }
                    Some(process_event::Event::End(e)) => {
                        proc.end(e.exit_code, e.status);
                        return;
                    }
                    _ => {}
                },
                Some(Ok(None)) => {}
                Some(Err(s)) => break s.message().to_string(),
                None => break "the daemon ended the stream before the process's end".to_string(),
            }
        };
        // Taken up again, or said why not.
        loop {
            if tries >= RECONNECTS {
                events::ProcessFollowBroken { sandbox: &sandbox, pid: proc.pid, error: &why }.emit();
                proc.broke(format!(
                    "the relay lost the process's output stream ({why}) and could not take it up again"
                ));
                return;
            }
            tokio::time::sleep(Duration::from_secs(1 << tries.min(5))).await;
            tries += 1;
            let listed = match envd.process().list(ListRequest {}).await {
                Ok(l) => l.into_inner().processes,
                Err(_) => continue,
            };
            if !listed.iter().any(|p| p.pid == proc.pid && p.tag.as_deref() == Some(proc.tag.as_str())) {
                proc.end(-1, ENDED_UNSEEN.into());
                return;
            }
            match envd.process().connect(hangar_proto::process::ConnectRequest { process: by_pid(proc.pid) }).await {
                Ok(s) => {
                    proc.lost(format!(
                        "output between the stream's break ({why}) and its taking up again is lost: E2B's envd \
                         keeps no output to read again"
                    ));
                    events = Box::pin(s.into_inner().map(|r| r.map(|m| m.event)));
                    break;
                }
                Err(s) if s.code() == Code::NotFound => {
                    proc.end(-1, ENDED_UNSEEN.into());
                    return;
                }
                Err(_) => continue,
            }
        }
    }
}

/// The status of a process that ended while the relay was not reading its stream.
const ENDED_UNSEEN: &str =
    "ended while the relay was not following it: E2B's envd does not tell how a process it no longer lists ended";

/// A caller's processes in one sandbox whose daemon is E2B's: followed by the relay, which keeps
/// their rings (`registry`).
pub struct FollowedProcesses<'a> {
    pub envd: &'a Envd,
    pub key: &'a MacKey,
    pub caller: &'a Caller,
    pub sandbox: &'a SandboxRow,
    pub started: &'a HashMap<String, u32>,
    pub registry: &'a Registry,
}

impl FollowedProcesses<'_> {
    fn tag(&self, id: &str) -> String {
        tag(self.key, self.caller, self.sandbox, id)
    }

    fn not_found(&self, id: &str) -> Error {
        Error::not_found(format!(
            "no process {id:?} of yours in sandbox {:?} (its daemon, E2B's envd, lists running processes only: one \
             that ended while this relay was not following it cannot be found)",
            self.sandbox.name
        ))
    }

    /// The caller's process `id`, if the relay follows it.
    fn followed(&self, id: &str) -> Option<Arc<Proc>> {
        let p = self.registry.get(&self.sandbox.id, id)?;
        (p.tag == self.tag(id)).then_some(p)
    }

    /// Finds the caller's running processes the relay does not follow (started by an earlier
    /// run of the relay) in E2B's `List`, and follows them with `Connect`.
    async fn adopt(&self) -> Result<()> {
        let listed = self
            .envd
            .process()
            .list(ListRequest {})
            .await
            .map_err(|s| daemon_error("listing processes", s))?
            .into_inner()
            .processes;
        for p in &listed {
            let Some(id) = p.tag.as_deref().and_then(|t| owned_id(self.key, self.caller, self.sandbox, t)) else {
                continue;
            };
            if self.started.get(id).is_some_and(|pid| *pid != p.pid) {
                continue;
            }
            // Followed already; or no longer (its stream broke, say through a long pause) while
            // the daemon still runs it: followed again.
            if self.registry.get(&self.sandbox.id, id).is_some_and(|f| f.running()) {
                continue;
            }
            adopt_one(self.envd, self.registry, self.sandbox, id, p).await;
        }
        Ok(())
    }

    async fn proc(&self, id: &str) -> Result<Arc<Proc>> {
        if let Some(p) = self.followed(id) {
            return Ok(p);
        }
        self.adopt().await?;
        self.followed(id).ok_or_else(|| self.not_found(id))
    }

    fn refused(&self, what: &str, id: &str, s: tonic::Status) -> Error {
        if s.code() == Code::NotFound {
            return self.not_found(id);
        }
        daemon_error(what, s)
    }

    /// Output from `since` (default: the oldest byte the relay still keeps), then live output,
    /// then the end.
    async fn attach(
        &self,
        id: &str,
        since: Option<u64>,
        encoding: Encoding,
    ) -> Result<impl Stream<Item = Output> + Send + 'static> {
        let p = self.proc(id).await?;
        let (oldest, next) = {
            let live = p.live();
            (live.ring.oldest(), live.ring.next)
        };
        if let Some(s) = since.filter(|s| *s > next) {
            let counted = if p.adopted { " (counted from when this relay adopted it)" } else { "" };
            return Err(Error::invalid(format!(
                "since {s} is past the {next} bytes process {id:?} has written{counted}"
            )));
        }
        let mut changed = p.changed.subscribe();
        Ok(async_stream::stream! {
            let mut cursor = since.unwrap_or(oldest);
            let mut text = OffsetText::encoded(cursor, encoding);
            yield Output::Start { oldest, next };
            loop {
                changed.mark_unchanged();
                let (pieces, oldest, ended, broken) = {
                    let live = p.live();
                    (live.ring.from(cursor), live.ring.oldest(), live.ended.clone(), live.broken.as_ref().map(|b| b.0.clone()))
                };
                if cursor < oldest {
                    yield Output::Gap { from: cursor, to: oldest };
                    cursor = oldest;
                    text.restart_at(cursor);
                }
                for piece in pieces {
                    match piece {
                        Piece::Data { at, stream, bytes } => {
                            if let Some((data, next)) = text.push(at, &bytes) {
                                yield Output::Data { data, stream, next };
                            }
                            cursor = at + bytes.len() as u64;
                        }
                        Piece::Lost { at, message } => yield Output::Lost { at, message },
                    }
                }
                if let Some(e) = ended {
                    if let Some((data, next)) = text.flush() {
                        yield Output::Data { data, stream: OutputStream::Stdout, next };
                    }
                    yield Output::End { exit_code: e.exit_code, status: e.status, total: cursor };
                    return;
                }
                if let Some(why) = broken {
                    yield Output::Closed { reason: Reason::Error, message: Some(why) };
                    return;
                }
                if changed.changed().await.is_err() {
                    return;
                }
            }
        })
    }
}

#[tonic::async_trait]
impl Backend for FollowedProcesses<'_> {
    async fn list(&self) -> Result<Vec<ProcessView>> {
        self.adopt().await?;
        let mine = self.registry.in_sandbox(&self.sandbox.id);
        Ok(mine
            .into_iter()
            .filter(|(id, p)| p.tag == self.tag(id))
            .map(|(id, p)| p.view(&id, &self.sandbox.name))
            .collect())
    }

    async fn get(&self, id: &str) -> Result<ProcessView> {
        Ok(self.proc(id).await?.view(id, &self.sandbox.name))
    }

    /// Starts `command` (bash -lc) with E2B's `Start`, and follows its stream from the first
    /// byte for as long as it runs.
    async fn start(&self, id: String, command: &str, cwd: Option<String>) -> Result<ProcessView> {
        let tag = self.tag(&id);
        let started_at = time::now();
        let (pid, stream) = super::daemon::start_tagged(self.envd, command, cwd, tag.clone()).await?;
        let proc = new_proc(tag, pid, command.to_string(), Some(started_at), false);
        // Its own start wins over a listing that found it first (and would have adopted it).
        self.registry.lock().insert((self.sandbox.id.clone(), id.clone()), proc.clone());
        let events: Events = Box::pin(stream.map(|r| r.map(|m| m.event)));
        tokio::spawn(follow(self.envd.clone(), proc.clone(), events, self.sandbox.name.clone()));
        Ok(proc.view(&id, &self.sandbox.name))
    }

    async fn input(&self, id: &str, data: Vec<u8>, eof: bool) -> Result<()> {
        let p = self.proc(id).await?;
        if !p.running() {
            return Err(Error::invalid(format!("process {id:?} has exited: it takes no input")));
        }
        if !data.is_empty() {
            let req = SendInputRequest {
                process: by_pid(p.pid),
                input: Some(ProcessInput { input: Some(process_input::Input::Stdin(data)) }),
            };
            self.envd.process().send_input(req).await.map_err(|s| self.refused("writing input", id, s))?;
        }
        if eof {
            self.envd
                .process()
                .close_stdin(CloseStdinRequest { process: by_pid(p.pid) })
                .await
                .map_err(|s| self.refused("closing stdin", id, s))?;
        }
        Ok(())
    }

    /// SIGTERM to the process (E2B's `SendSignal`), SIGKILL `KILL_GRACE_MS` later if it has not
    /// ended. E2B's envd signals the process it started, not its group: what the process left
    /// running in the background of its own may outlive it (hangar-envd kills the whole tree).
    async fn kill(&self, id: &str) -> Result<()> {
        let p = self.proc(id).await?;
        if !p.running() {
            return Ok(());
        }
        let term = SendSignalRequest { process: by_pid(p.pid), signal: Signal::Sigterm as i32 };
        match self.envd.process().send_signal(term).await {
            Ok(_) => {}
            Err(s) if s.code() == Code::NotFound => return Ok(()),
            Err(s) => return Err(self.refused("signalling the process", id, s)),
        }
        let envd = self.envd.clone();
        tokio::spawn(async move {
            let mut changed = p.changed.subscribe();
            let grace = tokio::time::sleep(Duration::from_millis(KILL_GRACE_MS.into()));
            tokio::pin!(grace);
            loop {
                tokio::select! {
                    _ = &mut grace => break,
                    r = changed.changed() => if r.is_err() || !p.running() { return },
                }
            }
            if p.running() {
                let kill = SendSignalRequest { process: by_pid(p.pid), signal: Signal::Sigkill as i32 };
                if let Err(s) = envd.process().send_signal(kill).await {
                    if s.code() != Code::NotFound {
                        events::CleanupFailed { what: "killing a background process", error: s.message() }.emit();
                    }
                }
            }
        });
        Ok(())
    }

    async fn follow(
        &self,
        _: &Arc<super::Processes>,
        id: &str,
        since: Option<u64>,
        encoding: Encoding,
    ) -> Result<Items> {
        // Read from the relay's own ring: a reader behind it gets a gap, and holds no connection.
        Ok(Box::pin(self.attach(id, since, encoding).await?))
    }
}

fn new_proc(tag: String, pid: u32, command: String, started_at: Option<Epoch>, adopted: bool) -> Arc<Proc> {
    Arc::new(Proc {
        tag,
        pid,
        command,
        started_at,
        adopted,
        live: Mutex::new(Live { ring: Ring::new(RING_BYTES), ended: None, broken: None }),
        changed: tokio::sync::watch::Sender::new(()),
    })
}

/// Follows the listed process `p` (id `id`, its tag already checked) with E2B's `Connect`.
async fn adopt_one(envd: &Envd, registry: &Registry, sandbox: &SandboxRow, id: &str, p: &ProcessInfo) {
    let Some(tag) = p.tag.clone() else { return };
    let command = p.config.as_ref().and_then(|c| c.args.get(1).cloned()).unwrap_or_default();
    let proc = new_proc(tag, p.pid, command, None, true);
    let stream = match envd.process().connect(hangar_proto::process::ConnectRequest { process: by_pid(p.pid) }).await {
        Ok(s) => s.into_inner(),
        // Ended meanwhile: nothing to follow, and nothing known of how it ended.
        Err(_) => return,
    };
    let (proc, fresh) = registry.insert(&sandbox.id, id, proc);
    if !fresh {
        return;
    }
    proc.lost(
        "output written before this relay adopted the process (after a relay restart) is lost: E2B's envd keeps \
         none to read again; offsets count from the adoption"
            .into(),
    );
    let events: Events = Box::pin(stream.map(|r| r.map(|m| m.event)));
    tokio::spawn(follow(envd.clone(), proc, events, sandbox.name.clone()));
}

/// At a relay's start: follows again every running background process in the sandbox whose
/// tag one of `tokens` made (the MAC is checked for each; a tag made up in the sandbox is
/// nobody's and not followed). How many.
pub async fn recover(
    envd: &Envd,
    key: &MacKey,
    registry: &Registry,
    sandbox: &SandboxRow,
    started: &HashMap<String, u32>,
    tokens: &[String],
) -> Result<usize> {
    let listed = envd
        .process()
        .list(ListRequest {})
        .await
        .map_err(|s| daemon_error("listing processes", s))?
        .into_inner()
        .processes;
    let mut adopted = 0;
    for p in &listed {
        let Some(t) = p.tag.as_deref() else { continue };
        let owner = tokens.iter().find_map(|token| owned_id(key, &Caller::of_token(token), sandbox, t));
        let Some(id) = owner else { continue };
        if started.get(id).is_some_and(|pid| *pid != p.pid) || registry.get(&sandbox.id, id).is_some() {
            continue;
        }
        adopt_one(envd, registry, sandbox, id, p).await;
        adopted += 1;
    }
    Ok(adopted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(r: &Ring, cursor: u64) -> Vec<(u64, Vec<u8>)> {
        r.from(cursor)
            .into_iter()
            .filter_map(|p| match p {
                Piece::Data { at, bytes, .. } => Some((at, bytes.to_vec())),
                Piece::Lost { .. } => None,
            })
            .collect()
    }

    #[test]
    fn the_ring_keeps_the_last_bytes_at_their_offsets() {
        let mut r = Ring::new(8);
        r.push(OutputStream::Stdout, Bytes::from_static(b"abcde"));
        r.push(OutputStream::Stderr, Bytes::from_static(b"fgh"));
        assert_eq!((r.oldest(), r.next), (0, 8));
        r.push(OutputStream::Stdout, Bytes::from_static(b"ij"));
        assert_eq!((r.oldest(), r.next), (2, 10));
        assert_eq!(data(&r, 0), vec![(2, b"cde".to_vec()), (5, b"fgh".to_vec()), (8, b"ij".to_vec())]);
        assert_eq!(data(&r, 6), vec![(6, b"gh".to_vec()), (8, b"ij".to_vec())]);
        assert!(data(&r, 10).is_empty());
        // One piece larger than the ring keeps its end.
        r.push(OutputStream::Stdout, Bytes::from(vec![b'x'; 20]));
        assert_eq!((r.oldest(), r.next, r.kept), (22, 30, 8));
        assert_eq!(data(&r, 0), vec![(22, vec![b'x'; 8])]);
    }

    #[test]
    fn a_loss_mark_stays_where_it_was_said_until_its_bytes_leave() {
        let mut r = Ring::new(4);
        r.lost("before".into());
        r.push(OutputStream::Stdout, Bytes::from_static(b"ab"));
        assert!(matches!(r.from(0).first(), Some(Piece::Lost { at: 0, .. })));
        assert!(!r.from(1).iter().any(|p| matches!(p, Piece::Lost { .. })));
        r.push(OutputStream::Stdout, Bytes::from_static(b"cdef"));
        assert!(!r.from(0).iter().any(|p| matches!(p, Piece::Lost { .. })), "gone with its bytes");
    }
}
