//! The fleet: every sandbox as one unit, joined with its job and session, what its agent is doing
//! now, and the caller's inbox (`read`, for `GET /api/fleet`), and the same view as it changes
//! (`Follower`, for `GET /api/fleet/stream`). docs/fleet.md says what each field means here.
//!
//! Parts: the pictures are `hangar_agents::live` (one session's: now, stages, files, commits,
//! usage, tokens per five minutes; the crate's fold of the turn's events, fed here); `estimate`
//! (how far a stage probably is), `changes` (the ring of the last changes the stream resumes
//! from), `view` (units built from memory), `follow` (the stream's events).
//!
//! Invariants:
//! - A read touches no store: sandboxes, sessions with their latest turn and jobs are loaded once
//!   at start and kept current by the write paths that change them (the sandboxes' lifecycle,
//!   `sessions::transition`, the turn watcher's `ingest`, the jobs' driver); open inbox items are
//!   the inbox's own memory. The live pictures start empty at each start and fill as turns go on.
//! - Bounded: a picture per session (`live::MAX_*`), at most `MAX_LIVE` pictures, `changes::RING`
//!   changes, `estimate::KEEP` durations per harness and stage.
//! - Text from a sandbox is what the relay recorded, redacted already; what the fleet takes from
//!   elsewhere (a job's verification command) passes `Secrets::redactor`.
//! - A caller sees its person's units (what it started, in sandboxes it owns or not), an admin
//!   everyone's, as with sessions and jobs.
mod changes;
pub mod estimate;
mod follow;
mod view;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use hangar_agents::{
    live::{self, Finished, LiveState},
    Event, EventType, Redactor,
};

pub use changes::RING;
pub use follow::{Follower, Out, COALESCE};
pub use view::{Counts, FleetView, Owner, Role, Slots, Summary, Unit};

use futures::future::BoxFuture;

use crate::{
    auth::Caller,
    error::{Error, Result},
    events,
    feed::{Change, Subscriber},
    inbox::Inbox,
    secrets::Secrets,
    store::{
        ItemRow, JobRow, JobState, JobsOf, NewEvent, SandboxRow, SandboxState, Scope, SessionRow, Store, StoreError,
        TurnRow, TurnState,
    },
    time,
};
use changes::{Changes, Key};
use estimate::Estimates;

/// The most live pictures kept: past it the quietest of a settled session goes.
pub const MAX_LIVE: usize = 4_096;
/// A prompt is kept to this many characters (a unit's `task`).
const PROMPT_CHARS: usize = 500;

/// What `GET /api/fleet` and its stream keep: `?owner=` and `?include_stopped=`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// A person's id, or `none` for units nobody owns.
    pub owner: Option<String>,
    pub include_stopped: bool,
}

/// `owner` of the units nobody owns.
pub const NO_OWNER: &str = "none";

#[derive(Debug, Clone)]
struct Sbx {
    id: String,
    name: String,
    provider: String,
    state: SandboxState,
    owner: Option<String>,
    created_at: i64,
}

#[derive(Debug, Clone)]
struct Turn {
    id: String,
    n: i64,
    state: TurnState,
    reason: Option<String>,
    detail: Option<String>,
    credential: Option<String>,
    prompt: String,
    created_at: f64,
    started_at: Option<f64>,
    finished_at: Option<f64>,
    timeout_minutes: i64,
}

#[derive(Debug, Clone)]
struct Ses {
    id: String,
    name: String,
    person: String,
    sandbox_id: String,
    harness: String,
    credential: Option<String>,
    created_at: f64,
    turn: Option<Turn>,
}

#[derive(Debug, Clone)]
struct Job {
    id: String,
    person: String,
    scope: Scope,
    sandbox_id: Option<String>,
    session_id: Option<String>,
    harness: String,
    prompt: String,
    verify: Option<String>,
    state: JobState,
    reason: Option<String>,
    branch: Option<String>,
    commits_ahead: Option<u64>,
    pr_url: Option<String>,
    created_at: f64,
}

#[derive(Default)]
struct State {
    sandboxes: HashMap<String, Sbx>,
    sessions: HashMap<String, Ses>,
    jobs: HashMap<String, Job>,
    /// Person ids to their names (from the tokens).
    persons: HashMap<String, String>,
    /// By session id.
    live: HashMap<String, LiveState>,
    estimates: Estimates,
}

fn cut_prompt(p: &str) -> String {
    p.chars().take(PROMPT_CHARS).collect()
}

impl Sbx {
    fn of(r: &SandboxRow) -> Sbx {
        Sbx {
            id: r.id.clone(),
            name: r.name.clone(),
            provider: r.provider.clone(),
            state: r.state,
            owner: r.owner.clone(),
            created_at: r.created_at,
        }
    }
}

impl Turn {
    fn of(t: &TurnRow) -> Turn {
        Turn {
            id: t.id.clone(),
            n: t.n,
            state: t.state,
            reason: t.reason.clone(),
            detail: t.detail.clone(),
            credential: t.credential.clone(),
            prompt: cut_prompt(&t.prompt),
            created_at: t.created_at,
            started_at: t.started_at,
            finished_at: t.finished_at,
            timeout_minutes: t.timeout_minutes,
        }
    }
}

impl Ses {
    fn of(s: &SessionRow, turn: Option<&TurnRow>) -> Ses {
        Ses {
            id: s.id.clone(),
            name: s.name.clone(),
            person: s.person.clone(),
            sandbox_id: s.sandbox_id.clone(),
            harness: s.harness.clone(),
            credential: s.credential.clone(),
            created_at: s.created_at,
            turn: turn.map(Turn::of),
        }
    }
}

impl Job {
    fn of(j: &JobRow, redactor: &Redactor) -> Job {
        let result = j.result.as_ref();
        let text = |k: &str| result.and_then(|r| r.get(k)).and_then(|v| v.as_str()).map(str::to_string);
        Job {
            id: j.id.clone(),
            person: j.person.clone(),
            scope: j.scope,
            sandbox_id: j.sandbox_id.clone(),
            session_id: j.session_id.clone(),
            harness: j.harness.clone(),
            prompt: cut_prompt(&j.prompt),
            // The caller's own command, not redacted when stored: it is shown, so it passes here.
            verify: j.verify.as_deref().map(|v| live::cut(&redactor.text(v), 200)),
            state: j.state,
            reason: j.reason.clone(),
            branch: text("branch"),
            commits_ahead: result.and_then(|r| r.get("commits_ahead")).and_then(|v| v.as_u64()),
            pr_url: text("pr_url"),
            created_at: j.created_at,
        }
    }
}

impl State {
    /// The picture of `session_id`, made when missing; at `MAX_LIVE`, the quietest picture of a
    /// session with no live turn goes first.
    fn live_mut(&mut self, session_id: &str) -> &mut LiveState {
        if !self.live.contains_key(session_id) && self.live.len() >= MAX_LIVE {
            let settled =
                |id: &String| self.sessions.get(id).and_then(|s| s.turn.as_ref()).is_none_or(|t| t.state.is_terminal());
            let quiet = |l: &LiveState| l.last_activity_at.unwrap_or(0.0);
            let victim = self
                .live
                .iter()
                .filter(|(id, _)| settled(id))
                .min_by(|a, b| quiet(a.1).total_cmp(&quiet(b.1)))
                .or_else(|| self.live.iter().min_by(|a, b| quiet(a.1).total_cmp(&quiet(b.1))))
                .map(|(id, _)| id.clone());
            if let Some(v) = victim {
                self.live.remove(&v);
            }
        }
        self.live.entry(session_id.to_string()).or_default()
    }

    fn finished(&mut self, harness: &str, f: Option<Finished>) {
        if let Some(f) = f {
            self.estimates.stage_done(harness, f);
        }
    }
}

/// A recorded event as the crate's typed event, the one place the fleet reads a stored kind: the
/// kinds only the relay records (an inbox ask's) are none, and say nothing to a picture.
fn typed(e: &NewEvent) -> Option<Event> {
    EventType::parse(e.kind).map(|kind| Event { kind, data: e.data.clone() })
}

/// The fleet's shared state.
pub struct Fleet {
    state: Mutex<State>,
    changes: Changes,
    max_runs_per_credential: usize,
    /// The open inbox items: each unit's role and ask, and every view's inbox.
    inbox: Arc<Inbox>,
}

impl Fleet {
    /// An empty fleet; `load` fills it at start.
    pub fn new(max_runs_per_credential: usize, inbox: Arc<Inbox>) -> Fleet {
        Fleet {
            state: Mutex::default(),
            changes: Changes::new(crate::random::hex(4)),
            max_runs_per_credential: max_runs_per_credential.max(1),
            inbox,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Loads what the fleet shows from the store: sandboxes, their sessions with their latest
    /// turns, their jobs (and live jobs still without one), and the persons' names.
    pub async fn load(&self, store: &Store, redactor: &Redactor) -> Result<(), StoreError> {
        let sandboxes: HashMap<String, Sbx> =
            store.sandboxes().await?.iter().map(|r| (r.id.clone(), Sbx::of(r))).collect();
        let turns: HashMap<String, TurnRow> =
            store.latest_turns().await?.into_iter().map(|t| (t.session_id.clone(), t)).collect();
        let sessions: HashMap<String, Ses> = store
            .sessions(None)
            .await?
            .iter()
            .filter(|s| sandboxes.contains_key(&s.sandbox_id))
            .map(|s| (s.id.clone(), Ses::of(s, turns.get(&s.id))))
            .collect();
        let jobs: HashMap<String, Job> = store
            .jobs(JobsOf::Everyone)
            .await?
            .iter()
            .filter(|j| match &j.sandbox_id {
                Some(id) => sandboxes.contains_key(id),
                None => !j.state.is_terminal(),
            })
            .map(|j| (j.id.clone(), Job::of(j, redactor)))
            .collect();
        let persons = store.tokens().await?.into_iter().map(|t| (t.person, t.person_name)).collect();
        events::FleetLoaded { sandboxes: sandboxes.len(), sessions: sessions.len(), jobs: jobs.len() }.emit();
        let mut st = self.lock();
        st.sandboxes = sandboxes;
        st.sessions = sessions;
        st.jobs = jobs;
        st.persons = persons;
        Ok(())
    }

    fn changed(&self, sandbox_id: &str) {
        self.changes.record(Key::Unit(sandbox_id.to_string()));
    }

    /// An inbox item opened or ended: its unit's role and ask change, and every stream's inbox.
    pub fn item(&self, item: &ItemRow) {
        let unit = view::sandbox_of(&self.lock(), item);
        self.changes.record_all(unit.into_iter().map(Key::Unit).chain([Key::Inbox]));
    }

    /// A person's name, from a token made for them.
    pub fn person(&self, id: &str, name: &str) {
        self.lock().persons.insert(id.to_string(), name.to_string());
    }

    /// A sandbox created, paused or resumed.
    pub fn sandbox(&self, row: &SandboxRow) {
        self.lock().sandboxes.insert(row.id.clone(), Sbx::of(row));
        self.changed(&row.id);
    }

    /// Whether the unit (a sandbox) is still there: a stream says a unit left at once.
    pub fn has_unit(&self, id: &str) -> bool {
        self.lock().sandboxes.contains_key(id)
    }

    /// A sandbox destroyed: its unit, sessions, jobs and pictures go.
    pub fn sandbox_gone(&self, id: &str) {
        {
            let mut st = self.lock();
            st.sandboxes.remove(id);
            let gone: Vec<String> = st.sessions.values().filter(|s| s.sandbox_id == id).map(|s| s.id.clone()).collect();
            for s in &gone {
                st.sessions.remove(s);
                st.live.remove(s);
            }
            st.jobs.retain(|_, j| j.sandbox_id.as_deref() != Some(id));
        }
        self.changed(id);
    }

    /// A session started, or a new turn of one (queued).
    pub fn session(&self, session: &SessionRow, turn: &TurnRow) {
        self.lock().sessions.insert(session.id.clone(), Ses::of(session, Some(turn)));
        self.changed(&session.sandbox_id);
    }

    /// A session deleted.
    pub fn session_gone(&self, session_id: &str) {
        let sandbox = {
            let mut st = self.lock();
            st.live.remove(session_id);
            st.sessions.remove(session_id).map(|s| s.sandbox_id)
        };
        if let Some(sandbox) = sandbox {
            self.changed(&sandbox);
        }
    }

    /// A turn moved (every move goes through `sessions::transition`).
    pub fn turn(&self, t: &TurnRow) {
        let sandbox = {
            let mut st = self.lock();
            let Some(ses) = st.sessions.get_mut(&t.session_id) else { return };
            let before = ses.turn.as_ref().filter(|x| x.id == t.id).map(|x| x.state);
            ses.turn = Some(Turn::of(t));
            let (sandbox, harness) = (ses.sandbox_id.clone(), ses.harness.clone());
            if t.state != TurnState::Queued && before != Some(t.state) {
                let ts = t.finished_at.unwrap_or_else(time::now);
                let live = st.live_mut(&t.session_id);
                live.for_turn(&t.id);
                let f = live.turn_state(t.state.as_str(), t.reason.as_deref(), t.state.is_terminal(), ts);
                st.finished(&harness, f);
                if t.state.is_terminal() {
                    if let (Some(start), Some(end)) = (t.started_at, t.finished_at) {
                        st.estimates.turn_done(end - start);
                    }
                }
            }
            sandbox
        };
        self.changed(&sandbox);
    }

    /// A job created or changed (state, sandbox, session, result).
    pub fn job(&self, j: &JobRow, redactor: &Redactor) {
        let job = Job::of(j, redactor);
        let mut keys = Vec::new();
        {
            let mut st = self.lock();
            let before = st.jobs.insert(j.id.clone(), job.clone());
            if let Some(old) = before.as_ref().and_then(|b| b.sandbox_id.clone()) {
                if Some(&old) != j.sandbox_id.as_ref() {
                    keys.push(Key::Unit(old));
                }
            }
            let moved = before.as_ref().map(|b| b.state) != Some(j.state);
            let hangar_s = j.state == JobState::Verifying || j.state.is_terminal();
            if let (true, true, Some(sid)) = (moved, hangar_s, &j.session_id) {
                if let Some(harness) = st.sessions.get(sid).map(|s| s.harness.clone()) {
                    let f = st.live_mut(sid).job_state(
                        j.state.as_str(),
                        job.verify.as_deref(),
                        j.state.is_terminal(),
                        j.finished_at.unwrap_or_else(time::now),
                    );
                    st.finished(&harness, f);
                }
            }
            if j.state.is_terminal() && j.sandbox_id.is_none() {
                st.jobs.remove(&j.id);
            }
        }
        if let Some(s) = &j.sandbox_id {
            keys.push(Key::Unit(s.clone()));
        }
        self.changes.record_all(keys);
    }

    /// Events the turn watcher recorded for a session's turn, at `ts` (redacted already). One
    /// call per batch; an agent's progress reports come the same way (`agent.progress`).
    pub fn ingested(&self, session_id: &str, turn_id: &str, events: &[NewEvent], ts: f64) {
        if events.is_empty() {
            return;
        }
        // Typed (each event's data copied) before the lock, which every fleet read takes too.
        let typed: Vec<Event> = events.iter().filter_map(typed).collect();
        let sandbox = {
            let mut st = self.lock();
            let Some(ses) = st.sessions.get(session_id) else { return };
            let (sandbox, harness) = (ses.sandbox_id.clone(), ses.harness.clone());
            let live = st.live_mut(session_id);
            live.for_turn(turn_id);
            let mut done = Vec::new();
            for e in &typed {
                done.extend(live.apply(e, ts));
            }
            for f in done {
                st.finished(&harness, Some(f));
            }
            sandbox
        };
        self.changed(&sandbox);
    }

    /// The units `caller` sees through `filter`, from memory, with `items` the open inbox items.
    fn picture(&self, items: &[ItemRow], caller: &Caller, filter: &Filter, now: f64) -> view::Picture {
        let st = self.lock();
        view::picture(&st, items, caller, filter, now, self.max_runs_per_credential)
    }
}

impl Fleet {
    /// `GET /api/fleet`: the caller's fleet, from memory.
    pub fn read(&self, caller: &Caller, filter: &Filter) -> FleetView {
        let items = self.inbox.open_items(None);
        let inbox = self.inbox.open_view(caller);
        let at = time::now();
        let p = self.picture(&items, caller, filter, at);
        FleetView::new(at, caller, p, inbox)
    }
}

/// Who may have a ticket into the fleet's stream: a person's user token or an admin's (an MCP
/// token is an agent's, a `jobs` token a pipeline's).
pub fn check_ticket(caller: &Caller) -> Result<()> {
    match caller.scope {
        Scope::Admin | Scope::User => Ok(()),
        Scope::Mcp | Scope::Jobs => {
            Err(Error::Forbidden("fleet tickets are for a person's user token or an admin's".to_string()))
        }
    }
}

/// The fleet's subscription to the change feed: each writer's change kept in memory as it
/// happens (see the invariants above).
pub struct Keeper {
    pub fleet: Arc<Fleet>,
    pub secrets: Arc<Secrets>,
}

impl Subscriber for Keeper {
    fn changed<'a>(&'a self, change: Change<'a>) -> BoxFuture<'a, ()> {
        match change {
            Change::Sandbox(row) => self.fleet.sandbox(row),
            Change::SandboxGone(row) => self.fleet.sandbox_gone(&row.id),
            Change::TurnQueued { session, turn } => self.fleet.session(session, turn),
            Change::TurnMoved(turn) => self.fleet.turn(turn),
            Change::SessionDeleted(session) => self.fleet.session_gone(&session.id),
            Change::Events { session_id, turn_id, events, ts } => self.fleet.ingested(session_id, turn_id, events, ts),
            Change::Job(job) => self.fleet.job(job, &self.secrets.redactor()),
            Change::Person { id, name } => self.fleet.person(id, name),
            Change::Item(item) => self.fleet.item(item),
            Change::TurnEnded { .. } | Change::TurnLive { .. } | Change::JobMoved { .. } => {}
        }
        Box::pin(std::future::ready(()))
    }
}
#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Recorded kinds reach the pictures typed, the agent's progress among them (the inbox's
    /// watcher records it by its name); an inbox ask's kind says nothing to a picture.
    #[test]
    fn recorded_events_are_read_typed_once() {
        let new = |kind| NewEvent { kind, data: json!({"pct": 40, "source": "agent"}), src_offset: None, part: 0 };
        let progress = typed(&new("agent.progress")).expect("typed");
        assert_eq!((progress.kind, &progress.data["pct"]), (EventType::AgentProgress, &json!(40)));
        assert_eq!(typed(&new("tool.start")).map(|e| e.kind), Some(EventType::ToolStart));
        assert_eq!(typed(&new("inbox.opened")), None);
    }
}
