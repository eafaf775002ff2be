//! Named secrets for agents (`ANTHROPIC_API_KEY`, `CLAUDE_CODE_OAUTH_TOKEN`, ...): kept in the
//! store, handed to a turn's harness as environment variables of the same name, and redacted
//! from everything hangar stores or streams from a turn.
//!
//! Invariants: a value is never returned, logged, or written to a sandbox's disk by hangar (it
//! reaches the harness through the daemon's or the provider's process environment). The one
//! redaction step is `redactor()`; it knows every secret stored now (a deleted secret is no
//! longer redacted from what comes after).
use std::sync::{Arc, RwLock};

use hangar_agents::Redactor;
use serde::Serialize;

use crate::{
    error::{Error, Result},
    events,
    store::Store,
};

/// Shorter values would redact ordinary words.
pub const MIN_VALUE_BYTES: usize = 8;
pub const MAX_VALUE_BYTES: usize = 16 * 1024;

pub struct Secrets {
    store: Arc<Store>,
    redactor: RwLock<Arc<Redactor>>,
}

#[derive(Debug, Serialize)]
pub struct SecretView {
    pub name: String,
    pub created_at: i64,
}

/// A secret's name is the environment variable the harness gets it in.
pub fn valid_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name.bytes().next().is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

impl Secrets {
    pub fn new(store: Arc<Store>) -> Result<Secrets> {
        let redactor = Redactor::new(store.secret_values()?);
        Ok(Secrets { store, redactor: RwLock::new(Arc::new(redactor)) })
    }

    /// The redaction step every text from a turn passes before it is stored or streamed.
    pub fn redactor(&self) -> Arc<Redactor> {
        self.redactor.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn reload(&self) -> Result<()> {
        let fresh = Arc::new(Redactor::new(self.store.secret_values()?));
        *self.redactor.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(())
    }

    /// Creates or replaces a secret.
    pub fn put(&self, name: &str, value: &str) -> Result<SecretView> {
        if !valid_name(name) {
            return Err(Error::invalid(format!(
                "name {name:?}: an environment variable's name in capitals (A-Z, 0-9, _), such as ANTHROPIC_API_KEY"
            )));
        }
        if !(MIN_VALUE_BYTES..=MAX_VALUE_BYTES).contains(&value.len()) {
            return Err(Error::invalid(format!("value: {MIN_VALUE_BYTES} to {MAX_VALUE_BYTES} bytes")));
        }
        if value.chars().any(|c| c.is_control()) {
            return Err(Error::invalid("value: no control characters (newlines, NUL)"));
        }
        self.store.put_secret(name, value)?;
        self.reload()?;
        events::SecretChanged { name, change: "stored" }.emit();
        let created_at = self.store.secret_names()?.into_iter().find(|(n, _)| n == name).map_or(0, |(_, at)| at);
        Ok(SecretView { name: name.to_string(), created_at })
    }

    pub fn list(&self) -> Result<Vec<SecretView>> {
        Ok(self.store.secret_names()?.into_iter().map(|(name, created_at)| SecretView { name, created_at }).collect())
    }

    pub fn delete(&self, name: &str) -> Result<()> {
        if !self.store.delete_secret(name)? {
            return Err(Error::not_found(format!("no secret {name:?}")));
        }
        self.reload()?;
        events::SecretChanged { name, change: "deleted" }.emit();
        Ok(())
    }

    /// Refuses names of secrets that do not exist.
    pub fn check_exist(&self, names: &[String]) -> Result<()> {
        let have = self.store.secret_names()?;
        match names.iter().find(|n| !have.iter().any(|(h, _)| h == *n)) {
            Some(missing) => Err(Error::invalid(format!("secrets: no secret {missing:?} (POST /api/secrets first)"))),
            None => Ok(()),
        }
    }

    /// The values of `names`, as a harness's environment.
    pub fn values(&self, names: &[String]) -> Result<Vec<(String, String)>> {
        let all = self.store.secret_values()?;
        Ok(all.into_iter().filter(|(n, _)| names.contains(n)).collect())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_environment_variables() {
        assert!(super::valid_name("ANTHROPIC_API_KEY") && super::valid_name("_X1"));
        assert!(!super::valid_name("lower") && !super::valid_name("1ABC") && !super::valid_name("A-B"));
    }
}
