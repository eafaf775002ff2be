//! `GET /api/sandboxes/{ref}/terminal?cols=&rows=&argv=`: a terminal in the sandbox over a
//! WebSocket. Binary frames carry the terminal's bytes both ways; text frames carry JSON
//! control messages: the client's `{"resize": {"cols", "rows"}}`, the relay's `{"exit": code}`
//! or `{"closed": reason, "message"}` (each followed by the close), and `{"error": message}` for
//! a control message it could not read or input the daemon refused (the terminal goes on). Everything that can refuse it
//! (the sandbox, its daemon, the stream limits, the size, the command) answers as HTTP before
//! the upgrade. Browsers authenticate with a one-use `?ticket=` (they cannot set headers on a
//! WebSocket), the CLI with its bearer header.
use std::sync::Arc;

use axum::{
    extract::{
        ws::{rejection::WebSocketUpgradeRejection, CloseFrame, Message, WebSocket, WebSocketUpgrade},
        Path, State,
    },
    response::Response,
    Extension,
};
use serde::Deserialize;

use crate::{
    api::{extract::Params, ApiError},
    auth::Caller,
    handles::Relay,
    streams::Front,
    terminal::{self, Event, Size, Terminal, DEFAULT_SIZE},
};

/// The largest frame a client may send: keystrokes and pastes, not files.
const MAX_FRAME_BYTES: usize = 64 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalQuery {
    cols: Option<u16>,
    rows: Option<u16>,
    /// The program and its arguments as a JSON array of strings; absent: a login shell.
    argv: Option<String>,
}

/// A control message from the client.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
enum Control {
    #[serde(rename = "resize")]
    Resize(Size),
}

pub async fn open(
    State(relay): State<Arc<Relay>>,
    Extension(caller): Extension<Caller>,
    Path(reference): Path<String>,
    Params(q): Params<TerminalQuery>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let upgrade = upgrade.map_err(|e| {
        ApiError::bad_request(format!("a terminal is a WebSocket: {} (send the upgrade headers)", e.body_text()))
    })?;
    let argv: Vec<String> = match &q.argv {
        Some(a) => serde_json::from_str(a)
            .map_err(|e| ApiError::bad_request(format!("argv must be a JSON array of strings: {e}")))?,
        None => Vec::new(),
    };
    let size = Size { cols: q.cols.unwrap_or(DEFAULT_SIZE.cols), rows: q.rows.unwrap_or(DEFAULT_SIZE.rows) };
    let term = terminal::open(&relay.sandboxes, &relay.streams, &caller, &reference, &argv, size, Front::Rest).await?;
    // A failed upgrade drops `term`, which kills its program.
    Ok(upgrade
        .max_message_size(MAX_FRAME_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .on_upgrade(move |socket| serve(socket, term)))
}

fn text(value: serde_json::Value) -> Message {
    Message::Text(value.to_string().into())
}

fn close(reason: &str) -> Message {
    Message::Close(Some(CloseFrame { code: axum::extract::ws::close_code::NORMAL, reason: reason.into() }))
}

/// The terminal's bytes to the socket and the socket's to the terminal until either ends. The
/// terminal is dropped on every way out, which kills its program if it still runs.
async fn serve(mut socket: WebSocket, mut term: Terminal) {
    loop {
        tokio::select! {
            event = term.next() => match event {
                Event::Output(data) => {
                    if socket.send(Message::Binary(data)).await.is_err() {
                        return;
                    }
                }
                Event::Exit(code) => {
                    let _ = socket.send(text(serde_json::json!({ "exit": code }))).await;
                    let _ = socket.send(close("exit")).await;
                    return;
                }
                Event::Closed { reason, message } => {
                    let _ = socket.send(text(serde_json::json!({ "closed": reason, "message": message }))).await;
                    let _ = socket.send(close(reason.as_str())).await;
                    return;
                }
            },
            received = socket.recv() => {
                let failed = match received {
                    None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                    Some(Ok(Message::Binary(data))) => term.input(data.to_vec()).await.err(),
                    Some(Ok(Message::Text(t))) => match serde_json::from_str::<Control>(t.as_str()) {
                        Ok(Control::Resize(size)) => term.resize(size).await.err(),
                        Err(e) => {
                            let message = format!("a control message is {{\"resize\": {{\"cols\", \"rows\"}}}}: {e}");
                            if socket.send(text(serde_json::json!({ "error": message }))).await.is_err() {
                                return;
                            }
                            None
                        }
                    },
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => None,
                };
                // Said, and the terminal goes on: a size no terminal has is the client's to fix,
                // and a daemon that no longer takes input ends the terminal's output too, which
                // says how it ended.
                if let Some(e) = failed {
                    if socket.send(text(serde_json::json!({ "error": e.to_string() }))).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}
