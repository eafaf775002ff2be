//! Tokens (admin): `hangar tokens [list]`, `tokens create`, `tokens revoke`.
use serde_json::{json, Value};

use crate::{
    args::{TokenCreateArgs, TokensArgs, TokensCmd},
    client::{path, Error},
    render::{self, ago_of, cell, clean, s},
    Ctx,
};

pub async fn run(ctx: &Ctx, a: TokensArgs) -> Result<i32, Error> {
    match a.command.unwrap_or(TokensCmd::List) {
        TokensCmd::List => {
            let v = ctx.client.get("/api/tokens").await?;
            ctx.print_as(&v, Some("tokens"), crate::id_of, |v, _| table(v, render::now()))?;
        }
        TokensCmd::Create(c) => {
            let v = ctx.client.post("/api/tokens", &create_body(&c)).await?;
            if ctx.json {
                render::json(&v)?;
            } else {
                render::out(&created(&v))?;
            }
        }
        TokensCmd::Revoke(r) => {
            ctx.client.delete(&path(&["api", "tokens", &r.id])).await?;
            if !ctx.json {
                render::line(&format!("revoked {}: its streams ended and its processes were killed", clean(&r.id)))?;
            }
        }
    }
    Ok(0)
}

pub fn create_body(c: &TokenCreateArgs) -> Value {
    let mut b = json!({ "name": c.name, "scope": c.scope });
    if let Some(p) = &c.person {
        b["person"] = json!({ "id": p });
        if let Some(n) = &c.person_name {
            b["person"]["name"] = json!(n);
        }
    }
    b
}

/// The new token, its secret last: it is shown this once.
pub fn created(v: &Value) -> String {
    render::fields(&[
        ("id", clean(s(v, "id"))),
        ("name", clean(s(v, "name"))),
        ("scope", clean(s(v, "scope"))),
        ("person", clean(s(v, "person"))),
        ("secret", format!("{}   (shown this once: keep it now)", clean(s(v, "secret")))),
    ])
}

pub fn table(v: &Value, now: f64) -> String {
    let rows: Vec<Vec<String>> = v["tokens"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|t| {
            vec![
                clean(s(t, "id")),
                clean(s(t, "name")),
                cell(&t["scope"]),
                cell(&t["person"]),
                ago_of(now, &t["created_at"]),
                ago_of(now, &t["revoked_at"]),
            ]
        })
        .collect();
    render::table(&["ID", "NAME", "SCOPE", "PERSON", "CREATED", "REVOKED"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_names_the_person_only_when_given() {
        let mut c = TokenCreateArgs { name: "ci".into(), scope: "user".into(), person: None, person_name: None };
        assert_eq!(create_body(&c), json!({"name": "ci", "scope": "user"}));
        c.person = Some("ada".into());
        assert_eq!(create_body(&c), json!({"name": "ci", "scope": "user", "person": {"id": "ada"}}));
        c.person_name = Some("Ada".into());
        assert_eq!(create_body(&c), json!({"name": "ci", "scope": "user", "person": {"id": "ada", "name": "Ada"}}));
    }

    #[test]
    fn the_table_and_a_new_token() {
        let v = json!({"tokens": [
            {"id": "tok_1", "name": "admin", "scope": "admin", "person": "admin", "created_at": 0, "revoked_at": null},
            {"id": "tok_2", "name": "ci", "scope": "user", "person": "ci", "created_at": 0, "revoked_at": 120}]});
        assert_eq!(
            table(&v, 180.0),
            "ID     NAME   SCOPE  PERSON  CREATED  REVOKED\n\
             tok_1  admin  admin  admin   3m ago   -\n\
             tok_2  ci     user   ci      3m ago   1m ago\n"
        );
        let t = created(&json!({"id": "tok_2", "name": "ci", "scope": "user", "person": "ci", "secret": "hgr_x"}));
        assert!(t.ends_with("secret  hgr_x   (shown this once: keep it now)\n"), "{t}");
    }
}
