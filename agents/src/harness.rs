//! Harness profiles: how to start an agent CLI for a new conversation or a follow-up, which log
//! format it writes, and how its session ids work.
//!
//! Three profiles are built in (`claude-code`, `codex`, `gemini`). An operator adds or replaces
//! profiles with a TOML file of this shape:
//!
//! ```toml
//! [harness.my-agent]
//! new = ["my-agent", "--json", "--session", "{session_id}"]
//! follow_up = ["my-agent", "--json", "--resume", "{session_id}"]  # optional: none refuses follow-ups
//! format = "text"            # claude-stream-json | codex-jsonl | gemini-stream-json | text
//! session_ids = "assign"     # assign | report | latest | none (default none)
//! secrets = []               # optional: relay secrets passed as env vars of the same name
//! credentials = []           # optional: env var names that authenticate the CLI
//! sandbox_login = false      # optional: the CLI may be logged in inside the sandbox by itself
//! approvals = ["--settings", "{settings_file}"]  # optional: none means no approval hook
//! ```
//!
//! Arguments are templates with the placeholders `{session_id}`, `{cwd}`, `{prompt_file}` and
//! `{turn}`; `{{` and `}}` are literal braces. `approvals` is appended to argv when a session has
//! an approval policy (see [`crate::inbox::Policy`]); it may also use `{settings_file}`, the path
//! of the settings file that installs hangar's approval hook (for Claude Code, `--settings`). Everything is checked when the file is loaded, so a
//! bad profile fails at startup, with its name, and not at a run: the name (`[a-z0-9][a-z0-9_-]*`,
//! at most 64 chars), a non-empty `new`, no NUL in an argument, a known format, only known
//! placeholders (`{settings_file}` only in `approvals`), `{session_id}` only with `session_ids`
//! `assign` or `report`, a non-empty `approvals` if it is there, and env var names
//! (`[A-Z_][A-Z0-9_]*`) in `secrets` and `credentials`. Unknown keys are errors too.
//!
//! A session of a profile that names `credentials` must pass one of them (a secret of that name)
//! unless `sandbox_login` is true here or in the request: a CLI without its credential fails
//! only once it has started ("Not logged in"), so hangar refuses the start instead.
//!
//! The prompt is never in argv: the supervisor gives it to the CLI on stdin (all three CLIs read it
//! from stdin in `-p`/`exec` mode). `{prompt_file}` is there for CLIs that want a path.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::parse::Format;

/// How a harness's conversations get their session ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionIds {
    /// hangar picks a UUID before the start and passes it as `{session_id}`.
    Assign,
    /// The CLI reports it in `run.started`'s `session_id` (Codex: `thread_id`).
    Report,
    /// Follow-ups resume the latest conversation in the working directory.
    Latest,
    /// No sessions.
    None,
}

impl SessionIds {
    fn parse(s: &str) -> Option<SessionIds> {
        Some(match s {
            "assign" => SessionIds::Assign,
            "report" => SessionIds::Report,
            "latest" => SessionIds::Latest,
            "none" => SessionIds::None,
            _ => return None,
        })
    }
}

/// One harness profile.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Harness {
    pub name: String,
    /// The argv template for a new conversation.
    pub new: Vec<String>,
    /// The argv template for a follow-up; `None`: follow-ups are refused.
    pub follow_up: Option<Vec<String>>,
    pub format: Format,
    pub session_ids: SessionIds,
    /// Names of relay secrets passed as env vars of the same name (always).
    pub secrets: Vec<String>,
    /// Env var names that authenticate this CLI: the secret a turn passes under one of these names
    /// is the turn's credential.
    pub credentials: Vec<String>,
    /// The CLI may be logged in inside the sandbox by its own means: a session without one of
    /// `credentials` is accepted.
    pub sandbox_login: bool,
    /// Argument templates appended to argv when a session has an approval policy, where
    /// `{settings_file}` is the settings file holding the hook; `None`: this CLI has no approval
    /// hook.
    pub approvals: Option<Vec<String>>,
    pub builtin: bool,
}

/// The values of the placeholders.
#[derive(Clone, Copy, Debug)]
pub struct Vars<'a> {
    pub session_id: Option<&'a str>,
    pub cwd: &'a str,
    pub prompt_file: &'a str,
    pub turn: &'a str,
}

/// What is wrong with a harness file or an argv.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The file is not TOML of the right shape (the message has the line and column).
    #[error("harness file: {0}")]
    Toml(String),
    #[error("harness `{name}`: {why}")]
    Invalid { name: String, why: String },
    #[error("harness `{name}`: `{{{var}}}` is needed but has no value")]
    MissingVar { name: String, var: String },
    #[error("harness `{name}` has no follow_up: it cannot continue a conversation")]
    NoFollowUp { name: String },
}

impl Harness {
    /// The argv for a new conversation (follow_up=false) or a follow-up. The prompt is never in
    /// argv: the supervisor gives it to the CLI on stdin (all three CLIs read the prompt from stdin
    /// in -p/exec mode); `{prompt_file}` is there for CLIs that want a path.
    pub fn argv(&self, follow_up: bool, vars: &Vars) -> Result<Vec<String>, HarnessError> {
        let template = if follow_up {
            self.follow_up.as_ref().ok_or_else(|| HarnessError::NoFollowUp { name: self.name.clone() })?
        } else {
            &self.new
        };
        template.iter().map(|arg| self.render(arg, vars, None)).collect()
    }

    /// The arguments appended to argv when a session has an approval policy, with
    /// `{settings_file}` as given; `None`: this harness has no approval hook.
    pub fn approval_argv(&self, vars: &Vars, settings_file: &str) -> Option<Result<Vec<String>, HarnessError>> {
        let template = self.approvals.as_ref()?;
        Some(template.iter().map(|arg| self.render(arg, vars, Some(settings_file))).collect())
    }

    /// `settings_file` is `Some` only for `approvals`: elsewhere `{settings_file}` is unknown.
    fn render(&self, arg: &str, vars: &Vars, settings_file: Option<&str>) -> Result<String, HarnessError> {
        let invalid = |why: String| HarnessError::Invalid { name: self.name.clone(), why };
        let mut out = String::with_capacity(arg.len());
        for piece in pieces(arg).map_err(invalid)? {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Var(var) => out.push_str(match var {
                    "session_id" => vars
                        .session_id
                        .ok_or_else(|| HarnessError::MissingVar { name: self.name.clone(), var: var.into() })?,
                    "cwd" => vars.cwd,
                    "prompt_file" => vars.prompt_file,
                    "turn" => vars.turn,
                    "settings_file" => match settings_file {
                        Some(path) => path,
                        None => return Err(invalid("`{settings_file}` is allowed only in `approvals`".into())),
                    },
                    other => return Err(invalid(format!("unknown placeholder `{{{other}}}`"))),
                }),
            }
        }
        Ok(out)
    }
}

/// A set of harness profiles by name.
#[derive(Clone, Debug)]
pub struct Harnesses {
    by_name: BTreeMap<String, Harness>,
}

impl Harnesses {
    pub fn builtin() -> Harnesses {
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let names = |a: &[&str]| argv(a);
        let list = [
            Harness {
                name: "claude-code".into(),
                new: argv(&[
                    "claude",
                    "-p",
                    "--output-format",
                    "stream-json",
                    "--verbose",
                    "--session-id",
                    "{session_id}",
                ]),
                follow_up: Some(argv(&[
                    "claude",
                    "-p",
                    "--output-format",
                    "stream-json",
                    "--verbose",
                    "--resume",
                    "{session_id}",
                ])),
                format: Format::ClaudeStreamJson,
                session_ids: SessionIds::Assign,
                secrets: vec![],
                credentials: names(&["ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"]),
                sandbox_login: false,
                // Claude Code reads hooks from a settings file given on the command line.
                approvals: Some(argv(&["--settings", "{settings_file}"])),
                builtin: true,
            },
            Harness {
                name: "codex".into(),
                new: argv(&["codex", "exec", "--json", "-"]),
                follow_up: Some(argv(&["codex", "exec", "--json", "resume", "{session_id}", "-"])),
                format: Format::CodexJsonl,
                session_ids: SessionIds::Report,
                secrets: vec![],
                credentials: names(&["OPENAI_API_KEY", "CODEX_API_KEY"]),
                sandbox_login: false,
                approvals: None,
                builtin: true,
            },
            Harness {
                name: "gemini".into(),
                new: argv(&["gemini", "-o", "stream-json"]),
                follow_up: Some(argv(&["gemini", "-o", "stream-json", "--resume", "latest"])),
                format: Format::GeminiStreamJson,
                session_ids: SessionIds::Latest,
                secrets: vec![],
                credentials: names(&["GEMINI_API_KEY", "GOOGLE_API_KEY"]),
                sandbox_login: false,
                approvals: None,
                builtin: true,
            },
        ];
        Harnesses { by_name: list.into_iter().map(|h| (h.name.clone(), h)).collect() }
    }

    /// Built-ins, then the operator's TOML file on top (a profile with a built-in's name replaces
    /// it).
    pub fn with_file(toml_text: &str) -> Result<Harnesses, HarnessError> {
        let file: File = toml::from_str(toml_text).map_err(|e| HarnessError::Toml(e.to_string().trim().to_string()))?;
        let mut all = Harnesses::builtin();
        for (name, profile) in file.harness {
            let h = profile.check(name)?;
            all.by_name.insert(h.name.clone(), h);
        }
        Ok(all)
    }

    pub fn get(&self, name: &str) -> Option<&Harness> {
        self.by_name.get(name)
    }

    /// Every profile, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Harness> {
        self.by_name.values()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    harness: BTreeMap<String, Profile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Profile {
    new: Vec<String>,
    follow_up: Option<Vec<String>>,
    format: String,
    session_ids: Option<String>,
    #[serde(default)]
    secrets: Vec<String>,
    #[serde(default)]
    credentials: Vec<String>,
    #[serde(default)]
    sandbox_login: bool,
    approvals: Option<Vec<String>>,
}

impl Profile {
    fn check(self, name: String) -> Result<Harness, HarnessError> {
        let invalid = |why: String| HarnessError::Invalid { name: name.clone(), why };
        if !is_name(&name) {
            return Err(invalid("a name is 1 to 64 of a-z, 0-9, '_' and '-', starting with a letter or digit".into()));
        }
        let format = Format::parse(&self.format).ok_or_else(|| {
            invalid(format!(
                "unknown format `{}`: one of claude-stream-json, codex-jsonl, gemini-stream-json, text",
                self.format
            ))
        })?;
        let session_ids = match &self.session_ids {
            None => SessionIds::None,
            Some(s) => SessionIds::parse(s)
                .ok_or_else(|| invalid(format!("unknown session_ids `{s}`: one of assign, report, latest, none")))?,
        };
        if self.new.is_empty() {
            return Err(invalid("`new` is empty: it needs at least the program".into()));
        }
        if self.follow_up.as_ref().is_some_and(Vec::is_empty) {
            return Err(invalid("`follow_up` is empty: leave it out to refuse follow-ups".into()));
        }
        if self.approvals.as_ref().is_some_and(Vec::is_empty) {
            return Err(invalid("`approvals` is empty: leave it out for a CLI without an approval hook".into()));
        }
        let templates =
            [("new", Some(&self.new)), ("follow_up", self.follow_up.as_ref()), ("approvals", self.approvals.as_ref())];
        for (key, args) in templates {
            for (i, arg) in args.into_iter().flatten().enumerate() {
                let at = |why: String| invalid(format!("{key}[{i}]: {why}"));
                if arg.contains('\0') {
                    return Err(at("contains a NUL byte".into()));
                }
                for piece in pieces(arg).map_err(at)? {
                    match piece {
                        Piece::Text(_) => {}
                        Piece::Var("session_id") => {
                            if !matches!(session_ids, SessionIds::Assign | SessionIds::Report) {
                                return Err(at(
                                    "`{session_id}` needs session_ids = \"assign\" or \"report\"".into()
                                ));
                            }
                        }
                        Piece::Var("cwd" | "prompt_file" | "turn") => {}
                        Piece::Var("settings_file") if key == "approvals" => {}
                        Piece::Var("settings_file") => {
                            return Err(at("`{settings_file}` is allowed only in `approvals`".into()))
                        }
                        Piece::Var(other) => {
                            return Err(at(format!(
                                "unknown placeholder `{{{other}}}`: one of {{session_id}}, {{cwd}}, {{prompt_file}}, {{turn}}, and {{settings_file}} in approvals (write {{{{ and }}}} for braces)"
                            )))
                        }
                    }
                }
            }
        }
        for (key, list) in [("secrets", &self.secrets), ("credentials", &self.credentials)] {
            if let Some(bad) = list.iter().find(|v| !is_env_name(v)) {
                return Err(invalid(format!("{key}: `{bad}` is not an env var name ([A-Z_][A-Z0-9_]*)")));
            }
        }
        Ok(Harness {
            name: name.clone(),
            new: self.new,
            follow_up: self.follow_up,
            format,
            session_ids,
            secrets: self.secrets,
            credentials: self.credentials,
            sandbox_login: self.sandbox_login,
            approvals: self.approvals,
            builtin: false,
        })
    }
}

/// `[a-z0-9][a-z0-9_-]{0,63}`.
fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-')
}

/// `[A-Z_][A-Z0-9_]*`.
fn is_env_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_uppercase() || b[0] == b'_')
        && b.iter().all(|&c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')
}

/// A part of an argument template.
#[derive(Debug, PartialEq)]
enum Piece<'a> {
    Text(&'a str),
    Var(&'a str),
}

/// An argument template's parts: text (with `{{`/`}}` as one brace) and `{name}` placeholders.
fn pieces(arg: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = arg;
    while let Some(i) = rest.find(['{', '}']) {
        if i > 0 {
            out.push(Piece::Text(&rest[..i]));
        }
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("{{") {
            out.push(Piece::Text("{"));
            rest = after;
        } else if let Some(after) = tail.strip_prefix("}}") {
            out.push(Piece::Text("}"));
            rest = after;
        } else if tail.starts_with('}') {
            return Err(format!("unmatched `}}` in `{arg}` (write `}}}}` for a brace)"));
        } else {
            let Some(end) = tail.find('}') else {
                return Err(format!("unclosed `{{` in `{arg}` (write `{{{{` for a brace)"));
            };
            out.push(Piece::Var(&tail[1..end]));
            rest = &tail[end + 1..];
        }
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(session_id: Option<&str>) -> Vars<'_> {
        Vars { session_id, cwd: "/work", prompt_file: "/tmp/p.md", turn: "3" }
    }

    #[test]
    fn builtins() {
        let all = Harnesses::builtin();
        let names: Vec<_> = all.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["claude-code", "codex", "gemini"]);
        let claude = all.get("claude-code").unwrap();
        assert_eq!(
            claude.argv(false, &vars(Some("6f1c"))).unwrap(),
            ["claude", "-p", "--output-format", "stream-json", "--verbose", "--session-id", "6f1c"]
        );
        assert_eq!(claude.argv(true, &vars(Some("6f1c"))).unwrap()[6], "6f1c");
        assert!(matches!(claude.argv(false, &vars(None)), Err(HarnessError::MissingVar { .. })));
        let codex = all.get("codex").unwrap();
        assert_eq!(codex.argv(false, &vars(None)).unwrap(), ["codex", "exec", "--json", "-"]);
        assert_eq!(codex.argv(true, &vars(Some("th_1"))).unwrap(), ["codex", "exec", "--json", "resume", "th_1", "-"]);
        let gemini = all.get("gemini").unwrap();
        assert_eq!(gemini.argv(true, &vars(None)).unwrap(), ["gemini", "-o", "stream-json", "--resume", "latest"]);
        assert_eq!(gemini.session_ids, SessionIds::Latest);
        // Only Claude Code has an approval hook, installed through a settings file.
        assert_eq!(
            claude.approval_argv(&vars(Some("6f1c")), "/run/hangar/s.json").unwrap().unwrap(),
            ["--settings", "/run/hangar/s.json"]
        );
        assert!(codex.approval_argv(&vars(None), "/s.json").is_none());
        assert!(gemini.approval_argv(&vars(None), "/s.json").is_none());
        // Each built-in passes the checks a file's profile gets.
        for h in all.iter() {
            let p = Profile {
                new: h.new.clone(),
                follow_up: h.follow_up.clone(),
                format: h.format.as_str().into(),
                session_ids: Some(serde_json::to_value(h.session_ids).unwrap().as_str().unwrap().into()),
                secrets: h.secrets.clone(),
                credentials: h.credentials.clone(),
                sandbox_login: h.sandbox_login,
                approvals: h.approvals.clone(),
            };
            let checked = p.check(h.name.clone()).unwrap();
            assert_eq!(Harness { builtin: true, ..checked }, *h);
        }
    }

    #[test]
    fn file_adds_and_replaces() {
        let all = Harnesses::with_file(
            r#"
            [harness.my-agent]
            new = ["my-agent", "--json", "--session", "{session_id}", "--cwd={cwd}", "{{literal}}", "turn-{turn}", "{prompt_file}"]
            format = "text"
            session_ids = "assign"
            secrets = ["GITHUB_TOKEN"]

            [harness.codex]
            new = ["codex", "exec", "--json", "--full-auto", "-"]
            format = "codex-jsonl"
            "#,
        )
        .unwrap();
        let mine = all.get("my-agent").unwrap();
        assert!(!mine.builtin);
        assert_eq!(mine.follow_up, None);
        assert_eq!(mine.secrets, ["GITHUB_TOKEN"]);
        assert_eq!(
            mine.argv(false, &vars(Some("s1"))).unwrap(),
            ["my-agent", "--json", "--session", "s1", "--cwd=/work", "{literal}", "turn-3", "/tmp/p.md"]
        );
        let err = mine.argv(true, &vars(Some("s1"))).unwrap_err();
        assert_eq!(err.to_string(), "harness `my-agent` has no follow_up: it cannot continue a conversation");
        let codex = all.get("codex").unwrap();
        assert!(!codex.builtin);
        assert_eq!(codex.session_ids, SessionIds::None);
        assert_eq!(all.iter().count(), 4);
        assert!(Harnesses::with_file("").unwrap().get("gemini").is_some());
    }

    #[test]
    fn approvals() {
        let all = Harnesses::with_file(
            r#"
            [harness.hooked]
            new = ["hooked", "--json"]
            format = "text"
            approvals = ["--settings={settings_file}", "--cwd", "{cwd}", "turn-{turn}"]
            "#,
        )
        .unwrap();
        let h = all.get("hooked").unwrap();
        assert_eq!(
            h.approval_argv(&vars(None), "/s.json").unwrap().unwrap(),
            ["--settings=/s.json", "--cwd", "/work", "turn-3"]
        );
        assert_eq!(h.argv(false, &vars(None)).unwrap(), ["hooked", "--json"]);
        // A profile built in code with `{settings_file}` outside `approvals` fails at render.
        let odd = Harness { new: vec!["x".into(), "{settings_file}".into()], ..h.clone() };
        let e = odd.argv(false, &vars(None)).unwrap_err().to_string();
        assert_eq!(e, "harness `hooked`: `{settings_file}` is allowed only in `approvals`");
    }

    fn error(toml: &str) -> String {
        Harnesses::with_file(toml).unwrap_err().to_string()
    }

    #[test]
    fn file_errors_say_what_and_where() {
        let e = error("[harness.a]\nnew = [\"a\"]\nformat = \"text\"\nflavour = \"x\"\n");
        assert!(e.starts_with("harness file: ") && e.contains("unknown field `flavour`"), "{e}");
        let e = error("[harnesses.a]\n");
        assert!(e.contains("unknown field `harnesses`"), "{e}");
        let e = error("[harness.a]\nnew = [\"a\", \"--x={prompt}\"]\nformat = \"text\"\n");
        assert!(e.starts_with("harness `a`: new[1]: unknown placeholder `{prompt}`"), "{e}");
        let e = error("[harness.a]\nnew = [\"a\"]\nfollow_up = [\"a\", \"{session_id}\"]\nformat = \"text\"\n");
        assert_eq!(e, "harness `a`: follow_up[1]: `{session_id}` needs session_ids = \"assign\" or \"report\"");
        let e = error("[harness.a]\nnew = [\"a {\"]\nformat = \"text\"\n");
        assert!(e.contains("unclosed `{`"), "{e}");
        let e = error("[harness.a]\nnew = [\"a }\"]\nformat = \"text\"\n");
        assert!(e.contains("unmatched `}`"), "{e}");
        let e = error("[harness.My_Agent]\nnew = [\"a\"]\nformat = \"text\"\n");
        assert!(e.starts_with("harness `My_Agent`: a name is"), "{e}");
        let e = error(&format!("[harness.{}]\nnew = [\"a\"]\nformat = \"text\"\n", "a".repeat(65)));
        assert!(e.contains("a name is"), "{e}");
        let e = error("[harness.a]\nnew = [\"a\"]\nformat = \"text\"\ncredentials = [\"api-key\"]\n");
        assert_eq!(e, "harness `a`: credentials: `api-key` is not an env var name ([A-Z_][A-Z0-9_]*)");
        let e = error("[harness.a]\nnew = [\"a\"]\nformat = \"text\"\nsecrets = [\"9LIVES\"]\n");
        assert!(e.contains("secrets: `9LIVES`"), "{e}");
        let e = error("[harness.a]\nnew = []\nformat = \"text\"\n");
        assert!(e.contains("`new` is empty"), "{e}");
        let e = error("[harness.a]\nnew = [\"a\"]\nformat = \"jsonl\"\n");
        assert!(e.contains("unknown format `jsonl`"), "{e}");
        let e = error("[harness.a]\nnew = [\"a\"]\nformat = \"text\"\nsession_ids = \"last\"\n");
        assert!(e.contains("unknown session_ids `last`"), "{e}");
        let e = error("[harness.a]\nnew = [\"a\\u0000b\"]\nformat = \"text\"\n");
        assert_eq!(e, "harness `a`: new[0]: contains a NUL byte");
        let e = error("[harness.a]\nnew = [\"a\", \"{settings_file}\"]\nformat = \"text\"\n");
        assert_eq!(e, "harness `a`: new[1]: `{settings_file}` is allowed only in `approvals`");
        let e = error("[harness.a]\nnew = [\"a\"]\nfollow_up = [\"a\", \"--s={settings_file}\"]\nformat = \"text\"\n");
        assert_eq!(e, "harness `a`: follow_up[1]: `{settings_file}` is allowed only in `approvals`");
        let e = error("[harness.a]\nnew = [\"a\"]\nformat = \"text\"\napprovals = []\n");
        assert!(e.contains("`approvals` is empty"), "{e}");
        let e = error("[harness.a]\nnew = [\"a\"]\nformat = \"text\"\napprovals = [\"{session_id}\"]\n");
        assert!(e.starts_with("harness `a`: approvals[0]: `{session_id}` needs"), "{e}");
        let e = error("[harness.a]\nnew = [\"a\"]\nformat = \"text\"\napprovals = [\"{hook}\"]\n");
        assert!(
            e.contains("approvals[0]: unknown placeholder `{hook}`") && e.contains("{settings_file} in approvals"),
            "{e}"
        );
        let e = error("[harness.a]\nnew = [\"a\"]\nformat = \"text\"\napprovals = [\"a\\u0000\"]\n");
        assert_eq!(e, "harness `a`: approvals[0]: contains a NUL byte");
        let e = error("[harness.a]\nformat = \"text\"\n");
        assert!(e.contains("missing field `new`"), "{e}");
        let e = error("[harness.a\n");
        assert!(e.starts_with("harness file: "), "{e}");
    }

    #[test]
    fn templates() {
        assert_eq!(
            pieces("a{{b}}c").unwrap(),
            [Piece::Text("a"), Piece::Text("{"), Piece::Text("b"), Piece::Text("}"), Piece::Text("c")]
        );
        assert_eq!(pieces("--x={cwd}/y").unwrap(), [Piece::Text("--x="), Piece::Var("cwd"), Piece::Text("/y")]);
        assert_eq!(pieces("").unwrap(), []);
        assert!(pieces("{").is_err());
        assert!(is_name("a") && is_name("9-x_y") && !is_name("-a") && !is_name("") && !is_name("aB"));
        assert!(is_env_name("_X1") && !is_env_name("1X") && !is_env_name("") && !is_env_name("a"));
    }
}
