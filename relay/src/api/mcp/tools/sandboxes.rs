//! The `sandboxes` tool: the sandboxes a caller may use (`Sandboxes::may_use`).
use std::sync::LazyLock;

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::shape::Shape;
use crate::{
    auth::Caller,
    error::Result,
    handles::Relay,
    sandboxes::{may_use, Isolation, SandboxRow, SandboxState},
};

/// The `sandboxes` tool takes no arguments.
#[derive(Deserialize, JsonSchema)]
pub(super) struct NoArgs {}

pub(super) static SHAPE: LazyLock<Shape<NoArgs>> = LazyLock::new(|| Shape::new("sandboxes", true));

/// The `sandboxes` tool's result.
#[derive(Serialize, JsonSchema)]
pub(super) struct Reply {
    sandboxes: Vec<Sandbox>,
}

impl super::Reply for Reply {}

/// A sandbox as the tool lists it: what a caller needs to choose one, not how it is run.
#[derive(Serialize, JsonSchema)]
struct Sandbox {
    name: String,
    id: String,
    provider: String,
    state: SandboxState,
    /// Whether its daemon answered when last asked (streamed output, background processes'
    /// input and watches need it)
    daemon: bool,
    isolation: Isolation,
    /// The person who created it (null: the admins')
    owner: Option<String>,
    /// The persons it is shared with ("*": everyone)
    shared_with: Vec<String>,
}

impl From<SandboxRow> for Sandbox {
    fn from(s: SandboxRow) -> Sandbox {
        let SandboxRow { name, id, provider, state, daemon, isolation, owner, shared_with, .. } = s;
        Sandbox { name, id, provider, state, daemon, isolation, owner, shared_with }
    }
}

pub async fn call(relay: &Relay, caller: &Caller, a: Option<JsonObject>) -> Result<Reply> {
    let NoArgs {} = SHAPE.read(a)?;
    let all = relay.sandboxes.list().await?;
    Ok(Reply { sandboxes: all.into_iter().filter(|s| may_use(s, caller)).map(Sandbox::from).collect() })
}
