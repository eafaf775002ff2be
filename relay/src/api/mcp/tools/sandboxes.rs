//! The `sandboxes` tool: the sandboxes a caller may use.
use rmcp::model::{CallToolResult, JsonObject};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{args, done};
use crate::{app::Relay, error::Result};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

pub fn call(relay: &Relay, a: Option<JsonObject>) -> Result<CallToolResult> {
    let NoArgs {} = args("sandboxes", a)?;
    let list: Vec<Value> = relay
        .sandboxes
        .list()?
        .into_iter()
        .map(|s| {
            json!({ "name": s.name, "id": s.id, "provider": s.provider, "state": s.state, "daemon": s.daemon,
                    "isolation": s.isolation, "owner": s.owner })
        })
        .collect();
    Ok(done(json!({ "sandboxes": list }), &[]))
}
