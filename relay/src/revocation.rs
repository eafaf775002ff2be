//! What revoking a token does beyond the store: its open streams end with `revoked`, and the
//! streamed commands and background processes it started are killed. Run at once by
//! `DELETE /api/tokens/{id}`, and every `HANGAR_STREAM_RECHECK_SECONDS` for tokens with open
//! streams (revoked by anyone else with access to the store).
use std::sync::Arc;

use crate::{auth::Caller, detached::Detached, processes::At, store::Scope, streams::Reason, Relay};

pub async fn revoked(relay: &Relay, token_id: &str) {
    // Streamed commands die with their streams (their kill guard stays armed for `revoked`).
    relay.streams.close_token(token_id, Reason::Revoked);
    let who = Caller { token_id: token_id.to_string(), name: String::new(), scope: Scope::User };
    let Ok(sandboxes) = relay.store.sandboxes() else { return };
    for mut row in sandboxes.into_iter().filter(|s| s.state == "running") {
        let envd = match relay.sandboxes.daemon(&relay.store, &mut row).await {
            Ok(Some(envd)) => envd,
            Ok(None) => {
                let d = Detached { relay, sandbox: &row, caller: &who };
                for p in d.list().await.unwrap_or_default().iter().filter(|p| p.state == "running") {
                    let _ = d.kill(&p.process_id).await;
                }
                continue;
            }
            Err(_) => continue,
        };
        let at = At { envd: &envd, key: &relay.key, caller: &who, sandbox: &row };
        let Ok(list) = relay.processes.list(&at).await else { continue };
        for p in list.iter().filter(|p| p.state == "running") {
            let _ = relay.processes.kill(&at, &p.process_id).await;
        }
    }
}

/// Every recheck interval, ends what revoked tokens still have open.
pub async fn recheck(relay: Arc<Relay>) {
    let mut tick = tokio::time::interval(relay.limits.recheck());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for token in relay.streams.tokens() {
            let live = matches!(relay.store.token(&token), Ok(Some(t)) if t.revoked_at.is_none());
            if !live {
                revoked(&relay, &token).await;
            }
        }
    }
}
