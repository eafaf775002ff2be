//! Raw HTTP and Connect: building a request, sending it on a fresh HTTP/1.1 or h2c connection,
//! reading a whole response ([`RawResponse`]), and Connect's envelopes (flag byte, 4-byte
//! big-endian length, message) in request bodies and streamed responses ([`ConnectStream`],
//! [`StreamOutcome`]).
use std::{convert::Infallible, net::SocketAddr, time::Duration};

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;

use crate::{within, Collected, Deadline, HasEvent, STEP};
use hangar_proto::process as pb;

pub type ReqBody = BoxBody<Bytes, Infallible>;

pub fn full_body(b: Bytes) -> ReqBody {
    BoxBody::new(Full::new(b))
}

pub fn build_request(
    method: &str,
    path: &str,
    addr: SocketAddr,
    h2: bool,
    headers: &[(&str, &str)],
    body: ReqBody,
) -> hyper::Request<ReqBody> {
    let uri = if h2 { format!("http://{addr}{path}") } else { path.to_string() };
    let mut b = hyper::Request::builder().method(method).uri(uri);
    if !h2 {
        b = b.header("host", addr.to_string());
    }
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(body).expect("request")
}

/// Sends one request on a fresh HTTP/1.1 connection.
pub async fn send_http1(addr: SocketAddr, req: hyper::Request<ReqBody>) -> hyper::Response<Incoming> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    send_http1_over(tcp, req).await
}

/// Sends one request over `tcp` (connected as the caller chose: a small receive buffer, say).
/// The response's body is read only as fast as its reader polls it: hyper reads a response's
/// body from the socket only when asked for the next frame.
pub async fn send_http1_over(tcp: tokio::net::TcpStream, req: hyper::Request<ReqBody>) -> hyper::Response<Incoming> {
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.expect("HTTP/1.1 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await.unwrap_or_else(|e| panic!("HTTP/1.1 request failed: {e}"))
}

/// Sends one request on a fresh HTTP/2 cleartext connection (prior knowledge).
pub async fn send_h2(addr: SocketAddr, req: hyper::Request<ReqBody>) -> hyper::Response<Incoming> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await.expect("h2c handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await.unwrap_or_else(|e| panic!("h2c request failed: {e}"))
}

/// A whole HTTP response.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl RawResponse {
    /// The body as JSON (`Value::Null` when empty; fails the test when not JSON).
    pub fn json(&self) -> Value {
        if self.body.is_empty() {
            return Value::Null;
        }
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "response body (status {}) is not JSON ({e}): {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).map(|v| v.to_str().unwrap_or("<non-ascii>").to_string())
    }

    /// The Connect error code in a JSON error body.
    pub fn code(&self) -> Option<String> {
        serde_json::from_slice::<Value>(&self.body)
            .ok()
            .and_then(|v| v.get("code").and_then(|c| c.as_str()).map(str::to_string))
    }
}

/// Reads a whole response (bounded by [`STEP`]).
pub async fn read_raw(resp: hyper::Response<Incoming>) -> RawResponse {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = within(STEP, "response body", resp.into_body().collect()).await.expect("read response body").to_bytes();
    RawResponse { status, headers, body }
}

/// A Connect envelope: flag byte, 4-byte big-endian length, message.
pub fn envelope(flags: u8, msg: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(5 + msg.len());
    v.push(flags);
    v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    v.extend_from_slice(msg);
    v
}

/// One envelope of a Connect stream.
#[derive(Debug, Clone)]
pub struct Envelope {
    pub flags: u8,
    pub data: Bytes,
}

impl Envelope {
    pub fn is_end(&self) -> bool {
        self.flags & 0x02 != 0
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.data).unwrap_or_else(|e| {
            panic!("envelope (flags {:#x}) is not JSON ({e}): {:?}", self.flags, String::from_utf8_lossy(&self.data))
        })
    }
}

/// A Connect streaming response being read envelope by envelope.
#[derive(Debug)]
pub struct ConnectStream {
    pub status: u16,
    pub headers: http::HeaderMap,
    body: Incoming,
    buf: BytesMut,
    eof: bool,
}

impl ConnectStream {
    pub fn new(resp: hyper::Response<Incoming>) -> Self {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        ConnectStream { status, headers, body: resp.into_body(), buf: BytesMut::new(), eof: false }
    }

    /// The next envelope, `Ok(None)` at the end of the body. Not bounded: wrap in [`within`].
    pub async fn next_envelope(&mut self) -> Result<Option<Envelope>, String> {
        loop {
            if self.buf.len() >= 5 {
                let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
                if self.buf.len() >= 5 + len {
                    let flags = self.buf[0];
                    self.buf.advance(5);
                    let data = self.buf.split_to(len).freeze();
                    return Ok(Some(Envelope { flags, data }));
                }
            }
            if self.eof {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(format!(
                    "body ended inside an envelope ({} bytes left: {:?})",
                    self.buf.len(),
                    String::from_utf8_lossy(&self.buf)
                ));
            }
            match self.body.frame().await {
                None => self.eof = true,
                Some(Err(e)) => return Err(format!("body error: {e}")),
                Some(Ok(frame)) => {
                    if let Ok(d) = frame.into_data() {
                        self.buf.extend_from_slice(&d);
                    }
                }
            }
        }
    }

    /// The next envelope within `limit` (fails the test on timeout).
    pub async fn next_within(&mut self, limit: Duration) -> Result<Option<Envelope>, String> {
        within(limit, "next Connect envelope", self.next_envelope()).await
    }

    /// The whole remaining body (for a non-200 answer).
    pub async fn rest(mut self) -> Bytes {
        let mut out = BytesMut::from(&self.buf[..]);
        while let Some(f) = within(STEP, "rest of body", self.body.frame()).await {
            if let Ok(d) = f.expect("body").into_data() {
                out.extend_from_slice(&d);
            }
        }
        out.freeze()
    }

    /// Reads JSON envelopes to the end (bounded by `limit`).
    pub async fn collect(mut self, limit: Duration) -> StreamOutcome {
        let mut out = StreamOutcome { status: self.status, ..Default::default() };
        if self.status != 200 {
            let body = self.rest().await;
            out.http_error = Some(
                serde_json::from_slice(&body)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned())),
            );
            return out;
        }
        let deadline = Deadline::after(limit);
        loop {
            match deadline.run(self.next_envelope(), || format!("reading a Connect stream; so far: {out:#?}")).await {
                Ok(Some(e)) if e.is_end() => {
                    out.end = Some(e.json());
                }
                Ok(Some(e)) => out.messages.push(e.json()),
                Ok(None) => return out,
                Err(e) => {
                    out.transport_error = Some(e);
                    return out;
                }
            }
        }
    }
}

/// A Connect JSON stream read to its end.
#[derive(Debug, Default, Clone)]
pub struct StreamOutcome {
    pub status: u16,
    pub messages: Vec<Value>,
    /// The end-of-stream envelope's JSON.
    pub end: Option<Value>,
    /// The JSON body of a non-200 answer.
    pub http_error: Option<Value>,
    pub transport_error: Option<String>,
}

impl StreamOutcome {
    /// The error code: from a non-200 answer's body or from the end-of-stream envelope.
    pub fn error_code(&self) -> Option<String> {
        if let Some(e) = &self.http_error {
            return e.get("code").and_then(|c| c.as_str()).map(str::to_string);
        }
        self.end
            .as_ref()
            .and_then(|e| e.get("error"))
            .and_then(|e| e.get("code"))
            .and_then(|c| c.as_str())
            .map(str::to_string)
    }

    /// The messages decoded as process events.
    pub fn collected(&self) -> Collected {
        let mut c = Collected::default();
        for m in &self.messages {
            let r: pb::StartResponse = serde_json::from_value(m.clone())
                .unwrap_or_else(|e| panic!("stream message is not a process event ({e}): {m}"));
            if let Some(ev) = r.into_event() {
                c.push(ev);
            }
        }
        c.closed = true;
        if let Some(code) = self.error_code() {
            c.error = Some((code, String::new()));
        }
        c
    }

    /// Asserts a clean end: 200, end-of-stream envelope without error.
    pub fn assert_clean_end(&self) {
        assert_eq!(self.status, 200, "HTTP status of the stream: {self:#?}");
        let end = self.end.as_ref().unwrap_or_else(|| panic!("no end-of-stream envelope: {self:#?}"));
        assert!(end.get("error").is_none(), "stream ended with an error: {end}");
        assert!(self.transport_error.is_none(), "{self:#?}");
    }
}
