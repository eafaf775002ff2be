//! Agent sessions, their turns and events, named secrets and plan usage.
//!
//! A turn's read position (`log_offset`) is written in the same transaction as the events read
//! up to it, and events are unique by (turn, offset of their line, index in the line): a relay
//! that restarts, even after `kill -9`, resumes where it was and records nothing twice.
use rusqlite::{params, OptionalExtension, Row, Transaction};
use serde::Serialize;

use super::{unknown, Result, Store};

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    created_at INTEGER NOT NULL
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

/// A turn's state: the run design record's nine. The last five are terminal and final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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

#[derive(Debug, Clone, Serialize)]
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
    pub credential: Option<String>,
    /// Which tool calls wait for a person's approval (Claude Code permission patterns); empty:
    /// none.
    pub approvals: Vec<String>,
    /// The agent CLI's own conversation id (assigned by hangar or reported by the CLI).
    pub agent_session_id: Option<String>,
    /// Whether the uid split holds: the harness runs as the sandbox's user, the supervisor's
    /// files as the daemon's. `None` until the first turn starts.
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

#[derive(Debug, Clone, Serialize)]
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
}

/// One recorded event, as stored and served.
#[derive(Debug, Clone, Serialize)]
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

/// An event to record: `src_offset` and `part` place it in its turn's log (`None` for hangar's
/// own events).
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
    tx: &Transaction<'_>,
    session_id: &str,
    seq: i64,
    turn_id: &str,
    e: &NewEvent,
    ts: f64,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO session_events (session_id, seq, turn_id, src_offset, part, ts, type, data)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![session_id, seq, turn_id, e.src_offset, e.part, ts, e.kind, e.data.to_string()],
    )?;
    Ok(())
}

const LIVE_STATES: &str = "('queued', 'starting', 'running', 'waiting_input')";

fn insert_turn(tx: &Transaction<'_>, t: &TurnRow) -> rusqlite::Result<()> {
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

    pub fn put_secret(&self, name: &str, value: &str) -> Result<()> {
        self.conn().execute(
            "INSERT INTO secrets (name, value, created_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (name) DO UPDATE SET value = excluded.value, created_at = excluded.created_at",
            params![name, value, super::now()],
        )?;
        Ok(())
    }

    /// Names and creation times, never values.
    pub fn secret_names(&self) -> Result<Vec<(String, i64)>> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT name, created_at FROM secrets ORDER BY name")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Every secret with its value: for the redaction step and for the harness's environment.
    pub fn secret_values(&self) -> Result<Vec<(String, String)>> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT name, value FROM secrets")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    pub fn delete_secret(&self, name: &str) -> Result<bool> {
        Ok(self.conn().execute("DELETE FROM secrets WHERE name = ?1", [name])? > 0)
    }

    // Sessions and turns.

    /// Creates a session with its first turn, unless its idempotency key or name says otherwise;
    /// decided and written in one transaction, before anything starts.
    pub fn create_session(&self, s: &SessionRow, first: &TurnRow) -> Result<Created<(SessionRow, TurnRow)>> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
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
                agent_session_id, split, summary, event_seq, idempotency_key, prompt_sha256, created_at, approvals)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 0, ?13, ?14, ?15, ?16)",
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
            ],
        )?;
        insert_turn(&tx, first)?;
        tx.commit()?;
        Ok(Created::New((s.clone(), first.clone())))
    }

    /// Adds a follow-up turn, unless its key was used (the same turn back, or a conflict) or a
    /// turn of the session is still live.
    pub fn create_turn(&self, t: &TurnRow) -> Result<Created<TurnRow>> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
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
        let n: i64 =
            tx.query_row("SELECT COALESCE(MAX(n), 0) + 1 FROM turns WHERE session_id = ?1", [&t.session_id], |r| {
                r.get(0)
            })?;
        let t = TurnRow { n, ..t.clone() };
        insert_turn(&tx, &t)?;
        tx.commit()?;
        Ok(Created::New(t))
    }

    /// The session `reference` (its id, or its name among `person`'s sessions; `None` for any
    /// person's, which only admins ask for).
    pub fn session(&self, reference: &str, person: Option<&str>) -> Result<Option<SessionRow>> {
        let conn = self.conn();
        let row = conn
            .query_row(
                "SELECT * FROM sessions WHERE (id = ?1 OR name = ?1) AND (?2 IS NULL OR person = ?2)
                 ORDER BY (id = ?1) DESC, created_at LIMIT 1",
                params![reference, person],
                session_row,
            )
            .optional()?;
        Ok(row)
    }

    pub fn session_by_id(&self, id: &str) -> Result<Option<SessionRow>> {
        Ok(self.conn().query_row("SELECT * FROM sessions WHERE id = ?1", [id], session_row).optional()?)
    }

    pub fn sessions(&self, person: Option<&str>) -> Result<Vec<SessionRow>> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare("SELECT * FROM sessions WHERE ?1 IS NULL OR person = ?1 ORDER BY created_at DESC")?;
        let rows = stmt.query_map(params![person], session_row)?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    pub fn sessions_in_sandbox(&self, sandbox_id: &str) -> Result<Vec<SessionRow>> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT * FROM sessions WHERE sandbox_id = ?1")?;
        let rows = stmt.query_map([sandbox_id], session_row)?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    pub fn delete_session(&self, id: &str) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute("DELETE FROM session_events WHERE session_id = ?1", [id])?;
        tx.execute("DELETE FROM turns WHERE session_id = ?1", [id])?;
        tx.execute("DELETE FROM sessions WHERE id = ?1", [id])?;
        tx.commit()?;
        Ok(())
    }

    /// What the session learned as its turns started: the CLI's conversation id, the split.
    pub fn update_session_start(
        &self,
        id: &str,
        agent_session_id: Option<&str>,
        split: Option<bool>,
        started_at: f64,
    ) -> Result<()> {
        self.conn().execute(
            "UPDATE sessions SET agent_session_id = COALESCE(?2, agent_session_id), split = COALESCE(?3, split),
                started_at = COALESCE(started_at, ?4) WHERE id = ?1",
            params![id, agent_session_id, split, started_at],
        )?;
        Ok(())
    }

    pub fn turns(&self, session_id: &str) -> Result<Vec<TurnRow>> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT * FROM turns WHERE session_id = ?1 ORDER BY n")?;
        let rows = stmt.query_map([session_id], turn_row)?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    pub fn turn(&self, id: &str) -> Result<Option<TurnRow>> {
        Ok(self.conn().query_row("SELECT * FROM turns WHERE id = ?1", [id], turn_row).optional()?)
    }

    /// Each session's latest turn (the one with the highest `n`), for the fleet's picture at start.
    pub fn latest_turns(&self) -> Result<Vec<TurnRow>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT t.* FROM turns t JOIN (SELECT session_id, MAX(n) AS n FROM turns GROUP BY session_id) m
             ON t.session_id = m.session_id AND t.n = m.n",
        )?;
        let rows = stmt.query_map([], turn_row)?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Every turn not yet terminal, oldest first (the queue's order).
    pub fn live_turns(&self) -> Result<Vec<TurnRow>> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare(&format!("SELECT * FROM turns WHERE state IN {LIVE_STATES} ORDER BY created_at, id"))?;
        let rows = stmt.query_map([], turn_row)?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Moves a turn from a live state to `to`; false when it was terminal already (a terminal
    /// state is final) or is gone.
    pub fn set_turn_state(
        &self,
        id: &str,
        to: TurnState,
        reason: Option<&str>,
        detail: Option<&str>,
        at: f64,
    ) -> Result<bool> {
        let finished = to.is_terminal().then_some(at);
        let started = matches!(to, TurnState::Running).then_some(at);
        let n = self.conn().execute(
            &format!(
                "UPDATE turns SET state = ?2, reason = ?3, detail = ?4, finished_at = COALESCE(?5, finished_at),
                    started_at = COALESCE(started_at, ?6) WHERE id = ?1 AND state IN {LIVE_STATES}"
            ),
            params![id, to.as_str(), reason, detail, finished, started],
        )?;
        Ok(n > 0)
    }

    pub fn set_turn_started(&self, id: &str, pid: Option<i64>) -> Result<()> {
        self.conn().execute("UPDATE turns SET pid = ?2 WHERE id = ?1", params![id, pid])?;
        Ok(())
    }

    pub fn set_turn_exit(&self, id: &str, exit_code: Option<i64>, signal: Option<&str>) -> Result<()> {
        self.conn()
            .execute("UPDATE turns SET exit_code = ?2, signal = ?3 WHERE id = ?1", params![id, exit_code, signal])?;
        Ok(())
    }

    pub fn set_turn_polled(&self, id: &str, polled: bool) -> Result<()> {
        self.conn().execute("UPDATE turns SET polled = ?2 WHERE id = ?1", params![id, polled])?;
        Ok(())
    }

    /// Marks the cancel asked for (the first time only); the turn as it is then.
    pub fn request_cancel(&self, id: &str, at: f64) -> Result<()> {
        self.conn().execute(
            "UPDATE turns SET cancel_requested_at = COALESCE(cancel_requested_at, ?2) WHERE id = ?1",
            params![id, at],
        )?;
        Ok(())
    }

    // Events.

    /// Records events for a turn with its new read position (`(log_base, log_offset)`) and the
    /// session's summary, in one transaction; each gets the next seq. Events whose (turn, offset, part) was recorded
    /// already are skipped. Returns the session's last seq.
    pub fn record_events(
        &self,
        session_id: &str,
        turn_id: &str,
        events: &[NewEvent],
        ts: f64,
        log: Option<(i64, i64)>,
        summary: Option<&serde_json::Value>,
    ) -> Result<(i64, Vec<EventRow>)> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let mut seq: i64 = tx.query_row("SELECT event_seq FROM sessions WHERE id = ?1", [session_id], |r| r.get(0))?;
        let mut recorded = Vec::with_capacity(events.len());
        for e in events {
            if let Some(off) = e.src_offset {
                let seen: bool = tx.query_row(
                    "SELECT EXISTS (SELECT 1 FROM session_events WHERE turn_id = ?1 AND src_offset = ?2 AND part = ?3)",
                    params![turn_id, off, e.part],
                    |r| r.get(0),
                )?;
                if seen {
                    continue;
                }
            }
            seq += 1;
            insert_event(&tx, session_id, seq, turn_id, e, ts)?;
            recorded.push(EventRow {
                seq,
                ts,
                turn: turn_id.to_string(),
                kind: e.kind.to_string(),
                data: e.data.clone(),
                src_offset: e.src_offset,
            });
        }
        tx.execute("UPDATE sessions SET event_seq = ?2 WHERE id = ?1", params![session_id, seq])?;
        if let Some(summary) = summary {
            tx.execute("UPDATE sessions SET summary = ?2 WHERE id = ?1", params![session_id, summary.to_string()])?;
        }
        if let Some((base, offset)) = log {
            tx.execute(
                "UPDATE turns SET log_base = ?2, log_offset = ?3 WHERE id = ?1",
                params![turn_id, base, offset],
            )?;
        }
        tx.commit()?;
        Ok((seq, recorded))
    }

    /// Events after `since`, at most `limit`, oldest first.
    pub fn events_after(&self, session_id: &str, since: i64, limit: usize) -> Result<Vec<EventRow>> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare("SELECT * FROM session_events WHERE session_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3")?;
        let rows =
            stmt.query_map(params![session_id, since, limit as i64], event_row)?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// The last `limit` events, oldest first.
    pub fn latest_events(&self, session_id: &str, limit: usize) -> Result<Vec<EventRow>> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT * FROM session_events WHERE session_id = ?1 ORDER BY seq DESC LIMIT ?2")?;
        let mut rows: Vec<EventRow> =
            stmt.query_map(params![session_id, limit as i64], event_row)?.collect::<rusqlite::Result<_>>()?;
        rows.reverse();
        Ok(rows)
    }

    /// Drops events older than `before` (epoch seconds) and all but each session's newest `keep`.
    pub fn prune_events(&self, before: f64, keep: i64) -> Result<usize> {
        let conn = self.conn();
        let mut n = conn.execute("DELETE FROM session_events WHERE ts < ?1", [before])?;
        n += conn.execute(
            "DELETE FROM session_events WHERE rowid IN (
                SELECT e.rowid FROM session_events e JOIN sessions s ON s.id = e.session_id
                WHERE e.seq <= s.event_seq - ?1)",
            [keep],
        )?;
        Ok(n)
    }

    // Plan usage.

    pub fn put_usage(&self, u: &UsageRow) -> Result<()> {
        self.conn().execute(
            "INSERT INTO usage (credential, window, used_pct, status, resets_at, seen_at, raw)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (credential, window) DO UPDATE SET used_pct = excluded.used_pct, status = excluded.status,
                resets_at = excluded.resets_at, seen_at = excluded.seen_at, raw = excluded.raw",
            params![u.credential, u.window, u.used_pct, u.status, u.resets_at, u.seen_at, u.raw.to_string()],
        )?;
        Ok(())
    }

    pub fn usage(&self) -> Result<Vec<UsageRow>> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT * FROM usage ORDER BY credential, window")?;
        let rows = stmt
            .query_map([], |r| {
                Ok(UsageRow {
                    credential: r.get("credential")?,
                    window: r.get("window")?,
                    used_pct: r.get("used_pct")?,
                    status: r.get("status")?,
                    resets_at: r.get("resets_at")?,
                    seen_at: r.get("seen_at")?,
                    raw: json_col(r, "raw")?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::store) fn store(test: &str) -> (Store, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("hangar-sessions-store-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        (Store::open(&dir.join("relay.sqlite")).unwrap(), dir)
    }

    pub(in crate::store) fn session(id: &str) -> SessionRow {
        SessionRow {
            id: id.into(),
            name: id.into(),
            person: "p".into(),
            sandbox_id: "sbx".into(),
            sandbox_name: "box".into(),
            harness: "h".into(),
            cwd: "/".into(),
            secrets: vec![],
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

    pub(in crate::store) fn turn(id: &str, session: &str) -> TurnRow {
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
            polled: false,
        }
    }

    fn ev(off: Option<i64>, part: i64) -> NewEvent {
        NewEvent { kind: "message", data: serde_json::json!({}), src_offset: off, part }
    }

    /// Reading a byte range again (a restart before the position was saved) records nothing
    /// twice, and the position is saved with the events.
    #[test]
    fn events_are_unique_by_their_place_in_the_log_and_a_terminal_state_is_final() {
        let (s, dir) = store("unique");
        assert!(matches!(s.create_session(&session("s1"), &turn("t1", "s1")).unwrap(), Created::New(_)));
        let (seq, rec) = s
            .record_events("s1", "t1", &[ev(Some(0), 0), ev(Some(0), 1), ev(Some(10), 0)], 1.0, Some((0, 20)), None)
            .unwrap();
        assert_eq!((seq, rec.len()), (3, 3));
        let (seq, rec) = s
            .record_events("s1", "t1", &[ev(Some(10), 0), ev(Some(20), 0), ev(None, 0)], 2.0, Some((0, 30)), None)
            .unwrap();
        assert_eq!((seq, rec.iter().map(|e| e.seq).collect::<Vec<_>>()), (5, vec![4, 5]));
        assert_eq!(s.turn("t1").unwrap().unwrap().log_offset, 30);
        assert_eq!(s.events_after("s1", 0, 100).unwrap().len(), 5);

        assert!(s.set_turn_state("t1", TurnState::Running, None, None, 3.0).unwrap());
        assert!(s.set_turn_state("t1", TurnState::Succeeded, Some("ok"), None, 4.0).unwrap());
        assert!(!s.set_turn_state("t1", TurnState::Crashed, Some("process_died"), None, 5.0).unwrap(), "final");
        assert_eq!(s.turn("t1").unwrap().unwrap().state, TurnState::Succeeded);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn pruning_keeps_the_newest_and_the_recent() {
        let (s, dir) = store("prune");
        s.create_session(&session("s1"), &turn("t1", "s1")).unwrap();
        let many: Vec<NewEvent> = (0..10).map(|i| ev(Some(i), 0)).collect();
        s.record_events("s1", "t1", &many[..5], 100.0, None, None).unwrap();
        s.record_events("s1", "t1", &many[5..], 200.0, None, None).unwrap();
        // Older than 150: the first five go; then only the newest 3 are kept.
        assert_eq!(s.prune_events(150.0, 1000).unwrap(), 5);
        assert_eq!(s.prune_events(0.0, 3).unwrap(), 2);
        let left: Vec<i64> = s.events_after("s1", 0, 100).unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(left, vec![8, 9, 10]);
        let _ = std::fs::remove_dir_all(dir);
    }
}
