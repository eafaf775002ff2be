//! The relay's REST query strings, read as its handlers read them (`extract::Params`, which is
//! serde_urlencoded): `?since=` (`SinceQuery`: a process's output and stream) and
//! `?path=&recursive=` (`WatchQuery`: a directory watch).
//!
//! Input: a selector byte (0: `SinceQuery`, 1: `WatchQuery`), then the query string.
use hangar_relay::api::rest::inputs::{SinceQuery, WatchQuery};
use proptest::prelude::*;

use super::relay_common::{bad_request, carried, decimal, pairs, parts, query};
use crate::{input::Input, property, Failure, Runs, Target};

pub const TARGET: Target = Target {
    name: "relay_query",
    about: "every REST query string (SinceQuery, WatchQuery) through the relay's extractor: what \
            is accepted names only known fields with values of their types; a refusal is a 400 \
            with a message",
    run,
    props,
};

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let selector = input.byte() % 2;
    let Some(mut p) = parts(input.rest()) else { return };
    let qs = &carried(&p)[..];
    let accepted =
        if selector == 0 { query::<SinceQuery>(&mut p).map(drop) } else { query::<WatchQuery>(&mut p).map(drop) };
    match accepted {
        // Unknown fields are refused (deny_unknown_fields), so what passed names only these.
        Ok(()) => {
            for (k, v) in pairs(qs) {
                match (selector, k.as_str()) {
                    (0, "since") => assert!(decimal(&v).is_some(), "since={v:?} was accepted"),
                    (1, "path") => {}
                    (1, "recursive") => assert!(v == "true" || v == "false", "recursive={v:?} was accepted"),
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
    })
}
