//! Test runners in tool calls: which shell commands run tests, and the counts their output reports.
//!
//! Best effort and never inventive: a command is a test run only if one of its segments starts with
//! a known runner once the usual wrappers are peeled off, and counts come only from the runner's own
//! summary line. A count the summary does not print is null, and output with no summary gives no
//! result at all.

use serde_json::{Map, Value};

use crate::event::obj;

/// A test runner, as far as the command tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Runner {
    Pytest,
    Cargo,
    Nextest,
    Go,
    /// `npm test` and friends: whatever the package runs, most often jest or vitest.
    Node,
}

/// `command` without the shell wrappers a CLI adds: `/bin/bash -lc '<script>'`, `bash -c`, `sh -c`.
pub(crate) fn unwrap(command: &str) -> String {
    let mut cmd = command.trim().to_string();
    // Wrappers nest rarely; the bound keeps a hostile command from looping long.
    for _ in 0..4 {
        let segs = segments(&cmd);
        let [words] = segs.as_slice() else { break };
        match shell_script(words) {
            Some(script) => cmd = script.trim().to_string(),
            None => break,
        }
    }
    cmd
}

/// The runners that `command`'s segments start with, in order.
pub(crate) fn runners(command: &str) -> Vec<Runner> {
    let mut out = Vec::new();
    for words in segments(&unwrap(command)) {
        if let Some(r) = runner(peel(&words)) {
            if !out.contains(&r) {
                out.push(r);
            }
        }
    }
    out
}

/// The programs `command` runs: each segment's words (split at `;`, `&&`, `|`...), with the shell
/// wrappers (`bash -lc '...'`) and launchers (`env X=1`, `timeout 5`, `uv run`...) peeled off, so
/// the first word is the program. For callers that classify commands (the live picture's stages).
pub fn commands(command: &str) -> Vec<Vec<String>> {
    segments(&unwrap(command)).iter().map(|w| peel(w).to_vec()).filter(|w| !w.is_empty()).collect()
}

/// Whether `command` runs a test runner this crate knows (pytest, cargo test, go test, npm test...).
pub fn runs_tests(command: &str) -> bool {
    !runners(command).is_empty()
}

/// The phase a shell command puts the agent in.
pub(crate) fn command_phase(command: &str) -> &'static str {
    if !runners(command).is_empty() {
        return "running_tests";
    }
    let first = segments(&unwrap(command)).into_iter().find(|w| !w.is_empty() && w[0] != "cd");
    match first.as_deref().map(peel) {
        Some([head, ..]) if base(head) == "git" => "git",
        _ => "running_command",
    }
}

/// A `test.result`'s data (without `source: "agent"`) from a test command and its output, if the
/// output holds the summary of one of the command's runners.
pub(crate) fn test_result(command: &str, output: &str) -> Option<Map<String, Value>> {
    let output = strip_ansi(output);
    for r in runners(command) {
        let parsers: &[fn(&str) -> Option<Counts>] = match r {
            Runner::Pytest => &[pytest],
            Runner::Cargo => &[cargo],
            Runner::Nextest => &[nextest, cargo],
            Runner::Go => &[go],
            Runner::Node => &[jest, vitest],
        };
        if let Some(c) = parsers.iter().find_map(|p| p(&output)) {
            return Some(obj! {
                "framework" => c.framework,
                "passed" => c.passed,
                "failed" => c.failed,
                "errors" => c.errors,
                "skipped" => c.skipped,
                // Sums of decimal times pick up binary noise (0.03 + 0.41 = 0.43999999999999995).
                "duration_s" => c.duration_s.map(|d| (d * 1000.0).round() / 1000.0),
                "command" => crate::cut::summary(&unwrap(command), 200),
                "source" => "parsed",
            });
        }
    }
    None
}

#[derive(Debug, Default, PartialEq)]
struct Counts {
    framework: &'static str,
    passed: Option<u64>,
    failed: Option<u64>,
    errors: Option<u64>,
    skipped: Option<u64>,
    duration_s: Option<f64>,
}

// ---- commands -------------------------------------------------------------------------------

/// `s` split into shell words, in segments separated by `;`, `&&`, `||`, `|`, `&`, newlines and
/// parentheses. Quotes and backslashes are honoured; anything fancier (`$(...)`, here-docs) is
/// taken as plain words, which is enough to spot a runner.
fn segments(s: &str) -> Vec<Vec<String>> {
    let mut segs = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => match chars.next() {
                            Some(n @ ('"' | '\\' | '$' | '`')) => word.push(n),
                            Some('\n') => {}
                            Some(n) => {
                                word.push('\\');
                                word.push(n);
                            }
                            None => word.push('\\'),
                        },
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') | None => {}
                    Some(n) => word.push(n),
                }
            }
            // `2>&1` and `&>`: an ampersand inside a redirection is part of the word.
            '&' if word.ends_with('>') || word.ends_with('<') || chars.peek() == Some(&'>') => {
                in_word = true;
                word.push(c);
            }
            ';' | '&' | '|' | '\n' | '(' | ')' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
                if !words.is_empty() {
                    segs.push(std::mem::take(&mut words));
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if !words.is_empty() {
        segs.push(words);
    }
    segs
}

/// The script of `bash -lc '<script>'` and the like.
fn shell_script(words: &[String]) -> Option<&str> {
    let words = peel_env(words);
    let (shell, rest) = words.split_first()?;
    if !matches!(base(shell), "bash" | "sh" | "zsh" | "dash") {
        return None;
    }
    let mut it = rest.iter();
    while let Some(w) = it.next() {
        if w.starts_with('-') && !w.starts_with("--") {
            if w.contains('c') {
                return it.next().map(String::as_str);
            }
        } else if !w.starts_with("--") {
            // `bash script.sh`: not a `-c` wrapper.
            return None;
        }
    }
    None
}

/// A path's last component: `/usr/bin/git` is `git`.
pub(crate) fn base(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// `words` without leading environment assignments and an `env` command.
fn peel_env(mut words: &[String]) -> &[String] {
    loop {
        match words {
            [w, rest @ ..] if is_assignment(w) => words = rest,
            [w, rest @ ..] if base(w) == "env" => {
                words = rest;
                while let [w, rest @ ..] = words {
                    if w.starts_with('-') {
                        words = rest;
                    } else {
                        break;
                    }
                }
            }
            _ => return words,
        }
    }
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            let mut chars = name.chars();
            chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// `words` without the launchers in front of the real program: environment assignments, `env`,
/// `time`, `timeout N`, `uv run`, `poetry run`, `pdm run`, `python -m`, `npx`.
fn peel(words: &[String]) -> &[String] {
    let mut words = peel_env(words);
    // Each pass removes one launcher; the bound keeps a pathological command short.
    for _ in 0..8 {
        let next = match words {
            [w, rest @ ..] if w == "time" || w == "nice" || w == "command" => rest,
            [w, _, rest @ ..] if w == "timeout" => rest,
            [w, r, rest @ ..] if (w == "uv" || w == "poetry" || w == "pdm" || w == "pipenv") && r == "run" => {
                skip_flags(rest, &["--with", "--python", "-p", "--package", "--extra", "--group", "--project"])
            }
            [w, m, rest @ ..] if is_python(w) && m == "-m" => rest,
            [w, rest @ ..] if w == "npx" => skip_flags(rest, &["--package", "-p"]),
            _ => break,
        };
        words = peel_env(next);
    }
    words
}

fn skip_flags<'a>(mut words: &'a [String], with_value: &[&str]) -> &'a [String] {
    while let [w, rest @ ..] = words {
        if !w.starts_with('-') {
            break;
        }
        words = rest;
        if with_value.contains(&w.as_str()) {
            words = words.get(1..).unwrap_or(&[]);
        }
    }
    words
}

fn is_python(word: &str) -> bool {
    let b = base(word);
    b == "python" || b.strip_prefix("python3").is_some_and(|v| v.is_empty() || v.starts_with('.'))
}

/// The runner a peeled segment starts with.
fn runner(words: &[String]) -> Option<Runner> {
    let (head, rest) = words.split_first()?;
    // The first non-flag argument, past `+toolchain` for cargo.
    let mut args = rest.iter().map(String::as_str).filter(|w| !w.starts_with('-') && !w.starts_with('+'));
    match base(head) {
        "pytest" | "py.test" => Some(Runner::Pytest),
        "cargo" => match args.next() {
            Some("test") => Some(Runner::Cargo),
            Some("nextest") if args.next() == Some("run") => Some(Runner::Nextest),
            _ => None,
        },
        "go" if args.next() == Some("test") => Some(Runner::Go),
        "npm" | "yarn" | "pnpm" => match args.next() {
            Some("test" | "t") => Some(Runner::Node),
            Some("run" | "run-script") if args.next() == Some("test") => Some(Runner::Node),
            _ => None,
        },
        "jest" | "vitest" => Some(Runner::Node),
        _ => None,
    }
}

// ---- summaries ------------------------------------------------------------------------------

/// `s` without ANSI escape sequences (colored runner output).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if chars.next() == Some('[') {
            // CSI: parameters and intermediates until a final byte in '@'..='~'.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

/// `"12 passed"` as `(12, "passed")`.
fn count(part: &str) -> Option<(u64, &str)> {
    let (n, word) = part.trim().split_once(' ')?;
    Some((n.parse().ok()?, word.trim()))
}

/// `"4.21s"` as 4.21, and `"850ms"` as 0.85.
fn seconds(word: &str) -> Option<f64> {
    let word = word.trim();
    let v: f64 = if let Some(ms) = word.strip_suffix("ms") {
        ms.trim().parse::<f64>().ok()? / 1000.0
    } else {
        word.strip_suffix('s')?.trim().parse().ok()?
    };
    v.is_finite().then_some(v)
}

fn add(slot: &mut Option<u64>, n: u64) {
    *slot = Some(slot.unwrap_or(0).saturating_add(n));
}

/// pytest's last summary line: `==== 3 failed, 210 passed, 2 skipped in 4.21s ====`, or the same
/// without the rulers under `-q`.
fn pytest(output: &str) -> Option<Counts> {
    output.lines().rev().find_map(|line| {
        let line = line.trim().trim_matches('=').trim();
        let (counts, time) = line.rsplit_once(" in ")?;
        let duration_s = seconds(time.split_whitespace().next()?)?;
        let mut c = Counts { framework: "pytest", duration_s: Some(duration_s), ..Counts::default() };
        for part in counts.split(',') {
            match count(part)? {
                (n, "passed") => add(&mut c.passed, n),
                (n, "failed") => add(&mut c.failed, n),
                (n, "error" | "errors") => add(&mut c.errors, n),
                (n, "skipped") => add(&mut c.skipped, n),
                (_, "xfailed" | "xpassed" | "warning" | "warnings" | "deselected" | "rerun" | "subtests passed") => {}
                _ => return None,
            }
        }
        Some(c)
    })
}

/// cargo test's `test result: ok. 5 passed; 0 failed; 1 ignored; ...; finished in 0.01s` lines,
/// summed: one per test binary and one for doc-tests.
fn cargo(output: &str) -> Option<Counts> {
    let mut c = Counts { framework: "cargo", ..Counts::default() };
    let mut seen = false;
    let mut times = Some(0.0);
    for line in output.lines() {
        let Some((_, rest)) = line.split_once("test result: ") else { continue };
        let Some((_, rest)) = rest.split_once(". ") else { continue };
        let mut passed = None;
        let mut time = None;
        for part in rest.split(';') {
            if let Some(t) = part.trim().strip_prefix("finished in ") {
                time = seconds(t);
                continue;
            }
            match count(part) {
                Some((n, "passed")) => passed = Some(n),
                Some((n, "failed")) => add(&mut c.failed, n),
                Some((n, "ignored")) => add(&mut c.skipped, n),
                _ => {}
            }
        }
        // A line without its passed count is not cargo's.
        let Some(p) = passed else { continue };
        add(&mut c.passed, p);
        seen = true;
        times = match (times, time) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }
    c.duration_s = times;
    seen.then_some(c)
}

/// cargo nextest's `Summary [   1.234s] 120 tests run: 118 passed, 2 failed, 1 skipped`.
fn nextest(output: &str) -> Option<Counts> {
    output.lines().rev().find_map(|line| {
        let rest = line.trim().strip_prefix("Summary [")?;
        let (time, rest) = rest.split_once(']')?;
        let (_, counts) = rest.split_once(':')?;
        let mut c = Counts { framework: "nextest", duration_s: seconds(time), ..Counts::default() };
        for part in without_parens(counts).split(',') {
            match count(part)? {
                (n, "passed") => add(&mut c.passed, n),
                // A timeout is a failure: nextest fails the run for it.
                (n, "failed" | "timed out") => add(&mut c.failed, n),
                (n, "skipped") => add(&mut c.skipped, n),
                _ => {}
            }
        }
        c.passed.is_some().then_some(c)
    })
}

/// `go test`'s package lines (`ok  \tpkg\t0.01s`, `FAIL\tpkg\t0.02s`, `FAIL\tpkg [build failed]`)
/// and its top-level `--- FAIL:` (and, under `-v`, `--- PASS:`/`--- SKIP:`) test lines. Without
/// `-v`, go prints no passing tests, so `passed` is null then.
fn go(output: &str) -> Option<Counts> {
    let mut c = Counts { framework: "go", ..Counts::default() };
    let (mut packages, mut verbose, mut failed, mut passed, mut skipped, mut broken) = (0, false, 0, 0, 0, 0);
    let mut times: Option<f64> = None;
    for line in output.lines() {
        let line = line.trim_end();
        if line.starts_with("--- FAIL:") {
            failed += 1;
        } else if line.starts_with("--- PASS:") {
            passed += 1;
            verbose = true;
        } else if line.starts_with("--- SKIP:") {
            skipped += 1;
            verbose = true;
        } else if line.starts_with("=== RUN") {
            verbose = true;
        } else if let Some(rest) = line.strip_prefix("ok ").or_else(|| line.strip_prefix("FAIL\t")) {
            let mut fields = rest.split_whitespace();
            if fields.next().is_none() {
                continue;
            }
            packages += 1;
            let tail: Vec<&str> = fields.collect();
            if tail.iter().any(|w| *w == "[build" || *w == "[setup") {
                broken += 1;
            }
            if let Some(t) = tail.first().and_then(|t| seconds(t)) {
                times = Some(times.unwrap_or(0.0) + t);
            }
        }
    }
    if packages == 0 && failed == 0 && !verbose {
        return None;
    }
    c.failed = Some(failed);
    c.passed = verbose.then_some(passed);
    c.skipped = verbose.then_some(skipped);
    c.errors = (packages > 0).then_some(broken);
    c.duration_s = times;
    Some(c)
}

/// jest's `Tests:       1 failed, 1 skipped, 12 passed, 14 total` and `Time:        1.234 s`.
fn jest(output: &str) -> Option<Counts> {
    let mut c = Counts { framework: "jest", ..Counts::default() };
    let line = output.lines().rev().find_map(|l| l.trim().strip_prefix("Tests:"))?;
    for part in line.split(',') {
        match count(part)? {
            (n, "passed") => add(&mut c.passed, n),
            (n, "failed") => add(&mut c.failed, n),
            (n, "skipped" | "todo") => add(&mut c.skipped, n),
            _ => {}
        }
    }
    c.duration_s =
        output.lines().rev().find_map(|l| l.trim().strip_prefix("Time:")).and_then(|t| seconds(&t.replace(' ', "")));
    Some(c)
}

/// vitest's `      Tests  1 failed | 12 passed (13)` and `   Duration  1.23s (...)`.
fn vitest(output: &str) -> Option<Counts> {
    let mut c = Counts { framework: "vitest", ..Counts::default() };
    let line = output.lines().rev().find_map(|l| l.trim().strip_prefix("Tests "))?;
    for part in without_parens(line).split('|') {
        match count(part)? {
            (n, "passed") => add(&mut c.passed, n),
            (n, "failed") => add(&mut c.failed, n),
            (n, "skipped" | "todo") => add(&mut c.skipped, n),
            _ => {}
        }
    }
    c.duration_s = output
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("Duration"))
        .and_then(|t| t.split_whitespace().next())
        .and_then(seconds);
    Some(c)
}

/// `s` without parenthesized parts: `3 passed (1 slow)` is `3 passed `.
fn without_parens(s: &str) -> String {
    let mut depth = 0u32;
    s.chars()
        .filter(|&c| match c {
            '(' => {
                depth += 1;
                false
            }
            ')' => {
                depth = depth.saturating_sub(1);
                false
            }
            _ => depth == 0,
        })
        .collect()
}

#[cfg(test)]
mod checks {
    use super::*;
    use serde_json::json;

    #[test]
    fn unwraps_shell_wrappers() {
        assert_eq!(unwrap("/bin/bash -lc 'cd /w && pytest -q'"), "cd /w && pytest -q");
        assert_eq!(unwrap("bash -c \"go test ./...\""), "go test ./...");
        assert_eq!(unwrap("sh -c 'bash -lc \"cargo test\"'"), "cargo test");
        assert_eq!(unwrap("/bin/bash -lc 'echo '\\''hi'\\'''"), "echo 'hi'");
        assert_eq!(unwrap("  ls -la "), "ls -la");
        assert_eq!(unwrap("bash script.sh"), "bash script.sh");
        assert_eq!(unwrap("bash -lc"), "bash -lc");
    }

    #[test]
    fn commands_are_the_programs_each_segment_runs() {
        let words = |v: &[&str]| v.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        assert_eq!(
            commands("/bin/bash -lc 'cd /w && GIT_X=1 git push origin main | tee log'"),
            vec![words(&["cd", "/w"]), words(&["git", "push", "origin", "main"]), words(&["tee", "log"])]
        );
        assert_eq!(commands("timeout 60 uv run ruff check ."), vec![words(&["ruff", "check", "."])]);
        assert!(commands("  ").is_empty());
        assert!(runs_tests("bash -c 'cd x && cargo test -q'") && !runs_tests("cargo build"));
    }

    #[test]
    fn detects_runners_in_wrapped_commands() {
        let cases: &[(&str, &[Runner])] = &[
            ("pytest", &[Runner::Pytest]),
            ("uv run pytest -q tests/", &[Runner::Pytest]),
            ("uv run --with pytest-xdist pytest -n 4", &[Runner::Pytest]),
            ("python -m pytest tests", &[Runner::Pytest]),
            ("python3.12 -m pytest", &[Runner::Pytest]),
            ("/bin/bash -lc 'cd /repo && PYTHONPATH=src python3 -m pytest -x 2>&1 | tail -30'", &[Runner::Pytest]),
            ("npm test", &[Runner::Node]),
            ("npm run test -- --watch=false", &[Runner::Node]),
            ("yarn test", &[Runner::Node]),
            ("pnpm test", &[Runner::Node]),
            ("npx jest src", &[Runner::Node]),
            ("go test ./...", &[Runner::Go]),
            ("bash -lc 'go test -race ./... && go vet ./...'", &[Runner::Go]),
            ("cargo test -p foo", &[Runner::Cargo]),
            ("cargo +nightly test", &[Runner::Cargo]),
            ("RUST_BACKTRACE=1 cargo nextest run", &[Runner::Nextest]),
            ("env -i FOO=1 timeout 600 cargo test", &[Runner::Cargo]),
            ("cargo test && uv run pytest", &[Runner::Cargo, Runner::Pytest]),
            ("cargo build", &[]),
            ("go vet ./...", &[]),
            ("npm install", &[]),
            ("echo pytest", &[]),
            ("grep -r 'cargo test' .", &[]),
            ("git commit -m 'run pytest'", &[]),
            ("", &[]),
        ];
        for (cmd, want) in cases {
            assert_eq!(runners(cmd), *want, "{cmd}");
        }
    }

    #[test]
    fn command_phases() {
        assert_eq!(command_phase("uv run pytest -q"), "running_tests");
        assert_eq!(command_phase("git commit -am x"), "git");
        assert_eq!(command_phase("cd /repo && git status"), "git");
        assert_eq!(command_phase("/bin/bash -lc 'git diff --stat'"), "git");
        assert_eq!(command_phase("ls -la"), "running_command");
        assert_eq!(command_phase("gitk"), "running_command");
        assert_eq!(command_phase(""), "running_command");
    }

    fn result(cmd: &str, out: &str) -> Option<Value> {
        test_result(cmd, out).map(Value::Object)
    }

    #[test]
    fn pytest_summaries() {
        let out = "....F\nFAILED tests/test_a.py::test_x\n==== 3 failed, 210 passed, 2 skipped in 4.21s ====\n";
        assert_eq!(
            result("uv run pytest -q tests/", out),
            Some(json!({"framework": "pytest", "passed": 210, "failed": 3, "errors": null, "skipped": 2,
                "duration_s": 4.21, "command": "uv run pytest -q tests/", "source": "parsed"}))
        );
        let quiet = "........\n8 passed, 1 warning in 0.52s\n";
        let r = result("pytest -q", quiet).unwrap();
        assert_eq!(
            (r["passed"].clone(), r["failed"].clone(), r["duration_s"].clone()),
            (json!(8), json!(null), json!(0.52))
        );
        let errors = "\x1b[31m===== 1 failed, 2 errors in 1.00s (0:00:01) =====\x1b[0m";
        let r = result("pytest", errors).unwrap();
        assert_eq!((r["failed"].clone(), r["errors"].clone()), (json!(1), json!(2)));
        // A line that only looks like it is not taken.
        assert_eq!(result("pytest", "looked in 3 places in 2.0s\n"), None);
        assert_eq!(result("pytest", "no tests ran in 0.01s"), None);
    }

    #[test]
    fn cargo_summaries_are_summed() {
        let out = "running 3 tests\ntest result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.50s\n\
                   running 2 tests\ntest result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.25s\n\
                   Doc-tests x\ntest result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.00s\n";
        assert_eq!(
            result("cargo test", out),
            Some(json!({"framework": "cargo", "passed": 8, "failed": 1, "errors": null, "skipped": 1,
                "duration_s": 1.75, "command": "cargo test", "source": "parsed"}))
        );
        let old = "test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n";
        assert_eq!(result("cargo test", old).unwrap()["duration_s"], json!(null));
        let next =
            "    Starting 3 tests\n     Summary [   1.234s] 3 tests run: 2 passed (1 slow), 1 failed, 4 skipped\n";
        let r = result("cargo nextest run", next).unwrap();
        assert_eq!(
            (r["framework"].clone(), r["passed"].clone(), r["failed"].clone(), r["skipped"].clone()),
            (json!("nextest"), json!(2), json!(1), json!(4))
        );
    }

    #[test]
    fn go_summaries() {
        let out = "--- FAIL: TestParse (0.00s)\n    parse_test.go:12: got 1, want 2\nFAIL\nFAIL\texample.com/x/parse\t0.012s\nok  \texample.com/x\t0.010s\n?   \texample.com/x/cmd\t[no test files]\nFAIL\n";
        assert_eq!(
            result("go test ./...", out),
            Some(json!({"framework": "go", "passed": null, "failed": 1, "errors": 0, "skipped": null,
                "duration_s": 0.022, "command": "go test ./...", "source": "parsed"}))
        );
        let verbose = "=== RUN   TestA\n--- PASS: TestA (0.00s)\n=== RUN   TestB\n--- SKIP: TestB (0.00s)\nPASS\nok  \tex/a\t(cached)\n";
        let r = result("go test -v ./...", verbose).unwrap();
        assert_eq!(
            (r["passed"].clone(), r["skipped"].clone(), r["duration_s"].clone()),
            (json!(1), json!(1), json!(null))
        );
        let broken = "# ex/a\na.go:3:1: syntax error\nFAIL\tex/a [build failed]\n";
        assert_eq!(result("go test ./...", broken).unwrap()["errors"], json!(1));
    }

    #[test]
    fn node_summaries() {
        let jest_out =
            "Tests:       1 failed, 1 skipped, 12 passed, 14 total\nSnapshots:   0 total\nTime:        1.234 s\n";
        let r = result("npm test", jest_out).unwrap();
        assert_eq!(
            (
                r["framework"].clone(),
                r["passed"].clone(),
                r["failed"].clone(),
                r["skipped"].clone(),
                r["duration_s"].clone()
            ),
            (json!("jest"), json!(12), json!(1), json!(1), json!(1.234))
        );
        let vitest_out = " Test Files  1 failed | 3 passed (4)\n      Tests  1 failed | 12 passed (13)\n   Duration  850ms (transform 20ms)\n";
        let r = result("pnpm test", vitest_out).unwrap();
        assert_eq!(
            (r["framework"].clone(), r["passed"].clone(), r["failed"].clone(), r["duration_s"].clone()),
            (json!("vitest"), json!(12), json!(1), json!(0.85))
        );
    }

    #[test]
    fn never_invents_numbers() {
        assert_eq!(result("uv run pytest", "ImportError: no module named x\n"), None);
        assert_eq!(result("cargo test", "error[E0425]: cannot find value `x`\nerror: could not compile `x`\n"), None);
        assert_eq!(result("go test ./...", "go: cannot find main module\n"), None);
        assert_eq!(result("npm test", "npm ERR! missing script: test\n"), None);
        // Output with a summary, but the command is not a test run.
        assert_eq!(result("cat log.txt", "==== 1 passed in 0.1s ===="), None);
    }
}
