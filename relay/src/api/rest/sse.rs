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
