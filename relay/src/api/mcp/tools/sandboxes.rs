//! The `sandboxes` tool: the sandboxes a caller may use (`Sandboxes::may_use`).
use rmcp::model::{CallToolResult, JsonObject};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{args, done};
use crate::{app::Relay, auth::Caller, error::Result, sandboxes::may_use};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

pub async fn call(relay: &Relay, caller: &Caller, a: Option<JsonObject>) -> Result<CallToolResult> {
    let NoArgs {} = args("sandboxes", a)?;
    let list: Vec<Value> = relay
        .sandboxes
        .list()
        .await?
        .into_iter()
        .filter(|s| may_use(s, caller))
        .map(|s| {
            json!({ "name": s.name, "id": s.id, "provider": s.provider, "state": s.state, "daemon": s.daemon,
                    "isolation": s.isolation, "owner": s.owner, "shared_with": s.shared_with })
        })
        .collect();
    Ok(done(json!({ "sandboxes": list }), &[]))
}
