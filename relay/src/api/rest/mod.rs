//! REST and Server-Sent Events under `/api`, with `Authorization: Bearer` on every route but
//! `GET /health`.
mod exec;
mod processes;
mod sandboxes;
mod tokens;
mod watch;

use std::sync::Arc;

use axum::{
    extract::{rejection::JsonRejection, DefaultBodyLimit, FromRequest, FromRequestParts, Request, State},
    http::StatusCode,
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{get, post},
    Router,
};
use serde::de::DeserializeOwned;

use crate::{
    auth::{self, Caller},
    error::ApiError,
    events,
    store::Scope,
    Relay,
};

/// The largest JSON body accepted.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

pub fn router(relay: Arc<Relay>) -> Router {
    let api = Router::new()
        .route("/metrics", get(metrics))
        .route("/api/tokens", post(tokens::create).get(tokens::list))
        .route("/api/tokens/{id}", axum::routing::delete(tokens::revoke))
        .route("/api/sandboxes", post(sandboxes::create).get(sandboxes::list))
        .route("/api/sandboxes/{sandbox}", get(sandboxes::get).delete(sandboxes::destroy))
        .route("/api/sandboxes/{sandbox}/pause", post(sandboxes::pause))
        .route("/api/sandboxes/{sandbox}/resume", post(sandboxes::resume))
        .route("/api/sandboxes/{sandbox}/exec", post(exec::exec))
        .route("/api/sandboxes/{sandbox}/exec/stream", post(exec::exec_stream))
        .route("/api/sandboxes/{sandbox}/processes", post(processes::start).get(processes::list))
        .route("/api/sandboxes/{sandbox}/processes/{id}", get(processes::read).delete(processes::kill))
        .route("/api/sandboxes/{sandbox}/processes/{id}/stream", get(processes::stream))
        .route("/api/sandboxes/{sandbox}/processes/{id}/input", post(processes::input))
        .route("/api/sandboxes/{sandbox}/watch", get(watch::watch))
        .fallback(|| async { ApiError::not_found("no such route") })
        .layer(middleware::from_fn_with_state(relay.clone(), authenticate));
    Router::new()
        .route("/health", get(|| async { StatusCode::NO_CONTENT }))
        .merge(api)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(relay)
}

/// Prometheus text: the `hangar_stream*` families. Any valid token may read it.
async fn metrics(State(relay): State<Arc<Relay>>) -> Response {
    ([(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], relay.streams.metrics.render()).into_response()
}

pub(crate) async fn authenticate(State(relay): State<Arc<Relay>>, mut req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    let caller = match presented.map(|p| auth::verify(&relay.store, p)) {
        Some(Ok(Some(c))) => c,
        Some(Err(e)) => return ApiError::from(e).into_response(),
        _ => {
            events::AuthRefused { path: req.uri().path() }.emit();
            return ApiError::unauthenticated("a valid `Authorization: Bearer <token>` is required").into_response();
        }
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// Tokens allowed to use sandboxes: any scope but `jobs`.
pub fn require_sandbox_scope(caller: &Caller) -> Result<(), ApiError> {
    if caller.scope == Scope::Jobs {
        return Err(ApiError::forbidden("a jobs token can only read its own jobs"));
    }
    Ok(())
}

pub fn require_admin(caller: &Caller) -> Result<(), ApiError> {
    if caller.scope != Scope::Admin {
        return Err(ApiError::forbidden("this needs an admin token"));
    }
    Ok(())
}

/// A query string whose rejections are the relay's JSON errors.
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(Params(v)),
            Err(e) => Err(ApiError::bad_request(e.body_text())),
        }
    }
}

/// A JSON body whose rejections are the relay's JSON errors.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Body(v)),
            Err(JsonRejection::BytesRejection(e)) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(ApiError {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                code: "resource_exhausted",
                message: format!("request body larger than {MAX_BODY_BYTES} bytes"),
            }),
            Err(e) => Err(ApiError::bad_request(e.body_text())),
        }
    }
}
