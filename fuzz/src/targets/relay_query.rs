//! The relay's REST query strings, read as its handlers read them (`extract::Params`, which is
//! serde_urlencoded): `?since=` (`SinceQuery`: a process's output and stream),
//! `?path=&recursive=` (`WatchQuery`: a directory watch) and `?ended=` (`InboxQuery`: the inbox).
//!
//! Input: a selector byte (its value mod 3; 0: `SinceQuery`, 1: `WatchQuery`, 2: `InboxQuery`),
//! then the query string.
use hangar_relay::api::rest::inputs::{InboxQuery, SinceQuery, WatchQuery};
use proptest::prelude::*;

use super::relay_common::{bad_request, carried, decimal, pairs, parts, query};
use crate::{input::Input, property, Failure, Runs, Target};

pub const TARGET: Target = Target {
    name: "relay_query",
    about: "every REST query string (SinceQuery, WatchQuery, InboxQuery) through the relay's extractor: what \
            is accepted names only known fields with values of their types; a refusal is a 400 \
            with a message",
    run,
    props,
};

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let selector = input.byte() % 3;
    let Some(mut p) = parts(input.rest()) else { return };
    let qs = &carried(&p)[..];
    let accepted = match selector {
        0 => query::<SinceQuery>(&mut p).map(drop),
        1 => query::<WatchQuery>(&mut p).map(drop),
        _ => query::<InboxQuery>(&mut p).map(drop),
    };
    match accepted {
        // Unknown fields are refused (deny_unknown_fields), so what passed names only these.
        Ok(()) => {
            for (k, v) in pairs(qs) {
                match (selector, k.as_str()) {
                    (0, "since") => assert!(decimal(&v).is_some(), "since={v:?} was accepted"),
                    (1, "path") => {}
                    (1, "recursive") => assert!(v == "true" || v == "false", "recursive={v:?} was accepted"),
                    (2, "ended") => assert!(v == "true" || v == "false", "ended={v:?} was accepted"),
                    _ => panic!("unknown field {k:?} accepted in {:?}", String::from_utf8_lossy(qs)),
                }
            }
        }
        Err(e) => bad_request(&e),
    }
}

type Case = (Option<String>, Option<bool>, Option<(String, String)>);

fn watch_case() -> impl Strategy<Value = Case> {
    let extra = proptest::option::of(("[a-z]{1,6}", ".{0,4}"));
    (proptest::option::of(".{0,16}"), proptest::option::of(any::<bool>()), extra)
}

fn watch_query(case: &Case) -> String {
    let mut pairs: Vec<(String, String)> = Vec::new();
    if let Some(p) = &case.0 {
        pairs.push(("path".into(), p.clone()));
    }
    if let Some(r) = case.1 {
        pairs.push(("recursive".into(), r.to_string()));
    }
    if let Some(extra) = &case.2 {
        pairs.push(extra.clone());
    }
    serde_urlencoded::to_string(&pairs).unwrap_or_default()
}

fn watch_input(case: &Case) -> Vec<u8> {
    let mut v = vec![1u8];
    v.extend_from_slice(watch_query(case).as_bytes());
    v
}

/// Whether the extra pair is one more known field, not given yet, with a value of its type.
fn valid(case: &Case) -> bool {
    match &case.2 {
        None => true,
        Some((k, _)) if k == "path" => case.0.is_none(),
        Some((k, v)) if k == "recursive" => case.1.is_none() && (v == "true" || v == "false"),
        Some(_) => false,
    }
}

/// An inbox query from parts: `ended` as a boolean, or as any text; perhaps one more pair.
type InboxCase = (Option<String>, Option<(String, String)>);

fn inbox_case() -> impl Strategy<Value = InboxCase> {
    let ended = prop_oneof![Just("true".to_string()), Just("false".to_string()), ".{0,6}"];
    let extra = proptest::option::of((prop_oneof![Just("ended".to_string()), "[a-z]{1,6}"], ".{0,4}"));
    (proptest::option::of(ended), extra)
}

fn inbox_query(case: &InboxCase) -> String {
    let pairs: Vec<(String, String)> =
        case.0.iter().map(|e| ("ended".to_string(), e.clone())).chain(case.1.clone()).collect();
    serde_urlencoded::to_string(&pairs).unwrap_or_default()
}

fn inbox_input(case: &InboxCase) -> Vec<u8> {
    let mut v = vec![2u8];
    v.extend_from_slice(inbox_query(case).as_bytes());
    v
}

/// Whether the inbox query is `ended` at most once, as `true` or `false`, and nothing else.
fn inbox_valid(case: &InboxCase) -> bool {
    let boolean = |v: &str| v == "true" || v == "false";
    let ended_ok = case.0.as_deref().is_none_or(boolean);
    match &case.1 {
        None => ended_ok,
        Some((k, v)) if k == "ended" => case.0.is_none() && boolean(v),
        Some(_) => false,
    }
}

fn props(runner: &mut Runs) -> Result<(), Failure> {
    property(runner, watch_case(), watch_input, |case| {
        run(&watch_input(case));
        let q = watch_query(case);
        let Some(mut p) = parts(q.as_bytes()) else { panic!("{q:?} is a URI's query") };
        let known = valid(case);
        let got = query::<WatchQuery>(&mut p);
        if known {
            assert!(got.is_ok(), "{q:?} is a valid watch query");
        } else {
            assert!(got.is_err(), "{q:?} has an unknown field or a bad value");
        }
    })?;
    property(runner, inbox_case(), inbox_input, |case| {
        run(&inbox_input(case));
        let q = inbox_query(case);
        let Some(mut p) = parts(q.as_bytes()) else { panic!("{q:?} is a URI's query") };
        let got = query::<InboxQuery>(&mut p);
        assert_eq!(got.is_ok(), inbox_valid(case), "{q:?} gave {:?}", got.map(|q| q.ended).map_err(|e| e.message));
    })
}
