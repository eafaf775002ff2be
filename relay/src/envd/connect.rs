//! Connect over HTTP/1.1, as a transport for tonic's generated clients: E2B's envd serves
//! HTTP/1.1 alone and E2B's edge forwards to sandboxes over HTTP/1.1, so gRPC (HTTP/2 with
//! trailers) cannot reach it, while Connect's unary and server-streaming calls can.
//!
//! [`Connect`] takes the gRPC request a generated client makes and sends it as Connect: a unary
//! call's message without its envelope (`application/proto`), a server-streaming call's enveloped
//! (`application/connect+proto`), the deadline as `Connect-Timeout-Ms`. What comes back is made
//! into the gRPC response tonic expects: a unary answer enveloped with `grpc-status: 0` trailers,
//! a stream's envelopes passed on as they arrive (never buffered: this is the live output path)
//! and its end-of-stream message made into the trailers, a Connect error into its gRPC status.
//! Calls that stream from the client are refused at once: HTTP/1.1 carries them only half duplex.
//!
//! Dropping a response's body drops hyper's, which closes that call's connection (it is not
//! returned to the pool unread), so the daemon sees its client go.
//!
//! Invariant: what the daemon sends is data: its messages go to tonic's decoder, which bounds
//! them; error texts and end-of-stream messages are bounded here before they are read.
use std::{
    collections::{HashMap, VecDeque},
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::{Arc, LazyLock},
    task::{ready, Context, Poll},
    time::Duration,
};

use bytes::{Buf, Bytes, BytesMut};
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Body as HttpBody, Frame, Incoming};
use hyper_rustls::HttpsConnector;
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client},
    rt::TokioExecutor,
};
use prost::Message as _;
use serde_json::Value;
use tonic::{body::Body, Code, Status};

use super::EnvdError;
use crate::text::chain;

/// The largest unary answer read: tonic's own limit on a decoded message (4 MiB), which would
/// refuse anything larger anyway.
const MAX_UNARY_BYTES: usize = 4 << 20;
/// The largest error body or end-of-stream message read; the rest of an error is not needed.
const MAX_END_BYTES: usize = 64 << 10;
/// How much of an error body that is not Connect's a message quotes.
const QUOTED_CHARS: usize = 200;
/// How long reading an error's body may take once its status came.
const ERROR_READ: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

const FLAG_COMPRESSED: u8 = 0x01;
const FLAG_END_STREAM: u8 = 0x02;

/// What a method streams, from its descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Unary,
    ServerStream,
    ClientStream,
    Bidi,
}

/// Every method hangar-proto knows, by its path (`/process.Process/Start`): read from the
/// compiled descriptors, so it can never disagree with the generated clients.
static METHODS: LazyLock<HashMap<String, Shape>> = LazyLock::new(|| methods(hangar_proto::FILE_DESCRIPTOR_SET));

fn methods(encoded: &[u8]) -> HashMap<String, Shape> {
    // The set is compiled in; failing to decode it would fail every call, which the tests see.
    let Ok(set) = prost_types::FileDescriptorSet::decode(encoded) else { return HashMap::new() };
    let mut all = HashMap::new();
    for file in &set.file {
        for service in &file.service {
            let service_name = match file.package() {
                "" => service.name().to_string(),
                p => format!("{p}.{}", service.name()),
            };
            for m in &service.method {
                let shape = match (m.client_streaming(), m.server_streaming()) {
                    (false, false) => Shape::Unary,
                    (false, true) => Shape::ServerStream,
                    (true, false) => Shape::ClientStream,
                    (true, true) => Shape::Bidi,
                };
                all.insert(format!("/{service_name}/{}", m.name()), shape);
            }
        }
    }
    all
}

/// A daemon's Connect endpoint: one HTTP/1.1 client (with its pool of connections) per daemon.
#[derive(Clone)]
pub struct Connect {
    /// Shared by every clone (a client's pool is per daemon), and small to copy.
    client: Arc<Client<HttpsConnector<HttpConnector>, Full<Bytes>>>,
    /// `scheme://authority`, without a trailing slash.
    origin: Arc<str>,
}

impl Connect {
    /// A client of the daemon at `url` (`http://` or `https://`, the latter checked against
    /// webpki's roots). It connects lazily.
    pub fn new(url: &str) -> Result<Connect, EnvdError> {
        let bad = || EnvdError::Address(url.to_string());
        let uri: Uri = url.parse().map_err(|_| bad())?;
        let (Some(scheme @ ("http" | "https")), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(bad());
        };
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_nodelay(true);
        http.set_keepalive(Some(TCP_KEEPALIVE));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .map_err(|e| EnvdError::Tls(url.to_string(), e.to_string()))?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).build(https);
        Ok(Connect { client: Arc::new(client), origin: format!("{scheme}://{authority}").into() })
    }

    /// One call, as Connect; every failure is a gRPC status.
    async fn send(self, req: Request<Body>) -> Result<Response<Body>, Status> {
        let path = req.uri().path().to_string();
        let streaming = match METHODS.get(&path) {
            Some(Shape::Unary) => false,
            Some(Shape::ServerStream) => true,
            Some(Shape::ClientStream | Shape::Bidi) => {
                return Err(Status::unimplemented(format!(
                    "{path} streams from the client, which Connect over HTTP/1.1 (the only way to this daemon) cannot carry"
                )))
            }
            None => return Err(Status::unimplemented(format!("{path} is not a method the relay knows"))),
        };
        let (parts, body) = req.into_parts();
        let deadline = parts.headers.get("grpc-timeout").and_then(grpc_timeout);
        // tonic's own encoding of the one request message: trusted, and small.
        let enveloped = body.collect().await?.to_bytes();
        let message = if streaming { enveloped } else { unenvelope(enveloped)? };

        let mut out = Request::builder().method(Method::POST).uri(format!("{}{path}", self.origin));
        if let Some(headers) = out.headers_mut() {
            for (k, v) in parts.headers.iter().filter(|(k, _)| is_metadata(k)) {
                headers.append(k.clone(), v.clone());
            }
            let content_type = if streaming { "application/connect+proto" } else { "application/proto" };
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            headers.insert("connect-protocol-version", HeaderValue::from_static("1"));
            if let Some(d) = deadline {
                headers.insert("connect-timeout-ms", HeaderValue::from(timeout_ms(d)));
            }
        }
        let out = out.body(Full::new(message)).map_err(|e| Status::internal(format!("building the request: {e}")))?;

        let call = self.client.request(out);
        let answered = match deadline {
            Some(d) => tokio::time::timeout(d, call)
                .await
                .map_err(|_| Status::deadline_exceeded("the daemon did not answer within the call's deadline"))?,
            None => call.await,
        };
        let resp = answered.map_err(|e| Status::unavailable(format!("the daemon did not answer: {}", chain(&e))))?;
        if resp.status() != StatusCode::OK {
            return Err(error_of(resp).await);
        }
        let want = if streaming { "application/connect+proto" } else { "application/proto" };
        let got = resp.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        if !got.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case(want) {
            return Err(Status::internal(format!("the daemon answered {got:?}, not {want}")));
        }
        if let Some(enc) = resp.headers().get(header::CONTENT_ENCODING).filter(|v| *v != "identity") {
            return Err(Status::internal(format!("the daemon compressed its answer ({enc:?}) though not asked to")));
        }
        let (parts, body) = resp.into_parts();
        let mut grpc = Response::builder().status(StatusCode::OK);
        let mut trailers = HeaderMap::new();
        if let Some(headers) = grpc.headers_mut() {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
            for (k, v) in parts.headers.iter() {
                match k.as_str().strip_prefix("trailer-") {
                    Some(t) if !streaming => {
                        if let Ok(name) = HeaderName::from_bytes(t.as_bytes()) {
                            if is_metadata(&name) {
                                trailers.append(name, v.clone());
                            }
                        }
                    }
                    _ if is_metadata(k) => {
                        headers.append(k.clone(), v.clone());
                    }
                    _ => {}
                }
            }
        }
        let body = if streaming {
            Body::new(Envelopes { inner: body, framer: Framer::default() })
        } else {
            let message = match Limited::new(body, MAX_UNARY_BYTES).collect().await {
                Ok(c) => c.to_bytes(),
                Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                    return Err(Status::resource_exhausted(format!(
                        "the daemon's answer is larger than the {MAX_UNARY_BYTES} bytes allowed"
                    )))
                }
                Err(e) => return Err(Status::unavailable(format!("reading the daemon's answer: {}", chain(&*e)))),
            };
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            let frames = [Ok::<_, Status>(Frame::data(envelope(&message))), Ok(Frame::trailers(trailers))];
            Body::new(StreamBody::new(futures::stream::iter(frames)))
        };
        grpc.body(body).map_err(|e| Status::internal(format!("building the response: {e}")))
    }
}

impl tower::Service<Request<Body>> for Connect {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    /// Always ready: the client opens a connection per call in flight.
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let this = self.clone();
        // A failure is a trailers-only gRPC response, which tonic reads as that status.
        Box::pin(async move { Ok(this.send(req).await.unwrap_or_else(|s| s.into_http())) })
    }
}

/// Request headers that are the call's metadata (the access token, E2B's routing headers,
/// what the caller added), not gRPC's or HTTP's own.
fn is_metadata(name: &HeaderName) -> bool {
    let n = name.as_str();
    !(n.starts_with("grpc-")
        || n.starts_with("connect-")
        || n.starts_with("trailer-")
        || matches!(
            n,
            "te" | "content-type"
                | "content-length"
                | "content-encoding"
                | "accept-encoding"
                | "transfer-encoding"
                | "connection"
                | "keep-alive"
                | "host"
                | "date"
                | "server"
                | "vary"
        ))
}

/// The message inside tonic's one envelope.
fn unenvelope(mut b: Bytes) -> Result<Bytes, Status> {
    if b.len() < 5 || b[0] != 0 {
        return Err(Status::internal("the request is not one uncompressed gRPC message"));
    }
    let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
    b.advance(5);
    if b.len() != len {
        return Err(Status::internal("the request is not exactly one gRPC message"));
    }
    Ok(b)
}

fn envelope(message: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + message.len());
    b.extend_from_slice(&[0]);
    b.extend_from_slice(&(message.len() as u32).to_be_bytes());
    b.extend_from_slice(message);
    b.freeze()
}

/// gRPC's `grpc-timeout` (digits and a unit) as a duration.
fn grpc_timeout(v: &HeaderValue) -> Option<Duration> {
    let s = v.to_str().ok()?;
    let (n, unit) = s.split_at(s.len().checked_sub(1)?);
    let n: u64 = n.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Connect's `Connect-Timeout-Ms`: whole milliseconds, rounded up (a deadline never shrinks to
/// none), at most the 10 digits the header allows.
fn timeout_ms(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000).max(1);
    u64::try_from(ms).unwrap_or(u64::MAX).min(9_999_999_999)
}

/// Connect's code names.
fn code_of_name(name: &str) -> Option<Code> {
    Some(match name {
        "canceled" => Code::Cancelled,
        "unknown" => Code::Unknown,
        "invalid_argument" => Code::InvalidArgument,
        "deadline_exceeded" => Code::DeadlineExceeded,
        "not_found" => Code::NotFound,
        "already_exists" => Code::AlreadyExists,
        "permission_denied" => Code::PermissionDenied,
        "resource_exhausted" => Code::ResourceExhausted,
        "failed_precondition" => Code::FailedPrecondition,
        "aborted" => Code::Aborted,
        "out_of_range" => Code::OutOfRange,
        "unimplemented" => Code::Unimplemented,
        "internal" => Code::Internal,
        "unavailable" => Code::Unavailable,
        "data_loss" => Code::DataLoss,
        "unauthenticated" => Code::Unauthenticated,
        _ => return None,
    })
}

/// The code of an error whose body is not Connect's (a proxy's, an edge's): Connect's mapping,
/// which is gRPC's.
fn code_of_http(status: StatusCode) -> Code {
    match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    }
}

/// A Connect error `{"code", "message"}` as its status; `None` when `v` is not one.
fn connect_error(v: &Value) -> Option<Status> {
    let code = v.get("code")?.as_str()?;
    let message = v.get("message").and_then(Value::as_str).unwrap_or_default();
    Some(Status::new(code_of_name(code).unwrap_or(Code::Unknown), message))
}

/// A non-200 answer as its status: the Connect error it carries, else its HTTP status mapped,
/// with (a bounded part of) what it said.
async fn error_of(resp: Response<Incoming>) -> Status {
    let status = resp.status();
    let read = tokio::time::timeout(ERROR_READ, Limited::new(resp.into_body(), MAX_END_BYTES).collect()).await;
    let body = match read {
        Ok(Ok(c)) => c.to_bytes(),
        _ => Bytes::new(),
    };
    let json: Option<Value> = serde_json::from_slice(&body).ok();
    if let Some(s) = json.as_ref().and_then(connect_error) {
        return s;
    }
    let said = match json.as_ref().and_then(|v| v.get("message")).and_then(Value::as_str) {
        Some(m) => m.to_string(),
        None => String::from_utf8_lossy(&body).into_owned(),
    };
    let said: String = said.chars().filter(|c| !c.is_control()).take(QUOTED_CHARS).collect();
    let said = if said.trim().is_empty() { String::new() } else { format!(": {}", said.trim()) };
    Status::new(code_of_http(status), format!("the daemon answered HTTP {status}{said}"))
}

/// Where a streamed answer's parser is.
enum State {
    /// Waiting for an envelope's 5-byte prefix.
    Header,
    /// Passing on this many more bytes of a message.
    Data(usize),
    /// Collecting the end-of-stream message of this many bytes.
    End(usize),
}

/// What a body has delivered and not yet been passed on: its chunks as they came, so that a
/// message's bytes go on as slices of them, never copied; only what must be read whole (an
/// envelope's 5-byte header, the small end-of-stream message) is gathered across chunks.
#[derive(Default)]
struct Received {
    chunks: VecDeque<Bytes>,
    len: usize,
}

impl Received {
    fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.len += b.len();
            self.chunks.push_back(b);
        }
    }

    /// Up to `n` bytes, from the first chunk only.
    fn take_front(&mut self, n: usize) -> Option<Bytes> {
        let front = self.chunks.front_mut()?;
        let b = if n >= front.len() { self.chunks.pop_front()? } else { front.split_to(n) };
        self.len -= b.len();
        Some(b)
    }

    /// Exactly `n` bytes, of which there must be as many.
    fn take_exact(&mut self, n: usize) -> Bytes {
        match self.chunks.front() {
            Some(f) if f.len() >= n => self.take_front(n).unwrap_or_default(),
            _ => {
                let mut out = BytesMut::with_capacity(n);
                while out.len() < n {
                    let Some(b) = self.take_front(n - out.len()) else { break };
                    out.extend_from_slice(&b);
                }
                out.freeze()
            }
        }
    }
}

/// A Connect stream's body made into a gRPC one: message envelopes are framed alike in both
/// protocols and pass through as they come; the end-of-stream message becomes the trailers.
struct Envelopes {
    inner: Incoming,
    framer: Framer,
}

/// The parsing half of [`Envelopes`]: what arrived in, gRPC frames out.
struct Framer {
    pending: Received,
    state: State,
    done: bool,
}

impl Default for Framer {
    fn default() -> Self {
        Framer { pending: Received::default(), state: State::Header, done: false }
    }
}

impl Framer {
    /// The next frame that what has arrived makes, if any.
    fn next_frame(&mut self) -> Option<Frame<Bytes>> {
        loop {
            match self.state {
                State::Data(n) => {
                    let b = self.pending.take_front(n)?;
                    self.state = if b.len() == n { State::Header } else { State::Data(n - b.len()) };
                    return Some(Frame::data(b));
                }
                State::Header => {
                    if self.pending.len < 5 {
                        return None;
                    }
                    let header = self.pending.take_exact(5);
                    let flags = header[0];
                    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
                    if flags == 0 {
                        self.state = if len == 0 { State::Header } else { State::Data(len) };
                        return Some(Frame::data(header));
                    }
                    if flags == FLAG_END_STREAM {
                        if len > MAX_END_BYTES {
                            return Some(self.fail(Status::resource_exhausted(format!(
                                "the daemon's end-of-stream message of {len} bytes is larger than the {MAX_END_BYTES} allowed"
                            ))));
                        }
                        self.state = State::End(len);
                        continue;
                    }
                    let why = if flags & FLAG_COMPRESSED != 0 { "compressed, though not asked to" } else { "unknown" };
                    return Some(self.fail(Status::internal(format!(
                        "the daemon sent an envelope with flags {flags:#04x} ({why})"
                    ))));
                }
                State::End(len) => {
                    if self.pending.len < len {
                        return None;
                    }
                    let end = self.pending.take_exact(len);
                    self.done = true;
                    return Some(Frame::trailers(end_of_stream(&end)));
                }
            }
        }
    }

    /// Ends the stream with `status`.
    fn fail(&mut self, status: Status) -> Frame<Bytes> {
        self.done = true;
        Frame::trailers(status_trailers(&status))
    }
}

impl HttpBody for Envelopes {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let Envelopes { inner, framer } = &mut *self;
        loop {
            if framer.done {
                return Poll::Ready(None);
            }
            if let Some(frame) = framer.next_frame() {
                return Poll::Ready(Some(Ok(frame)));
            }
            let failed = match ready!(Pin::new(&mut *inner).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        framer.pending.push(data);
                    }
                    continue;
                }
                Some(Err(e)) => Status::unavailable(format!("the daemon's stream broke: {}", chain(&e))),
                None => Status::unavailable("the daemon's stream ended without its end-of-stream message"),
            };
            return Poll::Ready(Some(Ok(framer.fail(failed))));
        }
    }
}

/// The trailers an end-of-stream message `{"error"?, "metadata"?}` stands for.
fn end_of_stream(json: &[u8]) -> HeaderMap {
    let Ok(v) = serde_json::from_slice::<Value>(json) else {
        return status_trailers(&Status::internal("the daemon's end-of-stream message is not JSON"));
    };
    let status = match v.get("error") {
        None | Some(Value::Null) => Status::new(Code::Ok, ""),
        Some(e) => connect_error(e).unwrap_or_else(|| Status::unknown("the daemon's stream failed without a code")),
    };
    let mut trailers = status_trailers(&status);
    if let Some(Value::Object(metadata)) = v.get("metadata") {
        for (k, values) in metadata {
            let Ok(name) = HeaderName::from_bytes(k.as_bytes()) else { continue };
            if !is_metadata(&name) {
                continue;
            }
            for value in values.as_array().into_iter().flatten().filter_map(Value::as_str) {
                if let Ok(value) = HeaderValue::from_str(value) {
                    trailers.append(name.clone(), value);
                }
            }
        }
    }
    trailers
}

fn status_trailers(status: &Status) -> HeaderMap {
    let mut trailers = HeaderMap::new();
    if status.add_header(&mut trailers).is_err() {
        trailers.insert("grpc-status", HeaderValue::from(status.code() as i32));
    }
    trailers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_is_known_with_its_shape() {
        assert_eq!(METHODS.get("/process.Process/Start"), Some(&Shape::ServerStream));
        assert_eq!(METHODS.get("/process.Process/List"), Some(&Shape::Unary));
        assert_eq!(METHODS.get("/process.Process/StreamInput"), Some(&Shape::ClientStream));
        assert_eq!(METHODS.get("/filesystem.Filesystem/WatchDir"), Some(&Shape::ServerStream));
        assert_eq!(METHODS.get("/hangar.envd.v1.Daemon/Info"), Some(&Shape::Unary));
        assert_eq!(METHODS.get("/hangar.envd.v1.Processes/Attach"), Some(&Shape::ServerStream));
    }

    #[test]
    fn deadlines_carry_over_rounded_up() {
        let t = |s: &'static str| grpc_timeout(&HeaderValue::from_static(s)).map(timeout_ms);
        assert_eq!(
            (t("1500m"), t("2S"), t("1M"), t("1500u"), t("1n")),
            (Some(1500), Some(2000), Some(60_000), Some(2), Some(1))
        );
        assert_eq!((t(""), t("m"), t("12x"), t("-1S")), (None, None, None, None));
        assert_eq!(t("99999999H"), Some(9_999_999_999));
    }

    #[test]
    fn errors_take_connects_code_else_the_http_statuss() {
        let v = serde_json::json!({"code": "not_found", "message": "process with pid 7 not found"});
        let s = connect_error(&v).expect("a Connect error");
        assert_eq!((s.code(), s.message()), (Code::NotFound, "process with pid 7 not found"));
        assert_eq!(connect_error(&serde_json::json!({"code": "teapot"})).map(|s| s.code()), Some(Code::Unknown));
        // E2B's edge answers with a number for a code: not Connect's, so the status decides.
        assert_eq!(connect_error(&serde_json::json!({"code": 502, "message": "x"})).map(|s| s.code()), None);
        let codes: Vec<Code> = [400, 401, 403, 404, 429, 502, 503, 504, 500, 418]
            .into_iter()
            .map(|s| code_of_http(StatusCode::from_u16(s).expect("a status")))
            .collect();
        use Code::*;
        assert_eq!(
            codes,
            [
                Internal,
                Unauthenticated,
                PermissionDenied,
                Unimplemented,
                Unavailable,
                Unavailable,
                Unavailable,
                Unavailable,
                Unknown,
                Unknown
            ]
        );
    }

    #[test]
    fn the_end_of_stream_message_becomes_the_trailers() {
        let t = end_of_stream(br#"{"error": {"code": "deadline_exceeded", "message": "too late"}, "metadata": {"x-a": ["1", "2"], "grpc-status": ["0"]}}"#);
        let s = Status::from_header_map(&t).expect("a status");
        assert_eq!((s.code(), s.message()), (Code::DeadlineExceeded, "too late"));
        assert_eq!(t.get_all("x-a").iter().collect::<Vec<_>>(), ["1", "2"]);
        assert_eq!(Status::from_header_map(&end_of_stream(b"{}")).map(|s| s.code()), Some(Code::Ok));
        assert_eq!(Status::from_header_map(&end_of_stream(b"nope")).map(|s| s.code()), Some(Code::Internal));
    }

    #[test]
    fn only_metadata_goes_on() {
        let names =
            ["x-access-token", "e2b-sandbox-id", "keepalive-ping-interval", "te", "grpc-timeout", "content-type"];
        let kept: Vec<&str> = names.into_iter().filter(|n| is_metadata(&HeaderName::from_static(n))).collect();
        assert_eq!(kept, ["x-access-token", "e2b-sandbox-id", "keepalive-ping-interval"]);
    }

    /// Feeds `body` to a framer in chunks of `size` and collects what it makes.
    fn framed(body: &[u8], size: usize) -> (Vec<Bytes>, Option<HeaderMap>) {
        let mut f = Framer::default();
        let (mut data, mut trailers) = (Vec::new(), None);
        for chunk in body.chunks(size) {
            f.pending.push(Bytes::copy_from_slice(chunk));
            while let Some(frame) = f.next_frame() {
                match frame.into_data() {
                    Ok(d) => data.push(d),
                    Err(frame) => trailers = frame.into_trailers().ok(),
                }
            }
        }
        (data, trailers)
    }

    #[test]
    fn messages_pass_through_however_the_body_is_cut() {
        let (one, two) = (vec![b'a'; 300], b"second".to_vec());
        let end = br#"{"metadata":{"x-note":["kept"]}}"#;
        let mut body = Vec::new();
        for (flags, m) in [(0u8, &one[..]), (0, &two[..]), (FLAG_END_STREAM, &end[..])] {
            body.push(flags);
            body.extend_from_slice(&(m.len() as u32).to_be_bytes());
            body.extend_from_slice(m);
        }
        let grpc_len = body.len() - 5 - end.len();
        // Cut inside headers, inside messages, and inside the end-of-stream message.
        for size in [1, 3, 5, 7, 64, 301, body.len()] {
            let (data, trailers) = framed(&body, size);
            assert_eq!(data.concat(), body[..grpc_len], "chunks of {size}: the envelopes pass as they came");
            let t = trailers.unwrap_or_else(|| panic!("chunks of {size}: no trailers"));
            assert_eq!(t.get("grpc-status").map(|v| v.as_bytes()), Some(&b"0"[..]), "chunks of {size}");
            assert_eq!(t.get("x-note").map(|v| v.as_bytes()), Some(&b"kept"[..]), "chunks of {size}");
        }
        // A message arriving in one chunk goes on as that chunk's slice, not a copy.
        let chunk = Bytes::from(body.clone());
        let mut f = Framer::default();
        f.pending.push(chunk.clone());
        let _header = f.next_frame();
        let message = f.next_frame().and_then(|fr| fr.into_data().ok()).unwrap_or_default();
        assert_eq!(message.as_ptr(), chunk[5..].as_ptr(), "the message is a slice of what arrived");
    }
}
