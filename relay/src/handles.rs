//! The handles every request shares (`Relay`): each area's own, built once by `app::bind`.
//! A leaf: only the wiring (`app`) and the API (`api`) import it, and no area takes it whole;
//! each is handed the handles it uses (`scripts/check-layers` keeps both true).
use std::sync::Arc;

use crate::{auth, exec, fleet, inbox, jobs, processes, revocation, sandboxes, secrets, sessions, streams, watch};

/// What every request shares.
pub struct Relay {
    pub sandboxes: Arc<sandboxes::Sandboxes>,
    pub watches: watch::Watches,
    pub processes: Arc<processes::Processes>,
    pub execs: Arc<exec::Execs>,
    pub revoker: Arc<revocation::Revoker>,
    pub streams: Arc<streams::Streams>,
    pub sessions: Arc<sessions::Sessions>,
    pub jobs: Arc<jobs::Jobs>,
    /// The open inbox items, in memory as well as in the store.
    pub inbox: Arc<inbox::Inbox>,
    /// The fleet view's memory (sandboxes, sessions, jobs, live pictures) and its change log.
    pub fleet: Arc<fleet::Fleet>,
    pub secrets: Arc<secrets::Secrets>,
    /// Browsers' one-use tickets into SSE streams (in memory only).
    pub tickets: auth::tickets::Tickets,
    pub tokens: auth::Tokens,
}
