//! hangar-e2e: the harness the end-to-end tests (and the bench) use to start the real
//! `hangar-envd` and `hangar-relay` binaries and drive them from outside, over gRPC (tonic
//! clients from hangar-proto), Connect JSON and binary on HTTP/1.1 and on h2c, plain HTTP, and
//! the relay's REST and SSE API.
//!
//! Every wait is bounded: a hang fails the test with a message instead of blocking CI.
//!
//! The modules, by job (the first seven are re-exported here, so `use hangar_e2e::*` has them):
//! - [`timing`]: bounded waits (`within`, `wait_until`, `eventually`) and the default bound `STEP`.
//! - [`daemon`]: the `hangar-envd` under test, started on a free port and killed with everything
//!   it started when dropped (`Envd`, `EnvdBuilder`, `envd_bin`).
//! - [`procfs`]: processes as `/proc` shows them: state, parentage, groups, command lines,
//!   memory and CPU time, open descriptors, cgroup (`proc_stat`, `descendants`, `zombies_of`,
//!   `pids_with`, `rss_kib`, `fd_count`, `cgroup_of`, ...).
//! - [`host`]: what this machine provides (`is_root`, `cgroups_usable`, `cgroup_dir`,
//!   `skip_without`).
//! - [`requests`]: request builders (`start_req`, `bash`, `by_pid`, `stdin_input`, ...).
//! - [`events`]: reading process and Attach event streams (`Collected`, `collect`, `read_until`,
//!   `grpc_start`, `grpc_run`, `AttachLog`, `code_name`, ...).
//! - [`connect`]: raw HTTP/1.1 and h2c requests and Connect envelopes (`build_request`,
//!   `send_http1`, `send_h2`, `RawResponse`, `envelope`, `ConnectStream`, `StreamOutcome`).
//! - [`files`]: the file tests' helpers (filesystem client, uploads, downloads, scratch
//!   directories, users, xattrs).
//! - [`watch`]: the watch and follow tests' helpers.
//! - [`relay`]: the `hangar-relay` under test, its REST calls and SSE streams.
//! - [`cli`]: the `hangar` command-line client, run as a person would (`Hangar`).
//! - [`mcp`]: the relay's MCP endpoint over raw HTTP (a 2025-era session, one tool call).
//! - [`docker`]: containers for the tests that need Docker.
//! - [`e2b_api`]: a test double of E2B's REST API and edge, checked against E2B's published spec.
//! - [`clis`]: the real agent CLIs (Claude Code, Codex) as scripts/agent-clis installs them.
//! - [`model`]: a scripted stand-in for the model API the real agent CLIs call (Anthropic's
//!   Messages API), so they run offline.
//! - [`kube`]: a Kubernetes API server double (its pods run as Docker containers), for the
//!   kubernetes provider's tests.
//! - [`platform`] and [`cases`]: where a relay test's sandboxes live (a provider, or its test
//!   double), and the relay tests every platform runs where they apply.

pub mod cases;
pub mod cli;
pub mod clis;
pub mod connect;
pub mod daemon;
pub mod docker;
pub mod e2b_api;
pub mod events;
pub mod files;
pub mod host;
pub mod kube;
pub mod mcp;
pub mod model;
pub mod platform;
pub mod procfs;
pub mod relay;
pub mod requests;
pub mod sessions;
pub mod timing;
pub mod watch;

pub use connect::*;
pub use daemon::*;
pub use events::*;
pub use hangar_proto::{ext, process as pb};
pub use host::*;
pub use procfs::*;
pub use requests::*;
pub use timing::*;
