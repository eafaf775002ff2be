//! The `inbox` tool: what waits on the caller's person (list), and its answers (allow, deny,
//! answer, ack) through the same `inbox` calls as `/api/inbox`, `/api/approvals` and
//! `/api/questions`. An item's title, text, options and tool call are the agent's words, named in
//! `_meta["hangar/agent_text"]`.
use std::sync::{Arc, LazyLock};

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{paths, shape::Shape};
use crate::{
    auth::Caller,
    error::Result,
    handles::Relay,
    inbox::{
        self,
        answers::{self, Decision},
        InboxView, ItemRow,
    },
};

/// The `inbox` tool's arguments, one shape per action; its schema is derived (`Shape`).
#[derive(Deserialize, JsonSchema)]
#[serde(tag = "action", rename_all = "lowercase")]
pub(super) enum Args {
    List {
        /// The latest ended items instead of the open ones
        #[serde(default)]
        ended: bool,
    },
    Allow(Decide),
    Deny(Decide),
    Answer {
        #[serde(flatten)]
        of: Item,
        /// The answer (one of the options, or any text; at most 2000 characters)
        answer: String,
    },
    Ack(Item),
}

/// The item an action is about.
#[derive(Deserialize, JsonSchema)]
pub(super) struct Item {
    /// The item's id (inb_...), or its approval's (apr_...) or question's (qst_...)
    item: String,
}

/// A decision on a held call.
#[derive(Deserialize, JsonSchema)]
pub(super) struct Decide {
    #[serde(flatten)]
    of: Item,
    /// Why (optional; at most 2000 characters)
    reason: Option<String>,
}

pub(super) static SHAPE: LazyLock<Shape<Args>> = LazyLock::new(|| Shape::new("inbox", true));

/// The `inbox` tool's result, by action (untagged: each is an object of its own fields).
#[derive(Serialize, JsonSchema)]
#[serde(untagged)]
pub(super) enum Reply {
    /// list
    List(InboxView),
    /// allow, deny, answer, ack: the item as it is now
    // Boxed: an item is far larger than a list's handle on its items.
    Item(Box<ItemRow>),
}

/// Where an item's agent text is, for `_meta`.
const ITEM_TEXT: &[&str] = &["title", "text", "options", "tool"];

impl super::Reply for Reply {
    fn agent_text(&self) -> Vec<String> {
        match self {
            Reply::List(_) => paths("items[].", ITEM_TEXT),
            Reply::Item(_) => paths("", ITEM_TEXT),
        }
    }
}

pub async fn call(relay: &Arc<Relay>, caller: &Caller, raw: Option<JsonObject>) -> Result<Reply> {
    let item = |i| Reply::Item(Box::new(i));
    match SHAPE.read(raw)? {
        Args::List { ended } => Ok(Reply::List(inbox::list(&relay.inbox, caller, ended).await?)),
        Args::Allow(d) => {
            Ok(item(answers::decide(&relay.inbox, caller, &d.of.item, Decision::Allow, d.reason.as_deref()).await?))
        }
        Args::Deny(d) => {
            Ok(item(answers::decide(&relay.inbox, caller, &d.of.item, Decision::Deny, d.reason.as_deref()).await?))
        }
        Args::Answer { of, answer } => Ok(item(answers::answer(&relay.inbox, caller, &of.item, &answer).await?)),
        Args::Ack(of) => Ok(item(inbox::ack(&relay.inbox, caller, &of.item).await?)),
    }
}
