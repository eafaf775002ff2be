//! The turn supervisor inside the sandbox, and the session's scripts there (`Shell`: the
//! sandbox's runner, `sandboxes::run`, with where the turn's files go).
//!
//! The supervisor is a bash script hangar writes: it starts the harness with the prompt file on
//! its stdin and its merged stdout and stderr going to `<turn>.log` (through `hangar-envd
//! turn-log`, which cuts lines over 1 MiB and keeps the log to `HANGAR_TURN_LOG_MAX_BYTES`), touches `<turn>.hb` every
//! 10 s, forwards SIGTERM, and writes `<turn>.exit.json` (`{code, signal, ended_at}`) when the
//! harness ends, printing the same line on its own stdout.
//!
//! **The uid split.** Where the daemon can act as root and its default user is not root, the
//! supervisor runs as root in `/var/lib/hangar/runs` (root's, readable by all) and the harness as
//! the sandbox's user with `no_new_privs` (`setpriv`); its output reaches the log through a pipe
//! only root can open, so the agent can neither forge nor replace what hangar reads. The agent's
//! `~/.hangar/runs/<turn>.log` and `.exit.json` are links to those files; hangar never reads them.
//! Elsewhere (no daemon, a daemon that is not root) every file is in the agent's
//! `~/.hangar/runs` and the session says `split: false`.
use std::{collections::HashMap, ops::Deref, time::Duration};

use base64::{engine::general_purpose::STANDARD as B64, Engine as _};
use hangar_proto::{
    ext::{attach_event, AttachRequest, SignalRequest},
    process::{process_event, process_selector, ProcessSelector},
};
use tonic::Code;

use super::Sessions;
use crate::{
    envd::Envd,
    error::{daemon_error, Error, Result},
    providers::{ExecOutput, EXEC_OUTPUT_BYTES},
    sandboxes::run::{self, Program, Runner, User},
    store::SandboxRow,
    text::sh_quote,
};

/// Where hangar keeps what it trusts in a split sandbox: a directory per sandbox below it,
/// root's and readable by the sandbox's group alone (local sandboxes share the host's).
pub const SPLIT_DIR: &str = "/var/lib/hangar/runs";
/// The agent's own run directory (relative to its home).
pub const AGENT_DIR: &str = ".hangar/runs";
/// The agent's inbox requests (relative to its home).
pub const INBOX_DIR: &str = ".hangar/inbox";
/// Answers to an agent without the split (relative to its home).
pub const ANSWERS_DIR: &str = ".hangar/answers";
/// Makes git ignore the agent's `~/.hangar` (a `.gitignore` of `*` in it ignores itself too),
/// for a sandbox whose home is a repository's top (E2B's template makes `/home/user` both the
/// home and the working directory). `runs`: the agent's run directory, as a shell word. Run as
/// the agent; no single quote, as it goes inside one. Not writing it fails nothing.
fn ignore_hangar_dir(runs: &str) -> String {
    format!("{{ [ -e {runs}/../.gitignore ] || printf \"*\\n\" >{runs}/../.gitignore; }} 2>/dev/null || :")
}
/// Prints the sandbox's `hangar-envd`: the daemon that runs this script (its parent), else the
/// one on `PATH`.
const FIND_AGENT_BIN: &str = "b=$(readlink /proc/$PPID/exe 2>/dev/null); \
    case \"$b\" in */hangar-envd) ;; *) b=$(command -v hangar-envd 2>/dev/null);; esac; printf '%s\\n' \"$b\"";
/// A script the relay runs (install, probe, read) that takes longer has gone wrong.
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(30);

const SUPERVISOR: &str = r#"#!/bin/bash
# hangar's turn supervisor: written by the relay for each turn; see relay/src/sessions/supervisor.rs.
# Arguments: TURN HANGAR_DIR UID GID USER HOME CWD LOG_MAX WRITER -- ARGV...
# (UID "-": run the harness as is; WRITER "-": no hangar-envd to write the log with)
set -u
turn=$1 hdir=$2 as=$3 gid=$4 name=$5 home=$6 cwd=$7 logmax=$8 wbin=$9
shift 10
log=$hdir/$turn.log
fifo=$hdir/$turn.pipe
# The turn's files are the agent's alone, or root's and the sandbox's group's (docs/sessions.md).
if [ "$as" = - ]; then umask 077; else umask 027; fi
# Split: root's files the agent reads (its log and exit file, by their links) are its group's.
grp() { [ "$gid" = - ] || chown ":$gid" "$@"; }
# The log appears with its group already: the relay follows it as the agent from the moment
# it exists, and a log made in place would be root's alone until its chown (EACCES, polled).
# A log there already (a supervisor started again) is kept.
if [ ! -e "$log" ]; then : >"$log.$$" && grp "$log.$$" && mv -f "$log.$$" "$log"; fi
start=$(sed 's/.*) //' /proc/$$/stat | cut -d' ' -f20)
printf '%s %s\n' "$$" "$start" >"$hdir/$turn.pid"
beat=$hdir/$turn.beat
rm -f "$fifo" "$beat"
mkfifo -m 600 "$fifo" "$beat"
# Helpers keep none of the supervisor's own output open: the daemon reports its end once that
# closes, which must be when the supervisor exits.
# The log's writer reads to the end whatever it keeps, so the harness never blocks on the pipe.
# The sandbox's hangar-envd (`turn-log`) cuts lines over 1 MiB and keeps the log to LOG_MAX,
# saying both in the log; without one, coreutils keep LOG_MAX (with the same mark) and the relay
# reads past long lines itself.
if [ "$wbin" != - ] && "$wbin" turn-log --help >/dev/null 2>&1; then
  "$wbin" turn-log --max-bytes "$logmax" <"$fifo" >>"$log" 2>/dev/null &
else
  { head -c "$logmax"; [ "$(stat -c %s "$log")" -lt "$logmax" ] || printf '\036hangar:log_full %s\n' "$logmax"; cat >/dev/null; } <"$fifo" >>"$log" 2>/dev/null &
fi
writer=$!
# The heartbeat forks nothing: `: >` sets the file's mtime, and `read -t` on a pipe only it holds
# open waits (a TERM ends the wait at once); `touch` and `sleep` were two processes per beat, 100
# a second at 500 turns. Should the pipe not open, `sleep` it is.
( trap 'exit 0' TERM
  if [ -p "$beat" ] && exec {z}<>"$beat"; then pause() { read -r -t 10 -u "$z" _; }; else pause() { sleep 10; }; fi
  while :; do : >"$hdir/$turn.hb"; pause; done ) >/dev/null 2>&1 </dev/null &
hb=$!
child=
term() { [ -n "$child" ] && kill -TERM "$child" 2>/dev/null; }
trap term TERM INT HUP
# An agent working in its home (E2B's /home/user is both its home and the working directory)
# gets ~/.hangar/home as HOME, which git ignores (install's .gitignore): its CLI's state stays
# out of a repository there, and a project's own .claude/ is not the user's.
ahome=$home
[ "$ahome" = - ] && ahome=${HOME:-}
case $cwd in "$ahome" | "$ahome/") ahome=$ahome/.hangar/home ;; *) ahome= ;; esac
if [ "$as" = - ]; then
  ( cd "$cwd" && if [ -n "$ahome" ]; then mkdir -p "$ahome" && export HOME="$ahome"; fi && exec "$@" ) \
    <"$hdir/$turn.prompt" >"$fifo" 2>&1 &
else
  setpriv --reuid="$as" --regid="$gid" --init-groups --no-new-privs -- env HOME="${ahome:-$home}" USER="$name" LOGNAME="$name" \
    bash -c 'mkdir -p "$HOME" 2>/dev/null; cd "$1" && shift && exec "$@"' hangar-turn "$cwd" "$@" <"$hdir/$turn.prompt" >"$fifo" 2>&1 &
fi
child=$!
printf '%s\n' "$child" >>"$hdir/$turn.pid"
while :; do
  wait "$child"
  code=$?
  kill -0 "$child" 2>/dev/null || break
done
kill "$hb" 2>/dev/null
for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
  kill -0 "$writer" 2>/dev/null || break
  sleep 0.1
done
signal=null
if [ "$code" -gt 128 ] && name=$(kill -l $((code - 128)) 2>/dev/null); then signal="\"$name\""; fi
line=$(printf '{"code":%s,"signal":%s,"ended_at":%s}' "$code" "$signal" "$(date +%s.%N)")
printf '%s\n' "$line" >"$hdir/$turn.exit.json.tmp" && grp "$hdir/$turn.exit.json.tmp" && mv -f "$hdir/$turn.exit.json.tmp" "$hdir/$turn.exit.json"
rm -f "$fifo" "$beat"
printf '%s\n' "$line"
exit "$code"
"#;

/// Each sandbox's place as its daemon said it, by the connection it said it on.
#[derive(Default)]
pub struct Places {
    places: std::sync::Mutex<HashMap<String, (Envd, Place)>>,
}

impl Places {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Envd, Place)>> {
        self.places.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, sandbox: &str, envd: &Envd) -> Option<Place> {
        self.lock().get(sandbox).filter(|(e, _)| e.same_connection(envd)).map(|(_, p)| p.clone())
    }

    fn put(&self, sandbox: &str, envd: &Envd, place: Place) {
        self.lock().insert(sandbox.to_string(), (envd.clone(), place));
    }

    /// Forgets a sandbox's (it is gone).
    pub fn forget(&self, sandbox: &str) {
        self.lock().remove(sandbox);
    }
}

/// Where a turn's files are and who runs the harness, decided once per turn at its start.
#[derive(Debug, Clone, PartialEq)]
pub struct Place {
    /// The uid split holds.
    pub split: bool,
    /// The directory of the files hangar reads.
    pub dir: String,
    /// The sandbox's user, whom a split supervisor drops to for the harness.
    pub user: Option<AgentUser>,
    /// The agent's home directory.
    pub home: String,
    /// The `hangar-envd` binary in the sandbox, for the agent-side commands (`question`,
    /// `progress`, `approve`). Where the split holds, only a binary root owns and only root can
    /// change: the approval hook must not be a program the agent wrote.
    pub agent_bin: Option<String>,
}

/// The daemon's default user: who the agent is.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentUser {
    pub uid: u32,
    pub gid: u32,
    pub name: String,
    pub home: String,
}

/// Reads `id -u`, `id -g`, `id -un` and `$HOME`, one a line.
fn parse_user(out: &[u8]) -> Option<AgentUser> {
    let text = String::from_utf8_lossy(out);
    let mut lines = text.lines().map(str::trim);
    let uid = lines.next()?.parse().ok()?;
    let gid = lines.next()?.parse().ok()?;
    let name = lines.next().filter(|n| !n.is_empty() && !n.contains([' ', '/']))?.to_string();
    let home = lines.next().filter(|h| h.starts_with('/')).unwrap_or("/tmp").trim_end_matches('/').to_string();
    Some(AgentUser { uid, gid, name, home: if home.is_empty() { "/".into() } else { home } })
}

impl Place {
    pub fn log(&self, turn: &str) -> String {
        format!("{}/{turn}.log", self.dir)
    }

    /// The agent's inbox: a directory per turn below it (`inbox`), which the relay watches.
    pub fn inbox_root(&self) -> String {
        format!("{}/{INBOX_DIR}", self.home.trim_end_matches('/'))
    }

    /// Where the turn's agent writes its requests: a directory of the turn's own. The relay takes
    /// a request as the turn's whose directory holds it, never as what the file names, so a
    /// request names only what its writer could write.
    pub fn inbox(&self, turn: &str) -> String {
        format!("{}/{turn}", self.inbox_root())
    }

    /// Where the relay writes the turn's answers: beside the turn's files, which the agent cannot
    /// write where the split holds (elsewhere, in the agent's own directory); a directory per
    /// turn, named only in that turn's environment.
    pub fn answers(&self, turn: &str) -> String {
        if self.split {
            format!("{}/answers/{turn}", self.dir)
        } else {
            format!("{}/{ANSWERS_DIR}/{turn}", self.home.trim_end_matches('/'))
        }
    }

    /// The Claude Code settings file of a turn with an approval policy.
    pub fn settings(&self, turn: &str) -> String {
        format!("{}/{turn}.settings.json", self.dir)
    }
}

/// A path the sandbox reported for its `hangar-envd`, if it is one: absolute, printable, and
/// (`root_owned`) owned by root and writable by no one else, as `stat -c '%u %a'` said.
fn agent_bin(path: &str, stat: Option<&str>) -> Option<String> {
    let path = path.trim();
    let ok_path = path.starts_with('/') && path.len() < 4096 && !path.chars().any(char::is_control);
    let ok_owner = stat.is_none_or(|st| {
        let mut it = st.split_whitespace();
        let (uid, mode) = (it.next(), it.next().and_then(|m| u32::from_str_radix(m, 8).ok()));
        uid == Some("0") && mode.is_some_and(|m| m & 0o022 == 0)
    });
    (ok_path && ok_owner).then(|| path.to_string())
}

/// A sandbox a session's scripts run in: its runner (`sandboxes::run`, which it derefs to), and
/// where the sessions keep the turn's files.
pub struct Shell<'a> {
    runner: Runner<'a>,
    sessions: &'a Sessions,
}

impl<'a> Deref for Shell<'a> {
    type Target = Runner<'a>;

    fn deref(&self) -> &Runner<'a> {
        &self.runner
    }
}

impl<'a> Shell<'a> {
    pub async fn open(sessions: &'a Sessions, row: SandboxRow) -> Result<Shell<'a>> {
        Ok(Shell { runner: Runner::open(&sessions.sandboxes, row).await?, sessions })
    }

    /// Decides where the turn's files go: split where the daemon is root and its default user
    /// is not. Learnt once per connection to a daemon (two scripts, a tenth of a turn's start):
    /// the same daemon process answers the same, and a restarted one is a new connection.
    pub async fn place(&self) -> Result<Place> {
        let Some(envd) = &self.envd else { return self.learn_place().await };
        if let Some(place) = self.sessions.places.get(&self.row.id, envd) {
            return Ok(place);
        }
        let place = self.learn_place().await?;
        self.sessions.places.put(&self.row.id, envd, place.clone());
        Ok(place)
    }

    async fn learn_place(&self) -> Result<Place> {
        let script = format!("id -u && id -g && id -un && printf '%s\\n' \"$HOME\"\n{FIND_AGENT_BIN}");
        let out = self.script(User::Agent, &script, SCRIPT_TIMEOUT).await?;
        let user = match parse_user(&out.stdout) {
            Some(u) if out.exit_code == 0 => u,
            _ => return Err(script_failed("learning the sandbox's user", &out)),
        };
        let user_bin = String::from_utf8_lossy(&out.stdout).lines().nth(4).and_then(|b| agent_bin(b, None));
        let root = match &self.envd {
            Some(_) if user.uid != 0 => {
                let script = format!(
                    "id -u\n{FIND_AGENT_BIN} | {{ read -r b; printf '%s\\n' \"$b\"; stat -c '%u %a' \"$b\"; }}"
                );
                let r = self.script(User::Root, &script, SCRIPT_TIMEOUT).await?;
                // A slow answer is no answer: taken for "not root", it would give up the split.
                if r.timed_out {
                    return Err(script_failed("asking the daemon for root", &r));
                }
                let text = String::from_utf8_lossy(&r.stdout).into_owned();
                let mut lines = text.lines();
                match lines.next() {
                    Some("0") => Some(lines.next().and_then(|b| agent_bin(b, Some(lines.next().unwrap_or(""))))),
                    _ => None,
                }
            }
            _ => None,
        };
        let home = user.home.clone();
        Ok(match root {
            Some(bin) => Place {
                split: true,
                dir: format!("{SPLIT_DIR}/{}", self.row.id),
                user: Some(user),
                home,
                agent_bin: bin,
            },
            None => Place {
                split: false,
                dir: format!("{}/{AGENT_DIR}", home.trim_end_matches('/')),
                user: None,
                home,
                agent_bin: user_bin,
            },
        })
    }

    /// Writes the supervisor, the prompt file and (for a turn with an approval policy) the
    /// harness's settings file, makes the answers' directory (and, split, the agent's inbox and
    /// links to the log and exit file). Repeating it is harmless.
    pub async fn install(&self, place: &Place, turn: &str, prompt: &str, settings: Option<&str>) -> Result<()> {
        // Split: the sandbox's directory and the turn's answers are root's, readable by the
        // sandbox's group alone: what root writes there that the agent reads is given to the group
        // (0640; a setgid directory would not do where the daemon lacks CAP_FSETID, as in Docker).
        // Otherwise everything is the agent's alone (0600, 0700).
        let (umask, access) = match (&place.user, place.split) {
            (Some(u), true) => (
                "027",
                format!(
                    "(umask 022 && mkdir -p {top})\nchmod 711 {top}\nmkdir -p \"$d\" \"$d/answers\" {answers}\n\
                     chown 0:{gid} \"$d\" \"$d/answers\" {answers}\nchmod 750 \"$d\" \"$d/answers\" {answers}\n",
                    top = sh_quote(SPLIT_DIR),
                    answers = sh_quote(&place.answers(turn)),
                    gid = u.gid
                ),
            ),
            _ => (
                "077",
                format!(
                    "mkdir -p \"$d\" {answers}\nmkdir -p -m 700 {inbox}\n{ignore}\n",
                    answers = sh_quote(&place.answers(turn)),
                    inbox = sh_quote(&place.inbox(turn)),
                    ignore = ignore_hangar_dir("\"$d\"")
                ),
            ),
        };
        let mut script = format!(
            "set -e\numask {umask}\nd={dir}\n{access}\
             printf %s {sup} | base64 -d >\"$d/.supervisor.sh.$$\"\nmv -f \"$d/.supervisor.sh.$$\" \"$d/supervisor.sh\"\n\
             printf %s {prompt} | base64 -d >\"$d/{turn}.prompt\"\n",
            dir = sh_quote(&place.dir),
            sup = sh_quote(&B64.encode(SUPERVISOR)),
            prompt = sh_quote(&B64.encode(prompt)),
        );
        if let Some(settings) = settings {
            script.push_str(&format!(
                "printf %s {} | base64 -d >\"$d/{turn}.settings.json\"\nchown \":$(stat -c %g \"$d\")\" \"$d/{turn}.settings.json\"\n",
                sh_quote(&B64.encode(settings))
            ));
        }
        if let (true, Some(u)) = (place.split, &place.user) {
            // The links are made as the agent, in its own directory: root never writes where
            // the agent can.
            script.push_str(&format!(
                "setpriv --reuid={uid} --regid={gid} --init-groups --no-new-privs -- bash -c \
                 'umask 077 && mkdir -p \"$1\" \"$4\" && ln -sfn \"$2/$3.log\" \"$1/$3.log\" && ln -sfn \"$2/$3.exit.json\" \"$1/$3.exit.json\" && {{ {ignore}; }}' \
                 - {a} \"$d\" {turn} {inbox}\n",
                uid = u.uid,
                gid = u.gid,
                a = sh_quote(&format!("{}/{AGENT_DIR}", u.home)),
                inbox = sh_quote(&place.inbox(turn)),
                ignore = ignore_hangar_dir("\"$1\""),
            ));
        }
        let out = self.script(User::root_if(place.split), &script, SCRIPT_TIMEOUT).await?;
        if out.exit_code != 0 {
            return Err(script_failed("writing the turn's files", &out));
        }
        Ok(())
    }

    /// Writes `body` to `dir/name` (made if missing), whole or not at all: a reader in the
    /// sandbox never sees half a file. As root when `root` (into a directory only root writes).
    /// The file is 0640, of the directory's group where root writes it.
    pub async fn write_file(&self, root: bool, dir: &str, name: &str, body: &[u8]) -> Result<()> {
        let script = format!(
            "set -e\numask 027\nd={d}\nn={n}\nmkdir -p \"$d\"\nprintf %s {body} | base64 -d >\"$d/.$n.tmp\"\n\
             {grp}mv -f \"$d/.$n.tmp\" \"$d/$n\"",
            d = sh_quote(dir),
            body = sh_quote(&B64.encode(body)),
            n = sh_quote(name),
            grp = if root { "chown \":$(stat -c %g \"$d\")\" \"$d/.$n.tmp\"\n" } else { "" },
        );
        let out = self.script(User::root_if(root), &script, SCRIPT_TIMEOUT).await?;
        if out.exit_code != 0 {
            return Err(script_failed(&format!("writing {name}"), &out));
        }
        Ok(())
    }

    /// Starts the supervisor; returns its pid. Through the daemon with `tag`; without one,
    /// detached with `setsid` through the provider (its pid read back from `<turn>.pid`).
    pub async fn start(
        &self,
        place: &Place,
        turn: &str,
        cwd: &str,
        argv: &[String],
        env: &[(String, String)],
        tag: &str,
    ) -> Result<i64> {
        let mut args = vec![format!("{}/supervisor.sh", place.dir), turn.to_string(), place.dir.clone()];
        match &place.user {
            Some(u) => args.extend([u.uid.to_string(), u.gid.to_string(), u.name.clone(), u.home.clone()]),
            None => args.extend(["-", "-", "-", "-"].map(String::from)),
        }
        // The log's writer: the sandbox's own hangar-envd where the relay found one (root's and
        // unwritable by the agent where the split holds), as it is there without a daemon too
        // (Docker with the binary on PATH); a sandbox without one gets coreutils, and the relay
        // reads long lines past what it keeps (`Lines`), so it holds with either writer.
        let writer = place.agent_bin.clone().unwrap_or_else(|| "-".into());
        let log_max = self.sessions.settings.log_max_bytes.to_string();
        args.extend([cwd.to_string(), log_max, writer, "--".to_string()]);
        args.extend(argv.iter().cloned());
        let Some(envd) = &self.envd else {
            let words: Vec<String> = args.iter().map(|a| sh_quote(a)).collect();
            let d = sh_quote(&place.dir);
            let script = format!(
                "cd / && setsid bash {} </dev/null >/dev/null 2>&1 &\n\
                 for _ in $(seq 100); do [ -s {d}/{turn}.pid ] && break; sleep 0.05; done\n\
                 head -n1 {d}/{turn}.pid | cut -d' ' -f1",
                words.join(" ")
            );
            let out = self.fallback(&script, None, env, SCRIPT_TIMEOUT).await?;
            return String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .map_err(|_| script_failed("starting the supervisor", &out));
        };
        let program = Program::file(args).env(env).tag(tag.to_string()).user(User::root_if(place.split));
        let (pid, _) = run::start_tagged(envd, program, "the turn's supervisor").await?;
        Ok(pid as i64)
    }

    /// Waits for the supervisor tagged `tag` to end (through the daemon); its exit line, or
    /// `None` when the daemon no longer knows it.
    pub async fn supervisor_end(&self, envd: &Envd, tag: &str) -> Result<Option<SupervisorEnd>> {
        if envd.is_e2b() {
            return e2b_supervisor_end(envd, tag).await;
        }
        let req = AttachRequest { process: by_tag(tag), since: Some(0) };
        let mut stream = match envd.processes().attach(req).await {
            Ok(s) => s.into_inner(),
            Err(s) if s.code() == Code::NotFound => return Ok(None),
            Err(s) => return Err(daemon_error("attaching to the supervisor", s)),
        };
        let mut out = Vec::new();
        loop {
            match stream.message().await {
                Ok(Some(m)) => match m.event.and_then(|e| e.event) {
                    Some(attach_event::Event::Data(d)) => keep_last(&mut out, &d.data),
                    Some(attach_event::Event::End(e)) => {
                        let exit = e.exit.unwrap_or_default();
                        return Ok(Some(SupervisorEnd {
                            line: String::from_utf8_lossy(&out).lines().last().map(str::to_string),
                            exit_code: exit.exit_code,
                            signal: exit.signal,
                        }));
                    }
                    _ => {}
                },
                Ok(None) => return Err(Error::daemon("the daemon ended the supervisor's stream")),
                Err(s) => return Err(daemon_error("following the supervisor", s)),
            }
        }
    }

    /// SIGTERM to the supervisor's process group (the harness is in it), SIGKILL after `grace`.
    /// E2B's envd has no group signal or escalation: its sandboxes take the script's way below.
    pub async fn signal(&self, place_dir: &str, turn: &str, tag: &str, pid: i64, grace: Duration) -> Result<()> {
        if let Some(envd) = self.envd.as_ref().filter(|e| !e.is_e2b()) {
            let req = SignalRequest {
                process: by_tag(tag),
                signal: libc::SIGTERM,
                escalate_after_ms: Some(grace.as_millis().min(u32::MAX as u128) as u32),
            };
            return match envd.processes().signal(req).await {
                Ok(_) => Ok(()),
                Err(s) if s.code() == Code::NotFound => Ok(()),
                Err(s) => Err(daemon_error("signalling the turn", s)),
            };
        }
        let script = signal_script(place_dir, turn, pid, grace);
        // As root through E2B's envd: a split supervisor is root's.
        self.script(User::root_if(self.envd.is_some()), &script, SCRIPT_TIMEOUT).await.map(|_| ())
    }
}

/// `supervisor_end` on E2B's envd: its `Connect` by tag gives the output from now on (the exit
/// line is the supervisor's last) and the end; a supervisor it no longer lists is `None`, and
/// the turn's exit file says the rest.
async fn e2b_supervisor_end(envd: &Envd, tag: &str) -> Result<Option<SupervisorEnd>> {
    let req = hangar_proto::process::ConnectRequest { process: by_tag(tag) };
    let mut stream = match envd.process().connect(req).await {
        Ok(s) => s.into_inner(),
        Err(s) if s.code() == Code::NotFound => return Ok(None),
        Err(s) => return Err(daemon_error("connecting to the supervisor", s)),
    };
    let mut out = Vec::new();
    loop {
        match stream.message().await {
            Ok(Some(m)) => match m.event.and_then(|e| e.event) {
                Some(process_event::Event::Data(d)) => {
                    if let Some(hangar_proto::process::process_event::data_event::Output::Stdout(b)) = d.output {
                        keep_last(&mut out, &b)
                    }
                }
                Some(process_event::Event::End(e)) => {
                    // E2B's end has no signal field: its status says "signal: killed".
                    let signal = (!e.exited).then_some(e.exit_code).filter(|_| e.status.starts_with("signal"));
                    let line = String::from_utf8_lossy(&out).lines().last().map(str::to_string);
                    // Connected after the supervisor printed its line (output before `Connect`
                    // is not sent): its exit file, written first, says the rest.
                    let whole = line.as_deref().is_some_and(|l| serde_json::from_str::<serde_json::Value>(l).is_ok());
                    if signal.is_none() && !whole {
                        return Ok(None);
                    }
                    return Ok(Some(SupervisorEnd { line, exit_code: e.exit_code, signal }));
                }
                _ => {}
            },
            Ok(None) => return Err(Error::daemon("the daemon ended the supervisor's stream")),
            Err(s) => return Err(daemon_error("following the supervisor", s)),
        }
    }
}

/// What the supervisor's end said: its exit line (the harness's code and signal) and its own exit.
#[derive(Debug, Clone)]
pub struct SupervisorEnd {
    pub line: Option<String>,
    pub exit_code: i32,
    pub signal: Option<i32>,
}

fn by_tag(tag: &str) -> Option<ProcessSelector> {
    Some(ProcessSelector { selector: Some(process_selector::Selector::Tag(tag.to_string())) })
}

/// What a session script's failure means: one that did not answer in time is a sandbox too
/// busy to run it (`Unavailable`: the driver tries again, and every script is safe to repeat);
/// any other failure is the script's (`Daemon`: a start fails with it).
pub fn script_failed(what: &str, out: &ExecOutput) -> Error {
    if out.timed_out {
        return Error::unavailable(format!(
            "{what}: no answer in {} s (the sandbox is busy)",
            SCRIPT_TIMEOUT.as_secs()
        ));
    }
    Error::daemon(format!("{what} failed (exit {}): {}", out.exit_code, String::from_utf8_lossy(&out.stderr).trim()))
}

fn keep_last(buf: &mut Vec<u8>, more: &[u8]) {
    buf.extend_from_slice(more);
    if buf.len() > EXEC_OUTPUT_BYTES {
        buf.drain(..buf.len() - EXEC_OUTPUT_BYTES);
    }
}

/// Signals a turn's supervisor by script, without a daemon or with E2B's: TERM to its process
/// group, KILL `grace` later. The pid is the relay's own record, the start time in the pid file
/// guards against its reuse. E2B's envd reports the pid before bash has run a line, so a cancel
/// right after the start waits (up to 10 s, while the pid lives) for the supervisor to write that
/// file; without the wait the guard found none and the signal was dropped for good.
pub fn signal_script(place_dir: &str, turn: &str, pid: i64, grace: Duration) -> String {
    format!(
        "p={pid}; f={d}/{turn}.pid; for _ in $(seq 100); do [ -s \"$f\" ] && break; [ -d /proc/$p ] || break; sleep 0.1; done; \
         s=$(head -n1 \"$f\" 2>/dev/null | cut -d' ' -f2); \
         now=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f20); \
         [ -n \"$now\" ] && [ \"$now\" = \"$s\" ] || exit 0; kill -TERM -- -$p 2>/dev/null; \
         (sleep {g}; kill -KILL -- -$p 2>/dev/null) >/dev/null 2>&1 </dev/null & exit 0",
        d = sh_quote(place_dir),
        g = grace.as_secs().max(1),
    )
}

/// The probe: one script that says everything the relay decides a turn's fate by, and reads the
/// log from `offset`. Its output: `key=value` lines, a `--` line, then up to `max` log bytes.
pub fn probe_script(dir: &str, turn: &str, offset: u64, max: usize) -> String {
    format!(
        "d={d}; t={turn}; l=\"$d/$t.log\"\n\
         echo \"size=$(stat -c %s \"$l\" 2>/dev/null || echo -1)\"\n\
         echo \"inode=$(stat -c %i \"$l\" 2>/dev/null || echo -1)\"\n\
         echo \"exit=$(head -c 4096 \"$d/$t.exit.json\" 2>/dev/null | tr -d '\\n')\"\n\
         read -r p s <\"$d/$t.pid\" 2>/dev/null || p=\n\
         echo \"pid=$p\"\n\
         now=; [ -n \"$p\" ] && now=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f20)\n\
         if [ -n \"$now\" ] && [ \"$now\" = \"$s\" ]; then echo alive=1; else echo alive=0; fi\n\
         echo \"hb_age=$(( $(date +%s) - $(stat -c %Y \"$d/$t.hb\" 2>/dev/null || date +%s) ))\"\n\
         echo --\n\
         tail -c +{from} \"$l\" 2>/dev/null | head -c {max}",
        d = sh_quote(dir),
        from = offset + 1,
    )
}

/// What a probe found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Probe {
    /// The log's size, `None` when it does not exist.
    pub size: Option<u64>,
    pub inode: Option<u64>,
    /// The exit file's content, when present.
    pub exit: Option<String>,
    /// The supervisor's pid, from its pid file.
    pub pid: Option<i64>,
    pub alive: bool,
    pub heartbeat_age: Option<i64>,
    /// Log bytes from the offset asked for.
    pub data: Vec<u8>,
}

pub fn parse_probe(out: &[u8]) -> Option<Probe> {
    let split = out.windows(4).position(|w| w == b"\n--\n")?;
    let head = String::from_utf8_lossy(&out[..split]);
    let mut p = Probe { data: out[split + 4..].to_vec(), ..Default::default() };
    for line in head.lines() {
        let (k, v) = line.split_once('=')?;
        match k {
            "size" => p.size = v.parse().ok(),
            "inode" => p.inode = v.parse().ok(),
            "exit" => p.exit = Some(v.to_string()).filter(|v| !v.is_empty()),
            "alive" => p.alive = v == "1",
            "pid" => p.pid = v.parse().ok(),
            "hb_age" => p.heartbeat_age = v.parse().ok(),
            _ => {}
        }
    }
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_parses_and_keeps_the_log_bytes_whole() {
        let out = b"size=12\ninode=77\nexit={\"code\":0}\nalive=0\nhb_age=3\n--\nline\n--\nmore";
        let p = parse_probe(out).unwrap();
        assert_eq!(p.size, Some(12));
        assert_eq!(p.exit.as_deref(), Some("{\"code\":0}"));
        assert!(!p.alive);
        assert_eq!(p.data, b"line\n--\nmore");
        let missing = parse_probe(b"size=-1\ninode=-1\nexit=\nalive=0\nhb_age=0\n--\n").unwrap();
        assert_eq!((missing.size, missing.exit), (None, None));
        assert!(parse_probe(b"garbage").is_none());
    }

    /// A place is what the daemon said on that connection: a clone of it is answered, another
    /// connection (a restarted daemon) learns it again, a forgotten sandbox too.
    #[tokio::test]
    async fn a_place_is_kept_for_its_connection_only() {
        let place = Place {
            split: false,
            dir: "/home/u/.hangar/runs".into(),
            user: None,
            home: "/home/u".into(),
            agent_bin: None,
        };
        let places = Places::default();
        let first = Envd::new("http://127.0.0.1:9", "t").unwrap();
        assert_eq!(places.get("sbx", &first), None);
        places.put("sbx", &first, place.clone());
        assert_eq!(places.get("sbx", &first.clone()), Some(place.clone()));
        assert_eq!(places.get("other", &first), None);
        let restarted = Envd::new("http://127.0.0.1:9", "t").unwrap();
        assert_eq!(places.get("sbx", &restarted), None, "a new connection asks again");
        places.forget("sbx");
        assert_eq!(places.get("sbx", &first), None);
    }

    /// The commands of the processes below `pid` (from `/proc`).
    fn descendants(pid: u32) -> Vec<String> {
        let mut found = vec![pid];
        let mut names = Vec::new();
        for _ in 0..4 {
            for entry in std::fs::read_dir("/proc").unwrap().flatten() {
                let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
                let Some((head, tail)) = stat.rsplit_once(") ") else { continue };
                let me: u32 = entry.file_name().to_string_lossy().parse().unwrap_or(0);
                let ppid: u32 = tail.split(' ').nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
                if found.contains(&ppid) && !found.contains(&me) {
                    found.push(me);
                    names.push(head.split_once(" (").map_or("", |(_, n)| n).to_string());
                }
            }
        }
        names
    }

    /// A script the sandbox was too busy to answer is tried again; one that failed fails the start.
    #[test]
    fn a_script_that_timed_out_is_unavailable_and_one_that_failed_is_the_daemons() {
        let slow = ExecOutput { exit_code: -1, timed_out: true, ..Default::default() };
        let e = script_failed("writing the turn's files", &slow);
        assert!(matches!(&e, Error::Unavailable(m) if m.contains("no answer in 30 s")), "{e:?}");
        let failed = ExecOutput { exit_code: 2, stderr: b"mkdir: denied\n".to_vec(), ..Default::default() };
        let e = script_failed("writing the turn's files", &failed);
        assert!(
            matches!(&e, Error::Daemon(m) if m == "writing the turn's files failed (exit 2): mkdir: denied"),
            "{e:?}"
        );
    }

    /// A cancel that comes before the supervisor has written its pid file (E2B's envd reports the
    /// pid at once) waits for the file, and the TERM reaches the process group.
    #[test]
    fn a_signal_before_the_pid_file_waits_for_it() {
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        let dir = std::env::temp_dir().join(format!("hangar-signal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut target = std::process::Command::new("sleep").arg("30").process_group(0).spawn().unwrap();
        let pid = target.id();
        let script = signal_script(dir.to_str().unwrap(), "t1", pid as i64, Duration::from_secs(5));
        let signaller = std::process::Command::new("bash").args(["-c", &script]).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        // As the supervisor writes it: its pid and its start time (field 22 of its stat).
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let start = stat.rsplit_once(") ").unwrap().1.split(' ').nth(19).unwrap().to_string();
        std::fs::write(dir.join("t1.pid"), format!("{pid} {start}\n")).unwrap();
        let mut ended = None;
        for _ in 0..50 {
            ended = target.try_wait().unwrap();
            if ended.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = target.kill();
        let _ = signaller.wait_with_output();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(ended.and_then(|s| s.signal()), Some(libc::SIGTERM), "the signal was dropped");
    }

    /// The supervisor run as it is in a sandbox (no split, no hangar-envd): its heartbeat beats
    /// with no process of its own while the harness runs, and nothing of it outlives the turn.
    #[test]
    fn the_heartbeat_forks_nothing_and_ends_with_the_turn() {
        let dir = std::env::temp_dir().join(format!("hangar-supervisor-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.to_str().unwrap();
        std::fs::write(dir.join("supervisor.sh"), SUPERVISOR).unwrap();
        std::fs::write(dir.join("t1.prompt"), "").unwrap();
        let mut sup = std::process::Command::new("bash")
            .arg(dir.join("supervisor.sh"))
            .args(["t1", d, "-", "-", "me", d, d, "1048576", "-", "--", "timeout", "2", "tail", "-f", "/dev/null"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut running = Vec::new();
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(100));
            running = descendants(sup.id());
            if running.iter().any(|n| n == "tail") && dir.join("t1.hb").exists() {
                break;
            }
        }
        assert!(dir.join("t1.hb").exists(), "no heartbeat file; below the supervisor: {running:?}");
        assert!(running.iter().any(|n| n == "tail"), "the harness runs: {running:?}");
        assert!(!running.iter().any(|n| n == "sleep" || n == "touch"), "the heartbeat forks: {running:?}");
        assert_eq!(sup.wait().unwrap().code(), Some(124), "the harness's exit (timeout's)");
        assert!(std::fs::read_to_string(dir.join("t1.exit.json")).unwrap().contains(r#""code":124"#));
        assert!(!dir.join("t1.beat").exists() && !dir.join("t1.pipe").exists(), "the turn's pipes are removed");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
