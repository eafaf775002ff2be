//! The inbox protocol's files (`hangar_agents::inbox`): request files (written by the agent, read
//! by the relay: `Request::parse`), answer files (read by the agent-side command:
//! `Answer::parse`), Claude Code's `PreToolUse` hook stdin (`hook_call`), and approval policies
//! (`Policy::parse`, `matches`, `hook_matcher`) with the tool calls they are matched against;
//! every tool call read also goes through `summarize` and `ToolCall::fitted`.
//!
//! Input: a selector byte (its value mod 4), then
//! - 0: a request file; 1: an answer file; 2: a hook's stdin (each the rest of the bytes);
//! - 3: a tool name line, a tool input line (JSON; a line that is not JSON is taken as a JSON
//!   string), then the policy's patterns, one a line (none when nothing follows).
use hangar_agents::inbox::{
    hook_call, request_file_name, summarize, valid_request_id, Answer, Ask, Outcome, Policy, PolicyError, Request,
    RequestError, ToolCall, MAX_FILE_BYTES, MAX_HOOK_INPUT_BYTES, MAX_LABEL_CHARS, MAX_OPTIONS, MAX_OPTION_CHARS,
    MAX_PATTERNS, MAX_PATTERN_CHARS, MAX_SUMMARY_CHARS, MAX_TEXT_CHARS, PROTOCOL,
};
use proptest::prelude::*;
use serde_json::{json, Value};

use crate::{input::Input, property, Failure, Runs, Target};

pub const TARGET: Target = Target {
    name: "inbox_files",
    about: "the inbox protocol's files (hangar-agents): a parsed request or answer is within its \
            limits, round-trips through to_json, and names a plain file; a well-formed one is \
            accepted as written (texts cut), one broken field refuses it with that field's error; \
            a hook's stdin gives the call it holds, accepted exactly when its tool name is a \
            label, errors never quoting it; a policy is accepted exactly when its patterns are of \
            the grammar, keeps them, matches as a reference glob matcher says, and its hook \
            matcher selects every tool it matches; summaries are short lines and fitted inputs \
            fit, cut only where their doc says",
    run,
    props,
};

/// A value the checks look for in error messages: they must never quote the hook's input.
const SECRET: &str = "sk-fuzz-SECRET-0123";
/// `envd/src/agent/approve.rs`'s `REQUEST_OVERHEAD` (private there): the approve command fits a
/// call's input in `MAX_FILE_BYTES` minus this, counting on the rest of the request to fit in it.
const APPROVE_OVERHEAD: usize = 8 * 1024;
/// The JSON of the shortest input `fitted` can make, `"…"`: below it nothing fits.
const ELLIPSIS_JSON: usize = 5;
/// Past this many chars the reference glob matcher (quadratic at worst) is not run.
const MODEL_FIELD_CHARS: usize = 10_000;
/// An error message's bound, whatever the input: these go to logs and to the agent.
const MAX_ERROR_BYTES: usize = 4096;

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    match input.byte() % 4 {
        0 => request(input.rest()),
        1 => answer(input.rest()),
        2 => hook(input.rest()),
        _ => {
            let name = String::from_utf8_lossy(input.line()).into_owned();
            let line = input.line();
            let tool_input = serde_json::from_slice(line)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(line).into_owned()));
            let rest = input.rest();
            let patterns: Vec<String> = if rest.is_empty() {
                Vec::new()
            } else {
                rest.split(|b| *b == b'\n').map(|p| String::from_utf8_lossy(p).into_owned()).collect()
            };
            let call = ToolCall { name, input: tool_input, use_id: None };
            policy(&patterns, &call);
            tool_call(&call);
        }
    }
}

// --- requests and answers ---------------------------------------------------------------------

/// `[a-z0-9-]{8,64}`, not `progress-...`: written out rather than through `valid_request_id`,
/// since the relay puts an answer's id unquoted into a shell script.
fn plain_id(id: &str) -> bool {
    (8..=64).contains(&id.len())
        && id.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !id.starts_with("progress-")
}

fn label_ok(s: &str) -> bool {
    s.chars().count() <= MAX_LABEL_CHARS && !s.chars().any(char::is_control)
}

fn text_ok(what: &str, text: &str) {
    assert!(text.chars().count() <= MAX_TEXT_CHARS, "{what}: {} chars", text.chars().count());
}

/// A name a file can be given in a directory, that reaches nowhere else.
fn plain_file_name(name: &str) {
    assert!(name.ends_with(".json") && name.len() > ".json".len() && name.len() <= 255, "{name:?}");
    assert!(!name.starts_with('.') && !name.contains(".."), "{name:?}");
    assert!(name.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.')), "{name:?}");
}

fn refusal(message: &str) {
    assert!(!message.is_empty(), "a refusal says why");
    assert!(message.len() <= MAX_ERROR_BYTES, "a refusal stays short: {} bytes", message.len());
}

fn request(bytes: &[u8]) {
    let req = match Request::parse(bytes) {
        Ok(r) => r,
        Err(e) => return refusal(&e.to_string()),
    };
    assert!(bytes.len() <= MAX_FILE_BYTES);
    assert_eq!(req.v, PROTOCOL);
    assert!(plain_id(&req.id) && valid_request_id(&req.id), "id {:?}", req.id);
    for label in [&req.session, &req.turn].into_iter().flatten() {
        assert!(label_ok(label), "label {label:?}");
    }
    assert!(req.created_at.is_finite());
    match &req.ask {
        Ask::Question { text, options } => {
            assert!(!text.trim().is_empty());
            text_ok("question", text);
            assert!(options.len() <= MAX_OPTIONS, "{} options", options.len());
            for o in options {
                assert!(o.chars().count() <= MAX_OPTION_CHARS && !o.trim().is_empty(), "option {o:?}");
            }
        }
        Ask::Progress { text, pct } => {
            assert!(!text.trim().is_empty());
            text_ok("progress", text);
            assert!(pct.is_none_or(|p| p <= 100), "pct {pct:?}");
        }
        Ask::Tampered { request, held } => {
            assert!(plain_id(request), "request {request:?}");
            assert!(!held.name.is_empty() && label_ok(&held.name), "tool name {:?}", held.name);
            tool_call(held);
        }
        Ask::Approval { tool } => {
            assert!(!tool.name.is_empty() && label_ok(&tool.name), "tool name {:?}", tool.name);
            assert!(tool.use_id.as_deref().is_none_or(label_ok), "use_id {:?}", tool.use_id);
            tool_call(tool);
        }
    }
    let name = request_file_name(&req);
    plain_file_name(&name);
    // A progress file and a request's file can never be taken for one another.
    match &req.ask {
        Ask::Progress { .. } => assert!(name.starts_with("progress-"), "{name}"),
        _ => assert_eq!(name, format!("{}.json", req.id)),
    }
    let json = req.to_json();
    if json.len() > MAX_FILE_BYTES {
        // serde_json writes a float as `100000.0` however it was read (`1e5`), so a file near
        // the limit may grow past it when written again; `Request::check` refuses that.
        assert!(matches!(Request::parse(json.as_bytes()), Err(RequestError::TooBig { .. })));
        return;
    }
    match Request::parse(json.as_bytes()) {
        Ok(again) => assert!(same_request(&again, &req), "to_json, then parse: {again:?} from {req:?}"),
        Err(e) => panic!("a parsed request's JSON is refused: {e}"),
    }
}

fn answer(bytes: &[u8]) {
    let a = match Answer::parse(bytes) {
        Ok(a) => a,
        Err(e) => return refusal(&e.to_string()),
    };
    assert!(bytes.len() <= MAX_FILE_BYTES);
    assert_eq!(a.v, PROTOCOL);
    assert!(plain_id(&a.id) && valid_request_id(&a.id), "id {:?}", a.id);
    assert!(a.at.is_finite());
    match &a.outcome {
        Outcome::Allow { reason, .. } | Outcome::Deny { reason } => {
            if let Some(r) = reason {
                text_ok("reason", r);
            }
        }
        Outcome::Answer { text } => text_ok("answer", text),
        Outcome::Expired { reason } => text_ok("expired", reason),
    }
    // The agent-side command waits for `<id>.json`.
    plain_file_name(&format!("{}.json", a.id));
    let json = a.to_json();
    if json.len() > MAX_FILE_BYTES {
        // As for requests: numbers may grow when written again (`at`, here).
        assert!(matches!(Answer::parse(json.as_bytes()), Err(RequestError::TooBig { .. })));
        return;
    }
    match Answer::parse(json.as_bytes()) {
        Ok(again) => assert!(same_answer(&again, &a), "to_json, then parse: {again:?} from {a:?}"),
        Err(e) => panic!("a parsed answer's JSON is refused: {e}"),
    }
}

/// Floats within two units in the last place: without its `float_roundtrip` feature (which this
/// workspace does not turn on) serde_json reads a float it wrote back to within two, not exactly:
/// `1810171001.1824257` as `1810171001.1824255`. (It rounds three times, each within half a unit;
/// 20 million random doubles written and read back were all within two.)
fn close(a: f64, b: f64) -> bool {
    a == b || (a.is_sign_negative() == b.is_sign_negative() && a.to_bits().abs_diff(b.to_bits()) <= 2)
}

/// JSON values equal but for floats `close` to one another.
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            x.as_f64().zip(y.as_f64()).is_some_and(|(x, y)| close(x, y))
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|((k, x), (l, y))| k == l && same_json(x, y))
        }
        _ => a == b,
    }
}

/// Requests equal but for floats (`created_at`, numbers in a tool's input) `close` to one another.
fn same_request(a: &Request, b: &Request) -> bool {
    let ask = match (&a.ask, &b.ask) {
        (Ask::Approval { tool: x }, Ask::Approval { tool: y })
        | (Ask::Tampered { held: x, .. }, Ask::Tampered { held: y, .. }) => {
            (&x.name, &x.use_id) == (&y.name, &y.use_id)
                && same_json(&x.input, &y.input)
                && matches!((&a.ask, &b.ask), (Ask::Approval { .. }, Ask::Approval { .. }))
                    | matches!((&a.ask, &b.ask), (Ask::Tampered { request: r, .. }, Ask::Tampered { request: s, .. }) if r == s)
        }
        (x, y) => x == y,
    };
    ask && close(a.created_at, b.created_at) && (a.v, &a.id, &a.session, &a.turn) == (b.v, &b.id, &b.session, &b.turn)
}

fn same_answer(a: &Answer, b: &Answer) -> bool {
    close(a.at, b.at) && (a.v, &a.id, &a.outcome) == (b.v, &b.id, &b.outcome)
}

// --- the hook's stdin and tool calls ----------------------------------------------------------

fn hook(bytes: &[u8]) {
    // What hook_call must make of it, from its doc: a JSON object with a `tool_name` string that
    // is a non-empty label, and a `tool_use_id` that is a label if it is a string.
    let value: Option<Value> =
        if bytes.len() <= MAX_HOOK_INPUT_BYTES { serde_json::from_slice(bytes).ok() } else { None };
    let object = value.as_ref().and_then(Value::as_object);
    let name = object.and_then(|o| o.get("tool_name")).and_then(Value::as_str);
    let use_id = object.and_then(|o| o.get("tool_use_id")).and_then(Value::as_str);
    let valid = name.is_some_and(|n| !n.is_empty() && label_ok(n)) && use_id.is_none_or(label_ok);
    match hook_call(bytes) {
        Ok(call) => {
            assert!(valid, "accepted: {call:?}");
            assert!(!call.name.is_empty());
            assert_eq!(Some(call.name.as_str()), name);
            assert_eq!(call.use_id.as_deref(), use_id);
            let input = object.and_then(|o| o.get("tool_input")).cloned().unwrap_or(Value::Null);
            assert_eq!(call.input, input);
            tool_call(&call);
            approval_fits(&call);
        }
        Err(e) => {
            assert!(!valid, "refused: {e}");
            let message = e.to_string();
            refusal(&message);
            assert!(!message.contains(SECRET), "an error quotes the input: {message}");
        }
    }
}

/// The approval request the approve command builds from a hook's call (its input fitted) fits in
/// a request file, even with every other field at its longest.
fn approval_fits(call: &ToolCall) {
    let longest = "\u{1d11e}".repeat(MAX_LABEL_CHARS);
    let req = Request {
        v: PROTOCOL,
        id: "a".repeat(64),
        session: Some(longest.clone()),
        turn: Some(longest),
        created_at: f64::MIN,
        ask: Ask::Approval { tool: call.fitted(MAX_FILE_BYTES - APPROVE_OVERHEAD) },
    };
    if let Err(e) = req.check() {
        panic!("the approve command's request is refused: {e}");
    }
}

/// `summarize` and `fitted` on any call.
fn tool_call(call: &ToolCall) {
    let s = summarize(call);
    assert!(s.chars().count() <= MAX_SUMMARY_CHARS, "summary of {} chars", s.chars().count());
    assert!(!s.chars().any(char::is_control), "a summary is one line: {s:?}");
    if !call.name.is_empty()
        && call.name.chars().count() < 100
        && !call.name.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        assert!(s.starts_with(&call.name), "{s:?} names {:?}", call.name);
    }
    let input_len = call.input.to_string().len();
    for max in [0, ELLIPSIS_JSON, 64, 1024] {
        fitted(call, max, input_len);
    }
}

/// What `ToolCall::fitted`'s doc promises: the same call, its input within `max` bytes of JSON
/// (from `"…"` up: nothing shorter is a cut input), made of the input's longest strings cut
/// (ending in "…") or, failing that, of its JSON text cut.
fn fitted(call: &ToolCall, max: usize, input_len: usize) {
    let f = call.fitted(max);
    assert_eq!((&f.name, &f.use_id), (&call.name, &call.use_id));
    if input_len <= max {
        assert_eq!(f.input, call.input, "an input that fits is left alone");
        return;
    }
    let len = f.input.to_string().len();
    assert!(len <= max.max(ELLIPSIS_JSON), "fitted({max}) is {len} bytes");
    let text = call.input.to_string();
    let whole_text_cut = f.input.as_str().and_then(|s| s.strip_suffix('…')).is_some_and(|h| text.starts_with(h));
    assert!(whole_text_cut || strings_cut(&call.input, &f.input), "fitted({max}): {} from {}", f.input, text);
}

/// `cut` is `v` with some strings cut to a prefix and "…", nothing else changed.
fn strings_cut(v: &Value, cut: &Value) -> bool {
    match (v, cut) {
        (Value::String(s), Value::String(c)) => s == c || c.strip_suffix('…').is_some_and(|h| s.starts_with(h)),
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| strings_cut(x, y)),
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|((k, x), (l, y))| k == l && strings_cut(x, y))
        }
        _ => v == cut,
    }
}

// --- policies ---------------------------------------------------------------------------------

/// The grammar of a pattern, from `Policy`'s doc: `*`, `Tool` or `Tool(glob)` once trimmed, tool
/// names of `[A-Za-z0-9_.-]`, a non-empty glob; at most `MAX_PATTERN_CHARS`, no control chars.
/// The tool (`None`: every tool) and the glob (`None`: any input) of a valid one.
fn rule(pattern: &str) -> Option<(Option<&str>, Option<String>)> {
    if pattern.chars().count() > MAX_PATTERN_CHARS || pattern.chars().any(char::is_control) {
        return None;
    }
    let t = pattern.trim();
    if t == "*" {
        return Some((None, None));
    }
    let (tool, glob) = match t.split_once('(') {
        None => (t, None),
        Some((tool, rest)) => (tool, Some(rest.strip_suffix(')')?)),
    };
    if tool.is_empty() || !tool.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-')) {
        return None;
    }
    // The legacy prefix form, `Bash(git push:*)`, is `Bash(git push*)`.
    let glob = glob.map(|g| g.strip_suffix(":*").map(|p| format!("{p}*")).unwrap_or_else(|| g.to_string()));
    if glob.as_deref() == Some("") {
        return None;
    }
    Some((Some(tool), glob))
}

/// The fields a glob is matched against, from `Policy`'s doc: Bash's `command`, the file tools'
/// path, WebFetch's `url`, WebSearch's `query`; any other tool's input (and a known tool's
/// without its field) as compact JSON.
fn primary(call: &ToolCall) -> Vec<String> {
    let keys: &[&str] = match call.name.as_str() {
        "Bash" => &["command"],
        "Write" | "Edit" | "MultiEdit" | "Read" => &["file_path"],
        "NotebookEdit" => &["notebook_path", "file_path"],
        "WebFetch" => &["url"],
        "WebSearch" => &["query"],
        _ => &[],
    };
    let found: Vec<String> =
        keys.iter().filter_map(|k| call.input.get(*k).and_then(Value::as_str)).map(str::to_string).collect();
    if found.is_empty() {
        vec![call.input.to_string()]
    } else {
        found
    }
}

/// The textbook wildcard matcher (`*` any run of chars, everything else itself), by backtracking
/// to the last star: a different algorithm from the policy's.
fn wildcard(glob: &[char], s: &[char]) -> bool {
    let (mut g, mut i, mut star, mut mark) = (0, 0, None, 0);
    while i < s.len() {
        if g < glob.len() && glob[g] != '*' && glob[g] == s[i] {
            g += 1;
            i += 1;
        } else if g < glob.len() && glob[g] == '*' {
            star = Some(g);
            mark = i;
            g += 1;
        } else if let Some(st) = star {
            g = st + 1;
            mark += 1;
            i = mark;
        } else {
            return false;
        }
    }
    glob[g..].iter().all(|c| *c == '*')
}

/// Whether a valid pattern holds a call; `None` when a field is too long to check.
fn holds(pattern: &str, call: &ToolCall) -> Option<bool> {
    let (tool, glob) = rule(pattern)?;
    match (tool, glob) {
        (None, _) => Some(true),
        (Some(t), _) if t != call.name => Some(false),
        (Some(_), None) => Some(true),
        (Some(_), Some(glob)) => {
            let glob: Vec<char> = glob.chars().collect();
            let mut any = false;
            for field in primary(call) {
                if field.len() > MODEL_FIELD_CHARS {
                    return None;
                }
                any |= wildcard(&glob, &field.chars().collect::<Vec<_>>());
            }
            Some(any)
        }
    }
}

fn policy(patterns: &[String], call: &ToolCall) {
    let valid = (1..=MAX_PATTERNS).contains(&patterns.len()) && patterns.iter().all(|p| rule(p).is_some());
    let p = match Policy::parse(patterns) {
        Ok(p) => p,
        Err(e) => {
            assert!(!valid, "{patterns:?} refused: {e}");
            let message = e.to_string();
            refusal(&message);
            match e {
                PolicyError::Count(n) => assert_eq!(n, patterns.len()),
                PolicyError::Bad { .. } => assert!(message.contains("a pattern is `*`, `Tool` or `Tool(glob)`")),
            }
            return;
        }
    };
    assert!(valid, "{patterns:?} accepted");
    assert_eq!(p.patterns(), patterns);
    assert_eq!(serde_json::to_value(&p).ok(), Some(json!(patterns)), "a policy is stored as its patterns");

    // `.*`, or `^(A|B)$`: the rules' tools, each once, in order, `.` escaped.
    let matcher = p.hook_matcher();
    let every_tool = patterns.iter().any(|p| p.trim() == "*");
    let selected: Option<Vec<String>> = if matcher == ".*" {
        assert!(every_tool, "{matcher} for {patterns:?}");
        None
    } else {
        assert!(!every_tool, "{matcher} for {patterns:?}");
        let inner = matcher.strip_prefix("^(").and_then(|m| m.strip_suffix(")$"));
        let Some(inner) = inner else { panic!("hook matcher {matcher:?}") };
        let names: Vec<String> = inner.split('|').map(|n| n.replace("\\.", ".")).collect();
        for (escaped, name) in inner.split('|').zip(&names) {
            assert!(!name.is_empty(), "{matcher:?}");
            assert!(
                escaped.replace("\\.", "").bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-')),
                "a regex character in {matcher:?}"
            );
        }
        let mut tools: Vec<String> = Vec::new();
        for (tool, _) in patterns.iter().filter_map(|p| rule(p)) {
            if let Some(t) = tool.filter(|t| !tools.iter().any(|x| x == t)) {
                tools.push(t.to_string());
            }
        }
        assert_eq!(names, tools, "{matcher:?} for {patterns:?}");
        Some(names)
    };

    let got = p.matches(call);
    // The hook runs only for the tools its matcher selects: a call a rule holds that it missed
    // would never be asked about.
    if got.is_some() {
        assert!(selected.as_ref().is_none_or(|names| names.contains(&call.name)), "{matcher:?} misses {:?}", call.name);
    }
    // The first pattern that holds, as given.
    let mut want = None;
    for pattern in patterns {
        match holds(pattern, call) {
            Some(true) => {
                want = Some(pattern.clone());
                break;
            }
            Some(false) => {}
            None => return,
        }
    }
    assert_eq!(got, want, "{patterns:?} on {call:?}");
}

// --- properties ---------------------------------------------------------------------------------

/// A regex strategy, parsed once: a `&str` strategy parses its regex again for every case.
fn re(pattern: &'static str) -> impl Strategy<Value = String> {
    match proptest::string::string_regex(pattern) {
        Ok(s) => s,
        Err(e) => panic!("the generator's regex {pattern:?}: {e}"),
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("JSON numbers are finite", |f| f.is_finite()).prop_map(Value::from),
        re(".{0,12}").prop_map(Value::String),
        Just(Value::String(SECRET.to_string())),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(re("[a-z_]{1,10}"), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn valid_id() -> impl Strategy<Value = String> {
    // Mostly short: each random char costs (proptest's RNG dominates a case in a debug build).
    prop_oneof![4 => re("[a-z0-9-]{8,16}"), 1 => re("[a-z0-9-]{56,64}")]
        .prop_filter("not a progress file's", |id| !id.starts_with("progress-"))
}

fn label() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => re("[^\\p{Cc}]{0,12}"),
        1 => Just("\u{1d11e}".repeat(MAX_LABEL_CHARS)),
    ]
}

/// A text to ask with: short, or around the cut (in chars of more than one byte, sometimes).
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => re("[a-zA-Z0-9é?][^\\p{Cc}]{0,16}"),
        1 => (re("[a-zé]"), MAX_TEXT_CHARS - 8..MAX_TEXT_CHARS + 8).prop_map(|(c, n)| c.repeat(n)),
    ]
}

/// The text a cut text reads as.
fn cut(text: &str) -> String {
    text.chars().take(MAX_TEXT_CHARS).collect()
}

fn tool_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Bash".to_string()),
        Just("Write".to_string()),
        Just("Edit".to_string()),
        Just("Read".to_string()),
        Just("NotebookEdit".to_string()),
        Just("WebFetch".to_string()),
        Just("WebSearch".to_string()),
        Just("mcp__gh__create_pr".to_string()),
        Just("my.tool".to_string()),
        re("[A-Za-z0-9_.-]{1,12}"),
    ]
}

fn tool() -> impl Strategy<Value = ToolCall> {
    (tool_name(), json_value(), proptest::option::of(re("toolu_[a-z0-9]{0,12}")))
        .prop_map(|(name, input, use_id)| ToolCall { name, input, use_id })
}

/// An option: short, or up to the longest there may be.
fn option() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => re("[a-zé0-9][^\\p{Cc}]{0,12}"),
        1 => (re("[a-zé ]"), 0..MAX_OPTION_CHARS).prop_map(|(c, n)| format!("x{}", c.repeat(n))),
    ]
}

fn ask() -> impl Strategy<Value = Ask> {
    prop_oneof![
        (text(), proptest::collection::vec(option(), 0..=MAX_OPTIONS))
            .prop_map(|(text, options)| Ask::Question { text, options }),
        tool().prop_map(|tool| Ask::Approval { tool }),
        (text(), proptest::option::of(0u8..=100)).prop_map(|(text, pct)| Ask::Progress { text, pct }),
    ]
}

fn created_at() -> impl Strategy<Value = f64> {
    prop_oneof![
        (1_700_000_000.0..1_900_000_000.0f64),
        any::<f64>().prop_filter("JSON numbers are finite", |f| f.is_finite()),
    ]
}

fn valid_request() -> impl Strategy<Value = Request> {
    (valid_id(), proptest::option::of(label()), proptest::option::of(label()), created_at(), ask())
        .prop_map(|(id, session, turn, created_at, ask)| Request { v: PROTOCOL, id, session, turn, created_at, ask })
}

/// One way to break a request or an answer, and what the parser must say to it.
#[derive(Debug, Clone, Copy)]
enum Break {
    Version,
    VersionType,
    Id,
    Session,
    Turn,
    BlankText,
    TooManyOptions,
    LongOption,
    BlankOption,
    Pct,
    EmptyToolName,
    LongToolName,
    UseId,
    UnknownKind,
    TooBig,
}

const BREAKS: [Break; 15] = [
    Break::Version,
    Break::VersionType,
    Break::Id,
    Break::Session,
    Break::Turn,
    Break::BlankText,
    Break::TooManyOptions,
    Break::LongOption,
    Break::BlankOption,
    Break::Pct,
    Break::EmptyToolName,
    Break::LongToolName,
    Break::UseId,
    Break::UnknownKind,
    Break::TooBig,
];

fn bad_id() -> impl Strategy<Value = String> {
    prop_oneof![
        re("[a-z0-9-]{0,7}"),
        re("[a-z0-9-]{65,70}"),
        re("progress-[a-z0-9-]{0,12}"),
        re("[a-z0-9]{4}[A-Z/._ \u{0}é][a-z0-9]{4}"),
        Just("../../../etc/passwd".to_string()),
    ]
}

fn bad_label() -> impl Strategy<Value = String> {
    prop_oneof![
        re("[a-z]{0,8}[\u{0}\t\r\u{7f}\u{85}][a-z]{0,8}"),
        (MAX_LABEL_CHARS + 1..MAX_LABEL_CHARS + 4).prop_map(|n| "é".repeat(n)),
    ]
}

/// A well-formed request, perhaps with one thing broken (a bad id or label to break it with, a
/// number over a limit).
type RequestCase = (Request, Option<Break>, String, u64);

fn request_case() -> impl Strategy<Value = RequestCase> {
    let b = prop_oneof![1 => Just(None), 2 => proptest::sample::select(BREAKS.to_vec()).prop_map(Some)];
    (valid_request(), b, prop_oneof![bad_id(), bad_label()], 101u64..100_000)
}

/// Whether a parser's error is the one a break calls for.
type Expected = fn(&RequestError) -> bool;

/// The request's file with its break applied, and the error it calls for; `None` for the file as
/// written (no break, or one that does not apply to its kind).
fn break_request(case: &RequestCase) -> Option<(String, Expected)> {
    let (req, b, bad, n) = case;
    let b = (*b)?;
    let mut v = serde_json::to_value(req).ok()?;
    let kind = v.get("kind").and_then(Value::as_str).map(str::to_string);
    let kind = kind.as_deref();
    let field = |f: &'static str| -> Expected {
        match f {
            "session" => |e| matches!(e, RequestError::BadField { field: "session", .. }),
            "turn" => |e| matches!(e, RequestError::BadField { field: "turn", .. }),
            "tool.name" => |e| matches!(e, RequestError::BadField { field: "tool.name", .. }),
            _ => |e| matches!(e, RequestError::BadField { field: "tool.use_id", .. }),
        }
    };
    let check: Expected = match (b, kind) {
        (Break::Version, _) => {
            v["v"] = json!(n);
            |e| matches!(e, RequestError::UnknownVersion(_))
        }
        (Break::VersionType, _) => {
            v["v"] = json!("1");
            |e| matches!(e, RequestError::Shape(_))
        }
        (Break::Id, _) => {
            // The independent predicate: the parser's own would hide a change to it.
            if plain_id(bad) {
                return None;
            }
            v["id"] = json!(bad);
            |e| matches!(e, RequestError::BadId(_))
        }
        (Break::Session | Break::Turn, _) => {
            if label_ok(bad) {
                return None;
            }
            let f = if matches!(b, Break::Session) { "session" } else { "turn" };
            v[f] = json!(bad);
            field(f)
        }
        (Break::BlankText, Some("question")) => {
            v["text"] = json!(" \t\n");
            |e| matches!(e, RequestError::QuestionWithoutText)
        }
        (Break::BlankText, Some("progress")) => {
            v["text"] = json!("");
            |e| matches!(e, RequestError::ProgressWithoutText)
        }
        (Break::TooManyOptions, Some("question")) => {
            v["options"] = json!(vec!["x"; MAX_OPTIONS + 1 + (*n as usize % 4)]);
            |e| matches!(e, RequestError::TooManyOptions { .. })
        }
        (Break::LongOption, Some("question")) => {
            v["options"] = json!(["a", "é".repeat(MAX_OPTION_CHARS + 1 + (*n as usize % 4))]);
            |e| matches!(e, RequestError::OptionTooLong { index: 2, .. })
        }
        (Break::BlankOption, Some("question")) => {
            v["options"] = json!(["a", "  "]);
            |e| matches!(e, RequestError::EmptyOption { index: 2 })
        }
        (Break::Pct, Some("progress")) => {
            v["pct"] = json!(n);
            |e| matches!(e, RequestError::PctOver100(_))
        }
        (Break::EmptyToolName, Some("approval")) => {
            v["tool"]["name"] = json!("");
            |e| matches!(e, RequestError::EmptyToolName)
        }
        (Break::LongToolName, Some("approval")) => {
            v["tool"]["name"] = json!("x".repeat(MAX_LABEL_CHARS + 1));
            field("tool.name")
        }
        (Break::UseId, Some("approval")) => {
            if label_ok(bad) {
                return None;
            }
            v["tool"]["use_id"] = json!(bad);
            field("tool.use_id")
        }
        (Break::UnknownKind, _) => {
            v["kind"] = json!("command");
            |e| matches!(e, RequestError::Shape(_))
        }
        (Break::TooBig, _) => return Some((padded(&v), |e| matches!(e, RequestError::TooBig { .. }))),
        _ => return None,
    };
    Some((v.to_string(), check))
}

/// `v` past the size limit, by whitespace after it (cheaper to make than a long string).
fn padded(v: &Value) -> String {
    format!("{v}{}", " ".repeat(MAX_FILE_BYTES))
}

fn request_input(case: &RequestCase) -> Vec<u8> {
    let mut v = vec![0u8];
    match break_request(case) {
        Some((text, _)) => v.extend_from_slice(text.as_bytes()),
        None => v.extend_from_slice(case.0.to_json().as_bytes()),
    }
    v
}

fn valid_answer() -> impl Strategy<Value = Answer> {
    let outcome = prop_oneof![
        (proptest::option::of(text()), "[0-9a-f]{64}").prop_map(|(reason, call)| Outcome::Allow { reason, call }),
        proptest::option::of(text()).prop_map(|reason| Outcome::Deny { reason }),
        text().prop_map(|text| Outcome::Answer { text }),
        text().prop_map(|reason| Outcome::Expired { reason }),
    ];
    (valid_id(), created_at(), outcome).prop_map(|(id, at, outcome)| Answer { v: PROTOCOL, id, at, outcome })
}

/// A well-formed answer, perhaps with one thing wrong: 0 a version, 1 an id, 2 an outcome,
/// 3 an answer without its text, 4 a non-string text, 5 its size.
type AnswerCase = (Answer, Option<u8>, String);

fn answer_case() -> impl Strategy<Value = AnswerCase> {
    let b = prop_oneof![1 => Just(None), 2 => (0u8..6).prop_map(Some)];
    (valid_answer(), b, bad_id().prop_filter("not an id", |id| !plain_id(id)))
}

/// The answer's file with its break applied; `None` for the file as written.
fn break_answer(case: &AnswerCase) -> Option<String> {
    let (a, which, bad) = case;
    let which = (*which)?;
    let mut v = serde_json::to_value(a).ok()?;
    match which {
        0 => v["v"] = json!(PROTOCOL + 1),
        1 => v["id"] = json!(bad),
        2 => v["outcome"] = json!("maybe"),
        3 => {
            v["outcome"] = json!("answer");
            v.as_object_mut()?.remove("text");
        }
        4 => {
            v["outcome"] = json!("answer");
            v["text"] = json!(["main"]);
        }
        _ => return Some(padded(&v)),
    }
    Some(v.to_string())
}

fn answer_input(case: &AnswerCase) -> Vec<u8> {
    let mut v = vec![1u8];
    match break_answer(case) {
        Some(text) => v.extend_from_slice(text.as_bytes()),
        None => v.extend_from_slice(case.0.to_json().as_bytes()),
    }
    v
}

/// A hook's stdin, from the fields Claude Code sends: the tool's name (sometimes not a label, or
/// not a string), its input (sometimes a Write of a file too large for a request), its use id,
/// the fields hangar ignores; sometimes cut short, or not an object.
fn hook_stdin() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        6 => tool_name().prop_map(Value::from),
        1 => Just(json!("")),
        1 => bad_label().prop_map(Value::from),
        1 => Just(json!(7)),
        1 => Just(Value::Null),
    ];
    let input = prop_oneof![
        40 => json_value(),
        // Around what the approve command fits an input in (few: they are slow to serialize).
        1 => (MAX_FILE_BYTES - APPROVE_OVERHEAD - 64..MAX_FILE_BYTES + 64)
            .prop_map(|n| json!({"file_path": "src/big.rs", "content": "é".repeat(n / 2)})),
    ];
    let use_id = prop_oneof![
        Just(Value::Null),
        re("toolu_[A-Za-z0-9]{0,16}").prop_map(Value::from),
        bad_label().prop_map(Value::from),
        Just(json!(9)),
    ];
    let shape = prop_oneof![8 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)];
    (name, input, use_id, shape, any::<prop::sample::Index>()).prop_map(|(name, input, use_id, shape, at)| {
        let mut o = serde_json::Map::new();
        for (k, v) in [("session_id", json!(SECRET)), ("cwd", json!("/work")), ("hook_event_name", json!("PreToolUse"))]
        {
            o.insert(k.into(), v);
        }
        if !name.is_null() {
            o.insert("tool_name".into(), name);
        }
        o.insert("tool_input".into(), input);
        if !use_id.is_null() {
            o.insert("tool_use_id".into(), use_id);
        }
        let text = Value::Object(o).to_string();
        match shape {
            0 => text,
            // Cut short: a syntax error somewhere inside (on a char boundary: the stdin is a str here).
            1 => {
                let mut end = at.index(text.len().max(1));
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text[..end].to_string()
            }
            _ => format!("[{text}]"),
        }
    })
}

// `property` takes a `fn(&S::Value)`, and the value is a String.
#[allow(clippy::ptr_arg)]
fn hook_input(stdin: &String) -> Vec<u8> {
    let mut v = vec![2u8];
    v.extend_from_slice(stdin.as_bytes());
    v
}

/// A policy and a call built from the same glob, so that rules hold about as often as not.
#[derive(Debug, Clone)]
struct PolicyCase {
    patterns: Vec<String>,
    name: String,
    input: Value,
}

fn glob_pieces() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(re("[a-z /.:()\"-]{0,4}"), 1..4)
}

const NEAR_MISSES: [&str; 12] =
    ["**", "* ", "Bash()", "Bash(", "Bash)", "(x)", "Ba sh", "Bash (x)", "Bash(x) y", "Bash(:*)", " Write ", ""];

fn policy_case() -> impl Strategy<Value = PolicyCase> {
    let pattern = prop_oneof![
        Just("*".to_string()),
        tool_name(),
        (tool_name(), glob_pieces()).prop_map(|(t, g)| format!("{t}({})", g.join("*"))),
        (tool_name(), re("[a-z ]{0,6}")).prop_map(|(t, g)| format!("{t}({g}:*)")),
        re("[ \t]{0,2}[A-Za-z(*)]{0,8}[ \t]{0,2}"),
        // Near misses of the grammar.
        proptest::sample::select(NEAR_MISSES.to_vec()).prop_map(str::to_string),
        re("[^\n]{0,12}"),
    ];
    let key = prop_oneof![
        Just("command"),
        Just("file_path"),
        Just("notebook_path"),
        Just("url"),
        Just("query"),
        Just("other")
    ];
    (
        tool_name(),
        glob_pieces(),
        proptest::collection::vec(re("[a-z /]{0,3}"), 4),
        any::<bool>(),
        key,
        proptest::collection::vec(pattern, 0..4),
        any::<prop::sample::Index>(),
        0u8..4,
    )
        .prop_map(|(name, pieces, fill, legacy, key, mut others, at, form)| {
            let glob = pieces.join("*");
            let own = if legacy { format!("{name}({glob}:*)") } else { format!("{name}({glob})") };
            let index = at.index(others.len() + 1);
            others.insert(index, own);
            // The field, from the glob's pieces: held (stars filled), or a piece short.
            let mut field = String::new();
            for (i, piece) in pieces.iter().enumerate() {
                if i > 0 {
                    field.push_str(&fill[i % fill.len()]);
                }
                field.push_str(piece);
            }
            if form == 1 {
                field.pop();
            }
            let input = match form {
                3 => json!({"title": field}),
                2 => Value::String(field),
                _ => Value::Object([(key.to_string(), Value::String(field))].into_iter().collect()),
            };
            PolicyCase { patterns: others, name, input }
        })
}

fn policy_input(case: &PolicyCase) -> Vec<u8> {
    let mut v = vec![3u8];
    v.extend_from_slice(case.name.as_bytes());
    v.push(b'\n');
    v.extend_from_slice(case.input.to_string().as_bytes());
    v.push(b'\n');
    v.extend_from_slice(case.patterns.join("\n").as_bytes());
    v
}

fn props(runner: &mut Runs) -> Result<(), Failure> {
    // A well-formed request is accepted as written, its texts cut; with one thing broken it is
    // refused, with that thing's error.
    property(runner, request_case(), request_input, |case| {
        run(&request_input(case));
        if let Some((text, expected)) = break_request(case) {
            match Request::parse(text.as_bytes()) {
                Ok(r) => panic!("{:?} accepted: {r:?}", case.1),
                Err(e) => assert!(expected(&e), "{:?} refused as {e:?}", case.1),
            }
            return;
        }
        let mut want = case.0.clone();
        match &mut want.ask {
            Ask::Question { text, .. } | Ask::Progress { text, .. } => *text = cut(text),
            Ask::Approval { .. } | Ask::Tampered { .. } => {}
        }
        match Request::parse(case.0.to_json().as_bytes()) {
            Ok(got) => assert!(same_request(&got, &want), "{got:?}"),
            Err(e) => panic!("a well-formed request is refused: {e}"),
        }
    })?;
    property(runner, answer_case(), answer_input, |case| {
        run(&answer_input(case));
        if let Some(text) = break_answer(case) {
            let got = Answer::parse(text.as_bytes());
            let right = match (case.1, &got) {
                (Some(0), Err(RequestError::UnknownVersion(n))) => *n == u64::from(PROTOCOL + 1),
                (Some(1), Err(RequestError::BadId(_)))
                | (Some(2..=4), Err(RequestError::Shape(_)))
                | (Some(5), Err(RequestError::TooBig { .. })) => true,
                _ => false,
            };
            assert!(right, "break {:?} gave {got:?}", case.1);
            return;
        }
        let mut want = case.0.clone();
        match &mut want.outcome {
            Outcome::Allow { reason: Some(t), .. } | Outcome::Deny { reason: Some(t) } => *t = cut(t),
            Outcome::Answer { text: t } | Outcome::Expired { reason: t } => *t = cut(t),
            Outcome::Allow { reason: None, .. } | Outcome::Deny { reason: None } => {}
        }
        match Answer::parse(case.0.to_json().as_bytes()) {
            Ok(got) => assert!(same_answer(&got, &want), "{got:?}"),
            Err(e) => panic!("a well-formed answer is refused: {e}"),
        }
    })?;
    // The harness has the model of what hook_call must accept,
    property(runner, hook_stdin(), hook_input, |stdin| run(&hook_input(stdin)))?;
    // and of what a policy must accept and match.
    property(runner, policy_case(), policy_input, |case| run(&policy_input(case)))
}
