//! Random bytes from the operating system, for secrets, ids and marks. A leaf: the providers
//! and auth both need it, and neither may import the other.

/// `N` random bytes.
pub fn bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // The OS's generator failing is unrecoverable for a process that mints secrets.
    getrandom::fill(&mut b).expect("the operating system's random number generator failed");
    b
}

/// `n` random bytes (at most 32) as lowercase hex.
pub fn hex(n: usize) -> String {
    let b = bytes::<32>();
    b[..n.min(32)].iter().map(|x| format!("{x:02x}")).collect()
}
