//! `hangar-bench-copy HOST:PORT`: the floor of one hop. Copies its standard input to a TCP
//! connection as it arrives: a blocking read of up to 64 KiB (hangar-envd's read size), written
//! whole before the next read, nothing buffered, `TCP_NODELAY`. Any program standing between a
//! pipe and a socket does at least this, so the bench sets hangar's hops beside it.
use std::{
    fs::File,
    io::{self, Read, Write},
    net::TcpStream,
    os::fd::AsFd,
    process::ExitCode,
};

fn main() -> ExitCode {
    let Some(addr) = std::env::args().nth(1) else {
        eprintln!("usage: hangar-bench-copy HOST:PORT  (copies standard input to that TCP address)");
        return ExitCode::from(2);
    };
    match copy(&addr) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hangar-bench-copy: {addr}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn copy(addr: &str) -> io::Result<()> {
    let mut out = TcpStream::connect(addr)?;
    out.set_nodelay(true)?;
    // The descriptor itself, not `Stdin`'s buffered reader.
    let mut input = File::from(io::stdin().as_fd().try_clone_to_owned()?);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match input.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => out.write_all(&buf[..n])?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}
