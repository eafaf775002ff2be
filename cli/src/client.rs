//! The one HTTP client of the relay: requests with the bearer token, the relay's errors as typed
//! errors, and Server-Sent Events read as they come (the parser is pure, below, and tested on
//! its own). Plain HTTP only: the relay serves http.
use std::{collections::VecDeque, fmt, time::Duration};

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client as Hyper},
    rt::TokioExecutor,
};
use serde_json::Value;

pub const DEFAULT_URL: &str = "http://127.0.0.1:7470";

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A request that is not a stream: the slowest (a Docker sandbox's creation) take seconds.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// Every relay stream sends a comment at least every 15 s: this long without a byte means the
/// connection is gone, even if no FIN or RST arrived to say so.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The relay's answers are bounded by its own limits; this only keeps a confused server from
/// filling memory.
const MAX_BODY_BYTES: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The relay's own error: `{"error": {"code", "message"}}`.
    #[error("{message} ({code}, HTTP {status})")]
    Api { status: u16, code: String, message: String },
    /// An error status without the relay's JSON (a proxy's page, a 405).
    #[error("the relay answered HTTP {status}{detail}")]
    Status { status: u16, detail: String },
    #[error("cannot reach the relay at {url} ({reason}): is it running? Set HANGAR_URL (or --url) to its address")]
    Connect { url: String, reason: String },
    #[error("no token: set HANGAR_TOKEN (or pass --token)")]
    NoToken,
    #[error("the token cannot be sent in an HTTP header (it has characters a header cannot carry)")]
    BadToken,
    #[error("bad relay URL {url:?}: {why}")]
    BadUrl { url: String, why: String },
    #[error("the connection to the relay broke: {0}")]
    Transport(String),
    #[error("the relay's answer is not what hangar expects: {0}")]
    Protocol(String),
    /// What the user asked for cannot be done as given (an unreadable prompt file, ...).
    #[error("{0}")]
    Input(String),
    /// A stream ended early, and why (its `close` event).
    #[error("{0}")]
    Closed(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// Whether opening the stream again may work: the relay went away or restarts, or the
    /// connection broke.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Connect { .. } | Error::Transport(_) => true,
            // 503: the relay is shutting down (it refuses new streams until it starts again).
            Error::Api { status, .. } | Error::Status { status, .. } => *status == 503 || *status == 502,
            _ => false,
        }
    }

    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Error::Io(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// Where the relay is: `http://host:port`, with an optional path prefix (a relay behind a proxy).
#[derive(Clone, Debug)]
pub struct Base {
    authority: http::uri::Authority,
    prefix: String,
    shown: String,
}

impl Base {
    pub fn parse(url: &str) -> Result<Base, Error> {
        let bad = |why: &str| Error::BadUrl { url: url.to_string(), why: why.to_string() };
        let uri: http::Uri = url.trim().parse().map_err(|_| bad("not a URL like http://127.0.0.1:7470"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(bad("https is not supported: hangar speaks plain HTTP, as the relay serves it"));
            }
            _ => return Err(bad("not a URL like http://127.0.0.1:7470")),
        }
        let authority = uri.authority().cloned().ok_or_else(|| bad("no host"))?;
        if uri.query().is_some() {
            return Err(bad("a query string has no place in it"));
        }
        let prefix = uri.path().trim_end_matches('/').to_string();
        Ok(Base { shown: format!("http://{authority}{prefix}"), authority, prefix })
    }

    fn uri(&self, path_and_query: &str) -> Result<http::Uri, Error> {
        format!("http://{}{}{}", self.authority, self.prefix, path_and_query)
            .parse()
            .map_err(|_| Error::Input(format!("cannot make a URL of {path_and_query:?}")))
    }
}

impl fmt::Display for Base {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

/// A path from segments, each percent-encoded (a name the user typed never changes the route).
pub fn path(segments: &[&str]) -> String {
    segments.iter().fold(String::new(), |mut p, s| {
        p.push('/');
        p.push_str(&encode(s));
        p
    })
}

/// `path?k=v&...`, the values percent-encoded.
pub fn with_query(path: &str, params: &[(&str, String)]) -> String {
    if params.is_empty() {
        return path.to_string();
    }
    let q: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
    format!("{path}?{}", q.join("&"))
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub struct Client {
    base: Base,
    token: Option<String>,
    http: Hyper<HttpConnector, Full<Bytes>>,
}

// By hand: the derived one would print the token.
impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").field("base", &self.base).field("token", &self.token.as_ref().map(|_| "***")).finish()
    }
}

impl Client {
    pub fn new(url: &str, token: Option<String>) -> Result<Client, Error> {
        let base = Base::parse(url)?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        // Streams are read as they come: no Nagle delay on the small requests.
        connector.set_nodelay(true);
        let http = Hyper::builder(TokioExecutor::new()).build(connector);
        Ok(Client { base, token: token.filter(|t| !t.is_empty()), http })
    }

    pub fn base(&self) -> &Base {
        &self.base
    }

    /// A WebSocket's upgrade request for `path_and_query` (`ws://`, its handshake headers set)
    /// with the bearer header, and the `host:port` to connect to: the token goes in the header,
    /// never the URL.
    pub fn websocket(&self, path_and_query: &str) -> Result<(http::Request<()>, String), Error> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        let token = self.token.as_deref().ok_or(Error::NoToken)?;
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| Error::BadToken)?;
        auth.set_sensitive(true);
        let b = &self.base;
        let url = format!("ws://{}{}{}", b.authority, b.prefix, path_and_query);
        let mut req =
            url.as_str().into_client_request().map_err(|e| Error::Input(format!("a WebSocket to {url}: {e}")))?;
        req.headers_mut().insert(header::AUTHORIZATION, auth);
        let port = b.authority.port_u16().unwrap_or(80);
        Ok((req, format!("{}:{port}", b.authority.host())))
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        last_event_id: Option<&str>,
    ) -> Result<Request<Full<Bytes>>, Error> {
        let token = self.token.as_deref().ok_or(Error::NoToken)?;
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| Error::BadToken)?;
        auth.set_sensitive(true);
        let mut req = Request::builder().method(method).uri(self.base.uri(path)?).header(header::AUTHORIZATION, auth);
        if let Some(id) = last_event_id {
            let v = HeaderValue::from_str(id).map_err(|_| Error::Protocol(format!("an event id {id:?}")))?;
            req = req.header("last-event-id", v);
        }
        let bytes = match body {
            Some(b) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Bytes::from(b.to_string())
            }
            None => Bytes::new(),
        };
        req.body(Full::new(bytes)).map_err(|e| Error::Input(e.to_string()))
    }

    /// Sends a request; an error status becomes the relay's error.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        last_event_id: Option<&str>,
    ) -> Result<Response<Incoming>, Error> {
        let req = self.request(method, path, body, last_event_id)?;
        let resp = self.http.request(req).await.map_err(|e| self.transport_error(&e))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(error_of(resp).await)
    }

    fn transport_error(&self, e: &hyper_util::client::legacy::Error) -> Error {
        let io = io_error_in(e);
        if e.is_connect() {
            let reason = match io.map(|e| e.kind()) {
                Some(std::io::ErrorKind::ConnectionRefused) => "connection refused".to_string(),
                Some(std::io::ErrorKind::TimedOut) => "timed out".to_string(),
                _ => chain(e),
            };
            return Error::Connect { url: self.base.to_string(), reason };
        }
        Error::Transport(chain(e))
    }

    /// One call whose answer is JSON (`Value::Null` for an empty answer, a 204).
    pub async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, Error> {
        let what = format!("{method} {path}");
        let work = async {
            let resp = self.send(method, path, body, None).await?;
            let bytes = read_body(resp.into_body()).await?;
            if bytes.iter().all(u8::is_ascii_whitespace) {
                return Ok(Value::Null);
            }
            serde_json::from_slice(&bytes).map_err(|e| Error::Protocol(format!("{what}: {e}")))
        };
        tokio::time::timeout(REQUEST_TIMEOUT, work)
            .await
            .map_err(|_| Error::Transport(format!("no answer within {} s", REQUEST_TIMEOUT.as_secs())))?
    }

    pub async fn get(&self, path: &str) -> Result<Value, Error> {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, Error> {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Result<Value, Error> {
        self.call(Method::DELETE, path, None).await
    }

    /// Opens an event stream (`POST` for a streamed exec, `GET` for the others).
    pub async fn stream(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        last_event_id: Option<&str>,
    ) -> Result<EventStream, Error> {
        let open = self.send(method, path, body, last_event_id);
        let resp = tokio::time::timeout(REQUEST_TIMEOUT, open).await.map_err(|_| {
            Error::Transport(format!("the stream did not open within {} s", REQUEST_TIMEOUT.as_secs()))
        })??;
        Ok(EventStream { body: resp.into_body(), parser: SseParser::default(), ready: VecDeque::new(), ended: false })
    }

    /// Reads a stream to its end, opening it again from the last event id it saw when the
    /// connection breaks or `on_event` says `Reopen` (a stream closed for its lifetime, the relay
    /// restarting). The first open must succeed: an error then is the caller's.
    pub async fn follow<F>(&self, path: &str, mut last_id: Option<String>, mut on_event: F) -> Result<i32, Error>
    where
        F: FnMut(&SseEvent) -> Result<Next, Error>,
    {
        let mut opened = false;
        let mut backoff = MIN_BACKOFF;
        loop {
            let mut stream = match self.stream(Method::GET, path, None, last_id.as_deref()).await {
                Ok(s) => s,
                Err(e) if opened && e.is_transient() => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
                Err(e) => return Err(e),
            };
            opened = true;
            let why = loop {
                match stream.next().await {
                    Ok(Some(ev)) => {
                        if let Some(id) = &ev.id {
                            last_id = Some(id.clone());
                        }
                        match on_event(&ev)? {
                            Next::Continue => backoff = MIN_BACKOFF,
                            Next::Reopen(why) => break why,
                            Next::Stop(code) => return Ok(code),
                        }
                    }
                    Ok(None) => break "the relay ended the stream".to_string(),
                    Err(e) if e.is_transient() => break e.to_string(),
                    Err(e) => return Err(e),
                }
            };
            let from = last_id.as_deref().map(|id| format!(" after {id}")).unwrap_or_default();
            note!("hangar: {why}; reconnecting{from}");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

const MIN_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What a stream's reader wants after an event.
#[derive(Debug, PartialEq)]
pub enum Next {
    Continue,
    /// Open the stream again from the last event id (why, for the note on stderr).
    Reopen(String),
    /// Done: exit with this code.
    Stop(i32),
}

/// What a `close` event (`{"reason", "message"}`) means for a reader: `done` ends it well; a
/// stream closed for its lifetime or byte cap, a broken daemon stream or the relay's shutdown is
/// opened again from where it was; revoked, paused, destroyed end it with the reason.
pub fn on_close(ev: &SseEvent) -> Result<Next, Error> {
    let v = ev.json().unwrap_or(Value::Null);
    let reason = v["reason"].as_str().unwrap_or("unknown");
    let message = v["message"].as_str().map(|m| format!(": {}", crate::render::clean(m))).unwrap_or_default();
    match reason {
        "done" => Ok(Next::Stop(0)),
        "lifetime" | "max_bytes" | "cap" | "error" | "shutdown" => {
            Ok(Next::Reopen(format!("the stream closed ({reason}{message})")))
        }
        _ => Err(Error::Closed(format!("the stream ended: {}{message}", crate::render::clean(reason)))),
    }
}

async fn read_body(body: Incoming) -> Result<Bytes, Error> {
    Limited::new(body, MAX_BODY_BYTES)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| Error::Transport(format!("reading the answer: {e}")))
}

/// The relay's error, or the status alone when the body is not its JSON.
async fn error_of(resp: Response<Incoming>) -> Error {
    let status = resp.status();
    let bytes = read_body(resp.into_body()).await.unwrap_or_default();
    parse_error(status, &bytes)
}

pub fn parse_error(status: StatusCode, body: &[u8]) -> Error {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        let e = &v["error"];
        if let (Some(code), Some(message)) = (e["code"].as_str(), e["message"].as_str()) {
            return Error::Api { status: status.as_u16(), code: code.to_string(), message: message.to_string() };
        }
    }
    let text: String = String::from_utf8_lossy(body).trim().chars().take(200).collect();
    let reason = status.canonical_reason().map(|r| format!(" {r}")).unwrap_or_default();
    let detail = if text.is_empty() { reason } else { format!("{reason}: {}", crate::render::clean(&text)) };
    Error::Status { status: status.as_u16(), detail }
}

fn io_error_in<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        cur = err.source();
    }
    None
}

/// An error with its causes, `a: b: c`.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// An open event stream.
pub struct EventStream {
    body: Incoming,
    parser: SseParser,
    ready: VecDeque<SseEvent>,
    ended: bool,
}

impl EventStream {
    /// The next event, or `None` when the stream ended.
    pub async fn next(&mut self) -> Result<Option<SseEvent>, Error> {
        loop {
            if let Some(ev) = self.ready.pop_front() {
                return Ok(Some(ev));
            }
            if self.ended {
                return Ok(None);
            }
            match tokio::time::timeout(IDLE_TIMEOUT, self.body.frame()).await {
                Err(_) => {
                    return Err(Error::Transport(format!("nothing from the relay for {} s", IDLE_TIMEOUT.as_secs())));
                }
                // An event cut off by the end is not an event (the SSE rule): nothing to flush.
                Ok(None) => self.ended = true,
                Ok(Some(Err(e))) => return Err(Error::Transport(chain(&e))),
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.ready.extend(self.parser.feed(&data));
                    }
                }
            }
        }
    }
}

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    /// `message` when the stream named none.
    pub event: String,
    /// The `id:` this event carried, if it had one.
    pub id: Option<String>,
    pub data: String,
}

impl SseEvent {
    pub fn json(&self) -> Result<Value, Error> {
        serde_json::from_str(&self.data)
            .map_err(|e| Error::Protocol(format!("a {} event's data is not JSON ({e})", self.event)))
    }

    /// The event as `--json` prints it: its name, id and data (JSON when it is).
    pub fn to_json(&self) -> Value {
        let data = serde_json::from_str(&self.data).unwrap_or_else(|_| Value::String(self.data.clone()));
        serde_json::json!({ "event": self.event, "id": self.id, "data": data })
    }
}

/// The SSE wire format (the WHATWG rules the relay's events follow): lines end with LF, CR or
/// CRLF, possibly split across reads; `field: value` with one optional space; `data:` lines join
/// with LF; a line starting with `:` is a comment (the relay's keep-alive); a blank line ends an
/// event, which is dispatched only if it had data.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
    id: Option<String>,
}

impl SseParser {
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for &b in bytes {
            if std::mem::take(&mut self.after_cr) && b == b'\n' {
                continue;
            }
            match b {
                b'\n' => self.end_line(&mut out),
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(&mut out);
                }
                _ => self.line.push(b),
            }
        }
        out
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        let bytes = std::mem::take(&mut self.line);
        let line = String::from_utf8_lossy(&bytes);
        if line.is_empty() {
            if self.has_data {
                let event = if self.event.is_empty() { "message".to_string() } else { std::mem::take(&mut self.event) };
                out.push(SseEvent { event, id: self.id.take(), data: std::mem::take(&mut self.data) });
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            self.id = None;
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (&*line, ""),
        };
        match field {
            "event" => self.event = value.to_string(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // The rule: an id with a NUL is ignored.
            "id" if !value.contains('\0') => self.id = Some(value.to_string()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, id: Option<&str>, data: &str) -> SseEvent {
        SseEvent { event: event.into(), id: id.map(Into::into), data: data.into() }
    }

    #[test]
    fn events_fields_and_comments() {
        let mut p = SseParser::default();
        let got = p.feed(
            b": keep-alive\n\nevent: output\nid: 7\ndata: {\"data\":\"a\"}\n\ndata: plain\n\nevent: close\ndata: {}\n\n",
        );
        assert_eq!(
            got,
            vec![ev("output", Some("7"), "{\"data\":\"a\"}"), ev("message", None, "plain"), ev("close", None, "{}")]
        );
    }

    #[test]
    fn multi_line_data_joins_with_newlines() {
        let mut p = SseParser::default();
        assert_eq!(p.feed(b"data: one\ndata:two\ndata:  three\n\n"), vec![ev("message", None, "one\ntwo\n three")]);
    }

    #[test]
    fn any_split_and_any_line_ending_give_the_same_events() {
        let text = "event: a\r\nid: 1\r\ndata: x\r\n\r\nevent: b\rdata: y\r\rdata: z\n\n";
        let want = vec![ev("a", Some("1"), "x"), ev("b", None, "y"), ev("message", None, "z")];
        for split in 0..text.len() {
            let mut p = SseParser::default();
            let (a, b) = text.as_bytes().split_at(split);
            let mut got = p.feed(a);
            got.extend(p.feed(b));
            assert_eq!(got, want, "split at {split}");
        }
        let mut p = SseParser::default();
        let got: Vec<SseEvent> = text.as_bytes().iter().flat_map(|b| p.feed(&[*b])).collect();
        assert_eq!(got, want, "a byte at a time");
    }

    #[test]
    fn a_character_split_across_reads_is_kept_whole() {
        let text = "data: café ✓\n\n".as_bytes();
        let mut p = SseParser::default();
        let mut got = p.feed(&text[..9]);
        got.extend(p.feed(&text[9..]));
        assert_eq!(got, vec![ev("message", None, "café ✓")]);
    }

    #[test]
    fn no_data_no_event_and_an_unfinished_event_waits() {
        let mut p = SseParser::default();
        assert_eq!(p.feed(b"event: ping\n\nid: 3\n\n: only a comment\n\n"), vec![]);
        assert_eq!(p.feed(b"data: half"), vec![]);
        assert_eq!(p.feed(b"\n"), vec![]);
        assert_eq!(p.feed(b"\n"), vec![ev("message", None, "half")]);
        // An empty `data:` is data.
        assert_eq!(p.feed(b"data:\n\n"), vec![ev("message", None, "")]);
    }

    #[test]
    fn unknown_fields_and_lines_without_a_colon_are_ignored() {
        let mut p = SseParser::default();
        assert_eq!(p.feed(b"retry: 10\nbogus\nid: a\0b\ndata: x\n\n"), vec![ev("message", None, "x")]);
    }

    #[test]
    fn json_lines_keep_the_event_and_id() {
        let e = ev("output", Some("12"), "{\"data\":\"hi\\n\",\"stream\":\"stdout\"}");
        assert_eq!(
            e.to_json(),
            serde_json::json!({"event": "output", "id": "12", "data": {"data": "hi\n", "stream": "stdout"}})
        );
        assert_eq!(ev("message", None, "not json").to_json()["data"], "not json");
    }

    #[test]
    fn close_reasons() {
        let close = |data: &str| on_close(&ev("close", None, data));
        assert_eq!(close(r#"{"reason":"done","message":"the turn ended: succeeded"}"#).ok(), Some(Next::Stop(0)));
        assert!(matches!(close(r#"{"reason":"lifetime","message":null}"#), Ok(Next::Reopen(_))));
        assert!(matches!(close(r#"{"reason":"shutdown"}"#), Ok(Next::Reopen(_))));
        let e = close(r#"{"reason":"revoked","message":null}"#).expect_err("revoked ends it");
        assert_eq!(e.to_string(), "the stream ended: revoked");
        let e = close(r#"{"reason":"destroyed","message":"gone"}"#).expect_err("destroyed ends it");
        assert_eq!(e.to_string(), "the stream ended: destroyed: gone");
        assert!(close("not json").is_err());
    }

    #[test]
    fn urls() {
        let b = Base::parse("http://127.0.0.1:7470").expect("url");
        assert_eq!(b.to_string(), "http://127.0.0.1:7470");
        assert_eq!(b.uri("/api/x").expect("uri").to_string(), "http://127.0.0.1:7470/api/x");
        let b = Base::parse("http://relay.example:80/hangar/").expect("url");
        assert_eq!(b.uri("/api/x?a=1").expect("uri").to_string(), "http://relay.example:80/hangar/api/x?a=1");
        for bad in ["127.0.0.1:7470", "https://relay.example", "ftp://x", "http://", "http://h/?q=1", "not a url"] {
            assert!(Base::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn segments_and_queries_are_encoded() {
        assert_eq!(path(&["api", "sandboxes", "a/b c", "exec"]), "/api/sandboxes/a%2Fb%20c/exec");
        assert_eq!(
            with_query("/w", &[("path", "src/ä x".into()), ("recursive", "true".into())]),
            "/w?path=src%2F%C3%A4%20x&recursive=true"
        );
        assert_eq!(with_query("/w", &[]), "/w");
    }

    #[test]
    fn the_relays_errors_and_others() {
        let e =
            parse_error(StatusCode::NOT_FOUND, br#"{"error": {"code": "not_found", "message": "no sandbox \"x\""}}"#);
        assert_eq!(e.to_string(), "no sandbox \"x\" (not_found, HTTP 404)");
        let e = parse_error(StatusCode::METHOD_NOT_ALLOWED, b"");
        assert_eq!(e.to_string(), "the relay answered HTTP 405 Method Not Allowed");
        let e = parse_error(StatusCode::BAD_GATEWAY, b"<html>bad\x1b[2J gateway</html>");
        assert_eq!(e.to_string(), "the relay answered HTTP 502 Bad Gateway: <html>bad?[2J gateway</html>");
        assert!(e.is_transient());
    }

    #[test]
    fn the_token_is_never_in_debug_output() {
        let c = Client::new("http://127.0.0.1:1", Some("hgr_secret".into())).expect("client");
        assert!(!format!("{c:?}").contains("hgr_secret"));
    }

    #[tokio::test]
    async fn a_refused_connection_names_the_url() {
        // A port nothing listens on: bind one, note it, free it.
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
        let c = Client::new(&format!("http://127.0.0.1:{port}"), Some("t".into())).expect("client");
        let e = c.get("/api/sandboxes").await.expect_err("nothing listens");
        let msg = e.to_string();
        assert!(matches!(e, Error::Connect { .. }), "{e:?}");
        assert!(msg.contains(&format!("http://127.0.0.1:{port}")) && msg.contains("HANGAR_URL"), "{msg}");
    }

    /// A server that answers each connection with the next of `bodies` as an event stream (then
    /// closes it), and hands back each request's head.
    async fn sse_server(bodies: Vec<&'static str>) -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            for body in bodies {
                let Ok((mut sock, _)) = listener.accept().await else { return };
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tx.send(String::from_utf8_lossy(&head).to_lowercase());
                let resp =
                    format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{body}");
                let _ = sock.write_all(resp.as_bytes()).await;
                let _ = sock.shutdown().await;
            }
        });
        (url, rx)
    }

    #[tokio::test]
    async fn a_stream_that_drops_is_opened_again_from_its_last_event_id() {
        let (url, mut heads) = sse_server(vec![
            ": keep-alive\n\nid: 1\ndata: one\n\nid: 2\ndata: two\n\n",
            "id: 3\ndata: three\n\nevent: close\ndata: {\"reason\":\"lifetime\",\"message\":null}\n\n",
            "id: 4\ndata: four\n\nevent: close\ndata: {\"reason\":\"done\",\"message\":null}\n\n",
        ])
        .await;
        let c = Client::new(&url, Some("tok".into())).expect("client");
        let mut seen = vec![];
        let code = c
            .follow("/api/x/stream", None, |ev| {
                if ev.event == "close" {
                    return on_close(ev);
                }
                seen.push(ev.data.clone());
                Ok(Next::Continue)
            })
            .await
            .expect("follow");
        assert_eq!((code, seen), (0, vec!["one".to_string(), "two".into(), "three".into(), "four".into()]));
        let first = heads.recv().await.expect("first request");
        assert!(first.starts_with("get /api/x/stream ") && !first.contains("last-event-id"), "{first}");
        assert!(first.contains("authorization: bearer tok"), "{first}");
        // After the connection dropped (no close event), and after a close for the lifetime.
        assert!(heads.recv().await.expect("second request").contains("last-event-id: 2\r\n"));
        assert!(heads.recv().await.expect("third request").contains("last-event-id: 3\r\n"));
    }

    #[tokio::test]
    async fn no_token_is_said_before_anything_is_sent() {
        let c = Client::new("http://127.0.0.1:1", None).expect("client");
        assert!(matches!(c.get("/api/sandboxes").await, Err(Error::NoToken)));
    }
}
