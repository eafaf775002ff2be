//! E2B envd's plain HTTP routes: `/health`, `/init`, `/envs`, `/metrics`. Their errors are JSON
//! `{"code": <HTTP status>, "message": ...}`, as E2B's.
use std::{collections::BTreeMap, path::PathBuf, sync::Arc};

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::Deserialize;

use super::Wire;
use crate::{events, service::ENVD_VERSION, users, users::User};

pub fn plain_error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "code": status.as_u16(), "message": message.into() });
    (status, Json(body)).into_response()
}

pub async fn health() -> StatusCode {
    StatusCode::NO_CONTENT
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitRequest {
    access_token: Option<String>,
    env_vars: Option<BTreeMap<String, String>>,
    default_user: Option<String>,
    default_workdir: Option<String>,
}

pub async fn init(State(wire): State<Arc<Wire>>, body: Bytes) -> Response {
    let req: InitRequest = if body.iter().all(u8::is_ascii_whitespace) {
        InitRequest { access_token: None, env_vars: None, default_user: None, default_workdir: None }
    } else {
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => return plain_error(StatusCode::BAD_REQUEST, format!("malformed init body: {e}")),
        }
    };
    let user = match req.default_user.as_deref().filter(|u| !u.is_empty()) {
        Some(name) if users::can_switch_users() => match User::by_name(name) {
            Ok(u) => Some(u),
            Err(e) => return plain_error(StatusCode::BAD_REQUEST, e.message),
        },
        _ => None,
    };
    let env_count = req.env_vars.as_ref().map_or(0, BTreeMap::len);
    wire.settings.update(|d| {
        if let Some(env) = req.env_vars {
            d.env = env;
        }
        if let Some(u) = user {
            d.user = u;
        }
        if let Some(w) = req.default_workdir.filter(|w| !w.is_empty()) {
            d.workdir = Some(PathBuf::from(w));
        }
    });
    if let Some(token) = &req.access_token {
        wire.token.set(Some(token.clone()));
    }
    events::Initialized { token_set: req.access_token.is_some(), env_vars: env_count }.emit();
    let mut r = StatusCode::NO_CONTENT.into_response();
    r.headers_mut().insert("x-envd-version", HeaderValue::from_static(ENVD_VERSION));
    r
}

pub async fn envs(State(wire): State<Arc<Wire>>) -> Json<BTreeMap<String, String>> {
    Json(wire.settings.get().env)
}

pub async fn metrics(State(wire): State<Arc<Wire>>) -> Json<serde_json::Value> {
    Json(wire.system.snapshot())
}
