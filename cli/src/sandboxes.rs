//! `hangar sandboxes [list|get|create|rm|pause|resume|share]`: `GET/POST /api/sandboxes`,
//! `GET/DELETE/PATCH /api/sandboxes/{ref}`, `POST /api/sandboxes/{ref}/pause|resume`.
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
        SandboxesCmd::Get(g) => {
            let v = ctx.client.get(&path(&["api", "sandboxes", &g.sandbox])).await?;
            ctx.print_as(&v, None, crate::id_of, |v, _| show(v, render::now()))
        }
        SandboxesCmd::Create(c) => create(ctx, c).await,
        SandboxesCmd::Rm(r) => {
            ctx.client.delete(&path(&["api", "sandboxes", &r.sandbox])).await?;
            if !ctx.json {
                render::line(&format!("removed sandbox {}", render::clean(&r.sandbox)))?;
            }
            Ok(0)
        }
        SandboxesCmd::Pause(r) => set_paused(ctx, &r.sandbox, "pause").await,
        SandboxesCmd::Resume(r) => set_paused(ctx, &r.sandbox, "resume").await,
        SandboxesCmd::Share(a) => share(ctx, a).await,
    }
}

/// `POST /api/sandboxes/{ref}/pause` or `/resume`: `paused sandbox box (sbx_…)`.
async fn set_paused(ctx: &Ctx, sandbox: &str, verb: &str) -> Result<i32, Error> {
    let v = ctx.client.post(&path(&["api", "sandboxes", sandbox, verb]), &json!({})).await?;
    ctx.print(&v, |v| {
        format!("{verb}d sandbox {} ({}): {}\n", cell(&v["name"]), cell(&v["id"]), render::state_cell(&v["state"]))
    })
}

/// One sandbox's fields.
pub fn show(v: &Value, now: f64) -> String {
    render::fields(&[
        ("name", render::clean(s(v, "name"))),
        ("id", render::clean(s(v, "id"))),
        ("short", render::clean(s(v, "short"))),
        ("provider", cell(&v["provider"])),
        ("state", render::state_cell(&v["state"])),
        ("isolation", cell(&v["isolation"])),
        ("daemon", cell(&v["daemon"])),
        ("daemon kind", cell(&v["daemon_kind"])),
        ("workdir", render::clean(s(v, "workdir"))),
        ("owner", cell(&v["owner"])),
        ("shared with", shared(&v["shared_with"])),
        ("created", ago_of(now, &v["created_at"])),
    ])
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
    ctx.print_as(&v, Some("sandboxes"), crate::id_of, |v, wide| table(v, render::now(), wide))
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

/// The sandboxes; `wide` adds the id, the daemon's kind and the working directory.
pub fn table(v: &Value, now: f64, wide: bool) -> String {
    let rows: Vec<Vec<String>> = v["sandboxes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|b| {
            let mut row = vec![
                render::clean(s(b, "name")),
                short_or_id(b),
                cell(&b["provider"]),
                render::state_cell(&b["state"]),
                cell(&b["isolation"]),
                cell(&b["daemon"]),
                cell(&b["owner"]),
                shared(&b["shared_with"]),
                ago_of(now, &b["created_at"]),
            ];
            if wide {
                row.extend([render::clean(s(b, "id")), cell(&b["daemon_kind"]), cell(&b["workdir"])]);
            }
            row
        })
        .collect();
    let mut headers =
        vec!["NAME", "SHORT", "PROVIDER", "STATE", "ISOLATION", "DAEMON", "OWNER", "SHARED WITH", "CREATED"];
    if wide {
        headers.extend(["ID", "DAEMON KIND", "WORKDIR"]);
    }
    render::table(&headers, &rows)
}

/// The relay's short name for a sandbox (`HGR-8AA3`); the id from a relay that names none.
pub fn short_or_id(b: &Value) -> String {
    match b["short"].as_str().filter(|x| !x.is_empty()) {
        Some(short) => render::clean(short),
        None => render::clean(s(b, "id")),
    }
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
            "short": "HGR-BE06", "isolation": "namespaces", "name": "default", "options": {}, "provider": "local",
            "state": "running", "owner": null, "shared_with": ["*"]},
            {"created_at": 1000, "daemon": true, "id": "sbx_0000000000000001", "short": "HGR-0001",
            "isolation": "namespaces", "name": "box", "options": {}, "provider": "local", "state": "running",
            "owner": "ana", "shared_with": ["bob", "cy"]}]});
        assert_eq!(
            table(&v, 1180.0, false),
            "NAME     SHORT     PROVIDER  STATE    ISOLATION   DAEMON  OWNER  SHARED WITH  CREATED\n\
             default  HGR-BE06  local     running  namespaces  yes     -      everyone     3m ago\n\
             box      HGR-0001  local     running  namespaces  yes     ana    bob,cy       3m ago\n"
        );
        let wide = table(&v, 1180.0, true);
        assert!(wide
            .lines()
            .next()
            .is_some_and(|h| h.ends_with("CREATED  ID                    DAEMON KIND  WORKDIR")));
        assert!(wide.contains("3m ago   sbx_69385d841b83be06  -            -"), "{wide}");
    }
}
