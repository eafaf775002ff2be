//! The fleet: `GET /api/fleet?owner=&include_stopped=` (the joined view), `GET /api/fleet/stream`
//! (SSE of the same view as it changes: `snapshot`, `agent`, `gone`, `inbox`, `summary`, `close`;
//! ids `<epoch>.<n>`, resumed from `Last-Event-ID`), and `POST /api/fleet/tickets` (a one-use
//! ticket into that stream for a browser's `EventSource`). What each holds is `fleet`'s.
use std::{convert::Infallible, sync::Arc};

use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::sse::{Event, Sse},
    Extension, Json,
};
use futures::Stream;
use serde::Deserialize;

use super::sse::{self, Next, Out, Source};
use crate::{
    api::{auth::FLEET_STREAM, extract::Params, ApiError},
    auth::Caller,
    fleet::{self, Filter, FleetView, Follower},
    handles::Relay,
    streams::{Front, Kind, Reason},
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetQuery {
    /// A person's id, or `none` for the units nobody owns.
    #[serde(default)]
    owner: Option<String>,
    #[serde(default)]
    include_stopped: bool,
}

impl FleetQuery {
    fn filter(self) -> Filter {
        Filter { owner: self.owner, include_stopped: self.include_stopped }
    }
}

/// The stream's query: the read's filters, and where to resume for a client that cannot send
/// `Last-Event-ID` itself (a browser's new `EventSource`, opened with a new ticket).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetStreamQuery {
    #[serde(default)]
    owner: Option<String>,
    #[serde(default)]
    include_stopped: bool,
    #[serde(default)]
    last_event_id: Option<String>,
}

pub async fn read(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Params(q): Params<FleetQuery>,
) -> Result<Json<FleetView>, ApiError> {
    Ok(Json(relay.fleet.read(&caller, &q.filter())))
}

/// The fleet stream's own word for why it closed (`code`, docs/fleet.md), beside the relay's (`reason`).
fn code(r: Reason) -> &'static str {
    match r {
        Reason::MaxBytes => "cap",
        other => other.as_str(),
    }
}

struct FleetEvents {
    relay: Arc<Relay>,
    follower: Follower,
}

impl Source for FleetEvents {
    async fn next(&mut self) -> Next {
        match self.follower.next(&self.relay.fleet).await {
            Ok(events) => Next::Send(
                events.into_iter().map(|e| Out { event: Some(e.event), id: Some(e.id), data: e.data }).collect(),
            ),
            Err(e) if self.relay.streams.shutting_down() => Next::End(Reason::Shutdown, Some(e.to_string())),
            Err(e) => Next::End(Reason::Error, Some(e.to_string())),
        }
    }

    fn close(&self, reason: Reason, message: Option<&str>) -> Event {
        sse::json(
            Event::default().event("close"),
            &serde_json::json!({ "reason": reason.as_str(), "code": code(reason), "message": message }),
        )
    }
}

pub async fn stream(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Params(q): Params<FleetStreamQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    // Any id is taken: one this run's log no longer covers (or none, or garbage) gets a snapshot.
    // The header wins over the query.
    let last = headers.get("last-event-id").and_then(|v| v.to_str().ok()).map(str::to_string).or(q.last_event_id);
    let q = FleetQuery { owner: q.owner, include_stopped: q.include_stopped };
    // The fleet is no one sandbox's: a pause or destroy does not close this stream.
    let admitted = relay.streams.open(&caller, "", Kind::Fleet, Front::Rest)?;
    let follower = Follower::new(&relay.fleet, caller, q.filter(), last.as_deref());
    let events = sse::serve(admitted, FleetEvents { relay, follower });
    Ok(Sse::new(events).keep_alive(sse::keep_alive()))
}

/// `POST /api/fleet/tickets`: a ticket into `GET /api/fleet/stream` for the caller.
pub async fn ticket(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    fleet::check_ticket(&caller)?;
    super::tickets::issue(&relay, &caller, FLEET_STREAM)
}
