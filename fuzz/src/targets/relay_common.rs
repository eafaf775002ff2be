//! What the relay's targets share: requests built from parts, and the checks on a refusal.
use axum::extract::{FromRequest, FromRequestParts};
use hangar_relay::api::{
    extract::{Body, Params},
    ApiError,
};
use serde::de::DeserializeOwned;

use crate::input::block_on;

/// A request's parts with `query` as its query string; `None` when no URI can carry it (HTTP
/// refuses such a request before any handler sees it).
pub fn parts(query: &[u8]) -> Option<http::request::Parts> {
    let query = std::str::from_utf8(query).ok()?;
    let req = http::Request::builder().uri(format!("/q?{query}")).body(()).ok()?;
    Some(req.into_parts().0)
}

/// The query string a request's URI carries: the part before any `#`, which starts a fragment
/// (a client never sends one; the URI parser drops it).
pub fn carried(parts: &http::request::Parts) -> Vec<u8> {
    parts.uri.query().unwrap_or("").as_bytes().to_vec()
}

/// A query string read as the relay's handlers read it (`extract::Params`).
pub fn query<T: DeserializeOwned>(parts: &mut http::request::Parts) -> Result<T, ApiError> {
    block_on(Params::<T>::from_request_parts(parts, &())).map(|Params(q)| q)
}

/// A JSON body read as the relay's handlers read it (`extract::Body`).
pub fn json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let req = http::Request::builder()
        .method("POST")
        .uri("/b")
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(body.to_vec()));
    let Ok(req) = req else { panic!("a request with a JSON body is always buildable") };
    block_on(Body::<T>::from_request(req, &())).map(|Body(b)| b)
}

/// A request the API could not read is a 400 `invalid_argument` that says why.
pub fn bad_request(e: &ApiError) {
    assert_eq!(e.status, http::StatusCode::BAD_REQUEST, "{}", e.message);
    assert_eq!(e.code, "invalid_argument");
    assert!(!e.message.is_empty(), "a refusal says why");
}

/// Decimal digits after an optional `+` (what Rust's `u64::from_str` reads): their number.
pub fn decimal(s: &str) -> Option<u64> {
    let digits = s.strip_prefix('+').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.bytes().try_fold(0u64, |n, d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
}

/// The decoded `key=value` pairs of a query string.
pub fn pairs(query: &[u8]) -> Vec<(String, String)> {
    serde_urlencoded::from_bytes::<Vec<(String, String)>>(query).unwrap_or_default()
}
