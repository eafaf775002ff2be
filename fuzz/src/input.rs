//! Reading a harness's bytes as the parts of its input: a selector byte, small numbers, and the
//! rest. Reads past the end give zeros and empty slices, so every byte string is some input.

/// A cursor over a harness's bytes.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }

    pub fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for x in &mut b {
            *x = self.byte();
        }
        u64::from_be_bytes(b)
    }

    /// Up to the first `\n` (not included), which is consumed; everything when there is none.
    pub fn line(&mut self) -> &'a [u8] {
        match self.data.iter().position(|b| *b == b'\n') {
            Some(i) => {
                let (line, rest) = self.data.split_at(i);
                self.data = &rest[1..];
                line
            }
            None => self.rest(),
        }
    }

    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}

/// Drives a future that does no I/O (the parsers' futures only await in-memory bodies) to its
/// end on this thread: no runtime is needed, and none is started per input.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}
