//! The floor of a hop: a command's output through `hops` minimal copiers (`hangar-bench-copy`),
//! each reading what comes before it (the command's pipe, then the previous copier's socket) and
//! writing it to a TCP socket, the last one read by the bench. One copier is what the daemon's
//! hop must at least cost (a pipe read, a socket write, one more wake-up); two, what the daemon
//! and the relay together must. The first copier runs where the path it is set beside starts: in
//! the sandbox's container for the streaming rows (so its socket crosses the same Docker bridge
//! as the daemon's), on the host for the throughput floor (whose daemon is on the host).
//!
//! The throughput floor has a second form read by the same gRPC client as hangar: one copier
//! serving the pipe as envd's `Start` stream (`hangar-bench-copy-grpc`, [`grpc_copier`]), so
//! that the client's own decoding, which shares the machine's cores, is on both sides.

use std::{
    net::{IpAddr, SocketAddr},
    os::fd::OwnedFd,
    path::PathBuf,
    process::Stdio,
    time::Duration,
};

use tokio::{
    net::{TcpListener, TcpStream},
    process::{Child, Command},
};

use crate::error::{fail, IoContext, Result};

/// Where the first copier runs.
pub enum First {
    /// On the host, reading this command's standard output.
    Host(Command),
    /// In a running container: `bash -lc script` piped into a copier copied into it, which sends
    /// to the host at the container network's gateway address.
    Container { name: String, script: String },
}

/// The running path: the command and its copiers (killed when this drops) and the socket the
/// last copier writes to.
pub struct Copies {
    pub stream: TcpStream,
    _children: Vec<Child>,
    /// The copiers started on the host, for their CPU time.
    host_copiers: Vec<u32>,
}

impl Copies {
    /// The CPU time the copiers on the host used in all, once each has exited (the path's end of
    /// file): the floor of a hop's CPU cost. Each is waited for without being reaped, since a
    /// reaped process's `/proc` entry, and its CPU time, are gone.
    pub async fn host_copiers_cpu_seconds(&self) -> Result<f64> {
        let mut all = 0.0;
        for &pid in &self.host_copiers {
            tokio::task::spawn_blocking(move || exited_unreaped(pid))
                .await
                .map_err(|e| fail("waiting for a copier", e))??;
            all += hangar_e2e::procfs::cpu_seconds(pid).ctx("a copier's CPU time")?;
        }
        Ok(all)
    }
}

/// Waits until the child `pid` has exited, leaving it a zombie (`WNOWAIT`).
fn exited_unreaped(pid: u32) -> Result<()> {
    loop {
        // SAFETY: siginfo_t is plain data, for which all zeroes is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes only into `info`, which outlives the call.
        let r = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(fail("waiting for a copier", e));
        }
    }
}

/// The copier beside the bench's own binary (cargo builds both into one directory).
fn copier() -> Result<PathBuf> {
    beside_bench("hangar-bench-copy")
}

/// One of the bench's helper programs, beside its own binary.
fn beside_bench(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().ctx("finding hangar-bench's own path")?;
    let path = exe.with_file_name(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(fail(name, format!("{} is missing: build -p hangar-bench", path.display())))
    }
}

/// The floor of one hop read by a gRPC client: `source`'s standard output served by
/// `hangar-bench-copy-grpc` as envd's `Start` stream (both killed when this drops).
pub struct GrpcCopier {
    /// Where the copier serves its one call.
    pub url: String,
    /// The copier's process, for its CPU time.
    pub pid: u32,
    _children: [Child; 2],
}

/// Starts `source` and a gRPC copier reading its standard output.
pub async fn grpc_copier(mut source: Command) -> Result<GrpcCopier> {
    let mut src = source.stdout(Stdio::piped()).kill_on_drop(true).spawn().ctx("spawning the floor's command")?;
    let out = src.stdout.take().ok_or_else(|| fail("the floor's command", "no stdout"))?;
    let mut copier = Command::new(beside_bench("hangar-bench-copy-grpc")?)
        .stdin(Stdio::from(out.into_owned_fd().ctx("the command's stdout")?))
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .ctx("spawning hangar-bench-copy-grpc")?;
    let pid = copier.id().ok_or_else(|| fail("hangar-bench-copy-grpc", "exited at once"))?;
    let stdout = copier.stdout.take().ok_or_else(|| fail("hangar-bench-copy-grpc", "no stdout"))?;
    let mut line = String::new();
    let mut stdout = tokio::io::BufReader::new(stdout);
    let read = tokio::io::AsyncBufReadExt::read_line(&mut stdout, &mut line);
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .map_err(|_| fail("hangar-bench-copy-grpc", "printed no address within 10 s"))?
        .ctx("reading hangar-bench-copy-grpc's address")?;
    let addr: SocketAddr =
        line.trim().parse().map_err(|_| fail("hangar-bench-copy-grpc", format!("{line:?} is not an address")))?;
    Ok(GrpcCopier { url: format!("http://{addr}"), pid, _children: [src, copier] })
}

/// Where the copier is inside the bench's images: bench/run builds them with it, and with the
/// libraries it needs (images/build-test-images, `HANGAR_IMAGE_ALSO`).
const IN_CONTAINER: &str = "/usr/local/bin/hangar-bench-copy";

/// Fails clearly, before a run is timed, when `container`'s image lacks the copier (images built
/// by hand without `HANGAR_IMAGE_ALSO`).
pub fn check_installed(container: &str) -> Result<()> {
    let out = std::process::Command::new("docker")
        // bash's own `test`: the images carry no `test` program.
        .args(["exec", container, "bash", "-c", r#"[ -x "$0" ]"#, IN_CONTAINER])
        .output()
        .ctx("docker exec")?;
    if !out.status.success() {
        return Err(fail(
            "the floor's copier",
            format!("{container}'s image has no {IN_CONTAINER}: build the images with bench/run (HANGAR_IMAGE_ALSO)"),
        ));
    }
    Ok(())
}

/// The host's address on `container`'s network.
fn gateway(container: &str) -> Result<IpAddr> {
    let out = std::process::Command::new("docker")
        .args(["inspect", "--format", "{{range .NetworkSettings.Networks}}{{.Gateway}} {{end}}", container])
        .output()
        .ctx("docker inspect")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.split_whitespace().next().unwrap_or_default();
    first.parse().map_err(|_| fail("the container's gateway", format!("{text:?} is not an address")))
}

async fn accept(listener: &TcpListener) -> Result<TcpStream> {
    let (sock, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
        .await
        .map_err(|_| fail("the copier", "did not connect within 10 s"))?
        .ctx("accepting the copier")?;
    sock.set_nodelay(true).ctx("TCP_NODELAY")?;
    Ok(sock)
}

/// One copier on the host from `input` to a new loopback socket: the copier and the socket.
pub async fn copy_from(input: Stdio) -> Result<(Child, TcpStream)> {
    let listener = TcpListener::bind("127.0.0.1:0").await.ctx("binding a copier's socket")?;
    let addr = listener.local_addr().ctx("a copier's socket")?;
    let child = Command::new(copier()?)
        .arg(addr.to_string())
        .stdin(input)
        .kill_on_drop(true)
        .spawn()
        .ctx("spawning hangar-bench-copy")?;
    Ok((child, accept(&listener).await?))
}

/// Starts the first copier as `first` says and `hops - 1` more on the host after it (at least
/// one in all); the returned socket carries the command's output.
pub async fn through_copies(first: First, hops: usize) -> Result<Copies> {
    let mut children = Vec::new();
    let mut host_copiers = Vec::new();
    let mut sock = match first {
        First::Host(mut source) => {
            let mut src =
                source.stdout(Stdio::piped()).kill_on_drop(true).spawn().ctx("spawning the floor's command")?;
            let out = src.stdout.take().ok_or_else(|| fail("the floor's command", "no stdout"))?;
            children.push(src);
            let (child, sock) = copy_from(out.into_owned_fd().ctx("the command's stdout")?.into()).await?;
            host_copiers.extend(child.id());
            children.push(child);
            sock
        }
        First::Container { name, script } => {
            let listener =
                TcpListener::bind(SocketAddr::new(gateway(&name)?, 0)).await.ctx("binding a copier's socket")?;
            let addr = listener.local_addr().ctx("a copier's socket")?;
            // The script and the address as positional parameters: nothing is quoted into a command.
            children.push(
                Command::new("docker")
                    .args(["exec", &name, "bash", "-c", &format!(r#"bash -lc "$0" | {IN_CONTAINER} "$1""#)])
                    .arg(&script)
                    .arg(addr.to_string())
                    .stdin(Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .ctx("docker exec")?,
            );
            accept(&listener).await?
        }
    };
    for _ in 1..hops.max(1) {
        // The next copier reads this socket with blocking reads, as the first reads a pipe.
        let std = sock.into_std().ctx("a copier's socket")?;
        std.set_nonblocking(false).ctx("a copier's socket")?;
        let (child, next) = copy_from(Stdio::from(OwnedFd::from(std))).await?;
        host_copiers.extend(child.id());
        children.push(child);
        sock = next;
    }
    Ok(Copies { stream: sock, _children: children, host_copiers })
}
