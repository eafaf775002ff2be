//! Background processes in a sandbox without a daemon: run detached (`setsid`) through the
//! provider's own exec, output in `~/.hangar/bg/<id>.out`, exit code in `<id>.exit`, and polled
//! (every 0.5 s while someone is attached; on demand otherwise). Input needs the daemon.
//!
//! Without an envd tag, ownership is the relay's own row: only the token that started a process
//! finds it. Nothing the sandbox writes decides anything: ids and pids in the scripts come from
//! the relay's store, the command is quoted, and what comes back is parsed as data.
use std::{sync::Arc, time::Duration};

use futures::Stream;

use super::{
    output::{Output, OutputStream},
    Backend, Items, ProcessState, ProcessView, Processes,
};
use crate::{
    auth::Caller,
    error::{Error, Result},
    events,
    providers::ExecOutput,
    sandboxes::run::Runner,
    store::{self, DetachedRow, SandboxRow, SandboxState},
    streams::Reason,
    text::{exit_status, sh_quote, Encoding, OffsetText},
};

/// Exited processes stay listed this long.
pub const RETENTION_SECONDS: i64 = 600;
/// How often an attached stream polls.
pub const POLL_ATTACHED: Duration = Duration::from_millis(500);
/// How often processes nobody is attached to are looked at (so an exit is noticed, and its
/// 10 minutes of retention start, without anyone asking).
pub const POLL_UNATTACHED: Duration = Duration::from_secs(5);
/// The most output one poll reads.
const READ_CHUNK: usize = 1024 * 1024;
/// A poll or a start is a short command; one that takes longer has gone wrong.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(30);
const DIR: &str = "\"$HOME/.hangar/bg\"";

/// What one look at a process says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Probe {
    running: bool,
    /// The exit code the wrapper wrote, if it did (a killed process writes none).
    code: Option<i32>,
    size: u64,
}

/// Prints `<running|exited> <code or -> <size>` for one process.
fn probe_script(d: &DetachedRow) -> String {
    format!(
        r#"d={DIR}; st=$(cut -d' ' -f3 /proc/{pid}/stat 2>/dev/null); if [ -n "$st" ] && [ "$st" != Z ]; then s=running; else s=exited; fi; c=$(cat "$d/{id}.exit" 2>/dev/null || echo -); z=$(stat -c %s "$d/{id}.out" 2>/dev/null || echo 0); echo "$s $c $z""#,
        pid = d.pid,
        id = d.id
    )
}

fn parse_probe(line: &str) -> Option<Probe> {
    let mut it = line.split_whitespace();
    let running = match it.next()? {
        "running" => true,
        "exited" => false,
        _ => return None,
    };
    let code = it.next()?.parse().ok();
    let size = it.next()?.parse().ok()?;
    Some(Probe { running, code, size })
}

/// A caller's detached processes in one sandbox without a daemon.
pub struct PolledProcesses<'a> {
    pub processes: &'a Processes,
    /// The sandbox, through its provider.
    pub runner: &'a Runner<'a>,
    pub caller: &'a Caller,
}

impl PolledProcesses<'_> {
    fn sandbox(&self) -> &SandboxRow {
        &self.runner.row
    }

    async fn run(&self, script: &str, cwd: Option<&str>) -> Result<ExecOutput> {
        let out = self.runner.fallback(script, cwd, &[], SCRIPT_TIMEOUT).await?;
        if out.timed_out {
            return Err(Error::daemon("the sandbox did not answer a background-process command in time"));
        }
        Ok(out)
    }

    async fn rows(&self) -> Result<Vec<DetachedRow>> {
        Ok(self
            .processes
            .store
            .detached(&self.sandbox().id, &self.caller.token_id, store::now() - RETENTION_SECONDS)
            .await?)
    }

    async fn row(&self, id: &str) -> Result<DetachedRow> {
        self.rows().await?.into_iter().find(|r| r.id == id).ok_or_else(|| super::not_yours(id, &self.sandbox().name))
    }

    fn view(&self, d: &DetachedRow, p: &Probe) -> ProcessView {
        let status = (!p.running).then(|| exit_status(p.code));
        ProcessView {
            process_id: d.id.clone(),
            sandbox: self.sandbox().name.clone(),
            pid: u32::try_from(d.pid).unwrap_or(0),
            command: d.command.clone(),
            state: if p.running { ProcessState::Running } else { ProcessState::Exited },
            exit_code: (!p.running).then(|| p.code.unwrap_or(-1)),
            status,
            started_at: Some(d.started_at as f64),
            ended_at: d.ended_at.map(|t| t as f64),
            output_bytes: p.size,
            adopted: false,
            polled: true,
            earlier_output: None,
        }
    }

    /// Looks at one process and, with `since`, reads its output from there (at most a chunk).
    async fn poll(&self, d: &DetachedRow, since: Option<u64>) -> Result<(Probe, Vec<u8>)> {
        let read = since
            .map(|s| format!("; tail -c +{} {DIR}/{}.out 2>/dev/null | head -c {READ_CHUNK}", s + 1, d.id))
            .unwrap_or_default();
        let script = format!("{}{read}", probe_script(d));
        let out = self.run(&script, None).await?;
        let nl = out.stdout.iter().position(|b| *b == b'\n').unwrap_or(out.stdout.len());
        let probe = parse_probe(&String::from_utf8_lossy(&out.stdout[..nl]))
            .ok_or_else(|| Error::daemon("the sandbox answered a process probe with nonsense"))?;
        let data = out.stdout.get(nl + 1..).unwrap_or_default().to_vec();
        if !probe.running && d.ended_at.is_none() {
            self.ended(d).await?;
        }
        Ok((probe, data))
    }

    /// Records the end the first time it is seen.
    async fn ended(&self, d: &DetachedRow) -> Result<()> {
        self.processes.store.end_detached(&d.id, store::now()).await?;
        events::DetachedEnded { sandbox: &self.sandbox().name, process_id: &d.id }.emit();
        Ok(())
    }
}

#[tonic::async_trait]
impl Backend for PolledProcesses<'_> {
    async fn start(&self, id: String, command: &str, cwd: Option<String>) -> Result<ProcessView> {
        let cwd = cwd.as_deref();
        // setsid: its own session and process group, so the kill reaches its children; the
        // wrapper records the exit code. Only the setsid is put in the background (not an `&&`
        // list, whose subshell would hold the exec's output open until the process ends).
        let script = format!(
            r#"d={DIR}; mkdir -p "$d" || exit 1; setsid bash -c 'bash -lc "$1" > "$2/$3.out" 2>&1 < /dev/null; echo $? > "$2/$3.exit"' hangar-bg {cmd} "$d" {id} > /dev/null 2>&1 < /dev/null & echo $!"#,
            cmd = sh_quote(command),
        );
        let out = self.run(&script, cwd).await?;
        if out.exit_code != 0 {
            return Err(Error::invalid(format!(
                "could not start the process: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let pid: i64 = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .filter(|p| *p > 1)
            .ok_or_else(|| Error::daemon("the sandbox did not report the process's pid"))?;
        let row = DetachedRow {
            id,
            sandbox_id: self.sandbox().id.clone(),
            token_id: self.caller.token_id.clone(),
            pid,
            command: command.to_string(),
            started_at: store::now(),
            ended_at: None,
        };
        self.processes.store.insert_detached(&row).await?;
        Ok(self.view(&row, &Probe { running: true, code: None, size: 0 }))
    }

    async fn list(&self) -> Result<Vec<ProcessView>> {
        let rows = self.rows().await?;
        if rows.is_empty() {
            return Ok(vec![]);
        }
        let script =
            rows.iter().map(|d| format!("echo -n '{} '; {}", d.id, probe_script(d))).collect::<Vec<_>>().join("; ");
        let out = self.run(&script, None).await?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut views = Vec::new();
        for d in &rows {
            let probe = text
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{} ", d.id)).and_then(parse_probe))
                .unwrap_or(Probe { running: false, code: None, size: 0 });
            if !probe.running && d.ended_at.is_none() {
                self.ended(d).await?;
            }
            views.push(self.view(d, &probe));
        }
        Ok(views)
    }

    async fn get(&self, id: &str) -> Result<ProcessView> {
        let d = self.row(id).await?;
        let (p, _) = self.poll(&d, None).await?;
        Ok(self.view(&d, &p))
    }

    /// SIGTERM to the process group, SIGKILL 3 s later if anyone is left.
    async fn kill(&self, id: &str) -> Result<()> {
        let d = self.row(id).await?;
        let script = format!(
            "kill -TERM -- -{pid} 2>/dev/null; (sleep 3; kill -KILL -- -{pid} 2>/dev/null) > /dev/null 2>&1 < /dev/null &",
            pid = d.pid
        );
        self.run(&script, None).await?;
        Ok(())
    }

    async fn input(&self, id: &str, _: Vec<u8>, _: bool) -> Result<()> {
        // Ownership first: another token's id is not found.
        self.get(id).await?;
        Err(Error::NeedsDaemon { sandbox: self.sandbox().name.clone(), what: "input to a background process" })
    }

    async fn follow(
        &self,
        processes: &Arc<Processes>,
        id: &str,
        since: Option<u64>,
        encoding: Encoding,
    ) -> Result<Items> {
        self.get(id).await?;
        let (sandbox, caller) = (self.sandbox().clone(), self.caller.clone());
        Ok(Box::pin(output(processes.clone(), sandbox, caller, id.to_string(), since, encoding)))
    }
}

/// Every `POLL_UNATTACHED`, looks at the detached processes not yet seen to end.
pub async fn watch_unattached(processes: std::sync::Arc<Processes>) {
    let mut tick = tokio::time::interval(POLL_UNATTACHED);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Ok(owners) = processes.store.detached_owners_running().await else { continue };
        for (sandbox_id, token_id) in owners {
            let Ok(Some(sandbox)) = processes.store.sandbox(&sandbox_id).await else { continue };
            if sandbox.state != SandboxState::Running {
                continue;
            }
            let caller = Caller::of_token(&token_id);
            let runner = Runner::provider(&processes.sandboxes, sandbox);
            // `list` records the ends it sees.
            if let Err(e) = (PolledProcesses { processes: &processes, runner: &runner, caller: &caller }).list().await {
                let sandbox = &runner.row;
                events::PollFailed { sandbox: &sandbox.name, error: &e.to_string() }.emit();
            }
        }
    }
}

/// Output from `since` as it is written, polled every 0.5 s, then the end. The first poll
/// says where output is (`Start`) and reads from `since` at once.
pub fn output(
    processes: std::sync::Arc<Processes>,
    sandbox: SandboxRow,
    caller: Caller,
    id: String,
    since: Option<u64>,
    encoding: Encoding,
) -> impl Stream<Item = Output> + Send + 'static {
    async_stream::stream! {
        let runner = Runner::provider(&processes.sandboxes, sandbox);
        let at = PolledProcesses { processes: &processes, runner: &runner, caller: &caller };
        let broken = |e: Error| Output::Closed { reason: Reason::Error, message: Some(e.to_string()) };
        let d = match at.row(&id).await {
            Ok(d) => d,
            Err(e) => { yield broken(e); return; }
        };
        let mut next = since.unwrap_or(0);
        let mut text = OffsetText::encoded(next, encoding);
        let mut first = true;
        loop {
            let (p, data) = match at.poll(&d, Some(next)).await {
                Ok(x) => x,
                Err(e) => { yield broken(e); return; }
            };
            if first {
                first = false;
                yield Output::Start { oldest: 0, next: p.size.max(next) };
            }
            let got = data.len() as u64;
            if let Some((data, n)) = text.push(next, &data) {
                yield Output::Data { data, stream: OutputStream::Stdout, next: n };
            }
            next += got;
            if !p.running && got == 0 {
                if let Some((data, n)) = text.flush() {
                    yield Output::Data { data, stream: OutputStream::Stdout, next: n };
                }
                yield Output::End { exit_code: p.code.unwrap_or(-1), status: exit_status(p.code), total: next };
                return;
            }
            if got < READ_CHUNK as u64 {
                tokio::time::sleep(POLL_ATTACHED).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_keeps_a_command_one_word() {
        assert_eq!(sh_quote("echo 'hi'; rm -rf /"), r#"'echo '\''hi'\''; rm -rf /'"#);
    }

    #[test]
    fn probes_parse_or_refuse() {
        assert_eq!(parse_probe("running - 12"), Some(Probe { running: true, code: None, size: 12 }));
        assert_eq!(parse_probe("exited 3 40"), Some(Probe { running: false, code: Some(3), size: 40 }));
        assert_eq!(parse_probe("garbage from the sandbox"), None);
    }
}
