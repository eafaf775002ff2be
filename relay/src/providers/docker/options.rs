//! A docker sandbox's options (the sandbox's `options` object), parsed and validated before any
//! of them reaches the Engine.
use serde_json::Value;

use crate::providers::{
    options::{bad, env, image, object, user, workdir},
    ProviderError,
};

/// Options a docker sandbox takes.
const OPTIONS: &str = "image, env, workdir, user, memory_mb, cpus, network";
/// The longest network name taken (Docker's own names are far shorter; this only bounds it).
const NETWORK_MAX: usize = 128;
/// A docker sandbox's options, validated.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Options {
    pub(super) image: String,
    pub(super) env: Vec<(String, String)>,
    pub(super) workdir: Option<String>,
    pub(super) user: Option<String>,
    pub(super) memory_mb: Option<u64>,
    pub(super) cpus: Option<f64>,
    /// A user-defined Docker network the container joins instead of the default bridge.
    pub(super) network: Option<String>,
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
        let network = match map.get("network") {
            None | Some(Value::Null) => None,
            Some(Value::String(n)) => Some(network(n)?),
            Some(_) => return Err(bad("network: a Docker network's name")),
        };
        Ok(Options { image, env, workdir, user, memory_mb, cpus, network })
    }
}

/// A network name as Docker spells them (`[A-Za-z0-9][A-Za-z0-9_.-]*`), which also keeps out
/// Docker's other network modes (`container:<id>`). `host` would put the sandbox on the relay's
/// own host network, where it could reach the relay on loopback; `none` leaves the relay no way
/// to its daemon: both are refused.
fn network(name: &str) -> Result<String, ProviderError> {
    let shaped = name.len() <= NETWORK_MAX
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if !shaped {
        return Err(bad(format!(
            "network {name:?}: a Docker network's name ([A-Za-z0-9][A-Za-z0-9_.-]*, at most {NETWORK_MAX})"
        )));
    }
    if matches!(name, "host" | "none") {
        return Err(bad(format!(
            "network {name:?}: not allowed (the sandbox would share the host's network, or the relay could not \
             reach its daemon); name a network made with `docker network create`"
        )));
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn options_are_validated() {
        let o = Options::parse(&json!({"image": "hangar-test:envd", "env": {"A": "1"}, "workdir": "/w",
            "user": "user", "memory_mb": 256, "cpus": 0.5, "network": "agents-net_1.x"}))
        .expect("valid");
        assert_eq!(o.image, "hangar-test:envd");
        assert_eq!(o.env, vec![("A".to_string(), "1".to_string())]);
        assert_eq!(
            (o.workdir.as_deref(), o.user.as_deref(), o.memory_mb, o.cpus),
            (Some("/w"), Some("user"), Some(256), Some(0.5))
        );
        assert_eq!(o.network.as_deref(), Some("agents-net_1.x"));
        let plain = Options::parse(&json!({"image": "x", "network": null})).expect("valid");
        assert_eq!(plain.network, None, "no network: the default bridge");
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
            json!({"image": "x", "network": ""}),
            json!({"image": "x", "network": 3}),
            json!({"image": "x", "network": "host"}),
            json!({"image": "x", "network": "none"}),
            json!({"image": "x", "network": "container:abc"}),
            json!({"image": "x", "network": "-net"}),
            json!({"image": "x", "network": "a b"}),
            json!({"image": "x", "network": "x".repeat(129)}),
            json!("image"),
        ] {
            assert!(matches!(Options::parse(&bad), Err(ProviderError::BadOptions(_))), "{bad}");
        }
    }
}
