//! The pipe protocol between the fuzzer and its worker process: length-prefixed frames
//! (a little-endian `u32` length, then the bytes); inputs go down raw, replies come back as
//! JSON.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

use crate::outcome::Outcome;

/// Where and why a target panicked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PanicReport {
    /// `file:line:column` of the panic.
    pub location: String,
    /// The panic message.
    pub message: String,
    /// The backtrace without the standard library's frames (captured the first time a
    /// location panics in a worker; empty after).
    pub backtrace: String,
}

/// The worker's answer to one input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// The target returned.
    Outcome(Outcome),
    /// The target panicked.
    Panic(PanicReport),
}

/// Writes one frame.
///
/// # Errors
/// I/O errors of `w`, and inputs of 4 GiB or more.
pub fn write_frame(w: &mut impl Write, data: &[u8]) -> io::Result<()> {
    let len = u32::try_from(data.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame of 4 GiB or more"))?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(data)?;
    w.flush()
}

/// Reads one frame; `None` at a clean end of stream.
///
/// # Errors
/// I/O errors of `r`, and a stream that ends inside a frame.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut data = vec![0u8; u32::from_le_bytes(len) as usize];
    r.read_exact(&mut data)?;
    Ok(Some(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"abc").unwrap();
        write_frame(&mut buf, b"").unwrap();
        let mut r = &buf[..];
        assert_eq!(read_frame(&mut r).unwrap().as_deref(), Some(&b"abc"[..]));
        assert_eq!(read_frame(&mut r).unwrap().as_deref(), Some(&b""[..]));
        assert_eq!(read_frame(&mut r).unwrap(), None);
    }
}
