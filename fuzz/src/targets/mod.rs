//! The targets: the daemon's (`envd_*`), the relay's (`relay_*`), the agent-output parsers'
//! (`agent_output`) and the inbox protocol's files (`inbox_files`).
mod agent_output;
mod envd_envelope;
mod envd_headers;
mod envd_multipart;
mod envd_rpc;
mod inbox_files;
mod relay_common;
mod relay_json;
mod relay_mcp_uri;
mod relay_query;
mod relay_resume;

use crate::Target;

pub static ALL: &[Target] = &[
    envd_envelope::TARGET,
    envd_rpc::TARGET,
    envd_headers::TARGET,
    envd_multipart::TARGET,
    relay_resume::TARGET,
    relay_query::TARGET,
    relay_json::TARGET,
    relay_mcp_uri::TARGET,
    agent_output::TARGET,
    inbox_files::TARGET,
];
