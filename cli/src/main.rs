//! `hangar`: the relay's REST API for people at a terminal. This file parses the command line
//! and hands each command to its module; exit codes: 0, a command's own (exec, attach), 1 for
//! an error (the relay's, or reaching it), 2 for a usage error (clap's).
// First: its `note!` is used by the others.
#[macro_use]
mod render;
mod args;
mod client;
mod fleet;
mod inbox;
mod jobs;
mod processes;
mod sandboxes;
mod sessions;
mod terminal;
mod tokens;

use clap::{CommandFactory, Parser};

use args::{Cli, Command};
use client::{Client, Error};

/// What every command gets: the relay's client and whether to print JSON.
pub struct Ctx {
    pub client: Client,
    pub json: bool,
}

impl Ctx {
    /// Prints a reply: the relay's JSON with `--json`, else `human(v)` (text ending its lines).
    pub fn print(&self, v: &serde_json::Value, human: impl FnOnce(&serde_json::Value) -> String) -> Result<i32, Error> {
        if self.json {
            render::json(v)?;
        } else {
            render::out(&human(v))?;
        }
        Ok(0)
    }
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
    let ctx = Ctx { client: Client::new(&cli.url(), cli.token())?, json: cli.json };
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
