//! The `job` tool: jobs (start, status, cancel, list) through the same `jobs` calls as
//! `/api/jobs`. A job's result is what hangar measured; the one field that holds the agent's
//! word (`result.pr_url`) is named in `_meta["hangar/agent_text"]`.
use std::sync::{Arc, LazyLock};

use rmcp::model::{CallToolResult, JsonObject};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{session::result, shape::Shape};
use crate::{
    auth::Caller,
    error::Result,
    handles::Relay,
    jobs::{self, JobView, StartRequest},
};

/// The `job` tool's arguments, one shape per action; its schema is derived (`Shape`).
#[derive(Deserialize, JsonSchema)]
#[serde(tag = "action", rename_all = "lowercase")]
pub(super) enum Args {
    // Boxed: a request is far larger than the other actions' arguments.
    Start(Box<StartRequest>),
    Status(Job),
    Cancel(Job),
    List,
}

/// The job an action is about.
#[derive(Deserialize, JsonSchema)]
pub(super) struct Job {
    /// The job's id (job_...)
    job: String,
}

pub(super) static SHAPE: LazyLock<Shape<Args>> = LazyLock::new(|| Shape::new("job", true));

pub async fn call(relay: &Arc<Relay>, caller: &Caller, raw: Option<JsonObject>) -> Result<CallToolResult> {
    match SHAPE.read(raw)? {
        Args::Start(req) => Ok(view(jobs::start(&relay.jobs, caller, *req).await?)),
        Args::Status(j) => Ok(view(jobs::get(&relay.jobs, caller, &j.job).await?)),
        Args::Cancel(j) => Ok(view(jobs::cancel(&relay.jobs, caller, &j.job).await?)),
        Args::List => {
            let list = jobs::list(&relay.jobs, caller).await?;
            let marked: Vec<String> =
                list.first().map(|v| v.agent_text.iter().map(|f| format!("jobs[].{f}")).collect()).unwrap_or_default();
            let marked: Vec<&str> = marked.iter().map(String::as_str).collect();
            Ok(result(json!({ "jobs": list }), &marked))
        }
    }
}

fn view(v: JobView) -> CallToolResult {
    let fields = v.agent_text;
    result(serde_json::to_value(&v).unwrap_or(Value::Null), fields)
}
