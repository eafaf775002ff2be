//! The `job` tool: jobs (start, status, cancel, list) through the same `jobs` calls as
//! `/api/jobs`. A job's result is what hangar measured; the one field that holds the agent's
//! word (`result.pr_url`) is named in `_meta["hangar/agent_text"]`.
use std::sync::{Arc, LazyLock};

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{paths, shape::Shape};
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

/// The `job` tool's result, by action (untagged: each is an object of its own fields).
#[derive(Serialize, JsonSchema)]
#[serde(untagged)]
pub(super) enum Reply {
    /// start, status, cancel
    // Boxed: a view is far larger than a list of them.
    Job(Box<JobView>),
    /// list
    Jobs { jobs: Vec<JobView> },
}

impl super::Reply for Reply {
    fn agent_text(&self) -> Vec<String> {
        match self {
            Reply::Job(v) => paths("", v.agent_text),
            // Every view names the same fields.
            Reply::Jobs { jobs } => jobs.first().map(|v| paths("jobs[].", v.agent_text)).unwrap_or_default(),
        }
    }
}

pub async fn call(relay: &Arc<Relay>, caller: &Caller, raw: Option<JsonObject>) -> Result<Reply> {
    let view = |v| Reply::Job(Box::new(v));
    match SHAPE.read(raw)? {
        Args::Start(req) => Ok(view(jobs::start(&relay.jobs, caller, *req).await?)),
        Args::Status(j) => Ok(view(jobs::get(&relay.jobs, caller, &j.job).await?)),
        Args::Cancel(j) => Ok(view(jobs::cancel(&relay.jobs, caller, &j.job).await?)),
        Args::List => Ok(Reply::Jobs { jobs: jobs::list(&relay.jobs, caller).await? }),
    }
}
