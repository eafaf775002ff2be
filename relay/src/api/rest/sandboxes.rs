//! `POST/GET /api/sandboxes`, `GET/PATCH/DELETE /api/sandboxes/{ref}`, `POST .../pause`,
//! `.../resume`. Reading is open to every token these routes admit; the domain decides who may
//! manage a sandbox (`Sandboxes::manage`).
use std::sync::Arc;

use axum::{
    extract::{Path, State},
    http::StatusCode,
    Extension, Json,
};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{
    api::{extract::Body, ApiError},
    auth::Caller,
    handles::Relay,
    sandboxes::{Named, SandboxRow},
};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    name: String,
    #[serde(default = "local")]
    provider: String,
    #[serde(default)]
    options: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    shared_with: Vec<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShareSandbox {
    shared_with: Vec<String>,
}

fn local() -> String {
    "local".into()
}

pub async fn create(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Body(req): Body<CreateSandbox>,
) -> Result<(StatusCode, Json<SandboxRow>), ApiError> {
    let row = relay
        .sandboxes
        .create(&req.name, &req.provider, req.options.into(), Some(&caller.person), req.shared_with)
        .await?;
    Ok((StatusCode::CREATED, Json(row)))
}

pub async fn list(State(relay): State<Arc<Relay>>) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(serde_json::json!({ "sandboxes": relay.sandboxes.list_named().await? })))
}

pub async fn get(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
) -> Result<Json<Named>, ApiError> {
    Ok(Json(relay.sandboxes.find_named(&reference, &caller).await?))
}

pub async fn share(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Body(req): Body<ShareSandbox>,
) -> Result<Json<SandboxRow>, ApiError> {
    Ok(Json(relay.sandboxes.share(&reference, &caller, req.shared_with).await?))
}

pub async fn destroy(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
) -> Result<StatusCode, ApiError> {
    let row = relay.sandboxes.manage(&reference, &caller).await?;
    crate::sessions::destroy_sandbox(&relay.sessions, &row).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_paused(
    relay: Arc<Relay>,
    caller: Caller,
    reference: String,
    paused: bool,
) -> Result<Json<SandboxRow>, ApiError> {
    let mut row = relay.sandboxes.manage(&reference, &caller).await?;
    relay.sandboxes.set_paused(&mut row, paused).await?;
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
