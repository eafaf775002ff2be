//! A job's driver: one task per live job, a state machine over the job's recorded state so a
//! restarted relay carries on where it was. `queued`: the sandbox (created when the job has a
//! spec), the base head, the session. `running`: waits for the session's first turn to end.
//! `verifying`: runs `verify`, measures, and ends the job.
use std::{sync::Arc, time::Duration};

use serde_json::{json, Value};
use tokio::sync::Notify;

use super::measure::{self, Verification};
use crate::sandboxes::run::User;
use crate::{
    auth::Caller,
    error::{Error, Result},
    events,
    feed::Change,
    jobs::Jobs,
    providers::ExecOutput,
    sessions::{
        self,
        supervisor::{Shell, SCRIPT_TIMEOUT},
    },
    store::{JobEvent, JobRow, JobState, JobsOf, NewEvent, SandboxRow, TurnState},
    time,
};

/// How often a waiting driver looks again without being woken (a missed wake-up costs this).
const RECHECK: Duration = Duration::from_secs(5);

/// The caller a job acts as: its creator's token, scope and person.
pub(super) fn caller_of(job: &JobRow) -> Caller {
    Caller {
        token_id: job.token_id.clone(),
        name: format!("job {}", job.id),
        scope: job.scope,
        person: job.person.clone(),
    }
}

/// The name of the job's session and of a sandbox it creates: `job-<hex>`.
fn own_name(job: &JobRow) -> String {
    format!("job-{}", job.id.trim_start_matches("job_"))
}

pub(super) async fn drive(jobs: &Arc<Jobs>, id: &str, notify: &Notify) {
    if let Err(e) = run(jobs, id, notify).await {
        events::JobFailed { job: id, error: &e.to_string() }.emit();
    }
}

async fn run(jobs: &Arc<Jobs>, id: &str, notify: &Notify) -> Result<()> {
    loop {
        let Some(job) = jobs.store.job(id, JobsOf::Everyone).await? else { return Ok(()) };
        // Each step moves the job on (or it is found terminal next time round).
        match job.state {
            JobState::Queued => start(jobs, &job).await?,
            JobState::Running => wait_turn(jobs, &job, notify).await?,
            JobState::Verifying => verify(jobs, &job, notify).await?,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled => return Ok(()),
        }
    }
}

/// Moves the job to `to` (unless it has ended) and records a `job.state` event in its session's
/// events, where there is one, in the same transaction: a relay killed in between leaves both or
/// neither (a job's terminal `job.state` is what ends its event streams).
pub(super) async fn to(
    jobs: &Jobs,
    job: &JobRow,
    to: JobState,
    reason: Option<&str>,
    detail: Option<&str>,
) -> Result<()> {
    let detail = detail.map(|d| jobs.secrets.redactor().text(d).into_owned());
    let data = json!({
        "job": job.id, "from": job.state.as_str(), "to": to.as_str(), "reason": reason, "detail": detail,
        "source": "hangar",
    });
    let turn = first_turn(jobs, job.session_id.as_deref()).await?;
    let event = job_event(job.session_id.as_deref(), turn.as_deref(), "job.state", data);
    let Some(seq) = jobs.store.set_job_state(&job.id, to, reason, detail.as_deref(), time::now(), event).await? else {
        return Ok(());
    };
    events::JobState { job: &job.id, person: &job.person, from: job.state.as_str(), to: to.as_str(), reason }.emit();
    publish(jobs, job.session_id.as_deref(), seq);
    super::changed(jobs, &job.id).await;
    if to == JobState::Failed {
        let ended = JobRow { state: to, reason: reason.map(str::to_string), detail, ..job.clone() };
        jobs.feed.publish(Change::JobMoved { job: &ended, from: job.state }).await;
    }
    Ok(())
}

/// The id of the session's first turn, which the job's own events are recorded under.
async fn first_turn(jobs: &Jobs, session_id: Option<&str>) -> Result<Option<String>> {
    let Some(session_id) = session_id else { return Ok(None) };
    Ok(jobs.store.first_turn(session_id).await?.map(|t| t.id))
}

fn job_event(session_id: Option<&str>, turn_id: Option<&str>, kind: &'static str, data: Value) -> Option<JobEvent> {
    let event = NewEvent { kind, data, src_offset: None, part: 0 };
    Some(JobEvent { session_id: session_id?.to_string(), turn_id: turn_id?.to_string(), event })
}

fn publish(jobs: &Jobs, session_id: Option<&str>, seq: Option<i64>) {
    if let (Some(session_id), Some(seq)) = (session_id, seq) {
        jobs.sessions.live.publish(session_id, seq);
    }
}

async fn fail(jobs: &Jobs, job: &JobRow, reason: &str, e: &Error) -> Result<()> {
    to(jobs, job, JobState::Failed, Some(reason), Some(&e.to_string())).await
}

/// The job's sandbox: the one it names, or the one it creates from its spec (found again by
/// name after a restart).
async fn sandbox(jobs: &Jobs, job: &JobRow) -> Result<SandboxRow> {
    if let Some(id) = &job.sandbox_id {
        return jobs.sandboxes.get(id).await;
    }
    let name = own_name(job);
    if let Some(row) = jobs.store.sandbox(&name).await? {
        jobs.store.set_job_sandbox(&job.id, &row.id, &row.name, true).await?;
        super::changed(jobs, &job.id).await;
        return Ok(row);
    }
    let spec = job.sandbox_spec.as_ref().ok_or_else(|| Error::invalid("the job names no sandbox"))?;
    let provider = spec.get("provider").and_then(Value::as_str).unwrap_or_default();
    let options = spec.get("options").cloned().unwrap_or_else(|| json!({}));
    // The job's sandbox is its person's.
    let row = jobs.sandboxes.create(&name, provider, options, Some(&job.person), Vec::new()).await?;
    jobs.store.set_job_sandbox(&job.id, &row.id, &row.name, true).await?;
    super::changed(jobs, &job.id).await;
    Ok(row)
}

async fn start(jobs: &Arc<Jobs>, job: &JobRow) -> Result<()> {
    if job.cancel_requested_at.is_some() {
        return to(jobs, job, JobState::Cancelled, Some("cancel_requested"), None).await;
    }
    let row = match sandbox(jobs, job).await {
        Ok(row) => row,
        Err(e @ Error::Store(_)) => return Err(e),
        Err(e) => return fail(jobs, job, "sandbox_unavailable", &e).await,
    };
    let cwd = match job.cwd.as_deref().or(row.workdir.as_deref()) {
        Some(cwd) => jobs.sandboxes.resolve_cwd(&row, cwd),
        None => Err(Error::invalid("cwd: the sandbox has no working directory; name one")),
    };
    let cwd = match cwd {
        Ok(cwd) => cwd,
        Err(e) => return fail(jobs, job, "invalid_cwd", &e).await,
    };
    // The head before the agent's first turn: what "commits ahead" counts from. Read as
    // everything hangar reads of the job's repository (`read_repo`), and recorded before the
    // session starts: a driver restarted after that reuses it, since the head may by then hold
    // the agent's commits.
    if !job.base_read {
        let base = match Shell::open(&jobs.sessions, row.clone()).await {
            Ok(shell) => read_repo(&shell, &measure::head_script(&cwd))
                .await
                .ok()
                .and_then(|o| measure::object_id(&String::from_utf8_lossy(&o.stdout))),
            Err(_) => None,
        };
        jobs.store.set_job_base(&job.id, &cwd, base.as_deref()).await?;
    }
    let prompt = jobs.prompts().get(&job.id).cloned().unwrap_or_else(|| job.prompt.clone());
    let req = sessions::StartRequest {
        name: own_name(job),
        sandbox: row.id.clone(),
        harness: Some(job.harness.clone()),
        prompt,
        cwd: Some(cwd),
        timeout_minutes: Some(job.timeout_minutes),
        secrets: job.secrets.clone(),
        approvals: Vec::new(),
        // The job's id: a driver restarted before it recorded the session gets the same one.
        idempotency_key: Some(job.id.clone()),
        ignore_limits: false,
        sandbox_login: job.sandbox_login,
    };
    let session = match sessions::start(&jobs.sessions, &caller_of(job), req).await {
        Ok(v) => v.session,
        Err(e @ Error::Store(_)) => return Err(e),
        Err(e) => return fail(jobs, job, "session_refused", &e).await,
    };
    jobs.store.set_job_session(&job.id, &session.id, &session.cwd).await?;
    super::changed(jobs, &job.id).await;
    jobs.prompts().remove(&job.id);
    let job = jobs.store.job(&job.id, JobsOf::Everyone).await?.ok_or_else(|| Error::not_found("job gone"))?;
    to(jobs, &job, JobState::Running, None, None).await?;
    // A cancel that came while the session was starting: its turn goes too (`wait_turn` ends
    // the job when it has).
    if job.cancel_requested_at.is_some() {
        sessions::cancel(&jobs.sessions, &caller_of(&job), &session.id).await?;
    }
    Ok(())
}

/// A turn's end as the job's reason: the turn's own, `crashed:<reason>` for a crash.
fn turn_reason(state: TurnState, reason: Option<&str>) -> String {
    match (state, reason) {
        (TurnState::Crashed, Some(r)) => format!("crashed:{r}"),
        (TurnState::TimedOut, _) => "timed_out".into(),
        (_, Some(r)) => r.to_string(),
        (s, None) => s.as_str().to_string(),
    }
}

async fn wait_turn(jobs: &Arc<Jobs>, job: &JobRow, notify: &Notify) -> Result<()> {
    let Some(session_id) = job.session_id.clone() else {
        return to(jobs, job, JobState::Failed, Some("session_lost"), None).await;
    };
    let mut asked_cancel = false;
    loop {
        let Some(session) = jobs.store.session_by_id(&session_id).await? else {
            return to(jobs, job, JobState::Failed, Some("session_deleted"), None).await;
        };
        let mut rx = jobs.sessions.live.subscribe(&session_id, session.event_seq);
        let Some(turn) = jobs.store.first_turn(&session_id).await? else {
            return to(jobs, job, JobState::Failed, Some("session_lost"), None).await;
        };
        if turn.state.is_terminal() {
            let reason = turn_reason(turn.state, turn.reason.as_deref());
            return match turn.state {
                TurnState::Succeeded => to(jobs, job, JobState::Verifying, None, None).await,
                TurnState::Cancelled => {
                    finish(jobs, job, None).await?;
                    to(jobs, job, JobState::Cancelled, Some(&reason), turn.detail.as_deref()).await
                }
                _ => {
                    finish(jobs, job, None).await?;
                    to(jobs, job, JobState::Failed, Some(&reason), turn.detail.as_deref()).await
                }
            };
        }
        let cancel = jobs.store.job(&job.id, JobsOf::Everyone).await?.is_some_and(|j| j.cancel_requested_at.is_some());
        if cancel && !asked_cancel {
            asked_cancel = true;
            sessions::cancel(&jobs.sessions, &caller_of(job), &session_id).await?;
            continue;
        }
        tokio::select! {
            _ = rx.changed() => {}
            _ = notify.notified() => {}
            _ = tokio::time::sleep(RECHECK) => {}
        }
    }
}

async fn verify(jobs: &Arc<Jobs>, job: &JobRow, notify: &Notify) -> Result<()> {
    // A cancel asked before this step looked (its wake-up may have gone to the turn's wait, or
    // to a relay since killed) ends the job cancelled, even with a result already recorded.
    if job.cancel_requested_at.is_some() {
        return cancel_verify(jobs, job, None).await;
    }
    // A result recorded before a restart: the verification ran and was measured; only the end
    // is left to record.
    if let Some(result) = &job.result {
        return verified(jobs, job, recorded_pass(result)).await;
    }
    let row = match job.sandbox_id.as_deref() {
        Some(id) => jobs.sandboxes.get(id).await.map(Some),
        None => Ok(None),
    };
    let (row, cwd) = match (row, &job.cwd) {
        (Ok(Some(row)), Some(cwd)) => (row, cwd.clone()),
        (Err(e), _) => return fail(jobs, job, "sandbox_unavailable", &e).await,
        _ => return to(jobs, job, JobState::Failed, Some("sandbox_unavailable"), None).await,
    };
    let verification = match &job.verify {
        None => None,
        Some(command) => {
            let minutes = job.timeout_minutes.clamp(1, super::MAX_VERIFY_MINUTES) as u64;
            let shell = match Shell::open(&jobs.sessions, row).await {
                Ok(s) => s,
                Err(e) => return fail(jobs, job, "sandbox_unavailable", &e).await,
            };
            // A verification a killed relay left running goes first: it runs again from the
            // start, since what it printed went with that relay.
            stop_verify(&shell, job).await;
            let script = measure::verify_script(&cwd, command, &job.id);
            let run = shell.script(User::Agent, &script, Duration::from_secs(minutes * 60));
            tokio::pin!(run);
            let out = loop {
                tokio::select! {
                    out = &mut run => break out,
                    _ = notify.notified() => {
                        let cancel = jobs.store.job(&job.id, JobsOf::Everyone).await?
                            .is_some_and(|j| j.cancel_requested_at.is_some());
                        if cancel {
                            // Dropping the run alone would leave the command running.
                            return cancel_verify(jobs, job, Some(&shell)).await;
                        }
                    }
                }
            };
            match out {
                Ok(o) => {
                    if o.timed_out {
                        // The run's deadline only stops hangar waiting for the command.
                        stop_verify(&shell, job).await;
                    }
                    let mut all = o.stdout;
                    all.extend_from_slice(&o.stderr);
                    let tail = measure::output_tail(&all);
                    Some(Verification {
                        command: command.clone(),
                        exit_code: o.exit_code,
                        timed_out: o.timed_out,
                        output_tail: jobs.secrets.redactor().text(&tail).into_owned(),
                    })
                }
                Err(e) => {
                    stop_verify(&shell, job).await;
                    return fail(jobs, job, "verify_error", &e).await;
                }
            }
        }
    };
    let passed = verification.as_ref().is_none_or(Verification::passed);
    finish(jobs, job, verification).await?;
    verified(jobs, job, passed).await
}

async fn verified(jobs: &Jobs, job: &JobRow, passed: bool) -> Result<()> {
    if passed {
        to(jobs, job, JobState::Succeeded, Some("ok"), None).await
    } else {
        to(jobs, job, JobState::Failed, Some("verify_failed"), None).await
    }
}

/// Whether a recorded result's verification passed (none ran: passed).
fn recorded_pass(result: &Value) -> bool {
    let v = &result["verification"];
    v.is_null() || (v["exit_code"].as_i64() == Some(0) && v["timed_out"] == Value::Bool(false))
}

/// Ends a verifying job cancelled: its verification stopped, what the agent left measured
/// (without a verification), then `cancelled`.
async fn cancel_verify(jobs: &Jobs, job: &JobRow, shell: Option<&Shell<'_>>) -> Result<()> {
    match shell {
        Some(shell) => stop_verify(shell, job).await,
        None => {
            let row = match job.sandbox_id.as_deref() {
                Some(id) => jobs.sandboxes.get(id).await.ok(),
                None => None,
            };
            if let Some(row) = row {
                if let Ok(shell) = Shell::open(&jobs.sessions, row).await {
                    stop_verify(&shell, job).await;
                }
            }
        }
    }
    finish(jobs, job, None).await?;
    to(jobs, job, JobState::Cancelled, Some("cancel_requested"), None).await
}

/// Stops the job's verification and what it started, found by the marker in their environment
/// (neither a dropped run nor its deadline ends a command in the sandbox). Best effort: a
/// sandbox that cannot be reached cannot be stopped in either, and the job ends all the same.
async fn stop_verify(shell: &Shell<'_>, job: &JobRow) {
    if let Err(e) = shell.script(User::Agent, &measure::stop_verify_script(&job.id), SCRIPT_TIMEOUT).await {
        events::JobFailed { job: &job.id, error: &format!("stopping the verification: {e}") }.emit();
    }
}

/// Runs one of `measure`'s read-only git scripts: as root where the uid split holds, so that
/// nothing the agent left running as its own user can reach the measurement; as the agent
/// elsewhere, where everything in the sandbox is the agent's anyway.
async fn read_repo(shell: &Shell<'_>, script: &str) -> Result<ExecOutput> {
    let root = shell.place().await?.split;
    shell.script(User::root_if(root), script, SCRIPT_TIMEOUT).await
}

/// Measures the repository (read-only git: `read_repo`), finds a PR URL in the agent's
/// final message, and records the result with its `job.result` event, once: a result recorded
/// before a restart stays.
async fn finish(jobs: &Jobs, job: &JobRow, verification: Option<Verification>) -> Result<()> {
    if job.result.is_some() {
        return Ok(());
    }
    let mut git = None;
    if let (Some(id), Some(cwd)) = (&job.sandbox_id, &job.cwd) {
        if let Ok(shell) = Shell::open(&jobs.sessions, jobs.sandboxes.get(id).await?).await {
            let out = read_repo(&shell, &measure::facts_script(cwd, job.base.as_deref())).await;
            git = out.ok().and_then(|o| measure::parse_facts(&String::from_utf8_lossy(&o.stdout)));
        }
    }
    let redactor = jobs.secrets.redactor();
    let pr_url = match &job.session_id {
        Some(s) => final_text(jobs, s).await?.as_deref().and_then(measure::pr_url),
        None => None,
    };
    let result = json!({
        "measured_by": "hangar",
        "git_repository": git.is_some(),
        "branch": git.as_ref().and_then(|g| g.branch.as_deref()).map(|b| redactor.text(b).into_owned()),
        "head": git.as_ref().and_then(|g| g.head.clone()),
        "base": job.base,
        "commits_ahead": git.as_ref().and_then(|g| g.commits_ahead),
        "dirty": git.as_ref().and_then(|g| g.dirty),
        "pushed": git.as_ref().and_then(|g| g.pushed),
        "verification": verification,
        "pr_url": pr_url.as_deref().map(|u| redactor.text(u).into_owned()),
        "pr_url_source": pr_url.as_ref().map(|_| "agent_reported"),
    });
    let turn = first_turn(jobs, job.session_id.as_deref()).await?;
    let data = json!({ "job": job.id, "result": result, "source": "hangar" });
    let event = job_event(job.session_id.as_deref(), turn.as_deref(), "job.result", data);
    if let Some(seq) = jobs.store.set_job_result(&job.id, &result, time::now(), event).await? {
        publish(jobs, job.session_id.as_deref(), seq);
    }
    super::changed(jobs, &job.id).await;
    Ok(())
}

/// The `final_text` of the session's last `run.result` event.
async fn final_text(jobs: &Jobs, session_id: &str) -> Result<Option<String>> {
    let events = jobs.store.latest_events(session_id, 200).await?;
    Ok(events
        .iter()
        .rev()
        .find(|e| e.kind == "run.result")
        .and_then(|e| e.data.get("final_text"))
        .and_then(Value::as_str)
        .map(str::to_string))
}
