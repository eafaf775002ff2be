//! `question` and `progress`.
use std::io::Write as _;

use hangar_agents::inbox::{Ask, Outcome, Request, PROTOCOL};

use super::{
    env,
    files::{self, Written},
    say, AgentError, ProgressArgs, QuestionArgs, EXIT_EXPIRED, EXIT_FAILURE,
};

/// A request from this turn (session and turn from the environment hangar set).
fn request(ask: Ask) -> Result<Request, AgentError> {
    let req = Request {
        v: PROTOCOL,
        id: files::new_id(),
        session: env("HANGAR_SESSION"),
        turn: env("HANGAR_TURN"),
        created_at: files::now(),
        ask,
    };
    // The limits the relay applies, checked here so that the agent hears what is wrong.
    Ok(req.check()?)
}

pub(super) fn question(args: QuestionArgs) -> u8 {
    match ask_question(args) {
        Ok(code) => code,
        Err(e) => {
            say(&e.to_string());
            e.exit_code()
        }
    }
}

fn ask_question(args: QuestionArgs) -> Result<u8, AgentError> {
    let req = request(Ask::Question { text: args.text, options: args.options })?;
    let answers = args.dirs.answers()?;
    let inbox = args.dirs.inbox()?;
    // Before the request exists, so that a stop signal always finds it removed on the way out.
    files::catch_stop_signals();
    let _written = Written { path: files::write(&inbox, &req)? };
    let answer = files::wait(&answers, &req.id, args.timeout)?;
    Ok(match answer.outcome {
        Outcome::Answer { text } => {
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{text}").and_then(|()| out.flush()).is_err() {
                say("could not print the answer on stdout");
                return Ok(EXIT_FAILURE);
            }
            0
        }
        Outcome::Expired { reason } => {
            say(&format!("the question expired unanswered: {reason}"));
            EXIT_EXPIRED
        }
        Outcome::Deny { reason } => {
            say(&format!("the question was declined: {}", reason.as_deref().unwrap_or("no reason given")));
            EXIT_EXPIRED
        }
        Outcome::Allow { .. } => return Err(AgentError::Unexpected("allow", "a question")),
    })
}

pub(super) fn progress(args: ProgressArgs) -> u8 {
    let result = request(Ask::Progress { text: args.text, pct: args.pct })
        .and_then(|req| Ok((args.dirs.inbox()?, req)))
        .and_then(|(inbox, req)| files::write(&inbox, &req));
    match result {
        Ok(_) => 0,
        Err(e) => {
            say(&e.to_string());
            e.exit_code()
        }
    }
}
