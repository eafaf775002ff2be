//! E2B's published OpenAPI spec (`openapi.yml` beside this file, byte for byte as E2B publishes
//! it) and the checks the test double makes with it: which operation a request is, whether its
//! security is met, and whether a JSON body matches the operation's schema. The double checks
//! its own answers against the same spec, so neither side can drift from it.
//!
//! The schema checks cover what E2B's schemas use: `$ref`, `type` (with `format: int32`),
//! `nullable`, `enum`, `minimum`/`maximum`, `required`, `properties`, `additionalProperties`,
//! `items`, `allOf`/`oneOf`/`anyOf`. One deliberate difference from E2B's server: a property the
//! schema does not name is refused here (E2B's validator, kin-openapi, lets it through and the
//! handler ignores it), so a misspelled field fails a test rather than being silently dropped.
use std::sync::OnceLock;

use serde_json::Value;

/// The spec's source: github.com/e2b-dev/E2B `spec/openapi.yml` at this commit (Apache-2.0),
/// itself synced from github.com/e2b-dev/infra at `spec/infra-ref`'s commit.
pub const SPEC_SOURCE: &str = "e2b-dev/E2B@b8029973aa7da5f741f7bb1a9f833b38a0885438 spec/openapi.yml \
                               (from e2b-dev/infra@e19a12b8fc5d318c6e88a8edba0a94d1f153a841)";

const SPEC_YAML: &str = include_str!("openapi.yml");

/// The spec as JSON values.
pub fn spec() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| serde_yaml::from_str(SPEC_YAML).expect("E2B's openapi.yml parses"))
}

/// One operation of the spec, found for a request.
pub struct Operation {
    /// The path as the spec writes it (`/sandboxes/{sandboxID}`).
    pub template: String,
    pub method: String,
    pub op: &'static Value,
    /// The path parameters, by name.
    pub params: Vec<(String, String)>,
}

impl Operation {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Whether the operation accepts an API key (`ApiKeyAuth`, the `X-API-Key` header).
    pub fn takes_api_key(&self) -> bool {
        let security = self.op.get("security").or_else(|| spec().get("security"));
        security.and_then(Value::as_array).is_some_and(|alts| alts.iter().any(|a| a.get("ApiKeyAuth").is_some()))
    }

    /// The request body's schema and whether a body is required; `None` for an operation that
    /// takes no body.
    pub fn body_schema(&self) -> Option<(&'static Value, bool)> {
        let body = resolve(self.op.get("requestBody")?);
        let schema = body.pointer("/content/application~1json/schema")?;
        Some((schema, body.get("required").and_then(Value::as_bool).unwrap_or(false)))
    }

    /// The schema of the answer with `status`, if it has a JSON body.
    pub fn response_schema(&self, status: u16) -> Option<&'static Value> {
        let response = resolve(self.op.get("responses")?.get(status.to_string())?);
        response.pointer("/content/application~1json/schema")
    }

    /// Whether the spec lists `status` among the operation's answers.
    pub fn answers(&self, status: u16) -> bool {
        self.op.get("responses").and_then(|r| r.get(status.to_string())).is_some()
    }
}

/// What the spec says of `method path`: the operation, or the status a server answers with when
/// there is none (404 no such path, 405 no such method on it).
pub fn operation(method: &str, path: &str) -> Result<Operation, u16> {
    let paths = spec().get("paths").and_then(Value::as_object).expect("the spec has paths");
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let mut path_found = false;
    for (template, item) in paths {
        let want: Vec<&str> = template.trim_start_matches('/').split('/').collect();
        if want.len() != segments.len() {
            continue;
        }
        let mut params = Vec::new();
        let matches = want.iter().zip(&segments).all(|(w, s)| {
            if let Some(name) = w.strip_prefix('{').and_then(|w| w.strip_suffix('}')) {
                params.push((name.to_string(), s.to_string()));
                !s.is_empty()
            } else {
                w == s
            }
        });
        if !matches {
            continue;
        }
        path_found = true;
        if let Some(op) = item.get(method.to_ascii_lowercase()) {
            return Ok(Operation { template: template.clone(), method: method.to_string(), op, params });
        }
    }
    Err(if path_found { 405 } else { 404 })
}

/// A `$ref`'s target (`#/components/...`), or the value itself.
pub fn resolve(v: &'static Value) -> &'static Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let pointer = r.strip_prefix('#').unwrap_or(r);
            resolve(spec().pointer(pointer).unwrap_or_else(|| panic!("the spec has no {r}")))
        }
        None => v,
    }
}

/// A named schema (`components/schemas/<name>`).
pub fn schema(name: &str) -> &'static Value {
    spec().pointer(&format!("/components/schemas/{name}")).unwrap_or_else(|| panic!("the spec has no schema {name}"))
}

/// Every way `value` (at `at`, a JSON path for messages) breaks `schema`.
pub fn check(schema: &'static Value, value: &Value, at: &str) -> Vec<String> {
    let mut errors = Vec::new();
    check_into(schema, value, at, &mut errors);
    errors
}

fn check_into(schema: &'static Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let schema = resolve(schema);
    if value.is_null() {
        if schema.get("nullable").and_then(Value::as_bool) != Some(true)
            && !schema.as_object().is_some_and(|o| o.is_empty())
        {
            errors.push(format!("{at}: null is not allowed"));
        }
        return;
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for s in all {
            check_into(s, value, at, errors);
        }
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(alts) = schema.get(key).and_then(Value::as_array) {
            if !alts.iter().any(|s| check(s, value, at).is_empty()) {
                errors.push(format!("{at}: matches none of the schemas of its {key}"));
            }
        }
    }
    let kind = schema.get("type").and_then(Value::as_str).or_else(|| {
        // E2B's schemas often leave `type: object` implicit.
        (schema.get("properties").is_some() || schema.get("additionalProperties").is_some()).then_some("object")
    });
    match kind {
        Some("string") if !value.is_string() => errors.push(format!("{at}: must be a string")),
        Some("boolean") if !value.is_boolean() => errors.push(format!("{at}: must be a boolean")),
        Some("integer") => match value.as_i64() {
            None => errors.push(format!("{at}: must be an integer")),
            Some(n) => {
                if schema.get("format").and_then(Value::as_str) == Some("int32") && i32::try_from(n).is_err() {
                    errors.push(format!("{at}: must fit in 32 bits"));
                }
                bounds(schema, n as f64, at, errors);
            }
        },
        Some("number") => match value.as_f64() {
            None => errors.push(format!("{at}: must be a number")),
            Some(n) => bounds(schema, n, at, errors),
        },
        Some("array") => match value.as_array() {
            None => errors.push(format!("{at}: must be an array")),
            Some(items) => {
                if let Some(item) = schema.get("items") {
                    for (i, v) in items.iter().enumerate() {
                        check_into(item, v, &format!("{at}[{i}]"), errors);
                    }
                }
            }
        },
        Some("object") => match value.as_object() {
            None => errors.push(format!("{at}: must be an object")),
            Some(fields) => {
                let props = schema.get("properties").and_then(Value::as_object);
                for r in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
                    if let Some(r) = r.as_str() {
                        if !fields.contains_key(r) {
                            errors.push(format!("{at}.{r}: is required"));
                        }
                    }
                }
                for (k, v) in fields {
                    let path = format!("{at}.{k}");
                    match (props.and_then(|p| p.get(k)), schema.get("additionalProperties")) {
                        (Some(s), _) => check_into(s, v, &path, errors),
                        (None, Some(Value::Bool(true))) => {}
                        (None, Some(Value::Bool(false)) | None) => {
                            errors.push(format!("{path}: is not a field of this schema"))
                        }
                        (None, Some(s)) => check_into(s, v, &path, errors),
                    }
                }
            }
        },
        _ => {}
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(value) {
            errors.push(format!("{at}: must be one of {}", Value::Array(allowed.clone())));
        }
    }
}

fn bounds(schema: &Value, n: f64, at: &str, errors: &mut Vec<String>) {
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        if n < min {
            errors.push(format!("{at}: must be at least {min}"));
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        if n > max {
            errors.push(format!("{at}: must be at most {max}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_spec_names_the_operations_the_provider_calls() {
        for (method, path) in [
            ("POST", "/sandboxes"),
            ("GET", "/sandboxes/i1"),
            ("DELETE", "/sandboxes/i1"),
            ("POST", "/sandboxes/i1/pause"),
            ("POST", "/sandboxes/i1/connect"),
        ] {
            let op = operation(method, path).unwrap_or_else(|s| panic!("{method} {path}: {s}"));
            assert!(op.takes_api_key(), "{method} {path}");
        }
        assert_eq!(operation("PATCH", "/sandboxes/i1").err(), Some(405));
        assert_eq!(operation("GET", "/nope").err(), Some(404));
        assert_eq!(
            operation("GET", "/sandboxes/i1").ok().and_then(|o| o.param("sandboxID").map(String::from)),
            Some("i1".into())
        );
    }

    #[test]
    fn bodies_are_checked_against_their_schemas() {
        let new = schema("NewSandbox");
        assert!(check(new, &json!({"templateID": "base", "timeout": 60, "metadata": {"a": "b"}}), "body").is_empty());
        let mut errors = check(new, &json!({"timeout": "60", "metadata": {"a": 1}, "envvars": {}}), "body");
        errors.sort();
        assert_eq!(
            errors,
            vec![
                "body.envvars: is not a field of this schema",
                "body.metadata.a: must be a string",
                "body.templateID: is required",
                "body.timeout: must be an integer",
            ],
            "{errors:?}"
        );
        assert!(!check(schema("ConnectSandbox"), &json!({}), "body").is_empty());
        assert!(!check(new, &json!({"templateID": "b", "timeout": 1u64 << 40}), "body").is_empty());
    }
}
