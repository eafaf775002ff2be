//! Sandboxes whose backing resource vanished outside hangar (a pod deleted or evicted, its node
//! lost): the one entry point any provider reports them through, and what it does.
//!
//! A provider holds a `GoneSender` (`providers::gone`) and says what it saw (`vanished`, or after a full listing,
//! `present`); the relay's task (`follow`) makes each such sandbox `gone`: its state is stored,
//! its streams end (`gone`), and its live turns end `crashed/sandbox_gone` (docs/sessions.md,
//! "Turns: states and reasons"). A sandbox hangar itself is creating or destroying is left alone.
use std::{collections::HashSet, sync::Arc};

pub use crate::providers::gone::{channel, GoneReceiver, GoneSender, Seen};
use crate::{error::Result, events, sessions::Sessions, store::SandboxState, store::TurnState};

/// The relay's task: makes every sandbox the providers report `gone`.
pub async fn follow(sessions: Arc<Sessions>, mut seen: GoneReceiver) {
    while let Some(s) = seen.recv().await {
        let result = match s {
            Seen::Vanished { sandbox_id, why } => vanished(&sessions, &sandbox_id, &why).await,
            Seen::Present { provider, ids, listed_at } => absent(&sessions, provider, &ids, listed_at).await,
        };
        if let Err(e) = result {
            events::CleanupFailed { what: "marking a vanished sandbox gone", error: &e.to_string() }.emit();
        }
    }
}

/// The entry point: the sandbox `sandbox_id` is gone, for `why`.
pub async fn vanished(sessions: &Sessions, sandbox_id: &str, why: &str) -> Result<()> {
    let Some(row) = sessions.sandboxes.mark_gone(sandbox_id).await? else { return Ok(()) };
    crate::sessions::end_in_sandbox(sessions, &row, TurnState::Crashed, "sandbox_gone").await?;
    events::SandboxGone { sandbox: &row.name, provider: &row.provider, why }.emit();
    events::SandboxChanged { name: &row.name, provider: &row.provider, change: "gone" }.emit();
    Ok(())
}

async fn absent(sessions: &Sessions, provider: &str, ids: &HashSet<String>, listed_at: i64) -> Result<()> {
    let missing = sessions.store.sandboxes().await?.into_iter().filter(|r| {
        r.provider == provider && r.state != SandboxState::Gone && r.created_at < listed_at && !ids.contains(&r.id)
    });
    for row in missing {
        vanished(sessions, &row.id, "its resource no longer exists (found missing when the provider listed them)")
            .await?;
    }
    Ok(())
}
