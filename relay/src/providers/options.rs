//! What every provider's options share, validated one way: the `options` object and its known
//! names, and the options several providers take by the same name (`image`, `env`, `workdir`,
//! `user`). Each provider's own `options.rs` adds what is its own.
use serde_json::{Map, Value};

use super::ProviderError;

/// Environment variables providers set for the daemon; a client cannot set these.
pub const RESERVED_ENV_PREFIX: &str = "HANGAR_ENVD_";
pub const ENV_TOKEN: &str = "HANGAR_ENVD_ACCESS_TOKEN";
pub const ENV_USER: &str = "HANGAR_ENVD_DEFAULT_USER";
pub const ENV_WORKDIR: &str = "HANGAR_ENVD_DEFAULT_WORKDIR";
/// Marks a fallback exec's processes, so a timeout can find and kill all of them.
pub const ENV_EXEC_MARK: &str = "HANGAR_EXEC";

/// The most entries a string-to-string option (`env`, `metadata`) may have, and their bytes.
const MAX_ENTRIES: usize = 256;
const MAX_BYTES: usize = 64 * 1024;

pub fn bad(m: impl Into<String>) -> ProviderError {
    ProviderError::BadOptions(m.into())
}

/// The options object (`null` is no options); any name outside `known` (a comma-separated list,
/// as the error says it) is the client's error.
pub fn object(options: &Value, provider: &str, known: &str) -> Result<Map<String, Value>, ProviderError> {
    let map = match options {
        Value::Object(m) => m.clone(),
        Value::Null => Map::new(),
        _ => return Err(bad("options must be an object")),
    };
    if let Some(k) = map.keys().find(|k| !known.split(", ").any(|o| o == k.as_str())) {
        return Err(bad(format!("unknown option {k:?}; the {provider} provider takes {known}")));
    }
    Ok(map)
}

pub fn valid_env_key(k: &str) -> bool {
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

/// `image`, required; `example` is an image reference to show in the error.
pub fn image(map: &Map<String, Value>, provider: &str, example: &str) -> Result<String, ProviderError> {
    match map.get("image") {
        Some(Value::String(s)) if valid_image(s) => Ok(s.clone()),
        Some(_) => Err(bad(format!("image: an image reference such as {example:?}"))),
        None => Err(bad(format!("the {provider} provider needs an image (options.image)"))),
    }
}

/// A string-to-string object (`env`, `metadata`), bounded, each name checked by `key_ok`.
pub fn strings(
    what: &str,
    value: Option<&Value>,
    key_ok: impl Fn(&str) -> Result<(), String>,
) -> Result<Vec<(String, String)>, ProviderError> {
    let vars = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(vars)) => vars,
        Some(_) => return Err(bad(format!("{what}: an object of names to string values"))),
    };
    if vars.len() > MAX_ENTRIES {
        return Err(bad(format!("{what}: at most {MAX_ENTRIES} entries")));
    }
    let mut out = Vec::new();
    let mut total = 0;
    for (k, v) in vars {
        key_ok(k).map_err(|why| bad(format!("{what}: {why}")))?;
        let Value::String(v) = v else { return Err(bad(format!("{what}: the value of {k} must be a string"))) };
        if v.contains('\0') {
            return Err(bad(format!("{what}: the value of {k} contains a NUL byte")));
        }
        total += k.len() + v.len() + 2;
        out.push((k.clone(), v.clone()));
    }
    if total > MAX_BYTES {
        return Err(bad(format!("{what}: at most {MAX_BYTES} bytes in all")));
    }
    Ok(out)
}

/// `env`: variables every command sees; hangar's own names are refused.
pub fn env(map: &Map<String, Value>) -> Result<Vec<(String, String)>, ProviderError> {
    strings("env", map.get("env"), |k| {
        if !valid_env_key(k) {
            Err(format!("{k:?} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"))
        } else if k.starts_with(RESERVED_ENV_PREFIX) || k == ENV_EXEC_MARK {
            Err(format!("{k} is set by hangar"))
        } else {
            Ok(())
        }
    })
}

/// `workdir`: an absolute path.
pub fn workdir(map: &Map<String, Value>) -> Result<Option<String>, ProviderError> {
    match map.get("workdir") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(w)) if w.starts_with('/') && w.len() <= 4096 && !w.contains('\0') => Ok(Some(w.clone())),
        Some(_) => Err(bad("workdir: an absolute path")),
    }
}

/// `user`: a user name as the image's /etc/passwd spells them.
pub fn user(map: &Map<String, Value>) -> Result<Option<String>, ProviderError> {
    match map.get("user") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(u)) if valid_user(u) => Ok(Some(u.clone())),
        Some(_) => Err(bad("user: a user name of the image's /etc/passwd, such as \"user\"")),
    }
}
