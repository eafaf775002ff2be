//! The relay's errors over HTTP: the domain's typed errors mapped, in this one place, to a
//! status and a code, rendered as `{"error": {"code": "...", "message": "..."}}`. MCP renders
//! the same codes in its tool errors.
use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
    Json,
};

use crate::{error::Error, providers::ProviderError, refs::Candidate};

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// An ambiguous reference's candidates (the caller's own), said beside the message.
    pub candidates: Vec<Candidate>,
}

/// The status and code of a domain error.
pub fn classify(e: &Error) -> (StatusCode, &'static str) {
    use StatusCode as S;
    match e {
        Error::Invalid(_) => (S::BAD_REQUEST, "invalid_argument"),
        Error::NotFound(_) => (S::NOT_FOUND, "not_found"),
        Error::Ambiguous { .. } => (S::BAD_REQUEST, "ambiguous"),
        Error::Forbidden(_) => (S::FORBIDDEN, "permission_denied"),
        Error::Conflict(_) => (S::CONFLICT, "already_exists"),
        Error::Limit { .. } | Error::DaemonLimit(_) => (S::TOO_MANY_REQUESTS, "resource_exhausted"),
        Error::Paused { .. } | Error::NeedsDaemon { .. } | Error::Unavailable(_) => {
            (S::SERVICE_UNAVAILABLE, "unavailable")
        }
        // The request's to fix: an option, an image that is not there (hangar never pulls), a
        // directory that does not exist. (404 stays "no such sandbox, process or route".)
        Error::Provider(
            ProviderError::BadOptions(_)
            | ProviderError::Unsupported(..)
            | ProviderError::ImageNotFound(_)
            | ProviderError::NoSuchDirectory(_),
        ) => (S::BAD_REQUEST, "invalid_argument"),
        // The host's disk cannot hold what the request asked to reserve.
        Error::Provider(ProviderError::Disk(crate::providers::local::DiskError::NoRoom { .. })) => {
            (S::INSUFFICIENT_STORAGE, "resource_exhausted")
        }
        Error::Provider(_) | Error::Daemon(_) => (S::BAD_GATEWAY, "sandbox_error"),
        Error::Store(_) => (S::INTERNAL_SERVER_ERROR, "internal"),
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let (status, code) = classify(&e);
        let message = e.to_string();
        let candidates = match e {
            Error::Ambiguous { candidates, .. } => candidates,
            _ => Vec::new(),
        };
        ApiError { status, code, message, candidates }
    }
}

impl ApiError {
    /// A request the API itself could not read (a body, a query string, a header).
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_argument",
            message: message.into(),
            candidates: Vec::new(),
        }
    }

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthenticated",
            message: message.into(),
            candidates: Vec::new(),
        }
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::FORBIDDEN,
            code: "permission_denied",
            message: message.into(),
            candidates: Vec::new(),
        }
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "resource_exhausted",
            message: message.into(),
            candidates: Vec::new(),
        }
    }

    pub fn no_route() -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            code: "not_found",
            message: "no such route".into(),
            candidates: Vec::new(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = serde_json::json!({ "error": { "code": self.code, "message": self.message } });
        if !self.candidates.is_empty() {
            body["error"]["candidates"] = serde_json::json!(self.candidates);
        }
        (self.status, Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Limit;

    #[test]
    fn limits_name_their_setting_and_are_429() {
        let e = Error::Limit { limit: Limit::StreamsTotal, message: "512 streams are open (limit 512)".into() };
        let a = ApiError::from(e);
        assert_eq!((a.status, a.code), (StatusCode::TOO_MANY_REQUESTS, "resource_exhausted"));
        assert!(a.message.starts_with("HANGAR_STREAM_MAX_TOTAL: "), "{}", a.message);
    }

    #[test]
    fn the_request_s_mistakes_are_400_and_the_sandbox_s_502() {
        let missing = Error::Provider(ProviderError::NoSuchDirectory("/nope".into()));
        assert_eq!(classify(&missing).0, StatusCode::BAD_REQUEST);
        assert_eq!(classify(&Error::daemon("broke")).0, StatusCode::BAD_GATEWAY);
        assert_eq!(classify(&Error::Paused { sandbox: "s".into() }).0, StatusCode::SERVICE_UNAVAILABLE);
    }
}
