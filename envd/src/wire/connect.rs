//! The Connect protocol (JSON and binary; unary, server-streaming, client-streaming) over the same
//! tonic service traits gRPC uses: each method decodes the body into the message type, builds a
//! `tonic::Request` carrying the HTTP extensions (the call context), and encodes what comes back.
//!
//! Server-streaming methods answer gRPC here too (not through tonic): a streamed message is sent
//! as the slices it is made of, so a process's output goes from its ring to the socket without a
//! copy, and no stream keeps an encoding buffer of its own (tonic's keeps one as large as the
//! largest message it sent, 64 KiB and more for every open output stream).
use std::{collections::HashMap, future::Future, marker::PhantomData, pin::Pin, sync::Arc};

use axum::body::Body;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::{Stream, StreamExt};
use http::{header, HeaderValue, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde::{de::DeserializeOwned, Serialize};
use tonic::{
    codec::{DecodeBuf, Decoder},
    metadata::MetadataMap,
    Code, Status,
};

use crate::{error::RpcError, events};

/// Both codecs a message must support.
pub trait Msg: prost::Message + Default + Serialize + DeserializeOwned + Send + 'static {}
impl<T: prost::Message + Default + Serialize + DeserializeOwned + Send + 'static> Msg for T {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Json,
    Proto,
}

impl Codec {
    /// A request message from its body (or envelope payload): every RPC's request is read here.
    pub fn decode<M: Msg>(self, bytes: &[u8]) -> Result<M, RpcError> {
        match self {
            Codec::Json if bytes.iter().all(u8::is_ascii_whitespace) => Ok(M::default()),
            Codec::Json => serde_json::from_slice(bytes)
                .map_err(|e| RpcError::invalid_argument(format!("malformed JSON message: {e}"))),
            Codec::Proto => {
                M::decode(bytes).map_err(|e| RpcError::invalid_argument(format!("malformed protobuf message: {e}")))
            }
        }
    }

    pub fn encode<M: Msg>(self, m: &M) -> Bytes {
        match self {
            // Serializing a generated message cannot fail: its maps have string keys.
            Codec::Json => serde_json::to_vec(m).map(Bytes::from).unwrap_or_default(),
            Codec::Proto => Bytes::from(m.encode_to_vec()),
        }
    }

    /// `m` in an envelope (Connect's and gRPC's are framed alike), as the slices it is made of:
    /// see [`Slices`].
    pub fn enveloped<M: Msg>(self, m: &M) -> Vec<Bytes> {
        match self {
            Codec::Json => vec![envelope(0, &self.encode(m))],
            Codec::Proto => {
                let len = m.encoded_len();
                let mut out = Slices::with_capacity(5 + len.min(BY_REFERENCE));
                out.small.put_u8(0);
                out.small.put_u32(len as u32);
                // Cannot fail: a `BytesMut` takes any length.
                let _ = m.encode(&mut out);
                out.finish()
            }
        }
    }

    fn unary_type(self) -> &'static str {
        match self {
            Codec::Json => "application/json",
            Codec::Proto => "application/proto",
        }
    }

    fn stream_type(self) -> &'static str {
        match self {
            Codec::Json => "application/connect+json",
            Codec::Proto => "application/connect+proto",
        }
    }
}

/// How a request's content type says it wants to be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    ConnectUnary(Codec),
    ConnectStream(Codec),
    /// Anything else: plain HTTP routes, or an RPC path with an unsupported content type.
    Plain,
}

impl Protocol {
    pub fn of(headers: &http::HeaderMap) -> Protocol {
        let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let essence = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        match essence.as_str() {
            s if s == "application/grpc" || s.starts_with("application/grpc+") => Protocol::Grpc,
            "application/json" => Protocol::ConnectUnary(Codec::Json),
            "application/proto" => Protocol::ConnectUnary(Codec::Proto),
            "application/connect+json" => Protocol::ConnectStream(Codec::Json),
            "application/connect+proto" => Protocol::ConnectStream(Codec::Proto),
            _ => Protocol::Plain,
        }
    }
}

pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "canceled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

/// The HTTP status Connect gives each code on unary calls.
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn error_json(e: &RpcError) -> serde_json::Value {
    serde_json::json!({ "code": code_name(e.code), "message": e.message })
}

pub const FLAG_COMPRESSED: u8 = 0x01;
pub const FLAG_END_STREAM: u8 = 0x02;

/// One Connect envelope: the flags byte, the payload's length (big-endian u32), the payload.
pub fn envelope(flags: u8, payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + payload.len());
    b.put_u8(flags);
    b.put_u32(payload.len() as u32);
    b.put_slice(payload);
    b.freeze()
}

/// The end-of-stream envelope: `{}`, or `{"error": {"code", "message"}}`.
pub fn end_stream(err: Option<&RpcError>) -> Bytes {
    let body = match err {
        Some(e) => serde_json::json!({ "error": error_json(e) }),
        None => serde_json::json!({}),
    };
    envelope(FLAG_END_STREAM, body.to_string().as_bytes())
}

/// A `bytes` field at least this long is passed by reference rather than copied.
const BY_REFERENCE: usize = 512;

/// A message's encoding as the slices it is made of: each `bytes` field of at least
/// [`BY_REFERENCE`] bytes (a process's output, a file's) is the message's own `Bytes`, shared, and
/// what lies between them (tags, lengths, small fields) is copied into small buffers. prost writes
/// a `Bytes` field with `BufMut::put`, which is where it is caught.
pub struct Slices {
    done: Vec<Bytes>,
    small: BytesMut,
}

impl Slices {
    fn with_capacity(n: usize) -> Self {
        Self { done: Vec::with_capacity(3), small: BytesMut::with_capacity(n) }
    }

    fn finish(mut self) -> Vec<Bytes> {
        if !self.small.is_empty() {
            self.done.push(self.small.freeze());
        }
        self.done
    }
}

// SAFETY: every method that hands out or advances writable memory delegates to `small`, a
// `BytesMut`, which upholds `BufMut`'s contract itself.
unsafe impl BufMut for Slices {
    fn remaining_mut(&self) -> usize {
        self.small.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller's promise about `cnt` is about `small`'s chunk, which it was given.
        unsafe { self.small.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut bytes::buf::UninitSlice {
        self.small.chunk_mut()
    }

    fn put<T: Buf>(&mut self, mut src: T)
    where
        Self: Sized,
    {
        let n = src.remaining();
        if n < BY_REFERENCE {
            while src.has_remaining() {
                let chunk = src.chunk();
                let k = chunk.len();
                self.small.put_slice(chunk);
                src.advance(k);
            }
            return;
        }
        if !self.small.is_empty() {
            self.done.push(self.small.split().freeze());
        }
        // A `Bytes` gives itself (shared, not copied); any other buffer is copied.
        self.done.push(src.copy_to_bytes(n));
    }
}

/// A unary error response.
pub fn unary_error(e: &RpcError) -> Response<Body> {
    let mut r = Response::new(Body::from(error_json(e).to_string()));
    *r.status_mut() = http_status(e.code);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// A streaming response that is nothing but its end, carrying `e`.
pub fn stream_error(codec: Codec, e: &RpcError) -> Response<Body> {
    let mut r = Response::new(Body::from(end_stream(Some(e))));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(codec.stream_type()));
    r
}

/// The error response for whatever protocol the request speaks.
pub fn error_for(protocol: Protocol, e: &RpcError) -> Response<Body> {
    match protocol {
        Protocol::ConnectStream(codec) => stream_error(codec, e),
        Protocol::Grpc => {
            let status: Status = e.clone().into();
            let (parts, ()) = status.into_http::<()>().into_parts();
            Response::from_parts(parts, Body::empty())
        }
        Protocol::ConnectUnary(_) => unary_error(e),
        Protocol::Plain => super::routes::plain_error(http_status(e.code), e.message.clone()),
    }
}

async fn read_limited(body: Body, limit: usize) -> Result<Bytes, RpcError> {
    let limited = http_body_util::Limited::new(body, limit);
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            Err(RpcError::resource_exhausted(format!("message larger than the {limit} bytes allowed")))
        }
        Err(e) => Err(RpcError::invalid_argument(format!("reading the request body: {e}"))),
    }
}

/// The one message of a server-streaming request's body.
pub fn single_envelope(mut b: Bytes, limit: usize) -> Result<Bytes, RpcError> {
    if b.len() < 5 {
        return Err(RpcError::invalid_argument("malformed envelope: shorter than its 5-byte prefix"));
    }
    let flags = b.get_u8();
    let len = b.get_u32() as usize;
    if flags & !FLAG_COMPRESSED != 0 {
        return Err(RpcError::invalid_argument(format!("malformed envelope: unexpected flags {flags:#04x}")));
    }
    if flags & FLAG_COMPRESSED != 0 {
        return Err(RpcError::unimplemented("compressed messages are not supported"));
    }
    if len > limit {
        return Err(RpcError::resource_exhausted(format!("message of {len} bytes is larger than the {limit} allowed")));
    }
    if b.len() != len {
        return Err(RpcError::invalid_argument(format!(
            "malformed envelope: prefix says {len} bytes, body has {}",
            b.len()
        )));
    }
    Ok(b)
}

fn tonic_request<M>(parts: http::request::Parts, msg: M) -> tonic::Request<M> {
    tonic::Request::from_parts(MetadataMap::from_headers(parts.headers), parts.extensions, msg)
}

type BoxFut = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;
type Handler = Arc<dyn Fn(http::request::Parts, Body, Framing) -> BoxFut + Send + Sync>;

/// How a call's messages are framed and ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Connect(Codec),
    /// Binary messages in the same envelopes, ended by trailers (server-streaming methods only).
    Grpc,
}

impl Framing {
    fn codec(self) -> Codec {
        match self {
            Framing::Connect(c) => c,
            Framing::Grpc => Codec::Proto,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Unary,
    ServerStream,
    ClientStream,
}

/// Connect's methods by path, e.g. `/process.Process/Start`.
#[derive(Clone, Default)]
pub struct ConnectRouter {
    methods: HashMap<&'static str, (Kind, Handler)>,
    limit: usize,
}

impl ConnectRouter {
    pub fn new(max_message_bytes: usize) -> Self {
        Self { methods: HashMap::new(), limit: max_message_bytes }
    }

    pub fn unary<Req, Resp, F, Fut>(mut self, path: &'static str, f: F) -> Self
    where
        Req: Msg,
        Resp: Msg,
        F: Fn(tonic::Request<Req>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<tonic::Response<Resp>, Status>> + Send + 'static,
    {
        let f = Arc::new(f);
        let limit = self.limit;
        let h: Handler = Arc::new(move |parts, body, framing: Framing| {
            let f = f.clone();
            let codec = framing.codec();
            Box::pin(async move {
                let run = async {
                    let bytes = read_limited(body, limit).await?;
                    let msg: Req = codec.decode(&bytes)?;
                    let resp = f(tonic_request(parts, msg)).await.map_err(RpcError::from)?;
                    Ok::<_, RpcError>(codec.encode(resp.get_ref()))
                };
                match run.await {
                    Ok(b) => {
                        let mut r = Response::new(Body::from(b));
                        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(codec.unary_type()));
                        r
                    }
                    Err(e) => unary_error(&e),
                }
            })
        });
        self.methods.insert(path, (Kind::Unary, h));
        self
    }

    pub fn server_stream<Req, Resp, S, F, Fut>(mut self, path: &'static str, f: F) -> Self
    where
        Req: Msg,
        Resp: Msg,
        S: Stream<Item = Result<Resp, Status>> + Send + 'static,
        F: Fn(tonic::Request<Req>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<tonic::Response<S>, Status>> + Send + 'static,
    {
        let f = Arc::new(f);
        let limit = self.limit;
        let h: Handler = Arc::new(move |parts, body, framing: Framing| {
            let f = f.clone();
            Box::pin(async move {
                let run = async {
                    let bytes = read_limited(body, limit + 5).await?;
                    let msg: Req = framing.codec().decode(&single_envelope(bytes, limit)?)?;
                    Ok::<_, RpcError>(f(tonic_request(parts, msg)).await.map_err(RpcError::from)?.into_inner())
                };
                match (run.await, framing) {
                    (Ok(stream), _) => streaming_response(framing, stream),
                    (Err(e), Framing::Connect(codec)) => stream_error(codec, &e),
                    (Err(e), Framing::Grpc) => error_for(Protocol::Grpc, &e),
                }
            })
        });
        self.methods.insert(path, (Kind::ServerStream, h));
        self
    }

    pub fn client_stream<Req, Resp, F, Fut>(mut self, path: &'static str, f: F) -> Self
    where
        Req: Msg,
        Resp: Msg,
        F: Fn(tonic::Request<tonic::Streaming<Req>>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<tonic::Response<Resp>, Status>> + Send + 'static,
    {
        let f = Arc::new(f);
        let limit = self.limit;
        let h: Handler = Arc::new(move |parts, body, framing: Framing| {
            let f = f.clone();
            let codec = framing.codec();
            Box::pin(async move {
                let streaming = request_stream::<Req>(codec, body, limit);
                match f(tonic_request(parts, streaming)).await {
                    Ok(resp) => {
                        let payload = codec.encode(resp.get_ref());
                        let mut b = BytesMut::new();
                        b.extend_from_slice(&envelope(0, &payload));
                        b.extend_from_slice(&end_stream(None));
                        let mut r = Response::new(Body::from(b.freeze()));
                        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(codec.stream_type()));
                        r
                    }
                    Err(s) => stream_error(codec, &RpcError::from(s)),
                }
            })
        });
        self.methods.insert(path, (Kind::ClientStream, h));
        self
    }

    /// Whether gRPC calls of `path` are served here: server-streaming methods' are.
    pub fn serves_grpc(&self, path: &str) -> bool {
        self.methods.get(path).is_some_and(|(kind, _)| *kind == Kind::ServerStream)
    }

    /// Serves one Connect request, or a gRPC call of a server-streaming method.
    pub async fn serve(&self, req: http::Request<Body>) -> Response<Body> {
        let protocol = Protocol::of(req.headers());
        let path = req.uri().path().to_string();
        let Some((kind, handler)) = self.methods.get(path.as_str()) else {
            let e = RpcError::unimplemented(format!("no method {path}"));
            return error_for(protocol, &e);
        };
        if req.method() != http::Method::POST {
            let mut r = unary_error(&RpcError::invalid_argument("Connect calls are POST requests"));
            *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
            return r;
        }
        let framing = match (protocol, kind) {
            (Protocol::Grpc, Kind::ServerStream) => Framing::Grpc,
            (Protocol::ConnectUnary(c), Kind::Unary)
            | (Protocol::ConnectStream(c), Kind::ServerStream | Kind::ClientStream) => Framing::Connect(c),
            (Protocol::ConnectStream(c), Kind::Unary) => {
                return stream_error(
                    c,
                    &RpcError::invalid_argument(format!("{path} is unary: use application/json or application/proto")),
                );
            }
            (Protocol::ConnectUnary(_), Kind::ServerStream | Kind::ClientStream) => {
                return unary_error(&RpcError::invalid_argument(format!(
                    "{path} is streaming: use application/connect+json or application/connect+proto"
                )));
            }
            _ => {
                let mut r = unary_error(&RpcError::invalid_argument(
                    "unsupported content type: use application/json, application/proto, application/connect+json, application/connect+proto or application/grpc",
                ));
                *r.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
                return r;
            }
        };
        let (parts, body) = req.into_parts();
        handler(parts, body, framing).await
    }
}

/// The messages of a client-streaming request's body, each at most `limit` bytes.
pub fn request_stream<Req: Msg>(codec: Codec, body: Body, limit: usize) -> tonic::Streaming<Req> {
    // Connect's request envelopes are framed exactly as gRPC's, so tonic's decoder reads them;
    // only the message codec differs.
    match codec {
        Codec::Json => tonic::Streaming::new_request(JsonDecoder::<Req>(PhantomData), body, None, Some(limit)),
        Codec::Proto => {
            tonic::Streaming::new_request(tonic_prost::ProstDecoder::<Req>::default(), body, None, Some(limit))
        }
    }
}

fn streaming_response<Resp: Msg>(
    framing: Framing,
    stream: impl Stream<Item = Result<Resp, Status>> + Send + 'static,
) -> Response<Body> {
    let codec = framing.codec();
    let body = async_stream::stream! {
        futures::pin_mut!(stream);
        let mut failed = None;
        while let Some(item) = stream.next().await {
            match item {
                Ok(m) => for slice in codec.enveloped(&m) {
                    yield Ok::<_, std::convert::Infallible>(Frame::data(slice));
                },
                Err(s) => { failed = Some(RpcError::from(s)); break; }
            }
        }
        if let Some(e) = &failed {
            events::RpcFailed { method: "stream", code: e.code, message: &e.message }.emit();
        }
        match framing {
            Framing::Connect(_) => yield Ok(Frame::data(end_stream(failed.as_ref()))),
            Framing::Grpc => yield Ok(Frame::trailers(grpc_trailers(failed))),
        }
    };
    let mut r = Response::new(Body::new(StreamBody::new(body)));
    let content_type = match framing {
        Framing::Connect(codec) => codec.stream_type(),
        Framing::Grpc => "application/grpc",
    };
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// A gRPC call's closing status: `grpc-status` and, for an error, `grpc-message`.
fn grpc_trailers(failed: Option<RpcError>) -> http::HeaderMap {
    let status = failed.map_or_else(|| Status::ok(""), Status::from);
    let mut trailers = http::HeaderMap::new();
    if status.add_header(&mut trailers).is_err() {
        // Only a message that is no valid header value gets here; the code alone still says it.
        trailers.insert("grpc-status", HeaderValue::from(status.code() as i32));
    }
    trailers
}

/// tonic `Decoder` for JSON messages inside gRPC-style envelopes.
struct JsonDecoder<M>(PhantomData<M>);

impl<M: Msg> Decoder for JsonDecoder<M> {
    type Item = M;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<M>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        Codec::Json.decode(&bytes).map(Some).map_err(Status::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_are_validated() {
        let ok = envelope(0, b"{}");
        assert_eq!(single_envelope(ok, 100).unwrap(), Bytes::from_static(b"{}"));
        assert_eq!(single_envelope(Bytes::from_static(b"\0\0"), 100).unwrap_err().code, Code::InvalidArgument);
        let short = Bytes::from_static(b"\0\0\0\0\x09{}");
        assert_eq!(single_envelope(short, 100).unwrap_err().code, Code::InvalidArgument);
        let big = envelope(0, &[b' '; 200]);
        assert_eq!(single_envelope(big, 100).unwrap_err().code, Code::ResourceExhausted);
        assert_eq!(single_envelope(envelope(1, b"x"), 100).unwrap_err().code, Code::Unimplemented);
    }

    #[test]
    fn a_streamed_message_shares_its_output_and_frames_as_one_copy_would() {
        use hangar_proto::process::{
            process_event::{data_event::Output, DataEvent, Event},
            ProcessEvent, StartResponse,
        };
        use prost::Message as _;
        let data = Bytes::from(vec![7u8; 64 * 1024]);
        let data_event = DataEvent { output: Some(Output::Stdout(data.clone())) };
        let m = StartResponse { event: Some(ProcessEvent { event: Some(Event::Data(data_event)) }) };
        let slices = Codec::Proto.enveloped(&m);
        let joined: Vec<u8> = slices.iter().flat_map(|b| b.iter().copied()).collect();
        assert_eq!(joined, envelope(0, &m.encode_to_vec())[..]);
        assert!(slices.iter().any(|b| b.as_ptr() == data.as_ptr() && b.len() == data.len()), "the output is shared");
        assert!(slices.iter().all(|b| b.as_ptr() == data.as_ptr() || b.len() < BY_REFERENCE));

        // A small message is one slice; JSON is one slice.
        let small = StartResponse { event: Some(ProcessEvent { event: None }) };
        assert_eq!(Codec::Proto.enveloped(&small), vec![envelope(0, &small.encode_to_vec())]);
        assert_eq!(Codec::Json.enveloped(&m), vec![envelope(0, &Codec::Json.encode(&m))]);
    }

    #[test]
    fn grpc_trailers_carry_the_status() {
        let ok = grpc_trailers(None);
        assert_eq!(ok.get("grpc-status").map(|v| v.as_bytes()), Some(&b"0"[..]));
        let failed = grpc_trailers(Some(RpcError::not_found("no process 7")));
        assert_eq!(failed.get("grpc-status").map(|v| v.as_bytes()), Some(&b"5"[..]));
        assert_eq!(failed.get("grpc-message").map(|v| v.as_bytes()), Some(&b"no%20process%207"[..]));
    }

    #[test]
    fn content_types_pick_the_protocol() {
        let mut h = http::HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json; charset=utf-8"));
        assert_eq!(Protocol::of(&h), Protocol::ConnectUnary(Codec::Json));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc+proto"));
        assert_eq!(Protocol::of(&h), Protocol::Grpc);
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/connect+proto"));
        assert_eq!(Protocol::of(&h), Protocol::ConnectStream(Codec::Proto));
    }
}
