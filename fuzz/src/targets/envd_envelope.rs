//! The daemon's Connect envelopes: a server-streaming request's one envelope
//! (`connect::single_envelope`), a client-streaming request's envelopes through the decoder the
//! daemon hands its handlers (`connect::request_stream`, JSON and binary), and the end-of-stream
//! envelope the daemon writes (`connect::end_stream`).
//!
//! Input: a mode byte (0: one envelope, 1: a JSON request stream, 2: a binary request stream,
//! 3: an end-of-stream error), a big-endian u16 message limit (the error code for mode 3), the
//! body (the error message for mode 3).
use axum::body::Body;
use bytes::Bytes;
use hangar_envd::{
    error::RpcError,
    wire::connect::{self, Codec},
};
use hangar_proto::process::{
    process_input, process_selector, stream_input_request, ProcessInput, ProcessSelector, StreamInputRequest,
};
use proptest::prelude::*;
use tonic::Code;

use crate::{input::block_on, input::Input, property, Failure, Runs, Target};

pub const TARGET: Target = Target {
    name: "envd_envelope",
    about: "Connect envelopes: a server-streaming request's one envelope (flags, length, payload, \
            limit), client-streaming request bodies through the daemon's decoder (JSON and \
            binary), and the end-of-stream JSON the daemon writes",
    run,
    props,
};

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.byte() % 4;
    let limit = input.u16();
    let body = input.rest();
    match mode {
        0 => single(body, limit as usize),
        1 => stream(Codec::Json, body, limit as usize),
        2 => stream(Codec::Proto, body, limit as usize),
        _ => end_of_stream(limit, body),
    }
}

/// What `single_envelope` must make of `body`, as the Connect spec frames it.
fn single(body: &[u8], limit: usize) {
    let result = connect::single_envelope(Bytes::copy_from_slice(body), limit);
    let expected = if body.len() < 5 {
        Err(Code::InvalidArgument)
    } else {
        let flags = body[0];
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        if flags & !connect::FLAG_COMPRESSED != 0 {
            Err(Code::InvalidArgument)
        } else if flags & connect::FLAG_COMPRESSED != 0 {
            Err(Code::Unimplemented)
        } else if len > limit {
            Err(Code::ResourceExhausted)
        } else if body.len() - 5 != len {
            Err(Code::InvalidArgument)
        } else {
            Ok(&body[5..])
        }
    };
    match (result, expected) {
        (Ok(payload), Ok(want)) => {
            assert_eq!(&payload[..], want, "the payload is what follows the prefix");
            // Framing the payload again gives back the request's bytes.
            assert_eq!(&connect::envelope(0, &payload)[..], body, "an envelope round-trips");
        }
        (Err(e), Err(code)) => {
            assert_eq!(e.code, code, "error {:?} for {} bytes", e.message, body.len());
            assert!(!e.message.is_empty(), "an error says why");
        }
        (got, want) => panic!("single_envelope gave {got:?}, expected {want:?}"),
    }
}

/// Decodes a client stream's messages; each must re-encode to a body the decoder reads back as
/// the same message, and a failure must be a status with a message.
fn stream(codec: Codec, body: &[u8], limit: usize) {
    let messages = decode_stream(codec, Bytes::copy_from_slice(body), limit, body.len() / 5 + 2);
    for m in messages.iter().flatten() {
        let again = decode_stream(codec, connect::envelope(0, &codec.encode(m)), usize::MAX >> 1, 3);
        assert_eq!(again.len(), 1, "one re-encoded message decodes as one message: {again:?}");
        match &again[0] {
            Ok(m2) => assert_eq!(m2, m, "a decoded message re-encodes to itself"),
            Err(e) => panic!("a re-encoded message failed to decode: {e:?}"),
        }
    }
}

/// The messages (and a final error, if any) of a request stream; more than `max` items means
/// the decoder made messages out of nothing.
fn decode_stream(codec: Codec, body: Bytes, limit: usize, max: usize) -> Vec<Result<StreamInputRequest, RpcError>> {
    let mut s = connect::request_stream::<StreamInputRequest>(codec, Body::from(body), limit);
    let mut out = Vec::new();
    loop {
        assert!(out.len() <= max, "more messages ({}) than the body can frame", out.len());
        match block_on(s.message()) {
            Ok(Some(m)) => out.push(Ok(m)),
            Ok(None) => return out,
            Err(status) => {
                let e = RpcError::from(status);
                assert!(!matches!(e.code, Code::Ok | Code::Unknown), "a typed failure, got {:?}", e.code);
                assert!(!e.message.is_empty(), "a failure says why");
                out.push(Err(e));
                return out;
            }
        }
    }
}

/// The end-of-stream envelope for an error: flags 0x02, its length, and JSON naming the code and
/// carrying the message as given.
fn end_of_stream(code: u16, message: &[u8]) {
    let code = Code::from(i32::from(code % 17));
    let message = String::from_utf8_lossy(message).into_owned();
    let e = RpcError { code, message: message.clone() };
    let b = connect::end_stream(Some(&e));
    assert_eq!(b[0], connect::FLAG_END_STREAM);
    let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
    assert_eq!(len, b.len() - 5, "the prefix says the payload's length");
    let json: serde_json::Value = match serde_json::from_slice(&b[5..]) {
        Ok(v) => v,
        Err(err) => panic!("end of stream is not JSON: {err}"),
    };
    let want = serde_json::json!({ "error": { "code": connect::code_name(code), "message": message } });
    assert_eq!(json, want);
    // A request that sends an end-of-stream envelope is refused, not read as a message.
    let refused = connect::single_envelope(b, usize::MAX);
    assert!(refused.is_err_and(|e| e.code == Code::InvalidArgument));
    assert_eq!(&connect::end_stream(None)[..], b"\x02\0\0\0\x02{}");
}

fn framing() -> impl Strategy<Value = (u8, i8, i8, Vec<u8>)> {
    let flags = prop_oneof![4 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8), 1 => any::<u8>()];
    let delta = prop_oneof![4 => Just(0i8), 1 => -3i8..=3];
    (flags, delta, -2i8..=2, proptest::collection::vec(any::<u8>(), 0..64))
}

fn framing_input(case: &(u8, i8, i8, Vec<u8>)) -> Vec<u8> {
    let (flags, delta, limit_delta, payload) = case;
    let len = (payload.len() as i64 + i64::from(*delta)).max(0) as u32;
    let limit = (payload.len() as i64 + i64::from(*limit_delta)).clamp(0, 0xffff) as u16;
    let mut v = vec![0u8];
    v.extend_from_slice(&limit.to_be_bytes());
    v.push(*flags);
    v.extend_from_slice(&len.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

fn message() -> impl Strategy<Value = StreamInputRequest> {
    use stream_input_request::{DataEvent, Event, KeepAlive, StartEvent};
    let selector = prop_oneof![
        Just(None),
        any::<u32>().prop_map(|p| Some(process_selector::Selector::Pid(p))),
        ".{0,12}".prop_map(|t| Some(process_selector::Selector::Tag(t))),
    ];
    let data = proptest::collection::vec(any::<u8>(), 0..48);
    let event = prop_oneof![
        Just(None),
        Just(Some(Event::Keepalive(KeepAlive {}))),
        selector.prop_map(|selector| Some(Event::Start(StartEvent { process: Some(ProcessSelector { selector }) }))),
        (any::<bool>(), data).prop_map(|(pty, d)| {
            let input = if pty { process_input::Input::Pty(d) } else { process_input::Input::Stdin(d) };
            Some(Event::Data(DataEvent { input: Some(ProcessInput { input: Some(input) }) }))
        }),
    ];
    event.prop_map(|event| StreamInputRequest { event })
}

type StreamCase = (bool, Vec<StreamInputRequest>, Vec<u8>);

fn stream_case() -> impl Strategy<Value = StreamCase> {
    let tail = prop_oneof![3 => Just(Vec::new()), 1 => proptest::collection::vec(any::<u8>(), 1..8)];
    (any::<bool>(), proptest::collection::vec(message(), 0..6), tail)
}

fn stream_body(case: &StreamCase) -> Vec<u8> {
    let (json, messages, tail) = case;
    let codec = if *json { Codec::Json } else { Codec::Proto };
    let mut body = Vec::new();
    for m in messages {
        body.extend_from_slice(&connect::envelope(0, &codec.encode(m)));
    }
    body.extend_from_slice(tail);
    body
}

fn stream_input(case: &StreamCase) -> Vec<u8> {
    let mut v = vec![if case.0 { 1u8 } else { 2 }, 0xff, 0xff];
    v.extend_from_slice(&stream_body(case));
    v
}

fn props(runner: &mut Runs) -> Result<(), Failure> {
    property(runner, framing(), framing_input, |case| {
        run(&framing_input(case));
        let (flags, delta, limit_delta, payload) = case;
        if *flags == 0 && *delta == 0 && *limit_delta >= 0 {
            let body = &framing_input(case)[3..];
            let got = connect::single_envelope(Bytes::copy_from_slice(body), payload.len());
            assert!(got.is_ok_and(|p| p == payload[..]), "a well-framed envelope within the limit is its payload");
        }
    })?;
    property(runner, stream_case(), stream_input, |case| {
        run(&stream_input(case));
        let codec = if case.0 { Codec::Json } else { Codec::Proto };
        let got = decode_stream(codec, Bytes::from(stream_body(case)), 0xffff, case.1.len() + 2);
        let decoded: Vec<&StreamInputRequest> = got.iter().filter_map(|r| r.as_ref().ok()).collect();
        let sent: Vec<&StreamInputRequest> = case.1.iter().collect();
        // A tail may itself frame a message; what was framed before it comes first, in order.
        assert!(decoded.len() >= sent.len() && decoded[..sent.len()] == sent[..], "every framed message, in order");
        if case.2.is_empty() {
            assert_eq!(decoded, sent);
            assert!(got.iter().all(Result::is_ok), "a well-framed stream ends cleanly: {got:?}");
        }
    })
}
