//! Unix users: who a call acts as, resolved from the passwd database.
use std::{ffi::CString, path::PathBuf};

use nix::unistd::{Gid, Group, Uid, User as NixUser};

use crate::error::RpcError;

/// A resolved Unix user a process runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    /// Supplementary groups, resolved before fork: nothing after fork may read /etc/group.
    pub groups: Vec<u32>,
}

impl User {
    /// Looks a user up by name.
    pub fn by_name(name: &str) -> Result<User, RpcError> {
        let u = NixUser::from_name(name)
            .map_err(|e| RpcError::internal(format!("looking up user {name:?}: {e}")))?
            .ok_or_else(|| RpcError::unauthenticated(format!("unknown user {name:?}")))?;
        Ok(Self::from_nix(u))
    }

    /// The user the daemon itself runs as.
    pub fn current() -> Result<User, RpcError> {
        let uid = Uid::current();
        match NixUser::from_uid(uid) {
            Ok(Some(u)) => Ok(Self::from_nix(u)),
            // A uid with no passwd entry (common in containers run with --user): still usable.
            _ => Ok(User {
                name: uid.to_string(),
                uid: uid.as_raw(),
                gid: Gid::current().as_raw(),
                home: std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| "/".into()),
                groups: vec![],
            }),
        }
    }

    fn from_nix(u: NixUser) -> User {
        let groups = CString::new(u.name.as_str())
            .ok()
            .and_then(|c| nix::unistd::getgrouplist(&c, u.gid).ok())
            .map(|g| g.into_iter().map(Gid::as_raw).collect())
            .unwrap_or_default();
        User { name: u.name, uid: u.uid.as_raw(), gid: u.gid.as_raw(), home: u.dir, groups }
    }

    /// The group's name, for display.
    pub fn group_name(&self) -> String {
        Group::from_gid(Gid::from_raw(self.gid)).ok().flatten().map(|g| g.name).unwrap_or_else(|| self.gid.to_string())
    }
}

/// Whether the daemon can act as other users.
pub fn can_switch_users() -> bool {
    Uid::effective().is_root()
}
