//! The daemon's multipart uploads (`POST /files`): the boundary from `Content-Type`
//! (`files::multipart`) and the parts named `file` with the paths they go to
//! (`files::next_file_part`), each part's bytes read to its end as the upload does.
//!
//! Input: a flags byte (bit 0: the request has `?path=` (then the next line is it); bit 1: the
//! next line is the `Content-Type`, else `multipart/form-data; boundary=XyZ`), then the body.
use std::{io, pin::Pin};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use hangar_envd::wire::files;
use proptest::prelude::*;

use crate::{input::block_on, input::Input, property, Failure, Runs, Target};

pub const TARGET: Target = Target {
    name: "envd_multipart",
    about: "multipart/form-data uploads to /files: the boundary, every part named file with its \
            path (the filename, or ?path=) and its bytes; a refusal is a message",
    run,
    props,
};

const BOUNDARY: &str = "XyZ";

/// A body that arrives in pieces of `chunk` bytes, as a network delivers it.
fn body(bytes: Vec<u8>, chunk: usize) -> files::BodyStream {
    let pieces: Vec<io::Result<Bytes>> =
        bytes.chunks(chunk.max(1)).map(|c| Ok(Bytes::copy_from_slice(c))).collect::<Vec<_>>();
    let s: Pin<Box<dyn Stream<Item = io::Result<Bytes>> + Send>> = Box::pin(futures::stream::iter(pieces));
    s
}

/// The file parts of an upload: (path as given, bytes), or the refusal.
pub fn parse(
    content_type: &str,
    path: Option<&str>,
    raw: &[u8],
    chunk: usize,
) -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut parts = files::multipart(content_type, body(raw.to_vec(), chunk))?;
    let mut out = Vec::new();
    block_on(async {
        while let Some((name, mut field)) = files::next_file_part(&mut parts, path).await? {
            assert!(!name.is_empty(), "a file part has a path");
            if let Some(p) = path.filter(|p| !p.is_empty()) {
                assert_eq!(name, p, "?path= names where the file goes");
            }
            let mut data = Vec::new();
            while let Some(chunk) = field.next().await {
                data.extend_from_slice(&chunk.map_err(|e| e.to_string())?);
            }
            assert!(data.len() <= raw.len(), "a part holds no more than the body");
            out.push((name, data));
            assert!(out.len() <= raw.len() / 4 + 1, "more parts than the body can frame");
        }
        Ok(out)
    })
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let flags = input.byte();
    let path = if flags & 1 != 0 { Some(String::from_utf8_lossy(input.line()).into_owned()) } else { None };
    let content_type = if flags & 2 != 0 {
        String::from_utf8_lossy(input.line()).into_owned()
    } else {
        format!("multipart/form-data; boundary={BOUNDARY}")
    };
    // The top bits choose how the body is split into pieces: parsing must not depend on it.
    let chunk = usize::from(flags >> 2) + 1;
    let raw = input.rest();
    let result = parse(&content_type, path.as_deref(), raw, chunk);
    if let Err(m) = &result {
        assert!(!m.is_empty(), "a refusal says why");
    }
    let whole = parse(&content_type, path.as_deref(), raw, raw.len());
    assert_eq!(result, whole, "the same parts whatever pieces the body came in");
}

/// A part of a generated upload.
#[derive(Debug, Clone)]
struct Part {
    name: String,
    filename: Option<String>,
    data: Vec<u8>,
}

fn part() -> impl Strategy<Value = Part> {
    let name = prop_oneof![3 => Just("file".to_string()), 1 => Just("other".to_string()), 1 => "[a-z]{1,5}"];
    // Quotes and backslashes would need escaping inside the header's quoted string; control
    // characters are no header text at all (HTTP's header grammar refuses them).
    let filename = proptest::option::of("[^\"\\\\\x00-\x1f\x7f]{0,12}");
    // Bytes that never spell the boundary's "--X".
    let data = proptest::collection::vec(any::<u8>().prop_filter("not -", |b| *b != b'-'), 0..40);
    (name, filename, data).prop_map(|(name, filename, data)| Part { name, filename, data })
}

type Case = (Option<String>, Vec<Part>, u8);

fn case() -> impl Strategy<Value = Case> {
    (proptest::option::of("[a-z/]{1,8}"), proptest::collection::vec(part(), 0..5), 0u8..64)
}

fn encode(parts: &[Part]) -> Vec<u8> {
    let mut v = Vec::new();
    for p in parts {
        v.extend_from_slice(format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{}\"", p.name).as_bytes());
        if let Some(f) = &p.filename {
            v.extend_from_slice(format!("; filename=\"{f}\"").as_bytes());
        }
        v.extend_from_slice(b"\r\nContent-Type: application/octet-stream\r\n\r\n");
        v.extend_from_slice(&p.data);
        v.extend_from_slice(b"\r\n");
    }
    v.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    v
}

fn case_input(case: &Case) -> Vec<u8> {
    let (path, parts, chunk) = case;
    let mut v = vec![(chunk << 2) | u8::from(path.is_some())];
    if let Some(p) = path {
        v.extend_from_slice(p.as_bytes());
        v.push(b'\n');
    }
    v.extend_from_slice(&encode(parts));
    v
}

/// What the daemon must make of a well-formed upload: every `file` part in order, at `?path=`
/// or its filename; an unnamed file part is refused.
fn expected(case: &Case) -> Result<Vec<(String, Vec<u8>)>, ()> {
    let (path, parts, _) = case;
    let mut out = Vec::new();
    for p in parts.iter().filter(|p| p.name == "file") {
        match path.as_deref().or(p.filename.as_deref()) {
            Some(name) if !name.is_empty() => out.push((name.to_string(), p.data.clone())),
            _ => return Err(()),
        }
    }
    Ok(out)
}

fn props(runner: &mut Runs) -> Result<(), Failure> {
    property(runner, case(), case_input, |c| {
        run(&case_input(c));
        let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
        let got = parse(&content_type, c.0.as_deref(), &encode(&c.1), usize::from(c.2) + 1);
        match expected(c) {
            Ok(want) => assert_eq!(got, Ok(want)),
            Err(()) => assert!(got.is_err_and(|m| m.contains("needs a filename")), "an unnamed file part is refused"),
        }
    })
}
