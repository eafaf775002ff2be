//! What every SSE route shares: the keep-alive comment, JSON data, the event that says why a
//! stream ended early, the reading of `Last-Event-ID`, the loop (`serve`) that sends a
//! `Source`'s events through its admitted stream, and the rendering (`follow`) of a domain's
//! follow of events numbered by seq.
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive};
use serde::Serialize;

use crate::{
    sessions::follow::{End, Pages, Step},
    streams::Reason,
};

/// A comment this often keeps proxies from timing the connection out.
pub const KEEPALIVE: Duration = Duration::from_secs(15);

pub fn keep_alive() -> KeepAlive {
    KeepAlive::new().interval(KEEPALIVE)
}

/// `event` with `data` as its JSON data, serialized into one string and then written at once.
/// axum's `json_data` passes each of serde_json's small writes through its line splitter: about
/// 4,000 instructions of each line an exec stream carries, against 2,200 this way (callgrind, the
/// relay's whole path 23,600 a line before). Only a `Serialize` that fails itself can fail here
/// (none of hangar's); that event becomes `event: error`.
pub fn json(event: Event, data: &impl Serialize) -> Event {
    match serde_json::to_string(data) {
        Ok(s) => event.data(s),
        Err(_) => Event::default().event("error").data("unserializable event"),
    }
}

/// `event: close`, `{reason, message}`.
pub fn close_event(reason: Reason, message: Option<&str>) -> Event {
    json(Event::default().event("close"), &serde_json::json!({ "reason": reason.as_str(), "message": message }))
}

/// Where an event stream numbered by seq starts: a reconnecting `EventSource`'s `Last-Event-ID`
/// (the last seq it saw) wins over the `since` of the URL it first used.
pub fn resume_seq(headers: &axum::http::HeaderMap, since: Option<i64>) -> Result<i64, crate::api::ApiError> {
    match headers.get("last-event-id").map(|v| v.to_str().map(|s| s.trim().parse::<i64>())) {
        Some(Ok(Ok(n))) if crate::sessions::check_since(n).is_ok() => Ok(n),
        Some(_) => Err(crate::api::ApiError::bad_request("Last-Event-ID must be an event's seq")),
        None => Ok(crate::sessions::check_since(since.unwrap_or(0))?),
    }
}

/// One event a stream's source has for its client.
pub struct Out {
    pub event: Option<&'static str>,
    pub id: Option<String>,
    pub data: String,
}

/// What a source says next.
pub enum Next {
    /// These events, in order.
    Send(Vec<Out>),
    /// The end: a `close` event with this reason and message.
    End(Reason, Option<String>),
}

/// What an SSE route streams: `next` waits until it has something. It may be dropped while
/// it waits (the stream was closed from outside), so it changes its state only once it has
/// its answer.
pub trait Source: Send {
    fn next(&mut self) -> impl std::future::Future<Output = Next> + Send;

    /// The `close` event for a reason (the route's own shape, if it has one).
    fn close(&self, reason: Reason, message: Option<&str>) -> Event {
        close_event(reason, message)
    }
}

/// The loop every SSE route shares: the source's events, each charged to the admitted stream
/// (its pace and byte cap), until the source ends, the cap is reached, or something outside
/// (revocation, pause, destroy, shutdown, lifetime) closes the stream; then `close`.
pub fn serve<S: Source + 'static>(
    mut admitted: crate::streams::Stream,
    mut source: S,
) -> impl futures::Stream<Item = Result<Event, std::convert::Infallible>> {
    async_stream::stream! {
        loop {
            let next = tokio::select! {
                biased;
                r = admitted.closed() => Next::End(r, None),
                n = source.next() => n,
            };
            match next {
                Next::Send(events) => {
                    for out in events {
                        if let Err(r) = admitted.send(out.data.len() as u64).await {
                            admitted.end(r);
                            yield Ok(source.close(r, None));
                            return;
                        }
                        let mut e = Event::default().data(out.data);
                        if let Some(name) = out.event {
                            e = e.event(name);
                        }
                        if let Some(id) = out.id {
                            e = e.id(id);
                        }
                        yield Ok(e);
                    }
                }
                Next::End(r, message) => {
                    admitted.end(r);
                    yield Ok(source.close(r, message.as_deref()));
                    return;
                }
            }
        }
    }
}

/// A follow of events numbered by seq (a session's, a job's), which its domain admitted and
/// ends: each event's JSON with its seq as the id, then a `close` with the end's reason and
/// message (nothing once the relay stopped telling followers anything).
pub fn follow<F: Pages + 'static>(
    mut followed: F,
) -> impl futures::Stream<Item = Result<Event, std::convert::Infallible>> {
    async_stream::stream! {
        loop {
            match followed.next().await {
                Step::Page(events) => {
                    for e in events {
                        yield Ok(Event::default().data(&*e.json).id(e.seq.to_string()));
                    }
                }
                Step::End(End::Stopped) => return,
                Step::End(end) => {
                    yield Ok(close_event(end.reason(), end.message().as_deref()));
                    return;
                }
            }
        }
    }
}
