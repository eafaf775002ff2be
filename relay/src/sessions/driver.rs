//! One task per live turn: it waits for a slot, starts the supervisor, follows the log (or polls
//! it), and ends the turn by docs/sessions.md's table of states and reasons. Everything it knows
//! is in the store, so a restarted relay starts a driver again and it carries on from the saved
//! position.
use std::{sync::Arc, time::Duration};

use hangar_agents::{harness::SessionIds, harness::Vars, inbox::Policy, Parser};
use hangar_proto::ext::{follow_event, FollowRequest};
use serde_json::json;
use tokio::{sync::Notify, time::Instant};
use tracing::Instrument;

use super::{
    ingest::Ingest,
    queue::{self, Admission},
    supervisor::{parse_probe, probe_script, script_failed, Place, Probe, Shell, SupervisorEnd, SCRIPT_TIMEOUT},
    transition, CANCEL_GRACE,
};
use crate::sandboxes::run::User;
use crate::{
    envd::Envd,
    error::{Error, Result},
    events,
    feed::Change,
    providers::ProviderError,
    sessions::Sessions,
    store::{SessionRow, TurnRow, TurnState},
    streams::{Kind, Reason, Stream},
    text::sh_quote,
    time,
};

/// The most log one poll reads (the probe's few header lines fit beside it in what an exec
/// keeps, 256 KiB).
const POLL_BYTES: usize = 255 * 1024;
/// The final read of a log after its turn ended stops after this many polls (64 MiB).
const MAX_DRAIN_POLLS: usize = 256;
/// Without its exit file, a supervisor that is gone is taken for dead once its heartbeat (every
/// 10 s) is this old.
const HEARTBEAT_DEAD_SECONDS: i64 = 45;
/// How long a driver that hit an error waits before it looks again (doubling up to a minute).
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// A sandbox unreachable this long ends its turn `crashed/sandbox_unreachable`.
const UNREACHABLE_FOR: Duration = Duration::from_secs(600);

/// The supervisor's tag in the daemon: MAC'd under the relay's key, so a process the agent
/// starts through its daemon cannot pass for it.
pub fn tag(sessions: &Sessions, session: &SessionRow, turn_id: &str) -> String {
    format!("hangar-turn:{turn_id}:{}", sessions.key.mac(&["turn", turn_id, &session.sandbox_id]))
}

pub async fn drive(sessions: &Arc<Sessions>, turn_id: &str, poke: &Notify) {
    let span = tracing::info_span!("turn", turn = turn_id);
    async {
        let mut failing_since: Option<Instant> = None;
        let mut wait = RETRY_FIRST;
        loop {
            match step(sessions, turn_id, poke).await {
                Ok(true) => return,
                Ok(false) => {
                    failing_since = None;
                    wait = RETRY_FIRST;
                }
                Err(e) => {
                    events::TurnTrouble { turn: turn_id, error: &e.to_string() }.emit();
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    if let Some((to, reason)) = lost(&e, since) {
                        if let Err(e) = end_from(sessions, turn_id, to, reason, &e.to_string()).await {
                            events::TurnTrouble { turn: turn_id, error: &e.to_string() }.emit();
                        }
                        return;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = poke.notified() => {}
                    }
                    wait = (wait * 2).min(Duration::from_secs(60));
                }
            }
        }
    }
    .instrument(span)
    .await
}

/// Whether an error means the sandbox is gone for good.
fn lost(e: &Error, failing_since: Instant) -> Option<(TurnState, &'static str)> {
    match e {
        Error::Provider(ProviderError::Gone(_)) => Some((TurnState::Crashed, "sandbox_gone")),
        Error::Paused { .. } => None,
        _ if failing_since.elapsed() >= UNREACHABLE_FOR => Some((TurnState::Crashed, "sandbox_unreachable")),
        _ => None,
    }
}

async fn end_from(sessions: &Sessions, turn_id: &str, to: TurnState, reason: &str, detail: &str) -> Result<()> {
    if let Some(t) = sessions.store.turn(turn_id).await? {
        transition(sessions, &t.session_id, turn_id, t.state, to, Some(reason), Some(detail)).await?;
    }
    Ok(())
}

/// One step of the turn's life; `true` once there is nothing more to do.
async fn step(sessions: &Arc<Sessions>, turn_id: &str, poke: &Notify) -> Result<bool> {
    let Some(turn) = sessions.store.turn(turn_id).await? else { return Ok(true) };
    if turn.state.is_terminal() {
        return Ok(true);
    }
    let Some(session) = sessions.store.session_by_id(&turn.session_id).await? else { return Ok(true) };
    if turn.state != TurnState::Queued && sessions.store.sandbox(&session.sandbox_id).await?.is_none() {
        transition(sessions, &session.id, &turn.id, turn.state, TurnState::Crashed, Some("sandbox_gone"), None).await?;
        return Ok(true);
    }
    if turn.state != TurnState::Queued {
        sessions.feed.publish(Change::TurnLive { session: &session }).await;
    }
    match turn.state {
        TurnState::Queued => queued(sessions, &turn, poke).await?,
        TurnState::Starting => starting(sessions, &session, &turn, poke).await?,
        _ => running(sessions, &session, &turn, poke).await?,
    }
    Ok(false)
}

async fn queued(sessions: &Sessions, turn: &TurnRow, poke: &Notify) -> Result<()> {
    loop {
        let slot = sessions.slots.notified();
        {
            let _admission = sessions.admission.lock().await;
            let Some(turn) = sessions.store.turn(&turn.id).await? else { return Ok(()) };
            if turn.state != TurnState::Queued {
                return Ok(());
            }
            match queue::admit(sessions, &turn).await? {
                Admission::Go => {
                    transition(sessions, &turn.session_id, &turn.id, turn.state, TurnState::Starting, None, None)
                        .await?;
                    return Ok(());
                }
                Admission::Wait { reason, detail } if turn.reason.as_deref() != Some(reason) => {
                    transition(
                        sessions,
                        &turn.session_id,
                        &turn.id,
                        turn.state,
                        turn.state,
                        Some(reason),
                        Some(&detail),
                    )
                    .await?;
                }
                Admission::Wait { .. } => {}
            }
        }
        tokio::select! {
            _ = slot => {}
            _ = poke.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
}

async fn shell<'a>(sessions: &'a Sessions, session: &SessionRow) -> Result<Shell<'a>> {
    let row = sessions.sandboxes.get(&session.sandbox_id).await?;
    Shell::open(sessions, row).await
}

async fn starting(sessions: &Sessions, session: &SessionRow, turn: &TurnRow, poke: &Notify) -> Result<()> {
    // A permit of `max_starting`: a start runs scripts in its sandbox, and a thousand at once on
    // the machine that runs the sandboxes starved each other past their timeout. A poke (a
    // cancel, a deletion) has the turn looked at again.
    let _permit = tokio::select! {
        p = sessions.starting.acquire() => p.map_err(|_| Error::unavailable("the relay is stopping"))?,
        _ = poke.notified() => return Ok(()),
    };
    let shell = match shell(sessions, session).await {
        Ok(s) => s,
        Err(Error::Paused { sandbox }) => {
            let detail = format!("sandbox {sandbox:?} is paused");
            let to = TurnState::Queued;
            transition(sessions, &session.id, &turn.id, turn.state, to, Some("sandbox_not_ready"), Some(&detail))
                .await?;
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    match start(sessions, &shell, session, turn).await {
        Ok(()) => Ok(()),
        Err(
            e @ (Error::Invalid(_) | Error::NotFound(_) | Error::Forbidden(_) | Error::Daemon(_) | Error::Provider(_)),
        ) => {
            let detail = e.to_string();
            transition(
                sessions,
                &session.id,
                &turn.id,
                turn.state,
                TurnState::Crashed,
                Some("start_failed"),
                Some(&detail),
            )
            .await?;
            Ok(())
        }
        Err(e) => Err(e),
    }
}

async fn start(sessions: &Sessions, shell: &Shell<'_>, session: &SessionRow, turn: &TurnRow) -> Result<()> {
    // First: a secret deleted or no longer shared since the session started fails the turn
    // before anything is written into the sandbox.
    let mut env = sessions.secrets.values(&session.person, &super::chosen_secrets(session)).await?;
    let place = shell.place().await?;
    let tag = tag(sessions, session, &turn.id);
    // A relay stopped between starting the supervisor and recording it finds it again.
    let found = probe(shell, &place, &turn.id, 0, 0).await?;
    if let Some(pid) = found.pid.filter(|_| found.alive || found.exit.is_some()) {
        return started(sessions, session, turn, &place, pid).await;
    }
    let harness = sessions
        .harnesses
        .get(&session.harness)
        .ok_or_else(|| Error::invalid(format!("harness {:?} is no longer configured", session.harness)))?;
    let prompt_file = format!("{}/{}.prompt", place.dir, turn.id);
    let vars = Vars {
        session_id: session.agent_session_id.as_deref(),
        cwd: &session.cwd,
        prompt_file: &prompt_file,
        turn: &turn.id,
    };
    let mut argv = harness.argv(turn.n > 1, &vars).map_err(|e| Error::invalid(e.to_string()))?;
    let settings = match session.approvals.is_empty() {
        true => None,
        false => {
            let settings = hook_settings(sessions.settings.ask_expiry, &place, session, &turn.id)?;
            match harness.approval_argv(&vars, &place.settings(&turn.id)) {
                Some(extra) => argv.extend(extra.map_err(|e| Error::invalid(e.to_string()))?),
                None => return Err(Error::invalid(format!("harness {:?} has no approval hook", harness.name))),
            }
            Some(settings)
        }
    };
    let prompt = sessions.prompts().get(&turn.id).cloned().unwrap_or_else(|| turn.prompt.clone());
    shell.install(&place, &turn.id, &prompt, settings.as_deref()).await?;
    env.push(("HANGAR_SESSION".into(), session.name.clone()));
    env.push(("HANGAR_TURN".into(), turn.id.clone()));
    // The agent-side commands' places (docs/inbox.md).
    env.push(("HANGAR_INBOX".into(), place.inbox(&turn.id)));
    env.push(("HANGAR_ANSWERS".into(), place.answers(&turn.id)));
    if let Some(bin) = &place.agent_bin {
        env.push(("HANGAR_AGENT".into(), bin.clone()));
    }
    // Where the turn starts, read before its harness can change anything: what its diff is against.
    super::diff::record_base(sessions, shell, &place, session, turn).await?;
    let pid = shell.start(&place, &turn.id, &session.cwd, &argv, &env, &tag).await?;
    started(sessions, session, turn, &place, pid).await
}

async fn started(sessions: &Sessions, session: &SessionRow, turn: &TurnRow, place: &Place, pid: i64) -> Result<()> {
    sessions.store.set_turn_started(&turn.id, Some(pid)).await?;
    sessions.store.update_session_start(&session.id, None, Some(place.split), time::now()).await?;
    events::TurnStarted { turn: &turn.id, pid, split: place.split }.emit();
    transition(sessions, &session.id, &turn.id, turn.state, TurnState::Running, None, None).await?;
    // An ask the agent opened before its turn was running makes it wait now.
    super::settle_input(sessions, &session.id, &turn.id).await?;
    Ok(())
}

/// How the supervisor ended.
#[derive(Debug, Clone)]
enum End {
    /// It reported the harness's end.
    Exited { code: i64, signal: Option<String> },
    /// It is gone without a word.
    Died(String),
    /// The turn was ended (or deleted) from outside: a destroyed sandbox, a deleted session.
    Outside,
    /// The daemon does not know the supervisor (restarted, or it ended long ago).
    Unknown,
}

/// The turn's deadline and whether a cancel has been sent.
struct Stop {
    deadline: Instant,
    signalled: bool,
}

/// A running turn as its driver watches it: where it runs, the supervisor's tag, what wakes the
/// driver.
struct Watch<'a> {
    sessions: &'a Sessions,
    shell: &'a Shell<'a>,
    place: &'a Place,
    tag: &'a str,
    turn: &'a TurnRow,
    poke: &'a Notify,
}

async fn running(sessions: &Sessions, session: &SessionRow, turn: &TurnRow, poke: &Notify) -> Result<()> {
    let shell = shell(sessions, session).await?;
    let place = shell.place().await?;
    let harness = sessions.harnesses.get(&session.harness);
    let format = harness.map_or(hangar_agents::Format::Text, |h| h.format);
    let keep_id = harness.is_some_and(|h| h.session_ids == SessionIds::Report);
    // Where a relay before this one stopped reading, its parser's memory goes on.
    let parser = turn.parser.as_deref().map_or_else(|| Parser::new(format), |p| Parser::resume(format, p));
    let mut ingest = Ingest::new(sessions, session, turn, parser, keep_id).await?;
    let started = turn.started_at.unwrap_or(turn.created_at);
    let left = (started + turn.timeout_minutes as f64 * 60.0 - time::now()).max(0.0);
    let mut stop = Stop { deadline: Instant::now() + Duration::from_secs_f64(left), signalled: false };
    let tag = tag(sessions, session, &turn.id);
    let w = Watch { sessions, shell: &shell, place: &place, tag: &tag, turn, poke };
    // A cancel asked for before the turn ran: its poke may have woken the start instead.
    if turn.cancel_requested_at.is_some() {
        w.signal(&mut stop).await?;
    }
    let mut end = match &shell.envd {
        Some(envd) => w.daemon(envd, &mut ingest, &mut stop).await?,
        None => End::Unknown,
    };
    if let End::Unknown = end {
        end = w.polled(&mut ingest, &mut stop).await?;
    }
    w.conclude(session, &mut ingest, end).await
}

impl Watch<'_> {
    /// Looks at the turn again after a poke: ended from outside, or asked to stop.
    async fn poked(&self, stop: &mut Stop) -> Result<bool> {
        let Some(now) = self.sessions.store.turn(&self.turn.id).await? else {
            self.signal(stop).await?;
            return Ok(true);
        };
        if now.state.is_terminal() {
            self.signal(stop).await?;
            return Ok(true);
        }
        if now.cancel_requested_at.is_some() {
            self.signal(stop).await?;
        }
        Ok(false)
    }

    async fn signal(&self, stop: &mut Stop) -> Result<()> {
        if !stop.signalled {
            stop.signalled = true;
            let pid = self.turn.pid.unwrap_or(0);
            self.shell.signal(&self.place.dir, &self.turn.id, self.tag, pid, CANCEL_GRACE).await?;
        }
        Ok(())
    }

    async fn deadline_passed(&self, stop: &mut Stop) -> Result<()> {
        self.sessions.store.request_cancel(&self.turn.id, time::now()).await?;
        self.signal(stop).await
    }

    /// Follows the log through the daemon (polling when it cannot) until the supervisor ends.
    async fn daemon(&self, envd: &Envd, ingest: &mut Ingest, stop: &mut Stop) -> Result<End> {
        // A daemon without `Follow` (E2B's envd) is polled: no stream to count.
        let mut stream =
            if envd.is_e2b() { None } else { self.sessions.streams.open_own(&self.shell.row.id, Kind::TurnLog).ok() };
        let result = {
            let end = self.shell.supervisor_end(envd, self.tag);
            let follow = self.follow_then_poll(envd, ingest, stream.as_mut());
            tokio::pin!(end, follow);
            loop {
                tokio::select! {
                    e = &mut end => break e.map(|e| e.map_or(End::Unknown, ended)),
                    r = &mut follow => if let Err(e) = r { break Err(e) },
                    _ = self.poke.notified() => if self.poked(stop).await? { break Ok(End::Outside) },
                    _ = tokio::time::sleep_until(stop.deadline), if !stop.signalled => self.deadline_passed(stop).await?,
                }
            }
        };
        if let Some(s) = stream.as_mut() {
            s.end(Reason::Done);
        }
        result
    }
}

/// What the daemon said of the supervisor's end. Its exit code is the harness's (the script
/// exits with it); the line it printed names the signal. A supervisor killed by a signal wrote
/// no line: it died.
fn ended(e: SupervisorEnd) -> End {
    match e.signal {
        Some(s) if s > 0 => return End::Died(format!("the supervisor was killed by signal {s}")),
        // E2B's envd says a signal ended it, not which.
        Some(_) => return End::Died("the supervisor was killed by a signal".into()),
        None => {}
    }
    let line: Option<serde_json::Value> = e.line.as_deref().and_then(|l| serde_json::from_str(l).ok());
    let signal = line
        .as_ref()
        .filter(|l| l.get("code").and_then(|c| c.as_i64()) == Some(e.exit_code as i64))
        .and_then(|l| l.get("signal")?.as_str().map(str::to_string));
    match line {
        Some(_) => End::Exited { code: e.exit_code as i64, signal },
        None => End::Died(format!("the supervisor exited ({}) without reporting the harness's end", e.exit_code)),
    }
}

/// Why following stopped.
enum FollowEnd {
    Disabled,
    /// The daemon has no `Follow` (E2B's envd).
    NoFollow,
    Full,
    Truncated,
    Replaced,
    Removed,
    MaxBytes,
    Closed(Reason),
    Broken(String),
}

impl FollowEnd {
    fn describe(&self) -> String {
        match self {
            FollowEnd::Disabled => "HANGAR_STREAM_TURN_LOGS is false".into(),
            FollowEnd::NoFollow => "the sandbox's daemon (E2B's envd) cannot follow a file".into(),
            FollowEnd::Full => "HANGAR_STREAM_MAX_TOTAL streams are open".into(),
            FollowEnd::Truncated => "the log was truncated".into(),
            FollowEnd::Replaced => "the log was replaced".into(),
            FollowEnd::Removed => "the log was removed".into(),
            FollowEnd::MaxBytes => "the log passed HANGAR_STREAM_MAX_BYTES".into(),
            FollowEnd::Closed(r) => format!("the stream was closed: {}", r.as_str()),
            FollowEnd::Broken(why) => format!("the stream broke: {why}"),
        }
    }
}

impl Watch<'_> {
    async fn follow_then_poll(&self, envd: &Envd, ingest: &mut Ingest, stream: Option<&mut Stream>) -> Result<()> {
        let (sessions, turn) = (self.sessions, self.turn);
        let why = match stream {
            _ if !sessions.settings.follow_logs => FollowEnd::Disabled,
            _ if envd.is_e2b() => FollowEnd::NoFollow,
            None => FollowEnd::Full,
            Some(stream) => follow(sessions, envd, self.place, turn, ingest, stream).await?,
        };
        if matches!(why, FollowEnd::Truncated | FollowEnd::Replaced) {
            ingest.restart();
        }
        sessions.store.set_turn_polled(&turn.id, true).await?;
        events::TurnPolled { turn: &turn.id, why: &why.describe() }.emit();
        let mut inode = None;
        loop {
            poll(sessions, self.shell, self.place, &turn.id, ingest, &mut inode).await?;
            tokio::time::sleep(sessions.settings.poll).await;
        }
    }
}

async fn follow(
    sessions: &Sessions,
    envd: &Envd,
    place: &Place,
    turn: &TurnRow,
    ingest: &mut Ingest,
    stream: &mut Stream,
) -> Result<FollowEnd> {
    // The log's one writer is the supervisor, in the same sandbox and through the same mount, so
    // inotify sees its writes even where the filesystem is FUSE (fuse-overlayfs under Docker)
    // or a network one: what it cannot see are changes made elsewhere, and there are none.
    let req =
        FollowRequest { path: place.log(&turn.id), offset: Some(ingest.next_offset()), allow_network_mounts: true };
    let mut s = match envd.files().follow(req).await {
        Ok(s) => s.into_inner(),
        Err(e) => return Ok(FollowEnd::Broken(e.message().to_string())),
    };
    loop {
        let msg = tokio::select! {
            m = s.message() => m,
            r = stream.closed() => {
                stream.end(r);
                return Ok(FollowEnd::Closed(r));
            }
        };
        let ev = match msg {
            Ok(Some(m)) => m.event.and_then(|e| e.event),
            Ok(None) => return Ok(FollowEnd::Broken("the daemon ended the stream".into())),
            Err(e) => return Ok(FollowEnd::Broken(e.message().to_string())),
        };
        match ev {
            Some(follow_event::Event::Start(st)) if st.exists && st.offset != ingest.next_offset() => {
                return Ok(FollowEnd::Broken(format!(
                    "following started at {} not {}",
                    st.offset,
                    ingest.next_offset()
                )))
            }
            Some(follow_event::Event::Data(d)) => {
                if d.offset != ingest.next_offset() {
                    return Ok(FollowEnd::Broken(format!("data at {} not {}", d.offset, ingest.next_offset())));
                }
                match stream.charge(d.data.len() as u64) {
                    Ok(wait) if !wait.is_zero() => tokio::time::sleep(wait).await,
                    Ok(_) => {}
                    Err(r) => {
                        stream.end(r);
                        return Ok(FollowEnd::MaxBytes);
                    }
                }
                ingest.push(sessions, &d.data).await?;
            }
            Some(follow_event::Event::Truncated(_)) => return Ok(FollowEnd::Truncated),
            Some(follow_event::Event::Replaced(_)) => return Ok(FollowEnd::Replaced),
            Some(follow_event::Event::Removed(_)) => return Ok(FollowEnd::Removed),
            _ => {}
        }
    }
}

/// One probe: reads up to `POLL_BYTES` of log from the ingest's position and records it; starts
/// over from offset 0 of a log that was truncated or replaced. Returns the probe and whether
/// there may be more to read.
async fn poll(
    sessions: &Sessions,
    shell: &Shell<'_>,
    place: &Place,
    turn_id: &str,
    ingest: &mut Ingest,
    inode: &mut Option<u64>,
) -> Result<(Probe, bool)> {
    for _ in 0..2 {
        let from = ingest.next_offset();
        let p = probe(shell, place, turn_id, from, POLL_BYTES).await?;
        let replaced = matches!((*inode, p.inode), (Some(a), Some(b)) if a != b);
        *inode = p.inode.or(*inode);
        if replaced || p.size.is_some_and(|s| s < from) {
            ingest.restart();
            continue;
        }
        ingest.push(sessions, &p.data).await?;
        let more = p.data.len() >= POLL_BYTES;
        return Ok((p, more));
    }
    Ok((Probe::default(), true))
}

async fn probe(shell: &Shell<'_>, place: &Place, turn_id: &str, from: u64, max: usize) -> Result<Probe> {
    let out =
        shell.script(User::root_if(place.split), &probe_script(&place.dir, turn_id, from, max), SCRIPT_TIMEOUT).await?;
    parse_probe(&out.stdout).ok_or_else(|| script_failed("the turn's probe", &out))
}

/// Without the daemon (or when it no longer knows the supervisor): polls the log every
/// `HANGAR_SESSION_POLL_SECONDS` and decides liveness every `HANGAR_RUN_PROBE_SECONDS` by the
/// exit file, the supervisor's pid and start time, and its heartbeat.
impl Watch<'_> {
    async fn polled(&self, ingest: &mut Ingest, stop: &mut Stop) -> Result<End> {
        let sessions = self.sessions;
        sessions.store.set_turn_polled(&self.turn.id, true).await?;
        let settings = &sessions.settings;
        let mut inode = None;
        let mut decided = Instant::now() - settings.probe;
        loop {
            let (p, more) = poll(sessions, self.shell, self.place, &self.turn.id, ingest, &mut inode).await?;
            if let Some(exit) = &p.exit {
                return Ok(exit_file(exit));
            }
            if decided.elapsed() >= settings.probe {
                decided = Instant::now();
                if !p.alive && p.heartbeat_age.is_none_or(|a| a > HEARTBEAT_DEAD_SECONDS) {
                    return Ok(End::Died("the supervisor is gone and wrote no exit file".into()));
                }
            }
            if more {
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep(settings.poll) => {}
                _ = self.poke.notified() => if self.poked(stop).await? { return Ok(End::Outside) },
                _ = tokio::time::sleep_until(stop.deadline), if !stop.signalled => self.deadline_passed(stop).await?,
            }
        }
    }
}

fn exit_file(text: &str) -> End {
    let v: Option<serde_json::Value> = serde_json::from_str(text).ok();
    match v.as_ref().and_then(|v| v.get("code")?.as_i64()) {
        Some(code) => End::Exited {
            code,
            signal: v.as_ref().and_then(|v| v.get("signal")?.as_str()).map(|s| s.chars().take(16).collect()),
        },
        None => End::Died("the exit file is not the supervisor's".into()),
    }
}

impl Watch<'_> {
    /// Reads the rest of the log, then records the turn's end.
    async fn conclude(&self, session: &SessionRow, ingest: &mut Ingest, end: End) -> Result<()> {
        let Watch { sessions, shell, place, turn, .. } = *self;
        if let End::Outside = end {
            return Ok(());
        }
        if let End::Died(_) = end {
            // The harness may outlive its supervisor: its process group goes with it.
            if let Some(pid) = turn.pid.filter(|p| *p > 1) {
                shell
                    .script(
                        User::root_if(place.split),
                        &format!("kill -KILL -- -{pid} 2>/dev/null; true"),
                        SCRIPT_TIMEOUT,
                    )
                    .await?;
            }
        }
        let mut inode = None;
        for _ in 0..MAX_DRAIN_POLLS {
            if !poll(sessions, shell, place, &turn.id, ingest, &mut inode).await?.1 {
                break;
            }
        }
        let now = sessions.store.turn(&turn.id).await?.unwrap_or_else(|| turn.clone());
        let deadline = now.started_at.unwrap_or(now.created_at) + now.timeout_minutes as f64 * 60.0;
        let (code, signal) = match &end {
            End::Exited { code, signal } => (Some(*code), signal.clone()),
            _ => (None, None),
        };
        sessions.store.set_turn_exit(&turn.id, code, signal.as_deref()).await?;
        let o = ingest.outcome;
        let (to, reason, detail) = match &end {
            _ if now.cancel_requested_at.is_some() && time::now() >= deadline => {
                (TurnState::TimedOut, "run_timeout", format!("ran past its {} minutes", now.timeout_minutes))
            }
            _ if now.cancel_requested_at.is_some() => (TurnState::Cancelled, "cancel_agent", "cancelled".to_string()),
            End::Died(why) => (TurnState::Crashed, "process_died", why.clone()),
            End::Exited { code: 0, .. } if o.result_ok != Some(false) => {
                (TurnState::Succeeded, "ok", "exit code 0".into())
            }
            End::Exited { signal: Some(s), .. } => {
                (TurnState::Crashed, "process_died", format!("the harness was killed by SIG{s}"))
            }
            End::Exited { code, .. } if o.rate_limited => {
                (TurnState::Failed, "rate_limited", format!("exit code {code}"))
            }
            End::Exited { code, .. } if o.result_ok == Some(false) => {
                (TurnState::Failed, "harness_error", format!("exit code {code}; the harness reported an error"))
            }
            End::Exited { code, .. } => (TurnState::Failed, "nonzero_exit", format!("exit code {code}")),
            End::Outside | End::Unknown => return Ok(()),
        };
        transition(sessions, &session.id, &turn.id, now.state, to, Some(reason), Some(&detail)).await?;
        Ok(())
    }
}

/// The Claude Code settings of a turn whose session has an approval policy: one `PreToolUse`
/// hook, `hangar-envd approve`, for the tools the policy names, failing closed. The file is hangar's, outside
/// the worktree where the agent cannot change it; `disableAllHooks: false` because command-line
/// settings outrank the project's, where the agent could write `true`.
fn hook_settings(ask_expiry: Duration, place: &Place, session: &SessionRow, turn_id: &str) -> Result<String> {
    let policy = Policy::parse(&session.approvals).map_err(|e| Error::invalid(format!("approvals: {e}")))?;
    let bin = match (&place.agent_bin, place.split) {
        (Some(bin), true) => bin,
        _ => return Err(Error::invalid(
            "approvals need the uid split and a hangar-envd owned by root in the sandbox; this sandbox has lost them",
        )),
    };
    // The hook waits a little longer than the item lives, so that the relay's expiry answer
    // (a denial) is what ends its wait.
    let wait = ask_expiry.as_secs() + 30;
    let mut words = vec![
        bin.clone(),
        "approve".into(),
        "--answers".into(),
        place.answers(turn_id),
        "--inbox".into(),
        place.inbox(turn_id),
        "--session".into(),
        session.name.clone(),
        "--turn".into(),
        turn_id.to_string(),
        "--timeout".into(),
        wait.to_string(),
    ];
    for p in policy.patterns() {
        words.extend(["--policy".to_string(), p]);
    }
    // Claude Code takes a hook's exit other than 0 and 2 as "no decision" and lets the call go on
    // as it would without the hook (with `bypassPermissions`, it runs): a hook that crashed, or
    // that a process of the agent's killed, would let the held call through. The command runs
    // under a shell, so any such exit becomes 2: the call is refused, its stderr given as why.
    let command = format!("{} || exit 2", words.iter().map(|w| sh_quote(w)).collect::<Vec<_>>().join(" "));
    let hook = json!({ "type": "command", "command": command, "timeout": wait + 30 });
    let settings = json!({
        "disableAllHooks": false,
        "hooks": { "PreToolUse": [{ "matcher": policy.hook_matcher(), "hooks": [hook] }] },
    });
    Ok(settings.to_string())
}
