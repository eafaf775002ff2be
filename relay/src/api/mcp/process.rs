//! The MCP `process` tool: background processes (start, attach, input, kill, list), owned by the
//! token that started them, through the same domain calls as the REST routes.
use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use rmcp::{
    model::{JsonObject, ProgressNotificationParam},
    service::RequestContext,
    RoleServer,
};
use serde::Deserialize;
use serde_json::{json, Value};

use super::tools::args;
use crate::{
    auth::Caller,
    background,
    error::ApiError,
    processes::Output,
    streams::{Kind, Reason},
    Relay,
};

/// The longest an attach waits for more output.
pub const MAX_WAIT_SECONDS: u64 = 600;
/// How much output an attach's result keeps (the progress notifications had all of it).
pub const ATTACH_TAIL_BYTES: usize = 64 * 1024;
/// Once the wait is over, an attach still reads what was written before it came, until this
/// long passes without any.
const BACKLOG_QUIET: Duration = Duration::from_millis(250);

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
}

fn need<T>(v: Option<T>, what: &str, action: &str) -> Result<T, ApiError> {
    v.ok_or_else(|| ApiError::bad_request(format!("process: {what} is required for action {action:?}")))
}

/// The last `cap` bytes of `s`, starting on a character boundary.
fn tail(s: &str, cap: usize) -> &str {
    let mut start = s.len().saturating_sub(cap);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// What the tool returns (the fields holding sandbox output are named in the result's `_meta`).
pub async fn call(
    relay: &Arc<Relay>,
    caller: &Caller,
    a: Option<JsonObject>,
    ctx: RequestContext<RoleServer>,
) -> Result<(Value, &'static [&'static str]), ApiError> {
    let a: ProcessArgs = args("process", a)?;
    let sandbox = a.sandbox.as_str();
    match a.action {
        Action::Start => {
            let command = need(a.command, "command", "start")?;
            let view = background::start(relay, caller, sandbox, &command, a.cwd).await?;
            Ok((json!({ "process": view, "process_id": view.process_id }), &[]))
        }
        Action::List => Ok((json!({ "processes": background::list(relay, caller, sandbox).await? }), &[])),
        Action::Kill => {
            let id = need(a.process_id, "process_id", "kill")?;
            background::kill(relay, caller, sandbox, &id).await?;
            Ok((json!({ "process_id": id, "killed": true }), &[]))
        }
        Action::Input => {
            let id = need(a.process_id, "process_id", "input")?;
            let data = a.input.unwrap_or_default().into_bytes();
            background::input(relay, caller, sandbox, &id, data, a.eof).await?;
            Ok((json!({ "process_id": id, "eof": a.eof }), &[]))
        }
        Action::Attach => {
            let id = need(a.process_id, "process_id", "attach")?;
            let wait = a.wait_seconds.unwrap_or(0);
            if wait > MAX_WAIT_SECONDS {
                return Err(ApiError::bad_request(format!("wait_seconds: 0 to {MAX_WAIT_SECONDS}")));
            }
            attach(relay, caller, sandbox, &id, a.since, Duration::from_secs(wait), ctx).await
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
    since: Option<u64>,
    wait: Duration,
    ctx: RequestContext<RoleServer>,
) -> Result<(Value, &'static [&'static str]), ApiError> {
    let (sandbox_id, output) = background::follow(relay, caller, sandbox, id, since).await?;
    let mut admitted = relay.streams.open(caller, &sandbox_id, Kind::McpProcess)?;
    let token = ctx.meta.get_progress_token();
    futures::pin_mut!(output);
    let (mut text, mut lost, mut next, mut target) = (String::new(), 0u64, since.unwrap_or(0), None::<u64>);
    let (mut start, mut ended, mut closed) = (None::<u64>, None::<i32>, None::<Reason>);
    let mut until = tokio::time::Instant::now() + wait;
    loop {
        let item = tokio::select! {
            biased;
            reason = admitted.closed() => { closed = Some(reason); break; }
            _ = ctx.ct.cancelled() => { admitted.end(Reason::Client); return Err(ApiError::unavailable("the call was cancelled")); }
            _ = tokio::time::sleep_until(until) => {
                // The wait is over; what was written before the call still comes, quickly.
                if target.is_none_or(|t| next >= t) { break; }
                until = tokio::time::Instant::now() + BACKLOG_QUIET;
                continue;
            }
            item = output.next() => item,
        };
        let Some(item) = item else { break };
        match item {
            Output::Start { oldest, next: n } => {
                start = Some(since.unwrap_or(oldest));
                next = since.unwrap_or(oldest);
                target = Some(n);
            }
            Output::Data { data, next: n, .. } => {
                if admitted.send(data.len() as u64).await.is_err() {
                    closed = Some(Reason::MaxBytes);
                    break;
                }
                next = n;
                if let Some(t) = &token {
                    let mut p = ProgressNotificationParam::new(t.clone(), n as f64);
                    p.message = Some(data.clone());
                    if ctx.peer.notify_progress(p).await.is_err() {
                        admitted.end(Reason::Client);
                        return Err(ApiError::unavailable("the client went away"));
                    }
                }
                text.push_str(&data);
                if text.len() > 2 * ATTACH_TAIL_BYTES {
                    text = tail(&text, ATTACH_TAIL_BYTES).to_string();
                }
            }
            Output::Gap { from, to } => {
                lost += to - from;
                next = to;
            }
            Output::End { exit_code, total, .. } => {
                ended = Some(exit_code);
                next = total;
                break;
            }
            Output::Broken(m) => {
                admitted.end(Reason::Error);
                return Err(ApiError::bad_gateway(format!("reading the process's output: {m}")));
            }
        }
    }
    admitted.end(closed.unwrap_or(Reason::Done));
    drop(admitted);
    let view = background::get(relay, caller, sandbox, id).await?;
    let exit_code = ended.or(view.exit_code);
    Ok((
        json!({
            "process_id": id,
            "state": if ended.is_some() { "exited" } else { view.state },
            "exit_code": exit_code,
            "output": tail(&text, ATTACH_TAIL_BYTES),
            "since": start.unwrap_or(next),
            "next": next,
            "lost": lost,
            "closed": closed.map(Reason::as_str),
        }),
        &["output"],
    ))
}

#[cfg(test)]
mod tests {
    use super::tail;

    #[test]
    fn tails_start_on_a_character() {
        assert_eq!(tail("aé", 1), "");
        assert_eq!(tail("aéb", 2), "b");
        assert_eq!(tail("abc", 10), "abc");
    }
}
