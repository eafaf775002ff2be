//! The relay's HTTP surface: REST and Server-Sent Events under `/api` (`rest`), the MCP
//! endpoint at `/mcp` (`mcp`), the web console's files at `/` (`console`), bearer authentication and scope rules as router layers (`auth`),
//! and the one mapping of the domain's errors to statuses and codes (`error`).
//!
//! Invariant: only this module (and the application's wiring) knows HTTP. Handlers map requests
//! and results to their protocol and nothing more: limits, ownership and closing reasons are
//! decided once, in the domain modules both APIs call.
pub mod auth;
pub mod console;
pub mod error;
pub mod extract;
pub mod mcp;
pub mod rest;

use std::sync::Arc;

use axum::Router;
use tokio_util::sync::CancellationToken;

use crate::handles::Relay;

pub use error::ApiError;

/// Every route the relay serves. `mcp_allowed_hosts` are the `Host` values `/mcp` accepts;
/// cancelling `mcp_shutdown` ends the MCP SDK's streams and sessions.
pub fn router(relay: Arc<Relay>, mcp_allowed_hosts: Vec<String>, mcp_shutdown: CancellationToken) -> Router {
    rest::router(relay.clone())
        .merge(mcp::router(relay.clone(), mcp_allowed_hosts, mcp_shutdown).with_state(relay))
        .merge(console::router())
}

/// How long MCP responses cut off by a shutdown have to reach their clients.
const MCP_RESULTS_GRACE: std::time::Duration = std::time::Duration::from_millis(500);
/// How long responses have to flush once the shutdown began.
const FLUSH_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves every route on `listener` until `stop` resolves; then every open stream ends at once
/// with `shutdown`, new ones are refused, and this returns once responses have flushed
/// (`FLUSH_GRACE` at the most).
pub async fn serve(
    listener: tokio::net::TcpListener,
    relay: Arc<Relay>,
    mcp_allowed_hosts: Vec<String>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt as _;
    let mcp_shutdown = CancellationToken::new();
    let app = router(relay.clone(), mcp_allowed_hosts, mcp_shutdown.clone());
    let (stopping_tx, stopping) = tokio::sync::oneshot::channel::<()>();
    let streams = relay.streams.clone();
    // TCP_NODELAY: an SSE event or MCP notification goes out when written, not after the
    // previous one's ACK.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        stop.await;
        let closed = streams.shutdown();
        // The MCP calls and subscriptions the shutdown just ended get a moment to send their
        // results before the SDK closes its streams and sessions.
        tokio::spawn(async move {
            tokio::time::sleep(MCP_RESULTS_GRACE).await;
            mcp_shutdown.cancel();
        });
        crate::events::ShuttingDown { streams: closed }.emit();
        let _ = stopping_tx.send(());
    });
    tokio::select! {
        r = server => r,
        _ = async {
            let _ = stopping.await;
            tokio::time::sleep(FLUSH_GRACE).await;
        } => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Every `.rs` file under `dir`.
    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("api/ is readable").flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The identifiers of Rust source with the byte each starts at and the two characters
    /// before it, leaving out comments and string and character literals (which may say "store").
    fn identifiers(src: &str) -> Vec<(usize, String, String)> {
        let b = src.as_bytes();
        let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'/' if b.get(i + 1) == Some(&b'/') => {
                    while i < b.len() && b[i] != b'\n' {
                        i += 1;
                    }
                }
                b'/' if b.get(i + 1) == Some(&b'*') => {
                    i += 2;
                    while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                        i += 1;
                    }
                    i += 2;
                }
                b'"' => {
                    // A raw string (`r"…"`, `r#"…"#`) has no escapes; it ends at a quote and its hashes.
                    let hashes = src[..i].bytes().rev().take_while(|&c| c == b'#').count();
                    let raw = i > hashes && b[i - hashes - 1] == b'r';
                    i += 1;
                    while i < b.len() {
                        if !raw && b[i] == b'\\' {
                            i += 2;
                            continue;
                        }
                        if b[i] == b'"'
                            && (!raw || b[i + 1..].iter().take(hashes).filter(|&&c| c == b'#').count() == hashes)
                        {
                            i += 1 + if raw { hashes } else { 0 };
                            break;
                        }
                        i += 1;
                    }
                }
                // A character literal (`'"'`, `'\''`), not a lifetime (`'a`).
                b'\'' if b.get(i + 1) == Some(&b'\\') => {
                    i += 2;
                    while i < b.len() && b[i] != b'\'' {
                        i += 1;
                    }
                    i += 1;
                }
                b'\'' if b.get(i + 2) == Some(&b'\'') => i += 3,
                c if ident(c) => {
                    let start = i;
                    while i < b.len() && ident(b[i]) {
                        i += 1;
                    }
                    let before = src[..start].trim_end();
                    let before = before[before.len().saturating_sub(2)..].to_string();
                    out.push((start, src[start..i].to_string(), before));
                }
                _ => i += 1,
            }
        }
        out
    }

    /// Where `src` reaches the store: the `store` module or field (`relay.store`,
    /// `crate::store::…`, `store::Scope`) or the `Store` type named on its own. Its error, the
    /// `Error::Store` variant, is fine: mapping errors to statuses is what `api/error.rs` does.
    fn store_uses(src: &str) -> Vec<usize> {
        let line = |at: usize| src[..at].matches('\n').count() + 1;
        identifiers(src)
            .into_iter()
            .filter(|(_, word, before)| word == "store" || (word == "Store" && before != "::"))
            .map(|(at, _, _)| line(at))
            .collect()
    }

    /// `api/` maps requests and results and decides nothing, so it never reads or writes the
    /// store: each read is a domain function's (auth, sessions, jobs, inbox, sandboxes), which
    /// decides what the caller may see. Store types re-exported by a domain module are fine.
    #[test]
    fn no_handler_touches_the_store() {
        let api = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api");
        let mut files = Vec::new();
        sources(&api, &mut files);
        assert!(files.len() > 10, "found {} files under {}", files.len(), api.display());
        let mut found = Vec::new();
        for f in files {
            let src = std::fs::read_to_string(&f).expect("a source file is readable");
            for line in store_uses(&src) {
                found.push(format!("{}:{line}", f.strip_prefix(&api).unwrap_or(&f).display()));
            }
        }
        assert!(found.is_empty(), "api/ reaches the store at {found:#?}");
    }

    #[test]
    fn the_scan_finds_store_access_and_skips_text() {
        let src = "let a = relay.store.job(x);\nuse crate::{store::Scope};\nfn f(s: &Store) {}\n\
                   // the store\nlet m = \"the store\";\nlet r = r#\"store \" store\"#;\n\
                   match e { Error::Store(_) => 1 }\nlet c = '\"'; let s = stored; let t = relay.store;\n";
        assert_eq!(store_uses(src), vec![1, 2, 3, 8]);
    }
}
