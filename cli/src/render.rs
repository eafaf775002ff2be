//! Output: aligned tables, times as ages (`3m ago`), clock times, text made safe for a terminal,
//! colour, and `--json`. Everything here but the writers and the colour switch is pure.
use std::{
    io::Write,
    sync::atomic::{AtomicBool, Ordering},
};

use serde_json::Value;

use crate::client::Error;

/// Writes to stdout and flushes, so a stream's lines appear as they come.
pub fn out(text: &str) -> Result<(), Error> {
    let mut o = std::io::stdout().lock();
    o.write_all(text.as_bytes())?;
    o.flush()?;
    Ok(())
}

pub fn line(text: &str) -> Result<(), Error> {
    out(&format!("{text}\n"))
}

/// A note for the person on stderr, `hangar: ...`. Unlike `eprintln!`, a closed stderr
/// (`2>&-`) is no reason to panic: the note is dropped.
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::render::note_line(&format!($($arg)*))
    };
}

pub fn note_line(text: &str) {
    let _ = err_out(&format!("{text}\n"));
}

pub fn err_out(text: &str) -> Result<(), Error> {
    let mut o = std::io::stderr().lock();
    o.write_all(text.as_bytes())?;
    o.flush()?;
    Ok(())
}

/// One JSON document, as the relay sent it.
pub fn json(v: &Value) -> Result<(), Error> {
    line(&v.to_string())
}

/// Whether states are coloured: set once by `main` (`--color`, `NO_COLOR`, a terminal).
static COLOR: AtomicBool = AtomicBool::new(false);

pub fn set_color(on: bool) {
    COLOR.store(on, Ordering::Relaxed);
}

/// Whether `main` turned colour on, for output coloured by its own rules (`hangar diff`).
pub fn color() -> bool {
    COLOR.load(Ordering::Relaxed)
}

/// `--color auto`: on only when stdout is a terminal and `NO_COLOR` is unset or empty
/// (no-color.org); `always` and `never` decide alone.
pub fn color_wanted(choice: crate::args::Color, tty: bool, no_color: Option<&str>) -> bool {
    match choice {
        crate::args::Color::Always => true,
        crate::args::Color::Never => false,
        crate::args::Color::Auto => tty && no_color.is_none_or(str::is_empty),
    }
}

/// The SGR colour of a state's word: green for work that runs or succeeded, red for what failed,
/// yellow for what waits (on a person, a slot, a resume), dim for what was stopped or is off.
fn hue(state: &str) -> Option<&'static str> {
    Some(match state {
        "running" | "succeeded" | "ok" | "answered" | "allowed" => "32",
        "failed" | "crashed" | "gone" | "denied" | "error" | "timed_out" | "expired" => "31",
        "waiting_input" | "queued" | "starting" | "verifying" | "paused" | "approval" | "open" => "33",
        "cancelled" | "off" | "acked" | "revoked" => "2",
        _ => return None,
    })
}

/// A state's word, coloured when colour is on. The word is cleaned first: the escape added is
/// ours, never the relay's.
pub fn state(word: &str) -> String {
    paint(COLOR.load(Ordering::Relaxed), word)
}

/// `state`, colour decided by the caller (pure, for tests).
pub fn paint(on: bool, word: &str) -> String {
    let word = clean(word);
    // `failed (agent_error)`: the state is the first word.
    match hue(word.split(' ').next().unwrap_or_default()).filter(|_| on) {
        Some(code) => format!("\x1b[{code}m{word}\x1b[0m"),
        None => word,
    }
}

/// `text` in the colour of the state `by` (a fleet unit's label by its role).
pub fn paint_as(by: &str, text: &str) -> String {
    let text = clean(text);
    match hue(by).filter(|_| COLOR.load(Ordering::Relaxed)) {
        Some(code) => format!("\x1b[{code}m{text}\x1b[0m"),
        None => text,
    }
}

/// A JSON state as a cell, coloured (`cell` and `state`).
pub fn state_cell(v: &Value) -> String {
    state(&cell(v))
}

/// The characters a cell shows: its colour's escapes (ours alone: `clean` turned the relay's
/// into `?`) take no room.
fn width(s: &str) -> usize {
    let mut n = 0;
    let mut in_escape = false;
    for c in s.chars() {
        match c {
            '\x1b' => in_escape = true,
            'm' if in_escape => in_escape = false,
            _ if in_escape => {}
            _ => n += 1,
        }
    }
    n
}

/// A cost in US dollars as hangar shows one: `≈$1.42`, marked as what it is, an API-equivalent
/// estimate (the agent's tokens priced at API rates), not a bill.
pub fn usd(v: &Value, places: usize) -> Option<String> {
    v.as_f64().map(|c| format!("≈${c:.places$}"))
}

/// A table: a header row and aligned columns, two spaces apart; the last column is not padded.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let n = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(n) {
            widths[i] = widths[i].max(width(c));
        }
    }
    let mut s = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for r in std::iter::once(&header).chain(rows) {
        let mut l = String::new();
        for (i, w) in widths.iter().enumerate() {
            let c = r.get(i).map(String::as_str).unwrap_or("");
            if i + 1 == n {
                l.push_str(c);
            } else {
                l.push_str(c);
                l.push_str(&" ".repeat(w - width(c) + 2));
            }
        }
        s.push_str(l.trim_end());
        s.push('\n');
    }
    s
}

/// `key  value` lines, the keys aligned (a record's fields).
pub fn fields(pairs: &[(&str, String)]) -> String {
    let shown = || pairs.iter().filter(|(_, v)| !v.is_empty());
    let w = shown().map(|(k, _)| k.len()).max().unwrap_or(0);
    shown().map(|(k, v)| format!("{k:w$}  {v}\n")).collect()
}

/// Text from the relay made safe for a terminal: control characters (an agent's ANSI escapes,
/// say) become `?`, and line breaks and tabs a space, so one record stays one line.
pub fn clean(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\n' | '\r' | '\t' => ' ',
            c if c.is_control() => '?',
            c => c,
        })
        .collect()
}

/// `clean`, runs of spaces made one, cut to `max` characters with `…`.
pub fn clip(s: &str, max: usize) -> String {
    let s = clean(s).split_whitespace().collect::<Vec<_>>().join(" ");
    if s.chars().count() <= max {
        return s;
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// A JSON value as a cell: strings as they are (cleaned), null as `-`, others as JSON.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".to_string(),
        Value::String(s) => clean(s),
        Value::Bool(b) => if *b { "yes" } else { "no" }.to_string(),
        v => v.to_string(),
    }
}

pub fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// A span of time, short: `45s`, `3m`, `2h`, `4d`.
pub fn span(secs: f64) -> String {
    let s = secs.max(0.0) as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// An epoch time relative to `now`: `3m ago`, `in 59m`, `just now`.
pub fn ago(now: f64, t: f64) -> String {
    let d = now - t;
    if d.abs() < 1.0 {
        "just now".to_string()
    } else if d > 0.0 {
        format!("{} ago", span(d))
    } else {
        format!("in {}", span(-d))
    }
}

/// `ago` of a JSON time, `-` when it is not one.
pub fn ago_of(now: f64, v: &Value) -> String {
    v.as_f64().map(|t| ago(now, t)).unwrap_or_else(|| "-".to_string())
}

/// The wall-clock time of an epoch time, `HH:MM:SS`, `offset` seconds east of UTC.
pub fn hms(t: f64, offset: i64) -> String {
    let s = (t.floor() as i64 + offset).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// The local clock time of an epoch time.
pub fn clock(t: f64) -> String {
    hms(t, local_offset(t as i64))
}

/// The local time zone's offset from UTC at `t`, in seconds (0 if the C library cannot say).
fn local_offset(t: i64) -> i64 {
    let time = t as libc::time_t;
    // SAFETY: localtime_r reads `time` and writes only into `tm`, which is ours and zeroed
    // (a valid `tm`); it is the thread-safe form.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::localtime_r(&time, &mut tm) };
    if r.is_null() {
        0
    } else {
        tm.tm_gmtoff as i64
    }
}

/// A string field, `""` when absent or not a string.
pub fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_their_columns() {
        let t = table(
            &["NAME", "STATE", "COMMAND"],
            &[vec!["default".into(), "running".into(), "sleep 1".into()], vec!["a".into(), "paused".into(), "".into()]],
        );
        assert_eq!(t, "NAME     STATE    COMMAND\ndefault  running  sleep 1\na        paused\n");
        assert_eq!(table(&["A", "B"], &[]), "A  B\n");
    }

    #[test]
    fn cells_count_characters_not_bytes() {
        let t = table(&["X", "Y"], &[vec!["é".into(), "1".into()], vec!["ab".into(), "2".into()]]);
        assert_eq!(t, "X   Y\né   1\nab  2\n");
    }

    #[test]
    fn ages() {
        let now = 1_000_000.0;
        assert_eq!(ago(now, now - 0.4), "just now");
        assert_eq!(ago(now, now - 5.0), "5s ago");
        assert_eq!(ago(now, now - 180.0), "3m ago");
        assert_eq!(ago(now, now - 7300.0), "2h ago");
        assert_eq!(ago(now, now - 4.0 * 86_400.0), "4d ago");
        assert_eq!(ago(now, now + 3540.0), "in 59m");
        assert_eq!(ago_of(now, &json!(null)), "-");
        assert_eq!(ago_of(now, &json!(now - 60.0)), "1m ago");
    }

    #[test]
    fn clock_times() {
        assert_eq!(hms(1_764_525_600.25, 0), "18:00:00");
        assert_eq!(hms(1_764_525_600.0, 3600), "19:00:00");
        assert_eq!(hms(1_764_525_600.0, -19 * 3600), "23:00:00");
    }

    #[test]
    fn text_from_the_relay_cannot_drive_the_terminal() {
        assert_eq!(clean("a\x1b[2Jb\nc\td"), "a?[2Jb c d");
        assert_eq!(clip("  hello world  ", 5), "hell…");
        assert_eq!(clip("hello", 5), "hello");
        assert_eq!(clip("a \n   b\t\tc", 10), "a b c");
        assert_eq!(cell(&json!(null)), "-");
        assert_eq!(cell(&json!(true)), "yes");
        assert_eq!(cell(&json!(3)), "3");
        assert_eq!(cell(&json!("x\ny")), "x y");
    }

    #[test]
    fn states_are_coloured_only_when_asked_and_the_relays_escapes_never_pass() {
        assert_eq!(paint(true, "failed"), "\x1b[31mfailed\x1b[0m");
        assert_eq!(paint(true, "running"), "\x1b[32mrunning\x1b[0m");
        assert_eq!(paint(false, "failed"), "failed");
        assert_eq!(paint(true, "failed (agent_error)"), "\x1b[31mfailed (agent_error)\x1b[0m");
        assert_eq!(paint(true, "something-else"), "something-else");
        assert_eq!(paint(true, "fail\x1b[2Jed"), "fail?[2Jed");
        let t = table(&["A", "B"], &[vec![paint(true, "failed"), "1".into()], vec!["ok-ish".into(), "2".into()]]);
        assert_eq!(t, "A       B\n\x1b[31mfailed\x1b[0m  1\nok-ish  2\n");
    }

    #[test]
    fn color_is_for_terminals_without_no_color_unless_forced() {
        use crate::args::Color;
        assert!(color_wanted(Color::Auto, true, None));
        assert!(color_wanted(Color::Auto, true, Some("")));
        assert!(!color_wanted(Color::Auto, true, Some("1")));
        assert!(!color_wanted(Color::Auto, false, None));
        assert!(color_wanted(Color::Always, false, Some("1")));
        assert!(!color_wanted(Color::Never, true, None));
    }

    #[test]
    fn fields_align_and_skip_empty_values() {
        assert_eq!(
            fields(&[("id", "1".into()), ("state", "ok".into()), ("vanished", "".into())]),
            "id     1\nstate  ok\n"
        );
    }
}
