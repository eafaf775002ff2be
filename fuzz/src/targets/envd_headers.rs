//! The daemon's request headers: `Connect-Timeout-Ms`, `grpc-timeout`,
//! `Keepalive-Ping-Interval` and the `Authorization: Basic` user (`wire::context`), and those of
//! `/files`: `Range`, `Accept-Encoding`, `X-Metadata-*` (`wire::files`).
//!
//! Input: a selector byte (which header), then for `Range` a big-endian u64 file size, then the
//! header's value (for `X-Metadata-*`: lines of `key:value`). A value that is no valid header
//! value (HTTP would refuse it before the daemon sees it) still reaches the `&str` parsers.
use std::time::Duration;

use base64::Engine as _;
use hangar_envd::wire::{context, files};
use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use tonic::Code;

use crate::{input::Input, property, Failure, Runs, Target};

pub const TARGET: Target = Target {
    name: "envd_headers",
    about: "Connect-Timeout-Ms, grpc-timeout, Keepalive-Ping-Interval, Authorization: Basic (the \
            user), and /files' Range, Accept-Encoding and X-Metadata-* headers: a parsed \
            timeout or range is the one written, a refusal is the typed error with a message",
    run,
    props,
};

const CONNECT_TIMEOUT: u8 = 0;
const GRPC_TIMEOUT: u8 = 1;
const KEEPALIVE: u8 = 2;
const AUTHORIZATION: u8 = 3;
const RANGE: u8 = 4;
const ACCEPT_ENCODING: u8 = 5;
// 6: X-Metadata-*.
const KINDS: u8 = 7;

fn one(name: &'static str, value: &[u8]) -> Option<HeaderMap> {
    let v = HeaderValue::from_bytes(value).ok()?;
    let mut h = HeaderMap::new();
    h.insert(HeaderName::from_static(name), v);
    Some(h)
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let kind = input.byte() % KINDS;
    let size = if kind == RANGE { input.u64() } else { 0 };
    let value = input.rest();
    let text = String::from_utf8_lossy(value);
    match kind {
        CONNECT_TIMEOUT => {
            if let Some(h) = one("connect-timeout-ms", value) {
                connect_timeout(value, context::timeout(&h));
            }
        }
        GRPC_TIMEOUT => {
            let direct = context::parse_grpc_timeout(&text);
            grpc_timeout(&text, &direct);
            if let Some(h) = one("grpc-timeout", value) {
                let via_header = context::timeout(&h);
                match (&via_header, &direct) {
                    (Ok(Some(a)), Ok(b)) => assert_eq!(a, b),
                    (Err(e), Err(_)) => assert!(e.code == Code::InvalidArgument),
                    // A header value that is not text is refused before it is parsed.
                    (Err(e), Ok(_)) => assert!(value.iter().any(|b| !b.is_ascii()), "{}", e.message),
                    (got, want) => panic!("grpc-timeout header gave {got:?}, the parser {want:?}"),
                }
            }
        }
        KEEPALIVE => {
            if let Some(h) = one("keepalive-ping-interval", value) {
                match context::keepalive(&h) {
                    Ok(d) => {
                        assert!((1..=24 * 3600).contains(&d.as_secs()) && d.subsec_nanos() == 0, "{d:?}");
                        let n: Option<u64> = text.trim().parse().ok();
                        assert_eq!(n.map(|n| n.clamp(1, 24 * 3600)), Some(d.as_secs()));
                    }
                    Err(e) => assert_eq!(e.code, Code::InvalidArgument, "{}", e.message),
                }
            }
        }
        AUTHORIZATION => {
            if let Some(h) = one("authorization", value) {
                basic(value, context::basic_user(&h));
            }
        }
        RANGE => range(&text, size),
        ACCEPT_ENCODING => {
            if let Err(m) = files::accepts_gzip(&text) {
                assert!(m.contains("no acceptable encoding"), "{m}");
            }
        }
        _ => metadata(value),
    }
}

/// Decimal digits, optionally after one `+` (as connect-go's and grpc-go's `strconv.ParseInt`
/// read these headers), with at most `max` characters in all: the number they write.
fn decimal(s: &[u8], max: usize) -> Option<u64> {
    let digits = s.strip_prefix(b"+").unwrap_or(s);
    if s.len() > max || digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0u64, |n, d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
}

/// `Connect-Timeout-Ms`: at most 10 digits, the duration in milliseconds.
fn connect_timeout(value: &[u8], got: Result<Option<Duration>, hangar_envd::error::RpcError>) {
    let text = String::from_utf8_lossy(value);
    let want = decimal(value, 10);
    match (got, want) {
        (Ok(Some(d)), Some(ms)) => assert_eq!(d, Duration::from_millis(ms)),
        (Err(e), None) => {
            assert_eq!(e.code, Code::InvalidArgument);
            assert!(e.message.to_ascii_lowercase().contains("connect-timeout-ms"), "{}", e.message);
        }
        (got, want) => panic!("Connect-Timeout-Ms {text:?} gave {got:?}, expected {want:?} ms"),
    }
}

/// `grpc-timeout`: 1 to 8 ASCII digits and one unit letter.
fn grpc_timeout(text: &str, got: &Result<Duration, hangar_envd::error::RpcError>) {
    let bytes = text.as_bytes();
    let want = match bytes.split_last() {
        Some((unit, digits)) if decimal(digits, 8).is_some() => {
            let n = decimal(digits, 8).unwrap_or_default();
            match unit {
                b'H' => Some(Duration::from_secs(n * 3600)),
                b'M' => Some(Duration::from_secs(n * 60)),
                b'S' => Some(Duration::from_secs(n)),
                b'm' => Some(Duration::from_millis(n)),
                b'u' => Some(Duration::from_micros(n)),
                b'n' => Some(Duration::from_nanos(n)),
                _ => None,
            }
        }
        _ => None,
    };
    match (got, want) {
        (Ok(d), Some(w)) => assert_eq!(*d, w),
        (Err(e), None) => {
            assert_eq!(e.code, Code::InvalidArgument);
            assert!(e.message.contains("grpc-timeout"), "{}", e.message);
        }
        (got, want) => panic!("grpc-timeout {text:?} gave {got:?}, expected {want:?}"),
    }
}

/// `Authorization: Basic base64("<name>:<password>")` names the user before the first colon;
/// any other scheme names none; bad base64 or UTF-8 is `unauthenticated`.
fn basic(value: &[u8], got: Result<Option<String>, hangar_envd::error::RpcError>) {
    let text = String::from_utf8_lossy(value);
    let encoded = text.strip_prefix("Basic ").or_else(|| text.strip_prefix("basic "));
    match (got, encoded) {
        (Ok(None), None) => {}
        (Ok(Some(name)), Some(encoded)) => {
            assert!(!name.contains(':'), "the name stops at the first colon: {name:?}");
            let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim());
            let decoded = decoded.ok().and_then(|d| String::from_utf8(d).ok());
            assert!(decoded.is_some_and(|d| d == name || d.starts_with(&format!("{name}:"))), "{name:?}");
        }
        // A value with bytes past ASCII is not text: refused before its scheme is read.
        (Err(e), _) if value.iter().any(|b| !b.is_ascii()) => assert_eq!(e.code, Code::InvalidArgument),
        (Err(e), Some(_)) => {
            assert_eq!(e.code, Code::Unauthenticated);
            assert!(e.message.starts_with("Authorization: Basic"), "{}", e.message);
        }
        (got, encoded) => panic!("Authorization {text:?} gave {got:?} (credentials {encoded:?})"),
    }
}

/// A satisfiable single range lies inside the file.
fn range(header: &str, size: u64) {
    match files::parse_range(header, size) {
        files::RangeRequest::Bytes { start, end } => {
            assert!(start <= end && end < size, "bytes {start}-{end} of {size}");
            assert!(header.trim().starts_with("bytes="));
        }
        files::RangeRequest::Unsatisfiable => assert!(header.trim().starts_with("bytes=")),
        files::RangeRequest::Ignored => {}
    }
}

/// `X-Metadata-<key>` headers become a validated map of lowercase keys.
fn metadata(value: &[u8]) {
    let mut h = HeaderMap::new();
    for line in value.split(|b| *b == b'\n') {
        let (key, v) = match line.iter().position(|b| *b == b':') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &b""[..]),
        };
        let name = [b"x-metadata-".as_slice(), key].concat();
        if let (Ok(name), Ok(v)) = (HeaderName::from_bytes(&name), HeaderValue::from_bytes(v)) {
            h.append(name, v);
        }
    }
    match files::metadata_headers(&h) {
        Ok(m) => {
            for (k, v) in &m {
                assert!(!k.is_empty() && k.bytes().all(|b| b.is_ascii_graphic() && !b.is_ascii_uppercase()), "{k:?}");
                assert!(v.bytes().all(|b| (0x20..=0x7e).contains(&b)), "{v:?}");
                let header = h.get(format!("x-metadata-{k}"));
                assert!(header.is_some_and(|x| x.as_bytes() == v.as_bytes()), "the first value of {k:?}");
            }
        }
        Err(e) => assert!(!e.is_empty()),
    }
}

fn digits_input(kind: u8, value: &str) -> Vec<u8> {
    let mut v = vec![kind];
    v.extend_from_slice(value.as_bytes());
    v
}

type TimeoutCase = (u64, char, String);

fn grpc_case() -> impl Strategy<Value = TimeoutCase> {
    let unit = proptest::sample::select(vec!['H', 'M', 'S', 'm', 'u', 'n', 'x', 'é']);
    let pad = prop_oneof![3 => Just(String::new()), 1 => "0{1,3}", 1 => " "];
    (0u64..=99_999_999, unit, pad)
}

fn grpc_text(case: &TimeoutCase) -> String {
    format!("{}{}{}", case.2, case.0, case.1)
}

fn basic_case() -> impl Strategy<Value = (String, String, bool)> {
    ("[^:]{0,12}", ".{0,12}", any::<bool>())
}

fn basic_input(case: &(String, String, bool)) -> Vec<u8> {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", case.0, case.1));
    let scheme = if case.2 { "Basic" } else { "basic" };
    digits_input(AUTHORIZATION, &format!("{scheme} {encoded}"))
}

fn range_case() -> impl Strategy<Value = (u64, Option<u64>, Option<u64>)> {
    let n = prop_oneof![0u64..64, any::<u64>()];
    (0u64..64, proptest::option::of(n.clone()), proptest::option::of(n))
}

fn range_input(case: &(u64, Option<u64>, Option<u64>)) -> Vec<u8> {
    let show = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_default();
    let mut v = vec![RANGE];
    v.extend_from_slice(&case.0.to_be_bytes());
    v.extend_from_slice(format!("bytes={}-{}", show(case.1), show(case.2)).as_bytes());
    v
}

fn props(runner: &mut Runs) -> Result<(), Failure> {
    let ms = prop_oneof![0u64..1000, 0u64..=9_999_999_999, any::<u64>()];
    property(
        runner,
        ms,
        |n| digits_input(CONNECT_TIMEOUT, &n.to_string()),
        |n| {
            run(&digits_input(CONNECT_TIMEOUT, &n.to_string()));
            let h = one("connect-timeout-ms", n.to_string().as_bytes());
            let got = h.map(|h| context::timeout(&h));
            if *n <= 9_999_999_999 {
                assert!(matches!(got, Some(Ok(Some(d))) if d == Duration::from_millis(*n)));
            } else {
                assert!(matches!(got, Some(Err(_))), "more than 10 digits is refused");
            }
        },
    )?;
    property(
        runner,
        grpc_case(),
        |c| digits_input(GRPC_TIMEOUT, &grpc_text(c)),
        |c| {
            run(&digits_input(GRPC_TIMEOUT, &grpc_text(c)));
        },
    )?;
    property(
        runner,
        any::<u64>(),
        |n| digits_input(KEEPALIVE, &n.to_string()),
        |n| {
            run(&digits_input(KEEPALIVE, &n.to_string()));
            let h = one("keepalive-ping-interval", n.to_string().as_bytes());
            let got = h.map(|h| context::keepalive(&h));
            assert!(matches!(got, Some(Ok(d)) if d.as_secs() == (*n).clamp(1, 86_400)));
        },
    )?;
    property(runner, basic_case(), basic_input, |c| {
        run(&basic_input(c));
        let h = one("authorization", &basic_input(c)[1..]);
        let got = h.map(|h| context::basic_user(&h));
        assert!(matches!(&got, Some(Ok(Some(name))) if *name == c.0), "user {:?} gave {got:?}", c.0);
    })?;
    property(runner, range_case(), range_input, |c| {
        run(&range_input(c));
        let (size, a, b) = *c;
        let got = files::parse_range(std::str::from_utf8(&range_input(c)[9..]).unwrap_or(""), size);
        if let (Some(a), Some(b)) = (a, b) {
            if a <= b && a < size {
                assert_eq!(got, files::RangeRequest::Bytes { start: a, end: b.min(size - 1) });
            }
        }
    })
}
