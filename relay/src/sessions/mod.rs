//! Agent sessions and turns: a session is one conversation with one agent CLI in one sandbox, a
//! turn one run of its harness (the first prompt, then each follow-up), under a supervisor in the
//! sandbox (`supervisor`) that a driver task per turn starts, follows and ends (`driver`). Lines
//! of the turn's log become events (`ingest`, with `hangar-agents`' parsers), recorded with the
//! read position and told to live readers (`live`), whom `follow` serves.
//!
//! Invariants:
//! - What a sandbox says is information: a turn's state, exit code and summary come from the
//!   relay's own reads (the daemon's report of the supervisor, files only root can write where
//!   the uid split holds), never from a file the agent can write.
//! - A terminal state is final (`Store::move_turn` only moves live turns), and a turn's state
//!   and the `run.state` event that records its move are one write: no reader sees one alone.
//! - Every text from a turn passes the one redaction step (`Secrets::redactor`) before it is
//!   stored or streamed.
//! - Sessions belong to a person; a caller sees its person's (an admin everyone's).
//! - A running turn waits for input (`waiting_input`) exactly while an ask of it (an approval or
//!   a question) is open in the inbox, or its harness's own request is unanswered
//!   (`settle_input`): never by its next event alone, since a hook that waits may print.
pub mod diff;
mod driver;
pub mod follow;
pub mod gone;
mod ingest;
pub mod live;
mod queue;
pub mod supervisor;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use hangar_agents::{
    harness::{Harness, Harnesses, SessionIds},
    inbox::Policy,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use crate::{
    auth::{Caller, MacKey},
    error::{Error, Result},
    events,
    feed::{Change, Feed},
    refs,
    sandboxes::Sandboxes,
    secrets::{Chosen, Secrets},
    store::{Created, EventRow, NewEvent, SandboxRow, SessionRow, Store, TurnRow},
    streams::Streams,
    time,
};

pub use crate::store::TurnState;
pub use follow::follow;
pub use ingest::valid_session_id;
pub use queue::{usage, Usage};

/// The longest prompt: it reaches the sandbox inside one script argument (128 KiB at most, in
/// base64).
pub const MAX_PROMPT_BYTES: usize = 64 * 1024;
/// The longest a long poll or a `session` tool call waits.
pub const MAX_WAIT: Duration = Duration::from_secs(25);
/// The most events one read returns.
pub const MAX_EVENTS_PER_READ: usize = 1_000;
/// The events one read returns when it names no limit.
pub const DEFAULT_EVENTS_PER_READ: usize = 200;
/// How long a cancelled turn's harness has after SIGTERM before SIGKILL.
pub const CANCEL_GRACE: Duration = Duration::from_secs(10);
/// A turn's deadline when its request names none.
pub const DEFAULT_TIMEOUT_MINUTES: i64 = 120;
/// The longest a turn may be given: a week.
pub const MAX_TIMEOUT_MINUTES: i64 = 7 * 24 * 60;

/// The settings sessions run by (docs/operations.md lists them).
#[derive(Debug, Clone)]
pub struct Settings {
    pub max_runs_per_credential: usize,
    /// Turns being started at once, in all sandboxes.
    pub max_starting: usize,
    pub usage_warn_pct: f64,
    pub usage_gate_pct: f64,
    pub poll: Duration,
    pub probe: Duration,
    pub follow_logs: bool,
    pub retention_days: f64,
    pub max_events: i64,
    /// Events recorded from one turn's log (`ingest`).
    pub turn_event_max: u64,
    /// The most a turn's log holds (the supervisor's writer keeps it).
    pub log_max_bytes: u64,
    /// How long an ask waits for a person (the inbox item's life): a turn's approval hook waits
    /// a little longer, so that the relay's expiry answer is what ends its wait.
    pub ask_expiry: Duration,
}

/// What sessions use of the relay: handles the wiring builds once and shares.
pub struct Uses {
    pub store: Arc<Store>,
    pub sandboxes: Arc<Sandboxes>,
    pub secrets: Arc<Secrets>,
    pub feed: Arc<Feed>,
    pub streams: Arc<Streams>,
    pub key: MacKey,
}

/// The sessions' handles and shared state: harness profiles, live readers, and the drivers'
/// cancel signals.
pub struct Sessions {
    pub store: Arc<Store>,
    pub sandboxes: Arc<Sandboxes>,
    pub secrets: Arc<Secrets>,
    feed: Arc<Feed>,
    streams: Arc<Streams>,
    key: MacKey,
    pub harnesses: Harnesses,
    pub settings: Settings,
    pub live: Arc<live::Live>,
    /// Each sandbox's place, learnt once per connection to its daemon.
    pub places: supervisor::Places,
    /// Recent diffs, per session.
    pub diffs: diff::Cache,
    /// Per running driver: woken when its turn is cancelled or ended from outside.
    drivers: Mutex<HashMap<String, Arc<Notify>>>,
    /// Held while a queued turn is admitted, so two never take one slot.
    admission: tokio::sync::Mutex<()>,
    /// Woken when a slot may have freed.
    slots: Notify,
    /// A permit per turn being started (`max_starting`).
    starting: tokio::sync::Semaphore,
    /// The prompts of turns not yet started, as the caller wrote them, in memory only: the
    /// store keeps the redacted text, the sandbox gets the caller's. A relay restarted before
    /// the start sends the stored (redacted) prompt.
    prompts: Mutex<HashMap<String, String>>,
    /// Held while a turn's waiting for input is decided and moved, so that the last decision
    /// read the latest asks.
    waits: tokio::sync::Mutex<()>,
}

impl Sessions {
    pub fn new(uses: Uses, harnesses: Harnesses, settings: Settings) -> Arc<Sessions> {
        let starting = tokio::sync::Semaphore::new(settings.max_starting);
        let Uses { store, sandboxes, secrets, feed, streams, key } = uses;
        Arc::new(Sessions {
            store,
            sandboxes,
            secrets,
            feed,
            streams,
            key,
            harnesses,
            settings,
            live: Arc::default(),
            places: supervisor::Places::default(),
            diffs: diff::Cache::default(),
            drivers: Mutex::default(),
            admission: tokio::sync::Mutex::new(()),
            slots: Notify::new(),
            starting,
            prompts: Mutex::default(),
            waits: tokio::sync::Mutex::new(()),
        })
    }

    fn prompts(&self) -> MutexGuard<'_, HashMap<String, String>> {
        self.prompts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.drivers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tells a turn's driver to look at its turn again (cancelled, ended from outside).
    fn poke(&self, turn_id: &str) {
        if let Some(n) = self.lock().get(turn_id) {
            n.notify_one();
        }
    }
}

/// What `POST /api/sessions` and the `session` tool's `start` take, read as they are by both
/// (their JSON shape and the tool's schema are derived from this). A doc comment here is the
/// field's description in the tool's schema.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// The new session's name (letters, digits, '.', '_', '-')
    pub name: String,
    /// Sandbox name or id
    pub sandbox: String,
    /// Harness profile (default claude-code)
    pub harness: Option<String>,
    /// What to ask the agent
    pub prompt: String,
    /// The agent's directory (default: the sandbox's working directory)
    pub cwd: Option<String>,
    /// The turn's deadline (default 120)
    #[schemars(range(min = 1, max = MAX_TIMEOUT_MINUTES))]
    pub timeout_minutes: Option<i64>,
    /// Names of relay secrets passed to the harness
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Tool calls that wait for a person's approval in the inbox, as Claude Code permission
    /// patterns (Bash(git push*), Write, *)
    #[serde(default)]
    pub approvals: Vec<String>,
    /// A retry with the same key and prompt answers the first call's result
    pub idempotency_key: Option<String>,
    /// Start even over the credential's usage limits
    #[serde(default)]
    pub ignore_limits: bool,
    /// The CLI is logged in inside the sandbox by itself, so no credential secret is needed
    #[serde(default)]
    pub sandbox_login: bool,
}

/// What a follow-up takes (`POST /api/sessions/{ref}/turns`, the `session` tool's `prompt`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnRequest {
    /// What to ask the agent
    pub prompt: String,
    /// The turn's deadline (default 120)
    #[schemars(range(min = 1, max = MAX_TIMEOUT_MINUTES))]
    pub timeout_minutes: Option<i64>,
    /// A retry with the same key and prompt answers the first call's result
    pub idempotency_key: Option<String>,
    /// Start even over the credential's usage limits
    #[serde(default)]
    pub ignore_limits: bool,
}

/// A session as its readers see it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SessionView {
    #[serde(flatten)]
    pub session: SessionRow,
    /// The latest turn's state and reason.
    pub state: TurnState,
    pub reason: Option<String>,
    pub turns: Vec<TurnRow>,
    /// Pass as `since` to read only what comes next.
    pub events_cursor: i64,
    /// Which fields hold the agent's own text (untrusted; an orchestrator model must not take
    /// them for hangar's).
    pub agent_text: &'static [&'static str],
    pub warnings: Vec<String>,
    /// Whether this answer is an earlier request's, replayed for its idempotency key.
    pub idempotent_replay: bool,
}

const AGENT_TEXT: &[&str] = &[
    "summary.last_message",
    "summary.last_tool_summary",
    "summary.current_file",
    "summary.files_touched",
    "summary.tests",
];

async fn view(sessions: &Sessions, session: SessionRow, warnings: Vec<String>, replay: bool) -> Result<SessionView> {
    let turns = sessions.store.turns(&session.id).await?;
    Ok(view_of(session, turns, warnings, replay))
}

fn view_of(session: SessionRow, turns: Vec<TurnRow>, warnings: Vec<String>, replay: bool) -> SessionView {
    let (state, reason) = turns.last().map_or((TurnState::Queued, None), |t| (t.state, t.reason.clone()));
    SessionView {
        events_cursor: session.event_seq,
        session,
        state,
        reason,
        turns,
        agent_text: AGENT_TEXT,
        warnings,
        idempotent_replay: replay,
    }
}

fn sha256_hex(s: &str) -> String {
    Sha256::digest(s.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn check_prompt(prompt: &str) -> Result<()> {
    if prompt.trim().is_empty() {
        return Err(Error::invalid("prompt: must not be empty"));
    }
    if prompt.len() > MAX_PROMPT_BYTES {
        return Err(Error::invalid(format!("prompt: {} bytes, at most {MAX_PROMPT_BYTES}", prompt.len())));
    }
    if prompt.contains('\0') {
        return Err(Error::invalid("prompt: must not contain NUL"));
    }
    Ok(())
}

fn check_key(key: &Option<String>) -> Result<()> {
    match key {
        Some(k) if k.is_empty() || k.len() > 200 || k.chars().any(char::is_control) => {
            Err(Error::invalid("idempotency_key: 1 to 200 characters, no control characters"))
        }
        _ => Ok(()),
    }
}

fn check_timeout(minutes: Option<i64>) -> Result<i64> {
    match minutes {
        None => Ok(DEFAULT_TIMEOUT_MINUTES),
        Some(m) if (1..=MAX_TIMEOUT_MINUTES).contains(&m) => Ok(m),
        Some(m) => Err(Error::invalid(format!("timeout_minutes: {m}: 1 to {MAX_TIMEOUT_MINUTES} (a week)"))),
    }
}

/// Session names: a word of letters, digits, `.`, `_` and `-`, as in an MCP resource URI.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && !name.starts_with(['.', '-'])
}

fn new_turn(session_id: &str, prompt: &str, req: &TurnRequest, credential: Option<String>, timeout: i64) -> TurnRow {
    TurnRow {
        id: format!("turn_{}", crate::random::hex(6)),
        session_id: session_id.to_string(),
        n: 1,
        prompt: String::new(),
        prompt_sha256: sha256_hex(prompt),
        state: TurnState::Queued,
        reason: None,
        detail: None,
        credential,
        idempotency_key: req.idempotency_key.clone(),
        ignore_limits: req.ignore_limits,
        timeout_minutes: timeout,
        created_at: time::now(),
        started_at: None,
        finished_at: None,
        pid: None,
        exit_code: None,
        signal: None,
        cancel_requested_at: None,
        log_offset: 0,
        log_base: 0,
        parser: None,
        polled: false,
    }
}

/// The credential a turn uses: the secret passed under one of the harness's credential
/// variables (the first named), which its concurrency and plan usage are counted by.
fn credential_of(harness: &Harness, chosen: &[Chosen]) -> Option<String> {
    harness.credentials.iter().find_map(|n| chosen.iter().find(|c| &c.name == n)).map(Chosen::credential)
}

/// The secrets a session passes (the harness's, then those asked for), each chosen for the
/// caller, and the credential among them. Jobs choose theirs here too.
pub async fn choose_secrets(
    sessions: &Sessions,
    caller: &Caller,
    harness: &Harness,
    asked: &[String],
) -> Result<(Vec<String>, Vec<Chosen>, Option<String>)> {
    let mut secrets = harness.secrets.clone();
    for s in asked {
        if !secrets.contains(s) {
            secrets.push(s.clone());
        }
    }
    let chosen = sessions.secrets.choose(caller, &secrets, &harness.secrets).await?;
    let credential = credential_of(harness, &chosen);
    Ok((secrets, chosen, credential))
}

/// Refuses a start whose harness authenticates with credentials and passes none, unless the
/// CLI logs in inside the sandbox (the profile's or the request's `sandbox_login`): the CLI would
/// fail only after its start ("Not logged in"). The refusal names what the harness wants and
/// nothing of which secrets exist.
pub fn check_credential(harness: &Harness, credential: Option<&str>, sandbox_login: bool) -> Result<()> {
    if credential.is_some() || harness.credentials.is_empty() || harness.sandbox_login || sandbox_login {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "secrets: harness {:?} authenticates with {}: name one of them in `secrets` (a secret of that name you \
         may use), or set `sandbox_login` when the CLI is logged in inside the sandbox",
        harness.name,
        harness.credentials.join(" or ")
    )))
}

/// The secrets a session's turns get, as chosen when it started.
pub fn chosen_secrets(session: &SessionRow) -> Vec<Chosen> {
    let owners = session.secret_owners.iter().map(String::as_str).chain(std::iter::repeat(""));
    session.secrets.iter().zip(owners).map(|(name, owner)| Chosen { name: name.clone(), owner: owner.into() }).collect()
}

/// Starts a session and its first turn; answers at once (the turn is queued or starting).
pub async fn start(sessions: &Arc<Sessions>, caller: &Caller, req: StartRequest) -> Result<SessionView> {
    if !valid_name(&req.name) {
        return Err(Error::invalid(format!(
            "name {:?}: 1 to 64 letters, digits, '.', '_' or '-', not starting with '.' or '-'",
            req.name
        )));
    }
    check_prompt(&req.prompt)?;
    check_key(&req.idempotency_key)?;
    let timeout = check_timeout(req.timeout_minutes)?;
    let harness_name = req.harness.as_deref().unwrap_or("claude-code");
    let harness = sessions.harnesses.get(harness_name).ok_or_else(|| {
        let known: Vec<&str> = sessions.harnesses.iter().map(|h| h.name.as_str()).collect();
        Error::invalid(format!("harness {harness_name:?}: one of {}", known.join(", ")))
    })?;
    let (secrets, chosen, credential) = choose_secrets(sessions, caller, harness, &req.secrets).await?;
    let row = sessions.sandboxes.enter(&req.sandbox, caller).await?;
    let approvals = approval_policy(sessions, harness, &row, &req.approvals).await?;
    let cwd = match req.cwd.as_deref().or(row.workdir.as_deref()) {
        Some(cwd) => sessions.sandboxes.resolve_cwd(&row, cwd)?,
        None => return Err(Error::invalid("cwd: the sandbox has no working directory; name one")),
    };
    check_credential(harness, credential.as_deref(), req.sandbox_login)?;
    let redactor = sessions.secrets.redactor();
    let session = SessionRow {
        id: format!("ses_{}", crate::random::hex(6)),
        name: req.name.clone(),
        person: caller.person.clone(),
        sandbox_id: row.id.clone(),
        sandbox_name: row.name.clone(),
        harness: harness.name.clone(),
        cwd,
        secrets,
        secret_owners: chosen.into_iter().map(|c| c.owner).collect(),
        credential: credential.clone(),
        approvals,
        agent_session_id: (harness.session_ids == SessionIds::Assign).then(uuid_v4),
        split: None,
        summary: json!({}),
        event_seq: 0,
        idempotency_key: req.idempotency_key.clone(),
        prompt_sha256: sha256_hex(&req.prompt),
        created_at: time::now(),
        started_at: None,
    };
    let turn_req = TurnRequest {
        prompt: req.prompt.clone(),
        timeout_minutes: req.timeout_minutes,
        idempotency_key: None,
        ignore_limits: req.ignore_limits,
    };
    let mut turn = new_turn(&session.id, &req.prompt, &turn_req, credential, timeout);
    turn.prompt = redactor.text(&req.prompt).into_owned();
    match sessions.store.create_session(&session, &turn).await? {
        Created::New((session, turn)) => {
            events::SessionStarted {
                session: &session.name,
                person: &session.person,
                harness: &session.harness,
                sandbox: &session.sandbox_name,
            }
            .emit();
            sessions.feed.publish(Change::TurnQueued { session: &session, turn: &turn }).await;
            sessions.prompts().insert(turn.id.clone(), req.prompt.clone());
            let warnings = queue::warnings(sessions, turn.credential.as_deref()).await?;
            spawn_driver(sessions, &turn.id);
            view(sessions, session, warnings, false).await
        }
        Created::Replayed((session, _)) => view(sessions, session, Vec::new(), true).await,
        Created::KeyConflict => {
            Err(Error::Conflict("idempotency_key: already used for a session with another prompt".into()))
        }
        Created::Taken => Err(Error::Conflict(format!("a session named {:?} exists: pick another name", req.name))),
    }
}

/// Checks a session's approval policy: patterns that parse, a harness with an approval hook,
/// and a sandbox where the uid split holds (elsewhere the agent could write its own answers).
async fn approval_policy(
    sessions: &Sessions,
    harness: &Harness,
    row: &SandboxRow,
    patterns: &[String],
) -> Result<Vec<String>> {
    if patterns.is_empty() {
        return Ok(Vec::new());
    }
    let policy = Policy::parse(patterns).map_err(|e| Error::invalid(format!("approvals: {e}")))?;
    if harness.approvals.is_none() {
        return Err(Error::invalid(format!(
            "approvals: harness {:?} has no approval hook (its profile names no `approvals` arguments); \
             claude-code has one",
            harness.name
        )));
    }
    let shell = supervisor::Shell::open(sessions, row.clone()).await?;
    let place = shell.place().await?;
    if !place.split {
        return Err(Error::invalid(format!(
            "approvals: sandbox {:?} has no uid split (a daemon running as root with a default user that \
             is not), so the agent could answer its own approvals: use a sandbox that has one",
            row.name
        )));
    }
    if place.agent_bin.is_none() {
        return Err(Error::invalid(format!(
            "approvals: sandbox {:?} has no hangar-envd owned by root for the approval hook",
            row.name
        )));
    }
    Ok(policy.patterns())
}

/// The session `reference` names among the caller's (any person's for an admin).
/// Beside its id and name, a unique prefix of either names it (`refs`).
pub async fn find(sessions: &Sessions, caller: &Caller, reference: &str) -> Result<SessionRow> {
    if let Some(row) = sessions.store.session(reference, caller.sees()).await? {
        return Ok(row);
    }
    let pattern = refs::pattern(reference, &["ses_"], false, true);
    let rows =
        if pattern.is_empty() { Vec::new() } else { sessions.store.sessions_matching(pattern, caller.sees()).await? };
    match refs::pick(rows, |_| true, |r| refs::Candidate { id: r.id.clone(), name: r.name.clone() }) {
        refs::Picked::One(row) => Ok(row),
        refs::Picked::None => Err(Error::not_found(format!("no session {reference:?}"))),
        refs::Picked::Many(candidates) => {
            Err(Error::Ambiguous { what: "sessions", reference: reference.to_string(), candidates })
        }
    }
}

/// A follow-up in the same conversation.
pub async fn follow_up(
    sessions: &Arc<Sessions>,
    caller: &Caller,
    reference: &str,
    req: TurnRequest,
) -> Result<SessionView> {
    check_prompt(&req.prompt)?;
    check_key(&req.idempotency_key)?;
    let timeout = check_timeout(req.timeout_minutes)?;
    let session = find(sessions, caller, reference).await?;
    let harness = sessions
        .harnesses
        .get(&session.harness)
        .ok_or_else(|| Error::invalid(format!("harness {:?} is no longer configured", session.harness)))?;
    if harness.follow_up.is_none() {
        return Err(Error::invalid(format!("harness {:?} has no follow-up command", harness.name)));
    }
    sessions.sandboxes.enter(&session.sandbox_id, caller).await?;
    let mut turn = new_turn(&session.id, &req.prompt, &req, session.credential.clone(), timeout);
    turn.prompt = sessions.secrets.redactor().text(&req.prompt).into_owned();
    match sessions.store.create_turn(&turn).await? {
        Created::New(turn) => {
            sessions.feed.publish(Change::TurnQueued { session: &session, turn: &turn }).await;
            sessions.prompts().insert(turn.id.clone(), req.prompt.clone());
            let warnings = queue::warnings(sessions, turn.credential.as_deref()).await?;
            spawn_driver(sessions, &turn.id);
            let session = sessions.store.session_by_id(&session.id).await?.unwrap_or(session);
            view(sessions, session, warnings, false).await
        }
        Created::Replayed(_) => view(sessions, session, Vec::new(), true).await,
        Created::KeyConflict => {
            Err(Error::Conflict("idempotency_key: already used for a turn with another prompt".into()))
        }
        Created::Taken => Err(Error::Conflict(format!(
            "session {:?} has a turn running: wait for it to end, or cancel it",
            session.name
        ))),
    }
}

pub async fn get(sessions: &Sessions, caller: &Caller, reference: &str) -> Result<SessionView> {
    view(sessions, find(sessions, caller, reference).await?, Vec::new(), false).await
}

pub async fn list(sessions: &Sessions, caller: &Caller) -> Result<Vec<SessionView>> {
    let listed = sessions.store.sessions_with_turns(caller.sees()).await?;
    Ok(listed.into_iter().map(|(s, turns)| view_of(s, turns, Vec::new(), false)).collect())
}

/// Cancels the session's live turn, if any: TERM to its process group, KILL after a grace
/// period. Idempotent.
pub async fn cancel(sessions: &Sessions, caller: &Caller, reference: &str) -> Result<SessionView> {
    let session = find(sessions, caller, reference).await?;
    for turn in sessions.store.live_turns_of(&session.id).await? {
        cancel_turn(sessions, &session, &turn).await?;
    }
    get(sessions, caller, &session.id).await
}

async fn cancel_turn(sessions: &Sessions, session: &SessionRow, turn: &TurnRow) -> Result<()> {
    sessions.store.request_cancel(&turn.id, time::now()).await?;
    if turn.state == TurnState::Queued {
        transition(sessions, &session.id, &turn.id, turn.state, TurnState::Cancelled, Some("cancel_agent"), None)
            .await?;
    }
    sessions.poke(&turn.id);
    Ok(())
}

/// Deletes a session with its turns and events, cancelling a live turn first.
pub async fn delete(sessions: &Sessions, caller: &Caller, reference: &str) -> Result<()> {
    let session = find(sessions, caller, reference).await?;
    for turn in sessions.store.live_turns_of(&session.id).await? {
        cancel_turn(sessions, &session, &turn).await?;
    }
    sessions.store.delete_session(&session.id).await?;
    sessions.feed.publish(Change::SessionDeleted(&session)).await;
    events::SessionDeleted { session: &session.name, person: &session.person }.emit();
    Ok(())
}

/// Ends every live turn in a sandbox that is going away, then lets its drivers go.
pub async fn end_in_sandbox(sessions: &Sessions, sandbox: &SandboxRow, to: TurnState, reason: &str) -> Result<()> {
    for session in sessions.store.sessions_in_sandbox(&sandbox.id).await? {
        for turn in sessions.store.live_turns_of(&session.id).await? {
            transition(sessions, &session.id, &turn.id, turn.state, to, Some(reason), None).await?;
            sessions.poke(&turn.id);
        }
    }
    Ok(())
}

/// Destroys a sandbox: its live turns end `cancelled/sandbox_destroyed` first. A local
/// sandbox's split directory is on the relay's host, and goes with it.
pub async fn destroy_sandbox(sessions: &Sessions, row: &SandboxRow) -> Result<()> {
    end_in_sandbox(sessions, row, TurnState::Cancelled, "sandbox_destroyed").await?;
    let on_host = sessions.sandboxes.on_host(row);
    sessions.sandboxes.destroy(row).await?;
    sessions.places.forget(&row.id);
    if on_host {
        // Best effort: it is there only where the relay is root.
        let _ = std::fs::remove_dir_all(std::path::Path::new(supervisor::SPLIT_DIR).join(&row.id));
    }
    Ok(())
}

/// A page of events.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct EventsPage {
    pub events: Vec<EventRow>,
    /// Pass as `since` next time.
    pub next: i64,
    /// More events are recorded past this page.
    pub more: bool,
    /// The latest turn's state.
    pub state: TurnState,
    /// While the turn waits for input (`waiting_input`): the inbox items it waits for (open
    /// approvals and questions), to answer with `POST /api/questions/{id}` or decide with
    /// `POST /api/approvals/{id}`. Empty otherwise.
    pub waiting_for: Vec<String>,
}

/// A read of a session's events as a client asked for it, each value in its range: the one place
/// those ranges are decided, for REST and MCP alike. A value out of range is refused, never
/// clamped, so that a client learns its mistake rather than reading something else.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EventsRead {
    since: i64,
    limit: usize,
    wait: Duration,
}

impl EventsRead {
    /// `wait_name` is the parameter's name where the client wrote it (`wait`, `wait_seconds`).
    pub fn new(since: Option<i64>, limit: Option<usize>, wait: Option<f64>, wait_name: &str) -> Result<EventsRead> {
        let since = check_since(since.unwrap_or(0))?;
        let limit = limit.unwrap_or(DEFAULT_EVENTS_PER_READ);
        if !(1..=MAX_EVENTS_PER_READ).contains(&limit) {
            return Err(Error::invalid(format!("limit: {limit}: 1 to {MAX_EVENTS_PER_READ}")));
        }
        let max = MAX_WAIT.as_secs_f64();
        let wait = match wait {
            None => Duration::ZERO,
            Some(w) if w.is_finite() && (0.0..=max).contains(&w) => Duration::from_secs_f64(w),
            Some(w) => return Err(Error::invalid(format!("{wait_name}: {w}: 0 to {max} seconds"))),
        };
        Ok(EventsRead { since, limit, wait })
    }

    pub fn since(&self) -> i64 {
        self.since
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn wait(&self) -> Duration {
        self.wait
    }
}

/// Where a read of a session's events starts: an event's seq, 0 or more.
pub fn check_since(since: i64) -> Result<i64> {
    if since < 0 {
        return Err(Error::invalid(format!("since: {since}: an event's seq (a previous read's next), 0 or more")));
    }
    Ok(since)
}

/// Events after `since`; with `wait`, as soon as there is one (or the wait ends, or the
/// session's turn ends).
pub async fn events(sessions: &Sessions, caller: &Caller, reference: &str, read: EventsRead) -> Result<EventsPage> {
    let session = find(sessions, caller, reference).await?;
    let EventsRead { since, limit, wait } = read;
    let mut rx = sessions.live.subscribe(&session.id, session.event_seq);
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let page = read_page(sessions, &session.id, since, limit).await?;
        if !page.events.is_empty() || page.state.is_terminal() || tokio::time::Instant::now() >= deadline {
            return Ok(page);
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return read_page(sessions, &session.id, since, limit).await,
        }
    }
}

pub async fn read_page(sessions: &Sessions, session_id: &str, since: i64, limit: usize) -> Result<EventsPage> {
    let (mut events, state) = sessions.store.events_page(session_id, since.max(0), limit + 1).await?;
    let more = events.len() > limit;
    events.truncate(limit);
    let next = events.last().map_or(since.max(0), |e| e.seq);
    let state = state.unwrap_or(TurnState::Queued);
    let waiting_for = waiting_for(sessions, session_id, state).await?;
    Ok(EventsPage { events, next, more, state, waiting_for })
}

/// The open asks a turn in `state` waits for (none unless it waits for input).
pub async fn waiting_for(sessions: &Sessions, session_id: &str, state: TurnState) -> Result<Vec<String>> {
    if state != TurnState::WaitingInput {
        return Ok(Vec::new());
    }
    Ok(sessions.store.open_asks_of_session(session_id).await?)
}

/// Moves a turn between states and records the `run.state` event hangar emits for it. A turn
/// already terminal is left alone (its state is final).
pub(crate) async fn transition(
    sessions: &Sessions,
    session_id: &str,
    turn_id: &str,
    from: TurnState,
    to: TurnState,
    reason: Option<&str>,
    detail: Option<&str>,
) -> Result<bool> {
    move_turn(sessions, session_id, turn_id, (from, false), to, reason, detail).await
}

/// Moves a running turn to `waiting_input` while an ask of it is open in the inbox, and back
/// to `running` once none is; any other state (not started yet, ended) is left alone. The
/// inbox calls it after each ask opens or ends, the driver once its turn runs.
pub async fn settle_input(sessions: &Sessions, session_id: &str, turn_id: &str) -> Result<bool> {
    let _one = sessions.waits.lock().await;
    let waits = sessions.store.turn_has_open_ask(turn_id).await?;
    let (from, to) = if waits {
        (TurnState::Running, TurnState::WaitingInput)
    } else {
        (TurnState::WaitingInput, TurnState::Running)
    };
    move_turn(sessions, session_id, turn_id, (from, true), to, None, None).await
}

/// The harness itself asked for input (a request hangar cannot answer, such as Codex's): the
/// running turn waits, until its next event (`settle_input` then).
pub(crate) async fn harness_asked(sessions: &Sessions, session_id: &str, turn_id: &str) -> Result<bool> {
    let _one = sessions.waits.lock().await;
    let (from, to) = (TurnState::Running, TurnState::WaitingInput);
    move_turn(sessions, session_id, turn_id, (from, true), to, None, None).await
}

/// `transition`'s work; `(from, exact)`: with `exact`, only a turn in `from` moves.
async fn move_turn(
    sessions: &Sessions,
    session_id: &str,
    turn_id: &str,
    (from, exact): (TurnState, bool),
    to: TurnState,
    reason: Option<&str>,
    detail: Option<&str>,
) -> Result<bool> {
    let detail = detail.map(|d| sessions.secrets.redactor().text(d).into_owned());
    let data =
        json!({ "from": from.as_str(), "to": to.as_str(), "reason": reason, "detail": detail, "source": "hangar" });
    let event = NewEvent { kind: "run.state", data, src_offset: None, part: 0 };
    let ts = time::now();
    let only = exact.then_some(from);
    let moved =
        sessions.store.move_turn_from(session_id, turn_id, only, to, reason, detail.as_deref(), ts, event.clone());
    let Some(seq) = moved.await? else { return Ok(false) };
    sessions.live.publish_events(session_id, turn_id, ts, &[event], &[(0, seq)], seq);
    let turn = sessions.store.turn(turn_id).await?;
    if let Some(turn) = &turn {
        sessions.feed.publish(Change::TurnMoved(turn)).await;
    }
    events::TurnState { turn: turn_id, from: from.as_str(), to: to.as_str(), reason }.emit();
    if to.is_terminal() {
        sessions.prompts().remove(turn_id);
        sessions.slots.notify_waiters();
        if let (Some(session), Some(turn)) = (sessions.store.session_by_id(session_id).await?, &turn) {
            let failed = matches!(to, TurnState::Failed | TurnState::Crashed | TurnState::TimedOut);
            sessions.feed.publish(Change::TurnEnded { session: &session, turn, failed }).await;
        }
    }
    Ok(true)
}

/// Records one event of hangar's own (an inbox ask, the agent's progress) in a session, and
/// tells its live readers.
pub(crate) async fn record_event(
    sessions: &Sessions,
    session_id: &str,
    turn_id: &str,
    kind: &'static str,
    data: serde_json::Value,
) -> Result<i64> {
    let ts = time::now();
    let event = NewEvent { kind, data, src_offset: None, part: 0 };
    let events = vec![event];
    let (seq, recorded) = sessions.store.record_events(session_id, turn_id, events.clone(), ts, None, None).await?;
    sessions.live.publish_events(session_id, turn_id, ts, &events, &recorded, seq);
    sessions.feed.publish(Change::Events { session_id, turn_id, events: &events, ts }).await;
    Ok(seq)
}

/// Starts a driver for the turn unless one runs.
fn spawn_driver(sessions: &Arc<Sessions>, turn_id: &str) {
    let notify = {
        let mut drivers = sessions.lock();
        if drivers.contains_key(turn_id) {
            return;
        }
        let n = Arc::new(Notify::new());
        drivers.insert(turn_id.to_string(), n.clone());
        n
    };
    let sessions = sessions.clone();
    let turn_id = turn_id.to_string();
    tokio::spawn(async move {
        driver::drive(&sessions, &turn_id, &notify).await;
        sessions.lock().remove(&turn_id);
        sessions.slots.notify_waiters();
    });
}

/// At start: a driver for every live turn (they resume from their saved positions), and the
/// retention sweep.
pub async fn resume(sessions: Arc<Sessions>) {
    match sessions.store.live_turns().await {
        Ok(turns) => {
            for t in turns {
                spawn_driver(&sessions, &t.id);
            }
        }
        Err(e) => events::SessionsNotResumed { error: &e.to_string() }.emit(),
    }
    let mut tick = tokio::time::interval(Duration::from_secs(3600));
    loop {
        tick.tick().await;
        let s = &sessions.settings;
        let before = time::now() - s.retention_days * 86_400.0;
        match sessions.store.prune_events(before, s.max_events).await {
            Ok(n) if n > 0 => events::EventsPruned { events: n }.emit(),
            Ok(_) => {}
            Err(e) => events::SessionsNotResumed { error: &e.to_string() }.emit(),
        }
    }
}

/// A random (version 4) UUID: the conversation id hangar assigns where the CLI takes one.
pub fn uuid_v4() -> String {
    let mut b = crate::random::bytes::<16>();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_harness_that_authenticates_needs_a_credential_or_a_login_of_its_own() {
        let all = Harnesses::builtin();
        let claude = all.get("claude-code").expect("claude-code");
        let e = check_credential(claude, None, false).expect_err("no credential");
        assert!(e.to_string().contains("ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN"), "{e}");
        assert!(check_credential(claude, Some("ANTHROPIC_API_KEY"), false).is_ok());
        assert!(check_credential(claude, None, true).is_ok(), "the request says the CLI logs in");
        let own = Harness { sandbox_login: true, ..claude.clone() };
        assert!(check_credential(&own, None, false).is_ok(), "the profile says so");
        let open = Harness { credentials: Vec::new(), ..claude.clone() };
        assert!(check_credential(&open, None, false).is_ok(), "nothing to authenticate with");
    }

    #[test]
    fn names_and_uuids() {
        assert!(valid_name("fix-flaky.1"));
        assert!(!valid_name("-x") && !valid_name("a/b") && !valid_name("") && !valid_name(&"a".repeat(65)));
        let u = uuid_v4();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert_ne!(u, uuid_v4());
    }
}
