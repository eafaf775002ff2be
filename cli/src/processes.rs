//! Work inside a sandbox: `hangar exec` (`POST .../exec/stream`), `ps`, `start`, `attach`
//! (`GET .../processes/{id}/stream`), `kill` and `watch` (`GET .../watch`).
use http::Method;
use serde_json::{json, Value};
use tokio::signal::unix::{signal, SignalKind};

use crate::{
    args::{AttachArgs, ExecArgs, ProcessArg, SandboxArg, StartArgs, WatchArgs},
    client::{on_close, path, with_query, Error, Next, SseEvent},
    render::{self, ago_of, cell, clean, s},
    Ctx,
};

/// The command line the relay runs (`bash -lc`): one argument as it is (a shell command line
/// the user quoted for us), several quoted word by word (each word stays one word, as typed).
pub fn command_line(words: &[String]) -> String {
    match words {
        [one] => one.clone(),
        _ => words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" "),
    }
}

/// A word for `sh`: as it is when it has nothing the shell reads specially, else single-quoted.
pub fn quote(w: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if !w.is_empty() && w.chars().all(plain) {
        return w.to_string();
    }
    format!("'{}'", w.replace('\'', r"'\''"))
}

pub fn exec_body(words: &[String], cwd: Option<&str>, timeout: Option<u64>) -> Value {
    let mut b = json!({ "command": command_line(words) });
    if let Some(c) = cwd {
        b["cwd"] = json!(c);
    }
    if let Some(t) = timeout {
        b["timeout"] = json!(t);
    }
    b
}

/// The exit code hangar ends with for a command's (or process's) `exit_code`, and what to say
/// on stderr when there was none to pass on (-1: killed, timed out, cut off): then 1.
pub fn exit_of(what: &str, result: &Value) -> (i32, Option<String>) {
    match result["exit_code"].as_i64() {
        Some(c @ 0..=255) => (c as i32, None),
        other => {
            let mut why = match other {
                Some(-1) | None => format!("the {what} ended without an exit code"),
                Some(c) => format!("the {what} exited {c}"),
            };
            for key in ["status", "closed", "error"] {
                if let Some(v) = result[key].as_str() {
                    why.push_str(&format!(" ({key}: {})", clean(v)));
                }
            }
            (1, Some(why))
        }
    }
}

pub async fn exec(ctx: &Ctx, a: ExecArgs) -> Result<i32, Error> {
    let body = exec_body(&a.command, a.cwd.as_deref(), a.timeout);
    let p = path(&["api", "sandboxes", &a.sandbox, "exec", "stream"]);
    // The relay kills a streamed command whose client goes away, so there is no reconnecting:
    // a broken stream is an error, whatever the command was doing.
    let mut stream = ctx.client.stream(Method::POST, &p, Some(&body), None).await?;
    while let Some(ev) = stream.next().await? {
        if ctx.json {
            render::json(&ev.to_json())?;
        }
        match ev.event.as_str() {
            "stdout" | "stderr" if !ctx.json => {
                let text = ev.json()?;
                let text = s(&text, "data");
                if ev.event == "stdout" {
                    render::out(text)?;
                } else {
                    render::err_out(text)?;
                }
            }
            "gap" if !ctx.json => {
                let g = ev.json()?;
                note!(
                    "hangar: {} bytes of {} were lost (this client fell behind)",
                    cell(&g["lost"]),
                    cell(&g["stream"])
                );
            }
            "result" => {
                let (code, why) = exit_of("command", &ev.json()?);
                if let Some(w) = why {
                    note!("hangar: {w}");
                }
                return Ok(code);
            }
            _ => {}
        }
    }
    Err(Error::Transport("the stream ended before the command's result".into()))
}

pub async fn ps(ctx: &Ctx, a: SandboxArg) -> Result<i32, Error> {
    let v = ctx.client.get(&path(&["api", "sandboxes", &a.sandbox, "processes"])).await?;
    ctx.print_as(&v, Some("processes"), |p| s(p, "process_id").to_string(), |v, _| ps_table(v, render::now()))
}

pub fn ps_table(v: &Value, now: f64) -> String {
    let rows: Vec<Vec<String>> = v["processes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|p| {
            let status = if p["state"] == "running" { "-".to_string() } else { cell(&p["status"]) };
            vec![
                clean(s(p, "process_id")),
                cell(&p["pid"]),
                render::state_cell(&p["state"]),
                status,
                ago_of(now, &p["started_at"]),
                render::clip(s(p, "command"), 60),
            ]
        })
        .collect();
    render::table(&["ID", "PID", "STATE", "STATUS", "STARTED", "COMMAND"], &rows)
}

pub async fn start(ctx: &Ctx, a: StartArgs) -> Result<i32, Error> {
    let mut body = json!({ "command": command_line(&a.command) });
    if let Some(c) = &a.cwd {
        body["cwd"] = json!(c);
    }
    let v = ctx.client.post(&path(&["api", "sandboxes", &a.sandbox, "processes"]), &body).await?;
    // The id alone, so that `ID=$(hangar start ...)` works.
    ctx.print(&v, |v| format!("{}\n", clean(s(v, "process_id"))))
}

pub async fn attach(ctx: &Ctx, a: AttachArgs) -> Result<i32, Error> {
    // Registered before the stream opens: from here on Ctrl-C detaches instead of killing us.
    let mut interrupt = signal(SignalKind::interrupt())?;
    let base = path(&["api", "sandboxes", &a.sandbox, "processes", &a.id, "stream"]);
    let p = match a.since {
        Some(n) => with_query(&base, &[("since", n.to_string())]),
        None => base,
    };
    let json = ctx.json;
    // Each output event's id is the byte offset after it: a reconnect resumes exactly there.
    let follow = ctx.client.follow(&p, None, |ev| attach_event(ev, json));
    tokio::select! {
        r = follow => r,
        _ = interrupt.recv() => {
            note!(
                "\nhangar: detached from {}; it keeps running (`hangar kill {} {}` stops it)",
                clean(&a.id), clean(&a.sandbox), clean(&a.id)
            );
            Ok(0)
        }
    }
}

fn attach_event(ev: &SseEvent, json: bool) -> Result<Next, Error> {
    if json {
        render::json(&ev.to_json())?;
    }
    match ev.event.as_str() {
        "output" if !json => {
            let d = ev.json()?;
            if d["stream"] == "stderr" {
                render::err_out(s(&d, "data"))?;
            } else {
                render::out(s(&d, "data"))?;
            }
        }
        "gap" if !json => {
            let g = ev.json()?;
            note!(
                "hangar: {} bytes of output were lost (bytes {} to {})",
                cell(&g["lost"]),
                cell(&g["from"]),
                cell(&g["to"])
            );
        }
        "lost" if !json => note!("hangar: {}", s(&ev.json()?, "message")),
        "end" => {
            let (code, why) = exit_of("process", &ev.json()?);
            if let Some(w) = why {
                note!("hangar: {w}");
            }
            return Ok(Next::Stop(code));
        }
        "close" => return on_close(ev),
        _ => {}
    }
    Ok(Next::Continue)
}

pub async fn kill(ctx: &Ctx, a: ProcessArg) -> Result<i32, Error> {
    ctx.client.delete(&path(&["api", "sandboxes", &a.sandbox, "processes", &a.id])).await?;
    if !ctx.json {
        render::line(&format!("stopping {} (SIGTERM to its group, SIGKILL 3 s later)", clean(&a.id)))?;
    }
    Ok(0)
}

pub async fn watch(ctx: &Ctx, a: WatchArgs) -> Result<i32, Error> {
    let mut q = vec![("path", a.path.clone())];
    if a.recursive {
        q.push(("recursive", "true".to_string()));
    }
    let p = with_query(&path(&["api", "sandboxes", &a.sandbox, "watch"]), &q);
    let mut stream = ctx.client.stream(Method::GET, &p, None, None).await?;
    // Said once the relay has the watch in place: a change from now on is seen.
    note!("hangar: watching {} in {} (Ctrl-C stops)", clean(&a.path), clean(&a.sandbox));
    while let Some(ev) = stream.next().await? {
        if ctx.json {
            render::json(&ev.to_json())?;
        }
        match ev.event.as_str() {
            "change" if !ctx.json => render::line(&change_line(&ev.json()?))?,
            "overflow" if !ctx.json => {
                let o = ev.json()?;
                note!("hangar: {} changes were lost: rescan the directory", cell(&o["dropped"]));
            }
            "close" => {
                return match on_close(&ev)? {
                    Next::Stop(c) => Ok(c),
                    // A watch cannot resume: a new one would not see what changed in between.
                    Next::Reopen(why) => Err(Error::Closed(format!("the watch ended: {why}"))),
                    Next::Continue => Err(Error::Closed("the watch ended".into())),
                };
            }
            _ => {}
        }
    }
    Err(Error::Transport("the relay ended the watch".into()))
}

/// `12:00:01  create  src/main.txt`
pub fn change_line(c: &Value) -> String {
    let at = c["ts"].as_f64().map(render::clock).unwrap_or_default();
    format!("{at}  {:<6}  {}", clean(s(c, "type")), clean(s(c, "name")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn one_argument_is_a_command_line_and_several_are_words() {
        assert_eq!(command_line(&words(&["for i in 1 2; do echo $i; done"])), "for i in 1 2; do echo $i; done");
        assert_eq!(command_line(&words(&["exit", "3"])), "exit 3");
        assert_eq!(command_line(&words(&["ls", "-la", "my dir"])), "ls -la 'my dir'");
        assert_eq!(command_line(&words(&["echo", "it's", "$HOME", ""])), r#"echo 'it'\''s' '$HOME' ''"#);
        assert_eq!(command_line(&words(&["git", "log", "--format=%h:%s"])), "git log --format=%h:%s");
    }

    #[test]
    fn the_exec_body() {
        assert_eq!(exec_body(&words(&["ls"]), None, None), json!({"command": "ls"}));
        assert_eq!(
            exec_body(&words(&["ls"]), Some("repo"), Some(5)),
            json!({"command": "ls", "cwd": "repo", "timeout": 5})
        );
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_of("command", &json!({"exit_code": 3})), (3, None));
        assert_eq!(exit_of("command", &json!({"exit_code": 0})), (0, None));
        let (code, why) = exit_of("command", &json!({"exit_code": -1, "closed": "lifetime", "error": "timed out"}));
        assert_eq!(code, 1);
        assert_eq!(
            why.as_deref(),
            Some("the command ended without an exit code (closed: lifetime) (error: timed out)")
        );
        let (code, why) = exit_of("process", &json!({"exit_code": -1, "status": "signal: killed"}));
        assert_eq!(
            (code, why.as_deref()),
            (1, Some("the process ended without an exit code (status: signal: killed)"))
        );
    }

    #[test]
    fn the_process_table() {
        let v = json!({"processes": [
            {"process_id": "p_1", "pid": 25, "state": "running", "started_at": 940.0, "command": "sleep 100"},
            {"process_id": "p_2", "pid": 26, "state": "exited", "status": "exit status 3", "exit_code": 3,
             "started_at": 400.0, "command": "false\nx"}]});
        assert_eq!(
            ps_table(&v, 1000.0),
            "ID   PID  STATE    STATUS         STARTED  COMMAND\n\
             p_1  25   running  -              1m ago   sleep 100\n\
             p_2  26   exited   exit status 3  10m ago  false x\n"
        );
    }

    #[test]
    fn a_change_is_one_line() {
        let l = change_line(&json!({"seq": 1, "ts": 1.0, "name": "src/a\nb", "type": "create"}));
        assert!(l.ends_with("  create  src/a b"), "{l}");
    }
}
