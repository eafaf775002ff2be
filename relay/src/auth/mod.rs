//! Tokens and ownership.
//!
//! A token's secret is shown once, at creation; the store keeps its SHA-256 (secrets are 256-bit
//! random, so a fast hash loses nothing). Secrets are compared in constant time. Ownership of a
//! process is an HMAC-SHA256, under the relay's key, of its owner, sandbox and id: the agent in a
//! sandbox sees the tag but cannot make one up.
//!
//! Invariant: no secret, hash or MAC key reaches a log line.
pub mod tickets;

use std::{path::Path, sync::Arc};

use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64, Engine as _};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::{
    error::{Error, Result},
    events,
    feed::{Change, Feed},
    store::{self, Store, StoreError, TokenRow},
};

/// The tokens: minting, listing and verifying them, with the store they live in and the feed
/// that hears of a new token's person.
pub struct Tokens {
    store: Arc<Store>,
    feed: Arc<Feed>,
}

pub use crate::store::Scope;

/// Who is calling: a live token.
#[derive(Debug, Clone)]
pub struct Caller {
    pub token_id: String,
    pub name: String,
    pub scope: Scope,
    /// The person behind the token, whose sessions it sees.
    pub person: String,
}

impl Caller {
    /// A token known only by its id (its processes are found by MACs of the id alone): for the
    /// relay's own work on a token's behalf, such as revocation and recovery.
    pub fn of_token(token_id: &str) -> Caller {
        Caller { token_id: token_id.to_string(), name: String::new(), scope: Scope::User, person: String::new() }
    }

    /// Whose things the caller sees: its person's, or everyone's for an admin (`None`).
    pub fn sees(&self) -> Option<&str> {
        (self.scope != Scope::Admin).then_some(self.person.as_str())
    }
}

/// The person a new token belongs to: an id and a display name.
#[derive(Debug, Clone, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Person {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
}

const SECRET_PREFIX: &str = "hgr_";

fn hash(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// Mints a token: the stored row and the secret to show once. The secret embeds the token's id
/// (`hgr_<id>_<random>`) so verification is one lookup and one constant-time comparison.
pub fn mint(name: &str, scope: Scope) -> (TokenRow, String) {
    mint_for(name, scope, None)
}

fn mint_for(name: &str, scope: Scope, person: Option<&Person>) -> (TokenRow, String) {
    let suffix = crate::random::hex(8);
    let secret = format!("{SECRET_PREFIX}{suffix}_{}", B64.encode(crate::random::bytes::<32>()));
    let row = TokenRow {
        id: format!("tok_{suffix}"),
        name: name.to_string(),
        scope,
        hash: hash(&secret),
        created_at: store::now(),
        revoked_at: None,
        person: person.map_or_else(|| name.to_string(), |p| p.id.clone()),
        person_name: person.and_then(|p| p.name.clone()).unwrap_or_else(|| name.to_string()),
    };
    (row, secret)
}

impl Tokens {
    pub fn new(store: Arc<Store>, feed: Arc<Feed>) -> Tokens {
        Tokens { store, feed }
    }

    /// Mints and stores a token named `name` with the scope named `scope` (`POST /api/tokens`),
    /// and tells the feed of its person; the row and the secret, which is shown once and never kept.
    pub async fn create(&self, name: &str, scope: &str, person: Option<&Person>) -> Result<(TokenRow, String)> {
        let scope = Scope::parse(scope)
            .ok_or_else(|| Error::invalid(format!("scope {scope:?}: one of admin, user, mcp, jobs")))?;
        let name = name.trim();
        if name.is_empty() || name.len() > 128 {
            return Err(Error::invalid("name: 1 to 128 characters"));
        }
        if let Some(p) = person {
            if !valid_person(&p.id) || !p.name.as_deref().is_none_or(valid_person) {
                return Err(Error::invalid("person: an id (and a name) of 1 to 128 characters, no control characters"));
            }
        }
        let (row, secret) = mint_for(name, scope, person);
        self.store.insert_token(&row).await?;
        events::TokenCreated { id: &row.id, name: &row.name, scope: scope.as_str() }.emit();
        self.feed.publish(Change::Person { id: &row.person, name: &row.person_name }).await;
        Ok((row, secret))
    }

    /// Every token, revoked ones too (`GET /api/tokens`).
    pub async fn list(&self) -> Result<Vec<TokenRow>> {
        Ok(self.store.tokens().await?)
    }

    /// The caller a request's bearer secret stands for, if it is a live token's.
    pub async fn authenticate(&self, presented: &str) -> std::result::Result<Option<Caller>, StoreError> {
        verify(&self.store, presented).await
    }

    /// The caller a redeemed ticket stands for: its token, while it is live.
    pub async fn ticket_caller(&self, token_id: &str) -> std::result::Result<Option<Caller>, StoreError> {
        caller_of(&self.store, token_id).await
    }
}

/// A person's id or name: 1 to 128 characters, not all blank, no control characters.
pub fn valid_person(s: &str) -> bool {
    !s.trim().is_empty() && s.len() <= 128 && !s.chars().any(char::is_control)
}

/// The most persons one thing (a secret, a sandbox) is shared with.
pub const MAX_SHARED_WITH: usize = 64;

/// A `shared_with` list as a caller gave it, checked (at most `MAX_SHARED_WITH` ids, each a
/// `valid_person`), sorted and without repeats.
pub fn shared_with(mut persons: Vec<String>) -> Result<Vec<String>> {
    if persons.len() > MAX_SHARED_WITH || !persons.iter().all(|p| valid_person(p)) {
        return Err(Error::invalid(format!(
            "shared_with: at most {MAX_SHARED_WITH} person ids, each 1 to 128 characters, no control characters"
        )));
    }
    persons.sort();
    persons.dedup();
    Ok(persons)
}

/// A row for a secret chosen by the operator (`HANGAR_ADMIN_TOKEN`).
pub fn adopt(name: &str, scope: Scope, secret: &str) -> TokenRow {
    TokenRow {
        id: format!("tok_{}", crate::random::hex(8)),
        name: name.to_string(),
        scope,
        hash: hash(secret),
        created_at: store::now(),
        revoked_at: None,
        person: name.to_string(),
        person_name: name.to_string(),
    }
}

/// The live token `presented` is, if any.
pub async fn verify(store: &Store, presented: &str) -> std::result::Result<Option<Caller>, StoreError> {
    if presented.is_empty() {
        return Ok(None);
    }
    let want = hash(presented);
    let candidates = match presented.strip_prefix(SECRET_PREFIX).and_then(|rest| rest.split_once('_')) {
        Some((suffix, _)) => store.token(&format!("tok_{suffix}")).await?.into_iter().collect(),
        // Operator-chosen secrets have no embedded id.
        None => store.tokens_with_hash(&want).await?,
    };
    Ok(candidates.into_iter().find(|t| t.revoked_at.is_none() && bool::from(t.hash.ct_eq(&want))).map(|t| Caller {
        token_id: t.id,
        name: t.name,
        scope: t.scope,
        person: t.person,
    }))
}

/// The caller a live token `token_id` is (for a ticket, which stands for its token): `None` once
/// the token is revoked or gone.
pub async fn caller_of(store: &Store, token_id: &str) -> std::result::Result<Option<Caller>, StoreError> {
    Ok(store.token(token_id).await?.filter(|t| t.revoked_at.is_none()).map(|t| Caller {
        token_id: t.id,
        name: t.name,
        scope: t.scope,
        person: t.person,
    }))
}

/// The relay's MAC key, created 0600 on first start.
#[derive(Clone)]
pub struct MacKey([u8; 32]);

impl MacKey {
    pub fn load_or_create(path: &Path) -> std::io::Result<MacKey> {
        match std::fs::read(path) {
            Ok(b) if b.len() == 32 => {
                let mut k = [0u8; 32];
                k.copy_from_slice(&b);
                Ok(MacKey(k))
            }
            Ok(_) => Err(std::io::Error::other(format!("{} is not a 32-byte key", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let k = crate::random::bytes::<32>();
                use std::io::Write as _;
                use std::os::unix::fs::OpenOptionsExt as _;
                let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
                f.write_all(&k)?;
                f.sync_all()?;
                Ok(MacKey(k))
            }
            Err(e) => Err(e),
        }
    }

    /// A MAC of `parts` (joined unambiguously), base64url, 128 bits.
    pub fn mac(&self, parts: &[&str]) -> String {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        for p in parts {
            m.update(&(p.len() as u64).to_be_bytes());
            m.update(p.as_bytes());
        }
        B64.encode(&m.finalize().into_bytes()[..16])
    }

    pub fn verify(&self, parts: &[&str], mac: &str) -> bool {
        self.mac(parts).as_bytes().ct_eq(mac.as_bytes()).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn minted_tokens_verify_and_revoke() {
        let dir = std::env::temp_dir().join(format!("hangar-auth-test-{}", crate::random::hex(4)));
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&dir.join("db.sqlite"), || {}).await.unwrap();
        let (row, secret) = mint("ci", Scope::User);
        store.insert_token(&row).await.unwrap();
        assert_eq!(verify(&store, &secret).await.unwrap().unwrap().token_id, row.id);
        let mut wrong = secret.clone();
        wrong.pop();
        assert!(verify(&store, &wrong).await.unwrap().is_none());
        store.insert_token(&adopt("admin", Scope::Admin, "operator-secret")).await.unwrap();
        assert_eq!(verify(&store, "operator-secret").await.unwrap().unwrap().scope, Scope::Admin);
        assert!(store.revoke_token(&row.id).await.unwrap());
        assert!(verify(&store, &secret).await.unwrap().is_none());
        assert!(verify(&store, "").await.unwrap().is_none(), "an empty secret is never a token");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn macs_bind_every_part() {
        let dir = std::env::temp_dir().join(format!("hangar-mac-test-{}", crate::random::hex(4)));
        std::fs::create_dir_all(&dir).unwrap();
        let key = MacKey::load_or_create(&dir.join("key")).unwrap();
        let m = key.mac(&["tok_1", "sbx_1", "p1"]);
        assert!(key.verify(&["tok_1", "sbx_1", "p1"], &m));
        assert!(!key.verify(&["tok_1", "sbx_1p", "1"], &m), "parts are length-prefixed");
        let again = MacKey::load_or_create(&dir.join("key")).unwrap();
        assert!(again.verify(&["tok_1", "sbx_1", "p1"], &m), "the key persists");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
