//! A tool's arguments, derived once from their Rust type: the schema `tools/list` publishes and
//! the reading of a call's arguments both come from the type's `JsonSchema` and `Deserialize`,
//! so that a field added to a request (`sessions::StartRequest`, say) is one edit that REST, MCP
//! and the fuzz targets all see.
//!
//! A tool with several actions is an enum tagged by `action` (`#[serde(tag = "action")]`), one
//! variant per action. It is published as one flat object (every action's arguments, `action` an
//! enum), not as the derived `oneOf`: clients that build calls from a schema handle a flat object
//! best (some refuse a top-level `oneOf`), and the relay refuses an argument that belongs to
//! another action with a message that names the action, which a `oneOf` could not say.
use std::{marker::PhantomData, sync::Arc};

use rmcp::model::JsonObject;
use schemars::{generate::SchemaSettings, JsonSchema};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use crate::error::{Error, Result};

/// One action of a tool: its name and the arguments it takes and requires besides `action`.
struct Action {
    name: String,
    takes: Vec<String>,
    required: Vec<String>,
}

/// A tool's arguments `T`: its published schema, and how a call's arguments are read into `T`.
pub struct Shape<T> {
    tool: &'static str,
    /// Empty for a tool without actions (a plain struct).
    actions: Vec<Action>,
    /// Every argument the tool knows, `action` too (sorted).
    known: Vec<String>,
    /// Whether an argument of another action is refused (else it is ignored, as the `process`
    /// tool always has).
    strict: bool,
    schema: Arc<JsonObject>,
    /// Arguments that two actions take with different schemas: the flat schema can say only one
    /// (a test keeps this empty).
    conflicts: Vec<String>,
    of: PhantomData<fn() -> T>,
}

impl<T: JsonSchema + DeserializeOwned> Shape<T> {
    /// `strict`: refuse an argument that belongs to another action than the call's.
    pub fn new(tool: &'static str, strict: bool) -> Shape<T> {
        let root = derived::<T>();
        let variants = root.get("oneOf").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut shape = Shape {
            tool,
            actions: Vec::new(),
            known: Vec::new(),
            strict,
            schema: Arc::default(),
            conflicts: Vec::new(),
            of: PhantomData,
        };
        let schema = if variants.is_empty() { shape.plain(root) } else { shape.flat(&variants) };
        shape.known.sort();
        shape.schema = Arc::new(schema);
        shape
    }

    /// A struct's schema as derived, with unknown arguments refused.
    fn plain(&mut self, root: Map<String, Value>) -> JsonObject {
        let properties = root.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
        self.known = properties.keys().cloned().collect();
        let mut schema = JsonObject::new();
        schema.insert("type".into(), json!("object"));
        schema.insert("properties".into(), Value::Object(properties));
        if let Some(required) = root.get("required") {
            schema.insert("required".into(), required.clone());
        }
        schema.insert("additionalProperties".into(), json!(false));
        schema
    }

    /// One object with every action's arguments; an argument that not every action takes is
    /// described with the actions that take it (`start, prompt: what to ask the agent`).
    fn flat(&mut self, variants: &[Value]) -> JsonObject {
        let mut properties = Map::new();
        let mut takers: Vec<(String, Vec<String>)> = Vec::new();
        for v in variants {
            let props = v.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
            let name = props.get("action").and_then(|a| a.get("const")).and_then(Value::as_str).unwrap_or_default();
            let name = name.to_string();
            let required = v.get("required").and_then(Value::as_array).into_iter().flatten();
            let required = required.filter_map(Value::as_str).filter(|r| *r != "action").map(str::to_string);
            let mut action = Action { name: name.clone(), takes: Vec::new(), required: required.collect() };
            for (k, s) in props.into_iter().filter(|(k, _)| k != "action") {
                match properties.get(&k) {
                    Some(first) if without_description(first) != without_description(&s) => {
                        self.conflicts.push(format!("{k} ({name})"));
                    }
                    Some(_) => {}
                    None => {
                        properties.insert(k.clone(), s);
                    }
                }
                match takers.iter_mut().find(|(t, _)| *t == k) {
                    Some((_, by)) => by.push(name.clone()),
                    None => takers.push((k.clone(), vec![name.clone()])),
                }
                action.takes.push(k);
            }
            self.actions.push(action);
        }
        for (k, by) in takers {
            let Some(Value::Object(p)) = properties.get_mut(&k) else { continue };
            if let (Some(Value::String(d)), true) = (p.get_mut("description"), by.len() < self.actions.len()) {
                *d = format!("{}: {}", by.join(", "), lower_first(d));
            }
        }
        // What every action requires is required of every call.
        let first = self.actions.first().map(|a| a.required.clone()).unwrap_or_default();
        let always = first.into_iter().filter(|r| self.actions.iter().all(|a| a.required.contains(r)));
        let names: Vec<&str> = self.actions.iter().map(|a| a.name.as_str()).collect();
        properties.insert("action".into(), json!({ "type": "string", "enum": names }));
        self.known = properties.keys().cloned().collect();
        let mut schema = JsonObject::new();
        schema.insert("type".into(), json!("object"));
        schema.insert("properties".into(), Value::Object(properties));
        schema
            .insert("required".into(), json!(std::iter::once("action".to_string()).chain(always).collect::<Vec<_>>()));
        schema.insert("additionalProperties".into(), json!(false));
        schema
    }

    /// The schema `tools/list` publishes.
    pub fn schema(&self) -> Arc<JsonObject> {
        self.schema.clone()
    }

    /// Arguments two actions take with different schemas.
    #[cfg(test)]
    pub fn conflicts(&self) -> &[String] {
        &self.conflicts
    }

    /// A call's arguments as `T`. Refused, each with a message that names the argument: one the
    /// tool does not know; a missing or unknown action; (when strict) one that belongs to
    /// another action; a missing one that the action requires; one of the wrong type.
    pub fn read(&self, raw: Option<JsonObject>) -> Result<T> {
        let tool = self.tool;
        let mut args = raw.unwrap_or_default();
        let bad = |e: &dyn std::fmt::Display| Error::invalid(format!("{tool}: bad arguments: {e}"));
        if let Some(k) = args.keys().find(|k| !self.known.contains(k)) {
            let known: Vec<String> = self.known.iter().map(|k| format!("`{k}`")).collect();
            return Err(bad(&format!("unknown field `{k}`, expected one of {}", known.join(", "))));
        }
        if !self.actions.is_empty() {
            let asked = args.get("action").and_then(Value::as_str);
            let Some(action) = self.actions.iter().find(|a| Some(a.name.as_str()) == asked) else {
                // serde says what is wrong with `action`: missing, not a string, no such action.
                let e = serde_json::from_value::<T>(Value::Object(args)).err();
                return Err(e.map_or_else(|| bad(&"no such action"), |e| bad(&e)));
            };
            let foreign: Vec<String> =
                args.keys().filter(|k| *k != "action" && !action.takes.contains(k)).cloned().collect();
            if let (Some(k), true) = (foreign.first(), self.strict) {
                let mut takes = action.takes.clone();
                takes.sort();
                let takes = if takes.is_empty() { "no other arguments".to_string() } else { takes.join(", ") };
                return Err(Error::invalid(format!(
                    "{tool}: {k} does not apply to action {:?} (it takes {takes})",
                    action.name
                )));
            }
            for k in foreign {
                args.remove(&k);
            }
            if let Some(r) = action.required.iter().find(|r| args.get(*r).is_none_or(Value::is_null)) {
                return Err(Error::invalid(format!("{tool}: {r} is required for action {:?}", action.name)));
            }
        }
        serde_json::from_value(Value::Object(args)).map_err(|e| bad(&e))
    }
}

/// `T`'s schema as schemars derives it for what `T` deserializes, inlined (no `$defs`), with
/// `null` taken out of every type (`tidy`) and descriptions on one line.
fn derived<T: JsonSchema>() -> Map<String, Value> {
    let mut v = inlined::<T>(SchemaSettings::draft2020_12());
    tidy(&mut v, true);
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The schema of a tool's results `T` (its `outputSchema`): what `T` serializes, inlined, with
/// descriptions on one line. Unlike the arguments' schema it keeps `null` where `T` writes one
/// (an `Option` field without `skip_serializing_if`): clients validate results against it. A
/// tool whose actions answer differently has an untagged enum of results (`anyOf`); the root
/// says `type: object` as well, which clients require of an `outputSchema` (rmcp drops one
/// without it for older clients) and which every result is.
pub fn output<T: JsonSchema>() -> Arc<JsonObject> {
    let mut v = inlined::<T>(SchemaSettings::draft2020_12().for_serialize());
    tidy(&mut v, false);
    let Value::Object(mut m) = v else { return Arc::default() };
    // The Rust type's name and doc, not the tool's: noise to a client.
    m.remove("title");
    m.remove("description");
    m.insert("type".into(), json!("object"));
    Arc::new(m)
}

fn inlined<T: JsonSchema>(settings: SchemaSettings) -> Value {
    let settings = settings.with(|s| {
        s.inline_subschemas = true;
        s.meta_schema = None;
    });
    settings.into_generator().into_root_schema_for::<T>().to_value()
}

/// Descriptions on one line, and (`no_null`, for arguments) `null` out of every type. An
/// `Option` argument is derived as "this or null". serde reads a `null` there as absent, but the
/// published schemas have always said only the type, and clients validate against them: what
/// they may send stays as it was.
fn tidy(v: &mut Value, no_null: bool) {
    match v {
        Value::Object(m) => {
            if no_null {
                if let Some(Value::Array(types)) = m.get_mut("type") {
                    types.retain(|t| t != "null");
                    if types.len() == 1 {
                        let only = types.remove(0);
                        m.insert("type".into(), only);
                    }
                }
                // `Option` of a struct: `anyOf: [the struct, null]`, the field's own keys beside.
                let null = json!({ "type": "null" });
                let nullable = m.get("anyOf").and_then(Value::as_array).is_some_and(|a| a.len() == 2 && a[1] == null);
                if let (true, Some(Value::Array(mut any))) = (nullable, m.remove("anyOf")) {
                    if let Value::Object(inner) = any.swap_remove(0) {
                        for (k, x) in inner {
                            m.entry(k).or_insert(x);
                        }
                    }
                }
            }
            if let Some(Value::String(d)) = m.get_mut("description") {
                *d = d.replace('\n', " ");
            }
            m.values_mut().for_each(|x| tidy(x, no_null));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| tidy(x, no_null)),
        _ => {}
    }
}

fn without_description(v: &Value) -> Value {
    let mut v = v.clone();
    if let Value::Object(m) = &mut v {
        m.remove("description");
    }
    v
}

/// A description after the actions' names: its first letter in lower case, unless it starts
/// a word in capitals (`CLI`).
fn lower_first(d: &str) -> String {
    let mut chars = d.chars();
    match (chars.next(), chars.next()) {
        (Some(a), Some(b)) if a.is_uppercase() && !b.is_uppercase() => {
            a.to_lowercase().chain(d.chars().skip(1)).collect()
        }
        _ => d.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::{exec, inbox, job, process, session};

    fn args(v: Value) -> Option<rmcp::model::JsonObject> {
        v.as_object().cloned()
    }

    fn refused<T>(r: crate::error::Result<T>) -> String {
        match r {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_session_start_is_read_as_the_domain_s_request() {
        let full = json!({ "action": "start", "name": "n", "sandbox": "s", "harness": "h", "prompt": "p", "cwd": "/w",
            "timeout_minutes": 5, "secrets": ["K"], "approvals": ["Write"], "idempotency_key": "k",
            "ignore_limits": true, "sandbox_login": true });
        let Ok(session::Args::Start(req)) = session::SHAPE.read(args(full)) else { panic!("not a start") };
        assert_eq!((req.name.as_str(), req.prompt.as_str(), req.timeout_minutes), ("n", "p", Some(5)));
        assert!(req.ignore_limits && req.sandbox_login && req.approvals == ["Write"]);
        let prompt = json!({ "action": "prompt", "session": "n", "prompt": "more", "cwd": null });
        let e = refused(session::SHAPE.read(args(prompt)));
        assert!(e.contains("cwd does not apply to action \"prompt\""), "{e}");
        let prompt = json!({ "action": "prompt", "session": "n", "prompt": "more", "ignore_limits": true });
        let Ok(session::Args::Prompt { of, turn }) = session::SHAPE.read(args(prompt)) else { panic!("not a prompt") };
        assert_eq!((of.session.as_str(), turn.prompt.as_str(), turn.ignore_limits), ("n", "more", true));
    }

    #[test]
    fn bad_arguments_are_named() {
        let cases = [
            (json!({ "action": "explode" }), "session: bad arguments: unknown variant `explode`"),
            (json!({}), "session: bad arguments: missing field `action`"),
            (json!({ "action": 5 }), "session: bad arguments: invalid type"),
            (
                json!({ "action": "start", "name": "n", "sandbox": "s" }),
                "session: prompt is required for action \"start\"",
            ),
            (json!({ "action": "start", "name": "n", "sandbox": "s", "prompt": null }), "prompt is required"),
            (json!({ "action": "status" }), "session: session is required for action \"status\""),
            (
                json!({ "action": "status", "session": "n", "prompt": "hi" }),
                "prompt does not apply to action \"status\"",
            ),
            (json!({ "action": "list", "colour": "red" }), "session: bad arguments: unknown field `colour`"),
            (json!({ "action": "start", "name": 5, "sandbox": "s", "prompt": "p" }), "invalid type: integer `5`"),
        ];
        for (a, want) in cases {
            let e = refused(session::SHAPE.read(args(a.clone())));
            assert!(e.contains(want), "{a}: {e}");
        }
        let e = refused(job::SHAPE.read(args(json!({ "action": "list", "job": "j" }))));
        assert!(e.contains("job does not apply to action \"list\" (it takes no other arguments)"), "{e}");
        let spec = json!({ "action": "start", "sandbox_spec": { "provider": "local", "size": 1 }, "prompt": "x" });
        assert!(refused(job::SHAPE.read(args(spec))).contains("unknown field `size`"));
        let e = refused(inbox::SHAPE.read(args(json!({ "action": "answer", "item": "i", "reason": "x" }))));
        assert!(e.contains("reason does not apply"), "{e}");
        let e = refused(exec::SHAPE.read(args(json!({ "sandbox": "s" }))));
        assert!(e.contains("exec: bad arguments: missing field `command`"), "{e}");
        let e = refused(exec::SHAPE.read(args(json!({ "sandbox": "s", "command": "ls", "colour": 1 }))));
        assert!(e.contains("unknown field `colour`"), "{e}");
    }

    #[test]
    fn the_process_tool_ignores_another_action_s_arguments_as_it_always_has() {
        let list = json!({ "action": "list", "sandbox": "s", "command": "ls", "input": null });
        assert!(matches!(process::SHAPE.read(args(list)), Ok(process::Args::List(_))));
        let input = json!({ "action": "input", "sandbox": "s", "process_id": "p", "input": null });
        assert!(matches!(process::SHAPE.read(args(input)), Ok(process::Args::Input { input: None, .. })));
        let e = refused(process::SHAPE.read(args(json!({ "action": "start", "sandbox": "s" }))));
        assert!(e.contains("process: command is required for action \"start\""), "{e}");
    }
}
