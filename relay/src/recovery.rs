//! What a relay finds when it starts: the commands and processes an earlier run started, found
//! by the tags it gave them (nothing the sandbox says decides anything: each tag's MAC is
//! checked). A streamed command whose relay died (`kill -9`, a crash) has lost its client, and a
//! streamed command whose client is gone is killed: so it is, unless a pause, destroy or graceful
//! shutdown spared it. Unstreamed commands run to their end or timeout, and count against their
//! token's limit until then. Background processes are adopted as they are. What a token revoked
//! while the relay was down started is killed.
use std::sync::Arc;

use futures::{Stream, StreamExt};
use hangar_proto::{
    ext::{AttachRequest, ListRequest},
    process::{process_selector, ConnectRequest, ProcessSelector},
};

use crate::{
    auth::{Caller, MacKey},
    envd::Envd,
    events,
    exec::{self, Execs, Mode},
    processes::{self, Processes},
    sandboxes::Sandboxes,
    store::{SandboxRow, SandboxState, Store},
};

/// What recovery reads and acts through: the sandboxes and the store, the processes and the
/// execs it adopts or kills, and the MAC key and this run's id the tags are checked against.
pub struct Recovery {
    pub sandboxes: Arc<Sandboxes>,
    pub store: Arc<Store>,
    pub processes: Arc<Processes>,
    pub execs: Arc<Execs>,
    pub key: MacKey,
    pub run: String,
}

/// What recovery did in one sandbox.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Streamed commands orphaned by a crash, killed.
    pub orphans_killed: usize,
    /// Commands and processes of revoked tokens, killed.
    pub revoked_killed: usize,
    /// Unstreamed (and spared streamed) commands left to run, counted against their tokens.
    pub adopted: usize,
    /// Background processes followed again by the relay (a daemon without hangar's ring).
    pub followed: usize,
}

/// Looks at every running sandbox once, at start.
pub async fn recover(relay: Recovery) {
    let sandboxes = match relay.sandboxes.list().await {
        Ok(s) => s,
        Err(e) => {
            events::RecoveryFailed { sandbox: "*", error: &e.to_string() }.emit();
            return;
        }
    };
    let revoked = match relay.store.revoked_tokens().await {
        Ok(r) => r,
        Err(e) => {
            events::RecoveryFailed { sandbox: "*", error: &e.to_string() }.emit();
            return;
        }
    };
    for mut row in sandboxes.into_iter().filter(|s| s.state == SandboxState::Running) {
        match sandbox(&relay, &mut row, &revoked).await {
            Ok(r) => events::Recovered {
                sandbox: &row.name,
                orphans_killed: r.orphans_killed,
                revoked_killed: r.revoked_killed,
                adopted: r.adopted,
                followed: r.followed,
            }
            .emit(),
            Err(e) => events::RecoveryFailed { sandbox: &row.name, error: &e.to_string() }.emit(),
        }
    }
}

async fn kill(envd: &Envd, pid: u32) -> Result<(), tonic::Status> {
    envd.kill_pid(pid).await
}

async fn sandbox(relay: &Recovery, row: &mut SandboxRow, revoked: &[String]) -> crate::error::Result<Recovered> {
    let mut done = Recovered::default();
    // Processes without a daemon: the relay's rows say whose they are.
    let Some(envd) = relay.sandboxes.daemon(row).await? else {
        for token in revoked {
            let who = Caller::of_token(token);
            done.revoked_killed += processes::kill_all(&relay.processes, &who, row).await?;
        }
        return Ok(done);
    };
    let list = running(&envd).await?;
    let spared = relay.store.spared_execs(&row.id).await?;
    let mut running_tags = Vec::new();
    for (pid, tag) in &list {
        let Some(tag) = tag.as_deref() else { continue };
        running_tags.push(tag.to_string());
        let Some(exec::ExecTag { token, mode, run }) = exec::parse_tag(&relay.key, row, tag) else { continue };
        // This run's own commands (started while recovery runs) are not an earlier run's.
        if run == relay.run {
            continue;
        }
        if revoked.contains(&token) {
            kill(&envd, *pid).await.map_err(|s| crate::error::daemon_error("killing a command", s))?;
            done.revoked_killed += 1;
        } else if mode == Mode::Streamed && !spared.iter().any(|t| t == tag) {
            kill(&envd, *pid).await.map_err(|s| crate::error::daemon_error("killing a command", s))?;
            done.orphans_killed += 1;
        } else {
            // Counts against its token until it ends: its end is read from the daemon.
            let slot = relay.execs.unstreamed.adopt(&token);
            let envd = envd.clone();
            let tag = tag.to_string();
            tokio::spawn(async move {
                let _slot = slot;
                // Read to its end: the stream ends with the process (or the daemon).
                if let Ok(mut s) = until_end(&envd, tag).await {
                    while let Some(Ok(())) = s.next().await {}
                }
            });
            done.adopted += 1;
        }
    }
    relay.store.forget_spared_execs(&row.id, &running_tags).await?;
    // Background processes: a revoked token's are killed; the rest are adopted when listed (on
    // hangar-envd, whose ring kept their output), or followed again now (on E2B's envd, where
    // what they print while nobody follows them is lost).
    for token in revoked {
        let who = Caller::of_token(token);
        done.revoked_killed += processes::kill_all(&relay.processes, &who, row).await?;
    }
    if envd.is_e2b() {
        let live: Vec<String> =
            relay.store.tokens().await?.into_iter().filter(|t| t.revoked_at.is_none()).map(|t| t.id).collect();
        done.followed = processes::recover_followed(&relay.processes, row, &envd, &live).await?;
    }
    Ok(done)
}

/// The running processes with their tags, from hangar's `List` or E2B's.
async fn running(envd: &Envd) -> crate::error::Result<Vec<(u32, Option<String>)>> {
    let failed = |s| crate::error::daemon_error("listing processes", s);
    Ok(if envd.is_e2b() {
        let list = envd.process().list(hangar_proto::process::ListRequest {}).await.map_err(failed)?;
        list.into_inner().processes.into_iter().map(|p| (p.pid, p.tag)).collect()
    } else {
        let list = envd.processes().list(ListRequest { running_only: true }).await.map_err(failed)?;
        list.into_inner().processes.into_iter().map(|p| (p.pid, p.tag)).collect()
    })
}

/// The events of the process tagged `tag` until its end: hangar's `Attach`, or E2B's `Connect`.
async fn until_end(
    envd: &Envd,
    tag: String,
) -> Result<std::pin::Pin<Box<dyn Stream<Item = Result<(), tonic::Status>> + Send>>, tonic::Status> {
    let process = Some(ProcessSelector { selector: Some(process_selector::Selector::Tag(tag)) });
    Ok(if envd.is_e2b() {
        Box::pin(envd.process().connect(ConnectRequest { process }).await?.into_inner().map(|r| r.map(|_| ())))
    } else {
        let req = AttachRequest { process, since: None };
        Box::pin(envd.processes().attach(req).await?.into_inner().map(|r| r.map(|_| ())))
    })
}
