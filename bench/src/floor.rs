//! The floor of a hop: a command's output through `hops` minimal copiers (`hangar-bench-copy`),
//! each reading what comes before it (the command's pipe, then the previous copier's socket) and
//! writing it to a TCP socket on loopback, the last one read by the bench. One copier is what the
//! daemon's hop must at least cost (a pipe read, a socket write, one more wake-up); two, what the
//! daemon and the relay together must.

use std::{os::fd::OwnedFd, path::PathBuf, process::Stdio, time::Duration};

use tokio::{
    net::{TcpListener, TcpStream},
    process::{Child, Command},
};

use crate::error::{fail, IoContext, Result};

/// The running path: the command and its copiers (killed when this drops) and the socket the
/// last copier writes to.
pub struct Copies {
    pub stream: TcpStream,
    _children: Vec<Child>,
}

/// The copier beside the bench's own binary (cargo builds both into one directory).
fn copier() -> Result<PathBuf> {
    let exe = std::env::current_exe().ctx("finding hangar-bench's own path")?;
    let path = exe.with_file_name("hangar-bench-copy");
    if path.is_file() {
        Ok(path)
    } else {
        Err(fail("the copier", format!("{} is missing: build -p hangar-bench", path.display())))
    }
}

/// Starts `source` with its standard output through `hops` (at least 1) copiers.
pub async fn through_copies(mut source: Command, hops: usize) -> Result<Copies> {
    let copier = copier()?;
    let mut src = source.stdout(Stdio::piped()).kill_on_drop(true).spawn().ctx("spawning the floor's command")?;
    let out = src.stdout.take().ok_or_else(|| fail("the floor's command", "no stdout"))?;
    let mut input: Stdio = out.into_owned_fd().ctx("the command's stdout")?.into();
    let mut children = vec![src];
    let hops = hops.max(1);
    let mut hop = 1;
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").await.ctx("binding a copier's socket")?;
        let addr = listener.local_addr().ctx("a copier's socket")?;
        let child = Command::new(&copier)
            .arg(addr.to_string())
            .stdin(input)
            .kill_on_drop(true)
            .spawn()
            .ctx("spawning hangar-bench-copy")?;
        children.push(child);
        let (sock, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
            .await
            .map_err(|_| fail("the copier", "did not connect within 10 s"))?
            .ctx("accepting the copier")?;
        sock.set_nodelay(true).ctx("TCP_NODELAY")?;
        if hop == hops {
            return Ok(Copies { stream: sock, _children: children });
        }
        hop += 1;
        // The next copier reads this socket with blocking reads, as it reads a pipe.
        let sock = sock.into_std().ctx("a copier's socket")?;
        sock.set_nonblocking(false).ctx("a copier's socket")?;
        input = OwnedFd::from(sock).into();
    }
}
