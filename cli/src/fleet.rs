//! `hangar fleet`: every agent at a glance. `--once` prints `GET /api/fleet`; otherwise the
//! table is kept from `GET /api/fleet/stream` (`snapshot`, then `agent`, `gone`, `inbox`,
//! `summary`) and redrawn on each event: in place on a terminal, appended otherwise.
use std::io::IsTerminal;

use serde_json::Value;

use crate::{
    args::FleetArgs,
    client::{on_close, with_query, Error, Next, SseEvent},
    render::{self, ago_of, cell, clean, clip, s},
    Ctx,
};

/// The fleet as the stream has described it so far.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Fleet {
    pub counts: Value,
    pub owners: Value,
    pub slots: Value,
    pub inbox: Value,
    /// In the relay's order (`ROLES`, then name), kept as `agent` events change roles: a unit
    /// that starts needing you moves up at once.
    pub units: Vec<Value>,
}

impl Fleet {
    /// The whole read (`GET /api/fleet`, or a `snapshot` event).
    pub fn from_read(v: &Value) -> Fleet {
        Fleet {
            counts: v["counts"].clone(),
            owners: v["owners"].clone(),
            slots: v["slots"].clone(),
            inbox: v["inbox"].clone(),
            units: v["units"].as_array().cloned().unwrap_or_default(),
        }
    }

    /// Applies one stream event; whether the picture changed.
    pub fn apply(&mut self, event: &str, data: &Value) -> bool {
        match event {
            "snapshot" => *self = Fleet::from_read(data),
            "agent" => {
                match self.units.iter_mut().find(|u| u["id"] == data["id"]) {
                    Some(u) => *u = data.clone(),
                    None => self.units.push(data.clone()),
                }
                // Stable: units the relay ordered alike keep its order.
                self.units.sort_by_key(urgency);
            }
            "gone" => self.units.retain(|u| u["id"] != data["id"]),
            "inbox" => self.inbox = data.clone(),
            "summary" => {
                for (k, field) in
                    [("counts", &mut self.counts), ("owners", &mut self.owners), ("slots", &mut self.slots)]
                {
                    if let Some(v) = data.get(k) {
                        *field = v.clone();
                    }
                }
            }
            _ => return false,
        }
        true
    }
}

/// `pr 40%` from the agent's own report, `pr ~35%` from the estimate, `-` without a stage.
/// The roles, most urgent first, as the relay orders its units (docs/fleet.md).
const ROLES: [&str; 6] = ["approval", "failed", "denied", "running", "queued", "off"];

/// Where a unit sorts: its role's place (an unknown one last), then its name.
fn urgency(u: &Value) -> (usize, String) {
    (ROLES.iter().position(|r| u["role"] == *r).unwrap_or(ROLES.len()), s(u, "name").to_string())
}

fn stage(u: &Value) -> String {
    let Some(st) = u["stage"].as_str() else { return "-".into() };
    match (u["stage_pct"].as_f64(), u["stage_estimate"]["pct"].as_f64()) {
        (Some(p), _) => format!("{} {p:.0}%", clean(st)),
        (None, Some(p)) => format!("{} ~{p:.0}%", clean(st)),
        _ => clean(st),
    }
}

/// The fleet's table; `wide` adds the id, the session and the task.
pub fn render(f: &Fleet, now: f64, wide: bool) -> String {
    let c = &f.counts;
    let mut out = format!(
        "fleet at {}: {} running, {} queued, {} approval, {} failed, {} denied, {} off; slots {}/{}\n",
        render::clock(now),
        cell(&c["running"]),
        cell(&c["queued"]),
        cell(&c["approval"]),
        cell(&c["failed"]),
        cell(&c["denied"]),
        cell(&c["off"]),
        cell(&f.slots["used"]),
        cell(&f.slots["max"]),
    );
    let rows: Vec<Vec<String>> = f
        .units
        .iter()
        .map(|u| {
            let status = u["label"].as_str().or(u["role"].as_str()).map(clean).unwrap_or_else(|| "-".into());
            let cost = render::usd(&u["usage"]["cost_usd"], 2).unwrap_or_else(|| "-".into());
            let now_doing = u["now"].as_str().map(|n| clip(n, 48)).unwrap_or_else(|| "-".into());
            let status = match u["role"].as_str() {
                Some(role) => render::paint_as(role, &status),
                None => status,
            };
            let mut row = vec![
                crate::sandboxes::short_or_id(u),
                clip(s(u, "name"), 32),
                status,
                u["owner"].as_str().map(clean).unwrap_or_else(|| "-".into()),
                u["harness"].as_str().map(clean).unwrap_or_else(|| "-".into()),
                stage(u),
                now_doing,
                ago_of(now, &u["last_activity_at"]),
                cost,
            ];
            if wide {
                let task = u["task"].as_str().or(u["work"].as_str()).map(|t| clip(t, 60)).unwrap_or_else(|| "-".into());
                row.extend([clean(s(u, "id")), clean(s(&u["session"], "name")), task]);
            }
            row
        })
        .collect();
    let mut headers = vec!["UNIT", "NAME", "STATUS", "OWNER", "AGENT", "STAGE", "NOW", "ACTIVE", "COST"];
    if wide {
        headers.extend(["ID", "SESSION", "TASK"]);
    }
    out.push_str(&render::table(&headers, &rows));
    let items = f.inbox["items"].as_array().map(Vec::as_slice).unwrap_or_default();
    if !items.is_empty() {
        out.push_str(&format!("\nneeds you ({}):\n", items.len()));
        for i in items {
            let on = i["session_name"].as_str().or(i["sandbox_name"].as_str()).map(clean).unwrap_or_default();
            out.push_str(&format!(
                "  {}  {:<8}  {}  ({on})\n",
                clean(s(i, "id")),
                cell(&i["kind"]),
                crate::inbox::what(i)
            ));
        }
    }
    out
}

/// ANSI: cursor home, clear the screen (as `clear` does), so each redraw replaces the last.
const CLEAR: &str = "\x1b[H\x1b[2J";

pub async fn run(ctx: &Ctx, a: FleetArgs) -> Result<i32, Error> {
    let mut q = vec![];
    if let Some(o) = &a.owner {
        q.push(("owner", o.clone()));
    }
    if a.all {
        q.push(("include_stopped", "true".to_string()));
    }
    if a.once {
        let v = ctx.client.get(&with_query("/api/fleet", &q)).await.map_err(no_fleet)?;
        let short = |u: &Value| crate::sandboxes::short_or_id(u);
        return ctx.print_as(&v, Some("units"), short, |v, wide| render(&Fleet::from_read(v), render::now(), wide));
    }
    let tty = std::io::stdout().is_terminal();
    let json = ctx.json;
    let mut fleet = Fleet::default();
    // The fleet's event ids (`<epoch>.<n>`) resume it: a reconnect sends only what changed.
    let p = with_query("/api/fleet/stream", &q);
    ctx.client.follow(&p, None, |ev| on_event(&mut fleet, ev, json, tty)).await.map_err(no_fleet)
}

/// A relay from before the fleet's routes (`/api/fleet`, docs/fleet.md) answers them `404 no such route`: say so.
fn no_fleet(e: Error) -> Error {
    match e {
        Error::Api { status: 404, code, message } if message == "no such route" => Error::Api {
            status: 404,
            code,
            message: "no such route: this relay has no Fleet API (GET /api/fleet); it needs a newer relay".into(),
        },
        e => e,
    }
}

fn on_event(fleet: &mut Fleet, ev: &SseEvent, json: bool, tty: bool) -> Result<Next, Error> {
    if json {
        render::json(&ev.to_json())?;
    }
    if ev.event == "close" {
        return on_close(ev);
    }
    if fleet.apply(&ev.event, &ev.json()?) && !json {
        let table = render(fleet, render::now(), false);
        render::out(&if tty { format!("{CLEAR}{table}") } else { format!("{table}\n") })?;
    }
    Ok(Next::Continue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn unit(id: &str, now: &str) -> Value {
        json!({"id": id, "name": format!("box-{id}"), "role": "running", "label": "Running", "owner": "sean",
               "harness": "claude-code", "stage": "edit", "stage_pct": null,
               "stage_estimate": {"pct": 35}, "now": now, "last_activity_at": 940.0,
               "usage": {"cost_usd": 1.4249}})
    }

    fn snapshot() -> Value {
        json!({"at": 1000.0, "person": "sean",
               "counts": {"approval": 0, "failed": 0, "denied": 0, "running": 2, "queued": 0, "off": 0},
               "owners": [{"id": "sean", "name": "Sean", "count": 2}], "slots": {"used": 2, "max": 120},
               "inbox": {"counts": {}, "items": []},
               "units": [unit("sb-1", "editing src/a.rs"), unit("sb-2", "running cargo test")]})
    }

    #[test]
    fn the_stream_keeps_the_picture() {
        let mut f = Fleet::default();
        assert!(f.apply("snapshot", &snapshot()));
        assert_eq!(f, Fleet::from_read(&snapshot()));
        assert!(f.apply("agent", &unit("sb-2", "waiting on you: Bash")));
        assert_eq!(f.units.len(), 2);
        assert_eq!(f.units[1]["now"], "waiting on you: Bash");
        assert!(f.apply("agent", &unit("sb-3", "planning")));
        assert_eq!(f.units.iter().map(|u| u["id"].clone()).collect::<Vec<_>>(), ["sb-1", "sb-2", "sb-3"]);
        // A unit that starts needing you moves to the top, as the relay would order it.
        let mut asks = unit("sb-3", "waiting on you: Bash");
        asks["role"] = json!("approval");
        assert!(f.apply("agent", &asks));
        assert_eq!(f.units.iter().map(|u| u["id"].clone()).collect::<Vec<_>>(), ["sb-3", "sb-1", "sb-2"]);
        asks["role"] = json!("running");
        assert!(f.apply("agent", &asks));
        assert_eq!(f.units.iter().map(|u| u["id"].clone()).collect::<Vec<_>>(), ["sb-1", "sb-2", "sb-3"]);
        assert!(f.apply("gone", &json!({"id": "sb-1"})));
        assert_eq!(f.units.iter().map(|u| u["id"].clone()).collect::<Vec<_>>(), ["sb-2", "sb-3"]);
        let items = json!({"counts": {"approval": 1}, "items": [{"id": "inb-4b0d", "kind": "approval",
            "title": "Bash: git push origin main", "text": "", "options": [], "session_name": "release"}]});
        assert!(f.apply("inbox", &items));
        assert_eq!(f.inbox, items);
        assert!(f.apply("summary", &json!({"counts": {"running": 1, "approval": 1}, "slots": {"used": 2, "max": 120}})));
        assert_eq!(f.counts["approval"], 1);
        assert_eq!(f.owners, snapshot()["owners"], "what a summary leaves out stays");
        assert!(!f.apply("mystery", &json!({})));
        // A new snapshot (a reconnect from too old an id) replaces everything.
        assert!(f.apply("snapshot", &snapshot()));
        assert_eq!(f, Fleet::from_read(&snapshot()));
    }

    #[test]
    fn the_table() {
        let mut f = Fleet::from_read(&snapshot());
        f.apply(
            "inbox",
            &json!({"items": [{"id": "inb-4b0d", "kind": "approval", "title": "Bash: git push origin main",
            "text": "", "options": [], "session_name": "release"}]}),
        );
        let out = render(&f, 1000.0, false);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("fleet at "), "{out}");
        assert!(
            lines[0].ends_with(": 2 running, 0 queued, 0 approval, 0 failed, 0 denied, 0 off; slots 2/120"),
            "{out}"
        );
        assert_eq!(
            lines[1],
            "UNIT  NAME      STATUS   OWNER  AGENT        STAGE      NOW                 ACTIVE  COST"
        );
        // A unit is named by the relay's short name; the id stands in where a relay names none.
        assert_eq!(
            lines[2],
            "sb-1  box-sb-1  Running  sean   claude-code  edit ~35%  editing src/a.rs    1m ago  ≈$1.42"
        );
        f.units[0]["short"] = json!("HGR-0001");
        let wide = render(&f, 1000.0, true);
        let wide: Vec<&str> = wide.lines().collect();
        assert!(wide[1].ends_with("COST    ID    SESSION  TASK"), "{wide:?}");
        assert!(wide[2].starts_with("HGR-0001  box-sb-1  Running ") && wide[2].contains("  sb-1  "), "{wide:?}");
        assert_eq!(lines[5], "needs you (1):");
        assert_eq!(lines[6], "  inb-4b0d  approval  Bash: git push origin main  (release)");
    }

    #[test]
    fn stages() {
        assert_eq!(stage(&json!({"stage": "pr", "stage_pct": 40})), "pr 40%");
        assert_eq!(stage(&json!({"stage": "pr", "stage_pct": null, "stage_estimate": {"pct": 35}})), "pr ~35%");
        assert_eq!(stage(&json!({"stage": "test"})), "test");
        assert_eq!(stage(&json!({"stage": null})), "-");
    }

    #[test]
    fn an_empty_fleet_still_renders() {
        let out = render(&Fleet::default(), 0.0, false);
        assert!(out.contains("- running"), "{out}");
        assert!(out.contains("\nUNIT  NAME  STATUS"), "{out}");
    }
}
