//! What an agent has changed: `GET /api/sessions/{ref}/diff?turn=&path=` (the summary, or with
//! `path` that file's patch), read by `sessions::diff`.
use std::sync::Arc;

use axum::{
    extract::{Path, State},
    Extension, Json,
};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{
    api::{extract::Params, ApiError},
    auth::Caller,
    handles::Relay,
    sessions::{self, diff},
};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiffQuery {
    /// One file's patch (its path as the summary lists it) rather than the summary.
    #[serde(default)]
    path: Option<String>,
    /// The turn (its n) whose start the work tree is compared with; default the latest that has
    /// started.
    #[serde(default)]
    turn: Option<i64>,
}

pub async fn session(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Params(q): Params<DiffQuery>,
) -> Result<Json<diff::Answer>, ApiError> {
    let session = sessions::find(&relay.sessions, &caller, &reference).await?;
    let ask = diff::Ask { path: q.path, turn: q.turn };
    Ok(Json(diff::read(&relay.sessions, &caller, &session, ask).await?))
}
