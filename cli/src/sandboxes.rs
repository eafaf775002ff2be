//! `hangar sandboxes [list|create|rm|share]`: `GET/POST /api/sandboxes`,
//! `DELETE/PATCH /api/sandboxes/{ref}`.
use http::Method;
use serde_json::{json, Map, Value};

use crate::{
    args::{CreateSandboxArgs, SandboxesArgs, SandboxesCmd, ShareSandboxArgs},
    client::{path, Error},
    render::{self, ago_of, cell, s},
    Ctx,
};

pub async fn run(ctx: &Ctx, a: SandboxesArgs) -> Result<i32, Error> {
    match a.command.unwrap_or(SandboxesCmd::List) {
        SandboxesCmd::List => list(ctx).await,
        SandboxesCmd::Create(c) => create(ctx, c).await,
        SandboxesCmd::Rm(r) => {
            ctx.client.delete(&path(&["api", "sandboxes", &r.sandbox])).await?;
            if !ctx.json {
                render::line(&format!("removed sandbox {}", render::clean(&r.sandbox)))?;
            }
            Ok(0)
        }
        SandboxesCmd::Share(a) => share(ctx, a).await,
    }
}

async fn share(ctx: &Ctx, a: ShareSandboxArgs) -> Result<i32, Error> {
    let body = json!({ "shared_with": a.persons });
    let v = ctx.client.call(Method::PATCH, &path(&["api", "sandboxes", &a.sandbox]), Some(&body)).await?;
    if ctx.json {
        render::json(&v)?;
    } else {
        render::line(&format!("sandbox {} is shared with {}", cell(&v["name"]), shared(&v["shared_with"])))?;
    }
    Ok(0)
}

/// Whom a sandbox is shared with, for people: the ids by commas, `everyone`, or `nobody`.
fn shared(v: &Value) -> String {
    let ids: Vec<String> = v
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|p| render::clean(p.as_str().unwrap_or("")))
        .collect();
    if ids.iter().any(|p| p == "*") {
        "everyone".into()
    } else if ids.is_empty() {
        "nobody".into()
    } else {
        ids.join(",")
    }
}

async fn list(ctx: &Ctx) -> Result<i32, Error> {
    let v = ctx.client.get("/api/sandboxes").await?;
    ctx.print(&v, |v| table(v, render::now()))
}

async fn create(ctx: &Ctx, c: CreateSandboxArgs) -> Result<i32, Error> {
    let v = ctx.client.post("/api/sandboxes", &create_body(&c)).await?;
    if ctx.json {
        render::json(&v)?;
    } else {
        render::line(&format!(
            "created sandbox {} ({}, {}, {}, isolation {})",
            cell(&v["name"]),
            cell(&v["id"]),
            cell(&v["provider"]),
            cell(&v["state"]),
            cell(&v["isolation"])
        ))?;
    }
    Ok(0)
}

pub fn create_body(c: &CreateSandboxArgs) -> Value {
    let mut body = json!({ "name": c.name });
    if let Some(p) = &c.provider {
        body["provider"] = json!(p);
    }
    if !c.options.is_empty() {
        body["options"] = Value::Object(c.options.iter().cloned().collect::<Map<String, Value>>());
    }
    if !c.share.is_empty() {
        body["shared_with"] = json!(c.share);
    }
    body
}

pub fn table(v: &Value, now: f64) -> String {
    let rows: Vec<Vec<String>> = v["sandboxes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|b| {
            vec![
                render::clean(s(b, "name")),
                render::clean(s(b, "id")),
                cell(&b["provider"]),
                cell(&b["state"]),
                cell(&b["isolation"]),
                cell(&b["daemon"]),
                cell(&b["owner"]),
                shared(&b["shared_with"]),
                ago_of(now, &b["created_at"]),
            ]
        })
        .collect();
    render::table(&["NAME", "ID", "PROVIDER", "STATE", "ISOLATION", "DAEMON", "OWNER", "SHARED WITH", "CREATED"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_has_only_what_was_given() {
        let c = CreateSandboxArgs { name: "box".into(), provider: None, options: vec![], share: vec![] };
        assert_eq!(create_body(&c), json!({"name": "box"}));
        let c = CreateSandboxArgs {
            name: "box".into(),
            provider: Some("docker".into()),
            options: vec![("image".into(), json!("hangar-envd:latest")), ("memory_mb".into(), json!(2048))],
            share: vec!["bob".into(), "*".into()],
        };
        assert_eq!(
            create_body(&c),
            json!({"name": "box", "provider": "docker", "options": {"image": "hangar-envd:latest", "memory_mb": 2048},
                   "shared_with": ["bob", "*"]})
        );
    }

    #[test]
    fn the_table() {
        let v = json!({"sandboxes": [{"created_at": 1000, "daemon": true, "id": "sbx_69385d841b83be06",
            "isolation": "namespaces", "name": "default", "options": {}, "provider": "local", "state": "running",
            "owner": null, "shared_with": ["*"]},
            {"created_at": 1000, "daemon": true, "id": "sbx_0000000000000001", "isolation": "namespaces",
            "name": "box", "options": {}, "provider": "local", "state": "running", "owner": "ana",
            "shared_with": ["bob", "cy"]}]});
        assert_eq!(
            table(&v, 1180.0),
            "NAME     ID                    PROVIDER  STATE    ISOLATION   DAEMON  OWNER  SHARED WITH  CREATED\n\
             default  sbx_69385d841b83be06  local     running  namespaces  yes     -      everyone     3m ago\n\
             box      sbx_0000000000000001  local     running  namespaces  yes     ana    bob,cy       3m ago\n"
        );
    }
}
