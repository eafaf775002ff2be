//! The web console: plain HTML, CSS and JavaScript modules (`relay/console/`), embedded in the
//! binary so that one binary is the whole control plane, served at `/` and `/console/...`.
//!
//! The files hold no data and need no token; the page asks for one, keeps it in the tab's
//! session storage, sends it only in headers, and trades it for one-use tickets to open its
//! `EventSource`s. The Content-Security-Policy allows scripts, styles and connections to this
//! origin only, and no inline script or style, so an agent's text that reached the page as HTML
//! by mistake could still run nothing.
use axum::{
    extract::Path,
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Router,
};

/// Every file, by its path under `/console/`, with its content type.
const FILES: &[(&str, &str, &[u8])] = &[
    ("index.html", "text/html; charset=utf-8", include_bytes!("../../console/index.html")),
    ("style.css", "text/css; charset=utf-8", include_bytes!("../../console/style.css")),
    ("js/api.js", "text/javascript; charset=utf-8", include_bytes!("../../console/js/api.js")),
    ("js/app.js", "text/javascript; charset=utf-8", include_bytes!("../../console/js/app.js")),
    ("js/dom.js", "text/javascript; charset=utf-8", include_bytes!("../../console/js/dom.js")),
    ("js/fleet.js", "text/javascript; charset=utf-8", include_bytes!("../../console/js/fleet.js")),
    ("js/inbox.js", "text/javascript; charset=utf-8", include_bytes!("../../console/js/inbox.js")),
    ("js/state.js", "text/javascript; charset=utf-8", include_bytes!("../../console/js/state.js")),
    ("js/unit.js", "text/javascript; charset=utf-8", include_bytes!("../../console/js/unit.js")),
    ("js/terminal.js", "text/javascript; charset=utf-8", include_bytes!("../../console/js/terminal.js")),
    ("vendor/xterm/xterm.js", "text/javascript; charset=utf-8", include_bytes!("../../console/vendor/xterm/xterm.js")),
    ("vendor/xterm/fit.js", "text/javascript; charset=utf-8", include_bytes!("../../console/vendor/xterm/fit.js")),
    ("vendor/xterm/xterm.css", "text/css; charset=utf-8", include_bytes!("../../console/vendor/xterm/xterm.css")),
    ("vendor/xterm/README.md", "text/plain; charset=utf-8", include_bytes!("../../console/vendor/xterm/README.md")),
];

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { file("index.html") }))
        // Browsers ask for it unbidden: nothing, rather than an authentication error.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/console/{*path}", get(|Path(path): Path<String>| async move { file(&path) }))
}

fn file(path: &str) -> Response {
    let Some((_, kind, body)) = FILES.iter().find(|(p, _, _)| *p == path) else {
        return (StatusCode::NOT_FOUND, "no such file in the console").into_response();
    };
    let mut r = (*body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // A new relay's files are used at once: the browser asks again (cheap: they are small).
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_the_console_is_embedded_and_every_embedded_file_exists() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("console");
        let mut on_disk = Vec::new();
        for entry in walk(&dir) {
            on_disk.push(entry.strip_prefix(&dir).unwrap().to_string_lossy().into_owned());
        }
        on_disk.sort();
        let mut embedded: Vec<String> = FILES.iter().map(|(p, _, _)| p.to_string()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded, "relay/console/ and FILES differ");
    }

    fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
        out
    }
}
