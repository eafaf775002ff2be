//! Jobs: one agent session run to its end, then verified, with what hangar measured.
//!
//! A job's idempotency key is unique per owner (its `jobs` token, or its person for any other
//! scope), decided in the transaction that creates it.
use rusqlite::{params, OptionalExtension, Row};
use serde::Serialize;

use super::{unknown, Durability, NewEvent, Result, Scope, Store};

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
    base_read INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    cancel_requested_at REAL,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    secrets TEXT NOT NULL DEFAULT '[]',
    sandbox_login INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_idem ON jobs(owner, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
";

/// A job's state. The last three are terminal and final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
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

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
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
    /// Whether `base` was read (and recorded, null or not): a restarted driver reuses it rather
    /// than read a head that may already hold the agent's commits.
    #[serde(skip)]
    pub base_read: bool,
    pub result: Option<serde_json::Value>,
    pub cancel_requested_at: Option<f64>,
    pub created_at: f64,
    pub started_at: Option<f64>,
    pub finished_at: Option<f64>,
    /// Names of the relay secrets its session passes (checked when the job was made, chosen
    /// again when its session starts).
    pub secrets: Vec<String>,
    /// Its CLI is logged in inside the sandbox: no credential is passed.
    pub sandbox_login: bool,
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
        base_read: r.get("base_read")?,
        result: json("result")?,
        cancel_requested_at: r.get("cancel_requested_at")?,
        created_at: r.get("created_at")?,
        started_at: r.get("started_at")?,
        finished_at: r.get("finished_at")?,
        secrets: json("secrets")?.and_then(|v| serde_json::from_value(v).ok()).unwrap_or_default(),
        sandbox_login: r.get("sandbox_login")?,
        id,
    })
}

impl Store {
    /// Creates a job unless its owner used its idempotency key already.
    pub async fn create_job(&self, j: &JobRow) -> Result<NewJob> {
        let j = j.clone();
        self.threads.write(Durability::Durable, move |conn| {
            let tx = conn;
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
                    harness, prompt, prompt_sha256, cwd, verify, timeout_minutes, idempotency_key, state, created_at,
                    secrets, sandbox_login)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
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
                    j.created_at,
                    serde_json::to_string(&j.secrets).unwrap_or_else(|_| "[]".into()),
                    j.sandbox_login
                ],
            )?;
            Ok(NewJob::New(j.clone()))
        })
        .await
    }

    /// The job `id` if `of` sees it.
    pub async fn job(&self, id: &str, of: JobsOf<'_>) -> Result<Option<JobRow>> {
        let id = id.to_owned();
        let (person, token) = (of.person().map(str::to_owned), of.token().map(str::to_owned));
        self.threads.read(move |conn| {
            Ok(conn.query_row(
                    "SELECT * FROM jobs WHERE id = ?1 AND (?2 IS NULL OR person = ?2) AND (?3 IS NULL OR token_id = ?3)",
                    params![id, person, token],
                    job_row,
                )
                .optional()?)
        })
        .await
    }

    /// The jobs a reference's pattern matches (`refs`; jobs have no name), among `of`.
    pub async fn jobs_matching(&self, p: crate::refs::Pattern, of: JobsOf<'_>) -> Result<Vec<JobRow>> {
        let (person, token) = (of.person().map(str::to_owned), of.token().map(str::to_owned));
        self.threads
            .read(move |conn| {
                let sql = format!(
                    "SELECT * FROM jobs WHERE {} AND (?4 IS NULL OR person = ?4) AND (?5 IS NULL OR token_id = ?5)
                     ORDER BY created_at DESC, id",
                    super::matching("id", "NULL")
                );
                Ok(conn.query_rows(&sql, params![p.id_prefix, p.id_suffix, p.name_prefix, person, token], job_row)?)
            })
            .await
    }

    pub async fn jobs(&self, of: JobsOf<'_>) -> Result<Vec<JobRow>> {
        let (person, token) = (of.person().map(str::to_owned), of.token().map(str::to_owned));
        self.threads
            .read(move |conn| {
                Ok(conn.query_rows(
                    "SELECT * FROM jobs WHERE (?1 IS NULL OR person = ?1) AND (?2 IS NULL OR token_id = ?2)
                 ORDER BY created_at DESC, id",
                    params![person, token],
                    job_row,
                )?)
            })
            .await
    }

    /// The job whose session this is, if any.
    pub async fn job_of_session(&self, session_id: &str) -> Result<Option<JobRow>> {
        let session_id = session_id.to_owned();
        self.threads
            .read(move |conn| {
                Ok(conn.query_row("SELECT * FROM jobs WHERE session_id = ?1", [&session_id], job_row).optional()?)
            })
            .await
    }

    pub async fn live_jobs(&self) -> Result<Vec<JobRow>> {
        self.threads
            .read(move |conn| {
                Ok(conn.query_rows(
                    &format!("SELECT * FROM jobs WHERE state IN {LIVE} ORDER BY created_at"),
                    [],
                    job_row,
                )?)
            })
            .await
    }

    /// Moves a live job to `to` and records `event` (hangar's `job.state`) in its session in the
    /// same transaction, so a crash leaves both or neither; false if the job was terminal already
    /// (a terminal state is final). The event's seq is returned in `Ok(Some)` where one was
    /// recorded.
    #[allow(clippy::too_many_arguments)]
    pub async fn set_job_state(
        &self,
        id: &str,
        to: JobState,
        reason: Option<&str>,
        detail: Option<&str>,
        at: f64,
        event: Option<JobEvent>,
    ) -> Result<Option<Option<i64>>> {
        let (id, reason, detail) = (id.to_owned(), reason.map(str::to_owned), detail.map(str::to_owned));
        self.threads
            .write(Durability::Durable, move |tx| {
                let n = tx.execute(
                    &format!(
                        "UPDATE jobs SET state = ?2, reason = ?3, detail = ?4,
                    started_at = CASE WHEN ?2 = 'running' THEN COALESCE(started_at, ?5) ELSE started_at END,
                    finished_at = CASE WHEN ?2 IN ('succeeded', 'failed', 'cancelled') THEN ?5 ELSE finished_at END
                 WHERE id = ?1 AND state IN {LIVE}"
                    ),
                    params![id, to.as_str(), reason, detail, at],
                )?;
                if n == 0 {
                    return Ok(None);
                }
                let seq = event.map(|e| insert_event(tx, &e, at)).transpose()?;
                Ok(Some(seq))
            })
            .await
    }

    /// The sandbox a job runs in, once known (created for it, or named).
    pub async fn set_job_sandbox(&self, id: &str, sandbox_id: &str, sandbox_name: &str, created: bool) -> Result<()> {
        let id = id.to_owned();
        let sandbox_id = sandbox_id.to_owned();
        let sandbox_name = sandbox_name.to_owned();
        self.threads
            .write(Durability::Durable, move |conn| {
                conn.execute(
                    "UPDATE jobs SET sandbox_id = ?2, sandbox_name = ?3, created_sandbox = ?4 WHERE id = ?1",
                    params![id, sandbox_id, sandbox_name, created],
                )?;
                Ok(())
            })
            .await
    }

    /// The working directory a job resolved to and the git head there before its session
    /// started (null outside a repository), recorded before the session starts.
    pub async fn set_job_base(&self, id: &str, cwd: &str, base: Option<&str>) -> Result<()> {
        let id = id.to_owned();
        let cwd = cwd.to_owned();
        let base = base.map(str::to_owned);
        self.threads
            .write(Durability::Durable, move |conn| {
                conn.execute(
                    "UPDATE jobs SET cwd = ?2, base = ?3, base_read = 1 WHERE id = ?1",
                    params![id, cwd, base],
                )?;
                Ok(())
            })
            .await
    }

    /// The session a job started, with the working directory it runs in.
    pub async fn set_job_session(&self, id: &str, session_id: &str, cwd: &str) -> Result<()> {
        let id = id.to_owned();
        let session_id = session_id.to_owned();
        let cwd = cwd.to_owned();
        self.threads
            .write(Durability::Durable, move |conn| {
                conn.execute("UPDATE jobs SET session_id = ?2, cwd = ?3 WHERE id = ?1", params![id, session_id, cwd])?;
                Ok(())
            })
            .await
    }

    /// Records a job's result, and `event` (hangar's `job.result`) in its session in the same
    /// transaction, unless a result is recorded already: false then (a driver restarted after
    /// recording it does not record it twice). The event's seq is returned in `Ok(Some)`.
    pub async fn set_job_result(
        &self,
        id: &str,
        result: &serde_json::Value,
        at: f64,
        event: Option<JobEvent>,
    ) -> Result<Option<Option<i64>>> {
        let (id, result) = (id.to_owned(), result.to_string());
        self.threads
            .write(Durability::Durable, move |tx| {
                let n =
                    tx.execute("UPDATE jobs SET result = ?2 WHERE id = ?1 AND result IS NULL", params![id, result])?;
                if n == 0 {
                    return Ok(None);
                }
                let seq = event.map(|e| insert_event(tx, &e, at)).transpose()?;
                Ok(Some(seq))
            })
            .await
    }

    pub async fn request_job_cancel(&self, id: &str, at: f64) -> Result<()> {
        let id = id.to_owned();
        self.threads
            .write(Durability::Durable, move |conn| {
                conn.execute(
                    "UPDATE jobs SET cancel_requested_at = COALESCE(cancel_requested_at, ?2) WHERE id = ?1",
                    params![id, at],
                )?;
                Ok(())
            })
            .await
    }
}

/// An event hangar records in a job's session along with a change to the job.
pub struct JobEvent {
    pub session_id: String,
    pub turn_id: String,
    pub event: NewEvent,
}

/// Appends the event after the session's last (as `Store::record_events` does); its seq.
fn insert_event(tx: &rusqlite::Connection, e: &JobEvent, ts: f64) -> Result<i64> {
    let seq: i64 =
        tx.query_row("SELECT event_seq FROM sessions WHERE id = ?1", [&e.session_id], |r| r.get::<_, i64>(0))? + 1;
    super::sessions::insert_event(tx, &e.session_id, seq, &e.turn_id, &e.event, ts)?;
    tx.execute("UPDATE sessions SET event_seq = ?2 WHERE id = ?1", params![e.session_id, seq])?;
    Ok(seq)
}

#[cfg(test)]
mod tests {
    use super::{
        super::sessions::tests::{session, store, turn},
        *,
    };

    fn job(id: &str) -> JobRow {
        JobRow {
            id: id.into(),
            person: "p".into(),
            token_id: "t".into(),
            scope: Scope::Admin,
            owner: "person:p".into(),
            sandbox_id: Some("sbx".into()),
            sandbox_name: Some("box".into()),
            sandbox_spec: None,
            created_sandbox: false,
            session_id: None,
            harness: "h".into(),
            prompt: "p".into(),
            prompt_sha256: "x".into(),
            cwd: None,
            verify: None,
            timeout_minutes: 1,
            idempotency_key: None,
            state: JobState::Queued,
            reason: None,
            detail: None,
            base: None,
            base_read: false,
            result: None,
            cancel_requested_at: None,
            created_at: 0.0,
            started_at: None,
            finished_at: None,
            secrets: vec!["KEY".into()],
            sandbox_login: true,
        }
    }

    fn event(kind: &'static str) -> Option<JobEvent> {
        let event = NewEvent { kind, data: serde_json::json!({}), src_offset: None, part: 0 };
        Some(JobEvent { session_id: "s1".into(), turn_id: "t1".into(), event })
    }

    /// What a restarted driver relies on: the base is kept once read (even when null), a result
    /// and its event are recorded once, and a state moves with its event.
    #[tokio::test]
    async fn a_base_is_kept_once_read_and_a_result_and_an_end_are_recorded_once_with_their_events() {
        let (s, dir) = store("jobs").await;
        s.create_session(&session("s1"), &turn("t1", "s1")).await.unwrap();
        assert!(matches!(s.create_job(&job("j1")).await.unwrap(), NewJob::New(_)));
        let made = s.job("j1", JobsOf::Everyone).await.unwrap().unwrap();
        assert!(!made.base_read);
        assert_eq!((made.secrets, made.sandbox_login), (vec!["KEY".to_string()], true), "kept for its session");
        s.set_job_base("j1", "/w", None).await.unwrap();
        let j = s.job("j1", JobsOf::Everyone).await.unwrap().unwrap();
        assert_eq!((j.base_read, j.base, j.cwd.as_deref()), (true, None, Some("/w")), "read, outside a repository");
        s.set_job_base("j1", "/w", Some(&"a".repeat(40))).await.unwrap();
        s.set_job_session("j1", "s1", "/w").await.unwrap();
        let j = s.job("j1", JobsOf::Everyone).await.unwrap().unwrap();
        assert_eq!((j.base, j.session_id.as_deref()), (Some("a".repeat(40)), Some("s1")), "the session keeps it");

        assert_eq!(
            s.set_job_state("j1", JobState::Running, None, None, 1.0, event("job.state")).await.unwrap(),
            Some(Some(1))
        );
        let result = serde_json::json!({"measured_by": "hangar"});
        assert_eq!(s.set_job_result("j1", &result, 2.0, event("job.result")).await.unwrap(), Some(Some(2)));
        let again = serde_json::json!({"measured_by": "again"});
        assert_eq!(s.set_job_result("j1", &again, 3.0, event("job.result")).await.unwrap(), None, "recorded once");
        assert_eq!(s.job("j1", JobsOf::Everyone).await.unwrap().unwrap().result, Some(result));
        assert_eq!(
            s.set_job_state("j1", JobState::Succeeded, Some("ok"), None, 4.0, event("job.state")).await.unwrap(),
            Some(Some(3))
        );
        assert_eq!(
            s.set_job_state("j1", JobState::Failed, None, None, 5.0, event("job.state")).await.unwrap(),
            None,
            "final"
        );
        let kinds: Vec<String> = s.events_after("s1", 0, 100).await.unwrap().into_iter().map(|e| e.kind).collect();
        assert_eq!(kinds, ["job.state", "job.result", "job.state"]);
        assert_eq!(s.session_by_id("s1").await.unwrap().unwrap().event_seq, 3);
        let _ = std::fs::remove_dir_all(dir);
    }
}
