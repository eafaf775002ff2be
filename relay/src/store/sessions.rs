//! Agent sessions, their turns and events, named secrets and plan usage.
//!
//! A turn's read position (`log_offset`) is written in the same transaction as the events read
//! up to it, and events are unique by (turn, offset of their line, index in the line): a relay
//! that restarts, even after `kill -9`, resumes where it was and records nothing twice.
use rusqlite::{params, OptionalExtension, Row};
use serde::Serialize;

use super::{unknown, Durability, Result, Store};

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS secrets (
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    shared_with TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (owner, name)
);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    person TEXT NOT NULL,
    sandbox_id TEXT NOT NULL,
    sandbox_name TEXT NOT NULL,
    harness TEXT NOT NULL,
    cwd TEXT NOT NULL,
    secrets TEXT NOT NULL,
    credential TEXT,
    agent_session_id TEXT,
    split INTEGER,
    summary TEXT NOT NULL,
    event_seq INTEGER NOT NULL DEFAULT 0,
    idempotency_key TEXT,
    prompt_sha256 TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    UNIQUE (person, name)
);
CREATE UNIQUE INDEX IF NOT EXISTS sessions_idem ON sessions(person, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS turns (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    n INTEGER NOT NULL,
    prompt TEXT NOT NULL,
    prompt_sha256 TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT,
    detail TEXT,
    credential TEXT,
    idempotency_key TEXT,
    ignore_limits INTEGER NOT NULL DEFAULT 0,
    timeout_minutes INTEGER NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    pid INTEGER,
    exit_code INTEGER,
    signal TEXT,
    cancel_requested_at REAL,
    log_offset INTEGER NOT NULL DEFAULT 0,
    log_base INTEGER NOT NULL DEFAULT 0,
    polled INTEGER NOT NULL DEFAULT 0,
    UNIQUE (session_id, n)
);
CREATE UNIQUE INDEX IF NOT EXISTS turns_idem ON turns(session_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS turns_state ON turns(state);
CREATE TABLE IF NOT EXISTS session_events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    turn_id TEXT NOT NULL,
    src_offset INTEGER,
    part INTEGER NOT NULL DEFAULT 0,
    ts REAL NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS session_events_src ON session_events(turn_id, src_offset, part)
    WHERE src_offset IS NOT NULL;
CREATE INDEX IF NOT EXISTS session_events_ts ON session_events(ts);
CREATE TABLE IF NOT EXISTS usage (
    credential TEXT NOT NULL,
    window TEXT NOT NULL,
    used_pct REAL,
    status TEXT,
    resets_at REAL,
    seen_at REAL NOT NULL,
    raw TEXT NOT NULL,
    PRIMARY KEY (credential, window)
);
";

/// A turn's state: the nine of docs/sessions.md ("Turns: states and reasons"). The last five are
/// terminal and final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnState {
    Queued,
    Starting,
    Running,
    WaitingInput,
    Succeeded,
    Failed,
    Crashed,
    Cancelled,
    TimedOut,
}

impl TurnState {
    pub const LIVE: [TurnState; 4] =
        [TurnState::Queued, TurnState::Starting, TurnState::Running, TurnState::WaitingInput];

    pub fn as_str(self) -> &'static str {
        match self {
            TurnState::Queued => "queued",
            TurnState::Starting => "starting",
            TurnState::Running => "running",
            TurnState::WaitingInput => "waiting_input",
            TurnState::Succeeded => "succeeded",
            TurnState::Failed => "failed",
            TurnState::Crashed => "crashed",
            TurnState::Cancelled => "cancelled",
            TurnState::TimedOut => "timed_out",
        }
    }

    pub fn parse(s: &str) -> Option<TurnState> {
        [
            TurnState::Queued,
            TurnState::Starting,
            TurnState::Running,
            TurnState::WaitingInput,
            TurnState::Succeeded,
            TurnState::Failed,
            TurnState::Crashed,
            TurnState::Cancelled,
            TurnState::TimedOut,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        !TurnState::LIVE.contains(&self)
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SessionRow {
    pub id: String,
    pub name: String,
    pub person: String,
    #[serde(skip)]
    pub sandbox_id: String,
    #[serde(rename = "sandbox")]
    pub sandbox_name: String,
    pub harness: String,
    pub cwd: String,
    /// Names of the relay's secrets the harness gets as environment variables.
    pub secrets: Vec<String>,
    /// Whose secret each of `secrets` is (`""`: the admins'), as resolved when the session
    /// started.
    #[serde(skip)]
    pub secret_owners: Vec<String>,
    pub credential: Option<String>,
    /// Which tool calls wait for a person's approval (Claude Code permission patterns); empty:
    /// none.
    pub approvals: Vec<String>,
    /// The agent CLI's own conversation id (assigned by hangar or reported by the CLI).
    pub agent_session_id: Option<String>,
    /// Whether the uid split holds: the harness runs as the sandbox's user, the supervisor's
    /// files as the daemon's. Null until the first turn starts.
    pub split: Option<bool>,
    pub summary: serde_json::Value,
    /// The seq of the last event recorded.
    pub event_seq: i64,
    #[serde(skip)]
    pub idempotency_key: Option<String>,
    #[serde(skip)]
    pub prompt_sha256: String,
    pub created_at: f64,
    pub started_at: Option<f64>,
}

/// A secret without its value: whose it is (`""`: the admins') and who else may use it.
#[derive(Debug, Clone, PartialEq)]
pub struct SecretRow {
    pub owner: String,
    pub name: String,
    pub shared_with: Vec<String>,
    pub created_at: i64,
}

/// Secrets had one name space before they had owners: those become the admins' (`owner` `""`),
/// whom they were for (only admins could make them). Rebuilt once, in one transaction.
pub(super) fn migrate_secrets(conn: &mut rusqlite::Connection) -> Result<()> {
    let owned: bool =
        conn.query_row("SELECT EXISTS (SELECT 1 FROM pragma_table_info('secrets') WHERE name = 'owner')", [], |r| {
            r.get(0)
        })?;
    if owned {
        return Ok(());
    }
    let tx = conn.transaction()?;
    // The old table moves aside and SCHEMA (every statement `IF NOT EXISTS`) makes the new one.
    tx.execute_batch("ALTER TABLE secrets RENAME TO secrets_unowned;")?;
    tx.execute_batch(SCHEMA)?;
    tx.execute_batch(
        "INSERT INTO secrets (owner, name, value, created_at) SELECT '', name, value, created_at FROM secrets_unowned;
        DROP TABLE secrets_unowned;",
    )?;
    tx.commit()?;
    Ok(())
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct TurnRow {
    pub id: String,
    #[serde(skip)]
    pub session_id: String,
    /// 1 for the first prompt, then each follow-up.
    pub n: i64,
    pub prompt: String,
    #[serde(skip)]
    pub prompt_sha256: String,
    pub state: TurnState,
    pub reason: Option<String>,
    pub detail: Option<String>,
    pub credential: Option<String>,
    #[serde(skip)]
    pub idempotency_key: Option<String>,
    pub ignore_limits: bool,
    pub timeout_minutes: i64,
    pub created_at: f64,
    pub started_at: Option<f64>,
    pub finished_at: Option<f64>,
    /// The supervisor's pid in the sandbox.
    pub pid: Option<i64>,
    pub exit_code: Option<i64>,
    pub signal: Option<String>,
    pub cancel_requested_at: Option<f64>,
    /// Bytes of the run log read (always the end of a complete line).
    pub log_offset: i64,
    /// Bytes read from earlier versions of the log (before it was truncated or replaced): an
    /// event's place is `log_base + offset`, which only grows.
    #[serde(skip)]
    pub log_base: i64,
    /// Whether the log is being polled rather than followed.
    pub polled: bool,
    /// What the log's parser remembered at `log_offset` (its snapshot), so reading resumes there
    /// as if it had never stopped. Null before anything was read.
    pub parser: Option<String>,
}

/// One recorded event, as stored and served.
#[derive(Debug, Clone, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct EventRow {
    pub seq: i64,
    pub ts: f64,
    pub turn: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub data: serde_json::Value,
    #[serde(skip)]
    pub src_offset: Option<i64>,
}

/// The `src_offset` of an event kept current: one per turn and `part`, each recorded one
/// replacing the one before (with a new seq, so followers see it). No log offset is negative.
pub const CURRENT_OFFSET: i64 = -1;

/// An event to record: `src_offset` and `part` place it in its turn's log (`None` for hangar's
/// own events, [`CURRENT_OFFSET`] for one kept current).
#[derive(Clone)]
pub struct NewEvent {
    pub kind: &'static str,
    pub data: serde_json::Value,
    pub src_offset: Option<i64>,
    pub part: i64,
}

/// The latest `rate_limit` a credential's CLI reported for one window.
#[derive(Debug, Clone, Serialize)]
pub struct UsageRow {
    pub credential: String,
    pub window: String,
    pub used_pct: Option<f64>,
    pub status: Option<String>,
    pub resets_at: Option<f64>,
    pub seen_at: f64,
    pub raw: serde_json::Value,
}

fn json_col(r: &Row<'_>, col: &str) -> rusqlite::Result<serde_json::Value> {
    let text: String = r.get(col)?;
    Ok(serde_json::from_str(&text).unwrap_or(serde_json::Value::Null))
}

fn session_row(r: &Row<'_>) -> rusqlite::Result<SessionRow> {
    let secrets: Vec<String> = serde_json::from_value(json_col(r, "secrets")?).unwrap_or_default();
    Ok(SessionRow {
        id: r.get("id")?,
        name: r.get("name")?,
        person: r.get("person")?,
        sandbox_id: r.get("sandbox_id")?,
        sandbox_name: r.get("sandbox_name")?,
        harness: r.get("harness")?,
        cwd: r.get("cwd")?,
        // A session from before secrets had owners used the admins' (the only ones there were).
        secret_owners: r
            .get::<_, Option<String>>("secret_owners")?
            .and_then(|o| serde_json::from_str(&o).ok())
            .unwrap_or_else(|| vec![String::new(); secrets.len()]),
        secrets,
        credential: r.get("credential")?,
        approvals: r
            .get::<_, Option<String>>("approvals")?
            .and_then(|a| serde_json::from_str(&a).ok())
            .unwrap_or_default(),
        agent_session_id: r.get("agent_session_id")?,
        split: r.get("split")?,
        summary: json_col(r, "summary")?,
        event_seq: r.get("event_seq")?,
        idempotency_key: r.get("idempotency_key")?,
        prompt_sha256: r.get("prompt_sha256")?,
        created_at: r.get("created_at")?,
        started_at: r.get("started_at")?,
    })
}

fn turn_row(r: &Row<'_>) -> rusqlite::Result<TurnRow> {
    let id: String = r.get("id")?;
    let state: String = r.get("state")?;
    let Some(state) = TurnState::parse(&state) else { return Err(unknown("turn", id, "state", state)) };
    Ok(TurnRow {
        id,
        session_id: r.get("session_id")?,
        n: r.get("n")?,
        prompt: r.get("prompt")?,
        prompt_sha256: r.get("prompt_sha256")?,
        state,
        reason: r.get("reason")?,
        detail: r.get("detail")?,
        credential: r.get("credential")?,
        idempotency_key: r.get("idempotency_key")?,
        ignore_limits: r.get("ignore_limits")?,
        timeout_minutes: r.get("timeout_minutes")?,
        created_at: r.get("created_at")?,
        started_at: r.get("started_at")?,
        finished_at: r.get("finished_at")?,
        pid: r.get("pid")?,
        exit_code: r.get("exit_code")?,
        signal: r.get("signal")?,
        cancel_requested_at: r.get("cancel_requested_at")?,
        log_offset: r.get("log_offset")?,
        log_base: r.get("log_base")?,
        polled: r.get("polled")?,
        parser: r.get("parser")?,
    })
}

fn event_row(r: &Row<'_>) -> rusqlite::Result<EventRow> {
    Ok(EventRow {
        seq: r.get("seq")?,
        ts: r.get("ts")?,
        turn: r.get("turn_id")?,
        kind: r.get("type")?,
        data: json_col(r, "data")?,
        src_offset: r.get("src_offset")?,
    })
}

/// What creating a session or a turn found.
pub enum Created<T> {
    New(T),
    /// A row with the same idempotency key and prompt: the retry gets it back.
    Replayed(T),
    /// The same idempotency key with another prompt.
    KeyConflict,
    /// A session with that name exists (for sessions), or a turn is live (for turns).
    Taken,
}

/// Writes one event row: the one insert every recorder of session events uses.
pub(super) fn insert_event(
    tx: &rusqlite::Connection,
    session_id: &str,
    seq: i64,
    turn_id: &str,
    e: &NewEvent,
    ts: f64,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO session_events (session_id, seq, turn_id, src_offset, part, ts, type, data)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![session_id, seq, turn_id, e.src_offset, e.part, ts, e.kind, e.data.to_string()])?;
    Ok(())
}

/// Records a batch of a turn's events under the session's next seqs, skipping those already
/// recorded from the same place of the turn's log and replacing those kept current; with the
/// log's read position and the session's summary if given. The seq of the last, and `(index,
/// seq)` of each recorded.
fn record(
    tx: &rusqlite::Connection,
    session_id: &str,
    turn_id: &str,
    events: &[NewEvent],
    ts: f64,
    log: Option<(i64, i64, String)>,
    summary: Option<&str>,
) -> rusqlite::Result<(i64, Vec<(usize, i64)>)> {
    // The statements of the hottest write, prepared once per connection.
    let mut seq: i64 =
        tx.prepare_cached("SELECT event_seq FROM sessions WHERE id = ?1")?.query_row([session_id], |r| r.get(0))?;
    let mut recorded = Vec::with_capacity(events.len());
    for (i, e) in events.iter().enumerate() {
        if e.src_offset == Some(CURRENT_OFFSET) {
            tx.prepare_cached("DELETE FROM session_events WHERE turn_id = ?1 AND src_offset = ?2 AND part = ?3")?
                .execute(params![turn_id, CURRENT_OFFSET, e.part])?;
        } else if let Some(off) = e.src_offset {
            let seen: bool = tx
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM session_events
                     WHERE turn_id = ?1 AND src_offset = ?2 AND part = ?3)",
                )?
                .query_row(params![turn_id, off, e.part], |r| r.get(0))?;
            if seen {
                continue;
            }
        }
        seq += 1;
        insert_event(tx, session_id, seq, turn_id, e, ts)?;
        recorded.push((i, seq));
    }
    tx.prepare_cached("UPDATE sessions SET event_seq = ?2 WHERE id = ?1")?.execute(params![session_id, seq])?;
    if let Some(summary) = summary {
        tx.prepare_cached("UPDATE sessions SET summary = ?2 WHERE id = ?1")?.execute(params![session_id, summary])?;
    }
    if let Some((base, offset, parser)) = log {
        tx.prepare_cached("UPDATE turns SET log_base = ?2, log_offset = ?3, parser = ?4 WHERE id = ?1")?
            .execute(params![turn_id, base, offset, parser])?;
    }
    Ok((seq, recorded))
}

/// Every session `?1` sees (a person's own, or all for `NULL`), newest first.
const SESSIONS_SEEN: &str = "SELECT * FROM sessions WHERE ?1 IS NULL OR person = ?1 ORDER BY created_at DESC";

const LIVE_STATES: &str = "('queued', 'starting', 'running', 'waiting_input')";

fn insert_turn(tx: &rusqlite::Connection, t: &TurnRow) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO turns (id, session_id, n, prompt, prompt_sha256, state, reason, detail, credential,
            idempotency_key, ignore_limits, timeout_minutes, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        params![
            t.id,
            t.session_id,
            t.n,
            t.prompt,
            t.prompt_sha256,
            t.state.as_str(),
            t.reason,
            t.detail,
            t.credential,
            t.idempotency_key,
            t.ignore_limits,
            t.timeout_minutes,
            t.created_at
        ],
    )?;
    Ok(())
}

impl Store {
    // Secrets.

    /// Creates or replaces `owner`'s secret `name` (`owner` `""`: the admins').
    pub async fn put_secret(&self, owner: &str, name: &str, value: &str, shared_with: &[String]) -> Result<()> {
        let owner = owner.to_owned();
        let name = name.to_owned();
        let value = value.to_owned();
        let shared_with = shared_with.to_vec();
        self.threads
            .write(Durability::Durable, move |conn| {
                conn.execute(
                    "INSERT INTO secrets (owner, name, value, created_at, shared_with) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (owner, name) DO UPDATE SET value = excluded.value, created_at = excluded.created_at,
                    shared_with = excluded.shared_with",
                    params![
                        owner,
                        name,
                        value,
                        super::now(),
                        serde_json::to_string(&shared_with).unwrap_or_else(|_| "[]".into())
                    ],
                )?;
                Ok(())
            })
            .await
    }

    /// Every secret without its value, by owner then name.
    pub async fn secrets(&self) -> Result<Vec<SecretRow>> {
        self.threads
            .read(move |conn| {
                let mut stmt =
                    conn.prepare("SELECT owner, name, created_at, shared_with FROM secrets ORDER BY owner, name")?;
                let rows = stmt
                    .query_map([], |r| {
                        let shared: String = r.get(3)?;
                        Ok(SecretRow {
                            owner: r.get(0)?,
                            name: r.get(1)?,
                            created_at: r.get(2)?,
                            shared_with: serde_json::from_str(&shared).unwrap_or_default(),
                        })
                    })?
                    .collect::<rusqlite::Result<_>>()?;
                Ok(rows)
            })
            .await
    }

    /// Every secret's name and value: for the redaction step.
    pub async fn secret_values(&self) -> Result<Vec<(String, String)>> {
        self.threads
            .read(move |conn| {
                Ok(conn.query_rows("SELECT name, value FROM secrets", [], |r| Ok((r.get(0)?, r.get(1)?)))?)
            })
            .await
    }

    /// One secret's value, for a harness's environment.
    pub async fn secret_value(&self, owner: &str, name: &str) -> Result<Option<String>> {
        let owner = owner.to_owned();
        let name = name.to_owned();
        self.threads
            .read(move |conn| {
                Ok(conn
                    .query_row("SELECT value FROM secrets WHERE owner = ?1 AND name = ?2", [owner, name], |r| r.get(0))
                    .optional()?)
            })
            .await
    }

    pub async fn delete_secret(&self, owner: &str, name: &str) -> Result<bool> {
        let owner = owner.to_owned();
        let name = name.to_owned();
        self.threads
            .write(Durability::Durable, move |conn| {
                Ok(conn.execute("DELETE FROM secrets WHERE owner = ?1 AND name = ?2", [owner, name])? > 0)
            })
            .await
    }

    // Sessions and turns.

    /// Creates a session with its first turn, unless its idempotency key or name says otherwise;
    /// decided and written in one transaction, before anything starts.
    pub async fn create_session(&self, s: &SessionRow, first: &TurnRow) -> Result<Created<(SessionRow, TurnRow)>> {
        let s = s.clone();
        let first = first.clone();
        self.threads
            .write(Durability::Durable, move |conn| {
                let tx = conn;
                if let Some(key) = &s.idempotency_key {
                    let found = tx
                        .query_row(
                            "SELECT * FROM sessions WHERE person = ?1 AND idempotency_key = ?2",
                            params![s.person, key],
                            session_row,
                        )
                        .optional()?;
                    if let Some(found) = found {
                        if found.prompt_sha256 != s.prompt_sha256 {
                            return Ok(Created::KeyConflict);
                        }
                        let turn = tx.query_row(
                            "SELECT * FROM turns WHERE session_id = ?1 ORDER BY n LIMIT 1",
                            [&found.id],
                            turn_row,
                        )?;
                        return Ok(Created::Replayed((found, turn)));
                    }
                }
                let taken: bool = tx.query_row(
                    "SELECT EXISTS (SELECT 1 FROM sessions WHERE person = ?1 AND name = ?2)",
                    params![s.person, s.name],
                    |r| r.get(0),
                )?;
                if taken {
                    return Ok(Created::Taken);
                }
                tx.execute(
                "INSERT INTO sessions (id, name, person, sandbox_id, sandbox_name, harness, cwd, secrets, credential,
                    agent_session_id, split, summary, event_seq, idempotency_key, prompt_sha256, created_at, approvals,
                    secret_owners)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 0, ?13, ?14, ?15, ?16, ?17)",
                params![
                    s.id,
                    s.name,
                    s.person,
                    s.sandbox_id,
                    s.sandbox_name,
                    s.harness,
                    s.cwd,
                    serde_json::to_string(&s.secrets).unwrap_or_else(|_| "[]".into()),
                    s.credential,
                    s.agent_session_id,
                    s.split,
                    s.summary.to_string(),
                    s.idempotency_key,
                    s.prompt_sha256,
                    s.created_at,
                    serde_json::to_string(&s.approvals).unwrap_or_else(|_| "[]".into()),
                    serde_json::to_string(&s.secret_owners).unwrap_or_else(|_| "[]".into()),
                ],
            )?;
                insert_turn(tx, &first)?;
                Ok(Created::New((s.clone(), first.clone())))
            })
            .await
    }

    /// Adds a follow-up turn, unless its key was used (the same turn back, or a conflict) or a
    /// turn of the session is still live.
    pub async fn create_turn(&self, t: &TurnRow) -> Result<Created<TurnRow>> {
        let t = t.clone();
        self.threads
            .write(Durability::Durable, move |conn| {
                let tx = conn;
                if let Some(key) = &t.idempotency_key {
                    let found = tx
                        .query_row(
                            "SELECT * FROM turns WHERE session_id = ?1 AND idempotency_key = ?2",
                            params![t.session_id, key],
                            turn_row,
                        )
                        .optional()?;
                    if let Some(found) = found {
                        return Ok(if found.prompt_sha256 == t.prompt_sha256 {
                            Created::Replayed(found)
                        } else {
                            Created::KeyConflict
                        });
                    }
                }
                let live: bool = tx.query_row(
                    &format!("SELECT EXISTS (SELECT 1 FROM turns WHERE session_id = ?1 AND state IN {LIVE_STATES})"),
                    [&t.session_id],
                    |r| r.get(0),
                )?;
                if live {
                    return Ok(Created::Taken);
                }
                let n: i64 = tx.query_row(
                    "SELECT COALESCE(MAX(n), 0) + 1 FROM turns WHERE session_id = ?1",
                    [&t.session_id],
                    |r| r.get(0),
                )?;
                let t = TurnRow { n, ..t.clone() };
                insert_turn(tx, &t)?;
                Ok(Created::New(t))
            })
            .await
    }

    /// The session `reference` (its id, or its name among `person`'s sessions; `None` for any
    /// person's, which only admins ask for).
    pub async fn session(&self, reference: &str, person: Option<&str>) -> Result<Option<SessionRow>> {
        let reference = reference.to_owned();
        let person = person.map(str::to_owned);
        self.threads
            .read(move |conn| {
                let row = conn
                    .query_row(
                        "SELECT * FROM sessions WHERE (id = ?1 OR name = ?1) AND (?2 IS NULL OR person = ?2)
                     ORDER BY (id = ?1) DESC, created_at LIMIT 1",
                        params![reference, person],
                        session_row,
                    )
                    .optional()?;
                Ok(row)
            })
            .await
    }

    /// The sessions a reference's pattern matches (`refs`), of `person` (every person's: `None`).
    pub async fn sessions_matching(&self, p: crate::refs::Pattern, person: Option<&str>) -> Result<Vec<SessionRow>> {
        let person = person.map(str::to_owned);
        self.threads
            .read(move |conn| {
                let sql = format!(
                    "SELECT * FROM sessions WHERE {} AND (?4 IS NULL OR person = ?4) ORDER BY created_at",
                    super::matching("id", "name")
                );
                Ok(conn.query_rows(&sql, params![p.id_prefix, p.id_suffix, p.name_prefix, person], session_row)?)
            })
            .await
    }

    pub async fn session_by_id(&self, id: &str) -> Result<Option<SessionRow>> {
        let id = id.to_owned();
        self.threads
            .read(move |conn| {
                Ok(conn.query_row("SELECT * FROM sessions WHERE id = ?1", [&id], session_row).optional()?)
            })
            .await
    }

    pub async fn sessions(&self, person: Option<&str>) -> Result<Vec<SessionRow>> {
        let person = person.map(str::to_owned);
        self.threads.read(move |conn| Ok(conn.query_rows(SESSIONS_SEEN, params![person], session_row)?)).await
    }

    /// `sessions`, each with its turns in order, in one read (a fleet's list is one query of
    /// each, not one of turns per session).
    pub async fn sessions_with_turns(&self, person: Option<&str>) -> Result<Vec<(SessionRow, Vec<TurnRow>)>> {
        let person = person.map(str::to_owned);
        self.threads
            .read(move |conn| {
                // One snapshot for both: a turn never appears without its session.
                let tx = conn.unchecked_transaction()?;
                let sessions: Vec<SessionRow> = conn.query_rows(SESSIONS_SEEN, params![person], session_row)?;
                let turns: Vec<TurnRow> = conn.query_rows(
                    "SELECT t.* FROM turns t JOIN sessions s ON s.id = t.session_id
                     WHERE ?1 IS NULL OR s.person = ?1 ORDER BY t.session_id, t.n",
                    params![person],
                    turn_row,
                )?;
                tx.finish()?;
                let mut by_session: std::collections::HashMap<String, Vec<TurnRow>> = Default::default();
                for t in turns {
                    by_session.entry(t.session_id.clone()).or_default().push(t);
                }
                Ok(sessions
                    .into_iter()
                    .map(|s| {
                        let turns = by_session.remove(&s.id).unwrap_or_default();
                        (s, turns)
                    })
                    .collect())
            })
            .await
    }

    pub async fn sessions_in_sandbox(&self, sandbox_id: &str) -> Result<Vec<SessionRow>> {
        let sandbox_id = sandbox_id.to_owned();
        self.threads
            .read(move |conn| {
                Ok(conn.query_rows("SELECT * FROM sessions WHERE sandbox_id = ?1", [&sandbox_id], session_row)?)
            })
            .await
    }

    pub async fn delete_session(&self, id: &str) -> Result<()> {
        let id = id.to_owned();
        self.threads
            .write(Durability::Durable, move |conn| {
                let tx = conn;
                tx.execute("DELETE FROM session_events WHERE session_id = ?1", [&id])?;
                tx.execute("DELETE FROM turns WHERE session_id = ?1", [&id])?;
                tx.execute("DELETE FROM sessions WHERE id = ?1", [&id])?;
                Ok(())
            })
            .await
    }

    /// What the session learned as its turns started: the CLI's conversation id, the split.
    pub async fn update_session_start(
        &self,
        id: &str,
        agent_session_id: Option<&str>,
        split: Option<bool>,
        started_at: f64,
    ) -> Result<()> {
        let (id, agent_session_id) = (id.to_owned(), agent_session_id.map(str::to_owned));
        self.threads
            .write(Durability::Durable, move |conn| {
                conn.execute(
                    "UPDATE sessions SET agent_session_id = COALESCE(?2, agent_session_id), split = COALESCE(?3, split),
                        started_at = COALESCE(started_at, ?4) WHERE id = ?1",
                    params![id, agent_session_id, split, started_at],
                )?;
                Ok(())
            })
            .await
    }

    pub async fn turns(&self, session_id: &str) -> Result<Vec<TurnRow>> {
        let session_id = session_id.to_owned();
        self.threads
            .read(move |conn| {
                Ok(conn.query_rows("SELECT * FROM turns WHERE session_id = ?1 ORDER BY n", [&session_id], turn_row)?)
            })
            .await
    }

    pub async fn turn(&self, id: &str) -> Result<Option<TurnRow>> {
        let id = id.to_owned();
        self.threads
            .read(move |conn| Ok(conn.query_row("SELECT * FROM turns WHERE id = ?1", [&id], turn_row).optional()?))
            .await
    }

    /// Each session's latest turn (the one with the highest `n`), for the fleet's picture at start.
    pub async fn latest_turns(&self) -> Result<Vec<TurnRow>> {
        self.threads
            .read(move |conn| {
                Ok(conn.query_rows(
                    "SELECT t.* FROM turns t JOIN (SELECT session_id, MAX(n) AS n FROM turns GROUP BY session_id) m
                 ON t.session_id = m.session_id AND t.n = m.n",
                    [],
                    turn_row,
                )?)
            })
            .await
    }

    /// Every turn not yet terminal, oldest first (the queue's order).
    pub async fn live_turns(&self) -> Result<Vec<TurnRow>> {
        self.threads
            .read(move |conn| {
                Ok(conn.query_rows(
                    &format!("SELECT * FROM turns WHERE state IN {LIVE_STATES} ORDER BY created_at, id"),
                    [],
                    turn_row,
                )?)
            })
            .await
    }

    /// Moves a live turn to `to` and records `event` (hangar's `run.state`) in the same write,
    /// so that no reader sees the state without its event. The seq of the event, or `None` if the
    /// turn was not live (a terminal state is final).
    #[allow(clippy::too_many_arguments)]
    pub async fn move_turn(
        &self,
        session_id: &str,
        turn_id: &str,
        to: TurnState,
        reason: Option<&str>,
        detail: Option<&str>,
        at: f64,
        event: NewEvent,
    ) -> Result<Option<i64>> {
        self.move_turn_from(session_id, turn_id, None, to, reason, detail, at, event).await
    }

    /// `move_turn`, only from the state `from` when one is given: the turn's state is compared
    /// and set in one write, so a concurrent move is never undone.
    #[allow(clippy::too_many_arguments)]
    pub async fn move_turn_from(
        &self,
        session_id: &str,
        turn_id: &str,
        from: Option<TurnState>,
        to: TurnState,
        reason: Option<&str>,
        detail: Option<&str>,
        at: f64,
        event: NewEvent,
    ) -> Result<Option<i64>> {
        let finished = to.is_terminal().then_some(at);
        let started = matches!(to, TurnState::Running).then_some(at);
        let (session_id, turn_id) = (session_id.to_owned(), turn_id.to_owned());
        let (reason, detail) = (reason.map(str::to_owned), detail.map(str::to_owned));
        let from = from.map(TurnState::as_str);
        self.threads
            .write(Durability::Durable, move |conn| {
                let n = conn.execute(
                    &format!(
                        "UPDATE turns SET state = ?2, reason = ?3, detail = ?4, finished_at = COALESCE(?5, finished_at),
                            started_at = COALESCE(started_at, ?6)
                         WHERE id = ?1 AND state IN {LIVE_STATES} AND (?7 IS NULL OR state = ?7)"
                    ),
                    params![turn_id, to.as_str(), reason, detail, finished, started, from],
                )?;
                if n == 0 {
                    return Ok(None);
                }
                let (seq, _) = record(conn, &session_id, &turn_id, std::slice::from_ref(&event), at, None, None)?;
                Ok(Some(seq))
            })
            .await
    }

    pub async fn set_turn_started(&self, id: &str, pid: Option<i64>) -> Result<()> {
        let id = id.to_owned();
        self.threads
            .write(Durability::Durable, move |conn| {
                conn.execute("UPDATE turns SET pid = ?2 WHERE id = ?1", params![id, pid])?;
                Ok(())
            })
            .await
    }

    /// Records where the turn started, as the relay read it in the sandbox before the harness ran
    /// (`sessions::diff::Base`, in its stored form); kept once recorded.
    pub async fn set_turn_base(&self, id: &str, base: &str) -> Result<()> {
        let (id, base) = (id.to_owned(), base.to_owned());
        self.threads
            .write(Durability::Durable, move |conn| {
                conn.execute("UPDATE turns SET base = COALESCE(base, ?2) WHERE id = ?1", params![id, base])?;
                Ok(())
            })
            .await
    }

    /// Where the turn started (`set_turn_base`); `None` when it was not recorded.
    pub async fn turn_base(&self, id: &str) -> Result<Option<String>> {
        let id = id.to_owned();
        self.threads
            .read(move |conn| {
                let base: Option<Option<String>> =
                    conn.query_row("SELECT base FROM turns WHERE id = ?1", [&id], |r| r.get(0)).optional()?;
                Ok(base.flatten())
            })
            .await
    }

    pub async fn set_turn_exit(&self, id: &str, exit_code: Option<i64>, signal: Option<&str>) -> Result<()> {
        let id = id.to_owned();
        let signal = signal.map(str::to_owned);
        self.threads
            .write(Durability::Durable, move |conn| {
                conn.execute(
                    "UPDATE turns SET exit_code = ?2, signal = ?3 WHERE id = ?1",
                    params![id, exit_code, signal],
                )?;
                Ok(())
            })
            .await
    }

    pub async fn set_turn_polled(&self, id: &str, polled: bool) -> Result<()> {
        let id = id.to_owned();
        self.threads
            .write(Durability::Replayable, move |conn| {
                conn.execute("UPDATE turns SET polled = ?2 WHERE id = ?1", params![id, polled])?;
                Ok(())
            })
            .await
    }

    /// Marks the cancel asked for (the first time only); the turn as it is then.
    pub async fn request_cancel(&self, id: &str, at: f64) -> Result<()> {
        let id = id.to_owned();
        self.threads
            .write(Durability::Durable, move |conn| {
                conn.execute(
                    "UPDATE turns SET cancel_requested_at = COALESCE(cancel_requested_at, ?2) WHERE id = ?1",
                    params![id, at],
                )?;
                Ok(())
            })
            .await
    }

    // Events.

    /// Records events for a turn with its new read position (`(log_base, log_offset, parser)`) and the
    /// session's summary, in one transaction; each gets the next seq. Events whose (turn, offset, part) was recorded
    /// already are skipped. Returns the session's last seq and, for each event recorded, its
    /// index in `events` and its seq.
    pub async fn record_events(
        &self,
        session_id: &str,
        turn_id: &str,
        events: Vec<NewEvent>,
        ts: f64,
        log: Option<(i64, i64, String)>,
        summary: Option<&serde_json::Value>,
    ) -> Result<(i64, Vec<(usize, i64)>)> {
        let (session_id, turn_id, summary) =
            (session_id.to_owned(), turn_id.to_owned(), summary.map(|s| s.to_string()));
        // Read from the turn's log with the offset they were read up to: read again after a power
        // loss. hangar's own events (no offset) are nowhere else.
        let durability = if log.is_some() && events.iter().all(|e| e.src_offset.is_some()) {
            Durability::Replayable
        } else {
            Durability::Durable
        };
        self.threads
            .write(durability, move |tx| Ok(record(tx, &session_id, &turn_id, &events, ts, log, summary.as_deref())?))
            .await
    }

    /// What a turn's log has recorded so far: the events at their place in the log, and the
    /// events kept current (`part` and data).
    pub async fn turn_event_tally(&self, turn_id: &str) -> Result<(u64, Vec<(i64, serde_json::Value)>)> {
        let turn_id = turn_id.to_owned();
        self.threads
            .read(move |conn| {
                let placed: i64 = conn.query_row(
                    "SELECT COUNT(*) FROM session_events WHERE turn_id = ?1 AND src_offset >= 0",
                    [&turn_id],
                    |r| r.get(0),
                )?;
                let mut stmt =
                    conn.prepare("SELECT part, data FROM session_events WHERE turn_id = ?1 AND src_offset = ?2")?;
                let current = stmt
                    .query_map(params![turn_id, CURRENT_OFFSET], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?
                    .map(|r| r.map(|(part, data)| (part, serde_json::from_str(&data).unwrap_or_default())))
                    .collect::<rusqlite::Result<_>>()?;
                Ok((placed.max(0) as u64, current))
            })
            .await
    }

    /// Events after `since`, at most `limit`, oldest first.
    pub async fn events_after(&self, session_id: &str, since: i64, limit: usize) -> Result<Vec<EventRow>> {
        let session_id = session_id.to_owned();
        self.threads
            .read(move |conn| {
                let mut stmt = conn
                    .prepare("SELECT * FROM session_events WHERE session_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3")?;
                let rows = stmt
                    .query_map(params![session_id, since, limit as i64], event_row)?
                    .collect::<rusqlite::Result<_>>()?;
                Ok(rows)
            })
            .await
    }

    /// Events after `since`, at most `limit`, oldest first, and the state of the session's latest
    /// turn, read together: a follower's page in one read, loading no other turn.
    pub async fn events_page(
        &self,
        session_id: &str,
        since: i64,
        limit: usize,
    ) -> Result<(Vec<EventRow>, Option<TurnState>)> {
        let session_id = session_id.to_owned();
        self.threads
            .read(move |conn| {
                // One snapshot for both: a state read after a later commit than the events would
                // say `waiting_input` on a page without the `run.state` event that moved it there.
                let tx = conn.unchecked_transaction()?;
                let mut stmt = tx.prepare_cached(
                    "SELECT * FROM session_events WHERE session_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                )?;
                let events = stmt
                    .query_map(params![session_id, since, limit as i64], event_row)?
                    .collect::<rusqlite::Result<_>>()?;
                let state = tx
                    .query_row(
                        "SELECT state FROM turns WHERE session_id = ?1 ORDER BY n DESC LIMIT 1",
                        [&session_id],
                        |r| r.get::<_, String>(0),
                    )
                    .optional()?;
                let state = match state {
                    Some(text) => Some(
                        TurnState::parse(&text).ok_or_else(|| unknown("turn", session_id.clone(), "state", text))?,
                    ),
                    None => None,
                };
                Ok((events, state))
            })
            .await
    }

    /// The session's turns not yet terminal (one at most, as turns are made).
    pub async fn live_turns_of(&self, session_id: &str) -> Result<Vec<TurnRow>> {
        let session_id = session_id.to_owned();
        self.threads
            .read(move |conn| {
                Ok(conn.query_rows(
                    &format!("SELECT * FROM turns WHERE session_id = ?1 AND state IN {LIVE_STATES} ORDER BY n"),
                    [&session_id],
                    turn_row,
                )?)
            })
            .await
    }

    /// The session's first turn.
    pub async fn first_turn(&self, session_id: &str) -> Result<Option<TurnRow>> {
        let session_id = session_id.to_owned();
        self.threads
            .read(move |conn| {
                Ok(conn
                    .query_row("SELECT * FROM turns WHERE session_id = ?1 ORDER BY n LIMIT 1", [&session_id], turn_row)
                    .optional()?)
            })
            .await
    }

    /// The last `limit` events, oldest first.
    pub async fn latest_events(&self, session_id: &str, limit: usize) -> Result<Vec<EventRow>> {
        let session_id = session_id.to_owned();
        self.threads
            .read(move |conn| {
                let mut stmt =
                    conn.prepare("SELECT * FROM session_events WHERE session_id = ?1 ORDER BY seq DESC LIMIT ?2")?;
                let mut rows: Vec<EventRow> =
                    stmt.query_map(params![session_id, limit as i64], event_row)?.collect::<rusqlite::Result<_>>()?;
                rows.reverse();
                Ok(rows)
            })
            .await
    }

    /// Drops events older than `before` (epoch seconds) and all but each session's newest `keep`,
    /// in chunks; then, if any went, gives their space back (`compact`).
    pub async fn prune_events(&self, before: f64, keep: i64) -> Result<usize> {
        let mut n = self
            .delete_in_chunks(
                "DELETE FROM session_events WHERE rowid IN (SELECT rowid FROM session_events WHERE ts < ?1 LIMIT ?2)",
                before,
            )
            .await?;
        n += self
            .delete_in_chunks(
                "DELETE FROM session_events WHERE rowid IN (
                SELECT e.rowid FROM session_events e JOIN sessions s ON s.id = e.session_id
                WHERE e.seq <= s.event_seq - ?1 LIMIT ?2)",
                keep,
            )
            .await?;
        if n > 0 {
            self.compact().await?;
        }
        Ok(n)
    }

    // Plan usage.

    pub async fn put_usage(&self, u: &UsageRow) -> Result<()> {
        let u = u.clone();
        self.threads
            .write(Durability::Replayable, move |conn| {
                conn.execute(
                    "INSERT INTO usage (credential, window, used_pct, status, resets_at, seen_at, raw)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (credential, window) DO UPDATE SET used_pct = excluded.used_pct, status = excluded.status,
                    resets_at = excluded.resets_at, seen_at = excluded.seen_at, raw = excluded.raw",
                    params![u.credential, u.window, u.used_pct, u.status, u.resets_at, u.seen_at, u.raw.to_string()],
                )?;
                Ok(())
            })
            .await
    }

    pub async fn usage(&self) -> Result<Vec<UsageRow>> {
        self.threads
            .read(move |conn| {
                Ok(conn.query_rows("SELECT * FROM usage ORDER BY credential, window", [], |r| {
                    Ok(UsageRow {
                        credential: r.get("credential")?,
                        window: r.get("window")?,
                        used_pct: r.get("used_pct")?,
                        status: r.get("status")?,
                        resets_at: r.get("resets_at")?,
                        seen_at: r.get("seen_at")?,
                        raw: json_col(r, "raw")?,
                    })
                })?)
            })
            .await
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::{file_bytes, AUTO_VACUUM_INCREMENTAL};
    use rusqlite::Connection;

    pub(crate) async fn store(test: &str) -> (Store, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("hangar-sessions-store-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        (Store::open(&dir.join("relay.sqlite"), || {}).await.unwrap(), dir)
    }

    #[tokio::test]
    async fn secrets_from_before_owners_become_the_admins() {
        let dir = std::env::temp_dir().join(format!("hangar-secrets-migrate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("relay.sqlite");
        let old = rusqlite::Connection::open(&path).unwrap();
        old.execute_batch(
            "CREATE TABLE secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL, created_at INTEGER NOT NULL);
             INSERT INTO secrets VALUES ('OLD_KEY', 'old-value-123', 7);",
        )
        .unwrap();
        drop(old);
        for _ in 0..2 {
            let store = Store::open(&path, || {}).await.unwrap();
            let rows = store.secrets().await.unwrap();
            assert_eq!(rows.len(), 1);
            assert_eq!((rows[0].owner.as_str(), rows[0].name.as_str(), rows[0].created_at), ("", "OLD_KEY", 7));
            assert_eq!(store.secret_value("", "OLD_KEY").await.unwrap().as_deref(), Some("old-value-123"));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    pub(crate) fn session(id: &str) -> SessionRow {
        SessionRow {
            id: id.into(),
            name: id.into(),
            person: "p".into(),
            sandbox_id: "sbx".into(),
            sandbox_name: "box".into(),
            harness: "h".into(),
            cwd: "/".into(),
            secrets: vec![],
            secret_owners: vec![],
            credential: None,
            approvals: vec![],
            agent_session_id: None,
            split: None,
            summary: serde_json::json!({}),
            event_seq: 0,
            idempotency_key: None,
            prompt_sha256: "x".into(),
            created_at: 0.0,
            started_at: None,
        }
    }

    pub(crate) fn turn(id: &str, session: &str) -> TurnRow {
        TurnRow {
            id: id.into(),
            session_id: session.into(),
            n: 1,
            prompt: "p".into(),
            prompt_sha256: "x".into(),
            state: TurnState::Queued,
            reason: None,
            detail: None,
            credential: None,
            idempotency_key: None,
            ignore_limits: false,
            timeout_minutes: 1,
            created_at: 0.0,
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

    fn ev(off: Option<i64>, part: i64) -> NewEvent {
        NewEvent { kind: "message", data: serde_json::json!({}), src_offset: off, part }
    }

    /// The fleet's list: every session the person sees, newest first, each with its own turns
    /// in order and no one else's.
    #[tokio::test]
    async fn sessions_come_with_their_turns_in_one_read() {
        let (s, dir) = store("with-turns").await;
        let mine = SessionRow { created_at: 1.0, ..session("s1") };
        let theirs = SessionRow { person: "q".into(), created_at: 2.0, ..session("s2") };
        s.create_session(&mine, &TurnRow { state: TurnState::Succeeded, ..turn("t1", "s1") }).await.unwrap();
        s.create_session(&theirs, &turn("u1", "s2")).await.unwrap();
        assert!(matches!(s.create_turn(&turn("t2", "s1")).await.unwrap(), Created::New(_)));
        let ids = |v: Vec<(SessionRow, Vec<TurnRow>)>| -> Vec<(String, Vec<String>)> {
            v.into_iter().map(|(s, t)| (s.id, t.into_iter().map(|t| t.id).collect())).collect()
        };
        let all = ids(s.sessions_with_turns(None).await.unwrap());
        assert_eq!(all, vec![("s2".into(), vec!["u1".into()]), ("s1".into(), vec!["t1".into(), "t2".into()])]);
        let p = ids(s.sessions_with_turns(Some("p")).await.unwrap());
        assert_eq!(p, vec![("s1".into(), vec!["t1".into(), "t2".into()])]);
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Reading a byte range again (a restart before the position was saved) records nothing
    /// twice, and the position is saved with the events.
    #[tokio::test]
    async fn events_are_unique_by_their_place_in_the_log_and_a_terminal_state_is_final() {
        let (s, dir) = store("unique").await;
        assert!(matches!(s.create_session(&session("s1"), &turn("t1", "s1")).await.unwrap(), Created::New(_)));
        let (seq, rec) = s
            .record_events(
                "s1",
                "t1",
                vec![ev(Some(0), 0), ev(Some(0), 1), ev(Some(10), 0)],
                1.0,
                Some((0, 20, "{}".into())),
                None,
            )
            .await
            .unwrap();
        assert_eq!((seq, rec.len()), (3, 3));
        let (seq, rec) = s
            .record_events(
                "s1",
                "t1",
                vec![ev(Some(10), 0), ev(Some(20), 0), ev(None, 0)],
                2.0,
                Some((0, 30, "{}".into())),
                None,
            )
            .await
            .unwrap();
        assert_eq!((seq, rec), (5, vec![(1, 4), (2, 5)]));
        assert_eq!(s.turn("t1").await.unwrap().unwrap().log_offset, 30);
        assert_eq!(s.events_after("s1", 0, 100).await.unwrap().len(), 5);

        let moved = |to: &'static str| NewEvent {
            kind: "run.state",
            data: serde_json::json!({ "to": to }),
            src_offset: None,
            part: 0,
        };
        assert_eq!(
            s.move_turn("s1", "t1", TurnState::Running, None, None, 3.0, moved("running")).await.unwrap(),
            Some(6)
        );
        let ended = s.move_turn("s1", "t1", TurnState::Succeeded, Some("ok"), None, 4.0, moved("succeeded"));
        assert_eq!(ended.await.unwrap(), Some(7));
        let late = s.move_turn("s1", "t1", TurnState::Crashed, Some("process_died"), None, 5.0, moved("crashed"));
        assert_eq!(late.await.unwrap(), None, "a terminal state is final, and no event says otherwise");
        assert_eq!(s.turn("t1").await.unwrap().unwrap().state, TurnState::Succeeded);
        let (events, state) = s.events_page("s1", 5, 10).await.unwrap();
        let kinds: Vec<_> = events.iter().map(|e| (e.seq, e.kind.as_str(), e.data["to"].clone())).collect();
        assert_eq!(
            kinds,
            vec![(6, "run.state", serde_json::json!("running")), (7, "run.state", serde_json::json!("succeeded"))]
        );
        assert_eq!(state, Some(TurnState::Succeeded));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn pruning_keeps_the_newest_and_the_recent() {
        let (s, dir) = store("prune").await;
        s.create_session(&session("s1"), &turn("t1", "s1")).await.unwrap();
        let many: Vec<NewEvent> = (0..10).map(|i| ev(Some(i), 0)).collect();
        s.record_events("s1", "t1", many[..5].to_vec(), 100.0, None, None).await.unwrap();
        s.record_events("s1", "t1", many[5..].to_vec(), 200.0, None, None).await.unwrap();
        // Older than 150: the first five go; then only the newest 3 are kept.
        assert_eq!(s.prune_events(150.0, 1000).await.unwrap(), 5);
        assert_eq!(s.prune_events(0.0, 3).await.unwrap(), 2);
        let left: Vec<i64> = s.events_after("s1", 0, 100).await.unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(left, vec![8, 9, 10]);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A flood of events, then a prune: the database file and its WAL shrink back. A database
    /// made before incremental vacuuming switches to it at open.
    #[tokio::test]
    async fn the_store_shrinks_back_after_a_prune() {
        let (s, dir) = store("shrink").await;
        let path = dir.join("relay.sqlite");
        let bytes = || file_bytes(&path) + file_bytes(&dir.join("relay.sqlite-wal"));
        drop(s);
        {
            // As a relay before this change left it: no auto_vacuum.
            let c = Connection::open(&path).unwrap();
            c.pragma_update(None, "journal_mode", "DELETE").unwrap();
            c.pragma_update(None, "auto_vacuum", 0).unwrap();
            c.execute_batch("VACUUM").unwrap();
            assert_eq!(c.pragma_query_value(None, "auto_vacuum", |r| r.get::<_, i64>(0)).unwrap(), 0);
        }
        let s = Store::open(&path, || {}).await.unwrap();
        let mode: i64 = s.threads.read(|c| Ok(c.pragma_query_value(None, "auto_vacuum", |r| r.get(0))?)).await.unwrap();
        assert_eq!(mode, AUTO_VACUUM_INCREMENTAL);
        s.create_session(&session("s1"), &turn("t1", "s1")).await.unwrap();
        let text = "x".repeat(1000);
        for batch in 0..40 {
            let many: Vec<NewEvent> = (0..500)
                .map(|i| NewEvent {
                    kind: "message",
                    data: serde_json::json!({ "text": text }),
                    src_offset: Some(batch * 500 + i),
                    part: 0,
                })
                .collect();
            s.record_events("s1", "t1", many, 1.0, None, None).await.unwrap();
        }
        let full = bytes();
        assert!(full > 20 << 20, "20,000 events of 1 KB: {full} bytes");
        assert_eq!(s.prune_events(0.0, 10).await.unwrap(), 19_990);
        let after = bytes();
        assert!(after < full / 10, "{full} bytes before the prune, {after} after");
        let _ = std::fs::remove_dir_all(dir);
    }
}
