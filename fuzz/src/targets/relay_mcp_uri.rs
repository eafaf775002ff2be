//! MCP resource URIs, `hangar://sandboxes/<s>/watch?path=<dir>[&recursive=true][&since=<n>]`,
//! `hangar://sessions/<name>/events[?since=<seq>]` and `hangar://jobs/<id>/events[?since=<seq>]`
//! (`mcp::resources::Resource::parse`), as `resources/read`, `subscribe` and `unsubscribe` pass
//! them.
//!
//! Input: the URI (bytes that are not UTF-8 replaced: MCP carries URIs as JSON strings).
use hangar_relay::{api::mcp::resources::Resource, error::Error};
use proptest::prelude::*;

use crate::{property, Failure, Runs, Target};

pub const TARGET: Target = Target {
    name: "relay_mcp_uri",
    about: "MCP resource URIs: a parsed URI names a sandbox and a non-empty path, a session, or \
            a job id of letters, digits, '_' and '-', and its key (the URI without since) parses \
            to the same resource; a refusal is invalid_argument naming the expected forms",
    run,
    props,
};

pub fn run(data: &[u8]) {
    check(&String::from_utf8_lossy(data));
}

fn check(uri: &str) -> Option<(Resource, Option<u64>)> {
    match Resource::parse(uri) {
        Ok((r, since)) => {
            match &r {
                Resource::SandboxWatch { sandbox, path, .. } => {
                    assert!(!sandbox.is_empty() && !sandbox.contains('/'), "sandbox {sandbox:?}");
                    assert!(!path.is_empty(), "a watch names a directory");
                }
                Resource::SessionEvents { session } => {
                    assert!(!session.is_empty() && !session.contains('/'), "session {session:?}");
                }
                Resource::JobEvents { job } => assert!(job_id(job), "job {job:?}"),
            }
            let key = r.key();
            match Resource::parse(&key) {
                Ok((again, None)) => assert_eq!(again, r, "{key:?} names the same resource"),
                other => panic!("the key {key:?} of {uri:?} gave {other:?}"),
            }
            Some((r, since))
        }
        Err(Error::Invalid(m)) => {
            assert!(m.contains("expected hangar://sandboxes/<sandbox>/watch?path=<dir>"), "{m}");
            assert!(m.contains("hangar://jobs/<job>/events"), "{m}");
            None
        }
        Err(e) => panic!("{uri:?}: not a typed refusal: {e:?}"),
    }
}

/// What a job id in a URI may be: letters, digits, '_' and '-' (ids are `job_<hex>`), so the
/// id cannot carry a path or a query.
fn job_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

type Case = (String, String, Option<bool>, Option<u64>, bool);

/// A URI from parts: any sandbox name without a slash, any path, the flags, and whether the
/// pairs come in another order.
fn case() -> impl Strategy<Value = Case> {
    ("[^/]{0,10}", ".{0,16}", proptest::option::of(any::<bool>()), proptest::option::of(any::<u64>()), any::<bool>())
}

fn uri(case: &Case) -> String {
    let (sandbox, path, recursive, since, reversed) = case;
    let mut pairs: Vec<(&str, String)> = vec![("path", path.clone())];
    if let Some(r) = recursive {
        pairs.push(("recursive", r.to_string()));
    }
    if let Some(s) = since {
        pairs.push(("since", s.to_string()));
    }
    if *reversed {
        pairs.reverse();
    }
    format!("hangar://sandboxes/{sandbox}/watch?{}", serde_urlencoded::to_string(&pairs).unwrap_or_default())
}

fn props(runner: &mut Runs) -> Result<(), Failure> {
    watch_props(runner)?;
    job_props(runner)
}

fn watch_props(runner: &mut Runs) -> Result<(), Failure> {
    property(
        runner,
        case(),
        |c| uri(c).into_bytes(),
        |c| {
            let (sandbox, path, recursive, since, _) = c;
            let got = check(&uri(c));
            if sandbox.is_empty() || path.is_empty() {
                assert!(got.is_none(), "{:?} has no sandbox or no path", uri(c));
            } else {
                let want = Resource::SandboxWatch {
                    sandbox: sandbox.clone(),
                    path: path.clone(),
                    recursive: recursive.unwrap_or(false),
                };
                assert_eq!(got, Some((want, *since)), "{:?}", uri(c));
            }
        },
    )
}

/// A job events URI from parts: an id, and a since.
fn job_case() -> impl Strategy<Value = (String, Option<u64>)> {
    // Real ids, ids of the allowed characters, and ids with one character that is not allowed.
    let id = prop_oneof!["job_[0-9a-f]{12}", "[A-Za-z0-9_-]{0,12}", "[A-Za-z0-9_-]{0,5}[./?%&# =+~][A-Za-z0-9_-]{0,5}"];
    (id, proptest::option::of(any::<u64>()))
}

fn job_uri((job, since): &(String, Option<u64>)) -> String {
    match since {
        Some(s) => format!("hangar://jobs/{job}/events?since={s}"),
        None => format!("hangar://jobs/{job}/events"),
    }
}

fn job_props(runner: &mut Runs) -> Result<(), Failure> {
    property(
        runner,
        job_case(),
        |c| job_uri(c).into_bytes(),
        |c| {
            let got = check(&job_uri(c));
            if job_id(&c.0) {
                assert_eq!(got, Some((Resource::JobEvents { job: c.0.clone() }, c.1)), "{:?}", job_uri(c));
            } else {
                assert!(got.is_none(), "{:?} is not a job id", job_uri(c));
            }
        },
    )
}
