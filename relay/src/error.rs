//! The relay's API errors: a code, an HTTP status and a message, rendered as
//! `{"error": {"code": "...", "message": "..."}}`.
use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
    Json,
};

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

macro_rules! ctor {
    ($($name:ident => $status:ident, $code:literal),* $(,)?) => {
        impl ApiError {
            $(pub fn $name(message: impl Into<String>) -> Self {
                Self { status: StatusCode::$status, code: $code, message: message.into() }
            })*
        }
    };
}

ctor! {
    bad_request => BAD_REQUEST, "invalid_argument",
    unauthenticated => UNAUTHORIZED, "unauthenticated",
    forbidden => FORBIDDEN, "permission_denied",
    not_found => NOT_FOUND, "not_found",
    conflict => CONFLICT, "already_exists",
    too_many => TOO_MANY_REQUESTS, "resource_exhausted",
    unavailable => SERVICE_UNAVAILABLE, "unavailable",
    bad_gateway => BAD_GATEWAY, "sandbox_error",
    internal => INTERNAL_SERVER_ERROR, "internal",
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": { "code": self.code, "message": self.message } });
        (self.status, Json(body)).into_response()
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        ApiError::internal(format!("state store: {e}"))
    }
}
