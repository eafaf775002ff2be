//! The `sandboxes` tool: the sandboxes a caller may use (`Sandboxes::may_use`).
use std::sync::LazyLock;

use rmcp::model::{CallToolResult, JsonObject};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{done, shape::Shape};
use crate::{auth::Caller, error::Result, handles::Relay, sandboxes::may_use};

/// The `sandboxes` tool takes no arguments.
#[derive(Deserialize, JsonSchema)]
pub(super) struct NoArgs {}

pub(super) static SHAPE: LazyLock<Shape<NoArgs>> = LazyLock::new(|| Shape::new("sandboxes", true));

pub async fn call(relay: &Relay, caller: &Caller, a: Option<JsonObject>) -> Result<CallToolResult> {
    let NoArgs {} = SHAPE.read(a)?;
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
