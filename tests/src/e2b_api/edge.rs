//! E2B's edge proxy, as the double plays it: routes a request to its sandbox's envd by E2B's
//! rule (`packages/shared/pkg/proxy/host.go` of e2b-dev/infra@54693ff353d2) and passes it through.
//!
//! - For a host that is an IP, `localhost` or `sandbox.<domain>`, the headers `E2b-Sandbox-Id`
//!   and `E2b-Sandbox-Port` route it when present; otherwise the host's first label,
//!   `<port>-<sandbox id>`.
//! - A sandbox the edge does not know answers 502 `{"sandboxId", "message": "The sandbox was not
//!   found", "code": 502}`; a paused one 403 (E2B's answer when it may not resume it).
//! - As E2B's edge (`ForceAttemptHTTP2: false`), a request goes on to the sandbox over HTTP/1.1,
//!   whatever version it came in: gRPC cannot pass, Connect can.
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::{body::Incoming, header, HeaderMap, Request, Response, Version};
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client},
    rt::TokioExecutor,
};
use serde_json::json;

use super::{json_response, Body, Ctx, EdgeRecorded, SandboxState, ENVD_PORT};

/// The edge's client of the sandboxes' envds: HTTP/1.1 only.
pub struct Clients {
    http1: Client<HttpConnector, Incoming>,
}

impl Clients {
    pub fn new() -> Clients {
        Clients { http1: Client::builder(TokioExecutor::new()).build_http() }
    }
}

impl Default for Clients {
    fn default() -> Self {
        Self::new()
    }
}

/// Where E2B's edge sends a request: (sandbox id, port, whether by the routing headers).
pub fn route(host: &str, headers: &HeaderMap) -> Result<(String, u16, bool), String> {
    let hostname =
        host.rsplit_once(':').filter(|(_, p)| p.bytes().all(|c| c.is_ascii_digit())).map_or(host, |(h, _)| h);
    let hostname = hostname.trim_start_matches('[').trim_end_matches(']');
    let by_ip = hostname == "localhost" || hostname.parse::<std::net::IpAddr>().is_ok();
    let shared = hostname.strip_prefix("sandbox.").is_some_and(|d| !d.is_empty());
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty());
    if by_ip || shared {
        match (header("e2b-sandbox-id"), header("e2b-sandbox-port")) {
            (None, None) => {}
            (Some(id), Some(port)) => {
                let port = port.parse().map_err(|_| format!("Invalid sandbox port {port:?}"))?;
                return Ok((id.to_string(), port, true));
            }
            (None, _) => return Err("Missing header: E2b-Sandbox-Id".into()),
            (_, None) => return Err("Missing header: E2b-Sandbox-Port".into()),
        }
    }
    let (first, _) = hostname.split_once('.').ok_or("invalid host")?;
    let (port, id) = first.split_once('-').ok_or("invalid host")?;
    let port = port.parse().map_err(|_| format!("Invalid sandbox port {port:?}"))?;
    Ok((id.to_string(), port, false))
}

/// Headers that belong to one connection, never passed on.
const HOP_BY_HOP: [header::HeaderName; 6] = [
    header::CONNECTION,
    header::HeaderName::from_static("keep-alive"),
    header::HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::HOST,
];

pub(crate) async fn forward(req: Request<Incoming>, ctx: Arc<Ctx>, clients: Arc<Clients>) -> Response<Body> {
    let host = req
        .uri()
        .authority()
        .map(|a| a.to_string())
        .or_else(|| req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).map(str::to_string))
        .unwrap_or_default();
    let http2 = req.version() == Version::HTTP_2;
    let mut record = EdgeRecorded {
        host: host.clone(),
        path: req.uri().path().to_string(),
        sandbox_id: None,
        by_headers: false,
        access_token: req.headers().get("x-access-token").and_then(|v| v.to_str().ok()).map(str::to_string),
        http2,
        status: 0,
    };
    let answer = |ctx: &Ctx, mut record: EdgeRecorded, status: u16, body: serde_json::Value| {
        record.status = status;
        ctx.record_edge(record);
        json_response(status, &body)
    };
    let (id, port, by_headers) = match route(&host, req.headers()) {
        Ok(r) => r,
        Err(m) => return answer(&ctx, record, 400, json!({"message": m, "code": 400})),
    };
    record.sandbox_id = Some(id.clone());
    record.by_headers = by_headers;
    let sandbox = match ctx.sandbox(&id) {
        Some(s) if port == ENVD_PORT => s,
        Some(_) => {
            let body = json!({"sandboxId": id, "message": "The sandbox is running but port is not open", "port": port, "code": 502});
            return answer(&ctx, record, 502, body);
        }
        None => {
            let body = json!({"sandboxId": id, "message": "The sandbox was not found", "code": 502});
            return answer(&ctx, record, 502, body);
        }
    };
    if sandbox.state == SandboxState::Paused {
        let body = json!({"sandboxId": id, "message": "This sandbox can't be resumed with the credentials provided.", "code": 403});
        return answer(&ctx, record, 403, body);
    }
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = match format!("http://{}:{ENVD_PORT}{path}", sandbox.ip).parse() {
        Ok(u) => u,
        Err(e) => return answer(&ctx, record, 502, json!({"message": e.to_string(), "code": 502})),
    };
    for h in &HOP_BY_HOP {
        parts.headers.remove(h);
    }
    parts.version = Version::HTTP_11;
    match clients.http1.request(Request::from_parts(parts, body)).await {
        Ok(resp) => {
            record.status = resp.status().as_u16();
            ctx.record_edge(record);
            resp.map(|b| b.boxed())
        }
        Err(e) => {
            let body = json!({"sandboxId": id, "message": format!("the sandbox's envd: {e}"), "code": 502});
            answer(&ctx, record, 502, body)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_as_e2b_edge_does() {
        let mut h = HeaderMap::new();
        assert_eq!(route("49983-iabc.e2b.test", &h), Ok(("iabc".into(), 49983, false)));
        assert_eq!(route("49983-iabc.e2b.test:443", &h), Ok(("iabc".into(), 49983, false)));
        assert!(route("127.0.0.1:5000", &h).is_err());
        h.insert("e2b-sandbox-id", "iabc".parse().unwrap());
        assert_eq!(route("127.0.0.1:5000", &h), Err("Missing header: E2b-Sandbox-Port".into()));
        h.insert("e2b-sandbox-port", "49983".parse().unwrap());
        assert_eq!(route("127.0.0.1:5000", &h), Ok(("iabc".into(), 49983, true)));
        assert_eq!(route("sandbox.e2b.test", &h), Ok(("iabc".into(), 49983, true)));
        // A sandbox's own host wins over the headers.
        assert_eq!(route("3000-ixyz.e2b.test", &h), Ok(("ixyz".into(), 3000, false)));
    }
}
