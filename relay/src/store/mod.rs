//! The relay's state in SQLite: tokens (hashed), sandboxes, and agent sessions with their turns,
//! events, secrets and plan usage (`sessions`), jobs (`jobs`) and the inbox (`inbox`).
//!
//! Invariant: the only module that speaks SQL. No secret is stored in the clear except each
//! sandbox's envd access token, which the relay must present to its daemon, and the named
//! secrets handed to agents, which it must pass on (the database file is created 0600 in a 0700
//! directory).
use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::events;

mod inbox;
mod jobs;
mod sessions;
mod threads;
pub use inbox::{ItemKind, ItemRow, ItemState};
pub use jobs::{JobEvent, JobRow, JobState, JobsOf, NewJob};
/// The store's test helpers, for other modules' tests.
#[cfg(test)]
pub(crate) use sessions::tests as testing;
pub use sessions::{Created, EventRow, NewEvent, SecretRow, SessionRow, TurnRow, TurnState, UsageRow, CURRENT_OFFSET};
pub use threads::Durability;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The writer's transaction did not commit (a full disk, a broken file): the write is not kept.
    #[error("the store could not commit: {0}")]
    Commit(String),
    /// The store's thread for this call could not run it.
    #[error("the store's thread failed: {0}")]
    Thread(String),
    /// The store is closing: nothing more is written.
    #[error("the store is closed")]
    Closed,
    /// A row holds a value this relay does not know (written by a newer relay, or by hand).
    #[error("{table} {id}: unknown {column} {value:?}")]
    Unknown { table: &'static str, id: String, column: &'static str, value: String },
}

pub type Result<T> = std::result::Result<T, StoreError>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Admin,
    User,
    Mcp,
    Jobs,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Admin => "admin",
            Scope::User => "user",
            Scope::Mcp => "mcp",
            Scope::Jobs => "jobs",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "admin" => Some(Scope::Admin),
            "user" => Some(Scope::User),
            "mcp" => Some(Scope::Mcp),
            "jobs" => Some(Scope::Jobs),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct TokenRow {
    pub id: String,
    pub name: String,
    pub scope: Scope,
    #[serde(skip)]
    pub hash: Vec<u8>,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    /// The person behind the token: what they start (sessions) is theirs under any of their
    /// tokens. Default: the token's name.
    pub person: String,
    pub person_name: String,
}

/// A sandbox's state as the relay keeps it (a destroyed sandbox has no row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    Running,
    Paused,
    /// What the sandbox was made of vanished outside hangar (its pod deleted or evicted, its
    /// node lost): nothing runs in it any more; only destroying it is left.
    Gone,
}

impl SandboxState {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Running => "running",
            SandboxState::Paused => "paused",
            SandboxState::Gone => "gone",
        }
    }

    pub fn parse(s: &str) -> Option<SandboxState> {
        match s {
            "running" => Some(SandboxState::Running),
            "paused" => Some(SandboxState::Paused),
            "gone" => Some(SandboxState::Gone),
            _ => None,
        }
    }
}

/// What keeps a sandbox's commands from the relay and from other sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// A local sandbox in its own PID and mount namespaces, as its own unprivileged user.
    Namespaces,
    /// A Docker container.
    Container,
    /// A virtual machine of its own (an E2B sandbox: a Firecracker microVM on E2B's hosts).
    Vm,
    /// Nothing: a local sandbox whose commands run as the relay's own user, on the host.
    None,
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Namespaces => "namespaces",
            Isolation::Container => "container",
            Isolation::Vm => "vm",
            Isolation::None => "none",
        }
    }

    pub fn parse(s: &str) -> Option<Isolation> {
        match s {
            "namespaces" => Some(Isolation::Namespaces),
            "container" => Some(Isolation::Container),
            "vm" => Some(Isolation::Vm),
            "none" => Some(Isolation::None),
            _ => None,
        }
    }
}

/// Which daemon a sandbox runs, told apart by whether hangar's `Daemon/Info` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DaemonKind {
    /// hangar-envd: E2B's services and hangar's extensions (rings with offsets, `Attach`,
    /// `Signal` to a tree, exited processes listed, `Follow`, watches with sequence numbers).
    Hangar,
    /// E2B's own envd (or hangar-envd `--e2b-only`): E2B's services alone. The relay follows
    /// background processes itself (`processes/followed.rs`) and says what it cannot do.
    E2b,
}

impl DaemonKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DaemonKind::Hangar => "hangar",
            DaemonKind::E2b => "e2b",
        }
    }

    pub fn parse(s: &str) -> Option<DaemonKind> {
        match s {
            "hangar" => Some(DaemonKind::Hangar),
            "e2b" => Some(DaemonKind::E2b),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SandboxRow {
    pub id: String,
    pub name: String,
    pub provider: String,
    pub options: serde_json::Value,
    pub state: SandboxState,
    pub workdir: Option<String>,
    #[serde(skip)]
    pub envd_url: Option<String>,
    #[serde(skip)]
    pub envd_token: Option<String>,
    #[serde(skip)]
    pub envd_pid: Option<i64>,
    /// The daemon's start time (field 22 of /proc/PID/stat, clock ticks after boot): with the
    /// pid, what tells the daemon from a later process that got its pid.
    #[serde(skip)]
    pub envd_pid_start: Option<i64>,
    /// How the sandbox is isolated (for a local sandbox: how its daemon was last started).
    pub isolation: Isolation,
    /// The unprivileged user a local sandbox's commands run as, when it is isolated.
    #[serde(skip)]
    pub uid: Option<u32>,
    /// Whether the sandbox's daemon answered when last asked.
    pub daemon: bool,
    /// Which daemon answered when last asked (`None` before one did).
    pub daemon_kind: Option<DaemonKind>,
    pub created_at: i64,
    /// The person who created it (a caller's person, or a job's). `None` for the default sandbox
    /// and for sandboxes made before owners were recorded: those are the admins'. Only its owner,
    /// the persons in `shared_with` and admins may work inside it (`Sandboxes::enter`).
    pub owner: Option<String>,
    /// The persons its owner (or an admin) shares it with, sorted; `"*"` (`EVERYONE`): every person.
    pub shared_with: Vec<String>,
    /// What the provider calls what backs the sandbox, when it chose the name (E2B's sandbox id).
    #[serde(skip)]
    pub provider_ref: Option<String>,
}

impl SandboxRow {
    /// A sandbox about to be created: running, nothing known of its daemon yet, and isolated by
    /// nothing until its provider says otherwise (the safe assumption).
    pub fn new(id: String, name: &str, provider: &str, options: serde_json::Value) -> SandboxRow {
        SandboxRow {
            id,
            name: name.to_string(),
            provider: provider.to_string(),
            options,
            state: SandboxState::Running,
            workdir: None,
            envd_url: None,
            envd_token: None,
            envd_pid: None,
            envd_pid_start: None,
            isolation: Isolation::None,
            uid: None,
            daemon: false,
            daemon_kind: None,
            created_at: now(),
            owner: None,
            shared_with: Vec::new(),
            provider_ref: None,
        }
    }
}

pub use crate::time::now_secs as now;

/// `PRAGMA auto_vacuum`'s value for INCREMENTAL.
const AUTO_VACUUM_INCREMENTAL: i64 = 2;
/// The most rows one chunk of a large delete removes.
const DELETE_CHUNK: i64 = 5000;
/// The most free pages one step of `compact` gives back (16 MiB of 4 KiB pages).
const VACUUM_CHUNK_PAGES: i64 = 4096;
/// The WAL's size after a checkpoint, at most (bytes).
const JOURNAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// A file's size, 0 if it is not there.
fn file_bytes(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

pub struct Store {
    threads: threads::Threads,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    scope TEXT NOT NULL,
    hash BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE INDEX IF NOT EXISTS tokens_hash ON tokens(hash);
CREATE TABLE IF NOT EXISTS sandboxes (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    provider TEXT NOT NULL,
    options TEXT NOT NULL,
    state TEXT NOT NULL,
    workdir TEXT,
    envd_url TEXT,
    envd_token TEXT,
    envd_pid INTEGER,
    daemon INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    envd_pid_start INTEGER,
    isolation TEXT,
    uid INTEGER,
    owner TEXT,
    provider_ref TEXT,
    daemon_kind TEXT,
    shared_with TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS detached (
    id TEXT PRIMARY KEY,
    sandbox_id TEXT NOT NULL,
    token_id TEXT NOT NULL,
    pid INTEGER NOT NULL,
    command TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    ended_at INTEGER
);
CREATE INDEX IF NOT EXISTS detached_owner ON detached(sandbox_id, token_id);
CREATE TABLE IF NOT EXISTS started_processes (
    sandbox_id TEXT NOT NULL,
    process_id TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    PRIMARY KEY (sandbox_id, process_id)
);
CREATE TABLE IF NOT EXISTS spared_execs (
    sandbox_id TEXT NOT NULL,
    tag TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (sandbox_id, tag)
);
";

impl Store {
    /// Opens (or creates) the database and migrates it, off the runtime's workers: a database made
    /// before may take a VACUUM here.
    /// `on_thread_start` runs first on each of the store's own threads (the relay's scheduling
    /// slice).
    pub async fn open(path: &Path, on_thread_start: impl Fn() + Clone + Send + 'static) -> Result<Store> {
        let owned = path.to_path_buf();
        let conn = match tokio::runtime::Handle::try_current() {
            Ok(rt) => rt
                .spawn_blocking(move || open_writer(&owned))
                .await
                .map_err(|e| StoreError::Thread(e.to_string()))??,
            Err(_) => open_writer(&owned)?,
        };
        Ok(Store { threads: threads::Threads::start(conn, path, on_thread_start)? })
    }

    /// Runs `sql` (a DELETE of at most `DELETE_CHUNK` rows) until it deletes nothing, each
    /// chunk its own write: a large delete never holds every other write, nor grows the WAL by
    /// more than a chunk.
    async fn delete_in_chunks(
        &self,
        sql: &'static str,
        param: impl rusqlite::ToSql + Copy + Send + 'static,
    ) -> Result<usize> {
        let mut total = 0;
        loop {
            let n = self
                .threads
                .write(Durability::Replayable, move |conn| Ok(conn.execute(sql, params![param, DELETE_CHUNK])?))
                .await?;
            total += n;
            if n == 0 {
                return Ok(total);
            }
        }
    }

    /// Gives the pages deletes freed back to the file system, a chunk at a time, and cuts the
    /// WAL back to nothing: the database file and its WAL shrink after a prune.
    pub(crate) async fn compact(&self) -> Result<()> {
        let before = self.sizes();
        loop {
            let done = self
                .threads
                .alone(|conn| {
                    let free: i64 = conn.pragma_query_value(None, "freelist_count", |r| r.get(0))?;
                    if free == 0 {
                        return Ok(true);
                    }
                    conn.execute_batch(&format!("PRAGMA incremental_vacuum({VACUUM_CHUNK_PAGES})"))?;
                    // Passive: moves what it can into the file so the WAL's pages are reused.
                    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))?;
                    Ok(false)
                })
                .await?;
            if done {
                break;
            }
        }
        self.threads.alone(|conn| Ok(conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?)).await?;
        let after = self.sizes();
        events::StoreCompacted { before: before.0 + before.1, after: after.0 + after.1 }.emit();
        Ok(())
    }

    /// The database file's bytes and its WAL's.
    fn sizes(&self) -> (u64, u64) {
        let p = self.threads.path();
        (file_bytes(p), file_bytes(Path::new(&format!("{}-wal", p.display()))))
    }

    pub async fn insert_token(&self, t: &TokenRow) -> Result<()> {
        let t = t.clone();
        self.threads
            .write(Durability::Durable, move |conn| {
                conn.execute(
                    "INSERT INTO tokens (id, name, scope, hash, created_at, revoked_at, person, person_name)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    params![
                        t.id,
                        t.name,
                        t.scope.as_str(),
                        t.hash,
                        t.created_at,
                        t.revoked_at,
                        t.person,
                        t.person_name
                    ],
                )?;
                Ok(())
            })
            .await
    }

    pub async fn token(&self, id: &str) -> Result<Option<TokenRow>> {
        let id = id.to_owned();
        self.threads
            .read(move |conn| Ok(conn.query_row("SELECT * FROM tokens WHERE id = ?1", [&id], token_row).optional()?))
            .await
    }

    pub async fn tokens_with_hash(&self, hash: &[u8]) -> Result<Vec<TokenRow>> {
        let hash = hash.to_vec();
        self.threads
            .read(move |conn| Ok(conn.query_rows("SELECT * FROM tokens WHERE hash = ?1", [&hash], token_row)?))
            .await
    }

    pub async fn tokens(&self) -> Result<Vec<TokenRow>> {
        self.threads
            .read(move |conn| Ok(conn.query_rows("SELECT * FROM tokens ORDER BY created_at, id", [], token_row)?))
            .await
    }

    /// Marks a token revoked; false if there is no such live token.
    pub async fn revoke_token(&self, id: &str) -> Result<bool> {
        let id = id.to_owned();
        self.threads
            .write(Durability::Durable, move |conn| {
                let n = conn.execute(
                    "UPDATE tokens SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
                    params![id, now()],
                )?;
                Ok(n > 0)
            })
            .await
    }

    pub async fn any_admin(&self) -> Result<bool> {
        self.threads
            .read(move |conn| {
                Ok(conn.query_row(
                    "SELECT EXISTS(SELECT 1 FROM tokens WHERE scope = 'admin' AND revoked_at IS NULL)",
                    [],
                    |r| r.get(0),
                )?)
            })
            .await
    }

    pub async fn insert_sandbox(&self, s: &SandboxRow) -> Result<()> {
        let s = s.clone();
        self.threads.write(Durability::Durable, move |conn| {
            conn.execute(
                "INSERT INTO sandboxes (id, name, provider, options, state, workdir, envd_url, envd_token, envd_pid, daemon, created_at,
                                        envd_pid_start, isolation, uid, owner, provider_ref, daemon_kind, shared_with)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
                params![
                    s.id,
                    s.name,
                    s.provider,
                    s.options.to_string(),
                    s.state.as_str(),
                    s.workdir,
                    s.envd_url,
                    s.envd_token,
                    s.envd_pid,
                    s.daemon,
                    s.created_at,
                    s.envd_pid_start,
                    s.isolation.as_str(),
                    s.uid,
                    s.owner,
                    s.provider_ref,
                    s.daemon_kind.map(DaemonKind::as_str),
                    json_list(&s.shared_with)
                ],
            )?;
            Ok(())
        })
        .await
    }

    /// Replaces whom a sandbox is shared with. Apart from `update_sandbox`, which writes what the
    /// relay learned of the sandbox from a row it may have read before this change.
    pub async fn set_sandbox_shared_with(&self, id: &str, shared_with: &[String]) -> Result<bool> {
        let id = id.to_owned();
        let shared_with = shared_with.to_vec();
        self.threads
            .write(Durability::Durable, move |conn| {
                let n = conn.execute(
                    "UPDATE sandboxes SET shared_with = ?2 WHERE id = ?1",
                    params![id, json_list(&shared_with)],
                )?;
                Ok(n > 0)
            })
            .await
    }

    pub async fn update_sandbox(&self, s: &SandboxRow) -> Result<()> {
        let s = s.clone();
        self.threads.write(Durability::Durable, move |conn| {
            conn.execute(
                "UPDATE sandboxes SET state = ?2, workdir = ?3, envd_url = ?4, envd_token = ?5, envd_pid = ?6, daemon = ?7,
                                      envd_pid_start = ?8, isolation = ?9, uid = ?10, provider_ref = ?11, daemon_kind = ?12
                                  WHERE id = ?1",
                params![
                    s.id,
                    s.state.as_str(),
                    s.workdir,
                    s.envd_url,
                    s.envd_token,
                    s.envd_pid,
                    s.daemon,
                    s.envd_pid_start,
                    s.isolation.as_str(),
                    s.uid,
                    s.provider_ref,
                    s.daemon_kind.map(DaemonKind::as_str)
                ],
            )?;
            Ok(())
        })
        .await
    }

    pub async fn delete_sandbox(&self, id: &str) -> Result<()> {
        let id = id.to_owned();
        self.threads
            .write(Durability::Durable, move |conn| {
                conn.execute("DELETE FROM sandboxes WHERE id = ?1", [&id])?;
                conn.execute("DELETE FROM started_processes WHERE sandbox_id = ?1", [&id])?;
                Ok(())
            })
            .await
    }

    /// A sandbox by id or name.
    pub async fn sandbox(&self, reference: &str) -> Result<Option<SandboxRow>> {
        let reference = reference.to_owned();
        self.threads
            .read(move |conn| {
                Ok(conn
                    .query_row("SELECT * FROM sandboxes WHERE id = ?1 OR name = ?1", [&reference], sandbox_row)
                    .optional()?)
            })
            .await
    }

    /// The sandboxes a reference's pattern matches (`refs`), every person's.
    pub async fn sandboxes_matching(&self, p: crate::refs::Pattern) -> Result<Vec<SandboxRow>> {
        self.threads
            .read(move |conn| {
                let sql = format!("SELECT * FROM sandboxes WHERE {} ORDER BY created_at, name", matching("id", "name"));
                Ok(conn.query_rows(&sql, params![p.id_prefix, p.id_suffix, p.name_prefix], sandbox_row)?)
            })
            .await
    }

    pub async fn sandboxes(&self) -> Result<Vec<SandboxRow>> {
        self.threads
            .read(move |conn| {
                Ok(conn.query_rows("SELECT * FROM sandboxes ORDER BY created_at, name", [], sandbox_row)?)
            })
            .await
    }
}

/// The condition that a row's `id` (or `name`) matches a `refs::Pattern` bound as ?1 (the id's
/// prefix), ?2 (its suffix) and ?3 (the name's prefix); a NULL part matches nothing. Compared
/// by `substr`, not `LIKE`, whose `_` is a wildcard.
pub(crate) fn matching(id: &str, name: &str) -> String {
    format!(
        "((?1 IS NOT NULL AND substr({id}, 1, length(?1)) = ?1) \
         OR (?2 IS NOT NULL AND substr({id}, -length(?2)) = ?2) \
         OR (?3 IS NOT NULL AND substr({name}, 1, length(?3)) = ?3))"
    )
}

/// A background process run without a daemon (detached, polled); the relay's row is its only
/// record of ownership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetachedRow {
    pub id: String,
    pub sandbox_id: String,
    pub token_id: String,
    pub pid: i64,
    pub command: String,
    pub started_at: i64,
    pub ended_at: Option<i64>,
}

impl Store {
    pub async fn insert_detached(&self, d: &DetachedRow) -> Result<()> {
        let d = d.clone();
        self.threads.write(Durability::Durable, move |conn| {
            conn.execute(
                "INSERT INTO detached (id, sandbox_id, token_id, pid, command, started_at, ended_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![d.id, d.sandbox_id, d.token_id, d.pid, d.command, d.started_at, d.ended_at],
            )?;
            Ok(())
        })
        .await
    }

    /// A token's detached processes in a sandbox, dropping those that ended before `forget_before`.
    pub async fn detached(&self, sandbox_id: &str, token_id: &str, forget_before: i64) -> Result<Vec<DetachedRow>> {
        let sandbox_id = sandbox_id.to_owned();
        let token_id = token_id.to_owned();
        self.threads
            .write(Durability::Durable, move |conn| {
                conn.execute(
                    "DELETE FROM detached WHERE sandbox_id = ?1 AND ended_at IS NOT NULL AND ended_at < ?2",
                    params![sandbox_id, forget_before],
                )?;
                Ok(conn.query_rows(
                    "SELECT id, sandbox_id, token_id, pid, command, started_at, ended_at FROM detached
                 WHERE sandbox_id = ?1 AND token_id = ?2 ORDER BY started_at, id",
                    params![sandbox_id, token_id],
                    |r| {
                        Ok(DetachedRow {
                            id: r.get(0)?,
                            sandbox_id: r.get(1)?,
                            token_id: r.get(2)?,
                            pid: r.get(3)?,
                            command: r.get(4)?,
                            started_at: r.get(5)?,
                            ended_at: r.get(6)?,
                        })
                    },
                )?)
            })
            .await
    }

    /// Every detached process not yet seen to end: `(sandbox id, token id)` pairs, once each.
    pub async fn detached_owners_running(&self) -> Result<Vec<(String, String)>> {
        self.threads
            .read(move |conn| {
                Ok(conn.query_rows(
                    "SELECT DISTINCT sandbox_id, token_id FROM detached WHERE ended_at IS NULL",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?)
            })
            .await
    }

    pub async fn end_detached(&self, id: &str, at: i64) -> Result<()> {
        let id = id.to_owned();
        self.threads
            .write(Durability::Durable, move |conn| {
                conn.execute("UPDATE detached SET ended_at = ?2 WHERE id = ?1 AND ended_at IS NULL", params![id, at])?;
                Ok(())
            })
            .await
    }
}

/// A column whose text this relay does not know, as the row's read error.
fn unknown(table: &'static str, id: String, column: &'static str, value: String) -> rusqlite::Error {
    let e = StoreError::Unknown { table, id, column, value };
    rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
}

fn token_row(r: &Row<'_>) -> rusqlite::Result<TokenRow> {
    let scope: String = r.get("scope")?;
    let id: String = r.get("id")?;
    // A scope this relay does not know is an error, never quietly `user`.
    let Some(scope) = Scope::parse(&scope) else { return Err(unknown("token", id, "scope", scope)) };
    let name: String = r.get("name")?;
    // Tokens made before persons were recorded are their own person, under their name.
    let person: Option<String> = r.get("person")?;
    let person_name: Option<String> = r.get("person_name")?;
    Ok(TokenRow {
        id,
        person: person.unwrap_or_else(|| name.clone()),
        person_name: person_name.unwrap_or_else(|| name.clone()),
        name,
        scope,
        hash: r.get("hash")?,
        created_at: r.get("created_at")?,
        revoked_at: r.get("revoked_at")?,
    })
}

fn sandbox_row(r: &Row<'_>) -> rusqlite::Result<SandboxRow> {
    let options: String = r.get("options")?;
    let id: String = r.get("id")?;
    let state: String = r.get("state")?;
    let Some(state) = SandboxState::parse(&state) else { return Err(unknown("sandbox", id, "state", state)) };
    let provider: String = r.get("provider")?;
    let isolation = match r.get::<_, Option<String>>("isolation")? {
        Some(text) => match Isolation::parse(&text) {
            Some(i) => i,
            None => return Err(unknown("sandbox", id, "isolation", text)),
        },
        // Written before relays recorded it: a container then, or a local sandbox that
        // isolated nothing.
        None if provider == "docker" => Isolation::Container,
        None => Isolation::None,
    };
    let daemon_kind = match r.get::<_, Option<String>>("daemon_kind")? {
        Some(text) => match DaemonKind::parse(&text) {
            Some(k) => Some(k),
            None => return Err(unknown("sandbox", id, "daemon_kind", text)),
        },
        None => None,
    };
    Ok(SandboxRow {
        id,
        name: r.get("name")?,
        provider,
        options: serde_json::from_str(&options).unwrap_or(serde_json::Value::Null),
        state,
        workdir: r.get("workdir")?,
        envd_url: r.get("envd_url")?,
        envd_token: r.get("envd_token")?,
        envd_pid: r.get("envd_pid")?,
        envd_pid_start: r.get("envd_pid_start")?,
        isolation,
        uid: r.get("uid")?,
        daemon: r.get("daemon")?,
        daemon_kind,
        created_at: r.get("created_at")?,
        owner: r.get("owner")?,
        // Unreadable: shared with nobody, the narrower reading.
        shared_with: serde_json::from_str(&r.get::<_, String>("shared_with")?).unwrap_or_default(),
        provider_ref: r.get("provider_ref")?,
    })
}

fn json_list(list: &[String]) -> String {
    serde_json::to_string(list).unwrap_or_else(|_| "[]".into())
}

/// The writer's connection: the file made 0600, the settings every connection shares, the schema
/// and its migrations.
fn open_writer(path: &Path) -> Result<Connection> {
    let mut conn = Connection::open(path)?;
    restrict(path)?;
    // Pages freed by a prune go back to the file system (`compact`): a database made
    // before needs one VACUUM to take the setting, done here once.
    let auto_vacuum: i64 = conn.pragma_query_value(None, "auto_vacuum", |r| r.get(0))?;
    if auto_vacuum != AUTO_VACUUM_INCREMENTAL {
        conn.pragma_update(None, "auto_vacuum", AUTO_VACUUM_INCREMENTAL)?;
        let before = file_bytes(path);
        conn.execute_batch("VACUUM")?;
        events::StoreVacuumed { path: &path.to_string_lossy(), before, after: file_bytes(path) }.emit();
    }
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "busy_timeout", 5000)?;
    // A WAL a burst of writes grew is cut back to this at the next checkpoint.
    conn.pragma_update(None, "journal_size_limit", JOURNAL_SIZE_LIMIT)?;
    conn.execute_batch(SCHEMA)?;
    conn.execute_batch(sessions::SCHEMA)?;
    conn.execute_batch(jobs::SCHEMA)?;
    conn.execute_batch(inbox::SCHEMA)?;
    add_columns(&conn)?;
    sessions::migrate_secrets(&mut conn)?;
    Ok(conn)
}

/// Columns added after the first release: a database made before gets them (empty) at open.
fn add_columns(conn: &Connection) -> Result<()> {
    const ADDED: [(&str, &str, &str); 17] = [
        ("sandboxes", "envd_pid_start", "INTEGER"),
        ("sandboxes", "isolation", "TEXT"),
        ("sandboxes", "uid", "INTEGER"),
        ("tokens", "person", "TEXT"),
        ("tokens", "person_name", "TEXT"),
        ("jobs", "base_read", "INTEGER NOT NULL DEFAULT 0"),
        ("sessions", "approvals", "TEXT"),
        ("sandboxes", "owner", "TEXT"),
        ("sandboxes", "provider_ref", "TEXT"),
        ("sandboxes", "daemon_kind", "TEXT"),
        ("sessions", "secret_owners", "TEXT"),
        ("inbox", "call", "TEXT"),
        ("sandboxes", "shared_with", "TEXT NOT NULL DEFAULT '[]'"),
        ("turns", "parser", "TEXT"),
        ("jobs", "secrets", "TEXT NOT NULL DEFAULT '[]'"),
        ("jobs", "sandbox_login", "INTEGER NOT NULL DEFAULT 0"),
        ("turns", "base", "TEXT"),
    ];
    for (table, column, kind) in ADDED {
        let have: Vec<String> = conn
            .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        if !have.iter().any(|h| h == column) {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind}"))?;
        }
    }
    Ok(())
}

/// Owner-only permissions on a secret-bearing file.
pub fn restrict(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

/// Streamed commands a pause, destroy or graceful shutdown cut off and spared: they run to their
/// end or timeout, and a restarted relay must not take them for orphans of a crash.
impl Store {
    pub async fn spare_exec(&self, sandbox_id: &str, tag: &str) -> Result<()> {
        let sandbox_id = sandbox_id.to_owned();
        let tag = tag.to_owned();
        self.threads
            .write(Durability::Durable, move |conn| {
                conn.execute(
                    "INSERT OR IGNORE INTO spared_execs (sandbox_id, tag, at) VALUES (?1, ?2, ?3)",
                    params![sandbox_id, tag, now()],
                )?;
                Ok(())
            })
            .await
    }

    /// The spared commands' tags in a sandbox.
    pub async fn spared_execs(&self, sandbox_id: &str) -> Result<Vec<String>> {
        let sandbox_id = sandbox_id.to_owned();
        self.threads
            .read(move |conn| {
                Ok(conn.query_rows("SELECT tag FROM spared_execs WHERE sandbox_id = ?1", [&sandbox_id], |r| r.get(0))?)
            })
            .await
    }

    /// Forgets spared commands no longer running (their tags are not in `running`).
    pub async fn forget_spared_execs(&self, sandbox_id: &str, running: &[String]) -> Result<()> {
        let sandbox_id = sandbox_id.to_owned();
        let running = running.to_vec();
        self.threads
            .write(Durability::Durable, move |conn| {
                let tags: Vec<String> = conn
                    .prepare("SELECT tag FROM spared_execs WHERE sandbox_id = ?1")?
                    .query_map([&sandbox_id], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
                for tag in tags.iter().filter(|t| !running.contains(t)) {
                    conn.execute(
                        "DELETE FROM spared_execs WHERE sandbox_id = ?1 AND tag = ?2",
                        params![sandbox_id, tag],
                    )?;
                }
                Ok(())
            })
            .await
    }

    /// The tokens revoked, by id.
    pub async fn revoked_tokens(&self) -> Result<Vec<String>> {
        self.threads
            .read(move |conn| {
                Ok(conn.query_rows("SELECT id FROM tokens WHERE revoked_at IS NOT NULL", [], |r| r.get(0))?)
            })
            .await
    }
}

/// How long the pid a background process was started with is kept: longer than any process is
/// expected to run and be listed.
const STARTED_KEPT_SECONDS: i64 = 90 * 24 * 3600;

/// The pid each background process had when the relay started it through a daemon: what its
/// tag names is that process, not one started later with the same tag.
impl Store {
    pub async fn record_started(&self, sandbox_id: &str, process_id: &str, pid: u32) -> Result<()> {
        let sandbox_id = sandbox_id.to_owned();
        let process_id = process_id.to_owned();
        self.threads.write(Durability::Durable, move |conn| {
                    conn.execute("DELETE FROM started_processes WHERE started_at < ?1", [now() - STARTED_KEPT_SECONDS])?;
            conn.execute(
                "INSERT OR REPLACE INTO started_processes (sandbox_id, process_id, pid, started_at) VALUES (?1, ?2, ?3, ?4)",
                params![sandbox_id, process_id, pid, now()],
            )?;
            Ok(())
        })
        .await
    }

    pub async fn started_pids(&self, sandbox_id: &str) -> Result<std::collections::HashMap<String, u32>> {
        let sandbox_id = sandbox_id.to_owned();
        self.threads
            .read(move |conn| {
                Ok(conn.query_rows(
                    "SELECT process_id, pid FROM started_processes WHERE sandbox_id = ?1",
                    [&sandbox_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database made before isolation was recorded gets the new columns at open; its rows
    /// read as what they were: a container, or a local sandbox that isolated nothing.
    #[tokio::test]
    async fn an_older_database_gets_the_new_columns_and_keeps_its_rows() {
        let dir = std::env::temp_dir().join(format!("hangar-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("relay.sqlite");
        let _ = std::fs::remove_file(&path);
        {
            let old = Connection::open(&path).unwrap();
            old.execute_batch(
                "CREATE TABLE sandboxes (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, provider TEXT NOT NULL,
                    options TEXT NOT NULL, state TEXT NOT NULL, workdir TEXT, envd_url TEXT, envd_token TEXT,
                    envd_pid INTEGER, daemon INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL);
                 INSERT INTO sandboxes VALUES ('sbx_1', 'default', 'local', '{}', 'running', NULL, NULL, NULL, 42, 1, 0);
                 INSERT INTO sandboxes VALUES ('sbx_2', 'box', 'docker', '{}', 'running', NULL, NULL, NULL, NULL, 1, 0);",
            )
            .unwrap();
        }
        let store = Store::open(&path, || {}).await.unwrap();
        let mut local = store.sandbox("default").await.unwrap().unwrap();
        assert_eq!(
            (local.isolation, local.envd_pid, local.envd_pid_start, local.uid, local.owner.clone()),
            (Isolation::None, Some(42), None, None, None)
        );
        assert!(local.shared_with.is_empty(), "a sandbox from before sharing is shared with nobody");
        assert_eq!(store.sandbox("box").await.unwrap().unwrap().isolation, Isolation::Container);
        local.isolation = Isolation::Namespaces;
        local.envd_pid_start = Some(7);
        local.uid = Some(0x7000_0001);
        store.update_sandbox(&local).await.unwrap();
        assert_eq!(store.sandbox("sbx_1").await.unwrap().unwrap(), local);
        let team = vec!["*".to_string()];
        assert!(store.set_sandbox_shared_with("sbx_1", &team).await.unwrap());
        assert_eq!(store.sandbox("default").await.unwrap().unwrap().shared_with, team);
        assert!(!store.set_sandbox_shared_with("sbx_9", &team).await.unwrap());
        drop(store);
        // Opening again adds nothing twice.
        Store::open(&path, || {}).await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
