//! Jobs: one agent session run to its end, then verified, with what hangar measured.
//!
//! A job's idempotency key is unique per owner (its `jobs` token, or its person for any other
//! scope), decided in the transaction that creates it.
use rusqlite::{params, OptionalExtension, Row};
use serde::Serialize;

use super::{unknown, Result, Scope, Store};

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    person TEXT NOT NULL,
    token_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    owner TEXT NOT NULL,
    sandbox_id TEXT,
    sandbox_name TEXT,
    sandbox_spec TEXT,
    created_sandbox INTEGER NOT NULL DEFAULT 0,
    session_id TEXT,
    harness TEXT NOT NULL,
    prompt TEXT NOT NULL,
    prompt_sha256 TEXT NOT NULL,
    cwd TEXT,
    verify TEXT,
    timeout_minutes INTEGER NOT NULL,
    idempotency_key TEXT,
    state TEXT NOT NULL,
    reason TEXT,
    detail TEXT,
    base TEXT,
    result TEXT,
    cancel_requested_at REAL,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL
);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_idem ON jobs(owner, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
";

/// A job's state. The last three are terminal and final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Running,
    Verifying,
    Succeeded,
    Failed,
    Cancelled,
}

const ALL: [JobState; 6] = [
    JobState::Queued,
    JobState::Running,
    JobState::Verifying,
    JobState::Succeeded,
    JobState::Failed,
    JobState::Cancelled,
];

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Verifying => "verifying",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<JobState> {
        ALL.into_iter().find(|j| j.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Failed | JobState::Cancelled)
    }
}

const LIVE: &str = "('queued', 'running', 'verifying')";

#[derive(Debug, Clone, Serialize)]
pub struct JobRow {
    pub id: String,
    pub person: String,
    #[serde(skip)]
    pub token_id: String,
    #[serde(skip)]
    pub scope: Scope,
    /// Whose idempotency keys it shares: its `jobs` token's, or its person's.
    #[serde(skip)]
    pub owner: String,
    #[serde(skip)]
    pub sandbox_id: Option<String>,
    #[serde(rename = "sandbox")]
    pub sandbox_name: Option<String>,
    /// `{provider, options}` when the job creates its sandbox.
    pub sandbox_spec: Option<serde_json::Value>,
    pub created_sandbox: bool,
    #[serde(rename = "session")]
    pub session_id: Option<String>,
    pub harness: String,
    /// Redacted.
    pub prompt: String,
    #[serde(skip)]
    pub prompt_sha256: String,
    pub cwd: Option<String>,
    pub verify: Option<String>,
    pub timeout_minutes: i64,
    #[serde(skip)]
    pub idempotency_key: Option<String>,
    pub state: JobState,
    pub reason: Option<String>,
    pub detail: Option<String>,
    /// The git head in `cwd` before the first turn started (null outside a git repository).
    pub base: Option<String>,
    pub result: Option<serde_json::Value>,
    pub cancel_requested_at: Option<f64>,
    pub created_at: f64,
    pub started_at: Option<f64>,
    pub finished_at: Option<f64>,
}

/// Whose jobs a caller sees.
#[derive(Debug, Clone, Copy)]
pub enum JobsOf<'a> {
    Everyone,
    Person(&'a str),
    Token(&'a str),
}

impl JobsOf<'_> {
    fn person(&self) -> Option<&str> {
        match self {
            JobsOf::Person(p) => Some(p),
            _ => None,
        }
    }

    fn token(&self) -> Option<&str> {
        match self {
            JobsOf::Token(t) => Some(t),
            _ => None,
        }
    }
}

/// What creating a job found.
pub enum NewJob {
    New(JobRow),
    /// The same key and prompt: the retry gets the first job back.
    Replayed(JobRow),
    /// The same key with another prompt.
    KeyConflict,
}

fn job_row(r: &Row<'_>) -> rusqlite::Result<JobRow> {
    let id: String = r.get("id")?;
    let state: String = r.get("state")?;
    let Some(state) = JobState::parse(&state) else { return Err(unknown("job", id, "state", state)) };
    let scope: String = r.get("scope")?;
    let Some(scope) = Scope::parse(&scope) else { return Err(unknown("job", id, "scope", scope)) };
    let json = |col: &str| -> rusqlite::Result<Option<serde_json::Value>> {
        let text: Option<String> = r.get(col)?;
        Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
    };
    Ok(JobRow {
        person: r.get("person")?,
        token_id: r.get("token_id")?,
        scope,
        owner: r.get("owner")?,
        sandbox_id: r.get("sandbox_id")?,
        sandbox_name: r.get("sandbox_name")?,
        sandbox_spec: json("sandbox_spec")?,
        created_sandbox: r.get("created_sandbox")?,
        session_id: r.get("session_id")?,
        harness: r.get("harness")?,
        prompt: r.get("prompt")?,
        prompt_sha256: r.get("prompt_sha256")?,
        cwd: r.get("cwd")?,
        verify: r.get("verify")?,
        timeout_minutes: r.get("timeout_minutes")?,
        idempotency_key: r.get("idempotency_key")?,
        state,
        reason: r.get("reason")?,
        detail: r.get("detail")?,
        base: r.get("base")?,
        result: json("result")?,
        cancel_requested_at: r.get("cancel_requested_at")?,
        created_at: r.get("created_at")?,
        started_at: r.get("started_at")?,
        finished_at: r.get("finished_at")?,
        id,
    })
}

impl Store {
    /// Creates a job unless its owner used its idempotency key already.
    pub fn create_job(&self, j: &JobRow) -> Result<NewJob> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        if let Some(key) = &j.idempotency_key {
            let found = tx
                .query_row(
                    "SELECT * FROM jobs WHERE owner = ?1 AND idempotency_key = ?2",
                    params![j.owner, key],
                    job_row,
                )
                .optional()?;
            if let Some(found) = found {
                return Ok(if found.prompt_sha256 == j.prompt_sha256 {
                    NewJob::Replayed(found)
                } else {
                    NewJob::KeyConflict
                });
            }
        }
        tx.execute(
            "INSERT INTO jobs (id, person, token_id, scope, owner, sandbox_id, sandbox_name, sandbox_spec, created_sandbox,
                harness, prompt, prompt_sha256, cwd, verify, timeout_minutes, idempotency_key, state, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
            params![
                j.id,
                j.person,
                j.token_id,
                j.scope.as_str(),
                j.owner,
                j.sandbox_id,
                j.sandbox_name,
                j.sandbox_spec.as_ref().map(|s| s.to_string()),
                j.created_sandbox,
                j.harness,
                j.prompt,
                j.prompt_sha256,
                j.cwd,
                j.verify,
                j.timeout_minutes,
                j.idempotency_key,
                j.state.as_str(),
                j.created_at
            ],
        )?;
        tx.commit()?;
        Ok(NewJob::New(j.clone()))
    }

    /// The job `id` if `of` sees it.
    pub fn job(&self, id: &str, of: JobsOf<'_>) -> Result<Option<JobRow>> {
        Ok(self
            .conn()
            .query_row(
                "SELECT * FROM jobs WHERE id = ?1 AND (?2 IS NULL OR person = ?2) AND (?3 IS NULL OR token_id = ?3)",
                params![id, of.person(), of.token()],
                job_row,
            )
            .optional()?)
    }

    pub fn jobs(&self, of: JobsOf<'_>) -> Result<Vec<JobRow>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT * FROM jobs WHERE (?1 IS NULL OR person = ?1) AND (?2 IS NULL OR token_id = ?2)
             ORDER BY created_at DESC, id",
        )?;
        let rows = stmt.query_map(params![of.person(), of.token()], job_row)?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    pub fn live_jobs(&self) -> Result<Vec<JobRow>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!("SELECT * FROM jobs WHERE state IN {LIVE} ORDER BY created_at"))?;
        let rows = stmt.query_map([], job_row)?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Moves a live job to `to`; false if it was terminal already (a terminal state is final).
    pub fn set_job_state(
        &self,
        id: &str,
        to: JobState,
        reason: Option<&str>,
        detail: Option<&str>,
        at: f64,
    ) -> Result<bool> {
        let n = self.conn().execute(
            &format!(
                "UPDATE jobs SET state = ?2, reason = ?3, detail = ?4,
                    started_at = CASE WHEN ?2 = 'running' THEN COALESCE(started_at, ?5) ELSE started_at END,
                    finished_at = CASE WHEN ?2 IN ('succeeded', 'failed', 'cancelled') THEN ?5 ELSE finished_at END
                 WHERE id = ?1 AND state IN {LIVE}"
            ),
            params![id, to.as_str(), reason, detail, at],
        )?;
        Ok(n > 0)
    }

    /// The sandbox a job runs in, once known (created for it, or named).
    pub fn set_job_sandbox(&self, id: &str, sandbox_id: &str, sandbox_name: &str, created: bool) -> Result<()> {
        self.conn().execute(
            "UPDATE jobs SET sandbox_id = ?2, sandbox_name = ?3, created_sandbox = ?4 WHERE id = ?1",
            params![id, sandbox_id, sandbox_name, created],
        )?;
        Ok(())
    }

    /// The session a job started, with the working directory it resolved to and the git head
    /// there before it.
    pub fn set_job_session(&self, id: &str, session_id: &str, cwd: &str, base: Option<&str>) -> Result<()> {
        self.conn().execute(
            "UPDATE jobs SET session_id = ?2, cwd = ?3, base = ?4 WHERE id = ?1",
            params![id, session_id, cwd, base],
        )?;
        Ok(())
    }

    pub fn set_job_result(&self, id: &str, result: &serde_json::Value) -> Result<()> {
        self.conn().execute("UPDATE jobs SET result = ?2 WHERE id = ?1", params![id, result.to_string()])?;
        Ok(())
    }

    pub fn request_job_cancel(&self, id: &str, at: f64) -> Result<()> {
        self.conn().execute(
            "UPDATE jobs SET cancel_requested_at = COALESCE(cancel_requested_at, ?2) WHERE id = ?1",
            params![id, at],
        )?;
        Ok(())
    }
}
