//! The `inbox` tool: what waits on the caller's person (list), and its answers (allow, deny,
//! answer, ack) through the same `inbox` calls as `/api/inbox`, `/api/approvals` and
//! `/api/questions`. An item's title, text, options and tool call are the agent's words, named in
//! `_meta["hangar/agent_text"]`.
use std::sync::Arc;

use rmcp::model::{CallToolResult, JsonObject};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{args, session::result};
use crate::{
    app::Relay,
    auth::Caller,
    error::{Error, Result},
    inbox::{
        self,
        answers::{self, Decision},
        ItemRow,
    },
};

#[derive(Deserialize, Clone, Copy, PartialEq, Debug)]
#[serde(rename_all = "lowercase")]
enum Action {
    List,
    Allow,
    Deny,
    Answer,
    Ack,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::List => "list",
            Action::Allow => "allow",
            Action::Deny => "deny",
            Action::Answer => "answer",
            Action::Ack => "ack",
        }
    }

    /// The arguments the action takes besides `action` (any other is refused).
    fn takes(self) -> &'static [&'static str] {
        match self {
            Action::List => &["ended"],
            Action::Allow | Action::Deny => &["item", "reason"],
            Action::Answer => &["item", "answer"],
            Action::Ack => &["item"],
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InboxArgs {
    action: Action,
    item: Option<String>,
    reason: Option<String>,
    answer: Option<String>,
    #[serde(default)]
    ended: bool,
}

fn need<T>(v: Option<T>, what: &str, action: Action) -> Result<T> {
    v.ok_or_else(|| Error::invalid(format!("inbox: {what} is required for action {:?}", action.as_str())))
}

/// Where an item's agent text is, for `_meta`.
const ITEM_TEXT: &[&str] = &["title", "text", "options", "tool"];
const LIST_TEXT: &[&str] = &["items[].title", "items[].text", "items[].options", "items[].tool"];

pub async fn call(relay: &Arc<Relay>, caller: &Caller, raw: Option<JsonObject>) -> Result<CallToolResult> {
    let keys: Vec<String> = raw.iter().flat_map(|m| m.keys().cloned()).collect();
    let a: InboxArgs = args("inbox", raw)?;
    let action = a.action;
    if let Some(k) = keys.iter().find(|k| *k != "action" && !action.takes().contains(&k.as_str())) {
        return Err(Error::invalid(format!(
            "inbox: {k} does not apply to action {:?} (it takes {})",
            action.as_str(),
            action.takes().join(", ")
        )));
    }
    let item = |i: ItemRow| result(serde_json::to_value(i).unwrap_or(Value::Null), ITEM_TEXT);
    match action {
        Action::List => Ok(result(json!(inbox::list(relay, caller, a.ended).await?), LIST_TEXT)),
        Action::Allow | Action::Deny => {
            let decision = if action == Action::Allow { Decision::Allow } else { Decision::Deny };
            let id = need(a.item, "item", action)?;
            Ok(item(answers::decide(relay, caller, &id, decision, a.reason.as_deref()).await?))
        }
        Action::Answer => {
            let id = need(a.item, "item", action)?;
            Ok(item(answers::answer(relay, caller, &id, &need(a.answer, "answer", action)?).await?))
        }
        Action::Ack => Ok(item(inbox::ack(relay, caller, &need(a.item, "item", action)?).await?)),
    }
}
