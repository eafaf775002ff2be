//! The Connect protocol (JSON and binary; unary, server-streaming, client-streaming) over the same
//! tonic service traits gRPC uses: each method decodes the body into the message type, builds a
//! `tonic::Request` carrying the HTTP extensions (the call context), and encodes what comes back.
use std::{collections::HashMap, future::Future, marker::PhantomData, pin::Pin, sync::Arc};

use axum::body::Body;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::{Stream, StreamExt};
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;
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
type Handler = Arc<dyn Fn(http::request::Parts, Body, Codec) -> BoxFut + Send + Sync>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Unary,
    Stream,
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
        let h: Handler = Arc::new(move |parts, body, codec| {
            let f = f.clone();
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
        let h: Handler = Arc::new(move |parts, body, codec| {
            let f = f.clone();
            Box::pin(async move {
                let run = async {
                    let bytes = read_limited(body, limit + 5).await?;
                    let msg: Req = codec.decode(&single_envelope(bytes, limit)?)?;
                    Ok::<_, RpcError>(f(tonic_request(parts, msg)).await.map_err(RpcError::from)?.into_inner())
                };
                match run.await {
                    Ok(stream) => streaming_response(codec, stream),
                    Err(e) => stream_error(codec, &e),
                }
            })
        });
        self.methods.insert(path, (Kind::Stream, h));
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
        let h: Handler = Arc::new(move |parts, body, codec| {
            let f = f.clone();
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
        self.methods.insert(path, (Kind::Stream, h));
        self
    }

    /// Serves one Connect request.
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
        let codec = match (protocol, kind) {
            (Protocol::ConnectUnary(c), Kind::Unary) | (Protocol::ConnectStream(c), Kind::Stream) => c,
            (Protocol::ConnectStream(c), Kind::Unary) => {
                return stream_error(
                    c,
                    &RpcError::invalid_argument(format!("{path} is unary: use application/json or application/proto")),
                );
            }
            (Protocol::ConnectUnary(_), Kind::Stream) => {
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
        handler(parts, body, codec).await
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
    codec: Codec,
    stream: impl Stream<Item = Result<Resp, Status>> + Send + 'static,
) -> Response<Body> {
    let body = async_stream::stream! {
        futures::pin_mut!(stream);
        let mut failed = None;
        while let Some(item) = stream.next().await {
            match item {
                Ok(m) => yield Ok::<_, std::convert::Infallible>(envelope(0, &codec.encode(&m))),
                Err(s) => { failed = Some(RpcError::from(s)); break; }
            }
        }
        if let Some(e) = &failed {
            events::RpcFailed { method: "stream", code: e.code, message: &e.message }.emit();
        }
        yield Ok(end_stream(failed.as_ref()));
    };
    let mut r = Response::new(Body::from_stream(body));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(codec.stream_type()));
    r
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
