//! A sandbox's requests: one task per sandbox with live turns lists each live turn's inbox
//! directory whenever the daemon's watch of the agent's inbox reports a change there (every
//! `HANGAR_SESSION_POLL_SECONDS` without a daemon), reads each new request as the agent (so a
//! link the agent planted reaches only what the agent can read), and opens its item for the
//! turn whose directory holds it: what a request says of its session or turn is checked against
//! that, never believed.
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use futures::StreamExt;
use hangar_agents::{
    event::EventType,
    inbox::{self as protocol, Ask, Request, MAX_FILE_BYTES},
};
use hangar_proto::{
    ext::watch_event,
    filesystem::{watch_dir_response, WatchDirRequest},
};
use serde_json::json;

use super::{new_item, of_session, open, tell_session};
use crate::sandboxes::run::User;
use crate::{
    error::{daemon_error, Error, Result},
    events,
    inbox::Inbox,
    sessions::{
        self,
        supervisor::{Place, Shell, SCRIPT_TIMEOUT},
    },
    store::{ItemKind, ItemState, SessionRow, TurnRow},
    text::sh_quote,
};

/// A daemon's watch of the inbox directory: each item says what to list again, if anything (a
/// keep-alive says nothing), or is its stream's failure.
type Changes = std::pin::Pin<Box<dyn futures::Stream<Item = std::result::Result<Option<Dirty>, tonic::Status>> + Send>>;

/// How often a watcher with a daemon looks again anyway: whether its sandbox still has live
/// turns, and, under E2B's envd, every live turn's inbox (its watch may miss the first files of
/// a directory made after it started; hangar's reports them, and says when it lost events).
const RECHECK: Duration = Duration::from_secs(5);
/// The most request files one scan reads, and the most bytes (past the first file): a flood of
/// files is taken a batch at a time, oldest first, each batch one script run.
const BATCH_FILES: usize = 4096;
const BATCH_BYTES: usize = 1024 * 1024;
/// The most files one scan moves aside (no bytes of theirs cross: far cheaper than a read).
const BATCH_ASIDE: usize = 16384;
/// The most requests that may wait in one sandbox; a request past them is moved aside.
const MAX_WAITING: usize = 256;
/// The most bytes of names and reasons one scan's script carries to move aside.
const REFUSALS_BYTES: usize = 64 * 1024;

/// Starts the sandbox's watcher unless one runs.
pub fn ensure(inbox: &Arc<Inbox>, sandbox_id: &str) {
    if !inbox.watchers().insert(sandbox_id.to_string()) {
        return;
    }
    let inbox = inbox.clone();
    let sandbox_id = sandbox_id.to_string();
    tokio::spawn(async move {
        let mut seen = HashMap::new();
        let mut wait = Duration::from_secs(1);
        loop {
            match watch(&inbox, &sandbox_id, &mut seen).await {
                Ok(()) => return,
                Err(e) => {
                    events::InboxTrouble { item: &sandbox_id, error: &e.to_string() }.emit();
                    if matches!(e, Error::NotFound(_)) || stop(&inbox, &sandbox_id).await {
                        return;
                    }
                }
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(60));
        }
    });
}

/// Whether the sandbox has no live turns left, in which case its watcher ends. A turn that
/// starts between the look and the watcher's end found the watcher running and started none, so
/// the store is asked again once the watcher is gone: a live turn then takes the watcher back
/// (unless that turn started a new one).
async fn stop(inbox: &Inbox, sandbox_id: &str) -> bool {
    let live = |l: Result<Vec<_>>| l.map_or(true, |l| !l.is_empty());
    if live(live_sessions(inbox, sandbox_id).await) {
        return false;
    }
    inbox.watchers().remove(sandbox_id);
    !(live(live_sessions(inbox, sandbox_id).await) && inbox.watchers().insert(sandbox_id.to_string()))
}

/// The sandbox's sessions with a live turn, and that turn.
async fn live_sessions(inbox: &Inbox, sandbox_id: &str) -> Result<Vec<(SessionRow, TurnRow)>> {
    let mut live = Vec::new();
    for s in inbox.store.sessions_in_sandbox(sandbox_id).await? {
        if let Some(t) = inbox.store.live_turns_of(&s.id).await?.into_iter().next() {
            live.push((s, t));
        }
    }
    Ok(live)
}

/// What a watcher has read in one turn's inbox: request files by name, progress files by their
/// last content, and the files its next scan moves aside, with why.
#[derive(Default)]
struct Seen {
    requests: HashSet<String>,
    progress: HashMap<String, Vec<u8>>,
    refusals: Vec<(String, String)>,
}

/// What a watcher has read, by turn.
type SeenByTurn = HashMap<String, Seen>;

/// What a change in the inbox directory asks to be listed again.
#[derive(Debug, Clone, PartialEq)]
enum Dirty {
    /// One turn's directory (the first component of the changed path).
    Turn(String),
    /// Every live turn's: events were lost, or a change is in none of them.
    All,
}

impl Dirty {
    /// The change's path, relative to the inbox directory.
    fn of(name: &str) -> Dirty {
        match name.split('/').next() {
            Some(t) if !t.is_empty() && t != "." && t != ".." => Dirty::Turn(t.to_string()),
            _ => Dirty::All,
        }
    }
}

/// The turns' directories to list at the next scan.
#[derive(Debug, Default)]
struct Pending {
    all: bool,
    turns: HashSet<String>,
}

impl Pending {
    fn all() -> Pending {
        Pending { all: true, turns: HashSet::new() }
    }

    fn add(&mut self, d: Dirty) {
        match d {
            Dirty::Turn(t) => {
                self.turns.insert(t);
            }
            Dirty::All => self.all = true,
        }
    }

    fn merge(&mut self, other: Pending) {
        self.all |= other.all;
        self.turns.extend(other.turns);
    }

    fn is_empty(&self) -> bool {
        !self.all && self.turns.is_empty()
    }

    /// Whether the scan lists this turn's directory: asked for, or a turn not listed before.
    fn lists(&self, turn: &str, seen: &SeenByTurn) -> bool {
        self.all || self.turns.contains(turn) || !seen.contains_key(turn)
    }
}

async fn watch(inbox: &Inbox, sandbox_id: &str, seen: &mut SeenByTurn) -> Result<()> {
    let row = inbox.sandboxes.get(sandbox_id).await?;
    let shell = Shell::open(&inbox.sessions, row).await?;
    let place = shell.place().await?;
    let mut pending = scan(inbox, &shell, &place, seen, &Pending::all()).await?;
    let e2b = shell.envd.as_ref().is_some_and(|e| e.is_e2b());
    let mut changes: Option<Changes> = match &shell.envd {
        // The agent's commands write in the same sandbox through the same mount: inotify sees
        // their writes even on a FUSE or network filesystem.
        Some(envd) => {
            // Recursive: each turn's directory is below it, made as turns start.
            let req = WatchDirRequest {
                path: place.inbox_root(),
                recursive: true,
                include_entry: false,
                allow_network_mounts: true,
            };
            let failed = |s| daemon_error("watching the agent's inbox", s);
            // E2B's envd has no hangar watch: its own `WatchDir` says as much (a change), and
            // its `data_loss` ends the stream, which starts the watcher again (and a rescan).
            Some(if e2b {
                let stream = envd.filesystem().watch_dir(req).await.map_err(failed)?.into_inner();
                Box::pin(stream.map(|m| {
                    m.map(|m| match m.event {
                        Some(watch_dir_response::Event::Filesystem(f)) => Some(Dirty::of(&f.name)),
                        _ => None,
                    })
                }))
            } else {
                let stream = envd.files().watch_dir(req).await.map_err(failed)?.into_inner();
                Box::pin(stream.map(|m| {
                    m.map(|m| match m.event.and_then(|e| e.event) {
                        Some(watch_event::Event::Filesystem(f)) => Some(Dirty::of(&f.name)),
                        Some(watch_event::Event::Overflow(_)) => Some(Dirty::All),
                        _ => None,
                    })
                }))
            })
        }
        None => None,
    };
    // A request written between the first scan and the watch's start.
    pending.merge(scan(inbox, &shell, &place, seen, &Pending::all()).await?);
    loop {
        // Directories left with files by the last scan are listed again at once.
        if pending.is_empty() {
            match changes.as_mut() {
                Some(stream) => tokio::select! {
                    m = stream.next() => match m {
                        Some(Ok(Some(d))) => pending.add(d),
                        Some(Ok(None)) => continue,
                        None => return Err(Error::daemon("the daemon ended the inbox watch")),
                        Some(Err(s)) => return Err(daemon_error("watching the agent's inbox", s)),
                    },
                    _ = tokio::time::sleep(RECHECK) => pending.all = e2b,
                },
                None => {
                    tokio::time::sleep(inbox.sessions.settings.poll).await;
                    pending.all = true;
                }
            }
        }
        if stop(inbox, sandbox_id).await {
            return Ok(());
        }
        if pending.is_empty() {
            continue;
        }
        // A burst of writes (a temporary file, then its rename) is one listing.
        tokio::time::sleep(Duration::from_millis(20)).await;
        if let Some(stream) = changes.as_mut() {
            while let Ok(Some(Ok(d))) = tokio::time::timeout(Duration::ZERO, stream.next()).await {
                if let Some(d) = d {
                    pending.add(d);
                }
            }
        }
        pending = scan(inbox, &shell, &place, seen, &pending).await?;
    }
}

/// Scans the inbox of each live turn `pending` lists (`scan_turn`), one script run each;
/// forgets the turns no longer live. The turns whose files are left for the next scan.
async fn scan(
    inbox: &Inbox,
    shell: &Shell<'_>,
    place: &Place,
    seen: &mut SeenByTurn,
    pending: &Pending,
) -> Result<Pending> {
    let live = live_sessions(inbox, &shell.row.id).await?;
    seen.retain(|turn, _| live.iter().any(|(_, t)| &t.id == turn));
    let mut more = Pending::default();
    for (session, turn) in &live {
        if !pending.lists(&turn.id, seen) {
            continue;
        }
        let seen = seen.entry(turn.id.clone()).or_default();
        if scan_turn(inbox, shell, place, (session, turn), seen).await? {
            more.add(Dirty::Turn(turn.id.clone()));
        }
    }
    Ok(more)
}

/// Lists one turn's inbox directory and reads what is new, oldest first and at most a batch of
/// it, in one script run; what is no request is moved aside there, into `refused/`, with a line
/// `<name>: <why>` in `refused/.reasons`, as the agent. Whether files are left for the next scan.
async fn scan_turn(
    inbox: &Inbox,
    shell: &Shell<'_>,
    place: &Place,
    (session, turn): (&SessionRow, &TurnRow),
    seen: &mut Seen,
) -> Result<bool> {
    let mut args = vec![
        place.inbox(&turn.id),
        BATCH_FILES.to_string(),
        BATCH_BYTES.to_string(),
        MAX_FILE_BYTES.to_string(),
        BATCH_ASIDE.to_string(),
    ];
    // The script is one argument of at most 128 KiB (the kernel's MAX_ARG_STRLEN): what does
    // not fit waits for the next scan.
    let mut room = REFUSALS_BYTES;
    let fit =
        seen.refusals.iter().take_while(|(n, w)| room.checked_sub(n.len() + w.len() + 8).map(|r| room = r).is_some());
    let fit = fit.count();
    for (name, why) in seen.refusals.drain(..fit) {
        args.extend([name, why]);
    }
    args.push("--".into());
    args.extend(seen.requests.iter().cloned());
    let quoted: Vec<String> = args.iter().map(|a| sh_quote(a)).collect();
    let script = format!("set -- {}\n{SCAN}", quoted.join(" "));
    let out = shell.script(User::Agent, &script, SCRIPT_TIMEOUT).await?;
    let listing = Listing::parse(&out.stdout);
    if listing.moved > 0 {
        events::InboxFilesRefused { sandbox: &shell.row.id, files: listing.moved }.emit();
    }
    let mut present: HashSet<&str> = listing.known.iter().map(String::as_str).collect();
    for (name, body) in &listing.read {
        present.insert(name);
        if let Err(why) = admissible(name, body, &session.name, &turn.id) {
            refuse(seen, name, why);
            continue;
        }
        if name.starts_with("progress-") {
            if seen.progress.get(name) != Some(body) {
                seen.progress.insert(name.clone(), body.clone());
                take(inbox, shell, place, (session, turn), name, body).await?;
            }
            continue;
        }
        let id = name.trim_end_matches(".json");
        if inbox.store.has_request(&shell.row.id, id).await? {
            seen.requests.insert(name.clone());
            continue;
        }
        if seen.requests.len() >= MAX_WAITING {
            refuse(seen, name, format!("more than {MAX_WAITING} requests wait in this sandbox"));
            continue;
        }
        seen.requests.insert(name.clone());
        take(inbox, shell, place, (session, turn), name, body).await?;
        if !inbox.store.has_request(&shell.row.id, id).await? {
            // `take` said why in its event; the agent reads the gist.
            refuse(seen, name, NOT_TAKEN.to_string());
        }
    }
    // A request its command removed (answered) may come back under the same name only as a
    // new request: the store's record of it says it was taken. A progress file the batch had
    // no room for is still there.
    seen.requests.retain(|n| present.contains(n.as_str()));
    if listing.more == 0 {
        seen.progress.retain(|n, _| present.contains(n.as_str()));
    }
    // Again at once while a scan makes headway; files that cannot be moved wait for a change.
    Ok((listing.more > 0 || !seen.refusals.is_empty()) && listing.moved + listing.read.len() > 0)
}

/// What the agent reads for a request `take` opened no item for.
const NOT_TAKEN: &str = "it asks for an approval its session cannot give, or names no approval of its turn";

/// Whether a file read from a turn's inbox is a request the watcher hands to `take`, or why not.
fn admissible(name: &str, body: &[u8], session: &str, turn: &str) -> std::result::Result<(), String> {
    let req = Request::parse(body).map_err(|e| e.to_string())?;
    if protocol::request_file_name(&req) != name {
        return Err("the file's name is not its request's".into());
    }
    // The directory says whose request it is; a request that says otherwise was not written
    // by that turn's agent-side command.
    if req.session.as_deref().is_some_and(|s| s != session) || req.turn.as_deref().is_some_and(|t| t != turn) {
        return Err("it names another session or turn than the one whose inbox holds it".into());
    }
    Ok(())
}

/// Marks a file to be moved aside by the next scan (which runs at once), with the reason the
/// agent reads for it.
fn refuse(seen: &mut Seen, name: &str, mut why: String) {
    seen.requests.remove(name);
    if let Some((cut, _)) = why.char_indices().nth(200) {
        why.truncate(cut);
    }
    seen.refusals.push((name.to_string(), why));
}

/// The scan, run by bash as the agent after `set --` gave it: the inbox directory, the batch's
/// most files and bytes, the largest request file, the most files to move aside; then the files to move aside with their
/// reasons (pairs) up to `--`; then the names the watcher has read already.
/// - `ls -1tr` lists oldest first with no process per file, read whole (a pipe read line by line
///   is read a byte per system call); a name `ls` could not print one a line (a newline in it)
///   is no request's, and the glob finds those first.
/// - Each new file is read by `read -N` (a builtin) and printed as `+ <name> <bytes>`, a line,
///   then its bytes; a known one present is `= <name>`; the last line is `. <moved> <left>`.
/// - A run stops at a full batch (files read, bytes, or files to move aside) and counts the rest.
/// - What is plainly no JSON object is moved aside in the same run; the relay parses the rest,
///   and what it refuses is moved aside by the next run.
/// - What is moved aside is moved with one `mv` per 256 files; its
///   reasons are appended to `refused/.reasons` in one write (a dot file: never listed, so
///   never moved over by a file of that name).
const SCAN: &str = r#"export LC_ALL=C
d=$1 max_files=$2 max_bytes=$3 max_body=$4 max_aside=$5
shift 5
mkdir -p -m 700 -- "$d" 2>/dev/null
cd -- "$d" 2>/dev/null || exit 0
declare -A known=()
aside=() why=()
n=0 bytes=0 more=0 moved=0
put_aside() {
    { [ -e "$1" ] || [ -L "$1" ]; } || return 0
    if [ ${#aside[@]} -lt "$max_aside" ]; then aside+=("$1"); why+=("$1: $2"); else more=$((more + 1)); fi
}
while [ $# -gt 1 ] && [ "$1" != -- ]; do known[$1]=r; put_aside "$1" "$2"; shift 2; done
shift
for f in "$@"; do [ -n "${known[$f]:-}" ] || known[$f]=k; done
valid() {
    local s=${1%.json} t
    [ "$s.json" = "$1" ] || return 1
    case $s in
    progress-*) t=${s#progress-}; [ ${#t} -ge 1 ] && [ ${#t} -le 64 ] && [[ $t != *[!A-Za-z0-9_-]* ]] ;;
    *) [ ${#s} -ge 8 ] && [ ${#s} -le 64 ] && [[ $s != *[!a-z0-9-]* ]] ;;
    esac
}
for f in *[!A-Za-z0-9._-]*; do put_aside "$f" "not a request file's name"; done
for f in "${!known[@]}"; do [ "${known[$f]}" = k ] && [ -e "$f" ] && printf '= %s\n' "$f"; done
listed=$(ls -1tr)
set -f
IFS=$'\n'
names=($listed)
unset IFS
total=${#names[@]}
for ((i = 0; i < total; i++)); do
    if [ $n -ge "$max_files" ] || [ $bytes -ge "$max_bytes" ] || [ ${#aside[@]} -ge "$max_aside" ]; then
        more=$((more + total - i))
        break
    fi
    f=${names[i]}
    [ -n "${known[$f]:-}" ] && continue
    [ "$f" = refused ] && continue
    case $f in *[!A-Za-z0-9._-]*) continue ;; esac
    valid "$f" || { put_aside "$f" "not a request file's name"; continue; }
    if [ -L "$f" ] || [ ! -f "$f" ]; then put_aside "$f" "not a regular file"; continue; fi
    body=
    IFS= read -r -d '' -N $((max_body + 1)) body < "$f"
    if [ ${#body} -gt "$max_body" ]; then put_aside "$f" "more than $max_body bytes"; continue; fi
    [[ $body =~ ^[[:space:]]*\{ ]] || { put_aside "$f" "not a request: no JSON object"; continue; }
    printf '+ %s %s\n%s' "$f" ${#body} "$body"
    n=$((n + 1)) bytes=$((bytes + ${#body}))
done
if [ ${#aside[@]} -gt 0 ]; then
    # Not a directory the agent can write (its own doing): set aside too, by the next scan.
    { [ -d refused ] && [ -w refused ]; } || { [ ! -e refused ] && [ ! -L refused ]; } || mv -f refused "refused.$$"
    mkdir -p -m 700 refused 2>/dev/null
    for ((i = 0; i < ${#aside[@]}; i += 256)); do mv -f -- "${aside[@]:i:256}" refused/ 2>/dev/null; done
    said=()
    for i in "${!aside[@]}"; do
        { [ -e "refused/${aside[i]}" ] || [ -L "refused/${aside[i]}" ]; } && said+=("${why[i]}")
    done
    moved=${#said[@]}
    [ $moved -eq 0 ] || printf '%s\n' "${said[@]}" >> refused/.reasons 2>/dev/null
fi
printf '. %s %s\n' $moved $more
"#;

/// What one scan printed.
#[derive(Debug, Default, PartialEq)]
struct Listing {
    /// Files the watcher had read, still there.
    known: Vec<String>,
    /// New files, oldest first, with their bytes.
    read: Vec<(String, Vec<u8>)>,
    /// Files moved aside.
    moved: usize,
    /// Files left for the next scan.
    more: usize,
}

impl Listing {
    /// Reads the scan's output; anything after a line it does not know is dropped (the next
    /// scan lists it again).
    fn parse(mut out: &[u8]) -> Listing {
        let mut l = Listing::default();
        while let Some(nl) = out.iter().position(|b| *b == b'\n') {
            let line = String::from_utf8_lossy(&out[..nl]).into_owned();
            out = &out[nl + 1..];
            if let Some(name) = line.strip_prefix("= ") {
                l.known.push(name.to_string());
            } else if let Some(head) = line.strip_prefix("+ ") {
                let Some((name, len)) = head.rsplit_once(' ') else { break };
                let Some(len) = len.parse::<usize>().ok().filter(|n| *n <= out.len()) else { break };
                l.read.push((name.to_string(), out[..len].to_vec()));
                out = &out[len..];
            } else if let Some(counts) = line.strip_prefix(". ") {
                let mut c = counts.split(' ').map(|n| n.parse::<usize>().unwrap_or(0));
                l.moved = c.next().unwrap_or(0);
                l.more = c.next().unwrap_or(0);
            } else {
                break;
            }
        }
        l
    }
}

/// One request file read from the inbox of `turn`: its item opened, or its progress recorded.
async fn take(
    inbox: &Inbox,
    shell: &Shell<'_>,
    place: &Place,
    (session, turn): (&SessionRow, &TurnRow),
    name: &str,
    body: &[u8],
) -> Result<()> {
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
    let redactor = inbox.secrets.redactor();
    match &req.ask {
        Ask::Progress { text, pct } => {
            let data = json!({ "text": redactor.text(text), "pct": pct, "source": "agent" });
            sessions::record_event(&inbox.sessions, &session.id, &turn.id, EventType::AgentProgress.as_str(), data)
                .await?;
        }
        Ask::Question { text, options } => {
            let title = format!("Question from {}", session.name);
            let mut item = new_item(ItemKind::Question, &session.person, title, redactor.text(text).into_owned());
            item.options = options.iter().map(|o| redactor.text(o).into_owned()).collect();
            item.request = Some(req.id.clone());
            item.expires_at = Some(item.created_at + inbox.expiry.as_secs_f64());
            open(inbox, of_session(item, session, Some(turn))).await?;
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
            // What a person's allow will name: the call as read here, before redaction.
            item.call = Some(tool.digest());
            item.request = Some(req.id.clone());
            item.expires_at = Some(item.created_at + inbox.expiry.as_secs_f64());
            open(inbox, of_session(item, session, Some(turn))).await?;
        }
        Ask::Tampered { request, held } => {
            // The hook's word, about one of its turn's approvals that a person allowed.
            let approval = inbox.store.item_of_request(sandbox_id, request).await?;
            let Some(approval) = approval.filter(|a| {
                a.kind == ItemKind::Approval && a.state == ItemState::Allowed && a.turn_id.as_deref() == Some(&turn.id)
            }) else {
                events::InboxRequestRefused { file: name, why: "it names no allowed approval of its turn" }.emit();
                return Ok(());
            };
            let held_title = redactor.text(&protocol::summarize(held)).into_owned();
            let text = format!(
                "The approval's request was changed after the hook wrote it: {} was shown and allowed, the hook held \
                 {held_title} and denied it (the agent's hook says so).",
                approval.title
            );
            let mut item = new_item(ItemKind::Denied, &session.person, format!("Denied: {held_title}"), text);
            let mut call = serde_json::to_value(held).unwrap_or_default();
            redactor.json(&mut call);
            item.tool = Some(call);
            item.request = Some(req.id.clone());
            let item = of_session(item, session, Some(turn));
            let data = json!({ "item": item.id, "approval": approval.ask_id, "shown": approval.title,
                               "held": held_title, "source": "agent" });
            if open(inbox, item.clone()).await? {
                tell_session(inbox, &item, "inbox.tampered", data).await?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change is its turn's directory to list; one in none of them (or lost events) lists all.
    #[test]
    fn a_change_lists_its_turn_and_a_turn_not_listed_before() {
        assert_eq!(Dirty::of("turn_a/abcdefgh.json"), Dirty::Turn("turn_a".into()));
        assert_eq!(Dirty::of("turn_a"), Dirty::Turn("turn_a".into()));
        assert_eq!(Dirty::of(""), Dirty::All);
        assert_eq!(Dirty::of("/x"), Dirty::All);
        assert_eq!(Dirty::of("../x"), Dirty::All);
        let mut seen = SeenByTurn::new();
        seen.insert("turn_a".into(), Seen::default());
        seen.insert("turn_b".into(), Seen::default());
        let mut p = Pending::default();
        assert!(p.is_empty());
        p.add(Dirty::of("turn_a/x.json"));
        assert!(p.lists("turn_a", &seen) && !p.lists("turn_b", &seen));
        assert!(p.lists("turn_new", &seen), "a turn never listed is listed");
        p.add(Dirty::All);
        assert!(p.lists("turn_b", &seen));
    }

    #[test]
    fn a_listing_is_read_by_its_lengths_whatever_the_bodies_hold() {
        let out = b"= known-one.json\n+ abcdefgh.json 9\n{\n+ x 1\n}+ progress-t.json 0\n. 3 7\n";
        let l = Listing::parse(out);
        assert_eq!(l.known, vec!["known-one.json".to_string()]);
        assert_eq!(
            l.read,
            vec![("abcdefgh.json".to_string(), b"{\n+ x 1\n}".to_vec()), ("progress-t.json".to_string(), Vec::new())]
        );
        assert_eq!((l.moved, l.more), (3, 7));
    }

    #[test]
    fn a_cut_listing_keeps_what_came_whole() {
        let l = Listing::parse(b"+ abcdefgh.json 9\n{\"v\":1}");
        assert!(l.read.is_empty() && l.more == 0, "{l:?}");
        let l = Listing::parse(b"= a.json\nnonsense\n= b.json\n");
        assert_eq!(l.known, vec!["a.json".to_string()]);
    }

    #[test]
    fn junk_and_requests_naming_another_turn_are_not_admissible() {
        assert!(admissible("abcdefgh.json", b"junk\n", "fix", "turn_1").is_err());
        let progress = br#"{"v":2,"id":"abcdefgh","created_at":1,"turn":"turn_1","kind":"progress","text":"x"}"#;
        assert_eq!(admissible("progress-turn_1.json", progress, "fix", "turn_1"), Ok(()));
        let elsewhere = Err("it names another session or turn than the one whose inbox holds it".to_string());
        assert_eq!(admissible("progress-turn_1.json", progress, "fix", "turn_2"), elsewhere);
        assert_eq!(
            admissible("progress-turn_2.json", progress, "fix", "turn_2"),
            Err("the file's name is not its request's".to_string())
        );
        let question = br#"{"v":2,"id":"abcdefgh","session":"other","created_at":1,"kind":"question","text":"x"}"#;
        assert_eq!(admissible("abcdefgh.json", question, "fix", "turn_1"), elsewhere);
        let unnamed = br#"{"v":2,"id":"abcdefgh","created_at":1,"kind":"question","text":"x"}"#;
        assert_eq!(admissible("abcdefgh.json", unnamed, "fix", "turn_1"), Ok(()));
    }
}
