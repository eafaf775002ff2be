//! E2B's `GET /files` and `POST /files`: downloads (gzip, single ranges) and uploads (multipart
//! or octet-stream, gzip bodies), streamed through bounded buffers so memory stays flat whatever
//! the size. Files are opened as the acting user (`fs::creds`); reads and writes then go
//! through the open descriptor.
use std::{
    collections::HashMap,
    io,
    path::{Path, PathBuf},
    pin::Pin,
    sync::Arc,
};

use async_compression::tokio::{bufread::GzipDecoder, bufread::GzipEncoder};
use axum::{
    body::{Body, Bytes},
    extract::{Query, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use futures::{Stream, StreamExt, TryStreamExt};
use serde::Deserialize;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::io::{ReaderStream, StreamReader};

use super::{context::user_named, routes::plain_error, Wire};
use crate::{
    events,
    fs::{self, FsError, Identity},
    service::{user_path, CallContext},
    users::User,
};

/// Read size for downloads: large enough to keep the disk and the socket busy, small enough
/// that a slow client holds little.
const READ_CHUNK: usize = 256 * 1024;
/// Writes to disk are gathered up to this much.
const WRITE_CHUNK: usize = 1024 * 1024;
const METADATA_HEADER: &str = "x-metadata-";

#[derive(Debug, Default, Deserialize)]
struct Params {
    path: Option<String>,
    username: Option<String>,
}

/// A failed transfer: its HTTP status and message, logged once when answered.
struct Failure {
    status: StatusCode,
    message: String,
}

impl Failure {
    fn new(status: StatusCode, message: impl Into<String>) -> Failure {
        Failure { status, message: message.into() }
    }

    fn respond(self, method: &str, query: &str) -> Response {
        events::FileTransferFailed { method, query, status: self.status.as_u16(), message: &self.message }.emit();
        plain_error(self.status, self.message)
    }
}

impl From<FsError> for Failure {
    fn from(e: FsError) -> Failure {
        let status = match &e {
            FsError::NotFound(_) => StatusCode::NOT_FOUND,
            FsError::PermissionDenied(_) | FsError::ReadOnly(_) => StatusCode::FORBIDDEN,
            FsError::NoSpace(_) => StatusCode::INSUFFICIENT_STORAGE,
            FsError::DirExists(_) | FsError::NotEmpty(_) => StatusCode::CONFLICT,
            FsError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            FsError::EmptyPath
            | FsError::NulInPath(_)
            | FsError::NotADirectory(_)
            | FsError::IsADirectory(_)
            | FsError::NotARegularFile(_)
            | FsError::ExistsNotDir(_)
            | FsError::IntoItself(_)
            | FsError::SymlinkLoop(_)
            | FsError::CrossDevice(_)
            | FsError::RemoveRoot
            | FsError::BadMetadata(_)
            | FsError::MetadataUnsupported(_) => StatusCode::BAD_REQUEST,
        };
        Failure::new(status, e.to_string())
    }
}

fn params(req: &http::Request<Body>) -> Result<Params, Failure> {
    Query::<Params>::try_from_uri(req.uri())
        .map(|q| q.0)
        .map_err(|e| Failure::new(StatusCode::BAD_REQUEST, format!("malformed query: {e}")))
}

/// The acting user: `username=` when given (as E2B's envd, which reads only that on these
/// routes), else the `Authorization: Basic` user, else the default one.
fn acting_user(wire: &Wire, req: &http::Request<Body>, p: &Params) -> Result<User, Failure> {
    let unauthorized = |e: crate::error::RpcError| Failure::new(StatusCode::UNAUTHORIZED, e.message);
    match p.username.as_deref().filter(|u| !u.is_empty()) {
        Some(name) => user_named(name, &wire.settings).map_err(unauthorized),
        None => match req.extensions().get::<CallContext>() {
            Some(ctx) => Ok(ctx.user.clone()),
            None => user_named("", &wire.settings).map_err(unauthorized),
        },
    }
}

/// Runs a blocking file operation as `user`.
async fn as_user<T: Send + 'static>(
    user: &User,
    op: impl FnOnce() -> Result<T, FsError> + Send + 'static,
) -> Result<T, Failure> {
    match fs::run_as(Identity::for_user(user), op).await {
        Ok(r) => r.map_err(Failure::from),
        Err(e) => Err(Failure::new(StatusCode::INTERNAL_SERVER_ERROR, format!("acting as {}: {e}", user.name))),
    }
}

// ---------------------------------------------------------------------------------------------
// GET /files
// ---------------------------------------------------------------------------------------------

pub async fn download(State(wire): State<Arc<Wire>>, req: http::Request<Body>) -> Response {
    let query = req.uri().query().unwrap_or("").to_string();
    match serve_download(&wire, req).await {
        Ok(r) => r,
        Err(f) => f.respond("GET /files", &query),
    }
}

async fn serve_download(wire: &Wire, req: http::Request<Body>) -> Result<Response, Failure> {
    let p = params(&req)?;
    let user = acting_user(wire, &req, &p)?;
    let path = user_path(&wire.settings, &user, p.path.as_deref().unwrap_or(""))?;
    let headers = req.headers();
    let mut gzip = match header_str(headers, header::ACCEPT_ENCODING) {
        Some(v) => accepts_gzip(v).map_err(|m| Failure::new(StatusCode::BAD_REQUEST, m))?,
        None => false,
    };
    // A Range names bytes of the file itself, so it is served without compression (as E2B's);
    // with If-Range, which this daemon does not evaluate, the whole file is sent.
    let range_header = if headers.contains_key(header::IF_RANGE) { None } else { header_str(headers, header::RANGE) };
    if range_header.is_some() {
        gzip = false;
    }
    let open_path = path.clone();
    let (file, md) = as_user(&user, move || fs::ops::open_file(&open_path)).await?;
    let size = md.len();

    let mut resp = Response::builder()
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::VARY, "Accept-Encoding");
    let (start, len) = match range_header.map(|h| parse_range(h, size)) {
        None | Some(RangeRequest::Ignored) => (0, None),
        Some(RangeRequest::Unsatisfiable) => {
            let mut r =
                plain_error(StatusCode::RANGE_NOT_SATISFIABLE, format!("range not satisfiable for {size} bytes"));
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            return Ok(r);
        }
        Some(RangeRequest::Bytes { start, end }) => {
            resp = resp
                .status(StatusCode::PARTIAL_CONTENT)
                .header(header::CONTENT_RANGE, format!("bytes {start}-{end}/{size}"));
            (start, Some(end - start + 1))
        }
    };
    // Files that report no size (procfs and the like) are read to their end.
    let len = len.or((size > 0).then_some(size));

    let mut file = tokio::fs::File::from_std(file);
    if start > 0 {
        use tokio::io::AsyncSeekExt as _;
        file.seek(io::SeekFrom::Start(start))
            .await
            .map_err(|e| Failure::from(FsError::io("seeking in", path.clone(), e)))?;
    }
    let reader: Pin<Box<dyn tokio::io::AsyncRead + Send>> = match len {
        Some(n) => Box::pin(file.take(n)),
        None => Box::pin(file),
    };
    let body = if gzip {
        resp = resp.header(header::CONTENT_ENCODING, "gzip");
        let buffered = tokio::io::BufReader::with_capacity(READ_CHUNK, reader);
        Body::from_stream(ReaderStream::with_capacity(GzipEncoder::new(buffered), READ_CHUNK))
    } else {
        if let Some(n) = len {
            resp = resp.header(header::CONTENT_LENGTH, n);
        }
        Body::from_stream(ReaderStream::with_capacity(reader, READ_CHUNK))
    };
    resp.body(body).map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

fn header_str(h: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// Whether to answer with gzip, from `Accept-Encoding` and its q-values, as E2B's envd decides:
/// gzip when listed (with q > 0) and not less preferred than identity, or when `*` is accepted
/// and identity refused; an error when identity is refused and gzip not acceptable.
pub fn accepts_gzip(header: &str) -> Result<bool, String> {
    let (mut gzip, mut identity, mut star) = (None::<f32>, None::<f32>, None::<f32>);
    for item in header.split(',') {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q=").or_else(|| p.trim().strip_prefix("Q=")))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        match coding.as_str() {
            "gzip" | "x-gzip" => gzip = Some(q),
            "identity" => identity = Some(q),
            "*" => star = Some(q),
            _ => {}
        }
    }
    let identity_ok = match identity {
        Some(q) => q > 0.0,
        None => star != Some(0.0),
    };
    match gzip {
        Some(q) if q > 0.0 && (!identity_ok || q >= identity.unwrap_or(0.0)) => return Ok(true),
        Some(_) => {}
        None if !identity_ok && star.is_some_and(|q| q > 0.0) => return Ok(true),
        None => {}
    }
    if identity_ok {
        Ok(false)
    } else {
        Err(format!("no acceptable encoding in Accept-Encoding {header:?}; supported: gzip, identity"))
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum RangeRequest {
    /// Not a single byte range this daemon serves (another unit, several ranges): send it all.
    Ignored,
    Unsatisfiable,
    /// Inclusive bounds.
    Bytes {
        start: u64,
        end: u64,
    },
}

/// A `Range` header against a file of `size` bytes.
pub fn parse_range(h: &str, size: u64) -> RangeRequest {
    let Some(spec) = h.trim().strip_prefix("bytes=") else { return RangeRequest::Ignored };
    if spec.contains(',') {
        return RangeRequest::Ignored;
    }
    let Some((a, b)) = spec.trim().split_once('-') else { return RangeRequest::Unsatisfiable };
    let (a, b) = (a.trim(), b.trim());
    let parse = |s: &str| s.parse::<u64>().ok();
    let range = match (a.is_empty(), b.is_empty()) {
        // `-N`: the last N bytes.
        (true, false) => parse(b).filter(|n| *n > 0 && size > 0).map(|n| (size.saturating_sub(n), size - 1)),
        (false, true) => parse(a).filter(|s| *s < size).map(|s| (s, size - 1)),
        (false, false) => match (parse(a), parse(b)) {
            (Some(s), Some(e)) if s <= e && s < size => Some((s, e.min(size - 1))),
            _ => None,
        },
        (true, true) => None,
    };
    match range {
        Some((start, end)) => RangeRequest::Bytes { start, end },
        None => RangeRequest::Unsatisfiable,
    }
}

// ---------------------------------------------------------------------------------------------
// POST /files
// ---------------------------------------------------------------------------------------------

pub type BodyStream = Pin<Box<dyn Stream<Item = io::Result<Bytes>> + Send>>;

#[derive(Debug, serde::Serialize)]
struct Written {
    path: String,
    name: String,
    r#type: &'static str,
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    metadata: HashMap<String, String>,
}

pub async fn upload(State(wire): State<Arc<Wire>>, req: http::Request<Body>) -> Response {
    let query = req.uri().query().unwrap_or("").to_string();
    match receive_upload(&wire, req).await {
        Ok(written) => Json(written).into_response(),
        Err(f) => f.respond("POST /files", &query),
    }
}

async fn receive_upload(wire: &Wire, req: http::Request<Body>) -> Result<Vec<Written>, Failure> {
    let p = params(&req)?;
    let user = acting_user(wire, &req, &p)?;
    let bad = |m: String| Failure::new(StatusCode::BAD_REQUEST, m);
    let gzip = match header_str(req.headers(), header::CONTENT_ENCODING).map(|v| v.trim().to_ascii_lowercase()) {
        None => false,
        Some(v) if v.is_empty() || v == "identity" => false,
        Some(v) if v == "gzip" || v == "x-gzip" => true,
        Some(v) => return Err(bad(format!("unsupported Content-Encoding {v:?}; supported: gzip, identity"))),
    };
    let metadata = metadata_headers(req.headers()).map_err(bad)?;
    let content_type = header_str(req.headers(), header::CONTENT_TYPE).unwrap_or("").to_string();
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();

    let body = req.into_body().into_data_stream().map_err(io::Error::other);
    let body: BodyStream = if gzip {
        let mut decoder = GzipDecoder::new(StreamReader::new(body));
        decoder.multiple_members(true);
        Box::pin(ReaderStream::with_capacity(decoder, WRITE_CHUNK / 4))
    } else {
        Box::pin(body)
    };

    match essence.as_str() {
        "application/octet-stream" => {
            let Some(raw) = p.path.as_deref().filter(|s| !s.is_empty()) else {
                return Err(bad("an application/octet-stream upload needs the path parameter".into()));
            };
            let path = user_path(&wire.settings, &user, raw)?;
            Ok(vec![write_file(&user, path, &metadata, body).await?])
        }
        "multipart/form-data" => {
            receive_multipart(wire, &user, &p, &metadata, multipart(&content_type, body).map_err(bad)?).await
        }
        _ => Err(Failure::new(
            StatusCode::BAD_REQUEST,
            format!("Content-Type {content_type:?} is neither multipart/form-data nor application/octet-stream"),
        )),
    }
}

/// A multipart body's parts, with the boundary its `Content-Type` names.
pub fn multipart(content_type: &str, body: BodyStream) -> Result<multer::Multipart<'static>, String> {
    let boundary =
        multer::parse_boundary(content_type).map_err(|e| format!("malformed multipart Content-Type: {e}"))?;
    Ok(multer::Multipart::new(body, boundary))
}

/// The next part named `file` and the path it goes to (as given, not yet resolved): the `path`
/// parameter when there is one, else the part's filename. Other parts are skipped. Reading the
/// returned part's bytes is the caller's, before asking for the next.
pub async fn next_file_part(
    parts: &mut multer::Multipart<'static>,
    path_param: Option<&str>,
) -> Result<Option<(String, multer::Field<'static>)>, String> {
    while let Some(field) = parts.next_field().await.map_err(|e| format!("malformed multipart body: {e}"))? {
        if field.name() != Some("file") {
            continue;
        }
        return match path_param.filter(|s| !s.is_empty()).or(field.file_name()) {
            Some(r) if !r.is_empty() => Ok(Some((r.to_string(), field))),
            _ => Err("a file part needs a filename (its path) or the path parameter".into()),
        };
    }
    Ok(None)
}

/// Every part named `file` is a file: at `path` when the query gives one (then only one file
/// may be sent), else at the part's filename, a whole path. Other parts are skipped.
async fn receive_multipart(
    wire: &Wire,
    user: &User,
    p: &Params,
    metadata: &HashMap<String, String>,
    mut parts: multer::Multipart<'static>,
) -> Result<Vec<Written>, Failure> {
    let bad = |m: String| Failure::new(StatusCode::BAD_REQUEST, m);
    let mut written: Vec<Written> = Vec::new();
    while let Some((raw, field)) = next_file_part(&mut parts, p.path.as_deref()).await.map_err(bad)? {
        let path = user_path(&wire.settings, user, &raw)?;
        if written.iter().any(|w| Path::new(&w.path) == path) {
            return Err(bad(format!("{} appears twice in one upload; only the first was written", path.display())));
        }
        let chunks: BodyStream = Box::pin(field.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)));
        written.push(write_file(user, path, metadata, chunks).await?);
    }
    if written.is_empty() {
        return Err(bad("the multipart body has no part named \"file\"".into()));
    }
    Ok(written)
}

/// Creates (or truncates) `path` as `user` and streams `body` into it.
async fn write_file(
    user: &User,
    path: PathBuf,
    metadata: &HashMap<String, String>,
    mut body: BodyStream,
) -> Result<Written, Failure> {
    let (open_path, meta) = (path.clone(), metadata.clone());
    let file = as_user(user, move || fs::ops::create_file(&open_path, &meta)).await?;
    let mut out = tokio::io::BufWriter::with_capacity(WRITE_CHUNK, tokio::fs::File::from_std(file));
    let mut bytes = 0u64;
    let disk = |e: io::Error| Failure::from(FsError::io("writing", path.clone(), e));
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| Failure::new(StatusCode::BAD_REQUEST, format!("reading the upload: {e}")))?;
        out.write_all(&chunk).await.map_err(disk)?;
        bytes += chunk.len() as u64;
    }
    // The file's last writes complete (or report their error, ENOSPC included) here.
    out.flush().await.map_err(disk)?;
    let shown = path.to_string_lossy().into_owned();
    events::FileUploaded { path: &shown, user: &user.name, bytes }.emit();
    Ok(Written {
        name: path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        path: shown,
        r#type: "file",
        metadata: metadata.clone(),
    })
}

/// `X-Metadata-<key>: <value>` headers: keys lowercased (HTTP header names carry no case),
/// the first value of a repeated header, empty keys ignored; validated by `fs::meta`.
pub fn metadata_headers(h: &HeaderMap) -> Result<HashMap<String, String>, String> {
    let mut out = HashMap::new();
    for name in h.keys() {
        let Some(key) = name.as_str().strip_prefix(METADATA_HEADER) else { continue };
        if key.is_empty() {
            continue;
        }
        let Some(value) = h.get(name) else { continue };
        let value = value.to_str().map_err(|_| format!("the value of metadata {key:?} is not printable ASCII"))?;
        out.insert(key.to_string(), value.to_string());
    }
    fs::meta::validate(&out).map_err(|e| e.to_string())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        use RangeRequest::*;
        assert_eq!(parse_range("bytes=0-4", 10), Bytes { start: 0, end: 4 });
        assert_eq!(parse_range("bytes=5-", 10), Bytes { start: 5, end: 9 });
        assert_eq!(parse_range("bytes=-3", 10), Bytes { start: 7, end: 9 });
        assert_eq!(parse_range("bytes=-30", 10), Bytes { start: 0, end: 9 });
        assert_eq!(parse_range("bytes=8-100", 10), Bytes { start: 8, end: 9 });
        assert_eq!(parse_range("bytes=10-", 10), Unsatisfiable);
        assert_eq!(parse_range("bytes=5-2", 10), Unsatisfiable);
        assert_eq!(parse_range("bytes=-0", 10), Unsatisfiable);
        assert_eq!(parse_range("bytes=0-", 0), Unsatisfiable);
        assert_eq!(parse_range("bytes=x-y", 10), Unsatisfiable);
        assert_eq!(parse_range("bytes=0-1,3-4", 10), Ignored);
        assert_eq!(parse_range("items=0-1", 10), Ignored);
    }

    #[test]
    fn encodings() {
        assert_eq!(accepts_gzip("gzip"), Ok(true));
        assert_eq!(accepts_gzip("gzip, deflate, br"), Ok(true));
        assert_eq!(accepts_gzip("identity"), Ok(false));
        assert_eq!(accepts_gzip("br"), Ok(false));
        assert_eq!(accepts_gzip("gzip;q=0"), Ok(false));
        assert_eq!(accepts_gzip("gzip;q=0.5, identity"), Ok(false));
        assert_eq!(accepts_gzip("*"), Ok(false));
        assert_eq!(accepts_gzip("identity;q=0, *"), Ok(true));
        assert_eq!(accepts_gzip("identity;q=0, gzip"), Ok(true));
        assert_eq!(accepts_gzip("gzip, identity"), Ok(true));
        assert!(accepts_gzip("identity;q=0").is_err());
        assert!(accepts_gzip("*;q=0").is_err());
    }
}
