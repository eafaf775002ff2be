//! Jobs: `hangar jobs`, `job ID` (`GET /api/jobs/{id}`), `job start|cancel|events`.
use serde_json::{json, Map, Value};

use crate::{
    args::{JobArgs, JobCmd, JobStartArgs},
    client::{path, Error},
    render::{self, ago_of, cell, clean, clip, s},
    sessions::{print_event, read_prompt, Ending},
    Ctx,
};

pub async fn list(ctx: &Ctx) -> Result<i32, Error> {
    let v = ctx.client.get("/api/jobs").await?;
    ctx.print_as(&v, Some("jobs"), crate::id_of, |v, wide| table(v, render::now(), wide))
}

/// The jobs; `wide` adds the session, the branch and the detail.
pub fn table(v: &Value, now: f64, wide: bool) -> String {
    let rows: Vec<Vec<String>> = v["jobs"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|j| {
            let mut row = vec![
                clean(s(j, "id")),
                render::state_cell(&j["state"]),
                cell(&j["reason"]),
                cell(&j["harness"]),
                cell(&j["sandbox"]),
                cell(&j["result"]["commits_ahead"]),
                cell(&j["result"]["verification"]["exit_code"]),
                ago_of(now, &j["created_at"]),
                clip(s(j, "prompt"), 40),
            ];
            if wide {
                row.extend([cell(&j["session"]), cell(&j["result"]["branch"]), clip(s(j, "detail"), 60)]);
            }
            row
        })
        .collect();
    let mut headers = vec!["ID", "STATE", "REASON", "HARNESS", "SANDBOX", "COMMITS", "VERIFY", "CREATED", "PROMPT"];
    if wide {
        headers.extend(["SESSION", "BRANCH", "DETAIL"]);
    }
    render::table(&headers, &rows)
}

pub async fn run(ctx: &Ctx, a: JobArgs) -> Result<i32, Error> {
    let v = match (a.command, a.id) {
        (Some(JobCmd::Start(s)), _) => {
            let prompt = read_prompt(s.prompt.as_deref(), s.prompt_file.as_deref())?;
            let v = ctx.client.post("/api/jobs", &start_body(&s, prompt)).await?;
            if !ctx.json {
                // The id alone, so that `JOB=$(hangar job start ...)` works.
                render::line(&clean(render::s(&v, "id")))?;
                return Ok(0);
            }
            v
        }
        (Some(JobCmd::Cancel(j)), _) => ctx.client.post(&path(&["api", "jobs", &j.id, "cancel"]), &json!({})).await?,
        (Some(JobCmd::Events(j)), _) => {
            let json = ctx.json;
            let p = path(&["api", "jobs", &j.id, "events", "stream"]);
            let mut ending = Ending::default();
            return ctx.client.follow(&p, None, |ev| print_event(ev, json, &mut ending)).await;
        }
        (None, Some(id)) => {
            let v = ctx.client.get(&path(&["api", "jobs", &id])).await?;
            return ctx.print_as(&v, None, crate::id_of, |v, _| show(v, render::now()));
        }
        // clap shows the help instead (arg_required_else_help).
        (None, None) => return Err(Error::Input("a job id, or start, cancel or events".into())),
    };
    ctx.print(&v, |v| show(v, render::now()))
}

pub fn start_body(a: &JobStartArgs, prompt: String) -> Value {
    let mut b = json!({ "prompt": prompt });
    let optional = [
        ("sandbox", &a.sandbox),
        ("harness", &a.harness),
        ("cwd", &a.cwd),
        ("verify", &a.verify),
        ("idempotency_key", &a.idempotency_key),
    ];
    for (k, v) in optional {
        if let Some(v) = v {
            b[k] = json!(v);
        }
    }
    if let Some(p) = &a.provider {
        let options: Map<String, Value> = a.options.iter().cloned().collect();
        b["sandbox_spec"] = json!({ "provider": p, "options": options });
    }
    if let Some(t) = a.timeout {
        b["timeout_minutes"] = json!(t);
    }
    if !a.secrets.is_empty() {
        b["secrets"] = json!(a.secrets);
    }
    if a.sandbox_login {
        b["sandbox_login"] = json!(true);
    }
    b
}

pub fn show(v: &Value, now: f64) -> String {
    let state = match v["reason"].as_str() {
        Some(r) => format!("{} ({})", cell(&v["state"]), clean(r)),
        None => cell(&v["state"]),
    };
    let r = &v["result"];
    let verify = match (r["verification"]["command"].as_str(), r["verification"]["exit_code"].as_i64()) {
        (Some(c), Some(code)) => {
            let timed_out = if r["verification"]["timed_out"] == true { ", timed out" } else { "" };
            format!("`{}` exited {code}{timed_out}", clip(c, 60))
        }
        _ => String::new(),
    };
    let pushed = match &r["pushed"] {
        Value::Bool(p) => if *p { "yes" } else { "no" }.to_string(),
        _ if r.is_object() => "no upstream".to_string(),
        _ => String::new(),
    };
    render::fields(&[
        ("id", clean(s(v, "id"))),
        ("state", render::state(&state)),
        ("detail", v["detail"].as_str().map(|d| clip(d, 100)).unwrap_or_default()),
        ("sandbox", clean(s(v, "sandbox"))),
        ("session", clean(s(v, "session"))),
        ("harness", clean(s(v, "harness"))),
        ("prompt", clip(s(v, "prompt"), 100)),
        ("created", ago_of(now, &v["created_at"])),
        ("finished", if v["finished_at"].is_number() { ago_of(now, &v["finished_at"]) } else { String::new() }),
        ("branch", r["branch"].as_str().map(clean).unwrap_or_default()),
        ("head", r["head"].as_str().map(clean).unwrap_or_default()),
        ("base", r["base"].as_str().map(clean).unwrap_or_default()),
        ("commits", r["commits_ahead"].as_i64().map(|n| format!("{n} since the base")).unwrap_or_default()),
        ("dirty", r["dirty"].as_bool().map(|d| if d { "yes" } else { "no" }.to_string()).unwrap_or_default()),
        ("pushed", pushed),
        ("verify", verify),
        ("pr", r["pr_url"].as_str().map(|u| format!("{} (agent reported)", clean(u))).unwrap_or_default()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> JobStartArgs {
        JobStartArgs {
            sandbox: Some("default".into()),
            provider: None,
            options: vec![],
            harness: None,
            prompt: Some("p".into()),
            prompt_file: None,
            cwd: None,
            verify: None,
            timeout: None,
            idempotency_key: None,
            secrets: vec![],
            sandbox_login: false,
        }
    }

    #[test]
    fn the_start_body() {
        assert_eq!(start_body(&args(), "p".into()), json!({"sandbox": "default", "prompt": "p"}));
        let mut a = args();
        a.sandbox = None;
        a.provider = Some("docker".into());
        a.options = vec![("image".into(), json!("hangar-envd:latest"))];
        a.verify = Some("cargo test".into());
        a.timeout = Some(30);
        a.harness = Some("worker".into());
        a.secrets = vec!["ANTHROPIC_API_KEY".into()];
        a.sandbox_login = true;
        assert_eq!(
            start_body(&a, "p".into()),
            json!({"prompt": "p", "harness": "worker", "verify": "cargo test", "timeout_minutes": 30,
                   "sandbox_spec": {"provider": "docker", "options": {"image": "hangar-envd:latest"}},
                   "secrets": ["ANTHROPIC_API_KEY"], "sandbox_login": true})
        );
    }

    #[test]
    fn a_job_with_what_hangar_measured() {
        let v = json!({"id": "job_1", "state": "succeeded", "reason": "ok", "sandbox": "default", "session": "ses_1",
            "harness": "worker", "prompt": "x", "created_at": 0.0, "finished_at": 30.0,
            "result": {"branch": "main", "head": "e749", "base": "ea75", "commits_ahead": 1, "dirty": false,
                "pushed": null, "verification": {"command": "true", "exit_code": 0, "timed_out": false},
                "pr_url": "https://github.com/acme/shipper/pull/42", "pr_url_source": "agent_reported"}});
        let out = show(&v, 90.0);
        for want in [
            "state     succeeded (ok)\n",
            "finished  1m ago\n",
            "commits   1 since the base\n",
            "pushed    no upstream\n",
            "verify    `true` exited 0\n",
            "pr        https://github.com/acme/shipper/pull/42 (agent reported)\n",
        ] {
            assert!(out.contains(want), "{want:?} in\n{out}");
        }
        let t = table(&json!({"jobs": [v]}), 90.0, false);
        assert!(t.starts_with("ID     STATE      REASON  HARNESS  SANDBOX  COMMITS  VERIFY  CREATED  PROMPT\n"), "{t}");
        assert!(t.contains("job_1  succeeded  ok      worker   default  1        0       1m ago   x\n"), "{t}");
    }
}
