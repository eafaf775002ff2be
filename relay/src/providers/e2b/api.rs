//! E2B's REST API, the calls the e2b provider makes. The facts are from E2B's published OpenAPI
//! spec (`spec/openapi.yml` of github.com/e2b-dev/E2B at b8029973aa7d, synced there from
//! github.com/e2b-dev/infra at e19a12b8fc5d) and from the server that answers it
//! (e2b-dev/infra at 54693ff353d2, `packages/api`):
//!
//! - Every call carries the team's API key in `X-API-Key`. Errors are `{"code": <the status>,
//!   "message": "..."}` (schema `Error`), with 401 for a missing or unknown key and 403 for a
//!   team that is blocked.
//! - `POST /sandboxes` (`NewSandbox`: `templateID` required; `timeout` in seconds, 15 when
//!   absent; `secure` makes E2B give the sandbox's envd an access token, returned as
//!   `envdAccessToken`) answers 201 with a `Sandbox` (`sandboxID`, `envdVersion`, `domain`, ...);
//!   404 when the template does not exist, 400 for a timeout beyond the team's plan.
//! - `GET /sandboxes/{id}` answers a `SandboxDetail` (`state`: `running` or `paused`), 404 for a
//!   sandbox E2B no longer has (killed, or ended at its timeout).
//! - `DELETE /sandboxes/{id}` answers 204, or 404 when there was nothing to kill.
//! - `POST /sandboxes/{id}/pause` answers 204, or 409 when it is paused already (or changing
//!   state); `POST /sandboxes/{id}/connect` (`{"timeout"}`, required) resumes a paused sandbox
//!   (201) or finds it running (200), with a `Sandbox`. (`/resume` is deprecated.)
use std::{collections::BTreeMap, time::Duration};

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client},
    rt::TokioExecutor,
};
use serde::{Deserialize, Serialize};

use super::ApiKey;
use crate::text::chain;

/// How long one call may take (creating a sandbox takes seconds; E2B's own SDKs allow 60 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read; E2B's are a few KiB.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// How much of E2B's error message an error passes on.
const MAX_MESSAGE_BYTES: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub(super) enum ApiError {
    #[error("the relay has no E2B API key: set HANGAR_E2B_API_KEY (or --e2b-api-key)")]
    NoKey,
    #[error("the relay's E2B API key is not a valid HTTP header value: check HANGAR_E2B_API_KEY")]
    BadKey,
    #[error("E2B's API at {url} is not reachable: {why}")]
    Unreachable { url: String, why: String },
    /// E2B answered with an error status; `message` is E2B's own (data, never the key).
    #[error("E2B answered {status}: {message}")]
    Status { status: u16, message: String },
    #[error("E2B's answer could not be read: {0}")]
    Malformed(String),
}

impl ApiError {
    pub(super) fn status(&self) -> Option<u16> {
        match self {
            ApiError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// `NewSandbox`, with the fields the provider sets.
#[derive(Debug, Serialize)]
pub(super) struct NewSandbox<'a> {
    #[serde(rename = "templateID")]
    pub(super) template_id: &'a str,
    pub(super) timeout: u32,
    #[serde(rename = "autoPause")]
    pub(super) auto_pause: bool,
    pub(super) secure: bool,
    pub(super) metadata: &'a BTreeMap<String, String>,
    #[serde(rename = "envVars")]
    pub(super) env_vars: &'a BTreeMap<String, String>,
}

/// `Sandbox`: what creating or connecting answers (the fields the provider reads).
#[derive(Debug, Deserialize)]
pub(super) struct Sandbox {
    #[serde(rename = "sandboxID")]
    pub(super) sandbox_id: String,
    #[serde(rename = "envdVersion", default)]
    pub(super) envd_version: Option<String>,
    #[serde(rename = "envdAccessToken", default)]
    pub(super) envd_access_token: Option<String>,
    #[serde(default)]
    pub(super) domain: Option<String>,
}

/// `SandboxDetail` (the fields the provider reads).
#[derive(Debug, Deserialize)]
pub(super) struct SandboxDetail {
    pub(super) state: String,
    #[serde(rename = "envdAccessToken", default)]
    pub(super) envd_access_token: Option<String>,
    #[serde(default)]
    pub(super) domain: Option<String>,
}

/// E2B's error body (`Error`).
#[derive(Deserialize)]
struct ErrorBody {
    message: String,
}

pub(super) struct Api {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// The API's base URL, without a trailing slash.
    base: String,
    key: Option<ApiKey>,
}

impl Api {
    /// A client of the API at `base` (`http://` or `https://`); HTTPS is checked against
    /// webpki's roots.
    pub(super) fn new(base: &str, key: Option<ApiKey>) -> Result<Api, String> {
        let base = base.trim_end_matches('/').to_string();
        let uri: Uri = base.parse().map_err(|e| format!("E2B's API URL {base:?}: {e}"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(format!("E2B's API URL {base:?}: an http:// or https:// URL with a host"));
        }
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .map_err(|e| format!("TLS for E2B's API: {e}"))?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).build(https);
        // An empty variable is no key.
        let key = key.filter(|k| !k.expose().trim().is_empty());
        Ok(Api { client, base, key })
    }

    /// One call: the status and the body, E2B's error statuses (any but 2xx) as `Status`.
    async fn call(&self, method: Method, path: &str, body: Option<serde_json::Value>) -> Result<Bytes, ApiError> {
        let key = self.key.as_ref().ok_or(ApiError::NoKey)?;
        let url = format!("{}{path}", self.base);
        let mut req = Request::builder()
            .method(method)
            .uri(&url)
            .header("x-api-key", key.expose())
            .header("accept", "application/json")
            .header("user-agent", concat!("hangar-relay/", env!("CARGO_PKG_VERSION")));
        let body = match body {
            Some(b) => {
                req = req.header("content-type", "application/json");
                Bytes::from(b.to_string())
            }
            None => Bytes::new(),
        };
        // The builder fails only on a header it cannot make: the key is the one variable part.
        let req = req.body(Full::new(body)).map_err(|_| ApiError::BadKey)?;
        let unreachable = |why: String| ApiError::Unreachable { url: self.base.clone(), why };
        let resp = match tokio::time::timeout(REQUEST_TIMEOUT, self.client.request(req)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(unreachable(chain(&e))),
            Err(_) => return Err(unreachable(format!("no answer within {REQUEST_TIMEOUT:?}"))),
        };
        let status = resp.status();
        let read = tokio::time::timeout(REQUEST_TIMEOUT, Limited::new(resp.into_body(), MAX_ANSWER_BYTES).collect());
        let bytes = match read.await {
            Ok(Ok(b)) => b.to_bytes(),
            Ok(Err(e)) => return Err(ApiError::Malformed(format!("reading the answer ({status}): {e}"))),
            Err(_) => return Err(unreachable(format!("its answer did not end within {REQUEST_TIMEOUT:?}"))),
        };
        if status.is_success() {
            return Ok(bytes);
        }
        Err(ApiError::Status { status: status.as_u16(), message: self.message(status, &bytes) })
    }

    /// E2B's message from an error body, bounded, with the key taken out should E2B ever quote it.
    fn message(&self, status: StatusCode, body: &[u8]) -> String {
        let text = match serde_json::from_slice::<ErrorBody>(body) {
            Ok(e) => e.message,
            Err(_) if body.is_empty() => status.canonical_reason().unwrap_or("no message").to_string(),
            Err(_) => String::from_utf8_lossy(body).into_owned(),
        };
        let mut text = text.trim().to_string();
        if let Some(k) = self.key.as_ref().map(ApiKey::expose).filter(|k| !k.is_empty()) {
            text = text.replace(k, "[the API key]");
        }
        crate::text::head_str(&text, MAX_MESSAGE_BYTES).to_string()
    }

    fn parse<T: for<'de> Deserialize<'de>>(bytes: &[u8], what: &str) -> Result<T, ApiError> {
        serde_json::from_slice(bytes).map_err(|e| ApiError::Malformed(format!("{what}: {e}")))
    }

    pub(super) async fn create(&self, new: &NewSandbox<'_>) -> Result<Sandbox, ApiError> {
        let body = serde_json::to_value(new).map_err(|e| ApiError::Malformed(e.to_string()))?;
        let bytes = self.call(Method::POST, "/sandboxes", Some(body)).await?;
        Self::parse(&bytes, "the created sandbox")
    }

    pub(super) async fn get(&self, id: &str) -> Result<SandboxDetail, ApiError> {
        let bytes = self.call(Method::GET, &format!("/sandboxes/{id}"), None).await?;
        Self::parse(&bytes, "the sandbox")
    }

    /// Kills the sandbox; `false` when E2B had no such sandbox.
    pub(super) async fn kill(&self, id: &str) -> Result<bool, ApiError> {
        match self.call(Method::DELETE, &format!("/sandboxes/{id}"), None).await {
            Ok(_) => Ok(true),
            Err(e) if e.status() == Some(404) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Pauses the sandbox with its memory, so its processes carry on when it resumes.
    pub(super) async fn pause(&self, id: &str) -> Result<(), ApiError> {
        let body = serde_json::json!({ "memory": true });
        self.call(Method::POST, &format!("/sandboxes/{id}/pause"), Some(body)).await.map(drop)
    }

    /// Resumes a paused sandbox (or finds it running), its timeout counted from now.
    pub(super) async fn connect(&self, id: &str, timeout: u32) -> Result<Sandbox, ApiError> {
        let body = serde_json::json!({ "timeout": timeout });
        let bytes = self.call(Method::POST, &format!("/sandboxes/{id}/connect"), Some(body)).await?;
        Self::parse(&bytes, "the resumed sandbox")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2b_messages_are_bounded_and_never_quote_the_key() {
        let key: ApiKey = "e2b_secret0123".parse().expect("a key");
        let api = Api::new("http://127.0.0.1:1", Some(key)).expect("a client");
        let body = br#"{"code": 401, "message": "Invalid API key e2b_secret0123"}"#;
        assert_eq!(api.message(StatusCode::UNAUTHORIZED, body), "Invalid API key [the API key]");
        assert_eq!(api.message(StatusCode::BAD_GATEWAY, b""), "Bad Gateway");
        let long = format!("{{\"code\": 500, \"message\": \"{}\"}}", "é".repeat(2000));
        assert!(api.message(StatusCode::INTERNAL_SERVER_ERROR, long.as_bytes()).len() <= MAX_MESSAGE_BYTES);
        assert!(Api::new("ftp://x", None).is_err());
    }
}
