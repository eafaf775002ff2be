//! Admission: every request but `GET /health` passes the access token check, then gets a
//! `CallContext` (user, deadline, keepalive) built from its headers, for whichever protocol
//! serves it.
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{body::Body, extract::State, middleware::Next, response::Response};
use base64::Engine as _;
use http::{HeaderMap, Request};

use super::{connect::error_for, connect::Protocol, Wire};
use crate::{error::RpcError, events, service::CallContext, settings::Settings, users, users::User};

/// E2B's default when a client asks for no keepalive interval.
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(90);

pub async fn admit(State(wire): State<Arc<Wire>>, mut req: Request<Body>, next: Next) -> Response {
    let path = req.uri().path();
    if path == "/health" {
        return next.run(req).await;
    }
    let protocol = if super::is_plain_route(path) { Protocol::Plain } else { Protocol::of(req.headers()) };
    let token = req.headers().get("x-access-token").map(|v| v.as_bytes());
    if !wire.token.admits(token) {
        events::AuthRefused { path }.emit();
        return error_for(protocol, &RpcError::unauthenticated("missing or invalid X-Access-Token"));
    }
    match context_from(req.headers(), &wire.settings) {
        Ok(ctx) => {
            req.extensions_mut().insert(ctx);
            next.run(req).await
        }
        Err(e) => error_for(protocol, &e),
    }
}

fn context_from(h: &HeaderMap, settings: &Settings) -> Result<CallContext, RpcError> {
    Ok(CallContext { user: resolve_user(h, settings)?, deadline: deadline(h)?, keepalive: keepalive(h)? })
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, RpcError> {
    h.get(name)
        .map(|v| v.to_str().map_err(|_| RpcError::invalid_argument(format!("header {name} is not ASCII"))))
        .transpose()
}

/// The user named by `Authorization: Basic base64("<name>:")`; only the name matters. A daemon
/// that is not root cannot switch and acts as itself whatever is named.
fn resolve_user(h: &HeaderMap, settings: &Settings) -> Result<User, RpcError> {
    match basic_user(h)? {
        Some(name) => user_named(&name, settings),
        None => Ok(settings.get().user),
    }
}

/// The name `Authorization: Basic base64("<name>:...")` gives (possibly empty), or `None` when
/// the request has no Basic authorization. Pure: looking the user up is `resolve_user`'s.
pub fn basic_user(h: &HeaderMap) -> Result<Option<String>, RpcError> {
    let Some(auth) = header(h, "authorization")? else { return Ok(None) };
    let Some(encoded) = auth.strip_prefix("Basic ").or_else(|| auth.strip_prefix("basic ")) else {
        return Ok(None);
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| RpcError::unauthenticated("Authorization: Basic is not valid base64"))?;
    let decoded =
        String::from_utf8(decoded).map_err(|_| RpcError::unauthenticated("Authorization: Basic is not UTF-8"))?;
    Ok(Some(decoded.split(':').next().unwrap_or("").to_string()))
}

/// The user called `name`: the default one when the name is empty or the daemon cannot switch
/// users; an unknown name is `unauthenticated`.
pub(super) fn user_named(name: &str, settings: &Settings) -> Result<User, RpcError> {
    let default = settings.get().user;
    if name.is_empty() || name == default.name || !users::can_switch_users() {
        return Ok(default);
    }
    User::by_name(name)
}

fn deadline(h: &HeaderMap) -> Result<Option<Instant>, RpcError> {
    Ok(timeout(h)?.map(|t| Instant::now() + t))
}

/// The call's timeout: `Connect-Timeout-Ms` (up to 10 digits), else `grpc-timeout`.
pub fn timeout(h: &HeaderMap) -> Result<Option<Duration>, RpcError> {
    if let Some(ms) = header(h, "connect-timeout-ms")? {
        let ms: u64 = ms.parse().ok().filter(|_| ms.len() <= 10).ok_or_else(|| {
            RpcError::invalid_argument(format!("Connect-Timeout-Ms {ms:?} is not a number of milliseconds"))
        })?;
        return Ok(Some(Duration::from_millis(ms)));
    }
    if let Some(t) = header(h, "grpc-timeout")? {
        return Ok(Some(parse_grpc_timeout(t)?));
    }
    Ok(None)
}

/// gRPC's `grpc-timeout`: up to 8 digits and a unit (H, M, S, m, u, n).
pub fn parse_grpc_timeout(t: &str) -> Result<Duration, RpcError> {
    let bad = || RpcError::invalid_argument(format!("grpc-timeout {t:?} is malformed"));
    // The unit is the last character, not the last byte: splitting inside a multi-byte
    // character would panic (found by fuzzing, hangar-fuzz's envd_headers).
    let unit_at = t.char_indices().last().map(|(i, _)| i).ok_or_else(bad)?;
    let (digits, unit) = t.split_at(unit_at);
    if digits.is_empty() || digits.len() > 8 {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    Ok(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return Err(bad()),
    })
}

/// `Keepalive-Ping-Interval` in seconds, clamped to 1 s..24 h; E2B's 90 s when absent.
pub fn keepalive(h: &HeaderMap) -> Result<Duration, RpcError> {
    match header(h, "keepalive-ping-interval")? {
        None => Ok(DEFAULT_KEEPALIVE),
        Some(s) => s.trim().parse::<u64>().map(|secs| Duration::from_secs(secs.clamp(1, 24 * 3600))).map_err(|_| {
            RpcError::invalid_argument(format!("Keepalive-Ping-Interval {s:?} is not a number of seconds"))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts() {
        assert_eq!(parse_grpc_timeout("100m").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_grpc_timeout("2S").unwrap(), Duration::from_secs(2));
        assert!(parse_grpc_timeout("123456789S").is_err());
        assert!(parse_grpc_timeout("S").is_err());
        assert!(parse_grpc_timeout("").is_err());
        assert!(parse_grpc_timeout("10x").is_err());
    }

    #[test]
    fn a_grpc_timeout_ending_in_a_multibyte_character_is_refused() {
        // Once a panic: the unit was split off at the last byte, inside the character.
        for t in ["0é", "5é", "é", "12€", "1\u{10ffff}"] {
            let e = parse_grpc_timeout(t).unwrap_err();
            assert_eq!(e.code, tonic::Code::InvalidArgument, "{t:?}");
            assert!(e.message.contains("grpc-timeout"), "{t:?}: {}", e.message);
        }
    }
}
