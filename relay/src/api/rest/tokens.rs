//! `POST /api/tokens`, `GET /api/tokens`, `DELETE /api/tokens/{id}` (admin only).
use std::sync::Arc;

use axum::{
    extract::{Path, State},
    http::StatusCode,
    Json,
};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{
    api::{extract::Body, ApiError},
    auth,
    handles::Relay,
    revocation,
};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    name: String,
    scope: String,
    #[serde(default)]
    person: Option<auth::Person>,
}

pub async fn create(
    State(relay): State<Arc<Relay>>,
    Body(req): Body<CreateToken>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let (row, secret) = relay.tokens.create(&req.name, &req.scope, req.person.as_ref()).await?;
    let mut body = serde_json::json!(row);
    body["secret"] = serde_json::Value::String(secret);
    Ok((StatusCode::CREATED, Json(body)))
}

pub async fn list(State(relay): State<Arc<Relay>>) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(serde_json::json!({ "tokens": relay.tokens.list().await? })))
}

pub async fn revoke(State(relay): State<Arc<Relay>>, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    revocation::revoke(&relay.revoker, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
