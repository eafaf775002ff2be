//! The inbox: what waits on a person (an `approval` of a held tool call, an agent's `question`)
//! and what they should know (a `failed` turn or job, a `denied` call).
//!
//! Agents reach it from inside their sandbox, which cannot reach the relay, through files: the
//! agent-side commands (`hangar-envd question|progress|approve`, protocol in
//! `hangar_agents::inbox`) write requests into their turn's `~/.hangar/inbox/<turn>/`, which the relay
//! learns of through the daemon's directory watch, or by polling without one (`watcher`). The
//! relay answers by writing into a directory the agent can read and not write (the uid split
//! of `sessions::supervisor`).
//!
//! Invariants:
//! - An agent never approves its own call: approvals are answered only where the uid split
//!   holds (elsewhere a session with an approval policy is refused), and only the relay writes
//!   the answers' directory.
//! - Everything in a request is the agent's text: redacted, and named as the agent's in every
//!   view. A request never names an item: item and approval ids are the relay's.
//! - A request is the turn's whose inbox directory holds it: what it says of its session or
//!   turn is checked against that, never believed.
//! - The first end of an item holds (`Store::end_item` moves only open items); open items are
//!   also kept in memory, which the fleet reads without the store.
//! - Every change (an item opened or ended) is published on the feed (`Change::Item`), after the
//!   open items in memory have it.
//! - A turn waits for input exactly while an ask of it is open: each ask that opens or ends
//!   settles its turn's state (`sessions::settle_input`), after the store has the change.
pub mod answers;
pub mod watcher;
use std::{
    collections::BTreeMap,
    collections::HashSet,
    sync::{Arc, Mutex, MutexGuard, Weak},
    time::Duration,
};

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::json;

use crate::{
    auth::Caller,
    error::{Error, Result},
    events,
    feed::{self, Change, Feed},
    refs,
    sandboxes::Sandboxes,
    secrets::Secrets,
    sessions::Sessions,
    store::{ItemKind, ItemState, JobState, SessionRow, Store, TurnRow},
    time,
};

pub use crate::store::ItemRow;

/// The fields of an item that hold the agent's own text.
pub const AGENT_TEXT: &[&str] = &["title", "text", "options", "tool"];
/// The most ended items `GET /api/inbox?ended=true` returns.
pub const MAX_ENDED: usize = 200;

/// What the inbox uses of the relay: handles the wiring builds once and shares.
pub struct Uses {
    pub store: Arc<Store>,
    pub sandboxes: Arc<Sandboxes>,
    pub sessions: Arc<Sessions>,
    pub secrets: Arc<Secrets>,
    pub feed: Arc<Feed>,
}

/// The inbox's handles and shared state: the open items.
pub struct Inbox {
    store: Arc<Store>,
    sandboxes: Arc<Sandboxes>,
    sessions: Arc<Sessions>,
    secrets: Arc<Secrets>,
    feed: Arc<Feed>,
    open: Mutex<BTreeMap<String, ItemRow>>,
    /// How long an approval or a question waits before it ends by itself.
    pub expiry: Duration,
    /// The sandboxes whose requests a watcher reads.
    watchers: Mutex<HashSet<String>>,
    /// Held while an answer is written and recorded, so two never cross.
    deciding: tokio::sync::Mutex<()>,
}

impl Inbox {
    /// The caller's open items with their counts, from memory.
    pub fn open_view(&self, caller: &Caller) -> InboxView {
        let items = self.open_items(caller.sees());
        InboxView { counts: counts(&items), items, agent_text: AGENT_TEXT }
    }

    /// The inbox with the open items the store holds (`open`).
    pub fn new(uses: Uses, open: Vec<ItemRow>, expiry: Duration) -> Arc<Inbox> {
        let Uses { store, sandboxes, sessions, secrets, feed } = uses;
        Arc::new(Inbox {
            store,
            sandboxes,
            sessions,
            secrets,
            feed,
            open: Mutex::new(open.into_iter().map(|i| (i.id.clone(), i)).collect()),
            expiry,
            watchers: Mutex::default(),
            deciding: tokio::sync::Mutex::new(()),
        })
    }

    fn watchers(&self) -> MutexGuard<'_, HashSet<String>> {
        self.watchers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, ItemRow>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The open items the caller sees (`person`: one person's; `None`: everyone's), oldest
    /// first. From memory.
    pub fn open_items(&self, person: Option<&str>) -> Vec<ItemRow> {
        let mut items: Vec<ItemRow> =
            self.lock().values().filter(|i| person.is_none_or(|p| i.person == p)).cloned().collect();
        items.sort_by(|a, b| a.created_at.total_cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        items
    }

    fn opened(&self, item: ItemRow) {
        self.lock().insert(item.id.clone(), item);
    }

    fn closed(&self, id: &str) {
        self.lock().remove(id);
    }
}

/// How many open items of each kind (every kind named, zero or not).
pub fn counts(items: &[ItemRow]) -> BTreeMap<&'static str, usize> {
    let mut c: BTreeMap<&'static str, usize> = ItemKind::ALL.iter().map(|k| (k.as_str(), 0)).collect();
    for i in items {
        *c.entry(i.kind.as_str()).or_default() += 1;
    }
    c
}

/// What `GET /api/inbox` answers.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct InboxView {
    pub counts: BTreeMap<&'static str, usize>,
    pub items: Vec<ItemRow>,
    /// Which fields of an item are the agent's own text.
    pub agent_text: &'static [&'static str],
}

/// The caller's open items, or (`ended`) its latest ended ones.
pub async fn list(inbox: &Inbox, caller: &Caller, ended: bool) -> Result<InboxView> {
    let mut view = inbox.open_view(caller);
    if ended {
        view.items = inbox.store.ended_items(caller.sees(), MAX_ENDED).await?;
    }
    Ok(view)
}

/// The item `reference` (its id, or its approval's or question's) among the caller's.
/// A unique prefix of either id names it too (`refs`).
pub async fn find(inbox: &Inbox, caller: &Caller, reference: &str) -> Result<ItemRow> {
    if let Some(item) = inbox.store.item(reference).await?.filter(|i| caller.sees().is_none_or(|p| i.person == p)) {
        return Ok(item);
    }
    let pattern = refs::pattern(reference, &["inb_", "apr_", "qst_"], false, false);
    let rows = if pattern.is_empty() { Vec::new() } else { inbox.store.items_matching(pattern, caller.sees()).await? };
    match refs::pick(rows, |_| true, |i| refs::Candidate { id: i.id.clone(), name: i.title.clone() }) {
        refs::Picked::One(item) => Ok(item),
        refs::Picked::None => Err(Error::not_found(format!("no inbox item {reference:?}"))),
        refs::Picked::Many(candidates) => {
            Err(Error::Ambiguous { what: "inbox items", reference: reference.to_string(), candidates })
        }
    }
}

/// Ends an informational item (`failed`, `denied`). An approval or a question is ended by its
/// decision or answer, not by an ack. Acking an ended item changes nothing.
pub async fn ack(inbox: &Inbox, caller: &Caller, reference: &str) -> Result<ItemRow> {
    let item = find(inbox, caller, reference).await?;
    if item.state == ItemState::Open {
        if item.kind.asks() {
            let route =
                if item.kind == ItemKind::Approval { "POST /api/approvals/{id}" } else { "POST /api/questions/{id}" };
            return Err(Error::Conflict(format!(
                "inbox item {:?} is an open {}: decide it with {route}",
                item.id,
                item.kind.as_str()
            )));
        }
        end(inbox, &item, ItemState::Acked, &caller.person, None).await?;
    }
    find(inbox, caller, &item.id).await
}

/// What `POST /api/inbox/ack` answers: how many items it acked.
#[derive(Debug, Clone, Copy, Serialize, schemars::JsonSchema)]
pub struct Acked {
    pub acked: usize,
}

/// Acks every open item of `kind` (`failed` or `denied`) of the caller's own person at once:
/// "dismiss all". An admin's too acks only its own person's, since a bulk dismiss of others'
/// notices would hide from them what they never saw.
pub async fn ack_all(inbox: &Inbox, caller: &Caller, kind: &str) -> Result<Acked> {
    let known = || ItemKind::ALL.iter().filter(|k| !k.asks()).map(|k| k.as_str()).collect::<Vec<_>>().join(", ");
    let Some(kind) = ItemKind::parse(kind) else {
        return Err(Error::invalid(format!("kind: {kind:?} is not an item kind that is acked: {}", known())));
    };
    if kind.asks() {
        return Err(Error::invalid(format!(
            "kind: {} items are decided or answered, not acked: {}",
            kind.as_str(),
            known()
        )));
    }
    let ended = inbox.store.ack_open_of_kind(Some(&caller.person), kind, &caller.person, time::now()).await?;
    for item in &ended {
        inbox.closed(&item.id);
        inbox.feed.publish(Change::Item(item)).await;
        events::InboxItemEnded {
            item: &item.id,
            kind: item.kind.as_str(),
            state: item.state.as_str(),
            by: &caller.person,
        }
        .emit();
    }
    Ok(Acked { acked: ended.len() })
}

/// Records an item's end, in the store and in memory; `false` when it had ended already.
async fn end(inbox: &Inbox, item: &ItemRow, to: ItemState, by: &str, outcome: Option<&str>) -> Result<bool> {
    let ended = inbox.store.end_item(&item.id, to, by, outcome, time::now()).await?;
    inbox.closed(&item.id);
    inbox.feed.publish(Change::Item(item)).await;
    if ended {
        events::InboxItemEnded { item: &item.id, kind: item.kind.as_str(), state: to.as_str(), by }.emit();
        if item.kind.asks() {
            let data = json!({ "item": item.id, "kind": item.kind.as_str(), "ask": item.ask_id, "state": to.as_str(),
                               "by": by, "source": "hangar" });
            tell_session(inbox, item, "inbox.ended", data).await?;
            settle(inbox, item).await?;
        }
    }
    Ok(ended)
}

/// An ask of a turn opened or ended: the turn waits for input while one is open.
async fn settle(inbox: &Inbox, item: &ItemRow) -> Result<()> {
    if let (Some(session), Some(turn)) = (&item.session_id, &item.turn_id) {
        crate::sessions::settle_input(&inbox.sessions, session, turn).await?;
    }
    Ok(())
}

/// Records a new item, in the store and in memory; `false` when its request was recorded already.
async fn open(inbox: &Inbox, item: ItemRow) -> Result<bool> {
    if !inbox.store.insert_item(&item).await? {
        return Ok(false);
    }
    events::InboxItemOpened {
        item: &item.id,
        kind: item.kind.as_str(),
        person: &item.person,
        session: item.session_name.as_deref(),
    }
    .emit();
    if item.kind.asks() {
        let data = json!({ "item": item.id, "kind": item.kind.as_str(), "ask": item.ask_id, "title": item.title,
                           "text": item.text, "options": item.options, "tool": item.tool,
                           "expires_at": item.expires_at, "source": "hangar" });
        tell_session(inbox, &item, "inbox.opened", data).await?;
    }
    // In memory first: the feed's subscribers (the fleet's streams) read the open items.
    if item.state == ItemState::Open {
        inbox.opened(item.clone());
    }
    inbox.feed.publish(Change::Item(&item)).await;
    if item.kind.asks() && item.state == ItemState::Open {
        settle(inbox, &item).await?;
    }
    Ok(true)
}

/// Records an ask's change among its session's events, where the session's readers see it.
async fn tell_session(inbox: &Inbox, item: &ItemRow, kind: &'static str, data: serde_json::Value) -> Result<()> {
    if let (Some(session), Some(turn)) = (&item.session_id, &item.turn_id) {
        if inbox.store.session_by_id(session).await?.is_some() {
            crate::sessions::record_event(&inbox.sessions, session, turn, kind, data).await?;
        }
    }
    Ok(())
}

fn new_item(kind: ItemKind, person: &str, title: String, text: String) -> ItemRow {
    ItemRow {
        id: format!("inb_{}", crate::random::hex(6)),
        kind,
        state: ItemState::Open,
        person: person.to_string(),
        ask_id: match kind {
            ItemKind::Approval => Some(format!("apr_{}", crate::random::hex(6))),
            ItemKind::Question => Some(format!("qst_{}", crate::random::hex(6))),
            _ => None,
        },
        request: None,
        session_id: None,
        session_name: None,
        turn_id: None,
        job_id: None,
        sandbox_id: None,
        sandbox_name: None,
        title,
        text,
        options: Vec::new(),
        tool: None,
        call: None,
        created_at: time::now(),
        expires_at: None,
        ended_at: None,
        ended_by: None,
        outcome: None,
    }
}

fn of_session(mut item: ItemRow, session: &SessionRow, turn: Option<&TurnRow>) -> ItemRow {
    item.session_id = Some(session.id.clone());
    item.session_name = Some(session.name.clone());
    item.turn_id = turn.map(|t| t.id.clone());
    item.sandbox_id = Some(session.sandbox_id.clone());
    item.sandbox_name = Some(session.sandbox_name.clone());
    item
}

/// A turn ended failed, crashed or timed out: its person hears of it (a job's session's turn
/// is told as the job's failure instead, by `job_failed`). Its open asks are withdrawn.
pub async fn turn_ended(inbox: &Inbox, session: &SessionRow, turn: &TurnRow, failed: bool) -> Result<()> {
    for item in inbox.open_items(None).into_iter().filter(|i| i.turn_id.as_deref() == Some(&turn.id)) {
        if item.kind.asks() {
            end(inbox, &item, ItemState::Withdrawn, "hangar", Some("the turn ended")).await?;
        }
    }
    if !failed || inbox.store.job_of_session(&session.id).await?.is_some() {
        return Ok(());
    }
    let title = format!("Turn {} of {} {}", turn.n, session.name, turn.state.as_str());
    let text = [turn.reason.as_deref(), turn.detail.as_deref()].into_iter().flatten().collect::<Vec<_>>().join(": ");
    open(inbox, of_session(new_item(ItemKind::Failed, &session.person, title, text), session, Some(turn))).await?;
    Ok(())
}

/// A job ended `failed`: its person hears of it.
pub async fn job_failed(inbox: &Inbox, job: &crate::store::JobRow) -> Result<()> {
    let title = format!("Job {} failed", job.id);
    let text = [job.reason.as_deref(), job.detail.as_deref()].into_iter().flatten().collect::<Vec<_>>().join(": ");
    let mut item = new_item(ItemKind::Failed, &job.person, title, text);
    item.job_id = Some(job.id.clone());
    item.session_id = job.session_id.clone();
    item.sandbox_id = job.sandbox_id.clone();
    item.sandbox_name = job.sandbox_name.clone();
    open(inbox, item).await?;
    Ok(())
}

/// Ends every open ask of a session that is deleted.
pub async fn session_deleted(inbox: &Inbox, session_id: &str) -> Result<()> {
    for item in inbox.open_items(None).into_iter().filter(|i| i.session_id.as_deref() == Some(session_id)) {
        end(inbox, &item, ItemState::Withdrawn, "hangar", Some("the session was deleted")).await?;
    }
    Ok(())
}

/// The inbox's subscription to the change feed: a turn or job that failed opens an item for
/// its person, an ended turn or a deleted session withdraws its asks, and a live turn's sandbox
/// is watched for asks. A failure here is logged: the writer's change stands.
pub struct Subscriber {
    pub inbox: Weak<Inbox>,
}

impl feed::Subscriber for Subscriber {
    fn changed<'a>(&'a self, change: Change<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some(inbox) = self.inbox.upgrade() else { return };
            let (what, result) = match change {
                Change::TurnEnded { session, turn, failed } => {
                    (turn.id.as_str(), turn_ended(&inbox, session, turn, failed).await)
                }
                Change::JobMoved { job, .. } if job.state == JobState::Failed => {
                    (job.id.as_str(), job_failed(&inbox, job).await)
                }
                Change::SessionDeleted(session) => (session.id.as_str(), session_deleted(&inbox, &session.id).await),
                Change::TurnLive { session } => {
                    watcher::ensure(&inbox, &session.sandbox_id);
                    return;
                }
                _ => return,
            };
            if let Err(e) = result {
                events::InboxTrouble { item: what, error: &e.to_string() }.emit();
            }
        })
    }
}

/// Keeps the inbox's clock: open asks past their expiry end by themselves (the call denied, the
/// question unanswered), checked once a second.
pub async fn run(inbox: Arc<Inbox>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let now = time::now();
        for item in inbox.open_items(None).into_iter().filter(|i| i.expires_at.is_some_and(|e| e <= now)) {
            if let Err(e) = answers::expire(&inbox, &item).await {
                events::InboxTrouble { item: &item.id, error: &e.to_string() }.emit();
            }
        }
    }
}
