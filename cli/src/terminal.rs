//! `hangar exec -it SANDBOX [-- CMD ARGS]`: a terminal in the sandbox over the relay's WebSocket
//! (`GET /api/sandboxes/{ref}/terminal`). The local terminal is put in raw mode and restored on
//! every way out (the guard's drop: a normal end, an error, SIGTERM/SIGHUP/SIGQUIT, a panic);
//! its size is sent at the start and on every SIGWINCH; stdin goes to the socket, the socket's
//! bytes to stdout; the exit code is the remote program's.
use std::io::IsTerminal as _;

use futures::{SinkExt as _, StreamExt as _};
use serde_json::Value;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    signal::unix::{signal, SignalKind},
};
use tokio_tungstenite::tungstenite::{self, Message};

use crate::{
    args::ExecArgs,
    client::{path, with_query, Error},
    Ctx,
};

/// The exit code of a usage error (clap's, docker's for `-t` without a terminal).
const USAGE: i32 = 2;

/// The local terminal in raw mode until dropped, when its settings are put back as they were.
struct RawMode {
    saved: libc::termios,
}

impl RawMode {
    fn enter() -> Result<RawMode, Error> {
        // SAFETY: termios is plain data; tcgetattr fills it for fd 0, which is a terminal.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        if unsafe { libc::tcgetattr(0, &mut saved) } != 0 {
            return Err(Error::Io(std::io::Error::last_os_error()));
        }
        let mut raw = saved;
        // SAFETY: cfmakeraw edits the struct it is given.
        unsafe { libc::cfmakeraw(&mut raw) };
        if unsafe { libc::tcsetattr(0, libc::TCSANOW, &raw) } != 0 {
            return Err(Error::Io(std::io::Error::last_os_error()));
        }
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: puts back the settings read from the same descriptor.
        unsafe { libc::tcsetattr(0, libc::TCSANOW, &self.saved) };
    }
}

/// The local terminal's size (columns, rows), if stdin or stdout is one that says.
fn window_size() -> Option<(u16, u16)> {
    for fd in [0, 1] {
        // SAFETY: TIOCGWINSZ fills a winsize.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        if unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_col > 0 && ws.ws_row > 0 {
            return Some((ws.ws_col, ws.ws_row));
        }
    }
    None
}

/// The program a terminal runs: nothing (a login shell); one argument is a shell command line,
/// as `hangar exec` takes it; several are the program and its arguments.
fn argv(command: &[String]) -> Vec<String> {
    match command {
        [line] => vec!["bash".into(), "-lc".into(), line.clone()],
        words => words.to_vec(),
    }
}

/// The relay's JSON error from a refused upgrade, else its status.
fn refused(response: &tungstenite::http::Response<Option<Vec<u8>>>) -> Error {
    let status = response.status().as_u16();
    let body: Option<Value> = response.body().as_deref().and_then(|b| serde_json::from_slice(b).ok());
    match body.as_ref().map(|b| &b["error"]) {
        Some(e) if e["message"].is_string() => Error::Api {
            status,
            code: e["code"].as_str().unwrap_or("unknown").to_string(),
            message: e["message"].as_str().unwrap_or_default().to_string(),
        },
        _ => Error::Status { status, detail: String::new() },
    }
}

pub async fn exec(ctx: &Ctx, a: ExecArgs) -> Result<i32, Error> {
    if a.interactive && !a.tty {
        note!("hangar: -i needs -t (a terminal): `hangar exec` without -t runs a command with no input");
        return Ok(USAGE);
    }
    if !std::io::stdin().is_terminal() {
        note!("hangar: -t needs a terminal on stdin, and the input is not a terminal (leave out -t to run a command)");
        return Ok(USAGE);
    }
    if a.cwd.is_some() || a.timeout.is_some() {
        note!("hangar: --cwd and --timeout are for a command; a terminal starts in the sandbox's working directory");
        return Ok(USAGE);
    }
    let (cols, rows) = window_size().unwrap_or((80, 24));
    let mut params = vec![("cols", cols.to_string()), ("rows", rows.to_string())];
    if !a.command.is_empty() {
        params.push(("argv", Value::from(argv(&a.command)).to_string()));
    }
    let p = with_query(&path(&["api", "sandboxes", &a.sandbox, "terminal"]), &params);
    let (req, addr) = ctx.client.websocket(&p)?;
    let url = ctx.client.base().to_string();
    let tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| Error::Connect { url: url.clone(), reason: e.to_string() })?;
    let _ = tcp.set_nodelay(true);
    let (socket, _) = tokio_tungstenite::client_async(req, tcp).await.map_err(|e| match e {
        tungstenite::Error::Http(r) => refused(&r),
        e => Error::Transport(e.to_string()),
    })?;
    let raw = RawMode::enter()?;
    let ended = run(socket, a.interactive).await;
    drop(raw);
    match ended? {
        End::Exit(code) => Ok(code),
        End::Closed(why) => Err(Error::Closed(format!("the terminal was closed: {why}"))),
        End::Signal(name) => {
            note!("hangar: {name}: the terminal was closed");
            Ok(1)
        }
    }
}

/// How a terminal ended.
enum End {
    Exit(i32),
    Closed(String),
    Signal(&'static str),
}

type Socket = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

fn resize(cols: u16, rows: u16) -> Message {
    Message::Text(serde_json::json!({ "resize": { "cols": cols, "rows": rows } }).to_string().into())
}

async fn run(socket: Socket, interactive: bool) -> Result<End, Error> {
    let broke = |e: tungstenite::Error| Error::Transport(e.to_string());
    let (mut tx, mut rx) = socket.split();
    let mut winch = signal(SignalKind::window_change())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut quit = signal(SignalKind::quit())?;
    let mut stdin = tokio::io::stdin();
    let mut stdout = tokio::io::stdout();
    let mut buf = vec![0u8; 16 * 1024];
    let mut stdin_open = interactive;
    loop {
        tokio::select! {
            m = rx.next() => match m {
                Some(Ok(Message::Binary(b))) => {
                    stdout.write_all(&b).await?;
                    stdout.flush().await?;
                }
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                    if let Some(code) = v["exit"].as_i64() {
                        return Ok(End::Exit(i32::try_from(code).unwrap_or(1)));
                    }
                    if let Some(why) = v["closed"].as_str() {
                        let message = v["message"].as_str().map(|m| format!(" ({m})")).unwrap_or_default();
                        return Ok(End::Closed(format!("{why}{message}")));
                    }
                    // `{"error"}`: a resize or input the relay refused; the terminal goes on.
                }
                Some(Ok(Message::Close(_))) | None => {
                    return Ok(End::Closed("the relay closed it without an exit code".into()));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(broke(e)),
            },
            n = stdin.read(&mut buf), if stdin_open => match n? {
                // End of input: the remote terminal is told nothing (its own Ctrl-D does that).
                0 => stdin_open = false,
                n => tx.send(Message::Binary(buf[..n].to_vec().into())).await.map_err(broke)?,
            },
            _ = winch.recv() => {
                if let Some((cols, rows)) = window_size() {
                    tx.send(resize(cols, rows)).await.map_err(broke)?;
                }
            }
            _ = term.recv() => return Ok(End::Signal("SIGTERM")),
            _ = hup.recv() => return Ok(End::Signal("SIGHUP")),
            _ = quit.recv() => return Ok(End::Signal("SIGQUIT")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_argument_is_a_command_line_and_several_are_words() {
        assert_eq!(argv(&["ls | wc -l".into()]), ["bash", "-lc", "ls | wc -l"]);
        assert_eq!(argv(&["ls".into(), "-la".into()]), ["ls", "-la"]);
    }
}
