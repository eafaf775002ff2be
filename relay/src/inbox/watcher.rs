//! A sandbox's requests: one task per sandbox with live turns lists the agent's inbox
//! directory whenever the daemon's watch reports a change there (every
//! `HANGAR_SESSION_POLL_SECONDS` without a daemon), reads each new request as the agent (so a
//! link the agent planted reaches only what the agent can read), and opens its item.
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use futures::StreamExt;
use hangar_agents::inbox::{self as protocol, Ask, Request, MAX_FILE_BYTES};
use hangar_proto::filesystem::WatchDirRequest;
use serde_json::json;

use super::{new_item, of_session, open};
use crate::{
    app::Relay,
    envd::daemon_error,
    error::{Error, Result},
    events,
    sessions::{
        self,
        supervisor::{Place, Shell, SCRIPT_TIMEOUT},
    },
    store::{ItemKind, SessionRow, TurnRow},
    text::sh_quote,
};

/// A daemon's watch of the inbox directory: each item is a change (or its stream's failure).
type Changes = std::pin::Pin<Box<dyn futures::Stream<Item = std::result::Result<(), tonic::Status>> + Send>>;

/// How often a watcher with a daemon looks again anyway (whether its sandbox still has live
/// turns; a change the watch missed).
const RECHECK: Duration = Duration::from_secs(5);
/// The most request files one listing reads.
const MAX_FILES: usize = 64;

/// Starts the sandbox's watcher unless one runs.
pub fn ensure(relay: &Arc<Relay>, sandbox_id: &str) {
    if !relay.inbox.watchers().insert(sandbox_id.to_string()) {
        return;
    }
    let relay = relay.clone();
    let sandbox_id = sandbox_id.to_string();
    tokio::spawn(async move {
        let mut seen = Seen::default();
        let mut wait = Duration::from_secs(1);
        loop {
            match watch(&relay, &sandbox_id, &mut seen).await {
                Ok(()) => return,
                Err(e) => {
                    events::InboxTrouble { item: &sandbox_id, error: &e.to_string() }.emit();
                    if matches!(e, Error::NotFound(_)) || stop(&relay, &sandbox_id) {
                        return;
                    }
                }
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(60));
        }
    });
}

/// Whether the sandbox has no live turns left, in which case its watcher ends (under the
/// watchers' lock, so a turn that starts meanwhile starts a new one).
fn stop(relay: &Relay, sandbox_id: &str) -> bool {
    let mut watchers = relay.inbox.watchers();
    let live = match live_sessions(relay, sandbox_id) {
        Ok(l) => !l.is_empty(),
        Err(_) => true,
    };
    if !live {
        watchers.remove(sandbox_id);
    }
    !live
}

/// The sandbox's sessions with a live turn, and that turn.
fn live_sessions(relay: &Relay, sandbox_id: &str) -> Result<Vec<(SessionRow, TurnRow)>> {
    let mut live = Vec::new();
    for s in relay.store.sessions_in_sandbox(sandbox_id)? {
        if let Some(t) = relay.store.turns(&s.id)?.into_iter().find(|t| !t.state.is_terminal()) {
            live.push((s, t));
        }
    }
    Ok(live)
}

/// What a watcher has read: request files by name, progress files by their last content.
#[derive(Default)]
struct Seen {
    requests: HashSet<String>,
    progress: HashMap<String, Vec<u8>>,
}

async fn watch(relay: &Relay, sandbox_id: &str, seen: &mut Seen) -> Result<()> {
    let row = relay.sandboxes.get(sandbox_id)?;
    let shell = Shell::open(relay, row).await?;
    let place = shell.place().await?;
    scan(relay, &shell, &place, seen).await?;
    let mut changes: Option<Changes> = match &shell.envd {
        // The agent's commands write in the same sandbox through the same mount: inotify sees
        // their writes even on a FUSE or network filesystem.
        Some(envd) => {
            let req = WatchDirRequest {
                path: place.inbox(),
                recursive: false,
                include_entry: false,
                allow_network_mounts: true,
            };
            let failed = |s| daemon_error("watching the agent's inbox", s);
            // E2B's envd has no hangar watch: its own `WatchDir` says as much (a change), and
            // its `data_loss` ends the stream, which starts the watcher again (and a rescan).
            Some(if envd.is_e2b() {
                Box::pin(envd.filesystem().watch_dir(req).await.map_err(failed)?.into_inner().map(|m| m.map(|_| ())))
            } else {
                Box::pin(envd.files().watch_dir(req).await.map_err(failed)?.into_inner().map(|m| m.map(|_| ())))
            })
        }
        None => None,
    };
    // A request written between the first scan and the watch's start.
    scan(relay, &shell, &place, seen).await?;
    loop {
        let changed = match changes.as_mut() {
            Some(stream) => tokio::select! {
                m = stream.next() => match m {
                    Some(Ok(())) => true,
                    None => return Err(Error::daemon("the daemon ended the inbox watch")),
                    Some(Err(s)) => return Err(daemon_error("watching the agent's inbox", s)),
                },
                _ = tokio::time::sleep(RECHECK) => false,
            },
            None => {
                tokio::time::sleep(relay.sessions.settings.poll).await;
                true
            }
        };
        if stop(relay, sandbox_id) {
            return Ok(());
        }
        if changed || changes.is_none() {
            // A burst of writes (a temporary file, then its rename) is one listing.
            tokio::time::sleep(Duration::from_millis(20)).await;
            if let Some(stream) = changes.as_mut() {
                while let Ok(Some(Ok(()))) = tokio::time::timeout(Duration::ZERO, stream.next()).await {}
            }
        }
        scan(relay, &shell, &place, seen).await?;
    }
}

/// Lists the inbox directory and reads what is new.
async fn scan(relay: &Relay, shell: &Shell<'_>, place: &Place, seen: &mut Seen) -> Result<()> {
    let script = format!(
        "d={d}; mkdir -p -m 700 \"$d\" 2>/dev/null; cd \"$d\" || exit 0\n\
         for f in *.json; do [ -f \"$f\" ] && [ ! -L \"$f\" ] && printf '%s %s\\n' \"$(stat -c %s -- \"$f\")\" \"$f\"; done | head -n {MAX_FILES}",
        d = sh_quote(&place.inbox()),
    );
    let out = shell.run(false, &script, SCRIPT_TIMEOUT).await?;
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut present = HashSet::new();
    for line in listing.lines() {
        let Some((size, name)) = line.split_once(' ') else { continue };
        present.insert(name.to_string());
        if seen.requests.contains(name) {
            continue;
        }
        let progress = name.starts_with("progress-");
        if !progress && relay.store.has_request(&shell.row.id, name.trim_end_matches(".json"))? {
            seen.requests.insert(name.to_string());
            continue;
        }
        if size.parse::<usize>().map_or(true, |s| s > MAX_FILE_BYTES) {
            refuse(seen, name, &format!("{size} bytes, more than {MAX_FILE_BYTES}"));
            continue;
        }
        let read = format!("head -c {} -- {}/{}", MAX_FILE_BYTES + 1, sh_quote(&place.inbox()), sh_quote(name));
        let body = shell.run(false, &read, SCRIPT_TIMEOUT).await?.stdout;
        if progress {
            if seen.progress.get(name) != Some(&body) {
                seen.progress.insert(name.to_string(), body.clone());
                take(relay, shell, place, name, &body).await?;
            }
        } else {
            seen.requests.insert(name.to_string());
            take(relay, shell, place, name, &body).await?;
        }
    }
    // A request its command removed (answered) may come back under the same name only as a
    // new request: the store's record of it says it was taken.
    seen.requests.retain(|n| present.contains(n));
    seen.progress.retain(|n, _| present.contains(n));
    Ok(())
}

fn refuse(seen: &mut Seen, name: &str, why: &str) {
    seen.requests.insert(name.to_string());
    events::InboxRequestRefused { file: name, why }.emit();
}

/// One request file read: its item opened, or its progress recorded.
async fn take(relay: &Relay, shell: &Shell<'_>, place: &Place, name: &str, body: &[u8]) -> Result<()> {
    let sandbox_id = &shell.row.id;
    let req = match Request::parse(body) {
        Ok(r) if protocol::request_file_name(&r) == name => r,
        Ok(_) => {
            events::InboxRequestRefused { file: name, why: "the file's name is not its request's" }.emit();
            return Ok(());
        }
        Err(e) => {
            events::InboxRequestRefused { file: name, why: &e.to_string() }.emit();
            return Ok(());
        }
    };
    let live = live_sessions(relay, sandbox_id)?;
    // The session the request names, in this sandbox and running a turn; without a name, the
    // sandbox's one live session.
    let found = match req.session.as_deref() {
        Some(name) => live.into_iter().find(|(s, t)| s.name == name && req.turn.as_deref().is_none_or(|id| id == t.id)),
        None if live.len() == 1 => live.into_iter().next(),
        None => None,
    };
    let Some((session, turn)) = found else {
        events::InboxRequestRefused { file: name, why: "it names no live turn in this sandbox" }.emit();
        return Ok(());
    };
    let redactor = relay.secrets.redactor();
    match &req.ask {
        Ask::Progress { text, pct } => {
            let data = json!({ "text": redactor.text(text), "pct": pct, "source": "agent" });
            sessions::record_event(relay, &session.id, &turn.id, "agent.progress", data)?;
        }
        Ask::Question { text, options } => {
            let title = format!("Question from {}", session.name);
            let mut item = new_item(ItemKind::Question, &session.person, title, redactor.text(text).into_owned());
            item.options = options.iter().map(|o| redactor.text(o).into_owned()).collect();
            item.request = Some(req.id.clone());
            item.expires_at = Some(item.created_at + relay.inbox.expiry.as_secs_f64());
            open(relay, of_session(item, &session, Some(&turn)))?;
        }
        Ask::Approval { tool } => {
            if session.approvals.is_empty() || !place.split {
                // Nobody may answer it: the hook denies the call when its wait ends.
                let why = "an approval from a session without an approval policy and the uid split";
                events::InboxRequestRefused { file: name, why }.emit();
                return Ok(());
            }
            let title = redactor.text(&protocol::summarize(tool)).into_owned();
            let mut item = new_item(ItemKind::Approval, &session.person, title, String::new());
            let mut call = serde_json::to_value(tool).unwrap_or_default();
            redactor.json(&mut call);
            item.tool = Some(call);
            item.request = Some(req.id.clone());
            item.expires_at = Some(item.created_at + relay.inbox.expiry.as_secs_f64());
            open(relay, of_session(item, &session, Some(&turn)))?;
        }
    }
    Ok(())
}
