//! The inbox: `GET /api/inbox` (`?ended=true` for the latest ended items),
//! `POST /api/inbox/{id}/ack`, `POST /api/inbox/ack` `{"kind"}` (every open item of a kind of the
//! caller's own person), `POST /api/approvals/{id}` `{"decision", "reason"}` and
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
        Acked, InboxView, ItemRow,
    },
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InboxQuery {
    #[serde(default)]
    pub ended: bool,
}

/// `POST /api/inbox/ack`: every open item of this kind of the caller's own person.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AckAll {
    /// `failed` or `denied`
    pub kind: String,
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

pub async fn ack_all(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Body(b): Body<AckAll>,
) -> Result<Json<Acked>, ApiError> {
    Ok(Json(inbox::ack_all(&relay.inbox, &caller, &b.kind).await?))
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
