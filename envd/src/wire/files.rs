//! E2B's `GET /files` and `POST /files`: downloads (gzip, ranges) and uploads (multipart or
//! octet-stream, gzip bodies), streamed so memory stays flat whatever the size.
use std::sync::Arc;

use axum::{body::Body, extract::State, http::StatusCode, response::Response};

use super::{routes::plain_error, Wire};

pub async fn download(State(_wire): State<Arc<Wire>>, _req: http::Request<Body>) -> Response {
    plain_error(StatusCode::NOT_IMPLEMENTED, "not implemented yet")
}

pub async fn upload(State(_wire): State<Arc<Wire>>, _req: http::Request<Body>) -> Response {
    plain_error(StatusCode::NOT_IMPLEMENTED, "not implemented yet")
}
