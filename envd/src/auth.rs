//! The access token: set at start-up or by `POST /init`, then required on every route but
//! `GET /health`. Compared in constant time; never logged.
use std::sync::RwLock;

use subtle::ConstantTimeEq;

#[derive(Debug, Default)]
pub struct AccessToken {
    token: RwLock<Option<String>>,
}

impl AccessToken {
    pub fn new(initial: Option<String>) -> Self {
        Self { token: RwLock::new(initial.filter(|t| !t.is_empty())) }
    }

    /// Replaces the token (an empty one clears it, as E2B's `/init` does).
    pub fn set(&self, token: Option<String>) {
        let mut guard = self.token.write().unwrap_or_else(|p| p.into_inner());
        *guard = token.filter(|t| !t.is_empty());
    }

    pub fn is_set(&self) -> bool {
        self.token.read().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Whether a request carrying `presented` may pass.
    pub fn admits(&self, presented: Option<&[u8]>) -> bool {
        let guard = self.token.read().unwrap_or_else(|p| p.into_inner());
        match (guard.as_deref(), presented) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(want), Some(got)) => want.as_bytes().ct_eq(got).into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_until_set_then_exact() {
        let t = AccessToken::new(None);
        assert!(t.admits(None));
        t.set(Some("s3cret".into()));
        assert!(!t.admits(None));
        assert!(!t.admits(Some(b"s3cre")));
        assert!(!t.admits(Some(b"s3cret!")));
        assert!(t.admits(Some(b"s3cret")));
        t.set(Some(String::new()));
        assert!(t.admits(None));
    }
}
