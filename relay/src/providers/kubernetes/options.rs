//! A kubernetes sandbox's options (the sandbox's `options` object), parsed and validated before
//! any of them reaches the API server. Unknown options are errors.
use std::collections::BTreeMap;

use serde_json::Value;

use crate::providers::{
    options::{bad, env, image, object, user, workdir},
    ProviderError,
};

/// Options a kubernetes sandbox takes.
const OPTIONS: &str = "image, daemon, env, user, workdir, cpu_request, cpu_limit, memory_request, memory_limit, \
                       node_selector, tolerations, runtime_class, service_account, image_pull_secrets";
const MAX_ITEMS: usize = 64;

/// One toleration, as Kubernetes spells it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Toleration {
    pub(super) key: Option<String>,
    pub(super) operator: Option<String>,
    pub(super) value: Option<String>,
    pub(super) effect: Option<String>,
    pub(super) toleration_seconds: Option<i64>,
}

/// A kubernetes sandbox's options, validated.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Options {
    pub(super) image: String,
    /// Whether the image runs hangar-envd as its entrypoint (default true): creation then waits
    /// for it. The provider cannot look inside an image in a registry, so the client says.
    pub(super) daemon: bool,
    pub(super) env: Vec<(String, String)>,
    pub(super) user: Option<String>,
    pub(super) workdir: Option<String>,
    pub(super) cpu_request: Option<String>,
    pub(super) cpu_limit: Option<String>,
    pub(super) memory_request: Option<String>,
    pub(super) memory_limit: Option<String>,
    pub(super) node_selector: BTreeMap<String, String>,
    pub(super) tolerations: Vec<Toleration>,
    pub(super) runtime_class: Option<String>,
    pub(super) service_account: Option<String>,
    pub(super) image_pull_secrets: Vec<String>,
}

/// A DNS-1123 subdomain (names of service accounts, secrets, runtime classes).
pub(super) fn valid_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// A label value: at most 63 of [A-Za-z0-9_.-], starting and ending alphanumeric (or empty).
pub(super) fn valid_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    b.is_empty()
        || (b.len() <= 63
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')))
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name as a label value.
fn valid_label_key(k: &str) -> bool {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    prefix.is_none_or(valid_subdomain) && !name.is_empty() && valid_label_value(name)
}

/// A resource quantity (`500m`, `2`, `1.5`, `256Mi`, `1G`, `1e3`).
fn valid_quantity(q: &str) -> bool {
    let digits = q.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &q[digits.len()..];
    let (number, exponent) = match (suffix, digits.split_once(['e', 'E'])) {
        ("", Some((n, e))) => (n, Some(e)),
        _ => (digits, None),
    };
    let number_ok = {
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        !(whole.is_empty() && frac.is_empty())
            && whole.bytes().all(|c| c.is_ascii_digit())
            && frac.bytes().all(|c| c.is_ascii_digit())
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && e.len() <= 3 && e.bytes().all(|c| c.is_ascii_digit())
    });
    q.len() <= 64
        && number_ok
        && exponent_ok
        && matches!(suffix, "" | "m" | "k" | "M" | "G" | "T" | "P" | "E" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei")
}

fn string_of<'a>(map: &'a serde_json::Map<String, Value>, key: &str) -> Result<Option<&'a str>, ProviderError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(bad(format!("{key}: a string"))),
    }
}

fn quantity(map: &serde_json::Map<String, Value>, key: &str) -> Result<Option<String>, ProviderError> {
    match string_of(map, key)? {
        None => Ok(None),
        Some(q) if valid_quantity(q) => Ok(Some(q.to_string())),
        Some(_) => Err(bad(format!("{key}: a Kubernetes quantity such as \"500m\", \"2\" or \"512Mi\""))),
    }
}

fn name(map: &serde_json::Map<String, Value>, key: &str) -> Result<Option<String>, ProviderError> {
    match string_of(map, key)? {
        None => Ok(None),
        Some(n) if valid_subdomain(n) => Ok(Some(n.to_string())),
        Some(_) => Err(bad(format!("{key}: a Kubernetes object name (lowercase letters, digits, '-' and '.')"))),
    }
}

fn toleration(v: &Value) -> Result<Toleration, ProviderError> {
    const KEYS: &str = "key, operator, value, effect, toleration_seconds";
    let Value::Object(m) = v else { return Err(bad(format!("tolerations: each an object of {KEYS}"))) };
    if let Some(k) = m.keys().find(|k| !KEYS.split(", ").any(|o| o == k.as_str())) {
        return Err(bad(format!("tolerations: unknown field {k:?}; a toleration has {KEYS}")));
    }
    let key = string_of(m, "key")?.map(str::to_string);
    if key.as_deref().is_some_and(|k| !valid_label_key(k)) {
        return Err(bad("tolerations: key: a label key"));
    }
    let operator = string_of(m, "operator")?.map(str::to_string);
    if !matches!(operator.as_deref(), None | Some("Exists" | "Equal")) {
        return Err(bad("tolerations: operator: \"Exists\" or \"Equal\""));
    }
    let value = string_of(m, "value")?.map(str::to_string);
    if value.as_deref().is_some_and(|v| !valid_label_value(v)) {
        return Err(bad("tolerations: value: a label value"));
    }
    if operator.as_deref() == Some("Exists") && value.as_deref().is_some_and(|v| !v.is_empty()) {
        return Err(bad("tolerations: an \"Exists\" toleration has no value"));
    }
    let effect = string_of(m, "effect")?.map(str::to_string);
    if !matches!(effect.as_deref(), None | Some("" | "NoSchedule" | "PreferNoSchedule" | "NoExecute")) {
        return Err(bad("tolerations: effect: \"NoSchedule\", \"PreferNoSchedule\" or \"NoExecute\""));
    }
    let toleration_seconds = match m.get("toleration_seconds") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_i64() {
            Some(s) if effect.as_deref() == Some("NoExecute") => Some(s),
            Some(_) => return Err(bad("tolerations: toleration_seconds goes only with the NoExecute effect")),
            None => return Err(bad("tolerations: toleration_seconds: a whole number of seconds")),
        },
    };
    Ok(Toleration { key, operator, value, effect, toleration_seconds })
}

impl Options {
    pub(super) fn parse(options: &Value) -> Result<Options, ProviderError> {
        let map = object(options, "kubernetes", OPTIONS)?;
        let image = image(&map, "kubernetes", "registry.example/hangar-envd:1")?;
        let daemon = match map.get("daemon") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(bad("daemon: true (the image runs hangar-envd) or false")),
        };
        let env = env(&map)?;
        let workdir = workdir(&map)?;
        let user = user(&map)?;
        if user.is_some() && !daemon {
            return Err(bad(
                "user: applies to the daemon's commands; a pod without a daemon runs commands as its image's user",
            ));
        }
        let mut node_selector = BTreeMap::new();
        match map.get("node_selector") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) if m.len() <= MAX_ITEMS => {
                for (k, v) in m {
                    match v {
                        Value::String(v) if valid_label_key(k) && valid_label_value(v) => {
                            node_selector.insert(k.clone(), v.clone());
                        }
                        _ => return Err(bad(format!("node_selector: {k:?}: a label key and a label value"))),
                    }
                }
            }
            Some(_) => return Err(bad(format!("node_selector: an object of at most {MAX_ITEMS} node labels"))),
        }
        let tolerations = match map.get("tolerations") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) if a.len() <= MAX_ITEMS => a.iter().map(toleration).collect::<Result<_, _>>()?,
            Some(_) => return Err(bad(format!("tolerations: an array of at most {MAX_ITEMS} tolerations"))),
        };
        let image_pull_secrets = match map.get("image_pull_secrets") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) if a.len() <= MAX_ITEMS => a
                .iter()
                .map(|v| match v {
                    Value::String(s) if valid_subdomain(s) => Ok(s.clone()),
                    _ => Err(bad("image_pull_secrets: names of Secrets in the sandbox namespace")),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(bad(format!("image_pull_secrets: an array of at most {MAX_ITEMS} Secret names"))),
        };
        Ok(Options {
            image,
            daemon,
            env,
            user,
            workdir,
            cpu_request: quantity(&map, "cpu_request")?,
            cpu_limit: quantity(&map, "cpu_limit")?,
            memory_request: quantity(&map, "memory_request")?,
            memory_limit: quantity(&map, "memory_limit")?,
            node_selector,
            tolerations,
            runtime_class: name(&map, "runtime_class")?,
            service_account: name(&map, "service_account")?,
            image_pull_secrets,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn options_are_validated() {
        let o = Options::parse(&json!({"image": "hangar-test:envd", "env": {"A": "1"}, "workdir": "/w",
            "user": "user", "cpu_request": "250m", "cpu_limit": "2", "memory_request": "64Mi",
            "memory_limit": "1.5Gi", "node_selector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "runtime_class": "gvisor", "service_account": "agent", "image_pull_secrets": ["regcred"]}))
        .expect("valid");
        assert_eq!(o.image, "hangar-test:envd");
        assert!(o.daemon);
        assert_eq!(o.env, vec![("A".to_string(), "1".to_string())]);
        assert_eq!(o.memory_limit.as_deref(), Some("1.5Gi"));
        assert_eq!(o.tolerations[0].operator.as_deref(), Some("Exists"));
        assert_eq!(o.image_pull_secrets, vec!["regcred".to_string()]);
        for bad in [
            json!({}),
            json!({"image": ""}),
            json!({"image": "x", "nope": 1}),
            json!({"image": "x", "daemon": "yes"}),
            json!({"image": "x", "env": {"HANGAR_ENVD_ACCESS_TOKEN": "mine"}}),
            json!({"image": "x", "env": {"HANGAR_EXEC": "mine"}}),
            json!({"image": "x", "workdir": "rel"}),
            json!({"image": "x", "user": "Root;"}),
            json!({"image": "x", "user": "user", "daemon": false}),
            json!({"image": "x", "cpu_limit": "lots"}),
            json!({"image": "x", "memory_request": "5Qi"}),
            json!({"image": "x", "memory_request": 64}),
            json!({"image": "x", "node_selector": {"a": 1}}),
            json!({"image": "x", "node_selector": {"bad key!": "x"}}),
            json!({"image": "x", "tolerations": [{"operator": "Sometimes"}]}),
            json!({"image": "x", "tolerations": [{"key": "a", "colour": "red"}]}),
            json!({"image": "x", "tolerations": [{"operator": "Exists", "value": "v"}]}),
            json!({"image": "x", "tolerations": [{"effect": "NoSchedule", "toleration_seconds": 5}]}),
            json!({"image": "x", "runtime_class": "Not_A_Name"}),
            json!({"image": "x", "service_account": ""}),
            json!({"image": "x", "image_pull_secrets": "regcred"}),
            json!({"image": "x", "image_pull_secrets": ["UPPER"]}),
            json!("image"),
        ] {
            assert!(matches!(Options::parse(&bad), Err(ProviderError::BadOptions(_))), "{bad}");
        }
    }

    #[test]
    fn quantities() {
        for ok in ["1", "0.5", "500m", "256Mi", "1e3", "2Gi", ".5"] {
            assert!(valid_quantity(ok), "{ok}");
        }
        for no in ["", "m", "1.2.3", "-1", "1Qi", "1 Gi", "1e", "1mi"] {
            assert!(!valid_quantity(no), "{no}");
        }
    }
}
