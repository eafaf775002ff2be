//! What every SSE route shares: the keep-alive comment, and the event that says why a stream
//! ended early.
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive};

use crate::streams::Reason;

/// A comment this often keeps proxies from timing the connection out.
pub const KEEPALIVE: Duration = Duration::from_secs(15);

pub fn keep_alive() -> KeepAlive {
    KeepAlive::new().interval(KEEPALIVE)
}

/// `event: close`, `{reason, message}`.
pub fn close_event(reason: Reason, message: Option<&str>) -> Event {
    Event::default()
        .event("close")
        .json_data(serde_json::json!({ "reason": reason.as_str(), "message": message }))
        .unwrap_or_else(|_| Event::default().event("close"))
}

/// Where an event stream numbered by seq starts: a reconnecting `EventSource`'s `Last-Event-ID`
/// (the last seq it saw) wins over the `since` of the URL it first used.
pub fn resume_seq(headers: &axum::http::HeaderMap, since: Option<i64>) -> Result<i64, crate::api::ApiError> {
    match headers.get("last-event-id").map(|v| v.to_str().map(|s| s.trim().parse::<i64>())) {
        Some(Ok(Ok(n))) => Ok(n),
        Some(_) => Err(crate::api::ApiError::bad_request("Last-Event-ID must be an event's seq")),
        None => Ok(since.unwrap_or(0)),
    }
}
