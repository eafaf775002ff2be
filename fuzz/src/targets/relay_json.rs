//! The relay's REST JSON bodies, read as its handlers read them (`extract::Body`): starting a
//! process (`StartBody`), its input (`InputBody`), exec (`ExecBody`, then the checks of
//! `exec_request`), creating a sandbox (`CreateSandbox`), a token (`CreateToken`), a session
//! (`sessions::StartRequest`, its approval patterns too), a follow-up turn
//! (`sessions::TurnRequest`), a secret (`CreateSecret`), a ticket (`CreateTicket`), the inbox's
//! decision on an approval (`Decide`) and answer to a question (`AnswerBody`), and a sandbox's
//! sharing (`ShareSandbox`). Each body's fields are derived from its type (`inputs::fields`),
//! as the relay's MCP schemas are: a field added to a request is fuzzed without an edit here.
//!
//! Input: a selector byte (which body), then the body.
use std::sync::LazyLock;

use hangar_relay::{
    api::rest::inputs::{
        exec_request, fields, AnswerBody, CreateSandbox, CreateSecret, CreateTicket, CreateToken, Decide, ExecBody,
        InputBody, ShareSandbox, StartBody,
    },
    sessions::{StartRequest, TurnRequest},
};
use proptest::prelude::*;
use serde_json::Value;

use super::relay_common::{bad_request, json};
use crate::{input::Input, property, Failure, Runs, Target};

pub const TARGET: Target = Target {
    name: "relay_json",
    about: "every REST JSON body (processes' start and input, exec, sandboxes, tokens, sessions, \
            turns, secrets, tickets, the inbox's decisions and answers, sandboxes' sharing) through the relay's \
            extractor, exec's through its checks: what is accepted is an object of known fields; \
            an exec's timeout is within its bounds; a decision is allow or deny, a reason or an \
            answer a string; a refusal is a 400 with a message",
    run,
    props,
};

/// Each body's name and fields, in selector order (the committed corpus's first bytes).
static BODIES: LazyLock<Vec<(&str, Vec<String>)>> = LazyLock::new(|| {
    vec![
        ("StartBody", fields::<StartBody>()),
        ("InputBody", fields::<InputBody>()),
        ("ExecBody", fields::<ExecBody>()),
        ("CreateSandbox", fields::<CreateSandbox>()),
        ("CreateToken", fields::<CreateToken>()),
        ("StartRequest", fields::<StartRequest>()),
        ("TurnRequest", fields::<TurnRequest>()),
        ("CreateSecret", fields::<CreateSecret>()),
        ("CreateTicket", fields::<CreateTicket>()),
        ("Decide", fields::<Decide>()),
        ("AnswerBody", fields::<AnswerBody>()),
        ("ShareSandbox", fields::<ShareSandbox>()),
    ]
});

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let selector = usize::from(input.byte()) % BODIES.len();
    let body = input.rest();
    let accepted = match selector {
        0 => json::<StartBody>(body).map(drop),
        1 => json::<InputBody>(body).map(drop),
        2 => json::<ExecBody>(body).map(|b| match exec_request(b) {
            Ok(r) => {
                assert!((1..=hangar_relay::exec::MAX_TIMEOUT_SECONDS).contains(&r.timeout.as_secs()), "{r:?}");
                assert!(!r.command.trim().is_empty() && !r.command.contains('\0'), "{r:?}");
                assert!(r.command.len() <= hangar_relay::sandboxes::run::MAX_COMMAND_BYTES);
            }
            Err(e) => bad_request(&e),
        }),
        3 => json::<CreateSandbox>(body).map(drop),
        4 => json::<CreateToken>(body).map(drop),
        5 => json::<StartRequest>(body).map(drop),
        6 => json::<TurnRequest>(body).map(drop),
        7 => json::<CreateSecret>(body).map(drop),
        8 => json::<CreateTicket>(body).map(drop),
        9 => json::<Decide>(body).map(drop),
        10 => json::<AnswerBody>(body).map(drop),
        _ => json::<ShareSandbox>(body).map(drop),
    };
    match accepted {
        Ok(()) => {
            let v: Value = match serde_json::from_slice(body) {
                Ok(v) => v,
                Err(e) => panic!("an accepted body is JSON: {e}"),
            };
            let Value::Object(fields) = v else { panic!("an accepted body is an object: {v}") };
            let known = &BODIES[selector].1;
            assert!(fields.keys().all(|k| known.contains(k)), "unknown fields accepted: {fields:?}");
            match BODIES[selector].0 {
                "Decide" => {
                    let decision = fields.get("decision").and_then(Value::as_str);
                    assert!(matches!(decision, Some("allow" | "deny")), "decision {decision:?} accepted");
                    let reason = fields.get("reason").unwrap_or(&Value::Null);
                    assert!(reason.is_null() || reason.is_string(), "reason {reason} accepted");
                }
                "AnswerBody" => assert!(fields.get("answer").is_some_and(Value::is_string), "{fields:?} accepted"),
                _ => {}
            }
        }
        Err(e) => bad_request(&e),
    }
}

fn leaf() -> impl Strategy<Value = Value> + Clone {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (0u64..200_000).prop_map(Value::from),
        any::<f64>().prop_filter("JSON numbers are finite", |f| f.is_finite()).prop_map(Value::from),
        prop_oneof![".{0,12}", "[A-Za-z0-9+/=]{0,12}", Just(" \u{0} ".to_string())].prop_map(Value::String),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(2, 12, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            proptest::collection::vec(("[a-z]{1,4}", inner), 0..3)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// An object whose keys are mostly the body's own fields, with values of any type.
fn shaped() -> impl Strategy<Value = (u8, Vec<(String, Value)>)> {
    (0..BODIES.len() as u8).prop_flat_map(|s| {
        let known = BODIES[usize::from(s)].1.clone();
        let key = prop_oneof![4 => proptest::sample::select(known), 1 => "[a-z]{1,6}"];
        (Just(s), proptest::collection::vec((key, value()), 0..5))
    })
}

fn shaped_input(case: &(u8, Vec<(String, Value)>)) -> Vec<u8> {
    let mut v = vec![case.0];
    v.extend_from_slice(Value::Object(case.1.iter().cloned().collect()).to_string().as_bytes());
    v
}

/// A well-typed exec body: accepted, and `exec_request` takes it iff its command and timeout are
/// within bounds.
fn exec_case() -> impl Strategy<Value = (String, Option<String>, Option<u64>)> {
    let timeout = prop_oneof![Just(None), (0u64..=90_000).prop_map(Some), any::<u64>().prop_map(Some)];
    (".{0,16}", proptest::option::of(".{0,8}"), timeout)
}

fn exec_input(case: &(String, Option<String>, Option<u64>)) -> Vec<u8> {
    let mut body = serde_json::json!({ "command": case.0 });
    if let Some(c) = &case.1 {
        body["cwd"] = Value::from(c.clone());
    }
    if let Some(t) = case.2 {
        body["timeout"] = Value::from(t);
    }
    let mut v = vec![2u8];
    v.extend_from_slice(body.to_string().as_bytes());
    v
}

/// A decision body from parts: the decision (right, or in the wrong case, or another word), a
/// reason of any JSON type or none, perhaps a field too many.
type DecideCase = (Value, Option<Value>, Option<String>);

fn decide_case() -> impl Strategy<Value = DecideCase> {
    let decision = prop_oneof![
        Just(Value::from("allow")),
        Just(Value::from("deny")),
        Just(Value::from("Allow")),
        Just(Value::from("DENY")),
        Just(Value::from("")),
        leaf(),
    ];
    let extra = proptest::option::of(prop_oneof![Just("answer".to_string()), "[a-z]{1,6}"]);
    (decision, proptest::option::of(leaf()), extra)
}

fn decide_input(case: &DecideCase) -> Vec<u8> {
    let mut body = serde_json::Map::new();
    body.insert("decision".into(), case.0.clone());
    if let Some(r) = &case.1 {
        body.insert("reason".into(), r.clone());
    }
    if let Some(k) = &case.2 {
        body.entry(k.clone()).or_insert(Value::Null);
    }
    let mut v = vec![9u8];
    v.extend_from_slice(Value::Object(body).to_string().as_bytes());
    v
}

fn props(runner: &mut Runs) -> Result<(), Failure> {
    property(runner, shaped(), shaped_input, |case| run(&shaped_input(case)))?;
    property(runner, exec_case(), exec_input, |case| {
        run(&exec_input(case));
        let body = json::<ExecBody>(&exec_input(case)[1..]);
        let Ok(body) = body else { panic!("a well-typed exec body is accepted") };
        let (command, _, timeout) = case;
        let valid_command = !command.trim().is_empty() && !command.contains('\0');
        let valid_timeout = timeout.is_none_or(|t| (1..=hangar_relay::exec::MAX_TIMEOUT_SECONDS).contains(&t));
        let got = exec_request(body);
        assert_eq!(got.is_ok(), valid_command && valid_timeout, "{case:?} gave {got:?}");
        if let Ok(r) = got {
            assert_eq!(r.timeout.as_secs(), timeout.unwrap_or(hangar_relay::exec::DEFAULT_TIMEOUT_SECONDS));
            assert_eq!(&r.command, command);
        }
    })?;
    // A decision is accepted exactly when it is `allow` or `deny`, its reason a string or null,
    // and it has no other field.
    property(runner, decide_case(), decide_input, |case| {
        run(&decide_input(case));
        let (decision, reason, extra) = case;
        let valid = matches!(decision.as_str(), Some("allow" | "deny"))
            && reason.as_ref().is_none_or(|r| r.is_null() || r.is_string())
            && extra.as_deref().is_none_or(|k| k == "decision" || k == "reason");
        let got = json::<Decide>(&decide_input(case)[1..]);
        assert_eq!(got.is_ok(), valid, "{case:?}");
    })
}
