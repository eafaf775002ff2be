//! `POST/GET /api/sandboxes`, `GET/DELETE /api/sandboxes/{ref}`, `POST .../pause`, `.../resume`.
use std::sync::Arc;

use axum::{
    extract::{Path, State},
    http::StatusCode,
    Extension, Json,
};
use serde::Deserialize;

use super::{require_sandbox_scope, Body};
use crate::{auth::Caller, error::ApiError, store::SandboxRow, streams::Reason, Relay};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    name: String,
    #[serde(default = "local")]
    provider: String,
    #[serde(default)]
    options: serde_json::Map<String, serde_json::Value>,
}

fn local() -> String {
    "local".into()
}

pub async fn create(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Body(req): Body<CreateSandbox>,
) -> Result<(StatusCode, Json<SandboxRow>), ApiError> {
    require_sandbox_scope(&caller)?;
    let row = relay.sandboxes.create(&relay.store, &req.name, &req.provider, req.options.into()).await?;
    Ok((StatusCode::CREATED, Json(row)))
}

pub async fn list(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<serde_json::Value>, ApiError> {
    require_sandbox_scope(&caller)?;
    Ok(Json(serde_json::json!({ "sandboxes": relay.store.sandboxes()? })))
}

pub async fn get(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
) -> Result<Json<SandboxRow>, ApiError> {
    require_sandbox_scope(&caller)?;
    Ok(Json(relay.sandboxes.get(&relay.store, &reference)?))
}

pub async fn destroy(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
) -> Result<StatusCode, ApiError> {
    require_sandbox_scope(&caller)?;
    let row = relay.sandboxes.get(&relay.store, &reference)?;
    relay.streams.close_sandbox(&row.id, Reason::Destroyed);
    relay.sandboxes.destroy(&relay.store, &row).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_paused(
    relay: Arc<Relay>,
    caller: Caller,
    reference: String,
    paused: bool,
) -> Result<Json<SandboxRow>, ApiError> {
    require_sandbox_scope(&caller)?;
    let mut row = relay.sandboxes.get(&relay.store, &reference)?;
    if paused {
        relay.streams.close_sandbox(&row.id, Reason::Paused);
    }
    relay.sandboxes.set_paused(&relay.store, &mut row, paused).await?;
    Ok(Json(row))
}

pub async fn pause(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
) -> Result<Json<SandboxRow>, ApiError> {
    set_paused(relay, caller, reference, true).await
}

pub async fn resume(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
) -> Result<Json<SandboxRow>, ApiError> {
    set_paused(relay, caller, reference, false).await
}
