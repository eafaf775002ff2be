//! A test double of E2B's service for the relay's `e2b` provider: E2B's REST API, checked
//! request by request against E2B's published OpenAPI spec ([`spec`]), and E2B's edge proxy in
//! front of each sandbox's envd ([`edge`]).
//!
//! - The API answers the operations the provider calls (`POST /sandboxes`, `GET` and `DELETE
//!   /sandboxes/{id}`, `POST /sandboxes/{id}/pause` and `/connect`) as E2B's server does
//!   (e2b-dev/infra@54693ff353d2, `packages/api`): the `X-API-Key` check and its 401s, the
//!   schema check of every body (with one deliberate strictness: fields the schema does not name
//!   are refused), E2B's statuses and its error body `{"code", "message"}`. Any other operation
//!   the spec has answers 501; one it does not have answers 404 or 405. Every request is
//!   recorded (`requests`), and every answer is checked against the spec too (`spec_problems`).
//! - A sandbox is a real Docker container of the template's image (a hangar-envd image), named
//!   `e2b-<id>`, labelled `hangar.sandbox` and `hangar.sandbox.name` from the metadata the
//!   provider sent (so `docker::Containers` and `docker::container_of` find it). Its envd gets the
//!   access token the double made (`HANGAR_ENVD_ACCESS_TOKEN`), then `POST /init` with the
//!   sandbox's `envVars` and the template's user (`user`) and directory (`/home/user`), as E2B's
//!   orchestrator sends it. A sandbox whose container was removed is one E2B no longer has. Pause and resume are `docker pause` and
//!   `docker unpause` (E2B's memory snapshot keeps processes too); kill is `docker rm -f`.
//! - The edge routes `E2b-Sandbox-Id`/`E2b-Sandbox-Port` (for an IP, `localhost` or
//!   `sandbox.<domain>` host) or a `<port>-<id>.<domain>` host to the container's envd, as E2B's
//!   `packages/shared/pkg/proxy/host.go` does, and speaks HTTP/1.1 to it as E2B's edge does, so
//!   only the relay's Connect transport gets through.
//!
//! The double runs on a thread of its own with its own runtime, so it serves whatever the test
//! does meanwhile; dropping it removes every container it made.
pub mod edge;
pub mod spec;

use std::{
    collections::{BTreeMap, HashMap},
    convert::Infallible,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, Limited};
use hyper::{body::Incoming, Request, Response, StatusCode};
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client},
    rt::{TokioExecutor, TokioIo},
};
use serde_json::{json, Value};

pub type Body = BoxBody<Bytes, hyper::Error>;

/// The template every double knows, as E2B's own base template.
pub const BASE_TEMPLATE: &str = "base";
/// The domain the double's sandboxes are under.
pub const DOMAIN: &str = "e2b.test";
/// E2B's envd port.
pub const ENVD_PORT: u16 = 49983;
/// The longest timeout the double's team may ask for (E2B's Pro plan: 24 hours).
const MAX_TIMEOUT_HOURS: i64 = 24;
/// E2B's `clientID` is deprecated and fixed.
const CLIENT_ID: &str = "6532622b";
/// The user and directory E2B's templates give commands (its base template's).
pub const TEMPLATE_USER: &str = "user";
const TEMPLATE_WORKDIR: &str = "/home/user";
/// The envd version the double reports when the daemon does not say.
const ENVD_VERSION: &str = "0.6.4";

/// Answers E2B's server gives that its spec does not list: an unknown template is a 404
/// (`packages/api/internal/cache/templates/errors.go`), where the spec lists only 400, 401, 500,
/// 503 and 504 for `POST /sandboxes`.
const UNLISTED: [(&str, &str, u16); 1] = [("POST", "/sandboxes", 404)];

/// One request the API got, and what it answered.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub api_key: Option<String>,
    pub content_type: Option<String>,
    pub body: Option<Value>,
    pub status: u16,
    pub answer: Value,
}

/// One request the edge got.
#[derive(Debug, Clone)]
pub struct EdgeRecorded {
    /// The host the request named (`:authority` or `Host`).
    pub host: String,
    pub path: String,
    /// The sandbox it was routed to, and whether by E2B's routing headers (else by the host).
    pub sandbox_id: Option<String>,
    pub by_headers: bool,
    pub access_token: Option<String>,
    /// Whether the request came in over HTTP/2 (it goes on over HTTP/1.1 all the same).
    pub http2: bool,
    pub status: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxState {
    Running,
    Paused,
}

#[derive(Debug, Clone)]
pub struct Sandbox {
    pub id: String,
    pub template: String,
    pub container: String,
    pub ip: String,
    pub token: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    pub state: SandboxState,
    pub started_at: u64,
    pub end_at: u64,
    pub envd_version: String,
}

#[derive(Default)]
struct State {
    sandboxes: HashMap<String, Sandbox>,
    requests: Vec<Recorded>,
    edge: Vec<EdgeRecorded>,
    /// The double's own answers that broke the spec: a bug of the double, which tests assert away.
    problems: Vec<String>,
}

pub(crate) struct Ctx {
    key: String,
    templates: HashMap<String, String>,
    /// Labels every container of this double (removed on drop).
    instance: String,
    state: Mutex<State>,
    http1: Client<HttpConnector, Full<Bytes>>,
}

impl Ctx {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn sandbox(&self, id: &str) -> Option<Sandbox> {
        self.lock().sandboxes.get(id).cloned()
    }

    /// The sandbox, if its container still exists: E2B's record follows its VMs, so one whose
    /// container was removed behind the double's back is forgotten, as a VM that died is.
    pub(crate) async fn live(&self, id: &str) -> Option<Sandbox> {
        let s = self.sandbox(id)?;
        if docker(&["inspect", "--format", "{{.State.Status}}", &s.container]).await.is_ok() {
            return Some(s);
        }
        self.lock().sandboxes.remove(id);
        None
    }

    pub(crate) fn record_edge(&self, r: EdgeRecorded) {
        self.lock().edge.push(r);
    }
}

/// The double: its API and edge addresses, and the key it takes.
pub struct E2bApi {
    pub api: SocketAddr,
    pub edge: SocketAddr,
    /// The API key the double's team has (`e2b_` and hex, as E2B's).
    pub key: String,
    ctx: Arc<Ctx>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Lowercase letters and digits from the kernel's randomness.
fn random_alnum(n: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .expect("reading /dev/urandom");
    bytes.iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect()
}

fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .expect("reading /dev/urandom");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// RFC 3339 in UTC, as E2B's `date-time`s (and Anthropic's rate-limit resets).
pub(crate) fn rfc3339(secs: u64) -> String {
    let (days, rem) = ((secs / 86400) as i64, secs % 86400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

pub(crate) fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never: Infallible| match never {}).boxed()
}

pub(crate) fn json_response(status: u16, body: &Value) -> Response<Body> {
    let mut r = Response::new(full(body.to_string()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert("content-type", "application/json; charset=utf-8".parse().expect("a header value"));
    r
}

/// E2B's error body.
fn error(status: u16, message: impl Into<String>) -> (u16, Value) {
    (status, json!({ "code": status, "message": message.into() }))
}

/// Runs the docker CLI; its trimmed stdout, or its stderr as the error.
async fn docker(args: &[&str]) -> Result<String, String> {
    let out =
        tokio::process::Command::new("docker").args(args).output().await.map_err(|e| format!("running docker: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!("docker {}: {}", args.first().unwrap_or(&""), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// A builder of the double: which image each template is.
pub struct Builder {
    templates: HashMap<String, String>,
}

impl E2bApi {
    /// A double whose `base` template is `image` (a hangar-envd image, such as
    /// `docker::ENVD_IMAGE`).
    pub fn start(image: &str) -> E2bApi {
        E2bApi::builder().template(BASE_TEMPLATE, image).start()
    }

    pub fn builder() -> Builder {
        Builder { templates: HashMap::new() }
    }

    /// The relay's settings that point its `e2b` provider at this double.
    pub fn relay_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("HANGAR_E2B_API_KEY", self.key.clone()),
            ("HANGAR_E2B_API_URL", format!("http://{}", self.api)),
            ("HANGAR_E2B_DOMAIN", DOMAIN.to_string()),
            // An address by IP: the edge routes by E2B's headers, as E2B's does for one.
            ("HANGAR_E2B_ENVD_URL", format!("http://{}", self.edge)),
        ]
    }

    /// Every API request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.ctx.lock().requests.clone()
    }

    /// Every edge request so far.
    pub fn edge_requests(&self) -> Vec<EdgeRecorded> {
        self.ctx.lock().edge.clone()
    }

    /// The double's own answers that did not match the spec (empty unless the double is wrong).
    pub fn spec_problems(&self) -> Vec<String> {
        self.ctx.lock().problems.clone()
    }

    pub fn sandbox(&self, id: &str) -> Option<Sandbox> {
        self.ctx.sandbox(id)
    }

    /// The sandbox whose `hangar.sandbox` metadata is `hangar_id`.
    pub fn sandbox_of(&self, hangar_id: &str) -> Option<Sandbox> {
        let state = self.ctx.lock();
        state
            .sandboxes
            .values()
            .find(|s| s.metadata.get("hangar.sandbox").map(String::as_str) == Some(hangar_id))
            .cloned()
    }

    /// Ends a sandbox as E2B does at its timeout: it is killed, and E2B no longer knows it.
    pub fn expire(&self, id: &str) {
        let container = self.ctx.lock().sandboxes.remove(id).map(|s| s.container);
        if let Some(c) = container {
            let _ = std::process::Command::new("docker").args(["rm", "-f", "-v", &c]).output();
        }
    }
}

impl Builder {
    /// The template `name` is the image `image`.
    pub fn template(mut self, name: &str, image: &str) -> Builder {
        self.templates.insert(name.to_string(), image.to_string());
        self
    }

    pub fn start(self) -> E2bApi {
        let key = format!("e2b_{}", random_hex(20));
        let http1 = Client::builder(TokioExecutor::new()).build_http();
        let ctx = Arc::new(Ctx {
            key: key.clone(),
            templates: self.templates,
            instance: format!("{}-{}", std::process::id(), random_alnum(8)),
            state: Mutex::new(State::default()),
            http1,
        });
        let api = std::net::TcpListener::bind("127.0.0.1:0").expect("binding the double's API");
        let edge = std::net::TcpListener::bind("127.0.0.1:0").expect("binding the double's edge");
        let (api_addr, edge_addr) = (api.local_addr().expect("address"), edge.local_addr().expect("address"));
        for l in [&api, &edge] {
            l.set_nonblocking(true).expect("non-blocking listener");
        }
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = ctx.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("the double's runtime");
            rt.block_on(async move {
                let api = tokio::net::TcpListener::from_std(api).expect("API listener");
                let edge = tokio::net::TcpListener::from_std(edge).expect("edge listener");
                let edge_clients = Arc::new(edge::Clients::new());
                let serve_api = serve(api, served.clone(), |req, ctx| async move { answer_http(req, ctx).await });
                let serve_edge = serve(edge, served.clone(), move |req, ctx| {
                    let clients = edge_clients.clone();
                    async move { edge::forward(req, ctx, clients).await }
                });
                tokio::select! {
                    _ = serve_api => {}
                    _ = serve_edge => {}
                    _ = stopped => {}
                }
            });
            rt.shutdown_timeout(Duration::from_secs(1));
        });
        E2bApi { api: api_addr, edge: edge_addr, key, ctx, stop: Some(stop), thread: Some(thread) }
    }
}

impl Drop for E2bApi {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let filter = format!("label=hangar.e2b-double={}", self.ctx.instance);
        if let Ok(out) = std::process::Command::new("docker").args(["ps", "-aq", "--filter", &filter]).output() {
            for id in String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()) {
                let _ = std::process::Command::new("docker").args(["rm", "-f", "-v", id]).output();
            }
        }
    }
}

/// Serves HTTP/1.1 and h2c on `listener` with `handle`.
async fn serve<F, Fut>(listener: tokio::net::TcpListener, ctx: Arc<Ctx>, handle: F)
where
    F: Fn(Request<Incoming>, Arc<Ctx>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<Body>> + Send + 'static,
{
    loop {
        let Ok((tcp, _)) = listener.accept().await else { continue };
        let _ = tcp.set_nodelay(true);
        let (ctx, handle) = (ctx.clone(), handle.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let (ctx, handle) = (ctx.clone(), handle.clone());
                async move { Ok::<_, Infallible>(handle(req, ctx).await) }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}

/// One API request: read, checked, answered, recorded.
async fn answer_http(req: Request<Incoming>, ctx: Arc<Ctx>) -> Response<Body> {
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let header = |n: &str| req.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
    let (api_key, content_type) = (header("x-api-key"), header("content-type"));
    let bytes = match Limited::new(req.into_body(), 1024 * 1024).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return json_response(400, &error(400, format!("reading the body: {e}")).1),
    };
    let (body, (status, answer)) = if bytes.is_empty() {
        (None, answer(&ctx, &method, &path, api_key.as_deref(), content_type.as_deref(), None).await)
    } else {
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => (
                Some(v.clone()),
                answer(&ctx, &method, &path, api_key.as_deref(), content_type.as_deref(), Some(v)).await,
            ),
            Err(e) => (
                Some(Value::String(String::from_utf8_lossy(&bytes).into_owned())),
                error(400, format!("validation error: request body has an error: failed to decode request body: {e}")),
            ),
        }
    };
    ctx.lock().requests.push(Recorded { method, path, api_key, content_type, body, status, answer: answer.clone() });
    if status == 204 {
        let mut r = Response::new(full(Bytes::new()));
        *r.status_mut() = StatusCode::NO_CONTENT;
        return r;
    }
    json_response(status, &answer)
}

/// The answer to one request, as E2B's server makes it: route, security, body, then the handler.
async fn answer(
    ctx: &Ctx,
    method: &str,
    path: &str,
    api_key: Option<&str>,
    content_type: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let op = match spec::operation(method, path) {
        Ok(op) => op,
        Err(405) => return error(405, "method not allowed"),
        Err(s) => return error(s, "no matching operation was found"),
    };
    if op.takes_api_key() {
        // E2B's messages for a missing, malformed and unknown key.
        match api_key {
            None | Some("") => return error(401, "authorization header is missing"),
            Some(k) if !k.starts_with("e2b_") => return error(401, "authorization header is malformed"),
            Some(k) if k != ctx.key => {
                return error(
                    401,
                    "Invalid API key, please visit https://e2b.dev/docs/api-key for more information.\n\
                     Cannot get the team for the given API key",
                )
            }
            Some(_) => {}
        }
    }
    let invalid = |m: String| error(400, format!("validation error: error in openapi3filter.RequestError: {m}"));
    match (op.body_schema(), &body) {
        (None, Some(_)) => return invalid("this operation takes no request body".into()),
        (Some((_, true)), None) => return invalid("request body has an error: value is required but missing".into()),
        (Some((schema, _)), Some(b)) => {
            if content_type.is_none_or(|c| c.split(';').next().map(str::trim) != Some("application/json")) {
                return invalid(format!(
                    "request body has an error: header Content-Type has unexpected value: {content_type:?}"
                ));
            }
            let problems = spec::check(schema, b, "body");
            if !problems.is_empty() {
                return invalid(format!("request body has an error: doesn't match schema: {}", problems.join("; ")));
            }
        }
        _ => {}
    }
    let id = op.param("sandboxID").map(str::to_string);
    let (status, answer) = match (method, op.template.as_str(), id) {
        ("POST", "/sandboxes", _) => create(ctx, body.unwrap_or(Value::Null)).await,
        ("GET", "/sandboxes/{sandboxID}", Some(id)) => get(ctx, &id).await,
        ("DELETE", "/sandboxes/{sandboxID}", Some(id)) => kill(ctx, &id).await,
        ("POST", "/sandboxes/{sandboxID}/pause", Some(id)) => pause(ctx, &id).await,
        ("POST", "/sandboxes/{sandboxID}/connect", Some(id)) => {
            connect(ctx, &id, body.as_ref().and_then(|b| b["timeout"].as_i64()).unwrap_or(0)).await
        }
        _ => error(501, format!("the E2B test double does not implement {method} {}", op.template)),
    };
    // The double's own answer must be one the spec allows.
    let mut problems = Vec::new();
    if status != 501 && !op.answers(status) && !UNLISTED.contains(&(method, op.template.as_str(), status)) {
        problems.push(format!("{method} {}: {status} is not an answer the spec lists", op.template));
    }
    if let Some(schema) = op.response_schema(status) {
        problems.extend(
            spec::check(schema, &answer, "answer").into_iter().map(|p| format!("{method} {}: {p}", op.template)),
        );
    }
    if !problems.is_empty() {
        ctx.lock().problems.extend(problems);
    }
    (status, answer)
}

fn sandbox_json(s: &Sandbox) -> Value {
    let mut v = json!({
        "templateID": s.template,
        "sandboxID": s.id,
        "clientID": CLIENT_ID,
        "envdVersion": s.envd_version,
        "domain": DOMAIN,
    });
    if let Some(t) = &s.token {
        v["envdAccessToken"] = json!(t);
    }
    v
}

fn detail_json(s: &Sandbox) -> Value {
    let mut v = sandbox_json(s);
    let extra = json!({
        "startedAt": rfc3339(s.started_at),
        "endAt": rfc3339(s.end_at),
        "cpuCount": 2,
        "memoryMB": 512,
        "diskSizeMB": 512,
        "metadata": s.metadata,
        "state": if s.state == SandboxState::Paused { "paused" } else { "running" },
    });
    if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
        v.extend(extra.clone());
    }
    v
}

fn not_found(id: &str) -> (u16, Value) {
    error(404, format!("Sandbox {id:?} doesn't exist or you don't have access to it"))
}

fn strings(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default()
}

async fn create(ctx: &Ctx, body: Value) -> (u16, Value) {
    let template = body["templateID"].as_str().unwrap_or_default().to_string();
    let Some(image) = ctx.templates.get(&template).cloned() else {
        return error(404, format!("template '{template}' not found"));
    };
    let timeout = body.get("timeout").and_then(Value::as_i64).unwrap_or(15);
    if timeout <= 0 {
        return error(400, "Timeout must be greater than 0");
    }
    if timeout > MAX_TIMEOUT_HOURS * 3600 {
        return error(400, format!("Timeout cannot be greater than {MAX_TIMEOUT_HOURS} hours"));
    }
    let metadata = strings(&body["metadata"]);
    let env = strings(&body["envVars"]);
    let secure = body["secure"].as_bool().unwrap_or(false);
    let id = format!("i{}", random_alnum(19));
    let token = secure.then(|| random_hex(32));
    match start_container(ctx, &id, &image, token.as_deref(), &metadata, &env).await {
        Ok((container, ip, envd_version)) => {
            let started_at = now();
            let s = Sandbox {
                id: id.clone(),
                template,
                container,
                ip,
                token,
                metadata,
                env,
                state: SandboxState::Running,
                started_at,
                end_at: started_at + timeout as u64,
                envd_version,
            };
            let answer = sandbox_json(&s);
            ctx.lock().sandboxes.insert(id, s);
            (201, answer)
        }
        Err(e) => error(500, format!("Failed to create sandbox: {e}")),
    }
}

/// Starts the sandbox's container and initialises its envd as E2B's orchestrator does: the
/// container's name, IP and the envd's version.
async fn start_container(
    ctx: &Ctx,
    id: &str,
    image: &str,
    token: Option<&str>,
    metadata: &BTreeMap<String, String>,
    env: &BTreeMap<String, String>,
) -> Result<(String, String, String), String> {
    let name = format!("e2b-{id}");
    let label = |k: &str, v: &str| format!("{k}={v}");
    let labels = [
        label("hangar.sandbox", metadata.get("hangar.sandbox").map_or("", String::as_str)),
        label("hangar.sandbox.name", metadata.get("hangar.sandbox.name").map_or("", String::as_str)),
        label("hangar.e2b-double", &ctx.instance),
        label("hangar.e2b-sandbox", id),
    ];
    let mut args: Vec<String> = vec!["run".into(), "-d".into(), "--name".into(), name.clone()];
    for l in &labels {
        args.push("--label".into());
        args.push(l.clone());
    }
    if let Some(t) = token {
        args.push("-e".into());
        args.push(format!("HANGAR_ENVD_ACCESS_TOKEN={t}"));
    }
    args.push(image.to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    docker(&args).await?;
    let started = async {
        let ip =
            docker(&["inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", &name]).await?;
        let ip = ip.split_whitespace().next().unwrap_or_default().to_string();
        if ip.is_empty() {
            return Err("the container has no IP address".to_string());
        }
        let version = init_envd(ctx, &ip, token, env).await?;
        Ok((ip, version))
    }
    .await;
    match started {
        Ok((ip, version)) => Ok((name, ip, version)),
        Err(e) => {
            let _ = docker(&["rm", "-f", "-v", &name]).await;
            Err(e)
        }
    }
}

/// Waits for the envd's `/health`, then sends `POST /init` with the sandbox's variables (and
/// its token, as E2B does); the envd's version from `X-Envd-Version`.
async fn init_envd(ctx: &Ctx, ip: &str, token: Option<&str>, env: &BTreeMap<String, String>) -> Result<String, String> {
    let base = format!("http://{ip}:{ENVD_PORT}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let req = Request::get(format!("{base}/health")).body(Full::new(Bytes::new())).map_err(|e| e.to_string())?;
        match tokio::time::timeout(Duration::from_secs(2), ctx.http1.request(req)).await {
            Ok(Ok(r)) if r.status() == StatusCode::NO_CONTENT => break,
            _ if tokio::time::Instant::now() >= deadline => {
                return Err("the sandbox's envd did not answer /health".into())
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    // E2B's templates run commands as `user` in `/home/user` unless built otherwise.
    let mut init = json!({ "envVars": env, "defaultUser": TEMPLATE_USER, "defaultWorkdir": TEMPLATE_WORKDIR });
    if let Some(t) = token {
        init["accessToken"] = json!(t);
    }
    let mut req = Request::post(format!("{base}/init")).header("content-type", "application/json");
    if let Some(t) = token {
        req = req.header("x-access-token", t);
    }
    let req = req.body(Full::new(Bytes::from(init.to_string()))).map_err(|e| e.to_string())?;
    let resp = tokio::time::timeout(Duration::from_secs(10), ctx.http1.request(req))
        .await
        .map_err(|_| "the sandbox's envd did not answer /init".to_string())?
        .map_err(|e| format!("POST /init: {e}"))?;
    if resp.status() != StatusCode::NO_CONTENT {
        return Err(format!("POST /init answered {}", resp.status()));
    }
    Ok(resp.headers().get("x-envd-version").and_then(|v| v.to_str().ok()).unwrap_or(ENVD_VERSION).to_string())
}

async fn get(ctx: &Ctx, id: &str) -> (u16, Value) {
    match ctx.live(id).await {
        Some(s) => (200, detail_json(&s)),
        None => not_found(id),
    }
}

async fn kill(ctx: &Ctx, id: &str) -> (u16, Value) {
    let Some(s) = ctx.live(id).await else { return not_found(id) };
    ctx.lock().sandboxes.remove(id);
    match docker(&["rm", "-f", "-v", &s.container]).await {
        Ok(_) => (204, Value::Null),
        Err(e) => error(500, format!("Error killing sandbox: {e}")),
    }
}

async fn pause(ctx: &Ctx, id: &str) -> (u16, Value) {
    let Some(s) = ctx.live(id).await else { return not_found(id) };
    if s.state == SandboxState::Paused {
        return error(409, format!("Error pausing sandbox - sandbox '{id}' is already paused"));
    }
    if let Err(e) = docker(&["pause", &s.container]).await {
        return error(500, format!("Error pausing sandbox: {e}"));
    }
    if let Some(s) = ctx.lock().sandboxes.get_mut(id) {
        s.state = SandboxState::Paused;
    }
    (204, Value::Null)
}

async fn connect(ctx: &Ctx, id: &str, timeout: i64) -> (u16, Value) {
    if timeout > MAX_TIMEOUT_HOURS * 3600 {
        return error(400, format!("Timeout cannot be greater than {MAX_TIMEOUT_HOURS} hours"));
    }
    let Some(s) = ctx.live(id).await else { return not_found(id) };
    let resumed = s.state == SandboxState::Paused;
    if resumed {
        if let Err(e) = docker(&["unpause", &s.container]).await {
            return error(500, format!("Error resuming sandbox: {e}"));
        }
    }
    let mut state = ctx.lock();
    let Some(s) = state.sandboxes.get_mut(id) else { return not_found(id) };
    s.state = SandboxState::Running;
    // The timeout is only ever extended.
    s.end_at = s.end_at.max(now() + timeout.max(0) as u64);
    (if resumed { 201 } else { 200 }, sandbox_json(s))
}
