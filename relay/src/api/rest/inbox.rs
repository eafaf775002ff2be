//! The inbox: `GET /api/inbox` (`?ended=true` for the latest ended items),
//! `POST /api/inbox/{id}/ack`, `POST /api/approvals/{id}` `{"decision", "reason"}` and
//! `POST /api/questions/{id}` `{"answer"}`. Each caller sees its person's items (an admin
//! everyone's); another person's item does not exist for it (404).
use std::sync::Arc;

use axum::{
    extract::{Path, State},
    Extension, Json,
};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{
    api::{
        extract::{Body, Params},
        ApiError,
    },
    auth::Caller,
    handles::Relay,
    inbox::{
        self,
        answers::{self, Decision},
        InboxView, ItemRow,
    },
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InboxQuery {
    #[serde(default)]
    pub ended: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DecisionBody {
    Allow,
    Deny,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Decide {
    pub decision: DecisionBody,
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    pub answer: String,
}

pub async fn list(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Params(q): Params<InboxQuery>,
) -> Result<Json<InboxView>, ApiError> {
    Ok(Json(inbox::list(&relay.inbox, &caller, q.ended).await?))
}

pub async fn ack(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<ItemRow>, ApiError> {
    Ok(Json(inbox::ack(&relay.inbox, &caller, &id).await?))
}

pub async fn decide(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(b): Body<Decide>,
) -> Result<Json<ItemRow>, ApiError> {
    let decision = match b.decision {
        DecisionBody::Allow => Decision::Allow,
        DecisionBody::Deny => Decision::Deny,
    };
    Ok(Json(answers::decide(&relay.inbox, &caller, &id, decision, b.reason.as_deref()).await?))
}

pub async fn answer(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(b): Body<AnswerBody>,
) -> Result<Json<ItemRow>, ApiError> {
    Ok(Json(answers::answer(&relay.inbox, &caller, &id, &b.answer).await?))
}
