//! The inbox: `hangar inbox` (`GET /api/inbox`), `allow`/`deny` (`POST /api/approvals/{id}`),
//! `answer` (`POST /api/questions/{id}`), `ack` (`POST /api/inbox/{id}/ack`).
use serde_json::{json, Value};

use crate::{
    args::{AnswerArgs, DecideArgs, InboxArgs, ItemArg},
    client::{path, with_query, Error},
    render::{self, ago_of, cell, clean, clip, s},
    Ctx,
};

pub async fn list(ctx: &Ctx, a: InboxArgs) -> Result<i32, Error> {
    let q = if a.ended { vec![("ended", "true".to_string())] } else { vec![] };
    let v = ctx.client.get(&with_query("/api/inbox", &q)).await?;
    ctx.print_as(&v, Some("items"), crate::id_of, |v, wide| table(v, render::now(), a.ended, wide))
}

/// What an item asks or says, on one line: a question's text with its options, an other item's
/// title (a held call's `Bash: git push ...`), else its text.
pub fn what(i: &Value) -> String {
    let (first, second) = if i["kind"] == "question" { ("text", "title") } else { ("title", "text") };
    let text = if s(i, first).is_empty() { s(i, second) } else { s(i, first) };
    let options: Vec<String> =
        i["options"].as_array().map(Vec::as_slice).unwrap_or_default().iter().map(cell).collect();
    let options = if options.is_empty() { String::new() } else { format!(" [{}]", options.join(" | ")) };
    format!("{}{options}", clip(text, 80))
}

/// The items; `wide` adds the approval's or question's own id and the person.
pub fn table(v: &Value, now: f64, ended: bool, wide: bool) -> String {
    let c = &v["counts"];
    let mut out = format!(
        "open: {} approval, {} question, {} failed, {} denied\n",
        cell(&c["approval"]),
        cell(&c["question"]),
        cell(&c["failed"]),
        cell(&c["denied"])
    );
    let rows: Vec<Vec<String>> = v["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|i| {
            let session = i["session_name"].as_str().or(i["job"].as_str()).map(clean).unwrap_or_else(|| "-".into());
            let when = if ended {
                format!("{} {}", cell(&i["state"]), ago_of(now, &i["ended_at"]))
            } else if i["expires_at"].is_number() {
                format!("expires {}", ago_of(now, &i["expires_at"]))
            } else {
                ago_of(now, &i["created_at"])
            };
            let mut row = vec![clean(s(i, "id")), cell(&i["kind"]), session, cell(&i["sandbox_name"]), when, what(i)];
            if wide {
                row.splice(1..1, [cell(&i["ask"]), cell(&i["person"])]);
            }
            row
        })
        .collect();
    let headers: &[&str] = if wide {
        &["ID", "ASK", "PERSON", "KIND", "SESSION", "SANDBOX", "WHEN", "WHAT"]
    } else {
        &["ID", "KIND", "SESSION", "SANDBOX", "WHEN", "WHAT"]
    };
    out.push_str(&render::table(headers, &rows));
    out
}

/// `allowed inb_… (Bash: git push origin main)`
fn ended_line(v: &Value) -> String {
    let outcome = v["outcome"].as_str().map(|o| format!(": {}", clip(o, 80))).unwrap_or_default();
    format!("{} {} ({}){outcome}", cell(&v["state"]), clean(s(v, "id")), what(v))
}

pub async fn decide(ctx: &Ctx, a: DecideArgs, decision: &str) -> Result<i32, Error> {
    let mut body = json!({ "decision": decision });
    if let Some(r) = &a.reason {
        body["reason"] = json!(r);
    }
    let v = ctx.client.post(&path(&["api", "approvals", &a.id]), &body).await?;
    done(ctx, &v)
}

pub async fn answer(ctx: &Ctx, a: AnswerArgs) -> Result<i32, Error> {
    let v = ctx.client.post(&path(&["api", "questions", &a.id]), &json!({ "answer": a.text })).await?;
    done(ctx, &v)
}

pub async fn ack(ctx: &Ctx, a: ItemArg) -> Result<i32, Error> {
    let v = ctx.client.post(&path(&["api", "inbox", &a.id, "ack"]), &json!({})).await?;
    done(ctx, &v)
}

fn done(ctx: &Ctx, v: &Value) -> Result<i32, Error> {
    ctx.print(v, |v| format!("{}\n", ended_line(v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inbox_table() {
        let v = json!({"counts": {"approval": 1, "question": 1, "failed": 0, "denied": 0}, "items": [
            {"id": "inb_1", "kind": "question", "session_name": "pick-db", "sandbox_name": "default",
             "title": "Question from pick-db", "text": "Which database?", "options": ["postgres", "sqlite"], "created_at": 0.0, "expires_at": 3600.0},
            {"id": "inb_2", "kind": "approval", "session_name": "release", "sandbox_name": "dev",
             "title": "Bash: git push origin main", "text": "{\"command\":\"git push\"}", "options": [],
             "created_at": 0.0, "expires_at": 3600.0}]});
        assert_eq!(
            table(&v, 60.0, false, false),
            "open: 1 approval, 1 question, 0 failed, 0 denied\n\
             ID     KIND      SESSION  SANDBOX  WHEN            WHAT\n\
             inb_1  question  pick-db  default  expires in 59m  Which database? [postgres | sqlite]\n\
             inb_2  approval  release  dev      expires in 59m  Bash: git push origin main\n"
        );
    }

    #[test]
    fn an_ended_item() {
        let v = json!({"id": "inb_1", "kind": "question", "state": "answered", "text": "Which database?",
                       "options": ["postgres", "sqlite"], "outcome": "postgres"});
        assert_eq!(ended_line(&v), "answered inb_1 (Which database? [postgres | sqlite]): postgres");
    }
}
