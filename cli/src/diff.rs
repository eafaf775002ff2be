//! `hangar diff SESSION [PATH]`: what an agent has changed since its turn started
//! (`GET /api/sessions/{ref}/diff`): a `git diff --stat`-like table, or with a path that file's
//! patch; `--json` prints the relay's answer. Coloured as every output is (`--color`, a terminal, `NO_COLOR`).

use clap::Args;
use serde_json::Value;

use crate::{
    client::{path, with_query, Error},
    render::{self, clean},
    Ctx,
};

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The session's name or id.
    pub session: String,
    /// One file's patch (its path as the table lists it) rather than the table.
    pub path: Option<String>,
    /// Compare with where turn N started (default: the latest turn that has started).
    #[arg(long, value_name = "N")]
    pub turn: Option<i64>,
}

pub async fn run(ctx: &Ctx, a: DiffArgs) -> Result<i32, Error> {
    let mut params = Vec::new();
    if let Some(p) = &a.path {
        params.push(("path", p.clone()));
    }
    if let Some(t) = a.turn {
        params.push(("turn", t.to_string()));
    }
    let v = ctx.client.get(&with_query(&path(&["api", "sessions", &a.session, "diff"]), &params)).await?;
    let paint = Paint(crate::render::color());
    ctx.print(&v, |v| if a.path.is_some() { patch(v, paint) } else { stat(v, paint) })
}

/// ANSI colour, or none.
#[derive(Clone, Copy)]
pub struct Paint(pub bool);

impl Paint {
    fn wrap(self, code: &str, s: &str) -> String {
        if self.0 && !s.is_empty() {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }

    fn green(self, s: &str) -> String {
        self.wrap("32", s)
    }

    fn red(self, s: &str) -> String {
        self.wrap("31", s)
    }

    fn cyan(self, s: &str) -> String {
        self.wrap("36", s)
    }

    fn bold(self, s: &str) -> String {
        self.wrap("1", s)
    }
}

/// Why there is no diff, when there is none (`repository: false`).
fn none(v: &Value) -> Option<String> {
    (v["repository"] == Value::Bool(false)).then(|| format!("no diff: {}\n", clean(render::s(v, "reason"))))
}

fn count(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

/// The summary as `git diff --stat` would have it: a line per file (its status letter, path,
/// `+added -removed` or `binary`), then the totals and what the diff is against.
pub fn stat(v: &Value, paint: Paint) -> String {
    if let Some(none) = none(v) {
        return none;
    }
    let files = v["files"].as_array().map(Vec::as_slice).unwrap_or_default();
    let rows: Vec<(String, String, String, String)> = files
        .iter()
        .map(|f| {
            let letter = match render::s(f, "status") {
                "added" => "A",
                "deleted" => "D",
                "renamed" => "R",
                _ => "M",
            };
            let name = match f["old_path"].as_str() {
                Some(old) => format!("{} → {}", clean(old), clean(render::s(f, "path"))),
                None => clean(render::s(f, "path")),
            };
            let (plus, minus) = if f["binary"] == Value::Bool(true) {
                ("binary".to_string(), String::new())
            } else {
                (format!("+{}", count(f, "added")), format!("-{}", count(f, "removed")))
            };
            (letter.to_string(), name, plus, minus)
        })
        .collect();
    let w_name = rows.iter().map(|r| r.1.chars().count()).max().unwrap_or(0);
    let w_plus = rows.iter().map(|r| r.2.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (letter, name, plus, minus) in &rows {
        let pad = " ".repeat(w_name - name.chars().count());
        let plus_pad = " ".repeat(w_plus - plus.len());
        let plus = if plus == "binary" { plus.clone() } else { paint.green(plus) };
        out.push_str(format!(" {letter} {name}{pad}  {plus_pad}{plus} {}", paint.red(minus)).trim_end());
        out.push('\n');
    }
    let t = &v["totals"];
    let n = count(t, "files");
    let base = v["base"].as_str().map(|b| format!(" at {}", clean(&b[..b.len().min(12)]))).unwrap_or_default();
    out.push_str(&format!(
        " {n} file{} changed, {} {} since turn {} started{base}\n",
        if n == 1 { "" } else { "s" },
        paint.green(&format!("+{}", count(t, "added"))),
        paint.red(&format!("-{}", count(t, "removed"))),
        v["turn"].as_i64().unwrap_or(0),
    ));
    if let Some(why) = v["truncated"].as_str() {
        out.push_str(&format!(" (cut: {})\n", clean(why)));
    }
    out
}

/// One file's patch, each line made safe for a terminal (tabs kept) and coloured as git does.
pub fn patch(v: &Value, paint: Paint) -> String {
    if let Some(none) = none(v) {
        return none;
    }
    let text = render::s(v, "patch");
    if text.is_empty() {
        return format!("{}: no change\n", clean(render::s(v, "path")));
    }
    let mut out = String::new();
    for line in text.lines() {
        let safe: String = line.split('\t').map(clean).collect::<Vec<_>>().join("\t");
        let shown = if line.starts_with("+++") || line.starts_with("---") || line.starts_with("diff --git") {
            paint.bold(&safe)
        } else if line.starts_with('+') {
            paint.green(&safe)
        } else if line.starts_with('-') {
            paint.red(&safe)
        } else if line.starts_with("@@") {
            paint.cyan(&safe)
        } else {
            safe
        };
        out.push_str(&shown);
        out.push('\n');
    }
    if let Some(why) = v["truncated"].as_str() {
        out.push_str(&format!("(cut: {})\n", clean(why)));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_table_is_like_git_diff_stat_and_colour_is_only_asked_for() {
        let v = json!({
            "session": "ses_1", "turn": 2, "repository": true, "base": "0123456789abcdef0123", "computed_at": 1.0,
            "files": [
                {"path": "src/a.rs", "old_path": null, "status": "modified", "added": 12, "removed": 3, "binary": false},
                {"path": "new\u{1b}[2J.txt", "old_path": null, "status": "added", "added": 4, "removed": 0, "binary": false},
                {"path": "b.rs", "old_path": "a.rs", "status": "renamed", "added": 0, "removed": 0, "binary": false},
                {"path": "logo.png", "old_path": null, "status": "added", "added": 0, "removed": 0, "binary": true}
            ],
            "totals": {"files": 4, "added": 16, "removed": 3}, "truncated": null
        });
        assert_eq!(
            stat(&v, Paint(false)),
            " M src/a.rs        +12 -3\n A new?[2J.txt      +4 -0\n R a.rs → b.rs      +0 -0\n A logo.png     binary\n \
             4 files changed, +16 -3 since turn 2 started at 0123456789ab\n"
        );
        assert!(stat(&v, Paint(true)).contains("\x1b[32m+12\x1b[0m \x1b[31m-3\x1b[0m"));
        let none = json!({"repository": false, "reason": "/w was in no git repository when turn 1 started"});
        assert_eq!(stat(&none, Paint(false)), "no diff: /w was in no git repository when turn 1 started\n");
    }

    #[test]
    fn a_patch_cannot_drive_the_terminal() {
        let v = json!({"path": "a", "patch": "--- a/a\n+++ b/a\n@@ -1 +1 @@\n-old\n+new\x1b]0;pwned\x07\tx\n", "truncated": "cut here"});
        assert_eq!(
            patch(&v, Paint(false)),
            "--- a/a\n+++ b/a\n@@ -1 +1 @@\n-old\n+new?]0;pwned?\tx\n(cut: cut here)\n"
        );
        assert!(patch(&v, Paint(true)).contains("\x1b[31m-old\x1b[0m"));
        assert_eq!(patch(&json!({"path": "a", "patch": ""}), Paint(false)), "a: no change\n");
    }
}
