//! What a relay finds when it starts: the commands and processes an earlier run started, found
//! by the tags it gave them (nothing the sandbox says decides anything: each tag's MAC is
//! checked). A streamed command whose relay died (`kill -9`, a crash) has lost its client, and a
//! streamed command whose client is gone is killed: so it is, unless a pause, destroy or graceful
//! shutdown spared it. Unstreamed commands run to their end or timeout, and count against their
//! token's limit until then. Background processes are adopted as they are. What a token revoked
//! while the relay was down started is killed.
use std::sync::Arc;

use futures::StreamExt;
use hangar_proto::{
    ext::{AttachRequest, ListRequest, SignalRequest},
    process::{process_selector, ProcessSelector},
};

use crate::{
    app::Relay,
    auth::Caller,
    envd::Envd,
    events,
    exec::{self, Mode},
    processes,
    store::{SandboxRow, SandboxState},
};

/// What recovery did in one sandbox.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Streamed commands orphaned by a crash, killed.
    pub orphans_killed: usize,
    /// Commands and processes of revoked tokens, killed.
    pub revoked_killed: usize,
    /// Unstreamed (and spared streamed) commands left to run, counted against their tokens.
    pub adopted: usize,
}

/// Looks at every running sandbox once, at start.
pub async fn recover(relay: Arc<Relay>) {
    let sandboxes = match relay.sandboxes.list() {
        Ok(s) => s,
        Err(e) => {
            events::RecoveryFailed { sandbox: "*", error: &e.to_string() }.emit();
            return;
        }
    };
    let revoked = match relay.store.revoked_tokens() {
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
            }
            .emit(),
            Err(e) => events::RecoveryFailed { sandbox: &row.name, error: &e.to_string() }.emit(),
        }
    }
}

fn by_pid(pid: u32) -> Option<ProcessSelector> {
    Some(ProcessSelector { selector: Some(process_selector::Selector::Pid(pid)) })
}

async fn kill(envd: &Envd, pid: u32) -> Result<(), tonic::Status> {
    let req = SignalRequest { process: by_pid(pid), signal: libc::SIGKILL, escalate_after_ms: None };
    match envd.processes().signal(req).await {
        Ok(_) => Ok(()),
        // Ended meanwhile.
        Err(s) if s.code() == tonic::Code::NotFound => Ok(()),
        Err(s) => Err(s),
    }
}

async fn sandbox(relay: &Arc<Relay>, row: &mut SandboxRow, revoked: &[String]) -> crate::error::Result<Recovered> {
    let mut done = Recovered::default();
    // Processes without a daemon: the relay's rows say whose they are.
    let Some(envd) = relay.sandboxes.daemon(row).await? else {
        for token in revoked {
            let who = Caller::of_token(token);
            done.revoked_killed += processes::kill_all(relay, &who, row).await?;
        }
        return Ok(done);
    };
    let list = envd
        .processes()
        .list(ListRequest { running_only: true })
        .await
        .map_err(|s| crate::envd::daemon_error("listing processes", s))?
        .into_inner()
        .processes;
    let spared = relay.store.spared_execs(&row.id)?;
    let mut running_tags = Vec::new();
    for p in &list {
        let Some(tag) = p.tag.as_deref() else { continue };
        running_tags.push(tag.to_string());
        let Some(exec::ExecTag { token, mode, run }) = exec::parse_tag(&relay.key, row, tag) else { continue };
        // This run's own commands (started while recovery runs) are not an earlier run's.
        if run == relay.run {
            continue;
        }
        if revoked.contains(&token) {
            kill(&envd, p.pid).await.map_err(|s| crate::envd::daemon_error("killing a command", s))?;
            done.revoked_killed += 1;
        } else if mode == Mode::Streamed && !spared.iter().any(|t| t == tag) {
            kill(&envd, p.pid).await.map_err(|s| crate::envd::daemon_error("killing a command", s))?;
            done.orphans_killed += 1;
        } else {
            // Counts against its token until it ends: its end is read from the daemon.
            let slot = relay.unstreamed.adopt(&token);
            let envd = envd.clone();
            let tag = tag.to_string();
            tokio::spawn(async move {
                let _slot = slot;
                let req = AttachRequest {
                    process: Some(ProcessSelector { selector: Some(process_selector::Selector::Tag(tag)) }),
                    since: None,
                };
                // Read to its end: the stream ends with the process (or the daemon).
                if let Ok(s) = envd.processes().attach(req).await {
                    let mut s = s.into_inner();
                    while let Some(Ok(_)) = s.next().await {}
                }
            });
            done.adopted += 1;
        }
    }
    relay.store.forget_spared_execs(&row.id, &running_tags)?;
    // Background processes: a revoked token's are killed; the rest are adopted when listed.
    for token in revoked {
        let who = Caller::of_token(token);
        done.revoked_killed += processes::kill_all(relay, &who, row).await?;
    }
    Ok(done)
}
