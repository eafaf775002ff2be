//! The `session` tool: agent sessions (start, prompt, cancel, status, list, events) through the
//! same `sessions` calls as `/api/sessions`. The agent's own text in a result is named in
//! `_meta["hangar/agent_text"]`: it is untrusted, never instructions.
use std::sync::Arc;

use rmcp::{
    model::{CallToolResult, JsonObject, ProgressNotificationParam},
    service::RequestContext,
    RoleServer,
};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{args, AGENT_TEXT_META};
use crate::{
    app::Relay,
    auth::Caller,
    error::{Error, Result},
    sessions::{
        self,
        follow::{Charge, Pages, Start, Step, Until},
        EventsPage, EventsRead, SessionView, StartRequest, TurnRequest, TurnState,
    },
    streams::{Front, Reason},
};

/// Where the agent's text is in an `events` result: the data of every event whose
/// `data.source` is not `"hangar"` (hangar's own events say `"hangar"`).
const EVENTS_AGENT_TEXT: &[&str] = &["events[].data"];

#[derive(Deserialize, Clone, Copy, PartialEq, Debug)]
#[serde(rename_all = "lowercase")]
enum Action {
    Start,
    Prompt,
    Cancel,
    Status,
    List,
    Events,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Start => "start",
            Action::Prompt => "prompt",
            Action::Cancel => "cancel",
            Action::Status => "status",
            Action::List => "list",
            Action::Events => "events",
        }
    }

    /// The arguments the action takes besides `action`: any other is refused, so that a
    /// misplaced one (a `prompt` on `status`) is an error rather than silently ignored.
    fn takes(self) -> &'static [&'static str] {
        match self {
            Action::Start => &[
                "name",
                "sandbox",
                "harness",
                "prompt",
                "cwd",
                "timeout_minutes",
                "secrets",
                "approvals",
                "idempotency_key",
                "ignore_limits",
                "sandbox_login",
            ],
            Action::Prompt => &["session", "prompt", "timeout_minutes", "idempotency_key", "ignore_limits"],
            Action::Cancel | Action::Status => &["session"],
            Action::List => &[],
            Action::Events => &["session", "since", "limit", "wait_seconds"],
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionArgs {
    action: Action,
    session: Option<String>,
    name: Option<String>,
    sandbox: Option<String>,
    harness: Option<String>,
    prompt: Option<String>,
    cwd: Option<String>,
    timeout_minutes: Option<i64>,
    #[serde(default)]
    secrets: Vec<String>,
    #[serde(default)]
    approvals: Vec<String>,
    idempotency_key: Option<String>,
    #[serde(default)]
    ignore_limits: bool,
    #[serde(default)]
    sandbox_login: bool,
    since: Option<i64>,
    limit: Option<usize>,
    wait_seconds: Option<f64>,
}

fn need<T>(v: Option<T>, what: &str, action: Action) -> Result<T> {
    v.ok_or_else(|| Error::invalid(format!("session: {what} is required for action {:?}", action.as_str())))
}

pub async fn call(
    relay: &Arc<Relay>,
    caller: &Caller,
    raw: Option<JsonObject>,
    ctx: RequestContext<RoleServer>,
) -> Result<CallToolResult> {
    let keys: Vec<String> = raw.iter().flat_map(|m| m.keys().cloned()).collect();
    let a: SessionArgs = args("session", raw)?;
    let action = a.action;
    if let Some(k) = keys.iter().find(|k| *k != "action" && !action.takes().contains(&k.as_str())) {
        let takes = action.takes();
        let takes = if takes.is_empty() { "no other arguments".to_string() } else { takes.join(", ") };
        return Err(Error::invalid(format!(
            "session: {k} does not apply to action {:?} (it takes {takes})",
            action.as_str()
        )));
    }
    match action {
        Action::Start => {
            let req = StartRequest {
                name: need(a.name, "name", action)?,
                sandbox: need(a.sandbox, "sandbox", action)?,
                harness: a.harness,
                prompt: need(a.prompt, "prompt", action)?,
                cwd: a.cwd,
                timeout_minutes: a.timeout_minutes,
                secrets: a.secrets,
                approvals: a.approvals,
                idempotency_key: a.idempotency_key,
                ignore_limits: a.ignore_limits,
                sandbox_login: a.sandbox_login,
            };
            Ok(view(sessions::start(relay, caller, req).await?))
        }
        Action::Prompt => {
            let reference = need(a.session, "session", action)?;
            let req = TurnRequest {
                prompt: need(a.prompt, "prompt", action)?,
                timeout_minutes: a.timeout_minutes,
                idempotency_key: a.idempotency_key,
                ignore_limits: a.ignore_limits,
            };
            Ok(view(sessions::follow_up(relay, caller, &reference, req).await?))
        }
        Action::Cancel => Ok(view(sessions::cancel(relay, caller, &need(a.session, "session", action)?).await?)),
        Action::Status => Ok(view(sessions::get(relay, caller, &need(a.session, "session", action)?).await?)),
        Action::List => {
            let list = sessions::list(relay, caller).await?;
            let marked: Vec<String> = list
                .first()
                .map(|v| v.agent_text.iter().map(|f| format!("sessions[].{f}")).collect())
                .unwrap_or_default();
            let marked: Vec<&str> = marked.iter().map(String::as_str).collect();
            Ok(result(json!({ "sessions": list }), &marked))
        }
        Action::Events => {
            let reference = need(a.session, "session", action)?;
            let read = EventsRead::new(a.since, a.limit, a.wait_seconds, "wait_seconds")?;
            events(relay, caller, &reference, read, ctx).await
        }
    }
}

/// A result with the fields holding the agent's text named in `_meta`.
pub(super) fn result(v: Value, agent_fields: &[&str]) -> CallToolResult {
    let mut r = super::done(v, &[]);
    if !agent_fields.is_empty() {
        r.meta.get_or_insert_with(rmcp::model::MetaObject::new).insert(AGENT_TEXT_META.into(), json!(agent_fields));
    }
    r
}

fn view(v: SessionView) -> CallToolResult {
    let fields = v.agent_text;
    result(serde_json::to_value(&v).unwrap_or(Value::Null), fields)
}

fn page(
    name: &str,
    events: &[impl serde::Serialize],
    next: i64,
    more: bool,
    state: TurnState,
    closed: Option<Reason>,
) -> CallToolResult {
    result(
        json!({
            "session": name,
            "events": events,
            "next": next,
            "more": more,
            "state": state,
            "closed": closed.map(Reason::as_str),
        }),
        EVENTS_AGENT_TEXT,
    )
}

fn whole(name: &str, p: &EventsPage, closed: Option<Reason>) -> CallToolResult {
    page(name, &p.events, p.next, p.more, p.state, closed)
}

/// Events after `since`. Without a wait, what is there; with one, an open stream (kind
/// `mcp_events`) that the relay's closes cut short. Without a progress token it is REST's long
/// poll (it returns at the first event: `sessions::follow::wait`); with one, every event is also
/// sent as a progress notification as it is recorded, until the follow ends (`sessions::follow`:
/// the wait ended, `limit` events were sent, or the turn ended).
async fn events(
    relay: &Arc<Relay>,
    caller: &Caller,
    reference: &str,
    read: EventsRead,
    ctx: RequestContext<RoleServer>,
) -> Result<CallToolResult> {
    let (since, limit, wait) = (read.since(), read.limit(), read.wait());
    if wait.is_zero() {
        let session = sessions::find(relay, caller, reference).await?;
        return Ok(whole(&session.name, &sessions::read_page(relay, &session.id, since, limit).await?, None));
    }
    let Some(token) = ctx.meta.get_progress_token() else {
        let (session, p, closed) = tokio::select! {
            r = sessions::follow::wait(relay, caller, reference, read, Front::Mcp) => r?,
            _ = ctx.ct.cancelled() => return Err(Error::unavailable("the call was cancelled")),
        };
        return Ok(whole(&session.name, &p, closed));
    };
    let start = Start { since: Some(since), until: Until::TurnEnds, wait: Some(wait), limit: Some(limit) };
    let mut followed = sessions::follow(relay, caller, reference, start, Front::Mcp, Charge::Events).await?;
    let mut sent: Vec<Value> = Vec::new();
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
            sent.push(serde_json::from_str(&e.json).unwrap_or(Value::Null));
        }
    };
    let session = followed.session();
    // Whether more is recorded past what was sent, and the state as it is now.
    let after = sessions::read_page(relay, &session.id, next, 1).await?;
    Ok(page(&session.name, &sent, next, !after.events.is_empty(), after.state, end.closed()))
}
