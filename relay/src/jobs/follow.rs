//! Following a job's events (its session's, hangar's `job.state` and `job.result` among them)
//! until the job has ended: the one rule `GET /api/jobs/{id}/events/stream` and the
//! `hangar://jobs/<job>/events` subscription render. Before the job has a session there are no
//! events, and the job is looked at until it has one or ends. Once its state says it ended, the
//! follow ends after the event that records the end (the last of its events), or a grace for it.
use std::{sync::Arc, time::Duration};

use crate::{
    auth::Caller,
    error::Result,
    jobs::Jobs,
    sessions::follow::{self as session, Charge, End, Follower, Gate, Mark, Next, Pages, Step, Until, PAGE},
    streams::Front,
};

/// How often a job without a session yet is looked at for one.
const NO_SESSION_POLL: Duration = Duration::from_millis(300);
/// How often the job's state is looked at while its session records nothing.
const RECHECK: Duration = Duration::from_secs(5);
/// How long a follow waits for the event that records the job's end once its state says so
/// (both are one write where the job has a session, so this is for one that gets no event).
const END_GRACE: Duration = Duration::from_secs(2);

/// A job's events followed on an admitted stream.
pub struct JobFollow {
    jobs: Arc<Jobs>,
    caller: Caller,
    id: String,
    since: i64,
    gate: Gate,
    /// Its session's events, once it has one.
    follower: Option<Follower>,
    /// The event recording the job's end was handed over.
    saw_end: bool,
    /// The job had ended and a grace passed with nothing recorded.
    graced: bool,
}

/// Follows the caller's job `id` (not found unless the caller sees it) after `since`, as one
/// admitted stream (refused over the stream limits) under the job's sandbox (under none while
/// it has none).
pub async fn follow(
    jobs: &Arc<Jobs>,
    caller: &Caller,
    id: &str,
    since: i64,
    front: Front,
    charge: Charge,
) -> Result<JobFollow> {
    let job = super::find(jobs, caller, id).await?;
    let gate = Gate::open(&jobs.sessions, caller, job.sandbox_id.as_deref().unwrap_or_default(), front, charge)?;
    Ok(JobFollow {
        jobs: jobs.clone(),
        caller: caller.clone(),
        id: job.id,
        since,
        gate,
        follower: None,
        saw_end: false,
        graced: false,
    })
}

impl Pages for JobFollow {
    async fn next(&mut self) -> Step {
        loop {
            if let Some(end) = self.gate.ended() {
                return Step::End(end);
            }
            let job = match super::find(&self.jobs, &self.caller, &self.id).await {
                Ok(job) => job,
                Err(e) => return self.gate.end(End::Failed(e.to_string())),
            };
            if let (None, Some(s)) = (&self.follower, &job.session_id) {
                match session::follower(&self.jobs.sessions, s, self.since, Until::Never).await {
                    Ok(f) => self.follower = Some(f),
                    Err(e) => return self.gate.end(End::Failed(e.to_string())),
                }
            }
            let ended = job.state.is_terminal();
            if ended && (self.follower.is_none() || self.saw_end || self.graced) {
                return self.gate.end(End::JobEnded(job.state));
            }
            let wait = match (ended, &self.follower) {
                (true, _) => END_GRACE,
                (false, Some(_)) => RECHECK,
                (false, None) => NO_SESSION_POLL,
            };
            let follower = self.follower.as_mut();
            let next = async move {
                match follower {
                    Some(f) => tokio::time::timeout(wait, f.next(PAGE)).await.ok(),
                    None => {
                        tokio::time::sleep(wait).await;
                        None
                    }
                }
            };
            match self.gate.first(next).await {
                Err(reason) => return self.gate.end(End::Closed(reason)),
                // Nothing recorded in the while: look at the job again.
                Ok(None) => self.graced = ended,
                Ok(Some(Ok(Some(Next::Events(events))))) => {
                    self.saw_end |= events.iter().any(|e| e.mark == Mark::JobEnded);
                    return self.gate.pass(events).await;
                }
                // A job's follower never ends on its turn's end (`Until::Never`).
                Ok(Some(Ok(Some(Next::Ended(_) | Next::Waiting(_))))) => {}
                Ok(Some(Ok(None))) => return self.gate.end(End::Stopped),
                Ok(Some(Err(e))) => return self.gate.end(End::Failed(e.to_string())),
            }
        }
    }
}
