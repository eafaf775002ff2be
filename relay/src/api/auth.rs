//! Bearer authentication and the token scopes' rules, as router layers: each route group says
//! once which scopes may use it, for REST and MCP alike.
use std::sync::Arc;

use axum::{
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};

use super::ApiError;
use crate::{
    app::Relay,
    auth::{self, Caller},
    events,
    store::Scope,
};

/// Puts the `Caller` of a valid `Authorization: Bearer <token>` in the request, or answers 401.
pub async fn authenticate(State(relay): State<Arc<Relay>>, mut req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    let caller = match presented.map(|p| auth::verify(&relay.store, p)) {
        Some(Ok(Some(c))) => c,
        Some(Err(e)) => return ApiError::from(crate::error::Error::from(e)).into_response(),
        _ => {
            events::AuthRefused { path: req.uri().path() }.emit();
            return ApiError::unauthenticated("a valid `Authorization: Bearer <token>` is required").into_response();
        }
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

fn scope(req: &Request) -> Option<Scope> {
    req.extensions().get::<Caller>().map(|c| c.scope)
}

/// Sandboxes, their processes, sessions and MCP: any scope but `jobs` (a pipeline's token,
/// which reaches only `/api/jobs*`, where it sees only its own jobs).
pub async fn sandbox_scopes(req: Request, next: Next) -> Response {
    if scope(&req).is_none_or(|s| s == Scope::Jobs) {
        return ApiError::forbidden("a jobs token can only read its own jobs").into_response();
    }
    next.run(req).await
}

/// Tokens: admins only.
pub async fn admin_scope(req: Request, next: Next) -> Response {
    if scope(&req) != Some(Scope::Admin) {
        return ApiError::forbidden("this needs an admin token").into_response();
    }
    next.run(req).await
}
