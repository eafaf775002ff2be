//! Helpers for the file tests: the `filesystem.Filesystem` gRPC client, uploads and downloads
//! over HTTP/1.1 (whole or streamed), scratch directories, Unix users, xattrs, and a
//! deterministic data pattern for transfers too large to hold in memory.
use std::{
    convert::Infallible,
    ffi::CString,
    io::{Read as _, Write as _},
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
    time::Duration,
};

use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::{combinators::BoxBody, BodyExt as _, StreamBody};
use hyper::body::Frame;
use tonic::transport::Channel;

use fspb::filesystem_client::FilesystemClient;
pub use hangar_proto::filesystem as fspb;

use crate::{basic_user, read_raw, send_http1, within, Envd, RawResponse, STEP};

pub async fn fs_client(envd: &Envd) -> FilesystemClient<Channel> {
    FilesystemClient::new(envd.channel().await)
}

/// A gRPC request acting as `user` (`Authorization: Basic`).
pub fn as_user<T>(user: &str, msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut().insert("authorization", basic_user(user).parse().expect("header value"));
    req
}

/// A directory under the system temp dir, removed with everything in it when dropped.
#[derive(Debug)]
pub struct Scratch {
    pub path: PathBuf,
}

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!("hangar-e2e-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        Scratch { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }

    /// `join` as a string, for requests.
    pub fn at(&self, p: &str) -> String {
        self.join(p).to_string_lossy().into_owned()
    }

    /// The directory as a string, for requests.
    pub fn str(&self) -> String {
        self.path.to_string_lossy().into_owned()
    }

    /// Lets every user create entries in it (mode 0777).
    pub fn open_to_all(self) -> Scratch {
        chmod(&self.path, 0o777);
        self
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

pub fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap_or_else(|e| panic!("chmod {p:?}: {e}"));
}

/// `(uid, gid)` of a Unix user, if it exists.
pub fn user_ids(name: &str) -> Option<(u32, u32)> {
    let c = CString::new(name).ok()?;
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return None;
    }
    Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

/// The name of the user this test runs as.
pub fn my_name() -> String {
    let pw = unsafe { libc::getpwuid(libc::geteuid()) };
    if pw.is_null() {
        return unsafe { libc::geteuid() }.to_string();
    }
    unsafe { std::ffi::CStr::from_ptr((*pw).pw_name) }.to_string_lossy().into_owned()
}

/// The user E2B templates run as, created (with a home) when missing. Needs root.
pub fn ensure_user(name: &str) -> (u32, u32) {
    if let Some(ids) = user_ids(name) {
        return ids;
    }
    let st = std::process::Command::new("useradd").args(["-m", "-s", "/bin/bash", name]).status();
    assert!(matches!(st, Ok(s) if s.success()), "useradd {name}: {st:?}");
    user_ids(name).unwrap_or_else(|| panic!("user {name} missing after useradd"))
}

/// `(uid, gid)` owning `p` (not following a symlink).
pub fn owner_of(p: &Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt as _;
    let md = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("lstat {p:?}: {e}"));
    (md.uid(), md.gid())
}

pub fn set_xattr(p: &Path, name: &str, value: &[u8]) {
    let (cp, cn) = (CString::new(p.as_os_str().as_bytes()).expect("path"), CString::new(name).expect("name"));
    let r = unsafe { libc::setxattr(cp.as_ptr(), cn.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(r, 0, "setxattr {p:?} {name}: {}", std::io::Error::last_os_error());
}

pub fn get_xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let (cp, cn) = (CString::new(p.as_os_str().as_bytes()).expect("path"), CString::new(name).expect("name"));
    let mut buf = vec![0u8; 4096];
    let n = unsafe { libc::getxattr(cp.as_ptr(), cn.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return None;
    }
    buf.truncate(n as usize);
    Some(buf)
}

/// `/files?<query>` with each value percent-encoded.
pub fn files_uri(query: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let q: Vec<String> = query.iter().map(|(k, v)| format!("{k}={}", enc(v))).collect();
    if q.is_empty() {
        "/files".to_string()
    } else {
        format!("/files?{}", q.join("&"))
    }
}

/// `GET /files?<query>` read whole.
pub async fn download(envd: &Envd, query: &[(&str, &str)], headers: &[(&str, &str)]) -> RawResponse {
    envd.http("GET", &files_uri(query), headers, Bytes::new()).await
}

/// `POST /files?<query>` with a whole body.
pub async fn upload(
    envd: &Envd,
    query: &[(&str, &str)],
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> RawResponse {
    envd.http("POST", &files_uri(query), headers, body).await
}

/// An `application/octet-stream` upload of `body` to `path`.
pub async fn upload_octet(envd: &Envd, path: &str, extra: &[(&str, &str)], body: impl Into<Bytes>) -> RawResponse {
    let mut h = vec![("content-type", "application/octet-stream")];
    h.extend_from_slice(extra);
    upload(envd, &[("path", path)], &h, body).await
}

pub const BOUNDARY: &str = "hangar-e2e-boundary-7d1f";

/// A `multipart/form-data` body: `(field name, filename, data)` per part.
pub fn multipart(parts: &[(&str, Option<&str>, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, filename, data) in parts {
        out.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
        let disposition = match filename {
            Some(f) => format!("Content-Disposition: form-data; name=\"{name}\"; filename=\"{f}\"\r\n"),
            None => format!("Content-Disposition: form-data; name=\"{name}\"\r\n"),
        };
        out.extend_from_slice(disposition.as_bytes());
        out.extend_from_slice(b"Content-Type: application/octet-stream\r\n\r\n");
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    out
}

pub fn multipart_type() -> String {
    format!("multipart/form-data; boundary={BOUNDARY}")
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).expect("gzip");
    e.finish().expect("gzip")
}

pub fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(data).read_to_end(&mut out).unwrap_or_else(|e| panic!("not gzip: {e}"));
    out
}

/// A large, position-dependent byte stream that is never held whole: one random-looking MiB
/// block, with each MiB stamped with its index so a misplaced or repeated chunk is caught.
pub struct Pattern {
    block: Vec<u8>,
}

pub const MIB: u64 = 1 << 20;

impl Default for Pattern {
    fn default() -> Self {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let block = (0..MIB / 8)
            .flat_map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()
            })
            .collect();
        Pattern { block }
    }
}

impl Pattern {
    /// MiB number `i`.
    pub fn chunk(&self, i: u64) -> Bytes {
        let mut v = self.block.clone();
        v[..8].copy_from_slice(&i.to_le_bytes());
        Bytes::from(v)
    }

    /// The byte at absolute `offset`.
    fn at(&self, offset: u64) -> u8 {
        let (i, within) = (offset / MIB, (offset % MIB) as usize);
        if within < 8 {
            i.to_le_bytes()[within]
        } else {
            self.block[within]
        }
    }

    /// Whether `data` is what the pattern holds from `offset` on.
    pub fn matches(&self, offset: u64, data: &[u8]) -> bool {
        let mut pos = 0usize;
        while pos < data.len() {
            let abs = offset + pos as u64;
            let within = (abs % MIB) as usize;
            let n = (MIB as usize - within).min(data.len() - pos);
            let piece = &data[pos..pos + n];
            let ok = if within >= 8 {
                piece == &self.block[within..within + n]
            } else {
                piece.iter().enumerate().all(|(k, b)| *b == self.at(abs + k as u64))
            };
            if !ok {
                return false;
            }
            pos += n;
        }
        true
    }
}

/// Uploads `mib` MiB of `pattern` as `application/octet-stream` to `path`, the body generated
/// as it is sent (chunked); the response is read whole.
pub async fn stream_upload(envd: &Envd, path: &str, mib: u64, limit: Duration) -> RawResponse {
    let pattern = std::sync::Arc::new(Pattern::default());
    let chunks = futures::stream::iter(0..mib).map(move |i| Ok::<_, Infallible>(Frame::data(pattern.chunk(i))));
    let body = BoxBody::new(StreamBody::new(chunks));
    let req = hyper::Request::builder()
        .method("POST")
        .uri(files_uri(&[("path", path)]))
        .header("host", envd.addr().to_string())
        .header("content-type", "application/octet-stream")
        .body(body)
        .expect("request");
    let resp = within(limit, "streamed upload", send_http1(envd.addr(), req)).await;
    read_raw(resp).await
}

/// Downloads `path` streaming, checking every byte against `Pattern`; returns the byte count.
pub async fn stream_download_check(envd: &Envd, path: &str, limit: Duration) -> u64 {
    let pattern = Pattern::default();
    let req = hyper::Request::builder()
        .method("GET")
        .uri(files_uri(&[("path", path)]))
        .header("host", envd.addr().to_string())
        .body(BoxBody::new(http_body_util::Full::new(Bytes::new())))
        .expect("request");
    let resp = within(STEP, "download response head", send_http1(envd.addr(), req)).await;
    assert_eq!(resp.status(), 200, "download status");
    let mut body = resp.into_body();
    let mut n = 0u64;
    within(limit, "streamed download", async {
        while let Some(frame) = body.frame().await {
            let frame = frame.unwrap_or_else(|e| panic!("download failed after {n} bytes: {e}"));
            if let Ok(data) = frame.into_data() {
                assert!(pattern.matches(n, &data), "downloaded bytes differ from what was uploaded at offset {n}");
                n += data.len() as u64;
            }
        }
    })
    .await;
    n
}
