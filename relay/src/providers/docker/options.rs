//! A docker sandbox's options (the sandbox's `options` object), parsed and validated before any
//! of them reaches the Engine.
use serde_json::Value;

use crate::providers::ProviderError;

/// Options a docker sandbox takes.
const OPTIONS: &str = "image, env, workdir, user, memory_mb, cpus";
/// Environment variables the provider sets for the daemon; a client cannot set these.
const RESERVED_ENV_PREFIX: &str = "HANGAR_ENVD_";
pub(super) const ENV_TOKEN: &str = "HANGAR_ENVD_ACCESS_TOKEN";
pub(super) const ENV_USER: &str = "HANGAR_ENVD_DEFAULT_USER";
pub(super) const ENV_WORKDIR: &str = "HANGAR_ENVD_DEFAULT_WORKDIR";
/// Marks a fallback exec's processes, so a timeout can find and kill all of them.
pub(super) const ENV_EXEC_MARK: &str = "HANGAR_EXEC";

const MAX_ENV: usize = 256;
const MAX_ENV_BYTES: usize = 64 * 1024;

/// A docker sandbox's options, validated.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Options {
    pub(super) image: String,
    pub(super) env: Vec<(String, String)>,
    pub(super) workdir: Option<String>,
    pub(super) user: Option<String>,
    pub(super) memory_mb: Option<u64>,
    pub(super) cpus: Option<f64>,
}

pub(super) fn bad(m: impl Into<String>) -> ProviderError {
    ProviderError::BadOptions(m.into())
}

fn valid_env_key(k: &str) -> bool {
    let mut b = k.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
        && k.len() <= 256
}

fn valid_user(u: &str) -> bool {
    let mut b = u.bytes();
    !u.is_empty()
        && u.len() <= 32
        && matches!(b.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
        && b.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-' || c == b'.')
}

fn valid_image(i: &str) -> bool {
    !i.is_empty() && i.len() <= 512 && i.bytes().all(|c| c.is_ascii_graphic()) && !i.starts_with('-')
}

impl Options {
    pub(super) fn parse(options: &Value) -> Result<Options, ProviderError> {
        let empty = serde_json::Map::new();
        let map = match options {
            Value::Object(m) => m,
            Value::Null => &empty,
            _ => return Err(bad("options must be an object")),
        };
        if let Some(k) = map.keys().find(|k| !OPTIONS.split(", ").any(|o| o == k.as_str())) {
            return Err(bad(format!("unknown option {k:?}; the docker provider takes {OPTIONS}")));
        }
        let image = match map.get("image") {
            Some(Value::String(s)) if valid_image(s) => s.clone(),
            Some(_) => return Err(bad("image: an image reference such as \"hangar-envd:latest\"")),
            None => return Err(bad("the docker provider needs an image (options.image)")),
        };
        let mut env = Vec::new();
        match map.get("env") {
            None | Some(Value::Null) => {}
            Some(Value::Object(vars)) => {
                if vars.len() > MAX_ENV {
                    return Err(bad(format!("env: at most {MAX_ENV} variables")));
                }
                let mut total = 0;
                for (k, v) in vars {
                    if !valid_env_key(k) {
                        return Err(bad(format!("env: {k:?} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")));
                    }
                    if k.starts_with(RESERVED_ENV_PREFIX) || k == ENV_EXEC_MARK {
                        return Err(bad(format!("env: {k} is set by hangar")));
                    }
                    let Value::String(v) = v else {
                        return Err(bad(format!("env: the value of {k} must be a string")));
                    };
                    if v.contains('\0') {
                        return Err(bad(format!("env: the value of {k} contains a NUL byte")));
                    }
                    total += k.len() + v.len() + 2;
                    env.push((k.clone(), v.clone()));
                }
                if total > MAX_ENV_BYTES {
                    return Err(bad(format!("env: at most {MAX_ENV_BYTES} bytes in all")));
                }
            }
            Some(_) => return Err(bad("env: an object of names to string values")),
        }
        let workdir = match map.get("workdir") {
            None | Some(Value::Null) => None,
            Some(Value::String(w)) if w.starts_with('/') && w.len() <= 4096 && !w.contains('\0') => Some(w.clone()),
            Some(_) => return Err(bad("workdir: an absolute path")),
        };
        let user = match map.get("user") {
            None | Some(Value::Null) => None,
            Some(Value::String(u)) if valid_user(u) => Some(u.clone()),
            Some(_) => return Err(bad("user: a user name of the image's /etc/passwd, such as \"user\"")),
        };
        let memory_mb = match map.get("memory_mb") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64() {
                Some(m) if (6..=1 << 24).contains(&m) => Some(m),
                _ => return Err(bad("memory_mb: a whole number of MiB, 6 or more")),
            },
        };
        let cpus = match map.get("cpus") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_f64() {
                Some(c) if (0.01..=1024.0).contains(&c) => Some(c),
                _ => return Err(bad("cpus: a number of CPUs from 0.01 to 1024")),
            },
        };
        Ok(Options { image, env, workdir, user, memory_mb, cpus })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn options_are_validated() {
        let o = Options::parse(&json!({"image": "hangar-test:envd", "env": {"A": "1"}, "workdir": "/w",
            "user": "user", "memory_mb": 256, "cpus": 0.5}))
        .expect("valid");
        assert_eq!(o.image, "hangar-test:envd");
        assert_eq!(o.env, vec![("A".to_string(), "1".to_string())]);
        assert_eq!(
            (o.workdir.as_deref(), o.user.as_deref(), o.memory_mb, o.cpus),
            (Some("/w"), Some("user"), Some(256), Some(0.5))
        );
        for bad in [
            json!({}),
            json!({"image": ""}),
            json!({"image": 3}),
            json!({"image": "a b"}),
            json!({"image": "x", "nope": 1}),
            json!({"image": "x", "env": ["A=1"]}),
            json!({"image": "x", "env": {"1A": "x"}}),
            json!({"image": "x", "env": {"A=B": "x"}}),
            json!({"image": "x", "env": {"A": 1}}),
            json!({"image": "x", "env": {"A": "a\u{0}b"}}),
            json!({"image": "x", "env": {"HANGAR_ENVD_ACCESS_TOKEN": "mine"}}),
            json!({"image": "x", "workdir": "rel"}),
            json!({"image": "x", "user": "Root;"}),
            json!({"image": "x", "memory_mb": 1}),
            json!({"image": "x", "memory_mb": -5}),
            json!({"image": "x", "cpus": 0}),
            json!({"image": "x", "cpus": "1"}),
            json!("image"),
        ] {
            assert!(matches!(Options::parse(&bad), Err(ProviderError::BadOptions(_))), "{bad}");
        }
    }
}
