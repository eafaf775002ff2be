//! `approve`: a Claude Code `PreToolUse` hook that asks a person to approve the tool calls a
//! policy holds.
//!
//! Fails closed. A call no rule holds gets no decision (no output, exit 0: Claude Code's own
//! rules apply). Every other path prints a decision, and every failure (bad policy, unreadable
//! stdin, no answers directory, a request that cannot be written, no answer in time, a signal)
//! is a deny naming it. Only if even that cannot be printed does it exit 2, which blocks the call
//! too; any other non-zero code would let the call through.
use std::{io::Read as _, io::Write as _};

use hangar_agents::inbox::{
    hook_call, hook_output, Ask, Decision, Outcome, Policy, Request, ToolCall, MAX_FILE_BYTES, MAX_HOOK_INPUT_BYTES,
    PROTOCOL,
};

use super::{
    env,
    files::{self, Written},
    say, AgentError, ApproveArgs, EXIT_USAGE,
};

/// Room left in a request file for everything but the tool's input (ids, session, turn, tool
/// name: each at most a few hundred characters, escaped).
const REQUEST_OVERHEAD: usize = 8 * 1024;

pub(super) fn run(args: ApproveArgs) -> u8 {
    // From the start, so that a SIGTERM (Claude Code stopping a slow hook) becomes a deny rather
    // than a death by signal, which Claude Code would not take as a block.
    files::catch_stop_signals();
    let (decision, reason) = match decide(&args) {
        Ok(None) => return 0,
        Ok(Some(decided)) => decided,
        Err(e) => {
            say(&format!("{e}: the call is denied"));
            (Decision::Deny, format!("hangar could not get an approval, so the call is denied: {e}"))
        }
    };
    let mut out = std::io::stdout().lock();
    let line = hook_output(decision, &reason).to_string();
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(e) => {
            // Exit 2 blocks the call, with stderr as the reason.
            say(&format!("could not print the hook decision ({e}); the call is blocked: {reason}"));
            EXIT_USAGE
        }
    }
}

/// `None`: no rule holds the call. The stdin is never quoted back, in a reason or elsewhere.
fn decide(args: &ApproveArgs) -> Result<Option<(Decision, String)>, AgentError> {
    let policy = Policy::parse(&args.policies)?;
    let stdin = read_stdin()?;
    let call = hook_call(&stdin)?;
    if policy.matches(&call).is_none() {
        return Ok(None);
    }
    let answers = args.dirs.answers()?;
    let inbox = args.dirs.inbox()?;
    let req = Request {
        v: PROTOCOL,
        id: files::new_id(),
        session: args.session.clone().or_else(|| env("HANGAR_SESSION")),
        turn: args.turn.clone().or_else(|| env("HANGAR_TURN")),
        created_at: files::now(),
        ask: Ask::Approval { tool: fitted(&call) },
    }
    .check()?;
    let held = held_digest(&req)?;
    let _written = Written { path: files::write(&inbox, &req)? };
    let answer = files::wait(&answers, &req.id, Some(args.timeout))?;
    Ok(Some(match answer.outcome {
        Outcome::Allow { reason, call } if call == held => {
            (Decision::Allow, reason.unwrap_or_else(|| "approved in hangar".into()))
        }
        Outcome::Allow { .. } => {
            say("the approval request was changed after this hook wrote it: the call is denied");
            tell_tampered(&inbox, args, &req);
            (Decision::Deny, CHANGED.into())
        }
        Outcome::Deny { reason: Some(reason) } => (Decision::Deny, format!("denied in hangar: {reason}")),
        Outcome::Deny { reason: None } => (Decision::Deny, "denied in hangar".into()),
        Outcome::Expired { reason } => (Decision::Deny, format!("nobody approved it in time: {reason}")),
        Outcome::Answer { .. } => return Err(AgentError::Unexpected("answer", "an approval")),
    }))
}

/// What the hook says when the decision was on another call than the one it holds.
const CHANGED: &str = "denied by hangar: the approval request was changed after the hook wrote it, so the decision \
                       was on another call than this one";

/// Tells the person that `req` was changed: a `tampered` notice naming the held call, which
/// the relay makes a `denied` item. Left in the inbox for the relay (the hook is about to exit).
/// Best effort: the deny does not depend on it.
fn tell_tampered(inbox: &std::path::Path, args: &ApproveArgs, req: &Request) {
    let Ask::Approval { tool } = &req.ask else { return };
    let notice = Request {
        v: PROTOCOL,
        id: files::new_id(),
        session: args.session.clone().or_else(|| env("HANGAR_SESSION")),
        turn: args.turn.clone().or_else(|| env("HANGAR_TURN")),
        created_at: files::now(),
        ask: Ask::Tampered { request: req.id.clone(), held: tool.clone() },
    };
    if let Err(e) = notice.check().map_err(AgentError::from).and_then(|n| files::write(inbox, &n)) {
        say(&format!("could not tell hangar the request was changed: {e}"));
    }
}

/// The digest of the held call as the relay will read it: from the bytes the request is
/// written as (a float read back may differ from the one in memory in its last place).
fn held_digest(req: &Request) -> Result<String, AgentError> {
    match Request::parse(req.to_json().as_bytes())?.ask {
        Ask::Approval { tool } => Ok(tool.digest()),
        _ => Err(AgentError::Unexpected("request", "an approval")),
    }
}

/// The call as the person will see it: a Write's whole file does not fit in a request, so long
/// strings of the input are cut.
fn fitted(call: &ToolCall) -> ToolCall {
    call.fitted(MAX_FILE_BYTES - REQUEST_OVERHEAD)
}

/// At most one byte over the hook input limit, so that `hook_call` refuses a larger input.
fn read_stdin() -> Result<Vec<u8>, AgentError> {
    let mut bytes = Vec::new();
    std::io::stdin().lock().take(MAX_HOOK_INPUT_BYTES as u64 + 1).read_to_end(&mut bytes).map_err(AgentError::Stdin)?;
    Ok(bytes)
}
