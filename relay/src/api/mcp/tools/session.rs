//! The `session` tool: agent sessions (start, prompt, cancel, status, list, events, diff) through
//! the same `sessions` calls as `/api/sessions`. The agent's own text in a result is named in
//! `_meta["hangar/agent_text"]`: it is untrusted, never instructions.
use std::sync::{Arc, LazyLock};

use rmcp::{
    model::{JsonObject, ProgressNotificationParam},
    service::RequestContext,
    RoleServer,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{paths, shape::Shape};
use crate::{
    auth::Caller,
    error::{Error, Result},
    handles::Relay,
    sessions::{
        self, diff,
        follow::{Charge, Pages, Start, Step, Until},
        EventsPage, EventsRead, SessionView, StartRequest, TurnRequest,
    },
    streams::{Front, Reason},
};

/// Where the agent's text is in an `events` result: the data of every event whose
/// `data.source` is not `"hangar"` (hangar's own events say `"hangar"`).
const EVENTS_AGENT_TEXT: &[&str] = &["events[].data"];
/// Where the agent's text is in a `diff` result: the paths of its files and their patch.
const DIFF_AGENT_TEXT: &[&str] = &["files[].path", "files[].old_path", "path", "patch"];

/// The `session` tool's arguments, one shape per action; its schema is derived (`Shape`).
#[derive(Deserialize, JsonSchema)]
#[serde(tag = "action", rename_all = "lowercase")]
pub(super) enum Args {
    Start(StartRequest),
    Prompt {
        #[serde(flatten)]
        of: Session,
        #[serde(flatten)]
        turn: TurnRequest,
    },
    Cancel(Session),
    Status(Session),
    List,
    Events {
        #[serde(flatten)]
        of: Session,
        /// Only events after this seq (a previous read's next)
        #[schemars(range(min = 0))]
        since: Option<i64>,
        /// At most this many (default 200)
        #[schemars(range(min = 1, max = sessions::MAX_EVENTS_PER_READ))]
        limit: Option<usize>,
        /// Wait this long for new events
        #[schemars(range(min = 0, max = sessions::MAX_WAIT.as_secs()))]
        wait_seconds: Option<f64>,
    },
    Diff {
        #[serde(flatten)]
        of: Session,
        /// One file's patch (its path as the summary lists it) rather than the summary
        path: Option<String>,
        /// The turn (its n) whose start the work tree is compared with; default the latest
        /// that has started
        #[schemars(range(min = 1))]
        turn: Option<i64>,
    },
}

/// The session an action is about.
#[derive(Deserialize, JsonSchema)]
pub(super) struct Session {
    /// Session name or id
    pub session: String,
}

pub(super) static SHAPE: LazyLock<Shape<Args>> = LazyLock::new(|| Shape::new("session", true));

/// The `session` tool's result, by action (untagged: each is an object of its own fields).
#[derive(Serialize, JsonSchema)]
#[serde(untagged)]
pub(super) enum Reply {
    /// start, prompt, cancel, status
    // Boxed: a view is far larger than the other results.
    Session(Box<SessionView>),
    /// list
    Sessions { sessions: Vec<SessionView> },
    /// events
    Events(Events),
    /// diff: the summary, or with path one file's patch
    Diff(diff::Answer),
}

/// A page of a session's events, as `events` answers it.
#[derive(Serialize, JsonSchema)]
pub(super) struct Events {
    /// The session's name
    session: String,
    #[serde(flatten)]
    page: EventsPage,
    /// Why the relay cut the wait short
    closed: Option<Reason>,
}

impl super::Reply for Reply {
    fn agent_text(&self) -> Vec<String> {
        match self {
            Reply::Session(v) => paths("", v.agent_text),
            // Every view names the same fields.
            Reply::Sessions { sessions } => {
                sessions.first().map(|v| paths("sessions[].", v.agent_text)).unwrap_or_default()
            }
            Reply::Events(_) => paths("", EVENTS_AGENT_TEXT),
            Reply::Diff(_) => paths("", DIFF_AGENT_TEXT),
        }
    }
}

pub async fn call(
    relay: &Arc<Relay>,
    caller: &Caller,
    raw: Option<JsonObject>,
    ctx: RequestContext<RoleServer>,
) -> Result<Reply> {
    let view = |v| Reply::Session(Box::new(v));
    match SHAPE.read(raw)? {
        Args::Start(req) => Ok(view(sessions::start(&relay.sessions, caller, req).await?)),
        Args::Prompt { of, turn } => Ok(view(sessions::follow_up(&relay.sessions, caller, &of.session, turn).await?)),
        Args::Cancel(of) => Ok(view(sessions::cancel(&relay.sessions, caller, &of.session).await?)),
        Args::Status(of) => Ok(view(sessions::get(&relay.sessions, caller, &of.session).await?)),
        Args::List => Ok(Reply::Sessions { sessions: sessions::list(&relay.sessions, caller).await? }),
        Args::Events { of, since, limit, wait_seconds } => {
            let read = EventsRead::new(since, limit, wait_seconds, "wait_seconds")?;
            events(relay, caller, &of.session, read, ctx).await.map(Reply::Events)
        }
        Args::Diff { of, path, turn } => {
            let session = sessions::find(&relay.sessions, caller, &of.session).await?;
            let ask = diff::Ask { path, turn };
            Ok(Reply::Diff(diff::read(&relay.sessions, caller, &session, ask).await?))
        }
    }
}

/// Events after `since`. Without a wait, what is there; with one, an open stream (kind
/// `mcp_events`) that the relay's closes cut short. Without a progress token it is REST's long
/// poll (it returns at the first event, the `run.state` to `waiting_input` among them:
/// `sessions::follow::wait`); with one, every event is also sent as a progress notification as
/// it is recorded, until the follow ends (`sessions::follow`: the wait ended, `limit` events were
/// sent, the turn ended, or it started to wait for input). `waiting_for` names the open asks
/// while the turn waits.
async fn events(
    relay: &Arc<Relay>,
    caller: &Caller,
    reference: &str,
    read: EventsRead,
    ctx: RequestContext<RoleServer>,
) -> Result<Events> {
    let (since, limit, wait) = (read.since(), read.limit(), read.wait());
    if wait.is_zero() {
        let session = sessions::find(&relay.sessions, caller, reference).await?;
        let page = sessions::read_page(&relay.sessions, &session.id, since, limit).await?;
        return Ok(Events { session: session.name, page, closed: None });
    }
    let Some(token) = ctx.meta.get_progress_token() else {
        let (session, p, closed) = tokio::select! {
            r = sessions::follow::wait(&relay.sessions, caller, reference, read, Front::Mcp) => r?,
            _ = ctx.ct.cancelled() => return Err(Error::unavailable("the call was cancelled")),
        };
        return Ok(Events { session: session.name, page: p, closed });
    };
    let start = Start { since: Some(since), until: Until::TurnEndsOrWaits, wait: Some(wait), limit: Some(limit) };
    let mut followed = sessions::follow(&relay.sessions, caller, reference, start, Front::Mcp, Charge::Events).await?;
    let mut sent = Vec::new();
    let mut next = since;
    let end = loop {
        let events = tokio::select! {
            step = followed.next() => match step {
                Step::Page(events) => events,
                Step::End(end) => break end,
            },
            _ = ctx.ct.cancelled() => return Err(Error::unavailable("the call was cancelled")),
        };
        for e in events {
            let mut n = ProgressNotificationParam::new(token.clone(), e.seq as f64);
            n.message = Some(e.json.to_string());
            if ctx.peer.notify_progress(n).await.is_err() {
                // Dropped unended, the stream counts as closed by its client.
                return Err(Error::unavailable("the client went away"));
            }
            next = e.seq;
            // What the follower served is an event (`EventRow`) as JSON; it reads back as one.
            let row = serde_json::from_str(&e.json)
                .map_err(|x| Error::unavailable(format!("event {}: could not be read back: {x}", e.seq)))?;
            sent.push(row);
        }
    };
    let session = followed.session();
    // Whether more is recorded past what was sent, and the state as it is now.
    let after = sessions::read_page(&relay.sessions, &session.id, next, 1).await?;
    let waiting_for = after.waiting_for;
    let page = EventsPage { events: sent, next, more: !after.events.is_empty(), state: after.state, waiting_for };
    Ok(Events { session: session.name.clone(), page, closed: end.closed() })
}
