//! What revoking a token does beyond the store: its open streams end with `revoked`, and the
//! streamed commands and background processes it started are killed. Run at once by the token
//! route's revoke, and every `HANGAR_STREAM_RECHECK_SECONDS` for tokens with open streams
//! (revoked by anyone else with access to the store). What could not be killed is said in the
//! log (`revocation_incomplete`), never dropped.
use std::sync::Arc;

use crate::{
    auth::Caller,
    error::{Error, Result},
    events,
    processes::{self, Processes},
    store::Store,
    streams::{Reason, Streams},
};

/// What revoking needs: the tokens' store, the streams to end and the processes to kill.
pub struct Revoker {
    pub store: Arc<Store>,
    pub streams: Arc<Streams>,
    pub processes: Arc<Processes>,
}

/// What a revocation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revoked {
    pub streams: usize,
    pub processes: usize,
}

/// Revokes a live token, then ends what it has open and running.
pub async fn revoke(relay: &Revoker, token_id: &str) -> Result<Revoked> {
    if !relay.store.revoke_token(token_id).await? {
        return Err(Error::not_found(format!("no live token {token_id:?}")));
    }
    events::TokenRevoked { id: token_id }.emit();
    Ok(revoked(relay, token_id).await)
}

/// Ends what a revoked token has open and running.
pub async fn revoked(relay: &Revoker, token_id: &str) -> Revoked {
    // Streamed commands die with their streams (their kill guard stays armed for `revoked`).
    let streams = relay.streams.close_token(token_id, Reason::Revoked);
    let who = Caller::of_token(token_id);
    let processes = processes::kill_everywhere(&relay.processes, &who).await;
    events::RevocationDone { token: token_id, streams, processes }.emit();
    Revoked { streams, processes }
}

/// Every recheck interval, ends what revoked tokens still have open.
pub async fn recheck(relay: Arc<Revoker>, every: std::time::Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for token in relay.streams.tokens() {
            match relay.store.token(&token).await {
                Ok(Some(t)) if t.revoked_at.is_none() => {}
                Ok(_) => {
                    revoked(&relay, &token).await;
                }
                // Not known to be revoked: ask again next time.
                Err(e) => events::RevocationIncomplete { token: &token, sandbox: "*", error: &e.to_string() }.emit(),
            }
        }
    }
}
