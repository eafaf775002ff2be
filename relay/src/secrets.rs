//! Named secrets for agents (`ANTHROPIC_API_KEY`, `CLAUDE_CODE_OAUTH_TOKEN`, ...): kept in the
//! store, handed to a turn's harness as environment variables of the same name, and redacted
//! from everything hangar stores or streams from a turn.
//!
//! **Owners.** A secret belongs to a person (its `owner`), or to the admins (`owner` `""`: what
//! an admin makes without naming a person, and every secret from before secrets had owners).
//! Its owner (or an admin) may share it with other persons (`shared_with`). A session may use a
//! secret of the caller's person, one shared with that person, and the admins' only when the
//! caller is an admin or the harness profile itself lists the secret (the operator's word).
//! Naming any other secret is refused exactly as naming one that does not exist, so a refusal
//! tells nobody which names exist.
//!
//! Invariants: a value is never returned, logged, or written to a sandbox's disk by hangar (it
//! reaches the harness through the daemon's or the provider's process environment). The one
//! redaction step is `redactor()`; it knows every secret stored now, whoever owns it (a deleted
//! secret is no longer redacted from what comes after).
use std::sync::{Arc, RwLock};

use hangar_agents::Redactor;
use serde::Serialize;

use crate::{
    auth::{self, valid_person, Caller},
    error::{Error, Result},
    events,
    store::{Scope, SecretRow, Store},
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
    /// The person it belongs to; `null`: the admins'.
    pub person: Option<String>,
    pub shared_with: Vec<String>,
    pub created_at: i64,
}

impl From<SecretRow> for SecretView {
    fn from(r: SecretRow) -> SecretView {
        SecretView {
            name: r.name,
            person: Some(r.owner).filter(|o| !o.is_empty()),
            shared_with: r.shared_with,
            created_at: r.created_at,
        }
    }
}

/// Who a new secret is for and who may use it besides, as a caller asked.
#[derive(Debug, Default)]
pub struct NewSecret {
    pub name: String,
    pub value: String,
    /// A person's id: only an admin may name another person than its own (`Some(None)`: the
    /// admins'). Absent: the caller's person, or for an admin the admins'.
    pub person: Option<Option<String>>,
    pub shared_with: Vec<String>,
}

/// Which of a caller's secrets a session uses: its name and its owner.
#[derive(Debug, Clone, PartialEq)]
pub struct Chosen {
    pub name: String,
    pub owner: String,
}

impl Chosen {
    /// How concurrency and plan usage count it: the admins' secret by its name, a person's
    /// also by whose it is (two persons' keys of one name are two accounts).
    pub fn credential(&self) -> String {
        if self.owner.is_empty() {
            self.name.clone()
        } else {
            format!("{}@{}", self.name, self.owner)
        }
    }
}

/// A secret's name is the environment variable the harness gets it in.
pub fn valid_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name.bytes().next().is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// The refusal for a secret the caller may not use, the same whether or not it exists.
fn unusable(name: &str) -> Error {
    Error::Forbidden(format!("secrets: no secret {name:?} that you may use"))
}

/// Whether `person` may use `row` (the admins' aside, which the caller decides).
fn usable_by(row: &SecretRow, person: &str) -> bool {
    (!row.owner.is_empty() && row.owner == person) || row.shared_with.iter().any(|p| p == person)
}

impl Secrets {
    pub async fn new(store: Arc<Store>) -> Result<Secrets> {
        let redactor = Redactor::new(store.secret_values().await?);
        Ok(Secrets { store, redactor: RwLock::new(Arc::new(redactor)) })
    }

    /// The redaction step every text from a turn passes before it is stored or streamed.
    pub fn redactor(&self) -> Arc<Redactor> {
        self.redactor.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    async fn reload(&self) -> Result<()> {
        let fresh = Arc::new(Redactor::new(self.store.secret_values().await?));
        *self.redactor.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(())
    }

    /// The owner a caller's create or delete acts on.
    fn owner_for(caller: &Caller, person: Option<Option<String>>) -> Result<String> {
        let admin = caller.scope == Scope::Admin;
        match person {
            None if admin => Ok(String::new()),
            None => Ok(caller.person.clone()),
            Some(p) if admin => Ok(p.unwrap_or_default()),
            Some(Some(p)) if p == caller.person => Ok(p),
            Some(_) => Err(Error::Forbidden("person: only an admin may name another person's secrets".into())),
        }
    }

    /// Creates or replaces a secret of the caller's person (or, for an admin, of the person it
    /// names or the admins').
    pub async fn put(&self, caller: &Caller, new: NewSecret) -> Result<SecretView> {
        let NewSecret { name, value, person, shared_with } = new;
        if !valid_name(&name) {
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
        if let Some(Some(p)) = &person {
            if !valid_person(p) {
                return Err(Error::invalid("person: an id of 1 to 128 characters, no control characters"));
            }
        }
        let shared_with = auth::shared_with(shared_with)?;
        let owner = Self::owner_for(caller, person)?;
        self.store.put_secret(&owner, &name, &value, &shared_with).await?;
        self.reload().await?;
        events::SecretChanged { name: &name, owner: &owner, change: "stored" }.emit();
        self.store
            .secrets()
            .await?
            .into_iter()
            .find(|r| r.owner == owner && r.name == name)
            .map(SecretView::from)
            .ok_or_else(|| Error::not_found(format!("secret {name:?} was not stored")))
    }

    /// The secrets a caller may see: an admin every one; a person its own and those shared with
    /// it (names, owners and sharing; never values).
    pub async fn list(&self, caller: &Caller) -> Result<Vec<SecretView>> {
        let rows = self.store.secrets().await?.into_iter();
        Ok(match caller.scope {
            Scope::Admin => rows.map(SecretView::from).collect(),
            _ => rows.filter(|r| usable_by(r, &caller.person)).map(SecretView::from).collect(),
        })
    }

    /// Deletes the caller's person's secret `name` (an admin: the named person's, or the
    /// admins'). Not found when there is none the caller may delete.
    pub async fn delete(&self, caller: &Caller, name: &str, person: Option<Option<String>>) -> Result<()> {
        let owner = Self::owner_for(caller, person)?;
        if !self.store.delete_secret(&owner, name).await? {
            return Err(Error::not_found(format!("no secret {name:?} of yours")));
        }
        self.reload().await?;
        events::SecretChanged { name, owner: &owner, change: "deleted" }.emit();
        Ok(())
    }

    /// Chooses, for each name a session asks for, the secret it uses: the caller's person's,
    /// else one shared with that person (the first owner by id), else the admins' where the
    /// caller is an admin or `granted` (the harness profile) lists the name. Anything else is
    /// refused as if it did not exist.
    pub async fn choose(&self, caller: &Caller, names: &[String], granted: &[String]) -> Result<Vec<Chosen>> {
        let rows = self.store.secrets().await?;
        names
            .iter()
            .map(|name| {
                let of_name = || rows.iter().filter(|r| &r.name == name);
                let admins = caller.scope == Scope::Admin || granted.contains(name);
                of_name()
                    .find(|r| !r.owner.is_empty() && r.owner == caller.person)
                    .or_else(|| of_name().find(|r| r.shared_with.contains(&caller.person)))
                    .or_else(|| of_name().find(|r| r.owner.is_empty() && admins))
                    .map(|r| Chosen { name: name.clone(), owner: r.owner.clone() })
                    .ok_or_else(|| unusable(name))
            })
            .collect()
    }

    /// The values of a session's secrets, as its harness's environment: each still the
    /// session's person's to use (the admins' were granted when the session started). A secret
    /// deleted or no longer shared since is refused.
    pub async fn values(&self, person: &str, chosen: &[Chosen]) -> Result<Vec<(String, String)>> {
        let rows = self.store.secrets().await?;
        let mut values = Vec::with_capacity(chosen.len());
        for c in chosen {
            let row = rows.iter().find(|r| r.owner == c.owner && r.name == c.name);
            let still = row.is_some_and(|r| r.owner.is_empty() || usable_by(r, person));
            let value = if still { self.store.secret_value(&c.owner, &c.name).await? } else { None };
            values.push(value.map(|v| (c.name.clone(), v)).ok_or_else(|| unusable(&c.name))?);
        }
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_environment_variables() {
        assert!(valid_name("ANTHROPIC_API_KEY") && valid_name("_X1"));
        assert!(!valid_name("lower") && !valid_name("1ABC") && !valid_name("A-B"));
    }

    fn caller(scope: Scope, person: &str) -> Caller {
        Caller { token_id: "tok_1".into(), name: person.into(), scope, person: person.into() }
    }

    async fn secrets() -> (std::path::PathBuf, Secrets) {
        let dir = std::env::temp_dir().join(format!("hangar-secrets-test-{}", crate::random::hex(4)));
        std::fs::create_dir_all(&dir).unwrap();
        let store = Arc::new(Store::open(&dir.join("db.sqlite"), || {}).await.unwrap());
        (dir, Secrets::new(store).await.unwrap())
    }

    fn new(name: &str, person: Option<Option<&str>>, shared: &[&str]) -> NewSecret {
        NewSecret {
            name: name.into(),
            value: format!("value-of-{name}-{person:?}"),
            person: person.map(|p| p.map(str::to_string)),
            shared_with: shared.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[tokio::test]
    async fn a_person_uses_its_own_its_shared_and_never_anothers() {
        let (dir, s) = secrets().await;
        let (admin, ada, bob) = (caller(Scope::Admin, "root"), caller(Scope::User, "ada"), caller(Scope::User, "bob"));
        s.put(&admin, new("ADMIN_KEY", None, &[])).await.unwrap();
        s.put(&ada, new("ADA_KEY", None, &["carol"])).await.unwrap();
        s.put(&bob, new("SHARED_KEY", None, &["ada"])).await.unwrap();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let chosen = s.choose(&ada, &names(&["ADA_KEY", "SHARED_KEY"]), &[]).await.unwrap();
        assert_eq!(chosen[1], Chosen { name: "SHARED_KEY".into(), owner: "bob".into() });
        // Another person's, the admins' and a missing one are refused alike.
        let mut refusals = Vec::new();
        for name in ["NO_SUCH_KEY", "ADA_KEY", "ADMIN_KEY"] {
            refusals.push(s.choose(&bob, &names(&[name]), &[]).await.unwrap_err().to_string().replace(name, "X"));
        }
        assert!(refusals.iter().all(|r| *r == refusals[0]), "{refusals:?}");
        // The admins' by the harness profile's word, and by an admin.
        assert!(s.choose(&bob, &names(&["ADMIN_KEY"]), &names(&["ADMIN_KEY"])).await.is_ok());
        assert!(s.choose(&admin, &names(&["ADMIN_KEY"]), &[]).await.is_ok());
        // A person cannot make another's, nor the admins'.
        assert!(matches!(s.put(&bob, new("X_KEY", Some(Some("ada")), &[])).await, Err(Error::Forbidden(_))));
        assert!(matches!(s.put(&bob, new("X_KEY", Some(None), &[])).await, Err(Error::Forbidden(_))));
        // Unshared after the start: the next turn's values are refused.
        let values = s.values("ada", &chosen).await.unwrap();
        assert_eq!(values[1].0, "SHARED_KEY");
        s.put(&bob, new("SHARED_KEY", None, &[])).await.unwrap();
        assert!(matches!(s.values("ada", &chosen).await, Err(Error::Forbidden(_))));
        // Lists: a person sees its own and what is shared with it.
        let listed: Vec<String> =
            s.list(&caller(Scope::User, "carol")).await.unwrap().into_iter().map(|v| v.name).collect();
        assert_eq!(listed, ["ADA_KEY"]);
        assert_eq!(s.list(&admin).await.unwrap().len(), 3);
        // Every value is redacted, whoever owns it.
        assert!(s.redactor().text("value-of-ADA_KEY-None").contains("[redacted:ADA_KEY]"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
