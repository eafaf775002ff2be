//! Where a relay process stream resumes: `Last-Event-ID` and `?since=` on
//! `GET /api/sandboxes/{s}/processes/{id}/stream` (`rest::inputs::resume_from`, after the query
//! string is read into `SinceQuery`).
//!
//! Input: a flags byte (bit 0: the request has a `Last-Event-ID`), the query string up to the
//! first newline, then the header's value.
use hangar_relay::api::rest::inputs::{resume_from, SinceQuery};
use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;

use super::relay_common::{bad_request, carried, decimal, pairs, parts, query};
use crate::{input::Input, property, Failure, Runs, Target};

pub const TARGET: Target = Target {
    name: "relay_resume",
    about: "Last-Event-ID and ?since= on a relay process stream: the offset resumed from is the \
            one written (the header winning), a bad one is a 400 with a message",
    run,
    props,
};

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let has_header = input.byte() & 1 != 0;
    let written = input.line();
    let header = input.rest();
    let Some(mut parts) = parts(written) else { return };
    let qs = &carried(&parts)[..];
    let q: SinceQuery = match query(&mut parts) {
        Ok(q) => q,
        Err(e) => return bad_request(&e),
    };
    let mut headers = HeaderMap::new();
    let value = if has_header { HeaderValue::from_bytes(header).ok() } else { None };
    if let Some(v) = &value {
        headers.insert("last-event-id", v.clone());
    }
    let got = resume_from(&headers, &q);
    match value {
        Some(v) => {
            // Header values are visible ASCII and tabs (or refused as text): `trim` drops the
            // spaces and tabs around the number.
            let text = v.to_str().ok().map(str::trim);
            match (got, text.and_then(decimal)) {
                (Ok(Some(n)), Some(want)) => {
                    assert_eq!(n, want, "the offset is the one written");
                    // Written digits, less a sign and leading zeros, are the offset's own.
                    let digits = text.unwrap_or_default().trim_start_matches('+').trim_start_matches('0');
                    assert_eq!(if digits.is_empty() { "0" } else { digits }, n.to_string());
                }
                (Err(e), None) => {
                    bad_request(&e);
                    assert!(e.message.contains("Last-Event-ID"), "{}", e.message);
                }
                (got, want) => panic!("Last-Event-ID {v:?} gave {got:?}, expected {want:?}"),
            }
        }
        None => match got {
            Ok(Some(n)) => {
                let written = pairs(qs).into_iter().any(|(k, v)| k == "since" && decimal(&v) == Some(n));
                assert!(written, "since={n} is in the query {:?}", String::from_utf8_lossy(qs));
            }
            Ok(None) => {
                let since = pairs(qs).into_iter().any(|(k, v)| k == "since" && decimal(&v).is_some());
                assert!(!since, "a since in the query is used: {:?}", String::from_utf8_lossy(qs));
            }
            Err(e) => panic!("no header, yet {e:?}"),
        },
    }
}

#[derive(Debug, Clone)]
enum Header {
    Offset { n: u64, before: String, after: String, zeros: usize, plus: bool },
    Garbage(String),
}

fn header() -> impl Strategy<Value = Header> {
    let ws = "[ \t]{0,2}";
    prop_oneof![
        3 => (any::<u64>(), ws, ws, 0usize..3, any::<bool>())
            .prop_map(|(n, before, after, zeros, plus)| Header::Offset { n, before, after, zeros, plus }),
        1 => "[ -~]{0,12}".prop_map(Header::Garbage),
    ]
}

fn header_text(h: &Header) -> String {
    match h {
        Header::Offset { n, before, after, zeros, plus } => {
            format!("{before}{}{}{n}{after}", if *plus { "+" } else { "" }, "0".repeat(*zeros))
        }
        Header::Garbage(s) => s.clone(),
    }
}

type Case = (Option<u64>, Option<Header>);

fn case_input(case: &Case) -> Vec<u8> {
    let mut v = vec![u8::from(case.1.is_some())];
    if let Some(n) = case.0 {
        v.extend_from_slice(format!("since={n}").as_bytes());
    }
    v.push(b'\n');
    if let Some(h) = &case.1 {
        v.extend_from_slice(header_text(h).as_bytes());
    }
    v
}

fn props(runner: &mut Runs) -> Result<(), Failure> {
    let since = prop_oneof![Just(None), any::<u64>().prop_map(Some), (0u64..10).prop_map(Some)];
    property(runner, (since, proptest::option::of(header())), case_input, |case| {
        run(&case_input(case));
        let qs = case.0.map(|n| format!("since={n}")).unwrap_or_default();
        let Some(mut parts) = parts(qs.as_bytes()) else { panic!("{qs:?} is a valid URI's query") };
        let q: Result<SinceQuery, _> = query(&mut parts);
        let Ok(q) = q else { panic!("since={:?} is a valid query", case.0) };
        let mut headers = HeaderMap::new();
        if let Some(h) = &case.1 {
            let Ok(v) = HeaderValue::from_str(&header_text(h)) else { panic!("{h:?} is a valid header value") };
            headers.insert("last-event-id", v);
        }
        let got = resume_from(&headers, &q);
        match &case.1 {
            None => assert_eq!(got.ok(), Some(case.0), "no header: the query's since"),
            Some(Header::Offset { n, .. }) => assert_eq!(got.ok(), Some(Some(*n)), "the header wins"),
            Some(Header::Garbage(s)) => match decimal(s.trim()) {
                Some(n) => assert_eq!(got.ok(), Some(Some(n))),
                None => assert!(got.is_err()),
            },
        }
    })
}
