//! Decisions and answers: a person's (`POST /api/approvals/{id}`, `POST /api/questions/{id}`)
//! or the clock's (expiry), written into the sandbox where the agent reads and cannot write,
//! then recorded. The answer is written before the item ends, under one lock, so the first
//! decision is both the one recorded and the one the agent reads.
use hangar_agents::inbox::{Answer, Outcome, PROTOCOL};

use super::{end, find, new_item, open};
use crate::{
    auth::Caller,
    error::{Error, Result},
    inbox::Inbox,
    sessions::supervisor::Shell,
    store::{ItemKind, ItemRow, ItemState},
    time,
};

/// The longest reason or answer a person may give.
pub const MAX_ANSWER_CHARS: usize = 2000;

/// A person's decision on a held tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
}

fn check_text(what: &str, text: &str) -> Result<()> {
    if text.chars().count() > MAX_ANSWER_CHARS {
        return Err(Error::invalid(format!("{what}: at most {MAX_ANSWER_CHARS} characters")));
    }
    if text.contains('\0') {
        return Err(Error::invalid(format!("{what}: must not contain NUL")));
    }
    Ok(())
}

/// Allows or denies an open approval.
pub async fn decide(
    inbox: &Inbox,
    caller: &Caller,
    reference: &str,
    decision: Decision,
    reason: Option<&str>,
) -> Result<ItemRow> {
    if let Some(r) = reason {
        check_text("reason", r)?;
    }
    let _one = inbox.deciding.lock().await;
    let item = open_ask(inbox, caller, reference, ItemKind::Approval, "an approval takes a decision").await?;
    let reason = reason.map(str::to_string);
    let (outcome, to) = match decision {
        Decision::Allow => {
            // The allow names the call the person was shown; the hook allows no other.
            let Some(call) = item.call.clone() else {
                return Err(Error::Conflict(format!(
                    "approval {reference:?} was read before hangar recorded the call it decides: only a deny \
                     can be given"
                )));
            };
            (Outcome::Allow { reason: reason.clone(), call }, ItemState::Allowed)
        }
        Decision::Deny => (Outcome::Deny { reason: reason.clone() }, ItemState::Denied),
    };
    write(inbox, &item, outcome).await?;
    end(inbox, &item, to, &caller.person, reason.as_deref()).await?;
    if decision == Decision::Deny {
        // A person who denied the call knows of it: the record is kept, ended, not left open.
        let by = (caller.person == item.person).then_some(caller.person.as_str());
        denied(inbox, &item, reason.as_deref().unwrap_or("denied"), by).await?;
    }
    find(inbox, caller, &item.id).await
}

/// Answers an open question.
pub async fn answer(inbox: &Inbox, caller: &Caller, reference: &str, text: &str) -> Result<ItemRow> {
    check_text("answer", text)?;
    if text.trim().is_empty() {
        return Err(Error::invalid("answer: must not be empty"));
    }
    let _one = inbox.deciding.lock().await;
    let item = open_ask(inbox, caller, reference, ItemKind::Question, "a question takes an answer").await?;
    write(inbox, &item, Outcome::Answer { text: text.to_string() }).await?;
    end(inbox, &item, ItemState::Answered, &caller.person, Some(text)).await?;
    find(inbox, caller, &item.id).await
}

/// The open ask of `kind` that `reference` names among the caller's (`takes` says what only
/// that kind takes, for the refusal of another kind).
async fn open_ask(inbox: &Inbox, caller: &Caller, reference: &str, kind: ItemKind, takes: &str) -> Result<ItemRow> {
    let item = find(inbox, caller, reference).await?;
    if item.kind != kind {
        return Err(Error::invalid(format!("inbox item {:?} is a {}: only {takes}", item.id, item.kind.as_str())));
    }
    if item.state != ItemState::Open {
        return Err(Error::Conflict(format!("{} {reference:?} was already {}", kind.as_str(), item.state.as_str())));
    }
    Ok(item)
}

/// Ends an ask nobody decided in time: the call denied, the question unanswered. The item ends
/// even where the answer cannot be written (the agent's own wait ends soon after).
pub async fn expire(inbox: &Inbox, item: &ItemRow) -> Result<()> {
    let _one = inbox.deciding.lock().await;
    let reason = format!("nobody answered within {} s", inbox.expiry.as_secs());
    let written = write(inbox, item, Outcome::Expired { reason: reason.clone() }).await;
    if end(inbox, item, ItemState::Expired, "hangar", Some(&reason)).await? && item.kind == ItemKind::Approval {
        denied(inbox, item, &reason, None).await?;
    }
    written
}

/// A held call was denied: its person hears of it, unless they denied it themselves (`by_own`:
/// the item is recorded acked by them, among the ended items, never open).
async fn denied(inbox: &Inbox, approval: &ItemRow, reason: &str, by_own: Option<&str>) -> Result<()> {
    let mut item =
        new_item(ItemKind::Denied, &approval.person, format!("Denied: {}", approval.title), reason.to_string());
    item.session_id = approval.session_id.clone();
    item.session_name = approval.session_name.clone();
    item.turn_id = approval.turn_id.clone();
    item.sandbox_id = approval.sandbox_id.clone();
    item.sandbox_name = approval.sandbox_name.clone();
    item.tool = approval.tool.clone();
    if let Some(person) = by_own {
        item.state = ItemState::Acked;
        item.ended_at = Some(item.created_at);
        item.ended_by = Some(person.to_string());
    }
    open(inbox, item).await?;
    Ok(())
}

/// Writes the answer file for the item's request: as root into the split directory where the
/// split holds (an approval's only place), else as the agent into its own.
async fn write(inbox: &Inbox, item: &ItemRow, outcome: Outcome) -> Result<()> {
    let (Some(sandbox_id), Some(request), Some(turn)) = (&item.sandbox_id, &item.request, &item.turn_id) else {
        return Err(Error::invalid(format!("inbox item {:?} came from no sandbox request", item.id)));
    };
    if !hangar_agents::inbox::valid_request_id(request) {
        return Err(Error::invalid(format!("inbox item {:?}: its request id is not one", item.id)));
    }
    let row = inbox.sandboxes.get(sandbox_id).await?;
    let shell = Shell::open(&inbox.sessions, row).await?;
    let place = shell.place().await?;
    if item.kind == ItemKind::Approval && !place.split {
        return Err(Error::invalid(format!(
            "sandbox {:?} no longer has the uid split: an answer there could be the agent's own",
            shell.row.name
        )));
    }
    let answer = Answer { v: PROTOCOL, id: request.clone(), at: time::now(), outcome };
    let name = format!("{request}.json");
    shell.write_file(place.split, &place.answers(turn), &name, answer.to_json().as_bytes()).await
}
