//! The shell scripts the container providers' fallback exec (`fallback`) runs in a sandbox: in a
//! container through Docker's exec API, in a pod through its `exec` subresource. Each is the
//! program of `bash -c`, followed by a name for `$0` and its inputs as `$1`, `$2`, ...: no input
//! (a client's command or path among them) is ever spliced into a script's text.

/// Runs the command after moving to its directory: `cwd` (absolute, `~`, `~/...`, or relative
/// to the sandbox's workdir), else the sandbox's workdir, else the user's home, as the daemon
/// resolves them. Arguments: $1 cwd, $2 workdir, $3 command, $4 a mark made for this exec.
/// Why a script: `~` and relative paths need the user's home, which only the container knows.
/// A directory that cannot be entered fails the command rather than running it elsewhere: the
/// script prints the mark alone on stderr and exits 1, which the provider tells apart from any
/// command's failure (the command has not run, so cannot know the mark yet). The command runs
/// in a login shell (`bash -lc`, what `Provider::exec` promises), which replaces the script
/// (`exec`), so the command's exit code is the exec's.
/// The daemon's token is no business of the command's (the daemon does not pass it on either):
/// the container's environment carries it (`options::ENV_TOKEN`) and an exec inherits it, so
/// the script drops it first.
pub(crate) const EXEC_SCRIPT: &str = r#"unset HANGAR_ENVD_ACCESS_TOKEN
base=${2:-$HOME}; d=${1:-$base}
case $d in "~") d=$HOME ;; "~/"*) d=$HOME/${d#"~/"} ;; /*) ;; *) d=$base/$d ;; esac
cd -- "$d" 2>/dev/null || { printf '%s\n' "$4" >&2; exit 1; }
exec bash -lc "$3""#;

/// Makes the sandbox's workdir ($1) when the image lacks it, owned by the sandbox's user ($2,
/// when there is one), so commands can write there. Run as root.
/// Why: the `workdir` option is passed to the daemon and to each exec, not given to Docker as
/// the container's working directory, so nothing else creates it; and the user may not be
/// allowed to create it where it is. A directory the image already has is left as it is. A user
/// name `u` becomes `u:` (chown's "the user and their login group"); an image's `uid:gid` is
/// taken as it is.
pub(crate) const WORKDIR_SCRIPT: &str = r#"[ -d "$1" ] && exit 0
mkdir -p -- "$1" || exit 1
[ -z "$2" ] && exit 0
case $2 in *:*) owner=$2 ;; *) owner=$2: ;; esac
chown -- "$owner" "$1""#;

/// Kills, with SIGKILL, every process whose environment carries the exec's mark ($1).
/// Why: neither Docker nor Kubernetes has a call that kills an exec, and a command's processes
/// may leave its process group or outlive its shell. Each inherits the exec's environment,
/// where `options::ENV_EXEC_MARK` (`HANGAR_EXEC`) holds a mark made for that one exec, so
/// `/proc/<pid>/environ` finds them all (all but a process that empties its own environment).
/// The script itself does not carry the mark: it gets it as an argument.
pub(crate) const KILL_SCRIPT: &str = r#"for d in /proc/[0-9]*; do
  while IFS= read -r -d '' kv; do
    if [[ $kv == "HANGAR_EXEC=$1" ]]; then kill -KILL "${d#/proc/}" 2>/dev/null; break; fi
  done 2>/dev/null < "$d/environ"
done"#;
