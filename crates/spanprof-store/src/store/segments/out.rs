//! The buffer an index section is encoded into, handed on to the file every
//! [`SPILL_BYTES`] so a seal never holds a whole section in memory.

/// What `encode` writes to an [`Out`], gathered.
#[cfg(test)]
pub(super) fn in_memory(encode: impl FnOnce(&mut Out) -> std::io::Result<()>) -> Vec<u8> {
    let mut whole = Vec::new();
    let mut keep = |bytes: &[u8]| {
        whole.extend_from_slice(bytes);
        Ok(())
    };
    let mut out = Out::new(&mut keep);
    encode(&mut out)
        .and_then(|()| out.finish())
        .expect("encodes to memory");
    whole
}

/// Bytes an index section is encoded in before they are handed on ([`Out`]): the pieces
/// `file::Pieces` writes.
pub(super) const SPILL_BYTES: usize = 1 << 20;

/// Where an index section is encoded: `buf`, handed to `spill` each time it holds
/// [`SPILL_BYTES`] (and at the end), then reused. A seal's sections are tens of MB: encoded
/// whole before they were written, they took as much memory again, in fresh pages the
/// kernel faulted in and zeroed (2 % of the server's CPU under the load bench).
pub(super) struct Out<'s> {
    pub(super) buf: Vec<u8>,
    spill: &'s mut dyn FnMut(&[u8]) -> std::io::Result<()>,
}

impl<'s> Out<'s> {
    pub(super) fn new(spill: &'s mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> Self {
        Out {
            buf: Vec::with_capacity(SPILL_BYTES + 4096),
            spill,
        }
    }

    /// Hands the bytes on once there are [`SPILL_BYTES`] of them.
    pub(super) fn spill(&mut self) -> std::io::Result<()> {
        if self.buf.len() >= SPILL_BYTES {
            (self.spill)(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Hands on what is left.
    pub(super) fn finish(self) -> std::io::Result<()> {
        (self.spill)(&self.buf)
    }
}
