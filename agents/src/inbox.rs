//! The inbox protocol: how an agent in a sandbox asks a person something through files.
//!
//! The agent-side command (`hangar-envd question|progress|approve`) writes a request file into a
//! directory the agent can write (`$HANGAR_INBOX`), and waits for an answer file that the relay
//! writes into a directory the agent can only read (`$HANGAR_ANSWERS`), both named
//! [`request_file_name`] (`<id>.json`). Both sides parse what the other wrote with this module,
//! so the shapes and limits live in one place:
//!
//! ```json
//! {"v":2,"id":"3f9c0a7e5d2b4c1a","session":"fix-ci","turn":"turn_2","created_at":1767225600.5,
//!  "kind":"question","text":"Which branch?","options":["main","dev"]}
//! {"v":2,"id":"3f9c0a7e5d2b4c1a","at":1767225660.0,"outcome":"answer","text":"main"}
//! ```
//!
//! Both files are untrusted where they are read: a request is what an agent wrote, an answer
//! reaches a command the agent runs. Parsing never panics, refuses what breaks a limit with a
//! typed [`RequestError`], and cuts over-long texts instead of refusing them.
//!
//! [`Policy`] says which tool calls need a person's approval (Claude Code's permission-rule
//! patterns), and [`hook_call`] and [`hook_output`] are the two ends of a Claude Code
//! `PreToolUse` hook.
//!
//! Pure, as the whole crate: no I/O and no clock; timestamps are passed in.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cut;

/// The protocol version every request and answer carries as `v`. 2: an `allow` names the call
/// it allows ([`ToolCall::digest`]); a version 1 hook, which could not check it, never reads it.
pub const PROTOCOL: u32 = 2;
/// A request or answer file larger than this is refused.
pub const MAX_FILE_BYTES: usize = 64 * 1024;
/// Question and progress texts, reasons and answers are cut (not refused) to this many chars.
pub const MAX_TEXT_CHARS: usize = 2000;
/// The most options a question may offer.
pub const MAX_OPTIONS: usize = 5;
/// The longest option, in chars.
pub const MAX_OPTION_CHARS: usize = 80;
/// The longest `session`, `turn`, tool name or tool use id, in chars.
pub const MAX_LABEL_CHARS: usize = 256;
/// The largest `PreToolUse` hook input [`hook_call`] reads (a Write's input holds the whole file).
pub const MAX_HOOK_INPUT_BYTES: usize = 1024 * 1024;
/// The longest [`summarize`] line, in chars.
pub const MAX_SUMMARY_CHARS: usize = 200;
/// The most patterns a [`Policy`] has.
pub const MAX_PATTERNS: usize = 32;
/// The longest policy pattern, in chars.
pub const MAX_PATTERN_CHARS: usize = 200;

/// Request ids: 8 to 64 of `[a-z0-9-]`, made by the agent-side command (random). An id never
/// starts with `progress-`, so a request's file can never be taken for a turn's progress file.
pub fn valid_request_id(id: &str) -> bool {
    (8..=64).contains(&id.len())
        && id.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !id.starts_with("progress-")
}

/// The file a request is written to in the inbox directory: `<id>.json` for a question or an
/// approval; progress overwrites one file per turn, `progress-<turn>.json` (`none` when the turn
/// is unknown or not `[A-Za-z0-9_-]{1,64}`). A request whose id is not valid (only possible for
/// one built in code: [`Request::parse`] refuses it) gets `invalid-id.json`, never a path.
pub fn request_file_name(req: &Request) -> String {
    match &req.ask {
        Ask::Progress { .. } => {
            let turn = req.turn.as_deref().filter(|t| is_turn_word(t)).unwrap_or("none");
            format!("progress-{turn}.json")
        }
        Ask::Question { .. } | Ask::Approval { .. } | Ask::Tampered { .. } if valid_request_id(&req.id) => {
            format!("{}.json", req.id)
        }
        _ => "invalid-id.json".into(),
    }
}

/// `[A-Za-z0-9_-]{1,64}`: a turn that may be part of a file name.
fn is_turn_word(t: &str) -> bool {
    (1..=64).contains(&t.len()) && t.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

/// One request from the agent: a question, an approval of a tool call, or progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub v: u32,
    pub id: String,
    /// `$HANGAR_SESSION`, as the agent's environment had it: agent-sourced.
    pub session: Option<String>,
    /// `$HANGAR_TURN`, agent-sourced too.
    pub turn: Option<String>,
    /// Epoch seconds, as the command saw the clock.
    pub created_at: f64,
    #[serde(flatten)]
    pub ask: Ask,
}

/// What a request asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ask {
    Question {
        text: String,
        #[serde(default)]
        options: Vec<String>,
    },
    Approval {
        tool: ToolCall,
    },
    Progress {
        text: String,
        pct: Option<u8>,
    },
    /// The hook's notice that the approval `request` was decided on another call than `held`,
    /// the one it held, which it denied: the request was changed after it wrote it. Written
    /// where the agent can write, so information only; the deny was the hook's own.
    Tampered {
        request: String,
        held: ToolCall,
    },
}

/// A tool call waiting for a decision, as the agent CLI described it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub name: String,
    #[serde(default)]
    pub input: Value,
    pub use_id: Option<String>,
}

/// What is wrong with a request or answer file (or a hook's input).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("{bytes} bytes: a request or answer is at most {max} bytes")]
    TooBig { bytes: usize, max: usize },
    #[error("not a hangar request or answer: {0}")]
    Shape(String),
    #[error("unknown protocol version {0} (this hangar speaks version {PROTOCOL})")]
    UnknownVersion(u64),
    #[error("bad id {0:?}: an id is 8 to 64 of a-z, 0-9 and '-', not starting with \"progress-\"")]
    BadId(String),
    #[error("`{field}`: {why}")]
    BadField { field: &'static str, why: String },
    #[error("a question needs a text")]
    QuestionWithoutText,
    #[error("progress needs a text")]
    ProgressWithoutText,
    #[error("{n} options: a question has at most {MAX_OPTIONS}")]
    TooManyOptions { n: usize },
    #[error("option {index} is {chars} characters: an option is at most {MAX_OPTION_CHARS}")]
    OptionTooLong { index: usize, chars: usize },
    #[error("option {index} is empty")]
    EmptyOption { index: usize },
    #[error("pct {0} is over 100")]
    PctOver100(u64),
    #[error("the tool call has an empty tool name")]
    EmptyToolName,
    #[error("the hook input has no `tool_name` string")]
    NoToolName,
}

impl Request {
    /// Parses and checks an untrusted request file. Never panics on any input. Texts over
    /// [`MAX_TEXT_CHARS`] are cut, not refused.
    pub fn parse(bytes: &[u8]) -> Result<Request, RequestError> {
        let value = read_versioned(bytes)?;
        // Checked before the typed read, so that 300 says "over 100" rather than "expected u8".
        if let Some(pct) = value.get("pct").and_then(Value::as_u64).filter(|p| *p > 100) {
            return Err(RequestError::PctOver100(pct));
        }
        let req: Request = serde_json::from_value(value).map_err(|e| RequestError::Shape(short(&e)))?;
        req.validated()
    }

    /// The checks [`Request::parse`] makes (texts cut, limits refused), for a request built in
    /// code, plus its size as JSON: the agent-side command checks what it is about to write.
    pub fn check(self) -> Result<Request, RequestError> {
        let req = self.validated()?;
        let bytes = req.to_json().len();
        if bytes > MAX_FILE_BYTES {
            return Err(RequestError::TooBig { bytes, max: MAX_FILE_BYTES });
        }
        Ok(req)
    }

    fn validated(mut self) -> Result<Request, RequestError> {
        if self.v != PROTOCOL {
            return Err(RequestError::UnknownVersion(self.v.into()));
        }
        if !valid_request_id(&self.id) {
            return Err(RequestError::BadId(cut::chars(&self.id, 80).0.to_string()));
        }
        check_label("session", self.session.as_deref())?;
        check_label("turn", self.turn.as_deref())?;
        if !self.created_at.is_finite() {
            return Err(RequestError::BadField { field: "created_at", why: "not a finite number".into() });
        }
        match &mut self.ask {
            Ask::Question { text, options } => {
                if text.trim().is_empty() {
                    return Err(RequestError::QuestionWithoutText);
                }
                cut_text(text);
                if options.len() > MAX_OPTIONS {
                    return Err(RequestError::TooManyOptions { n: options.len() });
                }
                for (i, option) in options.iter().enumerate() {
                    let chars = option.chars().count();
                    if chars > MAX_OPTION_CHARS {
                        return Err(RequestError::OptionTooLong { index: i + 1, chars });
                    }
                    if option.trim().is_empty() {
                        return Err(RequestError::EmptyOption { index: i + 1 });
                    }
                }
            }
            Ask::Approval { tool } => check_call(tool)?,
            Ask::Tampered { request, held } => {
                if !valid_request_id(request) {
                    return Err(RequestError::BadField { field: "request", why: "not a request id".into() });
                }
                check_call(held)?;
            }
            Ask::Progress { text, pct } => {
                if text.trim().is_empty() {
                    return Err(RequestError::ProgressWithoutText);
                }
                cut_text(text);
                if let Some(p) = pct.filter(|p| *p > 100) {
                    return Err(RequestError::PctOver100(p.into()));
                }
            }
        }
        Ok(self)
    }

    /// The request as one line of JSON, as it is written to the inbox.
    pub fn to_json(&self) -> String {
        // Strings, numbers and a JSON value: serializing cannot fail.
        serde_json::to_string(self).unwrap_or_else(|e| unreachable!("serializing a request: {e}"))
    }
}

/// A person's (or hangar's) answer to a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub v: u32,
    /// The request's id.
    pub id: String,
    /// Epoch seconds, when it was decided.
    pub at: f64,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// How a request was decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// `call`: the [`ToolCall::digest`] of the call the relay read and the person was shown.
    /// The hook allows only the call it holds: another digest means the request was changed.
    Allow {
        reason: Option<String>,
        call: String,
    },
    Deny {
        reason: Option<String>,
    },
    Answer {
        text: String,
    },
    /// Nobody decided in time: an approval is denied, a question unanswered.
    Expired {
        reason: String,
    },
}

impl Answer {
    /// Parses and checks an untrusted answer file; never panics. Texts over [`MAX_TEXT_CHARS`]
    /// are cut, not refused.
    pub fn parse(bytes: &[u8]) -> Result<Answer, RequestError> {
        let value = read_versioned(bytes)?;
        let mut answer: Answer = serde_json::from_value(value).map_err(|e| RequestError::Shape(short(&e)))?;
        if !valid_request_id(&answer.id) {
            return Err(RequestError::BadId(cut::chars(&answer.id, 80).0.to_string()));
        }
        match &mut answer.outcome {
            Outcome::Allow { reason: Some(text), .. } | Outcome::Deny { reason: Some(text) } => cut_text(text),
            Outcome::Answer { text } | Outcome::Expired { reason: text } => cut_text(text),
            Outcome::Allow { reason: None, .. } | Outcome::Deny { reason: None } => {}
        }
        Ok(answer)
    }

    /// The answer as one line of JSON, as it is written to the answers directory.
    pub fn to_json(&self) -> String {
        // Strings and numbers: serializing cannot fail.
        serde_json::to_string(self).unwrap_or_else(|e| unreachable!("serializing an answer: {e}"))
    }
}

/// The file's JSON, once its size and its protocol version are known to be right.
fn read_versioned(bytes: &[u8]) -> Result<Value, RequestError> {
    if bytes.len() > MAX_FILE_BYTES {
        return Err(RequestError::TooBig { bytes: bytes.len(), max: MAX_FILE_BYTES });
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| RequestError::NotJson(short(&e)))?;
    if !value.is_object() {
        return Err(RequestError::Shape("not a JSON object".into()));
    }
    match value.get("v") {
        None => Err(RequestError::Shape("missing field `v`".into())),
        Some(v) => match v.as_u64() {
            Some(n) if n == u64::from(PROTOCOL) => Ok(value),
            Some(n) => Err(RequestError::UnknownVersion(n)),
            None => Err(RequestError::Shape("`v` is not a version number".into())),
        },
    }
}

/// An error message, bounded: serde's may quote the offending value, which may be long.
fn short(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match cut::chars(&s, 200) {
        (head, true) => format!("{head}…"),
        (_, false) => s,
    }
}

fn cut_text(text: &mut String) {
    let (head, cut) = cut::chars(text, MAX_TEXT_CHARS);
    if cut {
        *text = head.to_string();
    }
}

/// A tool call's name and use id: labels, the name not empty.
fn check_call(tool: &ToolCall) -> Result<(), RequestError> {
    if tool.name.is_empty() {
        return Err(RequestError::EmptyToolName);
    }
    check_label("tool.name", Some(&tool.name))?;
    check_label("tool.use_id", tool.use_id.as_deref())
}

/// At most [`MAX_LABEL_CHARS`] chars and no control characters: these end up in logs and lists.
fn check_label(field: &'static str, value: Option<&str>) -> Result<(), RequestError> {
    let Some(value) = value else { return Ok(()) };
    if value.chars().count() > MAX_LABEL_CHARS {
        return Err(RequestError::BadField { field, why: format!("over {MAX_LABEL_CHARS} characters") });
    }
    if value.chars().any(char::is_control) {
        return Err(RequestError::BadField { field, why: "contains a control character".into() });
    }
    Ok(())
}

impl ToolCall {
    /// This call with its input made to fit in `max_bytes` of JSON: the longest strings are cut
    /// first (ending in "…"), and if that is not enough the input becomes its own JSON text, cut.
    /// A Write's input holds the whole file, so a large one could not be asked about otherwise;
    /// the person sees a cut input, and [`summarize`] says what the call does.
    pub fn fitted(&self, max_bytes: usize) -> ToolCall {
        let fits = |v: &Value| json_len(v) <= max_bytes;
        if fits(&self.input) {
            return self.clone();
        }
        for limit in [4096, 1024, 256, 64, 16] {
            let cut = cut_strings(&self.input, limit);
            if fits(&cut) {
                return ToolCall { input: cut, ..self.clone() };
            }
        }
        let text = self.input.to_string();
        let mut keep = max_bytes / 2;
        loop {
            let (head, _) = cut::bytes(&text, keep);
            let input = Value::String(format!("{head}…"));
            if fits(&input) || keep == 0 {
                return ToolCall { input, ..self.clone() };
            }
            keep /= 2;
        }
    }
}

impl ToolCall {
    /// A canonical digest of the call: SHA-256 over its JSON with every object's keys sorted,
    /// as lowercase hex. What binds a decision to the call it decides: the relay computes it on
    /// the call it read (before redaction), the hook on the call it wrote, read back from the
    /// bytes it wrote (a float read from JSON may differ from the one written in its last
    /// place), so both hash the same value.
    pub fn digest(&self) -> String {
        use sha2::{Digest as _, Sha256};
        let mut text = String::new();
        canonical(&serde_json::json!({"name": self.name, "input": self.input, "use_id": self.use_id}), &mut text);
        Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// `v` as JSON with the keys of every object sorted, whatever the map's order.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&o[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(x, out);
            }
            out.push(']');
        }
        _ => out.push_str(&v.to_string()),
    }
}

fn json_len(v: &Value) -> usize {
    v.to_string().len()
}

/// `v` with every string over `limit` chars cut to `limit` and "…".
fn cut_strings(v: &Value, limit: usize) -> Value {
    match v {
        Value::String(s) => match cut::chars(s, limit) {
            (head, true) => Value::String(format!("{head}…")),
            (_, false) => v.clone(),
        },
        Value::Array(a) => Value::Array(a.iter().map(|x| cut_strings(x, limit)).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, x)| (k.clone(), cut_strings(x, limit))).collect()),
        _ => v.clone(),
    }
}

/// The fields a rule's glob is matched against, and [`summarize`] shows: Bash's command, the
/// file tools' path, WebFetch's URL, WebSearch's query; any other tool's input as compact JSON
/// (also a known tool's, when its field is missing).
fn primary_fields(tool: &ToolCall) -> Vec<Cow<'_, str>> {
    let keys: &[&str] = match tool.name.as_str() {
        "Bash" => &["command"],
        "Write" | "Edit" | "MultiEdit" | "Read" => &["file_path"],
        "NotebookEdit" => &["notebook_path", "file_path"],
        "WebFetch" => &["url"],
        "WebSearch" => &["query"],
        _ => &[],
    };
    let found: Vec<Cow<'_, str>> =
        keys.iter().filter_map(|k| tool.input.get(*k).and_then(Value::as_str)).map(Cow::Borrowed).collect();
    if found.is_empty() {
        vec![Cow::Owned(tool.input.to_string())]
    } else {
        found
    }
}

/// One line saying what a tool call does, for a person: `Bash: git push origin main`,
/// `Write: src/a.rs`; at most [`MAX_SUMMARY_CHARS`] chars (cut with "…").
pub fn summarize(tool: &ToolCall) -> String {
    let empty = match &tool.input {
        Value::Null => true,
        Value::Object(o) => o.is_empty(),
        _ => false,
    };
    let line = if empty {
        one_line(&tool.name)
    } else {
        let what = primary_fields(tool).swap_remove(0);
        format!("{}: {}", one_line(&tool.name), one_line(&what))
    };
    match cut::chars(&line, MAX_SUMMARY_CHARS - 1) {
        (head, true) if line.chars().count() > MAX_SUMMARY_CHARS => format!("{head}…"),
        _ => line,
    }
}

/// Whitespace runs (newlines too) as one space, control characters dropped: a summary is a line.
fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(4 * MAX_SUMMARY_CHARS));
    let mut space = false;
    for c in s.trim().chars() {
        if c.is_whitespace() {
            space = true;
        } else if !c.is_control() {
            if space && !out.is_empty() {
                out.push(' ');
            }
            space = false;
            out.push(c);
        }
        // Enough for the summary's cut, whatever the input's length.
        if out.len() > 4 * MAX_SUMMARY_CHARS {
            break;
        }
    }
    out
}

/// Which tool calls need a person's approval: Claude Code permission-rule patterns.
///
/// A rule is `Tool` (that tool, any input), `*` (every tool), or `Tool(glob)`, where the glob's
/// `*` matches any run of characters and everything else matches itself (the legacy
/// `Bash(git push:*)` is `Bash(git push*)`). The glob is matched against the whole of the call's
/// primary field: Bash's `command`, Write/Edit/MultiEdit/Read's `file_path` (NotebookEdit's
/// `notebook_path` or `file_path`), WebFetch's `url`, WebSearch's `query`, any other tool's input
/// as compact JSON. Tool names are `[A-Za-z0-9_.-]+` (`mcp__server__tool` is one). Whitespace
/// around a pattern is ignored; inside the parentheses it is part of the glob.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Policy {
    rules: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(into = "String")]
struct Rule {
    /// As given.
    pattern: String,
    /// `None`: every tool.
    tool: Option<String>,
    /// `None`: any input. The glob's literal parts, between its `*`s.
    glob: Option<Vec<String>>,
}

impl From<Rule> for String {
    fn from(r: Rule) -> String {
        r.pattern
    }
}

/// What is wrong with an approval policy.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("an approval policy has 1 to {MAX_PATTERNS} patterns, not {0}")]
    Count(usize),
    #[error(
        "approval pattern {pattern:?}: {why} (a pattern is `*`, `Tool` or `Tool(glob)`; a tool name is \
         A-Z, a-z, 0-9, '_', '.' and '-', and a glob's `*` matches any characters)"
    )]
    Bad { pattern: String, why: String },
}

impl Policy {
    /// 1 to [`MAX_PATTERNS`] patterns, each 1 to [`MAX_PATTERN_CHARS`] chars, no control chars.
    pub fn parse(patterns: &[String]) -> Result<Policy, PolicyError> {
        if patterns.is_empty() || patterns.len() > MAX_PATTERNS {
            return Err(PolicyError::Count(patterns.len()));
        }
        let rules = patterns.iter().map(|p| Rule::parse(p)).collect::<Result<_, _>>()?;
        Ok(Policy { rules })
    }

    /// The patterns as given (for storing, and for the hook's command line).
    pub fn patterns(&self) -> Vec<String> {
        self.rules.iter().map(|r| r.pattern.clone()).collect()
    }

    /// The first rule that holds this call, as given, if any.
    pub fn matches(&self, tool: &ToolCall) -> Option<String> {
        self.rules.iter().find(|r| r.holds(tool)).map(|r| r.pattern.clone())
    }

    /// The regex for the Claude settings' `matcher` key: `^(Bash|Write)$` for the tools named,
    /// `.*` if a rule is `*`.
    pub fn hook_matcher(&self) -> String {
        let mut names: Vec<String> = Vec::new();
        for rule in &self.rules {
            match &rule.tool {
                None => return ".*".into(),
                Some(t) => {
                    // `.` is the one regex character a tool name may have.
                    let escaped = t.replace('.', "\\.");
                    if !names.contains(&escaped) {
                        names.push(escaped);
                    }
                }
            }
        }
        format!("^({})$", names.join("|"))
    }
}

impl Rule {
    fn parse(pattern: &str) -> Result<Rule, PolicyError> {
        let bad = |why: &str| {
            let shown = match cut::chars(pattern, MAX_PATTERN_CHARS) {
                (head, true) => format!("{head}…"),
                (_, false) => pattern.to_string(),
            };
            PolicyError::Bad { pattern: shown, why: why.to_string() }
        };
        let chars = pattern.chars().count();
        if chars > MAX_PATTERN_CHARS {
            return Err(bad(&format!("{chars} characters: a pattern is at most {MAX_PATTERN_CHARS}")));
        }
        if pattern.chars().any(char::is_control) {
            return Err(bad("contains a control character"));
        }
        let p = pattern.trim();
        if p.is_empty() {
            return Err(bad("is empty"));
        }
        let rule = |tool: Option<&str>, glob: Option<Vec<String>>| Rule {
            pattern: pattern.to_string(),
            tool: tool.map(str::to_string),
            glob,
        };
        if p == "*" {
            return Ok(rule(None, None));
        }
        let Some(open) = p.find('(') else {
            if !is_tool_name(p) {
                return Err(bad("not a tool name"));
            }
            return Ok(rule(Some(p), None));
        };
        let tool = &p[..open];
        if !is_tool_name(tool) {
            return Err(bad("not a tool name before `(`"));
        }
        let Some(glob) = p[open + 1..].strip_suffix(')') else {
            return Err(bad("`(` without a `)` at the end"));
        };
        // The legacy prefix form: `git push:*` is `git push*`.
        let glob = match glob.strip_suffix(":*") {
            Some(prefix) => Cow::Owned(format!("{prefix}*")),
            None => Cow::Borrowed(glob),
        };
        if glob.is_empty() {
            return Err(bad("empty parentheses (write the tool name alone for any input)"));
        }
        Ok(rule(Some(tool), Some(glob.split('*').map(str::to_string).collect())))
    }

    fn holds(&self, tool: &ToolCall) -> bool {
        match (&self.tool, &self.glob) {
            (None, _) => true,
            (Some(name), _) if *name != tool.name => false,
            (Some(_), None) => true,
            (Some(_), Some(parts)) => primary_fields(tool).iter().any(|field| glob_match(parts, field)),
        }
    }
}

/// `[A-Za-z0-9_.-]+`.
fn is_tool_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// Whether `s` is the glob whose literal parts (between `*`s) are `parts`. Linear in `s`: the
/// first part is a prefix, the last a suffix, and those between are found leftmost, in order
/// (leftmost is never worse, since `*` matches anything).
fn glob_match(parts: &[String], s: &str) -> bool {
    let (first, middle, last) = match parts {
        [] => return false,
        [only] => return s == only,
        [first, middle @ .., last] => (first, middle, last),
    };
    let Some(mut rest) = s.strip_prefix(first.as_str()) else {
        return false;
    };
    for part in middle {
        match rest.find(part.as_str()) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last.as_str())
}

/// A hook's decision on a tool call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    Allow,
    Deny,
}

/// The JSON a Claude Code `PreToolUse` hook prints:
/// `{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"|"deny",
/// "permissionDecisionReason": reason}}` (a deny's reason is shown to the model).
pub fn hook_output(decision: Decision, reason: &str) -> Value {
    let decision = match decision {
        Decision::Allow => "allow",
        Decision::Deny => "deny",
    };
    serde_json::json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }
    })
}

/// Reads a `PreToolUse` hook's stdin JSON (`tool_name`, `tool_input`, `tool_use_id`, ...) into a
/// [`ToolCall`]; errors on a missing `tool_name`. Error messages never quote the input.
pub fn hook_call(stdin: &[u8]) -> Result<ToolCall, RequestError> {
    if stdin.len() > MAX_HOOK_INPUT_BYTES {
        return Err(RequestError::TooBig { bytes: stdin.len(), max: MAX_HOOK_INPUT_BYTES });
    }
    // Syntax errors name a line and column, never the text.
    let mut value: Value = serde_json::from_slice(stdin).map_err(|e| RequestError::NotJson(short(&e)))?;
    let Some(obj) = value.as_object_mut() else {
        return Err(RequestError::Shape("the hook input is not a JSON object".into()));
    };
    let name = match obj.get("tool_name") {
        Some(Value::String(s)) if s.is_empty() => return Err(RequestError::EmptyToolName),
        Some(Value::String(s)) => s.clone(),
        _ => return Err(RequestError::NoToolName),
    };
    check_label("tool_name", Some(&name))?;
    let use_id = match obj.get("tool_use_id") {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    check_label("tool_use_id", use_id.as_deref())?;
    let input = obj.remove("tool_input").unwrap_or(Value::Null);
    Ok(ToolCall { name, input, use_id })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn question(text: &str, options: &[&str]) -> Request {
        Request {
            v: PROTOCOL,
            id: "q1234567".into(),
            session: Some("fix-ci".into()),
            turn: Some("turn_2".into()),
            created_at: 1767225600.5,
            ask: Ask::Question { text: text.into(), options: options.iter().map(|s| s.to_string()).collect() },
        }
    }

    fn call(name: &str, input: Value) -> ToolCall {
        ToolCall { name: name.into(), input, use_id: Some("toolu_1".into()) }
    }

    fn parse_err(v: Value) -> String {
        Request::parse(v.to_string().as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn requests_round_trip() {
        let reqs = [
            question("Which branch?", &["main", "dev"]),
            Request { ask: Ask::Approval { tool: call("Bash", json!({"command": "git push"})) }, ..question("x", &[]) },
            Request { ask: Ask::Progress { text: "tests pass".into(), pct: Some(40) }, ..question("x", &[]) },
            Request { ask: Ask::Progress { text: "started".into(), pct: None }, session: None, ..question("x", &[]) },
        ];
        for req in reqs {
            let json = req.to_json();
            assert!(!json.contains('\n'), "{json}");
            assert_eq!(Request::parse(json.as_bytes()).unwrap(), req);
            assert_eq!(req.clone().check().unwrap(), req);
        }
        let json: Value = serde_json::from_str(&question("Which?", &["a"]).to_json()).unwrap();
        assert_eq!(
            json,
            json!({"v": 2, "id": "q1234567", "session": "fix-ci", "turn": "turn_2", "created_at": 1767225600.5,
                   "kind": "question", "text": "Which?", "options": ["a"]})
        );
        // options may be left out; unknown fields are ignored (a later version may add some).
        let r = Request::parse(br#"{"v":2,"id":"abcdefgh","created_at":1,"kind":"question","text":"hi","x":1}"#);
        let r = r.unwrap();
        assert_eq!(r.ask, Ask::Question { text: "hi".into(), options: vec![] });
        assert_eq!((r.session, r.turn), (None, None));
    }

    #[test]
    fn file_names() {
        let q = question("x", &[]);
        assert_eq!(request_file_name(&q), "q1234567.json");
        let p = Request { ask: Ask::Progress { text: "x".into(), pct: None }, ..q.clone() };
        assert_eq!(request_file_name(&p), "progress-turn_2.json");
        assert_eq!(request_file_name(&Request { turn: None, ..p.clone() }), "progress-none.json");
        assert_eq!(request_file_name(&Request { turn: Some("../x".into()), ..p.clone() }), "progress-none.json");
        assert_eq!(request_file_name(&Request { turn: Some("a".repeat(65)), ..p }), "progress-none.json");
        assert_eq!(request_file_name(&Request { id: "../../etc/passwd".into(), ..q }), "invalid-id.json");
        assert!(valid_request_id("abcdefgh") && valid_request_id(&"a-9".repeat(21)));
        for bad in ["abcdefg", "ABCDEFGH", "abcd_efgh", "abcd/efgh", "progress-none", "", &"a".repeat(65)] {
            assert!(!valid_request_id(bad), "{bad}");
        }
    }

    #[test]
    fn texts_are_cut_not_refused() {
        let long = "é".repeat(MAX_TEXT_CHARS + 10);
        let r = Request::parse(question(&long, &[]).to_json().as_bytes()).unwrap();
        let Ask::Question { text, .. } = r.ask else { panic!() };
        assert_eq!(text.chars().count(), MAX_TEXT_CHARS);
        let a = Answer { v: PROTOCOL, id: "abcdefgh".into(), at: 2.0, outcome: Outcome::Answer { text: long.clone() } };
        let Outcome::Answer { text } = Answer::parse(a.to_json().as_bytes()).unwrap().outcome else { panic!() };
        assert_eq!(text.chars().count(), MAX_TEXT_CHARS);
        let a = Answer { outcome: Outcome::Deny { reason: Some(long) }, ..a };
        let Outcome::Deny { reason: Some(r) } = Answer::parse(a.to_json().as_bytes()).unwrap().outcome else {
            panic!()
        };
        assert_eq!(r.chars().count(), MAX_TEXT_CHARS);
    }

    #[test]
    fn request_refusals() {
        let base = || serde_json::to_value(question("Which?", &["a"])).unwrap();
        let with = |k: &str, v: Value| {
            let mut b = base();
            b[k] = v;
            parse_err(b)
        };
        assert!(Request::parse(b"nope").unwrap_err().to_string().starts_with("not JSON"));
        assert!(Request::parse(b"[1]").unwrap_err().to_string().contains("not a JSON object"));
        let big = format!("{{\"v\":2,\"pad\":\"{}\"}}", "x".repeat(MAX_FILE_BYTES));
        assert!(Request::parse(big.as_bytes()).unwrap_err().to_string().contains("at most 65536 bytes"));
        assert_eq!(with("v", json!(1)), "unknown protocol version 1 (this hangar speaks version 2)");
        assert!(with("v", json!("1")).contains("`v` is not a version number"));
        let mut no_v = base();
        no_v.as_object_mut().unwrap().remove("v");
        assert!(parse_err(no_v).contains("missing field `v`"));
        assert!(with("id", json!("short")).starts_with("bad id \"short\""));
        assert!(with("id", json!("../../../etc/x")).starts_with("bad id"));
        assert!(with("kind", json!("poll")).contains("unknown variant `poll`"), "{}", with("kind", json!("poll")));
        assert_eq!(with("text", json!("  ")), "a question needs a text");
        assert!(with("text", json!(3)).starts_with("not a hangar request"));
        assert_eq!(with("options", json!(["1", "2", "3", "4", "5", "6"])), "6 options: a question has at most 5");
        assert_eq!(
            with("options", json!(["ok", "x".repeat(81)])),
            "option 2 is 81 characters: an option is at most 80"
        );
        assert_eq!(with("options", json!([""])), "option 1 is empty");
        assert_eq!(with("session", json!("a\nb")), "`session`: contains a control character");
        assert!(with("turn", json!("t".repeat(300))).contains("over 256"));
        assert!(with("created_at", json!("now")).starts_with("not a hangar request"));
        let progress = |pct: Value| {
            parse_err(json!({"v": 2, "id": "abcdefgh", "created_at": 1, "kind": "progress", "text": "x", "pct": pct}))
        };
        assert_eq!(progress(json!(101)), "pct 101 is over 100");
        assert_eq!(progress(json!(300)), "pct 300 is over 100");
        assert!(progress(json!(-1)).starts_with("not a hangar request"));
        let e = parse_err(json!({"v": 2, "id": "abcdefgh", "created_at": 1, "kind": "progress", "text": ""}));
        assert_eq!(e, "progress needs a text");
        let approval = |tool: Value| {
            parse_err(json!({"v": 2, "id": "abcdefgh", "created_at": 1, "kind": "approval", "tool": tool}))
        };
        assert_eq!(approval(json!({"name": ""})), "the tool call has an empty tool name");
        let tampered = |request: Value| {
            let held = json!({"name": "Bash", "input": {"command": "git push --force"}, "use_id": null});
            json!({"v": 2, "id": "abcdefgh", "created_at": 1, "kind": "tampered", "request": request, "held": held})
        };
        let notice = Request::parse(tampered(json!("0123456789abcdef")).to_string().as_bytes()).unwrap();
        assert_eq!(request_file_name(&notice), "abcdefgh.json");
        assert!(matches!(notice.ask, Ask::Tampered { ref request, .. } if request == "0123456789abcdef"));
        assert_eq!(parse_err(tampered(json!("../x"))), "`request`: not a request id");
        assert!(approval(json!({"input": {}})).contains("missing field `name`"));
        // check() also refuses what would not fit in a file, and what parse would refuse.
        let huge = Request {
            ask: Ask::Approval { tool: call("Write", json!({"content": "x".repeat(MAX_FILE_BYTES)})) },
            ..question("x", &[])
        };
        assert!(matches!(huge.check(), Err(RequestError::TooBig { .. })));
        assert!(matches!(question("x", &["a"; 6]).check(), Err(RequestError::TooManyOptions { n: 6 })));
        let nan = Request { created_at: f64::NAN, ..question("x", &[]) };
        assert!(matches!(nan.check(), Err(RequestError::BadField { field: "created_at", .. })));
        let pct = Request { ask: Ask::Progress { text: "x".into(), pct: Some(200) }, ..question("x", &[]) };
        assert!(matches!(pct.check(), Err(RequestError::PctOver100(200))));
    }

    #[test]
    fn answers_round_trip_and_refusals() {
        let outcomes = [
            Outcome::Allow { reason: None, call: "ab".repeat(32) },
            Outcome::Allow { reason: Some("fine".into()), call: "cd".repeat(32) },
            Outcome::Deny { reason: Some("not on main".into()) },
            Outcome::Answer { text: "main".into() },
            Outcome::Expired { reason: "nobody answered in 10 minutes".into() },
        ];
        for outcome in outcomes {
            let a = Answer { v: PROTOCOL, id: "abcdefgh".into(), at: 3.25, outcome };
            assert_eq!(Answer::parse(a.to_json().as_bytes()).unwrap(), a);
        }
        let v: Value = serde_json::from_str(
            &Answer { v: PROTOCOL, id: "abcdefgh".into(), at: 1.0, outcome: Outcome::Answer { text: "main".into() } }
                .to_json(),
        )
        .unwrap();
        assert_eq!(v, json!({"v": 2, "id": "abcdefgh", "at": 1.0, "outcome": "answer", "text": "main"}));
        let err = |s: &str| Answer::parse(s.as_bytes()).unwrap_err().to_string();
        assert!(err(r#"{"v":2,"id":"abcdefgh","at":1,"outcome":"maybe"}"#).contains("unknown variant"));
        assert!(err(r#"{"v":2,"id":"abcdefgh","at":1,"outcome":"answer"}"#).contains("missing field `text`"));
        assert!(err(r#"{"v":2,"id":"ab","at":1,"outcome":"allow","call":"x"}"#).starts_with("bad id"));
        // An allow names the call it allows; a version 1 answer (which did not) is not read.
        assert!(err(r#"{"v":2,"id":"abcdefgh","at":1,"outcome":"allow"}"#).contains("missing field `call`"));
        assert!(err(r#"{"v":1,"id":"abcdefgh","at":1,"outcome":"allow"}"#).starts_with("unknown protocol version 1"));
        assert!(err(r#"{"v":9,"id":"abcdefgh","at":1,"outcome":"allow"}"#).starts_with("unknown protocol version 9"));
        assert!(err(r#"{"v":2,"id":"abcdefgh","at":1,"outcome":"answer","text":"hal"#).starts_with("not JSON"));
        // A reason may be left out of allow and deny.
        let a = Answer::parse(br#"{"v":2,"id":"abcdefgh","at":1,"outcome":"deny"}"#).unwrap();
        assert_eq!(a.outcome, Outcome::Deny { reason: None });
    }

    #[test]
    fn hostile_inputs_never_panic() {
        let deep = format!("{}{}", "[".repeat(30_000), "]".repeat(30_000));
        let deep_obj = format!("{}1{}", "{\"a\":".repeat(20_000), "}".repeat(20_000));
        let deep_input = format!("{{\"tool_name\":\"X\",\"tool_input\":{deep}}}");
        let inputs: Vec<Vec<u8>> = vec![
            vec![],
            vec![0xff, 0xfe, 0x00],
            b"\0".to_vec(),
            b"{\"v\":2,\"id\":\"abcdefgh\",\"created_at\":1,\"kind\":\"question\",\"text\":\"\\u0000\"}".to_vec(),
            b"{\"v\":2,\"id\":\"abcdefgh\xff\",\"created_at\":1}".to_vec(),
            b"{\"v\":18446744073709551616}".to_vec(),
            b"{\"v\":2,\"id\":\"abcdefgh\",\"created_at\":1e999,\"kind\":\"question\",\"text\":\"x\"}".to_vec(),
            b"{\"v\":2,\"id\":\"abcdefgh\",\"created_at\":1,\"kind\":\"progress\",\"text\":\"x\",\"pct\":1e3}".to_vec(),
            deep.clone().into_bytes(),
            deep_obj.into_bytes(),
            deep_input.into_bytes(),
            format!("\"{}\"", "x".repeat(2 * MAX_FILE_BYTES)).into_bytes(),
            format!("{{\"tool_name\":\"{}\"}}", "y".repeat(MAX_HOOK_INPUT_BYTES)).into_bytes(),
        ];
        for bytes in &inputs {
            let _ = Request::parse(bytes);
            let _ = Answer::parse(bytes);
            let _ = hook_call(bytes);
        }
        // A NUL in a text is data, not a refusal.
        assert!(Request::parse(&inputs[3]).is_ok());
        assert!(hook_call(&inputs[10]).unwrap_err().to_string().starts_with("not JSON"));
        assert!(Request::parse(deep.as_bytes()).unwrap_err().to_string().starts_with("not JSON"));
    }

    #[test]
    fn summaries() {
        let s = |name: &str, input: Value| summarize(&call(name, input));
        assert_eq!(
            s("Bash", json!({"command": "git push origin main", "description": "push"})),
            "Bash: git push origin main"
        );
        assert_eq!(s("Bash", json!({"command": "  cd a &&\n\tmake\n"})), "Bash: cd a && make");
        assert_eq!(s("Write", json!({"file_path": "src/a.rs", "content": "fn main() {}"})), "Write: src/a.rs");
        assert_eq!(s("NotebookEdit", json!({"notebook_path": "a.ipynb"})), "NotebookEdit: a.ipynb");
        assert_eq!(s("WebFetch", json!({"url": "https://x.org", "prompt": "p"})), "WebFetch: https://x.org");
        assert_eq!(s("WebSearch", json!({"query": "rust glob"})), "WebSearch: rust glob");
        assert_eq!(s("mcp__gh__create_pr", json!({"title": "Fix"})), r#"mcp__gh__create_pr: {"title":"Fix"}"#);
        assert_eq!(s("TodoWrite", json!({})), "TodoWrite");
        assert_eq!(s("Bash", Value::Null), "Bash");
        assert_eq!(s("Bash", json!({"cmd": 1})), r#"Bash: {"cmd":1}"#);
        let long = s("Bash", json!({"command": "é".repeat(500)}));
        assert_eq!(long.chars().count(), MAX_SUMMARY_CHARS);
        assert!(long.ends_with('…'));
        let exact = s("Bash", json!({"command": "x".repeat(MAX_SUMMARY_CHARS - 6)}));
        assert_eq!(exact.chars().count(), MAX_SUMMARY_CHARS);
        assert!(!exact.ends_with('…'));
        assert_eq!(s("Bash", json!({"command": "a\u{0}b\u{7}c"})), "Bash: abc");
    }

    #[test]
    fn fitted_inputs() {
        let small = call("Bash", json!({"command": "ls"}));
        assert_eq!(small.fitted(1000), small);
        let big = call("Write", json!({"file_path": "a.rs", "content": "x".repeat(100_000)}));
        let f = big.fitted(8 * 1024);
        assert!(json_len(&f.input) <= 8 * 1024);
        assert_eq!(f.input["file_path"], "a.rs");
        assert!(f.input["content"].as_str().unwrap().ends_with('…'));
        assert_eq!((f.name.as_str(), f.use_id.as_deref()), ("Write", Some("toolu_1")));
        let many = call("X", Value::Array((0..10_000).map(|i| json!(i)).collect()));
        let f = many.fitted(1024);
        assert!(json_len(&f.input) <= 1024 && f.input.is_string());
        let f = many.fitted(0);
        assert!(f.input.is_string());
    }

    #[test]
    fn digests_bind_the_call_and_not_the_order_of_its_keys() {
        let a = call("Bash", json!({"command": "git push --force", "description": "push"}));
        let reordered: Value = serde_json::from_str(r#"{"description":"push","command":"git push --force"}"#).unwrap();
        assert_eq!(a.digest(), call("Bash", reordered).digest());
        assert_eq!(a.digest().len(), 64);
        assert!(a.digest().bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        // Any change of what the call does is another digest: the input, the tool, the use id.
        let swapped = call("Bash", json!({"command": "git status", "description": "push"}));
        assert_ne!(a.digest(), swapped.digest());
        assert_ne!(a.digest(), call("Write", a.input.clone()).digest());
        assert_ne!(a.digest(), ToolCall { use_id: None, ..a.clone() }.digest());
        let nested = |x: Value| call("X", json!({"a": [1, {"b": x}]})).digest();
        assert_ne!(nested(json!("1")), nested(json!(1)));
        // A written request read back digests as the call the hook wrote.
        let req = Request { ask: Ask::Approval { tool: a.clone() }, ..question("x", &[]) };
        let Ask::Approval { tool } = Request::parse(req.to_json().as_bytes()).unwrap().ask else { panic!() };
        assert_eq!(tool.digest(), a.digest());
    }

    fn policy(p: &[&str]) -> Policy {
        Policy::parse(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn policy_matching() {
        let bash = |c: &str| call("Bash", json!({"command": c}));
        let push = policy(&["Bash(git push*)"]);
        assert_eq!(push.matches(&bash("git push origin main")), Some("Bash(git push*)".into()));
        assert_eq!(push.matches(&bash("git push")), Some("Bash(git push*)".into()));
        assert_eq!(push.matches(&bash("git status")), None);
        assert_eq!(push.matches(&bash("echo; git push")), None);
        assert_eq!(push.matches(&call("Write", json!({"file_path": "git push"}))), None);
        let legacy = policy(&["Bash(git push:*)"]);
        assert!(legacy.matches(&bash("git push origin main")).is_some());
        assert!(legacy.matches(&bash("git status")).is_none());
        let anywhere = policy(&["Bash(*rm -rf*)"]);
        assert!(anywhere.matches(&bash("cd / && rm -rf x")).is_some());
        assert!(anywhere.matches(&bash("rm -rf")).is_some());
        assert!(anywhere.matches(&bash("rm -r")).is_none());
        let mid = policy(&["Bash(a*b*c)"]);
        for (cmd, holds) in [("abc", true), ("a-b-c", true), ("abcc", true), ("ab", false), ("acb", false)] {
            assert_eq!(mid.matches(&bash(cmd)).is_some(), holds, "{cmd}");
        }
        let exact = policy(&["Bash(make)"]);
        assert!(exact.matches(&bash("make")).is_some() && exact.matches(&bash("make test")).is_none());
        let write = policy(&["Write"]);
        assert!(write.matches(&call("Write", json!({"file_path": "/etc/x"}))).is_some());
        assert!(write.matches(&call("Write", Value::Null)).is_some());
        assert!(write.matches(&call("Edit", json!({"file_path": "/etc/x"}))).is_none());
        let all = policy(&["*"]);
        for name in ["Bash", "Write", "mcp__gh__create_pr", "Anything"] {
            assert_eq!(all.matches(&call(name, json!({}))), Some("*".into()));
        }
        let mcp = policy(&["mcp__gh__create_pr"]);
        assert!(mcp.matches(&call("mcp__gh__create_pr", json!({"title": "x"}))).is_some());
        assert!(mcp.matches(&call("mcp__gh__list_prs", json!({}))).is_none());
        let mcp_input = policy(&["mcp__gh__create_pr(*\"base\":\"main\"*)"]);
        assert!(mcp_input.matches(&call("mcp__gh__create_pr", json!({"base": "main", "title": "x"}))).is_some());
        assert!(mcp_input.matches(&call("mcp__gh__create_pr", json!({"base": "dev"}))).is_none());
        let files = policy(&["Edit(src/*)", "NotebookEdit(*.ipynb)", "WebFetch(https://evil.*)"]);
        assert_eq!(files.matches(&call("Edit", json!({"file_path": "src/a.rs"}))), Some("Edit(src/*)".into()));
        assert!(files.matches(&call("Edit", json!({"file_path": "docs/a.md"}))).is_none());
        assert!(files.matches(&call("NotebookEdit", json!({"notebook_path": "n.ipynb"}))).is_some());
        assert!(files.matches(&call("NotebookEdit", json!({"file_path": "n.ipynb"}))).is_some());
        assert!(files.matches(&call("WebFetch", json!({"url": "https://evil.com/x"}))).is_some());
        // The first rule that holds is named.
        let two = policy(&["Bash(git *)", "Bash"]);
        assert_eq!(two.matches(&bash("git log")), Some("Bash(git *)".into()));
        assert_eq!(two.matches(&bash("ls")), Some("Bash".into()));
        // Whitespace outside is ignored; inside it is part of the glob; patterns stay as given.
        let spaced = policy(&["  Bash( git*) "]);
        assert!(spaced.matches(&bash(" git x")).is_some() && spaced.matches(&bash("git x")).is_none());
        assert_eq!(spaced.patterns(), ["  Bash( git*) "]);
        // Parentheses inside the glob are literal.
        assert!(policy(&["Bash(echo (x))"]).matches(&bash("echo (x)")).is_some());
    }

    #[test]
    fn policy_refusals() {
        let err = |p: &[&str]| Policy::parse(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap_err();
        assert_eq!(err(&[]).to_string(), "an approval policy has 1 to 32 patterns, not 0");
        assert!(matches!(err(&["Bash"; 33]), PolicyError::Count(33)));
        for (bad, why) in [
            ("", "is empty"),
            ("   ", "is empty"),
            ("Bash(", "`(` without a `)`"),
            ("Bash(x) y", "`(` without a `)`"),
            ("(x)", "not a tool name before `(`"),
            ("Ba sh", "not a tool name"),
            ("Bash (x)", "not a tool name before `(`"),
            ("Bash)", "not a tool name"),
            ("Bash()", "empty parentheses"),
            ("Bash(x\ty)", "control character"),
            ("**", "not a tool name"),
        ] {
            let e = err(&[bad]).to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
            assert!(e.contains("a pattern is `*`, `Tool` or `Tool(glob)`"), "{e}");
        }
        let long = format!("Bash({})", "x".repeat(200));
        assert!(err(&[&long]).to_string().contains("206 characters: a pattern is at most 200"));
        assert_eq!(policy(&["*"]).patterns(), ["*"]);
        assert_eq!(serde_json::to_value(policy(&["Bash", "Write(*)"])).unwrap(), json!(["Bash", "Write(*)"]));
    }

    #[test]
    fn hook_matchers() {
        assert_eq!(policy(&["Bash(git push*)", "Write", "Bash"]).hook_matcher(), "^(Bash|Write)$");
        assert_eq!(policy(&["mcp__gh__create_pr"]).hook_matcher(), "^(mcp__gh__create_pr)$");
        assert_eq!(policy(&["Write", "*"]).hook_matcher(), ".*");
        assert_eq!(policy(&["my.tool"]).hook_matcher(), "^(my\\.tool)$");
    }

    #[test]
    fn hook_ends() {
        assert_eq!(
            hook_output(Decision::Deny, "denied in hangar: no"),
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                   "permissionDecisionReason": "denied in hangar: no"}})
        );
        assert_eq!(hook_output(Decision::Allow, "ok")["hookSpecificOutput"]["permissionDecision"], "allow");
        let stdin = json!({
            "session_id": "s", "transcript_path": "/t", "cwd": "/w", "permission_mode": "default",
            "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": "git push", "description": "push"}, "tool_use_id": "toolu_9"
        });
        let c = hook_call(stdin.to_string().as_bytes()).unwrap();
        assert_eq!(
            c,
            ToolCall {
                name: "Bash".into(),
                input: json!({"command": "git push", "description": "push"}),
                use_id: Some("toolu_9".into())
            }
        );
        let c = hook_call(br#"{"tool_name":"TodoRead"}"#).unwrap();
        assert_eq!((c.input, c.use_id), (Value::Null, None));
        assert!(matches!(hook_call(br#"{"tool_input":{}}"#), Err(RequestError::NoToolName)));
        assert!(matches!(hook_call(br#"{"tool_name":7}"#), Err(RequestError::NoToolName)));
        assert!(matches!(hook_call(br#"{"tool_name":""}"#), Err(RequestError::EmptyToolName)));
        assert!(matches!(hook_call(b"[]"), Err(RequestError::Shape(_))));
        // An error never quotes the input back.
        let secret = br#"{"tool_name":"Bash","tool_input":{"command":"echo sk-SECRET"},"tool_use_id":7,"x":"#;
        assert!(!hook_call(secret).unwrap_err().to_string().contains("SECRET"));
    }
}
