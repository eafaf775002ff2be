//! Extractors whose rejections are the relay's JSON errors, not axum's plain text.
use axum::{
    extract::{rejection::JsonRejection, FromRequest, FromRequestParts, Request},
    http::StatusCode,
};
use serde::de::DeserializeOwned;

use super::ApiError;

/// The largest JSON body accepted.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// A query string.
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

/// A JSON body.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Body(v)),
            Err(JsonRejection::BytesRejection(e)) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::too_large(format!("request body larger than {MAX_BODY_BYTES} bytes")))
            }
            Err(e) => Err(ApiError::bad_request(e.body_text())),
        }
    }
}
