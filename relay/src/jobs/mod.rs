//! Jobs: one agent session (named `job-<id>`) run to its end in a sandbox the caller names or
//! the job creates, then, if the agent ended cleanly, a verification command; the result is what
//! hangar measured itself with read-only git (`measure`). A driver task per live job moves it
//! through `queued, running, verifying` to `succeeded, failed, cancelled` (`driver`), and is
//! started again for live jobs when the relay starts (`resume`).
//!
//! Invariants:
//! - A job's result is what hangar measured (git in the sandbox, the verification's exit code),
//!   never the agent's word; the one exception, a PR URL found in the agent's final message, is
//!   labelled `pr_url_source: "agent_reported"`.
//! - A terminal state is final (`Store::set_job_state` only moves live jobs).
//! - A `jobs` token sees only the jobs it created; other tokens their person's; an admin all.
//!   A job that is not the caller's does not exist for it (404).
//! - The job's session belongs to the job's person, and its events are the job's events.
mod driver;
pub mod follow;
pub mod measure;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use crate::{
    auth::Caller,
    error::{Error, Result},
    events,
    feed::{Change, Feed},
    refs,
    sandboxes::Sandboxes,
    secrets::Secrets,
    sessions::{self, EventsPage, Sessions, MAX_PROMPT_BYTES},
    store::{JobRow, JobsOf, NewJob, Scope, Store},
    time,
};

pub use crate::store::JobState;
pub use follow::follow;

/// The longest verification command.
pub const MAX_VERIFY_BYTES: usize = 8 * 1024;
/// The longest a verification runs (less when the job's timeout is shorter).
pub const MAX_VERIFY_MINUTES: i64 = 30;

/// What jobs use of the relay: handles the wiring builds once and shares.
pub struct Uses {
    pub store: Arc<Store>,
    pub sandboxes: Arc<Sandboxes>,
    pub sessions: Arc<Sessions>,
    pub secrets: Arc<Secrets>,
    pub feed: Arc<Feed>,
}

/// The jobs' handles and shared state: the drivers' wake-ups and the prompts of jobs not yet
/// started.
pub struct Jobs {
    store: Arc<Store>,
    sandboxes: Arc<Sandboxes>,
    sessions: Arc<Sessions>,
    secrets: Arc<Secrets>,
    feed: Arc<Feed>,
    /// Per running driver: woken when its job is cancelled.
    drivers: Mutex<HashMap<String, Arc<Notify>>>,
    /// The prompts as the caller wrote them, in memory only until the session starts: the store
    /// keeps the redacted text (which a relay restarted before the start sends).
    prompts: Mutex<HashMap<String, String>>,
}

impl Jobs {
    pub fn new(uses: Uses) -> Arc<Jobs> {
        let Uses { store, sandboxes, sessions, secrets, feed } = uses;
        Arc::new(Jobs {
            store,
            sandboxes,
            sessions,
            secrets,
            feed,
            drivers: Mutex::default(),
            prompts: Mutex::default(),
        })
    }

    fn drivers(&self) -> MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.drivers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn prompts(&self) -> MutexGuard<'_, HashMap<String, String>> {
        self.prompts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn poke(&self, id: &str) {
        if let Some(n) = self.drivers().get(id) {
            n.notify_one();
        }
    }
}

/// A sandbox the job creates.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxSpec {
    pub provider: String,
    // An object (`start` refuses anything else); absent is `{}`.
    #[serde(default = "empty_object")]
    #[schemars(with = "serde_json::Map<String, Value>")]
    pub options: Value,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// What `POST /api/jobs` and the `job` tool's `start` take, read as they are by both (their JSON
/// shape and the tool's schema are derived from this). A doc comment here is the field's
/// description in the tool's schema.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// An existing sandbox's name or id (or sandbox_spec)
    pub sandbox: Option<String>,
    /// A sandbox the job creates (named job-<id>) and keeps (or sandbox)
    pub sandbox_spec: Option<SandboxSpec>,
    /// Harness profile (default claude-code)
    pub harness: Option<String>,
    /// What to ask the agent
    pub prompt: String,
    /// The agent's directory (default: the sandbox's working directory)
    pub cwd: Option<String>,
    /// A shell command run in cwd once the agent ended cleanly; exit 0 passes
    pub verify: Option<String>,
    /// The turn's deadline (default 120)
    #[schemars(range(min = 1, max = sessions::MAX_TIMEOUT_MINUTES))]
    pub timeout_minutes: Option<i64>,
    /// A retry with the same key and prompt answers the first call's job
    pub idempotency_key: Option<String>,
    /// Names of relay secrets passed to the harness, as for a session
    #[serde(default)]
    pub secrets: Vec<String>,
    /// The CLI is logged in inside the sandbox by itself, so no credential secret is needed
    #[serde(default)]
    pub sandbox_login: bool,
}

/// A job as its readers see it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct JobView {
    #[serde(flatten)]
    pub job: JobRow,
    /// The seq of its session's last event: pass as `since` to read only what comes next.
    pub events_cursor: i64,
    /// Which fields hold the agent's own word (untrusted), not hangar's measurement.
    pub agent_text: &'static [&'static str],
    /// Whether this answer is an earlier request's, replayed for its idempotency key.
    pub idempotent_replay: bool,
}

const AGENT_TEXT: &[&str] = &["result.pr_url"];

async fn view(jobs: &Jobs, job: JobRow, replay: bool) -> Result<JobView> {
    let events_cursor = match &job.session_id {
        Some(s) => jobs.store.session_by_id(s).await?.map_or(0, |s| s.event_seq),
        None => 0,
    };
    Ok(JobView { job, events_cursor, agent_text: AGENT_TEXT, idempotent_replay: replay })
}

/// Whose jobs the caller sees: a `jobs` token its own, an admin everyone's, others their
/// person's.
pub fn jobs_of(caller: &Caller) -> JobsOf<'_> {
    match caller.scope {
        Scope::Admin => JobsOf::Everyone,
        Scope::Jobs => JobsOf::Token(&caller.token_id),
        Scope::User | Scope::Mcp => JobsOf::Person(&caller.person),
    }
}

fn sha256_hex(s: &str) -> String {
    Sha256::digest(s.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn check(req: &StartRequest) -> Result<i64> {
    if req.prompt.trim().is_empty() {
        return Err(Error::invalid("prompt: must not be empty"));
    }
    if req.prompt.len() > MAX_PROMPT_BYTES || req.prompt.contains('\0') {
        return Err(Error::invalid(format!("prompt: at most {MAX_PROMPT_BYTES} bytes, no NUL")));
    }
    if let Some(v) = &req.verify {
        if v.trim().is_empty() || v.len() > MAX_VERIFY_BYTES || v.contains('\0') {
            return Err(Error::invalid(format!("verify: a shell command of 1 to {MAX_VERIFY_BYTES} bytes, no NUL")));
        }
    }
    if let Some(k) = &req.idempotency_key {
        if k.is_empty() || k.len() > 200 || k.chars().any(char::is_control) {
            return Err(Error::invalid("idempotency_key: 1 to 200 characters, no control characters"));
        }
    }
    match req.timeout_minutes {
        None => Ok(sessions::DEFAULT_TIMEOUT_MINUTES),
        Some(m) if (1..=sessions::MAX_TIMEOUT_MINUTES).contains(&m) => Ok(m),
        Some(m) => {
            Err(Error::invalid(format!("timeout_minutes: {m}: 1 to {} (a week)", sessions::MAX_TIMEOUT_MINUTES)))
        }
    }
}

/// Creates a job and starts its driver; answers at once (`queued`). Bad input is refused here,
/// before anything is created; what goes wrong later (a sandbox that cannot be created, a
/// session refused) ends the job `failed` with the reason.
pub async fn start(jobs: &Arc<Jobs>, caller: &Caller, req: StartRequest) -> Result<JobView> {
    let timeout = check(&req)?;
    let harness = req.harness.as_deref().unwrap_or("claude-code");
    let Some(profile) = jobs.sessions.harnesses.get(harness) else {
        let known: Vec<&str> = jobs.sessions.harnesses.iter().map(|h| h.name.as_str()).collect();
        return Err(Error::invalid(format!("harness {harness:?}: one of {}", known.join(", "))));
    };
    let (sandbox, spec) = match (&req.sandbox, &req.sandbox_spec) {
        (Some(name), None) => {
            // A jobs token may name a sandbox to run in, under the same isolation rule as
            // anyone working inside it; it still never reaches the sandbox routes.
            let row = jobs.sandboxes.enter(name, caller).await?;
            if let Some(cwd) = &req.cwd {
                jobs.sandboxes.resolve_cwd(&row, cwd)?;
            }
            (Some(row), None)
        }
        (None, Some(spec)) => {
            jobs.sandboxes.check_provider(&spec.provider)?;
            if !spec.options.is_object() {
                return Err(Error::invalid("sandbox_spec.options: an object"));
            }
            (None, Some(serde_json::json!({ "provider": spec.provider, "options": spec.options })))
        }
        _ => return Err(Error::invalid("name exactly one of sandbox (an existing sandbox) and sandbox_spec")),
    };
    // Refused now, as a session's start would be, rather than as the job's failure later.
    let (_, _, credential) = sessions::choose_secrets(&jobs.sessions, caller, profile, &req.secrets).await?;
    sessions::check_credential(profile, credential.as_deref(), req.sandbox_login)?;
    let owner = match caller.scope {
        Scope::Jobs => format!("token:{}", caller.token_id),
        _ => format!("person:{}", caller.person),
    };
    let job = JobRow {
        id: format!("job_{}", crate::random::hex(6)),
        person: caller.person.clone(),
        token_id: caller.token_id.clone(),
        scope: caller.scope,
        owner,
        sandbox_id: sandbox.as_ref().map(|s| s.id.clone()),
        sandbox_name: sandbox.as_ref().map(|s| s.name.clone()),
        sandbox_spec: spec,
        created_sandbox: false,
        session_id: None,
        harness: harness.to_string(),
        prompt: jobs.secrets.redactor().text(&req.prompt).into_owned(),
        prompt_sha256: sha256_hex(&req.prompt),
        cwd: req.cwd.clone(),
        verify: req.verify.clone(),
        timeout_minutes: timeout,
        idempotency_key: req.idempotency_key.clone(),
        state: JobState::Queued,
        reason: None,
        detail: None,
        base: None,
        base_read: false,
        result: None,
        cancel_requested_at: None,
        created_at: time::now(),
        started_at: None,
        finished_at: None,
        secrets: req.secrets.clone(),
        sandbox_login: req.sandbox_login,
    };
    match jobs.store.create_job(&job).await? {
        NewJob::New(job) => {
            events::JobState { job: &job.id, person: &job.person, from: "", to: "queued", reason: None }.emit();
            jobs.feed.publish(Change::Job(&job)).await;
            jobs.prompts().insert(job.id.clone(), req.prompt);
            spawn_driver(jobs, &job.id);
            view(jobs, job, false).await
        }
        NewJob::Replayed(job) => view(jobs, job, true).await,
        NewJob::KeyConflict => {
            Err(Error::Conflict("idempotency_key: already used for a job with another prompt".into()))
        }
    }
}

/// The job `id` (or a unique prefix of it: `refs`) if the caller sees it.
pub async fn find(jobs: &Jobs, caller: &Caller, id: &str) -> Result<JobRow> {
    if let Some(row) = jobs.store.job(id, jobs_of(caller)).await? {
        return Ok(row);
    }
    let pattern = refs::pattern(id, &["job_"], false, false);
    let rows = if pattern.is_empty() { Vec::new() } else { jobs.store.jobs_matching(pattern, jobs_of(caller)).await? };
    // A job has no name: its candidates are told apart by their prompts' first lines.
    let candidate = |j: &JobRow| refs::Candidate {
        id: j.id.clone(),
        name: j.prompt.lines().next().unwrap_or_default().chars().take(60).collect(),
    };
    match refs::pick(rows, |_| true, candidate) {
        refs::Picked::One(row) => Ok(row),
        refs::Picked::None => Err(Error::not_found(format!("no job {id:?}"))),
        refs::Picked::Many(candidates) => Err(Error::Ambiguous { what: "jobs", reference: id.to_string(), candidates }),
    }
}

pub async fn get(jobs: &Jobs, caller: &Caller, id: &str) -> Result<JobView> {
    view(jobs, find(jobs, caller, id).await?, false).await
}

pub async fn list(jobs: &Jobs, caller: &Caller) -> Result<Vec<JobView>> {
    let mut views = Vec::new();
    for j in jobs.store.jobs(jobs_of(caller)).await? {
        views.push(view(jobs, j, false).await?);
    }
    Ok(views)
}

/// The job's events after `since`: its session's, among which hangar records the job's own
/// `job.state` and `job.result`. None before the job has a session (there are no events yet).
pub async fn read_events(jobs: &Jobs, job: &JobRow, since: i64, limit: usize) -> Result<Option<EventsPage>> {
    match job.session_id.as_deref() {
        Some(s) => sessions::read_page(&jobs.sessions, s, since, limit).await.map(Some),
        None => Ok(None),
    }
}

/// Cancels a job: a queued one at once; a running one by cancelling its session's turn (the
/// driver ends the job when the turn has ended); a verifying one by stopping its verification
/// (the driver, woken here, stops it in the sandbox).
/// Idempotent; a job that has ended is answered as it is.
pub async fn cancel(jobs: &Arc<Jobs>, caller: &Caller, id: &str) -> Result<JobView> {
    let job = find(jobs, caller, id).await?;
    if !job.state.is_terminal() {
        jobs.store.request_job_cancel(&job.id, time::now()).await?;
        match (job.state, &job.session_id) {
            (JobState::Queued, None) => {
                driver::to(jobs, &job, JobState::Cancelled, Some("cancel_requested"), None).await?;
            }
            (JobState::Running | JobState::Queued, Some(session)) => {
                sessions::cancel(&jobs.sessions, &driver::caller_of(&job), session).await?;
            }
            _ => {}
        }
        jobs.poke(&job.id);
    }
    get(jobs, caller, &job.id).await
}

/// Starts a driver for the job unless one runs.
fn spawn_driver(jobs: &Arc<Jobs>, id: &str) {
    let notify = {
        let mut drivers = jobs.drivers();
        if drivers.contains_key(id) {
            return;
        }
        let n = Arc::new(Notify::new());
        drivers.insert(id.to_string(), n.clone());
        n
    };
    let jobs = jobs.clone();
    let id = id.to_string();
    tokio::spawn(async move {
        driver::drive(&jobs, &id, &notify).await;
        jobs.drivers().remove(&id);
        jobs.prompts().remove(&id);
    });
}

/// At start: a driver for every live job (each carries on from its recorded state).
pub async fn resume(jobs: &Arc<Jobs>) {
    match jobs.store.live_jobs().await {
        Ok(live) => live.iter().for_each(|j| spawn_driver(jobs, &j.id)),
        Err(e) => events::JobFailed { job: "*", error: &e.to_string() }.emit(),
    }
}

/// Tells the feed of a job's row as stored after its driver changed it (state, sandbox,
/// session, result). A store that cannot be read leaves the views as they were (the next change
/// brings them up to date) and says so in the log.
pub(crate) async fn changed(jobs: &Jobs, job_id: &str) {
    match jobs.store.job(job_id, JobsOf::Everyone).await {
        Ok(Some(j)) => jobs.feed.publish(Change::Job(&j)).await,
        Ok(None) => {}
        Err(e) => events::FleetTrouble { what: job_id, error: &e.to_string() }.emit(),
    }
}
