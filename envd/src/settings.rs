//! What `/init` may change at run time: global environment variables, default user and workdir.
use std::{collections::BTreeMap, path::PathBuf, sync::RwLock};

use crate::users::User;

#[derive(Debug, Clone)]
pub struct Defaults {
    pub env: BTreeMap<String, String>,
    pub user: User,
    pub workdir: Option<PathBuf>,
}

#[derive(Debug)]
pub struct Settings {
    inner: RwLock<Defaults>,
}

impl Settings {
    pub fn new(d: Defaults) -> Self {
        Self { inner: RwLock::new(d) }
    }

    pub fn get(&self) -> Defaults {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn update(&self, f: impl FnOnce(&mut Defaults)) {
        f(&mut self.inner.write().unwrap_or_else(|p| p.into_inner()));
    }
}
