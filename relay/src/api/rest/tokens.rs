//! `POST /api/tokens`, `GET /api/tokens`, `DELETE /api/tokens/{id}` (admin only).
use std::sync::Arc;

use axum::{
    extract::{Path, State},
    http::StatusCode,
    Extension, Json,
};
use serde::Deserialize;

use super::{require_admin, Body};
use crate::{auth, auth::Caller, error::ApiError, events, store::Scope, Relay};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    name: String,
    scope: String,
}

pub async fn create(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Body(req): Body<CreateToken>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    require_admin(&caller)?;
    let scope = Scope::parse(&req.scope)
        .ok_or_else(|| ApiError::bad_request(format!("scope {:?}: one of admin, user, mcp, jobs", req.scope)))?;
    let name = req.name.trim();
    if name.is_empty() || name.len() > 128 {
        return Err(ApiError::bad_request("name: 1 to 128 characters"));
    }
    let (row, secret) = auth::mint(name, scope);
    relay.store.insert_token(&row)?;
    events::TokenCreated { id: &row.id, name: &row.name, scope: scope.as_str() }.emit();
    let mut body = serde_json::to_value(&row).map_err(|e| ApiError::internal(e.to_string()))?;
    body["secret"] = serde_json::Value::String(secret);
    Ok((StatusCode::CREATED, Json(body)))
}

pub async fn list(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<serde_json::Value>, ApiError> {
    require_admin(&caller)?;
    Ok(Json(serde_json::json!({ "tokens": relay.store.tokens()? })))
}

pub async fn revoke(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    require_admin(&caller)?;
    if !relay.store.revoke_token(&id)? {
        return Err(ApiError::not_found(format!("no live token {id:?}")));
    }
    events::TokenRevoked { id: &id }.emit();
    crate::revocation::revoked(&relay, &id).await;
    Ok(StatusCode::NO_CONTENT)
}
