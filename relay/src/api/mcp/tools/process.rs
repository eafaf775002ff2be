//! The `process` tool: background processes (start, attach, input, kill, list), owned by the
//! token that started them, through the same domain calls as the REST routes.
use std::{sync::Arc, time::Duration};

use rmcp::{
    model::{CallToolResult, JsonObject, ProgressNotificationParam},
    service::RequestContext,
    RoleServer,
};
use serde::Deserialize;
use serde_json::json;

use super::{args, done};
use crate::{
    app::Relay,
    auth::Caller,
    error::{Error, Result},
    processes::{self, ProcessState, Read},
    streams::{Front, Reason},
    text::Encoding,
};

/// The longest an attach waits for more output.
pub const MAX_WAIT_SECONDS: u64 = 600;
/// How much output an attach's result keeps (the progress notifications had all of it).
pub const ATTACH_TAIL_BYTES: usize = 64 * 1024;

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Action {
    Start,
    Attach,
    Input,
    Kill,
    List,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessArgs {
    action: Action,
    sandbox: String,
    command: Option<String>,
    cwd: Option<String>,
    process_id: Option<String>,
    since: Option<u64>,
    wait_seconds: Option<u64>,
    input: Option<String>,
    #[serde(default)]
    eof: bool,
    #[serde(default)]
    encoding: Encoding,
}

fn need<T>(v: Option<T>, what: &str, action: &str) -> Result<T> {
    v.ok_or_else(|| Error::invalid(format!("process: {what} is required for action {action:?}")))
}

pub async fn call(
    relay: &Arc<Relay>,
    caller: &Caller,
    a: Option<JsonObject>,
    ctx: RequestContext<RoleServer>,
) -> Result<CallToolResult> {
    let a: ProcessArgs = args("process", a)?;
    let sandbox = a.sandbox.as_str();
    match a.action {
        Action::Start => {
            let command = need(a.command, "command", "start")?;
            let view = processes::start(relay, caller, sandbox, &command, a.cwd).await?;
            Ok(done(json!({ "process_id": view.process_id, "process": view }), &[]))
        }
        Action::List => Ok(done(json!({ "processes": processes::list(relay, caller, sandbox).await? }), &[])),
        Action::Kill => {
            let id = need(a.process_id, "process_id", "kill")?;
            processes::kill(relay, caller, sandbox, &id).await?;
            Ok(done(json!({ "process_id": id, "killed": true }), &[]))
        }
        Action::Input => {
            let id = need(a.process_id, "process_id", "input")?;
            let data = a.input.unwrap_or_default().into_bytes();
            processes::input(relay, caller, sandbox, &id, data, a.eof).await?;
            Ok(done(json!({ "process_id": id, "eof": a.eof }), &[]))
        }
        Action::Attach => {
            let id = need(a.process_id, "process_id", "attach")?;
            let wait = a.wait_seconds.unwrap_or(0);
            if wait > MAX_WAIT_SECONDS {
                return Err(Error::invalid(format!("wait_seconds: 0 to {MAX_WAIT_SECONDS}")));
            }
            let how = Read {
                since: a.since,
                encoding: a.encoding,
                wait: Duration::from_secs(wait),
                tail: ATTACH_TAIL_BYTES,
                admit: Some(Front::Mcp),
            };
            attach(relay, caller, sandbox, &id, how, ctx).await
        }
    }
}

/// Output from `since`, then what comes during `wait`, each chunk a progress notification when
/// the call has a progress token; the result has the tail, the state, the exit code and `next`.
async fn attach(
    relay: &Arc<Relay>,
    caller: &Caller,
    sandbox: &str,
    id: &str,
    how: Read,
    ctx: RequestContext<RoleServer>,
) -> Result<CallToolResult> {
    let encoding = how.encoding;
    let token = ctx.meta.get_progress_token();
    let peer = ctx.peer.clone();
    let on_data: processes::OnData = Box::new(move |data, next| {
        let (peer, token) = (peer.clone(), token.clone());
        Box::pin(async move {
            let Some(t) = token else { return true };
            let mut p = ProgressNotificationParam::new(t, next as f64);
            p.message = Some(data);
            peer.notify_progress(p).await.is_ok()
        })
    });
    let (view, c) = tokio::select! {
        r = processes::read(relay, caller, sandbox, id, how, on_data) => r?,
        _ = ctx.ct.cancelled() => return Err(Error::unavailable("the call was cancelled")),
    };
    let state = if c.exit_code.is_some() { ProcessState::Exited } else { view.state };
    Ok(done(
        json!({
            "process_id": id,
            "state": state,
            "exit_code": c.exit_code.or(view.exit_code),
            "output": c.output,
            "encoding": encoding,
            "since": c.since,
            "next": c.next,
            "lost": c.lost,
            "earlier_output": view.earlier_output,
            "closed": c.closed.map(Reason::as_str),
        }),
        &["output"],
    ))
}
