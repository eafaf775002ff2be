//! hangar-relay: the control plane. It knows the sandboxes, their providers and the tokens of
//! the people and agents who use them, and serves envd's streams over REST/SSE and MCP.
//!
//! Layers, each knowing only those below it (`scripts/check-layers` checks it; docs/architecture.md
//! has the tree and each part's invariant):
//! - `app`: building the handles, binding and serving (wiring only).
//! - `api`: HTTP, the only module that knows it (REST/SSE, MCP).
//! - `handles`: the handles `app` builds and `api` serves with (`Relay`); no area imports it.
//! - the domain: `sandboxes`, `exec`, `processes`, `watch`, `sessions`, `jobs`, `inbox`, `fleet`,
//!   `secrets`, `streams`, `revocation`, `recovery`; writers tell the fleet and the inbox through
//!   the `feed`.
//! - below it: `error`, `config`, `providers`, `envd`, `auth`, `store`, and the leaves `events`,
//!   `text`, `time`, `random`, `refs`, `git` (the scripts that read a repository).
pub mod api;
pub mod app;
pub mod auth;
pub mod config;
pub mod envd;
pub mod error;
pub mod events;
pub mod exec;
pub mod feed;
pub mod fleet;
pub mod git;
pub mod handles;
pub mod inbox;
pub mod jobs;
pub mod processes;
pub mod providers;
pub mod random;
pub mod recovery;
pub mod refs;
pub mod revocation;
pub mod sandboxes;
pub mod secrets;
pub mod sessions;
pub mod store;
pub mod streams;
pub mod terminal;
pub mod text;
pub mod time;
pub mod watch;
