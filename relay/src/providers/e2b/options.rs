//! An e2b sandbox's options (the sandbox's `options` object), parsed and validated before any of
//! them reaches E2B.
use std::collections::BTreeMap;

use serde_json::Value;

use crate::providers::{
    options::{bad, env, object, strings},
    ProviderError,
};

/// Options an e2b sandbox takes.
const OPTIONS: &str = "template, timeout_seconds, env, metadata";
/// The template when none is named: E2B's own base image.
const DEFAULT_TEMPLATE: &str = "base";
/// How long E2B keeps the sandbox when nothing else is said: an hour, the longest E2B's free plan
/// allows (E2B's own default is 15 seconds, too short for anything hangar does).
pub(super) const DEFAULT_TIMEOUT_SECONDS: u32 = 3600;
/// E2B's longest plan limit is 24 hours; E2B answers a longer one for the team's plan with a 400.
const MAX_TIMEOUT_SECONDS: u64 = 24 * 3600;
/// Metadata keys under this prefix are hangar's own (the sandbox's id and name).
pub(super) const RESERVED_METADATA_PREFIX: &str = "hangar.";

/// An e2b sandbox's options, validated.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Options {
    pub(super) template: String,
    pub(super) timeout_seconds: u32,
    pub(super) env: BTreeMap<String, String>,
    pub(super) metadata: BTreeMap<String, String>,
}

/// A template name or id as E2B takes them: `name`, `team/name`, either with a `:tag`.
fn valid_template(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 256
        && t.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'/' | b':'))
        && !t.starts_with(['/', ':', '.', '-'])
}

impl Options {
    pub(super) fn parse(options: &Value) -> Result<Options, ProviderError> {
        let map = object(options, "e2b", OPTIONS)?;
        let template = match map.get("template") {
            None | Some(Value::Null) => DEFAULT_TEMPLATE.to_string(),
            Some(Value::String(s)) if valid_template(s) => s.clone(),
            Some(_) => return Err(bad("template: an E2B template name or id, such as \"base\" or \"team/name:tag\"")),
        };
        let timeout_seconds = match map.get("timeout_seconds") {
            None | Some(Value::Null) => DEFAULT_TIMEOUT_SECONDS,
            Some(v) => match v.as_u64() {
                Some(t) if (1..=MAX_TIMEOUT_SECONDS).contains(&t) => t as u32,
                _ => {
                    return Err(bad(format!(
                        "timeout_seconds: a whole number of seconds from 1 to {MAX_TIMEOUT_SECONDS}"
                    )))
                }
            },
        };
        let env = env(&map)?.into_iter().collect();
        let metadata = strings("metadata", map.get("metadata"), |k| {
            if k.is_empty() || k.len() > 256 || k.contains('\0') {
                Err(format!("{k:?}: a key of 1 to 256 bytes"))
            } else if k.starts_with(RESERVED_METADATA_PREFIX) {
                Err(format!("{k} is set by hangar (keys starting {RESERVED_METADATA_PREFIX:?} are its own)"))
            } else {
                Ok(())
            }
        })?
        .into_iter()
        .collect();
        Ok(Options { template, timeout_seconds, env, metadata })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn options_are_validated() {
        let o = Options::parse(&json!({})).expect("defaults");
        assert_eq!((o.template.as_str(), o.timeout_seconds), ("base", DEFAULT_TIMEOUT_SECONDS));
        let o = Options::parse(&json!({"template": "team/py:v2", "timeout_seconds": 60, "env": {"A": "1"},
            "metadata": {"owner": "ana"}}))
        .expect("valid");
        assert_eq!((o.template.as_str(), o.timeout_seconds), ("team/py:v2", 60));
        assert_eq!(o.env, BTreeMap::from([("A".to_string(), "1".to_string())]));
        assert_eq!(o.metadata, BTreeMap::from([("owner".to_string(), "ana".to_string())]));
        for bad in [
            json!("base"),
            json!({"image": "x"}),
            json!({"template": ""}),
            json!({"template": 3}),
            json!({"template": "a b"}),
            json!({"template": "-x"}),
            json!({"timeout_seconds": 0}),
            json!({"timeout_seconds": -1}),
            json!({"timeout_seconds": 1.5}),
            json!({"timeout_seconds": "60"}),
            json!({"timeout_seconds": 86401}),
            json!({"env": ["A=1"]}),
            json!({"env": {"1A": "x"}}),
            json!({"env": {"A": 1}}),
            json!({"env": {"A": "a\u{0}b"}}),
            json!({"metadata": {"hangar.sandbox": "mine"}}),
            json!({"metadata": {"": "x"}}),
            json!({"metadata": {"k": true}}),
        ] {
            assert!(matches!(Options::parse(&bad), Err(ProviderError::BadOptions(_))), "{bad}");
        }
    }
}
