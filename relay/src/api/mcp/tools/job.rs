//! The `job` tool: jobs (start, status, cancel, list) through the same `jobs` calls as
//! `/api/jobs`. A job's result is what hangar measured; the one field that holds the agent's
//! word (`result.pr_url`) is named in `_meta["hangar/agent_text"]`.
use std::sync::Arc;

use rmcp::model::{CallToolResult, JsonObject};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{args, session::result};
use crate::{
    app::Relay,
    auth::Caller,
    error::{Error, Result},
    jobs::{self, JobView, SandboxSpec, StartRequest},
};

#[derive(Deserialize, Clone, Copy, PartialEq, Debug)]
#[serde(rename_all = "lowercase")]
enum Action {
    Start,
    Status,
    Cancel,
    List,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Start => "start",
            Action::Status => "status",
            Action::Cancel => "cancel",
            Action::List => "list",
        }
    }

    /// The arguments the action takes besides `action`: any other is refused, so that a
    /// misplaced one (a `prompt` on `status`) is an error rather than silently ignored.
    fn takes(self) -> &'static [&'static str] {
        match self {
            Action::Start => &[
                "sandbox",
                "sandbox_spec",
                "harness",
                "prompt",
                "cwd",
                "verify",
                "timeout_minutes",
                "idempotency_key",
                "secrets",
                "sandbox_login",
            ],
            Action::Status | Action::Cancel => &["job"],
            Action::List => &[],
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    provider: String,
    #[serde(default)]
    options: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobArgs {
    action: Action,
    job: Option<String>,
    sandbox: Option<String>,
    sandbox_spec: Option<Spec>,
    harness: Option<String>,
    prompt: Option<String>,
    cwd: Option<String>,
    verify: Option<String>,
    timeout_minutes: Option<i64>,
    idempotency_key: Option<String>,
    #[serde(default)]
    secrets: Vec<String>,
    #[serde(default)]
    sandbox_login: bool,
}

fn need<T>(v: Option<T>, what: &str, action: Action) -> Result<T> {
    v.ok_or_else(|| Error::invalid(format!("job: {what} is required for action {:?}", action.as_str())))
}

pub async fn call(relay: &Arc<Relay>, caller: &Caller, raw: Option<JsonObject>) -> Result<CallToolResult> {
    let keys: Vec<String> = raw.iter().flat_map(|m| m.keys().cloned()).collect();
    let a: JobArgs = args("job", raw)?;
    let action = a.action;
    if let Some(k) = keys.iter().find(|k| *k != "action" && !action.takes().contains(&k.as_str())) {
        let takes = action.takes();
        let takes = if takes.is_empty() { "no other arguments".to_string() } else { takes.join(", ") };
        return Err(Error::invalid(format!(
            "job: {k} does not apply to action {:?} (it takes {takes})",
            action.as_str()
        )));
    }
    match action {
        Action::Start => {
            let req = StartRequest {
                sandbox: a.sandbox,
                // `options` defaults to `{}` as over REST; `jobs::start` refuses a non-object.
                sandbox_spec: a
                    .sandbox_spec
                    .map(|s| SandboxSpec { provider: s.provider, options: s.options.unwrap_or_else(|| json!({})) }),
                harness: a.harness,
                prompt: need(a.prompt, "prompt", action)?,
                cwd: a.cwd,
                verify: a.verify,
                timeout_minutes: a.timeout_minutes,
                idempotency_key: a.idempotency_key,
                secrets: a.secrets,
                sandbox_login: a.sandbox_login,
            };
            Ok(view(jobs::start(relay, caller, req).await?))
        }
        Action::Status => Ok(view(jobs::get(relay, caller, &need(a.job, "job", action)?).await?)),
        Action::Cancel => Ok(view(jobs::cancel(relay, caller, &need(a.job, "job", action)?).await?)),
        Action::List => {
            let list = jobs::list(relay, caller).await?;
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
