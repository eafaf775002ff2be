//! hangar-agents: agent CLIs' logs (Claude Code, Codex, Gemini CLI) turned into hangar's normalized
//! events, and what goes with them: a run summary, redaction, and harness profiles.
//!
//! Invariants:
//! - This crate does no I/O: no files, no network, no processes, no environment, no clock, no
//!   async. Every function is a pure function of its arguments; the relay reads the logs, keeps the
//!   offsets, stamps the times and stores the events.
//! - Parsing is a fold over lines: [`Lines`] cuts bytes into lines whatever the chunking, and a
//!   [`Parser`] turns each line into events, keeping only the little state a format needs between
//!   lines (the current phase, the tool calls under way).
//! - Input is untrusted: it is what an agent printed. No input makes a function panic or fail;
//!   a line that cannot be placed becomes `harness.unknown`, a field of the wrong type is absent.
//!   Every event a parser makes carries `"source": "agent"`.
//! - Nothing is invented: a count, a cost or a status the CLI did not print is null (or the key is
//!   left out), never a guess.
//! - Memory is bounded per line: a line over [`lines::MAX_LINE`] is dropped while it streams, and
//!   event texts are cut (messages 2 KiB, summaries 200 chars, raw lines 4 KiB).
//!
//! Modules: [`event`] the event type, [`lines`] the splitter, [`parse`] one parser per format,
//! [`summary`] the fold into a run summary, [`live`] the fold into a session's live picture (the
//! fleet's), [`redact`] secret redaction, [`harness`] the profiles
//! that say how to start each CLI, [`inbox`] the files through which an agent asks a person
//! (questions, approvals of tool calls, progress) and the approval policy.

mod cut;
pub mod event;
pub mod harness;
pub mod inbox;
pub mod lines;
pub mod live;
pub mod parse;
pub mod redact;
pub mod summary;

pub use event::{Event, EventType};
pub use lines::{Line, Lines, Mark};
pub use live::LiveState;
pub use parse::{Format, Parser};
pub use redact::Redactor;
pub use summary::Summary;
