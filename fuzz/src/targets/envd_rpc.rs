//! The daemon's Connect message bodies: every RPC's request type through `Codec::decode`, as
//! JSON (pbjson's proto3 mapping) and as binary protobuf.
//!
//! Input: a selector byte (bit 7: binary rather than JSON; the rest, modulo the number of
//! request types, which type), then the body.
use std::fmt::Debug;

use hangar_envd::wire::connect::{Codec, Msg};
use hangar_proto::{ext, filesystem as fs, process};
use proptest::prelude::*;
use serde_json::Value;
use tonic::Code;

use crate::{input::Input, property, Failure, Runs, Target};

pub const TARGET: Target = Target {
    name: "envd_rpc",
    about: "Connect request bodies of every RPC (process.Process, filesystem.Filesystem, \
            hangar.envd.v1.*), JSON and binary: decoding then encoding round-trips in both codecs; \
            a refusal is invalid_argument with a message",
    run,
    props,
};

/// Decodes `body` as `M` the way the daemon does; what decodes must encode and decode to
/// itself in both codecs.
fn check<M: Msg + PartialEq + Debug>(codec: Codec, body: &[u8]) {
    match codec.decode::<M>(body) {
        Ok(m) => {
            let again: M = match Codec::Proto.decode(&Codec::Proto.encode(&m)) {
                Ok(a) => a,
                Err(e) => panic!("{m:?} re-encoded as protobuf does not decode: {}", e.message),
            };
            assert_eq!(again, m, "protobuf round trip");
            // pbjson has no JSON form for an enum number the schema does not name (binary
            // protobuf keeps one as a plain number): such a message cannot be written as JSON,
            // which the daemon never does with a request; everything else must round-trip.
            if serde_json::to_vec(&m).is_ok() {
                let again: M = match Codec::Json.decode(&Codec::Json.encode(&m)) {
                    Ok(a) => a,
                    Err(e) => panic!("{m:?} re-encoded as JSON does not decode: {}", e.message),
                };
                assert_eq!(again, m, "JSON round trip");
            } else {
                assert_eq!(codec, Codec::Proto, "a message read from JSON can be written as JSON");
            }
        }
        Err(e) => {
            assert_eq!(e.code, Code::InvalidArgument, "{}", e.message);
            assert!(e.message.starts_with("malformed "), "the refusal says what: {}", e.message);
        }
    }
}

/// Checks one body against one request type.
type Check = fn(Codec, &[u8]);

/// Every request type a Connect route decodes, in selector order.
const CHECKS: &[(&str, Check)] = &[
    ("process.ListRequest", check::<process::ListRequest>),
    ("process.ConnectRequest", check::<process::ConnectRequest>),
    ("process.StartRequest", check::<process::StartRequest>),
    ("process.UpdateRequest", check::<process::UpdateRequest>),
    ("process.StreamInputRequest", check::<process::StreamInputRequest>),
    ("process.SendInputRequest", check::<process::SendInputRequest>),
    ("process.SendSignalRequest", check::<process::SendSignalRequest>),
    ("process.CloseStdinRequest", check::<process::CloseStdinRequest>),
    ("filesystem.StatRequest", check::<fs::StatRequest>),
    ("filesystem.MakeDirRequest", check::<fs::MakeDirRequest>),
    ("filesystem.MoveRequest", check::<fs::MoveRequest>),
    ("filesystem.ListDirRequest", check::<fs::ListDirRequest>),
    ("filesystem.RemoveRequest", check::<fs::RemoveRequest>),
    ("filesystem.WatchDirRequest", check::<fs::WatchDirRequest>),
    ("filesystem.CreateWatcherRequest", check::<fs::CreateWatcherRequest>),
    ("filesystem.GetWatcherEventsRequest", check::<fs::GetWatcherEventsRequest>),
    ("filesystem.RemoveWatcherRequest", check::<fs::RemoveWatcherRequest>),
    ("hangar.envd.v1.AttachRequest", check::<ext::AttachRequest>),
    ("hangar.envd.v1.SignalRequest", check::<ext::SignalRequest>),
    ("hangar.envd.v1.ListRequest", check::<ext::ListRequest>),
    ("hangar.envd.v1.FollowRequest", check::<ext::FollowRequest>),
    ("hangar.envd.v1.InfoRequest", check::<ext::InfoRequest>),
];

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let selector = input.byte();
    let codec = if selector & 0x80 != 0 { Codec::Proto } else { Codec::Json };
    let (_, check) = CHECKS[usize::from(selector & 0x7f) % CHECKS.len()];
    check(codec, input.rest());
}

/// Field names of the request types (JSON names and proto names), so generated objects reach
/// the fields' own decoding rather than stopping at an unknown key.
const FIELDS: &[&str] = &[
    "process",
    "pty",
    "tag",
    "stdin",
    "size",
    "cols",
    "rows",
    "cmd",
    "args",
    "envs",
    "cwd",
    "pid",
    "input",
    "start",
    "data",
    "keepalive",
    "signal",
    "path",
    "source",
    "destination",
    "depth",
    "recursive",
    "includeEntry",
    "include_entry",
    "allowNetworkMounts",
    "allow_network_mounts",
    "watcherId",
    "watcher_id",
    "since",
    "offset",
    "escalateAfterMs",
    "escalate_after_ms",
    "runningOnly",
    "running_only",
    "selector",
];

fn leaf() -> impl Strategy<Value = Value> + Clone {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop_oneof![Just(0u64), Just(u64::from(u32::MAX)), Just(u64::from(u32::MAX) + 1)].prop_map(Value::from),
        any::<f64>().prop_filter("JSON numbers are finite", |f| f.is_finite()).prop_map(Value::from),
        prop_oneof![
            ".{0,8}",
            "-?[0-9]{1,21}",
            "[A-Za-z0-9+/=_-]{0,12}",
            Just("SIGNAL_SIGKILL".to_string()),
            Just("SIGNAL_SIGTERM".to_string()),
            Just("1e3".to_string()),
        ]
        .prop_map(Value::String),
    ]
}

fn key() -> impl Strategy<Value = String> + Clone {
    prop_oneof![4 => proptest::sample::select(FIELDS).prop_map(str::to_string), 1 => ".{0,6}"]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((key(), inner), 0..4).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

type ShapedCase = (u8, Vec<(String, Value)>);

fn shaped() -> impl Strategy<Value = ShapedCase> {
    (0..CHECKS.len() as u8, proptest::collection::vec((key(), value()), 0..5))
}

fn shaped_input(case: &ShapedCase) -> Vec<u8> {
    let object = Value::Object(case.1.iter().cloned().collect());
    let mut v = vec![case.0];
    v.extend_from_slice(object.to_string().as_bytes());
    v
}

/// Well-formed StartRequests (the richest request: nested messages, a map, repeated and optional
/// fields): as JSON and as binary they must decode to exactly what was written.
fn start_request() -> impl Strategy<Value = process::StartRequest> {
    let config = (
        ".{0,10}",
        proptest::collection::vec(".{0,6}", 0..3),
        proptest::collection::hash_map(".{0,5}", ".{0,5}", 0..3),
        proptest::option::of(".{0,8}"),
    )
        .prop_map(|(cmd, args, envs, cwd)| process::ProcessConfig { cmd, args, envs, cwd });
    let pty = proptest::option::of(
        (any::<u32>(), any::<u32>())
            .prop_map(|(cols, rows)| process::Pty { size: Some(process::pty::Size { cols, rows }) }),
    );
    (proptest::option::of(config), pty, proptest::option::of(".{0,8}"), proptest::option::of(any::<bool>()))
        .prop_map(|(process, pty, tag, stdin)| process::StartRequest { process, pty, tag, stdin })
}

fn start_input(case: &(bool, process::StartRequest)) -> Vec<u8> {
    let codec = if case.0 { Codec::Proto } else { Codec::Json };
    let mut v = vec![if case.0 { 0x82 } else { 0x02 }];
    v.extend_from_slice(&codec.encode(&case.1));
    v
}

fn props(runner: &mut Runs) -> Result<(), Failure> {
    property(runner, shaped(), shaped_input, |case| run(&shaped_input(case)))?;
    property(runner, (any::<bool>(), start_request()), start_input, |case| {
        run(&start_input(case));
        let codec = if case.0 { Codec::Proto } else { Codec::Json };
        let decoded = codec.decode::<process::StartRequest>(&start_input(case)[1..]);
        assert!(decoded.is_ok_and(|m| m == case.1), "a written StartRequest reads back as itself");
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_names_every_request_type() {
        assert_eq!(CHECKS.len(), 22);
        let names: std::collections::HashSet<_> = CHECKS.iter().map(|c| c.0).collect();
        assert_eq!(names.len(), CHECKS.len());
    }
}
