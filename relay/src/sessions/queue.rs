//! Who may start: at most `HANGAR_MAX_RUNS_PER_CREDENTIAL` turns run at once per credential,
//! more wait `queued/credential_concurrency` and start in order of arrival; a credential whose
//! plan usage the CLI last reported at `HANGAR_USAGE_GATE_PCT` or more (or `rejected`) waits
//! `queued/plan_limit` until its window resets, unless the turn ignores limits. The queue is the
//! store's live turns, so it survives a restart. Running turns are never stopped for it.
use serde::Serialize;

use crate::{
    error::Result,
    sessions::Sessions,
    store::{SandboxState, TurnRow, TurnState, UsageRow},
    time,
};

/// A reported usage older than this is stale: it says nothing about now.
pub const USAGE_STALE_SECONDS: f64 = 6.0 * 3600.0;

#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    Go,
    Wait { reason: &'static str, detail: String },
}

fn fresh(u: &UsageRow, now: f64) -> bool {
    now - u.seen_at <= USAGE_STALE_SECONDS
}

/// Whether `turn` may start now. Called under the admission lock.
pub async fn admit(sessions: &Sessions, turn: &TurnRow) -> Result<Admission> {
    let Some(session) = sessions.store.session_by_id(&turn.session_id).await? else { return Ok(Admission::Go) };
    if let Some(sandbox) = sessions.store.sandbox(&session.sandbox_id).await? {
        if sandbox.state == SandboxState::Paused {
            let detail = format!("sandbox {:?} is paused", sandbox.name);
            return Ok(Admission::Wait { reason: "sandbox_not_ready", detail });
        }
    }
    let Some(credential) = &turn.credential else { return Ok(Admission::Go) };
    let s = &sessions.settings;
    let live = sessions.store.live_turns().await?;
    let mine = live.iter().filter(|t| t.credential.as_ref() == Some(credential) && t.id != turn.id);
    let (mut running, mut ahead) = (0, 0);
    for t in mine {
        match t.state {
            // Older turns waiting for a slot go first; one held back by its plan or its paused
            // sandbox does not hold up the rest.
            TurnState::Queued
                if (t.created_at, &t.id) < (turn.created_at, &turn.id)
                    && !matches!(t.reason.as_deref(), Some("plan_limit" | "sandbox_not_ready")) =>
            {
                ahead += 1
            }
            TurnState::Queued => {}
            _ => running += 1,
        }
    }
    if running >= s.max_runs_per_credential || ahead > 0 {
        let detail = format!(
            "{running} turns run with credential {credential} (HANGAR_MAX_RUNS_PER_CREDENTIAL={}), {ahead} queued before this one",
            s.max_runs_per_credential
        );
        return Ok(Admission::Wait { reason: "credential_concurrency", detail });
    }
    if !turn.ignore_limits {
        let now = time::now();
        for u in sessions.store.usage().await?.iter().filter(|u| &u.credential == credential && fresh(u, now)) {
            let over = u.used_pct.is_some_and(|p| p >= s.usage_gate_pct) || u.status.as_deref() == Some("rejected");
            if over && u.resets_at.is_none_or(|r| r > now) {
                return Ok(Admission::Wait { reason: "plan_limit", detail: describe(u) });
            }
        }
    }
    Ok(Admission::Go)
}

fn describe(u: &UsageRow) -> String {
    let pct = u.used_pct.map_or_else(|| u.status.clone().unwrap_or_default(), |p| format!("{p:.0}%"));
    match u.resets_at {
        Some(r) => format!("{} {} at {pct}, resets at {r:.0} (epoch seconds)", u.credential, u.window),
        None => format!("{} {} at {pct}", u.credential, u.window),
    }
}

/// What a start says about its credential's plan usage at `HANGAR_USAGE_WARN_PCT` and above.
pub async fn warnings(sessions: &Sessions, credential: Option<&str>) -> Result<Vec<String>> {
    let Some(credential) = credential else { return Ok(Vec::new()) };
    let now = time::now();
    let warn = sessions.settings.usage_warn_pct;
    Ok(sessions
        .store
        .usage()
        .await?
        .iter()
        .filter(|u| u.credential == credential && fresh(u, now) && u.used_pct.is_some_and(|p| p >= warn))
        .map(describe)
        .collect())
}

#[derive(Debug, Serialize)]
pub struct UsageView {
    #[serde(flatten)]
    pub row: UsageRow,
    /// Older than 6 hours: events come only while turns run.
    pub stale: bool,
}

#[derive(Debug, Serialize)]
pub struct Usage {
    pub windows: Vec<UsageView>,
    pub warn_pct: f64,
    pub gate_pct: f64,
    pub max_runs_per_credential: usize,
    /// Per credential: turns running and queued now.
    pub credentials: Vec<CredentialLoad>,
}

#[derive(Debug, Serialize)]
pub struct CredentialLoad {
    pub credential: String,
    pub running: usize,
    pub queued: usize,
}

/// `GET /api/usage`: the latest report per credential and window, the thresholds, the load.
pub async fn usage(sessions: &Sessions) -> Result<Usage> {
    let now = time::now();
    let windows = sessions
        .store
        .usage()
        .await?
        .into_iter()
        .map(|row| UsageView { stale: !fresh(&row, now), row })
        .collect::<Vec<_>>();
    let mut credentials: Vec<CredentialLoad> = Vec::new();
    for t in sessions.store.live_turns().await? {
        let Some(c) = t.credential else { continue };
        let i = match credentials.iter().position(|l| l.credential == c) {
            Some(i) => i,
            None => {
                credentials.push(CredentialLoad { credential: c, running: 0, queued: 0 });
                credentials.len() - 1
            }
        };
        if t.state == TurnState::Queued {
            credentials[i].queued += 1;
        } else {
            credentials[i].running += 1;
        }
    }
    let s = &sessions.settings;
    Ok(Usage {
        windows,
        warn_pct: s.usage_warn_pct,
        gate_pct: s.usage_gate_pct,
        max_runs_per_credential: s.max_runs_per_credential,
        credentials,
    })
}
