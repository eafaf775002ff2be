//! Isolating a local sandbox: its daemon starts through util-linux's `unshare` in a PID
//! namespace of its own (where it is PID 1) and a private mount namespace, and its processes
//! run as an unprivileged user of the sandbox's own. The network namespace stays the host's, so
//! the relay reaches the daemon on loopback; the daemon's first stdout line (its address)
//! comes through `unshare` unchanged.
//!
//! Inside, a tmpfs covers the relay's state directory (or its highest ancestor that others
//! cannot enter, such as `/root`, so the sandbox's user can reach its work directory), holding
//! only the path down to the sandbox's own work directory (bound from the host) and a root-only
//! copy of the daemon's token. `/proc` is the namespace's: the sandbox sees its own processes.
//! The user has no passwd entry on the host: inside, `/etc` is a tmpfs of the sandbox's own
//! holding copies of `/etc/passwd` and `/etc/group` with its line added, and, for every other
//! entry of the host's `/etc`, a symbolic link into the host's `/etc` bound whole beneath it. A
//! file bound over a host file is detached when the host replaces that file by a rename (a
//! package install does), which took the sandbox's user away; a directory's bind is not.
use std::{
    io,
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    process::Stdio,
};

/// Where sandbox users' uids come from: 0x70000000 and up, which systemd's allocation leaves
/// unused (its container ranges end below it), 2^24 of them. Each is also its own group.
const UID_BASE: u32 = 0x7000_0000;
const UID_SPAN: u32 = 1 << 24;

/// The PATH the daemon (and through it every process in the sandbox) starts with when the
/// relay has none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Whether this relay can isolate local sandboxes, found once at start.
#[derive(Debug, Clone)]
pub enum Support {
    /// It can: `unshare` is here and made the namespaces when tried.
    Namespaces { unshare: PathBuf },
    /// It cannot, and why.
    Unavailable(String),
}

/// What the daemon's environment may hold: an allow-list, after clearing everything else, so
/// that no secret of the relay's (HANGAR_ADMIN_TOKEN, HANGAR_ENVD_ACCESS_TOKEN, a cloud key)
/// reaches the daemon or the processes it starts.
pub fn daemon_env(home: &Path) -> Vec<(String, String)> {
    let mut env = vec![
        ("PATH".to_string(), std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.to_string())),
        ("HOME".to_string(), home.to_string_lossy().into_owned()),
    ];
    // Locale, time zone and the daemon's log filter: what changes how it prints, nothing more.
    for name in ["LANG", "LC_ALL", "LC_CTYPE", "TZ", "HANGAR_LOG"] {
        if let Ok(v) = std::env::var(name) {
            env.push((name.to_string(), v));
        }
    }
    env
}

pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.to_string());
    path.split(':').chain(DEFAULT_PATH.split(':')).map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

/// Finds out whether local sandboxes can be isolated: the relay must be root, and `unshare`
/// must make a PID and a mount namespace and mount in it (it cannot in a container without
/// CAP_SYS_ADMIN, or on a kernel without those namespaces). `root` is the directory sandboxes
/// live in; the trial mounts a tmpfs over it, inside the trial's namespace only.
pub fn detect(root: &Path, disabled_for_tests: bool) -> Support {
    if disabled_for_tests {
        return Support::Unavailable("turned off by HANGAR_TEST_DISABLE_ISOLATION (for tests)".into());
    }
    // SAFETY: geteuid(2) cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Support::Unavailable(format!(
            "the relay is not root (uid {euid}): it cannot give sandboxes users and namespaces of their own"
        ));
    }
    let Some(unshare) = find_on_path("unshare") else {
        return Support::Unavailable("no `unshare` (util-linux) on PATH".into());
    };
    let trial = std::process::Command::new(&unshare)
        .args(NAMESPACES)
        .args(["/bin/sh", "-c", "test \"$$\" = 1 && mount -t tmpfs -o size=4k hangar-trial \"$1\"", "sh"])
        .arg(root)
        .env_clear()
        .env("PATH", DEFAULT_PATH)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match trial {
        Ok(out) if out.status.success() => Support::Namespaces { unshare },
        Ok(out) => Support::Unavailable(format!(
            "{} could not make a PID and mount namespace ({}): {}",
            unshare.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Support::Unavailable(format!("running {}: {e}", unshare.display())),
    }
}

/// `unshare`'s arguments: a PID namespace whose first process (the daemon, after the script
/// execs it) is PID 1, killed with `unshare` itself (`--kill-child`); a mount namespace whose
/// mounts never reach the host (`private`), with the namespace's own /proc; an IPC namespace
/// (SysV IPC and message queues of its own). The network stays the host's: the relay reaches
/// the daemon on loopback.
const NAMESPACES: [&str; 8] =
    ["--pid", "--fork", "--kill-child", "--mount", "--propagation", "private", "--mount-proc", "--ipc"];

/// Run by /bin/sh as root inside the new namespaces, before the daemon: `$1` an empty staging
/// directory, `$2` the directory to cover, `$3` the sandbox's directory, `$4` the sandbox's files
/// (`layout.rs`'s top, below `$3`), `$5` the daemon's binary; the daemon's arguments follow.
/// - The sandbox's user exists only here: `/etc` is a read-only tmpfs (setuid tools such as chfn
///   write passwd) with the sandbox's passwd and group, and a link for every other entry of the
///   host's `/etc`, into the host's `/etc` bound whole at `/etc/.hangar-host`: what the host
///   changes there, by a rename or in place, the sandbox reads at once (resolv.conf, hosts,
///   certificates). A host entry that is itself a link is copied (a relative target stays
///   right). An entry the host adds later is not seen until the daemon starts again.
/// - POSIX shared memory (/dev/shm) is the sandbox's own, as SysV IPC is (`--ipc`).
/// - The sandbox's files are bound in whole: where they are the mount point of the sandbox's own
///   filesystem (`disk.rs`), the bind is of that filesystem. Other sandboxes' filesystems this
///   namespace copied stay hidden under the tmpfs, and go when their directories are removed.
/// - The tmpfs is built at the staging directory and moved over `$2` in one step at the end,
///   so nothing on the host has to be reached once it is covered.
/// - Its directories are 0711 (umask 066): the sandbox's user passes through to its own
///   files and lists nothing on the way; the token's copy is root's alone (umask 077).
/// - The daemon's binary may lie under what is covered (a build in /root): it is bound where
///   it was.
/// - The daemon gets the umask and environment the script was started with, not the script's
///   (`cd` sets PWD and OLDPWD).
const SCRIPT: &str = r#"set -eu
stage=$1 cover=$2 dir=$3 top=$4 envd=$5
shift 5
mask=$(umask)
etc=$dir/etc
mkdir -p "$etc"
mount -t tmpfs -o mode=0755,nosuid,nodev,size=1m hangar-etc "$etc"
mkdir "$etc/.hangar-host"
mount --rbind /etc "$etc/.hangar-host"
(
    cd /etc
    set --
    for n in * .[!.]* ..?*; do
        case $n in passwd | group | .hangar-host) continue ;; esac
        if [ -L "$n" ]; then
            cp -P -- "$n" "$etc/$n"
        elif [ -e "$n" ]; then
            set -- "$@" "/etc/.hangar-host/$n"
        fi
    done
    [ $# -eq 0 ] || ln -s -- "$@" "$etc/"
)
for f in passwd group; do
    cp -- "$dir/$f" "$etc/$f"
    chmod 0644 "$etc/$f"
done
mount -o remount,ro "$etc"
mount --move "$etc" /etc
if [ -d /dev/shm ]; then
    mount -t tmpfs -o mode=1777,nosuid,nodev hangar-shm /dev/shm
fi
mount -t tmpfs -o mode=0711,nosuid,nodev,size=1m hangar-sandbox "$stage"
inside=$stage${dir#"$cover"}
umask 066
files=$stage${top#"$cover"}
mkdir -p "$files"
mount --bind "$top" "$files"
umask 077
cat "$dir/envd.token" > "$inside/envd.token"
case $envd in
"$cover"/*)
    bin=$stage${envd#"$cover"}
    mkdir -p "${bin%/*}"
    : > "$bin"
    mount --bind "$envd" "$bin"
    ;;
esac
mount --move "$stage" "$cover"
umask "$mask"
cd /
unset OLDPWD PWD
exec "$envd" "$@"
"#;

/// The directory the sandbox's tmpfs covers: the state directory, or its highest ancestor that
/// others cannot pass through (`/root` is 0700), since the sandbox's user must reach its work
/// directory by the same path as on the host (the relay names paths to the daemon by it).
pub fn cover_point(state: &Path) -> PathBuf {
    let mut cover = state.to_path_buf();
    for a in state.ancestors().skip(1) {
        if a.parent().is_none() {
            break;
        }
        if std::fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o001 == 0) {
            cover = a.to_path_buf();
        }
    }
    cover
}

/// The command that starts an isolated daemon: `unshare`, then the script, then the daemon.
/// The script is written to `<dir>/enter.sh` (root's, in root's directory) rather than passed
/// with `sh -c`, so `ps` shows one short line; sh has it open before anything covers it.
pub fn command(
    unshare: &Path,
    stage: &Path,
    cover: &Path,
    dir: &Path,
    top: &Path,
    envd: &Path,
    daemon_args: &[std::ffi::OsString],
) -> io::Result<tokio::process::Command> {
    let script = dir.join("enter.sh");
    std::fs::write(&script, SCRIPT)?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o600))?;
    let mut cmd = tokio::process::Command::new(unshare);
    cmd.args(NAMESPACES).arg("--").arg("/bin/sh").arg(script);
    cmd.arg(stage).arg(cover).arg(dir).arg(top).arg(envd).args(daemon_args);
    Ok(cmd)
}

/// The sandbox user's name: `hangar-` and the first 8 hex digits of the sandbox's id. It
/// exists only inside the sandbox.
pub fn user_name(sandbox_id: &str) -> String {
    let hex = sandbox_id.strip_prefix("sbx_").unwrap_or(sandbox_id);
    format!("hangar-{}", hex.get(..8).unwrap_or(hex))
}

/// A uid for a new sandbox user: random in the reserved range, and owned by nothing that says
/// so (no host passwd entry has it, no other sandbox's work directory under `root` is owned by
/// it), so two sandboxes never share a user.
pub fn allocate_uid(root: &Path) -> io::Result<u32> {
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    let taken_by_host = |uid: u32| passwd.lines().any(|l| l.split(':').nth(2) == Some(uid.to_string().as_str()));
    let taken_by_sandbox = |uid: u32| {
        std::fs::read_dir(root)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| std::fs::metadata(super::Layout::of(&e.path()).top).is_ok_and(|m| m.uid() == uid))
    };
    for _ in 0..64 {
        let r = crate::random::bytes::<4>();
        let uid = UID_BASE + u32::from_le_bytes(r) % UID_SPAN;
        if !taken_by_host(uid) && !taken_by_sandbox(uid) {
            return Ok(uid);
        }
    }
    Err(io::Error::other("no free uid for the sandbox's user after 64 tries"))
}

/// Writes `passwd` and `group` into the sandbox's directory: the host's, without any entry of
/// the same name or id, and the sandbox user's (its own group; its home, `layout.rs`).
pub fn write_user_files(dir: &Path, name: &str, uid: u32, home: &Path) -> io::Result<()> {
    let keep = |text: &str, id_field: usize| -> String {
        text.lines()
            .filter(|l| {
                let f: Vec<&str> = l.split(':').collect();
                f.first() != Some(&name) && f.get(id_field) != Some(&uid.to_string().as_str())
            })
            .map(|l| format!("{l}\n"))
            .collect()
    };
    let passwd = keep(&std::fs::read_to_string("/etc/passwd")?, 2)
        + &format!("{name}:x:{uid}:{uid}:hangar sandbox:{}:/bin/bash\n", home.display());
    let group = keep(&std::fs::read_to_string("/etc/group")?, 2) + &format!("{name}:x:{uid}:\n");
    for (file, text) in [("passwd", passwd), ("group", group)] {
        let path = dir.join(file);
        std::fs::write(&path, text)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(())
}

/// Gives a directory of the sandbox's to its user; with `recursive`, everything in it too (a
/// sandbox that ran as the relay's user before, now isolated). Symbolic links are not followed.
pub fn give_to(dir: &Path, uid: u32, recursive: bool) -> io::Result<()> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(uid))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    if recursive {
        for entry in std::fs::read_dir(dir)? {
            give_all(&entry?.path(), uid)?;
        }
    }
    Ok(())
}

fn give_all(path: &Path, uid: u32) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid))?;
    if std::fs::symlink_metadata(path)?.is_dir() {
        for entry in std::fs::read_dir(path)? {
            give_all(&entry?.path(), uid)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cover_is_the_highest_ancestor_others_cannot_enter() {
        let base = std::env::temp_dir().join(format!("hangar-cover-{}", std::process::id()));
        let closed = base.join("closed");
        let state = closed.join("open").join("state");
        std::fs::create_dir_all(&state).unwrap();
        for (d, mode) in [(&base, 0o755), (&closed, 0o700), (&closed.join("open"), 0o755), (&state, 0o700)] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        assert_eq!(cover_point(&state), closed);
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o711)).unwrap();
        assert_eq!(cover_point(&state), state);
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn user_names_are_short_and_from_the_id() {
        assert_eq!(user_name("sbx_0123456789abcdef"), "hangar-01234567");
    }

    #[test]
    fn the_daemon_env_is_an_allow_list() {
        let env = daemon_env(Path::new("/w"));
        assert!(env
            .iter()
            .all(|(k, _)| ["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HANGAR_LOG"].contains(&k.as_str())));
        assert!(env.contains(&("HOME".into(), "/w".into())));
    }
}
