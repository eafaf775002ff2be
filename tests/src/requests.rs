//! Request builders: process configs, start requests, selectors, input, and the small encodings
//! (Basic auth, base64, gRPC metadata) the tests put in requests.
use std::collections::HashMap;

use base64::Engine as _;
use hangar_proto::process::{self as pb, process_selector::Selector, ProcessConfig, ProcessSelector, StartRequest};

pub fn config(cmd: &str, args: &[&str]) -> ProcessConfig {
    ProcessConfig {
        cmd: cmd.to_string(),
        args: args.iter().map(|s| s.to_string()).collect(),
        envs: HashMap::new(),
        cwd: None,
    }
}

/// `StartRequest` for `cmd args...` (stdin left absent, i.e. an open pipe).
pub fn start_req(cmd: &str, args: &[&str]) -> StartRequest {
    StartRequest { process: Some(config(cmd, args)), pty: None, tag: None, stdin: None }
}

/// `StartRequest` for `/bin/bash -c script`.
pub fn bash(script: &str) -> StartRequest {
    start_req("/bin/bash", &["-c", script])
}

pub fn by_pid(pid: u32) -> Option<ProcessSelector> {
    Some(ProcessSelector { selector: Some(Selector::Pid(pid)) })
}

pub fn by_tag(tag: &str) -> Option<ProcessSelector> {
    Some(ProcessSelector { selector: Some(Selector::Tag(tag.to_string())) })
}

pub fn pty_size(rows: u32, cols: u32) -> Option<pb::Pty> {
    Some(pb::Pty { size: Some(pb::pty::Size { cols, rows }) })
}

pub fn stdin_input(bytes: &[u8]) -> Option<pb::ProcessInput> {
    Some(pb::ProcessInput { input: Some(pb::process_input::Input::Stdin(bytes.to_vec())) })
}

pub fn pty_input(bytes: &[u8]) -> Option<pb::ProcessInput> {
    Some(pb::ProcessInput { input: Some(pb::process_input::Input::Pty(bytes.to_vec())) })
}

/// `Authorization: Basic base64("user:")`.
pub fn basic_user(user: &str) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:")))
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn unb64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).unwrap_or_else(|e| panic!("bad base64 {s:?}: {e}"))
}

/// Adds a metadata header to a tonic request.
pub fn with_meta<T>(mut req: tonic::Request<T>, key: &'static str, value: &str) -> tonic::Request<T> {
    req.metadata_mut().insert(key, value.parse().expect("metadata value"));
    req
}
