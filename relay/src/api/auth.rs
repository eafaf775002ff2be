//! Bearer authentication and the token scopes' rules, as router layers: each route group says
//! once which scopes may use it, for REST and MCP alike.
use std::sync::Arc;

use axum::{
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};

use super::ApiError;
use crate::{
    auth::{tickets::TicketError, Caller, Scope},
    events,
    handles::Relay,
};

/// Puts the `Caller` of a valid `Authorization: Bearer <token>` in the request, or answers 401.
/// A `GET` of an event stream without that header may instead carry `?ticket=` (from
/// `POST /api/tickets`, for browsers' `EventSource`, which cannot set headers): the request then
/// runs as the ticket's token, and the handlers never see the parameter.
pub async fn authenticate(State(relay): State<Arc<Relay>>, mut req: Request, next: Next) -> Response {
    let header = req.headers().get(http::header::AUTHORIZATION);
    let caller = if header.is_none() && has_ticket(req.uri()) {
        match by_ticket(&relay, &mut req).await {
            Ok(c) => c,
            Err(e) => return e.into_response(),
        }
    } else {
        let presented = header
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim);
        let verified = match presented {
            Some(p) => Some(relay.tokens.authenticate(p).await),
            None => None,
        };
        match verified {
            Some(Ok(Some(c))) => c,
            Some(Err(e)) => return ApiError::from(crate::error::Error::from(e)).into_response(),
            _ => {
                events::AuthRefused { path: req.uri().path() }.emit();
                return ApiError::unauthenticated("a valid `Authorization: Bearer <token>` is required")
                    .into_response();
            }
        }
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// The query's `ticket` parameters and what is left of it without them (the other parameters
/// exactly as sent).
fn split_ticket(query: &str) -> (Vec<String>, String) {
    let mut tickets = Vec::new();
    let mut rest = Vec::new();
    for piece in query.split('&') {
        let key = piece.split_once('=').map_or(piece, |(k, _)| k);
        if key == "ticket" {
            let value = serde_urlencoded::from_str::<Vec<(String, String)>>(piece)
                .ok()
                .and_then(|mut v| v.pop())
                .map(|(_, v)| v)
                .unwrap_or_default();
            tickets.push(value);
        } else if !piece.is_empty() {
            rest.push(piece);
        }
    }
    (tickets, rest.join("&"))
}

fn has_ticket(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|q| !split_ticket(q).0.is_empty())
}

/// The caller a request's ticket stands for, with `ticket` taken out of its URI; or the 401.
/// Neither the ticket nor the query reaches a log line or an answer.
async fn by_ticket(relay: &Relay, req: &mut Request) -> Result<Caller, ApiError> {
    let path = req.uri().path().to_string();
    let refuse = |why: &str, message: String| {
        events::TicketRefused { path: &path, why }.emit();
        Err(ApiError::unauthenticated(message))
    };
    let (tickets, rest) = split_ticket(req.uri().query().unwrap_or_default());
    if req.method() != http::Method::GET || !is_stream_path(&path) {
        let routes = STREAM_ROUTES.join(", ");
        return refuse("not_a_stream", format!("a ticket opens only a GET of one of the event streams: {routes}"));
    }
    let [ticket] = tickets.as_slice() else {
        return refuse("unknown", "one `ticket` parameter at the most".to_string());
    };
    let token_id = match relay.tickets.redeem(ticket, &path) {
        Ok(id) => id,
        Err(e) => {
            let why = match e {
                TicketError::Expired => "expired",
                TicketError::Used => "used",
                TicketError::OtherPath => "other_path",
                _ => "unknown",
            };
            return refuse(why, e.to_string());
        }
    };
    let caller = match relay.tokens.ticket_caller(&token_id).await {
        Ok(Some(c)) => c,
        Ok(None) => return refuse("token_revoked", "the ticket's token was revoked".to_string()),
        Err(e) => return Err(ApiError::from(crate::error::Error::from(e))),
    };
    let path_and_query = if rest.is_empty() { path.clone() } else { format!("{path}?{rest}") };
    let mut parts = req.uri().clone().into_parts();
    // What is left is a part of a URI that parsed, so it parses; refuse rather than panic.
    match http::uri::PathAndQuery::try_from(path_and_query) {
        Ok(pq) => parts.path_and_query = Some(pq),
        Err(_) => return refuse("unknown", "the query could not be read".to_string()),
    }
    match http::Uri::from_parts(parts) {
        Ok(uri) => *req.uri_mut() = uri,
        Err(_) => return refuse("unknown", "the query could not be read".to_string()),
    }
    Ok(caller)
}

fn scope(req: &Request) -> Option<Scope> {
    req.extensions().get::<Caller>().map(|c| c.scope)
}

/// Sandboxes, their processes, sessions and MCP: any scope but `jobs` (a pipeline's token,
/// which reaches only `/api/jobs*`, where it sees only its own jobs).
pub async fn sandbox_scopes(req: Request, next: Next) -> Response {
    if scope(&req).is_none_or(|s| s == Scope::Jobs) {
        return ApiError::forbidden("a jobs token can only read its own jobs").into_response();
    }
    next.run(req).await
}

/// A person's own things (secrets): `admin` and `user` tokens, not an agent's (`mcp`, `jobs`).
pub async fn person_scopes(req: Request, next: Next) -> Response {
    if !matches!(scope(&req), Some(Scope::Admin | Scope::User)) {
        return ApiError::forbidden("this needs a user or admin token").into_response();
    }
    next.run(req).await
}

/// Tokens: admins only.
pub async fn admin_scope(req: Request, next: Next) -> Response {
    if scope(&req) != Some(Scope::Admin) {
        return ApiError::forbidden("this needs an admin token").into_response();
    }
    next.run(req).await
}

/// The SSE `GET` routes a ticket may open, as axum spells them: the only paths a ticket is
/// issued for.
pub const STREAM_ROUTES: [&str; 6] =
    [PROCESS_STREAM, WATCH_STREAM, SESSION_STREAM, JOB_STREAM, FLEET_STREAM, TERMINAL_STREAM];

const PROCESS_STREAM: &str = "/api/sandboxes/{sandbox}/processes/{id}/stream";
const WATCH_STREAM: &str = "/api/sandboxes/{sandbox}/watch";
const SESSION_STREAM: &str = "/api/sessions/{session}/events/stream";
const JOB_STREAM: &str = "/api/jobs/{job}/events/stream";
/// A terminal's WebSocket (a browser's `WebSocket` cannot set headers either).
const TERMINAL_STREAM: &str = "/api/sandboxes/{sandbox}/terminal";
/// The fleet's stream, which `POST /api/fleet/tickets` issues tickets for.
pub const FLEET_STREAM: &str = "/api/fleet/stream";

/// What a stream's path names, its parameters as the route's handler reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamTarget {
    Process { sandbox: String, id: String },
    Watch { sandbox: String },
    Session(String),
    Job(String),
    Fleet,
    Terminal { sandbox: String },
}

/// The parameters of `path` on `route`, each `{...}` one non-empty segment, percent-decoded as
/// axum's `Path` decodes them (`..%2f` is the parameter `../`, never two segments); `None` if
/// the path is not the route's, or a parameter is not UTF-8 once decoded (axum answers 400).
fn route_params(route: &str, path: &str) -> Option<Vec<String>> {
    let mut want = route.split('/');
    let mut got = path.split('/');
    let mut params = Vec::new();
    loop {
        match (want.next(), got.next()) {
            (None, None) => return Some(params),
            (Some(w), Some(g)) if w.starts_with('{') && !g.is_empty() => {
                params.push(percent_encoding::percent_decode_str(g).decode_utf8().ok()?.into_owned());
            }
            (Some(w), Some(g)) if w == g => {}
            _ => return None,
        }
    }
}

/// The stream `path` opens, if it is one of `STREAM_ROUTES`.
pub fn stream_target(path: &str) -> Option<StreamTarget> {
    STREAM_ROUTES.iter().find_map(|route| {
        let params = route_params(route, path)?;
        Some(match (*route, params.as_slice()) {
            (PROCESS_STREAM, [sandbox, id]) => StreamTarget::Process { sandbox: sandbox.clone(), id: id.clone() },
            (WATCH_STREAM, [sandbox]) => StreamTarget::Watch { sandbox: sandbox.clone() },
            (SESSION_STREAM, [session]) => StreamTarget::Session(session.clone()),
            (JOB_STREAM, [job]) => StreamTarget::Job(job.clone()),
            (FLEET_STREAM, []) => StreamTarget::Fleet,
            (TERMINAL_STREAM, [sandbox]) => StreamTarget::Terminal { sandbox: sandbox.clone() },
            _ => return None,
        })
    })
}

/// Whether `path` is one of `STREAM_ROUTES`.
pub fn is_stream_path(path: &str) -> bool {
    stream_target(path).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stream_routes_take_tickets() {
        for ok in [
            "/api/sandboxes/default/watch",
            "/api/sandboxes/s/processes/p1/stream",
            "/api/sessions/x/events/stream",
            "/api/jobs/job_1/events/stream",
            "/api/fleet/stream",
            "/api/sandboxes/default/terminal",
        ] {
            assert!(is_stream_path(ok), "{ok}");
        }
        for bad in [
            "/api/sandboxes//watch",
            "/api/sandboxes/default/watch/",
            "/api/sandboxes/default/exec/stream",
            "/api/sessions/x/events",
            "/api/sessions/x/events/stream?since=1",
            "/api/tokens",
            "/api/fleet",
            "/api/fleet/stream/",
            "",
            "/",
        ] {
            assert!(!is_stream_path(bad), "{bad}");
        }
    }

    #[test]
    fn a_stream_path_names_what_its_handler_reads() {
        let process = |sandbox: &str, id: &str| StreamTarget::Process { sandbox: sandbox.into(), id: id.into() };
        assert_eq!(stream_target("/api/sandboxes/s/processes/p_1/stream"), Some(process("s", "p_1")));
        // One segment, decoded as axum's `Path` decodes it: a parameter, never a way up.
        assert_eq!(
            stream_target("/api/sandboxes/default/processes/..%2f..%2f/stream"),
            Some(process("default", "../../"))
        );
        assert_eq!(
            stream_target("/api/sandboxes/d%65fault/watch"),
            Some(StreamTarget::Watch { sandbox: "default".into() })
        );
        assert_eq!(stream_target("/api/sessions/x/events/stream"), Some(StreamTarget::Session("x".into())));
        assert_eq!(stream_target("/api/jobs/j/events/stream"), Some(StreamTarget::Job("j".into())));
        assert_eq!(stream_target("/api/fleet/stream"), Some(StreamTarget::Fleet));
        // Not UTF-8 once decoded: axum refuses the path, so it names nothing.
        assert_eq!(stream_target("/api/sessions/%ff/events/stream"), None);
    }

    #[test]
    fn the_ticket_is_taken_out_of_the_query() {
        let (t, rest) = split_ticket("path=.&ticket=hgt_a_b&recursive=true");
        assert_eq!((t, rest.as_str()), (vec!["hgt_a_b".to_string()], "path=.&recursive=true"));
        let (t, rest) = split_ticket("ticket=hgt_a%5Fb");
        assert_eq!((t, rest.as_str()), (vec!["hgt_a_b".to_string()], ""));
        let (t, rest) = split_ticket("since=0&tickets=1&ticket");
        assert_eq!((t, rest.as_str()), (vec![String::new()], "since=0&tickets=1"));
        assert_eq!(split_ticket("ticket=a&ticket=b").0.len(), 2);
        assert!(!has_ticket(&http::Uri::from_static("/api/sandboxes/default/watch?path=.")));
    }
}
