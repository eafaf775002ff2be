//! `hangar`: the relay's REST API for people at a terminal. This file parses the command line
//! and hands each command to its module; exit codes: 0, a command's own (exec, attach), 1 for
//! an error (the relay's, or reaching it), 2 for a usage error (clap's), 3 to 5 for how a
//! followed turn or job ended (`sessions::Ending`).
//!
//! A new command: its variant in `args::Command` (with its `Args` struct there), its module
//! declared below, and its arm in `run`; listings and gets print through `Ctx::print_as`.
// First: its `note!` is used by the others.
#[macro_use]
mod render;
mod args;
mod client;
mod diff;
mod fleet;
mod inbox;
mod jobs;
mod processes;
mod sandboxes;
mod sessions;
mod terminal;
mod tokens;

use clap::{CommandFactory, Parser};

use std::io::IsTerminal;

use args::{Cli, Command, Output};
use client::{Client, Error};

/// What every command gets: the relay's client and how to print (`-o`; `json`: `-o json`).
pub struct Ctx {
    pub client: Client,
    pub json: bool,
    pub output: Option<Output>,
}

impl Ctx {
    /// Prints a reply: the relay's JSON with `-o json`, else `human(v)` (text ending its lines).
    pub fn print(&self, v: &serde_json::Value, human: impl FnOnce(&serde_json::Value) -> String) -> Result<i32, Error> {
        if self.json {
            render::json(v)?;
        } else {
            render::out(&human(v))?;
        }
        Ok(0)
    }

    /// Prints a listing or a get as `-o` says: JSON as the relay sent it, `name` one line per
    /// item of `items` (a get: `v` itself is the one item), else the table, wide or not.
    pub fn print_as(
        &self,
        v: &serde_json::Value,
        items: Option<&str>,
        name: impl Fn(&serde_json::Value) -> String,
        human: impl FnOnce(&serde_json::Value, bool) -> String,
    ) -> Result<i32, Error> {
        match self.output {
            Some(Output::Json) => render::json(v)?,
            Some(Output::Name) => {
                let one = std::slice::from_ref(v);
                let all = match items {
                    Some(k) => v[k].as_array().map(Vec::as_slice).unwrap_or_default(),
                    None => one,
                };
                let lines: String = all.iter().map(|i| format!("{}\n", render::clean(&name(i)))).collect();
                render::out(&lines)?;
            }
            Some(Output::Wide) => render::out(&human(v, true))?,
            None => render::out(&human(v, false))?,
        }
        Ok(0)
    }
}

/// An item's `id`, for `-o name`.
pub fn id_of(v: &serde_json::Value) -> String {
    render::s(v, "id").to_string()
}

fn main() {
    let cli = Cli::parse();
    if let Command::Completions(c) = &cli.command {
        // Into a buffer first: clap_complete panics on a write error (`... | head`).
        let mut script = Vec::new();
        clap_complete::generate(c.shell, &mut Cli::command(), "hangar", &mut script);
        let _ = std::io::Write::write_all(&mut std::io::stdout(), &script);
        return;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            note!("hangar: cannot start: {e}");
            std::process::exit(1);
        }
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        // `hangar events ... | head`: the reader left, which is no failure.
        Err(e) if e.is_broken_pipe() => 0,
        Err(e) => {
            note!("hangar: {e}");
            1
        }
    };
    // Not `drop(runtime)`: a detached stream's task must not hold the exit up.
    runtime.shutdown_background();
    std::process::exit(code);
}

async fn run(cli: Cli) -> Result<i32, Error> {
    let no_color = std::env::var("NO_COLOR").ok();
    render::set_color(render::color_wanted(cli.color, std::io::stdout().is_terminal(), no_color.as_deref()));
    let output = cli.output();
    let ctx = Ctx { client: Client::new(&cli.url(), cli.token())?, json: output == Some(Output::Json), output };
    match cli.command {
        Command::Sandboxes(a) => sandboxes::run(&ctx, a).await,
        Command::Exec(a) if a.tty || a.interactive => terminal::exec(&ctx, a).await,
        Command::Exec(a) => processes::exec(&ctx, a).await,
        Command::Ps(a) => processes::ps(&ctx, a).await,
        Command::Start(a) => processes::start(&ctx, a).await,
        Command::Attach(a) => processes::attach(&ctx, a).await,
        Command::Kill(a) => processes::kill(&ctx, a).await,
        Command::Watch(a) => processes::watch(&ctx, a).await,
        Command::Sessions => sessions::list(&ctx).await,
        Command::Session(a) => sessions::run(&ctx, a).await,
        Command::Events(a) => sessions::events(&ctx, a).await,
        Command::Diff(a) => diff::run(&ctx, a).await,
        Command::Jobs => jobs::list(&ctx).await,
        Command::Job(a) => jobs::run(&ctx, a).await,
        Command::Inbox(a) => inbox::list(&ctx, a).await,
        Command::Allow(a) => inbox::decide(&ctx, a, "allow").await,
        Command::Deny(a) => inbox::decide(&ctx, a, "deny").await,
        Command::Answer(a) => inbox::answer(&ctx, a).await,
        Command::Ack(a) => inbox::ack(&ctx, a).await,
        Command::Tokens(a) => tokens::run(&ctx, a).await,
        Command::Fleet(a) => fleet::run(&ctx, a).await,
        Command::Completions(_) => Ok(0),
    }
}
