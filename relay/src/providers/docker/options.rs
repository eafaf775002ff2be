//! A docker sandbox's options (the sandbox's `options` object), parsed and validated before any
//! of them reaches the Engine.
use serde_json::Value;

use crate::providers::{
    options::{bad, env, image, object, user, workdir},
    ProviderError,
};

/// Options a docker sandbox takes.
const OPTIONS: &str = "image, env, workdir, user, memory_mb, cpus";
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

impl Options {
    pub(super) fn parse(options: &Value) -> Result<Options, ProviderError> {
        let map = object(options, "docker", OPTIONS)?;
        let image = image(&map, "docker", "hangar-envd:latest")?;
        let env = env(&map)?;
        let workdir = workdir(&map)?;
        let user = user(&map)?;
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
